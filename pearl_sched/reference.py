"""A reference problem for tests, benches and examples: PEARL parameters and an agentic batch with cited numbers.

* H200: Llama-3.1-8B at TP1, fitted from NVIDIA Dynamo's H200 profile (``examples/make_examples.py`` refits it
  from the data; these are its values rounded), bf16 KV cache of 131,072 bytes per token.
* H100: the same device slowed by the H100/H200 memory-bandwidth ratio 3.35/4.8 (spec sheets), with 80 of the
  H200's 141 GB: made up from the H200 to exercise heterogeneous pools, never a measurement.
* P→D link: 50 GB/s per GPU, aiconfigurator's ``h200_sxm.yaml`` ``inter_node_bw``.
* The batch: tau-bench's means (docs/profiles.md): 1,024 trajectories (PEARL's batch 64 × group 16), 20 turns,
  151.4 appended and 84.7 generated tokens per turn, 10 s of environment per turn (RollArt).
"""

from __future__ import annotations

from pearl_sched.makespan import DeviceParams, PearlParams
from pearl_sched.state import Workload

H200 = DeviceParams(
    gpu_type="h200",
    tp=1,
    prefill_s_per_token=2.1975e-05,
    decode_iteration_s=0.00609,
    decode_per_seq_s=0.0001098,
    kv_capacity_bytes=945029 * 131072,
)
"""Llama-3.1-8B on one H200 (Dynamo profile fit, rounded)."""

H100 = DeviceParams(
    gpu_type="h100",
    tp=1,
    prefill_s_per_token=2.1975e-05 * 4.8 / 3.35,
    decode_iteration_s=0.00609,
    decode_per_seq_s=0.0001098 * 4.8 / 3.35,
    kv_capacity_bytes=80 / 141 * 945029 * 131072,
)
"""The H200 device scaled to an H100's memory bandwidth and capacity (made up, for heterogeneous pools)."""

PARAMS = PearlParams(
    devices=(H200, H100),
    switch_overhead_s=0.0,
    kv_bandwidth_bytes_per_s=50e9,
    kv_bandwidth_per_prefill_worker=True,
    source="tests",
)
"""PEARL parameters over both devices."""


def reference_workload(**overrides: float) -> Workload:
    """A tau-bench-like agentic batch; any field can be overridden."""
    values: dict[str, float] = dict(
        batch_size=1024,
        unfinished=1024,
        turns=20.0,
        appended_tokens_per_turn=151.4,
        generated_tokens_per_turn=84.7,
        env_time_per_turn_s=10.0,
        mean_context_tokens=3051.0,
        kv_bytes_per_token=131072.0,
    )
    values.update(overrides)
    return Workload(**values)
