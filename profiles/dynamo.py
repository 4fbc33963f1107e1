"""PEARL closed-form parameters fitted from an NVIDIA Dynamo ``profile_sla`` output.

The profile's CSV dumps give prefill TTFT against input length and decode inter-token latency against KV
usage and context. PEARL's model needs, per worker, a prefill cost per token ``t_p`` and a decode iteration
cost ``A + b·n`` for n running sequences. We fit, with non-negative least squares (scipy ``nnls``)::

    TTFT(isl)    = c + t_p · isl
    ITL(n, ctx)  = A + n · (b₀ + b₁ · ctx),   n = kv_usage · max_kv_tokens / ctx

and evaluate ``b = b₀ + b₁ · ctx`` at the workload's mean context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from pearl_sched.makespan import DeviceParams
from pearl_sched.profiles.dataset import ProfileFormatError
from pearl_sched.profiles.readers import csv_float, csv_rows


@dataclass(frozen=True)
class DynamoFit:
    """The fitted coefficients and the profile's KV capacity in tokens."""

    prefill_s_per_token: float
    prefill_constant_s: float
    decode_iteration_s: float
    decode_per_seq_s: float
    decode_per_seq_per_context_s: float
    max_kv_tokens: int

    def device(self, gpu_type: str, tp: int, *, context_tokens: float, kv_bytes_per_token: float) -> DeviceParams:
        """PEARL device parameters at a mean context length."""
        return DeviceParams(
            gpu_type=gpu_type,
            tp=tp,
            prefill_s_per_token=self.prefill_s_per_token,
            decode_iteration_s=self.decode_iteration_s,
            decode_per_seq_s=self.decode_per_seq_s + self.decode_per_seq_per_context_s * context_tokens,
            kv_capacity_bytes=self.max_kv_tokens * kv_bytes_per_token,
        )


# Largest plausible value of each column (as the dataset's PLAUSIBLE_MAX): a row over it is a corrupted or
# mis-scaled measurement, and least squares on 1e300 overflows.
_PLAUSIBLE_MAX = {
    "isl_tokens": 1e8,
    "ttft_ms": 86_400_000.0,
    "kv_usage_frac": 1.0,
    "context_length": 1e8,
    "itl_ms": 86_400_000.0,
    "max_kv_tokens": 1e12,
}


def _rows(path: Path, columns: tuple[str, ...]) -> list[tuple[float, ...]]:
    rows = []
    for line, record in csv_rows(path, columns):
        values = tuple(csv_float(path, line, record, c) for c in columns)
        if not all(math.isfinite(v) and v >= 0 for v in values):
            raise ProfileFormatError(path, f"negative or non-finite value in {columns}", row=line)
        over = next((c for c, v in zip(columns, values, strict=True) if v > _PLAUSIBLE_MAX[c]), None)
        if over is not None:
            raise ProfileFormatError(path, f"implausibly large (over {_PLAUSIBLE_MAX[over]:g})", row=line, column=over)
        rows.append(values)
    if len(rows) < 3:
        raise ProfileFormatError(path, f"need at least 3 rows to fit, found {len(rows)}")
    for i, column in enumerate(columns):
        if column != "kv_usage_frac" and not any(row[i] > 0 for row in rows):
            raise ProfileFormatError(path, "zero in every row: nothing to fit", column=column)
    return rows


def fit_dynamo_profile(directory: str | Path) -> DynamoFit:
    """Fit PEARL's per-worker coefficients from a Dynamo profile directory (its CSV dumps)."""
    directory = Path(directory)
    prefill = np.array(_rows(directory / "prefill_ttft_vs_isl.csv", ("isl_tokens", "ttft_ms")))
    (constant_ms, per_token_ms), _ = nnls(np.column_stack([np.ones(len(prefill)), prefill[:, 0]]), prefill[:, 1])
    decode = np.array(
        _rows(
            directory / "decode_itl_vs_kvusage_context.csv",
            ("kv_usage_frac", "context_length", "itl_ms", "max_kv_tokens"),
        )
    )
    usage, context, itl_ms, max_kv = decode.T
    if np.any(context <= 0):
        raise ProfileFormatError(directory / "decode_itl_vs_kvusage_context.csv", "context_length must be positive")
    sequences = usage * max_kv / context
    design = np.column_stack([np.ones(len(decode)), sequences, sequences * context])
    (a_ms, b0_ms, b1_ms), _ = nnls(design, itl_ms)
    return DynamoFit(
        prefill_s_per_token=float(per_token_ms) / 1e3,
        prefill_constant_s=float(constant_ms) / 1e3,
        decode_iteration_s=float(a_ms) / 1e3,
        decode_per_seq_s=float(b0_ms) / 1e3,
        decode_per_seq_per_context_s=float(b1_ms) / 1e3,
        max_kv_tokens=int(max_kv[0]),
    )
