"""Worker sizes in the SGLang adapter: launch argv per size and release, regroups applied against the real smg
gateway and fake SGLang servers (named as fakes, reporting the TP/DP they were launched with), on CPU.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pearl_sched import Mode, Role, Zone
from pearl_sched.adapters.fake_sglang import FAKE_VERSIONS, FakeConfig, FakeSGLangServer, parse_args
from pearl_sched.adapters.gateway import Gateway, find_smg
from pearl_sched.adapters.http import AdapterError, InvalidArgumentError, SGLangServerClient
from pearl_sched.adapters.journal import Journal
from pearl_sched.adapters.launcher import FAKE, ServerSpec, SubprocessLauncher, server_argv
from pearl_sched.adapters.rollout import RolloutClient
from pearl_sched.adapters.sglang import GPUSpec, SGLangCluster, SlotSpec, local_slots
from pearl_sched.adapters.sglang_versions import RELEASES, gated_flags, release_for
from pearl_sched.control import Assignment, ControlLoop, Event, EventKind, PlannerDecider
from pearl_sched.planner import plan
from pearl_sched.plans import Action, ActionKind
from pearl_sched.predictors import make_predictor
from pearl_sched.request import PlanRequest
from pearl_sched.state import ClusterState, Status
from pearl_sched.transition import apply_actions

from .builders import free_ports

ROOT = Path(__file__).resolve().parents[1]
NEWEST = FAKE_VERSIONS[-1]

# -- the launch argv of each size, per release ---------------------------------------------------------------


def _flag(argv: Sequence[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.mark.parametrize("version", [r.version for r in RELEASES])
@pytest.mark.parametrize(("tp", "dp", "ep"), [(1, 1, 1), (2, 1, 1), (4, 2, 1), (8, 8, 8), (4, 1, 4)])
def test_each_size_is_spelled_as_its_release_spells_it(version: str, tp: int, dp: int, ep: int) -> None:
    spec = ServerSpec("w", "decode", "m", 30000, gpu_ids=tuple(range(tp)), dp=dp, ep=ep, sglang_version=version)
    argv = server_argv(spec, FAKE)
    release = release_for(version)
    assert _flag(argv, "--tp-size") == str(tp) and _flag(argv, "--base-gpu-id") == "0"
    assert gated_flags(argv, release) == []  # no flag the release lacks
    if dp == 1:
        assert not {"--dp-size", "--enable-dp-attention", "--attn-dp-size"} & set(argv)
    elif release.has("--attn-dp-size"):  # 0.5.23: the new spelling (the old one is deprecated there)
        assert _flag(argv, "--attn-dp-size") == str(dp) and "--enable-dp-attention" not in argv
    else:
        assert _flag(argv, "--dp-size") == str(dp) and "--enable-dp-attention" in argv
    assert _flag(argv, "--ep-size") == (str(ep) if ep > 1 else None)


@pytest.mark.parametrize("version", FAKE_VERSIONS)
def test_the_fake_reports_the_size_it_was_launched_with_as_sglang_names_it(version: str) -> None:
    spec = ServerSpec("w", "regular", "m", 30000, gpu_ids=(0, 1, 2, 3), dp=4, ep=4, sglang_version=version)
    config = parse_args([*server_argv(spec, ()), "--fake-version", version])
    info = FakeSGLangServer(config).server_info()
    assert info["tp_size"] == 4 and info["ep_size"] == 4 and info["enable_dp_attention"] is True
    if release_for(version).has("--attn-dp-size"):  # 0.5.23 resolves attention-DP into attn_dp_size
        assert (info["attn_dp_size"], info["dp_size"]) == (4, 1)
    else:
        assert info["dp_size"] == 4 and "attn_dp_size" not in info


def test_sizes_sglang_refuses_are_refused_before_launch() -> None:
    with pytest.raises(InvalidArgumentError, match="dp=3 must divide its 4 GPUs"):
        ServerSpec("w", "regular", "m", 30000, gpu_ids=(0, 1, 2, 3), dp=3)
    with pytest.raises(InvalidArgumentError, match="ep=2 must be 1 or its TP degree 4"):
        ServerSpec("w", "regular", "m", 30000, gpu_ids=(0, 1, 2, 3), ep=2)
    with pytest.raises(InvalidArgumentError, match="sets a flag pearl_sched sets itself"):
        ServerSpec("w", "regular", "m", 30000, gpu_ids=(0, 1), extra_args=("--dp-size", "2"))
    with pytest.raises(InvalidArgumentError, match="dp=3 does not divide its TP degree 2"):
        SlotSpec("w", ("g0", "g1"), (0, 1), 30000, dp=3)
    with pytest.raises(InvalidArgumentError, match="one device index per GPU"):
        SlotSpec("w", ("g0", "g1"), (0,), 30000)
    with pytest.raises(ValueError, match="not divisible by the attention-DP size 3"):  # the fake, as SGLang asserts
        FakeSGLangServer(FakeConfig(tp_size=4, dp_size=3, enable_dp_attention=True))


def test_a_gpu_in_two_slots_or_one_device_twice_is_refused(tmp_path: Path) -> None:
    gateway = Gateway(port=free_ports(1)[0], log_dir=tmp_path)
    common: dict[str, Any] = {
        "launcher": SubprocessLauncher(FAKE, log_dir=tmp_path),
        "gateway": gateway,
        "model_path": "fake/model",
        "workload": _workload(),
    }
    with pytest.raises(InvalidArgumentError, match="GPU w-gpu1 is in slot w00 and in free_gpus"):
        SGLangCluster(
            slots=local_slots(1, tp=2),
            free_gpus=[GPUSpec("w-gpu1", "node-1", 0)],
            journal=Journal(tmp_path / "a.jsonl"),
            **common,
        )
    with pytest.raises(InvalidArgumentError, match="slot t00: device 0 of node-0 is GPU w-gpu0 and GPU t-gpu0"):
        SGLangCluster(
            slots=[*local_slots(1, tp=2), *local_slots(1, tp=2, prefix="t", base_port=31000)],
            journal=Journal(tmp_path / "b.jsonl"),
            **common,
        )


# -- against the gateway -------------------------------------------------------------------------------------


def _workload() -> Any:
    return PlanRequest.model_validate_json((ROOT / "examples" / "mixed-sizes.json").read_text()).state.workload


@dataclass(frozen=True)
class Regroup:
    """A hand-made target that forms new workers: the roles of kept slots and the expands of the new ones."""

    mode: Mode
    keep: Mapping[str, Role | None]
    new: tuple[Action, ...]

    def roles(self) -> dict[str, Role | None]:
        return {**self.keep, **{a.worker_id: a.to_role for a in self.new}}

    @property
    def actions(self) -> tuple[Action, ...]:
        return self.new


def new_worker(worker_id: str, gpus: Sequence[str], role: Role, dp: int = 1) -> Action:
    return Action(
        kind=ActionKind.EXPAND,
        worker_id=worker_id,
        gpu_ids=tuple(gpus),
        zone=Zone.DEDICATED,
        from_role=None,
        to_role=role,
        group=1,
        dp=dp,
    )


class RecordingLauncher(SubprocessLauncher):
    """The real subprocess launcher, recording each server's argv and CUDA_VISIBLE_DEVICES as it starts it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.launched: dict[str, tuple[list[str], str]] = {}

    def start(self, spec: ServerSpec, *, ready_timeout_s: float = 600.0) -> Any:
        self.launched[spec.slot] = (server_argv(spec, self.command), ",".join(str(g) for g in spec.gpu_ids))
        return super().start(spec, ready_timeout_s=ready_timeout_s)


@pytest.fixture
def smg(tmp_path: Path) -> Iterator[Gateway]:
    try:
        find_smg()
    except AdapterError as exc:
        pytest.fail(f"the real smg gateway is required for these tests: {exc}")
    port, metrics = free_ports(2)
    gateway = Gateway(port=port, metrics_port=metrics, log_dir=tmp_path).start()
    yield gateway
    gateway.stop()
    gateway.client.close()


def make_cluster(
    tmp_path: Path,
    gateway: Gateway,
    slots: Sequence[SlotSpec],
    version: str = NEWEST,
    launcher: RecordingLauncher | None = None,
    **kwargs: Any,
) -> SGLangCluster:
    """A cluster of fake servers of ``version`` behind ``gateway``; ``launcher``: a dead controller's, to resume."""
    kwargs.setdefault("ports", free_ports(24))
    return SGLangCluster(
        slots=slots,
        launcher=launcher or RecordingLauncher((*FAKE, "--fake-version", version), log_dir=tmp_path / "servers"),
        gateway=gateway,
        model_path="fake/model",
        workload=_workload(),
        journal=Journal(tmp_path / "journal.jsonl"),
        drain_s=0.5,
        ready_timeout_s=30.0,
        sglang_version=version,
        **kwargs,
    )


def close(adapter: SGLangCluster) -> None:
    """Stop the servers and the gateway the adapter ends with (a mode change replaces the fixture's)."""
    adapter.shutdown()
    adapter.gateway.stop()
    adapter.gateway.client.close()


def serving(state: ClusterState) -> dict[str, tuple[tuple[str, ...], Role | None, int]]:
    return {w.id: (w.gpu_ids, w.rollout_role, w.dp) for w in state.workers if w.rollout_role is not None}


def check_servers_match_slots(adapter: SGLangCluster) -> None:
    """Every serving slot's server runs at the slot's size on exactly its devices; no device of a node twice."""
    launched = adapter.launcher.launched  # type: ignore[attr-defined]
    seen: set[tuple[str, int]] = set()
    for spec in adapter.current_slots():
        if spec.id not in {w.id for w in adapter.observe().workers if w.rollout_role is not None}:
            continue
        argv, visible = launched[spec.id]
        assert _flag(argv, "--tp-size") == str(len(spec.gpu_ids)) and _flag(argv, "--base-gpu-id") == "0"
        assert visible == ",".join(str(d) for d in spec.devices)
        with SGLangServerClient(f"http://{spec.host}:{spec.port}") as client:
            info = client.server_info()
        assert info["tp_size"] == len(spec.gpu_ids)
        assert info.get("attn_dp_size", info["dp_size"]) == spec.dp
        assert info["fake_cuda_visible_devices"] == visible  # the fake's own report of its GPUs
        for device in spec.devices:
            assert (spec.node, device) not in seen, f"device {device} of {spec.node} serves twice"
            seen.add((spec.node, device))


def mixed_example_cluster(tmp_path: Path, gateway: Gateway, request: PlanRequest, version: str) -> SGLangCluster:
    """The cluster of examples/mixed-sizes.json: its slots, and its slot-less nodes as free GPUs."""
    state = request.state
    index = state.gpu_index()
    nodes: dict[str, list[str]] = {}
    for g in state.gpus:
        nodes.setdefault(g.node, []).append(g.id)
    device = {g: i for gpus in nodes.values() for i, g in enumerate(gpus)}
    ports = iter(free_ports(2 * len(state.workers)))
    slots = [
        SlotSpec(
            id=w.id,
            gpu_ids=w.gpu_ids,
            devices=tuple(device[g] for g in w.gpu_ids),
            port=next(ports),
            bootstrap_port=next(ports),
            zone=index[w.gpu_ids[0]].zone,
            node=index[w.gpu_ids[0]].node,
            gpu_type=index[w.gpu_ids[0]].type,
        )
        for w in state.workers
    ]
    held = {g for w in state.workers for g in w.gpu_ids}
    free = [GPUSpec(g.id, g.node, device[g.id], zone=g.zone, gpu_type=g.type) for g in state.gpus if g.id not in held]
    return make_cluster(
        tmp_path,
        gateway,
        slots,
        version,
        free_gpus=free,
        ports=free_ports(2 * len(state.gpus)),
        worker_sizes=state.worker_sizes,
        max_gpus=state.budget.max_gpus,
    )


@pytest.mark.integration
@pytest.mark.parametrize("version", [FAKE_VERSIONS[0], NEWEST])
def test_the_mixed_size_example_is_applied_end_to_end(tmp_path: Path, smg: Gateway, version: str) -> None:
    request = PlanRequest.model_validate_json((ROOT / "examples" / "mixed-sizes.json").read_text())
    model = make_predictor("pearl", request.model)
    adapter = mixed_example_cluster(tmp_path, smg, request, version)
    try:
        serving_now = {w.id: w.role for w in request.state.workers if w.status is Status.ACTIVE}
        adapter.apply(Assignment(Mode.DISAGGREGATED, serving_now))  # the example's serving workers
        state = adapter.observe()
        assert serving(state) == serving(request.state)
        p = plan(state, model, costs=request.costs, policy=request.policy, policy_state=request.policy_state)
        formed = [a for a in p.actions if a.kind is ActionKind.EXPAND and a.worker_id not in serving_now]
        assert formed and len({a.tp for a in formed}) >= 2  # the plan regroups GPUs into workers of two sizes
        report = adapter.apply(p)
        assert set(report.changed) == {a.worker_id for a in p.actions}
        live = adapter.observe()
        assert serving(live) == serving(apply_actions(state, p.actions))  # the plan's target state, sizes included
        for a in formed:  # each new worker runs on exactly the GPUs the plan named
            spec = next(s for s in adapter.current_slots() if s.id == a.worker_id)
            assert spec.gpu_ids == a.gpu_ids and spec.dp == a.dp
        check_servers_match_slots(adapter)
        registered = {url: reg.worker_type for url, (_, reg) in adapter.gateway.registered().items()}
        expected = {
            w.endpoint: {Role.PREFILL: "prefill", Role.DECODE: "decode"}[w.role]
            for w in live.workers
            if w.rollout_role is not None
        }
        assert registered == expected
        again = plan(live, model, current=p, costs=request.costs, policy=request.policy)
        assert not again.actions, again.decision.reason  # the live cluster is the plan's fixed point
        assert adapter.apply(p).changed == ()  # re-applying does nothing
    finally:
        close(adapter)


@pytest.mark.integration
def test_the_control_loop_regroups_the_live_cluster_once(tmp_path: Path, smg: Gateway) -> None:
    request = PlanRequest.model_validate_json((ROOT / "examples" / "mixed-sizes.json").read_text())
    adapter = mixed_example_cluster(tmp_path, smg, request, NEWEST)
    try:
        serving_now = {w.id: w.role for w in request.state.workers if w.status is Status.ACTIVE}
        adapter.apply(Assignment(Mode.DISAGGREGATED, serving_now))
        decider = PlannerDecider(
            "pearl_sched",
            make_predictor("pearl", request.model),
            costs=request.costs,
            policy=request.policy,
            policy_state=request.policy_state,
        )
        loop = ControlLoop(adapter, decider)
        first = loop.handle(Event(EventKind.STEP_BOUNDARY, 0.0))
        configured = {s.id for s in adapter.slots}
        formed = [s for s in adapter.current_slots() if s.id not in configured]
        assert first.changed > 0 and formed and {len(s.gpu_ids) for s in formed} >= {1, 2}  # regrouped, two sizes
        check_servers_match_slots(adapter)
        second = loop.handle(Event(EventKind.STEP_BOUNDARY, 60.0))
        assert second.changed == 0, second.reason  # observe() → plan() on the live cluster asks for nothing more
    finally:
        close(adapter)


@pytest.mark.integration
@pytest.mark.parametrize("version", [FAKE_VERSIONS[0], NEWEST])
def test_a_regroup_under_load_loses_no_tokens(tmp_path: Path, smg: Gateway, version: str) -> None:
    ports = free_ports(8)  # local_slots' consecutive ports may be taken: give the slots free ones
    adapter = make_cluster(
        tmp_path,
        smg,
        [
            SlotSpec(s.id, s.gpu_ids, s.devices, ports[2 * i], bootstrap_port=ports[2 * i + 1])
            for i, s in enumerate(local_slots(4))
        ],
        version,
        extra_args=("--fake-token-time", "0.02"),  # a turn of 40-80 tokens outlasts drain_s: some are aborted
    )
    C = Role.COLOCATED
    stop = threading.Event()
    resubmits: list[int] = []
    results: list[tuple[int, int]] = []
    errors: list[str] = []

    def load(seed: int) -> None:
        client = RolloutClient(adapter.gateway.url, patience_s=60.0)
        i = 0
        while not stop.is_set():
            want = 40 + (seed * 7 + i) % 40
            try:
                done = client.generate(list(range(seed, seed + 10)), want)
                results.append((want, len(done.output_ids)))
                resubmits.append(done.resubmits)
            except AdapterError as exc:
                errors.append(str(exc))
            i += 1
        client.close()

    try:
        adapter.apply(Assignment(Mode.COLOCATED, {"w00": C, "w01": C, "w02": C, "w03": C}))  # 4 × TP1
        with ThreadPoolExecutor(4) as pool:
            for seed in range(4):
                pool.submit(load, seed)
            try:
                halves = [["w-gpu0", "w-gpu1"], ["w-gpu2", "w-gpu3"]]
                tp2 = Regroup(
                    Mode.COLOCATED, {}, (new_worker("x0", halves[0], C, dp=2), new_worker("x1", halves[1], C))
                )
                adapter.apply(tp2)  # 4 × TP1 → 2 × TP2 (one with attention-DP 2), all four drained first
                assert serving(adapter.observe()) == {
                    "x0": (("w-gpu0", "w-gpu1"), C, 2),
                    "x1": (("w-gpu2", "w-gpu3"), C, 1),
                }
                check_servers_match_slots(adapter)
                assert len(adapter.gateway.registered()) == 2
                back = Regroup(Mode.COLOCATED, {}, tuple(new_worker(f"y{i}", [f"w-gpu{i}"], C) for i in range(4)))
                adapter.apply(back)  # and back to 4 × TP1, dissolving the workers the first regroup formed
                assert {s.id for s in adapter.current_slots()} == {"y0", "y1", "y2", "y3"}
                check_servers_match_slots(adapter)
            finally:
                stop.set()
    finally:
        close(adapter)
    assert not errors, errors[:3]
    assert len(results) > 10
    assert all(want == got for want, got in results), "a request lost or duplicated tokens in the regroup"
    assert sum(resubmits) > 0  # turns were cut by the regroups' aborts and finished elsewhere


@pytest.mark.integration
def test_a_worker_that_cannot_be_formed_is_refused_before_anything_is_touched(tmp_path: Path, smg: Gateway) -> None:
    ports = free_ports(8)
    slots = [
        SlotSpec(s.id, s.gpu_ids, s.devices, ports[2 * i], bootstrap_port=ports[2 * i + 1])
        for i, s in enumerate(local_slots(4))
    ]
    other_node = [GPUSpec(f"n1-gpu{i}", "node-1", i) for i in range(2)]
    adapter = make_cluster(tmp_path, smg, slots, free_gpus=other_node)
    C = Role.COLOCATED
    try:
        adapter.apply(Assignment(Mode.COLOCATED, {"w00": C, "w01": C}))
        before = (adapter.observe(), dict(adapter.gateway.registered()), adapter.journal.path.read_bytes())
        node0 = [f"w-gpu{i}" for i in range(4)]
        bad: list[tuple[Any, str]] = [
            (
                Regroup(Mode.COLOCATED, {}, (new_worker("x", ["w-gpu2", "w-gpu3", "n1-gpu0", "n1-gpu1"], C),)),
                r"new worker x \(TP4\): its GPUs are on nodes \['node-0', 'node-1'\], but a worker's GPUs must be on"
                r" one node; nothing was changed",
            ),
            (
                Regroup(Mode.COLOCATED, {}, (new_worker("x", [*node0, "n1-gpu0", "n1-gpu1"], C),)),
                r"no node holds 6 GPUs \(the largest has 4\)",
            ),
            (
                Regroup(Mode.COLOCATED, {}, (new_worker("x", node0, C, dp=3),)),
                r"new worker x \(TP4\): dp=3 does not divide its TP degree 4",
            ),
            (
                Regroup(Mode.COLOCATED, {"w00": C}, (new_worker("x", ["w-gpu0", "w-gpu1"], C),)),
                "GPU w-gpu0 would be in new worker x and in slot w00, which the target keeps serving as colocated",
            ),
            (
                Regroup(Mode.COLOCATED, {}, (new_worker("x", ["w-gpu9"], C),)),
                r"GPU\(s\) \['w-gpu9'\] are not this cluster's",
            ),
            (
                Regroup(Mode.COLOCATED, {}, (new_worker("x", ["n1-gpu0"], C), new_worker("y", ["n1-gpu0"], C))),
                "GPU n1-gpu0 is in two new workers, x and y",
            ),
            (Assignment(Mode.COLOCATED, {"w00": C, "zz": C}), "zz is to serve as colocated, but the cluster has no"),
        ]
        for target, message in bad:
            with pytest.raises(InvalidArgumentError, match=message):
                adapter.apply(target)
            after = (adapter.observe(), dict(adapter.gateway.registered()), adapter.journal.path.read_bytes())
            assert after == before, f"{message}: the cluster changed"
        adapter.set_gpu_available("n1-gpu1", False)  # a preemption notice for a GPU no slot holds
        assert not adapter.observe().gpu_index()["n1-gpu1"].available
        with pytest.raises(InvalidArgumentError, match=r"GPU\(s\) \['n1-gpu1'\] are unavailable \(preempted\)"):
            adapter.apply(Regroup(Mode.COLOCATED, {"w00": C, "w01": C}, (new_worker("x", ["n1-gpu1"], C),)))
        with pytest.raises(InvalidArgumentError, match="not one of this cluster's GPUs"):
            adapter.set_gpu_available("n9-gpu0", False)
        adapter.set_gpu_available("n1-gpu1", True)
        adapter.ports = ()
        with pytest.raises(InvalidArgumentError, match=r"need 2 ports \(HTTP and bootstrap\)"):
            adapter.apply(Regroup(Mode.COLOCATED, {"w00": C, "w01": C}, (new_worker("x", ["n1-gpu0"], C),)))
        assert (adapter.observe(), dict(adapter.gateway.registered())) == before[:2]
    finally:
        close(adapter)


@pytest.mark.integration
def test_a_controller_resumes_a_regrouped_cluster_and_rolls_back_an_unfinished_regroup(
    tmp_path: Path, smg: Gateway
) -> None:
    ports = free_ports(8)
    slots = [
        SlotSpec(s.id, s.gpu_ids, s.devices, ports[2 * i], bootstrap_port=ports[2 * i + 1])
        for i, s in enumerate(local_slots(4))
    ]
    C = Role.COLOCATED
    pool = free_ports(16)
    adapter = make_cluster(tmp_path, smg, slots, ports=pool)
    tp2 = Regroup(Mode.COLOCATED, {}, (new_worker("x0", ["w-gpu0", "w-gpu1"], C, dp=2),))
    adapter.apply(tp2)
    adapter.journal.close()  # the controller dies; its servers keep running
    x0 = adapter._slots["x0"].handle
    assert x0 is not None and x0.alive()

    def resume() -> SGLangCluster:
        """A new controller over the dead one's servers, gateway and journal."""
        launcher = adapter.launcher
        assert isinstance(launcher, RecordingLauncher)
        return make_cluster(tmp_path, adapter.gateway, slots, launcher=launcher, ports=pool)

    resumed = resume()
    state = resumed.observe()
    assert serving(state) == {"x0": (("w-gpu0", "w-gpu1"), C, 2)}
    assert {w.id for w in state.workers} == {"w02", "w03", "x0"}  # w00 and w01 were dissolved into x0
    assert resumed.apply(tp2).changed == ()  # nothing applied twice

    class Killed(BaseException):
        """Stands for SIGKILL of the controller once the new worker's server is up."""

    def die_once_started(action: object, phase: str) -> None:
        if phase == "started":
            raise Killed

    resumed.on_action = die_once_started
    wide = Regroup(Mode.COLOCATED, {}, (new_worker("z", ["w-gpu0", "w-gpu1", "w-gpu2", "w-gpu3"], C),))
    with pytest.raises(Killed):
        resumed.apply(wide)
    z = resumed._slots["z"].handle
    assert z is not None and z.alive()  # left running mid-regroup
    resumed.journal.close()
    assert x0.process.wait(timeout=15) is not None  # the resumed controller stopped x0 (drained) for z
    again = resume()  # the unfinished regroup is rolled back: z stopped, its old slots hold the GPUs again
    assert z.process.wait(timeout=15) is not None
    x0.log.close()
    z.log.close()
    assert {w.id for w in again.observe().workers} == {"w02", "w03", "x0"}
    assert serving(again.observe()) == {}  # x0 was drained and stopped before z started
    assert again.apply(wide).changed == ("z",)  # re-applying forms it
    assert serving(again.observe()) == {"z": (("w-gpu0", "w-gpu1", "w-gpu2", "w-gpu3"), C, 1)}
    records = [json.loads(line) for line in (tmp_path / "journal.jsonl").read_text().splitlines()]
    assert any(r.get("dissolved") and r["action"]["worker_id"] == "z" for r in records)  # the rollback, journaled
    close(again)
