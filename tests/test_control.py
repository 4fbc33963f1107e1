"""The control loop's planner decider and its fallbacks."""

from __future__ import annotations

import pytest

from pearl_sched import InfeasiblePlanError, plan
from pearl_sched.control import Event, EventKind, PlannerDecider, plan_resident

from .builders import MODEL, Slot, state, workload


def test_a_kv_requirement_beyond_every_gpu_plans_for_the_resident_trajectories() -> None:
    # 1,024 trajectories of 40K tokens at 128 KiB a token need ~5 TiB of KV: far beyond four workers.
    s = state([Slot()] * 4, load=workload(mean_context_tokens=40_000.0))
    with pytest.raises(InfeasiblePlanError) as excinfo:
        plan(s, MODEL)
    assert excinfo.value.binding_constraint == "kv_capacity"
    result, note = plan_resident(s, MODEL)
    assert result.gpus_used == 4 and "exceeds the cluster's" in note
    decider = PlannerDecider("p", MODEL)
    assert decider.decide(Event(EventKind.STEP_BOUNDARY, 0.0), s) is not None
    assert "exceeds" in decider.last_error


def test_other_infeasibility_keeps_the_configuration_and_says_why() -> None:
    s = state([Slot(available=False)] * 2)
    decider = PlannerDecider("p", MODEL)
    assert decider.decide(Event(EventKind.TICK, 5.0), s) is None
    assert decider.last_error
