"""The verl integration against verl's own classes (the verl extra: verl 0.9.1 installs on CPU).

verl's registry, ``build_policy``, ``DynamicScheduleContext``, ``GlobalRequestLoadBalancer`` and
``RolloutReplica`` are the real ones; only the SGLang server actors behind a replica are fakes (``FakeServerActor``:
verl's replica awaits ``server.<method>.remote()`` on Ray actors, which need a GPU machine to be real).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="the verl extra is not installed")

from verl.experimental.fully_async_policy.dynamic_schedule.base import (
    DynamicScheduleContext,
    DynamicSchedulePolicyBase,
    build_policy,
)
from verl.workers.config import RolloutConfig
from verl.workers.rollout.replica import RolloutReplica
from verl.workers.rollout.router import GlobalRequestLoadBalancer

from pearl_sched.config import TransitionCosts
from pearl_sched.integrations import verl as pv
from pearl_sched.integrations.lending import IntegrationError


@pytest.fixture
def setup() -> Any:
    pv.configure(pv.VerlLendingSetup(standalone_gpus=4, hybrid_gpus=4))
    yield
    pv.configure(None)


def _ctx(**kw: Any) -> DynamicScheduleContext:
    base: dict[str, Any] = dict(
        required_samples=64,
        trigger_parameter_sync_step=2,
        total_generated_samples=0,
        expected_samples=0,
        buffer_samples=0,
    )
    base.update(kw)
    return DynamicScheduleContext(**base)


def test_verl_loads_the_policy_from_the_entry_point(tmp_path: Path) -> None:
    """A fresh process that only imports verl has "pearl_sched" registered, and verl's build_policy builds it."""
    setup_file = tmp_path / "setup.json"
    setup_file.write_text(json.dumps({"standalone_gpus": 8, "hybrid_gpus": 8, "costs": {"activation_s": 2.0}}))
    code = (
        "import verl\n"
        "from verl.experimental.fully_async_policy.dynamic_schedule.base import build_policy, "
        "DynamicSchedulePolicyBase\n"
        "p = build_policy('pearl_sched', deactivate_ratio=0.3, only_hybrid=False)\n"
        "assert isinstance(p, DynamicSchedulePolicyBase)\n"
        "print(type(p).__module__, p.setup.standalone_gpus, p.gate.costs.activation_s)\n"
    )
    env = {**os.environ, pv.SETUP_ENV: str(setup_file)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["pearl_sched.integrations.verl", "8", "2.0"]


def test_build_policy_without_a_setup_names_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(pv.SETUP_ENV, raising=False)
    with pytest.raises(IntegrationError, match=pv.SETUP_ENV):
        build_policy("pearl_sched", deactivate_ratio=0.3, only_hybrid=False)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "cannot read"),
        ('{"hybrid_gpus": 2}', "standalone_gpus must be an integer"),
        ('{"standalone_gpus": 2, "hybrid_gpus": 0}', "hybrid_gpus ≥ 1"),
        ('{"standalone_gpus": 2, "hybrid_gpus": 2, "costs": {"activation_s": -1}}', "costs.activation_s|activation_s"),
        ('{"standalone_gpus": 2, "hybrid_gpus": 2, "gpus": 3}', "unknown field"),
    ],
)
def test_setup_file_errors_are_one_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(content)
    with pytest.raises(IntegrationError, match=message) as err:
        pv.VerlLendingSetup.from_json(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_policy_hooks_with_verls_context(setup: None) -> None:
    policy = build_policy("pearl_sched", deactivate_ratio=0.3, only_hybrid=False)
    assert isinstance(policy, pv.PearlSchedPolicy) and isinstance(policy, DynamicSchedulePolicyBase)
    ctx = _ctx()
    assert policy.should_deactivate(1, True, ctx) and not policy.should_deactivate(1, False, ctx)
    assert policy.deactivate_wait_samples(ctx) == 64  # the next collection, not the 128-sample cycle
    only = build_policy("pearl_sched", deactivate_ratio=0.3, only_hybrid=True)
    assert only.deactivate_wait_samples(ctx) == 128
    assert only.should_activate_after_step(1, False, ctx)


def test_first_sync_lends_to_measure_then_eq7_decides(setup: None) -> None:
    """Throughput comes from verl's wait counters; the lend decision follows Eq. 7 with numbers worked by hand.

    40 samples waited on over 100 s by the 4 standalone GPUs: 0.1 samples/s/GPU, so the 64-sample collection takes
    160 s on them and 80 s with the 4 hybrid GPUs. Nothing buffered: the trainer idles W = 160 s; the lent GPUs
    serve from the end of activation (A = 6.26 s, PEARL Table 3) to the window's end, saving
    (160 − 80)·(160 − 6.26)/80 = 153.74 s; the loan ends at the costlier of the trainer waiting D = 3.18 s or the
    GPUs going back D + m = 3.18 + 5 s early, (160 − 80)·8.18/80 = 8.18 s: lend (docs/policies.md, borrowing).
    60 samples buffered: 4 remain, a 10 s window ends before the GPUs could serve: keep.
    """
    policy = build_policy("pearl_sched", deactivate_ratio=0.3, only_hybrid=False)
    assert policy.should_activate_after_step(1, False, _ctx())  # nothing measured yet: lend to measure
    assert "no throughput measured" in policy.decisions[-1][2]
    lend = policy.should_activate_after_step(2, False, _ctx(step_wait_times=[100.0], step_wait_samples=[40]))
    assert lend and policy.decisions[-1][2] == "borrow: gain 153.7 s > return cost 8.2 s"
    keep = policy.should_activate_after_step(
        3,
        False,
        _ctx(total_generated_samples=188, expected_samples=128, step_wait_times=[100.0], step_wait_samples=[40]),
    )
    assert not keep and "ends before the GPUs can serve" in policy.decisions[-1][2]


def test_update_after_step_learns_the_toggle_cost(setup: None) -> None:
    policy = build_policy("pearl_sched", deactivate_ratio=0.3, only_hybrid=False)
    policy.update_after_step(1, _ctx(last_activate_duration_s=2.0))  # no deactivation in this cycle
    assert policy.gate.state.toggle_cost_s is None
    policy.update_after_step(2, _ctx(last_activate_duration_s=2.0, last_deactivate_duration_s=1.0))
    assert policy.gate.state.toggle_cost_s == pytest.approx(3.0)
    policy.update_after_step(3, _ctx(last_activate_duration_s=10.0, last_deactivate_duration_s=3.0))
    assert policy.gate.state.toggle_cost_s == pytest.approx(0.7 * 3.0 + 0.3 * 13.0)


class FakeServerActor:
    """A fake of verl's SGLang server actor: each method is called as ``actor.method.remote(...)``."""

    def __init__(self, name: str, log: list[tuple[str, str]]) -> None:
        self.name, self.log = name, log
        for method in ("sleep", "wake_up", "abort_all_requests", "resume_generation"):
            setattr(self, method, self._remote(method))

    def _remote(self, method: str) -> Any:
        class _Method:
            @staticmethod
            async def remote(*args: Any, **kwargs: Any) -> None:
                self.log.append((self.name, method if not kwargs else f"{method}{sorted(kwargs.items())}"))

        return _Method()


class _LoggedBalancer(GlobalRequestLoadBalancer):
    def __init__(self, servers: dict[str, Any], log: list[tuple[str, str]]) -> None:
        super().__init__(servers)
        self.log = log

    def add_servers(self, servers: dict[str, Any]) -> None:
        self.log.extend((sid, "add_servers") for sid in servers)
        super().add_servers(servers)

    def remove_servers(self, server_ids: list[str]) -> None:
        self.log.extend((sid, "remove_servers") for sid in server_ids)
        super().remove_servers(server_ids)


class _CPUReplica(RolloutReplica):
    async def launch_servers(self) -> None:  # never launched here: the servers are FakeServerActor
        raise NotImplementedError


def _replica(rank: int, log: list[tuple[str, str]]) -> _CPUReplica:
    replica = _CPUReplica(replica_rank=rank, config=RolloutConfig(name="sglang"), model_config=None, gpus_per_node=1)
    address = f"10.0.0.{rank}:3000"
    replica.servers = [FakeServerActor(address, log)]
    replica._server_address, replica._server_handle = address, f"handle-{rank}"
    return replica


def test_replica_pool_drives_verls_load_balancer_in_verls_order() -> None:
    log: list[tuple[str, str]] = []
    replicas = {r._server_address: r for r in (_replica(i, log) for i in range(3))}
    a, b, c = sorted(replicas)
    balancer = _LoggedBalancer({a: "handle-0", b: "handle-1"}, log)
    pool = pv.VerlReplicaPool(balancer, replicas, active=[a, b])
    sticky, _ = balancer.acquire_server("turn-1")
    change = asyncio.run(pool.apply([b, c]))
    assert change == pv.PoolChange(joined=(c,), left=(a,))
    assert sorted(balancer.get_all_servers()) == [b, c] and balancer._servers[c] == "handle-2"
    assert log == [
        (a, "remove_servers"),
        (a, "abort_all_requests[('reject_request', True)]"),
        (a, "sleep"),
        (c, "wake_up"),
        (c, "add_servers"),
        (c, "resume_generation"),
    ]
    # verl's balancer re-routes a sticky turn whose server left.
    again, _ = balancer.acquire_server("turn-1")
    assert again in (b, c) and (sticky != a or again != a)
    assert asyncio.run(pool.apply([b, c])) == pv.PoolChange((), ())


def test_replica_pool_refuses_unknown_and_empty_targets() -> None:
    log: list[tuple[str, str]] = []
    replicas = {r._server_address: r for r in (_replica(i, log) for i in range(2))}
    pool = pv.VerlReplicaPool(GlobalRequestLoadBalancer({}), replicas)
    with pytest.raises(IntegrationError, match="not among"):
        asyncio.run(pool.apply(["10.9.9.9:1"]))
    with pytest.raises(IntegrationError, match="no server"):
        asyncio.run(pool.apply([]))
    with pytest.raises(IntegrationError, match="not among"):
        pv.VerlReplicaPool(GlobalRequestLoadBalancer({}), replicas, active=["nope"])
    assert log == []


def test_setup_costs_reach_the_gate() -> None:
    setup = pv.VerlLendingSetup(standalone_gpus=2, hybrid_gpus=2, costs=TransitionCosts(activation_s=1.0))
    policy = pv.PearlSchedPolicy(setup=setup)
    assert policy.gate.costs.activation_s == 1.0 and policy.setup is setup


def test_pd_replicas_for_a_plan() -> None:
    shapes = {"a:1": (1, 1), "b:1": (1, 3), "c:1": (1, 3), "d:1": (1, 1)}
    assert pv.pd_replicas_for(shapes, prefill_workers=2, decode_workers=6) == ["b:1", "c:1"]
    assert pv.pd_replicas_for(shapes, prefill_workers=2, decode_workers=2) == ["a:1", "d:1"]
    assert pv.pd_replicas_for(shapes, prefill_workers=1, decode_workers=3) == ["b:1"]
    assert pv.pd_replicas_for(shapes, prefill_workers=3, decode_workers=5) == ["a:1", "b:1", "d:1"]
    with pytest.raises(IntegrationError, match="no server"):
        pv.pd_replicas_for({"x:1": (0, 0)}, 1, 1)
    with pytest.raises(IntegrationError, match="1 to 2 PD replicas"):
        pv.pd_replicas_for(shapes, 1, 1, max_replicas=2)
