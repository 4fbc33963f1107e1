"""Gates weighed over a GPU's expected residence (docs/policies.md, "Gate horizons").

A preemptible GPU, once prepared, serves every batch until it is preempted, so on short batches the gate must
count the batches after the one in flight; it must never admit a GPU the hazard says is gone before it is
ready, nor borrow a training GPU that goes back before it can serve; and when a batch is long compared with
preparation and residence it must decide exactly as PEARL's one-batch rule does.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl_sched import PolicyConfig, PolicyState, TransitionCosts, plan
from pearl_sched.policies import (
    borrow_end_cost_s,
    borrow_gate,
    borrow_value_s,
    expansion_can_pass,
    expansion_cost_share,
    expansion_gate,
    expansion_ready_s,
    expansion_value_s,
    observe_toggle,
    toggle_parts_s,
)
from pearl_sched.sim.availability import AvailabilityTrace
from pearl_sched.sim.experiment import fitted_hazard_per_s
from pearl_sched.sim.scenario import load_scenario
from tests.builders import DATA, MODEL, short_batch_state

COSTS = TransitionCosts()  # PEARL Table 3, Qwen3-8B: preparation 56.29 s, finalisation 11.05 s
RESIDENCE = PolicyConfig()
ONE_BATCH = PolicyConfig(gate_horizon="batch")
BAMBOO = PolicyState(preemption_hazard_per_s=167 / 983_220)  # the p3 trace: 167 preemptions over 983,220 node-s


def _expand(config: PolicyConfig, pstate: PolicyState, **kw: float) -> bool:
    args = {"makespan_without_s": 100.0, "makespan_with_s": 40.0, "unfinished_fraction": 1.0, **kw}
    return expansion_gate(state=pstate, costs=COSTS, config=config, **args).allow  # type: ignore[arg-type]


def test_short_batches_admit_a_preemptible_gpu_that_stays() -> None:
    # A 40 s batch is shorter than the 56.29 s preparation: the batch in flight gains nothing from the GPU,
    # but over its expected residence (98 min on Bamboo's p3 trace) it serves ~150 batches.
    assert not _expand(ONE_BATCH, BAMBOO)
    decision = expansion_gate(
        makespan_without_s=100.0,
        makespan_with_s=40.0,
        unfinished_fraction=1.0,
        state=BAMBOO,
        costs=COSTS,
        config=RESIDENCE,
    )
    assert decision.allow and decision.reason.startswith("expand: discounted gain")


def test_the_hazard_refuses_a_gpu_gone_before_it_is_ready() -> None:
    ready = expansion_ready_s(COSTS)
    assert ready == pytest.approx(56.29 + 11.05)
    doomed = PolicyState(preemption_hazard_per_s=1.0 / (0.9 * ready))  # expected residence 0.9 × ready
    # Even a huge gain on a long batch is refused: the GPU is expected to be gone before it serves.
    decision = expansion_gate(
        makespan_without_s=10_000.0,
        makespan_with_s=1_000.0,
        unfinished_fraction=1.0,
        state=doomed,
        costs=COSTS,
        config=RESIDENCE,
    )
    assert not decision.allow and "ends before ready" in decision.reason
    assert not expansion_can_pass(
        makespan_without_s=10_000.0,
        makespan_lower_bound_s=1.0,
        unfinished_fraction=1.0,
        state=doomed,
        costs=COSTS,
        config=RESIDENCE,
    )
    # Preparation already done brings readiness closer: the same hazard then allows it.
    assert _expand(RESIDENCE, doomed, prepared_s=COSTS.preparation_s, makespan_without_s=10_000.0)


def test_a_borrow_that_goes_back_before_it_serves_is_refused() -> None:
    config = RESIDENCE
    too_short = COSTS.activation_s + COSTS.deactivation_s + config.drain_margin_s
    args = {"makespan_dedicated_s": 500.0, "makespan_full_s": 100.0, "unfinished_fraction": 1.0}
    refused = borrow_gate(state=PolicyState(), costs=COSTS, config=config, idle_window_s=too_short, **args)
    assert not refused.allow and "before the GPUs can serve" in refused.reason
    allowed = borrow_gate(state=PolicyState(), costs=COSTS, config=config, idle_window_s=too_short + 10, **args)
    assert allowed.allow  # 400 s per 100 s batch, 10 s of serving: 40 s > 9.44 s


def test_borrowing_counts_the_batches_inside_the_idle_window() -> None:
    # A 30 s batch saving 10 s, inside a 300 s idle window: ~29 batches served, one toggle.
    args = {"makespan_dedicated_s": 40.0, "makespan_full_s": 30.0, "unfinished_fraction": 1.0}
    long_window = borrow_gate(state=PolicyState(), costs=COSTS, config=RESIDENCE, idle_window_s=300.0, **args)
    assert long_window.allow
    value = borrow_value_s(costs=COSTS, config=RESIDENCE, idle_window_s=300.0, **args)
    serving = 300.0 - COSTS.activation_s  # from the end of activation to the end of the window
    assert value == pytest.approx(10.0 * serving / 30.0)
    # Without a window (or under PEARL's rule) only the batch in flight counts: (R/B)·gain = 10 s > 9.44 s.
    assert borrow_value_s(costs=COSTS, config=ONE_BATCH, idle_window_s=300.0, **args) == pytest.approx(10.0)
    pearl = borrow_gate(state=PolicyState(), costs=COSTS, config=ONE_BATCH, idle_window_s=300.0, **args)
    assert pearl.allow and pearl.reason == "borrow: gain 10.0 s > toggle cost 9.4 s"  # Eq. 7, PEARL-faithful's


def test_a_loan_pays_its_toggle_once() -> None:
    # Activation is time the lent GPUs do not serve, already out of W − A; charging T̂_toggle on top counted it
    # twice. What is left is how the loan ends: the trainer waits D, or the GPUs leave D + m early.
    rate = (78.28 - 62.67) / 62.67  # seconds saved per second served
    args = {"makespan_dedicated_s": 78.28, "makespan_full_s": 62.67, "unfinished_fraction": 0.49}
    cost = borrow_end_cost_s(state=PolicyState(), costs=COSTS, config=RESIDENCE, **_without_rho(args))
    assert cost == pytest.approx(max(COSTS.deactivation_s, rate * (COSTS.deactivation_s + RESIDENCE.drain_margin_s)))
    # Short-batch segment 1, step 1 (docs/policies.md): a 38.9 s window is worth 0.249 × 32.6 = 8.1 s > 3.2 s.
    decision = borrow_gate(state=PolicyState(), costs=COSTS, config=RESIDENCE, idle_window_s=38.87, **args)
    assert decision.allow and "return cost 3.2 s" in decision.reason
    # When the saving per second is large, returning D + m early costs more than the trainer's wait.
    fast = {"makespan_dedicated_s": 300.0, "makespan_full_s": 100.0}
    assert borrow_end_cost_s(state=PolicyState(), costs=COSTS, config=RESIDENCE, **fast) == pytest.approx(
        2.0 * (COSTS.deactivation_s + RESIDENCE.drain_margin_s)
    )
    # A measured toggle moves activation and deactivation in proportion.
    slow = observe_toggle(PolicyState(), 2 * (COSTS.activation_s + COSTS.deactivation_s), RESIDENCE)
    assert toggle_parts_s(slow, COSTS) == pytest.approx((2 * COSTS.activation_s, 2 * COSTS.deactivation_s))
    assert borrow_value_s(costs=COSTS, config=RESIDENCE, idle_window_s=38.87, state=slow, **args) == pytest.approx(
        rate * (38.87 - 2 * COSTS.activation_s)
    )


def _without_rho(args: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in args.items() if k != "unfinished_fraction"}


@pytest.mark.parametrize("rho", [1.0, 0.6, 0.2])
@pytest.mark.parametrize("gain_s", [1.0, 50.0, 400.0, 5_000.0])
def test_long_batches_reduce_to_the_one_batch_rule(rho: float, gain_s: float) -> None:
    # A batch of 200,000 s: preparation is 0.03% of it and the expected residence (2,000 s) ends long before
    # the batch does, so the later batches add at most ΔT·e^(−h·ρ·T)/(h·T) ≤ ΔT·e^(−20)/100 seconds.
    hazard = PolicyState(preemption_hazard_per_s=1 / 2_000)
    with_s = 200_000.0
    args = {"makespan_without_s": with_s + gain_s, "makespan_with_s": with_s, "unfinished_fraction": rho}
    ours = expansion_value_s(state=hazard, costs=COSTS, config=RESIDENCE, **args)
    pearl = expansion_value_s(state=hazard, costs=COSTS, config=ONE_BATCH, **args)
    assert 0 <= ours - pearl <= gain_s * math.exp(-20) / 100 * (1 + 1e-9) < 1e-3  # vs an 11.05 s pause
    assert _expand(RESIDENCE, hazard, **args) == _expand(ONE_BATCH, hazard, **args)
    assert expansion_cost_share(with_s, rho, hazard, COSTS, RESIDENCE) == pytest.approx(1.0, abs=1e-3)
    # Borrowing: an idle window that is the rest of a long batch counts that batch, as Eq. 7 does.
    borrow = {"makespan_dedicated_s": with_s + gain_s, "makespan_full_s": with_s, "unfinished_fraction": rho}
    window = rho * with_s
    ours_b = borrow_value_s(costs=COSTS, config=RESIDENCE, idle_window_s=window, **borrow)
    pearl_b = borrow_value_s(costs=COSTS, config=RESIDENCE, idle_window_s=None, **borrow)
    assert ours_b == pytest.approx(pearl_b, rel=1e-3)


def test_one_batch_horizon_is_todays_rule() -> None:
    # PEARL-faithful runs with gate_horizon="batch": exactly (R/B)·ΔT·e^(−h·T)·max(0, 1 − P/T).
    pstate = PolicyState(preemption_hazard_per_s=1e-3)
    value = expansion_value_s(
        makespan_without_s=1200.0,
        makespan_with_s=900.0,
        unfinished_fraction=0.5,
        state=pstate,
        costs=COSTS,
        config=ONE_BATCH,
    )
    assert value == 0.5 * 300.0 * math.exp(-0.9) * (1 - 56.29 / 900.0)
    assert expansion_cost_share(900.0, 0.5, pstate, COSTS, ONE_BATCH) == 1.0


positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(
    without=positive,
    with_=positive,
    rho=st.floats(min_value=0.0, max_value=1.0),
    hazard=st.floats(min_value=0.0, max_value=1.0),
    preparation=st.floats(min_value=0.0, max_value=600.0),
    finalisation=st.floats(min_value=0.0, max_value=100.0),
    prepared=st.floats(min_value=0.0, max_value=600.0),
)
def test_never_admits_a_preemptible_gpu_gone_before_it_is_ready(
    without: float, with_: float, rho: float, hazard: float, preparation: float, finalisation: float, prepared: float
) -> None:
    costs = TransitionCosts(preparation_s=preparation, finalisation_s=finalisation)
    pstate = PolicyState(preemption_hazard_per_s=hazard)
    args = {"makespan_without_s": without, "makespan_with_s": with_, "unfinished_fraction": rho}
    decision = expansion_gate(state=pstate, costs=costs, config=RESIDENCE, prepared_s=prepared, **args)
    ready = max(0.0, preparation - prepared) + finalisation
    if hazard > 0 and 1.0 / hazard <= ready:
        assert not decision.allow
    if decision.allow:
        assert without > with_  # nothing is admitted that does not shorten the batch
    # Beyond that rule, the horizon only adds batches: whatever the one-batch gate admits, it admits.
    one_batch = expansion_gate(state=pstate, costs=costs, config=ONE_BATCH, prepared_s=prepared, **args)
    if one_batch.allow and not (hazard > 0 and 1.0 / hazard <= ready):
        assert decision.allow


@settings(max_examples=300, deadline=None)
@given(
    dedicated=positive,
    full=positive,
    rho=st.floats(min_value=0.0, max_value=1.0),
    window=st.floats(min_value=0.0, max_value=1e5),
    activation=st.floats(min_value=0.0, max_value=60.0),
    deactivation=st.floats(min_value=0.0, max_value=60.0),
    margin=st.floats(min_value=0.0, max_value=30.0),
)
def test_never_borrows_a_gpu_returned_before_it_can_serve(
    dedicated: float, full: float, rho: float, window: float, activation: float, deactivation: float, margin: float
) -> None:
    costs = TransitionCosts(activation_s=activation, deactivation_s=deactivation)
    config = PolicyConfig(drain_margin_s=margin)
    decision = borrow_gate(
        makespan_dedicated_s=dedicated,
        makespan_full_s=full,
        unfinished_fraction=rho,
        state=PolicyState(),
        costs=costs,
        config=config,
        idle_window_s=window,
    )
    if window <= activation + deactivation + margin:
        assert not decision.allow
    if decision.allow:
        assert dedicated > full


def test_plan_admits_preemptible_gpus_on_short_batches_only_with_the_horizon() -> None:
    # Two dedicated workers serve a short batch (256 trajectories of 5 turns of 60 tokens, 0.5 s tools: ~11 s);
    # two preemptible GPUs have just arrived. PEARL's one-batch gate leaves them idle; over Bamboo's expected
    # residence they pay off.
    cluster = short_batch_state()
    ours = plan(cluster, MODEL, policy=RESIDENCE, policy_state=BAMBOO, backend="enumeration")
    pearl = plan(cluster, MODEL, policy=ONE_BATCH, policy_state=BAMBOO, backend="enumeration")
    assert ours.makespan.total_s < COSTS.preparation_s  # the batch is shorter than one preparation
    assert ours.decision.expanded and ours.gpus_used == 4, ours.decision.reason
    assert not pearl.decision.expanded and pearl.gpus_used == 2, pearl.decision.reason


def test_hazard_is_departures_over_exposure() -> None:
    # 4 live for 10 s, 2 for 10 s, 3 for 10 s, 0 for 10 s: 2 + 3 departures over 90 unit-seconds.
    trace = AvailabilityTrace(np.array([0.0, 10.0, 20.0, 30.0]), np.array([4.0, 2.0, 3.0, 0.0]), 40.0)
    assert trace.preemption_hazard_per_s() == pytest.approx(5 / 90)
    assert AvailabilityTrace(np.zeros(1), np.array([3.0]), 100.0).preemption_hazard_per_s() == 0.0


@pytest.mark.needs_data
def test_the_simulated_pearl_sched_starts_from_bamboos_hazard() -> None:
    scenario = load_scenario("e2e")
    assert fitted_hazard_per_s(scenario, DATA) == pytest.approx(BAMBOO.preemption_hazard_per_s)
