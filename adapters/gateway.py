"""The SGLang model gateway (``smg`` on PyPI, successor of ``sglang-router`` with the same flags).

:class:`Gateway` starts the real ``smg`` binary in regular or PD mode, stops it, and keeps its worker set
equal to what a plan says (:meth:`Gateway.sync`): registration and removal are asynchronous in the gateway, so
each is polled to completion (a removed URL is re-added only after the gateway answers 404 for it).

With an API key (``api_key``, by default ``$PEARL_SCHED_API_KEY``) the gateway is started with ``--api-key``:
smg then requires ``Authorization: Bearer <key>`` on its data and worker APIs (``/health`` stays open); each
worker is registered with the same key (``api_key`` in ``POST /workers``), which smg needs to reach a worker
started with ``--api-key``.

:meth:`Gateway.attach` uses a router that runs already (smg, or sglang-router from 0.2 on, which serve the same
``/workers`` API) instead of starting one: pearl_sched then never starts, stops or restarts it, and its mode
(regular or PD) is the router's own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from pearl_sched.adapters.http import (
    FROM_ENV,
    AdapterError,
    FromEnv,
    GatewayClient,
    InvalidArgumentError,
    poll,
    resolve_api_key,
    validate_host,
    validate_port,
)
from pearl_sched.adapters.launcher import stop_process_group


@dataclass(frozen=True)
class Registration:
    """How a server is registered: ``regular``, ``prefill`` (with its bootstrap port) or ``decode``."""

    worker_type: str
    bootstrap_port: int | None = None


def find_smg() -> str:
    """Locate the ``smg`` executable: ``$PEARL_SCHED_SMG``, next to this Python (a venv's bin/), or on PATH.

    The gateway is a separate service: installing it in a virtual environment of its own keeps its dependencies
    (grpcio, protobuf) apart from the solvers'.

    Raises:
        AdapterError: none of the three has it.
    """
    beside = Path(sys.executable).with_name("smg")
    found = os.environ.get("PEARL_SCHED_SMG") or (str(beside) if beside.exists() else None) or shutil.which("smg")
    if found is None:
        raise AdapterError(
            "the smg gateway is not installed: pip install smg (PyPI), or set PEARL_SCHED_SMG to its executable"
        )
    return found


class Gateway:
    """One ``smg`` process and its worker registry."""

    def __init__(
        self,
        *,
        port: int,
        host: str = "127.0.0.1",
        pd: bool = False,
        policy: str = "cache_aware",
        metrics_port: int | None = None,
        binary: str | None = None,
        log_dir: str | Path | None = None,
        timeout_s: float = 10.0,
        api_key: str | FromEnv | None = FROM_ENV,
        overload_protection: bool = False,
    ) -> None:
        """Describe the gateway; :meth:`start` launches it.

        Args:
            port: the port its HTTP API listens on.
            host: the address it binds.
            pd: PD-disaggregated mode (``--pd-disaggregation``) instead of regular.
            policy: smg's load-balancing policy (``--policy``); ``cache_aware``, smg's default and the one the
                simulated gateway models by default.
            metrics_port: its Prometheus port; ``port + 1`` when ``None``.
            binary: the ``smg`` executable; :func:`find_smg` when ``None``.
            log_dir: where its log (0600) goes; a new temporary folder when ``None``.
            timeout_s: seconds one call to its API may take.
            api_key: the bearer key; by default ``$PEARL_SCHED_API_KEY``, ``None`` for none.
            overload_protection: smg's worker overload protection (on in smg 1.13 unless
                ``--disable-worker-overload-protection``). Off by default: a rollout must serve every turn, and the
                veto (8 waiting requests or 0.8 KV usage) sends a long context's next turn away from the worker that
                caches it — in the simulator it halves pearl_sched's throughput on the coding-agent scenarios
                (docs/simulator.md, "The load reports"). The simulated gateway follows this default
                (``pearl_sched.sim.router.GATEWAY_OVERLOAD_PROTECTION``).

        Raises:
            InvalidArgumentError: a bad host, port, metrics port or API key.
        """
        self.host, self.port, self.pd, self.policy = validate_host(host), validate_port(port), pd, policy
        self.overload_protection = overload_protection
        self.metrics_port = validate_port(metrics_port if metrics_port is not None else port + 1)
        self.binary = binary
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="pearl-sched-smg-"))
        self.timeout_s = timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.api_key = resolve_api_key(api_key)
        self.client = GatewayClient(self.url, timeout_s=timeout_s, api_key=self.api_key)
        self._removing: dict[str, str] = {}  # url → id of a registration being removed
        self.attached = False  # True for a router pearl_sched did not start (attach): never started or stopped

    @classmethod
    def attach(
        cls,
        url: str,
        *,
        pd: bool | None = None,
        timeout_s: float = 10.0,
        api_key: str | FromEnv | None = FROM_ENV,
    ) -> Gateway:
        """A router that already runs at ``url`` (smg or sglang-router), checked to answer ``GET /workers``.

        Args:
            url: ``http://host:port`` of its HTTP API.
            pd: whether it runs in PD mode; read from the router when ``None``: the types of its workers, or,
                with none, the error its ``/get_server_info`` gives (``no_prefill_servers`` in PD mode,
                ``no_workers`` in regular mode).
            timeout_s: seconds one call to its API may take.
            api_key: its bearer key; by default ``$PEARL_SCHED_API_KEY``, ``None`` for none.

        Raises:
            InvalidArgumentError: a bad URL or API key.
            AdapterError: it does not answer, ``pd`` contradicts its workers, or its mode cannot be read.
        """
        parsed = urlsplit(url)
        if parsed.scheme != "http" or parsed.hostname is None or parsed.port is None:
            raise InvalidArgumentError(f"router URL {url!r} must be http://host:port")
        gateway = cls(port=parsed.port, host=parsed.hostname, pd=bool(pd), timeout_s=timeout_s, api_key=api_key)
        gateway.attached = True
        try:
            gateway.pd = gateway._read_mode(pd)
        except BaseException:
            gateway.client.close()
            raise
        return gateway

    def _read_mode(self, pd: bool | None) -> bool:
        """The attached router's mode: its workers' types, else its empty-router error; checked against ``pd``."""
        try:
            workers = self.client.workers()
        except AdapterError as exc:
            raise AdapterError(f"no router answers GET /workers at {self.url}: {exc}") from exc
        types = {str(w.get("worker_type")) for w in workers}
        if "regular" in types and types & {"prefill", "decode"}:
            raise AdapterError(f"the router at {self.url} has regular and PD workers at once")
        seen_pd = bool(types & {"prefill", "decode"}) if types else self._probe_pd()
        if pd is not None and seen_pd is not None and pd != seen_pd:
            mode = "PD" if seen_pd else "regular"
            raise AdapterError(f"the router at {self.url} runs in {mode} mode, not the pd={pd} asked for")
        if pd is None and seen_pd is None:
            raise AdapterError(f"cannot tell whether the router at {self.url} runs in PD mode: pass pd=")
        return bool(pd if pd is not None else seen_pd)

    def _probe_pd(self) -> bool | None:
        """PD mode from an empty router's ``/get_server_info`` error code (smg 1.13); ``None`` if it says neither."""
        try:
            response = self.client.http.get("/get_server_info", timeout=self.timeout_s)
            code = response.json().get("error", {}).get("code")
        except Exception:
            return None
        return {"no_prefill_servers": True, "no_workers": False}.get(str(code))

    @property
    def url(self) -> str:
        """``http://host:port``: where clients send requests and workers are registered."""
        return f"http://{self.host}:{self.port}"

    def argv(self) -> list[str]:
        """The ``smg launch`` command line (an argv list, never a shell string); it holds the API key.

        Raises:
            AdapterError: no ``binary`` was given and :func:`find_smg` finds none.
        """
        argv = [
            self.binary or find_smg(),
            "launch",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--policy",
            self.policy,
            "--prometheus-host",
            self.host,
            "--prometheus-port",
            str(self.metrics_port),
            "--log-level",
            "warn",
            "--shutdown-grace-period-secs",
            "1",
        ]
        if self.pd:
            argv.append("--pd-disaggregation")
        if not self.overload_protection:
            argv.append("--disable-worker-overload-protection")
        if self.api_key is not None:
            argv += ["--api-key", self.api_key]
        return argv

    def start(self, *, ready_timeout_s: float = 60.0) -> Gateway:
        """Launch ``smg`` in its own session and return once ``GET /workers`` answers 200.

        An attached router is not started: this only checks that it answers.

        Raises:
            AdapterError: it exited (the message has its log's tail), or was not ready in ``ready_timeout_s`` s.
        """
        if self.attached:
            self.client.workers()
            return self
        argv = self.argv()
        log_path = self.log_dir / f"smg-{self.port}.log"
        with os.fdopen(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        def ready() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-10:])
                raise AdapterError(f"smg exited with code {self.process.returncode} at start:\n{tail}")
            try:
                return self.client.http.get("/workers", timeout=1.0).status_code == 200
            except Exception:
                return False

        poll(ready, timeout_s=ready_timeout_s, what=f"the smg gateway on {self.url}")
        return self

    def stop(self, *, grace_s: float = 5.0) -> None:
        """Stop the gateway process (SIGTERM, SIGKILL after ``grace_s`` s); nothing when not running or attached."""
        process, self.process = self.process, None
        if process is not None:
            stop_process_group(process, grace_s=grace_s)

    def __enter__(self) -> Gateway:
        """The gateway, started unless it already runs (an attached one is only checked)."""
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        """Stop the gateway (unless attached) and close the API client."""
        self.stop()
        self.client.close()

    # -- the worker set -------------------------------------------------------------------------------------
    def registered(self) -> dict[str, tuple[str, Registration]]:
        """URL → (gateway worker id, how it is registered), leaving out workers being removed."""
        out = {}
        listed = self.client.workers()
        ids = {str(w["id"]) for w in listed}
        self._removing = {url: wid for url, wid in self._removing.items() if wid in ids}
        for w in listed:
            url = str(w["url"]).rstrip("/")
            if self._removing.get(url) == str(w["id"]):
                continue
            out[url] = (str(w["id"]), Registration(str(w["worker_type"]), w.get("bootstrap_port")))
        return out

    def register(self, url: str, registration: Registration, *, ready_timeout_s: float = 60.0) -> str:
        """Add a worker and wait until it is ready (after its previous registration, if any, is gone)."""
        url = url.rstrip("/")
        if registration.worker_type != "regular" and not self.pd:
            raise AdapterError(f"cannot register {url} as {registration.worker_type}: the gateway is in regular mode")
        self.registered()  # prune finished removals
        if url in self._removing:
            self.client.wait_gone(self._removing.pop(url))
        reg = registration
        return self.client.add(
            url, reg.worker_type, reg.bootstrap_port, ready_timeout_s=ready_timeout_s, worker_api_key=self.api_key
        )

    def deregister(self, url: str, *, wait: bool = False) -> None:
        """Stop routing to ``url`` now; the gateway finishes the removal in the background (about 5 s)."""
        url = url.rstrip("/")
        found = self.registered().get(url)
        if found is not None:
            self.client.remove(found[0], wait=wait)
            if not wait:
                self._removing[url] = found[0]

    def retype(self, url: str, registration: Registration, *, timeout_s: float = 30.0) -> None:
        """``PUT /workers/{id}``: change a registered worker's type in place."""
        found = self.registered().get(url.rstrip("/"))
        if found is None:
            raise AdapterError(f"gateway has no worker {url} to re-type")
        payload: dict[str, object] = {"url": url, "worker_type": registration.worker_type}
        if registration.bootstrap_port is not None:
            payload["bootstrap_port"] = registration.bootstrap_port
        self.client.call("PUT", f"/workers/{found[0]}", json=payload, idempotent=True)

        def done() -> bool:
            now = self.registered().get(url.rstrip("/"))
            return now is not None and now[1].worker_type == registration.worker_type

        poll(done, timeout_s=timeout_s, what=f"gateway to re-type {url} as {registration.worker_type}")

    def sync(self, desired: Mapping[str, Registration]) -> None:
        """Make the gateway's workers exactly ``desired``: remove extras, re-type changed, add missing."""
        current = self.registered()
        wanted = {url.rstrip("/"): reg for url, reg in desired.items()}
        for url in current:
            if url not in wanted:
                self.deregister(url)
        for url, reg in wanted.items():
            have = current.get(url)
            if have is None:
                self.register(url, reg)
            elif have[1] != reg:
                self.retype(url, reg)
