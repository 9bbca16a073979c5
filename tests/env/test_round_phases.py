"""The round as named phases (`recourse_sim.env.round`): the single and batched envs
agree after each phase, world by world, so a divergence is named where it starts; the
batched and multi-agent envs use only public names of other modules."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import recourse_sim
from recourse_sim.env.batched import BatchedRecourseEnv
from recourse_sim.env.round import PHASES

SCHOOL = "recourse_sim/SchoolAssignment-v1"
LENDING = "recourse_sim/Lending-v1"
# per-row floats the batched env computes in another order: equal to rounding; the
# refits take another path to the same optimum (`recourse_sim.env.batched`)
RTOL, ATOL, THETA_RTOL, THETA_ATOL = 1e-9, 1e-12, 1e-7, 1e-9


def _single_phases(env, a: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
    """One round of the single env: each phase's values, as the batched env reports them."""
    fav, seen = env.favourable, {}

    def on_phase(name, work):
        moves = work.moves
        if name == "respond":
            seen[name] = {"report": work.cohort.report.copy()}
        elif name == "decide":
            seen[name] = {"p": work.honest_proba[:, fav], "favourable": work.favourable_before}
        elif name == "individual_recourse":
            seen[name] = {
                "report": moves.X_rep,
                "X": moves.X_true,
                "tried": moves.tried,
                "cost": moves.cost,
                "p": moves.proba[:, fav],
                "favourable": moves.favourable,
            }
        elif name == "outcomes":
            seen[name] = {"y": work.y, "query": work.query}
        elif name == "collective":
            seen[name] = {
                "X_train": work.X_train,
                "y_train": work.y_train,
                "participants": work.participants,
                "collective_cost": np.float64(work.collective_cost),
            }
        elif name == "update":
            seen[name] = {"theta": env.learner.param_vector().copy()}
        elif name == "advance":
            seen[name] = {
                "query_success": np.float64(work.query_success),
                "reward": np.float64(work.reward),
                "next_report": work.next_cohort.report,
                "next_person": work.next_cohort.person,
            }

    env.play_round({}, a, on_phase)
    return seen


def _batched_view(name: str, arrays: dict, i: int) -> dict[str, np.ndarray]:
    """World i's values of a batched phase, in the single env's rows."""
    out = {k: np.asarray(v)[i] for k, v in arrays.items() if k != "train"}
    if name == "collective":  # the single env keeps the training rows only
        train = arrays["train"][i]
        for key in ("X_train", "y_train", "participants"):
            out[key] = out[key][train]
    return out


def _assert_phase(name, got, want, where):
    assert set(got) == set(want), (where, sorted(got), sorted(want))
    for key, w in want.items():
        g, w = np.asarray(got[key]), np.asarray(w)
        at = f"{where}, phase {name}: {key}"
        if w.dtype.kind == "f":
            rtol, atol = (THETA_RTOL, THETA_ATOL) if key == "theta" else (RTOL, ATOL)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=at)
        else:
            np.testing.assert_array_equal(g, w, err_msg=at)


def _check_phases(env_id: str, worlds: int, rounds: int, seed: int, **kwargs) -> None:
    venv = gym.make_vec(
        env_id, num_envs=worlds, vectorization_mode="vector_entry_point", **kwargs
    ).unwrapped
    assert isinstance(venv, BatchedRecourseEnv)
    venv.reset(seed=seed)
    singles = [gym.make(env_id, **kwargs).unwrapped for _ in range(worlds)]
    for i, env in enumerate(singles):
        env.reset(seed=seed + i)
    rng = np.random.default_rng(seed)
    names = [p.__name__ for p in PHASES]
    for t in range(rounds):
        actions = rng.uniform(-1, 1, venv.action_space.shape).astype(np.float32)
        batched: dict[str, dict] = {}
        venv.on_phase = lambda name, arrays, batched=batched: batched.setdefault(
            name, {k: np.array(v, copy=True) for k, v in arrays.items()}
        )
        venv.step(actions)
        assert list(batched) == names  # the same phases, in the same order
        for i, env in enumerate(singles):
            single = _single_phases(env, actions[i].astype(np.float64))
            for name in names:
                got = _batched_view(name, batched[name], i)
                _assert_phase(name, got, single[name], f"world {i}, round {t + 1}")


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [(SCHOOL, {"world__cohort_size": 200}), (LENDING, {"world__n_applicants": 300})],
    ids=["school", "lending"],
)
def test_each_phase_of_a_batched_round_is_the_single_envs(env_id, kwargs):
    """A small case: 3 worlds, 4 rounds, every phase compared."""
    _check_phases(env_id, worlds=3, rounds=4, seed=20, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", [SCHOOL, LENDING], ids=["school", "lending"])
def test_16_worlds_20_rounds_agree_after_every_phase(env_id):
    """The acceptance case: the bundled scenarios, 16 worlds, a whole 20-round episode."""
    _check_phases(env_id, worlds=16, rounds=20, seed=300)


ADAPTERS = ("env/batched.py", "env/multi.py")


@pytest.mark.parametrize("path", ADAPTERS)
def test_the_adapters_use_no_private_name_of_another_module(path):
    """`env/batched.py` and `env/multi.py` drive the round through public names: no
    ``from m import _x`` and no ``obj._x`` on anything but ``self`` (their own)."""
    text = (Path(recourse_sim.__file__).parent / path).read_text(encoding="utf-8")
    code = re.sub(r'"""[\s\S]*?"""|#[^\n]*', "", text)  # docstrings and comments aside
    imported = re.findall(r"\bimport\s*\(([^)]*)\)|\bimport\s+([^\n(]+)", code)
    private_imports = [
        name.split(" as ")[0].strip()
        for block in imported
        for name in ",".join(block).split(",")
        if name.strip().startswith("_") and name.strip() != "__future__"
    ]
    assert not private_imports, private_imports
    others = [
        m.group(0)
        for m in re.finditer(r"\S*\.(_[a-z]\w*)", code)
        if not re.search(r"(?<![\w.])self$", code[: m.start(1) - 1])
    ]
    assert not others, others
