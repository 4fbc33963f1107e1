"""Worker sizes and attention-DP in the simulator: the figures of docs/simulator.md, "Worker sizes and attention-DP".

Two parts (``--only sizes,adp``):

* ``sizes``: the e2e scenario with ``worker_sizes`` {prefill 1, 2; decode 2, 4; colocated 2, 4} declared, one
  segment (``--segment``, default 2): the hindsight search over those sizes (``oracle-hindsight``, the yardstick),
  pearl_sched (which may regroup) and PEARL-faithful (which keeps TP2), next to pearl_sched on the scenario without
  sizes; then what the search cost and each policy's ratio to it (``oracle_beaten`` where a policy beats it, as in
  bench/reproduce.py)::

      sim_sizes scenario=e2e sizes=<declared|none> segment=<name> policy=<name> throughput_tok_s=<x>
          regrouped_slots=<n> transitions=<n> first=<configuration of the first batch> wall_s=<s>
      # oracle-hindsight scenario=e2e sizes=declared segment=<name> search=<what it searches> simulations=<n>
          wall_s=<s>
      sim_sizes_vs_oracle scenario=e2e sizes=<declared|none> segment=<name> policy=<name> vs_oracle=<x>
          oracle=hindsight
      oracle_beaten scenario=e2e sizes=<declared|none> segment=<name> policy=<name> ratio=<x> search=<…>

* ``adp``: Qwen3-30B-A3B on aiconfigurator-core (the ``aic`` extra), TP2 workers as plain TP2 engines or as two
  attention-DP ranks, the best static configuration of each mode on a small batch (8 prompts × 8 samples of the
  mini-swe-agent DeepSeek runs, 8 training GPUs' worth of trainer, the first 15 minutes of segment-1)::

      sim_sizes scenario=swe-qwen3-30b-a3b attention_dp=<1|2> policy=<best-colocated|best-disaggregated>
          throughput_tok_s=<x> steps=<n> wall_s=<s>

Each (policy, segment) is one simulation on this process; ``sizes`` takes a few minutes on 2 cores (most of it the
hindsight search, which simulates every candidate interval ahead), ``adp`` about half a minute.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pearl_sched.config import PolicyConfig
from pearl_sched.shared_data import default_data
from pearl_sched.sim.cluster import SegmentResult
from pearl_sched.sim.experiment import run_policy_segment
from pearl_sched.sim.hindsight import HindsightSearch
from pearl_sched.sim.scenario import Scenario, load_scenario

SIZES = {"prefill": [1, 2], "decode": [2, 4], "colocated": [2, 4]}
HINDSIGHT = "oracle-hindsight"


def sizes(data: Path, segment: int, rank_by_predict: bool = False) -> None:
    """The hindsight search over sizes, pearl_sched with and without sizes, and PEARL-faithful, on one e2e segment.

    By default pearl_sched's plan() ranks by the improved predictor's own predict where the sizes are declared and
    by the MILP's surrogate on the scenario without them (``PolicyConfig.rank_by_predict``, docs/formulation.md).
    With ``rank_by_predict`` both pearl_sched runs rank by predict, and PEARL-faithful, which never does, is left out.
    """
    base = load_scenario("e2e")
    sized = Scenario.model_validate({**base.model_dump(), "worker_sizes": SIZES})
    config = PolicyConfig(rank_by_predict=True) if rank_by_predict else None
    runs: dict[tuple[str, str], SegmentResult] = {}
    for scenario, label, policy in (
        (sized, "declared", HINDSIGHT),
        (sized, "declared", "pearl_sched"),
        (sized, "declared", "pearl"),
        (base, "none", "pearl_sched"),
    ):
        if rank_by_predict and policy == "pearl":
            continue
        start = time.perf_counter()
        run = run_policy_segment(scenario, policy, segment, data, config=config if policy == "pearl_sched" else None)
        runs[label, policy] = run
        regrouped = {slot for _, slot, _ in run.timeline if slot.startswith("w-")}
        first = next((ratio for _, ratio in run.ratios if ratio != "idle"), "")
        print(
            f"sim_sizes scenario=e2e sizes={label} segment={run.segment} policy={policy}"
            f" throughput_tok_s={run.throughput_tok_s:.0f} regrouped_slots={len(regrouped)}"
            f" transitions={run.transitions} first={first} wall_s={time.perf_counter() - start:.0f}"
            + (" ranking=predict" if rank_by_predict and policy == "pearl_sched" else ""),
            flush=True,
        )
    oracle = runs["declared", HINDSIGHT]
    search = HindsightSearch().describe(sized.worker_sizes)
    print(
        f"# {HINDSIGHT} scenario=e2e sizes=declared segment={oracle.segment} search={search}"
        f" simulations={oracle.simulations} wall_s={oracle.wall_s:.0f}",
        flush=True,
    )
    for (label, policy), run in runs.items():
        if policy == HINDSIGHT:
            continue
        ratio = run.throughput_tok_s / oracle.throughput_tok_s
        print(
            f"sim_sizes_vs_oracle scenario=e2e sizes={label} segment={run.segment} policy={policy}"
            f" vs_oracle={ratio:.4f} oracle=hindsight",
            flush=True,
        )
        if ratio > 1 + 1e-9:
            print(
                f"oracle_beaten scenario=e2e sizes={label} segment={run.segment} policy={policy}"
                f" ratio={ratio:.4f} search={search}",
                flush=True,
            )


def attention_dp(data: Path) -> None:
    """Colocated vs disaggregated (best static of each) with and without attention-DP ranks."""
    base = load_scenario("swe-qwen3-30b-a3b")
    for dp in (1, 2):
        fields = {
            "attention_dp": dp,
            "batch_prompts": 8,
            "group_size": 8,
            "training_gpus": 4,
            "segments": [{**base.segments[0].model_dump(), "duration_s": 900.0}],
            "variants": (),
        }
        scenario = Scenario.model_validate({**base.model_dump(), **fields})
        for policy in ("best-colocated", "best-disaggregated"):
            start = time.perf_counter()
            run = run_policy_segment(scenario, policy, 0, data)
            print(
                f"sim_sizes scenario=swe-qwen3-30b-a3b attention_dp={dp} policy={policy}"
                f" throughput_tok_s={run.throughput_tok_s:.0f} steps={len(run.steps)}"
                f" wall_s={time.perf_counter() - start:.0f}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=default_data())
    parser.add_argument("--only", default="sizes,adp")
    parser.add_argument("--segment", type=int, default=2, help="e2e segment for the sizes part (1-3)")
    parser.add_argument(
        "--rank-by-predict", action="store_true", help="sizes part: pearl_sched with PolicyConfig(rank_by_predict=True)"
    )
    args = parser.parse_args()
    parts = set(args.only.split(","))
    if "sizes" in parts:
        sizes(args.data, args.segment - 1, args.rank_by_predict)
    if "adp" in parts:
        attention_dp(args.data)


if __name__ == "__main__":
    main()
