"""Rollout clients that never lose a request while the cluster changes under them.

:class:`RolloutClient` is synchronous; :class:`AsyncRolloutClient` is the same protocol on ``httpx.AsyncClient``
for frameworks whose rollout loop is asyncio (verl's and slime's agent loops are), so a turn in flight never blocks
the event loop. Both pass SGLang sampling parameters through and return per-token logprobs when asked.

Requests go through the gateway. When a worker is drained with ``abort`` or preempted, the request comes back
with ``finish_reason.type == "abort"`` and the tokens generated so far — or the gateway answers 5xx for a
moment while it has no worker of a kind; the client resubmits the prompt plus what was generated, for the
tokens still owed, until the turn is complete (the partial-trajectory resubmission of a shrink: docs/policies.md,
"Minimal change and ordered actions"; docs/adapters.md, "SGLangCluster").
"""

from __future__ import annotations

import asyncio
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


_RETRY_PAUSE_S = 0.1
"""Seconds a client waits before resubmitting a turn whose submission failed (unreachable gateway, non-200)."""


def _gateway_http(gateway_url: str, timeout_s: float, api_key: str | FromEnv | None) -> dict[str, Any]:
    """Both clients' connection to the gateway: the checked base URL, the timeouts and the bearer header.

    Raises:
        InvalidArgumentError: a malformed gateway URL or API key.
    """
    key = resolve_api_key(api_key)
    return {
        "base_url": validate_url(gateway_url, what="gateway URL"),
        "timeout": httpx.Timeout(timeout_s, connect=5.0),
        "headers": {"Authorization": f"Bearer {key}"} if key is not None else None,
    }


class _Turn:
    """One turn being assembled across submissions: the payload of the next one, and what each answer added.

    The protocol both clients follow; they differ only in how they post and wait.
    """

    def __init__(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        sampling_params: Mapping[str, Any] | None,
        logprob: bool,
        patience_s: float,
    ) -> None:
        self.prompt_ids = prompt_ids
        self.max_new_tokens = max_new_tokens
        self.sampling_params = dict(sampling_params or {})
        self.return_logprob = logprob
        self.output: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[str] = []
        self.resubmits = 0
        self.retries = 0
        self.finished = False  # the last answer ended the turn (not aborted)
        self.patience_s = patience_s
        self.deadline = time.monotonic() + patience_s

    @property
    def done(self) -> bool:
        """Whether nothing is left to submit: the last answer ended the turn, or every owed token came."""
        return self.finished or len(self.output) >= self.max_new_tokens

    def failed(self, why: str) -> None:
        """Count a submission that got no answer; past the patience, give up.

        Raises:
            AdapterError: the turn has been retried for longer than ``patience_s``.
        """
        self.retries += 1
        if time.monotonic() > self.deadline:
            raise AdapterError(f"request not served within {self.patience_s:g} s: last error {why}")

    def answer(self, response: httpx.Response) -> bool:
        """Take one ``/generate`` response; False when it was a failure to wait out before resubmitting."""
        if response.status_code != 200:
            self.failed(f"HTTP {response.status_code}: {response.text[:200]}")
            return False
        self.finished = self.take(response.json())
        return True

    def payload(self) -> dict[str, Any]:
        """The ``/generate`` body for the tokens still owed: the prompt plus what was generated so far."""
        body: dict[str, Any] = {
            "input_ids": [*self.prompt_ids, *self.output],
            "sampling_params": {**self.sampling_params, "max_new_tokens": self.max_new_tokens - len(self.output)},
        }
        if self.return_logprob:
            body["return_logprob"] = True
        return body

    def take(self, data: Mapping[str, Any]) -> bool:
        """Add one answer's tokens (and logprobs); True when the turn is done, False when it was aborted."""
        meta = data.get("meta_info", {})
        produced = list(data.get("output_ids") or [])[: int(meta.get("completion_tokens", 0))]
        self.output.extend(produced)
        if self.return_logprob:
            entries = list(meta.get("output_token_logprobs") or [])[: len(produced)]
            self.logprobs.extend(float(e[0]) for e in entries)
        self.versions.append(str(meta.get("weight_version", "")))
        if (meta.get("finish_reason") or {}).get("type") == "abort":
            self.resubmits += 1
            return False
        return True

    def completion(self) -> Completion:
        return Completion(tuple(self.output), self.resubmits, self.retries, tuple(self.versions), tuple(self.logprobs))


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
        self.http = httpx.Client(**_gateway_http(gateway_url, timeout_s, api_key))
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

        Raises:
            AdapterError: the gateway answered no success within ``patience_s``.
        """
        turn = _Turn(prompt_ids, max_new_tokens, sampling_params, return_logprob, self.patience_s)
        while not turn.done:
            try:
                response = self.http.post("/generate", json=turn.payload())
            except httpx.HTTPError as exc:
                turn.failed(f"gateway unreachable ({exc})")
                time.sleep(_RETRY_PAUSE_S)
                continue
            if not turn.answer(response):
                time.sleep(_RETRY_PAUSE_S)
        return turn.completion()


class AsyncRolloutClient:
    """:class:`RolloutClient`'s protocol on ``httpx.AsyncClient``: many turns in flight on one event loop."""

    def __init__(
        self,
        gateway_url: str,
        *,
        timeout_s: float = 120.0,
        patience_s: float = 120.0,
        api_key: str | FromEnv | None = FROM_ENV,
        max_connections: int = 256,
    ) -> None:
        """Open an asynchronous HTTP client on the gateway.

        Args:
            gateway_url: ``scheme://host:port`` of the SGLang model gateway (smg) or one SGLang server.
            timeout_s: seconds one ``/generate`` call may take (connecting: 5 s).
            patience_s: seconds a turn keeps retrying while the gateway answers 5xx (no worker of a kind).
            api_key: the bearer key; by default ``$PEARL_SCHED_API_KEY``, ``None`` for none.
            max_connections: concurrent connections to the gateway (turns beyond it wait for one).

        Raises:
            InvalidArgumentError: a malformed gateway URL or API key.
        """
        self.http = httpx.AsyncClient(
            **_gateway_http(gateway_url, timeout_s, api_key),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )
        self.patience_s = patience_s

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self.http.aclose()

    async def __aenter__(self) -> AsyncRolloutClient:
        """The client itself; leaving the ``async with`` block closes it."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close the HTTP connections."""
        await self.aclose()

    async def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        sampling_params: Mapping[str, Any] | None = None,
        *,
        return_logprob: bool = False,
    ) -> Completion:
        """:meth:`RolloutClient.generate`, awaitable: the same arguments, resubmissions and errors."""
        turn = _Turn(prompt_ids, max_new_tokens, sampling_params, return_logprob, self.patience_s)
        while not turn.done:
            try:
                response = await self.http.post("/generate", json=turn.payload())
            except httpx.HTTPError as exc:
                turn.failed(f"gateway unreachable ({exc})")
                await asyncio.sleep(_RETRY_PAUSE_S)
                continue
            if not turn.answer(response):
                await asyncio.sleep(_RETRY_PAUSE_S)
        return turn.completion()
