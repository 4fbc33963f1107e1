"""``ImprovedMakespanModel.predict_lanes_s``: ``predict``'s total of many configurations at once, float for float.

Each lane is held to ``predict(workload, capacity).total_s`` exactly (``==``, not approx) on random workloads, serving
settings and configurations of both modes, with and without workers of declared sizes (the gateway's split of a
mixed-size role included). The improved prediction is not monotone in capacity, so it gets no bound
(docs/formulation.md, "Ranking by predict"); the last test pins the counterexample the docs quote.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pearl_sched.makespan import PoolCapacity, SizeCount
from pearl_sched.makespan_improved import (
    DecodeCost,
    ImprovedMakespanModel,
    ImprovedParams,
    ModeObservation,
    PrefillCost,
    ServingParams,
    SizePool,
    _slowest_delays_s,
    slowest_delay_s,
)
from pearl_sched.planner import _vectorised_totals
from pearl_sched.request import PlanRequest
from pearl_sched.state import Mode, Role, Workload

MIXED = PlanRequest.model_validate_json(
    (Path(__file__).resolve().parent.parent / "examples" / "mixed-sizes.json").read_text()
)
PARAMS = MIXED.model
WORKLOAD = MIXED.state.workload
DEVICES = PARAMS.devices
POOLS = tuple(
    SizePool(gpu_type=d.gpu_type, tp=d.tp, kv_pool_tokens=d.kv_capacity_bytes / WORKLOAD.kv_bytes_per_token)
    for d in DEVICES[1:]
)


@st.composite
def servings(draw: st.DrawFn) -> ServingParams:
    """Serving settings: the router, groups, caches, PD variants, mixed steps, decode fits and measurements."""
    limited = draw(st.booleans()) or draw(st.booleans())
    fields: dict[str, object] = dict(
        kv_limited=limited,
        kv_pool_tokens=draw(st.sampled_from([None, 20_000.0, 300_000.0])),
        size_pools=POOLS if draw(st.booleans()) else (),
        router=draw(st.sampled_from(["cache_aware", "least_load", "round_robin"])),
        perfect_cache=draw(st.booleans()) and draw(st.booleans()),
        pd_whole_context=draw(st.booleans()),
        decode_radix_cache=draw(st.booleans()),
        decode_cost_by_context=draw(st.booleans()),
        enable_mixed_chunk=draw(st.booleans()),
        mixed_step_factor=draw(st.sampled_from([1.0, 1.4])),
        group_size=draw(st.sampled_from([1, 4, 16])),
        shared_prompt_hits=draw(st.booleans()) or draw(st.booleans()),
        kv_transfer_bytes_per_s=draw(st.sampled_from([None, 5e9])),
        live_share=draw(st.sampled_from(["linear", "turn_counts"])),
        pd_prefill_queue=draw(st.booleans()),
    )
    if draw(st.booleans()):
        fields["decode_costs"] = (
            DecodeCost(gpu_type="h200", tp=1, iteration_s=0.01, per_seq_s=2e-4, per_kv_token_s=1e-8),
            DecodeCost(gpu_type="h200", tp=4, iteration_s=0.012, per_seq_s=6e-5, per_kv_token_s=3e-9),
        )
    observed = draw(
        st.sampled_from(
            [
                None,
                ModeObservation(colocated_workers=8.0, cache_hit_rate=0.6),
                ModeObservation(prefill_workers=3.0, decode_workers=5.0, cache_hit_rate=0.3, retractions_per_turn=0.2),
            ]
        )
    )
    if observed is not None:
        fields["colocated" if observed.colocated_workers else "disaggregated"] = observed
    return ServingParams.model_validate(fields)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    """The example's batch, scaled: batch size, turns, environment, contexts."""
    mean = draw(st.floats(500.0, 12_000.0))
    batch = draw(st.sampled_from([1, 64, 1024, 4096]))
    return WORKLOAD.model_copy(
        update={
            "batch_size": batch,
            "unfinished": batch,
            "turns": draw(st.floats(1.0, 40.0)),
            "env_time_per_turn_s": draw(st.floats(0.0, 20.0)),
            "env_time_std_s": draw(st.sampled_from([0.0, 3.0])),
            "mean_context_tokens": mean,
            "max_context_tokens": draw(st.sampled_from([0.0, mean * 2])),
            "prompt_tokens": draw(st.floats(1.0, 2000.0)),  # none: predict divides by 0 (one turn)
            "turn_quantiles": tuple(sorted(draw(st.lists(st.floats(1.0, 80.0), min_size=2, max_size=21))))
            if draw(st.booleans())
            else (),
        }
    )


@st.composite
def capacities(draw: st.DrawFn) -> PoolCapacity:
    """A configuration of either mode: capacities alone, or workers of one to three sizes per role."""
    mode = draw(st.sampled_from(list(Mode)))
    if draw(st.booleans()):
        cap = st.floats(0.0, 64.0).map(lambda x: 0.0 if x < 0.5 else x)
        return PoolCapacity(mode=mode, prefill=draw(cap), decode=draw(cap), colocated=draw(cap))
    roles = [Role.COLOCATED] if mode is Mode.COLOCATED else [Role.PREFILL, Role.DECODE]
    workers = []
    for role in roles:
        for d in draw(st.lists(st.sampled_from(DEVICES), min_size=1, max_size=3, unique=True)):
            workers.append(SizeCount(role=role, gpu_type=d.gpu_type, tp=d.tp, count=draw(st.integers(0, 12))))
    return PoolCapacity(mode=mode, prefill=1.0, decode=1.0, colocated=1.0, workers=tuple(workers))


def _scalar(model: ImprovedMakespanModel, load: Workload, capacity: PoolCapacity) -> float:
    try:
        return model.predict(load, capacity).total_s
    except ValueError:  # no capacity in a role the mode needs
        return math.inf


@settings(max_examples=int(os.environ.get("LANES_EXAMPLES", "40")), deadline=None)
@given(servings(), workloads(), st.lists(capacities(), min_size=1, max_size=12))
def test_lanes_are_predict_float_for_float(serving: ServingParams, load: Workload, configs: list[PoolCapacity]) -> None:
    lanes = ImprovedMakespanModel(ImprovedParams(pearl=PARAMS, serving=serving)).predict_lanes_s(load, configs)
    fresh = ImprovedMakespanModel(ImprovedParams(pearl=PARAMS, serving=serving))  # nothing memoised by the lanes
    assert lanes.tolist() == [_scalar(fresh, load, c) for c in configs]


def test_lanes_cover_the_gateway_split_and_reuse_predictions() -> None:
    model = ImprovedMakespanModel(ImprovedParams(pearl=PARAMS, serving=ServingParams(size_pools=POOLS)))
    mixed = PoolCapacity(
        mode=Mode.DISAGGREGATED,
        workers=(
            SizeCount(role=Role.PREFILL, gpu_type="h200", tp=1, count=4),
            SizeCount(role=Role.PREFILL, gpu_type="h100", tp=2, count=2),
            SizeCount(role=Role.DECODE, gpu_type="h200", tp=2, count=3),
        ),
    )
    assert len(model._router_splits(WORKLOAD, mixed)) == 2  # cache-aware splits the prefill role by count
    first = model.predict_lanes_s(WORKLOAD, [mixed, mixed])
    assert first.tolist() == [model.predict(WORKLOAD, mixed).total_s] * 2
    assert model.predict_lanes_s(WORKLOAD, [mixed]).tolist() == first[:1].tolist()  # from predict's memo now


def test_lanes_under_a_fitted_prefill_cost_are_predict() -> None:
    cost = PrefillCost(per_token_s=3e-5, per_token_context_s=1e-10, per_batch_s=0.004)
    serving = ServingParams(prefill_step_cost=cost, prefill_batch_cost=True, size_pools=POOLS)
    configs = [
        PoolCapacity(mode=Mode.COLOCATED, colocated=6.0),
        PoolCapacity(mode=Mode.DISAGGREGATED, prefill=2.0, decode=5.0),
        PoolCapacity(mode=Mode.DISAGGREGATED, prefill=0.0, decode=5.0),
    ]
    lanes = ImprovedMakespanModel(ImprovedParams(pearl=PARAMS, serving=serving)).predict_lanes_s(WORKLOAD, configs)
    fresh = ImprovedMakespanModel(ImprovedParams(pearl=PARAMS, serving=serving))
    assert lanes.tolist() == [_scalar(fresh, WORKLOAD, c) for c in configs]
    assert math.isinf(lanes[2])


@given(
    st.lists(st.floats(0.0, 500.0), min_size=1, max_size=20),
    st.sampled_from([0.0, 0.5, 13.4]),
    st.sampled_from([1, 2, 64, 4096]),
)
def test_slowest_delays_in_lanes_are_the_scalar_ones(bursts: list[float], spread: float, trajectories: int) -> None:
    assert _slowest_delays_s(bursts, spread, trajectories) == [slowest_delay_s(b, spread, trajectories) for b in bursts]


def test_not_monotone_in_capacity_so_no_bound() -> None:
    """More decode capacity can predict a longer makespan (docs/formulation.md, "Ranking by predict"), so the
    planner's bound, which assumes the total never rises with capacity, is not offered: no ``predict_totals_s``."""
    model = ImprovedMakespanModel(ImprovedParams(pearl=PARAMS))
    fewer = PoolCapacity(mode=Mode.DISAGGREGATED, prefill=3.17, decode=2.4)
    more = fewer.model_copy(update={"decode": 3.0})
    assert model.predict(WORKLOAD, more).total_s > model.predict(WORKLOAD, fewer).total_s
    assert _vectorised_totals(model) is None
