"""OR-Tools CP-SAT.

CP-SAT solves integer programs only, so the model is made integral here, with scales chosen from the
instance: each continuous column (the makespan) becomes an integer in a time unit that splits its range into
at most 10⁹ steps, and each row and the objective are multiplied by the largest power of ten that keeps
Σ|coefficient|·|column bound| under 2⁵³ — so every sum CP-SAT forms is exact in 64-bit integers and in
doubles. The largest relative rounding of a coefficient is reported in ``SolveResult.rounding_error``; a
solve whose model was rounded is reported ``"feasible"`` with no bound (CP-SAT proved the optimum of the
rounded model, not of this one). One worker and a fixed seed make it deterministic (with 8 workers repeated
runs returned different optima).
"""

from __future__ import annotations

import importlib.util
import math
import time
from typing import ClassVar

from pearl_sched.errors import SolverUnavailableError
from pearl_sched.solvers.base import EXACT_ROUNDING, Capabilities, LinearModel, SolveResult, SolveStatus

_INT_LIMIT = float(2**30)  # CP-SAT returned wrong optima with coefficients near 2^40 (measured)
_STEPS = 1e6  # integer steps over a continuous column's range


class CpSatBackend:
    """CP-SAT with one search worker and seed 0."""

    name: ClassVar[str] = "cpsat"
    extra: ClassVar[str | None] = None
    capabilities: ClassVar[Capabilities] = Capabilities(
        supports_hint=True, deterministic=True, integer_coefficients_only=True
    )

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
        for j in range(model.num_vars):
            if not (math.isfinite(model.lb[j]) and math.isfinite(model.ub[j])):
                raise ValueError(f"CP-SAT needs finite bounds; {model.names[j]} has [{model.lb[j]}, {model.ub[j]}]")
        unit = [
            1.0 if is_int else _unit(lo, hi) for lo, hi, is_int in zip(model.lb, model.ub, model.integer, strict=True)
        ]
        cp = cp_model.CpModel()
        columns = []
        lows, highs, reach = [], [], []  # each integer column's bounds and largest |value|
        for j in range(model.num_vars):
            low = math.floor(model.lb[j] / unit[j] + 1e-9)
            high = math.ceil(model.ub[j] / unit[j] - 1e-9)
            columns.append(cp.new_int_var(low, high, model.names[j]))
            lows.append(low)
            highs.append(high)
            reach.append(float(max(abs(low), abs(high), 1)))
        worst = 0.0
        for row, lo, hi in zip(model.rows, model.row_lo, model.row_hi, strict=True):
            scaled = {j: a * unit[j] for j, a in row.items()}
            sides = [abs(v) for v in (lo, hi) if math.isfinite(v)]
            scale = _scale_for(scaled, reach, max(sides, default=0.0))
            ints = {j: round(a * scale) for j, a in scaled.items()}
            worst = max(worst, _relative_rounding(scaled, ints, scale))
            # Widen the sides by what rounding can move the row, so every point feasible here stays feasible
            # there (a continuous column rounds up to its next step: that moves only the side its sign points
            # to); the caller re-checks the answer exactly.
            moved = sum(abs(c - scaled[j] * scale) * reach[j] for j, c in ints.items())
            up = sum(c for j, c in ints.items() if not model.integer[j] and c > 0)
            down = sum(-c for j, c in ints.items() if not model.integer[j] and c < 0)
            expr = sum(c * columns[j] for j, c in ints.items())
            if math.isfinite(lo):
                cp.add(expr >= math.floor(lo * scale - moved - down))
            if math.isfinite(hi):
                cp.add(expr <= math.ceil(hi * scale + moved + up))
        objective = {j: c * unit[j] for j, c in enumerate(model.cost) if c != 0.0}
        obj_scale = _scale_for(objective, reach, 0.0)
        obj_ints = {j: round(c * obj_scale) for j, c in objective.items()}
        worst = max(worst, _relative_rounding(objective, obj_ints, obj_scale))
        cp.minimize(sum(c * columns[j] for j, c in obj_ints.items()))
        if model.hint is not None:
            for j, v in enumerate(model.hint):
                cp.add_hint(columns[j], min(max(round(v / unit[j]), lows[j]), highs[j]))
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
        exact = worst <= EXACT_ROUNDING
        proved = status == cp_model.OPTIMAL
        kind: SolveStatus = "optimal" if proved and exact else "feasible"
        return SolveResult(
            kind, values, objective_value, bound if exact else -math.inf, wall, worst, rounded_optimal=proved
        )


def _unit(lo: float, hi: float) -> float:
    """A power-of-ten step that splits [lo, hi] into at most :data:`_STEPS` integers."""
    span = max(abs(lo), abs(hi), 1e-12)
    return float(10.0 ** math.ceil(math.log10(span / _STEPS)))


def _scale_for(coefficients: dict[int, float], reach: list[float], side: float) -> float:
    """The largest power of ten keeping Σ|a_j|·reach_j and the row's sides under :data:`_INT_LIMIT`."""
    magnitude = max(sum(abs(a) * reach[j] for j, a in coefficients.items()), side)
    if magnitude == 0.0:
        return 1.0
    return float(10.0 ** math.floor(math.log10(_INT_LIMIT / magnitude)))


def _relative_rounding(exact: dict[int, float], rounded: dict[int, int], scale: float) -> float:
    worst = 0.0
    for j, a in exact.items():
        if a != 0.0:
            worst = max(worst, abs(rounded[j] / scale - a) / abs(a))
    return worst
