"""The improved predictor's live share from the batch's turn counts (``ServingParams.live_share="turn_counts"``).

What is checked: the phases' live shares follow the survival of a batch's logged turn counts and add up to its
turns; a batch whose trajectories all take S turns predicts as the linear share does; the option changes nothing
where it is off or where the workload logs no counts; the counts reach the workload from the simulator's batches and
from step telemetry, and bad counts are refused.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from pydantic import ValidationError

from pearl_sched import Mode, PoolCapacity
from pearl_sched.makespan_improved import PHASES, ImprovedMakespanModel, ImprovedParams, ServingParams, live_shares
from pearl_sched.profiles.telemetry import refit, step_statistics
from pearl_sched.state import turn_quantiles

from .builders import HAND, kv_bound_workload

CAPACITIES = (
    PoolCapacity(mode=Mode.COLOCATED, colocated=8),
    PoolCapacity(mode=Mode.DISAGGREGATED, prefill=2, decode=6),
)


def _model(live_share: str) -> ImprovedMakespanModel:
    return ImprovedMakespanModel(ImprovedParams(pearl=HAND.params, serving=ServingParams(live_share=live_share)))


def _exact_shares(counts: np.ndarray, span: float) -> list[float]:
    """Each phase's mean share of trajectories still live, turn index by turn index, from the counts themselves."""
    width = span / PHASES
    ks = np.arange(np.ceil(span))
    live = np.array([(counts > k).mean() for k in ks])
    return [
        float(np.dot(np.clip(np.minimum(ks + 1, (j + 1) * width) - np.maximum(ks, j * width), 0, None), live)) / width
        for j in range(PHASES)
    ]


@pytest.mark.parametrize(("low", "high", "seed"), [(5, 60, 0), (1, 30, 1), (20, 153, 2)])
def test_shares_follow_the_survival_of_the_logged_turn_counts(low: int, high: int, seed: int) -> None:
    counts = np.random.default_rng(seed).integers(low, high, size=1024)
    span = float(counts.max())
    shares = live_shares(turn_quantiles(counts.tolist()), span)
    assert shares == pytest.approx(_exact_shares(counts, span), abs=0.015)
    assert all(1.0 >= a >= b >= 0.0 for a, b in itertools.pairwise(shares))
    # The phases' turns add up to the batch's: span/6 × Σ shares is the mean trajectory's turns.
    assert sum(shares) * span / PHASES == pytest.approx(counts.mean(), rel=0.01)


def test_turn_quantiles_are_numpys_linear_quantiles() -> None:
    turns = [3, 5, 1, 9, 12, 7, 7, 2]
    assert turn_quantiles(turns) == pytest.approx(np.quantile(turns, np.linspace(0, 1, 21)).tolist(), rel=1e-12)
    assert turn_quantiles([4]) == (4.0,) * 21
    with pytest.raises(ValueError, match="no trajectories"):
        turn_quantiles([])


def test_a_batch_of_equal_trajectories_predicts_as_the_linear_share() -> None:
    """All 20 turns long: every phase is fully live either way, and the predictions agree."""
    load = kv_bound_workload(mean_context_tokens=1000.0 + 10 * 500.0, turn_quantiles=(20.0,) * 21)
    assert live_shares(load.turn_quantiles, 20.0) == pytest.approx((1.0,) * PHASES, rel=1e-12)
    for capacity in CAPACITIES:
        linear = _model("linear").predict(load, capacity).total_s
        assert _model("turn_counts").predict(load, capacity).total_s == pytest.approx(linear, rel=1e-9)


def test_off_or_without_counts_nothing_changes() -> None:
    logged = kv_bound_workload(turn_quantiles=tuple(float(t) for t in np.linspace(5, 40, 21)))
    plain = kv_bound_workload()
    for capacity in CAPACITIES:
        before = _model("linear").predict(plain, capacity).total_s
        assert _model("linear").predict(logged, capacity).total_s == before
        assert _model("turn_counts").predict(plain, capacity).total_s == before


def test_the_batch_spans_its_longest_trajectory_and_thins_out() -> None:
    """With counts from 5 to 40 turns (S = 20 as the p90 stand-in), the phases span 40 turns, hold fewer
    trajectories late than early, and the slowest trajectory's path is longer than the linear share's."""
    load = kv_bound_workload(env_time_per_turn_s=30.0, turn_quantiles=tuple(float(t) for t in np.linspace(5, 40, 21)))
    linear, counted = _model("linear"), _model("turn_counts")
    phases = counted.phases(load)
    assert phases[0].trajectories > phases[-1].trajectories
    assert phases[-1].context > linear.phases(load)[-1].context  # turn 37's prefix, not turn 18's
    turns = sum(ph.trajectories for ph in phases) * 40.0 / PHASES
    assert turns == pytest.approx(load.batch_size * 22.5, rel=0.02)  # the mean of 5 … 40 turns
    few = PoolCapacity(mode=Mode.COLOCATED, colocated=64)  # many workers: the critical path binds
    assert counted.predict(load, few).total_s > linear.predict(load, few).total_s


@pytest.mark.parametrize(
    ("counts", "match"),
    [((10.0,), "at least two values"), ((5.0, 9.0, 7.0), "must not decrease"), ((0.0, 3.0), "greater than 0")],
)
def test_bad_turn_counts_are_refused(counts: tuple[float, ...], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        kv_bound_workload(turn_quantiles=counts)


def test_step_telemetry_logs_the_turn_counts_and_refits_blend_them() -> None:
    """Trajectory 0 takes 3 turns and trajectory 1 one, then 5 and 1: the quantiles run 1 … 3, then 1 … 5."""

    def step(turns: list[int]) -> dict[str, list[float]]:
        rows = [(t, k) for t, n in enumerate(turns) for k in range(n)]
        return {
            "trajectory": [t for t, _ in rows],
            "turn": [k for _, k in rows],
            "appended_tokens": [100.0] * len(rows),
            "generated_tokens": [50.0] * len(rows),
            "retained_tokens": [1000.0] * len(rows),
            "env_time_s": [1.0] * len(rows),
        }

    first = step_statistics(step([3, 1]))
    assert first.turn_quantiles == pytest.approx(turn_quantiles([3, 1]))
    assert first.workload(batch_size=2, unfinished=2, kv_bytes_per_token=1.0).turn_quantiles == first.turn_quantiles
    blended = refit(first, step([5, 1]), alpha=0.5).stats
    assert blended is not None
    assert blended.turn_quantiles[0] == pytest.approx(1.0)
    assert blended.turn_quantiles[-1] == pytest.approx(4.0)  # (3 + 5) / 2


@pytest.mark.needs_data
def test_the_simulated_orchestrator_logs_its_batchs_turn_counts() -> None:
    """The planners' workload carries the step-0 batch's turns every 5%: the last is its longest trajectory's."""
    from pearl_sched.sim.experiment import setting_for
    from pearl_sched.sim.scenario import load_scenario

    from .builders import DATA

    setting = setting_for(load_scenario("e2e"), DATA)
    counts = [len(t.turns) for t in setting.batch(0)]
    load = setting.workload()
    assert load.turn_quantiles == pytest.approx(np.quantile(counts, np.linspace(0, 1, 21)).tolist(), rel=1e-12)
    assert load.turn_quantiles[-1] == max(counts) and load.turn_quantiles[18] == pytest.approx(load.turns)
