"""The sized action space of bench/reproduce.py's sized ratio selection: what it enumerates, how it is capped, and
that its labels are the simulated cluster's."""

from __future__ import annotations

import pytest

from pearl_sched.config import TransitionCosts
from pearl_sched.control import plan_resident
from pearl_sched.makespan import PoolCapacity, SizeCount
from pearl_sched.shared_data import default_data
from pearl_sched.sim.cluster import SimCluster
from pearl_sched.sim.experiment import setting_for
from pearl_sched.sim.scenario import Scenario, load_scenario
from pearl_sched.sim.sized_configs import (
    node_capacities,
    packs,
    serving_configuration,
    simulate_sized,
    sized_configurations,
    sized_label,
)
from pearl_sched.state import Role, WorkerSize, WorkerSizes

SIZES = WorkerSizes.model_validate({"prefill": [1, 2], "decode": [2, 4], "colocated": [2, 4]})
TP = {n: WorkerSize(tp=n) for n in (1, 2, 4)}


def test_eight_gpus_enumerate_every_one_size_per_role_configuration_that_uses_them_all() -> None:
    labels = [sized_label(c, TP[2]) for c in sized_configurations(SIZES, 8)]
    assert labels == [
        "4C",
        "2C(tp4)",
        "2P(tp1)3D(tp2)",
        "4P(tp1)2D(tp2)",
        "6P(tp1)1D(tp2)",
        "4P(tp1)1D(tp4)",
        "1P3D",
        "2P2D",
        "3P1D",
        "2P(tp2)1D(tp4)",
    ]


@pytest.mark.parametrize("gpus", [6, 8, 10, 12, 16, 24])
def test_each_configuration_fills_the_interval_with_one_size_per_role_and_packs_on_its_nodes(gpus: int) -> None:
    configs = sized_configurations(SIZES, gpus)
    assert configs
    for config in configs:
        workers = [z for sizes in config.values() for z in sizes]
        assert sum(z.tp for z in workers) == gpus
        assert all(len(set(sizes)) == 1 for sizes in config.values())
        assert (Role.COLOCATED in config) != (Role.PREFILL in config and Role.DECODE in config)
        assert all(z in SIZES.allowed(role) for role, sizes in config.items() for z in sizes)
        assert packs(config, node_capacities(gpus))
    assert len({sized_label(c, TP[2]) for c in configs}) == len(configs)


def test_a_configuration_that_does_not_pack_on_the_nodes_is_left_out() -> None:
    three = {Role.COLOCATED: (TP[4],) * 3}
    assert packs(three, [8, 4])
    assert not packs(three, [6, 6])  # 12 GPUs, but no node has room for a second TP4 group
    assert node_capacities(10) == [8, 2]
    assert all(TP[4] not in c.get(Role.COLOCATED, ()) for c in sized_configurations(SIZES, 10))  # 10 = 8 + 2


def test_labels_list_mixed_sizes_within_a_role() -> None:
    mixed = {Role.PREFILL: (TP[2], TP[1], TP[1]), Role.DECODE: (TP[2],) * 4}
    assert sized_label(mixed, TP[2]) == "3P(2×tp1+1×tp2)4D(tp2)"
    assert sized_label({Role.COLOCATED: (TP[2],) * 5}, TP[2]) == "5C"


@pytest.mark.slow
@pytest.mark.needs_data
def test_the_labels_are_the_simulated_clusters_and_a_sized_configuration_simulates() -> None:
    base = load_scenario("e2e")
    scenario = Scenario.model_validate({**base.model_dump(), "worker_sizes": SIZES.model_dump()})
    setting = setting_for(scenario, default_data())
    cluster = SimCluster(setting, costs=TransitionCosts(), dedicated_gpus=8, preemptible_gpus=0, worker_sizes=SIZES)
    cluster.trainer_idle_at = float("inf")
    model = setting.predictor("improved")
    state = cluster.observe()
    chosen = plan_resident(state, model)[0]
    cluster.apply(chosen)
    config = serving_configuration(cluster)
    assert sized_label(config, scenario.size) == cluster.serving()
    assert sum(z.tp for sizes in config.values() for z in sizes) <= 8
    assert simulate_sized(setting, config) > 0
    # The plan's prediction is the model's on those workers, each size with its own pool (PoolCapacity.workers).
    workload, gpu = state.workload, setting.gpu_type
    workers = tuple(
        SizeCount(role=role, gpu_type=gpu, tp=z.tp, count=sizes.count(z))
        for role, sizes in config.items()
        for z in dict.fromkeys(sizes)
    )
    totals = {
        r: sum(model.capacity_weight(workload, gpu, w.tp, r) * w.count for w in workers if w.role is r) for r in Role
    }
    capacity = PoolCapacity(
        mode=chosen.mode,
        prefill=totals[Role.PREFILL],
        decode=totals[Role.DECODE],
        colocated=totals[Role.COLOCATED],
        workers=workers,
    )
    assert chosen.makespan.total_s == pytest.approx(model.predict(workload, capacity).total_s, rel=1e-9)
