"""The gateway's routing policy: which worker a trajectory's next turn goes to.

As the SGLang model gateway (``smg`` 1.13.0, successor of ``sgl-router``; the project installs it in ``.smg/``)
does it, with its defaults (``smg launch --help``) — docs/simulator.md, "The gateway", has the sources and what
was checked against the 1.13.0 binary:

* ``cache_aware`` (the default) keeps an approximate prefix tree of the prompts it routed; each node lists its
  *tenants*, the workers a prompt through it was sent to. A request's match rate is the deepest matched node's
  length over its own, in whole pages of ``--block-size`` 16 tokens (the token tree, which a ``/generate`` request
  carrying ``input_ids`` uses). Above ``--cache-threshold`` 0.3 (strictly) the node's live tenants (at most
  eight) are the candidates; the request goes to the least loaded candidate that is not *hot* — in flight above
  both ``--balance-rel-threshold`` 1.5 × the live workers' mean and the mean plus ``--balance-abs-threshold`` 64,
  that margin capped at two standard deviations of a count with that mean (2 √mean) and never under 4 — else to
  the least loaded worker that is not hot. At or below the threshold (a miss) it goes to the least loaded worker.
  The chosen worker becomes a tenant of the request's whole path; that is how a hot prefix replicates.
  The tree is bounded by ``--max-tree-size`` 67,108,864 (tokens, counted once per tenant); every
  ``--eviction-interval-secs`` 60 s an oversized tree drops least recently used leaves. ``--cache-ttl-secs``
  belongs to the hash index (``--cache-index hash``), not to the tree, and does not apply here.
* ``least_load`` and ``round_robin`` ignore prefixes.

Load is the requests a worker has in flight. smg's spill targets and misses are ranked by its expected-wait
scorer, which compares in-flight counts when no worker reports load and otherwise the reported token work over
the reported throughput; the simulator ranks by in-flight count (ties by worker index) — a simplification.

What the tree holds, in the simulator's terms: a trajectory's prompts grow turn by turn, so its deepest match is
its previous turn's prompt, held by the worker that turn went to; the members of a GRPO group share their first
prompt, whose node's tenants are every worker a member's request went to. A trajectory at its first or second
turn therefore matches the group's prompt (all of its tenants are candidates), and from its third turn its own
previous prompt. A worker that leaves is purged from the tree (smg removes a worker's entries when it leaves).
Whether a worker still *holds* the prefix is the worker's radix cache's business (:mod:`~pearl_sched.sim.memory`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

ROUTER_POLICIES = ("cache_aware", "least_load", "round_robin")
CACHE_THRESHOLD = 0.3
BALANCE_ABS_THRESHOLD = 64.0
BALANCE_REL_THRESHOLD = 1.5
SPILL_MARGIN_FLOOR = 4.0
MAX_MATCHED_TENANTS = 8
BLOCK_SIZE = 16
MAX_TREE_SIZE = 67_108_864
EVICTION_INTERVAL_S = 60.0


def _by_load(worker_load: tuple[int, int]) -> tuple[int, int]:
    return worker_load[1], worker_load[0]


@dataclass
class Router:
    """One routing policy over one set of workers (prefill, decode or colocated)."""

    policy: str = "cache_aware"
    placed: dict[int, tuple[int, float, float]] = field(default_factory=dict)  # trajectory → worker, prompt, time
    turn: int = 0
    groups: dict[int, tuple[int, float]] = field(default_factory=dict)  # trajectory → (group key, shared prompt)
    tenants: dict[int, dict[int, float]] = field(default_factory=dict)  # group key → {worker: last insert time}
    tree_tokens: float = 0.0  # the approximate tree's size, counted once per tenant
    next_eviction_s: float = EVICTION_INTERVAL_S

    def __post_init__(self) -> None:
        """Refuse a policy the gateway does not have."""
        if self.policy not in ROUTER_POLICIES:
            raise ValueError(f"unknown router policy {self.policy!r}; choose one of {', '.join(ROUTER_POLICIES)}")

    def route(self, index: int, prompt_tokens: float, now_s: float, loads: Sequence[tuple[int, int]]) -> int:
        """The worker for the trajectory's request; ``loads`` holds (worker, requests in flight) of live workers."""
        if self.policy == "round_robin":
            live = sorted(w for w, _ in loads)
            worker = live[self.turn % len(live)]
            self.turn += 1
            return worker
        least = min(loads, key=_by_load)[0]
        if self.policy == "least_load":
            return least
        load = dict(loads)
        if now_s >= self.next_eviction_s:
            self._evict(now_s)
        matched, candidates = self._match(index, load)
        pages = math.floor(matched / BLOCK_SIZE) * BLOCK_SIZE  # the token tree counts whole pages
        rate = min(pages, prompt_tokens) / prompt_tokens if prompt_tokens > 0 else 0.0
        worker = least
        if rate > CACHE_THRESHOLD and candidates:
            mean = sum(load.values()) / len(load)
            margin = min(BALANCE_ABS_THRESHOLD, max(SPILL_MARGIN_FLOOR, 2 * math.sqrt(mean)))
            cool = [w for w in candidates if not (load[w] > mean + margin and load[w] > BALANCE_REL_THRESHOLD * mean)]
            if cool:
                worker = min(cool, key=lambda w: (load[w], w))
            # every candidate hot: the least loaded worker, which is never hot (hot needs more than the mean)
        self._insert(index, worker, prompt_tokens, now_s)
        return worker

    def _match(self, index: int, load: dict[int, int]) -> tuple[float, list[int]]:
        """The deepest matched node's length and its live tenants (most recent first, at most eight)."""
        own = self.placed.get(index)
        if own is not None and own[0] not in load:  # its worker left: purged from the tree
            del self.placed[index]
            own = None
        group = self.groups.get(index)
        if own is not None and (group is None or own[1] > group[1]):
            return own[1], [own[0]]
        if group is not None:
            held = self.tenants.get(group[0], {})
            for w in [w for w in held if w not in load]:
                del held[w]
            if held:
                recent = sorted(held, key=lambda w: -held[w])[:MAX_MATCHED_TENANTS]
                return group[1], recent
        return 0.0, []

    def _insert(self, index: int, worker: int, prompt_tokens: float, now_s: float) -> None:
        """The chosen worker becomes a tenant of the request's path; the tree's size grows by what is new to it."""
        group = self.groups.get(index)
        shared = 0.0
        if group is not None and prompt_tokens >= group[1]:
            held = self.tenants.setdefault(group[0], {})
            if worker not in held:
                self.tree_tokens += group[1]
            held[worker] = now_s
            shared = group[1]
        own = self.placed.get(index)
        before = own[1] if own is not None and own[0] == worker else shared
        self.tree_tokens += max(0.0, prompt_tokens - max(before, shared))
        self.placed[index] = (worker, prompt_tokens, now_s)

    def _evict(self, now_s: float) -> None:
        """The periodic eviction (smg's): an oversized tree drops least recently used leaves until it fits.

        A simplification: the leaves are the trajectories' own prompts past the group's (the group prompts stay).
        """
        self.next_eviction_s = now_s + EVICTION_INTERVAL_S
        if self.tree_tokens <= MAX_TREE_SIZE:
            return
        for index in sorted(self.placed, key=lambda i: self.placed[i][2]):
            if self.tree_tokens <= MAX_TREE_SIZE:
                break
            _, prompt, _ = self.placed.pop(index)
            group = self.groups.get(index)
            self.tree_tokens -= max(0.0, prompt - (group[1] if group is not None else 0.0))
