"""The action journal and pid checks under damage and rivalry (docs/reliability.md, "Journal and adapters").

Four trials, each printing one line per case:

* ``torn``: a 21-record journal whose last record is cut at every byte offset (a crash mid-write at each
  point): opened, records glued together after the next write, duplicate sequence numbers;
* ``damage``: ten kinds of damaged journal: opened, records skipped, tail torn, and whether the replay (roles,
  unfinished actions) is the undamaged one's where the damage touched no record it needs;
* ``rivals``: two controller processes race to open one journal and write 6 records each over 1.5 s,
  ``--rounds`` times:
  how many opened, how many were refused, the refusal's latency, duplicate sequence numbers;
* ``pids``: processes we did not start, recorded with a reused pid's start time, another command line or a bare
  pid: how many were signalled (must be 0) and how many survived.

Usage: python bench/journal_damage.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pearl_sched.adapters.journal import Journal, JournalError
from pearl_sched.adapters.processes import ProcessIdentity, identify, signal_group
from pearl_sched.plans import Action, ActionKind
from pearl_sched.state import Role, Zone


def action(i: int) -> Action:
    return Action(
        kind=ActionKind.EXPAND,
        worker_id=f"w{i:02d}",
        gpu_ids=(f"g{i}",),
        zone=Zone.DEDICATED,
        from_role=None,
        to_role=Role.DECODE,
    )


def sample(path: Path) -> bytes:
    """A header and 10 begin/done pairs (21 records)."""
    with Journal(path, cluster_id="bench") as journal:
        for i in range(10):
            journal.write("begin", action(i), "plan-1")
            journal.write("done", action(i), "plan-1", ProcessIdentity(1000 + i, 1.0e9, "ab" * 32).to_record())
    return path.read_bytes()


def check(path: Path) -> tuple[int, int]:
    """(lines that are not whole JSON, duplicate sequence numbers) in a journal file."""
    glued, seqs = 0, Counter[int]()
    for line in path.read_bytes().splitlines():
        try:
            seqs[int(json.loads(line)["seq"])] += 1
        except (ValueError, KeyError, TypeError):
            glued += 1
    return glued, sum(n - 1 for n in seqs.values() if n > 1)


def torn(folder: Path) -> None:
    data = sample(folder / "whole.jsonl")
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    opened = glued = duplicates = 0
    for cut in range(last, len(data)):
        path = folder / f"torn-{cut}.jsonl"
        path.write_bytes(data[:cut])
        path.chmod(0o600)
        with Journal(path, cluster_id="bench") as journal:
            opened += 1
            journal.write("failed", action(9), "plan-1")
        g, d = check(path)
        glued, duplicates = glued + g, duplicates + d
    offsets = len(data) - last
    print(f"journal_damage trial=torn offsets={offsets} opened={opened} glued={glued} duplicate_seqs={duplicates}")


DAMAGE = {
    "torn_tail": lambda d: d[:-7],
    "garbage_line": lambda d: d.replace(b"\n", b"\nnot json\n", 3),
    "cut_mid_file": lambda d: d[: d.find(b"\n", 200) - 9] + d[d.find(b"\n", 200) :],
    "nul_bytes": lambda d: d + b"\x00" * 64 + b"\n",
    "invalid_utf8": lambda d: d + b'{"seq": 99, "phase": "\xff\xfe"}\n',
    "deep_nesting": lambda d: d + b"[" * 200_000 + b"\n",
    "wrong_types": lambda d: d + b'{"seq": "x", "phase": 1, "plan": null, "action": []}\n',
    "array_record": lambda d: d + b"[1, 2, 3]\n",
    "blank_lines": lambda d: d.replace(b"\n", b"\n\n\n"),
    "duplicated_record": lambda d: d + d.splitlines(keepends=True)[-1],
}


def damage(folder: Path) -> None:
    data = sample(folder / "whole.jsonl")
    with Journal(folder / "whole.jsonl") as journal:
        clean = journal.replay()
    for kind, spoil in DAMAGE.items():
        path = folder / f"{kind}.jsonl"
        path.write_bytes(spoil(data))
        path.chmod(0o600)
        try:
            with Journal(path, cluster_id="bench") as journal:
                replay = journal.replay()
                same = replay.roles == clean.roles and len(replay.unfinished) == len(clean.unfinished)
                print(
                    f"journal_damage trial=damage kind={kind} opened=1 skipped={journal.skipped}"
                    f" torn={int(journal.torn)} replay_unchanged={int(same)} unfinished={len(replay.unfinished)}"
                )
        except JournalError as exc:
            print(f"journal_damage trial=damage kind={kind} opened=0 error={exc}")


RIVAL = textwrap.dedent("""
    import sys, time
    from pearl_sched.adapters.journal import Journal, JournalLockedError
    from pearl_sched.plans import Action, ActionKind
    from pearl_sched.state import Role, Zone
    start = float(sys.argv[2])
    while time.time() < start:
        pass
    t0 = time.perf_counter()
    try:
        journal = Journal(sys.argv[1], cluster_id="bench")
    except JournalLockedError:
        print(f"refused {time.perf_counter() - t0:.6f}")
        raise SystemExit(0)
    for i in range(6):
        a = Action(kind=ActionKind.EXPAND, worker_id=f"w{i}", gpu_ids=(f"g{i}",), zone=Zone.DEDICATED,
                   from_role=None, to_role=Role.DECODE)
        journal.write("begin", a, sys.argv[3])
        time.sleep(0.25)  # hold the journal long enough that the rival's open overlaps
    journal.close()
    print("opened 0")
""")


def rivals(folder: Path, rounds: int) -> None:
    opened = refused = duplicates = 0
    latencies = []
    for r in range(rounds):
        path = folder / f"rivals-{r}.jsonl"
        start = time.time() + 2.0  # both processes have imported by then
        runs = [
            subprocess.Popen(
                [sys.executable, "-c", RIVAL, str(path), str(start), f"controller-{c}"],
                stdout=subprocess.PIPE,
                text=True,
            )
            for c in range(2)
        ]
        for run in runs:
            out, _ = run.communicate(timeout=60)
            kind, seconds = out.split()
            opened += kind == "opened"
            if kind == "refused":
                refused += 1
                latencies.append(float(seconds))
        duplicates += check(path)[1]
    worst_ms = 1000 * max(latencies, default=0.0)
    print(
        f"journal_damage trial=rivals rounds={rounds} opened={opened} refused={refused}"
        f" refusal_ms_max={worst_ms:.2f} duplicate_seqs={duplicates}"
    )


def pids(count: int) -> None:
    strangers = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        for _ in range(count)
    ]
    signalled = 0
    try:
        for i, process in enumerate(strangers):
            real = identify(process.pid)
            assert real is not None and real.started_at_s is not None
            forged = [
                ProcessIdentity(process.pid, real.started_at_s - 60 - i, real.command_sha256),  # a reused pid
                ProcessIdentity(process.pid, real.started_at_s, "0" * 64),  # another command line
                ProcessIdentity(process.pid, None, None),  # a bare pid from an old journal
            ]
            signalled += sum(signal_group(identity) for identity in forged)
        alive = sum(process.poll() is None for process in strangers)
    finally:
        for process in strangers:
            process.kill()
            process.wait()
    print(f"journal_damage trial=pids forged={3 * count} signalled={signalled} survivors={alive}/{count}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the journal's warnings are what is being measured, not shown
    with tempfile.TemporaryDirectory(prefix="journal-damage-") as tmp:
        folder = Path(tmp)
        torn(folder)
        damage(folder)
        rivals(folder, args.rounds)
        pids(args.rounds)


if __name__ == "__main__":
    main()
