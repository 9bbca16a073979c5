"""A controlled collective's hard constraint (``limit``: acting rounds K, total cost C)
and the ``-v3`` action (``action: oar_plan``: OAR's settings, look-ahead and a bank of
unspent budget): the schema refuses what it cannot mean, in one line naming the field."""

from __future__ import annotations

import pytest

from recourse_sim.env import RecourseEnv
from recourse_sim.env.batched_scope import native_reason
from recourse_sim.errors import ConfigError

SMALL = {"world__cohort_size": 300, "world__history_size": 600}
POP = "populations__h1_students__"


def _env(rounds: int = 4, **settings) -> RecourseEnv:
    overrides = {f"{POP}{k}": v for k, v in settings.items()}
    return RecourseEnv("school_assignment_controlled", rounds=rounds, **SMALL, **overrides)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"action": "oar", "limit": {}}, r"limit: a limit needs acting_rounds .* or total_cost"),
        (
            {"action": "oar", "limit": {"acting_rounds": 0}},
            r"limit\.acting_rounds: .*greater than or equal to 1",
        ),
        ({"action": "oar", "limit": {"total_cost": 0.0}}, r"limit\.total_cost: .*greater than 0"),
        ({"action": "oar", "limit": {"cost": 1.0}}, r"limit\.cost: unknown key.*'total_cost'"),
        ({"limit": {"acting_rounds": 2}}, r"limit .* needs action: oar or oar_plan"),
        ({"action": "oar", "bank_cap": 1.0}, r"bank_cap is a setting of the oar_plan action"),
        ({"action": "oar", "max_horizon": 4}, r"max_horizon is a setting of the oar_plan"),
        ({"action": "oar_plan", "bank_cap": -1.0}, r"bank_cap: .*greater than or equal to 0"),
        ({"action": "oar_plan", "horizon": 5}, r"max_horizon \(3\) must be at least horizon \(5\)"),
    ],
)
def test_the_schema_refuses_a_bad_limit_or_plan_in_one_line(settings, message):
    with pytest.raises(ConfigError, match=message) as err:
        _env(**settings)
    assert "\n" not in str(err.value)


def test_a_limit_or_the_plan_action_is_not_batched_natively():
    assert native_reason(_env(action="oar", limit={"acting_rounds": 2})) is not None
    assert "limit" in native_reason(_env(action="oar", limit={"total_cost": 1.0}))
    assert "oar_plan" in native_reason(_env(action="oar_plan"))
