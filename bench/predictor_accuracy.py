"""Makespan predictors against the simulator's ground truth.

Ground truth: the rollout simulator (pearl_sched.sim) running Qwen3-8B on H200 TP2 workers whose step times are
composed from aiconfigurator's SGLang kernel tables, on batches shaped like the tau-bench trajectories in
../shared/data/agentic (mean prompt, appended and generated tokens per turn, 90th-percentile turns) with
environment times from RollArt's Normal(10 s, 3 s). Predictors get PEARL parameters fitted to the same
composition around the batch's operating point (``profiles.to_pearl.fit_device``):

- ``pearl``: PEARL's closed form with θ measured in the colocated run of the same batch (PEARL refits θ from
  the last step's telemetry, under whatever configuration ran);
- ``pearl-oracle-theta``: PEARL with θ measured in the very configuration predicted (an upper bound);
- ``improved``: the improved predictor (θ endogenous, no measurement needed).

For each batch size, every configuration of 8 workers (colocated, and 1P7D … 7P1D) is simulated and predicted:

    predict_mape model=<name> batch=<B> mape_pct=<x> best_pick_gap_pct=<y> n=<configs>

``best_pick_gap_pct`` is how much slower (in simulated makespan) the configuration the predictor ranks first is
than the truly fastest one.
Usage: python bench/predictor_accuracy.py [--batches 64,256,1024]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pearl_sched import Mode, PearlMakespanModel, PearlParams, PoolCapacity
from pearl_sched.makespan_improved import ImprovedMakespanModel, ImprovedParams
from pearl_sched.profiles.kernels import ComposedStepModel, KernelTables, shipped_config
from pearl_sched.profiles.to_pearl import fit_device, kv_capacity_bytes
from pearl_sched.sim import ComposedStepTimes, Pool, sample_trajectories, simulate_batch
from pearl_sched.state import Workload

H200_BYTES = 151397597184  # aiconfigurator h200_sxm.yaml mem_capacity
LINK_BYTES_PER_S = 50e9  # aiconfigurator h200_sxm.yaml inter_node_bw, per GPU
WORKERS = 8


def tau_bench_shape(data: Path) -> dict[str, float]:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="64,256,1024")
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    args = parser.parse_args()
    shape = tau_bench_shape(args.data)
    config = shipped_config("qwen3-8b")
    composed = ComposedStepModel(config, KernelTables(args.data / "aiconfigurator-sglang" / "h200_sxm"), tp=2)
    steps = ComposedStepTimes(composed)
    kv_per_token = config.kv_bytes_per_token()
    kv_bytes = kv_capacity_bytes(config, 2, H200_BYTES)
    turns = round(shape["turns"])
    mean_context = shape["prompt"] + turns * (shape["appended"] + shape["generated"]) / 2
    for batch in (int(b) for b in args.batches.split(",")):
        trajectories = sample_trajectories(
            batch,
            turns=turns,
            prompt_tokens=round(shape["prompt"]),
            appended_tokens=round(shape["appended"]),
            generated_tokens=round(shape["generated"]),
            env_mean_s=10.0,
            env_std_s=3.0,
        )
        device = fit_device(
            gpu_type="h200",
            tp=2,
            prefill_s=lambda n, c: composed.prefill_s(n, cached_tokens=c),
            decode_s=composed.decode_s,
            context_tokens=mean_context,
            appended_tokens=shape["appended"],
            max_batch=max(2, batch // 2),
            kv_capacity=kv_bytes,
        )
        params = PearlParams(
            devices=(device,),
            switch_overhead_s=0.0,
            kv_bandwidth_bytes_per_s=LINK_BYTES_PER_S,
            kv_bandwidth_per_prefill_worker=True,
            source="fit to the kernel composition",
        )
        configs = [PoolCapacity(mode=Mode.COLOCATED, colocated=WORKERS)] + [
            PoolCapacity(mode=Mode.DISAGGREGATED, prefill=p, decode=WORKERS - p) for p in range(1, WORKERS)
        ]
        truth, thetas = [], []
        for c in configs:
            pool = Pool(
                c.mode,
                steps,
                prefill_workers=int(c.prefill),
                decode_workers=int(c.decode),
                colocated_workers=int(c.colocated),
                kv_capacity_tokens=kv_bytes / kv_per_token,
                kv_bytes_per_token=kv_per_token,
                link_bytes_per_s=LINK_BYTES_PER_S,
            )
            result = simulate_batch(pool, trajectories)
            truth.append(result.makespan_s)
            thetas.append(result.bubble_ratio)

        def load(theta: float, batch: int = batch) -> Workload:
            return Workload(
                batch_size=batch,
                unfinished=batch,
                turns=turns,
                appended_tokens_per_turn=shape["appended"],
                generated_tokens_per_turn=shape["generated"],
                env_time_per_turn_s=10.0,
                env_time_std_s=3.0,
                bubble_ratio=theta,
                mean_context_tokens=mean_context,
                kv_bytes_per_token=kv_per_token,
                prompt_tokens=shape["prompt"],
            )

        pearl = PearlMakespanModel(params)
        improved = ImprovedMakespanModel(ImprovedParams(pearl=params))
        predictions = {
            "pearl": [pearl.predict(load(thetas[0]), c).total_s for c in configs],
            "pearl-oracle-theta": [pearl.predict(load(t), c).total_s for c, t in zip(configs, thetas, strict=True)],
            "improved": [improved.predict(load(0.0), c).total_s for c in configs],
        }
        best = min(truth)
        for name, predicted in predictions.items():
            mape = 100 * statistics.fmean(abs(p - t) / t for p, t in zip(predicted, truth, strict=True))
            pick = truth[min(range(len(configs)), key=lambda i: predicted[i])]
            print(
                f"predict_mape model={name} batch={batch} mape_pct={mape:.2f}"
                f" best_pick_gap_pct={100 * (pick - best) / best:.2f} n={len(configs)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
