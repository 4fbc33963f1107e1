"""The hindsight bound (``oracle-hindsight``): a search over the planners' action space, knowing the future.

At every step boundary :class:`HindsightSearch` plans the whole step's rollout in hindsight: it knows the step's
actual trajectories and the segment's actual availability trace, and it searches sequences of configurations,
one per **decision interval** — the stretch between two of the step's decision points at which something
changes (the step boundary, preemptible GPUs joining or leaving, the previous training step finishing) — each
interval simulated in the real simulator (:class:`~pearl_sched.sim.cluster.SimCluster`, deep-copied) from the
state the previous choice leaves: the running sequences, the KV pools and radix caches, the pending joins, the
transition delays charged exactly as the cluster charges them (PEARL Table 3). The score of a sequence is when
the step's training can start (the batch's end, plus deactivation of borrowed training GPUs, not before the
previous training ends), then the batch's end; the earliest wins, and the cluster then replays the plan, action
for action, at the same decision points (the periodic tick changes nothing).

The action space at a decision point is the planners': keep the configuration in force; or, for each way of
using the idle training GPUs (not borrowing; borrowing all of them when the trainer is idle), for each count of
workers (every usable one; or only the count already serving, admitting none of the GPUs that just joined),
colocated on all of them or disaggregated at a P:D split — every split (``shares=None``) or the splits of a
grid of prefill shares. Which slots serve is :func:`~pearl_sched.sim.baselines.assign`'s placement (fewest role
changes, dedicated first). A mode change only at the step boundary, as the cluster defers it otherwise.

With worker sizes (the scenario declares ``worker_sizes`` and the cluster reports them in its state), the action
space grows a size per role, as pearl_sched's planner may regroup GPUs (docs/simulator.md, "Oracles"): for each way
of using the idle training GPUs, on every usable GPU, colocated at each allowed colocated size, or disaggregated at
each (prefill size, decode size) pair of the allowed ones and each prefill share of the GPUs (every multiple of the
prefill size with ``shares=None``). A candidate is placed by :func:`place_sized`: slots already serving the role
at its size keep it, other slots of that size change role, and the remaining GPUs are regrouped into new workers
of that size on aligned blocks of one node (then the role's smaller allowed sizes for what is left); a new worker
pays what the cluster charges a regroup (its preparation for its TP degree, then finalisation; activation on a
borrowed training GPU) and the slots it takes are dissolved. The one-size actions above stay candidates where
each serving worker's size is allowed for its role. Pruned: one size per role (besides the remainder), only on
every usable GPU (the "those already serving" count is not tried with sizes), on the same share grid; mixed sizes
chosen otherwise (``10C(8×tp2+2×tp4)``) are reached only through keep. Without declared sizes the action space,
and so every result, is exactly the one-size one.

Search: ``beam=None`` is exhaustive — every sequence of actions over the step's decision intervals — and is
then **exact over that action space, for the step, from the state at its boundary**. With ``beam=B`` it is a
dynamic programme over decision intervals with pruning: at each decision point the candidate states are merged
by configuration (two histories that reach the same slot roles keep only the one that finishes earlier when
held to the end) and only the ``B`` best survive; that is a pruned search — it is **not** a bound, only a
strong hindsight reference, and the cost lines say so.

Held to the end, a state is judged as if nothing later were admitted or borrowed, so a configuration that only
pays once the GPUs joining later serve too loses to one that is better alone (swe-qwen3-30b-a3b ``attention-dp``:
beam 1 chose ``5P2D`` over the colocated ``7C`` that pearl_sched ran 55 s faster with the later admissions). With
``continuation=True`` each state is also run on by a cheap continuation — at each later decision point every
usable worker, the idle training GPUs borrowed, the running mode at the nearest searched split (:meth:`follow`,
one of the actions the search itself offers there) — and judged by the better of the two plans; a continued plan
is a whole plan of the action space, so it can be the step's plan too. It costs one more interval simulation per
state; it is still pruned (``,continued`` in the cost line), not a bound. A scenario declares it
(``hindsight_search``, :func:`~pearl_sched.sim.experiment.hindsight_search`); the shipped default is beam 1 held.

What it bounds, and what keeps it from being an exact bound on a whole segment:

* per step, not jointly over steps: each step is searched from the state its own previous plan left, so a plan
  that finishes one step later to leave a better state for the next is not searched, and a policy that arrives
  at a step boundary in a different state is compared from a different starting point. Between plans equal on
  the step's training start and end, the one leaving more workers serving wins (a tie-break: admitting GPUs
  that cannot speed up this step's slowest trajectory still prepares them for the next — found on a small
  instance where RLBoost+, admitting at once, beat the search by 0.01%);
* it decides only where something changes: a policy that changes configuration at a periodic tick (or in the
  middle of a decision interval) takes actions outside the searched space;
* borrowing is all or nothing, counts are all usable workers or those already serving, and with a share grid
  the P:D splits are a subset;
* the KV pools and radix caches are carried exactly between intervals (the copies are the simulator's state),
  so no approximation enters there — but a worker that joins, switches or restarts starts with an empty cache,
  as it does in the cluster.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pearl_sched.control import Assignment, Event, EventKind
from pearl_sched.errors import SimulationError
from pearl_sched.plans import Action, ActionKind
from pearl_sched.sim.baselines import Config, _lendable, _SegmentBound, _usable, assign
from pearl_sched.state import ClusterState, Mode, Role, Worker, WorkerSize, WorkerSizes, Zone

if TYPE_CHECKING:
    from pearl_sched.sim.cluster import SimCluster

logger = logging.getLogger(__name__)

SEARCH_PREFILL_SHARES = (0.25, 0.5, 0.75)
"""The prefill shares of the P:D splits the affordable (beam) search tries per worker count."""

SEARCH_BEAM = 1
"""States kept per decision point by the affordable search (``oracle-hindsight`` in the shipped scenarios): one,
the cost of a greedy lookahead over the full action space, so that it runs with the e2e scenario on two cores."""

Score = tuple[float, float, int]  # (training start, rollout end, −workers left serving): lower is better
NEVER: Score = (math.inf, math.inf, 0)
Plan = list[tuple[float, Assignment | None]]  # (decision time, action) in the order the cluster meets them


def copy_cluster(cluster: SimCluster) -> SimCluster:
    """A deep copy of ``cluster`` that shares what never changes: the setting, its step times, the batch specs."""
    memo: dict[int, object] = {id(cluster.setting): cluster.setting, id(cluster.setting.steps): cluster.setting.steps}
    for spec in cluster.setting.batch(cluster.step):
        memo[id(spec)] = spec
    sim = copy.deepcopy(cluster, memo)
    sim.timeline = []
    return sim


@dataclass(frozen=True)
class Regroup(Assignment):
    """A target that forms workers of other sizes on regrouped GPUs: each slot's role and one expansion per new worker.

    Applied by :meth:`~pearl_sched.sim.cluster.SimCluster.apply` as a planner's regroup: the slots whose GPUs an
    expansion takes are dissolved (their sequences resubmit), and the new worker serves after its preparation for
    its TP degree plus finalisation (activation for borrowed training GPUs).
    """

    actions: tuple[Action, ...] = ()


_ROLE_ORDER = (Role.PREFILL, Role.DECODE, Role.COLOCATED)
_ZONE_ORDER = {Zone.DEDICATED: 0, Zone.PREEMPTIBLE: 1, Zone.OVERLAP: 2}


def _size_of(worker: Worker) -> WorkerSize:
    return WorkerSize(tp=len(worker.gpu_ids), dp=worker.dp)


def sizes_label(sizes: WorkerSizes) -> str:
    """The declared sizes per role, as the search's cost line writes them: ``P:tp1/tp2,D:tp2/tp4,C:tp2/tp4``."""
    parts = []
    for letter, allowed in (("P", sizes.prefill), ("D", sizes.decode), ("C", sizes.colocated)):
        if allowed:
            parts.append(f"{letter}:" + "/".join(z.label for z in allowed))
    return ",".join(parts)


def place_sized(
    state: ClusterState,
    mode: Mode,
    wants: Sequence[tuple[Role, int, Sequence[WorkerSize]]],
    zones: Sequence[Zone],
) -> Assignment | None:
    """Place a sized configuration on the usable GPUs of ``zones`` with as few changes as its sizes allow.

    For each role in ``wants`` — ``(role, GPUs, sizes)``, the sizes largest first, the first being the role's
    chosen size and the rest those allowed for what is left — the slots already serving the role at its chosen
    size keep it; then, role by role and size by size, other usable slots of that size take the role, and the
    GPUs of the slots still unused are regrouped into new workers of that size, each on an aligned block of one
    node (dedicated nodes first, then preemptible, then the training GPUs), until the role has its GPUs.

    Args:
        state: The cluster as observed at the decision point (its workers' GPUs and roles).
        mode: The target's mode.
        wants: Per role, the GPUs it should hold and the sizes it may use for them (largest first).
        zones: The zones whose available slots may be used; slots elsewhere get no role.

    Returns:
        The target (a :class:`Regroup` when it forms new workers), or ``None`` when a role of ``wants`` gets no
        worker.
    """
    index = state.gpu_index()
    usable = sorted(
        (w for w in state.workers if index[w.gpu_ids[0]].zone in zones and all(index[g].available for g in w.gpu_ids)),
        key=lambda w: (_ZONE_ORDER[index[w.gpu_ids[0]].zone], w.id),
    )
    roles: dict[str, Role | None] = {w.id: None for w in state.workers}
    left = {role: gpus for role, gpus, _ in wants}
    kept: set[str] = set()  # slots given a role
    for role, _, sizes in wants:  # slots serving the role at its chosen size keep it
        for w in usable:
            if w.rollout_role is role and _size_of(w) == sizes[0] and left[role] >= w.tp:
                roles[w.id] = role
                left[role] -= w.tp
                kept.add(w.id)
    nodes: dict[str, list[str]] = {}  # each node's GPUs in order
    for g in state.gpus:
        nodes.setdefault(g.node, []).append(g.id)
    order = sorted(nodes, key=lambda n: (_ZONE_ORDER[index[nodes[n][0]].zone], n))
    owner = {g: w.id for w in usable for g in w.gpu_ids}
    dissolved: set[str] = set()  # slots a new worker takes GPUs of
    used: set[str] = set()  # GPUs of the new workers

    def free(gpu: str) -> bool:
        return gpu in owner and owner[gpu] not in kept and gpu not in used

    formed: list[tuple[tuple[str, ...], Role, WorkerSize]] = []
    for role, _, sizes in wants:
        for size in sizes:
            for w in usable:  # other slots of this size change role
                if w.id not in kept and w.id not in dissolved and _size_of(w) == size and left[role] >= size.tp:
                    roles[w.id] = role
                    left[role] -= size.tp
                    kept.add(w.id)
            while left[role] >= size.tp:  # the rest regrouped into new workers of this size
                block = _aligned_block(nodes, order, size.tp, free)
                if block is None:
                    break
                used.update(block)
                dissolved.update(owner[g] for g in block)
                formed.append((block, role, size))
                left[role] -= size.tp
    ids = {w.id for w in state.workers}  # a dissolved slot's id is not reused: actions name one slot each
    actions = []
    for gpus, role, size in formed:
        worker_id, k = f"w-{gpus[0]}-{size.label}", 1
        while worker_id in ids:
            k += 1
            worker_id = f"w-{gpus[0]}-{size.label}.{k}"
        ids.add(worker_id)
        roles[worker_id] = role
        actions.append(
            Action(
                kind=ActionKind.EXPAND,
                worker_id=worker_id,
                gpu_ids=gpus,
                zone=index[gpus[0]].zone,
                from_role=None,
                to_role=role,
                group=1,
                reason=f"new {size.label} worker on regrouped GPUs (hindsight search)",
                dp=size.dp,
            )
        )
    if any(role not in roles.values() for role, _, _ in wants):
        return None
    if not actions:
        return Assignment(mode, roles)
    return Regroup(mode, roles, tuple(actions))


def _aligned_block(
    nodes: dict[str, list[str]], order: Sequence[str], tp: int, free: Callable[[str], bool]
) -> tuple[str, ...] | None:
    """The first block of ``tp`` free GPUs aligned to ``tp`` within its node, nodes in ``order``."""
    for node in order:
        gpus = nodes[node]
        for start in range(0, len(gpus) - tp + 1, tp):
            block = gpus[start : start + tp]
            if all(free(g) for g in block):
                return tuple(block)
    return None


@dataclass
class _Node:
    """A searched state at a decision point: the copied cluster there and the actions that led to it."""

    sim: SimCluster
    plan: Plan
    held: Score = NEVER  # the score when the configuration is held to the batch's end
    continued: Score = NEVER  # the score of the continuation (every usable worker at each later point)
    continued_plan: Plan = field(default_factory=list)

    @property
    def judged(self) -> Score:
        """What the pruning ranks it by: the better of its held and continued scores (both plans it could run)."""
        return min(self.held, self.continued)

    @property
    def judged_plan(self) -> Plan:
        """The whole plan that reaches :attr:`judged`: the held one or the continued one."""
        return self.continued_plan if self.continued < self.held else self.plan


@dataclass
class SearchCost:
    """What one step's search cost: states expanded, intervals simulated, wall seconds."""

    step: int
    decision_points: int = 0
    simulations: int = 0
    wall_s: float = 0.0
    exhaustive: bool = True


@dataclass
class _StepPlan:
    step: int
    actions: dict[float, Assignment | None] = field(default_factory=dict)
    score: Score = NEVER

    @property
    def last_s(self) -> float:
        """The plan's last decision: after it the configuration is held to the batch's end."""
        return max(self.actions, default=-math.inf)


class HindsightSearch(_SegmentBound):
    """Plan each step in hindsight over the planners' action space (module docstring: what it bounds)."""

    def __init__(
        self,
        name: str = "oracle-hindsight",
        *,
        shares: Sequence[float] | None = SEARCH_PREFILL_SHARES,
        beam: int | None = SEARCH_BEAM,
        max_simulations: int = 100_000,
        continuation: bool = False,
    ) -> None:
        """Set up an unbound search; :meth:`bind` gives it the cluster before its segment runs.

        Args:
            name: The policy's name in reports.
            shares: Prefill shares of the P:D splits tried per worker count; ``None``: every split.
            beam: States kept per decision point; ``None``: exhaustive (exact over the action space, per step).
            max_simulations: An exhaustive step search that would simulate more intervals than this raises
                :class:`~pearl_sched.errors.SimulationError` rather than run for hours.
            continuation: With a beam, judge each state also by a continuation to the batch's end — at every later
                decision point every usable worker, borrowing when the trainer is idle, in the running mode at the
                nearest searched split (:meth:`follow`) — not only by its configuration held; the pruning keeps the
                states best by the better of the two, and a continued plan better than every other is the plan.
                One more interval simulation per state. Ignored by the exhaustive search.
        """
        if beam is not None and beam < 1:
            raise ValueError(f"beam must be at least 1 or None (exhaustive), got {beam}")
        super().__init__()
        self.name = name
        self.shares = None if shares is None else tuple(shares)
        self.beam = beam
        self.max_simulations = max_simulations
        self.continuation = continuation and beam is not None
        self.reason = ""
        self.search_costs: list[SearchCost] = []
        self.predicted_s: list[tuple[int, float]] = []  # (step, predicted training start) per searched step
        self.replans = 0  # a decision point the plan did not foresee (the cluster diverged): searched again
        self._plan: _StepPlan | None = None

    @property
    def simulations(self) -> int:
        """Intervals simulated ahead so far, over every searched step."""
        return sum(cost.simulations for cost in self.search_costs)

    @property
    def exact(self) -> bool:
        """Whether the search is exhaustive over every P:D split (exact over its action space, per step)."""
        return self.beam is None and self.shares is None

    def describe(self, worker_sizes: WorkerSizes | None = None) -> str:
        """What the search searches, as its cost line writes it.

        ``pruned(beam=1,shares=0.25/0.5/0.75)`` or ``exhaustive``; with the continuation ``,continued`` follows
        the shares (``pruned(beam=1,shares=0.25/0.5/0.75,continued)``); with declared ``worker_sizes`` the sizes
        per role join it, e.g. ``pruned(beam=1,shares=0.25/0.5/0.75,sizes=P:tp1/tp2,D:tp2/tp4,C:tp2/tp4)``.
        """
        shares = "all" if self.shares is None else "/".join(f"{x:g}" for x in self.shares)
        sized = f"sizes={sizes_label(worker_sizes)}" if worker_sizes is not None else ""
        if self.beam is None:
            return f"exhaustive({sized})" if sized else "exhaustive"
        continued = ",continued" if self.continuation else ""
        return f"pruned(beam={self.beam},shares={shares}{continued}" + (f",{sized})" if sized else ")")

    # -- the action space ---------------------------------------------------------------------------------
    def _splits(self, n: int) -> list[int]:
        if self.shares is None:
            return list(range(1, n))
        return sorted({min(n - 1, max(1, round(n * share))) for share in self.shares})

    def actions(self, state: ClusterState, modes: Sequence[Mode], boundary: bool) -> list[Assignment | None]:
        """Every action at a decision point: keep, and each (borrowing, count, mode, split) target, deduplicated.

        With worker sizes in ``state``, the one-size targets whose serving workers all have a size their role
        allows, then the sized targets of :meth:`sized_actions`.

        Args:
            state: The cluster as observed at the decision point.
            modes: The modes a target may have (both at the step boundary, the running one inside a batch).
            boundary: Whether this is the step boundary (keep is then possible only when some slot serves).
        """
        current = {w.id: w.rollout_role for w in state.workers}
        serving = sum(1 for role in current.values() if role is not None)
        out: list[Assignment | None] = [] if boundary and not serving else [None]
        seen = [current]
        sizes = state.worker_sizes
        allowed = (
            {w.id: {r for r in _ROLE_ORDER if _size_of(w) in sizes.allowed(r)} for w in state.workers} if sizes else {}
        )
        zone_options: list[tuple[Zone, ...]] = [(Zone.DEDICATED, Zone.PREEMPTIBLE)]
        if _lendable(state):
            zone_options.append((Zone.DEDICATED, Zone.PREEMPTIBLE, Zone.OVERLAP))
        for zones in zone_options:
            usable = _usable(state, zones)
            counts = sorted({usable, *([serving] if 0 < serving < usable else [])})
            for n in counts:
                if n == 0:
                    continue
                configs: list[Config] = []
                if Mode.COLOCATED in modes:
                    configs.append((Mode.COLOCATED, 0, 0, n))
                if Mode.DISAGGREGATED in modes and n > 1:
                    configs.extend((Mode.DISAGGREGATED, p, n - p, 0) for p in self._splits(n))
                for config in configs:
                    target = assign(state, config[0], config, zones)
                    roles = target.roles()
                    if sizes is not None and any(r is not None and r not in allowed[i] for i, r in roles.items()):
                        continue  # a worker of a size its role does not allow
                    if roles not in seen:
                        seen.append(roles)
                        out.append(target)
        if sizes is None:
            return out
        regroups: list[tuple[dict[str, Role | None], tuple[Action, ...]]] = []
        for zones in zone_options:
            for target in self.sized_actions(state, modes, zones, sizes):
                roles = target.roles()
                if isinstance(target, Regroup):
                    if (roles, target.actions) not in regroups:
                        regroups.append((roles, target.actions))
                        out.append(target)
                elif roles not in seen:
                    seen.append(roles)
                    out.append(target)
        return out

    def sized_actions(
        self, state: ClusterState, modes: Sequence[Mode], zones: Sequence[Zone], sizes: WorkerSizes
    ) -> list[Assignment]:
        """The sized targets on every usable GPU of ``zones`` (module docstring), placed by :func:`place_sized`.

        Colocated at each allowed colocated size; disaggregated at each (prefill size, decode size) pair and each
        prefill share of the GPUs, rounded to whole prefill workers (every multiple of the prefill size with
        ``shares=None``). Each role falls back to its smaller allowed sizes for GPUs its size cannot group.
        """
        index = state.gpu_index()
        gpus = sum(
            w.tp
            for w in state.workers
            if index[w.gpu_ids[0]].zone in zones and all(index[g].available for g in w.gpu_ids)
        )

        def down(allowed: Sequence[WorkerSize], size: WorkerSize) -> list[WorkerSize]:
            return [size, *(z for z in reversed(allowed) if z.tp < size.tp)]

        out: list[Assignment] = []
        wanted: list[tuple[Mode, list[tuple[Role, int, Sequence[WorkerSize]]]]] = []
        if Mode.COLOCATED in modes:
            for size in sizes.colocated:
                wanted.append((Mode.COLOCATED, [(Role.COLOCATED, gpus, down(sizes.colocated, size))]))
        if Mode.DISAGGREGATED in modes:
            for prefill in sizes.prefill:
                for decode in sizes.decode:
                    most = gpus - min(z.tp for z in sizes.decode)
                    if most < prefill.tp:
                        continue
                    if self.shares is None:
                        splits = list(range(prefill.tp, most + 1, prefill.tp))
                    else:
                        whole = {round(gpus * share / prefill.tp) * prefill.tp for share in self.shares}
                        splits = sorted({min(most // prefill.tp * prefill.tp, max(prefill.tp, p)) for p in whole})
                    for p in splits:
                        wants: list[tuple[Role, int, Sequence[WorkerSize]]] = [
                            (Role.PREFILL, p, down(sizes.prefill, prefill)),
                            (Role.DECODE, gpus - p, down(sizes.decode, decode)),
                        ]
                        wanted.append((Mode.DISAGGREGATED, wants))
        for mode, wants in wanted:
            target = place_sized(state, mode, wants, zones)
            if target is not None:
                out.append(target)
        return out

    def follow(self, state: ClusterState, mode: Mode) -> Assignment | None:
        """The continuation's action at a later decision point: use every usable worker, keep the split's share.

        Every usable worker, the idle training GPUs borrowed when the trainer is idle, in the running ``mode``;
        disaggregated at the searched split (:meth:`_splits`) nearest the prefill share in force. An action of
        :meth:`actions` (one of its targets, or keep).

        Args:
            state: The cluster as observed at the decision point.
            mode: The running batch's mode.

        Returns:
            The target, or ``None`` (keep) when it is the configuration in force or puts a worker in a role its
            size does not allow.
        """
        zones: tuple[Zone, ...] = (Zone.DEDICATED, Zone.PREEMPTIBLE)
        if _lendable(state):
            zones = (*zones, Zone.OVERLAP)
        n = _usable(state, zones)
        current = {w.id: w.rollout_role for w in state.workers}
        roles = list(current.values())
        config: Config
        if mode is Mode.COLOCATED and n > 0:
            config = (Mode.COLOCATED, 0, 0, n)
        elif mode is Mode.DISAGGREGATED and n > 1:
            prefill, decode = roles.count(Role.PREFILL), roles.count(Role.DECODE)
            share = prefill / (prefill + decode) if prefill + decode else 0.5
            p = min(self._splits(n), key=lambda k: (abs(k / n - share), k))
            config = (Mode.DISAGGREGATED, p, n - p, 0)
        else:
            return None
        target = assign(state, mode, config, zones)
        if target.roles() == current:
            return None
        sizes = state.worker_sizes
        if sizes is not None:
            size_of = {w.id: _size_of(w) for w in state.workers}
            if any(r is not None and size_of[i] not in sizes.allowed(r) for i, r in target.roles().items()):
                return None
        return target

    # -- simulating an interval ---------------------------------------------------------------------------
    def _points(self, after_s: float, trainer_idle_at: float) -> list[tuple[float, float | None]]:
        """The segment's decision points after ``after_s`` in the cluster's order: (time, GPUs) or (time, None)."""
        points: list[tuple[float, float | None]] = [
            (at, gpus) for at, gpus in self.changes[1:] if after_s < at < self.duration_s
        ]
        if after_s < trainer_idle_at < self.duration_s:
            points.append((trainer_idle_at, None))
        return sorted(points, key=lambda p: (p[0], p[1] is None))  # a trace change before training at one time

    def _run(self, sim: SimCluster, *, stop: bool, deadline_s: float = math.inf) -> bool | None:
        """Run ``sim``'s batch on, as the cluster's clock would; with ``stop``, to the next decision point.

        Args:
            sim: The copied cluster, its batch running.
            stop: Stop at the next decision point where something changes.
            deadline_s: Give up once the batch is still running past this time (it cannot beat the best plan).

        Returns:
            True when stopped at a decision point (``sim.now`` is its time), False when the batch has ended,
            None when it passed the deadline.
        """
        assert sim.batch is not None
        for at_s, gpus in self._points(sim.now, sim.trainer_idle_at):
            if at_s > deadline_s:
                break
            if not sim.advance(at_s):
                return False
            if gpus is None:
                if stop:
                    return True
                continue
            left, joined = sim.set_preemptible(max(0.0, gpus - self.dedicated_gpus))
            if stop and (left or joined):
                return True
        if not sim.advance(deadline_s):
            return False
        return None

    def _score(self, sim: SimCluster) -> Score:
        """Finish ``sim``'s batch and score it.

        Returns:
            When training could start, the batch's end, and (negated: a tie-break between plans equal on both) how
            many workers of the rollout zones it leaves serving, prepared for the next step.
        """
        _, back_s, _ = sim.finish_batch()
        serving = sum(1 for slot in sim.slots if slot.role is not None and slot.zone is not Zone.OVERLAP)
        return max(back_s, sim.trainer_idle_at), sim.now, -serving

    def _continue(self, sim: SimCluster, plan: Plan, deadline_s: float) -> tuple[Score, Plan]:
        """Run ``sim``'s batch to its end taking :meth:`follow`'s action at its decision point and each later one.

        Returns:
            The score (infinite when abandoned past ``deadline_s``) and ``plan`` with the actions taken.
        """
        plan = list(plan)
        while True:
            action = self.follow(sim.observe(), sim.batch_mode)
            plan.append((sim.now, action))
            if action is not None:
                sim.apply(action)
            stopped = self._run(sim, stop=True, deadline_s=deadline_s)
            if stopped is None:
                return NEVER, plan
            if not stopped:
                return self._score(sim), plan

    def _child(
        self, node: _Node, action: Assignment | None, cost: SearchCost, deadline_s: float
    ) -> tuple[_Node | None, Score]:
        """Apply ``action`` to a copy of ``node``'s cluster; run it to the next decision point, then held to the end.

        A copy still running past ``deadline_s`` (the best plan's training start so far) is abandoned: its
        training cannot start earlier, so this prunes nothing an exhaustive search needs (branch and bound).
        With the continuation, a copy of the state at the next decision point is also run on by :meth:`_continue`.

        Returns:
            The state at the next decision point (``None`` when the batch ended first or the copy was abandoned)
            and its judged score (:attr:`_Node.judged`; infinite when abandoned).
        """
        sim = copy_cluster(node.sim)
        cost.simulations += 1
        plan: Plan = [*node.plan, (sim.now, action)]
        try:
            if action is not None:
                sim.apply(action)
            if sim.batch is None:
                if not any(slot.role is not None for slot in sim.slots):
                    return None, NEVER
                sim.launch(sim.step)
            stopped = self._run(sim, stop=True, deadline_s=deadline_s)
            if stopped is None:
                return None, NEVER
            if not stopped:
                return None, self._score(sim)
            child = _Node(copy_cluster(sim), plan)
            if self.continuation:
                cost.simulations += 1
                with contextlib.suppress(SimulationError, ValueError):  # only the continued plan is lost
                    child.continued, child.continued_plan = self._continue(copy_cluster(sim), plan, deadline_s)
            if self._run(sim, stop=False, deadline_s=deadline_s) is not None:
                child.held = self._score(sim)  # else it may still branch to something better: only its held plan lost
        except (SimulationError, ValueError):
            return None, NEVER
        return child, child.judged

    # -- the search ---------------------------------------------------------------------------------------
    def search(self, cluster: SimCluster) -> _StepPlan:
        """Plan the rest of ``cluster``'s step from its state now (the step boundary or a decision point)."""
        started = time.perf_counter()
        cost = SearchCost(cluster.step, exhaustive=self.beam is None)
        best: tuple[Score, Plan] = (NEVER, [])
        frontier = [_Node(copy_cluster(cluster), [])]
        while frontier:
            cost.decision_points += len(frontier)
            children: dict[tuple[tuple[str, Role | None], ...], _Node] = {}
            survivors: list[_Node] = []
            for node in frontier:
                boundary = node.sim.batch is None
                modes = (Mode.COLOCATED, Mode.DISAGGREGATED) if boundary else (node.sim.batch_mode,)
                for action in self.actions(node.sim.observe(), modes, boundary):
                    if self.beam is None and cost.simulations >= self.max_simulations:
                        raise SimulationError(
                            f"{self.name}: the exhaustive search of step {cluster.step} passed"
                            f" {self.max_simulations} simulations; use a beam"
                        )
                    child, score = self._child(node, action, cost, best[0][0])
                    plan = [*node.plan, (node.sim.now, action)]
                    if score < best[0]:
                        best = (score, child.judged_plan if child is not None else plan)
                    if child is None:
                        continue
                    if self.beam is None:
                        survivors.append(child)
                        continue
                    key = tuple((slot.id, slot.role) for slot in child.sim.slots)
                    if key not in children or child.judged < children[key].judged:
                        children[key] = child  # the DP's merge: one history per configuration
            if self.beam is not None:
                survivors = sorted(children.values(), key=lambda c: c.judged)[: self.beam]
            frontier = survivors
        cost.wall_s = time.perf_counter() - started
        self.search_costs.append(cost)
        step_plan = _StepPlan(cluster.step, {at: action for at, action in best[1]}, best[0])
        self.predicted_s.append((cluster.step, best[0][0]))
        logger.debug("%s: step %d planned, %d simulations", self.name, cluster.step, cost.simulations)
        return step_plan

    def decide(self, event: Event, state: ClusterState) -> Assignment | None:
        """The step's plan: searched at the step boundary, replayed at its decision points; keep at the ticks."""
        cluster = self.cluster
        if cluster is None:
            raise SimulationError(f"{self.name} looks at the simulated cluster: run it with run_segment")
        if event.kind is EventKind.TICK:
            return None
        plan = self._plan
        if cluster.batch is None or plan is None or plan.step != cluster.step:
            plan = self._plan = self.search(cluster)
        elif event.at_s not in plan.actions and event.at_s <= plan.last_s:
            self.replans += 1  # the cluster met a decision point the search did not: it diverged
            plan = self._plan = self.search(cluster)
        action = plan.actions.get(event.at_s)
        label = "keep" if action is None else action.ratio
        self.reason = f"{label}: training starts at {plan.score[0]:.0f} s in hindsight"
        return action
