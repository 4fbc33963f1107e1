"""The policies are pure functions: same inputs, same decision; their thresholds bite where they should."""

from __future__ import annotations

import math

import pytest

from pearl_sched import PolicyConfig, PolicyState, TransitionCosts
from pearl_sched.policies import (
    borrow_gate,
    expansion_gate,
    hysteresis,
    idle_window_allows_borrow,
    must_return,
    observe_preemptions,
    observe_toggle,
    toggle_cost_s,
)

COSTS = TransitionCosts()
CONFIG = PolicyConfig()


def test_hysteresis_uses_the_larger_threshold_for_mode_switches() -> None:
    # 8% faster, 0.5 of the batch left: 0.5·(1000 − 920) = 40 s of gain.
    ratio = hysteresis(
        makespan_keep_s=1000, makespan_new_s=920, unfinished_fraction=0.5, mode_switch=False, config=CONFIG
    )
    mode = hysteresis(
        makespan_keep_s=1000, makespan_new_s=920, unfinished_fraction=0.5, mode_switch=True, config=CONFIG
    )
    assert ratio.allow and "ratio-change: gain 8.0%" in ratio.reason
    assert not mode.allow and mode.reason == "kept: gain 8.0% below 10% mode-switch threshold"


def test_hysteresis_needs_the_absolute_gain_too() -> None:
    d = hysteresis(makespan_keep_s=100, makespan_new_s=80, unfinished_fraction=0.5, mode_switch=False, config=CONFIG)
    assert not d.allow and d.reason == "kept: gain 10.0 s below the 15 s minimum"


def test_borrow_gate_is_pearl_eq7() -> None:
    state = PolicyState()
    assert toggle_cost_s(state, COSTS) == pytest.approx(6.26 + 3.18)
    yes = borrow_gate(makespan_dedicated_s=500, makespan_full_s=480, unfinished_fraction=0.5, state=state, costs=COSTS)
    no = borrow_gate(makespan_dedicated_s=500, makespan_full_s=490, unfinished_fraction=0.5, state=state, costs=COSTS)
    assert yes.allow and not no.allow  # 10 s > 9.44 s; 5 s < 9.44 s


def test_measured_toggles_move_the_borrow_threshold() -> None:
    state = observe_toggle(PolicyState(), 20.0, CONFIG)
    assert state.toggle_cost_s == 20.0
    state = observe_toggle(state, 10.0, CONFIG)
    assert state.toggle_cost_s == pytest.approx(0.7 * 20 + 0.3 * 10)
    with pytest.raises(ValueError, match="finite non-negative"):
        observe_toggle(state, math.nan, CONFIG)


def test_return_and_idle_window_rules() -> None:
    assert must_return(8.0, COSTS, CONFIG) and not must_return(9.0, COSTS, CONFIG)
    assert not idle_window_allows_borrow(14.0, COSTS, CONFIG)
    assert idle_window_allows_borrow(15.0, COSTS, CONFIG)


def test_expansion_gate_discounts_by_preemption_hazard() -> None:
    calm = PolicyState()
    risky = observe_preemptions(calm, preemptions=30, gpu_seconds=1000.0, config=CONFIG)
    assert risky.preemption_hazard_per_s == pytest.approx(0.3 * 0.03)  # survival over 900 s: e^-8.1
    args = dict(makespan_without_s=1200.0, makespan_with_s=900.0, unfinished_fraction=1.0, costs=COSTS)
    assert expansion_gate(state=calm, **args).allow  # type: ignore[arg-type]
    assert not expansion_gate(state=risky, **args).allow  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        observe_preemptions(calm, preemptions=1, gpu_seconds=0.0, config=CONFIG)


def test_one_batch_expansion_gate_rejects_gains_eaten_by_preparation() -> None:
    # PEARL's rule: the new GPUs spend 56.29 s preparing, so on a 60 s batch almost nothing is left for them.
    # (Over their residence they would serve later batches too: tests/test_gate_horizon.py.)
    d = expansion_gate(
        makespan_without_s=100.0,
        makespan_with_s=60.0,
        unfinished_fraction=1.0,
        state=PolicyState(),
        costs=COSTS,
        config=PolicyConfig(gate_horizon="batch"),
    )
    assert not d.allow


def test_pearl_table3_costs_for_the_30b_model() -> None:
    c = TransitionCosts.pearl_table3("qwen3-30b-a3b")
    assert (c.preparation_s, c.finalisation_s, c.activation_s, c.deactivation_s) == (67.06, 17.89, 6.09, 4.38)
    assert c.restart_s == pytest.approx(67.06 + 17.89)
