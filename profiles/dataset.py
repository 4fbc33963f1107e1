"""One validated, columnar profile dataset, whatever the measurements came from.

Every reader turns its source into rows of the same columns (units normalised to seconds and tokens)::

    source, gpu_type, model, tp, target, tokens, cached_tokens, batch_size, context_tokens, value_s

``target`` says what ``value_s`` measures:

- ``prefill``      whole-batch prefill time of ``batch_size`` sequences of ``tokens`` new tokens each, on top of
                   ``cached_tokens`` already in the KV cache;
- ``decode_step``  one decode iteration over ``batch_size`` running sequences of mean length ``context_tokens``;
- ``ttft``         a request's time to first token (prompt ``tokens``, ``cached_tokens`` reused), including queueing
                   where the source cannot separate it;
- ``itl``          inter-token latency of a request or a window, ``batch_size`` concurrent sequences when known
                   (NaN when not).

Rows with NaN, infinite, negative or implausibly large numbers (over :data:`PLAUSIBLE_MAX`) in a required
column are dropped and counted in ``dropped``
(a reason → count map that reports print), never silently kept; structurally broken input (a missing column,
text where a number belongs) raises :class:`ProfileFormatError` naming the file, row and column.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from pearl_sched.input_files import InputFileError

Target = Literal["prefill", "decode_step", "ttft", "itl"]
TARGETS: tuple[Target, ...] = ("prefill", "decode_step", "ttft", "itl")
NUMERIC = ("tp", "tokens", "cached_tokens", "batch_size", "context_tokens", "value_s")
TEXT = ("source", "gpu_type", "model", "target")
COLUMNS = TEXT + NUMERIC
# Columns a row of each target must have as finite, non-negative numbers; others may be NaN (unknown).
REQUIRED: Mapping[str, tuple[str, ...]] = {
    "prefill": ("tp", "tokens", "batch_size", "value_s"),
    "decode_step": ("tp", "batch_size", "context_tokens", "value_s"),
    "ttft": ("tp", "tokens", "value_s"),
    "itl": ("tp", "context_tokens", "value_s"),
}

# The largest value of each number a measurement can plausibly hold; a row over it is dropped and counted like a
# negative one. A step or TTFT of over a day, a sequence of 10^8 tokens (100× today's longest 1M-token contexts),
# a million concurrent sequences on one worker or TP over 1,024 is a corrupted or mis-scaled row, and fitting on
# such numbers overflows (a 1e300 column made the fit fail inside scipy).
PLAUSIBLE_MAX: Mapping[str, float] = {
    "tp": 1024.0,
    "tokens": 1e8,
    "cached_tokens": 1e8,
    "batch_size": 1e6,
    "context_tokens": 1e8,
    "value_s": 86_400.0,
}


class ProfileFormatError(InputFileError):
    """Input that cannot be read as a profile: the message names the file, row and column."""


@dataclass
class ProfileDataset:
    """Rows of profile measurements held as columns (numpy arrays for numbers, object arrays for text)."""

    columns: dict[str, NDArray[np.generic]]
    dropped: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        """Check that the dataset holds exactly :data:`COLUMNS`, all of one length.

        Raises:
            ValueError: When a column is missing or extra, or the columns differ in length.
        """
        lengths = {len(v) for v in self.columns.values()}
        if set(self.columns) != set(COLUMNS) or len(lengths) > 1:
            raise ValueError(f"a profile dataset needs the columns {COLUMNS} of equal length")

    def __len__(self) -> int:
        """The number of rows kept (dropped rows are only counted in ``dropped``)."""
        return len(self.columns["value_s"])

    def __getitem__(self, name: str) -> NDArray[np.generic]:
        """One column by name: a float array for the numbers of :data:`NUMERIC`, an object array for :data:`TEXT`.

        Raises:
            KeyError: When ``name`` is not one of :data:`COLUMNS`.
        """
        return self.columns[name]

    @classmethod
    def empty(cls) -> ProfileDataset:
        """A dataset with every column and no rows (the identity of :meth:`concat`)."""
        return cls.from_records([])

    @classmethod
    def from_records(
        cls, records: Iterable[Mapping[str, object]], *, dropped: Counter[str] | None = None
    ) -> ProfileDataset:
        """Validate records (dicts with the dataset's columns) and keep the good ones.

        A record missing a required number, or with a negative, non-finite or implausibly large one
        (:data:`PLAUSIBLE_MAX`), is dropped and counted
        under ``"<target>: bad <column>"``.
        """
        kept: dict[str, list[object]] = {c: [] for c in COLUMNS}
        counts: Counter[str] = Counter(dropped or {})
        for record in records:
            target = str(record["target"])
            if target not in REQUIRED:
                raise ValueError(f"unknown profile target {target!r}; expected one of {TARGETS}")
            values = {c: _number(record.get(c)) for c in NUMERIC}
            bad = next(
                (
                    c
                    for c in NUMERIC
                    if (c in REQUIRED[target] and math.isnan(values[c])) or _out_of_range(c, values[c])
                ),
                None,
            )
            if bad is not None:
                counts[f"{target}: bad {bad}"] += 1
                continue
            for c in TEXT:
                kept[c].append(str(record.get(c, "")))
            for c in NUMERIC:
                kept[c].append(values[c])
        columns: dict[str, NDArray[np.generic]] = {c: np.asarray(kept[c], dtype=object) for c in TEXT}
        columns.update({c: np.asarray(kept[c], dtype=float) for c in NUMERIC})
        return cls(columns, counts)

    @classmethod
    def concat(cls, parts: Sequence[ProfileDataset]) -> ProfileDataset:
        """All rows of all parts, drop counts added up."""
        if not parts:
            return cls.empty()
        columns = {c: np.concatenate([p.columns[c] for p in parts]) for c in COLUMNS}
        dropped: Counter[str] = Counter()
        for p in parts:
            dropped.update(p.dropped)
        return cls(columns, dropped)

    def where(self, mask: NDArray[np.bool_]) -> ProfileDataset:
        """The rows where ``mask`` is true (drop counts kept)."""
        return ProfileDataset({c: v[mask] for c, v in self.columns.items()}, Counter(self.dropped))

    def select(self, **equal: object) -> ProfileDataset:
        """Rows whose columns equal the given values, e.g. ``select(target="prefill", tp=2)``."""
        mask = np.ones(len(self), dtype=bool)
        for column, value in equal.items():
            mask &= self.columns[column] == value
        return self.where(mask)

    def groups(self, *by: str) -> list[tuple[tuple[object, ...], ProfileDataset]]:
        """Rows split by the distinct values of ``by`` columns, in sorted order."""
        keys = sorted({tuple(self.columns[c][i] for c in by) for i in range(len(self))}, key=str)
        return [(key, self.select(**dict(zip(by, key, strict=True)))) for key in keys]

    def features(self, names: Sequence[str]) -> NDArray[np.float64]:
        """A float matrix of the named numeric columns (rows × names)."""
        return (
            np.column_stack([self.columns[n].astype(float) for n in names]) if len(self) else np.empty((0, len(names)))
        )


def _number(value: object) -> float:
    if value is None or value == "":
        return math.nan
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def _out_of_range(column: str, value: float) -> bool:
    return math.isinf(value) or value < 0 or value > PLAUSIBLE_MAX[column]
