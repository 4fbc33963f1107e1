"""A backend-neutral mixed-integer linear model and the interface every solver backend implements.

The formulation (``formulation.py``) writes its model once as a :class:`LinearModel`; each backend translates
it to its own API. Nothing outside ``pearl_sched.solvers`` imports a solver package.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol

SolveStatus = Literal["optimal", "feasible", "infeasible", "no_solution", "error"]

EXACT_ROUNDING = 1e-12
"""Relative coefficient rounding at or below which a rounded model counts as the model itself."""


@dataclass
class LinearModel:
    """min ``c·x + offset`` s.t. ``lo ≤ A x ≤ hi``, ``lb ≤ x ≤ ub``, some ``x`` integer.

    Rows are sparse ``{column: coefficient}`` maps, each named after the constraint it writes (``row_names``,
    for reading a model; backends ignore the names). ``hint`` is an optional start solution.
    """

    names: list[str] = field(default_factory=list)
    lb: list[float] = field(default_factory=list)
    ub: list[float] = field(default_factory=list)
    integer: list[bool] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    offset: float = 0.0
    rows: list[dict[int, float]] = field(default_factory=list)
    row_lo: list[float] = field(default_factory=list)
    row_hi: list[float] = field(default_factory=list)
    row_names: list[str] = field(default_factory=list)
    hint: list[float] | None = None
    _sorted_rows: list[tuple[list[int], list[float]]] = field(default_factory=list, repr=False, compare=False)

    def add_var(self, name: str, lb: float, ub: float, *, integer: bool, cost: float = 0.0) -> int:
        """Add a column and return its index."""
        self.names.append(name)
        self.lb.append(lb)
        self.ub.append(ub)
        self.integer.append(integer)
        self.cost.append(cost)
        return len(self.names) - 1

    def add_row(self, coeffs: dict[int, float], lo: float = -math.inf, hi: float = math.inf, *, name: str = "") -> int:
        """Add ``lo ≤ Σ coeffs[j]·x[j] ≤ hi`` and return its index; ``name`` says which constraint it is."""
        self.rows.append({j: a for j, a in coeffs.items() if a != 0.0})
        self.row_lo.append(lo)
        self.row_hi.append(hi)
        self.row_names.append(name)
        return len(self.rows) - 1

    def sorted_rows(self) -> list[tuple[list[int], list[float]]]:
        """Each row as (columns in increasing order, their coefficients), for backends that want a sparse matrix.

        Worked out once per row and carried into :meth:`with_rows_of` copies, so the cut loop's rounds, which
        share the model without cuts, sort its rows once. Rows are never changed once added.
        """
        done = self._sorted_rows
        for row in self.rows[len(done) :]:
            columns = sorted(row)
            done.append((columns, [row[j] for j in columns]))
        return done

    def with_rows_of(self, other: LinearModel) -> LinearModel:
        """A copy of this model with ``other``'s rows added after its own (``other``'s columns are ignored)."""
        return LinearModel(
            names=[*self.names],
            lb=[*self.lb],
            ub=[*self.ub],
            integer=[*self.integer],
            cost=[*self.cost],
            offset=self.offset,
            rows=[*self.rows, *other.rows],
            row_lo=[*self.row_lo, *other.row_lo],
            row_hi=[*self.row_hi, *other.row_hi],
            row_names=[*self.row_names, *other.row_names],
            hint=self.hint,
            _sorted_rows=[*self.sorted_rows(), *other.sorted_rows()],
        )

    @property
    def num_vars(self) -> int:
        """Number of columns."""
        return len(self.names)


@dataclass(frozen=True)
class SolveResult:
    """What a backend returns.

    ``values`` is empty when no feasible point was found. ``rounding_error`` is the largest relative change
    a backend made to a coefficient (CP-SAT needs integers); zero for the others. A backend that rounded more
    than :data:`EXACT_ROUNDING` proved nothing about this model: it reports ``"feasible"`` and no bound, and
    sets ``rounded_optimal`` when it proved its rounded model optimal (so a caller can stop searching).
    """

    status: SolveStatus
    values: tuple[float, ...]
    objective: float
    bound: float
    wall_time_s: float
    rounding_error: float = 0.0
    message: str = ""
    rounded_optimal: bool = False

    @property
    def has_solution(self) -> bool:
        """True when the backend returned a feasible point."""
        return self.status in ("optimal", "feasible") and bool(self.values)


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; the rest of the code asks these flags instead of the backend's type."""

    supports_hint: bool
    deterministic: bool
    integer_coefficients_only: bool
    supports_time_limit: bool = True


class Backend(Protocol):
    """One solver backend."""

    name: ClassVar[str]
    extra: ClassVar[str | None]
    capabilities: ClassVar[Capabilities]

    @classmethod
    def is_available(cls) -> bool:
        """True when the backend's package imports."""
        ...

    def solve(self, model: LinearModel, *, time_limit_s: float) -> SolveResult:
        """Solve ``model`` to optimality (zero gap) or until the time limit."""
        ...


def evaluate_objective(model: LinearModel, values: tuple[float, ...]) -> float:
    """``c·x + offset`` at ``values``."""
    return model.offset + sum(c * v for c, v in zip(model.cost, values, strict=True))
