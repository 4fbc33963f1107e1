"""Worker sizes and attention-DP engines in the simulator (docs/simulator.md, "Worker sizes and attention-DP").

What is asserted: a regroup in the simulated cluster costs the new worker's preparation for its TP degree plus
finalisation (PEARL Table 3 extrapolated per TP, as the planner charges it), and the regrouped worker joins the
running batch at that TP's step times and KV pool; policies that do not know sizes keep the scenario's size while
pearl_sched's planner may regroup; an attention-DP engine's ranks hold each other in colocated mode and not in PD
mode; a scenario with attention-DP runs its workers as engines of that many ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from pearl_sched import Mode, Role
from pearl_sched.control import Assignment
from pearl_sched.plans import Action, ActionKind
from pearl_sched.sim import Engine, Pool, TrajectorySpec, Turn, simulate_batch
from pearl_sched.sim.cluster import SimCluster
from pearl_sched.sim.experiment import SIZED_POLICIES, costs_for, run_policy_segment, setting_for
from pearl_sched.sim.scenario import Scenario, ScenarioError
from pearl_sched.state import WorkerSize, Zone
from tests.builders import DATA, FLAT, tiny

SIZES = {"prefill": [1, 2], "decode": [2, 4], "colocated": [2, 4]}
TP2, TP4 = WorkerSize(tp=2), WorkerSize(tp=4)


# -- attention-DP ranks share their engine's step (no data needed) --------------------------------------------
SHORT = TrajectorySpec((Turn(10, 30, 0.0),))
LATE = TrajectorySpec((Turn(10, 1, 0.0), Turn(4000, 1, 0.0)))  # its second prompt prefills for 4 s


def test_colocated_ranks_of_one_engine_hold_each_other_and_pd_ranks_do_not() -> None:
    # Colocated: LATE goes to rank 0 and SHORT to rank 1 (the gateway's expected-wait tally: rank 0 has 10 tokens);
    # LATE's second turn is a miss tied at 10 tokens a rank, the tie to rank 0 (the simulator's; smg's is random).
    # SHORT decodes on rank 1, LATE's 4,000-token prompt prefills on rank 0 from 0.02 s to 4.02 s. As
    # two engines SHORT is done at 0.01 + 30 × 0.01 s; as the two ranks of one engine its decode is held for the 4 s
    # prefill, so its last 29 tokens come after 4.02 s (Prorsa's first reason for disaggregation).
    one, two = (Engine(FLAT, math.inf, ranks=2),), (Engine(FLAT, math.inf), Engine(FLAT, math.inf))
    apart = simulate_batch(Pool(Mode.COLOCATED, FLAT, colocated_workers=2, colocated_engines=two), [LATE, SHORT])
    engine = simulate_batch(Pool(Mode.COLOCATED, FLAT, colocated_workers=2, colocated_engines=one), [LATE, SHORT])
    assert min(apart.finish_times_s) == pytest.approx(0.01 + 0.30)
    assert max(engine.finish_times_s) == pytest.approx(4.02 + 0.29)
    assert min(engine.finish_times_s) > 4.0  # SHORT itself waited for the other rank's prefill

    # PD: prefill runs on its own worker, so a decode engine's ranks only decode and never wait for a prefill.
    def pd(decode: tuple[Engine, ...]) -> list[float]:
        pool = Pool(
            Mode.DISAGGREGATED,
            FLAT,
            prefill_workers=1,
            decode_workers=2,
            prefill_engines=(Engine(FLAT, math.inf),),
            decode_engines=decode,
        )
        return sorted(simulate_batch(pool, [SHORT, LATE]).finish_times_s)

    assert pd(one) == pytest.approx(pd(two))
    assert pd(one)[0] < 1.0  # SHORT finishes while LATE's second prompt is still prefilling


def test_a_pool_refuses_engines_whose_ranks_are_not_its_worker_count() -> None:
    with pytest.raises(ValueError, match="colocated_workers \\(3\\) is not the ranks of colocated_engines"):
        Pool(Mode.COLOCATED, FLAT, colocated_workers=3, colocated_engines=(Engine(FLAT, 100.0, ranks=2),))


def test_a_scenario_refuses_attention_dp_that_does_not_divide_tp() -> None:
    with pytest.raises(ValueError, match="attention_dp \\(3\\) must divide tp \\(2\\)"):
        Scenario.model_validate({**tiny().model_dump(), "attention_dp": 3})


# -- worker sizes in the simulated cluster ------------------------------------------------------------------
@dataclass(frozen=True)
class FakeRegroupPlan:
    """A hand-built target (a fake of plan()'s): roles per slot and the expand actions of regrouped workers."""

    mode: Mode
    role_map: dict[str, Role | None]
    actions: tuple[Action, ...] = field(default=())

    def roles(self) -> dict[str, Role | None]:
        return dict(self.role_map)


def _sized_cluster() -> tuple[Scenario, SimCluster]:
    scenario = tiny(worker_sizes=SIZES, batch_prompts=8, dedicated_rollout_gpus=8)
    setting = setting_for(scenario, DATA)
    return scenario, SimCluster(setting, costs=costs_for(scenario), worker_sizes=scenario.worker_sizes)


@pytest.mark.needs_data
def test_a_regroup_restarts_the_gpus_as_a_worker_of_the_new_size_at_its_cost_step_times_and_pool() -> None:
    scenario, cluster = _sized_cluster()
    setting, costs = cluster.setting, cluster.costs
    assert [len(s.gpu_ids) for s in cluster.slots if s.zone is Zone.DEDICATED] == [2, 2, 2, 2]
    cluster.apply(Assignment(Mode.DISAGGREGATED, {"dw00": Role.PREFILL, "dw01": Role.DECODE, "dw02": Role.DECODE}))
    cluster.launch(0)
    assert cluster.advance(30.0)
    # dw02 (d4, d5, serving decode) and dw03 (d6, d7, idle) become one TP4 decode worker
    gpus = ("d4", "d5", "d6", "d7")
    expand = Action(
        kind=ActionKind.EXPAND, worker_id="w-d4-tp4", gpu_ids=gpus, zone=Zone.DEDICATED, from_role=None,
        to_role=Role.DECODE,
    )  # fmt: skip
    target = FakeRegroupPlan(
        Mode.DISAGGREGATED, {"dw00": Role.PREFILL, "dw01": Role.DECODE, "w-d4-tp4": Role.DECODE}, (expand,)
    )
    report = cluster.apply(target)

    # the cost of a new TP4 worker (PEARL Table 3 extrapolated per TP, as the planner charges), not a TP2 one
    delay = costs.preparation_for(4) + costs.finalisation_s
    assert costs.preparation_for(4) != costs.preparation_for(2)
    assert report.seconds_lost == pytest.approx(delay)
    assert set(report.changed) == {"dw02", "dw03", "w-d4-tp4"}
    state = cluster.observe()
    assert {w.id for w in state.workers} >= {"w-d4-tp4"} and not {"dw02", "dw03"} & {w.id for w in state.workers}
    assert state.worker_sizes == scenario.worker_sizes
    new = cluster.by_id["w-d4-tp4"]
    assert new.index is None  # not serving while it prepares: dw02's sequences went elsewhere
    assert cluster.serving() == "1P(tp2)2D(1×tp2+1×tp4)"
    assert cluster.advance(30.0 + delay - 1.0) and new.index is None
    assert cluster.advance(30.0 + delay + 1.0) and new.index is not None

    # it runs at TP4's step times and KV pool
    assert cluster.batch is not None
    decoder = cluster.batch.decoders[new.index]
    assert decoder.steps.world is setting.steps_for(TP4)  # type: ignore[attr-defined]
    assert decoder.memory.capacity_tokens == setting.kv_pool_tokens_for(TP4)
    assert setting.kv_pool_tokens_for(TP4) > 2 * setting.kv_pool_tokens_for(TP2)  # 4 GPUs hold more, less weight each
    assert setting.steps_for(TP4).decode_s(32, 4000) < setting.steps_for(TP2).decode_s(32, 4000)
    # and the batch still finishes every trajectory
    assert not cluster.advance(math.inf)
    assert cluster.batch.unfinished == 0
    # the planners' devices are refitted per TP degree from the steps that degree's workers reported
    cluster.finish_batch()
    assert cluster.pearl_params is not None
    devices = {d.tp: d for d in cluster.pearl_params.devices}
    prior = {d.tp: d for d in setting.pearl_params.devices}
    assert set(devices) == set(prior) == {1, 2, 4}
    assert devices[4] != prior[4] and devices[2] != prior[2]  # refitted from their own workers' steps
    assert devices[1] == prior[1]  # no TP1 worker ran: the prior stays


@pytest.mark.slow
@pytest.mark.needs_data
def test_only_the_planner_that_knows_sizes_regroups_and_the_others_keep_the_scenarios_size() -> None:
    scenario = tiny(worker_sizes=SIZES, batch_prompts=8, dedicated_rollout_gpus=8)
    assert "pearl" not in SIZED_POLICIES and "pearl_sched" in SIZED_POLICIES
    sized = run_policy_segment(scenario, "pearl_sched", 0, DATA)
    faithful = run_policy_segment(scenario, "pearl", 0, DATA)
    assert any(slot.startswith("w-") for _, slot, _ in sized.timeline)  # regrouped workers (w-<first GPU>-tp<n>)
    assert not any(slot.startswith("w-") for _, slot, _ in faithful.timeline)
    assert any("(tp" in ratio for _, ratio in sized.ratios) and not any("(tp" in r for _, r in faithful.ratios)
    assert sized.steps and all(s.generated_tokens > 0 for s in sized.steps)


@pytest.mark.needs_data
def test_costs_per_tp_only_when_the_scenario_declares_sizes() -> None:
    plain, sized = costs_for(tiny()), costs_for(tiny(worker_sizes=SIZES))
    assert not plain.preparation_s_by_tp
    assert sized.preparation_for(2) == pytest.approx(plain.preparation_s)  # Table 3's TP2 start
    assert sized.preparation_for(1) > sized.preparation_for(2) > sized.preparation_for(4)


# -- a scenario with attention-DP runs its workers as engines of that many ranks ------------------------------
@pytest.mark.needs_data
def test_an_attention_dp_scenario_runs_each_worker_as_an_engine_of_its_ranks() -> None:
    pytest.importorskip("aiconfigurator_core", reason="attention-DP step times come from aiconfigurator-core")
    scenario = tiny("swe-qwen3-30b-a3b", attention_dp=2)
    setting = setting_for(scenario, DATA)
    cluster = SimCluster(setting, costs=costs_for(scenario))
    cluster.apply(Assignment(Mode.COLOCATED, {"dw00": Role.COLOCATED, "dw01": Role.COLOCATED}))
    cluster.launch(0)
    batch = cluster.batch
    assert batch is not None and len(batch.decoders) == 4  # two engines of two attention-DP ranks
    assert sorted(sorted(r) for r in batch.ranks.values()) == [[0, 1], [2, 3]]
    rank = batch.decoders[0].steps.world  # type: ignore[attr-defined]
    assert (rank.tp, rank.attention_dp) == (1, 2)  # attention at TP 2/2 in each rank, experts over both GPUs
    size = WorkerSize(tp=2, dp=2)
    assert batch.decoders[0].memory.capacity_tokens == setting.kv_pool_tokens_for(size)
    assert not cluster.advance(math.inf) and batch.unfinished == 0


def test_attention_dp_with_kernel_composed_step_times_is_refused_in_one_line() -> None:
    from pearl_sched.sim.sources import step_times_for

    with pytest.raises(ScenarioError, match="attention-DP, which only the aiconfigurator-core step times model"):
        step_times_for(tiny(), DATA, WorkerSize(tp=2, dp=2))


@pytest.mark.needs_data
def test_gpus_a_regroup_leaves_over_stay_in_the_cluster_as_one_gpu_slots() -> None:
    _, cluster = _sized_cluster()
    cluster.apply(Assignment(Mode.DISAGGREGATED, {"dw00": Role.PREFILL, "dw01": Role.DECODE}))
    expand = Action(
        kind=ActionKind.EXPAND, worker_id="w-d6-tp1", gpu_ids=("d6",), zone=Zone.DEDICATED, from_role=None,
        to_role=Role.PREFILL,
    )  # fmt: skip
    roles = {"dw00": Role.PREFILL, "dw01": Role.DECODE, "w-d6-tp1": Role.PREFILL}
    report = cluster.apply(FakeRegroupPlan(Mode.DISAGGREGATED, roles, (expand,)))
    assert report.seconds_lost == pytest.approx(cluster.costs.preparation_for(1) + cluster.costs.finalisation_s)
    assert cluster.by_id["w-d7-tp1"].role is None and "dw03" not in cluster.by_id  # d7 is kept, without a role
    state = cluster.observe()
    assert sorted(g.id for g in state.gpus if g.zone is Zone.DEDICATED) == [f"d{i}" for i in range(8)]
    assert cluster.serving() == "2P(1×tp1+1×tp2)1D(tp2)"


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"colocated": [2, 16]}, "worker_sizes: a worker of 16 GPUs needs more than a simulated node holds \\(8\\)"),
        ({"colocated": [2, {"tp": 4, "dp": 4}]}, "attention-DP \\(4 ranks\\) needs the aiconfigurator-core step times"),
    ],
)
def test_a_scenario_refuses_worker_sizes_the_simulator_cannot_run_in_one_line(sizes: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Scenario.model_validate({**tiny().model_dump(), "worker_sizes": sizes})
