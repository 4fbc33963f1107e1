"""The SGLang adapter against the real smg gateway and fake SGLang servers (named as fakes), on CPU.

Every adapter test runs against each SGLang release the fake imitates (FAKE_VERSIONS: 0.5.2, 0.5.8, 0.5.10,
0.5.23): the launch flags, routes and role-switch rules differ between them (adapters/sglang_versions.py).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pearl_sched import Mode, Role, Workload, Zone
from pearl_sched.adapters.fake_sglang import FAKE_VERSIONS, FakeConfig, FakeSGLangServer
from pearl_sched.adapters.gateway import Gateway, find_smg
from pearl_sched.adapters.http import AdapterError, DecodeGraphs, InvalidArgumentError, SGLangServerClient
from pearl_sched.adapters.journal import Journal
from pearl_sched.adapters.launcher import FAKE, SubprocessLauncher
from pearl_sched.adapters.processes import ProcessIdentity, identify
from pearl_sched.adapters.rollout import RolloutClient
from pearl_sched.adapters.sglang import SGLangCluster, SlotSpec, local_slots, slots_digest
from pearl_sched.adapters.sglang_versions import release_for
from pearl_sched.control import Assignment, ClusterAdapter, TrainerAdapter
from pearl_sched.plans import Action, ActionKind

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


def slots_on_free_ports(count: int, zone: Zone, prefix: str, first_device: int = 0) -> list[SlotSpec]:
    ports = free_ports(2 * count)
    base = local_slots(count, zone=zone, prefix=prefix, first_device=first_device)
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


@pytest.fixture(params=FAKE_VERSIONS)
def sglang_version(request: pytest.FixtureRequest) -> str:
    """The SGLang release the fake servers imitate."""
    return str(request.param)


@pytest.fixture
def cluster(
    tmp_path: Path, smg_available: None, sglang_version: str
) -> Iterator[tuple[SGLangCluster, RecordingTrainer]]:
    dedicated = slots_on_free_ports(4, Zone.DEDICATED, "w")
    overlap = slots_on_free_ports(2, Zone.OVERLAP, "t", first_device=4)  # devices 4-5: 0-3 are the w slots'

    (port, metrics) = free_ports(2)
    gateway = Gateway(port=port, metrics_port=metrics, log_dir=tmp_path).start()
    trainer = RecordingTrainer([g for s in overlap for g in s.gpu_ids])
    adapter = SGLangCluster(
        slots=[*dedicated, *overlap],
        launcher=SubprocessLauncher((*FAKE, "--fake-version", sglang_version), log_dir=tmp_path / "servers"),
        gateway=gateway,
        model_path="fake/model",
        workload=WORKLOAD,
        journal=Journal(tmp_path / "journal.jsonl"),
        trainer=trainer,
        drain_s=0.5,
        ready_timeout_s=30.0,
        sglang_version=sglang_version,
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


OLDEST_AND_NEWEST = pytest.mark.parametrize("sglang_version", [FAKE_VERSIONS[0], FAKE_VERSIONS[-1]])
"""The slow load-carrying scenarios run on the oldest and the newest release only (20 s each)."""


@OLDEST_AND_NEWEST
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
                assert flipped.live_role() == "decode"
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


def test_a_port_held_by_another_process_cancels_the_group_and_the_journal_says_so(
    cluster: tuple[SGLangCluster, RecordingTrainer],
) -> None:
    adapter, _ = cluster
    C = Role.COLOCATED
    impostor = FakeSGLangServer(FakeConfig(port=adapter.slots[2].port)).start()  # answers /health on w02's port
    try:
        with pytest.raises(AdapterError, match="cancelled, nothing admitted") as caught:
            adapter.apply(roles(Mode.COLOCATED, w00=C, w01=C, w02=C))
        assert "another process answers on its port" in str(caught.value)
        assert adapter.gateway.registered() == {}  # neither w00 nor w01 (started, then stopped) admitted
        adapter.journal.close()
        with Journal(adapter.journal.path) as reread:  # what a restarted controller would believe
            assert all(role is None for role in reread.replay().roles.values())
    finally:
        impostor.stop()


def test_a_failed_role_switch_replaces_the_worker(cluster: tuple[SGLangCluster, RecordingTrainer]) -> None:
    adapter, _ = cluster
    P, D = Role.PREFILL, Role.DECODE
    adapter.extra_args = ("--fake-fail-role-switch",)  # where /pd_role_switch exists, it refuses (400)
    adapter.apply(roles(Mode.DISAGGREGATED, w00=P, w01=D))
    adapter.apply(roles(Mode.DISAGGREGATED, w00=P, w01=P))  # the switch fails (or is absent): w01 is restarted
    with SGLangServerClient(f"http://127.0.0.1:{adapter.slots[1].port}") as replaced:
        info = replaced.server_info()
    assert replaced.live_role(info) == "prefill" and info["disaggregation_mode"] == "prefill"
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
        if phase != "begin":
            return
        begun.append(getattr(action, "worker_id", ""))
        if len(begun) == 3:
            raise Killed

    adapter.on_action = die_on_third
    with pytest.raises(Killed):
        adapter.apply(target)
    adapter.journal.close()  # the dead controller's lock goes with its process
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
        sglang_version=adapter.sglang_version,
    )
    serving = {w.id for w in resumed.observe().workers if w.rollout_role is not None}
    assert serving == {"w00", "w01"}
    report = resumed.apply(target)
    assert report.changed == ("w02",)  # nothing applied twice
    assert len(resumed.gateway.registered()) == 3
    resumed.shutdown()


def test_a_server_started_just_before_the_controller_died_is_stopped_by_the_next(
    cluster: tuple[SGLangCluster, RecordingTrainer],
) -> None:
    adapter, trainer = cluster

    class Killed(BaseException):
        """Stands for SIGKILL of the controller between the server's start and the action's "done"."""

    def die_once_started(action: object, phase: str) -> None:
        if phase == "started":
            raise Killed

    adapter.on_action = die_once_started
    with pytest.raises(Killed):
        adapter.apply(roles(Mode.COLOCATED, w00=Role.COLOCATED))
    server = adapter._slots["w00"].handle
    assert server is not None and server.alive()  # left running by the dead controller
    adapter.journal.close()
    resumed = SGLangCluster(
        slots=adapter.slots,
        launcher=adapter.launcher,
        gateway=adapter.gateway,
        model_path="fake/model",
        workload=WORKLOAD,
        journal=Journal(adapter.journal.path),
        trainer=trainer,
        drain_s=0.2,
    )
    assert {w.id for w in resumed.observe().workers if w.rollout_role is not None} == {"w00"}  # re-observed
    resumed.apply(roles(Mode.COLOCATED))  # shrink it: the journal's "started" identity lets it be stopped
    assert server.process.wait(timeout=15) is not None
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
        with pytest.raises(AdapterError, match="does not support runtime role switch"):
            n.role_switch("prefill")
        p.release_memory(["kv_cache"])
        assert p.call("POST", "/generate", json={}, idempotent=False, ok=(503,)).status_code == 503
        p.resume_memory(["kv_cache"])
        assert p.role_switch("decode", DecodeGraphs((1, 2), 0.5))["new_role"] == "decode"
    finally:
        p.close()
        n.close()
        prefill.stop()
        nixl.stop()


@OLDEST_AND_NEWEST
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


def test_a_re_role_switches_in_place_where_the_release_can(
    cluster: tuple[SGLangCluster, RecordingTrainer], sglang_version: str
) -> None:
    """0.5.21 on: prefill→decode through /pd_role_switch, carrying a decode peer's captured graph sizes and
    footprint (SGLang refuses the switch without them); before: a restart in the new role."""
    adapter, _ = cluster
    P, D = Role.PREFILL, Role.DECODE
    adapter.apply(roles(Mode.DISAGGREGATED, w00=P, w01=P, w02=D))
    before = adapter._slots["w01"].handle
    adapter.apply(roles(Mode.DISAGGREGATED, w00=P, w01=D, w02=D))
    after = adapter._slots["w01"].handle
    with SGLangServerClient(f"http://127.0.0.1:{adapter.slots[1].port}") as flipped:
        info = flipped.server_info()
        assert flipped.live_role(info) == "decode"
        graphs = flipped.decode_graphs(info)
    in_place = release_for(sglang_version).role_switch
    assert (after is before) == in_place
    if in_place:
        assert info["disaggregation_mode"] == "prefill"  # the launch value: the live role is in internal_states
        assert graphs is not None and graphs.batch_sizes  # captured on the switch, with the peer's sizes
    else:
        assert info["disaggregation_mode"] == "decode" and graphs is None
    assert sorted(reg.worker_type for _, reg in adapter.gateway.registered().values()) == [
        "decode",
        "decode",
        "prefill",
    ]


@pytest.mark.parametrize("version", FAKE_VERSIONS)
def test_fake_routes_follow_the_release(version: str) -> None:
    fake = FakeSGLangServer(FakeConfig(port=free_ports(1)[0], version=version)).start()
    release = release_for(version)
    try:
        with SGLangServerClient(fake.url, attempts=1) as client:
            assert client.server_info()["version"] == version and client.release == release
            assert client.running_requests() == 0  # /v1/loads, or /metrics on 0.5.2
            status = {
                p: client.call("GET", p, idempotent=True, ok=(200, 404)).status_code
                for p in ("/server_info", "/v1/loads")
            }
            assert status == {
                "/server_info": 200 if version != "0.5.2" else 404,
                "/v1/loads": 200 if release.has_v1_loads else 404,
            }
            switch = client.call(
                "POST", "/pd_role_switch", json={"new_role": "decode"}, idempotent=False, ok=(200, 400, 404)
            )
            assert (switch.status_code == 404) == (not release.role_switch)
    finally:
        fake.stop()


def test_switch_to_decode_without_graphs_needs_their_footprint() -> None:
    """SGLang 0.5.21+ (srt/disaggregation/role_switch.py): a prefill server flipping to decode captures decode
    graphs and refuses unless told decode_cuda_graph_memory_gb."""
    ports = free_ports(2)
    fake = FakeSGLangServer(
        FakeConfig(
            port=ports[0],
            disaggregation_mode="prefill",
            disaggregation_bootstrap_port=ports[1],
            enable_pd_role_switch=True,
        )
    ).start()
    try:
        with SGLangServerClient(fake.url, attempts=1) as client:
            assert client.decode_graphs() == DecodeGraphs((), 0.0)
            with pytest.raises(AdapterError, match="decode_cuda_graph_memory_gb is required"):
                client.role_switch("decode")
            assert client.live_role() == "prefill"
            client.role_switch("decode", DecodeGraphs((1, 2, 4), 0.8))
            assert client.live_role() == "decode" and client.decode_graphs() == DecodeGraphs((1, 2, 4), 1.0)
    finally:
        fake.stop()


def test_rollout_client_passes_sampling_parameters_and_returns_logprobs() -> None:
    fake = FakeSGLangServer(FakeConfig(port=free_ports(1)[0])).start()
    client = RolloutClient(fake.url, patience_s=10.0)
    try:
        done = client.generate([1, 2, 3], 5, {"temperature": 0.7, "top_p": 0.9}, return_logprob=True)
        assert fake.state.last_sampling_params == {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 5}
        assert len(done.output_ids) == 5 and len(done.output_logprobs) == 5
        assert client.generate([1], 3).output_logprobs == ()  # not asked for
    finally:
        client.close()
        fake.stop()


def run_load(
    url: str, stop: threading.Event, results: list[tuple[int, int, int]], errors: list[str], seed: int
) -> None:
    """One rollout client sending turns until ``stop``: (tokens asked, tokens got, retries) per turn."""
    client = RolloutClient(url, patience_s=60.0)
    i = 0
    while not stop.is_set():
        want = 20 + (seed * 7 + i) % 30
        try:
            done = client.generate(list(range(seed, seed + 10)), want)
            results.append((want, len(done.output_ids), done.retries))
        except AdapterError as exc:
            errors.append(str(exc))
        i += 1
    client.close()


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Poll ``condition`` (a precondition of the test, not a timing claim); fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.parametrize("during", [ActionKind.SHRINK, ActionKind.REROLE])
def test_gateway_killed_during_a_transition_under_load_loses_nothing(
    cluster: tuple[SGLangCluster, RecordingTrainer], during: ActionKind
) -> None:
    adapter, _ = cluster
    C, P, D = Role.COLOCATED, Role.PREFILL, Role.DECODE
    if during is ActionKind.SHRINK:
        before = roles(Mode.COLOCATED, w00=C, w01=C, w02=C)
        after = roles(Mode.COLOCATED, w00=C, w01=C)
        want_types = ["regular", "regular"]
    else:
        before = roles(Mode.DISAGGREGATED, w00=P, w01=D, w02=D)
        after = roles(Mode.DISAGGREGATED, w00=P, w01=P, w02=D)
        want_types = ["decode", "prefill", "prefill"]
    adapter.apply(before)
    killed: list[int] = []

    def kill_gateway(action: Action, phase: str) -> None:  # SIGKILL smg as the action begins
        if action.kind is during and not killed and adapter.gateway.process is not None:
            killed.append(adapter.gateway.process.pid)
            os.killpg(adapter.gateway.process.pid, signal.SIGKILL)
            adapter.gateway.process.wait(timeout=10)

    adapter.on_action = kill_gateway
    stop = threading.Event()
    results: list[tuple[int, int, int]] = []
    errors: list[str] = []
    with ThreadPoolExecutor(4) as pool:
        for seed in range(4):
            pool.submit(run_load, adapter.gateway.url, stop, results, errors, seed)
        try:
            wait_for(lambda: len(results) >= 4, "turns before the transition")
            served_before = len(results)
            report = adapter.apply(after)
            wait_for(lambda: len(results) >= served_before + 4, "turns through the restarted gateway")
        finally:
            stop.set()
    assert killed and report.changed
    assert adapter.gateway.process is not None and adapter.gateway.process.pid != killed[0]
    assert sorted(reg.worker_type for _, reg in adapter.gateway.registered().values()) == want_types
    assert adapter.apply(after).changed == ()  # the plan is fully applied: nothing left to do
    assert not errors, errors[:3]
    assert sum(retries for *_, retries in results) > 0  # clients did see the gateway gone, and retried
    assert all(want == got for want, got, _ in results), "a request lost or duplicated tokens"


def test_a_journal_pid_that_is_not_our_server_survives_a_shrink(tmp_path: Path, smg_available: None) -> None:
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        real = identify(stranger.pid)
        assert real is not None
        slots = slots_on_free_ports(2, Zone.DEDICATED, "w")
        journal = Journal(tmp_path / "journal.jsonl", cluster_id=slots_digest(slots))
        for worker, identity in (
            ("w00", ProcessIdentity(stranger.pid, (real.started_at_s or 0) - 600, real.command_sha256)),  # reused
            ("w01", ProcessIdentity(stranger.pid, None, None)),  # an old journal's bare pid
        ):
            action = Action(
                kind=ActionKind.EXPAND,
                worker_id=worker,
                gpu_ids=slots[int(worker[-1])].gpu_ids,
                zone=Zone.DEDICATED,
                from_role=None,
                to_role=Role.COLOCATED,
            )
            journal.write("begin", action, "old-plan")
            journal.write("done", action, "old-plan", identity.to_record())
        port, metrics = free_ports(2)
        with Gateway(port=port, metrics_port=metrics, log_dir=tmp_path) as gateway:
            adapter = SGLangCluster(
                slots=slots,
                launcher=SubprocessLauncher(FAKE, log_dir=tmp_path / "servers"),
                gateway=gateway,
                model_path="fake/model",
                workload=WORKLOAD,
                journal=journal,
                drain_s=0.2,
            )
            assert {w.id for w in adapter.observe().workers if w.rollout_role is not None} == {"w00", "w01"}
            report = adapter.apply(roles(Mode.COLOCATED))  # shrink both: their pids must not be signalled
            adapter.shutdown()
        assert report.changed == ("w00", "w01")
        assert stranger.poll() is None, "a process pearl_sched did not start was killed"
    finally:
        stranger.kill()
        stranger.wait()


def test_api_key_is_required_passed_and_never_logged(
    tmp_path: Path, smg_available: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    key = "pearl-e2e-key-31c5e0"
    monkeypatch.setenv("PEARL_SCHED_API_KEY", key)
    slots = slots_on_free_ports(2, Zone.DEDICATED, "w")
    port, metrics = free_ports(2)
    with caplog.at_level(logging.DEBUG), Gateway(port=port, metrics_port=metrics, log_dir=tmp_path) as gateway:
        adapter = SGLangCluster(
            slots=slots,
            launcher=SubprocessLauncher(FAKE, log_dir=tmp_path / "servers"),
            gateway=gateway,
            model_path="fake/model",
            workload=WORKLOAD,
            journal=Journal(tmp_path / "journal.jsonl"),
            drain_s=0.2,
        )
        try:
            adapter.apply(roles(Mode.COLOCATED, w00=Role.COLOCATED, w01=Role.COLOCATED))
            assert len(gateway.registered()) == 2  # smg reached the keyed servers with the key
            with RolloutClient(gateway.url, patience_s=30.0) as client:  # the key from the environment
                assert len(client.generate([1, 2, 3], 12).output_ids) == 12
            with (
                RolloutClient(gateway.url, patience_s=0.5, api_key=None) as anonymous,
                pytest.raises(AdapterError, match="HTTP 401"),
            ):
                anonymous.generate([1, 2, 3], 12)
            for slot in slots:
                with (
                    SGLangServerClient(f"http://127.0.0.1:{slot.port}", attempts=1, api_key=None) as direct,
                    pytest.raises(AdapterError, match="HTTP 401"),
                ):
                    direct.server_info()
            adapter.apply(roles(Mode.COLOCATED, w00=Role.COLOCATED))
            assert key not in repr(adapter)
        finally:
            adapter.shutdown()
    assert key not in caplog.text
    assert key not in (tmp_path / "journal.jsonl").read_text()
    assert key not in (tmp_path / f"smg-{port}.log").read_text(errors="replace")
    with pytest.raises(InvalidArgumentError, match="share one API key"):
        SGLangCluster(
            slots=slots,
            launcher=SubprocessLauncher(FAKE, log_dir=tmp_path / "servers"),
            gateway=Gateway(port=port, api_key=None),
            model_path="fake/model",
            workload=WORKLOAD,
            journal=Journal(tmp_path / "other.jsonl"),
        )
