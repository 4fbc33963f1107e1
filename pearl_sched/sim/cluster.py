"""The simulated cluster over time: rollout batches, the asynchronous trainer, availability and reconfiguration.

:class:`SimCluster` implements :class:`~pearl_sched.control.ClusterAdapter`, so the same
:class:`~pearl_sched.control.ControlLoop` drives it and a real SGLang cluster. :func:`run_segment` is the
clock: it runs one availability segment of a scenario as a loop over timed events (vidur's shape: pop the next
event, handle it, schedule what it causes) — the step boundary, the decision points inside a batch, the batch's
end with the training step it schedules, and the segment's end:

* **Rollout step k** simulates the step's batch (:mod:`~pearl_sched.sim.rollout`) on the workers the policy
  chose; a worker that changes joins the running batch when its transition ends: a new worker after
  preparation + finalisation, a borrowed training GPU after activation, a prefill↔decode flip after the role
  switch, a mode change (colocated↔disaggregated) after a restart (PEARL Table 3; docs/policies.md,
  "Reconfiguration costs (PEARL Table 3)").
* **The trainer** (staleness 1) trains step k once rollout k has ended and step k − 1's training is done;
  rollout k + 1 starts once rollout k has ended and training k − 1 is done. While the trainer is idle, its
  GPUs (the overlap zone) may be lent to rollout; they all go back when the batch ends, and training starts
  only when the last one is back (deactivation) — borrowed GPUs are never late by more than that.
* **Preemptible GPUs** follow the segment's availability trace. When GPUs leave, their workers leave the
  running batch at once (unused slots go first); their sequences keep the tokens generated so far and
  re-prefill their prefix elsewhere. When GPUs arrive, the policy decides whether to use them.
* **Decision points**: the step boundary, training finished (GPUs idle to lend), GPUs joining or leaving, and
  a periodic tick; at each the control loop observes, decides and applies.

Metric (PEARL §6): step throughput = (generated tokens + training tokens) / step time, the step time being
the time between consecutive training ends. A batch still running when the segment ends is carried over:
counted as such, never lost.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.control import ApplyReport, ControlLoop, Decider, Event, EventKind, Target
from pearl_sched.errors import SimulationError, TelemetryRejected
from pearl_sched.makespan import DeviceParams, PearlMakespanModel, PearlParams
from pearl_sched.makespan_improved import DecodeCost, ImprovedMakespanModel, PrefillCost, ServingParams
from pearl_sched.plans import ActionKind
from pearl_sched.predictors import make_predictor
from pearl_sched.profiles import telemetry as series
from pearl_sched.profiles.telemetry import (
    TELEMETRY_COLUMNS,
    DecodeBatchSums,
    PrefillSteps,
    TrajectoryStats,
    blend_prefill_cost,
    fit_decode_cost,
    observe_serving,
    refit,
    refit_decode_costs,
    refit_serving,
)
from pearl_sched.sim.availability import AvailabilityTrace
from pearl_sched.sim.rollout import BatchResult, Engine, PoolChange, RolloutSimulation
from pearl_sched.sim.scenario import GPUS_PER_NODE
from pearl_sched.sim.setting import Setting
from pearl_sched.sim.steptimes import StepTimes
from pearl_sched.state import (
    GPU,
    ROLLOUT_ROLES,
    Budget,
    ClusterState,
    Mode,
    Role,
    Status,
    Worker,
    WorkerSize,
    WorkerSizes,
    Workload,
    Zone,
    ratio_label,
    sized_ratio_label,
)

TELEMETRY_ALPHA = 0.3
"""The EWMA weight of each step's telemetry in the planners' workload estimate (profiles/telemetry.py default)."""

TRAINING = "training"


@dataclass
class _Slot:
    id: str
    zone: Zone
    gpu_ids: tuple[str, ...]
    role: Role | None = None  # the rollout role it serves or is moving to
    available: bool = True
    ready_at: float = 0.0  # when its current role becomes effective
    index: int | None = None  # its first worker index in the running batch (None: not in it yet)
    back_at: float = 0.0  # overlap: when the trainer has it again
    dp: int = 1  # attention-DP ranks: the batch's workers index … index + dp − 1
    prepared_since: float | None = None  # background preparation: when it began on this idle preemptible slot

    @property
    def size(self) -> WorkerSize:
        """The slot's worker size: its GPUs and attention-DP ranks."""
        return WorkerSize(tp=len(self.gpu_ids), dp=self.dp)


class ObservedStepTimes:
    """The world's step times as the workers report them: each prefill batch and decode iteration is recorded.

    Only sufficient statistics are kept (PEARL's linear forms are least-squares fits), so a copy is cheap. A worker
    measures a step from launch to result, so the recorded seconds include the per-step framework overhead the
    simulated workers add (``overhead_s``); the seconds returned to the simulator do not (it adds the overhead itself).
    A decode iteration is recorded as SGLang's decode log reports a batch: its running requests n and the KV tokens
    K they hold (n × their mean context), for PEARL's fit on n (:meth:`fit`) and the improved predictor's on n and K
    (:meth:`decode_sums`, :func:`~pearl_sched.profiles.telemetry.fit_decode_cost`).
    """

    def __init__(self, world: StepTimes, overhead_s: float = 0.0) -> None:
        """Record the step times ``world`` produces, starting with no samples.

        Args:
            world: The step times the simulated workers actually run at.
            overhead_s: Framework seconds the workers add to every step (recorded, not returned).
        """
        self.world = world
        self.overhead_s = overhead_s
        self.reset()

    def reset(self) -> None:
        """Forget the samples (after each batch's refit)."""
        self.prefill_nt = self.prefill_nn = 0.0  # Σ new tokens × s, Σ new tokens²
        self.prefill_steps = PrefillSteps()  # the same batches by context: the improved predictor's two-term cost
        self.decode_k = 0
        self.decode_b = self.decode_bb = self.decode_t = self.decode_bt = 0.0
        self.decode_kv = self.decode_kvkv = self.decode_bkv = self.decode_kvt = 0.0  # Σ K, Σ K², Σ n·K, Σ K × s

    def prefill_s(self, new_tokens: float, sequences: int, cached_tokens: float) -> float:
        """The world's prefill time, recorded."""
        seconds = self.world.prefill_s(new_tokens, sequences, cached_tokens)
        self.prefill_nt += new_tokens * (seconds + self.overhead_s)
        self.prefill_nn += new_tokens * new_tokens
        total_cached = cached_tokens * sequences  # SGLang's #cached-token is the batch's sum
        self.prefill_steps.add(
            sequences=sequences, new_tokens=new_tokens, cached_tokens=total_cached, seconds=seconds + self.overhead_s
        )
        return seconds

    def decode_s(self, batch: int, context_tokens: float) -> float:
        """The world's decode-iteration time, recorded."""
        seconds = self.world.decode_s(batch, context_tokens)
        measured = seconds + self.overhead_s
        self.decode_k += 1
        self.decode_b += batch
        self.decode_bb += batch * batch
        self.decode_t += measured
        self.decode_bt += batch * measured
        kv = batch * context_tokens
        self.decode_kv += kv
        self.decode_kvkv += kv * kv
        self.decode_bkv += batch * kv
        self.decode_kvt += kv * measured
        return seconds

    def mixed_s(
        self,
        prefill_new_tokens: float,
        prefill_sequences: int,
        prefill_cached_tokens: float,
        decode_batch: int,
        decode_context_tokens: float,
    ) -> float:
        """The world's mixed prefill+decode pass (not recorded: PEARL's linear forms have no mixed step)."""
        return self.world.mixed_s(
            prefill_new_tokens, prefill_sequences, prefill_cached_tokens, decode_batch, decode_context_tokens
        )

    @property
    def source(self) -> str:
        """The world's step-time source."""
        return self.world.source

    def fit(self, prior: DeviceParams) -> DeviceParams | None:
        """PEARL's ``t_p`` and ``A + b·n`` fitted to this batch's samples (None without two batch sizes)."""
        decode = self._decode_fit()
        if self.prefill_nn <= 0 or decode is None:
            return None
        return prior.model_copy(update={"prefill_s_per_token": max(self.prefill_nt / self.prefill_nn, 1e-12), **decode})

    def fit_partial(self, prior: DeviceParams) -> DeviceParams | None:
        """Like :meth:`fit`, but a side without samples keeps ``prior``'s parameters; None when neither has any.

        For a worker size that served one role only (a TP4 decode worker never prefills in PD).
        """
        update = self._decode_fit() or {}
        if self.prefill_nn > 0:
            update["prefill_s_per_token"] = max(self.prefill_nt / self.prefill_nn, 1e-12)
        return prior.model_copy(update=update) if update else None

    def decode_sums(self) -> DecodeBatchSums:
        """The recorded decode iterations as SGLang's decode batches: (running requests, KV tokens, seconds)."""
        return DecodeBatchSums(
            float(self.decode_k),
            self.decode_b,
            self.decode_kv,
            self.decode_bb,
            self.decode_bkv,
            self.decode_kvkv,
            self.decode_t,
            self.decode_bt,
            self.decode_kvt,
        )

    def prefill_cost(self) -> PrefillCost | None:
        """The two-term prefill cost α·n + β·n·(c + n/2) fitted to this batch's prefill steps (None: one term)."""
        return self.prefill_steps.fit()

    def prefill_step_cost(self, *, by_context: bool = True) -> PrefillCost | None:
        """The prefill cost with a per-batch intercept fitted to this batch's steps (None: one rate per token).

        t₀ + α·n + β·n·(c + n/2), or without ``by_context`` t₀ + α·n (``PrefillSteps.fit_with_intercept``).
        """
        return self.prefill_steps.fit_with_intercept(by_context=by_context)

    def _decode_fit(self) -> dict[str, float] | None:
        """``A`` and ``b`` by least squares over the decode iterations (None without two batch sizes)."""
        k = self.decode_k
        spread = k * self.decode_bb - self.decode_b**2
        if k < 2 or spread <= 1e-9 * max(1.0, k * self.decode_bb):
            return None
        per_sequence = (k * self.decode_bt - self.decode_b * self.decode_t) / spread
        per_sequence = max(per_sequence, 1e-12)
        fixed = max(0.0, (self.decode_t - per_sequence * self.decode_b) / k)
        return {"decode_iteration_s": fixed, "decode_per_seq_s": per_sequence}


@dataclass(frozen=True)
class StepRecord:
    """One training step: its rollout, its training, and what the policy did."""

    step: int
    rollout_start_s: float
    rollout_end_s: float
    train_start_s: float
    train_end_s: float
    step_time_s: float
    generated_tokens: int
    training_tokens: int
    ratio_at_start: str
    borrowed_workers: int
    preempted_workers: int
    prefill_tokens: int  # prompt tokens the workers computed: appended tokens, cache misses, retractions, preemptions
    cache_hit_tokens: int  # prompt tokens the radix caches served instead

    @property
    def throughput_tok_s(self) -> float:
        """PEARL §6 step throughput in tokens/s: (generated + training tokens) / step time; 0 for a 0 s step."""
        return (self.generated_tokens + self.training_tokens) / self.step_time_s if self.step_time_s > 0 else 0.0


@dataclass
class SegmentResult:
    """A policy's run over one segment."""

    policy: str
    segment: str
    duration_s: float
    mean_rollout_gpus: float
    scaling_factor: float
    steps: list[StepRecord]
    carried_over: int  # trajectories of the batch still running at the end (not lost: carried to the next)
    timeline: list[tuple[float, str, str]]  # (time, slot, role or 'training' or 'off')
    ratios: list[tuple[float, str]]  # (time, configuration in force)
    decisions: int
    transitions: int
    wall_s: float = 0.0  # wall time of the run (set by the experiment runner)
    simulations: int = 0  # intervals a searching decider (the hindsight oracle) simulated ahead

    @property
    def throughput_tok_s(self) -> float:
        """The segment's step throughput in tokens/s: Σ (generated + training tokens) / Σ step time; 0 if no step."""
        time = sum(s.step_time_s for s in self.steps)
        tokens = sum(s.generated_tokens + s.training_tokens for s in self.steps)
        return tokens / time if time > 0 else 0.0


class SimCluster:
    """The simulated cluster as the control loop sees it (implements ``ClusterAdapter``)."""

    def __init__(
        self,
        setting: Setting,
        *,
        costs: TransitionCosts,
        policy: PolicyConfig | None = None,
        dedicated_gpus: int | None = None,
        preemptible_gpus: int | None = None,
        allow_borrow: bool = True,
        worker_sizes: WorkerSizes | None = None,
        background_preparation: bool = False,
    ) -> None:
        """Build the worker slots (one per TP group) of the three zones, no batch running, at time 0.

        Dedicated and training (overlap) slots start available, preemptible ones unavailable until the trace
        brings them; no slot has a rollout role yet. Every slot has the scenario's worker size; with
        ``worker_sizes`` the cluster reports them in its state, so a planner may regroup GPUs into workers of those
        sizes (each a new worker: its preparation for its TP degree, then finalisation).

        Args:
            setting: The scenario made concrete (step times, pools, batches, trainer).
            costs: Reconfiguration delays charged when a slot changes role (PEARL Table 3).
            policy: The planners' policy settings; defaults to :class:`~pearl_sched.config.PolicyConfig`'s.
            dedicated_gpus: Dedicated rollout GPUs; defaults to the scenario's ``dedicated_rollout_gpus``.
            preemptible_gpus: Most preemptible GPUs at once; defaults to the scenario's ``max_preemptible_gpus``.
            allow_borrow: Whether idle training GPUs may be lent to rollout.
            worker_sizes: The sizes the planner may choose (the scenario's ``worker_sizes`` for policies that know
                sizes); None: every worker keeps the scenario's size.
            background_preparation: Whether an arrived preemptible GPU prepares (engine start, weight load) while
                it does not serve, so that an admission later pays only the preparation left (docs/policies.md,
                "Preparation progress"); PEARL prepares only once the gate admits (False).
        """
        s = setting.scenario
        self.setting = setting
        self.costs = costs
        self.policy = policy or PolicyConfig()
        self.tp = s.tp
        self.size = s.size
        self.worker_sizes = worker_sizes
        self.allow_borrow = allow_borrow
        self.background_preparation = background_preparation
        dedicated = s.dedicated_rollout_gpus if dedicated_gpus is None else dedicated_gpus
        preemptible = s.max_preemptible_gpus if preemptible_gpus is None else preemptible_gpus
        self.slots: list[_Slot] = []
        for zone, count, prefix in (
            (Zone.DEDICATED, dedicated, "d"),
            (Zone.PREEMPTIBLE, preemptible, "p"),
            (Zone.OVERLAP, s.training_gpus, "t"),
        ):
            for i in range(count // self.tp):
                gpus = tuple(f"{prefix}{i * self.tp + j}" for j in range(self.tp))
                slot = _Slot(f"{prefix}w{i:02d}", zone, gpus, available=zone is not Zone.PREEMPTIBLE, dp=s.attention_dp)
                self.slots.append(slot)
        self.by_id = {slot.id: slot for slot in self.slots}
        self.now = 0.0
        self.mode = Mode.COLOCATED
        self.batch: RolloutSimulation | None = None
        self.batch_mode = Mode.COLOCATED
        self.batch_start = 0.0
        self.pending: list[tuple[float, str]] = []  # (join time, slot) during a batch
        self.trainer_idle_at = 0.0  # the trainer needs no GPUs from then until the batch ends
        self.previous_makespan_s: float | None = None
        self.bubble_ratio = 0.0
        self.initial = True
        self.timeline: list[tuple[float, str, str]] = []
        self.preempted = 0
        self.last_result: BatchResult | None = None
        self.step = 0  # the step whose batch runs, or is about to launch at a step boundary
        self.trajectory_stats: TrajectoryStats | None = None  # refitted from each finished batch's telemetry
        self.telemetry_rejections: list[str] = []
        self.observed = ObservedStepTimes(setting.steps, setting.step_overhead_s)
        self.observers = {self.size: self.observed}  # one per worker size in use: each refits its TP's device
        self.batch_kv_tokens = 0.0  # Σ KV pools of the batch's workers at launch (sglang:max_total_num_tokens)
        self.pearl_params: PearlParams | None = None  # refitted from observed steps; None: the planners' prior
        self.refits = 0
        self.serving_params: ServingParams | None = None  # the improved predictor's, refitted from the SGLang series
        # /metrics counters summed over every worker so far (a fresh server reports zero)
        self.sglang_totals = {series.PROMPT_TOKENS: 0.0, series.CACHED_TOKENS: 0.0, series.RETRACTED: 0.0}
        self.batch_counts: dict[str, int] = {}
        self.batch_metrics_start: dict[str, float] = {}

    # -- ClusterAdapter -------------------------------------------------------------------------------------
    def observe(self) -> ClusterState:
        """The cluster now: every GPU and worker slot, the planners' workload estimate and the GPU budget.

        Training GPUs report ``reclaim_in_s`` 0 while the trainer is busy, otherwise the seconds until the trainer
        needs them back (the running batch's end, estimated from the previous batch's makespan); they count in the
        budget only while the trainer is idle and borrowing is allowed. A slot without a
        rollout role shows as a training worker (overlap zone) or an inactive one.
        """
        gpus: list[GPU] = []
        workers: list[Worker] = []
        trainer_busy = self._trainer_busy()
        for slot in self.slots:
            reclaim = None
            if slot.zone is Zone.OVERLAP:
                reclaim = 0.0 if trainer_busy else self._reclaim_estimate()
            for g in slot.gpu_ids:
                gpus.append(
                    GPU(
                        id=g,
                        node=f"node-{g[0]}{int(g[1:]) // GPUS_PER_NODE}",
                        type=self.setting.gpu_type,
                        zone=slot.zone,
                        available=slot.available,
                        reclaim_in_s=reclaim,
                    )
                )
            if slot.role is not None:
                worker = Worker(id=slot.id, gpu_ids=slot.gpu_ids, role=slot.role, status=Status.ACTIVE, dp=slot.dp)
            elif slot.zone is Zone.OVERLAP:
                worker = Worker(id=slot.id, gpu_ids=slot.gpu_ids, role=Role.TRAINING, status=Status.ACTIVE, dp=slot.dp)
            else:
                worker = Worker(
                    id=slot.id,
                    gpu_ids=slot.gpu_ids,
                    role=Role.DECODE,
                    status=Status.INACTIVE,
                    dp=slot.dp,
                    prepared_s=self.prepared_s(slot),
                )
            workers.append(worker)
        usable = sum(len(s.gpu_ids) for s in self.slots if s.available and s.zone is not Zone.OVERLAP)
        if self.allow_borrow and not trainer_busy:
            usable += sum(len(s.gpu_ids) for s in self.slots if s.zone is Zone.OVERLAP)
        unfinished = self.batch.unfinished if self.batch is not None else None
        return ClusterState(
            gpus=tuple(gpus),
            workers=tuple(workers),
            workload=self.workload(unfinished),
            budget=Budget(max_gpus=usable, allow_borrow=self.allow_borrow),
            worker_sizes=self.worker_sizes,
        )

    def apply(self, target: Target) -> ApplyReport:
        """Move the slots to ``target``'s roles, charging each change its delay.

        A slot named with a new role starts it after the delay of the change (none for the very first
        placement); inside a running batch it joins the batch when that delay ends. Changes that cannot happen
        are skipped: a role on an unavailable slot, a borrowed training GPU while the trainer is busy or
        borrowing is off. A training GPU released from rollout is the trainer's again after deactivation.

        Returns:
            The slots changed and the seconds of delay charged, or, when ``target`` changes the mode during a
            batch, a deferral (the switch waits for the step boundary) with nothing changed.
        """
        roles = target.roles()
        if self.batch is not None and target.mode is not self.batch_mode:
            return ApplyReport(deferred=f"a switch to {target.mode.value} waits for the step boundary")
        if self.batch is None:
            self.mode = target.mode
        changed = self._regroup(target)
        lost = 0.0
        for slot in self.slots:
            new = roles.get(slot.id, slot.role)
            if new == slot.role or (new is not None and not slot.available):
                continue
            if slot.zone is Zone.OVERLAP and new is not None and (not self.allow_borrow or self._trainer_busy()):
                continue
            if slot.id not in changed:  # a new (regrouped) slot is already named
                changed.append(slot.id)
            old = slot.role
            self._stop(slot)
            if new is None:
                if slot.zone is Zone.OVERLAP:
                    slot.back_at = self.now + self.costs.deactivation_s
                self._mark(slot, TRAINING if slot.zone is Zone.OVERLAP else "off")
                continue
            delay = 0.0 if self.initial else self._delay(slot, old, new)
            lost += delay
            slot.role = new
            slot.ready_at = self.now + delay
            self._mark(slot, new.value)
            if self.batch is not None:
                heapq.heappush(self.pending, (slot.ready_at, slot.id))
        self.initial = False
        return ApplyReport(changed=tuple(changed), seconds_lost=lost)

    def telemetry(self) -> Mapping[str, float]:
        """The last finished batch: ``makespan_s``, ``bubble_ratio``, ``generated_tokens``, ``finished``.

        With them, the SGLang ``/metrics`` series the workers would report, summed over them (:meth:`sglang_metrics`).
        Empty before the first batch ends.
        """
        result = self.last_result
        if result is None:
            return {}
        return {
            "makespan_s": result.makespan_s,
            "bubble_ratio": self.bubble_ratio,
            "generated_tokens": float(result.generated_tokens),
            "finished": float(result.finished),
            **self.sglang_metrics(),
        }

    def sglang_metrics(self) -> dict[str, float]:
        """The workers' ``/metrics`` series under SGLang's names, summed over the workers of the last batch.

        Counters (prompt and cached tokens of the prefill side, retracted requests) accumulate over the segment as a
        server's do; the gauges are the batch's workers' KV pools (``sglang:max_total_num_tokens``) and, in PD, the
        P→D links' speed (``sglang:kv_transfer_speed_gb_s``).
        """
        out = dict(self.sglang_totals)
        if self.batch_counts:
            out[series.MAX_TOTAL_NUM_TOKENS] = self.batch_kv_tokens
            if "prefill" in self.batch_counts:
                speed = self.setting.link_bytes_per_s / 1e9 * self.batch_counts["prefill"]
                out[series.KV_TRANSFER_SPEED] = speed
        return out

    def workload(self, unfinished: int | None = None) -> Workload:
        """What the planners know of the batch: the telemetry refit once a batch has finished, else the prior.

        The prior (first batch only) is the workload's statistics as the orchestrator logs them from the trajectory
        data (:meth:`Setting.workload`); after every batch the cluster reports per-turn telemetry (turns, appended,
        generated and retained tokens, environment time, the decoding fraction) and
        :func:`~pearl_sched.profiles.telemetry.refit` folds it in with an EWMA (α = :data:`TELEMETRY_ALPHA`).
        """
        stats = self.trajectory_stats
        if stats is None:
            return self.setting.workload(unfinished=unfinished, bubble_ratio=self.bubble_ratio)
        size = self.setting.scenario.trajectories_per_step
        return stats.workload(
            batch_size=size,
            unfinished=size if unfinished is None else unfinished,
            kv_bytes_per_token=self.setting.kv_bytes_per_token,
        )

    def report_telemetry(self, step: int, result: BatchResult) -> None:
        """Refit the planners' workload from the finished batch's per-turn telemetry (rejected rows are logged)."""
        rows: dict[str, list[float]] = {name: [] for name in TELEMETRY_COLUMNS}
        for index, spec in enumerate(self.setting.batch(step)):
            context = 0
            for turn, u in enumerate(spec.turns):
                context += u.appended_tokens + u.generated_tokens
                for name, value in zip(
                    TELEMETRY_COLUMNS,
                    (step, index, turn, u.appended_tokens, u.generated_tokens, context, u.env_after_s),
                    strict=True,
                ):
                    rows[name].append(float(value))
        fraction = None
        if result.finished == result.trajectories and math.isfinite(result.bubble_ratio):
            fraction = 1.0 / (1.0 + result.bubble_ratio)
        fitted = refit(self.trajectory_stats, rows, alpha=TELEMETRY_ALPHA, decoding_fraction=fraction)
        if not fitted.accepted:
            self.telemetry_rejections.append(f"step {step}: {fitted.reason}")
        self.trajectory_stats = fitted.stats
        self._refit_device()
        self._refit_serving(result, turns=len(rows["turn"]))
        self._refit_decode_costs()

    def _refit_serving(self, result: BatchResult, *, turns: int) -> None:
        """Refit the improved predictor's serving parameters from the batch's SGLang series (``/metrics``)."""
        before = self.batch_metrics_start
        totals = self.sglang_totals
        prompts = result.prefill_tokens + result.cache_hit_tokens
        for name, value in (
            (series.PROMPT_TOKENS, prompts),
            (series.CACHED_TOKENS, result.cache_hit_tokens),
            (series.RETRACTED, float(result.retractions)),
        ):
            totals[name] = totals.get(name, 0.0) + float(value)
        after = self.sglang_metrics()
        counts = self.batch_counts
        observation = observe_serving(
            before,
            after,
            turns=turns,
            prefill_workers=counts.get("prefill", 0),
            decode_workers=counts.get("decode", 0),
            colocated_workers=counts.get("colocated", 0),
        )
        workers = float(sum(counts.values()))
        if self.worker_sizes is not None:  # the pools' sum in reference pools: each size keeps its own (size_pools)
            workers = self.batch_kv_tokens / self.setting.kv_pool_tokens
        current = self.serving_params or self.setting.serving_params()
        refitted = refit_serving(current, self.batch_mode, observation, after, workers=workers, alpha=TELEMETRY_ALPHA)
        # The reference size's prefill batches (new and cached tokens, seconds, as SGLang logs them) refit the
        # improved predictor's two-term prefill cost; attention-DP ranks' steps are not refitted (as for t_p).
        fitted = self.observed.prefill_cost() if self.size.dp == 1 else None
        cost = blend_prefill_cost(current.prefill_cost, fitted, alpha=TELEMETRY_ALPHA)
        by_context = current.prefill_cost_by_context
        step = self.observed.prefill_step_cost(by_context=by_context) if self.size.dp == 1 else None
        step_cost = blend_prefill_cost(current.prefill_step_cost, step, alpha=TELEMETRY_ALPHA)
        self.serving_params = refitted.model_copy(update={"prefill_cost": cost, "prefill_step_cost": step_cost})

    def _refit_decode_costs(self) -> None:
        """Refit the improved predictor's decode cost on n and KV tokens from the batch's decode iterations (EWMA).

        One cost per TP degree whose workers decoded (the busiest size of it, as PEARL's refit), attention-DP engines
        excepted as there. A degree whose batches cannot be fitted (:func:`fit_decode_cost`'s reasons) keeps its
        previous cost, or PEARL's ``A + b·n`` if it has none; the rejection is recorded for the scenario's degree
        and for any other that decoded. PEARL's device parameters are not touched (:meth:`_refit_device`).
        """
        assert self.serving_params is not None  # _refit_serving ran first
        fitted: list[DecodeCost] = []
        for tp in sorted({size.tp for size in self.observers}):
            observers = [o for size, o in self.observers.items() if size.tp == tp and size.dp == 1]
            if not observers:
                continue
            busiest = max(observers, key=lambda o: o.decode_k)
            try:
                fitted.append(fit_decode_cost(busiest.decode_sums(), gpu_type=self.setting.gpu_type, tp=tp))
            except TelemetryRejected as exc:
                if tp == self.tp or busiest.decode_k > 0:
                    self.telemetry_rejections.append(f"step {self.step}: TP{tp} decode cost on KV tokens: {exc.reason}")
        if fitted:
            self.serving_params = refit_decode_costs(self.serving_params, fitted, alpha=TELEMETRY_ALPHA)

    def _refit_device(self) -> None:
        """Refit PEARL's device parameters from the batch's observed step times (EWMA after the first).

        One device per TP degree the cluster may run: its own, and with ``worker_sizes`` every degree a planner may
        choose, each refitted from its own workers' steps. Without a fit of its own degree nothing changes; another
        degree whose workers did not report two decode batch sizes keeps its previous parameters (at first the
        setting's prior, fitted to the step times as for the first batch).
        """
        setting = self.setting
        before = {d.tp: d for d in self.pearl_params.devices} if self.pearl_params is not None else {}
        own = self._refit_tp(self.tp, before.get(self.tp))
        if own is None:
            why = "too few decode batch sizes" if self.size.dp == 1 else "attention-DP ranks' steps are not refitted"
            self.telemetry_rejections.append(f"step {self.step}: {why} to refit step times")
            return
        devices = [own]
        if self.worker_sizes is not None:
            prior = {d.tp: d for d in setting.pearl_params.devices}
            for tp in sorted({z.tp for z in setting.sizes} - {self.tp}):
                previous = before.get(tp, prior.get(tp))
                fitted = self._refit_tp(tp, before.get(tp), template=previous)
                chosen = fitted or previous
                if chosen is not None:
                    devices.append(chosen)
        self.pearl_params = PearlParams(
            devices=tuple(devices),
            switch_overhead_s=0.0,
            kv_bandwidth_bytes_per_s=setting.link_bytes_per_s,
            kv_bandwidth_per_prefill_worker=True,
            source="refitted from observed steps",
        )

    def _refit_tp(
        self, tp: int, previous: DeviceParams | None, template: DeviceParams | None = None
    ) -> DeviceParams | None:
        """The TP degree's device refitted from its workers' observed steps (EWMA on ``previous``), or None."""
        setting = self.setting
        template = (
            previous
            or template
            or DeviceParams(
                gpu_type=setting.gpu_type,
                tp=tp,
                prefill_s_per_token=1.0,
                decode_iteration_s=1.0,
                decode_per_seq_s=1.0,
                kv_capacity_bytes=setting.kv_capacity_bytes,
            )
        )
        # An attention-DP engine's steps are one rank's; PEARL's worker is the engine, so they are not refitted here.
        observers = [o for size, o in self.observers.items() if size.tp == tp and size.dp == 1]
        if not observers:
            return None
        busiest = max(observers, key=lambda o: o.decode_k)  # the size that ran most
        # its own degree from complete samples (as before sizes); another from what its workers ran, the rest prior
        observed = busiest.fit(template) if tp == self.tp else busiest.fit_partial(template)
        if observed is None:
            return None
        if previous is not None:
            a = TELEMETRY_ALPHA
            observed = observed.model_copy(
                update={
                    name: (1 - a) * getattr(previous, name) + a * getattr(observed, name)
                    for name in ("prefill_s_per_token", "decode_iteration_s", "decode_per_seq_s")
                }
            )
        return observed

    # -- transitions ----------------------------------------------------------------------------------------
    def _regroup(self, target: Target) -> list[str]:
        """Form the new workers ``target``'s expansions name on regrouped GPUs (worker sizes, docs/state.md).

        The slots holding their GPUs are dissolved: taken out of the running batch (their sequences resubmit) and
        dropped; a dissolved slot's GPUs that no new worker takes become one-GPU slots without a role. A new
        worker starts without a role; :meth:`apply` gives it its role after its preparation for its TP degree
        and finalisation, as any new worker (:meth:`_delay`). Returns the ids of the dissolved and new slots.
        """
        changed: list[str] = []
        for action in getattr(target, "actions", ()):
            if action.kind is not ActionKind.EXPAND or action.worker_id in self.by_id or action.to_role is None:
                continue
            taken = set(action.gpu_ids)
            dissolved = [s for s in self.slots if taken & set(s.gpu_ids)]
            if not dissolved or not all(s.available for s in dissolved):
                continue  # GPUs the cluster does not have now: nothing to form
            leftover: list[tuple[str, Zone]] = []
            for slot in dissolved:
                self._stop(slot)
                self._mark(slot, "off")
                self.slots.remove(slot)
                del self.by_id[slot.id]
                changed.append(slot.id)
                leftover += [(g, slot.zone) for g in slot.gpu_ids if g not in taken]
            new = _Slot(action.worker_id, action.zone, action.gpu_ids, dp=action.dp)
            self._add_slot(new)
            changed.append(new.id)
            for gpu, zone in leftover:
                self._add_slot(_Slot(self._free_id(f"w-{gpu}-tp1"), zone, (gpu,)))
        return changed

    def _add_slot(self, slot: _Slot) -> None:
        self.slots.append(slot)
        self.by_id[slot.id] = slot

    def _free_id(self, base: str) -> str:
        name, k = base, 1
        while name in self.by_id:
            k += 1
            name = f"{base}.{k}"
        return name

    def _delay(self, slot: _Slot, old: Role | None, new: Role) -> float:
        """Seconds before ``slot`` serves ``new``: PEARL Table 3 for the slot's TP degree (``TransitionCosts``)."""
        c = self.costs
        tp = len(slot.gpu_ids)
        if old is None:
            if slot.zone is Zone.OVERLAP:
                return c.activation_s
            return max(0.0, c.preparation_for(tp) - self.prepared_s(slot)) + c.finalisation_s
        if {old, new} == {Role.PREFILL, Role.DECODE}:
            return c.role_switch_s
        return c.restart_for(tp)

    def prepared_s(self, slot: _Slot) -> float:
        """Seconds of preparation done in the background on an idle, available preemptible slot (else 0)."""
        if slot.prepared_since is None or slot.role is not None or not slot.available:
            return 0.0
        return min(self.costs.preparation_for(len(slot.gpu_ids)), max(0.0, self.now - slot.prepared_since))

    def _stop(self, slot: _Slot) -> None:
        """Take the slot out of the running batch (its sequences resubmit) or cancel its pending join."""
        if self.background_preparation and slot.zone is Zone.PREEMPTIBLE and slot.role is not None:
            # Its engine stays up, out of the gateway, as far as its preparation had got (all of it once serving).
            left = max(0.0, slot.ready_at - self.costs.finalisation_s - self.now)
            slot.prepared_since = self.now - max(0.0, self.costs.preparation_for(len(slot.gpu_ids)) - left)
        if slot.role is not None and self.batch is not None and slot.index is not None:
            self._remove_from_batch(slot)
        self.pending = [(t, s) for t, s in self.pending if s != slot.id]
        heapq.heapify(self.pending)
        slot.role = None
        slot.index = None

    def _remove_from_batch(self, slot: _Slot) -> None:
        assert self.batch is not None and slot.index is not None
        ranks = tuple(range(slot.index, slot.index + slot.dp))
        if slot.role is Role.COLOCATED:
            change = PoolChange(self.now - self.batch_start, remove_colocated=ranks)
        elif slot.role is Role.PREFILL:
            change = PoolChange(self.now - self.batch_start, remove_prefill=ranks)
        else:
            change = PoolChange(self.now - self.batch_start, remove_decode=ranks)
        self.batch.apply(change)

    def _join(self, slot: _Slot) -> None:
        assert self.batch is not None and slot.role is not None
        at = self.now - self.batch_start
        engine = (self._engine(slot.size),)
        if slot.role is Role.COLOCATED:
            slot.index = len(self.batch.decoders)
            self.batch.apply(PoolChange(at, add_colocated_engines=engine))
        elif slot.role is Role.PREFILL:
            slot.index = len(self.batch.prefillers)
            self.batch.apply(PoolChange(at, add_prefill_engines=engine))
        else:
            slot.index = len(self.batch.decoders)
            self.batch.apply(PoolChange(at, add_decode_engines=engine))

    def _engine(self, size: WorkerSize) -> Engine:
        """A worker of ``size`` for the batch: its step times (recorded by its size's observer) and KV pool."""
        if size not in self.observers:
            self.observers[size] = ObservedStepTimes(self.setting.steps_for(size), self.setting.step_overhead_s)
        return Engine(self.observers[size], self.setting.kv_pool_tokens_for(size), ranks=size.dp)

    def _mark(self, slot: _Slot, label: str) -> None:
        self.timeline.append((self.now, slot.id, label))

    def _trainer_busy(self) -> bool:
        return self.now < self.trainer_idle_at

    def _reclaim_estimate(self) -> float:
        """Seconds until the trainer needs its GPUs: when the batch ends, estimated from the previous one.

        The batch is still running, so the estimate never drops below one toggle plus the drain margin.
        """
        floor = self.costs.activation_s + self.costs.deactivation_s + self.policy.drain_margin_s + 1.0
        if self.previous_makespan_s is None:
            return max(floor, 600.0)
        return max(floor, self.previous_makespan_s - (self.now - self.batch_start))

    # -- the clock (driven by run_segment) ------------------------------------------------------------------
    def launch(self, step: int) -> None:
        """Start step ``step``'s batch on the workers the policy chose; the not-yet-ready ones join later."""
        serving = [s for s in self.slots if s.role is not None]
        mode = self.mode
        by_role = {r: [s for s in serving if s.role is r] for r in Role}
        if (mode is Mode.COLOCATED) != all(s.role is Role.COLOCATED for s in serving):
            raise SimulationError(f"slots serve roles that do not match the {mode.value} mode")
        keys = {Role.COLOCATED: "colocated", Role.PREFILL: "prefill", Role.DECODE: "decode"}
        roles = (Role.COLOCATED,) if mode is Mode.COLOCATED else (Role.PREFILL, Role.DECODE)
        # each role's engines in slot order (a role without a slot gets one of the scenario's size, removed at once)
        engines = {
            keys[r]: tuple(self._engine(s.size) for s in by_role[r]) or (self._engine(self.size),) for r in roles
        }
        counts = {key: len(group) for key, group in engines.items()}
        ranks = {key: sum(e.ranks for e in group) for key, group in engines.items()}
        pool = dataclasses.replace(
            self.setting.pool(mode, **ranks, step=step),
            step_times=self.observed,
            prefill_engines=engines.get("prefill", ()),
            decode_engines=engines.get("decode", ()),
            colocated_engines=engines.get("colocated", ()),
        )
        for observer in self.observers.values():
            observer.reset()
        self.batch_counts = dict(counts)
        self.batch_kv_tokens = float(sum(e.kv_capacity_tokens * e.ranks for g in engines.values() for e in g))
        self.batch_metrics_start = self.sglang_metrics()
        self.step = step
        self.batch = RolloutSimulation(pool, self.setting.batch(step))
        self.batch_mode = mode
        self.batch_start = self.now
        self.pending = []
        removals: dict[str, list[int]] = {"colocated": [], "prefill": [], "decode": []}
        for role in roles:
            key, members, first = keys[role], by_role[role], 0
            for i, engine in enumerate(engines[key]):
                if i < len(members) and members[i].ready_at <= self.now:
                    members[i].index = first
                else:
                    removals[key].extend(range(first, first + engine.ranks))
                    if i < len(members):
                        members[i].index = None
                        heapq.heappush(self.pending, (members[i].ready_at, members[i].id))
                first += engine.ranks
        if any(removals.values()):
            self.batch.apply(
                PoolChange(
                    0.0,
                    remove_colocated=tuple(removals["colocated"]),
                    remove_prefill=tuple(removals["prefill"]),
                    remove_decode=tuple(removals["decode"]),
                )
            )

    def advance(self, to: float) -> bool:
        """Run the batch until ``to`` (joining workers as their transitions end); False once it has finished."""
        assert self.batch is not None
        while self.pending and self.pending[0][0] <= to:
            at, slot_id = heapq.heappop(self.pending)
            if not self.batch.run_until(at - self.batch_start):
                self.now = self.batch_start + self.batch.result().makespan_s
                return False
            self.now = at
            self._join(self.by_id[slot_id])
        running = self.batch.run_until(to - self.batch_start)
        if running:
            self.now = to
            if not self.pending and not any(self.batch.alive()[0]) and self.batch.unfinished and math.isinf(to):
                raise SimulationError("the batch stalled: no prefill worker and none joining")
        else:
            self.now = self.batch_start + self.batch.result().makespan_s
        return running

    def set_preemptible(self, gpus: float) -> tuple[int, int]:
        """The trace says ``gpus`` preemptible GPUs are live: preempt or offer slots; returns (left, joined).

        Counted in GPUs, whole slots at a time: slots leave until the live ones hold at most ``gpus`` GPUs (unused
        slots first, then those of the role with the most workers), or join, in slot order, while they fit.
        """
        preemptible = [s for s in self.slots if s.zone is Zone.PREEMPTIBLE]
        live = int(gpus)
        now_live = [s for s in preemptible if s.available]
        held = sum(len(s.gpu_ids) for s in now_live)
        left = joined = 0
        if held > live:  # unused slots go first, then those of the role with the most workers
            idle = [s for s in now_live if s.role is None]
            busy = [s for s in now_live if s.role is not None]
            gone: list[_Slot] = []
            while held > live and idle:
                gone.append(idle.pop(0))
                held -= len(gone[-1].gpu_ids)
            while held > live:
                busy.sort(key=lambda s: (-self._role_count(s.role), s.id))
                victim = busy.pop(0)
                self._stop(victim)
                self._mark(victim, "preempted")
                self.preempted += 1
                gone.append(victim)
                held -= len(victim.gpu_ids)
            for s in gone:
                s.available = False
                s.prepared_since = None  # the instance is gone, and its preparation with it
                left += 1
        else:
            for s in preemptible:
                if not s.available and held + len(s.gpu_ids) <= live:
                    s.available = True
                    held += len(s.gpu_ids)
                    if self.background_preparation:
                        s.prepared_since = self.now
                    joined += 1
        return left, joined

    def _role_count(self, role: Role | None) -> int:
        return sum(1 for s in self.slots if s.role is role and role is not None)

    def finish_batch(self) -> tuple[BatchResult, float, int]:
        """End the running batch: every borrowed training GPU goes back and the batch's telemetry is reported.

        Returns:
            The batch's result; the time in seconds at which the trainer has all its GPUs back (the batch's end
            plus deactivation when any were borrowed); how many training GPU slots were borrowed at the end.
        """
        assert self.batch is not None
        result = self.batch.result()
        end = self.now
        borrowed = 0
        for slot in self.slots:
            if slot.zone is Zone.OVERLAP and slot.role is not None:
                borrowed += 1
                slot.role = None
                slot.index = None
                slot.back_at = end + self.costs.deactivation_s
                self._mark(slot, TRAINING)
        for slot in self.slots:
            slot.index = None
        self.pending = []
        self.batch = None
        self.last_result = result
        self.previous_makespan_s = result.makespan_s
        if result.finished == result.trajectories and math.isfinite(result.bubble_ratio):
            self.bubble_ratio = result.bubble_ratio
        self.report_telemetry(self.step, result)
        back = max([end, *(s.back_at for s in self.slots if s.zone is Zone.OVERLAP)])
        return result, back, borrowed

    def serving(self) -> str:
        """The configuration in force, e.g. ``3P5D`` or ``6C``; with workers of other sizes, e.g. ``2P(tp1)3D(tp2)``.

        A role with several sizes lists them, e.g. ``3P(2×tp1+1×tp2)``; the sizes are shown only when some serving
        worker is not of the scenario's size.
        """
        serving = [s for s in self.slots if s.role is not None]
        roles = [s.role for s in serving]
        label = ratio_label(self.mode, roles.count(Role.PREFILL), roles.count(Role.DECODE), roles.count(Role.COLOCATED))
        if all(s.size == self.size for s in serving):
            return label
        return sized_ratio_label({role: [s.size for s in serving if s.role is role] for role in ROLLOUT_ROLES})


def _refresh_model(decider: Decider, params: PearlParams | None, serving: ServingParams | None = None) -> None:
    """A planner's makespan model on the parameters refitted from telemetry (other deciders have none).

    ``None`` keeps the model's own: PEARL's device parameters until the step times could be refitted, the improved
    predictor's serving parameters until a batch has reported the SGLang series.
    """
    model = getattr(decider, "model", None)
    if isinstance(model, ImprovedMakespanModel):
        pearl = params or model.params.pearl
        if model.params.pearl is not pearl or (serving is not None and model.params.serving is not serving):
            decider.model = make_predictor("improved", pearl, serving or model.params.serving)  # type: ignore[attr-defined]
    elif isinstance(model, PearlMakespanModel) and params is not None and model.params is not params:
        decider.model = make_predictor("pearl", params)  # type: ignore[attr-defined]


@runtime_checkable
class ClusterBound(Protocol):
    """A decider that reads the simulated cluster itself (the hindsight oracle), bound before its segment runs."""

    def bind(
        self,
        cluster: SimCluster,
        changes: Sequence[tuple[float, float]],
        dedicated_gpus: int,
        duration_s: float = math.inf,
    ) -> None:
        """Give the decider the cluster it will decide for.

        Args:
            cluster: The simulated cluster, read (or copied) at each decision.
            changes: The segment's availability changes, ``(time_s, rollout GPUs)``, dedicated GPUs included.
            dedicated_gpus: The dedicated rollout GPUs counted in ``changes``.
            duration_s: The segment's end (no decision point at or after it).
        """


# -- the clock --------------------------------------------------------------------------------------------
# vidur's shape: a heap of events, each handled by one method of the segment that returns the events it causes.


@dataclass(frozen=True)
class _Event:
    """Something that happens at ``at_s`` during step ``step``'s rollout."""

    at_s: float
    step: int

    def handle(self, segment: _Segment) -> list[_Event]:
        raise NotImplementedError


@dataclass(frozen=True)
class _StepBoundary(_Event):
    """Rollout ``step`` may start: the policy decides, the batch launches."""

    def handle(self, segment: _Segment) -> list[_Event]:
        return segment.step_boundary(self)


@dataclass(frozen=True)
class _DecisionPoint(_Event):
    """A decision point inside the batch: GPUs joining or leaving, training finished, or a tick."""

    kind: EventKind = EventKind.TICK
    value: float = 0.0  # GPU_JOIN: the rollout GPUs the trace says are live

    def handle(self, segment: _Segment) -> list[_Event]:
        return segment.decision_point(self)


@dataclass(frozen=True)
class _SegmentEnd(_Event):
    """The segment's end: a batch still running is carried over."""

    def handle(self, segment: _Segment) -> list[_Event]:
        return segment.segment_end(self)


@dataclass(frozen=True)
class _BatchEnd(_Event):
    """The batch has finished: borrowed GPUs go back and the training step is scheduled."""

    def handle(self, segment: _Segment) -> list[_Event]:
        return segment.batch_end(self)


class _Segment:
    """One availability segment under one policy: the cluster, the trainer's clock and what is recorded."""

    def __init__(
        self,
        cluster: SimCluster,
        loop: ControlLoop,
        trace: AvailabilityTrace,
        *,
        dedicated_gpus: int,
        tick_s: float,
        progress: Callable[[float], None] | None,
    ) -> None:
        self.cluster = cluster
        self.loop = loop
        self.setting = cluster.setting
        self.dedicated_gpus = dedicated_gpus
        self.duration_s = trace.end_s
        self.tick_s = tick_s
        self.progress = progress
        self.changes = [(float(t), float(c)) for t, c in zip(trace.times_s, trace.counts, strict=True)]
        self.steps: list[StepRecord] = []
        self.ratios: list[tuple[float, str]] = []
        self.transitions = 0
        self.carried = 0
        self.train_end_s = 0.0  # when the last scheduled training step ends
        self.running: int | None = None  # the step whose batch is running
        self.rollout_start_s = 0.0
        self.ratio_at_start = ""
        self.preempted_before = 0
        cluster.set_preemptible(max(0.0, self.changes[0][1] - dedicated_gpus))

    def step_boundary(self, event: _StepBoundary) -> list[_Event]:
        """Decide at the step boundary, launch the step's batch and schedule its decision points."""
        t, step, cluster = event.at_s, event.step, self.cluster
        cluster.now = t
        cluster.step = step
        cluster.trainer_idle_at = self.train_end_s
        _refresh_model(self.loop.decider, cluster.pearl_params, cluster.serving_params)
        record = self.loop.handle(Event(EventKind.STEP_BOUNDARY, t, f"step {step}"))
        self.transitions += record.changed
        if not any(slot.role is not None for slot in cluster.slots):
            raise SimulationError(f"{self.loop.decider.name}: no rollout worker at the step boundary ({record.reason})")
        cluster.launch(step)
        self.running = step
        self.rollout_start_s = t
        self.ratio_at_start = cluster.serving()
        self.ratios.append((t, self.ratio_at_start))
        self.preempted_before = cluster.preempted
        return [*self._decision_points(step, t), _SegmentEnd(self.duration_s, step)]

    def _decision_points(self, step: int, t: float) -> list[_Event]:
        """The batch's decision points: trace changes, the previous training's end, and the periodic ticks."""
        points: list[_Event] = [
            _DecisionPoint(at, step, EventKind.GPU_JOIN, count)
            for at, count in self.changes[1:]
            if t < at < self.duration_s
        ]
        if t < self.train_end_s < self.duration_s:
            points.append(_DecisionPoint(self.train_end_s, step, EventKind.TRAINING_FINISHED))
        k = 1
        while t + k * self.tick_s < self.duration_s:
            points.append(_DecisionPoint(t + k * self.tick_s, step, EventKind.TICK))
            k += 1
        return points

    def decision_point(self, event: _DecisionPoint) -> list[_Event]:
        """Run the batch up to the point, then let the control loop observe, decide and apply."""
        if self.running != event.step:
            return []  # the batch this point belonged to has ended
        if not self.cluster.advance(event.at_s):
            return self._batch_finished(event.step)
        kind = event.kind
        if kind is EventKind.GPU_JOIN:
            left, joined = self.cluster.set_preemptible(max(0.0, event.value - self.dedicated_gpus))
            if not (left or joined):
                return []
            kind = EventKind.GPU_LEAVE if left else EventKind.GPU_JOIN
        record = self.loop.handle(Event(kind, event.at_s))
        self.transitions += record.changed
        if record.changed:
            self.ratios.append((event.at_s, self.cluster.serving()))
        if self.progress is not None:
            self.progress(event.at_s)
        return []

    def segment_end(self, event: _SegmentEnd) -> list[_Event]:
        """Run the batch to the segment's end; one still running is carried over."""
        if self.running != event.step:
            return []
        if not self.cluster.advance(event.at_s):
            return self._batch_finished(event.step)
        self.carried = self.cluster.batch.unfinished if self.cluster.batch is not None else 0
        self.running = None
        return []

    def _batch_finished(self, step: int) -> list[_Event]:
        self.running = None
        return [_BatchEnd(self.cluster.now, step)]

    def batch_end(self, event: _BatchEnd) -> list[_Event]:
        """Hand borrowed GPUs back, train the step and schedule the next step boundary."""
        result, back_s, borrowed = self.cluster.finish_batch()
        end = self.cluster.now
        train_start, train_end, tokens = self._training_step(event.step, back_s)
        self.steps.append(
            StepRecord(
                step=event.step,
                rollout_start_s=self.rollout_start_s,
                rollout_end_s=end,
                train_start_s=train_start,
                train_end_s=train_end,
                step_time_s=train_end - self.train_end_s,
                generated_tokens=result.generated_tokens,
                training_tokens=tokens,
                ratio_at_start=self.ratio_at_start,
                borrowed_workers=borrowed,
                preempted_workers=self.cluster.preempted - self.preempted_before,
                prefill_tokens=result.prefill_tokens,
                cache_hit_tokens=round(result.cache_hit_tokens),
            )
        )
        self.ratios.append((end, "idle"))
        next_start = max(end, self.train_end_s)  # staleness 1: rollout k + 1 waits for training k − 1
        self.train_end_s = train_end
        if self.progress is not None:
            self.progress(min(next_start, self.duration_s))
        return [_StepBoundary(next_start, event.step + 1)] if next_start < self.duration_s else []

    def _training_step(self, step: int, back_s: float) -> tuple[float, float, int]:
        """Training ``step`` starts once its GPUs are back and training ``step`` − 1 is done.

        Returns its start and end and the tokens it trains on (appended and generated).
        """
        batch = self.setting.batch(step)
        tokens = sum(u.appended_tokens for tr in batch for u in tr.turns) + sum(tr.generated_tokens for tr in batch)
        start = max(back_s, self.train_end_s)
        return start, start + self.setting.training_s(tokens), tokens


def run_segment(
    setting: Setting,
    trace: AvailabilityTrace,
    decider: Decider,
    *,
    costs: TransitionCosts,
    segment: str = "segment",
    scaling_factor: float = 1.0,
    policy: PolicyConfig | None = None,
    tick_s: float = 60.0,
    allow_borrow: bool = True,
    dedicated_gpus: int | None = None,
    preemptible_gpus: int | None = None,
    progress: Callable[[float], None] | None = None,
    worker_sizes: WorkerSizes | None = None,
    background_preparation: bool = False,
) -> SegmentResult:
    """Run ``decider`` over one availability segment (``trace``: rollout GPUs, dedicated included).

    ``worker_sizes`` (for a decider that chooses sizes) is reported in the cluster's state; without it every worker
    keeps the scenario's size. ``background_preparation``: arrived preemptible GPUs prepare while not serving
    (:class:`SimCluster`).
    """
    s = setting.scenario
    dedicated = s.dedicated_rollout_gpus if dedicated_gpus is None else dedicated_gpus
    cluster = SimCluster(
        setting,
        costs=costs,
        policy=policy,
        dedicated_gpus=dedicated,
        preemptible_gpus=preemptible_gpus,
        allow_borrow=allow_borrow,
        worker_sizes=worker_sizes,
        background_preparation=background_preparation,
    )
    loop = ControlLoop(cluster, decider)
    run = _Segment(cluster, loop, trace, dedicated_gpus=dedicated, tick_s=tick_s, progress=progress)
    if isinstance(decider, ClusterBound):
        decider.bind(cluster, run.changes, dedicated, duration_s=trace.end_s)
    order = itertools.count()  # simultaneous events run in the order they were scheduled
    queue: list[tuple[float, int, _Event]] = []

    def schedule(events: list[_Event]) -> None:
        for new in events:
            heapq.heappush(queue, (new.at_s, next(order), new))

    schedule([_StepBoundary(0.0, 0)] if trace.end_s > 0 else [])
    while queue:
        _, _, event = heapq.heappop(queue)
        schedule(event.handle(run))
    return SegmentResult(
        policy=decider.name,
        segment=segment,
        duration_s=trace.end_s,
        mean_rollout_gpus=trace.mean(),
        scaling_factor=scaling_factor,
        steps=run.steps,
        carried_over=run.carried,
        timeline=cluster.timeline,
        ratios=run.ratios,
        decisions=len(loop.records),
        transitions=run.transitions,
    )
