r"""The MILP of the class-level planning problem, and the cut loop that solves it exactly.

The problem itself — classes of interchangeable slots, a configuration's exact objective, the brute-force
oracle — lives in :mod:`pearl_sched.problem`; this module only writes and solves it. Slots that are
interchangeable — same zone, GPU type, node group, current role and TP degree — form a *class* k of size
n_k. The MILP decides how many slots of each class take each rollout role; a cheap,
deterministic mapping (``pearl_sched.transition``) then turns counts into concrete slots. The model grows
with the number of classes, not GPUs.

Model
-----
Data: classes k with size n_k, TP degree g_k, eligible roles R_k ⊆ {P, D, C}, capacity weights κ_kr
(reference workers per slot, from the makespan model), KV bytes H_k, prefill throughput π_k, per-slot
transition cost c_kr of ending in role r (r = off included; 0 for keeping the current role). Pool times
f_r(E) = a_r + w_r / E (convex, decreasing; ``MakespanTerms``). ρ = R/B the unfinished fraction, G the GPU
budget, Q the KV bytes the unfinished trajectories need, λ the prefill demand, τ the admission pause.

Variables: y_kr ∈ ℤ, 0 ≤ y_kr ≤ n_k for r ∈ R_k (the count of class k in role r); m ∈ {0,1} (1 when
disaggregated); T ≥ 0 (the pool makespan, environment time excluded); u ∈ {0,1} (some new worker is
admitted, pausing admission once).

    minimise   ρ·(T + T_env) + Σ_k Σ_r (c_kr − c_k,off)·y_kr + Σ_k c_k,off·n_k + τ·u

    subject to Σ_r y_kr ≤ n_k                                  (each slot has at most one role)
               Σ_k g_k Σ_r y_kr ≤ G                            (GPU budget)
               1 − m ≤ Σ_k y_kC ≤ U_C·(1 − m)                  (colocated iff m = 0)
               m ≤ Σ_k y_kP ≤ U_P·m,  m ≤ Σ_k y_kD ≤ U_D·m      (≥1 P and ≥1 D iff m = 1)
               Σ_k H_k·y_kD ≥ Q·m,   Σ_k H_k·y_kC ≥ Q·(1 − m)  (KV capacity)
               Σ_k π_k·y_kP ≥ λ·m,   Σ_k π_k·y_kC ≥ λ·(1 − m)  (prefill capacity)
               u ≥ Σ_{k new} Σ_r y_kr / U_new                  (admission pause)
               Σ_{k ∈ p, g_k ≥ s} g_k Σ_r y_kr ≤ B_ps            (node blocks, for every pool p and size s)
               T ≥ c_j + s_j·E_r − M·[r inactive]               for every cut j of role r,
               with E_r = Σ_k κ_kr·y_kr

Worker sizes (docs/formulation.md, "Worker sizes"): when the state allows several sizes, the classes carry a
size index — a pool p of GPUs (zone × GPU type × node group × category) holds its surviving slots' classes and,
per allowed size s, a class of up to ⌊a/s⌋ new workers formed by regrouping the pool's GPUs. B_ps = s·Σ_n ⌊a_n/s⌋
(a_n: the pool's GPUs on node n); with sizes dividing one another these rows are exactly the condition for
the workers to pack onto the nodes (largest first, each in an aligned block). Without sizes there are no pools
and no such rows.

Zone rules, mandatory returns and the hysteresis "keep" candidate are expressed through R_k and fixed
bounds. The makespan cuts (c_j + s_j·E) are tangents of the convex f_r, valid everywhere, and — where every
class of a role has the same weight, so capacities live on a lattice — chords between neighbouring lattice
points, exact there. The solve loop (:func:`solve_class_problem`) adds cuts tight at the incumbent capacity
until the cut value equals f_r(E_r) there, so the final answer is optimal for the exact objective (outer
approximation over finitely many capacity values). Each mode is solved on its own (m fixed), the start
solution's mode first, its optimum a cutoff for the other (skipped when :func:`mode_bound` proves it cannot
win). The objective's constant terms make the reported objective equal :func:`~pearl_sched.problem.evaluate`
at the solution. The cuts a loop adds can start later solves with the same f_r (:class:`CutPool`, one per plan()
call).

:func:`build_model` writes one helper per constraint family, in the order above; each row is named after its
line (``one_role_per_slot``, ``gpu_budget``, ...), so a dumped model reads like this docstring.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from pearl_sched.errors import PearlSchedError, SolverError
from pearl_sched.makespan import MakespanTerms, PoolTerms
from pearl_sched.problem import MODE_ROLES, ROLES, ClassProblem, ClassSolution, SlotClass, evaluate
from pearl_sched.solvers.base import EXACT_ROUNDING, Backend, LinearModel, SolveResult
from pearl_sched.state import Mode, Role

_CUT_TOLERANCE = 1e-6
_MAX_CUT_ROUNDS = 60
_REFINE_WINDOW = 8
"""Lattice steps on each side of the incumbent capacity that a round's chords cover (one role weight only).

The loop closes in on the optimum a few steps at a time: at 1,024 GPUs of one type, chords one step either side
took 7 rounds a solve, eight steps 4-5 (plan() 96 -> 69 ms CPU, the same plans; benchmarks.md).
"""


@dataclass
class _Columns:
    y: dict[tuple[int, Role], int]
    mode: int
    makespan: int
    admission: int | None
    weights: dict[Role, list[tuple[int, float]]]  # per role: (column of y_kr, κ_kr), what every cut row repeats
    by_class: list[tuple[int | None, ...]]  # per class, the column of y_kr for each role of ROLES (None: none)

    @classmethod
    def of(
        cls, problem: ClassProblem, y: dict[tuple[int, Role], int], mode: int, makespan: int, admission: int | None
    ) -> _Columns:
        """The columns, with each role's capacity terms gathered once for the cuts."""
        weights: dict[Role, list[tuple[int, float]]] = {role: [] for role in ROLES}
        for (k, role), j in y.items():
            weights[role].append((j, problem.classes[k].weight[role]))
        by_class = [tuple(y.get((k, r)) for r in ROLES) for k in range(len(problem.classes))]
        return cls(y, mode, makespan, admission, weights, by_class)


def build_model(problem: ClassProblem, cuts: Sequence[tuple[Role, float, float]]) -> tuple[LinearModel, _Columns]:
    """The MILP of the module docstring with the given makespan cuts ``(role, intercept, slope)``.

    One helper per constraint family, in the docstring's order; rows are named after its lines.
    """
    model = LinearModel()
    # minimise ρ·(T + T_env) + Σ_k Σ_r (c_kr − c_k,off)·y_kr + Σ_k c_k,off·n_k + τ·u  (columns, costs, offset)
    y = _role_count_columns(model, problem)
    m = _mode_column(model, problem)
    t = _makespan_column(model, problem)
    # Σ_r y_kr ≤ n_k  (each slot has at most one role)
    _one_role_per_slot(model, problem, y)
    # Σ_k g_k Σ_r y_kr ≤ G  (GPU budget)
    _gpu_budget(model, problem, y)
    # m ≤ Σ_k y_kP ≤ U_P·m,  m ≤ Σ_k y_kD ≤ U_D·m  (≥1 P and ≥1 D iff m = 1)
    # 1 − m ≤ Σ_k y_kC ≤ U_C·(1 − m)  (colocated iff m = 0)
    for role in ROLES:
        _role_active_iff_mode(model, problem, y, m, role)
    # Σ_k H_k·y_kD ≥ Q·m,  Σ_k H_k·y_kC ≥ Q·(1 − m)  (KV capacity)
    _capacity_rows(model, problem, y, m, "kv_capacity", problem.kv_required_bytes, Role.DECODE, _kv_bytes)
    # Σ_k π_k·y_kP ≥ λ·m,  Σ_k π_k·y_kC ≥ λ·(1 − m)  (prefill capacity)
    _capacity_rows(
        model, problem, y, m, "prefill_capacity", problem.min_prefill_tokens_per_s, Role.PREFILL, _prefill_rate
    )
    # u ≥ Σ_{k new} Σ_r y_kr / U_new  (admission pause)
    admission = _admission_pause(model, problem, y)
    # Σ_{k ∈ p, g_k ≥ s} g_k Σ_r y_kr ≤ B_ps  (node blocks)
    _node_blocks(model, problem, y)
    columns = _Columns.of(problem, y, m, t, admission)
    # T ≥ c_j + s_j·E_r − M·[r inactive]  for every cut j of role r
    for role, intercept, slope in cuts:
        add_cut(model, problem, columns, role, intercept, slope)
    return model, columns


def _role_count_columns(model: LinearModel, problem: ClassProblem) -> dict[tuple[int, Role], int]:
    """y_kr ∈ ℤ, 0 ≤ y_kr ≤ n_k for r ∈ R_k, costing c_kr − c_k,off; Σ_k c_k,off·n_k goes to the offset.

    A fixed class may not leave its current role (its lower bound is n_k); one whose current role is not
    eligible gets an empty row ``0 ≥ 1``, infeasible by construction.
    """
    y: dict[tuple[int, Role], int] = {}
    for k, cls in enumerate(problem.classes):
        for role in ROLES:
            if role in cls.eligible:
                fixed = cls.fixed and role == cls.current_role
                cost = cls.cost[role] - cls.cost[None]
                lo = float(cls.size) if fixed else 0.0
                y[k, role] = model.add_var(f"y[{cls.key},{role.value}]", lo, cls.size, integer=True, cost=cost)
        model.offset += cls.cost[None] * cls.size
        if cls.fixed and cls.current_role is not None and cls.current_role not in cls.eligible:
            model.add_row({}, lo=1.0, name=f"fixed_role_kept[{cls.key}]")
    return y


def _mode_column(model: LinearModel, problem: ClassProblem) -> int:
    """The mode column m ∈ {0, 1}, 1 when disaggregated; fixed where the problem allows one mode only."""
    allow_c, allow_d = Mode.COLOCATED in problem.modes, Mode.DISAGGREGATED in problem.modes
    return model.add_var("disaggregated", 0.0 if allow_c else 1.0, 1.0 if allow_d else 0.0, integer=True)


def _makespan_column(model: LinearModel, problem: ClassProblem) -> int:
    """T ≥ 0, the pool makespan, costing ρ; ρ·T_env goes to the offset."""
    rho = problem.unfinished_fraction
    t = model.add_var("makespan", 0.0, _max_pool_time(problem), integer=False, cost=rho)
    model.offset += rho * problem.terms.environment_s
    return t


def _one_role_per_slot(model: LinearModel, problem: ClassProblem, y: Mapping[tuple[int, Role], int]) -> None:
    """Σ_r y_kr ≤ n_k for every class k."""
    for k, cls in enumerate(problem.classes):
        row = {y[k, r]: 1.0 for r in ROLES if (k, r) in y}
        if row:
            model.add_row(row, hi=float(cls.size), name=f"one_role_per_slot[{cls.key}]")


def _gpu_budget(model: LinearModel, problem: ClassProblem, y: Mapping[tuple[int, Role], int]) -> None:
    """Σ_k g_k Σ_r y_kr ≤ G."""
    model.add_row(
        {j: float(problem.classes[k].tp) for (k, _), j in y.items()}, hi=float(problem.max_gpus), name="gpu_budget"
    )


def _role_sum(
    y: Mapping[tuple[int, Role], int], role: Role, coef: Mapping[int, float] | None = None
) -> dict[int, float]:
    """Σ_k coef_k·y_k,role as a sparse row (coefficient 1 without ``coef``)."""
    return {j: (coef[k] if coef else 1.0) for (k, r), j in y.items() if r == role}


def _role_active_iff_mode(
    model: LinearModel, problem: ClassProblem, y: Mapping[tuple[int, Role], int], m: int, role: Role
) -> None:
    """Prefill and decode serve (≥ 1, ≤ U_r) iff m = 1; colocated iff m = 0; otherwise their count is 0."""
    bound = float(sum(c.size for c in problem.classes if role in c.eligible))
    on_when_disagg = role is not Role.COLOCATED
    sign = 1.0 if on_when_disagg else -1.0
    name = f"role_active_iff_mode[{role.value}"
    model.add_row({**_role_sum(y, role), m: -sign * bound}, hi=0.0 if on_when_disagg else bound, name=f"{name},max]")
    model.add_row({**_role_sum(y, role), m: -sign}, lo=0.0 if on_when_disagg else 1.0, name=f"{name},min]")


def _kv_bytes(cls: SlotClass) -> float:
    return cls.kv_bytes


def _prefill_rate(cls: SlotClass) -> float:
    return cls.prefill_tokens_per_s


def _capacity_rows(
    model: LinearModel,
    problem: ClassProblem,
    y: Mapping[tuple[int, Role], int],
    m: int,
    name: str,
    need: float,
    disaggregated_role: Role,
    per_slot: Callable[[SlotClass], float],
) -> None:
    """Σ_k a_k·y_k,role ≥ need·m for the disaggregated role and ≥ need·(1 − m) for colocated.

    Rows are divided by the need, so coefficients stay near 1 for every backend; no rows when nothing is
    needed.
    """
    if need <= 0:
        return
    scaled = {k: per_slot(c) / need for k, c in enumerate(problem.classes)}
    model.add_row(
        {**_role_sum(y, disaggregated_role, scaled), m: -1.0}, lo=0.0, name=f"{name}[{disaggregated_role.value}]"
    )
    model.add_row({**_role_sum(y, Role.COLOCATED, scaled), m: 1.0}, lo=1.0, name=f"{name}[{Role.COLOCATED.value}]")


def _admission_pause(model: LinearModel, problem: ClassProblem, y: Mapping[tuple[int, Role], int]) -> int | None:
    """The admission column u ∈ {0, 1} costing τ, with U_new·u ≥ Σ_{k new} Σ_r y_kr.

    No column when no class is new or the pause is zero.
    """
    new = {j: 1.0 for (k, _), j in y.items() if problem.classes[k].pauses_admission}
    if not new or problem.admission_pause_s <= 0:
        return None
    admission = model.add_var("admission", 0.0, 1.0, integer=True, cost=problem.admission_pause_s)
    u_new = float(sum(c.size for c in problem.classes if c.pauses_admission))
    model.add_row({**new, admission: -u_new}, hi=0.0, name="admission_pause")
    return admission


def _node_blocks(model: LinearModel, problem: ClassProblem, y: Mapping[tuple[int, Role], int]) -> None:
    """Σ_{k ∈ p, g_k ≥ s} g_k Σ_r y_kr ≤ B_ps for every pool p and block size s; no rows without pools."""
    if not problem.pools:
        return
    columns: dict[int, list[int]] = {}  # class → its columns, in y's order
    for (k, _), j in y.items():
        columns.setdefault(k, []).append(j)
    for pool in problem.pools:
        in_pool = [k for k in columns if problem.classes[k].pool == pool.key]
        for block, limit in sorted(pool.block_gpus.items()):
            row = {
                j: float(problem.classes[k].tp) for k in in_pool if problem.classes[k].tp >= block for j in columns[k]
            }
            if row:
                model.add_row(row, hi=float(limit), name=f"node_blocks[{pool.key},tp{block}]")


def add_cut(
    model: LinearModel, problem: ClassProblem, columns: _Columns, role: Role, intercept: float, slope: float
) -> None:
    """Add ``T ≥ intercept + slope·E_role``, switched off (by the mode variable) when the role is off."""
    row = {j: -slope * weight for j, weight in columns.weights[role]}
    row[columns.makespan] = 1.0
    name = f"makespan_cut[{role.value}]"
    if role is Role.COLOCATED:  # active when m = 0:  T − slope·E + intercept·m ≥ intercept
        row[columns.mode] = intercept
        model.add_row(row, lo=intercept, name=name)
    else:  # active when m = 1:  T − slope·E − intercept·m ≥ 0
        row[columns.mode] = -intercept
        model.add_row(row, lo=0.0, name=name)


def tangent(terms: PoolTerms, e: float) -> tuple[float, float]:
    """(intercept, slope) of the tangent of ``fixed + work/E`` at ``e``: valid everywhere (convexity)."""
    return terms.fixed_s + 2.0 * terms.work_s / e, -terms.work_s / (e * e)


def secant(terms: PoolTerms, a: float, b: float) -> tuple[float, float]:
    """(intercept, slope) of the chord between ``a`` and ``b``: exact at both, below f outside [a, b].

    Valid only where capacities live on a lattice of step ``b − a`` (one worker weight for the role).
    """
    fa, fb = terms.time_s(a), terms.time_s(b)
    slope = (fb - fa) / (b - a)
    return fa - slope * a, slope


def lattice_step(problem: ClassProblem, role: Role) -> float | None:
    """The common capacity weight of every class eligible for ``role``, or None when they differ."""
    weights = {c.weight[role] for c in problem.classes if role in c.eligible}
    return weights.pop() if len(weights) == 1 else None


def cuts_near(problem: ClassProblem, role: Role, e: float, window: int) -> list[tuple[float, float]]:
    """Cuts tight at ``e``: chords to lattice neighbours within ``window`` steps, else the tangent."""
    terms = problem.terms.pool(role)
    step = lattice_step(problem, role)
    if step is None:
        return [tangent(terms, e)]
    top = sum(c.size for c in problem.classes if role in c.eligible) * step
    centre = round(e / step)
    points = [k * step for k in range(max(1, centre - window), centre + window + 1) if k * step <= top + 1e-9]
    return [secant(terms, a, b) for a, b in itertools.pairwise(points)] or [tangent(terms, e)]


def _max_pool_time(problem: ClassProblem) -> float:
    """An upper bound on T: every pool time at the smallest non-zero capacity."""
    worst = 0.0
    for role in ROLES:
        weights = [c.weight[role] for c in problem.classes if role in c.eligible and c.weight.get(role, 0) > 0]
        if weights:
            worst = max(worst, problem.terms.pool(role).time_s(min(weights)))
    return worst * 1.000001 + 1.0


def initial_cuts(
    problem: ClassProblem, hint: ClassSolution | None = None, ratio: float = 1.5, window: int = 6
) -> list[tuple[Role, float, float]]:
    """Tangents on a geometric grid of each role's capacity range, and chords around the hint's capacity."""
    cuts: list[tuple[Role, float, float]] = []
    for role in ROLES:
        members = [c for c in problem.classes if role in c.eligible]
        if not members:
            continue
        terms = problem.terms.pool(role)
        e = min(c.weight[role] for c in members)
        hi = sum(c.weight[role] * c.size for c in members)
        while e < hi:
            cuts.append((role, *tangent(terms, e)))
            e *= ratio
        cuts.append((role, *tangent(terms, hi)))
        if hint is not None and hint.capacity.get(role, 0.0) > 0:
            cuts.extend((role, *cut) for cut in cuts_near(problem, role, hint.capacity[role], window))
    return cuts


class CutPool:
    """Makespan cuts the solves of one plan() call have written, offered to its later solves.

    A cut is a property of f_r, not of the problem it was found in: a tangent of f_r lies under f_r everywhere, and
    a chord between neighbouring points of a lattice of step s lies under it at every multiple of s. So a later
    problem with the same pool times (``MakespanTerms``: the same model and workload) may start from every tangent
    found so far, and from the chords of its own lattice step, for the roles it has (docs/formulation.md, "Cuts
    carried between solves"). Its loop then needs fewer rounds where its optimum is near an earlier one (a gate's
    wider problem, the hysteresis' keep problem, the settle passes). The answer stays the exact optimum; among
    configurations of exactly equal objective the solver may return another.
    """

    def __init__(self) -> None:
        """An empty pool."""
        self._cuts: dict[MakespanTerms, dict[tuple[Role, float, float], float | None]] = {}

    def add(self, problem: ClassProblem, cuts: Iterable[tuple[Role, float, float]]) -> None:
        """Keep ``cuts`` (written for ``problem``), each with the lattice step it is valid on (None: a tangent).

        A cut is kept once; a chord is recognised by its role's lattice step in ``problem`` (tangents are also
        valid on that lattice, so recording them under the step only narrows where they are offered).
        """
        known = self._cuts.setdefault(problem.terms, {})
        steps = {role: lattice_step(problem, role) for role in ROLES}
        for cut in cuts:
            known.setdefault(cut, steps[cut[0]])

    def offered(self, problem: ClassProblem, roles: Iterable[Role]) -> list[tuple[Role, float, float]]:
        """The kept cuts valid for ``problem`` in ``roles``, in the order they were found."""
        known = self._cuts.get(problem.terms)
        if not known:
            return []
        steps = {role: lattice_step(problem, role) for role in roles}
        return [cut for cut, step in known.items() if cut[0] in steps and (step is None or step == steps[cut[0]])]


@dataclass(frozen=True)
class MilpOutcome:
    """The MILP's answer after the cut loop."""

    solution: ClassSolution | None
    status: str
    bound_s: float
    wall_time_s: float
    rounds: int
    rounding_error: float


def solve_class_problem(
    problem: ClassProblem,
    backend: Backend,
    *,
    time_limit_s: float,
    hint: ClassSolution | None = None,
    cuts: CutPool | None = None,
) -> MilpOutcome:
    """Solve the MILP exactly: one mode at a time, each with outer-approximation cuts refined until tight.

    Fixing the mode removes the big-M coupling, so each model's LP relaxation is tight and the search small;
    the mode of the start solution goes first and its optimum is a cutoff for the other mode. Returns the
    best exactly-evaluated solution; ``status`` is ``"optimal"`` when every mode's loop closed,
    ``"feasible"`` when the time limit stopped it with an incumbent, else the backend's status. ``cuts``: the
    pool of an earlier solve's cuts this one starts from and adds its own to (:class:`CutPool`).
    """
    best = hint
    modes = sorted(problem.modes, key=lambda m: hint is None or m is not hint.mode)
    wall, rounds, rounding, bound = 0.0, 0, 0.0, math.inf
    statuses = []
    for mode in modes:
        if best is not None and _cannot_win(problem, mode, best):
            statuses.append("optimal")  # pruned: this mode cannot beat the incumbent
            continue
        sub = replace(problem, modes=(mode,))
        start = best if best is not None and best.mode is mode else None
        cutoff = best.objective_s if best is not None else None
        outcome = _solve_mode(
            sub, backend, time_limit_s=max(time_limit_s - wall, 1e-3), hint=start, cutoff=cutoff, pool=cuts
        )
        wall += outcome.wall_time_s
        rounds += outcome.rounds
        rounding = max(rounding, outcome.rounding_error)
        bound = min(bound, outcome.bound_s)  # the problem's bound is the weaker of the modes'
        statuses.append(outcome.status)
        if outcome.solution is not None and (best is None or outcome.solution.objective_s < best.objective_s - 1e-12):
            best = outcome.solution
    if best is not None:
        bound = min(bound, best.objective_s)
    if rounding > EXACT_ROUNDING:  # the backend solved a rounded model: neither its optimum nor its bound is ours
        statuses = ["feasible" if s == "optimal" else s for s in statuses]
        bound = -math.inf
    if all(s in ("optimal", "infeasible") for s in statuses):
        status = "optimal" if best is not None else "infeasible"
    else:
        status = "feasible" if best is not None else next(s for s in statuses if s not in ("optimal", "infeasible"))
    return MilpOutcome(best, status, bound, wall, rounds, rounding)


def _cannot_win(problem: ClassProblem, mode: Mode, incumbent: ClassSolution) -> bool:
    """Whether no configuration in ``mode`` can beat ``incumbent``, so the mode's MILP need not run.

    The full-capacity bound within the long-standing 1e-9 tolerance, or :func:`mode_bound` strictly above the
    incumbent (a candidate replaces the incumbent only when better by 1e-12, so this skips only solves whose
    answer would have been discarded; never the incumbent's own mode, where the incumbent bounds it).
    """
    objective_s = incumbent.objective_s
    if mode_lower_bound(problem, mode) >= objective_s - 1e-9:
        return True
    return mode is not incumbent.mode and mode_bound(problem, mode) > objective_s + 1e-9 * max(1.0, abs(objective_s))


def mode_lower_bound(problem: ClassProblem, mode: Mode) -> float:
    """A cheap lower bound on any objective in ``mode``.

    Every active pool at its full capacity, and every class at its cheapest option (budget, KV and admission
    ignored).
    """
    full = {r: sum(c.weight[r] * c.size for c in problem.classes if r in c.eligible) for r in MODE_ROLES[mode]}
    makespan = max(problem.terms.pool(r).time_s(e) for r, e in full.items()) + problem.terms.environment_s
    cheapest = sum(
        c.size * min(c.cost[r] for r in (*(r for r in ROLES if r in c.eligible), None)) for c in problem.classes
    )
    return problem.unfinished_fraction * makespan + cheapest


def mode_bound(problem: ClassProblem, mode: Mode) -> float:
    """A tighter lower bound on any objective in ``mode`` (``inf`` when nothing can be feasible there).

    Each role of the mode at the most capacity any configuration could give it (:func:`max_capacity`: the
    budget and the pools' GPUs bind, the other roles and KV and prefill needs are ignored), and every class at
    its cheapest option among the mode's roles and off (a fixed class at its current role; the mode's other
    roles are off, ``role_active_iff_mode``). The admission pause is left out (it is never negative).
    """
    roles = MODE_ROLES[mode]
    cheapest = cheapest_transition_s(problem, mode)
    if math.isinf(cheapest):
        return math.inf
    times = []
    for role in roles:
        top = max_capacity(problem, role)
        if top <= 0:
            return math.inf  # the mode needs this role and no class can take it
        times.append(problem.terms.pool(role).time_s(top))
    return problem.unfinished_fraction * (max(times) + problem.terms.environment_s) + cheapest


def cheapest_transition_s(problem: ClassProblem, mode: Mode) -> float:
    """A lower bound on the transition cost of any configuration in ``mode`` (``inf``: none is feasible there).

    Every class at its cheapest option among the mode's roles and off, a fixed class at its current role (the
    mode's other roles are off, ``role_active_iff_mode``); the admission pause is left out (it is never
    negative). :func:`mode_bound`'s cost part, and the planner's bound on ranking by predict.
    """
    return _cheapest_transition_s(problem, mode, _least_costs(problem, mode))


def _least_costs(problem: ClassProblem, mode: Mode) -> list[float]:
    """Per class, the cost of its cheapest option among ``mode``'s roles it may take and off."""
    roles = MODE_ROLES[mode]
    least = []
    for c in problem.classes:  # min() over the roles in order, then off: the first of equal values, as min() picks
        cost, eligible = c.cost, c.eligible
        value: float | None = None
        for r in roles:
            if r in eligible and (value is None or cost[r] < value):
                value = cost[r]
        least.append(cost[None] if value is None or cost[None] < value else value)
    return least


def _cheapest_transition_s(problem: ClassProblem, mode: Mode, least: Sequence[float]) -> float:
    """:func:`cheapest_transition_s` given :func:`_least_costs` (the same sum, in the same order)."""
    roles = MODE_ROLES[mode]
    cheapest = 0.0
    for c, least_s in zip(problem.classes, least, strict=True):
        if c.fixed and c.current_role is not None and c.size:
            if c.current_role not in roles or c.current_role not in c.eligible:
                return math.inf  # the class must keep a role this mode switches off
            cheapest += c.size * c.cost[c.current_role]
            continue
        cheapest += c.size * least_s
    return cheapest


def predict_bound_s(
    problem: ClassProblem, totals: Callable[[Mode, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
) -> float:
    """A proven lower bound on ρ·predict + transition cost over every configuration of ``problem`` (any mode).

    ``totals(mode, prefill, decode, colocated)`` is a model's ``predict`` total at many capacities at once, never
    rising when a capacity grows (``predict_totals_s``; the planner's ranking by predict, docs/formulation.md).
    Per mode, each role's capacity runs from nothing to its largest (:func:`max_capacity`: no configuration has
    more), cut into pieces; over a piece the extra transition cost of reaching that capacity is at least its value
    at the piece's start (:func:`_cost_curve`) and ``totals`` at least its value at the piece's end. The least,
    over every piece (and pair of pieces with two roles), of ρ·``totals`` there plus the cheapest transition cost
    (:func:`cheapest_transition_s`) and those extras is below every configuration's objective.

    Returns:
        The bound; ``inf`` when no mode can be served (a role no slot can take, a fixed class the mode switches
        off); ``-inf`` where a role's slots could give it no capacity (``predict`` refuses such a configuration
        rather than rank it, so nothing is pruned).
    """
    bounds = []
    for mode in problem.modes:
        least = _least_costs(problem, mode)
        cheapest_s = _cheapest_transition_s(problem, mode, least)
        if math.isinf(cheapest_s):
            bounds.append(cheapest_s)
            continue
        roles = MODE_ROLES[mode]
        stretches = _stretches(problem, roles, least)
        if not all(stretches[role][1] for role in roles):
            bounds.append(math.inf)  # a role the mode needs has no slot: nothing is feasible here
            continue
        curves = [_pieces(stretches[role][0], max_capacity(problem, role)) for role in roles]
        if min(top for _, _, top in curves) <= 0:
            return -math.inf
        # Every pair of pieces (one role: every piece), as lanes in row-major order; the extras add as meshgrid's
        # sum did (0 + a + b), so the floats are the same.
        if len(curves) == 1:
            ((end, extras, _),) = curves
            lanes = {roles[0]: end}
        else:
            (end_a, extra_a, _), (end_b, extra_b, _) = curves
            lanes = {roles[0]: np.repeat(end_a, len(end_b)), roles[1]: np.tile(end_b, len(end_a))}
            extras = np.add.outer(extra_a, extra_b).ravel()
        none = np.zeros(len(extras))
        makespan_s = totals(mode, *(lanes.get(role, none) for role in ROLES))
        bounds.append(float(np.min(problem.unfinished_fraction * makespan_s + extras)) + cheapest_s)
    return min(bounds, default=math.inf)


def predict_lane_filter(
    problem: ClassProblem,
    totals: Callable[[Mode, np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    cutoff_s: float,
) -> Callable[[Mode, np.ndarray], np.ndarray]:
    """``ratio_sweep``'s ``keep`` for the ranking by predict: drop the candidates that cannot score ``cutoff_s``.

    A candidate of a sweep targets counts of workers per role (a (role, candidate) array); one that meets them
    has at most the capacity of that many of the role's heaviest workers (classes by weight, each up to its
    size: :func:`_most_capacity`) and at most :func:`max_capacity`, so ``totals`` there (never rising with
    capacity, as in :func:`predict_bound_s`), times ρ, plus :func:`cheapest_transition_s` of its mode, is at most
    its score ρ·predict + transition cost (float rounding of the capacities is within the tolerance below).
    A candidate is dropped when that bound is above ``cutoff_s`` by more than the planner's tolerance
    (1e-9, relative) plus 1e-12 for each configuration the sweep could try (the margin ``ratio_sweep`` needs for
    its answer to stay the same). Nothing is dropped in a mode no configuration can serve, or where a role has
    no capacity to give (``predict`` refuses such candidates rather than rank them).
    """
    fraction = problem.unfinished_fraction
    sized = [c for c in problem.classes if c.size]
    most = {r: _most_capacity(sized, r) for r in ROLES}  # (workers, capacity) at each class's end, best first
    top = {r: max_capacity(problem, r) for r in ROLES}
    cheapest = {mode: cheapest_transition_s(problem, mode) for mode in problem.modes}
    margin = 1e-9 * max(1.0, abs(cutoff_s)) + 1e-12 * (sum(c.size for c in sized) + 2)

    def keep(mode: Mode, targets: np.ndarray) -> np.ndarray:
        lanes = targets.shape[1]
        least = cheapest.get(mode, math.inf)
        roles = MODE_ROLES[mode]
        if math.isinf(least) or any(not len(most[r][0]) or top[r] <= 0 for r in roles):
            return np.ones(lanes, dtype=bool)
        capacities = [
            np.minimum(np.interp(targets[i], *most[r]), top[r]) if len(most[r][0]) else np.zeros(lanes)
            for i, r in enumerate(ROLES)
        ]
        with np.errstate(divide="ignore", invalid="ignore"):
            bound = fraction * totals(mode, *capacities) + least
        kept: np.ndarray = ~(bound > cutoff_s + margin)  # a NaN bound keeps its candidate
        return kept

    return keep


def _most_capacity(classes: Sequence[SlotClass], role: Role) -> tuple[np.ndarray, np.ndarray]:
    """The most capacity ``k`` workers of ``role`` can give, as breakpoints for ``np.interp``.

    Classes that may take the role, heaviest worker first, each up to its size: at ``workers[j]`` workers the
    capacity is ``capacity[j]``, linear in between (the j-th class's weight per worker), flat after the last.
    Empty when no class has capacity to give.
    """
    stretches = sorted(
        ((c.weight.get(role, 0.0), c.size) for c in classes if role in c.eligible and c.weight.get(role, 0.0) > 0),
        reverse=True,
    )
    if not stretches:
        return np.zeros(0), np.zeros(0)
    workers = np.concatenate(([0.0], np.cumsum([float(n) for _, n in stretches])))
    capacity = np.concatenate(([0.0], np.cumsum([w * n for w, n in stretches])))
    return workers, capacity


_PIECES = 4
"""Pieces each class's stretch of a role's cost curve is cut into by :func:`predict_bound_s`: more is
tighter and costs more lanes (each a point ``predict_totals_s`` is asked at)."""


def _cost_curve(
    problem: ClassProblem, mode: Mode, role: Role, least: Sequence[float] | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """Pieces of ``role``'s capacity in ``mode``: each piece's end, the least extra cost at its start, the top.

    Every slot of a class costs at least its cheapest option among the mode's roles and off (what
    :func:`cheapest_transition_s` counts); serving ``role`` costs the
    difference more and gives the class's weight. The least extra cost of a capacity is the fractional knapsack
    of those differences, classes in order of extra cost per capacity (a slot given to this role is not given
    to the mode's other role, which only adds cost, so summing the roles' curves stays below). A fixed class
    serving ``role`` adds its capacity at no extra cost. Pieces end at most at ``max_capacity``. ``least`` is
    :func:`_least_costs` where the caller has it.
    """
    least = _least_costs(problem, mode) if least is None else least
    return _pieces(_stretches(problem, (role,), least)[role][0], max_capacity(problem, role))


_Stretch = tuple[float, float, int]
"""A class's stretch of a role's cost curve: (extra cost per worker, capacity per worker, workers)."""


def _stretches(
    problem: ClassProblem, roles: Sequence[Role], least: Sequence[float]
) -> dict[Role, tuple[list[_Stretch], bool]]:
    """Per role of ``roles``: :func:`_cost_curve`'s stretches, in its order, and whether some class may take it.

    :func:`predict_bound_s` runs once per size combination and solve of the ranking by predict: the pass that
    gathers a role's stretches also answers whether the mode can have that role at all.
    """
    found: dict[Role, tuple[list[_Stretch], bool]] = {}
    for role in roles:
        stretches: list[_Stretch] = []
        some = False
        for c, least_s in zip(problem.classes, least, strict=True):
            if not c.size or role not in c.eligible:
                continue
            some = True
            weight = c.weight.get(role, 0.0)
            if weight <= 0:
                continue
            if c.fixed and c.current_role is not None:
                if c.current_role is role:
                    stretches.append((0.0, weight, c.size))
                continue
            stretches.append((c.cost[role] - least_s, weight, c.size))
        stretches.sort(key=lambda s: s[0] / s[1])
        found[role] = (stretches, some)
    return found


def _pieces(stretches: Sequence[_Stretch], top: float) -> tuple[np.ndarray, np.ndarray, float]:
    """:func:`_cost_curve` from its sorted stretches and ``top`` (:func:`max_capacity`)."""
    starts, extras = [], []
    at = cost = 0.0
    for extra, weight, workers in stretches:
        for _ in range(_PIECES):
            if at >= top:
                break
            starts.append(at)
            extras.append(cost)
            at += weight * workers / _PIECES
            cost += extra * workers / _PIECES
    ends = np.minimum(np.array([*starts[1:], at]), top) if starts else np.zeros(0)
    return ends, np.array(extras), top


def max_capacity(problem: ClassProblem, role: Role) -> float:
    """An upper bound on E_role: the LP of the budget and each pool's GPUs, solved greedily.

    Classes fill in order of capacity per GPU, each up to its size, the budget left and its pool's GPUs left
    (the pool's widest node-block row, which counts every class of the pool). The capacities nest (a pool's GPUs
    within the budget), so the greedy order solves this LP exactly; dropping every other row only raises it.

    Memoised on ``problem`` (frozen; the ranking by predict asks each size combination's problem for it in its
    bound, its sweep's filter and the mode bound).
    """
    memo: dict[Role, float] = vars(problem).setdefault("_max_capacity", {})
    top = memo.get(role)
    if top is None:
        top = memo[role] = _max_capacity(problem, role)
    return top


def _max_capacity(problem: ClassProblem, role: Role) -> float:
    """:func:`max_capacity`, worked out."""
    smallest = {p.key: min(p.block_gpus) for p in problem.pools if p.block_gpus}
    pool_left = {p.key: float(p.block_gpus[smallest[p.key]]) for p in problem.pools if p.block_gpus}
    members = [c for c in problem.classes if role in c.eligible and c.weight.get(role, 0.0) > 0 and c.size]
    members.sort(key=lambda c: -c.weight[role] / c.tp)
    budget = float(problem.max_gpus)
    total = 0.0
    for c in members:
        pool = c.pool if c.pool in pool_left and c.tp >= smallest[c.pool] else None  # the row counts c
        room = min(float(c.tp * c.size), budget, pool_left[pool] if pool is not None else math.inf)
        if room <= 0:
            continue
        total += c.weight[role] * room / c.tp
        budget -= room
        if pool is not None:
            pool_left[pool] -= room
    return total


def _solve_mode(
    problem: ClassProblem,
    backend: Backend,
    *,
    time_limit_s: float,
    hint: ClassSolution | None,
    cutoff: float | None,
    pool: CutPool | None = None,
) -> MilpOutcome:
    """The cut loop for a single-mode problem. ``infeasible`` means nothing beats ``cutoff`` here.

    With ``pool`` the loop also starts from the cuts earlier solves found (those valid here), and the cuts its
    rounds add go into it.
    """
    cuts = initial_cuts(problem, hint)
    if pool is not None:
        written = set(cuts)
        cuts += [cut for cut in pool.offered(problem, MODE_ROLES[problem.modes[0]]) if cut not in written]
    best: ClassSolution | None = hint
    bound, wall, rounding = -math.inf, 0.0, 0.0
    # The model without cuts is written once; each round adds the cut rows (kept from round to round) after it,
    # so a round's model is build_model(problem, cuts), row for row.
    without_cuts, columns = build_model(problem, [])
    cut_rows = LinearModel()
    for rounds in range(1, _MAX_CUT_ROUNDS + 1):
        for role, intercept, slope in cuts[len(cut_rows.rows) :]:
            add_cut(cut_rows, problem, columns, role, intercept, slope)
        model = without_cuts.with_rows_of(cut_rows)
        if cutoff is not None:  # cuts under-estimate, so any solution better than the cutoff satisfies this
            model.add_row(
                {j: c for j, c in enumerate(model.cost) if c},
                hi=cutoff - model.offset + 1e-9 * max(1.0, abs(cutoff)),
                name="objective_cutoff",
            )
        if best is not None and backend.capabilities.supports_hint:
            model.hint = _hint_vector(model, columns, problem, best)
        result = _call(backend, model, time_limit_s=max(time_limit_s - wall, 1e-3))
        wall += result.wall_time_s
        rounding = max(rounding, result.rounding_error)
        if result.status == "infeasible":
            status = "optimal" if best is not None else "infeasible"
            return MilpOutcome(best, status, cutoff if cutoff is not None else math.inf, wall, rounds, rounding)
        if not result.has_solution:
            return MilpOutcome(best, "feasible" if best else result.status, bound, wall, rounds, rounding)
        bound = max(bound, result.bound)
        candidate = _decode(problem, columns, result.values)
        if candidate is None:
            return MilpOutcome(best, "feasible" if best else "error", bound, wall, rounds, rounding)
        if best is None or candidate.objective_s < best.objective_s - 1e-12:
            best = candidate
        model_t = result.values[columns.makespan]
        tight = True
        for role, e in candidate.capacity.items():
            if role in candidate.pool_times_s and e > 0:
                exact = candidate.pool_times_s[role]
                if model_t < exact - _CUT_TOLERANCE * max(1.0, exact):
                    found = [(role, *cut) for cut in cuts_near(problem, role, e, window=_REFINE_WINDOW)]
                    cuts.extend(found)
                    if pool is not None:
                        pool.add(problem, found)
                    tight = False
        if tight and (result.status == "optimal" or result.rounded_optimal):
            return MilpOutcome(best, result.status, bound, wall, rounds, rounding)
        if wall >= time_limit_s:
            break
    return MilpOutcome(best, "feasible", bound, wall, rounds, rounding)


def _call(backend: Backend, model: LinearModel, *, time_limit_s: float) -> SolveResult:
    """``backend.solve``, with any failure inside the solver package turned into :class:`SolverError`."""
    try:
        return backend.solve(model, time_limit_s=time_limit_s)
    except PearlSchedError:
        raise
    except Exception as exc:  # a solver package's own bug (CP-SAT TypeError, an IndexError inside PuLP, ...)
        raise SolverError(f"solver backend {backend.name!r} failed: {type(exc).__name__}: {exc}") from exc


def _decode(problem: ClassProblem, columns: _Columns, values: Sequence[float]) -> ClassSolution | None:
    mode = Mode.DISAGGREGATED if values[columns.mode] > 0.5 else Mode.COLOCATED
    counts = tuple(tuple(0 if j is None else round(values[j]) for j in row) for row in columns.by_class)
    return evaluate(problem, mode, counts)  # type: ignore[arg-type]


def _hint_vector(model: LinearModel, columns: _Columns, problem: ClassProblem, solution: ClassSolution) -> list[float]:
    hint = [0.0] * model.num_vars
    for (k, role), j in columns.y.items():
        hint[j] = float(solution.counts[k][ROLES.index(role)])
    hint[columns.mode] = 1.0 if solution.mode is Mode.DISAGGREGATED else 0.0
    hint[columns.makespan] = min(solution.makespan_s - problem.terms.environment_s, model.ub[columns.makespan])
    if columns.admission is not None:
        starts = any(problem.classes[k].pauses_admission and sum(n) > 0 for k, n in enumerate(solution.counts))
        hint[columns.admission] = 1.0 if starts else 0.0
    return hint
