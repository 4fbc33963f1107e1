"""PEARL's exact enumeration over mode × P:D ratio for a homogeneous pool, and the no-solver fallback.

Every usable worker is used (PEARL's assumption); candidates are colocated with N workers and disaggregated
with N_P = 1..N−1, N_D = N − N_P, O(N) in all. Each candidate's slots follow PEARL's minimal-change rule
(Eq. 5–6): every class keeps its current role up to the target count, deficits are filled with new workers
first, then with re-roled survivors — prefill preferring volatile GPUs, decode stable ones. The result is
exact for homogeneous pools where using every worker is optimal; elsewhere it is a good start solution for
the MILP and the answer when no solver is installed. When no candidate fits, the search tries fewer workers,
then (on instances of at most 20,000 configurations) every configuration, so the no-solver planner refuses a
feasible budget only on larger instances.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from pearl_sched.problem import (
    MODE_ROLES,
    ROLES,
    ClassProblem,
    ClassSolution,
    Counts,
    PoolLedger,
    SlotClass,
    brute_force,
    evaluate,
)
from pearl_sched.state import Mode, Role, Zone

_STABILITY = {Zone.DEDICATED: 0, Zone.PREEMPTIBLE: 1, Zone.OVERLAP: 2}
_ROLE_INDEX = {role: i for i, role in enumerate(ROLES)}


def usable_workers(problem: ClassProblem) -> int:
    """How many slots fit the budget, taking those in use first, then the most stable."""
    order = sorted(
        range(len(problem.classes)),
        key=lambda k: (problem.classes[k].current_role is None, _STABILITY[problem.classes[k].zone], k),
    )
    gpus = workers = 0
    ledger = PoolLedger(problem)
    for k in order:
        cls = problem.classes[k]
        if not cls.eligible:
            continue
        take = min(cls.size, (problem.max_gpus - gpus) // cls.tp, ledger.room(cls))
        ledger.take(cls, take)
        gpus += take * cls.tp
        workers += take
    return workers


def _fill_order(problem: ClassProblem) -> dict[Role, list[int]]:
    """Per role, the classes that fill a deficit, in the order they fill it.

    New workers before re-roled survivors, then decode on stable GPUs first and prefill on volatile ones first;
    the same for every candidate of a search, so a search sorts once.
    """
    order = {}
    for role in (Role.DECODE, Role.COLOCATED, Role.PREFILL):
        volatile_first = role is Role.PREFILL
        order[role] = sorted(
            (k for k, c in enumerate(problem.classes) if role in c.eligible and not c.fixed),
            key=lambda k: (
                problem.classes[k].current_role is not None,  # new workers before re-roled survivors
                -_STABILITY[problem.classes[k].zone] if volatile_first else _STABILITY[problem.classes[k].zone],
                k,
            ),
        )
    return order


def assign(
    problem: ClassProblem, targets: dict[Role, int], order: dict[Role, list[int]] | None = None
) -> Counts | None:
    """Per-class counts reaching ``targets`` with the fewest changes (PEARL Eq. 5–6), or ``None``.

    ``order`` is ``_fill_order(problem)``, for a caller that assigns many targets.
    """
    order = order if order is not None else _fill_order(problem)
    counts = [[0, 0, 0] for _ in problem.classes]
    free = [c.size for c in problem.classes]
    gpus_left = problem.max_gpus
    remaining = dict(targets)
    ledger = PoolLedger(problem)
    for k, cls in enumerate(problem.classes):  # keep each role up to its target count
        role = cls.current_role
        if role is not None and role in cls.eligible and remaining.get(role, 0) > 0:
            keep = min(cls.size, remaining[role], gpus_left // cls.tp, ledger.room(cls))
            ledger.take(cls, keep)
            counts[k][_ROLE_INDEX[role]] += keep
            free[k] -= keep
            remaining[role] -= keep
            gpus_left -= keep * cls.tp
    for role in (Role.DECODE, Role.COLOCATED, Role.PREFILL):  # decode picks stable GPUs before prefill
        left = remaining.get(role, 0)
        if left <= 0:
            continue
        i = _ROLE_INDEX[role]
        for k in order[role]:
            cls = problem.classes[k]
            if not free[k] or gpus_left < cls.tp:  # nothing to take (the ledger's room is never negative)
                continue
            take = min(free[k], left, gpus_left // cls.tp, ledger.room(cls))
            ledger.take(cls, take)
            counts[k][i] += take
            free[k] -= take
            left -= take
            gpus_left -= take * cls.tp
            if left <= 0:
                break
        remaining[role] = left
    if any(v > 0 for v in remaining.values()):
        return None
    return tuple((p, d, c) for p, d, c in counts)


def assign_many(problem: ClassProblem, targets: Sequence[dict[Role, int]]) -> list[Counts | None]:
    """:func:`assign` for every one of ``targets`` at once: the same greedy, one numpy lane per target.

    Every step of :func:`assign` is an integer ``min``, sum or difference, so the lanes give exactly what
    :func:`assign` gives target by target (a skipped class or a filled role takes 0 here); the Python work is
    per class, not per class and target, which is what a sweep over every split needs.
    """
    remaining = {role: np.array([t.get(role, 0) for t in targets], dtype=np.int64) for role in ROLES}
    counts, done = _assign_lanes(problem, remaining)
    return [_counts(counts, lane) if done[lane] else None for lane in range(len(targets))]


def _counts(counts: np.ndarray, lane: int) -> Counts:
    """One lane of a (class, role, lane) count array as :data:`~pearl_sched.problem.Counts`."""
    rows: list[list[int]] = counts[:, :, lane].tolist()
    return tuple((p, d, c) for p, d, c in rows)


def _assign_lanes(problem: ClassProblem, remaining: dict[Role, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`assign_many`'s lanes: the (class, role, lane) counts and whether each lane met its targets.

    ``remaining`` holds each role's target count per lane (it is used up).
    """
    lanes = len(remaining[Role.PREFILL])
    order = _fill_order(problem)
    classes = problem.classes
    counts = np.zeros((len(classes), 3, lanes), dtype=np.int64)
    free = np.array([[c.size] for c in classes], dtype=np.int64).repeat(lanes, axis=1)
    gpus_left = np.full(lanes, problem.max_gpus, dtype=np.int64)
    left = {
        p.key: {block: np.full(lanes, gpus, dtype=np.int64) for block, gpus in p.block_gpus.items()}
        for p in problem.pools
    }

    def room(cls: SlotClass) -> np.ndarray | int:  # PoolLedger.room, per lane
        blocks = left.get(cls.pool) if cls.pool is not None else None
        if blocks is None:
            return cls.size
        fits: np.ndarray = np.min([gpus // cls.tp for block, gpus in blocks.items() if block <= cls.tp], axis=0)
        return fits

    def take(k: int, cls: SlotClass, i: int, workers: np.ndarray) -> None:  # PoolLedger.take and the books
        blocks = left.get(cls.pool) if cls.pool is not None else None
        if blocks is not None:
            for block in blocks:
                if block <= cls.tp:
                    blocks[block] -= workers * cls.tp
        counts[k, i] += workers
        free[k] -= workers
        gpus_left[:] -= workers * cls.tp

    for k, cls in enumerate(classes):  # keep each role up to its target count
        role = cls.current_role
        if role is not None and role in cls.eligible:
            want = np.maximum(remaining[role], 0)  # assign keeps only while the role still needs workers
            keep = np.minimum(np.minimum(want, cls.size), np.minimum(gpus_left // cls.tp, room(cls)))
            take(k, cls, _ROLE_INDEX[role], keep)
            remaining[role] -= keep
    for role in (Role.DECODE, Role.COLOCATED, Role.PREFILL):  # decode picks stable GPUs before prefill
        i = _ROLE_INDEX[role]
        for k in order[role]:
            cls = classes[k]
            want = np.maximum(remaining[role], 0)
            if not want.any():  # every lane has its workers of this role: the rest would take none (assign stops)
                break
            got = np.minimum(np.minimum(free[k], want), np.minimum(gpus_left // cls.tp, room(cls)))
            take(k, cls, i, got)
            remaining[role] -= got
    done = np.all([remaining[role] <= 0 for role in ROLES], axis=0)
    return counts, done


def evaluate_many(problem: ClassProblem, mode: Mode, counts: np.ndarray) -> list[ClassSolution | None]:
    """:func:`~pearl_sched.problem.evaluate` of ``mode`` at each lane of a (class, role, lane) count array.

    The same checks and the same sums in the same order (class by class, a role's terms only where it has
    workers), so each answer equals ``evaluate``'s, float for float; the pool times are computed per lane
    that passes every check.
    """
    ok, cap, transition_s = evaluate_lanes(problem, mode, counts)
    active = MODE_ROLES[mode]
    solutions: list[ClassSolution | None] = [None] * counts.shape[2]
    caps, transitions = cap.T.tolist(), transition_s.tolist()
    for lane in np.flatnonzero(ok).tolist():
        capacities = dict(zip(ROLES, caps[lane], strict=True))
        pool_times = {role: problem.terms.pool(role).time_s(capacities[role]) for role in active}
        makespan_s = max(pool_times.values()) + problem.terms.environment_s
        lane_transition_s = transitions[lane]
        objective_s = problem.unfinished_fraction * makespan_s + lane_transition_s
        solutions[lane] = ClassSolution(
            mode, _counts(counts, lane), makespan_s, pool_times, lane_transition_s, objective_s, capacities
        )
    return solutions


def evaluate_lanes(problem: ClassProblem, mode: Mode, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The arrays :func:`evaluate_many` builds its solutions from, without building one per lane.

    Returns:
        Whether each lane passes every check of :func:`~pearl_sched.problem.evaluate`; the capacities, a
        (role, lane) array in :data:`~pearl_sched.problem.ROLES` order; and the transition costs. On the
        feasible lanes the last two equal ``evaluate``'s ``capacity`` and ``transition_cost_s``, float for float.
    """
    lanes = counts.shape[2]
    if mode not in problem.modes:
        return np.zeros(lanes, dtype=bool), np.zeros((3, lanes)), np.zeros(lanes)
    memory = 1 if mode is Mode.DISAGGREGATED else 2  # decode, else colocated: the KV row's role
    prefill = 0 if mode is Mode.DISAGGREGATED else 2  # prefill, else colocated: the prefill row's role
    data = _lane_data(problem)
    # Classes off in every lane add only their cost of being off (evaluate's other terms are zeros there); the
    # checks and sums below run over the others, every class at once.
    live = np.flatnonzero(counts.any(axis=(1, 2)) | data.always)
    n = counts[live]  # (live class, role, lane)
    used = n.sum(axis=1)  # (live class, lane)
    has = n != 0
    eligible = data.eligible[live][:, :, None]
    size = data.size[live]
    # Integer checks and sums: exact in any order.
    ok = ~((used > size[:, None]).any(axis=0) | (n.min(axis=1) < 0).any(axis=0))
    ok &= ~(has & ~eligible).any(axis=(0, 1))  # a role the class may not take
    for k, i in data.fixed:
        ok &= counts[k, i] == data.size[k]
    served = has & eligible
    totals = n.sum(axis=0)  # (role, lane); a lane with a role its class may not take is refused above
    gpus_by_class = used * data.tp[live][:, None]
    ok &= ~(gpus_by_class.sum(axis=0) > problem.max_gpus)
    starts = (used[data.pauses[live]] > 0).any(axis=0)
    if problem.pools:
        position = np.full(len(problem.classes), -1)  # a class's index among the live ones
        position[live] = np.arange(len(live))
        for _, _, limit, members in problem.node_block_rows:
            counted = position[list(members)] if members else position[:0]
            counted = counted[counted >= 0]  # the row's classes not off in every lane
            if len(counted):
                ok &= ~(gpus_by_class[counted].sum(axis=0) > limit)
    active = MODE_ROLES[mode]
    for i, role in enumerate(ROLES):
        ok &= (totals[i] > 0) == (role in active)
    # Float sums in class order, as evaluate adds them (_sum_rows adds row after row; a 0.0 where evaluate adds
    # nothing leaves a sum as it is: a sum that starts at 0.0 never becomes -0.0).
    with np.errstate(all="ignore"):  # a lane evaluate would refuse first may compute an inf·0 the answer drops
        cap = _sum_rows(data.weight[live][:, :, None] * n, lanes)  # w·0 = 0.0 where evaluate adds nothing
        kv = _sum_rows(data.kv_bytes[live][:, None] * n[:, memory], lanes)
        prefill_rate = _sum_rows(data.prefill_rate[live][:, None] * n[:, prefill], lanes)
        # Each class's role terms then its cost of being off; a class off in every lane has the latter only.
        is_live = np.zeros(len(problem.classes), dtype=bool)
        is_live[live] = True
        first = np.concatenate(([0], np.cumsum(np.where(is_live, 4, 1))))  # each class's first row
        rows = np.empty((first[-1], lanes))
        rows[first[:-1][~is_live]] = data.off_cost_all[~is_live][:, None]
        at = first[live]
        for i in range(3):
            rows[at + i] = np.where(served[:, i], data.cost[live, i][:, None], 0.0) * n[:, i]
        rows[at + 3] = data.off_cost[live][:, None] * (size[:, None] - used)
        transition_s = _sum_rows(rows, lanes)
    ok &= ~((kv < problem.kv_required_bytes) | (prefill_rate < problem.min_prefill_tokens_per_s))  # as evaluate
    return ok, cap, np.where(starts, transition_s + problem.admission_pause_s, transition_s)


def _sum_rows(rows: np.ndarray, lanes: int) -> np.ndarray:
    """The sum over the first axis, from zeros and row after row in order, as evaluate's running sums add."""
    total = np.zeros(rows.shape[1:] if rows.ndim > 1 else lanes)
    for row in rows:
        total += row
    return total


class _LaneData(NamedTuple):
    """A problem's classes as arrays, for :func:`evaluate_lanes` (class order; roles in ROLES order)."""

    size: np.ndarray  # (class,) int
    tp: np.ndarray  # (class,) int
    eligible: np.ndarray  # (class, role) bool
    weight: np.ndarray  # (class, role) float, 0 where the class may not take the role (finite: never inf·0)
    cost: np.ndarray  # (class, role) float, 0 where the class may not take the role
    off_cost: np.ndarray  # (class,) float: cost[None]
    off_cost_all: np.ndarray  # (class,) float: cost[None]·size, a class's cost when off in every lane
    always: np.ndarray  # (class,) bool: fixed, or KV or prefill rate not finite (evaluated even when off)
    kv_bytes: np.ndarray  # (class,) float
    prefill_rate: np.ndarray  # (class,) float
    pauses: np.ndarray  # (class,) bool
    fixed: tuple[tuple[int, int], ...]  # (class, role index) of each fixed class with a current role


def _per_role(classes: Sequence[SlotClass], value: Callable[[SlotClass, Role], float]) -> np.ndarray:
    """A (class, role) float array of ``value`` where the class may take the role, 0.0 elsewhere."""
    return np.array([[value(c, r) if r in c.eligible else 0.0 for r in ROLES] for c in classes], float).reshape(-1, 3)


def _lane_data(problem: ClassProblem) -> _LaneData:
    """:class:`_LaneData` of ``problem``, made once per problem (a sweep and a descent evaluate it many times)."""
    made: _LaneData | None = problem.__dict__.get("_lane_data")
    if made is not None:
        return made
    classes = problem.classes
    made = _LaneData(
        size=np.array([c.size for c in classes], dtype=np.int64),
        tp=np.array([c.tp for c in classes], dtype=np.int64),
        eligible=np.array([[r in c.eligible for r in ROLES] for c in classes], dtype=bool).reshape(-1, 3),
        weight=_per_role(classes, lambda c, r: c.weight.get(r, 0.0)),
        cost=_per_role(classes, lambda c, r: c.cost[r]),
        off_cost=np.array([c.cost[None] for c in classes], dtype=float),
        off_cost_all=np.array([c.cost[None] * c.size for c in classes], dtype=float),
        always=np.array(
            [c.fixed or not math.isfinite(c.kv_bytes + c.prefill_tokens_per_s) for c in classes], dtype=bool
        ),
        kv_bytes=np.array([c.kv_bytes for c in classes], dtype=float),
        prefill_rate=np.array([c.prefill_tokens_per_s for c in classes], dtype=float),
        pauses=np.array([c.pauses_admission for c in classes], dtype=bool),
        fixed=tuple(
            (k, _ROLE_INDEX[c.current_role]) for k, c in enumerate(classes) if c.fixed and c.current_role is not None
        ),
    )
    object.__setattr__(problem, "_lane_data", made)  # ClassProblem is frozen; this is a cache, not a field
    return made


_LANES_FROM = 48
"""Usable workers from which :func:`ratio_sweep` runs in numpy lanes: below, numpy's fixed cost per class outweighs
the loop it saves (measured on bench/plan_latency.py's states at 64 and 256 GPUs; both paths give the same answer)."""


LaneScorer = Callable[[Mode, np.ndarray, np.ndarray, np.ndarray], "np.ndarray | None"]
"""``rescore``'s objective for many candidates of one mode at once: given their capacities (a (role, lane) array in
:data:`~pearl_sched.problem.ROLES` order), transition costs and counts (the (class, role, lane) array they come
from, for a model that reads each configuration's workers), each lane's ``rescore(solution).objective_s``,
float for float; or None where it cannot say (:func:`ratio_sweep` then rescores solution by solution)."""


LaneFilter = Callable[[Mode, np.ndarray], np.ndarray]
"""Which candidates of one mode a sweep still scores, given their target counts (a (role, lane) array in
:data:`~pearl_sched.problem.ROLES` order): a mask over the lanes. The caller's promise: a candidate it drops scores
above the best it already holds by more than the sweep's tie tolerance can bridge (see :func:`ratio_sweep`)."""


_LANES_SCORED_FROM = 24
"""Usable workers from which :func:`ratio_sweep` with ``rescore_lanes`` runs in lanes: below, the scalar sweep is as
fast or faster (bench/plan_latency.py's mixed-size states: the same at 14-31 workers, 3× faster at 4-11)."""


def ratio_sweep(
    problem: ClassProblem,
    rescore: Callable[[ClassSolution], ClassSolution] | None = None,
    rescore_lanes: LaneScorer | None = None,
    keep: LaneFilter | None = None,
) -> ClassSolution | None:
    """``enumerate_configurations(problem, window=<every split>, rescore=rescore)``, its assignments made at once.

    PEARL's sweep at every split of the usable workers, without the fallbacks to fewer workers (the planner's
    ranking by ``predict`` runs one per size combination, docs/formulation.md); the same candidates in the
    same order, so the same answer. From :data:`_LANES_FROM` usable workers, or from :data:`_LANES_SCORED_FROM`
    with ``rescore_lanes``, the candidates are assigned and evaluated in numpy lanes (:func:`assign_many`,
    :func:`evaluate_lanes`); with ``rescore_lanes`` they are ranked on its objectives and only the winner is
    built and rescored as a solution.

    ``keep`` (the planner's ranking, docs/formulation.md) drops candidates before they are assigned: those whose
    proven lower bound is above a score the caller already holds, with a margin of 1e-12 per candidate on top of
    its own tolerance. The best of the rest is then the sweep's best wherever that best is at or below the
    caller's score (the winner keeps a candidate only when it beats the one held by more than 1e-12, and a
    dropped candidate can hold the lead only among scores within that margin of the bound, all above the
    caller's); where it is above, the answer may be another candidate above it, or None.
    """
    return _sweep(problem, usable_workers(problem), rescore, rescore_lanes, keep)


def _sweep(
    problem: ClassProblem,
    n: int,
    rescore: Callable[[ClassSolution], ClassSolution] | None = None,
    rescore_lanes: LaneScorer | None = None,
    keep: LaneFilter | None = None,
) -> ClassSolution | None:
    """``_best_of(problem, n, None, rescore, keep)``: :func:`ratio_sweep`'s search with ``n`` workers."""
    lanes_scored = rescore is not None and rescore_lanes is not None and n >= _LANES_SCORED_FROM
    if n < _LANES_FROM and not lanes_scored:
        return _best_of(problem, n, None, rescore, keep)
    modes, remaining = _candidate_lanes(problem, n)
    if keep is not None and modes:
        kept = _kept(keep, modes, np.array([remaining[role] for role in ROLES], dtype=np.int64))
        modes = [m for m, k in zip(modes, kept.tolist(), strict=True) if k]
        remaining = {role: targets[kept] for role, targets in remaining.items()}
    if not modes:
        return None
    counts, done = _assign_lanes(problem, remaining)
    if lanes_scored:
        assert rescore is not None and rescore_lanes is not None
        objectives: list[float | None] = [None] * len(modes)
        for mode in (Mode.COLOCATED, Mode.DISAGGREGATED):
            lanes = np.flatnonzero((np.array([m is mode for m in modes], dtype=bool)) & done)
            if not lanes.size:
                continue
            ok, cap, transition_s = evaluate_lanes(problem, mode, counts[:, :, lanes])
            scores = (
                rescore_lanes(mode, cap[:, ok], transition_s[ok], counts[:, :, lanes][:, :, ok])
                if ok.any()
                else np.zeros(0)
            )
            if scores is None:  # the scorer cannot rank these lanes: candidate by candidate, as below
                break
            for j, objective_s in zip(lanes[ok].tolist(), scores.tolist(), strict=True):
                objectives[j] = objective_s
        else:
            winner, best_s = -1, math.inf
            for j, objective_s in enumerate(objectives):  # the loop below, on the objectives alone
                if objective_s is not None and (winner < 0 or objective_s < best_s - 1e-12):
                    winner, best_s = j, objective_s
            if winner < 0:
                return None
            solution = evaluate(problem, modes[winner], _counts(counts, winner))
            assert solution is not None  # evaluate_lanes found it feasible, and the two agree
            return rescore(solution)
    evaluated: list[ClassSolution | None] = [None] * len(modes)
    for mode in (Mode.COLOCATED, Mode.DISAGGREGATED):
        lane_list = [j for j, m in enumerate(modes) if m is mode and done[j]]
        for j, solution in zip(lane_list, evaluate_many(problem, mode, counts[:, :, lane_list]), strict=True):
            evaluated[j] = solution
    best: ClassSolution | None = None
    for solution in evaluated:
        if solution is not None and rescore is not None:
            solution = rescore(solution)
        if solution is not None and (best is None or solution.objective_s < best.objective_s - 1e-12):
            best = solution
    return best


def _kept(keep: LaneFilter, modes: Sequence[Mode], targets: np.ndarray) -> np.ndarray:
    """``keep``'s mask over candidates of either mode (``targets``: their (role, candidate) counts)."""
    kept = np.ones(len(modes), dtype=bool)
    for mode in (Mode.COLOCATED, Mode.DISAGGREGATED):
        lanes = np.flatnonzero(np.array([m is mode for m in modes], dtype=bool))
        if lanes.size:
            kept[lanes] = keep(mode, targets[:, lanes])
    return kept


def _candidate_lanes(problem: ClassProblem, n: int) -> tuple[list[Mode], dict[Role, np.ndarray]]:
    """``_candidates(problem, n, None)`` as lanes: each candidate's mode, and each role's target count per lane."""
    colocated = Mode.COLOCATED in problem.modes and n >= 1
    splits = (
        np.arange(1, n, dtype=np.int64) if Mode.DISAGGREGATED in problem.modes and n >= 2 else np.zeros(0, np.int64)
    )
    head = np.array([n] if colocated else [], dtype=np.int64)
    zero = np.zeros(len(head), dtype=np.int64)
    remaining = {
        Role.PREFILL: np.concatenate([zero, splits]),
        Role.DECODE: np.concatenate([zero, n - splits]),
        Role.COLOCATED: np.concatenate([head, np.zeros(len(splits), dtype=np.int64)]),
    }
    return [Mode.COLOCATED] * len(head) + [Mode.DISAGGREGATED] * len(splits), remaining


def enumerate_configurations(
    problem: ClassProblem,
    window: int | None = None,
    rescore: Callable[[ClassSolution], ClassSolution] | None = None,
) -> ClassSolution | None:
    """The best candidate of PEARL's enumeration, scored with the exact objective.

    ``window=None`` tries every split N_P = 1..N−1 (PEARL's search). With a window, only the splits within
    ``window`` of the balance point (where the prefill pool stops being the slower one) are tried: O(window)
    instead of O(N), which is what the MILP's start solution needs. ``rescore``, when given, maps each feasible
    candidate to the solution it is ranked (and returned) as: the planner's option of ranking by the predictor's
    own ``predict`` (docs/formulation.md, "Ranking by predict").
    """
    usable = usable_workers(problem)
    best = _best_of(problem, usable, window, rescore) if window is not None else _sweep(problem, usable, rescore)
    # Using every worker can break the budget (wide TP groups) or leave no split whose pools meet KV and prefill
    # needs; PEARL's search has no answer then, but fewer workers may: the full search tries them, largest first
    # (each count's splits in numpy lanes from _LANES_FROM workers, as ratio_sweep: the same answer).
    for n in range(usable - 1, 0, -1):
        if best is not None or window is not None:
            break
        best = _sweep(problem, n, rescore)
    if best is None and window is None and _search_size(problem) <= _BRUTE_FORCE_LIMIT:
        best = brute_force(problem)  # PEARL's slot order can miss a fit (the one wide-TP slot with enough KV)
    return best


_BRUTE_FORCE_LIMIT = 20_000
"""Configurations up to which the no-solver search, having found nothing, tries them all (exact)."""


def _search_size(problem: ClassProblem) -> int:
    size = 2
    for c in problem.classes:
        k = len(c.eligible)
        size *= math.comb(c.size + k, k)  # count vectors of k roles summing to at most n_k
        if size > _BRUTE_FORCE_LIMIT:
            break
    return size


def _best_of(
    problem: ClassProblem,
    n: int,
    window: int | None,
    rescore: Callable[[ClassSolution], ClassSolution] | None = None,
    keep: LaneFilter | None = None,
) -> ClassSolution | None:
    """The best candidate using ``n`` workers (of those ``keep`` keeps, :func:`ratio_sweep`)."""
    best: ClassSolution | None = None
    candidates = _candidates(problem, n, window)
    if keep is not None and candidates:
        wanted = np.array([[t.get(role, 0) for _, t in candidates] for role in ROLES], dtype=np.int64)
        kept = _kept(keep, [mode for mode, _ in candidates], wanted)
        candidates = [c for c, k in zip(candidates, kept.tolist(), strict=True) if k]
    order = _fill_order(problem)
    for mode, targets in candidates:
        counts = assign(problem, targets, order)
        if counts is None:
            continue
        solution = evaluate(problem, mode, counts)
        if solution is not None and rescore is not None:
            solution = rescore(solution)
        if solution is not None and (best is None or solution.objective_s < best.objective_s - 1e-12):
            best = solution
    return best


def _candidates(problem: ClassProblem, n: int, window: int | None) -> list[tuple[Mode, dict[Role, int]]]:
    """The targets PEARL's search tries with ``n`` workers: colocated, then each split within ``window``."""
    candidates: list[tuple[Mode, dict[Role, int]]] = []
    if Mode.COLOCATED in problem.modes and n >= 1:
        candidates.append((Mode.COLOCATED, {Role.COLOCATED: n}))
    if Mode.DISAGGREGATED in problem.modes and n >= 2:
        splits = range(1, n)
        if window is not None:
            centre = _balance_point(problem, n)
            splits = range(max(1, centre - window), min(n - 1, centre + window) + 1)
        candidates.extend((Mode.DISAGGREGATED, {Role.PREFILL: p, Role.DECODE: n - p}) for p in splits)
    return candidates


def _balance_point(problem: ClassProblem, n: int) -> int:
    """Smallest N_P whose prefill pool is no slower than the decode pool of the other N − N_P workers.

    Capacities are in reference workers; a binary search, since the prefill time falls and the decode time
    rises with N_P.
    """
    prefill, decode = problem.terms.prefill, problem.terms.decode
    lo, hi = 1, n - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if prefill.time_s(mid) <= decode.time_s(n - mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
