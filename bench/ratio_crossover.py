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

from bench.common import FREE, Setup, label, tau_bench_shape
from pearl_sched import (
    Mode,
    PearlMakespanModel,
    plan,
)
from pearl_sched.makespan_improved import ImprovedMakespanModel, ImprovedParams


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
