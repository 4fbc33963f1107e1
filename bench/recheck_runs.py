"""Do the shipped scenario figures still hold? One policy re-run on each segment docs/scenarios/runs/ reports.

The raw ``reproduce …`` lines in docs/scenarios/runs/ were measured on the commits their files name; a later change
to the planner, a predictor or the simulator may move them. This re-runs one policy (default pearl_sched) on every
segment of the named scenario variants (default: every variant with a recorded figure for it) in this code and
prints, per segment::

    recheck scenario=<name> segment=<name> policy=<name> now=<tok/s> shipped=<tok/s> same=<yes|no> wall_s=<s>
    recheck_summary policy=<name> segments=<n> same=<n>

``same`` compares whole tokens per second, the precision the run files record. ``--rank-by-predict`` re-runs with
``PolicyConfig(rank_by_predict=True)`` (docs/formulation.md, "Ranking by predict"; the lines end in
``ranking=predict``): the option against the shipped default on every segment. A policy segment is one simulation
(no sweep, no search): the swe segments take 5-40 s each on 2 cores, the sensitivity ones under 30 s.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import time
from pathlib import Path

from pearl_sched.config import PolicyConfig
from pearl_sched.shared_data import default_data
from pearl_sched.sim.experiment import run_policy_segment
from pearl_sched.sim.scenario import load_scenario

RUNS = Path(__file__).resolve().parents[1] / "docs" / "scenarios" / "runs"
_LINE = re.compile(r"reproduce scenario=(\S+) segment=(\S+) policy=(\S+) throughput_tok_s=(\d+)")


def shipped_figures(policy: str, runs: Path = RUNS) -> dict[tuple[str, str], int]:
    """(scenario variant, segment) → the tokens per second ``policy`` reached in the run files (the newest one).

    Files are read oldest first, by when git first recorded them (a file's name says nothing of its age:
    ``e2e-s12.txt`` sorts before ``e2e-smg-router.txt``); within a file, later lines win. Only the top-level files:
    ``runs/pre-merge/`` keeps superseded measurements.
    """
    figures: dict[tuple[str, str], int] = {}
    for path in sorted(runs.glob("*.txt"), key=lambda p: (_added_at(p), p.name)):
        for line in path.read_text().splitlines():
            m = _LINE.match(line)
            if m and m.group(3) == policy and m.group(2) != "all":
                figures[(m.group(1), m.group(2))] = int(m.group(4))
    return figures


def _added_at(path: Path) -> int:
    """When git first recorded ``path`` (Unix seconds); a file git does not know yet is the newest."""
    try:
        out = subprocess.run(
            ["git", "log", "--diff-filter=A", "--format=%ct", "--", path.name],
            cwd=path.parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return 0
    return int(out[-1]) if out else 2**62


def main(argv: list[str] | None = None) -> int:
    """Re-run the policy on each recorded segment and print how it compares; exit 1 when any figure moved."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", help="scenario variants, e.g. swe-qwen3-8b/64k (default: all recorded)")
    parser.add_argument("--policy", default="pearl_sched", help="the policy to re-run (default pearl_sched)")
    parser.add_argument("--data", type=Path, default=None, help="the shared data folder (default: found as usual)")
    parser.add_argument("--rank-by-predict", action="store_true", help="re-run with PolicyConfig(rank_by_predict=True)")
    args = parser.parse_args(argv)
    config = PolicyConfig(rank_by_predict=True) if args.rank_by_predict else None
    suffix = " ranking=predict" if args.rank_by_predict else ""
    data = args.data or default_data()
    shipped = shipped_figures(args.policy)
    variants = args.variants or sorted({name for name, _ in shipped})
    checked = same = 0
    for variant in variants:
        base = variant.split("/", 1)[0]
        scenario = next((v for v in load_scenario(base).expand() if v.name == variant), None)
        if scenario is None:
            parser.error(f"no scenario variant named {variant!r}")
        for i, segment in enumerate(scenario.segments):
            old = shipped.get((variant, segment.name))
            if old is None:
                continue
            started = time.perf_counter()
            now = round(run_policy_segment(scenario, args.policy, i, data, config=config).throughput_tok_s)
            checked += 1
            same += now == old
            print(
                f"recheck scenario={variant} segment={segment.name} policy={args.policy} now={now} shipped={old}"
                f" same={'yes' if now == old else 'no'} wall_s={time.perf_counter() - started:.0f}{suffix}",
                flush=True,
            )
    print(f"recheck_summary policy={args.policy} segments={checked} same={same}{suffix}")
    return 0 if same == checked else 1


if __name__ == "__main__":
    raise SystemExit(main())
