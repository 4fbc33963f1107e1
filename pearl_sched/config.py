"""Reconfiguration costs and policy settings, with their sources.

Costs are PEARL Table 3 means (Qwen3-8B / Qwen3-30B-A3B on H800; the table is in docs/policies.md,
"Reconfiguration costs"). PEARL gives no number for a prefill↔decode role rebind beyond "tens of seconds" and
none for hysteresis thresholds; where we chose a value it says so.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pearl_sched.state import Frozen, NonNegFloat

_PEARL_TABLE3 = {
    # model: (preparation, finalisation, activation, deactivation), seconds
    "qwen3-8b": (56.29, 11.05, 6.26, 3.18),
    "qwen3-30b-a3b": (67.06, 17.89, 6.09, 4.38),
}


class TransitionCosts(Frozen):
    """Seconds each reconfiguration step takes (PEARL Table 3 unless stated)."""

    preparation_s: NonNegFloat = Field(
        default=56.29, description="Background init of a new (inter-scale) worker: no capacity meanwhile"
    )
    finalisation_s: NonNegFloat = Field(default=11.05, description="Admission of new workers: pauses admission")
    activation_s: NonNegFloat = Field(default=6.26, description="Borrowing a training GPU (intra-scale)")
    deactivation_s: NonNegFloat = Field(default=3.18, description="Returning a training GPU")
    role_switch_s: NonNegFloat = Field(
        default=20.0, description="Prefill↔decode rebind; PEARL says 'tens of seconds', 20 s is our choice"
    )
    restart_s: NonNegFloat = Field(
        default=67.34, description="Restart for a mode switch: preparation + finalisation (our assumption)"
    )
    stop_s: NonNegFloat = Field(
        default=3.18, description="Stopping a worker (drain, resubmit prefixes): the deactivation time"
    )
    volatile_decode_s: NonNegFloat = Field(
        default=0.01, description="Tie-breaker: decode on volatile GPUs costs this much more than on stable"
    )

    @classmethod
    def pearl_table3(cls, model: Literal["qwen3-8b", "qwen3-30b-a3b"] = "qwen3-8b") -> TransitionCosts:
        """PEARL's measured means for one of the paper's models."""
        preparation, finalisation, activation, deactivation = _PEARL_TABLE3[model]
        return cls(
            preparation_s=preparation,
            finalisation_s=finalisation,
            activation_s=activation,
            deactivation_s=deactivation,
            restart_s=preparation + finalisation,
            stop_s=deactivation,
        )


class PolicyConfig(Frozen):
    """Thresholds of the switching, borrowing and expansion policies."""

    ratio_change_threshold: NonNegFloat = Field(
        default=0.05, description="Relative makespan gain a P:D change must beat (Libra: ≥ 5%)"
    )
    mode_switch_threshold: NonNegFloat = Field(
        default=0.10, description="Relative gain a colocated↔disaggregated switch must beat (ours: a restart)"
    )
    min_gain_s: NonNegFloat = Field(default=15.0, description="Absolute gain a change must beat (Libra: 15 s)")
    drain_margin_s: NonNegFloat = Field(
        default=5.0, description="Start returning borrowed GPUs this much before the deactivation deadline"
    )
    toggle_cost_alpha: float = Field(default=0.3, gt=0.0, le=1.0, description="EWMA weight of a new toggle")
    hazard_alpha: float = Field(default=0.3, gt=0.0, le=1.0, description="EWMA weight of a new hazard sample")
    gate_horizon: Literal["residence", "batch"] = Field(
        default="residence",
        description=(
            "What the expansion and borrowing gates weigh a GPU over: its expected residence (ours, "
            "docs/policies.md) or the batch in flight only (PEARL's rule)"
        ),
    )
