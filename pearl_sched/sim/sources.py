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

from pearl_sched.sim.scenario import Scenario, ScenarioError
from pearl_sched.sim.steptimes import ComposedStepTimes, StepTimes
from pearl_sched.sim.swe_workload import SWE_SOURCES, CodingAgentTurns
from pearl_sched.sim.workload import AgenticTurns
from pearl_sched.state import WorkerSize


def step_times_for(scenario: Scenario, data: Path, size: WorkerSize | None = None) -> StepTimes:
    """The step times of one worker (one attention-DP rank) of ``size`` (default: the scenario's) from its source.

    A worker of ``tp`` GPUs with ``dp`` attention-DP ranks is aiconfigurator-core's ``tp_size = tp / dp``,
    ``attention_dp_size = dp`` (experts over all ``tp`` GPUs); its step times are one rank's, at the rank's batch.

    Raises:
        ScenarioError: attention-DP with kernel-composed step times (the kernel composition has no attention-DP).
    """
    size = size or scenario.size
    if scenario.step_times == "aiconfigurator-core":
        from pearl_sched.profiles.aic_engine import AicStepTimes

        return AicStepTimes(
            scenario.model,
            scenario.gpu,
            scenario.backend,
            tp=size.tp // size.dp,
            attention_dp=size.dp,
            moe_ep=scenario.moe_ep,
        )
    if size.dp > 1:
        raise ScenarioError(
            f"scenario {scenario.name}: worker size {size.label} has attention-DP, which only the "
            "aiconfigurator-core step times model (set step_times to aiconfigurator-core)"
        )
    from pearl_sched.profiles.kernels import ComposedStepModel, KernelTables, shipped_config

    system_dir = data / "aiconfigurator-sglang" / scenario.gpu
    return ComposedStepTimes(ComposedStepModel(shipped_config(scenario.model), KernelTables(system_dir), tp=size.tp))


def trajectories_for(scenario: Scenario, data: Path) -> AgenticTurns | CodingAgentTurns:
    """The logged trajectories ``scenario``'s batches are drawn from (both have the same ``sample``)."""
    source, _, _ = scenario.trajectories.partition(":")
    if source in SWE_SOURCES:
        return CodingAgentTurns.load(data / "agentic-swe", source)
    return AgenticTurns.load(data / "agentic" / "agentic_turns.csv", source)
