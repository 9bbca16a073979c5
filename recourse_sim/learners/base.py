"""The learner contract: scikit-learn estimators whose online update is a torch function.

Every learner keeps its parameters θ as a `State`: a dict of float64 torch tensors
(parameters plus whatever the update rule remembers, e.g. per-class counts or the
sliding window of past rounds). Two pure torch functions define the learner:

* ``proba_fn(state, X) -> (n, k)`` class probabilities, differentiable in X and state;
* ``update_fn(state, X, y) -> state⁺`` the online update θ⁺ = U(θ, X, y), differentiable
  in X (and in the state where the rule depends on it, e.g. warm-started SGD).

Both are pure: they never modify their inputs in place and never read ``self.state_``
(only hyperparameters), so collective recourse can call
``proba_fn(update_fn(state, X + Delta, y), X_query)`` and backpropagate to ``Delta``.

The numpy methods (`fit`, `update`, `predict_proba`, `predict`) are thin wrappers
around these two functions, so the simulation and the hypergradients of collective
recourse always use one and the same update rule.

`Learner.fit_numpy` fits without torch where a learner can (its state is numpy arrays
until something reads ``state_``), for checks that only read the fitted model.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from abc import ABC, abstractmethod
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

import numpy as np

from recourse_sim.errors import ConfigError, NotFittedError
from recourse_sim.lazy import LazyModule, is_tensor

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds learners without torch
    torch = LazyModule("torch", globals())

State = dict[str, "torch.Tensor"]

UPDATE_RULES = ("refit", "window", "sgd", "frozen")
"""Online update rules. ``refit``: refit on every row seen so far (memory);
``window``: refit on the last ``window`` rounds; ``sgd``: warm-started gradient steps
on the new round only; ``frozen``: never updated (the update is the identity, so the
reports it is given cannot move it)."""

DIVERGENCE_FACTOR = 100.0
"""An ``sgd`` update diverges when it leaves θ not finite, or multiplies ‖θ‖ by more than
this (measured against max(‖θ‖, 1) before the update): a learning rate far too large
for the data overshoots and each step multiplies θ again. Warned about once per fit
(`DivergenceWarning`), with the numbers; the run goes on, as the rule was asked for."""


class DivergenceWarning(UserWarning):
    """An ``sgd`` update made θ grow without bound (see `DIVERGENCE_FACTOR`)."""


MEMORY_RULES = ("refit", "window")
"""The update rules that remember past rows (``X_mem``, ``y_mem``, ``round_sizes``)."""


class LowRankGradient:
    """An (n, d) gradient whose rows are combinations of k ≪ d directions,
    G = (coefficients @ directions) / scale, kept as those factors: a large batch's
    gradient is then formed a block of rows at a time where it is used, never whole.
    ``np.asarray`` gives it whole."""

    def __init__(self, coefficients: np.ndarray, directions: np.ndarray, scale=None):
        self.coefficients = coefficients  # (n, k)
        self.directions = directions  # (k, d)
        self.scale = scale  # (d,) divides each column, or None

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.coefficients), self.directions.shape[1]

    def rows(self, index) -> np.ndarray:
        """The rows `index` (a slice or indices) of G, as a new array."""
        g = self.coefficients[index] @ self.directions
        if self.scale is not None:
            g /= self.scale
        return g

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        g = self.rows(slice(None))
        return g if dtype is None else g.astype(dtype, copy=False)


def as_tensor(a) -> torch.Tensor:
    """A float64 torch tensor view/copy of an array-like (tensors are passed through)."""
    if isinstance(a, torch.Tensor):
        return a.to(torch.float64)
    arr = np.asarray(a, dtype=np.float64)
    # torch cannot share memory with a read-only array (cached datasets are read-only)
    return torch.from_numpy(arr) if arr.flags.writeable else torch.tensor(arr)


def as_array(value) -> np.ndarray:
    """A state entry as a numpy array: a torch tensor's zero-copy view, an array itself
    (without importing torch: the state of `Learner.fit_numpy` holds arrays)."""
    return value.detach().numpy() if is_tensor(value) else value


def remember(
    state: State, X: torch.Tensor, y: torch.Tensor, window: int | None, copy: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rows a refit trains on: remembered rows plus the new round.

    The state holds ``X_mem`` (n, d), ``y_mem`` (n,) and ``round_sizes`` (rounds,), all
    float64. With ``window`` set, only the last ``window`` rounds are kept. Returns the
    new ``(X_mem, y_mem, round_sizes)``; gradients flow to every kept row of X. `copy`:
    False lets a memory of the new round alone be X itself (X then must not change).
    """
    X_old, y_old = state["X_mem"], state["y_mem"]
    # the bookkeeping on numpy: on a few numbers torch's per-call overhead dominates
    sizes = np.append(state["round_sizes"].numpy(), float(len(X)))
    if window is not None and len(sizes) > window:
        # drop the old rounds before concatenating: no copy of rows about to be dropped
        drop = int(sizes[:-window].sum())
        X_old, y_old, sizes = X_old[drop:], y_old[drop:], sizes[-window:]
    X = X.to(torch.float64)
    if len(X_old):
        X_mem, y_mem = torch.cat([X_old, X]), torch.cat([y_old, y.to(torch.float64)])
    else:  # the new round alone: a copy only to detach the memory from the caller's array
        X_mem = X if X.requires_grad or not copy else X.clone()
        y_mem = y.to(torch.float64, copy=True)
    return X_mem, y_mem, torch.from_numpy(sizes)


def first_memory(X: torch.Tensor, y: torch.Tensor) -> State:
    """The memory of a learner fitted on one round (X, y), in the layout of `remember`."""
    return {
        "X_mem": X.to(torch.float64),
        "y_mem": y.to(torch.float64),
        "round_sizes": torch.tensor([float(len(X))], dtype=torch.float64),
    }


def check_positive(name: str, value, *, integer: bool = False, allow_zero: bool = False) -> None:
    """Raise ConfigError naming `name` unless `value` is a positive (or zero) number."""
    kind = Integral if integer else Real
    ok = isinstance(value, kind) and not isinstance(value, bool)
    ok = ok and (value >= 0 if allow_zero else value > 0) and np.isfinite(value)
    if not ok:
        what = "integer" if integer else "number"
        sign = "non-negative" if allow_zero else "positive"
        raise ConfigError(f"{name}={value!r} must be a {sign} {what}")


class Learner(ABC):
    """Base class: scikit-learn's estimator conventions plus a differentiable online
    update.

    Subclasses implement `_init_state`, `proba_fn` and `update_fn` (and optionally
    `_check_params`); fitted attributes end in ``_`` (``state_``, ``classes_``,
    ``n_features_in_``). ``param_keys`` names the state entries that are model
    parameters (as opposed to memory such as remembered rows).

    The conventions are scikit-learn's (constructor arguments stored as attributes of
    the same name, `get_params`/`set_params`, so `sklearn.base.clone` works, `score`,
    a repr of the changed parameters) without inheriting from it: importing
    scikit-learn takes about a second, which every simulation would pay.
    """

    update_rule: str
    _estimator_type = "classifier"

    # -- scikit-learn's parameter conventions ----------------------------------------
    @classmethod
    def _get_param_names(cls) -> list[str]:
        """The constructor's parameter names, sorted."""
        return list(_param_names(cls.__init__))

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters (`deep`: also ``name__key`` of nested estimators)."""
        out = {}
        for name in self._get_param_names():
            value = getattr(self, name)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                out.update({f"{name}__{k}": v for k, v in value.get_params().items()})
            out[name] = value
        return out

    def set_params(self, **params: Any) -> Learner:
        """Set constructor parameters (``name__key`` for nested estimators); returns self."""
        valid = self._get_param_names()
        for key, value in params.items():
            name, nested, sub = key.partition("__")
            if name not in valid:
                raise ConfigError(
                    f"{type(self).__name__}.set_params: no parameter {name!r} "
                    f"(parameters: {', '.join(valid)})"
                )
            if nested:
                getattr(self, name).set_params(**{sub: value})
            else:
                setattr(self, name, value)
        return self

    def __sklearn_tags__(self) -> Any:
        """scikit-learn's tags of a classifier, for its model selection (``clone``,
        ``cross_val_score``) and checks. scikit-learn is imported here, only when it asks:
        a run never does."""
        from sklearn.utils import ClassifierTags, InputTags, Tags, TargetTags

        return Tags(
            estimator_type="classifier",
            target_tags=TargetTags(required=True),
            classifier_tags=ClassifierTags(),
            input_tags=InputTags(),
        )

    def score(self, X, y) -> float:
        """Accuracy of `predict` on (X, y)."""
        return float(np.mean(self.predict(X) == np.asarray(y)))

    def __repr__(self) -> str:
        # scikit-learn's style: only the parameters that differ from their defaults
        defaults = inspect.signature(type(self).__init__).parameters
        changed = [
            f"{name}={value!r}"
            for name, value in self.get_params(deep=False).items()
            if repr(value) != repr(defaults[name].default)
        ]
        return f"{type(self).__name__}({', '.join(changed)})"

    # -- the differentiable core -------------------------------------------------
    @abstractmethod
    def proba_fn(self, state: State, X: torch.Tensor) -> torch.Tensor:
        """Class probabilities (n, k) under parameters `state`; differentiable."""

    @abstractmethod
    def update_fn(self, state: State, X: torch.Tensor, y: torch.Tensor) -> State:
        """The online update θ⁺ = U(θ, X, y) as a differentiable torch map."""

    def warm_update_fn(
        self, state: State, X: torch.Tensor, y: torch.Tensor, start: State | None
    ) -> State:
        """`update_fn`, where `start` (a state from an update on nearby rows, or None)
        may serve an iterative solver as its first iterate. Equal to `update_fn` up to
        that solver's tolerance; by default `start` is ignored."""
        return self.update_fn(state, X, y)

    def refit_hypergradient(
        self,
        state: State,
        X: torch.Tensor,
        delta: torch.Tensor,
        y: torch.Tensor,
        start: State | None,
        queries: torch.Tensor,
        goal: torch.Tensor,
        factor: torch.Tensor | None = None,
    ) -> tuple[float, torch.Tensor | LowRankGradient, State, torch.Tensor | None] | None:
        """Collective recourse's objective for one update on the rows X + delta, in
        closed form where the learner has one: (the queries' mean goal cross-entropy
        after the update, its gradient in delta (a tensor or a `LowRankGradient`), the
        updated state, a solver aid such as a Hessian factor for the next call's
        `factor`). None (the default) sends collective recourse through autograd on
        `warm_update_fn` instead."""
        return None

    @abstractmethod
    def _init_state(self, X: torch.Tensor, y: torch.Tensor) -> State:
        """Parameters fitted from scratch on (X, y)."""

    def _fits_on_numpy(self) -> bool:
        """Whether `fit_numpy` fits on numpy alone (`_init_state_np`); False by default
        (it is then `fit`). A learner that says True also reads a state of numpy arrays
        in `proba_np`."""
        return False

    def _init_state_np(self, X: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
        """`_init_state` on numpy arrays (X float64, y class indices), the same entries
        as float64 arrays; only called where `_fits_on_numpy` is True."""
        raise NotImplementedError

    def _check_params(self) -> None:  # noqa: B027 (optional hook: nothing to check by default)
        """Validate hyperparameters (called by `fit`); raise ConfigError naming the bad one."""

    @property
    def param_keys(self) -> tuple[str, ...]:
        """State entries that are model parameters (not memory); in a fixed order."""
        self._check_fitted()
        return tuple(self.current_state())

    @property
    def scaling_keys(self) -> tuple[str, ...]:
        """State entries of a fixed input scaling, set by `fit` from its rows and kept by
        every update (none by default)."""
        return ()

    def goal_loss_grad(
        self, state: State, X: np.ndarray, goal: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Per-row goal cross-entropy −log p(goal | x) (probability clamped at 1e-300, as
        `recourse_sim.recourse.linear_program.goal_loss`) and its gradient in x, on float64
        numpy arrays (the state's entries may be torch tensors or their numpy views);
        None (the default) where the learner has no closed form, so callers take
        autograd through `proba_fn`."""
        return None

    def goal_margin_coef(self, state: State, goal: np.ndarray) -> np.ndarray | None:
        """Where the goal loss −log p(goal | x) is a strictly decreasing function of one
        margin linear in x (a binary linear model), that margin's gradient in x for each
        row's goal, (n, d) float64; None (the default) where it is not. Descent on the
        loss then moves along this fixed direction, and a lower loss is a larger margin."""
        return None

    def goal_margin(self, state: State, X: np.ndarray, goal: np.ndarray) -> np.ndarray | None:
        """The margin of `goal_margin_coef` at each row of X, (n,) float64: the goal's
        log-odds log p(goal | x) − log p(other | x), so p(goal | x) ≥ t exactly where it
        is ≥ logit(t). None where `goal_margin_coef` is None."""
        return None

    def proba_np(self, state: State, X: np.ndarray) -> np.ndarray:
        """`proba_fn` on a float64 numpy array, without a graph: (n, k) numpy. Learners
        with a numpy form override it (on a few rows, torch is mostly overhead)."""
        with torch.no_grad():
            return self.proba_fn(state, as_tensor(X)).numpy()

    # -- scikit-learn surface ------------------------------------------------------
    def fit(self, X, y) -> Learner:
        """Fit from scratch on (X, y); y holds class indices 0..k-1."""
        X, y = self._validate(X, y, first=True)
        self._check_params()
        self.state_ = {k: v.detach() for k, v in self._init_state(X, y).items()}
        self.__dict__.pop("numpy_state_", None)
        self.diverging_ = False
        return self

    def fit_numpy(self, X, y) -> Learner:
        """`fit` on numpy alone, where the learner has a numpy fit: the same checks, and
        a model that reading (`param_vector`, `predict_proba`, `predict`) leaves on numpy,
        so a check of a scenario loads no torch for it. Its state (``numpy_state_``)
        becomes torch tensors when something reads ``state_`` (an update, a recourse
        search). The numbers are `fit`'s up to rounding (other libraries' arithmetic):
        checks use this fit (`recourse-sim validate`), runs use `fit`. Without a numpy
        fit it is `fit`."""
        if not self._fits_on_numpy():
            return self.fit(X, y)
        X, y = self._validate_np(X, y, first=True)
        self._check_params()
        state = self._init_state_np(X, y)
        self.__dict__.pop("state_", None)
        self.numpy_state_ = state
        self.diverging_ = False
        return self

    def __getattr__(self, name: str) -> Any:
        # (only called when normal lookup fails) a state fitted by `fit_numpy` becomes
        # torch tensors when first read as ``state_``
        numpy_state = self.__dict__.get("numpy_state_")
        if name != "state_" or numpy_state is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.state_ = {k: as_tensor(v) for k, v in numpy_state.items()}
        del self.numpy_state_
        return self.state_

    def current_state(self) -> dict[str, Any]:
        """The fitted state as it is held, neither copied nor converted: torch tensors, or
        numpy arrays after `fit_numpy` (until ``state_`` is read). For readers that take
        either (`as_array`), and to tell two models apart: an update replaces it."""
        self._check_fitted()
        state = self.__dict__.get("state_")
        return self.__dict__["numpy_state_"] if state is None else state

    def update(self, X, y, start: State | None = None) -> Learner:
        """Apply the online update rule to one round of reported data. `start`: the same
        update solved elsewhere (e.g. collective recourse's model after its refit on the
        very rows given here), for an iterative solver to start from (`warm_update_fn`);
        the result equals the plain update's up to that solver's tolerance."""
        X, y = self._validate(X, y, first=False)
        before = self.param_vector() if self.update_rule == "sgd" else None
        with torch.no_grad():
            if start is None:
                new = self.update_fn(self.state_, X, y)
            else:
                new = self.warm_update_fn(self.state_, X, y, start)
            self.state_ = {k: v.detach() for k, v in new.items()}
        if before is not None:
            self._warn_if_diverging(before, self.param_vector())
        return self

    def _warn_if_diverging(self, before: np.ndarray, after: np.ndarray) -> None:
        """`DivergenceWarning` (once per fit) if this update left θ not finite or
        multiplied its norm by more than `DIVERGENCE_FACTOR`."""
        if getattr(self, "diverging_", False):
            return
        with np.errstate(over="ignore", invalid="ignore"):
            old, new = float(np.linalg.norm(before)), float(np.linalg.norm(after))
        if np.isfinite(new) and new <= DIVERGENCE_FACTOR * max(old, 1.0):
            return
        self.diverging_ = True
        lr = getattr(self, "lr", None)
        warnings.warn(
            f"{type(self).__name__}: update_rule sgd diverges: one update took |theta| from "
            f"{old:.3g} to {new:.3g} (more than {DIVERGENCE_FACTOR:g}x"
            + (f"; lr {lr:g} is too large for these data" if lr is not None else "")
            + "); later rounds run on a model that has blown up",
            DivergenceWarning,
            stacklevel=3,
        )

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities, shape (n, k)."""
        X = self._check_X(X, fitted=True)  # (NotFittedError first)
        return self.proba_np(self.current_state(), X)

    def predict(self, X) -> np.ndarray:
        """Most probable class index per row."""
        proba = self.predict_proba(X)  # raises NotFittedError before touching classes_
        return self.classes_[np.argmax(proba, axis=1)]

    # -- helpers -------------------------------------------------------------------
    def state(self) -> State:
        """A detached copy of the current parameters (the θ that `update_fn` maps)."""
        self._check_fitted()
        return {k: v.clone() for k, v in self.state_.items()}

    @property
    def params(self) -> dict[str, np.ndarray]:
        """The model's parameters θ by name, in `param_keys` order, as numpy copies
        (logistic regression: ``coef`` (m, d) and ``intercept`` (m,), m = 1 for two
        classes; in the units the learner learns in, per standard deviation under
        ``standardize``); no remembered rows. Changing them changes nothing."""
        state = self.current_state()
        return {k: as_array(state[k]).copy() for k in self.param_keys}

    def param_vector(self) -> np.ndarray:
        """The model parameters (no memory) flattened in `param_keys` order, e.g. for an
        observation vector."""
        state = self.current_state()
        return np.concatenate([as_array(state[k]).reshape(-1) for k in self.param_keys])

    def _check_fitted(self) -> None:
        if "state_" not in self.__dict__ and "numpy_state_" not in self.__dict__:
            raise NotFittedError(f"{type(self).__name__} is not fitted yet; call fit(X, y) first")

    def _validate(self, X, y, *, first: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """`_validate_np`'s (X, y as class indices) as tensors."""
        X, index = self._validate_np(X, y, first=first)
        return as_tensor(X), torch.tensor(index, dtype=torch.long)

    def _validate_np(self, X, y, *, first: bool) -> tuple[np.ndarray, np.ndarray]:
        """(X float64, y as integer class indices), checked. Fitting with ``n_classes`` set
        (as the simulation does) takes y as class indices 0..n_classes-1; without it, y
        may hold any labels (scikit-learn's convention): ``classes_`` are its sorted
        distinct values and `predict` returns them."""
        if y is None:
            raise ConfigError(
                f"{type(self).__name__} requires y to be passed, but the target y is None"
            )
        X = self._check_X(X, fitted=not first)
        y = np.asarray(y)
        if y.shape != (X.shape[0],):
            raise ConfigError(f"y must have shape ({X.shape[0]},), got {y.shape}")
        if first:
            if self.update_rule not in UPDATE_RULES:
                raise ConfigError(
                    f"update_rule={self.update_rule!r} is not one of {', '.join(UPDATE_RULES)}"
                )
            if X.shape[0] == 0:
                raise ConfigError("cannot fit on an empty X")
            n_classes = getattr(self, "n_classes", None)
            if n_classes is not None:
                check_positive("n_classes", n_classes, integer=True)
                _check_indices(y)
                self.classes_ = np.arange(n_classes)
            else:
                self.classes_ = np.unique(_check_labels(y))
            if len(self.classes_) < 2:
                raise ConfigError(f"need at least 2 classes, got 1 class: {np.unique(y).tolist()}")
            self.n_features_in_ = X.shape[1]
        if getattr(self, "n_classes", None) is not None:
            _check_indices(y)
            if y.size and y.max() >= len(self.classes_):
                raise ConfigError(
                    f"label {int(y.max())} out of range for {len(self.classes_)} classes"
                )
            index = y.astype(np.int64)
        else:
            index = np.searchsorted(self.classes_, y) if y.size else y.astype(np.int64)
            unseen = (index >= len(self.classes_)) | (
                self.classes_[np.minimum(index, len(self.classes_) - 1)] != y
            )
            if unseen.any():
                raise ConfigError(
                    f"label {y[unseen][0]!r} is not one of the classes fitted "
                    f"({self.classes_.tolist()[:10]})"
                )
        return X, index

    def _check_X(self, X, *, fitted: bool) -> np.ndarray:
        """X as a 2-d finite float64 array (a ConfigError, a ValueError, that says what
        is wrong otherwise); with `fitted`, of the fitted number of features."""
        if fitted:
            self._check_fitted()
        if hasattr(X, "toarray"):  # a scipy.sparse matrix or array
            raise ConfigError(
                "sparse input is not supported: a sparse matrix was passed, but dense data "
                "is required (use X.toarray())"
            )
        X = np.asarray(X)
        if np.iscomplexobj(X):
            raise ConfigError("Complex data not supported")
        X = X.astype(np.float64, copy=False)  # (numpy's TypeError or ValueError names the cell)
        if X.ndim != 2:
            raise ConfigError(
                f"X must be 2-d (n_samples, n_features), got shape {X.shape}; Reshape your "
                "data (X.reshape(-1, 1) for one feature, X.reshape(1, -1) for one sample)"
            )
        if X.shape[1] == 0:
            raise ConfigError(f"0 feature(s) (shape={X.shape}) while a minimum of 1 is required.")
        if not np.isfinite(X).all():
            raise ConfigError("X contains NaN or infinite values")
        if fitted and X.shape[1] != self.n_features_in_:
            raise ConfigError(
                f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input (it was fitted on {self.n_features_in_})"
            )
        return X

    def _check_window(self) -> None:
        """`window` must be a positive integer exactly when update_rule == 'window'."""
        window = getattr(self, "window", None)
        if self.update_rule == "window":
            check_positive("window", window, integer=True)
        elif window is not None:
            raise ConfigError(
                f"window={window!r} is only used with update_rule='window', "
                f"not update_rule={self.update_rule!r}"
            )


def _check_indices(y: np.ndarray) -> None:
    """y must hold class indices (non-negative integers)."""
    if y.size and (not np.issubdtype(y.dtype, np.integer) or y.min() < 0):
        raise ConfigError("y must hold class indices 0..k-1 (non-negative integers)")


def _check_labels(y: np.ndarray) -> np.ndarray:
    """y as class labels: integers, strings or whole-numbered floats (scikit-learn's
    "Unknown label type" for anything else, e.g. a continuous target)."""
    if y.dtype == object:
        kinds = {type(v) for v in y.tolist()}
        if not (kinds <= {str} or kinds <= {int, bool}):
            raise ConfigError(f"Unknown label type: {sorted(k.__name__ for k in kinds)}")
        return y.astype(str) if kinds <= {str} else y.astype(np.int64)
    if np.issubdtype(y.dtype, np.floating) and not (np.isfinite(y) & (y == np.round(y))).all():
        raise ConfigError("Unknown label type: continuous (a classifier needs class labels)")
    return y


@functools.cache
def _param_names(init) -> tuple[str, ...]:
    """`Learner._get_param_names` of a constructor, read once (every env reset makes a
    learner; reading the signature each time was a measurable part of a reset)."""
    signature = inspect.signature(init)
    return tuple(
        sorted(
            p.name
            for p in signature.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        )
    )


def check_recourse_training(learner: Learner) -> None:
    """Validate a learner's recourse-training options; raise ConfigError naming the bad one.

    Reads ``recourse_loss_weight`` (λ ≥ 0), ``action_set`` (an `ActionSet` over the
    learner's ``n_features_in_`` features; required when λ > 0) and ``recourse_goal`` (a
    class index). Called by the learners' ``fit`` once the data fixed d and k.
    """
    lam = learner.recourse_loss_weight
    check_positive("recourse_loss_weight", lam, allow_zero=True)
    action_set = learner.action_set
    # (duck-typed: the learners sit below recourse_sim.recourse and do not import it)
    if action_set is not None and not callable(getattr(action_set, "recourse_delta", None)):
        raise ConfigError(
            f"action_set must be a recourse_sim.recourse.ActionSet or None, "
            f"got {type(action_set).__name__}"
        )
    if lam > 0 and action_set is None:
        raise ConfigError(
            f"recourse_loss_weight={lam!r} needs an action_set (the actionable polytope Δ)"
        )
    if action_set is not None and action_set.n_features != learner.n_features_in_:
        raise ConfigError(
            f"action_set has {action_set.n_features} features, X has {learner.n_features_in_}"
        )
    goal = learner.recourse_goal
    n_classes = len(learner.classes_)
    if not (isinstance(goal, Integral) and not isinstance(goal, bool) and 0 <= goal < n_classes):
        raise ConfigError(f"recourse_goal={goal!r} must be a class index in 0..{n_classes - 1}")
