"""Checkpoints: exact round trips, no pickling, corruption detected and named."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

from recourse_sim.checkpoint import (
    CHECKPOINT_FILE,
    _digest,
    atomic_write_text,
    load_checkpoint,
    save_checkpoint,
)
from recourse_sim.errors import CheckpointError


def _state() -> dict:
    rng = np.random.default_rng(7)
    rng.normal(size=3)  # advance, so the generator state is not the initial one
    return {
        "round": 4,
        "theta": rng.normal(size=(3, 2)),
        "mask": np.array([True, False, True]),
        "ids": np.arange(5, dtype=np.int32),
        "labels": np.array(["N1", "N2"]),
        "empty": np.zeros((0, 3)),
        "scalar": np.float32(1.5),
        "count": np.int64(3),
        "rng": rng.bit_generator.state,  # nested dict with 128-bit Python ints
        "history": [0.1, float("nan"), float("inf"), None, "text", True],
        "pair": (1, np.arange(2)),
        "by_class": {0: np.ones(2), 1: np.zeros(2)},  # non-string keys
        "tricky": {"__ndarray__": "not an array reference"},  # a key that is one of our tags
    }


def _assert_same(a, b, where="state"):
    assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b), where
    else:
        assert a == b, where


def test_round_trip_is_exact(tmp_path):
    state = _state()
    save_checkpoint(tmp_path, round=4, state=state, meta={"run": {"seed": 3}})
    loaded = load_checkpoint(tmp_path)
    assert loaded is not None
    assert loaded.round == 4
    assert loaded.meta == {"run": {"seed": 3}}
    _assert_same(state, loaded.state)
    # The restored generator continues exactly where the saved one was.
    a, b = np.random.default_rng(), np.random.default_rng()
    a.bit_generator.state, b.bit_generator.state = state["rng"], loaded.state["rng"]
    np.testing.assert_array_equal(a.normal(size=4), b.normal(size=4))


def test_missing_checkpoint_is_none(tmp_path):
    assert load_checkpoint(tmp_path / "nowhere") is None


def test_only_the_latest_state_file_is_kept(tmp_path):
    for r in range(3):
        save_checkpoint(tmp_path, round=r, state={"x": np.full(2, r)})
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_FILE, "state-000002.npz"]
    loaded = load_checkpoint(tmp_path)
    assert loaded is not None and loaded.round == 2
    np.testing.assert_array_equal(loaded.state["x"], [2, 2])


@pytest.mark.parametrize(
    "value",
    [np.array([object(), 1], dtype=object), object(), {1, 2}, b"bytes"],
    ids=["object-array", "object", "set", "bytes"],
)
def test_unpicklable_free_state_is_refused(tmp_path, value):
    with pytest.raises(TypeError, match=r"state\['bad'\]"):
        save_checkpoint(tmp_path, round=1, state={"bad": value})


def _flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 0x5A
    path.write_bytes(bytes(data))


def _truncate(path, keep):
    path.write_bytes(path.read_bytes()[:keep])


CORRUPTIONS = {
    "json-flip-middle": lambda d: _flip(
        d / CHECKPOINT_FILE, len((d / CHECKPOINT_FILE).read_bytes()) // 2
    ),
    "json-flip-digit": lambda d: (d / CHECKPOINT_FILE).write_text(
        (d / CHECKPOINT_FILE).read_text().replace('"round": 2', '"round": 3')
    ),
    "json-truncated": lambda d: _truncate(d / CHECKPOINT_FILE, 40),
    "json-empty": lambda d: _truncate(d / CHECKPOINT_FILE, 0),
    "json-binary": lambda d: (d / CHECKPOINT_FILE).write_bytes(b"\xff\xfe\x00garbage"),
    "json-not-ours": lambda d: (d / CHECKPOINT_FILE).write_text('{"hello": 1}'),
    "npz-flip": lambda d: _flip(d / "state-000002.npz", 100),
    "npz-truncated": lambda d: _truncate(d / "state-000002.npz", 64),
    "npz-missing": lambda d: (d / "state-000002.npz").unlink(),
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_corruption_is_detected_and_named(tmp_path, corrupt):
    save_checkpoint(tmp_path, round=2, state=_state(), meta={"k": 1})
    corrupt(tmp_path)
    with pytest.raises(CheckpointError, match=str(tmp_path)) as info:
        load_checkpoint(tmp_path)
    assert "\n" not in str(info.value)


def test_state_file_name_cannot_escape_the_directory(tmp_path):
    # A record with a valid digest that points outside its directory is still refused.
    save_checkpoint(tmp_path, round=1, state={"x": np.ones(1)})
    record = json.loads((tmp_path / CHECKPOINT_FILE).read_text())
    record["arrays"] = "../state-000001.npz"
    record["sha256"] = _digest(record)
    (tmp_path / CHECKPOINT_FILE).write_text(json.dumps(record))
    with pytest.raises(CheckpointError, match="invalid state file"):
        load_checkpoint(tmp_path)


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    atomic_write_text(tmp_path / "a.txt", "one\n")
    atomic_write_text(tmp_path / "a.txt", "two\n")
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]
    assert (tmp_path / "a.txt").read_text() == "two\n"


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_write_gives_the_permissions_of_a_plain_write(tmp_path, umask):
    before = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "atomic.txt", "x\n")
        (tmp_path / "plain.txt").write_text("x\n")
    finally:
        os.umask(before)
    mode = stat.S_IMODE((tmp_path / "atomic.txt").stat().st_mode)
    assert mode == 0o666 & ~umask
    assert mode == stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode)


# --------------------------------------------------------------------------- environments

# A small lending_german_genre: GenRe is refit twice within four rounds.
_GENRE_SMALL = [
    "world.cohort_size=150",
    "world.history_size=400",
    "populations.applicants.retrain_every=2",
    "populations.applicants.epochs=3",
    "populations.applicants.memory=400",
]


@pytest.mark.slow
def test_resume_with_a_genre_population_is_exact(tmp_path):
    """The GenRe weights and buffer travel in the checkpoint (arrays only, no pickle), so
    a resumed run writes the same bytes as an uninterrupted one."""
    from recourse_sim import load_scenario, simulate

    scenario = load_scenario("lending_german_genre", overrides=_GENRE_SMALL)
    simulate(scenario, rounds=4, seed=2, out=tmp_path / "full")
    simulate(scenario, rounds=2, seed=2, out=tmp_path / "part")
    saved = load_checkpoint(tmp_path / "part" / "checkpoint")
    assert saved is not None
    genre = saved.state["strategies"]["applicants"]
    assert genre["fits"] == 1 and isinstance(genre["model"]["config"], str)
    assert all(isinstance(w, np.ndarray) for w in genre["model"]["weights"].values())
    simulate(scenario, rounds=4, seed=2, out=tmp_path / "part", resume=True)
    for name in ("metrics.csv",):
        assert (tmp_path / "part" / name).read_bytes() == (tmp_path / "full" / name).read_bytes()


def test_a_checkpoint_without_the_genre_state_is_refused(tmp_path):
    from recourse_sim.env import RecourseEnv

    env = RecourseEnv("lending_german_genre", world__cohort_size=100, world__history_size=300)
    env.reset(seed=0)
    state = env.get_state()
    assert "applicants" in state["strategies"]  # a genre population always has a state (its buffer)
    state.pop("strategies")
    with pytest.raises(CheckpointError, match="applicants"):
        env.set_state(state)
