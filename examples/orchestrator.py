"""Calling plan() from an orchestrator: one decision per rollout step (run from the repository root).

The loop below is what an RL framework's rollout controller does around pearl_sched: observe the cluster,
plan, carry the actions out (here: ``apply_actions``, the state an adapter would report afterwards), and
plan again at the next step with the previous plan as ``current``.
"""

from __future__ import annotations

from pathlib import Path

from pearl_sched import PearlMakespanModel, apply_actions, plan
from pearl_sched.request import PlanRequest

request = PlanRequest.model_validate_json(Path("examples/running.json").read_text())
model = PearlMakespanModel(request.model)
state = request.state

current = None
for step in range(3):
    decision = plan(state, model, current=current, costs=request.costs, policy=request.policy)
    print(f"step {step}: {decision.ratio:>6} {decision.decision.kind.value:>8}  {len(decision.actions)} action(s)")
    print(f"         {decision.decision.reason}")
    for action in decision.actions:  # an adapter would execute these, in this order
        print(f"         {action.kind.value:>7} {action.worker_id}: {action.from_role} -> {action.to_role}")
    state = apply_actions(state, decision.actions)
    current = decision
    # Half the remaining trajectories finish before the next step.
    workload = state.workload.model_copy(update={"unfinished": state.workload.unfinished // 2})
    state = state.model_copy(update={"workload": workload})
