"""A fake Prometheus server (named as a fake): ``GET /api/v1/query`` with the real API's response format.

It evaluates only the PromQL shapes ``pearl_sched.profiles.prometheus_api`` sends, over fixed per-metric values:

    sum(rate(M[w])) / sum(rate(N[w]))     rates[M] / rates[N]   (NaN when N's rate is 0, as PromQL gives)
    avg(avg_over_time(M[w]))              gauges[M]
    count(M)                              counts[M]

A metric it does not hold answers an empty vector, as Prometheus does for a series it has no samples of; any
other query is a 400 ``bad_data`` error in Prometheus' error format. Every query received is recorded.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

_SERIES = r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?"
_RATIO = re.compile(rf"^sum\(rate\({_SERIES}\[(\d+[smhd])\]\)\) / sum\(rate\({_SERIES}\[(\d+[smhd])\]\)\)$")
_AVG = re.compile(rf"^avg\(avg_over_time\({_SERIES}\[(\d+[smhd])\]\)\)$")
_COUNT = re.compile(rf"^count\({_SERIES}\)$")


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and hung up (the timeout test) is not the fake's error


class FakePrometheus:
    """A fake Prometheus HTTP API on a free local port."""

    def __init__(
        self,
        rates: dict[str, float],
        gauges: dict[str, float] | None = None,
        counts: dict[str, float] | None = None,
        *,
        delay_s: float = 0.0,
    ) -> None:
        self.rates = rates
        self.gauges = gauges or {}
        self.counts = counts or {}
        self.delay_s = delay_s
        self.queries: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                if parts.path != "/api/v1/query":
                    self._send(404, {"status": "error", "errorType": "not_found", "error": "not found"})
                    return
                query = parse_qs(parts.query).get("query", [""])[0]
                fake.queries.append(query)
                if fake.delay_s:
                    threading.Event().wait(fake.delay_s)
                self._send(*fake.evaluate(query))

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FakePrometheus:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def evaluate(self, query: str) -> tuple[int, dict[str, Any]]:
        value: float | None
        if match := _RATIO.match(query):
            top, bottom = self.rates.get(match.group(1)), self.rates.get(match.group(3))
            value = None if top is None or bottom is None else (top / bottom if bottom else float("nan"))
        elif match := _AVG.match(query):
            value = self.gauges.get(match.group(1))
        elif match := _COUNT.match(query):
            value = self.counts.get(match.group(1))
        else:
            return 400, {"status": "error", "errorType": "bad_data", "error": f"1:1: parse error in {query!r}"}
        result = [] if value is None else [{"metric": {}, "value": [1764547200.0, _format(value)]}]
        return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}


def _format(value: float) -> str:
    """Prometheus' sample values are strings, ``NaN`` and ``+Inf`` included."""
    if value != value:
        return "NaN"
    return repr(float(value))
