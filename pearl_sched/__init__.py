"""pearl_sched: elastic prefill–decode scheduling for agentic-RL rollout.

The main entry point is :func:`plan`: cluster state + workload + budget + a makespan model in, a plan out
(mode, P:D counts, the minimal transition, the predicted makespan and why).
"""

from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.errors import (
    InfeasiblePlanError,
    InvalidStateError,
    MissingExtraError,
    PearlSchedError,
    SimulationError,
    SolverError,
    SolverUnavailableError,
    TelemetryRejected,
    UnknownModelError,
)
from pearl_sched.makespan import (
    DeviceParams,
    MakespanBreakdown,
    MakespanModel,
    PearlMakespanModel,
    PearlParams,
    PoolCapacity,
)
from pearl_sched.makespan_improved import ImprovedMakespanModel, ImprovedParams
from pearl_sched.planner import plan
from pearl_sched.plans import Action, ActionKind, Decision, DecisionKind, Plan, PolicyState
from pearl_sched.state import GPU, Budget, ClusterState, Mode, Role, Status, Worker, Workload, Zone
from pearl_sched.transition import apply_actions

__version__ = "0.1.0"

__all__ = [
    "GPU",
    "Action",
    "ActionKind",
    "Budget",
    "ClusterState",
    "Decision",
    "DecisionKind",
    "DeviceParams",
    "ImprovedMakespanModel",
    "ImprovedParams",
    "InfeasiblePlanError",
    "InvalidStateError",
    "MakespanBreakdown",
    "MakespanModel",
    "MissingExtraError",
    "Mode",
    "PearlMakespanModel",
    "PearlParams",
    "PearlSchedError",
    "Plan",
    "PolicyConfig",
    "PolicyState",
    "PoolCapacity",
    "Role",
    "SimulationError",
    "SolverError",
    "SolverUnavailableError",
    "Status",
    "TelemetryRejected",
    "TransitionCosts",
    "UnknownModelError",
    "Worker",
    "Workload",
    "Zone",
    "__version__",
    "apply_actions",
    "plan",
]
