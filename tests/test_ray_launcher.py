"""Placing servers with Ray: a local Ray cluster with four fake GPUs, fake SGLang servers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pearl_sched.adapters.http import AdapterError, SGLangServerClient
from pearl_sched.adapters.launcher import FAKE, ServerSpec

from .builders import free_ports

ray = pytest.importorskip("ray")

from pearl_sched.adapters.ray_launcher import RayLauncher  # noqa: E402 - needs ray

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group("ray")]  # one local Ray at a time

KEY = "pearl-ray-test-key-0b7d"


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=4, num_gpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_each_tp_group_gets_its_own_gpus_and_a_full_cluster_is_refused(local_ray: None, tmp_path: Path) -> None:
    launcher = RayLauncher(FAKE, log_dir=str(tmp_path), placement_timeout_s=5.0)
    ports = free_ports(3)
    specs = [ServerSpec(f"w{i}", "regular", "fake/model", ports[i], gpu_ids=(0, 1), api_key=KEY) for i in range(3)]
    first = launcher.start(specs[0], ready_timeout_s=60)
    second = launcher.start(specs[1], ready_timeout_s=60)
    try:
        assert len(first.devices) == len(second.devices) == 2
        assert not set(first.devices) & set(second.devices)  # no GPU in two TP groups
        for handle in (first, second):
            assert handle.alive()
            with SGLangServerClient(handle.spec.url, api_key=KEY) as client:
                assert client.server_info()["tp_size"] == 2
        with pytest.raises(AdapterError, match="no node has 2 free GPU"):
            launcher.start(specs[2], ready_timeout_s=60)
    finally:
        launcher.stop(first)
    third = launcher.start(specs[2], ready_timeout_s=60)  # the stopped group's GPUs are free again
    assert set(third.devices) == set(first.devices)
    launcher.stop(third)
    launcher.stop(second)


def test_servers_on_node_addresses_need_an_api_key_unless_told(local_ray: None, tmp_path: Path) -> None:
    spec = ServerSpec("w0", "regular", "fake/model", free_ports(1)[0], gpu_ids=(0,))
    with pytest.raises(AdapterError, match="without an API key: set PEARL_SCHED_API_KEY"):
        RayLauncher(FAKE, log_dir=str(tmp_path)).start(spec, ready_timeout_s=60)
    launcher = RayLauncher(FAKE, log_dir=str(tmp_path), allow_no_api_key=True)
    handle = launcher.start(spec, ready_timeout_s=60)  # told explicitly: it starts, open to its network
    try:
        with SGLangServerClient(handle.spec.url) as client:
            assert client.server_info()["model_path"] == "fake/model"  # no key needed: it was allowed
    finally:
        launcher.stop(handle)


def test_a_plan_that_mixes_sizes_gets_one_bundle_of_its_size_per_worker_on_the_named_node(
    local_ray: None, tmp_path: Path
) -> None:
    ip = ray.util.get_node_ip_address()
    launcher = RayLauncher(FAKE, log_dir=str(tmp_path), placement_timeout_s=5.0, node_ips={"node-a": ip})
    ports = free_ports(3)
    tp2 = ServerSpec("w-tp2", "regular", "fake/model", ports[0], gpu_ids=(0, 1), dp=2, node="node-a", api_key=KEY)
    tp1 = ServerSpec("w-tp1", "regular", "fake/model", ports[1], gpu_ids=(2,), node="node-a", api_key=KEY)
    handles = [launcher.start(spec, ready_timeout_s=60) for spec in (tp2, tp1)]
    try:
        assert [h.group.bundle_specs for h in handles] == [
            [{"GPU": 2.0, "CPU": 1.0, f"node:{ip}": 0.001}],
            [{"GPU": 1.0, "CPU": 1.0, f"node:{ip}": 0.001}],
        ]
        assert not set(handles[0].devices) & set(handles[1].devices)  # no GPU in two workers
        for handle, (tp, dp) in zip(handles, [(2, 2), (1, 1)], strict=True):
            assert len(handle.devices) == tp
            with SGLangServerClient(handle.spec.url, api_key=KEY) as client:
                info = client.server_info()
            assert info.get("attn_dp_size", info["dp_size"]) == dp and info["tp_size"] == tp
            assert info["fake_cuda_visible_devices"] == ",".join(str(d) for d in handle.devices)
    finally:
        for handle in handles:
            launcher.stop(handle)
    elsewhere = RayLauncher(FAKE, log_dir=str(tmp_path), placement_timeout_s=2.0, node_ips={"node-b": "10.255.0.9"})
    spec = ServerSpec("w-b", "regular", "fake/model", ports[2], gpu_ids=(0,), node="node-b", api_key=KEY)
    with pytest.raises(AdapterError, match=r"node node-b \(10.255.0.9\) does not have 1 free GPU"):
        elsewhere.start(spec, ready_timeout_s=60)
