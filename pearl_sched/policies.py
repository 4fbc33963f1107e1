"""Switching, borrowing and expansion policies (docs/policies.md).

Each policy is a pure function of its inputs and the previous :class:`~pearl_sched.plans.PolicyState`;
nothing here reads a clock or keeps globals, so decisions replay exactly in the simulator and in tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.plans import PolicyState


@dataclass(frozen=True)
class GateDecision:
    """A yes/no with the sentence that explains it."""

    allow: bool
    reason: str


def hysteresis(
    *,
    makespan_keep_s: float,
    makespan_new_s: float,
    unfinished_fraction: float,
    mode_switch: bool,
    config: PolicyConfig,
) -> GateDecision:
    """Accept a change of ratio or mode only when its predicted gain beats the matching threshold.

    The gain is ``(R/B)·(T_keep − T_new)`` seconds and ``(T_keep − T_new)/T_keep`` relative; a mode switch (a
    restart) needs ``mode_switch_threshold``, a ratio change (a role flip) ``ratio_change_threshold``, both
    need ``min_gain_s``. Forced changes never reach this gate.
    """
    gain_s = unfinished_fraction * (makespan_keep_s - makespan_new_s)
    relative = (makespan_keep_s - makespan_new_s) / makespan_keep_s if makespan_keep_s > 0 else 0.0
    threshold = config.mode_switch_threshold if mode_switch else config.ratio_change_threshold
    what = "mode-switch" if mode_switch else "ratio-change"
    if relative < threshold:
        return GateDecision(False, f"kept: gain {relative:.1%} below {threshold:.0%} {what} threshold")
    if gain_s < config.min_gain_s:
        return GateDecision(False, f"kept: gain {gain_s:.1f} s below the {config.min_gain_s:g} s minimum")
    return GateDecision(True, f"{what}: gain {relative:.1%} ({gain_s:.1f} s) beats {threshold:.0%}")


def toggle_cost_s(state: PolicyState, costs: TransitionCosts) -> float:
    """T̂_toggle: the EWMA of measured borrow toggles, or activation + deactivation before any measurement."""
    if state.toggle_cost_s is not None:
        return state.toggle_cost_s
    return costs.activation_s + costs.deactivation_s


def must_return(reclaim_in_s: float, costs: TransitionCosts, config: PolicyConfig) -> bool:
    """Whether a borrowed GPU must start going back now so training is never delayed (early drain)."""
    return reclaim_in_s <= costs.deactivation_s + config.drain_margin_s


def idle_window_allows_borrow(reclaim_in_s: float, costs: TransitionCosts, config: PolicyConfig) -> bool:
    """The idle window must cover activation, deactivation and the drain margin, or lending loses time."""
    return reclaim_in_s > costs.activation_s + costs.deactivation_s + config.drain_margin_s


def toggle_parts_s(state: PolicyState, costs: TransitionCosts) -> tuple[float, float]:
    """(activation, deactivation) seconds: ``T̂_toggle`` split in the ratio of ``costs``' activation and deactivation.

    Before any measurement this is ``(costs.activation_s, costs.deactivation_s)``; afterwards the measured
    toggle moves both in proportion (a toggle is measured whole, as activation plus deactivation).
    """
    toggle = toggle_cost_s(state, costs)
    table = costs.activation_s + costs.deactivation_s
    if table <= 0:
        return toggle, 0.0
    return toggle * costs.activation_s / table, toggle * costs.deactivation_s / table


def borrow_end_cost_s(
    *,
    makespan_dedicated_s: float,
    makespan_full_s: float,
    state: PolicyState,
    costs: TransitionCosts,
    config: PolicyConfig,
) -> float:
    """What ending a loan costs under ``gate_horizon="residence"``, the quantity :func:`borrow_gate` weighs V against.

    Either the trainer waits deactivation D for GPUs returned when its idle window ends (the batch's end with
    staleness 1, as in the simulator), or the loop returns them D + m early (:func:`must_return`) and they do
    not serve those seconds, ``(T̂_dedicated − T̂_full)/T̂_full`` each; the costlier of the two
    (docs/policies.md, "Gate horizons").
    """
    _, deactivation = toggle_parts_s(state, costs)
    rate = (makespan_dedicated_s - makespan_full_s) / makespan_full_s if makespan_full_s > 0 else 0.0
    return max(deactivation, rate * (deactivation + config.drain_margin_s))


def borrow_value_s(
    *,
    makespan_dedicated_s: float,
    makespan_full_s: float,
    unfinished_fraction: float,
    costs: TransitionCosts,
    config: PolicyConfig,
    idle_window_s: float | None = None,
    state: PolicyState | None = None,
) -> float:
    """Seconds of rollout a loan saves, the quantity :func:`borrow_gate` weighs against a cost.

    PEARL's rule (``gate_horizon="batch"``, or no idle window known) counts the batch in flight:
    ``(R/B)·(T̂_dedicated − T̂_full)``, weighed against ``T̂_toggle``. Over the residence, the lent GPUs save
    ``T̂_dedicated − T̂_full`` per batch of ``T̂_full`` seconds they serve, and they serve from the end of
    activation A to the end of the idle window W: ``(T̂_dedicated − T̂_full)·(W − A)/T̂_full``, weighed against
    :func:`borrow_end_cost_s` (docs/policies.md). A is ``T̂_toggle``'s activation part (:func:`toggle_parts_s`).
    """
    if config.gate_horizon == "batch" or idle_window_s is None:
        return unfinished_fraction * (makespan_dedicated_s - makespan_full_s)
    if makespan_full_s <= 0:
        return 0.0
    activation, _ = toggle_parts_s(state or PolicyState(), costs)
    serving = max(0.0, idle_window_s - activation)
    return (makespan_dedicated_s - makespan_full_s) * serving / makespan_full_s


def _borrow_threshold_s(
    makespan_dedicated_s: float,
    makespan_full_s: float,
    state: PolicyState,
    costs: TransitionCosts,
    config: PolicyConfig,
    idle_window_s: float | None,
) -> tuple[float, str]:
    """What the loan's value must beat, and its name: ``T̂_toggle`` (Eq. 7) or the end cost (residence)."""
    if config.gate_horizon == "batch" or idle_window_s is None:
        return toggle_cost_s(state, costs), "toggle cost"
    cost = borrow_end_cost_s(
        makespan_dedicated_s=makespan_dedicated_s,
        makespan_full_s=makespan_full_s,
        state=state,
        costs=costs,
        config=config,
    )
    return cost, "return cost"


def borrow_gate(
    *,
    makespan_dedicated_s: float,
    makespan_full_s: float,
    unfinished_fraction: float,
    state: PolicyState,
    costs: TransitionCosts,
    config: PolicyConfig | None = None,
    idle_window_s: float | None = None,
) -> GateDecision:
    """Lend training GPUs only if the rollout seconds they save beat what the loan costs (PEARL Eq. 7).

    With ``config.gate_horizon == "batch"`` (or no ``idle_window_s``) this is Eq. 7 as the paper writes it,
    ``(R/B)·(T̂_dedicated − T̂_full) > T̂_toggle``. Otherwise the saving is counted over the trainer's idle
    window, from the end of activation on (:func:`borrow_value_s`), and weighed against what ending the loan
    costs (:func:`borrow_end_cost_s`): activation is already left out of the serving seconds, so it is not
    charged twice. A window too short to serve in before an early return is refused.
    """
    config = config or PolicyConfig()
    if config.gate_horizon == "residence" and idle_window_s is not None:
        activation, deactivation = toggle_parts_s(state, costs)
        if idle_window_s - activation - deactivation - config.drain_margin_s <= 0:
            return GateDecision(False, f"no borrow: idle window {idle_window_s:.1f} s ends before the GPUs can serve")
    gain = borrow_value_s(
        makespan_dedicated_s=makespan_dedicated_s,
        makespan_full_s=makespan_full_s,
        unfinished_fraction=unfinished_fraction,
        costs=costs,
        config=config,
        idle_window_s=idle_window_s,
        state=state,
    )
    threshold, what = _borrow_threshold_s(makespan_dedicated_s, makespan_full_s, state, costs, config, idle_window_s)
    if gain > threshold:
        return GateDecision(True, f"borrow: gain {gain:.1f} s > {what} {threshold:.1f} s")
    return GateDecision(False, f"no borrow: gain {gain:.1f} s ≤ {what} {threshold:.1f} s")


def expected_residence_s(state: PolicyState) -> float:
    """Mean seconds a preemptible GPU stays, ``1/h`` for the exponential residence of hazard h (inf at h = 0)."""
    hazard = state.preemption_hazard_per_s
    return 1.0 / hazard if hazard > 0 else math.inf


def expansion_ready_s(costs: TransitionCosts, prepared_s: float = 0.0) -> float:
    """Seconds from admission until a new preemptible worker serves: preparation left, then finalisation."""
    return max(0.0, costs.preparation_s - prepared_s) + costs.finalisation_s


def _later_batches_s(gain_s: float, makespan_with_s: float, start_s: float, hazard_per_s: float) -> float:
    """``gain/T_with · ∫_start^∞ e^(−h·t) dt``: the saving over the batches served after ``start_s``."""
    if gain_s <= 0 or makespan_with_s <= 0:
        return 0.0
    if hazard_per_s <= 0:
        return math.inf
    return gain_s / makespan_with_s * math.exp(-hazard_per_s * start_s) / hazard_per_s


def expansion_value_s(
    *,
    makespan_without_s: float,
    makespan_with_s: float,
    unfinished_fraction: float,
    state: PolicyState,
    costs: TransitionCosts,
    config: PolicyConfig,
    prepared_s: float = 0.0,
) -> float:
    """Expected seconds of rollout saved by admitting preemptible GPUs, weighed by :func:`expansion_gate`.

    The batch in flight (PEARL's rule, all of it under ``gate_horizon="batch"``):
    ``(R/B)·(T_without − T_with)·e^(−h·T_with)·max(0, 1 − P/T_with)``, P the preparation left. Over the
    residence, every later second the GPUs serve saves ``(T_without − T_with)/T_with``; they serve from the
    end of the batch in flight or when ready, whichever is later (s = max(ρ·T_with, P + finalisation)), until
    preempted: ``(T_without − T_with)/T_with · e^(−h·s)/h`` (docs/policies.md has the derivation).
    """
    gain = unfinished_fraction * (makespan_without_s - makespan_with_s)
    preparation = max(0.0, costs.preparation_s - prepared_s)
    survive = math.exp(-state.preemption_hazard_per_s * makespan_with_s)
    useful = max(0.0, 1.0 - preparation / makespan_with_s) if makespan_with_s > 0 else 0.0
    value = gain * survive * useful
    if config.gate_horizon == "batch":
        return value
    start = max(unfinished_fraction * makespan_with_s, expansion_ready_s(costs, prepared_s))
    later = _later_batches_s(
        makespan_without_s - makespan_with_s, makespan_with_s, start, state.preemption_hazard_per_s
    )
    return value + later


def expansion_gate(
    *,
    makespan_without_s: float,
    makespan_with_s: float,
    unfinished_fraction: float,
    state: PolicyState,
    costs: TransitionCosts,
    config: PolicyConfig | None = None,
    prepared_s: float = 0.0,
) -> GateDecision:
    """Admit preemptible GPUs only if the expected saving beats the admission pause.

    Under ``gate_horizon="batch"`` (PEARL's rule) the saving is the batch in flight's, discounted by the chance
    the GPUs survive it, ``exp(−hazard·T_with)``, and by the part of it spent preparing them in the background,
    ``max(0, 1 − preparation/T_with)``. Under ``"residence"`` (the default) the batches they serve afterwards,
    until the hazard says they are gone, count too (:func:`expansion_value_s`), and GPUs whose expected
    residence ``1/hazard`` ends before they are ready are never admitted. ``prepared_s``: seconds of
    preparation already done (a refused expansion is asked again at the next decision point).
    """
    config = config or PolicyConfig()
    if config.gate_horizon == "residence":
        residence, ready = expected_residence_s(state), expansion_ready_s(costs, prepared_s)
        if residence <= ready:
            return GateDecision(
                False, f"no expansion: expected residence {residence:.1f} s ends before ready in {ready:.1f} s"
            )
    value = expansion_value_s(
        makespan_without_s=makespan_without_s,
        makespan_with_s=makespan_with_s,
        unfinished_fraction=unfinished_fraction,
        state=state,
        costs=costs,
        config=config,
        prepared_s=prepared_s,
    )
    if value > costs.finalisation_s:
        return GateDecision(True, f"expand: discounted gain {value:.1f} s > pause {costs.finalisation_s:.1f} s")
    return GateDecision(False, f"no expansion: discounted gain {value:.1f} s ≤ pause {costs.finalisation_s:.1f} s")


def expansion_cost_share(
    makespan_s: float,
    unfinished_fraction: float,
    state: PolicyState,
    costs: TransitionCosts,
    config: PolicyConfig,
    prepared_s: float = 0.0,
) -> float:
    """The share of a preemptible admission's one-time costs the batch in flight should carry.

    The one-time costs are preparation and the admission pause; the share is the batch in flight's weight ρ
    over the batches the GPUs are expected to serve, ρ + e^(−h·s)/(h·T). 1 under ``gate_horizon="batch"``
    or when later batches weigh nothing; 0 when the hazard is 0 (the GPUs stay). ``makespan_s``: the batch's
    predicted makespan without them; s as in :func:`expansion_value_s`, with ``prepared_s`` of preparation done.
    """
    if config.gate_horizon == "batch" or makespan_s <= 0 or unfinished_fraction <= 0:
        return 1.0
    hazard = state.preemption_hazard_per_s
    if hazard <= 0:
        return 0.0
    start = max(unfinished_fraction * makespan_s, expansion_ready_s(costs, prepared_s))
    later_batches = math.exp(-hazard * start) / (hazard * makespan_s)
    return unfinished_fraction / (unfinished_fraction + later_batches)


def expansion_can_pass(
    *,
    makespan_without_s: float,
    makespan_lower_bound_s: float,
    unfinished_fraction: float,
    state: PolicyState,
    costs: TransitionCosts,
    config: PolicyConfig,
    prepared_s: float = 0.0,
) -> bool:
    """Whether any configuration no faster than ``makespan_lower_bound_s`` could pass :func:`expansion_gate`.

    An upper bound on the saving: the batch in flight undiscounted, plus the later batches at the bound
    (their saving falls as ``T_with`` grows). Lets the planner skip a solve that cannot pay off. ``prepared_s``:
    the most preparation any candidate GPU has done (more done can only make the gate pass sooner).
    """
    gain_bound = unfinished_fraction * (makespan_without_s - makespan_lower_bound_s)
    if config.gate_horizon == "batch":
        return gain_bound > costs.finalisation_s
    ready = expansion_ready_s(costs, prepared_s)
    if expected_residence_s(state) <= ready:
        return False
    start = max(unfinished_fraction * makespan_lower_bound_s, ready)
    later = _later_batches_s(
        makespan_without_s - makespan_lower_bound_s, makespan_lower_bound_s, start, state.preemption_hazard_per_s
    )
    return gain_bound + later > costs.finalisation_s


def borrow_can_pass(
    *,
    makespan_dedicated_s: float,
    makespan_lower_bound_s: float,
    unfinished_fraction: float,
    state: PolicyState,
    costs: TransitionCosts,
    config: PolicyConfig,
    idle_window_s: float | None = None,
) -> bool:
    """Whether any configuration no faster than ``makespan_lower_bound_s`` could pass :func:`borrow_gate`.

    The saving per served second, ``(T̂_dedicated − T)/T``, falls as T grows, and the value less the end cost
    rises with it (the window is longer than activation + deactivation + margin), so the bound's is the most.
    """
    if config.gate_horizon == "residence" and idle_window_s is not None:
        activation, deactivation = toggle_parts_s(state, costs)
        if idle_window_s - activation - deactivation - config.drain_margin_s <= 0:
            return False
    value = borrow_value_s(
        makespan_dedicated_s=makespan_dedicated_s,
        makespan_full_s=makespan_lower_bound_s,
        unfinished_fraction=unfinished_fraction,
        costs=costs,
        config=config,
        idle_window_s=idle_window_s,
        state=state,
    )
    threshold, _ = _borrow_threshold_s(
        makespan_dedicated_s, makespan_lower_bound_s, state, costs, config, idle_window_s
    )
    return value > threshold


def observe_toggle(state: PolicyState, measured_s: float, config: PolicyConfig) -> PolicyState:
    """Fold one measured activation + deactivation time into T̂_toggle."""
    if not math.isfinite(measured_s) or measured_s < 0:
        raise ValueError(f"measured toggle time must be a finite non-negative number, got {measured_s!r}")
    previous = state.toggle_cost_s
    value = (
        measured_s
        if previous is None
        else (1 - config.toggle_cost_alpha) * previous + config.toggle_cost_alpha * measured_s
    )
    return state.model_copy(update={"toggle_cost_s": value})


def observe_preemptions(state: PolicyState, preemptions: int, gpu_seconds: float, config: PolicyConfig) -> PolicyState:
    """Fold an interval's preemptions over the GPU-seconds at risk into the hazard estimate."""
    if preemptions < 0 or not math.isfinite(gpu_seconds) or gpu_seconds <= 0:
        raise ValueError("preemptions must be ≥ 0 and gpu_seconds a positive finite number")
    sample = preemptions / gpu_seconds
    value = (1 - config.hazard_alpha) * state.preemption_hazard_per_s + config.hazard_alpha * sample
    return state.model_copy(update={"preemption_hazard_per_s": value})
