"""Step times validated against measured serving runs (docs/validation.md).

Datasets:

* ``silicon-sglang`` / ``silicon-sglang-kvbound``: the SGLang rows of aiconfigurator-core's
  ``systems/silicon_sample.csv`` (measured TTFT and TPOT of closed-loop benchmarks: ISL, OSL, concurrency, model,
  GPU, precision, parallelism). Each aggregated row the engine covers is replayed through
  :func:`pearl_sched.sim.replay.replay_closed_loop` on aiconfigurator-core step times, with the KV pool
  aiconfigurator-core estimates for SGLang's default ``mem_fraction_static``. ``-kvbound``: rows whose
  ``concurrency × (ISL + OSL)`` exceeds that pool. Measured E2E is ``TTFT + (OSL − 1) × TPOT`` (the rows have no
  E2E column).
* ``llmservingsim``: LLMServingSim's real vLLM 0.19 runs (``../shared/data/llmservingsim/bench``: 300 ShareGPT
  requests each at their logged arrival times, per-request input/output tokens and TTFT / last-token times),
  replayed open-loop with :func:`pearl_sched.sim.replay.replay_open_loop`'s ``vllm-v1`` policy and the runs' own
  ``max_num_seqs`` / ``max_num_batched_tokens``; one row per run, means over its requests.
* ``dynamo``: NVIDIA Dynamo's profile of Llama-3.1-8B-Instruct-FP8 on H200 with vLLM, TP1 prefill / TP1 decode
  (``../shared/data/dynamo-h200-llama31-8b``): single-request prefill TTFT against ``prefill_s`` and decode ITL at a
  KV usage and context against ``decode_s`` (batch = usage × max KV tokens / context).

Prints one line per dataset, mode and target::

    validate dataset=<name> mode=<agg|disagg> target=<ttft|tpot|e2e> rows=<n> mape_pct=<x>

plus ``validate-coverage`` lines (rows the engine cannot model, by reason) and the step-time ``source``.
Nothing is fitted to these rows, except in the ``-calibrated`` datasets (``--calibrate``): there each row is replayed
with the engine's online correction fitted on the other rows of the same deployment (never on the row itself).
Run: ``python bench/validate.py [--rows N] [--calibrate] [--csv out.csv]``.
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.metrics import mean_absolute_percentage_error

from pearl_sched.profiles.aic_engine import AicCoverageError, AicStepTimes, StepTimeCalibration, aic_version
from pearl_sched.sim.replay import ReplayError, replay_closed_loop, replay_open_loop, sglang_chunked_prefill_size

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

MODEL_ALIASES = {
    # Same architecture and config as the shipped base model; the benchmark served the instruct / renamed weights.
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "zhipuai/GLM-5": "zai-org/GLM-5",
    "meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",  # HuggingFace renamed the repository
    "Qwen/Qwen3-30B-A3B-Instruct-2507": "Qwen/Qwen3-30B-A3B",
}
SGLANG_KV_DTYPE = "bfloat16"
"""SGLang's default ``--kv-cache-dtype auto``: the model's dtype (bf16) for checkpoints without KV-cache scales.

The rows do not name a KV dtype; left unset, aiconfigurator-core infers FP8 KV from FP8 checkpoints."""
POOLS: dict[int, int] = {}
"""KV pool tokens of each engine built here (aiconfigurator-core's estimate of SGLang's pool)."""
ROUNDS = 5
"""Requests per client in a replay (``rounds × concurrency`` requests, all measured, first burst included)."""


@dataclass
class Row:
    """One measured row and its replay."""

    dataset: str
    mode: str
    row_id: str
    measured_ttft_s: float
    measured_tpot_s: float
    measured_e2e_s: float
    sim_ttft_s: float
    sim_tpot_s: float
    sim_e2e_s: float


def _int(value: str) -> int | None:
    return int(float(value)) if value not in ("", "nan") else None


def _engine(row: dict[str, str], cache: dict[tuple[object, ...], AicStepTimes | str]) -> AicStepTimes | str:
    model = MODEL_ALIASES.get(row["model_path"], row["model_path"])
    tp = _int(row["tp_size"]) or 1
    key = (
        model,
        row["system"],
        row["gemm_quant_mode"] or None,
        row["moe_quant_mode"] or None,
        tp,
        _int(row["attention_dp_size"]) or 1,
        _int(row["moe_tp_size"]),
        _int(row["moe_ep_size"]),
    )
    if key not in cache:
        try:
            engine = AicStepTimes(
                model,
                row["system"],
                "sglang",
                tp=tp,
                attention_dp=_int(row["attention_dp_size"]) or 1,
                moe_tp=_int(row["moe_tp_size"]),
                moe_ep=_int(row["moe_ep_size"]),
                gemm_quant_mode=row["gemm_quant_mode"] or None,
                moe_quant_mode=row["moe_quant_mode"] or None,
                kvcache_quant_mode=SGLANG_KV_DTYPE,
                fmha_quant_mode=SGLANG_KV_DTYPE,
            )
            POOLS[id(engine)] = engine.kv_capacity_tokens()
            cache[key] = engine
        except (AicCoverageError, ValueError) as exc:
            reason = str(exc)
            reason = re.sub(r".*\): ", "", reason) if "cannot model" in reason else reason
            cache[key] = reason[:90]
    return cache[key]


@dataclass
class Replayed:
    """A silicon row's replay inputs, kept for the calibrated pass."""

    row: Row
    engine: AicStepTimes
    isl: int
    osl: int
    concurrency: int
    chunk: int


def silicon_rows(limit: int | None) -> tuple[list[Replayed], Counter[str], str]:
    """Replay every aggregated SGLang row the engine covers."""
    import aiconfigurator_core

    path = Path(aiconfigurator_core.__file__).parent / "systems" / "silicon_sample.csv"
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["backend"] == "sglang"]
    rows = [{k: ("" if v == "nan" else v) for k, v in r.items()} for r in rows]
    cache: dict[tuple[object, ...], AicStepTimes | str] = {}
    skipped: Counter[str] = Counter()
    out: list[Replayed] = []
    source = ""
    for row in rows[:limit] if limit else rows:
        if row["mode"] != "agg":
            skipped["disagg rows: not replayed yet (needs the PD world)"] += 1
            continue
        engine = _engine(row, cache)
        if isinstance(engine, str):
            skipped[f"{row['model_path']} {row['system']} tp{row['tp_size']}: {engine}"] += 1
            continue
        isl, osl, conc = int(row["isl"]), int(row["osl"]), int(float(row["batch_size"]))
        pool = POOLS[id(engine)]
        chunk = sglang_chunked_prefill_size(engine.gpu_memory_bytes())
        try:
            res = replay_closed_loop(
                engine, isl=isl, osl=osl, concurrency=conc, pool_tokens=pool, chunked_prefill_size=chunk, rounds=ROUNDS
            )
        except ReplayError as exc:
            skipped[f"replay refused: {exc}"[:90]] += 1
            continue
        except AicCoverageError as exc:
            skipped[f"{row['model_path']} {row['system']}: {str(exc).rsplit(': ', 1)[-1][:80]}"] += 1
            continue
        source = source or engine.source
        ttft = float(row["silicon_ttft_ms"]) / 1e3
        tpot = float(row["silicon_tpot_ms"]) / 1e3
        dataset = "silicon-sglang-kvbound" if conc * (isl + osl) > pool else "silicon-sglang"
        measured = Row(
            dataset, "agg", row["id"], ttft, tpot, ttft + (osl - 1) * tpot, res.ttft_s, res.tpot_s, res.e2e_s
        )
        out.append(Replayed(measured, engine, isl, osl, conc, chunk))
    return out, skipped, source


def calibrated_rows(replayed: list[Replayed]) -> list[Row]:
    """Each row replayed again with the engine calibrated on the *other* rows of its deployment (same engine).

    The calibration pairs are (replayed TPOT, measured TPOT) — the per-token step time a deployment's telemetry
    reports — folded into :class:`~pearl_sched.profiles.aic_engine.StepTimeCalibration`; the row itself is never in
    its own calibration. Rows whose deployment has fewer than 3 other rows are left out.
    """
    groups: dict[int, list[Replayed]] = {}
    for item in replayed:
        groups.setdefault(id(item.engine), []).append(item)
    out: list[Row] = []
    for items in groups.values():
        if len(items) < 4:
            continue
        engine = items[0].engine
        for item in items:
            cal = StepTimeCalibration()
            cal.observe_many((o.row.sim_tpot_s, o.row.measured_tpot_s) for o in items if o is not item)
            engine.calibration = cal
            try:
                res = replay_closed_loop(
                    engine,
                    isl=item.isl,
                    osl=item.osl,
                    concurrency=item.concurrency,
                    pool_tokens=POOLS[id(engine)],
                    chunked_prefill_size=item.chunk,
                    rounds=ROUNDS,
                )
            finally:
                engine.calibration = None
            r = item.row
            out.append(
                Row(
                    r.dataset + "-calibrated",
                    r.mode,
                    r.row_id,
                    r.measured_ttft_s,
                    r.measured_tpot_s,
                    r.measured_e2e_s,
                    res.ttft_s,
                    res.tpot_s,
                    res.e2e_s,
                )
            )
    return out


def dynamo_rows() -> tuple[list[Row], str]:
    """Dynamo's H200 Llama-3.1-8B-FP8 vLLM profile against the engine's vLLM step times."""
    folder = DATA / "dynamo-h200-llama31-8b" / "H200_TP1P_TP1D"
    engine = AicStepTimes("meta-llama/Meta-Llama-3.1-8B", "h200_sxm", "vllm", tp=1, gemm_quant_mode="fp8")
    out: list[Row] = []
    with (folder / "prefill_ttft_vs_isl.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            isl = int(float(r["isl_tokens"]))
            measured = float(r["ttft_ms"]) / 1e3
            sim = engine.prefill_s(isl, 1, 0)
            out.append(Row("dynamo", "disagg", f"prefill-{isl}", measured, math.nan, math.nan, sim, math.nan, math.nan))
    with (folder / "decode_itl_vs_kvusage_context.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            context = float(r["context_length"])
            batch = max(1, round(float(r["kv_usage_frac"]) * float(r["max_kv_tokens"]) / context))
            measured = float(r["itl_ms"]) / 1e3
            sim = engine.decode_s(batch, context)
            out.append(
                Row(
                    "dynamo",
                    "disagg",
                    f"decode-{batch}x{context:.0f}",
                    math.nan,
                    measured,
                    math.nan,
                    math.nan,
                    sim,
                    math.nan,
                )
            )
    return out, engine.source


def llmservingsim_rows() -> tuple[list[Row], Counter[str], str]:
    """LLMServingSim's real vLLM 0.19 runs (300 ShareGPT requests each), replayed open-loop with vLLM's policy."""
    import json

    out: list[Row] = []
    skipped: Counter[str] = Counter()
    sources = []
    systems = {"RTXPRO6000": "rtx_pro_6000_server", "RTX4090": "rtx_4090"}
    for meta_path in sorted((DATA / "llmservingsim" / "bench" / "examples").glob("*/*/vllm/meta.json")):
        meta = json.loads(meta_path.read_text())
        kwargs = meta["engine_kwargs"]
        gpu = systems.get(meta_path.parents[2].name, meta_path.parents[2].name)
        try:
            model = MODEL_ALIASES.get(meta["model"], meta["model"])
            engine = AicStepTimes(model, gpu, "vllm", tp=int(kwargs["tensor_parallel_size"]))
            pool = engine.kv_capacity_tokens()
        except AicCoverageError as exc:
            skipped[f"{meta['model']} on {gpu}: {str(exc)[:80]}"] += 1
            continue
        requests = [json.loads(line) for line in (meta_path.parent / "requests.jsonl").read_text().splitlines()]
        t0 = min(r["arrival_time"] for r in requests)
        arrivals = [(r["arrival_time"] - t0, int(r["input_toks"]), int(r["output_toks"])) for r in requests]
        res = replay_open_loop(
            engine,
            arrivals,
            pool_tokens=pool,
            policy="vllm-v1",
            max_num_batched_tokens=int(kwargs["max_num_batched_tokens"]),
            max_running_requests=int(kwargs["max_num_seqs"]),
        )
        ttft = [r["first_token_ts"] - r["queued_ts"] for r in requests]
        e2e = [r["last_token_ts"] - r["queued_ts"] for r in requests]
        tpot = [(e - t) / max(r["output_toks"] - 1, 1) for e, t, r in zip(e2e, ttft, requests, strict=True)]
        name = f"{meta_path.parents[2].name}/{meta_path.parents[1].name}"
        out.append(
            Row(
                "llmservingsim",
                "agg",
                name,
                float(np.mean(ttft)),
                float(np.mean(tpot)),
                float(np.mean(e2e)),
                res.ttft_s,
                res.tpot_s,
                res.e2e_s,
            )
        )
        sources.append(engine.source)
    return out, skipped, "; ".join(sources)


def mape_lines(rows: list[Row]) -> list[str]:
    """The ``validate`` lines, MAPE by scikit-learn."""
    lines = []
    for dataset in sorted({r.dataset for r in rows}):
        for mode in ("agg", "disagg"):
            for target in ("ttft", "tpot", "e2e"):
                pairs = [
                    (getattr(r, f"measured_{target}_s"), getattr(r, f"sim_{target}_s"))
                    for r in rows
                    if r.dataset == dataset and r.mode == mode
                ]
                pairs = [(m, s) for m, s in pairs if not (math.isnan(m) or math.isnan(s))]
                if not pairs:
                    continue
                measured, sim = np.array(pairs).T
                mape = 100 * mean_absolute_percentage_error(measured, sim)
                lines.append(
                    f"validate dataset={dataset} mode={mode} target={target} rows={len(pairs)} mape_pct={mape:.1f}"
                )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None, help="only the first N SGLang rows (smoke runs)")
    parser.add_argument("--csv", type=Path, default=None, help="write every row's measured and simulated values")
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="also replay each SGLang row with the engine calibrated on the other rows of its deployment",
    )
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # aiconfigurator-core logs each low-fidelity table it loads
    start = time.perf_counter()
    replayed, skipped, source = silicon_rows(args.rows)
    rows = [r.row for r in replayed]
    if args.calibrate:
        rows += calibrated_rows(replayed)
    print(f"validate-source dataset=silicon-sglang {source} (model/GPU/parallelism per row)")
    for reason, n in skipped.most_common():
        print(f"validate-coverage dataset=silicon-sglang rows={n} not_run={reason}")
    if (DATA / "dynamo-h200-llama31-8b").is_dir():
        dyn, dyn_source = dynamo_rows()
        rows += dyn
        print(f"validate-source dataset=dynamo {dyn_source}")
    else:
        print(f"validate-coverage dataset=dynamo not_run=no data at {DATA / 'dynamo-h200-llama31-8b'}")
    if (DATA / "llmservingsim").is_dir():
        lss, lss_skipped, lss_source = llmservingsim_rows()
        rows += lss
        print(f"validate-source dataset=llmservingsim {lss_source}")
        for reason, n in lss_skipped.items():
            print(f"validate-coverage dataset=llmservingsim rows={n} not_run={reason}")
    for line in mape_lines(rows):
        print(line)
    if args.csv:
        with args.csv.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(Row.__dataclass_fields__)
            for r in rows:
                writer.writerow(r.__dict__.values())
    print(f"validate-wall_s={time.perf_counter() - start:.0f} aiconfigurator_core={aic_version()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
