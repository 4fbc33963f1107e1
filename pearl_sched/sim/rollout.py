"""A discrete-event simulation of one multi-turn rollout batch on a fixed pool of workers.

Entities: trajectories (turns of prefill → decode → environment), workers (prefill, decode or colocated), a
KV link per prefill worker. Events: a prefill batch ends, a KV transfer ends, a decode sequence finishes its
turn, an environment call returns. Decode is never simulated per token: each decode worker keeps a
*virtual iteration clock* that advances at 1/τ(n) iterations per second, with τ(n) the step time of its
current batch; a sequence finishes at a known iteration index, so the next completion is one heap lookup and
an arrival or departure only re-rates the clock (O(log n) per event).

Scheduling, as SGLang does by default: a prefill worker batches queued prefills up to ``chunk_tokens`` new
tokens; a colocated worker runs prefill batches first and pauses its decode batch meanwhile (the interference
PEARL's colocated model folds into T_over); a disaggregated prefill sends the appended tokens' KV to the least
loaded decode worker with room, over its link at ``link_bytes_per_s`` (first come, first served); a decode
worker holds at most ``kv_capacity_tokens`` of context, and a trajectory that finds no room waits for it.

Every trajectory started finishes: the result says how many did (``finished``), and the tests hold it to
all of them.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from pearl_sched.sim.steptimes import StepTimes
from pearl_sched.state import Mode


@dataclass(frozen=True)
class Turn:
    """One turn: tokens appended before it (the prompt on turn 0), tokens generated, environment seconds after."""

    appended_tokens: int
    generated_tokens: int
    env_after_s: float


@dataclass(frozen=True)
class TrajectorySpec:
    """A trajectory's turns, fixed in advance so policies are compared on identical work."""

    turns: tuple[Turn, ...]

    @property
    def generated_tokens(self) -> int:
        return sum(t.generated_tokens for t in self.turns)


@dataclass(frozen=True)
class Pool:
    """A fixed rollout configuration: the mode, worker counts and what each worker is like."""

    mode: Mode
    step_times: StepTimes
    prefill_workers: int = 0
    decode_workers: int = 0
    colocated_workers: int = 0
    kv_capacity_tokens: float = float("inf")
    kv_bytes_per_token: float = 0.0
    link_bytes_per_s: float = float("inf")
    chunk_tokens: int = 8192

    def __post_init__(self) -> None:
        if self.mode is Mode.COLOCATED and (self.colocated_workers < 1 or self.prefill_workers or self.decode_workers):
            raise ValueError("a colocated pool has ≥1 colocated worker and no prefill or decode workers")
        if self.mode is Mode.DISAGGREGATED and (
            self.prefill_workers < 1 or self.decode_workers < 1 or self.colocated_workers
        ):
            raise ValueError("a disaggregated pool has ≥1 prefill and ≥1 decode worker and no colocated ones")
        if self.chunk_tokens < 1:
            raise ValueError("chunk_tokens must be ≥ 1")


@dataclass(frozen=True)
class BatchResult:
    """What happened to the batch."""

    makespan_s: float
    finished: int
    trajectories: int
    generated_tokens: int
    prefill_tokens: int
    finish_times_s: tuple[float, ...]
    decode_busy_s: float
    decoding_trajectory_s: float
    events: int

    @property
    def throughput_tokens_per_s(self) -> float:
        return self.generated_tokens / self.makespan_s if self.makespan_s > 0 else 0.0

    @property
    def bubble_ratio(self) -> float:
        """Measured θ = (1 − f)/f, f the mean share of trajectories in their decode phase (PEARL's input)."""
        f = self.decoding_trajectory_s / (self.trajectories * self.makespan_s) if self.makespan_s > 0 else 1.0
        return (1 - f) / f if f > 0 else float("inf")


class _Kind(Enum):
    PREFILL_DONE = 0
    TRANSFER_DONE = 1
    DECODE_DONE = 2
    ENV_DONE = 3
    POOL_CHANGE = 4


@dataclass(frozen=True)
class PoolChange:
    """Workers joining or leaving mid-batch (preemption, borrowing, returning).

    ``remove_*`` name workers by their index in the pool (joined workers get the next indices). A removed
    decode worker's sequences keep the tokens generated so far and resubmit their whole prefix to a prefill
    worker (a re-prefill), then decode the rest of their turn elsewhere; a removed prefill worker's queue and
    running batch go to the others. KV transfers already on the wire complete.
    """

    at_s: float
    add_prefill: int = 0
    add_decode: int = 0
    add_colocated: int = 0
    remove_prefill: tuple[int, ...] = ()
    remove_decode: tuple[int, ...] = ()
    remove_colocated: tuple[int, ...] = ()


@dataclass
class _Trajectory:
    spec: TrajectorySpec
    index: int
    turn: int = 0
    context: int = 0
    remaining: int | None = None  # tokens still to generate this turn after an interruption


@dataclass
class _Decoder:
    """A worker's decode side with its virtual iteration clock."""

    steps: StepTimes
    kv_capacity: float
    active: dict[int, float] = field(default_factory=dict)  # trajectory → finishing iteration
    finishing: list[tuple[float, int]] = field(default_factory=list)  # heap of (iteration, trajectory)
    context_total: float = 0.0
    kv_used: float = 0.0
    clock: float = 0.0  # iterations done (continuous)
    since: float = 0.0
    tau: float = 0.0
    paused: bool = False
    version: int = 0
    busy_s: float = 0.0
    occupancy_s: float = 0.0  # ∫ (sequences in the decode phase) dt, paused or not
    alive: bool = True
    charge: dict[int, tuple[int, float, float]] = field(default_factory=dict)  # tokens, KV, context share

    def advance(self, now: float) -> None:
        self.occupancy_s += len(self.active) * (now - self.since)
        if self.active and not self.paused and self.tau > 0:
            self.clock += (now - self.since) / self.tau
            self.busy_s += now - self.since
        self.since = now

    def rerate(self) -> None:
        n = len(self.active)
        self.tau = self.steps.decode_s(n, self.context_total / n) if n else 0.0


_Job = tuple[int, int, int, bool]  # trajectory, new tokens, cached tokens, resubmitted prefix


@dataclass
class _Prefiller:
    queue: deque[_Job] = field(default_factory=deque)
    running: list[_Job] | None = None
    load_tokens: int = 0  # queued and running new tokens
    link_free_at: float = 0.0
    alive: bool = True
    version: int = 0


class RolloutSimulation:
    """Simulate one batch of trajectories on a pool; :meth:`run` returns a :class:`BatchResult`."""

    def __init__(self, pool: Pool, trajectories: Sequence[TrajectorySpec], changes: Sequence[PoolChange] = ()) -> None:
        if not trajectories:
            raise ValueError("a batch needs at least one trajectory")
        self.pool = pool
        self.trajectories = [_Trajectory(spec, i) for i, spec in enumerate(trajectories)]
        colocated = pool.mode is Mode.COLOCATED
        n_prefill = pool.colocated_workers if colocated else pool.prefill_workers
        n_decode = pool.colocated_workers if colocated else pool.decode_workers
        self.prefillers = [_Prefiller() for _ in range(n_prefill)]
        self.decoders = [_Decoder(pool.step_times, pool.kv_capacity_tokens) for _ in range(n_decode)]
        self.events: list[tuple[float, int, _Kind, int, int]] = []
        self._seq = itertools.count()
        self.now = 0.0
        self.waiting_for_kv: deque[int] = deque()
        self.finish_times: list[float] = []
        self.generated = 0
        self.prefilled = 0
        self.handled = 0
        self.changes = list(changes)
        self._started = False
        self.parked: list[_Job] = []  # prefill jobs waiting for a prefill worker to join
        for i, change in enumerate(self.changes):
            self._push(change.at_s, _Kind.POOL_CHANGE, i)

    # -- event plumbing -----------------------------------------------------------------------------------
    def _push(self, at: float, kind: _Kind, who: int, version: int = 0) -> None:
        heapq.heappush(self.events, (at, next(self._seq), kind, who, version))

    def run(self) -> BatchResult:
        """Run the batch to completion."""
        self.run_until(math.inf)
        if self.unfinished:
            alive = self.alive()
            missing = "prefill" if not alive[0] else "decode"
            raise ValueError(
                f"{self.unfinished} trajectories cannot finish: the pool was left with no {missing} worker"
            )
        return self.result()

    def run_until(self, t_s: float) -> bool:
        """Handle every event up to ``t_s``; True while the batch still has work (the clock stops at ``t_s``)."""
        if not self._started:
            self._started = True
            for t in self.trajectories:
                self._enqueue_prefill(t.index)
        while self.events and self.events[0][0] <= t_s:
            at, _, kind, who, version = heapq.heappop(self.events)
            self.now = at
            self.handled += 1
            if kind is _Kind.PREFILL_DONE:
                if version == self.prefillers[who].version:
                    self._prefill_done(who)
            elif kind is _Kind.TRANSFER_DONE:
                self._admit_decode(who)
            elif kind is _Kind.DECODE_DONE:
                if version == self.decoders[who].version:
                    self._decode_done(who)
            elif kind is _Kind.POOL_CHANGE:
                self._change(self.changes[who])
            else:
                self._enqueue_prefill(who)
        if len(self.finish_times) < len(self.trajectories) and math.isfinite(t_s):
            self.now = max(self.now, t_s)
            return True
        return len(self.finish_times) < len(self.trajectories)

    def apply(self, change: PoolChange) -> None:
        """Apply a pool change now (the clock is where :meth:`run_until` left it)."""
        self._change(change)

    @property
    def unfinished(self) -> int:
        """Trajectories not finished yet."""
        return len(self.trajectories) - len(self.finish_times)

    def alive(self) -> tuple[list[int], list[int]]:
        """Indices of the prefill-side and decode-side workers still in the pool."""
        return (
            [w for w, p in enumerate(self.prefillers) if p.alive],
            [w for w, d in enumerate(self.decoders) if d.alive],
        )

    def result(self) -> BatchResult:
        """What happened so far (the whole batch once :meth:`run_until` returned False)."""
        for d in self.decoders:
            if d.alive:
                d.advance(self.now)
        return BatchResult(
            makespan_s=max(self.finish_times, default=0.0),
            finished=len(self.finish_times),
            trajectories=len(self.trajectories),
            generated_tokens=self.generated,
            prefill_tokens=self.prefilled,
            finish_times_s=tuple(self.finish_times),
            decode_busy_s=sum(d.busy_s for d in self.decoders),
            decoding_trajectory_s=sum(d.occupancy_s for d in self.decoders),
            events=self.handled,
        )

    # -- prefill --------------------------------------------------------------------------------------------
    def _enqueue_prefill(self, index: int) -> None:
        t = self.trajectories[index]
        self._queue_job((index, t.spec.turns[t.turn].appended_tokens, t.context, False))

    def _queue_job(self, job: _Job) -> None:
        alive = [w for w, p in enumerate(self.prefillers) if p.alive]
        if not alive:  # every prefill worker left: wait for one to join
            self.parked.append(job)
            return
        if self.pool.mode is Mode.COLOCATED:  # the router balances running requests; prefill follows
            worker = min(alive, key=lambda w: (len(self.decoders[w].active) + len(self.prefillers[w].queue), w))
        else:
            worker = min(alive, key=lambda w: (self.prefillers[w].load_tokens, w))
        p = self.prefillers[worker]
        p.queue.append(job)
        p.load_tokens += job[1]
        self._start_prefill(worker)

    def _start_prefill(self, worker: int) -> None:
        p = self.prefillers[worker]
        if p.running is not None or not p.queue:
            return
        batch: list[_Job] = []
        tokens = cached = 0
        while p.queue and (not batch or tokens + p.queue[0][1] <= self.pool.chunk_tokens):
            job = p.queue.popleft()
            batch.append(job)
            tokens += job[1]
            cached += job[2]
        p.running = batch
        if self.pool.mode is Mode.COLOCATED:  # prefill first: the worker's decode batch waits
            d = self.decoders[worker]
            d.advance(self.now)
            d.paused = True
            d.version += 1
        duration = self.pool.step_times.prefill_s(tokens, len(batch), cached / len(batch))
        self._push(self.now + duration, _Kind.PREFILL_DONE, worker, p.version)

    def _prefill_done(self, worker: int) -> None:
        p = self.prefillers[worker]
        batch, p.running = p.running or [], None
        for index, new, _, resubmitted in batch:
            self.prefilled += new
            p.load_tokens -= new
            t = self.trajectories[index]
            if not resubmitted:  # a resubmitted prefix is already in the context
                t.context += new
            if self.pool.mode is Mode.COLOCATED:
                self._place(index, worker)
            else:
                size = new * self.pool.kv_bytes_per_token
                start = max(self.now, p.link_free_at)
                p.link_free_at = start + (size / self.pool.link_bytes_per_s if size else 0.0)
                self._push(p.link_free_at, _Kind.TRANSFER_DONE, index)
        if self.pool.mode is Mode.COLOCATED:
            d = self.decoders[worker]
            d.since = self.now
            d.paused = False
            self._reschedule(worker)
        self._start_prefill(worker)

    # -- decode ---------------------------------------------------------------------------------------------
    def _admit_decode(self, index: int) -> None:
        worker = self._room(index)
        if worker is None:
            self.waiting_for_kv.append(index)
        else:
            self._place(index, worker)

    def _room(self, index: int) -> int | None:
        """The least loaded decode worker with KV room for the trajectory's turn, or None."""
        t = self.trajectories[index]
        need = t.context + self._to_generate(t)
        room = [w for w, d in enumerate(self.decoders) if d.alive and d.kv_used + need <= d.kv_capacity]
        alive = [d for d in self.decoders if d.alive]
        if not room and alive and all(not d.active for d in alive):
            raise ValueError(f"trajectory {index} needs {need} KV tokens, more than a decode worker holds")
        return min(room, key=lambda w: (len(self.decoders[w].active), w)) if room else None

    @staticmethod
    def _to_generate(t: _Trajectory) -> int:
        return t.remaining if t.remaining is not None else t.spec.turns[t.turn].generated_tokens

    def _place(self, index: int, worker: int) -> None:
        t = self.trajectories[index]
        d = self.decoders[worker]
        d.advance(self.now)
        tokens = self._to_generate(t)
        finish = d.clock + tokens
        d.active[index] = finish
        heapq.heappush(d.finishing, (finish, index))
        charge = (tokens, float(t.context + tokens), t.context + tokens / 2)
        d.charge[index] = charge
        d.kv_used += charge[1]
        d.context_total += charge[2]
        self._reschedule(worker)

    def _reschedule(self, worker: int) -> None:
        d = self.decoders[worker]
        d.rerate()
        d.version += 1
        if d.active and not d.paused:
            finish = d.finishing[0][0]
            self._push(self.now + max(finish - d.clock, 0.0) * d.tau, _Kind.DECODE_DONE, worker, d.version)

    def _decode_done(self, worker: int) -> None:
        d = self.decoders[worker]
        d.advance(self.now)
        while d.finishing and d.finishing[0][0] <= d.clock + 1e-9:
            _, index = heapq.heappop(d.finishing)
            tokens, kv, share = d.charge.pop(index)
            del d.active[index]
            d.kv_used -= kv
            d.context_total -= share
            self._end_turn(index, tokens)
        if not d.active:
            d.context_total = d.kv_used = 0.0  # clear rounding residue
        self._reschedule(worker)
        self._admit_waiting()

    def _end_turn(self, index: int, tokens: int) -> None:
        t = self.trajectories[index]
        turn = t.spec.turns[t.turn]
        t.context += tokens
        self.generated += tokens
        t.remaining = None
        t.turn += 1
        if t.turn == len(t.spec.turns):
            self.finish_times.append(self.now)
        else:
            self._push(self.now + turn.env_after_s, _Kind.ENV_DONE, index)

    def _admit_waiting(self) -> None:
        while self.waiting_for_kv:  # freed memory: admit who waited, first come first served
            target = self._room(self.waiting_for_kv[0])
            if target is None:
                break
            self._place(self.waiting_for_kv.popleft(), target)

    # -- workers joining and leaving ------------------------------------------------------------------------
    def _change(self, change: PoolChange) -> None:
        colocated = self.pool.mode is Mode.COLOCATED
        if colocated and (change.add_prefill or change.add_decode or change.remove_prefill or change.remove_decode):
            raise ValueError("a colocated pool changes by colocated workers only")
        if not colocated and (change.add_colocated or change.remove_colocated):
            raise ValueError("a disaggregated pool changes by prefill and decode workers only")
        for _ in range(change.add_prefill + change.add_colocated):
            self.prefillers.append(_Prefiller())
        for _ in range(change.add_decode + change.add_colocated):
            self.decoders.append(_Decoder(self.pool.step_times, self.pool.kv_capacity_tokens, since=self.now))
        jobs: list[_Job] = []
        for w in (*change.remove_decode, *change.remove_colocated):
            jobs.extend(self._remove_decoder(w))
        for w in (*change.remove_prefill, *change.remove_colocated):
            jobs.extend(self._remove_prefiller(w))
        jobs.extend(self.parked)
        self.parked = []
        for job in jobs:
            self._queue_job(job)
        for w, p in enumerate(self.prefillers):
            if p.alive:
                self._start_prefill(w)
        self._admit_waiting()

    def _remove_decoder(self, worker: int) -> list[_Job]:
        """Stop a decode worker; its sequences keep their partial turn and resubmit their prefix."""
        d = self.decoders[worker]
        if not d.alive:
            raise ValueError(f"decode worker {worker} has already left")
        d.advance(self.now)
        interrupted = []
        for index, finish in d.active.items():
            tokens = d.charge[index][0]
            done = max(0, min(tokens, int(tokens - (finish - d.clock) + 1e-9)))
            interrupted.append((index, tokens, done))
        d.active.clear()
        d.finishing.clear()
        d.charge.clear()
        d.kv_used = d.context_total = 0.0
        d.alive = False
        d.version += 1
        jobs: list[_Job] = []
        for index, tokens, done in interrupted:
            t = self.trajectories[index]
            if done == tokens:
                self._end_turn(index, tokens)
                continue
            t.context += done  # the partial turn is kept ...
            self.generated += done
            t.remaining = tokens - done
            jobs.append((index, t.context, 0, True))  # ... and its whole prefix is prefilled again elsewhere
        return jobs

    def _remove_prefiller(self, worker: int) -> list[_Job]:
        """Stop a prefill worker; its queued and running jobs go back to be placed elsewhere."""
        p = self.prefillers[worker]
        if not p.alive:
            raise ValueError(f"prefill worker {worker} has already left")
        jobs = [*(p.running or []), *p.queue]
        p.queue.clear()
        p.running = None
        p.load_tokens = 0
        p.alive = False
        p.version += 1
        return jobs


def simulate_batch(
    pool: Pool, trajectories: Sequence[TrajectorySpec], changes: Sequence[PoolChange] = ()
) -> BatchResult:
    """Run one batch to completion, with workers joining and leaving as ``changes`` say."""
    return RolloutSimulation(pool, trajectories, changes).run()


def environment_times(rng: np.random.Generator, mean_s: float, std_s: float, turns: int) -> np.ndarray:
    """Environment seconds after each of ``turns`` turns: Normal(mean, std) clipped at zero (RollArt)."""
    return np.maximum(rng.normal(mean_s, std_s, turns), 0.0) if std_s > 0 else np.full(turns, mean_s)


def sample_trajectories(
    count: int,
    *,
    turns: int,
    prompt_tokens: int,
    appended_tokens: int,
    generated_tokens: int,
    env_mean_s: float,
    env_std_s: float,
    seed: int = 0,
) -> list[TrajectorySpec]:
    """Trajectories of fixed shape with environment times from Normal(mean, std), clipped at zero (RollArt)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        envs = environment_times(rng, env_mean_s, env_std_s, turns)
        out.append(
            TrajectorySpec(
                tuple(
                    Turn(
                        prompt_tokens if k == 0 else appended_tokens,
                        generated_tokens,
                        float(envs[k]) if k < turns - 1 else 0.0,
                    )
                    for k in range(turns)
                )
            )
        )
    return out
