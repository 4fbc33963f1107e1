"""Random valid cluster states for the planner's property test, and an independent feasibility oracle.

The generator is a seeded numpy generator (fast enough for tens of thousands of states per run); the oracle
re-derives, from the state alone and the documented rules (docs/reliability.md), whether any configuration
fits the budget and the fewest GPUs any configuration needs — without the planner, its classes or a solver.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

import numpy as np

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
from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.policies import idle_window_allows_borrow, must_return
from pearl_sched.reference import H100, H200


def _tp2(device: DeviceParams) -> DeviceParams:
    # A test-only TP2 device: half the per-token times and twice the KV of TP1 (ideal scaling, an assumption
    # made for exercising budgets counted in GPUs rather than workers; no measured TP2 figure is implied).
    return device.model_copy(
        update={
            "tp": 2,
            "prefill_s_per_token": device.prefill_s_per_token / 2,
            "decode_per_seq_s": device.decode_per_seq_s / 2,
            "kv_capacity_bytes": device.kv_capacity_bytes * 2,
        }
    )


PARAMS = PearlParams(
    devices=(H200, H100, _tp2(H200), _tp2(H100)),
    switch_overhead_s=0.0,
    kv_bandwidth_bytes_per_s=50e9,
    kv_bandwidth_per_prefill_worker=True,
    source="tests (TP2 entries idealised from TP1)",
)
MODEL = PearlMakespanModel(PARAMS)

_ZONES = (Zone.DEDICATED, Zone.PREEMPTIBLE, Zone.OVERLAP)
_RECLAIM_S = (0.0, 5.0, 20.0, 60.0, 900.0)


def random_state(rng: np.random.Generator, max_slots: int = 7) -> ClusterState:
    """One random valid state: up to ``max_slots`` worker slots of TP1/TP2 on H200/H100 in any zone."""
    n = int(rng.integers(1, max_slots + 1))
    current = rng.choice(3)  # 0 none, 1 colocated, 2 disaggregated
    gpus: list[GPU] = []
    workers: list[Worker] = []
    node_fill = 8  # start a new 8-GPU node at once
    node = -1
    for i in range(n):
        tp = 2 if rng.random() < 0.25 else 1
        if node_fill + tp > 8:
            node, node_fill = node + 1, 0
        zone = _ZONES[int(rng.integers(3))]
        gpu_type = "h200" if rng.random() < 0.7 else "h100"
        available = bool(rng.random() > 0.12)
        reclaim = float(_RECLAIM_S[int(rng.integers(len(_RECLAIM_S)))])
        ids = []
        for _ in range(tp):
            gid = f"g{len(gpus):03d}"
            ids.append(gid)
            gpus.append(
                GPU(
                    id=gid,
                    node=f"n{node}",
                    type=gpu_type,
                    zone=zone,
                    available=available,
                    reclaim_in_s=reclaim if zone is Zone.OVERLAP else None,
                )
            )
        node_fill += tp
        role: Role | None = None
        if current == 1 and rng.random() < 0.6:
            role = Role.COLOCATED
        elif current == 2 and rng.random() < 0.7:
            role = Role.PREFILL if rng.random() < 0.4 else Role.DECODE
        if role is None:
            worker_role, status = (
                (Role.TRAINING, Status.ACTIVE) if zone is Zone.OVERLAP else (Role.DECODE, Status.INACTIVE)
            )
        else:
            worker_role, status = role, Status.ACTIVE
        inflight = int(rng.integers(0, 5000)) if role is not None else 0
        workers.append(
            Worker(id=f"w{i:02d}", gpu_ids=tuple(ids), role=worker_role, status=status, inflight_tokens=inflight)
        )
    batch = int(rng.choice([64, 256, 1024]))
    unfinished = int(rng.integers(1, batch + 1))
    load = Workload(
        batch_size=batch,
        unfinished=unfinished,
        turns=float(rng.choice([5.0, 20.0, 40.0])),
        appended_tokens_per_turn=float(rng.choice([150.0, 1000.0, 3000.0])),
        generated_tokens_per_turn=float(rng.choice([80.0, 400.0, 800.0])),
        env_time_per_turn_s=float(rng.choice([0.0, 2.0, 10.0])),
        mean_context_tokens=float(rng.choice([0.0, 3051.0, 3051.0, 30000.0])),
        kv_bytes_per_token=131072.0,
        min_prefill_tokens_per_s=float(rng.choice([0.0, 0.0, 0.0, 30000.0, 90000.0])),
    )
    total_gpus = len(gpus)
    return ClusterState(
        gpus=tuple(gpus),
        workers=tuple(workers),
        workload=load,
        budget=Budget(
            max_gpus=int(rng.integers(0, total_gpus + 2)),
            allow_borrow=bool(rng.random() < 0.8),
            allow_preemptible=bool(rng.random() < 0.8),
        ),
    )


@dataclass(frozen=True)
class Feasibility:
    """What the oracle found: the fewest GPUs of any configuration (None: none exists at any budget)."""

    min_gpus: int | None
    min_gpus_without_kv: int | None
    min_gpus_without_prefill: int | None

    def fits(self, budget: int) -> bool:
        """Whether some configuration fits ``budget`` GPUs."""
        return self.min_gpus is not None and self.min_gpus <= budget


def _eligible(state: ClusterState, costs: TransitionCosts, policy: PolicyConfig) -> list[tuple[str, int]]:
    """(gpu_type, tp) of every slot that may serve rollout under the documented rules."""
    index = state.gpu_index()
    out = []
    for w in state.workers:
        gpus = [index[g] for g in w.gpu_ids]
        zone = gpus[0].zone
        if not all(g.available for g in gpus):
            continue
        if zone is Zone.PREEMPTIBLE and not state.budget.allow_preemptible:
            continue
        if zone is Zone.OVERLAP:
            reclaim = min(g.reclaim_in_s or 0.0 for g in gpus)
            if not state.budget.allow_borrow or must_return(reclaim, costs, policy):
                continue
            if w.rollout_role is None and not idle_window_allows_borrow(reclaim, costs, policy):
                continue
        out.append((gpus[0].type, w.tp))
    return out


def feasibility(
    state: ClusterState, costs: TransitionCosts | None = None, policy: PolicyConfig | None = None
) -> Feasibility:
    """The fewest GPUs a configuration of the eligible slots needs, by exhaustive search over per-type counts."""
    costs, policy = costs or TransitionCosts(), policy or PolicyConfig()
    groups = sorted(Counter(_eligible(state, costs, policy)).items())
    w = state.workload
    need_kv = w.unfinished * w.kv_bytes_per_trajectory
    need_prefill = w.min_prefill_tokens_per_s
    kv = [MODEL.kv_capacity_bytes(t, tp) for (t, tp), _ in groups]
    rate = [MODEL.prefill_tokens_per_s(t, tp) for (t, tp), _ in groups]
    tps = [tp for (_, tp), _ in groups]
    per_group = [
        [(p, d, c) for p in range(n + 1) for d in range(n + 1 - p) for c in range(n + 1 - p - d)] for _, n in groups
    ]
    best: dict[tuple[bool, bool], int | None] = {(True, True): None, (False, True): None, (True, False): None}
    for combo in itertools.product(*per_group):
        p = sum(x[0] for x in combo)
        d = sum(x[1] for x in combo)
        c = sum(x[2] for x in combo)
        if c > 0 and (p or d):
            continue
        if c == 0 and not (p and d):
            continue
        gpus = sum(tp * sum(x) for tp, x in zip(tps, combo, strict=True))
        mem_role, pre_role = (2, 2) if c else (1, 0)
        kv_ok = sum(k * x[mem_role] for k, x in zip(kv, combo, strict=True)) >= need_kv
        pre_ok = sum(r * x[pre_role] for r, x in zip(rate, combo, strict=True)) >= need_prefill
        for check_kv, check_pre in best:
            if (kv_ok or not check_kv) and (pre_ok or not check_pre):
                current = best[check_kv, check_pre]
                if current is None or gpus < current:
                    best[check_kv, check_pre] = gpus
    return Feasibility(best[True, True], best[False, True], best[True, False])
