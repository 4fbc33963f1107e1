"""The class-level planning problem: its vocabulary, its exact objective and a brute-force oracle.

Slots that are interchangeable — same zone, GPU type, node group, current role and TP degree — form a
*class* of size n_k; a configuration says how many slots of each class take each rollout role. With worker
sizes (docs/state.md), a class may also stand for workers not yet formed: up to n_k new workers of one size
on the GPUs of a :class:`GpuPool`, whose node blocks bound them together with the pool's surviving slots.
This module
is the problem's core: the planner builds a :class:`ClassProblem`, every solver (the MILP in
``pearl_sched.solvers.formulation``, PEARL's enumeration) answers with a :class:`ClassSolution`, and
:func:`evaluate` is the one exact score both sides agree on (docs/formulation.md). Solvers depend on this
module; it depends on no solver.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from pearl_sched.makespan import MakespanTerms
from pearl_sched.state import Mode, Role, Zone

ROLES: tuple[Role, Role, Role] = (Role.PREFILL, Role.DECODE, Role.COLOCATED)
"""The rollout roles, in the order of a :data:`Counts` entry."""

MODE_ROLES: Mapping[Mode, tuple[Role, ...]] = {
    Mode.DISAGGREGATED: (Role.PREFILL, Role.DECODE),
    Mode.COLOCATED: (Role.COLOCATED,),
}
"""The roles that serve in each mode."""


@dataclass(frozen=True)
class SlotClass:
    """Interchangeable worker slots.

    ``cost[r]`` is the objective seconds per slot of ending in rollout role r, ``cost[None]`` of ending
    outside rollout (off, or back with the trainer). ``fixed`` keeps every slot in its current role.
    ``key`` names the class; a caller that needs more per class (the planner's slot category) keeps its own
    map from the key.
    """

    key: str
    slot_ids: tuple[str, ...]
    gpu_type: str
    tp: int
    zone: Zone
    node_group: str
    current_role: Role | None
    eligible: frozenset[Role]
    weight: Mapping[Role, float]
    kv_bytes: float
    prefill_tokens_per_s: float
    cost: Mapping[Role | None, float]
    pauses_admission: bool = False
    fixed: bool = False
    pool: str | None = None
    new_workers: int | None = None
    dp: int = 1

    @functools.cached_property
    def size(self) -> int:
        """Number of slots in the class: its slots, or for a class of new workers how many could be formed."""
        return self.new_workers if self.new_workers is not None else len(self.slot_ids)

    @property
    def is_new(self) -> bool:
        """Whether the class stands for workers formed by regrouping its pool's GPUs (no slots yet)."""
        return self.new_workers is not None


@dataclass(frozen=True)
class GpuPool:
    """GPUs of one zone, GPU type, node group and planner category that workers of several sizes may share.

    ``block_gpus[s]`` is s · Σ_nodes ⌊a_n / s⌋ (a_n the pool's GPUs on node n): the GPUs workers of TP ≥ s can
    occupy without crossing a node. Because the sizes divide one another, a set of workers packs onto the
    nodes exactly when, for every size s, the GPUs of the workers of TP ≥ s fit in ``block_gpus[s]``.
    """

    key: str
    block_gpus: Mapping[int, int]


class PoolLedger:
    """GPUs taken so far in each pool's node blocks, for greedy searches that must respect them."""

    def __init__(self, problem: ClassProblem) -> None:
        """An empty ledger over ``problem``'s pools."""
        self._left = {p.key: dict(p.block_gpus) for p in problem.pools}  # GPUs left per pool and block size

    def room(self, cls: SlotClass) -> int:
        """How many more workers of ``cls`` fit its pool's node blocks (unbounded without a pool)."""
        left = self._left.get(cls.pool) if cls.pool is not None else None
        if left is None:
            return cls.size
        tp = cls.tp
        return min([gpus // tp for block, gpus in left.items() if block <= tp])

    def take(self, cls: SlotClass, workers: int) -> None:
        """Record ``workers`` more workers of ``cls``."""
        left = self._left.get(cls.pool) if cls.pool is not None else None
        if left is None or not workers:
            return
        tp = cls.tp
        for block in left:
            if block <= tp:
                left[block] -= workers * tp


def pool_violation(problem: ClassProblem, counts: Counts) -> str | None:
    """The first node-block row of ``problem.pools`` that ``counts`` break, or None."""
    if len(counts) != len(problem.classes):
        raise ValueError(f"{len(counts)} count vectors for {len(problem.classes)} classes")
    for pool_key, block, limit, members in problem.node_block_rows:
        used = sum(problem.classes[k].tp * sum(counts[k]) for k in members)
        if used > limit:
            return f"{pool_key}: {used} GPUs in workers of TP>={block}, {limit} available"
    return None


@dataclass(frozen=True)
class ClassProblem:
    """Everything the MILP, the enumeration and the brute-force oracle solve."""

    classes: tuple[SlotClass, ...]
    terms: MakespanTerms
    unfinished_fraction: float
    max_gpus: int
    kv_required_bytes: float
    min_prefill_tokens_per_s: float
    admission_pause_s: float
    modes: tuple[Mode, ...] = (Mode.COLOCATED, Mode.DISAGGREGATED)
    pools: tuple[GpuPool, ...] = ()

    @functools.cached_property
    def node_block_rows(self) -> tuple[tuple[str, int, int, tuple[int, ...]], ...]:
        """Per pool and block size, in the pools' order: (pool key, block, limit B_ps, the classes it counts).

        The classes are gathered by pool in one pass (a problem is made per solve, per mode and per size
        combination, so this runs often); each row's classes stay in class order.
        """
        if not self.pools:
            return ()
        members: dict[str, list[tuple[int, int]]] = {pool.key: [] for pool in self.pools}
        for k, c in enumerate(self.classes):
            if c.pool is not None and c.pool in members:
                members[c.pool].append((k, c.tp))
        return tuple(
            (pool.key, block, limit, tuple(k for k, tp in members[pool.key] if tp >= block))
            for pool in self.pools
            for block, limit in pool.block_gpus.items()
        )

    def with_classes(self, classes: Sequence[SlotClass]) -> ClassProblem:
        """The same problem over other classes."""
        return ClassProblem(
            tuple(classes),
            self.terms,
            self.unfinished_fraction,
            self.max_gpus,
            self.kv_required_bytes,
            self.min_prefill_tokens_per_s,
            self.admission_pause_s,
            self.modes,
            self.pools,
        )


Counts = tuple[tuple[int, int, int], ...]
"""Per class, the number of slots in (prefill, decode, colocated)."""


@dataclass(frozen=True)
class ClassSolution:
    """A configuration at class level and its exact score.

    ``objective_s`` is ρ·makespan_s + transition_cost_s, the quantity every solver minimises.
    """

    mode: Mode
    counts: Counts
    makespan_s: float
    pool_times_s: Mapping[Role, float]
    transition_cost_s: float
    objective_s: float
    capacity: Mapping[Role, float] = field(default_factory=dict)


def capacity(problem: ClassProblem, counts: Counts) -> dict[Role, float]:
    """Reference-worker capacity E_r of each role."""
    return {
        role: sum(c.weight.get(role, 0.0) * n[i] for c, n in zip(problem.classes, counts, strict=True))
        for i, role in enumerate(ROLES)
    }


def evaluate(problem: ClassProblem, mode: Mode, counts: Counts) -> ClassSolution | None:
    """The exact objective of a configuration, or ``None`` when it breaks a constraint.

    Called for every candidate of the enumeration and every solver answer, so it makes one pass over the
    classes; the sums run in class order, as :func:`capacity` does, so the floats are the same.
    """
    if mode not in problem.modes:
        return None
    memory = 1 if mode is Mode.DISAGGREGATED else 2  # decode, else colocated: the KV row's role
    prefill = 0 if mode is Mode.DISAGGREGATED else 2  # prefill, else colocated: the prefill row's role
    totals = [0, 0, 0]
    cap = [0.0, 0.0, 0.0]
    gpus = 0
    kv = prefill_rate = transition_s = 0.0
    starts = False
    gpus_of: list[int] = []  # per class, for the node-block rows
    for cls, n in zip(problem.classes, counts, strict=True):
        used = n[0] + n[1] + n[2]
        if used > cls.size or min(n) < 0:
            return None
        cost, weight = cls.cost, cls.weight
        for i, role in enumerate(ROLES):
            if n[i]:
                if role not in cls.eligible:
                    return None
                totals[i] += n[i]
                transition_s += cost[role] * n[i]
                cap[i] += weight.get(role, 0.0) * n[i]
        if cls.fixed and cls.current_role is not None and n[ROLES.index(cls.current_role)] != cls.size:
            return None
        kv += cls.kv_bytes * n[memory]
        prefill_rate += cls.prefill_tokens_per_s * n[prefill]
        transition_s += cost[None] * (cls.size - used)
        gpus_of.append(cls.tp * used)
        gpus += gpus_of[-1]
        starts = starts or (cls.pauses_admission and used > 0)
    if gpus > problem.max_gpus:
        return None
    if problem.pools:  # pool_violation's rows, from the GPUs counted above
        for _, _, limit, members in problem.node_block_rows:
            if sum([gpus_of[k] for k in members]) > limit:
                return None
    active = MODE_ROLES[mode]
    for i, role in enumerate(ROLES):
        if (role in active) != (totals[i] > 0):
            return None
    if kv < problem.kv_required_bytes or prefill_rate < problem.min_prefill_tokens_per_s:
        return None
    capacities = dict(zip(ROLES, cap, strict=True))
    pool_times = {role: problem.terms.pool(role).time_s(capacities[role]) for role in active}
    makespan_s = max(pool_times.values()) + problem.terms.environment_s
    if starts:
        transition_s += problem.admission_pause_s
    objective_s = problem.unfinished_fraction * makespan_s + transition_s
    return ClassSolution(mode, counts, makespan_s, pool_times, transition_s, objective_s, capacities)


def brute_force(problem: ClassProblem) -> ClassSolution | None:
    """Exhaustive search over every per-class count vector and mode; for tiny instances and tests only."""
    best: ClassSolution | None = None
    per_class = [list(_compositions(c)) for c in problem.classes]
    for mode in problem.modes:
        for counts in itertools.product(*per_class):
            solution = evaluate(problem, mode, counts)
            if solution is not None and (best is None or solution.objective_s < best.objective_s - 1e-12):
                best = solution
    return best


def _compositions(cls: SlotClass) -> Iterator[tuple[int, int, int]]:
    ranges = [range(cls.size + 1) if role in cls.eligible else range(1) for role in ROLES]
    for p, d, c in itertools.product(*ranges):
        if p + d + c <= cls.size:
            yield (p, d, c)


__all__ = [
    "MODE_ROLES",
    "ROLES",
    "ClassProblem",
    "ClassSolution",
    "Counts",
    "GpuPool",
    "PoolLedger",
    "SlotClass",
    "brute_force",
    "capacity",
    "evaluate",
    "pool_violation",
]
