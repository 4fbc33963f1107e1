"""FakeSGLangServer: a test double of SGLang's HTTP server, one release at a time, for machines without a GPU.

It is a fake, named as one: no model runs, generation is a sleep of ``token_time_s`` per token. What it keeps
faithful is the HTTP surface pearl_sched and the SGLang model gateway (``smg``) use (docs/adapters.md, "The SGLang
server API") and its rules:

* ``/health``, ``/server_info`` (``version``, ``disaggregation_mode``, ``weight_version``, …), ``/model_info``,
  ``/v1/models``, ``/v1/loads``, ``/metrics`` (Prometheus text, ``sglang:`` names) — and no ``/version``: the
  gateway takes a server that answers it for vLLM and speaks vLLM's PD protocol to it;
* ``/generate``: in PD mode a request must carry ``bootstrap_host``/``bootstrap_port``/``bootstrap_room`` and go
  to both servers — the prefill server publishes the room's KV on its bootstrap port when its prefill is done,
  the decode server fetches it from there and fails the request if it never arrives;
* ``/pd_role_switch``: only with ``--enable-pd-role-switch``, on mooncake/mori transfer backends, in PD mode,
  when idle, one at a time;
* ``/release_memory_occupation`` and ``/resume_memory_occupation``: only with ``--enable-memory-saver`` and when
  idle; a server with released memory refuses generation;
* ``/pause_generation`` (``abort`` returns running requests with ``finish_reason.type == "abort"`` and the tokens
  so far; ``retract``/``in_place`` hold them until ``/continue_generation``);
* ``/update_weights_from_disk`` and ``/init_weights_update_group`` + ``/update_weights_from_distributed``, which
  set ``weight_version``.
* worker sizes: ``--tp-size``, ``--dp-size`` with ``--enable-dp-attention``, ``--attn-dp-size`` (0.5.23 on) and
  ``--ep-size`` are taken and reported in ``/server_info`` as the release resolves them (``tp_size``,
  ``dp_size``, ``attn_dp_size``, ``enable_dp_attention``, ``ep_size``); a layout SGLang refuses stops it at start.
  ``fake_cuda_visible_devices`` (the fake's own field) says which GPUs it was given.

**Versions.** ``--fake-version`` (default the newest in :data:`FAKE_VERSIONS`) picks the release it imitates,
with that release's flags and routes from :mod:`~pearl_sched.adapters.sglang_versions`: a flag the release does
not have makes it exit with status 2, as SGLang's argparse does (it knows only the flags pearl_sched passes, not
all of SGLang's); 0.5.2 serves ``/get_server_info``, ``/get_model_info`` and no ``/v1/loads``, and pauses always
abort; ``/pd_role_switch`` exists from 0.5.21, reports the live role in ``/server_info``'s ``internal_states``
and, for a switch to decode on a server that has captured no decode CUDA graphs, requires
``decode_cuda_graph_memory_gb``.

Run it like SGLang: ``python -m pearl_sched.adapters.fake_sglang --model-path M --port P
[--disaggregation-mode prefill --disaggregation-bootstrap-port B] [--enable-pd-role-switch] …`` (the same flags
``sglang.launch_server`` takes, so a launcher can start either), or in-process with :meth:`start`.
Fault injection for tests: ``--fake-fail-start``, ``--fake-fail-role-switch``, ``--fake-startup-delay``.

Like SGLang, with ``--api-key`` every route but ``/health*`` and ``/metrics*`` answers 401 without
``Authorization: Bearer <key>``. A decode fake fetches a room's "KV" only from a loopback address or its own
host, never from another host a request names.
"""

from __future__ import annotations

import argparse
import hmac
import itertools
import json
import logging
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pearl_sched.adapters.sglang_versions import ATTN_DP_SIZE, BASE_FLAGS, RELEASES, SGLangRelease, release_for

logger = logging.getLogger("pearl_sched.adapters.fake_sglang")

FAKE_VERSIONS = ("0.5.2", "0.5.8", "0.5.10", "0.5.23")  # ROLL's, verl's and AReaL's pins, and the newest
VERSION = FAKE_VERSIONS[-1]
FAKE_DECODE_CUDA_GRAPH_BS = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # what a fake decode server reports as captured
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class FakeConfig:
    """The launch flags the fake honours (names as in ``sglang.launch_server``)."""

    model_path: str = "fake/model"
    host: str = "127.0.0.1"
    port: int = 30000
    tp_size: int = 1
    dp_size: int = 1
    enable_dp_attention: bool = False
    attn_dp_size: int = 1
    ep_size: int = 1
    base_gpu_id: int = 0
    disaggregation_mode: str = "null"
    disaggregation_transfer_backend: str = "mooncake"
    disaggregation_bootstrap_port: int | None = None
    enable_pd_role_switch: bool = False
    enable_memory_saver: bool = False
    enable_metrics: bool = True
    max_running_requests: int = 256
    version: str = VERSION
    token_time_s: float = 0.002
    prefill_time_s: float = 0.005
    role_switch_time_s: float = 0.05
    startup_delay_s: float = 0.0
    fail_start: bool = False
    fail_role_switch: bool = False
    kv_wait_s: float = 10.0
    api_key: str | None = field(default=None, repr=False)
    fake_decode_cuda_graph_memory_gb: float = 1.0  # a fake's figure, reported as the captured graphs' footprint

    @property
    def release(self) -> SGLangRelease:
        """The release this fake imitates."""
        return release_for(self.version)

    def parallelism(self) -> dict[str, Any]:
        """The parallel layout as SGLang resolves it and reports it in ``/server_info``.

        Before 0.5.23 attention-DP is ``dp_size`` with ``enable_dp_attention``; from 0.5.23 it is ``attn_dp_size``
        (the old spelling resolved into it, ``dp_size`` back to 1, ``enable_dp_attention`` reporting whether
        attention-DP runs: ``_handle_deprecated_dp_attention`` and ``ServerArgs.resolved_dict`` there).

        Raises:
            ValueError: a layout SGLang refuses at start (attention-DP not dividing TP, ``ep_size`` not 1 or TP,
                attention-DP given both ways on 0.5.23).
        """
        attention_dp = self.attn_dp_size
        dp = self.dp_size
        if self.enable_dp_attention and dp > 1:
            if attention_dp > 1:
                raise ValueError(f"--dp-size {dp} with --attn-dp-size {attention_dp}: give one")
            attention_dp = dp
        if self.tp_size % attention_dp:
            raise ValueError(f"tp_size {self.tp_size} is not divisible by the attention-DP size {attention_dp}")
        if self.ep_size not in (1, self.tp_size):
            raise ValueError("ep_size * moe_dp_size must be equal to tp_size")
        if ATTN_DP_SIZE in self.release.flags:
            return {
                "tp_size": self.tp_size,
                "dp_size": 1 if attention_dp > 1 else dp,
                "attn_dp_size": attention_dp,
                "enable_dp_attention": attention_dp > 1,
                "ep_size": self.ep_size,
            }
        return {
            "tp_size": self.tp_size,
            "dp_size": attention_dp if attention_dp > 1 else dp,
            "enable_dp_attention": attention_dp > 1,
            "ep_size": self.ep_size,
        }


@dataclass
class _Request:
    rid: str
    prompt_tokens: int
    max_new_tokens: int
    generated: int = 0
    aborted: bool = False


@dataclass
class _State:
    role: str
    weight_version: str = "default"
    running: dict[str, _Request] = field(default_factory=dict)
    released: set[str] = field(default_factory=set)
    paused: str | None = None
    switching: bool = False
    group: str | None = None
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    requests_total: int = 0
    aborted_total: int = 0
    rooms: dict[int, threading.Event] = field(default_factory=dict)
    last_sampling_params: dict[str, Any] = field(default_factory=dict)  # what the last /generate asked for
    decode_cuda_graph_bs: tuple[int, ...] = ()  # captured at start by a decode server, or on a switch to decode


class FakeSGLangServer:
    """One fake server: an HTTP listener (and, for a prefill server, a bootstrap listener) in threads."""

    def __init__(self, config: FakeConfig) -> None:
        """Set up the fake's state from its launch flags; :meth:`start` listens.

        A decode server starts with :data:`FAKE_DECODE_CUDA_GRAPH_BS` captured, as SGLang captures decode graphs
        at launch.
        """
        self.config = config
        self.layout = config.parallelism()
        self.state = _State(role=config.disaggregation_mode)
        if config.disaggregation_mode == "decode":
            self.state.decode_cuda_graph_bs = FAKE_DECODE_CUDA_GRAPH_BS
        self.lock = threading.Condition()
        self.ids = itertools.count()
        self.http: ThreadingHTTPServer | None = None
        self.bootstrap: ThreadingHTTPServer | None = None
        self.bootstrap_port = config.disaggregation_bootstrap_port
        # A probe's hooks (bench/smg_load_probe.py): the times (time.monotonic) each load route was read, and
        # fields that replace the fake's own figures in the reported load (e.g. {"num_waiting_reqs": 8}).
        self.load_reads: list[tuple[float, str]] = []
        self.load_override: dict[str, float] = {}

    # -- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> FakeSGLangServer:
        """Listen (after the configured startup delay); returns self."""
        if self.config.fail_start:
            raise RuntimeError("fake server configured to fail at start")
        time.sleep(self.config.startup_delay_s)
        self.http = _serve(self.config.host, self.config.port, _handler(self))
        if self.bootstrap_port is not None:
            self.bootstrap = _serve(self.config.host, self.bootstrap_port, _bootstrap_handler(self))
        return self

    def stop(self) -> None:
        """Close the HTTP listener and, if one runs, the bootstrap listener."""
        for server in (self.http, self.bootstrap):
            if server is not None:
                server.shutdown()
                server.server_close()

    @property
    def url(self) -> str:
        """``http://host:port`` of the fake's HTTP API."""
        return f"http://{self.config.host}:{self.config.port}"

    def idle(self) -> bool:
        """Whether no request is running (role switches and memory release require it)."""
        return not self.state.running

    # -- endpoints ------------------------------------------------------------------------------------------
    def server_info(self) -> dict[str, Any]:
        """The ``/server_info`` body: launch flags, ``version``, ``weight_version`` and ``internal_states``.

        From 0.5.21 the live role and the captured decode graphs are in ``internal_states`` and the top level keeps
        the launch values, as in SGLang.
        """
        c, s = self.config, self.state
        launch = c.release.live_role_in_internal_states  # the top level holds launch values there
        internal: dict[str, Any] = {"last_gen_throughput": 0.0}
        if launch:
            internal |= {
                "disaggregation_mode": s.role,
                "decode_cuda_graph_bs": list(s.decode_cuda_graph_bs),
                "decode_cuda_graph_memory_gb": c.fake_decode_cuda_graph_memory_gb if s.decode_cuda_graph_bs else 0.0,
            }
        return {
            "version": c.version,
            "model_path": c.model_path,
            "tokenizer_path": c.model_path,
            "served_model_name": c.model_path,
            **self.layout,
            "base_gpu_id": c.base_gpu_id,
            "fake_cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),  # the fake's: which GPUs it got
            "disaggregation_mode": c.disaggregation_mode if launch else s.role,
            "disaggregation_transfer_backend": c.disaggregation_transfer_backend,
            "disaggregation_bootstrap_port": self.bootstrap_port,
            "enable_pd_role_switch": c.enable_pd_role_switch,
            "enable_memory_saver": c.enable_memory_saver,
            "max_running_requests": c.max_running_requests,
            "weight_version": "default" if launch else s.weight_version,  # a later update shows in /model_info
            "internal_states": [internal],
            "is_fake": True,
        }

    def routes(self) -> frozenset[str]:
        """The routes this release serves (of those the fake implements)."""
        release = self.config.release
        routes = {
            "/health", "/health_generate", "/get_server_info", "/get_model_info", "/v1/models", "/metrics",
            "/get_load", "/generate", "/release_memory_occupation", "/resume_memory_occupation",
            "/pause_generation", "/continue_generation", "/update_weights_from_disk",
            "/update_weights_from_distributed", "/init_weights_update_group", "/flush_cache",
        }  # fmt: skip
        routes |= {release.server_info_path, release.model_info_path}
        if release.has_v1_loads:
            routes.add("/v1/loads")
        if release.role_switch:
            routes.add("/pd_role_switch")
        return frozenset(routes)

    def loads(self) -> dict[str, Any]:
        """The ``/v1/loads`` body: one DP rank with its running requests (fake token figures: 64 per request)."""
        with self.lock:
            running = len(self.state.running)
        rank = {
            "dp_rank": 0,
            "num_running_reqs": running,
            "num_waiting_reqs": 0,
            "num_used_tokens": running * 64,
            "max_total_num_tokens": self.config.max_running_requests * 4096,
            "token_usage": running / self.config.max_running_requests,
            "gen_throughput": 0.0,
            **self.load_override,
        }
        rank["num_total_reqs"] = rank["num_running_reqs"] + rank["num_waiting_reqs"]
        return {  # SGLang's v1_loads.get_loads: an ISO-8601 UTC timestamp (a number here made smg drop the body)
            "timestamp": datetime.now(timezone.utc).isoformat(),
            "version": self.config.version,
            "dp_rank_count": 1,
            "loads": [rank],
            "aggregate": {
                "total_running_reqs": rank["num_running_reqs"],
                "total_waiting_reqs": rank["num_waiting_reqs"],
                "total_reqs": rank["num_total_reqs"],
                "total_used_tokens": rank["num_used_tokens"],
                "avg_token_usage": rank["token_usage"],
                "avg_throughput": rank["gen_throughput"],
            },
        }

    def metrics(self) -> str:
        """The ``/metrics`` body: Prometheus text with SGLang's ``sglang:`` gauge and counter names."""
        s = self.state
        name = f'model_name="{self.config.model_path}"'
        lines = []
        for metric, kind, value in (
            ("num_running_reqs", "gauge", len(s.running)),
            ("num_queue_reqs", "gauge", self.load_override.get("num_waiting_reqs", 0)),
            (
                "token_usage",
                "gauge",
                self.load_override.get("token_usage", len(s.running) / self.config.max_running_requests),
            ),
            ("gen_throughput", "gauge", self.load_override.get("gen_throughput", 0.0)),
            ("prompt_tokens_total", "counter", s.prompt_tokens_total),
            ("generation_tokens_total", "counter", s.generation_tokens_total),
            ("num_requests_total", "counter", s.requests_total),
            ("num_aborted_requests_total", "counter", s.aborted_total),
        ):
            base = metric.removesuffix("_total") if kind == "counter" else metric
            lines += [
                f"# HELP sglang:{base} {metric}",
                f"# TYPE sglang:{base} {kind}",
                f"sglang:{metric}{{{name}}} {value}",
            ]
        return "\n".join(lines) + "\n"

    def generate(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Serve ``/generate``: sleep ``token_time_s`` per token, honouring pauses; returns (status, body).

        A prefill server prefills (``prefill_time_s``), publishes the room's KV and returns one token; a decode
        server first fetches the room's KV from the prefill server's bootstrap port. Refused with 503 while memory
        is released or a role switch runs, 400 without bootstrap fields in PD mode, 500 when the KV never comes.
        """
        c, s = self.config, self.state
        if s.released:
            return 503, {"error": f"memory released ({sorted(s.released)}): resume_memory_occupation first"}
        if s.switching:
            return 503, {"error": "role switch in progress"}
        room = int(body.get("bootstrap_room") or 0)
        if s.role != "null" and not all(k in body for k in ("bootstrap_host", "bootstrap_port", "bootstrap_room")):
            return 400, {"error": f"a {s.role} server needs bootstrap_host, bootstrap_port and bootstrap_room"}
        params = body.get("sampling_params") or {}
        s.last_sampling_params = dict(params)
        prompt = body.get("input_ids") or body.get("text") or ""
        prompt_tokens = len(prompt) if isinstance(prompt, list) else max(1, len(str(prompt).split()))
        request = _Request(
            str(body.get("rid") or f"fake-{next(self.ids)}"), prompt_tokens, int(params.get("max_new_tokens", 16))
        )
        with self.lock:
            s.running[request.rid] = request
            s.requests_total += 1
            s.prompt_tokens_total += prompt_tokens
        try:
            if s.role == "prefill":
                time.sleep(c.prefill_time_s)
                with self.lock:
                    s.rooms.setdefault(room, threading.Event()).set()  # KV ready for the decode side
                request.max_new_tokens = 1
            elif s.role == "decode" and str(body["bootstrap_host"]) not in (*LOOPBACK, c.host):
                return 400, {
                    "error": f"bootstrap_host {body['bootstrap_host']!r} is not loopback or this server's host"
                }
            elif s.role == "decode" and not _fetch_kv(
                body["bootstrap_host"], int(body["bootstrap_port"]), room, c.kv_wait_s
            ):
                return 500, {"error": f"KV transfer for room {room} never arrived from the prefill server"}
            for _ in range(request.max_new_tokens):
                with self.lock:
                    while s.paused in ("retract", "in_place") and not request.aborted:
                        self.lock.wait(0.05)
                    if request.aborted or s.paused == "abort":
                        request.aborted = True
                        break
                time.sleep(c.token_time_s)
                request.generated += 1
            with self.lock:
                s.generation_tokens_total += request.generated
                if request.aborted:
                    s.aborted_total += 1
        finally:
            with self.lock:
                s.running.pop(request.rid, None)
                self.lock.notify_all()
        finish = (
            {"type": "abort", "message": "paused with abort"}
            if request.aborted
            else {
                "type": "length",
                "length": request.generated,
            }
        )
        return 200, {
            "text": " ".join(["tok"] * request.generated),
            "output_ids": list(range(request.generated)),
            "meta_info": {
                "id": request.rid,
                "prompt_tokens": prompt_tokens,
                "completion_tokens": request.generated,
                "cached_tokens": 0,
                "finish_reason": finish,
                "weight_version": s.weight_version,
                "e2e_latency": request.generated * c.token_time_s,
                **self._logprobs(body, request.generated),
            },
        }

    @staticmethod
    def _logprobs(body: dict[str, Any], generated: int) -> dict[str, Any]:
        """``output_token_logprobs`` ([logprob, token id, text]) when asked; a fake's value, -0.1 · (position+1)."""
        if not body.get("return_logprob"):
            return {}
        return {"output_token_logprobs": [[-0.1 * (i + 1), i, None] for i in range(generated)]}

    def pd_role_switch(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Serve ``/pd_role_switch`` under SGLang's rules; returns (status, body with ``success`` and ``message``).

        Refused (400) without ``--enable-pd-role-switch``, outside PD mode, on a backend other than mooncake/mori,
        while busy or during another switch, and for a switch to decode without captured graphs unless
        ``decode_cuda_graph_memory_gb`` is given. Takes ``role_switch_time_s``.
        """
        c, s = self.config, self.state
        new_role = body.get("new_role")
        old = s.role

        def refuse(code: int, message: str) -> tuple[int, dict[str, Any]]:
            return code, {"success": False, "message": message, "old_role": old, "new_role": new_role}

        if not c.enable_pd_role_switch:
            return refuse(400, "--enable-pd-role-switch is not set on this instance")
        if new_role not in ("prefill", "decode"):
            return refuse(400, f"invalid new_role={new_role!r}")
        if s.role not in ("prefill", "decode"):
            return refuse(400, "instance is not running in PD disaggregation mode")
        if c.disaggregation_transfer_backend not in c.release.role_switch_backends:
            return refuse(
                400, f"transfer backend {c.disaggregation_transfer_backend!r} does not support runtime role switch"
            )
        if new_role == old:
            return 200, {"success": True, "message": "already in target role", "old_role": old, "new_role": new_role}
        graph_gb = body.get("decode_cuda_graph_memory_gb")
        if new_role == "decode" and not s.decode_cuda_graph_bs:
            if graph_gb is None:
                return refuse(400, "decode_cuda_graph_memory_gb is required before capturing decode graphs")
            if float(graph_gb) < 0:
                return refuse(400, "decode_cuda_graph_memory_gb must be non-negative")
        with self.lock:
            if s.switching:
                return refuse(400, "another role switch is already in progress")
            if s.running:
                return refuse(400, "instance is not idle; drain all requests before switching")
            s.switching = True
        try:
            time.sleep(c.role_switch_time_s)
            if c.fail_role_switch:
                return refuse(400, "role switch failed (injected fault)")
            s.role = new_role
            if new_role == "decode" and not s.decode_cuda_graph_bs:
                s.decode_cuda_graph_bs = tuple(body.get("decode_cuda_graph_bs") or FAKE_DECODE_CUDA_GRAPH_BS)
            if new_role == "prefill" and self.bootstrap_port is not None and self.bootstrap is None:
                self.bootstrap = _serve(c.host, self.bootstrap_port, _bootstrap_handler(self))
            return 200, {"success": True, "message": "ok", "old_role": old, "new_role": new_role}
        finally:
            s.switching = False

    def memory(self, release: bool, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Serve ``/release_memory_occupation`` (``release``) or ``/resume_memory_occupation`` for ``tags``.

        Refused (400) without ``--enable-memory-saver`` or while requests run.
        """
        s = self.state
        if not self.config.enable_memory_saver:
            return 400, {"success": False, "message": "memory saver is off: launch with --enable-memory-saver"}
        tags = set(body.get("tags") or ("weights", "kv_cache", "cuda_graph"))
        with self.lock:
            if s.running:
                return 400, {"success": False, "message": f"server is not idle ({len(s.running)} running requests)"}
            s.released = s.released | tags if release else s.released - tags
        return 200, {"success": True, "message": "released" if release else "resumed"}

    def pause(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Serve ``/pause_generation`` in ``mode``: ``abort``, ``retract`` or ``in_place``.

        ``abort`` ends running requests with their tokens so far; ``retract`` and ``in_place`` hold them until
        ``/continue_generation``. Releases before 0.5.8 always abort.
        """
        mode = body.get("mode", "abort") if self.config.release.pause_modes else "abort"  # 0.5.2 always aborts
        if mode not in ("abort", "retract", "in_place"):
            return 400, {"error": f"unknown pause mode {mode!r}"}
        with self.lock:
            self.state.paused = mode
            if mode == "abort":
                for request in self.state.running.values():
                    request.aborted = True
            self.lock.notify_all()
        return 200, {"success": True}

    def resume_generation(self) -> tuple[int, dict[str, Any]]:
        """Serve ``/continue_generation``: held requests go on."""
        with self.lock:
            self.state.paused = None
            self.lock.notify_all()
        return 200, {"success": True}

    def update_weights(self, body: dict[str, Any], distributed: bool) -> tuple[int, dict[str, Any]]:
        """Serve ``/update_weights_from_disk`` or (``distributed``) ``/update_weights_from_distributed``.

        Sets ``weight_version``; no weights move. Refused (400) without ``model_path``, for an unknown group, or
        while requests run (unless ``abort_all_requests``).
        """
        s = self.state
        if distributed and s.group != body.get("group_name"):
            return 400, {"success": False, "message": f"no weights update group {body.get('group_name')!r}"}
        if not distributed and not body.get("model_path"):
            return 400, {"success": False, "message": "model_path is required"}
        with self.lock:
            if s.running and not body.get("abort_all_requests"):
                return 400, {"success": False, "message": "requests are running: pause generation first"}
            s.weight_version = str(body.get("weight_version") or s.weight_version)
        return 200, {"success": True, "message": "updated", "num_paused_requests": 0}


def _fetch_kv(host: str, port: int, room: int, wait_s: float) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/kv/{room}?wait={wait_s}", timeout=wait_s + 5) as r:
            return bool(json.loads(r.read()).get("ready"))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _serve(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name=f"fake-sglang-{port}").start()
    return server


class _Base(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def reply(self, code: int, payload: Any, content_type: str = "application/json") -> None:
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return {}
        try:
            data = json.loads(self.rfile.read(length))
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}


def _handler(fake: FakeSGLangServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Base):
        def authorized(self, path: str) -> bool:
            """SGLang's rule: with an API key, only /health* and /metrics* are open."""
            key = fake.config.api_key
            if key is None or path.startswith(("/health", "/metrics")):
                return True
            if hmac.compare_digest(self.headers.get("Authorization", ""), f"Bearer {key}"):
                return True
            self.reply(401, {"error": "Unauthorized"})
            return False

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if not self.authorized(path):
                return
            if path not in fake.routes():
                self.reply(404, {"detail": "Not Found"})
            elif path in ("/health", "/health_generate"):
                self.reply(503 if fake.state.released else 200, {})
            elif path in ("/server_info", "/get_server_info"):
                self.reply(200, fake.server_info())
            elif path in ("/model_info", "/get_model_info"):
                c = fake.config
                self.reply(
                    200,
                    {
                        "model_path": c.model_path,
                        "tokenizer_path": c.model_path,
                        "is_generation": True,
                        "weight_version": fake.state.weight_version,
                    },
                )
            elif path == "/v1/models":
                self.reply(200, {"object": "list", "data": [{"id": fake.config.model_path, "object": "model"}]})
            elif path in ("/v1/loads", "/loads", "/get_load"):
                fake.load_reads.append((time.monotonic(), path))
                self.reply(200, fake.loads())
            elif path == "/metrics":
                fake.load_reads.append((time.monotonic(), path))
                self.reply(200, fake.metrics(), "text/plain; version=0.0.4")
            else:
                self.reply(404, {"error": f"no route {path}"})

        def do_POST(self) -> None:
            path = self.path.split("?")[0]
            if not self.authorized(path):
                return
            body = self.body()
            routes: dict[str, Callable[[], tuple[int, dict[str, Any]]]] = {
                "/generate": lambda: fake.generate(body),
                "/pd_role_switch": lambda: fake.pd_role_switch(body),
                "/release_memory_occupation": lambda: fake.memory(True, body),
                "/resume_memory_occupation": lambda: fake.memory(False, body),
                "/pause_generation": lambda: fake.pause(body),
                "/continue_generation": fake.resume_generation,
                "/update_weights_from_disk": lambda: fake.update_weights(body, distributed=False),
                "/update_weights_from_distributed": lambda: fake.update_weights(body, distributed=True),
                "/init_weights_update_group": lambda: _init_group(fake, body),
                "/flush_cache": lambda: (200, {"success": True}),
            }
            if path not in routes or path not in fake.routes():
                self.reply(404, {"detail": "Not Found"})
                return
            code, payload = routes[path]()
            self.reply(code, payload)

    return Handler


def _init_group(fake: FakeSGLangServer, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    missing = [k for k in ("master_address", "master_port", "rank_offset", "world_size", "group_name") if k not in body]
    if missing:
        return 400, {"success": False, "message": f"missing {missing}"}
    fake.state.group = str(body["group_name"])
    return 200, {"success": True, "message": "group initialised"}


def _bootstrap_handler(fake: FakeSGLangServer) -> type[BaseHTTPRequestHandler]:
    class Bootstrap(_Base):
        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            if not path.startswith("/kv/"):
                self.reply(404, {})
                return
            room = int(path.removeprefix("/kv/"))
            wait = float(query.removeprefix("wait=") or 0) if query.startswith("wait=") else 0.0
            with fake.lock:
                event = fake.state.rooms.setdefault(room, threading.Event())
            ready = event.wait(wait)
            if ready:
                with fake.lock:
                    fake.state.rooms.pop(room, None)
            self.reply(200, {"ready": ready})

    return Bootstrap


def launch_parser(version: str = VERSION) -> argparse.ArgumentParser:
    """Build the fake's launch parser for SGLang ``version``.

    It takes that release's flags (of those pearl_sched passes) and the fake's own ``--fake-*`` ones.
    """
    release = release_for(version)
    p = argparse.ArgumentParser(prog="fake_sglang", description="A fake SGLang server (no model, no GPU)")
    p.add_argument("--model-path", default="fake/model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--dp-size", type=int, default=1)
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--ep-size", type=int, default=1)
    if release.has(ATTN_DP_SIZE):
        p.add_argument(ATTN_DP_SIZE, type=int, default=1)
    p.add_argument("--base-gpu-id", type=int, default=0)
    p.add_argument("--disaggregation-mode", default="null", choices=("null", "prefill", "decode"))
    p.add_argument("--disaggregation-transfer-backend", default="mooncake", choices=release.transfer_backends)
    p.add_argument("--disaggregation-bootstrap-port", type=int)
    for flag in ("--enable-memory-saver", "--enable-metrics", "--skip-server-warmup", "--disable-cuda-graph"):
        p.add_argument(flag, action="store_true")
    modelled = {a for action in p._actions for a in action.option_strings}
    for flag in sorted(BASE_FLAGS - modelled):
        p.add_argument(flag)  # accepted, not modelled
    gated = set().union(*(r.flags for r in RELEASES)) - BASE_FLAGS
    for flag in sorted((gated & release.flags) - modelled):
        if flag.startswith("--enable-"):
            p.add_argument(flag, action="store_true")
        else:
            p.add_argument(flag)
    p.add_argument("--fake-token-time", type=float, default=0.002)
    p.add_argument("--fake-startup-delay", type=float, default=0.0)
    p.add_argument("--fake-fail-start", action="store_true")
    p.add_argument("--fake-fail-role-switch", action="store_true")
    p.add_argument("--fake-version", default=VERSION)
    return p


def parse_args(argv: list[str]) -> FakeConfig:
    """The ``sglang.launch_server`` flags of the imitated release (``--fake-version``), plus the fake's own.

    A flag the release does not have exits with status 2, as SGLang's parser does; flags pearl_sched passes but
    the fake does not model (``--mem-fraction-static``, …) are accepted and ignored.
    """
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--fake-version", default=VERSION)
    args = launch_parser(pre.parse_known_args(argv)[0].fake_version).parse_args(argv)
    return FakeConfig(
        model_path=args.model_path,
        host=args.host,
        port=args.port,
        tp_size=args.tp_size,
        dp_size=args.dp_size,
        enable_dp_attention=args.enable_dp_attention,
        attn_dp_size=getattr(args, "attn_dp_size", 1),
        ep_size=args.ep_size,
        base_gpu_id=args.base_gpu_id,
        disaggregation_mode=args.disaggregation_mode,
        disaggregation_transfer_backend=args.disaggregation_transfer_backend,
        disaggregation_bootstrap_port=args.disaggregation_bootstrap_port,
        enable_pd_role_switch=bool(getattr(args, "enable_pd_role_switch", False)),
        enable_memory_saver=args.enable_memory_saver,
        enable_metrics=args.enable_metrics,
        version=args.fake_version,
        token_time_s=args.fake_token_time,
        startup_delay_s=args.fake_startup_delay,
        fail_start=args.fake_fail_start,
        fail_role_switch=args.fake_fail_role_switch,
        api_key=args.api_key,
    )


def main(argv: list[str] | None = None) -> None:
    """Run a fake server from ``sglang.launch_server``-style flags until interrupted; exit 1 if it cannot start."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    config = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        server = FakeSGLangServer(config).start()
    except Exception as exc:
        logger.error("fake SGLang server failed to start: %s", exc)
        raise SystemExit(1) from None
    logger.info("fake SGLang server on %s (%s)", server.url, config.disaggregation_mode)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
