"""bench/policy_runs.py's per-variant targets: issue 13's definitions on the policies that ran."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bench.policy_runs import target_lines
from pearl_sched.sim.experiment import Report


def _run(policy: str, segments: list[float], end_to_end: float) -> Any:
    segs = [SimpleNamespace(segment=f"segment-{i + 1}", throughput_tok_s=x) for i, x in enumerate(segments)]
    return SimpleNamespace(scenario="s", policy=policy, segments=segs, throughput_tok_s=end_to_end)


def _report(runs: dict[str, tuple[list[float], float]]) -> Report:
    scenario: Any = SimpleNamespace(
        name="s", segments=[SimpleNamespace(name="segment-1"), SimpleNamespace(name="segment-2")]
    )
    return Report(scenario, {p: _run(p, segs, e2e) for p, (segs, e2e) in runs.items()})


def test_the_worst_rival_segment_is_named_and_the_oracle_is_not_a_rival() -> None:
    lines = target_lines(
        _report(
            {
                "pearl_sched": ([100.0, 100.0], 100.0),
                "pearl": ([101.0, 90.0], 95.0),  # 0.9901 in segment 1: a miss
                "oracle-static": ([200.0, 200.0], 200.0),  # a sweep, not a rival
            }
        )
    )
    assert lines == [
        "target pearl_sched>=every_policy_within_0.5pct value=0.9901:pearl@segment-1 met=no",
        "target pearl_sched>=pearl value=1.0526 met=yes",
    ]


def test_within_half_a_percent_is_met_and_without_pearl_sched_there_is_no_target() -> None:
    lines = target_lines(_report({"pearl_sched": ([99.6, 100.0], 99.8), "pearl": ([100.0, 100.0], 100.0)}))
    assert lines[0].endswith("value=0.9960:pearl@segment-1 met=yes")
    assert lines[1] == "target pearl_sched>=pearl value=0.9980 met=no"
    assert target_lines(_report({"pearl": ([1.0, 1.0], 1.0)})) == []
