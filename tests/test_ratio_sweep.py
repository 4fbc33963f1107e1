"""The ranking's ratio sweep: ``assign_many`` / ``evaluate_many`` are the scalar functions lane by lane.

``PolicyConfig.rank_by_predict`` sweeps every split of the usable workers once per size combination
(docs/formulation.md, "Ranking by predict"); ``assign_many`` makes those assignments
and ``evaluate_many`` score them in numpy lanes. These tests hold them to ``assign`` and ``evaluate`` on random
class problems with and without worker sizes (every split, the colocated target, targets that cannot be met, count
vectors that break each rule), and the sweep to ``enumerate_configurations`` over every split.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.planner import _classify, _size_variants
from pearl_sched.problem import ClassProblem, ClassSolution, evaluate
from pearl_sched.solvers import enumeration
from pearl_sched.solvers.enumeration import (
    assign,
    assign_many,
    enumerate_configurations,
    evaluate_many,
    ratio_sweep,
    usable_workers,
)
from pearl_sched.state import Mode, Role
from tests.plan_states import MODEL as RANDOM_MODEL
from tests.plan_states import random_state
from tests.test_worker_sizes_properties import COSTS as SIZED_COSTS
from tests.test_worker_sizes_properties import MODEL as SIZED_MODEL
from tests.test_worker_sizes_properties import random_sized_state

_STATES = 60


def _problems(sized: bool, seed: int) -> list[ClassProblem]:
    """Class problems of random states: each with every slot eligible, and (with sizes) its size variants."""
    rng = np.random.default_rng(seed)
    problems = []
    for _ in range(_STATES):
        if sized:
            state, model, costs = random_sized_state(rng), SIZED_MODEL, SIZED_COSTS
        else:
            state, model, costs = random_state(rng, max_slots=7), RANDOM_MODEL, None
        classified = _classify(state, model, costs or TransitionCosts(), PolicyConfig())
        whole = classified.base.with_classes(classified.classes)
        problems += [classified.base, whole, *_size_variants(whole)]
    return problems


def _targets(problem: ClassProblem) -> list[dict[Role, int]]:
    n = sum(c.size for c in problem.classes) + 1  # one more than there are: some targets cannot be met
    targets = [{Role.COLOCATED: k} for k in range(n + 1)]
    targets += [{Role.PREFILL: p, Role.DECODE: k - p} for k in range(2, n + 1) for p in range(1, k)]
    return targets


@pytest.mark.parametrize("sized", [False, True])
def test_assign_many_is_assign_target_by_target(sized: bool) -> None:
    met = unmet = 0
    for problem in _problems(sized, seed=5 + sized):
        targets = _targets(problem)
        many = assign_many(problem, targets)
        for target, counts in zip(targets, many, strict=True):
            assert counts == assign(problem, target), (target, problem.classes)
            met += counts is not None
            unmet += counts is None
    assert met > 100 and unmet > 100, (met, unmet)  # both outcomes are exercised


@pytest.mark.parametrize("sized", [False, True])
def test_evaluate_many_is_evaluate_lane_by_lane(sized: bool) -> None:
    rng = np.random.default_rng(3 + sized)
    kept = refused = 0
    for problem in _problems(sized, seed=7 + sized):
        sizes = np.array([c.size for c in problem.classes], dtype=np.int64)
        lanes = 20  # counts up to one over each class's size, in every role: most break some rule
        counts = rng.integers(0, sizes[:, None, None] + 2, size=(len(sizes), 3, lanes))
        met = [c for c in assign_many(problem, _targets(problem)) if c is not None]  # and the sweep's, which fit
        if met:
            counts = np.concatenate([counts, np.array(met, dtype=np.int64).transpose(1, 2, 0)], axis=2)
        for mode in Mode:
            many = evaluate_many(problem, mode, counts)
            for lane, solution in enumerate(many):
                exact = evaluate(problem, mode, tuple(map(tuple, counts[:, :, lane].tolist())))
                assert solution == exact, (mode, counts[:, :, lane].tolist())
                kept += exact is not None
                refused += exact is None
    assert kept > 50 and refused > 50, (kept, refused)


@pytest.mark.parametrize("sized", [False, True])
def test_evaluate_many_with_idle_and_fixed_classes(sized: bool) -> None:
    """As above, with classes off in every lane (evaluate_lanes adds only their cost of being off) and fixed ones.

    The lanes sum the floats class by class as ``evaluate`` does; a class off in every lane is skipped in the
    vectorised checks, so the answers must still be ``evaluate``'s, transition cost and capacities float for float.
    """
    rng = np.random.default_rng(11 + sized)
    kept = refused = fixed_seen = 0
    for problem in _problems(sized, seed=13 + sized):
        if rng.random() < 0.5:  # some classes fixed at their current role
            problem = problem.with_classes(
                [replace(c, fixed=c.current_role is not None and rng.random() < 0.3) for c in problem.classes]
            )
        fixed_seen += any(c.fixed for c in problem.classes)
        sizes = np.array([c.size for c in problem.classes], dtype=np.int64)
        met = [c for c in assign_many(problem, _targets(problem)) if c is not None]
        counts = rng.integers(0, sizes[:, None, None] + 1, size=(len(sizes), 3, 6))
        if met:
            counts = np.concatenate([counts, np.array(met, dtype=np.int64).transpose(1, 2, 0)], axis=2)
        counts[rng.random(len(sizes)) < 0.5] = 0  # these classes are off in every lane
        for mode in Mode:
            for lane, solution in enumerate(evaluate_many(problem, mode, counts)):
                exact = evaluate(problem, mode, tuple(map(tuple, counts[:, :, lane].tolist())))
                assert solution == exact, (mode, counts[:, :, lane].tolist())
                if exact is not None:  # == holds 0.0 == -0.0; the sums' bits are the same too
                    assert str(solution.transition_cost_s) == str(exact.transition_cost_s)
                kept += exact is not None
                refused += exact is None
    assert kept > 50 and refused > 50 and fixed_seen > 5, (kept, refused, fixed_seen)


@pytest.mark.parametrize("lanes_from", [0, enumeration._LANES_FROM])  # every sweep in lanes, and as shipped
@pytest.mark.parametrize("sized", [False, True])
def test_ratio_sweep_is_enumeration_over_every_split(
    sized: bool, lanes_from: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(enumeration, "_LANES_FROM", lanes_from)

    def rescore(solution: ClassSolution) -> ClassSolution:  # a ranking unlike the objective's: fewest prefill first
        prefill = sum(n[0] for n in solution.counts)
        return replace(solution, objective_s=solution.objective_s * (1 + prefill))

    answered = 0
    for problem in _problems(sized, seed=9 + sized):
        window = max(1, usable_workers(problem))
        for score in (None, rescore):
            swept = ratio_sweep(problem, rescore=score)
            assert swept == enumerate_configurations(problem, window=window, rescore=score)
            answered += swept is not None
    assert answered > 50


@pytest.mark.parametrize("sized", [False, True])
def test_full_enumeration_in_lanes_is_the_scalar_one(sized: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """PEARL's full search (every split, then fewer workers) gives the same answer with every count in lanes."""
    problems = _problems(sized, seed=21 + sized)
    monkeypatch.setattr(enumeration, "_LANES_FROM", 10**9)  # every count scalar: _best_of, as before lanes
    scalar = [enumerate_configurations(p) for p in problems]
    monkeypatch.setattr(enumeration, "_LANES_FROM", 0)  # every count in lanes
    fewer = sum(
        1
        for p, s in zip(problems, scalar, strict=True)
        if s is not None and usable_workers(p) > sum(map(sum, s.counts))
    )
    assert [enumerate_configurations(p) for p in problems] == scalar
    assert sum(s is not None for s in scalar) > 50
    assert fewer > 0 or not sized, fewer  # with sizes some answers fall back to fewer workers (node blocks)
