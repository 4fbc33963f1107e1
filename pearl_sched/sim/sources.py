"""A scenario's step-time source and trajectory source, chosen by its ``step_times`` and ``trajectories`` fields.

* ``step_times = "kernel-composition"`` (the default): aiconfigurator's SGLang kernel tables in
  ``../shared/data/aiconfigurator-sglang`` composed for the model, GPU and TP (:class:`ComposedStepTimes`).
  ``"aiconfigurator-core"``: NVIDIA aiconfigurator-core's compiled engine for the model, GPU, backend, TP,
  attention-DP and EP (``AicStepTimes``, the ``aic`` extra); a case it does not cover raises ``AicCoverageError``
  rather than falling back.
* ``trajectories``: tau-bench sources read by :class:`~pearl_sched.sim.workload.AgenticTurns`, coding-agent sources
  by :class:`~pearl_sched.sim.swe_workload.CodingAgentTurns`.

Every returned :class:`~pearl_sched.sim.steptimes.StepTimes` carries ``source`` for reports.
"""

from __future__ import annotations

from pathlib import Path

from pearl_sched.sim.scenario import Scenario
from pearl_sched.sim.steptimes import ComposedStepTimes, StepTimes
from pearl_sched.sim.swe_workload import SWE_SOURCES, CodingAgentTurns
from pearl_sched.sim.workload import AgenticTurns


def step_times_for(scenario: Scenario, data: Path) -> StepTimes:
    """The worker step times ``scenario`` names."""
    if scenario.step_times == "aiconfigurator-core":
        from pearl_sched.profiles.aic_engine import AicStepTimes

        return AicStepTimes(
            scenario.model,
            scenario.gpu,
            scenario.backend,
            tp=scenario.tp,
            attention_dp=scenario.attention_dp,
            moe_ep=scenario.moe_ep,
        )
    from pearl_sched.profiles.kernels import ComposedStepModel, KernelTables, shipped_config

    system_dir = data / "aiconfigurator-sglang" / scenario.gpu
    return ComposedStepTimes(
        ComposedStepModel(shipped_config(scenario.model), KernelTables(system_dir), tp=scenario.tp)
    )


def trajectories_for(scenario: Scenario, data: Path) -> AgenticTurns | CodingAgentTurns:
    """The logged trajectories ``scenario``'s batches are drawn from (both have the same ``sample``)."""
    source, _, _ = scenario.trajectories.partition(":")
    if source in SWE_SOURCES:
        return CodingAgentTurns.load(data / "agentic-swe", source)
    return AgenticTurns.load(data / "agentic" / "agentic_turns.csv", source)
