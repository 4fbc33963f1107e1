"""The planner's properties with worker sizes, over random small clusters (docs/reliability.md, "Planner").

For every random state with a ``worker_sizes`` field (nodes of 1-8 GPUs of two types, dedicated, preemptible
and training GPUs, slots of TP 1/2/4 with random roles, free GPUs, preempted GPUs, random sizes per role):

- plan() answers with a plan or a documented ``InfeasiblePlanError``, nothing else;
- the budget holds; applying the actions gives a valid state (no GPU twice, a worker's GPUs on one node and of
  one type and zone), in which every serving worker has a size its role allows and the plan's roles;
- the re-plan fixed point: planning that state asks for no action;
- brute force = MILP: on the class problems small enough to enumerate, the MILP's optimum equals the
  exhaustive search's (both infeasible, or the same objective).

Sized so the module runs in well under a minute on two cores; ``PEARL_SCHED_PROPERTY_SEED`` changes the seed.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace

import numpy as np
import pytest

from pearl_sched import (
    GPU,
    Budget,
    ClusterState,
    DeviceParams,
    InfeasiblePlanError,
    PearlMakespanModel,
    PearlParams,
    Role,
    Status,
    Worker,
    Zone,
    plan,
)
from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.planner import _classify
from pearl_sched.problem import ClassProblem, brute_force
from pearl_sched.reference import H100, H200, reference_workload
from pearl_sched.solvers import available_backends, get_backend, solve_class_problem
from pearl_sched.solvers.formulation import mode_bound
from pearl_sched.state import WorkerSize, WorkerSizes
from pearl_sched.transition import apply_actions

from .builders import BINDING_CONSTRAINTS

_SEED = int(os.environ.get("PEARL_SCHED_PROPERTY_SEED", "20261313"))
_STATES = {"highs": 150, "ortools-highs": 25}
_BRUTE_FORCE_LIMIT = 4_000
_TPS = (1, 2, 4)


def _sized(device: DeviceParams, tp: int) -> DeviceParams:
    # Test-only TP devices: per-token times fall by 0.9 per doubling short of ideal, the decode iteration's
    # fixed cost grows 20% per doubling (all-reduce), KV grows 1.2x faster than the GPUs (weights are shared).
    # Assumptions that make sizes trade off against each other; no measured figure is implied.
    doublings = int(math.log2(tp))
    efficiency = 0.9**doublings
    return device.model_copy(
        update={
            "tp": tp,
            "prefill_s_per_token": device.prefill_s_per_token / (tp * efficiency),
            "decode_per_seq_s": device.decode_per_seq_s / (tp * efficiency),
            "decode_iteration_s": device.decode_iteration_s * (1 + 0.2 * doublings),
            "kv_capacity_bytes": device.kv_capacity_bytes * tp * 1.2**doublings,
        }
    )


MODEL = PearlMakespanModel(
    PearlParams(
        devices=tuple(_sized(d, tp) for d in (H200, H100) for tp in _TPS),
        switch_overhead_s=0.0,
        kv_bandwidth_bytes_per_s=50e9,
        kv_bandwidth_per_prefill_worker=True,
        source="tests (TP2/TP4 entries made up from TP1)",
    )
)
COSTS = TransitionCosts.pearl_table3_by_tp("qwen3-8b", _TPS)


def random_sized_state(rng: np.random.Generator) -> ClusterState:
    """A random valid state with worker sizes, as the module docstring describes."""
    gpus: list[GPU] = []
    workers: list[Worker] = []
    mode = rng.choice(["colocated", "disaggregated", "none"])
    for n in range(int(rng.integers(1, 4))):
        zone = [Zone.DEDICATED, Zone.PREEMPTIBLE, Zone.OVERLAP][int(rng.choice(3, p=[0.45, 0.4, 0.15]))]
        gpu_type = "h200" if rng.random() < 0.6 else "h100"
        count = int(rng.choice([1, 2, 3, 4, 8]))
        node = [
            GPU(
                id=f"n{n}g{i}",
                node=f"n{n}",
                type=gpu_type,
                zone=zone,
                available=zone is Zone.OVERLAP or rng.random() > 0.1,
                reclaim_in_s=float(rng.choice([0.0, 900.0])) if zone is Zone.OVERLAP else None,
            )
            for i in range(count)
        ]
        gpus.extend(node)
        i = 0
        while i < count:
            tp = int(rng.choice([t for t in _TPS if t <= count - i and i % t == 0]))
            ids = tuple(g.id for g in node[i : i + tp])
            i += tp
            if zone is not Zone.OVERLAP and rng.random() < 0.25:
                continue  # free GPUs: no slot holds them
            if zone is Zone.OVERLAP:
                role, status = Role.TRAINING, Status.ACTIVE
            elif mode == "none" or rng.random() < 0.4:
                role, status = Role.DECODE, Status.INACTIVE
            elif mode == "colocated":
                role, status = Role.COLOCATED, Status.ACTIVE
            else:
                role, status = (Role.PREFILL if rng.random() < 0.4 else Role.DECODE), Status.ACTIVE
            workers.append(Worker(id=f"w{ids[0]}", gpu_ids=ids, role=role, status=status))
    largest = max(sum(1 for g in gpus if g.node == node) for node in {g.node for g in gpus})
    fitting = [t for t in _TPS if t <= largest]

    def pick() -> tuple[WorkerSize, ...]:
        chosen = [t for t in fitting if rng.random() < 0.5] or [fitting[int(rng.integers(len(fitting)))]]
        return tuple(WorkerSize(tp=t) for t in chosen)

    colocated = pick() if rng.random() < 0.6 else ()
    sizes = WorkerSizes(prefill=pick(), decode=pick(), colocated=colocated)
    batch = int(rng.choice([64, 256, 1024]))
    load = reference_workload(batch_size=batch, unfinished=int(rng.integers(1, batch + 1)))
    total = len(gpus)
    return ClusterState(
        gpus=tuple(gpus),
        workers=tuple(workers),
        workload=load,
        budget=Budget(max_gpus=int(rng.integers(1, total + 1))),
        worker_sizes=sizes,
    )


def _search_size(problem: ClassProblem) -> int:
    size = 2
    for c in problem.classes:
        k = len(c.eligible)
        size *= math.comb(c.size + k, k)
        if size > _BRUTE_FORCE_LIMIT:
            break
    return size


def _check(state: ClusterState, backend: str) -> tuple[bool, list[str]]:
    """Whether a plan came back, and the properties it broke."""
    failures: list[str] = []
    try:
        p = plan(state, MODEL, costs=COSTS, backend=backend, time_limit_s=30.0)
    except InfeasiblePlanError as exc:
        if exc.binding_constraint not in BINDING_CONSTRAINTS:
            failures.append(f"undocumented binding constraint {exc.binding_constraint!r}")
        return False, failures
    if p.gpus_used > state.budget.max_gpus:
        failures.append(f"{p.gpus_used} GPUs over the budget of {state.budget.max_gpus}")
    after = apply_actions(state, p.actions)  # raises on a GPU twice, a worker across nodes, types or zones
    sizes = state.worker_sizes
    assert sizes is not None
    index = after.gpu_index()
    serving = [w for w in after.workers if w.rollout_role is not None]
    if sum(w.tp for w in serving) != p.gpus_used:
        failures.append("the applied state serves on another number of GPUs than the plan says")
    for w in serving:
        if len({index[g].node for g in w.gpu_ids}) != 1:
            failures.append(f"{w.id} spans nodes")
        if w.size not in sizes.allowed(w.rollout_role) and index[w.gpu_ids[0]].zone is not Zone.OVERLAP:  # type: ignore[arg-type]
            failures.append(f"{w.id}: {w.size.label} is not allowed for {w.rollout_role}")
    roles = {w.id: w.rollout_role for w in after.workers}
    if any(roles.get(wid, "missing") is not role for wid, role in p.roles().items()):
        failures.append("applying the actions does not give the plan's roles")
    again = plan(after, MODEL, current=p, costs=COSTS, backend=backend, time_limit_s=30.0)
    if again.actions:
        failures.append(f"not a fixed point: {p.decision.reason!r} then {again.decision.reason!r}")
    return True, failures


def _check_brute_force(state: ClusterState, backend: str) -> tuple[bool, str | None]:
    """Whether the class problem (every slot eligible) was small enough to compare, and any mismatch."""
    classified = _classify(state, MODEL, COSTS, PolicyConfig())
    problem = classified.base.with_classes(classified.classes)
    if not problem.pools or _search_size(problem) > _BRUTE_FORCE_LIMIT:
        return False, None
    oracle = brute_force(problem)
    milp = solve_class_problem(problem, get_backend(backend), time_limit_s=30.0).solution
    for mode in problem.modes:  # the bound that lets the MILP skip a mode holds with pools too
        best_in_mode = brute_force(replace(problem, modes=(mode,)))
        if best_in_mode is not None and mode_bound(problem, mode) > best_in_mode.objective_s + 1e-9 * max(
            1.0, abs(best_in_mode.objective_s)
        ):
            return True, f"{mode.value} bound {mode_bound(problem, mode)} above its optimum {best_in_mode.objective_s}"
    if (oracle is None) != (milp is None):
        return True, f"brute force {oracle and oracle.objective_s}, MILP {milp and milp.objective_s}"
    if (
        oracle is not None
        and milp is not None
        and milp.objective_s > oracle.objective_s + 1e-9 * abs(oracle.objective_s)
    ):
        return True, f"MILP {milp.objective_s} above brute force {oracle.objective_s}"
    return True, None


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(_STATES))
def test_worker_size_properties_on_random_states(backend: str) -> None:
    if backend not in available_backends():
        pytest.skip(f"{backend} is not installed")
    rng = np.random.default_rng([_SEED, list(_STATES).index(backend)])
    failures: list[str] = []
    plans = compared = 0
    for index in range(_STATES[backend]):
        state = random_sized_state(rng)
        planned, found = _check(state, backend)
        failures += [f"state {index}: {f}" for f in found]
        plans += planned
        checked, mismatch = _check_brute_force(state, backend)
        compared += checked
        if mismatch:
            failures.append(f"state {index}: {mismatch}")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:10])
    n = _STATES[backend]
    assert 0.3 < plans / n < 0.98, f"{plans} plans of {n}: the generator should give plans and refusals"
    assert compared >= n // 4, f"only {compared} of {n} class problems were small enough for the brute force"
