"""Prefill and decode step times of any dense or MoE model at any TP, composed from kernel tables.

NVIDIA aiconfigurator measured SGLang's kernels on H100 and H200 (``../shared/data/aiconfigurator-sglang``):
GEMMs over (m, n, k), context and generation attention over (batch, length) per head layout, custom
all-reduce over message size, fused MoE over tokens per expert layout. :class:`KernelTables` interpolates
them in log–log space (``scipy.interpolate.RegularGridInterpolator``; the missing corner of the attention
tables — long sequences at large batch — is filled by scaling linearly in batch from the largest measured
batch, since attention there is compute-bound). :class:`ComposedStepModel` walks a model's layers, as
aiconfigurator does, bottom up:

    per layer: QKV GEMM → attention → O GEMM → all-reduce → MLP (two GEMMs) or fused MoE → all-reduce
    then the LM head for the last token of each sequence

Prefill attention over a cached prefix of C tokens with L new ones costs attention(C + L) − attention(C).
The framework around the kernels (scheduling, sampling, the HTTP path of a TTFT) is one fixed cost per step,
zero unless calibrated from a single measurement (:meth:`ComposedStepModel.calibrated`);
``bench/fit_accuracy.py`` prints the error against measured runs, raw and calibrated on one point.
"""

from __future__ import annotations

import bisect
import csv
import functools
import gzip
import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from pearl_sched.errors import UnknownModelError
from pearl_sched.profiles.dataset import ProfileFormatError
from pearl_sched.profiles.model_config import ModelConfig

_FILES = {
    "gemm": "gemm_perf.csv.gz",
    "context": "context_attention_perf.csv.gz",
    "generation": "generation_attention_perf.csv.gz",
    "allreduce": "custom_allreduce_perf.csv.gz",
    "moe": "moe_perf.csv.gz",
}


def _rows(path: Path, keep: Callable[[dict[str, str]], bool]) -> Iterable[dict[str, str]]:
    try:
        with gzip.open(path, "rt", newline="") as handle:
            yield from (r for r in csv.DictReader(handle) if keep(r))
    except OSError as exc:
        raise ProfileFormatError(path, f"cannot read kernel table: {exc}") from exc


class _LogGrid:
    """Log–log multilinear interpolation over a full grid, linear extrapolation outside it.

    The same result as ``scipy.interpolate.RegularGridInterpolator(..., fill_value=None)`` on the logs, in
    plain Python for one point at a time: the simulator asks for single points ~10⁵ times, where scipy's
    per-call overhead dominated.
    """

    def __init__(self, axes: list[NDArray[np.float64]], values: NDArray[np.float64]) -> None:
        if np.isnan(values).any():
            raise ValueError("grid has holes")
        self._axes = [np.log(a).tolist() for a in axes]
        self._values = np.log(values).ravel().tolist()
        self._strides = [int(s // values.itemsize) for s in values.strides]
        self._corners = list(itertools.product((0, 1), repeat=len(axes)))

    def __call__(self, *point: float) -> float:
        base = 0
        cells: list[tuple[int, float]] = []
        for axis, stride, x in zip(self._axes, self._strides, point, strict=True):
            lx = math.log(max(x, 1e-9))
            if len(axis) == 1:
                cells.append((0, 0.0))
                continue
            i = min(max(bisect.bisect_right(axis, lx) - 1, 0), len(axis) - 2)
            base += i * stride
            cells.append((stride, (lx - axis[i]) / (axis[i + 1] - axis[i])))
        total = 0.0
        for corner in self._corners:
            weight = 1.0
            offset = base
            for bit, (stride, t) in zip(corner, cells, strict=True):
                if bit:
                    if stride == 0:
                        weight = 0.0
                        break
                    weight *= t
                    offset += stride
                else:
                    weight *= 1.0 - t
            if weight:
                total += weight * self._values[offset]
        return math.exp(total)


def _grid(points: dict[tuple[float, ...], list[float]]) -> tuple[list[NDArray[np.float64]], NDArray[np.float64]]:
    dims = len(next(iter(points)))
    axes = [np.array(sorted({p[d] for p in points})) for d in range(dims)]
    values = np.full([len(a) for a in axes], np.nan)
    for p, latencies in points.items():
        values[tuple(int(np.searchsorted(axes[d], p[d])) for d in range(dims))] = min(latencies)
    return axes, values


@dataclass(frozen=True)
class AttentionLayout:
    """Heads per GPU (after tensor parallelism)."""

    heads: int
    kv_heads: int
    head_dim: int


class KernelTables:
    """The aiconfigurator SGLang tables of one system (e.g. ``h200_sxm``), interpolated.

    Tables are read lazily, each the first time a kernel of its kind is asked for, and cached per layout.
    """

    def __init__(self, directory: str | Path, *, gemm_dtype: str = "bfloat16", kv_dtype: str = "bfloat16") -> None:
        """Open one system's table directory; the tables themselves are read on first use.

        Args:
            directory: One system's directory of aiconfigurator SGLang tables (e.g.
                ``aiconfigurator-sglang/h200_sxm``), holding the GEMM, attention, all-reduce and MoE tables.
            gemm_dtype: Precision of the GEMM rows to use (the tables' ``gemm_dtype`` column).
            kv_dtype: Precision of the KV cache in the attention rows to use.

        Raises:
            ProfileFormatError: When any of the five table files is missing from ``directory``.
        """
        self.directory = Path(directory)
        missing = [f for f in _FILES.values() if not (self.directory / f).exists()]
        if missing:
            raise ProfileFormatError(self.directory, f"not an aiconfigurator table directory: missing {missing}")
        self.gemm_dtype = gemm_dtype
        self.kv_dtype = kv_dtype

    @functools.cached_property
    def _gemm(self) -> _LogGrid:
        points: dict[tuple[float, ...], list[float]] = defaultdict(list)
        for r in _rows(self.directory / _FILES["gemm"], lambda r: r["gemm_dtype"] == self.gemm_dtype):
            points[(float(r["m"]), float(r["n"]), float(r["k"]))].append(float(r["latency"]))
        if not points:
            raise ProfileFormatError(self.directory / _FILES["gemm"], f"no GEMM rows of dtype {self.gemm_dtype!r}")
        axes, values = _grid(points)
        # A few (n, k) pairs are missing: take the nearest measured k for the same (m, n).
        for i, j in zip(*np.nonzero(np.isnan(values).any(axis=2)), strict=True):
            row = values[i, j]
            known = np.flatnonzero(~np.isnan(row))
            if len(known):
                row[np.isnan(row)] = np.interp(np.flatnonzero(np.isnan(row)), known, row[known])
        values = np.where(np.isnan(values), np.nanmax(values), values)
        return _LogGrid(axes, values)

    def gemm_s(self, m: float, n: float, k: float) -> float:
        """Seconds of an (m × k) · (k × n) GEMM."""
        return self._gemm(m, n, k) / 1e3

    @functools.lru_cache(maxsize=64)  # noqa: B019 - one table object per system; bounded
    def _attention(self, table: str, layout: AttentionLayout) -> _LogGrid:
        length = "isl" if table == "context" else "step"

        def keep(r: dict[str, str]) -> bool:
            return (
                int(r["num_heads"]) == layout.heads
                and int(r["num_key_value_heads"]) == layout.kv_heads
                and int(r["head_dim"]) == layout.head_dim
                and r["window_size"] == "0"
                and r["kv_cache_dtype"] == self.kv_dtype
                and r["attn_dtype"] == "bfloat16"
            )

        points: dict[tuple[float, ...], list[float]] = defaultdict(list)
        for r in _rows(self.directory / _FILES[table], keep):
            points[(float(r["batch_size"]), float(r[length]))].append(float(r["latency"]))
        if not points:
            raise ProfileFormatError(
                self.directory / _FILES[table], f"no {table} attention rows for {layout} with KV {self.kv_dtype}"
            )
        axes, values = _grid(points)
        batches = axes[0]
        for j in range(values.shape[1]):  # fill large batches from the largest measured one, linearly in batch
            column = values[:, j]
            known = np.flatnonzero(~np.isnan(column))
            if len(known) == 0:
                continue
            top = known[-1]
            column[top + 1 :] = column[top] * batches[top + 1 :] / batches[top]
            column[: known[0]] = column[known[0]]
        values = _fill_columns(values)
        return _LogGrid(axes, values)

    def context_attention_s(self, batch: float, length: float, layout: AttentionLayout) -> float:
        """Seconds of causal prefill attention over ``length`` tokens for ``batch`` sequences."""
        return self._attention("context", layout)(batch, max(length, 1.0)) / 1e3

    def generation_attention_s(self, batch: float, kv_length: float, layout: AttentionLayout) -> float:
        """Seconds of one decode step's attention for ``batch`` sequences of ``kv_length`` cached tokens."""
        return self._attention("generation", layout)(batch, max(kv_length, 1.0)) / 1e3

    @functools.lru_cache(maxsize=16)  # noqa: B019
    def _allreduce(self, gpus: int, backend: str) -> _LogGrid:
        points: dict[tuple[float, ...], list[float]] = defaultdict(list)
        for r in _rows(
            self.directory / _FILES["allreduce"], lambda r: int(r["num_gpus"]) == gpus and r["backend"] == backend
        ):
            points[(float(r["message_size"]),)].append(float(r["latency"]))
        if not points:
            raise ProfileFormatError(self.directory / _FILES["allreduce"], f"no all-reduce rows for {gpus} GPUs")
        return _LogGrid(*_grid(points))

    def allreduce_s(self, gpus: int, message_bytes: float, *, graph: bool) -> float:
        """Seconds of an all-reduce of ``message_bytes`` over ``gpus`` GPUs (CUDA-graph or eager kernel)."""
        if gpus <= 1:
            return 0.0
        return self._allreduce(gpus, "sglang_graph" if graph else "sglang_eager")(message_bytes) / 1e3

    @functools.lru_cache(maxsize=16)  # noqa: B019
    def _moe(self, hidden: int, inter: int, topk: int, experts: int, tp: int, ep: int) -> _LogGrid:
        def keep(r: dict[str, str]) -> bool:
            return (
                int(r["hidden_size"]) == hidden
                and int(r["inter_size"]) == inter
                and int(r["topk"]) == topk
                and int(r["num_experts"]) == experts
                and int(r["moe_tp_size"]) == tp
                and int(r["moe_ep_size"]) == ep
                and r["moe_dtype"] == ("bfloat16" if self.gemm_dtype == "bfloat16" else "fp8_block")
                and r["distribution"] == "balanced"
            )

        points: dict[tuple[float, ...], list[float]] = defaultdict(list)
        for r in _rows(self.directory / _FILES["moe"], keep):
            points[(float(r["num_tokens"]),)].append(float(r["latency"]))
        if not points:
            raise ProfileFormatError(
                self.directory / _FILES["moe"],
                f"no MoE rows for hidden {hidden}, inter {inter}, top-{topk} of {experts}, TP{tp} EP{ep}",
            )
        return _LogGrid(*_grid(points))

    def moe_s(self, tokens: float, hidden: int, inter: int, topk: int, experts: int, tp: int, ep: int = 1) -> float:
        """Seconds of a fused MoE layer over ``tokens`` tokens."""
        return self._moe(hidden, inter, topk, experts, tp, ep)(max(tokens, 1.0)) / 1e3


def _fill_columns(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """Fill what is still missing along the length axis by the nearest measured length (log-linear)."""
    for i in range(values.shape[0]):
        row = values[i]
        known = np.flatnonzero(~np.isnan(row))
        if len(known) and len(known) < len(row):
            row[np.isnan(row)] = np.exp(np.interp(np.flatnonzero(np.isnan(row)), known, np.log(row[known])))
    return values


class ComposedStepModel:
    """Prefill and decode step times of one model at one TP degree on one system, from kernel tables."""

    def __init__(
        self,
        config: ModelConfig,
        tables: KernelTables,
        tp: int,
        *,
        prefill_overhead_s: float = 0.0,
        decode_overhead_s: float = 0.0,
    ) -> None:
        """Compose one model at one tensor-parallel degree from the system's kernel tables.

        Args:
            config: The model's architecture (layers, heads, hidden and MoE sizes).
            tables: The kernel tables of the system it runs on.
            tp: Tensor-parallel degree; must divide the number of attention heads.
            prefill_overhead_s: Fixed framework cost added to every prefill step, seconds (see :meth:`calibrated`).
            decode_overhead_s: Fixed framework cost added to every decode step, seconds.

        Raises:
            ValueError: When ``tp`` does not divide the model's attention heads.
        """
        if config.num_attention_heads % tp:
            raise ValueError(f"{config.name}: {config.num_attention_heads} heads do not split over TP{tp}")
        self.config = config
        self.tables = tables
        self.tp = tp
        self.prefill_overhead_s = prefill_overhead_s
        self.decode_overhead_s = decode_overhead_s
        self.layout = AttentionLayout(
            heads=config.num_attention_heads // tp,
            kv_heads=max(1, config.num_key_value_heads // tp),
            head_dim=config.head_dim,
        )

    def _layers_s(self, tokens: float, attention_s: float, *, graph: bool) -> float:
        c, t, tp = self.config, self.tables, self.tp
        qkv = t.gemm_s(tokens, (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim / tp, c.hidden_size)
        out = t.gemm_s(tokens, c.hidden_size, c.num_attention_heads * c.head_dim / tp)
        reduce = 2 * t.allreduce_s(tp, tokens * c.hidden_size * 2, graph=graph)
        if c.num_experts:
            mlp = t.moe_s(tokens, c.hidden_size, c.moe_intermediate_size, c.num_experts_per_tok, c.num_experts, tp)
        else:
            mlp = t.gemm_s(tokens, 2 * c.intermediate_size / tp, c.hidden_size)
            mlp += t.gemm_s(tokens, c.hidden_size, c.intermediate_size / tp)
        return c.num_hidden_layers * (qkv + attention_s + out + reduce + mlp)

    def prefill_s(self, new_tokens: float, batch: float = 1.0, cached_tokens: float = 0.0) -> float:
        """One prefill forward of ``batch`` sequences with ``new_tokens`` each after ``cached_tokens``."""
        if new_tokens <= 0 or batch <= 0:
            raise ValueError("a prefill needs new_tokens > 0 and batch > 0")
        t = self.tables
        attention = t.context_attention_s(batch, cached_tokens + new_tokens, self.layout)
        if cached_tokens > 0:
            attention = max(attention - t.context_attention_s(batch, cached_tokens, self.layout), 0.0)
        layers = self._layers_s(new_tokens * batch, attention, graph=False)
        head = t.gemm_s(batch, self.config.vocab_size / self.tp, self.config.hidden_size)
        return layers + head + self.prefill_overhead_s

    def decode_s(self, batch: float, context_tokens: float) -> float:
        """One decode iteration of ``batch`` sequences whose mean context is ``context_tokens``."""
        if batch <= 0:
            raise ValueError("a decode step needs batch > 0")
        t = self.tables
        attention = t.generation_attention_s(batch, context_tokens, self.layout)
        layers = self._layers_s(batch, attention, graph=True)
        head = t.gemm_s(batch, self.config.vocab_size / self.tp, self.config.hidden_size)
        return layers + head + self.decode_overhead_s

    def calibrated(
        self, *, prefill: tuple[float, float] | None = None, decode: tuple[float, float, float] | None = None
    ) -> ComposedStepModel:
        """The same model with the framework's fixed cost per step set from one measurement each.

        The kernels leave out scheduling, sampling and (for TTFT) the HTTP and tokenizer path; one point each pins
        that down, and the remaining points stay a validation. A measurement faster than the kernels alone gives
        an overhead of zero, never a negative one.

        Args:
            prefill: ``(new_tokens, measured_s)`` for a single-sequence prefill (e.g. the shortest TTFT
                measured); ``None`` keeps the current prefill overhead.
            decode: ``(batch, context_tokens, measured_s)`` for one decode iteration (e.g. ITL at batch 1);
                ``None`` keeps the current decode overhead.
        """
        base = ComposedStepModel(self.config, self.tables, self.tp)
        return ComposedStepModel(
            self.config,
            self.tables,
            self.tp,
            prefill_overhead_s=max(0.0, prefill[1] - base.prefill_s(prefill[0]))
            if prefill
            else self.prefill_overhead_s,
            decode_overhead_s=max(0.0, decode[2] - base.decode_s(decode[0], decode[1]))
            if decode
            else self.decode_overhead_s,
        )


def shipped_config(name: str) -> ModelConfig:
    """A model config shipped with pearl_sched.

    The shipped configs are ``qwen3-8b``, ``qwen3-30b-a3b``, ``qwen3-32b`` and ``llama-3.1-8b`` (published
    config.json values, kept in NVIDIA aiconfigurator, Apache-2.0).

    Raises:
        UnknownModelError: When ``name`` is not a shipped config; the message lists the known ones.
    """
    path = Path(__file__).resolve().parent / "configs" / f"{name}.json"
    if not path.exists():
        known = sorted(p.stem for p in path.parent.glob("*.json"))
        raise UnknownModelError(f"no shipped config {name!r}; known: {', '.join(known)}")
    return ModelConfig.from_json(path, name=name)


def composed_mape(predicted: Iterable[float], measured: Iterable[float]) -> float:
    """Mean absolute percentage error, in percent."""
    pairs = [(p, m) for p, m in zip(predicted, measured, strict=True) if m > 0 and math.isfinite(p)]
    return 100.0 * sum(abs(p - m) / m for p, m in pairs) / len(pairs) if pairs else float("nan")
