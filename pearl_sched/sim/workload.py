"""Rollout batches drawn from logged agentic trajectories (``../shared/data/agentic``).

Two sources, both real (PROVENANCE.md there):

* ``tau-bench``: whole trajectories of a GPT-4o tool-calling agent — the number of turns, the first prompt and
  the tokens each tool observation appends, and the tokens generated per turn (short: about 85).
* ``tau-bench+mooncake-outputs``: tau-bench's turn structure and observations, with the tokens generated per
  turn drawn from the Mooncake conversation trace's output lengths (mean about 356, p90 about 620). PEARL's
  SWE-bench runs have Qwen3 reasoning at every turn, far longer than GPT-4o's tool calls; no public SWE-bench
  trace with Qwen3 output lengths ships with the data, so this is the closest real stand-in, and the scenario
  file says it uses it.

Environment time per turn is Normal(mean, σ) clipped at zero, as RollArt models it (the tau-bench log has no
latencies). A trajectory stops when its context reaches the scenario's maximum length; the last turn's
output is cut there. Every batch is a pure function of its seed, so all policies see identical work.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pearl_sched.errors import PearlSchedError
from pearl_sched.sim.rollout import TrajectorySpec, Turn, environment_times
from pearl_sched.state import turn_quantiles

SOURCES = ("tau-bench", "tau-bench+mooncake-outputs")


class WorkloadDataError(PearlSchedError, ValueError):
    """The agentic trace cannot be read or lacks what a source needs."""


@dataclass(frozen=True)
class AgenticTurn:
    """One row of ``agentic_turns.csv``: a turn of a logged trajectory."""

    source: str
    trajectory_id: str
    turn_index: int
    prompt_tokens: int  # the whole context the turn was prompted with
    output_tokens: int
    new_input_tokens: int  # what the turn appended: the first prompt, then each tool observation


def read_agentic_turns(path: str | Path) -> tuple[AgenticTurn, ...]:
    """Every row of ``agentic_turns.csv``, in file order; one clear line if the file is unreadable or malformed."""
    path = Path(path)
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as exc:
        raise WorkloadDataError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        return tuple(
            AgenticTurn(
                source=row["source"],
                trajectory_id=row["trajectory_id"],
                turn_index=int(row["turn_index"]),
                prompt_tokens=int(row["prompt_tokens"]),
                output_tokens=int(row["output_tokens"]),
                new_input_tokens=int(row["new_input_tokens"]),
            )
            for row in rows
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise WorkloadDataError(f"{path}: malformed row ({exc})") from None


def tau_bench_trajectories(rows: tuple[AgenticTurn, ...]) -> dict[str, list[AgenticTurn]]:
    """The tau-bench rows grouped by trajectory (first seen first), each in turn order."""
    trajectories: dict[str, list[AgenticTurn]] = {}
    for row in rows:
        if row.source.startswith("tau-bench"):
            trajectories.setdefault(row.trajectory_id, []).append(row)
    for turns in trajectories.values():
        turns.sort(key=lambda r: r.turn_index)
    return trajectories


@dataclass(frozen=True)
class _Shape:
    prompt: int
    appended: tuple[int, ...]  # per turn after the first
    generated: tuple[int, ...]


@dataclass(frozen=True)
class AgenticTurns:
    """The logged trajectories a batch is drawn from."""

    source: str
    shapes: tuple[_Shape, ...]
    outputs: tuple[int, ...]  # the per-turn output lengths generated tokens are drawn from

    @classmethod
    def load(cls, path: str | Path, source: str = "tau-bench") -> AgenticTurns:
        """Read ``agentic_turns.csv`` for one of :data:`SOURCES`."""
        if source not in SOURCES:
            raise WorkloadDataError(f"unknown trajectory source {source!r}; known: {', '.join(SOURCES)}")
        path = Path(path)
        rows = read_agentic_turns(path)
        mooncake = [r.output_tokens for r in rows if r.source.startswith("mooncake")]
        shapes = [
            _Shape(
                prompt=turns[0].prompt_tokens,
                appended=tuple(r.new_input_tokens for r in turns[1:]),
                generated=tuple(max(1, r.output_tokens) for r in turns),
            )
            for turns in tau_bench_trajectories(rows).values()
        ]
        if not shapes:
            raise WorkloadDataError(f"{path}: no tau-bench trajectories")
        if source == "tau-bench+mooncake-outputs" and not mooncake:
            raise WorkloadDataError(f"{path}: no Mooncake rows to draw output lengths from")
        outputs = tuple(max(1, n) for n in mooncake) if source != "tau-bench" else ()
        return cls(source, tuple(shapes), outputs)

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

        With ``group_size`` > 1, consecutive runs of ``group_size`` trajectories are one GRPO group: they sample
        the same task, so they share the first prompt of the group's first draw (``TrajectorySpec.group``); the
        turns after it are each member's own draw (a group's samples diverge from their first response on).
        """
        rng = np.random.default_rng(seed)
        picks = rng.integers(0, len(self.shapes), count)
        out = []
        for j, pick in enumerate(picks):
            shape = self.shapes[int(pick)]
            prompt = self.shapes[int(picks[j - j % group_size])].prompt
            n = len(shape.generated)
            if self.outputs:
                generated = [self.outputs[int(i)] for i in rng.integers(0, len(self.outputs), n)]
            else:
                generated = list(shape.generated)
            if output_scale != 1.0:
                generated = [max(1, round(g * output_scale)) for g in generated]
            envs = environment_times(rng, env_mean_s, env_std_s, n)
            turns: list[Turn] = []
            context = 0
            for k in range(n):
                appended = prompt if k == 0 else shape.appended[k - 1]
                room = max_length - context - appended
                if room <= 0:
                    break
                produced = min(generated[k], room)
                context += appended + produced
                last = k == n - 1 or produced < generated[k]
                turns.append(Turn(appended, produced, 0.0 if last else float(envs[k])))
                if last:
                    break
            out.append(TrajectorySpec(tuple(turns), group=j // group_size if group_size > 1 else -1))
        return out


@dataclass(frozen=True)
class BatchStats:
    """What an orchestrator logs about a batch, in the planner's terms."""

    trajectories: int
    turns_p90: float
    prompt_tokens: float
    appended_tokens: float
    generated_tokens: float
    mean_context_tokens: float
    max_context_tokens: float
    final_tokens: int  # Σ final context lengths: the tokens a training step processes
    turn_quantiles: tuple[float, ...] = ()  # turns per trajectory every 5% (state.turn_quantiles)


def batch_stats(batch: list[TrajectorySpec]) -> BatchStats:
    """Means of a batch, as the orchestrator's logs give them to ``plan()``."""
    turns = [len(t.turns) for t in batch]
    appended = [u.appended_tokens for t in batch for u in t.turns[1:]]
    generated = [u.generated_tokens for t in batch for u in t.turns]
    finals = [sum(u.appended_tokens + u.generated_tokens for u in t.turns) for t in batch]
    prompt = statistics.fmean(t.turns[0].appended_tokens for t in batch)
    return BatchStats(
        trajectories=len(batch),
        turns_p90=float(np.quantile(turns, 0.9)),
        prompt_tokens=prompt,
        appended_tokens=statistics.fmean(appended) if appended else 0.0,
        generated_tokens=statistics.fmean(generated),
        mean_context_tokens=statistics.fmean(finals) / 2 + prompt / 2,
        max_context_tokens=float(max(finals)),
        final_tokens=int(sum(finals)),
        turn_quantiles=turn_quantiles(turns),
    )
