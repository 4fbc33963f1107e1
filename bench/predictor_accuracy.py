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
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import DATA, MeanShapeBatch, bench_setting, tau_bench_shape
from pearl_sched import Mode, PoolCapacity

WORKERS = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="64,256,1024")
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    shape = tau_bench_shape(args.data)
    setting = bench_setting(args.data)
    for batch in (int(b) for b in args.batches.split(",")):
        setup = MeanShapeBatch(setting, batch, shape, fit_max_batch=max(2, batch // 2))
        configs = [PoolCapacity(mode=Mode.COLOCATED, colocated=WORKERS)] + [
            PoolCapacity(mode=Mode.DISAGGREGATED, prefill=p, decode=WORKERS - p) for p in range(1, WORKERS)
        ]
        runs = [setup.run(c.mode, int(c.prefill), int(c.decode), int(c.colocated)) for c in configs]
        truth = [r.makespan_s for r in runs]
        pearl = setting.predictor("pearl", setup.params)
        improved = setting.predictor("improved", setup.params)
        predictions = {
            "pearl": [pearl.predict(setup.workload(runs[0].bubble_ratio), c).total_s for c in configs],
            "pearl-oracle-theta": [
                pearl.predict(setup.workload(r.bubble_ratio), c).total_s for c, r in zip(configs, runs, strict=True)
            ],
            "improved": [improved.predict(setup.workload(), c).total_s for c in configs],
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
