"""The hindsight search (``oracle-hindsight``): its plan is the run the cluster then makes, and on small instances
the exhaustive search is at least every policy.

Invariants checked:
* the training start the search predicts for a step is the one the cluster then gets (the replay is exact);
* exhaustive (exact over its action space) ≤ the pruned beam ≤ nothing else on step 0, which every policy starts
  from the same state: no policy's step-0 training starts earlier than the exhaustive search's;
* on a segment, no policy's throughput is above the exhaustive search's (reported with its cause if it were);
* an exhaustive search too large to run refuses with the count, instead of running for hours;
* with declared worker sizes the candidates include regroups, which the cluster charges as new workers of their
  size, and no one-size candidate puts a worker in a role its size is not allowed; without sizes the candidate set
  is the one-size one; on a small sized run the search replays exactly and is at least pearl_sched.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pearl_sched import Mode, Role
from pearl_sched.config import PolicyConfig
from pearl_sched.control import Assignment
from pearl_sched.errors import SimulationError
from pearl_sched.sim.availability import AvailabilityTrace
from pearl_sched.sim.baselines import POLICIES
from pearl_sched.sim.cluster import SegmentResult, SimCluster, run_segment
from pearl_sched.sim.experiment import (
    PolicyRun,
    Report,
    costs_for,
    hindsight_search,
    run_policy_segment,
    setting_for,
)
from pearl_sched.sim.hindsight import HindsightSearch, Regroup
from pearl_sched.sim.scenario import Scenario, ScenarioError, load_scenario
from pearl_sched.state import WorkerSize

from .builders import DATA, tiny

pytestmark = pytest.mark.needs_data  # every test here simulates a scenario built from the data

# GPUs join at 100 s and leave at 250 s, inside step 0's rollout: three decision intervals to search
TRACE = AvailabilityTrace(np.array([0.0, 100.0, 250.0]), np.array([8.0, 12.0, 6.0]), 400.0)
# GPUs that join during step 0 cannot speed up its slowest trajectory but serve step 1 (the tie-break's case),
# and some leave during step 1
TWO_STEPS = AvailabilityTrace(np.array([0.0, 200.0, 500.0]), np.array([4.0, 14.0, 8.0]), 900.0)
ELASTIC = [name for name, spec in POLICIES.items() if spec.fixed_pool is None and name != "oracle-hindsight"]


def _run(decider: object, name: str = "", trace: AvailabilityTrace = TRACE) -> SegmentResult:
    scenario = tiny()
    spec = POLICIES.get(name)
    return run_segment(
        setting_for(scenario, DATA),
        trace,
        decider,  # type: ignore[arg-type]
        costs=costs_for(scenario),
        tick_s=60.0,
        allow_borrow=spec.allow_borrow if spec is not None else True,
    )


@pytest.fixture(scope="module")
def exhaustive() -> tuple[HindsightSearch, SegmentResult]:
    search = HindsightSearch(beam=None, shares=None)
    return search, _run(search)


def _policies(trace: AvailabilityTrace) -> dict[str, SegmentResult]:
    scenario = tiny()
    setting = setting_for(scenario, DATA)
    return {
        name: _run(POLICIES[name].build(setting, costs_for(scenario), PolicyConfig()), name, trace) for name in ELASTIC
    }


def test_the_search_predicts_the_training_starts_the_cluster_then_gets() -> None:
    search = HindsightSearch()
    result = _run(search)
    assert result.steps and search.replans == 0
    predicted = dict(search.predicted_s)
    for step in result.steps:
        assert step.train_start_s == pytest.approx(predicted[step.step], rel=1e-12)
    assert search.simulations > len(search.search_costs), "it compared several plans per step"
    assert not search.exact


def test_the_exhaustive_search_is_exact_and_searches_every_interval(
    exhaustive: tuple[HindsightSearch, SegmentResult],
) -> None:
    search, result = exhaustive
    assert search.exact
    cost = search.search_costs[0]
    assert cost.exhaustive and cost.decision_points >= 3, "the boundary, the join and the leave were branched on"
    assert result.steps[0].train_start_s == pytest.approx(search.predicted_s[0][1], rel=1e-12)


def test_no_policy_starts_step_0_training_before_the_exhaustive_search(
    exhaustive: tuple[HindsightSearch, SegmentResult],
) -> None:
    """Step 0 starts from the same fresh cluster under every policy, so here the search is a true bound."""
    _, bound = exhaustive
    pruned = _run(HindsightSearch())
    assert bound.steps[0].train_start_s <= pruned.steps[0].train_start_s + 1e-9
    for name, result in _policies(TRACE).items():
        assert result.steps, name
        assert bound.steps[0].train_start_s <= result.steps[0].train_start_s + 1e-9, name
        assert bound.throughput_tok_s >= result.throughput_tok_s * (1 - 1e-12), name


@pytest.mark.slow
def test_no_policy_beats_the_exhaustive_search_over_two_steps() -> None:
    """Over two steps the search is per step, not a bound by construction, so a policy may beat it, and where the
    gateway's equal scores go is drawn at random (seeded, as smg draws them), so two action sequences that differ in
    anything see other draws. On this instance oracle-lookahead beats it by 0.011% with the scenario's tie seed 0
    (273.049 against 273.019 tok/s: step 1 the same, step 2 64 ms sooner); with tie seeds 1 and 2 nothing does, and
    the search itself makes 273.072 and 273.066 (a 0.02% span from the draws alone). Held here: nothing beats it by
    more than 0.05%, a margin over that span."""
    bound = _run(HindsightSearch(beam=None, shares=None), trace=TWO_STEPS)
    assert len(bound.steps) == 2
    for name, result in _policies(TWO_STEPS).items():
        assert bound.throughput_tok_s >= result.throughput_tok_s * (1 - 5e-4), name


def test_an_exhaustive_search_too_large_refuses_with_the_count() -> None:
    with pytest.raises(SimulationError, match="passed 3 simulations; use a beam"):
        _run(HindsightSearch(beam=None, shares=None, max_simulations=3))


def test_the_beam_must_keep_a_state() -> None:
    with pytest.raises(ValueError, match="beam must be at least 1"):
        HindsightSearch(beam=0)


def test_a_ratio_on_a_segment_a_run_lacks_names_it(exhaustive: tuple[HindsightSearch, SegmentResult]) -> None:
    _, result = exhaustive
    report = Report(tiny(), {"a": PolicyRun("tiny", "a", [result]), "b": PolicyRun("tiny", "b", [])})
    assert report.ratio("a", "a", result.segment) == pytest.approx(1.0)
    with pytest.raises(ScenarioError, match=r"policy 'b' has no run of segment 'segment' \(it ran: none\)"):
        report.ratio("a", "b", result.segment)


# -- worker sizes ---------------------------------------------------------------------------------------------
SIZES = {"prefill": [1, 2], "decode": [2, 4], "colocated": [2, 4]}
BOTH = (Mode.COLOCATED, Mode.DISAGGREGATED)


def _cluster(scenario: Scenario) -> SimCluster:
    return SimCluster(setting_for(scenario, DATA), costs=costs_for(scenario), worker_sizes=scenario.worker_sizes)


def _serving(target: Assignment) -> dict[str, str]:
    return {slot: role.value for slot, role in target.roles().items() if role is not None}


def test_without_sizes_the_candidates_are_the_one_size_ones() -> None:
    """Eight dedicated GPUs (four TP2 slots) and four idle training GPUs: the candidates the search had before sizes."""
    cluster = _cluster(tiny(batch_prompts=8, dedicated_rollout_gpus=8))
    actions = HindsightSearch().actions(cluster.observe(), BOTH, boundary=True)
    assert all(type(a) is Assignment for a in actions)
    assert [a.ratio for a in actions if a is not None] == ["4C", "1P3D", "2P2D", "3P1D", "6C", "2P4D", "3P3D", "4P2D"]
    assert _serving(actions[5]) == {  # type: ignore[arg-type]
        "dw00": "prefill", "dw01": "prefill", "dw02": "decode", "dw03": "decode", "tw00": "decode", "tw01": "decode",
    }  # fmt: skip


def test_with_sizes_the_candidates_regroup_and_the_cluster_charges_the_new_workers_their_size() -> None:
    scenario = tiny(worker_sizes=SIZES, batch_prompts=8, dedicated_rollout_gpus=8)
    plain = HindsightSearch().actions(_cluster(tiny(batch_prompts=8, dedicated_rollout_gpus=8)).observe(), BOTH, True)
    cluster = _cluster(scenario)
    search = HindsightSearch()
    at_boundary = search.actions(cluster.observe(), BOTH, boundary=True)
    # the one-size candidates first, unchanged (TP2 is allowed in every role), then the regroups
    assert [_serving(a) for a in at_boundary[: len(plain)]] == [_serving(a) for a in plain]  # type: ignore[arg-type]
    regroups = [a for a in at_boundary if isinstance(a, Regroup)]
    assert len(regroups) == len(at_boundary) - len(plain) > 0
    assert "2C" in {a.ratio for a in regroups}  # colocated at TP4: two TP4 workers on the eight dedicated GPUs
    for target in regroups:
        for action in target.actions:  # every new worker has a size its role allows
            assert WorkerSize(tp=action.tp, dp=action.dp) in scenario.worker_sizes.allowed(action.to_role)  # type: ignore[union-attr, arg-type]

    # inside a disaggregated batch: a TP4 decode worker formed from two TP2 slots, at a TP4 worker's cost
    cluster.apply(Assignment(Mode.DISAGGREGATED, {"dw00": Role.PREFILL, "dw01": Role.DECODE, "dw02": Role.DECODE}))
    cluster.launch(0)
    assert cluster.advance(30.0)
    inside = search.actions(cluster.observe(), (Mode.DISAGGREGATED,), boundary=False)
    assert all(a is None or a.mode is Mode.DISAGGREGATED for a in inside)
    tp4 = next(
        a
        for a in inside
        if isinstance(a, Regroup) and [x.gpu_ids for x in a.actions] == [("d4", "d5", "d6", "d7")]
        and _serving(a) == {"dw00": "prefill", "dw01": "decode", "w-d4-tp4": "decode"}
    )  # fmt: skip
    report = cluster.apply(tp4)
    assert report.seconds_lost == pytest.approx(cluster.costs.preparation_for(4) + cluster.costs.finalisation_s)
    assert cluster.costs.preparation_for(4) != cluster.costs.preparation_for(2)
    assert cluster.serving() == "1P(tp2)2D(1×tp2+1×tp4)"

    # a one-GPU worker left over by a regroup may prefill but is never offered decode (TP1 is prefill-only here)
    tp1 = next(
        a
        for a in search.actions(cluster.observe(), (Mode.DISAGGREGATED,), False)
        if a is not None and any(x.tp == 1 for x in getattr(a, "actions", ()))
    )
    cluster.apply(tp1)
    state = cluster.observe()
    one_gpu = {w.id for w in state.workers if w.tp == 1}
    assert one_gpu
    for target in search.actions(state, (Mode.DISAGGREGATED,), boundary=False):
        if target is None:
            continue
        roles = target.roles()
        assert all(roles.get(slot) in (None, Role.PREFILL) for slot in one_gpu)


@pytest.fixture(scope="module")
def sized_runs() -> tuple[HindsightSearch, SegmentResult, SegmentResult]:
    scenario = tiny(worker_sizes=SIZES, batch_prompts=8, dedicated_rollout_gpus=8)
    segment = scenario.segments[0]
    trace, factor = scenario.availability(segment, DATA)
    search = HindsightSearch()
    result = run_segment(
        setting_for(scenario, DATA),
        trace,
        search,
        costs=costs_for(scenario),
        segment=segment.name,
        scaling_factor=factor,
        tick_s=60.0,
        worker_sizes=scenario.worker_sizes,
    )
    return search, result, run_policy_segment(scenario, "pearl_sched", 0, DATA)


@pytest.mark.slow
def test_with_sizes_the_search_replays_exactly_and_is_at_least_pearl_sched(
    sized_runs: tuple[HindsightSearch, SegmentResult, SegmentResult],
) -> None:
    search, oracle, pearl_sched = sized_runs
    assert oracle.steps and search.replans == 0
    predicted = dict(search.predicted_s)
    for step in oracle.steps:
        assert step.train_start_s == pytest.approx(predicted[step.step], rel=1e-12)
    assert any("(tp" in ratio for _, ratio in oracle.ratios)  # it chose workers of another size
    assert any("(tp" in ratio for _, ratio in pearl_sched.ratios)
    assert oracle.throughput_tok_s >= pearl_sched.throughput_tok_s * (1 - 1e-12)


def test_the_search_line_names_the_sizes_it_searches() -> None:
    sizes = tiny(worker_sizes=SIZES).worker_sizes
    assert HindsightSearch().describe() == "pruned(beam=1,shares=0.25/0.5/0.75)"
    assert (
        HindsightSearch().describe(sizes) == "pruned(beam=1,shares=0.25/0.5/0.75,sizes=P:tp1/tp2,D:tp2/tp4,C:tp2/tp4)"
    )
    assert HindsightSearch(beam=None, shares=None).describe(sizes) == "exhaustive(sizes=P:tp1/tp2,D:tp2/tp4,C:tp2/tp4)"


# -- wider beams and the continuation -------------------------------------------------------------------------
def test_the_continuation_follows_with_every_usable_worker_at_the_share_in_force() -> None:
    """Inside a batch the continuation's action is one of the search's own: every usable worker, the split kept."""
    search = HindsightSearch(continuation=True)
    for mode, start, expected in (
        (Mode.COLOCATED, {"dw00": Role.COLOCATED, "dw01": Role.COLOCATED}, "6C"),
        (Mode.DISAGGREGATED, {"dw00": Role.PREFILL, "dw01": Role.DECODE}, "3P3D"),
        (Mode.DISAGGREGATED, {"dw00": Role.PREFILL, "dw01": Role.DECODE, "dw02": Role.DECODE}, "2P4D"),
    ):
        cluster = _cluster(tiny(batch_prompts=8, dedicated_rollout_gpus=8))
        cluster.apply(Assignment(mode, start))
        cluster.launch(0)
        assert cluster.advance(30.0)
        state = cluster.observe()
        target = search.follow(state, mode)
        assert target is not None and target.mode is mode and target.ratio == expected, expected
        assert target.roles() in [a.roles() for a in search.actions(state, (mode,), boundary=False) if a is not None]
        assert all(target.roles()[slot] is role for slot, role in start.items())  # serving slots keep their role
        cluster.apply(target)
        assert search.follow(cluster.observe(), mode) is None  # nothing more to use: keep


@pytest.mark.parametrize(
    "wider",
    [
        pytest.param({"beam": 4}, id="beam4"),
        pytest.param({"continuation": True}, id="continued"),
        pytest.param({"beam": 4, "continuation": True}, id="beam4-continued"),
    ],
)
@pytest.mark.parametrize("trace", [pytest.param(TRACE, id="join-leave"), pytest.param(TWO_STEPS, id="two-steps")])
def test_a_wider_search_replays_exactly_and_is_at_least_beam_1_and_pearl_sched(
    wider: dict[str, object], trace: AvailabilityTrace
) -> None:
    search = HindsightSearch(**wider)  # type: ignore[arg-type]
    result = _run(search, trace=trace)
    assert result.steps and search.replans == 0
    predicted = dict(search.predicted_s)
    for step in result.steps:
        assert step.train_start_s == pytest.approx(predicted[step.step], rel=1e-12)
    narrow = _run(HindsightSearch(), trace=trace)
    scenario = tiny()
    planner = POLICIES["pearl_sched"].build(setting_for(scenario, DATA), costs_for(scenario), PolicyConfig())
    pearl_sched = _run(planner, "pearl_sched", trace)
    assert result.throughput_tok_s >= narrow.throughput_tok_s * (1 - 1e-12)
    assert result.throughput_tok_s >= pearl_sched.throughput_tok_s * (1 - 1e-12)
    assert result.steps[0].train_start_s <= narrow.steps[0].train_start_s + 1e-9


def test_the_search_line_says_when_it_continues() -> None:
    assert HindsightSearch(continuation=True).describe() == "pruned(beam=1,shares=0.25/0.5/0.75,continued)"
    assert HindsightSearch(beam=4, continuation=True).describe() == "pruned(beam=4,shares=0.25/0.5/0.75,continued)"
    assert HindsightSearch(beam=None, shares=None, continuation=True).describe() == "exhaustive"  # nothing to judge


def test_a_scenario_declares_how_its_hindsight_search_searches(tmp_path: Path) -> None:
    """Without the setting every scenario gets the shipped search; with it, its beam and continuation."""
    assert hindsight_search(tiny()).describe() == HindsightSearch().describe() == "pruned(beam=1,shares=0.25/0.5/0.75)"
    assert "hindsight_search" not in tiny().model_dump(mode="json")  # scenarios without it dump as before
    declared = tiny(hindsight_search={"beam": 2, "continuation": True})
    search = hindsight_search(declared)
    assert (search.beam, search.continuation) == (2, True)
    assert search.describe() == "pruned(beam=2,shares=0.25/0.5/0.75,continued)"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**tiny().model_dump(mode="json"), "hindsight_search": {"beam": 0}}))
    refused = r"bad.json: hindsight_search.beam: Input should be greater than or equal to 1 "
    with pytest.raises(ScenarioError, match=refused):
        load_scenario(bad)


def test_the_bench_names_the_search_a_scenario_declares_and_where_it_is_beaten(
    exhaustive: tuple[HindsightSearch, SegmentResult], capsys: pytest.CaptureFixture[str]
) -> None:
    """bench/reproduce.py's cost and ``oracle_beaten`` lines say what the scenario's search searched."""
    import dataclasses

    from bench import reproduce as bench

    _, result = exhaustive
    steps = [dataclasses.replace(s, generated_tokens=2 * s.generated_tokens, training_tokens=2 * s.training_tokens)
             for s in result.steps]  # fmt: skip
    better = dataclasses.replace(result, steps=steps)  # a made-up run twice the search's throughput
    scenario = tiny(hindsight_search={"beam": 2, "continuation": True})
    runs = {"oracle-hindsight": [result], "pearl_sched": [result], "other": [better]}
    bench._oracle_lines(Report(scenario, {p: PolicyRun(scenario.name, p, r) for p, r in runs.items()}))
    out = capsys.readouterr().out
    assert "search=pruned(beam=2,shares=0.25/0.5/0.75,continued) simulations=" in out
    beaten = [line for line in out.splitlines() if line.startswith("oracle_beaten")]
    assert len(beaten) == 1 and "policy=other ratio=2.0000" in beaten[0]
    assert beaten[0].endswith("search=pruned(beam=2,shares=0.25/0.5/0.75,continued)")
