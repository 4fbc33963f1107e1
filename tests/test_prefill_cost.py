"""The improved predictor's two-term prefill cost α·n + β·n·(c + n/2): its fit from the prefill batches a worker
logs, the seconds the predictor charges with it, and the one-term fallback that leaves every other figure as it was."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pearl_sched import Mode, PoolCapacity
from pearl_sched.makespan_improved import (
    PEARL_LIMIT,
    ImprovedMakespanModel,
    ImprovedParams,
    Phase,
    PrefillCost,
    ServingParams,
)
from pearl_sched.profiles.telemetry import PrefillSteps, blend_prefill_cost, parse_prefill_line
from pearl_sched.sim.cluster import ObservedStepTimes
from pearl_sched.sim.steptimes import LinearStepTimes

from .builders import HAND, workload

ALPHA, BETA = 12.5e-6, 4.6e-10  # s per new token; s per (new token, context token) pair


class FakeTwoTermWorld(LinearStepTimes):
    """A fake world whose prefill batches cost exactly α·N + β·N·(c̄ + N/(2k)) (k requests at the mean c̄)."""

    def prefill_s(self, new_tokens: float, sequences: int, cached_tokens: float) -> float:
        return ALPHA * new_tokens + BETA * new_tokens * (cached_tokens + new_tokens / (2 * sequences))


def test_the_fit_recovers_alpha_and_beta_of_a_known_world() -> None:
    rng = np.random.default_rng(7)
    steps = PrefillSteps()
    for _ in range(200):
        k = int(rng.integers(1, 9))
        new = float(rng.integers(50, 8192))
        cached = float(rng.integers(0, 30_000)) * k  # the batch's sum, as SGLang's #cached-token
        seconds = ALPHA * new + BETA * new * (cached + new / 2) / k
        steps.add(sequences=k, new_tokens=new, cached_tokens=cached, seconds=seconds)
    cost = steps.fit()
    assert cost is not None
    assert cost.per_token_s == pytest.approx(ALPHA, rel=1e-9)
    assert cost.per_token_context_s == pytest.approx(BETA, rel=1e-9)


def test_the_simulated_workers_record_their_prefill_batches_for_the_fit() -> None:
    observed = ObservedStepTimes(FakeTwoTermWorld(HAND.params.devices[0]))
    for new, k, mean_cached in ((8192, 1, 0.0), (8192, 1, 8192.0), (1500, 10, 10_000.0), (300, 2, 25_000.0)):
        observed.prefill_s(new, k, mean_cached)  # the simulator passes the mean cached tokens per request
    cost = observed.prefill_cost()
    assert cost is not None
    assert (cost.per_token_s, cost.per_token_context_s) == (pytest.approx(ALPHA), pytest.approx(BETA))
    assert observed.fit(HAND.params.devices[0]) is None  # no decode samples: PEARL's refit is untouched here


def test_no_spread_in_context_falls_back_to_one_rate_per_token() -> None:
    steps = PrefillSteps()
    for _ in range(5):  # every batch the same shape: x₂ a fixed multiple of x₁
        steps.add(sequences=4, new_tokens=600.0, cached_tokens=40_000.0, seconds=0.02)
    assert steps.fit() is None
    assert PrefillSteps().fit() is None  # no batches at all
    one_rate = PrefillSteps()  # spread in context, but the seconds do not grow with it: t_p alone explains them
    for new, cached in ((100.0, 0.0), (4000.0, 20_000.0), (900.0, 5_000.0)):
        one_rate.add(sequences=1, new_tokens=new, cached_tokens=cached, seconds=2e-5 * new)
    fitted = one_rate.fit()
    assert fitted is None or fitted.seconds(4000.0, 20_000.0) == pytest.approx(2e-5 * 4000.0, rel=1e-6)


def test_sglang_prefill_log_line() -> None:
    line = (
        "[2026-01-05 10:00:01 TP0] Prefill batch, #new-seq: 3, #new-token: 8192, #cached-token: 41250, "
        "token usage: 0.41, #running-req: 57, #queue-req: 12, "
    )
    assert parse_prefill_line(line) == (3, 8192, 41250)
    assert parse_prefill_line("[TP0] Decode batch, #running-req: 57, #token: 900000, token usage: 0.41, ") is None


def test_the_ewma_keeps_the_previous_fit_when_a_batch_has_none() -> None:
    old, new = (
        PrefillCost(per_token_s=1e-5, per_token_context_s=1e-9),
        PrefillCost(per_token_s=2e-5, per_token_context_s=0.0),
    )
    assert blend_prefill_cost(None, new) is new and blend_prefill_cost(old, None) is old
    mixed = blend_prefill_cost(old, new, alpha=0.25)
    assert mixed is not None
    assert (mixed.per_token_s, mixed.per_token_context_s) == (pytest.approx(1.25e-5), pytest.approx(0.75e-9))


def _model(serving: ServingParams) -> ImprovedMakespanModel:
    return ImprovedMakespanModel(ImprovedParams(pearl=HAND.params, serving=serving))


def test_a_turns_prefill_seconds_by_hand() -> None:
    """Round robin over 2 colocated workers: half the later turns find their prefix (unlimited memory)."""
    cost = PrefillCost(per_token_s=10e-6, per_token_context_s=1e-9)
    model = _model(
        ServingParams(kv_limited=False, router="round_robin", prefill_cost=cost, prefill_cost_by_context=True)
    )
    load = workload(turns=4, appended_tokens_per_turn=100.0, generated_tokens_per_turn=50.0)
    capacity = PoolCapacity(mode=Mode.COLOCATED, colocated=2)
    flow = model._flow(load, capacity, 8.0, Phase(context=1000.0, trajectories=64.0))
    # later turns 3/4, hit 1/2: appends of 100 over 1,000 cached (1.105 ms) on 1/4 + 3/8 of the turns; the other
    # 3/8 recompute 1,100 tokens from scratch (11.605 ms).
    assert flow.hit == pytest.approx(0.5)
    assert flow.prefill_s == pytest.approx(0.625 * 1.105e-3 + 0.375 * 11.605e-3)
    assert flow.prefill_tokens == pytest.approx(100.0 + 0.375 * 1000.0)
    # PD, whole context: a hit appends ΔL + r over the prompt part c − r; a miss recomputes ΔL + c.
    pd = model._flow(load, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=2, decode=2), 8.0, Phase(1000.0, 64.0))
    hit = pd.hit
    expected = (
        0.25 * cost.seconds(100, 1000) + 0.75 * hit * cost.seconds(150, 950) + 0.75 * (1 - hit) * cost.seconds(1100, 0)
    )
    assert pd.prefill_s == pytest.approx(expected)
    # every first prompt from scratch: 64 × (1,000·10 µs + 1e-9·1,000·500)
    burst = model._burst_s(workload(batch_size=64, unfinished=64, prompt_tokens=1000.0))
    assert burst == pytest.approx(64 * (1000 * 10e-6 + 1e-9 * 1000 * 500))


def test_without_a_fit_every_prediction_is_the_one_term_one() -> None:
    load = workload(turns=12, appended_tokens_per_turn=300.0, generated_tokens_per_turn=400.0, prompt_tokens=2000.0)
    flat = PrefillCost(per_token_s=HAND.params.devices[0].prefill_s_per_token, per_token_context_s=0.0)
    for capacity in (
        PoolCapacity(mode=Mode.COLOCATED, colocated=4),
        PoolCapacity(mode=Mode.DISAGGREGATED, prefill=1, decode=3),
    ):
        one_term = _model(ServingParams()).predict(load, capacity).total_s
        # β = 0 and α = t_p charges the same seconds as one rate per token (up to rounding)
        opted = ServingParams(prefill_cost=flat, prefill_cost_by_context=True)
        assert _model(opted).predict(load, capacity).total_s == pytest.approx(one_term)
        # and a context term makes recomputes and long appends dearer
        dearer = flat.model_copy(update={"per_token_context_s": 1e-9})
        assert (
            _model(ServingParams(prefill_cost=dearer, prefill_cost_by_context=True)).predict(load, capacity).total_s
            > one_term
        )
        # fitted but not opted in (the default): the one rate per token, whatever the fit says
        assert _model(ServingParams(prefill_cost=dearer)).predict(load, capacity).total_s == one_term
    assert PEARL_LIMIT.prefill_cost is None and ServingParams().prefill_cost is None
    assert math.isfinite(_model(PEARL_LIMIT).predict(load, PoolCapacity(mode=Mode.COLOCATED, colocated=4)).total_s)


def test_the_simulated_cluster_refits_the_two_term_cost_from_its_prefill_batches() -> None:
    from pearl_sched.control import Event, EventKind
    from pearl_sched.sim.baselines import FixedColocated
    from pearl_sched.sim.cluster import SimCluster
    from pearl_sched.sim.experiment import costs_for, setting_for
    from pearl_sched.state import Zone

    from .builders import DATA, tiny

    # e2e's own turns (tau-bench with Mooncake output lengths × 4): contexts of thousands of tokens
    scenario = tiny(trajectories="tau-bench+mooncake-outputs", output_scale=4.0)
    setting = setting_for(scenario, DATA)
    assert setting.serving_params().prefill_cost is None  # before any batch: one rate per token
    cluster = SimCluster(setting, costs=costs_for(scenario), dedicated_gpus=4, preemptible_gpus=0)
    target = FixedColocated("c", (Zone.DEDICATED,)).decide(Event(EventKind.STEP_BOUNDARY, 0), cluster.observe())
    assert target is not None
    cluster.apply(target)
    cluster.launch(0)
    assert not cluster.advance(math.inf)
    cluster.finish_batch()
    fitted = cluster.observed.prefill_cost()
    assert fitted is not None and fitted.per_token_context_s > 0  # the kernel tables' attention grows with context
    assert cluster.serving_params is not None and cluster.serving_params.prefill_cost == fitted
    # and the cost with a per-batch intercept, one term as the serving parameters charge prefills (t₀ + α·n)
    step = cluster.observed.prefill_step_cost(by_context=False)
    assert step is not None and step.per_batch_s > 0 and step.per_token_context_s == 0
    assert cluster.serving_params.prefill_step_cost == step
    assert cluster.pearl_params is not None  # PEARL's own t_p is refitted as before, from the same batches
    t_p = cluster.observed.prefill_nt / cluster.observed.prefill_nn
    assert cluster.pearl_params.devices[0].prefill_s_per_token == pytest.approx(t_p)
