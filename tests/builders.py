"""Small, explicit builders for cluster states used across the tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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

# Llama-3.1-8B on H200 at TP1, fitted from the Dynamo profile in ../shared/data (see examples/make_examples.py);
# the "h100" entry is the same device slowed by the H100/H200 memory-bandwidth ratio 3.35/4.8 (spec sheets),
# used only to exercise heterogeneous pools.
H200 = DeviceParams(
    gpu_type="h200",
    tp=1,
    prefill_s_per_token=2.1975e-05,
    decode_iteration_s=0.00609,
    decode_per_seq_s=0.0001098,
    kv_capacity_bytes=945029 * 131072,
)
H100 = DeviceParams(
    gpu_type="h100",
    tp=1,
    prefill_s_per_token=2.1975e-05 * 4.8 / 3.35,
    decode_iteration_s=0.00609,
    decode_per_seq_s=0.0001098 * 4.8 / 3.35,
    kv_capacity_bytes=80 / 141 * 945029 * 131072,
)
PARAMS = PearlParams(
    devices=(H200, H100),
    switch_overhead_s=0.0,
    kv_bandwidth_bytes_per_s=50e9,
    kv_bandwidth_per_prefill_worker=True,
    source="tests",
)
MODEL = PearlMakespanModel(PARAMS)


def workload(**overrides: float) -> Workload:
    """A tau-bench-like agentic batch (see examples/make_examples.py for where the numbers come from)."""
    values: dict[str, float] = dict(
        batch_size=1024,
        unfinished=1024,
        turns=20.0,
        appended_tokens_per_turn=151.4,
        generated_tokens_per_turn=84.7,
        env_time_per_turn_s=10.0,
        mean_context_tokens=3051.0,
        kv_bytes_per_token=131072.0,
    )
    values.update(overrides)
    return Workload(**values)  # type: ignore[arg-type]


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
