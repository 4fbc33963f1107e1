"""A discrete-event simulation of one multi-turn rollout batch on a fixed pool of SGLang workers.

Entities: trajectories (turns of prefill → decode → environment), workers (prefill, decode or colocated), each
with its KV pool and radix cache (:mod:`~pearl_sched.sim.memory`), the gateway's router
(:mod:`~pearl_sched.sim.router`), a KV link per prefill worker. Events: a prefill step ends, a KV transfer ends,
a decode batch reaches its next finishing sequence or runs out of KV, an environment call returns. Decode is
never simulated per token: each decode worker keeps a *virtual iteration clock* that advances at 1/τ(n)
iterations per second, τ(n) the step time of its current batch plus the per-step framework overhead; a
sequence finishes at a known iteration index, and its KV grows by one token per iteration, so the batch's KV
is ``kv_base + n·clock`` and the iteration at which the pool runs out is one division.

Scheduling, as SGLang's scheduler does it (docs/simulator.md names the source of each rule):

* **Admission** (``schedule_policy.PrefillAdder``): FCFS; a request enters the prefill batch only if its
  uncached prompt plus min(max_new_tokens, 4096) fits in free + evictable tokens less the running batch's
  reserve (Σ min(max_new − generated, 4096) × ``new_token_ratio``); otherwise the queue waits. Prompts are
  split into ``chunk_tokens`` (``--chunked-prefill-size``) chunks; a chunked request leads the next batch.
* **Prefill first**: a colocated worker pauses its decode batch while it prefills, or, with
  ``enable_mixed_chunk``, runs one decode iteration inside each prefill step.
* **Retraction** (``ScheduleBatch.retract_decode``): when decode finds no free token, the requests with the
  fewest generated tokens leave the batch until the rest can run 20 more steps; ``new_token_ratio`` is reset
  from what the batch has decoded. A colocated worker re-prefills them later (what its cache still holds is
  a hit); a PD decode worker offloads them to host memory and resumes them first.
* **Prefix cache**: a finished turn's whole sequence stays in the worker's radix cache until LRU eviction;
  the router decides whether the next turn lands where its prefix is.
* **PD**: the prefill worker computes the part of the prompt its cache does not hold — never the tokens the
  decode worker generated — and sends the *whole* prompt's KV to the decode worker the router chose
  (FCFS on its link), less what the decode worker's radix cache holds when ``decode_radix_cache``
  (``--disaggregation-decode-enable-radix-cache``) is on. The decode worker admits it when its pool has
  room for it plus ``--num-reserved-decode-tokens`` (512) per running request.

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

from pearl_sched.sim.memory import (
    CLIP_MAX_NEW_TOKENS,
    INIT_NEW_TOKEN_RATIO,
    MIN_NEW_TOKEN_RATIO_FACTOR,
    NEW_TOKEN_RATIO_DECAY_STEPS,
    NUM_RESERVED_DECODE_TOKENS,
    RETRACT_DECODE_STEPS,
    WorkerMemory,
)
from pearl_sched.sim.router import GATEWAY_OVERLOAD_PROTECTION, ROUTER_POLICIES, LoadReport, Router
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
    """A trajectory's turns, fixed in advance so policies are compared on identical work.

    ``group`` is the GRPO group the trajectory samples (``-1``: none): a group's members share their first
    prompt, which a worker's radix cache holds once for all of them.
    """

    turns: tuple[Turn, ...]
    group: int = -1

    @property
    def generated_tokens(self) -> int:
        """Tokens the trajectory decodes over all its turns (the rollout's useful output)."""
        return sum(t.generated_tokens for t in self.turns)


@dataclass(frozen=True)
class Engine:
    """One SGLang engine of a size: its step times, each rank's KV pool and its attention-DP ranks.

    An engine of ``ranks`` > 1 (``--dp <ranks> --enable-dp-attention``) is ``ranks`` workers of the pool, one per
    attention-DP rank, each with its own scheduler, KV pool and radix cache (as SGLang runs them); their MoE layers
    run in lock-step, so in a colocated engine a prefill step on one rank holds every other rank's decode.

    Attributes:
        step_times: One rank's step times (aiconfigurator-core's per-rank batch with attention-DP).
        kv_capacity_tokens: One rank's KV pool in tokens.
        ranks: Attention-DP ranks (1: a plain TP engine, one worker).
    """

    step_times: StepTimes
    kv_capacity_tokens: float
    ranks: int = 1

    def __post_init__(self) -> None:
        """Reject an engine without ranks or KV.

        Raises:
            ValueError: ``ranks`` < 1 or a non-positive KV pool.
        """
        if self.ranks < 1 or self.kv_capacity_tokens <= 0:
            raise ValueError("an engine has ≥ 1 rank and a positive KV pool")


@dataclass(frozen=True)
class Pool:
    """A fixed rollout configuration: the mode, worker counts and what each worker is like.

    Attributes:
        kv_capacity_tokens: Each worker's KV pool in tokens (every role; ``memory.kv_pool_tokens``).
        chunk_tokens: SGLang's ``--chunked-prefill-size``: the most new tokens one prefill step computes.
        router: The gateway's policy: ``cache_aware`` (smg's default), ``least_load`` or ``round_robin``.
        overload_protection: smg's worker overload protection (its default; pearl_sched's adapters launch the
            gateway with it off: ``router.GATEWAY_OVERLOAD_PROTECTION``).
        tie_seed: Seeds the gateway's tie-break among workers of equal score, which smg makes uniformly at random
            (``router.Router``); ``None`` gives ties to the lowest worker index.
        decode_radix_cache: SGLang's ``--disaggregation-decode-enable-radix-cache`` (off by default).
        enable_mixed_chunk: SGLang's ``--enable-mixed-chunk``: a prefill chunk and the decode batch in one step.
        step_overhead_s: Framework seconds added to every step (scheduling, sampling, launch).
        schedule_conservativeness: SGLang's ``--schedule-conservativeness`` (scales the new-token ratio).
        max_context_tokens: The rollout's maximum length; a request's max_new_tokens is what it leaves.
        attention_dp: Attention-DP ranks per engine (SGLang ``--enable-dp-attention --dp-size``): every
            ``attention_dp`` consecutive colocated workers are the ranks of one engine, whose MoE layers run in
            lock-step, so a prefill step on one rank holds every other rank's decode for its duration.
        prefill_engines: The prefill workers as engines of their own sizes (``decode_engines``,
            ``colocated_engines`` likewise); empty: every worker of the role has ``step_times`` and
            ``kv_capacity_tokens`` (colocated ones grouped by ``attention_dp``). Given, the role's worker count
            is their ranks.
    """

    mode: Mode
    step_times: StepTimes
    prefill_workers: int = 0
    decode_workers: int = 0
    colocated_workers: int = 0
    kv_capacity_tokens: float = float("inf")
    kv_bytes_per_token: float = 0.0
    link_bytes_per_s: float = float("inf")
    chunk_tokens: int = 8192
    router: str = "cache_aware"
    overload_protection: bool = GATEWAY_OVERLOAD_PROTECTION
    tie_seed: int | None = 0
    decode_radix_cache: bool = False
    enable_mixed_chunk: bool = False
    step_overhead_s: float = 0.0
    schedule_conservativeness: float = 1.0
    max_context_tokens: int = 32768
    attention_dp: int = 1
    prefill_engines: tuple[Engine, ...] = ()
    decode_engines: tuple[Engine, ...] = ()
    colocated_engines: tuple[Engine, ...] = ()

    def __post_init__(self) -> None:
        """Reject an inconsistent pool.

        Raises:
            ValueError: worker counts that do not fit the mode, an unknown router, or a non-positive chunk size,
                attention-DP degree, conservativeness or KV capacity, or a negative step overhead.
        """
        if self.mode is Mode.COLOCATED and (self.colocated_workers < 1 or self.prefill_workers or self.decode_workers):
            raise ValueError("a colocated pool has ≥1 colocated worker and no prefill or decode workers")
        if self.mode is Mode.DISAGGREGATED and (
            self.prefill_workers < 1 or self.decode_workers < 1 or self.colocated_workers
        ):
            raise ValueError("a disaggregated pool has ≥1 prefill and ≥1 decode worker and no colocated ones")
        if self.chunk_tokens < 1:
            raise ValueError("chunk_tokens must be ≥ 1")
        if self.router not in ROUTER_POLICIES:
            raise ValueError(f"router must be one of {', '.join(ROUTER_POLICIES)}, not {self.router!r}")
        if self.attention_dp < 1:
            raise ValueError("attention_dp must be ≥ 1")
        for role, engines, count in (
            ("prefill", self.prefill_engines, self.prefill_workers),
            ("decode", self.decode_engines, self.decode_workers),
            ("colocated", self.colocated_engines, self.colocated_workers),
        ):
            if engines and sum(e.ranks for e in engines) != count:
                raise ValueError(f"{role}_workers ({count}) is not the ranks of {role}_engines")
        if self.step_overhead_s < 0 or self.schedule_conservativeness <= 0 or self.kv_capacity_tokens <= 0:
            raise ValueError("step_overhead_s must be ≥ 0; schedule_conservativeness and kv_capacity_tokens > 0")


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
    retractions: int = 0
    transferred_bytes: float = 0.0
    cache_hit_tokens: float = 0.0
    peak_kv_fraction: float = 0.0

    @property
    def throughput_tokens_per_s(self) -> float:
        """Generated tokens per second of makespan; ``0.0`` for an empty (zero-length) batch."""
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
    worker (a re-prefill: whatever that worker's cache no longer holds is computed again), then decode the rest
    of their turn elsewhere; a removed prefill worker's queue and running batch go to the others. KV transfers
    already on the wire complete. A removed worker's KV pool and radix cache are gone. ``add_*_engines`` join
    engines of their own sizes after the ``add_*`` workers, each rank at the next index.
    """

    at_s: float
    add_prefill: int = 0
    add_decode: int = 0
    add_colocated: int = 0
    remove_prefill: tuple[int, ...] = ()
    remove_decode: tuple[int, ...] = ()
    remove_colocated: tuple[int, ...] = ()
    add_prefill_engines: tuple[Engine, ...] = ()
    add_decode_engines: tuple[Engine, ...] = ()
    add_colocated_engines: tuple[Engine, ...] = ()


@dataclass(slots=True)
class _Trajectory:
    spec: TrajectorySpec
    index: int
    turn: int = 0
    context: int = 0  # tokens of the sequence so far: prompts, appended observations and generated tokens
    remaining: int | None = None  # tokens still to generate this turn after an interruption or retraction
    prefill_worker: int = -1  # PD: where the turn's prompt was prefilled (its KV is held until it is sent)
    prefill_private: float = 0.0
    decode_worker: int = -1  # PD: the decode worker the router chose for the turn
    decode_cached: float = 0.0  # PD: tokens of the prompt the decode worker's radix cache held


@dataclass(slots=True)
class _Job:
    """A prefill request: the whole prompt must be in the worker's KV; ``cached`` of it was a cache hit."""

    index: int
    prompt_tokens: int
    cached: float = 0.0
    done: int = 0  # tokens prefilled by earlier chunks
    admitted: bool = False

    @property
    def left(self) -> int:
        return max(0, self.prompt_tokens - int(self.cached) - self.done)


@dataclass(slots=True)
class _Charge:
    tokens: int  # to generate this turn (what is left of it)
    start: float  # the decoder's clock when the sequence joined
    private: float  # KV the sequence holds beyond its locked prefix when it joined
    share: float  # its contribution to the batch's mean context
    max_new: int  # the request's max_new_tokens


@dataclass(slots=True)
class _Decoder:
    """A worker's decode side with its virtual iteration clock and its KV pool."""

    steps: StepTimes
    memory: WorkerMemory
    overhead_s: float = 0.0
    active: dict[int, float] = field(default_factory=dict)  # trajectory → finishing iteration
    finishing: list[tuple[float, int]] = field(default_factory=list)  # heap of (iteration, trajectory), lazy
    context_total: float = 0.0
    kv_base: float = 0.0  # Σ (private KV at joining − clock at joining): the batch's KV is kv_base + n·clock
    clock: float = 0.0  # iterations done (continuous)
    since: float = 0.0
    tau: float = 0.0
    paused: bool = False
    held: int = 0  # attention-DP: prefill steps of other ranks of the engine holding this rank's decode
    version: int = 0
    busy_s: float = 0.0
    occupancy_s: float = 0.0  # ∫ (sequences in the decode phase) dt, paused or not
    alive: bool = True
    charge: dict[int, _Charge] = field(default_factory=dict)
    unclipped: set[int] = field(default_factory=set)  # sequences whose admission reserve is not always the clip
    waiting: deque[tuple[int, float]] = field(default_factory=deque)  # PD: (trajectory, private KV) sent here
    retracted: deque[int] = field(default_factory=deque)  # PD: offloaded to host, resumed first
    incoming: int = 0  # PD: transfers on their way here without a preallocation (the target worker left)
    prealloc: deque[tuple[_Job, int]] = field(default_factory=deque)  # PD: (request, its prefill worker) to place
    reserved: dict[int, float] = field(default_factory=dict)  # PD: KV preallocated for requests not yet arrived
    ratio0: float = INIT_NEW_TOKEN_RATIO
    ratio_clock: float = 0.0
    init_ratio: float = INIT_NEW_TOKEN_RATIO

    def advance(self, now: float) -> None:
        self.occupancy_s += len(self.active) * (now - self.since)
        if self.active and not self.paused and self.tau > 0:
            self.clock += (now - self.since) / self.tau
            self.busy_s += now - self.since
        self.since = now
        self.memory.settle(self.kv())

    def kv(self) -> float:
        """The decode batch's KV tokens now."""
        return self.kv_base + len(self.active) * self.clock if self.active else 0.0

    def gen_rate(self) -> float:
        """Tokens generated per second now (SGLang's reported ``gen_throughput``); 0 when idle or paused."""
        return len(self.active) / self.tau if self.active and self.tau > 0 and not self.paused else 0.0

    def rerate(self) -> None:
        n = len(self.active)
        self.tau = self.steps.decode_s(n, self.context_total / n) + self.overhead_s if n else 0.0

    def new_token_ratio(self) -> float:
        """SGLang's ``new_token_ratio``, decayed linearly per decode step since it was last set."""
        floor = self.init_ratio * MIN_NEW_TOKEN_RATIO_FACTOR
        decay = (self.init_ratio - floor) / NEW_TOKEN_RATIO_DECAY_STEPS
        return max(floor, self.ratio0 - decay * (self.clock - self.ratio_clock))

    def out(self, index: int) -> int:
        """Tokens the sequence has generated on this worker so far."""
        c = self.charge[index]
        return max(0, min(c.tokens, int(self.clock - c.start + 1e-9)))

    def next_finish(self) -> float | None:
        while self.finishing and self.active.get(self.finishing[0][1]) != self.finishing[0][0]:
            heapq.heappop(self.finishing)
        return self.finishing[0][0] if self.finishing else None

    def drop(self, index: int) -> _Charge:
        c = self.charge.pop(index)
        del self.active[index]
        self.unclipped.discard(index)
        self.kv_base -= c.private - c.start
        self.context_total -= c.share
        if not self.active:
            self.context_total = self.kv_base = 0.0  # clear rounding residue
        return c


@dataclass(slots=True)
class _Prefiller:
    memory: WorkerMemory
    steps: StepTimes
    queue: deque[_Job] = field(default_factory=deque)
    running: list[tuple[_Job, int]] | None = None
    in_flight: int = 0  # requests routed here and not yet sent on (routing load)
    link_free_at: float = 0.0
    alive: bool = True
    version: int = 0
    mixed_decode: bool = False  # the running step also ran one decode iteration (mixed chunk)
    holding: list[int] = field(default_factory=list)  # attention-DP: other ranks whose decode this step holds


class RolloutSimulation:
    """Simulate one batch of trajectories on a pool; :meth:`run` returns a :class:`BatchResult`."""

    def __init__(self, pool: Pool, trajectories: Sequence[TrajectorySpec], changes: Sequence[PoolChange] = ()) -> None:
        """Set up the pool's workers, its routers and the scheduled pool changes; :meth:`run` plays the batch.

        Args:
            pool: the configuration at time 0.
            trajectories: the batch; each starts its first turn at time 0.
            changes: workers joining or leaving at given times during the batch (checked when they happen).

        Raises:
            ValueError: an empty batch.
        """
        if not trajectories:
            raise ValueError("a batch needs at least one trajectory")
        self.pool = pool
        self.colocated = pool.mode is Mode.COLOCATED
        self.now = 0.0
        self.trajectories = [_Trajectory(spec, i) for i, spec in enumerate(trajectories)]
        self.groups = _shared_prompts(trajectories)
        self.prefillers: list[_Prefiller] = []
        self.decoders: list[_Decoder] = []
        self.engine_of: list[int] = []  # colocated: each worker's engine (its attention-DP ranks share it)
        self.ranks: dict[int, list[int]] = {}  # engine → its workers
        self._engines = itertools.count(-1, -1)  # engines given by size (the default ones are worker // attention_dp)
        if self.colocated:
            self._add_workers(pool.colocated_workers if not pool.colocated_engines else 0, 0, pool.colocated_engines)
        else:
            self._add_workers(
                0 if pool.prefill_engines else pool.prefill_workers,
                0 if pool.decode_engines else pool.decode_workers,
                pool.prefill_engines,
                pool.decode_engines,
            )
        protection, seeds = pool.overload_protection, _router_seeds(pool.tie_seed)
        self.prefill_router = Router(pool.router, groups=self.groups, overload_protection=protection, tie_seed=seeds[0])
        self.decode_router = Router(
            pool.router if pool.decode_radix_cache else "least_load",
            groups=self.groups,
            overload_protection=protection,
            tie_seed=seeds[1],
        )
        self.events: list[tuple[float, int, _Kind, int, int]] = []
        self._seq = itertools.count()
        self.finish_times: list[float] = []
        self.generated = 0
        self.prefilled = 0
        self.handled = 0
        self.retractions = 0
        self.transferred_bytes = 0.0
        self.cache_hit_tokens = 0.0
        self.changes = list(changes)
        self._started = False
        self.parked: list[_Job] = []  # prefill jobs waiting for a prefill worker to join
        self.orphans: list[tuple[int, float]] = []  # PD: KV that arrived with no decode worker left
        for i, change in enumerate(self.changes):
            self._push(change.at_s, _Kind.POOL_CHANGE, i)

    def _add_workers(
        self, prefill: int, decode: int, prefill_engines: Sequence[Engine] = (), decode_engines: Sequence[Engine] = ()
    ) -> None:
        """Add workers of the pool's own kind, then engines of their own sizes (colocated: ``prefill_engines``).

        In a colocated pool ``prefill`` workers (or the ranks of ``prefill_engines``) are added with their decode
        side; ``decode`` and ``decode_engines`` are for PD only.
        """
        pool = self.pool
        default = Engine(pool.step_times, pool.kv_capacity_tokens)
        for _ in range(prefill):
            self._add_rank(default, True, pool.attention_dp)
        for engine in prefill_engines:
            key = next(self._engines)
            for _ in range(engine.ranks):
                self._add_rank(engine, True, key)
        if self.colocated:
            return
        for _ in range(decode):
            self._add_rank(default, False, 0)
        for engine in decode_engines:
            for _ in range(engine.ranks):
                self._add_rank(engine, False, 0)

    def _add_rank(self, engine: Engine, prefill_side: bool, key: int) -> None:
        """One worker (one attention-DP rank of ``engine``); colocated: of engine ``key`` (> 0: ranks per engine)."""
        pool = self.pool
        if prefill_side:
            memory = WorkerMemory(engine.kv_capacity_tokens, groups=self.groups)
            self.prefillers.append(_Prefiller(memory, engine.step_times))
            if not self.colocated:
                return
            worker = len(self.decoders)
            key = worker // key if key > 0 else key  # a default worker's engine: every attention_dp in turn
            self.engine_of.append(key)
            self.ranks.setdefault(key, []).append(worker)
        else:
            memory = WorkerMemory(engine.kv_capacity_tokens, radix_cache=pool.decode_radix_cache, groups=self.groups)
        ratio = min(INIT_NEW_TOKEN_RATIO * pool.schedule_conservativeness, 1.0)
        self.decoders.append(
            _Decoder(
                engine.step_times,
                memory,
                overhead_s=pool.step_overhead_s,
                since=self.now,
                ratio0=ratio,
                init_ratio=ratio,
            )
        )

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
        events, pop = self.events, heapq.heappop
        prefill_done, transfer_done, decode_done, pool_change = (
            _Kind.PREFILL_DONE,
            _Kind.TRANSFER_DONE,
            _Kind.DECODE_DONE,
            _Kind.POOL_CHANGE,
        )
        while events and events[0][0] <= t_s:
            at, _, kind, who, version = pop(events)
            self.now = at
            self.handled += 1
            if kind is decode_done:
                if version == self.decoders[who].version:
                    self._decode_event(who)
            elif kind is prefill_done:
                if version == self.prefillers[who].version:
                    self._prefill_done(who)
            elif kind is transfer_done:
                self._transfer_done(who)
            elif kind is pool_change:
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

    def peak_kv_tokens(self) -> list[float]:
        """Each worker's most KV tokens in use at once (prefill-side pools first, then decode-side ones in PD)."""
        return [m.peak_tokens for m in self._memories()]

    def _memories(self) -> list[WorkerMemory]:
        return [p.memory for p in self.prefillers] + ([] if self.colocated else [d.memory for d in self.decoders])

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
            retractions=self.retractions,
            transferred_bytes=self.transferred_bytes,
            cache_hit_tokens=self.cache_hit_tokens,
            peak_kv_fraction=max((m.peak_tokens / m.capacity_tokens for m in self._memories()), default=0.0),
        )

    # -- prefill --------------------------------------------------------------------------------------------
    def _enqueue_prefill(self, index: int) -> None:
        t = self.trajectories[index]
        t.context += t.spec.turns[t.turn].appended_tokens
        self._queue_job(_Job(index, t.context))

    def _load(self, worker: int) -> int:
        p = self.prefillers[worker]
        if self.colocated:
            d = self.decoders[worker]
            return len(d.active) + len(p.queue) + (len(p.running) if p.running else 0)
        return p.in_flight

    def _report(self, worker: int) -> LoadReport:
        """A prefill-side worker's ``/v1/loads`` as SGLang would answer now.

        Its prefill queue (requests, and the uncached tokens left of them and of the running chunk), KV usage
        without the evictable cache and, colocated, the decode batch's size and generation rate (SGLang's
        ``get_loads`` counts ``running_batch.reqs``, which a PD prefill worker's loop leaves empty).
        """
        p = self.prefillers[worker]
        running = p.running or []
        uncached = sum(j.left for j in p.queue) + sum(j.left for j, _ in running)
        d = self.decoders[worker] if self.colocated else None
        decode = d.kv() if d is not None else 0.0
        usage = p.memory.pinned(decode) / p.memory.capacity_tokens
        if d is None:
            return LoadReport(len(p.queue), uncached, usage)
        return LoadReport(len(p.queue), uncached, usage, d.gen_rate(), len(d.active))

    def _decode_report(self, worker: int) -> LoadReport:
        """A PD decode worker's ``/v1/loads``: its queues, KV usage (no evictable cache), rate, decode batch."""
        d = self.decoders[worker]
        waiting = len(d.prealloc) + len(d.reserved) + len(d.waiting) + len(d.retracted) + d.incoming
        usage = d.memory.pinned(d.kv()) / d.memory.capacity_tokens
        return LoadReport(waiting, 0.0, usage, d.gen_rate(), len(d.active))

    def _loads(self) -> list[tuple[int, int]]:
        """(worker, routing load) of every live prefill-side worker (:meth:`_load`, in one pass)."""
        if self.colocated:
            return [
                (w, len(d.active) + len(p.queue) + (len(p.running) if p.running else 0))
                for w, (p, d) in enumerate(zip(self.prefillers, self.decoders, strict=True))
                if p.alive
            ]
        return [(w, p.in_flight) for w, p in enumerate(self.prefillers) if p.alive]

    def _queue_job(self, job: _Job) -> None:
        loads = self._loads()
        if not loads:  # every prefill worker left: wait for one to join
            self.parked.append(job)
            return
        worker = self.prefill_router.route(job.index, job.prompt_tokens, self.now, loads, self._report)
        p = self.prefillers[worker]
        p.in_flight += 1
        decoders = [w for w, d in enumerate(self.decoders) if d.alive] if not self.colocated else []
        if decoders:  # PD: the gateway picks the decode worker too, which preallocates KV before the prefill runs
            target = self.decode_router.route(
                job.index,
                job.prompt_tokens,
                self.now,
                [(w, self._decode_load(w)) for w in decoders],
                self._decode_report,
            )
            self.decoders[target].prealloc.append((job, worker))
            self._admit(target)
            return
        p.queue.append(job)
        self._start_prefill(worker)

    def _max_new(self, prompt_tokens: int) -> int:
        """The request's ``max_new_tokens``: what the maximum length leaves (as RL frameworks set it)."""
        return max(1, self.pool.max_context_tokens - prompt_tokens)

    def _running_reserve(self, d: _Decoder) -> float:
        """PrefillAdder's reserve for the running batch: Σ min(max_new − out, clip) × new_token_ratio."""
        if not d.active or math.isinf(d.memory.capacity_tokens):
            return 0.0
        # A sequence that will still have ≥ clip tokens of max_new left at the end of its turn always counts the
        # clip: only the others are summed one by one (in rollouts nearly every sequence is of the first kind).
        exact = sum(
            min(d.charge[i].max_new - max(0.0, d.clock - d.charge[i].start), CLIP_MAX_NEW_TOKENS) for i in d.unclipped
        )
        return d.new_token_ratio() * (CLIP_MAX_NEW_TOKENS * (len(d.active) - len(d.unclipped)) + exact)

    def _start_prefill(self, worker: int) -> None:
        """Form the next prefill batch as SGLang's PrefillAdder does: FCFS, admission by memory, chunked."""
        p = self.prefillers[worker]
        if p.running is not None or not p.queue or not p.alive:
            return
        d = self.decoders[worker] if self.colocated else None
        if d is not None:
            d.advance(self.now)
        decode_kv = d.kv() if d is not None else 0.0
        mem = p.memory
        mem.settle(decode_kv)
        budget = self.pool.chunk_tokens
        headroom = mem.available(decode_kv) - (self._running_reserve(d) if d is not None else 0.0)
        batch: list[tuple[_Job, int]] = []
        while p.queue and budget > 0:
            job = p.queue[0]
            if not job.admitted:
                match = min(math.floor(mem.cached(job.index) + 1e-9), job.prompt_tokens - 1)  # whole tokens
                extend = job.prompt_tokens - match
                reserve = float(min(self._max_new(job.prompt_tokens), CLIP_MAX_NEW_TOKENS) if d is not None else 0)
                reserve += mem.evictable_in(job.index, match)  # locking the prefix takes it out of evictable
                if extend + reserve >= headroom:  # PrefillAdder: NO_TOKEN (re-checked after the lock), the queue waits
                    if not batch and not self._holds_work(worker):
                        raise ValueError(
                            f"trajectory {job.index} needs {extend + reserve:.0f} KV tokens, more than a"
                            f" {'colocated' if d is not None else 'prefill'} worker holds ({mem.capacity_tokens:.0f})"
                        )
                    break
                job.cached = mem.lock(job.index, match)
                self.cache_hit_tokens += job.cached
                job.admitted = True
                headroom -= extend + reserve
            chunk = min(job.left, budget)
            if job.done:  # a later chunk of an admitted prompt: it must fit, and new admissions come after it
                if chunk > mem.available(decode_kv):
                    break
                headroom -= chunk
            batch.append((job, chunk))
            budget -= chunk
            mem.private_tokens += chunk
            if chunk < job.left:
                break  # the chunked request: it leads the next batch
            p.queue.popleft()
        if not batch:
            return
        mem.settle(decode_kv)
        p.running = batch
        tokens = sum(chunk for _, chunk in batch)
        cached = sum(job.cached + job.done for job, _ in batch) / len(batch)
        duration = p.steps.prefill_s(tokens, len(batch), cached) + self.pool.step_overhead_s
        p.mixed_decode = False
        if d is not None:  # the worker's decode batch waits (prefill first) or rides along (mixed chunk)
            d.paused = True
            d.version += 1
            if self.pool.enable_mixed_chunk and d.active and not d.held:
                p.mixed_decode = True
                n = len(d.active)
                duration = (
                    p.steps.mixed_s(tokens, len(batch), cached, n, d.context_total / n) + self.pool.step_overhead_s
                )
        if d is not None:  # attention-DP: the engine's other ranks wait for this step
            for rank in self.ranks[self.engine_of[worker]]:
                other = self.decoders[rank]
                if rank != worker and other.alive:
                    other.advance(self.now)
                    other.held += 1
                    other.paused = True
                    other.version += 1
                    p.holding.append(rank)
        self._push(self.now + duration, _Kind.PREFILL_DONE, worker, p.version)

    def _release_holds(self, worker: int) -> None:
        """Attention-DP: the prefill step on ``worker`` ended; the engine's other ranks decode again."""
        p = self.prefillers[worker]
        holding, p.holding = p.holding, []
        for rank in holding:
            other = self.decoders[rank]
            if not other.alive:
                continue
            other.advance(self.now)
            other.held -= 1
            if other.held == 0 and self.prefillers[rank].running is None:
                other.paused = False
                self._reschedule(rank)

    def _holds_work(self, worker: int) -> bool:
        """Whether the worker holds anything that will free memory by itself."""
        p = self.prefillers[worker]
        if self.colocated:
            return bool(self.decoders[worker].active) or p.running is not None
        return p.memory.locked_tokens + p.memory.private_tokens > 0 or p.running is not None

    def _prefill_done(self, worker: int) -> None:
        p = self.prefillers[worker]
        batch, p.running = p.running or [], None
        d = self.decoders[worker] if self.colocated else None
        if d is not None:
            d.advance(self.now)
            if p.mixed_decode and d.active:
                d.clock += 1.0  # the decode batch ran one iteration inside the mixed step
            d.paused = d.held > 0
            self._release_holds(worker)
        for job, chunk in batch:
            job.done += chunk
            self.prefilled += chunk
            if job.left:
                continue  # a chunk of a longer prompt: the rest leads the next batch
            if not self.colocated:
                p.in_flight -= 1
            extend = job.prompt_tokens - job.cached
            p.memory.private_tokens -= extend
            extend -= p.memory.share_prompt(job.index, job.prompt_tokens)  # a group's prompt enters the cache
            if d is not None:
                self._place(job.index, worker, extend)
            else:
                self._send(job, worker, extend)
        if d is not None:
            if p.mixed_decode:
                self._decode_event(worker)
            else:
                self._reschedule(worker)
        self._start_prefill(worker)

    # -- PD transfer ----------------------------------------------------------------------------------------
    def _decode_load(self, w: int) -> int:
        d = self.decoders[w]
        return len(d.active) + len(d.waiting) + len(d.retracted) + d.incoming + len(d.prealloc) + len(d.reserved)

    def _send(self, job: _Job, worker: int, extend: float) -> None:
        """Route the prefilled prompt to a decode worker and send the KV it does not hold over the link."""
        p = self.prefillers[worker]
        t = self.trajectories[job.index]
        p.memory.private_tokens += extend  # held (with the locked prefix) until the KV is sent
        t.prefill_worker, t.prefill_private = worker, extend
        if t.decode_worker >= 0 and job.index in self.decoders[t.decode_worker].reserved:  # its KV has a place
            size = (job.prompt_tokens - t.decode_cached) * self.pool.kv_bytes_per_token
            self.transferred_bytes += size
            start = max(self.now, p.link_free_at)
            p.link_free_at = start + (size / self.pool.link_bytes_per_s if size else 0.0)
            self._push(p.link_free_at, _Kind.TRANSFER_DONE, job.index)
            return
        alive = [w for w, d in enumerate(self.decoders) if d.alive]
        target = (
            self.decode_router.route(
                job.index, job.prompt_tokens, self.now, [(w, self._decode_load(w)) for w in alive], self._decode_report
            )
            if alive
            else -1
        )
        cached = 0.0
        if target >= 0:
            dec = self.decoders[target]
            dec.incoming += 1
            if self.pool.decode_radix_cache:  # --disaggregation-decode-enable-radix-cache: matched, locked
                dec.advance(self.now)
                held = math.floor(dec.memory.cached(job.index) + 1e-9)
                cached = dec.memory.lock(job.index, min(held, job.prompt_tokens - 1))
                if cached:  # less is evictable now: the pool runs out sooner
                    self._reschedule(target)
        t.decode_worker, t.decode_cached = target, cached
        size = (job.prompt_tokens - cached) * self.pool.kv_bytes_per_token
        self.transferred_bytes += size
        start = max(self.now, p.link_free_at)
        p.link_free_at = start + (size / self.pool.link_bytes_per_s if size else 0.0)
        self._push(p.link_free_at, _Kind.TRANSFER_DONE, job.index)

    def _transfer_done(self, index: int) -> None:
        t = self.trajectories[index]
        p = self.prefillers[t.prefill_worker]
        if p.alive:  # the prefill side caches the prompt (cache_finished_req) once the KV is sent
            p.memory.private_tokens -= t.prefill_private
            p.memory.release(index, t.context, t.prefill_private)
            self._start_prefill(t.prefill_worker)
        private = t.context - t.decode_cached
        target = t.decode_worker
        if target >= 0 and index in self.decoders[target].reserved:  # the preallocated KV becomes the request's
            d = self.decoders[target]
            d.memory.private_tokens -= d.reserved.pop(index)
            self._place(index, target, private)
            return
        if target < 0 or not self.decoders[target].alive:
            if target >= 0 and t.decode_cached:
                private = t.context
            alive = [w for w, d in enumerate(self.decoders) if d.alive]
            if not alive:
                self.orphans.append((index, float(t.context)))
                return
            target = min(alive, key=lambda w: (self._decode_load(w), w))
            self.decoders[target].incoming += 1
            t.decode_worker = target
        d = self.decoders[target]
        d.incoming -= 1
        d.waiting.append((index, private))
        self._admit(target)

    # -- decode ---------------------------------------------------------------------------------------------
    def _admit(self, worker: int) -> None:
        """PD decode side: resume retracted requests, then admit arrived ones while the pool has room."""
        d = self.decoders[worker]
        if not d.alive or not (d.retracted or d.waiting or d.prealloc):
            return
        d.advance(self.now)
        placed = False
        while d.retracted or d.waiting:
            resumed = bool(d.retracted)
            if resumed:  # its whole sequence comes back from host memory
                index, private = d.retracted[0], float(self.trajectories[d.retracted[0]].context)
            else:
                index, private = d.waiting[0]
            need = private + NUM_RESERVED_DECODE_TOKENS
            room = d.memory.available(d.kv()) - NUM_RESERVED_DECODE_TOKENS * (len(d.active) + len(d.reserved))
            if need > room:
                if not d.active and d.memory.private_tokens <= 0:
                    raise ValueError(
                        f"trajectory {index} needs {need:.0f} KV tokens, more than a decode worker holds"
                        f" ({d.memory.capacity_tokens:.0f})"
                    )
                break
            (d.retracted if resumed else d.waiting).popleft()
            self._place(index, worker, private, reschedule=False)
            placed = True
        while d.prealloc and not (d.retracted or d.waiting) and self._preallocate(worker):
            placed = True
        if placed:
            self._reschedule(worker)

    def _preallocate(self, worker: int) -> bool:
        """PD decode side: reserve KV for the first request of the prealloc queue, then let its prefill run.

        As ``DecodePreallocQueue.pop_preallocated`` does: the request's prompt (less what the decode radix cache
        holds, matched and locked) must fit in the free tokens less ``--num-reserved-decode-tokens`` for every
        running or preallocated request; until it fits, the request waits in its prefill worker's bootstrap queue.
        Returns whether the request was preallocated.
        """
        d = self.decoders[worker]
        job, prefiller = d.prealloc[0]
        match = 0
        if self.pool.decode_radix_cache:  # --disaggregation-decode-enable-radix-cache: matched and locked
            match = min(math.floor(d.memory.cached(job.index) + 1e-9), job.prompt_tokens - 1)
        private = job.prompt_tokens - match
        need = private + NUM_RESERVED_DECODE_TOKENS + d.memory.evictable_in(job.index, match)
        room = d.memory.available(d.kv()) - NUM_RESERVED_DECODE_TOKENS * (len(d.active) + len(d.reserved))
        if need > room:
            if not d.active and not d.reserved and d.memory.private_tokens <= 0:
                raise ValueError(
                    f"trajectory {job.index} needs {need:.0f} KV tokens, more than a decode worker holds"
                    f" ({d.memory.capacity_tokens:.0f})"
                )
            return False
        d.prealloc.popleft()
        t = self.trajectories[job.index]
        cached = d.memory.lock(job.index, match) if match else 0.0
        kv = job.prompt_tokens - cached
        d.memory.private_tokens += kv
        d.reserved[job.index] = kv
        t.decode_worker, t.decode_cached = worker, cached
        if not self.prefillers[prefiller].alive:  # its prefill worker left meanwhile: route it again
            alive = [w for w, p in enumerate(self.prefillers) if p.alive]
            if not alive:
                self._unreserve(job.index)
                self.parked.append(job)
                return True
            prefiller = self.prefill_router.route(
                job.index, job.prompt_tokens, self.now, [(w, self._load(w)) for w in alive], self._report
            )
            self.prefillers[prefiller].in_flight += 1
        self.prefillers[prefiller].queue.append(job)
        self._start_prefill(prefiller)
        return True

    def _unreserve(self, index: int) -> None:
        """PD: give back a preallocation whose request will be prefilled again (its prefill worker left)."""
        t = self.trajectories[index]
        d = self.decoders[t.decode_worker] if t.decode_worker >= 0 else None
        if d is None or index not in d.reserved:
            return
        d.advance(self.now)
        d.memory.private_tokens -= d.reserved.pop(index)
        d.memory.release(index, d.memory.matched(index), 0.0)
        t.decode_cached = 0.0
        self._reschedule(t.decode_worker)

    @staticmethod
    def _to_generate(t: _Trajectory) -> int:
        return t.remaining if t.remaining is not None else t.spec.turns[t.turn].generated_tokens

    def _place(self, index: int, worker: int, private: float, *, reschedule: bool = True) -> None:
        t = self.trajectories[index]
        d = self.decoders[worker]
        d.advance(self.now)
        tokens = self._to_generate(t)
        finish = d.clock + tokens
        d.active[index] = finish
        heapq.heappush(d.finishing, (finish, index))
        c = _Charge(tokens, d.clock, private, t.context + tokens / 2, self._max_new(t.context))
        d.charge[index] = c
        if c.max_new - c.tokens < CLIP_MAX_NEW_TOKENS:
            d.unclipped.add(index)
        d.kv_base += private - d.clock
        d.context_total += c.share
        if reschedule:
            self._reschedule(worker)

    def _reschedule(self, worker: int) -> None:
        """The decode batch's next event: a sequence finishing, or the pool running out (a retraction)."""
        d = self.decoders[worker]
        d.rerate()
        d.version += 1
        finish = d.next_finish()
        if finish is None or d.paused:
            return
        n = len(d.active)
        target = finish
        if math.isfinite(d.memory.capacity_tokens):  # pinned + n·clock reaches capacity − n at clock*
            base = d.memory.locked_tokens + d.memory.private_tokens + d.kv_base
            target = min(target, max(d.clock, (d.memory.capacity_tokens - base) / n))
        self._push(self.now + max(target - d.clock, 0.0) * d.tau, _Kind.DECODE_DONE, worker, d.version)

    def _decode_event(self, worker: int) -> None:
        d = self.decoders[worker]
        d.advance(self.now)
        while (finish := d.next_finish()) is not None and finish <= d.clock + 1e-9:
            _, index = heapq.heappop(d.finishing)
            self._end_turn(worker, index)
        if d.active and d.memory.available(d.kv()) < len(d.active) - 1e-6:  # check_decode_mem fails
            self._retract(worker)
        self._reschedule(worker)
        if self.colocated:
            self._start_prefill(worker)
        else:
            self._admit(worker)

    def _end_turn(self, worker: int, index: int) -> None:
        d = self.decoders[worker]
        c = d.drop(index)
        t = self.trajectories[index]
        self._finish_turn(index, c.tokens)
        # cache_finished_req: the whole sequence goes into the radix cache (PD decode: only with the flag)
        d.memory.release(index, t.context, c.private + c.tokens)

    def _finish_turn(self, index: int, tokens: int) -> None:
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

    def _retract(self, worker: int) -> None:
        """Free decode requests the way SGLang's ScheduleBatch.retract_decode does.

        Frees the fewest-output (then longest-input) requests until the rest can run ``RETRACT_DECODE_STEPS`` more
        steps; colocated ones are re-prefilled later (their matched prefix stays cached), PD decode ones are
        offloaded to host memory and resumed first (disaggregation/decode.py).
        """
        d = self.decoders[worker]
        order = sorted(d.active, key=lambda i: (d.out(i), -self.trajectories[i].context, i), reverse=True)
        first = True
        while order and (first or d.memory.available(d.kv()) < RETRACT_DECODE_STEPS * len(order)):
            if len(order) == 1:  # SGLang keeps the last request; it must fit alone
                if d.memory.available(d.kv()) < 1 - 1e-6:
                    raise ValueError(
                        f"trajectory {order[0]} needs more KV tokens than a worker holds"
                        f" ({d.memory.capacity_tokens:.0f})"
                    )
                break
            first = False
            index = order.pop()
            out = d.out(index)
            c = d.drop(index)
            t = self.trajectories[index]
            t.context += out
            self.generated += out
            t.remaining = c.tokens - out
            self.retractions += 1
            d.memory.release(index, d.memory.matched(index), 0.0)  # the matched prefix stays in the tree
            if self.colocated:
                p = self.prefillers[worker]
                p.queue.append(_Job(index, t.context))
            else:
                d.retracted.append(index)
        if d.active:
            total_out = sum(d.out(i) for i in d.active)
            total_max = sum(c.max_new for c in d.charge.values())
            d.ratio0 = min(1.0, (total_out + RETRACT_DECODE_STEPS * len(d.active)) / total_max)
            d.ratio_clock = d.clock

    # -- workers joining and leaving ------------------------------------------------------------------------
    def _change(self, change: PoolChange) -> None:
        colocated = self.colocated
        if colocated and (
            change.add_prefill
            or change.add_decode
            or change.remove_prefill
            or change.remove_decode
            or change.add_prefill_engines
            or change.add_decode_engines
        ):
            raise ValueError("a colocated pool changes by colocated workers only")
        if not colocated and (change.add_colocated or change.remove_colocated or change.add_colocated_engines):
            raise ValueError("a disaggregated pool changes by prefill and decode workers only")
        self._add_workers(
            change.add_prefill + change.add_colocated,
            change.add_decode,
            change.add_prefill_engines + change.add_colocated_engines,
            change.add_decode_engines,
        )
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
        orphans, self.orphans = self.orphans, []
        alive = [w for w, d in enumerate(self.decoders) if d.alive]
        for index, private in orphans:
            if not alive:
                self.orphans.append((index, private))
                continue
            target = min(alive, key=lambda w: (self._decode_load(w), w))
            self.decoders[target].waiting.append((index, private))
        if not colocated:
            for w in alive:
                self._admit(w)

    def _remove_decoder(self, worker: int) -> list[_Job]:
        """Stop a decode worker; its sequences keep their partial turn and resubmit their prefix."""
        d = self.decoders[worker]
        if not d.alive:
            raise ValueError(f"decode worker {worker} has already left")
        d.advance(self.now)
        interrupted = []
        for index in list(d.active):
            out = d.out(index)
            c = d.drop(index)
            interrupted.append((index, c.tokens, out))
        d.finishing.clear()
        d.kv_base = d.context_total = 0.0
        d.alive = False
        d.version += 1
        jobs: list[_Job] = []
        for index, tokens, done in interrupted:
            t = self.trajectories[index]
            if done == tokens:
                self._finish_turn(index, tokens)
                continue
            t.context += done  # the partial turn is kept ...
            self.generated += done
            t.remaining = tokens - done
            jobs.append(_Job(index, t.context))  # ... and its whole prefix is prefilled again elsewhere
        waiting = [i for i, _ in d.waiting] + list(d.retracted)
        d.waiting.clear()
        d.retracted.clear()
        d.reserved.clear()  # requests preallocated here find another decode worker when their KV is sent
        for job, prefiller in d.prealloc:  # not prefilled yet: routed again from the start
            self.prefillers[prefiller].in_flight -= 1
            jobs.append(_Job(job.index, job.prompt_tokens))
        d.prealloc.clear()
        for index in waiting:  # KV that was here (or offloaded from here) is lost: prefill it again
            jobs.append(_Job(index, self.trajectories[index].context))
        return jobs

    def _remove_prefiller(self, worker: int) -> list[_Job]:
        """Stop a prefill worker; its queued and running jobs go back to be placed elsewhere."""
        p = self.prefillers[worker]
        if not p.alive:
            raise ValueError(f"prefill worker {worker} has already left")
        self._release_holds(worker)
        jobs = [job for job, _ in p.running or []] + list(p.queue)
        seen: set[int] = set()
        fresh: list[_Job] = []
        for job in jobs:
            if id(job) in seen:
                continue
            seen.add(id(job))
            self._unreserve(job.index)  # it is preallocated again where it is routed next
            fresh.append(_Job(job.index, job.prompt_tokens))  # its KV here is lost with the worker
        p.queue.clear()
        p.running = None
        p.in_flight = 0
        p.alive = False
        p.version += 1
        return fresh


def _shared_prompts(trajectories: Sequence[TrajectorySpec]) -> dict[int, tuple[int, float]]:
    """Trajectory → (group key, shared prompt tokens) for the members of groups of two or more.

    Raises:
        ValueError: a group whose members' first prompts differ.
    """
    members: dict[int, list[int]] = {}
    for i, spec in enumerate(trajectories):
        if spec.group >= 0:
            members.setdefault(spec.group, []).append(i)
    out: dict[int, tuple[int, float]] = {}
    for group, indices in members.items():
        prompts = {trajectories[i].turns[0].appended_tokens for i in indices}
        if len(prompts) > 1:
            raise ValueError(f"group {group}'s trajectories start with different prompts ({sorted(prompts)} tokens)")
        if len(indices) > 1:
            shared = float(trajectories[indices[0]].turns[0].appended_tokens)
            out.update((i, (-(group + 1), shared)) for i in indices)
    return out


def _router_seeds(tie_seed: int | None) -> tuple[int | None, int | None]:
    """The prefill (or colocated) router's and the decode router's tie seeds: two streams from one seed."""
    return (None, None) if tie_seed is None else (2 * tie_seed, 2 * tie_seed + 1)


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
