"""The elastic control loop and the adapter interfaces it drives (docs/adapters.md, "Interfaces").

One loop runs against any cluster that implements :class:`ClusterAdapter` — the simulator
(:class:`pearl_sched.sim.cluster.SimCluster`) or SGLang behind its gateway
(:class:`pearl_sched.adapters.sglang.SGLangCluster`) — and cannot tell them apart. On every event (a step
boundary, training begin or finish, a GPU joining or leaving, a periodic tick) it observes the cluster, asks a
:class:`Decider` for a target, applies it, and records what it decided and why.

A decider is the policy: :class:`PlannerDecider` wraps :func:`pearl_sched.plan` (pearl_sched and the
PEARL-faithful policy; its gates, hysteresis and ordered actions are in docs/policies.md); the simulator's
baselines implement the same protocol.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pearl_sched._compat import StrEnum
from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.errors import InfeasiblePlanError, MissingExtraError
from pearl_sched.makespan import MakespanModel
from pearl_sched.planner import plan
from pearl_sched.plans import Plan, PolicyState
from pearl_sched.state import ClusterState, Mode, Role, ratio_label

logger = logging.getLogger(__name__)


class EventKind(StrEnum):
    """What woke the loop."""

    STEP_BOUNDARY = "step_boundary"
    TRAINING_BEGIN = "training_begin"
    TRAINING_FINISHED = "training_finished"
    GPU_JOIN = "gpu_join"
    GPU_LEAVE = "gpu_leave"
    TICK = "tick"


@dataclass(frozen=True)
class Event:
    """An event at ``at_s`` seconds on the cluster's clock."""

    kind: EventKind
    at_s: float
    detail: str = ""


@runtime_checkable
class Target(Protocol):
    """A target configuration: the whole-cluster mode and each slot's rollout role. :class:`Plan` is one."""

    @property
    def mode(self) -> Mode:
        """The whole cluster's rollout mode (colocated or disaggregated)."""
        ...

    def roles(self) -> dict[str, Role | None]:
        """Slot id → rollout role; ``None`` for a slot with no rollout worker (off, or lent back to training)."""
        ...


@dataclass(frozen=True)
class Assignment:
    """A target built by hand (baselines, tests): the mode and slot id → rollout role."""

    mode: Mode
    role_map: Mapping[str, Role | None]

    def roles(self) -> dict[str, Role | None]:
        """A copy of ``role_map``: slot id → rollout role, ``None`` for a slot without a rollout worker."""
        return dict(self.role_map)

    @property
    def ratio(self) -> str:
        """The worker mix as people write it: ``"3P5D"`` disaggregated, ``"8C"`` colocated."""
        roles = list(self.role_map.values())
        return ratio_label(self.mode, roles.count(Role.PREFILL), roles.count(Role.DECODE), roles.count(Role.COLOCATED))


@dataclass(frozen=True)
class ApplyReport:
    """What applying a target did: slots changed, seconds of capacity lost to the transition, anything put off."""

    changed: tuple[str, ...] = ()
    seconds_lost: float = 0.0
    deferred: str = ""


@runtime_checkable
class ClusterAdapter(Protocol):
    """A rollout cluster the control loop can observe and reconfigure."""

    def observe(self) -> ClusterState:
        """The cluster now: GPUs (with availability and reclaim times), worker slots, workload, budget."""
        ...

    def apply(self, target: Target) -> ApplyReport:
        """Move towards ``target``; returns what changed. Must be safe to call with the current configuration."""
        ...

    def telemetry(self) -> Mapping[str, float]:
        """Measured figures since the last call (e.g. ``makespan_s``, ``bubble_ratio``, ``tokens``)."""
        ...


@runtime_checkable
class TrainerAdapter(Protocol):
    """The trainer side: its GPUs are lent to rollout while it is idle and reclaimed before it trains."""

    def weight_version(self) -> int:
        """The version of the newest published weights."""
        ...

    def lend(self, gpu_ids: Sequence[str]) -> None:
        """Release these GPUs to rollout (free device memory; the trainer must not touch them)."""
        ...

    def reclaim(self, gpu_ids: Sequence[str], deadline_s: float) -> None:
        """Take these GPUs back, ready to train, within ``deadline_s`` seconds."""
        ...

    def publish_weights(self) -> str:
        """Publish the current weights for rollout workers; returns where (a path or a group name)."""
        ...


class Decider(Protocol):
    """A policy: from an event and the observed state to a target, or None to keep the configuration."""

    name: str

    def decide(self, event: Event, state: ClusterState) -> Target | None:
        """The configuration to move to after ``event``, or ``None`` to keep the current one."""
        ...


class PlannerDecider:
    """A decider that calls :func:`pearl_sched.plan` with a makespan model, a backend and the policies.

    An infeasible state keeps the current configuration and records why (the loop never crashes on it),
    except when only the KV requirement binds: the engines queue what does not fit, so it plans for the
    trajectories that can be resident. Any other error propagates. ``policy_state`` is what the policies start
    from (e.g. a preemption hazard fitted to an availability trace); each plan carries it on.
    """

    def __init__(
        self,
        name: str,
        model: MakespanModel,
        *,
        backend: str = "auto",
        costs: TransitionCosts | None = None,
        policy: PolicyConfig | None = None,
        planning_costs: TransitionCosts | None = None,
        policy_state: PolicyState | None = None,
    ) -> None:
        """Plan with one makespan model, solver backend and set of policies.

        Args:
            name: the label records and logs carry.
            model: predicts a configuration's rollout makespan (seconds).
            backend: the solver backend :func:`plan` runs (``"auto"``: the measured default).
            costs: the transition seconds the cluster really pays (PEARL Table 3 by default).
            policy: gates, hysteresis and horizons (docs/policies.md).
            planning_costs: the transition seconds the planner believes; ``costs`` when not given.
            policy_state: what the policies start from on the first plan (e.g. a fitted preemption hazard).
        """
        self.name = name
        self.model = model
        self.backend = backend
        self.costs = costs or TransitionCosts()
        self.planning_costs = planning_costs or self.costs  # what the planner believes the costs are
        self.policy = policy or PolicyConfig()
        self.current: Plan | None = None
        self.policy_state = policy_state
        self.last_error: str = ""

    def decide(self, event: Event, state: ClusterState) -> Plan | None:
        """Plan from ``state``, starting from the previous plan; ``None`` when no plan is feasible.

        The reason an infeasible state was kept, or what was relaxed to plan it, is left in ``last_error``.

        Raises:
            SolverUnavailableError: ``backend`` names a solver whose package is not installed.
            ValueError: ``backend`` is unknown.
        """
        try:
            result, relaxed = plan_resident(
                state,
                self.model,
                current=self.current,
                costs=self.planning_costs,
                policy=self.policy,
                policy_state=self.policy_state if self.current is None else None,
                backend=self.backend,
            )
        except InfeasiblePlanError as exc:
            self.last_error = str(exc)
            logger.info("%s: no feasible plan at %.0f s (%s); keeping the configuration", self.name, event.at_s, exc)
            return None
        self.last_error = relaxed
        self.current = result
        return result


def plan_resident(state: ClusterState, model: MakespanModel, **options: Any) -> tuple[Plan, str]:
    """Call :func:`plan`, relaxing the number of resident trajectories when only the KV requirement binds.

    When more trajectories are unfinished than the KV cache of every GPU holds, it plans for the most trajectories
    that can be resident (found by bisection to within ~1.5%; the engines queue the rest).

    Args:
        state: the observed cluster.
        model: the makespan model.
        **options: passed to :func:`plan` unchanged.

    Returns:
        The plan and a note saying what was relaxed (``""`` when nothing was).

    Raises:
        InfeasiblePlanError: a constraint other than KV capacity binds, or not even one trajectory fits.
    """
    try:
        return plan(state, model, **options), ""
    except InfeasiblePlanError as exc:
        if exc.binding_constraint != "kv_capacity" or state.workload.unfinished <= 1:
            raise
        first = exc

    def attempt(unfinished: int) -> Plan | None:
        workload = state.workload.model_copy(update={"unfinished": unfinished})
        try:
            return plan(state.model_copy(update={"workload": workload}), model, **options)
        except InfeasiblePlanError as exc:
            if exc.binding_constraint != "kv_capacity":
                raise
            return None

    lo, hi, best = 0, state.workload.unfinished, None  # lo fits (or is 0), hi does not
    while hi - lo > max(1, hi // 64):  # to within ~1.5%: a handful of plans
        mid = (lo + hi) // 2
        found = attempt(mid)
        if found is None:
            hi = mid
        else:
            lo, best = mid, found
    if best is None:
        raise first
    return best, f"KV for {state.workload.unfinished} trajectories exceeds the cluster's; planned for {lo} resident"


@dataclass(frozen=True)
class Record:
    """One turn of the loop."""

    event: Event
    ratio: str
    mode: str
    predicted_makespan_s: float | None
    changed: int
    seconds_lost: float
    reason: str
    deferred: str = ""
    decision: str = ""  # initial / kept / changed / forced (a Plan's DecisionKind), "none" or "external"


def step_metrics(record: Record) -> dict[str, float]:
    """A loop turn as a flat ``name → number`` dict for wandb / tensorboard-style loggers.

    Example: ``ControlLoop(..., on_record=lambda r: wandb.log(step_metrics(r)))``; keys are prefixed
    ``pearl_sched/`` and the decision kind is one-hot, so every turn logs the same keys.
    """
    out = {
        "pearl_sched/at_s": record.event.at_s,
        "pearl_sched/disaggregated": 1.0 if record.mode == Mode.DISAGGREGATED.value else 0.0,
        "pearl_sched/slots_changed": float(record.changed),
        "pearl_sched/seconds_lost": record.seconds_lost,
        "pearl_sched/predicted_makespan_s": (
            record.predicted_makespan_s if record.predicted_makespan_s is not None else math.nan
        ),
    }
    for kind in ("initial", "kept", "changed", "forced", "none", "external"):
        out[f"pearl_sched/decision_{kind}"] = 1.0 if record.decision == kind else 0.0
    return out


class LoopMetrics:
    """The loop's decisions as Prometheus metrics, in a registry of its own (``prometheus_client`` needed).

    Counters are exported without their ``_created`` series (``prometheus_client.disable_created_metrics``, a
    process-wide setting, as Dynamo's planner does); :meth:`serve` exposes them over HTTP.
    """

    def __init__(self, registry: Any | None = None) -> None:
        """Create the gauges and counters.

        Args:
            registry: a ``prometheus_client.CollectorRegistry`` to register in; a new one when ``None``.

        Raises:
            MissingExtraError: ``prometheus_client`` is not installed (the ``client`` extra).
        """
        try:
            from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics
        except ImportError as exc:  # pragma: no cover - the client extra installs it
            raise MissingExtraError("prometheus-client", "client") from exc
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.disaggregated = Gauge("pearl_sched_disaggregated", "1 when the plan is disaggregated", registry=r)
        self.workers = Gauge("pearl_sched_workers", "Workers by role in the plan", ["role"], registry=r)
        self.predicted = Gauge("pearl_sched_predicted_makespan_seconds", "Predicted batch makespan", registry=r)
        self.observed = Gauge("pearl_sched_observed_makespan_seconds", "Last measured batch makespan", registry=r)
        self.transitions = Counter("pearl_sched_transitions", "Slots changed by applied plans", registry=r)
        self.lost = Counter("pearl_sched_seconds_lost", "Worker-seconds of capacity lost to transitions", registry=r)
        self.decisions = Counter("pearl_sched_decisions", "Loop turns by event", ["event"], registry=r)
        self.decision_kinds = Counter(
            "pearl_sched_decision_reasons",
            "Loop turns by decision (initial, kept, changed, forced, ...)",
            ["kind"],
            registry=r,
        )

    def record(self, record: Record, target: Target | None) -> None:
        """Count one loop turn and, when it produced a target, set the mode, worker and prediction gauges."""
        self.decisions.labels(event=record.event.kind.value).inc()
        self.decision_kinds.labels(kind=record.decision or "none").inc()
        if target is not None:
            roles = target.roles()
            self.disaggregated.set(1.0 if target.mode is Mode.DISAGGREGATED else 0.0)
            for role in (Role.PREFILL, Role.DECODE, Role.COLOCATED):
                self.workers.labels(role=role.value).set(sum(1 for v in roles.values() if v is role))
        if record.predicted_makespan_s is not None:
            self.predicted.set(record.predicted_makespan_s)
        self.transitions.inc(record.changed)
        self.lost.inc(record.seconds_lost)

    def exposition(self) -> bytes:
        """The metrics in Prometheus text format (what a ``/metrics`` endpoint serves)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

    def serve(self, port: int, addr: str = "127.0.0.1") -> Any:
        """Serve ``/metrics`` over HTTP on ``addr:port`` from a daemon thread; returns the server (``shutdown()``)."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server


@dataclass
class ControlLoop:
    """observe → decide → apply → record, on every event."""

    cluster: ClusterAdapter
    decider: Decider
    metrics: LoopMetrics | None = None
    on_record: Callable[[Record], None] | None = None
    records: list[Record] = field(default_factory=list)

    def handle(self, event: Event) -> Record:
        """Run one turn for ``event``: observe the cluster, decide, apply any target, then record and export it.

        Returns:
            The turn's :class:`Record` (also appended to ``records`` and passed to ``on_record``).
        """
        state = self.cluster.observe()
        target = self.decider.decide(event, state)
        report = ApplyReport()
        if target is not None:
            report = self.cluster.apply(target)
        predicted = target.makespan.total_s if isinstance(target, Plan) else None
        if isinstance(target, Plan):
            reason, decision = target.decision.reason, target.decision.kind.value
        elif target is None:
            reason, decision = getattr(self.decider, "last_error", "") or "kept", "none"
        else:
            reason, decision = getattr(self.decider, "reason", ""), "external"
        record = Record(
            event=event,
            ratio=_ratio(target),
            mode=target.mode.value if target is not None else "",
            predicted_makespan_s=predicted if predicted is None or math.isfinite(predicted) else None,
            changed=len(report.changed),
            seconds_lost=report.seconds_lost,
            reason=reason,
            deferred=report.deferred,
            decision=decision,
        )
        self.records.append(record)
        if self.metrics is not None:
            self.metrics.record(record, target)
        if self.on_record is not None:
            self.on_record(record)
        return record

    def observed_makespan(self, seconds: float) -> None:
        """Report a measured batch makespan (exported next to the prediction)."""
        if self.metrics is not None and math.isfinite(seconds):
            self.metrics.observed.set(seconds)

    async def run(self, events: asyncio.Queue[Event], *, tick_s: float, clock: Callable[[], float]) -> None:
        """Run the loop as an asyncio task: handle each queued event, and a ``TICK`` every ``tick_s`` seconds.

        Each turn runs in a worker thread (``asyncio.to_thread``), so planning and the adapters' blocking HTTP
        calls never block the caller's event loop; turns run one at a time. Cancel the task to stop it.

        Args:
            events: Events from the framework (step boundaries, preemption notices, ...).
            tick_s: Seconds between ticks when no event arrives.
            clock: The cluster's clock, stamped on ticks.
        """
        while True:
            try:
                event = await asyncio.wait_for(events.get(), timeout=tick_s)
            except asyncio.TimeoutError:  # builtin TimeoutError only from 3.11
                event = Event(EventKind.TICK, clock())
            await asyncio.to_thread(self.handle, event)


def _ratio(target: Target | None) -> str:
    if target is None:
        return ""
    ratio = getattr(target, "ratio", None)
    return str(ratio) if ratio is not None else ""
