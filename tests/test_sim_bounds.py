"""The oracles and Ray sweeps: the greedy lookahead matches what the cluster then does; Ray = serial."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from pearl_sched.control import Event, EventKind, PlannerDecider
from pearl_sched.errors import MissingExtraError, SimulationError
from pearl_sched.makespan import DeviceParams, PearlMakespanModel
from pearl_sched.sim.availability import AvailabilityTrace
from pearl_sched.sim.baselines import POLICIES, FixedColocated, GreedyLookahead, RLBoostPlus
from pearl_sched.sim.cluster import ObservedStepTimes, SimCluster, run_segment
from pearl_sched.sim.experiment import costs_for, run_scenario, setting_for
from pearl_sched.sim.steptimes import LinearStepTimes
from pearl_sched.state import Zone

from .builders import DATA, Slot, state, tiny

pytestmark = pytest.mark.needs_data  # every test here simulates a scenario built from the data


def test_greedy_lookahead_predicts_the_training_start_it_then_gets() -> None:
    """With constant availability nothing but ticks happens inside step 0, where the oracle keeps: the copy it
    simulated ahead at the step boundary is exactly the run the cluster then makes."""
    scenario = tiny()
    setting = setting_for(scenario, DATA)
    trace = AvailabilityTrace(np.zeros(1), np.array([12.0]), 900.0)
    oracle = GreedyLookahead()
    result = run_segment(setting, trace, oracle, costs=costs_for(scenario), tick_s=120.0)
    assert result.steps and oracle.lookaheads >= 2, "it compared at least two candidates"
    boundary_s, predicted_s = oracle.predicted_s[0]
    assert boundary_s == 0.0
    assert result.steps[0].train_start_s == pytest.approx(predicted_s, rel=1e-9)


def test_greedy_lookahead_needs_the_simulated_cluster() -> None:
    with pytest.raises(SimulationError, match="run_segment"):
        GreedyLookahead().decide(Event(EventKind.STEP_BOUNDARY, 0.0), state([Slot()] * 2))


def test_both_oracles_are_registered_under_their_own_names() -> None:
    assert {"oracle-static", "oracle-hindsight", "oracle-lookahead"} <= set(POLICIES)
    assert "oracle" not in POLICIES


def test_a_report_says_which_oracle_its_ratios_use() -> None:
    report = run_scenario(tiny(), ["roll", "oracle-static"], DATA)
    assert report.oracle() == "oracle-static"
    assert {row["oracle"] for row in report.rows()} == {"static"}


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time under pytest-xdist
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


def test_rlboost_seeding_window_starts_closed_and_opens_by_the_trainer_wait() -> None:
    """T_seed starts at 0 s: the first batch lends nothing; the trainer then waited for rollout, so the window
    grows by η × that wait and later batches lend the idle training GPUs colocated, handing them back."""
    scenario = tiny()
    setting = setting_for(scenario, DATA)
    trace = AvailabilityTrace(np.zeros(1), np.array([8.0]), 900.0)
    rlboost = RLBoostPlus()
    result = run_segment(setting, trace, rlboost, costs=costs_for(scenario), tick_s=60.0)
    first_end_s = result.steps[0].rollout_end_s
    lent = [(t, label) for t, slot, label in result.timeline if slot.startswith("tw")]
    assert lent and all(t > first_end_s for t, _ in lent), "nothing is lent before the window has grown"
    assert {label for _, label in lent} == {"colocated", "training"}
    assert rlboost.seed_s and all(v > 0 for v in rlboost.seed_s.values())


def test_rlboost_window_for_a_new_remote_count_goes_on_from_the_window_in_force() -> None:
    """RLBoost's code (PolyRL, balance.rs) keeps adjusting the current window when the remote count changes to one
    it has no stored value for: the batch after 4 GPUs join still lends the training GPUs, it does not restart at
    0 s for the new count."""
    scenario = tiny()
    setting = setting_for(scenario, DATA)
    trace = AvailabilityTrace(np.array([0.0, 300.0]), np.array([8.0, 12.0]), 1500.0)
    rlboost = RLBoostPlus()
    result = run_segment(setting, trace, rlboost, costs=costs_for(scenario), tick_s=60.0)
    second = result.steps[1]
    assert second.ratio_at_start == "6C", "the joined GPUs serve from the second batch on"
    lent = [t for t, slot, label in result.timeline if slot.startswith("tw") and label == "colocated"]
    assert any(second.rollout_start_s <= t < second.rollout_end_s for t in lent), "the new count's first window lends"
    assert set(rlboost.seed_s) == {4, 6}


def test_planners_see_the_telemetry_refit_after_a_batch_not_the_prior() -> None:
    """Before any batch the planners' workload is the stated prior; after batch 0 it is batch 0's telemetry as
    reported per turn (the first accepted step is taken as it is), then an EWMA with batch 1's."""
    scenario = tiny()
    setting = setting_for(scenario, DATA)
    cluster = SimCluster(setting, costs=costs_for(scenario), dedicated_gpus=4, preemptible_gpus=0)
    assert cluster.observe().workload == setting.workload()
    turns = []
    for step in (0, 1):
        target = FixedColocated("c", (Zone.DEDICATED,)).decide(Event(EventKind.STEP_BOUNDARY, 0), cluster.observe())
        if target is not None:  # step 1 keeps step 0's workers
            cluster.apply(target)
        cluster.launch(step)
        assert not cluster.advance(math.inf)
        cluster.finish_batch()
        turns.append(float(np.mean([len(t.turns) for t in setting.batch(step)])))
        if step == 0:
            assert cluster.trajectory_stats is not None
            assert cluster.trajectory_stats.turns_mean == pytest.approx(turns[0])
    assert cluster.trajectory_stats is not None and cluster.trajectory_stats.steps == 2
    assert cluster.trajectory_stats.turns_mean == pytest.approx(0.7 * turns[0] + 0.3 * turns[1])
    workload = cluster.observe().workload
    assert workload.turns == pytest.approx(cluster.trajectory_stats.turns_slowest)


def test_observed_step_times_recover_a_linear_world() -> None:
    """On PEARL-linear step times the fit from recorded steps is the world's own parameters."""
    world = DeviceParams(
        gpu_type="h200",
        tp=2,
        prefill_s_per_token=2e-5,
        decode_iteration_s=0.004,
        decode_per_seq_s=3e-5,
        kv_capacity_bytes=1e11,
    )
    observed = ObservedStepTimes(LinearStepTimes(world))
    for n in (1, 5, 17, 64):
        observed.decode_s(n, 1000.0)
        observed.prefill_s(100.0 * n, n, 0.0)
    prior = world.model_copy(update={"prefill_s_per_token": 1.0, "decode_iteration_s": 1.0, "decode_per_seq_s": 1.0})
    fitted = observed.fit(prior)
    assert fitted is not None
    assert fitted.prefill_s_per_token == pytest.approx(2e-5)
    assert fitted.decode_iteration_s == pytest.approx(0.004)
    assert fitted.decode_per_seq_s == pytest.approx(3e-5)
    observed.reset()
    observed.decode_s(8, 1000.0)
    assert observed.fit(prior) is None, "one decode batch size cannot separate A from b"


def test_planners_plan_on_parameters_refitted_from_observed_steps() -> None:
    scenario = tiny()
    setting = setting_for(scenario, DATA)
    trace = AvailabilityTrace(np.zeros(1), np.array([8.0]), 900.0)
    decider = PlannerDecider("pearl", setting.predictor("pearl"), backend="enumeration", costs=costs_for(scenario))
    result = run_segment(setting, trace, decider, costs=costs_for(scenario), tick_s=300.0)
    assert len(result.steps) >= 2
    assert isinstance(decider.model, PearlMakespanModel)
    assert decider.model.params.source == "refitted from observed steps"
    assert decider.model.params.devices[0] != setting.pearl_params.devices[0]


def test_without_the_ray_extra_ray_sweeps_name_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``None`` in sys.modules makes ``import ray`` fail as on a machine without the extra."""
    from typer.testing import CliRunner

    from pearl_sched.cli import app

    monkeypatch.setitem(sys.modules, "ray", None)
    result = CliRunner().invoke(app, ["simulate", "e2e", "--ray", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "pearl-sched[ray]" in result.output
    with pytest.raises(MissingExtraError, match=r"pearl-sched\[ray\]"):
        run_scenario(tiny(), ["roll"], DATA, ray=True)
