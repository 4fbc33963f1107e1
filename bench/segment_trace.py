"""Trace one segment of one variant, policy by policy: steps, the batches' tails and the gateway's tie-break.

A diagnosis, not a configuration. For each policy it prints the steps (times, tokens, prefill and cache-hit
tokens), the configurations in force, and for the batch ``--batch`` (1-based within the segment): the workers
joining and leaving it (with the sequences each leaving worker held), the last trajectories to finish, and the
workers the last one was routed to. ``--tie-seeds`` runs every policy once per seed of the gateway's random
tie-break (the scenario's ``tie_seed``; docs/simulator.md, "The gateway"); ``index`` among them gives ties to the
lowest worker index, the simulator's rule before s14. The tracing (and ``index``) are patched into this process
only (``pearl_sched.sim.rollout``, ``pearl_sched.sim.cluster``).
Run: ``.venv/bin/python bench/segment_trace.py swe-qwen3-30b-a3b/64k 2 --policies pearl_sched,pearl``
(SEGMENT an index from 0); one simulation per policy and seed.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import math
from typing import Any

import pearl_sched.sim.cluster as cl
import pearl_sched.sim.rollout as ro
from pearl_sched.shared_data import default_data
from pearl_sched.sim.experiment import run_policy_segment
from pearl_sched.sim.scenario import load_scenario

ORIG_ROUTER_SEEDS = ro._router_seeds
ORIG_LAUNCH = cl.SimCluster.launch
ORIG_CHANGE = ro.RolloutSimulation._change
ORIG_QUEUE = ro.RolloutSimulation._queue_job
ORIG_FINISH = ro.RolloutSimulation._finish_turn

batches: list[dict[str, Any]] = []  # per batch launched in the run: its start, changes, routes, finish times


def launch(self: cl.SimCluster, step: int) -> None:
    ORIG_LAUNCH(self, step)
    record: dict[str, Any] = {"t0": self.batch_start, "changes": [], "routes": [], "finish": {}}
    record["group"] = [t.spec.group for t in self.batch.trajectories]  # type: ignore[union-attr]
    batches.append(record)
    self.batch._trace = record  # type: ignore[union-attr]


def change(self: ro.RolloutSimulation, pool_change: ro.PoolChange) -> None:
    record = getattr(self, "_trace", None)
    if record is not None:
        t = record["t0"] + self.now
        left = [
            (w, len(self.decoders[w].active), len(self.prefillers[w].queue))
            for w in pool_change.remove_colocated
            if self.decoders[w].alive
        ]
        joined = len(pool_change.add_colocated_engines) + pool_change.add_colocated
        alive = sum(d.alive for d in self.decoders)
        record["changes"].append((t, joined, left, alive))
    ORIG_CHANGE(self, pool_change)


def queue_job(self: ro.RolloutSimulation, job: Any) -> None:
    ORIG_QUEUE(self, job)
    record = getattr(self, "_trace", None)
    if record is not None:
        worker = self.prefill_router.placed[job.index][0]
        record["routes"].append((record["t0"] + self.now, job.index, worker, job.prompt_tokens))


def finish_turn(self: ro.RolloutSimulation, index: int, tokens: int) -> None:
    ORIG_FINISH(self, index, tokens)
    record = getattr(self, "_trace", None)
    t = self.trajectories[index]
    if record is not None and t.turn == len(t.spec.turns):
        record["finish"][index] = record["t0"] + self.now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant")
    parser.add_argument("segment", type=int, help="segment index from 0")
    parser.add_argument("--policies", default="pearl_sched,pearl")
    parser.add_argument("--batch", type=int, default=2, help="the batch whose tail is printed (1-based)")
    parser.add_argument(
        "--tie-seeds",
        default="",
        help="comma-separated tie seeds (or 'index'), each a run of every policy (default: the scenario's)",
    )
    parser.add_argument("--follow", default="", help="comma-separated trajectories of the batch to print too")
    parser.add_argument("--brief", action="store_true", help="one line per run (no batch detail)")
    args = parser.parse_args()
    name = args.variant.split("/")[0]
    scenario = next(v for v in load_scenario(name).expand() if v.name == args.variant)
    cl.SimCluster.launch = launch  # type: ignore[method-assign]
    ro.RolloutSimulation._change = change  # type: ignore[method-assign]
    ro.RolloutSimulation._queue_job = queue_job  # type: ignore[method-assign]
    ro.RolloutSimulation._finish_turn = finish_turn  # type: ignore[method-assign]
    seeds = [s for s in args.tie_seeds.split(",") if s] or [None]
    for seed in seeds:
        ro._router_seeds = ORIG_ROUTER_SEEDS  # type: ignore[assignment]
        if seed == "index":
            ro._router_seeds = lambda _seed: (None, None)  # type: ignore[assignment]
        run = scenario if seed in (None, "index") else scenario.model_copy(update={"tie_seed": int(seed)})
        ties = seed if seed == "index" else f"seed {run.gateway_tie_seed}"
        for policy in args.policies.split(","):
            batches.clear()
            r = run_policy_segment(run, policy, args.segment, default_data())
            steps = [round(s.step_time_s, 1) for s in r.steps]
            ends = [round(s.rollout_end_s, 1) for s in r.steps]
            print(f"{policy} ties={ties}: {r.throughput_tok_s:.0f} tok/s; step_time_s {steps}; rollout_end {ends}")
            if args.brief:
                continue
            print(" tokens", [s.generated_tokens + s.training_tokens for s in r.steps])
            print(" prefill", [s.prefill_tokens for s in r.steps], "cache_hit", [s.cache_hit_tokens for s in r.steps])
            print(" preempted", [s.preempted_workers for s in r.steps])
            print(" ratios", [(round(t), c) for t, c in r.ratios])
            if len(batches) < args.batch:
                continue
            b = batches[args.batch - 1]
            print(f" batch {args.batch}, from {b['t0']:.1f} s:")
            print(
                "  joins and leaves (time, joined, [(worker left, running, queued)], live before):",
                [(round(t, 1), j, left, n) for t, j, left, n in b["changes"]],
            )
            last = sorted(b["finish"].items(), key=lambda kv: -kv[1])[:8]
            print("  last to finish (trajectory, s):", [(i, round(t, 1)) for i, t in last])
            first: dict[int, int] = {}  # trajectory -> its first request's worker
            for _, i, w, _ in b["routes"]:
                first.setdefault(i, w)
            follow = [int(i) for i in args.follow.split(",") if i]
            for slowest in [i for i, _ in last[:4]] + [i for i in follow if i not in dict(last[:4])]:
                moves = [(t, w) for t, i, w, _ in b["routes"] if i == slowest]
                prompts = [p for _, i, _, p in b["routes"] if i == slowest]
                path = [moves[0]] + [m for a, m in itertools.pairwise(moves) if m[1] != a[1]]
                group = [i for i, g in enumerate(b["group"]) if g == b["group"][slowest] and i in first]
                print(
                    f"  trajectory {slowest} (ends {b['finish'].get(slowest, math.nan):.1f} s): {len(moves)} requests,"
                    f" last prompt {prompts[-1]:.0f} tokens, workers"
                    f" (from s) {[(round(t, 1), w) for t, w in path]}; its group ({min(group)}-{max(group)}) started"
                    f" on worker(s) {sorted({first[i] for i in group})}"
                )
            slowest = last[0][0]
            moves = [(t, w) for t, i, w, _ in b["routes"] if i == slowest]
            marks = [b["t0"] + 200.0 * k for k in range(1, 40) if b["t0"] + 200.0 * k < last[0][1]]
            where = [(round(m), _worker_at(moves, m), _resident(b, m)) for m in marks]
            print(
                f"  trajectory {slowest}'s worker's resident trajectories (routed there last, unfinished) against"
                " the busiest and the quietest live worker, every 200 s:",
                [(m, w, res.get(w, 0), max(res.values()), min(res.values())) for m, w, res in where if res],
            )


def _worker_at(moves: list[tuple[float, int]], t: float) -> int:
    """The worker the trajectory's latest request before ``t`` went to."""
    return [w for s, w in moves if s <= t][-1]


def _resident(b: dict[str, Any], t: float) -> collections.Counter[int]:
    """Per worker: the batch's trajectories not finished by ``t`` whose latest request before ``t`` went there."""
    last: dict[int, int] = {}
    for s, i, w, _ in b["routes"]:
        if s > t:
            break
        last[i] = w
    return collections.Counter(w for i, w in last.items() if b["finish"].get(i, float("inf")) > t)


if __name__ == "__main__":
    main()
