"""From step-time models to the parameters of PEARL's closed form, so ``plan()`` runs on fitted profiles.

Any prefill and decode step-time function — a :class:`~pearl_sched.profiles.kernels.ComposedStepModel`, or
fitted component models — is sampled over the operating range and least-squares-fitted to PEARL's linear
forms (non-negative, ``scipy.optimize.nnls``)::

    prefill(new tokens L at context c)  ≈ t_p · L                 (per-token cost at the workload's context)
    decode(batch n at context c)        ≈ A + b · n

KV capacity is the GPU memory left after the weights, within SGLang's static memory fraction.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.optimize import nnls

from pearl_sched.makespan import DeviceParams
from pearl_sched.profiles.model_config import ModelConfig

# SGLang reserves --mem-fraction-static of GPU memory for weights and KV cache; the rest is activations, CUDA
# graphs and NCCL buffers. SGLang picks the fraction from GPU memory and TP when it is not given; 0.85 is our
# assumption — pass the value your servers run with.
DEFAULT_MEMORY_FRACTION = 0.85


def kv_capacity_bytes(
    config: ModelConfig,
    tp: int,
    gpu_memory_bytes: float,
    *,
    weight_bytes: int = 2,
    fraction: float = DEFAULT_MEMORY_FRACTION,
) -> float:
    """KV-cache bytes a TP group holds: its memory share minus its weights."""
    total = tp * gpu_memory_bytes * fraction - config.parameter_count() * weight_bytes
    if total <= 0:
        raise ValueError(f"{config.name} does not fit on {tp} GPU(s) of {gpu_memory_bytes / 2**30:.0f} GiB")
    return total


def fit_device(
    *,
    gpu_type: str,
    tp: int,
    prefill_s: Callable[[float, float], float],
    decode_s: Callable[[float, float], float],
    context_tokens: float,
    appended_tokens: float,
    max_batch: int,
    kv_capacity: float,
) -> DeviceParams:
    """PEARL device parameters fitted to step-time functions around a workload's operating point.

    ``prefill_s(new_tokens, cached_tokens)`` is sampled for appends of ¼–4× ``appended_tokens`` after
    ``context_tokens`` of cache; ``decode_s(batch, context)`` for batches 1..``max_batch`` at
    ``context_tokens``.
    """
    lengths = np.geomspace(max(1.0, appended_tokens / 4), max(2.0, appended_tokens * 4), 8)
    prefill = np.array([prefill_s(float(n), context_tokens) for n in lengths])
    (per_token,), _ = nnls(lengths[:, None], prefill)
    batches = np.unique(np.geomspace(1, max(2, max_batch), 10).round())
    decode = np.array([decode_s(float(n), context_tokens) for n in batches])
    (fixed, per_sequence), _ = nnls(np.column_stack([np.ones(len(batches)), batches]), decode)
    return DeviceParams(
        gpu_type=gpu_type,
        tp=tp,
        prefill_s_per_token=max(float(per_token), 1e-12),
        decode_iteration_s=float(fixed),
        decode_per_seq_s=max(float(per_sequence), 1e-12),
        kv_capacity_bytes=kv_capacity,
    )
