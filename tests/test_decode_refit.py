"""The decode refit on KV tokens (docs/makespan.md, "Decode cost on KV tokens"): ``t = A + b·n + c·K`` fitted from
decode batches as SGLang logs them, the improved predictor reading it, and PEARL's own ``A + b·n`` fit untouched."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pearl_sched import Mode, PoolCapacity
from pearl_sched.control import PlannerDecider
from pearl_sched.errors import TelemetryRejected
from pearl_sched.makespan import DeviceParams
from pearl_sched.makespan_improved import DecodeCost, ImprovedMakespanModel, ImprovedParams, ServingParams
from pearl_sched.profiles.telemetry import (
    DecodeBatchSums,
    decode_batches_from_log,
    fit_decode_cost,
    refit_decode_costs,
)
from pearl_sched.sim.availability import AvailabilityTrace
from pearl_sched.sim.cluster import ObservedStepTimes, SimCluster, run_segment
from pearl_sched.sim.experiment import costs_for, setting_for

from .builders import DATA, HAND, kv_bound_workload, tiny

A_S, B_S, C_S = 0.005, 1e-5, 2e-8
"""The known linear world: 5 ms an iteration, 10 µs a running request, 20 ns a KV token attended."""


class FakeKvLinearWorld:
    """A named fake of :class:`~pearl_sched.sim.steptimes.StepTimes`: decode iterations cost exactly A + b·n + c·K.

    K = n × the batch's mean context; prefill and mixed steps are not used by these tests (1 ms a token).
    """

    source = "fake kv-linear world"

    def prefill_s(self, new_tokens: float, sequences: int, cached_tokens: float) -> float:
        return 1e-3 * new_tokens

    def decode_s(self, batch: int, context_tokens: float) -> float:
        return A_S + B_S * batch + C_S * batch * context_tokens

    def mixed_s(
        self,
        prefill_new_tokens: float,
        prefill_sequences: int,
        prefill_cached_tokens: float,
        decode_batch: int,
        decode_context_tokens: float,
    ) -> float:
        return self.prefill_s(prefill_new_tokens, prefill_sequences, prefill_cached_tokens) + self.decode_s(
            decode_batch, decode_context_tokens
        )


CONTEXTS = np.geomspace(200.0, 12_500.0, 200)


def _kv_bound_batch(observed: ObservedStepTimes, pool_tokens: float = 400_000.0) -> None:
    """Decode iterations of a batch that fills a KV pool: 256 short sequences at first (SGLang's running-request
    cap), then as contexts grow (geometrically, 200 to 12,500 tokens) only what the pool holds runs (n = pool ÷
    context), so n falls while K rises to the pool and stays there."""
    for context in CONTEXTS:
        observed.decode_s(int(min(256, pool_tokens // context)), float(context))


def _prior() -> DeviceParams:
    return DeviceParams(
        gpu_type="x",
        tp=2,
        prefill_s_per_token=1.0,
        decode_iteration_s=1.0,
        decode_per_seq_s=1.0,
        kv_capacity_bytes=1e11,
    )


def test_the_fit_recovers_a_b_and_c_of_a_linear_world_from_varied_batches() -> None:
    sums = DecodeBatchSums()
    for n in (1, 8, 32, 100, 256):
        for context in (300.0, 2_000.0, 9_000.0):
            sums = sums.add(n, n * context, A_S + B_S * n + C_S * n * context)
    cost = fit_decode_cost(sums, gpu_type="x", tp=2)
    assert (cost.gpu_type, cost.tp) == ("x", 2)
    assert cost.iteration_s == pytest.approx(A_S, rel=1e-6)
    assert cost.per_seq_s == pytest.approx(B_S, rel=1e-6)
    assert cost.per_kv_token_s == pytest.approx(C_S, rel=1e-6)


def test_in_a_kv_bound_batch_the_n_only_fit_collapses_and_the_kv_fit_recovers_the_world() -> None:
    """The pattern of docs/makespan.md ("Ranking by predict: measured"): n falls as contexts grow while the
    iteration follows the KV tokens, so the slope on n alone is negative and PEARL's fit clamps b at 10⁻¹² s; the
    regression on n and K finds A, b and c. PEARL's fit itself is the least-squares line on n, as before."""
    observed = ObservedStepTimes(FakeKvLinearWorld())
    _kv_bound_batch(observed)
    observed.prefill_s(2000.0, 2, 0.0)
    pearl = observed.fit(_prior())
    assert pearl is not None
    assert pearl.decode_per_seq_s == 1e-12, "the n-only slope collapses to its floor"
    cost = fit_decode_cost(observed.decode_sums(), gpu_type="x", tp=2)
    assert cost.iteration_s == pytest.approx(A_S, rel=1e-6)
    assert cost.per_seq_s == pytest.approx(B_S, rel=1e-6)
    assert cost.per_kv_token_s == pytest.approx(C_S, rel=1e-6)
    # PEARL's fit is unchanged: the ordinary least-squares line of t on n (its slope clamped, A refitted)
    n = np.array([min(256, 400_000.0 // c) for c in CONTEXTS])
    t = A_S + B_S * n + C_S * n * CONTEXTS
    slope = np.polyfit(n, t, 1)[0]
    assert slope < 0
    assert pearl.decode_iteration_s == pytest.approx(float(np.mean(t)) - 1e-12 * float(np.mean(n)))


def test_the_overhead_a_worker_measures_is_part_of_the_fitted_iteration() -> None:
    observed = ObservedStepTimes(FakeKvLinearWorld(), overhead_s=0.002)
    _kv_bound_batch(observed)
    cost = fit_decode_cost(observed.decode_sums(), gpu_type="x", tp=2)
    assert cost.iteration_s == pytest.approx(A_S + 0.002, rel=1e-6)
    assert cost.per_kv_token_s == pytest.approx(C_S, rel=1e-6)


@pytest.mark.parametrize(
    ("batches", "reason"),
    [
        ([(8, 1000.0), (16, 1000.0)], "fewer than the 3"),
        ([(8, 1000.0), (8, 2000.0), (8, 3000.0)], "one decode batch size"),
        ([(8, 1000.0), (16, 1000.0), (32, 1000.0)], "collinear"),
        ([(8, 1000.0), (16, 500.0), (32, 250.0)], "KV tokens do not vary"),
    ],
)
def test_degenerate_batches_are_rejected_with_a_reason(batches: list[tuple[int, float]], reason: str) -> None:
    """Too few batches, one size, every sequence at one context (K ∝ n), or a constant K: not fitted."""
    sums = DecodeBatchSums()
    for n, context in batches:
        sums = sums.add(n, n * context, A_S + B_S * n + C_S * n * context)
    with pytest.raises(TelemetryRejected, match=reason):
        fit_decode_cost(sums, gpu_type="x", tp=2)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_time_is_rejected_not_raised(bad: float) -> None:
    sums = DecodeBatchSums()
    for n, context in ((8, 1000.0), (16, 3000.0), (32, 500.0)):
        sums = sums.add(n, n * context, A_S + B_S * n + C_S * n * context)
    with pytest.raises(TelemetryRejected, match="non-finite"):
        fit_decode_cost(sums.add(4, 4000.0, bad), gpu_type="x", tp=2)


def test_costs_stay_non_negative_where_least_squares_would_go_negative() -> None:
    """Iterations that get cheaper with KV (noise, not physics) fit c = 0 and the best A, b ≥ 0 instead."""
    sums = DecodeBatchSums()
    for n, context in ((4, 100.0), (8, 4000.0), (16, 200.0), (32, 3000.0), (64, 150.0)):
        sums = sums.add(n, n * context, 0.004 + 2e-5 * n - 1e-9 * n * context)
    cost = fit_decode_cost(sums, gpu_type="x", tp=2)
    assert cost.per_kv_token_s == 0.0
    assert cost.iteration_s > 0 and cost.per_seq_s > 0


SGLANG_LINES = [
    # SGLang 0.5.8 scheduler_metrics_mixin.log_decode_stats: plain, PD decode, speculative
    "[2026-11-30 10:00:01] Decode batch, #running-req: {n}, #token: {k}, token usage: 0.41, cuda graph: True, "
    "gen throughput (token/s): {g}, #queue-req: 0, ",
    "[2026-11-30 10:00:02 DP0 TP0] Decode batch, #running-req: {n}, #token: {k}, token usage: 0.41, pre-allocated "
    "usage: 0.02, #prealloc-req: 0, #transfer-req: 1, #retracted-req: 0, cuda graph: True, gen throughput "
    "(token/s): {g}, #queue-req: 3, ",
    "[2026-11-30 10:00:03] Decode batch, #running-req: {n}, #token: {k}, token usage: 0.41, accept len: 2.00, "
    "accept rate: 0.50, cuda graph: False, gen throughput (token/s): {g}, #queue-req: 0, ",
]


def test_sglang_decode_log_lines_give_the_batches_and_the_fit() -> None:
    """n·a/g is an iteration's seconds: n requests each add a (the accept length) tokens an iteration."""
    lines = ["[2026-11-30 10:00:00] Prefill batch, #new-seq: 4, #new-token: 8192, #cached-token: 0, ..."]
    expected = DecodeBatchSums()
    for i, (n, context) in enumerate((n, c) for n in (3, 40, 180) for c in (700.0, 5_000.0)):
        k = int(n * context)
        seconds = A_S + B_S * n + C_S * k
        template = SGLANG_LINES[i % 3]
        accept = 2.0 if "accept len" in template else 1.0
        lines.append(template.format(n=n, k=k, g=f"{n * accept / seconds:.6f}"))
        expected = expected.add(n, k, seconds)
    lines.append("Decode batch, #running-req: 0, #token: 0, token usage: 0.00, gen throughput (token/s): 0.00, ")
    sums = decode_batches_from_log(lines)
    assert sums.batches == 6
    assert np.allclose(sums, expected, rtol=1e-5)
    cost = fit_decode_cost(sums, gpu_type="h200", tp=2)
    assert cost.per_kv_token_s == pytest.approx(C_S, rel=1e-3)
    assert cost.per_seq_s == pytest.approx(B_S, rel=1e-3)
    assert cost.iteration_s == pytest.approx(A_S, rel=1e-3)


def test_refit_blends_each_size_and_keeps_the_others() -> None:
    old = DecodeCost(gpu_type="x", tp=2, iteration_s=0.01, per_seq_s=0.0, per_kv_token_s=1e-8)
    other = DecodeCost(gpu_type="x", tp=4, iteration_s=0.02, per_seq_s=1e-5, per_kv_token_s=5e-9)
    new = DecodeCost(gpu_type="x", tp=2, iteration_s=0.02, per_seq_s=1e-5, per_kv_token_s=2e-8)
    serving = refit_decode_costs(ServingParams(decode_costs=(old, other)), [new], alpha=0.5)
    blended = serving.decode_cost("x", 2)
    assert blended is not None
    assert (blended.iteration_s, blended.per_seq_s, blended.per_kv_token_s) == pytest.approx((0.015, 5e-6, 1.5e-8))
    assert serving.decode_cost("x", 4) == other
    assert refit_decode_costs(ServingParams(), [new]).decode_costs == (new,)
    with pytest.raises(ValueError, match="alpha"):
        refit_decode_costs(ServingParams(), [new], alpha=0.0)


def test_serving_params_json_and_digest_are_unchanged_without_a_fit() -> None:
    assert "decode_costs" not in ServingParams().model_dump_json()
    cost = DecodeCost(gpu_type="x", tp=2, iteration_s=0.01, per_seq_s=0.0, per_kv_token_s=1e-8)
    assert "decode_costs" in ServingParams(decode_costs=(cost,)).model_dump_json()
    with pytest.raises(ValueError, match="repeat"):
        ServingParams(decode_costs=(cost, cost))


def _improved(serving: ServingParams, **device: float) -> ImprovedMakespanModel:
    params = HAND.params.model_copy(
        update={"devices": (HAND.params.devices[0].model_copy(update=device),), "switch_overhead_s": 0.0}
    )
    return ImprovedMakespanModel(ImprovedParams(pearl=params, serving=serving))


def test_a_kv_fit_equal_to_pearls_line_predicts_as_pearls_parameters() -> None:
    """With c = 0 and PEARL's own A and b the improved predictor's decode terms are PEARL's: same predictions."""
    device = HAND.params.devices[0]
    same = DecodeCost(
        gpu_type=device.gpu_type,
        tp=device.tp,
        iteration_s=device.decode_iteration_s,
        per_seq_s=device.decode_per_seq_s,
        per_kv_token_s=0.0,
    )
    load = kv_bound_workload()
    for capacity in (
        PoolCapacity(mode=Mode.COLOCATED, colocated=6),
        PoolCapacity(mode=Mode.DISAGGREGATED, prefill=2, decode=4),
    ):
        plain = _improved(ServingParams(kv_pool_tokens=400_000.0)).predict(load, capacity)
        fitted = _improved(ServingParams(kv_pool_tokens=400_000.0, decode_costs=(same,))).predict(load, capacity)
        assert fitted.total_s == pytest.approx(plain.total_s, rel=1e-12)
        assert fitted.decode_s == pytest.approx(plain.decode_s, rel=1e-12)


def test_with_the_kv_fit_more_workers_shorten_an_iteration_that_the_collapsed_b_kept_flat() -> None:
    """PEARL's refit of a KV-bound batch: A absorbs the KV cost and b = 10⁻¹² s, so 8 and 12 workers decode an
    iteration equally fast. The KV fit (A, b, c) of the same iterations makes fewer sequences per worker cheaper."""
    load = kv_bound_workload()
    collapsed = _improved(ServingParams(kv_pool_tokens=4e6), decode_iteration_s=0.012, decode_per_seq_s=1e-12)
    cost = DecodeCost(gpu_type="x", tp=2, iteration_s=A_S, per_seq_s=B_S, per_kv_token_s=C_S)
    kv_aware = _improved(ServingParams(kv_pool_tokens=4e6, decode_costs=(cost,)))
    eight, twelve = (PoolCapacity(mode=Mode.COLOCATED, colocated=n) for n in (8, 12))
    # only the prefill interference moves the collapsed iteration (under 1%), and the makespan with it
    assert collapsed.cycle(load, eight).iteration_s == pytest.approx(collapsed.cycle(load, twelve).iteration_s, 0.01)
    assert collapsed.predict(load, eight).total_s == pytest.approx(collapsed.predict(load, twelve).total_s, 0.01)
    assert kv_aware.cycle(load, twelve).iteration_s < 0.9 * kv_aware.cycle(load, eight).iteration_s
    assert kv_aware.predict(load, twelve).total_s < 0.95 * kv_aware.predict(load, eight).total_s
    # the per-sequence cost at a turn's prefix c is b + c·(c + ΔL + r/2): 5,000 + 200 appended + 300/2 generated
    assert kv_aware._per_seq_s(load, 5000.0) == pytest.approx(B_S + C_S * 5350.0)


@pytest.mark.needs_data
def test_the_simulated_cluster_refits_the_kv_cost_for_the_improved_predictor_only() -> None:
    """After a batch the cluster's serving parameters carry the scenario TP's KV-aware decode cost, the improved
    planner plans on them, and PEARL's device parameters are still PEARL's least-squares fit on n."""
    scenario = tiny()
    setting = setting_for(scenario, DATA)
    trace = AvailabilityTrace(np.zeros(1), np.array([8.0]), 900.0)
    decider = PlannerDecider(
        "improved", setting.predictor("improved"), backend="enumeration", costs=costs_for(scenario)
    )
    result = run_segment(setting, trace, decider, costs=costs_for(scenario), tick_s=300.0)
    assert len(result.steps) >= 2
    model = decider.model
    assert isinstance(model, ImprovedMakespanModel)
    cost = model.params.serving.decode_cost(setting.gpu_type, scenario.tp)
    assert cost is not None
    assert cost.per_kv_token_s > 0 and cost.iteration_s > 0
    assert model.params.pearl.source == "refitted from observed steps"


@pytest.mark.needs_data
def test_a_batch_that_cannot_be_fitted_is_recorded_and_keeps_the_previous_cost() -> None:
    scenario = tiny()
    setting = setting_for(scenario, DATA)
    cluster = SimCluster(setting, costs=costs_for(scenario))
    before = DecodeCost(gpu_type=setting.gpu_type, tp=scenario.tp, iteration_s=0.01, per_seq_s=0.0, per_kv_token_s=0)
    cluster.serving_params = ServingParams(decode_costs=(before,))
    for context in (1000.0, 2000.0, 3000.0):
        cluster.observed.decode_s(16, context)  # one batch size
    cluster._refit_decode_costs()
    assert cluster.serving_params.decode_costs == (before,)
    assert any(
        f"TP{scenario.tp} decode cost on KV tokens: one decode batch size" in line
        for line in cluster.telemetry_rejections
    )
