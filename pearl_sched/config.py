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
_PEARL_TABLE3_TP = 2
"""PEARL's workers are TP2 (§6), so Table 3's preparation times are TP2 starts."""


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
    preparation_s_by_tp: dict[int, NonNegFloat] = Field(
        default_factory=dict,
        exclude_if=lambda v: not v,
        description="Preparation seconds of a new worker per TP degree (absent degrees: preparation_s)",
    )

    def preparation_for(self, tp: int) -> float:
        """Seconds to prepare a new worker of ``tp`` GPUs (its own entry, else ``preparation_s``)."""
        return self.preparation_s_by_tp.get(tp, self.preparation_s)

    def restart_for(self, tp: int) -> float:
        """Seconds of a restart into a worker of ``tp`` GPUs: ``restart_s`` shifted by the TP's preparation."""
        return self.restart_s + self.preparation_for(tp) - self.preparation_s

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

    @classmethod
    def pearl_table3_by_tp(
        cls, model: Literal["qwen3-8b", "qwen3-30b-a3b"] = "qwen3-8b", tps: tuple[int, ...] = (1, 2, 4, 8)
    ) -> TransitionCosts:
        """PEARL's costs with a preparation time per TP degree, extrapolated from Table 3 (docs/policies.md).

        Table 3 has two TP2 starts (Qwen3-8B 56.29 s, Qwen3-30B-A3B 67.06 s). We read them as a fixed init plus
        a weight load proportional to each GPU's share of the weights, ``a + c · W / tp`` with W the bf16
        weight bytes of the shipped configs; the two points give a = 52.3 s, c = 0.48 s/GB. Other TP degrees are
        extrapolations of that line, not measurements; finalisation stays Table 3's (admission does not scale
        with TP in this model).
        """
        from pearl_sched.profiles.kernels import shipped_config  # profiles depend on the core, not the reverse

        weights = {name: shipped_config(name).parameter_count() * 2 for name in _PEARL_TABLE3}
        (w8, p8), (w30, p30) = ((weights[n] / _PEARL_TABLE3_TP, _PEARL_TABLE3[n][0]) for n in _PEARL_TABLE3)
        per_byte = (p30 - p8) / (w30 - w8)
        fixed = p8 - per_byte * w8
        base = cls.pearl_table3(model)
        by_tp = {tp: round(fixed + per_byte * weights[model] / tp, 2) for tp in tps}
        return base.model_copy(update={"preparation_s_by_tp": by_tp})


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
    mode_by_predict: bool = Field(
        default=True,
        exclude_if=lambda v: v,
        description=(
            "On the surrogate's path (rank_by_predict off) with a memory-aware model: each solve's answer is the "
            "better by the model's own predict of its surrogate optimum and each other mode's, and is weighed by "
            "predict as a ranked answer is (gates, hysteresis); no ratio sweep or descent, PEARL's KV constraint "
            "kept. False: the surrogate's optimum stands, as before it (docs/formulation.md, 'The mode checked by "
            "predict')"
        ),
    )
    rank_by_predict: bool | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description=(
            "Rank the MILP's candidates (each mode's optimum, PEARL's ratio sweep per worker size, their "
            "neighbours) by the model's own predict instead of its fitted surrogate, and drop PEARL's hard KV "
            "constraint for a memory-aware model (docs/formulation.md, 'Ranking by predict'). None (the default): "
            "on when the state declares worker sizes, where the surrogate was measured to misrank, off otherwise "
            "(docs/makespan.md, 'Ranking by predict: measured')"
        ),
    )
