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
from collections.abc import Callable

from pearl_sched.problem import ROLES, ClassProblem, ClassSolution, Counts, PoolLedger, brute_force, evaluate
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
    best = _best_of(problem, usable, window, rescore)
    # Using every worker can break the budget (wide TP groups) or leave no split whose pools meet KV and prefill
    # needs; PEARL's search has no answer then, but fewer workers may: the full search tries them, largest first.
    for n in range(usable - 1, 0, -1):
        if best is not None or window is not None:
            break
        best = _best_of(problem, n, None, rescore)
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
) -> ClassSolution | None:
    """The best candidate using ``n`` workers."""
    best: ClassSolution | None = None
    candidates: list[tuple[Mode, dict[Role, int]]] = []
    if Mode.COLOCATED in problem.modes and n >= 1:
        candidates.append((Mode.COLOCATED, {Role.COLOCATED: n}))
    if Mode.DISAGGREGATED in problem.modes and n >= 2:
        splits = range(1, n)
        if window is not None:
            centre = _balance_point(problem, n)
            splits = range(max(1, centre - window), min(n - 1, centre + window) + 1)
        candidates.extend((Mode.DISAGGREGATED, {Role.PREFILL: p, Role.DECODE: n - p}) for p in splits)
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
