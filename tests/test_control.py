"""The control loop's planner decider and its fallbacks."""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.request

import pytest

from pearl_sched import InfeasiblePlanError, plan
from pearl_sched.control import (
    ApplyReport,
    ControlLoop,
    Event,
    EventKind,
    LoopMetrics,
    PlannerDecider,
    plan_resident,
    step_metrics,
)

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


class SlowKeepingDecider:
    """A decider double that keeps the configuration and takes 0.2 s to decide (a blocking planner)."""

    last_error = ""

    def decide(self, event: Event, s: object) -> None:
        time.sleep(0.2)


class StaticCluster:
    """A cluster double: a fixed state, applies nothing."""

    def __init__(self) -> None:
        self.s = state([Slot()] * 2)

    def observe(self) -> object:
        return self.s

    def apply(self, target: object) -> ApplyReport:
        return ApplyReport()

    def telemetry(self) -> dict[str, float]:
        return {}


def test_the_loop_runs_as_an_asyncio_task_without_blocking_it() -> None:
    metrics = LoopMetrics()
    loop = ControlLoop(StaticCluster(), SlowKeepingDecider(), metrics=metrics)  # type: ignore[arg-type]

    async def main() -> int:
        events: asyncio.Queue[Event] = asyncio.Queue()
        await events.put(Event(EventKind.STEP_BOUNDARY, 1.0))
        task = asyncio.create_task(loop.run(events, tick_s=0.05, clock=lambda: 9.0))
        beats = 0
        for _ in range(20):  # 0.5 s in which the loop makes turns of 0.2 s each
            await asyncio.sleep(0.025)
            beats += 1
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return beats

    assert asyncio.run(main()) == 20  # the caller's event loop kept running
    kinds = [r.event.kind for r in loop.records]
    assert kinds[0] is EventKind.STEP_BOUNDARY and EventKind.TICK in kinds
    assert all(r.decision == "none" for r in loop.records)
    flat = step_metrics(loop.records[0])
    assert flat["pearl_sched/decision_none"] == 1.0 and flat["pearl_sched/at_s"] == 1.0
    assert set(flat) == set(step_metrics(loop.records[-1]))  # the same keys every turn
    server = metrics.serve(0)
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert f'pearl_sched_decision_reasons_total{{kind="none"}} {float(len(loop.records))}' in text
    assert "_created" not in text
