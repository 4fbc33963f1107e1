"""``PolicyConfig.mode_by_predict``: on the surrogate's path, each solve's mode checked by the model's predict.

On by default (the default is absent from the policy's JSON, so no digest moved when it was introduced); it takes
another mode's surrogate optimum only where a memory-aware model's ``predict`` says it is faster, and changes nothing
where ``predict`` agrees with the surrogate or the model is PEARL's (whose ``predict`` is its surrogate).
"""

from __future__ import annotations

import pytest

from pearl_sched import Mode, Role, plan
from pearl_sched.config import PolicyConfig
from pearl_sched.makespan import PoolCapacity
from tests.builders import MODEL, Slot, state, workload
from tests.test_rank_by_predict import FakeColocatedPenalty

CHECKED = PolicyConfig()
OFF = PolicyConfig(mode_by_predict=False)
STATE = state([Slot(role=Role.COLOCATED) for _ in range(6)], load=workload())


def _same(a: object, b: object) -> bool:
    return (a.roles(), a.objective_s, a.decision, a.actions) == (b.roles(), b.objective_s, b.decision, b.actions)  # type: ignore[attr-defined]


def test_on_by_default_and_absent_from_the_policy_json() -> None:
    assert PolicyConfig().mode_by_predict is True
    assert "mode_by_predict" not in PolicyConfig().model_dump_json()
    assert '"mode_by_predict":false' in OFF.model_dump_json()


def test_takes_the_other_mode_where_predict_says_it_is_faster() -> None:
    """The surrogate keeps colocated; predict makes colocated 3x slower: the check switches to the PD optimum."""
    fake = FakeColocatedPenalty(MODEL, 3.0, memory_aware=True)
    default = plan(STATE, fake, policy=OFF)
    assert default.mode is Mode.COLOCATED
    checked = plan(STATE, fake, policy=CHECKED)
    assert checked.mode is Mode.DISAGGREGATED
    assert checked.makespan.total_s < default.makespan.total_s
    # The PD configuration is the surrogate's PD optimum: here (PD's predict is PEARL's, the surrogate's own) the
    # fastest split of the six workers.
    best = min(
        (
            fake.predict(STATE.workload, PoolCapacity(mode=Mode.DISAGGREGATED, prefill=float(p), decode=float(6 - p)))
            for p in range(1, 6)
        ),
        key=lambda b: b.total_s,
    )
    assert checked.makespan.total_s == pytest.approx(best.total_s, rel=1e-9)


def test_nothing_changes_where_predict_agrees_or_the_model_is_pearls() -> None:
    agreeing = FakeColocatedPenalty(MODEL, 1.0, memory_aware=True)  # predict is the surrogate
    assert _same(plan(STATE, agreeing, policy=CHECKED), plan(STATE, agreeing, policy=OFF))
    penalised = FakeColocatedPenalty(MODEL, 3.0, memory_aware=False)  # not memory aware: no check
    assert _same(plan(STATE, penalised, policy=CHECKED), plan(STATE, penalised, policy=OFF))
    assert _same(plan(STATE, MODEL, policy=CHECKED), plan(STATE, MODEL, policy=OFF))
