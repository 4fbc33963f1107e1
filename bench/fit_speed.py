"""How fast rollout telemetry becomes trajectory statistics (the online refit after every step).

Builds a telemetry table by resampling the real per-turn rows of ../shared/data/agentic (tau-bench: turns per
trajectory, appended and generated tokens per turn) with environment time drawn from RollArt's
Normal(10 s, 3 s), spread over steps of 1,024 trajectories, then times ``refit_steps`` over all of it:

    fit_speed rows=<N> steps=<k> seconds=<x>

Target (issue 3): 1,000,000 telemetry rows in ≤ 10 s.
Usage: python bench/fit_speed.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pearl_sched.profiles.telemetry import refit_steps
from pearl_sched.shared_data import default_data
from pearl_sched.sim.workload import read_agentic_turns, tau_bench_trajectories


def telemetry(rows: int, data: Path, seed: int = 0) -> dict[str, np.ndarray]:
    trajectories = list(tau_bench_trajectories(read_agentic_turns(data / "agentic" / "agentic_turns.csv")).values())
    rng = np.random.default_rng(seed)
    columns: dict[str, list[np.ndarray]] = {
        k: []
        for k in ("step", "trajectory", "turn", "appended_tokens", "generated_tokens", "retained_tokens", "env_time_s")
    }
    total, trajectory_id = 0, 0
    while total < rows:
        sample = trajectories[rng.integers(len(trajectories))]
        n = len(sample)
        columns["step"].append(np.full(n, trajectory_id // 1024))
        columns["trajectory"].append(np.full(n, trajectory_id))
        columns["turn"].append(np.array([r.turn_index for r in sample]))
        columns["appended_tokens"].append(np.array([float(r.new_input_tokens) for r in sample]))
        columns["generated_tokens"].append(np.array([float(r.output_tokens) for r in sample]))
        columns["retained_tokens"].append(np.array([float(r.prompt_tokens) + float(r.output_tokens) for r in sample]))
        columns["env_time_s"].append(np.maximum(rng.normal(10.0, 3.0, n), 0.0))
        total += n
        trajectory_id += 1
    return {k: np.concatenate(v)[:rows] for k, v in columns.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--data", type=Path, default=default_data())
    args = parser.parse_args()
    table = telemetry(args.rows, args.data)
    start = time.perf_counter()
    stats, rejected = refit_steps(table)
    seconds = time.perf_counter() - start
    steps = len(np.unique(table["step"]))
    print(f"fit_speed rows={args.rows} steps={steps} seconds={seconds:.3f}", flush=True)
    print(f"# estimate after {stats.steps if stats else 0} step(s): {stats}; rejected: {len(rejected)}", flush=True)


if __name__ == "__main__":
    main()
