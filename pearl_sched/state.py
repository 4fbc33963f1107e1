"""The unified GPU–worker–role state (docs/state.md).

One table, read by every part: GPUs (with their zone and availability), workers as stable slots over fixed
TP groups (with their role and status), the rollout workload and the budget. All value objects are frozen
pydantic models that forbid unknown fields; rules that span objects are checked in
:class:`ClusterState`'s validator, which raises and never fixes input silently.
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator
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


class Worker(Frozen):
    """A stable worker slot over a fixed TP group of GPUs.

    Scaling never renumbers survivors: communication groups, routes and weight broadcasts refer to slot ids.
    A slot is *in rollout use* when its status is not inactive and its role is a rollout role.
    """

    id: str = Field(min_length=1)
    gpu_ids: tuple[str, ...] = Field(min_length=1)
    role: Role
    status: Status = Status.INACTIVE
    endpoint: str | None = None
    weight_version: int | None = Field(default=None, ge=0)
    inflight_tokens: int = Field(default=0, ge=0, description="KV tokens in flight: the drain cost")

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

    @model_validator(mode="after")
    def _unfinished_within_batch(self) -> Self:
        if self.unfinished > self.batch_size:
            raise ValueError(f"unfinished ({self.unfinished}) exceeds batch_size ({self.batch_size})")
        if self.max_context_tokens and self.max_context_tokens < self.mean_context_tokens:
            raise ValueError("max_context_tokens is below mean_context_tokens")
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


def _unique(kind: str, ids: list[str]) -> None:
    repeated = sorted(i for i, n in Counter(ids).items() if n > 1)
    if repeated:
        raise ValueError(f"{kind} ids repeat: {repeated}")
