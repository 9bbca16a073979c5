"""The bundled recourse_over_time scenario: the acceptance run of Fonseca et al.'s decay."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from recourse_sim.cli import main
from recourse_sim.env import RecourseEnv
from recourse_sim.simulate import read_metrics, read_people


def test_recourse_success_decays_under_the_frozen_model(tmp_path):
    """`recourse-sim run recourse_over_time --rounds 40 --seed 0` (the frozen model):
    people.csv is written, the last ten rounds' recourse success is below half of round
    1's, people apply in several rounds, and model_accuracy is the agreement of the
    decisions with the true outcomes in people.csv."""
    out = tmp_path / "run"
    argv = ["run", "recourse_over_time", "--rounds", "40", "--seed", "0", "--out", str(out)]
    with pytest.warns(UserWarning, match=r"in 40 of 40 rounds most seekers ended on the round"):
        assert main([*argv, "-q"]) == 0  # the pile is the paper's finding, and is warned of
    metrics, people = read_metrics(out), read_people(out)
    everyone = metrics[metrics["group"] == "all"].set_index("round")
    success = everyone["recourse_success_rate"]
    assert success.loc[1] > 0
    assert success.loc[31:40].mean() < 0.5 * success.loc[1]
    assert people.groupby("person").size().max() > 3
    agree = (people["favourable"] == people["true_favourable"]).groupby(people["round"]).mean()
    pd.testing.assert_series_equal(everyone["model_accuracy"], agree, check_names=False)
    assert (everyone["n"] == 100).all() and (everyone["newcomers"] == 10).all()
    assert (people.groupby("round")["favourable"].sum() == 10).all()  # ten loans a round


@pytest.mark.parametrize("rule", ["capacity", "threshold"])
def test_just_enough_stops_where_the_decision_flips(rule):
    """The share of a recourse that seekers who move just enough take is the least that
    gets the round's decision: at a capacity cut-off (up to a tie) or the threshold."""
    more = {} if rule == "capacity" else {"decision__rule": "threshold"}
    env = RecourseEnv("recourse_over_time", rounds=2, **more)
    env.reset(seed=3)
    c = env.state.cohort
    proba, favourable = env.honest_decisions(c)
    cut = env.capacity_cut(proba, favourable)
    strategy = env.strategies[0]
    # the whole budget's recourse, of which just enough is taken
    strategy.spec = strategy.spec.model_copy(update={"objective": "budget"})
    seekers = ~favourable
    found = strategy.act(env.learner, c.report, seekers, 1, np.random.default_rng(0))
    share = env.just_enough(c.report, found.delta, found.tried, c.group, cut)
    rows = found.tried & (share > 0) & (share < 1)
    assert rows.sum() > 5
    x, d, s = c.report[rows], found.delta[rows], share[rows]

    def p(t):
        return env.learner.predict_proba(x + t[:, None] * d)[:, 1]

    target = cut if rule == "capacity" else 0.5
    assert (p(s) >= target - TIE).all() and (p(s) - target < TIE).all()  # on the target ...
    assert (p(s - 2.0**-30) < target).all()  # ... and not before it
    assert (share[~found.tried] == 1).all()


TIE = 1e-9  # the capacity rule's tie resolution


def test_auc_counts_the_pile_at_the_cut_off_as_ties(tmp_path):
    """`recourse-sim run recourse_over_time --rounds 10 --seed 0 --people-features`:
    each round's ``auc`` in metrics.csv is the AUC of people.csv's ``score`` against
    ``true_favourable`` with the decision rule's ties (`tie_key`) counted as ties."""
    from sklearn.metrics import roc_auc_score

    from recourse_sim.env.metrics import tie_key

    out = tmp_path / "run"
    argv = ["run", "recourse_over_time", "--rounds", "10", "--seed", "0", "--people-features"]
    with pytest.warns(UserWarning, match="most seekers ended on the round's cut-off score"):
        assert main([*argv, "--out", str(out), "-q"]) == 0
    metrics, people = read_metrics(out), read_people(out)
    auc = metrics[metrics["group"] == "all"].set_index("round")["auc"]
    assert len(auc) == 10
    for r, rows in people.groupby("round"):
        tied = roc_auc_score(rows["true_favourable"], tie_key(rows["score"].to_numpy()))
        assert abs(auc.loc[r] - tied) <= 1e-9, r
    assert abs(auc.loc[10] - 0.4844) < 1e-4  # the pile (0.382 with the pile ordered by noise)
