"""Makespan predictors by name: the one place a name (CLI flag, scenario, bench) becomes a model."""

from __future__ import annotations

from pearl_sched.makespan import MakespanModel, PearlMakespanModel, PearlParams
from pearl_sched.makespan_improved import ImprovedMakespanModel, ImprovedParams

PREDICTORS = ("pearl", "improved")
"""``pearl``: PEARL's closed form (docs/makespan.md); ``improved``: θ endogenous (same page)."""


def make_predictor(name: str, params: PearlParams) -> MakespanModel:
    """The predictor called ``name`` on PEARL parameters ``params``.

    Raises:
        ValueError: ``name`` is not one of :data:`PREDICTORS`.
    """
    if name == "pearl":
        return PearlMakespanModel(params)
    if name == "improved":
        return ImprovedMakespanModel(ImprovedParams(pearl=params))
    raise ValueError(f"unknown predictor {name!r}; choose 'pearl' or 'improved'")
