"""Fitting component models on a profile dataset, with an honest held-out report.

The default split holds out whole *configurations* (distinct feature tuples), not rows: repeated measurements of
one configuration (splitwise has several) never sit on both sides, so the held-out error is that of a point the
model has not seen. ``split="row"`` holds out rows at random instead (repetitions of a held-out row's
configuration may then be seen in training); reports say which split they used. Before splitting,
configurations measured more than twice as fast as a configuration no larger in any feature are dropped as
failed measurements and counted (``n_anomalous``). ``kind="auto"`` picks between the monotone parametric
model and the table interpolator by an inner split of the training rows only; the held-out rows are touched
once, for the report.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from sklearn.metrics import mean_absolute_percentage_error

from pearl_sched.errors import PearlSchedError
from pearl_sched.input_files import MAX_DOCUMENT_BYTES, read_text
from pearl_sched.profiles.components import (
    ComponentModel,
    ExtrapolationWarning,
    MonotoneStepRegressor,
    TableInterpolator,
    from_json,
)
from pearl_sched.profiles.dataset import REQUIRED, ProfileDataset, ProfileFormatError, Target

FEATURES: dict[str, tuple[tuple[str, ...], str]] = {
    "prefill": (("tokens", "cached_tokens", "batch_size", "tp"), "prefill"),
    "ttft": (("tokens", "cached_tokens", "batch_size", "tp"), "prefill"),
    "decode_step": (("batch_size", "context_tokens", "tp"), "decode"),
    "itl": (("batch_size", "context_tokens", "tp"), "decode"),
}
Kind = Literal["auto", "monotone", "table"]
_BUNDLE_FORMAT = "pearl_sched.profile-models/1"


@dataclass(frozen=True)
class FitReport:
    """What a fit achieved and where it may be trusted."""

    source: str
    gpu_type: str
    model: str
    target: str
    kind: str
    split: str
    n_train: int
    n_heldout: int
    heldout_mape_pct: float
    n_anomalous: int = 0
    input_box: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass
class FittedComponent:
    """A fitted model with its report."""

    estimator: ComponentModel
    report: FitReport

    def predict(self, X: NDArray[np.float64]) -> NDArray[np.float64]:
        """Predicted times in seconds for feature rows ordered as :data:`FEATURES` names them for the target.

        Warns with :class:`~pearl_sched.profiles.components.ExtrapolationWarning` outside the fitted input box.
        """
        return self.estimator.predict(X)


def _features(data: ProfileDataset, target: str) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    names, _ = FEATURES[target]
    X = data.features(names)
    X = np.where(np.isnan(X), 0.0, X)  # unknown cached tokens mean none known
    return X, data["value_s"].astype(float)


Split = Literal["configuration", "row"]


def split_by_configuration(
    X: NDArray[np.float64], heldout: float, seed: int, by: Split = "configuration"
) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """Boolean masks (train, heldout) over the rows of ``X``.

    ``by="configuration"`` keeps every distinct feature tuple on one side; ``by="row"`` holds out rows at random,
    so repeated measurements of a held-out row's configuration may be in the training side (what "held-out rows"
    means for profiles with repetitions). With two or fewer configurations nothing is held out.

    Args:
        X: Feature rows, one per measurement.
        heldout: Fraction of configurations (or rows) to hold out; at least one is held out.
        seed: Seed of the random choice, so a split is reproducible.
        by: ``"configuration"`` or ``"row"``.

    Returns:
        The training mask and the held-out mask; exactly one of them is true on each row.
    """
    if by == "row":
        config = np.arange(len(X))
    else:
        _, config = np.unique(X, axis=0, return_inverse=True)
        config = config.ravel()
    n_configs = int(config.max()) + 1 if len(config) else 0
    rng = np.random.default_rng(seed)
    chosen = rng.permutation(n_configs)[: max(1, round(heldout * n_configs))] if n_configs > 2 else np.array([], int)
    test = np.isin(config, chosen)
    return ~test, test


# +1: time grows with the feature; −1: time falls with it (more tensor parallelism).
_DIRECTION = {"tokens": 1.0, "cached_tokens": 1.0, "batch_size": 1.0, "context_tokens": 1.0, "tp": -1.0}


def monotone_outliers(
    X: NDArray[np.float64], y: NDArray[np.float64], names: Sequence[str], factor: float = 2.0
) -> NDArray[np.bool_]:
    """Rows of configurations that are physically impossibly fast, so a failed or truncated measurement.

    A configuration is an outlier when its mean time is more than ``factor`` times faster than that of a
    configuration no larger in every feature (and no more tensor-parallel).

    Args:
        X: Feature rows, one per measurement, columns named by ``names``.
        y: Measured times in seconds, one per row.
        names: Column names of ``X``, each a key of the monotone direction table (``tokens``, ``cached_tokens``,
            ``batch_size``, ``context_tokens``, ``tp``).
        factor: How many times faster than a no-larger configuration counts as impossible.

    Returns:
        A boolean mask, true on every row of an outlying configuration.

    Raises:
        KeyError: When a name in ``names`` is not one of the known feature columns.
    """
    configs, inverse = np.unique(X, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    means = np.bincount(inverse, weights=y) / np.bincount(inverse)
    signed = configs * np.array([_DIRECTION[n] for n in names])
    bad = np.zeros(len(configs), dtype=bool)
    for i in range(len(configs)):
        smaller = np.all(signed <= signed[i], axis=1)
        smaller[i] = False
        if np.any(means[smaller] > factor * means[i]):
            bad[i] = True
    return bad[inverse]


def _screened(
    rows: ProfileDataset, target: str
) -> tuple[ProfileDataset, NDArray[np.float64], NDArray[np.float64], int]:
    """Rows, features and values of ``target`` with failed measurements (``monotone_outliers``) dropped."""
    X, y = _features(rows, target)
    keep = ~monotone_outliers(X, y, FEATURES[target][0])
    return rows.where(keep), X[keep], y[keep], int((~keep).sum())


def _mape(model: ComponentModel, X: NDArray[np.float64], y: NDArray[np.float64]) -> float:
    if len(y) == 0:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        return float(mean_absolute_percentage_error(y, model.predict(X)) * 100)


def _make(kind: str, design: str) -> ComponentModel:
    if kind == "monotone":
        return MonotoneStepRegressor(design, batch_cap="auto" if design == "decode" else None)
    return TableInterpolator(design)


class ProfileFitError(PearlSchedError, ValueError):
    """A group of profile rows that holds nothing to fit (a required column that is zero in every row)."""


def _check_informative(rows: ProfileDataset, target: str) -> None:
    group = "/".join(str(rows[c][0]) for c in ("source", "gpu_type", "model"))
    for column in REQUIRED[target]:
        if not np.any(rows[column].astype(float) > 0):
            raise ProfileFitError(
                f"{group} {target}: {column} is zero in every one of its {len(rows)} rows: nothing to fit"
            )


def fit_component(
    data: ProfileDataset,
    target: Target,
    *,
    kind: Kind = "auto",
    heldout: float = 0.2,
    seed: int = 0,
    split: Split = "configuration",
) -> FittedComponent:
    """Fit one target of one (source, GPU, model) group and report its held-out error."""
    rows = data.select(target=target)
    if len(rows) < 3:
        raise ValueError(f"{target}: need at least 3 rows to fit, found {len(rows)}")
    _check_informative(rows, target)
    names, design = FEATURES[target]
    rows, X, y, n_anomalous = _screened(rows, target)
    train, test = split_by_configuration(X, heldout, seed, split)
    chosen = kind
    if kind == "auto":
        inner_train, inner_test = split_by_configuration(X[train], heldout, seed + 1, split)
        scores: dict[Kind, float] = {}
        candidate: Kind
        for candidate in ("monotone", "table"):
            if inner_train.sum() >= 2 and inner_test.any():
                model = _make(candidate, design).fit(X[train][inner_train], y[train][inner_train])
                scores[candidate] = _mape(model, X[train][inner_test], y[train][inner_test])
        chosen = min(scores, key=lambda k: scores[k]) if scores else "monotone"
    estimator = _make(chosen, design).fit(X[train], y[train])
    report = FitReport(
        source=str(rows["source"][0]),
        gpu_type=str(rows["gpu_type"][0]),
        model=str(rows["model"][0]),
        target=target,
        kind=chosen,
        split=split,
        n_train=int(train.sum()),
        n_heldout=int(test.sum()),
        heldout_mape_pct=_mape(estimator, X[test], y[test]),
        n_anomalous=n_anomalous,
        input_box={n: (float(X[train, i].min()), float(X[train, i].max())) for i, n in enumerate(names)},
    )
    # The shipped model is refitted on every row; the report keeps the held-out figure of the split fit.
    final = _make(chosen, design).fit(X, y)
    return FittedComponent(final, report)


@dataclass
class ProfileModels:
    """Fitted component models keyed by (source, gpu_type, model, target), with their reports."""

    components: dict[tuple[str, str, str, str], FittedComponent] = field(default_factory=dict)

    def to_json(self) -> str:
        """The bundle as a reviewable JSON document: each component's key, report and estimator (no pickle)."""
        entries = [
            {"key": list(key), "report": asdict(c.report), "estimator": c.estimator.to_dict()}
            for key, c in sorted(self.components.items())
        ]
        return json.dumps({"format": _BUNDLE_FORMAT, "components": entries}, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ProfileModels:
        """A bundle back from :meth:`to_json`'s output.

        Raises:
            json.JSONDecodeError: When ``text`` is not JSON.
            ValueError: When the document is not a pearl_sched profile-models bundle.
            KeyError: When an entry lacks a field :meth:`to_json` writes.
        """
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != _BUNDLE_FORMAT:
            raise ValueError(f"not a pearl_sched profile-models file (expected format {_BUNDLE_FORMAT!r})")
        out = cls()
        for entry in data["components"]:
            report = entry["report"]
            report["input_box"] = {k: tuple(v) for k, v in report["input_box"].items()}
            out.components[tuple(entry["key"])] = FittedComponent(from_json(entry["estimator"]), FitReport(**report))
        return out

    def save(self, path: str | Path) -> None:
        """Write the bundle to ``path`` as JSON (see :meth:`to_json`), replacing any file there.

        Raises:
            OSError: When the file cannot be written.
        """
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | Path) -> ProfileModels:
        """Read a bundle written by :meth:`save`; any problem is a one-line :class:`ProfileFormatError`."""
        text = read_text(path, limit_bytes=MAX_DOCUMENT_BYTES)
        try:
            return cls.from_json(text)
        except ProfileFormatError:
            raise
        except RecursionError:
            raise ProfileFormatError(path, "JSON nested too deeply") from None
        except json.JSONDecodeError as exc:
            raise ProfileFormatError(path, f"not JSON: {exc.msg}", row=exc.lineno) from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            problem = (
                str(exc) if str(exc).startswith("not a pearl_sched") else f"a damaged bundle ({type(exc).__name__})"
            )
            raise ProfileFormatError(path, problem) from None


def fit_profiles(
    data: ProfileDataset,
    *,
    kind: Kind = "auto",
    heldout: float = 0.2,
    seed: int = 0,
    split: Split = "configuration",
    progress: Callable[[str], None] | None = None,
) -> ProfileModels:
    """Fit every (source, GPU, model, target) group with at least 3 rows."""
    models = ProfileModels()
    for key, group in data.groups("source", "gpu_type", "model", "target"):
        if len(group) < 3:
            continue
        if progress is not None:
            progress("/".join(map(str, key)))
        models.components[key] = fit_component(group, key[3], kind=kind, heldout=heldout, seed=seed, split=split)  # type: ignore[index, arg-type]
    return models


def crossval_predictions(
    data: ProfileDataset,
    target: Target,
    *,
    kind: Kind = "auto",
    folds: int = 5,
    seed: int = 0,
    split: Split = "configuration",
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(measured, predicted) for every row of ``target``, each predicted by a model fitted without it.

    Rows (or, with ``split="configuration"``, whole configurations) are dealt into ``folds`` folds per
    (GPU, model) group; each fold is predicted by :func:`fit_component` on the others — model choice included.
    """
    measured: list[NDArray[np.float64]] = []
    predicted: list[NDArray[np.float64]] = []
    for _, group in data.select(target=target).groups("gpu_type", "model"):
        group, X, y, _ = _screened(group, target)
        unit = np.arange(len(X)) if split == "row" else np.unique(X, axis=0, return_inverse=True)[1].ravel()
        n_units = int(unit.max()) + 1 if len(unit) else 0
        if n_units < 4:
            continue
        fold_of_unit = np.random.default_rng(seed).permutation(n_units) % folds
        fold = fold_of_unit[unit]
        for k in range(folds):
            test = fold == k
            if not test.any():
                continue
            fitted = fit_component(group.where(~test), target, kind=kind, seed=seed, split=split)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExtrapolationWarning)
                predicted.append(fitted.estimator.predict(X[test]))
            measured.append(y[test])
    if not measured:
        return np.empty(0), np.empty(0)
    return np.concatenate(measured), np.concatenate(predicted)
