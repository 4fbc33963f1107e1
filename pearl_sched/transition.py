"""From a class-level configuration to concrete slots and ordered actions (docs/policies.md).

Minimal change (PEARL Eq. 5–6): with roles counted over {prefill, decode, colocated, off}, the fewest slots
that must change to go from source counts n_src to target counts n_dst is Σ_r max(0, n_src(r) − n_dst(r)).
The MILP charges every change, so it keeps each role up to its target; here, within a class of
interchangeable slots, the slots that change are the ones with the least work in flight (the cheapest to
drain), ties broken by slot id, so the mapping is deterministic.

With worker sizes, classes of new workers (no slots yet) get GPUs here: :func:`place_new_workers` packs them
onto their pool's nodes, largest first, each in an aligned block of free GPUs, around the slots that keep a
role; if those slots leave the nodes too fragmented, the pool is packed afresh (its surviving slots restarted
in place), which the node-block rows of the MILP guarantee to fit.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pearl_sched.plans import ACTION_ORDER, Action, ActionKind, SlotAssignment
from pearl_sched.problem import ROLES, ClassProblem, Counts
from pearl_sched.state import ClusterState, Role, Status, Worker, Zone

logger = logging.getLogger(__name__)

FLIP_ROLES = frozenset({Role.PREFILL, Role.DECODE})
"""Roles a worker can switch between without a restart (SGLang's /pd_role_switch)."""


@dataclass(frozen=True)
class NewWorker:
    """A worker formed by regrouping GPUs: its new slot id, GPUs, role and attention-DP ranks."""

    worker_id: str
    gpu_ids: tuple[str, ...]
    role: Role
    dp: int
    zone: Zone


@dataclass(frozen=True)
class Regrouping:
    """What :func:`place_new_workers` decided: the new workers and the slots whose GPUs they take."""

    new_workers: tuple[NewWorker, ...] = ()
    dissolved: frozenset[str] = frozenset()
    repacked_pools: tuple[str, ...] = ()


def assign_slots(problem: ClassProblem, counts: Counts, workers: Mapping[str, Worker]) -> dict[str, Role | None]:
    """Slot id → target rollout role, for every slot of every class."""
    target: dict[str, Role | None] = {}
    for cls, n in zip(problem.classes, counts, strict=True):
        if cls.is_new:  # new workers get their GPUs in place_new_workers
            continue
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


def place_new_workers(
    state: ClusterState,
    problem: ClassProblem,
    counts: Counts,
    target: Mapping[str, Role | None],
    layouts: Mapping[str, Mapping[str, tuple[str, ...]]],
) -> Regrouping:
    """GPUs for the new workers of ``counts``, per pool; ``layouts[pool]`` maps node → the pool's GPUs there.

    Pool members that keep a role stay where they are; the new workers take aligned blocks of the other GPUs
    (largest first, on the fullest node that has room). When that fails, the whole pool is packed afresh and
    its members that kept a role are restarted in the same role on the new layout.
    """
    workers = {w.id: w for w in state.workers}
    index = state.gpu_index()
    members: dict[str, list[str]] = {}  # pool key → ids of existing slots in the pool
    for cls in problem.classes:
        if cls.pool is not None and not cls.is_new:
            members.setdefault(cls.pool, []).extend(cls.slot_ids)
    placed: list[tuple[tuple[str, ...], Role, int]] = []
    dissolved: set[str] = set()
    repacked: list[str] = []
    for pool in problem.pools:
        items = [
            (cls.tp, cls.dp, role)
            for cls, n in zip(problem.classes, counts, strict=True)
            if cls.is_new and cls.pool == pool.key
            for i, role in enumerate(ROLES)
            for _ in range(n[i])
        ]
        if not items:
            continue
        nodes = layouts[pool.key]
        keepers = [s for s in members.get(pool.key, []) if target.get(s) is not None]
        busy = {g for s in keepers for g in workers[s].gpu_ids}
        blocks = _pack(nodes, busy, items)
        if blocks is None:  # the keepers fragment the nodes: pack the pool afresh, keepers restarted in place
            repacked.append(pool.key)
            logger.info("pool %s packed afresh: %d surviving slot(s) restart on the new layout", pool.key, len(keepers))
            items += [(workers[s].tp, workers[s].dp, target[s]) for s in keepers]  # type: ignore[misc]
            blocks = _pack(nodes, set(), items)
            if blocks is None:  # cannot happen when the node-block rows hold
                raise ValueError(f"pool {pool.key}: the chosen workers do not fit its nodes")
        placed.extend(blocks)
        taken = {g for gpus, _, _ in blocks for g in gpus}
        dissolved.update(s for s in members.get(pool.key, []) if taken & set(workers[s].gpu_ids))
    ids = {w.id for w in state.workers}  # a dissolved slot's id is not reused: actions name one slot each
    new: list[NewWorker] = []
    for gpus, role, dp in sorted(placed, key=lambda p: p[0]):
        size = f"tp{len(gpus)}" + (f"dp{dp}" if dp > 1 else "")
        worker_id, k = f"w-{gpus[0]}-{size}", 1
        while worker_id in ids:
            k += 1
            worker_id = f"w-{gpus[0]}-{size}.{k}"
        ids.add(worker_id)
        new.append(NewWorker(worker_id, gpus, role, dp, index[gpus[0]].zone))
    return Regrouping(tuple(new), frozenset(dissolved), tuple(repacked))


def _pack(
    nodes: Mapping[str, tuple[str, ...]], busy: set[str], items: Sequence[tuple[int, int, Role]]
) -> list[tuple[tuple[str, ...], Role, int]] | None:
    """Aligned blocks for ``items`` (tp, dp, role), largest first, or None when one does not fit."""
    free = {node: [g not in busy for g in gpus] for node, gpus in nodes.items()}
    spare = {node: sum(mask) for node, mask in free.items()}
    order = sorted(nodes)
    out: list[tuple[tuple[str, ...], Role, int]] = []
    for tp, dp, role in sorted(items, key=lambda it: (-it[0], ROLES.index(it[2]), it[1])):
        found = _fullest_fit(order, free, spare, tp, aligned=True) or _fullest_fit(
            order, free, spare, tp, aligned=False
        )
        if found is None:
            return None
        node, slots = found
        for i in slots:
            free[node][i] = False
        spare[node] -= tp
        out.append((tuple(nodes[node][i] for i in slots), role, dp))
    return out


def _fullest_fit(
    order: Sequence[str], free: Mapping[str, list[bool]], spare: Mapping[str, int], tp: int, *, aligned: bool
) -> tuple[str, list[int]] | None:
    """The node with the fewest free GPUs that has a block of ``tp`` (aligned to ``tp`` when asked), and it."""
    best: tuple[int, str, list[int]] | None = None
    for node in order:
        room = spare[node]
        if room < tp or (best is not None and room >= best[0]):
            continue
        mask = free[node]
        if aligned:
            start = next((s for s in range(0, len(mask) - tp + 1, tp) if all(mask[s : s + tp])), None)
            slots = list(range(start, start + tp)) if start is not None else None
        else:
            slots = [i for i, f in enumerate(mask) if f][:tp]
        if slots is not None:
            best = (room, node, slots)
            if room == tp:  # cannot fit tighter
                break
    return (best[1], best[2]) if best is not None else None


def build_actions(
    state: ClusterState,
    target: Mapping[str, Role | None],
    reasons: Mapping[str, str],
    regrouping: Regrouping | None = None,
) -> tuple[Action, ...]:
    """Ordered actions taking ``state`` to ``target``: returns, shrinks, re-roles, restarts, expansions.

    With a ``regrouping``, its new workers are expansions on new slot ids, and a serving slot it dissolves is
    shrunk first.
    """
    actions: list[Action] = []
    index = state.gpu_index()
    regrouping = regrouping or Regrouping()
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
                reason=reasons.get(worker.id, "")
                or ("regrouped into workers of another size" if worker.id in regrouping.dissolved else ""),
            )
        )
    for new in regrouping.new_workers:
        actions.append(
            Action(
                kind=ActionKind.EXPAND,
                worker_id=new.worker_id,
                gpu_ids=new.gpu_ids,
                zone=new.zone,
                from_role=None,
                to_role=new.role,
                group=1,
                reason=f"new TP{len(new.gpu_ids)} worker on regrouped GPUs",
                dp=new.dp,
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
    """The state after the actions succeed: what an adapter reports once a transition is done.

    An expansion on a slot id the state does not hold adds that worker and removes the slots whose GPUs it
    takes (a regrouping); new workers follow the surviving slots, in action order.
    """
    workers = {w.id: w for w in state.workers}
    holder = {g: w.id for w in state.workers for g in w.gpu_ids}
    added: list[str] = []
    for action in actions:
        if action.worker_id not in workers and action.kind is ActionKind.EXPAND and action.to_role is not None:
            for gpu in action.gpu_ids:
                old = holder.pop(gpu, None)
                if old is not None and old in workers:
                    for other in workers.pop(old).gpu_ids:
                        holder.pop(other, None)
                holder[gpu] = action.worker_id
            workers[action.worker_id] = Worker(
                id=action.worker_id, gpu_ids=action.gpu_ids, role=action.to_role, status=Status.ACTIVE, dp=action.dp
            )
            added.append(action.worker_id)
            continue
        worker = workers[action.worker_id]
        if action.to_role is None:
            if action.kind is ActionKind.RETURN:
                update: dict[str, object] = {"role": Role.TRAINING, "status": Status.ACTIVE}
            else:
                update = {"status": Status.INACTIVE, "inflight_tokens": 0}
        else:
            update = {"role": action.to_role, "status": Status.ACTIVE}
        workers[worker.id] = Worker.model_validate({**worker.model_dump(), **update})
    order = [w.id for w in state.workers if w.id in workers] + added
    # Every worker and GPU here is a validated instance (pydantic keeps instances as they are), so only the
    # state's own cross-field rules run again, not every GPU's and worker's.
    fields = {name: getattr(state, name) for name in type(state).model_fields}
    return ClusterState.model_validate({**fields, "workers": tuple(workers[w] for w in order)})


def chosen_sizes(state: ClusterState, actions: Iterable[Action]) -> dict[Role, Counter[str]]:
    """Per rollout role, how many workers of each size serve once ``actions`` are done.

    Sizes are written ``tp2`` (``tp8dp8`` with attention-DP), prefixed ``<gpu type>/`` when the cluster has
    several GPU types.
    """
    after = apply_actions(state, actions)
    index = after.gpu_index()
    typed = len({g.type for g in after.gpus}) > 1
    sizes: dict[Role, Counter[str]] = {}
    for worker in after.workers:
        role = worker.rollout_role
        if role is None:
            continue
        label = worker.size.label
        if typed:
            label = f"{index[worker.gpu_ids[0]].type}/{label}"
        sizes.setdefault(role, Counter())[label] += 1
    return sizes


def minimal_changes(before: Sequence[Role | None], after_counts: Mapping[Role | None, int]) -> int:
    """PEARL Eq. 5–6 generalised: the fewest slots that must change role, ``off`` counted as a role."""
    source = Counter(before)
    return sum(max(0, source[r] - after_counts.get(r, 0)) for r in source)


def assignment_tuple(target: Mapping[str, Role | None]) -> tuple[SlotAssignment, ...]:
    """The plan's assignment, sorted by slot id."""
    return tuple(SlotAssignment(worker_id=w, role=target[w]) for w in sorted(target))
