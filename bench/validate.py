"""Step times validated against measured serving runs (docs/validation.md).

Datasets:

* ``silicon-sglang`` / ``silicon-sglang-kvbound``: the SGLang rows of aiconfigurator-core's
  ``systems/silicon_sample.csv`` (measured TTFT and TPOT of closed-loop benchmarks: ISL, OSL, concurrency, model,
  GPU, precision, parallelism). Each aggregated row the engine covers is replayed through
  :func:`pearl_sched.sim.replay.replay_closed_loop` on aiconfigurator-core step times, with the KV pool SGLang
  derives at its default ``mem_fraction_static`` (``--pool-source aiconfigurator``: aiconfigurator-core's estimate of
  it, for comparison), as its benchmark client sent the
  requests (:class:`Harness`: InferenceMAX's lengths in [0.8, 1] × ISL/OSL and 10 × C requests; fixed lengths where
  the client is not recorded). ``-kvbound``: rows whose ``concurrency × (ISL + OSL)`` exceeds that pool. Measured
  E2E is ``TTFT + (mean OSL − 1) × TPOT`` (the rows have no E2E column). ``tp_size`` recorded as TP × EP is read
  back (:func:`parallelism`). Rows whose deployment SGLang's defaults cannot start run with the launch flags its
  public script set on the rows' date (:data:`RECORDED_LAUNCHES`, :func:`recorded_launch`).
* the same datasets with ``mode=disagg``: the file's disaggregated SGLang rows whose deployment is recorded (worker
  counts and each role's parallelism, in the row or in its twin: :func:`deployment_twins`), replayed through
  :func:`pearl_sched.sim.replay.replay_disagg_closed_loop` (:func:`disagg_rows`); ``mode=agg+disagg`` lines give
  every replayed SGLang row together (the issue's target population).
* ``silicon-sglang-aic-estimate`` (``--aic-estimate``): aiconfigurator-core's own closed-form estimate of the same
  rows, for comparison with the replay.
* ``llmservingsim`` / ``llmservingsim-requests``: LLMServingSim's real vLLM 0.19 runs
  (``../shared/data/llmservingsim/bench``: 300 ShareGPT requests each at their logged arrival times, per-request
  input/output tokens and TTFT / last-token times), replayed open-loop with
  :func:`pearl_sched.sim.replay.replay_open_loop`'s ``vllm-v1`` policy and the runs' own ``max_num_seqs`` /
  ``max_num_batched_tokens`` (a data-parallel run as its ranks); one row per run and one per request.
* ``dynamo``: NVIDIA Dynamo's profile of Llama-3.1-8B-Instruct-FP8 on H200 with vLLM, TP1 prefill / TP1 decode
  (``../shared/data/dynamo-h200-llama31-8b``): single-request prefill TTFT against ``prefill_s`` and decode ITL at a
  KV usage and context against ``decode_s`` (batch = usage × max KV tokens / context).

Prints one line per dataset, mode and target::

    validate dataset=<name> mode=<agg|disagg> target=<ttft|tpot|e2e> rows=<n> mape_pct=<x>

plus ``validate-coverage`` (rows not run, by reason), ``validate-rows`` (rows that exist and ran),
``validate-unique`` (distinct measurements), ``validate-harness`` and the step-time ``validate-source`` lines.
Nothing is fitted to these rows, except in the ``-calibrated`` datasets (``--calibrate``): there each row is replayed
with the engine's online correction fitted on the other rows of the same deployment (never on the row itself).
``--world-step-overhead`` adds the rollout world's per-step framework time to every replayed step (datasets named
``…-world-overhead``). Run: ``python bench/validate.py [--rows N] [--calibrate] [--aic-estimate]
[--kv-dtype-from-scripts] [--world-step-overhead] [--modes agg,disagg] [--silicon-only] [--models Qwen3.5,Llama]
[--csv out.csv]``.
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
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

import numpy as np
from sklearn.metrics import mean_absolute_percentage_error

from pearl_sched.profiles.aic_engine import (
    KV_POOL_SOURCES,
    PHASES,
    AicCoverageError,
    AicStepTimes,
    StepTimeCalibration,
    aic_version,
    large_ep_comm,
)
from pearl_sched.sim.replay import (
    SGLANG_MAX_PREFILL_TOKENS,
    DisaggReplayResult,
    PDRole,
    ReplayError,
    ReplayResult,
    replay_closed_loop,
    replay_disagg_closed_loop,
    replay_open_loop,
    sglang_chunked_prefill_size,
    sglang_cuda_graph_batch_sizes,
)
from pearl_sched.sim.setting import STEP_OVERHEAD_S
from pearl_sched.sim.steptimes import StepTimes

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
POOL_SOURCE = "sglang"
"""Where every row's KV pool comes from (``--pool-source``, :data:`pearl_sched.profiles.aic_engine.KV_POOL_SOURCES`):
SGLang's own derivation (``profile_max_num_token`` at its default ``mem_fraction_static``, weights from
aiconfigurator-core's model at the row's precision) or aiconfigurator-core's estimate. One source for every row."""
POOLS: WeakKeyDictionary[AicStepTimes, int] = WeakKeyDictionary()
"""KV pool tokens of each engine built here (from :data:`POOL_SOURCE`); weak keys, so a collected engine's entry goes
with it (an ``id()`` key could be reused by a later engine and hand it the old pool)."""


def set_pool_source(source: str) -> None:
    """Every row's KV pool from ``source`` from now on (``--pool-source``)."""
    global POOL_SOURCE
    if source not in KV_POOL_SOURCES:
        raise ValueError(f"unknown KV pool source {source!r}; known: {', '.join(KV_POOL_SOURCES)}")
    POOL_SOURCE = source


_SERVER_MEMORY: WeakKeyDictionary[AicStepTimes, dict[tuple[bool, str], tuple[int, int]]] = WeakKeyDictionary()
POOL_SOURCE_NOTES = {
    "sglang": "KV pool as SGLang's profile_max_num_token derives it: memory x default mem_fraction_static - weights",
    "aiconfigurator": "KV pool from aiconfigurator-core's estimate_kv_cache: the same budget less its activation,"
    " NCCL and runtime estimates",
}


@dataclass(frozen=True)
class LaunchFlags:
    """SGLang launch flags one engine role of a deployment ran with, read from its recorded launch script.

    Only flags the script sets; None: SGLang's default (the replay's reading of rows without a record).
    """

    script: str
    """Where the flags are recorded: repository, path, commit and date."""
    mem_fraction_static: float
    """``--mem-fraction-static``: the KV pool is SGLang's derivation at this fraction, not the default."""
    kv_cache_dtype: str
    """``--kv-cache-dtype`` as aiconfigurator names it (``fp8_e4m3`` → ``fp8``): the pool's bytes per token and
    the attention's KV data; a script that sets none runs SGLang's ``auto`` (:data:`SGLANG_KV_DTYPE` for these
    checkpoints)."""
    chunked_prefill_size: int
    """``--chunked-prefill-size``."""
    max_prefill_tokens: int | None = None
    """``--max-prefill-tokens`` (None: SGLang's 16,384)."""
    max_running_requests: int | None = None
    """``--max-running-requests``: the server's running requests (aggregated replay); a disaggregated engine's per
    rank, ``// --dp-size`` with attention-DP (``ModelRunner.max_running_requests``, SGLang 0.5.8): a prefill rank's
    batch and a decode rank's running batch (``get_new_prebuilt_batch``) stop there."""
    cuda_graph_max_bs: int | None = None
    """``--cuda-graph-max-bs``: the captured decode batch sizes stop there."""
    max_total_tokens: int | None = None
    """``--max-total-tokens``: the pool is at most this many tokens (``profile_max_num_token`` takes the min)."""
    layout: tuple[int, int, int | None, int | None] | None = None
    """(TP, attention-DP, MoE TP, EP) the script launched the engine at, where it differs from the row's columns
    (None: as the row records)."""
    workers: tuple[int, int] | None = None
    """(prefill, decode) workers of the recipe variant (a disaggregated row with other worker counts is not tied;
    None: any)."""
    search_space: tuple[tuple[int, int, int, int], ...] | None = None
    """(ISL, OSL, first C, last C) of each run the deployment's config launched this script branch for at that commit
    (InferenceX ``seq-len-configs`` / ``search-space``); a row outside them is not tied to the record (None: every
    row of the deployment)."""
    speculative_decoding: str | None = None
    """The script's speculative decoding (``--speculative-algorithm`` and its steps / draft tokens), None: none. The
    replay runs one token per request per decode step and has no draft model: a row whose server ran it is refused
    (:func:`_engine`), not replayed as a server it was not."""


_DSR1_FP8_B200_SH = (
    "SemiAnalysisAI/InferenceX benchmarks/single_node/dsr1_fp8_b200.sh (TP=4 branch) at 12ba0ae07, 2026-03-25: the"
    " commit that moved dsr1-fp8-b200-sglang to lmsysorg/sglang:v0.5.9-cu130, the rows' image and measurement time"
)
_SRT_SLURM_GB200_FP8_LOW_LATENCY = (
    "srt-slurm recipes/gb200-fp8/1k1k/low-latency.yaml (branch sa-submission-q1-2026, named by InferenceX"
    " dsr1-fp8-gb200-dynamo-sglang at 37f353be2, 2026-02-09; the same flags in NVIDIA/srt-slurm at f6754071,"
    " 2026-02-05, and 5063eb43, 2026-03-03)"
)
_SRT_SLURM_GB200_FP8_8K1K_LOW_LATENCY = (
    "srt-slurm recipes/gb200-fp8/8k1k/low-latency.yaml ({}) (branch sa-submission-q1-2026, named by InferenceX"
    " dsr1-fp8-gb200-dynamo-sglang at 37f353be2, 2026-02-09, for 8k/1k C 4-16; the same flags in NVIDIA/srt-slurm at"
    " f6754071, 2026-02-05, and 5063eb43, 2026-03-03)"
)
_DYNAMO_GB200_FP8_1K1K_LOW_LATENCY = (
    "ai-dynamo/dynamo examples/backends/sglang/slurm_jobs/scripts/gb200-fp8/disagg/1k1k-low-latency.sh at"
    " b7107d008 (2025-12-17), the commit InferenceX's dsr1_fp8_gb200_dynamo-sglang_slurm.sh pinned on 2025-12-21"
    " (SCRIPT_MODE=1k1k-low-latency)"
)
_DSR1_FP8_B200_SH_TP8 = (
    "SemiAnalysisAI/InferenceX benchmarks/single_node/dsr1_fp8_b200.sh (TP=8 branch) at 12ba0ae07, 2026-03-25: the"
    " commit that moved dsr1-fp8-b200-sglang to lmsysorg/sglang:v0.5.9-cu130, the rows' image and measurement time"
)
_DSR1_FP8_H200_SH = (
    "SemiAnalysisAI/InferenceX benchmarks/single_node/dsr1_fp8_h200.sh at 12ba0ae07, 2026-03-25 (file as of"
    " 64c20b6b5, 2026-03-11): the commit that moved dsr1-fp8-h200-sglang to lmsysorg/sglang:v0.5.9-cu130, the rows'"
    " image and measurement time"
)
_DSR1_FP4_B200_SH = (
    "SemiAnalysisAI/InferenceX benchmarks/single_node/dsr1_fp4_b200.sh at 12ba0ae07, 2026-03-25 (file as of"
    " 64c20b6b5, 2026-03-11): the commit that moved dsr1-fp4-b200-sglang to lmsysorg/sglang:v0.5.9-cu130, the rows'"
    " image and measurement time"
)
_DSR1_FP8_B300_SH = (
    "SemiAnalysisAI/InferenceX benchmarks/single_node/dsr1_fp8_b300.sh (TP={} branch) at 5b302f147, 2026-04-17: the"
    " commit that added dsr1-fp8-b300-sglang on lmsysorg/sglang:v0.5.10.post1-cu130 and the script (unchanged until"
    " 2026-05-12), the rows' image and measurement date"
)
_DSR1_FP4_B300_SH = (
    "SemiAnalysisAI/InferenceX benchmarks/single_node/dsr1_fp4_b300.sh at 9ebeafb4e, 2026-04-17: the commit that"
    " added dsr1-fp4-b300-sglang on lmsysorg/sglang:v0.5.10.post1-cu130 and the script (unchanged until"
    " 2026-05-12), the rows' image and measurement date"
)
_DSR1_FP8_B200_V056 = (
    "SemiAnalysisAI/InferenceX benchmarks/dsr1_fp8_b200_docker.sh and dsr1_fp8_b200_slurm.sh (the same launch line)"
    " at d27433dff, 2025-12-31 15:17:57 UTC: the commit that moved dsr1-fp8-b200-sglang to"
    " lmsysorg/sglang:v0.5.6-cu129-amd64, the row's image; the row is measured 3 s later"
)
_DSR1_FP4_B200_DOCKER_NOV = (
    "SemiAnalysisAI/InferenceX benchmarks/dsr1_fp4_b200_docker.sh as of 4b860b78e (2025-10-01), the script"
    " dsr1-fp4-b200-sglang ran (runners/launch_b200-nvd.sh / -tg.sh) until d8fe8f73e (2025-11-10 19:55 UTC) moved the"
    " config to lmsysorg/sglang:v0.5.5-cu129-amd64 with ep = tp and replaced --enable-ep-moe by --ep-size $EP_SIZE"
    " (the same EP; every other flag unchanged): the rows of 2025-11-10 (no image recorded) record EP 1, the config's"
    " empty ep field before that commit; on 2025-11-02 the job bmk-b200-fp4 of .github/workflows/dsr1-tmpl.yml"
    " (0c3e531b6, 2025-10-06) ran it on lmsysorg/sglang:v0.5.3rc1-cu129-b200 at TP 4 and 8, C 4-128"
)
_DSR1_FP8_B200_DOCKER_1118 = (
    "SemiAnalysisAI/InferenceX benchmarks/dsr1_fp8_b200_docker.sh at d8fe8f73e (2025-11-10 19:55 UTC, which set"
    " --ep-size $EP_SIZE and ep: 8 for dsr1-fp8-b200-sglang on lmsysorg/sglang:v0.5.5-cu129-amd64; unchanged until"
    " d22bf9ca9, 2025-11-21): the rows of 2025-11-18 (no image recorded) record EP 8 (tp_size 64 = TP x EP), so they"
    " ran before 189ae51cc (2025-11-18 20:03 UTC) set ep back to 1"
)
_TP4 = (4, 1, 4, 1)
_TP8 = (8, 1, 8, 1)
_ATTENTION_DP4 = (1, 4, 4, 1)
_K1, _K8 = 1024, 8192
_C4_64 = ((_K1, _K1, 4, 64), (_K1, _K8, 4, 64), (_K8, _K1, 4, 64))
_C4_128 = ((_K1, _K1, 4, 128), (_K1, _K8, 4, 128), (_K8, _K1, 4, 128))
_C4_128_8K1K_C4_16 = (*_C4_128[:2], (_K8, _K1, 4, 16))
"""dsr1-fp4-b200-sglang's runs at TP 8 (C 4-128, at 8k/1k C 4-16); at TP 4 they are :data:`_C4_128`."""
_dsr1_fp4_b200 = LaunchFlags(  # one launch line for every TP / EP / sequence length
    _DSR1_FP4_B200_SH,
    mem_fraction_static=0.85,
    kv_cache_dtype="fp8",
    chunked_prefill_size=16384,
    max_running_requests=256,
    cuda_graph_max_bs=256,
)
_dsr1_fp4_b200_november = replace(_dsr1_fp4_b200, script=_DSR1_FP4_B200_DOCKER_NOV)
"""The docker script of November 2025 (:data:`_DSR1_FP4_B200_DOCKER_NOV`): the later flags, at the EP it launched."""
_dsr1_fp8_b200_tp4 = LaunchFlags(  # the TP 4 branch (the script exits for any other ISL / OSL)
    _DSR1_FP8_B200_SH,
    mem_fraction_static=0.95,
    kv_cache_dtype="fp8",
    chunked_prefill_size=8192,
    max_prefill_tokens=8192,
    max_running_requests=32,
    cuda_graph_max_bs=32,
    search_space=((_K8, _K1, 4, 32),),
)
_dsr1_fp8_b200_tp8 = LaunchFlags(
    _DSR1_FP8_B200_SH_TP8,
    mem_fraction_static=0.82,
    kv_cache_dtype="fp8",
    chunked_prefill_size=32768,
    max_prefill_tokens=32768,
    max_running_requests=128,
    cuda_graph_max_bs=128,
    search_space=((_K1, _K1, 4, 64), (_K1, _K8, 4, 64), (_K8, _K1, 4, 4)),
)
_dsr1_fp8_h200 = LaunchFlags(  # 1k/1k; the other lengths run 256 requests / CUDA-graph sizes
    _DSR1_FP8_H200_SH,
    mem_fraction_static=0.82,
    kv_cache_dtype=SGLANG_KV_DTYPE,
    chunked_prefill_size=32768,
    max_prefill_tokens=32768,
    max_running_requests=512,
    cuda_graph_max_bs=512,
    search_space=_C4_64[:1],
)
_gb200_fp8_low_latency = LaunchFlags(  # srt-slurm's and dynamo's GB200 FP8 1k/1k low-latency engines
    _SRT_SLURM_GB200_FP8_LOW_LATENCY,
    mem_fraction_static=0.95,
    kv_cache_dtype="fp8",
    chunked_prefill_size=8192,
    max_running_requests=512,
    cuda_graph_max_bs=128,
)
_GB200_PREFILL_TOTAL_TOKENS = 8192
"""``--max-total-tokens`` of both GB200 low-latency prefill engines."""
_dynamo_gb200 = replace(_gb200_fp8_low_latency, script=_DYNAMO_GB200_FP8_1K1K_LOW_LATENCY, layout=_TP4)
_DYNAMO_GB200_MAX_TPT = (
    "ai-dynamo/dynamo examples/backends/sglang/slurm_jobs/scripts/gb200-{}/disagg/{}-max-tpt.sh ({}) at b7107d008"
    " (2025-12-17), the commit InferenceX's dsr1_{}_gb200_dynamo-sglang_slurm.sh pinned on 2025-12-21"
    " (nvidia-master.yaml at c4cde0370: SCRIPT_MODE={}-max-tpt)"
)
_DEP8_EP8, _DEP32_EP32, _DEP4_EP4 = (1, 8, 1, 8), (1, 32, 1, 32), (1, 4, 1, 4)
"""The max-throughput engines as launched: ``--tp-size`` = ``--dp-size`` = the engine's GPUs with
``--enable-dp-attention`` and ``--moe-a2a-backend deepep`` or ``--ep-size`` = its GPUs (SGLang 0.5.5's
``ServerArgs._handle_a2a_moe`` sets ``ep_size = tp_size`` under DeepEP): attention-DP over every GPU, the MoE pure
expert-parallel (MoE TP 1). The rows record MoE TP = the GPUs, EP 1."""
_SRT_SLURM_H200_8K1K_BS128 = (
    "NVIDIA/srt-slurm recipes/h200/8k1k/bs128-1p1d-dep.yaml ({}) at 838acc8c (2026-02-04; the same flags at the"
    " sa-submission-q1-2026 merge 5063eb43, 2026-03-03, there on lmsysorg/sglang:v0.5.8.post1-cu130), named by"
    " InferenceX dsr1-fp8-h200-dynamo-sglang since f0e131f2e (2026-02-05) for 8k/1k C 64-256"
)
_SRT_SLURM_B200_FP8_8K1K = (
    "NVIDIA/srt-slurm recipes/b200-fp8/8k1k.yaml {} ({}) at 603fb034 (2026-03-13; resolved as"
    " recipes/b200-fp8/8k1k_stp_{}.yaml with the same flags in the sa-submission-q1-2026 merge 4a22a181, 2026-03-25),"
    " named by InferenceX dsr1-fp8-b200-dynamo-sglang at 593fb431a (2026-03-18)"
)
_b200_fp8_8k1k_prefill = LaunchFlags(  # the base recipe's prefill engine: DP 8 attention, EP 1 (MoE TP 8), 8 per engine
    _SRT_SLURM_B200_FP8_8K1K.format("base", "prefill", "*"),
    mem_fraction_static=0.6,
    kv_cache_dtype="fp8",
    chunked_prefill_size=65536,
    max_prefill_tokens=8192,
    max_running_requests=8,
)
_b200_fp8_8k1k_decode = LaunchFlags(  # the base recipe's decode engine (no --chunked-prefill-size: SGLang's 16,384)
    _SRT_SLURM_B200_FP8_8K1K.format("base", "decode", "*"),
    mem_fraction_static=0.75,
    kv_cache_dtype="fp8",
    chunked_prefill_size=16384,
)
_StpSide = tuple[tuple[int, int, int | None, int | None], int, int]
"""(layout, ``--max-running-requests``, prefill: ``--chunked-prefill-size`` / decode: ``--cuda-graph-max-bs``)."""
_StpVariant = tuple[str, tuple[int, int], int, tuple[int, ...], _StpSide, _StpSide]
"""(recipe, (prefill, decode) workers, ISL, the recipe's ``benchmark.concurrencies``, prefill side, decode side); OSL
1,024. InferenceX runs ``srtctl apply -f $CONFIG_FILE``: the recipe's concurrencies are the runs."""
_TP8_EP8, _DEP4, _DEP8 = (8, 1, 1, 8), (1, 4, 1, 4), (1, 8, 1, 8)
_SRT_SLURM_B200_FP4_STP = (
    'NVIDIA/srt-slurm recipes/b200-fp4/{}.yaml ({}) as of csahithi/srt-slurm f4e23a0 (2026-02-10 06:14 UTC, "modify'
    ' b200 sgl fp4 non-mtp configs (#168)"; the same files byte for byte in the sa-submission-q1-2026 squash merge'
    " 5063eb43, 2026-03-03), named by InferenceX dsr1-fp4-b200-dynamo-sglang at 46e0b5ff0 (2026-02-11 01:17 UTC, the"
    " commit that added the config on lmsysorg/sglang:v0.5.8.post1-cu130-runtime)"
)
_B200_FP4_STP: tuple[_StpVariant, ...] = (  # every STP recipe of the config, as InferenceX named them
    ("1k1k/stp/low-latency-dep4-1p-tep8-5d", (1, 5), _K1, (16, 128), (_DEP4, 512, 32768), (_TP8_EP8, 512, 512)),
    ("1k1k/stp/low-latency-dep4-1p-tep8-6d", (1, 6), _K1, (32, 64, 256), (_DEP4, 512, 32768), (_TP8_EP8, 512, 512)),
    ("1k1k/stp/max-tpt-dep4-1p-dep8-1d", (1, 1), _K1, (512,), (_DEP4, 1024, 32768), (_DEP8, 1024, 1024)),
    ("1k1k/stp/max-tpt-dep4-1p-dep8-2d", (1, 2), _K1, (512,), (_DEP4, 512, 32768), (_DEP8, 512, 512)),
    ("8k1k/stp/low-latency-dep4-1p-tep8-1d", (1, 1), _K8, (64, 128), (_DEP4, 512, 32768), (_TP8_EP8, 512, 512)),
    ("8k1k/stp/low-latency-dep4-1p-tep8-5d", (1, 5), _K8, (8,), (_DEP4, 512, 32768), (_TP8_EP8, 512, 512)),
    ("8k1k/stp/low-latency-dep4-2p-tep8-5d", (2, 5), _K8, (4, 128), (_DEP4, 512, 32768), (_TP8_EP8, 512, 512)),
    ("8k1k/stp/low-latency-tp4-1p-tp8-1d", (1, 1), _K8, (4, 8, 16, 64), (_TP4, 512, 32768), (_TP8, 512, 512)),
    ("8k1k/stp/max-tpt-dep4-7p-dep8-2d", (7, 2), _K8, (1024, 2048), (_DEP4, 1024, 65536), (_DEP8, 2048, 1024)),
)
"""The dsr1-fp4-b200-dynamo-sglang STP recipes (the rows of configs 527, 530, 532, 535, 538 and the export rows they
identify). Every engine: ``--mem-fraction-static 0.85 --kv-cache-dtype fp8_e4m3 --disable-radix-cache``; the prefill
engine's ``--chunked-prefill-size`` = ``--max-prefill-tokens`` as listed, the decode engine's 32,768."""
_SRT_SLURM_B200_FP8_STP = (
    'NVIDIA/srt-slurm recipes/b200-fp8/{}.yaml ({}) as of csahithi/srt-slurm db462bd (2026-02-07 00:52 UTC, "adds'
    " modified B200-fp8 recipes\"; the same files byte for byte at the branch's f4e23a0, 2026-02-10, and in the"
    " sa-submission-q1-2026 squash merge 5063eb43, 2026-03-03), named by InferenceX dsr1-fp8-b200-dynamo-sglang at"
    " 8a02464b8 (2026-02-07 07:08 UTC, the commit that added the config on lmsysorg/sglang:v0.5.8.post1-cu130-amd64)"
)
_SRT_SLURM_B200_FP8_1K1K_0318 = (
    "srt-slurm recipes/b200-fp8/{}.yaml ({}) on branch sa-submission-q1-2026, which InferenceX's runner"
    " (launch_b200-dgxc-slurm.sh) cloned when dsr1-fp8-b200-dynamo-sglang at 593fb431a (2026-03-18) still named it for"
    " 1k/1k C 4; the branch's file of that day is not public: the same flags in NVIDIA/srt-slurm's squash merge of the"
    " branch 5063eb43 (2026-03-03) and, after the 2026-03-04 consolidation 37f8ca23, in recipes/b200-fp8/1k1k.yaml"
    " zip_override_stp_lowlat[0] unchanged to the next merge of the branch 4a22a181 (2026-03-25)"
)
_B200_FP8_STP: tuple[_StpVariant, ...] = (  # every STP recipe of the config
    ("1k1k/stp/low-latency-tep8-1p1d", (1, 1), _K1, (4,), (_TP8_EP8, 512, 32768), (_TP8_EP8, 512, 512)),
    (
        "1k1k/stp/low-latency-tep8-1p3d",
        (1, 3),
        _K1,
        (16, 32, 64, 128, 256),
        (_TP8_EP8, 512, 32768),
        (_TP8_EP8, 512, 512),
    ),
    ("1k1k/stp/max-tpt-dep8-1p5d", (1, 5), _K1, (1024,), (_DEP8, 1024, 32768), (_DEP8, 1024, 1024)),
    ("1k1k/stp/max-tpt-dep8-2p5d", (2, 5), _K1, (2048,), (_DEP8, 1024, 32768), (_DEP8, 1024, 1024)),
    ("8k1k/stp/low-latency-tep8-1p1d", (1, 1), _K8, (4, 32, 64), (_TP8_EP8, 512, 32768), (_TP8_EP8, 512, 512)),
    ("8k1k/stp/low-latency-tep8-1p4d", (1, 4), _K8, (64,), (_TP8_EP8, 512, 32768), (_TP8_EP8, 512, 512)),
    ("8k1k/stp/low-latency-tep8-1p6d", (1, 6), _K8, (32,), (_TP8_EP8, 512, 32768), (_TP8_EP8, 512, 512)),
    ("8k1k/stp/max-tpt-dep8-1p1d", (1, 1), _K8, (128,), (_DEP8, 1024, 32768), (_DEP8, 1024, 1024)),
    ("8k1k/stp/max-tpt-dep8-2p1d", (2, 1), _K8, (256,), (_DEP8, 1024, 32768), (_DEP8, 1024, 1024)),
)
"""The dsr1-fp8-b200-dynamo-sglang STP recipes (the rows of configs 453, 457, 459 and the export rows they identify);
every engine's flags as :data:`_B200_FP4_STP`'s (0.85, FP8 KV, chunk and prefill tokens 32,768)."""
_B200_FP4_STP_KEY = (
    "deepseek-ai/DeepSeek-V3",
    "b200_sxm",
    "fp4",
    "disagg",
    "lmsysorg/sglang:v0.5.8.post1-cu130-runtime",
    "2026-02-11",
)
_B200_FP8_STP_KEY = (
    "deepseek-ai/DeepSeek-V3",
    "b200_sxm",
    "fp8",
    "disagg",
    "lmsysorg/sglang:v0.5.8.post1-cu130-amd64",
    "2026-02-07",
)
"""The :func:`launch_key` of the rows of :data:`_B200_FP4_STP` / :data:`_B200_FP8_STP`: their launches
(:data:`RECORDED_LAUNCHES`) and their deployments (:data:`RECIPE_DEPLOYMENTS`)."""


@dataclass(frozen=True)
class RecipeDeployment:
    """One disaggregated recipe variant: the deployment it launches and the runs it was launched for."""

    recipe: str
    """Repository, path and commit of the recipe."""
    workers: tuple[int, int]
    """(prefill, decode) workers."""
    prefill_layout: tuple[int, int, int | None, int | None]
    """(TP, attention-DP, MoE TP, EP) of each prefill engine."""
    decode_layout: tuple[int, int, int | None, int | None]
    """(TP, attention-DP, MoE TP, EP) of each decode engine."""
    isl: int
    """Input length of its runs."""
    osl: int
    """Output length of its runs."""
    concurrencies: tuple[int, ...]
    """The concurrencies it ran (``benchmark.concurrencies``)."""


def _stp_launches(
    script: str | Callable[[str, str], str],
    variants: tuple[_StpVariant, ...],
    bases: tuple[LaunchFlags, LaunchFlags] | None = None,
) -> dict[tuple[str, tuple[int, int, int | None, int | None]], tuple[LaunchFlags, ...]]:
    """The records of both roles for ``variants`` (:data:`_B200_FP4_STP`, :data:`_B200_FP8_STP`), by (role, layout).

    ``script``: the record's source, formatted (or called) with the variant's recipe and the role. ``bases``: the
    (prefill, decode) engines' flags of a recipe whose variants override only workers, layouts, the running cap, the
    prefill chunk and the decode CUDA graphs (:data:`_B200_FP8_8K1K_STP`); None: the STP recipes' common flags
    (0.85, FP8 KV, chunk = ``--max-prefill-tokens``, decode chunk and prefill tokens 32,768).
    """
    out: dict[tuple[str, tuple[int, int, int | None, int | None]], tuple[LaunchFlags, ...]] = {}
    for recipe, workers, isl, concs, prefill, decode in variants:
        for role, (layout, cap, tokens_or_graphs) in (("prefill", prefill), ("decode", decode)):
            source = script(recipe, role) if callable(script) else script.format(recipe, role)
            runs = tuple((isl, _K1, c, c) for c in concs)
            if bases is not None:
                base = bases[0] if role == "prefill" else bases[1]
                flags = replace(
                    base,
                    script=source,
                    chunked_prefill_size=tokens_or_graphs if role == "prefill" else base.chunked_prefill_size,
                    max_running_requests=cap,
                    cuda_graph_max_bs=None if role == "prefill" else tokens_or_graphs,
                    workers=workers,
                    search_space=runs,
                )
            else:
                flags = LaunchFlags(
                    source,
                    mem_fraction_static=0.85,
                    kv_cache_dtype="fp8",
                    chunked_prefill_size=tokens_or_graphs if role == "prefill" else 32768,
                    max_prefill_tokens=tokens_or_graphs if role == "prefill" else 32768,
                    max_running_requests=cap,
                    cuda_graph_max_bs=None if role == "prefill" else tokens_or_graphs,  # prefill: --disable-cuda-graph
                    workers=workers,
                    search_space=runs,
                )
            out[(role, layout)] = (*out.get((role, layout), ()), flags)
    return out


def _stp_deployments(script: str, variants: tuple[_StpVariant, ...]) -> tuple[RecipeDeployment, ...]:
    """The deployments of ``variants`` (:data:`RECIPE_DEPLOYMENTS`)."""
    return tuple(
        RecipeDeployment(script.format(recipe, "both roles"), workers, prefill[0], decode[0], isl, _K1, concs)
        for recipe, workers, isl, concs, prefill, decode in variants
    )


_B200_FP8_8K1K_STP: tuple[_StpVariant, ...] = (  # the variants of configs 639-655 (8k/1k), as InferenceX named them
    *(
        (f"zip_override_stp_maxtpt[{k}]", workers, _K8, concs, ((1, 8, 8, 1), 8, 65536), (_DEP8, cap, cap))
        for k, (workers, cap, concs) in enumerate(
            (((1, 2), 128, (288,)), ((1, 1), 256, (160, 288)), ((2, 1), 512, (512,)), ((3, 1), 1024, (1024,)))
        )
    ),
    ("zip_override_stp_lowlat[1]", (1, 4), _K8, (128,), ((1, 8, 8, 1), 8, 65536), (_TP8, 32, 32)),
)
"""recipes/b200-fp8/8k1k.yaml's STP variants that ran on 2026-03-18: ``zip_override_stp_maxtpt[0…3]`` (decode
attention-DP 8 / EP 8, ``--max-running-requests`` = ``--cuda-graph-max-bs`` per variant, ``benchmark.concurrencies``
"288", "160x288", "512", "1024") and ``zip_override_stp_lowlat[1]`` (1P4D, decode TP 8 / EP 1 at 32, "128"); every
prefill engine the base's (attention-DP 8 / MoE TP 8, 8 running requests, chunk 65,536, prefill tokens 8,192)."""


def _b200_fp8_8k1k_source(recipe: str, role: str) -> str:
    """The 8k1k.yaml variant's record source, with the file InferenceX resolved it to."""
    resolved = re.sub(r"zip_override_stp_(\w+)\[(\d+)\]", r"\1_\2", recipe)
    return _SRT_SLURM_B200_FP8_8K1K.format(recipe, role, resolved)


_GB200_MAX_TPT_1K1K, _GB200_MAX_TPT_8K1K = ((_K1, _K1, 1024, 4096),), ((_K8, _K1, 512, 6144),)
_gb200_fp8_max_tpt_prefill = LaunchFlags(  # both lengths: DeepEP normal mode, no CUDA graphs
    _DYNAMO_GB200_MAX_TPT.format("fp8", "1k1k", "prefill", "fp8", "1k1k"),
    mem_fraction_static=0.75,
    kv_cache_dtype="fp8",
    chunked_prefill_size=131072,
    max_running_requests=30000,
    max_total_tokens=524288,
    layout=_DEP8_EP8,
    search_space=_GB200_MAX_TPT_1K1K,  # "Top of curve" (C 4,096) and "Middle of curve" (C 1,024-4,096)
)
_gb200_fp8_max_tpt_decode = LaunchFlags(  # DeepEP low-latency mode; --cuda-graph-bs 1 2 4 8 16 24 ... 384 416 ... 768
    _DYNAMO_GB200_MAX_TPT.format("fp8", "1k1k", "decode", "fp8", "1k1k"),
    mem_fraction_static=0.82,
    kv_cache_dtype="fp8",
    chunked_prefill_size=36864,
    max_running_requests=45000,
    cuda_graph_max_bs=768,
    layout=_DEP32_EP32,
    search_space=((_K1, _K1, 4096, 4096),),  # "Top of curve": 8 decode nodes (the middle runs 12: attention-DP 48)
)
_gb200_fp4_max_tpt_decode = LaunchFlags(  # DeepEP low-latency, flashinfer_cutedsl NVFP4 MoE, --cuda-graph-bs ... 1024
    _DYNAMO_GB200_MAX_TPT.format("fp4", "1k1k", "decode", "fp4", "1k1k"),
    mem_fraction_static=0.83,
    kv_cache_dtype="fp8",
    chunked_prefill_size=786432,
    max_running_requests=67584,
    cuda_graph_max_bs=1024,
    max_total_tokens=3122380,
    layout=_DEP32_EP32,
    search_space=((_K1, _K1, 8192, 15000),),  # "Top of curve": 4 prefill workers, 8 decode nodes
)
_QWEN35_FP8_B200_SH = (
    "SemiAnalysisAI/InferenceX benchmarks/single_node/qwen3.5_fp8_b200.sh at 6a5dad463 (2026-03-24 00:52 UTC, the"
    " commit that moved qwen3.5-fp8-b200-sglang to lmsysorg/sglang:v0.5.9-cu130-amd64 and set the script and search"
    " space; both unchanged until 626932a11, 2026-03-27), the rows' image and measurement date"
)
_qwen35_fp8_b200 = LaunchFlags(  # --cuda-graph-max-bs $CONC: one record per concurrency the config ran
    _QWEN35_FP8_B200_SH,
    mem_fraction_static=0.82,
    kv_cache_dtype="fp8",
    chunked_prefill_size=32768,
    max_prefill_tokens=32768,
    max_running_requests=128,
)
_QWEN35_LENGTHS = ((_K1, _K1), (_K1, _K8), (_K8, _K1))
_TP4_EP4 = (4, 1, 1, 4)
_QWEN35_FP8_B200_SH_0303 = (
    "SemiAnalysisAI/InferenceX benchmarks/single_node/qwen3.5_fp8_b200.sh at efd49e50b (2026-03-03 17:20 UTC, the"
    " commit that added qwen3.5-fp8-b200-sglang on lmsysorg/sglang:v0.5.9-cu129-amd64 with the script; unchanged"
    " until 64c20b6b5, 2026-03-11), the rows' image and measurement date"
)

_QWEN35_FP8_H200_SH = (
    "SemiAnalysisAI/InferenceX benchmarks/single_node/qwen3.5_fp8_h200.sh at f65d6b4b1 (2026-03-04 18:52 UTC, the"
    " commit that added qwen3.5-fp8-h200-sglang on lmsysorg/sglang:v0.5.9-cu129-amd64 with the script; unchanged"
    " until 64c20b6b5, 2026-03-11), the rows' image and measurement date"
)
_qwen35_fp8_h200 = LaunchFlags(  # --cuda-graph-max-bs $CONC: one record per concurrency the config ran
    _QWEN35_FP8_H200_SH,
    mem_fraction_static=0.8,
    kv_cache_dtype="fp8",
    chunked_prefill_size=16384,
    max_running_requests=128,
)


_QWEN35_BF16_B200_SH = (
    "SemiAnalysisAI/InferenceX benchmarks/single_node/qwen3.5_bf16_b200.sh at 9dc87a68c (2026-02-20 05:32:41 UTC,"
    ' "Update Qwen3.5 STP recipe on B200 (#758)", on the rows\' image lmsysorg/sglang:nightly-dev-20260216-d3bae71e;'
    " the rows are measured 3 s later; the launch line unchanged until 64c20b6b5, 2026-03-11)"
)
_qwen35_bf16_b200 = LaunchFlags(  # --cuda-graph-max-bs $CONC; no --kv-cache-dtype (SGLang's auto: bf16)
    _QWEN35_BF16_B200_SH,
    mem_fraction_static=0.82,
    kv_cache_dtype=SGLANG_KV_DTYPE,
    chunked_prefill_size=32768,
    max_prefill_tokens=32768,
    max_running_requests=128,
)
_QWEN35_FP4_B200_SH = (
    "SemiAnalysisAI/InferenceX benchmarks/single_node/qwen3.5_fp4_b200.sh at 48d35c480 (2026-04-08 19:51 UTC, the"
    " commit that added qwen3.5-fp4-b200-sglang on lmsysorg/sglang:nightly-dev-20260402-d7256eb6 with the script;"
    " unchanged until 9189c1884, 2026-05-01), the rows' image and measurement date"
)
_QWEN35_FP8_B200_MTP_SH = (
    "SemiAnalysisAI/InferenceX benchmarks/single_node/qwen3.5_fp8_b200_mtp.sh at 35d4bb367 (2026-03-20 22:08:19 UTC,"
    " the commit that added qwen3.5-fp8-b200-sglang-mtp on lmsysorg/sglang:v0.5.9-cu130, TP 4 / EP 1 at C 4-256, each"
    " length, spec-decoding: mtp; the only Qwen3.5 config on that image), the rows' image; measured 4 s later"
)
_QWEN35_FP8_B300_SH = (
    "SemiAnalysisAI/InferenceX benchmarks/single_node/qwen3.5_fp8_b300.sh at c0f62a2ef (2026-04-17 07:20 UTC, the"
    " commit that added qwen3.5-fp8-b300-sglang (non-MTP) on lmsysorg/sglang:v0.5.10.post1-cu130 with the script;"
    " unchanged until 21a4ab02f, 2026-05-21), the rows' image and measurement date"
)
_QWEN35_BF16_B300_SH = (
    "SemiAnalysisAI/InferenceX benchmarks/single_node/qwen3.5_bf16_b300.sh at 32274d6c1 (2026-04-18 01:52 UTC, the"
    " commit that added qwen3.5-bf16-b300-sglang on lmsysorg/sglang:v0.5.10.post1-cu130; the same file as its"
    " reverted first try 77c8b9657; unchanged until 4b685a818, 2026-05-18), the rows' image and measurement date"
)
_QWEN35_FP4_B300_SH = (
    "SemiAnalysisAI/InferenceX benchmarks/single_node/qwen3.5_fp4_b300.sh at 8acbd08b7 (2026-04-18 01:22 UTC, the"
    " commit that added qwen3.5-fp4-b300-sglang on lmsysorg/sglang:v0.5.10.post1-cu130 with the script; unchanged"
    " until 4f630348d, 2026-05-20), the rows' image and measurement date"
)
_qwen35_fp4 = LaunchFlags(  # B200 / B300 NVFP4: --cuda-graph-max-bs $CONC, --mamba-ssm-dtype bfloat16
    _QWEN35_FP4_B200_SH,
    mem_fraction_static=0.85,
    kv_cache_dtype="fp8",
    chunked_prefill_size=32768,
    max_prefill_tokens=32768,
    max_running_requests=128,
)
_QWEN35_1K8K = ((_K1, _K1), (_K8, _K1))
"""The B300 configs' and the NVFP4 B200 config's lengths (no 1k / 8k)."""

_GLM5_FP8_B200_SH = (
    "SemiAnalysisAI/InferenceX benchmarks/single_node/glm5_fp8_b200.sh at 13930ca61 (2026-03-20 17:45:21 UTC, the"
    " commit that added glm5-fp8-b200-sglang on lmsysorg/sglang:nightly-dev-cu13-20260317-1eea7448 with the script),"
    " the rows' image; measured 4 s later"
)


def _per_concurrency(
    flags: LaunchFlags, runs: tuple[tuple[int, int, int, int], ...], *, cap_running: bool = False
) -> tuple[LaunchFlags, ...]:
    """``flags`` once per concurrency of ``runs`` (ISL, OSL, conc-start, conc-end; InferenceX doubles C from start to
    end) with ``--cuda-graph-max-bs`` = C, as a script passing ``--cuda-graph-max-bs $CONC`` launches it;
    ``cap_running``: ``--max-running-requests`` = C too (``--max-running-requests $CONC``)."""
    concs = sorted({c for *_, lo, hi in runs for c in (lo << k for k in range(12)) if c <= hi})
    return tuple(
        replace(
            flags,
            cuda_graph_max_bs=c,
            max_running_requests=c if cap_running else flags.max_running_requests,
            search_space=tuple((i, o, c, c) for i, o, lo, hi in runs if c <= hi and c in (lo << k for k in range(12))),
        )
        for c in concs
    )


NO_IMAGE = ""
"""The image field of a :func:`launch_key` whose row records a measured date but no container image."""


RECORDED_LAUNCHES: dict[
    tuple[str, ...], dict[tuple[str, tuple[int, int, int | None, int | None]], tuple[LaunchFlags, ...]]
] = {
    # dsr1-fp8-b200-sglang (InferenceX .github/configs/nvidia-master.yaml at 12ba0ae07: TP 8 / EP 1 at 1k/1k, 1k/8k
    # C 4-64 and 8k/1k C 4; TP 4 / EP 1 at 8k/1k C 4-32). TP 8: MAX_RUNNING_REQUESTS=128,
    # CUDA_GRAPH_MAX_BATCH_SIZE=128, MEM_FRAC_STATIC=0.82, CHUNKED_PREFILL_SIZE=MAX_PREFILL_TOKENS=32768. TP 4 (the
    # script exits for any other ISL / OSL): 32, 32, 0.95, 8192 / 8192. Both --kv-cache-dtype fp8_e4m3. The dated
    # exports also hold TP 8 rows outside that search space (C 128-512 at each length, C 8-64 at 8k/1k) which no
    # config at that commit launched and which contradict its cap (1k/1k C 256: TTFT 2.1 s, TPOT rising from 28.7 ms
    # at C 128 to 42.5 ms; 128 running requests would queue every other request for a whole ~40 s generation): no
    # record for them.
    ("deepseek-ai/DeepSeek-V3", "b200_sxm", "fp8", "agg", "lmsysorg/sglang:v0.5.9-cu130", "2026-03-25"): {
        ("agg", _TP4): (_dsr1_fp8_b200_tp4,),
        ("agg", _TP8): (_dsr1_fp8_b200_tp8,),
    },
    # dsr1-fp8-b200-sglang at d27433dff (TP 8 / EP 1, C 4-64 at each length): one launch line, the later TP 8 branch
    ("deepseek-ai/DeepSeek-V3", "b200_sxm", "fp8", "agg", "lmsysorg/sglang:v0.5.6-cu129-amd64", "2025-12-31"): {
        ("agg", _TP8): (replace(_dsr1_fp8_b200_tp8, script=_DSR1_FP8_B200_V056, search_space=_C4_64),),
    },
    # dsr1-fp8-h200-sglang (TP 8, no EP, C 4-64 at each length): --mem-fraction-static 0.82, --chunked-prefill-size /
    # --max-prefill-tokens 32768, no --kv-cache-dtype (SGLang's auto: bf16); --max-running-requests and
    # --cuda-graph-max-bs 512 at 1k/1k, 256 otherwise.
    ("deepseek-ai/DeepSeek-V3", "h200_sxm", "fp8", "agg", "lmsysorg/sglang:v0.5.9-cu130", "2026-03-25"): {
        ("agg", _TP8): (
            _dsr1_fp8_h200,
            replace(_dsr1_fp8_h200, max_running_requests=256, cuda_graph_max_bs=256, search_space=_C4_64[1:]),
        ),
    },
    # dsr1-fp4-b200-sglang (TP 4 / EP 4 and TP 8 / EP 8, C 4-128): --mem-fraction-static 0.85, --kv-cache-dtype
    # fp8_e4m3, --chunked-prefill-size 16384, --max-running-requests / --cuda-graph-max-bs 256, --ep-size $EP_SIZE.
    ("deepseek-ai/DeepSeek-V3", "b200_sxm", "fp4", "agg", "lmsysorg/sglang:v0.5.9-cu130", "2026-03-25"): {
        ("agg", (4, 1, 1, 4)): (replace(_dsr1_fp4_b200, search_space=_C4_128),),
        ("agg", (8, 1, 1, 8)): (replace(_dsr1_fp4_b200, search_space=_C4_128_8K1K_C4_16),),
    },
    # Rows that record no image (the database dump's configs 88 / 99 / 199 of November 2025 and the 2026-04-06 export
    # of the same runs): keyed by NO_IMAGE and the measured date, which with the EP the rows record pins the config.
    # dsr1-fp4-b200-sglang before d8fe8f73e (.github/configs/nvidia-master.yaml at 403857f68: TP 4 C 4-128 at each
    # length, TP 8 C 4-128 at 1k/1k and 1k/8k and C 4-16 at 8k/1k, no ep field): the docker script's
    # --enable-ep-moe, which SGLang's ServerArgs reads as ep_size = tp_size (deprecated for --ep-size in 0.5.x), ran
    # the MoE at EP = TP, not the MoE TP the rows record; the flags are dsr1_fp4_b200.sh's later ones (0.85, FP8 KV,
    # chunk 16384, 256 running requests / CUDA-graph batch, --scheduler-recv-interval 10 / 30).
    ("deepseek-ai/DeepSeek-V3", "b200_sxm", "fp4", "agg", NO_IMAGE, "2025-11-10"): {
        ("agg", _TP4): (replace(_dsr1_fp4_b200_november, layout=(4, 1, 1, 4), search_space=_C4_128),),
        ("agg", _TP8): (replace(_dsr1_fp4_b200_november, layout=(8, 1, 1, 8), search_space=_C4_128_8K1K_C4_16),),
    },
    # 2025-11-02, before nvidia-master.yaml existed (17d5e204f, 2025-11-03): dsr1-tmpl.yml's bmk-b200-fp4 job, tp-list
    # [4, 8], conc-list [4 ... 128] at every length (the nightly full sweeps), the same docker script.
    ("deepseek-ai/DeepSeek-V3", "b200_sxm", "fp4", "agg", NO_IMAGE, "2025-11-02"): {
        ("agg", layout): (replace(_dsr1_fp4_b200_november, layout=(tp, 1, 1, tp), search_space=_C4_128),)
        for tp, layout in ((4, _TP4), (8, _TP8))
    },
    # dsr1-fp8-b200-sglang between d8fe8f73e and 189ae51cc (TP 8 / EP 8, C 4-64 at each length): the launch line of
    # the 2025-12-31 record (0.82, FP8 KV, 32768 / 32768, 128 running requests / CUDA-graph batch) with --ep-size 8.
    ("deepseek-ai/DeepSeek-V3", "b200_sxm", "fp8", "agg", NO_IMAGE, "2025-11-18"): {
        ("agg", (8, 1, 1, 8)): (replace(_dsr1_fp8_b200_tp8, script=_DSR1_FP8_B200_DOCKER_1118, search_space=_C4_64),),
    },
    # dsr1-fp8-b300-sglang (config at 5b302f147: TP 8 / EP 1 at 1k/1k C 4-64 and 8k/1k C 4, TP 4 at 8k/1k C 4-32) and
    # dsr1-fp4-b300-sglang (TP 4 / EP 4 C 4-128, TP 8 / EP 8 C 4-128 / 4-16): the B200 scripts' flags, line for line.
    ("deepseek-ai/DeepSeek-V3", "b300_sxm", "fp8", "agg", "lmsysorg/sglang:v0.5.10.post1-cu130", "2026-04-17"): {
        ("agg", _TP4): (replace(_dsr1_fp8_b200_tp4, script=_DSR1_FP8_B300_SH.format(4)),),
        ("agg", _TP8): (
            replace(
                _dsr1_fp8_b200_tp8,
                script=_DSR1_FP8_B300_SH.format(8),
                search_space=((_K1, _K1, 4, 64), (_K8, _K1, 4, 4)),
            ),
        ),
    },
    ("deepseek-ai/DeepSeek-V3", "b300_sxm", "fp4", "agg", "lmsysorg/sglang:v0.5.10.post1-cu130", "2026-04-17"): {
        ("agg", layout): (
            replace(_dsr1_fp4_b200, script=_DSR1_FP4_B300_SH, search_space=((_K1, _K1, 4, 128), (_K8, _K1, 4, last))),
        )
        for layout, last in (((4, 1, 1, 4), 128), ((8, 1, 1, 8), 16))
    },
    # qwen3.5-fp8-b200-sglang at 6a5dad463 (TP 8 / EP 1 at C 4-16 and TP 4 / EP 4 at C 16-128, each length):
    # --mem-fraction-static 0.82, --kv-cache-dtype fp8_e4m3, --chunked-prefill-size / --max-prefill-tokens 32768,
    # --max-running-requests 128, --cuda-graph-max-bs $CONC, --disable-radix-cache
    ("Qwen/Qwen3.5-397B-A17B", "b200_sxm", "fp8", "agg", "lmsysorg/sglang:v0.5.9-cu130-amd64", "2026-03-24"): {
        ("agg", _TP8): _per_concurrency(_qwen35_fp8_b200, tuple((i, o, 4, 16) for i, o in _QWEN35_LENGTHS)),
        ("agg", _TP4_EP4): _per_concurrency(_qwen35_fp8_b200, tuple((i, o, 16, 128) for i, o in _QWEN35_LENGTHS)),
    },
    # qwen3.5-fp8-b200-sglang as added at efd49e50b: TP 4 / EP 4 at 1k/1k C 4-16 and 64, at 1k/8k and 8k/1k C 8-64;
    # TP 8 at 1k/8k C 4-8 and 8k/1k C 4; the same flags
    ("Qwen/Qwen3.5-397B-A17B", "b200_sxm", "fp8", "agg", "lmsysorg/sglang:v0.5.9-cu129-amd64", "2026-03-03"): {
        ("agg", _TP8): _per_concurrency(
            replace(_qwen35_fp8_b200, script=_QWEN35_FP8_B200_SH_0303), ((_K1, _K8, 4, 8), (_K8, _K1, 4, 4))
        ),
        ("agg", _TP4_EP4): _per_concurrency(
            replace(_qwen35_fp8_b200, script=_QWEN35_FP8_B200_SH_0303),
            ((_K1, _K1, 4, 16), (_K1, _K1, 64, 64), (_K1, _K8, 8, 64), (_K8, _K1, 8, 64)),
        ),
    },
    # qwen3.5-fp8-h200-sglang as added at f65d6b4b1: TP 8 / EP 8 (--expert-parallel-size $EP_SIZE) at C 4-64, each
    # length; --mem-fraction-static 0.8, --kv-cache-dtype fp8_e4m3, --chunked-prefill-size 16384, no
    # --max-prefill-tokens, --max-running-requests 128, --cuda-graph-max-bs $CONC, --disable-radix-cache.
    # aiconfigurator-core 0.12.0 has no context-attention data for Qwen3.5 with FP8 KV on H200: the rows are refused.
    # One point measured again on 2026-03-09 ran the same config and script (both unchanged until 64c20b6b5).
    **{
        ("Qwen/Qwen3.5-397B-A17B", "h200_sxm", "fp8", "agg", "lmsysorg/sglang:v0.5.9-cu129-amd64", day): {
            ("agg", _TP8_EP8): _per_concurrency(_qwen35_fp8_h200, tuple((i, o, 4, 64) for i, o in _QWEN35_LENGTHS)),
        }
        for day in ("2026-03-04", "2026-03-09")
    },
    # qwen3.5-bf16-b200-sglang at 9dc87a68c (TP 8 / EP 1, C 4-64 at each length; the same config and launch line on
    # 2026-03-09, when one point was measured again): --mem-fraction-static 0.82, --chunked-prefill-size /
    # --max-prefill-tokens 32768, --max-running-requests 128, --cuda-graph-max-bs $CONC, --disable-radix-cache, no
    # --kv-cache-dtype
    **{
        ("Qwen/Qwen3.5-397B-A17B", "b200_sxm", "bf16", "agg", "lmsysorg/sglang:nightly-dev-20260216-d3bae71e", day): {
            ("agg", _TP8): _per_concurrency(_qwen35_bf16_b200, tuple((i, o, 4, 64) for i, o in _QWEN35_LENGTHS)),
        }
        for day in ("2026-02-20", "2026-03-09")
    },
    # qwen3.5-fp4-b200-sglang at 48d35c480 (TP 4 / EP 1, C 4-128 at 1k/1k and 8k/1k): --mem-fraction-static 0.85,
    # --kv-cache-dtype fp8_e4m3, --mamba-ssm-dtype bfloat16, 32768 / 32768, --max-running-requests 128,
    # --cuda-graph-max-bs $CONC, --disable-radix-cache
    (
        "Qwen/Qwen3.5-397B-A17B",
        "b200_sxm",
        "fp4",
        "agg",
        "lmsysorg/sglang:nightly-dev-20260402-d7256eb6",
        "2026-04-08",
    ): {
        ("agg", _TP4): _per_concurrency(_qwen35_fp4, tuple((i, o, 4, 128) for i, o in _QWEN35_1K8K)),
    },
    # qwen3.5-fp8-b200-sglang-mtp at 35d4bb367 (TP 4 / EP 1, C 4-256 at each length): EAGLE speculative decoding
    # (--speculative-algorithm EAGLE, 3 steps, top-k 1, 4 draft tokens), --mem-fraction-static 0.8, FP8 KV,
    # --max-running-requests = --cuda-graph-max-bs = $CONC: refused (the replay has no speculative decoding)
    ("Qwen/Qwen3.5-397B-A17B", "b200_sxm", "fp8", "agg", "lmsysorg/sglang:v0.5.9-cu130", "2026-03-20"): {
        ("agg", _TP4): _per_concurrency(
            LaunchFlags(
                _QWEN35_FP8_B200_MTP_SH,
                mem_fraction_static=0.8,
                kv_cache_dtype="fp8",
                chunked_prefill_size=32768,
                max_prefill_tokens=32768,
                speculative_decoding="EAGLE (MTP), 3 steps, top-k 1, 4 draft tokens",
            ),
            tuple((i, o, 4, 256) for i, o in _QWEN35_LENGTHS),
            cap_running=True,
        ),
    },
    # qwen3.5-fp8-b300-sglang (non-MTP) at c0f62a2ef (TP 4 / EP 1, C 4-256 at 1k/1k and 8k/1k): --mem-fraction-static
    # 0.8, FP8 KV, --mamba-ssm-dtype bfloat16, --chunked-prefill-size / --max-prefill-tokens 16384,
    # --max-running-requests = --cuda-graph-max-bs = $CONC, --disable-radix-cache. The MTP config added the same day
    # (28752f613) has the same image and search space; the rows are the non-MTP runs: the dump holds no MTP run (none
    # of the 42 B200 rows of qwen3.5-fp8-b200-sglang-mtp, which the exports hold) and their TPOT at C 4 (8.6 ms)
    # is the non-speculative one (the MTP-image B300 rows of 2026-04-03 measure 5.3 ms)
    ("Qwen/Qwen3.5-397B-A17B", "b300_sxm", "fp8", "agg", "lmsysorg/sglang:v0.5.10.post1-cu130", "2026-04-17"): {
        ("agg", _TP4): _per_concurrency(
            LaunchFlags(
                _QWEN35_FP8_B300_SH,
                mem_fraction_static=0.8,
                kv_cache_dtype="fp8",
                chunked_prefill_size=16384,
                max_prefill_tokens=16384,
            ),
            tuple((i, o, 4, 256) for i, o in _QWEN35_1K8K),
            cap_running=True,
        ),
    },
    # qwen3.5-bf16-b300-sglang at 32274d6c1 (TP 8 and TP 4, EP 1, C 4-64 at 1k/1k and 8k/1k) and
    # qwen3.5-fp4-b300-sglang at 8acbd08b7 (TP 4 / EP 1 and TP 2 / EP 2, C 4-128), measured the next day: the B200
    # scripts' flags (BF16: 0.82, bf16 KV; NVFP4: 0.8, FP8 KV, --mamba-ssm-dtype bfloat16), 32768 / 32768, 128
    # running requests, --cuda-graph-max-bs $CONC. The NVFP4 TP 2 / EP 2 rows record TP 4 / MoE TP 2 / EP 2 (TP x EP
    # as tp_size); the script launched --tensor-parallel-size 2 --ep-size 2 on 2 GPUs.
    ("Qwen/Qwen3.5-397B-A17B", "b300_sxm", "bf16", "agg", "lmsysorg/sglang:v0.5.10.post1-cu130", "2026-04-18"): {
        ("agg", layout): _per_concurrency(
            replace(_qwen35_bf16_b200, script=_QWEN35_BF16_B300_SH), tuple((i, o, 4, 64) for i, o in _QWEN35_1K8K)
        )
        for layout in (_TP8, _TP4)
    },
    ("Qwen/Qwen3.5-397B-A17B", "b300_sxm", "fp4", "agg", "lmsysorg/sglang:v0.5.10.post1-cu130", "2026-04-18"): {
        ("agg", _TP4): _per_concurrency(
            replace(_qwen35_fp4, script=_QWEN35_FP4_B300_SH, mem_fraction_static=0.8),
            tuple((i, o, 4, 128) for i, o in _QWEN35_1K8K),
        ),
        ("agg", (4, 1, 2, 2)): _per_concurrency(
            replace(_qwen35_fp4, script=_QWEN35_FP4_B300_SH, mem_fraction_static=0.8, layout=(2, 1, 1, 2)),
            tuple((i, o, 4, 128) for i, o in _QWEN35_1K8K),
        ),
    },
    # glm5-fp8-b200-sglang at 13930ca61 (TP 8 / EP 1, C 4-128 at each length): --kv-cache-dtype fp8_e4m3,
    # --mem-fraction-static 0.85, --chunked-prefill-size / --max-prefill-tokens 32768, --max-running-requests =
    # --cuda-graph-max-bs = $CONC, --disable-radix-cache, no --scheduler-recv-interval. aiconfigurator-core 0.12.0 has
    # no GLM-5 DSA context data for its FP8 GEMM at either KV dtype: the rows are refused with or without the record.
    ("zhipuai/GLM-5", "b200_sxm", "fp8", "agg", "lmsysorg/sglang:nightly-dev-cu13-20260317-1eea7448", "2026-03-20"): {
        ("agg", _TP8): _per_concurrency(
            LaunchFlags(
                _GLM5_FP8_B200_SH,
                mem_fraction_static=0.85,
                kv_cache_dtype="fp8",
                chunked_prefill_size=32768,
                max_prefill_tokens=32768,
            ),
            tuple((i, o, 4, 128) for i, o in _QWEN35_LENGTHS),
            cap_running=True,
        ),
    },
    # dsr1-fp8-gb200-dynamo-sglang "Low latency": 1 prefill worker at TP 4, 1 decode worker at TP 4, C 4 / 8.
    ("deepseek-ai/DeepSeek-V3", "gb200", "fp8", "disagg", "lmsysorg/sglang:v0.5.8.post1-cu130", "2026-02-09"): {
        ("prefill", _TP4): (replace(_gb200_fp8_low_latency, max_total_tokens=_GB200_PREFILL_TOTAL_TOKENS),),
        ("decode", _TP4): (replace(_gb200_fp8_low_latency, max_running_requests=128),),
        # config 536, 8k/1k C 4-16: recipes/gb200-fp8/8k1k/low-latency.yaml, 1 prefill + 1 decode worker at TP 8 over
        # two GB200 nodes each (--tensor-parallel-size 8, EP 1), 0.8, FP8 KV, 512 running requests / CUDA graphs;
        # prefill --max-total-tokens 32768 and chunk 24576, decode chunk 8192; no --max-prefill-tokens (16,384)
        ("prefill", _TP8): (
            LaunchFlags(
                _SRT_SLURM_GB200_FP8_8K1K_LOW_LATENCY.format("prefill"),
                mem_fraction_static=0.8,
                kv_cache_dtype="fp8",
                chunked_prefill_size=24576,
                max_running_requests=512,
                cuda_graph_max_bs=512,
                max_total_tokens=32768,
                workers=(1, 1),
                search_space=((_K8, _K1, 4, 16),),
            ),
        ),
        ("decode", _TP8): (
            LaunchFlags(
                _SRT_SLURM_GB200_FP8_8K1K_LOW_LATENCY.format("decode"),
                mem_fraction_static=0.8,
                kv_cache_dtype="fp8",
                chunked_prefill_size=8192,
                max_running_requests=512,
                cuda_graph_max_bs=512,
                workers=(1, 1),
                search_space=((_K8, _K1, 4, 16),),
            ),
        ),
    },
    # dsr1-fp8-gb200-dynamo-sglang "Bottom of curve": 1 prefill worker, 4 decode workers, one GB200 node (4 GPUs)
    # each, C 2-128. The script launches each engine as --tensor-parallel-size 4 --data-parallel-size 1
    # --expert-parallel-size 1 without --enable-dp-attention: TP 4. The rows record attention-DP 4 / MoE TP 4, read
    # from the InferenceX config's tp / ep / dp-attn fields, which its own comment says "do nothing because they are
    # hardcoded in" this script; the replay runs the layout the script launched.
    ("deepseek-ai/DeepSeek-V3", "gb200", "fp8", "disagg", "lmsysorg/sglang:v0.5.5.post2", "2025-12-21"): {
        ("prefill", _ATTENTION_DP4): (replace(_dynamo_gb200, max_total_tokens=_GB200_PREFILL_TOTAL_TOKENS),),
        ("decode", _ATTENTION_DP4): (_dynamo_gb200,),
        # "Top of curve" 1k/1k (config 236: 2 prefill workers on 2 nodes each, 1 decode worker on 8 nodes) and "Middle
        # and top of curve" 8k/1k (config 253: 5 prefill workers on 2 nodes each, 1 decode worker on 8): the rows
        # record attention-DP 8 / MoE TP 8 prefill and attention-DP 32 / MoE TP 32 decode; the scripts launch DeepEP
        # expert parallelism over every GPU of each engine (EP 8 across two 4-GPU nodes, EP 32 across eight).
        ("prefill", (1, 8, 8, 1)): (
            _gb200_fp8_max_tpt_prefill,
            replace(
                _gb200_fp8_max_tpt_prefill,
                script=_DYNAMO_GB200_MAX_TPT.format("fp8", "8k1k", "prefill", "fp8", "8k1k"),
                mem_fraction_static=0.80,
                search_space=_GB200_MAX_TPT_8K1K,
            ),
        ),
        ("decode", (1, 32, 32, 1)): (
            _gb200_fp8_max_tpt_decode,
            replace(
                _gb200_fp8_max_tpt_decode,
                script=_DYNAMO_GB200_MAX_TPT.format("fp8", "8k1k", "decode", "fp8", "8k1k"),
                max_running_requests=8192,
                cuda_graph_max_bs=256,
                search_space=_GB200_MAX_TPT_8K1K,
            ),
        ),
    },
    # dsr1-fp8-h200-dynamo-sglang 8k/1k "bs128-1p1d-dep" (config 434, C 64-256): 1 prefill engine at TP 8, 1 decode
    # engine at DP 8 attention / EP 8; no --kv-cache-dtype (SGLang's auto: bf16)
    ("deepseek-ai/DeepSeek-V3", "h200_sxm", "fp8", "disagg", "lmsysorg/sglang:v0.5.8.post1-cu130", "2026-02-07"): {
        ("prefill", _TP8): (
            LaunchFlags(
                _SRT_SLURM_H200_8K1K_BS128.format("prefill"),
                mem_fraction_static=0.75,
                kv_cache_dtype=SGLANG_KV_DTYPE,
                chunked_prefill_size=163840,
                max_prefill_tokens=163840,
                max_running_requests=16,
                workers=(1, 1),
                search_space=((_K8, _K1, 64, 256),),
            ),
        ),
        ("decode", (1, 8, 1, 8)): (
            LaunchFlags(  # no --chunked-prefill-size: SGLang's default for the GPU (8,192 on H200)
                _SRT_SLURM_H200_8K1K_BS128.format("decode"),
                mem_fraction_static=0.88,
                kv_cache_dtype=SGLANG_KV_DTYPE,
                chunked_prefill_size=8192,
                max_running_requests=256,
                cuda_graph_max_bs=256,
                workers=(1, 1),
                search_space=((_K8, _K1, 64, 256),),
            ),
        ),
    },
    # dsr1-fp8-b200-dynamo-sglang 8k/1k on 2026-03-18 (configs 639-655): the consolidated recipe's variants, each tied
    # by its worker counts and concurrencies. Max throughput (zip_override_stp_maxtpt): prefill DP 8 attention / MoE
    # TP 8, decode DP 8 attention / EP 8 with --max-running-requests = --cuda-graph-max-bs per variant; low latency
    # 1P4D (zip_override_stp_lowlat[1], config 639): decode TP 8 / EP 1 at 32 running requests.
    (
        "deepseek-ai/DeepSeek-V3",
        "b200_sxm",
        "fp8",
        "disagg",
        "lmsysorg/sglang:v0.5.8.post1-cu130-amd64",
        "2026-03-18",
    ): {
        **_stp_launches(_b200_fp8_8k1k_source, _B200_FP8_8K1K_STP, (_b200_fp8_8k1k_prefill, _b200_fp8_8k1k_decode)),
        # config 455's 1k/1k C 4 point, measured again that day: InferenceX 593fb431a still names
        # recipes/b200-fp8/1k1k/stp/low-latency-tep8-1p1d.yaml (1P1D, TP 8 / EP 8 both sides) on the same branch
        **_stp_launches(_SRT_SLURM_B200_FP8_1K1K_0318, _B200_FP8_STP[:1]),
    },
    # dsr1-fp4-b200-dynamo-sglang STP on 2026-02-11 (configs 527 / 532: 1k/1k C 512, 1P1D / 1P2D; 530: 8k/1k C 64 /
    # 128, decode TP 8 / EP 8; 535: 8k/1k C 4-64, prefill TP 4, decode TP 8; 538: 8k/1k C 1,024 / 2,048, 7P2D): each
    # row tied by its image, date, worker counts, layouts and concurrency to one recipe of the config
    _B200_FP4_STP_KEY: _stp_launches(_SRT_SLURM_B200_FP4_STP, _B200_FP4_STP),
    # dsr1-fp8-b200-dynamo-sglang STP on 2026-02-07 (configs 453: 1P4D TP 8 / EP 8 at C 64; 457: 1P1D and 459: 2P1D,
    # attention-DP 8 / EP 8 at C 128 / 256): tied as the FP4 rows above
    _B200_FP8_STP_KEY: _stp_launches(_SRT_SLURM_B200_FP8_STP, _B200_FP8_STP),
    # dsr1-fp4-gb200-dynamo-sglang, the same day and dynamo commit: "Top of curve" 1k/1k (config 259: 4 prefill workers
    # on one node each, --enable-dp-attention --ep-size 4; C 8,192-15,000) and 8k/1k (config 254: 10 prefill workers
    # launched as --tp-size 4 --dp-size 1 --ep-size 1; C 1,024-8,192), each with 1 decode worker on 8 nodes at DeepEP
    # EP 32. The rows record attention-DP 4 / MoE TP 4 prefill and attention-DP 32 / MoE TP 32 decode.
    ("deepseek-ai/DeepSeek-V3", "gb200", "fp4", "disagg", "lmsysorg/sglang:v0.5.5.post2", "2025-12-21"): {
        ("prefill", _ATTENTION_DP4): (
            LaunchFlags(
                _DYNAMO_GB200_MAX_TPT.format("fp4", "1k1k", "prefill", "fp4", "1k1k"),
                mem_fraction_static=0.84,
                kv_cache_dtype="fp8",
                chunked_prefill_size=65536,
                max_prefill_tokens=32768,
                max_running_requests=30000,
                max_total_tokens=131072,
                layout=_DEP4_EP4,
                search_space=((_K1, _K1, 8192, 15000),),
            ),
            LaunchFlags(
                _DYNAMO_GB200_MAX_TPT.format("fp4", "8k1k", "prefill", "fp4", "8k1k"),
                mem_fraction_static=0.95,
                kv_cache_dtype="fp8",
                chunked_prefill_size=131072,
                max_prefill_tokens=524288,
                max_running_requests=30000,
                max_total_tokens=131072,
                layout=_TP4,
                search_space=((_K8, _K1, 1024, 8192),),
            ),
        ),
        ("decode", (1, 32, 32, 1)): (
            _gb200_fp4_max_tpt_decode,
            replace(
                _gb200_fp4_max_tpt_decode,
                script=_DYNAMO_GB200_MAX_TPT.format("fp4", "8k1k", "decode", "fp4", "8k1k"),
                chunked_prefill_size=24576,
                max_running_requests=16384,
                cuda_graph_max_bs=512,
                max_total_tokens=524288,
                search_space=((_K8, _K1, 1024, 8192),),
            ),
        ),
    },
}
"""Launch flags of deployments whose launch scripts are public, by what the rows record of the deployment
(:func:`launch_key`: architecture, GPU, precision, mode, container image, measurement date) and then by role and
layout (TP, attention-DP, MoE TP, EP), the first whose :attr:`LaunchFlags.search_space` holds the row;
docs/validation.md, "Rows replayed with their recorded launch flags". Each record is the script as it stood on the
rows' measurement date, tied to the rows by the commit that set their image; a row without one keeps SGLang's
defaults. Every deployment so tied is recorded, whether or not SGLang's defaults could run it. Applied on SGLang's
pool only (``--pool-source aiconfigurator`` reproduces the previous rounds)."""
RECIPE_DEPLOYMENTS: dict[tuple[str, ...], tuple[RecipeDeployment, ...]] = {
    _B200_FP4_STP_KEY: _stp_deployments(_SRT_SLURM_B200_FP4_STP, _B200_FP4_STP),
    _B200_FP8_STP_KEY: _stp_deployments(_SRT_SLURM_B200_FP8_STP, _B200_FP8_STP),
}
"""Every recipe variant of a disaggregated config whose recipes are all recorded, by :func:`launch_key`: a row that
records no worker counts and has no twin takes the deployment of the one variant that ran its ISL / OSL / C
(:func:`recipe_deployment`; docs/validation.md, "Which disaggregated rows carry their deployment")."""


def recipe_deployment(row: dict[str, str]) -> dict[str, str] | None:
    """``row`` with the worker counts and per-role layouts of the one recorded recipe variant that ran it.

    The variants of the row's deployment (:data:`RECIPE_DEPLOYMENTS` by :func:`launch_key`) whose ISL, OSL and
    concurrency list hold the row's; None where none or several do (several variants ran that C: which one measured
    the row is not recorded), and on aiconfigurator-core's pool source (the previous rounds).
    """
    key = launch_key(row)
    conc = recorded_concurrency(row)
    if POOL_SOURCE != "sglang" or key is None or conc is None:
        return None
    lengths = (int(row["isl"]), int(row["osl"]))
    found = [d for d in RECIPE_DEPLOYMENTS.get(key, ()) if (d.isl, d.osl) == lengths and conc in d.concurrencies]
    if len(found) != 1:
        return None
    (variant,) = found
    deployment = {**row, "prefill_num_workers": str(variant.workers[0]), "decode_num_workers": str(variant.workers[1])}
    for role, layout in (("prefill", variant.prefill_layout), ("decode", variant.decode_layout)):
        for name, value in zip(DISAGG_LAYOUT_FIELDS, layout, strict=True):
            deployment[f"{role}_{name}"] = "" if value is None else str(value)
    return deployment


LAUNCHES: WeakKeyDictionary[StepTimes, LaunchFlags] = WeakKeyDictionary()
"""The recorded launch flags of each engine built here with them (weak keys, as :data:`POOLS`)."""


def launch_key(row: dict[str, str]) -> tuple[str, ...] | None:
    """What a row records of its deployment's launch: (architecture, GPU, precision, mode, image, measured date).

    The image (``lmsysorg/sglang:…``) and the date (``measured=YYYY-MM-DD``) are in ``silicon_data_source`` of the
    database dump and the dated exports, and for a gap-analysis row that repeats one of their measurements in that
    row's (:data:`REPEATED_SOURCES`); :data:`NO_IMAGE` for a dated row that names no image (the dump's and exports'
    November 2025 runs: their records say what else pins the config); None for rows without a date (the other
    gap-analysis rows). DeepSeek-R1 is read as
    DeepSeek-V3 (:data:`SAME_ARCHITECTURE`: the dump names its R1 runs V3).
    """
    source = REPEATED_SOURCES.get(row.get("id", ""), row["silicon_data_source"])
    image = re.search(r"(lmsysorg/sglang:[^\s;]+)", source)
    measured = re.search(r"measured=(\d{4}-\d{2}-\d{2})", source)
    if measured is None:
        return None
    model = SAME_ARCHITECTURE.get(row["model_path"], row["model_path"])
    deployment = image.group(1) if image else NO_IMAGE
    return (model, row["system"], row["precision"], row["mode"], deployment, measured.group(1))


def recorded_launch(
    row: dict[str, str], role: str, layout: tuple[int, int, int | None, int | None]
) -> LaunchFlags | None:
    """The launch flags ``role`` (``agg``, ``prefill`` or ``decode``) at ``layout`` of the row's deployment ran with.

    :data:`RECORDED_LAUNCHES` by :func:`launch_key` (for a disaggregated row, the row that records its deployment:
    itself or its twin) and the row's ISL / OSL / C. None on aiconfigurator-core's pool source and for every deployment
    without a record.
    """
    key = launch_key(row)
    if POOL_SOURCE != "sglang" or key is None:
        return None
    for launch in RECORDED_LAUNCHES.get(key, {}).get((role, layout), ()):
        if launch.workers is not None and launch.workers != (
            _int(row["prefill_num_workers"]),
            _int(row["decode_num_workers"]),
        ):
            continue
        if launch.search_space is None:
            return launch
        isl, osl = int(row["isl"]), int(row["osl"])
        conc = int(float(row["batch_size"])) if row["batch_size"] else recorded_concurrency(row)
        if any((isl, osl) == (i, o) and lo <= conc <= hi for i, o, lo, hi in launch.search_space):
            return launch
    return None


@dataclass(frozen=True)
class Harness:
    """How a row's benchmark client sent its requests (what the replay reproduces)."""

    name: str
    range_ratio: float
    """Lengths uniform in ``[int(L × range_ratio), L]`` (``--random-range-ratio``); 1: exactly ISL / OSL."""
    prompts_per_client: int
    """``--num-prompts`` / ``--max-concurrency``: requests per client in the measured run."""

    def mean_osl(self, osl: int) -> float:
        """The mean output length the harness asked for."""
        lower = max(int(osl * self.range_ratio), 1)
        return (lower + osl) / 2 if lower < osl else float(osl)


INFERENCEMAX = Harness("InferenceMAX benchmark_serving.py", range_ratio=0.8, prompts_per_client=10)
"""SemiAnalysis InferenceMAX/InferenceX (``benchmarks/benchmark_lib.sh`` ``run_benchmark_serving``): vLLM's
``benchmark_serving.py --dataset-name random --random-range-ratio 0.8 --num-prompts 10×C --max-concurrency C
--request-rate inf --ignore-eos --num-warmups 2×C``; ``RANDOM_RANGE_RATIO: 0.8`` in its benchmark workflow."""
UNRECORDED = Harness("unrecorded (fixed lengths, 5 requests per client assumed)", range_ratio=1.0, prompts_per_client=5)
"""The aiconfigurator gap-analysis rows name no harness; they are replayed with every request exactly ISL / OSL."""


def harness_of(row: dict[str, str], repeats: Collection[str] = frozenset()) -> Harness:
    """The benchmark client behind a silicon row, from its ``silicon_data_source`` and the file's repeats.

    InferenceMAX rows are the database dumps (``db-dump/…; workflow_run_id=…``) and the dated CSV exports
    (``source_file=2026-…csv``) with lmsysorg/sglang images, and the gap-analysis rows whose id is in ``repeats``
    (the rows that repeat one of their measurements, :func:`inferencemax_repeats` of the whole file); the rest are
    aiconfigurator's gap-analysis files.
    """
    source = row["silicon_data_source"]
    if source.startswith(("db-dump/", "source_file=2026-")) or row.get("id", "") in repeats:
        return INFERENCEMAX
    return UNRECORDED


def inferencemax_repeats(rows: list[dict[str, str]]) -> set[str]:
    """Ids of rows without a named client that are an InferenceMAX row's measurement again.

    The keys of :func:`repeated_sources`.
    """
    return set(repeated_sources(rows))


REPEATED_SOURCES: dict[str, str] = {}
"""``silicon_data_source`` of the InferenceMAX row each gap-analysis row repeats (:func:`repeated_sources` of the whole
file, set by :func:`main`): :func:`launch_key` reads a repeat's deployment (image, measured date) there."""


def repeated_sources(rows: list[dict[str, str]]) -> dict[str, str]:
    """For each row without a named client that is an InferenceMAX row's measurement again, that row's source.

    A row and an InferenceMAX row of the same model, GPU, precision, ISL, OSL and concurrency whose measured TTFT
    and TPOT agree to 0.01 ms are one benchmark (the gap-analysis file rounds to 0.01 ms; two runs never agree that
    closely on both): its client was InferenceMAX's. In aiconfigurator-core 0.12.0's file these are the 76
    Qwen3.5-397B-A17B gap-analysis rows; the Qwen3-32B, Qwen3-235B and Llama-3.1-8B ones repeat none.
    """

    def shape(row: dict[str, str]) -> tuple[object, ...]:
        return (row["model_path"], row["system"], row["precision"], row["mode"], row["isl"], row["osl"])

    measured: dict[tuple[object, ...], list[tuple[float, float, str]]] = {}
    for row in rows:
        if harness_of(row) is INFERENCEMAX:
            key = (*shape(row), _int(row["batch_size"]))
            measured.setdefault(key, []).append(
                (float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"]), row["silicon_data_source"])
            )
    out: dict[str, str] = {}
    for row in rows:
        if harness_of(row) is INFERENCEMAX:
            continue
        ttft, tpot = float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])
        for other_ttft, other_tpot, other_source in measured.get((*shape(row), _int(row["batch_size"])), []):
            if abs(ttft - other_ttft) <= 0.01 and abs(tpot - other_tpot) <= 0.01:
                out[row["id"]] = other_source
                break
    return out


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


def parallelism(row: dict[str, str]) -> tuple[int, int, int | None, int | None, bool]:
    """(TP, attention-DP, MoE TP, MoE EP, corrected) of an aggregated row.

    Some InferenceMAX rows record ``tp_size`` as TP × EP with ``moe_tp_size`` = TP (``tp_size`` 16 with MoE TP 4 /
    EP 4, 64 with 8 / 8, on 8-GPU B200/B300 nodes): rows whose id names the layout (``…_tp4_ep4_…``) appear both
    ways in the file, and a single-node aggregated run cannot have TP 16 or 64. Where ``tp_size`` = MoE TP × MoE EP,
    EP > 1 and ``tp_size`` exceeds the node's GPUs, the row is read as TP = ``moe_tp_size`` with EP over the same
    GPUs (MoE TP = TP / EP), and ``corrected`` is True.
    """
    tp = _int(row["tp_size"]) or 1
    adp = _int(row["attention_dp_size"]) or 1
    moe_tp, moe_ep = _int(row["moe_tp_size"]), _int(row["moe_ep_size"])
    if moe_tp and moe_ep and moe_ep > 1 and tp == moe_tp * moe_ep and tp > _gpus_per_node(row["system"]):
        return moe_tp, adp, max(moe_tp // moe_ep, 1), moe_ep, True
    return tp, adp, moe_tp, moe_ep, False


def _gpus_per_node(system: str) -> int:
    import aiconfigurator_core
    import yaml

    spec = Path(aiconfigurator_core.__file__).parent / "systems" / f"{system}.yaml"
    if not spec.is_file():
        return 8
    return int(yaml.safe_load(spec.read_text()).get("node", {}).get("num_gpus_per_node", 8))


SCRIPT_KV_FP8 = False
WORLD_STEP_OVERHEAD = False
"""``--world-step-overhead``: every replayed step gets the rollout world's per-step framework seconds
(:data:`pearl_sched.sim.setting.STEP_OVERHEAD_S`), and the silicon datasets are named ``…-world-overhead``."""
DATASET_SUFFIX = ""
"""``--kv-dtype-from-scripts``: FP8 KV where InferenceMAX's launch scripts pass ``--kv-cache-dtype fp8_e4m3``."""


def script_kv_dtype(row: dict[str, str], harness: Harness) -> str:
    """The KV dtype the row's server ran with, as far as the launch scripts say (``--kv-dtype-from-scripts``).

    InferenceMAX's current ``benchmarks/single_node/fixed_seq_len`` scripts pass ``--kv-cache-dtype fp8_e4m3`` for
    DeepSeek-R1 on B200/B300 (FP8 and FP4) and Qwen3.5 FP8/FP4 on B200/B300/H200/H100, and nothing (SGLang's ``auto``:
    bf16) for DeepSeek-R1 FP8 on H200 and the bf16 Qwen3.5 runs. The scripts changed over the months the rows span,
    so this is a reading of today's scripts, reported beside the default, never instead of it.
    """
    if not SCRIPT_KV_FP8 or harness is not INFERENCEMAX or row["precision"] == "bf16":
        return SGLANG_KV_DTYPE
    deepseek = row["model_path"].startswith("deepseek-ai/")
    if deepseek and row["system"] in ("b200_sxm", "b300_sxm"):
        return "fp8"
    if row["model_path"].startswith("Qwen/Qwen3.5"):
        return "fp8"
    return SGLANG_KV_DTYPE


def _engine(
    row: dict[str, str],
    cache: dict[tuple[object, ...], AicStepTimes | str],
    layout: tuple[int, int, int | None, int | None] | None = None,
    phases: tuple[str, ...] = PHASES,
    harness: Harness | None = None,
    launch: LaunchFlags | None = None,
) -> AicStepTimes | str:
    """The row's engine (or why there is none) at its parallelism, or at ``layout`` (TP, attention-DP, MoE TP, EP).

    ``phases``: what the engine runs (a PD role runs one), which decides the large-EP data EP across nodes needs
    (:func:`pearl_sched.profiles.aic_engine.large_ep_comm`). A large-EP engine takes aiconfigurator's KV and
    attention precisions (FP8 for DeepSeek-V3 on SGLang: its wide-EP MLA tables hold no other), not SGLang's bf16
    default, as aiconfigurator's own estimate of the row does. ``harness``: the row's benchmark client (what
    ``--kv-dtype-from-scripts`` reads; default: :func:`harness_of` the row alone). ``launch``: the deployment's recorded
    launch flags (:func:`recorded_launch`): its KV dtype, and its pool at its ``--mem-fraction-static`` (capped at
    ``--max-total-tokens``) instead of SGLang's default.
    """
    if launch is not None and launch.speculative_decoding is not None:
        return f"ran speculative decoding ({launch.speculative_decoding}), which the replay does not model"
    model = MODEL_ALIASES.get(row["model_path"], row["model_path"])
    tp, adp, moe_tp, moe_ep = layout if layout is not None else parallelism(row)[:4]
    kv: str | None = script_kv_dtype(row, harness_of(row) if harness is None else harness)
    if launch is not None:
        kv = launch.kv_cache_dtype
    fmha: str | None = SGLANG_KV_DTYPE  # attention in bf16 (the engine has no FP8 context MLA data)
    key = (model, row["system"], row["gemm_quant_mode"] or None, row["moe_quant_mode"] or None, tp, adp, moe_tp, moe_ep)
    key += (kv, phases, launch)
    if key not in cache:
        try:
            large_ep = large_ep_comm(
                model,
                row["system"],
                "sglang",
                tp=tp,
                attention_dp=adp,
                moe_tp=moe_tp if moe_tp is not None else tp * adp // (moe_ep or 1),
                moe_ep=moe_ep,
                moe_quant_mode=row["moe_quant_mode"] or None,
                phases=phases,
            )
            if large_ep:
                kv = fmha = None
            engine = AicStepTimes(
                model,
                row["system"],
                "sglang",
                tp=tp,
                attention_dp=adp,
                moe_tp=moe_tp,
                moe_ep=moe_ep,
                gemm_quant_mode=row["gemm_quant_mode"] or None,
                moe_quant_mode=row["moe_quant_mode"] or None,
                kvcache_quant_mode=kv,
                fmha_quant_mode=fmha,
                phases=phases,
            )
            if launch is None:
                POOLS[engine] = engine.kv_capacity_tokens(pool_source=POOL_SOURCE)
            else:
                pool = engine.kv_capacity_tokens(launch.mem_fraction_static, pool_source=POOL_SOURCE)
                POOLS[engine] = min(pool, launch.max_total_tokens or pool)
                LAUNCHES[engine] = launch
            if WORLD_STEP_OVERHEAD:  # the rollout world's per-step framework seconds on every step (a sensitivity)
                engine.calibration = StepTimeCalibration(scale=1.0, overhead_s=STEP_OVERHEAD_S)
            cache[key] = engine
        except (AicCoverageError, ValueError) as exc:
            reason = str(exc)
            reason = re.sub(r".*\): ", "", reason) if "cannot model" in reason else reason
            reason = re.sub(r".* data for .*?per node\), ", "no large-EP data for EP across nodes: ", reason)
            cache[key] = reason[:160]
    return cache[key]


def server_memory(engine: AicStepTimes, harness: Harness) -> tuple[int, int]:
    """(KV pool tokens, max running requests) of the row's SGLang server.

    For a hybrid linear-attention model (Qwen3.5) SGLang keeps each running request's Gated DeltaNet state in a
    state pool beside the KV pool (:func:`pearl_sched.profiles.aic_engine.sglang_hybrid_pool`): 512 slots with
    ``--disable-radix-cache`` (the InferenceMAX servers), the 0.9 memory-ratio split with the radix cache (SGLang's
    default, for the rows whose launch flags are not recorded), from the budget at a recorded launch's
    ``--mem-fraction-static`` where there is one. Other models: the pool from :data:`POOL_SOURCE` and SGLang's cap of
    4,096. An engine built with recorded launch flags (:data:`LAUNCHES`) is capped at their ``--max-running-requests``.
    """
    radix_off = harness is INFERENCEMAX
    key = (radix_off, POOL_SOURCE)
    launch = LAUNCHES.get(engine)
    memory = _SERVER_MEMORY.setdefault(engine, {})
    if key not in memory:
        hybrid = engine.sglang_hybrid_pool(
            disable_radix_cache=radix_off,
            pool_source=POOL_SOURCE,
            mem_fraction_static=launch.mem_fraction_static if launch is not None else None,
        )
        if hybrid is None:
            memory[key] = (POOLS[engine], 4096)
        else:
            memory[key] = (hybrid.kv_tokens, hybrid.max_running_requests)
    pool, running = memory[key]
    if launch is not None and launch.max_running_requests is not None:
        running = min(running, launch.max_running_requests)
    return pool, running


_RECV_10_30 = ((1, 10), (16, 30))
"""``if [[ $CONC -ge 16 ]]; then SCHEDULER_RECV_INTERVAL=30; else SCHEDULER_RECV_INTERVAL=10; fi`` ("recv every ~10
requests; if CONC ≥ 16, relax to ~30"), passed as ``--scheduler-recv-interval``: (first C, interval) pairs."""

SCHEDULER_RECV_INTERVALS: dict[str, tuple[tuple[int, int], ...]] = {
    _DSR1_FP8_B200_V056: _RECV_10_30,  # dsr1_fp8_b200_docker.sh at d27433dff
    _DSR1_FP8_B200_SH_TP8: _RECV_10_30,
    _DSR1_FP8_B200_SH: ((1, 10),),  # the TP=4 branch sets 10 at every C
    _DSR1_FP4_B200_SH: _RECV_10_30,  # dsr1_fp4_b200.sh as of 64c20b6b5
    _DSR1_FP8_B300_SH.format(8): _RECV_10_30,
    _DSR1_FP8_B300_SH.format(4): ((1, 10),),  # the TP=4 branch sets 10 at every C
    _DSR1_FP4_B300_SH: _RECV_10_30,
    _DSR1_FP4_B200_DOCKER_NOV: _RECV_10_30,  # dsr1_fp4_b200_docker.sh as of 4b860b78e
    _DSR1_FP8_B200_DOCKER_1118: _RECV_10_30,  # dsr1_fp8_b200_docker.sh at d8fe8f73e
    _QWEN35_FP8_B200_SH: _RECV_10_30,
    _QWEN35_FP8_B200_SH_0303: _RECV_10_30,
    _QWEN35_BF16_B200_SH: _RECV_10_30,  # qwen3.5_bf16_b200.sh at 9dc87a68c
    _QWEN35_FP4_B200_SH: _RECV_10_30,  # qwen3.5_fp4_b200.sh at 48d35c480
    _QWEN35_BF16_B300_SH: _RECV_10_30,  # qwen3.5_bf16_b300.sh at 32274d6c1
    _QWEN35_FP4_B300_SH: _RECV_10_30,  # qwen3.5_fp4_b300.sh at 8acbd08b7
    _QWEN35_FP8_B300_SH: ((1, 10),),  # qwen3.5_fp8_b300.sh at c0f62a2ef: --scheduler-recv-interval 10 at every C
    # PD decode engines (the replay models it there only: a prefill engine receives every iteration): srt-slurm's
    # GB200 FP8 low-latency recipes (scheduler-recv-interval: 10 on prefill and decode, f6754071 / 5063eb43) and
    # dynamo's gb200-fp8/disagg/1k1k-low-latency.sh at b7107d008 (--scheduler-recv-interval 10 on both)
    _SRT_SLURM_GB200_FP8_LOW_LATENCY: ((1, 10),),
    _SRT_SLURM_GB200_FP8_8K1K_LOW_LATENCY.format("decode"): ((1, 10),),
    _DYNAMO_GB200_FP8_1K1K_LOW_LATENCY: ((1, 10),),
}
"""``--scheduler-recv-interval`` of each recorded InferenceX launch script that sets it, by the record's ``script``
(read at the commit the record names). ``dsr1_fp8_h200.sh`` (64c20b6b5) and ``qwen3.5_fp8_h200.sh`` (f65d6b4b1) set
none, nor do the H200 / B200 srt-slurm recipes and dynamo's max-throughput scripts; a record added to
:data:`RECORDED_LAUNCHES` from a script that sets one needs its entry here. A disaggregated record's interval applies
to its decode engine (:attr:`pearl_sched.sim.replay.PDRole.scheduler_recv_interval`)."""


def scheduler_recv_interval(launch: LaunchFlags | None, concurrency: int) -> int:
    """The ``--scheduler-recv-interval`` the row's server ran at its concurrency (1: SGLang's default, every
    iteration receives; rows without a recorded launch, and scripts that set none)."""
    if launch is None:
        return 1
    interval = 1
    for first_c, value in SCHEDULER_RECV_INTERVALS.get(launch.script, ()):
        if concurrency >= first_c:
            interval = value
    return interval


@dataclass
class Replayed:
    """A silicon row's replay inputs, kept for the calibrated pass."""

    row: Row
    engine: AicStepTimes
    isl: int
    osl: int
    concurrency: int
    chunk: int
    harness: Harness
    tp_corrected: bool = False
    backend_version: str = ""


def replay_aggregated(
    engine: AicStepTimes,
    *,
    isl: int,
    osl: int,
    concurrency: int,
    chunk: int,
    harness: Harness,
    backend_version: str = "",
) -> tuple[ReplayResult, int]:
    """One aggregated row on one SGLang server: its memory as the harness launched it, its clients as they sent.

    An engine built with recorded launch flags (:data:`LAUNCHES`) runs with their ``--max-prefill-tokens``,
    ``--cuda-graph-max-bs`` and ``--scheduler-recv-interval`` (:func:`scheduler_recv_interval`; ``chunk`` is the
    caller's: the recorded ``--chunked-prefill-size``). The decode
    CUDA-graph sizes are those of the row's SGLang version (``backend_version``; :func:`sglang_cuda_graph_batch_sizes`).

    Returns:
        The replay and the server's KV pool in tokens (what decides whether the row is KV-bound).
    """
    pool, running = server_memory(engine, harness)
    launch = LAUNCHES.get(engine)
    res = replay_closed_loop(
        engine,
        isl=isl,
        osl=osl,
        concurrency=concurrency,
        pool_tokens=pool,
        max_running_requests=running,
        chunked_prefill_size=chunk,
        max_prefill_tokens=(launch.max_prefill_tokens if launch else None) or SGLANG_MAX_PREFILL_TOKENS,
        rounds=harness.prompts_per_client,
        range_ratio=harness.range_ratio,
        cuda_graph_bs=sglang_cuda_graph_batch_sizes(
            engine.gpu_memory_bytes(),
            engine.tp,
            launch.cuda_graph_max_bs if launch is not None else None,
            backend_version=backend_version,
        ),
        scheduler_recv_interval=scheduler_recv_interval(launch, concurrency),
    )
    return res, pool


def sglang_silicon_rows() -> list[dict[str, str]]:
    """The SGLang rows of aiconfigurator-core's ``systems/silicon_sample.csv`` (``nan`` read as empty)."""
    import aiconfigurator_core

    path = Path(aiconfigurator_core.__file__).parent / "systems" / "silicon_sample.csv"
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["backend"] == "sglang"]
    return [{k: ("" if v == "nan" else v) for k, v in r.items()} for r in rows]


def silicon_rows(
    rows: list[dict[str, str]],
    cache: dict[tuple[object, ...], AicStepTimes | str],
    repeats: Collection[str] = frozenset(),
) -> tuple[list[Replayed], Counter[str], str]:
    """Replay every aggregated SGLang row the engine covers, each as its harness sent it (``repeats``:
    :func:`harness_of`) and with its deployment's recorded launch flags where there are any
    (:func:`recorded_launch`)."""
    skipped: Counter[str] = Counter()
    out: list[Replayed] = []
    source = ""
    for row in rows:
        if row["mode"] != "agg":
            continue
        harness = harness_of(row, repeats)
        launch = recorded_launch(row, "agg", parallelism(row)[:4])
        layout = launch.layout if launch is not None else None  # the layout its script launched, where it differs
        engine = _engine(row, cache, layout, harness=harness, launch=launch)
        if isinstance(engine, str):
            skipped[f"{row['model_path']} {row['system']} tp{row['tp_size']}: {engine}"] += 1
            continue
        isl, osl, conc = int(row["isl"]), int(row["osl"]), int(float(row["batch_size"]))
        chunk = launch.chunked_prefill_size if launch else sglang_chunked_prefill_size(engine.gpu_memory_bytes())
        try:
            res, pool = replay_aggregated(
                engine,
                isl=isl,
                osl=osl,
                concurrency=conc,
                chunk=chunk,
                harness=harness,
                backend_version=row["backend_version"],
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
        dataset = ("silicon-sglang-kvbound" if conc * (isl + osl) > pool else "silicon-sglang") + DATASET_SUFFIX
        e2e = ttft + (harness.mean_osl(osl) - 1) * tpot
        measured = Row(dataset, "agg", row["id"], ttft, tpot, e2e, res.ttft_s, res.tpot_s, res.e2e_s)
        out.append(
            Replayed(measured, engine, isl, osl, conc, chunk, harness, parallelism(row)[4], row["backend_version"])
        )
    return out, skipped, source


DISAGG_LAYOUT_FIELDS = ("tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
ROLE_PHASES = {"prefill": ("context",), "decode": ("generation",)}
"""The phase each PD role runs (what aiconfigurator's disaggregated estimate requires of each side)."""


def _side(row: dict[str, str], role: str) -> tuple[int, int, int | None, int | None]:
    """(TP, attention-DP, MoE TP, EP) of one role of a disaggregated row (``prefill_…`` / ``decode_…`` columns)."""
    tp, adp, moe_tp, moe_ep = (_int(row[f"{role}_{name}"]) for name in DISAGG_LAYOUT_FIELDS)
    return tp or 1, adp or 1, moe_tp, moe_ep


def runs_prebuilt_step(backend_version: str) -> bool:
    """Whether an SGLang decode server of this version sits out a step to take in newly transferred requests.

    SGLang 0.5.5 to 0.5.9 (``SchedulerDisaggregationDecodeMixin.get_next_disagg_decode_batch_to_run`` in
    ``disaggregation/decode.py``) run a new prebuilt batch instead of the running batch and merge it at the next
    iteration; 0.5.10 merges it and decodes in the same iteration (:attr:`pearl_sched.sim.replay.PDRole.prebuilt_step`).
    False for a version the row does not record.
    """
    numbers = re.findall(r"\d+", backend_version)[:3]
    return len(numbers) == 3 and tuple(int(n) for n in numbers) < (0, 5, 10)


def _has_workers(row: dict[str, str]) -> bool:
    return bool(row["prefill_num_workers"] and row["decode_num_workers"])


def recorded_concurrency(row: dict[str, str]) -> int | None:
    """A row's benchmark concurrency: ``silicon_concurrency=`` in its source, else (rows with worker counts) the
    decode batch per rank × decode ranks × decode workers, the product that equals the recorded concurrency on every
    row that records both (97 of 97)."""
    match = re.search(r"silicon_concurrency=(\d+)", row["silicon_data_source"])
    if match:
        return int(match.group(1))
    if row["batch_size"]:
        return int(float(row["batch_size"]))
    if _has_workers(row) and row["decode_batch_size"]:
        return int(row["decode_batch_size"]) * int(row["decode_num_workers"]) * _side(row, "decode")[1]
    return None


SAME_ARCHITECTURE = {"deepseek-ai/DeepSeek-R1": "deepseek-ai/DeepSeek-V3"}
"""Model ids naming one architecture (DeepSeek-R1 is DeepSeek-V3's architecture, config and size): the database dump
records its DeepSeek-R1 runs (ids ``dsr1_…``) under ``deepseek-ai/DeepSeek-V3``, the dated exports under R1."""


def _measurement_key(row: dict[str, str]) -> tuple[object, ...]:
    return (
        SAME_ARCHITECTURE.get(row["model_path"], row["model_path"]),
        row["system"],
        row["precision"],
        row["isl"],
        row["osl"],
        recorded_concurrency(row),
        round(float(row["silicon_ttft_ms"]), 3),
        round(float(row["silicon_tpot_ms"]), 3),
    )


def deployment_twins(rows: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    """For disaggregated rows without worker counts: the row with worker counts that holds the same measurement.

    The dated CSV exports repeat benchmarks of the database dump without its worker counts; a row of both with the
    same model, GPU, precision, ISL, OSL, concurrency and measured TTFT and TPOT (to the µs) is one measurement, and
    the dump's row records its deployment (the model id may differ: :data:`SAME_ARCHITECTURE`). Returns
    ``{row id: twin}`` for the rows that have exactly one twin.
    """
    recorded: dict[tuple[object, ...], list[dict[str, str]]] = {}
    for row in rows:
        if row["mode"] == "disagg" and _has_workers(row):
            recorded.setdefault(_measurement_key(row), []).append(row)
    twins = {}
    for row in rows:
        if row["mode"] == "disagg" and not _has_workers(row):
            found = recorded.get(_measurement_key(row), [])
            if len(found) == 1:
                twins[row["id"]] = found[0]
    return twins


def _link_bytes_per_s(system: str) -> float:
    """One GPU's P→D bandwidth, one direction: the system file's ``inter_node_bw`` (NVLink within a GB200/GB300
    rack, the node's RDMA NICs per GPU elsewhere), as the rollout world's setting reads it."""
    import aiconfigurator_core
    import yaml

    spec = Path(aiconfigurator_core.__file__).parent / "systems" / f"{system}.yaml"
    return float(yaml.safe_load(spec.read_text())["node"]["inter_node_bw"])


@dataclass
class DisaggReplayed:
    """A disaggregated row's replay and how its deployment was read."""

    row: Row
    decode_engine: AicStepTimes
    isl: int
    osl: int
    concurrency: int
    from_twin: bool
    roles: tuple[PDRole, PDRole] | None = None
    harness: Harness = INFERENCEMAX
    from_recipe: bool = False
    """The row records no worker counts and has no twin: its deployment is the one recorded recipe that ran it."""

    def replay(self) -> DisaggReplayResult:
        """Replay the row again on its roles' engines, with its own lengths, concurrency and harness."""
        assert self.roles is not None, "a row without its deployment has nothing to replay"
        prefill, decode = self.roles
        return replay_disagg_closed_loop(
            prefill,
            decode,
            isl=self.isl,
            osl=self.osl,
            concurrency=self.concurrency,
            rounds=self.harness.prompts_per_client,
            range_ratio=self.harness.range_ratio,
        )


def calibrated_disagg_rows(disagg: list[DisaggReplayed]) -> list[Row]:
    """Each disaggregated row replayed again with its engines calibrated on the *other* measurements of its deployment.

    As :func:`calibrated_rows`: (replayed TPOT, measured TPOT) pairs of the same deployment (both roles' engines and
    worker counts) folded into a :class:`~pearl_sched.profiles.aic_engine.StepTimeCalibration` applied to both
    roles' engines; the row and its twin (the same measurement) are never in it. Deployments with fewer than 3
    other measurements are left out.
    """
    groups: dict[tuple[object, ...], list[DisaggReplayed]] = {}
    for item in disagg:
        if item.roles is None:
            continue
        prefill, decode = item.roles
        groups.setdefault((id(prefill.steps), id(decode.steps), prefill.workers, decode.workers), []).append(item)
    out: list[Row] = []
    for items in groups.values():
        for item in items:
            others = [o for o in items if _same_measurement(o) != _same_measurement(item)]
            if len({_same_measurement(o) for o in others}) < 3:
                continue
            assert item.roles is not None
            engines = {id(role.steps): role.steps for role in item.roles if isinstance(role.steps, AicStepTimes)}
            cal = StepTimeCalibration()
            cal.observe_many((o.row.sim_tpot_s, o.row.measured_tpot_s) for o in others)
            for engine in engines.values():
                engine.calibration = cal
            try:
                res = item.replay()
            finally:
                for engine in engines.values():
                    engine.calibration = None
            out.append(_calibrated_row(item.row, res))
    return out


def _calibrated_row(row: Row, res: ReplayResult) -> Row:
    """``row`` with a calibrated replay's predictions, under the dataset's ``-calibrated`` name."""
    return Row(
        row.dataset + "-calibrated",
        row.mode,
        row.row_id,
        row.measured_ttft_s,
        row.measured_tpot_s,
        row.measured_e2e_s,
        res.ttft_s,
        res.tpot_s,
        res.e2e_s,
    )


def _same_measurement(item: DisaggReplayed) -> tuple[object, ...]:
    r = item.row
    return (item.isl, item.osl, item.concurrency, round(r.measured_ttft_s, 6), round(r.measured_tpot_s, 6))


def disagg_rows(
    rows: list[dict[str, str]],
    cache: dict[tuple[object, ...], AicStepTimes | str],
    repeats: Collection[str] = frozenset(),
) -> tuple[list[DisaggReplayed], Counter[str]]:
    """Replay every disaggregated SGLang row whose deployment is recorded (in the row or in its twin).

    Each role runs at its own recorded parallelism (TP, attention-DP, MoE TP / EP) with aiconfigurator-core step
    times and KV pool per rank, ``prefill_num_workers`` / ``decode_num_workers`` engines, the prompt's whole KV over
    each prefill rank's link, and the row's closed-loop concurrency sent as its harness sent it
    (:func:`pearl_sched.sim.replay.replay_disagg_closed_loop`). Rows without worker counts use the deployment of
    their twin (:func:`deployment_twins`); the rest are not run (``validate-coverage`` says why). A deployment
    whose launch script is recorded (:func:`recorded_launch`) runs each role with that script's flags.
    """
    twins = deployment_twins(rows)
    out: list[DisaggReplayed] = []
    skipped: Counter[str] = Counter()
    for row in rows:
        if row["mode"] != "disagg":
            continue
        deployment = row if _has_workers(row) else twins.get(row["id"]) or recipe_deployment(row)
        if deployment is None:
            skipped[
                "disagg rows without worker counts, no twin that records them and no single recorded recipe that ran"
                " them: the deployment is not recorded"
            ] += 1
            continue
        conc = recorded_concurrency(row)
        if conc is None:
            skipped["disagg rows without a recorded concurrency"] += 1
            continue
        roles = []
        for role in ("prefill", "decode"):
            side = _side(deployment, role)
            launch = recorded_launch(deployment, role, side)
            layout = launch.layout if launch is not None and launch.layout is not None else side
            engine = _engine(deployment, cache, layout, ROLE_PHASES[role], harness_of(deployment, repeats), launch)
            if isinstance(engine, str):
                launched = f" {layout} as its launch script ran it (the row records {side})" if layout != side else ""
                skipped[f"{row['model_path']} {row['system']} {role}{launched or f' {side}'}: {engine}"[:240]] += 1
                break
            gpu_memory = engine.gpu_memory_bytes()
            gpus = engine.tp * engine.attention_dp
            roles.append(
                PDRole(
                    engine,
                    workers=int(deployment[f"{role}_num_workers"]),
                    ranks=engine.attention_dp,
                    pool_tokens=POOLS[engine],
                    chunked_prefill_size=launch.chunked_prefill_size
                    if launch
                    else sglang_chunked_prefill_size(gpu_memory),
                    max_prefill_tokens=(launch.max_prefill_tokens if launch else None) or SGLANG_MAX_PREFILL_TOKENS,
                    cuda_graph_bs=sglang_cuda_graph_batch_sizes(
                        gpu_memory,
                        gpus,
                        launch.cuda_graph_max_bs if launch else None,
                        backend_version=deployment.get("backend_version", ""),
                    ),
                    kv_bytes_per_token=engine.kv_bytes_per_token(),
                    link_bytes_per_s=_link_bytes_per_s(row["system"]) * engine.tp,
                    max_running_requests=launch.max_running_requests // engine.attention_dp
                    if launch and launch.max_running_requests
                    else None,
                    prebuilt_step=role == "decode"
                    and POOL_SOURCE == "sglang"  # aiconfigurator-core's pool source reproduces the previous rounds
                    and runs_prebuilt_step(deployment.get("backend_version", "")),
                    # the decode engine's --scheduler-recv-interval (a prefill engine receives every iteration)
                    scheduler_recv_interval=scheduler_recv_interval(launch, conc) if role == "decode" else 1,
                )
            )
        if len(roles) < 2:
            continue
        isl, osl = int(row["isl"]), int(row["osl"])
        harness = harness_of(row, repeats)
        try:
            res = replay_disagg_closed_loop(
                roles[0],
                roles[1],
                isl=isl,
                osl=osl,
                concurrency=conc,
                rounds=harness.prompts_per_client,
                range_ratio=harness.range_ratio,
            )
        except ReplayError as exc:
            skipped[f"disagg replay refused: {exc}"[:90]] += 1
            continue
        except AicCoverageError as exc:
            skipped[f"{row['model_path']} {row['system']} disagg: {str(exc).rsplit(': ', 1)[-1][:80]}"] += 1
            continue
        decode = roles[1]
        capacity = decode.pool_tokens * decode.ranks * decode.workers
        dataset = ("silicon-sglang-kvbound" if conc * (isl + osl) > capacity else "silicon-sglang") + DATASET_SUFFIX
        ttft = float(row["silicon_ttft_ms"]) / 1e3
        tpot = float(row["silicon_tpot_ms"]) / 1e3
        e2e = ttft + (harness.mean_osl(osl) - 1) * tpot
        measured = Row(dataset, "disagg", row["id"], ttft, tpot, e2e, res.ttft_s, res.tpot_s, res.e2e_s)
        assert isinstance(decode.steps, AicStepTimes)
        out.append(
            DisaggReplayed(
                measured,
                decode.steps,
                isl,
                osl,
                conc,
                deployment is twins.get(row["id"]),
                (roles[0], roles[1]),
                harness,
                from_recipe=deployment is not row and deployment is not twins.get(row["id"]),
            )
        )
    return out, skipped


def aic_decode_estimate_rows(
    rows: list[dict[str, str]],
    cache: dict[tuple[object, ...], AicStepTimes | str],
    repeats: Collection[str] = frozenset(),
) -> tuple[list[Row], Counter[str]]:
    """aiconfigurator's own decode-worker estimate of each disaggregated row whose deployment is recorded (TPOT only).

    What aiconfigurator's disaggregated estimate computes for the decode side (its SGLang backend's
    ``run_static(mode="static_gen")``: the recorded per-rank ``decode_batch_size`` stepping through contexts ISL + 1
    … ISL + OSL − 1, without the 1.08 decode correction ``cli_estimate`` multiplies in), through this project's
    engine call on the decode role, which ``tests/test_aic_engine.py`` checks equals aiconfigurator's own result. Not
    a replay: no prefill, no scheduling. It covers rows whose prefill role aiconfigurator refuses, so it shows the
    engine's decode data on rows the replay cannot run. The decode engine is at the layout the deployment's recorded
    launch script ran (:attr:`LaunchFlags.layout`) where it differs from the row's columns; its pool and KV dtype stay
    SGLang's defaults.
    """
    twins = deployment_twins(rows)
    out: list[Row] = []
    failed: Counter[str] = Counter()
    for row in rows:
        deployment = row if _has_workers(row) else twins.get(row["id"])
        if row["mode"] != "disagg" or deployment is None or not deployment["decode_batch_size"]:
            continue
        side = _side(deployment, "decode")
        launch = recorded_launch(deployment, "decode", side)
        layout = launch.layout if launch is not None and launch.layout is not None else side
        engine = _engine(deployment, cache, layout, ROLE_PHASES["decode"], harness_of(deployment, repeats))
        if isinstance(engine, str):
            failed[f"{row['model_path']} {row['system']} decode {layout}: {engine}"[:120]] += 1
            continue
        isl, osl, batch = int(row["isl"]), int(row["osl"]), int(deployment["decode_batch_size"])
        contexts = range(isl + 1, isl + max(osl, 2))
        tpot = sum(engine.decode_s(batch, context) for context in contexts) / len(contexts)
        ttft = float(row["silicon_ttft_ms"]) / 1e3
        measured_tpot = float(row["silicon_tpot_ms"]) / 1e3
        e2e = ttft + (harness_of(row, repeats).mean_osl(osl) - 1) * measured_tpot
        nan = float("nan")
        out.append(Row("silicon-sglang-aic-estimate", "disagg", row["id"], ttft, measured_tpot, e2e, nan, tpot, nan))
    return out, failed


def aic_estimate_rows(replayed: list[Replayed]) -> tuple[list[Row], Counter[str]]:
    """aiconfigurator-core's own closed-form estimate of each replayed row, for comparison with the replay.

    The same call aiconfigurator's ``tools/accuracy_regression_testing/predict_silicon_sample.py`` makes through
    ``cli_estimate(mode="agg")``: the SGLang backend's ``run_agg`` at ``batch_size`` = the row's concurrency and
    ``ctx_tokens`` = ISL (its default), with the row's GEMM / MoE precision, the context-attention precision
    resolved from the perf data, and the perf database of the row's SGLang version where the package has one (else
    its current one), as that tool does. The parallelism is the replay's (:func:`parallelism`). E2E is
    ``TTFT + (mean OSL − 1) × TPOT`` as for the measured rows.
    """
    import aiconfigurator_core
    from aiconfigurator_core.sdk import common
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.config import ModelConfig, RuntimeConfig
    from aiconfigurator_core.sdk.engine import _literal_backend_version
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.models.helpers import resolve_context_fmha_by_data, resolve_nvfp4_for_system
    from aiconfigurator_core.sdk.perf_database import get_database

    systems = str(Path(aiconfigurator_core.__file__).parent / "systems")
    databases: dict[tuple[str, str], object] = {}
    out: list[Row] = []
    failed: Counter[str] = Counter()
    for item in replayed:
        engine, r = item.engine, item.row
        try:
            key = (engine.gpu, item.backend_version)
            if key not in databases:
                databases[key] = _aic_database(get_database, _literal_backend_version, engine.gpu, key[1], systems)
            database = databases[key]
            config = ModelConfig(
                tp_size=engine.tp,
                attention_dp_size=engine.attention_dp,
                moe_tp_size=engine.moe_tp,
                moe_ep_size=engine.moe_ep,
                gemm_quant_mode=common.GEMMQuantMode[engine.gemm_quant_mode] if engine.gemm_quant_mode else None,
                moe_quant_mode=common.MoEQuantMode[engine.moe_quant_mode] if engine.moe_quant_mode else None,
            )
            if _is_moe(engine.model_id):
                config.moe_tp_size, config.moe_ep_size = config.resolve_moe_parallelism()
            resolve_context_fmha_by_data(config, engine.model_id, database, "sglang", is_context_role=True)
            resolve_nvfp4_for_system(config, engine.gpu, engine.model_id)
            model = get_model(engine.model_id, config, "sglang")
            runtime = RuntimeConfig(isl=item.isl, osl=item.osl, batch_size=item.concurrency)
            # a fresh backend per row: run_agg memoises by (ISL, OSL, batch, ctx_tokens) only, not by model
            result = get_backend("sglang").run_agg(model, database, runtime, ctx_tokens=item.isl).get_result_dict()
        except Exception as exc:
            failed[f"{engine.model_id} {engine.gpu}: {str(exc).strip()[:70] or type(exc).__name__}"] += 1
            continue
        ttft, tpot = result["ttft"] / 1e3, result["tpot"] / 1e3
        e2e = ttft + (item.harness.mean_osl(item.osl) - 1) * tpot
        dataset = r.dataset.replace("silicon-sglang", "silicon-sglang-aic-estimate")
        out.append(
            Row(dataset, r.mode, r.row_id, r.measured_ttft_s, r.measured_tpot_s, r.measured_e2e_s, ttft, tpot, e2e)
        )
    return out, failed


def _aic_database(get_database: Any, literal_version: Any, gpu: str, version: str, systems: str) -> object:
    """The perf database of ``version`` where the package ships one, else its current one (as aiconfigurator's
    predict_silicon_sample falls back)."""
    if version:
        try:
            database = get_database(gpu, "sglang", version, systems_paths=systems)
        except (ValueError, KeyError, FileNotFoundError):
            database = None
        if database is not None:
            return database
    return get_database(gpu, "sglang", literal_version(gpu, "sglang", None, systems, None), systems_paths=systems)


def _is_moe(model_id: str) -> bool:
    from aiconfigurator_core.sdk.models.helpers import check_is_moe

    return bool(check_is_moe(model_id))


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
                res, _ = replay_aggregated(
                    engine,
                    isl=item.isl,
                    osl=item.osl,
                    concurrency=item.concurrency,
                    chunk=item.chunk,
                    harness=item.harness,
                    backend_version=item.backend_version,
                )
            finally:
                engine.calibration = None
            out.append(_calibrated_row(item.row, res))
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


def deal_to_ranks(arrivals: list[tuple[float, int, int]], ranks: int) -> list[list[int]]:
    """Indices of ``arrivals`` per data-parallel rank: dealt in arrival order, each rank's list in arrival order."""
    order = sorted(range(len(arrivals)), key=lambda k: arrivals[k])
    return [order[rank::ranks] for rank in range(ranks)]


def llmservingsim_rows() -> tuple[list[Row], Counter[str], str]:
    """LLMServingSim's real vLLM 0.19 runs (300 ShareGPT requests each), replayed open-loop with vLLM's policy.

    A run with ``data_parallel_size`` > 1 (Qwen3-30B-A3B: DP 2 with expert parallelism) is replayed as that many
    engine ranks, each with its own scheduler and KV pool and the engine's step times at attention-DP = DP (and
    MoE EP = TP × DP when ``enable_expert_parallel``); requests are dealt to the ranks in arrival order (vLLM's DP
    client sends each to the least loaded rank; with one arrival stream of similar requests that alternates) and
    the ranks' MoE synchronisation (an idle rank runs dummy steps) is not modelled. Rows: one per run (means over its
    requests, ``llmservingsim``) and one per request (``llmservingsim-requests``).
    """
    import json

    out: list[Row] = []
    skipped: Counter[str] = Counter()
    sources = []
    systems = {"RTXPRO6000": "rtx_pro_6000_server", "RTX4090": "rtx_4090"}
    for meta_path in sorted((DATA / "llmservingsim" / "bench" / "examples").glob("*/*/vllm/meta.json")):
        meta = json.loads(meta_path.read_text())
        kwargs = meta["engine_kwargs"]
        gpu = systems.get(meta_path.parents[2].name, meta_path.parents[2].name)
        tp = int(kwargs["tensor_parallel_size"])
        dp = int(kwargs.get("data_parallel_size") or 1)
        ep = tp * dp if kwargs.get("enable_expert_parallel") else None
        try:
            model = MODEL_ALIASES.get(meta["model"], meta["model"])
            engine = AicStepTimes(model, gpu, "vllm", tp=tp, attention_dp=dp, moe_ep=ep)
            pool = engine.kv_capacity_tokens()
        except AicCoverageError as exc:
            skipped[f"{meta['model']} on {gpu}: {str(exc)[:80]}"] += 1
            continue
        requests = [json.loads(line) for line in (meta_path.parent / "requests.jsonl").read_text().splitlines()]
        t0 = min(r["arrival_time"] for r in requests)
        arrivals = [(r["arrival_time"] - t0, int(r["input_toks"]), int(r["output_toks"])) for r in requests]
        sim: list[tuple[float, float, float]] = [(math.nan, math.nan, math.nan)] * len(requests)
        for mine in deal_to_ranks(arrivals, dp):
            res = replay_open_loop(
                engine,
                [arrivals[k] for k in mine],
                pool_tokens=pool,
                policy="vllm-v1",
                max_num_batched_tokens=int(kwargs["max_num_batched_tokens"]),
                max_running_requests=int(kwargs["max_num_seqs"]),
            )
            for k, times in zip(mine, res.per_request, strict=True):
                sim[k] = times
        name = f"{meta_path.parents[2].name}/{meta_path.parents[1].name}"
        measured: list[tuple[float, float, float]] = []
        for k, r in enumerate(requests):
            ttft = r["first_token_ts"] - r["queued_ts"]
            e2e = r["last_token_ts"] - r["queued_ts"]
            tpot = (e2e - ttft) / (r["output_toks"] - 1) if r["output_toks"] > 1 else math.nan
            measured.append((ttft, tpot, e2e))
            out.append(Row("llmservingsim-requests", "agg", f"{name}#{r['request_id']}", ttft, tpot, e2e, *sim[k]))
        m, p = np.array(measured), np.array(sim)
        out.append(Row("llmservingsim", "agg", name, *np.nanmean(m, axis=0).tolist(), *np.nanmean(p, axis=0).tolist()))
        sources.append(engine.source + (f" x{dp} DP ranks" if dp > 1 else ""))
    return out, skipped, "; ".join(sources)


def unique_line(replayed: list[Replayed]) -> str:
    """MAPE over distinct measurements: the file repeats one benchmark under several ids (a database dump and two
    dated exports), so rows with the same model, GPU, ISL, OSL, concurrency and measured TTFT / TPOT count once."""
    seen: dict[tuple[object, ...], Row] = {}
    for item in replayed:
        r = item.row
        seen.setdefault((item.engine.model_id, item.engine.gpu, item.isl, item.osl, item.concurrency,
                         r.measured_ttft_s, r.measured_tpot_s), r)  # fmt: skip
    return _unique_mape_line("agg", list(seen.values()))


def disagg_unique_line(disagg: list[DisaggReplayed]) -> str:
    """MAPE over distinct disaggregated measurements (a twin and its row count once)."""
    seen: dict[tuple[object, ...], Row] = {}
    for item in disagg:
        r = item.row
        seen.setdefault((item.decode_engine.model_id, item.decode_engine.gpu, item.isl, item.osl, item.concurrency,
                         round(r.measured_ttft_s, 6), round(r.measured_tpot_s, 6)), r)  # fmt: skip
    return _unique_mape_line("disagg", list(seen.values()))


def _unique_mape_line(mode: str, rows: list[Row]) -> str:
    """The ``validate-unique`` line of ``mode``: TTFT, TPOT and E2E MAPE over ``rows`` (one per measurement)."""
    if not rows:
        return f"validate-unique dataset=silicon-sglang(+kvbound) mode={mode} rows=0"
    parts = []
    for target in ("ttft", "tpot", "e2e"):
        measured = np.array([getattr(r, f"measured_{target}_s") for r in rows])
        sim = np.array([getattr(r, f"sim_{target}_s") for r in rows])
        parts.append(f"{target}_mape_pct={100 * mean_absolute_percentage_error(measured, sim):.1f}")
    return f"validate-unique dataset=silicon-sglang(+kvbound) mode={mode} rows={len(rows)} {' '.join(parts)}"


def total_lines(rows: list[Row]) -> list[str]:
    """The issue's target population: every replayed SGLang silicon row, aggregated and disaggregated, KV-bound or not
    (``mode=agg+disagg``)."""
    names = {f"silicon-sglang{DATASET_SUFFIX}", f"silicon-sglang-kvbound{DATASET_SUFFIX}"}
    mine = [r for r in rows if r.dataset in names]
    lines = []
    for target in ("ttft", "tpot", "e2e"):
        pairs = [(getattr(r, f"measured_{target}_s"), getattr(r, f"sim_{target}_s")) for r in mine]
        pairs = [(m, s) for m, s in pairs if not (math.isnan(m) or math.isnan(s))]
        if pairs:
            measured, sim = np.array(pairs).T
            mape = 100 * mean_absolute_percentage_error(measured, sim)
            lines.append(
                f"validate dataset=silicon-sglang{DATASET_SUFFIX}(+kvbound) mode=agg+disagg target={target}"
                f" rows={len(pairs)} mape_pct={mape:.1f}"
            )
    return lines


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


def launch_note_lines(replayed: list[Replayed], disagg: list[DisaggReplayed]) -> list[str]:
    """``validate-note`` lines naming the replayed rows that ran with recorded launch flags, by mode and script."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for item in replayed:
        launch = LAUNCHES.get(item.engine)
        if launch is not None:
            counts["agg", launch.script, _describe_flags(launch)] += 1
    for d in disagg:
        flags = [LAUNCHES.get(role.steps) for role in d.roles or ()]
        recorded = [f for f in flags if f is not None]
        if recorded:
            named = zip(("prefill", "decode"), flags, strict=True)
            roles = "; ".join(f"{name}: {_describe_flags(f)}" for name, f in named if f)
            counts["disagg", recorded[0].script, roles] += 1
    return [
        f"validate-note dataset=silicon-sglang mode={mode} rows={n} launch_flags=recorded ({flags}) source={script}"
        for (mode, script, flags), n in sorted(counts.items())
    ]


def _describe_flags(launch: LaunchFlags) -> str:
    parts = [f"mem_fraction_static {launch.mem_fraction_static}", f"kv {launch.kv_cache_dtype}"]
    parts.append(f"chunked_prefill_size {launch.chunked_prefill_size}")
    if launch.layout is not None:
        parts.insert(0, "layout tp{} attention_dp{} moe_tp{} ep{} (the row records another)".format(*launch.layout))
    for name in ("max_prefill_tokens", "max_running_requests", "cuda_graph_max_bs", "max_total_tokens"):
        value = getattr(launch, name)
        if value is not None:
            parts.append(f"{name} {value}")
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None, help="only the first N SGLang rows (smoke runs)")
    parser.add_argument("--csv", type=Path, default=None, help="write every row's measured and simulated values")
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="also replay each SGLang row with the engine calibrated on the other rows of its deployment",
    )
    parser.add_argument(
        "--aic-estimate",
        action="store_true",
        help="also print aiconfigurator-core's own closed-form estimate of the same rows (silicon-sglang-aic-estimate)",
    )
    parser.add_argument(
        "--kv-dtype-from-scripts",
        action="store_true",
        help="FP8 KV where InferenceMAX's current launch scripts set it (a sensitivity, not the default reading)",
    )
    parser.add_argument(
        "--pool-source",
        choices=KV_POOL_SOURCES,
        default="sglang",
        help="every row's KV pool: SGLang's own derivation (default) or aiconfigurator-core's estimate",
    )
    parser.add_argument(
        "--modes",
        default="agg,disagg",
        help="which silicon-sglang rows to replay: agg, disagg or both (default agg,disagg)",
    )
    parser.add_argument(
        "--world-step-overhead",
        action="store_true",
        help="add the rollout world's per-step framework seconds to every step (datasets …-world-overhead)",
    )
    parser.add_argument(
        "--silicon-only", action="store_true", help="skip the dynamo and llmservingsim datasets (faster iterations)"
    )
    parser.add_argument(
        "--models",
        default="",
        help="only the SGLang rows whose model_path contains one of these comma-separated strings (a slice)",
    )
    args = parser.parse_args(argv)
    args.modes = {m.strip() for m in args.modes.split(",") if m.strip()}
    if not args.modes <= {"agg", "disagg"}:
        parser.error(f"--modes: unknown mode(s) {sorted(args.modes - {'agg', 'disagg'})}; known: agg, disagg")
    global SCRIPT_KV_FP8, WORLD_STEP_OVERHEAD, DATASET_SUFFIX
    SCRIPT_KV_FP8 = args.kv_dtype_from_scripts
    set_pool_source(args.pool_source)
    WORLD_STEP_OVERHEAD = args.world_step_overhead
    DATASET_SUFFIX = "-world-overhead" if WORLD_STEP_OVERHEAD else ""
    if WORLD_STEP_OVERHEAD and (args.calibrate or args.aic_estimate):
        parser.error(
            "--world-step-overhead replaces the engine's calibration: run it without --calibrate/--aic-estimate"
        )
    logging.disable(logging.WARNING)  # aiconfigurator-core logs each low-fidelity table it loads
    start = time.perf_counter()
    csv_rows = sglang_silicon_rows()
    REPEATED_SOURCES.clear()
    REPEATED_SOURCES.update(repeated_sources(csv_rows))  # of the whole file: a repeat's twin may be sliced off
    repeats = set(REPEATED_SOURCES)
    csv_rows = csv_rows[: args.rows] if args.rows else csv_rows
    wanted = [m.strip() for m in args.models.split(",") if m.strip()]
    if wanted:
        csv_rows = [r for r in csv_rows if any(m in r["model_path"] for m in wanted)]
    cache: dict[tuple[object, ...], AicStepTimes | str] = {}
    replayed: list[Replayed] = []
    skipped: Counter[str] = Counter()
    source = ""
    if "agg" in args.modes:
        replayed, skipped, source = silicon_rows(csv_rows, cache, repeats)
    disagg: list[DisaggReplayed] = []
    if "disagg" in args.modes:
        disagg, disagg_skipped = disagg_rows(csv_rows, cache, repeats)
        skipped += disagg_skipped
    rows = [r.row for r in replayed] + [d.row for d in disagg]
    if args.calibrate:
        rows += calibrated_rows(replayed) + calibrated_disagg_rows(disagg)
    if args.aic_estimate:
        estimates, failed = aic_estimate_rows(replayed)
        rows += estimates
        if "disagg" in args.modes:
            decode_estimates, decode_failed = aic_decode_estimate_rows(csv_rows, cache, repeats)
            rows += decode_estimates
            failed += decode_failed
        for reason, n in failed.most_common():
            print(f"validate-coverage dataset=silicon-sglang-aic-estimate rows={n} not_run={reason}")
    print(f"validate-source dataset=silicon-sglang {source} (model/GPU/parallelism per row)")
    note = POOL_SOURCE_NOTES[POOL_SOURCE]
    print(f"validate-note dataset=silicon-sglang pool_source={POOL_SOURCE} ({note}; every row)")
    for harness in (INFERENCEMAX, UNRECORDED):
        n = sum(item.harness is harness for item in replayed)
        print(f"validate-harness dataset=silicon-sglang rows={n} harness={harness.name!r}")
    print(
        f"validate-note dataset=silicon-sglang rows={len(repeats)} gap-analysis rows that repeat an"
        " InferenceMAX measurement, replayed as InferenceMAX runs"
    )
    for line in launch_note_lines(replayed, disagg):
        print(line)
    corrected = sum(item.tp_corrected for item in replayed)
    print(f"validate-note dataset=silicon-sglang rows={corrected} tp_size recorded as TP x EP, read as TP")
    for reason, n in skipped.most_common():
        print(f"validate-coverage dataset=silicon-sglang rows={n} not_run={reason}")
    twins = sum(d.from_twin for d in disagg)
    print(
        f"validate-note dataset=silicon-sglang mode=disagg rows={twins} without worker counts, run with the deployment"
        " their twin row records (same measurement)"
    )
    recipes = sum(d.from_recipe for d in disagg)
    print(
        f"validate-note dataset=silicon-sglang mode=disagg rows={recipes} without worker counts or twin, run with the"
        " deployment of the one recorded recipe that ran their ISL / OSL / C"
    )
    done = len(replayed) + len(disagg)
    print(
        f"validate-rows dataset=silicon-sglang exist={done + sum(skipped.values())} replayed={done}"
        f" (agg {len(replayed)}, disagg {len(disagg)}) not_replayed={sum(skipped.values())}"
        " (reasons: the validate-coverage lines)"
    )
    print(unique_line(replayed))
    print(disagg_unique_line(disagg))
    if args.silicon_only:
        pass
    elif (DATA / "dynamo-h200-llama31-8b").is_dir():
        dyn, dyn_source = dynamo_rows()
        rows += dyn
        print(f"validate-source dataset=dynamo {dyn_source}")
    else:
        print(f"validate-coverage dataset=dynamo not_run=no data at {DATA / 'dynamo-h200-llama31-8b'}")
    if args.silicon_only:
        pass
    elif (DATA / "llmservingsim").is_dir():
        lss, lss_skipped, lss_source = llmservingsim_rows()
        rows += lss
        print(f"validate-source dataset=llmservingsim {lss_source}")
        for reason, n in lss_skipped.items():
            print(f"validate-coverage dataset=llmservingsim rows={n} not_run={reason}")
        runs = sum(r.dataset == "llmservingsim" for r in lss)
        print(
            f"validate-rows dataset=llmservingsim exist={runs + sum(lss_skipped.values())} runs replayed={runs}"
            f" ({sum(r.dataset == 'llmservingsim-requests' for r in lss)} requests)"
        )
    for line in mape_lines(rows) + total_lines(rows):
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
