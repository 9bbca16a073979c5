"""An environment's episode state for checkpoints: `episode_state` (what
`RecourseEnv.get_state` returns) and `restore_episode_state` (`RecourseEnv.set_state`),
with the checks a restored state must pass. `env` is a `RecourseEnv` (a round engine
with Gymnasium's ``np_random``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium.error import ResetNeeded

from recourse_sim.env import guards
from recourse_sim.env.hidden import apply_hidden
from recourse_sim.env.limits import allowances_from_state
from recourse_sim.env.pool import Pool
from recourse_sim.env.streams import stream_key
from recourse_sim.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    from recourse_sim.env.engine import RoundEngine

__all__ = ["STATE_VERSION", "copy_tree", "episode_state", "generator_from", "restore_episode_state"]

STATE_VERSION = 2

# parts of a state whose arrays have one row per person (or remembered row): their
# first axis may differ from a fresh environment's, their other axes may not
_ROW_PARTS = ("pool", "holders", "learner.X_mem", "learner.y_mem", "learner.round_sizes")
_CHECKED_PARTS = ("learner", "theta0", "feature_mean", "feature_scale", "last", "pool", "holders")


def episode_state(env: RoundEngine) -> dict[str, Any]:
    """The complete episode state: numpy arrays, numbers, strings, nested dicts/lists.

    ``np_random`` holds the bit generator's state (Python ints, up to 128 bits).
    """
    if env.state.cohort is None:
        raise ResetNeeded("call reset() before get_state()")
    return {
        "version": STATE_VERSION,
        "scenario": env.scenario.name,
        "round": int(env.state.round),
        "np_random": copy_tree(env.np_random.bit_generator.state),
        "streams": {k: copy_tree(g.bit_generator.state) for k, g in env.state.streams.items()},
        "learner": {k: v.detach().numpy().copy() for k, v in env.learner.state_.items()},
        "learner_seed": int(env.state.learner_seed),
        "theta0": env.state.theta0.copy(),
        "pool": env.state.pool.get_state(),
        "holders": {k: v.copy() for k, v in env.state.holders.items()},
        # validity_horizon T: the holders of the last T rounds, oldest first
        "past_holders": {
            str(i): {k: v.copy() for k, v in h.items()}
            for i, h in enumerate(env.state.past_holders)
        },
        "world": copy_tree(env.world.get_state()),
        "last": {k: v.copy() for k, v in env.state.last.items()},
        "feature_mean": env.state.feature_mean.copy(),
        "feature_scale": env.state.feature_scale.copy(),
        "pare": dict(env.state.pare),
        # what population strategies have learnt (a genre population's GenRe weights
        # and buffer), by population; strategies that learn nothing are left out
        "strategies": {s.population: s.get_state() for s in env.strategies if s.learns},
        "defense": env.state.defense.get_state(),
        "honoured": env.state.honoured.copy(),
        # per controlled population: its limit's use and its bank
        "allowances": {p: a.get_state() for p, a in env.state.allowances.items()},
        **({"shift": env.shift.get_state()} if env.shift is not None else {}),
        # optimum_gap: the last round's minimiser of the performative risk
        **({"optimum": env.optimum.get_state()} if env.optimum is not None else {}),
        # the episode's hidden settings (`recourse_sim.env.hidden`)
        **({"hidden": dict(env.hidden_values)} if getattr(env, "hidden_values", None) else {}),
    }


def restore_episode_state(env: RoundEngine, state: dict[str, Any]) -> None:
    """Restore a state from `get_state` (of an environment of the same scenario)."""
    import torch

    guards.check_state(state)
    if env.state.cohort is not None:  # a state of this scenario to hold it against
        check_restored(state, env.get_state(), env.scenario.rounds)
    try:
        if state["version"] != STATE_VERSION:
            raise CheckpointError(
                f"checkpoint state version {state['version']!r} is not {STATE_VERSION}"
            )
        if state["scenario"] != env.scenario.name:
            raise CheckpointError(
                f"checkpoint is of scenario {state['scenario']!r}, "
                f"this environment runs {env.scenario.name!r}"
            )
        base = getattr(env, "base_scenario", None)
        if base is not None and base.hidden:  # the episode's rules, then its state
            apply_hidden(env, base, _hidden_values(state.get("hidden"), base))
        env.np_random = generator_from(state["np_random"])
        streams = state["streams"]
        if set(streams) != set(env.stream_names):
            raise CheckpointError(
                f"checkpoint has random streams {sorted(streams)}, this environment "
                f"draws from {sorted(env.stream_names)}"
            )
        env.state.streams = {name: generator_from(streams[name]) for name in env.stream_names}
        env.state.keys = {name: stream_key(env.state.streams[name]) for name in env.keyed_names}
        env.state.learner_seed = int(state["learner_seed"])
        learner = env.new_learner(random_state=env.state.learner_seed)
        learner.state_ = {
            k: torch.as_tensor(np.array(v, dtype=np.float64)) for k, v in state["learner"].items()
        }
        learner.classes_ = np.arange(env.n_classes)
        learner.n_features_in_ = env.n_features
        env.learner = learner
        env.state.theta0 = np.array(state["theta0"], dtype=np.float64)
        env.state.round = int(state["round"])
        env.state.pool = Pool(env.pool_rules)
        env.state.pool.set_state(copy_tree(state["pool"]))
        env.state.cohort = env.state.pool.applicants()
        env.state.holders = {
            "person": np.array(state["holders"]["person"], dtype=np.int64),
            "report": np.array(state["holders"]["report"], dtype=np.float64),
            "group": np.array(state["holders"]["group"], dtype=np.int64),
            "query": np.array(state["holders"]["query"], dtype=bool),
        }
        past = state.get("past_holders", {})
        env.state.past_holders = [
            {
                "person": np.array(past[i]["person"], dtype=np.int64),
                "report": np.array(past[i]["report"], dtype=np.float64),
                "group": np.array(past[i]["group"], dtype=np.int64),
                "query": np.array(past[i]["query"], dtype=bool),
            }
            for i in sorted(past, key=int)
        ]
        env.state.last_record = None
        env.world.set_state(copy_tree(state["world"]))
        env.state.last = {k: np.array(v, dtype=np.float64) for k, v in state["last"].items()}
        env.state.feature_mean = np.array(state["feature_mean"], dtype=np.float64)
        env.state.feature_scale = np.array(state["feature_scale"], dtype=np.float64)
        # (absent from checkpoints of before the pare rule, which had no threshold)
        env.state.pare = {k: float(v) for k, v in state.get("pare", {}).items()}
        if env.scenario.decision.rule == "pare" and not env.state.pare:
            raise CheckpointError("checkpoint has no PARE threshold for a pare scenario")
        if "defense" in state:
            env.state.defense.set_state(state["defense"])
        env.state.honoured = np.array(state.get("honoured", []), dtype=np.int64)
        env.state.allowances = allowances_from_state(state.get("allowances"), env.strategies)
        if env.shift is not None:
            env.shift.set_state(state["shift"])
        if env.optimum is not None:
            env.optimum.set_state(state["optimum"])
        learnt = state.get("strategies", {})
        for s in env.strategies:
            if not s.learns:
                continue
            # resuming without it would silently forget the model: different rounds
            if s.population not in learnt:
                raise CheckpointError(
                    f"checkpoint has no state for population {s.population!r} "
                    f"({s.name}); it cannot be resumed exactly"
                )
            try:
                s.set_state(learnt[s.population])
            except (KeyError, TypeError, ValueError, ConfigError) as exc:
                raise CheckpointError(
                    f"checkpoint state of population {s.population!r} is corrupt: {exc}"
                ) from None
        env._last_metrics = []
        env._history = []
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"checkpoint state is incomplete or corrupt: {exc!r}") from None


def _hidden_values(values: Any, base) -> dict[str, float]:
    """A checkpoint's hidden values, one number per hidden field of `base`."""
    if not isinstance(values, dict) or set(values) != set(base.hidden):
        raise CheckpointError(
            f"checkpoint state: hidden values {values!r} are not one number per hidden "
            f"field {sorted(base.hidden)}"
        )
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise CheckpointError(f"checkpoint state: hidden {key} = {value!r} is not a number")
    return {k: (int(v) if base.hidden[k].integer else float(v)) for k, v in values.items()}


def check_restored(state: Any, template: dict, rounds: int) -> None:
    """CheckpointError unless a restored `state` fits this environment: its round in
    0..`rounds`, its learner, pool and statistics shaped and typed as `template` (a
    state of the same scenario), and every float in it finite."""
    if not isinstance(state, dict):
        raise CheckpointError("checkpoint state is not a mapping")
    r = state.get("round")
    if isinstance(r, bool) or not isinstance(r, int | np.integer) or not 0 <= r <= rounds:
        raise CheckpointError(f"checkpoint state: round {str(r)[:20]!r} is outside 0..{rounds}")
    for where, want in _leaves(template, ""):
        if not where.startswith(_CHECKED_PARTS) or not isinstance(want, np.ndarray):
            continue
        got = _lookup(state, where)
        if not isinstance(got, np.ndarray):
            raise CheckpointError(f"checkpoint state: {where} is missing or not an array")
        rows = where.startswith(_ROW_PARTS)
        same = got.shape[1:] == want.shape[1:] if rows else got.shape == want.shape
        if got.ndim != want.ndim or not same:
            raise CheckpointError(
                f"checkpoint state: {where} has shape {got.shape}, expected "
                f"{('(n, ' + ', '.join(map(str, want.shape[1:])) + ')') if rows else want.shape}"
            )
        if got.dtype.kind != want.dtype.kind:
            raise CheckpointError(
                f"checkpoint state: {where} has dtype {got.dtype}, expected {want.dtype}"
            )
    for where, value in _leaves(state, ""):
        if (
            isinstance(value, np.ndarray)
            and value.dtype.kind == "f"
            and not np.isfinite(value).all()
        ):
            raise CheckpointError(f"checkpoint state: {where} has NaN or infinite values")


def _leaves(tree: Any, where: str):
    """(dotted path, value) of every leaf of nested mappings."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _leaves(v, f"{where}.{k}" if where else str(k))
    else:
        yield where, tree


def _lookup(tree: Any, where: str) -> Any:
    for part in where.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def generator_from(bit_generator_state: dict) -> np.random.Generator:
    """A generator continuing from a saved ``bit_generator.state``."""
    state = copy_tree(bit_generator_state)
    bit_generator = getattr(np.random, state["bit_generator"])()
    bit_generator.state = state
    return np.random.Generator(bit_generator)


def copy_tree(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: copy_tree(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [copy_tree(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.copy()
    return obj
