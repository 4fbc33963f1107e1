"""Availability traces and scenario files."""

from __future__ import annotations

from pathlib import Path

import pytest

from pearl_sched.sim.availability import AvailabilityTrace, TraceFormatError
from pearl_sched.sim.scenario import ScenarioError, load_scenario, shipped_scenarios

from .builders import DATA

BAMBOO = DATA / "bamboo" / "p3-trace.csv"


@pytest.mark.needs_data
def test_bamboo_trace_parses_into_live_nodes() -> None:
    trace = AvailabilityTrace.from_bamboo(BAMBOO)
    assert trace.end_s == pytest.approx(11.3667 * 3600, rel=1e-3)  # 344 events over about 11.4 hours
    assert trace.counts.max() == 32 and trace.at(0.0) > 0
    window = trace.window(8 * 3600, 7200)
    assert window.end_s == 7200 and window.times_s[0] == 0
    assert 11 <= window.counts.min() <= window.counts.max() <= 24


@pytest.mark.needs_data
def test_scaling_hits_the_target_mean_in_whole_tp_groups() -> None:
    window = AvailabilityTrace.from_bamboo(BAMBOO).window(0, 7200)
    scaled, factor = window.scaled_to_mean(9.6, cap=12, step=2)
    assert abs(scaled.mean() - 9.6) < 0.3
    assert set(scaled.counts.tolist()) <= {0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0}
    assert 0 < factor < 1
    with pytest.raises(ValueError, match="outside"):
        window.scaled_to_mean(20, cap=12)


def test_bad_trace_lines_are_named(tmp_path: Path) -> None:
    bad = tmp_path / "trace.csv"
    bad.write_text("0,add,node1\n10,explode,node1\n")
    with pytest.raises(TraceFormatError, match=r"trace.csv:2: expected"):
        AvailabilityTrace.from_bamboo(bad)
    bad.write_text("10,add,node1\n5,remove,node1\n")
    with pytest.raises(TraceFormatError, match="time goes backwards"):
        AvailabilityTrace.from_bamboo(bad)


@pytest.mark.needs_data
def test_e2e_scenario_segments_match_the_papers_means() -> None:
    assert "e2e" in shipped_scenarios()
    scenario = load_scenario("e2e")
    assert scenario.trajectories_per_step == 1024
    for segment, target in zip(scenario.segments, (13.6, 9.0, 11.8), strict=True):
        gpus, _ = scenario.availability(segment, DATA)
        assert abs(gpus.mean() - target) < 0.3
        assert gpus.counts.min() >= scenario.dedicated_rollout_gpus
        assert gpus.counts.max() <= scenario.dedicated_rollout_gpus + scenario.max_preemptible_gpus


def test_scenario_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"shipped scenarios: .*e2e"):
        load_scenario("nope")
    broken = tmp_path / "broken.json"
    broken.write_text('{"name": "x"}')
    with pytest.raises(ScenarioError, match=r"broken.json: description: Field required"):
        load_scenario(broken)
