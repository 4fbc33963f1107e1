"""Starting and stopping SGLang servers: from an argv list (never a shell string), locally or with Ray.

:func:`server_argv` turns a :class:`ServerSpec` into ``sglang.launch_server`` flags (DESIGN.md §11). A
:class:`Launcher` runs it: :class:`SubprocessLauncher` on this machine with ``CUDA_VISIBLE_DEVICES`` set to
the worker's GPUs, :class:`~pearl_sched.adapters.ray_launcher.RayLauncher` on any node of a Ray cluster.
``start`` returns once the server answers ``/health``, or raises :class:`AdapterError` with the tail of its
output if it exits or times out first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from pearl_sched.adapters.http import AdapterError, SGLangServerClient, poll
from pearl_sched.adapters.sglang_versions import (
    ENABLE_PD_ROLE_SWITCH,
    NEWEST,
    SGLangRelease,
    check_argv,
    installed_version,
    release_for,
    sglang_parser,
)

SGLANG = (sys.executable, "-m", "sglang.launch_server")
FAKE = (sys.executable, "-m", "pearl_sched.adapters.fake_sglang")


@dataclass(frozen=True)
class ServerSpec:
    """One SGLang server: a worker slot in one role on its GPUs."""

    slot: str
    role: str  # "regular" (colocated), "prefill" or "decode"
    model_path: str
    port: int
    gpu_ids: tuple[int, ...]
    host: str = "127.0.0.1"
    bootstrap_port: int | None = None
    transfer_backend: str = "mooncake"
    enable_role_switch: bool = True
    enable_memory_saver: bool = False
    extra_args: tuple[str, ...] = ()
    node: str | None = None
    sglang_version: str | None = None  # the servers' SGLang; None: the installed one, else the newest known

    @property
    def release(self) -> SGLangRelease:
        """The SGLang release whose flags and endpoints this server has."""
        return release_for(self.sglang_version or installed_version() or NEWEST.version)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def server_argv(spec: ServerSpec, command: Sequence[str] = SGLANG) -> list[str]:
    """The argv of ``sglang.launch_server`` (or a drop-in with the same flags) for ``spec``.

    Flags that not every release has are passed only to the releases that have them
    (:mod:`~pearl_sched.adapters.sglang_versions`); when the real ``sglang`` is importable here, the argv is also
    parsed by its own ``ServerArgs`` parser before anything starts.

    Raises:
        SGLangCompatibilityError: The installed SGLang's parser rejects the argv.
    """
    release = spec.release
    argv = [
        *command,
        "--model-path",
        spec.model_path,
        "--host",
        spec.host,
        "--port",
        str(spec.port),
        "--tp-size",
        str(len(spec.gpu_ids)),
        "--base-gpu-id",
        "0",  # CUDA_VISIBLE_DEVICES holds exactly the worker's GPUs
        "--enable-metrics",
        "--skip-server-warmup",
    ]
    if spec.role in ("prefill", "decode"):
        argv += ["--disaggregation-mode", spec.role, "--disaggregation-transfer-backend", spec.transfer_backend]
        if spec.bootstrap_port is not None:
            argv += ["--disaggregation-bootstrap-port", str(spec.bootstrap_port)]
        if spec.enable_role_switch and release.has(ENABLE_PD_ROLE_SWITCH):
            argv.append(ENABLE_PD_ROLE_SWITCH)
    elif spec.role != "regular":
        raise ValueError(f"server role must be regular, prefill or decode, not {spec.role!r}")
    if spec.enable_memory_saver:
        argv.append("--enable-memory-saver")
    argv += list(spec.extra_args)
    if tuple(command) == SGLANG and spec.sglang_version in (None, installed_version()):
        parser = sglang_parser()
        if parser is not None:
            check_argv(argv[len(command) :], parser)
    return argv


class Handle(Protocol):
    """A running server."""

    spec: ServerSpec

    def alive(self) -> bool: ...


class Launcher(Protocol):
    """Starts servers and stops them."""

    def start(self, spec: ServerSpec, *, ready_timeout_s: float = 600.0) -> Handle: ...

    def stop(self, handle: Handle, *, grace_s: float = 10.0) -> None: ...


@dataclass
class ProcessHandle:
    spec: ServerSpec
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    log_path: Path = field(default_factory=Path)

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class SubprocessLauncher:
    """Servers as local processes, each in its own session so stopping one stops its children."""

    def __init__(self, command: Sequence[str] = SGLANG, *, log_dir: str | Path | None = None) -> None:
        self.command = tuple(command)
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="pearl-sched-servers-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, spec: ServerSpec, *, ready_timeout_s: float = 600.0) -> ProcessHandle:
        argv = server_argv(spec, self.command)
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in spec.gpu_ids)}
        log_path = self.log_dir / f"{spec.slot}-{spec.port}.log"
        log = log_path.open("wb")
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        handle = ProcessHandle(spec, process, log, log_path)
        client = SGLangServerClient(spec.url, timeout_s=2.0, attempts=1)
        try:

            def ready() -> bool:
                if process.poll() is not None:
                    raise AdapterError(
                        f"server {spec.slot} ({' '.join(argv[:3])} … --port {spec.port}) exited with code"
                        f" {process.returncode} before it was ready:\n{handle.tail()}"
                    )
                return client.healthy()

            poll(ready, timeout_s=ready_timeout_s, every_s=0.1, what=f"server {spec.slot} on {spec.url} to be healthy")
        except AdapterError:
            self.stop(handle)
            raise
        finally:
            client.close()
        return handle

    def stop(self, handle: Handle, *, grace_s: float = 10.0) -> None:
        assert isinstance(handle, ProcessHandle)
        stop_process_group(handle.process, grace_s=grace_s)
        handle.log.close()


def stop_process_group(process: subprocess.Popen[bytes], *, grace_s: float) -> None:
    """SIGTERM a process started in its own session and its children; SIGKILL after ``grace_s``."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace_s)
    except ProcessLookupError:
        pass
