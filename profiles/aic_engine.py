"""Step times from NVIDIA aiconfigurator-core's compiled engine (the engine behind Dynamo's planner and mocker).

:class:`AicStepTimes` implements :class:`~pearl_sched.sim.steptimes.StepTimes` for any model, GPU, backend
(``sglang``, ``vllm``, ``trtllm``) and parallelism (TP, attention-DP, MoE TP/EP) that the installed
``aiconfigurator-core`` ships perf data for. The package is an optional extra (``pip install 'pearl-sched[aic]'``);
it is imported only when an engine is built.

What each method asks the engine (``aiconfigurator_core.sdk.engine.EngineHandle``; times are per iteration):

* ``prefill_s(new, sequences, cached)``: ``predict_prefill_latency(bs=sequences, isl=new/sequences + cached,
  prefix=cached)`` — a batch of prompts each computing ``new/sequences`` tokens after ``cached`` reused ones.
* ``decode_s(batch, context)``: ``decode_step_latency(gen_tokens=batch, isl=context - 1, osl=2)`` — the engine's
  generation-only step at context ``isl + osl // 2 = context``.
* ``mixed_s(...)``: a prefill chunk run in the same forward pass as a decode batch (SGLang's chunked prefill with
  mixed batches). The engine's ``mixed_step_breakdown`` splits a mixed step into the non-attention work of all
  tokens together, the context attention and the decode attention; its own ``mixed_step_latency`` ties the decode
  context to the prompt length and treats the chunk as a slice of one prompt, so here the three parts are taken
  where each belongs: non-attention of ``new + batch`` tokens (``mixed_step_breakdown`` part 1), the chunk's
  attention as the prefill step's own (``prefill_s`` less the non-attention of its tokens alone), and the decode
  attention at the decode batch's context (``mixed_step_breakdown`` part 4 at that context). For a single
  uncached prompt whose length equals the decode context this is exactly the engine's ``mixed_step_latency``.

Per-step framework overhead (CPU scheduling, sampling, launch gaps) is not in the engine's kernel sums. It is added
only from observed step times, through :class:`StepTimeCalibration` (an EWMA fit of ``observed = scale ×
predicted + overhead``, the online correction Dynamo's planner applies to this engine); ``source`` says whether it
was. Every result is memoised on a grid of 64 steps per octave in each token argument (values up to 64 and powers
of two exact, since the engine's tables step at powers of two), so a call costs about a microsecond once warm.

Expert parallelism across nodes is priced as aiconfigurator itself prices it (:func:`large_ep_comm`): its exact
estimate (``cli_estimate``, the path of its ``predict_silicon_sample`` accuracy tool) keeps EP within one node on the
fused MoE graph, and for EP spanning nodes selects the large-EP graph (DeepEP all-to-all, wide-EP MoE and MLA
tables) for each phase the worker runs, refusing the layout where its data does not cover that EP.
``EngineHandle.compile`` alone never selects that graph, so without this a GB200 decode engine at attention-DP 32 /
EP 32 was priced on the fused graph: 2-3x slower steps than the large-EP graph aiconfigurator uses for it.

A model, GPU, backend or parallelism the engine does not ship raises :class:`AicCoverageError` naming what is
missing and what is supported; nothing falls back to another source silently.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from pearl_sched.errors import MissingExtraError, PearlSchedError

logger = logging.getLogger(__name__)

BACKENDS = ("sglang", "vllm", "trtllm")
PHASES = ("context", "generation")
"""aiconfigurator's inference phases: prefill (``context``) and decode (``generation``)."""
_DEEPEP_NODE1_FALLBACK = frozenset(("deepep_ht", "deepep_ll", "trtllm_deepep_ht", "trtllm_deepep_ll"))
"""All-to-all backends whose one-node rows may stand in for more nodes (aiconfigurator ``moe_comm_resolver``)."""
"""Serving frameworks aiconfigurator-core models."""
VLLM_GPU_MEMORY_UTILIZATION = 0.9
"""vLLM's default ``--gpu-memory-utilization``."""
SGLANG_MAMBA_FULL_MEMORY_RATIO = 0.9
"""SGLang's default ``--mamba-full-memory-ratio``: linear-attention state memory / full-attention KV memory."""
SGLANG_MAMBA_SLOTS_WITHOUT_RADIX = 512
"""State slots SGLang allocates with ``--disable-radix-cache`` and no ``--max-running-requests``."""
SGLANG_MAMBA_SLOTS_PER_RUNNING_REQUEST = 3
"""SGLang's ``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO``: state slots per running request with the radix cache."""
KV_POOL_SOURCES = ("sglang", "aiconfigurator")
"""Where an SGLang worker's KV pool comes from (:meth:`AicStepTimes.kv_capacity_tokens`): ``sglang`` is SGLang's own
derivation (``profile_max_num_token``: GPU memory × ``mem_fraction_static`` less the weights), ``aiconfigurator``
aiconfigurator-core's estimate (the same budget less its activation, NCCL and runtime estimates as well)."""
_LINEAR_STATE_FAMILIES = frozenset(("QWEN35",))
"""aiconfigurator model families priced with a per-request linear-attention (Gated DeltaNet) state that SGLang keeps
in its mamba pool beside the KV pool (Qwen3.5; aiconfigurator-core 0.12.0 ``models/qwen35.py``)."""


class AicCoverageError(PearlSchedError, ValueError):
    """The engine has no perf data or model for what was asked; the message says what is supported."""


def _package_root() -> Path:
    try:
        import aiconfigurator_core
    except ImportError as exc:
        raise MissingExtraError("aiconfigurator-core", "aic") from exc
    return Path(aiconfigurator_core.__file__).resolve().parent


def aic_version() -> str:
    """The installed aiconfigurator-core version."""
    _package_root()
    return metadata.version("aiconfigurator-core")


def supported_models() -> list[str]:
    """HuggingFace ids of the models whose configs aiconfigurator-core ships (no download is attempted)."""
    root = _package_root() / "model_configs"
    names = {p.name.removesuffix("_config.json") for p in root.glob("*_config.json")}
    return sorted(n.replace("--", "/", 1) for n in names if not n.endswith("_hf_quant"))


def supported_systems(backend: str | None = None) -> list[str]:
    """GPU systems with perf data (for ``backend`` if given)."""
    data = _package_root() / "systems" / "data"
    out = []
    for system in sorted(p.name for p in data.iterdir() if p.is_dir()):
        gemm = data / system / "gemm"
        if backend is None or (gemm / backend).is_dir():
            out.append(system)
    return out


def resolve_model(name: str) -> str:
    """The HuggingFace id aiconfigurator-core knows ``name`` by (``qwen3-8b`` → ``Qwen/Qwen3-8B``).

    Raises:
        AicCoverageError: no shipped model config matches.
    """
    models = supported_models()
    if name in models:
        return name
    wanted = name.lower().rsplit("/", 1)[-1]
    matches = [m for m in models if m.lower().rsplit("/", 1)[-1] == wanted]
    if len(matches) == 1:
        return matches[0]
    raise AicCoverageError(
        f"aiconfigurator-core {aic_version()} ships no model config for {name!r}; supported: {', '.join(models)}"
    )


def gpus_per_node(gpu: str) -> int:
    """GPUs in one node of ``gpu``'s system (``node.num_gpus_per_node`` of its aiconfigurator system file)."""
    import yaml  # aiconfigurator-core depends on PyYAML

    spec = yaml.safe_load((_package_root() / "systems" / f"{gpu}.yaml").read_text())
    return int(spec.get("node", {}).get("num_gpus_per_node", 0) or 0)


def large_ep_comm(
    model: str,
    gpu: str,
    backend: str = "sglang",
    *,
    tp: int = 1,
    attention_dp: int = 1,
    moe_tp: int | None = None,
    moe_ep: int | None = None,
    moe_quant_mode: str | None = None,
    phases: tuple[str, ...] = PHASES,
    backend_version: str | None = None,
) -> dict[str, str] | None:
    """The MoE all-to-all backend per phase that aiconfigurator's own estimate uses for this layout, or None (fused).

    Mirrors ``resolve_model_config_moe_comm`` of aiconfigurator 0.12.0 (``sdk/moe_comm_resolver.py``) on the exact
    estimate path (``cli_estimate``; aggregated workers need both phases, a PD prefill role ``context``, a decode
    role ``generation``): a dense model, EP 1 or EP within one node is fused; EP across nodes needs pure expert
    parallelism and, for each phase in ``phases``, a backend whose all-to-all rows and wide-EP expert-compute rows
    cover that EP (SGLang: DeepEP high-throughput for prefill, low-latency for decode; its one-node rows stand in for
    more nodes, as aiconfigurator allows).

    Raises:
        AicCoverageError: EP spans nodes and aiconfigurator has no large-EP data for it (its own estimate refuses
            such a layout, ``PerfDataNotAvailableError``), or the MoE is also tensor-parallel.
    """
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.engine import _literal_backend_version
    from aiconfigurator_core.sdk.models.blocks.moe import LARGE_EP_READY_FAMILIES, MoEBlockShape
    from aiconfigurator_core.sdk.models.helpers import (
        _apply_model_quant_defaults,
        _architecture_to_model_family,
        _get_model_info,
        check_is_moe,
    )
    from aiconfigurator_core.sdk.operations.moe_comm import MOE_A2A_BACKENDS, nodes_for
    from aiconfigurator_core.sdk.perf_database import get_database

    model_id = resolve_model(model)
    ep = moe_ep or 1
    if ep <= 1 or not check_is_moe(model_id):
        return None
    per_node = gpus_per_node(gpu)
    if ep <= per_node:
        return None  # aiconfigurator's exact estimate keeps EP within a node on the fused graph
    where = f"{model_id} on {gpu} ({backend}, moe_ep={ep}, {per_node} GPUs per node)"
    if (moe_tp or 1) != 1:
        raise AicCoverageError(f"aiconfigurator-core prices EP across nodes only as pure EP (moe_tp=1): {where}")
    try:
        info = _get_model_info(model_id)
        config = build_model_config(tp, 1, attention_dp, 1, ep, moe_quant_mode=moe_quant_mode)
        _apply_model_quant_defaults(config, info.get("raw_config", {}), info["architecture"], backend, model_id)
        shape = MoEBlockShape.from_model_info(info)
        systems = str(_package_root() / "systems")
        database = get_database(gpu, backend, _literal_backend_version(gpu, backend, backend_version, systems, None))
    except (KeyError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AicCoverageError(
            f"aiconfigurator-core {aic_version()} cannot price EP across nodes for {where}: {first}"
        ) from None
    resolved: dict[str, str] = {}
    if _architecture_to_model_family(info["architecture"]) in LARGE_EP_READY_FAMILIES and database is not None:
        sm_version = database.system_spec.get("gpu", {}).get("sm_version")
        nodes = nodes_for(ep, per_node)
        quant = config.moe_quant_mode
        for phase in dict.fromkeys(phases):
            a2a = database.moe_a2a_coverage(shape.hidden_size, shape.topk, shape.num_experts, quant, phase)
            compute = database.moe_expert_compute_coverage(
                shape.hidden_size, shape.moe_inter_size, shape.topk, shape.num_experts, quant, phase
            )
            if backend in ("vllm", "trtllm"):
                compute |= database.legacy_moe_compute_coverage(
                    shape.hidden_size, shape.moe_inter_size, shape.topk, shape.num_experts, quant
                )
            for name, spec in MOE_A2A_BACKENDS.items():
                if backend not in spec.frameworks or phase not in spec.inference_phases:
                    continue
                if backend == "trtllm" and attention_dp <= 1:
                    continue
                pairs = a2a.get(name, set())
                covered = (ep, nodes) in pairs or (
                    name in _DEEPEP_NODE1_FALLBACK
                    and ((8, 1) in pairs if backend == "sglang" else (per_node, 1) in pairs)
                )
                feasible = spec.feasible(
                    topk=shape.topk,
                    num_experts=shape.num_experts,
                    moe_tp_size=1,
                    moe_ep_size=ep,
                    sm_version=int(sm_version) if sm_version is not None else None,
                )
                if covered and ep in compute and feasible:
                    resolved[phase] = name
                    break
    missing = [phase for phase in phases if phase not in resolved]
    if missing:
        raise AicCoverageError(
            f"aiconfigurator-core {aic_version()} has no large-EP (all-to-all + wide-EP MoE) data for {where}, "
            f"MoE {getattr(config.moe_quant_mode, 'name', config.moe_quant_mode)}, phase(s) {', '.join(missing)}; "
            "its own estimate refuses EP across nodes without it"
        )
    return resolved


@dataclass(frozen=True)
class HybridPool:
    """One rank's memory as SGLang splits it for a hybrid linear-attention model (:func:`sglang_hybrid_pool`)."""

    kv_tokens: int
    """Full-attention KV pool in tokens."""
    state_slots: int
    """Requests whose linear-attention state the mamba pool holds (``max_mamba_cache_size``)."""
    max_running_requests: int
    """The scheduler's cap on running requests the state pool allows."""


@dataclass(frozen=True)
class MemoryBreakdown:
    """One GPU's memory as aiconfigurator-core's SGLang memory model counts it (bytes, per GPU)."""

    gpu_memory_bytes: float
    """The system file's ``gpu.mem_capacity``."""
    weights_bytes: float
    """Weights at the engine's precisions and parallelism (its model's ops)."""
    activations_bytes: float
    """Activations of an 8,192-token forward pass, with the MoE dispatch workspace and SGLang's 15 % overhead."""
    nccl_bytes: float
    """The system file's NCCL buffers at the TP degree."""
    others_bytes: float
    """The system file's CUDA context / cuBLAS estimate with SGLang's 20 % overhead."""
    kv_bytes_per_token: float
    """Full-attention KV bytes of one token on one GPU (a hybrid model's linear-attention state excluded)."""


def sglang_hybrid_pool(
    budget_bytes: float,
    kv_bytes_per_token: float,
    state_bytes_per_request: float,
    *,
    disable_radix_cache: bool,
    max_running_requests: int | None = None,
    max_mamba_cache_size: int | None = None,
    mamba_full_memory_ratio: float = SGLANG_MAMBA_FULL_MEMORY_RATIO,
) -> HybridPool:
    """SGLang's split of a hybrid model's memory budget into a linear-attention state pool and a KV pool.

    Mirrors ``ModelRunnerKVCacheMixin.handle_max_mamba_cache`` and the mamba branch of ``init_memory_pool``
    (SGLang 0.5.x, ``python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py``; no speculative decoding,
    no attention-DP): with ``--disable-radix-cache`` (or an explicit ``--max-mamba-cache-size``) the state pool holds
    ``max_mamba_cache_size`` (default ``max_running_requests``, else 512) requests and running requests are capped at
    that; with the radix cache the budget is split so that state memory / KV memory = ``mamba_full_memory_ratio``
    (default 0.9) and running requests are capped at a third of the state slots. The KV pool is what the state pool
    leaves, in tokens of the full-attention layers only.

    Args:
        budget_bytes: one rank's KV budget (``mem_fraction_static`` × GPU memory less weights, activations, ...).
        kv_bytes_per_token: full-attention KV bytes per token on the rank.
        state_bytes_per_request: linear-attention state (recurrent state + conv window) of one request on the rank.
        disable_radix_cache: SGLang's ``--disable-radix-cache``.
        max_running_requests: ``--max-running-requests`` (None: SGLang's default).
        max_mamba_cache_size: ``--max-mamba-cache-size`` (None: derived as above).
        mamba_full_memory_ratio: ``--mamba-full-memory-ratio``.

    Raises:
        AicCoverageError: sizes that are not positive, or a budget the state pool leaves no KV tokens in.
    """
    if budget_bytes <= 0 or kv_bytes_per_token <= 0 or state_bytes_per_request <= 0 or mamba_full_memory_ratio <= 0:
        raise AicCoverageError(
            "hybrid pool sizes must be positive: "
            f"budget={budget_bytes}, kv/token={kv_bytes_per_token}, state/request={state_bytes_per_request}"
        )
    if disable_radix_cache or max_mamba_cache_size is not None:
        slots = max_mamba_cache_size or max_running_requests or SGLANG_MAMBA_SLOTS_WITHOUT_RADIX
    else:
        state_budget = budget_bytes * mamba_full_memory_ratio / (1 + mamba_full_memory_ratio)
        slots = int(state_budget // state_bytes_per_request)
    kv_tokens = int((budget_bytes - slots * state_bytes_per_request) // kv_bytes_per_token)
    if kv_tokens <= 0 or slots <= 0:
        raise AicCoverageError(
            f"SGLang's state pool of {slots} requests x {state_bytes_per_request:.0f} bytes leaves no KV pool in "
            f"{budget_bytes:.0f} bytes"
        )
    ratio = 1 if disable_radix_cache else SGLANG_MAMBA_SLOTS_PER_RUNNING_REQUEST
    cap = slots // ratio
    if max_running_requests is not None:
        cap = min(cap, max_running_requests)
    return HybridPool(kv_tokens=kv_tokens, state_slots=slots, max_running_requests=cap)


def _hf_config(model_id: str) -> dict[str, Any]:
    """The model's HuggingFace ``config.json`` as aiconfigurator-core ships it (``model_configs/``)."""
    path = _package_root() / "model_configs" / f"{model_id.replace('/', '--')}_config.json"
    if not path.is_file():
        raise AicCoverageError(f"aiconfigurator-core {aic_version()} ships no config for {model_id} ({path.name})")
    config: dict[str, Any] = json.loads(path.read_text())
    return config


def deepseek_weight_correction(
    op_bytes: dict[str, float], config: dict[str, Any], *, tp: int, attention_dp: int
) -> float:
    """Bytes per GPU that aiconfigurator-core's DeepSeek-V3 model counts beyond what SGLang loads.

    The rule is :meth:`AicStepTimes.sglang_weights_bytes`'s.

    Args:
        op_bytes: weights per GPU of each of aiconfigurator's context ops, by op name (``context_moe``,
            ``context_shared_gate_up_gemm``, ``context_shared_ffn2_gemm``, ``context_router_gemm``,
            ``context_embedding``; each counted over all ``num_hidden_layers`` layers).
        config: the model's HuggingFace config (``num_hidden_layers``, ``first_k_dense_replace``, ``moe_layer_freq``,
            ``intermediate_size``, ``moe_intermediate_size``, ``n_shared_experts``).
        tp: the engine's attention TP.
        attention_dp: the engine's attention-DP size (SGLang's ``--dp-size`` with ``--enable-dp-attention``).

    Returns:
        The bytes to take off aiconfigurator's count (negative would mean it counts less).

    Raises:
        AicCoverageError: a config whose MoE layers are not the layers from ``first_k_dense_replace`` on.
    """
    layers = int(config["num_hidden_layers"])
    dense = int(config.get("first_k_dense_replace") or 0)
    if int(config.get("moe_layer_freq") or 1) != 1:
        raise AicCoverageError(
            "deepseek_weight_correction models moe_layer_freq 1 only (every layer after the dense ones)"
        )
    moe_only = sum(
        op_bytes.get(name, 0.0)
        for name in ("context_moe", "context_shared_gate_up_gemm", "context_shared_ffn2_gemm", "context_router_gemm")
    )
    shared = op_bytes.get("context_shared_gate_up_gemm", 0.0) + op_bytes.get("context_shared_ffn2_gemm", 0.0)
    width = int(config["intermediate_size"]) / (int(config["moe_intermediate_size"]) * int(config["n_shared_experts"]))
    dense_mlp = shared / layers * dense * width / attention_dp
    embedding = op_bytes.get("context_embedding", 0.0)
    unsharded_embedding = embedding * (1 - 1 / tp) if attention_dp == 1 else 0.0
    return moe_only * dense / layers - dense_mlp + unsharded_embedding


@dataclass
class StepTimeCalibration:
    """Online correction of predicted step times from observed ones: ``observed ≈ scale × predicted + overhead_s``.

    Each :meth:`observe` takes one (predicted, observed) pair of step seconds, as a deployment's telemetry reports
    them (SGLang's per-iteration forward-pass metrics, Dynamo's FPM). The running means and (co)variances are
    exponentially weighted with ``alpha`` per sample; the fit is the weighted least-squares line through them,
    with the scale clamped to ``[min_scale, max_scale]`` as Dynamo clamps its correction factor (0.5–2×) and the
    overhead to non-negative. With too little spread in the predictions the fit is a pure ratio.
    """

    alpha: float = 0.05
    min_scale: float = 0.5
    max_scale: float = 2.0
    samples: int = 0
    _mean_x: float = 0.0
    _mean_y: float = 0.0
    _var_x: float = 0.0
    _cov_xy: float = 0.0
    scale: float = 1.0
    overhead_s: float = 0.0

    def observe(self, predicted_s: float, observed_s: float) -> None:
        """Fold one step's predicted and observed seconds into the fit."""
        if not (math.isfinite(predicted_s) and math.isfinite(observed_s)) or predicted_s <= 0 or observed_s <= 0:
            raise AicCoverageError(f"calibration sample must be positive seconds, got ({predicted_s}, {observed_s})")
        a = 1.0 if self.samples == 0 else max(self.alpha, 1.0 / (self.samples + 1))
        dx = predicted_s - self._mean_x
        dy = observed_s - self._mean_y
        self._mean_x += a * dx
        self._mean_y += a * dy
        self._var_x = (1 - a) * (self._var_x + a * dx * dx)
        self._cov_xy = (1 - a) * (self._cov_xy + a * dx * dy)
        self.samples += 1
        self._refit()

    def observe_many(self, pairs: Iterable[tuple[float, float]]) -> None:
        """:meth:`observe` each (predicted, observed) pair in order."""
        for predicted, observed in pairs:
            self.observe(predicted, observed)

    def _refit(self) -> None:
        spread = self._var_x / max(self._mean_x * self._mean_x, 1e-30)
        if self.samples >= 3 and spread > 1e-4:
            scale = self._cov_xy / self._var_x
            scale = min(max(scale, self.min_scale), self.max_scale)
            overhead = self._mean_y - scale * self._mean_x
            if overhead < 0:
                scale, overhead = self._mean_y / self._mean_x, 0.0
        else:
            scale, overhead = self._mean_y / self._mean_x, 0.0
        self.scale = min(max(scale, self.min_scale), self.max_scale)
        self.overhead_s = max(overhead, 0.0)

    def apply(self, predicted_s: float) -> float:
        """The corrected step seconds (0 stays 0: no step, no overhead)."""
        if predicted_s <= 0:
            return 0.0
        return self.scale * predicted_s + self.overhead_s

    def describe(self) -> str:
        """``scale=… overhead_ms=… samples=…`` for reports."""
        return f"scale={self.scale:.3f} overhead_ms={self.overhead_s * 1e3:.2f} samples={self.samples}"


def _snap(value: float, bits: int | None) -> int:
    """``value`` rounded to a multiple of ``2**(floor(log2 value) - bits)``: ``2**bits`` steps per octave.

    Powers of two stay exact (the engine's tables step there); values up to ``2**bits`` and any value when
    ``bits`` is None are rounded to whole tokens only.
    """
    whole = max(round(value), 0)
    if bits is None or whole <= 1 << bits:
        return whole
    quantum = 1 << (whole.bit_length() - 1 - bits)
    return round(value / quantum) * quantum


@dataclass(eq=False)
class AicStepTimes:
    """A :class:`~pearl_sched.sim.steptimes.StepTimes` backed by aiconfigurator-core's compiled engine.

    Args:
        model: a shipped model config by HuggingFace id or short name (``qwen3-8b``).
        gpu: an aiconfigurator system name (``h200_sxm``, ``b200_sxm``, ``a100_sxm``, ...).
        backend: ``sglang``, ``vllm`` or ``trtllm``.
        tp: tensor parallel size (attention).
        attention_dp: attention data-parallel size (MoE models).
        moe_tp: MoE tensor parallel size (default ``tp × attention_dp / moe_ep``: SGLang shards experts by TP
            unless expert parallelism is asked for).
        moe_ep: MoE expert parallel size.
        backend_version: a version or slot alias the system ships (default: the engine's current one).
        gemm_quant_mode: GEMM precision as aiconfigurator names it (``bfloat16``, ``fp8``, ``fp8_block``,
            ``nvfp4``, ...); default: inferred from the model config, as the engine does.
        moe_quant_mode: MoE expert precision, likewise.
        kvcache_quant_mode: KV-cache precision, likewise.
        fmha_quant_mode: attention precision, likewise.
        calibration: an online correction from observed step times (none: the engine's kernel sums only).
        snap_bits: memoisation grid, ``2**snap_bits`` steps per octave of each token argument (about 1.1–1.6% at
            the default 6; powers of two exact); None: exact whole tokens.
        phases: the phases this worker runs (``("context",)`` for a PD prefill role, ``("generation",)`` for a decode
            role): the ones whose large-EP data EP across nodes requires (:func:`large_ep_comm`).
    """

    model: str
    gpu: str
    backend: str = "sglang"
    tp: int = 1
    attention_dp: int = 1
    moe_tp: int | None = None
    moe_ep: int | None = None
    backend_version: str | None = None
    gemm_quant_mode: str | None = None
    moe_quant_mode: str | None = None
    kvcache_quant_mode: str | None = None
    fmha_quant_mode: str | None = None
    calibration: StepTimeCalibration | None = None
    snap_bits: int | None = 6
    phases: tuple[str, ...] = PHASES
    model_id: str = field(init=False)
    moe_comm_backend: dict[str, str] | None = field(init=False, default=None)
    """The large-EP all-to-all backend per phase (:func:`large_ep_comm`); None: the fused MoE graph."""
    _handle: Any = field(init=False, repr=False)
    _model: Any = field(init=False, repr=False, default=None)
    _memory: MemoryBreakdown | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        """Check coverage, compile the engine and probe one call of each kind (raises :class:`AicCoverageError`)."""
        root = _package_root()
        if self.backend not in BACKENDS:
            raise AicCoverageError(f"aiconfigurator-core has no backend {self.backend!r}; supported: {BACKENDS}")
        systems = supported_systems(self.backend)
        if self.gpu not in systems:
            raise AicCoverageError(
                f"aiconfigurator-core {aic_version()} has no {self.backend} perf data for GPU {self.gpu!r}; "
                f"supported for {self.backend}: {', '.join(systems)}"
            )
        self.model_id = resolve_model(self.model)
        moe_tp = self._moe_tp()
        if not self.phases or any(phase not in PHASES for phase in self.phases):
            raise AicCoverageError(f"phases must be a non-empty subset of {PHASES}, got {self.phases!r}")
        self.moe_comm_backend = large_ep_comm(
            self.model_id,
            self.gpu,
            self.backend,
            tp=self.tp,
            attention_dp=self.attention_dp,
            moe_tp=moe_tp,
            moe_ep=self.moe_ep,
            moe_quant_mode=self.moe_quant_mode,
            phases=self.phases,
            backend_version=self.backend_version,
        )
        try:
            from aiconfigurator_core.sdk.engine import EngineHandle

            if self.moe_comm_backend:
                self._handle = self._compile_large_ep(str(root / "systems"), self.moe_comm_backend)
            else:
                self._handle = EngineHandle.compile(
                    self.model_id,
                    self.gpu,
                    self.backend,
                    backend_version=self.backend_version,
                    tp_size=self.tp,
                    attention_dp_size=self.attention_dp,
                    moe_tp_size=moe_tp,
                    moe_ep_size=self.moe_ep,
                    gemm_quant_mode=self.gemm_quant_mode,
                    moe_quant_mode=self.moe_quant_mode,
                    kvcache_quant_mode=self.kvcache_quant_mode,
                    fmha_quant_mode=self.fmha_quant_mode,
                    systems_path=str(root / "systems"),
                )
            # perf-data misses surface here rather than mid-simulation: one call of each kind the worker runs
            if "context" in self.phases:
                self._handle.predict_prefill_latency(1, 256, 0)
                self._handle.predict_prefill_latency(1, 256, 128)
            if "generation" in self.phases:
                self._handle.decode_step_latency(1, 255, 2)
            if len(self.phases) == len(PHASES):
                self._handle.mixed_step_breakdown(128, 1, 256, 2, 128)
        except (AssertionError, ValueError, KeyError, RuntimeError, NotImplementedError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise AicCoverageError(
                f"aiconfigurator-core {aic_version()} cannot model {self.model_id} on {self.gpu} with {self.backend}"
                f" (tp={self.tp}, attention_dp={self.attention_dp}, moe_tp={moe_tp}, moe_ep={self.moe_ep}): {first}"
            ) from None
        self._prefill_ms = functools.lru_cache(maxsize=1 << 16)(self._prefill_ms_exact)
        self._decode_ms = functools.lru_cache(maxsize=1 << 16)(self._decode_ms_exact)
        self._mixed_ms = functools.lru_cache(maxsize=1 << 16)(self._mixed_ms_exact)

    def _compile_large_ep(self, systems: str, comm: dict[str, str]) -> Any:
        """``EngineHandle.compile``'s steps with aiconfigurator's large-EP selection in the model config.

        ``compile_engine`` has no argument for it; its ``ModelConfig`` is built the same way, given the per-phase
        all-to-all backend and the node width as aiconfigurator's resolver sets them, and, for DeepSeek-V3-family
        checkpoints on SGLang, FP8 KV cache and ``fp8_block`` attention unless asked otherwise (the resolver's
        defaults there: SGLang's wide-EP MLA tables are collected in those precisions).
        """
        import aiconfigurator_core
        from aiconfigurator_core.sdk.engine import EngineHandle, _literal_backend_version, build_engine_spec_json
        from aiconfigurator_core.sdk.models import get_model
        from aiconfigurator_core.sdk.models.helpers import _get_model_info
        from aiconfigurator_core.sdk.perf_database import get_database

        if self.backend == "sglang" and _get_model_info(self.model_id)["architecture"] == "DeepseekV3ForCausalLM":
            self.fmha_quant_mode = self.fmha_quant_mode or "fp8_block"
            self.kvcache_quant_mode = self.kvcache_quant_mode or "fp8"
        config = self._model_config(moe_tp=1)
        config.moe_comm_backend = dict(comm)
        config.num_gpus_per_node = gpus_per_node(self.gpu)
        config.system = self.gpu
        model = get_model(self.model_id, config, self.backend)
        version = _literal_backend_version(self.gpu, self.backend, self.backend_version, systems, None)
        database = get_database(self.gpu, self.backend, version, systems_paths=systems)
        spec = build_engine_spec_json(
            model,
            model_path=self.model_id,
            system=self.gpu,
            backend=self.backend,
            backend_version=version,
            kv_block_size=None,
            systems_path=systems,
            nextn=0,
            database=database,
        )
        return EngineHandle(bytes(aiconfigurator_core.engine_spec_bincode_from_json(spec)), systems_path=systems)

    def _moe_tp(self) -> int:
        return self.moe_tp if self.moe_tp is not None else self.tp * self.attention_dp // (self.moe_ep or 1)

    # -- provenance -----------------------------------------------------------------------------------------
    @property
    def source(self) -> str:
        """Which path produced these step times, for every report."""
        par = f"tp{self.tp}"
        if self.attention_dp > 1:
            par += f" adp{self.attention_dp}"
        if self.moe_ep:
            par += f" ep{self.moe_ep}"
        version = self.backend_version or "current"
        if self.gemm_quant_mode:
            par += f" {self.gemm_quant_mode}"
        if self.moe_comm_backend:
            par += " large-EP " + "/".join(f"{phase}:{name}" for phase, name in self.moe_comm_backend.items())
        cal = f"; calibrated {self.calibration.describe()}" if self.calibration else "; uncalibrated"
        return (
            f"aiconfigurator-core {aic_version()} engine: {self.model_id} {self.gpu} {self.backend}@{version} "
            f"{par}{cal}"
        )

    @property
    def handle(self) -> Any:
        """The underlying ``aiconfigurator_core.sdk.engine.EngineHandle`` (for direct comparison)."""
        return self._handle

    # -- exact engine calls (milliseconds), memoised by the wrappers above ----------------------------------
    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except (ValueError, RuntimeError) as exc:  # aiconfigurator_core.sdk.errors: perf data missing at a shape
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise AicCoverageError(
                f"aiconfigurator-core {aic_version()} has no {what} data for {self.model_id} on {self.gpu} "
                f"({self.backend}, tp={self.tp}) at {args}: {first}"
            ) from None

    def _prefill_ms_exact(self, per_seq: int, sequences: int, cached: int) -> float:
        h = self._handle
        return float(self._call("prefill", h.predict_prefill_latency, sequences, per_seq + cached, cached))

    def _decode_ms_exact(self, batch: int, context: int) -> float:
        return float(self._call("decode", self._handle.decode_step_latency, batch, max(context - 1, 1), 2))

    def _mixed_ms_exact(self, per_seq: int, sequences: int, cached: int, batch: int, context: int) -> float:
        new = per_seq * sequences
        isl = per_seq + cached
        breakdown = self._handle.mixed_step_breakdown
        with_decode = self._call("mixed", breakdown, new, batch, isl, 2, cached)
        alone = self._call("mixed", breakdown, new, 0, isl, 2, cached)
        at_context = self._call("mixed", breakdown, new, batch, max(context - 1, 1), 2, 0)
        prefill_attention = self._prefill_ms(per_seq, sequences, cached) - alone[1]
        return float(with_decode[1] + max(prefill_attention, 0.0) + at_context[3])

    def _corrected(self, ms: float) -> float:
        seconds = ms / 1e3
        return self.calibration.apply(seconds) if self.calibration else seconds

    # -- StepTimes ------------------------------------------------------------------------------------------
    def raw_prefill_s(self, new_tokens: float, sequences: int, cached_tokens: float) -> float:
        """:meth:`prefill_s` before calibration (what the engine itself predicts)."""
        if new_tokens <= 0 or sequences <= 0:
            return 0.0
        per_seq = max(_snap(new_tokens / sequences, self.snap_bits), 1)
        return self._prefill_ms(per_seq, sequences, _snap(cached_tokens, self.snap_bits)) / 1e3

    def raw_decode_s(self, batch: int, context_tokens: float) -> float:
        """:meth:`decode_s` before calibration."""
        if batch <= 0:
            return 0.0
        return self._decode_ms(_snap(batch, self.snap_bits), max(_snap(context_tokens, self.snap_bits), 1)) / 1e3

    def raw_mixed_s(
        self,
        prefill_new_tokens: float,
        prefill_sequences: int,
        prefill_cached_tokens: float,
        decode_batch: int,
        decode_context_tokens: float,
    ) -> float:
        """:meth:`mixed_s` before calibration."""
        if prefill_new_tokens <= 0 or prefill_sequences <= 0:
            return self.raw_decode_s(decode_batch, decode_context_tokens)
        if decode_batch <= 0:
            return self.raw_prefill_s(prefill_new_tokens, prefill_sequences, prefill_cached_tokens)
        per_seq = max(_snap(prefill_new_tokens / prefill_sequences, self.snap_bits), 1)
        ms = self._mixed_ms(
            per_seq,
            prefill_sequences,
            _snap(prefill_cached_tokens, self.snap_bits),
            _snap(decode_batch, self.snap_bits),
            max(_snap(decode_context_tokens, self.snap_bits), 1),
        )
        return ms / 1e3

    def prefill_s(self, new_tokens: float, sequences: int, cached_tokens: float) -> float:
        """A prefill batch of ``sequences`` with ``new_tokens`` in all, after ``cached_tokens`` each on average."""
        return self._corrected(self.raw_prefill_s(new_tokens, sequences, cached_tokens) * 1e3)

    def decode_s(self, batch: int, context_tokens: float) -> float:
        """One decode iteration of ``batch`` sequences of mean context ``context_tokens``."""
        return self._corrected(self.raw_decode_s(batch, context_tokens) * 1e3)

    def mixed_s(
        self,
        prefill_new_tokens: float,
        prefill_sequences: int,
        prefill_cached_tokens: float,
        decode_batch: int,
        decode_context_tokens: float,
    ) -> float:
        """One forward pass running a prefill chunk together with a decode batch."""
        raw = self.raw_mixed_s(
            prefill_new_tokens, prefill_sequences, prefill_cached_tokens, decode_batch, decode_context_tokens
        )
        return self._corrected(raw * 1e3)

    def kv_capacity_tokens(
        self, mem_fraction_static: float | None = None, *, pool_source: str = "aiconfigurator"
    ) -> int:
        """KV tokens per rank (per GPU's share of every token), from ``pool_source`` (:data:`KV_POOL_SOURCES`).

        ``aiconfigurator``: aiconfigurator-core's estimate (its ``estimate_kv_cache``): ``mem_fraction_static``
        (SGLang) or ``gpu_memory_utilization`` (vLLM) of the GPU less its weights, activations, NCCL and runtime
        estimates; the fraction defaults to aiconfigurator-core's ``derive_sglang_mem_fraction_static`` or vLLM's 0.9.
        ``sglang``: SGLang's own derivation (:meth:`sglang_kv_budget_bytes`), SGLang backend only.

        Raises:
            AicCoverageError: the source leaves no KV pool (the message says what took the memory), or an
                unknown source.
        """
        if self.backend == "trtllm":
            raise AicCoverageError("kv_capacity_tokens models SGLang's and vLLM's pools, not TensorRT-LLM's")
        if pool_source == "sglang":
            return int(self.sglang_kv_budget_bytes(mem_fraction_static) // self.memory_breakdown().kv_bytes_per_token)
        if pool_source != "aiconfigurator":
            raise AicCoverageError(f"unknown KV pool source {pool_source!r}; known: {', '.join(KV_POOL_SOURCES)}")
        if mem_fraction_static is None:
            mem_fraction_static = self._sglang_fraction() if self.backend == "sglang" else VLLM_GPU_MEMORY_UTILIZATION
        return int(self._kv_estimate(mem_fraction_static)["total_kv_size_tokens"])

    def sglang_mem_fraction_static(self) -> float:
        """SGLang's default ``--mem-fraction-static`` for this engine (``ServerArgs._handle_gpu_memory_settings``).

        :func:`pearl_sched.sim.memory.default_mem_fraction_static` with SGLang's ``--tp-size`` = every GPU of the
        engine (``tp × attention_dp``: with ``--enable-dp-attention`` the attention TP is ``tp-size / dp-size``) and
        ``--dp-size`` = ``attention_dp``. aiconfigurator-core's ``derive_sglang_mem_fraction_static`` is called with
        the attention TP instead, which under-reserves attention-DP engines (H200 attention-DP 8: 0.864 against
        SGLang's 0.770).
        """
        from pearl_sched.sim.memory import default_mem_fraction_static

        gpus = self.tp * self.attention_dp
        return default_mem_fraction_static(self.gpu_memory_bytes(), gpus, dp_attention=self.attention_dp)

    def sglang_kv_budget_bytes(self, mem_fraction_static: float | None = None) -> float:
        """One GPU's KV budget as SGLang derives it: ``memory × mem_fraction_static − weights`` (bytes).

        SGLang's ``ModelRunner.profile_max_num_token`` (``model_runner.py`` in 0.5.5, ``model_runner_kv_cache_mixin.py``
        in 0.5.9) takes ``rest = available after loading − total × (1 − mem_fraction_static)``, i.e. the fraction of
        the memory free before loading less the weights; activations and CUDA graphs live in the ``1 −
        mem_fraction_static`` that ``_handle_gpu_memory_settings`` reserved for them, so nothing else is subtracted
        (:func:`pearl_sched.sim.memory.kv_pool_tokens`, here per GPU). The weights are aiconfigurator-core's count at
        the engine's precisions and parallelism; the memory is the system file's, taken whole as the rollout world
        takes it (SGLang measures it after the CUDA context and NCCL buffers, a few hundred MiB less).

        Raises:
            AicCoverageError: the weights leave no KV pool at that fraction (SGLang would refuse to start).
        """
        from pearl_sched.sim.memory import kv_pool_tokens

        if self.backend != "sglang":
            raise AicCoverageError("the sglang KV pool source models SGLang's pool only")
        memory = self.memory_breakdown()
        weights = self.sglang_weights_bytes()
        fraction = self.sglang_mem_fraction_static() if mem_fraction_static is None else mem_fraction_static
        try:
            kv_pool_tokens(
                gpu_memory_bytes=memory.gpu_memory_bytes,
                tp=1,
                weights_bytes=weights,
                kv_bytes_per_token=memory.kv_bytes_per_token,
                mem_fraction_static=fraction,
            )
        except ValueError:
            raise AicCoverageError(
                f"no KV pool at SGLang's mem_fraction_static {fraction}: weights {weights / 2**30:.1f} "
                f"GiB per GPU > {memory.gpu_memory_bytes * fraction / 2**30:.1f} GiB"
            ) from None
        return memory.gpu_memory_bytes * fraction - weights

    def sglang_weights_bytes(self) -> float:
        """One GPU's weights as SGLang loads them: aiconfigurator-core's count, corrected where its model differs.

        aiconfigurator-core 0.12.0's DeepSeek-V3 model (``sdk/models/deepseek.py``, family ``DEEPSEEK``: DeepSeek-V3
        and R1) prices every one of ``num_hidden_layers`` layers as an MoE layer and counts the token embedding
        unsharded. The model's own config (``config.json`` of the HuggingFace checkpoint, as aiconfigurator-core ships
        it in ``model_configs/``) makes the first ``first_k_dense_replace`` layers dense MLPs of ``intermediate_size``
        (SGLang's ``DeepseekV2DecoderLayer``: ``is_layer_sparse`` only from that layer on), and SGLang shards the
        embedding over every GPU of the engine unless attention-DP is on (``VocabParallelEmbedding(...,
        enable_tp=not is_dp_attention_enabled())`` in ``DeepseekV2Model``). So, per GPU
        (:func:`deepseek_weight_correction`):

        * the routed experts, the shared experts and the router are counted for the MoE layers only (× moe / all
          layers);
        * each dense layer's MLP is its shared-expert GEMMs' bytes × ``intermediate_size / (moe_intermediate_size ×
          n_shared_experts)`` (the same GEMMs at the dense width, at the GEMMs' own precision), sharded over every GPU
          as SGLang's default ``DeepseekV2MLP`` is (aiconfigurator shards shared experts by the attention TP);
        * the embedding is divided by the engine's TP when attention-DP is off.

        Other models: aiconfigurator-core's count unchanged. The ``aiconfigurator`` pool source never uses this.
        """
        memory = self.memory_breakdown()
        model = self._aic_model()
        if model.model_family != "DEEPSEEK":
            return memory.weights_bytes
        op_bytes = {op._name: float(op.get_weights()) for op in model.context_ops}
        return memory.weights_bytes - deepseek_weight_correction(
            op_bytes, _hf_config(self.model_id), tp=self.tp, attention_dp=self.attention_dp
        )

    def memory_breakdown(self) -> MemoryBreakdown:
        """One GPU's memory as aiconfigurator-core's SGLang/vLLM memory model counts it (what its estimate subtracts).

        ``KVCacheEstimator.from_request(...).breakdown`` (aiconfigurator-core ``sdk/memory.py``) at the engine's
        model, GPU, parallelism and precisions, 8,192 tokens per forward pass as :meth:`kv_capacity_tokens` asks.
        """
        if self._memory is None:
            from aiconfigurator_core.sdk.memory import KVCacheEstimator

            try:
                parts = KVCacheEstimator.from_request(**self._estimate_kwargs()).breakdown
            except Exception as exc:  # the model or perf database cannot be built for this layout
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise AicCoverageError(
                    f"aiconfigurator-core {aic_version()} has no memory model for {self.model_id} on {self.gpu}: "
                    f"{first}"
                ) from None
            state = self.linear_state_bytes_per_request()
            self._memory = MemoryBreakdown(
                gpu_memory_bytes=float(parts["gpu_memory_capacity_bytes"]),
                weights_bytes=float(parts["weights_bytes"]),
                activations_bytes=float(parts["activations_bytes"]),
                nccl_bytes=float(parts["comm_overhead_bytes"]),
                others_bytes=float(parts["runtime_overhead_bytes"]),
                kv_bytes_per_token=float(math.floor(parts["kv_size_per_token_bytes"])) - state,
            )
        return self._memory

    def linear_state_bytes_per_request(self) -> float:
        """One request's linear-attention state on one GPU (0 for models without linear-attention layers).

        aiconfigurator-core's own figure (the Qwen3.5 model's ``get_kvcache_bytes_per_sequence(0)``: the Gated
        DeltaNet recurrent state in the config's ``mamba_ssm_dtype`` plus the conv window, per GDN layer, TP-sharded).
        """
        model = self._aic_model()
        if model.model_family not in _LINEAR_STATE_FAMILIES:
            return 0.0
        return float(model.get_kvcache_bytes_per_sequence(0))

    def sglang_hybrid_pool(
        self,
        *,
        disable_radix_cache: bool,
        max_running_requests: int | None = None,
        pool_source: str = "aiconfigurator",
        mem_fraction_static: float | None = None,
    ) -> HybridPool | None:
        """SGLang's state and KV pools of one rank for a hybrid linear-attention model; None for other models.

        The budget is ``pool_source``'s (:meth:`kv_capacity_tokens`: aiconfigurator-core's ``total_kv_size_bytes`` at
        its SGLang ``mem_fraction_static``, or SGLang's :meth:`sglang_kv_budget_bytes`), split as SGLang splits it
        (:func:`sglang_hybrid_pool`). aiconfigurator-core's own token count charges the whole budget to the KV pool
        less one request's state, as if no state pool existed. ``mem_fraction_static``: a launch's
        ``--mem-fraction-static`` (None: SGLang's default for the engine, or aiconfigurator-core's derivation of it).
        """
        if self.backend != "sglang":
            raise AicCoverageError("sglang_hybrid_pool models SGLang's memory pools only")
        state = self.linear_state_bytes_per_request()
        if state <= 0:
            return None
        model = self._aic_model()
        per_token = float(model.get_kvcache_bytes_per_sequence(1)) - state
        if pool_source == "sglang":
            budget = self.sglang_kv_budget_bytes(mem_fraction_static)
        elif pool_source == "aiconfigurator":
            fraction = self._sglang_fraction() if mem_fraction_static is None else mem_fraction_static
            budget = float(self._kv_estimate(fraction)["total_kv_size_bytes"])
        else:
            raise AicCoverageError(f"unknown KV pool source {pool_source!r}; known: {', '.join(KV_POOL_SOURCES)}")
        return sglang_hybrid_pool(
            budget,
            per_token,
            state,
            disable_radix_cache=disable_radix_cache,
            max_running_requests=max_running_requests,
        )

    def _aic_model(self) -> Any:
        """aiconfigurator-core's model at this engine's parallelism and precisions, as its KV estimate builds it."""
        if self._model is None:
            from aiconfigurator_core.sdk.models import get_model

            self._model = get_model(self.model_id, self._model_config(moe_tp=self._moe_tp()), self.backend)
        return self._model

    def _model_config(self, *, moe_tp: int) -> Any:
        """aiconfigurator-core's ``ModelConfig`` at this engine's parallelism (MoE TP ``moe_tp``) and precisions."""
        from aiconfigurator_core.sdk.config_builders import build_model_config

        return build_model_config(
            tp_size=self.tp,
            pp_size=1,
            attention_dp_size=self.attention_dp,
            moe_tp_size=moe_tp,
            moe_ep_size=self.moe_ep or 1,
            gemm_quant_mode=self.gemm_quant_mode,
            kvcache_quant_mode=self.kvcache_quant_mode,
            fmha_quant_mode=self.fmha_quant_mode,
            moe_quant_mode=self.moe_quant_mode,
        )

    def kv_bytes_per_token(self) -> float:
        """KV bytes one rank holds per token over its ``tp`` GPUs (aiconfigurator-core's per-GPU size × ``tp``).

        This is what a PD transfer sends per prompt token: each GPU of the prefill rank sends its share over its own
        link. For MLA models every GPU holds the whole latent, so this counts it ``tp`` times, as the GPUs hold it.
        For a hybrid linear-attention model it is the full-attention layers' KV only: aiconfigurator-core's
        ``kv_size_per_token_bytes`` is one sequence of one token, which includes the request's constant
        linear-attention state (:meth:`linear_state_bytes_per_request`), not a per-token cost.
        """
        if self.backend == "trtllm":
            raise AicCoverageError("kv_bytes_per_token models SGLang's and vLLM's pools, not TensorRT-LLM's")
        return self.memory_breakdown().kv_bytes_per_token * self.tp

    def _estimate_kwargs(self) -> dict[str, Any]:
        """aiconfigurator-core's memory-model arguments for this engine (its KV estimate and ``KVCacheEstimator``)."""
        from aiconfigurator_core.sdk.engine import _literal_backend_version

        systems = str(_package_root() / "systems")
        return {
            "model_path": self.model_id,
            "system": self.gpu,
            "backend": self.backend,
            "backend_version": _literal_backend_version(self.gpu, self.backend, self.backend_version, systems, None),
            "max_num_tokens": 8192,
            "max_batch_size": 256,
            "tp_size": self.tp,
            "attention_dp_size": self.attention_dp,
            "moe_tp_size": self._moe_tp(),
            "moe_ep_size": self.moe_ep,
            "gemm_quant_mode": self.gemm_quant_mode,
            "moe_quant_mode": self.moe_quant_mode,
            "kvcache_quant_mode": self.kvcache_quant_mode,
            "fmha_quant_mode": self.fmha_quant_mode,
            "systems_path": systems,
        }

    def _kv_estimate(self, mem_fraction_static: float) -> dict[str, Any]:
        from aiconfigurator_core.sdk.memory import estimate_kv_cache

        try:
            estimate = estimate_kv_cache(
                **self._estimate_kwargs(),
                memory_fraction_kind="of_total",
                memory_fraction_value=mem_fraction_static,
            )
        except ValueError as exc:
            reason = str(exc).splitlines()[0]
            if "no KV budget" in reason:  # say what took the memory, per GPU
                m = self.memory_breakdown()
                reason = (
                    f"weights {m.weights_bytes / 2**30:.1f} + activations {m.activations_bytes / 2**30:.1f} + NCCL "
                    f"{m.nccl_bytes / 2**30:.1f} + runtime {m.others_bytes / 2**30:.1f} GiB per GPU > "
                    f"{m.gpu_memory_bytes * mem_fraction_static / 2**30:.1f} GiB"
                )
            raise AicCoverageError(
                f"no KV pool in aiconfigurator-core's estimate at mem_fraction_static {mem_fraction_static}: {reason}"
            ) from None
        return dict(estimate)

    def gpu_memory_bytes(self) -> int:
        """One GPU's memory as the aiconfigurator system file gives it (``gpu.mem_capacity``)."""
        import yaml  # aiconfigurator-core depends on PyYAML

        system = yaml.safe_load((_package_root() / "systems" / f"{self.gpu}.yaml").read_text())
        return int(system["gpu"]["mem_capacity"])

    def _sglang_fraction(self) -> float:
        from aiconfigurator_core.sdk.backends.sglang_backend import derive_sglang_mem_fraction_static

        capacity = self.gpu_memory_bytes()
        return float(derive_sglang_mem_fraction_static(capacity, tp_size=self.tp, dp_size=self.attention_dp))
