"""Coding-agent rollout batches from logged SWE-bench agent runs (``../shared/data/agentic-swe``, PROVENANCE.md there).

One row per LLM call, in the columns of ``agentic_turns.csv``. Sources (``trajectories`` in a scenario):

* ``swe-deepseek``: mini-swe-agent with deepseek-chat / deepseek-reasoner on SWE-bench Lite (MIT; 201
  trajectories, 77 calls median, final contexts 30k median / 52k p90). Per-call tool latency is logged
  (``tool_latency_s``: docker exec + agent overhead, median 0.26 s).
* ``swe-gemini``: mini-swe-agent with Gemini 3 Pro on SWE-bench Verified (MIT; 500 trajectories, 36 calls median).
  Only start-to-start gaps are logged (LLM and tool time together), so the environment time after a call is
  drawn as in :mod:`~pearl_sched.sim.workload` (Normal(mean, σ) clipped at zero, the scenario's ``env_*``).
* ``swe-mini``: both of the above.
* ``claude-code``: Claude Code sessions on SWE-rebench (213 trajectories, untruncated tool outputs; tool latency
  logged). Its file is **GPL-2.0**: it is read from the shared data folder at run time and no row of it is copied
  into this repository.

A trajectory's turn ``k`` appends ``new_input_tokens(k)`` (the whole first prompt at ``k = 0``), generates
``output_tokens(k)`` (the visible message as it stays in the history; hidden reasoning is not in it) and is followed
by ``tool_latency_s(k)`` of environment time. A trajectory stops when its context reaches the scenario's maximum
length, as in :class:`~pearl_sched.sim.workload.AgenticTurns`, whose ``sample`` signature this shares.

A file without the needed columns is refused whole (:class:`~pearl_sched.sim.workload.WorkloadDataError`). A
trajectory with an impossible value — non-numeric or negative tokens or seconds, an empty first prompt, a turn index
out of order — is refused with its file and line: left out of the batches, logged, and listed in ``refused``
(``strict=True`` raises instead). The deepseek runs have 5 calls whose logged tool latency is negative (timestamps
out of order), so 5 of their trajectories are refused.
"""

from __future__ import annotations

import csv
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pearl_sched.sim.rollout import TrajectorySpec, Turn, environment_times
from pearl_sched.sim.workload import WorkloadDataError

logger = logging.getLogger(__name__)
SWE_SOURCES: dict[str, tuple[str, tuple[str, ...]]] = {
    "swe-deepseek": ("swe_agent_turns.csv", ("msa-deepseek-swebench-lite",)),
    "swe-gemini": ("swe_agent_turns.csv", ("msa-gemini3pro-swebench-verified",)),
    "swe-mini": ("swe_agent_turns.csv", ("msa-deepseek-swebench-lite", "msa-gemini3pro-swebench-verified")),
    "claude-code": ("claude_code_turns_GPL2.csv", ("agentcgroup-claude-code-swe-rebench",)),
}
"""Source name → (file under ``agentic-swe``, values of its ``source`` column)."""

REQUIRED_COLUMNS = (
    "source",
    "trajectory_id",
    "turn_index",
    "prompt_tokens",
    "output_tokens",
    "new_input_tokens",
    "tool_latency_s",
)


@dataclass(frozen=True)
class _Trajectory:
    appended: tuple[int, ...]  # per turn; the first is the whole prompt
    generated: tuple[int, ...]
    tool_s: tuple[float, ...]  # per turn, NaN where not logged


def _count(value: str, column: str, where: str) -> int:
    try:
        number = float(value)
    except ValueError:
        raise WorkloadDataError(f"{where}: {column}={value!r} is not a number") from None
    if not math.isfinite(number) or number < 0 or number != int(number):
        raise WorkloadDataError(f"{where}: {column}={value!r} is not a non-negative whole number of tokens")
    return int(number)


def _seconds(value: str, column: str, where: str) -> float:
    if value.strip() == "":
        return math.nan
    try:
        number = float(value)
    except ValueError:
        raise WorkloadDataError(f"{where}: {column}={value!r} is not a number of seconds") from None
    if not math.isfinite(number) or number < 0:
        raise WorkloadDataError(f"{where}: {column}={value!r} is not a non-negative number of seconds")
    return number


@dataclass(frozen=True)
class CodingAgentTurns:
    """Logged coding-agent trajectories a batch is drawn from."""

    source: str
    trajectories: tuple[_Trajectory, ...]
    refused: tuple[str, ...] = ()

    @classmethod
    def load(cls, folder: str | Path, source: str, *, strict: bool = False) -> CodingAgentTurns:
        """Read the trajectories of ``source`` (one of :data:`SWE_SOURCES`) from the ``agentic-swe`` folder.

        Raises:
            WorkloadDataError: unknown source, unreadable file, missing column, no usable trajectory, or (``strict``)
                any impossible value; the message names the file and line.
        """
        if source not in SWE_SOURCES:
            raise WorkloadDataError(f"unknown coding-agent source {source!r}; known: {', '.join(SWE_SOURCES)}")
        name, wanted = SWE_SOURCES[source]
        path = Path(folder) / name
        try:
            handle = path.open(newline="")
        except OSError as exc:
            raise WorkloadDataError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        calls: dict[str, list[tuple[int, int, int, int, float, str]]] = {}
        refused: dict[str, str] = {}
        with handle:
            reader = csv.DictReader(handle)
            missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                raise WorkloadDataError(f"{path}: missing column(s) {', '.join(missing)}")
            for line, row in enumerate(reader, start=2):
                if row["source"] not in wanted:
                    continue
                where = f"{path}:{line}"
                tid = row["trajectory_id"]
                try:
                    if any(row[c] is None for c in REQUIRED_COLUMNS):
                        raise WorkloadDataError(f"{where}: row has fewer fields than the header")
                    k = _count(row["turn_index"], "turn_index", where)
                    prompt = _count(row["prompt_tokens"], "prompt_tokens", where)
                    output = _count(row["output_tokens"], "output_tokens", where)
                    new = _count(row["new_input_tokens"], "new_input_tokens", where)
                    tool = _seconds(row["tool_latency_s"], "tool_latency_s", where)
                    if k == 0 and (prompt <= 0 or new <= 0):
                        raise WorkloadDataError(f"{where}: the first call of {tid} has an empty prompt")
                except WorkloadDataError as exc:
                    if strict:
                        raise
                    refused.setdefault(tid, str(exc))
                    continue
                calls.setdefault(tid, []).append((k, prompt, output, new, tool, where))
        out = []
        for tid, rows in calls.items():
            if tid in refused:
                continue
            rows.sort()
            gap = next(
                (f"{w}: {tid} turn_index {k} where {i} was expected" for i, (k, *_, w) in enumerate(rows) if k != i),
                None,
            )
            if gap is not None:
                if strict:
                    raise WorkloadDataError(gap)
                refused[tid] = gap
                continue
            out.append(
                _Trajectory(
                    appended=tuple(r[3] for r in rows),
                    generated=tuple(max(1, r[2]) for r in rows),
                    tool_s=tuple(r[4] for r in rows),
                )
            )
        for reason in refused.values():
            logger.warning("trajectory refused: %s", reason)
        if not out:
            raise WorkloadDataError(f"{path}: no usable trajectory of source {', '.join(wanted)}")
        return cls(source, tuple(out), tuple(refused.values()))

    @property
    def tool_latency_logged(self) -> float:
        """Share of turns (all but each trajectory's last) whose tool latency is logged."""
        between = [t for traj in self.trajectories for t in traj.tool_s[:-1]]
        return sum(not math.isnan(t) for t in between) / max(len(between), 1)

    def sample(
        self,
        count: int,
        *,
        env_mean_s: float,
        env_std_s: float,
        max_length: int,
        seed: int,
        output_scale: float = 1.0,
        group_size: int = 1,
    ) -> list[TrajectorySpec]:
        """``count`` trajectories, deterministic in ``seed``; output lengths × ``output_scale``.

        Environment time after a turn is its logged tool latency, or a Normal(``env_mean_s``, ``env_std_s``) draw
        clipped at zero where the source has none. With ``group_size`` > 1, consecutive runs of ``group_size``
        trajectories are one GRPO group sharing the first prompt of the group's first draw (the task), each with
        its own later turns (``TrajectorySpec.group``).
        """
        rng = np.random.default_rng(seed)
        eligible = [t for t in self.trajectories if t.appended[0] < max_length]
        if not eligible:
            raise WorkloadDataError(f"{self.source}: no first prompt fits max_length={max_length}")
        picks = rng.integers(0, len(eligible), count)
        out = []
        for j, pick in enumerate(picks):
            traj = eligible[int(pick)]
            prompt = eligible[int(picks[j - j % group_size])].appended[0]
            n = len(traj.generated)
            drawn = environment_times(rng, env_mean_s, env_std_s, n)
            turns: list[Turn] = []
            context = 0
            for k in range(n):
                appended = prompt if k == 0 else traj.appended[k]
                want = traj.generated[k] if output_scale == 1.0 else max(1, round(traj.generated[k] * output_scale))
                room = max_length - context - appended
                if room <= 0:
                    break
                produced = min(want, room)
                context += appended + produced
                last = k == n - 1 or produced < want
                env = traj.tool_s[k] if not math.isnan(traj.tool_s[k]) else float(drawn[k])
                turns.append(Turn(appended, produced, 0.0 if last else env))
                if last:
                    break
            out.append(TrajectorySpec(tuple(turns), group=j // group_size if group_size > 1 else -1))
        return out
