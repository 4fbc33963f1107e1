"""OR-Tools linear solver wrapper (pywraplp) with SCIP or HiGHS.

pywraplp with HiGHS crashed the whole process when given a start solution (measured for this project), so
that variant declares ``supports_hint=False`` and the hint is never passed to it.
"""

from __future__ import annotations

import importlib.util
import math
import time
from typing import ClassVar

from pearl_sched.errors import SolverError, SolverUnavailableError
from pearl_sched.solvers._quiet import stdout_closed
from pearl_sched.solvers.base import Capabilities, LinearModel, SolveResult, SolveStatus


class _PywraplpBackend:
    solver_id: ClassVar[str]
    extra: ClassVar[str | None] = None

    @classmethod
    def is_available(cls) -> bool:
        if importlib.util.find_spec("ortools") is None:
            return False
        from ortools.linear_solver import pywraplp

        return pywraplp.Solver.CreateSolver(cls.solver_id) is not None

    def solve(self, model: LinearModel, *, time_limit_s: float) -> SolveResult:
        try:
            from ortools.linear_solver import pywraplp
        except ImportError:
            raise SolverUnavailableError(self.name, self.extra) from None  # type: ignore[attr-defined]
        start = time.perf_counter()
        solver = pywraplp.Solver.CreateSolver(self.solver_id)
        if solver is None:
            raise SolverError(f"OR-Tools was built without {self.solver_id}")
        solver.SuppressOutput()
        inf = solver.infinity()
        columns = [
            (solver.IntVar if is_int else solver.NumVar)(
                lo if math.isfinite(lo) else -inf, hi if math.isfinite(hi) else inf, name
            )
            for name, lo, hi, is_int in zip(model.names, model.lb, model.ub, model.integer, strict=True)
        ]
        for row, lo, hi in zip(model.rows, model.row_lo, model.row_hi, strict=True):
            constraint = solver.RowConstraint(lo if math.isfinite(lo) else -inf, hi if math.isfinite(hi) else inf)
            for j, a in row.items():
                constraint.SetCoefficient(columns[j], a)
        objective = solver.Objective()
        for j, c in enumerate(model.cost):
            if c:
                objective.SetCoefficient(columns[j], c)
        objective.SetOffset(model.offset)
        objective.SetMinimization()
        solver.SetTimeLimit(max(1, int(time_limit_s * 1000)))
        params = pywraplp.MPSolverParameters()
        params.SetDoubleParam(pywraplp.MPSolverParameters.RELATIVE_MIP_GAP, 0.0)
        if model.hint is not None and self.capabilities.supports_hint:  # type: ignore[attr-defined]
            solver.SetHint(columns, list(model.hint))
        if self.solver_id == "HIGHS":  # its bundled HiGHS prints a banner on every solve
            with stdout_closed():
                status = solver.Solve(params)
        else:
            status = solver.Solve(params)
        wall = time.perf_counter() - start
        if status == pywraplp.Solver.INFEASIBLE:
            return SolveResult("infeasible", (), math.inf, math.inf, wall)
        if status not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
            return SolveResult("no_solution", (), math.inf, -math.inf, wall, message=f"status {status}")
        values = tuple(col.solution_value() for col in columns)
        kind: SolveStatus = "optimal" if status == pywraplp.Solver.OPTIMAL else "feasible"
        return SolveResult(kind, values, objective.Value(), objective.BestBound(), wall)


class ScipBackend(_PywraplpBackend):
    """SCIP through OR-Tools' pywraplp (bundled with the ortools wheel)."""

    name: ClassVar[str] = "ortools-scip"
    solver_id: ClassVar[str] = "SCIP"
    capabilities: ClassVar[Capabilities] = Capabilities(
        supports_hint=True, deterministic=True, integer_coefficients_only=False
    )


class OrtoolsHighsBackend(_PywraplpBackend):
    """HiGHS through OR-Tools' pywraplp; never given a start solution (it crashed the process)."""

    name: ClassVar[str] = "ortools-highs"
    solver_id: ClassVar[str] = "HIGHS"
    capabilities: ClassVar[Capabilities] = Capabilities(
        supports_hint=False, deterministic=True, integer_coefficients_only=False
    )
