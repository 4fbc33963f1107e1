"""The simulated rollout cluster: pearl_sched's embedded default backend.

This first part simulates one multi-turn rollout batch on a fixed pool (:mod:`~pearl_sched.sim.rollout`),
with worker step times from PEARL's parameters or kernel-composed profiles (:mod:`~pearl_sched.sim.steptimes`).
It is the ground truth the makespan predictors are measured against.
"""

from pearl_sched.sim.rollout import (
    BatchResult,
    Pool,
    RolloutSimulation,
    TrajectorySpec,
    Turn,
    sample_trajectories,
    simulate_batch,
)
from pearl_sched.sim.steptimes import ComposedStepTimes, LinearStepTimes, StepTimes

__all__ = [
    "BatchResult",
    "ComposedStepTimes",
    "LinearStepTimes",
    "Pool",
    "RolloutSimulation",
    "StepTimes",
    "TrajectorySpec",
    "Turn",
    "sample_trajectories",
    "simulate_batch",
]
