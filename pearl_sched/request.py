"""The file format of ``pearl-sched plan``: a cluster state plus the model parameters and settings."""

from __future__ import annotations

from pydantic import Field

from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.makespan import PearlParams
from pearl_sched.plans import PolicyState
from pearl_sched.state import ClusterState, Frozen


class PlanRequest(Frozen):
    """Everything ``plan()`` needs, in one JSON document."""

    state: ClusterState
    model: PearlParams
    costs: TransitionCosts = Field(default_factory=TransitionCosts)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    policy_state: PolicyState | None = None
