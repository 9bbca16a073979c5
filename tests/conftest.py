"""Shared test set-up."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

ANALYSES = Path(__file__).resolve().parents[1] / "analyses"

# One intra-op thread: on a loaded 2-core machine, torch's thread pool spins and small
# tensor ops get ~100x slower; one thread also makes float reductions reproducible.
torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def oracle_cache(tmp_path_factory):
    """Fitted oracles go to a cache of the test session (subprocesses inherit it), not
    to the user's."""
    before = os.environ.get("RECOURSE_SIM_CACHE")
    os.environ["RECOURSE_SIM_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if before is None:
        os.environ.pop("RECOURSE_SIM_CACHE", None)
    else:
        os.environ["RECOURSE_SIM_CACHE"] = before


@pytest.fixture(scope="session")
def analysis_script():
    """Load a script of analyses/ as a module (analyses/ is not part of the package)."""
    loaded: dict[str, object] = {}

    def load(name: str):
        if name not in loaded:
            path = ANALYSES / f"{name}.py"
            spec = importlib.util.spec_from_file_location(f"analysis_{name}", path)
            assert spec is not None and spec.loader is not None, path
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module  # dataclasses look their module up there
            spec.loader.exec_module(module)
            loaded[spec.name] = module
        return loaded[f"analysis_{name}"]

    yield load
    for module_name in loaded:
        sys.modules.pop(module_name, None)
