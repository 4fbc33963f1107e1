"""Ranking by predict, made cheaper with the same answers (docs/formulation.md, "Ranking by predict").

``PearlMakespanModel.predict_totals_s`` is ``predict``'s total lane by lane, float for float, and never rises with
capacity; the ranker scores PEARL's ratio sweep with it in numpy lanes and skips a mode's MILP or a size
combination's sweep when its proven lower bound (``_PredictRanker.bound_s``) is above a score already in hand, and
within a sweep the splits whose bound is (``_PredictRanker.lane_filter``).
These tests hold each piece to what it replaces: the vectorised total to ``predict``, the bound to the score of
every configuration of small problems, the lane-scored sweep to the sweep that rescores solution by solution, and
whole plans to the plans of the ranker without either.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest

from pearl_sched import planner
from pearl_sched.config import PolicyConfig
from pearl_sched.errors import InfeasiblePlanError
from pearl_sched.makespan import PearlMakespanModel, PoolCapacity
from pearl_sched.makespan_improved import ImprovedMakespanModel, ImprovedParams
from pearl_sched.planner import _classify, _PredictRanker, _size_variants, _vectorised_totals, plan
from pearl_sched.plans import Plan, canonical_json
from pearl_sched.problem import MODE_ROLES, ROLES, ClassProblem, evaluate
from pearl_sched.solvers import enumeration
from pearl_sched.solvers.enumeration import ratio_sweep
from pearl_sched.solvers.formulation import _cost_curve, cheapest_transition_s
from pearl_sched.state import ClusterState, Mode
from tests.test_worker_sizes_properties import COSTS as SIZED_COSTS
from tests.test_worker_sizes_properties import MODEL as SIZED_MODEL
from tests.test_worker_sizes_properties import random_sized_state

RANKED = PolicyConfig(rank_by_predict=True)


def _problems(seed: int, states: int = 25) -> list[tuple[ClassProblem, _PredictRanker]]:
    """Random sized states' class problems (every slot eligible, and each size variant), with their ranker."""
    rng = np.random.default_rng(seed)
    problems = []
    for _ in range(states):
        state = random_sized_state(rng)
        classified = _classify(state, SIZED_MODEL, SIZED_COSTS, RANKED)
        whole = classified.base.with_classes(classified.classes)
        ranker = _PredictRanker(SIZED_MODEL, state.workload)
        problems += [(p, ranker) for p in (classified.base, whole, *_size_variants(whole))]
    return problems


@pytest.mark.parametrize("per_worker_link", [False, True])
def test_predict_totals_is_predict_float_for_float(per_worker_link: bool) -> None:
    params = SIZED_MODEL.params.model_copy(update={"kv_bandwidth_per_prefill_worker": per_worker_link})
    model = PearlMakespanModel(params)
    workload = random_sized_state(np.random.default_rng(1)).workload
    rng = np.random.default_rng(2)
    lanes = rng.uniform(0.05, 400.0, size=(3, 200)) * rng.choice([1.0, 1 / 3, 7.0], size=(3, 200))
    for mode in Mode:
        totals = model.predict_totals_s(workload, mode, lanes[0], lanes[1], lanes[2]).tolist()
        for lane, total in enumerate(totals):
            capacity = PoolCapacity(mode=mode, prefill=lanes[0, lane], decode=lanes[1, lane], colocated=lanes[2, lane])
            assert total == model.predict(workload, capacity).total_s, (mode, lanes[:, lane])
    no_capacity = model.predict_totals_s(workload, Mode.DISAGGREGATED, np.array([0.0]), np.array([2.0]), np.zeros(1))
    assert no_capacity.tolist() == [float("inf")]  # predict refuses it; the ranker never scores it


def test_predict_totals_never_rise_with_capacity() -> None:
    workload = random_sized_state(np.random.default_rng(3)).workload
    rng = np.random.default_rng(4)
    low = rng.uniform(0.1, 50.0, size=(3, 300))
    high = low + rng.uniform(0.0, 50.0, size=(3, 300)) * rng.integers(0, 2, size=(3, 300))
    for mode in Mode:
        more, less = (
            SIZED_MODEL.predict_totals_s(workload, mode, *high),
            SIZED_MODEL.predict_totals_s(workload, mode, *low),
        )
        assert (more <= less).all()


def test_bound_is_below_every_configurations_score() -> None:
    checked, tight = 0, 0.0
    for problem, ranker in _problems(seed=11):
        per_class = [list(_compositions(c.size, [r in c.eligible for r in ROLES])) for c in problem.classes]
        if np.prod([len(options) for options in per_class], dtype=float) > 5_000:
            continue  # every configuration is enumerated below: small problems only
        bound_s = ranker.bound_s(problem)
        assert bound_s > -float("inf")  # PEARL's model is vectorised: a real bound, not "nothing pruned"
        for mode in problem.modes:
            for counts in itertools.product(*per_class):
                solution = evaluate(problem, mode, counts)
                if solution is not None:
                    score_s = ranker.score(problem, solution).objective_s  # the pruning's margin: 1e-9
                    assert bound_s <= score_s + 1e-9 * max(1.0, abs(score_s)), (mode, counts, bound_s, score_s)
                    tight = max(tight, bound_s / score_s)
                    checked += 1
    assert checked > 200, checked
    assert tight > 0.999, tight  # some bound is met: the bound is not merely valid but close


def test_bound_pairs_every_piece_of_one_role_with_every_piece_of_the_other() -> None:
    # predict_bound_s pairs the two roles' pieces by broadcasting: each pair of pieces is one point where predict
    # is asked, with the extra costs of both. Held to that grid written out pair by pair, from _cost_curve.
    checked = 0
    for problem, ranker in _problems(seed=13, states=10):
        bound_s = ranker.bound_s(problem)
        totals = _vectorised_totals(SIZED_MODEL)
        assert totals is not None
        expected = []
        for mode in problem.modes:
            least_s = cheapest_transition_s(problem, mode)
            roles = MODE_ROLES[mode]
            if math.isinf(least_s) or not all(any(r in c.eligible and c.size for c in problem.classes) for r in roles):
                expected.append(math.inf)
                continue
            curves = [_cost_curve(problem, mode, role) for role in roles]
            if min(top for _, _, top in curves) <= 0:
                expected = [-math.inf]
                break
            scores = []
            for pieces in itertools.product(*(range(len(end)) for end, _, _ in curves)):
                capacity = dict.fromkeys(ROLES, 0.0)
                extra = 0.0
                for role, (end, extras, _), j in zip(roles, curves, pieces, strict=True):
                    capacity[role] = float(end[j])
                    extra += float(extras[j])
                one = [np.array([capacity[r]]) for r in ROLES]
                total = float(totals(ranker.workload, mode, *one)[0])
                scores.append(problem.unfinished_fraction * total + extra)
            expected.append(min(scores) + least_s)
        want = min(expected, default=math.inf)
        assert bound_s == pytest.approx(want, rel=1e-12, abs=1e-12), (bound_s, want)
        checked += math.isfinite(want)
    assert checked > 30, checked


def _compositions(size: int, eligible: list[bool]) -> list[tuple[int, int, int]]:
    ranges = [range(size + 1) if ok else range(1) for ok in eligible]
    return [n for n in itertools.product(*ranges) if sum(n) <= size]  # type: ignore[misc]


def test_lane_scored_sweep_is_the_sweep_rescored_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(enumeration, "_LANES_SCORED_FROM", 0)  # these states are small: every sweep in lanes
    answered = 0
    for problem, ranker in _problems(seed=13):
        rescore = functools.partial(ranker.score, problem)

        lanes = ranker.lane_scorer(problem)
        assert lanes is not None
        swept = ratio_sweep(problem, rescore=rescore, rescore_lanes=lanes)
        assert swept == ratio_sweep(problem, rescore=rescore)
        assert ratio_sweep(problem, rescore=rescore, rescore_lanes=lambda *_: None) == swept  # the fallback
        answered += swept is not None
    assert answered > 50, answered


def test_lane_filter_keeps_every_split_that_scores_the_cutoff() -> None:
    """Each split of the sweep that can be assigned is kept at a cutoff equal to its own score (the bound is valid)."""
    checked = dropped = 0
    for problem, ranker in _problems(seed=19):
        n = enumeration.usable_workers(problem)
        for mode, targets in enumeration._candidates(problem, n, None):
            counts = enumeration.assign(problem, targets)
            solution = evaluate(problem, mode, counts) if counts is not None else None
            if solution is None:
                continue
            score_s = ranker.score(problem, solution).objective_s
            wanted = np.array([[targets.get(role, 0)] for role in ROLES], dtype=np.int64)
            for cutoff_s, must_keep in ((score_s, True), (score_s * 0.5, False)):
                keep = ranker.lane_filter(problem, cutoff_s)
                assert keep is not None
                keeps = bool(keep(mode, wanted)[0])
                assert keeps or not must_keep, (mode, targets, score_s)
                checked += must_keep
                dropped += not keeps
    assert checked > 100 and dropped > 50, (checked, dropped)  # at half its score the bound drops most splits


@pytest.mark.parametrize("lanes_from", [0, 10**9])  # every sweep in lanes, and every sweep scalar
def test_sweep_with_lane_filter_is_the_sweep_under_its_cutoff(lanes_from: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``keep`` the sweep answers as without wherever its best is at most the cutoff; else above it, or None."""
    monkeypatch.setattr(enumeration, "_LANES_SCORED_FROM", lanes_from)
    same = above = 0
    for problem, ranker in _problems(seed=23):
        rescore = functools.partial(ranker.score, problem)
        lanes = ranker.lane_scorer(problem)
        full = ratio_sweep(problem, rescore=rescore, rescore_lanes=lanes)
        if full is None:
            continue
        best_s = full.objective_s
        for cutoff_s in (best_s, best_s * (1 + 1e-3), best_s * (1 - 1e-3), best_s * 0.9):
            swept = ratio_sweep(
                problem, rescore=rescore, rescore_lanes=lanes, keep=ranker.lane_filter(problem, cutoff_s)
            )
            if best_s <= cutoff_s:
                assert swept == full, (cutoff_s, best_s)
                same += 1
            else:
                assert swept is None or swept.objective_s > cutoff_s, (cutoff_s, best_s)
                above += 1
    assert same > 50 and above > 50, (same, above)


def test_only_a_model_that_defines_both_is_vectorised() -> None:
    class Retuned(PearlMakespanModel):  # predict redefined, predict_totals_s inherited: not PEARL's totals
        def predict(self, workload, capacity):  # type: ignore[no-untyped-def]
            return super().predict(workload, capacity)

    assert _vectorised_totals(SIZED_MODEL) is not None
    assert _vectorised_totals(Retuned(SIZED_MODEL.params)) is None
    assert _vectorised_totals(ImprovedMakespanModel.__new__(ImprovedMakespanModel)) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("lanes_from", [0, enumeration._LANES_SCORED_FROM])  # every sweep in lanes, and as shipped
def test_pruned_and_lane_scored_plans_are_the_plain_rankers(lanes_from: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(enumeration, "_LANES_SCORED_FROM", lanes_from)
    rng = np.random.default_rng(17)
    states = [random_sized_state(rng) for _ in range(16)]
    optima = {"fast": 0, "plain": 0}
    mode_optimum = planner._SolveContext._mode_optimum

    def counted(self: planner._SolveContext, problem: ClassProblem) -> object:
        optima["plain" if ranked_plainly else "fast"] += 1
        return mode_optimum(self, problem)

    monkeypatch.setattr(planner._SolveContext, "_mode_optimum", counted)
    ranked_plainly = False
    fast = [_planned(s) for s in states]
    ranked_plainly = True
    monkeypatch.setattr(planner._PredictRanker, "bound_s", lambda self, problem: -float("inf"))
    monkeypatch.setattr(planner._PredictRanker, "lane_scorer", lambda self, problem: None)
    monkeypatch.setattr(planner._PredictRanker, "lane_filter", lambda self, problem, cutoff_s: None)
    plain = [_planned(s) for s in states]
    assert fast == plain
    assert sum(not p.startswith("infeasible") for p in fast) >= 6  # most states plan
    assert optima["fast"] < optima["plain"], optima  # the bound skipped some MILPs


def _planned(state: ClusterState) -> str:
    """The decided plan of ``state`` ranked by predict, or the refusal's message."""
    try:
        return _decided(plan(state, SIZED_MODEL, costs=SIZED_COSTS, policy=RANKED))
    except InfeasiblePlanError as exc:
        return f"infeasible: {exc}"


def _decided(result: Plan) -> str:
    """The plan without the solver's bookkeeping, which skipping a MILP changes by design (bench/plan_latency.py)."""
    data = result.model_dump(mode="json")
    for noisy in ("wall_time_s", "bound_s", "solves", "rounds"):
        data["solver"].pop(noisy, None)
    return canonical_json(data)


def test_improved_models_lane_scored_plans_are_its_plain_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """The improved predictor's ``predict_lanes_s`` in the ranker (sweeps, descent) plans as ``predict`` one by one."""
    improved = ImprovedMakespanModel(ImprovedParams(pearl=SIZED_MODEL.params))
    assert planner._lane_predictor(improved) is not None and _vectorised_totals(improved) is None
    monkeypatch.setattr(enumeration, "_LANES_SCORED_FROM", 0)  # these states are small: every sweep in lanes
    rng = np.random.default_rng(29)
    states = [random_sized_state(rng) for _ in range(8)]

    def planned(state: ClusterState) -> str:
        model = ImprovedMakespanModel(ImprovedParams(pearl=SIZED_MODEL.params))  # no memo shared between runs
        try:
            return _decided(plan(state, model, costs=SIZED_COSTS, policy=RANKED))
        except InfeasiblePlanError as exc:
            return f"infeasible: {exc}"

    lanes = [planned(s) for s in states]
    monkeypatch.setattr(planner._PredictRanker, "lane_scorer", lambda self, problem: None)
    plain = [planned(s) for s in states]
    assert lanes == plain
    assert sum(not p.startswith("infeasible") for p in lanes) >= 3  # most states plan
