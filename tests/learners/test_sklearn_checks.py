"""The learners as scikit-learn estimators: its `check_estimator` (every check but the
few named below, each skipped for a stated reason) and `cross_val_score`."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
from sklearn.model_selection import cross_val_score
from sklearn.utils.estimator_checks import check_estimator

from recourse_sim.learners import LogisticRegression, MLPClassifier, NearestCentroid

# Checks that do not apply, and why (each is expected to fail; a pass would mean the
# reason is gone and the entry should go too).
NOT_APPLICABLE = {
    # An unfitted learner raises recourse_sim.errors.NotFittedError (an AttributeError,
    # as scikit-learn's is): scikit-learn's own class cannot be raised without importing
    # scikit-learn, which a simulation run never does.
    "check_estimators_unfitted": "scikit-learn's NotFittedError class",
    # A column-vector y is refused with an error naming its shape instead of being
    # flattened with scikit-learn's DataConversionWarning (bad input is an error here).
    "check_supervised_y_2d": "a column-vector y is an error, not a warning",
}
NO_N_ITER = {
    # The fit is the online rule's refit; its state holds the parameters, not the count
    # of Newton iterations that reached them.
    "check_non_transformer_estimators_n_iter": "no n_iter_ (Newton's count is not kept)",
}

LEARNERS = [
    (LogisticRegression(), NOT_APPLICABLE | NO_N_ITER),
    (NearestCentroid(), NOT_APPLICABLE),
    (MLPClassifier(), NOT_APPLICABLE),
]


@pytest.mark.slow
@pytest.mark.parametrize(("learner", "skipped"), LEARNERS, ids=lambda v: type(v).__name__)
def test_check_estimator_passes_but_the_checks_that_do_not_apply(learner, skipped):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the checks' own data provokes warnings
        results = check_estimator(learner, on_fail=None)
    failed = {r["check_name"] for r in results if r["status"] == "failed"}
    passed = {r["check_name"] for r in results if r["status"] == "passed"}
    assert failed == set(skipped), failed ^ set(skipped)
    assert len(passed) >= 45  # the others ran and passed


@pytest.mark.parametrize("make", [LogisticRegression, NearestCentroid], ids=lambda c: c.__name__)
def test_cross_val_score_with_labels_as_words(make):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=120) > 0, "approved", "refused")
    scores = cross_val_score(make(), X, y, cv=4)
    assert scores.shape == (4,) and (scores > 0.8).all()
    fitted = make().fit(X, y)
    assert fitted.classes_.tolist() == ["approved", "refused"]
    assert set(fitted.predict(X)) == {"approved", "refused"}


@pytest.mark.slow  # (a fresh interpreter)
def test_a_learner_used_by_a_run_does_not_import_scikit_learn():
    """The tags import scikit-learn only when scikit-learn asks for them."""
    code = (
        "import sys, numpy as np\n"
        "from recourse_sim.learners import LogisticRegression\n"
        "m = LogisticRegression(n_classes=2).fit(np.eye(4), np.array([0, 1, 0, 1]))\n"
        "m.update(np.eye(4), np.array([1, 0, 1, 0])).predict_proba(np.eye(4))\n"
        "assert 'sklearn' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
