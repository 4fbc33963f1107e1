"""The unified GPU–worker–role state (docs/state.md).

One table, read by every part: GPUs (with their zone and availability), workers as stable slots over fixed
TP groups (with their role and status), the rollout workload and the budget. All value objects are frozen
pydantic models that forbid unknown fields; rules that span objects are checked in
:class:`ClusterState`'s validator, which raises and never fixes input silently.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import numpy as np
from numpy.typing import ArrayLike
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from typing_extensions import Self

from pearl_sched._compat import StrEnum


class Frozen(BaseModel):
    """Base of every value object: immutable, unknown fields rejected, NaN and infinity rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


NonNegFloat = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
PosFloat = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]


class Zone(StrEnum):
    """Where a GPU comes from, which decides how long it stays."""

    DEDICATED = "dedicated"
    """Reserved for rollout for the whole run."""
    PREEMPTIBLE = "preemptible"
    """Spot/preemptible: joins and leaves following the provider."""
    OVERLAP = "overlap"
    """A training GPU: lendable to rollout only while the trainer is idle, returned before training."""


class Role(StrEnum):
    """What a worker slot does."""

    PREFILL = "prefill"
    DECODE = "decode"
    COLOCATED = "colocated"
    TRAINING = "training"


ROLLOUT_ROLES: tuple[Role, ...] = (Role.PREFILL, Role.DECODE, Role.COLOCATED)


class Status(StrEnum):
    """Whether a worker slot is serving."""

    ACTIVE = "active"
    INACTIVE = "inactive"
    TRANSITIONING = "transitioning"


class Mode(StrEnum):
    """A whole-cluster PD execution mode: no hybrids (as PEARL)."""

    COLOCATED = "colocated"
    DISAGGREGATED = "disaggregated"


def ratio_label(mode: Mode, prefill: int = 0, decode: int = 0, colocated: int = 0) -> str:
    """A configuration as people write it: ``"3P5D"`` for a disaggregated pool, ``"8C"`` for a colocated one."""
    return f"{colocated}C" if mode is Mode.COLOCATED else f"{prefill}P{decode}D"


class GPU(Frozen):
    """One accelerator.

    ``reclaim_in_s`` is set for overlap (training) GPUs only: the seconds until the trainer needs the GPU
    back; ``0`` means the trainer is using it now.
    """

    id: str = Field(min_length=1)
    node: str = Field(min_length=1)
    type: str = Field(min_length=1, description="GPU type, e.g. 'h100' or 'h200'")
    zone: Zone
    node_group: str = Field(default="default", min_length=1, description="Interchangeable set of nodes")
    available: bool = True
    reclaim_in_s: NonNegFloat | None = None

    @model_validator(mode="after")
    def _reclaim_only_for_overlap(self) -> Self:
        if self.zone is Zone.OVERLAP and self.reclaim_in_s is None:
            raise ValueError(f"GPU {self.id!r}: an overlap GPU needs reclaim_in_s (seconds until training)")
        if self.zone is not Zone.OVERLAP and self.reclaim_in_s is not None:
            raise ValueError(f"GPU {self.id!r}: reclaim_in_s is only meaningful for overlap GPUs")
        return self


def _is_one(value: object) -> bool:
    """Serialisation filter: a field left at 1 is not written, so states without sizes dump as before."""
    return value == 1


def _is_zero(value: object) -> bool:
    """Serialisation filter: a field left at 0 is not written, so states without it dump as before."""
    return value == 0


class WorkerSize(Frozen):
    """One worker size: a TP group of ``tp`` GPUs on one node, with ``dp`` attention data-parallel ranks.

    ``dp`` > 1 is SGLang's attention-DP for MoE models (``--dp <dp> --enable-dp-attention``: attention runs
    in ``dp`` replicas of TP ``tp/dp``, experts over all ``tp`` GPUs). The planner sizes capacity by ``tp``
    (the makespan model's parameters are per TP degree) and carries ``dp`` to the launcher. In JSON a bare
    integer ``4`` means ``{"tp": 4}``.
    """

    tp: int = Field(ge=1, description="GPUs in the worker (tensor-parallel degree)")
    dp: int = Field(default=1, ge=1, exclude_if=_is_one, description="Attention data-parallel ranks (divides tp)")

    @model_validator(mode="before")
    @classmethod
    def _from_int(cls, data: Any) -> Any:
        return {"tp": data} if isinstance(data, int) and not isinstance(data, bool) else data

    @model_validator(mode="after")
    def _dp_divides_tp(self) -> Self:
        if self.tp % self.dp:
            raise ValueError(f"worker size TP{self.tp}: dp={self.dp} does not divide tp")
        return self

    @property
    def label(self) -> str:
        """``"tp4"``, or ``"tp8dp8"`` with attention-DP."""
        return f"tp{self.tp}" + (f"dp{self.dp}" if self.dp > 1 else "")


class ModelLimits(Frozen):
    """What decides whether the served model can run at a worker size (from its config.json and the GPUs).

    A size runs when its TP degree divides the attention heads and its GPUs hold the weights within SGLang's
    static memory fraction: ``tp · gpu_memory_bytes[type] · memory_fraction > weight_bytes``.
    """

    name: str = Field(min_length=1, description="The model, for messages")
    attention_heads: int = Field(gt=0, description="num_attention_heads of config.json")
    weight_bytes: NonNegFloat = Field(description="Bytes of the weights (parameters × bytes per parameter)")
    gpu_memory_bytes: dict[str, PosFloat] = Field(description="Memory of one GPU, per GPU type")
    memory_fraction: float = Field(
        default=0.85, gt=0.0, le=1.0, description="SGLang --mem-fraction-static (0.85: our assumption)"
    )

    def fits(self, size: WorkerSize, gpu_type: str) -> bool:
        """Whether the weights fit on ``size.tp`` GPUs of ``gpu_type`` (unknown types never fit)."""
        memory = self.gpu_memory_bytes.get(gpu_type)
        return memory is not None and size.tp * memory * self.memory_fraction > self.weight_bytes


def sized_ratio_label(sizes: Mapping[Role, Sequence[WorkerSize]]) -> str:
    """A configuration with its worker sizes: ``2P(tp1)3D(tp2)``, or ``3P(2×tp1+1×tp2)4D(tp2)`` for mixed sizes.

    Args:
        sizes: The serving workers' sizes per role (in any order; roles without workers are left out).
    """
    parts = []
    for role, letter in ((Role.PREFILL, "P"), (Role.DECODE, "D"), (Role.COLOCATED, "C")):
        ordered = sorted(sizes.get(role, ()), key=lambda z: (z.tp, z.dp))
        if not ordered:
            continue
        tally = {z.label: ordered.count(z) for z in dict.fromkeys(ordered)}
        inner = next(iter(tally)) if len(tally) == 1 else "+".join(f"{n}×{z}" for z, n in tally.items())
        parts.append(f"{len(ordered)}{letter}({inner})")
    return "".join(parts)


class WorkerSizes(Frozen):
    """The worker sizes plan() may choose, per rollout role (docs/state.md, "Worker sizes").

    With sizes, plan() may regroup the GPUs of a node into workers of the chosen sizes; without them (the
    state's ``worker_sizes`` left out) every slot keeps its size and plan() only chooses roles. A role with
    no size is never planned (an empty ``colocated`` rules the colocated mode out). All TP degrees must
    divide one another (1, 2, 4, 8): that is what lets GPUs of a node be regrouped without fragments.
    """

    prefill: tuple[WorkerSize, ...] = ()
    decode: tuple[WorkerSize, ...] = ()
    colocated: tuple[WorkerSize, ...] = ()
    model: ModelLimits | None = Field(default=None, description="Checks each size against the model (recommended)")

    @field_validator("prefill", "decode", "colocated")
    @classmethod
    def _distinct_tp(cls, sizes: tuple[WorkerSize, ...]) -> tuple[WorkerSize, ...]:
        tps = [s.tp for s in sizes]
        if len(set(tps)) != len(tps):
            raise ValueError(f"a role lists one TP degree twice: {sorted(tps)}")
        return tuple(sorted(sizes, key=lambda s: s.tp))

    @model_validator(mode="after")
    def _servable(self) -> Self:
        if not self.colocated and not (self.prefill and self.decode):
            raise ValueError("worker_sizes allows no mode: give colocated sizes, or both prefill and decode sizes")
        tps = sorted(self.tps)
        for small, large in itertools.pairwise(tps):
            if large % small:
                raise ValueError(f"worker sizes TP{small} and TP{large} do not divide one another (use 1, 2, 4, 8)")
        return self

    def allowed(self, role: Role) -> tuple[WorkerSize, ...]:
        """The sizes ``role`` may have (none for the training role)."""
        return {Role.PREFILL: self.prefill, Role.DECODE: self.decode, Role.COLOCATED: self.colocated}.get(role, ())

    @property
    def tps(self) -> frozenset[int]:
        """Every TP degree some role allows."""
        return frozenset(s.tp for sizes in (self.prefill, self.decode, self.colocated) for s in sizes)

    def by_role(self) -> Mapping[Role, tuple[WorkerSize, ...]]:
        """Role → allowed sizes, for the rollout roles."""
        return {Role.PREFILL: self.prefill, Role.DECODE: self.decode, Role.COLOCATED: self.colocated}


class Worker(Frozen):
    """A stable worker slot over a fixed TP group of GPUs.

    Scaling never renumbers survivors: communication groups, routes and weight broadcasts refer to slot ids.
    A slot is *in rollout use* when its status is not inactive and its role is a rollout role. ``prepared_s``
    is the preparation already done on a preemptible slot that does not serve yet (a cluster that prepares
    arrived GPUs in the background reports it; docs/policies.md, "Preparation progress"): the expansion gate
    and the objective charge only the preparation left.
    """

    id: str = Field(min_length=1)
    gpu_ids: tuple[str, ...] = Field(min_length=1)
    role: Role
    status: Status = Status.INACTIVE
    endpoint: str | None = None
    weight_version: int | None = Field(default=None, ge=0)
    inflight_tokens: int = Field(default=0, ge=0, description="KV tokens in flight: the drain cost")
    dp: int = Field(
        default=1,
        ge=1,
        exclude_if=_is_one,
        description="Attention data-parallel ranks over the TP group (MoE: SGLang --dp with --enable-dp-attention)",
    )
    prepared_s: NonNegFloat = Field(
        default=0.0,
        exclude_if=_is_zero,
        description="Seconds of preparation (engine start, weight load) already done on a slot not serving yet",
    )

    @model_validator(mode="after")
    def _dp_divides_tp(self) -> Self:
        if self.tp % self.dp:
            raise ValueError(f"worker {self.id!r}: dp={self.dp} does not divide its {self.tp} GPUs")
        return self

    @property
    def size(self) -> WorkerSize:
        """The worker's size: TP degree and attention-DP ranks."""
        return WorkerSize(tp=self.tp, dp=self.dp)

    @property
    def tp(self) -> int:
        """Tensor-parallel degree (the size of the GPU group)."""
        return len(self.gpu_ids)

    @property
    def rollout_role(self) -> Role | None:
        """The rollout role this slot serves now, or ``None`` when it serves no rollout."""
        if self.status is Status.INACTIVE or self.role is Role.TRAINING:
            return None
        return self.role


TURN_QUANTILE_LEVELS = 21
"""Turn counts a batch's statistics keep (:func:`turn_quantiles`): every 5% from the shortest to the longest."""


def turn_quantiles(turns: ArrayLike, levels: int = TURN_QUANTILE_LEVELS) -> tuple[float, ...]:
    """Turns per trajectory at ``levels`` evenly spaced quantiles (0 … 1, linear interpolation).

    What :attr:`Workload.turn_quantiles` holds (numpy's default ``quantile``).
    """
    if levels < 2:
        raise ValueError(f"levels must be at least 2, got {levels}")
    counts = np.asarray(turns, dtype=float)
    if not counts.size:
        raise ValueError("no trajectories to take turn quantiles of")
    return tuple(float(q) for q in np.quantile(counts, np.linspace(0.0, 1.0, levels)))


class Workload(Frozen):
    """The rollout batch being served (PEARL §4 notation in brackets)."""

    batch_size: int = Field(gt=0, description="Trajectories in the batch [B]")
    unfinished: int = Field(ge=0, description="Trajectories not finished yet [R]")
    turns: PosFloat = Field(description="Turns of the slowest trajectory [S]")
    appended_tokens_per_turn: NonNegFloat = Field(description="Prompt tokens appended per turn [ΔL]")
    generated_tokens_per_turn: PosFloat = Field(description="Tokens generated per turn [r]")
    env_time_per_turn_s: NonNegFloat = Field(description="Environment (tool) seconds per turn")
    env_time_std_s: NonNegFloat = Field(default=0.0, description="Spread of one turn's environment time")
    bubble_ratio: NonNegFloat = Field(default=0.0, description="θ = (1 − f)/f, f the decoding fraction")
    mean_context_tokens: NonNegFloat = 0.0
    max_context_tokens: NonNegFloat = 0.0
    kv_bytes_per_token: NonNegFloat = Field(description="KV-cache bytes per token [K]")
    min_prefill_tokens_per_s: NonNegFloat = Field(
        default=0.0, description="Prefill demand the pool must sustain (0: no constraint)"
    )
    prompt_tokens: NonNegFloat = Field(
        default=0.0,
        description="Initial prompt tokens per trajectory still to prefill (the first-turn burst; PEARL omits it)",
    )
    turn_quantiles: tuple[PosFloat, ...] = Field(
        default=(),
        exclude_if=lambda v: not v,
        description="Turns per trajectory at evenly spaced quantiles of the batch, from its shortest to its longest "
        "(e.g. 21 values: every 5%), as the orchestrator logs them; () when not logged. The improved predictor "
        "can take its live share from them (docs/makespan.md, 'The live share from turn counts')",
    )

    @model_validator(mode="after")
    def _unfinished_within_batch(self) -> Self:
        if self.unfinished > self.batch_size:
            raise ValueError(f"unfinished ({self.unfinished}) exceeds batch_size ({self.batch_size})")
        if self.max_context_tokens and self.max_context_tokens < self.mean_context_tokens:
            raise ValueError("max_context_tokens is below mean_context_tokens")
        q = self.turn_quantiles
        if len(q) == 1:
            raise ValueError(
                "turn_quantiles needs at least two values: the shortest and the longest trajectory's turns"
            )
        if any(b < a for a, b in itertools.pairwise(q)):
            raise ValueError(f"turn_quantiles must not decrease (got {list(q)})")
        return self

    @property
    def env_time_s(self) -> float:
        """Total environment time of the slowest trajectory [T_env = S · per-turn env time]."""
        return self.turns * self.env_time_per_turn_s

    @property
    def kv_bytes_per_trajectory(self) -> float:
        """KV bytes one trajectory holds [K_seq]: its mean context, else S·(ΔL + r) tokens."""
        context = self.mean_context_tokens or (
            self.turns * (self.appended_tokens_per_turn + self.generated_tokens_per_turn)
        )
        return context * self.kv_bytes_per_token

    @property
    def unfinished_fraction(self) -> float:
        """R / B: the part of the batch whose makespan is still ahead."""
        return self.unfinished / self.batch_size


class Budget(Frozen):
    """What rollout may use."""

    max_gpus: int = Field(ge=0, description="Rollout GPUs allowed in total (all zones)")
    allow_borrow: bool = Field(default=True, description="Overlap (training) GPUs may be lent to rollout")
    allow_preemptible: bool = True


class ClusterState(Frozen):
    """The whole input of one planning decision: GPUs, worker slots, workload, budget.

    Raises ``ValueError`` (as a pydantic ``ValidationError``) when a GPU is in two workers, a worker names
    an unknown GPU, a TP group spans nodes while ``allow_cross_node_tp`` is false, a worker mixes zones or
    GPU types, ids repeat, or a disaggregated configuration in use lacks prefill or decode workers.
    """

    gpus: tuple[GPU, ...]
    workers: tuple[Worker, ...]
    workload: Workload
    budget: Budget
    allow_cross_node_tp: bool = False
    worker_sizes: WorkerSizes | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Sizes plan() may regroup workers into, per role (None: every slot keeps its size)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        _unique("GPU", [g.id for g in self.gpus])
        _unique("worker", [w.id for w in self.workers])
        gpus = {g.id: g for g in self.gpus}
        owner: dict[str, str] = {}
        for worker in self.workers:
            for gid in worker.gpu_ids:
                if gid not in gpus:
                    raise ValueError(f"worker {worker.id!r} names unknown GPU {gid!r}")
                if gid in owner:
                    raise ValueError(f"GPU {gid!r} is in two workers: {owner[gid]!r} and {worker.id!r}")
                owner[gid] = worker.id
            members = [gpus[g] for g in worker.gpu_ids]
            if not self.allow_cross_node_tp and len({g.node for g in members}) > 1:
                nodes = sorted({g.node for g in members})
                raise ValueError(f"worker {worker.id!r}: TP group spans nodes {nodes} (allow_cross_node_tp)")
            for attr in ("zone", "type", "node_group"):
                values = {str(getattr(g, attr)) for g in members}
                if len(values) > 1:
                    raise ValueError(f"worker {worker.id!r} mixes GPU {attr}s {sorted(values)}")
            if worker.role is Role.TRAINING and members[0].zone is not Zone.OVERLAP:
                raise ValueError(f"worker {worker.id!r}: only overlap GPUs can hold the training role")
        roles = Counter(w.rollout_role for w in self.workers if w.rollout_role is not None)
        if (roles[Role.PREFILL] or roles[Role.DECODE]) and roles[Role.COLOCATED]:
            raise ValueError("state mixes colocated and disaggregated workers: no hybrid configurations")
        # A disaggregated cluster may have lost every worker of one role (preemption took them): that is a
        # state to observe and repair, not an invalid one; plan() always targets at least one of each.
        if self.worker_sizes is not None:
            _check_sizes(self.worker_sizes, self.gpus)
        return self

    def gpu_index(self) -> dict[str, GPU]:
        """GPU id → GPU (built on each call: build it once per pass over the workers)."""
        return {g.id: g for g in self.gpus}

    @property
    def mode(self) -> Mode | None:
        """The mode in use now, or ``None`` when no worker serves rollout."""
        roles = {w.rollout_role for w in self.workers} - {None}
        if not roles:
            return None
        return Mode.COLOCATED if Role.COLOCATED in roles else Mode.DISAGGREGATED


def _check_sizes(sizes: WorkerSizes, gpus: tuple[GPU, ...]) -> None:
    """Refuse a size the model cannot run at, naming the size, its role and the reason."""
    per_node = Counter(g.node for g in gpus)
    largest = max(per_node.values(), default=0)
    types = sorted({g.type for g in gpus})
    limits = sizes.model
    if limits is not None:
        unknown = [t for t in types if t not in limits.gpu_memory_bytes]
        if unknown:
            raise ValueError(f"worker_sizes.model.gpu_memory_bytes gives no memory for GPU type(s) {unknown}")
    for role, allowed in sizes.by_role().items():
        for size in allowed:
            where = f"worker_sizes.{role.value}: size {size.label}"
            if size.tp > largest:
                raise ValueError(f"{where} needs more GPUs than a node holds (the largest node has {largest})")
            if limits is None:
                continue
            if limits.attention_heads % size.tp:
                raise ValueError(
                    f"{where}: TP{size.tp} does not divide {limits.name}'s {limits.attention_heads} attention heads"
                )
            if not any(limits.fits(size, t) for t in types):
                memory = ", ".join(f"{t} {limits.gpu_memory_bytes[t] / 1e9:.0f} GB" for t in types)
                raise ValueError(
                    f"{where} is too small for {limits.name}'s {limits.weight_bytes / 1e9:.1f} GB of weights"
                    f" ({size.tp} × ({memory}) × memory fraction {limits.memory_fraction})"
                )


def _unique(kind: str, ids: list[str]) -> None:
    repeated = sorted(i for i, n in Counter(ids).items() if n > 1)
    if repeated:
        raise ValueError(f"{kind} ids repeat: {repeated}")
