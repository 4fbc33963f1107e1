"""Brute force = MILP on small sized class problems solved as the gates solve them: from a start solution.

plan()'s expensive MILPs are the expansion gate's, with worker sizes: new-worker classes of several sizes over
several pools, solved from the best of PEARL's enumeration, the status quo and the earlier answers, each mode's
optimum a cutoff for the next (docs/formulation.md). HiGHS's settings for them (no RENS, no root reduced-cost
heuristic; docs/solvers.md) change how it searches, never what it proves; this checks the optimum against the
exhaustive search on the random sized states of the planner's property test, from the two kinds of start the
planner gives: PEARL's enumeration and a worse feasible configuration (the first the brute force meets).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from pearl_sched.config import PolicyConfig
from pearl_sched.planner import _classify
from pearl_sched.problem import MODE_ROLES, ROLES, ClassProblem, ClassSolution, brute_force, evaluate
from pearl_sched.solvers import enumerate_configurations, get_backend, solve_class_problem

from .test_worker_sizes_properties import _SEED, COSTS, MODEL, _search_size, random_sized_state

_STATES = 120
_LIMIT = 4_000


def _first_feasible(problem: ClassProblem) -> ClassSolution | None:
    """The first feasible configuration in the brute force's order: a start far from the optimum."""
    for mode in problem.modes:
        ranges = [
            [
                counts
                for counts in itertools.product(
                    *(range(c.size + 1) if r in c.eligible and r in MODE_ROLES[mode] else range(1) for r in ROLES)
                )
                if sum(counts) <= c.size
            ]
            for c in problem.classes
        ]
        for choice in itertools.product(*ranges):
            solution = evaluate(problem, mode, choice)  # type: ignore[arg-type]
            if solution is not None:
                return solution
    return None


def test_milp_from_a_start_solution_equals_brute_force_on_small_sized_problems() -> None:
    rng = np.random.default_rng([_SEED, 13])
    backend = get_backend("highs")
    compared = 0
    failures: list[str] = []
    for index in range(_STATES):
        state = random_sized_state(rng)
        classified = _classify(state, MODEL, COSTS, PolicyConfig())
        problem = classified.base.with_classes(classified.classes)
        if not problem.pools or _search_size(problem) > _LIMIT:
            continue
        oracle = brute_force(problem)
        starts = {
            "enumeration": enumerate_configurations(problem, window=8),
            "first feasible": _first_feasible(problem),
        }
        for name, start in starts.items():
            found = solve_class_problem(problem, backend, time_limit_s=30.0, hint=start).solution
            if (oracle is None) != (found is None):
                failures.append(f"state {index}, from {name}: brute force {oracle}, MILP {found}")
            elif (
                oracle is not None
                and found is not None
                and not math.isclose(found.objective_s, oracle.objective_s, rel_tol=1e-9, abs_tol=1e-9)
            ):
                failures.append(f"state {index}, from {name}: MILP {found.objective_s} != {oracle.objective_s}")
        compared += 1
    assert not failures, "\n".join(failures[:10])
    assert compared >= _STATES // 4, f"only {compared} of {_STATES} problems were small enough to enumerate"
