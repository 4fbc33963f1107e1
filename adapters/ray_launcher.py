"""Place SGLang servers on the GPUs of a Ray cluster: one placement group (one bundle) per TP group.

:class:`RayLauncher` implements :class:`~pearl_sched.adapters.launcher.Launcher`. For each server it reserves
a bundle of ``{"GPU": tp, "CPU": 1}`` packed on one node (``STRICT_PACK``: a TP group never spans nodes),
starts a small actor in it, and the actor launches the server from its argv with ``CUDA_VISIBLE_DEVICES`` set to
the GPUs Ray gave it, on that node's IP. ``stop`` stops the server, the actor and the placement group. The
control loop itself runs anywhere that can reach the Ray cluster and the gateway (docs/adapters.md).

A server bound to a node's address is reachable by anything on that network, so :meth:`RayLauncher.start`
refuses a :class:`ServerSpec` without an API key (``PEARL_SCHED_API_KEY`` through
:class:`~pearl_sched.adapters.sglang.SGLangCluster`) unless the launcher was made with
``allow_no_api_key=True``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pearl_sched.adapters.http import API_KEY_ENV, AdapterError
from pearl_sched.adapters.launcher import SGLANG, ServerSpec, SubprocessLauncher
from pearl_sched.errors import MissingExtraError

try:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
except ImportError as exc:  # pragma: no cover - the ray extra installs it
    raise MissingExtraError(exc.name or "ray", "ray") from exc


def bundle(spec: ServerSpec, node_ip: str | None = None) -> dict[str, float]:
    """The one placement-group bundle of ``spec``'s worker: its TP degree in GPUs and a CPU, on one node.

    A worker's size is its bundle: a TP4 worker asks ``{"GPU": 4, "CPU": 1}`` and, under ``STRICT_PACK``, gets
    four GPUs of one node; a plan that mixes sizes gets one such group per worker, each of its own size. With
    ``node_ip`` the bundle also takes a sliver of Ray's ``node:<ip>`` resource, which only that node has.
    """
    out: dict[str, float] = {"GPU": float(len(spec.gpu_ids)), "CPU": 1.0}
    if node_ip is not None:
        out[f"node:{node_ip}"] = 0.001
    return out


class _ServerActor:
    """Runs one server process on the node and GPUs Ray placed it on."""

    def __init__(self, command: Sequence[str], log_dir: str | None) -> None:
        self.launcher = SubprocessLauncher(command, log_dir=log_dir)
        self.handle: Any = None

    def start(self, spec: ServerSpec, ready_timeout_s: float) -> tuple[str, tuple[int, ...]]:
        gpus = tuple(int(g) for g in ray.get_gpu_ids())
        host = spec.host if spec.host not in ("127.0.0.1", "localhost") else ray.util.get_node_ip_address()
        placed = dataclasses.replace(spec, gpu_ids=gpus or spec.gpu_ids, host=host)
        self.handle = self.launcher.start(placed, ready_timeout_s=ready_timeout_s)
        return host, placed.gpu_ids

    def alive(self) -> bool:
        return self.handle is not None and self.handle.alive()

    def stop(self) -> None:
        if self.handle is not None:
            self.launcher.stop(self.handle)
            self.handle = None


@dataclass
class RayHandle:
    """A server started by :class:`RayLauncher`: its spec (with the node's host), actor, placement group, GPUs."""

    spec: ServerSpec
    actor: Any
    group: Any
    devices: tuple[int, ...]

    def alive(self) -> bool:
        """Whether the actor answers within 10 s that its server process is running."""
        try:
            return bool(ray.get(self.actor.alive.remote(), timeout=10))
        except Exception:
            return False


class RayLauncher:
    """Servers as processes of Ray actors, one placement group per TP group."""

    def __init__(
        self,
        command: Sequence[str] = SGLANG,
        *,
        log_dir: str | None = None,
        placement_timeout_s: float = 60.0,
        allow_no_api_key: bool = False,
        node_ips: Mapping[str, str] | None = None,
    ):
        """Launch on the Ray cluster this process is connected to.

        Args:
            command: the argv prefix each actor runs (:data:`~pearl_sched.adapters.launcher.SGLANG` by default).
            log_dir: where each server's log goes, on the node that runs it.
            placement_timeout_s: seconds to wait for a node with the GPUs free.
            allow_no_api_key: start servers without an API key even though they listen on the node's address.
            node_ips: pearl_sched node name (``ServerSpec.node``, the ``node`` of the cluster's GPUs) → the IP of
                the Ray node that has those GPUs: each bundle then also asks for that node's ``node:<ip>``
                resource, so a worker lands on the node the plan put it on. Without it Ray picks any node with
                the GPUs free.

        Raises:
            AdapterError: ``ray.init`` has not been called.
        """
        if not ray.is_initialized():
            raise AdapterError("Ray is not initialised: call ray.init(address=...) before creating a RayLauncher")
        self.command = tuple(command)
        self.log_dir = log_dir
        self.placement_timeout_s = placement_timeout_s
        self.allow_no_api_key = allow_no_api_key
        self.node_ips = dict(node_ips or {})
        self._actor: Any = ray.remote(_ServerActor)

    def start(self, spec: ServerSpec, *, ready_timeout_s: float = 600.0) -> RayHandle:
        """Reserve ``{"GPU": tp, "CPU": 1}`` on one node and start the server there from an actor.

        Returns:
            The handle; its spec's host is the node's IP when ``spec.host`` was loopback.

        Raises:
            AdapterError: no API key (unless allowed), no node with the GPUs free within ``placement_timeout_s``,
                or the server failed to start (the actor and the placement group are removed).
        """
        if spec.api_key is None and not self.allow_no_api_key:
            raise AdapterError(
                f"server {spec.slot} would listen on its node's address without an API key: set"
                f" {API_KEY_ENV} (or ServerSpec.api_key), or make the launcher with allow_no_api_key=True"
            )
        tp = len(spec.gpu_ids)
        node_ip = self.node_ips.get(spec.node) if spec.node is not None else None
        group = placement_group([bundle(spec, node_ip)], strategy="STRICT_PACK", name=f"pearl-sched-{spec.slot}")
        try:
            ray.get(group.ready(), timeout=self.placement_timeout_s)
        except Exception as exc:
            remove_placement_group(group)
            where = f"node {spec.node} ({node_ip})" if node_ip is not None else "no node"
            has = "does not have" if node_ip is not None else "has"
            raise AdapterError(
                f"{where} {has} {tp} free GPU(s) for {spec.slot} (TP{tp}) within {self.placement_timeout_s:g} s: {exc}"
            ) from None
        env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        actor: Any = self._actor.options(
            num_cpus=1,
            num_gpus=tp,
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0),
            runtime_env={"env_vars": env},
        ).remote(self.command, self.log_dir)
        try:
            host, devices = ray.get(actor.start.remote(spec, ready_timeout_s), timeout=ready_timeout_s + 30)
        except Exception as exc:
            ray.kill(actor)
            remove_placement_group(group)
            cause = exc.cause if hasattr(exc, "cause") and exc.cause is not None else exc
            raise AdapterError(f"server {spec.slot} failed to start on Ray: {cause}") from None
        return RayHandle(dataclasses.replace(spec, host=host), actor, group, devices)

    def stop(self, handle: Any, *, grace_s: float = 10.0) -> None:
        """Stop the server (SIGTERM, SIGKILL after ``grace_s``), then kill the actor and free its placement group."""
        assert isinstance(handle, RayHandle)
        with contextlib.suppress(Exception):
            ray.get(handle.actor.stop.remote(), timeout=grace_s + 10)
        ray.kill(handle.actor)
        remove_placement_group(handle.group)
