"""Switching, borrowing and expansion policies (DESIGN.md §5 and §7).

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


def borrow_gate(
    *,
    makespan_dedicated_s: float,
    makespan_full_s: float,
    unfinished_fraction: float,
    state: PolicyState,
    costs: TransitionCosts,
) -> GateDecision:
    """PEARL Eq. 7: lend training GPUs only if ``(R/B)·(T̂_dedicated − T̂_full) > T̂_toggle``."""
    gain = unfinished_fraction * (makespan_dedicated_s - makespan_full_s)
    toggle = toggle_cost_s(state, costs)
    if gain > toggle:
        return GateDecision(True, f"borrow: gain {gain:.1f} s > toggle cost {toggle:.1f} s")
    return GateDecision(False, f"no borrow: gain {gain:.1f} s ≤ toggle cost {toggle:.1f} s")


def expansion_gate(
    *,
    makespan_without_s: float,
    makespan_with_s: float,
    unfinished_fraction: float,
    state: PolicyState,
    costs: TransitionCosts,
) -> GateDecision:
    """Admit preemptible GPUs only if the discounted gain beats the admission pause.

    The gain ``(R/B)·(T_without − T_with)`` is discounted by the chance the GPUs survive the batch,
    ``exp(−hazard·T_with)``, and by the part of the batch spent preparing them in the background,
    ``max(0, 1 − preparation/T_with)``; it must exceed the finalisation pause.
    """
    gain = unfinished_fraction * (makespan_without_s - makespan_with_s)
    survive = math.exp(-state.preemption_hazard_per_s * makespan_with_s)
    useful = max(0.0, 1.0 - costs.preparation_s / makespan_with_s) if makespan_with_s > 0 else 0.0
    value = gain * survive * useful
    if value > costs.finalisation_s:
        return GateDecision(True, f"expand: discounted gain {value:.1f} s > pause {costs.finalisation_s:.1f} s")
    return GateDecision(False, f"no expansion: discounted gain {value:.1f} s ≤ pause {costs.finalisation_s:.1f} s")


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
