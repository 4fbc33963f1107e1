"""The simulated rollout cluster: pearl_sched's embedded default backend.

This first part simulates one multi-turn rollout batch on a fixed pool (:mod:`~pearl_sched.sim.rollout`),
with worker step times from PEARL's parameters or kernel-composed profiles (:mod:`~pearl_sched.sim.steptimes`),
and reads scenario files (:mod:`~pearl_sched.sim.scenario`) with their availability segments
(:mod:`~pearl_sched.sim.availability`). It is the ground truth the makespan predictors are measured against.
"""

from pearl_sched.sim.availability import AvailabilityTrace, TraceFormatError
from pearl_sched.sim.rollout import (
    BatchResult,
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
