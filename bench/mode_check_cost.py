"""What checking each solve's mode by ``predict`` costs plan() (``PolicyConfig.mode_by_predict``, issue 13, s16).

The check is on by default for a memory-aware model on the surrogate's path (states without worker sizes). For
each scenario and GPU count, the cluster a rollout step starts on (``SimCluster.observe()``: that many dedicated
GPUs, nothing to borrow) is planned with the scenario's improved predictor (its prior, no telemetry) with the check
(the default) and without it (``mode_by_predict=False``), the two alternating, ``--repeats`` times each. Per case::

    mode_check_cost scenario=<s> gpus=<g> checked_p50_ms=<x> unchecked_p50_ms=<y> ratio=<x/y>
        checked=<plan> unchecked=<plan> same=<yes|no>

(CPU time of the call, process-wide, each call on a fresh predictor so that its memo of predictions answers
nothing; ``plan`` its configuration.)

Usage: python bench/mode_check_cost.py [--scenarios e2e,swe-qwen3-30b-a3b/attention-dp] [--gpus 16,64,256]
                                       [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import DATA, FREE
from bench.predictor_accuracy import scenario_named
from pearl_sched.config import PolicyConfig
from pearl_sched.control import plan_resident
from pearl_sched.sim.cluster import SimCluster
from pearl_sched.sim.experiment import setting_for

UNCHECKED = PolicyConfig(mode_by_predict=False)


def main() -> None:
    """Time plan() with and without the mode check on each (scenario, GPUs) and print the ratio."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default="e2e,swe-qwen3-8b,swe-qwen3-30b-a3b/attention-dp")
    parser.add_argument("--gpus", default="16,64,256")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    for name in args.scenarios.split(","):
        setting = setting_for(scenario_named(name), args.data)
        for gpus in (int(g) for g in args.gpus.split(",")):
            cluster = SimCluster(setting, costs=FREE, dedicated_gpus=gpus, preemptible_gpus=0)
            cluster.trainer_idle_at = float("inf")
            state = cluster.observe()
            times: dict[str, list[float]] = {"checked": [], "unchecked": []}
            labels: dict[str, str] = {}
            for _ in range(args.repeats):
                for key, policy in (("checked", None), ("unchecked", UNCHECKED)):
                    model = setting.predictor("improved")  # fresh: its memo of predictions answers no repeat
                    start = time.process_time()
                    planned, _ = plan_resident(state, model, costs=FREE, policy=policy)
                    times[key].append(1e3 * (time.process_time() - start))
                    labels[key] = planned.ratio
            checked, unchecked = statistics.median(times["checked"]), statistics.median(times["unchecked"])
            print(
                f"mode_check_cost scenario={name} gpus={gpus} checked_p50_ms={checked:.1f}"
                f" unchecked_p50_ms={unchecked:.1f} ratio={checked / unchecked:.2f} checked={labels['checked']}"
                f" unchecked={labels['unchecked']} same={'yes' if labels['checked'] == labels['unchecked'] else 'no'}",
                flush=True,
            )


if __name__ == "__main__":
    main()
