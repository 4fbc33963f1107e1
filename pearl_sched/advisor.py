"""From the logs an RL team already has to a rollout configuration: the ``pearl-sched advise`` core.

Steps (each a function below):

1. **Workload** (:func:`workload_from_logs`): turns, tokens per turn and tool time from a verl / wandb step log
   (:mod:`pearl_sched.profiles.rl_logs`) and, when given, SGLang's per-request figures from Prometheus
   (:mod:`pearl_sched.profiles.prometheus_api`), which are per LLM turn and so exact where the step log is not.
2. **Device** (:func:`device_params`): PEARL's per-worker parameters fitted (``profiles.to_pearl.fit_device``) to
   aiconfigurator-core's SGLang step times for the model, GPU and TP; with Prometheus, the decode step is
   calibrated to the measured inter-token latency at the measured concurrency (one ratio, clamped to 0.5–2× as
   Dynamo clamps its correction). KV capacity is the engine's estimate of SGLang's pool; the P→D link is the GPU
   system file's ``inter_node_bw``.
3. **Plan** (:func:`advise`): the budget as dedicated rollout GPUs, the training GPUs as lendable (overlap) GPUs
   idle for the measured rollout time, and :func:`pearl_sched.plan` chooses the mode, the P:D ratio and whether
   to lend, with no cost for starting workers (:data:`STEADY_STATE_COSTS`: the recommendation is where a
   deployment starts) but PEARL's activation and deactivation costs for lending, paid every step.
   :mod:`pearl_sched.framework_configs` then writes it in a framework's own configuration.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.errors import PearlSchedError
from pearl_sched.makespan import DeviceParams, MakespanModel, PearlParams, PoolCapacity
from pearl_sched.planner import plan
from pearl_sched.plans import Plan
from pearl_sched.predictors import make_predictor
from pearl_sched.profiles.prometheus_api import ServingSummary
from pearl_sched.profiles.rl_logs import RolloutLogSummary
from pearl_sched.state import GPU, Budget, ClusterState, Frozen, Mode, Role, Status, Worker, Workload, Zone

if TYPE_CHECKING:
    from pearl_sched.profiles.aic_engine import AicStepTimes

FRAMEWORKS = ("verl", "slime", "roll", "areal")
STEADY_STATE_COSTS = TransitionCosts(
    preparation_s=0.0, finalisation_s=0.0, role_switch_s=0.0, restart_s=0.0, stop_s=0.0
)
"""A recommendation is where a deployment starts, so starting workers costs nothing; lending still pays PEARL
Table 3's activation and deactivation every step (the defaults kept)."""
ADVISE_POLICY = PolicyConfig(mode_by_predict=False)
"""plan()'s defaults but the MILP's optimum standing (no check of the mode by ``predict``): the framework layouts the
advice weighs against the plan are scored by the MILP's own terms (``framework_configs``), so the plan must be that
scale's optimum for the comparison to hold (docs/advise.md)."""
LENDABLE_PREFIX = "tw"
"""Worker ids of training-GPU (lendable) workers start with this; dedicated ones with ``dw``."""
Framework = Literal["verl", "slime", "roll", "areal"]


class AdviceError(PearlSchedError, ValueError):
    """The inputs do not determine a workload or a cluster (the message says which input is missing or wrong)."""


class AdviceInputs(Frozen):
    """What ``pearl-sched advise`` is told beyond the logs."""

    budget_gpus: int = Field(ge=1, le=65536, description="Dedicated rollout GPUs")
    model: str = Field(min_length=1, description="Shipped model config (qwen3-8b, qwen3-30b-a3b, ...)")
    gpu: str = Field(min_length=1, description="aiconfigurator system name (h200_sxm, h100_sxm, ...)")
    tp: int = Field(ge=1, le=64, description="GPUs per rollout worker (tensor parallel)")
    batch_size: int = Field(ge=1, description="Trajectories per rollout step (prompts × group size)")
    training_gpus: int = Field(default=0, ge=0, le=65536, description="Training GPUs that may be lent to rollout")
    gpus_per_node: int = Field(default=8, ge=1, le=64)
    turns: float | None = Field(default=None, gt=0, description="LLM turns of the slowest trajectory (override)")
    generated_tokens_per_turn: float | None = Field(default=None, gt=0, description="Override")
    env_time_per_turn_s: float | None = Field(default=None, ge=0, description="Tool seconds per turn (override)")


@dataclass(frozen=True)
class Advice:
    """The plan for a budget and everything it was derived from, for a framework config to be written from."""

    inputs: AdviceInputs
    plan: Plan
    params: PearlParams
    model: MakespanModel
    workload: Workload
    log: RolloutLogSummary | None
    serving: ServingSummary | None
    decode_scale: float | None
    notes: tuple[str, ...]
    idle_window_s: float = 0.0
    state: ClusterState | None = None

    @property
    def lent_workers(self) -> int:
        """Training-GPU workers the plan lends to rollout."""
        return sum(1 for a in self.plan.assignment if a.role is not None and a.worker_id.startswith(LENDABLE_PREFIX))


def workload_from_logs(
    inputs: AdviceInputs, log: RolloutLogSummary | None, serving: ServingSummary | None, kv_bytes_per_token: float
) -> tuple[Workload, list[str]]:
    """PEARL's workload terms from the logs (per-turn figures from Prometheus where it is given).

    Returns:
        The workload and one note per figure saying where it came from.

    Raises:
        AdviceError: a figure no input determines (e.g. tokens per turn of a multi-turn run without Prometheus).
    """
    if log is None and serving is None:
        raise AdviceError("advise needs a profile: a verl metrics log, a wandb CSV export or a Prometheus URL")
    (turns, turns_mean), turns_note = _turns(inputs, log)
    generated, generated_note = _generated(inputs, log, serving, turns_mean)
    (appended, context), appended_note = _appended(log, serving, turns_mean, generated)
    env, env_note = _env_time(inputs, log, turns_mean)
    max_context = log.prompt_tokens + log.response_tokens if log is not None else context + turns * generated
    workload = Workload(
        batch_size=inputs.batch_size,
        unfinished=inputs.batch_size,
        turns=turns,
        appended_tokens_per_turn=appended,
        generated_tokens_per_turn=generated,
        env_time_per_turn_s=env,
        mean_context_tokens=context,
        max_context_tokens=max(max_context, context),
        kv_bytes_per_token=kv_bytes_per_token,
        prompt_tokens=log.prompt_tokens if log is not None else context,
    )
    return workload, [turns_note, generated_note, appended_note, env_note]


def _turns(inputs: AdviceInputs, log: RolloutLogSummary | None) -> tuple[tuple[float, float], str]:
    """LLM turns of the slowest trajectory (PEARL's S) and the mean."""
    if inputs.turns is not None:
        return (inputs.turns, inputs.turns), f"turns {inputs.turns:g}: --turns"
    if log is not None:
        s, mean = log.llm_turns_max, log.llm_turns_mean
        return (s, mean), f"turns {s:g} (slowest), {mean:.2f} (mean): num_turns/max, /mean ÷ 2 of {log.source}"
    raise AdviceError("turns per trajectory: give a verl/wandb log with num_turns, or --turns")


def _generated(
    inputs: AdviceInputs, log: RolloutLogSummary | None, serving: ServingSummary | None, turns_mean: float
) -> tuple[float, str]:
    """Tokens generated per LLM turn (PEARL's r)."""
    if inputs.generated_tokens_per_turn is not None:
        r = inputs.generated_tokens_per_turn
        return r, f"generated tokens per turn {r:g}: --generated-tokens-per-turn"
    if serving is not None:
        r = serving.generation_tokens
        return r, f"generated tokens per turn {r:.1f}: {serving.source} over {serving.window}"
    if log is not None and turns_mean <= 1.0:
        return log.response_tokens, f"generated tokens per turn {log.response_tokens:.1f}: response_length/mean"
    raise AdviceError(
        "generated tokens per turn: verl's response_length counts tool output too in multi-turn runs; "
        "give a Prometheus URL (SGLang's per-request counters) or --generated-tokens-per-turn"
    )


def _appended(
    log: RolloutLogSummary | None, serving: ServingSummary | None, turns_mean: float, generated: float
) -> tuple[tuple[float, float], str]:
    """New prompt tokens per turn (PEARL's ΔL) and the mean context a turn sees."""
    if serving is not None:
        cached = "prompt − cached" if serving.cached_tokens is not None else "prompt (no cached-token counter)"
        note = f"appended tokens per turn {serving.appended_tokens:.1f}: {cached} per request, {serving.source}"
        return (serving.appended_tokens, serving.prompt_tokens), note
    assert log is not None  # workload_from_logs has one or the other
    total_input = log.prompt_tokens + log.response_tokens - turns_mean * generated
    if total_input < 0:
        raise AdviceError(
            f"{turns_mean:.2f} turns × {generated:g} generated tokens exceed the {log.response_tokens:.0f} "
            "response tokens the log measured: check --generated-tokens-per-turn"
        )
    appended = total_input / turns_mean
    note = f"appended tokens per turn {appended:.1f}: (prompt + response − turns·generated) / turns"
    return (appended, (log.prompt_tokens + log.response_tokens) / 2), note


def _env_time(inputs: AdviceInputs, log: RolloutLogSummary | None, turns_mean: float) -> tuple[float, str]:
    """Tool (environment) seconds per turn."""
    if inputs.env_time_per_turn_s is not None:
        return inputs.env_time_per_turn_s, f"tool time per turn {inputs.env_time_per_turn_s:g} s: --env-time-s"
    if log is not None:
        env = log.tool_s_per_trajectory / turns_mean
        return env, f"tool time per turn {env:.2f} s: timing_s/agent_loop/tool_calls/mean ÷ turns"
    raise AdviceError("tool time per turn: give a verl/wandb log with agent-loop timings, or --env-time-s")


def device_params(
    inputs: AdviceInputs, workload: Workload, serving: ServingSummary | None
) -> tuple[PearlParams, float | None, list[str]]:
    """PEARL's parameters from aiconfigurator-core's SGLang step times, decode calibrated to Prometheus' ITL.

    Returns:
        The parameters, the decode calibration ratio (None without Prometheus) and notes on their sources.

    Raises:
        AicCoverageError: the engine has no data for the model, GPU or TP.
        MissingExtraError: aiconfigurator-core is not installed (the ``aic`` extra).
    """
    from pearl_sched.profiles.aic_engine import StepTimeCalibration, _package_root
    from pearl_sched.profiles.to_pearl import fit_device

    steps = _engine(inputs.model, inputs.gpu, inputs.tp)
    notes = [f"step times: {steps.source}"]
    scale: float | None = None
    if serving is not None:
        batch = max(1, round(serving.running_requests))
        context = serving.prompt_tokens + serving.generation_tokens / 2
        calibration = StepTimeCalibration()
        calibration.observe(steps.raw_decode_s(batch, context), serving.itl_s)
        scale = calibration.scale
        notes.append(
            f"decode calibrated ×{scale:.3f}: measured ITL {serving.itl_s * 1e3:.2f} ms at {batch} running, "
            f"{context:.0f}-token context, against the engine's {steps.raw_decode_s(batch, context) * 1e3:.2f} ms"
        )
    decode_scale = scale if scale is not None else 1.0
    workers = max(1, inputs.budget_gpus // inputs.tp)
    kv_tokens = steps.kv_capacity_tokens()
    device: DeviceParams = fit_device(
        gpu_type=inputs.gpu,
        tp=inputs.tp,
        prefill_s=lambda n, c: steps.raw_prefill_s(n, 1, c),
        decode_s=lambda b, c: decode_scale * steps.raw_decode_s(round(b), c),
        context_tokens=workload.mean_context_tokens,
        appended_tokens=max(workload.appended_tokens_per_turn, 1.0),
        max_batch=max(2, math.ceil(workload.batch_size / workers)),
        kv_capacity=kv_tokens * workload.kv_bytes_per_token,
    )
    import yaml  # aiconfigurator-core depends on PyYAML

    system = yaml.safe_load((_package_root() / "systems" / f"{inputs.gpu}.yaml").read_text())
    link = float(system["node"]["inter_node_bw"])
    notes.append(f"KV pool {kv_tokens} tokens per worker (engine estimate); P→D link {link / 1e9:g} GB/s per GPU")
    params = PearlParams(
        devices=(device,),
        switch_overhead_s=0.0,
        kv_bandwidth_bytes_per_s=link,
        kv_bandwidth_per_prefill_worker=True,
        source=steps.source + (f"; decode ×{scale:.3f} to Prometheus ITL" if scale is not None else ""),
    )
    return params, scale, notes


@functools.lru_cache(maxsize=8)
def _engine(model: str, gpu: str, tp: int) -> AicStepTimes:
    """The step-time engine for (model, GPU, TP), compiled once per process (it takes seconds).

    Only its uncalibrated ``raw_*`` calls are used, so sharing it is safe.
    """
    from pearl_sched.profiles.aic_engine import AicStepTimes

    return AicStepTimes(model, gpu, tp=tp)


def cluster_state(inputs: AdviceInputs, workload: Workload, idle_window_s: float) -> ClusterState:
    """The budget as idle dedicated workers and the training GPUs as lendable workers idle for ``idle_window_s``."""
    tp, per_node = inputs.tp, inputs.gpus_per_node
    if tp > per_node:
        raise AdviceError(f"--tp {tp} is more GPUs than a node has (--gpus-per-node {per_node})")
    gpus: list[GPU] = []
    workers: list[Worker] = []
    for prefix, zone, count in (("d", Zone.DEDICATED, inputs.budget_gpus), ("t", Zone.OVERLAP, inputs.training_gpus)):
        usable = count - count % tp
        for w in range(usable // tp):
            ids = []
            for k in range(tp):
                index = w * tp + k
                gid = f"{prefix}{index}"
                node = f"{prefix}n{index // per_node}"
                reclaim = idle_window_s if zone is Zone.OVERLAP else None
                gpus.append(GPU(id=gid, node=node, type=inputs.gpu, zone=zone, reclaim_in_s=reclaim))
                ids.append(gid)
            if len({g.node for g in gpus[-tp:]}) > 1:
                continue  # a TP group never spans nodes; the leftover GPUs of a node stay unused
            overlap = zone is Zone.OVERLAP
            workers.append(
                Worker(
                    id=f"{prefix}w{w}",
                    gpu_ids=tuple(ids),
                    role=Role.TRAINING if overlap else Role.DECODE,
                    status=Status.ACTIVE if overlap else Status.INACTIVE,
                )
            )
    used = {g for w in workers for g in w.gpu_ids}
    gpus = [g for g in gpus if g.id in used]
    if not any(g.zone is Zone.DEDICATED for g in gpus):
        raise AdviceError(f"--budget {inputs.budget_gpus} GPUs hold no TP{tp} worker")
    return ClusterState(
        gpus=tuple(gpus),
        workers=tuple(workers),
        workload=workload,
        budget=Budget(max_gpus=len(gpus), allow_borrow=inputs.training_gpus > 0),
    )


def advise(
    inputs: AdviceInputs,
    *,
    log: RolloutLogSummary | None = None,
    serving: ServingSummary | None = None,
    predictor: str = "improved",
) -> Advice:
    """Plan the rollout for ``inputs`` from the measured logs.

    Args:
        inputs: The budget, model, GPU, worker size, batch and lendable training GPUs.
        log: A verl / wandb step log summary (turns, tokens, tool time, measured rollout time).
        serving: SGLang's figures from Prometheus (per-turn tokens, ITL, TTFT, concurrency).
        predictor: ``improved`` (the default of docs/makespan.md) or ``pearl`` (PEARL's closed form).

    Raises:
        AdviceError: the inputs do not determine the workload or a worker.
        AicCoverageError: the step-time engine does not cover the model, GPU or TP.
        InfeasiblePlanError: no configuration within the budget holds the batch.
    """
    from pearl_sched.profiles.kernels import shipped_config

    try:
        kv_bytes = float(shipped_config(inputs.model).kv_bytes_per_token())
    except ValueError as exc:
        raise AdviceError(f"--model: {exc}") from None
    workload, notes = workload_from_logs(inputs, log, serving, kv_bytes)
    params, scale, device_notes = device_params(inputs, workload, serving)
    model = make_predictor(predictor, params)
    idle_s = log.gen_s if log is not None else model.predict(workload, _all_colocated(inputs)).total_s
    if inputs.training_gpus:
        source = "timing_s/gen" if log is not None else "the predicted colocated makespan"
        notes.append(f"training GPUs idle {idle_s:.0f} s per step while rollout runs ({source})")
    state = cluster_state(inputs, workload, idle_s)
    # The framework layouts are scored as the MILP scores configurations (framework_configs._makespan_s: the model's
    # terms), so the plan they are held against is the MILP's own optimum, not the one checked by predict.
    result = plan(state, model, costs=STEADY_STATE_COSTS, policy=ADVISE_POLICY)
    return Advice(inputs, result, params, model, workload, log, serving, scale, (*notes, *device_notes), idle_s, state)


def _all_colocated(inputs: AdviceInputs) -> PoolCapacity:
    return PoolCapacity(mode=Mode.COLOCATED, colocated=max(1, inputs.budget_gpus // inputs.tp))
