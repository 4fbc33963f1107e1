"""bench/validate.py's reading of the silicon rows: harness, mean output length, the TP x EP recording fix."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("aiconfigurator_core", reason="the aic extra (aiconfigurator-core) is not installed")

from bench import validate
from pearl_sched.profiles.aic_engine import AicStepTimes
from pearl_sched.sim.replay import DisaggReplayResult, PDRole


def _row(**fields: str) -> dict[str, str]:
    row = {
        "silicon_data_source": "db-dump/2026-04-27; config_id=1; silicon_concurrency=4",
        "system": "b200_sxm",
        "tp_size": "4",
        "attention_dp_size": "1",
        "moe_tp_size": "1",
        "moe_ep_size": "4",
    }
    return {**row, **fields}


def test_inferencemax_rows_use_its_harness() -> None:
    assert validate.harness_of(_row()) is validate.INFERENCEMAX
    assert validate.harness_of(_row(silicon_data_source="source_file=2026-04-06.csv; model=X")) is validate.INFERENCEMAX
    gap = _row(silicon_data_source="source_file=/Users/x/aic-auto-gap-analysis/data/h100_sxm/q.csv")
    assert validate.harness_of(gap) is validate.UNRECORDED


def test_mean_output_length_of_the_harness() -> None:
    # uniform integers in [int(0.8 x 1024), 1024] = [819, 1024]
    assert validate.INFERENCEMAX.mean_osl(1024) == pytest.approx((819 + 1024) / 2)
    assert validate.UNRECORDED.mean_osl(1024) == 1024


def test_tp_recorded_as_tp_times_ep_is_read_back() -> None:
    # the same layout (ids ..._tp4_ep4_...) appears as tp 4 / moe_tp 1 / ep 4 and as tp 16 / moe_tp 4 / ep 4
    assert validate.parallelism(_row()) == (4, 1, 1, 4, False)
    assert validate.parallelism(_row(tp_size="16", moe_tp_size="4")) == (4, 1, 1, 4, True)
    assert validate.parallelism(_row(tp_size="64", moe_tp_size="8", moe_ep_size="8")) == (8, 1, 1, 8, True)
    # a layout that fits one node, or TP without EP, is taken as recorded
    assert validate.parallelism(_row(tp_size="8", moe_tp_size="8", moe_ep_size="1")) == (8, 1, 8, 1, False)
    assert validate.parallelism(_row(system="gb200", tp_size="72", moe_tp_size="72", moe_ep_size="1"))[4] is False


def test_kv_dtype_from_the_launch_scripts_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    dsr1 = _row(model_path="deepseek-ai/DeepSeek-R1", precision="fp8")
    qwen_bf16 = _row(model_path="Qwen/Qwen3.5-397B-A17B", precision="bf16")
    imax = validate.INFERENCEMAX
    assert validate.script_kv_dtype(dsr1, imax) == "bfloat16"  # SGLang's default unless --kv-dtype-from-scripts
    monkeypatch.setattr(validate, "SCRIPT_KV_FP8", True)
    assert validate.script_kv_dtype(dsr1, imax) == "fp8"
    assert validate.script_kv_dtype({**dsr1, "system": "h200_sxm"}, imax) == "bfloat16"  # dsr1_fp8_h200.sh: none
    assert validate.script_kv_dtype(qwen_bf16, imax) == "bfloat16"
    gap = {**dsr1, "silicon_data_source": "source_file=/Users/x/aic-auto-gap-analysis/q.csv", "id": "g"}
    assert validate.script_kv_dtype(gap, validate.harness_of(gap)) == "bfloat16"
    # a gap-analysis row that repeats an InferenceMAX measurement is run with that client, passed with the row
    assert validate.script_kv_dtype(gap, validate.harness_of(gap, {"g"})) == "fp8"


def _replayed(model: str, gpu: str, tp: int) -> object:
    from pearl_sched.profiles.aic_engine import AicStepTimes

    engine = AicStepTimes(model, gpu, "sglang", tp=tp, kvcache_quant_mode="bfloat16", fmha_quant_mode="bfloat16")
    row = validate.Row("silicon-sglang", "agg", f"{model}-{gpu}", 0.1, 0.01, 10.0, 0.1, 0.01, 10.0)
    return validate.Replayed(row, engine, 1024, 256, 8, 8192, validate.UNRECORDED, False, "")


def test_aic_estimate_is_per_deployment_not_memoised_across_models() -> None:
    # aiconfigurator-core's run_agg memoises by (ISL, OSL, batch, ctx_tokens) only: one backend for two models would
    # hand the second the first one's answer
    small = _replayed("meta-llama/Meta-Llama-3.1-8B", "h200_sxm", 1)
    large = _replayed("Qwen/Qwen3-32B", "h200_sxm", 1)
    rows, failed = validate.aic_estimate_rows([small, large])
    assert not failed and [r.dataset for r in rows] == ["silicon-sglang-aic-estimate"] * 2
    assert rows[1].sim_tpot_s > 1.5 * rows[0].sim_tpot_s  # 32B weights are read every step, 8B's four times fewer
    assert rows[0].sim_e2e_s == pytest.approx(rows[0].sim_ttft_s + 255 * rows[0].sim_tpot_s)


def test_data_parallel_ranks_get_requests_in_arrival_order() -> None:
    arrivals = [(0.3, 10, 5), (0.1, 20, 5), (0.2, 30, 5), (0.0, 40, 5), (0.4, 50, 5)]
    assert validate.deal_to_ranks(arrivals, 2) == [[3, 2, 4], [1, 0]]
    assert validate.deal_to_ranks(arrivals, 1) == [[3, 1, 2, 0, 4]]


def _disagg(row_id: str, source: str, ttft: str, tpot: str, **fields: str) -> dict[str, str]:
    row = {
        "id": row_id,
        "silicon_data_source": source,
        "model_path": "deepseek-ai/DeepSeek-V3",
        "system": "gb200",
        "precision": "fp8",
        "mode": "disagg",
        "isl": "1024",
        "osl": "1024",
        "batch_size": "",
        "prefill_num_workers": "",
        "decode_num_workers": "",
        "decode_batch_size": "",
        "prefill_tp_size": "1",
        "prefill_attention_dp_size": "8",
        "prefill_moe_tp_size": "1",
        "prefill_moe_ep_size": "8",
        "decode_tp_size": "1",
        "decode_attention_dp_size": "32",
        "decode_moe_tp_size": "1",
        "decode_moe_ep_size": "32",
        "silicon_ttft_ms": ttft,
        "silicon_tpot_ms": tpot,
    }
    return {**row, **fields}


def test_disagg_concurrency_is_read_or_derived_from_the_decode_batch() -> None:
    recorded = _disagg("a", "db-dump; silicon_concurrency=2048", "1.0", "2.0", decode_batch_size="64")
    assert validate.recorded_concurrency(recorded) == 2048
    derived = _disagg("b", "gap-analysis", "1.0", "2.0", decode_batch_size="48", decode_num_workers="11",
                      prefill_num_workers="5", decode_attention_dp_size="1")  # fmt: skip
    assert validate.recorded_concurrency(derived) == 48 * 11
    assert validate.recorded_concurrency(_disagg("c", "export", "1.0", "2.0")) is None


def test_disagg_twin_gives_a_row_without_worker_counts_its_deployment() -> None:
    dump = _disagg("dsr1_cfg523", "db-dump; silicon_concurrency=2048", "1598.31", "20.895",
                   prefill_num_workers="2", decode_num_workers="1", decode_batch_size="64")  # fmt: skip
    export = _disagg("2026_03_25_dsr1", "source_file=2026-03-25.csv; silicon_concurrency=2048", "1598.3100004",
                     "20.8950001", model_path="deepseek-ai/DeepSeek-R1", prefill_tp_size="8")  # fmt: skip
    other = _disagg("2026_03_25_other", "source_file=2026-03-25.csv; silicon_concurrency=2048", "1700.0", "20.895")
    twins = validate.deployment_twins([dump, export, other])
    assert twins == {"2026_03_25_dsr1": dump}  # same measurement (R1 is V3's architecture); a different one has none


def test_total_lines_cover_both_modes_and_kvbound() -> None:
    row = validate.Row
    rows = [
        row("silicon-sglang", "agg", "a", 1.0, 0.010, 2.0, 1.0, 0.011, 2.2),  # +10 %
        row("silicon-sglang-kvbound", "agg", "b", 1.0, 0.010, 2.0, 1.0, 0.010, 2.0),  # 0 %
        row("silicon-sglang", "disagg", "c", 1.0, 0.010, 2.0, 1.0, 0.015, 3.0),  # +50 %
        row("silicon-sglang-calibrated", "agg", "d", 1.0, 0.010, 2.0, 9.0, 0.090, 9.0),  # not the plain datasets
    ]
    lines = validate.total_lines(rows)
    assert "mode=agg+disagg target=tpot rows=3 mape_pct=20.0" in lines[1]
    assert "target=e2e rows=3 mape_pct=20.0" in lines[2]


def test_disagg_row_replays_each_role_at_its_recorded_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    # 2 prefill engines of attention-DP 16 / EP 16 and one decode engine of attention-DP 32 / EP 32 on GB200, FP8:
    # a layout aiconfigurator has large-EP data for on both sides (an invented row, not a measurement)
    row = _disagg(
        "dsr1_gb200_sglang_fp8_disagg_1024x1024_c512",
        "db-dump/2026-04-27; config_id=0; silicon_concurrency=512; workflow_run_id=0",
        "767.06",
        "14.68",
        gemm_quant_mode="fp8",
        moe_quant_mode="fp8_block",
        prefill_num_workers="2",
        prefill_attention_dp_size="16",
        prefill_moe_ep_size="16",
        decode_num_workers="1",
        decode_batch_size="16",
    )
    calls: list[tuple[PDRole, PDRole, dict[str, object]]] = []

    def fake_replay(prefill: PDRole, decode: PDRole, **kwargs: object) -> DisaggReplayResult:
        calls.append((prefill, decode, kwargs))  # a named fake: records the roles instead of replaying
        return DisaggReplayResult(1.0, 0.01, 11.0, 1, 0, 1, 1, 1, 1)

    monkeypatch.setattr(validate, "replay_disagg_closed_loop", fake_replay)
    out, skipped = validate.disagg_rows([row], {})
    assert not skipped and len(out) == 1 and len(calls) == 1
    prefill, decode, kwargs = calls[0]
    assert isinstance(prefill.steps, AicStepTimes) and isinstance(decode.steps, AicStepTimes)
    assert (prefill.workers, prefill.ranks, prefill.steps.tp, prefill.steps.moe_ep) == (2, 16, 1, 16)
    assert (decode.workers, decode.ranks, decode.steps.tp, decode.steps.moe_ep) == (1, 32, 1, 32)
    # EP 16 and 32 span GB200 nodes (4 GPUs each): aiconfigurator's large-EP graph for the phase each role runs, with
    # the FP8 KV its wide-EP MLA tables hold (SGLang's bf16 default where EP stays within a node)
    assert prefill.steps.phases == ("context",) and prefill.steps.moe_comm_backend == {"context": "deepep_ht"}
    assert decode.steps.phases == ("generation",) and decode.steps.moe_comm_backend == {"generation": "deepep_ll"}
    assert prefill.kv_bytes_per_token == pytest.approx(61 * (512 + 64) * 1)  # the FP8 MLA latent of one GPU's rank
    assert decode.kv_bytes_per_token == pytest.approx(61 * (512 + 64) * 1)
    assert prefill.link_bytes_per_s == pytest.approx(900e9)  # GB200 NVLink per GPU, one GPU per rank
    assert kwargs == {"isl": 1024, "osl": 1024, "concurrency": 512, "rounds": 10, "range_ratio": 0.8}
    assert out[0].row.mode == "disagg" and out[0].row.dataset == "silicon-sglang"


def test_disagg_row_whose_ep_across_nodes_aiconfigurator_does_not_cover_is_not_run() -> None:
    # config 483 as measured (NVFP4 MoE): aiconfigurator 0.12.0 has no NVFP4 wide-EP MoE data and refuses it
    row = _disagg(
        "dsr1_gb200_sglang_fp4_disagg_1024x1024_c512_cfg483",
        "db-dump/2026-04-27; config_id=483; silicon_concurrency=512; workflow_run_id=268",
        "767.06",
        "14.68",
        precision="fp4",
        gemm_quant_mode="nvfp4",
        moe_quant_mode="nvfp4",
        prefill_num_workers="4",
        prefill_attention_dp_size="4",
        prefill_moe_ep_size="4",
        decode_num_workers="1",
        decode_batch_size="16",
    )
    out, skipped = validate.disagg_rows([row], {})
    assert out == [] and sum(skipped.values()) == 1
    (reason,) = skipped
    assert "decode (1, 32, 1, 32): no large-EP data for EP across nodes: MoE nvfp4" in reason


def test_disagg_calibration_never_sees_the_row_or_its_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = AicStepTimes("qwen3-8b", "h200_sxm", tp=2)
    roles = (PDRole(engine, 1, 1, 100_000), PDRole(engine, 1, 1, 100_000))
    samples: dict[str, int] = {}

    def fake_replay(prefill: PDRole, decode: PDRole, **kwargs: object) -> DisaggReplayResult:
        assert isinstance(prefill.steps, AicStepTimes) and prefill.steps.calibration is not None
        samples[str(kwargs["concurrency"])] = prefill.steps.calibration.samples  # a named fake: records, no replay
        return DisaggReplayResult(1.0, 0.01, 11.0, 1, 0, 1, 1, 1, 1)

    monkeypatch.setattr(validate, "replay_disagg_closed_loop", fake_replay)

    def item(row_id: str, concurrency: int, tpot_s: float) -> object:
        row = validate.Row("silicon-sglang", "disagg", row_id, 1.0, tpot_s, 10.0, 1.0, tpot_s * 1.2, 12.0)
        return validate.DisaggReplayed(row, engine, 1024, 1024, concurrency, False, roles)

    items = [item("a", 4, 0.010), item("a-twin", 4, 0.010), item("b", 8, 0.012), item("c", 16, 0.014)]
    assert validate.calibrated_disagg_rows(items) == []  # a and its twin have only 2 other measurements
    items.append(item("d", 32, 0.020))
    out = validate.calibrated_disagg_rows(items)
    assert len(out) == 5 and {r.dataset for r in out} == {"silicon-sglang-calibrated"}
    assert samples["4"] == 3  # b, c, d: neither a nor its twin
    assert samples["8"] == 4  # a, a-twin, c, d
    assert engine.calibration is None  # put back after each replay


def test_aic_decode_estimate_is_the_decode_roles_static_run() -> None:
    row = _disagg(
        "b200_adp8",
        "db-dump/2026-04-27; config_id=0; silicon_concurrency=128; workflow_run_id=0",
        "900.0",
        "28.0",
        system="b200_sxm",
        isl="1024",
        osl="64",
        gemm_quant_mode="fp8",
        moe_quant_mode="fp8_block",
        prefill_num_workers="1",
        decode_num_workers="1",
        decode_attention_dp_size="8",
        decode_moe_ep_size="8",
        decode_batch_size="16",
    )
    cache: dict[tuple[object, ...], AicStepTimes | str] = {}
    out, failed = validate.aic_decode_estimate_rows([row], cache)
    assert not failed and len(out) == 1
    (engine,) = [e for e in cache.values() if isinstance(e, AicStepTimes)]
    assert engine.phases == ("generation",) and engine.attention_dp == 8
    expected = sum(engine.decode_s(16, 1024 + k) for k in range(1, 64)) / 63  # per-rank batch 16, contexts 1025…1087
    assert out[0].sim_tpot_s == pytest.approx(expected)
    assert math.isnan(out[0].sim_ttft_s) and math.isnan(out[0].sim_e2e_s)
    assert out[0].dataset == "silicon-sglang-aic-estimate" and out[0].measured_tpot_s == pytest.approx(0.028)


def test_gap_rows_that_repeat_an_inferencemax_measurement_take_its_harness() -> None:
    def measured(source: str, ttft: str, tpot: str, **fields: str) -> dict[str, str]:
        row = _row(silicon_data_source=source, silicon_ttft_ms=ttft, silicon_tpot_ms=tpot, **fields)
        shape = {"model_path": "Qwen/Qwen3.5-397B-A17B", "precision": "fp8", "mode": "agg", "isl": "1024"}
        return {**shape, "osl": "1024", "batch_size": "4", **row}

    gap = "source_file=qwen3.5-397b-gap-analysis.csv; silicon_concurrency=4"
    imax = measured("source_file=2026-03-25.csv; model=Qwen3.5", "304.65371906757355", "8.334993756285813", id="a")
    repeat = measured(gap, "304.65", "8.33", id="b")  # the gap file rounds to 0.01 ms
    other = measured(gap, "304.65", "8.41", id="c")  # the same shape, another TPOT: another run
    other_c = measured(gap, "304.65", "8.33", id="d", batch_size="8")  # another concurrency
    rows = [imax, repeat, other, other_c]
    assert validate.inferencemax_repeats(rows) == {"b"}


def test_every_qwen35_gap_row_repeats_an_inferencemax_measurement() -> None:
    rows = validate.sglang_silicon_rows()
    repeats = validate.inferencemax_repeats(rows)
    gap = {r["id"] for r in rows if validate.harness_of(r) is validate.UNRECORDED}
    qwen35_gap = {r["id"] for r in rows if r["id"] in gap and r["model_path"] == "Qwen/Qwen3.5-397B-A17B"}
    assert repeats == qwen35_gap and len(repeats) == 76


class FakeHybridEngine:
    """A named fake with the one method server_memory calls: records which radix setting it was asked for."""

    def __init__(self) -> None:
        self.asked: list[bool] = []
        self.sources: list[str] = []
        self.fractions: list[float | None] = []

    def sglang_hybrid_pool(
        self, *, disable_radix_cache: bool, pool_source: str, mem_fraction_static: float | None
    ) -> object:
        from pearl_sched.profiles.aic_engine import HybridPool

        self.asked.append(disable_radix_cache)
        self.sources.append(pool_source)
        self.fractions.append(mem_fraction_static)
        return HybridPool(kv_tokens=1000 if disable_radix_cache else 500, state_slots=512, max_running_requests=7)


def test_server_memory_runs_inferencemax_without_the_radix_cache() -> None:
    engine = FakeHybridEngine()
    assert validate.server_memory(engine, validate.INFERENCEMAX) == (1000, 7)  # type: ignore[arg-type]
    assert validate.server_memory(engine, validate.UNRECORDED) == (500, 7)  # type: ignore[arg-type]
    assert validate.server_memory(engine, validate.INFERENCEMAX) == (1000, 7)  # type: ignore[arg-type]
    assert engine.asked == [True, False]  # one pool per engine and setting
    assert engine.sources == ["sglang", "sglang"]  # SGLang's own derivation unless --pool-source says otherwise
    assert engine.fractions == [None, None]  # SGLang's default fraction: no launch recorded for this engine
    recorded = FakeHybridEngine()
    validate.LAUNCHES[recorded] = validate._dsr1_fp8_b200_tp8  # type: ignore[index]
    try:
        assert validate.server_memory(recorded, validate.INFERENCEMAX) == (1000, 7)  # type: ignore[arg-type]
    finally:
        del validate.LAUNCHES[recorded]  # type: ignore[arg-type]
    assert recorded.fractions == [0.82]  # a recorded launch's --mem-fraction-static reaches the hybrid pool


def _agg_row(model: str, system: str, tp: str, gemm: str = "", moe: str = "") -> dict[str, str]:
    return _row(
        model_path=model, system=system, tp_size=tp, moe_tp_size=tp, moe_ep_size="1", gemm_quant_mode=gemm,
        moe_quant_mode=moe, precision="fp8" if gemm else "bf16", mode="agg",
    )  # fmt: skip


def test_the_issues_kv_bound_example_runs_on_sglangs_pool_and_not_on_aiconfigurators() -> None:
    # Qwen3-32B on one H100: SGLang's derivation leaves 23,990 tokens; aiconfigurator-core's estimate none
    row = _agg_row("Qwen/Qwen3-32B", "h100_sxm", "1")
    assert validate.POOL_SOURCE == "sglang"
    engine = validate._engine(row, {})
    assert isinstance(engine, AicStepTimes) and validate.POOLS[engine] == 23990
    validate.set_pool_source("aiconfigurator")
    try:
        refused = validate._engine(row, {})
    finally:
        validate.set_pool_source("sglang")
    assert isinstance(refused, str) and refused.startswith("no KV pool in aiconfigurator-core's estimate")
    with pytest.raises(ValueError, match="unknown KV pool source"):
        validate.set_pool_source("both")


def test_a_row_sglang_could_not_start_keeps_one_clear_reason() -> None:
    # DeepSeek-R1 FP8 on 4 x B200: the weights exceed SGLang's default fraction (InferenceX's dsr1_fp8_b200.sh runs
    # TP 4 with --mem-fraction-static 0.95, which the row does not record)
    row = _agg_row("deepseek-ai/DeepSeek-R1", "b200_sxm", "4", "fp8", "fp8_block")  # no image / date: no record
    assert validate.recorded_launch(row, "agg", validate.parallelism(row)[:4]) is None
    reason = validate._engine(row, {})
    assert reason == "no KV pool at SGLang's mem_fraction_static 0.856: weights 157.5 GiB per GPU > 154.1 GiB"


def _silicon_row(row_id: str) -> dict[str, str]:
    (row,) = [r for r in validate.sglang_silicon_rows() if r["id"] == row_id]
    return row


def test_a_row_whose_launch_script_is_recorded_replays_with_its_flags() -> None:
    # DeepSeek-R1 FP8, TP 4 on B200, measured 2026-03-25 on lmsysorg/sglang:v0.5.9-cu130: InferenceX's
    # dsr1_fp8_b200.sh at that date runs TP 4 with --mem-fraction-static 0.95, --kv-cache-dtype fp8_e4m3,
    # --max-running-requests 32, --cuda-graph-max-bs 32, --chunked-prefill-size / --max-prefill-tokens 8192
    dump = _silicon_row("dsr1_b200_sglang_fp8_agg_8192x1024_c4_cfg271")
    export = _silicon_row("2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_agg_8192x1024_c32_tp4_0_ep1_0_286")
    layout = validate.parallelism(dump)[:4]
    launch = validate.recorded_launch(dump, "agg", layout)
    assert launch is not None and launch is validate.recorded_launch(export, "agg", layout)  # no dump twin needed
    assert (launch.mem_fraction_static, launch.kv_cache_dtype, launch.max_running_requests) == (0.95, "fp8", 32)
    assert "dsr1_fp8_b200.sh" in launch.script
    engine = validate._engine(dump, {}, launch=launch)
    assert isinstance(engine, AicStepTimes) and engine.kvcache_quant_mode == "fp8"
    per_token = engine.memory_breakdown().kv_bytes_per_token
    assert per_token == (512 + 64) * 61  # FP8 MLA latent + rope key
    expected = (engine.gpu_memory_bytes() * 0.95 - engine.sglang_weights_bytes()) // per_token
    assert validate.POOLS[engine] == expected > 400_000
    assert validate.server_memory(engine, validate.INFERENCEMAX) == (expected, 32)
    # the same row at SGLang's defaults is the refusal SGLang itself would give
    assert isinstance(validate._engine(dump, {}), str)
    # another date, another script version: no record
    other = {**dump, "silicon_data_source": dump["silicon_data_source"].replace("2026-03-25", "2026-03-28")}
    assert validate.recorded_launch(other, "agg", layout) is None
    # aiconfigurator-core's pool source reproduces the previous rounds: no recorded flags there
    validate.set_pool_source("aiconfigurator")
    try:
        assert validate.recorded_launch(dump, "agg", layout) is None
    finally:
        validate.set_pool_source("sglang")


def test_disaggregated_rows_run_with_their_recipes_flags_and_the_layout_their_script_launched() -> None:
    # config 227 (GB200, SGLang 0.5.5.post2, 2025-12-21): the rows record attention-DP 4 / MoE TP 4, the pinned
    # dynamo script launches --tensor-parallel-size 4 without --enable-dp-attention; config 502 (2026-02-09): TP 4
    # as recorded. Both at --mem-fraction-static 0.95 with FP8 KV; the prefill engines at --max-total-tokens 8192
    rows = [r for r in validate.sglang_silicon_rows() if r["id"].endswith(("_c16_cfg227", "_c4_cfg502"))]
    assert len(rows) == 2
    disagg, skipped = validate.disagg_rows(rows, {})
    assert not skipped and len(disagg) == 2
    for item in disagg:
        assert item.roles is not None
        prefill, decode = item.roles
        for role in (prefill, decode):
            assert isinstance(role.steps, AicStepTimes)
            assert (role.steps.tp, role.steps.attention_dp, role.steps.kvcache_quant_mode) == (4, 1, "fp8")
            assert role.chunked_prefill_size == 8192 and role.cuda_graph_bs[-1] == 128
        assert prefill.pool_tokens == 8192  # --max-total-tokens
        steps = decode.steps
        assert isinstance(steps, AicStepTimes)
        per_token = steps.memory_breakdown().kv_bytes_per_token
        expected = (steps.gpu_memory_bytes() * 0.95 - steps.sglang_weights_bytes()) // per_token
        assert decode.pool_tokens == expected
        assert decode.workers == (4 if "cfg227" in item.row.row_id else 1)
    notes = validate.launch_note_lines([], disagg)
    assert len(notes) == 2 and all("launch_flags=recorded" in n and "rows=1" in n for n in notes)
    assert any("layout tp4 attention_dp1" in n and "1k1k-low-latency.sh" in n for n in notes)


def _rows_where(system: str, precision: str, layout: tuple[int, int, int | None, int | None]) -> list[dict[str, str]]:
    return [
        r
        for r in validate.sglang_silicon_rows()
        if r["mode"] == "agg"
        and (r["system"], r["precision"]) == (system, precision)
        and validate.parallelism(r)[:4] == layout
        and "measured=2026-03-25" in r["silicon_data_source"]
        and "v0.5.9-cu130" in r["silicon_data_source"]
    ]


def test_the_tp8_rows_of_the_same_commit_replay_with_the_scripts_tp8_branch() -> None:
    # InferenceX 12ba0ae07 (2026-03-25) moved dsr1-fp8-b200-sglang to v0.5.9-cu130; its dsr1_fp8_b200.sh TP=8 branch:
    # MEM_FRAC_STATIC=0.82, --kv-cache-dtype fp8_e4m3, MAX_RUNNING_REQUESTS=CUDA_GRAPH_MAX_BATCH_SIZE=128,
    # CHUNKED_PREFILL_SIZE=MAX_PREFILL_TOKENS=32768, at every ISL / OSL
    # at the runs its config launched (1k/1k and 1k/8k C 4-64, 8k/1k C 4); the exports' TP 8 rows at other C ran
    # without that cap (1k/1k C 256: TTFT 2.1 s, where 128 running requests would queue half the clients ~40 s)
    rows = _rows_where("b200_sxm", "fp8", (8, 1, 8, 1))
    assert len(rows) == 69
    tied = [r for r in rows if validate.recorded_launch(r, "agg", (8, 1, 8, 1)) is not None]
    in_config = [r for r in rows if int(float(r["batch_size"])) <= (4 if r["isl"] == "8192" else 64)]
    assert tied == in_config and len(tied) == 43
    launches = {id(validate.recorded_launch(r, "agg", (8, 1, 8, 1))) for r in tied}
    assert len(launches) == 1
    launch = validate.recorded_launch(tied[0], "agg", (8, 1, 8, 1))
    assert launch is not None and "dsr1_fp8_b200.sh (TP=8 branch) at 12ba0ae07" in launch.script
    flags = (launch.mem_fraction_static, launch.kv_cache_dtype, launch.max_running_requests, launch.cuda_graph_max_bs)
    assert flags == (0.82, "fp8", 128, 128)
    assert (launch.chunked_prefill_size, launch.max_prefill_tokens, launch.layout) == (32768, 32768, None)
    # the one row measured on v0.5.6 (2025-12-31, 3 s after d27433dff set that image): the same launch line then
    (early,) = [r for r in validate.sglang_silicon_rows() if "measured=2025-12-31" in r["silicon_data_source"]]
    before = validate.recorded_launch(early, "agg", (8, 1, 8, 1))
    assert before is not None and "d27433dff" in before.script and before is not launch
    same = {k: v for k, v in vars(launch).items() if k not in ("script", "search_space")}
    assert {k: v for k, v in vars(before).items() if k not in ("script", "search_space")} == same
    (row,) = [r for r in rows if r["id"] == "dsr1_b200_sglang_fp8_agg_1024x1024_c64_cfg87"]
    engine = validate._engine(row, {}, launch=launch)
    assert isinstance(engine, AicStepTimes) and engine.kvcache_quant_mode == "fp8"
    per_token = engine.memory_breakdown().kv_bytes_per_token
    expected = (engine.gpu_memory_bytes() * 0.82 - engine.sglang_weights_bytes()) // per_token
    assert validate.server_memory(engine, validate.INFERENCEMAX) == (expected, 128)


def test_a_script_branch_with_lengths_applies_to_those_lengths_only() -> None:
    # dsr1_fp8_b200.sh exits at TP 4 unless ISL / OSL = 8192 / 1024: no record for a TP 4 row of other lengths
    dump = _silicon_row("dsr1_b200_sglang_fp8_agg_8192x1024_c4_cfg271")
    assert validate.recorded_launch(dump, "agg", (4, 1, 4, 1)) is not None
    assert validate.recorded_launch({**dump, "isl": "1024"}, "agg", (4, 1, 4, 1)) is None
    # dsr1_fp8_h200.sh: --max-running-requests / --cuda-graph-max-bs 512 at 1k / 1k, 256 otherwise; no
    # --kv-cache-dtype (SGLang's auto: bf16); 0.82 and 32,768-token chunks in both branches
    rows = _rows_where("h200_sxm", "fp8", (8, 1, 8, 1))
    assert len(rows) == 45
    caps = {}
    for r in rows:
        launch = validate.recorded_launch(r, "agg", (8, 1, 8, 1))
        assert launch is not None and "dsr1_fp8_h200.sh at 12ba0ae07" in launch.script
        assert (launch.mem_fraction_static, launch.kv_cache_dtype, launch.chunked_prefill_size) == (
            0.82,
            validate.SGLANG_KV_DTYPE,
            32768,
        )
        assert launch.max_running_requests == launch.cuda_graph_max_bs
        caps.setdefault((r["isl"], r["osl"]), set()).add(launch.max_running_requests)
    assert caps == {("1024", "1024"): {512}, ("1024", "8192"): {256}, ("8192", "1024"): {256}}


def test_the_fp4_rows_of_the_same_commit_replay_with_their_script_at_the_layout_they_record() -> None:
    # 12ba0ae07 moved dsr1-fp4-b200-sglang (TP 4 / EP 4, TP 8 / EP 8) to v0.5.9-cu130 too; dsr1_fp4_b200.sh has one
    # launch line: --mem-fraction-static 0.85, --kv-cache-dtype fp8_e4m3, --chunked-prefill-size 16384,
    # --max-running-requests / --cuda-graph-max-bs 256, --ep-size $EP_SIZE
    for layout, count in (((4, 1, 1, 4), 46), ((8, 1, 1, 8), 38)):
        rows = _rows_where("b200_sxm", "fp4", layout)
        assert len(rows) == count
        for r in rows:
            launch = validate.recorded_launch(r, "agg", layout)
            assert launch is not None and "dsr1_fp4_b200.sh at 12ba0ae07" in launch.script
            assert (launch.mem_fraction_static, launch.kv_cache_dtype, launch.chunked_prefill_size) == (
                0.85,
                "fp8",
                16384,
            )
            assert (launch.max_running_requests, launch.cuda_graph_max_bs, launch.layout) == (256, 256, None)
    # a later image on the same deployment: no record
    (row,) = _rows_where("b200_sxm", "fp4", (4, 1, 1, 4))[:1]
    later = {**row, "silicon_data_source": row["silicon_data_source"].replace("v0.5.9-cu130", "v0.5.10-cu130")}
    assert validate.recorded_launch(later, "agg", (4, 1, 1, 4)) is None


def test_the_b300_deepseek_rows_replay_with_the_scripts_added_with_their_configs() -> None:
    # InferenceX 5b302f147 / 9ebeafb4e (2026-04-17) added dsr1-fp8-b300-sglang / dsr1-fp4-b300-sglang on
    # lmsysorg/sglang:v0.5.10.post1-cu130 with their scripts: the B200 scripts' flags (TP 8: 0.82, 128, 32,768;
    # TP 4 at 8k/1k only: 0.95, 32, 8,192; FP4: 0.85, 256, 16,384; FP8 KV everywhere)
    rows = [
        r
        for r in validate.sglang_silicon_rows()
        if r["system"] == "b300_sxm" and r["model_path"].startswith("deepseek-ai/") and r["mode"] == "agg"
    ]
    seen = {}
    for r in rows:
        layout = validate.parallelism(r)[:4]
        launch = validate.recorded_launch(r, "agg", layout)
        assert launch is not None and launch.kv_cache_dtype == "fp8"
        seen[r["precision"], layout] = (
            launch.mem_fraction_static,
            launch.max_running_requests,
            launch.chunked_prefill_size,
        )
        assert ("dsr1_fp8_b300.sh" if r["precision"] == "fp8" else "dsr1_fp4_b300.sh") in launch.script
    assert seen == {
        ("fp8", (8, 1, 8, 1)): (0.82, 128, 32768),
        ("fp8", (4, 1, 4, 1)): (0.95, 32, 8192),
        ("fp4", (4, 1, 1, 4)): (0.85, 256, 16384),
        ("fp4", (8, 1, 1, 8)): (0.85, 256, 16384),
    }
    assert len(rows) == 31


def test_the_gb200_max_throughput_rows_run_at_the_scripts_deepep_layout_or_are_refused() -> None:
    # configs 236 / 253 (FP8) and 254 / 259 (FP4), GB200, SGLang 0.5.5.post2, 2025-12-21: the rows record decode
    # attention-DP 32 / MoE TP 32; the max-tpt scripts at dynamo b7107d008 launch --tp-size = --dp-size = the engine's
    # GPUs with --enable-dp-attention and --moe-a2a-backend deepep (SGLang sets ep_size = tp_size) or --ep-size: EP 32
    # decode, EP 8 FP8 prefill across two nodes. aiconfigurator-core 0.12.0 has wide-EP data for FP8 at EP 32, none
    # at EP 8 and none for NVFP4, so every one of the 17 rows is refused with the layout its script ran
    configs = ("_cfg236", "_cfg253", "_cfg254", "_cfg259")
    all_rows = validate.sglang_silicon_rows()
    twins = validate.deployment_twins(all_rows)
    rows = [
        r
        for r in all_rows
        if r["mode"] == "disagg"
        and (r["id"].endswith(configs) or twins.get(r["id"], {}).get("id", "").endswith(configs))
    ]
    assert len(rows) == 17
    for r in rows:
        deployment = twins.get(r["id"], r)
        decode = validate.recorded_launch(deployment, "decode", validate._side(deployment, "decode"))
        assert decode is not None and decode.layout == (1, 32, 1, 32) and decode.kv_cache_dtype == "fp8"
        assert "max-tpt.sh (decode) at b7107d008" in decode.script
        prefill = validate.recorded_launch(deployment, "prefill", validate._side(deployment, "prefill"))
        assert prefill is not None
        expected = {"fp8": (1, 8, 1, 8), "fp4": (1, 4, 1, 4) if r["isl"] == "1024" else (4, 1, 4, 1)}
        assert prefill.layout == expected[r["precision"]]
    (c4096,) = [r for r in rows if r["id"].endswith("_c4096_cfg236")]
    launch = validate.recorded_launch(c4096, "decode", (1, 32, 32, 1))
    assert launch is not None
    flags = (launch.mem_fraction_static, launch.max_running_requests, launch.cuda_graph_max_bs)
    assert flags == (0.82, 45000, 768)
    out, skipped = validate.disagg_rows(rows, {})
    assert out == [] and sum(skipped.values()) == 17
    fp8 = "prefill (1, 8, 1, 8) as its launch script ran it (the row records (1, 8, 8, 1)): no large-EP data"
    fp4 = "decode (1, 32, 1, 32) as its launch script ran it (the row records (1, 32, 32, 1)): no large-EP data"
    assert sum(n for reason, n in skipped.items() if fp8 in reason and "MoE fp8_block" in reason) == 9
    assert sum(n for reason, n in skipped.items() if fp4 in reason and "MoE nvfp4" in reason) == 8
    # the same layout on aiconfigurator-core's pool source: no record applies, the rows keep their columns
    validate.set_pool_source("aiconfigurator")
    try:
        assert validate.recorded_launch(c4096, "decode", (1, 32, 32, 1)) is None
    finally:
        validate.set_pool_source("sglang")


def test_decode_servers_before_0_5_10_sit_out_a_step_for_transferred_requests() -> None:
    # disaggregation/decode.py: 0.5.5-0.5.9 run a new prebuilt batch instead of the running batch; 0.5.10 merges it
    assert all(validate.runs_prebuilt_step(v) for v in ("0.5.5.post2", "0.5.6.post2", "0.5.8", "0.5.8.post1", "0.5.9"))
    assert not any(validate.runs_prebuilt_step(v) for v in ("0.5.10", "0.5.10.post1", "0.6.0", ""))


def test_the_kv_bound_deepseek_pd_rows_run_with_their_srt_slurm_recipes() -> None:
    # H200 config 434 (2026-02-07): bs128-1p1d-dep.yaml, decode --mem-fraction-static 0.88, bf16 KV (no
    # --kv-cache-dtype), --max-running-requests 256 over DP 8 = 32 per rank; B200 configs 641 / 649 / 655
    # (2026-03-18): 8k1k.yaml's max-throughput variants, told apart by their worker counts (C 288 ran as 1P1D at
    # 256 and as 1P2D at 128 running requests), FP8 KV at 0.75
    rows = {
        r["id"]: r
        for r in validate.sglang_silicon_rows()
        if r["id"].endswith(("_c256_cfg434", "_c288_cfg641", "_c288_cfg649", "_c1024_cfg655"))
    }
    assert len(rows) == 4
    caps = {}
    for row_id, row in rows.items():
        decode = validate.recorded_launch(row, "decode", validate._side(row, "decode"))
        prefill = validate.recorded_launch(row, "prefill", validate._side(row, "prefill"))
        assert decode is not None and prefill is not None and decode.layout is None
        caps[row_id.rsplit("_", 1)[-1]] = (
            decode.mem_fraction_static,
            decode.kv_cache_dtype,
            decode.max_running_requests,
        )
        assert ("bs128-1p1d-dep.yaml" if "h200" in row_id else "8k1k.yaml") in decode.script
    assert caps == {
        "cfg434": (0.88, "bfloat16", 256),
        "cfg641": (0.75, "fp8", 256),
        "cfg649": (0.75, "fp8", 128),
        "cfg655": (0.75, "fp8", 1024),
    }
    other_workers = {**rows["dsr1_b200_sglang_fp8_disagg_8192x1024_c1024_cfg655"], "prefill_num_workers": "2"}
    assert validate.recorded_launch(other_workers, "decode", (1, 8, 1, 8)) is None
    out, skipped = validate.disagg_rows([rows["dsr1_b200_sglang_fp8_disagg_8192x1024_c1024_cfg655"]], {})
    assert not skipped
    (item,) = out
    assert item.roles is not None
    prefill_role, decode_role = item.roles
    assert (prefill_role.max_running_requests, decode_role.max_running_requests) == (1, 128)  # // DP 8
    assert decode_role.prebuilt_step and not prefill_role.prebuilt_step  # SGLang 0.5.8.post1
    steps = decode_role.steps
    assert isinstance(steps, AicStepTimes) and steps.kvcache_quant_mode == "fp8"
    per_token = steps.memory_breakdown().kv_bytes_per_token
    assert decode_role.pool_tokens == (steps.gpu_memory_bytes() * 0.75 - steps.sglang_weights_bytes()) // per_token


def test_aic_decode_estimate_takes_the_layout_the_launch_script_ran() -> None:
    # config 236's decode engine ran DeepEP EP 32: aiconfigurator prices it on its large-EP graph (FP8 covered);
    # config 259's NVFP4 decode at EP 32 is not covered and is refused with the launched layout
    rows = [r for r in validate.sglang_silicon_rows() if r["id"].endswith(("_c4096_cfg236", "_c8192_cfg259"))]
    assert len(rows) == 2
    out, failed = validate.aic_decode_estimate_rows(rows, {})
    (row,) = out
    assert row.row_id.endswith("_c4096_cfg236")
    assert row.sim_tpot_s == pytest.approx(0.0259, rel=0.02)  # 32.8 ms measured; 58.0 ms at the recorded MoE TP 32
    (reason,) = failed
    assert "decode (1, 32, 1, 32): no large-EP data" in reason and "nvfp4" in reason


def test_the_b200_fp4_pd_rows_run_with_the_recipe_their_workers_layouts_and_concurrency_name() -> None:
    # dsr1-fp4-b200-dynamo-sglang (2026-02-11): C 512 at 1k/1k ran as 1P1D (1,024 running requests) and as 1P2D (512);
    # 8k/1k C 64 ran as config 530 (decode TP 8 / EP 8) and config 535 (prefill TP 4, decode TP 8); 7P2D at C 1,024
    rows = {
        r["id"].rsplit("_", 2)[-2] + "_" + r["id"].rsplit("_", 1)[-1]: r
        for r in validate.sglang_silicon_rows()
        if r["id"].startswith("dsr1_b200_sglang_fp4_disagg")
        and r["id"].endswith(("_c512_cfg527", "_c512_cfg532", "_c64_cfg530", "_c64_cfg535", "_c1024_cfg538"))
    }
    assert len(rows) == 5
    got = {}
    for name, row in rows.items():
        prefill = validate.recorded_launch(row, "prefill", validate._side(row, "prefill"))
        decode = validate.recorded_launch(row, "decode", validate._side(row, "decode"))
        assert prefill is not None and decode is not None
        assert prefill.script.split(".yaml")[0] == decode.script.split(".yaml")[0]
        assert (prefill.mem_fraction_static, decode.mem_fraction_static, decode.kv_cache_dtype) == (0.85, 0.85, "fp8")
        got[name] = (
            prefill.script.split(".yaml")[0].rsplit("/", 1)[-1],
            prefill.max_prefill_tokens,
            decode.max_running_requests,
            decode.cuda_graph_max_bs,
        )
    assert got == {
        "c512_cfg527": ("max-tpt-dep4-1p-dep8-1d", 32768, 1024, 1024),
        "c512_cfg532": ("max-tpt-dep4-1p-dep8-2d", 32768, 512, 512),
        "c64_cfg530": ("low-latency-dep4-1p-tep8-1d", 32768, 512, 512),
        "c64_cfg535": ("low-latency-tp4-1p-tp8-1d", 32768, 512, 512),
        "c1024_cfg538": ("max-tpt-dep4-7p-dep8-2d", 65536, 2048, 1024),
    }
    # a concurrency or worker count the config did not launch that recipe for is not tied
    assert validate.recorded_launch({**rows["c512_cfg527"], "batch_size": "256"}, "decode", (1, 8, 1, 8)) is None
    assert (
        validate.recorded_launch({**rows["c1024_cfg538"], "prefill_num_workers": "4"}, "decode", (1, 8, 1, 8)) is None
    )
    out, skipped = validate.disagg_rows([rows["c1024_cfg538"]], {})
    assert not skipped
    (item,) = out
    assert item.roles is not None
    prefill_role, decode_role = item.roles
    assert (prefill_role.workers, decode_role.workers) == (7, 2)
    assert (prefill_role.max_running_requests, decode_role.max_running_requests) == (256, 256)  # // DP 4, // DP 8
    steps = decode_role.steps
    assert isinstance(steps, AicStepTimes) and steps.kvcache_quant_mode == "fp8"
    per_token = steps.memory_breakdown().kv_bytes_per_token
    assert decode_role.pool_tokens == (steps.gpu_memory_bytes() * 0.85 - steps.sglang_weights_bytes()) // per_token


def test_the_b200_fp8_pd_rows_of_2026_02_07_run_with_their_stp_recipes() -> None:
    # dsr1-fp8-b200-dynamo-sglang at its first commit: 1P4D TP 8 / EP 8 (config 453), 1P1D and 2P1D attention-DP 8
    # (457 / 459); the 2026-03-18 rows of the same image keep their own (8k1k.yaml) records
    rows = {
        r["id"].rsplit("_", 1)[-1]: r
        for r in validate.sglang_silicon_rows()
        if r["id"].endswith(("_c64_cfg453", "_c128_cfg457", "_c256_cfg459"))
    }
    assert len(rows) == 3
    got = {}
    for name, row in rows.items():
        prefill = validate.recorded_launch(row, "prefill", validate._side(row, "prefill"))
        decode = validate.recorded_launch(row, "decode", validate._side(row, "decode"))
        assert prefill is not None and decode is not None and "db462bd" in decode.script
        assert (prefill.mem_fraction_static, decode.kv_cache_dtype, prefill.cuda_graph_max_bs) == (0.85, "fp8", None)
        got[name] = (decode.script.split(".yaml")[0].rsplit("/", 1)[-1], decode.workers, decode.max_running_requests)
    assert got == {
        "cfg453": ("low-latency-tep8-1p4d", (1, 4), 512),
        "cfg457": ("max-tpt-dep8-1p1d", (1, 1), 1024),
        "cfg459": ("max-tpt-dep8-2p1d", (2, 1), 1024),
    }
    later = {**rows["cfg457"], "silicon_data_source": rows["cfg457"]["silicon_data_source"].replace("02-07", "03-18")}
    assert validate.recorded_launch(later, "decode", (1, 8, 1, 8)) is None  # 8k1k.yaml has no 1P1D variant at C 128


def test_an_export_row_without_a_twin_takes_the_one_recipe_that_ran_its_concurrency() -> None:
    # dsr1-fp4-b200-dynamo-sglang's recipes at 1k/1k ran C 16 / 128 as 1P5D and C 32 / 64 / 256 as 1P6D (decode TP 8 /
    # EP 8); at 8k/1k C 4 ran in two recipes (2P5D and 1P1D TP 4 / TP 8): not identified, not run
    rows = {r["id"]: r for r in validate.sglang_silicon_rows()}
    one = rows["2026_03_25_deepseek_r1_b200_sxm_sglang_fp4_disagg_1024x1024_c32_tp4_0_ep4_0_800"]
    two = rows["2026_03_25_deepseek_r1_b200_sxm_sglang_fp4_disagg_8192x1024_c4_tp4_0_ep4_0_797"]
    twins = validate.deployment_twins(list(rows.values()))
    assert one["prefill_num_workers"] == "" and one["id"] not in twins and two["id"] not in twins
    deployment = validate.recipe_deployment(one)
    assert deployment is not None
    assert (deployment["prefill_num_workers"], deployment["decode_num_workers"]) == ("1", "6")
    assert validate._side(deployment, "prefill") == (1, 4, 1, 4)
    assert validate._side(deployment, "decode") == (8, 1, 1, 8)  # the export records (8, 1, 2, 4)
    launch = validate.recorded_launch(deployment, "decode", (8, 1, 1, 8))
    assert launch is not None and "low-latency-dep4-1p-tep8-6d" in launch.script
    assert validate.recipe_deployment(two) is None
    out, skipped = validate.disagg_rows([one, two], {})
    assert sum(skipped.values()) == 1
    (item,) = out
    assert item.from_recipe and not item.from_twin
    assert item.roles is not None and (item.roles[0].workers, item.roles[1].workers) == (1, 6)
    validate.set_pool_source("aiconfigurator")
    try:
        assert validate.recipe_deployment(one) is None  # the previous rounds' source keeps them out
    finally:
        validate.set_pool_source("sglang")


def test_the_qwen35_fp8_b200_rows_of_2026_03_24_replay_with_their_script() -> None:
    # qwen3.5_fp8_b200.sh at 6a5dad463: 0.82, FP8 KV, 128 running requests, CUDA graphs up to the row's C; TP 8 ran
    # C 4-16 and TP 4 / EP 4 C 16-128 at every length
    tp4 = _silicon_row("2026_03_25_qwen3_5_397b_b200_sxm_sglang_fp8_agg_1024x1024_c32_tp4_0_ep4_0_342")
    layout = validate.parallelism(tp4)[:4]
    assert layout == (4, 1, 1, 4)
    launch = validate.recorded_launch(tp4, "agg", layout)
    assert launch is not None and "qwen3.5_fp8_b200.sh at 6a5dad463" in launch.script
    assert (launch.mem_fraction_static, launch.kv_cache_dtype, launch.max_running_requests) == (0.82, "fp8", 128)
    assert launch.cuda_graph_max_bs == 32
    assert validate.recorded_launch(tp4, "agg", (8, 1, 8, 1)) is None  # TP 8 ran C 4-16 only
    engine = validate._engine(tp4, {}, launch=launch)
    assert isinstance(engine, AicStepTimes) and engine.kvcache_quant_mode == "fp8"
    hybrid = engine.sglang_hybrid_pool(disable_radix_cache=True, pool_source="sglang", mem_fraction_static=0.82)
    assert hybrid is not None
    assert validate.server_memory(engine, validate.INFERENCEMAX) == (
        hybrid.kv_tokens,
        min(128, hybrid.max_running_requests),
    )


def test_the_qwen35_fp8_b200_rows_of_2026_03_03_follow_the_first_search_space() -> None:
    # efd49e50b: TP 4 / EP 4 ran 1k/1k at C 4-16 and 64 only (no 32), 1k/8k and 8k/1k at C 8-64
    row = _silicon_row("2026_04_06_qwen3_5_397b_b200_sxm_sglang_fp8_agg_1024x1024_c8_tp4_ep4_1877")
    launch = validate.recorded_launch(row, "agg", (4, 1, 1, 4))
    assert launch is not None and "at efd49e50b" in launch.script and launch.cuda_graph_max_bs == 8
    assert validate.recorded_launch({**row, "batch_size": "32"}, "agg", (4, 1, 1, 4)) is None
    assert validate.recorded_launch({**row, "batch_size": "32", "osl": "8192"}, "agg", (4, 1, 1, 4)) is not None


def test_the_qwen35_fp8_h200_rows_of_2026_03_04_follow_their_script_and_are_refused() -> None:
    # qwen3.5_fp8_h200.sh as added at f65d6b4b1: TP 8 / EP 8, C 4-64 at every length, 0.8, FP8 KV, chunk 16384,
    # 128 running requests, CUDA graphs up to C. The export records the same runs as tp_size 64 (TP x EP).
    ids = (
        "2026_03_25_qwen3_5_397b_h200_sxm_sglang_fp8_agg_1024x1024_c16_tp8_0_ep8_0_585",
        "2026_04_06_qwen3_5_397b_h200_sxm_sglang_fp8_agg_1024x1024_c16_tp8_ep8_1874",
    )
    for row in map(_silicon_row, ids):
        layout = validate.parallelism(row)[:4]
        assert layout == (8, 1, 1, 8)
        launch = validate.recorded_launch(row, "agg", layout)
        assert launch is not None and "qwen3.5_fp8_h200.sh at f65d6b4b1" in launch.script
        assert (launch.mem_fraction_static, launch.kv_cache_dtype, launch.chunked_prefill_size) == (0.8, "fp8", 16384)
        assert (launch.max_running_requests, launch.cuda_graph_max_bs, launch.max_prefill_tokens) == (128, 16, None)
        assert validate.recorded_launch({**row, "batch_size": "128"}, "agg", layout) is None  # C 4-64 only
        # aiconfigurator-core 0.12.0 has no context attention with FP8 KV for this model on H200: one line, no replay
        reason = validate._engine(row, {}, launch=launch)
        assert isinstance(reason, str) and 'kv_quant: "fp8"' in reason


def test_the_qwen35_fp8_b200_rows_of_2026_03_20_ran_speculative_decoding_and_are_refused() -> None:
    # v0.5.9-cu130 was the image of qwen3.5-fp8-b200-sglang-mtp only (InferenceX 35d4bb367, 2026-03-20 22:08:19 UTC;
    # the rows are measured 4 s later): qwen3.5_fp8_b200_mtp.sh runs EAGLE with 3 steps and 4 draft tokens, 0.8,
    # FP8 KV, --max-running-requests = --cuda-graph-max-bs = $CONC, TP 4 / EP 1 at C 4-256 at every length
    row = _silicon_row("2026_03_25_qwen3_5_397b_b200_sxm_sglang_fp8_agg_1024x1024_c16_tp4_0_ep1_0_473")
    layout = validate.parallelism(row)[:4]
    launch = validate.recorded_launch(row, "agg", layout)
    assert launch is not None and "qwen3.5_fp8_b200_mtp.sh at 35d4bb367" in launch.script
    assert launch.speculative_decoding is not None and "EAGLE" in launch.speculative_decoding
    assert (launch.mem_fraction_static, launch.kv_cache_dtype) == (0.8, "fp8")
    assert (launch.max_running_requests, launch.cuda_graph_max_bs) == (16, 16)
    assert validate.recorded_launch({**row, "batch_size": "512"}, "agg", layout) is None  # C 4-256 only
    reason = validate._engine(row, {}, launch=launch)
    assert isinstance(reason, str) and "speculative decoding" in reason
    replayed, skipped, _ = validate.silicon_rows([row], {})
    assert replayed == [] and sum(skipped.values()) == 1


def test_a_gap_row_takes_the_deployment_of_the_measurement_it_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = validate.sglang_silicon_rows()
    sources = validate.repeated_sources(rows)
    assert len(sources) == 76 and set(sources) == validate.inferencemax_repeats(rows)
    # every InferenceMAX row a gap row repeats names the same image and date (one benchmark, one deployment)
    by_id = {r["id"]: r for r in rows}
    for gap_id, source in sources.items():
        gap = by_id[gap_id]
        twins = [
            r
            for r in rows
            if validate.harness_of(r) is validate.INFERENCEMAX
            and (r["system"], r["precision"], r["isl"], r["osl"])
            == (gap["system"], gap["precision"], gap["isl"], gap["osl"])
            and validate._int(r["batch_size"]) == validate._int(gap["batch_size"])
            and abs(float(r["silicon_tpot_ms"]) - float(gap["silicon_tpot_ms"])) <= 0.01
        ]
        assert twins and {validate.launch_key(t) for t in twins} == {
            validate.launch_key({**gap, "silicon_data_source": source})
        }
    gap = by_id["qwen3_5_397b_gap_analysis_qwen3_5_397b_gap_analysis_b200_sxm_sglang_fp8_agg_1024x1024_c16_tp4_ep1_18"]
    assert validate.launch_key(gap) is None  # alone it names no deployment
    monkeypatch.setattr(validate, "REPEATED_SOURCES", sources)
    export = by_id["2026_03_25_qwen3_5_397b_b200_sxm_sglang_fp8_agg_1024x1024_c16_tp4_0_ep1_0_473"]
    assert validate.launch_key(gap) == validate.launch_key(export)
    launch = validate.recorded_launch(gap, "agg", validate.parallelism(gap)[:4])
    assert launch is not None and launch.speculative_decoding is not None  # the MTP run, refused as its export row


@pytest.mark.parametrize(
    ("row_id", "script", "flags"),
    [
        # qwen3.5_bf16_b200.sh at 9dc87a68c: 0.82, no --kv-cache-dtype, 32768 / 32768, 128, CUDA graphs = C
        (
            "qwen3_5_b200_sglang_bf16_agg_1024x1024_c16_cfg587",
            "qwen3.5_bf16_b200.sh at 9dc87a68c",
            (0.82, "bfloat16", 32768, 32768, 128, 16),
        ),
        # qwen3.5_fp4_b200.sh at 48d35c480: 0.85, FP8 KV
        (
            "qwen3_5_b200_sglang_fp4_agg_1024x1024_c16_cfg708",
            "qwen3.5_fp4_b200.sh at 48d35c480",
            (0.85, "fp8", 32768, 32768, 128, 16),
        ),
        # qwen3.5_fp8_b300.sh at c0f62a2ef: 0.8, FP8 KV, chunk and prefill tokens 16384, running requests = graphs = C
        (
            "qwen3_5_b300_sglang_fp8_agg_1024x1024_c16_cfg716",
            "qwen3.5_fp8_b300.sh at c0f62a2ef",
            (0.8, "fp8", 16384, 16384, 16, 16),
        ),
        # qwen3.5_bf16_b300.sh at 32274d6c1 (TP 8 and TP 4) and qwen3.5_fp4_b300.sh at 8acbd08b7 (0.8, FP8 KV)
        (
            "qwen3_5_b300_sglang_bf16_agg_1024x1024_c16_cfg738",
            "qwen3.5_bf16_b300.sh at 32274d6c1",
            (0.82, "bfloat16", 32768, 32768, 128, 16),
        ),
        (
            "qwen3_5_b300_sglang_bf16_agg_1024x1024_c16_cfg739",
            "qwen3.5_bf16_b300.sh at 32274d6c1",
            (0.82, "bfloat16", 32768, 32768, 128, 16),
        ),
        (
            "qwen3_5_b300_sglang_fp4_agg_1024x1024_c16_cfg737",
            "qwen3.5_fp4_b300.sh at 8acbd08b7",
            (0.8, "fp8", 32768, 32768, 128, 16),
        ),
    ],
)
def test_the_other_qwen35_single_node_rows_replay_with_their_scripts(
    row_id: str, script: str, flags: tuple[object, ...]
) -> None:
    row = _silicon_row(row_id)
    layout = validate.parallelism(row)[:4]
    launch = validate.recorded_launch(row, "agg", layout)
    assert launch is not None and script in launch.script and launch.layout is None
    assert launch.speculative_decoding is None
    got = (
        launch.mem_fraction_static,
        launch.kv_cache_dtype,
        launch.chunked_prefill_size,
        launch.max_prefill_tokens,
        launch.max_running_requests,
        launch.cuda_graph_max_bs,
    )
    assert got == flags
    assert (
        validate.recorded_launch({**row, "osl": "8192", "isl": "1024"}, "agg", layout) is None or "bf16_b200" in script
    )
    assert validate.recorded_launch({**row, "batch_size": "512"}, "agg", layout) is None  # outside the search space


def test_the_qwen35_bf16_b200_point_of_2026_03_09_ran_the_same_script() -> None:
    (row,) = [
        r
        for r in validate.sglang_silicon_rows()
        if r["model_path"] == "Qwen/Qwen3.5-397B-A17B"
        and "measured=2026-03-09" in r["silicon_data_source"]
        and r["system"] == "b200_sxm"
    ]
    launch = validate.recorded_launch(row, "agg", validate.parallelism(row)[:4])
    assert launch is not None and "qwen3.5_bf16_b200.sh at 9dc87a68c" in launch.script


def test_the_qwen35_nvfp4_b300_tp2_ep2_rows_run_at_the_layout_their_script_launched() -> None:
    # qwen3.5-fp4-b300-sglang's { tp: 2, ep: 2 } runs --tensor-parallel-size 2 --ep-size 2 on 2 GPUs; the rows
    # record tp_size 4 (TP x EP) with MoE TP 2 / EP 2
    row = _silicon_row("qwen3_5_b300_sglang_fp4_agg_1024x1024_c16_cfg736")
    layout = validate.parallelism(row)[:4]
    assert layout == (4, 1, 2, 2)
    launch = validate.recorded_launch(row, "agg", layout)
    assert launch is not None and launch.layout == (2, 1, 1, 2) and launch.mem_fraction_static == 0.8
    replayed, skipped, _ = validate.silicon_rows([row], {})
    assert not skipped and len(replayed) == 1
    engine = replayed[0].engine
    assert (engine.tp, engine.moe_ep) == (2, 2) and validate.LAUNCHES[engine] is launch


def test_the_b200_1k1k_point_of_config_455_and_gb200_config_536_run_with_their_recipes() -> None:
    # config 455's 1k/1k C 4 row of 2026-03-18: InferenceX 593fb431a still names 1k1k/stp/low-latency-tep8-1p1d.yaml
    # (TP 8 / EP 8 both sides, 0.85, FP8 KV, 512 running requests, C 4); config 536 (GB200, 2026-02-09, 8k/1k C 4-16):
    # gb200-fp8/8k1k/low-latency.yaml, TP 8 on both sides, 0.8, FP8 KV, prefill --max-total-tokens 32768
    b200 = _silicon_row("dsr1_b200_sglang_fp8_disagg_1024x1024_c4_cfg455")
    for role in ("prefill", "decode"):
        launch = validate.recorded_launch(b200, role, (8, 1, 1, 8))
        assert launch is not None and "1k1k/stp/low-latency-tep8-1p1d.yaml" in launch.script
        assert (launch.mem_fraction_static, launch.kv_cache_dtype, launch.max_running_requests) == (0.85, "fp8", 512)
    assert validate.recorded_launch({**b200, "batch_size": "8"}, "decode", (8, 1, 1, 8)) is None
    gb200 = _silicon_row("dsr1_gb200_sglang_fp8_disagg_8192x1024_c8_cfg536")
    prefill = validate.recorded_launch(gb200, "prefill", (8, 1, 8, 1))
    decode = validate.recorded_launch(gb200, "decode", (8, 1, 8, 1))
    assert prefill is not None and decode is not None and "gb200-fp8/8k1k/low-latency.yaml" in prefill.script
    assert (prefill.max_total_tokens, prefill.chunked_prefill_size, decode.chunked_prefill_size) == (32768, 24576, 8192)
    assert (decode.mem_fraction_static, decode.kv_cache_dtype, decode.cuda_graph_max_bs) == (0.8, "fp8", 512)
    assert validate.recorded_launch({**gb200, "batch_size": "32"}, "decode", (8, 1, 8, 1)) is None


@pytest.mark.parametrize(
    ("row_id", "launched", "interval"),
    [
        # 2025-11-10, config 88 (TP 4) and its export: dsr1_fp4_b200_docker.sh's --enable-ep-moe ran EP = TP
        ("dsr1_b200_sglang_fp4_agg_8192x1024_c16_cfg88", (4, 1, 1, 4), 30),
        ("2026_04_06_deepseek_r1_b200_sxm_sglang_fp4_agg_8192x1024_c16_tp4_ep1_578", (4, 1, 1, 4), 30),
        # 2025-11-10, config 99 (TP 8), and 2025-11-02 (dsr1-tmpl.yml's job: TP 8 at 8k/1k up to C 128)
        ("dsr1_b200_sglang_fp4_agg_8192x1024_c16_cfg99", (8, 1, 1, 8), 30),
        ("dsr1_b200_sglang_fp4_agg_8192x1024_c32_cfg99", (8, 1, 1, 8), 30),
    ],
)
def test_the_november_fp4_b200_rows_without_an_image_run_their_docker_script_at_ep_tp(
    row_id: str, launched: tuple[int, int, int, int], interval: int
) -> None:
    row = _silicon_row(row_id)
    assert "image=" not in row["silicon_data_source"] and "lmsysorg" not in row["silicon_data_source"]
    key = validate.launch_key(row)
    assert key is not None and key[4] == validate.NO_IMAGE
    layout = validate.parallelism(row)[:4]
    assert layout[3] == 1  # the rows record MoE TP = TP, EP 1
    launch = validate.recorded_launch(row, "agg", layout)
    assert launch is not None and "dsr1_fp4_b200_docker.sh as of 4b860b78e" in launch.script
    assert launch.layout == launched
    assert (launch.mem_fraction_static, launch.kv_cache_dtype, launch.chunked_prefill_size) == (0.85, "fp8", 16384)
    assert (launch.max_running_requests, launch.cuda_graph_max_bs) == (256, 256)
    assert validate.scheduler_recv_interval(launch, int(row["batch_size"])) == interval
    assert validate.scheduler_recv_interval(launch, 8) == 10
    replayed, skipped, _ = validate.silicon_rows([row], {})
    assert not skipped and len(replayed) == 1
    engine = replayed[0].engine
    assert (engine.tp, engine.moe_ep) == (launched[0], launched[3]) and validate.LAUNCHES[engine] is launch


def test_the_tp8_fp4_rows_of_2025_11_10_follow_that_days_search_space() -> None:
    # nvidia-master.yaml before d8fe8f73e: TP 8 runs 8k/1k only at C 4-16; on 2025-11-02 the job ran C 4-128
    row = _silicon_row("dsr1_b200_sglang_fp4_agg_8192x1024_c16_cfg99")
    layout = validate.parallelism(row)[:4]
    assert validate.recorded_launch({**row, "batch_size": "32"}, "agg", layout) is None
    assert validate.recorded_launch({**row, "isl": "1024", "batch_size": "128"}, "agg", layout) is not None
    # a dated row without an image on a day nothing is recorded for keeps SGLang's defaults
    other_day = row["silicon_data_source"].replace("measured=2025-11-10", "measured=2025-11-11")
    assert validate.recorded_launch({**row, "silicon_data_source": other_day}, "agg", layout) is None


def test_the_fp8_b200_rows_of_2025_11_18_ran_ep8_with_the_docker_script() -> None:
    # config 199 records tp_size 64 = TP 8 x EP 8 (nvidia-master.yaml's ep: 8 between d8fe8f73e and 189ae51cc)
    for row_id in (
        "dsr1_b200_sglang_fp8_agg_8192x1024_c16_cfg199",
        "2026_04_06_deepseek_r1_b200_sxm_sglang_fp8_agg_8192x1024_c16_tp8_ep8_1041",
    ):
        row = _silicon_row(row_id)
        layout = validate.parallelism(row)[:4]
        assert layout == (8, 1, 1, 8)
        launch = validate.recorded_launch(row, "agg", layout)
        assert launch is not None and "dsr1_fp8_b200_docker.sh at d8fe8f73e" in launch.script
        assert launch.layout is None
        flags = (launch.mem_fraction_static, launch.kv_cache_dtype, launch.chunked_prefill_size)
        assert flags == (0.82, "fp8", 32768)
        assert (launch.max_prefill_tokens, launch.max_running_requests, launch.cuda_graph_max_bs) == (32768, 128, 128)
        assert validate.scheduler_recv_interval(launch, 16) == 30
        assert validate.recorded_launch({**row, "batch_size": "128"}, "agg", layout) is None  # C 4-64 only


def test_the_glm5_fp8_b200_rows_are_tied_to_their_script_and_still_refused() -> None:
    # glm5_fp8_b200.sh at 13930ca61: FP8 KV, 0.85, 32768 / 32768, running requests = CUDA graphs = C, no recv interval
    for row_id in (
        "2026_03_25_glm_5_b200_sxm_sglang_fp8_agg_1024x1024_c16_tp8_0_ep1_0_484",
        "2026_04_06_glm_5_b200_sxm_sglang_fp8_agg_1024x1024_c16_tp8_ep1_1939",
    ):
        row = _silicon_row(row_id)
        layout = validate.parallelism(row)[:4]
        launch = validate.recorded_launch(row, "agg", layout)
        assert launch is not None and "glm5_fp8_b200.sh at 13930ca61" in launch.script
        assert (launch.mem_fraction_static, launch.kv_cache_dtype, launch.chunked_prefill_size) == (0.85, "fp8", 32768)
        assert (launch.max_running_requests, launch.cuda_graph_max_bs) == (16, 16)
        assert validate.scheduler_recv_interval(launch, 16) == 1
        replayed, skipped, _ = validate.silicon_rows([row], {})
        assert not replayed and "DSA" in next(iter(skipped))  # aiconfigurator-core 0.12.0 has no such DSA data
