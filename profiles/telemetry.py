"""Trajectory statistics from rollout telemetry, refitted online after every step (as PEARL refits).

Telemetry is one row per turn of a trajectory: ``step, trajectory, turn, appended_tokens, generated_tokens,
retained_tokens, env_time_s`` and optionally ``decoding_fraction`` (the share of the step's trajectories
decoding, sampled by the cluster). :func:`step_statistics` reduces a step's rows — vectorised with numpy, a
million rows in well under a second — to :class:`TrajectoryStats`; :func:`refit` folds them into the running
estimate with an EWMA. Telemetry that is malformed or implausible (non-finite or negative numbers, no
complete trajectory, a decoding fraction outside (0, 1]) is rejected with a reason and leaves the running
estimate untouched: bad telemetry never corrupts the model.

The improved predictor's serving parameters come from SGLang's own ``/metrics`` series (prompt and cached tokens,
retracted requests, the KV pool size, the P→D speed): :func:`observe_serving` turns two samples around a batch into
a :class:`~pearl_sched.makespan_improved.ModeObservation`, :func:`refit_serving` folds it in. An absent or NaN
series is simply not measured, and the model falls back to its structural estimate (docs/profiles.md).

Its decode cost comes from SGLang's decode log line (running requests, the KV tokens they hold, the generation
throughput): :class:`DecodeBatchSums` keeps the sufficient statistics of those batches, :func:`fit_decode_cost`
regresses the iteration time on both (``t = A + b·n + c·K``), :func:`refit_decode_costs` folds it in; degenerate
batches (too few, one size, n and K collinear) are rejected with a reason (docs/makespan.md, "Decode cost on KV
tokens").
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import Field
from scipy.linalg import cho_factor, solve_triangular
from scipy.optimize import nnls

from pearl_sched.errors import TelemetryRejected
from pearl_sched.makespan_improved import DecodeCost, ModeObservation, PrefillCost, ServingParams
from pearl_sched.state import Frozen, Mode, NonNegFloat, PosFloat, Workload, turn_quantiles

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
    turn_quantiles: tuple[PosFloat, ...] = Field(
        default=(), description="Turns per trajectory every 5% (Workload.turn_quantiles); () when not known"
    )
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
            turn_quantiles=self.turn_quantiles,
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
        turn_quantiles=turn_quantiles(turns),
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
    blended: dict[str, object] = {
        name: (1 - alpha) * getattr(current, name) + alpha * getattr(observed, name)
        for name in TrajectoryStats.model_fields
        if name not in ("steps", "turn_quantiles")
    }
    # Quantiles blend level by level (the quantiles of the mixture's average shape); a step that logged another
    # number of them replaces them.
    old, new = current.turn_quantiles, observed.turn_quantiles
    blended["turn_quantiles"] = (
        tuple((1 - alpha) * a + alpha * b for a, b in zip(old, new, strict=True)) if len(old) == len(new) else new
    )
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


# -- SGLang's serving metrics ---------------------------------------------------------------------------------------
# The /metrics series the improved predictor is fitted from, as SGLang names them (read from the released wheels of
# the versions adapters/sglang_versions.py supports: sglang/srt/metrics/collector.py in 0.5.2 and 0.5.8,
# sglang/srt/observability/metrics_collector.py in 0.5.10 and 0.5.21; docs/profiles.md lists them).
PROMPT_TOKENS = "sglang:prompt_tokens_total"
"""Counter (every version): prompt tokens of finished requests, cached ones included."""
CACHED_TOKENS = "sglang:cached_tokens_total"
"""Counter (every version): prompt tokens served from the radix cache."""
CACHE_HIT_RATE = "sglang:cache_hit_rate"
"""Gauge (every version): the last prefill batch's hit rate — the fallback when the counters are absent."""
RETRACTED = "sglang:num_retracted_requests_total"
"""Counter (0.5.8 on): requests retracted because the KV pool ran out."""
RETRACTED_0_5_2 = "sglang:total_retracted_reqs"
"""Gauge holding a running total (0.5.2): the same count under its older name."""
MAX_TOTAL_NUM_TOKENS = "sglang:max_total_num_tokens"
"""Gauge (0.5.8 on): the worker's KV pool in tokens (0.5.2 has no such gauge: the launch value stays)."""
KV_TRANSFER_SPEED = "sglang:kv_transfer_speed_gb_s"
"""Gauge (every version, PD): the last KV transfer's speed in GB/s."""
SERVING_METRICS = (
    PROMPT_TOKENS,
    CACHED_TOKENS,
    CACHE_HIT_RATE,
    RETRACTED,
    RETRACTED_0_5_2,
    MAX_TOTAL_NUM_TOKENS,
    KV_TRANSFER_SPEED,
)


def _metric(sample: Mapping[str, float], name: str) -> float | None:
    """A finite, non-negative value of ``name`` in ``sample``; None when absent, NaN, infinite or negative."""
    value = sample.get(name)
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _delta(before: Mapping[str, float], after: Mapping[str, float], *names: str) -> float | None:
    """The increase of the first counter both samples carry; None if none does or it went down (a restart)."""
    for name in names:
        start, end = _metric(before, name), _metric(after, name)
        if start is not None and end is not None:
            return end - start if end >= start else None
    return None


def observe_serving(
    before: Mapping[str, float],
    after: Mapping[str, float],
    *,
    turns: float,
    prefill_workers: float = 0.0,
    decode_workers: float = 0.0,
    colocated_workers: float = 0.0,
) -> ModeObservation:
    """What one batch's workers reported, from two /metrics samples (its start and its end), summed over workers.

    The prefill side's counters (the colocated workers, or PD's prefill workers) give the hit rate, Δcached ÷
    Δprompt tokens, else the last batch's ``sglang:cache_hit_rate`` gauge averaged over the workers; the decode
    side's retraction counter over the batch's ``turns`` gives retractions per turn. A series absent, NaN, negative
    or going down (a worker restarted) is not measured (``None``): the model then uses its structural estimate.

    Args:
        before: The samples at the batch's start (metric name → value summed over the workers).
        after: The samples at its end.
        turns: Turns the batch served (requests to the decode side).
        prefill_workers: The configuration that ran, in reference workers (PD prefill).
        decode_workers: PD decode workers.
        colocated_workers: Colocated workers.
    """
    workers = colocated_workers or prefill_workers
    prompts = _delta(before, after, PROMPT_TOKENS)
    cached = _delta(before, after, CACHED_TOKENS)
    hit: float | None = None
    if prompts is not None and cached is not None and prompts > 0:
        hit = min(1.0, cached / prompts)
    else:
        gauge = _metric(after, CACHE_HIT_RATE)
        hit = min(1.0, gauge / max(workers, 1.0)) if gauge is not None else None
    retracted = _delta(before, after, RETRACTED, RETRACTED_0_5_2)
    per_turn = retracted / turns if retracted is not None and turns > 0 and math.isfinite(turns) else None
    return ModeObservation(
        prefill_workers=prefill_workers,
        decode_workers=decode_workers,
        colocated_workers=colocated_workers,
        cache_hit_rate=hit,
        retractions_per_turn=per_turn,
    )


def refit_serving(
    current: ServingParams,
    mode: Mode,
    observation: ModeObservation,
    sample: Mapping[str, float],
    *,
    workers: float,
    alpha: float = 0.3,
) -> ServingParams:
    """Fold one batch's serving metrics into the improved predictor's :class:`ServingParams` (EWMA, α).

    Per mode, a measured hit rate and retraction rate are blended with the running ones while the same
    configuration keeps running, and replace them when another ran (the correction is relative to the
    configuration that ran); an unmeasured one keeps the previous value. The KV pool per worker
    (``sglang:max_total_num_tokens`` ÷ workers) and the P→D speed (``sglang:kv_transfer_speed_gb_s`` ÷ prefill
    workers, in bytes/s) replace the launch values when reported. Nothing here raises on bad metrics.

    Args:
        current: The parameters so far.
        mode: The mode that ran.
        observation: :func:`observe_serving` of the batch.
        sample: The /metrics sample at the batch's end (gauges summed over the workers; the P→D speed over the
            prefill workers).
        workers: Workers whose KV pools ``sglang:max_total_num_tokens`` sums.
        alpha: The EWMA weight of the new batch, in (0, 1].
    """
    if not 0.0 < alpha <= 1.0 or math.isnan(alpha):
        raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
    previous = current.observed(mode)
    same = previous is not None and previous.capacity(mode) == observation.capacity(mode)

    def blend(name: str) -> float | None:
        new: float | None = getattr(observation, name)
        old: float | None = getattr(previous, name) if previous is not None else None
        if new is None:
            return old
        return (1 - alpha) * old + alpha * new if same and old is not None else new

    merged = observation.model_copy(
        update={"cache_hit_rate": blend("cache_hit_rate"), "retractions_per_turn": blend("retractions_per_turn")}
    )
    update: dict[str, object] = {"colocated" if mode is Mode.COLOCATED else "disaggregated": merged}
    pool = _metric(sample, MAX_TOTAL_NUM_TOKENS)
    if pool is not None and pool > 0 and workers > 0:
        update["kv_pool_tokens"] = pool / workers
    speed = _metric(sample, KV_TRANSFER_SPEED)
    senders = observation.prefill_workers
    if mode is Mode.DISAGGREGATED and speed is not None and speed > 0 and senders > 0:
        update["kv_transfer_bytes_per_s"] = speed / senders * 1e9
    return current.model_copy(update=update)


# -- SGLang's decode batches ----------------------------------------------------------------------------------------
# Every --decode-log-interval decode iterations (default 40) SGLang's scheduler logs the running batch
# (sglang/srt/managers/scheduler_metrics_mixin.py ``log_decode_stats``, read in the 0.5.8 wheel):
#   Decode batch, #running-req: n, #token: K, token usage: u, [accept len: a, accept rate: …,] cuda graph: …,
#   gen throughput (token/s): g, #queue-req: q,
# K is the pool's tokens in use (max_total_num_tokens − available − evictable: the KV the running requests hold) and
# g the tokens generated since the last line over the seconds since it, so one iteration took n·a/g seconds (a = 1
# without speculative decoding), the mean step time SGLang itself records under SGLANG_RECORD_STEP_TIME.
MIN_DECODE_BATCHES = 3
"""Decode batches below which A, b and c are not fitted (three coefficients need three batches)."""

COLLINEAR_R2 = 1.0 - 1e-6
"""Squared correlation of n and K above which the fit cannot tell a request's cost from a KV token's."""

_DECODE_LINE = re.compile(
    r"Decode batch.*?#running-req: (?P<n>\d+), #token: (?P<k>\d+),.*?"
    r"(?:accept len: (?P<a>[\d.]+),.*?)?gen throughput \(token/s\): (?P<g>[\d.]+)"
)


class DecodeBatchSums(NamedTuple):
    """Sufficient statistics of decode batches (n running requests, K KV tokens, t seconds an iteration).

    The least-squares fit of ``t = A + b·n + c·K`` needs only these sums, so a running record is nine floats.
    """

    batches: float = 0.0
    running: float = 0.0
    kv: float = 0.0
    running_sq: float = 0.0
    running_kv: float = 0.0
    kv_sq: float = 0.0
    seconds: float = 0.0
    running_seconds: float = 0.0
    kv_seconds: float = 0.0

    def add(self, running: float, kv_tokens: float, seconds: float) -> DecodeBatchSums:
        """These sums with one more batch of ``running`` requests holding ``kv_tokens`` that took ``seconds``."""
        n, k, t = float(running), float(kv_tokens), float(seconds)
        return DecodeBatchSums(
            self.batches + 1,
            self.running + n,
            self.kv + k,
            self.running_sq + n * n,
            self.running_kv + n * k,
            self.kv_sq + k * k,
            self.seconds + t,
            self.running_seconds + n * t,
            self.kv_seconds + k * t,
        )


def decode_batches_from_log(lines: Iterable[str]) -> DecodeBatchSums:
    """The decode batches of SGLang scheduler log lines (``Decode batch, #running-req: …``; other lines skipped).

    An iteration's seconds are n·a/g (a the speculative accept length, 1 without); a line with no running request or
    no throughput is skipped. (The first line after an idle spell averages the idle gap in and is kept: an outlier.)
    """
    sums = DecodeBatchSums()
    for line in lines:
        m = _DECODE_LINE.search(line)
        if m is None:
            continue
        n, kv, rate = int(m["n"]), int(m["k"]), float(m["g"])
        accept = float(m["a"]) if m["a"] else 1.0
        if n > 0 and rate > 0 and accept > 0:
            sums = sums.add(n, kv, n * accept / rate)
    return sums


def fit_decode_cost(sums: DecodeBatchSums, *, gpu_type: str, tp: int) -> DecodeCost:
    """``t = A + b·n + c·K`` by non-negative least squares over the decode batches ``sums`` records.

    Solved from the sums alone: the normal equations' Gram matrix (scaled to unit diagonal) is factored, and the
    non-negative least squares of the factor (scipy's ``nnls``) is the constrained fit itself.

    Raises:
        TelemetryRejected: A non-finite sum, fewer than :data:`MIN_DECODE_BATCHES` batches, one batch
            size, KV tokens that do not vary, or n and K collinear (squared correlation above :data:`COLLINEAR_R2`):
            the three costs cannot be told apart.
    """
    if not all(math.isfinite(x) for x in sums):
        raise TelemetryRejected("a decode batch reported a non-finite count, KV size or time")
    k = sums.batches
    if k < MIN_DECODE_BATCHES:
        raise TelemetryRejected(
            f"{k:.0f} decode batches, fewer than the {MIN_DECODE_BATCHES} a fit of A, b and c needs"
        )
    mean_n, mean_kv = sums.running / k, sums.kv / k
    var_n = sums.running_sq / k - mean_n * mean_n
    var_kv = sums.kv_sq / k - mean_kv * mean_kv
    cov = sums.running_kv / k - mean_n * mean_kv
    if var_n <= 1e-9 * max(1.0, sums.running_sq / k):
        raise TelemetryRejected("one decode batch size: the cost per request cannot be fitted")
    if var_kv <= 1e-9 * max(1.0, sums.kv_sq / k):
        raise TelemetryRejected("the decode batches' KV tokens do not vary: the cost per KV token cannot be fitted")
    if cov * cov >= COLLINEAR_R2 * var_n * var_kv:
        raise TelemetryRejected(
            "running requests and KV tokens are collinear (one context): b and c cannot be told apart"
        )
    gram = np.array(
        [
            [k, sums.running, sums.kv],
            [sums.running, sums.running_sq, sums.running_kv],
            [sums.kv, sums.running_kv, sums.kv_sq],
        ]
    )
    moments = np.array([sums.seconds, sums.running_seconds, sums.kv_seconds])
    scale = 1.0 / np.sqrt(np.diag(gram))
    try:
        factor, lower = cho_factor(gram * np.outer(scale, scale), lower=True)
    except np.linalg.LinAlgError:
        raise TelemetryRejected("the decode batches' normal equations are singular") from None
    factor = np.tril(factor)
    # ‖X·β − t‖² = ‖Lᵀ·β − L⁻¹·h‖² + const for the Gram matrix L·Lᵀ = XᵀX and h = Xᵀt, so nnls on the factor is the fit
    scaled, _ = nnls(factor.T, solve_triangular(factor, moments * scale, lower=lower))
    a, b, c = (float(x) for x in scaled * scale)
    return DecodeCost(gpu_type=gpu_type, tp=tp, iteration_s=a, per_seq_s=b, per_kv_token_s=c)


def refit_decode_costs(current: ServingParams, fitted: Sequence[DecodeCost], *, alpha: float = 0.3) -> ServingParams:
    """Fold each worker size's new decode cost into ``current`` (EWMA, α, per coefficient); other sizes keep theirs.

    A size without a previous cost takes the new one as it is.
    """
    if not 0.0 < alpha <= 1.0 or math.isnan(alpha):
        raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
    costs = {(d.gpu_type, d.tp): d for d in current.decode_costs}
    for new in fitted:
        old = costs.get((new.gpu_type, new.tp))
        if old is not None:
            new = new.model_copy(
                update={
                    name: (1 - alpha) * getattr(old, name) + alpha * getattr(new, name)
                    for name in ("iteration_s", "per_seq_s", "per_kv_token_s")
                }
            )
        costs[new.gpu_type, new.tp] = new
    return current.model_copy(update={"decode_costs": tuple(costs.values())})


# -- SGLang's prefill batches -----------------------------------------------------------------------------------------
# Every prefill batch a worker runs, SGLang logs (sglang 0.5.8 wheel, srt/managers/scheduler_metrics_mixin.py,
# ``log_prefill_stats``; the same fields on main): "Prefill batch, #new-seq: k, #new-token: N, #cached-token: C,
# token usage: …, #running-req: …, #queue-req: …" — N the tokens it computes, C the prefix tokens the radix cache
# served, summed over its k requests. The step's seconds come from its duration (the worker's own step timer).
_PREFILL_LINE = re.compile(r"Prefill batch.*?#new-seq: (\d+), #new-token: (\d+), #cached-token: (\d+)")


def parse_prefill_line(line: str) -> tuple[int, int, int] | None:
    """(#new-seq, #new-token, #cached-token) of one of SGLang's "Prefill batch" log lines; None for another line."""
    match = _PREFILL_LINE.search(line)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


class PrefillSteps:
    """Sufficient statistics of a worker's prefill batches for the two-term prefill cost α·n + β·n·(c + n/2).

    A batch of k requests computing N new tokens after C cached ones in all takes t = α·x₁ + β·x₂ with x₁ = N and
    x₂ = N·(C + N/2)/k (each request's n·(c + n/2) at the batch's mean n and c). Least squares through the origin
    over the batches needs Σx₁², Σx₁x₂, Σx₂², Σx₁t and Σx₂t only, so a copy is cheap and nothing is stored per
    batch. SGLang logs a continued chunked request's earlier chunks as neither new nor cached (its
    ``add_chunked_req`` counts prefix 0), so a log reader adds them to C; the simulator records them as context.

    With the batch count, Σx₁, Σx₂, Σt and Σt² too it also fits a per-batch intercept, t = t₀ + α·x₁ + β·x₂
    (:meth:`fit_with_intercept`): the fixed cost of a prefill step whatever its tokens.
    """

    def __init__(self) -> None:
        """No batches yet."""
        self.x1x1 = self.x1x2 = self.x2x2 = self.x1t = self.x2t = 0.0
        self.batches = 0
        self.x1 = self.x2 = self.t = self.tt = 0.0

    def add(self, *, sequences: int, new_tokens: float, cached_tokens: float, seconds: float) -> None:
        """Record one prefill batch: its requests, new and cached tokens (batch totals) and measured seconds."""
        if sequences <= 0 or new_tokens <= 0 or not math.isfinite(seconds) or seconds < 0:
            return
        x1 = float(new_tokens)
        x2 = new_tokens * (cached_tokens + new_tokens / 2) / sequences
        self.x1x1 += x1 * x1
        self.x1x2 += x1 * x2
        self.x2x2 += x2 * x2
        self.x1t += x1 * seconds
        self.x2t += x2 * seconds
        self.batches += 1
        self.x1 += x1
        self.x2 += x2
        self.t += seconds
        self.tt += seconds * seconds

    def fit(self) -> PrefillCost | None:
        """(α, β) by non-negative least squares; None without batches, or without spread in context.

        Without spread x₂ is a multiple of x₁ and the two terms cannot be told apart: the caller keeps one rate per
        token (PEARL's t_p). Where the unconstrained fit has a negative term, the better of the two one-term fits is
        taken (α alone is again one rate per token: None).
        """
        a, b, c = self.x1x1, self.x1x2, self.x2x2
        if a <= 0 or c <= 0:
            return None
        det = a * c - b * b
        if det <= 1e-6 * a * c:  # x₁ and x₂ collinear: no spread in context
            return None
        alpha = (c * self.x1t - b * self.x2t) / det
        beta = (a * self.x2t - b * self.x1t) / det
        if alpha >= 0 and beta >= 0:
            return PrefillCost(per_token_s=alpha, per_token_context_s=beta)
        if self.x2t > 0 and self.x2t**2 / c > self.x1t**2 / a:  # β alone explains more than α alone
            return PrefillCost(per_token_s=0.0, per_token_context_s=self.x2t / c)
        return None

    def fit_with_intercept(self, *, by_context: bool = True) -> PrefillCost | None:
        """(t₀, α, β) of t = t₀ + α·x₁ + β·x₂ by non-negative least squares; None where it is one rate per token.

        The exact non-negative solution of three coefficients: the least-squares fit on each subset of them whose
        normal equations are well conditioned, the one with the smallest squared error among those with no negative
        coefficient. None without batches, or where the best is α alone (PEARL's t_p; the caller keeps it). Where
        the batches have no spread in context β is not fitted (x₂ a multiple of x₁), so t₀ + α·x₁; without
        ``by_context`` (the one-term prefill cost, ``ServingParams.prefill_cost_by_context`` off) neither is it.
        """
        if self.batches < 3 or self.x1x1 <= 0:
            return None
        gram = np.array(
            [
                [float(self.batches), self.x1, self.x2],
                [self.x1, self.x1x1, self.x1x2],
                [self.x2, self.x1x2, self.x2x2],
            ]
        )
        target = np.array([self.t, self.x1t, self.x2t])
        best: tuple[float, tuple[int, ...], NDArray[np.float64]] | None = None
        subsets = ((0, 1, 2), (0, 1), (1, 2), (0, 2), (1,), (2,), (0,)) if by_context else ((0, 1), (1,), (0,))
        for subset in subsets:
            index = list(subset)
            g = gram[np.ix_(index, index)]
            scale = np.sqrt(np.diag(g))
            if np.any(scale <= 0):
                continue
            unit = g / np.outer(scale, scale)
            if np.linalg.det(unit) <= 1e-9:  # collinear columns: no spread in context, or one batch size
                continue
            coef = np.linalg.solve(unit, target[index] / scale) / scale
            if np.any(coef < 0):
                continue
            error = self.tt - 2 * float(coef @ target[index]) + float(coef @ g @ coef)
            if best is None or error < best[0]:
                best = (error, subset, coef)
        if best is None or best[1] == (1,):
            return None
        values = dict(zip(best[1], best[2].tolist(), strict=True))
        return PrefillCost(
            per_batch_s=values.get(0, 0.0), per_token_s=values.get(1, 0.0), per_token_context_s=values.get(2, 0.0)
        )


def blend_prefill_cost(
    previous: PrefillCost | None, fitted: PrefillCost | None, *, alpha: float = 0.3
) -> PrefillCost | None:
    """The running two-term prefill cost after one batch's fit (EWMA, weight ``alpha``).

    A batch without a fit keeps the previous one; the first fit replaces none.
    """
    if fitted is None or previous is None:
        return fitted or previous
    return PrefillCost(
        per_token_s=(1 - alpha) * previous.per_token_s + alpha * fitted.per_token_s,
        per_token_context_s=(1 - alpha) * previous.per_token_context_s + alpha * fitted.per_token_context_s,
        per_batch_s=(1 - alpha) * previous.per_batch_s + alpha * fitted.per_batch_s,
    )
