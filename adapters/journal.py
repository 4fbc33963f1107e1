"""An append-only journal of transition actions, so a controller that dies mid-plan resumes without repeating.

Every action is written before it runs (``begin``) and after (``done`` or ``failed``) — and, when it starts a
server, once that server is up (``started``, with its pid's identity) — one JSON object per line, written in one
``write`` and fsync'd. On restart, :meth:`Journal.replay` gives the slots' roles as the done actions left them,
the identities of the servers they started, and the actions that began but never ended (their slots must be
re-observed before anything else).

What makes it safe to trust (docs/reliability.md, "Journal and adapters"):

* **One controller at a time.** Opening a journal takes an exclusive ``flock`` on it, held until
  :meth:`Journal.close` (or the process dies). A second controller on the same file fails at once with
  :class:`JournalLockedError` instead of interleaving its records with the first one's.
* **One cluster per journal.** The first record is a header naming the cluster
  (:meth:`Journal.claim`); a journal written for another cluster is refused with :class:`ForeignJournalError`.
* **Crashes mid-write.** A last line without its newline is a record torn by a crash: it is cut off (or, when
  it is a whole record that only lacks the newline, completed) before anything is appended, so the next record
  never glues onto it. The action it described counts as unfinished, so its slot is re-observed.
* **Damaged records** (not JSON, or missing fields) are skipped and counted, with one warning naming their
  lines; sequence numbers continue after the highest one seen, so they never repeat.
* **Private.** The file is created with mode 0600; one owned by another user, or writable by group or others,
  is refused: its pids would otherwise be trusted by a controller that signals them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from typing_extensions import Self

from pearl_sched.adapters.processes import ProcessIdentity
from pearl_sched.errors import PearlSchedError
from pearl_sched.plans import Action

logger = logging.getLogger(__name__)

FORMAT = 1
PHASES = ("begin", "started", "done", "failed")


class JournalError(PearlSchedError):
    """The journal file cannot be used; the message names the file and why."""


class JournalLockedError(JournalError):
    """Another controller holds the journal."""


class ForeignJournalError(JournalError):
    """The journal was written for another cluster."""


@dataclass
class Replay:
    """What a journal says happened.

    Attributes:
        roles: Slot id → role after its last done action (None: stopped).
        pids: Slot id → identity of the server process its last action started (``started`` or ``done``).
        unfinished: Records of actions that began and never ended.
        done: How many actions finished.
        slots: Slot id → the spec (``slot`` of its expand's ``begin`` record) of each worker a regroup formed
            and no later record dissolved, in the order they were formed.
        dissolved: Slots whose GPUs a regroup took (a ``done`` record with ``dissolved``), not formed again since.
    """

    roles: dict[str, str | None] = field(default_factory=dict)
    pids: dict[str, ProcessIdentity] = field(default_factory=dict)
    slots: dict[str, dict[str, Any]] = field(default_factory=dict)
    dissolved: set[str] = field(default_factory=set)
    unfinished: list[dict[str, Any]] = field(default_factory=list)
    done: int = 0


class Journal:
    """A JSON-lines file of a header and ``begin``/``started``/``done``/``failed`` records, locked while open.

    Args:
        path: The journal file (created 0600 if missing; its folder too).
        cluster_id: Claim the journal for this cluster now (see :meth:`claim`); None leaves it to the caller.

    Attributes:
        cluster_id: The cluster the journal belongs to, once claimed or read from its header.
        skipped: How many malformed records were skipped when it was opened.
        torn: Whether a torn last record (a crash mid-write) was cut off when it was opened.

    Raises:
        JournalLockedError: Another controller has it open.
        ForeignJournalError: It belongs to another cluster.
        JournalError: It is not a private regular file of this user.
    """

    def __init__(self, path: str | Path, *, cluster_id: str | None = None) -> None:
        """Open (or create) the journal, lock it, repair a torn tail and read its records."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = _open_private(self.path)
        try:
            _lock(self._fd, self.path)
            records, self.skipped, self.torn = _load(self._fd, self.path)
            headers = [r for r in records if "journal" in r]
            self.cluster_id: str | None = str(headers[0]["cluster_id"]) if headers else None
            self._actions = [r for r in records if "journal" not in r]
            self._seq = max((int(r["seq"]) for r in records), default=-1) + 1
            if cluster_id is not None:
                self.claim(cluster_id)
        except BaseException:
            self.close()  # a refused journal stays unlocked for the controller it belongs to
            raise

    # -- lifecycle ------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the lock and the file (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> Self:
        """The journal itself; :meth:`close` on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Release the lock and the file."""
        self.close()

    def claim(self, cluster_id: str) -> None:
        """Bind the journal to ``cluster_id``: write the header if it has none, refuse another cluster's.

        Raises:
            ForeignJournalError: The header names another cluster.
            JournalError: The journal has records but no header (not written by this version).
        """
        if not cluster_id or len(cluster_id) > 200 or not cluster_id.isprintable():
            raise JournalError(f"journal {self.path}: cluster id must be 1-200 printable characters")
        if self.cluster_id == cluster_id:
            return
        if self.cluster_id is not None:
            raise ForeignJournalError(
                f"journal {self.path} belongs to cluster {self.cluster_id!r}, not {cluster_id!r}:"
                " give each cluster its own journal"
            )
        if self._actions:
            raise JournalError(
                f"journal {self.path} has {len(self._actions)} records but no cluster id (written by an older"
                " pearl_sched, or not a journal): move it aside to start a new one"
            )
        self._append({"seq": self._next_seq(), "journal": FORMAT, "cluster_id": cluster_id, "at": time.time()})
        self.cluster_id = cluster_id

    # -- records --------------------------------------------------------------------------------------------
    def write(self, phase: str, action: Action, plan: str, extra: Mapping[str, Any] | None = None) -> None:
        """Append one record and fsync it."""
        if phase not in PHASES:
            raise ValueError(f"journal phase must be one of {PHASES}, not {phase!r}")
        clash = sorted(set(extra or {}) & {"seq", "at", "phase", "plan", "action", "journal", "cluster_id"})
        if clash:
            raise ValueError(f"journal record extras may not set {clash}")
        record = {
            "seq": self._next_seq(),
            "at": time.time(),
            "phase": phase,
            "plan": plan,
            "action": action.model_dump(mode="json"),
            **(extra or {}),
        }
        self._append(record)
        self._actions.append(record)

    def replay(self) -> Replay:
        """The roles, server pids and unfinished actions the records describe."""
        out = Replay()
        open_: dict[tuple[str, str], dict[str, Any]] = {}
        for record in self._actions:
            action = record["action"]
            key = (record["plan"], action["worker_id"])
            if record["phase"] == "begin":
                open_[key] = record
                if isinstance(record.get("slot"), dict):  # a worker a regroup forms
                    out.slots[action["worker_id"]] = record["slot"]
                    out.dissolved.discard(action["worker_id"])
                continue
            if record["phase"] == "started":  # a server the action started, before it ended
                identity = ProcessIdentity.from_record(record)
                if identity is not None:
                    out.pids[action["worker_id"]] = identity
                continue
            open_.pop(key, None)
            if record["phase"] == "done" and record.get("dissolved") is True:
                out.slots.pop(action["worker_id"], None)
                out.dissolved.add(action["worker_id"])
            if record["phase"] == "done":
                out.done += 1
                out.roles[action["worker_id"]] = action.get("to_role")
                identity = ProcessIdentity.from_record(record)
                if identity is not None:
                    out.pids[action["worker_id"]] = identity
                else:
                    out.pids.pop(action["worker_id"], None)
        out.unfinished = list(open_.values())
        return out

    def _next_seq(self) -> int:
        seq, self._seq = self._seq, self._seq + 1
        return seq

    def _append(self, record: Mapping[str, Any]) -> None:
        if self._fd is None:
            raise JournalError(f"journal {self.path} is closed")
        data = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        written = 0
        while written < len(data):
            written += os.write(self._fd, data[written:])
        os.fsync(self._fd)


def _open_private(path: Path) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise JournalError(f"cannot open journal {path}: {why}") from None
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "it is not a regular file"
    elif info.st_uid != os.geteuid():
        problem = f"it is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})"
    elif info.st_mode & 0o022:
        problem = f"it is writable by group or others (mode {stat.S_IMODE(info.st_mode):o}): chmod 600 it"
    if problem is not None:
        os.close(fd)
        raise JournalError(f"refusing journal {path}: {problem}; a controller trusts the pids it holds")
    return fd


def _lock(fd: int, path: Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_holder(fd)
        who = f" (pid {holder})" if holder is not None else ""
        raise JournalLockedError(
            f"journal {path} is in use by another controller{who}: two controllers on one journal would"
            " interleave their records; stop the other one or give this one its own journal"
        ) from None


def _lock_holder(fd: int) -> int | None:
    """The pid holding a ``flock`` on ``fd``'s file, from /proc/locks (Linux); None when unknown."""
    info = os.fstat(fd)
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if fields[1] == "FLOCK" and int(fields[5].rsplit(":", 1)[1]) == info.st_ino:
                return int(fields[4])
    return None


def _load(fd: int, path: Path) -> tuple[list[dict[str, Any]], int, bool]:
    """Read the records, repairing a torn tail; returns (valid records, how many skipped, whether torn)."""
    size = os.fstat(fd).st_size
    data = os.pread(fd, size, 0) if size else b""
    torn = False
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        if _valid(_parse(data[cut:])):  # a whole record that lost only its newline
            os.write(fd, b"\n")
        else:
            os.ftruncate(fd, cut)
            os.fsync(fd)
            logger.warning(
                "journal %s: cut off a torn last record (%d bytes, a crash mid-write); its action counts as unfinished",
                path,
                size - cut,
            )
            data, torn = data[:cut], True
    records, bad = [], []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        record = _parse(line)
        if _valid(record):
            assert record is not None
            records.append(record)
        else:
            bad.append(number)
    if bad:
        shown = ", ".join(map(str, bad[:10])) + (", …" if len(bad) > 10 else "")
        logger.warning(
            "journal %s: skipped %d malformed record(s) at line(s) %s; their actions are unknown and their slots"
            " are re-observed only if a valid record left them unfinished",
            path,
            len(bad),
            shown,
        )
    return records, len(bad), torn


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _valid(record: dict[str, Any] | None) -> bool:
    if record is None or not isinstance(record.get("seq"), int) or isinstance(record.get("seq"), bool):
        return False
    if "journal" in record:
        return isinstance(record.get("cluster_id"), str)
    action = record.get("action")
    return (
        record.get("phase") in PHASES
        and isinstance(record.get("plan"), str)
        and isinstance(action, dict)
        and isinstance(action.get("worker_id"), str)
        and (action.get("to_role") is None or isinstance(action.get("to_role"), str))
    )
