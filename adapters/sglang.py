"""SGLangCluster: pearl_sched's ClusterAdapter for SGLang servers behind the SGLang model gateway.

It owns a fixed set of worker slots (TP groups of GPUs, each with its port), starts servers through a
:class:`~pearl_sched.adapters.launcher.Launcher`, keeps the ``smg`` gateway's workers equal to the plan, and
carries a plan's actions out in the order docs/policies.md ("Minimal change and ordered actions") gives and
docs/adapters.md ("SGLangCluster") details:

* **return / shrink** — stop routing (gateway ``DELETE``), wait until the server is idle (``/v1/loads``) for up
  to ``drain_s``, then pause with ``abort`` so in-flight requests come back with their partial output for the
  rollout client to resubmit elsewhere; then stop the server and hand a borrowed training GPU back to the
  trainer (keeping a server pre-spawned with its memory released is not done yet);
* **re-role** prefill↔decode — drain, then ``/pd_role_switch`` when the server supports it (feature-detected
  from ``/server_info``: SGLang 0.5.21 on), else a restart; then ``PUT /workers/{id}``. A switch to decode on a
  server that has captured no decode CUDA graphs carries a decode peer's ``decode_cuda_graph_bs`` and
  ``decode_cuda_graph_memory_gb`` (SGLang refuses it without them); with no decode peer to measure, the worker
  is restarted and the log says why. A failed switch replaces the worker;
* **restart** — a colocated↔disaggregated change: drain, stop, start in the new mode (the gateway restarts in
  the new mode too);
* **expand** — for a training GPU ``trainer.lend`` it first; start the server, bring its weights to the cluster's
  version (``/update_weights_from_disk``) and check it, then register the whole admission group: all or nothing.

Every action is journaled before and after it runs (:class:`~pearl_sched.adapters.journal.Journal`, claimed for
this cluster's id); a new SGLangCluster over the same journal rebuilds its view from it and re-observes the slots
whose action never finished, so re-applying the plan does only what is left. A server pid read from the journal
is signalled only while it is still the process that was started (start time and command line,
:mod:`~pearl_sched.adapters.processes`). A gateway process that died (ours, started by :class:`Gateway`) is
restarted and given the plan's workers before the next registration.

The API key (``api_key``, by default ``$PEARL_SCHED_API_KEY``) goes to every server it starts (``--api-key``)
and on every call it makes; it is never logged nor journaled.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import signal
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pearl_sched.adapters.gateway import Gateway, Registration
from pearl_sched.adapters.http import (
    AdapterError,
    DecodeGraphs,
    InvalidArgumentError,
    SGLangServerClient,
    api_key_from_env,
    poll,
    validate_api_key,
    validate_host,
    validate_port,
)
from pearl_sched.adapters.journal import Journal
from pearl_sched.adapters.launcher import Handle, Launcher, ServerSpec, check_server_args
from pearl_sched.adapters.processes import ProcessIdentity, identify, signal_group
from pearl_sched.control import ApplyReport, Target, TrainerAdapter
from pearl_sched.plans import Action, ActionKind, canonical_json
from pearl_sched.state import (
    GPU,
    Budget,
    ClusterState,
    Mode,
    Role,
    Status,
    Worker,
    WorkerSize,
    WorkerSizes,
    Workload,
    Zone,
)
from pearl_sched.transition import NewWorker, Regrouping, build_actions

logger = logging.getLogger(__name__)

SERVER_ROLE = {Role.PREFILL: "prefill", Role.DECODE: "decode", Role.COLOCATED: "regular"}


@dataclass(frozen=True)
class SlotSpec:
    """A worker slot: its GPUs (ids in the cluster state, and device indices on its node), where it serves."""

    id: str
    gpu_ids: tuple[str, ...]
    devices: tuple[int, ...]
    port: int
    zone: Zone = Zone.DEDICATED
    node: str = "node-0"
    host: str = "127.0.0.1"
    bootstrap_port: int | None = None
    gpu_type: str = "h100"
    dp: int = 1  # attention data-parallel ranks inside the TP group (a worker size, docs/state.md)

    def __post_init__(self) -> None:
        """Validate the values that reach a server's argv and URL.

        Raises:
            InvalidArgumentError: an id that is not a plain name, a bad host, port or bootstrap port, device
                indices that do not match the GPU ids one for one, or a ``dp`` that does not divide the TP degree.
        """
        if not isinstance(self.id, str) or not self.id.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise InvalidArgumentError(f"slot id {self.id!r} must be letters, digits, '.', '_' or '-'")
        validate_host(self.host, what=f"slot {self.id}: host")
        validate_port(self.port, what=f"slot {self.id}: port")
        if self.bootstrap_port is not None:
            validate_port(self.bootstrap_port, what=f"slot {self.id}: bootstrap port")
        if not self.gpu_ids or len(self.devices) != len(self.gpu_ids):
            raise InvalidArgumentError(
                f"slot {self.id}: {len(self.gpu_ids)} GPU id(s) and {len(self.devices)} device index(es): give one"
                " device index per GPU"
            )
        if isinstance(self.dp, bool) or not isinstance(self.dp, int) or self.dp < 1 or len(self.gpu_ids) % self.dp:
            raise InvalidArgumentError(
                f"slot {self.id}: dp={self.dp!r} does not divide its TP degree {len(self.gpu_ids)}"
                " (attention-DP ranks split the TP group evenly)"
            )

    @property
    def size(self) -> WorkerSize:
        """The worker size a server on this slot has: TP degree and attention-DP ranks."""
        return WorkerSize(tp=len(self.gpu_ids), dp=self.dp)


@dataclass(frozen=True)
class GPUSpec:
    """A GPU the cluster may regroup into new workers: its id, where it is and its device index on its node.

    The GPUs of the :class:`SlotSpec` s are known from them; ``SGLangCluster(free_gpus=...)`` adds GPUs that no
    slot holds at the start (a node whose workers plan() forms).
    """

    id: str
    node: str
    device: int
    host: str = "127.0.0.1"
    zone: Zone = Zone.DEDICATED
    gpu_type: str = "h100"

    def __post_init__(self) -> None:
        """Validate the host and the device index.

        Raises:
            InvalidArgumentError: a bad host, or a device index that is not a non-negative integer.
        """
        validate_host(self.host, what=f"GPU {self.id}: host")
        if isinstance(self.device, bool) or not isinstance(self.device, int) or self.device < 0:
            raise InvalidArgumentError(f"GPU {self.id}: device {self.device!r} must be a device index")


@dataclass
class _Slot:
    spec: SlotSpec
    role: Role | None = None
    handle: Handle | None = None
    pid: ProcessIdentity | None = None  # a server adopted from a previous controller (no handle)
    available: bool = True
    lent: bool = False  # an overlap slot's GPUs are with rollout


@dataclass
class SGLangCluster:
    """The cluster adapter; see the module docstring."""

    slots: Sequence[SlotSpec]
    launcher: Launcher
    gateway: Gateway
    model_path: str
    workload: Workload
    journal: Journal
    trainer: TrainerAdapter | None = None
    weights_path: str | None = None
    drain_s: float = 30.0
    ready_timeout_s: float = 600.0
    enable_memory_saver: bool = False
    extra_args: tuple[str, ...] = ()
    sglang_version: str | None = None  # the servers' SGLang release; None: the installed one, else the newest
    on_action: Callable[[Action, str], None] | None = None  # a test hook: at "begin" and once a server "started"
    api_key: str | None = field(default_factory=api_key_from_env, repr=False)
    cluster_id: str | None = None  # names the cluster in the journal; default: a digest of the slots
    free_gpus: Sequence[GPUSpec] = ()  # GPUs no slot holds at the start, for workers that plans form (sizes)
    ports: Sequence[int] = ()  # ports new workers take, two each (HTTP and bootstrap), lowest free first
    worker_sizes: WorkerSizes | None = None  # the sizes plan() may regroup GPUs into; observe() reports them
    max_gpus: int | None = None  # the rollout budget observe() reports (default: every available GPU)
    expert_parallel: bool = False  # MoE: launch workers of TP > 1 with --ep-size = TP (experts over the group)
    _slots: dict[str, _Slot] = field(default_factory=dict, init=False)
    _gpus: dict[str, GPUSpec] = field(default_factory=dict, init=False)
    _down: set[str] = field(default_factory=set, init=False)  # unavailable GPUs that no slot holds
    _reclaim_in_s: float = field(default=0.0, init=False)
    _weight_version: str | None = field(default=None, init=False)
    _running: tuple[Action, str] | None = field(default=None, init=False)  # the journaled action in progress

    def __post_init__(self) -> None:
        """Check the arguments, claim the journal and rebuild the slots' roles from it.

        Slots whose journaled action never finished are re-observed from their servers.

        Raises:
            InvalidArgumentError: a model path or extra argument that could inject flags, a bad API key, a key
                the gateway does not share, or duplicate slot ids.
            JournalLockedError: another controller has the journal open.
            ForeignJournalError: the journal belongs to another cluster.
        """
        check_server_args(self.model_path, self.extra_args)
        if self.api_key is not None:
            validate_api_key(self.api_key)
        if self.api_key != self.gateway.api_key:
            raise InvalidArgumentError("the gateway and the servers must share one API key (PEARL_SCHED_API_KEY)")
        self._slots = {s.id: _Slot(s) for s in self.slots}
        if len(self._slots) != len(self.slots):
            raise InvalidArgumentError("slot ids must be unique")
        self._gpus = _inventory(self.slots, self.free_gpus)
        for port in self.ports:
            validate_port(port, what="SGLangCluster ports")
        self.journal.claim(self.cluster_id or slots_digest(self.slots, self.free_gpus))
        replay = self.journal.replay()
        for slot_id in replay.dissolved:
            self._slots.pop(slot_id, None)
        for slot_id, record in replay.slots.items():  # workers earlier plans formed by regrouping GPUs
            spec = _slot_from_record(record)
            if spec is None or not set(spec.gpu_ids) <= set(self._gpus):
                logger.warning("journal: slot %s formed by a regroup is not on this cluster's GPUs; ignored", slot_id)
                continue
            self._slots[slot_id] = _Slot(spec)
        for slot_id, role in replay.roles.items():
            if slot_id in self._slots:
                self._slots[slot_id].role = Role(role) if role else None
                self._slots[slot_id].pid = replay.pids.get(slot_id)
        for record in replay.unfinished:  # died mid-action: believe the server, not the plan
            slot_id = record["action"]["worker_id"]
            if slot_id in self._slots:
                self._reobserve(self._slots[slot_id])
                if self._slots[slot_id].role is not None:  # a server it started: stoppable once verified
                    self._slots[slot_id].pid = replay.pids.get(slot_id)
        self._roll_back_unfinished_regroups(replay.slots, replay.pids)
        if replay.done or replay.unfinished:
            logger.info(
                "resumed from %s: %d done, %d unfinished", self.journal.path, replay.done, len(replay.unfinished)
            )

    # -- what the orchestrator tells us ---------------------------------------------------------------------
    def set_workload(self, workload: Workload) -> None:
        """The rollout work still to do (trajectories, lengths) that :meth:`observe` reports to the planner."""
        self.workload = workload

    def set_available(self, slot_id: str, available: bool) -> None:
        """A preemption notice (or a GPU coming back); a preempted slot's server is gone with it."""
        slot = self._slots[slot_id]
        slot.available = available
        if not available and slot.role is not None:
            self._forget(slot)

    def set_gpu_available(self, gpu_id: str, available: bool) -> None:
        """A preemption notice for one GPU (or its return); a slot holding it goes with it (:meth:`set_available`).

        Raises:
            InvalidArgumentError: ``gpu_id`` is not one of this cluster's GPUs.
        """
        if gpu_id not in self._gpus:
            raise InvalidArgumentError(f"GPU {gpu_id} is not one of this cluster's GPUs")
        holder = next((s for s in self._slots.values() if gpu_id in s.spec.gpu_ids), None)
        if holder is not None:
            self.set_available(holder.spec.id, available)
        elif available:
            self._down.discard(gpu_id)
        else:
            self._down.add(gpu_id)

    def set_reclaim_in(self, seconds: float) -> None:
        """Seconds until the trainer needs the overlap GPUs (0 while it trains)."""
        self._reclaim_in_s = max(0.0, seconds)

    def set_weight_version(self, version: str) -> None:
        """The version every admitted worker must serve (``weights_path`` holds it)."""
        self._weight_version = version

    # -- ClusterAdapter -------------------------------------------------------------------------------------
    def observe(self) -> ClusterState:
        """The slots as a cluster state, from this adapter's own view (no HTTP call).

        Each slot's GPUs are listed with their availability (and, for overlap GPUs, the seconds until the trainer
        reclaims them); a serving slot is an active worker in its role and size, an idle overlap slot is
        training, any other idle slot is an inactive worker. GPUs no slot holds are listed without a worker. The
        budget is every available GPU (at most ``max_gpus``); ``worker_sizes`` goes with the state.
        """
        gpus: list[GPU] = []
        workers: list[Worker] = []
        held: set[str] = set()
        for slot in self._slots.values():
            spec = slot.spec
            held.update(spec.gpu_ids)
            gpus.extend(self._gpu(self._gpus[g], available=slot.available) for g in spec.gpu_ids)
            if slot.role is not None:
                workers.append(
                    Worker(
                        id=spec.id,
                        gpu_ids=spec.gpu_ids,
                        role=slot.role,
                        status=Status.ACTIVE,
                        endpoint=f"http://{spec.host}:{spec.port}",
                        dp=spec.dp,
                    )
                )
            elif spec.zone is Zone.OVERLAP:
                workers.append(
                    Worker(id=spec.id, gpu_ids=spec.gpu_ids, role=Role.TRAINING, status=Status.ACTIVE, dp=spec.dp)
                )
            else:
                workers.append(
                    Worker(id=spec.id, gpu_ids=spec.gpu_ids, role=Role.DECODE, status=Status.INACTIVE, dp=spec.dp)
                )
        gpus.extend(self._gpu(g, available=g.id not in self._down) for g in self._gpus.values() if g.id not in held)
        usable = sum(1 for g in gpus if g.available)
        if self.max_gpus is not None:
            usable = min(usable, self.max_gpus)
        return ClusterState(
            gpus=tuple(gpus),
            workers=tuple(workers),
            workload=self.workload,
            budget=Budget(max_gpus=usable),
            worker_sizes=self.worker_sizes,
        )

    def _gpu(self, gpu: GPUSpec, *, available: bool) -> GPU:
        return GPU(
            id=gpu.id,
            node=gpu.node,
            type=gpu.gpu_type,
            zone=gpu.zone,
            available=available,
            reclaim_in_s=self._reclaim_in_s if gpu.zone is Zone.OVERLAP else None,
        )

    def current_slots(self) -> tuple[SlotSpec, ...]:
        """The slots now: the configured ones less those regrouped away, plus the workers plans formed."""
        return tuple(slot.spec for slot in self._slots.values())

    def telemetry(self) -> Mapping[str, float]:
        """Summed ``/metrics`` of the serving workers (counters and gauges by sample name)."""
        total: dict[str, float] = {}
        for slot in self._slots.values():
            if slot.role is None:
                continue
            client = self._client(slot)
            try:
                for name, value in client.metrics().items():
                    total[name] = total.get(name, 0.0) + value
            except AdapterError as exc:
                logger.warning("telemetry from %s failed: %s", slot.spec.id, exc)
            finally:
                client.close()
        return total

    def apply(self, target: Target) -> ApplyReport:
        """Carry out the actions that move the slots to ``target``, in order, journaling each.

        A target with actions (a :class:`~pearl_sched.plans.Plan`) may form new workers by regrouping GPUs: an
        expand on a slot id the cluster does not hold names the new worker's GPUs and attention-DP ranks. The
        slots whose GPUs it takes are drained and stopped first (a shrink, nothing in flight is lost); the new
        worker is launched at its size on exactly those GPUs and admitted with its group; the old slots are
        then dissolved. Every new worker is checked before anything is touched.

        Returns, once the gateway's workers equal the target, which slots changed. With nothing to change it only
        makes sure the gateway runs and registers the current workers (e.g. after resuming from a journal).

        Raises:
            InvalidArgumentError: a new worker that cannot be formed (unknown or unavailable GPUs, GPUs on several
                nodes or more than its node holds, a ``dp`` not dividing its TP degree, a GPU given twice or
                kept by a serving slot, no free ports), or a slot the target names that the cluster lacks;
                nothing was changed.
            AdapterError: a server or the gateway failed (the journal records the failed action).
        """
        state = self.observe()
        wanted = target.roles()
        regrouping = self._regrouping(wanted, getattr(target, "actions", ()))
        new_ids = {n.worker_id for n in regrouping.new_workers}
        roles = {k: v for k, v in wanted.items() if k not in new_ids and k not in regrouping.dissolved}
        actions = build_actions(state, roles, {}, regrouping)
        if not actions:
            if not self._ensure_gateway():
                self.gateway.sync(self._desired())  # e.g. after resuming from a journal
            return ApplyReport()
        plan_id = _digest(actions)
        mode_change = (target.mode is Mode.DISAGGREGATED) != self.gateway.pd
        if mode_change and self.gateway.attached:
            want = "PD" if target.mode is Mode.DISAGGREGATED else "regular"
            raise AdapterError(
                f"the router at {self.gateway.url} was attached, not started by pearl_sched, so it cannot be"
                f" restarted in {want} mode: this plan changes mode; nothing was changed"
            )
        new_specs = self._new_slot_specs(regrouping.new_workers)
        expands = [a for a in actions if a.kind is ActionKind.EXPAND]
        for action in actions:
            if action.kind is ActionKind.EXPAND:
                continue
            self._run(action, plan_id, functools.partial(self._change, action, mode_change))
        if mode_change:
            self._switch_gateway(target.mode)
        if expands:
            for spec in new_specs:
                self._slots[spec.id] = _Slot(spec)
            self._admit(expands, plan_id, {spec.id: spec for spec in new_specs})
        for slot_id in sorted(regrouping.dissolved):  # their GPUs serve in the new workers now
            self._dissolve(slot_id, plan_id)
        if not self._ensure_gateway():
            self.gateway.sync(self._desired())  # the gateway's workers are exactly the plan's
        return ApplyReport(changed=tuple(a.worker_id for a in actions))

    # -- worker sizes ---------------------------------------------------------------------------------------
    def _regrouping(self, roles: Mapping[str, Role | None], actions: Sequence[Action]) -> Regrouping:
        """The new workers ``roles`` names (with GPUs from the expand ``actions``) and the slots they dissolve.

        Raises:
            InvalidArgumentError: see :meth:`apply`; raised before anything is changed.
        """
        expands = {a.worker_id: a for a in actions if a.kind is ActionKind.EXPAND and a.worker_id not in self._slots}
        new: list[NewWorker] = []
        owner: dict[str, str] = {}
        for worker_id, role in roles.items():
            if worker_id in self._slots or role is None:
                continue
            action = expands.get(worker_id)
            if action is None:
                raise InvalidArgumentError(
                    f"target: {worker_id} is to serve as {role.value}, but the cluster has no such slot and no expand"
                    " action says which GPUs form it; nothing was changed"
                )
            zone = self._check_new_worker(action)
            for gpu in action.gpu_ids:
                if gpu in owner:
                    raise InvalidArgumentError(
                        f"target: GPU {gpu} is in two new workers, {owner[gpu]} and {worker_id}; nothing was changed"
                    )
                owner[gpu] = worker_id
            new.append(NewWorker(worker_id, tuple(action.gpu_ids), role, action.dp, zone))
        dissolved: set[str] = set()
        for slot in self._slots.values():
            taken = sorted(set(slot.spec.gpu_ids) & set(owner))
            if not taken:
                continue
            keep = roles.get(slot.spec.id)
            if keep is not None:
                raise InvalidArgumentError(
                    f"target: GPU {taken[0]} would be in new worker {owner[taken[0]]} and in slot {slot.spec.id},"
                    f" which the target keeps serving as {keep.value}; nothing was changed"
                )
            dissolved.add(slot.spec.id)
        if new:
            need, free = 2 * len(new), len(self._free_ports())
            if free < need:
                raise InvalidArgumentError(
                    f"target forms {len(new)} new worker(s), which need {need} ports (HTTP and bootstrap); "
                    f"SGLangCluster(ports=...) has {free} free; nothing was changed"
                )
        return Regrouping(tuple(new), frozenset(dissolved))

    def _check_new_worker(self, action: Action) -> Zone:
        """Refuse a new worker that cannot be formed on this cluster's GPUs; return its zone."""
        where = f"new worker {action.worker_id} (TP{len(action.gpu_ids)})"
        unknown = [g for g in action.gpu_ids if g not in self._gpus]
        if unknown:
            raise InvalidArgumentError(f"{where}: GPU(s) {unknown} are not this cluster's; nothing was changed")
        if len(set(action.gpu_ids)) != len(action.gpu_ids):
            raise InvalidArgumentError(f"{where}: a GPU is listed twice; nothing was changed")
        if len(action.gpu_ids) % action.dp:
            raise InvalidArgumentError(
                f"{where}: dp={action.dp} does not divide its TP degree {len(action.gpu_ids)} (attention-DP ranks"
                " split the TP group evenly); nothing was changed"
            )
        members = [self._gpus[g] for g in action.gpu_ids]
        nodes = sorted({g.node for g in members})
        if len(nodes) > 1:
            per_node = Counter(g.node for g in self._gpus.values())
            largest = max(per_node.values())
            fits = "" if len(members) <= largest else f"; no node holds {len(members)} GPUs (the largest has {largest})"
            raise InvalidArgumentError(
                f"{where}: its GPUs are on nodes {nodes}, but a worker's GPUs must be on one node{fits};"
                " nothing was changed"
            )
        for attr in ("zone", "gpu_type", "host"):
            values = sorted({str(getattr(g, attr)) for g in members})
            if len(values) > 1:
                raise InvalidArgumentError(f"{where}: its GPUs mix {attr}s {values}; nothing was changed")
        down = {g for s in self._slots.values() if not s.available for g in s.spec.gpu_ids} | self._down
        lost = [g for g in action.gpu_ids if g in down]
        if lost:
            raise InvalidArgumentError(f"{where}: GPU(s) {lost} are unavailable (preempted); nothing was changed")
        return members[0].zone

    def _free_ports(self) -> list[int]:
        used = {p for s in self._slots.values() for p in (s.spec.port, s.spec.bootstrap_port) if p is not None}
        return sorted(set(self.ports) - used)

    def _new_slot_specs(self, new_workers: Sequence[NewWorker]) -> list[SlotSpec]:
        """Slots for the new workers: their GPUs' devices and node, two free ports each."""
        ports = self._free_ports()
        specs = []
        for i, worker in enumerate(new_workers):
            first = self._gpus[worker.gpu_ids[0]]
            specs.append(
                SlotSpec(
                    id=worker.worker_id,
                    gpu_ids=worker.gpu_ids,
                    devices=tuple(self._gpus[g].device for g in worker.gpu_ids),
                    port=ports[2 * i],
                    zone=first.zone,
                    node=first.node,
                    host=first.host,
                    bootstrap_port=ports[2 * i + 1],
                    gpu_type=first.gpu_type,
                    dp=worker.dp,
                )
            )
        return specs

    def _dissolve(self, slot_id: str, plan_id: str) -> None:
        """Drop a slot whose GPUs new workers took (it serves nothing now), and journal that."""
        self._journal_dissolved(self._slots.pop(slot_id).spec, None, "regrouped into workers of another size", plan_id)

    def _journal_dissolved(self, spec: SlotSpec, role: Role | None, reason: str, plan_id: str) -> None:
        """Journal that the slot ``spec`` (serving as ``role``) is gone, so a resumed controller drops it too."""
        record = Action(
            kind=ActionKind.SHRINK,
            worker_id=spec.id,
            gpu_ids=spec.gpu_ids,
            zone=spec.zone,
            from_role=role,
            to_role=None,
            reason=reason,
            dp=spec.dp,
        )
        self.journal.write("done", record, plan_id, {"dissolved": True})

    def _roll_back_unfinished_regroups(self, formed: Mapping[str, Any], pids: Mapping[str, ProcessIdentity]) -> None:
        """On resume: a worker formed by a regroup whose old slots were never dissolved did not finish forming.

        Its server (if the journal has its pid and it is still ours) is stopped and it is dropped, so the old
        slots hold the GPUs again (stopped: their shrinks were done); re-applying the plan forms it again.
        """
        for slot_id in reversed(list(formed)):  # newest first: an older formed worker is what it took GPUs from
            slot = self._slots.get(slot_id)
            if slot is None:
                continue
            gpus = set(slot.spec.gpu_ids)
            if not any(gpus & set(o.spec.gpu_ids) for o in self._slots.values() if o is not slot):
                continue
            logger.warning("journal: the regroup that formed %s did not finish; rolling it back", slot_id)
            slot.pid = slot.pid or pids.get(slot_id)
            self._stop(slot)
            self._slots.pop(slot_id)
            self._journal_dissolved(slot.spec, slot.role, "unfinished regroup rolled back", "resume")

    def _desired(self) -> dict[str, Registration]:
        return {self._url(s): self._registration(s, s.role) for s in self._slots.values() if s.role is not None}

    # -- actions --------------------------------------------------------------------------------------------
    def _run(
        self,
        action: Action,
        plan_id: str,
        body: Callable[[], dict[str, Any] | None],
        begin: Mapping[str, Any] | None = None,
    ) -> None:
        if self.on_action is not None:
            self.on_action(action, "begin")
        self.journal.write("begin", action, plan_id, begin)
        self._running = (action, plan_id)
        try:
            extra = body() or {}
        except BaseException as exc:
            if isinstance(exc, Exception):
                self.journal.write("failed", action, plan_id, {"error": str(exc)})
            raise
        finally:
            self._running = None
        self.journal.write("done", action, plan_id, extra)

    def _change(self, action: Action, mode_change: bool) -> dict[str, Any] | None:
        slot = self._slots[action.worker_id]
        if action.kind in (ActionKind.RETURN, ActionKind.SHRINK):
            self._drain(slot)
            self._stop(slot)
            slot.role = None
            if action.kind is ActionKind.RETURN and self.trainer is not None:
                self.trainer.reclaim(slot.spec.gpu_ids, deadline_s=max(self._reclaim_in_s, 0.0))
                slot.lent = False
            return None
        assert action.to_role is not None
        if action.kind is ActionKind.REROLE and not mode_change:
            return self._rerole(slot, action.to_role)
        # restart: a colocated↔disaggregated change
        self._drain(slot)
        self._stop(slot)
        slot.role = None
        return self._start(slot, action.to_role, register=not mode_change)

    def _rerole(self, slot: _Slot, role: Role) -> dict[str, Any] | None:
        self._drain(slot)
        client = self._client(slot)
        try:
            info = client.server_info()
            if client.supports_role_switch(info):
                own = client.decode_graphs(info) if role is Role.DECODE else None
                needs_peer = own is not None and not own.batch_sizes  # SGLang would capture decode graphs
                graphs = self._peer_decode_graphs(slot) if needs_peer else None
                if needs_peer and graphs is None:
                    logger.warning(
                        "%s has no decode CUDA graphs and no decode peer reports their footprint"
                        " (decode_cuda_graph_memory_gb): restarting it as decode instead of switching",
                        slot.spec.id,
                    )
                else:
                    try:
                        client.role_switch(SERVER_ROLE[role], graphs)
                    except AdapterError as exc:
                        logger.warning("role switch of %s failed (%s); replacing the worker", slot.spec.id, exc)
                    else:
                        slot.role = role
                        self._register(slot)
                        return None
        finally:
            client.close()
        self._stop(slot)
        slot.role = None
        return self._start(slot, role, register=True)

    def _peer_decode_graphs(self, slot: _Slot) -> DecodeGraphs | None:
        """Find the decode CUDA graphs ``slot`` must carry to switch to decode.

        Returns:
            A serving decode peer's captured graphs (batch sizes and measured footprint), or None when no peer
            reports them.
        """
        for peer in self._slots.values():
            if peer is slot or peer.role is not Role.DECODE:
                continue
            with self._client(peer) as peer_client:
                try:
                    graphs = peer_client.decode_graphs()
                except AdapterError as exc:
                    logger.warning("decode peer %s did not answer (%s)", peer.spec.id, exc)
                    continue
            if graphs is not None and graphs.batch_sizes:
                return graphs
        return None

    def _admit(self, actions: Sequence[Action], plan_id: str, formed: Mapping[str, SlotSpec]) -> None:
        """Start every member of the admission group, then register them all — or cancel the group.

        ``formed`` holds the slots of members that regroup GPUs into a new worker: their spec is journaled with
        the expand, and a cancelled group drops them again.
        """
        started: list[_Slot] = []
        try:
            for action in actions:
                slot = self._slots[action.worker_id]
                assert action.to_role is not None

                def start(slot: _Slot = slot, role: Role = action.to_role) -> dict[str, Any]:
                    started.append(slot)  # before it starts: a failure after launch still stops it
                    if slot.spec.zone is Zone.OVERLAP and self.trainer is not None:
                        self.trainer.lend(slot.spec.gpu_ids)
                        slot.lent = True
                    return self._start(slot, role, register=False)

                spec = formed.get(action.worker_id)
                self._run(action, plan_id, start, {"slot": _slot_record(spec)} if spec is not None else None)
            for slot in started:
                self._register(slot)
        except Exception as exc:
            by_slot = {a.worker_id: a for a in actions}
            for slot in started:
                with contextlib.suppress(AdapterError):
                    self.gateway.deregister(self._url(slot))
                self._stop(slot)
                slot.role = None
                if slot.lent and self.trainer is not None:
                    self.trainer.reclaim(slot.spec.gpu_ids, deadline_s=0.0)
                    slot.lent = False
                # Its expand is journaled done: record the undo, or a restarted controller believes it serves.
                expand = by_slot[slot.spec.id]
                undo = expand.model_copy(
                    update={"kind": ActionKind.SHRINK, "from_role": expand.to_role, "to_role": None}
                )
                gone = slot.spec.id in formed  # a worker the regroup was forming: its old slots keep the GPUs
                extra: dict[str, Any] = {"reason": "admission group cancelled"} | ({"dissolved": True} if gone else {})
                self.journal.write("done", undo, plan_id, extra)
            for slot_id in formed:
                self._slots.pop(slot_id, None)
            ids = ", ".join(a.worker_id for a in actions)
            raise AdapterError(f"admission of [{ids}] cancelled, nothing admitted: {exc}") from exc

    def _start(self, slot: _Slot, role: Role, *, register: bool) -> dict[str, Any]:
        spec = slot.spec
        server = ServerSpec(
            slot=spec.id,
            role=SERVER_ROLE[role],
            model_path=self.model_path,
            port=spec.port,
            host=spec.host,
            gpu_ids=spec.devices,
            bootstrap_port=spec.bootstrap_port,
            enable_memory_saver=self.enable_memory_saver or spec.zone is Zone.OVERLAP,
            extra_args=self.extra_args,
            node=spec.node,
            sglang_version=self.sglang_version,
            api_key=self.api_key,
            dp=spec.dp,
            ep=len(spec.gpu_ids) if self.expert_parallel else 1,
        )
        slot.handle = self.launcher.start(server, ready_timeout_s=self.ready_timeout_s)
        slot.role = role
        process = getattr(slot.handle, "process", None)
        identity = identify(process.pid) if process is not None else None
        record = identity.to_record() if identity is not None else {}
        if self._running is not None:  # so a controller that dies before "done" leaves a stoppable server
            self.journal.write("started", self._running[0], self._running[1], record)
            if self.on_action is not None:
                self.on_action(self._running[0], "started")
        self._sync_weights(slot)
        if register:
            self._register(slot)
        return record

    def _sync_weights(self, slot: _Slot) -> None:
        """Bring a new worker to the cluster's weight version and check it before it is admitted."""
        if self._weight_version is None:
            return
        client = self._client(slot)
        try:
            if client.weight_version() != self._weight_version:
                if self.weights_path is None:
                    raise AdapterError(f"{slot.spec.id} serves other weights and no weights_path is set")
                client.update_weights_from_disk(self.weights_path, self._weight_version)
            have = client.weight_version()
            if have != self._weight_version:
                raise AdapterError(f"{slot.spec.id} serves weight version {have}, not {self._weight_version}")
        finally:
            client.close()

    def _drain(self, slot: _Slot) -> None:
        """Stop routing to the slot and let it finish; abort what is left after ``drain_s``."""
        url = self._url(slot)
        try:
            self.gateway.deregister(url)
        except AdapterError as exc:
            logger.warning("could not deregister %s: %s", url, exc)
        client = self._client(slot)
        try:
            try:
                poll(lambda: client.running_requests() == 0, timeout_s=self.drain_s, every_s=0.05, what=f"{url} idle")
            except AdapterError:
                client.pause("abort")  # in-flight requests return partial output for the client to resubmit
                poll(lambda: client.running_requests() == 0, timeout_s=10.0, every_s=0.05, what=f"{url} aborted")
                client.resume_generation()
        except AdapterError as exc:
            logger.warning("drain of %s incomplete: %s", url, exc)
        finally:
            client.close()

    def _stop(self, slot: _Slot) -> None:
        if slot.handle is not None:
            self.launcher.stop(slot.handle)
            slot.handle = None
        elif slot.pid is not None:  # adopted from a previous controller's journal: signalled only if still ours
            signal_group(slot.pid, signal.SIGTERM)
        slot.pid = None

    def _forget(self, slot: _Slot) -> None:
        """The slot's GPUs are gone: drop it from the gateway, clean up what is left locally."""
        try:
            self.gateway.deregister(self._url(slot))
        except AdapterError as exc:
            logger.warning("could not deregister preempted %s: %s", slot.spec.id, exc)
        self._stop(slot)
        slot.role = None

    def _register(self, slot: _Slot) -> None:
        """Register a serving slot with the gateway (restarting a gateway that died, which registers all)."""
        assert slot.role is not None
        if not self._ensure_gateway():
            self.gateway.register(self._url(slot), self._registration(slot, slot.role))

    def _ensure_gateway(self) -> bool:
        """Restart our gateway if its process died and give it the serving workers; True if it did."""
        process = self.gateway.process
        if process is None or process.poll() is None:
            return False
        logger.warning("the gateway on %s exited (code %s); restarting it", self.gateway.url, process.returncode)
        self.gateway.stop()
        self.gateway.start()
        self.gateway.sync(self._desired())
        return True

    def _switch_gateway(self, mode: Mode) -> None:
        """Restart the gateway in ``mode`` and register every serving worker with it."""
        self.gateway.stop()
        self.gateway.client.close()
        self.gateway = replace_gateway(self.gateway, pd=mode is Mode.DISAGGREGATED)
        self.gateway.start()
        self.gateway.sync(self._desired())

    def _reobserve(self, slot: _Slot) -> None:
        client = self._client(slot)
        try:
            info = client.server_info() if client.healthy() else None
        except AdapterError:
            info = None
        finally:
            client.close()
        if info is None:
            slot.role = None
            return
        mode = client.live_role(info)
        slot.role = {"prefill": Role.PREFILL, "decode": Role.DECODE}.get(mode, Role.COLOCATED)

    def shutdown(self) -> None:
        """Stop every server this adapter started and release the journal (the gateway is the caller's)."""
        for slot in self._slots.values():
            self._stop(slot)
            slot.role = None
        self.journal.close()

    # -- helpers --------------------------------------------------------------------------------------------
    def _client(self, slot: _Slot) -> SGLangServerClient:
        return SGLangServerClient(self._url(slot), timeout_s=10.0, attempts=3, backoff_s=0.05, api_key=self.api_key)

    @staticmethod
    def _url(slot: _Slot) -> str:
        return f"http://{slot.spec.host}:{slot.spec.port}"

    @staticmethod
    def _registration(slot: _Slot, role: Role) -> Registration:
        if role is Role.PREFILL:
            return Registration("prefill", slot.spec.bootstrap_port)
        return Registration("decode" if role is Role.DECODE else "regular")


def replace_gateway(gateway: Gateway, *, pd: bool) -> Gateway:
    """The same gateway settings in the other mode."""
    return Gateway(
        port=gateway.port,
        host=gateway.host,
        pd=pd,
        policy=gateway.policy,
        metrics_port=gateway.metrics_port,
        binary=gateway.binary,
        log_dir=gateway.log_dir,
        timeout_s=gateway.timeout_s,
        api_key=gateway.api_key,
        overload_protection=gateway.overload_protection,
    )


def slots_digest(slots: Sequence[SlotSpec], free_gpus: Sequence[GPUSpec] = ()) -> str:
    """A cluster id from its slots (ids, hosts, ports, GPUs) and free GPUs: a journal of others is another's."""
    fields = sorted((s.id, s.node, s.host, s.port, s.gpu_ids, s.devices) for s in slots)
    if free_gpus:  # left out when there are none, so journals of clusters without them keep their id
        fields.append(sorted((g.id, g.node, g.host, g.device) for g in free_gpus))  # type: ignore[arg-type]
    return "slots-" + hashlib.sha256(repr(fields).encode()).hexdigest()[:16]


def _inventory(slots: Sequence[SlotSpec], free_gpus: Sequence[GPUSpec]) -> dict[str, GPUSpec]:
    """Every GPU the cluster knows, by id: the slots' and the free ones; no GPU or device twice.

    Raises:
        InvalidArgumentError: a GPU id in two slots (or a slot and ``free_gpus``), or one device of a node given
            two GPU ids.
    """
    gpus: dict[str, GPUSpec] = {}
    holder: dict[str, str] = {}
    known = [
        (GPUSpec(g, s.node, d, s.host, s.zone, s.gpu_type), f"slot {s.id}")
        for s in slots
        for g, d in zip(s.gpu_ids, s.devices, strict=True)
    ] + [(g, "free_gpus") for g in free_gpus]
    devices: dict[tuple[str, int], str] = {}
    for gpu, where in known:
        if gpu.id in gpus:
            raise InvalidArgumentError(f"GPU {gpu.id} is in {holder[gpu.id]} and in {where}: a GPU serves one worker")
        device = (gpu.node, gpu.device)
        if device in devices:
            raise InvalidArgumentError(
                f"{where}: device {gpu.device} of {gpu.node} is GPU {devices[device]} and GPU {gpu.id}"
            )
        gpus[gpu.id], holder[gpu.id], devices[device] = gpu, where, gpu.id
    return gpus


def _slot_record(spec: SlotSpec) -> dict[str, Any]:
    """A formed slot as the journal keeps it (what a resuming controller rebuilds it from)."""
    return {
        "id": spec.id,
        "gpu_ids": list(spec.gpu_ids),
        "devices": list(spec.devices),
        "port": spec.port,
        "zone": spec.zone.value,
        "node": spec.node,
        "host": spec.host,
        "bootstrap_port": spec.bootstrap_port,
        "gpu_type": spec.gpu_type,
        "dp": spec.dp,
    }


def _slot_from_record(record: Mapping[str, Any]) -> SlotSpec | None:
    """The slot a journal record describes, or None when the record is damaged."""
    try:
        return SlotSpec(
            id=str(record["id"]),
            gpu_ids=tuple(str(g) for g in record["gpu_ids"]),
            devices=tuple(int(d) for d in record["devices"]),
            port=int(record["port"]),
            zone=Zone(record["zone"]),
            node=str(record["node"]),
            host=str(record["host"]),
            bootstrap_port=None if record.get("bootstrap_port") is None else int(record["bootstrap_port"]),
            gpu_type=str(record["gpu_type"]),
            dp=int(record.get("dp", 1)),
        )
    except (KeyError, TypeError, ValueError, InvalidArgumentError):
        return None


def _digest(actions: Sequence[Action]) -> str:
    return hashlib.sha256(canonical_json([a.model_dump(mode="json") for a in actions]).encode()).hexdigest()[:16]


def local_slots(
    count: int,
    *,
    tp: int = 1,
    base_port: int = 30000,
    zone: Zone = Zone.DEDICATED,
    prefix: str = "w",
    gpu_type: str = "h100",
    first_device: int = 0,
) -> list[SlotSpec]:
    """``count`` slots on this machine: consecutive devices, a port and a bootstrap port each."""
    return [
        SlotSpec(
            id=f"{prefix}{i:02d}",
            gpu_ids=tuple(f"{prefix}-gpu{first_device + i * tp + j}" for j in range(tp)),
            devices=tuple(first_device + i * tp + j for j in range(tp)),
            port=base_port + 2 * i,
            bootstrap_port=base_port + 2 * i + 1,
            zone=zone,
            gpu_type=gpu_type,
        )
        for i in range(count)
    ]
