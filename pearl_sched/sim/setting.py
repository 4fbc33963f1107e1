"""Everything a scenario's simulation needs, built once from the scenario file and ``../shared/data``.

* Worker step times: the scenario's model composed from aiconfigurator's SGLang kernel tables for its GPU and
  TP (``profiles.kernels``), or aiconfigurator-core's engine when the scenario's ``step_times`` says so
  (:mod:`~pearl_sched.sim.sources`); KV capacity from the GPU's memory (the system file's ``mem_capacity``) less the
  weights; the P→D link from its ``inter_node_bw`` (per GPU, one direction).
* The predictors' parameters: PEARL's device parameters fitted to the same step times around the batch's
  operating point (``profiles.to_pearl.fit_device``), used by PEARL's model and by the improved one.
* Training step time: ``training_flops_per_token × parameters × tokens / (GPUs × peak × MFU)`` — forward and
  backward (6) plus the old-policy log-prob recompute (2) per parameter per token, on the scenario's training
  GPUs at the scenario's model-FLOPs utilisation (an assumption the scenario file states).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from pearl_sched.makespan import DeviceParams, MakespanModel, PearlParams
from pearl_sched.makespan_improved import ServingParams, SizePool
from pearl_sched.predictors import make_predictor
from pearl_sched.profiles.kernels import shipped_config
from pearl_sched.profiles.model_config import ModelConfig
from pearl_sched.profiles.to_pearl import fit_device, kv_capacity_bytes
from pearl_sched.sim.memory import default_chunked_prefill_size, default_mem_fraction_static, kv_pool_tokens
from pearl_sched.sim.rollout import Engine, Pool, TrajectorySpec
from pearl_sched.sim.router import GATEWAY_OVERLOAD_PROTECTION
from pearl_sched.sim.scenario import Scenario, ScenarioError
from pearl_sched.sim.sources import step_times_for, trajectories_for
from pearl_sched.sim.steptimes import ComposedStepTimes, StepTimes
from pearl_sched.sim.swe_workload import CodingAgentTurns
from pearl_sched.sim.workload import AgenticTurns, BatchStats, batch_stats
from pearl_sched.state import Mode, WorkerSize, Workload

TRAINING_FLOPS_PER_PARAM_TOKEN = 8.0
"""Forward + backward (6) and the old-policy log-prob pass (2), per parameter per token."""

STEP_OVERHEAD_S = 0.00196
"""Per-step framework overhead: the median of measured decode ITL minus the kernel-composed step time over the 41
points of ``../shared/data/dynamo-h200-llama31-8b`` (Llama-3.1-8B, H200 TP1; ``tests/test_sim_memory.py``
recomputes it). The measured server is vLLM with FP8 weights and the kernels are SGLang's BF16 tables, so this is
the nearest measured figure at hand, not an SGLang measurement (docs/simulator.md)."""


def read_system(path: Path) -> dict[str, float]:
    """The numeric ``key: value`` lines of an aiconfigurator system file (no YAML parser needed)."""
    values: dict[str, float] = {}
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read the GPU system file: {exc.strerror or exc}") from exc
    for match in re.finditer(r"^\s*(\w+):\s*([0-9.eE+-]+)\s*(?:#.*)?$", text, re.MULTILINE):
        try:
            values[match.group(1)] = float(match.group(2))
        except ValueError:
            continue
    return values


def step_seed(seed: int, step: int) -> int:
    """Step ``step``'s seed from a scenario seed: its batch and its gateway's tie draws are seeded this way."""
    return seed * 1_000_003 + step


@dataclass(eq=False)  # identity hash: batches are memoised per setting
class Setting:
    """A scenario made concrete: step times, capacities, predictors, batches and the trainer."""

    scenario: Scenario
    config: ModelConfig
    steps: StepTimes
    kv_bytes_per_token: int
    kv_capacity_bytes: float
    link_bytes_per_s: float
    gpu_peak_flops: float
    turns: AgenticTurns | CodingAgentTurns
    gpu_memory_bytes: float = 0.0
    router: str = "cache_aware"
    overload_protection: bool = GATEWAY_OVERLOAD_PROTECTION  # as pearl_sched's adapters launch smg
    decode_radix_cache: bool = False
    enable_mixed_chunk: bool = False
    step_overhead_s: float = STEP_OVERHEAD_S
    data: Path | None = None  # the shared data folder (step times of other worker sizes are built from it)
    _size_steps: dict[WorkerSize, StepTimes] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, scenario: Scenario, data: Path) -> Setting:
        """Build the setting from the scenario and the shared data folder.

        Reads the GPU's aiconfigurator system file (``aiconfigurator-sglang/<gpu>.yaml``: memory, BF16 peak,
        inter-node bandwidth), the model's shipped config, the step-time source and the trajectory data the
        scenario names.

        Args:
            scenario: The validated scenario.
            data: The shared data folder (``../shared/data`` from the repo root).

        Raises:
            ScenarioError: The system file cannot be read or lacks ``mem_capacity``, ``bfloat16_tc_flops`` or
                ``inter_node_bw``, or a worker size's GPUs cannot hold the weights.
            ProfileFormatError: The GPU's kernel tables are missing or malformed (kernel step times).
            MissingExtraError: ``step_times: aiconfigurator-core`` without the ``aic`` extra installed.
            AicCoverageError: aiconfigurator-core does not cover the scenario's model, GPU or backend.
            WorkloadDataError: The trajectory data is missing, malformed or has no such source.
        """
        system_dir = data / "aiconfigurator-sglang"
        system = read_system(system_dir / f"{scenario.gpu}.yaml")
        for key in ("mem_capacity", "bfloat16_tc_flops", "inter_node_bw"):
            if key not in system:
                raise ScenarioError(f"{system_dir / scenario.gpu}.yaml: no {key}")
        config = shipped_config(scenario.model)
        setting = cls(
            scenario=scenario,
            config=config,
            steps=step_times_for(scenario, data),
            kv_bytes_per_token=config.kv_bytes_per_token(),
            kv_capacity_bytes=kv_capacity_bytes(config, scenario.tp, system["mem_capacity"]),
            link_bytes_per_s=system["inter_node_bw"],
            gpu_peak_flops=system["bfloat16_tc_flops"],
            turns=trajectories_for(scenario, data),
            gpu_memory_bytes=system["mem_capacity"],
            data=data,
        )
        for size in setting.sizes:  # a size whose weights do not fit is refused now, not when a plan first uses it
            try:
                setting.kv_pool_tokens_for(size)
            except ValueError as exc:
                raise ScenarioError(f"scenario {scenario.name}: worker size {size.label}: {exc}") from None
        return setting

    # -- SGLang's memory settings (sim/memory.py) -----------------------------------------------------------
    @property
    def chunked_prefill_size(self) -> int:
        """SGLang's default ``--chunked-prefill-size`` for the GPU."""
        return default_chunked_prefill_size(self.gpu_memory_bytes)

    @property
    def mem_fraction_static(self) -> float:
        """SGLang's default ``--mem-fraction-static`` for the GPU and the scenario's worker size."""
        return self.mem_fraction_static_for(self.scenario.size)

    def mem_fraction_static_for(self, size: WorkerSize) -> float:
        """SGLang's default ``--mem-fraction-static`` for the GPU and a worker size (TP, attention-DP)."""
        return default_mem_fraction_static(self.gpu_memory_bytes, size.tp, dp_attention=size.dp)

    @property
    def weights_bytes(self) -> float:
        """BF16 weights of the whole model (every TP rank holds 1/TP of them)."""
        return float(self.config.parameter_count() * 2)

    @functools.cached_property
    def kv_pool_tokens(self) -> int:
        """Each worker's KV pool in tokens, as SGLang sizes it (``profile_max_num_token``), at the scenario's size."""
        return self.kv_pool_tokens_for(self.scenario.size)

    def kv_pool_tokens_for(self, size: WorkerSize) -> int:
        """One rank's KV pool in tokens for a worker of ``size`` (``profile_max_num_token``).

        Each of the ``tp`` GPUs holds 1/tp of the weights; with attention-DP each of the ``dp`` ranks has its own
        pool over its ``tp/dp`` GPUs, so a rank holds 1/dp of what the TP group's pool would (the attention weights
        every rank replicates are not counted: a simplification, docs/simulator.md).

        Raises:
            ValueError: the weights do not fit on ``size.tp`` GPUs.
        """
        tokens = kv_pool_tokens(
            gpu_memory_bytes=self.gpu_memory_bytes,
            tp=size.tp,
            weights_bytes=self.weights_bytes,
            kv_bytes_per_token=self.kv_bytes_per_token,
            mem_fraction_static=self.mem_fraction_static_for(size),
        )
        return tokens // size.dp

    def steps_for(self, size: WorkerSize) -> StepTimes:
        """One rank's step times for a worker of ``size``: the scenario's own at its size, else built once each.

        Raises:
            ScenarioError: the setting was built without its data folder, or attention-DP without
                aiconfigurator-core step times.
            AicCoverageError: aiconfigurator-core does not cover the size.
        """
        if size == self.scenario.size:
            return self.steps
        if size not in self._size_steps:
            if self.data is None:
                raise ScenarioError(f"scenario {self.scenario.name}: no data folder to build {size.label} step times")
            self._size_steps[size] = step_times_for(self.scenario, self.data, size)
        return self._size_steps[size]

    def engine(self, size: WorkerSize) -> Engine:
        """A worker of ``size`` as the rollout simulation runs it: one rank's step times and KV pool, its ranks."""
        return Engine(self.steps_for(size), float(self.kv_pool_tokens_for(size)), ranks=size.dp)

    @property
    def sizes(self) -> tuple[WorkerSize, ...]:
        """The scenario's worker size, then every other size its ``worker_sizes`` allows (by TP, then DP)."""
        declared = self.scenario.worker_sizes
        others: set[WorkerSize] = set()
        if declared is not None:
            others = {z for role in declared.by_role().values() for z in role} - {self.scenario.size}
        return (self.scenario.size, *sorted(others, key=lambda z: (z.tp, z.dp)))

    # -- batches --------------------------------------------------------------------------------------------
    @functools.lru_cache(maxsize=8)  # noqa: B019 - a handful of steps are live at once
    def batch(self, step: int) -> tuple[TrajectorySpec, ...]:
        """Step ``step``'s trajectories: the same for every policy."""
        s = self.scenario
        return tuple(
            self.turns.sample(
                s.trajectories_per_step,
                env_mean_s=s.env_mean_s,
                env_std_s=s.env_std_s,
                max_length=s.max_length_tokens,
                seed=step_seed(s.seed, step),
                output_scale=s.output_scale,
                group_size=s.group_size,
            )
        )

    @functools.cached_property
    def stats(self) -> BatchStats:
        """Batch statistics the orchestrator would log (from step 0; every step has the same distribution)."""
        return batch_stats(list(self.batch(0)))

    def workload(self, unfinished: int | None = None, bubble_ratio: float = 0.0) -> Workload:
        """The planners' prior workload: the batch statistics of :attr:`stats` and the scenario's environment time.

        Turns per trajectory are the p90, and every 5% in ``turn_quantiles``; per-turn tokens, the prompt and the
        mean context are means; the max context is the batch's largest.

        Args:
            unfinished: Trajectories still running; ``None``: the whole batch.
            bubble_ratio: The observed bubble ratio of the last batch (0 before any).
        """
        st = self.stats
        s = self.scenario
        return Workload(
            batch_size=st.trajectories,
            unfinished=st.trajectories if unfinished is None else unfinished,
            turns=st.turns_p90,
            appended_tokens_per_turn=st.appended_tokens,
            generated_tokens_per_turn=st.generated_tokens,
            env_time_per_turn_s=s.env_mean_s,
            env_time_std_s=s.env_std_s,
            bubble_ratio=bubble_ratio,
            mean_context_tokens=st.mean_context_tokens,
            max_context_tokens=st.max_context_tokens,
            kv_bytes_per_token=self.kv_bytes_per_token,
            prompt_tokens=st.prompt_tokens,
            turn_quantiles=st.turn_quantiles,
        )

    # -- predictors -----------------------------------------------------------------------------------------
    @functools.cached_property
    def pearl_params(self) -> PearlParams:
        """PEARL's parameters fitted around the batch's operating point on a mid-sized pool (8 workers)."""
        st = self.stats
        return self.fit_pearl_params(
            context_tokens=st.mean_context_tokens,
            appended_tokens=st.appended_tokens,
            max_batch=max(2, st.trajectories // 8),
        )

    def fit_pearl_params(self, *, context_tokens: float, appended_tokens: float, max_batch: int) -> PearlParams:
        """PEARL's parameters fitted to this setting's step times around an operating point.

        One device per TP degree of :attr:`sizes` (only the scenario's when it declares no worker sizes).

        Args:
            context_tokens: The mean context a decode step sees.
            appended_tokens: The tokens each turn after the first prefills.
            max_batch: The largest decode batch per worker the fit samples.
        """
        devices: dict[int, DeviceParams] = {}
        for size in self.sizes:
            if size.tp not in devices:
                devices[size.tp] = self._fit_device(size, context_tokens, appended_tokens, max_batch)
        s = self.scenario
        labels = " ".join(z.label.upper() for z in self.sizes)
        return PearlParams(
            devices=tuple(devices.values()),
            switch_overhead_s=0.0,
            kv_bandwidth_bytes_per_s=self.link_bytes_per_s,
            kv_bandwidth_per_prefill_worker=True,
            source=f"fitted to {s.model} on {s.gpu} {labels}: {self.steps.source}",
        )

    def _fit_device(
        self, size: WorkerSize, context_tokens: float, appended_tokens: float, max_batch: int
    ) -> DeviceParams:
        """PEARL's device parameters of one worker of ``size`` (an attention-DP engine as a whole, load balanced)."""
        steps = self.steps_for(size)
        dp = size.dp
        if isinstance(steps, ComposedStepTimes):  # the kernel model itself, unsnapped
            prefill_s = lambda n, c: steps.model.prefill_s(n, cached_tokens=c)  # type: ignore[attr-defined]  # noqa: E731
            decode_s = steps.model.decode_s  # type: ignore[attr-defined]
        else:  # an engine's ranks share its load: n sequences are n/dp per rank, a prompt runs on one rank
            prefill_s = lambda n, c: steps.prefill_s(n, 1, c)  # noqa: E731
            decode_s = lambda b, c: steps.decode_s(max(1, math.ceil(round(b) / dp)), c)  # noqa: E731
        capacity = self.kv_capacity_bytes
        if size.tp != self.scenario.tp:
            capacity = kv_capacity_bytes(self.config, size.tp, self.gpu_memory_bytes)
        return fit_device(
            gpu_type=self.gpu_type,
            tp=size.tp,
            prefill_s=prefill_s,
            decode_s=decode_s,
            context_tokens=context_tokens,
            appended_tokens=appended_tokens,
            max_batch=max_batch * dp,
            kv_capacity=capacity,
        )

    @property
    def gpu_type(self) -> str:
        """``h200`` for the system ``h200_sxm``."""
        return self.scenario.gpu.split("_")[0]

    @functools.cached_property
    def mixed_step_factor(self) -> float:
        """φ = mixed_s ÷ (prefill_s + decode_s) of the step times at the batch's operating point.

        One chunk (``--chunked-prefill-size`` tokens after the mean context) with the decode batch of an 8-worker
        pool; 1 for the sources whose mixed pass is the two back to back.
        """
        st = self.stats
        chunk, context = float(self.chunked_prefill_size), st.mean_context_tokens
        batch = max(1, st.trajectories // 8)
        apart = self.steps.prefill_s(chunk, 1, context) + self.steps.decode_s(batch, context)
        together = self.steps.mixed_s(chunk, 1, context, batch, context)
        return together / apart if apart > 0 and together > 0 else 1.0

    def serving_params(self, **measured: object) -> ServingParams:
        """What the improved predictor knows of these workers before any telemetry: SGLang's settings as launched.

        The KV pool is SGLang's (:attr:`kv_pool_tokens`, what ``sglang:max_total_num_tokens`` reports), the router,
        decode radix cache and mixed-chunk flags the scenario's, φ the step times' (:attr:`mixed_step_factor`), the
        GRPO group size the scenario's (the rollout's samples per prompt), the chunked-prefill size SGLang's;
        with ``worker_sizes`` every other TP degree's own pool (:meth:`kv_pool_tokens_for`, ``size_pools``);
        ``measured`` overrides fields with what the cluster's telemetry reported (``profiles.telemetry.refit_serving``).
        """
        size_pools = {
            z.tp: SizePool(gpu_type=self.gpu_type, tp=z.tp, kv_pool_tokens=float(self.kv_pool_tokens_for(z) * z.dp))
            for z in self.sizes[1:]
            if z.tp != self.scenario.tp
        }
        fields: dict[str, object] = dict(
            kv_pool_tokens=float(self.kv_pool_tokens),
            size_pools=tuple(size_pools.values()),
            router=self.router,
            decode_radix_cache=self.decode_radix_cache,
            enable_mixed_chunk=self.enable_mixed_chunk,
            mixed_step_factor=self.mixed_step_factor,
            group_size=self.scenario.group_size,
            chunked_prefill_tokens=float(self.chunked_prefill_size),
        )
        fields.update(measured)
        return ServingParams.model_validate(fields)

    def predictor(
        self, name: str, params: PearlParams | None = None, serving: ServingParams | None = None
    ) -> MakespanModel:
        """``pearl`` (PEARL's closed form) or ``improved``, on ``params`` (default :attr:`pearl_params`).

        The improved predictor also gets ``serving`` (default :meth:`serving_params`).
        """
        chosen = params if params is not None else self.pearl_params
        return make_predictor(name, chosen, serving if serving is not None else self.serving_params())

    # -- pools and the trainer ------------------------------------------------------------------------------
    def pool(self, mode: Mode, prefill: int = 0, decode: int = 0, colocated: int = 0, step: int = 0) -> Pool:
        """A fresh worker pool of this setting's SGLang workers for :func:`~pearl_sched.sim.rollout.simulate_batch`.

        Each worker gets the setting's step times, KV pool, chunked-prefill size, router and P→D link.

        Args:
            mode: Colocated or disaggregated.
            prefill: Prefill workers (disaggregated).
            decode: Decode workers (disaggregated).
            colocated: Colocated workers.
            step: The training step whose batch the pool runs: with the scenario's ``tie_seed`` it seeds the
                gateway's tie-break, so every policy's step starts from the same draw (as from the same batch).
        """
        return Pool(
            mode,
            self.steps,
            prefill_workers=prefill,
            decode_workers=decode,
            colocated_workers=colocated,
            kv_capacity_tokens=self.kv_pool_tokens,
            kv_bytes_per_token=self.kv_bytes_per_token,
            link_bytes_per_s=self.link_bytes_per_s,
            chunk_tokens=self.chunked_prefill_size,
            router=self.router,
            overload_protection=self.overload_protection,
            tie_seed=step_seed(self.scenario.gateway_tie_seed, step),
            decode_radix_cache=self.decode_radix_cache,
            enable_mixed_chunk=self.enable_mixed_chunk,
            step_overhead_s=self.step_overhead_s,
            max_context_tokens=self.scenario.max_length_tokens,
        )

    def training_s(self, tokens: int) -> float:
        """One training step over ``tokens`` on the scenario's training GPUs."""
        s = self.scenario
        flops = TRAINING_FLOPS_PER_PARAM_TOKEN * self.config.parameter_count() * tokens
        return flops / (s.training_gpus * self.gpu_peak_flops * s.training_mfu)
