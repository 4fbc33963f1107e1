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

The hot test counts the requests a worker has in flight. Which worker a miss, or a hit among several
candidates, goes to is smg's *expected-wait* scorer (``least_load.rs``), fed by the engines' load reports, which
smg polls (``/v1/loads``) every ``--load-monitor-interval`` 10 s — stale in between. When ``route`` is given a
``report`` (the simulated engines' state, :class:`LoadReport`), the score of a worker with a snapshot is
(reported waiting uncached tokens — else waiting requests × 1,024 — plus 1,024 tokens per reported *running*
request, plus the tokens routed to it since the poll) over its reported generation throughput (2,000 tok/s when
it reports none) plus 0.15 · k / (1 − k) for its reported KV usage k. The running term is the 1.13.0 binary's
(probed; the v1.9-era source has no such term): docs/simulator.md, "The load reports". A worker without a report
yet (it joined after the poll) scores its in-flight count × 1,024 over the reporting workers' mean throughput.
Without reports (no ``report``) it is the in-flight count, smg's cold-start rule. Workers of equal score are a tie,
which smg breaks uniformly at random (reservoir sampling in ``select_min_expected_wait``); so does the router, from
a seeded generator (``tie_seed``; ``None`` gives ties to the lowest worker index, the rule before this was
modelled). ``least_load`` breaks its ties the same way. Two more 1.13.0 defaults read the reports: *overload
protection* leaves out of routing a worker whose last report had ≥ 8 waiting requests or KV usage ≥ 0.8 while
another worker is under both (every worker over: all stay eligible) — on in smg by default, off here by default
because pearl_sched's adapters launch smg with ``--disable-worker-overload-protection``
(``overload_protection=True`` models a gateway launched with smg's defaults); and the *warm-up slice*
(``--worker-warmup-secs`` 60, ``--worker-warmup-share`` 0.25) sends one miss in four to the least
expected-wait worker among those that joined less than 60 s ago. docs/simulator.md, "The gateway", has what
was checked against the binary and what is left out (the diversion of hits to *thin* workers).

What the tree holds, in the simulator's terms: a trajectory's prompts grow turn by turn, so its deepest match is
its previous turn's prompt, held by the worker that turn went to; the members of a GRPO group share their first
prompt, whose node's tenants are every worker a member's request went to. A trajectory at its first or second
turn therefore matches the group's prompt (all of its tenants are candidates), and from its third turn its own
previous prompt. A worker that leaves is purged from the tree (smg removes a worker's entries when it leaves).
Whether a worker still *holds* the prefix is the worker's radix cache's business (:mod:`~pearl_sched.sim.memory`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
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
LOAD_MONITOR_INTERVAL_S = 10.0  # --load-monitor-interval
MEAN_PREFILL_TOKENS = 1024.0  # --least-load-mean-prefill-tokens
DEFAULT_THROUGHPUT = 2000.0  # --least-load-default-throughput
KV_PRESSURE_WEIGHT = 0.15  # --least-load-kv-pressure-weight
OVERLOAD_WAITING_REQUESTS = 8  # --worker-overload-waiting-requests
OVERLOAD_TOKEN_USAGE = 0.8  # --worker-overload-token-usage
WARMUP_S = 60.0  # --worker-warmup-secs
WARMUP_PERIOD = 4  # round(1 / --worker-warmup-share 0.25)
# pearl_sched's adapters launch smg with --disable-worker-overload-protection (adapters.gateway.Gateway, whose
# ``overload_protection`` defaults to this value): a rollout must serve every turn, and the veto sends a long
# context's next turn away from the worker that caches it (docs/simulator.md, "The load reports").
GATEWAY_OVERLOAD_PROTECTION = False


@dataclass(frozen=True)
class LoadReport:
    """What one worker's ``/v1/loads`` tells smg (summed over its DP ranks; ``token_usage`` their mean)."""

    waiting_reqs: int = 0
    waiting_uncached_tokens: float = 0.0
    token_usage: float = 0.0
    gen_throughput: float = 0.0
    running_reqs: int = 0  # SGLang's ``len(running_batch.reqs)``: the decode batch (a PD prefill worker: 0)

    @property
    def overloaded(self) -> bool:
        """Smg's overload veto: waiting requests or KV usage at or above the default thresholds."""
        return self.waiting_reqs >= OVERLOAD_WAITING_REQUESTS or self.token_usage >= OVERLOAD_TOKEN_USAGE


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
    reports: dict[int, LoadReport] = field(default_factory=dict)  # the last poll's snapshot
    vetoed: frozenset[int] = frozenset()  # workers that snapshot puts over the overload thresholds (if protected)
    since_poll: dict[int, float] = field(default_factory=dict)  # tokens routed to each worker since that poll
    next_poll_s: float = 0.0
    joined: dict[int, float] = field(default_factory=dict)  # worker → when the router first saw it
    misses: int = 0  # misses routed so far (the warm-up slice takes every fourth)
    overload_protection: bool = GATEWAY_OVERLOAD_PROTECTION  # smg's veto (on unless --disable-…-protection)
    tie_seed: int | None = None  # seeds the random tie-break among equal scores; None: ties to the lowest index
    _ties: random.Random | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        """Refuse a policy the gateway does not have; seed the tie-break."""
        if self.policy not in ROUTER_POLICIES:
            raise ValueError(f"unknown router policy {self.policy!r}; choose one of {', '.join(ROUTER_POLICIES)}")
        self._ties = random.Random(self.tie_seed) if self.tie_seed is not None else None

    def route(
        self,
        index: int,
        prompt_tokens: float,
        now_s: float,
        loads: Sequence[tuple[int, int]],
        report: Callable[[int], LoadReport] | None = None,
    ) -> int:
        """The worker for the trajectory's request; ``loads`` holds (worker, requests in flight) of live workers.

        ``report`` gives a worker's load report as the engine would answer a poll now; ``None``: no reports.
        """
        if self.policy == "round_robin":
            live = sorted(w for w, _ in loads)
            worker = live[self.turn % len(live)]
            self.turn += 1
            return worker
        if self.policy == "least_load":
            in_flight = dict(loads)
            return self._argmin(list(in_flight), in_flight)
        load = dict(loads)
        for w in load:
            self.joined.setdefault(w, now_s)
        if report is not None and now_s >= self.next_poll_s:
            self._poll(load, report, now_s)
        if now_s >= self.next_eviction_s:
            self._evict(now_s)
        eligible = [w for w in sorted(load) if w not in self.vetoed]
        eligible = eligible or sorted(load)  # every worker overloaded: all stay (no --worker-overload-shed)
        matched, candidates = self._match(index, load)
        candidates = [w for w in candidates if w in eligible]
        pages = math.floor(matched / BLOCK_SIZE) * BLOCK_SIZE  # the token tree counts whole pages
        rate = min(pages, prompt_tokens) / prompt_tokens if prompt_tokens > 0 else 0.0
        mean = sum(load.values()) / len(load)
        margin = min(BALANCE_ABS_THRESHOLD, max(SPILL_MARGIN_FLOOR, 2 * math.sqrt(mean)))
        cool = [w for w in eligible if not (load[w] > mean + margin and load[w] > BALANCE_REL_THRESHOLD * mean)]
        if rate > CACHE_THRESHOLD and candidates:
            # the least expected-wait candidate that is not hot, else the least expected-wait worker not hot
            worker = self._least_wait([w for w in candidates if w in cool] or cool or eligible, load)
        else:
            self.misses += 1
            warming = [w for w in eligible if now_s - self.joined[w] < WARMUP_S]
            if warming and self.misses % WARMUP_PERIOD == 0:
                worker = self._least_wait(warming, load)
            else:
                worker = self._least_wait(eligible, load)
        if self.reports:
            self.since_poll[worker] = self.since_poll.get(worker, 0.0) + prompt_tokens
        self._insert(index, worker, prompt_tokens, now_s)
        return worker

    def _poll(self, load: dict[int, int], report: Callable[[int], LoadReport], now_s: float) -> None:
        """Smg's load monitor: a fresh snapshot of every live worker; the since-poll tallies start again."""
        self.reports = {w: report(w) for w in load}
        if self.overload_protection:  # smg evaluates the veto once per load report and keeps it until the next
            self.vetoed = frozenset(w for w, r in self.reports.items() if r.overloaded)
        self.since_poll = {}
        self.next_poll_s = (math.floor(now_s / LOAD_MONITOR_INTERVAL_S) + 1) * LOAD_MONITOR_INTERVAL_S

    def _least_wait(self, workers: list[int], load: dict[int, int]) -> int:
        """The worker of least expected wait (smg's ``select_min_expected_wait``)."""
        return self._argmin(workers, self.expected_waits(workers, load))

    def _argmin(self, workers: list[int], score: dict[int, float] | dict[int, int]) -> int:
        """The worker of least score; a tie uniformly at random among the tied (smg), or to the lowest index."""
        best = min(score[w] for w in workers)
        tied = sorted(w for w in workers if score[w] == best)
        if len(tied) == 1 or self._ties is None:
            return tied[0]
        return tied[self._ties.randrange(len(tied))]

    def expected_waits(self, workers: list[int], load: dict[int, int]) -> dict[int, float]:
        """Each worker's key in :meth:`_least_wait`.

        Its expected wait in seconds, as smg scores it from the last poll's snapshot; without any snapshot, its
        in-flight count (join-shortest-queue).
        """
        reports = {w: self.reports[w] for w in workers if w in self.reports}
        if not reports:
            return {w: float(load[w]) for w in workers}
        rates = [r.gen_throughput for r in reports.values() if r.gen_throughput > 0]
        nominal = sum(rates) / len(rates) if rates else DEFAULT_THROUGHPUT

        def score(w: int) -> float:
            r = reports.get(w)
            if r is None:  # joined after the poll
                return load[w] * MEAN_PREFILL_TOKENS / nominal
            queued = (
                r.waiting_uncached_tokens if r.waiting_uncached_tokens > 0 else r.waiting_reqs * MEAN_PREFILL_TOKENS
            ) + r.running_reqs * MEAN_PREFILL_TOKENS
            k = min(max(r.token_usage, 0.0), 0.999)
            rate = r.gen_throughput if r.gen_throughput > 0 else DEFAULT_THROUGHPUT
            return (queued + self.since_poll.get(w, 0.0)) / rate + KV_PRESSURE_WEIGHT * k / (1 - k)

        return {w: score(w) for w in workers}

    def _match(self, index: int, load: dict[int, int]) -> tuple[float, list[int]]:
        """The deepest matched node's length and its live tenants (most recent first, at most eight)."""
        own = self.placed.get(index)
        if own is not None and own[0] not in load:  # its worker left: purged from the tree
            del self.placed[index]
            own = None
        for w in [w for w in self.joined if w not in load]:  # a worker that comes back is new again
            del self.joined[w]
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
