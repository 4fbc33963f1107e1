"""bench/plan_latency.py's --breakdown: what it counts, and that it leaves the planner and HiGHS backend as found."""

from __future__ import annotations

import pytest

pytest.importorskip("highspy", reason="the highs extra (highspy) is not installed")

from bench import plan_latency as bench
from pearl_sched import planner
from pearl_sched.solvers import highs


@pytest.mark.parametrize("mixed", [False, True], ids=["sizes=1", "mixed"])
def test_breakdown_counts_the_solves_of_a_call_and_restores_what_it_wraps(mixed: bool) -> None:
    state = bench.mixed_cluster(16) if mixed else bench.cluster(16, 2)
    model, costs = (bench.MIXED_MODEL, bench.MIXED.costs) if mixed else (bench.MODEL, None)
    solve, solve_class_problem = highs.HighsBackend.solve, planner.solve_class_problem
    parts = bench.breakdown(state, 2, model, costs, None)
    assert highs.HighsBackend.solve is solve
    assert planner.solve_class_problem is solve_class_problem
    # A call solves at least the base problem; each MILP runs HiGHS at least once unless a bound skips every mode.
    assert parts["milps"] >= 1
    assert parts["highs_runs"] >= 1
    assert parts["highs_cpu_ms"] > 0 and parts["largest_run_ms"] > 0
    assert parts["highs_cpu_ms"] + parts["other_cpu_ms"] == pytest.approx(parts["cpu_ms"])
