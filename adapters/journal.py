"""An append-only journal of transition actions, so a controller that dies mid-plan resumes without repeating.

Every action is written before it runs (``begin``) and after (``done`` or ``failed``), one JSON object per
line, flushed and fsync'd. On restart, :meth:`Journal.replay` gives the slots' roles as the done actions left
them and the actions that began but never ended (their slots must be re-observed before anything else).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pearl_sched.plans import Action


@dataclass
class Replay:
    """What a journal says happened."""

    roles: dict[str, str | None] = field(default_factory=dict)  # slot → role after its last done action
    pids: dict[str, int] = field(default_factory=dict)  # slot → pid of the server a done action started
    unfinished: list[dict[str, Any]] = field(default_factory=list)  # begun, never done or failed
    done: int = 0


class Journal:
    """A JSON-lines file of ``begin``/``done``/``failed`` records."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._seq = sum(1 for _ in self._records())

    def _records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:  # a line cut short by a crash: the action it describes is unfinished
                continue
        return out

    def write(self, phase: str, action: Action, plan: str, extra: Mapping[str, Any] | None = None) -> None:
        record = {
            "seq": self._seq,
            "at": time.time(),
            "phase": phase,
            "plan": plan,
            "action": action.model_dump(mode="json"),
            **(extra or {}),
        }
        self._seq += 1
        with self.path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def replay(self) -> Replay:
        out = Replay()
        open_: dict[tuple[str, str], dict[str, Any]] = {}
        for record in self._records():
            action = record["action"]
            key = (record["plan"], action["worker_id"])
            if record["phase"] == "begin":
                open_[key] = record
            else:
                open_.pop(key, None)
                if record["phase"] == "done":
                    out.done += 1
                    out.roles[action["worker_id"]] = action["to_role"]
                    if "pid" in record:
                        out.pids[action["worker_id"]] = int(record["pid"])
        out.unfinished = list(open_.values())
        return out
