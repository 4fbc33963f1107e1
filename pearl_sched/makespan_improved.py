"""An improved makespan predictor: PEARL's interface, with what decides SGLang rollout makespans in its equations.

docs/makespan.md ("The improved predictor") derives it; this docstring is the summary.

Each trajectory cycles *decode* (r tokens) → *KV transfer* → *environment* (T_e per turn) → *prefill* → decode.
With B trajectories on a pool, the number decoding at once, n, is not an input (PEARL's measured θ) but the fixed
point of that finite-source cycle::

    τ(n)  = τ₀·C/(C − W),  τ₀ = A + b·n/N_D     decode iteration; W = φ·t_p·B·x/N the worker's prefill seconds
                                               per cycle it waits for (colocated, prefill first; W = 0 in PD)
    d(n)  = r·τ(n)                             decode time of one turn
    C(n)  = d(n) + x_s + T_e + p(n)            one turn's cycle: decode, transfer, environment, own prefill
    n     = min(B · d(n) / C(n), n_max)        trajectories decoding; n_max = N_D·M/f the KV pool's limit

solved by bisection on n ∈ (0, n_max]. When the pool's KV limit binds, the rest of the batch queues for admission
and the cycle stretches to C = W + B·r·τ₀/n_max. θ = (B − n)/n is an output. SGLang's memory enters through four
terms:

- **KV capacity** M tokens per worker (SGLang's pool, ``sglang:max_total_num_tokens``; else the device's H_max/K):
  a decoding sequence holds f = c + ΔL + r/2 tokens (c the prefix its turn starts from, ΔL appended to it; PD
  decode adds SGLang's 512 reserved decode tokens per request), so at most M/f decode at once per worker;
- **prefix-cache hits**: a worker's radix cache keeps the prefixes of trajectories in their environment call in
  what decoding leaves free, ``retention = min(1, (M − n_w·f) / (idle_w·c))``; the router's policy decides whether
  the next turn lands there (cache-aware: always; least-load or round-robin: 1/N). A colocated turn prefills
  ΔL + (1 − h)·c tokens. A PD prefill worker never holds the tokens generated on the decode worker, so it prefills
  ΔL + r + (1 − h_P)·(c − r); its cache is reused once a cycle, in nearly the order it was filled, so LRU keeps
  h_P = max(0, 1 − (1 − ρ)/s) of it (Che's approximation; ρ the share that fits, s the cycle's spread from the
  turn's decode length and tool call, d/C = n/B), not ρ. The *whole* context's KV, ΔL + (1 − h_D)·c tokens, crosses
  the link each turn
  (h_D > 0 only with the decode radix cache); a trajectory's first turn has none of these (its prompt is the
  first-turn burst), so they count for the (S − 1)/S later turns. A measured hit rate
  (``sglang:cached_tokens_total`` over ``sglang:prompt_tokens_total``) corrects the structural one by their ratio
  at the configuration that ran;
- **retraction**: when the KV limit binds and no evictable cache is left, the growth the admission reserve did not
  cover (r − R per turn, R = SGLang's floor new-token ratio × min(max_new, 4096)) is freed by retracting requests,
  each re-prefilling what it had generated and what the cache lost; a measured rate
  (``sglang:num_retracted_requests_total`` per turn) replaces the estimate;
- **mixed steps**: with mixed chunks a prefill chunk shares a forward pass with the decode batch; the step-time
  engine's ``mixed_s / (prefill_s + decode_s)`` = φ scales the decode time the prefill takes;
- **decode cost on KV tokens** (``ServingParams.decode_costs``, fitted from the workers' decode batches): τ₀ =
  A + (b + c·f)·n/N_D with f = c + ΔL + r/2 the tokens a decoding sequence holds, A, b, c regressed on the running
  requests and the batch's KV tokens; without it PEARL's A + b·n, where a sequence's b may grow with the KV it reads
  (opt-in, ``ServingParams.decode_cost_by_context``): b·(c + ΔL + r/2)/c̄ for b measured at the mean context c̄;
- **prefill cost by context** (opt-in, ``ServingParams.prefill_cost_by_context``; ``prefill_cost`` is fitted from
  the prefill batches the workers log either way, and measured less accurate than t_p in docs/makespan.md):
  n new tokens after c cached ones cost α·n + β·n·(c + n/2), each part of a turn's prefill (an append over a hit
  prefix, a miss's recompute from scratch, a retraction's re-prefill, the first prompt) at its own context; without
  a fit, t_p per token;
- **group-shared prompts** (``ServingParams.group_size`` G > 1; ``shared_prompt_hits=False`` switches it off): a
  GRPO group's members share their first prompt P₀, one radix node LRU evicts last, so a turn that misses its own
  prefix still finds g = router_g·retention_g·P₀ of it, and the first-turn burst prefills a group's prompt once per
  worker its members land on;
- **a prefill batch's fixed cost** (opt-in, ``ServingParams.prefill_batch_cost``): t₀ + α·n (+ β·n·(c + n/2)) fitted
  with an intercept from the prefill batches (``prefill_step_cost``), t₀ charged per prefill batch a turn takes —
  (1 − e^(−λT))/(λT) for turns arriving at λ within a scheduling round T, at least its chunks.

The batch is solved in phases (:data:`PHASES` shares of its turns): contexts grow and trajectories finish along the
way, so memory binds late in a batch, not on average. Also, as before: append-prefill cost grows with context
(t_p(c) = t_p + t_c·c); transfers share the link as a processor-sharing queue; makespan = max(critical path,
throughput bounds); the first-turn burst B·P₀·t_p/E_P; and the slowest trajectory's delay, not the mean one's.

In PEARL's limit (:data:`PEARL_LIMIT`: unlimited memory, a perfect cache, PEARL's PD where only ΔL is prefilled and
sent), with no environment time, no first-turn prompt and T_over = 0, the pool terms equal PEARL's at θ = 0, the
disaggregated makespan equals PEARL's, and the colocated one too without ΔL (``tests`` check each).

For the MILP, ``terms`` fits PEARL's pool form ``fixed + work/E`` to this model's throughput bound of each pool over
a grid of capacities (a secant surrogate, exact in PEARL's limit); the plan reports ``predict``.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Literal, NamedTuple, TypeVar

import numpy as np
from pydantic import Field, model_validator

from pearl_sched.makespan import (
    MakespanBreakdown,
    MakespanTerms,
    PearlMakespanModel,
    PearlParams,
    PoolCapacity,
    PoolTerms,
    SizeCount,
)
from pearl_sched.state import Frozen, Mode, NonNegFloat, PosFloat, Role, Workload

_BISECTION_STEPS = 40

RESERVED_DECODE_TOKENS = 512
"""SGLang ``--num-reserved-decode-tokens``: KV a PD decode worker keeps per running request at admission."""

CLIP_MAX_NEW_TOKENS = 4096
"""SGLang ``schedule_policy.CLIP_MAX_NEW_TOKENS``: admission reserves at most this many new tokens a request."""

MIN_NEW_TOKEN_RATIO = 0.7 * 0.14
"""SGLang's floor ``new_token_ratio``: ``SGLANG_INIT_NEW_TOKEN_RATIO`` 0.7 × ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR``
0.14 (the share of max_new_tokens admission reserves for a running request once the ratio has decayed)."""

PHASES = 6
"""Phases of the batch (equal shares of its turns, each at its own context) the model solves the cycle in."""

STRUCTURAL_HIT_FLOOR = 0.02
"""Below this structural token hit rate a measured one is used as a floor rather than a ratio."""

SURROGATE_POINTS = 24
"""Capacities (geometric, 1 … E_hi reference workers) the MILP surrogate of :meth:`ImprovedMakespanModel.terms`
is fitted over."""


@functools.lru_cache(maxsize=1024)
def slowest_delay_s(burst_s: float, spread_s: float, trajectories: int) -> float:
    """Characteristic largest of ``trajectories`` i.i.d. delays U·burst + N(0, spread²), U uniform on [0, 1].

    It is the t at which the expected number of trajectories later than t is one. Memoised by its arguments (a
    60-step bisection over 64 normal CDFs, a sixth of predict's time; predict asks it again at every configuration
    with the same prefill capacity).
    """
    if trajectories <= 1:
        return burst_s / 2
    if spread_s <= 0:
        return burst_s * (1 - 1 / trajectories)
    normal = NormalDist()
    if burst_s <= 0:
        return spread_s * normal.inv_cdf(1 - 1 / trajectories)
    grid = [burst_s * (k + 0.5) / 64 for k in range(64)]

    def later(t: float) -> float:  # expected number of trajectories later than t
        return trajectories * sum(1 - normal.cdf((t - x) / spread_s) for x in grid) / len(grid)

    lo, hi = 0.0, burst_s + 10 * spread_s
    for _ in range(60):
        mid = (lo + hi) / 2
        if later(mid) > 1:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


_SQRT2 = math.sqrt(2.0)


def _slowest_delays_s(bursts_s: list[float], spread_s: float, trajectories: int) -> list[float]:
    """:func:`slowest_delay_s` at many bursts, float for float (once per distinct burst).

    The bisections run in lanes, the CDFs' ``math.erf`` and the sums over the grid lane by lane (Python's, as the
    scalar path). The normal CDF is ``NormalDist().cdf``'s
    formula at μ = 0, σ = 1, ``0.5·(1 + erf(x/√2))`` (CPython 3.10-3.13 ``statistics``; ``x − 0`` and ``1·√2`` are
    exact), so each term is the scalar path's.
    """
    if trajectories <= 1 or spread_s <= 0:
        return [slowest_delay_s(b, spread_s, trajectories) for b in bursts_s]
    unique = list(dict.fromkeys(b for b in bursts_s if b > 0))  # configurations of one prefill capacity share it
    if not unique:
        return [slowest_delay_s(b, spread_s, trajectories) for b in bursts_s]
    burst = np.array(unique, dtype=float)
    grid = burst[:, None] * (np.arange(64) + 0.5) / 64
    lo, hi = np.zeros(len(unique)), burst + 10 * spread_s
    erf = np.frompyfunc(math.erf, 1, 1)
    for _ in range(60):
        mid = (lo + hi) / 2
        cdf = 0.5 * (1.0 + erf((mid[:, None] - grid) / spread_s / _SQRT2).astype(float))
        sums = np.array([sum(row) for row in (1 - cdf).tolist()], dtype=float)
        later = trajectories * sums / 64
        up = later > 1
        lo, hi = np.where(up, mid, lo), np.where(up, hi, mid)
    delays = dict(zip(unique, ((lo + hi) / 2).tolist(), strict=True))
    return [delays[b] if b > 0 else slowest_delay_s(b, spread_s, trajectories) for b in bursts_s]


@functools.lru_cache(maxsize=64)
def live_shares(quantiles: tuple[float, ...], span: float) -> tuple[float, ...]:
    """Each phase's live share when the batch's turn counts are ``quantiles`` and the batch spans ``span`` turns.

    ``quantiles`` are turns per trajectory at evenly spaced levels 0, 1/m, …, 1; the share of trajectories with at
    most k turns is read from them with linear interpolation (the inverse of the piecewise-linear quantile function)
    at k + ½, so that a turn count logged as an integer counts whole. Turn index k (from 0) is live, over [k, k + 1),
    for a trajectory of more than k turns. Phase j covers [j·span/6, (j+1)·span/6); its share is the live share
    averaged over that stretch, so the phases' turns, span/6 × B × share each, add up to the batch's turns.
    """
    q = np.asarray(quantiles, dtype=float)
    m = len(q) - 1
    width = span / PHASES
    ks = np.arange(math.ceil(span), dtype=float)
    i = np.searchsorted(q, ks + 0.5, side="right") - 1  # the last level whose turns are ≤ k + ½
    inner = np.clip(i, 0, m - 1)
    gap = q[inner + 1] - q[inner]
    within = np.divide(ks + 0.5 - q[inner], gap, out=np.zeros_like(ks), where=gap > 0)
    at_most = np.where(i < 0, 0.0, np.where(i >= m, 1.0, (inner + np.clip(within, 0.0, 1.0)) / m))
    live = 1.0 - at_most
    out = []
    for j in range(PHASES):
        lo, hi = j * width, (j + 1) * width
        overlap = np.clip(np.minimum(ks + 1.0, hi) - np.maximum(ks, lo), 0.0, None)
        out.append(float(np.dot(overlap, live)) / width)
    return tuple(out)


class ModeObservation(Frozen):
    """What one mode's SGLang workers reported while a configuration of that mode served (fitted online).

    Built by :func:`pearl_sched.profiles.telemetry.refit_serving` from ``/metrics`` series; ``None`` fields were not
    measured (absent or NaN metric) and the model uses its structural estimate instead.
    """

    prefill_workers: NonNegFloat = Field(default=0.0, description="Capacity that ran (reference workers)")
    decode_workers: NonNegFloat = 0.0
    colocated_workers: NonNegFloat = 0.0
    cache_hit_rate: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Prefill-side prompt tokens served from the radix cache"
    )
    retractions_per_turn: float | None = Field(default=None, ge=0.0, description="Retracted requests per turn")

    def capacity(self, mode: Mode) -> PoolCapacity:
        """The configuration that ran, as a :class:`PoolCapacity`."""
        return PoolCapacity(
            mode=mode, prefill=self.prefill_workers, decode=self.decode_workers, colocated=self.colocated_workers
        )


class SizePool(Frozen):
    """The KV pool one worker of a (GPU type, TP degree) holds, as SGLang sizes it at that TP."""

    gpu_type: str = Field(min_length=1)
    tp: int = Field(ge=1)
    kv_pool_tokens: PosFloat = Field(description="sglang:max_total_num_tokens of one worker of this size")


class DecodeCost(Frozen):
    """A decode iteration's cost on one worker size, fitted on the batch's KV tokens: ``t = A + b·n + c·K``.

    n running requests holding K KV tokens (SGLang's decode log line, "#running-req" and "#token"); the improved
    predictor's own decode terms (PEARL's device parameters keep PEARL's ``A + b·n``; docs/makespan.md, "Decode
    cost on KV tokens"). Fitted online by :func:`pearl_sched.profiles.telemetry.fit_decode_cost`.
    """

    gpu_type: str = Field(min_length=1)
    tp: int = Field(ge=1)
    iteration_s: NonNegFloat = Field(description="A: fixed cost of one decode iteration")
    per_seq_s: NonNegFloat = Field(description="b: added iteration cost per running request")
    per_kv_token_s: NonNegFloat = Field(description="c: added iteration cost per KV token the batch attends")


class PrefillCost(Frozen):
    """A prefill's seconds on one reference worker by the context it runs over: α·n + β·n·(c + n/2).

    n new tokens after c cached ones: the linear layers cost α per new token, attention β per (new token, context
    token) pair, over the cached prefix and the causal half of the new tokens themselves. So an append over a long
    cached prefix costs more per token than recomputing a context from scratch, which one rate per token (PEARL's
    t_p) cannot tell apart. Chunking does not change it: chunks of one prompt sum to α·N + β·N²/2. Fitted from the
    prefill batches a deployment logs (:class:`pearl_sched.profiles.telemetry.PrefillSteps`; docs/makespan.md,
    "Prefill cost by context").
    """

    per_token_s: NonNegFloat = Field(description="α: seconds per new token (the linear layers)")
    per_token_context_s: NonNegFloat = Field(
        description="β: seconds per new token per token it attends to (the cached prefix and half its own)"
    )
    per_batch_s: NonNegFloat = Field(
        default=0.0,
        exclude_if=lambda v: v == 0,
        description="t₀: fixed seconds of one prefill batch whatever its tokens (weights read, launch, the "
        "framework's step); 0: fitted through the origin",
    )

    def seconds(self, new_tokens: float, cached_tokens: float) -> float:
        """Seconds of prefilling ``new_tokens`` after ``cached_tokens`` on one reference worker, per-token terms only.

        The per-batch t₀ is charged once per prefill batch by the predictor.
        """
        return new_tokens * (self.per_token_s + self.per_token_context_s * (cached_tokens + new_tokens / 2))


class ServingParams(Frozen):
    """How the SGLang workers serve: memory, caching, routing, PD transfer, mixed steps — and what they reported.

    The defaults are SGLang's and the SGLang model gateway's (docs/makespan.md cites each).
    """

    kv_limited: bool = Field(default=True, description="False: PEARL's infinite KV memory (no limit, no eviction)")
    kv_pool_tokens: PosFloat | None = Field(
        default=None, description="KV pool of one reference worker (sglang:max_total_num_tokens); None: H_max / K"
    )
    size_pools: tuple[SizePool, ...] = Field(
        default=(),
        description="Each declared worker size's own KV pool; such a size also runs at its own decode iteration "
        "cost A. A size not listed counts as its capacity weight in reference pools",
    )
    router: Literal["cache_aware", "least_load", "round_robin"] = "cache_aware"
    perfect_cache: bool = Field(default=False, description="True: PEARL's every prefix always cached")
    pd_whole_context: bool = Field(
        default=True,
        description="SGLang PD: the prefill worker never holds decode-generated tokens and the whole context's KV "
        "crosses the link each turn; False: PEARL's (only ΔL is prefilled and sent)",
    )
    decode_radix_cache: bool = Field(default=False, description="--disaggregation-decode-enable-radix-cache")
    decode_cost_by_context: bool = Field(
        default=False,
        description="Opt-in: a sequence's decode cost grows with its context (b measured at the mean context, scaled "
        "by the KV it reads); False: PEARL's b for every context (docs/makespan.md, 'Decode cost by context')",
    )
    decode_costs: tuple[DecodeCost, ...] = Field(
        default=(),
        exclude_if=lambda v: not v,
        description="Decode iteration costs per worker size fitted on n and the batch's KV tokens (telemetry); a "
        "size listed decodes at A + (b + c·f)·n, f the tokens a decoding sequence holds; one not listed at PEARL's "
        "A + b·n (docs/makespan.md, 'Decode cost on KV tokens')",
    )
    enable_mixed_chunk: bool = Field(default=False, description="--enable-mixed-chunk")
    mixed_step_factor: PosFloat = Field(
        default=1.0, description="φ = mixed_s / (prefill_s + decode_s) of the step-time engine at the operating point"
    )
    kv_transfer_bytes_per_s: PosFloat | None = Field(
        default=None, description="Measured P→D speed per link (sglang:kv_transfer_speed_gb_s); None: PEARL's BW"
    )
    prefill_cost: PrefillCost | None = Field(
        default=None,
        description="Prefill seconds by new and cached tokens, fitted from the workers' prefill batches; None: "
        "PEARL's t_p per token whatever the context (the prior, and a fit without spread in context)",
    )
    prefill_cost_by_context: bool = Field(
        default=False,
        description="Opt-in: charge prefills with ``prefill_cost`` where one is fitted; False: t_p per token (measured "
        "less accurate with it, docs/makespan.md 'Prefill cost by context')",
    )
    prefill_step_cost: PrefillCost | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Prefill seconds per batch t₀ + α·n + β·n·(c + n/2), fitted with the intercept from the workers' "
        "prefill batches; None: not fitted",
    )
    prefill_batch_cost: bool = Field(
        default=False,
        exclude_if=lambda v: not v,
        description="Opt-in: charge prefills with ``prefill_step_cost`` where one is fitted, its t₀ once per prefill "
        "batch the model expects (docs/makespan.md, 'A prefill batch's fixed cost'); it then replaces t_p and "
        "``prefill_cost``",
    )
    chunked_prefill_tokens: PosFloat = Field(
        default=8192.0,
        exclude_if=lambda v: v == 8192.0,
        description="--chunked-prefill-size: the most new tokens one prefill batch computes (SGLang's default for "
        "GPUs of 60-160 GiB, server_args._handle_gpu_memory_settings)",
    )
    group_size: int = Field(
        default=1,
        ge=1,
        exclude_if=lambda v: v == 1,
        description="Trajectories that share their first prompt (a GRPO group: the rollout's samples per prompt, "
        "verl's rollout.n); 1: none share",
    )
    shared_prompt_hits: bool = Field(
        default=True,
        exclude_if=lambda v: v,
        description="With groups (group_size > 1) a turn whose own prefix missed still finds its group's first prompt "
        "cached, and the first-turn burst prefills a group's prompt once per worker it lands on (docs/makespan.md, "
        "'Group-shared prompts'); False: every trajectory's prompt is its own, as before",
    )
    live_share: Literal["linear", "turn_counts"] = Field(
        default="linear",
        exclude_if=lambda v: v == "linear",
        description="Opt-in 'turn_counts': where the workload logs its turn counts (Workload.turn_quantiles), the "
        "batch spans its longest trajectory's turns and each phase holds the trajectories still live at its turns; "
        "'linear': S turns, the live share falling linearly with the mean (docs/makespan.md, 'The live share from "
        "turn counts')",
    )
    pd_prefill_queue: bool = Field(
        default=False,
        exclude_if=lambda v: not v,
        description="Opt-in: in PD mode a trajectory's cycle is at least the prefill pool's work per cycle (every live "
        "trajectory's turn through the pool's first-come first-served queue), so where the pool binds the "
        "trajectories queue there rather than decode, and the prefill side's LRU sees that regular cycle "
        "(docs/makespan.md, 'The PD prefill queue in the cycle'); False: the cycle without that queue",
    )
    colocated: ModeObservation | None = None
    disaggregated: ModeObservation | None = None

    def observed(self, mode: Mode) -> ModeObservation | None:
        """What the workers reported while ``mode`` ran, if they did."""
        return self.colocated if mode is Mode.COLOCATED else self.disaggregated

    @model_validator(mode="after")
    def _unique_decode_costs(self) -> ServingParams:
        keys = [(d.gpu_type, d.tp) for d in self.decode_costs]
        if len(set(keys)) != len(keys):
            raise ValueError(f"decode_costs repeat a (gpu_type, tp): {keys}")
        return self

    def decode_cost(self, gpu_type: str, tp: int) -> DecodeCost | None:
        """The KV-aware decode cost fitted for workers of (gpu_type, tp), if one was."""
        return next((d for d in self.decode_costs if (d.gpu_type, d.tp) == (gpu_type, tp)), None)

    @property
    def charged_prefill_cost(self) -> PrefillCost | None:
        """The prefill cost the predictor charges, None for t_p per token.

        ``prefill_step_cost`` (with its per-batch t₀) when opted in and fitted, else ``prefill_cost`` when opted in.
        """
        if self.prefill_batch_cost and self.prefill_step_cost is not None:
            return self.prefill_step_cost
        return self.prefill_cost if self.prefill_cost_by_context else None


PEARL_LIMIT = ServingParams(kv_limited=False, perfect_cache=True, pd_whole_context=False)
"""PEARL's assumptions: unlimited KV memory, every prefix cached, PD moves only the appended tokens."""


class ImprovedParams(Frozen):
    """PEARL's parameters plus what the improved model adds."""

    pearl: PearlParams
    prefill_s_per_token_per_context: NonNegFloat = Field(
        default=0.0, description="t_c: added prefill seconds per token per token of cached context"
    )
    serving: ServingParams = Field(default_factory=ServingParams)
    generated_tokens_cv: NonNegFloat = Field(
        default=1.0,
        description="Coefficient of variation of the tokens a turn generates (the orchestrator's logs of a batch); "
        "1: memoryless (geometric) output lengths",
    )


class CycleState(Frozen):
    """The fixed point of the trajectory cycle for one pool configuration."""

    decoding: NonNegFloat = Field(description="n: trajectories decoding at once")
    iteration_s: NonNegFloat = Field(description="τ: one decode iteration")
    cycle_s: NonNegFloat = Field(description="C: one turn of one trajectory, admission queueing included")
    transfer_s: NonNegFloat
    prefill_s: NonNegFloat
    bubble_ratio: NonNegFloat = Field(description="θ = (B − n)/n, an output here")
    kv_limited: bool = Field(default=False, description="The KV pool caps n (the rest queue for admission)")
    prefill_hit: NonNegFloat = Field(default=1.0, description="h: share of the previous context still cached")
    decode_hit: NonNegFloat = Field(default=0.0, description="h_D: PD decode radix cache share (0 without it)")
    group_hit_tokens: NonNegFloat = Field(
        default=0.0, description="g: tokens of its group's first prompt a turn that missed its own prefix still finds"
    )
    prefill_tokens_per_turn: NonNegFloat = Field(default=0.0, description="x: tokens one turn prefills")
    transfer_tokens_per_turn: NonNegFloat = Field(default=0.0, description="KV tokens one PD turn sends")
    retractions_per_turn: NonNegFloat = 0.0


class Phase(NamedTuple):
    """A share of the batch's turns: the live trajectories' context and how many are live."""

    context: float
    trajectories: float


class _Flow(NamedTuple):
    """Per-turn token flows of one configuration at one context, with n trajectories decoding."""

    hit: float
    decode_hit: float
    prefill_tokens: float
    transfer_tokens: float
    retractions: float
    kv_limited: bool
    prefill_s: float | None = None  # one turn's prefill on a reference worker by context; None: x·t_p (one term)
    group_tokens: float = 0.0  # g: the group's first prompt a turn that missed its own prefix still finds cached


class _Pools(NamedTuple):
    """A configuration resolved by worker size: each role's compute capacity, KV pool and decode iteration cost.

    ``kv_tokens[role]`` is the role's total KV pool per reference worker of its capacity (its workers' own pools
    summed, over the capacity), ``iteration_s[role]`` the capacity-weighted mean of their decode iteration costs A.
    """

    capacity: PoolCapacity
    kv_tokens: dict[Role, float]
    iteration_s: dict[Role, float]


def _fit_pool(capacities: list[float], times: list[float]) -> PoolTerms:
    """``fixed + work/E`` fitted to ``times`` in relative least squares (both coefficients non-negative)."""
    u = [1.0 / t for t in times]
    v = [1.0 / (e * t) for e, t in zip(capacities, times, strict=True)]
    suu, suv, svv = sum(a * a for a in u), sum(a * b for a, b in zip(u, v, strict=True)), sum(b * b for b in v)
    su, sv = sum(u), sum(v)
    det = suu * svv - suv * suv
    fixed = (su * svv - sv * suv) / det if det > 1e-12 * suu * svv else -1.0
    work = (suu * sv - suv * su) / det if det > 1e-12 * suu * svv else -1.0
    if fixed < 0 or work < 0:
        fixed_only, work_only = su / suu, sv / svv
        err_fixed = sum((fixed_only * a - 1) ** 2 for a in u)
        err_work = sum((work_only * b - 1) ** 2 for b in v)
        fixed, work = (fixed_only, 0.0) if err_fixed <= err_work else (0.0, work_only)
    return PoolTerms(fixed_s=max(fixed, 0.0), work_s=max(work, 0.0))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


_Tokens = TypeVar("_Tokens", float, np.ndarray)
"""One configuration's floats (:meth:`ImprovedMakespanModel._flow`) or lanes of them (:meth:`_LaneCycle.flow`)."""


def _turn_tokens(
    workload: Workload,
    later: float,
    colocated: bool,
    whole_context: bool,
    context: _Tokens,
    held: _Tokens,
    hit: _Tokens,
    decode_hit: _Tokens | float,
    group: _Tokens | float,
    retractions: _Tokens,
) -> tuple[_Tokens, _Tokens, _Tokens | float]:
    """(prompt tokens missed, tokens prefilled, tokens sent to decode) per turn, before clipping at 0.

    A trajectory's first turn has no prefix to miss, recompute or send (its prompt is the first-turn burst): those
    terms apply to the ``later`` = (S − 1)/S of the turns that follow one. Colocated, a retracted request
    re-prefills half a turn's output and, on a miss, its prefix; PD sends ΔL (``whole_context``: the whole context
    less what the decode side's cache holds). The same expressions, in the same order, for floats and for lanes.
    """
    generated, appended = workload.generated_tokens_per_turn, workload.appended_tokens_per_turn
    missed = later * (1 - hit) * (held - group)
    if colocated:
        return missed, appended + missed + retractions * (generated / 2 + missed), 0.0
    if whole_context:
        return missed, appended + later * generated + missed, appended + later * (1 - decode_hit) * context
    return missed, appended + missed, appended


class ImprovedMakespanModel:
    """The improved predictor (module docstring); a drop-in :class:`~pearl_sched.makespan.MakespanModel`."""

    def __init__(self, params: ImprovedParams) -> None:
        """A model over ``params``; capacities, KV bytes and prefill rates come from its PEARL part."""
        self.params = params
        self._pearl = PearlMakespanModel(params.pearl)
        self._corrections: dict[tuple[Workload, Mode], tuple[float, float]] = {}
        self._terms: dict[Workload, MakespanTerms] = {}
        self._predictions: dict[tuple[Workload, PoolCapacity], MakespanBreakdown] = {}
        self._resolved: dict[tuple[Workload, PoolCapacity], _Pools] = {}
        self._weights: dict[tuple[Workload, str, int, Role], float] = {}

    @property
    def name(self) -> str:
        """``"improved"``."""
        return "improved"

    def describe(self) -> dict[str, object]:
        """The name and the parameters, as JSON (part of the plan's input digest)."""
        return {"name": self.name, "params": self.params.model_dump(mode="json")}

    @property
    def memory_aware(self) -> bool:
        """Whether a configuration whose KV does not fit is predicted slow (queueing, retraction, misses).

        True unless the serving parameters lift the KV limit (``kv_limited=False``, PEARL's infinite memory).
        ``plan()``'s ``PolicyConfig.rank_by_predict`` (on by default where worker sizes are declared) drops PEARL's
        hard KV constraint for such a model (docs/formulation.md, "Ranking by predict").
        """
        return self.params.serving.kv_limited

    def capacity_weight(self, workload: Workload, gpu_type: str, tp: int, role: Role) -> float:
        """Reference workers one worker of (gpu_type, tp) is worth in ``role``, as the MILP's surrogate sees it.

        PEARL's per-token weight, except for a size whose own KV pool is declared (``ServingParams.size_pools``):
        its memory and decode iteration cost differ from the weight's share of the reference worker's, so its
        weight is the one under which the reference surrogate gives the size's own throughput bound
        (docs/makespan.md, "Worker sizes").
        """
        weight = self._pearl.capacity_weight(workload, gpu_type, tp, role)
        if not self._declared(SizeCount(role=role, gpu_type=gpu_type, tp=tp, count=1.0)):
            return weight
        memo = (self._key(workload), gpu_type, tp, role)
        if memo not in self._weights:
            if len(self._weights) > 256:
                self._weights.clear()
            self._weights[memo] = self._sized_weight(workload, gpu_type, tp, role, weight)
        return self._weights[memo]

    def kv_capacity_bytes(self, gpu_type: str, tp: int) -> float:
        """As PEARL's model: KV-cache bytes one worker of (gpu_type, tp) holds."""
        return self._pearl.kv_capacity_bytes(gpu_type, tp)

    def prefill_tokens_per_s(self, gpu_type: str, tp: int) -> float:
        """As PEARL's model: sustained prefill throughput of one worker of (gpu_type, tp)."""
        return self._pearl.prefill_tokens_per_s(gpu_type, tp)

    # -- memory and caching -----------------------------------------------------------------------------------
    @staticmethod
    def _key(workload: Workload) -> Workload:
        """The workload without the fields this model does not read (memo key): what is unfinished, θ, demand."""
        return workload.model_copy(
            update={"unfinished": workload.batch_size, "bubble_ratio": 0.0, "min_prefill_tokens_per_s": 0.0}
        )

    def _by_turn_counts(self, workload: Workload) -> bool:
        """Whether the live share comes from the batch's turn counts (``live_share``, and the workload logs them)."""
        return self.params.serving.live_share == "turn_counts" and bool(workload.turn_quantiles)

    def _span(self, workload: Workload) -> float:
        """The turns the batch's phases span and its critical path follows.

        S, or with the live share from turn counts the longest trajectory's (the last of ``turn_quantiles``).
        PEARL's additive terms, the environment time S·T_env and the colocated switch overhead S·T_over, keep the
        workload's S.
        """
        return workload.turn_quantiles[-1] if self._by_turn_counts(workload) else workload.turns

    def _later(self, workload: Workload) -> float:
        """The share of the batch's turns that are not a trajectory's first: (S − 1)/S, or from the turn counts."""
        if not self._by_turn_counts(workload):
            return max(workload.turns - 1.0, 0.0) / workload.turns
        s = workload.turn_quantiles[-1]
        mean_turns = sum(live_shares(workload.turn_quantiles, s)) * s / PHASES
        return max(mean_turns - 1.0, 0.0) / mean_turns if mean_turns > 0 else 0.0

    def kv_pool_tokens(self, workload: Workload) -> float:
        """KV tokens one reference worker holds: the measured pool, else H_max / K; infinite in PEARL's limit.

        A worker of another (GPU type, TP) counts as its capacity weight in reference workers, so its memory is
        taken as that many reference pools (docs/makespan.md, "Worker sizes").
        """
        serving = self.params.serving
        k = workload.kv_bytes_per_token
        if not serving.kv_limited or k <= 0:
            return math.inf
        if serving.kv_pool_tokens is not None:
            return serving.kv_pool_tokens
        return self._pearl.reference.kv_capacity_bytes / k

    def size_pool_tokens(self, workload: Workload, gpu_type: str, tp: int) -> float | None:
        """KV tokens one worker of (gpu_type, tp) holds when its size's own pool is declared, else None.

        The reference worker's is :meth:`kv_pool_tokens`; another size's is its ``ServingParams.size_pools`` entry
        (infinite in PEARL's limit). None: the size is not declared and counts as its capacity weight in reference
        pools (docs/makespan.md, "Worker sizes").
        """
        ref = self._pearl.reference
        if (gpu_type, tp) == (ref.gpu_type, ref.tp):
            return self.kv_pool_tokens(workload)
        for pool in self.params.serving.size_pools:
            if (pool.gpu_type, pool.tp) == (gpu_type, tp):
                limited = self.params.serving.kv_limited and workload.kv_bytes_per_token > 0
                return pool.kv_pool_tokens if limited else math.inf
        return None

    def _compute_weight(self, workload: Workload, gpu_type: str, tp: int, role: Role) -> float:
        """Reference workers of compute one worker of (gpu_type, tp) is worth in ``role``: its per-token costs' ratio.

        PEARL's weight (t_p and b of each size's device parameters), except that where the size and the reference
        both have a KV-aware decode fit (``ServingParams.decode_costs``) the decode cost per sequence is that fit's,
        b + c·(c̄ + r/2) at the batch's mean context, the cost the predictor charges the reference's sequences
        (:meth:`_per_seq_s`). PEARL's refit of b on n alone falls to its floor in a KV-bound batch (the number
        decoding falls as contexts grow), and a ratio of two such refits, fitted on different batches, swings from
        near 0 to above the size's share of GPUs (docs/makespan.md, "Worker sizes: the compute weight").
        """
        ref = self._pearl.reference
        own, base = self.params.serving.decode_cost(gpu_type, tp), self.params.serving.decode_cost(ref.gpu_type, ref.tp)
        if role is Role.PREFILL or own is None or base is None:
            return self._pearl.capacity_weight(workload, gpu_type, tp, role)
        held = self._context(workload) + workload.generated_tokens_per_turn / 2
        base_seq_s = base.per_seq_s + base.per_kv_token_s * held
        own_seq_s = own.per_seq_s + own.per_kv_token_s * held
        if own_seq_s <= 0 or base_seq_s <= 0:
            return self._pearl.capacity_weight(workload, gpu_type, tp, role)
        if role is Role.DECODE:
            return base_seq_s / own_seq_s
        dl, r = workload.appended_tokens_per_turn, workload.generated_tokens_per_turn
        dev = self._pearl.device(gpu_type, tp)
        return (dl * ref.prefill_s_per_token + r * base_seq_s) / (dl * dev.prefill_s_per_token + r * own_seq_s)

    def _declared(self, worker: SizeCount) -> bool:
        """Whether the worker's size has its own pool and step times (declared, not the reference)."""
        ref = self._pearl.reference
        key = (worker.gpu_type, worker.tp)
        return key != (ref.gpu_type, ref.tp) and any((p.gpu_type, p.tp) == key for p in self.params.serving.size_pools)

    def _pools(self, workload: Workload, capacity: PoolCapacity) -> _Pools:
        """``capacity`` resolved by worker size (:class:`_Pools`).

        Without workers of a declared size every role has the reference worker's pool and A, and the capacities
        are the ones given (the approximation of before: another size counts as its weight in reference pools).
        With them, each role's capacity is recomputed from its workers (PEARL's per-token weights), its pool is
        Σ count·M_size over that capacity (an undeclared size's M = weight·M_ref) and its A the capacity-weighted
        mean of the sizes' A.
        """
        ref = self._pearl.reference
        m_ref = self.kv_pool_tokens(workload)
        roles = (Role.PREFILL, Role.DECODE, Role.COLOCATED)
        a_ref = self._iteration_s(ref.gpu_type, ref.tp)
        if not capacity.workers or not any(self._declared(w) for w in capacity.workers):
            return _Pools(capacity, dict.fromkeys(roles, m_ref), dict.fromkeys(roles, a_ref))
        memo = (workload, capacity)
        if memo in self._resolved:
            return self._resolved[memo]
        compute: dict[Role, float] = {}
        kv_tokens: dict[Role, float] = {}
        iteration: dict[Role, float] = {}
        for role in roles:
            members = [w for w in capacity.workers if w.role is role and w.count > 0]
            weights = [w.count * self._compute_weight(workload, w.gpu_type, w.tp, role) for w in members]
            total = sum(weights)
            compute[role] = total
            kv_tokens[role], iteration[role] = m_ref, a_ref
            if total <= 0 or not any(self._declared(w) for w in members):
                continue
            tokens = 0.0
            fixed = 0.0
            for w, weight in zip(members, weights, strict=True):
                own = self.size_pool_tokens(workload, w.gpu_type, w.tp)
                tokens += w.count * own if own is not None else weight * m_ref
                a = self._iteration_s(w.gpu_type, w.tp) if own is not None else a_ref
                fixed += weight * a
            kv_tokens[role] = tokens / total
            iteration[role] = fixed / total
        resolved = capacity.model_copy(
            update={
                "prefill": compute[Role.PREFILL],
                "decode": compute[Role.DECODE],
                "colocated": compute[Role.COLOCATED],
            }
        )
        if len(self._resolved) > 1024:
            self._resolved.clear()
        self._resolved[memo] = _Pools(resolved, kv_tokens, iteration)
        return self._resolved[memo]

    @staticmethod
    def _context(workload: Workload) -> float:
        """The mean context a turn starts from (its prefix), from the workload or its turns."""
        if workload.mean_context_tokens > 0:
            return workload.mean_context_tokens
        return (
            workload.prompt_tokens
            + workload.turns * (workload.appended_tokens_per_turn + workload.generated_tokens_per_turn) / 2
        )

    def phases(self, workload: Workload) -> list[Phase]:
        """The batch in :data:`PHASES` equal shares of its S turns: each phase's context and live trajectories.

        Live trajectories are at the same turn index, so their context grows linearly from the first prompt by
        ΔL + r a turn (capped at the longest context): turn k's prompt is P₀ + k·(ΔL + r), the prefix it starts from
        that less its ΔL. A phase holds turns k ∈ [j·S/6, (j+1)·S/6), whose mean index is u_j·S − ½ (u_j the
        phase's midpoint): its context is that turn's prefix (never below P₀). Trajectories finish along the way:
        the mean trajectory takes S̄ = 2·(c̄ − P₀)/(ΔL + r) turns (c̄ the mean context over a trajectory's life), and
        the live share falls linearly with the mean S̄/S (the slowest trajectory, on the critical path, is always
        live). With ``live_share="turn_counts"`` and the workload's ``turn_quantiles`` the phases span the longest
        trajectory's turns instead, and each holds the share :func:`live_shares` reads from the counts.
        """
        s, b = self._span(workload), workload.batch_size
        step = workload.appended_tokens_per_turn + workload.generated_tokens_per_turn
        mean = self._context(workload)
        start = min(workload.prompt_tokens, mean)
        turns_mean = min(s, max(1.0, 2 * (mean - start) / step)) if step > 0 else s  # a trajectory takes ≥ 1 turn
        slope = 2 * (1 - turns_mean / s)
        top = workload.max_context_tokens or math.inf
        shares = live_shares(workload.turn_quantiles, s) if self._by_turn_counts(workload) else None
        out = []
        for j in range(PHASES):
            u = (j + 0.5) / PHASES
            if shares is not None:
                live = shares[j]
            else:
                live = 1 - slope * u if slope <= 1 else max(0.0, 1 - u * s / (2 * turns_mean))
            prefix = max(start, start + max(0.0, u * s - 0.5) * step - workload.appended_tokens_per_turn)
            out.append(Phase(context=min(prefix, top), trajectories=max(1.0, b * live)))
        return out

    @staticmethod
    def _footprint(workload: Workload, mode: Mode, context: float) -> float:
        """KV tokens one decoding sequence holds: its prompt (the prefix and ΔL) and half the turn's output.

        PD decode adds SGLang's reserved decode tokens.
        """
        f = context + workload.appended_tokens_per_turn + workload.generated_tokens_per_turn / 2
        return f + (RESERVED_DECODE_TOKENS if mode is Mode.DISAGGREGATED else 0.0)

    @staticmethod
    def _full_pool_retractions(workload: Workload, mode: Mode, context: float) -> float:
        """Retractions per turn of a colocated worker whose KV pool is full, where none were measured.

        SGLang's admission reserves :data:`MIN_NEW_TOKEN_RATIO` of a request's new tokens (at most
        :data:`CLIP_MAX_NEW_TOKENS`); the rest of a turn's output, a footprint at a time, is retracted.
        """
        top = workload.max_context_tokens
        max_new = max(top - context, 1.0) if top else CLIP_MAX_NEW_TOKENS
        reserve = MIN_NEW_TOKEN_RATIO * min(max_new, CLIP_MAX_NEW_TOKENS)
        footprint = ImprovedMakespanModel._footprint(workload, mode, context)
        return max(0.0, workload.generated_tokens_per_turn - reserve) / footprint

    def _router(self, workers: float) -> float:
        """Probability that a turn lands on the worker holding its prefix."""
        if self.params.serving.router == "cache_aware":
            return 1.0
        return 1.0 / max(workers, 1.0)

    @staticmethod
    def _retention(free_tokens: float, idle_per_worker: float, context: float) -> float:
        """Share of the idle trajectories' prefixes that the free part of a worker's pool still holds."""
        if idle_per_worker <= 1e-12 or context <= 0 or math.isinf(free_tokens):
            return 1.0
        return min(1.0, max(0.0, free_tokens) / (idle_per_worker * context))

    def _cycle_spread(self, workload: Workload, decoding_share: float, iteration_s: float) -> float:
        """Coefficient of variation of one trajectory's cycle (decode, environment, queueing, own prefill).

        The cycle varies with the turn's decode time d (the tokens generated, CV ``generated_tokens_cv``) and its
        environment call (σ_env); queueing and prefill are shared. By Little's law d/C = n/B, the decoding share.
        """
        d = workload.generated_tokens_per_turn * iteration_s
        if decoding_share <= 0 or d <= 0:
            return 0.0
        return math.hypot(self.params.generated_tokens_cv, workload.env_time_std_s / d) * min(decoding_share, 1.0)

    @staticmethod
    def _lru_hit(share: float, spread: float) -> float:
        """LRU hit probability of a prefix reused once a cycle, with ``share`` of the reused prefixes fitting.

        Che's approximation for renewal requests: the cache holds what was used within T_c, the hit probability
        is P(R < T_c) for the reuse interval R, and the held share is G(T_c) = ∫₀^T_c P(R > x) dx / E[R]. For R a
        shifted exponential of mean C and coefficient of variation s ≤ 1 (a fixed part C·(1 − s) and a memoryless
        one), G(T) = (1 − s) + s·P(R < T) beyond the shift, so h = max(0, 1 − (1 − share)/s): the share itself
        when reuse is memoryless (s ≥ 1, the independent-reference estimate), none below a full fit when it is
        periodic (s → 0), as LRU under a cyclic scan.
        """
        if share >= 1.0:
            return 1.0
        s = min(spread, 1.0)
        if s <= 0:
            return 0.0
        return max(0.0, 1.0 - (1.0 - share) / s)

    def _held(self, workload: Workload, mode: Mode, context: float) -> float:
        """Tokens of the previous context the prefill side can have cached (PD: never the decode-generated ones)."""
        if mode is Mode.DISAGGREGATED and self.params.serving.pd_whole_context:
            return max(context - workload.generated_tokens_per_turn, 0.0)
        return context

    def _group_members(self, workload: Workload, live: float) -> tuple[float, float]:
        """(live members of a group, groups with a live member) when ``live`` of the batch's trajectories are live."""
        g = float(self.params.serving.group_size)
        return max(1.0, g * live / workload.batch_size), min(workload.batch_size / g, live)

    def _sharing(self) -> bool:
        """Whether trajectories share their group's first prompt in the cache (opted in, groups of two or more)."""
        serving = self.params.serving
        return serving.shared_prompt_hits and serving.group_size > 1 and not serving.perfect_cache

    def _group_router(self, members: float, workers: float) -> float:
        """Probability that a worker a group member's turn lands on holds the group's prompt.

        Cache-aware: the router sends a group's members where its prompt is (one worker). Least-load and
        round-robin: the prompt is on each worker one of the ``members`` landed on, 1 − (1 − 1/N)^members of them.
        """
        if self.params.serving.router == "cache_aware" or workers <= 1:
            return 1.0
        return 1.0 - math.pow(1.0 - 1.0 / workers, members)

    def _group_prompt(self, workload: Workload, live: float, workers: float, free_tokens: float, held: float) -> float:
        """g: expected tokens of its group's first prompt that a turn whose own prefix missed still finds cached.

        A GRPO group's members share their first prompt P₀; in SGLang's radix cache it is one node, the parent of
        every member's own tail, so it becomes an evictable leaf only once every member's tail on that worker is
        gone, and each member's turn refreshes it: it is the last of a group's tokens LRU evicts. It stays while
        the worker's free pool holds its groups' prompts (the share that fits, as :meth:`_retention`), on the
        worker the turn lands on (:meth:`_group_router`). 0 without groups or with ``shared_prompt_hits`` off.
        """
        if not self._sharing():
            return 0.0
        prompt = min(workload.prompt_tokens, held)
        if prompt <= 0 or workers <= 0:
            return 0.0
        members, groups = self._group_members(workload, live)
        held_share = self._retention(free_tokens, groups / workers, prompt)
        return self._group_router(members, workers) * held_share * prompt

    def _burst_tokens(self, workload: Workload, workers: float) -> float:
        """Tokens the first-turn burst prefills over the pool: every first prompt, or each group's once per worker.

        With groups sharing their prompt (``shared_prompt_hits``) a group's prompt is prefilled on each worker its
        members land on (one with the cache-aware router; N·(1 − (1 − 1/N)^G) of N with least-load or round-robin)
        and hit by the members after; without, every trajectory prefills its own.
        """
        return self._burst_prompts(workload, workers) * workload.prompt_tokens

    def _burst_prompts(self, workload: Workload, workers: float) -> float:
        """First prompts the burst prefills over the pool (:meth:`_burst_tokens`, in prompts)."""
        b = workload.batch_size
        if not self._sharing():
            return b
        g = float(self.params.serving.group_size)
        spread = self.params.serving.router != "cache_aware" and workers > 1
        copies = workers * self._group_router(g, workers) if spread else 1.0
        return min(float(b), b / g * min(copies, g))

    def _prefill_batches(
        self,
        workload: Workload,
        mode: Mode,
        decoding_per_worker: float,
        iteration_s: float,
        tokens: float,
        turn_s: float,
        batch_s: float,
    ) -> float:
        """Prefill batches one turn takes on its worker, each paying the fitted per-batch t₀ (at least its chunks).

        Turns reach a worker's prefill side at λ = n_w/(r·τ₀) a second (each of the n_w sequences decoding per worker
        ends a turn every r iterations; Little's law). SGLang's scheduler puts every waiting request in the next
        prefill batch (up to ``--chunked-prefill-size`` tokens), so requests that arrive within one scheduling round
        T share a batch: with Poisson arrivals a round has a batch with probability 1 − e^(−λT), i.e.
        (1 − e^(−λT))/(λT) batches a turn (1 when λT → 0: a batch per turn). Colocated, the round is a decode
        iteration τ₀; a PD prefill worker runs batches back to back while requests wait, a round t₀/(1 − ρ) with ρ
        = λ·``turn_s`` (a turn's per-token seconds). A turn of x tokens needs x/chunk batches whatever it shares.
        """
        r = workload.generated_tokens_per_turn
        chunks = tokens / self.params.serving.chunked_prefill_tokens
        if decoding_per_worker <= 0 or iteration_s <= 0:
            return max(chunks, 1.0)
        arrivals_per_s = decoding_per_worker / (r * iteration_s)
        busy = min(0.95, arrivals_per_s * turn_s)  # ρ: the share of a PD prefill worker's time spent on tokens
        round_s = iteration_s if mode is Mode.COLOCATED else batch_s / (1.0 - busy)
        load = arrivals_per_s * round_s
        shared = 1.0 if load <= 1e-9 else -math.expm1(-load) / load
        return max(chunks, shared)

    def _flow(
        self,
        workload: Workload,
        capacity: PoolCapacity,
        n: float,
        phase: Phase,
        *,
        corrected: bool = True,
        pools: _Pools | None = None,
    ) -> _Flow:
        """Hits, tokens prefilled and sent per turn, and retractions, in ``phase`` with n trajectories decoding.

        ``pools``: ``self._pools(workload, capacity)`` where the caller has it (the fixed point's bisection calls this
        some 40 times a phase on one configuration; resolving it again each time is a memo lookup that hashes the
        workload and the capacity, a third of predict's time). The same object, so the same floats.
        """
        serving = self.params.serving
        r, dl = workload.generated_tokens_per_turn, workload.appended_tokens_per_turn
        b, c = phase.trajectories, phase.context
        if pools is None:
            pools = self._pools(workload, capacity)
        capacity = pools.capacity
        mode = capacity.mode
        m = pools.kv_tokens[Role.COLOCATED if mode is Mode.COLOCATED else Role.DECODE]
        f = self._footprint(workload, mode, c)
        decode_workers = capacity.colocated if mode is Mode.COLOCATED else capacity.decode
        held = self._held(workload, mode, c)
        decode_hit = 0.0
        if serving.perfect_cache:
            hit = 1.0
        elif mode is Mode.COLOCATED:
            free = m - n / decode_workers * f
            hit = self._retention(free, (b - n) / decode_workers, c) * self._router(decode_workers)
        else:
            # The prefill worker's cache is reused once a cycle, in nearly the order it was filled: LRU keeps far
            # less than the share that fits when the cycle is regular (docs/makespan.md, "PD prefill-side hits").
            share = self._retention(pools.kv_tokens[Role.PREFILL], b / capacity.prefill, held)
            iteration_s = pools.iteration_s[Role.DECODE] + self._per_seq_s(workload, c) * n / decode_workers
            spread = self._cycle_spread(workload, n / b if b > 0 else 1.0, iteration_s)
            hit = self._lru_hit(share, spread) * self._router(capacity.prefill)
            if serving.decode_radix_cache:
                free = m - n / decode_workers * f
                decode_hit = self._retention(free, (b - n) / decode_workers, c) * self._router(decode_workers)
        if corrected and not serving.perfect_cache:
            gamma, floor = self._correction(workload, mode)
            hit = min(1.0, max(hit * gamma, floor))
        if mode is Mode.COLOCATED:
            group = self._group_prompt(workload, b, decode_workers, m - n / decode_workers * f, held)
        else:
            group = self._group_prompt(workload, b, capacity.prefill, pools.kv_tokens[Role.PREFILL], held)
        limited = math.isfinite(m) and n >= decode_workers * m / f * (1 - 1e-9)
        retractions = 0.0
        observed = serving.observed(mode)
        if observed is not None and observed.retractions_per_turn is not None:
            retractions = observed.retractions_per_turn
        elif limited and mode is Mode.COLOCATED and m - n / decode_workers * f <= 1e-9 * m:
            retractions = self._full_pool_retractions(workload, mode, c)
        later = self._later(workload)  # the turns after a trajectory's first
        colocated, whole = mode is Mode.COLOCATED, mode is Mode.DISAGGREGATED and serving.pd_whole_context
        missed, prefill, transfer = _turn_tokens(
            workload, later, colocated, whole, c, held, hit, decode_hit, group, retractions
        )
        seconds = None
        cost = serving.charged_prefill_cost
        if cost is not None:
            # The same tokens, each part over the context it runs after (docs/makespan.md, "Prefill cost by
            # context"): a turn that finds its prefix appends ΔL over it (PD: ΔL + r over the prompt part, c − r); one
            # that misses recomputes its whole prompt from scratch; the first turn appends ΔL (its prompt is the burst).
            miss = later * (1 - hit)
            kept = later * hit
            seconds = (1 - later) * cost.seconds(dl, c)
            if whole:
                seconds += kept * cost.seconds(dl + r, held) + miss * cost.seconds(dl + r + held - group, group)
            else:
                seconds += kept * cost.seconds(dl, c) + miss * cost.seconds(dl + held - group, group)
            if mode is Mode.COLOCATED and retractions > 0:
                # A retracted request re-prefills the tail it lost: half a turn's output, and its prefix on a miss.
                tail = c + dl
                seconds += retractions * (
                    (1 - miss) * cost.seconds(r / 2, tail)
                    + miss * cost.seconds(r / 2 + held - group, tail - held + group)
                )
            if cost.per_batch_s > 0:
                prefill_workers = decode_workers if mode is Mode.COLOCATED else capacity.prefill
                iteration_s = pools.iteration_s[Role.COLOCATED if mode is Mode.COLOCATED else Role.DECODE]
                iteration_s += self._per_seq_s(workload, c) * n / decode_workers
                tokens = max(prefill, 0.0) + retractions * (r / 2 + missed)
                seconds += cost.per_batch_s * self._prefill_batches(
                    workload, mode, n / prefill_workers, iteration_s, tokens, seconds, cost.per_batch_s
                )
        return _Flow(
            hit=hit,
            decode_hit=decode_hit,
            prefill_tokens=max(prefill, 0.0),
            transfer_tokens=max(transfer, 0.0),
            retractions=retractions,
            kv_limited=limited,
            prefill_s=seconds,
            group_tokens=group,
        )

    def token_hit_rate(self, workload: Workload, capacity: PoolCapacity, *, corrected: bool = True) -> float:
        """The prefill side's cached share of prompt tokens over the batch, as SGLang's counters measure it.

        ``sglang:cached_tokens_total`` over ``sglang:prompt_tokens_total``: a later turn's prompt is its context plus
        ΔL, of which the held part is cached with probability h (and, on a miss, its group's first prompt g); a
        first prompt is cached only where a group member prefilled it before (``shared_prompt_hits``).
        """
        states = self._states(workload, capacity, corrected=corrected)
        cached, prompts = self._hit_tokens(workload, capacity, [st.prefill_hit for st in states], states)
        return cached / prompts if prompts > 0 else 0.0

    def _hit_tokens(
        self, workload: Workload, capacity: PoolCapacity, hits: list[float], states: list[CycleState]
    ) -> tuple[float, float]:
        """(cached, prompt) tokens over the batch with hit share ``hits[j]`` in phase j and the states' group hits."""
        capacity = self._pools(workload, capacity).capacity
        mode = capacity.mode
        phases = self.phases(workload)
        span = self._span(workload)
        turns = sum(ph.trajectories for ph in phases) * span / PHASES
        later = max(turns - workload.batch_size, 0.0) / turns if turns > 0 else 0.0  # share of turns after the first
        weight = span / PHASES * later
        cached = weight * sum(
            h * ph.trajectories * self._held(workload, mode, ph.context)
            + (1 - h) * ph.trajectories * st.group_hit_tokens
            for h, ph, st in zip(hits, phases, states, strict=True)
        )
        first = workload.batch_size * workload.prompt_tokens
        workers = capacity.colocated if mode is Mode.COLOCATED else capacity.prefill
        cached += first - self._burst_tokens(workload, workers)
        prompts = first + weight * sum(
            ph.trajectories * (ph.context + workload.appended_tokens_per_turn) for ph in phases
        )
        return cached, prompts

    def _correction(self, workload: Workload, mode: Mode) -> tuple[float, float]:
        """(γ, floor) from the measured hit rate: h = max(γ·h_structural, floor).

        γ = measured ÷ structural token hit rate at the configuration that ran, both less what the group-shared
        prompts (g and the first prompts) account for, which is no prefix hit; where the structure predicts
        (almost) no hits there but hits were measured, γ = 1 and the measured rate, as a share of the cacheable
        tokens, is a floor. (1, 0) without a measurement.
        """
        observed = self.params.serving.observed(mode)
        if observed is None or observed.cache_hit_rate is None:
            return 1.0, 0.0
        key = (self._key(workload), mode)
        if key not in self._corrections:
            ran = observed.capacity(mode)
            usable = (ran.colocated if mode is Mode.COLOCATED else min(ran.prefill, ran.decode)) > 0
            result = (1.0, 0.0)
            if usable:
                states = self._states(workload, ran, corrected=False)
                structural, prompts = self._hit_tokens(workload, ran, [st.prefill_hit for st in states], states)
                shared, _ = self._hit_tokens(workload, ran, [0.0] * PHASES, states)
                all_cached, _ = self._hit_tokens(workload, ran, [1.0] * PHASES, states)
                if shared > 0:  # the group's share is no prefix hit: the ratio of what remains
                    measured = max(0.0, observed.cache_hit_rate * prompts - shared)
                    own, room = (structural - shared) / prompts, all_cached - shared
                    gamma = measured / (structural - shared) if own > STRUCTURAL_HIT_FLOOR else 1.0
                    floor = min(1.0, measured / room) if room > 0 else 0.0
                else:
                    own, rate = structural / prompts, observed.cache_hit_rate
                    gamma = rate / own if own > STRUCTURAL_HIT_FLOOR else 1.0
                    floor = min(1.0, rate / (all_cached / prompts)) if all_cached > 0 else 0.0
                result = (gamma, 0.0) if own > STRUCTURAL_HIT_FLOOR else (1.0, floor)
            self._corrections[key] = result
        return self._corrections[key]

    # -- per-token costs ----------------------------------------------------------------------------------------
    def _iteration_s(self, gpu_type: str, tp: int) -> float:
        """A decode iteration's fixed cost A on a worker of (gpu_type, tp): its KV-aware fit's, else PEARL's."""
        cost = self.params.serving.decode_cost(gpu_type, tp)
        return cost.iteration_s if cost is not None else self._pearl.device(gpu_type, tp).decode_iteration_s

    def _per_seq_s(self, workload: Workload, context: float) -> float:
        """The decode cost of a sequence at a turn's context on the reference worker.

        ``context`` is the prefix the turn starts from; the sequence holds it, the ΔL appended and (mid-turn) r/2
        generated tokens. With a KV-aware fit of the reference size (``ServingParams.decode_costs``) it is
        b + c·(c + ΔL + r/2): the fit's per-request cost plus its cost per KV token times the tokens the sequence
        holds mid-turn. Otherwise PEARL's b, scaled by the KV it reads when ``ServingParams.decode_cost_by_context``
        is on: a decode iteration's per-sequence cost is reading that sequence's KV (attention is memory-bound; the
        weights are A), so a sequence holding c + ΔL + r/2 tokens costs b·(c + ΔL + r/2)/c̄; PEARL's b unscaled
        where that is off (PEARL's limit), the batch has no KV size (nothing to read) or its mean context is unknown
        (under a token).
        """
        ref = self._pearl.reference
        fitted = self.params.serving.decode_cost(ref.gpu_type, ref.tp)
        if fitted is not None:
            held = context + workload.appended_tokens_per_turn + workload.generated_tokens_per_turn / 2
            return fitted.per_seq_s + fitted.per_kv_token_s * held
        b = ref.decode_per_seq_s
        mean = workload.mean_context_tokens
        if not self.params.serving.decode_cost_by_context or mean < 1 or workload.kv_bytes_per_token <= 0:
            return b
        return b * (context + workload.appended_tokens_per_turn + workload.generated_tokens_per_turn / 2) / mean

    def _prefill_per_token_s(self, workload: Workload) -> float:
        ref = self._pearl.reference
        return ref.prefill_s_per_token + self.params.prefill_s_per_token_per_context * workload.mean_context_tokens

    def _prefill_s(self, workload: Workload, new_tokens: float, cached_tokens: float) -> float:
        """Seconds of prefilling ``new_tokens`` after ``cached_tokens`` on one reference worker.

        The fitted two-term cost (``ServingParams.prefill_cost``) where there is one and it is opted in
        (``prefill_cost_by_context``), else t_p(c̄) per token.
        """
        cost = self.params.serving.charged_prefill_cost
        if cost is None:
            return new_tokens * self._prefill_per_token_s(workload)
        return cost.seconds(new_tokens, cached_tokens)

    def _burst_s(self, workload: Workload, workers: float = 1.0) -> float:
        """The first-turn burst on one reference worker: the first prompts (:meth:`_burst_tokens`), from scratch."""
        cost = self.params.serving.charged_prefill_cost
        if cost is None:
            return self._burst_tokens(workload, workers) * self._prefill_per_token_s(workload)
        seconds = self._burst_prompts(workload, workers) * self._prefill_s(workload, workload.prompt_tokens, 0.0)
        if cost.per_batch_s > 0:  # the burst waits all at once: full batches of --chunked-prefill-size tokens
            tokens = self._burst_tokens(workload, workers)
            seconds += cost.per_batch_s * max(tokens / self.params.serving.chunked_prefill_tokens, workers)
        return seconds

    def _bandwidth(self, prefill_capacity: float) -> float:
        """P→D bytes per second of the whole prefill pool."""
        p = self.params.pearl
        link = self.params.serving.kv_transfer_bytes_per_s or p.kv_bandwidth_bytes_per_s
        return link * (prefill_capacity if p.kv_bandwidth_per_prefill_worker else 1.0)

    def _first_turn_transfer_tokens(self, workload: Workload) -> float:
        return workload.prompt_tokens if self.params.serving.pd_whole_context else 0.0

    # -- the cycle ------------------------------------------------------------------------------------------------
    def cycle(self, workload: Workload, capacity: PoolCapacity) -> CycleState:
        """The trajectory cycle's fixed point for a configuration: one phase's, or the mean over the phases."""
        states = self._states(workload, capacity, corrected=True)
        if all(st == states[0] for st in states):
            return states[0]
        mean = {
            name: _mean([float(getattr(st, name)) for st in states])
            for name in CycleState.model_fields
            if name != "kv_limited"
        }
        return CycleState(**mean, kv_limited=any(st.kv_limited for st in states))

    def _states(self, workload: Workload, capacity: PoolCapacity, *, corrected: bool) -> list[CycleState]:
        """The cycle's fixed point in each phase of the batch."""
        capacity = self._pools(workload, capacity).capacity
        return [self._solve(workload, capacity, ph, corrected=corrected) for ph in self.phases(workload)]

    def _solve(self, workload: Workload, capacity: PoolCapacity, phase: Phase, *, corrected: bool) -> CycleState:
        p = self.params.pearl
        serving = self.params.serving
        b_total = phase.trajectories
        r = workload.generated_tokens_per_turn
        env = workload.env_time_per_turn_s
        t_p = self._prefill_per_token_s(workload)
        colocated = capacity.mode is Mode.COLOCATED
        decode_capacity = capacity.colocated if colocated else capacity.decode
        prefill_capacity = capacity.colocated if colocated else capacity.prefill
        if decode_capacity <= 0 or prefill_capacity <= 0 or r <= 0:
            raise ValueError("the configuration needs prefill and decode capacity > 0")
        kv = workload.kv_bytes_per_token
        bandwidth = self._bandwidth(prefill_capacity)
        mixed = serving.mixed_step_factor if serving.enable_mixed_chunk else 1.0
        footprint = self._footprint(workload, capacity.mode, phase.context)
        pools = self._pools(workload, capacity)
        decode_role = Role.COLOCATED if colocated else Role.DECODE
        n_max = min(float(b_total), decode_capacity * pools.kv_tokens[decode_role] / footprint)
        fixed_iteration_s = pools.iteration_s[decode_role]
        per_seq_s = self._per_seq_s(workload, phase.context)

        def pool_work_s(turn_s: float) -> float:
            """The PD prefill pool's work per cycle: each live trajectory's turn of ``turn_s`` prefill seconds."""
            return b_total * turn_s / prefill_capacity

        def core(n: float, queue: bool = False) -> tuple[float, float, float, float, _Flow]:
            """(τ, C, one turn's transfer, one turn's own prefill, the flow) with n decoding.

            ``queue`` (PD): C is at least the prefill pool's work per cycle (``ServingParams.pd_prefill_queue``).
            """
            flow = self._flow(workload, capacity, n, phase, corrected=corrected, pools=pools)
            x = flow.prefill_tokens
            # Own prefill: x tokens at the pool's per-worker speed; PEARL's per-turn switch overhead counts here.
            turn_s = x * t_p if flow.prefill_s is None else flow.prefill_s
            own_prefill = turn_s + (p.switch_overhead_s if colocated else 0.0)
            plain = fixed_iteration_s + per_seq_s * n / decode_capacity
            stolen = 0.0
            if colocated:
                # Prefill-first: the decode batch waits while the worker prefills, W seconds per cycle, so
                # τ = plain·C/(C − W) and C = r·τ + rest; C is the larger root of C² − (W + rest + r·plain)·C + W·rest.
                if flow.prefill_s is None:
                    stolen = mixed * t_p * b_total * x / prefill_capacity
                else:
                    stolen = mixed * b_total * flow.prefill_s / prefill_capacity
                rest = env + own_prefill
                span = stolen + rest + r * plain
                cycle = (span + math.sqrt(max(span * span - 4 * stolen * rest, 0.0))) / 2
                iteration = plain * cycle / (cycle - stolen) if cycle > stolen else plain
                transfer = 0.0
            else:
                cycle, iteration, transfer = 0.0, plain, 0.0
                # The prefill pool's work per cycle: each live trajectory's turn, first come first served. Where it
                # exceeds the rest of the cycle the trajectories wait in that queue (docs/makespan.md).
                backlog = pool_work_s(turn_s) if queue else 0.0
                for _ in range(50):  # inner fixed point in C (the link's share depends on it); contracts quickly
                    transfer = 0.0
                    if kv > 0:
                        size = flow.transfer_tokens * kv
                        link_share = min(0.95, b_total * size / (cycle * bandwidth)) if cycle else 0.0
                        transfer = size / (bandwidth * (1 - link_share))
                    new_cycle = max(r * iteration + transfer + env + own_prefill, backlog)
                    if abs(new_cycle - cycle) <= 1e-12 * new_cycle:
                        cycle = new_cycle
                        break
                    cycle = new_cycle
            if flow.kv_limited and n > 0:
                # The rest of the batch queues for admission: per cycle a worker prefills (W) and runs B/n rounds of
                # r decode iterations, so C = W + B·r·plain/n, and τ = plain·C/(C − W) as above.
                queued = stolen + b_total * r * plain / n
                if queued > cycle:
                    cycle = queued
                    iteration = plain * cycle / (cycle - stolen) if cycle > stolen else plain
            return iteration, cycle, transfer, own_prefill, flow

        def state(n: float, queue: bool = False) -> CycleState:
            iteration, cycle, transfer, own_prefill, flow = core(n, queue)
            return CycleState(
                decoding=n,
                iteration_s=iteration,
                cycle_s=cycle,
                transfer_s=transfer,
                prefill_s=own_prefill,
                bubble_ratio=(b_total - n) / n if n > 0 else 0.0,
                kv_limited=flow.kv_limited,
                prefill_hit=flow.hit,
                decode_hit=flow.decode_hit,
                group_hit_tokens=flow.group_tokens,
                prefill_tokens_per_turn=flow.prefill_tokens,
                transfer_tokens_per_turn=flow.transfer_tokens,
                retractions_per_turn=flow.retractions,
            )

        def bisect(hi: float, queue: bool = False) -> float:
            lo = 1e-9
            for _ in range(_BISECTION_STEPS):  # g(n) = B·d(n)/C(n) − n changes sign over (0, hi]
                mid = (lo + hi) / 2
                iteration_s, cycle_s, *_ = core(mid, queue)
                if b_total * r * iteration_s / cycle_s > mid:
                    lo = mid
                else:
                    hi = mid
            return (lo + hi) / 2

        top = None
        if n_max < b_total:
            top = state(n_max)
            if b_total * r * top.iteration_s / top.cycle_s < n_max * (1 - 1e-12):
                top = None  # else the KV pool caps n: the rest of the batch queues for admission
        found = top if top is not None else state(bisect(n_max))
        if serving.pd_prefill_queue and not colocated and pool_work_s(found.prefill_s) > found.cycle_s:
            # The prefill pool cannot keep up with this cycle: the fixed point with its queue, below this n (where
            # the queue makes g negative). The cycle without the queue is kept wherever it is consistent.
            return state(bisect(found.decoding, queue=True), queue=True)
        return found

    # -- throughput bounds ------------------------------------------------------------------------------------------
    def _decode_bound_s(self, workload: Workload, capacity: float, mode: Mode, pools: _Pools | None = None) -> float:
        """S·r iterations of the decode pool, each serving at most the KV pool's limit per worker.

        ``pools``: the configuration by worker size (its decode role's pool and A); None: the reference worker's.
        """
        ref = self._pearl.reference
        s, r = self._span(workload), workload.generated_tokens_per_turn
        role = Role.COLOCATED if mode is Mode.COLOCATED else Role.DECODE
        m = pools.kv_tokens[role] if pools is not None else self.kv_pool_tokens(workload)
        a = pools.iteration_s[role] if pools is not None else self._iteration_s(ref.gpu_type, ref.tp)
        total = 0.0
        for ph in self.phases(workload):
            b = ph.trajectories
            per_worker = min(b / capacity, m / self._footprint(workload, mode, ph.context))
            total += a * b / (capacity * per_worker) + self._per_seq_s(workload, ph.context) * b / capacity
        return s * r * total / PHASES

    def _prefill_bound_s(self, workload: Workload, capacity: float, flows: list[_Flow], mode: Mode) -> float:
        """The prefill pool's work: every turn's prefill and the first prompts (PD: and the link's bytes)."""
        s, b = self._span(workload), workload.batch_size
        phases = self.phases(workload)
        t_p = self._prefill_per_token_s(workload)
        turns = [s / PHASES * ph.trajectories for ph in phases]
        cost = self.params.serving.charged_prefill_cost
        if cost is None:
            prefilled = sum(t * f.prefill_tokens for t, f in zip(turns, flows, strict=True)) + self._burst_tokens(
                workload, capacity
            )
            work = prefilled * t_p / capacity
        else:
            seconds = sum(t * (f.prefill_s or 0.0) for t, f in zip(turns, flows, strict=True))
            work = (seconds + self._burst_s(workload, capacity)) / capacity
        if mode is Mode.DISAGGREGATED and workload.kv_bytes_per_token > 0:
            sent = sum(t * f.transfer_tokens for t, f in zip(turns, flows, strict=True))
            sent += b * self._first_turn_transfer_tokens(workload)
            work += sent * workload.kv_bytes_per_token / self._bandwidth(capacity)
        return work

    def _quick_flows(self, workload: Workload, capacity: PoolCapacity) -> list[_Flow]:
        """Each phase's flow at n without the fixed point (the MILP surrogate): the no-queue decoding share."""
        pools = self._pools(workload, capacity)
        capacity = pools.capacity
        role = Role.COLOCATED if capacity.mode is Mode.COLOCATED else Role.DECODE
        decode = capacity.colocated if capacity.mode is Mode.COLOCATED else capacity.decode
        r = workload.generated_tokens_per_turn
        own = workload.appended_tokens_per_turn * self._prefill_per_token_s(workload)
        cost = self.params.serving.charged_prefill_cost
        m = pools.kv_tokens[role]
        flows = []
        for ph in self.phases(workload):
            if cost is not None:
                own = cost.seconds(workload.appended_tokens_per_turn, ph.context) + cost.per_batch_s
            d = r * (pools.iteration_s[role] + self._per_seq_s(workload, ph.context) * ph.trajectories / decode)
            n = ph.trajectories * d / (d + workload.env_time_per_turn_s + own)
            n = min(n, decode * m / self._footprint(workload, capacity.mode, ph.context))
            flows.append(self._flow(workload, capacity, n, ph))
        return flows

    def _surrogate_grid(self, workload: Workload) -> list[float]:
        """The capacities (reference workers) the surrogate is fitted over: 1 … max(16, 4·B·c/M), geometric."""
        m = self.kv_pool_tokens(workload)
        saturation = workload.batch_size * self._context(workload) / m if math.isfinite(m) else 1.0
        top = max(16.0, 4.0 * saturation)
        return [top ** (k / (SURROGATE_POINTS - 1)) for k in range(SURROGATE_POINTS)]

    def _pool_bounds(self, workload: Workload, capacity: PoolCapacity) -> dict[Role, float]:
        """Each pool's throughput bound on ``capacity`` with the no-queue decoding share (what the surrogate fits)."""
        pools = self._pools(workload, capacity)
        cap = pools.capacity
        flows = self._quick_flows(workload, cap)
        if cap.mode is Mode.COLOCATED:
            return {
                Role.COLOCATED: self._prefill_bound_s(workload, cap.colocated, flows, Mode.COLOCATED)
                + self._decode_bound_s(workload, cap.colocated, Mode.COLOCATED, pools)
                + workload.turns * self.params.pearl.switch_overhead_s
            }
        return {
            Role.PREFILL: self._prefill_bound_s(workload, cap.prefill, flows, Mode.DISAGGREGATED),
            Role.DECODE: self._decode_bound_s(workload, cap.decode, Mode.DISAGGREGATED, pools),
        }

    def _sized_weight(self, workload: Workload, gpu_type: str, tp: int, role: Role, weight: float) -> float:
        """The capacity weight under which the MILP's reference surrogate gives a declared size's own bound.

        On the surrogate's grid, reference capacity e against n = e·TP_ref/TP workers of the size (the same GPUs):
        the size's bound with its own pool and A, T(n), over the reference workers' bound T_ref(e) scales the
        fitted time at e, and the fitted terms are inverted there, E* = work/(fit(e)·T(n)/T_ref(e) − fixed) (so a
        size that is the reference's exact fraction per GPU gets that fraction, whatever the fit's error). The
        weight is the geometric mean of E*/n over the grid (PEARL's weight where no point inverts). In PD the
        other role is e reference workers.
        """
        ref = self._pearl.reference
        terms = self.terms(workload).pool(role)
        ratios = []
        for e in self._surrogate_grid(workload):
            n = e * ref.tp / tp
            own = SizeCount(role=role, gpu_type=gpu_type, tp=tp, count=n)
            if role is Role.COLOCATED:
                sized = PoolCapacity(mode=Mode.COLOCATED, colocated=e, workers=(own,))
                plain = PoolCapacity(mode=Mode.COLOCATED, colocated=e)
            else:
                other = Role.DECODE if role is Role.PREFILL else Role.PREFILL
                rest = SizeCount(role=other, gpu_type=ref.gpu_type, tp=ref.tp, count=e)
                sized = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=e, decode=e, workers=(own, rest))
                plain = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=e, decode=e)
            reference = self._pool_bounds(workload, plain)[role]
            if reference <= 0 or terms.work_s <= 0:
                continue
            target = terms.time_s(e) * self._pool_bounds(workload, sized)[role] / reference
            if target > terms.fixed_s:
                ratios.append(terms.work_s / (target - terms.fixed_s) / n)
        return math.exp(_mean([math.log(x) for x in ratios])) if ratios else weight

    def terms(self, workload: Workload) -> MakespanTerms:
        """Each pool's throughput bound as PEARL's ``fixed + work/E``, fitted over a grid of capacities.

        Exact in PEARL's limit (the bounds are of that form there); elsewhere a secant surrogate of the KV limit and
        the cache misses, whose size depends on E (docs/makespan.md, "The MILP's surrogate").
        """
        memo = self._key(workload)
        if memo in self._terms:
            return self._terms[memo]
        grid = self._surrogate_grid(workload)
        colocated, prefill, decode = [], [], []
        for e in grid:
            colocated.append(
                self._pool_bounds(workload, PoolCapacity(mode=Mode.COLOCATED, colocated=e))[Role.COLOCATED]
            )
            bounds = self._pool_bounds(workload, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=e, decode=e))
            prefill.append(bounds[Role.PREFILL])
            decode.append(bounds[Role.DECODE])
        zero = PoolTerms(fixed_s=0.0, work_s=0.0)
        terms = MakespanTerms(
            prefill=_fit_pool(grid, prefill) if min(prefill) > 0 else zero,
            decode=_fit_pool(grid, decode),
            colocated=_fit_pool(grid, colocated),
            environment_s=workload.env_time_s,
        )
        if len(self._terms) > 64:
            self._terms.clear()
        self._terms[memo] = terms
        return terms

    def predict(self, workload: Workload, capacity: PoolCapacity) -> MakespanBreakdown:
        """The improved makespan of ``workload`` on ``capacity`` (module docstring), with its parts."""
        memo = (self._key(workload), capacity)
        if memo not in self._predictions:
            if len(self._predictions) > 256:
                self._predictions.clear()
            self._predictions[memo] = self._predict(workload, capacity)
        return self._predictions[memo]

    def _splits_evenly(self, role: Role) -> bool:
        """Whether the gateway keeps each trajectory on one worker of ``role`` and gives every worker the same share.

        smg's ``cache_aware`` (lightseekorg/smg ``model_gateway/src/policies/cache_aware.rs``, ``select_worker``;
        formerly sgl-project/sglang ``sgl-router``) sends a request that matches no worker's tree to the one with
        the fewest requests in flight (``Worker::load``, a count) and one that matches to the worker holding its
        prefix, so the batch's first-turn burst is spread by count and each trajectory stays where its prefix is;
        it weighs no worker by its size. (smg 1.13.0 ranks misses by expected wait over each worker's reported
        throughput; at a batch's start none has reported one, so the burst still splits evenly — docs/makespan.md.)
        The simulated ``least_load`` sends every request to the worker with the
        fewest in flight, so a faster worker, which drains its requests sooner, takes more (smg's newer
        ``least_load.rs`` divides token work by each worker's reported throughput): the pooled capacity stands for it.
        ``round_robin`` deals requests in turn, but a trajectory's turns visit every worker, so its chain mixes the
        sizes; not modelled (pooled). A PD decode worker is chosen by least load unless the decode radix cache is
        on (then by the gateway's policy), as the simulator's gateway does (docs/simulator.md, the routing row).
        """
        serving = self.params.serving
        router = serving.router if role is not Role.DECODE or serving.decode_radix_cache else "least_load"
        return router == "cache_aware"

    def _router_splits(self, workload: Workload, capacity: PoolCapacity) -> list[PoolCapacity]:
        """The configurations whose slowest sets the makespan when the gateway splits a mixed-size role evenly.

        A role of workers of two or more declared sizes (or the reference's) that the gateway splits by count
        (:meth:`_splits_evenly`) gives each worker B/N of its trajectories; the workers of one size then finish as
        N workers of that size would on the whole batch, and the role ends with its slowest size. Each such role is
        replaced by N workers of each of its sizes in turn (every combination across roles); the makespan is the
        largest prediction (docs/makespan.md, "Worker sizes: the gateway's split"). Empty where no role is so
        split: one size per role, no declared size, an undeclared size in the role, or a router that pools.
        """
        ref = self._pearl.reference
        if not capacity.workers or not any(self._declared(w) for w in capacity.workers):
            return []
        options: list[list[tuple[SizeCount, ...]]] = []
        split = False
        for role in (Role.PREFILL, Role.DECODE, Role.COLOCATED):
            members = [w for w in capacity.workers if w.role is role and w.count > 0]
            sizes = list(dict.fromkeys((w.gpu_type, w.tp) for w in members))
            known = all(self._declared(w) or (w.gpu_type, w.tp) == (ref.gpu_type, ref.tp) for w in members)
            if len(sizes) < 2 or not known or not self._splits_evenly(role):
                options.append([tuple(members)])
                continue
            split = True
            total = sum(w.count for w in members)
            options.append([(SizeCount(role=role, gpu_type=g, tp=tp, count=total),) for g, tp in sizes])
        if not split:
            return []
        out = []
        for combo in itertools.product(*options):
            workers = tuple(w for group in combo for w in group)
            update: dict[str, object] = {"workers": workers}
            for role in (Role.PREFILL, Role.DECODE, Role.COLOCATED):
                update[role.value] = sum(
                    w.count * self._compute_weight(workload, w.gpu_type, w.tp, role) for w in workers if w.role is role
                )
            out.append(capacity.model_copy(update=update))
        return out

    def _predict(self, workload: Workload, capacity: PoolCapacity) -> MakespanBreakdown:
        splits = self._router_splits(workload, capacity)
        if splits:
            return max((self.predict(workload, c) for c in splits), key=lambda p: p.total_s)
        pools = self._pools(workload, capacity)
        capacity = pools.capacity
        states = self._states(workload, capacity, corrected=True)
        phases = self.phases(workload)
        s, b = self._span(workload), workload.batch_size
        env = workload.env_time_s
        colocated = capacity.mode is Mode.COLOCATED
        prefill_capacity = capacity.colocated if colocated else capacity.prefill
        burst = self._burst_s(workload, prefill_capacity) / prefill_capacity
        # The last turn ends the trajectory: S turns make S − 1 environment calls on the critical path.
        calls = max(s - 1.0, 0.0)
        critical = (
            s * _mean([st.cycle_s for st in states])
            - workload.env_time_per_turn_s
            + slowest_delay_s(burst, workload.env_time_std_s * math.sqrt(calls), b)
        )
        flows = [
            self._flow(workload, capacity, st.decoding, ph, pools=pools) for st, ph in zip(states, phases, strict=True)
        ]
        decode_time = s * workload.generated_tokens_per_turn * _mean([st.iteration_s for st in states])
        own_prefill = s * _mean([st.prefill_s for st in states])
        if colocated:
            throughput = (
                self._prefill_bound_s(workload, capacity.colocated, flows, Mode.COLOCATED)
                - burst
                + self._decode_bound_s(workload, capacity.colocated, Mode.COLOCATED, pools)
                + workload.turns * self.params.pearl.switch_overhead_s
            )
            total = max(critical, throughput + env)
            return MakespanBreakdown(
                total_s=total,
                prefill_s=burst + own_prefill,
                decode_s=decode_time,
                transfer_s=0.0,
                environment_s=env,
                overhead_s=max(0.0, total - decode_time - own_prefill - env),
            )
        prefill_bound = self._prefill_bound_s(workload, capacity.prefill, flows, Mode.DISAGGREGATED)
        decode_bound = self._decode_bound_s(workload, capacity.decode, Mode.DISAGGREGATED, pools)
        total = max(critical, prefill_bound + env, decode_bound + env)
        return MakespanBreakdown(
            total_s=total,
            prefill_s=burst + own_prefill,
            decode_s=decode_time,
            transfer_s=s * _mean([st.transfer_s for st in states]),
            environment_s=env,
            overhead_s=0.0,
        )

    # -- many configurations at once ----------------------------------------------------------------------------------
    def predict_lanes_s(self, workload: Workload, capacities: Sequence[PoolCapacity]) -> np.ndarray:
        """``predict(workload, capacity).total_s`` of each of ``capacities``, float for float, in numpy lanes.

        The cycle's fixed point (:meth:`_solve`), the flows and the throughput bounds are run for every
        configuration at once, elementwise in numpy, the same operations in the same order as :meth:`predict` (IEEE
        arithmetic, so each lane equals ``predict``'s float); a configuration the gateway splits by size
        (:meth:`_router_splits`) is its splits' largest total, as in ``predict``. The parts with a per-lane Python
        function (``math.hypot``, ``math.pow``, a sum over the phases, the slowest trajectory's delay) call that
        function lane by lane, so they too are ``predict``'s. Under a fitted prefill cost
        (``ServingParams.charged_prefill_cost``) it calls ``predict`` configuration by configuration (not
        vectorised). A configuration without capacity in a role its mode needs (``predict`` refuses it) is ``inf``.

        Unlike :meth:`pearl_sched.makespan.PearlMakespanModel.predict_totals_s` it takes whole configurations (a
        mixed-size role's prediction depends on its workers, not on its capacity alone) and it gives no bound: the
        improved prediction is not monotone in capacity (docs/formulation.md, "Ranking by predict").

        Args:
            workload: The rollout batch.
            capacities: The configurations, of either mode.

        Returns:
            The predicted makespan of each configuration, in seconds.
        """
        out = np.full(len(capacities), np.inf)
        if self.params.serving.charged_prefill_cost is not None or workload.generated_tokens_per_turn <= 0:
            for i, capacity in enumerate(capacities):  # not vectorised: predict, one by one
                if self._has_capacity(workload, capacity):
                    out[i] = self.predict(workload, capacity).total_s
            return out
        key = self._key(workload)
        lanes: dict[Mode, tuple[list[PoolCapacity], list[int]]] = {
            Mode.COLOCATED: ([], []),
            Mode.DISAGGREGATED: ([], []),
        }
        for i, capacity in enumerate(capacities):
            known = self._predictions.get((key, capacity))
            if known is not None:
                out[i] = known.total_s
                continue
            for split in self._router_splits(workload, capacity) or [capacity]:
                lanes[split.mode][0].append(split)
                lanes[split.mode][1].append(i)
        best: dict[int, float] = {}
        for mode, (configurations, owners) in lanes.items():
            if not configurations:
                continue
            for i, total in zip(owners, self._lane_totals(workload, mode, configurations).tolist(), strict=True):
                best[i] = max(best[i], total) if i in best else total
        for i, total in best.items():
            out[i] = total
        return out

    def _has_capacity(self, workload: Workload, capacity: PoolCapacity) -> bool:
        """Whether the configuration has capacity in every role its mode needs (else ``predict`` raises)."""
        cap = self._pools(workload, capacity).capacity
        if cap.mode is Mode.COLOCATED:
            return cap.colocated > 0
        return cap.prefill > 0 and cap.decode > 0

    def _lane_totals(self, workload: Workload, mode: Mode, configurations: list[PoolCapacity]) -> np.ndarray:
        """:meth:`_predict`'s total (no gateway split) of each configuration of ``mode``, in lanes."""
        pools = [self._pools(workload, c) for c in configurations]
        colocated = mode is Mode.COLOCATED
        role = Role.COLOCATED if colocated else Role.DECODE
        cap_d = np.array([p.capacity.colocated if colocated else p.capacity.decode for p in pools], dtype=float)
        cap_p = np.array([p.capacity.colocated if colocated else p.capacity.prefill for p in pools], dtype=float)
        out = np.full(len(pools), np.inf)
        valid = (cap_d > 0) & (cap_p > 0)
        if not valid.any():
            return out
        pools = [p for p, ok in zip(pools, valid.tolist(), strict=True) if ok]
        cap_d, cap_p = cap_d[valid], cap_p[valid]
        lanes = _Lanes(
            cap_d=cap_d,
            cap_p=cap_p,
            m=np.array([p.kv_tokens[role] for p in pools], dtype=float),
            m_prefill=np.array([p.kv_tokens[Role.PREFILL] for p in pools], dtype=float),
            iteration_s=np.array([p.iteration_s[role] for p in pools], dtype=float),
        )
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out[valid] = self._lanes_predict(workload, mode, lanes)
        return out

    def _lanes_predict(self, workload: Workload, mode: Mode, lanes: _Lanes) -> np.ndarray:
        """:meth:`_predict` after the split, in lanes (every lane has capacity)."""
        phases = self.phases(workload)
        s, b = self._span(workload), workload.batch_size
        env = workload.env_time_s
        colocated = mode is Mode.COLOCATED
        states = self._lanes_solve(workload, mode, lanes, phases)
        prefill_capacity = lanes.cap_p  # colocated: cap_p is the colocated capacity
        caps = prefill_capacity.tolist()
        burst = [self._burst_s(workload, e) / e for e in caps]
        calls = max(s - 1.0, 0.0)
        spread = workload.env_time_std_s * math.sqrt(calls)
        delay = np.array(_slowest_delays_s(burst, spread, b), dtype=float)
        critical = s * _lane_means([st.cycle_s for st in states]) - workload.env_time_per_turn_s + delay
        flows = [st.flow for st in states]
        prefill_bound = self._lanes_prefill_bound_s(workload, lanes.cap_p, caps, flows, mode, phases)
        decode_bound = self._lanes_decode_bound_s(workload, lanes.cap_d, mode, lanes, phases)
        if colocated:
            throughput = (
                prefill_bound
                - np.array(burst, dtype=float)
                + decode_bound
                + workload.turns * self.params.pearl.switch_overhead_s
            )
            result: np.ndarray = np.maximum(critical, throughput + env)
            return result
        result = np.maximum(np.maximum(critical, prefill_bound + env), decode_bound + env)
        return result

    def _lanes_prefill_bound_s(
        self,
        workload: Workload,
        capacity: np.ndarray,
        caps: list[float],
        flows: list[_LaneFlow],
        mode: Mode,
        phases: list[Phase],
    ) -> np.ndarray:
        """:meth:`_prefill_bound_s` in lanes (t_p per token: no fitted prefill cost)."""
        s, b = self._span(workload), workload.batch_size
        t_p = self._prefill_per_token_s(workload)
        turns = [s / PHASES * ph.trajectories for ph in phases]
        tokens = _lane_sums([t * f.prefill_tokens for t, f in zip(turns, flows, strict=True)])
        prefilled = tokens + np.array([self._burst_tokens(workload, e) for e in caps], dtype=float)
        work: np.ndarray = prefilled * t_p / capacity
        if mode is Mode.DISAGGREGATED and workload.kv_bytes_per_token > 0:
            sent = _lane_sums([t * f.transfer_tokens for t, f in zip(turns, flows, strict=True)])
            sent += b * self._first_turn_transfer_tokens(workload)
            work += sent * workload.kv_bytes_per_token / self._lanes_bandwidth(capacity)
        return work

    def _lanes_decode_bound_s(
        self, workload: Workload, capacity: np.ndarray, mode: Mode, lanes: _Lanes, phases: list[Phase]
    ) -> np.ndarray:
        """:meth:`_decode_bound_s` in lanes."""
        s, r = self._span(workload), workload.generated_tokens_per_turn
        total: np.ndarray | float = 0.0
        for ph in phases:
            b = ph.trajectories
            per_worker = np.minimum(b / capacity, lanes.m / self._footprint(workload, mode, ph.context))
            total = total + (
                lanes.iteration_s * b / (capacity * per_worker) + self._per_seq_s(workload, ph.context) * b / capacity
            )
        return np.asarray(s * r * total / PHASES, dtype=float)

    def _lanes_bandwidth(self, prefill_capacity: np.ndarray) -> np.ndarray | float:
        """:meth:`_bandwidth` in lanes."""
        p = self.params.pearl
        link = self.params.serving.kv_transfer_bytes_per_s or p.kv_bandwidth_bytes_per_s
        if p.kv_bandwidth_per_prefill_worker:
            result: np.ndarray = link * prefill_capacity
            return result
        return link * 1.0

    def _lanes_solve(self, workload: Workload, mode: Mode, lanes: _Lanes, phases: list[Phase]) -> list[_LaneState]:
        """:meth:`_solve` (corrected) of every phase in lanes; one state per phase.

        The same bisection in every (phase, configuration) lane, the KV cap where it binds.
        """
        r = workload.generated_tokens_per_turn
        cycle = _LaneCycle(self, workload, mode, lanes, phases)
        b_total = cycle.b
        n_max = np.minimum(b_total, cycle.cap_d * cycle.m / cycle.footprint)
        top = cycle.core(n_max)
        capped = (n_max < b_total) & (b_total * r * top.iteration_s / top.cycle_s >= n_max * (1 - 1e-12))

        def bisect(hi: np.ndarray, queue: np.ndarray | None = None) -> np.ndarray:
            lo = np.full(hi.shape, 1e-9)
            for _ in range(_BISECTION_STEPS):
                mid = (lo + hi) / 2
                core = cycle.core(mid, queue)
                up = b_total * r * core.iteration_s / core.cycle_s > mid
                lo, hi = np.where(up, mid, lo), np.where(up, hi, mid)
            result: np.ndarray = (lo + hi) / 2
            return result

        n = np.where(capped, n_max, bisect(n_max))
        state = cycle.core(n)
        if self.params.serving.pd_prefill_queue and mode is Mode.DISAGGREGATED:
            # _solve: where the prefill pool cannot keep up with the cycle, the fixed point with its queue below n.
            queue = cycle.pool_work_s(state.flow.prefill_tokens * cycle.t_p) > state.cycle_s
            if queue.any():
                n = np.where(queue, bisect(n, queue), n)
                state = cycle.core(n, queue)
        width = len(lanes.cap_d)
        return [
            _LaneState(
                iteration_s=state.iteration_s[part],
                cycle_s=state.cycle_s[part],
                flow=_LaneFlow(*(field[part] for field in state.flow)),
            )
            for part in (slice(j * width, (j + 1) * width) for j in range(len(phases)))
        ]


class _Lanes(NamedTuple):
    """Configurations of one mode, resolved by worker size (:class:`_Pools`), as lanes."""

    cap_d: np.ndarray  # decode capacity (colocated: the colocated capacity)
    cap_p: np.ndarray  # prefill capacity (colocated: the colocated capacity)
    m: np.ndarray  # the decode role's KV pool per reference worker
    m_prefill: np.ndarray  # the prefill role's
    iteration_s: np.ndarray  # the decode role's A


class _LaneFlow(NamedTuple):
    """:class:`_Flow` in lanes (no fitted prefill cost)."""

    hit: np.ndarray
    prefill_tokens: np.ndarray
    transfer_tokens: np.ndarray


class _LaneState(NamedTuple):
    """What :meth:`ImprovedMakespanModel._predict` reads of each phase's :class:`CycleState`, in lanes."""

    iteration_s: np.ndarray
    cycle_s: np.ndarray
    flow: _LaneFlow


def _lane_sums(terms: list[np.ndarray]) -> np.ndarray:
    """Python's ``sum`` over ``terms`` lane by lane (the scalar path's sum of one float per phase, in its order)."""
    columns = [t.tolist() for t in terms]
    return np.array([sum(values) for values in zip(*columns, strict=True)], dtype=float)


def _lane_means(terms: list[np.ndarray]) -> np.ndarray:
    """``_mean`` over ``terms`` lane by lane."""
    columns = [t.tolist() for t in terms]
    return np.array([_mean(list(values)) for values in zip(*columns, strict=True)], dtype=float)


class _LaneCycle:
    """:meth:`ImprovedMakespanModel._solve`'s ``core`` and ``_flow`` in lanes (corrected, t_p per token).

    A lane is a (phase, configuration) pair, phase-major: what :meth:`ImprovedMakespanModel._solve` takes from the
    phase (its trajectories, context, footprint, per-sequence cost, held tokens) is repeated over the
    configurations, what it takes from the configuration (capacities, pools, A) is tiled over the phases; each
    lane's floats are the scalar path's for that phase and configuration.
    """

    def __init__(
        self, model: ImprovedMakespanModel, workload: Workload, mode: Mode, lanes: _Lanes, phases: list[Phase]
    ) -> None:
        serving = model.params.serving
        self.model, self.workload, self.serving = model, workload, serving
        self.colocated = mode is Mode.COLOCATED
        count = len(phases)

        def by_phase(values: list[float]) -> np.ndarray:
            return np.repeat(np.array(values, dtype=float), len(lanes.cap_d))

        self.cap_d, self.cap_p = np.tile(lanes.cap_d, count), np.tile(lanes.cap_p, count)
        self.m, self.m_prefill = np.tile(lanes.m, count), np.tile(lanes.m_prefill, count)
        self.fixed_iteration_s = np.tile(lanes.iteration_s, count)
        self.b = by_phase([ph.trajectories for ph in phases])
        self.c = by_phase([ph.context for ph in phases])
        self.footprint = by_phase([model._footprint(workload, mode, ph.context) for ph in phases])
        self.per_seq_s = by_phase([model._per_seq_s(workload, ph.context) for ph in phases])
        held = [model._held(workload, mode, ph.context) for ph in phases]
        self.held = by_phase(held)
        self.r = workload.generated_tokens_per_turn
        self.t_p = model._prefill_per_token_s(workload)
        self.env = workload.env_time_per_turn_s
        self.kv = workload.kv_bytes_per_token
        self.bandwidth = model._lanes_bandwidth(self.cap_p)
        self.mixed = serving.mixed_step_factor if serving.enable_mixed_chunk else 1.0
        self.gamma, self.floor = model._correction(workload, mode)
        self.finite_m = np.isfinite(self.m)
        self.later = model._later(workload)
        self.overhead_s = model.params.pearl.switch_overhead_s if self.colocated else 0.0
        # Retractions (_flow): a measured rate, else the estimate where the pool is full (colocated), a constant of
        # the phase's context.
        observed = serving.observed(mode)
        self.observed_retractions = None if observed is None else observed.retractions_per_turn
        self.retraction_estimate = by_phase([model._full_pool_retractions(workload, mode, ph.context) for ph in phases])
        # The group-shared prompt (_group_prompt): 0 where the phase's prompt is; its router factor depends on the
        # phase's live members and the configuration's workers only.
        self.sharing = model._sharing()
        prompts = [min(workload.prompt_tokens, h) for h in held]
        self.prompt = by_phase(prompts)
        self.group_on = self.prompt > 0
        groups, router = [], []
        workers = (lanes.cap_d if self.colocated else lanes.cap_p).tolist()
        for ph, prompt in zip(phases, prompts, strict=True):
            members, live_groups = model._group_members(workload, ph.trajectories)
            groups.append(live_groups)
            sharing = self.sharing and prompt > 0
            router += [model._group_router(members, w) if sharing else 1.0 for w in workers]
        self.groups = by_phase(groups)
        self.group_router = np.array(router, dtype=float)
        cache_aware = serving.router == "cache_aware"
        self.router_d = 1.0 if cache_aware else 1.0 / np.maximum(self.cap_d, 1.0)
        self.router_p = 1.0 if cache_aware else 1.0 / np.maximum(self.cap_p, 1.0)

    @staticmethod
    def _retention(free: np.ndarray, idle_per_worker: np.ndarray, context: np.ndarray) -> np.ndarray:
        """:meth:`ImprovedMakespanModel._retention` in lanes."""
        kept = np.minimum(1.0, np.maximum(0.0, free) / (idle_per_worker * context))
        result: np.ndarray = np.where((idle_per_worker <= 1e-12) | (context <= 0) | np.isinf(free), 1.0, kept)
        return result

    def _spread(self, decoding_share: np.ndarray, iteration_s: np.ndarray) -> np.ndarray:
        """:meth:`ImprovedMakespanModel._cycle_spread` in lanes.

        Its ``math.hypot`` is called lane by lane: numpy's is another algorithm, not always the same last bit.
        """
        d = self.r * iteration_s
        cv = self.model.params.generated_tokens_cv
        hypot = np.array(list(map(math.hypot, itertools.repeat(cv), (self.workload.env_time_std_s / d).tolist())))
        result: np.ndarray = np.where((decoding_share <= 0) | (d <= 0), 0.0, hypot * np.minimum(decoding_share, 1.0))
        return result

    def flow(self, n: np.ndarray) -> tuple[_LaneFlow, np.ndarray, np.ndarray]:
        """(:meth:`ImprovedMakespanModel._flow`, its ``kv_limited`` and ``retractions``) with n decoding, in lanes."""
        serving = self.serving
        c, b = self.c, self.b
        m, f, held = self.m, self.footprint, self.held
        decode_workers = self.cap_d
        decode_hit: np.ndarray | float = 0.0
        hit: np.ndarray
        if serving.perfect_cache:
            hit = np.ones(n.shape)
        elif self.colocated:
            free = m - n / decode_workers * f
            hit = self._retention(free, (b - n) / decode_workers, c) * self.router_d
        else:
            share = self._retention(self.m_prefill, b / self.cap_p, held)
            iteration_s = self.fixed_iteration_s + self.per_seq_s * n / decode_workers
            spread = self._spread(n / b, iteration_s)  # b ≥ 1: a phase has at least one live trajectory
            s = np.minimum(spread, 1.0)
            lru = np.where(s <= 0, 0.0, np.maximum(0.0, 1.0 - (1.0 - share) / s))
            hit = np.where(share >= 1.0, 1.0, lru) * self.router_p
            if serving.decode_radix_cache:
                free = m - n / decode_workers * f
                decode_hit = self._retention(free, (b - n) / decode_workers, c) * self.router_d
        if not serving.perfect_cache:
            hit = np.minimum(1.0, np.maximum(hit * self.gamma, self.floor))
        group: np.ndarray | float = 0.0
        if self.sharing:
            if self.colocated:
                held_share = self._retention(m - n / decode_workers * f, self.groups / decode_workers, self.prompt)
            else:
                held_share = self._retention(self.m_prefill, self.groups / self.cap_p, self.prompt)
            group = np.where(self.group_on, self.group_router * held_share * self.prompt, 0.0)
        limited = self.finite_m & (n >= decode_workers * m / f * (1 - 1e-9))
        retractions: np.ndarray
        if self.observed_retractions is not None:
            retractions = np.full(n.shape, self.observed_retractions)
        elif self.colocated:
            full = limited & (m - n / decode_workers * f <= 1e-9 * m)
            retractions = np.where(full, self.retraction_estimate, 0.0)
        else:
            retractions = np.zeros(n.shape)
        whole = not self.colocated and serving.pd_whole_context
        _, prefill, transfer = _turn_tokens(
            self.workload, self.later, self.colocated, whole, c, held, hit, decode_hit, group, retractions
        )
        flow = _LaneFlow(
            hit=hit,
            prefill_tokens=np.maximum(prefill, 0.0),
            transfer_tokens=np.maximum(np.broadcast_to(transfer, n.shape), 0.0),
        )
        return flow, limited, retractions

    def pool_work_s(self, turn_s: np.ndarray) -> np.ndarray:
        """:meth:`ImprovedMakespanModel._solve`'s ``pool_work_s`` in lanes: the PD prefill pool's work per cycle."""
        work: np.ndarray = self.b * turn_s / self.cap_p
        return work

    def core(self, n: np.ndarray, queue: np.ndarray | None = None) -> _LaneState:
        """``core(n, queue)`` of :meth:`ImprovedMakespanModel._solve` in lanes: τ, C and the flow with n decoding.

        ``queue``: the lanes whose cycle holds the prefill pool's queue (None: none).
        """
        r, b_total = self.r, self.b
        flow, limited, _ = self.flow(n)
        x = flow.prefill_tokens
        turn_s = x * self.t_p
        own_prefill = turn_s + self.overhead_s
        plain = self.fixed_iteration_s + self.per_seq_s * n / self.cap_d
        stolen: np.ndarray | float = 0.0
        if self.colocated:
            stolen = self.mixed * self.t_p * b_total * x / self.cap_p
            rest = self.env + own_prefill
            span = stolen + rest + r * plain
            cycle = (span + np.sqrt(np.maximum(span * span - 4 * stolen * rest, 0.0))) / 2
            iteration = np.where(cycle > stolen, plain * cycle / (cycle - stolen), plain)
        else:
            cycle, iteration = np.zeros(n.shape), plain
            active = np.ones(n.shape, dtype=bool)
            backlog = 0.0 if queue is None else np.where(queue, self.pool_work_s(turn_s), 0.0)
            for _ in range(50):  # _solve's inner fixed point; a lane stops where the scalar loop breaks
                transfer: np.ndarray | float = 0.0
                if self.kv > 0:
                    size = flow.transfer_tokens * self.kv
                    link_share = np.where(cycle != 0, np.minimum(0.95, b_total * size / (cycle * self.bandwidth)), 0.0)
                    transfer = size / (self.bandwidth * (1 - link_share))
                new_cycle = np.maximum(r * iteration + transfer + self.env + own_prefill, backlog)
                done = np.abs(new_cycle - cycle) <= 1e-12 * new_cycle
                cycle = np.where(active, new_cycle, cycle)
                active = active & ~done
                if not active.any():
                    break
        queued = stolen + b_total * r * plain / n
        grow = limited & (n > 0) & (queued > cycle)
        if grow.any():
            cycle = np.where(grow, queued, cycle)
            iteration = np.where(grow, np.where(cycle > stolen, plain * cycle / (cycle - stolen), plain), iteration)
        return _LaneState(iteration_s=iteration, cycle_s=cycle, flow=flow)
