"""Online refit of trajectory statistics and of the improved predictor's serving parameters from SGLang's /metrics:
EWMA arithmetic, SGLang's metric names, and bad telemetry never corrupting the estimate."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl_sched.makespan_improved import ServingParams
from pearl_sched.profiles.telemetry import (
    TrajectoryStats,
    observe_serving,
    refit,
    refit_serving,
    refit_steps,
    step_statistics,
)
from pearl_sched.state import Mode


def _step(
    trajectories: int, turns: int, appended: float, generated: float, env: float, step: int = 0
) -> dict[str, np.ndarray]:
    rows = trajectories * turns
    turn = np.tile(np.arange(turns), trajectories)
    return {
        "step": np.full(rows, step),
        "trajectory": np.repeat(np.arange(trajectories) + 1000 * step, turns),
        "turn": turn,
        "appended_tokens": np.where(turn == 0, 1000.0, appended),
        "generated_tokens": np.full(rows, generated),
        "retained_tokens": 1000.0 + (turn + 1) * (appended + generated),
        "env_time_s": np.full(rows, env),
    }


def test_step_statistics_of_a_uniform_step() -> None:
    stats = step_statistics(_step(8, 5, appended=150.0, generated=80.0, env=10.0), decoding_fraction=0.8)
    assert stats.turns_mean == stats.turns_slowest == 5
    assert stats.appended_tokens_per_turn == 150.0  # the first turn's prompt is not an append
    assert stats.generated_tokens_per_turn == 80.0
    assert stats.retained_tokens == 1000 + 5 * 230
    assert stats.bubble_ratio == pytest.approx(0.25)
    load = stats.workload(batch_size=64, unfinished=32, kv_bytes_per_token=131072)
    assert load.turns == 5 and load.env_time_s == 50.0


def test_ewma_refit_moves_a_third_of_the_way() -> None:
    first = refit(None, _step(4, 4, 100.0, 50.0, 10.0)).stats
    second = refit(first, _step(4, 4, 200.0, 50.0, 20.0, step=1), alpha=1 / 3).stats
    assert second is not None and second.steps == 2
    assert second.appended_tokens_per_turn == pytest.approx(100 + (200 - 100) / 3)
    assert second.env_time_per_turn_s == pytest.approx(10 + 10 / 3)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda t: t["env_time_s"].__setitem__(3, math.nan), "non-finite value(s) in 'env_time_s'"),
        (lambda t: t["generated_tokens"].__setitem__(0, -4.0), "negative value(s) in 'generated_tokens'"),
        (lambda t: t.pop("turn"), "lacks the column 'turn'"),
        (lambda t: t["turn"].__setitem__(1, 0), "same turn twice"),
    ],
)
def test_bad_telemetry_is_rejected_and_keeps_the_estimate(damage: object, reason: str) -> None:
    good = refit(None, _step(4, 4, 100.0, 50.0, 10.0)).stats
    bad = _step(4, 4, 900.0, 50.0, 99.0, step=1)
    bad = {k: v.astype(float) for k, v in bad.items()}
    damage(bad)  # type: ignore[operator]
    result = refit(good, bad)
    assert not result.accepted and reason in result.reason
    assert result.stats == good


def test_decoding_fraction_outside_unit_interval_is_rejected() -> None:
    result = refit(None, _step(2, 2, 10.0, 10.0, 1.0), decoding_fraction=1.5)
    assert not result.accepted and "outside (0, 1]" in result.reason and result.stats is None


def test_refit_over_steps_reports_rejections() -> None:
    parts = [_step(4, 3, 100.0, 50.0, 10.0, step=s) for s in range(3)]
    parts[1]["env_time_s"] = np.full_like(parts[1]["env_time_s"], -1.0)
    table = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    stats, rejected = refit_steps(table)
    assert stats is not None and stats.steps == 2
    assert rejected == [(1, "12 negative value(s) in 'env_time_s'")]


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "step",
                "trajectory",
                "turn",
                "appended_tokens",
                "generated_tokens",
                "retained_tokens",
                "env_time_s",
                "junk",
            ]
        ),
        st.lists(st.one_of(st.floats(), st.integers(-5, 5)), max_size=6),
    )
)
def test_garbage_telemetry_never_raises_and_never_corrupts(table: dict[str, list[float]]) -> None:
    good = TrajectoryStats(
        turns_mean=3,
        turns_slowest=4,
        appended_tokens_per_turn=10,
        generated_tokens_per_turn=5,
        retained_tokens=100,
        env_time_per_turn_s=1,
        env_time_std_s=0,
    )
    result = refit(good, table)
    if not result.accepted:
        assert result.stats == good and result.reason
    else:
        assert result.stats is not None and result.stats.steps == 2


# -- SGLang's /metrics series → the improved predictor's serving parameters -----------------------------------------
def _scrape(prompt: float, cached: float, retracted: float, **gauges: float) -> dict[str, float]:
    return {
        "sglang:prompt_tokens_total": prompt,
        "sglang:cached_tokens_total": cached,
        "sglang:num_retracted_requests_total": retracted,
        **{f"sglang:{name}": value for name, value in gauges.items()},
    }


def test_a_batch_observation_is_the_counters_increase_under_sglang_names() -> None:
    before = _scrape(1_000.0, 200.0, 3.0)
    after = _scrape(11_000.0, 6_200.0, 23.0)
    seen = observe_serving(before, after, turns=400, colocated_workers=4)
    assert seen.cache_hit_rate == pytest.approx(6_000 / 10_000)
    assert seen.retractions_per_turn == pytest.approx(20 / 400)
    assert seen.colocated_workers == 4


def test_sglang_0_5_2_names_and_the_gauge_fallback() -> None:
    """0.5.2 counts retractions in ``total_retracted_reqs``; without the token counters the hit-rate gauge (summed
    over the workers) is averaged."""
    before = {"sglang:total_retracted_reqs": 5.0}
    after = {"sglang:total_retracted_reqs": 9.0, "sglang:cache_hit_rate": 1.2}
    seen = observe_serving(before, after, turns=8, prefill_workers=2, decode_workers=2)
    assert seen.retractions_per_turn == pytest.approx(0.5)
    assert seen.cache_hit_rate == pytest.approx(0.6)


@pytest.mark.parametrize(
    "after",
    [
        {},  # nothing reported
        _scrape(math.nan, math.nan, math.nan),  # NaN series
        _scrape(500.0, 100.0, 1.0),  # counters went down: a worker restarted
        _scrape(-1.0, -1.0, -1.0),  # impossible values
    ],
)
def test_absent_nan_or_reset_series_are_not_measured_and_the_structural_estimate_stays(after: dict[str, float]) -> None:
    seen = observe_serving(_scrape(1_000.0, 200.0, 3.0), after, turns=100, colocated_workers=4)
    assert seen.cache_hit_rate is None and seen.retractions_per_turn is None
    current = ServingParams(kv_pool_tokens=123_456.0)
    refitted = refit_serving(current, Mode.COLOCATED, seen, after, workers=4)
    assert refitted.kv_pool_tokens == 123_456.0
    assert refitted.colocated is not None and refitted.colocated.cache_hit_rate is None
    # ... and the model built on it predicts exactly what the structural one does.
    from pearl_sched import PoolCapacity
    from pearl_sched.makespan_improved import ImprovedMakespanModel, ImprovedParams

    from .builders import HAND, workload

    load = workload(kv_bytes_per_token=1000.0, prompt_tokens=1000.0)
    capacity = PoolCapacity(mode=Mode.COLOCATED, colocated=4)
    plain = ImprovedMakespanModel(ImprovedParams(pearl=HAND.params, serving=current))
    fitted = ImprovedMakespanModel(ImprovedParams(pearl=HAND.params, serving=refitted))
    assert fitted.predict(load, capacity) == plain.predict(load, capacity)


def test_refit_blends_the_same_configuration_and_replaces_another() -> None:
    current = ServingParams()
    first = observe_serving(_scrape(0, 0, 0), _scrape(1000, 500, 0), turns=10, colocated_workers=4)
    second = observe_serving(_scrape(0, 0, 0), _scrape(1000, 900, 0), turns=10, colocated_workers=4)
    other = observe_serving(_scrape(0, 0, 0), _scrape(1000, 100, 0), turns=10, colocated_workers=8)
    after_first = refit_serving(current, Mode.COLOCATED, first, {}, workers=4, alpha=0.25)
    after_second = refit_serving(after_first, Mode.COLOCATED, second, {}, workers=4, alpha=0.25)
    assert after_second.colocated is not None
    assert after_second.colocated.cache_hit_rate == pytest.approx(0.75 * 0.5 + 0.25 * 0.9)
    moved = refit_serving(after_second, Mode.COLOCATED, other, {}, workers=8, alpha=0.25)
    assert moved.colocated is not None and moved.colocated.cache_hit_rate == pytest.approx(0.1)
    assert moved.colocated.colocated_workers == 8
    assert moved.disaggregated is None  # the other mode is untouched


def test_refit_reads_the_kv_pool_and_the_pd_link_speed() -> None:
    seen = observe_serving({}, {}, turns=1, prefill_workers=2, decode_workers=6)
    gauges = {"sglang:max_total_num_tokens": 8 * 1_700_000.0, "sglang:kv_transfer_speed_gb_s": 2 * 45.0}
    refitted = refit_serving(ServingParams(), Mode.DISAGGREGATED, seen, gauges, workers=8)
    assert refitted.kv_pool_tokens == pytest.approx(1_700_000.0)
    assert refitted.kv_transfer_bytes_per_s == pytest.approx(45e9)
    with pytest.raises(ValueError, match="alpha"):
        refit_serving(ServingParams(), Mode.DISAGGREGATED, seen, gauges, workers=8, alpha=0.0)


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "sglang:prompt_tokens_total",
                "sglang:cached_tokens_total",
                "sglang:num_retracted_requests_total",
                "sglang:total_retracted_reqs",
                "sglang:cache_hit_rate",
                "sglang:max_total_num_tokens",
                "sglang:kv_transfer_speed_gb_s",
                "junk",
            ]
        ),
        st.one_of(st.floats(), st.integers(-5, 10**9)),
    ),
    st.dictionaries(st.just("sglang:prompt_tokens_total"), st.floats()),
)
def test_garbage_metrics_never_raise(after: dict[str, float], before: dict[str, float]) -> None:
    seen = observe_serving(before, after, turns=10, colocated_workers=2)
    assert seen.cache_hit_rate is None or 0.0 <= seen.cache_hit_rate <= 1.0
    refit_serving(ServingParams(), Mode.COLOCATED, seen, after, workers=2)


@pytest.mark.needs_data
def test_the_simulated_cluster_reports_sglang_series_and_the_improved_planner_is_refitted_from_them() -> None:
    from pearl_sched.control import Event, EventKind, PlannerDecider
    from pearl_sched.makespan_improved import ImprovedMakespanModel
    from pearl_sched.sim.baselines import FixedColocated
    from pearl_sched.sim.cluster import SimCluster, _refresh_model
    from pearl_sched.sim.experiment import costs_for, setting_for
    from pearl_sched.state import Zone

    from .builders import DATA, tiny

    scenario = tiny()
    setting = setting_for(scenario, DATA)
    cluster = SimCluster(setting, costs=costs_for(scenario), dedicated_gpus=4, preemptible_gpus=0)
    assert cluster.serving_params is None and cluster.telemetry() == {}
    target = FixedColocated("c", (Zone.DEDICATED,)).decide(Event(EventKind.STEP_BOUNDARY, 0), cluster.observe())
    assert target is not None
    cluster.apply(target)
    cluster.launch(0)
    assert not cluster.advance(math.inf)
    result, _, _ = cluster.finish_batch()
    series = cluster.telemetry()
    assert series["sglang:prompt_tokens_total"] == result.prefill_tokens + result.cache_hit_tokens
    assert series["sglang:cached_tokens_total"] == result.cache_hit_tokens
    assert series["sglang:num_retracted_requests_total"] == result.retractions
    workers = 4 // scenario.tp
    assert series["sglang:max_total_num_tokens"] == setting.kv_pool_tokens * workers
    assert cluster.serving_params is not None and cluster.serving_params.colocated is not None
    assert cluster.serving_params.colocated.cache_hit_rate == pytest.approx(
        result.cache_hit_tokens / (result.prefill_tokens + result.cache_hit_tokens)
    )
    assert cluster.serving_params.kv_pool_tokens == setting.kv_pool_tokens
    decider = PlannerDecider("pearl_sched", setting.predictor("improved"), costs=costs_for(scenario))
    _refresh_model(decider, cluster.pearl_params, cluster.serving_params)
    assert isinstance(decider.model, ImprovedMakespanModel)
    assert decider.model.params.serving is cluster.serving_params
