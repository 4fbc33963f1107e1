"""Simulator speed: simulated seconds against wall seconds.

Runs rollout batches back to back — 1,024 tau-bench-shaped trajectories each (PEARL's batch 64 × group 16),
Qwen3-8B on 8 H200 TP2 workers with kernel-composed step times, 3P5D — until two simulated hours have passed:

    sim_speed scenario=<name> simulated_s=<x> wall_s=<y> batches=<k> events=<n> setup_s=<z>

``setup_s`` is the one-off reading of the kernel tables, outside ``wall_s``. Then each 2-hour segment of the
e2e scenario under pearl_sched — batches, trainer, borrowing, preemption and a plan() at every decision point:

    sim_speed scenario=e2e/<segment> policy=pearl_sched simulated_s=<x> wall_s=<y> steps=<k> decisions=<n>

Target (issue 4): a 2-hour segment in ≤ 30 s of wall time.
Usage: python bench/sim_speed.py [--hours 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import DATA, bench_setting, mean_shape_trajectories, tau_bench_shape
from pearl_sched import Mode
from pearl_sched.sim import simulate_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    shape = tau_bench_shape(args.data)
    setting = bench_setting(args.data)
    steps = setting.steps
    pool = setting.pool(Mode.DISAGGREGATED, prefill=3, decode=5)
    setup = time.perf_counter()
    steps.prefill_s(1024, 1, 0)  # reads the kernel tables (a one-off, reported apart)
    steps.decode_s(64, 4096)
    setup_s = time.perf_counter() - setup
    simulated = 0.0
    events = batches = 0
    start = time.perf_counter()
    while simulated < args.hours * 3600:
        result = simulate_batch(pool, mean_shape_trajectories(1024, shape, seed=batches))
        simulated += result.makespan_s
        events += result.events
        batches += 1
    wall = time.perf_counter() - start
    print(
        f"sim_speed scenario=tau-bench-qwen3-8b-h200-3P5D simulated_s={simulated:.0f} wall_s={wall:.2f}"
        f" batches={batches} events={events} setup_s={setup_s:.2f}",
        flush=True,
    )
    from pearl_sched.sim.experiment import run_policy_segment, setting_for
    from pearl_sched.sim.scenario import load_scenario

    scenario = load_scenario("e2e")
    setting_for(scenario, args.data)
    for index, segment in enumerate(scenario.segments):
        start = time.perf_counter()
        result = run_policy_segment(scenario, "pearl_sched", index, args.data)
        print(
            f"sim_speed scenario=e2e/{segment.name} policy=pearl_sched simulated_s={segment.duration_s:.0f}"
            f" wall_s={time.perf_counter() - start:.2f} steps={len(result.steps)} decisions={result.decisions}",
            flush=True,
        )


if __name__ == "__main__":
    main()
