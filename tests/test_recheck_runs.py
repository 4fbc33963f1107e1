"""bench/recheck_runs.py: which recorded figures it reads from the run files."""

from __future__ import annotations

from pathlib import Path

from bench.recheck_runs import shipped_figures


def test_reads_each_policys_segment_figures_and_skips_the_whole_run_and_superseded_files(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text(
        "# measured on abc1234\n"
        "reproduce scenario=e2e segment=segment-1 policy=pearl_sched throughput_tok_s=53795 vs_roll=11.4\n"
        "reproduce scenario=e2e segment=segment-1 policy=pearl throughput_tok_s=53000 vs_roll=11.2\n"
        "reproduce scenario=e2e segment=all policy=pearl_sched throughput_tok_s=51700 vs_roll=4.73\n"
    )
    (tmp_path / "b.txt").write_text(
        "reproduce scenario=swe-qwen3-8b/64k segment=segment-2 policy=pearl_sched throughput_tok_s=39228 x=1\n"
    )
    (tmp_path / "pre-merge").mkdir()
    (tmp_path / "pre-merge" / "old.txt").write_text(
        "reproduce scenario=e2e segment=segment-1 policy=pearl_sched throughput_tok_s=1 vs_roll=0\n"
    )
    assert shipped_figures("pearl_sched", tmp_path) == {
        ("e2e", "segment-1"): 53795,
        ("swe-qwen3-8b/64k", "segment-2"): 39228,
    }
    assert shipped_figures("pearl", tmp_path) == {("e2e", "segment-1"): 53000}
    assert shipped_figures("roll", tmp_path) == {}
