"""The ROLL integration and the shared lending gate.

ROLL is not on PyPI (``roll`` there is another project), so its rollout scheduler is a fake named as one,
``FakeRollRolloutScheduler``, mirroring alibaba/ROLL @ 8eb27cc: ``roll/distributed/scheduler/
rollout_scheduler.py`` (``async shrink_sampler(target_gpus) -> dict``, ``async expand_sampler(target_gpus,
skip_load=False) -> dict``) and ``roll/distributed/scheduler/router.py`` ``PartialGPUManager`` (which DP ranks
a GPU list shrinks or expands, the metric keys, the empty / duplicate checks).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.integrations.lending import IntegrationError, LendingGate, Throughput
from pearl_sched.integrations.roll import RollLending
from pearl_sched.plans import PolicyState
from pearl_sched.policies import borrow_gate


class FakeRollRolloutScheduler:
    """A fake of ROLL's RolloutScheduler in partial-GPU mode: one inference DP rank per GPU (pure DP)."""

    def __init__(self, infer_gpus: list[int], *, shrink_ms: float = 900.0, expand_ms: float = 300.0) -> None:
        self.infer_gpus = infer_gpus
        self.active = set(range(len(infer_gpus)))  # DP ranks routed to
        self.calls: list[tuple[str, list[int], bool]] = []
        self.shrink_ms, self.expand_ms = shrink_ms, expand_ms

    def _check(self, target_gpus: list[int], mode: str) -> None:
        if not target_gpus:
            raise ValueError(f"[{mode}] target_gpus cannot be empty")
        if len(target_gpus) != len(set(target_gpus)):
            raise ValueError(f"[{mode}] target_gpus has duplicates: {target_gpus}")

    async def shrink_sampler(self, target_gpus: list[int]) -> dict[str, Any]:
        self._check(target_gpus, "shrink")
        ranks = [r for r, gpu in enumerate(self.infer_gpus) if gpu in set(target_gpus)]
        self.active -= set(ranks)
        self.calls.append(("shrink", list(target_gpus), False))
        return {"aborted": 0, "remapped": 0, "shrink_duration_ms": self.shrink_ms, "offload_ranks": ranks}

    async def expand_sampler(self, target_gpus: list[int], skip_load: bool = False) -> dict[str, Any]:
        self._check(target_gpus, "expand")
        ranks = [r for r, gpu in enumerate(self.infer_gpus) if gpu in set(target_gpus)]
        self.active |= set(ranks)
        self.calls.append(("expand", list(target_gpus), skip_load))
        return {"aborted": 0, "remapped": 0, "expand_duration_ms": self.expand_ms, "load_ranks": ranks}


def test_gate_is_eq7_over_measured_throughput() -> None:
    gate = LendingGate(config=PolicyConfig(gate_horizon="batch"))
    gate.throughput.observe(samples=64, seconds=32.0, gpus=2)  # 1 sample/s/GPU
    decision = gate.decide(remaining_samples=32, batch_samples=64, dedicated_gpus=2, lent_gpus=2)
    # T_dedicated = 64/2 = 32 s, T_full = 64/4 = 16 s: (32/64)·(32 − 16) = 8 s < 9.44 s toggle (Table 3): refused.
    expected = borrow_gate(
        makespan_dedicated_s=32.0,
        makespan_full_s=16.0,
        unfinished_fraction=0.5,
        state=PolicyState(),
        costs=TransitionCosts(),
        config=PolicyConfig(gate_horizon="batch"),
        idle_window_s=16.0,
    )
    assert decision == expected and not decision.allow
    assert gate.decide(remaining_samples=64, batch_samples=64, dedicated_gpus=2, lent_gpus=2).allow  # 16 s > 9.44 s
    gate.observe_toggle(20.0)
    assert not gate.decide(remaining_samples=64, batch_samples=64, dedicated_gpus=2, lent_gpus=2).allow


def test_gate_edge_cases_and_bad_input() -> None:
    gate = LendingGate()
    assert gate.decide(remaining_samples=5, batch_samples=10, dedicated_gpus=2, lent_gpus=2).reason.startswith(
        "borrow: no throughput measured"
    )
    assert not gate.decide(remaining_samples=0, batch_samples=10, dedicated_gpus=2, lent_gpus=2).allow
    assert not gate.decide(remaining_samples=5, batch_samples=10, dedicated_gpus=2, lent_gpus=0).allow
    assert gate.decide(remaining_samples=5, batch_samples=10, dedicated_gpus=0, lent_gpus=2).allow
    with pytest.raises(IntegrationError, match="batch_samples must be > 0"):
        gate.decide(remaining_samples=1, batch_samples=0, dedicated_gpus=1, lent_gpus=1)
    with pytest.raises(IntegrationError, match="or neither"):
        gate.decide(remaining_samples=1, batch_samples=2, dedicated_gpus=1, lent_gpus=1, makespan_full_s=3.0)
    with pytest.raises(IntegrationError, match="remaining_samples"):
        gate.decide(remaining_samples=float("nan"), batch_samples=2, dedicated_gpus=1, lent_gpus=1)
    with pytest.raises(IntegrationError, match="gpus must be ≥ 1"):
        Throughput().observe(1, 1, 0)
    with pytest.raises(IntegrationError, match="measured toggle"):
        gate.observe_toggle(-1.0)


def test_expand_runs_only_when_lending_pays_and_shrink_always() -> None:
    roll = FakeRollRolloutScheduler(infer_gpus=[0, 1, 2, 3])
    lending = RollLending(roll, train_gpus=[0, 1], infer_only_gpus=2, gate=LendingGate())

    async def step(remaining: float, rollout_s: float) -> dict[str, Any]:
        metrics = await lending.expand(remaining_samples=remaining, batch_samples=128)
        lending.observe_rollout(128, rollout_s)
        await lending.shrink()
        return metrics

    first = asyncio.run(step(128, 64.0))  # nothing measured: lend to measure; 128 samples in 64 s on 4 GPUs
    assert first["pearl/lend"] == 1.0 and first["load_ranks"] == [0, 1]
    assert lending.gate.state.toggle_cost_s == pytest.approx(1.2)  # 300 ms expand + 900 ms shrink, ROLL's own
    assert lending.gate.throughput.per_gpu_samples_per_s == pytest.approx(0.5)
    # 4 of 128 samples left (async generation made the rest during training): the saving is below the toggle.
    second = asyncio.run(step(4, 64.0))
    assert second == {"pearl/lend": 0.0}
    assert [c[0] for c in roll.calls] == ["expand", "shrink", "shrink"]
    assert roll.calls[0] == ("expand", [0, 1], True) and roll.active == {2, 3}
    assert lending.gate.state.toggle_cost_s == pytest.approx(1.2)  # no lend: the toggle was not measured again


def test_explicit_makespans_from_a_model() -> None:
    roll = FakeRollRolloutScheduler(infer_gpus=[0, 1, 2, 3])
    lending = RollLending(roll, train_gpus=[0, 1], infer_only_gpus=2)
    out = asyncio.run(
        lending.expand(remaining_samples=128, batch_samples=128, makespan_dedicated_s=300.0, makespan_full_s=160.0)
    )
    assert out["pearl/lend"] == 1.0 and roll.calls == [("expand", [0, 1], True)]


def test_roll_lending_refuses_bad_setups() -> None:
    roll = FakeRollRolloutScheduler(infer_gpus=[0, 1])
    with pytest.raises(IntegrationError, match="distinct"):
        RollLending(roll, train_gpus=[0, 0], infer_only_gpus=1)
    with pytest.raises(IntegrationError, match="inference-only"):
        RollLending(roll, train_gpus=[0], infer_only_gpus=0)

    class Broken:
        async def shrink_sampler(self, target_gpus: list[int]) -> None:
            return None

    with pytest.raises(IntegrationError, match="expected its metrics dict"):
        asyncio.run(RollLending(Broken(), train_gpus=[0], infer_only_gpus=1).shrink())
