"""From a class-level configuration to concrete slots and ordered actions (docs/policies.md).

Minimal change (PEARL Eq. 5–6): with roles counted over {prefill, decode, colocated, off}, the fewest slots
that must change to go from source counts n_src to target counts n_dst is Σ_r max(0, n_src(r) − n_dst(r)).
The MILP charges every change, so it keeps each role up to its target; here, within a class of
interchangeable slots, the slots that change are the ones with the least work in flight (the cheapest to
drain), ties broken by slot id, so the mapping is deterministic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from pearl_sched.plans import ACTION_ORDER, Action, ActionKind, SlotAssignment
from pearl_sched.problem import ROLES, ClassProblem, Counts
from pearl_sched.state import ClusterState, Role, Status, Worker, Zone

FLIP_ROLES = frozenset({Role.PREFILL, Role.DECODE})
"""Roles a worker can switch between without a restart (SGLang's /pd_role_switch)."""


def assign_slots(problem: ClassProblem, counts: Counts, workers: Mapping[str, Worker]) -> dict[str, Role | None]:
    """Slot id → target rollout role, for every slot of every class."""
    target: dict[str, Role | None] = {}
    for cls, n in zip(problem.classes, counts, strict=True):
        # Busiest slots first: they keep their role; the least loaded ones change.
        slots = sorted(cls.slot_ids, key=lambda s: (-workers[s].inflight_tokens, s))
        wanted: list[Role | None] = []
        if cls.current_role is not None:
            keep = n[ROLES.index(cls.current_role)]
            wanted.extend([cls.current_role] * keep)
        for i, role in enumerate(ROLES):
            if role is not cls.current_role:
                wanted.extend([role] * n[i])
        wanted.extend([None] * (cls.size - len(wanted)))
        if cls.current_role is None:
            slots.sort()
        target.update(zip(slots, wanted, strict=True))
    return target


def build_actions(
    state: ClusterState, target: Mapping[str, Role | None], reasons: Mapping[str, str]
) -> tuple[Action, ...]:
    """Ordered actions taking ``state`` to ``target``: returns, shrinks, re-roles, restarts, expansions."""
    actions: list[Action] = []
    index = state.gpu_index()
    for worker in state.workers:
        before, after = worker.rollout_role, target.get(worker.id)
        if before == after:
            continue
        zone = index[worker.gpu_ids[0]].zone
        kind = _kind(before, after, zone)
        actions.append(
            Action(
                kind=kind,
                worker_id=worker.id,
                gpu_ids=worker.gpu_ids,
                zone=zone,
                from_role=before,
                to_role=after,
                group=1 if kind is ActionKind.EXPAND else None,
                reason=reasons.get(worker.id, ""),
            )
        )
    actions.sort(key=lambda a: (ACTION_ORDER.index(a.kind), a.worker_id))
    return tuple(actions)


def _kind(before: Role | None, after: Role | None, zone: Zone) -> ActionKind:
    if after is None:
        return ActionKind.RETURN if zone is Zone.OVERLAP else ActionKind.SHRINK
    if before is None:
        return ActionKind.EXPAND
    return ActionKind.REROLE if {before, after} == FLIP_ROLES else ActionKind.RESTART


def apply_actions(state: ClusterState, actions: Iterable[Action]) -> ClusterState:
    """The state after the actions succeed: what an adapter reports once a transition is done."""
    workers = {w.id: w for w in state.workers}
    for action in actions:
        worker = workers[action.worker_id]
        if action.to_role is None:
            if action.kind is ActionKind.RETURN:
                workers[worker.id] = worker.model_copy(update={"role": Role.TRAINING, "status": Status.ACTIVE})
            else:
                workers[worker.id] = worker.model_copy(update={"status": Status.INACTIVE, "inflight_tokens": 0})
        else:
            workers[worker.id] = worker.model_copy(update={"role": action.to_role, "status": Status.ACTIVE})
    return ClusterState.model_validate(
        {**state.model_dump(), "workers": [workers[w.id].model_dump() for w in state.workers]}
    )


def minimal_changes(before: Sequence[Role | None], after_counts: Mapping[Role | None, int]) -> int:
    """PEARL Eq. 5–6 generalised: the fewest slots that must change role, ``off`` counted as a role."""
    source = Counter(before)
    return sum(max(0, source[r] - after_counts.get(r, 0)) for r in source)


def assignment_tuple(target: Mapping[str, Role | None]) -> tuple[SlotAssignment, ...]:
    """The plan's assignment, sorted by slot id."""
    return tuple(SlotAssignment(worker_id=w, role=target[w]) for w in sorted(target))
