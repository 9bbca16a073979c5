"""Hidden per-episode settings (the scenario block ``hidden``): validated on load, drawn
at each reset from the train or test ranges of their own stream, reproducible per
seed, carried by checkpoints, and leaving every other random number as it was."""

from __future__ import annotations

import numpy as np
import pytest

from recourse_sim.env import RecourseEnv
from recourse_sim.errors import ConfigError
from recourse_sim.scenarios import load_scenario

SMALL = {"world__n_applicants": 150, "world__history_size": 200, "rounds": 3}
HIDDEN = "coordination_lending_hidden"
KEYS = ("learner.window", "populations.borrowers.participation", "world.default_loss")


def _env(**kwargs) -> RecourseEnv:
    return RecourseEnv(HIDDEN, **SMALL, **kwargs)


def _rollout(env: RecourseEnv, seed: int, steps: int = 3) -> list:
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for _ in range(steps):
        obs, reward, *_ = env.step(np.zeros(env.action_space.shape, np.float32))
        out += [obs, reward]
    return out


@pytest.mark.parametrize("split", ["train", "test"])
def test_values_come_from_the_split_ranges_and_differ_between_episodes(split):
    env = _env(hidden_split=split)
    spec = env.scenario.hidden
    draws = []
    for seed in range(6):
        env.reset(seed=seed)
        values = env.hidden_values
        assert set(values) == set(KEYS)
        for key, value in values.items():
            lo, hi = spec[key].bounds(split)
            assert lo <= value <= hi, (key, value)
        assert isinstance(values["learner.window"], int)
        # the episode runs with them
        assert env.scenario.learner.window == values["learner.window"]
        assert env.scenario.world.default_loss == values["world.default_loss"]
        assert env.world.spec.default_loss == values["world.default_loss"]
        share = env.scenario.populations["borrowers"].participation
        assert share == values["populations.borrowers.participation"]
        draws.append(values)
    assert len({v["world.default_loss"] for v in draws}) == len(draws)
    assert len({v["learner.window"] for v in draws}) > 1


def test_a_seed_draws_the_same_values_and_rounds():
    a, b = _env(), _env()
    for x, y in zip(_rollout(a, seed=3), _rollout(b, seed=3), strict=True):
        np.testing.assert_array_equal(x, y)
    assert a.hidden_values == b.hidden_values
    a.reset(seed=4)
    assert a.hidden_values != b.hidden_values


def test_the_hidden_stream_leaves_every_other_number_unchanged():
    """An episode with drawn values is the episode of the same seed of the scenario with
    those values written in and no hidden block: the hidden stream feeds nothing else."""
    env = _env()
    hidden_run = _rollout(env, seed=5)
    values = {k.replace(".", "__"): v for k, v in env.hidden_values.items()}
    plain = RecourseEnv(HIDDEN, **SMALL, hidden={}, **values)
    assert plain.scenario.hidden == {} and plain.base_scenario.hidden == {}
    plain_run = _rollout(plain, seed=5)
    assert plain.hidden_values == {}
    for x, y in zip(hidden_run, plain_run, strict=True):
        np.testing.assert_array_equal(x, y)


def test_the_values_are_not_observed():
    env = _env()
    plain = RecourseEnv(HIDDEN, **SMALL, hidden={})
    assert env.observation_space == plain.observation_space


def test_a_checkpoint_restores_the_episodes_values():
    env = _env(hidden_split="test")
    env.reset(seed=7)
    env.step(np.zeros(env.action_space.shape, np.float32))
    state, values = env.get_state(), env.hidden_values
    assert state["hidden"] == values
    later = [env.step(np.zeros(env.action_space.shape, np.float32))[1] for _ in range(2)]

    fresh = _env(hidden_split="test")
    fresh.reset(seed=0)  # another draw ...
    assert fresh.hidden_values != values
    fresh.set_state(state)  # ... replaced by the checkpoint's
    assert fresh.hidden_values == values
    assert fresh.scenario.learner.window == values["learner.window"]
    again = [fresh.step(np.zeros(fresh.action_space.shape, np.float32))[1] for _ in range(2)]
    assert again == later


def test_an_unknown_split_is_refused():
    with pytest.raises(ConfigError, match="hidden_split='valid' is not one of"):
        _env(hidden_split="valid")


@pytest.mark.parametrize(
    ("hidden", "message"),
    [
        ({"learner.windw": {"train": [1, 2], "test": [3, 4]}}, "no such scenario field"),
        ({"learner.type": {"train": [1, 2], "test": [3, 4]}}, "not a number"),
        ({"world.default_loss": {"train": [200, 100], "test": [3, 4]}}, "lo <= hi"),
        ({"learner.window": {"train": [1, 2.5], "test": [3, 4], "integer": True}}, "whole"),
        (
            {"populations.borrowers.participation": {"train": [0.5, 0.9], "test": [0.9, 1.5]}},
            "an end of its test range",
        ),
        ({"world.default_loss": {"train": [1, 2]}}, "test"),
    ],
)
def test_bad_hidden_blocks_are_one_line_errors(hidden, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_scenario("coordination_lending_budget", {"hidden": hidden})
    assert "\n" not in str(err.value) and "hidden" in str(err.value)


def test_a_scenario_without_hidden_derives_no_hidden_stream():
    env = RecourseEnv("coordination_lending_budget", **SMALL)
    env.reset(seed=0)
    assert env.hidden_values == {} and "hidden" not in env.get_state()
    assert "hidden" not in env.stream_names


def test_a_run_records_its_draw_in_the_summary_and_says_it(tmp_path, capsys):
    import json

    from recourse_sim.cli import main

    out = tmp_path / "run"
    sets = ["--set", "world.n_applicants=150", "--set", "world.history_size=200"]
    assert main(["run", HIDDEN, "--rounds", "2", "--seed", "3", "--out", str(out), *sets]) == 0
    recorded = json.loads((out / "summary.json").read_text())["hidden"]
    env = _env()
    env.reset(seed=3)
    assert recorded == {"split": "train", "values": env.hidden_values}
    assert "hidden settings" in capsys.readouterr().out
