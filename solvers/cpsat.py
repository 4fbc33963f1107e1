"""OR-Tools CP-SAT.

CP-SAT solves integer programs only, so the model is made integral here: continuous columns become integers
in units of ``resolution`` (1 ms for a makespan in seconds) and each row and the objective are scaled to
integer coefficients. The largest relative rounding is reported in ``SolveResult.rounding_error``. One
worker and a fixed seed make it deterministic (with 8 workers repeated runs returned different optima).
"""

from __future__ import annotations

import importlib.util
import math
import time
from typing import ClassVar

from pearl_sched.errors import SolverUnavailableError
from pearl_sched.solvers.base import Capabilities, LinearModel, SolveResult, SolveStatus

_TARGET_MIN_COEF = 1e6
_MAX_COEF = 1e13


class CpSatBackend:
    """CP-SAT with one search worker and seed 0."""

    name: ClassVar[str] = "cpsat"
    extra: ClassVar[str | None] = None
    capabilities: ClassVar[Capabilities] = Capabilities(
        supports_hint=True, deterministic=True, integer_coefficients_only=True
    )

    def __init__(self, resolution: float = 1e-3) -> None:
        """Scale coefficients to integers with at most ``resolution`` relative rounding error."""
        self.resolution = resolution

    @classmethod
    def is_available(cls) -> bool:
        """True when OR-Tools imports."""
        return importlib.util.find_spec("ortools") is not None

    def solve(self, model: LinearModel, *, time_limit_s: float) -> SolveResult:
        """Solve ``model`` with CP-SAT after scaling it to integer coefficients (``rounding_error`` says how much)."""
        try:
            from ortools.sat.python import cp_model
        except ImportError:
            raise SolverUnavailableError(self.name, self.extra) from None
        start = time.perf_counter()
        unit = [1.0 if is_int else self.resolution for is_int in model.integer]
        cp = cp_model.CpModel()
        columns = []
        for j in range(model.num_vars):
            if not (math.isfinite(model.lb[j]) and math.isfinite(model.ub[j])):
                raise ValueError(f"CP-SAT needs finite bounds; {model.names[j]} has [{model.lb[j]}, {model.ub[j]}]")
            low = math.floor(model.lb[j] / unit[j] + 1e-9)
            high = math.ceil(model.ub[j] / unit[j] - 1e-9)
            columns.append(cp.new_int_var(low, high, model.names[j]))
        worst = 0.0
        for row, lo, hi in zip(model.rows, model.row_lo, model.row_hi, strict=True):
            scaled = {j: a * unit[j] for j, a in row.items()}
            scale = _scale_for(scaled.values())
            ints = {j: round(a * scale) for j, a in scaled.items()}
            worst = max(worst, _relative_rounding(scaled, ints, scale))
            expr = sum(c * columns[j] for j, c in ints.items())
            if math.isfinite(lo):
                cp.add(expr >= round(lo * scale))
            if math.isfinite(hi):
                cp.add(expr <= round(hi * scale))
        objective = {j: c * unit[j] for j, c in enumerate(model.cost) if c != 0.0}
        obj_scale = _scale_for(objective.values())
        obj_ints = {j: round(c * obj_scale) for j, c in objective.items()}
        worst = max(worst, _relative_rounding(objective, obj_ints, obj_scale))
        cp.minimize(sum(c * columns[j] for j, c in obj_ints.items()))
        if model.hint is not None:
            for j, v in enumerate(model.hint):
                cp.add_hint(columns[j], round(v / unit[j]))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = 0
        solver.parameters.max_time_in_seconds = float(time_limit_s)
        status = solver.solve(cp)
        wall = time.perf_counter() - start
        if status == cp_model.INFEASIBLE:
            return SolveResult("infeasible", (), math.inf, math.inf, wall, worst)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return SolveResult("no_solution", (), math.inf, -math.inf, wall, worst, solver.status_name(status))
        values = tuple(solver.value(col) * unit[j] for j, col in enumerate(columns))
        objective_value = model.offset + sum(c * v for c, v in zip(model.cost, values, strict=True))
        bound = model.offset + solver.best_objective_bound / obj_scale
        kind: SolveStatus = "optimal" if status == cp_model.OPTIMAL else "feasible"
        return SolveResult(kind, values, objective_value, bound, wall, worst)


def _scale_for(coefficients: object) -> float:
    """A power of ten that makes the smallest non-zero |coefficient| about 1e6, capped to avoid overflow."""
    magnitudes = [abs(a) for a in coefficients if a != 0.0]  # type: ignore[attr-defined]
    if not magnitudes:
        return 1.0
    scale = 10.0 ** math.ceil(math.log10(_TARGET_MIN_COEF / min(magnitudes)))
    while max(magnitudes) * scale > _MAX_COEF and scale > 1e-30:
        scale /= 10.0
    return scale


def _relative_rounding(exact: dict[int, float], rounded: dict[int, int], scale: float) -> float:
    worst = 0.0
    for j, a in exact.items():
        if a != 0.0:
            worst = max(worst, abs(rounded[j] / scale - a) / abs(a))
    return worst
