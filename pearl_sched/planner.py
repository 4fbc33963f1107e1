"""``plan()``: cluster state + workload + budget + a makespan model in, a plan out.

The planner is pure: no I/O, no clock (solver wall time is measured and reported, never decided on), no
globals. :func:`plan` runs five steps, each a function here:

1. :func:`_classify` — put every slot in a category: *base* (may serve without a gate), *new preemptible*
   (expansion gate), *new overlap* (borrowing gate), or *out* (preempted, due back to the trainer, or not
   allowed); group slots into classes of interchangeable slots and build the class-level problem over the
   base slots (:mod:`pearl_sched.problem`);
2. :func:`_solve` — solve it: the MILP with PEARL's enumeration as start solution and fallback
   (:class:`_SolveContext`);
3. :func:`_gate` — for each gate of :data:`_GATES`, solve again with its category's slots eligible and keep
   them when the gate passes: new preemptible GPUs (expansion gate), lendable training GPUs (borrowing gate,
   PEARL Eq. 7);
4. :func:`_hysteresis` — solve again with every surviving slot fixed to its current role; a change of ratio
   or mode must beat its threshold against that, unless keeping is infeasible (a forced switch);
5. :func:`_target_and_actions` and :func:`_assemble` — map class counts to slots, emit ordered actions, predict
   the makespan and fill the :class:`~pearl_sched.plans.Plan`.

:func:`_settle` then plans the state the actions lead to; if that asks for more, the plan goes straight to
the settled target, so re-planning a plan's result asks for nothing (docs/reliability.md).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import NamedTuple

import numpy as np

from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.errors import InfeasiblePlanError, SolverError
from pearl_sched.makespan import MakespanModel, PoolCapacity, SizeCount
from pearl_sched.plans import Action, Decision, DecisionKind, Plan, PolicyState, SolverInfo, canonical_json
from pearl_sched.policies import (
    GateDecision,
    borrow_can_pass,
    borrow_gate,
    expansion_can_pass,
    expansion_cost_share,
    expansion_gate,
    expansion_ready_s,
    expected_residence_s,
    hysteresis,
    idle_window_allows_borrow,
    must_return,
)
from pearl_sched.problem import MODE_ROLES, ROLES, ClassProblem, ClassSolution, Counts, GpuPool, SlotClass, evaluate
from pearl_sched.solvers import (
    CutPool,
    enumerate_configurations,
    evaluate_lanes,
    get_backend,
    predict_bound_s,
    predict_lane_filter,
    ratio_sweep,
    solve_class_problem,
)
from pearl_sched.state import (
    GPU,
    ROLLOUT_ROLES,
    ClusterState,
    Mode,
    Role,
    Worker,
    WorkerSize,
    WorkerSizes,
    Workload,
    Zone,
)
from pearl_sched.transition import (
    FLIP_ROLES,
    apply_actions,
    assign_slots,
    assignment_tuple,
    build_actions,
    place_new_workers,
)

logger = logging.getLogger(__name__)

_START_WINDOW = 8  # splits around the balance point tried for the MILP's start solution
_ENUMERATION = "enumeration"


class _Category(Enum):
    BASE = "base"
    NEW_PREEMPTIBLE = "new-preemptible"
    NEW_OVERLAP = "new-overlap"
    OUT = "out"


class _Slot(NamedTuple):  # a tuple: a plan() call makes one per worker slot, several times over
    worker: Worker
    zone: Zone
    gpu_type: str
    tp: int
    node_group: str
    category: _Category
    reason: str
    role: Role | None  # the worker's rollout role now


@dataclass(frozen=True)
class _Classified:
    """Step 1's result: the slots, their classes (full eligibility), each class's category, the base problem.

    With worker sizes, ``layouts`` maps each GPU pool to its nodes' GPUs (for placing new workers) and
    ``gpu_pool`` each pooled GPU to its pool.
    """

    slots: tuple[_Slot, ...]
    classes: tuple[SlotClass, ...]
    category: Mapping[str, _Category]  # class key → category
    base: ClassProblem  # only base classes eligible
    layouts: Mapping[str, Mapping[str, tuple[str, ...]]] | None = None
    gpu_pool: Mapping[str, str] | None = None

    def has(self, category: _Category) -> bool:
        """Whether some class is in ``category``."""
        return any(self.category[c.key] is category for c in self.classes)

    def widen(self, problem: ClassProblem, category: _Category) -> ClassProblem:
        """``problem`` with the classes of ``category`` made eligible."""
        return problem.with_classes(
            [
                replace(c, eligible=full.eligible) if self.category[full.key] is category else c
                for c, full in zip(problem.classes, self.classes, strict=True)
            ]
        )


@dataclass(frozen=True)
class _Solved:
    """A solve's answer and the lower bound it proved (None for the enumeration or an unproven incumbent)."""

    solution: ClassSolution
    bound_s: float | None


@dataclass
class _SolveContext:
    """The several solves of one plan() call: the resolved backend and the bookkeeping for ``SolverInfo``."""

    backend: str  # a registry name, or "enumeration"
    time_limit_s: float
    mode: Mode | None = None  # the mode of the state planned (None: nothing serves)
    count: int = 0
    wall_s: float = 0.0
    rounds: int = 0
    rounding_error: float = 0.0
    statuses: tuple[str, ...] = ()
    earlier: list[ClassSolution] = field(default_factory=list)  # with worker sizes: start candidates
    ranker: _PredictRanker | None = None  # rank_by_predict / mode_by_predict: candidates ranked by predict
    cuts: CutPool | None = None  # the makespan cuts of the call's earlier solves (docs/formulation.md)

    def solve(self, problem: ClassProblem) -> _Solved | None:
        """The best configuration of ``problem``, or None when nothing is feasible.

        By the surrogate (the MILP's objective), or with ``ranker`` by the model's own ``predict`` over the
        candidates :meth:`_ranked` gathers; a ranked answer has no proven bound.
        """
        solved = self._solve_surrogate(problem)
        if solved is None or self.ranker is None:
            return solved
        return _Solved(self._ranked(problem, solved.solution, self.ranker), None)

    def _ranked(self, problem: ClassProblem, incumbent: ClassSolution, ranker: _PredictRanker) -> ClassSolution:
        """The best by ``predict`` of the surrogate's candidates, then of their neighbours (docs/formulation.md).

        Candidates: the surrogate's optimum, each other mode's surrogate optimum (one more MILP), the status quo
        and earlier answers, and PEARL's ratio sweep ranked by ``predict`` — over every class, and with worker
        sizes once per combination of one size per role. A steepest descent over one-worker moves follows. The
        other mode's MILP and a size combination's sweep are skipped where :meth:`_PredictRanker.bound_s` proves
        they cannot beat a candidate already scored (the same answer, docs/formulation.md).
        """
        candidates: list[ClassSolution | None] = [incumbent]
        if not ranker.modes_only:
            candidates += [_status_quo(problem, self.mode)]
            candidates += [evaluate(problem, e.mode, e.counts) for e in self.earlier]
        scored = [ranker.score(problem, c) for c in candidates if c is not None]
        # A candidate whose proven lower bound is above a score already in hand cannot be the first of the
        # least (ranker.bound_s): its MILP or sweep is skipped, and the answer is the same.
        cutoff_s = min(c.objective_s for c in scored)
        if self.backend != _ENUMERATION:
            for mode in problem.modes:
                if mode is not incumbent.mode:
                    sub = replace(problem, modes=(mode,))
                    if ranker.bound_s(sub) > cutoff_s + 1e-9 * max(1.0, abs(cutoff_s)):
                        continue
                    optimum = self._mode_optimum(sub)
                    if optimum is not None:
                        scored.append(ranker.score(problem, optimum))
                        cutoff_s = min(cutoff_s, scored[-1].objective_s)
        if ranker.modes_only:  # PolicyConfig.mode_by_predict: the modes' optima only
            return min(scored, key=lambda c: c.objective_s)  # the first of equals: the surrogate's own answer
        # Every split at every usable worker, without the search's fallbacks to fewer workers and brute force:
        # those answer infeasible variants slowly, and the descent tries fewer.
        lanes = ranker.lane_scorer(problem)
        for variant in (problem, *_size_variants(problem, ranker.restricted)):
            # The whole problem's bound is never above a score in hand (every candidate so far is one of its
            # configurations), so it is not worked out; a size combination's may be.
            if variant is not problem and ranker.bound_s(variant) > cutoff_s + 1e-9 * max(1.0, abs(cutoff_s)):
                continue
            # Splits whose proven bound is above the score in hand are not assigned (the same answer wherever it
            # can matter, ratio_sweep); the whole problem's sweep too.
            keep = ranker.lane_filter(variant, cutoff_s)
            swept = ratio_sweep(variant, rescore=lambda c: ranker.score(problem, c), rescore_lanes=lanes, keep=keep)
            if swept is not None:
                scored.append(ranker.score(problem, swept))
                cutoff_s = min(cutoff_s, scored[-1].objective_s)
        best = min(scored, key=lambda c: c.objective_s)  # the first of equals: the surrogate's own answer
        return ranker.descend(problem, best)

    def _mode_optimum(self, problem: ClassProblem) -> ClassSolution | None:
        """The surrogate's optimum of ``problem`` (restricted to one mode), or None when it has none."""
        hint = enumerate_configurations(problem, window=_START_WINDOW)
        try:
            outcome = solve_class_problem(
                problem, get_backend(self.backend), time_limit_s=self.time_limit_s, hint=hint, cuts=self.cuts
            )
        except SolverError as exc:
            logger.warning("%s; ranking without that mode's optimum", exc)
            return hint
        self.wall_s += outcome.wall_time_s
        self.rounds += outcome.rounds
        return outcome.solution if outcome.solution is not None else hint

    def _solve_surrogate(self, problem: ClassProblem) -> _Solved | None:
        """The best configuration of ``problem`` by the surrogate, or None when nothing is feasible."""
        self.count += 1
        if self.backend == _ENUMERATION:
            self.statuses += ("enumerated",)
            enumerated = enumerate_configurations(problem)
            return _Solved(enumerated, None) if enumerated is not None else None
        # Start from the better of PEARL's enumeration and the current assignment (nothing optional changed).
        candidates = [enumerate_configurations(problem, window=_START_WINDOW), _status_quo(problem, self.mode)]
        if problem.pools:  # with worker sizes PEARL's sweep starts far off; earlier answers (same classes) start nearer
            candidates += [evaluate(problem, e.mode, e.counts) for e in self.earlier]
        start_solution = min((c for c in candidates if c is not None), key=lambda c: c.objective_s, default=None)
        try:
            outcome = solve_class_problem(
                problem, get_backend(self.backend), time_limit_s=self.time_limit_s, hint=start_solution, cuts=self.cuts
            )
        except SolverError as exc:
            return self._fallback(problem, exc)
        self.wall_s += outcome.wall_time_s
        self.rounds += outcome.rounds
        self.rounding_error = max(self.rounding_error, outcome.rounding_error)
        status = outcome.status
        if outcome.status not in ("optimal", "feasible") and start_solution is not None:
            status = "fallback-enumeration"
        self.statuses += (status,)
        if outcome.status == "no_solution" and start_solution is not None:
            logger.warning(
                "solver %s found no solution in %.3f s; using the enumeration",
                self.backend,
                self.time_limit_s,
            )
        solution = outcome.solution if outcome.solution is not None else start_solution
        if solution is None:
            return None
        if problem.pools:
            self.earlier.append(solution)
        proven = solution is outcome.solution and outcome.status == "optimal" and math.isfinite(outcome.bound_s)
        return _Solved(solution, outcome.bound_s if proven else None)

    def _fallback(self, problem: ClassProblem, error: SolverError) -> _Solved | None:
        """After a backend failure: PEARL's full enumeration answers instead (docs/reliability.md)."""
        logger.warning("%s; using the enumeration", error)
        self.statuses += ("solver-error-fallback-enumeration",)
        enumerated = enumerate_configurations(problem)
        return _Solved(enumerated, None) if enumerated is not None else None

    def feasible(self, problem: ClassProblem) -> bool:
        """Whether some configuration of ``problem`` is feasible."""
        return self._solve_surrogate(problem) is not None


_DESCENT_STEPS = 32
"""One-worker moves the descent of :class:`_PredictRanker` makes at most per solve (each the best of its step)."""


class _PredictRanker:
    """``PolicyConfig.rank_by_predict``: configurations scored with the model's own ``predict``.

    The score of a configuration is the exact objective of :func:`~pearl_sched.problem.evaluate` (constraints,
    transition costs) with the makespan ``predict`` gives on its workers in place of the surrogate's
    ``fixed + work/E`` (docs/formulation.md, "Ranking by predict").
    """

    def __init__(self, model: MakespanModel, workload: Workload, *, modes_only: bool = False) -> None:
        """A ranker for ``workload`` under ``model``; predictions are memoised by the capacity they are asked at.

        ``modes_only`` (``PolicyConfig.mode_by_predict``): the candidates are each mode's surrogate optimum only —
        no status quo, earlier answers, ratio sweeps or descent.

        A configuration's :class:`~pearl_sched.makespan.PoolCapacity` (its mode, capacities and workers by size)
        is all ``predict`` reads besides the workload, so one ranker serves every solve of one plan() call,
        whichever state and classes a solve plans (the settle passes plan the states the actions lead to).
        """
        self._model = model
        self.workload = workload
        self.modes_only = modes_only
        self._makespans: dict[_CapacityKey, float] = {}
        self._totals = _vectorised_totals(model)
        self._lanes = _lane_predictor(model)
        self.restricted: _Restricted = {}  # the size variants' classes, made once per call (_size_variants)

    def lane_scorer(self, problem: ClassProblem) -> _LaneScorer | None:
        """:meth:`score`'s objective for many candidates of ``problem`` at once, or None without a vectorised model.

        A model with ``predict_totals_s`` (PEARL's, :class:`~pearl_sched.makespan.PearlMakespanModel`) predicts
        every lane of a sweep in one numpy call, float for float what :meth:`score` gets from ``predict``; a
        lane without capacity in a role its mode needs (``predict`` refuses it) sends the sweep back to
        :meth:`score`, candidate by candidate. A model with ``predict_lanes_s`` instead (the improved one,
        :class:`~pearl_sched.makespan_improved.ImprovedMakespanModel`) predicts each lane's whole configuration,
        its workers made from the lane's class counts as :func:`_capacity_key` makes them, float for float too.
        """
        totals = self._totals
        workload, fraction = self.workload, problem.unfinished_fraction
        if totals is None:
            many = self._lanes
            if many is None:
                return None
            sizes = [(c.gpu_type, c.tp) for c in problem.classes]

            def whole(
                mode: Mode, capacities: np.ndarray, transition_s: np.ndarray, counts: np.ndarray
            ) -> np.ndarray | None:
                configurations = []
                per_lane = counts.transpose(2, 0, 1).tolist()  # (lane, class, role)
                for cap, lane in zip(capacities.T.tolist(), per_lane, strict=True):
                    tally: dict[tuple[Role, str, int], int] = {}
                    for (gpu_type, tp), n in zip(sizes, lane, strict=True):
                        for i, role in enumerate(ROLES):
                            if n[i] > 0:
                                tally[(role, gpu_type, tp)] = tally.get((role, gpu_type, tp), 0) + n[i]
                    workers = tuple((r, g, t, k) for (r, g, t), k in tally.items())  # as _capacity_key
                    configurations.append(_capacity_of((mode, cap[0], cap[1], cap[2], workers)))
                makespan_s = many(workload, configurations)
                if not np.isfinite(makespan_s).all():
                    return None
                result: np.ndarray = fraction * makespan_s + transition_s
                return result

            return whole

        def objectives(
            mode: Mode, capacities: np.ndarray, transition_s: np.ndarray, counts: np.ndarray
        ) -> np.ndarray | None:
            makespan_s = totals(workload, mode, capacities[0], capacities[1], capacities[2])
            if not np.isfinite(makespan_s).all():
                return None
            result: np.ndarray = fraction * makespan_s + transition_s  # score's objective, lane by lane
            return result

        return objectives

    def bound_s(self, problem: ClassProblem) -> float:
        """A proven lower bound on :meth:`score`'s objective of any configuration of ``problem`` (any mode).

        :func:`~pearl_sched.solvers.predict_bound_s` with this ranker's vectorised ``predict``; ``-inf`` (nothing
        is pruned) for a model without ``predict_totals_s``.
        """
        totals = self._totals
        if totals is None:
            return -math.inf
        workload = self.workload
        return predict_bound_s(problem, lambda mode, p, d, c: totals(workload, mode, p, d, c))

    def lane_filter(self, problem: ClassProblem, cutoff_s: float) -> Callable[[Mode, np.ndarray], np.ndarray] | None:
        """``ratio_sweep``'s ``keep`` for a sweep of ``problem`` under a score ``cutoff_s`` in hand, or None.

        :func:`~pearl_sched.solvers.predict_lane_filter` with this ranker's vectorised ``predict``; None (every
        split assigned) for a model without ``predict_totals_s``.
        """
        totals = self._totals
        if totals is None:
            return None
        workload = self.workload
        return predict_lane_filter(problem, lambda mode, p, d, c: totals(workload, mode, p, d, c), cutoff_s)

    def score(self, problem: ClassProblem, solution: ClassSolution) -> ClassSolution:
        """``solution`` with ``predict``'s makespan and the objective it gives (pool times stay the surrogate's)."""
        key = _capacity_key(solution, problem)
        makespan_s = self._makespans.get(key)
        if makespan_s is None:
            capacity = _capacity_of(key)
            makespan_s = self._makespans[key] = self._model.predict(self.workload, capacity).total_s
        objective_s = problem.unfinished_fraction * makespan_s + solution.transition_cost_s
        return ClassSolution(  # dataclasses.replace, spelled out: this runs once per candidate of every sweep
            solution.mode,
            solution.counts,
            makespan_s,
            solution.pool_times_s,
            solution.transition_cost_s,
            objective_s,
            solution.capacity,
        )

    def descend(self, problem: ClassProblem, start: ClassSolution) -> ClassSolution:
        """Steepest descent from ``start`` (scored) over one-worker moves, at most :data:`_DESCENT_STEPS` steps."""
        current = start
        lanes = self.lane_scorer(problem)
        for _ in range(_DESCENT_STEPS):
            step = current
            moves = _moves(problem, current)
            objectives = self._lane_objectives(problem, current, moves, lanes) if moves else None
            if objectives is not None:  # the loop below, on the objectives alone: the first of the best wins
                winner, best_s = -1, step.objective_s
                for j, objective_s in objectives:
                    if objective_s < best_s - 1e-12:
                        winner, best_s = j, objective_s
                if winner >= 0:
                    solution = evaluate(problem, current.mode, _moved(current.counts, *moves[winner]))
                    assert solution is not None  # evaluate_lanes found it feasible, and the two agree
                    step = self.score(problem, solution)
            else:
                for move in moves:
                    candidate = evaluate(problem, current.mode, _moved(current.counts, *move))
                    if candidate is None:
                        continue
                    candidate = self.score(problem, candidate)
                    if candidate.objective_s < step.objective_s - 1e-12:
                        step = candidate
            if step is current:
                break
            current = step
        return current

    @staticmethod
    def _lane_objectives(
        problem: ClassProblem, current: ClassSolution, moves: list[_Move], lanes: _LaneScorer | None
    ) -> list[tuple[int, float]] | None:
        """The feasible ones of the configurations ``moves`` lead to (by index) and their objectives; None without.

        Scored in lanes: the (class, role, lane) counts are ``current``'s with each lane's move, made in numpy.
        """
        if lanes is None:
            return None
        counts = np.repeat(np.array(current.counts, dtype=np.int64)[:, :, None], len(moves), axis=2)
        classes = np.array([k for k, _ in moves])
        counts[classes, :, np.arange(len(moves))] = np.array([n for _, n in moves], dtype=np.int64)
        ok, capacities, transition_s = evaluate_lanes(problem, current.mode, counts)
        if not ok.any():
            return []
        objectives = lanes(current.mode, capacities[:, ok], transition_s[ok], counts[:, :, ok])
        if objectives is None:
            return None
        return list(zip(np.flatnonzero(ok).tolist(), objectives.tolist(), strict=True))


_Move = tuple[int, tuple[int, int, int]]
"""A one-worker move: a class and its counts after the move."""


def _moves(problem: ClassProblem, solution: ClassSolution) -> list[_Move]:
    """The moves to the configurations one worker away in ``solution``'s mode: one more, one fewer, or one re-roled."""
    active = [i for i, role in enumerate(ROLES) if role in MODE_ROLES[solution.mode]]
    found: list[_Move] = []
    for k, cls in enumerate(problem.classes):
        if cls.fixed:
            continue
        n = solution.counts[k]
        roles = [i for i in active if ROLES[i] in cls.eligible]
        moves: list[dict[int, int]] = []  # role index → change of count
        for i in roles:
            if sum(n) < cls.size:
                moves.append({i: +1})
            if n[i] > 0:
                moves.append({i: -1})
                moves += [{i: -1, j: +1} for j in roles if j != i]
        for move in moves:
            found.append((k, (n[0] + move.get(0, 0), n[1] + move.get(1, 0), n[2] + move.get(2, 0))))
    return found


def _moved(counts: Counts, k: int, n: tuple[int, int, int]) -> Counts:
    """``counts`` with class ``k``'s counts replaced by ``n``."""
    return (*counts[:k], n, *counts[k + 1 :])


_Restricted = dict[tuple[object, ...], tuple[SlotClass, SlotClass]]
"""(id of a class, a mode, one size per role of the mode) and (id of a class, an eligibility) → (that class, it
restricted to them): :func:`_size_variants`."""

_SLOT_FIELDS = tuple(f.name for f in fields(SlotClass))


def _with_eligible(cls: SlotClass, eligible: frozenset[Role]) -> SlotClass:
    """``dataclasses.replace(cls, eligible=eligible)``, field for field, without the dataclass's checked __init__.

    The size variants make hundreds of these per plan() call; ``replace`` goes through ``__init__`` and its frozen
    ``object.__setattr__`` per field, several times this copy's cost. Only the fields are copied (cached properties
    are worked out again on the copy).
    """
    made = object.__new__(SlotClass)
    values = vars(cls)
    vars(made).update({name: values[name] for name in _SLOT_FIELDS})
    object.__setattr__(made, "eligible", eligible)
    return made


def _size_variants(problem: ClassProblem, restricted: _Restricted | None = None) -> list[ClassProblem]:
    """With worker sizes, per mode and combination of one size per serving role, the problem restricted to it.

    PEARL's ratio sweep fills roles by its minimal-change order across sizes; run on each variant it sweeps the
    ratio at that combination of sizes. Classes outside every pool (overlap GPUs) keep their roles.

    ``restricted`` memoises each pooled class at each combination; the ranker passes one dict for a whole plan()
    call, so the classes the solves of the call share (a gate widens a problem by replacing some of its classes
    only) are restricted once. An entry holds its class, so the id it is keyed by stays that class's.
    """
    if not problem.pools:
        return []
    variants = []
    restricted = {} if restricted is None else restricted

    for mode in problem.modes:
        roles = MODE_ROLES[mode]
        options = [sorted({c.tp for c in problem.classes if c.pool is not None and r in c.eligible}) for r in roles]
        for sizes in itertools.product(*options):
            chosen = dict(zip(roles, sizes, strict=True))
            classes = []
            for c in problem.classes:
                if c.pool is not None:
                    entry = restricted.get((id(c), mode, sizes))
                    if entry is None:
                        eligible = frozenset(r for r in c.eligible if chosen.get(r) == c.tp)
                        entry = restricted.get((id(c), eligible))
                        if entry is None:
                            made = c if eligible == c.eligible else _with_eligible(c, eligible)
                            entry = restricted[id(c), eligible] = (c, made)
                        restricted[id(c), mode, sizes] = entry
                    c = entry[1]
                classes.append(c)
            variants.append(
                ClassProblem(
                    tuple(classes),
                    problem.terms,
                    problem.unfinished_fraction,
                    problem.max_gpus,
                    problem.kv_required_bytes,
                    problem.min_prefill_tokens_per_s,
                    problem.admission_pause_s,
                    (mode,),
                    problem.pools,
                )
            )
    return variants


_Totals = Callable[[Workload, Mode, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
_LaneScorer = Callable[[Mode, np.ndarray, np.ndarray, np.ndarray], "np.ndarray | None"]
"""``solvers.enumeration.LaneScorer``: a sweep's objectives in lanes (``ratio_sweep``'s ``rescore_lanes``)."""


def _vectorised_totals(model: MakespanModel) -> _Totals | None:
    """The model's ``predict_totals_s`` where the same class defines it and ``predict``, else None.

    A subclass that redefines ``predict`` alone would leave the vectorised form predicting its parent's model.
    """
    for klass in type(model).__mro__:
        defines = vars(klass)
        if "predict" in defines or "predict_totals_s" in defines:
            if "predict" in defines and "predict_totals_s" in defines:
                totals: _Totals = model.predict_totals_s  # type: ignore[attr-defined]
                return totals
            return None
    return None


def _lane_predictor(model: MakespanModel) -> Callable[[Workload, list[PoolCapacity]], np.ndarray] | None:
    """The model's ``predict_lanes_s`` where the same class defines it and ``predict``, else None.

    As :func:`_vectorised_totals`: a subclass that redefines ``predict`` alone gets no lanes.
    """
    for klass in type(model).__mro__:
        defines = vars(klass)
        if "predict" in defines or "predict_lanes_s" in defines:
            if "predict" in defines and "predict_lanes_s" in defines:
                return model.predict_lanes_s  # type: ignore[attr-defined, no-any-return]
            return None
    return None


def _ranker(model: MakespanModel, workload: Workload, policy: PolicyConfig) -> _PredictRanker | None:
    """The ranker of ``PolicyConfig.rank_by_predict`` (resolved by :func:`plan`), or None: the surrogate ranks.

    With ``rank_by_predict`` off, ``PolicyConfig.mode_by_predict`` and a memory-aware model, a ranker of the modes'
    optima only. A model that is not memory aware gets none for that: PEARL's surrogate is its ``predict`` (the fit
    is exact in PEARL's limit), so the check could not differ.
    """
    if policy.rank_by_predict:
        return _PredictRanker(model, workload)
    if policy.mode_by_predict and _memory_aware(model):
        return _PredictRanker(model, workload, modes_only=True)
    return None


def plan(
    state: ClusterState,
    model: MakespanModel,
    *,
    current: Plan | None = None,
    costs: TransitionCosts | None = None,
    policy: PolicyConfig | None = None,
    policy_state: PolicyState | None = None,
    backend: str = "auto",
    time_limit_s: float = 2.0,
) -> Plan:
    """Choose the PD mode, the P:D counts and the least disruptive transition for ``state``.

    The five steps of the module docstring: classify → solve → gate → hysteresis → assemble.

    Args:
        state: GPUs, worker slots, the rollout workload and the budget.
        model: A makespan predictor, e.g. :class:`~pearl_sched.makespan.PearlMakespanModel`.
        current: The plan in force; its ``policy_state`` is carried over unless ``policy_state`` is given.
        costs: Reconfiguration costs (default: PEARL Table 3).
        policy: Policy thresholds (default: Libra's thresholds).
        policy_state: State the policies carry between decisions.
        backend: ``"auto"`` (the measured default), a name from ``pearl_sched.solvers.available_backends()``,
            or ``"enumeration"`` (PEARL's search, no solver).
        time_limit_s: Per solve; on expiry the best incumbent, else the enumeration result, is used. A backend
            that fails (an exception inside its package, a ``SolverError``) is logged and the enumeration
            answers instead (status ``solver-error-fallback-enumeration``).

    Returns:
        The plan: mode, counts, slot assignment, ordered actions, predicted makespan, decision and solver info.

    Raises:
        InfeasiblePlanError: When no configuration fits; it carries the minimum GPUs needed and the binding
            constraint.
        SolverUnavailableError: When ``backend`` names a backend whose package is not installed.
        ValueError: When ``backend`` is unknown or ``time_limit_s`` is not a positive finite number.
    """
    costs = costs or TransitionCosts()
    policy = policy or PolicyConfig()
    pstate = policy_state or (current.policy_state if current is not None else PolicyState())
    if not (time_limit_s > 0 and math.isfinite(time_limit_s)):
        raise ValueError(f"time_limit_s must be a positive finite number, got {time_limit_s!r}")
    resolved = backend if backend == _ENUMERATION else get_backend(backend).name  # fails early with the extra
    digest = input_digest(state, model, costs, policy, pstate, resolved)
    label = backend if backend != "auto" else f"auto:{resolved}"
    if policy.rank_by_predict is None:  # the default, resolved once for every pass (they share the sizes)
        policy = policy.model_copy(update={"rank_by_predict": state.worker_sizes is not None})

    classified: dict[int, tuple[ClusterState, _Classified]] = {}

    def classify(at: ClusterState) -> _Classified:  # step 1, once per state: _compose classifies ``state`` again
        seen = classified.get(id(at))
        if seen is None or seen[0] is not at:
            seen = classified[id(at)] = (at, _classify(at, model, costs, policy))
        return seen[1]

    ranker = _ranker(model, state.workload, policy)  # its predictions serve every pass of this call
    cuts = CutPool()  # and the makespan cuts its solves find serve the later solves

    def once(at: ClusterState, *, settle_check: bool = False) -> Plan | None:
        args = (model, classify(at), costs, policy, pstate, resolved, time_limit_s, label, digest)
        shared = ranker if ranker is None or at.workload == ranker.workload else _ranker(model, at.workload, policy)
        return _plan_once(at, *args, ranker=shared, cuts=cuts, settle_check=settle_check)

    first = once(state)
    assert first is not None  # only a settle check answers None
    return _settle(state, model, first, once, classify, label, digest, pstate, policy)


def _plan_once(
    state: ClusterState,
    model: MakespanModel,
    classified: _Classified,
    costs: TransitionCosts,
    policy: PolicyConfig,
    pstate: PolicyState,
    resolved: str,
    time_limit_s: float,
    label: str,
    digest: str,
    *,
    ranker: _PredictRanker | None = None,
    cuts: CutPool | None = None,
    settle_check: bool = False,
) -> Plan | None:
    """Steps 2-5 once, for ``state`` as given and ``classified`` (its step 1).

    ``ranker`` is ``PolicyConfig.rank_by_predict``'s or ``mode_by_predict``'s (None: the surrogate ranks);
    ``cuts`` the call's pool of makespan cuts (None: each solve starts from its own).

    With ``settle_check`` (:func:`_settle` planning the state a plan leads to), a plan with no actions is not
    assembled: None says the state is settled, which is all :func:`_settle` reads of such a plan.
    """
    solves = _SolveContext(resolved, time_limit_s, mode=state.mode, ranker=ranker, cuts=cuts)
    problem, best = classified.base, _solve(classified.base, solves)  # step 2
    reasons: list[str] = []
    if state.worker_sizes is not None:
        resized = sum(
            c.size
            for c in classified.classes
            if c.current_role is not None
            and c.current_role not in c.eligible
            and classified.category[c.key] is not _Category.OUT
        )
        if resized:
            reasons.append(f"resize: {resized} serving worker(s) at a size their role does not allow")
    inputs = _GateInputs(pstate, costs, policy, _idle_window_s(state, classified.slots))
    for gate in _GATES:  # step 3
        problem, best = _gate(gate, classified, problem, best, inputs, solves, reasons)
    if best is None:
        raise _diagnose(problem.with_classes(classified.classes), solves)
    decision, chosen = _hysteresis(state, problem, best, solves, policy, reasons)  # step 4
    target, actions = _target_and_actions(state, classified, problem, chosen.solution.counts)  # step 5
    if settle_check and not actions:
        return None
    return _assemble(
        state,
        model,
        classified,
        problem,
        chosen,
        decision,
        solves,
        target,
        actions,
        backend=label,
        digest=digest,
        pstate=pstate,
    )


_SETTLE_STEPS = 3


def _settle(
    state: ClusterState,
    model: MakespanModel,
    first: Plan,
    once: Callable[..., Plan | None],
    classify: Callable[[ClusterState], _Classified],
    label: str,
    digest: str,
    pstate: PolicyState,
    policy: PolicyConfig,
) -> Plan:
    """The plan whose result re-plans to no actions: the configuration the control loop settles in.

    The gates and the hysteresis compare configurations whose transition costs depend on the state they start
    from; once a transition is paid, the state after it can pass a gate the state before did not (an admission
    pause already paid makes borrowing worth it). So the actions are applied and the result planned again; when
    that asks for more, the plan goes straight to its target from ``state`` (one transition, not two), and is
    checked again, at most :data:`_SETTLE_STEPS` times. ``once(at, settle_check=True)`` plans ``at`` and answers
    None when that plan has no actions (it is then not assembled).
    """
    current = first
    for _ in range(_SETTLE_STEPS):
        if not current.actions:
            return current
        after = once(apply_actions(state, current.actions), settle_check=True)
        if after is None:  # the state the actions lead to asks for nothing more
            return current
        composed = _compose(state, model, current, after, classify(state), label, digest, pstate, policy)
        if composed is None:
            break
        current = composed
    logger.warning("plan did not settle in %d steps; the control loop will finish the transition", _SETTLE_STEPS)
    return current


def _compose(
    state: ClusterState,
    model: MakespanModel,
    first: Plan,
    then: Plan,
    classified: _Classified,
    label: str,
    digest: str,
    pstate: PolicyState,
    policy: PolicyConfig,
) -> Plan | None:
    """A plan from ``state`` straight to ``then``'s target (``then`` planned the state ``first`` leads to).

    ``classified`` is step 1 for ``state``, as the first plan made it.
    """
    problem = classified.base.with_classes(classified.classes)
    if classified.gpu_pool is None:
        target = then.roles()
        counts = tuple(tuple(sum(1 for sid in c.slot_ids if target[sid] is r) for r in ROLES) for c in problem.classes)
    else:
        final = apply_actions(apply_actions(state, first.actions), then.actions)
        counts = _counts_in(final, state, problem, classified.gpu_pool)
    solution = evaluate(problem, then.mode, counts)  # type: ignore[arg-type]
    if solution is None:  # cannot happen: a slot eligible after the transition was eligible before it
        return None
    ranker = _ranker(model, state.workload, policy)
    if ranker is not None:
        solution = ranker.score(problem, solution)
    kind = first.decision.kind
    if kind not in (DecisionKind.INITIAL, DecisionKind.FORCED) and then.decision.kind is not DecisionKind.KEPT:
        kind = then.decision.kind
    decision = Decision(
        kind=kind, reason=f"{first.decision.reason}; then, with that transition paid: {then.decision.reason}"
    )
    target, actions = _target_and_actions(state, classified, problem, solution.counts)
    solves = _SolveContext(
        first.solver.backend,
        1.0,
        mode=state.mode,
        count=first.solver.solves + then.solver.solves,
        wall_s=first.solver.wall_time_s + then.solver.wall_time_s,
        rounds=first.solver.rounds + then.solver.rounds,
        rounding_error=max(first.solver.rounding_error, then.solver.rounding_error),
        statuses=(first.solver.status, then.solver.status),
    )
    return _assemble(
        state,
        model,
        classified,
        problem,
        _Solved(solution, None),
        decision,
        solves,
        target,
        actions,
        backend=label,
        digest=digest,
        pstate=pstate,
    )


def _counts_in(
    final: ClusterState, start: ClusterState, problem: ClassProblem, gpu_pool: Mapping[str, str]
) -> tuple[tuple[int, int, int], ...]:
    """The class counts of ``final`` in ``start``'s problem: kept slots by class, other workers as new ones."""
    before = {w.id: w.gpu_ids for w in start.workers}
    role_of = {w.id: w.rollout_role for w in final.workers}
    counts: list[tuple[int, int, int]] = []
    new = [w for w in final.workers if before.get(w.id) != w.gpu_ids and w.rollout_role is not None]
    for c in problem.classes:
        if c.is_new:
            mine = [w for w in new if gpu_pool.get(w.gpu_ids[0]) == c.pool and (w.tp, w.dp) == (c.tp, c.dp)]
            p, d, k = (sum(1 for w in mine if w.rollout_role is r) for r in ROLES)
        else:
            p, d, k = (sum(1 for sid in c.slot_ids if sid in role_of and role_of[sid] is r) for r in ROLES)
        counts.append((p, d, k))
    return tuple(counts)


def _solve(problem: ClassProblem, solves: _SolveContext) -> _Solved | None:
    """Step 2: the best configuration of the base problem (None when only gated slots could make one)."""
    return solves.solve(problem)


@dataclass(frozen=True)
class _GateInputs:
    """What the gates weigh besides the two makespans.

    The policy state, costs, thresholds and horizon, the idle window of the lendable training GPUs (None
    when none can be lent), and the preparation already done on the new preemptible GPUs weighed.
    """

    pstate: PolicyState
    costs: TransitionCosts
    policy: PolicyConfig
    idle_window_s: float | None
    prepared_s: float = 0.0  # preparation done on the new preemptible GPUs the expansion gate weighs

    def expansion_share(self, makespan_s: float, unfinished_fraction: float) -> float:
        """:func:`~pearl_sched.policies.expansion_cost_share` of a batch predicted at ``makespan_s``."""
        return expansion_cost_share(
            makespan_s, unfinished_fraction, self.pstate, self.costs, self.policy, self.prepared_s
        )


@dataclass(frozen=True)
class _GateSpec:
    """One gate of step 3: which slots it admits and the policy that decides.

    ``decide(makespan_without_s, makespan_with_s, unfinished_fraction, inputs)`` is the policy;
    ``can_pass(makespan_without_s, makespan_lower_bound_s, unfinished_fraction, inputs)`` says whether any
    configuration no faster than the bound could pass it, for skipping a solve that cannot.
    """

    category: _Category
    flag: str
    decide: Callable[[float, float, float, _GateInputs], GateDecision]
    can_pass: Callable[[float, float, float, _GateInputs], bool]


def _expansion(without_s: float, with_s: float, rho: float, inputs: _GateInputs) -> GateDecision:
    return expansion_gate(
        makespan_without_s=without_s,
        makespan_with_s=with_s,
        unfinished_fraction=rho,
        state=inputs.pstate,
        costs=inputs.costs,
        config=inputs.policy,
        prepared_s=inputs.prepared_s,
    )


def _expansion_can_pass(without_s: float, lower_s: float, rho: float, inputs: _GateInputs) -> bool:
    return expansion_can_pass(
        makespan_without_s=without_s,
        makespan_lower_bound_s=lower_s,
        unfinished_fraction=rho,
        state=inputs.pstate,
        costs=inputs.costs,
        config=inputs.policy,
        prepared_s=inputs.prepared_s,
    )


def _borrow(without_s: float, with_s: float, rho: float, inputs: _GateInputs) -> GateDecision:
    return borrow_gate(
        makespan_dedicated_s=without_s,
        makespan_full_s=with_s,
        unfinished_fraction=rho,
        state=inputs.pstate,
        costs=inputs.costs,
        config=inputs.policy,
        idle_window_s=inputs.idle_window_s,
    )


def _borrow_can_pass(without_s: float, lower_s: float, rho: float, inputs: _GateInputs) -> bool:
    return borrow_can_pass(
        makespan_dedicated_s=without_s,
        makespan_lower_bound_s=lower_s,
        unfinished_fraction=rho,
        state=inputs.pstate,
        costs=inputs.costs,
        config=inputs.policy,
        idle_window_s=inputs.idle_window_s,
    )


_GATES: tuple[_GateSpec, ...] = (
    _GateSpec(_Category.NEW_PREEMPTIBLE, "expand", _expansion, _expansion_can_pass),
    _GateSpec(_Category.NEW_OVERLAP, "borrow", _borrow, _borrow_can_pass),
)
"""Step 3's gates, in the order they are asked."""


def _gate(
    gate: _GateSpec,
    classified: _Classified,
    problem: ClassProblem,
    best: _Solved | None,
    inputs: _GateInputs,
    solves: _SolveContext,
    reasons: list[str],
) -> tuple[ClassProblem, _Solved | None]:
    """Step 3, one gate: the problem and best configuration after asking it; its sentence goes to ``reasons``."""
    if not classified.has(gate.category):
        return problem, best
    wider = classified.widen(problem, gate.category)
    prepared = _prepared_by_class(classified, inputs.costs) if gate.category is _Category.NEW_PREEMPTIBLE else {}
    # The most any candidate has prepared: an upper bound for skipping and for the batch in flight's share.
    inputs = replace(inputs, prepared_s=max(prepared.values(), default=0.0))
    if gate.category is _Category.NEW_PREEMPTIBLE and best is not None:
        wider = _amortised(wider, inputs.expansion_share(best.solution.makespan_s, wider.unfinished_fraction))
    # The shortcut bounds the surrogate's makespan, not predict's: a ranked solve always asks.
    if best is not None and solves.ranker is None and not _gate_can_pass(gate, best.solution, wider, inputs):
        reasons.append(f"no {gate.flag}: even unlimited use of the extra GPUs could not pay off")
        return problem, best
    wider_best = solves.solve(wider)
    if wider_best is None:
        # Nothing fits yet: keep the category eligible so the next gate widens on top of it (a budget may need
        # new preemptible *and* borrowed GPUs at once).
        return (wider, None) if best is None else (problem, best)
    if gate.category is _Category.NEW_PREEMPTIBLE and best is None and inputs.pstate.preemption_hazard_per_s <= 0:
        # A cold start on GPUs that stay (h = 0): their one-time costs are free in the long run. At h > 0 the
        # costs stay whole here (docs/policies.md, limits).
        share = inputs.expansion_share(wider_best.solution.makespan_s, wider.unfinished_fraction)
        if share < 1.0:
            wider = _amortised(wider, share)
            wider_best = solves.solve(wider) or wider_best
    if prepared:
        # The gate weighs the least prepared of the GPUs the wider configuration starts: none of them is
        # admitted on readiness another has.
        started = [
            prepared[c.key]
            for c, n in zip(wider.classes, wider_best.solution.counts, strict=True)
            if c.key in prepared and any(n)
        ]
        inputs = replace(inputs, prepared_s=min(started, default=inputs.prepared_s))
    if best is None:
        decision = GateDecision(True, f"{gate.flag}: needed for a feasible configuration")
    else:
        decision = gate.decide(
            best.solution.makespan_s, wider_best.solution.makespan_s, wider.unfinished_fraction, inputs
        )
        saved_s = best.solution.objective_s - wider_best.solution.objective_s
        if (
            not decision.allow
            and inputs.policy.gate_horizon == "residence"
            and wider_best.solution.makespan_s <= best.solution.makespan_s
            and saved_s > 1e-9
            and not _gone_before_ready(gate, inputs)
        ):
            # No faster, but cheaper to reach (e.g. a lent GPU instead of starting a dedicated one): refusing
            # it would leave a plan the next decision point, with the base slot started, would change. Never
            # a preemptible GPU the hazard says is gone before it is ready (a prepared one is cheap to start).
            decision = GateDecision(True, f"{gate.flag}: as fast, {saved_s:.1f} s less to reach")
    reasons.append(decision.reason)
    return (wider, wider_best) if decision.allow else (problem, best)


def _gate_can_pass(gate: _GateSpec, without: ClassSolution, wider: ClassProblem, inputs: _GateInputs) -> bool:
    """Whether the gate could pass at all; saves a solve when not.

    With every role at its full capacity in ``wider`` (a lower bound on any configuration's makespan there),
    could the gain pass the gate?
    """
    full = {r: sum(c.weight[r] * c.size for c in wider.classes if r in c.eligible) for r in ROLES}
    bounds = [wider.terms.colocated.time_s(full[Role.COLOCATED])]
    bounds.append(max(wider.terms.prefill.time_s(full[Role.PREFILL]), wider.terms.decode.time_s(full[Role.DECODE])))
    lower = min(bounds) + wider.terms.environment_s
    return gate.can_pass(without.makespan_s, lower, wider.unfinished_fraction, inputs)


def _gone_before_ready(gate: _GateSpec, inputs: _GateInputs) -> bool:
    """Whether the expansion gate's GPUs are expected to be preempted before they serve (1/h ≤ P_left + F)."""
    if gate.category is not _Category.NEW_PREEMPTIBLE:
        return False
    return expected_residence_s(inputs.pstate) <= expansion_ready_s(inputs.costs, inputs.prepared_s)


def _prepared_by_class(classified: _Classified, costs: TransitionCosts) -> dict[str, float]:
    """Class key → the least preparation done by a slot of it, for the new-preemptible classes, in the gate's terms.

    The gate counts readiness from ``costs.preparation_s`` (Table 3's worker); a class of another TP degree has
    ``preparation_for(tp)`` to do, so its figure is ``preparation_s − left``: negative where a larger worker has
    more left than Table 3's. New workers formed on regrouped GPUs have done none. Without per-TP costs this is
    the preparation done.
    """
    done = {s.worker.id: s.worker.prepared_s for s in classified.slots}
    return {
        c.key: costs.preparation_s
        - max(0.0, costs.preparation_for(c.tp) - min((done[i] for i in c.slot_ids), default=0.0))
        for c in classified.classes
        if classified.category[c.key] is _Category.NEW_PREEMPTIBLE
    }


def _amortised(problem: ClassProblem, share: float) -> ClassProblem:
    """New workers' start costs and the admission pause, times ``share``.

    Paid once, they are spread over the batches the new preemptible slots are expected to serve
    (docs/policies.md). New dedicated slots, which stay longer still, get the same share, so that a
    preemptible start never looks cheaper than a dedicated one.
    """
    if share >= 1.0:
        return problem
    classes = [_amortised_class(c, share) if c.pauses_admission else c for c in problem.classes]
    return replace(problem.with_classes(classes), admission_pause_s=problem.admission_pause_s * share)


def _amortised_class(c: SlotClass, share: float) -> SlotClass:
    """``c``'s start costs times ``share``; a class of new workers keeps its whole regroup tie-breaker.

    Scaled with the rest, the tie-breaker vanished at share 0 (a hazard of 0) and a new worker on regrouped GPUs
    tied exactly with starting an idle slot of its size.
    """
    tie = _REGROUP_TIE_S if c.new_workers is not None else 0.0
    return replace(c, cost={r: v * share if r is None else (v - tie) * share + tie for r, v in c.cost.items()})


def _idle_window_s(state: ClusterState, slots: Iterable[_Slot]) -> float | None:
    """Seconds until the trainer needs the training GPUs that could be lent now (None: none could)."""
    index = state.gpu_index()
    windows = [
        index[g].reclaim_in_s or 0.0 for s in slots if s.category is _Category.NEW_OVERLAP for g in s.worker.gpu_ids
    ]
    return min(windows) if windows else None


def _hysteresis(
    state: ClusterState,
    problem: ClassProblem,
    best: _Solved,
    solves: _SolveContext,
    policy: PolicyConfig,
    reasons: list[str],
) -> tuple[Decision, _Solved]:
    """Step 4: decide between the best configuration and keeping every surviving slot's role."""
    gates = "; ".join(reasons)
    if solves.mode is None:  # the state's mode (worked out once per pass: a walk over every worker)
        return Decision(kind=DecisionKind.INITIAL, reason=_join("initial configuration", gates)), best
    survivor = [c.current_role is not None and c.current_role in c.eligible for c in problem.classes]
    changes_survivor = any(
        n[ROLES.index(c.current_role)] != c.size
        for c, n, kept in zip(problem.classes, best.solution.counts, survivor, strict=True)
        if kept
    )
    keep_problem = problem.with_classes(
        [replace(c, fixed=True) if kept else c for c, kept in zip(problem.classes, survivor, strict=True)]
    )
    keep = best if not changes_survivor else solves.solve(keep_problem)
    if keep is None:
        lost = [c for c in problem.classes if c.current_role is not None and c.current_role not in c.eligible]
        why = "keeping the current roles is infeasible"
        if lost:
            why += f" after losing {sum(c.size for c in lost)} worker(s)"
        return Decision(kind=DecisionKind.FORCED, reason=_join(f"forced: {why}", gates)), best
    if not changes_survivor or keep.solution.objective_s <= best.solution.objective_s + 1e-9:
        return Decision(kind=DecisionKind.KEPT, reason=_join("kept: no change of ratio or mode pays off", gates)), keep
    gate = hysteresis(
        makespan_keep_s=keep.solution.makespan_s,
        makespan_new_s=best.solution.makespan_s,
        unfinished_fraction=problem.unfinished_fraction,
        mode_switch=best.solution.mode is not keep.solution.mode,
        config=policy,
    )
    if not gate.allow:
        return Decision(kind=DecisionKind.KEPT, reason=_join(gate.reason, gates)), keep
    return Decision(kind=DecisionKind.CHANGED, reason=_join(gate.reason, gates)), best


def _assemble(
    state: ClusterState,
    model: MakespanModel,
    classified: _Classified,
    problem: ClassProblem,
    chosen: _Solved,
    decision: Decision,
    solves: _SolveContext,
    target: Mapping[str, Role | None],
    actions: tuple[Action, ...],
    *,
    backend: str,
    digest: str,
    pstate: PolicyState,
) -> Plan:
    """Step 5: the plan itself, from the slots and actions of :func:`_target_and_actions` and the prediction."""
    solution = chosen.solution
    workload = state.workload
    rho = workload.unfinished_fraction
    pairs = list(zip(problem.classes, solution.counts, strict=True))
    decision = decision.model_copy(
        update={
            "borrowing": any(c.zone is Zone.OVERLAP and sum(n) > 0 for c, n in pairs),
            "expanded": any(c.pauses_admission and sum(n) > 0 for c, n in pairs),
        }
    )
    breakdown = model.predict(workload, _pool_capacity(solution, problem))
    totals = [sum(n[i] for n in solution.counts) for i in range(3)]
    gpus_used = sum(c.tp * sum(n) for c, n in pairs)
    gain_s = gain_pct = None
    status_quo = _status_quo(classified.base, solves.mode)
    if status_quo is not None:  # the same predictor on both sides, so the gain is the plan's own
        before_s = model.predict(workload, _pool_capacity(status_quo, classified.base)).total_s
        gain_s = rho * (before_s - breakdown.total_s)
        gain_pct = (before_s - breakdown.total_s) / before_s * 100 if before_s > 0 else None
    return Plan(
        mode=solution.mode,
        prefill_workers=totals[0],
        decode_workers=totals[1],
        colocated_workers=totals[2],
        gpus_used=gpus_used,
        assignment=assignment_tuple(target),
        actions=actions,
        makespan=breakdown,
        objective_s=solution.objective_s,
        transition_cost_s=solution.transition_cost_s,
        expected_gain_s=gain_s,
        expected_gain_pct=gain_pct,
        decision=decision,
        solver=SolverInfo(
            backend=backend,
            status="/".join(solves.statuses),
            objective_s=solution.objective_s,
            bound_s=chosen.bound_s,
            rounds=solves.rounds,
            rounding_error=solves.rounding_error,
            solves=solves.count,
            wall_time_s=solves.wall_s,
        ),
        model=model.name,
        input_digest=digest,
        policy_state=pstate,
    )


def _target_and_actions(
    state: ClusterState, classified: _Classified, problem: ClassProblem, counts: Counts
) -> tuple[dict[str, Role | None], tuple[Action, ...]]:
    """Step 5's slots and actions: each slot's target role for the class counts, and the ordered actions."""
    workers = {w.id: w for w in state.workers}
    target = assign_slots(problem, counts, workers)
    slot_reasons = {s.worker.id: s.reason for s in classified.slots if s.reason}
    if classified.layouts is None:
        return target, build_actions(state, target, slot_reasons)
    regrouping = place_new_workers(state, problem, counts, target, classified.layouts)
    for old in regrouping.dissolved:
        target.pop(old)
    for pool in regrouping.repacked_pools:
        logger.warning("pool %s repacked: its surviving workers restart on the new layout", pool)
    target.update({new.worker_id: new.role for new in regrouping.new_workers})
    return target, build_actions(state, target, slot_reasons, regrouping)


_NONE = (0, 0, 0)
_CapacityKey = tuple[Mode, float, float, float, tuple[tuple[Role, str, int, int], ...]]
"""A :class:`~pearl_sched.makespan.PoolCapacity`'s fields as plain values: mode, the three capacities, workers."""


def _capacity_key(solution: ClassSolution, problem: ClassProblem) -> _CapacityKey:
    """The fields of the solution's :func:`_pool_capacity`, without building it (a key for memoising predict)."""
    cap = solution.capacity
    counts: dict[tuple[Role, str, int], int] = {}
    for c, n in zip(problem.classes, solution.counts, strict=True):
        if n == _NONE:  # most classes of a sweep's candidate: skipped at the cost of one comparison
            continue
        for i, role in enumerate(ROLES):
            if n[i] > 0:
                counts[(role, c.gpu_type, c.tp)] = counts.get((role, c.gpu_type, c.tp), 0) + n[i]
    workers = tuple((r, g, tp, k) for (r, g, tp), k in counts.items())
    return (solution.mode, cap[Role.PREFILL], cap[Role.DECODE], cap[Role.COLOCATED], workers)


def _capacity_of(key: _CapacityKey) -> PoolCapacity:
    """The :class:`~pearl_sched.makespan.PoolCapacity` a :func:`_capacity_key` names."""
    mode, prefill, decode, colocated, workers = key
    return PoolCapacity(
        mode=mode,
        prefill=prefill,
        decode=decode,
        colocated=colocated,
        workers=tuple(SizeCount(role=r, gpu_type=g, tp=tp, count=k) for r, g, tp, k in workers),
    )


def _pool_capacity(solution: ClassSolution, problem: ClassProblem) -> PoolCapacity:
    """The solution's capacities, with the workers of each (role, GPU type, TP) that make them up."""
    return _capacity_of(_capacity_key(solution, problem))


def _status_quo(base: ClassProblem, mode: Mode | None) -> ClassSolution | None:
    """The configuration if nothing optional changes: survivors keep their roles, nothing is added."""
    if mode is None:
        return None
    counts = tuple(tuple(c.size if c.current_role is r and r in c.eligible else 0 for r in ROLES) for c in base.classes)
    return evaluate(base, mode, counts)  # type: ignore[arg-type]


def _join(head: str, tail: str) -> str:
    return f"{head}; {tail}" if tail else head


def _classify(state: ClusterState, model: MakespanModel, costs: TransitionCosts, policy: PolicyConfig) -> _Classified:
    """Step 1: slot categories, classes of interchangeable slots, and the problem over the base slots."""
    index = state.gpu_index()  # one walk over the GPUs for both passes over the slots
    slots = _categorise(state, index, costs, policy)
    in_use = sum(1 for s in slots if s.role is not None)
    usable = sum(1 for s in slots if s.category is not _Category.OUT)
    n_ref = max(1, in_use, min(usable, state.budget.max_gpus // min((s.tp for s in slots), default=1)))
    pools: tuple[GpuPool, ...] = ()
    layouts = gpu_pool = None
    if state.worker_sizes is None:
        classes, category = _classes(state, model, slots, costs, n_ref)
    else:
        sized = _sized(state, index, model, slots, costs, n_ref, state.worker_sizes)
        classes, category, pools, layouts, gpu_pool = sized
    workload = state.workload
    base = ClassProblem(
        classes=tuple(
            replace(c, eligible=c.eligible if category[c.key] is _Category.BASE else frozenset()) for c in classes
        ),
        terms=model.terms(workload),
        unfinished_fraction=workload.unfinished_fraction,
        max_gpus=state.budget.max_gpus,
        kv_required_bytes=0.0
        if _memory_ranked(model, policy)
        else workload.unfinished * workload.kv_bytes_per_trajectory,
        min_prefill_tokens_per_s=workload.min_prefill_tokens_per_s,
        admission_pause_s=costs.finalisation_s,
        pools=pools,
    )
    return _Classified(tuple(slots), classes, category, base, layouts, gpu_pool)


def _memory_ranked(model: MakespanModel, policy: PolicyConfig) -> bool:
    """Whether PEARL's hard KV constraint is dropped: ranking by ``predict`` with a memory-aware model.

    Such a model predicts a configuration whose KV does not fit as slow (queueing, retraction, misses), not
    impossible; a model without a ``memory_aware`` attribute (PEARL's) keeps the constraint.
    """
    return policy.rank_by_predict is True and _memory_aware(model)


def _memory_aware(model: MakespanModel) -> bool:
    """Whether ``model`` says it knows SGLang's memory (``memory_aware``); PEARL's has no such attribute."""
    return getattr(model, "memory_aware", False) is True


def _categorise(
    state: ClusterState, index: Mapping[str, GPU], costs: TransitionCosts, policy: PolicyConfig
) -> list[_Slot]:
    """Each slot's category, and the reason when it is out (``index``: ``state.gpu_index()``)."""
    slots = []
    budget = state.budget
    for worker in state.workers:
        ids = worker.gpu_ids
        gpus = [index[ids[0]]] if len(ids) == 1 else [index[g] for g in ids]
        zone = gpus[0].zone
        role = worker.rollout_role
        serving = role is not None
        category, reason = _Category.BASE, ""
        if not (gpus[0].available if len(gpus) == 1 else all(g.available for g in gpus)):
            category, reason = _Category.OUT, "preempted: GPU unavailable"
        elif zone is Zone.PREEMPTIBLE and not budget.allow_preemptible:
            category, reason = _Category.OUT, "budget does not allow preemptible GPUs"
        elif zone is Zone.PREEMPTIBLE and not serving:
            category = _Category.NEW_PREEMPTIBLE
        elif zone is Zone.OVERLAP:
            reclaim = min(g.reclaim_in_s or 0.0 for g in gpus)
            if not budget.allow_borrow:
                category, reason = _Category.OUT, "budget does not allow borrowing"
            elif must_return(reclaim, costs, policy):
                category, reason = _Category.OUT, f"return: training needs the GPUs in {reclaim:.1f} s"
            elif not serving:
                if idle_window_allows_borrow(reclaim, costs, policy):
                    category = _Category.NEW_OVERLAP
                else:
                    category, reason = _Category.OUT, f"idle window {reclaim:.1f} s too short to borrow"
        slots.append(_Slot(worker, zone, gpus[0].type, len(ids), gpus[0].node_group, category, reason, role))
    return slots


def _classes(
    state: ClusterState, model: MakespanModel, slots: Iterable[_Slot], costs: TransitionCosts, n_ref: int
) -> tuple[tuple[SlotClass, ...], dict[str, _Category]]:
    """Classes of interchangeable slots (sorted by key), and each class key's category."""
    # Node groups are not in the key: no constraint or cost depends on them yet, so slots that differ only
    # there are interchangeable, and merging them keeps the model small (4× fewer classes on 4 pods).
    by_kind: dict[tuple[object, ...], list[_Slot]] = {}
    for s in slots:  # grouped on the enum members; their string key is made once per group
        label = s.role if s.role is not None else _role_label(s)
        by_kind.setdefault((s.zone, s.gpu_type, s.tp, label, s.category), []).append(s)
    groups: dict[tuple[str, str, str, str, str], list[_Slot]] = {}
    for members in by_kind.values():
        s = members[0]
        groups[s.zone.value, s.gpu_type, f"tp{s.tp}", _role_label(s), s.category.value] = members
    workload = state.workload
    classes = []
    category: dict[str, _Category] = {}
    for key in sorted(groups):
        members = groups[key]
        first = members[0]
        eligible = frozenset(ROLLOUT_ROLES) if first.category is not _Category.OUT else frozenset()
        capacity = _worker_capacity(model, workload, first.gpu_type, first.tp)
        classes.append(_slot_class("|".join(key), members, eligible, capacity, costs, n_ref))
        category["|".join(key)] = first.category
    return tuple(classes), category


def _worker_capacity(
    model: MakespanModel, workload: Workload, gpu_type: str, tp: int
) -> tuple[dict[Role, float], float, float]:
    """Capacity weights, KV bytes and prefill tokens/s of one worker of (gpu_type, tp)."""
    return (
        {r: model.capacity_weight(workload, gpu_type, tp, r) for r in ROLLOUT_ROLES},
        model.kv_capacity_bytes(gpu_type, tp),
        model.prefill_tokens_per_s(gpu_type, tp),
    )


def _slot_class(
    key: str,
    members: list[_Slot],
    eligible: frozenset[Role],
    capacity: tuple[dict[Role, float], float, float],
    costs: TransitionCosts,
    n_ref: int,
    pool: str | None = None,
) -> SlotClass:
    """The class of interchangeable slots ``members`` (all alike in what the key names)."""
    first = members[0]
    current = first.worker.rollout_role
    weight, kv_bytes, prefill_rate = capacity
    return SlotClass(
        key=key,
        slot_ids=tuple(sorted(s.worker.id for s in members)),
        gpu_type=first.gpu_type,
        tp=first.tp,
        zone=first.zone,
        node_group=first.node_group if len({m.node_group for m in members}) == 1 else "*",
        current_role=current,
        eligible=eligible,
        weight=weight,
        kv_bytes=kv_bytes,
        prefill_tokens_per_s=prefill_rate,
        cost=_costs(current, first.zone, costs, n_ref, first.tp, min(_prepared(m) for m in members)),
        pauses_admission=current is None and first.zone is not Zone.OVERLAP,
        pool=pool,
        dp=first.worker.dp,
    )


_REGROUP_TIE_S = 1e-3
"""Tie-breaker: a new worker on regrouped GPUs costs this much more than starting an idle slot of its size."""


def _pool_of(gpu: GPU) -> str:
    # Node groups are not in the key (as for slot classes): the node-block rows are per node, and a node is in
    # one node group, so merging them loses nothing and keeps the model small. Nor is the category: serving and
    # idle preemptible GPUs of a node regroup together (the new workers on them pass the expansion gate).
    return f"{gpu.zone.value}|{gpu.type}"


def _pool_category(zone: Zone) -> _Category:
    """The category of new workers formed in a pool: a new worker on preemptible GPUs is an expansion."""
    return _Category.BASE if zone is Zone.DEDICATED else _Category.NEW_PREEMPTIBLE


def _sized(
    state: ClusterState,
    index: Mapping[str, GPU],
    model: MakespanModel,
    slots: list[_Slot],
    costs: TransitionCosts,
    n_ref: int,
    sizes: WorkerSizes,
) -> tuple[
    tuple[SlotClass, ...],
    dict[str, _Category],
    tuple[GpuPool, ...],
    dict[str, dict[str, tuple[str, ...]]],
    dict[str, str],
]:
    """Step 1 with worker sizes: pools of regroupable GPUs, the slot classes by pool, and the new-worker classes.

    A pool holds the GPUs of one zone (dedicated or preemptible) and type, any node group, whose slots are in the
    base or the new-preemptible category (on one node), and the free GPUs no slot holds. Overlap (training) GPUs
    keep their slots' size. A slot may take a role only at a size that role allows; per pool and allowed size, a
    class of new workers stands for the workers the pool's GPUs could form: base on dedicated GPUs, new
    preemptible (so behind the expansion gate) on preemptible ones, whether those GPUs serve now or not (a
    category taken from the slots would change with each transition, and a plan's result would re-plan to more).
    ``index`` is ``state.gpu_index()``.
    """
    limits = sizes.model
    gpu_pool: dict[str, str] = {}
    pool_category: dict[str, _Category] = {}
    pooled_slots: dict[str, str] = {}  # slot id → pool
    pool_keys: dict[tuple[Zone, str], str] = {}  # a slot's (zone, GPU type) → its pool, made once per pool
    for s in slots:
        if s.zone is Zone.OVERLAP or s.category not in (_Category.BASE, _Category.NEW_PREEMPTIBLE):
            continue
        ids = s.worker.gpu_ids
        if len(ids) > 1 and len({index[g].node for g in ids}) > 1:
            continue
        slot_pool = pool_keys.get((s.zone, s.gpu_type))  # the slot's zone and type are its first GPU's
        if slot_pool is None:
            slot_pool = pool_keys[s.zone, s.gpu_type] = _pool_of(index[ids[0]])
            pool_category[slot_pool] = _pool_category(s.zone)
        pooled_slots[s.worker.id] = slot_pool
        for g in ids:
            gpu_pool[g] = slot_pool
    held = {g for w in state.workers for g in w.gpu_ids}
    for gpu in state.gpus:  # GPUs no slot holds
        if gpu.id in held or not gpu.available or gpu.zone is Zone.OVERLAP:
            continue
        if gpu.zone is Zone.PREEMPTIBLE and not state.budget.allow_preemptible:
            continue
        pool_key = _pool_of(gpu)
        pool_category[pool_key] = _pool_category(gpu.zone)
        gpu_pool[gpu.id] = pool_key
    layouts: dict[str, dict[str, list[str]]] = {}
    for gpu in state.gpus:
        if gpu.id in gpu_pool:
            layouts.setdefault(gpu_pool[gpu.id], {}).setdefault(gpu.node, []).append(gpu.id)
    workload = state.workload

    def allowed(size: WorkerSize, gpu_type: str) -> frozenset[Role]:
        if limits is not None and not limits.fits(size, gpu_type):
            return frozenset()
        return frozenset(r for r, options in sizes.by_role().items() if size in options)

    by_kind: dict[tuple[object, ...], list[_Slot]] = {}
    for s in slots:  # grouped on the enum members and the size; their string key is made once per group
        # Slots outside every pool (overlap, out, or spanning nodes) keep their size; the marker keeps a slot
        # spanning nodes out of the class of pooled slots it would otherwise share a key with.
        pool = pooled_slots.get(s.worker.id) or (
            "spans-nodes" if s.tp > 1 and len({index[g].node for g in s.worker.gpu_ids}) > 1 else ""
        )
        label = s.role if s.role is not None else _role_label(s)
        by_kind.setdefault((s.zone, s.gpu_type, s.tp, s.worker.dp, label, s.category, pool), []).append(s)
    groups: dict[tuple[str, ...], list[_Slot]] = {}
    for kind, members in by_kind.items():
        s = members[0]
        groups[s.zone.value, s.gpu_type, s.worker.size.label, _role_label(s), s.category.value, str(kind[-1])] = members
    classes: list[SlotClass] = []
    category: dict[str, _Category] = {}
    for key in sorted(groups):
        members = groups[key]
        first = members[0]
        eligible = allowed(first.worker.size, first.gpu_type) if first.category is not _Category.OUT else frozenset()
        name = "|".join(key[:-1]) + ("|spans-nodes" if key[-1] == "spans-nodes" else "")
        capacity = (
            _worker_capacity(model, workload, first.gpu_type, first.tp)
            if eligible
            else (dict.fromkeys(ROLLOUT_ROLES, 0.0), 0.0, 0.0)
        )
        classes.append(
            _slot_class(name, members, eligible, capacity, costs, n_ref, pool=pooled_slots.get(first.worker.id))
        )
        category[name] = first.category
    options = sorted({s for role_sizes in sizes.by_role().values() for s in role_sizes}, key=lambda z: (z.tp, z.dp))
    pools = []
    for pool_key in sorted(layouts):
        zone_value, gpu_type = pool_key.split("|")
        nodes = layouts[pool_key]
        zone = Zone(zone_value)
        tps = sorted({z.tp for z in options} | {c.tp for c in classes if c.pool == pool_key and c.eligible})
        blocks = {tp: tp * sum(len(g) // tp for g in nodes.values()) for tp in tps}
        pools.append(GpuPool(pool_key, {tp: b for tp, b in blocks.items() if b > 0}))
        for size in options:
            eligible = allowed(size, gpu_type)
            if not eligible or blocks[size.tp] == 0:
                continue
            start = costs.preparation_for(size.tp) / n_ref + _REGROUP_TIE_S
            cost: dict[Role | None, float] = {r: start for r in ROLLOUT_ROLES}
            if zone is not Zone.DEDICATED:
                cost[Role.DECODE] += costs.volatile_decode_s
            cost[None] = 0.0
            name = f"{pool_key}|new-{size.label}"
            weight, kv_bytes, prefill_rate = _worker_capacity(model, workload, gpu_type, size.tp)
            classes.append(
                SlotClass(
                    key=name,
                    slot_ids=(),
                    gpu_type=gpu_type,
                    tp=size.tp,
                    zone=zone,
                    node_group="*",
                    current_role=None,
                    eligible=eligible,
                    cost=cost,
                    pauses_admission=True,
                    pool=pool_key,
                    new_workers=blocks[size.tp] // size.tp,
                    dp=size.dp,
                    weight=weight,
                    kv_bytes=kv_bytes,
                    prefill_tokens_per_s=prefill_rate,
                )
            )
            category[name] = pool_category[pool_key]
    frozen_layouts = {p: {n: tuple(g) for n, g in nodes.items()} for p, nodes in layouts.items()}
    return tuple(classes), category, tuple(pools), frozen_layouts, gpu_pool


def _prepared(slot: _Slot) -> float:
    """Preparation already done on a new preemptible slot (what its start no longer costs); 0 for any other."""
    return slot.worker.prepared_s if slot.category is _Category.NEW_PREEMPTIBLE else 0.0


def _role_label(slot: _Slot) -> str:
    """The role part of a class key: the rollout role, ``off``, or ``off-prepared<s>s`` for a prepared new slot.

    Slots whose preparation differs cost differently to start, so they are not interchangeable.
    """
    if slot.role is not None:
        return slot.role.value
    prepared = _prepared(slot)
    return f"off-prepared{prepared:.0f}s" if prepared > 0 else "off"


def _costs(
    current: Role | None, zone: Zone, costs: TransitionCosts, n_ref: int, tp: int = 1, prepared_s: float = 0.0
) -> dict[Role | None, float]:
    """Objective seconds per slot of ending in each role, plus tie-breakers.

    A slot down for d seconds costs the pool d capacity-seconds, about d / N seconds of makespan for a pool of
    N workers; N is the larger of the workers in use and those the budget could use (so starting a whole
    pool from nothing costs about one preparation time, not one per worker). A new slot that has done
    ``prepared_s`` of its preparation is charged the rest.
    """
    out: dict[Role | None, float] = {}
    for target in (*ROLLOUT_ROLES, None):
        if target == current:
            seconds = 0.0
        elif target is None:
            seconds = costs.deactivation_s if zone is Zone.OVERLAP else costs.stop_s
        elif current is None:
            seconds = costs.activation_s if zone is Zone.OVERLAP else max(0.0, costs.preparation_for(tp) - prepared_s)
        elif {current, target} == FLIP_ROLES:
            seconds = costs.role_switch_s
        else:
            seconds = costs.restart_for(tp)
        value = seconds / n_ref
        if target is Role.DECODE and zone is not Zone.DEDICATED:
            value += costs.volatile_decode_s
        out[target] = value
    return out


def _diagnose(problem: ClassProblem, solves: _SolveContext) -> InfeasiblePlanError:
    """Why nothing fits: the binding constraint and, if more GPUs would help, how many are needed."""
    eligible = [c for c in problem.classes if c.eligible]
    if not eligible:
        return InfeasiblePlanError(
            "no worker slot may serve rollout (all preempted, due back to the trainer, or disallowed)",
            min_gpus_needed=None,
            binding_constraint="no_eligible_workers",
        )
    all_gpus = sum(c.tp * c.size for c in eligible)
    relaxed = replace(problem, max_gpus=all_gpus)
    if solves.feasible(relaxed):
        lo, hi = problem.max_gpus, all_gpus  # infeasible at lo, feasible at hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if solves.feasible(replace(problem, max_gpus=mid)):
                hi = mid
            else:
                lo = mid
        return InfeasiblePlanError(
            f"budget of {problem.max_gpus} GPUs is too small: at least {hi} rollout GPUs are needed",
            min_gpus_needed=hi,
            binding_constraint="budget",
        )
    kv = f"{problem.kv_required_bytes / 2**30:.1f} GiB of KV cache"
    prefill = f"{problem.min_prefill_tokens_per_s:.0f} prefill tokens/s"
    needs_kv, needs_prefill = problem.kv_required_bytes > 0, problem.min_prefill_tokens_per_s > 0
    for asked, without, name, detail in (  # one relaxation at a time, then both (when each alone is not enough)
        (needs_kv, replace(relaxed, kv_required_bytes=0.0), "kv_capacity", kv),
        (needs_prefill, replace(relaxed, min_prefill_tokens_per_s=0.0), "prefill_capacity", prefill),
        (
            needs_kv and needs_prefill,
            replace(relaxed, kv_required_bytes=0.0, min_prefill_tokens_per_s=0.0),
            "kv_and_prefill_capacity",
            None,
        ),
    ):
        if asked and solves.feasible(without):
            what = detail or f"both {kv} and {prefill} (lifting either one alone is not enough)"
            return InfeasiblePlanError(
                f"no configuration of the eligible workers provides {what}, even using every GPU",
                min_gpus_needed=None,
                binding_constraint=name,
            )
    return InfeasiblePlanError(
        "no feasible configuration: a disaggregated pool needs ≥1 prefill and ≥1 decode worker",
        min_gpus_needed=None,
        binding_constraint="disaggregated_needs_prefill_and_decode",
    )


def input_digest(
    state: ClusterState,
    model: MakespanModel,
    costs: TransitionCosts,
    policy: PolicyConfig,
    policy_state: PolicyState,
    backend: str,
) -> str:
    """SHA-256 over every input of ``plan()``, each in a canonical JSON form.

    ``backend`` is the resolved backend (a registry name or ``"enumeration"``, never ``"auto"``), so two
    calls that solve with different backends never share a digest. Pydantic writes fields in declaration
    order, so ``model_dump_json`` is canonical for the value objects (and several times faster than sorting
    keys in Python on large states).
    """
    digest = hashlib.sha256()
    for part in (state, costs, policy, policy_state):
        digest.update(part.model_dump_json().encode())
        digest.update(b"\x1e")
    digest.update(canonical_json({"model": model.describe(), "backend": backend}).encode())
    return digest.hexdigest()


__all__ = ["input_digest", "plan"]
