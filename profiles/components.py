"""Component models: prefill time and decode-iteration time, as scikit-learn regressors.

:class:`MonotoneStepRegressor` is a non-negative combination of basis functions that are non-decreasing in
each input (prefill and decode work grow with tokens, context and batch), fitted by non-negative least squares
on *relative* residuals (each row weighted by 1/y, which is what MAPE rewards). Non-negative weights on
monotone bases make the prediction non-negative and monotone by construction. Designs:

- ``"linear"``   ``w₀ + Σ wⱼ·xⱼ`` on any number of features (the generic form scikit-learn's checks exercise);
- ``"prefill"``  features (tokens, cached_tokens, batch_size, tp); with N = batch·tokens new tokens and
  A = batch·tokens·(cached + tokens/2) attention pairs: ``w₀ + w₁·N/tp + w₂·A/tp + w₃·N·(tp−1)/tp +
  w₄·tokens²/tp`` (GEMMs, attention over the prefix, the all-reduce volume, and the latency of one long
  prompt, which batching does not multiply);
- ``"decode"``   features (batch_size, context_tokens, tp):
  ``w₀ + w₁·B/tp + w₂·B·ctx/tp + w₃·(tp−1)/tp + w₄·B·(tp−1)/tp`` (weights read once per step, KV read per
  token of context, all-reduce latency and volume).

:class:`TableInterpolator` interpolates a dense measured table with scipy (``PchipInterpolator`` in one
dimension, which keeps monotone data monotone; ``LinearNDInterpolator`` over log-features in two or more)
and falls back to a :class:`MonotoneStepRegressor` outside the table's hull (and for tables varying in more
than three features, where triangulation is too costly).

Both warn with :class:`ExtrapolationWarning` when asked outside the box they were fitted on, and persist as
JSON (``to_json`` / ``from_json``): no pickle.
"""

from __future__ import annotations

import json
import warnings
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.interpolate import LinearNDInterpolator, PchipInterpolator
from scipy.optimize import nnls
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

FloatArray = NDArray[np.float64]
_FORMAT = "pearl_sched.component/1"


class ExtrapolationWarning(UserWarning):
    """A prediction was asked for outside the input box the model was fitted on."""


def _design(name: str, X: FloatArray) -> FloatArray:
    ones = np.ones(len(X))
    if name == "linear":
        return np.column_stack([ones, X])
    if name == "prefill":
        tokens, cached, batch, tp = X.T
        new = batch * tokens
        pairs = batch * tokens * (cached + tokens / 2)
        spread = (tp - 1) / tp
        return np.column_stack([ones, new / tp, pairs / tp, new * spread, tokens * tokens / tp])
    if name == "decode":
        batch, context, tp = X.T
        spread = (tp - 1) / tp
        return np.column_stack([ones, batch / tp, batch * context / tp / 1e3, spread, batch * spread])
    raise ValueError(f"unknown design {name!r}; choose 'linear', 'prefill' or 'decode'")


_FEATURES = {"prefill": 4, "decode": 3}
_MAX_TABLE_DIMS = 3  # Delaunay triangulation grows exponentially with dimension; beyond this, the fallback only


class _StepTimeTags:
    """scikit-learn tags shared by the step-time estimators.

    Targets are non-negative times, and a monotone model is not expected to score well on the arbitrary targets
    of scikit-learn's conformance checks.
    """

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()  # type: ignore[misc]
        tags.target_tags.positive_only = True
        if tags.regressor_tags is not None:
            tags.regressor_tags.poor_score = True
        return tags


class MonotoneStepRegressor(_StepTimeTags, RegressorMixin, BaseEstimator):  # type: ignore[misc]
    """Non-negative, monotone step-time regressor (see the module docstring).

    Args:
        design: ``"linear"``, ``"prefill"`` or ``"decode"``.
        batch_cap: Decode only. An engine runs at most ``max_num_seqs`` / ``max_running_requests`` sequences per
            iteration; beyond that, sequences wait and do not lengthen an iteration, so the batch feature is
            capped. ``None``: no cap; a number: that cap (sequences); ``"auto"``: chosen among quantiles of the
            observed batch sizes by 5-fold cross-validation on the training rows (learned as ``batch_cap_``).
    """

    _kind: ClassVar[str] = "monotone"

    def __init__(self, design: str = "linear", batch_cap: float | str | None = None) -> None:
        """Store the settings as given; like every scikit-learn estimator, they are validated in :meth:`fit`."""
        self.design = design
        self.batch_cap = batch_cap

    def fit(self, X: ArrayLike, y: ArrayLike) -> MonotoneStepRegressor:
        """Fit by non-negative least squares on relative residuals.

        Args:
            X: One row per measurement, columns as the design names them (see the module docstring).
            y: Measured step times, non-negative (seconds throughout pearl_sched).

        Returns:
            The fitted estimator.

        Raises:
            ValueError: On a negative step time, a column count the design does not take, or ``batch_cap``
                given with a design other than ``"decode"``.
        """
        X_arr, y_arr = validate_data(self, X, y, y_numeric=True, ensure_min_samples=2)
        self._check_features(X_arr)
        if np.any(y_arr < 0):
            raise ValueError("step times must be non-negative")
        if self.batch_cap is not None and self.design != "decode":
            raise ValueError("batch_cap applies to the decode design only")
        if self.batch_cap == "auto":
            self.batch_cap_ = _choose_cap(X_arr, y_arr)
        elif self.batch_cap is None:
            self.batch_cap_ = float("inf")
        else:
            self.batch_cap_ = float(self.batch_cap)
        self.coef_ = _nnls_fit(_design(self.design, self._capped(X_arr)), y_arr)
        self.input_min_ = X_arr.min(axis=0)
        self.input_max_ = X_arr.max(axis=0)
        return self

    def _capped(self, X: FloatArray) -> FloatArray:
        if self.design != "decode" or not np.isfinite(self.batch_cap_):
            return X
        capped: FloatArray = X.copy()
        capped[:, 0] = np.minimum(capped[:, 0], self.batch_cap_)
        return capped

    def predict(self, X: ArrayLike) -> FloatArray:
        """Predicted step times, in the units of the training targets.

        Warns with :class:`ExtrapolationWarning` when a row of ``X`` leaves the box the model was fitted on.
        """
        check_is_fitted(self, "coef_")
        X_arr = validate_data(self, X, reset=False)
        _warn_outside(X_arr, self.input_min_, self.input_max_)
        return np.asarray(_design(self.design, self._capped(X_arr)) @ self.coef_, dtype=float)

    def _check_features(self, X: FloatArray) -> None:
        expected = _FEATURES.get(self.design)
        if expected is not None and X.shape[1] != expected:
            raise ValueError(f"design {self.design!r} takes {expected} features, got {X.shape[1]}")

    def to_dict(self) -> dict[str, Any]:
        """The fitted weights, batch cap and input box as a JSON-ready dict (see :func:`to_json`)."""
        check_is_fitted(self, "coef_")
        return {
            "format": _FORMAT,
            "kind": self._kind,
            "params": self.get_params(),
            "coef": self.coef_.tolist(),
            "batch_cap": None if not np.isfinite(self.batch_cap_) else self.batch_cap_,
            "input_min": self.input_min_.tolist(),
            "input_max": self.input_max_.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MonotoneStepRegressor:
        """The fitted regressor back from :meth:`to_dict`'s output, predicting exactly as before.

        Raises:
            KeyError: When ``data`` lacks a field :meth:`to_dict` writes (:func:`from_json` turns this into a
                ``ValueError``).
        """
        model = cls(**data["params"])
        model.coef_ = np.asarray(data["coef"], dtype=float)
        model.batch_cap_ = float("inf") if data["batch_cap"] is None else float(data["batch_cap"])
        model.input_min_ = np.asarray(data["input_min"], dtype=float)
        model.input_max_ = np.asarray(data["input_max"], dtype=float)
        model.n_features_in_ = len(model.input_min_)
        return model


def _nnls_fit(basis: FloatArray, y: FloatArray) -> FloatArray:
    weight = 1.0 / np.maximum(y, max(float(np.max(y)) * 1e-9, 1e-12))
    scale = np.maximum(np.abs(basis).max(axis=0), 1e-300)  # column scaling keeps nnls well conditioned
    coef, _ = nnls((basis / scale) * weight[:, None], y * weight, maxiter=50 * basis.shape[1])
    return np.asarray(coef / scale, dtype=float)


def _choose_cap(X: FloatArray, y: FloatArray, folds: int = 5) -> float:
    """The batch cap (or none) with the lowest cross-validated mean relative error."""
    batch = X[:, 0]
    candidates = [float("inf"), *sorted({float(q) for q in np.quantile(batch, np.linspace(0.3, 0.95, 12))})]
    order = np.random.default_rng(0).permutation(len(y))
    best, best_error = float("inf"), float("inf")
    for cap in candidates:
        capped = X.copy()
        capped[:, 0] = np.minimum(batch, cap)
        basis = _design("decode", capped)
        errors = []
        for k in range(min(folds, len(y))):
            test = order[k::folds]
            train = np.setdiff1d(order, test)
            if len(train) < 2:
                continue
            coef = _nnls_fit(basis[train], y[train])
            errors.append(np.abs(basis[test] @ coef - y[test]) / np.maximum(y[test], 1e-12))
        error = float(np.mean(np.concatenate(errors))) if errors else float("inf")
        if error < best_error - 1e-12:
            best, best_error = cap, error
    return best


class TableInterpolator(_StepTimeTags, RegressorMixin, BaseEstimator):  # type: ignore[misc]
    """scipy interpolation of a dense table, with a monotone parametric fallback outside its hull.

    Args:
        design: The :class:`MonotoneStepRegressor` design used outside the table's hull.
    """

    _kind: ClassVar[str] = "table"

    def __init__(self, design: str = "linear") -> None:
        """Store the setting as given; like every scikit-learn estimator, it is validated in :meth:`fit`."""
        self.design = design

    def fit(self, X: ArrayLike, y: ArrayLike) -> TableInterpolator:
        """Keep the (averaged) table and build the interpolator over the columns that vary.

        Repeated rows of ``X`` are averaged into one table point. The fallback regressor is fitted on all rows
        (with ``batch_cap="auto"`` for the decode design).

        Args:
            X: One row per measurement, columns as the fallback's design names them.
            y: Measured step times, non-negative (seconds throughout pearl_sched).

        Returns:
            The fitted estimator.

        Raises:
            ValueError: When the fallback regressor refuses the data (see :meth:`MonotoneStepRegressor.fit`).
        """
        X_arr, y_arr = validate_data(self, X, y, y_numeric=True, ensure_min_samples=2)
        cap = "auto" if self.design == "decode" else None
        self.fallback_ = MonotoneStepRegressor(self.design, batch_cap=cap).fit(X_arr, y_arr)
        points, inverse = np.unique(X_arr, axis=0, return_inverse=True)
        values = np.bincount(inverse.ravel(), weights=y_arr) / np.bincount(inverse.ravel())
        self.points_ = points
        self.values_ = values
        self.input_min_ = X_arr.min(axis=0)
        self.input_max_ = X_arr.max(axis=0)
        self._build()
        return self

    def _build(self) -> None:
        self.varying_ = np.flatnonzero(self.points_.max(axis=0) > self.points_.min(axis=0))
        coords = self.points_[:, self.varying_]
        self._interp: Any = None
        if len(self.varying_) == 1 and len(coords) >= 2:
            order = np.argsort(coords[:, 0])
            self._interp = PchipInterpolator(coords[order, 0], self.values_[order], extrapolate=False)
        elif 2 <= len(self.varying_) <= _MAX_TABLE_DIMS and len(coords) > len(self.varying_):
            try:
                self._interp = LinearNDInterpolator(np.log1p(np.maximum(coords, 0)), self.values_)
            except Exception:  # scipy's qhull refuses degenerate (e.g. collinear) tables: use the fallback only
                self._interp = None

    def predict(self, X: ArrayLike) -> FloatArray:
        """Interpolated step times where the table covers ``X``, the fallback's elsewhere; never negative.

        Warns with :class:`ExtrapolationWarning` when a row of ``X`` leaves the box the model was fitted on.
        """
        check_is_fitted(self, "points_")
        X_arr = validate_data(self, X, reset=False)
        _warn_outside(X_arr, self.input_min_, self.input_max_)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExtrapolationWarning)
            out = self.fallback_.predict(X_arr)
        if self._interp is not None:
            coords = X_arr[:, self.varying_]
            if len(self.varying_) == 1:
                inside = np.asarray(self._interp(coords[:, 0]), dtype=float)
            else:
                inside = np.asarray(self._interp(np.log1p(np.maximum(coords, 0))), dtype=float)
            fixed = np.delete(np.arange(X_arr.shape[1]), self.varying_)
            same = np.all(np.isclose(X_arr[:, fixed], self.points_[0, fixed]), axis=1) if len(fixed) else True
            use = np.isfinite(inside) & same
            out = np.where(use, inside, out)
        return np.maximum(out, 0.0)

    def to_dict(self) -> dict[str, Any]:
        """The table, input box and fallback as a JSON-ready dict (see :func:`to_json`)."""
        check_is_fitted(self, "points_")
        return {
            "format": _FORMAT,
            "kind": self._kind,
            "params": self.get_params(),
            "points": self.points_.tolist(),
            "values": self.values_.tolist(),
            "input_min": self.input_min_.tolist(),
            "input_max": self.input_max_.tolist(),
            "fallback": self.fallback_.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TableInterpolator:
        """The fitted interpolator back from :meth:`to_dict`'s output, predicting exactly as before.

        Raises:
            KeyError: When ``data`` lacks a field :meth:`to_dict` writes (:func:`from_json` turns this into a
                ``ValueError``).
        """
        model = cls(**data["params"])
        model.points_ = np.asarray(data["points"], dtype=float)
        model.values_ = np.asarray(data["values"], dtype=float)
        model.input_min_ = np.asarray(data["input_min"], dtype=float)
        model.input_max_ = np.asarray(data["input_max"], dtype=float)
        model.fallback_ = MonotoneStepRegressor.from_dict(data["fallback"])
        model.n_features_in_ = len(model.input_min_)
        model._build()
        return model


ComponentModel = MonotoneStepRegressor | TableInterpolator


def to_json(model: ComponentModel) -> str:
    """A reviewable JSON document of a fitted component model."""
    return json.dumps(model.to_dict(), indent=1, sort_keys=True)


def from_json(text: str | dict[str, Any]) -> ComponentModel:
    """A component model back from :func:`to_json`'s output; predictions are identical."""
    data = json.loads(text) if isinstance(text, str) else text
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise ValueError(f"not a pearl_sched component model (expected format {_FORMAT!r})")
    kinds: dict[str, type[MonotoneStepRegressor] | type[TableInterpolator]] = {
        "monotone": MonotoneStepRegressor,
        "table": TableInterpolator,
    }
    try:
        return kinds[data["kind"]].from_dict(data)
    except KeyError as exc:
        raise ValueError(f"component model JSON lacks {exc}") from None


def _warn_outside(X: FloatArray, low: FloatArray, high: FloatArray) -> None:
    span = np.maximum(high - low, 1e-12)
    outside = np.any((low - 1e-9 * span > X) | (high + 1e-9 * span < X), axis=1)
    if np.any(outside):
        warnings.warn(
            f"{int(outside.sum())} of {len(X)} predictions extrapolate beyond the fitted input box "
            f"[{low.tolist()}, {high.tolist()}]",
            ExtrapolationWarning,
            stacklevel=3,
        )
