"""Fuzz: mutated scenario documents load or raise a `RecourseSimError`, nothing else.

Each example takes a bundled scenario, applies a few mutations (drop a key, rename it,
misspell it, swap a value for one of another type, corrupt the YAML text) and loads the
result from a file, optionally with a random ``--set`` override. `load_scenario` must
either return a Scenario or raise a subclass of `RecourseSimError` — no other exception
(KeyError, TypeError, pydantic's ValidationError, yaml's errors) may escape.

The committed test runs a few hundred examples; ``FUZZ_EXAMPLES=10000`` runs more.
"""

from __future__ import annotations

import functools
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recourse_sim.errors import RecourseSimError
from recourse_sim.scenarios import load_scenario

BUNDLED = sorted((Path(__file__).parents[1] / "scenarios").glob("*.yaml"))


@functools.cache
def _bundled_docs() -> list[Any]:
    """The bundled files as parsed YAML (read when the first example is drawn, not at
    collection)."""
    return [yaml.safe_load(p.read_text(encoding="utf-8")) for p in BUNDLED]


EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.sampled_from([0, 1, -1, 2**63, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-300, math.inf, -math.inf, math.nan]),
    st.text(max_size=12),
    st.sampled_from(["", "refit", "window", "N1", "x1", "gpa", "mlp", "complete", "inf"]),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.text(max_size=8), children, max_size=3),
    ),
    max_leaves=6,
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value in a document (dict keys and list indices)."""
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, child in node.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(node, list):
        for i, child in enumerate(node):
            found += _paths(child, (*prefix, i))
    return found


def _parent(doc: Any, path: tuple) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


@st.composite
def mutated_documents(draw: st.DrawFn) -> tuple[str, list[str]]:
    doc = draw(st.sampled_from(_bundled_docs()))
    doc = yaml.safe_load(yaml.safe_dump(doc))  # a fresh copy
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent, last = _parent(doc, path), path[-1]
        action = draw(st.sampled_from(["drop", "rename", "misspell", "swap", "swap", "wrap"]))
        if action == "drop":
            del parent[last]
        elif action in ("rename", "misspell") and isinstance(parent, dict):
            if action == "rename":
                new = draw(st.one_of(st.text(max_size=10), st.integers(), st.none()))
            else:
                i = draw(st.integers(0, max(len(str(last)) - 1, 0)))
                new = str(last)[:i] + draw(st.sampled_from(["", "x", "_"])) + str(last)[i + 1 :]
            parent[new] = parent.pop(last)
        elif action == "wrap":
            parent[last] = [parent[last]] if draw(st.booleans()) else {"value": parent[last]}
        else:
            parent[last] = draw(values)
    text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)
    if draw(st.integers(0, 9)) == 0:  # corrupt the text itself
        i = draw(st.integers(0, len(text)))
        text = (
            text[:i]
            + draw(
                st.sampled_from(
                    ["[", ":", "\t", "{", "!!python/object:os.system ", "'", "- ", "&a *b"]
                )
            )
            + text[i:]
        )
    overrides = []
    if draw(st.integers(0, 4)) == 0:
        key = ".".join(str(p) for p in draw(st.sampled_from(_paths(doc) or [("rounds",)])))
        overrides.append(
            f"{key}={draw(st.sampled_from(['0', '-1', '[]', '{}', 'null', 'x', '1.5', '[1', '']))}"
        )
    return text, overrides


def _check(text: str, overrides: list[str], directory: Path) -> None:
    path = directory / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_scenario(path, overrides=overrides or None)
    except RecourseSimError as e:
        assert str(e) and "\n" not in str(e).strip(), repr(e)


@pytest.mark.slow
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=mutated_documents())
def test_mutated_scenarios_raise_only_typed_errors(case):
    text, overrides = case
    with tempfile.TemporaryDirectory() as directory:
        _check(text, overrides, Path(directory))


# -- checkpoints and command lines ------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_checkpoint(tmp_path_factory):
    from recourse_sim.checkpoint import save_checkpoint

    directory = tmp_path_factory.mktemp("checkpoint")
    state = {"round": 3, "theta": np.arange(4.0), "nested": {"a": [1, 2.5, "x"], "b": (1, 2)}}
    save_checkpoint(directory, round=3, state=state, meta={"run": {"seed": 0}})
    return directory


@pytest.mark.parametrize("seed", range(40))
def test_mutated_checkpoints_raise_only_checkpoint_errors(saved_checkpoint, tmp_path, seed):
    import shutil

    from recourse_sim.checkpoint import CHECKPOINT_FILE, load_checkpoint
    from recourse_sim.errors import CheckpointError

    rng = np.random.default_rng(seed)
    directory = tmp_path / "checkpoint"
    shutil.copytree(saved_checkpoint, directory)
    path = directory / CHECKPOINT_FILE
    raw = bytearray(path.read_bytes())
    kind = seed % 4
    if kind == 0:  # flip bytes
        for i in rng.integers(0, len(raw), size=3):
            raw[i] ^= 1 << int(rng.integers(8))
    elif kind == 1:  # truncate
        raw = raw[: int(rng.integers(0, len(raw)))]
    elif kind == 2:  # nest a value deeply
        depth = int(rng.integers(60, 5000))
        raw = raw.replace(b'"meta":', b'"meta": ' + b"[" * depth + b"]" * depth + b', "m":', 1)
    else:  # splice in garbage
        i = int(rng.integers(0, len(raw)))
        raw[i:i] = rng.integers(0, 256, size=int(rng.integers(1, 50)), dtype=np.uint8).tobytes()
    path.write_bytes(bytes(raw))
    try:
        load_checkpoint(directory)
    except CheckpointError as e:
        assert "\n" not in str(e) and len(str(e)) < 1000
    # (a mutation the digest still vouches for may load: it changed nothing that counts)


ARG_TOKENS = [
    "validate", "run", "plot", "sweep", "list", "--set", "--rounds", "--seed", "--seeds",
    "--threads", "--grid", "--out", "rounds=true", "world.class_sizes.0.x=1", "a..b=1",
    "=", "-1", "0", "1e400", "99999999999999999999", "nan", "\udcff", "../../x",
    "school_assignment", "/dev/null", "/proc/self", "learner.params.C=[[[[[[1]]]]]]",
    "description=&a [*a, *a]",
]  # fmt: skip


@pytest.mark.parametrize("seed", range(40))
def test_random_command_lines_end_in_one_line(seed, capsys, tmp_path, monkeypatch):
    from recourse_sim.cli import main

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(seed)
    argv = [ARG_TOKENS[i] for i in rng.integers(0, len(ARG_TOKENS), size=rng.integers(1, 6))]
    if argv[0] in ("run", "sweep"):
        argv[0] = "validate"  # no runs here: keep it quick
    status = main(argv)
    err = capsys.readouterr().err
    assert status in (0, 2), (argv, err)
    assert "Traceback" not in err
    assert status == 0 or len(err.splitlines()) == 1, (argv, err)
