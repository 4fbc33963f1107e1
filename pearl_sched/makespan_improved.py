"""An improved makespan predictor: PEARL's interface, with the known weaknesses of its closed form addressed.

docs/makespan.md ("The improved predictor") lists those weaknesses and how each is addressed.

Each trajectory cycles *decode* (r tokens) → *KV transfer* → *environment* (T_e per turn) → *prefill* of the
ΔL appended tokens → decode. With B trajectories on a pool, the number decoding at once, n, is not an input
(PEARL's measured θ) but the fixed point of that finite-source cycle::

    τ(n)  = (A + b·n/N_D) / (1 − u_p)          decode iteration; u_p is the co-batched prefill share (colocated)
    d(n)  = r·τ(n)                             decode time of one turn
    C(n)  = d(n) + x + T_e + p                 one turn's cycle: decode, transfer, environment, prefill
    n     = B · d(n) / C(n)                    trajectories decoding = B × the decoding share of the cycle

solved by bisection on n ∈ (0, B]: B·d/C − n is positive near 0 and negative at B, and without colocation
interference it is a quadratic with one positive root. θ = (B − n)/n is an output; measured θ is only a check. Further:

- **append-prefill grows with context**: prefill seconds per token t_p(c) = t_p + t_c·c at mean context c;
- **colocation interference**: co-batched prefill chunks inflate each decode iteration by 1/(1 − u_p), where
  u_p = t_p(c)·B·ΔL/(N·C) is the share of a worker's time spent on prefill;
- **shared KV bandwidth**: transfers share BW as a processor-sharing link: one turn's transfer takes
  x = ΔL·K/(BW·(1 − u_x)), u_x = B·ΔL·K/(C·BW) its utilisation;
- **makespan = max(throughput bound, critical path)**: the critical path is the slowest trajectory's;
  the throughput bounds are each pool's total work over its capacity (PEARL's pool formulas with θ = 0);
- **the first-turn burst**: every trajectory starts by prefilling its whole prompt (``Workload.prompt_tokens``)
  at once; the pool clears that burst, B·P₀·t_p/E_P, before the cycle settles — on agentic batches it is
  often the largest single prefill load (1,024 tau-bench prompts of ~1,300 tokens against 151 appended per
  turn), and PEARL's per-turn ΔL leaves it out;
- **the slowest trajectory, not the mean one**: the batch ends when its last trajectory does, and its last
  turn makes no environment call. Trajectory i starts after a share of the burst (uniform over [0, burst])
  and spends S − 1 environment calls of spread σ
  (``Workload.env_time_std_s``); the makespan's critical path is S·C − T_e plus the *characteristic largest*
  of B such delays, the t with B·P(start + env deviation > t) = 1 — σ·√(S−1)·Φ⁻¹(1 − 1/B) without a burst,
  the burst itself without spread.

With no environment time, no transfer, constant t_p and T_over = 0, the colocated prediction equals PEARL's
colocated formula and the disaggregated decode bound equals PEARL's T_dec at θ = 0 (``tests`` check both).

For the MILP, ``terms`` gives PEARL's pool forms (convex in capacity) with this model's prefill cost; the plan
reports ``predict``.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from pydantic import Field

from pearl_sched.makespan import (
    MakespanBreakdown,
    MakespanTerms,
    PearlMakespanModel,
    PearlParams,
    PoolCapacity,
    PoolTerms,
)
from pearl_sched.state import Frozen, Mode, NonNegFloat, Role, Workload

_BISECTION_STEPS = 80


def slowest_delay_s(burst_s: float, spread_s: float, trajectories: int) -> float:
    """Characteristic largest of ``trajectories`` i.i.d. delays U·burst + N(0, spread²), U uniform on [0, 1].

    It is the t at which the expected number of trajectories later than t is one.
    """
    if trajectories <= 1:
        return burst_s / 2
    if spread_s <= 0:
        return burst_s * (1 - 1 / trajectories)
    normal = NormalDist()
    if burst_s <= 0:
        return spread_s * normal.inv_cdf(1 - 1 / trajectories)
    grid = [burst_s * (k + 0.5) / 64 for k in range(64)]

    def later(t: float) -> float:  # expected number of trajectories later than t
        return trajectories * sum(1 - normal.cdf((t - x) / spread_s) for x in grid) / len(grid)

    lo, hi = 0.0, burst_s + 10 * spread_s
    for _ in range(60):
        mid = (lo + hi) / 2
        if later(mid) > 1:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


class ImprovedParams(Frozen):
    """PEARL's parameters plus what the improved model adds."""

    pearl: PearlParams
    prefill_s_per_token_per_context: NonNegFloat = Field(
        default=0.0, description="t_c: added prefill seconds per token per token of cached context"
    )


class CycleState(Frozen):
    """The fixed point of the trajectory cycle for one pool configuration."""

    decoding: NonNegFloat = Field(description="n: trajectories decoding at once")
    iteration_s: NonNegFloat = Field(description="τ: one decode iteration")
    cycle_s: NonNegFloat = Field(description="C: one turn of one trajectory")
    transfer_s: NonNegFloat
    prefill_s: NonNegFloat
    bubble_ratio: NonNegFloat = Field(description="θ = (B − n)/n, an output here")


class ImprovedMakespanModel:
    """The improved predictor (module docstring); a drop-in :class:`~pearl_sched.makespan.MakespanModel`."""

    def __init__(self, params: ImprovedParams) -> None:
        """A model over ``params``; capacities, KV bytes and prefill rates come from its PEARL part."""
        self.params = params
        self._pearl = PearlMakespanModel(params.pearl)

    @property
    def name(self) -> str:
        """``"improved"``."""
        return "improved"

    def describe(self) -> dict[str, object]:
        """The name and the parameters, as JSON (part of the plan's input digest)."""
        return {"name": self.name, "params": self.params.model_dump(mode="json")}

    def capacity_weight(self, workload: Workload, gpu_type: str, tp: int, role: Role) -> float:
        """As PEARL's model: reference workers one worker of (gpu_type, tp) is worth in ``role``."""
        return self._pearl.capacity_weight(workload, gpu_type, tp, role)

    def kv_capacity_bytes(self, gpu_type: str, tp: int) -> float:
        """As PEARL's model: KV-cache bytes one worker of (gpu_type, tp) holds."""
        return self._pearl.kv_capacity_bytes(gpu_type, tp)

    def prefill_tokens_per_s(self, gpu_type: str, tp: int) -> float:
        """As PEARL's model: sustained prefill throughput of one worker of (gpu_type, tp)."""
        return self._pearl.prefill_tokens_per_s(gpu_type, tp)

    def _prefill_per_token_s(self, workload: Workload) -> float:
        ref = self._pearl.reference
        return ref.prefill_s_per_token + self.params.prefill_s_per_token_per_context * workload.mean_context_tokens

    def terms(self, workload: Workload) -> MakespanTerms:
        """PEARL's pool forms at θ = 0 (the throughput bounds) with the context-dependent prefill cost."""
        p = self.params.pearl
        ref = self._pearl.reference
        s, b = workload.turns, workload.batch_size
        dl, r = workload.appended_tokens_per_turn, workload.generated_tokens_per_turn
        t_p = self._prefill_per_token_s(workload)
        transfer = s * b * dl * workload.kv_bytes_per_token / p.kv_bandwidth_bytes_per_s
        prefill_work = (s * dl + workload.prompt_tokens) * b * t_p
        prefill = (
            PoolTerms(fixed_s=0.0, work_s=prefill_work + transfer)
            if p.kv_bandwidth_per_prefill_worker
            else PoolTerms(fixed_s=transfer, work_s=prefill_work)
        )
        return MakespanTerms(
            prefill=prefill,
            decode=PoolTerms(fixed_s=s * r * ref.decode_iteration_s, work_s=s * r * ref.decode_per_seq_s * b),
            colocated=PoolTerms(
                fixed_s=s * (r * ref.decode_iteration_s + p.switch_overhead_s),
                work_s=s * b * (dl * t_p + r * ref.decode_per_seq_s) + b * workload.prompt_tokens * t_p,
            ),
            environment_s=workload.env_time_s,
        )

    def cycle(self, workload: Workload, capacity: PoolCapacity) -> CycleState:
        """Solve the trajectory cycle's fixed point for a configuration."""
        ref = self._pearl.reference
        p = self.params.pearl
        b_total = workload.batch_size
        r, dl = workload.generated_tokens_per_turn, workload.appended_tokens_per_turn
        env = workload.env_time_per_turn_s
        t_p = self._prefill_per_token_s(workload)
        colocated = capacity.mode is Mode.COLOCATED
        decode_capacity = capacity.colocated if colocated else capacity.decode
        prefill_capacity = capacity.colocated if colocated else capacity.prefill
        if decode_capacity <= 0 or prefill_capacity <= 0 or r <= 0:
            raise ValueError("the configuration needs prefill and decode capacity > 0")
        kv = workload.kv_bytes_per_token
        bandwidth = p.kv_bandwidth_bytes_per_s * (prefill_capacity if p.kv_bandwidth_per_prefill_worker else 1.0)

        def state(n: float) -> CycleState:
            # Own prefill: ΔL tokens at the pool's per-worker speed; PEARL's per-turn switch overhead counts here.
            own_prefill = dl * t_p + (p.switch_overhead_s if colocated else 0.0)
            cycle = 0.0
            iteration = ref.decode_iteration_s + ref.decode_per_seq_s * n / decode_capacity
            transfer = 0.0
            for _ in range(50):  # inner fixed point in C (u_p and u_x depend on it); contracts quickly
                prefill_share = (
                    min(0.95, t_p * b_total * dl / (prefill_capacity * cycle)) if colocated and cycle else 0.0
                )
                iteration = (ref.decode_iteration_s + ref.decode_per_seq_s * n / decode_capacity) / (1 - prefill_share)
                transfer = 0.0
                if not colocated and kv > 0:
                    link_share = min(0.95, b_total * dl * kv / (cycle * bandwidth)) if cycle else 0.0
                    transfer = dl * kv / (bandwidth * (1 - link_share)) if bandwidth > 0 else 0.0
                new_cycle = r * iteration + transfer + env + own_prefill
                if abs(new_cycle - cycle) <= 1e-12 * new_cycle:
                    cycle = new_cycle
                    break
                cycle = new_cycle
            return CycleState(
                decoding=n,
                iteration_s=iteration,
                cycle_s=cycle,
                transfer_s=transfer,
                prefill_s=own_prefill,
                bubble_ratio=(b_total - n) / n if n > 0 else 0.0,
            )

        lo, hi = 1e-9, float(b_total)
        for _ in range(_BISECTION_STEPS):  # g(n) = B·d(n)/C(n) − n changes sign once over (0, B]
            mid = (lo + hi) / 2
            s = state(mid)
            if b_total * r * s.iteration_s / s.cycle_s > mid:
                lo = mid
            else:
                hi = mid
        return state((lo + hi) / 2)

    def predict(self, workload: Workload, capacity: PoolCapacity) -> MakespanBreakdown:
        """The improved makespan of ``workload`` on ``capacity`` (module docstring), with its parts."""
        cycle = self.cycle(workload, capacity)
        s, b = workload.turns, workload.batch_size
        terms = self.terms(workload)
        env = terms.environment_s
        prefill_capacity = capacity.colocated if capacity.mode is Mode.COLOCATED else capacity.prefill
        burst = b * workload.prompt_tokens * self._prefill_per_token_s(workload) / prefill_capacity
        # The last turn ends the trajectory: S turns make S − 1 environment calls on the critical path.
        calls = max(s - 1.0, 0.0)
        critical = (
            s * cycle.cycle_s
            - workload.env_time_per_turn_s
            + slowest_delay_s(burst, workload.env_time_std_s * math.sqrt(calls), b)
        )
        if capacity.mode is Mode.COLOCATED:
            throughput = s * (
                b * (workload.appended_tokens_per_turn * self._prefill_per_token_s(workload)) / capacity.colocated
            )
            throughput += (
                s
                * workload.generated_tokens_per_turn
                * (
                    self._pearl.reference.decode_iteration_s
                    + self._pearl.reference.decode_per_seq_s * b / capacity.colocated
                )
            )
            total = max(critical, throughput + env)
            decode = s * workload.generated_tokens_per_turn * cycle.iteration_s
            return MakespanBreakdown(
                total_s=total,
                prefill_s=burst + s * cycle.prefill_s,
                decode_s=decode,
                transfer_s=0.0,
                environment_s=env,
                overhead_s=max(0.0, total - decode - s * cycle.prefill_s - env),
            )
        prefill_bound = terms.prefill.time_s(capacity.prefill)
        decode_bound = terms.decode.time_s(capacity.decode)
        total = max(critical, prefill_bound + env, decode_bound + env)
        return MakespanBreakdown(
            total_s=total,
            prefill_s=burst + s * cycle.prefill_s,
            decode_s=s * workload.generated_tokens_per_turn * cycle.iteration_s,
            transfer_s=s * cycle.transfer_s,
            environment_s=env,
            overhead_s=0.0,
        )
