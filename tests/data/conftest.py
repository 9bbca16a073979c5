"""Fixtures for the dataset tests: a private, writable copy of the bundled data files."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import recourse_sim.data as data
from recourse_sim.data import _resources


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point every loader at a copy of the bundled files that the test may break."""
    copy = tmp_path / "files"
    shutil.copytree(Path(str(_resources.files_root())), copy)
    monkeypatch.setattr(_resources, "files_root", lambda: copy)
    data.clear_cache()
    yield copy
    # The broken copy must not leak into other tests through the caches.
    monkeypatch.undo()
    data.clear_cache()
