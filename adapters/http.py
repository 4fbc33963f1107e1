"""HTTP clients for SGLang servers and the SGLang model gateway (``smg``), over httpx.

Every call has an explicit timeout. Idempotent calls (reads, ``DELETE``, registering a URL the gateway
deduplicates, releasing or resuming memory, pausing) are retried with exponential backoff on connection errors,
timeouts and 5xx answers (tenacity); non-idempotent ones (``/generate``, role switches, weight updates) are not.
When retries run out the caller gets an :class:`AdapterError` that says which server, which call and why —
never a bare transport exception.
"""

from __future__ import annotations

import ipaddress
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from typing_extensions import Self

from pearl_sched.adapters.sglang_versions import SGLangRelease, parse_version, release_for
from pearl_sched.errors import PearlSchedError

try:
    import httpx
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential
except ImportError as exc:  # pragma: no cover - the client extra installs them
    from pearl_sched.errors import MissingExtraError

    raise MissingExtraError(exc.name or "httpx", "client") from exc


class AdapterError(PearlSchedError):
    """A server or the gateway did not do what was asked; the message names the endpoint and the cause."""


class InvalidArgumentError(PearlSchedError, ValueError):
    """A host, URL, port, API key, model path or server flag that is malformed or could inject flags."""


API_KEY_ENV = "PEARL_SCHED_API_KEY"
_HOSTNAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
_API_KEY = re.compile(r"[\x21-\x7e]{8,512}")  # printable, no spaces: it goes into a header and an argv


def validate_host(host: str, *, what: str = "host") -> str:
    """``host`` if it is an IP address or a DNS name; :class:`InvalidArgumentError` otherwise."""
    if isinstance(host, str):
        with_brackets = host.startswith("[") and host.endswith("]")
        try:
            ipaddress.ip_address(host[1:-1] if with_brackets else host)
            return host
        except ValueError:
            if not with_brackets and _HOSTNAME.fullmatch(host):
                return host
    raise InvalidArgumentError(f"{what} {host!r} is not an IP address or a DNS name")


def validate_port(port: int, *, what: str = "port") -> int:
    """``port`` if it is an int in 1-65535; :class:`InvalidArgumentError` otherwise."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InvalidArgumentError(f"{what} {port!r} is not a TCP port (1-65535)")
    return port


def validate_url(url: str, *, what: str = "URL") -> str:
    """``url`` without a trailing slash if it is ``http(s)://host[:port]`` and nothing more.

    Raises:
        InvalidArgumentError: Another scheme, credentials, a path, query or fragment, or a bad host or port.
    """
    if not isinstance(url, str) or any(ch.isspace() or not ch.isprintable() for ch in url):
        raise InvalidArgumentError(f"{what} {url!r} has spaces or control characters")
    parts = urlsplit(url.rstrip("/"))
    if parts.scheme not in ("http", "https"):
        raise InvalidArgumentError(f"{what} {url!r} must start with http:// or https://")
    if parts.username is not None or parts.password is not None:
        raise InvalidArgumentError(f"{what} {url!r} must not carry credentials (use an API key)")
    if parts.path or parts.query or parts.fragment:
        raise InvalidArgumentError(f"{what} {url!r} must be scheme://host:port with no path, query or fragment")
    try:
        port = parts.port
    except ValueError:
        raise InvalidArgumentError(f"{what} {url!r} has a port that is not 1-65535") from None
    validate_host(parts.hostname or "", what=f"{what} {url!r}: host")
    if port is not None:
        validate_port(port, what=f"{what} {url!r}: port")
    return url.rstrip("/")


def validate_api_key(key: str, *, what: str = "API key") -> str:
    """``key`` if it is 8-512 printable non-space ASCII characters; the error never shows the key."""
    if not isinstance(key, str) or not _API_KEY.fullmatch(key):
        raise InvalidArgumentError(f"{what} must be 8-512 printable ASCII characters without spaces")
    return key


class FromEnv:
    """The default of an ``api_key`` parameter: read ``$PEARL_SCHED_API_KEY`` (None passes no key)."""

    def __repr__(self) -> str:
        """``FROM_ENV``, as the default shows in signatures."""
        return "FROM_ENV"


FROM_ENV = FromEnv()


def resolve_api_key(api_key: str | FromEnv | None) -> str | None:
    """``api_key`` validated, or the environment's key for :data:`FROM_ENV`."""
    if isinstance(api_key, FromEnv):
        return api_key_from_env()
    return validate_api_key(api_key) if api_key is not None else None


def api_key_from_env() -> str | None:
    """The API key in ``$PEARL_SCHED_API_KEY`` (validated), or None when it is unset or empty."""
    key = os.environ.get(API_KEY_ENV)
    return validate_api_key(key, what=f"${API_KEY_ENV}") if key else None


class _Retryable(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, _Retryable | httpx.TransportError)


class _Client:
    """Shared plumbing: a base URL, timeouts and the retry policy."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 10.0,
        attempts: int = 4,
        backoff_s: float = 0.2,
        api_key: str | None = None,
    ) -> None:
        self.url = validate_url(url)
        self.timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0))
        self.attempts = attempts
        self.backoff_s = backoff_s
        headers = {"Authorization": f"Bearer {validate_api_key(api_key)}"} if api_key is not None else None
        self.http = httpx.Client(base_url=self.url, timeout=self.timeout, headers=headers)

    def close(self) -> None:
        self.http.close()

    def healthy(self) -> bool:
        """``GET /health`` answers 200 (servers and the gateway both serve it)."""
        try:
            return self.http.get("/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        idempotent: bool,
        timeout_s: float | None = None,
        ok: tuple[int, ...] = (200, 201, 202, 204),
    ) -> httpx.Response:
        """One call; idempotent ones are retried on transport errors and 5xx answers."""
        timeout = httpx.Timeout(timeout_s) if timeout_s is not None else self.timeout

        def once() -> httpx.Response:
            response = self.http.request(method, path, json=json, timeout=timeout)
            if response.status_code >= 500 and idempotent:
                raise _Retryable(response)
            return response

        try:
            if idempotent:
                retrying = Retrying(
                    stop=stop_after_attempt(self.attempts),
                    wait=wait_exponential(multiplier=self.backoff_s, max=5.0),
                    retry=retry_if_exception(_retryable),
                    reraise=True,
                )
                response = retrying(once)
            else:
                response = once()
        except _Retryable as exc:
            raise AdapterError(
                f"{method} {self.url}{path}: HTTP {exc.response.status_code} after {self.attempts} attempts:"
                f" {_text(exc.response)}"
            ) from None
        except httpx.TimeoutException:
            tries = f" after {self.attempts} attempts" if idempotent else ""
            raise AdapterError(f"{method} {self.url}{path}: timed out{tries}") from None
        except httpx.TransportError as exc:
            tries = f" after {self.attempts} attempts" if idempotent else ""
            raise AdapterError(f"{method} {self.url}{path}: cannot connect{tries} ({exc})") from None
        if response.status_code not in ok:
            raise AdapterError(f"{method} {self.url}{path}: HTTP {response.status_code}: {_text(response)}")
        return response


def _text(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(data, Mapping):
        for key in ("message", "error", "detail"):
            if key in data:
                value = data[key]
                return str(value.get("message", value) if isinstance(value, Mapping) else value)[:300]
    return str(data)[:300]


def poll(check: Callable[[], bool], *, timeout_s: float, every_s: float = 0.1, what: str) -> None:
    """Call ``check`` until it returns True; :class:`AdapterError` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return
        if time.monotonic() >= deadline:
            raise AdapterError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)


def version_tuple(version: str) -> tuple[int, ...]:
    """The release numbers of a PEP 440 version: ``"0.5.21.post1"`` → ``(0, 5, 21)``, ``"0.5.2rc1"`` → ``(0, 5, 2)``.

    Raises:
        SGLangCompatibilityError: ``version`` is not a version.
    """
    return parse_version(version).release


@dataclass(frozen=True)
class DecodeGraphs:
    """The decode CUDA graphs a server has captured, as ``/server_info``'s ``internal_states`` report them."""

    batch_sizes: tuple[int, ...]
    memory_gb: float


class SGLangServerClient(_Client):
    """One SGLang server's HTTP API under the routes of the release it runs (docs/adapters.md, "The SGLang server API").

    The release is learnt from the first ``/server_info`` answer (``version``) unless given.
    """

    def __init__(self, url: str, *, release: SGLangRelease | None = None, **kwargs: Any) -> None:
        """Talk to the server at ``url``.

        Args:
            url: ``scheme://host:port`` of the server.
            release: its SGLang release when known; learnt from ``/server_info`` otherwise.
            **kwargs: ``timeout_s`` (s per call), ``attempts`` and ``backoff_s`` (s) of the retries of idempotent
                calls, ``api_key``.

        Raises:
            InvalidArgumentError: a malformed URL or API key.
        """
        super().__init__(url, **kwargs)
        self.release = release

    def server_info(self) -> dict[str, Any]:
        """``/server_info`` (``/get_server_info`` before 0.5.8); sets :attr:`release` from its ``version``."""
        if self.release is not None:
            path = self.release.server_info_path
        else:  # both exist from 0.5.8 on (the old name logs a deprecation); 0.5.2 has only the old one
            probe = self.call("GET", "/server_info", idempotent=True, ok=(200, 404))
            path = "/server_info" if probe.status_code == 200 else "/get_server_info"
            if probe.status_code == 200:
                data: dict[str, Any] = probe.json()
                self.release = release_for(str(data.get("version", "0")))
                return data
        data = self.call("GET", path, idempotent=True).json()
        if self.release is None:
            self.release = release_for(str(data.get("version", "0")))
        return data

    def _known_release(self) -> SGLangRelease:
        if self.release is None:
            self.server_info()
        assert self.release is not None
        return self.release

    def live_role(self, info: Mapping[str, Any] | None = None) -> str:
        """The role the server runs in now: ``internal_states`` where reported, else the launch role."""
        info = info if info is not None else self.server_info()
        states = info.get("internal_states") or []
        if states and isinstance(states[0], Mapping) and "disaggregation_mode" in states[0]:
            return str(states[0]["disaggregation_mode"])
        return str(info.get("disaggregation_mode", "null"))

    def decode_graphs(self, info: Mapping[str, Any] | None = None) -> DecodeGraphs | None:
        """The decode CUDA graphs captured (0.5.21 on), or None where the server does not report them."""
        info = info if info is not None else self.server_info()
        states = info.get("internal_states") or []
        if not states or not isinstance(states[0], Mapping) or "decode_cuda_graph_bs" not in states[0]:
            return None
        state = states[0]
        return DecodeGraphs(
            tuple(int(b) for b in state.get("decode_cuda_graph_bs") or ()),
            float(state.get("decode_cuda_graph_memory_gb") or 0.0),
        )

    def supports_role_switch(self, info: Mapping[str, Any] | None = None) -> bool:
        """``/pd_role_switch`` exists from 0.5.21, needs the flag at launch and a mooncake or mori backend."""
        info = info if info is not None else self.server_info()
        release = release_for(str(info.get("version", "0")))
        return (
            release.role_switch
            and bool(info.get("enable_pd_role_switch"))
            and info.get("disaggregation_transfer_backend") in release.role_switch_backends
            and self.live_role(info) in ("prefill", "decode")
        )

    def loads(self) -> dict[str, Any]:
        """``/v1/loads?include=all`` (0.5.8 on)."""
        data: dict[str, Any] = self.call("GET", "/v1/loads?include=all", idempotent=True).json()
        return data

    def running_requests(self) -> int:
        """Running plus waiting requests: ``/v1/loads``, or the ``/metrics`` gauges before 0.5.8."""
        if self._known_release().has_v1_loads:
            loads = self.loads()["loads"]
            return sum(int(r.get("num_running_reqs", 0)) + int(r.get("num_waiting_reqs", 0)) for r in loads)
        metrics = self.metrics()
        return int(metrics.get("sglang:num_running_reqs", 0.0) + metrics.get("sglang:num_queue_reqs", 0.0))

    def metrics(self) -> dict[str, float]:
        """``/metrics`` parsed with prometheus_client: metric sample name → value (summed over labels)."""
        from prometheus_client.parser import text_string_to_metric_families

        text = self.call("GET", "/metrics", idempotent=True).text
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
        return out

    def generate(self, payload: Mapping[str, Any], *, timeout_s: float = 600.0) -> dict[str, Any]:
        """``POST /generate`` once (not retried: it is not idempotent), waiting up to ``timeout_s`` seconds.

        Returns:
            SGLang's answer: ``output_ids``, ``meta_info`` (``finish_reason``, token counts, ``weight_version``).

        Raises:
            AdapterError: a timeout, no connection, or an error status.
        """
        data: dict[str, Any] = self.call(
            "POST", "/generate", json=dict(payload), idempotent=False, timeout_s=timeout_s
        ).json()
        return data

    def role_switch(self, new_role: str, graphs: DecodeGraphs | None = None) -> dict[str, Any]:
        """``POST /pd_role_switch``; ``graphs`` (from a decode peer) lets a switch to decode capture its graphs.

        Raises:
            AdapterError: The server refused or failed the switch; the message is its own.
        """
        payload: dict[str, Any] = {"new_role": new_role}
        if graphs is not None:
            payload["decode_cuda_graph_bs"] = list(graphs.batch_sizes) or None
            payload["decode_cuda_graph_memory_gb"] = graphs.memory_gb
        response = self.call("POST", "/pd_role_switch", json=payload, idempotent=False, ok=(200, 400, 409, 500))
        data: dict[str, Any] = response.json()
        if response.status_code != 200 or not data.get("success"):
            raise AdapterError(f"POST {self.url}/pd_role_switch to {new_role}: {data.get('message', response.text)}")
        return data

    def release_memory(self, tags: list[str] | None = None) -> None:
        """``/release_memory_occupation``: free ``tags`` (``weights``, ``kv_cache``, ``cuda_graph``; all when None).

        The server must be idle and launched with ``--enable-memory-saver``.

        Raises:
            AdapterError: the server refused.
        """
        self._success("/release_memory_occupation", {"tags": tags})

    def resume_memory(self, tags: list[str] | None = None) -> None:
        """``/resume_memory_occupation``: take back the memory of ``tags`` (all when None).

        Raises:
            AdapterError: the server refused.
        """
        self._success("/resume_memory_occupation", {"tags": tags})

    def pause(self, mode: str = "retract") -> None:
        """``/pause_generation``; releases before 0.5.8 ignore ``mode`` and always abort."""
        self.call("POST", "/pause_generation", json={"mode": mode}, idempotent=True)

    def resume_generation(self) -> None:
        """``/continue_generation``: undo :meth:`pause`."""
        self.call("POST", "/continue_generation", json={}, idempotent=True)

    def update_weights_from_disk(self, model_path: str, weight_version: str | None = None) -> None:
        """``/update_weights_from_disk``: load ``model_path`` and, when given, label it ``weight_version``.

        Raises:
            AdapterError: the server failed to load the weights.
        """
        payload: dict[str, Any] = {"model_path": model_path}
        if weight_version is not None:
            payload["weight_version"] = weight_version
        self._success("/update_weights_from_disk", payload, idempotent=False)

    def init_weights_update_group(
        self, *, master_address: str, master_port: int, rank_offset: int, world_size: int, group_name: str
    ) -> None:
        """``/init_weights_update_group``: join the trainer's NCCL group ``group_name`` to receive weights.

        Args:
            master_address: the group's rendezvous host (the trainer's rank 0).
            master_port: its rendezvous port.
            rank_offset: this server's first rank in the group.
            world_size: ranks in the group (trainer plus servers).
            group_name: the group's name, reused by :meth:`update_weights_from_distributed`.

        Raises:
            AdapterError: the server failed to join.
        """
        payload = {
            "master_address": master_address,
            "master_port": master_port,
            "rank_offset": rank_offset,
            "world_size": world_size,
            "group_name": group_name,
            "backend": "nccl",
        }
        self._success("/init_weights_update_group", payload, idempotent=False)

    def update_weights_from_distributed(
        self, *, names: list[str], dtypes: list[str], shapes: list[list[int]], group_name: str, weight_version: str
    ) -> None:
        """``/update_weights_from_distributed``: receive the named tensors over ``group_name``'s broadcast.

        Args:
            names: parameter names, in broadcast order.
            dtypes: their dtypes (e.g. ``bfloat16``).
            shapes: their shapes.
            group_name: a group joined with :meth:`init_weights_update_group`.
            weight_version: the label the server reports afterwards.

        Raises:
            AdapterError: the server failed to receive or load them.
        """
        payload = {
            "names": names,
            "dtypes": dtypes,
            "shapes": shapes,
            "group_name": group_name,
            "weight_version": weight_version,
        }
        self._success("/update_weights_from_distributed", payload, idempotent=False)

    def weight_version(self) -> str:
        """The live weight version, from ``/model_info`` (``/server_info`` holds the launch value from 0.5.21)."""
        path = self._known_release().model_info_path
        return str(self.call("GET", path, idempotent=True).json().get("weight_version", ""))

    def _success(self, path: str, payload: Mapping[str, Any], *, idempotent: bool = True) -> None:
        response = self.call("POST", path, json=dict(payload), idempotent=idempotent, ok=(200, 400))
        data = response.json() if response.content else {}
        if response.status_code != 200 or (isinstance(data, Mapping) and data.get("success") is False):
            raise AdapterError(f"POST {self.url}{path}: {_text(response)}")


class GatewayClient(_Client):
    """The gateway's worker API: asynchronous registration and removal, polled to completion."""

    def workers(self) -> list[dict[str, Any]]:
        """``GET /workers``: every registered worker (``id``, ``url``, ``worker_type``, ``status``, ...)."""
        data = self.call("GET", "/workers", idempotent=True).json()
        return list(data.get("workers", []))

    def worker(self, worker_id: str) -> dict[str, Any] | None:
        """``GET /workers/{id}``; None once the gateway answers 404 (never registered, or removed)."""
        response = self.call("GET", f"/workers/{worker_id}", idempotent=True, ok=(200, 404))
        return None if response.status_code == 404 else dict(response.json())

    def add(
        self,
        url: str,
        worker_type: str,
        bootstrap_port: int | None = None,
        *,
        ready_timeout_s: float = 60.0,
        worker_api_key: str | None = None,
    ) -> str:
        """``POST /workers`` and wait until the worker is ready; returns its id.

        smg reaches a worker started with ``--api-key`` only with the key in its registration
        (``worker_api_key``): its own ``--api-key`` does not cover worker discovery.
        """
        payload: dict[str, Any] = {"url": validate_url(url, what="worker URL"), "worker_type": worker_type}
        if bootstrap_port is not None:
            payload["bootstrap_port"] = bootstrap_port
        if worker_api_key is not None:
            payload["api_key"] = worker_api_key
        data = self.call("POST", "/workers", json=payload, idempotent=True).json()
        worker_id = str(data["worker_id"])

        def ready() -> bool:
            info = self.worker(worker_id)
            if info is not None and info.get("status") == "failed":
                raise AdapterError(f"gateway {self.url}: worker {url} failed to register: {info}")
            if info is None:
                return False
            job = info.get("job_status")
            if isinstance(job, dict) and job.get("status") == "failed":  # sglang-router 0.3's background job
                raise AdapterError(f"gateway {self.url}: worker {url} failed to register: {job.get('message', job)}")
            # smg reports "status": "ready"; sglang-router 0.3 has no status field, only is_healthy.
            status = info.get("status", "ready" if "is_healthy" in info else None)
            return status == "ready" and bool(info.get("is_healthy", True))

        poll(ready, timeout_s=ready_timeout_s, what=f"gateway {self.url} to admit {url} as {worker_type}")
        return worker_id

    def remove(self, worker_id: str, *, wait: bool = True, timeout_s: float = 30.0) -> None:
        """``DELETE /workers/{id}``; with ``wait``, poll until 404 (the URL may be re-added only then)."""
        self.call("DELETE", f"/workers/{worker_id}", idempotent=True, ok=(200, 202, 204, 404))
        if wait:
            self.wait_gone(worker_id, timeout_s=timeout_s)

    def wait_gone(self, worker_id: str, *, timeout_s: float = 30.0) -> None:
        """Wait until the gateway answers 404 for ``worker_id``.

        Raises:
            AdapterError: it still lists the worker after ``timeout_s`` seconds.
        """
        poll(lambda: self.worker(worker_id) is None, timeout_s=timeout_s, what=f"gateway to drop worker {worker_id}")

    def find(self, url: str) -> dict[str, Any] | None:
        """The registered worker serving ``url`` (a trailing ``/`` ignored), or None."""
        url = url.rstrip("/")
        return next((w for w in self.workers() if str(w.get("url", "")).rstrip("/") == url), None)
