"""SGLang's serving figures from a Prometheus server, over its HTTP API (``GET /api/v1/query``).

As NVIDIA Dynamo's planner reads its frontend (``components/src/dynamo/planner/utils/prometheus.py``: the mean of a
histogram over a window is ``increase(x_sum[w]) / increase(x_count[w])``), each figure is one instant query over a
window, here written with ``rate()`` (the same ratio)::

    itl_s                  sum(rate(sglang:inter_token_latency_seconds_sum[w])) / sum(rate(..._count[w]))
    ttft_s                 sum(rate(sglang:time_to_first_token_seconds_sum[w])) / sum(rate(..._count[w]))
    running_requests       avg(avg_over_time(sglang:num_running_reqs[w]))            per server
    requests (per second)  sum(rate(sglang:e2e_request_latency_seconds_count[w]))
    prompt_tokens          sum(rate(sglang:prompt_tokens_total[w])) / requests
    generation_tokens      sum(rate(sglang:generation_tokens_total[w])) / requests
    cached_tokens          sum(rate(sglang:cached_tokens_total[w])) / requests     (optional)
    servers                count(sglang:num_running_reqs)

Every request SGLang serves is one LLM turn, so the token figures are per turn. A label selector (``job="sglang"``)
narrows every series to the rollout servers. Each call has a timeout; an error answer, an empty result for a
required figure or an unreachable server is a :class:`PrometheusQueryError` naming the query and the cause.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from pydantic import Field

from pearl_sched.errors import MissingExtraError, PearlSchedError
from pearl_sched.state import Frozen, NonNegFloat, PosFloat

_SELECTOR = re.compile(
    r'^\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"[^"\\]*"(\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"[^"\\]*")*\s*$'
)
_WINDOW = re.compile(r"^[1-9][0-9]*[smhd]$")


class PrometheusQueryError(PearlSchedError):
    """A Prometheus query that failed, or answered no usable number; the message names the query."""


class ServingSummary(Frozen):
    """SGLang's serving figures over a window, as Prometheus recorded them."""

    source: str
    window: str
    itl_s: PosFloat = Field(description="Mean inter-token latency: one decode step")
    ttft_s: PosFloat = Field(description="Mean time to first token")
    running_requests: NonNegFloat = Field(description="Mean running requests per server")
    prompt_tokens: NonNegFloat = Field(description="Prompt tokens per request (per LLM turn)")
    generation_tokens: PosFloat = Field(description="Generated tokens per request (per LLM turn)")
    cached_tokens: NonNegFloat | None = Field(default=None, description="Prefix-cached prompt tokens per request")
    servers: int = Field(ge=1)

    @property
    def appended_tokens(self) -> float:
        """New (uncached) prompt tokens per turn; all of the prompt when the cache figure is missing."""
        return max(self.prompt_tokens - (self.cached_tokens or 0.0), 0.0)


def _series(metric: str, selector: str) -> str:
    return f"{metric}{{{selector}}}" if selector else metric


def _base_url(url: str) -> str:
    """``url`` without a trailing slash if it is ``http(s)://host[:port][/path-prefix]``; ValueError otherwise."""
    parts = urlsplit(url) if isinstance(url, str) else None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.query
        or parts.fragment
        or parts.username is not None
        or any(ch.isspace() or not ch.isprintable() for ch in url)
    ):
        raise ValueError(f"the Prometheus URL is http(s)://host:port with no credentials or query, not {url!r}")
    return url.rstrip("/")


def sglang_queries(window: str, selector: str = "") -> dict[str, str]:
    """The PromQL of each :class:`ServingSummary` figure (see the module docstring).

    Raises:
        ValueError: ``window`` is not a Prometheus duration like ``5m``, or ``selector`` not ``label="value", ...``.
    """
    if not _WINDOW.match(window):
        raise ValueError(f"the window is a Prometheus duration such as 300s or 5m, not {window!r}")
    if selector and not _SELECTOR.match(selector):
        raise ValueError(f'the selector is label matchers such as job="sglang", not {selector!r}')

    def s(metric: str) -> str:
        return _series(metric, selector)

    requests = f"sum(rate({s('sglang:e2e_request_latency_seconds_count')}[{window}]))"

    def mean(histogram: str) -> str:
        return f"sum(rate({s(histogram + '_sum')}[{window}])) / sum(rate({s(histogram + '_count')}[{window}]))"

    return {
        "itl_s": mean("sglang:inter_token_latency_seconds"),
        "ttft_s": mean("sglang:time_to_first_token_seconds"),
        "running_requests": f"avg(avg_over_time({s('sglang:num_running_reqs')}[{window}]))",
        "prompt_tokens": f"sum(rate({s('sglang:prompt_tokens_total')}[{window}])) / {requests}",
        "generation_tokens": f"sum(rate({s('sglang:generation_tokens_total')}[{window}])) / {requests}",
        "cached_tokens": f"sum(rate({s('sglang:cached_tokens_total')}[{window}])) / {requests}",
        "servers": f"count({s('sglang:num_running_reqs')})",
    }


OPTIONAL = frozenset({"cached_tokens"})


def _scalar(query: str, body: object) -> float | None:
    """The one number of an instant-query answer (``vector`` of one sample, or ``scalar``); None when empty."""
    if not isinstance(body, Mapping) or body.get("status") != "success":
        error = body.get("error", "no status") if isinstance(body, Mapping) else "not a JSON object"
        raise PrometheusQueryError(f"Prometheus refused {query!r}: {error}")
    data = body.get("data")
    if not isinstance(data, Mapping):
        raise PrometheusQueryError(f"Prometheus answered {query!r} without data")
    kind, result = data.get("resultType"), data.get("result")
    sample: object
    if kind == "scalar" and isinstance(result, list) and len(result) == 2:
        sample = result
    elif kind == "vector" and isinstance(result, list):
        if not result:
            return None
        if len(result) > 1:
            raise PrometheusQueryError(f"{query!r} answered {len(result)} series; the query aggregates to one")
        entry = result[0]
        sample = entry.get("value") if isinstance(entry, Mapping) else None
    else:
        raise PrometheusQueryError(f"{query!r} answered a {kind!r}; an instant query answers a vector or scalar")
    if not isinstance(sample, list) or len(sample) != 2:
        raise PrometheusQueryError(f"{query!r}: a sample is [time, value], got {str(sample)[:60]}")
    try:
        value = float(sample[1])
    except (TypeError, ValueError):
        raise PrometheusQueryError(f"{query!r}: the value {str(sample[1])[:40]!r} is not a number") from None
    return value if math.isfinite(value) else None  # NaN: 0/0 over a window without requests


def query_sglang(url: str, *, window: str = "5m", selector: str = "", timeout_s: float = 10.0) -> ServingSummary:
    """Query Prometheus at ``url`` for SGLang's serving figures over the last ``window``.

    Args:
        url: ``http(s)://host:port`` of the Prometheus server.
        window: The range of each ``rate()``, a Prometheus duration (``5m``).
        selector: Label matchers added to every series (``job="sglang-rollout"``).
        timeout_s: Seconds each HTTP call may take.

    Raises:
        PrometheusQueryError: Unreachable, an error answer, or no data for a required figure.
        ValueError: A malformed URL, window or selector.
        MissingExtraError: httpx is not installed (the ``client`` extra).
    """
    try:
        import httpx
    except ImportError as exc:  # pragma: no cover - the client extra installs it
        raise MissingExtraError(exc.name or "httpx", "client") from exc
    base = _base_url(url)
    queries = sglang_queries(window, selector)
    values: dict[str, float | None] = {}
    with httpx.Client(base_url=base, timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0))) as http:
        for name, query in queries.items():
            try:
                response = http.get("/api/v1/query", params={"query": query})
            except httpx.HTTPError as exc:
                raise PrometheusQueryError(f"Prometheus at {base} unreachable: {type(exc).__name__}: {exc}") from None
            try:
                body = response.json()
            except ValueError:
                raise PrometheusQueryError(
                    f"Prometheus at {base} answered HTTP {response.status_code} that is not JSON to {query!r}"
                ) from None
            values[name] = _scalar(query, body)
            if values[name] is None and name not in OPTIONAL:
                raise PrometheusQueryError(
                    f"no data for {name} over the last {window} ({query!r}): are the SGLang servers started with "
                    "--enable-metrics, scraped by this Prometheus, and serving requests?"
                )
    got: dict[str, float] = {k: v for k, v in values.items() if v is not None}
    try:
        return ServingSummary(
            source=f"Prometheus {base}" + (f" {{{selector}}}" if selector else ""),
            window=window,
            itl_s=got["itl_s"],
            ttft_s=got["ttft_s"],
            running_requests=got["running_requests"],
            prompt_tokens=got["prompt_tokens"],
            generation_tokens=got["generation_tokens"],
            cached_tokens=got.get("cached_tokens"),
            servers=max(1, round(got["servers"])),
        )
    except ValueError as exc:  # pydantic: a figure out of range (a zero latency, negative tokens)
        first = str(exc).splitlines()[1] if len(str(exc).splitlines()) > 1 else str(exc)
        raise PrometheusQueryError(f"Prometheus at {base}: an implausible figure: {first}") from None
