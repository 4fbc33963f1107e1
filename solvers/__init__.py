"""Solver backends for the class-level planning MILP, and PEARL's enumeration.

The problem they solve (``ClassProblem``, ``ClassSolution``, the exact ``evaluate`` and the brute-force oracle)
is core vocabulary in :mod:`pearl_sched.problem`; this package depends on it, never the other way round.
The core uses only the registry below and the solve entry points, ``solve_class_problem`` (the MILP),
``enumerate_configurations`` (PEARL's search) and ``ratio_sweep`` (PEARL's sweep at every split, for the ranking by
``predict``), with the ranking's ``evaluate_lanes`` (``evaluate`` at many configurations at once) and
``predict_bound_s`` (its proven bound). ``get_backend(name)`` returns a backend;
``available_backends()`` lists those whose packages are installed.
``DEFAULT_BACKEND`` was chosen by measurement (``bench/plan_latency.py``; docs/solvers.md): the fastest
backend whose repeated solves were identical.
"""

from __future__ import annotations

from pearl_sched.errors import SolverUnavailableError
from pearl_sched.solvers.base import Backend, Capabilities, LinearModel, SolveResult
from pearl_sched.solvers.cpsat import CpSatBackend
from pearl_sched.solvers.enumeration import enumerate_configurations, evaluate_lanes, ratio_sweep
from pearl_sched.solvers.formulation import (
    CutPool,
    MilpOutcome,
    predict_bound_s,
    predict_lane_filter,
    solve_class_problem,
)
from pearl_sched.solvers.highs import HighsBackend
from pearl_sched.solvers.pulp_backend import PulpCbcBackend, PulpHighsBackend
from pearl_sched.solvers.pywraplp import OrtoolsHighsBackend, ScipBackend

BACKENDS: dict[str, type[Backend]] = {
    cls.name: cls
    for cls in (
        HighsBackend,
        CpSatBackend,
        ScipBackend,
        OrtoolsHighsBackend,
        PulpHighsBackend,
        PulpCbcBackend,
    )
}
DEFAULT_BACKEND = "highs"
FALLBACK_ORDER = ("highs", "ortools-scip", "cpsat", "pulp-highs", "pulp-cbc", "ortools-highs")


def available_backends() -> list[str]:
    """Names of the backends whose packages import here, in registry order."""
    return [name for name, cls in BACKENDS.items() if cls.is_available()]


def get_backend(name: str = "auto") -> Backend:
    """A backend instance. ``"auto"`` is the default backend, or the first installed one in fallback order."""
    if name == "auto":
        for candidate in (DEFAULT_BACKEND, *FALLBACK_ORDER):
            if BACKENDS[candidate].is_available():
                return BACKENDS[candidate]()
        raise SolverUnavailableError("auto", "highs")
    try:
        cls = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown solver backend {name!r}; known: {sorted(BACKENDS)} or 'enumeration'") from None
    if not cls.is_available():
        raise SolverUnavailableError(name, cls.extra)
    return cls()


__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "Backend",
    "Capabilities",
    "CutPool",
    "LinearModel",
    "MilpOutcome",
    "SolveResult",
    "available_backends",
    "enumerate_configurations",
    "evaluate_lanes",
    "get_backend",
    "predict_bound_s",
    "predict_lane_filter",
    "ratio_sweep",
    "solve_class_problem",
]
