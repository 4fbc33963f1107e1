"""Readers from measurement sources into a :class:`~pearl_sched.profiles.dataset.ProfileDataset`.

Each reader checks the structure of its input and raises :class:`ProfileFormatError` with the file, row and
column of the first problem; values that are present but unusable (NaN, negative) are dropped and counted.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from pearl_sched.profiles.dataset import ProfileDataset, ProfileFormatError


def _csv_rows(path: Path, required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        handle = path.open(newline="")
    except OSError as exc:
        raise ProfileFormatError(path, f"cannot read: {exc.strerror or exc}") from exc
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise ProfileFormatError(path, f"missing columns {missing}", row=1)
        yield from enumerate(reader, start=2)


def _float(path: Path, line: int, record: dict[str, str], column: str) -> float:
    raw = record.get(column)
    if raw is None:
        raise ProfileFormatError(path, "row is shorter than the header", row=line, column=column)
    try:
        return float(raw) if raw.strip() else math.nan
    except ValueError:
        raise ProfileFormatError(path, f"not a number: {raw!r}", row=line, column=column) from None


def read_splitwise(path: str | Path) -> ProfileDataset:
    """splitwise-sim ``perf_model.csv``: whole-batch prompt time and per-iteration token time (milliseconds).

    Prompt rows become ``prefill`` rows (``batch_size`` sequences of ``prompt_size`` tokens); token rows become
    ``decode_step`` rows whose mean context is the prompt plus half the generated tokens.
    """
    path = Path(path)
    columns = (
        "model",
        "hardware",
        "prompt_size",
        "batch_size",
        "token_size",
        "prompt_time",
        "token_time",
        "tensor_parallel",
    )
    records = []
    for line, r in _csv_rows(path, columns):
        prompt, batch, generated, tp = (
            _float(path, line, r, c) for c in ("prompt_size", "batch_size", "token_size", "tensor_parallel")
        )
        base = {"source": "splitwise", "gpu_type": r["hardware"], "model": r["model"], "tp": tp, "batch_size": batch}
        records.append(
            {
                **base,
                "target": "prefill",
                "tokens": prompt,
                "cached_tokens": 0.0,
                "context_tokens": prompt,
                "value_s": _float(path, line, r, "prompt_time") / 1e3,
            }
        )
        records.append(
            {
                **base,
                "target": "decode_step",
                "tokens": 1.0,
                "cached_tokens": prompt + generated / 2,
                "context_tokens": prompt + generated / 2,
                "value_s": _float(path, line, r, "token_time") / 1e3,
            }
        )
    return ProfileDataset.from_records(records)


def read_dynamo(
    directory: str | Path, *, gpu_type: str = "h200", model: str = "llama-3.1-8b", tp: int = 1
) -> ProfileDataset:
    """An NVIDIA Dynamo ``profile_sla`` output: its CSV dumps, or the ``raw_data.npz`` files when no CSV is there.

    Prefill points become ``ttft`` rows (one request of ``isl`` tokens); decode points become ``itl`` rows with
    ``batch_size = kv_usage · max_kv_tokens / context`` concurrent sequences.
    """
    directory = Path(directory)
    prefill_csv = directory / "prefill_ttft_vs_isl.csv"
    decode_csv = directory / "decode_itl_vs_kvusage_context.csv"
    base = {"source": "dynamo", "gpu_type": gpu_type, "model": model, "tp": float(tp), "cached_tokens": 0.0}
    records: list[dict[str, object]] = []
    if prefill_csv.exists() and decode_csv.exists():
        for line, r in _csv_rows(prefill_csv, ("isl_tokens", "ttft_ms")):
            isl = _float(prefill_csv, line, r, "isl_tokens")
            records.append(
                {
                    **base,
                    "target": "ttft",
                    "tokens": isl,
                    "batch_size": 1.0,
                    "context_tokens": isl,
                    "value_s": _float(prefill_csv, line, r, "ttft_ms") / 1e3,
                }
            )
        for line, r in _csv_rows(decode_csv, ("kv_usage_frac", "context_length", "itl_ms", "max_kv_tokens")):
            usage, context, itl, max_kv = (
                _float(decode_csv, line, r, c) for c in ("kv_usage_frac", "context_length", "itl_ms", "max_kv_tokens")
            )
            records.append(_dynamo_decode(base, usage, context, itl, max_kv))
        return ProfileDataset.from_records(records)
    prefill_npz = directory / "selected_prefill_interpolation" / "raw_data.npz"
    decode_npz = directory / "selected_decode_interpolation" / "raw_data.npz"
    prefill = _npz(prefill_npz, ("prefill_isl", "prefill_ttft"))
    decode = _npz(decode_npz, ("x_kv_usage", "y_context_length", "z_itl", "max_kv_tokens"))
    for isl, ttft in zip(prefill["prefill_isl"], prefill["prefill_ttft"], strict=True):
        records.append(
            {**base, "target": "ttft", "tokens": isl, "batch_size": 1.0, "context_tokens": isl, "value_s": ttft / 1e3}
        )
    max_kv = float(np.asarray(decode["max_kv_tokens"]).reshape(-1)[0])
    for usage, context, itl in zip(decode["x_kv_usage"], decode["y_context_length"], decode["z_itl"], strict=True):
        records.append(_dynamo_decode(base, float(usage), float(context), float(itl), max_kv))
    return ProfileDataset.from_records(records)


def _dynamo_decode(
    base: dict[str, object], usage: float, context: float, itl_ms: float, max_kv: float
) -> dict[str, object]:
    batch = usage * max_kv / context if context > 0 else math.nan
    return {
        **base,
        "target": "itl",
        "tokens": 1.0,
        "batch_size": batch,
        "context_tokens": context,
        "value_s": itl_ms / 1e3,
    }


def _npz(path: Path, keys: Sequence[str]) -> dict[str, NDArray[np.float64]]:
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = [k for k in keys if k not in data.files]
            if missing:
                raise ProfileFormatError(path, f"missing arrays {missing}")
            return {k: np.asarray(data[k], dtype=float) for k in keys}
    except OSError as exc:
        raise ProfileFormatError(path, f"cannot read: {exc}") from exc
    except ValueError as exc:
        raise ProfileFormatError(path, f"not a numeric npz file: {exc}") from exc


def read_sglang_requests(path: str | Path, *, gpu_type: str, model: str, tp: int) -> ProfileDataset:
    """SGLang ``/generate`` responses, one JSON object a line (the response, or its ``meta_info``).

    Uses ``prompt_tokens``, ``completion_tokens``, ``cached_tokens``, ``e2e_latency``, ``queue_time`` and
    ``first_token_latency`` (seconds, as SGLang reports them). Each request gives a ``ttft`` row (queueing
    removed, ``tokens`` = prompt − cached) and, with two or more generated tokens, an ``itl`` row
    ``(e2e − first_token) / (completion − 1)`` at mean context prompt + completion/2.
    """
    path = Path(path)
    base = {"source": "sglang", "gpu_type": gpu_type, "model": model, "tp": float(tp)}
    records: list[dict[str, object]] = []
    dropped: Counter[str] = Counter()
    try:
        handle = path.open()
    except OSError as exc:
        raise ProfileFormatError(path, f"cannot read: {exc.strerror or exc}") from exc
    with handle:
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ProfileFormatError(path, f"not JSON: {exc.msg}", row=line) from None
            meta = obj.get("meta_info", obj) if isinstance(obj, dict) else None
            if not isinstance(meta, dict):
                raise ProfileFormatError(path, "expected a JSON object with meta_info", row=line)
            values = {}
            for key in ("prompt_tokens", "completion_tokens", "e2e_latency"):
                if key not in meta:
                    raise ProfileFormatError(path, "missing field", row=line, column=key)
            for key in (
                "prompt_tokens",
                "completion_tokens",
                "cached_tokens",
                "e2e_latency",
                "queue_time",
                "first_token_latency",
            ):
                raw = meta.get(key, 0.0 if key in ("cached_tokens", "queue_time") else None)
                if raw is not None and not isinstance(raw, int | float):
                    raise ProfileFormatError(path, f"not a number: {raw!r}", row=line, column=key)
                values[key] = math.nan if raw is None else float(raw)
            prompt, completion, cached = values["prompt_tokens"], values["completion_tokens"], values["cached_tokens"]
            first = values["first_token_latency"]
            if math.isnan(first):
                dropped["ttft: no first_token_latency"] += 1
            else:
                records.append(
                    {
                        **base,
                        "target": "ttft",
                        "tokens": prompt - cached,
                        "cached_tokens": cached,
                        "batch_size": 1.0,
                        "context_tokens": prompt,
                        "value_s": first - values["queue_time"],
                    }
                )
                if completion >= 2:
                    records.append(
                        {
                            **base,
                            "target": "itl",
                            "tokens": 1.0,
                            "cached_tokens": prompt,
                            "batch_size": math.nan,
                            "context_tokens": prompt + completion / 2,
                            "value_s": (values["e2e_latency"] - first) / (completion - 1),
                        }
                    )
    return ProfileDataset.from_records(records, dropped=dropped)


_HISTOGRAMS = {"itl": "sglang:inter_token_latency_seconds", "ttft": "sglang:time_to_first_token_seconds"}


def read_prometheus_scrapes(paths: Sequence[str | Path], *, gpu_type: str, model: str, tp: int) -> ProfileDataset:
    """Consecutive SGLang ``/metrics`` scrapes (Prometheus text), parsed with ``prometheus_client.parser``.

    Between each pair of scrapes, the increase of a histogram's ``_sum`` over its ``_count`` is the window's
    mean: ``inter_token_latency_seconds`` gives an ``itl`` row, ``time_to_first_token_seconds`` a ``ttft``
    row. Concurrency is the mean of ``num_running_reqs`` at the two scrapes; prompt length is the increase of
    ``prompt_tokens_total`` per new request, generated length that of ``generation_tokens_total`` per finished
    request (context = prompt + generated/2). Windows without new observations are skipped; counter resets
    (a restarted server) are dropped and counted. Samples of one name are summed over their labels.
    """
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError as exc:
        from pearl_sched.errors import MissingExtraError

        raise MissingExtraError("prometheus-client", "client") from exc
    scrapes = []
    for path in map(Path, paths):
        try:
            text = path.read_text()
        except OSError as exc:
            raise ProfileFormatError(path, f"cannot read: {exc.strerror or exc}") from exc
        values: dict[str, float] = {}
        try:
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
        except (ValueError, TypeError) as exc:
            raise ProfileFormatError(path, f"not Prometheus text: {exc}") from None
        scrapes.append((path, values))
    base = {"source": "prometheus", "gpu_type": gpu_type, "model": model, "tp": float(tp), "cached_tokens": math.nan}
    records: list[dict[str, object]] = []
    dropped: Counter[str] = Counter()
    for (_, before), (path, after) in itertools.pairwise(scrapes):
        delta = {name: after[name] - before[name] for name in after.keys() & before.keys()}
        if any(delta.get(f"{m}_count", 0.0) < 0 for m in _HISTOGRAMS.values()):
            dropped["window: counter reset"] += 1
            continue
        requests = delta.get("sglang:time_to_first_token_seconds_count", 0.0)
        prompt = delta.get("sglang:prompt_tokens_total", math.nan) / requests if requests else math.nan
        finished = delta.get("sglang:e2e_request_latency_seconds_count", 0.0)
        generated = delta.get("sglang:generation_tokens_total", math.nan) / finished if finished else math.nan
        running = (before.get("sglang:num_running_reqs", math.nan) + after.get("sglang:num_running_reqs", math.nan)) / 2
        for target, metric in _HISTOGRAMS.items():
            if f"{metric}_sum" not in after or f"{metric}_count" not in after:
                raise ProfileFormatError(path, f"missing {metric}_sum/_count")
            count = delta.get(f"{metric}_count", 0.0)
            if count == 0:
                continue
            mean = delta[f"{metric}_sum"] / count
            if target == "ttft":
                records.append(
                    {
                        **base,
                        "target": "ttft",
                        "tokens": prompt,
                        "batch_size": running,
                        "context_tokens": prompt,
                        "value_s": mean,
                    }
                )
            else:
                records.append(
                    {
                        **base,
                        "target": "itl",
                        "tokens": 1.0,
                        "batch_size": running,
                        "context_tokens": prompt + generated / 2,
                        "value_s": mean,
                    }
                )
    return ProfileDataset.from_records(records, dropped=dropped)


def read_any(path: str | Path, *, gpu_type: str = "unknown", model: str = "unknown", tp: int = 1) -> ProfileDataset:
    """Read a profile source, recognising its kind:

    - a directory with Dynamo's ``prefill_ttft_vs_isl.csv`` (or ``selected_*_interpolation/raw_data.npz``);
    - a directory of Prometheus scrapes (``*.prom`` or ``*.txt``, read in name order);
    - a splitwise-style CSV (its header names ``prompt_time`` and ``token_time``);
    - an SGLang request log (``*.jsonl``).

    ``gpu_type``, ``model`` and ``tp`` label sources that do not name them (SGLang logs, scrapes, Dynamo).
    """
    path = Path(path)
    if path.is_dir():
        if (path / "prefill_ttft_vs_isl.csv").exists() or (path / "selected_prefill_interpolation").exists():
            return read_dynamo(path, gpu_type=gpu_type, model=model, tp=tp)
        scrapes = sorted([*path.glob("*.prom"), *path.glob("*.txt")])
        if scrapes:
            return read_prometheus_scrapes(scrapes, gpu_type=gpu_type, model=model, tp=tp)
        raise ProfileFormatError(path, "no Dynamo profile or Prometheus scrapes (*.prom, *.txt) in this directory")
    if path.suffix == ".jsonl":
        return read_sglang_requests(path, gpu_type=gpu_type, model=model, tp=tp)
    if path.suffix == ".csv":
        try:
            with path.open(newline="") as handle:
                header = handle.readline()
        except OSError as exc:
            raise ProfileFormatError(path, f"cannot read: {exc.strerror or exc}") from exc
        if "prompt_time" in header and "token_time" in header:
            return read_splitwise(path)
        raise ProfileFormatError(path, "unrecognised CSV: expected splitwise columns (prompt_time, token_time)", row=1)
    raise ProfileFormatError(
        path, "unrecognised profile source (a Dynamo directory, scrapes directory, .csv or .jsonl)"
    )
