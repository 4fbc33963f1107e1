"""Run scenario variants one policy at a time, in policy groups, and write one run file per variant.

``bench/reproduce.py`` runs every policy of a scenario at once and prints only when all have finished; on a shared
machine with a deadline that can lose everything. This driver calls ``run_scenario(variant, [policy],
processes=1)`` for one policy at a time: the first group of policies over every variant, then the next group, and
so on, and starts no run after ``--stop-at``. Each variant's file (``<out-dir>/<variant>-<suffix>.txt``, the
variant's ``/`` as ``-``) gets a header (commit, command, start, load), one line per finished policy::

    # done policy=<name> <s> s load=<1-min load>; segment-1=<tok/s> … all=<tok/s>

and, when every group has been tried, ``bench/reproduce.py``'s ``reproduce scenario=…`` lines for the policies
that ran (ratios against PEARL-faithful and the oracle only where they ran), then issue 13's two targets for the
variant with the definitions of ``reproduce.py``'s ``targets()``::

    target pearl_sched>=every_policy_within_0.5pct value=<worst ratio>:<policy>@<segment> met=yes|no
    target pearl_sched>=pearl value=<end-to-end ratio> met=yes|no

Usage::

    python bench/policy_runs.py --scenarios swe-qwen3-8b,swe-qwen3-30b-a3b \\
        --groups "pearl_sched,pearl;rlboost+;ungated,static-3p5d,roll-large,roll" \\
        --stop-at 12:30 --out-dir docs/scenarios/runs --suffix s12
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.reproduce import report_lines
from pearl_sched.sim.experiment import Report, default_data, run_scenario
from pearl_sched.sim.scenario import Scenario, load_scenario

SWEEPS = ("oracle-static", "oracle-hindsight", "oracle-lookahead", "best-colocated", "best-disaggregated")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _variants(names: list[str]) -> list[Scenario]:
    out = []
    for name in names:
        file, _, variant = name.partition("/")
        found = [s for s in load_scenario(file).expand() if not variant or s.name == name]
        if not found:
            raise SystemExit(f"policy_runs: no scenario variant {name!r}")
        out.extend(found)
    return out


def target_lines(report: Report) -> list[str]:
    """Issue 13's per-variant targets: pearl_sched ≥ every other policy (not the oracles or sweeps) within 0.5%
    per segment and end to end; pearl_sched ≥ PEARL-faithful end to end."""
    if "pearl_sched" not in report.runs:
        return []
    lines = []
    rivals = []
    for segment in [*(s.name for s in report.scenario.segments), None]:
        for other in report.runs:
            ratio = report.ratio("pearl_sched", other, segment)
            if other in ("pearl_sched", *SWEEPS) or ratio is None:
                continue
            rivals.append((ratio, f"{other}@{segment or 'all'}"))
    if rivals:
        worst = min(rivals)
        met = "yes" if worst[0] >= 0.995 else "no"
        lines.append(f"target pearl_sched>=every_policy_within_0.5pct value={worst[0]:.4f}:{worst[1]} met={met}")
    vs_pearl = report.ratio("pearl_sched", "pearl")
    if vs_pearl is not None:
        lines.append(f"target pearl_sched>=pearl value={vs_pearl:.4f} met={'yes' if vs_pearl >= 1 else 'no'}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", required=True, help="Comma-separated scenario files or variants")
    parser.add_argument("--groups", required=True, help="Policy groups, ';' between groups, ',' within one")
    parser.add_argument("--stop-at", help="HH:MM UTC today: start no run after it")
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--suffix", default="runs")
    parser.add_argument("--data", type=Path, default=default_data())
    args = parser.parse_args()
    stop = None
    if args.stop_at:
        try:
            hour, minute = (int(x) for x in args.stop_at.split(":"))
            stop = _now().replace(hour=hour, minute=minute, second=0, microsecond=0)
        except ValueError:
            parser.error(f"--stop-at must be HH:MM (UTC), got {args.stop_at!r}")
    groups = [[p for p in g.split(",") if p] for g in args.groups.split(";")]
    variants = _variants(args.scenarios.split(","))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    files = {v.name: args.out_dir / f"{v.name.replace('/', '-')}-{args.suffix}.txt" for v in variants}
    reports = {v.name: Report(v, {}) for v in variants}

    def write(name: str, text: str) -> None:
        with files[name].open("a") as f:
            f.write(text + "\n")
        print(text, flush=True)

    for v in variants:
        files[v.name].write_text("")
        write(v.name, f"# commit {commit}, started {_now():%Y-%m-%d %H:%M:%S} UTC, load {os.getloadavg()[0]:.2f}")
        write(v.name, f"# command: python {' '.join(sys.argv)}")
        write(v.name, "# one process, one policy at a time (run_scenario(variant, [policy], processes=1))")
    skipped: dict[str, list[str]] = {v.name: [] for v in variants}
    for group in groups:
        for v in variants:
            for policy in group:
                if stop is not None and _now() >= stop:
                    skipped[v.name].append(policy)
                    continue
                start = time.perf_counter()
                run = run_scenario(v, [policy], args.data, processes=1).runs[policy]
                reports[v.name].runs[policy] = run
                reports[v.name].wall_s += time.perf_counter() - start
                segs = " ".join(f"{s.segment}={s.throughput_tok_s:.0f}" for s in run.segments)
                write(
                    v.name,
                    f"# done policy={policy} {time.perf_counter() - start:.0f} s load={os.getloadavg()[0]:.2f};"
                    f" {segs} all={run.throughput_tok_s:.0f}",
                )
    for v in variants:
        report = reports[v.name]
        if skipped[v.name]:
            write(v.name, f"# not run (past --stop-at {args.stop_at} UTC): {', '.join(skipped[v.name])}")
        write(v.name, f"# finished {_now():%Y-%m-%d %H:%M:%S} UTC, {report.wall_s:.0f} s of runs")
        for line in [*report_lines(report), *target_lines(report)]:
            write(v.name, line)


if __name__ == "__main__":
    main()
