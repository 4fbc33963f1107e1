"""The improved predictor: its limits coincide with PEARL's formulas, and θ is endogenous."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl_sched import Mode, PoolCapacity
from pearl_sched.makespan_improved import ImprovedMakespanModel, ImprovedParams

from .builders import HAND, workload

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
    capacity = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=1, decode=3)
    assert IMPROVED.predict(load, capacity).total_s == pytest.approx(HAND.predict(load, capacity).total_s, rel=1e-6)


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
    # The fixed point holds: n = B·d/C.
    d = load.generated_tokens_per_turn * fast.iteration_s
    assert fast.decoding == pytest.approx(256 * d / fast.cycle_s, rel=1e-6)


def test_longer_context_makes_append_prefill_dearer() -> None:
    model = ImprovedMakespanModel(ImprovedParams(pearl=HAND.params, prefill_s_per_token_per_context=1e-9))
    short = workload(mean_context_tokens=1000.0)
    long = workload(mean_context_tokens=30000.0)
    capacity = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=1, decode=8)
    assert model.predict(long, capacity).prefill_s > model.predict(short, capacity).prefill_s


def test_colocation_interference_inflates_decode_iterations() -> None:
    load = workload(batch_size=512, unfinished=512, appended_tokens_per_turn=3000.0, env_time_per_turn_s=1.0)
    colocated = IMPROVED.cycle(load, PoolCapacity(mode=Mode.COLOCATED, colocated=4))
    split = IMPROVED.cycle(load, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=2, decode=4))
    plain = HAND.reference.decode_iteration_s + HAND.reference.decode_per_seq_s * colocated.decoding / 4
    assert colocated.iteration_s > plain * 1.01  # co-batched prefill chunks slow each decode iteration
    assert split.iteration_s == pytest.approx(
        HAND.reference.decode_iteration_s + HAND.reference.decode_per_seq_s * split.decoding / 4, rel=1e-6
    )


@given(st.integers(1, 16), st.integers(1, 16))
def test_makespan_never_rises_with_more_decode_capacity(prefill: int, decode: int) -> None:
    load = workload(batch_size=256, unfinished=256, env_time_per_turn_s=3.0)
    before = IMPROVED.predict(load, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=prefill, decode=decode))
    after = IMPROVED.predict(load, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=prefill, decode=decode + 1))
    assert after.total_s <= before.total_s * (1 + 1e-9)


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
    calm = workload(batch_size=64, unfinished=64, env_time_std_s=0.0)  # small batch: the critical path binds
    noisy = workload(batch_size=64, unfinished=64, env_time_std_s=5.0)
    capacity = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=2, decode=6)
    assert IMPROVED.predict(noisy, capacity).total_s > IMPROVED.predict(calm, capacity).total_s
