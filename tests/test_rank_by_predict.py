"""``PolicyConfig.rank_by_predict``: plan() ranks by the model's own predict (docs/formulation.md).

On by default where the state declares worker sizes, off otherwise; ``True`` / ``False`` force it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pearl_sched import InfeasiblePlanError, Mode, PearlMakespanModel, Role, plan
from pearl_sched.config import PolicyConfig
from pearl_sched.makespan import MakespanBreakdown, MakespanTerms, PoolCapacity
from pearl_sched.plans import Plan
from pearl_sched.request import PlanRequest
from pearl_sched.state import Workload
from pearl_sched.transition import apply_actions
from tests.builders import MODEL, Slot, state, workload

RANKED = PolicyConfig(rank_by_predict=True)
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


class FakeColocatedPenalty:
    """A fake model: PEARL's model, except that ``predict`` makes colocated ``factor`` times slower.

    Its surrogate (``terms``) is PEARL's, so surrogate and predict disagree on colocated configurations.
    """

    def __init__(self, base: PearlMakespanModel, factor: float, *, memory_aware: bool = False) -> None:
        self.base = base
        self.factor = factor
        self.memory_aware = memory_aware
        self.name = "fake-colocated-penalty"

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "factor": self.factor, "base": self.base.describe()}

    def capacity_weight(self, workload: Workload, gpu_type: str, tp: int, role: Role) -> float:
        return self.base.capacity_weight(workload, gpu_type, tp, role)

    def kv_capacity_bytes(self, gpu_type: str, tp: int) -> float:
        return self.base.kv_capacity_bytes(gpu_type, tp)

    def prefill_tokens_per_s(self, gpu_type: str, tp: int) -> float:
        return self.base.prefill_tokens_per_s(gpu_type, tp)

    def terms(self, workload: Workload) -> MakespanTerms:
        return self.base.terms(workload)

    def predict(self, workload: Workload, capacity: PoolCapacity) -> MakespanBreakdown:
        out = self.base.predict(workload, capacity)
        if capacity.mode is Mode.COLOCATED:
            return out.model_copy(update={"total_s": out.total_s * self.factor})
        return out


def _serving(n: int, role: Role) -> list[Slot]:
    return [Slot(role=role) for _ in range(n)]


def test_default_policy_dumps_as_before() -> None:
    """The default (None) leaves PolicyConfig's JSON, and so every plan's input digest, as it was."""
    assert "rank_by_predict" not in PolicyConfig().model_dump_json()
    assert '"rank_by_predict":true' in RANKED.model_dump_json()
    assert '"rank_by_predict":false' in PolicyConfig(rank_by_predict=False).model_dump_json()


@pytest.mark.parametrize(("name", "sized"), [("mixed-sizes.json", True), ("running.json", False)])
def test_default_ranks_by_predict_only_where_worker_sizes_are_declared(name: str, sized: bool) -> None:
    """The default ranks like ``True`` on a state with worker sizes and like ``False`` on one without; a ranked
    answer carries no proven bound, the MILP's does."""
    request = PlanRequest.model_validate_json((EXAMPLES / name).read_text())
    assert request.policy.rank_by_predict is None
    assert (request.state.worker_sizes is not None) is sized
    model = PearlMakespanModel(request.model)

    def planned(rank_by_predict: bool | None) -> Plan:
        policy = request.policy.model_copy(update={"rank_by_predict": rank_by_predict})
        return plan(request.state, model, costs=request.costs, policy=policy)

    default, on, off = planned(None), planned(True), planned(False)
    assert on.solver.bound_s is None and off.solver.bound_s is not None
    same = on if sized else off
    assert default.solver.bound_s == same.solver.bound_s
    assert (default.roles(), default.objective_s, default.decision) == (same.roles(), same.objective_s, same.decision)


def test_ranks_by_predict_where_the_surrogate_disagrees() -> None:
    """Surrogate says colocated, predict says colocated is 3x slower: only the option follows predict."""
    fake = FakeColocatedPenalty(MODEL, 3.0)
    st = state(_serving(6, Role.COLOCATED), load=workload())
    default = plan(st, fake)
    assert default.mode is Mode.COLOCATED  # the surrogate (PEARL's terms) keeps colocated
    ranked = plan(st, fake, policy=RANKED)
    assert ranked.mode is Mode.DISAGGREGATED
    assert ranked.makespan.total_s < default.makespan.total_s
    # No disaggregated split of the six workers is predicted faster than the one chosen.
    best = min(
        fake.predict(
            st.workload,
            PoolCapacity(mode=Mode.DISAGGREGATED, prefill=float(p), decode=float(6 - p)),
        ).total_s
        for p in range(1, 6)
    )
    assert ranked.makespan.total_s == pytest.approx(best, rel=1e-9)


def test_agrees_with_the_surrogate_where_predict_is_the_surrogate() -> None:
    """For PEARL's model (predict is its own terms) the option chooses the same configuration."""
    st = state(_serving(8, Role.COLOCATED), load=workload())
    default, ranked = plan(st, MODEL), plan(st, MODEL, policy=RANKED)
    assert (ranked.mode, ranked.ratio) == (default.mode, default.ratio)
    assert ranked.makespan.total_s == pytest.approx(default.makespan.total_s, rel=1e-12)


def test_kv_constraint_dropped_only_for_a_memory_aware_model() -> None:
    """A batch whose KV no configuration holds: infeasible by default, planned when the model is memory-aware."""
    st = state(_serving(2, Role.COLOCATED), load=workload())
    kv_bytes = 2 * MODEL.kv_capacity_bytes("h200", 1)
    big = st.model_copy(
        update={
            "workload": st.workload.model_copy(
                update={"unfinished": int(kv_bytes / st.workload.kv_bytes_per_trajectory) + 1}
            )
        }
    )
    with pytest.raises(InfeasiblePlanError) as refused:
        plan(big, FakeColocatedPenalty(MODEL, 1.0, memory_aware=True))
    assert refused.value.binding_constraint == "kv_capacity"
    with pytest.raises(InfeasiblePlanError):
        plan(big, FakeColocatedPenalty(MODEL, 1.0, memory_aware=False), policy=RANKED)
    planned = plan(big, FakeColocatedPenalty(MODEL, 1.0, memory_aware=True), policy=RANKED)
    assert planned.gpus_used == 2


@pytest.mark.parametrize("name", ["initial.json", "running.json", "mixed-sizes.json"])
def test_examples_settle_and_match_for_pearls_model(name: str) -> None:
    """On the examples (PEARL's model: predict is its terms) the option plans what the default plans, and its
    plan's result re-plans to no actions."""
    request = PlanRequest.model_validate_json((EXAMPLES / name).read_text())
    model = PearlMakespanModel(request.model)
    default = plan(request.state, model, costs=request.costs)
    ranked = plan(request.state, model, costs=request.costs, policy=RANKED)
    assert ranked.roles() == default.roles()
    assert ranked.objective_s == pytest.approx(default.objective_s, rel=1e-9)
    again = plan(apply_actions(request.state, ranked.actions), model, costs=request.costs, policy=RANKED)
    assert again.actions == ()
