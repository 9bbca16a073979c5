"""A missing or corrupt bundled file raises DataError naming that file."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest

from recourse_sim.data import load, load_fico
from recourse_sim.errors import DataError


def _replace(data_dir: Path, name: str, content: bytes) -> None:
    """Overwrite a file and update its checksum, so only parsing can catch the damage."""
    (data_dir / name).write_bytes(content)
    sums = data_dir / "SHA256SUMS"
    lines = [
        f"{hashlib.sha256(content).hexdigest()}  {name}" if line.endswith(f"  {name}") else line
        for line in sums.read_text().splitlines()
    ]
    sums.write_text("\n".join(lines) + "\n")


def test_bundled_files_load(data_dir: Path) -> None:
    assert load("adult").X.shape[0] == 45_222
    assert load_fico().groups


@pytest.mark.parametrize(
    ("name", "file"),
    [
        ("adult", "adult.test.gz"),
        ("compas", "compas-two-years-reduced.csv.gz"),
        ("german", "german.data.gz"),
        ("german", "values_maps.json"),
        (None, "totals.csv"),
    ],
)
def test_missing_file(data_dir: Path, name: str | None, file: str) -> None:
    (data_dir / file).unlink()
    with pytest.raises(DataError, match=f"'{file}' is missing"):
        load(name) if name else load_fico()


def test_missing_checksums(data_dir: Path) -> None:
    (data_dir / "SHA256SUMS").unlink()
    with pytest.raises(DataError, match="'SHA256SUMS' is missing"):
        load("german")


@pytest.mark.parametrize(
    ("name", "file"),
    [
        ("adult", "adult.data.gz"),
        ("compas", "compas-two-years-reduced.csv.gz"),
        (None, "transrisk_cdf_by_race_ssa.csv"),
    ],
)
def test_altered_file_fails_checksum(data_dir: Path, name: str | None, file: str) -> None:
    path = data_dir / file
    path.write_bytes(path.read_bytes()[:-100])  # truncated
    with pytest.raises(DataError, match=f"'{file}' is corrupt"):
        load(name) if name else load_fico()


@pytest.mark.parametrize(
    ("name", "file", "content"),
    [
        ("german", "german.data.gz", b"not gzip at all"),
        ("german", "german.data.gz", gzip.compress(b"A11 6 A34\nA99 1 2\n")),
        ("adult", "adult.data.gz", gzip.compress(b"39, State-gov, 77516, Bachelors, 13\n")),
        ("compas", "compas-two-years-reduced.csv.gz", gzip.compress(b"sex,age\nMale,3\n")),
        ("german", "values_maps.json", b"{not json"),
        (None, "transrisk_performance_by_race_ssa.csv", b"Score,Black\n0,1\n"),
        (None, "transrisk_cdf_by_race_ssa.csv", b"\xff\xfe\x00garbage"),
    ],
)
def test_unparseable_file(data_dir: Path, name: str | None, file: str, content: bytes) -> None:
    _replace(data_dir, file, content)
    with pytest.raises(DataError, match=f"'{file}'"):
        load(name) if name else load_fico()


def test_errors_are_not_cached(data_dir: Path) -> None:
    path = data_dir / "german.data.gz"
    original = path.read_bytes()
    path.unlink()
    with pytest.raises(DataError):
        load("german")
    path.write_bytes(original)
    assert load("german").X.shape == (1_000, 13)
