"""Preparation progress carried to the expansion gate (docs/policies.md, "Preparation progress").

A cluster that prepares an arrived preemptible GPU while the gate refuses it reports how far the preparation
has got (``Worker.prepared_s``); at the next decision point the gate and the objective charge only what is
left. The gate must then admit what it refused once enough is prepared, still refuse when the hazard says the
GPU is gone before the rest is done, and never admit a GPU that must go before it can serve. PEARL-faithful
runs on a cluster that does not prepare ahead, so it sees exactly the states it saw before.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl_sched import Mode, PolicyConfig, PolicyState, Role, TransitionCosts, plan
from pearl_sched.control import Assignment, Event
from pearl_sched.policies import expansion_gate, expansion_ready_s
from pearl_sched.sim.availability import AvailabilityTrace
from pearl_sched.sim.baselines import POLICIES
from pearl_sched.sim.cluster import SegmentResult, SimCluster, run_segment
from pearl_sched.sim.experiment import costs_for, setting_for
from pearl_sched.state import ClusterState, Worker, Zone
from tests.builders import DATA, MODEL, Slot, short_batch_state, state, tiny, workload

COSTS = TransitionCosts()  # PEARL Table 3, Qwen3-8B: preparation 56.29 s, finalisation 11.05 s
RESIDENCE = PolicyConfig()
ONE_BATCH = PolicyConfig(gate_horizon="batch")
# An expected residence of 40 s: shorter than preparation + finalisation (67.34 s), longer than finalisation.
SHORT_LIVED = PolicyState(preemption_hazard_per_s=1 / 40)


def _gate(prepared_s: float, pstate: PolicyState = SHORT_LIVED, config: PolicyConfig = RESIDENCE) -> bool:
    return expansion_gate(
        makespan_without_s=100.0,
        makespan_with_s=40.0,
        unfinished_fraction=1.0,
        state=pstate,
        costs=COSTS,
        config=config,
        prepared_s=prepared_s,
    ).allow


def test_a_refused_expansion_passes_once_enough_is_prepared_meanwhile() -> None:
    # Decision point 1: nothing prepared, ready in 67.34 s, expected residence 40 s: refused.
    assert not _gate(0.0)
    # Decision point 2, 50 s later: 50 s of the 56.29 s done in the background, ready in 17.34 s: admitted.
    assert expansion_ready_s(COSTS, 50.0) == pytest.approx(6.29 + 11.05)
    assert _gate(50.0)


def test_the_hazard_still_refuses_when_the_rest_outlasts_the_residence() -> None:
    # 20 s prepared: 36.29 s of preparation + 11.05 s finalisation = 47.34 s > the 40 s expected residence.
    decision = expansion_gate(
        makespan_without_s=10_000.0,
        makespan_with_s=1_000.0,
        unfinished_fraction=1.0,
        state=SHORT_LIVED,
        costs=COSTS,
        config=RESIDENCE,
        prepared_s=20.0,
    )
    assert not decision.allow and "ends before ready in 47.3 s" in decision.reason
    # Even fully prepared, a GPU expected to stay less than the admission pause is refused.
    brief = PolicyState(preemption_hazard_per_s=1 / (0.9 * COSTS.finalisation_s))
    assert not _gate(COSTS.preparation_s, brief)


def _short_batch_cluster(prepared_s: float) -> ClusterState:
    """Two dedicated workers serving a short batch; two preemptible GPUs idle, ``prepared_s`` into preparation."""
    cluster = short_batch_state()
    workers = tuple(
        w.model_copy(update={"prepared_s": prepared_s}) if w.rollout_role is None else w for w in cluster.workers
    )
    return cluster.model_copy(update={"workers": workers})


def test_plan_admits_at_the_next_decision_point_with_what_was_prepared() -> None:
    # plan() reads the progress from the state: refused with nothing prepared, admitted once 50 s are.
    before = plan(_short_batch_cluster(0.0), MODEL, policy=RESIDENCE, policy_state=SHORT_LIVED, backend="enumeration")
    assert not before.decision.expanded and before.gpus_used == 2, before.decision.reason
    after = plan(_short_batch_cluster(50.0), MODEL, policy=RESIDENCE, policy_state=SHORT_LIVED, backend="enumeration")
    assert after.decision.expanded and after.gpus_used == 4, after.decision.reason
    # The objective charges each new slot the preparation left over the pool's N = 4 workers, and one pause.
    slots = [Slot(role=Role.COLOCATED)] * 2 + [Slot(zone=Zone.PREEMPTIBLE)] * 2
    for done in (0.0, 30.0, COSTS.preparation_s):
        cluster = state(slots)
        workers = tuple(
            w.model_copy(update={"prepared_s": done}) if w.rollout_role is None else w for w in cluster.workers
        )
        result = plan(cluster.model_copy(update={"workers": workers}), MODEL, policy=ONE_BATCH, backend="enumeration")
        assert result.gpus_used == 4
        assert result.transition_cost_s == pytest.approx(COSTS.finalisation_s + 2 * (COSTS.preparation_s - done) / 4)
    # Still refused when 20 s are done: 47.34 s to ready > 40 s.
    partial = plan(_short_batch_cluster(20.0), MODEL, policy=RESIDENCE, policy_state=SHORT_LIVED, backend="enumeration")
    assert not partial.decision.expanded, partial.decision.reason


def test_the_gate_counts_the_preparation_left_at_the_workers_own_size() -> None:
    # The idle preemptible slots are TP1 workers; with per-TP costs a TP1 worker needs 80 s of preparation, not
    # Table 3's 56.29 s. 50 s done leaves 30 s + 11.05 s = 41.05 s to ready > the 40 s expected residence.
    costs = COSTS.model_copy(update={"preparation_s_by_tp": {1: 80.0}})
    assert costs.preparation_for(1) == 80.0
    kept = plan(
        _short_batch_cluster(50.0),
        MODEL,
        costs=costs,
        policy=RESIDENCE,
        policy_state=SHORT_LIVED,
        backend="enumeration",
    )
    assert not kept.decision.expanded, kept.decision.reason
    # 73.71 s done: 6.29 s + 11.05 s to ready, as with 50 s of Table 3's 56.29 s above: admitted.
    admitted = plan(
        _short_batch_cluster(73.71),
        MODEL,
        costs=costs,
        policy=RESIDENCE,
        policy_state=SHORT_LIVED,
        backend="enumeration",
    )
    assert admitted.decision.expanded and admitted.gpus_used == 4, admitted.decision.reason


@settings(max_examples=80, deadline=None)
@given(
    prepared=st.lists(st.floats(min_value=0.0, max_value=80.0), min_size=1, max_size=3),
    residence_s=st.floats(min_value=5.0, max_value=400.0),
    one_batch=st.booleans(),
    idle_dedicated=st.integers(min_value=0, max_value=2),
    budget=st.integers(min_value=2, max_value=7),
)
def test_plan_never_admits_a_gpu_gone_before_its_rest_is_prepared(
    prepared: list[float], residence_s: float, one_batch: bool, idle_dedicated: int, budget: int
) -> None:
    # Preemptible GPUs at different points of their background preparation, and maybe idle dedicated slots a
    # prepared preemptible GPU is cheaper to start than; whatever plan() admits must be ready (preparation
    # left + finalisation) before the expected residence ends, each GPU by its own progress.
    slots = [Slot(role=Role.COLOCATED)] * 2 + [Slot()] * idle_dedicated + [Slot(zone=Zone.PREEMPTIBLE)] * len(prepared)
    load = workload(batch_size=256, unfinished=256, turns=5.0, generated_tokens_per_turn=60.0)
    cluster = state(slots, load=load, max_gpus=budget)
    done = iter(prepared)
    zones = {g.id: g.zone for g in cluster.gpus}
    workers = tuple(
        w.model_copy(update={"prepared_s": next(done)}) if zones[w.gpu_ids[0]] is Zone.PREEMPTIBLE else w
        for w in cluster.workers
    )
    cluster = cluster.model_copy(update={"workers": workers})
    pstate = PolicyState(preemption_hazard_per_s=1 / residence_s)
    config = ONE_BATCH if one_batch else RESIDENCE
    result = plan(cluster, MODEL, policy=config, policy_state=pstate, backend="enumeration")
    progress = {w.id: w.prepared_s for w in cluster.workers}
    zone = {w.id: cluster.gpu_index()[w.gpu_ids[0]].zone for w in cluster.workers}
    admitted = [a.worker_id for a in result.assignment if a.role is not None and zone[a.worker_id] is Zone.PREEMPTIBLE]
    if config.gate_horizon == "residence":
        for worker_id in admitted:
            assert residence_s > expansion_ready_s(COSTS, progress[worker_id]), (progress, result.decision.reason)


def test_a_state_without_progress_dumps_as_before() -> None:
    worker = Worker(id="w", gpu_ids=("g0",), role=Role.DECODE)
    assert "prepared_s" not in json.loads(worker.model_dump_json())
    assert json.loads(worker.model_copy(update={"prepared_s": 12.5}).model_dump_json())["prepared_s"] == 12.5
    assert Worker.model_validate_json(worker.model_dump_json()) == worker


def _preemptible(cluster: SimCluster) -> Worker:
    return next(w for w in cluster.observe().workers if w.id.startswith("p"))


@pytest.mark.needs_data
def test_the_simulated_cluster_prepares_arrived_gpus_only_when_asked() -> None:
    setting = setting_for(tiny(), DATA)
    costs = costs_for(setting.scenario)
    for background in (True, False):
        cluster = SimCluster(setting, costs=costs, preemptible_gpus=2, background_preparation=background)
        first = {w.id: Role.COLOCATED for w in cluster.observe().workers if w.id.startswith("d")}
        cluster.apply(Assignment(Mode.COLOCATED, first))  # the first placement is free
        cluster.set_preemptible(2.0)  # one TP2 slot arrives at 0 s
        cluster.now = 30.0
        assert _preemptible(cluster).prepared_s == (30.0 if background else 0.0)
        cluster.now = 500.0
        assert _preemptible(cluster).prepared_s == pytest.approx(costs.preparation_s if background else 0.0)
        cluster.now = 30.0
        slot_id = _preemptible(cluster).id
        report = cluster.apply(Assignment(Mode.COLOCATED, {**first, slot_id: Role.COLOCATED}))
        left = costs.preparation_s - 30.0 if background else costs.preparation_s
        assert report.seconds_lost == pytest.approx(left + costs.finalisation_s)
        # Released while serving, its engine stays prepared (in the background mode); preempted, it starts over.
        cluster.now = 200.0
        cluster.apply(Assignment(Mode.COLOCATED, {**first, slot_id: None}))
        assert _preemptible(cluster).prepared_s == pytest.approx(costs.preparation_s if background else 0.0)
        cluster.set_preemptible(0.0)
        cluster.set_preemptible(2.0)
        assert _preemptible(cluster).prepared_s == 0.0


def _run_recording(
    policy: str, *, background_preparation: bool
) -> tuple[list[ClusterState], SegmentResult, Any, TransitionCosts]:
    """``policy`` over 15 tiny minutes of a trace that brings and takes preemptible GPUs, every state it saw kept."""
    scenario = tiny(max_preemptible_gpus=4)
    setting = setting_for(scenario, DATA)
    costs = costs_for(scenario)
    decider = POLICIES[policy].build(setting, costs, PolicyConfig())
    seen: list[ClusterState] = []
    inner = decider.decide

    def recording(event: Event, observed: ClusterState):  # type: ignore[no-untyped-def]
        seen.append(observed)
        return inner(event, observed)

    decider.decide = recording  # type: ignore[method-assign]
    trace = AvailabilityTrace(np.array([0.0, 200.0, 500.0]), np.array([4.0, 8.0, 6.0]), 900.0)
    result = run_segment(
        setting, trace, decider, costs=costs, tick_s=60.0, background_preparation=background_preparation
    )
    return seen, result, decider, costs


@pytest.mark.needs_data
def test_pearl_faithful_sees_the_states_it_saw_before() -> None:
    # PEARL prepares a GPU only once its gate admits it: its cluster never prepares ahead, so every state its
    # planner is given reports no progress and dumps exactly as before the field existed; its figures do not move.
    assert not POLICIES["pearl"].background_preparation
    seen, result, decider, _ = _run_recording("pearl", background_preparation=False)
    assert result.steps and len(seen) > 3
    assert all(w.prepared_s == 0.0 for s in seen for w in s.workers)
    assert all("prepared_s" not in s.model_dump_json() for s in seen)
    assert decider.policy.gate_horizon == "batch"


@pytest.mark.needs_data
def test_the_prepared_ablation_reports_progress_to_its_planner() -> None:
    spec = POLICIES["pearl_sched-prepared"]
    assert spec.background_preparation and spec.fitted_hazard
    seen, result, _, costs = _run_recording("pearl_sched-prepared", background_preparation=True)
    assert result.steps
    progress = [w.prepared_s for s in seen for w in s.workers]
    assert all(0.0 <= p <= costs.preparation_s for p in progress)
