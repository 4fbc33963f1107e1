"""Readers from measurement sources into a :class:`~pearl_sched.profiles.dataset.ProfileDataset`.

Each reader checks the structure of its input and raises :class:`ProfileFormatError` with the file, row and
column of the first problem; values that are present but unusable (NaN, negative) are dropped and counted.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from pearl_sched.input_files import MAX_PROFILE_BYTES, InputFileError, read_bytes, read_text
from pearl_sched.profiles.dataset import ProfileDataset, ProfileFormatError


def _read_text(path: Path) -> str:
    try:
        return read_text(path, limit_bytes=MAX_PROFILE_BYTES)
    except InputFileError as exc:
        raise ProfileFormatError(path, exc.problem, row=exc.row) from None


def csv_rows(path: Path, required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """The rows of a CSV file with their line numbers, after checking the header names ``required``."""
    reader = csv.DictReader(io.StringIO(_read_text(path), newline=""))
    try:
        fieldnames = reader.fieldnames or []
        missing = [c for c in required if c not in fieldnames]
        if missing:
            raise ProfileFormatError(path, f"missing columns {missing}", row=1)
        for record in reader:
            yield reader.line_num, record
    except csv.Error as exc:
        raise ProfileFormatError(path, _csv_problem(exc), row=reader.line_num + 1) from None


def _csv_problem(exc: csv.Error) -> str:
    if "field larger than field limit" in str(exc):
        return f"a field is longer than the csv module's limit of {csv.field_size_limit()} characters"
    return "not a well-formed CSV row"


def csv_float(path: Path, line: int, record: dict[str, str], column: str) -> float:
    """The number in ``record[column]`` (NaN when empty); a missing cell or text is a :class:`ProfileFormatError`."""
    raw = record.get(column)
    if raw is None:
        raise ProfileFormatError(path, "row is shorter than the header", row=line, column=column)
    try:
        return float(raw) if raw.strip() else math.nan
    except ValueError:
        raise ProfileFormatError(path, "not a number", row=line, column=column) from None


UNIT_MIX_FACTOR = 100.0
"""A configuration measured this many times slower than one at least as large in every feature (and no more
parallel) is taken as a row in other units: seconds against milliseconds differ by 1,000, while the worst such
inversion in the shipped measurements is 14× (splitwise, Llama-2-70B prefill on A100: a failed measurement the
fit's screening drops; Dynamo H200: none) (docs/reliability.md)."""

# +1: time grows with the feature; −1: time falls with it (more tensor parallelism). As the fit's screening.
_UNIT_FEATURES: dict[str, tuple[tuple[str, float], ...]] = {
    "prefill": (("tokens", 1.0), ("cached_tokens", 1.0), ("batch_size", 1.0), ("tp", -1.0)),
    "ttft": (("tokens", 1.0), ("cached_tokens", 1.0), ("batch_size", 1.0), ("tp", -1.0)),
    "decode_step": (("batch_size", 1.0), ("context_tokens", 1.0), ("tp", -1.0)),
    "itl": (("batch_size", 1.0), ("context_tokens", 1.0), ("tp", -1.0)),
}


def check_units(
    path: Path, records: Sequence[dict[str, object]], rows: Sequence[int], columns: Mapping[str, str]
) -> None:
    """Refuse a file whose rows mix units.

    Within each target of one (GPU, model) source, a row measured :data:`UNIT_MIX_FACTOR` times slower than a
    row that is no smaller in any feature cannot be the same unit: the message names both rows.

    Args:
        path: The file the records came from (for the message).
        records: The records read from it, in the dataset's columns.
        rows: The file row (or array index) of each record.
        columns: The file's column that became ``value_s``, per target (for the message).

    Raises:
        ProfileFormatError: Two rows differ by the factor the wrong way round.
    """
    by_group: dict[tuple[str, ...], list[int]] = {}
    for i, r in enumerate(records):
        by_group.setdefault((str(r["target"]), str(r["gpu_type"]), str(r["model"])), []).append(i)
    for (target, *_), members in by_group.items():
        features = _UNIT_FEATURES[target]
        values = np.array([_finite_or_nan(records[i]["value_s"]) for i in members])
        signed = np.array(
            [[sign * _finite_or_zero(records[i][name]) for name, sign in features] for i in members]
        ).reshape(len(members), len(features))
        usable = np.isfinite(values) & (values > 0) & np.all(np.isfinite(signed), axis=1)
        index = np.flatnonzero(usable)
        if not len(index):
            continue
        # Compare configurations, not rows: the slowest row of each against the fastest of every larger one.
        configs, inverse = np.unique(signed[index], axis=0, return_inverse=True)
        inverse = inverse.ravel()
        slowest = np.full(len(configs), -1)
        fastest = np.full(len(configs), -1)
        for position, config in enumerate(inverse):
            row = index[position]
            if slowest[config] < 0 or values[row] > values[slowest[config]]:
                slowest[config] = row
            if fastest[config] < 0 or values[row] < values[fastest[config]]:
                fastest[config] = row
        for c in range(len(configs)):
            j = slowest[c]
            larger = np.all(configs >= configs[c], axis=1) & (values[fastest] * UNIT_MIX_FACTOR <= values[j])
            if larger.any():
                k = fastest[int(np.flatnonzero(larger)[0])]
                raise ProfileFormatError(
                    path,
                    f"{target} row {rows[members[j]]} is {values[j] / values[k]:.0f}× slower than row "
                    f"{rows[members[k]]}, which is no smaller in any feature: rows in mixed units "
                    "(seconds and milliseconds)?",
                    column=columns.get(target),
                )


def _finite_or_nan(value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan


def _finite_or_zero(value: object) -> float:
    number = _finite_or_nan(value)
    return 0.0 if math.isnan(number) else number  # an unknown feature counts as none, as in the fit


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
    records: list[dict[str, object]] = []
    rows: list[int] = []
    for line, r in csv_rows(path, columns):
        rows += [line, line]
        prompt, batch, generated, tp = (
            csv_float(path, line, r, c) for c in ("prompt_size", "batch_size", "token_size", "tensor_parallel")
        )
        base = {"source": "splitwise", "gpu_type": r["hardware"], "model": r["model"], "tp": tp, "batch_size": batch}
        records.append(
            {
                **base,
                "target": "prefill",
                "tokens": prompt,
                "cached_tokens": 0.0,
                "context_tokens": prompt,
                "value_s": csv_float(path, line, r, "prompt_time") / 1e3,
            }
        )
        records.append(
            {
                **base,
                "target": "decode_step",
                "tokens": 1.0,
                "cached_tokens": prompt + generated / 2,
                "context_tokens": prompt + generated / 2,
                "value_s": csv_float(path, line, r, "token_time") / 1e3,
            }
        )
    check_units(path, records, rows, {"prefill": "prompt_time", "decode_step": "token_time"})
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
    rows: list[int] = []
    if prefill_csv.exists() and decode_csv.exists():
        for line, r in csv_rows(prefill_csv, ("isl_tokens", "ttft_ms")):
            isl = csv_float(prefill_csv, line, r, "isl_tokens")
            records.append(
                {
                    **base,
                    "target": "ttft",
                    "tokens": isl,
                    "batch_size": 1.0,
                    "context_tokens": isl,
                    "value_s": csv_float(prefill_csv, line, r, "ttft_ms") / 1e3,
                }
            )
            rows.append(line)
        check_units(prefill_csv, records, rows, {"ttft": "ttft_ms"})
        decode_records: list[dict[str, object]] = []
        rows = []
        for line, r in csv_rows(decode_csv, ("kv_usage_frac", "context_length", "itl_ms", "max_kv_tokens")):
            usage, context, itl, max_kv = (
                csv_float(decode_csv, line, r, c)
                for c in ("kv_usage_frac", "context_length", "itl_ms", "max_kv_tokens")
            )
            decode_records.append(_dynamo_decode(base, usage, context, itl, max_kv))
            rows.append(line)
        check_units(decode_csv, decode_records, rows, {"itl": "itl_ms"})
        return ProfileDataset.from_records(records + decode_records)
    if prefill_csv.exists() != decode_csv.exists():
        missing = decode_csv if prefill_csv.exists() else prefill_csv
        raise ProfileFormatError(missing, "missing: a Dynamo profile's CSV dumps come in a pair")
    prefill_npz = directory / "selected_prefill_interpolation" / "raw_data.npz"
    decode_npz = directory / "selected_decode_interpolation" / "raw_data.npz"
    prefill = _npz(prefill_npz, ("prefill_isl", "prefill_ttft"))
    _same_length(prefill_npz, prefill, ("prefill_isl", "prefill_ttft"))
    decode = _npz(decode_npz, ("x_kv_usage", "y_context_length", "z_itl", "max_kv_tokens"))
    _same_length(decode_npz, decode, ("x_kv_usage", "y_context_length", "z_itl"))
    if len(decode["max_kv_tokens"]) == 0:
        raise ProfileFormatError(decode_npz, "array max_kv_tokens is empty", column="max_kv_tokens")
    for isl, ttft in zip(prefill["prefill_isl"], prefill["prefill_ttft"], strict=True):
        records.append(
            {**base, "target": "ttft", "tokens": isl, "batch_size": 1.0, "context_tokens": isl, "value_s": ttft / 1e3}
        )
    check_units(prefill_npz, records, range(len(records)), {"ttft": "prefill_ttft"})
    max_kv = float(decode["max_kv_tokens"][0])
    decode_records = [
        _dynamo_decode(base, float(usage), float(context), float(itl), max_kv)
        for usage, context, itl in zip(decode["x_kv_usage"], decode["y_context_length"], decode["z_itl"], strict=True)
    ]
    check_units(decode_npz, decode_records, range(len(decode_records)), {"itl": "z_itl"})
    return ProfileDataset.from_records(records + decode_records)


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
    """The named arrays of an ``.npz`` archive, each flattened to one dimension of finite-or-NaN floats."""
    try:
        raw = read_bytes(path, limit_bytes=MAX_PROFILE_BYTES)
    except InputFileError as exc:
        raise ProfileFormatError(path, exc.problem) from None
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as data:
            missing = [k for k in keys if k not in data.files]
            if missing:
                raise ProfileFormatError(path, f"missing arrays {missing}")
            arrays = {k: np.asarray(data[k], dtype=float) for k in keys}
    except ProfileFormatError:
        raise
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise ProfileFormatError(
            path, f"not a readable npz archive (truncated or damaged: {type(exc).__name__})"
        ) from None
    except (ValueError, TypeError, KeyError):
        raise ProfileFormatError(path, "not a numeric npz archive (an array holds objects or text)") from None
    for key, array in arrays.items():
        if array.ndim > 1 and sum(n > 1 for n in array.shape) > 1:
            raise ProfileFormatError(path, f"array {key} has shape {array.shape}; expected one dimension", column=key)
        arrays[key] = array.reshape(-1)
    return arrays


def _same_length(path: Path, arrays: dict[str, NDArray[np.float64]], keys: Sequence[str]) -> None:
    lengths = {k: len(arrays[k]) for k in keys}
    if len(set(lengths.values())) > 1:
        raise ProfileFormatError(path, f"arrays of different lengths {lengths}: a mismatched or truncated archive")


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
    for line, text in enumerate(_read_text(path).splitlines(), start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ProfileFormatError(path, f"not JSON: {exc.msg}", row=line) from None
        except RecursionError:
            raise ProfileFormatError(path, "JSON nested too deeply", row=line) from None
        except ValueError:  # an integer of more than 4,300 digits
            raise ProfileFormatError(path, "not JSON: a number too long to read", row=line) from None
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
            if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int | float)):
                raise ProfileFormatError(path, f"not a number (a JSON {_json_kind(raw)})", row=line, column=key)
            try:
                values[key] = math.nan if raw is None else float(raw)
            except OverflowError:
                raise ProfileFormatError(path, "number too large for a float", row=line, column=key) from None
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


def _json_kind(value: object) -> str:
    kinds = ((bool, "boolean"), (str, "string"), (list, "array"), (dict, "object"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "value")


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
        text = _read_text(path)
        values: dict[str, float] = {}
        try:
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
        except (ValueError, TypeError, IndexError, KeyError):  # the parser's messages quote the line: not echoed
            raise ProfileFormatError(path, "not Prometheus text exposition format") from None
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
    """Read a profile source, recognising its kind.

    The kinds recognised are:

    - a directory with Dynamo's ``prefill_ttft_vs_isl.csv`` (or ``selected_*_interpolation/raw_data.npz``);
    - a directory of Prometheus scrapes (``*.prom`` or ``*.txt``, read in name order);
    - a splitwise-style CSV (its header names ``prompt_time`` and ``token_time``);
    - an SGLang request log (``*.jsonl``).

    ``gpu_type``, ``model`` and ``tp`` label sources that do not name them (SGLang logs, scrapes, Dynamo).

    Raises:
        ProfileFormatError: When the source is none of these kinds, or its reader finds it malformed; the
            message names the file (and row where there is one).
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
        header = _read_text(path).partition("\n")[0]
        if "prompt_time" in header and "token_time" in header:
            return read_splitwise(path)
        raise ProfileFormatError(path, "unrecognised CSV: expected splitwise columns (prompt_time, token_time)", row=1)
    raise ProfileFormatError(
        path, "unrecognised profile source (a Dynamo directory, scrapes directory, .csv or .jsonl)"
    )
