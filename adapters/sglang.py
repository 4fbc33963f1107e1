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
from pearl_sched.state import GPU, Budget, ClusterState, Mode, Role, Status, Worker, Workload, Zone
from pearl_sched.transition import build_actions

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

    def __post_init__(self) -> None:
        """Validate the values that reach a server's argv and URL.

        Raises:
            InvalidArgumentError: an id that is not a plain name, or a bad host, port or bootstrap port.
        """
        if not isinstance(self.id, str) or not self.id.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise InvalidArgumentError(f"slot id {self.id!r} must be letters, digits, '.', '_' or '-'")
        validate_host(self.host, what=f"slot {self.id}: host")
        validate_port(self.port, what=f"slot {self.id}: port")
        if self.bootstrap_port is not None:
            validate_port(self.bootstrap_port, what=f"slot {self.id}: bootstrap port")


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
    _slots: dict[str, _Slot] = field(default_factory=dict, init=False)
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
        self.journal.claim(self.cluster_id or slots_digest(self.slots))
        replay = self.journal.replay()
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
        reclaims them); a serving slot is an active worker in its role, an idle overlap slot is training, any
        other idle slot is an inactive worker. The budget is every available GPU.
        """
        gpus, workers = [], []
        for slot in self._slots.values():
            spec = slot.spec
            overlap = spec.zone is Zone.OVERLAP
            for g in spec.gpu_ids:
                gpus.append(
                    GPU(
                        id=g,
                        node=spec.node,
                        type=spec.gpu_type,
                        zone=spec.zone,
                        available=slot.available,
                        reclaim_in_s=self._reclaim_in_s if overlap else None,
                    )
                )
            if slot.role is not None:
                workers.append(
                    Worker(
                        id=spec.id,
                        gpu_ids=spec.gpu_ids,
                        role=slot.role,
                        status=Status.ACTIVE,
                        endpoint=f"http://{spec.host}:{spec.port}",
                    )
                )
            elif overlap:
                workers.append(Worker(id=spec.id, gpu_ids=spec.gpu_ids, role=Role.TRAINING, status=Status.ACTIVE))
            else:
                workers.append(Worker(id=spec.id, gpu_ids=spec.gpu_ids, role=Role.DECODE, status=Status.INACTIVE))
        usable = sum(len(s.spec.gpu_ids) for s in self._slots.values() if s.available)
        return ClusterState(
            gpus=tuple(gpus), workers=tuple(workers), workload=self.workload, budget=Budget(max_gpus=usable)
        )

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

        Returns, once the gateway's workers equal the target, which slots changed. With nothing to change it only
        makes sure the gateway runs and registers the current workers (e.g. after resuming from a journal).

        Raises:
            AdapterError: a server or the gateway failed (the journal records the failed action).
        """
        state = self.observe()
        actions = build_actions(state, target.roles(), {})
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
        expands = [a for a in actions if a.kind is ActionKind.EXPAND]
        for action in actions:
            if action.kind is ActionKind.EXPAND:
                continue
            self._run(action, plan_id, functools.partial(self._change, action, mode_change))
        if mode_change:
            self._switch_gateway(target.mode)
        if expands:
            self._admit(expands, plan_id)
        if not self._ensure_gateway():
            self.gateway.sync(self._desired())  # the gateway's workers are exactly the plan's
        return ApplyReport(changed=tuple(a.worker_id for a in actions))

    def _desired(self) -> dict[str, Registration]:
        return {self._url(s): self._registration(s, s.role) for s in self._slots.values() if s.role is not None}

    # -- actions --------------------------------------------------------------------------------------------
    def _run(self, action: Action, plan_id: str, body: Callable[[], dict[str, Any] | None]) -> None:
        if self.on_action is not None:
            self.on_action(action, "begin")
        self.journal.write("begin", action, plan_id)
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

    def _admit(self, actions: Sequence[Action], plan_id: str) -> None:
        """Start every member of the admission group, then register them all — or cancel the group."""
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

                self._run(action, plan_id, start)
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
                self.journal.write("done", undo, plan_id, {"reason": "admission group cancelled"})
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
    )


def slots_digest(slots: Sequence[SlotSpec]) -> str:
    """A cluster id from its slots (ids, hosts, ports, GPUs): a journal of other slots is another cluster's."""
    fields = sorted((s.id, s.node, s.host, s.port, s.gpu_ids, s.devices) for s in slots)
    return "slots-" + hashlib.sha256(repr(fields).encode()).hexdigest()[:16]


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
