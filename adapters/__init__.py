"""Adapters that carry plans out on real clusters and trainers (docs/adapters.md).

* :class:`SGLangCluster` — the cluster adapter for SGLang servers behind the SGLang model gateway;
* :class:`Gateway` — runs the real ``smg`` gateway and keeps its workers equal to the plan;
* :class:`SubprocessLauncher` / :class:`RayLauncher` — start servers from argv lists, locally or with Ray;
* :class:`Journal` — the action journal a restarted controller resumes from;
* :class:`RolloutClient` — a client that resubmits aborted partial turns;
* :class:`TorchTrainer` — the reference trainer adapter (lend and reclaim GPUs, publish weights);
* ``python -m pearl_sched.adapters.fake_sglang`` — a fake SGLang server for machines without a GPU.

Names are imported on first use, so the extras they need (``client``, ``ray``, ``torch``) are only required
for what is used. The core never imports this package.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AdapterError": "http",
    "InvalidArgumentError": "http",
    "GatewayClient": "http",
    "SGLangServerClient": "http",
    "Gateway": "gateway",
    "Registration": "gateway",
    "Journal": "journal",
    "JournalError": "journal",
    "JournalLockedError": "journal",
    "ForeignJournalError": "journal",
    "ServerSpec": "launcher",
    "SubprocessLauncher": "launcher",
    "RayLauncher": "ray_launcher",
    "RolloutClient": "rollout",
    "SGLangCluster": "sglang",
    "SlotSpec": "sglang",
    "GPUSpec": "sglang",
    "local_slots": "sglang",
    "TorchTrainer": "torch_trainer",
    "FakeSGLangServer": "fake_sglang",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pearl_sched.adapters' has no attribute {name!r}")
    return getattr(importlib.import_module(f"pearl_sched.adapters.{_EXPORTS[name]}"), name)
