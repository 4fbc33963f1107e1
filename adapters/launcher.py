"""Starting and stopping SGLang servers: from an argv list (never a shell string), locally or with Ray.

:func:`server_argv` turns a :class:`ServerSpec` into ``sglang.launch_server`` flags (docs/adapters.md, "SGLang
versions": which flags each release takes). A
:class:`Launcher` runs it: :class:`SubprocessLauncher` on this machine with ``CUDA_VISIBLE_DEVICES`` set to
the worker's GPUs, :class:`~pearl_sched.adapters.ray_launcher.RayLauncher` on any node of a Ray cluster.
``start`` returns once the server answers ``/health`` *and* the process it launched is the one listening on
the port (another process answering there does not count), or raises :class:`AdapterError` with the tail of its
output if it exits or times out first.

Every value that goes into the argv is validated first (:class:`InvalidArgumentError`): a model path cannot
start with ``-``, hosts and ports must be hosts and ports, and ``extra_args`` — passed after the server's own
flags — may not set (or abbreviate) a flag :func:`server_argv` sets itself, so they cannot rebind the server to
another address or drop its API key.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from pearl_sched.adapters.http import (
    AdapterError,
    InvalidArgumentError,
    SGLangServerClient,
    poll,
    validate_api_key,
    validate_host,
    validate_port,
)
from pearl_sched.adapters.processes import owns_listening_port
from pearl_sched.adapters.sglang_versions import (
    ATTN_DP_SIZE,
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

# Flags server_argv sets itself: extra_args may not repeat them (argparse keeps the last) nor abbreviate them.
RESERVED_FLAGS = (
    "--model-path",
    "--host",
    "--port",
    "--tp-size",
    "--tensor-parallel-size",
    "--base-gpu-id",
    "--api-key",
    "--disaggregation-mode",
    "--disaggregation-transfer-backend",
    "--disaggregation-bootstrap-port",
    "--dp-size",
    "--data-parallel-size",
    "--enable-dp-attention",
    "--attn-dp-size",
    "--attention-data-parallel-size",
    "--ep-size",
    "--expert-parallel-size",
    "--ep",
)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_server_args(model_path: str, extra_args: Sequence[str]) -> None:
    """Refuse a model path or extra arguments that could inject or override server flags.

    Raises:
        InvalidArgumentError: ``model_path`` is empty, starts with ``-`` or holds control characters; or an
            extra argument is not a string, holds control characters, or sets or abbreviates a reserved flag.
    """
    if not isinstance(model_path, str) or not model_path.strip() or model_path.startswith("-"):
        raise InvalidArgumentError(f"model_path {model_path!r} must be a path or model id, not empty or a flag")
    if not model_path.isprintable():
        raise InvalidArgumentError(f"model_path {model_path!r} holds control characters")
    if isinstance(extra_args, str):
        raise InvalidArgumentError("extra_args must be a sequence of arguments, not one string")
    for arg in extra_args:
        if not isinstance(arg, str) or not arg.isprintable():
            raise InvalidArgumentError(f"extra argument {arg!r} must be a string of printable characters")
        name = arg.split("=", 1)[0]
        if name.startswith("--") and len(name) > 2 and any(flag.startswith(name) for flag in RESERVED_FLAGS):
            raise InvalidArgumentError(
                f"extra argument {arg!r} sets a flag pearl_sched sets itself ({', '.join(RESERVED_FLAGS)})"
            )


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
    api_key: str | None = field(default=None, repr=False)
    sglang_version: str | None = None  # the servers' SGLang; None: the installed one, else the newest known
    dp: int = 1  # attention data-parallel ranks over the TP group (MoE worker sizes, docs/state.md)
    ep: int = 1  # expert-parallel ranks: 1 (experts tensor-parallel) or the TP degree (SGLang: ep × moe_dp = tp)

    def __post_init__(self) -> None:
        """Validate every value that will reach the argv.

        Raises:
            InvalidArgumentError: a slot name that is not a plain name, a bad host, port, bootstrap port, transfer
                backend, GPU index list or API key, or a model path or extra argument :func:`check_server_args`
                refuses.
        """
        if not isinstance(self.slot, str) or not _NAME.fullmatch(self.slot):
            raise InvalidArgumentError(f"slot name {self.slot!r} must be letters, digits, '.', '_' or '-'")
        validate_host(self.host, what=f"server {self.slot}: host")
        validate_port(self.port, what=f"server {self.slot}: port")
        if self.bootstrap_port is not None:
            validate_port(self.bootstrap_port, what=f"server {self.slot}: bootstrap port")
        if not _NAME.fullmatch(self.transfer_backend):
            raise InvalidArgumentError(f"server {self.slot}: transfer backend {self.transfer_backend!r} is not a name")
        if not self.gpu_ids or any(isinstance(g, bool) or not isinstance(g, int) or g < 0 for g in self.gpu_ids):
            raise InvalidArgumentError(f"server {self.slot}: gpu_ids {self.gpu_ids!r} must be device indices")
        if isinstance(self.dp, bool) or not isinstance(self.dp, int) or self.dp < 1 or len(self.gpu_ids) % self.dp:
            raise InvalidArgumentError(f"server {self.slot}: dp={self.dp!r} must divide its {len(self.gpu_ids)} GPUs")
        if self.ep not in (1, len(self.gpu_ids)):
            raise InvalidArgumentError(
                f"server {self.slot}: ep={self.ep!r} must be 1 or its TP degree {len(self.gpu_ids)}"
                " (SGLang requires ep_size × moe_dp_size = tp_size)"
            )
        if self.api_key is not None:
            validate_api_key(self.api_key, what=f"server {self.slot}: API key")
        check_server_args(self.model_path, self.extra_args)

    @property
    def release(self) -> SGLangRelease:
        """The SGLang release whose flags and endpoints this server has."""
        return release_for(self.sglang_version or installed_version() or NEWEST.version)

    @property
    def url(self) -> str:
        """``http://host:port``: where the server's HTTP API answers."""
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
    argv += size_flags(spec.dp, spec.ep, release)
    if spec.enable_memory_saver:
        argv.append("--enable-memory-saver")
    if spec.api_key is not None:
        argv += ["--api-key", spec.api_key]  # SGLang then requires it on every route but /health and /metrics
    argv += list(spec.extra_args)  # last, and checked in ServerSpec to set none of the flags above
    if tuple(command) == SGLANG and spec.sglang_version in (None, installed_version()):
        parser = sglang_parser()
        if parser is not None:
            check_argv(argv[len(command) :], parser)
    return argv


def size_flags(dp: int, ep: int, release: SGLangRelease) -> list[str]:
    """The flags beyond ``--tp-size`` that give a server its worker size, as ``release`` spells them.

    Attention-DP (``dp`` > 1): ``--attn-dp-size dp`` where the release has it (0.5.23 on), else
    ``--dp-size dp --enable-dp-attention`` (the spelling 0.5.23 deprecates). Expert parallelism (``ep`` > 1):
    ``--ep-size ep``, in every release of the table.
    """
    flags: list[str] = []
    if dp > 1:
        flags += (
            [ATTN_DP_SIZE, str(dp)] if release.has(ATTN_DP_SIZE) else ["--dp-size", str(dp), "--enable-dp-attention"]
        )
    if ep > 1:
        flags += ["--ep-size", str(ep)]
    return flags


class Handle(Protocol):
    """A running server."""

    spec: ServerSpec

    def alive(self) -> bool:
        """Whether the server's process is still running (not whether it answers)."""
        ...


class Launcher(Protocol):
    """Starts servers and stops them."""

    def start(self, spec: ServerSpec, *, ready_timeout_s: float = 600.0) -> Handle:
        """Start ``spec``'s server and return once it is healthy and owns its port.

        Raises:
            AdapterError: it exited, or was not ready within ``ready_timeout_s`` seconds (it is stopped then).
        """
        ...

    def stop(self, handle: Handle, *, grace_s: float = 10.0) -> None:
        """Stop the server: SIGTERM, then SIGKILL after ``grace_s`` seconds."""
        ...


@dataclass
class ProcessHandle:
    """A server started by :class:`SubprocessLauncher`: its spec, its process and its log file (0600)."""

    spec: ServerSpec
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    log_path: Path = field(default_factory=Path)

    def alive(self) -> bool:
        """Whether the process has not exited."""
        return self.process.poll() is None

    def tail(self, lines: int = 15) -> str:
        """The last ``lines`` lines of the server's log (``""`` when it cannot be read)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class SubprocessLauncher:
    """Servers as local processes, each in its own session so stopping one stops its children."""

    def __init__(self, command: Sequence[str] = SGLANG, *, log_dir: str | Path | None = None) -> None:
        """Launch with one command.

        Args:
            command: the argv prefix: ``sglang.launch_server`` (:data:`SGLANG`) or the fake (:data:`FAKE`).
            log_dir: where each server's log goes (``<slot>-<port>.log``); a new temporary folder when ``None``.
        """
        self.command = tuple(command)
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="pearl-sched-servers-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, spec: ServerSpec, *, ready_timeout_s: float = 600.0) -> ProcessHandle:
        """Start the server in its own session with ``CUDA_VISIBLE_DEVICES`` set to ``spec.gpu_ids``.

        Returns once it answers ``/health`` and the launched process is the one listening on ``spec.port``.

        Raises:
            AdapterError: it exited, another process holds the port, or it was not ready within
                ``ready_timeout_s`` seconds; the message carries the tail of its log. It is stopped first.
            SGLangCompatibilityError: the installed SGLang's parser rejects the argv.
        """
        argv = server_argv(spec, self.command)
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in spec.gpu_ids)}
        log_path = self.log_dir / f"{spec.slot}-{spec.port}.log"
        log = os.fdopen(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")  # it may log its args
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        handle = ProcessHandle(spec, process, log, log_path)
        client = SGLangServerClient(spec.url, timeout_s=2.0, attempts=1)
        impostor = False  # something answered /health on the port that is not our process
        try:

            def ready() -> bool:
                nonlocal impostor
                if process.poll() is not None:
                    held = " (another process answers on its port)" if impostor else ""
                    raise AdapterError(
                        f"server {spec.slot} ({' '.join(argv[:3])} … --port {spec.port}) exited with code"
                        f" {process.returncode} before it was ready{held}:\n{handle.tail()}"
                    )
                if not client.healthy():
                    return False
                if owns_listening_port(process.pid, spec.port):
                    return True
                impostor = True
                return False

            try:
                poll(
                    ready,
                    timeout_s=ready_timeout_s,
                    every_s=0.1,
                    what=f"server {spec.slot} on {spec.url} to be healthy",
                )
            except AdapterError as exc:
                if impostor and process.poll() is None:
                    raise AdapterError(
                        f"server {spec.slot}: port {spec.port} answers /health, but not from the process launched"
                        f" (pid {process.pid}), which never listened on it: another process holds the port"
                    ) from exc
                raise
        except AdapterError:
            self.stop(handle)
            raise
        finally:
            client.close()
        return handle

    def stop(self, handle: Handle, *, grace_s: float = 10.0) -> None:
        """Stop the server and its children (:func:`stop_process_group`) and close its log."""
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
