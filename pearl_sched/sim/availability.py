"""Preemptible-GPU availability from a spot-instance trace (Bamboo's AWS p3 trace in ../shared/data/bamboo).

The trace lists ``time_ms,add|remove,nodeN`` events; the number of live nodes over time is a step function.
A scenario takes a window of it and scales node counts to its own pool — GPUs = min(cap, round(nodes × g)) —
with the factor g chosen so the window's time-weighted mean matches the scenario's target (PEARL's segments
average 13.6 / 9.0 / 11.8 rollout GPUs; RLBoost and PEARL derive theirs from Bamboo but do not publish them).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from pearl_sched.errors import PearlSchedError


class TraceFormatError(PearlSchedError, ValueError):
    """An availability trace that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class AvailabilityTrace:
    """A step function: ``counts[i]`` holds from ``times_s[i]`` until the next time (or ``end_s``)."""

    times_s: NDArray[np.float64]
    counts: NDArray[np.float64]
    end_s: float

    @classmethod
    def from_bamboo(cls, path: str | Path) -> AvailabilityTrace:
        """Live nodes over time from a Bamboo trace file."""
        path = Path(path)
        live: set[str] = set()
        times: list[float] = []
        counts: list[float] = []
        try:
            handle = path.open(newline="")
        except OSError as exc:
            raise TraceFormatError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        with handle:
            last = 0.0
            for line, row in enumerate(csv.reader(handle), start=1):
                if not row:
                    continue
                if len(row) != 3 or row[1] not in ("add", "remove"):
                    raise TraceFormatError(f"{path}:{line}: expected 'time_ms,add|remove,node', got {row!r}")
                try:
                    at = float(row[0]) / 1e3
                except ValueError:
                    raise TraceFormatError(f"{path}:{line}: time {row[0]!r} is not a number") from None
                if at < last:
                    raise TraceFormatError(f"{path}:{line}: time goes backwards ({at} s after {last} s)")
                last = at
                (live.add if row[1] == "add" else live.discard)(row[2])
                if times and times[-1] == at:
                    counts[-1] = len(live)
                else:
                    times.append(at)
                    counts.append(len(live))
        if not times:
            raise TraceFormatError(f"{path}: no events")
        return cls(np.array(times), np.array(counts, dtype=float), float(times[-1]))

    def window(self, start_s: float, duration_s: float) -> AvailabilityTrace:
        """The trace from ``start_s`` for ``duration_s``, re-based to start at 0."""
        if duration_s <= 0 or start_s < 0 or start_s + duration_s > self.end_s + 1e-9:
            raise ValueError(f"window [{start_s}, {start_s + duration_s}] s is outside the trace's [0, {self.end_s}] s")
        inside = (self.times_s > start_s) & (self.times_s < start_s + duration_s)
        times = np.concatenate([[0.0], self.times_s[inside] - start_s])
        counts = np.concatenate([[self.at(start_s)], self.counts[inside]])
        return AvailabilityTrace(times, counts, duration_s)

    def at(self, t_s: float) -> float:
        """The count at time ``t_s``."""
        index = int(np.searchsorted(self.times_s, t_s, side="right")) - 1
        return float(self.counts[max(index, 0)])

    def mean(self) -> float:
        """Time-weighted mean over [0, end]."""
        spans = np.diff(np.concatenate([self.times_s, [self.end_s]]))
        return float(np.sum(spans * self.counts) / self.end_s) if self.end_s > 0 else float(self.counts[0])

    def preemption_hazard_per_s(self) -> float:
        """Departures per live unit-second: the maximum-likelihood rate of an exponential residence.

        Every drop of the count is that many departures; the exposure is the time-integral of the count.
        """
        spans = np.diff(np.concatenate([self.times_s, [self.end_s]]))
        exposure = float(np.sum(spans * self.counts))
        departures = float(np.sum(np.maximum(0.0, -np.diff(self.counts))))
        return departures / exposure if exposure > 0 else 0.0

    def scaled(self, factor: float, cap: int, step: int = 1) -> AvailabilityTrace:
        """Counts × ``factor``, rounded down to a multiple of ``step`` (whole TP groups), capped at ``cap``."""
        counts = np.minimum(cap, np.floor(self.counts * factor / step) * step)
        return AvailabilityTrace(self.times_s, counts, self.end_s)

    def scaled_to_mean(self, target: float, cap: int, step: int = 1) -> tuple[AvailabilityTrace, float]:
        """The scaling whose time-weighted mean is closest to ``target``; returns it and its factor."""
        if not 0 <= target <= cap:
            raise ValueError(f"target mean {target} is outside [0, {cap}]")
        peak = float(self.counts.max())
        if peak == 0:
            raise ValueError("the window has no live nodes to scale")
        lo, hi = 0.0, cap / max(float(self.counts[self.counts > 0].min()), 1.0) * 4
        for _ in range(60):
            mid = (lo + hi) / 2
            if self.scaled(mid, cap, step).mean() < target:
                lo = mid
            else:
                hi = mid
        best = min((lo, hi), key=lambda f: abs(self.scaled(f, cap, step).mean() - target))
        return self.scaled(best, cap, step), best
