"""What the simulator benchmarks share: the tau-bench turn shape, H200 facts, and a model-on-H200 setup."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from pearl_sched import (
    GPU,
    Budget,
    ClusterState,
    Mode,
    PearlParams,
    Role,
    Status,
    TransitionCosts,
    Worker,
    Workload,
    Zone,
)
from pearl_sched.profiles.kernels import ComposedStepModel, KernelTables, shipped_config
from pearl_sched.profiles.to_pearl import fit_device, kv_capacity_bytes
from pearl_sched.sim import BatchResult, ComposedStepTimes, Pool, sample_trajectories, simulate_batch

H200_BYTES = 151397597184  # aiconfigurator h200_sxm.yaml mem_capacity
LINK_BYTES_PER_S = 50e9  # aiconfigurator h200_sxm.yaml inter_node_bw, per GPU
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def tau_bench_shape(data: Path) -> dict[str, float]:
    """Mean first prompt, appended and generated tokens per turn, and 90th-percentile turns of tau-bench."""
    with (data / "agentic" / "agentic_turns.csv").open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["source"].startswith("tau-bench")]
    turns: dict[str, int] = {}
    for r in rows:
        turns[r["trajectory_id"]] = max(turns.get(r["trajectory_id"], 0), int(r["turn_index"]) + 1)
    return {
        "prompt": statistics.fmean(float(r["prompt_tokens"]) for r in rows if r["turn_index"] == "0"),
        "appended": statistics.fmean(float(r["new_input_tokens"]) for r in rows if r["turn_index"] != "0"),
        "generated": statistics.fmean(float(r["output_tokens"]) for r in rows),
        "turns": statistics.quantiles(turns.values(), n=10)[-1],
    }


FREE = TransitionCosts(
    preparation_s=0,
    finalisation_s=0,
    activation_s=0,
    deactivation_s=0,
    role_switch_s=0,
    restart_s=0,
    stop_s=0,
    volatile_decode_s=0,
)


class Setup:
    """One model on H200 TP2 workers: its simulator step times and fitted predictor parameters."""

    def __init__(
        self, data: Path, model: str, trajectories: int, shape: dict[str, float], fit_max_batch: int | None = None
    ) -> None:
        self.config = shipped_config(model)
        self.composed = ComposedStepModel(self.config, KernelTables(data / "aiconfigurator-sglang" / "h200_sxm"), tp=2)
        self.steps = ComposedStepTimes(self.composed)
        self.kv_per_token = self.config.kv_bytes_per_token()
        self.kv_bytes = kv_capacity_bytes(self.config, 2, H200_BYTES)
        self.turns = round(shape["turns"])
        self.shape = shape
        self.trajectories = trajectories
        self.mean_context = shape["prompt"] + self.turns * (shape["appended"] + shape["generated"]) / 2
        self.batch = sample_trajectories(
            trajectories,
            turns=self.turns,
            prompt_tokens=round(shape["prompt"]),
            appended_tokens=round(shape["appended"]),
            generated_tokens=round(shape["generated"]),
            env_mean_s=10.0,
            env_std_s=3.0,
        )
        device = fit_device(
            gpu_type="h200",
            tp=2,
            prefill_s=lambda n, c: self.composed.prefill_s(n, cached_tokens=c),
            decode_s=self.composed.decode_s,
            context_tokens=self.mean_context,
            appended_tokens=shape["appended"],
            max_batch=fit_max_batch or max(2, trajectories // 4),
            kv_capacity=self.kv_bytes,
        )
        self.params = PearlParams(
            devices=(device,),
            switch_overhead_s=0.0,
            kv_bandwidth_bytes_per_s=LINK_BYTES_PER_S,
            kv_bandwidth_per_prefill_worker=True,
            source="fit to the kernel composition",
        )

    def simulate(self, mode: Mode, prefill: int = 0, decode: int = 0, colocated: int = 0) -> float:
        """Simulated makespan of the batch on a pool."""
        return self.run(mode, prefill, decode, colocated).makespan_s

    def run(self, mode: Mode, prefill: int = 0, decode: int = 0, colocated: int = 0) -> BatchResult:
        """The whole simulation result of the batch on a pool."""
        pool = Pool(
            mode,
            self.steps,
            prefill_workers=prefill,
            decode_workers=decode,
            colocated_workers=colocated,
            kv_capacity_tokens=self.kv_bytes / self.kv_per_token,
            kv_bytes_per_token=self.kv_per_token,
            link_bytes_per_s=LINK_BYTES_PER_S,
        )
        return simulate_batch(pool, self.batch)

    def workload(self, bubble_ratio: float = 0.0) -> Workload:
        return Workload(
            batch_size=self.trajectories,
            unfinished=self.trajectories,
            turns=self.turns,
            appended_tokens_per_turn=self.shape["appended"],
            generated_tokens_per_turn=self.shape["generated"],
            env_time_per_turn_s=10.0,
            env_time_std_s=3.0,
            bubble_ratio=bubble_ratio,
            mean_context_tokens=self.mean_context,
            kv_bytes_per_token=self.kv_per_token,
            prompt_tokens=self.shape["prompt"],
        )

    def cluster(self, workers: int) -> ClusterState:
        gpus = [GPU(id=f"g{i}", node=f"n{i // 8}", type="h200", zone=Zone.DEDICATED) for i in range(2 * workers)]
        slots = [
            Worker(id=f"w{i:02d}", gpu_ids=(f"g{2 * i}", f"g{2 * i + 1}"), role=Role.DECODE, status=Status.INACTIVE)
            for i in range(workers)
        ]
        return ClusterState(
            gpus=tuple(gpus), workers=tuple(slots), workload=self.workload(), budget=Budget(max_gpus=2 * workers)
        )


def label(mode: Mode, prefill: int, decode: int, colocated: int) -> str:
    return f"{colocated}C" if mode is Mode.COLOCATED else f"{prefill}P{decode}D"
