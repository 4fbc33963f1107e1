"""Knowing a process is ours before signalling it, and that a port is served by the process we launched.

A pid alone names a process only while it lives: after it exits the kernel hands the number to the next
process. So a server's pid is recorded with its start time and a digest of its command line
(:class:`ProcessIdentity`), and :func:`signal_group` signals a pid only when all three still match — a pid read
from a journal written hours ago never reaches ``killpg`` unless it is still the server we started.
:func:`owns_listening_port` tells whether a process (or one of its children) is the one listening on a port, so
a launcher does not take another process's ``/health`` answer for its server's.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

try:
    import psutil
except ImportError as exc:  # pragma: no cover - the sglang extra installs it
    from pearl_sched.errors import MissingExtraError

    raise MissingExtraError(exc.name or "psutil", "client") from exc

logger = logging.getLogger(__name__)

START_TIME_TOLERANCE_S = 1.0  # psutil derives start times from boot time + clock ticks; a re-read can differ slightly


def command_digest(argv: Sequence[str]) -> str:
    """SHA-256 of a command line: compared instead of the command itself, which may hold an API key."""
    return hashlib.sha256("\0".join(argv).encode()).hexdigest()


@dataclass(frozen=True)
class ProcessIdentity:
    """A pid with what tells it apart from a later process that reuses the number.

    Attributes:
        pid: The process id.
        started_at_s: Its start time (seconds since the epoch, as psutil reports it), or None if unknown.
        command_sha256: :func:`command_digest` of its command line, or None if unknown.
    """

    pid: int
    started_at_s: float | None
    command_sha256: str | None

    def to_record(self) -> dict[str, Any]:
        """The fields a journal record stores."""
        return {"pid": self.pid, "pid_started_at_s": self.started_at_s, "pid_command_sha256": self.command_sha256}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ProcessIdentity | None:
        """The identity in a journal record, or None when it has no usable pid."""
        pid = record.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
            return None
        started = record.get("pid_started_at_s")
        digest = record.get("pid_command_sha256")
        return cls(
            pid,
            float(started) if isinstance(started, int | float) and not isinstance(started, bool) else None,
            digest if isinstance(digest, str) else None,
        )


def identify(pid: int) -> ProcessIdentity | None:
    """The identity of the live process ``pid``, or None if there is none (or it cannot be read)."""
    try:
        process = psutil.Process(pid)
        return ProcessIdentity(pid, process.create_time(), command_digest(process.cmdline()))
    except (psutil.Error, OSError):
        return None


def why_not_ours(identity: ProcessIdentity) -> str | None:
    """None when ``identity`` still names the same live process; otherwise the reason it does not."""
    if identity.started_at_s is None or identity.command_sha256 is None:
        return f"pid {identity.pid} was recorded without its start time and command line, so it cannot be verified"
    now = identify(identity.pid)
    if now is None:
        return f"pid {identity.pid} is not running"
    assert now.started_at_s is not None
    if abs(now.started_at_s - identity.started_at_s) > START_TIME_TOLERANCE_S:
        return f"pid {identity.pid} started at {now.started_at_s:.2f}, not at {identity.started_at_s:.2f}: reused"
    if now.command_sha256 != identity.command_sha256:
        return f"pid {identity.pid} runs another command line than the server that was started"
    return None


def signal_group(identity: ProcessIdentity, sig: int = signal.SIGTERM) -> bool:
    """Send ``sig`` to the process group led by ``identity.pid`` if, and only if, it is still that process.

    Returns:
        True when the group was signalled; False (with a warning logged) when the pid is not verified as ours.
    """
    reason = why_not_ours(identity)
    if reason is None:
        try:
            if os.getpgid(identity.pid) != identity.pid:
                reason = f"pid {identity.pid} no longer leads its own process group"
        except ProcessLookupError:
            reason = f"pid {identity.pid} is not running"
    if reason is not None:
        logger.warning("not signalling pid %d: %s", identity.pid, reason)
        return False
    try:
        os.killpg(identity.pid, sig)
    except (ProcessLookupError, PermissionError) as exc:
        logger.warning("could not signal pid %d: %s", identity.pid, exc)
        return False
    return True


def owns_listening_port(pid: int, port: int) -> bool:
    """Whether ``pid`` or one of its descendants listens on TCP ``port``."""
    try:
        root = psutil.Process(pid)
        family = [root, *root.children(recursive=True)]
    except (psutil.Error, OSError):
        return False
    for process in family:
        try:
            connections = process.net_connections(kind="tcp")
        except (psutil.Error, OSError):
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in connections):
            return True
    return False
