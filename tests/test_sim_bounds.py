"""The oracles and Ray sweeps: the hindsight oracle's lookahead matches what the cluster then does; Ray = serial."""

from __future__ import annotations

import numpy as np
import pytest

from pearl_sched.control import Event, EventKind
from pearl_sched.errors import SimulationError
from pearl_sched.sim.availability import AvailabilityTrace
from pearl_sched.sim.baselines import POLICIES, HindsightOracle
from pearl_sched.sim.cluster import run_segment
from pearl_sched.sim.experiment import costs_for, run_scenario, setting_for

from .builders import DATA, Slot, state, tiny

pytestmark = pytest.mark.needs_data  # every test here simulates a scenario built from the data


def test_hindsight_oracle_predicts_the_training_start_it_then_gets() -> None:
    """With constant availability nothing but ticks happens inside step 0, where the oracle keeps: the copy it
    simulated ahead at the step boundary is exactly the run the cluster then makes."""
    scenario = tiny()
    setting = setting_for(scenario, DATA)
    trace = AvailabilityTrace(np.zeros(1), np.array([12.0]), 900.0)
    oracle = HindsightOracle()
    result = run_segment(setting, trace, oracle, costs=costs_for(scenario), tick_s=120.0)
    assert result.steps and oracle.lookaheads >= 2, "it compared at least two candidates"
    boundary_s, predicted_s = oracle.predicted_s[0]
    assert boundary_s == 0.0
    assert result.steps[0].train_start_s == pytest.approx(predicted_s, rel=1e-9)


def test_hindsight_oracle_needs_the_simulated_cluster() -> None:
    with pytest.raises(SimulationError, match="run_segment"):
        HindsightOracle().decide(Event(EventKind.STEP_BOUNDARY, 0.0), state([Slot()] * 2))


def test_both_oracles_are_registered_under_their_own_names() -> None:
    assert {"oracle-static", "oracle-hindsight"} <= set(POLICIES)
    assert "oracle" not in POLICIES


def test_a_report_says_which_oracle_its_ratios_use() -> None:
    report = run_scenario(tiny(), ["roll", "oracle-static"], DATA)
    assert report.oracle() == "oracle-static"
    assert {row["oracle"] for row in report.rows()} == {"static"}


def test_ray_sweep_gives_the_serial_report() -> None:
    ray = pytest.importorskip("ray")
    scenario = tiny()
    policies = ["roll", "pearl_sched"]
    serial = run_scenario(scenario, policies, DATA)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        distributed = run_scenario(scenario, policies, DATA, ray=True)
    finally:
        ray.shutdown()
    a, b = serial.to_json(), distributed.to_json()
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b
