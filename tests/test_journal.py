"""The action journal under damage and rivalry: torn tails, bad records, foreign journals, a second controller,
and pids that are no longer ours (docs/reliability.md, "Journal and adapters")."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pearl_sched.adapters.journal import ForeignJournalError, Journal, JournalError, JournalLockedError
from pearl_sched.adapters.processes import ProcessIdentity, identify, signal_group, why_not_ours
from pearl_sched.plans import Action, ActionKind
from pearl_sched.state import Role, Zone

EXPAND = Action(
    kind=ActionKind.EXPAND, worker_id="w00", gpu_ids=("g0",), zone=Zone.DEDICATED, from_role=None, to_role=Role.DECODE
)
SHRINK = Action(
    kind=ActionKind.SHRINK, worker_id="w01", gpu_ids=("g1",), zone=Zone.DEDICATED, from_role=Role.DECODE, to_role=None
)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_a_new_journal_is_private_and_starts_with_its_cluster_id(tmp_path: Path) -> None:
    old = os.umask(0)  # even with no umask to help, the file is 0600
    try:
        with Journal(tmp_path / "j.jsonl", cluster_id="cluster-a") as journal:
            journal.write("begin", EXPAND, "p1")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "j.jsonl").stat().st_mode) == 0o600
    header = json.loads(lines(tmp_path / "j.jsonl")[0])
    assert header["cluster_id"] == "cluster-a" and header["journal"] == 1


def test_a_torn_last_line_is_cut_off_and_the_next_record_is_not_glued_to_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "j.jsonl"
    with Journal(path, cluster_id="c") as journal:
        journal.write("begin", EXPAND, "p1")
        journal.write("done", EXPAND, "p1", {"pid": 4242})
        journal.write("begin", SHRINK, "p2")
    full = lines(path)[-1] + "\n"
    with path.open("a") as handle:  # a crash mid-write: the "done" of the shrink, cut short
        handle.write(full.replace('"begin"', '"done"')[: len(full) // 2])
    with caplog.at_level(logging.WARNING), Journal(path, cluster_id="c") as journal:
        assert journal.torn
        journal.write("failed", SHRINK, "p2")
        replay = journal.replay()
    assert sum("torn" in r.message for r in caplog.records) == 1
    records = [json.loads(line) for line in lines(path)]  # every line is whole JSON: nothing glued
    assert [r.get("phase") for r in records] == [None, "begin", "done", "begin", "failed"]
    assert replay.roles == {"w00": "decode"} and replay.unfinished == []


def test_a_whole_last_record_that_lost_only_its_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    with Journal(path, cluster_id="c") as journal:
        journal.write("begin", EXPAND, "p1")
    path.write_text(path.read_text().rstrip("\n"))
    with Journal(path, cluster_id="c") as journal:
        assert not journal.torn
        journal.write("done", EXPAND, "p1")
        assert journal.replay().roles == {"w00": "decode"}
    assert len(lines(path)) == 3


def test_bad_records_are_skipped_counted_and_warned_once_and_sequence_numbers_never_repeat(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "j.jsonl"
    with Journal(path, cluster_id="c") as journal:
        journal.write("begin", EXPAND, "p1")
        journal.write("done", EXPAND, "p1")
    bad = [
        "not json at all",
        "[1, 2, 3]",
        '{"seq": "seven", "phase": "done", "plan": "p", "action": {"worker_id": "w00"}}',
        '{"seq": 99, "phase": "exploded", "plan": "p", "action": {"worker_id": "w00"}}',
        '{"seq": 98, "phase": "done", "plan": "p"}',
        '{"seq": 97, "phase": "done", "plan": "p", "action": {"worker_id": 5}}',
        "\x00\x01\x02",
        "[" * 100_000,  # deeper than the json module recurses
    ]
    with path.open("a") as handle:
        handle.write("\n".join(bad) + "\n")
    with caplog.at_level(logging.WARNING), Journal(path, cluster_id="c") as journal:
        assert journal.skipped == len(bad)
        assert journal.replay().roles == {"w00": "decode"}  # the damage changed nothing it did not describe
        journal.write("begin", SHRINK, "p2")
    warnings = [r.message for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"skipped {len(bad)} malformed record(s)" in warnings[0]
    seqs = [r["seq"] for r in map(json.loads, lines(path)[:3] + lines(path)[-1:])]
    assert seqs == [0, 1, 2, 3]  # the bad lines' seq 99 was never trusted, and nothing repeats


def test_extras_cannot_overwrite_a_records_own_fields(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.jsonl", cluster_id="c") as journal:
        with pytest.raises(ValueError, match=r"may not set \['seq'\]"):
            journal.write("done", EXPAND, "p1", {"seq": 0})
        journal.write("done", EXPAND, "p1", {"pid": 7})
    assert [json.loads(line)["seq"] for line in lines(tmp_path / "j.jsonl")] == [0, 1]


def test_a_journal_written_for_another_cluster_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    with Journal(path, cluster_id="cluster-a") as journal:
        journal.write("begin", EXPAND, "p1")
    with pytest.raises(ForeignJournalError, match="belongs to cluster 'cluster-a', not 'cluster-b'"):
        Journal(path, cluster_id="cluster-b")
    Journal(path, cluster_id="cluster-a").close()  # the refusal released the lock


def test_records_without_a_cluster_id_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    record = {"seq": 0, "at": 0, "phase": "begin", "plan": "p", "action": EXPAND.model_dump(mode="json")}
    path.write_text(json.dumps(record) + "\n")
    path.chmod(0o600)
    with pytest.raises(JournalError, match="no cluster id"):
        Journal(path, cluster_id="c")


def test_a_second_controller_on_the_journal_fails_at_once(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    with Journal(path, cluster_id="c"):
        with pytest.raises(JournalLockedError, match=f"in use by another controller \\(pid {os.getpid()}\\)"):
            Journal(path, cluster_id="c")
        # Another process: it must fail at once (a blocking lock would hit the subprocess timeout instead).
        script = textwrap.dedent(f"""
            from pearl_sched.adapters.journal import Journal, JournalLockedError
            try:
                Journal({str(path)!r}, cluster_id="c")
            except JournalLockedError as exc:
                print(exc)
                raise SystemExit(3)
        """)
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert run.returncode == 3, run.stderr
        assert "in use by another controller" in run.stdout
    Journal(path, cluster_id="c").close()  # free again once the first controller closed it


def test_a_journal_others_can_write_or_do_not_own_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "j.jsonl"
    Journal(path, cluster_id="c").close()
    path.chmod(0o664)
    with pytest.raises(JournalError, match="writable by group or others"):
        Journal(path)
    path.chmod(0o600)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(path).st_uid + 1)
    with pytest.raises(JournalError, match="owned by uid"):
        Journal(path)
    monkeypatch.undo()
    (tmp_path / "link.jsonl").symlink_to(path)
    with pytest.raises(JournalError, match="symbolic link"):
        Journal(tmp_path / "link.jsonl")


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """A process pearl_sched did not start as a server (in its own session, like a server would be)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    yield process
    process.kill()
    process.wait()


def test_a_pid_that_is_not_ours_is_never_signalled(stranger: subprocess.Popen[bytes]) -> None:
    real = identify(stranger.pid)
    assert real is not None and why_not_ours(real) is None
    reused = ProcessIdentity(stranger.pid, (real.started_at_s or 0) - 3600, real.command_sha256)  # an older one
    other_command = ProcessIdentity(stranger.pid, real.started_at_s, "0" * 64)
    legacy = ProcessIdentity(stranger.pid, None, None)  # a journal with a bare pid
    for identity in (reused, other_command, legacy):
        assert why_not_ours(identity) is not None
        assert not signal_group(identity)
    assert stranger.poll() is None  # still running
    assert signal_group(real)  # the control: the verified identity is signalled
    assert stranger.wait(timeout=10) != 0


def test_replay_gives_verifiable_identities_and_drops_bare_pids(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.jsonl", cluster_id="c") as journal:
        journal.write("done", EXPAND, "p1", ProcessIdentity(4242, 12.5, "ab" * 32).to_record())
        journal.write("done", SHRINK.model_copy(update={"worker_id": "w02"}), "p1", {"pid": 77})
        journal.write("done", SHRINK.model_copy(update={"worker_id": "w03"}), "p1", {"pid": "1; rm -rf /"})
        journal.write("begin", EXPAND.model_copy(update={"worker_id": "w04"}), "p2")
        journal.write("started", EXPAND.model_copy(update={"worker_id": "w04"}), "p2", {"pid": 99})
        replay = journal.replay()
    assert replay.pids["w00"] == ProcessIdentity(4242, 12.5, "ab" * 32)
    assert replay.pids["w02"] == ProcessIdentity(77, None, None)  # kept, but never verified, so never signalled
    assert "w03" not in replay.pids
    assert replay.pids["w04"].pid == 99 and [r["action"]["worker_id"] for r in replay.unfinished] == ["w04"]
