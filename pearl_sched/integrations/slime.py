"""slime: attach it to the servers and gateway pearl_sched runs, or give it a plan as ``--sglang-config``.

Checked against THUDM/slime at commit 624b824 (slime is not on PyPI: the name ``slime`` there is an unrelated
package):

* ``slime/utils/arguments.py`` — ``--rollout-external-engine-addrs`` (``nargs="+"``, ``host:port`` or
  ``http://host:port``); ``slime/backends/sglang_utils/arguments.py`` — ``--sglang-router-ip``,
  ``--sglang-router-port`` and ``--sglang-config``, and ``validate_args``, which refuses ``--sglang-config``
  together with external engines.
* ``slime/backends/sglang_utils/external.py`` — ``discover_external_engines`` reads each engine's
  ``/server_info`` (``/get_server_info`` on old releases): ``disaggregation_mode`` gives the worker type,
  ``disaggregation_bootstrap_port`` a prefill's bootstrap port, ``tp_size × pp_size`` its GPUs.
  ``start_external_rollout_servers`` uses the router at ``--sglang-router-ip/port`` instead of starting one
  (``slime/ray/rollout.py`` ``_start_router``), and each engine registers itself there
  (``sglang_engine.py`` ``_register_to_router``: ``POST /workers`` with ``url``, ``worker_type`` and a
  prefill's ``bootstrap_port``, no API key) — which smg answers with 409 for a URL it already has. Before
  that, ``_init_external`` asserts that the engine's ``/server_info`` matches the arguments slime would have
  launched it with (``_compute_server_args`` less ``_EXTERNAL_ENGINE_SKIP_CHECK_FIELDS``: e.g.
  ``enable_memory_saver`` = ``--offload-rollout``; a prefill's ``load_balance_method`` =
  ``follow_bootstrap_room``, a decode's ``prefill_round_robin_balance``), so the servers must be launched to match.
* ``slime/backends/sglang_utils/sglang_config.py`` — ``SglangConfig.from_yaml``: a top-level ``sglang`` list of
  models, each with ``server_groups`` of ``worker_type`` (regular, prefill, decode, placeholder, encoder),
  ``num_gpus`` > 0, optional ``num_gpus_per_engine`` and ``overrides``; ``slime/ray/rollout.py`` requires the
  groups' GPUs to add up to ``rollout_num_gpus``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from pearl_sched.integrations.lending import IntegrationError

logger = logging.getLogger(__name__)

ROLES = ("prefill", "decode", "regular")


class _Gateway(Protocol):
    """What :func:`hand_over` needs of :class:`pearl_sched.adapters.Gateway`."""

    @property
    def url(self) -> str: ...

    @property
    def api_key(self) -> str | None: ...

    def registered(self) -> Mapping[str, Any]: ...

    def deregister(self, url: str, *, wait: bool = False) -> None: ...


def engine_address(url: str) -> str:
    """``http://host:port`` → ``host:port``, the form slime's ``--rollout-external-engine-addrs`` documents.

    Raises:
        IntegrationError: not an ``http://host:port`` URL.
    """
    parsed = urlparse(url if "://" in url else f"http://{url}")
    if parsed.scheme != "http" or parsed.hostname is None or parsed.port is None:
        raise IntegrationError(f"{url!r} is not an http://host:port address (slime reaches engines over HTTP)")
    host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
    return f"{host}:{parsed.port}"


def external_engine_args(engine_urls: list[str], router_url: str) -> list[str]:
    """The slime argv for engines and a router it does not start.

    Raises:
        IntegrationError: no engine, or an address that is not ``http://host:port``.
    """
    if not engine_urls:
        raise IntegrationError("slime needs at least one external engine")
    router = urlparse(router_url if "://" in router_url else f"http://{router_url}")
    if router.hostname is None or router.port is None:
        raise IntegrationError(f"router address {router_url!r} has no host and port")
    return [
        "--rollout-external-engine-addrs",
        *(engine_address(u) for u in engine_urls),
        "--sglang-router-ip",
        router.hostname,
        "--sglang-router-port",
        str(router.port),
    ]


def hand_over(gateway: _Gateway) -> list[str]:
    """Give slime the gateway's engines: slime's argv, with the engines deregistered so slime can register them.

    slime registers every external engine itself and fails on smg's 409 for one already there, so each is
    removed (and the removal waited for) first; the gateway then lists them again under slime's registration.

    Raises:
        IntegrationError: the gateway has an API key (slime's registration sends none) or no engine.
    """
    if gateway.api_key is not None:
        raise IntegrationError(f"the gateway at {gateway.url} requires an API key; slime registers engines without one")
    urls = sorted(gateway.registered())
    args = external_engine_args(urls, gateway.url)
    for url in urls:
        gateway.deregister(url, wait=True)
    logger.info("handed %d engines on %s over to slime", len(urls), gateway.url)
    return args


def sglang_config(
    engines: Mapping[str, int],
    gpus_per_engine: int | Mapping[str, int],
    *,
    total_gpus: int | None = None,
    model_name: str = "actor",
    model_path: str | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The ``--sglang-config`` document for a plan's engines.

    Args:
        engines: engines per role (``prefill``, ``decode``, ``regular``), e.g. from :func:`engines_of_plan`.
        gpus_per_engine: GPUs of one engine, for all roles or per role (prefill and decode may differ).
        total_gpus: slime's ``rollout_num_gpus``; GPUs the plan leaves idle become a ``placeholder`` group so
            the sum matches, as slime requires. ``None``: the engines' GPUs.
        model_name: the model entry's ``name``.
        model_path: its ``model_path`` (slime falls back on ``--hf-checkpoint``).
        overrides: SGLang ``ServerArgs`` fields per role, slime's ``overrides``.

    Raises:
        IntegrationError: an unknown role, a negative count, no engine, an engine size below 1, or engines
            that need more than ``total_gpus``.
    """
    unknown = (set(engines) | set(overrides or {})) - set(ROLES)
    if isinstance(gpus_per_engine, Mapping):
        unknown |= set(gpus_per_engine) - set(ROLES)
    if unknown:
        raise IntegrationError(f"unknown role(s) {sorted(unknown)}; slime's are {list(ROLES)}")
    groups: list[dict[str, Any]] = []
    used = 0
    for role in ROLES:
        count = engines.get(role, 0)
        if count < 0:
            raise IntegrationError(f"{role}: engine count must be ≥ 0, got {count}")
        if count == 0:
            continue
        size = gpus_per_engine.get(role, 0) if isinstance(gpus_per_engine, Mapping) else gpus_per_engine
        if size < 1:
            raise IntegrationError(f"{role}: GPUs per engine must be ≥ 1, got {size}")
        group: dict[str, Any] = {"worker_type": role, "num_gpus": count * size, "num_gpus_per_engine": size}
        if overrides and overrides.get(role):
            group["overrides"] = dict(overrides[role])
        groups.append(group)
        used += count * size
    if not groups:
        raise IntegrationError("the plan has no engine")
    if total_gpus is not None:
        if used > total_gpus:
            raise IntegrationError(f"the engines need {used} GPUs, more than rollout_num_gpus={total_gpus}")
        if used < total_gpus:
            groups.append({"worker_type": "placeholder", "num_gpus": total_gpus - used})
    model: dict[str, Any] = {"name": model_name, "server_groups": groups}
    if model_path is not None:
        model["model_path"] = model_path
    return {"sglang": [model]}


def engines_of_plan(plan: Any) -> dict[str, int]:
    """Engines per slime role from a :class:`~pearl_sched.plans.Plan` (or anything with its three counts)."""
    return {
        "prefill": int(plan.prefill_workers),
        "decode": int(plan.decode_workers),
        "regular": int(plan.colocated_workers),
    }


def write_sglang_config(config: Mapping[str, Any], path: str | Path) -> Path:
    """Write the document for ``--sglang-config`` (JSON, which slime's ``yaml.safe_load`` reads as YAML)."""
    out = Path(path)
    out.write_text(json.dumps(config, indent=2) + "\n")
    return out
