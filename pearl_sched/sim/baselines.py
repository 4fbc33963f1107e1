"""The policies compared in the simulator, each a :class:`~pearl_sched.control.Decider`.

=================  ==============================================================================================
``roll``           ROLL: 4 dedicated rollout GPUs, colocated, never elastic, never borrows.
``roll-large``     ROLL with a fixed pool the size of the segment's mean (whole TP groups), colocated.
``rlboost+``       RLBoost-like: every available preemptible GPU joins at once, colocated, no PD adaptation,
                   no borrowing (our reading of PEARL's RLBoost+ baseline; the paper does not spell it out).
``static-3p5d``    Disaggregated at PEARL's 16-GPU ratio (3P:5D) scaled to whatever is available, elastic,
                   borrows whenever the trainer is idle.
``ungated``        pearl_sched's planner, but borrowing without the Eq. 7 gate: it believes toggles are free.
``pearl``          PEARL-faithful: PEARL's closed-form model, its enumeration, its gate (``plan(backend=
                   "enumeration")`` with :class:`~pearl_sched.makespan.PearlMakespanModel`).
``pearl_sched``    The improved predictor with the MILP and the policies (``plan()`` defaults).
``oracle``         Hindsight: for every resource level met, the best static configuration found by simulating
                   the batch on every configuration (a sweep); borrows whenever the trainer is idle.
``pearl_sched-no-borrow``, ``best-colocated``, ``best-disaggregated``
                   Ablations: pearl_sched without borrowing; the oracle restricted to one mode.
``pearl_sched-one-batch``
                   Ablation: pearl_sched with PEARL's one-batch gates (``gate_horizon="batch"``) instead of
                   gates weighed over the residence; the same fitted hazard (what the horizon is worth).
=================  ==============================================================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.control import Assignment, Decider, Event, EventKind, PlannerDecider
from pearl_sched.sim.setting import Setting
from pearl_sched.state import ClusterState, Mode, Role, Zone

Config = tuple[Mode, int, int, int]  # mode, prefill, decode, colocated


@dataclass(frozen=True)
class PolicySpec:
    """How to build a policy for a scenario, and the pool it runs on."""

    name: str
    build: Callable[[Setting, TransitionCosts, PolicyConfig], Decider]
    fixed_pool: str | None = None  # 'dedicated' (ROLL) or 'mean' (ROLL-Large): no preemptible GPUs
    allow_borrow: bool = True
    description: str = ""
    fitted_hazard: bool = False  # starts from the preemption hazard fitted to the availability trace


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
    """Roles for ``config`` on available slots of ``zones``: slots keep their role where they can (fewest
    changes); dedicated slots are used first, then preemptible, then borrowed ones."""
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
        self.name = name
        self.zones = zones
        self.reason = "colocated on every available rollout GPU"

    def decide(self, event: Event, state: ClusterState) -> Assignment | None:
        n = _usable(state, self.zones)
        if n == 0:
            return None
        target = assign(state, Mode.COLOCATED, (Mode.COLOCATED, 0, 0, n), self.zones)
        current = {w.id: w.rollout_role for w in state.workers}
        return None if target.roles() == current else target


class StaticRatio:
    """Disaggregated at a fixed prefill share, on everything available, borrowing whenever allowed."""

    def __init__(self, name: str, prefill_share: float) -> None:
        self.name = name
        self.share = prefill_share
        self.reason = f"static prefill share {prefill_share:.3f}"

    def decide(self, event: Event, state: ClusterState) -> Assignment | None:
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
    """Hindsight best static configuration per resource level, by simulating the batch on each one."""

    def __init__(self, setting: Setting, name: str = "oracle", only: Mode | None = None) -> None:
        self.name = name
        self.only = only
        self.setting = setting
        self.best: dict[tuple[int, Mode | None], Config] = {}
        self.reason = ""
        self.sweeps = 0

    def configurations(self, n: int, mode: Mode | None) -> list[Config]:
        out: list[Config] = []
        if mode in (None, Mode.COLOCATED):
            out.append((Mode.COLOCATED, 0, 0, n))
        if mode in (None, Mode.DISAGGREGATED):
            out.extend((Mode.DISAGGREGATED, p, n - p, 0) for p in range(1, n))
        return out

    def best_for(self, n: int, mode: Mode | None) -> Config:
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


def _free_toggles(costs: TransitionCosts) -> TransitionCosts:
    return costs.model_copy(update={"activation_s": 0.0, "deactivation_s": 0.0})


def _one_batch(policy: PolicyConfig) -> PolicyConfig:
    """PEARL's gates: the batch in flight is the whole horizon."""
    return policy.model_copy(update={"gate_horizon": "batch"})


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
            lambda st, c, p: FixedColocated("rlboost+", (Zone.DEDICATED, Zone.PREEMPTIBLE)),
            allow_borrow=False,
            description="elastic over preemptible GPUs, colocated, no borrowing",
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
                "pearl", st.predictor("pearl"), backend="enumeration", costs=c, policy=_one_batch(p)
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
            "oracle",
            lambda st, c, p: Oracle(st),
            description="hindsight best static configuration per resource level (simulated sweep)",
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
            "best-colocated",
            lambda st, c, p: Oracle(st, "best-colocated", Mode.COLOCATED),
            description="hindsight best colocated configuration per resource level (ablation)",
        ),
        PolicySpec(
            "best-disaggregated",
            lambda st, c, p: Oracle(st, "best-disaggregated", Mode.DISAGGREGATED),
            description="hindsight best disaggregated P:D per resource level (ablation: forced disaggregation)",
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
