"""The batched env's first models: where its refits are one batch (school), the first
fits of the worlds it resets are one batched Newton pass, each world's θ the single
env's to rounding; elsewhere (lending's remembered rounds) each world's reset is the
single env's exactly."""

from __future__ import annotations

import numpy as np
import pytest

from recourse_sim.env import RecourseEnv
from recourse_sim.env.batched import BatchedRecourseEnv
from recourse_sim.learners import LogisticRegression

SMALL = {"world__cohort_size": 200}


def _single_fit(scenario: str, seed: int, **kwargs) -> RecourseEnv:
    env = RecourseEnv(scenario, **kwargs)
    env.reset(seed=seed)
    return env


def _assert_first_models_alike(batched: RecourseEnv, single: RecourseEnv, rtol: float) -> None:
    got, want = batched.learner.param_vector(), single.learner.param_vector()
    assert np.abs(got - want).max() <= rtol * np.abs(want).max(), (got, want)
    assert batched.learner.state_.keys() == single.learner.state_.keys()
    for key in ("X_mem", "y_mem", "round_sizes", "x_shift", "x_scale"):
        if key in single.learner.state_:
            np.testing.assert_array_equal(batched.learner.state_[key], single.learner.state_[key])
    np.testing.assert_array_equal(batched.state.theta0, got)


def _no_single_fit(self, X, y):
    raise AssertionError("a world's first model was fitted alone")


def test_first_fits_of_all_worlds_and_of_a_masked_reset_are_each_single_envs(monkeypatch):
    venv = BatchedRecourseEnv(5, "school_assignment_controlled", **SMALL)
    assert not venv._remembers  # (the batched first fit's case)
    with monkeypatch.context() as m:
        m.setattr(LogisticRegression, "fit", _no_single_fit)
        venv.reset(seed=40)
    for i in range(5):
        single = _single_fit("school_assignment_controlled", 40 + i, **SMALL)
        _assert_first_models_alike(venv.envs[i], single, 1e-9)
        np.testing.assert_array_equal(venv._state["theta"][i], venv.envs[i].state.theta0)
    venv.step(np.zeros(venv.action_space.shape, np.float32))
    kept = venv._state["theta"][[1, 3]].copy()
    mask = np.array([True, False, True, False, True])
    with monkeypatch.context() as m:
        m.setattr(LogisticRegression, "fit", _no_single_fit)
        obs, info = venv.reset(seed=[7, None, 8, None, 9], options={"reset_mask": mask})
    np.testing.assert_array_equal(info["round"], [0, 1, 0, 1, 0])
    np.testing.assert_array_equal(venv._state["theta"][[1, 3]], kept)
    for i, seed in zip([0, 2, 4], [7, 8, 9], strict=True):
        single = _single_fit("school_assignment_controlled", seed, **SMALL)
        _assert_first_models_alike(venv.envs[i], single, 1e-9)
        first, _ = single.reset(seed=seed)
        np.testing.assert_allclose(obs[i], first, rtol=1e-6, atol=1e-7)


@pytest.mark.filterwarnings("ignore::recourse_sim.learners.logistic.ConvergenceWarning")
def test_a_history_of_one_class_is_fitted_as_the_single_env_does():
    """A history of one student holds one class: no finite optimum, so each such world
    is fitted by its learner's own `fit`, as in the single env (bit for bit)."""
    kwargs = {**SMALL, "world__history_size": 1}
    venv = BatchedRecourseEnv(3, "school_assignment_controlled", **kwargs)
    venv.reset(seed=3)
    for i in range(3):
        single = _single_fit("school_assignment_controlled", 3 + i, **kwargs)
        assert len(np.unique(single.learner.state_["y_mem"])) == 1
        _assert_first_models_alike(venv.envs[i], single, 0.0)


def test_lending_resets_each_world_as_the_single_env():
    venv = BatchedRecourseEnv(3, "lending_fico_controlled", world__n_applicants=200)
    assert venv._remembers
    venv.reset(seed=11)
    for i in range(3):
        single = _single_fit("lending_fico_controlled", 11 + i, world__n_applicants=200)
        _assert_first_models_alike(venv.envs[i], single, 0.0)
