"""Online refit of trajectory statistics: EWMA arithmetic, and bad telemetry never corrupting the estimate."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl_sched.profiles.telemetry import TrajectoryStats, refit, refit_steps, step_statistics


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
