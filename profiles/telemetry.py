"""Trajectory statistics from rollout telemetry, refitted online after every step (as PEARL refits).

Telemetry is one row per turn of a trajectory: ``step, trajectory, turn, appended_tokens, generated_tokens,
retained_tokens, env_time_s`` and optionally ``decoding_fraction`` (the share of the step's trajectories
decoding, sampled by the cluster). :func:`step_statistics` reduces a step's rows — vectorised with numpy, a
million rows in well under a second — to :class:`TrajectoryStats`; :func:`refit` folds them into the running
estimate with an EWMA. Telemetry that is malformed or implausible (non-finite or negative numbers, no
complete trajectory, a decoding fraction outside (0, 1]) is rejected with a reason and leaves the running
estimate untouched: bad telemetry never corrupts the model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import Field

from pearl_sched.errors import TelemetryRejected
from pearl_sched.state import Frozen, NonNegFloat, PosFloat, Workload

TELEMETRY_COLUMNS = (
    "step",
    "trajectory",
    "turn",
    "appended_tokens",
    "generated_tokens",
    "retained_tokens",
    "env_time_s",
)


class TrajectoryStats(Frozen):
    """What the makespan models need to know about the batch's trajectories."""

    turns_mean: PosFloat
    turns_slowest: PosFloat = Field(description="Turns of the slowest trajectories (90th percentile) [S]")
    appended_tokens_per_turn: NonNegFloat = Field(description="[ΔL]")
    generated_tokens_per_turn: PosFloat = Field(description="[r]")
    retained_tokens: NonNegFloat = Field(description="Mean context a trajectory keeps at its last turn")
    env_time_per_turn_s: NonNegFloat
    env_time_std_s: NonNegFloat
    bubble_ratio: NonNegFloat = Field(default=0.0, description="θ = (1 − f)/f")
    steps: int = Field(default=1, ge=1, description="Steps folded into this estimate")

    def workload(self, *, batch_size: int, unfinished: int, kv_bytes_per_token: float) -> Workload:
        """A :class:`~pearl_sched.state.Workload` for ``plan()`` from these statistics."""
        return Workload(
            batch_size=batch_size,
            unfinished=unfinished,
            turns=self.turns_slowest,
            appended_tokens_per_turn=self.appended_tokens_per_turn,
            generated_tokens_per_turn=self.generated_tokens_per_turn,
            env_time_per_turn_s=self.env_time_per_turn_s,
            env_time_std_s=self.env_time_std_s,
            bubble_ratio=self.bubble_ratio,
            mean_context_tokens=self.retained_tokens / 2,
            max_context_tokens=self.retained_tokens,
            kv_bytes_per_token=kv_bytes_per_token,
        )


@dataclass(frozen=True)
class RefitResult:
    """The estimate after a refit, and whether the step's telemetry was used (and if not, why)."""

    stats: TrajectoryStats | None
    accepted: bool
    reason: str = ""


def _column(table: Mapping[str, ArrayLike], name: str) -> NDArray[np.float64]:
    try:
        return np.asarray(table[name], dtype=float)
    except KeyError:
        raise TelemetryRejected(f"telemetry lacks the column {name!r}") from None
    except (TypeError, ValueError):
        raise TelemetryRejected(f"column {name!r} is not numeric") from None


def step_statistics(table: Mapping[str, ArrayLike], *, decoding_fraction: float | None = None) -> TrajectoryStats:
    """Reduce one step's telemetry rows to trajectory statistics; raises :class:`TelemetryRejected`."""
    cols = {name: _column(table, name) for name in TELEMETRY_COLUMNS if name != "step"}
    lengths = {len(v) for v in cols.values()}
    if len(lengths) != 1:
        raise TelemetryRejected(f"columns differ in length: {sorted(lengths)}")
    if lengths == {0}:
        raise TelemetryRejected("no telemetry rows")
    for name, values in cols.items():
        if not np.all(np.isfinite(values)):
            raise TelemetryRejected(f"{int(np.sum(~np.isfinite(values)))} non-finite value(s) in {name!r}")
        if np.any(values < 0):
            raise TelemetryRejected(f"{int(np.sum(values < 0))} negative value(s) in {name!r}")
    _, trajectory = np.unique(cols["trajectory"], return_inverse=True)
    trajectory = trajectory.ravel()
    turns = np.bincount(trajectory, weights=np.ones(len(trajectory)))
    if len(np.unique(np.column_stack([trajectory, cols["turn"]]), axis=0)) < len(trajectory):
        raise TelemetryRejected("a trajectory reports the same turn twice")
    retained = np.zeros(len(turns))
    np.maximum.at(retained, trajectory, cols["retained_tokens"])
    later = cols["turn"] > 0
    appended = (
        float(np.mean(cols["appended_tokens"][later])) if np.any(later) else float(np.mean(cols["appended_tokens"]))
    )
    generated = float(np.mean(cols["generated_tokens"]))
    if generated <= 0:
        raise TelemetryRejected("no generated tokens in the step")
    if decoding_fraction is not None and not (0.0 < decoding_fraction <= 1.0):
        raise TelemetryRejected(f"decoding fraction {decoding_fraction!r} is outside (0, 1]")
    theta = 0.0 if decoding_fraction is None else (1.0 - decoding_fraction) / decoding_fraction
    return TrajectoryStats(
        turns_mean=float(np.mean(turns)),
        turns_slowest=float(np.quantile(turns, 0.9)),
        appended_tokens_per_turn=appended,
        generated_tokens_per_turn=generated,
        retained_tokens=float(np.mean(retained)),
        env_time_per_turn_s=float(np.mean(cols["env_time_s"])),
        env_time_std_s=float(np.std(cols["env_time_s"])),
        bubble_ratio=theta,
    )


def refit(
    current: TrajectoryStats | None,
    table: Mapping[str, ArrayLike],
    *,
    alpha: float = 0.3,
    decoding_fraction: float | None = None,
) -> RefitResult:
    """Fold one step's telemetry into the running estimate: ``new = (1 − α)·current + α·step``.

    A step whose telemetry is rejected returns the current estimate unchanged, ``accepted=False`` and the
    reason. The first accepted step becomes the estimate as it is.
    """
    if not 0.0 < alpha <= 1.0 or math.isnan(alpha):
        raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
    try:
        observed = step_statistics(table, decoding_fraction=decoding_fraction)
    except TelemetryRejected as exc:
        return RefitResult(current, accepted=False, reason=exc.reason)
    if current is None:
        return RefitResult(observed, accepted=True)
    blended = {
        name: (1 - alpha) * getattr(current, name) + alpha * getattr(observed, name)
        for name in TrajectoryStats.model_fields
        if name != "steps"
    }
    return RefitResult(TrajectoryStats(**blended, steps=current.steps + 1), accepted=True)


def refit_steps(
    table: Mapping[str, ArrayLike], *, alpha: float = 0.3
) -> tuple[TrajectoryStats | None, list[tuple[int, str]]]:
    """Refit over every step of a multi-step table, in step order; returns the estimate and the rejections."""
    steps = _column(table, "step")
    order = np.argsort(steps, kind="stable")
    bounds = np.flatnonzero(np.diff(steps[order])) + 1
    columns = {name: np.asarray(table[name])[order] for name in TELEMETRY_COLUMNS if name in table}
    stats: TrajectoryStats | None = None
    rejected: list[tuple[int, str]] = []
    for chunk in np.split(np.arange(len(order)), bounds):
        if len(chunk) == 0:
            continue
        result = refit(stats, {name: values[chunk] for name, values in columns.items()}, alpha=alpha)
        if not result.accepted:
            rejected.append((int(columns["step"][chunk[0]]), result.reason))
        stats = result.stats
    return stats, rejected
