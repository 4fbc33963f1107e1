"""Profile fits on the real data in ../shared/data, and their errors on bad input."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from pearl_sched.profiles import ModelConfig, fit_dynamo_profile

from .builders import DATA

DYNAMO = DATA / "dynamo-h200-llama31-8b" / "H200_TP1P_TP1D"
CONFIGS = DATA / "model-configs"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.needs_data
def test_kv_bytes_per_token_from_published_configs() -> None:
    llama = ModelConfig.from_json(CONFIGS / "meta-llama--Meta-Llama-3.1-8B_config.json")
    assert llama.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2  # 128 KiB in bf16
    qwen_moe = ModelConfig.from_json(CONFIGS / "Qwen--Qwen3-30B-A3B_config.json")
    assert qwen_moe.kv_bytes_per_token() == 2 * 48 * 4 * 128 * 2
    assert qwen_moe.kv_bytes_per_token(dtype_bytes=1) == qwen_moe.kv_bytes_per_token() // 2


def test_model_config_errors_name_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "config.json"
    broken.write_text('{"num_hidden_layers": 4}')
    with pytest.raises(ValueError, match=r"config.json: missing fields \['num_attention_heads', 'hidden_size'\]"):
        ModelConfig.from_json(broken)
    broken.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read a model config"):
        ModelConfig.from_json(broken)


@pytest.mark.needs_data
def test_dynamo_fit_explains_the_profile_within_pearls_linear_forms() -> None:
    """PEARL's linear forms fit the H200 profile with 12-13% mean error in-sample (decode saturates at high
    KV usage, which a line cannot follow): asserted below 15% so a broken fit cannot pass."""
    fit = fit_dynamo_profile(DYNAMO)
    prefill = _rows(DYNAMO / "prefill_ttft_vs_isl.csv")
    prefill_errors = [
        abs(fit.prefill_constant_s + fit.prefill_s_per_token * float(r["isl_tokens"]) - float(r["ttft_ms"]) / 1e3)
        / (float(r["ttft_ms"]) / 1e3)
        for r in prefill
    ]
    decode_errors = []
    for r in _rows(DYNAMO / "decode_itl_vs_kvusage_context.csv"):
        context = float(r["context_length"])
        sequences = float(r["kv_usage_frac"]) * float(r["max_kv_tokens"]) / context
        itl = fit.decode_iteration_s + sequences * (fit.decode_per_seq_s + fit.decode_per_seq_per_context_s * context)
        decode_errors.append(abs(itl - float(r["itl_ms"]) / 1e3) / (float(r["itl_ms"]) / 1e3))
    assert statistics.fmean(prefill_errors) < 0.15
    assert statistics.fmean(decode_errors) < 0.15
    assert fit.max_kv_tokens == 945029
    device = fit.device("h200", 1, context_tokens=3000, kv_bytes_per_token=131072)
    assert device.kv_capacity_bytes == 945029 * 131072
    assert device.decode_per_seq_s == pytest.approx(fit.decode_per_seq_s + 3000 * fit.decode_per_seq_per_context_s)


@pytest.mark.needs_data
def test_dynamo_fit_rejects_bad_rows(tmp_path: Path) -> None:
    for name in ("prefill_ttft_vs_isl.csv", "decode_itl_vs_kvusage_context.csv"):
        (tmp_path / name).write_text((DYNAMO / name).read_text())
    prefill = tmp_path / "prefill_ttft_vs_isl.csv"
    lines = prefill.read_text().splitlines()
    lines[3] = "3151,-63.2,1"
    prefill.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"prefill_ttft_vs_isl.csv:4: negative or non-finite value"):
        fit_dynamo_profile(tmp_path)
    prefill.write_text("isl,ttft\n1,2\n")
    with pytest.raises(ValueError, match=r"missing columns \['isl_tokens', 'ttft_ms'\]"):
        fit_dynamo_profile(tmp_path)
    with pytest.raises(ValueError, match="cannot read"):
        fit_dynamo_profile(tmp_path / "nowhere")
