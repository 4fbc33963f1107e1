"""The file format of ``pearl-sched plan``: a cluster state plus the model parameters and settings.

Numbers in the JSON document are strict when read by the CLI (``model_validate_json(..., strict=True)``):
``true`` or ``"12"`` where a number belongs is an error, not 1.0 or 12, while an integer is still a valid
float. A request whose PEARL terms (docs/makespan.md) overflow to infinity is refused naming the inputs
multiplied, rather than failing later inside the planner.
"""

from __future__ import annotations

import math
import sys

from pydantic import Field, model_validator
from typing_extensions import Self

from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.makespan import DeviceParams, PearlParams
from pearl_sched.plans import PolicyState
from pearl_sched.state import ClusterState, Frozen

_MAX_FLOAT_INTEGER = int(sys.float_info.max)


class PlanRequest(Frozen):
    """Everything ``plan()`` needs, in one JSON document."""

    state: ClusterState
    model: PearlParams
    costs: TransitionCosts = Field(default_factory=TransitionCosts)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    policy_state: PolicyState | None = None

    @model_validator(mode="after")
    def _terms_finite(self) -> Self:
        for name, factors in _pearl_products(self).items():
            product = math.prod(value for _, value in factors)
            if not math.isfinite(product):
                named = " × ".join(f"{field} ({value:.3g})" for field, value in factors)
                raise ValueError(f"PEARL's {name} overflows to infinity: {named}; check these inputs' units")
        return self


def _pearl_products(request: PlanRequest) -> dict[str, list[tuple[str, float]]]:
    """Each product of inputs in PEARL's pool terms (docs/makespan.md), with the fields that make it."""
    w = request.state.workload
    s = ("state.workload.turns", w.turns)
    if w.batch_size > _MAX_FLOAT_INTEGER:
        raise ValueError(f"state.workload.batch_size is {len(str(w.batch_size))} digits long, too large for a float")
    b = ("state.workload.batch_size", float(w.batch_size))
    dl = ("state.workload.appended_tokens_per_turn", w.appended_tokens_per_turn)
    r = ("state.workload.generated_tokens_per_turn", w.generated_tokens_per_turn)
    k = ("state.workload.kv_bytes_per_token", w.kv_bytes_per_token)
    products: dict[str, list[tuple[str, float]]] = {
        "environment time S·T_env": [s, ("state.workload.env_time_per_turn_s", w.env_time_per_turn_s)],
        "KV transfer S·B·ΔL·K/BW": [
            s,
            b,
            dl,
            k,
            ("1/model.kv_bandwidth_bytes_per_s", 1 / request.model.kv_bandwidth_bytes_per_s),
        ],
        "switching overhead S·T_over": [s, ("model.switch_overhead_s", request.model.switch_overhead_s)],
        "KV per trajectory L·K": [("state.workload.mean_context_tokens", w.mean_context_tokens), k],
        "KV at the longest context L_max·K": [("state.workload.max_context_tokens", w.max_context_tokens), k],
    }
    reference = request.model.devices[0]
    for i, device in enumerate(request.model.devices):
        d = f"model.devices.{i}"
        products[f"prefill work S·B·ΔL·t_p ({d})"] = [
            s,
            b,
            dl,
            (f"{d}.prefill_s_per_token", device.prefill_s_per_token),
        ]
        products[f"decode fixed time S·r·A·(1+θ) ({d})"] = [
            s,
            r,
            (f"{d}.decode_iteration_s", device.decode_iteration_s),
            ("1 + state.workload.bubble_ratio", 1 + w.bubble_ratio),
        ]
        products[f"decode work S·r·b·B ({d})"] = [s, r, (f"{d}.decode_per_seq_s", device.decode_per_seq_s), b]
        products[f"prefill capacity weight t_p,ref/t_p ({d})"] = _ratio(reference, device, "prefill_s_per_token", d)
        products[f"decode capacity weight b_ref/b ({d})"] = _ratio(reference, device, "decode_per_seq_s", d)
    return products


def _ratio(reference: DeviceParams, device: DeviceParams, field: str, where: str) -> list[tuple[str, float]]:
    value = getattr(device, field)
    return [(f"model.devices.0.{field}", getattr(reference, field)), (f"1/{where}.{field}", 1 / value)]
