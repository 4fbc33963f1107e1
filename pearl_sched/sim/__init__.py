"""The simulated rollout cluster: pearl_sched's embedded default backend (docs/simulator.md).

One batch on a pool whose workers join and leave (:mod:`~pearl_sched.sim.rollout`), with step times from
PEARL's parameters or kernel-composed profiles (:mod:`~pearl_sched.sim.steptimes`) — the ground truth the
makespan predictors are measured against; a segment over time with the trainer, borrowing, preemption and
transition delays (:mod:`~pearl_sched.sim.cluster`, a ``ClusterAdapter``); scenario files and their
availability segments (:mod:`~pearl_sched.sim.scenario`, :mod:`~pearl_sched.sim.availability`); the policies
compared (:mod:`~pearl_sched.sim.baselines`) and the comparison runner (:mod:`~pearl_sched.sim.experiment`).
"""

from pearl_sched.sim.availability import AvailabilityTrace, TraceFormatError
from pearl_sched.sim.rollout import (
    BatchResult,
    Engine,
    Pool,
    PoolChange,
    RolloutSimulation,
    TrajectorySpec,
    Turn,
    sample_trajectories,
    simulate_batch,
)
from pearl_sched.sim.scenario import Scenario, ScenarioError, Segment, load_scenario, shipped_scenarios
from pearl_sched.sim.steptimes import ComposedStepTimes, LinearStepTimes, StepTimes

__all__ = [
    "AvailabilityTrace",
    "BatchResult",
    "ComposedStepTimes",
    "Engine",
    "LinearStepTimes",
    "Pool",
    "PoolChange",
    "RolloutSimulation",
    "Scenario",
    "ScenarioError",
    "Segment",
    "StepTimes",
    "TraceFormatError",
    "TrajectorySpec",
    "Turn",
    "load_scenario",
    "sample_trajectories",
    "shipped_scenarios",
    "simulate_batch",
]
