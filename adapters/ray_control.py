"""The control loop as a Ray actor with its own ticks (docs/orchestrator.md, "A controller that does not block").

An RL framework that is itself a Ray program (verl, ROLL, slime) starts the loop next to its other actors and
never waits on it: :func:`start_control_actor` creates a :class:`ControlLoopActor` whose event loop runs
:meth:`ControlLoop.run <pearl_sched.control.ControlLoop.run>` — a ``TICK`` every ``tick_s`` seconds, and every event
the framework submits (``actor.submit.remote("step_boundary", at_s)``) — each turn in a worker thread of the actor.
The framework reads what was decided when it likes (``records``, ``step_metrics`` for wandb / tensorboard) and can
serve the loop's Prometheus metrics from the actor's node.

The cluster adapter, decider and metrics are built *inside* the actor by a ``build`` callable (pickled with Ray's
cloudpickle), so HTTP clients and solver handles are never pickled across processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable
from typing import Any

from pearl_sched.control import ControlLoop, Event, EventKind, Record, step_metrics
from pearl_sched.errors import MissingExtraError


class ControlLoopActor:
    """A :class:`~pearl_sched.control.ControlLoop` running on its own event loop, its turns off that loop.

    Used as a Ray actor class (:func:`start_control_actor`), its ``async`` methods make it an async actor: calls
    are served while a turn (planning, the adapters' blocking HTTP calls) runs in a worker thread. It is a plain
    class too, so it runs in a test or a notebook without Ray.
    """

    def __init__(
        self, build: Callable[[], ControlLoop], *, tick_s: float, clock: Callable[[], float] | None = None
    ) -> None:
        """Build the loop; it starts ticking on :meth:`start`.

        Args:
            build: Creates the :class:`ControlLoop` (its cluster adapter, decider, metrics) inside the actor.
            tick_s: Seconds between ``TICK`` events when nothing else arrives.
            clock: The cluster's clock, stamped on ticks; ``time.monotonic`` by default.

        Raises:
            ValueError: ``tick_s`` is not a positive finite number of seconds.
        """
        if not (isinstance(tick_s, int | float) and math.isfinite(tick_s) and tick_s > 0):
            raise ValueError(f"tick_s is seconds between ticks, a positive finite number, not {tick_s!r}")
        self.loop = build()
        self.tick_s = float(tick_s)
        self.clock = clock or time.monotonic
        self._events: asyncio.Queue[Event] | None = None
        self._task: asyncio.Task[None] | None = None
        self._server: Any = None

    async def start(self) -> None:
        """Start the loop as a task on this actor's event loop (a second call does nothing)."""
        if self._task is None or self._task.done():
            self._events = asyncio.Queue()
            self._task = asyncio.get_running_loop().create_task(
                self.loop.run(self._events, tick_s=self.tick_s, clock=self.clock)
            )

    async def submit(self, kind: str, at_s: float, detail: str = "") -> None:
        """Queue an event for the loop (``step_boundary``, ``training_begin``, ``gpu_leave``, ...).

        Raises:
            ValueError: ``kind`` is not an :class:`~pearl_sched.control.EventKind` value.
            RuntimeError: the loop was not started, or it stopped on an error (which is re-raised here).
        """
        event = Event(EventKind(kind), float(at_s), detail)
        self._check_running()
        assert self._events is not None
        await self._events.put(event)

    async def records(self, since: int = 0) -> list[Record]:
        """The loop's records from index ``since`` on (a framework polls with the count it has seen)."""
        return self.loop.records[since:]

    async def step_metrics(self, since: int = 0) -> list[dict[str, float]]:
        """:func:`~pearl_sched.control.step_metrics` of each record from ``since`` on, for wandb / tensorboard."""
        return [step_metrics(r) for r in self.loop.records[since:]]

    async def observed_makespan(self, seconds: float) -> None:
        """Report a measured batch makespan (exported next to the prediction)."""
        self.loop.observed_makespan(seconds)

    async def serve_metrics(self, port: int = 0, addr: str = "127.0.0.1") -> int:
        """Serve the loop's Prometheus ``/metrics`` on ``addr:port`` from the actor; returns the bound port.

        Raises:
            RuntimeError: the loop was built without :class:`~pearl_sched.control.LoopMetrics`.
        """
        if self.loop.metrics is None:
            raise RuntimeError("the control loop has no LoopMetrics: build it with metrics=LoopMetrics()")
        if self._server is None:
            self._server = self.loop.metrics.serve(port, addr)
        return int(self._server.server_address[1])

    async def stop(self) -> int:
        """Cancel the loop and stop serving metrics; returns the number of turns it made."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        return len(self.loop.records)

    def _check_running(self) -> None:
        if self._task is None:
            raise RuntimeError("the control loop is not started: call start() first")
        if self._task.done():
            error = None if self._task.cancelled() else self._task.exception()
            if error is not None:
                raise RuntimeError(f"the control loop stopped on {type(error).__name__}: {error}") from error
            raise RuntimeError("the control loop was stopped")


def start_control_actor(
    build: Callable[[], ControlLoop],
    *,
    tick_s: float,
    clock: Callable[[], float] | None = None,
    **options: Any,
) -> Any:
    """Create a :class:`ControlLoopActor` as a Ray actor and start its loop; returns the actor handle.

    Args:
        build: Creates the :class:`ControlLoop` inside the actor (pickled by Ray).
        tick_s: Seconds between ticks.
        clock: The cluster's clock for ticks; ``time.monotonic`` in the actor by default.
        **options: Ray actor options (``name``, ``namespace``, ``num_cpus`` — 1 by default, ``lifetime``, ...).

    Raises:
        MissingExtraError: Ray is not installed (the ``ray`` extra).
    """
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - the ray extra installs it
        raise MissingExtraError("ray", "ray") from exc
    options.setdefault("num_cpus", 1)
    actor = ray.remote(ControlLoopActor).options(**options).remote(build, tick_s=tick_s, clock=clock)
    ray.get(actor.start.remote())
    return actor
