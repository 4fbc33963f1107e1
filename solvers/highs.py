"""HiGHS through highspy, called directly (no modelling layer): the default backend.

Chosen by measurement (``bench/plan_latency.py``, docs/solvers.md): fastest on the class-level model and
deterministic.
"""

from __future__ import annotations

import importlib.util
import math
import threading
import time
from typing import Any, ClassVar

from pearl_sched.errors import SolverUnavailableError
from pearl_sched.solvers._quiet import silence_highs_banner
from pearl_sched.solvers.base import Capabilities, LinearModel, SolveResult, SolveStatus


class HighsBackend:
    """highspy with a fixed seed and zero relative MIP gap (HiGHS's MIP search is deterministic)."""

    name: ClassVar[str] = "highs"
    extra: ClassVar[str | None] = "highs"
    capabilities: ClassVar[Capabilities] = Capabilities(
        supports_hint=True, deterministic=True, integer_coefficients_only=False
    )

    @classmethod
    def is_available(cls) -> bool:
        """True when highspy imports."""
        return importlib.util.find_spec("highspy") is not None

    def solve(self, model: LinearModel, *, time_limit_s: float) -> SolveResult:
        """Solve ``model`` with HiGHS to zero gap or until ``time_limit_s``."""
        try:
            import highspy
        except ImportError:
            raise SolverUnavailableError(self.name, self.extra) from None
        start = time.perf_counter()
        silence_highs_banner()
        h = _cleared_highs(highspy)
        for option, value in (
            ("output_flag", False),
            ("random_seed", 0),
            ("mip_rel_gap", 0.0),
            ("mip_abs_gap", 1e-9),
            # Measured on the class-level model (tens of integers): symmetry detection and the feasibility-jump
            # heuristic cost more than they save, and so does presolve on small clusters; on large ones (integer
            # columns ranging over more than _PRESOLVE_ABOVE_RANGE values) presolve's bound tightening cut the
            # search 2-9x (benchmarks.md). The search stays exact either way.
            ("presolve", "on" if _widest_integer_range(model) > _PRESOLVE_ABOVE_RANGE else "off"),
            ("mip_detect_symmetry", False),
            ("mip_heuristic_run_feasibility_jump", False),
            # RENS and the root reduced-cost heuristic (sub-MIPs at the root): on the mixed-size gate MIPs the
            # root's own rounding, cuts and restarts reached the same optima without them (at 64 GPUs the LP after
            # the root's cuts was integral), in 0.65-0.9x the HiGHS time a call. The same plans on the bench's
            # checks; on about 1 random state in 1,800 another optimum of exactly the same objective among ties
            # (benchmarks.md, "Fourth pass").
            ("mip_heuristic_run_rens", False),
            ("mip_heuristic_run_root_reduced_cost", False),
            # One thread: HiGHS's MIP search runs on one thread whatever the pool (its docs name symmetry
            # detection, off here, as the parallel part) and returned the same plans, but keeping a second
            # worker thread in step cost about 3x the solve time on a loaded 2-core machine (benchmarks.md).
            ("threads", 1),
            ("time_limit", float(time_limit_s)),
        ):
            h.setOptionValue(option, value)
        h.passModel(_to_highs_lp(highspy, model))
        if model.hint is not None:
            solution = highspy.HighsSolution()
            solution.col_value = list(model.hint)
            solution.value_valid = True
            h.setSolution(solution)
        if h.run() == highspy.HighsStatus.kError and h.getModelStatus() == highspy.HighsModelStatus.kNotset:
            # HiGHS's thread pool is per process: when other code made it with more threads first, HiGHS refuses
            # ``threads=1`` before solving; the pool it has then solves the same search.
            h.setOptionValue("threads", 0)
            h.run()
        status = h.getModelStatus()
        info = h.getInfo()
        wall = time.perf_counter() - start
        has_point = info.primal_solution_status == 2  # kSolutionStatusFeasible
        kind: SolveStatus
        if status == highspy.HighsModelStatus.kOptimal:
            kind = "optimal"
        elif status == highspy.HighsModelStatus.kInfeasible:
            return SolveResult("infeasible", (), math.inf, math.inf, wall)
        elif has_point:
            kind = "feasible"
        else:
            return SolveResult("no_solution", (), math.inf, -math.inf, wall, message=h.modelStatusToString(status))
        values = tuple(float(v) for v in h.getSolution().col_value)
        bound = (
            float(info.mip_dual_bound) if math.isfinite(info.mip_dual_bound) else float(info.objective_function_value)
        )
        return SolveResult(kind, values, float(info.objective_function_value), bound, wall)


_PER_THREAD = threading.local()


def _cleared_highs(highspy: Any) -> Any:
    """This thread's ``Highs`` object, cleared (``clear()``: default options, no model, no solution).

    Making a ``Highs`` object costs about 0.3 ms (highspy sets up its callbacks), more than HiGHS takes to solve
    many of the class-level models; a plan() call solves tens of them. A cleared object is a fresh one with the
    same options set (the same answers on every model checked, benchmarks.md). One per thread, as a ``Highs``
    object is not safe to share between threads.
    """
    h = getattr(_PER_THREAD, "highs", None)
    if h is None:
        h = highspy.Highs()
        _PER_THREAD.highs = h
    else:
        h.clear()
    return h


_PRESOLVE_ABOVE_RANGE = 64
"""Presolve pays off once some integer column ranges over more values than this (measured: it cost 10-60% more
on the 64-GPU bench models, widest range 8-26, and saved 35-90% on the 1,024- and 4,096-GPU ones, widest 96-871)."""


def _widest_integer_range(model: LinearModel) -> float:
    return max((hi - lo for lo, hi, is_int in zip(model.lb, model.ub, model.integer, strict=True) if is_int), default=0)


def _to_highs_lp(highspy: Any, model: LinearModel) -> Any:
    lp = highspy.HighsLp()
    lp.num_col_ = model.num_vars
    lp.num_row_ = len(model.rows)
    lp.col_cost_ = list(model.cost)
    lp.col_lower_ = list(model.lb)
    lp.col_upper_ = list(model.ub)
    lp.offset_ = model.offset
    lp.row_lower_ = [lo if math.isfinite(lo) else -highspy.kHighsInf for lo in model.row_lo]
    lp.row_upper_ = [hi if math.isfinite(hi) else highspy.kHighsInf for hi in model.row_hi]
    starts, index, value = [0], [], []
    for columns, coefficients in model.sorted_rows():
        index += columns
        value += coefficients
        starts.append(len(index))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = model.num_vars
    lp.a_matrix_.num_row_ = len(model.rows)
    lp.a_matrix_.start_ = starts
    lp.a_matrix_.index_ = index
    lp.a_matrix_.value_ = value
    lp.integrality_ = [
        highspy.HighsVarType.kInteger if is_int else highspy.HighsVarType.kContinuous for is_int in model.integer
    ]
    return lp
