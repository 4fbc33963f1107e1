"""The policies compared in the simulator, each a :class:`~pearl_sched.control.Decider`.

=================  ==============================================================================================
``roll``           ROLL: 4 dedicated rollout GPUs, colocated, never elastic, never borrows.
``roll-large``     ROLL with a fixed pool the size of the segment's mean (whole TP groups), colocated.
``rlboost+``       RLBoost (Wu et al., NSDI'26, arXiv 2510.19225) adapted to asynchronous agentic RL as PEARL's
                   RLBoost+ is: every available preemptible GPU joins at once, colocated, join-the-shortest-queue
                   routing, no PD adaptation, and adaptive partial-response seeding on the training cluster
                   (:class:`RLBoostPlus`).
``static-3p5d``    Disaggregated at PEARL's 16-GPU ratio (3P:5D) scaled to whatever is available, elastic,
                   borrows whenever the trainer is idle.
``ungated``        pearl_sched's planner, but borrowing without the Eq. 7 gate: it believes toggles are free.
``pearl``          PEARL-faithful: PEARL's closed-form model, its enumeration, its gate (``plan(backend=
                   "enumeration")`` with :class:`~pearl_sched.makespan.PearlMakespanModel`).
``pearl_sched``    The improved predictor with the MILP and the policies (``plan()`` defaults).
``oracle-static``  The best *static* configuration per resource level: for every count of usable workers met, every
                   configuration (colocated, each P:D) is simulated on batch 0 from a fresh pool and the fastest is
                   used whenever that many workers are usable; borrows whenever the trainer is idle. Not a bound:
                   it ignores the running state, the actual batch and transition costs.
``oracle-hindsight``
                   The hindsight search (:class:`~pearl_sched.sim.hindsight.HindsightSearch`): each step planned in
                   hindsight over the planners' action space (per decision interval: mode at the boundary, P:D,
                   admitted workers, borrowing), every interval simulated from the state the previous choice
                   leaves, transition costs paid; a pruned dynamic programme in the shipped scenarios (not a
                   bound), exhaustive — exact per step over its action space — on small instances. With declared
                   worker sizes it also searches a size per role, regroups charged as the cluster charges them.
``oracle-lookahead``
                   Greedy hindsight lookahead (:class:`GreedyLookahead`): at every decision point but the periodic
                   tick it copies the real simulated cluster and, for each candidate action (mode at a step
                   boundary, P:D on a grid of prefill shares, borrow or not, keep), runs the copy to the batch's
                   end on the actual batch and the actual future availability, transition costs paid as the
                   cluster pays them, and takes the action whose training can start first.
``pearl_sched-no-borrow``, ``best-colocated``, ``best-disaggregated``
                   Ablations: pearl_sched without borrowing; oracle-static restricted to one mode.
``pearl_sched-one-batch``
                   Ablation: pearl_sched with PEARL's one-batch gates (``gate_horizon="batch"``) instead of
                   gates weighed over the residence; the same fitted hazard (what the horizon is worth).
``pearl_sched-prepared``
                   Ablation: pearl_sched on a cluster that prepares arrived preemptible GPUs in the background
                   while they do not serve, so a refused expansion asked again later pays only the preparation
                   left (not PEARL's behaviour; docs/policies.md, "Preparation progress").
=================  ==============================================================================================
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.control import Assignment, Decider, Event, EventKind, PlannerDecider
from pearl_sched.errors import SimulationError
from pearl_sched.sim.setting import Setting
from pearl_sched.state import ClusterState, Mode, Role, Zone

if TYPE_CHECKING:
    from pearl_sched.sim.cluster import SimCluster

Config = tuple[Mode, int, int, int]  # mode, prefill, decode, colocated


class _SegmentBound:
    """A decider that reads the simulated cluster (:class:`~pearl_sched.sim.cluster.ClusterBound`).

    ``bind`` keeps what it is given before the segment runs; each decider reads what it needs of it.
    """

    def __init__(self) -> None:
        self.cluster: SimCluster | None = None
        self.changes: list[tuple[float, float]] = []
        self.dedicated_gpus = 0
        self.duration_s = math.inf

    def bind(
        self,
        cluster: SimCluster,
        changes: Sequence[tuple[float, float]],
        dedicated_gpus: int,
        duration_s: float = math.inf,
    ) -> None:
        """Look at ``cluster``, the segment's availability ``changes`` (rollout GPUs, dedicated included), its end."""
        self.cluster = cluster
        self.changes = list(changes)
        self.dedicated_gpus = dedicated_gpus
        self.duration_s = duration_s


@dataclass(frozen=True)
class PolicySpec:
    """How to build a policy for a scenario, and the pool it runs on."""

    name: str
    build: Callable[[Setting, TransitionCosts, PolicyConfig], Decider]
    fixed_pool: str | None = None  # 'dedicated' (ROLL) or 'mean' (ROLL-Large): no preemptible GPUs
    allow_borrow: bool = True
    description: str = ""
    fitted_hazard: bool = False  # starts from the preemption hazard fitted to the availability trace
    background_preparation: bool = False  # arrived preemptible GPUs prepare while idle (PEARL: no)


def _slots(state: ClusterState) -> list[tuple[str, Zone, Role | None, bool]]:
    index = state.gpu_index()
    out = []
    for w in state.workers:
        gpus = [index[g] for g in w.gpu_ids]
        out.append((w.id, gpus[0].zone, w.rollout_role, all(g.available for g in gpus)))
    return out


def _lendable(state: ClusterState) -> bool:
    index = state.gpu_index()
    return state.budget.allow_borrow and any(
        g.zone is Zone.OVERLAP and (g.reclaim_in_s or 0.0) > 0 for g in index.values()
    )


def assign(state: ClusterState, mode: Mode, config: Config, zones: Iterable[Zone]) -> Assignment:
    """Place ``config`` on the available worker slots of ``zones`` with the fewest role changes.

    A slot that already serves a role the configuration still needs keeps it; the remaining roles go to free
    slots, dedicated ones first, then preemptible, then borrowed training GPUs (the overlap zone). When fewer
    slots are usable than ``config`` asks for, the roles are filled in the order prefill, decode, colocated and
    the rest stay unfilled.

    Args:
        state: The cluster as the control loop observed it.
        mode: The serving mode of the target.
        config: ``(mode, prefill, decode, colocated)`` worker counts.
        zones: The zones whose slots may be used; slots elsewhere get no role.

    Returns:
        The target, with every slot of ``state`` named (``None``: no rollout role).
    """
    allowed = tuple(zones)
    _, prefill, decode, colocated = config
    wanted = {Role.PREFILL: prefill, Role.DECODE: decode, Role.COLOCATED: colocated}
    order = {Zone.DEDICATED: 0, Zone.PREEMPTIBLE: 1, Zone.OVERLAP: 2}
    slots = sorted(
        (s for s in _slots(state) if s[1] in allowed and s[3]),
        key=lambda s: (order[s[1]], s[0]),
    )
    roles: dict[str, Role | None] = {s[0]: None for s in _slots(state)}
    free = []
    for slot_id, _, role, _ in slots:
        if role is not None and wanted.get(role, 0) > 0:
            roles[slot_id] = role
            wanted[role] -= 1
        else:
            free.append(slot_id)
    for role in (Role.PREFILL, Role.DECODE, Role.COLOCATED):
        while wanted[role] > 0 and free:
            roles[free.pop(0)] = role
            wanted[role] -= 1
    return Assignment(mode, roles)


def _usable(state: ClusterState, zones: Iterable[Zone]) -> int:
    allowed = tuple(zones)
    return sum(1 for s in _slots(state) if s[1] in allowed and s[3])


class FixedColocated:
    """All available slots of the allowed zones, colocated (ROLL, ROLL-Large, RLBoost+)."""

    def __init__(self, name: str, zones: tuple[Zone, ...]) -> None:
        """Colocate on ``zones``.

        Args:
            name: The policy's name in reports.
            zones: The zones whose available slots it uses (dedicated only for ROLL).
        """
        self.name = name
        self.zones = zones
        self.reason = "colocated on every available rollout GPU"

    def decide(self, event: Event, state: ClusterState) -> Assignment | None:
        """Colocated workers on every available slot of the zones.

        Returns:
            The target, or ``None`` when nothing is usable or the roles already match it.
        """
        n = _usable(state, self.zones)
        if n == 0:
            return None
        target = assign(state, Mode.COLOCATED, (Mode.COLOCATED, 0, 0, n), self.zones)
        current = {w.id: w.rollout_role for w in state.workers}
        return None if target.roles() == current else target


RLBOOST_ETA = 0.5
"""η of RLBoost's seeding-window update ``T_seed ← T_seed + η (trainer wait − remote wait)``: our choice (the
paper adapts the window with a step size it does not fix for this setting)."""


class RLBoostPlus(_SegmentBound):
    """RLBoost+ (PEARL's baseline): RLBoost's rollout offload, adapted to asynchronous agentic RL, colocated.

    RLBoost (Wu et al., "RLBoost: Harvesting Preemptible Resources for Cost-Efficient Reinforcement Learning on
    LLMs", NSDI'26, arXiv 2510.19225; code Terra-Flux/PolyRL) runs rollout on preemptible instances next to a
    reserved training cluster and adapts the reserved cluster's share by *partial-response seeding*: at the start
    of each step the training cluster generates for a window ``T_seed``, then hands the unfinished responses to the
    remote instances (one extra prefill of each prefix) and goes back to training; after the step
    ``T_seed ← T_seed + η (trainer wait − remote wait)``, memoised per number of remote instances (a count met
    for the first time goes on from the window in force: PolyRL's ``adjust_local_instances_gen_s``,
    src/rollout-manager/src/balance.rs, falls back to the elastic adjustment of the current value when it has no
    stored value for the new count); requests are balanced by join-the-shortest-queue.

    What this class borrows, as the simulator expresses it: colocated workers on every available dedicated and
    preemptible GPU, taken at once and kept (no PD mode, no ratio); the simulator's colocated router, which sends a
    turn to the worker with the fewest running and queued requests (JSQ); the seeding window as a loan of the
    idle training GPUs — when training finishes (the trainer is idle, asynchronous staleness 1) they join the
    batch colocated (PEARL Table 3 activation), and at the first decision point after ``T_seed`` they go back
    (deactivation), their sequences re-prefilled on the remote workers (the hand-off's extra prefill); the
    window update after every batch, with trainer wait = how long the training GPUs sat idle after the window
    until the batch ended, remote wait = how long the batch's workers sat idle after it until the next step
    could start, memoised per count of remote workers at the window's start; the first window is 0 s, and a
    count not met before starts from the window last in force (:meth:`window_for`).

    What it does not: the pull-based weight transfer (the simulator charges PEARL Table 3's preparation and
    finalisation for a joining worker instead), token-level migration of a preempted worker's responses (the
    simulator re-prefills the prefix elsewhere, as for any leaving worker), RLBoost's synchronous on-policy loop
    (here asynchronous, staleness 1, as PEARL runs it); the window ends at the decision-point granularity (the
    periodic tick), not to the second; η is :data:`RLBOOST_ETA`, our choice.
    """

    def __init__(self, name: str = "rlboost+", eta: float = RLBOOST_ETA) -> None:
        """Start with a 0 s seeding window for every remote-worker count.

        Args:
            name: The policy's name in reports.
            eta: Step size of the window update (dimensionless: seconds of window per second of wait gap).
        """
        super().__init__()  # bound: reads the batch's end from the cluster for the window update
        self.name = name
        self.eta = eta
        self.reason = ""
        self.seed_s: dict[int, float] = {}  # T_seed per remote-worker count
        self.current_s = 0.0  # the window in force: what a remote-worker count not met before starts from
        self._window: tuple[float, int] | None = None  # (start, remote workers) of this batch's window
        self._window_end_s: float | None = None

    def _update(self, now_s: float) -> None:
        """After a batch: move the window of the remote count it ran with by η (trainer wait − remote wait)."""
        cluster = self.cluster
        if self._window is None or cluster is None or cluster.previous_makespan_s is None:
            return
        _, remote = self._window
        batch_end_s = cluster.batch_start + cluster.previous_makespan_s
        window_end_s = self._window_end_s if self._window_end_s is not None else batch_end_s
        trainer_wait_s = max(0.0, batch_end_s - window_end_s)
        remote_wait_s = max(0.0, now_s - batch_end_s)
        self.seed_s[remote] = max(0.0, self.window_for(remote) + self.eta * (trainer_wait_s - remote_wait_s))
        self.current_s = self.seed_s[remote]
        self._window = self._window_end_s = None

    def window_for(self, remote: int) -> float:
        """``T_seed`` for ``remote`` workers: its memoised value, else the window in force.

        RLBoost's code keeps adjusting the current window when the remote count changes to one it has no value for.
        """
        return self.seed_s.get(remote, self.current_s)

    def decide(self, event: Event, state: ClusterState) -> Assignment | None:
        """Colocated on every remote GPU; the training GPUs join for ``T_seed`` once the trainer is idle."""
        remote_zones = (Zone.DEDICATED, Zone.PREEMPTIBLE)
        if event.kind is EventKind.STEP_BOUNDARY:
            self._update(event.at_s)
        borrowed = any(zone is Zone.OVERLAP and role is not None for _, zone, role, _ in _slots(state))
        zones: tuple[Zone, ...] = remote_zones
        remote = _usable(state, remote_zones)
        if self._window is None and _lendable(state) and event.kind is not EventKind.STEP_BOUNDARY:
            self._window = (event.at_s, remote)  # the trainer went idle: the seeding window opens
            self.current_s = self.window_for(remote)
        if self._window is not None and self._window_end_s is None:
            start_s, count = self._window
            if event.at_s < start_s + self.window_for(count) and _lendable(state):
                zones = (*remote_zones, Zone.OVERLAP)
            elif borrowed or event.at_s >= start_s:
                self._window_end_s = event.at_s  # hand the seeded responses back to the remote workers
        n = _usable(state, zones)
        if n == 0:
            return None
        self.reason = f"colocated on {n} workers; seeding window {self.window_for(remote):.0f} s"
        target = assign(state, Mode.COLOCATED, (Mode.COLOCATED, 0, 0, n), zones)
        current = {w.id: w.rollout_role for w in state.workers}
        return None if target.roles() == current else target


class StaticRatio:
    """Disaggregated at a fixed prefill share, on everything available, borrowing whenever allowed."""

    def __init__(self, name: str, prefill_share: float) -> None:
        """Hold ``prefill_share`` of the workers on prefill.

        Args:
            name: The policy's name in reports.
            prefill_share: Fraction of the usable workers given the prefill role (0.375 for PEARL's 3P:5D); the
                count is rounded and kept between 1 and all workers but one.
        """
        self.name = name
        self.share = prefill_share
        self.reason = f"static prefill share {prefill_share:.3f}"

    def decide(self, event: Event, state: ClusterState) -> Assignment | None:
        """Disaggregated at the fixed share on every usable worker (colocated when only one is usable).

        Returns:
            The target, or ``None`` when nothing is usable or the roles already match it.
        """
        zones = [Zone.DEDICATED, Zone.PREEMPTIBLE]
        if _lendable(state):
            zones.append(Zone.OVERLAP)
        n = _usable(state, zones)
        if n < 2:
            return assign(state, Mode.COLOCATED, (Mode.COLOCATED, 0, 0, n), zones) if n else None
        prefill = min(n - 1, max(1, round(n * self.share)))
        target = assign(state, Mode.DISAGGREGATED, (Mode.DISAGGREGATED, prefill, n - prefill, 0), zones)
        current = {w.id: w.rollout_role for w in state.workers}
        return None if target.roles() == current else target


class Oracle:
    """The best static configuration per count of usable workers, by simulating batch 0 on each one (a sweep).

    Not a hindsight bound: the choice ignores the running batch, the trajectories' progress, the actual batch of
    the step and transition costs; see :class:`~pearl_sched.sim.hindsight.HindsightSearch` for that.
    """

    def __init__(self, setting: Setting, name: str = "oracle-static", only: Mode | None = None) -> None:
        """Sweep lazily: a worker count's configurations are simulated the first time it is met.

        Args:
            setting: The scenario whose batch 0 and worker pools the sweep simulates.
            name: The policy's name in reports.
            only: Restrict the sweep to one mode (the ``best-colocated`` / ``best-disaggregated`` ablations).
        """
        self.name = name
        self.only = only
        self.setting = setting
        self.best: dict[tuple[int, Mode | None], Config] = {}
        self.reason = ""
        self.sweeps = 0

    def configurations(self, n: int, mode: Mode | None) -> list[Config]:
        """Every configuration of ``n`` workers: all colocated, and each P:D split with at least one of each.

        Args:
            n: Worker count.
            mode: Only this mode's configurations; ``None``: both modes.
        """
        out: list[Config] = []
        if mode in (None, Mode.COLOCATED):
            out.append((Mode.COLOCATED, 0, 0, n))
        if mode in (None, Mode.DISAGGREGATED):
            out.extend((Mode.DISAGGREGATED, p, n - p, 0) for p in range(1, n))
        return out

    def best_for(self, n: int, mode: Mode | None) -> Config:
        """The configuration of ``n`` workers with the shortest batch-0 makespan on a fresh pool, memoised.

        Ties go to the fewer prefill workers. Each simulated configuration counts in :attr:`sweeps`.

        Args:
            n: Worker count.
            mode: Only this mode's configurations; ``None``: both modes.
        """
        key = (n, mode)
        if key not in self.best:
            from pearl_sched.sim.rollout import simulate_batch

            batch = self.setting.batch(0)
            scores = []
            for config in self.configurations(n, mode):
                m, p, d, c = config
                scores.append((simulate_batch(self.setting.pool(m, p, d, c), batch).makespan_s, config))
                self.sweeps += 1
            self.best[key] = min(scores, key=lambda x: (x[0], x[1][1]))[1]
        return self.best[key]

    def decide(self, event: Event, state: ClusterState) -> Assignment | None:
        """The best configuration for the usable worker count, borrowing whenever the trainer is idle.

        Inside a batch the mode in force is kept (a mode change waits for the step boundary); a single usable
        worker can only be colocated.

        Returns:
            The target, or ``None`` when nothing is usable, the mode cannot hold the count, or the roles already
            match it.
        """
        zones = [Zone.DEDICATED, Zone.PREEMPTIBLE]
        if _lendable(state):
            zones.append(Zone.OVERLAP)
        n = _usable(state, zones)
        if n == 0:
            return None
        running = state.mode if event.kind is not EventKind.STEP_BOUNDARY else self.only
        if n == 1 and self.only is Mode.DISAGGREGATED:
            return None
        config = self.best_for(n, running if n > 1 else Mode.COLOCATED)
        if n == 1 and running is Mode.DISAGGREGATED:
            return None
        self.reason = f"best of {len(self.configurations(n, running))} simulated configurations for {n} workers"
        target = assign(state, config[0], config, zones)
        current = {w.id: w.rollout_role for w in state.workers}
        return None if target.roles() == current else target


HINDSIGHT_PREFILL_SHARES = (0.25, 0.5, 0.75)
"""The disaggregated ratios the hindsight oracle tries per worker count: these prefill shares, rounded."""


class GreedyLookahead(_SegmentBound):
    """A greedy hindsight lookahead over the planners' action space, simulated on the real cluster state.

    At the step boundary and at every decision point where something changed (GPUs joined or left, training
    finished) — not at the periodic tick, to stay cheap — it copies the simulated cluster and, for every
    candidate action, applies it to the copy (paying the transition delays the cluster charges: PEARL Table 3
    preparation + finalisation for an admitted preemptible worker, activation for a borrowed training GPU and
    deactivation when it goes back, the role switch, the restart of a mode change), runs the copy to the batch's
    end on the step's actual trajectories with the segment's actual future availability (preemptions applied as
    the trace says; GPUs that join later are not used by the copy) and scores it by when the step's training can
    start (the batch's end, plus the deactivation of borrowed GPUs, and not before the previous training ends).
    The action with the earliest start wins; keeping the current configuration is always a candidate.

    Candidates: with and without borrowing (when the trainer is idle), colocated on every usable worker, and
    disaggregated at :data:`HINDSIGHT_PREFILL_SHARES` of them; a mode change only at the step boundary (the
    cluster defers it otherwise, as the planners' plans are).

    What it bounds: each decision is the best, in hindsight, of its candidates *held to the batch's end*, so no
    plan that holds one of those configurations from a decision point can beat it there. What it does not: it is
    greedy (one decision at a time, no plan that changes configuration twice before the batch ends is searched),
    the candidate grid is coarse, and nothing is decided at the ticks, so a planner can beat it; it is a strong
    reference, not an upper bound on throughput.
    """

    def __init__(self, name: str = "oracle-lookahead", shares: Sequence[float] = HINDSIGHT_PREFILL_SHARES) -> None:
        """Set up an unbound oracle; :meth:`bind` gives it the cluster before its segment runs.

        Args:
            name: The policy's name in reports.
            shares: The prefill shares of the disaggregated candidates.
        """
        super().__init__()
        self.name = name
        self.shares = tuple(shares)
        self.reason = ""
        self.lookaheads = 0
        self.predicted_s: list[tuple[float, float]] = []  # (decision time, predicted training start) per choice

    @property
    def simulations(self) -> int:
        """Batch remainders simulated ahead so far (one per candidate per decision point)."""
        return self.lookaheads

    def candidates(self, state: ClusterState, modes: Sequence[Mode]) -> list[Assignment]:
        """Every candidate target: borrow or not, colocated on all usable workers, or P:D on the share grid."""
        out: list[Assignment] = []
        options: list[tuple[Zone, ...]] = [(Zone.DEDICATED, Zone.PREEMPTIBLE)]
        if _lendable(state):
            options.append((Zone.DEDICATED, Zone.PREEMPTIBLE, Zone.OVERLAP))
        for zones in options:
            n = _usable(state, zones)
            if n == 0:
                continue
            configs: list[Config] = []
            if Mode.COLOCATED in modes or n == 1:
                configs.append((Mode.COLOCATED, 0, 0, n))
            if Mode.DISAGGREGATED in modes and n > 1:
                prefills = sorted({min(n - 1, max(1, round(n * share))) for share in self.shares})
                configs.extend((Mode.DISAGGREGATED, p, n - p, 0) for p in prefills)
            out.extend(assign(state, config[0], config, zones) for config in configs)
        return out

    def score(self, target: Assignment | None) -> float:
        """When the step's training could start if ``target`` were applied now and held (``None``: keep)."""
        real = self.cluster
        assert real is not None
        memo: dict[int, object] = {id(real.setting): real.setting, id(real.setting.steps): real.setting.steps}
        for spec in real.setting.batch(real.step):
            memo[id(spec)] = spec
        sim = copy.deepcopy(real, memo)
        sim.timeline = []
        self.lookaheads += 1
        try:
            if target is not None:
                sim.apply(target)
            if sim.batch is None:
                if not any(slot.role is not None for slot in sim.slots):
                    return math.inf
                sim.launch(sim.step)
            for at_s, gpus in self.changes:
                if at_s <= sim.now:
                    continue
                if not sim.advance(at_s):
                    break
                sim.set_preemptible(max(0.0, gpus - self.dedicated_gpus))
            else:
                sim.advance(math.inf)
            if sim.batch is not None and sim.batch.unfinished:
                sim.advance(math.inf)
        except (SimulationError, ValueError):
            return math.inf
        _, back_s, _ = sim.finish_batch()
        return max(back_s, sim.trainer_idle_at)

    def decide(self, event: Event, state: ClusterState) -> Assignment | None:
        """Keep at ticks; elsewhere the candidate whose simulated training starts first."""
        if self.cluster is None:
            raise SimulationError(f"{self.name} looks at the simulated cluster: run it with run_segment")
        if event.kind is EventKind.TICK:
            return None
        boundary = self.cluster.batch is None
        modes = (Mode.COLOCATED, Mode.DISAGGREGATED) if boundary else (self.cluster.batch_mode,)
        current = {w.id: w.rollout_role for w in state.workers}
        options: list[Assignment | None] = [] if boundary and not any(current.values()) else [None]
        options.extend(c for c in self.candidates(state, modes) if c.roles() != current)
        if not options:
            return None
        scored = [(self.score(option), i, option) for i, option in enumerate(options)]
        best_s, _, best = min(scored, key=lambda x: (x[0], x[1]))
        self.predicted_s.append((event.at_s, best_s))
        label = "keep" if best is None else best.ratio
        self.reason = f"{label}: training starts at {best_s:.0f} s, best of {len(options)} simulated ahead"
        return best


def _hindsight_search() -> Decider:
    from pearl_sched.sim.hindsight import HindsightSearch  # it builds on this module's placement

    return HindsightSearch()


def _free_toggles(costs: TransitionCosts) -> TransitionCosts:
    return costs.model_copy(update={"activation_s": 0.0, "deactivation_s": 0.0})


def _one_batch(policy: PolicyConfig) -> PolicyConfig:
    """PEARL's gates: the batch in flight is the whole horizon."""
    return policy.model_copy(update={"gate_horizon": "batch"})


def _pearl_faithful(policy: PolicyConfig) -> PolicyConfig:
    """PEARL's gates, and PEARL's search ranking by its own objective: never by ``predict`` (docs/formulation.md)."""
    return policy.model_copy(update={"gate_horizon": "batch", "rank_by_predict": False})


POLICIES: dict[str, PolicySpec] = {
    spec.name: spec
    for spec in (
        PolicySpec(
            "roll",
            lambda st, c, p: FixedColocated("roll", (Zone.DEDICATED,)),
            fixed_pool="dedicated",
            allow_borrow=False,
            description="ROLL: 4 dedicated GPUs, colocated",
        ),
        PolicySpec(
            "roll-large",
            lambda st, c, p: FixedColocated("roll-large", (Zone.DEDICATED,)),
            fixed_pool="mean",
            allow_borrow=False,
            description="ROLL with a fixed pool at the segment's mean, colocated",
        ),
        PolicySpec(
            "rlboost+",
            lambda st, c, p: RLBoostPlus(),
            description="RLBoost adapted (PEARL): preemptible GPUs colocated, JSQ, adaptive seeding on training GPUs",
        ),
        PolicySpec(
            "static-3p5d",
            lambda st, c, p: StaticRatio("static-3p5d", 3 / 8),
            description="disaggregated at 3P:5D scaled, elastic, borrows whenever idle",
        ),
        PolicySpec(
            "ungated",
            lambda st, c, p: PlannerDecider(
                "ungated", st.predictor("improved"), costs=c, policy=p, planning_costs=_free_toggles(c)
            ),
            description="pearl_sched's planner, borrowing without the Eq. 7 gate",
            fitted_hazard=True,
        ),
        PolicySpec(
            "pearl",
            lambda st, c, p: PlannerDecider(
                "pearl", st.predictor("pearl"), backend="enumeration", costs=c, policy=_pearl_faithful(p)
            ),
            description="PEARL-faithful: its model, its enumeration, its gate",
        ),
        PolicySpec(
            "pearl_sched",
            lambda st, c, p: PlannerDecider("pearl_sched", st.predictor("improved"), costs=c, policy=p),
            description="improved predictor + MILP + policies",
            fitted_hazard=True,
        ),
        PolicySpec(
            "oracle-static",
            lambda st, c, p: Oracle(st),
            description="best static configuration per usable-worker count, batch 0 from a fresh pool (sweep)",
        ),
        PolicySpec(
            "oracle-hindsight",
            lambda st, c, p: _hindsight_search(),
            description="hindsight search per step over the planners' action space, intervals simulated (pruned DP)",
        ),
        PolicySpec(
            "oracle-lookahead",
            lambda st, c, p: GreedyLookahead(),
            description="greedy hindsight lookahead per decision point: each candidate held to the batch's end",
        ),
        PolicySpec(
            "pearl_sched-no-borrow",
            lambda st, c, p: PlannerDecider("pearl_sched-no-borrow", st.predictor("improved"), costs=c, policy=p),
            allow_borrow=False,
            description="pearl_sched without borrowing training GPUs (ablation)",
            fitted_hazard=True,
        ),
        PolicySpec(
            "pearl_sched-one-batch",
            lambda st, c, p: PlannerDecider(
                "pearl_sched-one-batch", st.predictor("improved"), costs=c, policy=_one_batch(p)
            ),
            description="pearl_sched with PEARL's one-batch expansion and borrowing gates (ablation)",
            fitted_hazard=True,
        ),
        PolicySpec(
            "pearl_sched-prepared",
            lambda st, c, p: PlannerDecider("pearl_sched-prepared", st.predictor("improved"), costs=c, policy=p),
            description="pearl_sched with arrived preemptible GPUs prepared in the background while idle (ablation)",
            fitted_hazard=True,
            background_preparation=True,
        ),
        PolicySpec(
            "best-colocated",
            lambda st, c, p: Oracle(st, "best-colocated", Mode.COLOCATED),
            description="oracle-static restricted to colocated (ablation)",
        ),
        PolicySpec(
            "best-disaggregated",
            lambda st, c, p: Oracle(st, "best-disaggregated", Mode.DISAGGREGATED),
            description="oracle-static restricted to disaggregated P:D (ablation: forced disaggregation)",
        ),
    )
}


def fixed_pool_gpus(spec: PolicySpec, dedicated: int, mean_rollout_gpus: float, tp: int) -> int | None:
    """The dedicated pool of a fixed-pool policy, or None for the scenario's zones."""
    if spec.fixed_pool == "dedicated":
        return dedicated
    if spec.fixed_pool == "mean":
        return max(tp, math.floor(mean_rollout_gpus / tp) * tp)
    return None
