"""The control loop as an actor with its own ticks: the plain class on asyncio, then as a Ray actor."""

from __future__ import annotations

import asyncio
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from pearl_sched import Mode, Role
from pearl_sched.adapters.ray_control import ControlLoopActor, start_control_actor
from pearl_sched.control import ApplyReport, Assignment, ControlLoop, Event, EventKind, LoopMetrics, Target

from .builders import Slot, state


class TwoSlotCluster:
    """A cluster double: a fixed two-slot state; records each target applied."""

    def __init__(self) -> None:
        self.s = state([Slot()] * 2)
        self.applied: list[str] = []

    def observe(self) -> object:
        return self.s

    def apply(self, target: Target) -> ApplyReport:
        self.applied.append(target.mode.value)
        return ApplyReport(changed=tuple(k for k, v in target.roles().items() if v is not None))

    def telemetry(self) -> dict[str, float]:
        return {}


class SplitOnStepBoundary:
    """A decider double: 1P1D at a step boundary, keep the configuration on a tick."""

    name = "split"

    def decide(self, event: Event, _state: object) -> Target | None:
        if event.kind is EventKind.STEP_BOUNDARY:
            return Assignment(Mode.DISAGGREGATED, {"w000": Role.PREFILL, "w001": Role.DECODE})
        return None


def build() -> ControlLoop:
    return ControlLoop(TwoSlotCluster(), SplitOnStepBoundary(), metrics=LoopMetrics())  # type: ignore[arg-type]


def test_the_actor_class_ticks_on_its_own_and_takes_events() -> None:
    async def run() -> tuple[list[str], list[dict[str, float]], int]:
        actor = ControlLoopActor(build, tick_s=0.02, clock=lambda: 5.0)
        with pytest.raises(RuntimeError, match="not started"):
            await actor.submit("step_boundary", 1.0)
        await actor.start()
        await actor.submit("step_boundary", 1.0)
        await asyncio.sleep(0.2)
        kinds = [r.event.kind.value for r in await actor.records()]
        flat = await actor.step_metrics()
        turns = await actor.stop()
        with pytest.raises(RuntimeError, match="stopped"):
            await actor.submit("tick", 2.0)
        return kinds, flat, turns

    kinds, flat, turns = asyncio.run(run())
    assert kinds[0] == "step_boundary" and kinds.count("tick") >= 3  # ticks came without being asked
    assert flat[0]["pearl_sched/decision_external"] == 1.0 and flat[0]["pearl_sched/slots_changed"] == 2.0
    assert flat[1]["pearl_sched/decision_none"] == 1.0
    assert turns >= len(kinds)  # it may have ticked once more before stopping
    with pytest.raises(ValueError, match="tick_s"):
        ControlLoopActor(build, tick_s=0.0)


def test_an_unknown_event_kind_is_refused() -> None:
    async def run() -> None:
        actor = ControlLoopActor(build, tick_s=1.0)
        await actor.start()
        try:
            await actor.submit("lunch", 1.0)
        finally:
            await actor.stop()

    with pytest.raises(ValueError, match="'lunch' is not a valid EventKind"):
        asyncio.run(run())


class BrokenCluster(TwoSlotCluster):
    def observe(self) -> object:
        raise OSError("the gateway is gone")


def test_a_loop_that_died_says_why_on_the_next_call() -> None:
    async def run() -> None:
        actor = ControlLoopActor(
            lambda: ControlLoop(BrokenCluster(), SplitOnStepBoundary()),  # type: ignore[arg-type]
            tick_s=0.01,
        )
        await actor.start()
        await asyncio.sleep(0.1)  # the first tick fails inside the loop
        await actor.submit("tick", 1.0)

    with pytest.raises(RuntimeError, match="the control loop stopped on OSError: the gateway is gone"):
        asyncio.run(run())


ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the doubles travel with the build function
    yield
    ray.shutdown()


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time under pytest-xdist
def test_the_loop_runs_as_a_ray_actor_with_its_own_ticks(local_ray: None) -> None:
    # 0.5 s between ticks: the step boundary is submitted one Ray round trip after the loop starts, and on a loaded
    # machine that trip took over 50 ms, so a tick came first (ticks only follow tick_s without an event)
    actor = start_control_actor(build, tick_s=0.5, name="pearl-sched-control-test")
    try:
        ray.get(actor.submit.remote("step_boundary", 1.0))
        deadline = time.monotonic() + 30
        while len(ray.get(actor.records.remote())) < 4:  # the boundary and a few ticks, nobody calling
            assert time.monotonic() < deadline, "the actor made no ticks"
            time.sleep(0.05)
        records = ray.get(actor.records.remote())
        assert records[0].event.kind is EventKind.STEP_BOUNDARY and records[0].ratio == "1P1D"
        assert {r.event.kind for r in records[1:]} == {EventKind.TICK}
        assert ray.get(actor.step_metrics.remote(1))[0]["pearl_sched/decision_none"] == 1.0
        port = ray.get(actor.serve_metrics.remote(0))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
        assert 'pearl_sched_decision_reasons_total{kind="external"} 1.0' in text and "_created" not in text
        assert ray.get(actor.stop.remote()) >= 4
    finally:
        ray.kill(actor)
