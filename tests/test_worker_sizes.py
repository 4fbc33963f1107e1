"""Worker sizes (docs/state.md, "Worker sizes"; docs/formulation.md, "Worker sizes").

The state says which sizes each role may have; plan() regroups a node's GPUs into workers of those sizes. Checked
here: bad sizes are refused with one line naming the size and the reason; a state without sizes serialises and
plans as before, and one whose only allowed size is the current one plans the same; the mixed-size example plans
on every backend with allowed sizes on one node each, and re-plans to nothing; the node-block rows are exactly
the packing condition; the TP-dependent start costs reproduce PEARL Table 3 at TP2.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from pearl_sched import ClusterState, PearlMakespanModel, Role, plan
from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.planner import _classify
from pearl_sched.profiles import shipped_config
from pearl_sched.request import PlanRequest
from pearl_sched.solvers import available_backends
from pearl_sched.state import ModelLimits, WorkerSize, WorkerSizes, Zone
from pearl_sched.transition import _pack, apply_actions, chosen_sizes

ROOT = Path(__file__).resolve().parent.parent
MIXED = PlanRequest.model_validate_json((ROOT / "examples" / "mixed-sizes.json").read_text())
MIXED_MODEL = PearlMakespanModel(MIXED.model)


def _with_sizes(state: ClusterState, sizes: WorkerSizes | None) -> ClusterState:
    return ClusterState.model_validate({**state.model_dump(), "worker_sizes": sizes})


# -- bad input -------------------------------------------------------------------------------------------------


def _qwen30(gpu_memory_bytes: dict[str, float]) -> ModelLimits:
    config = shipped_config("qwen3-30b-a3b")
    return ModelLimits(
        name=config.name,
        attention_heads=config.num_attention_heads,
        weight_bytes=float(config.parameter_count() * 2),
        gpu_memory_bytes=gpu_memory_bytes,
    )


def test_a_tp_that_does_not_divide_the_attention_heads_is_refused() -> None:
    sizes = WorkerSizes(prefill=(WorkerSize(tp=3),), decode=(WorkerSize(tp=3),), model=_qwen30({"h200": 141e9}))
    state = MIXED.state.model_copy(
        update={"gpus": tuple(g.model_copy(update={"type": "h200"}) for g in MIXED.state.gpus)}
    )
    with pytest.raises(
        ValidationError, match=r"worker_sizes.prefill: size tp3: TP3 does not divide qwen3-30b-a3b's 32"
    ):
        _with_sizes(state, sizes)


def test_a_size_larger_than_every_node_is_refused() -> None:
    sizes = WorkerSizes(prefill=(1,), decode=(2, 16))  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"worker_sizes.decode: size tp16 needs more GPUs than a node holds"):
        _with_sizes(MIXED.state, sizes)


def test_a_worker_too_small_for_the_weights_is_refused() -> None:
    # 61 GB of bf16 weights do not fit 0.85 of one 40 GB GPU (an A100-40GB-like type), whatever the model.
    limits = _qwen30({"h200": 40e9, "h100": 40e9})
    sizes = WorkerSizes(prefill=(1, 2), decode=(2, 4), model=limits)  # type: ignore[arg-type]
    with pytest.raises(
        ValidationError, match=r"worker_sizes.prefill: size tp1 is too small for qwen3-30b-a3b's 61.1 GB"
    ):
        _with_sizes(MIXED.state, sizes)


def test_sizes_that_do_not_divide_one_another_or_allow_no_mode_are_refused() -> None:
    with pytest.raises(ValidationError, match="TP2 and TP3 do not divide one another"):
        WorkerSizes(prefill=(2,), decode=(3,))  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="allows no mode"):
        WorkerSizes(prefill=(1,))  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="dp=3 does not divide tp"):
        WorkerSize(tp=4, dp=3)


def test_the_cli_refuses_a_bad_size_with_one_line(tmp_path: Path) -> None:
    data = json.loads((ROOT / "examples" / "mixed-sizes.json").read_text())
    data["state"]["worker_sizes"]["decode"] = [2, 4, 8, 16]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    result = subprocess.run(
        [sys.executable, "-m", "pearl_sched.cli", "plan", str(path)], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "size tp16 needs more GPUs than a node holds" in lines[0]
    assert "Traceback" not in result.stderr


# -- one size: as before ---------------------------------------------------------------------------------------


def test_a_state_without_sizes_serialises_as_before() -> None:
    request = PlanRequest.model_validate_json((ROOT / "examples" / "running.json").read_text())
    dumped = request.state.model_dump_json()
    assert "worker_sizes" not in dumped and '"dp"' not in dumped
    assert "preparation_s_by_tp" not in request.costs.model_dump_json()
    sized = MIXED.state.model_dump_json()
    assert ClusterState.model_validate_json(sized).worker_sizes == MIXED.state.worker_sizes


@pytest.mark.parametrize("backend", ["highs", "enumeration"])
@pytest.mark.parametrize("name", ["initial", "running"])
def test_allowing_only_the_current_size_plans_as_without_sizes(name: str, backend: str) -> None:
    request = PlanRequest.model_validate_json((ROOT / "examples" / f"{name}.json").read_text())
    model = PearlMakespanModel(request.model)
    sized = _with_sizes(request.state, WorkerSizes(prefill=(1,), decode=(1,), colocated=(1,)))  # type: ignore[arg-type]
    without = plan(request.state, model, backend=backend, costs=request.costs, policy=request.policy)
    within = plan(sized, model, backend=backend, costs=request.costs, policy=request.policy)
    assert (within.ratio, within.objective_s) == (without.ratio, without.objective_s)
    assert within.actions == without.actions and within.assignment == without.assignment


# -- the mixed-size example -------------------------------------------------------------------------------------


def _check_sized_plan(
    state: ClusterState, result: object, model: PearlMakespanModel, costs: TransitionCosts, backend: str = "highs"
) -> None:
    """Budget, one node and type per worker, allowed sizes, actions reach the target, re-planning asks nothing."""
    p = result
    after = apply_actions(state, p.actions)  # type: ignore[attr-defined]  # validates: no GPU twice, one node
    index = after.gpu_index()
    serving = [w for w in after.workers if w.rollout_role is not None]
    assert sum(w.tp for w in serving) == p.gpus_used <= state.budget.max_gpus  # type: ignore[attr-defined]
    sizes = state.worker_sizes
    assert sizes is not None
    for w in serving:
        assert len({index[g].node for g in w.gpu_ids}) == 1 and len({index[g].type for g in w.gpu_ids}) == 1
        assert w.size in sizes.allowed(w.rollout_role), f"{w.id}: {w.size.label} not allowed for {w.rollout_role}"
    roles = {w.id: w.rollout_role for w in after.workers}
    assert all(roles[wid] is role for wid, role in p.roles().items())  # type: ignore[attr-defined]
    used = [g for w in after.workers for g in w.gpu_ids]
    assert len(used) == len(set(used))
    again = plan(after, model, current=p, costs=costs, backend=backend)  # type: ignore[arg-type]
    assert not again.actions, again.decision.reason


@pytest.mark.parametrize("backend", [*available_backends(), "enumeration"])
def test_the_mixed_size_example_plans_allowed_sizes_on_every_backend(backend: str) -> None:
    state = MIXED.state
    p = plan(state, MIXED_MODEL, backend=backend, costs=MIXED.costs)
    _check_sized_plan(state, p, MIXED_MODEL, MIXED.costs, backend)
    chosen = chosen_sizes(state, p.actions)
    assert set(chosen) == {Role.PREFILL, Role.DECODE}
    if backend != "enumeration":  # the MILP regroups: more than one size is in use, on both GPU types
        labels = {label for counter in chosen.values() for label in counter}
        assert len({label.split("/")[1] for label in labels}) >= 2
        assert {label.split("/")[0] for label in labels} == {"h100", "h200"}
        reference = plan(state, MIXED_MODEL, backend="highs", costs=MIXED.costs)
        assert p.objective_s == pytest.approx(reference.objective_s, rel=1e-9)


def test_plan_cli_prints_the_chosen_sizes() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pearl_sched.cli", "plan", "examples/mixed-sizes.json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    line = next(x for x in result.stdout.splitlines() if x.strip().startswith("worker sizes:"))
    assert "prefill" in line and "decode" in line and "h100/tp1" in line


def test_new_workers_carry_their_attention_dp_to_the_actions() -> None:
    sizes = MIXED.state.worker_sizes
    assert sizes is not None
    dp_sizes = sizes.model_copy(update={"decode": (WorkerSize(tp=8, dp=8),), "colocated": ()})
    state = _with_sizes(MIXED.state, dp_sizes)
    p = plan(state, MIXED_MODEL, costs=MIXED.costs)
    decode = [a for a in p.actions if a.to_role is Role.DECODE and a.from_role is None]
    assert decode and all(a.tp == 8 and a.dp == 8 for a in decode)
    after = apply_actions(state, p.actions)
    assert all(w.dp == 8 for w in after.workers if w.rollout_role is Role.DECODE)


# -- the node-block rows and costs ------------------------------------------------------------------------------


def test_node_block_rows_are_exactly_the_packing_condition() -> None:
    """For sizes 1, 2, 4 and any node capacities: the rows hold iff an aligned largest-first packing exists."""
    rng = np.random.default_rng(13)
    for _ in range(400):
        capacities = [int(c) for c in rng.integers(0, 9, size=int(rng.integers(1, 4)))]
        nodes = {f"n{i}": tuple(f"n{i}g{j}" for j in range(c)) for i, c in enumerate(capacities)}
        counts = {tp: int(rng.integers(0, 5)) for tp in (1, 2, 4)}
        items = [(tp, 1, Role.DECODE) for tp, n in counts.items() for _ in range(n)]
        rows = all(
            sum(tp * n for tp, n in counts.items() if tp >= block) <= block * sum(c // block for c in capacities)
            for block in (1, 2, 4)
        )
        packed = _pack(nodes, set(), items)
        assert (packed is not None) == rows, (capacities, counts)
        if packed is not None:
            taken = [g for gpus, _, _ in packed for g in gpus]
            assert len(taken) == len(set(taken))
            assert all(len({g.split("g")[0] for g in gpus}) == 1 for gpus, _, _ in packed)


def test_the_formulation_names_the_node_block_rows() -> None:
    from pearl_sched.solvers.formulation import build_model

    classified = _classify(MIXED.state, MIXED_MODEL, MIXED.costs, PolicyConfig())
    model, _ = build_model(classified.base.with_classes(classified.classes), [])
    names = [n for n in model.row_names if n.startswith("node_blocks[")]
    assert "node_blocks[dedicated|h200,tp8]" in names and "node_blocks[preemptible|h100,tp1]" in names
    pool = next(p for p in classified.base.pools if p.key == "dedicated|h200")
    assert dict(pool.block_gpus) == {1: 16, 2: 16, 4: 16, 8: 16}  # two H200 nodes of 8


def test_tp_dependent_preparation_reproduces_table3_at_tp2() -> None:
    for name, table in (("qwen3-8b", 56.29), ("qwen3-30b-a3b", 67.06)):
        costs = TransitionCosts.pearl_table3_by_tp(name)  # type: ignore[arg-type]
        assert costs.preparation_for(2) == pytest.approx(table, abs=0.01)
        times = [costs.preparation_for(tp) for tp in (1, 2, 4, 8)]
        assert times == sorted(times, reverse=True)  # a smaller weight shard per GPU loads faster
        assert costs.restart_for(2) == pytest.approx(costs.restart_s, abs=0.01)
    assert TransitionCosts().preparation_for(4) == TransitionCosts().preparation_s


def test_regrouping_replaces_the_slots_whose_gpus_it_takes() -> None:
    p = plan(MIXED.state, MIXED_MODEL, costs=MIXED.costs)
    after = apply_actions(MIXED.state, p.actions)
    before_ids = {w.id for w in MIXED.state.workers}
    new = [w for w in after.workers if w.id not in before_ids]
    assert new, "the example regroups"
    for w in new:  # every GPU of a new worker left the slot that held it
        holders = [old.id for old in MIXED.state.workers if set(old.gpu_ids) & set(w.gpu_ids)]
        assert all(h not in {x.id for x in after.workers} for h in holders)


def test_a_gpu_no_slot_holds_becomes_a_worker_only_with_sizes() -> None:
    base = MIXED.state
    free = [g for g in base.gpus if g.zone is Zone.PREEMPTIBLE]
    assert not {g.id for g in free} & {gid for w in base.workers for gid in w.gpu_ids}
    free_ids = {g.id for g in free}
    without = plan(_with_sizes(base, None), MIXED_MODEL, costs=MIXED.costs)
    assert not any(set(a.gpu_ids) & free_ids for a in without.actions)
    p = plan(base, MIXED_MODEL, costs=MIXED.costs)
    assert any(set(a.gpu_ids) <= free_ids for a in p.actions if a.from_role is None)


def test_gpu_type_is_per_worker_in_the_sized_classes() -> None:
    classified = _classify(MIXED.state, MIXED_MODEL, MIXED.costs, PolicyConfig())
    for cls in classified.classes:
        assert cls.gpu_type in ("h100", "h200")
        if cls.is_new:
            assert cls.pool is not None and cls.pool.split("|")[1] == cls.gpu_type
    assert {c.tp for c in classified.classes if c.is_new} == {1, 2, 4, 8}


# -- adapters ---------------------------------------------------------------------------------------------------


def test_a_worker_with_attention_dp_launches_with_dp_attention() -> None:
    from pearl_sched.adapters.launcher import FAKE, ServerSpec, server_argv

    spec = ServerSpec(
        slot="w-a0-tp4dp4",
        role="decode",
        model_path="m",
        port=30000,
        gpu_ids=(0, 1, 2, 3),
        dp=4,
        sglang_version="0.5.21",
    )
    argv = server_argv(spec, FAKE)
    assert argv[argv.index("--tp-size") + 1] == "4" and argv[argv.index("--dp-size") + 1] == "4"
    assert "--enable-dp-attention" in argv
    newest = server_argv(dataclasses.replace(spec, sglang_version="0.5.23"), FAKE)  # 0.5.23 deprecates that spelling
    assert newest[newest.index("--attn-dp-size") + 1] == "4" and "--enable-dp-attention" not in newest
    plain = server_argv(ServerSpec(slot="w", role="decode", model_path="m", port=30000, gpu_ids=(0, 1)), FAKE)
    assert "--dp-size" not in plain and "--enable-dp-attention" not in plain


def test_a_dp_that_does_not_divide_the_gpus_is_refused() -> None:
    from pearl_sched.adapters.http import InvalidArgumentError
    from pearl_sched.adapters.launcher import ServerSpec

    with pytest.raises(InvalidArgumentError, match="dp=3 must divide its 4 GPUs"):
        ServerSpec(slot="w", role="decode", model_path="m", port=30000, gpu_ids=(0, 1, 2, 3), dp=3)


def test_serving_workers_at_a_size_their_role_no_longer_allows_are_resized() -> None:
    from .test_worker_sizes_properties import COSTS as SIZED_COSTS
    from .test_worker_sizes_properties import MODEL as SIZED_MODEL

    request = PlanRequest.model_validate_json((ROOT / "examples" / "running.json").read_text())
    state = _with_sizes(request.state, WorkerSizes(prefill=(1,), decode=(2,)))  # type: ignore[arg-type]
    assert any(w.rollout_role is Role.DECODE and w.tp == 1 for w in state.workers)
    p = plan(state, SIZED_MODEL, costs=SIZED_COSTS, policy=request.policy)
    assert "resize: " in p.decision.reason
    _check_sized_plan(state, p, SIZED_MODEL, SIZED_COSTS)
    after = apply_actions(state, p.actions)
    assert all(w.tp == 2 for w in after.workers if w.rollout_role is Role.DECODE)


def test_survivors_that_fragment_the_nodes_are_restarted_on_a_fresh_layout() -> None:
    from pearl_sched import GPU, Budget, Status, Worker
    from pearl_sched.problem import ROLES
    from pearl_sched.transition import assign_slots, build_actions, place_new_workers

    from .test_worker_sizes_properties import COSTS as SIZED_COSTS
    from .test_worker_sizes_properties import MODEL as SIZED_MODEL

    # Two nodes of two H200s; a decode TP1 worker serves on one GPU of each. One TP2 prefill worker fits the
    # node-block rows (2 GPUs in TP>=2 workers, 4 available) but no node has two free GPUs while both survivors
    # stay: the pool is packed afresh and one survivor restarts beside the other.
    gpus = tuple(GPU(id=f"{n}{i}", node=n, type="h200", zone=Zone.DEDICATED) for n in ("a", "b") for i in range(2))
    workers = (
        Worker(id="wa0", gpu_ids=("a0",), role=Role.DECODE, status=Status.ACTIVE),
        Worker(id="wb0", gpu_ids=("b0",), role=Role.DECODE, status=Status.ACTIVE),
    )
    state = ClusterState(
        gpus=gpus,
        workers=workers,
        workload=MIXED.state.workload.model_copy(update={"kv_bytes_per_token": 131072.0}),
        budget=Budget(max_gpus=4),
        worker_sizes=WorkerSizes(prefill=(2,), decode=(1,)),  # type: ignore[arg-type]
    )
    classified = _classify(state, SIZED_MODEL, SIZED_COSTS, PolicyConfig())
    problem = classified.base.with_classes(classified.classes)
    counts = tuple(
        (0, c.size, 0) if c.current_role is Role.DECODE else (1, 0, 0) if c.is_new and c.tp == 2 else (0, 0, 0)
        for c in problem.classes
    )
    assert len(counts[0]) == len(ROLES)
    target = assign_slots(problem, counts, {w.id: w for w in state.workers})
    assert classified.layouts is not None
    regrouping = place_new_workers(state, problem, counts, target, classified.layouts)
    assert regrouping.repacked_pools == ("dedicated|h200",)
    for old in regrouping.dissolved:
        target.pop(old)
    target.update({w.worker_id: w.role for w in regrouping.new_workers})
    after = apply_actions(state, build_actions(state, target, {}, regrouping))
    serving = sorted((w.rollout_role.value, w.tp) for w in after.workers if w.rollout_role is not None)  # type: ignore[union-attr]
    assert serving == [("decode", 1), ("decode", 1), ("prefill", 2)]
    index = after.gpu_index()
    assert all(len({index[g].node for g in w.gpu_ids}) == 1 for w in after.workers)
    assert len({w.id for w in after.workers}) == len(after.workers)


def test_amortised_start_costs_keep_the_regroup_tie_breaker() -> None:
    """At share 0 (a hazard of 0: the GPUs stay) starting an idle slot costs nothing, and a new worker on regrouped
    GPUs still costs the tie-breaker more, so the solver never regroups where an idle slot of the size would do."""
    from pearl_sched.makespan import MakespanTerms, PoolTerms
    from pearl_sched.planner import _REGROUP_TIE_S, _amortised
    from pearl_sched.problem import ROLES, ClassProblem, SlotClass

    def start_class(key: str, new_workers: int | None, start_s: float) -> SlotClass:
        return SlotClass(
            key=key,
            slot_ids=() if new_workers else ("idle-0",),
            gpu_type="h200",
            tp=2,
            zone=Zone.PREEMPTIBLE,
            node_group="*",
            current_role=None,
            eligible=frozenset(ROLES),
            weight=dict.fromkeys(ROLES, 1.0),
            kv_bytes=1.0,
            prefill_tokens_per_s=1.0,
            cost={None: 0.0, **dict.fromkeys(ROLES, start_s)},
            pauses_admission=True,
            new_workers=new_workers,
        )

    idle = start_class("idle", None, 14.1)
    new = start_class("new", 1, 14.1 + _REGROUP_TIE_S)
    terms = MakespanTerms(
        prefill=PoolTerms(fixed_s=1, work_s=10),
        decode=PoolTerms(fixed_s=2, work_s=30),
        colocated=PoolTerms(fixed_s=4, work_s=40),
        environment_s=0,
    )
    amortised = _amortised(ClassProblem((idle, new), terms, 1.0, 2, 0.0, 0.0, 11.05), 0.0)
    by_key = {c.key: c for c in amortised.classes}
    for role in ROLES:
        assert by_key["idle"].cost[role] == 0.0
        assert by_key["new"].cost[role] == pytest.approx(_REGROUP_TIE_S)
    assert by_key["new"].cost[None] == 0.0  # ending with no role costs nothing, whatever the share
    assert amortised.admission_pause_s == 0.0
    half = {c.key: c for c in _amortised(ClassProblem((idle, new), terms, 1.0, 2, 0.0, 0.0, 11.05), 0.5).classes}
    assert half["new"].cost[Role.DECODE] - half["idle"].cost[Role.DECODE] == pytest.approx(_REGROUP_TIE_S)
