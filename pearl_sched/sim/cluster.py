"""The simulated cluster over time: rollout batches, the asynchronous trainer, availability and reconfiguration.

:class:`SimCluster` implements :class:`~pearl_sched.control.ClusterAdapter`, so the same
:class:`~pearl_sched.control.ControlLoop` drives it and a real SGLang cluster. :func:`run_segment` is the
clock: it runs one availability segment of a scenario, step after step:

* **Rollout step k** simulates the step's batch (:mod:`~pearl_sched.sim.rollout`) on the workers the policy
  chose; a worker that changes joins the running batch when its transition ends: a new worker after
  preparation + finalisation, a borrowed training GPU after activation, a prefill↔decode flip after the role
  switch, a mode change (colocated↔disaggregated) after a restart (PEARL Table 3, DESIGN.md §8).
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

import heapq
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.control import ApplyReport, ControlLoop, Decider, Event, EventKind, Target
from pearl_sched.errors import SimulationError
from pearl_sched.sim.availability import AvailabilityTrace
from pearl_sched.sim.rollout import BatchResult, PoolChange, RolloutSimulation
from pearl_sched.sim.setting import Setting
from pearl_sched.state import GPU, Budget, ClusterState, Mode, Role, Status, Worker, Zone

TRAINING = "training"


@dataclass
class _Slot:
    id: str
    zone: Zone
    gpu_ids: tuple[str, ...]
    role: Role | None = None  # the rollout role it serves or is moving to
    available: bool = True
    ready_at: float = 0.0  # when its current role becomes effective
    index: int | None = None  # its worker index in the running batch (None: not in it yet)
    back_at: float = 0.0  # overlap: when the trainer has it again


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
    reprefilled_tokens: int  # prefixes prefilled again after their worker left mid-turn

    @property
    def throughput_tok_s(self) -> float:
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

    @property
    def throughput_tok_s(self) -> float:
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
    ) -> None:
        s = setting.scenario
        self.setting = setting
        self.costs = costs
        self.policy = policy or PolicyConfig()
        self.tp = s.tp
        self.allow_borrow = allow_borrow
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
                self.slots.append(_Slot(f"{prefix}w{i:02d}", zone, gpus, available=zone is not Zone.PREEMPTIBLE))
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

    # -- ClusterAdapter -------------------------------------------------------------------------------------
    def observe(self) -> ClusterState:
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
                        node=f"node-{g[0]}{int(g[1:]) // 8}",
                        type=self.setting.gpu_type,
                        zone=slot.zone,
                        available=slot.available,
                        reclaim_in_s=reclaim,
                    )
                )
            if slot.role is not None:
                worker = Worker(id=slot.id, gpu_ids=slot.gpu_ids, role=slot.role, status=Status.ACTIVE)
            elif slot.zone is Zone.OVERLAP:
                worker = Worker(id=slot.id, gpu_ids=slot.gpu_ids, role=Role.TRAINING, status=Status.ACTIVE)
            else:
                worker = Worker(id=slot.id, gpu_ids=slot.gpu_ids, role=Role.DECODE, status=Status.INACTIVE)
            workers.append(worker)
        usable = sum(len(s.gpu_ids) for s in self.slots if s.available and s.zone is not Zone.OVERLAP)
        if self.allow_borrow and not trainer_busy:
            usable += sum(len(s.gpu_ids) for s in self.slots if s.zone is Zone.OVERLAP)
        unfinished = self.batch.unfinished if self.batch is not None else None
        return ClusterState(
            gpus=tuple(gpus),
            workers=tuple(workers),
            workload=self.setting.workload(unfinished=unfinished, bubble_ratio=self.bubble_ratio),
            budget=Budget(max_gpus=usable, allow_borrow=self.allow_borrow),
        )

    def apply(self, target: Target) -> ApplyReport:
        roles = target.roles()
        if self.batch is not None and target.mode is not self.batch_mode:
            return ApplyReport(deferred=f"a switch to {target.mode.value} waits for the step boundary")
        if self.batch is None:
            self.mode = target.mode
        changed: list[str] = []
        lost = 0.0
        for slot in self.slots:
            new = roles.get(slot.id, slot.role)
            if new == slot.role or (new is not None and not slot.available):
                continue
            if slot.zone is Zone.OVERLAP and new is not None and (not self.allow_borrow or self._trainer_busy()):
                continue
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
        result = self.last_result
        if result is None:
            return {}
        return {
            "makespan_s": result.makespan_s,
            "bubble_ratio": self.bubble_ratio,
            "generated_tokens": float(result.generated_tokens),
            "finished": float(result.finished),
        }

    # -- transitions ----------------------------------------------------------------------------------------
    def _delay(self, slot: _Slot, old: Role | None, new: Role) -> float:
        c = self.costs
        if old is None:
            return c.activation_s if slot.zone is Zone.OVERLAP else c.preparation_s + c.finalisation_s
        if {old, new} == {Role.PREFILL, Role.DECODE}:
            return c.role_switch_s
        return c.restart_s

    def _stop(self, slot: _Slot) -> None:
        """Take the slot out of the running batch (its sequences resubmit) or cancel its pending join."""
        if slot.role is not None and self.batch is not None and slot.index is not None:
            self._remove_from_batch(slot)
        self.pending = [(t, s) for t, s in self.pending if s != slot.id]
        heapq.heapify(self.pending)
        slot.role = None
        slot.index = None

    def _remove_from_batch(self, slot: _Slot) -> None:
        assert self.batch is not None and slot.index is not None
        if slot.role is Role.COLOCATED:
            change = PoolChange(self.now - self.batch_start, remove_colocated=(slot.index,))
        elif slot.role is Role.PREFILL:
            change = PoolChange(self.now - self.batch_start, remove_prefill=(slot.index,))
        else:
            change = PoolChange(self.now - self.batch_start, remove_decode=(slot.index,))
        self.batch.apply(change)

    def _join(self, slot: _Slot) -> None:
        assert self.batch is not None and slot.role is not None
        at = self.now - self.batch_start
        if slot.role is Role.COLOCATED:
            slot.index = len(self.batch.decoders)
            self.batch.apply(PoolChange(at, add_colocated=1))
        elif slot.role is Role.PREFILL:
            slot.index = len(self.batch.prefillers)
            self.batch.apply(PoolChange(at, add_prefill=1))
        else:
            slot.index = len(self.batch.decoders)
            self.batch.apply(PoolChange(at, add_decode=1))

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
        if mode is Mode.COLOCATED:
            counts = {"colocated": max(1, len(by_role[Role.COLOCATED]))}
        else:
            counts = {"prefill": max(1, len(by_role[Role.PREFILL])), "decode": max(1, len(by_role[Role.DECODE]))}
        if (mode is Mode.COLOCATED) != all(s.role is Role.COLOCATED for s in serving):
            raise SimulationError(f"slots serve roles that do not match the {mode.value} mode")
        pool = self.setting.pool(mode, **counts)
        self.batch = RolloutSimulation(pool, self.setting.batch(step))
        self.batch_mode = mode
        self.batch_start = self.now
        self.pending = []
        removals: dict[str, list[int]] = {"colocated": [], "prefill": [], "decode": []}
        for key, role in (("colocated", Role.COLOCATED), ("prefill", Role.PREFILL), ("decode", Role.DECODE)):
            if key not in counts:
                continue
            members = by_role[role]
            for i in range(counts[key]):
                if i < len(members) and members[i].ready_at <= self.now:
                    members[i].index = i
                else:
                    removals[key].append(i)
                    if i < len(members):
                        members[i].index = None
                        heapq.heappush(self.pending, (members[i].ready_at, members[i].id))
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
        """The trace says ``gpus`` preemptible GPUs are live: preempt or offer slots; returns (left, joined)."""
        preemptible = [s for s in self.slots if s.zone is Zone.PREEMPTIBLE]
        live = min(len(preemptible), int(gpus) // self.tp)
        now_live = [s for s in preemptible if s.available]
        left = joined = 0
        if len(now_live) > live:  # unused slots go first, then those of the role with the most workers
            excess = len(now_live) - live
            gone = [s for s in now_live if s.role is None][:excess]
            busy = [s for s in now_live if s.role is not None]
            while len(gone) < excess:
                busy.sort(key=lambda s: (-self._role_count(s.role), s.id))
                victim = busy.pop(0)
                self._stop(victim)
                self._mark(victim, "preempted")
                self.preempted += 1
                gone.append(victim)
            for s in gone:
                s.available = False
                left += 1
        else:
            for s in preemptible:
                if not s.available and len(now_live) + joined < live:
                    s.available = True
                    joined += 1
        return left, joined

    def _role_count(self, role: Role | None) -> int:
        return sum(1 for s in self.slots if s.role is role and role is not None)

    def finish_batch(self) -> tuple[BatchResult, float, int]:
        """End the batch: every borrowed GPU goes back; returns the result, when the trainer has all its GPUs
        back, and how many were borrowed at the end."""
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
        back = max([end, *(s.back_at for s in self.slots if s.zone is Zone.OVERLAP)])
        return result, back, borrowed

    def serving(self) -> str:
        """The configuration in force, e.g. ``3P5D`` or ``6C``."""
        roles = [s.role for s in self.slots if s.role is not None]
        if self.mode is Mode.COLOCATED:
            return f"{roles.count(Role.COLOCATED)}C"
        return f"{roles.count(Role.PREFILL)}P{roles.count(Role.DECODE)}D"


@dataclass
class _Points:
    """Decision points inside a batch, in time order."""

    heap: list[tuple[float, int, EventKind, float]] = field(default_factory=list)

    def push(self, at: float, kind: EventKind, value: float = 0.0) -> None:
        heapq.heappush(self.heap, (at, len(self.heap), kind, value))


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
) -> SegmentResult:
    """Run ``decider`` over one availability segment (``trace``: rollout GPUs, dedicated included)."""
    s = setting.scenario
    dedicated = s.dedicated_rollout_gpus if dedicated_gpus is None else dedicated_gpus
    cluster = SimCluster(
        setting,
        costs=costs,
        policy=policy,
        dedicated_gpus=dedicated,
        preemptible_gpus=preemptible_gpus,
        allow_borrow=allow_borrow,
    )
    loop = ControlLoop(cluster, decider)
    duration = trace.end_s
    changes = [(float(t), float(c)) for t, c in zip(trace.times_s, trace.counts, strict=True)]
    cluster.set_preemptible(max(0.0, changes[0][1] - dedicated))
    steps: list[StepRecord] = []
    ratios: list[tuple[float, str]] = []
    transitions = 0
    train_end_prev = 0.0
    carried = 0
    step = 0
    t = 0.0
    while t < duration:
        cluster.now = t
        cluster.trainer_idle_at = train_end_prev
        record = loop.handle(Event(EventKind.STEP_BOUNDARY, t, f"step {step}"))
        transitions += record.changed
        if not any(slot.role is not None for slot in cluster.slots):
            raise SimulationError(f"{decider.name}: no rollout worker at the step boundary ({record.reason})")
        cluster.launch(step)
        ratio_at_start = cluster.serving()
        ratios.append((t, ratio_at_start))
        points = _Points()
        for at, count in changes[1:]:
            if t < at < duration:
                points.push(at, EventKind.GPU_JOIN, count)
        if t < train_end_prev < duration:
            points.push(train_end_prev, EventKind.TRAINING_FINISHED)
        k = 1
        while t + k * tick_s < duration:
            points.push(t + k * tick_s, EventKind.TICK)
            k += 1
        running = True
        preempted_before = cluster.preempted
        while running and points.heap:
            at, _, kind, value = heapq.heappop(points.heap)
            running = cluster.advance(at)
            if not running:
                break
            if kind is EventKind.GPU_JOIN:
                left, joined = cluster.set_preemptible(max(0.0, value - dedicated))
                if not (left or joined):
                    continue
                kind = EventKind.GPU_LEAVE if left else EventKind.GPU_JOIN
            record = loop.handle(Event(kind, at))
            transitions += record.changed
            if record.changed:
                ratios.append((at, cluster.serving()))
            if progress is not None:
                progress(at)
        if running:
            running = cluster.advance(duration)
        if running:
            carried = cluster.batch.unfinished if cluster.batch is not None else 0
            break
        result, back, borrowed = cluster.finish_batch()
        end = cluster.now
        train_start = max(back, train_end_prev)
        batch = setting.batch(step)
        appended = sum(u.appended_tokens for tr in batch for u in tr.turns)
        tokens = appended + sum(tr.generated_tokens for tr in batch)
        train_end = train_start + setting.training_s(tokens)
        steps.append(
            StepRecord(
                step=step,
                rollout_start_s=t,
                rollout_end_s=end,
                train_start_s=train_start,
                train_end_s=train_end,
                step_time_s=train_end - train_end_prev,
                generated_tokens=result.generated_tokens,
                training_tokens=tokens,
                ratio_at_start=ratio_at_start,
                borrowed_workers=borrowed,
                preempted_workers=cluster.preempted - preempted_before,
                reprefilled_tokens=result.prefill_tokens - appended,
            )
        )
        ratios.append((end, "idle"))
        t = max(end, train_end_prev)
        train_end_prev = train_end
        step += 1
        if progress is not None:
            progress(min(t, duration))
    return SegmentResult(
        policy=decider.name,
        segment=segment,
        duration_s=duration,
        mean_rollout_gpus=trace.mean(),
        scaling_factor=scaling_factor,
        steps=steps,
        carried_over=carried,
        timeline=cluster.timeline,
        ratios=ratios,
        decisions=len(loop.records),
        transitions=transitions,
    )
