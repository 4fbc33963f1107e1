"""The planner's reliability properties over ten thousand random states (docs/reliability.md, "Planner").

For every state, on every installed backend:

- a plan whenever some configuration fits the budget (checked against an exhaustive oracle that knows only
  the state and the documented rules, tests/plan_states.py);
- when there is none, the reported minimum GPUs is exact: the oracle fits at that number and not one below;
  a "kv"/"prefill" diagnosis names a requirement whose removal makes the cluster fit;
- the re-plan fixed point: planning the state the plan's actions produce asks for no action;
- identical results across repeated runs (the fingerprint), on every tenth state;
- only documented exceptions: ``InfeasiblePlanError`` (a documented binding constraint) or ``SolverError``.

The bulk runs on the default backend and PEARL's enumeration (fast); each other backend gets a subset, sized so
the whole module stays within a few minutes on two cores. ``PEARL_SCHED_PROPERTY_SEED`` changes the seed for
exploration; CI runs the fixed one.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from pearl_sched import InfeasiblePlanError, Role, Zone, plan, solvers
from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.errors import SolverError
from pearl_sched.planner import _classify
from pearl_sched.solvers import Capabilities, LinearModel, SolveResult, available_backends, solve_class_problem
from pearl_sched.solvers.cpsat import CpSatBackend
from pearl_sched.state import ClusterState
from pearl_sched.transition import apply_actions

from .builders import BINDING_CONSTRAINTS, Slot, state, workload
from .plan_states import MODEL, Feasibility, feasibility, random_state

_SEED = int(os.environ.get("PEARL_SCHED_PROPERTY_SEED", "20261201"))
_STATES = {  # backend → states per run (10,000 in all when every backend is installed)
    "highs": 5_700,
    "enumeration": 3_000,
    "cpsat": 300,
    "ortools-highs": 300,
    "pulp-highs": 300,
    "ortools-scip": 250,
    "pulp-cbc": 150,
}
# PEARL's no-solver search is exhaustive only up to 20,000 configurations (docs/solvers.md): beyond, it may
# miss a fit, so "never refused" and "exact minimum" are checked on the solver backends only.
_HEURISTIC = {"enumeration"}


@dataclass
class _Tally:
    states: int = 0
    plans: int = 0
    refused: int = 0
    failures: list[str] = field(default_factory=list)


def _check(s: ClusterState, backend: str, index: int, tally: _Tally, *, repeat: bool) -> None:
    oracle = feasibility(s)
    budget = s.budget.max_gpus
    tally.states += 1

    def fail(what: str) -> None:
        tally.failures.append(f"state {index} ({backend}): {what}")

    try:
        p = plan(s, MODEL, backend=backend, time_limit_s=30.0)
    except InfeasiblePlanError as exc:
        tally.refused += 1
        if exc.binding_constraint not in BINDING_CONSTRAINTS:
            fail(f"undocumented binding constraint {exc.binding_constraint!r}")
        if backend in _HEURISTIC:
            return
        if oracle.fits(budget):
            fail(f"refused a budget of {budget} that fits {oracle.min_gpus} GPUs: {exc}")
        elif exc.binding_constraint == "budget":
            if exc.min_gpus_needed != oracle.min_gpus:
                fail(f"reported minimum {exc.min_gpus_needed}, true minimum {oracle.min_gpus}: {exc}")
        elif oracle.min_gpus is not None:
            fail(f"said no budget helps, but {oracle.min_gpus} GPUs fit: {exc}")
        else:
            _check_binding(exc, oracle, fail)
        return
    except SolverError as exc:  # documented: a backend failure with no fallback
        if oracle.fits(budget) and backend not in _HEURISTIC:
            fail(f"SolverError on a feasible budget: {exc}")
        return
    except Exception as exc:  # anything else is a bug
        fail(f"undocumented {type(exc).__name__}: {exc}")
        return
    tally.plans += 1
    if not oracle.fits(budget) or p.gpus_used > budget:
        fail(f"a plan using {p.gpus_used} GPUs where the oracle fits none within {budget}")
    try:
        after = apply_actions(s, p.actions)
        again = plan(after, MODEL, current=p, backend=backend, time_limit_s=30.0)
    except Exception as exc:
        fail(f"re-planning the applied state raised {type(exc).__name__}: {exc}")
        return
    if again.actions:
        fail(f"not a fixed point: {p.decision.reason!r} then {again.decision.reason!r}")
    if repeat and plan(s, MODEL, backend=backend, time_limit_s=30.0).fingerprint() != p.fingerprint():
        fail("a repeated run gave another plan")
    if repeat and backend not in ("highs", *_HEURISTIC) and set(p.solver.status.split("/")) <= {"optimal"}:
        reference = plan(s, MODEL, backend="highs", time_limit_s=30.0)
        if p.objective_s > reference.objective_s + 1e-9 * abs(reference.objective_s):
            fail(f"called optimal at {p.objective_s}, HiGHS found {reference.objective_s}")


def _check_binding(exc: InfeasiblePlanError, oracle: Feasibility, fail: Callable[[str], None]) -> None:
    relaxed = {
        "kv_capacity": oracle.min_gpus_without_kv is not None,
        "prefill_capacity": oracle.min_gpus_without_prefill is not None,
        "kv_and_prefill_capacity": oracle.min_gpus_without_kv is None and oracle.min_gpus_without_prefill is None,
    }
    if exc.binding_constraint in relaxed and not relaxed[exc.binding_constraint]:
        fail(f"named {exc.binding_constraint!r}, which is not what binds: {exc}")


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(_STATES))
def test_planner_properties_on_random_states(backend: str) -> None:
    if backend != "enumeration" and backend not in available_backends():
        pytest.skip(f"{backend} is not installed")  # the install's extras decide; CI installs them all
    rng = np.random.default_rng([_SEED, list(_STATES).index(backend)])
    tally = _Tally()
    for index in range(_STATES[backend]):
        _check(random_state(rng, max_slots=6), backend, index, tally, repeat=index % 10 == 0)
    assert tally.states == _STATES[backend]
    assert 0.2 < tally.plans / tally.states < 0.9, "the generator should give both plans and refusals"
    assert not tally.failures, f"{len(tally.failures)} of {tally.states} states failed:\n" + "\n".join(
        tally.failures[:10]
    )


def test_a_feasible_budget_that_needs_new_and_borrowed_gpus_at_once_is_planned() -> None:
    # Nothing serves yet; the batch's KV cache (1024 x 2400 tokens x 128 KiB, ~300 GiB) needs three H200s
    # (~115 GiB each), so the only plan uses the dedicated slot, the new preemptible one and a borrowed one.
    load = workload(unfinished=1024, batch_size=1024, mean_context_tokens=2400.0)
    s = state(
        [Slot(Zone.DEDICATED), Slot(Zone.PREEMPTIBLE), Slot(Zone.OVERLAP, reclaim_in_s=900.0)], max_gpus=3, load=load
    )
    assert feasibility(s).min_gpus == 3
    p = plan(s, MODEL)
    assert p.gpus_used == 3
    assert p.decision.expanded and p.decision.borrowing


def test_kv_and_prefill_both_short_name_both() -> None:
    # Two H200s hold ~230 GiB of KV and prefill ~91k tokens/s; the batch needs ~373 GiB and 100k tokens/s:
    # neither requirement can be met alone, so neither the split nor one of them is to blame.
    load = workload(unfinished=1024, batch_size=1024, mean_context_tokens=3051.0, min_prefill_tokens_per_s=100_000.0)
    s = state([Slot(role=Role.COLOCATED), Slot(role=Role.COLOCATED)], load=load)
    oracle = feasibility(s)
    assert oracle.min_gpus is None and oracle.min_gpus_without_kv is None and oracle.min_gpus_without_prefill is None
    with pytest.raises(InfeasiblePlanError) as info:
        plan(s, MODEL)
    assert info.value.binding_constraint == "kv_and_prefill_capacity"
    assert "GiB of KV cache" in str(info.value) and "prefill tokens/s" in str(info.value)
    assert info.value.min_gpus_needed is None


class _BrokenBackend:
    """A fake backend whose solver package fails the way PuLP's IndexError did."""

    name = "fake-broken"
    extra = None
    capabilities = Capabilities(supports_hint=False, deterministic=True, integer_coefficients_only=False)

    @classmethod
    def is_available(cls) -> bool:
        return True

    def solve(self, model: LinearModel, *, time_limit_s: float) -> SolveResult:
        raise IndexError("list index out of range")


def test_a_backend_failure_is_a_solver_error_with_the_enumeration_as_fallback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(solvers.BACKENDS, "fake-broken", _BrokenBackend)  # type: ignore[arg-type]
    s = state([Slot(role=Role.PREFILL), Slot(role=Role.DECODE), Slot()], load=workload(unfinished=64))
    with caplog.at_level(logging.WARNING, logger="pearl_sched.planner"):
        p = plan(s, MODEL, backend="fake-broken")
    assert "solver-error-fallback-enumeration" in p.solver.status
    assert p.objective_s == plan(s, MODEL, backend="enumeration").objective_s
    assert any("IndexError" in r.getMessage() for r in caplog.records)
    with pytest.raises(SolverError, match=r"fake-broken.*IndexError"):
        solve_class_problem(
            _classify(s, MODEL, TransitionCosts(), PolicyConfig()).base, _BrokenBackend(), time_limit_s=1.0
        )


def test_cpsat_scales_an_extreme_model_inside_int64_and_reports_the_rounding() -> None:
    pytest.importorskip("ortools")
    # Coefficients over 16 orders of magnitude and a continuous column up to 1e12: the old fixed scaling
    # overflowed 64 bits here; the answer must match HiGHS and be called feasible (rounded), not optimal.
    model = LinearModel()
    x = model.add_var("x", 0, 40, integer=True, cost=1e-8)
    y = model.add_var("y", 0, 3, integer=True, cost=1e8)
    t = model.add_var("t", 0, 1e12, integer=False, cost=3.3)
    model.add_row({x: 1.0, y: 2.0}, lo=3.0)
    model.add_row({t: 1.0, x: -1e7}, lo=-1e6)
    result = CpSatBackend().solve(model, time_limit_s=10.0)
    assert result.has_solution and result.rounding_error > 0
    assert result.status == "feasible" and result.bound == -math.inf and result.rounded_optimal
    assert result.values[0] == 3 and result.values[1] == 0
    assert result.values[2] == pytest.approx(29e6, rel=1e-5)


def test_the_fingerprint_ignores_the_solvers_bound() -> None:
    p = plan(state([Slot(role=Role.COLOCATED), Slot()], load=workload(unfinished=64)), MODEL)
    noisy = p.model_copy(update={"solver": p.solver.model_copy(update={"bound_s": (p.solver.bound_s or 0) - 1e-13})})
    assert noisy.fingerprint() == p.fingerprint()
    other = p.model_copy(update={"objective_s": p.objective_s + 1.0})
    assert other.fingerprint() != p.fingerprint()
