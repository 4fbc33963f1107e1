"""The improved predictor's prefill side: a GRPO group's shared first prompt in the cache, and the fixed cost of a
prefill batch fitted with an intercept from the prefill batches a worker logs (both opt-in)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pearl_sched import Mode, PoolCapacity
from pearl_sched.makespan_improved import (
    PEARL_LIMIT,
    ImprovedMakespanModel,
    ImprovedParams,
    ModeObservation,
    Phase,
    PrefillCost,
    ServingParams,
)
from pearl_sched.profiles.telemetry import PrefillSteps, blend_prefill_cost
from pearl_sched.sim.cluster import ObservedStepTimes
from pearl_sched.sim.steptimes import LinearStepTimes

from .builders import HAND, kv_bound_workload, workload

T0, ALPHA, BETA = 4e-3, 12.5e-6, 4.6e-10  # s per batch; s per new token; s per (new token, context token) pair


def _model(serving: ServingParams) -> ImprovedMakespanModel:
    return ImprovedMakespanModel(ImprovedParams(pearl=HAND.params, serving=serving))


def _shared(**fields: object) -> ServingParams:
    return ServingParams.model_validate({"group_size": 16, "shared_prompt_hits": True, **fields})


# -- the group's shared first prompt -----------------------------------------------------------------------------
def test_a_group_shares_its_first_prompt_by_hand() -> None:
    """Least-load over 4 colocated workers with unlimited memory: a turn finds its own prefix with probability 1/4;
    on a miss it still finds its group's 400-token prompt wherever one of the 16 members landed before."""
    load = workload(batch_size=64, unfinished=64, turns=4, appended_tokens_per_turn=100.0, prompt_tokens=400.0)
    capacity = PoolCapacity(mode=Mode.COLOCATED, colocated=4)
    phase = Phase(context=1000.0, trajectories=64.0)  # every trajectory live: a group's 16 members
    on = _model(_shared(kv_limited=False, router="least_load"))
    off = _model(ServingParams(kv_limited=False, router="least_load", group_size=16, shared_prompt_hits=False))
    group = (1 - 0.75**16) * 400.0  # the prompt is on each worker a member landed on
    flow = on._flow(load, capacity, 8.0, phase)
    assert flow.hit == pytest.approx(0.25) == off._flow(load, capacity, 8.0, phase).hit
    assert flow.group_tokens == pytest.approx(group)
    later = 3 / 4  # of 4 turns, all but the first follow one
    assert flow.prefill_tokens == pytest.approx(100.0 + later * 0.75 * (1000.0 - group))
    assert off._flow(load, capacity, 8.0, phase).prefill_tokens == pytest.approx(100.0 + later * 0.75 * 1000.0)
    # The first-turn burst: each group's prompt once on each worker its members land on, 4·(1 − 0.75¹⁶) of 4.
    assert on._burst_tokens(load, 4.0) == pytest.approx(64 / 16 * 4 * (1 - 0.75**16) * 400.0)
    assert off._burst_tokens(load, 4.0) == 64 * 400.0
    # The cache-aware router sends a group's members where its prompt is: one copy per group.
    assert _model(_shared(kv_limited=False))._burst_tokens(load, 4.0) == pytest.approx(4 * 400.0)


def test_the_token_hit_rate_counts_the_group_prompts_by_hand() -> None:
    """What SGLang's counters would report: cached = later turns' h·held + (1 − h)·g, plus the first prompts the
    members after the first found cached; prompt tokens as before."""
    load = workload(batch_size=64, unfinished=64, turns=4, appended_tokens_per_turn=100.0, prompt_tokens=400.0)
    capacity = PoolCapacity(mode=Mode.COLOCATED, colocated=4)
    model = _model(_shared(kv_limited=False, router="least_load"))
    phases = model.phases(load)
    turns = sum(ph.trajectories for ph in phases) * load.turns / len(phases)
    weight = load.turns / len(phases) * (turns - 64) / turns
    g = (1 - 0.75**16) * 400.0
    burst = 64 / 16 * 4 * (1 - 0.75**16) * 400.0
    cached = weight * sum(ph.trajectories * (0.25 * ph.context + 0.75 * g) for ph in phases) + 64 * 400.0 - burst
    prompts = 64 * 400.0 + weight * sum(ph.trajectories * (ph.context + 100.0) for ph in phases)
    assert model.token_hit_rate(load, capacity) == pytest.approx(cached / prompts)


def test_a_pd_turn_that_misses_its_prompt_still_hits_its_groups() -> None:
    """Cache-aware PD on a prefill pool too small for the prompts (LRU keeps little of a regular cycle): the hit h
    is the same either way, and a miss recomputes its prompt less the group's (the pool holds every group's)."""
    load = kv_bound_workload()
    capacity = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=1, decode=3)
    on, off = _model(_shared(kv_pool_tokens=800_000.0)), _model(ServingParams(kv_pool_tokens=800_000.0))
    later = 19 / 20
    misses = 0
    for phase in on.phases(load):
        with_group, alone = on._flow(load, capacity, 100.0, phase), off._flow(load, capacity, 100.0, phase)
        assert with_group.hit == pytest.approx(alone.hit)
        misses += alone.hit < 1
        assert with_group.group_tokens == pytest.approx(1000.0)
        assert alone.prefill_tokens - with_group.prefill_tokens == pytest.approx(later * (1 - alone.hit) * 1000.0)
    assert misses >= 3  # the later phases' prompts outgrow the pool
    assert on.token_hit_rate(load, capacity) > off.token_hit_rate(load, capacity)
    assert on.predict(load, capacity).total_s < off.predict(load, capacity).total_s


def test_switched_off_or_without_groups_nothing_changes() -> None:
    """``shared_prompt_hits=False`` is the model before it, whatever the group size; so is the default without a
    group size (one trajectory per prompt), to the last bit."""
    load = kv_bound_workload()
    for capacity in (
        PoolCapacity(mode=Mode.COLOCATED, colocated=4),
        PoolCapacity(mode=Mode.DISAGGREGATED, prefill=1, decode=3),
    ):
        plain = _model(ServingParams(kv_pool_tokens=800_000.0, shared_prompt_hits=False))
        grouped = _model(ServingParams(kv_pool_tokens=800_000.0, group_size=16, shared_prompt_hits=False))
        default = _model(ServingParams(kv_pool_tokens=800_000.0))
        assert grouped.predict(load, capacity) == plain.predict(load, capacity) == default.predict(load, capacity)
        assert grouped.terms(load) == plain.terms(load) == default.terms(load)
        assert plain.token_hit_rate(load, capacity) == default.token_hit_rate(load, capacity)
    assert ServingParams(group_size=1).model_dump() == ServingParams().model_dump()  # the plan digest is unchanged


def test_pearl_limit_is_still_pearls_closed_form_with_both_opted_in() -> None:
    """A perfect cache has nothing for the group to add, and a step cost of t₀ = 0, α = t_p, β = 0 is t_p."""
    load = workload(
        batch_size=64,
        unfinished=64,
        turns=10,
        appended_tokens_per_turn=150.0,
        generated_tokens_per_turn=50,
        env_time_per_turn_s=0.0,
        kv_bytes_per_token=131072.0,
        mean_context_tokens=20000.0,
    )
    params = HAND.params.model_copy(update={"switch_overhead_s": 0.0})
    pearl = type(HAND)(params)
    flat = PrefillCost(per_token_s=params.devices[0].prefill_s_per_token, per_token_context_s=0.0)
    serving = PEARL_LIMIT.model_copy(
        update={"group_size": 16, "shared_prompt_hits": True, "prefill_batch_cost": True, "prefill_step_cost": flat}
    )
    limit = ImprovedMakespanModel(ImprovedParams(pearl=params, serving=serving))
    for capacity in (
        PoolCapacity(mode=Mode.DISAGGREGATED, prefill=1, decode=3),
        PoolCapacity(mode=Mode.DISAGGREGATED, prefill=3, decode=5),
    ):
        assert limit.predict(load, capacity).total_s == pytest.approx(pearl.predict(load, capacity).total_s, rel=1e-6)
    ours, theirs = limit.terms(load), pearl.terms(load)
    for role in ("prefill", "decode"):
        assert getattr(ours, role).work_s == pytest.approx(getattr(theirs, role).work_s, rel=1e-6)


# -- the fixed cost of a prefill batch ---------------------------------------------------------------------------
def _batches(t0: float, alpha: float, beta: float, count: int = 200) -> PrefillSteps:
    rng = np.random.default_rng(11)
    steps = PrefillSteps()
    for _ in range(count):
        k = int(rng.integers(1, 9))
        new = float(rng.integers(50, 8192))
        cached = float(rng.integers(0, 30_000)) * k  # the batch's sum, as SGLang's #cached-token
        seconds = t0 + alpha * new + beta * new * (cached + new / 2) / k
        steps.add(sequences=k, new_tokens=new, cached_tokens=cached, seconds=seconds)
    return steps


def test_the_fit_recovers_a_known_intercept() -> None:
    cost = _batches(T0, ALPHA, BETA).fit_with_intercept()
    assert cost is not None
    assert cost.per_batch_s == pytest.approx(T0, rel=1e-6)
    assert cost.per_token_s == pytest.approx(ALPHA, rel=1e-6)
    assert cost.per_token_context_s == pytest.approx(BETA, rel=1e-6)
    # The through-origin fit of the same batches folds t₀ into the per-token terms (it is what PEARL's t_p does).
    origin = _batches(T0, ALPHA, BETA).fit()
    assert origin is not None and origin.per_token_s > ALPHA


def test_the_intercept_fit_without_an_intercept_or_a_context_term() -> None:
    through_origin = _batches(0.0, ALPHA, BETA).fit_with_intercept()
    assert through_origin is not None
    assert through_origin.per_batch_s == pytest.approx(0.0, abs=1e-9)
    assert through_origin.per_token_context_s == pytest.approx(BETA, rel=1e-6)
    flat = _batches(T0, ALPHA, 0.0).fit_with_intercept()
    assert flat is not None
    assert (flat.per_batch_s, flat.per_token_s) == (pytest.approx(T0, rel=1e-6), pytest.approx(ALPHA, rel=1e-6))
    assert flat.per_token_context_s == pytest.approx(0.0, abs=1e-15)
    assert _batches(0.0, ALPHA, 0.0).fit_with_intercept() is None  # one rate per token: PEARL's t_p stays
    # With the one-term cost (no context term) the fit is t₀ + α·n whatever the batches' context.
    one_term = _batches(T0, ALPHA, 0.0).fit_with_intercept(by_context=False)
    assert one_term is not None and one_term.per_token_context_s == 0.0
    assert (one_term.per_batch_s, one_term.per_token_s) == (pytest.approx(T0, rel=1e-6), pytest.approx(ALPHA, rel=1e-6))
    assert PrefillSteps().fit_with_intercept() is None  # no batches
    # the EWMA blends t₀ as it does α and β
    blended = blend_prefill_cost(PrefillCost(per_token_s=0.0, per_token_context_s=0.0), flat, alpha=0.5)
    assert blended is not None and blended.per_batch_s == pytest.approx(T0 / 2, rel=1e-6)


class FakeStepWorld(LinearStepTimes):
    """A fake world whose prefill batches cost exactly α·N + β·N·(c̄ + N/(2k)); the workers add t₀ of overhead."""

    def prefill_s(self, new_tokens: float, sequences: int, cached_tokens: float) -> float:
        return ALPHA * new_tokens + BETA * new_tokens * (cached_tokens + new_tokens / (2 * sequences))


def test_the_simulated_workers_step_overhead_is_the_intercept() -> None:
    observed = ObservedStepTimes(FakeStepWorld(HAND.params.devices[0]), overhead_s=T0)
    for new, k, mean_cached in ((8192, 1, 0.0), (8192, 1, 8192.0), (1500, 10, 10_000.0), (300, 2, 25_000.0)):
        observed.prefill_s(new, k, mean_cached)
    cost = observed.prefill_step_cost()
    assert cost is not None
    assert (cost.per_batch_s, cost.per_token_s, cost.per_token_context_s) == (
        pytest.approx(T0, rel=1e-6),
        pytest.approx(ALPHA, rel=1e-6),
        pytest.approx(BETA, rel=1e-6),
    )


def test_a_turn_pays_t0_per_prefill_batch_by_hand() -> None:
    """Cache-aware colocated with unlimited memory (every prefix hit): a turn appends 100 tokens and pays t₀ per
    batch; turns reach a worker at λ = n_w/(r·τ₀) and those within a decode iteration share a batch."""
    step = PrefillCost(per_batch_s=T0, per_token_s=10e-6, per_token_context_s=0.0)
    model = _model(ServingParams(kv_limited=False, prefill_step_cost=step, prefill_batch_cost=True))
    load = workload(turns=4, appended_tokens_per_turn=100.0, generated_tokens_per_turn=50.0)
    capacity = PoolCapacity(mode=Mode.COLOCATED, colocated=2)
    flow = model._flow(load, capacity, 8.0, Phase(context=1000.0, trajectories=64.0))
    tau = 0.005 + 1e-4 * 8 / 2  # A + b·n/N
    load_per_round = (8 / 2) / (50 * tau) * tau  # λ·τ
    batches = (1 - math.exp(-load_per_round)) / load_per_round
    assert flow.prefill_s == pytest.approx(100 * 10e-6 + T0 * batches)
    # not opted in, or not fitted: no t₀ (one rate per token)
    assert (
        _model(ServingParams(kv_limited=False, prefill_step_cost=step))
        ._flow(load, capacity, 8.0, Phase(1000.0, 64.0))
        .prefill_s
        is None
    )
    # A PD prefill worker's round is t₀/(1 − ρ), ρ = λ·(a turn's token seconds); a 20k-token recompute needs chunks.
    pd = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=1, decode=3)
    arrivals = 8.0 / (50 * (0.005 + 1e-4 * 8 / 3))
    busy = arrivals * 1e-3
    round_load = arrivals * T0 / (1 - busy)
    expected = (1 - math.exp(-round_load)) / round_load
    assert model._prefill_batches(load, Mode.DISAGGREGATED, 8.0, 0.005 + 1e-4 * 8 / 3, 100.0, 1e-3, T0) == (
        pytest.approx(expected)
    )
    assert model._prefill_batches(load, Mode.DISAGGREGATED, 8.0, 0.005, 20_000.0, 0.2, T0) == pytest.approx(
        20_000 / 8192
    )
    no_t0 = _model(
        ServingParams(
            kv_limited=False, prefill_step_cost=step.model_copy(update={"per_batch_s": 0.0}), prefill_batch_cost=True
        )
    )
    assert model.predict(load, pd).total_s > no_t0.predict(load, pd).total_s


def test_the_burst_pays_t0_per_full_chunk() -> None:
    step = PrefillCost(per_batch_s=T0, per_token_s=10e-6, per_token_context_s=0.0)
    model = _model(ServingParams(prefill_step_cost=step, prefill_batch_cost=True, chunked_prefill_tokens=4096.0))
    load = workload(batch_size=64, unfinished=64, prompt_tokens=1000.0)
    assert model._burst_s(load, 2.0) == pytest.approx(64 * 1000 * 10e-6 + T0 * 64_000 / 4096)


def test_a_measured_hit_rate_corrects_only_the_own_prefix_hit() -> None:
    """Least-load, unlimited memory (h = 1/N, g fixed): the measured rate at 4 workers, between the group's share
    and the structural rate, is reproduced there, and γ carries over to 8 workers as h = γ/8."""
    load = workload(batch_size=64, unfinished=64, turns=4, appended_tokens_per_turn=100.0, prompt_tokens=400.0)
    four = PoolCapacity(mode=Mode.COLOCATED, colocated=4)
    structural = _model(_shared(kv_limited=False, router="least_load"))
    states = structural._states(load, four, corrected=False)
    own, prompts = structural._hit_tokens(load, four, [st.prefill_hit for st in states], states)
    shared, _ = structural._hit_tokens(load, four, [0.0] * len(states), states)
    measured = (own + shared) / 2 / prompts  # half-way between the group's share and the structural rate
    observation = ModeObservation(colocated_workers=4.0, cache_hit_rate=measured)
    corrected = _model(_shared(kv_limited=False, router="least_load", colocated=observation))
    assert corrected.token_hit_rate(load, four) == pytest.approx(measured, rel=1e-9)
    gamma = (measured * prompts - shared) / (own - shared)
    eight = PoolCapacity(mode=Mode.COLOCATED, colocated=8)
    assert corrected.cycle(load, eight).prefill_hit == pytest.approx(gamma / 8, rel=1e-9)
