"""Step times composed from the aiconfigurator kernel tables: sane shapes, clear errors, and the error against
a measured profile of the same model and GPU."""

from __future__ import annotations

import numpy as np
import pytest

from pearl_sched.profiles.dataset import ProfileFormatError
from pearl_sched.profiles.kernels import ComposedStepModel, KernelTables, composed_mape, shipped_config
from pearl_sched.profiles.readers import read_dynamo

from .builders import DATA

H200 = DATA / "aiconfigurator-sglang" / "h200_sxm"

pytestmark = pytest.mark.slow  # the GEMM table alone is 100k rows


@pytest.fixture(scope="module")
def bf16() -> KernelTables:
    return KernelTables(H200)


@pytest.mark.needs_data
@pytest.mark.parametrize("name", ["qwen3-8b", "qwen3-30b-a3b", "qwen3-32b", "llama-3.1-8b"])
def test_step_times_grow_with_load_and_shrink_with_tp(bf16: KernelTables, name: str) -> None:
    tp1 = ComposedStepModel(shipped_config(name), bf16, tp=1)
    tp2 = ComposedStepModel(shipped_config(name), bf16, tp=2)
    prefill = [tp1.prefill_s(n) for n in (256, 1024, 4096, 16384)]
    decode = [tp1.decode_s(b, 4096) for b in (1, 16, 64, 256)]
    assert np.all(np.diff(prefill) > 0) and np.all(np.diff(decode) > 0)
    assert tp1.decode_s(64, 2048) < tp1.decode_s(64, 16384)
    assert tp2.prefill_s(8192) < tp1.prefill_s(8192)
    assert tp2.decode_s(128, 4096) < tp1.decode_s(128, 4096)
    assert 1e-4 < tp1.decode_s(1, 1024) < 0.1  # a single-sequence step of these models is a few ms on an H200


@pytest.mark.needs_data
def test_cached_prefix_makes_prefill_cheaper_than_a_full_one(bf16: KernelTables) -> None:
    model = ComposedStepModel(shipped_config("qwen3-8b"), bf16, tp=2)
    appended = model.prefill_s(512, cached_tokens=8192)
    assert model.prefill_s(512) < appended < model.prefill_s(512 + 8192)


@pytest.mark.needs_data
def test_moe_model_uses_the_moe_table(bf16: KernelTables) -> None:
    dense = ComposedStepModel(shipped_config("qwen3-32b"), bf16, tp=2)
    moe = ComposedStepModel(shipped_config("qwen3-30b-a3b"), bf16, tp=2)
    assert moe.config.num_experts == 128 and moe.config.num_experts_per_tok == 8
    assert moe.prefill_s(4096) < dense.prefill_s(4096)  # 3B active parameters against 32B


@pytest.mark.needs_data
def test_clear_errors() -> None:
    with pytest.raises(ProfileFormatError, match="not an aiconfigurator table directory"):
        KernelTables(DATA)
    with pytest.raises(ValueError, match="no shipped config 'gpt-5'"):
        shipped_config("gpt-5")
    tables = KernelTables(H200)
    with pytest.raises(ValueError, match="do not split over TP3"):
        ComposedStepModel(shipped_config("qwen3-8b"), tables, tp=3)


@pytest.mark.needs_data
def test_calibrated_composition_tracks_the_measured_dynamo_profile() -> None:
    """Llama-3.1-8B on an H200: SGLang kernels (FP8 GEMMs) against vLLM's measured TTFT and ITL, with the
    framework's fixed cost set from one point each; the rest stay within 15% on average."""
    model = ComposedStepModel(shipped_config("llama-3.1-8b"), KernelTables(H200, gemm_dtype="fp8"), tp=1)
    profile = read_dynamo(DATA / "dynamo-h200-llama31-8b" / "H200_TP1P_TP1D")
    ttft, itl = profile.select(target="ttft"), profile.select(target="itl")
    calibrated = model.calibrated(
        prefill=(float(ttft["tokens"][0]), float(ttft["value_s"][0])),
        decode=(float(itl["batch_size"][0]), float(itl["context_tokens"][0]), float(itl["value_s"][0])),
    )
    assert calibrated.prefill_overhead_s > 0.01  # the HTTP, tokenizer and scheduler path of a TTFT
    ttft_error = composed_mape([calibrated.prefill_s(n) for n in ttft["tokens"][1:]], ttft["value_s"][1:])
    itl_error = composed_mape(
        [calibrated.decode_s(b, c) for b, c in zip(itl["batch_size"][1:], itl["context_tokens"][1:], strict=True)],
        itl["value_s"][1:],
    )
    assert ttft_error < 15 and itl_error < 15


@pytest.mark.needs_data
def test_pearl_parameters_from_a_composition(bf16: KernelTables) -> None:
    from pearl_sched.profiles.to_pearl import fit_device, kv_capacity_bytes

    config = shipped_config("qwen3-8b")
    assert config.parameter_count() == pytest.approx(8.19e9, rel=0.01)  # Qwen3-8B: 8.2B parameters
    composed = ComposedStepModel(config, bf16, tp=2)
    kv = kv_capacity_bytes(config, 2, 141 * 2**30)
    device = fit_device(
        gpu_type="h200",
        tp=2,
        prefill_s=lambda n, c: composed.prefill_s(n, cached_tokens=c),
        decode_s=composed.decode_s,
        context_tokens=8000,
        appended_tokens=500,
        max_batch=256,
        kv_capacity=kv,
    )
    for n in (16, 64, 200):  # the linear form stays within 15% of the composition it was fitted to
        linear = device.decode_iteration_s + device.decode_per_seq_s * n
        assert linear == pytest.approx(composed.decode_s(n, 8000), rel=0.15)
    assert kv == pytest.approx(2 * 141 * 2**30 * 0.85 - 8.19e9 * 2, rel=0.01)
    with pytest.raises(ValueError, match="does not fit"):
        kv_capacity_bytes(shipped_config("qwen3-32b"), 1, 40 * 2**30)


def test_log_grid_matches_scipy_multilinear_interpolation_and_extrapolation() -> None:
    from scipy.interpolate import RegularGridInterpolator

    from pearl_sched.profiles.kernels import _LogGrid

    rng = np.random.default_rng(3)
    axes = [np.array([1.0, 4.0, 16.0, 256.0]), np.array([2.0, 8.0, 64.0]), np.array([1.0, 1e3])]
    values = np.exp(rng.normal(size=(4, 3, 2)))
    reference = RegularGridInterpolator([np.log(a) for a in axes], np.log(values), bounds_error=False, fill_value=None)
    grid = _LogGrid(axes, values)
    for point in rng.uniform([0.5, 1.0, 0.5], [600.0, 100.0, 3e3], size=(200, 3)):
        expected = float(np.exp(reference(np.log(point))[0]))
        assert grid(*point) == pytest.approx(expected, rel=1e-9)
