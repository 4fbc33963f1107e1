"""Short-horizon demand forecast from the lifecycle of in-flight trajectories.

As Prorsa does for its role switching, the forecast says how many prefill tokens arrive and how many
trajectories decode over the next planning interval.

Each in-flight trajectory is in one phase — decoding (with tokens still to generate), in the environment
(with seconds still to wait), waiting for prefill, or done — with its turns so far. The forecast rolls every
trajectory forward deterministically at the current rates: decode at ``decode_tokens_per_s`` per
trajectory, the environment at the statistics' mean time per turn, prefill of ΔL appended tokens at
``prefill_tokens_per_s`` per trajectory, until it reaches the expected number of turns (the statistics' mean,
or one more than it has done). Within the horizon it counts the prefill tokens that start and the
trajectory-seconds spent decoding. :meth:`DemandForecast.apply` turns the prefill demand into the
``min_prefill_tokens_per_s`` a plan must sustain; :func:`forecast_error` compares a forecast with what
happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pearl_sched.profiles.telemetry import TrajectoryStats
from pearl_sched.state import Workload


class Phase(IntEnum):
    """Where an in-flight trajectory is."""

    DECODING = 0
    ENVIRONMENT = 1
    WAITING_PREFILL = 2
    DONE = 3


@dataclass(frozen=True)
class InFlight:
    """The batch's trajectories now: one entry each.

    ``remaining`` means decode tokens still to generate (decoding), seconds still in the environment
    (environment), and is ignored otherwise.
    """

    phase: NDArray[np.int64]
    turns_done: NDArray[np.float64]
    remaining: NDArray[np.float64]

    @classmethod
    def of(cls, phase: ArrayLike, turns_done: ArrayLike, remaining: ArrayLike) -> InFlight:
        """Validated in-flight state from one entry per trajectory.

        Args:
            phase: :class:`Phase` values (0 decoding, 1 environment, 2 waiting for prefill, 3 done).
            turns_done: Turns each trajectory has completed.
            remaining: Decode tokens still to generate (decoding) or seconds still in the environment.

        Raises:
            ValueError: When the arrays differ in length, a phase is out of range, or a count is negative or
                not finite.
        """
        p = np.asarray(phase, dtype=np.int64)
        t = np.asarray(turns_done, dtype=float)
        r = np.asarray(remaining, dtype=float)
        if not (len(p) == len(t) == len(r)):
            raise ValueError("phase, turns_done and remaining must have one entry per trajectory")
        if np.any((p < 0) | (p > 3)):
            raise ValueError("phase must be 0 (decoding), 1 (environment), 2 (waiting for prefill) or 3 (done)")
        if not (np.all(np.isfinite(t)) and np.all(np.isfinite(r))) or np.any(t < 0) or np.any(r < 0):
            raise ValueError("turns_done and remaining must be finite and non-negative")
        return cls(p, t, r)


@dataclass(frozen=True)
class DemandForecast:
    """Prefill and decode load expected over the next ``horizon_s`` seconds.

    Attributes:
        horizon_s: Length of the forecast window, seconds.
        prefill_tokens: Appended prompt tokens whose prefill starts within the window.
        mean_decoding: Trajectories decoding at once, averaged over the window (trajectory-seconds of decode
            divided by ``horizon_s``).
        finishing: Trajectories that complete their last turn within the window.
    """

    horizon_s: float
    prefill_tokens: float
    mean_decoding: float
    finishing: int

    @property
    def prefill_tokens_per_s(self) -> float:
        """Forecast prefill demand as a rate: prefill tokens starting per second over the horizon."""
        return self.prefill_tokens / self.horizon_s

    def apply(self, workload: Workload) -> Workload:
        """The workload with the forecast prefill demand as the rate the pool must sustain."""
        return workload.model_copy(update={"min_prefill_tokens_per_s": self.prefill_tokens_per_s})


def forecast_demand(
    inflight: InFlight,
    stats: TrajectoryStats,
    *,
    horizon_s: float,
    decode_tokens_per_s: float,
    prefill_tokens_per_s: float,
    env_time_s: NDArray[np.float64] | None = None,
) -> DemandForecast:
    """Roll the in-flight trajectories forward over ``horizon_s`` (module docstring).

    Args:
        inflight: The batch's trajectories now.
        stats: Trajectory statistics: mean turns, appended and generated tokens per turn, environment seconds
            per turn.
        horizon_s: Forecast window, seconds.
        decode_tokens_per_s: Decode rate of one trajectory, tokens per second.
        prefill_tokens_per_s: Prefill rate of one trajectory's appended tokens, tokens per second.
        env_time_s: Optionally each trajectory's environment seconds per turn (for replaying what really
            happened); the forecast itself uses the statistics' mean.

    Raises:
        ValueError: When the horizon or a rate is not positive.
    """
    if horizon_s <= 0 or decode_tokens_per_s <= 0 or prefill_tokens_per_s <= 0:
        raise ValueError("horizon and rates must be positive")
    n = len(inflight.phase)
    env = np.full(n, stats.env_time_per_turn_s) if env_time_s is None else np.asarray(env_time_s, dtype=float)
    target_turns = np.maximum(np.ceil(stats.turns_mean), inflight.turns_done + 1)
    phase = inflight.phase.copy()
    turns = inflight.turns_done.copy()
    clock = np.zeros(n)
    remaining = inflight.remaining.copy()
    prefill_tokens = 0.0
    decoding_time = 0.0
    finishing = 0
    prefill_turn_s = stats.appended_tokens_per_turn / prefill_tokens_per_s
    for _ in range(10_000):
        active = (phase != Phase.DONE) & (clock < horizon_s)
        if not np.any(active):
            break
        decoding = active & (phase == Phase.DECODING)
        span = np.where(decoding, remaining / decode_tokens_per_s, 0.0)
        decoding_time += float(np.sum(np.minimum(clock + span, horizon_s)[decoding] - clock[decoding]))
        clock = np.where(decoding, clock + span, clock)
        turns = np.where(decoding, turns + 1, turns)
        done = decoding & (turns >= target_turns)
        finishing += int(np.sum(done & (clock <= horizon_s)))
        phase = np.where(done, Phase.DONE, np.where(decoding, Phase.ENVIRONMENT, phase))
        remaining = np.where(decoding & ~done, env, remaining)
        in_env = active & (phase == Phase.ENVIRONMENT) & ~decoding
        in_env |= decoding & ~done
        clock = np.where(in_env, clock + remaining, clock)
        phase = np.where(in_env, Phase.WAITING_PREFILL, phase)
        waiting = active & (phase == Phase.WAITING_PREFILL)
        prefill_tokens += float(np.sum(waiting & (clock < horizon_s))) * stats.appended_tokens_per_turn
        clock = np.where(waiting, clock + prefill_turn_s, clock)
        phase = np.where(waiting, Phase.DECODING, phase)
        remaining = np.where(waiting, stats.generated_tokens_per_turn, remaining)
    return DemandForecast(horizon_s, prefill_tokens, decoding_time / horizon_s, finishing)


def forecast_error(forecast: DemandForecast, realized: DemandForecast) -> dict[str, float]:
    """Relative errors of a forecast against what happened over the same horizon."""

    def relative(a: float, b: float) -> float:
        return abs(a - b) / b if b else (0.0 if a == 0 else float("inf"))

    return {
        "prefill_tokens": relative(forecast.prefill_tokens, realized.prefill_tokens),
        "mean_decoding": relative(forecast.mean_decoding, realized.mean_decoding),
    }
