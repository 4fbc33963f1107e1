"""Gateway.attach and the slime integration, against the real smg gateway (started here, not by pearl_sched).

slime is not on PyPI (``slime`` there is another project), so what slime does with pearl_sched's output is played
by fakes named as such, mirroring THUDM/slime @ 624b824: ``fake_slime_attach`` does what
``slime/backends/sglang_utils/external.py`` (``discover_external_engines``) and ``sglang_engine.py``
(``_register_to_router``) do with ``--rollout-external-engine-addrs`` and ``--sglang-router-ip/port``;
``fake_slime_load_sglang_config`` checks what ``sglang_config.py`` (``SglangConfig.from_yaml``,
``ServerGroupConfig.__post_init__``) and ``slime/ray/rollout.py`` (GPUs add up to ``rollout_num_gpus``) check.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from pearl_sched import Mode, Role, Workload, Zone
from pearl_sched.adapters.fake_sglang import FakeConfig, FakeSGLangServer
from pearl_sched.adapters.gateway import Gateway, Registration, find_smg
from pearl_sched.adapters.http import AdapterError, InvalidArgumentError
from pearl_sched.adapters.journal import Journal
from pearl_sched.adapters.launcher import FAKE, SubprocessLauncher
from pearl_sched.adapters.sglang import SGLangCluster, SlotSpec, local_slots
from pearl_sched.control import Assignment
from pearl_sched.integrations import slime
from pearl_sched.integrations.lending import IntegrationError

from .builders import free_ports

yaml = pytest.importorskip("yaml")  # PyYAML, which slime's loader uses (installed with ray)


SGLANG_ROUTER = Path(__file__).resolve().parent.parent / ".router" / "bin" / "python"  # scripts/setup.sh


def start_router(tmp_path: Path, *, pd: bool, sglang_router: bool = False) -> Iterator[str]:
    """Run smg (or sglang-router) as another program would: its own argv and process group; yields its URL."""
    port, metrics = free_ports(2)
    if sglang_router:
        argv = [str(SGLANG_ROUTER), "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--prometheus-port", str(metrics), *(["--pd-disaggregation"] if pd else [])]
    else:
        argv = [find_smg(), "launch", "--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(metrics)]
        argv += ["--log-level", "warn", *(["--pd-disaggregation"] if pd else [])]
    with open(tmp_path / "smg.log", "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/workers", timeout=1.0).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "smg did not start"
        time.sleep(0.2)
    try:
        yield url
        assert process.poll() is None, "the attached router must outlive pearl_sched's use of it"
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # sglang-router's launcher runs the router in a child
        process.wait(timeout=10)


@pytest.fixture
def regular_router(tmp_path: Path) -> Iterator[str]:
    yield from start_router(tmp_path, pd=False)


@pytest.fixture
def pd_router(tmp_path: Path) -> Iterator[str]:
    yield from start_router(tmp_path, pd=True)


def wait_for(check: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.integration
def test_attach_reads_the_mode_and_never_stops_the_router(regular_router: str, pd_router: str) -> None:
    fake = FakeSGLangServer(FakeConfig(port=free_ports(1)[0])).start()
    try:
        with Gateway.attach(regular_router, api_key=None) as gateway:
            assert gateway.attached and not gateway.pd and gateway.process is None
            gateway.sync({fake.url: Registration("regular")})
            assert {u: r for u, (_, r) in gateway.registered().items()} == {fake.url: Registration("regular")}
        with Gateway.attach(regular_router, api_key=None) as again:  # read from its worker now
            assert not again.pd
        with pytest.raises(AdapterError, match="regular mode, not the pd=True"):
            Gateway.attach(regular_router, pd=True, api_key=None)
        with Gateway.attach(pd_router, api_key=None) as pd_gateway:  # empty PD router: read from its error code
            assert pd_gateway.pd
        with pytest.raises(AdapterError, match="PD mode"):
            Gateway.attach(pd_router, pd=False, api_key=None)
    finally:
        fake.stop()
    with pytest.raises(AdapterError, match="no router answers"):
        Gateway.attach(f"http://127.0.0.1:{free_ports(1)[0]}", pd=False, api_key=None, timeout_s=1.0)
    with pytest.raises(InvalidArgumentError, match="http://host:port"):
        Gateway.attach("127.0.0.1:1", api_key=None)


@pytest.mark.integration
@pytest.mark.parametrize("pd", [False, True], ids=["regular", "pd"])
def test_attach_to_sglang_router(tmp_path: Path, pd: bool) -> None:
    """sglang-router 0.3 serves the same worker API (no "status" field: readiness is is_healthy)."""
    if not SGLANG_ROUTER.exists():
        pytest.skip("sglang-router is not installed in .router/ (scripts/setup.sh installs it)")
    router = start_router(tmp_path, pd=pd, sglang_router=True)
    url = next(router)
    ports = free_ports(3)
    fakes = (
        [FakeSGLangServer(FakeConfig(port=ports[0])).start()]
        if not pd
        else [
            FakeSGLangServer(
                FakeConfig(port=ports[0], disaggregation_mode="prefill", disaggregation_bootstrap_port=ports[1])
            ).start(),
            FakeSGLangServer(FakeConfig(port=ports[2], disaggregation_mode="decode")).start(),
        ]
    )
    want = (
        {fakes[0].url: Registration("regular")}
        if not pd
        else {fakes[0].url: Registration("prefill", ports[1]), fakes[1].url: Registration("decode")}
    )
    try:
        if not pd:  # an empty sglang-router's /get_server_info does not tell the mode
            with pytest.raises(AdapterError, match="pass pd="):
                Gateway.attach(url, api_key=None)
        with Gateway.attach(url, pd=pd, api_key=None) as gateway:
            gateway.sync(want)
            assert {u: r for u, (_, r) in gateway.registered().items()} == want
            with Gateway.attach(url, api_key=None) as again:  # the mode, read from its workers now
                assert again.pd is pd
            gateway.deregister(fakes[0].url, wait=True)
            assert fakes[0].url not in gateway.registered()
    finally:
        for fake in fakes:
            fake.stop()
        next(router, None)


@pytest.mark.integration
def test_cluster_on_an_attached_router_refuses_a_mode_change(tmp_path: Path, regular_router: str) -> None:
    ports = free_ports(4)
    slots = [
        SlotSpec(s.id, s.gpu_ids, s.devices, ports[2 * i], Zone.DEDICATED, bootstrap_port=ports[2 * i + 1])
        for i, s in enumerate(local_slots(2, zone=Zone.DEDICATED, prefix="w"))
    ]
    gateway = Gateway.attach(regular_router, api_key=None)
    cluster = SGLangCluster(
        slots=slots,
        launcher=SubprocessLauncher(FAKE, log_dir=tmp_path / "servers"),
        gateway=gateway,
        model_path="fake/model",
        workload=Workload(
            batch_size=8,
            unfinished=8,
            turns=1,
            appended_tokens_per_turn=10,
            generated_tokens_per_turn=10,
            env_time_per_turn_s=0.0,
            kv_bytes_per_token=100,
        ),
        journal=Journal(tmp_path / "journal.jsonl"),
        drain_s=0.2,
        ready_timeout_s=30.0,
    )
    try:
        cluster.apply(Assignment(Mode.COLOCATED, {"w00": Role.COLOCATED, "w01": Role.COLOCATED}))
        registered = gateway.registered()
        assert len(registered) == 2
        with pytest.raises(AdapterError, match="nothing was changed"):
            cluster.apply(Assignment(Mode.DISAGGREGATED, {"w00": Role.PREFILL, "w01": Role.DECODE}))
        assert gateway.registered() == registered
    finally:
        cluster.shutdown()
        gateway.client.close()


SLIME_INFERRED = {"prefill": "prefill", "decode": "decode"}


def fake_slime_attach(argv: list[str]) -> list[dict[str, Any]]:
    """What slime does at start with external engines and a router address (a fake, see the module docstring)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rollout-external-engine-addrs", type=str, default=None, nargs="+")
    parser.add_argument("--sglang-router-ip", type=str, default=None)
    parser.add_argument("--sglang-router-port", type=int, default=None)
    args = parser.parse_args(argv)
    router = f"http://{args.sglang_router_ip}:{args.sglang_router_port}"
    payloads = []
    for addr in args.rollout_external_engine_addrs:
        url = addr if "://" in addr else f"http://{addr}"
        info = httpx.get(f"{url}/server_info", timeout=10).json()
        worker_type = SLIME_INFERRED.get(info.get("disaggregation_mode"), "regular")
        payload: dict[str, Any] = {"url": url, "worker_type": worker_type}
        if worker_type == "prefill":
            payload["bootstrap_port"] = info["disaggregation_bootstrap_port"]
        httpx.post(f"{router}/workers", json=payload, timeout=10).raise_for_status()
        payloads.append(payload)
    return payloads


@pytest.mark.integration
def test_slime_attaches_to_pearl_scheds_engines_and_router(pd_router: str) -> None:
    p_port, boot, d_port = free_ports(3)
    prefill = FakeSGLangServer(
        FakeConfig(port=p_port, disaggregation_mode="prefill", disaggregation_bootstrap_port=boot)
    ).start()
    decode = FakeSGLangServer(FakeConfig(port=d_port, disaggregation_mode="decode")).start()
    try:
        gateway = Gateway.attach(pd_router, api_key=None)
        gateway.sync({prefill.url: Registration("prefill", boot), decode.url: Registration("decode")})
        # slime registers each engine itself; smg refuses a URL it already has, which is why hand_over exists.
        clash = httpx.post(f"{pd_router}/workers", json={"url": decode.url, "worker_type": "decode"}, timeout=10)
        assert clash.status_code == 409
        argv = slime.hand_over(gateway)
        assert argv[0] == "--rollout-external-engine-addrs" and argv[-4:] == [
            "--sglang-router-ip",
            "127.0.0.1",
            "--sglang-router-port",
            str(gateway.port),
        ]
        assert gateway.registered() == {}
        payloads = fake_slime_attach(argv)
        assert sorted(p["worker_type"] for p in payloads) == ["decode", "prefill"]
        want = {prefill.url: Registration("prefill", boot), decode.url: Registration("decode")}
        wait_for(lambda: {u: r for u, (_, r) in gateway.registered().items()} == want)
        gateway.client.close()
    finally:
        prefill.stop()
        decode.stop()


def test_hand_over_refuses_a_keyed_gateway() -> None:
    keyed = SimpleNamespace(url="http://127.0.0.1:1", api_key="k", registered=dict, deregister=None)
    with pytest.raises(IntegrationError, match="API key"):
        slime.hand_over(keyed)


def test_external_engine_args() -> None:
    argv = slime.external_engine_args(["http://10.0.0.1:30000", "[::1]:30001"], "http://10.0.0.9:4000")
    assert argv == [
        "--rollout-external-engine-addrs",
        "10.0.0.1:30000",
        "[::1]:30001",
        "--sglang-router-ip",
        "10.0.0.9",
        "--sglang-router-port",
        "4000",
    ]
    with pytest.raises(IntegrationError, match="at least one"):
        slime.external_engine_args([], "http://10.0.0.9:4000")
    with pytest.raises(IntegrationError, match="not an http"):
        slime.external_engine_args(["https://10.0.0.1:1"], "http://10.0.0.9:4000")


VALID_TYPES = {"regular", "prefill", "decode", "placeholder", "encoder"}


def fake_slime_load_sglang_config(path: Path, rollout_num_gpus: int) -> list[dict[str, Any]]:
    """slime's checks on a --sglang-config file (a fake, see the module docstring); returns the groups."""
    data = yaml.safe_load(path.read_text())
    assert "sglang" in data
    groups = []
    for model in data["sglang"]:
        assert "name" in model
        for group in model.get("server_groups") or model.get("engine_groups") or []:
            assert set(group) <= {"worker_type", "num_gpus", "num_gpus_per_engine", "overrides"}
            assert group["worker_type"] in VALID_TYPES and group["num_gpus"] > 0
            groups.append(group)
    assert sum(g["num_gpus"] for g in groups) == rollout_num_gpus
    return groups


def test_sglang_config_from_a_plan_loads_as_slime_reads_it(tmp_path: Path) -> None:
    plan = SimpleNamespace(prefill_workers=2, decode_workers=3, colocated_workers=0)
    config = slime.sglang_config(
        slime.engines_of_plan(plan),
        {"prefill": 2, "decode": 1},
        total_gpus=8,
        model_path="/models/qwen3-8b",
        overrides={"decode": {"mem_fraction_static": 0.85}},
    )
    path = slime.write_sglang_config(config, tmp_path / "sglang.yaml")
    groups = fake_slime_load_sglang_config(path, rollout_num_gpus=8)
    assert groups == [
        {"worker_type": "prefill", "num_gpus": 4, "num_gpus_per_engine": 2},
        {"worker_type": "decode", "num_gpus": 3, "num_gpus_per_engine": 1, "overrides": {"mem_fraction_static": 0.85}},
        {"worker_type": "placeholder", "num_gpus": 1},
    ]
    colocated = slime.sglang_config({"regular": 4}, 2)
    assert fake_slime_load_sglang_config(slime.write_sglang_config(colocated, tmp_path / "c.yaml"), 8) == [
        {"worker_type": "regular", "num_gpus": 8, "num_gpus_per_engine": 2}
    ]


@pytest.mark.parametrize(
    ("engines", "size", "total", "message"),
    [
        ({"encode": 1}, 1, None, "unknown role"),
        ({"prefill": -1, "decode": 1}, 1, None, "≥ 0"),
        ({"prefill": 0}, 1, None, "no engine"),
        ({"decode": 2}, {"prefill": 1}, None, "GPUs per engine must be ≥ 1"),
        ({"decode": 4}, 2, 4, "more than rollout_num_gpus=4"),
    ],
)
def test_sglang_config_errors(engines: dict[str, int], size: Any, total: int | None, message: str) -> None:
    with pytest.raises(IntegrationError, match=message):
        slime.sglang_config(engines, size, total_gpus=total)
