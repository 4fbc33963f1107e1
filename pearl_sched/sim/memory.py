"""One worker's KV pool as SGLang manages it: running requests and a finite LRU radix cache in the same tokens.

SGLang's token pool (``model_executor/model_runner.py``, ``profile_max_num_token``) holds
``GPU memory × mem_fraction_static − weights`` bytes of KV, in tokens of ``kv_bytes_per_token``
(:func:`kv_pool_tokens`, with ``mem_fraction_static`` derived as ``server_args._handle_gpu_memory_settings``
does in :func:`default_mem_fraction_static`). Its radix cache (``mem_cache/radix_cache.py``) lives in the same
pool: a finished request's whole sequence is inserted (``cache_finished_req``), a running request locks the
prefix it matched (``inc_lock_ref``), and when an allocation finds no free token the unlocked leaves are
evicted least recently used first (``evict``), so a prefix is lost from its tail.

Here a trajectory's prefix on a worker is one entry, evicted from its tail as the radix tree's leaves are.
Trajectories of one GRPO group share their first prompt (``groups``): that prompt is one more entry, the parent
node of its members' entries, which then hold only what follows it. A request that matches into the group's
prompt locks it as a whole (``inc_lock_ref`` locks the path), and the prompt moves to the most recent end of the
LRU whenever a member is released, so it is evicted only after every member's tail on that worker (a radix
node becomes a leaf only when its children are gone). The prompt enters the cache when a member's prefill
computes it (:meth:`WorkerMemory.share_prompt`, ``cache_unfinished_req``), so later siblings routed to the same
worker hit it; siblings prefilled in the same batch each compute it (FCFS: no in-batch deduplication). The
pool's tokens are::

    used = locked prefixes + evictable prefixes (the LRU) + private tokens of running requests

``private`` is what a request allocated beyond its matched prefix (prefilled chunks, decoded tokens); the
decode side's growth is kept in closed form by the caller (``decode_tokens``), so eviction runs lazily at
events — between two events nothing is accessed, so the LRU order, and what is evicted, is the same.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

MIB = 2**20

CLIP_MAX_NEW_TOKENS = 4096
"""SGLang ``schedule_policy.CLIP_MAX_NEW_TOKENS``: the admission reserve counts at most this many new tokens."""

INIT_NEW_TOKEN_RATIO = 0.7
"""SGLang ``SGLANG_INIT_NEW_TOKEN_RATIO`` (× ``schedule_conservativeness``, capped at 1)."""

MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
"""SGLang ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR``: the ratio decays to ``init × 0.14``."""

NEW_TOKEN_RATIO_DECAY_STEPS = 600
"""SGLang ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS``: decode steps from the initial to the minimum ratio."""

RETRACT_DECODE_STEPS = 20
"""SGLang ``retract_decode_steps``: retraction frees room for this many more steps of the remaining batch."""

NUM_RESERVED_DECODE_TOKENS = 512
"""SGLang ``--num-reserved-decode-tokens`` (PD decode side): room kept per running request at admission."""


def default_chunked_prefill_size(gpu_memory_bytes: float) -> int:
    """SGLang's default ``--chunked-prefill-size`` by GPU memory (``server_args._handle_gpu_memory_settings``)."""
    mib = gpu_memory_bytes / MIB
    if mib < 35 * 1024:
        return 2048
    if mib < 60 * 1024:
        return 4096
    if mib < 160 * 1024:
        return 8192
    return 16384


def default_cuda_graph_max_bs(gpu_memory_bytes: float, tp: int) -> int:
    """SGLang's default ``--cuda-graph-max-bs`` by GPU memory and TP (same function)."""
    mib = gpu_memory_bytes / MIB
    if mib < 35 * 1024:
        return 24 if tp < 4 else 80
    if mib < 60 * 1024:
        return 32 if tp < 4 else 160
    if mib < 160 * 1024:
        return 256 if tp < 4 else 512
    return 512


def default_mem_fraction_static(
    gpu_memory_bytes: float, tp: int, *, chunked_prefill_size: int | None = None, dp_attention: int = 1
) -> float:
    """SGLang 0.5's default ``--mem-fraction-static`` (``server_args._handle_gpu_memory_settings``, PR #10975).

    Reserved MiB = 512 (metadata) + 1.5 × max(chunked_prefill_size, 2048) (prefill activations) + 2 ×
    cuda_graph_max_bs (CUDA graphs) + TP/8 × 1024, + 3 × cuda_graph_max_bs × DP with attention-DP; at least
    10 GiB on GPUs over 60 GiB; the fraction is ``(memory − reserved) / memory`` rounded to 3 places.
    """
    mib = gpu_memory_bytes / MIB
    chunk = default_chunked_prefill_size(gpu_memory_bytes) if chunked_prefill_size is None else chunked_prefill_size
    graphs = default_cuda_graph_max_bs(gpu_memory_bytes, tp)
    reserved = 512 + max(chunk, 2048) * 1.5 + graphs * 2 + tp / 8 * 1024
    if dp_attention > 1:
        reserved += graphs * dp_attention * 3
        if graphs > 300:
            reserved += graphs * dp_attention * 1.5
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mib - reserved) / mib, 3)


def kv_pool_tokens(
    *, gpu_memory_bytes: float, tp: int, weights_bytes: float, kv_bytes_per_token: float, mem_fraction_static: float
) -> int:
    """Tokens of one TP group's KV pool (``model_runner.profile_max_num_token``).

    Per GPU: ``rest = memory × mem_fraction_static − weights / TP`` bytes, ``rest // (kv_bytes_per_token / TP)``
    tokens (each GPU holds its shard of every token's KV heads). Taken on the GPU's whole memory, where SGLang
    measures the memory free before loading (a CUDA context less).
    """
    rest = gpu_memory_bytes * mem_fraction_static - weights_bytes / tp
    if rest <= 0:
        raise ValueError(
            f"the weights ({weights_bytes / 2**30:.1f} GiB) do not fit in {tp} GPU(s) of "
            f"{gpu_memory_bytes / 2**30:.0f} GiB at mem_fraction_static={mem_fraction_static}"
        )
    return int(rest // (kv_bytes_per_token / tp))


@dataclass
class WorkerMemory:
    """A worker's KV pool: the radix cache's entries (locked or in LRU order) and running requests' tokens.

    ``decode_tokens`` arguments are the decode batch's KV now (kept in closed form by the caller).
    """

    capacity_tokens: float
    radix_cache: bool = True
    locked: dict[int, float] = field(default_factory=dict)  # trajectory → prefix tokens a running request holds
    lru: OrderedDict[int, float] = field(default_factory=OrderedDict)  # evictable prefixes, least recent first
    locked_tokens: float = 0.0
    evictable_tokens: float = 0.0
    private_tokens: float = 0.0  # prefilled chunks and queued KV outside the decode batch
    peak_tokens: float = 0.0
    evicted_tokens: float = 0.0
    groups: dict[int, tuple[int, float]] = field(default_factory=dict)  # trajectory → (group key < 0, prompt)
    refs: dict[int, int] = field(default_factory=dict)  # group key → requests locking the group's prompt
    holding: set[int] = field(default_factory=set)  # trajectories whose running request locks its group's prompt

    def used(self, decode_tokens: float) -> float:
        """Tokens in use, the evictable cache included."""
        return self.locked_tokens + self.evictable_tokens + self.private_tokens + decode_tokens

    def pinned(self, decode_tokens: float) -> float:
        """Tokens that cannot be freed without retracting a request."""
        return self.locked_tokens + self.private_tokens + decode_tokens

    def available(self, decode_tokens: float) -> float:
        """Free plus evictable tokens (SGLang's ``available_size() + evictable_size()``)."""
        return self.capacity_tokens - self.pinned(decode_tokens)

    def settle(self, decode_tokens: float) -> None:
        """Evict least recently used prefixes, from their tails, until the pool fits; record the peak."""
        used = self.locked_tokens + self.evictable_tokens + self.private_tokens + decode_tokens
        if used <= self.capacity_tokens:  # the common case: nothing to evict
            if used > self.peak_tokens:
                self.peak_tokens = used
            return
        over = used - self.capacity_tokens
        while over > 1e-6 and self.lru:
            index, tokens = next(iter(self.lru.items()))
            cut = min(tokens, over)
            self.evictable_tokens -= cut
            self.evicted_tokens += cut
            over -= cut
            if cut >= tokens - 1e-9:
                del self.lru[index]
            else:
                self.lru[index] = tokens - cut
        self.peak_tokens = max(self.peak_tokens, self.used(decode_tokens))

    def _head(self, key: int) -> float:
        """Tokens of a group's shared prompt this worker holds (locked or evictable)."""
        return self.locked.get(key, 0.0) + self.lru.get(key, 0.0)

    def cached(self, index: int) -> float:
        """Tokens of the trajectory's prefix this worker still holds."""
        own = self.locked.get(index, 0.0) + self.lru.get(index, 0.0)
        group = self.groups.get(index)
        if group is None:
            return own
        head = self._head(group[0])
        return head + own if head >= group[1] - 1e-6 else head

    def matched(self, index: int) -> float:
        """Tokens the trajectory's running request has locked (its group's prompt included)."""
        group = self.groups.get(index)
        head = self._head(group[0]) if group is not None and index in self.holding else 0.0
        return head + self.locked.get(index, 0.0)

    def evictable_in(self, index: int, tokens: float) -> float:
        """Tokens that locking a match of ``tokens`` would take out of the evictable cache."""
        group = self.groups.get(index)
        if group is None:
            return min(self.lru.get(index, 0.0), tokens)
        key, shared = group
        head = self._head(key)
        if head <= 0 or tokens <= 0:
            return 0.0
        rest = tokens - min(tokens, head) if head >= shared - 1e-6 else 0.0
        return self.lru.get(key, 0.0) + min(self.lru.get(index, 0.0), rest)

    def _lock_own(self, index: int, tokens: float) -> float:
        held = self.lru.pop(index, 0.0)
        self.evictable_tokens -= held
        match = tokens if held >= tokens - 1e-6 else held  # whole tokens: a rounding shortfall is no miss
        if held > match:  # a prefix longer than asked stays evictable
            self.lru[index] = held - match
            self.evictable_tokens += held - match
        self.locked[index] = self.locked.get(index, 0.0) + match
        self.locked_tokens += match
        return match

    def _ref(self, index: int, key: int) -> None:
        """The trajectory's request locks its group's prompt (the whole node)."""
        if index in self.holding:
            return
        self.holding.add(index)
        self.refs[key] = self.refs.get(key, 0) + 1
        if self.refs[key] == 1:
            head = self.lru.pop(key, 0.0)
            self.evictable_tokens -= head
            self.locked[key] = self.locked.get(key, 0.0) + head
            self.locked_tokens += head

    def _unref(self, index: int, key: int) -> None:
        if index not in self.holding:
            return
        self.holding.discard(index)
        self.refs[key] -= 1
        if self.refs[key] == 0:
            del self.refs[key]
            head = self.locked.pop(key, 0.0)
            self.locked_tokens -= head
            if head > 0:
                self.lru[key] = head
                self.evictable_tokens += head

    def lock(self, index: int, tokens: float) -> float:
        """A request matches the trajectory's prefix (at most ``tokens``) and locks it; the matched tokens."""
        group = self.groups.get(index)
        if group is None:
            return self._lock_own(index, tokens)
        key, shared = group
        head = self._head(key)
        if head <= 0 or tokens <= 0:
            return 0.0
        self._ref(index, key)
        part = tokens if head >= tokens - 1e-6 else head
        own = self._lock_own(index, tokens - part) if head >= shared - 1e-6 and tokens > part else 0.0
        return part + own

    def share_prompt(self, index: int, prompt_tokens: float) -> float:
        """A member's prefill computed its group's prompt: it enters the cache, locked by the request.

        ``cache_unfinished_req`` inserts the computed prompt into the radix tree. Returns the tokens that moved
        from the request's private KV into the group's entry (the caller stops counting them as private).
        """
        group = self.groups.get(index)
        if group is None or not self.radix_cache:
            return 0.0
        key, shared = group
        head = self._head(key)
        if prompt_tokens < shared or head >= shared - 1e-6:
            return 0.0
        if head > 0 and index not in self.holding:  # another copy was in the tree meanwhile: keep the request's
            return 0.0
        self._ref(index, key)
        grow = shared - head
        self.locked[key] = self.locked.get(key, 0.0) + grow
        self.locked_tokens += grow
        return grow

    def release(self, index: int, keep_tokens: float, private_tokens: float) -> None:
        """A request ends: ``keep_tokens`` of its sequence go into the cache (most recent), the rest is freed.

        ``private_tokens`` is what the request held beyond its locked prefix (the caller stops counting it).
        """
        group = self.groups.get(index)
        locked = self.locked.pop(index, 0.0)
        self.locked_tokens -= locked
        old = self.lru.pop(index, 0.0)
        self.evictable_tokens -= old
        if group is None:
            if not self.radix_cache:
                return
            keep = min(keep_tokens, locked + private_tokens + old)
            if keep > 0:
                self.lru[index] = keep
                self.evictable_tokens += keep
            return
        key, shared = group
        head = self._head(key)
        holds = index in self.holding
        if not self.radix_cache:
            self._unref(index, key)
            return
        keep = min(keep_tokens, (head if holds else 0.0) + locked + private_tokens + old)
        grow = min(keep, shared) - head
        if grow > 1e-9:  # the request's own copy of the prompt fills what the tree lost
            if key in self.locked:
                self.locked[key] += grow
                self.locked_tokens += grow
            else:
                self.lru[key] = self.lru.pop(key, 0.0) + grow
                self.evictable_tokens += grow
        if keep > shared:
            self.lru[index] = keep - shared
            self.evictable_tokens += keep - shared
        self._unref(index, key)
        if key in self.lru:  # a radix node is touched with its child: evicted only after every member's tail
            self.lru.move_to_end(key)

    def drop(self, index: int) -> None:
        """Forget the trajectory's prefix (the worker left)."""
        self.locked_tokens -= self.locked.pop(index, 0.0)
        self.evictable_tokens -= self.lru.pop(index, 0.0)
        group = self.groups.get(index)
        if group is not None:
            self._unref(index, group[0])
