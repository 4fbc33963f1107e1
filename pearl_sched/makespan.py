"""Predicting the rollout makespan (batch completion time) of a configuration.

The interface every predictor implements is :class:`MakespanModel`. The planner's MILP consumes a predictor
through two things only:

* ``capacity_weight``: how many *reference workers* one worker of a GPU type and TP degree is worth in a role,
  so a heterogeneous pool has a capacity ``E = Σ κ · n`` that is linear in worker counts;
* ``terms``: for each role pool, the pool time as ``fixed_s + work_s / E`` — convex and decreasing in ``E``,
  which lets the MILP represent it exactly by outer-approximation cuts (``solvers/formulation.py``).

``predict`` gives the full breakdown for a chosen capacity and is what plans report.

PEARL's closed form (docs/makespan.md), with B trajectories, S turns, ΔL appended and r generated tokens per
turn, t_p prefill seconds per token, decode iteration ``A + b·n`` for n sequences, T_over switching overhead,
θ the bubble ratio, K KV bytes per token, BW the P→D bandwidth::

    colocated      T = S·[(B·ΔL/N)·t_p + r·(A + b·B/N) + T_over] + T_env
    decode pool    T_dec = S·r·(A + b·B/(N_D·(1+θ)))·(1+θ)
    prefill pool   T_pre = S·(B·ΔL·t_p/N_P + B·ΔL·K/BW)
    disaggregated  T = max(T_pre, T_dec) + T_env

In the ``fixed + work/E`` form::

    colocated   fixed = S·(r·A + T_over)      work = S·B·(ΔL·t_p + r·b)
    decode      fixed = S·r·A·(1+θ)           work = S·r·b·B
    prefill     fixed = S·B·ΔL·K/BW           work = S·B·ΔL·t_p

Heterogeneous GPU types (an extension of ours; PEARL's pools are homogeneous): a worker of type g is worth
``t_p,ref/t_p,g`` reference prefill workers and ``b_ref/b_g`` reference decode workers, and the fixed costs
(A, T_over) are the reference type's. Work splits exactly in proportion to speed for prefill; for decode it is
exact when A is common to the types and an approximation otherwise.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
from pydantic import Field, model_validator

from pearl_sched.errors import InvalidStateError
from pearl_sched.state import Frozen, Mode, NonNegFloat, PosFloat, Role, Workload


class PoolTerms(Frozen):
    """A role pool's time as ``fixed_s + work_s / capacity`` (capacity in reference workers)."""

    fixed_s: NonNegFloat
    work_s: NonNegFloat

    def time_s(self, capacity: float) -> float:
        """Pool time at ``capacity`` reference workers (infinite at zero capacity)."""
        if capacity <= 0:
            return float("inf")
        return self.fixed_s + self.work_s / capacity


class MakespanTerms(Frozen):
    """The terms the MILP needs: one :class:`PoolTerms` per rollout role, plus environment time."""

    prefill: PoolTerms
    decode: PoolTerms
    colocated: PoolTerms
    environment_s: NonNegFloat

    def pool(self, role: Role) -> PoolTerms:
        """Terms of one rollout role."""
        return {Role.PREFILL: self.prefill, Role.DECODE: self.decode, Role.COLOCATED: self.colocated}[role]


class SizeCount(Frozen):
    """Workers of one (GPU type, TP degree) serving one role of a configuration."""

    role: Role
    gpu_type: str = Field(min_length=1)
    tp: int = Field(ge=1)
    count: NonNegFloat


class PoolCapacity(Frozen):
    """Capacity of a configuration, in reference workers per role.

    ``workers`` optionally says which workers make it up (the planner fills it); PEARL's model reads the
    capacities only, a model that knows each size's own memory and step times may read the workers
    (docs/makespan.md, "Worker sizes").
    """

    mode: Mode
    prefill: NonNegFloat = 0.0
    decode: NonNegFloat = 0.0
    colocated: NonNegFloat = 0.0
    workers: tuple[SizeCount, ...] = ()


class MakespanBreakdown(Frozen):
    """Predicted makespan and where the time goes (seconds).

    For a colocated pool the parts add up to the total. For a disaggregated pool the total is
    ``max(prefill_s + transfer_s, decode_s) + environment_s`` — the pools run concurrently.
    """

    total_s: NonNegFloat
    prefill_s: NonNegFloat
    decode_s: NonNegFloat
    transfer_s: NonNegFloat
    environment_s: NonNegFloat
    overhead_s: NonNegFloat


@runtime_checkable
class MakespanModel(Protocol):
    """What the planner needs from a makespan predictor."""

    @property
    def name(self) -> str:
        """Short name reported in plans."""
        ...

    def describe(self) -> dict[str, object]:
        """JSON-able description of the model and its parameters (part of the plan's input digest)."""
        ...

    def capacity_weight(self, workload: Workload, gpu_type: str, tp: int, role: Role) -> float:
        """Reference workers one worker of (gpu_type, tp) is worth in ``role``."""
        ...

    def kv_capacity_bytes(self, gpu_type: str, tp: int) -> float:
        """KV-cache bytes one worker of (gpu_type, tp) holds [H_max]."""
        ...

    def prefill_tokens_per_s(self, gpu_type: str, tp: int) -> float:
        """Sustained prefill throughput of one worker of (gpu_type, tp)."""
        ...

    def terms(self, workload: Workload) -> MakespanTerms:
        """Pool terms for this workload (see the module docstring)."""
        ...

    def predict(self, workload: Workload, capacity: PoolCapacity) -> MakespanBreakdown:
        """Full prediction for a configuration."""
        ...


class DeviceParams(Frozen):
    """PEARL's per-worker parameters for one (GPU type, TP degree)."""

    gpu_type: str = Field(min_length=1)
    tp: int = Field(ge=1)
    prefill_s_per_token: PosFloat = Field(description="t_p")
    decode_iteration_s: NonNegFloat = Field(description="A: fixed cost of one decode iteration")
    decode_per_seq_s: PosFloat = Field(description="b: added iteration cost per running sequence")
    kv_capacity_bytes: PosFloat = Field(description="H_max: KV-cache memory of the worker")


class PearlParams(Frozen):
    """Parameters of PEARL's closed-form makespan model.

    ``devices[0]`` is the reference type that capacities are expressed in. ``source`` says where the
    numbers came from (a fit, a paper, a profile).
    """

    devices: tuple[DeviceParams, ...] = Field(min_length=1)
    switch_overhead_s: NonNegFloat = Field(description="T_over: per-turn colocation switching overhead")
    kv_bandwidth_bytes_per_s: PosFloat = Field(description="BW: P→D KV transfer bandwidth")
    kv_bandwidth_per_prefill_worker: bool = Field(
        default=False,
        description="BW is each prefill worker's own link (aggregate N_P·BW) rather than PEARL's single BW",
    )
    source: str = ""

    @model_validator(mode="after")
    def _unique_devices(self) -> PearlParams:
        keys = [(d.gpu_type, d.tp) for d in self.devices]
        if len(set(keys)) != len(keys):
            raise ValueError(f"device parameters repeat a (gpu_type, tp): {keys}")
        return self


class PearlMakespanModel:
    """PEARL's closed-form makespan model (docs/makespan.md), reproduced exactly for homogeneous pools."""

    def __init__(self, params: PearlParams) -> None:
        """A model over ``params``; the first device is the reference the capacities are counted in."""
        self.params = params
        self._devices = {(d.gpu_type, d.tp): d for d in params.devices}

    @property
    def name(self) -> str:
        """``"pearl"``."""
        return "pearl"

    def describe(self) -> dict[str, object]:
        """The name and the parameters, as JSON (part of the plan's input digest)."""
        return {"name": self.name, "params": self.params.model_dump(mode="json")}

    @property
    def reference(self) -> DeviceParams:
        """The device the capacities are expressed in."""
        return self.params.devices[0]

    def device(self, gpu_type: str, tp: int) -> DeviceParams:
        """Parameters for (gpu_type, tp); a clear error names the missing pair."""
        try:
            return self._devices[(gpu_type, tp)]
        except KeyError:
            known = sorted(f"{t}/TP{p}" for t, p in self._devices)
            raise InvalidStateError(
                f"no makespan parameters for GPU type {gpu_type!r} at TP{tp}; the model knows {known}"
            ) from None

    def capacity_weight(self, workload: Workload, gpu_type: str, tp: int, role: Role) -> float:
        """Reference workers one worker of (gpu_type, tp) is worth in ``role``: the ratio of per-token times."""
        ref, dev = self.reference, self.device(gpu_type, tp)
        if role is Role.PREFILL:
            return ref.prefill_s_per_token / dev.prefill_s_per_token
        if role is Role.DECODE:
            return ref.decode_per_seq_s / dev.decode_per_seq_s
        if role is Role.COLOCATED:
            dl, r = workload.appended_tokens_per_turn, workload.generated_tokens_per_turn
            ref_work = dl * ref.prefill_s_per_token + r * ref.decode_per_seq_s
            dev_work = dl * dev.prefill_s_per_token + r * dev.decode_per_seq_s
            return ref_work / dev_work
        raise ValueError(f"{role} is not a rollout role")

    def kv_capacity_bytes(self, gpu_type: str, tp: int) -> float:
        """KV-cache bytes one worker of (gpu_type, tp) holds [H_max]."""
        return self.device(gpu_type, tp).kv_capacity_bytes

    def prefill_tokens_per_s(self, gpu_type: str, tp: int) -> float:
        """Sustained prefill throughput of one worker of (gpu_type, tp): the inverse of its per-token time."""
        return 1.0 / self.device(gpu_type, tp).prefill_s_per_token

    def terms(self, workload: Workload) -> MakespanTerms:
        """PEARL's pool terms f_r(E) = a_r + w_r / E for this workload (docs/makespan.md)."""
        ref = self.reference
        s, b = workload.turns, workload.batch_size
        dl, r = workload.appended_tokens_per_turn, workload.generated_tokens_per_turn
        theta = workload.bubble_ratio
        transfer_s = s * b * dl * workload.kv_bytes_per_token / self.params.kv_bandwidth_bytes_per_s
        prefill_work = s * b * dl * ref.prefill_s_per_token
        if self.params.kv_bandwidth_per_prefill_worker:  # each prefill worker pushes over its own link
            prefill = PoolTerms(fixed_s=0.0, work_s=prefill_work + transfer_s)
        else:
            prefill = PoolTerms(fixed_s=transfer_s, work_s=prefill_work)
        return MakespanTerms(
            prefill=prefill,
            decode=PoolTerms(
                fixed_s=s * r * ref.decode_iteration_s * (1 + theta), work_s=s * r * ref.decode_per_seq_s * b
            ),
            colocated=PoolTerms(
                fixed_s=s * (r * ref.decode_iteration_s + self.params.switch_overhead_s),
                work_s=s * b * (dl * ref.prefill_s_per_token + r * ref.decode_per_seq_s),
            ),
            environment_s=workload.env_time_s,
        )

    def predict(self, workload: Workload, capacity: PoolCapacity) -> MakespanBreakdown:
        """PEARL's closed-form makespan of ``workload`` on ``capacity``, with its parts."""
        ref = self.reference
        s, b = workload.turns, workload.batch_size
        dl, r = workload.appended_tokens_per_turn, workload.generated_tokens_per_turn
        env = workload.env_time_s
        if capacity.mode is Mode.COLOCATED:
            n = capacity.colocated
            if n <= 0:
                raise ValueError("a colocated configuration needs colocated capacity > 0")
            prefill = s * (b * dl / n) * ref.prefill_s_per_token
            decode = s * r * (ref.decode_iteration_s + ref.decode_per_seq_s * b / n)
            overhead = s * self.params.switch_overhead_s
            return MakespanBreakdown(
                total_s=prefill + decode + overhead + env,
                prefill_s=prefill,
                decode_s=decode,
                transfer_s=0.0,
                environment_s=env,
                overhead_s=overhead,
            )
        if capacity.prefill <= 0 or capacity.decode <= 0:
            raise ValueError("a disaggregated configuration needs prefill and decode capacity > 0")
        terms = self.terms(workload)
        prefill = s * b * dl * ref.prefill_s_per_token / capacity.prefill
        transfer = terms.prefill.time_s(capacity.prefill) - prefill
        decode = terms.decode.time_s(capacity.decode)
        return MakespanBreakdown(
            total_s=max(prefill + transfer, decode) + env,
            prefill_s=prefill,
            decode_s=decode,
            transfer_s=transfer,
            environment_s=env,
            overhead_s=0.0,
        )

    def predict_totals_s(
        self, workload: Workload, mode: Mode, prefill: np.ndarray, decode: np.ndarray, colocated: np.ndarray
    ) -> np.ndarray:
        """``predict(workload, capacity).total_s`` at many capacities of ``mode`` at once, float for float.

        The planner's ranking by predict scores PEARL's ratio sweep with it (docs/formulation.md, "Ranking by
        predict"). The same operations in the same order as :meth:`predict`, elementwise in numpy (IEEE
        arithmetic, so each lane equals ``predict``'s float). Like ``predict`` it reads the capacities only,
        and the total never rises when a capacity grows, which is what lets the ranker bound a mode or a size
        combination by its largest capacities. A lane with no capacity in a role its mode needs is ``inf``
        (``predict`` refuses it; callers check the lanes they score have capacity).

        Args:
            workload: The rollout batch.
            mode: The mode of every lane.
            prefill: Prefill capacity per lane, in reference workers.
            decode: Decode capacity per lane.
            colocated: Colocated capacity per lane.

        Returns:
            The predicted makespan of each lane, in seconds.
        """
        ref = self.reference
        s, b = workload.turns, workload.batch_size
        dl, r = workload.appended_tokens_per_turn, workload.generated_tokens_per_turn
        env = workload.env_time_s
        with np.errstate(divide="ignore", invalid="ignore"):
            if mode is Mode.COLOCATED:
                n = np.asarray(colocated, dtype=float)
                prefill_s = s * (b * dl / n) * ref.prefill_s_per_token
                decode_s = s * r * (ref.decode_iteration_s + ref.decode_per_seq_s * b / n)
                total: np.ndarray = prefill_s + decode_s + s * self.params.switch_overhead_s + env
                return np.where(n > 0, total, np.inf)
            terms = self.terms(workload)
            cap_p, cap_d = np.asarray(prefill, dtype=float), np.asarray(decode, dtype=float)
            prefill_s = s * b * dl * ref.prefill_s_per_token / cap_p
            transfer_s = (terms.prefill.fixed_s + terms.prefill.work_s / cap_p) - prefill_s  # PoolTerms.time_s
            decode_s = terms.decode.fixed_s + terms.decode.work_s / cap_d
            total = np.maximum(prefill_s + transfer_s, decode_s) + env
            return np.where((cap_p > 0) & (cap_d > 0), total, np.inf)
