"""PuLP with HiGHS (through highspy) or CBC (where PuLP still bundles it; PuLP 4 no longer does)."""

from __future__ import annotations

import importlib.util
import math
import time
import warnings
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from pearl_sched.errors import SolverUnavailableError
from pearl_sched.solvers._quiet import silence_highs_banner
from pearl_sched.solvers.base import Capabilities, LinearModel, SolveResult


class _PulpBackend(ABC):
    extra: ClassVar[str | None] = "pulp"

    @abstractmethod
    def _solver(self, pulp: Any, time_limit_s: float, warm: bool) -> Any:
        """The PuLP solver command for this backend."""

    @classmethod
    @abstractmethod
    def _solver_available(cls, pulp: Any) -> bool:
        """Whether PuLP can run this backend's solver here."""

    @classmethod
    def is_available(cls) -> bool:
        if importlib.util.find_spec("pulp") is None:
            return False
        import pulp

        return cls._solver_available(pulp)

    def solve(self, model: LinearModel, *, time_limit_s: float) -> SolveResult:
        try:
            import pulp
        except ImportError:
            raise SolverUnavailableError(self.name, self.extra) from None  # type: ignore[attr-defined]
        start = time.perf_counter()
        problem = pulp.LpProblem("pearl_sched", pulp.LpMinimize)
        # PuLP ≥ 3.3 attaches variables to the problem (the LpVariable constructor is deprecated there).
        make = problem.add_variable if hasattr(problem, "add_variable") else pulp.LpVariable
        columns = [
            make(
                f"x{j}",
                lowBound=lo if math.isfinite(lo) else None,
                upBound=hi if math.isfinite(hi) else None,
                cat=pulp.LpInteger if is_int else pulp.LpContinuous,
            )
            for j, (lo, hi, is_int) in enumerate(zip(model.lb, model.ub, model.integer, strict=True))
        ]
        problem += pulp.lpSum(c * columns[j] for j, c in enumerate(model.cost) if c) + model.offset
        for i, (row, lo, hi) in enumerate(zip(model.rows, model.row_lo, model.row_hi, strict=True)):
            expr = pulp.lpSum(a * columns[j] for j, a in row.items())
            if math.isfinite(lo) and math.isfinite(hi) and lo == hi:
                problem += (expr == lo, f"r{i}")
                continue
            if math.isfinite(lo):
                problem += (expr >= lo, f"r{i}lo")
            if math.isfinite(hi):
                problem += (expr <= hi, f"r{i}hi")
        warm = model.hint is not None
        if warm:
            for col, v in zip(columns, model.hint or (), strict=True):
                col.setInitialValue(v)
        status = problem.solve(self._solver(pulp, time_limit_s, warm))
        wall = time.perf_counter() - start
        label = pulp.LpStatus.get(status, str(status))
        if label == "Infeasible":
            return SolveResult("infeasible", (), math.inf, math.inf, wall)
        values = tuple(float(col.value()) if col.value() is not None else math.nan for col in columns)
        if label != "Optimal" or any(math.isnan(v) for v in values):
            return SolveResult("no_solution", (), math.inf, -math.inf, wall, message=label)
        objective = float(pulp.value(problem.objective))
        return SolveResult("optimal", values, objective, objective, wall)


class PulpHighsBackend(_PulpBackend):
    """PuLP modelling, HiGHS (highspy) solving."""

    name: ClassVar[str] = "pulp-highs"
    capabilities: ClassVar[Capabilities] = Capabilities(
        supports_hint=False, deterministic=True, integer_coefficients_only=False
    )

    def _solver(self, pulp: Any, time_limit_s: float, warm: bool) -> Any:
        silence_highs_banner()
        return pulp.HiGHS(msg=False, timeLimit=time_limit_s, gapRel=0.0)

    @classmethod
    def _solver_available(cls, pulp: Any) -> bool:
        return bool(pulp.HiGHS(msg=False).available())


class PulpCbcBackend(_PulpBackend):
    """PuLP modelling, CBC solving.

    ``COIN_CMD`` when a CBC binary is installed (``pulp[cbc]``), else the CBC bundled with PuLP < 4
    (``PULP_CBC_CMD``, deprecated there; its warning is ours to silence).
    """

    name: ClassVar[str] = "pulp-cbc"
    capabilities: ClassVar[Capabilities] = Capabilities(
        supports_hint=True, deterministic=True, integer_coefficients_only=False
    )

    def _solver(self, pulp: Any, time_limit_s: float, warm: bool) -> Any:
        options = dict(msg=False, timeLimit=time_limit_s, gapRel=0.0, threads=1, warmStart=warm)
        coin = pulp.COIN_CMD(**options)
        if coin.available():
            return coin
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return pulp.PULP_CBC_CMD(**options)

    @classmethod
    def _solver_available(cls, pulp: Any) -> bool:
        if pulp.COIN_CMD(msg=False).available():
            return True
        if not hasattr(pulp, "PULP_CBC_CMD"):
            return False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return bool(pulp.PULP_CBC_CMD(msg=False).available())
