"""The class-level MILP against a brute-force oracle, PEARL's enumeration and the other backends.

Invariants checked on random tiny instances (hypothesis):
- the MILP's optimum equals the brute-force optimum of the exact objective;
- every installed backend reaches the same optimum;
- on homogeneous pools where using every worker is optimal, the MILP equals PEARL's enumeration;
- whatever the MILP returns satisfies every constraint when re-evaluated exactly.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl_sched import Mode, Role, Zone
from pearl_sched.problem import MODE_ROLES, ROLES, ClassProblem, SlotClass, brute_force, evaluate
from pearl_sched.solvers import available_backends, enumerate_configurations, get_backend, solve_class_problem
from pearl_sched.solvers.formulation import (
    CutPool,
    cuts_near,
    max_capacity,
    mode_bound,
    mode_lower_bound,
    secant,
    tangent,
)

from .builders import MODEL, workload

ROLE_OPTIONS = [None, Role.PREFILL, Role.DECODE, Role.COLOCATED]


@st.composite
def problems(draw: st.DrawFn, *, homogeneous: bool = False, free_moves: bool = False) -> ClassProblem:
    load = workload(
        batch_size=draw(st.sampled_from([16, 64, 256, 1024])),
        unfinished=16,
        turns=draw(st.sampled_from([2.0, 10.0, 30.0])),
        appended_tokens_per_turn=draw(st.sampled_from([50.0, 500.0, 5000.0])),
        generated_tokens_per_turn=draw(st.sampled_from([20.0, 200.0, 1000.0])),
        bubble_ratio=draw(st.sampled_from([0.0, 0.5])),
    )
    classes = []
    for k in range(draw(st.integers(1, 3))):
        gpu_type = "h200" if homogeneous else draw(st.sampled_from(["h200", "h100"]))
        current = draw(st.sampled_from(ROLE_OPTIONS))
        eligible = frozenset(draw(st.sets(st.sampled_from(ROLES), min_size=1))) if not homogeneous else frozenset(ROLES)
        cost: dict[Role | None, float] = {
            r: 0.0 if (r is current or free_moves) else draw(st.sampled_from([0.5, 2.0, 10.0])) for r in ROLE_OPTIONS
        }
        classes.append(
            SlotClass(
                key=f"c{k}",
                slot_ids=tuple(f"c{k}s{i}" for i in range(draw(st.integers(1, 3)))),
                gpu_type=gpu_type,
                tp=1,
                zone=draw(st.sampled_from(list(Zone))),
                node_group="default",
                current_role=current,
                eligible=eligible,
                weight={r: MODEL.capacity_weight(load, gpu_type, 1, r) for r in ROLES},
                kv_bytes=MODEL.kv_capacity_bytes(gpu_type, 1),
                prefill_tokens_per_s=MODEL.prefill_tokens_per_s(gpu_type, 1),
                cost=cost,
                pauses_admission=current is None and not free_moves,
            )
        )
    total = sum(c.size for c in classes)
    return ClassProblem(
        classes=tuple(classes),
        terms=MODEL.terms(load),
        unfinished_fraction=draw(st.sampled_from([0.25, 1.0])),
        max_gpus=total if free_moves else draw(st.integers(1, total)),
        kv_required_bytes=draw(st.sampled_from([0.0, 1e11, 3e11])),
        min_prefill_tokens_per_s=draw(st.sampled_from([0.0, 40_000.0])),
        admission_pause_s=0.0 if free_moves else 11.05,
    )


def _same_objective(a: float, b: float, rel: float = 1e-6) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-6)


@given(problems())
def test_milp_optimum_equals_brute_force(problem: ClassProblem) -> None:
    oracle = brute_force(problem)
    outcome = solve_class_problem(problem, get_backend("highs"), time_limit_s=10)
    if oracle is None:
        assert outcome.solution is None
        return
    assert outcome.status == "optimal"
    assert outcome.solution is not None
    assert _same_objective(outcome.solution.objective_s, oracle.objective_s), (outcome.solution, oracle)
    again = evaluate(problem, outcome.solution.mode, outcome.solution.counts)
    assert again is not None and _same_objective(again.objective_s, outcome.solution.objective_s)


@pytest.mark.parametrize("backend", [b for b in available_backends() if b != "highs"])
@settings(max_examples=8)
@given(problem=problems())
def test_every_backend_agrees_with_highs(backend: str, problem: ClassProblem) -> None:
    reference = solve_class_problem(problem, get_backend("highs"), time_limit_s=10).solution
    other = solve_class_problem(problem, get_backend(backend), time_limit_s=10)
    if reference is None:
        assert other.solution is None
        return
    assert other.solution is not None
    rel = 1e-4 if get_backend(backend).capabilities.integer_coefficients_only else 1e-6
    assert _same_objective(other.solution.objective_s, reference.objective_s, rel)


@given(problems(homogeneous=True, free_moves=True))
def test_milp_equals_enumeration_on_homogeneous_pools(problem: ClassProblem) -> None:
    enumerated = enumerate_configurations(problem)
    milp = solve_class_problem(problem, get_backend("highs"), time_limit_s=10).solution
    if enumerated is None:
        assert milp is None or brute_force(problem) is not None
        return
    assert milp is not None
    assert _same_objective(milp.objective_s, enumerated.objective_s)


@given(problems(), st.booleans())
def test_the_mode_bound_is_a_lower_bound_on_every_configuration_of_its_mode(problem: ClassProblem, fix: bool) -> None:
    # The bound that lets the MILP skip a mode: never above the mode's optimum (brute force), never below the
    # full-capacity bound it tightens; no configuration has more capacity in a role than max_capacity says.
    if fix:  # the hysteresis "keep" problem: serving classes fixed to their role
        problem = problem.with_classes([replace(c, fixed=c.current_role is not None) for c in problem.classes])
    for mode in problem.modes:
        bound = mode_bound(problem, mode)
        assert bound >= mode_lower_bound(problem, mode) - 1e-9
        optimum = brute_force(replace(problem, modes=(mode,)))
        if optimum is None:
            continue
        assert bound <= optimum.objective_s + 1e-9 * max(1.0, abs(optimum.objective_s)), (mode, bound, optimum)
        for role in MODE_ROLES[mode]:
            assert optimum.capacity[role] <= max_capacity(problem, role) * (1 + 1e-12) + 1e-12


@given(problems(), st.integers(min_value=1, max_value=8))
def test_max_capacity_memo_belongs_to_its_problem(problem: ClassProblem, budget: int) -> None:
    # max_capacity is memoised on the (frozen) problem it was asked of: a problem made from it with another
    # budget, classes or pools answers for itself, never with the memo of the one it was made from.
    first = {role: max_capacity(problem, role) for role in ROLES}
    assert first == {role: max_capacity(problem, role) for role in ROLES}  # the memo's answer is the first one
    budget = min(budget, problem.max_gpus)
    smaller = replace(problem, max_gpus=budget)
    fixed = problem.with_classes([replace(c, eligible=frozenset()) for c in problem.classes])
    for role in ROLES:
        fresh = sum(
            c.weight.get(role, 0.0) * min(c.size, budget // c.tp) for c in problem.classes if role in c.eligible
        )
        assert max_capacity(smaller, role) <= fresh + 1e-9  # the smaller budget binds its own answer
        assert max_capacity(fixed, role) == 0.0
        assert max_capacity(smaller, role) <= first[role] + 1e-9


@given(problems())
def test_milp_is_never_worse_than_its_start_solution(problem: ClassProblem) -> None:
    start = enumerate_configurations(problem)
    milp = solve_class_problem(problem, get_backend("highs"), time_limit_s=10, hint=start).solution
    if start is not None:
        assert milp is not None and milp.objective_s <= start.objective_s + 1e-9


def test_golden_tiny_instance() -> None:
    """Two idle workers, no transition costs: 1P1D vs 2C, decided by hand.

    Pool times (fixed + work/E): prefill 1 + 10/E, decode 2 + 30/E, colocated 4 + 40/E, no environment.
    1P1D: max(11, 32) = 32; 2C: 4 + 20 = 24; so 2C is optimal with makespan 24.
    """
    from pearl_sched.makespan import MakespanTerms, PoolTerms

    terms = MakespanTerms(
        prefill=PoolTerms(fixed_s=1, work_s=10),
        decode=PoolTerms(fixed_s=2, work_s=30),
        colocated=PoolTerms(fixed_s=4, work_s=40),
        environment_s=0,
    )
    cls = SlotClass(
        key="idle",
        slot_ids=("a", "b"),
        gpu_type="x",
        tp=1,
        zone=Zone.DEDICATED,
        node_group="default",
        current_role=None,
        eligible=frozenset(ROLES),
        weight=dict.fromkeys(ROLES, 1.0),
        kv_bytes=1.0,
        prefill_tokens_per_s=1.0,
        cost=dict.fromkeys(ROLE_OPTIONS, 0.0),
    )
    problem = ClassProblem((cls,), terms, 1.0, 2, 0.0, 0.0, 0.0)
    for backend in available_backends():
        outcome = solve_class_problem(problem, get_backend(backend), time_limit_s=10)
        assert outcome.solution is not None
        assert outcome.solution.mode is Mode.COLOCATED
        assert outcome.solution.counts == ((0, 0, 2),)
        assert outcome.solution.makespan_s == pytest.approx(24.0, rel=1e-4)
    only_disaggregated = ClassProblem((cls,), terms, 1.0, 2, 0.0, 0.0, 0.0, modes=(Mode.DISAGGREGATED,))
    assert brute_force(only_disaggregated).makespan_s == pytest.approx(32.0)  # type: ignore[union-attr]


ROW_FAMILIES = [
    "fixed_role_kept",
    "one_role_per_slot",
    "gpu_budget",
    "role_active_iff_mode",
    "kv_capacity",
    "prefill_capacity",
    "admission_pause",
    "makespan_cut",
]
"""build_model's constraint families, in the order of the formulation docstring's lines."""


@given(problems())
@settings(max_examples=25)
def test_model_rows_are_named_after_the_docstring(problem: ClassProblem) -> None:
    """Every row of build_model is named after a constraint line of the formulation's docstring, in order."""
    from pearl_sched.solvers.formulation import build_model, initial_cuts

    model, _ = build_model(problem, initial_cuts(problem))
    assert len(model.row_names) == len(model.rows)
    families = [name.split("[")[0] for name in model.row_names]
    assert set(families) <= set(ROW_FAMILIES), set(families) - set(ROW_FAMILIES)
    assert families.count("gpu_budget") == 1
    assert families.count("one_role_per_slot") == sum(1 for c in problem.classes if c.eligible)
    assert families.count("role_active_iff_mode") == 6  # a lower and an upper row per rollout role
    assert families.count("kv_capacity") == (2 if problem.kv_required_bytes > 0 else 0)
    assert families.count("prefill_capacity") == (2 if problem.min_prefill_tokens_per_s > 0 else 0)
    assert families.count("makespan_cut") == len(initial_cuts(problem))
    ranks = [ROW_FAMILIES.index(f) for f in families]
    assert ranks == sorted(ranks)


def test_highs_solves_when_its_thread_pool_was_made_with_more_threads() -> None:
    """HiGHS refuses ``threads=1`` once another caller in the process made its pool larger; the backend still solves."""
    script = """
import highspy
from pearl_sched.solvers.base import LinearModel
from pearl_sched.solvers.highs import HighsBackend
other = highspy.Highs()
other.setOptionValue("output_flag", False)
other.setOptionValue("threads", 2)
other.run()
model = LinearModel()
x = model.add_var("x", 0.0, 10.0, integer=True, cost=-1.0)
model.add_row({x: 2.0}, hi=7.0)
result = HighsBackend().solve(model, time_limit_s=5.0)
print(result.status, result.values)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "optimal (3.0,)"


@given(problems(), problems())
@settings(max_examples=20)
def test_highs_answers_the_same_on_its_reused_object_as_on_a_fresh_one(first: ClassProblem, then: ClassProblem) -> None:
    """The backend clears one ``Highs`` object per thread between solves: a new thread makes a fresh one."""
    from concurrent.futures import ThreadPoolExecutor

    def outcome(problem: ClassProblem) -> tuple[object, ...]:
        result = solve_class_problem(problem, get_backend("highs"), time_limit_s=10)
        solution = result.solution
        return (result.status, result.rounds, solution and (solution.mode, solution.counts, solution.objective_s))

    outcome(first)  # the reused object has just solved another model
    reused = outcome(then)
    with ThreadPoolExecutor(max_workers=2) as pool:
        fresh = list(pool.map(outcome, [then, then]))
    assert fresh == [reused, reused]


def test_sorted_rows_follow_the_rows_through_copies_and_later_rows() -> None:
    """The matrix a backend reads is the rows', whenever they were added and however the model was copied."""
    from pearl_sched.solvers.base import LinearModel

    base = LinearModel()
    x, y, z = (base.add_var(n, 0.0, 5.0, integer=True) for n in "xyz")
    base.add_row({z: 3.0, x: 1.0}, hi=4.0)
    assert base.sorted_rows() == [([x, z], [1.0, 3.0])]
    cuts = LinearModel()
    cuts.add_row({y: 2.0, x: -1.0}, lo=0.0)
    model = base.with_rows_of(cuts)
    model.add_row({z: 1.0, y: 1.0, x: 0.0}, hi=9.0)  # a zero coefficient is not a matrix entry
    assert model.sorted_rows() == [([x, z], [1.0, 3.0]), ([x, y], [-1.0, 2.0]), ([y, z], [1.0, 1.0])]
    assert [sorted(r.items()) for r in model.rows] == [list(zip(*row, strict=True)) for row in model.sorted_rows()]
    assert base.sorted_rows() == [([x, z], [1.0, 3.0])]  # the copy's rows did not leak into the original


def _variant(problem: ClassProblem, data: st.DataObject) -> ClassProblem:
    """Another problem with ``problem``'s pool times: its budget, eligibility or worker weights changed.

    What a plan() call's later solves are (a gate's wider problem, the hysteresis' fixed classes) and what they
    are not (classes of another TP degree: other weights, so another lattice or none).
    """
    scale = data.draw(st.sampled_from([1.0, 2.0, 1.5]))
    classes = []
    for k, c in enumerate(problem.classes):
        eligible = data.draw(st.sets(st.sampled_from(ROLES), min_size=1))
        weight = {r: w * (scale if k % 2 == 0 else 1.0) for r, w in c.weight.items()}
        classes.append(replace(c, eligible=frozenset(eligible), weight=weight, fixed=data.draw(st.booleans())))
    total = sum(c.size for c in classes)
    return replace(problem.with_classes(classes), max_gpus=data.draw(st.integers(1, total)))


@given(problems(), st.data())
def test_carried_cuts_lie_under_every_capacity_a_later_problem_can_have(
    problem: ClassProblem, data: st.DataObject
) -> None:
    # The pool keeps the cuts one solve wrote (chords of its lattice, tangents) and offers a later problem with the
    # same pool times only those valid there: each under f_r at every capacity the later problem can give the role.
    pool = CutPool()
    for role in ROLES:
        members = [c for c in problem.classes if role in c.eligible]
        top = sum(c.weight[role] * c.size for c in members)
        for e in (top / 3, top / 2, top):
            if e > 0:
                pool.add(problem, [(role, *cut) for cut in cuts_near(problem, role, e, window=2)])
    later = _variant(problem, data)
    offered = pool.offered(later, ROLES)
    for role, intercept, slope in offered:
        terms = later.terms.pool(role)
        members = [c for c in later.classes if role in c.eligible]
        for counts in itertools.product(*(range(c.size + 1) for c in members)):
            e = sum(c.weight[role] * n for c, n in zip(members, counts, strict=True))
            if e > 0:
                exact = terms.time_s(e)
                assert intercept + slope * e <= exact + 1e-9 * max(1.0, exact), (role, e)


def test_a_chord_is_offered_only_on_its_own_lattice_and_a_tangent_everywhere() -> None:
    load = workload(batch_size=64, unfinished=16)
    weight = {r: MODEL.capacity_weight(load, "h200", 1, r) for r in ROLES}
    cls = SlotClass(
        key="c0",
        slot_ids=("s0", "s1", "s2", "s3"),
        gpu_type="h200",
        tp=1,
        zone=Zone.DEDICATED,
        node_group="default",
        current_role=None,
        eligible=frozenset(ROLES),
        weight=weight,
        kv_bytes=MODEL.kv_capacity_bytes("h200", 1),
        prefill_tokens_per_s=MODEL.prefill_tokens_per_s("h200", 1),
        cost={r: 0.0 for r in ROLE_OPTIONS},
    )
    one = ClassProblem(
        classes=(cls,),
        terms=MODEL.terms(load),
        unfinished_fraction=1.0,
        max_gpus=4,
        kv_required_bytes=0.0,
        min_prefill_tokens_per_s=0.0,
        admission_pause_s=0.0,
    )
    terms = one.terms.pool(Role.DECODE)
    step = weight[Role.DECODE]
    chord = (Role.DECODE, *secant(terms, step, 2 * step))
    touching = (Role.DECODE, *tangent(terms, 3 * step))
    pool = CutPool()
    pool.add(one, [chord, touching])
    assert pool.offered(one, [Role.DECODE]) == [chord, touching]
    assert pool.offered(one, [Role.PREFILL]) == []  # the mode's roles only
    doubled = one.with_classes([replace(cls, weight={r: 2 * w for r, w in weight.items()})])
    assert pool.offered(doubled, [Role.DECODE]) == []  # recorded on step `step`: neither is offered on 2·step
    mixed = one.with_classes([cls, replace(cls, key="c1", weight={r: 1.5 * w for r, w in weight.items()})])
    tangents = CutPool()
    tangents.add(mixed, [touching])  # a problem of mixed weights writes only tangents: offered anywhere
    assert tangents.offered(one, [Role.DECODE]) == tangents.offered(doubled, [Role.DECODE]) == [touching]
    other = replace(one, terms=MODEL.terms(workload(batch_size=256, unfinished=16)))
    assert pool.offered(other, [Role.DECODE]) == []  # other pool times: other f_r


@given(problems(), st.data())
def test_solves_sharing_a_cut_pool_still_reach_the_brute_force_optimum(
    problem: ClassProblem, data: st.DataObject
) -> None:
    pool = CutPool()
    for current in (problem, _variant(problem, data), problem):
        oracle = brute_force(current)
        outcome = solve_class_problem(current, get_backend("highs"), time_limit_s=10, cuts=pool)
        if oracle is None:
            assert outcome.solution is None
            continue
        assert outcome.status == "optimal" and outcome.solution is not None
        assert _same_objective(outcome.solution.objective_s, oracle.objective_s), (outcome.solution, oracle)
