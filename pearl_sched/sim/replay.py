"""Closed-loop serving benchmarks replayed on one simulated SGLang server, for validating step times.

A benchmark row (ISL, OSL, concurrency ``C``) is ``C`` clients sharing a list of requests: each client sends the
next request of the list (``max_new_tokens`` = its output length, EOS ignored), waits for the whole answer, then
sends the next — as ``sglang.bench_serving`` / vLLM's ``benchmark_serving.py --max-concurrency C --request-rate inf``
run it. Request lengths are drawn as those harnesses' ``random`` dataset draws them: uniform integers in
``[int(ISL × range_ratio), ISL]`` and ``[int(OSL × range_ratio), OSL]`` (``range_ratio`` 1: every request exactly
ISL / OSL). Unequal lengths de-synchronise the clients after the first burst, so later prompts arrive while others
decode. :func:`replay_closed_loop` plays that on one worker with SGLang's
default scheduling (``python/sglang/srt/managers/scheduler.py`` and ``schedule_policy.py``):

* **prefill first**: every iteration first tries to build a prefill batch from the waiting queue (FCFS); only when
  none can be built does the running batch decode one token. Decode and prefill do not share a forward pass
  (SGLang's ``--enable-mixed-chunk`` is off by default; ``mixed_chunk=True`` runs them together through
  ``StepTimes.mixed_s``).
* **chunked prefill**: a prefill batch takes at most ``chunked_prefill_size`` new tokens (and ``max_prefill_tokens``);
  a prompt longer than what is left is cut and continued in the next prefill batch (one chunked request at a time).
* **admission against the KV pool** (``PrefillAdder.add_one_req``): a request is admitted when its whole
  remaining prompt plus ``min(max_new_tokens, 4096)`` (the clip, *not* scaled by the ratio) is below what the pool
  has left after reserving ``min(remaining new tokens, 4096) × new_token_ratio`` for every running request and the
  full clip for each request already admitted to the same batch; a chunked prompt's later chunks are not checked
  again (``add_chunked_req``). The ratio starts at 0.7, decays per decode step to ``0.7 × 0.14`` over 600 steps
  (SGLang's ``init/min_new_token_ratio`` and ``new_token_ratio_decay`` at ``schedule_conservativeness`` 1). These
  constants and the chunk-size tiers are the ones :mod:`pearl_sched.sim.memory` defines for the simulator.
* **retraction**: when a decode step cannot get one KV slot per running request, the requests with the fewest
  generated tokens are retracted (their KV freed) until it can; they go back to the front of the queue and are
  prefilled again from scratch (prompt + what they had generated; no radix cache here) and the ratio is reset
  as SGLang's ``retract_decode`` resets it.
* **continuous batching**: requests leave the batch at their last token, new ones join after their prefill.

The measured quantities are the benchmark's: per request TTFT (arrival → first token, which the prefill step
emits), TPOT ((E2E − TTFT) / (output tokens − 1), over requests with more than one output token) and E2E, averaged
over every request of ``rounds × C``.
The scheduler is one class (:class:`SGLangDefaultScheduler`) so that the simulator's full SGLang world can replace it.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from pearl_sched.errors import PearlSchedError
from pearl_sched.sim.memory import (
    CLIP_MAX_NEW_TOKENS,
    INIT_NEW_TOKEN_RATIO,
    MIN_NEW_TOKEN_RATIO_FACTOR,
    NEW_TOKEN_RATIO_DECAY_STEPS,
    NUM_RESERVED_DECODE_TOKENS,
    RETRACT_DECODE_STEPS,
    default_chunked_prefill_size,
    default_cuda_graph_max_bs,
)
from pearl_sched.sim.steptimes import StepTimes

MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * MIN_NEW_TOKEN_RATIO_FACTOR
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / NEW_TOKEN_RATIO_DECAY_STEPS


class ReplayError(PearlSchedError, ValueError):
    """A benchmark row that cannot be replayed (one request does not fit the pool, bad sizes)."""


SGLANG_MAX_PREFILL_TOKENS = 16384
"""SGLang's default ``--max-prefill-tokens``."""

RECV_SKIPPER_WEIGHT_DECODE = 1
"""``SchedulerRecvSkipper``'s weight of an iteration whose last batch decoded, and of an idle one
(``SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_DECODE`` / ``_NONE``, 1 in SGLang 0.5.6.post2, 0.5.9 and 0.5.10.post1)."""
RECV_SKIPPER_WEIGHT_DEFAULT = 1000
"""Its weight after any other batch, a prefill (``EXTEND``) or a mixed one
(``SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_DEFAULT``, 1000): the next iteration always receives."""


def sglang_chunked_prefill_size(gpu_memory_bytes: float) -> int:
    """SGLang's default ``chunked_prefill_size`` by GPU memory (``memory.default_chunked_prefill_size``)."""
    return default_chunked_prefill_size(gpu_memory_bytes)


SGLANG_CAPTURE_LIST_CHANGED = (0, 5, 3)
"""The SGLang release whose default decode CUDA-graph batch sizes are :func:`sglang_cuda_graph_batch_sizes`'s
current list (``ServerArgs._generate_cuda_graph_batch_sizes``, first in the 0.5.3 wheel; 0.5.2 and 0.5.1.post1 still
build the list in ``cuda_graph_runner.get_batch_sizes_to_capture``)."""


def sglang_release(backend_version: str | None) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` of an SGLang version string (``0.5.1.post1`` → (0, 5, 1)).

    None when it names no release (empty, ``nightly-dev…``).
    """
    parts = (backend_version or "").split(".")
    if len(parts) < 3 or not all(part.isdigit() for part in parts[:2]):
        return None
    patch = "".join(itertools.takewhile(str.isdigit, parts[2]))
    return (int(parts[0]), int(parts[1]), int(patch)) if patch else None


def sglang_cuda_graph_batch_sizes(
    gpu_memory_bytes: float,
    tp: int,
    cuda_graph_max_bs: int | None = None,
    *,
    backend_version: str | None = None,
) -> tuple[int, ...]:
    """The decode batch sizes an SGLang server captures as CUDA graphs by default.

    SGLang 0.5.3 on (``ServerArgs._generate_cuda_graph_batch_sizes``, read in the 0.5.3, 0.5.5.post2, 0.5.6.post2,
    0.5.9 and 0.5.10.post1 wheels): ``[1, 2, 4, 8, 12] + range(16, 257, 8) + range(272, 512, 16) + range(512,
    cuda_graph_max_bs + 1, 32)``, capped at ``cuda_graph_max_bs`` (a launch's ``--cuda-graph-max-bs``; None:
    SGLang's default for the GPU memory and TP, :func:`pearl_sched.sim.memory.default_cuda_graph_max_bs`).

    Before 0.5.3 (``backend_version`` older than :data:`SGLANG_CAPTURE_LIST_CHANGED`;
    ``cuda_graph_runner.get_batch_sizes_to_capture`` in the 0.5.1.post1 and 0.5.2 wheels): ``[1, 2, 4, 8] +
    range(16, 161, 8)``, plus ``range(160, 257, 8)`` above 90 GiB and ``range(256, 513, 16)`` above 160 GB; a
    ``--cuda-graph-max-bs`` cuts the list there and, when the list stops below it, extends it by 16 up to it; the
    default sets none on GPUs of 35 GiB or more (below: 8 at TP < 4, else 80).

    A version that names no release (None, a nightly) gets the current list. A larger decode batch runs without a
    graph, unpadded. (SGLang also drops sizes above ``--max-running-requests``; the replay's batch never exceeds it.)
    """
    release = sglang_release(backend_version)
    if release is not None and release < SGLANG_CAPTURE_LIST_CHANGED:
        sizes = [1, 2, 4, 8, *range(16, 161, 8)]
        mib = gpu_memory_bytes / 2**20
        if mib > 90 * 1024:
            sizes += list(range(160, 257, 8))
        if mib > 160 * 1000:
            sizes += list(range(256, 513, 16))
        cap = cuda_graph_max_bs
        if cap is None and mib < 35 * 1024:
            cap = 8 if tp < 4 else 80
        if cap:
            sizes = [size for size in sizes if size <= cap]
            if max(sizes) < cap:
                sizes += list(range(max(sizes), cap + 1, 16))
        return tuple(sorted(set(sizes)))
    cap = default_cuda_graph_max_bs(gpu_memory_bytes, tp) if cuda_graph_max_bs is None else cuda_graph_max_bs
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, cap + 1, 32)]
    return tuple(size for size in sizes if size <= cap)


@dataclass(eq=False)
class _Request:
    rid: int
    arrival_s: float
    target: int  # tokens to prefill: the prompt, or prompt + generated after a retraction
    osl: int  # max_new_tokens (EOS ignored)
    first_token_s: float = -1.0
    prefilled: int = 0
    generated: int = 0  # at join
    kv: int = 0  # KV tokens held, at join (while prefilling: exact)
    join_iter: int = 0
    finish_iter: int = 0
    live: bool = False


@dataclass
class ReplayResult:
    """Means over every request of a replay, in seconds, and what happened on the way."""

    ttft_s: float
    tpot_s: float
    e2e_s: float
    requests: int
    retractions: int
    prefill_steps: int
    decode_steps: int
    max_used_tokens: int
    pool_tokens: int
    per_request: list[tuple[float, float, float]] = field(default_factory=list)
    """(TTFT, TPOT, E2E) seconds of each request in the order it was sent (TPOT NaN for one output token)."""


@dataclass
class SGLangDefaultScheduler:
    """One SGLang worker's iteration loop under its default policies (see the module docstring).

    Running requests advance lazily: a request that joined the decode batch at decode iteration ``j`` with ``g``
    tokens generated and ``k`` KV tokens has ``g + (i - j)`` and ``k + (i - j)`` at iteration ``i``, so a decode step
    costs O(1) in the batch size.
    """

    steps: StepTimes
    pool_tokens: int
    chunked_prefill_size: int = 8192
    max_prefill_tokens: int = 16384
    max_running_requests: int = 4096
    mixed_chunk: bool = False
    new_token_ratio: float = INIT_NEW_TOKEN_RATIO
    decode_budget: bool = False  # the decode batch's tokens count against the step's token budget (vLLM)
    reserve_new_tokens: bool = True  # admission reserves room for answers (SGLang); vLLM allocates on demand
    cuda_graph_bs: tuple[int, ...] = ()  # captured decode batch sizes (ascending); empty: no padding
    scheduler_recv_interval: int = 1  # --scheduler-recv-interval: new requests are received every N decode iterations
    waiting: deque[_Request] = field(default_factory=deque)
    running: dict[int, _Request] = field(default_factory=dict)
    chunked: _Request | None = None
    used_tokens: int = 0
    decode_iter: int = 0
    retractions: int = 0
    _kv_base: int = 0  # Σ (kv - join_iter) over running
    _gen_base: int = 0  # Σ (generated - join_iter) over running
    _osl_sum: int = 0  # Σ osl over running
    _long: int = 0  # running requests with osl above CLIP_MAX_NEW_TOKENS
    _finish: list[tuple[int, int, _Request]] = field(default_factory=list)

    def generated(self, req: _Request) -> int:
        """Tokens ``req`` has generated so far."""
        return req.generated + (self.decode_iter - req.join_iter) if req.live else req.generated

    def kv(self, req: _Request) -> int:
        """KV tokens ``req`` holds now."""
        return req.kv + (self.decode_iter - req.join_iter) if req.live else req.kv

    def graph_batch(self, batch: int) -> int:
        """The batch a decode step runs at: padded up to the next captured CUDA-graph size, if one is that large."""
        index = bisect.bisect_left(self.cuda_graph_bs, batch)
        return self.cuda_graph_bs[index] if index < len(self.cuda_graph_bs) else batch

    def mean_context(self) -> float:
        """Mean KV tokens per running request."""
        return self._kv_base / len(self.running) + self.decode_iter

    def _reserved(self) -> float:
        if self.new_token_ratio == 0:
            return 0.0
        n = len(self.running)
        if not self._long:
            remaining = self._osl_sum - (self._gen_base + n * self.decode_iter)
        else:
            remaining = sum(min(r.osl - self.generated(r), CLIP_MAX_NEW_TOKENS) for r in self.running.values())
        return remaining * self.new_token_ratio

    def build_prefill(self) -> list[tuple[_Request, int, int]]:
        """(request, new tokens, cached tokens) of the next prefill batch, allocating their KV; empty if none."""
        if self.chunked is None and not self.waiting:
            return []
        batch: list[tuple[_Request, int, int]] = []
        rem_chunk = self.chunked_prefill_size
        rem_input = self.max_prefill_tokens
        rem_total = self.pool_tokens - self.used_tokens - self._reserved()
        queue = ([self.chunked] if self.chunked is not None else []) + list(self.waiting)
        for req in queue:
            if rem_chunk <= 0 or rem_input <= 0:
                break
            continuing = req is self.chunked
            if not continuing and len(self.running) + len(batch) >= self.max_running_requests:
                break
            left = req.target - req.prefilled
            take = min(left, rem_chunk, rem_input)
            if continuing:  # add_chunked_req: the next chunk is cut to what the pool has left
                take = min(take, int(rem_total))
                if take <= 0:
                    break
            reserve = float(min(req.osl - req.generated, CLIP_MAX_NEW_TOKENS)) if self.reserve_new_tokens else 0.0
            # PrefillAdder.add_one_req: the whole remaining prompt plus the clipped answer must fit (a chunked
            # request's later chunks are added without the check: add_chunked_req)
            if not continuing and (left + reserve >= rem_total if self.reserve_new_tokens else take > rem_total):
                break
            batch.append((req, take, req.prefilled))
            rem_chunk -= take
            rem_input -= take
            rem_total -= take + (reserve if take == left else 0.0)
            if take < left:
                break  # one chunked request, and it ends the batch
        for req, take, _ in batch:
            if req is not self.chunked:
                self.waiting.popleft()
            req.kv += take
            self.used_tokens += take
        if batch and batch[0][0] is self.chunked:
            self.chunked = None  # the loop sets it again if this chunk does not finish the prompt
        return batch

    def join(self, req: _Request) -> None:
        """``req`` finished its prefill (which sampled one token) and joins the decode batch."""
        req.generated += 1
        req.join_iter = self.decode_iter
        req.finish_iter = self.decode_iter + req.osl - req.generated
        req.live = True
        self.running[id(req)] = req
        self._kv_base += req.kv - req.join_iter
        self._gen_base += req.generated - req.join_iter
        self._osl_sum += req.osl
        self._long += req.osl > CLIP_MAX_NEW_TOKENS
        heapq.heappush(self._finish, (req.finish_iter, req.rid, req))

    def _leave(self, req: _Request) -> None:
        self._kv_base -= req.kv - req.join_iter
        self._gen_base -= req.generated - req.join_iter
        self._osl_sum -= req.osl
        self._long -= req.osl > CLIP_MAX_NEW_TOKENS
        req.generated, req.kv = self.generated(req), self.kv(req)
        req.live = False
        del self.running[id(req)]
        self.used_tokens -= req.kv

    def decode_step(self) -> None:
        """Account one decode iteration (one token per running request)."""
        self.used_tokens += len(self.running)
        self.decode_iter += 1
        if self.new_token_ratio > 0:
            self.new_token_ratio = max(MIN_NEW_TOKEN_RATIO, self.new_token_ratio - NEW_TOKEN_RATIO_DECAY)

    def finished(self) -> list[_Request]:
        """Requests whose last token came out, removed from the batch and their KV freed."""
        out = []
        while self._finish and self._finish[0][0] <= self.decode_iter:
            _, _, req = heapq.heappop(self._finish)
            if req.live and req.finish_iter <= self.decode_iter:
                self._leave(req)
                out.append(req)
        return out

    def retract(self) -> int:
        """Free the least advanced running requests until every one can take one more token; requeue them."""
        if self.pool_tokens - self.used_tokens >= len(self.running):
            return 0
        order = sorted(self.running.values(), key=lambda r: (self.generated(r), -r.target), reverse=True)
        victims = []
        while order and self.pool_tokens - self.used_tokens < len(self.running):
            victim = order.pop()
            self._leave(victim)
            victim.target = victim.target - victim.prefilled + victim.kv  # recompute everything it held
            victim.prefilled = victim.kv = 0
            victims.append(victim)
        for victim in reversed(victims):
            self.waiting.appendleft(victim)
        self.retractions += len(victims)
        if self.running and self.new_token_ratio > 0:
            decoded = sum(self.generated(r) for r in self.running.values())
            self.new_token_ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self.running)) / self._osl_sum)
        return len(victims)


def benchmark_lengths(length: int, count: int, range_ratio: float, rng: np.random.RandomState) -> list[int]:
    """``count`` lengths as the benchmark harnesses' ``random`` dataset draws them.

    vLLM's ``benchmark_serving.py`` (``sample_random_requests``) and ``sglang.bench_serving``: uniform integers in
    ``[int(length × range_ratio), length]``; ``range_ratio`` 1 gives ``length`` every time.
    """
    if not 0.0 < range_ratio <= 1.0:
        raise ReplayError(f"range_ratio must be in (0, 1], got {range_ratio}")
    lower = max(int(length * range_ratio), 1)
    if lower >= length:
        return [length] * count
    return [int(x) for x in rng.randint(lower, length + 1, size=count)]


def replay_closed_loop(
    steps: StepTimes,
    *,
    isl: int,
    osl: int,
    concurrency: int,
    pool_tokens: int,
    chunked_prefill_size: int = 8192,
    max_prefill_tokens: int = 16384,
    max_running_requests: int = 4096,
    rounds: int = 5,
    mixed_chunk: bool = False,
    range_ratio: float = 1.0,
    seed: int = 0,
    cuda_graph_bs: tuple[int, ...] = (),
    scheduler_recv_interval: int = 1,
) -> ReplayResult:
    """Replay ``concurrency`` closed-loop clients sending ``rounds × concurrency`` requests on one worker.

    Input and output lengths are drawn per request by :func:`benchmark_lengths` with ``range_ratio`` (1: exactly
    ``isl`` / ``osl``), seeded by ``seed``. The first ``concurrency`` requests arrive together at time 0 (the
    harness's warm-up requests have finished before its measured run starts). ``cuda_graph_bs``: the decode batch
    sizes the server captured as CUDA graphs (:func:`sglang_cuda_graph_batch_sizes`); a decode step runs padded to
    the next one (none: the batch as it is). ``scheduler_recv_interval``: SGLang's ``--scheduler-recv-interval``
    (``SchedulerRecvSkipper``, ``managers/scheduler_recv_skipper.py`` in 0.5.6.post2, 0.5.9 and 0.5.10.post1): the
    scheduler reads new requests from its socket only when a counter reaches it; every iteration adds
    :data:`RECV_SKIPPER_WEIGHT_DECODE` after a decode batch or an idle loop and :data:`RECV_SKIPPER_WEIGHT_DEFAULT`
    after a prefill, so a request a client sends while the server decodes waits for up to that many decode steps
    before it can be prefilled (its TTFT counts the wait); an idle server spins through the count at once. 1 (the
    default): every iteration receives.

    Raises:
        ReplayError: sizes that are not positive, or one request's prompt + answer larger than the pool.
    """
    if isl <= 0 or osl <= 0 or concurrency <= 0 or rounds <= 0:
        raise ReplayError(f"isl, osl, concurrency and rounds must be positive, got {isl}, {osl}, {concurrency}")
    sched = SGLangDefaultScheduler(
        steps,
        pool_tokens,
        chunked_prefill_size=chunked_prefill_size,
        max_prefill_tokens=max_prefill_tokens,
        max_running_requests=max_running_requests,
        mixed_chunk=mixed_chunk,
        cuda_graph_bs=tuple(sorted(cuda_graph_bs)),
        scheduler_recv_interval=scheduler_recv_interval,
    )
    total = rounds * concurrency
    rng = np.random.RandomState(seed)
    isls = benchmark_lengths(isl, total, range_ratio, rng)
    osls = benchmark_lengths(osl, total, range_ratio, rng)
    return _drive(sched, [(0.0, i, o) for i, o in zip(isls, osls, strict=True)], total, concurrency=concurrency)


def replay_open_loop(
    steps: StepTimes,
    requests: list[tuple[float, int, int]],
    *,
    pool_tokens: int,
    policy: str = "sglang",
    max_num_batched_tokens: int = 8192,
    max_running_requests: int = 4096,
) -> ReplayResult:
    """Replay requests ``(arrival_s, input_tokens, output_tokens)`` arriving open-loop on one worker.

    ``policy="sglang"`` schedules as the module docstring says. ``policy="vllm-v1"`` approximates vLLM's V1
    scheduler: every step runs the decode batch and spends what is left of ``max_num_batched_tokens`` on chunked
    prefill in the same forward pass (``StepTimes.mixed_s``); KV is allocated on demand with no reservation for
    future tokens, and when a decode cannot get its slot the least advanced request is preempted and recomputed
    (vLLM's recompute preemption).

    Raises:
        ReplayError: an empty or impossible request list, or an unknown policy.
    """
    if not requests or any(isl <= 0 or osl <= 0 or at < 0 for at, isl, osl in requests):
        raise ReplayError("requests must be (arrival_s >= 0, input_tokens > 0, output_tokens > 0)")
    if policy not in ("sglang", "vllm-v1"):
        raise ReplayError(f"unknown policy {policy!r}; known: sglang, vllm-v1")
    vllm = policy == "vllm-v1"
    sched = SGLangDefaultScheduler(
        steps,
        pool_tokens,
        chunked_prefill_size=max_num_batched_tokens,
        max_prefill_tokens=max_num_batched_tokens,
        max_running_requests=max_running_requests,
        mixed_chunk=vllm,
        new_token_ratio=0.0 if vllm else INIT_NEW_TOKEN_RATIO,
        decode_budget=vllm,
        reserve_new_tokens=not vllm,
    )
    return _drive(sched, sorted(requests), len(requests), concurrency=None)


def _drive(
    sched: SGLangDefaultScheduler,
    arrivals: list[tuple[float, int, int]],
    total: int,
    *,
    concurrency: int | None,
) -> ReplayResult:
    """Run ``arrivals`` to completion: open loop at their times, or closed loop with ``concurrency`` clients."""
    steps = sched.steps
    for _, isl, osl in arrivals:
        reserve = min(osl, CLIP_MAX_NEW_TOKENS) if sched.reserve_new_tokens else 0
        if isl + osl > sched.pool_tokens or isl + reserve >= sched.pool_tokens:
            raise ReplayError(
                f"one request ({isl}+{osl} tokens) does not fit the KV pool of {sched.pool_tokens} tokens"
            )
    pending = deque(arrivals)
    inbox: deque[_Request] = deque()  # sent by a client, not yet received by the scheduler (recv interval > 1)
    recv_counter = 0
    recv_weight = 0  # the SchedulerRecvSkipper weight of the last forward, not yet counted
    per_request: list[tuple[float, float, float]] = [(math.nan, math.nan, math.nan)] * total
    sent = done = timed = prefill_steps = decode_steps = max_used = 0
    now = ttft_sum = tpot_sum = e2e_sum = 0.0

    def admit_arrivals() -> None:
        nonlocal sent
        while pending and pending[0][0] <= now:
            at, isl, osl = pending.popleft()
            sched.waiting.append(_Request(sent, at, isl, osl))
            sent += 1

    closed_loop = concurrency is not None
    if closed_loop:
        for _ in range(min(concurrency or 0, total)):
            _, isl, osl = pending.popleft()
            sched.waiting.append(_Request(sent, 0.0, isl, osl))
            sent += 1
    while done < total:
        if not closed_loop:
            admit_arrivals()
        if sched.scheduler_recv_interval > 1:
            recv_counter += recv_weight
            recv_weight = 0
            idle = not sched.running and not sched.waiting and sched.chunked is None
            if recv_counter >= sched.scheduler_recv_interval or (idle and inbox):
                recv_counter = 0  # an idle loop spins through the count in no time
                sched.waiting.extend(inbox)
                inbox.clear()
        if sched.decode_budget:
            # vLLM: the running requests are scheduled first (their KV slot, their token of the budget)
            if sched.retract():
                continue
            n_run = len(sched.running)
            sched.chunked_prefill_size = max(sched.max_prefill_tokens - n_run, 0)
            sched.used_tokens += n_run
            batch = sched.build_prefill()
            sched.used_tokens -= n_run
        else:
            n_run = len(sched.running)
            batch = sched.build_prefill()
        if batch:
            new = sum(take for _, take, _ in batch)
            cached = sum(c for _, _, c in batch) / len(batch)
            if sched.mixed_chunk and n_run and sched.pool_tokens - sched.used_tokens < n_run:
                sched.retract()  # SGLang's mixed chunk: the decode part still needs its slots
                n_run = len(sched.running)
            if sched.mixed_chunk and n_run:
                now += steps.mixed_s(new, len(batch), cached, n_run, sched.mean_context())
                sched.decode_step()
                decode_steps += 1
            else:
                now += steps.prefill_s(new, len(batch), cached)
            prefill_steps += 1
            recv_weight = RECV_SKIPPER_WEIGHT_DEFAULT
            for req, take, _ in batch:
                req.prefilled += take
                if req.prefilled < req.target:
                    sched.chunked = req
                    continue
                if req.first_token_s < 0:
                    req.first_token_s = now
                sched.join(req)
        elif not sched.running:
            if not closed_loop and pending and not sched.waiting and sched.chunked is None:
                now = max(now, pending[0][0])  # idle until the next arrival
                continue
            raise ReplayError("nothing runs and nothing can be admitted: the pool is too small for one request")
        elif sched.retract():
            continue
        else:
            now += steps.decode_s(sched.graph_batch(len(sched.running)), sched.mean_context())
            sched.decode_step()
            decode_steps += 1
            recv_weight = RECV_SKIPPER_WEIGHT_DECODE
        max_used = max(max_used, sched.used_tokens)
        for req in sched.finished():
            ttft = req.first_token_s - req.arrival_s
            e2e = now - req.arrival_s
            ttft_sum += ttft
            e2e_sum += e2e
            tpot = (e2e - ttft) / (req.osl - 1) if req.osl > 1 else math.nan
            if req.osl > 1:  # benchmark_serving: TPOT only over requests with more than one output token
                tpot_sum += tpot
                timed += 1
            per_request[req.rid] = (ttft, tpot, e2e)
            done += 1
            if closed_loop and pending:
                _, isl, osl = pending.popleft()
                (inbox if sched.scheduler_recv_interval > 1 else sched.waiting).append(_Request(sent, now, isl, osl))
                sent += 1
    return ReplayResult(
        ttft_s=ttft_sum / total,
        tpot_s=tpot_sum / timed if timed else 0.0,
        e2e_s=e2e_sum / total,
        requests=total,
        retractions=sched.retractions,
        prefill_steps=prefill_steps,
        decode_steps=decode_steps,
        max_used_tokens=max_used,
        pool_tokens=sched.pool_tokens,
        per_request=per_request,
    )


# -- disaggregated (PD) serving benchmarks --------------------------------------------------------------------------


@dataclass(frozen=True)
class PDRole:
    """One role of a disaggregated deployment: ``workers`` engines of ``ranks`` attention-DP ranks each.

    Attributes:
        steps: One rank's step times (aiconfigurator-core's batch is per rank with attention-DP).
        workers: Engines of this role (``--disaggregation-mode prefill`` or ``decode`` servers).
        ranks: Attention-DP ranks per engine (``--dp-size`` with ``--enable-dp-attention``; 1: plain TP).
        pool_tokens: One rank's KV pool in tokens.
        chunked_prefill_size: ``--chunked-prefill-size`` (prefill role).
        max_prefill_tokens: ``--max-prefill-tokens`` (prefill role).
        cuda_graph_bs: Captured decode batch sizes (decode role; empty: no padding).
        kv_bytes_per_token: KV bytes one rank holds per token, over all its GPUs (what crosses the link).
        link_bytes_per_s: One rank's P→D bandwidth (its GPUs' links together), prefill role.
        max_running_requests: One rank's ``--max-running-requests`` (``// --dp-size`` with attention-DP): the most
            requests in one prefill batch, and in a decode rank's running batch (transferred requests beyond it
            wait, holding their KV, until a slot frees: ``get_new_prebuilt_batch``). None: no cap.
        prebuilt_step: Decode role of SGLang 0.5.5–0.5.9: a rank whose newly transferred (or resumed) requests
            enter its batch spends that scheduler iteration on them, so its running requests skip the step; with
            attention-DP the rank runs an idle forward for the other ranks' step (False: SGLang ≥ 0.5.10, which
            merges them and decodes in the same iteration).
        scheduler_recv_interval: Decode role: SGLang's ``--scheduler-recv-interval`` (``SchedulerRecvSkipper``,
            which ``recv_requests`` consults in ``event_loop_normal_disagg_decode`` / ``_overlap_`` too, SGLang
            0.5.5.post2-0.5.10.post1): while the engine decodes, a new request waits, before its preallocation, until
            the decode iterations since the last receive reach the interval (weight 1 each); the iteration after a
            prebuilt one (weight 1,000) and an idle engine (its loop spins through the count) receive at once.
            The skipper refuses attention-DP (it asserts ``not enable_dp_attention``). A prefill engine's every
            forward weighs 1,000 and its idle loop spins, so it receives every iteration either way: not modelled
            there. 1: every iteration receives (SGLang's default).
    """

    steps: StepTimes
    workers: int
    ranks: int
    pool_tokens: int
    chunked_prefill_size: int = 8192
    max_prefill_tokens: int = 16384
    cuda_graph_bs: tuple[int, ...] = ()
    kv_bytes_per_token: float = 0.0
    link_bytes_per_s: float = math.inf
    max_running_requests: int | None = None
    prebuilt_step: bool = False
    scheduler_recv_interval: int = 1


@dataclass
class DisaggReplayResult(ReplayResult):
    """A PD replay's means, plus what crossed the link and how the requests spread over the ranks."""

    transferred_bytes: float = 0.0
    """KV bytes sent prefill → decode: every request's whole prompt × ``kv_bytes_per_token``."""
    prefill_rank_requests: list[int] = field(default_factory=list)
    """Requests prefilled by each prefill rank (worker-major)."""
    decode_rank_requests: list[int] = field(default_factory=list)
    """Requests decoded by each decode rank (worker-major)."""
    max_decode_rank_batch: int = 0
    """The largest batch one decode rank ran (the step time of a lock-step engine is set by it)."""
    prealloc_wait_s: float = 0.0
    """Mean seconds from a request's arrival to its decode preallocation (``DecodePreallocQueue``)."""
    prefill_queue_s: float = 0.0
    """Mean seconds from the preallocation to the start of the request's first prefill chunk."""
    prefill_run_s: float = 0.0
    """Mean seconds from the first prefill chunk's start to the last one's end."""
    transfer_s: float = 0.0
    """Mean seconds from the end of the prefill to the KV's arrival (waiting for the link included)."""
    join_wait_s: float = 0.0
    """Mean seconds from the KV's arrival to the request joining its decode batch (the first token).

    The five phases add up to :attr:`ttft_s`."""
    resumes: int = 0
    """Retracted (offloaded) requests brought back into a decode batch (each retraction is one offload)."""
    skipped_rank_steps: int = 0
    """Decode steps a rank with running requests sat out on a prebuilt iteration (:attr:`PDRole.prebuilt_step`)."""
    makespan_s: float = 0.0
    """Seconds from the first arrival to the last request's end."""
    prefill_busy: float = 0.0
    """Fraction of the makespan the prefill engines spent stepping (mean over engines)."""
    decode_busy: float = 0.0
    """Fraction of the makespan the decode engines spent stepping (mean over engines)."""
    mean_decode_rank_batch: float = 0.0
    """Mean over decode steps of the busiest rank's batch (before CUDA-graph padding)."""


@dataclass(eq=False)
class _PDRequest:
    rid: int
    arrival_s: float
    isl: int
    osl: int
    room: int  # SGLang's bootstrap_room: picks the attention-DP rank on both sides
    prefill_rank: int = 0
    decode_rank: int = 0
    req: _Request | None = None
    prealloc_s: float = math.nan  # when the decode rank preallocated its KV
    prefill_start_s: float = math.nan  # its first prefill chunk's start
    prefill_end_s: float = math.nan
    transfer_end_s: float = math.nan


@dataclass
class _DecodeRank:
    sched: SGLangDefaultScheduler
    reserved_tokens: int = 0  # KV preallocated for requests not yet arrived
    reserved: int = 0  # how many
    prealloc: deque[_PDRequest] = field(default_factory=deque)  # waiting for a preallocation
    arrived: deque[_PDRequest] = field(default_factory=deque)  # KV transferred, joins at the next step
    resume: deque[_Request] = field(default_factory=deque)  # retracted (offloaded), resumed first
    inbox: deque[_PDRequest] = field(default_factory=deque)  # sent, not yet received (--scheduler-recv-interval)


def replay_disagg_closed_loop(
    prefill: PDRole,
    decode: PDRole,
    *,
    isl: int,
    osl: int,
    concurrency: int,
    rounds: int = 5,
    range_ratio: float = 1.0,
    seed: int = 0,
) -> DisaggReplayResult:
    """Replay ``concurrency`` closed-loop clients on a disaggregated deployment (SGLang PD).

    Each request, as SGLang's PD mode and its router handle it:

    * the router picks a prefill and a decode engine (round robin over each role's engines) and a random
      ``bootstrap_room``; on both sides the engine's DP controller sends it to rank ``room % ranks``
      (``follow_bootstrap_room``, the PD default);
    * the decode rank preallocates the prompt's KV before the prefill runs (``DecodePreallocQueue``): FCFS, when
      its pool has room for the prompt plus ``--num-reserved-decode-tokens`` for it and every running or
      preallocated request; until then the request waits;
    * the prefill rank prefills it (FCFS, chunked as in :class:`SGLangDefaultScheduler`; no answer reservation:
      ``PrefillBootstrapQueue._process_req`` sets ``max_new_tokens = 1`` for the ``PrefillAdder`` estimate) and
      holds its KV until the transfer ends; the prompt's whole KV (``isl × kv_bytes_per_token``) crosses the
      rank's link, FCFS;
    * the request joins the decode rank's batch at its next step with its first token (the one the prefill
      sampled; TTFT ends there) and decodes the rest; a decode rank short of KV retracts its least advanced
      requests, which are offloaded and resumed first, without a new prefill;
    * with ``decode.prebuilt_step`` (SGLang 0.5.5–0.5.9, ``get_next_disagg_decode_batch_to_run``: a new prebuilt
      batch is run *instead of* the running batch, and merged into it at the next iteration), a rank of an
      attention-DP engine whose requests joined runs no decode that step: it takes part in the other ranks' step
      with an idle forward (``prepare_mlp_sync_batch_raw``'s ``inner_idle_batch``), so its running requests wait
      one step. Where no rank that decodes has running requests, or the engine has one rank, the prebuilt
      iteration runs no forward and costs no step.

    An engine's ranks run in lock-step (the MoE layers' all-to-all): one step of a prefill engine lasts as long
    as its slowest rank's prefill batch; a decode step runs every rank at the largest rank batch, padded to the
    next captured CUDA-graph size (SGLang's ``cuda_graph_runner`` picks the graph for
    ``max(forward_batch.global_num_tokens_cpu)`` over the DP ranks), at the ranks' mean context.
    Lengths and the first arrivals as in :func:`replay_closed_loop`.

    Raises:
        ReplayError: sizes that are not positive, or one request larger than a rank's pool.
    """
    if isl <= 0 or osl <= 0 or concurrency <= 0 or rounds <= 0:
        raise ReplayError(f"isl, osl, concurrency and rounds must be positive, got {isl}, {osl}, {concurrency}")
    for role in (prefill, decode):
        if role.workers < 1 or role.ranks < 1 or role.pool_tokens <= 0:
            raise ReplayError("each PD role needs workers >= 1, ranks >= 1 and a positive KV pool")
    if decode.scheduler_recv_interval > 1 and decode.ranks > 1:
        raise ReplayError("SGLang's --scheduler-recv-interval does not run with attention-DP (SchedulerRecvSkipper)")
    total = rounds * concurrency
    rng = np.random.RandomState(seed)
    isls = benchmark_lengths(isl, total, range_ratio, rng)
    osls = benchmark_lengths(osl, total, range_ratio, rng)
    rooms = rng.randint(0, 2**31 - 1, size=total)
    if max(isls) + NUM_RESERVED_DECODE_TOKENS > decode.pool_tokens or max(isls) > prefill.pool_tokens:
        raise ReplayError(f"one prompt of {max(isls)} tokens does not fit a rank's KV pool")
    if max(i + o for i, o in zip(isls, osls, strict=True)) > decode.pool_tokens:
        raise ReplayError(f"one request does not fit a decode rank's KV pool of {decode.pool_tokens} tokens")

    p_ranks = [
        SGLangDefaultScheduler(
            prefill.steps,
            prefill.pool_tokens,
            chunked_prefill_size=prefill.chunked_prefill_size,
            max_prefill_tokens=prefill.max_prefill_tokens,
            reserve_new_tokens=False,
            new_token_ratio=0.0,
            max_running_requests=prefill.max_running_requests or SGLangDefaultScheduler.max_running_requests,
        )
        for _ in range(prefill.workers * prefill.ranks)
    ]
    d_ranks = [
        _DecodeRank(
            SGLangDefaultScheduler(decode.steps, decode.pool_tokens, cuda_graph_bs=tuple(sorted(decode.cuda_graph_bs)))
        )
        for _ in range(decode.workers * decode.ranks)
    ]
    link_free = [0.0] * len(p_ranks)
    p_busy = [False] * prefill.workers
    d_busy = [False] * decode.workers
    pd_of: dict[int, _PDRequest] = {}
    events: list[tuple[float, int, int, int]] = []  # (time, seq, kind, payload)
    seq = itertools.count()
    prefill_end, decode_end, transfer_end = 0, 1, 2
    per_request: list[tuple[float, float, float]] = [(math.nan, math.nan, math.nan)] * total
    counts_p = [0] * len(p_ranks)
    counts_d = [0] * len(d_ranks)
    sent = done = timed = prefill_steps = decode_steps = max_used = max_batch = retractions = resumes = skipped = 0
    ttft_sum = tpot_sum = e2e_sum = transferred = 0.0
    phase_sums = [0.0] * 5  # prealloc wait, prefill queue, prefill run, transfer, join wait
    prefill_busy_s = decode_busy_s = batch_sum = makespan = 0.0
    next_p = next_d = 0
    running_p: dict[int, list[list[tuple[_Request, int, int]]]] = {}
    prebuilt_of: dict[int, list[bool]] = {}  # decode worker -> its ranks on a prebuilt iteration this step
    recv_interval = decode.scheduler_recv_interval
    recv_count = [0] * decode.workers  # SchedulerRecvSkipper's counter of each decode engine

    def decode_idle(worker: int) -> bool:
        """Whether the engine runs no batch now (its loop spins through the receive count)."""
        ranks = d_ranks[worker * decode.ranks : (worker + 1) * decode.ranks]
        return not d_busy[worker] and not any(rank.sched.running or rank.arrived or rank.resume for rank in ranks)

    def receive(worker: int, now: float) -> None:
        recv_count[worker] = 0
        for r in range(worker * decode.ranks, (worker + 1) * decode.ranks):
            rank = d_ranks[r]
            if rank.inbox:
                rank.prealloc.extend(rank.inbox)
                rank.inbox.clear()
                preallocate(r, now)

    def send(now: float) -> None:
        nonlocal sent, next_p, next_d
        k = sent
        sent += 1
        job = _PDRequest(k, now, isls[k], osls[k], int(rooms[k]))
        pw, next_p = next_p, (next_p + 1) % prefill.workers
        dw, next_d = next_d, (next_d + 1) % decode.workers
        job.prefill_rank = pw * prefill.ranks + job.room % prefill.ranks
        job.decode_rank = dw * decode.ranks + job.room % decode.ranks
        if recv_interval > 1 and not decode_idle(dw):
            d_ranks[job.decode_rank].inbox.append(job)  # received at a later iteration of the busy engine
            return
        d_ranks[job.decode_rank].prealloc.append(job)
        preallocate(job.decode_rank, now)

    def room_left(rank: _DecodeRank) -> int:
        s = rank.sched
        held = NUM_RESERVED_DECODE_TOKENS * (len(s.running) + rank.reserved)
        return s.pool_tokens - s.used_tokens - rank.reserved_tokens - held

    def preallocate(r: int, now: float) -> None:
        rank = d_ranks[r]
        while rank.prealloc and not rank.resume:
            job = rank.prealloc[0]
            if job.isl + NUM_RESERVED_DECODE_TOKENS > room_left(rank):
                break
            rank.prealloc.popleft()
            rank.reserved_tokens += job.isl
            rank.reserved += 1
            job.prealloc_s = now
            req = _Request(job.rid, job.arrival_s, job.isl, job.osl)
            job.req = req
            pd_of[id(req)] = job
            p_ranks[job.prefill_rank].waiting.append(req)
            start_prefill(job.prefill_rank // prefill.ranks, now)

    def start_prefill(worker: int, now: float) -> None:
        nonlocal prefill_steps, prefill_busy_s
        if p_busy[worker]:
            return
        batches = [p_ranks[worker * prefill.ranks + k].build_prefill() for k in range(prefill.ranks)]
        if not any(batches):
            return
        duration = max(
            prefill.steps.prefill_s(sum(t for _, t, _ in b), len(b), sum(c for _, _, c in b) / len(b))
            for b in batches
            if b
        )
        for batch in batches:
            for req, _, _ in batch:
                job = pd_of[id(req)]
                if math.isnan(job.prefill_start_s):
                    job.prefill_start_s = now
        p_busy[worker] = True
        prefill_steps += 1
        prefill_busy_s += duration
        running_p[worker] = batches
        heapq.heappush(events, (now + duration, next(seq), prefill_end, worker))

    def end_prefill(worker: int, now: float) -> None:
        nonlocal transferred
        p_busy[worker] = False
        for k, batch in enumerate(running_p.pop(worker)):
            r = worker * prefill.ranks + k
            sched = p_ranks[r]
            for req, take, _ in batch:
                req.prefilled += take
                if req.prefilled < req.target:
                    sched.chunked = req
                    continue
                pd_of[id(req)].prefill_end_s = now
                size = req.target * prefill.kv_bytes_per_token
                transferred += size
                link_free[r] = max(now, link_free[r]) + size / prefill.link_bytes_per_s
                counts_p[r] += 1
                heapq.heappush(events, (link_free[r], next(seq), transfer_end, id(req)))
        start_prefill(worker, now)

    def end_transfer(key: int, now: float) -> None:
        job = pd_of[key]
        job.transfer_end_s = now
        req = job.req
        assert req is not None
        p_ranks[job.prefill_rank].used_tokens -= req.kv  # the prefill side frees the KV once it is sent
        start_prefill(job.prefill_rank // prefill.ranks, now)
        d_ranks[job.decode_rank].arrived.append(job)
        start_decode(job.decode_rank // decode.ranks, now)

    decode_cap = decode.max_running_requests or math.inf

    def start_decode(worker: int, now: float) -> None:
        nonlocal decode_steps, max_used, max_batch, retractions, resumes, decode_busy_s, batch_sum, skipped
        if d_busy[worker]:
            return
        ranks = d_ranks[worker * decode.ranks : (worker + 1) * decode.ranks]
        if recv_interval > 1:
            recv_count[worker] += RECV_SKIPPER_WEIGHT_DECODE  # the iteration before: a decode step (or an idle loop)
            if recv_count[worker] >= recv_interval:
                receive(worker, now)
        prebuilt = [False] * len(ranks)
        for offset, rank in enumerate(ranks):
            s = rank.sched
            fits = len(s.running) < decode_cap
            prebuilt[offset] = fits and (
                bool(rank.arrived)
                or bool(rank.resume and rank.resume[0].kv + NUM_RESERVED_DECODE_TOKENS <= room_left(rank))
            )
            while (
                rank.resume
                and len(s.running) < decode_cap
                and rank.resume[0].kv + NUM_RESERVED_DECODE_TOKENS <= room_left(rank)
            ):
                back = rank.resume.popleft()
                resumes += 1
                s.used_tokens += back.kv
                back.generated -= 1  # join counts the prefill's token; a resumed request has it already
                s.join(back)
            while rank.arrived and len(s.running) < decode_cap:
                job = rank.arrived.popleft()
                new = job.req
                assert new is not None
                rank.reserved_tokens -= new.kv
                rank.reserved -= 1
                s.used_tokens += new.kv
                new.first_token_s = now
                s.join(new)
                counts_d[worker * decode.ranks + offset] += 1
            if s.running and s.pool_tokens - s.used_tokens - rank.reserved_tokens < len(s.running):
                before = len(s.waiting)
                s.pool_tokens -= rank.reserved_tokens
                retractions += s.retract()
                s.pool_tokens += rank.reserved_tokens
                while len(s.waiting) > before:  # offloaded, not re-prefilled: resumed with their KV
                    victim = s.waiting.popleft()
                    victim.kv = victim.target
                    rank.resume.append(victim)
        if recv_interval > 1 and decode.prebuilt_step and any(prebuilt):
            receive(worker, now)  # the prebuilt iteration weighs RECV_SKIPPER_WEIGHT_DEFAULT: the next one receives
        stepping = [rank for rank, built in zip(ranks, prebuilt, strict=True) if not built]
        if not (decode.prebuilt_step and decode.ranks > 1) or not any(rank.sched.running for rank in stepping):
            # one rank, or no rank left to decode: the prebuilt iteration runs no forward, the next one decodes all
            prebuilt = [False] * len(ranks)
            stepping = ranks
        busiest = max(len(rank.sched.running) for rank in stepping)
        if not busiest:
            if recv_interval > 1 and any(rank.inbox for rank in ranks):
                receive(worker, now)  # idle: the loop spins through the count
            return
        skipped += sum(1 for rank, built in zip(ranks, prebuilt, strict=True) if built and rank.sched.running)
        prebuilt_of[worker] = prebuilt
        n = sum(len(rank.sched.running) for rank in stepping)
        context = (
            sum(rank.sched.mean_context() * len(rank.sched.running) for rank in stepping if rank.sched.running) / n
        )
        duration = decode.steps.decode_s(ranks[0].sched.graph_batch(busiest), context)
        max_batch = max(max_batch, busiest)
        max_used = max(max_used, *(rank.sched.used_tokens + rank.reserved_tokens for rank in ranks))
        d_busy[worker] = True
        decode_steps += 1
        decode_busy_s += duration
        batch_sum += busiest
        heapq.heappush(events, (now + duration, next(seq), decode_end, worker))

    def end_decode(worker: int, now: float) -> None:
        nonlocal done, timed, ttft_sum, tpot_sum, e2e_sum, makespan
        d_busy[worker] = False
        finished: list[_Request] = []
        prebuilt = prebuilt_of.pop(worker)
        for offset, r in enumerate(range(worker * decode.ranks, (worker + 1) * decode.ranks)):
            s = d_ranks[r].sched
            if s.running and not prebuilt[offset]:
                s.decode_step()
                finished += s.finished()
        for req in finished:
            ttft = req.first_token_s - req.arrival_s
            e2e = now - req.arrival_s
            tpot = (e2e - ttft) / (req.osl - 1) if req.osl > 1 else math.nan
            ttft_sum += ttft
            e2e_sum += e2e
            if req.osl > 1:
                tpot_sum += tpot
                timed += 1
            per_request[req.rid] = (ttft, tpot, e2e)
            job = pd_of.pop(id(req))
            marks = (job.arrival_s, job.prealloc_s, job.prefill_start_s, job.prefill_end_s, job.transfer_end_s)
            for k, (start, end) in enumerate(itertools.pairwise((*marks, req.first_token_s))):
                phase_sums[k] += end - start
            makespan = now
            done += 1
        for r in range(worker * decode.ranks, (worker + 1) * decode.ranks):
            preallocate(r, now)
        for _ in finished:
            if sent < total:
                send(now)
        start_decode(worker, now)

    for _ in range(min(concurrency, total)):
        send(0.0)
    handlers = {prefill_end: end_prefill, decode_end: end_decode}
    while done < total:
        if not events:
            raise ReplayError("nothing runs and nothing can be admitted: a KV pool is too small")
        now, _, kind, payload = heapq.heappop(events)
        if kind == transfer_end:
            end_transfer(payload, now)
        else:
            handlers[kind](payload, now)
    return DisaggReplayResult(
        ttft_s=ttft_sum / total,
        tpot_s=tpot_sum / timed if timed else 0.0,
        e2e_s=e2e_sum / total,
        requests=total,
        retractions=retractions,
        prefill_steps=prefill_steps,
        decode_steps=decode_steps,
        max_used_tokens=max_used,
        pool_tokens=decode.pool_tokens,
        per_request=per_request,
        transferred_bytes=transferred,
        prefill_rank_requests=counts_p,
        decode_rank_requests=counts_d,
        max_decode_rank_batch=max_batch,
        prealloc_wait_s=phase_sums[0] / total,
        prefill_queue_s=phase_sums[1] / total,
        prefill_run_s=phase_sums[2] / total,
        transfer_s=phase_sums[3] / total,
        join_wait_s=phase_sums[4] / total,
        resumes=resumes,
        skipped_rank_steps=skipped,
        makespan_s=makespan,
        prefill_busy=prefill_busy_s / (makespan * prefill.workers) if makespan else 0.0,
        decode_busy=decode_busy_s / (makespan * decode.workers) if makespan else 0.0,
        mean_decode_rank_batch=batch_sum / decode_steps if decode_steps else 0.0,
    )


__all__ = [
    "DisaggReplayResult",
    "PDRole",
    "ReplayError",
    "ReplayResult",
    "SGLangDefaultScheduler",
    "benchmark_lengths",
    "replay_closed_loop",
    "replay_disagg_closed_loop",
    "replay_open_loop",
    "sglang_chunked_prefill_size",
    "sglang_cuda_graph_batch_sizes",
    "sglang_release",
]
