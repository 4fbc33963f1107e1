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


def test_the_newest_run_file_wins_whatever_its_name(tmp_path: Path) -> None:
    """``e2e-s12.txt`` sorts before ``e2e-smg-router.txt`` by name, yet it is the later measurement: files are read
    in the order git first recorded them, and a file git does not know yet counts as the newest."""
    import os
    import subprocess

    def git(*args: str, when: str = "2026-12-06T00:00:00") -> None:
        env = os.environ | {"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
        env |= {
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        }
        subprocess.run(["git", *args], cwd=tmp_path, env=env, check=True, capture_output=True)

    line = "reproduce scenario=e2e segment=segment-1 policy=pearl_sched throughput_tok_s={} vs_roll=1\n"
    git("init", "-q")
    (tmp_path / "z-old.txt").write_text(line.format(100))
    git("add", "z-old.txt")
    git("commit", "-qm", "old", when="2026-12-06T00:00:00")
    (tmp_path / "a-new.txt").write_text(line.format(200))
    git("add", "a-new.txt")
    git("commit", "-qm", "new", when="2026-12-07T00:00:00")
    assert shipped_figures("pearl_sched", tmp_path) == {("e2e", "segment-1"): 200}
    (tmp_path / "m-uncommitted.txt").write_text(line.format(300))
    assert shipped_figures("pearl_sched", tmp_path) == {("e2e", "segment-1"): 300}
