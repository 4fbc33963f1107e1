"""What each SGLang release accepts: the launch flags pearl_sched passes and the HTTP endpoints it calls.

RL frameworks pin older SGLang releases than the one pearl_sched was first written against (verl 0.5.8, AReaL
0.5.10.post1, ROLL 0.5.2), and SGLang's launch parser rejects a flag it does not know, so every flag beyond the
ones all releases share is enabled only on the releases that have it, and every endpoint is called under the
name the release serves it at.

The table below was read from the released wheels on PyPI (``pip download --no-deps sglang==X``), files
``sglang/srt/server_args.py`` (0.5.2 … 0.5.10: ``add_argument("--…")``), ``sglang/srt/arg_groups/fields/
*.py`` (0.5.21 on: one flag per field, ``--`` + the field name with ``-`` for ``_``) and
``sglang/srt/entrypoints/http_server.py`` (routes); docs/adapters.md lists it with the sources. A version between
two entries gets the older entry's features: a flag is never passed to a release it was not seen in.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from pearl_sched.errors import PearlSchedError

logger = logging.getLogger(__name__)

# The flags pearl_sched may pass. Every release in the table has BASE_FLAGS.
BASE_FLAGS = frozenset(
    {
        "--model-path",
        "--host",
        "--port",
        "--tp-size",
        "--base-gpu-id",
        "--enable-metrics",
        "--skip-server-warmup",
        "--disaggregation-mode",
        "--disaggregation-transfer-backend",
        "--disaggregation-bootstrap-port",
        "--enable-memory-saver",
        "--api-key",
        "--weight-version",
        "--mem-fraction-static",
        "--dist-init-addr",
        "--nnodes",
        "--node-rank",
        "--disable-cuda-graph",
        # Worker sizes (docs/adapters.md, "Worker sizes"): in every wheel of the table. 0.5.23 deprecates
        # ``--dp-size N --enable-dp-attention`` for ``--attn-dp-size N`` (srt/arg_groups/parallel_hook.py
        # ``_handle_deprecated_dp_attention``) but still accepts it.
        "--dp-size",
        "--enable-dp-attention",
        "--ep-size",
    }
)
ENABLE_PD_ROLE_SWITCH = "--enable-pd-role-switch"
ATTN_DP_SIZE = "--attn-dp-size"
"""Attention-DP groups inside the TP group (0.5.23 on: srt/arg_groups/fields/parallel.py ``attn_dp_size``)."""
ADMIN_API_KEY = "--admin-api-key"
ENABLE_WEIGHTS_CPU_BACKUP = "--enable-weights-cpu-backup"
GATED_LAUNCH_PORT = "--gated-launch-port"


class SGLangCompatibilityError(PearlSchedError, ValueError):
    """A version pearl_sched cannot parse or does not know, or a launch argv that release would reject."""


@dataclass(frozen=True)
class SGLangRelease:
    """One SGLang release's surface, as pearl_sched uses it.

    Attributes:
        version: The release (PEP 440).
        flags: The launch flags of :data:`BASE_FLAGS` and the gated ones that this release accepts.
        server_info_path: ``/server_info`` (0.5.8 on) or ``/get_server_info`` (0.5.2).
        model_info_path: ``/model_info`` (0.5.8 on) or ``/get_model_info``; it reports the live weight version.
        has_v1_loads: ``GET /v1/loads`` exists (0.5.8 on); before it running requests come from ``/metrics``.
        pause_modes: ``/pause_generation`` takes a ``mode`` (abort/retract/in_place); 0.5.2 always aborts.
        role_switch: ``POST /pd_role_switch`` and ``--enable-pd-role-switch`` exist (0.5.21 on).
        live_role_in_internal_states: ``/server_info``'s ``internal_states[i]`` carry ``disaggregation_mode``,
            ``decode_cuda_graph_bs`` and ``decode_cuda_graph_memory_gb`` (0.5.21 on; the top-level field is the
            launch value).
        transfer_backends: ``--disaggregation-transfer-backend`` choices.
        role_switch_backends: The transfer backends whose KV manager sets ``supports_role_switch``.
        source: Where the entry was read.
    """

    version: str
    flags: frozenset[str]
    server_info_path: str
    model_info_path: str
    has_v1_loads: bool
    pause_modes: bool
    role_switch: bool
    live_role_in_internal_states: bool
    transfer_backends: tuple[str, ...]
    role_switch_backends: tuple[str, ...]
    source: str

    def has(self, flag: str) -> bool:
        """Whether this release's launch parser accepts ``flag``."""
        return flag in self.flags

    @property
    def parsed(self) -> Version:
        """The version as a :class:`packaging.version.Version`."""
        return Version(self.version)


_OLD_BACKENDS = ("mooncake", "nixl", "ascend", "fake")

RELEASES: tuple[SGLangRelease, ...] = (
    SGLangRelease(
        version="0.5.2",  # ROLL's pin
        flags=BASE_FLAGS,
        server_info_path="/get_server_info",
        model_info_path="/get_model_info",
        has_v1_loads=False,
        pause_modes=False,
        role_switch=False,
        live_role_in_internal_states=False,
        transfer_backends=_OLD_BACKENDS,
        role_switch_backends=(),
        source="sglang-0.5.2-py3-none-any.whl: srt/server_args.py, srt/entrypoints/http_server.py",
    ),
    SGLangRelease(
        version="0.5.8",  # verl's pin
        flags=BASE_FLAGS | {ADMIN_API_KEY, ENABLE_WEIGHTS_CPU_BACKUP},
        server_info_path="/server_info",
        model_info_path="/model_info",
        has_v1_loads=True,
        pause_modes=True,
        role_switch=False,
        live_role_in_internal_states=False,
        transfer_backends=_OLD_BACKENDS,
        role_switch_backends=(),
        source="sglang-0.5.8-py3-none-any.whl: srt/server_args.py, srt/entrypoints/http_server.py, v1_loads.py",
    ),
    SGLangRelease(
        version="0.5.10",  # AReaL pins 0.5.10.post1: the same flags and routes
        flags=BASE_FLAGS | {ADMIN_API_KEY, ENABLE_WEIGHTS_CPU_BACKUP},
        server_info_path="/server_info",
        model_info_path="/model_info",
        has_v1_loads=True,
        pause_modes=True,
        role_switch=False,
        live_role_in_internal_states=False,
        transfer_backends=(*_OLD_BACKENDS, "mori"),
        role_switch_backends=(),
        source="sglang-0.5.10 and 0.5.10.post1 wheels: srt/server_args.py, srt/entrypoints/http_server.py",
    ),
    SGLangRelease(
        version="0.5.21",  # the first release with /pd_role_switch (0.5.20 has neither it nor the flag)
        flags=BASE_FLAGS | {ADMIN_API_KEY, ENABLE_WEIGHTS_CPU_BACKUP, ENABLE_PD_ROLE_SWITCH, GATED_LAUNCH_PORT},
        server_info_path="/server_info",
        model_info_path="/model_info",
        has_v1_loads=True,
        pause_modes=True,
        role_switch=True,
        live_role_in_internal_states=True,
        transfer_backends=(*_OLD_BACKENDS, "mori", "mooncake_tcp"),
        role_switch_backends=("mooncake", "mori"),
        source="sglang-0.5.21 wheel: srt/arg_groups/fields/disagg.py, srt/managers/io_struct.py",
    ),
    SGLangRelease(
        version="0.5.23",
        flags=BASE_FLAGS
        | {ADMIN_API_KEY, ENABLE_WEIGHTS_CPU_BACKUP, ENABLE_PD_ROLE_SWITCH, GATED_LAUNCH_PORT, ATTN_DP_SIZE},
        server_info_path="/server_info",
        model_info_path="/model_info",
        has_v1_loads=True,
        pause_modes=True,
        role_switch=True,
        live_role_in_internal_states=True,
        transfer_backends=(*_OLD_BACKENDS, "mori", "mooncake_tcp"),
        role_switch_backends=("mooncake", "mori"),
        source=(
            "sglang-0.5.23 wheel: srt/arg_groups/fields/{disagg,serving,parallel}.py, srt/entrypoints/http_server.py,"
            " srt/disaggregation/role_switch.py, srt/managers/scheduler_components/internal_state.py"
        ),
    ),
)
NEWEST = RELEASES[-1]


def parse_version(text: str) -> Version:
    """``text`` as a PEP 440 version (``"0.5.2rc1"`` is 0.5.2, release candidate 1, before 0.5.2).

    Raises:
        SGLangCompatibilityError: ``text`` is not a version.
    """
    try:
        return Version(str(text).strip())
    except InvalidVersion:
        raise SGLangCompatibilityError(f"SGLang version {text!r} is not a PEP 440 version") from None


def release_for(version: str | Version) -> SGLangRelease:
    """The table entry whose features ``version`` has: the newest entry not after it.

    A pre-release of an entry (``0.5.21rc1``) gets the entry before it, since it may lack what the release has.

    Raises:
        SGLangCompatibilityError: ``version`` is older than the oldest entry (0.5.2) or not a version.
    """
    parsed = version if isinstance(version, Version) else parse_version(version)
    known = [r for r in RELEASES if r.parsed <= parsed]
    if not known:
        raise SGLangCompatibilityError(
            f"SGLang {parsed} is older than the oldest release pearl_sched supports ({RELEASES[0].version})"
        )
    return known[-1]


def installed_version() -> str | None:
    """The version of the ``sglang`` package installed here, or None."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def gated_flags(argv: Sequence[str], release: SGLangRelease) -> list[str]:
    """The flags in ``argv`` that pearl_sched knows and ``release`` does not accept."""
    every = set().union(*(r.flags for r in RELEASES))
    return [a for a in argv if a.startswith("--") and a.split("=", 1)[0] in every and not release.has(a.split("=")[0])]


def sglang_parser() -> argparse.ArgumentParser | None:
    """The installed SGLang's own launch parser (``ServerArgs.add_cli_args``), or None when it cannot be imported.

    Importing it needs torch (a CPU build is enough) and triton besides SGLang's small dependencies, no GPU.
    """
    try:
        from sglang.srt.server_args import ServerArgs  # type: ignore[import-not-found,unused-ignore]
    except Exception as exc:  # not installed, or installed without what its import needs
        logger.debug("sglang's ServerArgs cannot be imported (%s): launch argv checked against the table only", exc)
        return None
    parser = argparse.ArgumentParser(prog="sglang.launch_server", exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    return parser


def check_argv(argv: Sequence[str], parser: argparse.ArgumentParser) -> None:
    """Parse ``argv`` (flags only, no command) with ``parser``, as the server would at start.

    Raises:
        SGLangCompatibilityError: The parser rejects ``argv``; the message is the parser's.
    """
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args(list(argv))
    except (argparse.ArgumentError, SystemExit) as exc:
        lines = err.getvalue().strip().splitlines()
        why = str(exc) if isinstance(exc, argparse.ArgumentError) or not lines else lines[-1]
        raise SGLangCompatibilityError(f"SGLang's own parser rejects the launch argv: {why}") from None
