"""Makespan predictors by name: the one place a name (CLI flag, scenario, bench) becomes a model."""

from __future__ import annotations

from pearl_sched.makespan import MakespanModel, PearlMakespanModel, PearlParams
from pearl_sched.makespan_improved import ImprovedMakespanModel, ImprovedParams, ServingParams

PREDICTORS = ("pearl", "improved")
"""``pearl``: PEARL's closed form (docs/makespan.md); ``improved``: θ endogenous, SGLang's memory, caching and PD
transfer (same page)."""


def make_predictor(name: str, params: PearlParams, serving: ServingParams | None = None) -> MakespanModel:
    """The predictor called ``name`` on PEARL parameters ``params``.

    Args:
        name: One of :data:`PREDICTORS`.
        params: PEARL's device parameters (both predictors start from them).
        serving: How the workers serve and what they reported (the improved predictor's; PEARL's model ignores it).
            ``None``: SGLang's defaults with the KV pool taken from the device parameters.

    Raises:
        ValueError: ``name`` is not one of :data:`PREDICTORS`.
    """
    if name == "pearl":
        return PearlMakespanModel(params)
    if name == "improved":
        return ImprovedMakespanModel(ImprovedParams(pearl=params, serving=serving or ServingParams()))
    raise ValueError(f"unknown predictor {name!r}; choose 'pearl' or 'improved'")
