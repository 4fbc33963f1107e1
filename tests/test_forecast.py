"""The short-horizon demand forecast: hand-checkable cases, its error against a replay, and plan() using it."""

from __future__ import annotations

import numpy as np
import pytest

from pearl_sched.profiles.forecast import DemandForecast, InFlight, Phase, forecast_demand, forecast_error
from pearl_sched.profiles.telemetry import TrajectoryStats

STATS = TrajectoryStats(
    turns_mean=4,
    turns_slowest=6,
    appended_tokens_per_turn=150,
    generated_tokens_per_turn=80,
    retained_tokens=2000,
    env_time_per_turn_s=10.0,
    env_time_std_s=3.0,
)


def test_one_trajectory_by_hand() -> None:
    # In the environment with 4 s left, then prefill (150 tokens at 1,500/s = 0.1 s), then decode 80 tokens at
    # 40/s = 2 s, then 10 s of environment: over 20 s one prefill starts inside the window, then a second at 16.1 s.
    inflight = InFlight.of([Phase.ENVIRONMENT], [1], [4.0])
    f = forecast_demand(inflight, STATS, horizon_s=20.0, decode_tokens_per_s=40.0, prefill_tokens_per_s=1500.0)
    assert f.prefill_tokens == 2 * 150
    assert f.mean_decoding == pytest.approx((2.0 + 2.0) / 20.0)  # decoding 4.1–6.1 s and 16.2–18.2 s
    assert f.finishing == 0


def test_finishing_trajectories_stop_demanding() -> None:
    inflight = InFlight.of([Phase.DECODING, Phase.DONE], [3, 4], [40.0, 0.0])
    f = forecast_demand(inflight, STATS, horizon_s=60.0, decode_tokens_per_s=40.0, prefill_tokens_per_s=1500.0)
    assert f.finishing == 1 and f.prefill_tokens == 0
    assert f.mean_decoding == pytest.approx(1.0 / 60.0)


def test_forecast_error_against_a_replay_with_real_environment_times() -> None:
    rng = np.random.default_rng(0)
    n = 1024
    inflight = InFlight.of(
        rng.choice([Phase.DECODING, Phase.ENVIRONMENT, Phase.WAITING_PREFILL], n),
        rng.integers(0, 3, n),
        rng.uniform(0, 10, n),
    )
    kwargs = dict(horizon_s=60.0, decode_tokens_per_s=40.0, prefill_tokens_per_s=1500.0)
    forecast = forecast_demand(inflight, STATS, **kwargs)  # type: ignore[arg-type]
    replay = forecast_demand(inflight, STATS, env_time_s=np.maximum(rng.normal(10.0, 3.0, n), 0), **kwargs)  # type: ignore[arg-type]
    errors = forecast_error(forecast, replay)
    assert errors["prefill_tokens"] < 0.10 and errors["mean_decoding"] < 0.10


def test_plan_uses_the_forecast_prefill_demand() -> None:
    from .builders import MODEL, Slot, state, workload

    f = DemandForecast(horizon_s=30.0, prefill_tokens=3.0e6, mean_decoding=500.0, finishing=0)
    load = f.apply(workload())
    assert load.min_prefill_tokens_per_s == pytest.approx(1e5)
    from pearl_sched import plan

    result = plan(state([Slot()] * 8, load=load), MODEL)
    # One H200 prefills ~45,500 tokens/s in this model: sustaining 100,000/s takes at least 3 prefill workers.
    assert (result.prefill_workers if result.mode.value == "disaggregated" else result.colocated_workers) >= 3


def test_bad_in_flight_state_is_rejected() -> None:
    with pytest.raises(ValueError, match="one entry per trajectory"):
        InFlight.of([0, 1], [0], [1.0, 2.0])
    with pytest.raises(ValueError, match="phase must be"):
        InFlight.of([7], [0], [1.0])
    with pytest.raises(ValueError, match="finite and non-negative"):
        InFlight.of([0], [0], [float("nan")])
