"""Small, explicit builders for cluster states used across the tests."""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pearl_sched import (
    GPU,
    Budget,
    ClusterState,
    DeviceParams,
    PearlMakespanModel,
    PearlParams,
    Role,
    Status,
    Worker,
    Workload,
    Zone,
)
from pearl_sched.reference import PARAMS, reference_workload
from pearl_sched.shared_data import default_data
from pearl_sched.sim import LinearStepTimes, TrajectorySpec, Turn
from pearl_sched.sim.scenario import Scenario, load_scenario

DATA = default_data()
"""The third-party data the data tests read (``$PEARL_SCHED_DATA``, else ``../shared/data``)."""

# One worker with PEARL's linear step times: 1 ms a prefill token, 10 ms a decode iteration (batch-independent),
# so the rollout tests can be checked by hand; and a two-turn trajectory for them.
FLAT = LinearStepTimes(
    DeviceParams(
        gpu_type="x",
        tp=1,
        prefill_s_per_token=0.001,
        decode_iteration_s=0.01,
        decode_per_seq_s=1e-12,
        kv_capacity_bytes=1.0,
    )
)
TWO_TURNS = TrajectorySpec((Turn(100, 10, 5.0), Turn(50, 20, 0.0)))

# The binding constraints an InfeasiblePlanError may name (InfeasiblePlanError's docstring, docs/formulation.md).
BINDING_CONSTRAINTS = frozenset(
    {
        "budget",
        "kv_capacity",
        "prefill_capacity",
        "kv_and_prefill_capacity",
        "no_eligible_workers",
        "disaggregated_needs_prefill_and_decode",
    }
)

# The reference problem (Llama-3.1-8B on H200 and a derived H100, a tau-bench-like batch): pearl_sched.reference.
MODEL = PearlMakespanModel(PARAMS)

# A made-up device with round numbers, so PEARL's closed form can be worked out by hand.
HAND = PearlMakespanModel(
    PearlParams(
        devices=(
            DeviceParams(
                gpu_type="x",
                tp=2,
                prefill_s_per_token=1e-5,
                decode_iteration_s=0.005,
                decode_per_seq_s=1e-4,
                kv_capacity_bytes=1e9,
            ),
        ),
        switch_overhead_s=0.5,
        kv_bandwidth_bytes_per_s=1e9,
        source="hand",
    )
)


def workload(**overrides: float) -> Workload:
    """A tau-bench-like agentic batch (:func:`pearl_sched.reference.reference_workload`)."""
    return reference_workload(**overrides)


def kv_bound_workload(**overrides: float) -> Workload:
    """A batch whose contexts outgrow a small KV pool: 512 trajectories, 20 turns of 200 appended + 300 generated."""
    values: dict[str, float] = dict(
        batch_size=512,
        unfinished=512,
        turns=20,
        appended_tokens_per_turn=200.0,
        generated_tokens_per_turn=300.0,
        env_time_per_turn_s=5.0,
        mean_context_tokens=6000.0,
        prompt_tokens=1000.0,
        max_context_tokens=11000.0,
        kv_bytes_per_token=1000.0,
    )
    values.update(overrides)
    return workload(**values)


@dataclass(frozen=True)
class Slot:
    """One worker slot to build: its zone, GPU type, current role (None: not serving) and availability."""

    zone: Zone = Zone.DEDICATED
    gpu_type: str = "h200"
    role: Role | None = None
    available: bool = True
    reclaim_in_s: float = 900.0
    inflight_tokens: int = 0


def state(
    slots: Sequence[Slot],
    *,
    max_gpus: int | None = None,
    load: Workload | None = None,
    allow_borrow: bool = True,
    allow_preemptible: bool = True,
) -> ClusterState:
    """A state with one TP1 worker per slot, eight GPUs per node."""
    gpus, workers = [], []
    for i, slot in enumerate(slots):
        gid = f"g{i:03d}"
        gpus.append(
            GPU(
                id=gid,
                node=f"n{i // 8}",
                type=slot.gpu_type,
                zone=slot.zone,
                available=slot.available,
                reclaim_in_s=slot.reclaim_in_s if slot.zone is Zone.OVERLAP else None,
            )
        )
        if slot.role is None:
            role = Role.TRAINING if slot.zone is Zone.OVERLAP else Role.DECODE
            status = Status.ACTIVE if slot.zone is Zone.OVERLAP else Status.INACTIVE
        else:
            role, status = slot.role, Status.ACTIVE
        workers.append(
            Worker(id=f"w{i:03d}", gpu_ids=(gid,), role=role, status=status, inflight_tokens=slot.inflight_tokens)
        )
    return ClusterState(
        gpus=tuple(gpus),
        workers=tuple(workers),
        workload=load or workload(),
        budget=Budget(
            max_gpus=len(slots) if max_gpus is None else max_gpus,
            allow_borrow=allow_borrow,
            allow_preemptible=allow_preemptible,
        ),
    )


def short_batch_state() -> ClusterState:
    """Two dedicated TP1 workers serving a short batch, two preemptible GPUs just arrived and idle.

    256 trajectories of 5 turns of 60 tokens with 0.5 s tools (about 11 s a batch): shorter than a preemptible
    worker's preparation, the case the gate horizons are about (docs/policies.md).
    """
    slots = [Slot(role=Role.COLOCATED)] * 2 + [Slot(zone=Zone.PREEMPTIBLE)] * 2
    load = workload(
        batch_size=256,
        unfinished=256,
        turns=5.0,
        generated_tokens_per_turn=60.0,
        env_time_per_turn_s=0.5,
        env_time_std_s=0.4,
    )
    return state(slots, load=load)


_HANDED_OUT: set[int] = set()
"""Every port :func:`free_ports` has returned in this test process: never returned twice."""


def free_ports(n: int) -> list[int]:
    """``n`` TCP ports on 127.0.0.1 that were free a moment ago, below the kernel's ephemeral range.

    Ports the kernel hands out itself (bind to 0) come from the ephemeral range, which every outgoing connection
    of the test process (httpx, the gateway, Ray) also draws from; one could take the port between this call and
    the server's bind. Ports drawn at random below the range cannot be taken that way. A port already returned
    by an earlier call is never returned again: a fixture that asks twice (slots, then the gateway's ports) gets
    distinct ports even before any server has bound its own (a CI run once gave an overlap slot a port that a
    dedicated slot's server then held).

    Under pytest-xdist each worker draws from its own slice of that range: a port one worker has chosen but
    whose server has not bound it yet is never chosen by another.
    """
    ephemeral = _ephemeral_low()
    first, low = _worker_slice(max(1024, ephemeral - 12_000), ephemeral)
    chosen: list[socket.socket] = []
    rng = random.Random()
    while len(chosen) < n:
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", rng.randrange(first, low) if low - first >= 1000 else 0))
        except OSError:
            s.close()
            continue
        port = s.getsockname()[1]
        if port not in _HANDED_OUT and all(port != c.getsockname()[1] for c in chosen):
            chosen.append(s)
        else:
            s.close()
    ports = [s.getsockname()[1] for s in chosen]
    _HANDED_OUT.update(ports)
    for s in chosen:
        s.close()
    return ports


def _worker_slice(first: int, low: int) -> tuple[int, int]:
    """This pytest-xdist worker's share of ports ``[first, low)`` (all of it outside xdist)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count <= 1:
        return first, low
    width = (low - first) // count
    start = first + int(worker[2:]) * width
    return start, start + width


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def tiny(base: str = "e2e", **overrides: object) -> Scenario:
    """A shipped scenario shrunk to 16 short trajectories per step and 15-minute segments."""
    scenario = load_scenario(base).expand()[0]
    fields = {
        "batch_prompts": 2,
        "group_size": 8,
        "trajectories": "tau-bench",
        "output_scale": 1.0,
        "training_gpus": 4,
        "segments": [{**s.model_dump(), "duration_s": 900.0} for s in scenario.segments[:2]],
        **overrides,
    }
    return Scenario.model_validate({**scenario.model_dump(), **fields, "variants": ()})
