"""PEARL's closed form (docs/makespan.md), checked against hand-computed values."""

from __future__ import annotations

import pytest

from pearl_sched import (
    InvalidStateError,
    Mode,
    PearlMakespanModel,
    PearlParams,
    PoolCapacity,
    Role,
)

from .builders import HAND, MODEL, workload

DEVICE = HAND.params.devices[0]
LOAD = workload(
    batch_size=64,
    unfinished=64,
    turns=10,
    appended_tokens_per_turn=100,
    generated_tokens_per_turn=50,
    bubble_ratio=0.25,
    kv_bytes_per_token=1000,
    env_time_per_turn_s=2.0,
)


def test_colocated_matches_hand_computation() -> None:
    # T = S·[(B·ΔL/N)·t_p + r·(A + b·B/N) + T_over] + T_env
    #   = 10·[(64·100/4)·1e-5 + 50·(0.005 + 1e-4·64/4) + 0.5] + 20 = 28.46
    m = HAND.predict(LOAD, PoolCapacity(mode=Mode.COLOCATED, colocated=4))
    assert m.total_s == pytest.approx(28.46)
    assert m.prefill_s + m.decode_s + m.overhead_s + m.environment_s == pytest.approx(m.total_s)


def test_disaggregated_matches_hand_computation() -> None:
    # T_dec = 10·50·(0.005 + 1e-4·64/(3·1.25))·1.25 = 4.191666…
    # T_pre = 10·(64·100·1e-5/1 + 64·100·1000/1e9) = 0.704
    m = HAND.predict(LOAD, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=1, decode=3))
    assert m.decode_s == pytest.approx(4.1916666667)
    assert m.prefill_s + m.transfer_s == pytest.approx(0.704)
    assert m.total_s == pytest.approx(4.1916666667 + 20)


def test_terms_give_the_same_pool_times_as_predict() -> None:
    terms = HAND.terms(LOAD)
    dis = HAND.predict(LOAD, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=2, decode=5))
    assert terms.decode.time_s(5) == pytest.approx(dis.decode_s)
    assert terms.prefill.time_s(2) == pytest.approx(dis.prefill_s + dis.transfer_s)
    col = HAND.predict(LOAD, PoolCapacity(mode=Mode.COLOCATED, colocated=7))
    assert terms.colocated.time_s(7) + terms.environment_s == pytest.approx(col.total_s)


def test_prefill_bound_dominates_when_prefill_pool_is_tiny() -> None:
    heavy = LOAD.model_copy(update={"appended_tokens_per_turn": 200_000.0})
    m = HAND.predict(heavy, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=1, decode=8))
    assert m.total_s == pytest.approx(m.prefill_s + m.transfer_s + m.environment_s)


def test_slower_gpu_is_worth_less_reference_capacity() -> None:
    load = workload()
    assert MODEL.capacity_weight(load, "h200", 1, Role.DECODE) == 1.0
    w = MODEL.capacity_weight(load, "h100", 1, Role.DECODE)
    assert w == pytest.approx(3.35 / 4.8)
    assert MODEL.capacity_weight(load, "h100", 1, Role.COLOCATED) == pytest.approx(3.35 / 4.8)


def test_unknown_device_is_a_clear_error() -> None:
    with pytest.raises(InvalidStateError, match=r"no makespan parameters for GPU type 'b200' at TP8"):
        MODEL.capacity_weight(workload(), "b200", 8, Role.DECODE)


def test_zero_capacity_is_rejected() -> None:
    with pytest.raises(ValueError, match="needs prefill and decode capacity"):
        HAND.predict(LOAD, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=0, decode=3))


def test_repeated_device_parameters_are_rejected() -> None:
    with pytest.raises(ValueError, match="repeat a"):
        PearlParams(devices=(DEVICE, DEVICE), switch_overhead_s=0, kv_bandwidth_bytes_per_s=1.0)


def test_per_worker_kv_links_scale_the_transfer_with_prefill_workers() -> None:
    shared = HAND.predict(LOAD, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=4, decode=4))
    per_worker = PearlMakespanModel(HAND.params.model_copy(update={"kv_bandwidth_per_prefill_worker": True}))
    own = per_worker.predict(LOAD, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=4, decode=4))
    assert own.transfer_s == pytest.approx(shared.transfer_s / 4)  # 0.064 s over one link, 0.016 s over four
    assert own.prefill_s == pytest.approx(shared.prefill_s)
