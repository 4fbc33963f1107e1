"""A rollout client that never loses a request while the cluster changes under it.

Requests go through the gateway. When a worker is drained with ``abort`` or preempted, the request comes back
with ``finish_reason.type == "abort"`` and the tokens generated so far — or the gateway answers 5xx for a
moment while it has no worker of a kind; the client resubmits the prompt plus what was generated, for the
tokens still owed, until the turn is complete (the partial-trajectory resubmission of a shrink: docs/policies.md,
"Minimal change and ordered actions"; docs/adapters.md, "SGLangCluster").
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pearl_sched.adapters.http import FROM_ENV, AdapterError, FromEnv, resolve_api_key, validate_url

try:
    import httpx
except ImportError as exc:  # pragma: no cover - the client extra installs it
    from pearl_sched.errors import MissingExtraError

    raise MissingExtraError(exc.name or "httpx", "client") from exc


@dataclass(frozen=True)
class Completion:
    """One turn's output and how it got there."""

    output_ids: tuple[int, ...]
    resubmits: int
    retries: int
    weight_versions: tuple[str, ...]
    output_logprobs: tuple[float, ...] = ()  # one per output token when asked for (``return_logprob``)


class RolloutClient:
    """``generate`` through a gateway, resubmitting aborted or failed partial turns."""

    def __init__(
        self,
        gateway_url: str,
        *,
        timeout_s: float = 120.0,
        patience_s: float = 120.0,
        api_key: str | FromEnv | None = FROM_ENV,
    ) -> None:
        """Open an HTTP client on the gateway.

        Args:
            gateway_url: ``scheme://host:port`` of the SGLang model gateway (smg).
            timeout_s: seconds one ``/generate`` call may take (connecting: 5 s).
            patience_s: seconds a turn keeps retrying while the gateway answers 5xx (no worker of a kind).
            api_key: the bearer key; by default ``$PEARL_SCHED_API_KEY``, ``None`` for none.

        Raises:
            InvalidArgumentError: a malformed gateway URL or API key.
        """
        key = resolve_api_key(api_key)
        self.http = httpx.Client(
            base_url=validate_url(gateway_url, what="gateway URL"),
            timeout=httpx.Timeout(timeout_s, connect=5.0),
            headers={"Authorization": f"Bearer {key}"} if key is not None else None,
        )
        self.patience_s = patience_s

    def close(self) -> None:
        """Close the HTTP connections."""
        self.http.close()

    def __enter__(self) -> RolloutClient:
        """The client itself; leaving the ``with`` block closes it."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the HTTP connections."""
        self.close()

    def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        sampling_params: Mapping[str, Any] | None = None,
        *,
        return_logprob: bool = False,
    ) -> Completion:
        """One turn of ``max_new_tokens`` tokens, resubmitted across aborts until complete.

        Args:
            prompt_ids: The prompt's token ids.
            max_new_tokens: Tokens owed for the turn.
            sampling_params: SGLang sampling parameters passed through (temperature, top_p, stop, …);
                ``max_new_tokens`` is set per submission to the tokens still owed.
            return_logprob: Ask SGLang for each output token's log-probability (``output_token_logprobs``).
        """
        output: list[int] = []
        logprobs: list[float] = []
        resubmits = retries = 0
        versions: list[str] = []
        deadline = time.monotonic() + self.patience_s
        while len(output) < max_new_tokens:
            payload: dict[str, Any] = {
                "input_ids": [*prompt_ids, *output],
                "sampling_params": {**(sampling_params or {}), "max_new_tokens": max_new_tokens - len(output)},
            }
            if return_logprob:
                payload["return_logprob"] = True
            try:
                response = self.http.post("/generate", json=payload)
            except httpx.HTTPError as exc:
                retries += 1
                self._wait(deadline, f"gateway unreachable ({exc})")
                continue
            if response.status_code != 200:
                retries += 1
                self._wait(deadline, f"HTTP {response.status_code}: {response.text[:200]}")
                continue
            data = response.json()
            meta = data.get("meta_info", {})
            produced = list(data.get("output_ids") or [])[: int(meta.get("completion_tokens", 0))]
            output.extend(produced)
            if return_logprob:
                entries = list(meta.get("output_token_logprobs") or [])[: len(produced)]
                logprobs.extend(float(e[0]) for e in entries)
            versions.append(str(meta.get("weight_version", "")))
            if (meta.get("finish_reason") or {}).get("type") == "abort":
                resubmits += 1
                continue
            break
        return Completion(tuple(output), resubmits, retries, tuple(versions), tuple(logprobs))

    def _wait(self, deadline: float, why: str) -> None:
        if time.monotonic() > deadline:
            raise AdapterError(f"request not served within {self.patience_s:g} s: last error {why}")
        time.sleep(0.1)
