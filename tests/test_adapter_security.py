"""Security of the adapters: API keys required, passed and never logged; flags, hosts and URLs that would inject
something refused; a launcher that does not take another process's server for its own (docs/reliability.md)."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import pytest

from pearl_sched.adapters.fake_sglang import FakeConfig, FakeSGLangServer, parse_args
from pearl_sched.adapters.http import (
    API_KEY_ENV,
    AdapterError,
    InvalidArgumentError,
    SGLangServerClient,
    api_key_from_env,
    validate_url,
)
from pearl_sched.adapters.launcher import FAKE, ServerSpec, SubprocessLauncher, server_argv

from .builders import free_ports

KEY = "pearl-test-key-7f3a9c"


def free_port() -> int:
    return free_ports(1)[0]


def spec(**changes: object) -> ServerSpec:
    fields: dict[str, object] = {"slot": "w00", "role": "regular", "model_path": "org/model", "port": 30000}
    fields["gpu_ids"] = (0,)
    fields.update(changes)
    return ServerSpec(**fields)  # type: ignore[arg-type]


# -- flags, hosts, URLs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model_path": "--host=0.0.0.0"}, "not empty or a flag"),
        ({"model_path": "-m"}, "not empty or a flag"),
        ({"model_path": ""}, "not empty or a flag"),
        ({"model_path": "org/model\n--host 0.0.0.0"}, "control characters"),
        ({"extra_args": ("--host", "0.0.0.0")}, "sets a flag pearl_sched sets itself"),
        ({"extra_args": ("--host=0.0.0.0",)}, "sets a flag"),
        ({"extra_args": ("--ho", "0.0.0.0")}, "sets a flag"),  # argparse would expand the abbreviation
        ({"extra_args": ("--port", "1")}, "sets a flag"),
        ({"extra_args": ("--api-key=",)}, "sets a flag"),
        ({"extra_args": ("--tensor-parallel-size", "8")}, "sets a flag"),
        ({"extra_args": ("--chat-template", "x\x00y")}, "printable"),
        ({"extra_args": "--enable-metrics"}, "not one string"),
        ({"host": "0.0.0.0 --api-key x"}, "not an IP address or a DNS name"),
        ({"host": "evil.example/path"}, "not an IP address"),
        ({"host": "-h"}, "not an IP address"),
        ({"port": 0}, "not a TCP port"),
        ({"port": 70000}, "not a TCP port"),
        ({"bootstrap_port": -1}, "not a TCP port"),
        ({"slot": "../../etc/x"}, "slot name"),
        ({"transfer_backend": "mooncake --host 0.0.0.0"}, "not a name"),
        ({"gpu_ids": ()}, "device indices"),
        ({"api_key": "short"}, "8-512 printable"),
        ({"api_key": "has a space in it"}, "8-512 printable"),
    ],
)
def test_server_values_that_could_inject_flags_are_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as caught:
        spec(**changes)
    if "api_key" in changes:
        assert str(changes["api_key"]) not in str(caught.value)  # an error never shows a key


def test_extra_args_come_after_the_servers_own_flags_and_the_key_is_passed() -> None:
    argv = server_argv(spec(extra_args=("--mem-fraction-static", "0.8", "--hostname-override=x"), api_key=KEY))
    assert argv[-3:] == ["--mem-fraction-static", "0.8", "--hostname-override=x"]
    assert argv[argv.index("--api-key") + 1] == KEY and argv.index("--api-key") < argv.index("--mem-fraction-static")
    assert KEY not in repr(spec(api_key=KEY))


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "gopher://127.0.0.1:70",
        "http://user:secret@127.0.0.1:30000",
        "http://127.0.0.1:30000/admin",
        "http://127.0.0.1:30000?x=1",
        "http://127.0.0.1:99999",
        "http://127.0.0.1:30000 --api-key",
        "http://bad_host!:1",
        "127.0.0.1:30000",
    ],
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidArgumentError):
        validate_url(url)
    with pytest.raises(InvalidArgumentError):
        SGLangServerClient(url)


def test_good_urls_pass() -> None:
    assert validate_url("http://127.0.0.1:30000/") == "http://127.0.0.1:30000"
    assert validate_url("http://[::1]:8080") == "http://[::1]:8080"
    assert validate_url("https://node-3.cluster.local:443") == "https://node-3.cluster.local:443"


def test_the_api_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    assert api_key_from_env() is None
    monkeypatch.setenv(API_KEY_ENV, KEY)
    assert api_key_from_env() == KEY
    monkeypatch.setenv(API_KEY_ENV, "a b")
    with pytest.raises(InvalidArgumentError, match=f"\\${API_KEY_ENV} must be") as caught:
        api_key_from_env()
    assert "a b" not in str(caught.value)


# -- the fake server ------------------------------------------------------------------------------------------


def test_the_fake_server_requires_the_key_like_sglang() -> None:
    assert parse_args(["--api-key", KEY]).api_key == KEY
    fake = FakeSGLangServer(FakeConfig(port=free_port(), api_key=KEY)).start()
    try:
        with SGLangServerClient(fake.url, attempts=1) as anonymous:
            assert anonymous.healthy()  # /health and /metrics stay open, as in SGLang
            assert anonymous.metrics()["sglang:num_running_reqs"] == 0
            with pytest.raises(AdapterError, match="HTTP 401"):
                anonymous.server_info()
            with pytest.raises(AdapterError, match="HTTP 401"):
                anonymous.generate({"text": "x", "sampling_params": {"max_new_tokens": 2}})
        with (
            SGLangServerClient(fake.url, attempts=1, api_key="wrong-key-123") as wrong,
            pytest.raises(AdapterError, match="HTTP 401"),
        ):
            wrong.server_info()
        with SGLangServerClient(fake.url, attempts=1, api_key=KEY) as client:
            assert client.server_info()["is_fake"]
            assert client.generate({"text": "x", "sampling_params": {"max_new_tokens": 2}})["output_ids"] == [0, 1]
    finally:
        fake.stop()


def test_the_fake_decode_server_fetches_no_caller_supplied_host() -> None:
    fake = FakeSGLangServer(FakeConfig(port=free_port(), disaggregation_mode="decode", kv_wait_s=30.0)).start()
    try:
        with SGLangServerClient(fake.url, attempts=1) as client:
            for host in ("169.254.169.254", "evil.example", "10.0.0.1"):
                started = time.monotonic()
                body = {"text": "x", "bootstrap_host": host, "bootstrap_port": 80, "bootstrap_room": 1}
                response = client.call("POST", "/generate", json=body, idempotent=False, ok=(400,))
                assert "not loopback" in response.json()["error"]
                assert time.monotonic() - started < 5.0  # refused before any fetch (one would wait 30 s)
    finally:
        fake.stop()


# -- the launcher does not take another process's server for its own -------------------------------------------


def test_a_server_that_loses_its_port_to_another_process_counts_as_failed(tmp_path: Path) -> None:
    impostor = FakeSGLangServer(FakeConfig(port=free_port())).start()  # already answers /health on the port
    launcher = SubprocessLauncher(FAKE, log_dir=tmp_path)
    try:
        with pytest.raises(AdapterError, match="exited with code 1 before it was ready") as caught:
            launcher.start(spec(port=impostor.config.port), ready_timeout_s=30)
        assert "another process answers on its port" in str(caught.value)
        # A launched process that stays alive without listening: /health answers, but not from it.
        sleeper = SubprocessLauncher((sys.executable, "-c", "import time; time.sleep(60)"), log_dir=tmp_path)
        with pytest.raises(AdapterError, match="not from the process launched"):
            sleeper.start(spec(slot="w01", port=impostor.config.port), ready_timeout_s=2)
    finally:
        impostor.stop()


def test_the_launched_server_gets_the_key_and_its_log_is_private(tmp_path: Path) -> None:
    handle = SubprocessLauncher(FAKE, log_dir=tmp_path).start(spec(port=free_port(), api_key=KEY), ready_timeout_s=30)
    try:
        with SGLangServerClient(handle.spec.url, attempts=1) as anonymous, pytest.raises(AdapterError, match="401"):
            anonymous.server_info()
        with SGLangServerClient(handle.spec.url, attempts=1, api_key=KEY) as client:
            assert client.server_info()["model_path"] == "org/model"
    finally:
        SubprocessLauncher(FAKE, log_dir=tmp_path).stop(handle)
    assert handle.log_path.stat().st_mode & 0o077 == 0


def test_errors_and_logs_never_show_the_key(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        launcher = SubprocessLauncher(FAKE, log_dir=tmp_path)
        with pytest.raises(AdapterError) as caught:
            launcher.start(spec(port=free_port(), api_key=KEY, extra_args=("--fake-fail-start",)), ready_timeout_s=30)
    assert KEY not in str(caught.value)
    assert KEY not in caplog.text
    assert KEY not in json.dumps([r.getMessage() for r in caplog.records])
