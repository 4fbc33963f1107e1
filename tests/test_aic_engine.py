"""aiconfigurator-core step times: agreement with the engine's own API, coverage errors, calibration, mixed steps."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("aiconfigurator_core", reason="the aic extra (aiconfigurator-core) is not installed")

from aiconfigurator_core.sdk.engine import EngineHandle

from pearl_sched.errors import PearlSchedError
from pearl_sched.profiles.aic_engine import (
    AicCoverageError,
    AicStepTimes,
    StepTimeCalibration,
    large_ep_comm,
    resolve_model,
    sglang_hybrid_pool,
    supported_models,
)
from pearl_sched.sim.steptimes import StepTimes

CASES = [
    ("qwen3-8b", "h200_sxm", "sglang", {"tp": 2}),
    ("Qwen/Qwen3-32B", "h200_sxm", "sglang", {"tp": 1}),
    ("Qwen/Qwen3-30B-A3B", "h200_sxm", "sglang", {"tp": 2, "moe_ep": 2}),
    ("meta-llama/Meta-Llama-3.1-8B", "h100_sxm", "vllm", {"tp": 1}),
    ("Qwen/Qwen3-8B", "b200_sxm", "trtllm", {"tp": 4}),
]


@pytest.fixture(scope="module")
def qwen8b() -> AicStepTimes:
    return AicStepTimes("qwen3-8b", "h200_sxm", tp=2)


@pytest.mark.parametrize(("model", "gpu", "backend", "par"), CASES)
def test_engine_calls_match_aiconfigurator_core(model: str, gpu: str, backend: str, par: dict[str, int]) -> None:
    steps = AicStepTimes(model, gpu, backend, snap_bits=None, **par)  # type: ignore[arg-type]
    ref = EngineHandle.compile(
        resolve_model(model),
        gpu,
        backend,
        tp_size=par["tp"],
        moe_tp_size=1 if par.get("moe_ep") else None,
        moe_ep_size=par.get("moe_ep"),
    )
    assert isinstance(steps, StepTimes)
    for isl, prefix, bs in [(4096, 0, 1), (1000, 0, 3), (8192, 4096, 1), (300, 100, 8)]:
        assert steps.prefill_s((isl - prefix) * bs, bs, prefix) == pytest.approx(
            ref.predict_prefill_latency(bs, isl, prefix) / 1e3, rel=1e-12
        )
    for batch, context in [(1, 500), (64, 4097), (200, 20001)]:
        assert steps.decode_s(batch, context) == pytest.approx(ref.decode_step_latency(batch, context - 1, 2) / 1e3)
    # one uncached prompt whose length equals the decode context: exactly the engine's own mixed step
    for chunk, batch in [(2048, 64), (512, 8)]:
        expected = ref.mixed_step_latency(chunk, batch, chunk, 2, 0) / 1e3
        assert steps.mixed_s(chunk, 1, 0, batch, chunk + 1) == pytest.approx(expected, rel=1e-9)
    assert steps.source.startswith("aiconfigurator-core ") and backend in steps.source


def test_snapped_calls_stay_within_the_grid(qwen8b: AicStepTimes) -> None:
    exact = AicStepTimes("qwen3-8b", "h200_sxm", tp=2, snap_bits=None)
    rng = random.Random(0)
    for _ in range(40):
        batch, context = rng.randint(1, 300), rng.uniform(100, 60000)
        assert qwen8b.decode_s(batch, context) == pytest.approx(exact.decode_s(batch, context), rel=0.03)
    assert qwen8b.prefill_s(4096, 1, 0) == exact.prefill_s(4096, 1, 0)  # powers of two are exact


@given(
    new=st.integers(1, 16384),
    seqs=st.integers(1, 8),
    cached=st.integers(0, 30000),
    batch=st.integers(0, 256),
    context=st.integers(1, 60000),
)
def test_mixed_step_costs_at_least_each_part(
    qwen8b: AicStepTimes, new: int, seqs: int, cached: int, batch: int, context: int
) -> None:
    mixed = qwen8b.mixed_s(new, seqs, cached, batch, context)
    prefill = qwen8b.prefill_s(new, seqs, cached)
    decode = qwen8b.decode_s(batch, context)
    # One pass reads the weights once, so it costs about no more than the two passes apart -- except where the
    # decode rows push the pass's GEMMs over a step in the engine's measured tables (4,096 -> 4,097 tokens costs
    # ~11% more on this engine; mixed at 4,080 new + 1 decode was 66.1 ms against 59.1 + 3.3 ms apart). The bound
    # is the sum times that measured step (between neighbouring points of the memo grid across 4,096, the grid
    # this fixture snaps to), not a free tolerance.
    table_step = qwen8b.prefill_s(4160, 1, 0) / qwen8b.prefill_s(4096, 1, 0)
    assert table_step > 1.0
    assert mixed <= (prefill + decode) * table_step + 1e-9
    # and it costs at least each part, within the same step: the mixed pass reads aiconfigurator's mixed-step
    # tables, the parts its prefill and decode tables (new=3,312: mixed 48.3 ms, prefill alone 49.0 ms)
    assert mixed * table_step >= max(prefill, decode)


def test_mixed_with_nothing_on_one_side_is_the_other(qwen8b: AicStepTimes) -> None:
    assert qwen8b.mixed_s(0, 0, 0, 32, 5000) == qwen8b.decode_s(32, 5000)
    assert qwen8b.mixed_s(3000, 2, 100, 0, 0) == qwen8b.prefill_s(3000, 2, 100)


@pytest.mark.parametrize(
    ("kwargs", "missing", "listed"),
    [
        ({"model": "qwen3-9b", "gpu": "h200_sxm"}, "no model config for 'qwen3-9b'", "Qwen/Qwen3-8B"),
        ({"model": "qwen3-8b", "gpu": "h800_sxm"}, "GPU 'h800_sxm'", "h200_sxm"),
        ({"model": "qwen3-8b", "gpu": "h200_sxm", "backend": "tgi"}, "no backend 'tgi'", "sglang"),
        ({"model": "qwen3-8b", "gpu": "h200_sxm", "tp": 3}, "tp=3", "divisible"),
    ],
)
def test_uncovered_cases_raise_one_clear_error(kwargs: dict[str, object], missing: str, listed: str) -> None:
    with pytest.raises(AicCoverageError) as info:
        AicStepTimes(**kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, PearlSchedError)
    assert missing in str(info.value) and listed in str(info.value)
    assert "\n" not in str(info.value)


def test_shipped_models_include_the_papers() -> None:
    models = supported_models()
    assert {"Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B"} <= set(models)
    assert resolve_model("qwen3-30b-a3b") == "Qwen/Qwen3-30B-A3B"


def test_calibration_recovers_a_known_correction() -> None:
    rng = random.Random(1)
    cal = StepTimeCalibration(alpha=0.02)
    for _ in range(2000):
        predicted = rng.uniform(0.005, 0.08)
        cal.observe(predicted, 1.3 * predicted + 0.004 + rng.gauss(0, 0.0005))
    assert cal.scale == pytest.approx(1.3, rel=0.05)
    assert cal.overhead_s == pytest.approx(0.004, rel=0.15)


def test_calibration_follows_a_drift_and_is_used_by_the_engine(qwen8b: AicStepTimes) -> None:
    cal = StepTimeCalibration(alpha=0.1)
    for predicted in [0.01, 0.02, 0.03] * 20:
        cal.observe(predicted, 1.5 * predicted)
    for predicted in [0.01, 0.02, 0.03] * 40:
        cal.observe(predicted, 1.1 * predicted)
    assert cal.scale == pytest.approx(1.1, rel=0.02) and cal.overhead_s == pytest.approx(0.0, abs=1e-4)
    steps = AicStepTimes("qwen3-8b", "h200_sxm", tp=2, calibration=cal)
    assert steps.decode_s(64, 4096) == pytest.approx(cal.apply(qwen8b.decode_s(64, 4096)))
    assert "calibrated scale=1.1" in steps.source


def test_calibration_refuses_impossible_samples() -> None:
    with pytest.raises(AicCoverageError, match="positive seconds"):
        StepTimeCalibration().observe(0.01, -1.0)


def test_kv_pool_from_sglang_memory_fraction(qwen8b: AicStepTimes) -> None:
    # Qwen3-8B: 36 layers × 8 KV heads × 128 × 2 (K,V) × 2 bytes = 147,456 B/token, half per GPU at TP2
    tokens = qwen8b.kv_capacity_tokens()
    per_gpu_pool = 141 * 2**30 * 0.9 - 8.2e9 / 2
    assert 0.75 * per_gpu_pool / 73728 < tokens < per_gpu_pool / 73728


def test_kv_bytes_per_token_is_the_ranks_kv_by_hand(qwen8b: AicStepTimes) -> None:
    # Qwen3-8B (bf16 KV): 36 layers × K and V × 8 KV heads × 128 dims × 2 bytes, split over TP 2 and summed back
    assert qwen8b.kv_bytes_per_token() == pytest.approx(36 * 2 * 8 * 128 * 2)
    # DeepSeek-V3 (MLA): 61 layers × (512 latent + 64 rope) × 2 bytes on the one GPU of an attention-DP rank
    mla = AicStepTimes(
        "deepseek-ai/DeepSeek-V3",
        "gb200",
        tp=1,
        attention_dp=4,
        moe_tp=1,
        moe_ep=4,
        gemm_quant_mode="nvfp4",
        moe_quant_mode="nvfp4",
        kvcache_quant_mode="bfloat16",
        fmha_quant_mode="bfloat16",
    )
    assert mla.kv_bytes_per_token() == pytest.approx(61 * (512 + 64) * 2)


def _aiconfigurator_decode_tpot_ms(
    gpu: str, layout: dict[str, int], batch: int, isl: int, osl: int, **quant: str
) -> float:
    """aiconfigurator's own decode-worker estimate: its SGLang backend's ``run_static(mode="static_gen")``.

    What aiconfigurator's ``DisaggInferenceSession`` runs for the decode side of a disaggregated deployment, on the
    model config its resolver builds for that side (aiconfigurator 0.12.0 ``cli_estimate`` → ``moe_comm_resolver``:
    for EP across nodes the per-phase all-to-all backend, the node width and the FP8 wide-EP attention precisions).
    Without the decode latency correction (1.08) that ``cli_estimate`` multiplies in.
    """
    from aiconfigurator_core.sdk import common
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.config import ModelConfig, RuntimeConfig
    from aiconfigurator_core.sdk.engine import _literal_backend_version
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.perf_database import get_database

    config = ModelConfig(
        tp_size=layout["tp"],
        attention_dp_size=layout["attention_dp"],
        moe_tp_size=layout["moe_tp"],
        moe_ep_size=layout["moe_ep"],
        gemm_quant_mode=common.GEMMQuantMode[quant["gemm"]],
        moe_quant_mode=common.MoEQuantMode[quant["moe"]],
    )
    if "comm" in quant:  # what aiconfigurator's resolver sets for EP across nodes
        config.moe_comm_backend = {"generation": quant["comm"]}
        config.num_gpus_per_node = int(quant["gpus_per_node"])
        config.system = gpu
        config.kvcache_quant_mode = common.KVCacheQuantMode.fp8
        config.fmha_quant_mode = common.FMHAQuantMode.fp8_block
    database = get_database(gpu, "sglang", _literal_backend_version(gpu, "sglang", None, None, None))
    model = get_model("deepseek-ai/DeepSeek-V3", config, "sglang")
    runtime = RuntimeConfig(isl=isl, osl=osl, batch_size=batch)
    summary = get_backend("sglang").run_static(model, database, runtime, mode="static_gen")
    return float(summary.get_result_dict()["tpot"])


@pytest.mark.parametrize(
    ("gpu", "layout", "quant", "large_ep"),
    [
        # GB200 NVL72 decode at attention-DP 32 / EP 32 (4 GPUs per node): EP across nodes, the large-EP graph
        ("gb200", {"tp": 1, "attention_dp": 32, "moe_tp": 1, "moe_ep": 32}, {"gemm": "fp8", "moe": "fp8_block"}, True),
        # B200 decode at attention-DP 8 / EP 8 (8 GPUs per node): within a node, the fused graph
        (
            "b200_sxm",
            {"tp": 1, "attention_dp": 8, "moe_tp": 1, "moe_ep": 8},
            {"gemm": "fp8", "moe": "fp8_block"},
            False,
        ),
    ],
)
def test_attention_dp_decode_matches_aiconfigurators_own_decode_estimate(
    gpu: str, layout: dict[str, int], quant: dict[str, str], large_ep: bool
) -> None:
    steps = AicStepTimes(
        "deepseek-ai/DeepSeek-V3",
        gpu,
        gemm_quant_mode=quant["gemm"],
        moe_quant_mode=quant["moe"],
        phases=("generation",),
        snap_bits=None,
        **layout,  # type: ignore[arg-type]
    )
    assert (steps.moe_comm_backend == {"generation": "deepep_ll"}) is large_ep
    assert ("large-EP generation:deepep_ll" in steps.source) is large_ep
    reference = dict(quant, comm="deepep_ll", gpus_per_node="4") if large_ep else quant
    for batch, isl, osl in [(16, 1024, 256), (128, 1024, 256)]:
        # the per-rank batch of an attention-DP engine, at each context the request passes through
        ours_ms = 1e3 * sum(steps.decode_s(batch, isl + k) for k in range(1, osl)) / (osl - 1)
        assert ours_ms == pytest.approx(
            _aiconfigurator_decode_tpot_ms(gpu, layout, batch, isl, osl, **reference), rel=0.01
        )


@pytest.mark.parametrize(
    ("gpu", "attention_dp", "moe_ep", "moe_quant", "phases", "missing"),
    [
        ("gb200", 32, 32, "nvfp4", ("generation",), "MoE nvfp4, phase(s) generation"),  # no NVFP4 wide-EP MoE data
        ("gb200", 8, 8, "fp8_block", ("context",), "moe_ep=8"),  # wide-EP MoE rows at EP 2, 4, 16, 32, ...: not 8
    ],
)
def test_ep_across_nodes_without_large_ep_data_is_refused(
    gpu: str, attention_dp: int, moe_ep: int, moe_quant: str, phases: tuple[str, ...], missing: str
) -> None:
    with pytest.raises(AicCoverageError) as info:
        AicStepTimes(
            "deepseek-ai/DeepSeek-V3",
            gpu,
            attention_dp=attention_dp,
            moe_tp=1,
            moe_ep=moe_ep,
            gemm_quant_mode="fp8" if moe_quant == "fp8_block" else moe_quant,
            moe_quant_mode=moe_quant,
            phases=phases,
        )
    message = str(info.value)
    assert "no large-EP" in message and missing in message and "4 GPUs per node" in message and "\n" not in message


def test_large_ep_is_only_for_ep_across_nodes() -> None:
    assert large_ep_comm("Qwen/Qwen3-32B", "gb200", tp=8) is None  # dense
    assert large_ep_comm("deepseek-ai/DeepSeek-V3", "gb200", attention_dp=4, moe_tp=1, moe_ep=4) is None  # one node
    fp8 = {"moe_quant_mode": "fp8_block", "moe_tp": 1, "moe_ep": 16, "attention_dp": 16}
    assert large_ep_comm("deepseek-ai/DeepSeek-V3", "gb200", phases=("context",), **fp8) == {"context": "deepep_ht"}
    with pytest.raises(AicCoverageError, match="pure EP"):
        large_ep_comm("deepseek-ai/DeepSeek-V3", "gb200", attention_dp=32, moe_tp=2, moe_ep=16)
    with pytest.raises(AicCoverageError, match=r"cannot price EP across nodes .*'fp9'"):
        large_ep_comm("deepseek-ai/DeepSeek-V3", "gb200", attention_dp=32, moe_tp=1, moe_ep=32, moe_quant_mode="fp9")
    with pytest.raises(AicCoverageError, match="phases"):
        AicStepTimes("qwen3-8b", "h200_sxm", phases=("decode",))


def test_sglang_hybrid_pool_splits_the_budget_as_sglang_does() -> None:
    # SGLang's handle_max_mamba_cache / init_memory_pool with a 100 GB budget, 15,360 B/token, 48 MB state/request
    budget, per_token, state = 100e9, 15_360.0, 48e6
    off = sglang_hybrid_pool(budget, per_token, state, disable_radix_cache=True)
    assert off.state_slots == 512  # --disable-radix-cache without --max-running-requests
    assert off.kv_tokens == int((budget - 512 * state) // per_token)
    assert off.max_running_requests == 512  # ratio 1 without the radix cache
    on = sglang_hybrid_pool(budget, per_token, state, disable_radix_cache=False)
    slots = int((budget * 0.9 / 1.9) // state)  # state / KV memory = --mamba-full-memory-ratio 0.9
    assert on.state_slots == slots == 986
    assert on.kv_tokens == int((budget - slots * state) // per_token)
    assert on.max_running_requests == slots // 3  # MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
    capped = sglang_hybrid_pool(budget, per_token, state, disable_radix_cache=True, max_running_requests=64)
    assert (capped.state_slots, capped.max_running_requests) == (64, 64)
    assert capped.kv_tokens == int((budget - 64 * state) // per_token)
    with pytest.raises(AicCoverageError, match="leaves no KV pool"):
        sglang_hybrid_pool(512 * state, per_token, state, disable_radix_cache=True)


def test_qwen35_state_and_pools_by_hand() -> None:
    qwen35 = AicStepTimes(
        "Qwen/Qwen3.5-397B-A17B",
        "b200_sxm",
        tp=4,
        moe_tp=4,
        moe_ep=1,
        gemm_quant_mode="fp8",
        moe_quant_mode="fp8_block",
        kvcache_quant_mode="bfloat16",
        fmha_quant_mode="bfloat16",
    )
    # 45 Gated DeltaNet layers x (64/4 value heads x 128 x 128 fp32 state + (2x16x128 + 64x128)/4 conv dims x 3 x bf16)
    state = 45 * (16 * 128 * 128 * 4 + (2 * 16 * 128 + 64 * 128) // 4 * 3 * 2)
    assert qwen35.linear_state_bytes_per_request() == state == 48_015_360
    # 15 full-attention layers x K and V x 1 KV head per GPU (2 over TP 4) x 256 dims x 2 bytes, summed over the rank
    per_token = 15 * 2 * 1 * 256 * 2
    assert qwen35.kv_bytes_per_token() == pytest.approx(per_token * 4)
    budget = qwen35._kv_estimate(qwen35._sglang_fraction())["total_kv_size_bytes"]
    pool = qwen35.sglang_hybrid_pool(disable_radix_cache=True)
    assert pool is not None
    assert pool.kv_tokens == int((budget - 512 * state) // per_token)
    # aiconfigurator-core's own count charges the whole budget to KV less one request's state
    assert qwen35.kv_capacity_tokens() == int((budget - state) // per_token) > pool.kv_tokens
    assert AicStepTimes("qwen3-8b", "h200_sxm", tp=2).sglang_hybrid_pool(disable_radix_cache=True) is None
    # a launch's --mem-fraction-static (InferenceX qwen3.5_fp8_b200.sh: MEM_FRAC_STATIC=0.82): SGLang's budget at it
    recorded = qwen35.sglang_hybrid_pool(disable_radix_cache=True, pool_source="sglang", mem_fraction_static=0.82)
    assert recorded is not None
    by_hand = qwen35.gpu_memory_bytes() * 0.82 - qwen35.sglang_weights_bytes()
    assert recorded.kv_tokens == int((by_hand - 512 * state) // per_token)
    default = qwen35.sglang_hybrid_pool(disable_radix_cache=True, pool_source="sglang")
    assert default is not None and default.kv_tokens != recorded.kv_tokens


# -- the KV pool as SGLang derives it (docs/validation.md, "The KV pool") --------------------------------------------


def _sglang_fraction_by_hand(memory_mib: float, tp: int, chunk: int, graphs: int, dp: int = 1) -> float:
    """``ServerArgs._handle_gpu_memory_settings`` (SGLang 0.5.5 / 0.5.9), spelled out for the test."""
    reserved = 512 + 1.5 * max(chunk, 2048) + 2 * graphs + tp / 8 * 1024
    if dp > 1:
        reserved += 3 * graphs * dp + (1.5 * graphs * dp if graphs > 300 else 0)
    reserved = max(reserved, 10 * 1024) if memory_mib > 60 * 1024 else reserved
    return round((memory_mib - reserved) / memory_mib, 3)


def test_sglang_pool_of_qwen3_32b_on_one_h100_by_hand() -> None:
    # the KV-bound example (Qwen3-32B, TP 1, H100 80 GiB): SGLang's profile_max_num_token is
    # (memory x mem_fraction_static - weights) // KV bytes per token; nothing else comes out of the fraction
    engine = AicStepTimes("Qwen/Qwen3-32B", "h100_sxm", tp=1, kvcache_quant_mode="bfloat16", fmha_quant_mode="bfloat16")
    fraction = _sglang_fraction_by_hand(80 * 1024, tp=1, chunk=8192, graphs=256)
    assert fraction == 0.836 == engine.sglang_mem_fraction_static()
    # config.json: hidden 5120, 64 layers, 64 query / 8 KV heads of 128, MLP 25,600, vocab 151,936, untied head
    layer = 5120 * 64 * 128 * 2 + 5120 * 8 * 128 * 2 + 3 * 5120 * 25600
    weights = 2 * (64 * layer + 2 * 151936 * 5120)  # bf16; the norms (0.7 M parameters) left out
    per_token = 64 * 2 * 8 * 128 * 2  # layers x (K, V) x KV heads x head dim x bf16
    by_hand = (80 * 2**30 * fraction - weights) // per_token
    assert engine.kv_capacity_tokens(pool_source="sglang") == pytest.approx(by_hand, rel=1e-3)  # 23,990 tokens
    # aiconfigurator-core also takes its activations (2.0 GiB) and runtime estimate (4.2 GiB) out of the same budget,
    # which leaves nothing, where SGLang ran the rows
    with pytest.raises(AicCoverageError, match=r"activations 2\.0 .* runtime 4\.2 GiB per GPU > 66\.9 GiB"):
        engine.kv_capacity_tokens(pool_source="aiconfigurator")


def test_sglang_pool_of_an_attention_dp_decode_engine_by_hand() -> None:
    # DeepSeek-V3 FP8 on GB200, decode attention-DP 32 with MoE TP 32 (SGLang 0.5.5 rows): SGLang's --tp-size is the
    # engine's 32 GPUs and --dp-size 32, so its reserve has the TP and DP-attention terms of 32
    engine = AicStepTimes(
        "deepseek-ai/DeepSeek-V3", "gb200", tp=1, attention_dp=32, moe_tp=32, moe_ep=1, gemm_quant_mode="fp8",
        moe_quant_mode="fp8_block", kvcache_quant_mode="bfloat16", fmha_quant_mode="bfloat16", phases=("generation",),
    )  # fmt: skip
    memory = engine.memory_breakdown()
    fraction = _sglang_fraction_by_hand(memory.gpu_memory_bytes / 2**20, tp=32, chunk=16384, graphs=512, dp=32)
    assert fraction == 0.451 == engine.sglang_mem_fraction_static()
    assert memory.kv_bytes_per_token == (512 + 64) * 61 * 2  # MLA latent + rope key, 61 layers, bf16
    # SGLang loads 3 dense layers where aiconfigurator counts MoE ones: per GPU, the 3 layers' routed experts (MoE TP
    # 32, FP8), shared expert (aiconfigurator: attention TP 1, FP8) and bf16 router come off, their dense MLPs
    # (FP8, sharded over the 32 GPUs) go on; the embedding stays whole with attention-DP
    h = 7168
    extra = 3 * (256 * 3 * h * 2048 / 32 + 3 * h * 2048 + 256 * h * 2) - 3 * 3 * h * 18432 / 32
    assert engine.sglang_weights_bytes() == pytest.approx(memory.weights_bytes - extra, rel=1e-6)
    weights = memory.weights_bytes - extra
    by_hand = int((memory.gpu_memory_bytes * fraction - weights) // memory.kv_bytes_per_token)
    assert engine.kv_capacity_tokens(pool_source="sglang") == by_hand > 500_000
    # aiconfigurator-core's MoE dispatch workspace grows with attention-DP x experts x top-k / EP: > 100 GiB here
    assert memory.activations_bytes > 100 * 2**30
    with pytest.raises(AicCoverageError, match="no KV pool in aiconfigurator-core's estimate"):
        engine.kv_capacity_tokens(pool_source="aiconfigurator")


def test_a_layout_whose_weights_exceed_sglangs_fraction_is_refused_with_one_line() -> None:
    # DeepSeek-V3 FP8 on 4 x B200: SGLang itself refuses to start at its default fraction (the rows ran with a
    # --mem-fraction-static their launch script set)
    engine = AicStepTimes(
        "deepseek-ai/DeepSeek-V3", "b200_sxm", tp=4, gemm_quant_mode="fp8", moe_quant_mode="fp8_block",
        kvcache_quant_mode="bfloat16", fmha_quant_mode="bfloat16",
    )  # fmt: skip
    with pytest.raises(AicCoverageError) as refused:
        engine.kv_capacity_tokens(pool_source="sglang")
    message = str(refused.value)
    assert "\n" not in message
    assert message == "no KV pool at SGLang's mem_fraction_static 0.856: weights 157.5 GiB per GPU > 154.1 GiB"
    with pytest.raises(AicCoverageError, match="unknown KV pool source 'vllm'"):
        engine.kv_capacity_tokens(pool_source="vllm")


def test_the_pool_sources_differ_only_by_what_aiconfigurator_adds(qwen8b: AicStepTimes) -> None:
    # same fraction (no attention-DP), same weights: the gap is aiconfigurator's activation, NCCL and runtime terms
    memory = qwen8b.memory_breakdown()
    extra = memory.activations_bytes + memory.nccl_bytes + memory.others_bytes
    gap = qwen8b.kv_capacity_tokens(pool_source="sglang") - qwen8b.kv_capacity_tokens(pool_source="aiconfigurator")
    assert gap == pytest.approx(extra / memory.kv_bytes_per_token, abs=1)


def _deepseek_v3_weights_by_hand(tp: int) -> float:
    """DeepSeek-V3 FP8 on one GPU of a plain-TP SGLang engine, from its config.json (bytes; norms left out).

    hidden 7,168, 61 layers of which the first 3 (``first_k_dense_replace``) are dense MLPs of 18,432; the other 58
    hold 256 routed experts and 1 shared expert of 2,048 and a bf16 router; MLA with q_lora_rank 1,536, kv_lora_rank
    512, 128 heads of 128 (+64 rope) query/key and 128 value dims; vocab 129,280, untied bf16 embedding and head.
    FP8 weights: 1 byte; q_a / kv_a projections replicated, the rest sharded over ``tp`` GPUs, as SGLang loads them.
    """
    h, layers, dense = 7168, 61, 3
    moe = layers - dense
    attention = h * 1536 + h * (512 + 64) + (1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * h) / tp
    experts = moe * (256 + 1) * 3 * h * 2048 / tp
    router = moe * 256 * h * 2
    dense_mlp = dense * 3 * h * 18432 / tp
    embedding_and_head = 2 * 129280 * h * 2 / tp  # VocabParallelEmbedding and ParallelLMHead: sharded
    return layers * attention + experts + router + dense_mlp + embedding_and_head


@pytest.mark.parametrize("tp", [4, 8])
def test_deepseek_v3_weights_as_sglang_loads_them_by_hand(tp: int) -> None:
    engine = AicStepTimes(
        "deepseek-ai/DeepSeek-V3", "b200_sxm", tp=tp, gemm_quant_mode="fp8", moe_quant_mode="fp8_block",
        kvcache_quant_mode="bfloat16", fmha_quant_mode="bfloat16",
    )  # fmt: skip
    assert engine.sglang_weights_bytes() == pytest.approx(_deepseek_v3_weights_by_hand(tp), rel=1e-4)
    # aiconfigurator-core's own count (all 61 layers MoE, the embedding unsharded) is what its estimate keeps using
    assert engine.memory_breakdown().weights_bytes - engine.sglang_weights_bytes() > 5 * 2**30
    # at TP 8: 79.3 GiB per GPU (one measured DeepSeek-R1 load at TP 8, under vLLM: 79.41 GiB; aiconfigurator 84.6)
    if tp == 8:
        assert engine.sglang_weights_bytes() / 2**30 == pytest.approx(79.27, abs=0.01)
    budget = engine.gpu_memory_bytes() * engine.sglang_mem_fraction_static()
    per_token = engine.memory_breakdown().kv_bytes_per_token
    if budget > _deepseek_v3_weights_by_hand(tp):
        expected = (budget - _deepseek_v3_weights_by_hand(tp)) // per_token
        assert engine.kv_capacity_tokens(pool_source="sglang") == pytest.approx(expected, rel=1e-3)
    else:  # TP 4 on B200: 157.5 GiB of weights against SGLang's default budget of 154.1 GiB
        with pytest.raises(AicCoverageError, match=r"weights 157\.5 GiB per GPU > 154\.1 GiB"):
            engine.kv_capacity_tokens(pool_source="sglang")
        # at the 0.95 InferenceX's dsr1_fp8_b200.sh passes for TP 4 there is room
        expected = (engine.gpu_memory_bytes() * 0.95 - _deepseek_v3_weights_by_hand(tp)) // per_token
        assert engine.kv_capacity_tokens(0.95, pool_source="sglang") == pytest.approx(expected, rel=1e-3)


def test_other_models_keep_aiconfigurators_weight_count(qwen8b: AicStepTimes) -> None:
    assert qwen8b.sglang_weights_bytes() == qwen8b.memory_breakdown().weights_bytes
