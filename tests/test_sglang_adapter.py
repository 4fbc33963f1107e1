"""The SGLang adapter against the real smg gateway and fake SGLang servers (named as fakes), on CPU."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pearl_sched import Mode, Role, Workload, Zone
from pearl_sched.adapters.fake_sglang import FakeConfig, FakeSGLangServer
from pearl_sched.adapters.gateway import Gateway, find_smg
from pearl_sched.adapters.http import AdapterError, SGLangServerClient
from pearl_sched.adapters.journal import Journal
from pearl_sched.adapters.launcher import FAKE, SubprocessLauncher
from pearl_sched.adapters.rollout import RolloutClient
from pearl_sched.adapters.sglang import SGLangCluster, SlotSpec, local_slots
from pearl_sched.control import Assignment, ClusterAdapter, TrainerAdapter

from .builders import free_ports

pytestmark = pytest.mark.integration

WORKLOAD = Workload(
    batch_size=64,
    unfinished=64,
    turns=4,
    appended_tokens_per_turn=100,
    generated_tokens_per_turn=50,
    env_time_per_turn_s=1.0,
    kv_bytes_per_token=1000,
)


def slots_on_free_ports(count: int, zone: Zone, prefix: str) -> list[SlotSpec]:
    ports = free_ports(2 * count)
    base = local_slots(count, zone=zone, prefix=prefix)
    return [
        SlotSpec(s.id, s.gpu_ids, s.devices, ports[2 * i], zone, bootstrap_port=ports[2 * i + 1])
        for i, s in enumerate(base)
    ]


class RecordingTrainer:
    """A trainer double: records lend/reclaim calls and which GPUs it holds (no model)."""

    def __init__(self, gpus: Sequence[str]) -> None:
        self.holding = set(gpus)
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.version = 1

    def weight_version(self) -> int:
        return self.version

    def lend(self, gpu_ids: Sequence[str]) -> None:
        assert set(gpu_ids) <= self.holding, "lending GPUs the trainer does not hold"
        self.holding -= set(gpu_ids)
        self.calls.append(("lend", tuple(gpu_ids)))

    def reclaim(self, gpu_ids: Sequence[str], deadline_s: float) -> None:
        self.holding |= set(gpu_ids)
        self.calls.append(("reclaim", tuple(gpu_ids)))

    def publish_weights(self) -> str:
        return "/dev/null"


@pytest.fixture
def smg_available() -> None:
    try:
        find_smg()
    except AdapterError as exc:
        pytest.fail(f"the real smg gateway is required for these tests: {exc}")


@pytest.fixture
def cluster(tmp_path: Path, smg_available: None) -> Iterator[tuple[SGLangCluster, RecordingTrainer]]:
    dedicated = slots_on_free_ports(4, Zone.DEDICATED, "w")
    overlap = slots_on_free_ports(2, Zone.OVERLAP, "t")
    (port, metrics) = free_ports(2)
    gateway = Gateway(port=port, metrics_port=metrics, log_dir=tmp_path).start()
    trainer = RecordingTrainer([g for s in overlap for g in s.gpu_ids])
    adapter = SGLangCluster(
        slots=[*dedicated, *overlap],
        launcher=SubprocessLauncher(FAKE, log_dir=tmp_path / "servers"),
        gateway=gateway,
        model_path="fake/model",
        workload=WORKLOAD,
        journal=Journal(tmp_path / "journal.jsonl"),
        trainer=trainer,
        drain_s=0.5,
        ready_timeout_s=30.0,
    )
    yield adapter, trainer
    adapter.shutdown()
    adapter.gateway.stop()
    adapter.gateway.client.close()


def roles(mode: Mode, **by_slot: Role | None) -> Assignment:
    return Assignment(mode, by_slot)


def test_adapters_implement_the_protocols(cluster: tuple[SGLangCluster, RecordingTrainer]) -> None:
    adapter, trainer = cluster
    assert isinstance(adapter, ClusterAdapter)
    assert isinstance(trainer, TrainerAdapter)


def test_elastic_scenario_accounts_for_every_request(cluster: tuple[SGLangCluster, RecordingTrainer]) -> None:
    adapter, trainer = cluster
    C, P, D = Role.COLOCATED, Role.PREFILL, Role.DECODE
    adapter.apply(roles(Mode.COLOCATED, w00=C, w01=C))
    assert {reg.worker_type for _, reg in adapter.gateway.registered().values()} == {"regular"}

    stop = threading.Event()
    results: list[tuple[int, int]] = []
    errors: list[str] = []

    def load(seed: int) -> None:
        client = RolloutClient(adapter.gateway.url, patience_s=60.0)
        i = 0
        while not stop.is_set():
            want = 20 + (seed * 7 + i) % 30
            try:
                done = client.generate(list(range(seed, seed + 10)), want)
                results.append((want, len(done.output_ids)))
            except AdapterError as exc:
                errors.append(str(exc))
            i += 1
        client.close()

    with ThreadPoolExecutor(4) as pool:
        for seed in range(4):
            pool.submit(load, seed)
        try:
            adapter.apply(roles(Mode.DISAGGREGATED, w00=P, w01=P, w02=D, w03=D))  # colocated → 2P2D (restart)
            types = sorted(reg.worker_type for _, reg in adapter.gateway.registered().values())
            assert types == ["decode", "decode", "prefill", "prefill"] and adapter.gateway.pd
            adapter.apply(roles(Mode.DISAGGREGATED, w00=P, w01=D, w02=D, w03=D))  # flip one worker: 1P3D
            with SGLangServerClient(f"http://127.0.0.1:{adapter.slots[1].port}") as flipped:
                assert flipped.server_info()["disaggregation_mode"] == "decode"
            adapter.set_reclaim_in(120.0)  # the trainer is idle: lend its two TP groups as decode workers
            adapter.apply(roles(Mode.DISAGGREGATED, w00=P, w01=D, w02=D, w03=D, t00=D, t01=D))
            assert [c[0] for c in trainer.calls] == ["lend", "lend"] and not trainer.holding
            assert len(adapter.gateway.registered()) == 6
            adapter.set_reclaim_in(0.0)  # training begins: reclaim them
            adapter.apply(roles(Mode.DISAGGREGATED, w00=P, w01=D, w02=D, w03=D))
            assert [c[0] for c in trainer.calls][-2:] == ["reclaim", "reclaim"] and len(trainer.holding) == 2
            adapter.set_available("w03", False)  # preemption of one worker
            assert len(adapter.gateway.registered()) == 3
            adapter.apply(roles(Mode.COLOCATED, w00=C, w01=C, w02=C))  # back to colocated
            assert not adapter.gateway.pd and len(adapter.gateway.registered()) == 3
        finally:
            stop.set()  # also when an assertion fails, so the load threads end
    assert not errors, errors[:3]
    assert len(results) > 10
    assert all(want == got for want, got in results), "a request lost or duplicated tokens"


def test_a_server_that_fails_to_start_cancels_its_admission_group(
    cluster: tuple[SGLangCluster, RecordingTrainer],
) -> None:
    adapter, _ = cluster
    adapter.apply(roles(Mode.COLOCATED, w00=Role.COLOCATED))
    adapter.extra_args = ("--fake-fail-start",)
    with pytest.raises(AdapterError, match="cancelled, nothing admitted"):
        adapter.apply(roles(Mode.COLOCATED, w00=Role.COLOCATED, w01=Role.COLOCATED, w02=Role.COLOCATED))
    assert list(adapter.gateway.registered()) == [f"http://127.0.0.1:{adapter.slots[0].port}"]
    state = adapter.observe()
    assert [w.id for w in state.workers if w.rollout_role is not None] == ["w00"]


def test_a_failed_role_switch_replaces_the_worker(cluster: tuple[SGLangCluster, RecordingTrainer]) -> None:
    adapter, _ = cluster
    P, D = Role.PREFILL, Role.DECODE
    adapter.extra_args = ("--fake-fail-role-switch",)  # these servers' /pd_role_switch answers 500
    adapter.apply(roles(Mode.DISAGGREGATED, w00=P, w01=D))
    adapter.apply(roles(Mode.DISAGGREGATED, w00=P, w01=P))  # the switch fails: w01 is restarted as prefill
    with SGLangServerClient(f"http://127.0.0.1:{adapter.slots[1].port}") as replaced:
        info = replaced.server_info()
    assert info["disaggregation_mode"] == "prefill"
    assert sorted(reg.worker_type for _, reg in adapter.gateway.registered().values()) == ["prefill", "prefill"]


def test_a_killed_controller_resumes_from_the_journal(
    cluster: tuple[SGLangCluster, RecordingTrainer], tmp_path: Path
) -> None:
    adapter, trainer = cluster
    C = Role.COLOCATED
    target = roles(Mode.COLOCATED, w00=C, w01=C, w02=C)
    begun: list[str] = []

    class Killed(BaseException):
        """Stands for SIGKILL of the controller process."""

    def die_on_third(action: object, phase: str) -> None:
        begun.append(getattr(action, "worker_id", ""))
        if len(begun) == 3:
            raise Killed

    adapter.on_action = die_on_third
    with pytest.raises(Killed):
        adapter.apply(target)
    # A new controller over the same journal and gateway: it knows w00 and w01 are up and w02 never started.
    resumed = SGLangCluster(
        slots=adapter.slots,
        launcher=adapter.launcher,
        gateway=adapter.gateway,
        model_path="fake/model",
        workload=WORKLOAD,
        journal=Journal(adapter.journal.path),
        trainer=trainer,
        drain_s=0.5,
        ready_timeout_s=30.0,
    )
    serving = {w.id for w in resumed.observe().workers if w.rollout_role is not None}
    assert serving == {"w00", "w01"}
    report = resumed.apply(target)
    assert report.changed == ("w02",)  # nothing applied twice
    assert len(resumed.gateway.registered()) == 3
    resumed.shutdown()


def test_gateway_errors_are_retried_then_reported(tmp_path: Path) -> None:
    from pearl_sched.adapters.http import GatewayClient

    dead = GatewayClient(f"http://127.0.0.1:{free_ports(1)[0]}", timeout_s=0.5, attempts=3, backoff_s=0.01)
    with dead, pytest.raises(AdapterError, match="cannot connect after 3 attempts"):
        dead.workers()
    fake = FakeSGLangServer(FakeConfig(port=free_ports(1)[0])).start()
    try:
        with SGLangServerClient(fake.url, timeout_s=0.5, attempts=2, backoff_s=0.01) as client:
            with pytest.raises(AdapterError, match="HTTP 404"):
                client.call("GET", "/no-such-route", idempotent=True)
            with pytest.raises(AdapterError, match="memory saver is off"):
                client.release_memory()
    finally:
        fake.stop()


def test_fake_server_rules(tmp_path: Path) -> None:
    ports = free_ports(4)
    prefill = FakeSGLangServer(
        FakeConfig(
            port=ports[0],
            disaggregation_mode="prefill",
            disaggregation_bootstrap_port=ports[1],
            enable_pd_role_switch=True,
            enable_memory_saver=True,
        )
    ).start()
    nixl = FakeSGLangServer(
        FakeConfig(
            port=ports[2],
            disaggregation_mode="decode",
            disaggregation_transfer_backend="nixl",
            enable_pd_role_switch=True,
        )
    ).start()
    p = SGLangServerClient(prefill.url, attempts=1)
    n = SGLangServerClient(nixl.url, attempts=1)
    try:
        assert p.supports_role_switch()
        with pytest.raises(AdapterError, match="needs bootstrap_host"):
            p.call("POST", "/generate", json={"text": "x"}, idempotent=False)
        assert not n.supports_role_switch()
        with pytest.raises(AdapterError, match="mooncake or mori"):
            n.role_switch("prefill")
        p.release_memory(["kv_cache"])
        assert p.call("POST", "/generate", json={}, idempotent=False, ok=(503,)).status_code == 503
        p.resume_memory(["kv_cache"])
        assert p.role_switch("decode")["new_role"] == "decode"
    finally:
        p.close()
        n.close()
        prefill.stop()
        nixl.stop()


def test_reclaim_deadline_is_met_under_load(cluster: tuple[SGLangCluster, RecordingTrainer]) -> None:
    import time

    adapter, trainer = cluster
    C = Role.COLOCATED
    adapter.apply(roles(Mode.COLOCATED, w00=C))
    adapter.set_reclaim_in(60.0)
    adapter.apply(roles(Mode.COLOCATED, w00=C, t00=C, t01=C))
    done: list[tuple[int, int, int]] = []

    def long_turn(seed: int) -> None:
        with_client = RolloutClient(adapter.gateway.url, patience_s=60.0)
        out = with_client.generate(list(range(seed, seed + 5)), 1500)  # 3 s of decoding each
        done.append((1500, len(out.output_ids), out.resubmits))
        with_client.close()

    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(long_turn, seed) for seed in range(6)]
        time.sleep(0.5)  # every worker is busy now
        adapter.set_reclaim_in(0.0)  # training begins: the borrowed GPUs are due back now
        started = time.monotonic()
        adapter.apply(roles(Mode.COLOCATED, w00=C))
        took = time.monotonic() - started
        for f in futures:
            f.result()
    assert took < adapter.drain_s + 3.0, f"reclaim took {took:.1f} s"  # drain window, abort, stop
    assert trainer.holding == {g for s in adapter.slots if s.zone is Zone.OVERLAP for g in s.gpu_ids}
    assert all(want == got for want, got, _ in done)
    assert sum(resubmits for _, _, resubmits in done) > 0  # aborted partial turns were resubmitted elsewhere
