"""Ratio selection and the colocated/disaggregated crossover, on the simulator (PEARL Table 2 and Fig. 2c shapes).

Workers are TP2 pairs of H200s with kernel-composed step times; batches are tau-bench-shaped (see
bench/predictor_accuracy.py) with RollArt's Normal(10 s, 3 s) environment time.

Ratio selection — for each pool size (PEARL Table 2: 10, 12 and 16 dedicated GPUs, and the same plus the 16
training GPUs lent), Qwen3-8B, 1,024 trajectories (batch 64 × group 16): every configuration is simulated, and
plan() chooses one with the improved predictor and with PEARL's (transition costs zero: a fresh choice):

    ratio_select interval=<gpus> model=<improved|pearl> chosen=<pPdD|nC> best=<pPdD|nC> gap_pct=<x>

Crossover — Qwen3-30B-A3B on 8 TP2 workers, batch 32 … 96 prompts × group 16: the best disaggregated
configuration against colocated (PEARL Fig. 2c: +9.7% at batch 32, +1.4% at 80, −6.1% at 96):

    crossover batch=<b> colocated_s=<x> best_disaggregated=<pPdD> disaggregated_s=<y> gain_pct=<z>

Usage: python bench/ratio_crossover.py [--skip-crossover]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.predictor_accuracy import H200_BYTES, LINK_BYTES_PER_S, tau_bench_shape
from pearl_sched import (
    GPU,
    Budget,
    ClusterState,
    Mode,
    PearlMakespanModel,
    PearlParams,
    Role,
    Status,
    TransitionCosts,
    Worker,
    Workload,
    Zone,
    plan,
)
from pearl_sched.makespan_improved import ImprovedMakespanModel, ImprovedParams
from pearl_sched.profiles.kernels import ComposedStepModel, KernelTables, shipped_config
from pearl_sched.profiles.to_pearl import fit_device, kv_capacity_bytes
from pearl_sched.sim import ComposedStepTimes, Pool, sample_trajectories, simulate_batch

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

    def __init__(self, data: Path, model: str, trajectories: int, shape: dict[str, float]) -> None:
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
            max_batch=max(2, trajectories // 4),
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
        return simulate_batch(pool, self.batch).makespan_s

    def workload(self) -> Workload:
        return Workload(
            batch_size=self.trajectories,
            unfinished=self.trajectories,
            turns=self.turns,
            appended_tokens_per_turn=self.shape["appended"],
            generated_tokens_per_turn=self.shape["generated"],
            env_time_per_turn_s=10.0,
            env_time_std_s=3.0,
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


def ratio_selection(data: Path, shape: dict[str, float]) -> None:
    setup = Setup(data, "qwen3-8b", 1024, shape)
    for gpus in (10, 12, 16, 26, 28, 32):
        workers = gpus // 2
        measured = {label(Mode.COLOCATED, 0, 0, workers): setup.simulate(Mode.COLOCATED, colocated=workers)}
        for p in range(1, workers):
            measured[label(Mode.DISAGGREGATED, p, workers - p, 0)] = setup.simulate(Mode.DISAGGREGATED, p, workers - p)
        best = min(measured, key=lambda k: measured[k])
        for name, model in (
            ("improved", ImprovedMakespanModel(ImprovedParams(pearl=setup.params))),
            ("pearl", PearlMakespanModel(setup.params)),
        ):
            chosen = plan(setup.cluster(workers), model, costs=FREE).ratio
            gap = 100 * (measured[chosen] - measured[best]) / measured[best] if chosen in measured else float("nan")
            print(
                f"ratio_select interval={gpus} model={name} chosen={chosen} best={best} gap_pct={gap:.2f}", flush=True
            )


def crossover(data: Path, shape: dict[str, float]) -> None:
    for batch in (32, 48, 64, 80, 96):
        setup = Setup(data, "qwen3-30b-a3b", batch * 16, shape)
        colocated = setup.simulate(Mode.COLOCATED, colocated=8)
        split = {p: setup.simulate(Mode.DISAGGREGATED, p, 8 - p) for p in range(1, 8)}
        p = min(split, key=lambda k: split[k])
        gain = 100 * (colocated - split[p]) / colocated
        print(
            f"crossover batch={batch} colocated_s={colocated:.1f} best_disaggregated={p}P{8 - p}D"
            f" disaggregated_s={split[p]:.1f} gain_pct={gain:.2f}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--skip-crossover", action="store_true")
    args = parser.parse_args()
    shape = tau_bench_shape(args.data)
    ratio_selection(args.data, shape)
    if not args.skip_crossover:
        crossover(args.data, shape)


if __name__ == "__main__":
    main()
