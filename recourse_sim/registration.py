"""The Gymnasium environment IDs of recourse-sim, registered by ``import recourse_sim``.

Registration names the entry point as a string, so it imports nothing heavy: the
environment module (and torch) loads on the first ``gym.make``.

* ``recourse_sim/SchoolAssignment-v1``: ``school_assignment_controlled``; the action
  drives the H1 students' collective.
* ``recourse_sim/Lending-v1``: ``lending_fico_controlled``; the action drives the
  borrowers' collective.
* ``recourse_sim/SchoolAssignment-v0``, ``recourse_sim/Lending-v0``: the passive
  ``school_assignment`` and ``lending_fico``; the action is ignored (they warn at make).
* ``recourse_sim/SchoolAssignment-v2``, ``recourse_sim/Lending-v2``: the same
  scenarios, with OAR's own settings as the action (act or not, participation α,
  budget ε, goal; ``action: oar``): OAR computes the collective's perturbation. The
  action is centred on OAR: the zero action (as the constant (1, 1, 1, 1)) reproduces
  the ``collective_oar`` population; entries below 0 move away from it.
* ``recourse_sim/SchoolAssignment-v3``, ``recourse_sim/Lending-v3``: the same, with
  ``action: oar_plan``: OAR's settings, its look-ahead and a draw on the budget banked
  in idle or frugal rounds; the zero action is OAR too.
* ``recourse_sim/Recourse-v0``: any scenario, via ``scenario=``; the action drives its
  controlled population, if it has one (else it warns at make).
* The coordination tasks (`COORDINATION_TASKS`; docs/rl.md, "Coordination tasks"):
  ``recourse_sim/LendingBudget20-v0`` and ``LendingBudget40-v0``
  (``coordination_lending_budget``: K acting rounds of T), ``LendingHidden-v0``
  (``coordination_lending_hidden``: hidden per-episode dynamics; ``hidden_split=``
  ``"train"`` or ``"test"``), ``SchoolSGDBudget-v0`` (``coordination_school_sgd``: an SGD
  learner and a total cost budget), ``SchoolDefended-v0``
  (``coordination_school_defended``: a trimmed refit of hidden strength and a penalty
  per trimmed participant) and ``RivalCollectives-v0`` (``coordination_rivals``: a
  rival collective acting by OAR for another group under H1's capacity).

Each spec's ``max_episode_steps`` is its scenario's rounds (``Recourse-v0``: its default
scenario's, ``school_assignment``), so ``gym.make`` adds Gymnasium's ``TimeLimit`` at the
episode's own end. An episode of more rounds (``rounds=`` or another scenario with
``Recourse-v0``) needs ``max_episode_steps=`` passed to ``gym.make`` too (``-1``: no
``TimeLimit``; the env truncates at its rounds either way).
"""

from __future__ import annotations

ENTRY_POINT = "recourse_sim.env.recourse_env:RecourseEnv"
VECTOR_ENTRY_POINT = "recourse_sim.env.batched:make_vector_env"
"""``gym.make_vec(id, num_envs=B, vectorization_mode="vector_entry_point")``: a native
batched env where the scenario allows, else a synchronous loop (it warns why)."""

ENV_IDS: dict[str, dict] = {
    "recourse_sim/SchoolAssignment-v1": {"scenario": "school_assignment_controlled"},
    "recourse_sim/Lending-v1": {"scenario": "lending_fico_controlled"},
    "recourse_sim/SchoolAssignment-v2": {
        "scenario": "school_assignment_controlled",
        "populations__h1_students__action": "oar",
    },
    "recourse_sim/Lending-v2": {
        "scenario": "lending_fico_controlled",
        "populations__borrowers__action": "oar",
    },
    "recourse_sim/SchoolAssignment-v3": {
        "scenario": "school_assignment_controlled",
        "populations__h1_students__action": "oar_plan",
    },
    "recourse_sim/Lending-v3": {
        "scenario": "lending_fico_controlled",
        "populations__borrowers__action": "oar_plan",
    },
    "recourse_sim/SchoolAssignment-v0": {"scenario": "school_assignment", "warn_passive": True},
    "recourse_sim/Lending-v0": {"scenario": "lending_fico", "warn_passive": True},
    "recourse_sim/Recourse-v0": {"warn_passive": True},
    # the coordination tasks (`COORDINATION_TASKS`)
    "recourse_sim/LendingBudget20-v0": {"scenario": "coordination_lending_budget"},
    "recourse_sim/LendingBudget40-v0": {
        "scenario": "coordination_lending_budget",
        "rounds": 40,
        "populations__borrowers__limit__acting_rounds": 10,
    },
    "recourse_sim/LendingHidden-v0": {"scenario": "coordination_lending_hidden"},
    "recourse_sim/SchoolSGDBudget-v0": {"scenario": "coordination_school_sgd"},
    "recourse_sim/SchoolDefended-v0": {"scenario": "coordination_school_defended"},
    "recourse_sim/RivalCollectives-v0": {"scenario": "coordination_rivals"},
}
"""Registered environment IDs and their default keyword arguments."""

MAX_EPISODE_STEPS: dict[str, int] = {
    "recourse_sim/SchoolAssignment-v1": 20,
    "recourse_sim/Lending-v1": 20,
    "recourse_sim/SchoolAssignment-v2": 20,
    "recourse_sim/Lending-v2": 20,
    "recourse_sim/SchoolAssignment-v3": 20,
    "recourse_sim/Lending-v3": 20,
    "recourse_sim/SchoolAssignment-v0": 50,
    "recourse_sim/Lending-v0": 50,
    "recourse_sim/Recourse-v0": 50,
    "recourse_sim/LendingBudget20-v0": 20,
    "recourse_sim/LendingBudget40-v0": 40,
    "recourse_sim/LendingHidden-v0": 20,
    "recourse_sim/SchoolSGDBudget-v0": 20,
    "recourse_sim/SchoolDefended-v0": 20,
    "recourse_sim/RivalCollectives-v0": 20,
}
"""Each ID's ``max_episode_steps``: the ``rounds`` of its (default) scenario file, or its
``rounds`` keyword (a test holds them equal; written out so that registering reads no
file)."""

COORDINATION_TASKS: dict[str, str] = {
    "lending_budget_20": "recourse_sim/LendingBudget20-v0",
    "lending_budget_40": "recourse_sim/LendingBudget40-v0",
    "lending_hidden": "recourse_sim/LendingHidden-v0",
    "school_sgd_budget": "recourse_sim/SchoolSGDBudget-v0",
    "school_defended": "recourse_sim/SchoolDefended-v0",
    "rivals": "recourse_sim/RivalCollectives-v0",
    "control": "recourse_sim/SchoolAssignment-v2",
}
"""The coordination benchmark's tasks: short name -> Gymnasium ID (docs/rl.md,
"Coordination tasks"). Each drives its collective by OAR's settings (the ``-v2``
action) and rewards the query group's success only; ``control`` is the school task on
which a learner should reach OAR."""


# Gymnasium takes a higher version of a name to supersede the lower ones and warns on
# every make of a lower one ("... is out of date"); here the versions are different
# actions (v0 passive, v1 the shift, v2 OAR's settings, v3 with look-ahead and bank),
# none newer than another.
_NOT_OUT_OF_DATE = r".*The environment recourse_sim/\w+-v\d+ is out of date"


def register_envs() -> None:
    """Register every ID of `ENV_IDS` (idempotent), and silence Gymnasium's "out of
    date" warning for them (only them)."""
    import warnings

    from gymnasium.envs.registration import register, registry

    warnings.filterwarnings("ignore", _NOT_OUT_OF_DATE, DeprecationWarning)

    for env_id, kwargs in ENV_IDS.items():
        if env_id not in registry:
            register(
                id=env_id,
                entry_point=ENTRY_POINT,
                vector_entry_point=VECTOR_ENTRY_POINT,
                max_episode_steps=MAX_EPISODE_STEPS[env_id],
                kwargs=dict(kwargs),
            )


__all__ = [
    "COORDINATION_TASKS",
    "ENTRY_POINT",
    "ENV_IDS",
    "MAX_EPISODE_STEPS",
    "VECTOR_ENTRY_POINT",
    "register_envs",
]
