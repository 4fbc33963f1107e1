"""Regenerate the example plan requests from the shared data (run from the repository root).

Where each number comes from:
- PEARL parameters: NVIDIA Dynamo profile_sla, H200, Llama-3.1-8B-Instruct-FP8, vLLM, TP1
  (../shared/data/dynamo-h200-llama31-8b), fitted by ``pearl_sched.profiles.fit_dynamo_profile``;
- KV bytes per token: Llama-3.1-8B config.json (../shared/data/model-configs), bf16 KV cache;
- P→D bandwidth: 50 GB/s per GPU, the inter-node bandwidth of aiconfigurator's h200_sxm.yaml;
- workload: per-turn appended and generated tokens and turns of the tau-bench GPT-4o trajectories in
  ../shared/data/agentic (means; the slowest trajectory's turns at the 90th percentile); 1,024
  trajectories, PEARL §6's batch 64 × group 16; environment time 10 s per turn, RollArt's Normal(10 s, σ)
  mean, with σ = 3 s from RollArt's 1–10 s range; the first-turn prompt is tau-bench's mean first prompt;
- cluster: 4 dedicated + 8 preemptible rollout GPUs and 8 training GPUs, 8 GPUs per node, TP1 workers.

``mixed-sizes.json`` (worker sizes, docs/state.md): Qwen3-30B-A3B (shipped config) on H200 and H100 nodes of 8
GPUs, prefill TP1/TP2/TP4, decode TP2/TP4/TP8, colocated TP2/TP4/TP8. Its per-(GPU, TP) parameters are
fitted (``fit_device``) to step times composed from aiconfigurator's SGLang kernel tables
(../shared/data/aiconfigurator-sglang, ``ComposedStepModel``) at the tau-bench operating point above; KV
capacity is each system file's ``mem_capacity`` less the weights, within SGLang's 0.85 static fraction;
transition costs are PEARL Table 3's Qwen3-30B-A3B row with preparation per TP extrapolated
(``TransitionCosts.pearl_table3_by_tp``). The cluster runs 1 prefill + 3 decode TP2 workers on a dedicated
H200 node; a second dedicated H200 node has idle TP1 slots; two preemptible H100 nodes have no workers yet.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from pearl_sched import GPU, Budget, ClusterState, PearlParams, Role, Status, Worker, Workload, Zone
from pearl_sched.config import TransitionCosts
from pearl_sched.makespan import DeviceParams
from pearl_sched.profiles import ComposedStepModel, KernelTables, ModelConfig, fit_dynamo_profile, shipped_config
from pearl_sched.profiles.to_pearl import DEFAULT_MEMORY_FRACTION, fit_device, kv_capacity_bytes
from pearl_sched.request import PlanRequest
from pearl_sched.shared_data import default_data
from pearl_sched.sim.setting import read_system
from pearl_sched.sim.workload import read_agentic_turns
from pearl_sched.state import ModelLimits, WorkerSizes

DATA = default_data()
OUT = Path("examples")


def workload() -> Workload:
    rows = [r for r in read_agentic_turns(DATA / "agentic/agentic_turns.csv") if r.source.startswith("tau-bench")]
    turns: dict[str, int] = {}
    for r in rows:
        turns[r.trajectory_id] = max(turns.get(r.trajectory_id, 0), r.turn_index + 1)
    later = [r for r in rows if r.turn_index > 0]
    appended = statistics.fmean(float(r.new_input_tokens) for r in later)
    generated = statistics.fmean(float(r.output_tokens) for r in rows)
    context = statistics.fmean(float(r.prompt_tokens) for r in rows)
    slowest = statistics.quantiles(turns.values(), n=10)[-1]
    kv = ModelConfig.from_json(DATA / "model-configs/meta-llama--Meta-Llama-3.1-8B_config.json").kv_bytes_per_token()
    return Workload(
        batch_size=64 * 16,
        unfinished=64 * 16,
        turns=round(slowest, 1),
        appended_tokens_per_turn=round(appended, 1),
        generated_tokens_per_turn=round(generated, 1),
        env_time_per_turn_s=10.0,
        env_time_std_s=3.0,
        bubble_ratio=0.0,
        mean_context_tokens=round(context, 1),
        max_context_tokens=float(max(r.prompt_tokens for r in rows)),
        kv_bytes_per_token=kv,
        prompt_tokens=round(statistics.fmean(float(r.prompt_tokens) for r in rows if r.turn_index == 0), 1),
    )


def params(load: Workload) -> PearlParams:
    fit = fit_dynamo_profile(DATA / "dynamo-h200-llama31-8b/H200_TP1P_TP1D")
    device = fit.device("h200", 1, context_tokens=load.mean_context_tokens, kv_bytes_per_token=load.kv_bytes_per_token)
    return PearlParams(
        devices=(device,),
        switch_overhead_s=0.0,
        kv_bandwidth_bytes_per_s=50e9,
        kv_bandwidth_per_prefill_worker=True,
        source="fit of Dynamo profile_sla H200 Llama-3.1-8B-FP8 TP1; BW from aiconfigurator h200_sxm.yaml",
    )


def cluster(roles: dict[str, Role]) -> tuple[tuple[GPU, ...], tuple[Worker, ...]]:
    gpus, workers = [], []
    layout = [
        ("d", Zone.DEDICATED, 4, "node0"),
        ("p", Zone.PREEMPTIBLE, 8, "node1"),
        ("t", Zone.OVERLAP, 8, "node2"),
    ]
    for prefix, zone, count, node in layout:
        for i in range(count):
            gid = f"{prefix}{i}"
            gpus.append(
                GPU(
                    id=gid,
                    node=node,
                    type="h200",
                    zone=zone,
                    reclaim_in_s=900.0 if zone is Zone.OVERLAP else None,
                )
            )
            role = roles.get(gid, Role.TRAINING if zone is Zone.OVERLAP else Role.DECODE)
            status = Status.ACTIVE if gid in roles or zone is Zone.OVERLAP else Status.INACTIVE
            workers.append(Worker(id=f"w-{gid}", gpu_ids=(gid,), role=role, status=status))
    return tuple(gpus), tuple(workers)


SYSTEMS = {"h200": "h200_sxm", "h100": "h100_sxm"}
MIXED_TPS = (1, 2, 4, 8)


def mixed_sizes(load: Workload) -> PlanRequest:
    config = shipped_config("qwen3-30b-a3b")
    load = load.model_copy(update={"kv_bytes_per_token": float(config.kv_bytes_per_token())})
    devices: list[DeviceParams] = []
    memory: dict[str, float] = {}
    for gpu_type, system in SYSTEMS.items():
        memory[gpu_type] = read_system(DATA / f"aiconfigurator-sglang/{system}.yaml")["mem_capacity"]
        tables = KernelTables(DATA / f"aiconfigurator-sglang/{system}")
        for tp in MIXED_TPS:
            steps = ComposedStepModel(config, tables, tp)
            devices.append(
                fit_device(
                    gpu_type=gpu_type,
                    tp=tp,
                    prefill_s=lambda n, c, m=steps: m.prefill_s(n, 1.0, c),
                    decode_s=steps.decode_s,
                    context_tokens=load.mean_context_tokens,
                    appended_tokens=load.appended_tokens_per_turn,
                    max_batch=256,
                    kv_capacity=kv_capacity_bytes(config, tp, memory[gpu_type]),
                )
            )
    model = PearlParams(
        devices=tuple(devices),
        switch_overhead_s=0.0,
        kv_bandwidth_bytes_per_s=50e9,
        kv_bandwidth_per_prefill_worker=True,
        source="Qwen3-30B-A3B step times composed from aiconfigurator SGLang kernel tables (H200, H100), TP1-8",
    )
    gpus, workers = [], []
    layout = [("a", Zone.DEDICATED, "h200"), ("b", Zone.DEDICATED, "h200"), ("c", Zone.PREEMPTIBLE, "h100")]
    layout.append(("e", Zone.PREEMPTIBLE, "h100"))
    for prefix, zone, gpu_type in layout:
        gpus.extend(GPU(id=f"{prefix}{i}", node=f"node-{prefix}", type=gpu_type, zone=zone) for i in range(8))
    for i in range(4):  # node-a: 1 prefill + 3 decode TP2 workers
        role = Role.PREFILL if i == 0 else Role.DECODE
        pair = (f"a{2 * i}", f"a{2 * i + 1}")
        workers.append(Worker(id=f"w-a{2 * i}", gpu_ids=pair, role=role, status=Status.ACTIVE))
    workers.extend(Worker(id=f"w-b{i}", gpu_ids=(f"b{i}",), role=Role.DECODE) for i in range(8))  # idle TP1 slots
    sizes = WorkerSizes(
        prefill=(1, 2, 4),  # type: ignore[arg-type]
        decode=(2, 4, 8),  # type: ignore[arg-type]
        colocated=(2, 4, 8),  # type: ignore[arg-type]
        model=ModelLimits(
            name=config.name,
            attention_heads=config.num_attention_heads,
            weight_bytes=float(config.parameter_count() * 2),
            gpu_memory_bytes=memory,
            memory_fraction=DEFAULT_MEMORY_FRACTION,
        ),
    )
    state = ClusterState(
        gpus=tuple(gpus), workers=tuple(workers), workload=load, budget=Budget(max_gpus=24), worker_sizes=sizes
    )
    return PlanRequest(state=state, model=model, costs=TransitionCosts.pearl_table3_by_tp("qwen3-30b-a3b"))


def main() -> None:
    load = workload()
    model = params(load)
    budget = Budget(max_gpus=20)
    gpus, workers = cluster({})
    initial = PlanRequest(state=ClusterState(gpus=gpus, workers=workers, workload=load, budget=budget), model=model)
    running_roles = {
        "d0": Role.DECODE,
        "d1": Role.DECODE,
        "d2": Role.DECODE,
        "d3": Role.DECODE,
        "p0": Role.PREFILL,
        "p1": Role.PREFILL,
        "p2": Role.DECODE,
        "p3": Role.DECODE,
    }
    gpus, workers = cluster(running_roles)
    gpus = tuple(g.model_copy(update={"available": False}) if g.id in ("p3",) else g for g in gpus)
    half = load.model_copy(update={"unfinished": 640})
    running = PlanRequest(state=ClusterState(gpus=gpus, workers=workers, workload=half, budget=budget), model=model)
    mixed = mixed_sizes(load)
    for name, request in (("initial", initial), ("running", running), ("mixed-sizes", mixed)):
        path = OUT / f"{name}.json"
        path.write_text(json.dumps(request.model_dump(mode="json"), indent=2) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
