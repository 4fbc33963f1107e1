"""The improved predictor: its limits coincide with PEARL's formulas, θ is endogenous, and SGLang's memory,
prefix cache, PD transfer and mixed steps move its predictions the way they move a real server's makespan."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl_sched import Mode, PoolCapacity
from pearl_sched.makespan import DeviceParams, SizeCount
from pearl_sched.makespan_improved import (
    PEARL_LIMIT,
    DecodeCost,
    ImprovedMakespanModel,
    ImprovedParams,
    ModeObservation,
    ServingParams,
    SizePool,
)
from pearl_sched.state import Role

from .builders import HAND, kv_bound_workload, workload

IMPROVED = ImprovedMakespanModel(ImprovedParams(pearl=HAND.params))


def _limit(**overrides: float) -> object:
    """No environment, no appended prefill, no KV transfer: where the two models must agree."""
    values = dict(
        batch_size=64,
        unfinished=64,
        turns=10,
        appended_tokens_per_turn=0.0,
        generated_tokens_per_turn=50,
        env_time_per_turn_s=0.0,
        kv_bytes_per_token=0.0,
    )
    values.update(overrides)
    return workload(**values)


def _model(serving: ServingParams | None = None, **pearl: float) -> ImprovedMakespanModel:
    params = HAND.params.model_copy(update=pearl)
    return ImprovedMakespanModel(ImprovedParams(pearl=params, serving=serving or ServingParams()))


def test_colocated_limit_equals_pearl() -> None:
    load = _limit()
    params = HAND.params.model_copy(update={"switch_overhead_s": 0.0})
    pearl = type(HAND)(params)
    improved = ImprovedMakespanModel(ImprovedParams(pearl=params))
    capacity = PoolCapacity(mode=Mode.COLOCATED, colocated=4)
    assert improved.predict(load, capacity).total_s == pytest.approx(pearl.predict(load, capacity).total_s, rel=1e-6)
    assert improved.cycle(load, capacity).bubble_ratio == pytest.approx(0.0, abs=1e-6)


def test_disaggregated_limit_equals_pearl_at_zero_bubble() -> None:
    load = _limit()
    limit = _model(PEARL_LIMIT)
    capacity = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=1, decode=3)
    assert limit.predict(load, capacity).total_s == pytest.approx(HAND.predict(load, capacity).total_s, rel=1e-6)


@pytest.mark.parametrize("per_worker_link", [False, True])
def test_pearl_limit_reproduces_the_closed_form_with_memory_and_caching_switched_off(per_worker_link: bool) -> None:
    """Infinite memory, a perfect cache and PEARL's PD (only ΔL prefilled and sent), with a real KV size and ΔL:
    the pools' terms are PEARL's (θ = 0) and, without environment time, so is the disaggregated makespan (the
    colocated one is checked without ΔL above: with it, a trajectory's own prefill is on its critical path)."""
    load = _limit(appended_tokens_per_turn=150.0, kv_bytes_per_token=131072.0, mean_context_tokens=20000.0)
    pearl_params = HAND.params.model_copy(
        update={"switch_overhead_s": 0.0, "kv_bandwidth_per_prefill_worker": per_worker_link}
    )
    pearl = type(HAND)(pearl_params)
    limit = ImprovedMakespanModel(ImprovedParams(pearl=pearl_params, serving=PEARL_LIMIT))
    ours, theirs = limit.terms(load), pearl.terms(load)
    for role in ("prefill", "decode", "colocated"):
        assert getattr(ours, role).fixed_s == pytest.approx(getattr(theirs, role).fixed_s, rel=1e-6, abs=1e-9)
        assert getattr(ours, role).work_s == pytest.approx(getattr(theirs, role).work_s, rel=1e-6)
    for capacity in (
        PoolCapacity(mode=Mode.DISAGGREGATED, prefill=1, decode=3),
        PoolCapacity(mode=Mode.DISAGGREGATED, prefill=3, decode=5),
    ):
        assert limit.predict(load, capacity).total_s == pytest.approx(pearl.predict(load, capacity).total_s, rel=1e-6)
    # The same batch with SGLang's memory: the pool (1e9 B / 131072 B = 7,629 tokens) holds no 20k context.
    sglang = ImprovedMakespanModel(ImprovedParams(pearl=pearl_params))
    capacity = PoolCapacity(mode=Mode.COLOCATED, colocated=4)
    assert sglang.predict(load, capacity).total_s > 1.5 * pearl.predict(load, capacity).total_s


def test_bubble_ratio_is_endogenous_faster_decode_spends_more_time_in_the_environment() -> None:
    load = workload(
        batch_size=256,
        unfinished=256,
        turns=10,
        appended_tokens_per_turn=100,
        generated_tokens_per_turn=50,
        env_time_per_turn_s=2.0,
        kv_bytes_per_token=1000,
    )
    slow = IMPROVED.cycle(load, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=2, decode=1))
    fast = IMPROVED.cycle(load, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=2, decode=8))
    assert fast.bubble_ratio > slow.bubble_ratio > 0
    assert fast.cycle_s < slow.cycle_s
    # The fixed point holds in every phase of the batch: n = B·d/C.
    capacity = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=2, decode=8)
    for phase, state in zip(IMPROVED.phases(load), IMPROVED._states(load, capacity, corrected=True), strict=True):
        d = load.generated_tokens_per_turn * state.iteration_s
        assert state.decoding == pytest.approx(phase.trajectories * d / state.cycle_s, rel=1e-6)


def test_longer_context_makes_append_prefill_dearer() -> None:
    model = ImprovedMakespanModel(ImprovedParams(pearl=HAND.params, prefill_s_per_token_per_context=1e-9))
    short = workload(mean_context_tokens=1000.0)
    long = workload(mean_context_tokens=30000.0)
    capacity = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=1, decode=8)
    assert model.predict(long, capacity).prefill_s > model.predict(short, capacity).prefill_s


@pytest.mark.parametrize("by_context", [False, True])
def test_colocation_interference_inflates_decode_iterations(by_context: bool) -> None:
    load = workload(batch_size=512, unfinished=512, appended_tokens_per_turn=3000.0, env_time_per_turn_s=1.0)
    model = _model(ServingParams(decode_cost_by_context=by_context))
    colocated = model.cycle(load, PoolCapacity(mode=Mode.COLOCATED, colocated=4))
    split = model.cycle(load, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=2, decode=4))
    ref = HAND.reference
    for phase, ours, theirs in zip(
        model.phases(load),
        model._states(load, PoolCapacity(mode=Mode.COLOCATED, colocated=4), corrected=True),
        model._states(load, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=2, decode=4), corrected=True),
        strict=True,
    ):
        # PEARL's b, or (opt-in) b at the phase's context: b·(c + ΔL + r/2)/c̄, the KV a sequence reads (its prefix,
        # the appended tokens and half its output), c̄ the mean context.
        held = phase.context + load.appended_tokens_per_turn + load.generated_tokens_per_turn / 2
        scale = held / load.mean_context_tokens if by_context else 1.0
        per_seq = ref.decode_per_seq_s * scale
        plain = ref.decode_iteration_s + per_seq * ours.decoding / 4
        assert ours.iteration_s > plain * (1 + 1e-3)  # co-batched prefill chunks slow each decode iteration
        assert theirs.iteration_s == pytest.approx(ref.decode_iteration_s + per_seq * theirs.decoding / 4, rel=1e-6)
    assert colocated.iteration_s > split.iteration_s


@given(st.integers(1, 16), st.integers(1, 16))
def test_makespan_never_rises_with_more_decode_capacity(prefill: int, decode: int) -> None:
    load = workload(batch_size=256, unfinished=256, env_time_per_turn_s=3.0)
    before = IMPROVED.predict(load, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=prefill, decode=decode))
    after = IMPROVED.predict(load, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=prefill, decode=decode + 1))
    # One effect goes the other way, and stays below a millionth here: a faster decode makes a trajectory's cycle
    # more regular (queueing, shared by all, is more of it), and LRU keeps less of a more regular reuse.
    assert after.total_s <= before.total_s * (1 + 1e-6)


def test_plan_accepts_the_improved_model() -> None:
    from pearl_sched import Role, plan
    from pearl_sched.makespan import MakespanModel

    from .builders import PARAMS, Slot, state

    model = ImprovedMakespanModel(ImprovedParams(pearl=PARAMS))
    assert isinstance(model, MakespanModel)
    result = plan(state([Slot(role=Role.PREFILL), Slot(role=Role.DECODE)] + [Slot()] * 6), model)
    assert result.model == "improved"
    assert result.makespan.total_s > 0


def test_slowest_trajectory_delay_limits() -> None:
    from statistics import NormalDist

    from pearl_sched.makespan_improved import slowest_delay_s

    assert slowest_delay_s(0.0, 10.0, 1000) == pytest.approx(10.0 * NormalDist().inv_cdf(1 - 1 / 1000))
    assert slowest_delay_s(30.0, 0.0, 1000) == pytest.approx(30.0 * (1 - 1 / 1000))
    both = slowest_delay_s(30.0, 10.0, 1000)
    assert max(30.0 * 0.999, 10.0 * NormalDist().inv_cdf(0.999)) < both < 30.0 + 10.0 * NormalDist().inv_cdf(0.999)


def test_environment_spread_lengthens_the_batch() -> None:
    # A small batch and no KV to send (the whole-context transfer would bind otherwise): the critical path binds.
    calm = workload(batch_size=64, unfinished=64, env_time_std_s=0.0, kv_bytes_per_token=0.0)
    noisy = workload(batch_size=64, unfinished=64, env_time_std_s=5.0, kv_bytes_per_token=0.0)
    capacity = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=2, decode=6)
    assert IMPROVED.predict(noisy, capacity).total_s > IMPROVED.predict(calm, capacity).total_s


# -- SGLang's memory, prefix cache and PD transfer ------------------------------------------------------------------
_agentic = kv_bound_workload  # the KV-bound batch these tests share with test_decode_refit.py


def test_the_kv_pool_caps_how_many_decode_at_once_and_the_rest_queue() -> None:
    load = _agentic()
    capacity = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=4, decode=2)
    roomy = _model(ServingParams(kv_pool_tokens=1e9)).cycle(load, capacity)
    tight_model = _model(ServingParams(kv_pool_tokens=300_000.0))
    tight = tight_model.cycle(load, capacity)
    assert not roomy.kv_limited and tight.kv_limited
    phases = tight_model._states(load, capacity, corrected=True)
    for phase, state in zip(tight_model.phases(load), phases, strict=True):
        footprint = phase.context + 300.0 / 2 + 512  # c + r/2 + SGLang's reserved decode tokens (PD)
        assert state.decoding <= 2 * 300_000.0 / footprint * (1 + 1e-9)
    assert tight.cycle_s > roomy.cycle_s
    slow = tight_model.predict(load, capacity).total_s
    assert slow > _model(ServingParams(kv_pool_tokens=1e9)).predict(load, capacity).total_s


def test_a_prefix_cache_too_small_for_the_batch_makes_turns_prefill_their_context_again() -> None:
    load = _agentic()
    small = PoolCapacity(mode=Mode.COLOCATED, colocated=2)
    large = PoolCapacity(mode=Mode.COLOCATED, colocated=16)
    model = _model(ServingParams(kv_pool_tokens=800_000.0))
    few, many = model.cycle(load, small), model.cycle(load, large)
    assert few.prefill_hit < many.prefill_hit == pytest.approx(1.0)
    assert few.prefill_tokens_per_turn > many.prefill_tokens_per_turn == pytest.approx(200.0)
    # Per worker, more workers also means more cache per trajectory: the hit rate SGLang would report rises.
    assert model.token_hit_rate(load, small) < model.token_hit_rate(load, large)


def test_least_load_routing_finds_the_prefix_on_one_worker_in_n() -> None:
    load = _agentic()
    capacity = PoolCapacity(mode=Mode.COLOCATED, colocated=8)
    cache_aware = _model(ServingParams(kv_pool_tokens=1e9)).cycle(load, capacity)
    least_load = _model(ServingParams(kv_pool_tokens=1e9, router="least_load")).cycle(load, capacity)
    assert cache_aware.prefill_hit == pytest.approx(1.0)
    assert least_load.prefill_hit == pytest.approx(1 / 8)


def test_pd_prefill_recomputes_decode_tokens_and_sends_the_whole_context() -> None:
    load = _agentic()
    capacity = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=2, decode=4)
    model = _model(ServingParams(kv_pool_tokens=1e9))
    later = 19 / 20  # of 20 turns, all but the first follow one (the first prompt is the first-turn burst)
    for phase, state in zip(model.phases(load), model._states(load, capacity, corrected=True), strict=True):
        assert state.prefill_hit == pytest.approx(1.0)  # the prefill worker holds every earlier prompt ...
        assert state.prefill_tokens_per_turn == pytest.approx(200.0 + later * 300.0)  # ... never generated tokens
        assert state.transfer_tokens_per_turn == pytest.approx(200.0 + later * phase.context)  # the whole context
    with_cache = _model(ServingParams(kv_pool_tokens=1e9, decode_radix_cache=True)).cycle(load, capacity)
    assert with_cache.transfer_tokens_per_turn == pytest.approx(200.0)  # only the appended tokens cross
    pearl_pd = _model(PEARL_LIMIT).cycle(load, capacity)
    assert pearl_pd.prefill_tokens_per_turn == pytest.approx(200.0)
    assert pearl_pd.transfer_tokens_per_turn == pytest.approx(200.0)


def test_lru_keeps_less_of_a_regular_cycle_than_fits() -> None:
    """Che's approximation over a shifted-exponential reuse interval, by hand, with 60% of the prefixes fitting."""
    hit = ImprovedMakespanModel._lru_hit
    assert hit(0.6, 1.0) == pytest.approx(0.6)  # memoryless reuse: the share that fits (independent reference)
    assert hit(0.6, 3.0) == pytest.approx(0.6)  # a spread beyond the exponential's is taken as memoryless
    assert hit(0.6, 0.5) == pytest.approx(0.2)  # 1 − (1 − 0.6)/0.5
    assert hit(0.6, 0.4) == 0.0  # the regular part of the cycle outlasts what the cache holds
    assert hit(0.6, 0.0) == 0.0  # a strict cycle: LRU under a cyclic scan keeps nothing
    assert hit(1.0, 0.0) == hit(1.5, 0.3) == 1.0  # everything fits


def test_pd_prefill_hits_follow_the_cycle_spread_of_decode_lengths_and_tools() -> None:
    """2P4D on a pool too small for the prompts: the hit is the LRU share of a cycle whose spread is the turn's
    decode time (CV of the generated tokens) and tool call (σ_env) over the cycle, d/C = n/B."""
    load = _agentic(env_time_std_s=4.0)
    capacity = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=2, decode=4)
    for cv in (0.0, 0.5, 1.0):
        model = ImprovedMakespanModel(
            ImprovedParams(pearl=HAND.params, serving=ServingParams(kv_pool_tokens=800_000.0), generated_tokens_cv=cv)
        )
        for phase, state in zip(model.phases(load), model._states(load, capacity, corrected=True), strict=True):
            share = min(1.0, 800_000.0 / (phase.trajectories / 2 * (phase.context - 300.0)))
            d = 300.0 * state.iteration_s  # PD decode: the plain iteration A + b(c)·n/N_D
            spread = (cv**2 + (4.0 / d) ** 2) ** 0.5 * state.decoding / phase.trajectories
            expected = 1.0 if share >= 1 else max(0.0, 1 - (1 - share) / min(spread, 1.0))
            assert state.prefill_hit == pytest.approx(expected, abs=1e-9)
            assert state.prefill_hit <= share + 1e-12  # never above the independent-reference estimate
    regular = _model(ServingParams(kv_pool_tokens=800_000.0)).token_hit_rate(
        load.model_copy(update={"env_time_std_s": 0.0}), capacity
    )
    assert regular < _model(ServingParams(kv_pool_tokens=800_000.0)).token_hit_rate(load, capacity)


def test_decode_cost_by_context_scales_b_by_the_kv_a_sequence_reads() -> None:
    """Opt-in: b (100 µs, measured at the mean context 6,000) at a 5,000-token prefix, 200 appended and 300 generated
    tokens is 100 µs × 5,350/6,000; inert without a KV size (nothing to read), so PEARL's limit still holds with it
    on."""
    on = _model(ServingParams(decode_cost_by_context=True))
    assert on._per_seq_s(_agentic(), 5000.0) == pytest.approx(1e-4 * 5350.0 / 6000.0)
    assert IMPROVED._per_seq_s(_agentic(), 5000.0) == pytest.approx(1e-4)  # off by default: PEARL's b
    load = _limit()
    params = HAND.params.model_copy(update={"switch_overhead_s": 0.0})
    inert = ImprovedMakespanModel(ImprovedParams(pearl=params, serving=ServingParams(decode_cost_by_context=True)))
    capacity = PoolCapacity(mode=Mode.COLOCATED, colocated=4)
    assert inert.predict(load, capacity).total_s == pytest.approx(type(HAND)(params).predict(load, capacity).total_s)


def test_mixed_chunks_cheaper_than_prefill_then_decode_shorten_colocated_iterations() -> None:
    load = workload(batch_size=512, unfinished=512, appended_tokens_per_turn=3000.0, env_time_per_turn_s=1.0)
    capacity = PoolCapacity(mode=Mode.COLOCATED, colocated=4)
    sequential = _model(ServingParams(enable_mixed_chunk=True, mixed_step_factor=1.0)).cycle(load, capacity)
    fused = _model(ServingParams(enable_mixed_chunk=True, mixed_step_factor=0.6)).cycle(load, capacity)
    off = _model(ServingParams(mixed_step_factor=0.6)).cycle(load, capacity)  # the flag off: φ unused
    assert fused.iteration_s < sequential.iteration_s
    assert off.iteration_s == pytest.approx(sequential.iteration_s)


def test_a_measured_hit_rate_corrects_the_structural_one_at_the_configuration_that_ran() -> None:
    load = _agentic()
    ran = PoolCapacity(mode=Mode.COLOCATED, colocated=4)
    structural = _model(ServingParams(kv_pool_tokens=800_000.0))
    measured = 0.6 * structural.token_hit_rate(load, ran)
    observation = ModeObservation(colocated_workers=4, cache_hit_rate=measured)
    corrected = _model(ServingParams(kv_pool_tokens=800_000.0, colocated=observation))
    # At the configuration that ran, the model now reports what the servers did (the fixed point moves with it,
    # so equal to within the cycle's feedback).
    assert corrected.token_hit_rate(load, ran) == pytest.approx(measured, rel=0.1)
    assert corrected.predict(load, ran).total_s > structural.predict(load, ran).total_s
    # The other mode keeps its structural estimate.
    pd = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=2, decode=2)
    assert corrected.predict(load, pd).total_s == structural.predict(load, pd).total_s


def test_measured_retractions_cost_a_colocated_pool_re_prefills() -> None:
    load = _agentic()
    capacity = PoolCapacity(mode=Mode.COLOCATED, colocated=4)
    calm = _model(ServingParams(kv_pool_tokens=800_000.0))
    observed = ModeObservation(colocated_workers=4, retractions_per_turn=0.3)
    retracting = _model(ServingParams(kv_pool_tokens=800_000.0, colocated=observed))
    assert retracting.cycle(load, capacity).prefill_tokens_per_turn > calm.cycle(load, capacity).prefill_tokens_per_turn
    assert retracting.predict(load, capacity).total_s > calm.predict(load, capacity).total_s


def test_the_milp_surrogate_follows_the_bounds_it_is_fitted_to() -> None:
    """Within the grid, fixed + work/E stays within 25% of the memory-aware throughput bound it replaces."""
    load = _agentic()
    model = _model(ServingParams(kv_pool_tokens=800_000.0))
    terms = model.terms(load)
    for e in (2.0, 4.0, 8.0):
        capacity = PoolCapacity(mode=Mode.COLOCATED, colocated=e)
        flows = model._quick_flows(load, capacity)
        bound = (
            model._prefill_bound_s(load, e, flows, Mode.COLOCATED)
            + model._decode_bound_s(load, e, Mode.COLOCATED)
            + load.turns * HAND.params.switch_overhead_s
        )
        assert terms.colocated.time_s(e) == pytest.approx(bound, rel=0.25)


@given(
    st.integers(1, 4096),
    st.floats(1.0, 200.0),
    st.floats(0.0, 5000.0),
    st.floats(1.0, 5000.0),
    st.floats(0.0, 60.0),
    st.floats(0.0, 40000.0),
    st.floats(0.0, 20000.0),
    st.floats(1e3, 1e8),
    st.integers(1, 16),
    st.integers(0, 15),
    st.sampled_from(["cache_aware", "least_load", "round_robin"]),
)
def test_predictions_are_finite_and_positive_for_any_batch(
    batch: int,
    turns: float,
    appended: float,
    generated: float,
    env: float,
    context: float,
    prompt: float,
    pool: float,
    workers: int,
    prefill: int,
    router: str,
) -> None:
    load = workload(
        batch_size=batch,
        unfinished=batch,
        turns=turns,
        appended_tokens_per_turn=appended,
        generated_tokens_per_turn=generated,
        env_time_per_turn_s=env,
        mean_context_tokens=context,
        prompt_tokens=prompt,
        kv_bytes_per_token=1000.0,
    )
    model = _model(ServingParams(kv_pool_tokens=pool, router=router))
    capacity = (
        PoolCapacity(mode=Mode.DISAGGREGATED, prefill=prefill, decode=workers)
        if prefill
        else PoolCapacity(mode=Mode.COLOCATED, colocated=workers)
    )
    total = model.predict(load, capacity).total_s
    assert 0 < total < float("inf")
    terms = model.terms(load)
    assert all(getattr(terms, r).time_s(float(workers)) >= 0 for r in ("prefill", "decode", "colocated"))


# -- worker sizes: each declared size's own KV pool and decode iteration cost ------------------------------------------
_TP1 = DeviceParams(
    gpu_type="x", tp=1, prefill_s_per_token=2e-5, decode_iteration_s=0.008, decode_per_seq_s=2e-4, kv_capacity_bytes=3e8
)


def _sized(serving: ServingParams, *, reference_iteration_s: float | None = None) -> ImprovedMakespanModel:
    """HAND's TP2 reference (t_p 10 µs, A 5 ms, b 100 µs) and a TP1 worker at half its speed, A 8 ms."""
    reference = HAND.params.devices[0]
    if reference_iteration_s is not None:
        reference = reference.model_copy(update={"decode_iteration_s": reference_iteration_s})
    params = HAND.params.model_copy(update={"devices": (reference, _TP1)})
    return ImprovedMakespanModel(ImprovedParams(pearl=params, serving=serving))


def _workers(*counts: tuple[Role, int, float]) -> tuple[SizeCount, ...]:
    return tuple(SizeCount(role=role, gpu_type="x", tp=tp, count=n) for role, tp, n in counts)


def test_a_declared_size_brings_its_own_kv_pool_and_iteration_cost_into_the_prediction() -> None:
    """2 TP1 + 1 TP2 colocated behind a least-load gateway (which pools them: a faster worker takes more). TP1's
    weight is 0.5 (half the speed in prefill and decode), so the capacity is 2·0.5 + 1 = 2 reference workers; the
    pool is (2·300,000 + 800,000)/2 = 700,000 tokens per reference worker (not 800,000: TP1's own pool is 300,000,
    below half the reference's), and A = (1·8 + 1·5)/2 = 6.5 ms. The prediction is that of 2 reference workers
    with that pool and that A, to the last digit."""
    load = _agentic()
    declared = ServingParams(
        kv_pool_tokens=800_000.0, size_pools=(SizePool(gpu_type="x", tp=1, kv_pool_tokens=3e5),), router="least_load"
    )
    model = _sized(declared)
    capacity = PoolCapacity(
        mode=Mode.COLOCATED, colocated=2.0, workers=_workers((Role.COLOCATED, 1, 2), (Role.COLOCATED, 2, 1))
    )
    pools = model._pools(load, capacity)
    assert pools.capacity.colocated == pytest.approx(2.0)
    assert pools.kv_tokens[Role.COLOCATED] == pytest.approx(700_000.0)
    assert pools.iteration_s[Role.COLOCATED] == pytest.approx(0.0065)
    same = _sized(ServingParams(kv_pool_tokens=700_000.0, router="least_load"), reference_iteration_s=0.0065)
    plain = PoolCapacity(mode=Mode.COLOCATED, colocated=2.0)
    assert model.predict(load, capacity).total_s == pytest.approx(same.predict(load, plain).total_s, rel=1e-12)
    # The smaller pool is felt: the same workers counted as reference pools (TP1 undeclared) predict less.
    undeclared = _sized(ServingParams(kv_pool_tokens=800_000.0, router="least_load"))
    assert undeclared.predict(load, capacity).total_s < model.predict(load, capacity).total_s


def test_the_cache_aware_gateway_splits_a_mixed_size_role_by_count_so_its_slowest_size_sets_the_makespan() -> None:
    """smg's cache_aware policy spreads the burst by requests in flight and keeps each trajectory on its worker,
    whatever the worker's size: 2 TP1 + 1 TP2 colocated each get a third of the batch, so the TP1 workers finish as
    3 TP1 workers would on the whole batch, and that is the makespan (the slower of 3 TP1 and 3 TP2), not the
    pooled 2 reference workers' (docs/makespan.md, "Worker sizes: the gateway's split")."""
    load = _agentic()
    pools = (SizePool(gpu_type="x", tp=1, kv_pool_tokens=3e5),)
    model = _sized(ServingParams(kv_pool_tokens=800_000.0, size_pools=pools))
    pooled = _sized(ServingParams(kv_pool_tokens=800_000.0, size_pools=pools, router="least_load"))
    mixed = PoolCapacity(
        mode=Mode.COLOCATED, colocated=2.0, workers=_workers((Role.COLOCATED, 1, 2), (Role.COLOCATED, 2, 1))
    )
    three_tp1 = PoolCapacity(mode=Mode.COLOCATED, colocated=1.5, workers=_workers((Role.COLOCATED, 1, 3)))
    three_tp2 = PoolCapacity(mode=Mode.COLOCATED, colocated=3.0, workers=_workers((Role.COLOCATED, 2, 3)))
    slowest = max(model.predict(load, three_tp1).total_s, model.predict(load, three_tp2).total_s)
    assert model.predict(load, mixed).total_s == slowest
    assert slowest == model.predict(load, three_tp1).total_s > pooled.predict(load, mixed).total_s
    # One size per role: nothing to split, the prediction is the pooled arithmetic's (the same code path).
    assert model._router_splits(load, three_tp1) == []
    # PD: the prefill side is routed cache-aware (split), the decode side by least load (pooled) unless the decode
    # radix cache is on, when the gateway's policy picks the decode worker too.
    pd = PoolCapacity(
        mode=Mode.DISAGGREGATED,
        prefill=1.0,
        decode=2.0,
        workers=_workers((Role.PREFILL, 2, 1), (Role.DECODE, 1, 2), (Role.DECODE, 2, 1)),
    )
    assert model._router_splits(load, pd) == []
    radix = _sized(ServingParams(kv_pool_tokens=800_000.0, size_pools=pools, decode_radix_cache=True))
    splits = radix._router_splits(load, pd)
    assert [[(w.role, w.tp, w.count) for w in c.workers] for c in splits] == [
        [(Role.PREFILL, 2, 1), (Role.DECODE, 1, 3)],
        [(Role.PREFILL, 2, 1), (Role.DECODE, 2, 3)],
    ]
    assert [c.decode for c in splits] == pytest.approx([1.5, 3.0])


def test_in_pd_each_role_has_the_pool_of_its_own_workers() -> None:
    """4 TP1 prefill workers (2 reference workers of compute, 4·300,000 tokens) and 2 TP2 decode workers."""
    load = _agentic()
    declared = ServingParams(kv_pool_tokens=800_000.0, size_pools=(SizePool(gpu_type="x", tp=1, kv_pool_tokens=3e5),))
    model = _sized(declared)
    capacity = PoolCapacity(
        mode=Mode.DISAGGREGATED, prefill=2.0, decode=2.0, workers=_workers((Role.PREFILL, 1, 4), (Role.DECODE, 2, 2))
    )
    pools = model._pools(load, capacity)
    assert pools.kv_tokens[Role.PREFILL] == pytest.approx(600_000.0)
    assert pools.kv_tokens[Role.DECODE] == pytest.approx(800_000.0)
    assert pools.iteration_s[Role.DECODE] == pytest.approx(0.005)
    # The prefill pool's held share (no decode radix cache): ρ = M_P / (B/N_P · (c − r)), M_P·N_P = 1.2M tokens in
    # all; LRU over a cycle of spread s = (n/B)·CV_r (CV_r = 1, no environment spread) keeps max(0, 1 − (1 − ρ)/s).
    for phase, state in zip(model.phases(load), model._states(load, capacity, corrected=True), strict=True):
        held = phase.context - 300.0
        share = min(1.0, 1_200_000.0 / (phase.trajectories * held))
        spread = state.decoding / phase.trajectories
        expected = 1.0 if share >= 1 else max(0.0, 1 - (1 - share) / spread)
        assert state.prefill_hit == pytest.approx(expected, abs=1e-9)


def test_without_declared_sizes_nothing_changes() -> None:
    """No size_pools: the workers a plan passes are ignored, weights and terms are PEARL's and the old ones."""
    load = _agentic()
    model = _sized(ServingParams(kv_pool_tokens=800_000.0))
    pearl = type(HAND)(model.params.pearl)
    for role in (Role.PREFILL, Role.DECODE, Role.COLOCATED):
        assert model.capacity_weight(load, "x", 1, role) == pearl.capacity_weight(load, "x", 1, role)
    with_workers = PoolCapacity(mode=Mode.COLOCATED, colocated=3.0, workers=_workers((Role.COLOCATED, 2, 3)))
    bare = PoolCapacity(mode=Mode.COLOCATED, colocated=3.0)
    assert model.predict(load, with_workers) == model.predict(load, bare)
    # Declaring another size does not move the reference's terms, nor predictions made of reference workers only.
    declared = _sized(
        ServingParams(kv_pool_tokens=800_000.0, size_pools=(SizePool(gpu_type="x", tp=1, kv_pool_tokens=3e5),))
    )
    assert declared.terms(load) == model.terms(load)
    assert declared.predict(load, with_workers) == model.predict(load, bare)
    assert declared.capacity_weight(load, "x", 2, Role.DECODE) == 1.0


def test_the_milp_weight_of_a_declared_size_counts_its_memory() -> None:
    """A TP1 worker exactly half a reference worker (half the speed, half the pool, the same A) is worth half of
    one; with a smaller pool it is worth less where memory binds, which PEARL's per-token weight cannot see."""
    load = _agentic()
    half = _TP1.model_copy(update={"decode_iteration_s": HAND.params.devices[0].decode_iteration_s})
    params = HAND.params.model_copy(update={"devices": (HAND.params.devices[0], half)})

    def weight(pool_tokens: float, role: Role) -> float:
        serving = ServingParams(
            kv_pool_tokens=800_000.0, size_pools=(SizePool(gpu_type="x", tp=1, kv_pool_tokens=pool_tokens),)
        )
        return ImprovedMakespanModel(ImprovedParams(pearl=params, serving=serving)).capacity_weight(load, "x", 1, role)

    for role in (Role.PREFILL, Role.DECODE, Role.COLOCATED):
        assert weight(400_000.0, role) == pytest.approx(0.5, rel=0.02)
        assert weight(200_000.0, role) < 0.5 * 0.95


def test_a_declared_sizes_compute_weight_follows_the_kv_aware_decode_fits_not_pearls_refit_b() -> None:
    """Where the reference (TP2) and a declared size (TP1) both have a decode fit on KV tokens, a TP1 worker's
    compute is the ratio of the fits' per-sequence costs b + c·h at h = c̄ + r/2 tokens held (colocated: with
    t_p·ΔL), whatever PEARL's refit b says. PEARL's refit b of the reference falls to its 1e-12 floor in a KV-bound
    batch (e2e segment-2 after step 0: a TP4 worker was then worth 0.08 reference workers, 2.27 four batches later;
    docs/makespan.md, "Worker sizes: the compute weight"); with the fits it is the same either way."""
    load = _agentic()
    ref_fit = DecodeCost(gpu_type="x", tp=2, iteration_s=0.005, per_seq_s=1e-5, per_kv_token_s=2e-8)
    tp1_fit = DecodeCost(gpu_type="x", tp=1, iteration_s=0.008, per_seq_s=2e-5, per_kv_token_s=4.5e-8)
    serving = ServingParams(
        kv_pool_tokens=800_000.0,
        size_pools=(SizePool(gpu_type="x", tp=1, kv_pool_tokens=3e5),),
        decode_costs=(ref_fit, tp1_fit),
    )
    held = load.mean_context_tokens + load.generated_tokens_per_turn / 2
    ref_seq, tp1_seq = 1e-5 + 2e-8 * held, 2e-5 + 4.5e-8 * held
    reference = HAND.params.devices[0]
    dl, r = load.appended_tokens_per_turn, load.generated_tokens_per_turn
    colocated = (dl * reference.prefill_s_per_token + r * ref_seq) / (dl * _TP1.prefill_s_per_token + r * tp1_seq)
    bases = {
        Role.DECODE: (PoolCapacity(mode=Mode.DISAGGREGATED, prefill=1.0, decode=1.0), ref_seq / tp1_seq),
        Role.COLOCATED: (PoolCapacity(mode=Mode.COLOCATED, colocated=1.0), colocated),
    }
    for b_ref in (reference.decode_per_seq_s, 1e-12):  # PEARL's b as measured, and at the refit's floor
        devices = (reference.model_copy(update={"decode_per_seq_s": b_ref}), _TP1)
        params = HAND.params.model_copy(update={"devices": devices})
        model = ImprovedMakespanModel(ImprovedParams(pearl=params, serving=serving))
        for role, (base, weight) in bases.items():
            pools = model._pools(load, base.model_copy(update={"workers": _workers((role, 1, 2))}))
            assert getattr(pools.capacity, role.value) == pytest.approx(2 * weight, rel=1e-12)
        assert model._compute_weight(load, "x", 1, Role.PREFILL) == pytest.approx(0.5)  # t_p: PEARL's
    # Without the size's own fit (or the reference's) the weight is PEARL's per-token one, as before.
    unfitted = _sized(serving.model_copy(update={"decode_costs": (ref_fit,)}))
    pearl = type(HAND)(unfitted.params.pearl)
    for role in (Role.DECODE, Role.COLOCATED):
        assert unfitted._compute_weight(load, "x", 1, role) == pearl.capacity_weight(load, "x", 1, role)


def test_a_phase_sits_at_the_mean_prefix_of_its_turns() -> None:
    """12 turns of 200 appended + 300 generated after a 1,000-token prompt, every trajectory taking all 12: phase j
    holds turns 2j and 2j + 1, whose prompts P₀ + k·500 average P₀ + (2j + ½)·500, so its context (the prefix a turn
    starts from, the prompt less ΔL) is 1,050 + 1,000·j, and a decoding sequence holds that, ΔL and r/2."""
    load = kv_bound_workload(turns=12, mean_context_tokens=4000.0)
    phases = IMPROVED.phases(load)
    assert [ph.context for ph in phases] == pytest.approx([1050.0 + 1000.0 * j for j in range(6)])
    assert all(ph.trajectories == pytest.approx(512) for ph in phases)  # the mean trajectory takes all 12 turns
    assert IMPROVED._footprint(load, Mode.COLOCATED, 1050.0) == pytest.approx(1050.0 + 200.0 + 150.0)
    assert IMPROVED._footprint(load, Mode.DISAGGREGATED, 1050.0) == pytest.approx(1400.0 + 512.0)
