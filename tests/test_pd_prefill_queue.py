"""The PD prefill pool's queue in the trajectory's cycle (``ServingParams.pd_prefill_queue``, opt-in).

What is checked: where the prefill pool cannot keep up with the cycle the model would have without it, the cycle
becomes the pool's work per cycle (every live trajectory's turn through its queue), fewer trajectories decode, the
prefill side's LRU sees that regular cycle and keeps less, and the batch is predicted no faster; where the pool keeps
up, and in colocated mode, nothing changes; the option is off by default and absent from a digest's dump.
"""

from __future__ import annotations

import pytest

from pearl_sched import Mode, PoolCapacity
from pearl_sched.makespan_improved import ImprovedMakespanModel, ImprovedParams, ServingParams

from .builders import HAND, kv_bound_workload

LOAD = kv_bound_workload(env_time_per_turn_s=1.0, env_time_std_s=0.5)


def _model(queue: bool) -> ImprovedMakespanModel:
    serving = ServingParams(pd_prefill_queue=queue, kv_pool_tokens=2.0e6)
    return ImprovedMakespanModel(ImprovedParams(pearl=HAND.params, serving=serving))


def test_off_by_default_and_not_in_the_dump() -> None:
    assert ServingParams().pd_prefill_queue is False
    assert "pd_prefill_queue" not in ServingParams().model_dump()
    assert ServingParams(pd_prefill_queue=True).model_dump()["pd_prefill_queue"] is True


def test_a_prefill_bound_pool_queues_and_its_cache_keeps_less() -> None:
    """1P7D: one prefill worker for 512 trajectories whose contexts outgrow what its cache keeps."""
    capacity = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=1, decode=7)
    free, queued = _model(False), _model(True)
    before = free._states(LOAD, capacity, corrected=True)
    after = queued._states(LOAD, capacity, corrected=True)
    bound = 0
    for phase, old, new in zip(queued.phases(LOAD), before, after, strict=True):
        backlog = phase.trajectories * new.prefill_s / capacity.prefill  # the pool's work per cycle
        if new == old:  # the pool keeps up with the cycle without the queue: that cycle stands
            assert phase.trajectories * old.prefill_s / capacity.prefill <= old.cycle_s
            continue
        bound += 1
        assert phase.trajectories * old.prefill_s / capacity.prefill > old.cycle_s  # it could not keep up
        assert new.cycle_s == pytest.approx(backlog, rel=1e-9)  # the trajectories wait in its queue
        assert new.decoding < old.decoding
        assert new.prefill_hit <= old.prefill_hit
        assert new.prefill_tokens_per_turn >= old.prefill_tokens_per_turn
    assert bound >= 3  # the later phases, whose contexts the cache cannot keep under that cycle
    assert after[-1].prefill_hit < before[-1].prefill_hit
    assert queued.predict(LOAD, capacity).total_s > free.predict(LOAD, capacity).total_s


@pytest.mark.parametrize(
    "capacity",
    [
        PoolCapacity(mode=Mode.DISAGGREGATED, prefill=4, decode=4),  # the prefill pool keeps up in every phase
        PoolCapacity(mode=Mode.COLOCATED, colocated=8),
    ],
)
def test_where_the_pool_keeps_up_or_colocated_nothing_changes(capacity: PoolCapacity) -> None:
    free, queued = _model(False), _model(True)
    assert queued._states(LOAD, capacity, corrected=True) == free._states(LOAD, capacity, corrected=True)
    assert queued.predict(LOAD, capacity) == free.predict(LOAD, capacity)
