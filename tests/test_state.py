"""Validation of the unified state: every rule raises a precise error, nothing is fixed silently."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from pearl_sched import GPU, Budget, ClusterState, Mode, Role, Status, Worker, Workload, Zone, plan
from pearl_sched.plans import Plan
from pearl_sched.request import PlanRequest

from .builders import MODEL, Slot, state, workload


def _with(base: ClusterState, **changes: object) -> dict[str, object]:
    data = base.model_dump(mode="json")
    data.update(changes)
    return data


def test_valid_state_round_trips_through_json() -> None:
    s = state([Slot(role=Role.PREFILL), Slot(role=Role.DECODE), Slot(Zone.OVERLAP)])
    again = ClusterState.model_validate_json(s.model_dump_json())
    assert again == s
    assert s.mode.value == "disaggregated"


def test_gpu_in_two_workers_is_rejected() -> None:
    s = state([Slot(), Slot()])
    data = _with(s)
    data["workers"][1]["gpu_ids"] = ["g000"]  # type: ignore[index]
    with pytest.raises(ValidationError, match="GPU 'g000' is in two workers: 'w000' and 'w001'"):
        ClusterState.model_validate(data)


def test_tp_group_across_nodes_is_rejected_unless_allowed() -> None:
    s = state([Slot()] * 9)  # g007 on n0, g008 on n1
    data = _with(s)
    data["workers"] = [{"id": "tp2", "gpu_ids": ["g007", "g008"], "role": "decode"}]
    with pytest.raises(ValidationError, match=r"TP group spans nodes \['n0', 'n1'\]"):
        ClusterState.model_validate(data)
    data["allow_cross_node_tp"] = True
    assert ClusterState.model_validate(data).workers[0].tp == 2


def test_disaggregated_state_that_lost_every_decode_worker_is_repaired_by_plan() -> None:
    # Preemption can take every decode worker: the state is observable, and plan() restores one.
    s = state([Slot(role=Role.PREFILL)] * 2 + [Slot()] * 14)
    assert s.mode is Mode.DISAGGREGATED
    result = plan(s, MODEL)
    assert result.colocated_workers > 0 or (result.prefill_workers >= 1 and result.decode_workers >= 1)


def test_hybrid_state_is_rejected() -> None:
    with pytest.raises(ValidationError, match="mixes colocated and disaggregated"):
        state([Slot(role=Role.PREFILL), Slot(role=Role.DECODE), Slot(role=Role.COLOCATED)])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("turns", -1.0, "greater than 0"),
        ("turns", math.nan, "finite number"),
        ("env_time_per_turn_s", math.inf, "finite number"),
        ("kv_bytes_per_token", -5.0, "greater than or equal to 0"),
        ("unfinished", 2000, "unfinished \\(2000\\) exceeds batch_size \\(1024\\)"),
    ],
)
def test_bad_workload_numbers_are_rejected(field: str, value: float, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        workload(**{field: value})


def test_unknown_fields_are_rejected_everywhere() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Budget(max_gpus=4, max_money=3)  # type: ignore[call-arg]
    s = state([Slot()])
    data = _with(s)
    data["gpus"][0]["colour"] = "green"  # type: ignore[index]
    with pytest.raises(ValidationError, match=r"gpus\.0\.colour"):
        ClusterState.model_validate(data)


def test_overlap_gpu_needs_reclaim_time_and_others_must_not_have_one() -> None:
    with pytest.raises(ValidationError, match="overlap GPU needs reclaim_in_s"):
        GPU(id="t0", node="n", type="h200", zone=Zone.OVERLAP)
    with pytest.raises(ValidationError, match="only meaningful for overlap"):
        GPU(id="d0", node="n", type="h200", zone=Zone.DEDICATED, reclaim_in_s=3.0)


def test_training_role_only_on_overlap_gpus() -> None:
    s = state([Slot()])
    data = _with(s)
    data["workers"][0]["role"] = "training"  # type: ignore[index]
    with pytest.raises(ValidationError, match="only overlap GPUs can hold the training role"):
        ClusterState.model_validate(data)


def test_unknown_gpu_and_repeated_ids_are_rejected() -> None:
    gpu = GPU(id="a", node="n", type="h200", zone=Zone.DEDICATED)
    with pytest.raises(ValidationError, match="names unknown GPU 'zz'"):
        ClusterState(
            gpus=(gpu,),
            workers=(Worker(id="w", gpu_ids=("zz",), role=Role.DECODE),),
            workload=workload(),
            budget=Budget(max_gpus=1),
        )
    with pytest.raises(ValidationError, match=r"GPU ids repeat: \['a'\]"):
        ClusterState(gpus=(gpu, gpu), workers=(), workload=workload(), budget=Budget(max_gpus=1))


def test_inactive_and_training_slots_serve_no_rollout() -> None:
    assert Worker(id="w", gpu_ids=("a",), role=Role.DECODE, status=Status.INACTIVE).rollout_role is None
    assert Worker(id="w", gpu_ids=("a",), role=Role.TRAINING, status=Status.ACTIVE).rollout_role is None
    assert Worker(id="w", gpu_ids=("a",), role=Role.PREFILL, status=Status.TRANSITIONING).rollout_role is Role.PREFILL


def test_schemas_export_as_json() -> None:
    for kind in (ClusterState, PlanRequest, Plan, Workload):
        schema = kind.model_json_schema()
        json.dumps(schema)
        assert schema["type"] == "object"
        assert schema.get("additionalProperties") is False
