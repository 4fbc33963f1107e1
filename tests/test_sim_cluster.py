"""The simulated cluster over time: the trainer, borrowing, preemption, policies, invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl_sched import Mode, Role
from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.control import Assignment, ClusterAdapter, ControlLoop, Event, EventKind, LoopMetrics
from pearl_sched.makespan import DeviceParams
from pearl_sched.sim.availability import AvailabilityTrace
from pearl_sched.sim.baselines import POLICIES, FixedColocated
from pearl_sched.sim.cluster import SegmentResult, SimCluster, run_segment
from pearl_sched.sim.experiment import costs_for, run_policy_segment, setting_for
from pearl_sched.sim.rollout import TrajectorySpec, Turn
from pearl_sched.sim.scenario import shipped_scenarios
from pearl_sched.sim.setting import Setting
from pearl_sched.sim.steptimes import LinearStepTimes
from pearl_sched.state import Zone

from .builders import DATA, tiny

pytestmark = pytest.mark.needs_data  # every test here simulates a scenario built from the data


class HandSetting(Setting):
    """A setting whose work is one 100-token prompt generating 10 tokens, on PEARL-linear step times
    (1 ms per prefill token, 10 ms per decode iteration), with one-second training steps: every number in a run
    can be worked out by hand."""

    def batch(self, step: int) -> tuple[TrajectorySpec, ...]:
        return (TrajectorySpec((Turn(100, 10, 0.0),)),)

    def training_s(self, tokens: int) -> float:
        return 1.0


def hand_setting() -> Setting:
    real = setting_for(tiny(), DATA)
    device = DeviceParams(
        gpu_type="h200",
        tp=2,
        prefill_s_per_token=1e-3,
        decode_iteration_s=0.01,
        decode_per_seq_s=1e-12,
        kv_capacity_bytes=1e12,
    )
    fields = {k: getattr(real, k) for k in real.__dataclass_fields__}
    fields["steps"] = LinearStepTimes(device)
    fields["step_overhead_s"] = 0.0  # the hand computation has no per-step framework overhead (setting.py's 1.96 ms)
    return HandSetting(**fields)


def test_a_run_small_enough_to_work_out_by_hand() -> None:
    setting = hand_setting()
    trace = AvailabilityTrace(np.zeros(1), np.array([4.0]), 3.0)
    result = run_segment(
        setting, trace, FixedColocated("one", (Zone.DEDICATED,)), costs=TransitionCosts(), tick_s=100.0
    )
    # Rollout: 0.1 s prefill + 10 × 10 ms decode = 0.2 s. Training: 1 s once the rollout is in and the previous
    # step is trained. Staleness 1: rollout k + 1 starts when rollout k is done and training k − 1 is done.
    # A step whose rollout ends inside the 3-second segment counts, even when its training ends after it.
    expected = [(0.0, 0.2, 0.2, 1.2), (0.2, 0.4, 1.2, 2.2), (1.2, 1.4, 2.2, 3.2), (2.2, 2.4, 3.2, 4.2)]
    got = [(s.rollout_start_s, s.rollout_end_s, s.train_start_s, s.train_end_s) for s in result.steps]
    assert np.allclose(got, expected)
    assert [s.step_time_s for s in result.steps] == pytest.approx([1.2, 1.0, 1.0, 1.0])
    # Throughput: (10 generated + 110 trained tokens) per step over the step times.
    assert result.throughput_tok_s == pytest.approx(4 * 120 / 4.2)
    assert result.carried_over == 0  # the next rollout would start at 3.2 s, after the end
    assert result.steps[0].ratio_at_start == "2C"  # 4 dedicated GPUs at TP2
    # The one 100-token prompt is computed each step; a one-turn trajectory has no prefix to find cached.
    assert [(s.prefill_tokens, s.cache_hit_tokens) for s in result.steps] == [(100, 0)] * 4


def test_each_steps_gateway_is_seeded_from_the_scenario_and_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Step k's batch runs behind a gateway whose ties are drawn from tie_seed × 1,000,003 + k, whatever the policy
    did before it, as the batches are seeded (the hand run's four steps, with the scenario's tie seed 5)."""
    import pearl_sched.sim.cluster as cluster_module

    setting = hand_setting()
    setting.scenario = setting.scenario.model_copy(update={"tie_seed": 5})
    seeds: list[int | None] = []

    class Recorded(cluster_module.RolloutSimulation):
        def __init__(self, pool, *args, **kwargs):  # type: ignore[no-untyped-def]
            seeds.append(pool.tie_seed)
            super().__init__(pool, *args, **kwargs)

    monkeypatch.setattr(cluster_module, "RolloutSimulation", Recorded)
    trace = AvailabilityTrace(np.zeros(1), np.array([4.0]), 3.0)
    result = run_segment(
        setting, trace, FixedColocated("one", (Zone.DEDICATED,)), costs=TransitionCosts(), tick_s=100.0
    )
    assert [s.step for s in result.steps] == [0, 1, 2, 3]
    assert seeds == [5 * 1_000_003 + k for k in range(4)]


def test_borrowed_gpus_join_after_activation_and_delay_training_by_the_deactivation() -> None:
    setting = hand_setting()
    costs = TransitionCosts(activation_s=0.05, deactivation_s=0.3)
    trace = AvailabilityTrace(np.zeros(1), np.array([2.0]), 1.0)

    class BorrowAll:
        name = "borrow-all"

        def decide(self, event: Event, state):  # type: ignore[no-untyped-def]
            lend = any(g.zone is Zone.OVERLAP and (g.reclaim_in_s or 0) > 0 for g in state.gpus)
            roles = {w.id: (Role.COLOCATED if (lend or w.id.startswith("d")) else None) for w in state.workers}
            return Assignment(Mode.COLOCATED, roles)

    result = run_segment(setting, trace, BorrowAll(), costs=costs, tick_s=100.0)
    first = result.steps[0]
    # The trainer is idle at the start, so two training TP groups are lent for step 0 and come back at its end.
    assert first.borrowed_workers == 2
    assert first.train_start_s == pytest.approx(first.rollout_end_s + 0.3)
    lent = [(t, slot, label) for t, slot, label in result.timeline if slot.startswith("t")]
    assert ("colocated" in {label for _, _, label in lent}) and lent[-1][2] == "training"


def test_cluster_adapter_protocol_and_loop_metrics() -> None:
    setting = setting_for(tiny(), DATA)
    cluster = SimCluster(setting, costs=costs_for(setting.scenario))
    assert isinstance(cluster, ClusterAdapter)
    metrics = LoopMetrics()
    loop = ControlLoop(cluster, POLICIES["pearl_sched"].build(setting, cluster.costs, cluster.policy), metrics)
    record = loop.handle(Event(EventKind.STEP_BOUNDARY, 0.0))
    assert record.changed > 0 and record.predicted_makespan_s is not None
    text = metrics.exposition().decode()
    assert 'pearl_sched_decisions_total{event="step_boundary"} 1.0' in text
    assert "pearl_sched_predicted_makespan_seconds" in text
    # Re-observing right away and deciding again changes nothing (the plan is kept).
    assert loop.handle(Event(EventKind.TICK, 0.0)).changed == 0


def _check_invariants(
    result: SegmentResult, setting: Setting, trace: AvailabilityTrace, costs: TransitionCosts
) -> None:
    previous_train_end = 0.0
    for step in result.steps:
        batch = setting.batch(step.step)
        # Nothing lost: every trajectory finished, every token generated exactly once.
        assert step.generated_tokens == sum(t.generated_tokens for t in batch)
        # Every appended prompt token is computed or served from a radix cache (contexts and recomputes add more).
        assert step.cache_hit_tokens >= 0
        assert step.prefill_tokens + step.cache_hit_tokens >= sum(u.appended_tokens for t in batch for u in t.turns)
        assert step.rollout_end_s > step.rollout_start_s >= 0
        # Borrowed GPUs are back before training resumes, at most the deactivation time late.
        assert step.train_start_s >= max(step.rollout_end_s, previous_train_end) - 1e-9
        assert step.train_start_s <= max(step.rollout_end_s + costs.deactivation_s, previous_train_end) + 1e-9
        previous_train_end = step.train_end_s
    # No GPU double-booked: at any moment, slots serving on rollout GPUs fit in what the trace makes live, and
    # a training GPU serves rollout only while the trainer is idle.
    labels: dict[str, str] = {}
    idle = [
        (prev.train_end_s if i else 0.0, s.rollout_end_s)
        for i, (prev, s) in enumerate(zip([result.steps[0], *result.steps], result.steps, strict=False))
    ]
    times = sorted({t for t, _, _ in result.timeline})
    for now in times:  # the state after everything that happened at ``now``
        for t, slot, label in result.timeline:
            if t != now:
                continue
            labels[slot] = label
            if slot.startswith("t") and label in ("prefill", "decode", "colocated") and result.steps:
                assert any(a - 1e-9 <= t <= b + 1e-9 for a, b in idle) or t > result.steps[-1].rollout_end_s
        serving = [s for s, lab in labels.items() if lab in ("prefill", "decode", "colocated")]
        on_rollout_gpus = [s for s in serving if not s.startswith("t")]
        assert 2 * len(on_rollout_gpus) <= trace.at(now) + 1e-9
    assert result.carried_over >= 0


@pytest.mark.slow
@given(
    counts=st.lists(st.sampled_from([4.0, 6.0, 8.0]), min_size=1, max_size=4),
    policy=st.sampled_from(["rlboost+", "static-3p5d", "pearl_sched", "ungated"]),
    seed=st.integers(0, 3),
)
def test_invariants_hold_under_random_availability(counts: list[float], policy: str, seed: int) -> None:
    scenario = tiny(seed=seed, max_preemptible_gpus=4)
    setting = setting_for(scenario, DATA)
    duration = 900.0
    times = np.linspace(0.0, duration, len(counts), endpoint=False)
    trace = AvailabilityTrace(times, np.array(counts), duration)
    costs = costs_for(scenario)
    spec = POLICIES[policy]
    result = run_segment(
        setting,
        trace,
        spec.build(setting, costs, PolicyConfig()),
        costs=costs,
        allow_borrow=spec.allow_borrow,
        tick_s=120.0,
    )
    assert result.steps, "a 15-minute segment of 16 short trajectories completes steps"
    _check_invariants(result, setting, trace, costs)


def test_runs_are_deterministic() -> None:
    scenario = tiny()
    first = run_policy_segment(scenario, "pearl_sched", 1, DATA)
    second = run_policy_segment(scenario, "pearl_sched", 1, DATA)
    assert first.steps == second.steps and first.timeline == second.timeline


@pytest.mark.parametrize("name", shipped_scenarios())
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_runs_every_shipped_scenario(name: str, policy: str) -> None:
    scenario = tiny(name)
    result = run_policy_segment(scenario, policy, 0, DATA, tick_s=300.0)
    assert result.steps and result.throughput_tok_s > 0
    trace, _ = scenario.availability(scenario.segments[0], DATA)
    costs = costs_for(scenario)
    spec = POLICIES[policy]
    if spec.fixed_pool is None:
        _check_invariants(result, setting_for(scenario, DATA), trace, costs)
