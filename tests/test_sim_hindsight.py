"""The hindsight search (``oracle-hindsight``): its plan is the run the cluster then makes, and on small instances
the exhaustive search is at least every policy.

Invariants checked:
* the training start the search predicts for a step is the one the cluster then gets (the replay is exact);
* exhaustive (exact over its action space) ≤ the pruned beam ≤ nothing else on step 0, which every policy starts
  from the same state: no policy's step-0 training starts earlier than the exhaustive search's;
* on a segment, no policy's throughput is above the exhaustive search's (reported with its cause if it were);
* an exhaustive search too large to run refuses with the count, instead of running for hours.
"""

from __future__ import annotations

import numpy as np
import pytest

from pearl_sched.config import PolicyConfig
from pearl_sched.errors import SimulationError
from pearl_sched.sim.availability import AvailabilityTrace
from pearl_sched.sim.baselines import POLICIES
from pearl_sched.sim.cluster import SegmentResult, run_segment
from pearl_sched.sim.experiment import PolicyRun, Report, costs_for, setting_for
from pearl_sched.sim.hindsight import HindsightSearch
from pearl_sched.sim.scenario import ScenarioError

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


def test_no_policy_beats_the_exhaustive_search_over_two_steps() -> None:
    """Over two steps the search is per step, not a bound by construction; on this instance nothing beats it."""
    bound = _run(HindsightSearch(beam=None, shares=None), trace=TWO_STEPS)
    assert len(bound.steps) == 2
    for name, result in _policies(TWO_STEPS).items():
        assert bound.throughput_tok_s >= result.throughput_tok_s * (1 - 1e-12), name


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
