"""What ``plan()`` returns: the target configuration, the ordered actions to reach it, and why."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field

from pearl_sched._compat import StrEnum
from pearl_sched.makespan import MakespanBreakdown
from pearl_sched.state import Frozen, Mode, NonNegFloat, Role, Zone, ratio_label


def _is_one(value: object) -> bool:
    return value == 1


class ActionKind(StrEnum):
    """Kinds of action, in the order a transition executes them (docs/policies.md)."""

    RETURN = "return"
    """Give a borrowed training GPU back (mandatory; drain, release memory, hand to the trainer)."""
    SHRINK = "shrink"
    """Remove a worker: stop routing, interrupt keeping partial trajectories, free GPUs, resubmit prefixes."""
    REROLE = "rerole"
    """Flip prefill↔decode without restart: drain, switch, re-register."""
    RESTART = "restart"
    """Change between colocated and a disaggregated role: restart the server in the new mode."""
    EXPAND = "expand"
    """Add a worker: background init, weight sync to the latest version, atomic group admission."""


ACTION_ORDER: tuple[ActionKind, ...] = tuple(ActionKind)


class Action(Frozen):
    """One step of a transition on one worker slot.

    An ``expand`` on a ``worker_id`` the state does not hold starts a new worker formed by regrouping GPUs
    (worker sizes, docs/state.md); the slots that held those GPUs are dissolved (stopped first by a ``shrink``
    when they were serving).
    """

    kind: ActionKind
    worker_id: str
    gpu_ids: tuple[str, ...]
    zone: Zone
    from_role: Role | None = Field(description="Rollout role before (None: not serving rollout)")
    to_role: Role | None = Field(description="Rollout role after (None: off, or back with the trainer)")
    group: int | None = Field(default=None, description="Admission group: all members or none")
    reason: str = ""
    dp: int = Field(default=1, ge=1, exclude_if=_is_one, description="Attention-DP ranks of a new worker (SGLang --dp)")

    @property
    def tp(self) -> int:
        """GPUs of the worker the action is on (its TP degree)."""
        return len(self.gpu_ids)


class SlotAssignment(Frozen):
    """The rollout role a slot has in the target configuration (None: not serving rollout)."""

    worker_id: str
    role: Role | None


class SolverInfo(Frozen):
    """How the configuration was found. ``wall_time_s`` is the only field that varies between runs.

    ``objective_s`` is the chosen configuration's exact objective; ``bound_s`` the lower bound the solve that
    found it proved (``None`` for the enumeration or an unproven incumbent). ``backend`` is the resolved
    backend, written ``auto:<name>`` when plan() was asked for ``"auto"``.
    """

    backend: str
    status: str
    objective_s: float
    bound_s: float | None
    rounds: int = 0
    rounding_error: NonNegFloat = 0.0
    solves: int = 0
    wall_time_s: NonNegFloat = 0.0


class DecisionKind(StrEnum):
    """What kind of decision the plan is."""

    INITIAL = "initial"
    KEPT = "kept"
    CHANGED = "changed"
    FORCED = "forced"


class Decision(Frozen):
    """The decision and a sentence saying why."""

    kind: DecisionKind
    reason: str
    borrowing: bool = False
    expanded: bool = False


class PolicyState(Frozen):
    """State the policies carry from one decision to the next (pure functions of inputs and this)."""

    toggle_cost_s: NonNegFloat | None = Field(
        default=None, description="EWMA of measured borrow activation + deactivation seconds"
    )
    preemption_hazard_per_s: NonNegFloat = Field(
        default=0.0, description="EWMA of the preemption hazard of preemptible GPUs"
    )


class Plan(Frozen):
    """A target configuration, the ordered actions that reach it from the current state, and why."""

    mode: Mode
    prefill_workers: int = Field(ge=0)
    decode_workers: int = Field(ge=0)
    colocated_workers: int = Field(ge=0)
    gpus_used: int = Field(ge=0)
    assignment: tuple[SlotAssignment, ...]
    actions: tuple[Action, ...]
    makespan: MakespanBreakdown
    objective_s: float
    transition_cost_s: NonNegFloat
    expected_gain_s: float | None = Field(description="(R/B)·(makespan if nothing optional changes − this one)")
    expected_gain_pct: float | None
    decision: Decision
    solver: SolverInfo
    model: str
    input_digest: str
    policy_state: PolicyState

    @property
    def ratio(self) -> str:
        """``"3P5D"`` for a disaggregated plan, ``"8C"`` for a colocated one."""
        return ratio_label(self.mode, self.prefill_workers, self.decode_workers, self.colocated_workers)

    def roles(self) -> dict[str, Role | None]:
        """Slot id → target rollout role."""
        return {a.worker_id: a.role for a in self.assignment}

    def fingerprint(self) -> str:
        """SHA-256 of the plan without what solvers report with noise: equal for identical inputs.

        Left out: the wall time, and the solver's bound (SCIP's varies in its last digits between identical
        runs); everything decided — roles, actions, the exact objective, the solver status — is in.
        """
        data = self.model_dump(mode="json")
        data["solver"].pop("wall_time_s")
        data["solver"].pop("bound_s")
        return hashlib.sha256(canonical_json(data).encode()).hexdigest()


def canonical_json(data: Any) -> str:
    """JSON with sorted keys and no whitespace: the form digests are taken of."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
