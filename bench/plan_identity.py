"""Whether the working tree plans as git revision REF does: plan fingerprints over a broad set of states.

A faster planner must not change a plan: the MILP's optimum is often tied (interchangeable classes, equal costs),
and which tied configuration comes back depends on every model the solver sees and in which order, so anything
that changes a model, a start solution or a solver option can change a plan. This bench plans the same states
with REF's code (its tree unpacked with ``git archive``, this script run there) and with the working tree's, and
compares each plan's fingerprint less the solver's bookkeeping (``fp`` of bench/plan_latency.py: roles, actions,
the exact objective, the decision and its reasons and the solver status are in; the number of solves and cut
rounds, which a faster planner changes by design, are out).

States: bench/plan_latency.py's clusters at 16, 64, 256 and 1,024 GPUs (one and two GPU types, and mixed worker
sizes), at preemption hazards 0 and 2e-4/s, on the default backend and PEARL's enumeration; the three requests of
examples/; 600 random states of the planner's property test (tests/plan_states.py) and 400 random states with
worker sizes (tests/test_worker_sizes_properties.py), seeded. ``--quick`` plans fewer (up to 256 GPUs, 150 and
100 random states). ``--rank-by-predict`` plans every state with ``PolicyConfig(rank_by_predict=True)``, in both
trees (docs/formulation.md, "Ranking by predict"). Output::

    plan_identity ref=<REF> plans=<N> same=<n> strict_same=<n>
    plan_identity differs <state> worktree=<fp> ref=<fp>      (one line per plan that differs)

``strict_same`` counts plans whose whole ``Plan.fingerprint()`` (solves and rounds included) is equal too.

Usage: python bench/plan_identity.py --compare REF [--quick] [--rank-by-predict]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import plan_latency as bench

from pearl_sched import InfeasiblePlanError, PearlMakespanModel, PolicyState, plan
from pearl_sched.config import PolicyConfig
from pearl_sched.makespan import MakespanModel
from pearl_sched.request import PlanRequest
from pearl_sched.shared_data import DATA_ENV, default_data
from pearl_sched.state import ClusterState
from tests.plan_states import MODEL as RANDOM_MODEL
from tests.plan_states import random_state
from tests.test_worker_sizes_properties import COSTS as SIZED_COSTS
from tests.test_worker_sizes_properties import MODEL as SIZED_MODEL
from tests.test_worker_sizes_properties import random_sized_state

ROOT = Path(__file__).resolve().parent.parent


def fingerprints(quick: bool, rank_by_predict: bool = False) -> dict[str, list[str]]:
    """State name → [plan fingerprint less the solver's bookkeeping, full fingerprint] (or the refusal).

    With ``rank_by_predict`` every state is planned with ``PolicyConfig(rank_by_predict=True)`` (an example's own
    policy with it set).
    """
    out: dict[str, list[str]] = {}

    def run(name: str, state: ClusterState, model: MakespanModel, **options: object) -> None:
        if rank_by_predict:
            given = options.get("policy")
            policy = given if isinstance(given, PolicyConfig) else PolicyConfig()
            options["policy"] = policy.model_copy(update={"rank_by_predict": True})
        try:
            result = plan(state, model, **options)  # type: ignore[arg-type]
        except InfeasiblePlanError as exc:
            out[name] = [f"refused: {exc}"[:80], ""]
            return
        out[name] = [bench.plan_fingerprint(result), result.fingerprint()[:12]]

    hazards = (PolicyState(), PolicyState(preemption_hazard_per_s=2e-4, toggle_cost_s=30.0))
    for gpus in (16, 64, 256) if quick else (16, 64, 256, 1024):
        for pstate in hazards:
            tag = f"gpus={gpus} hazard={pstate.preemption_hazard_per_s}"
            for backend in ("auto", "enumeration"):
                for types in (1, 2):
                    run(
                        f"bench {tag} types={types} {backend}",
                        bench.cluster(gpus, types),
                        bench.MODEL,
                        policy_state=pstate,
                        backend=backend,
                    )
                run(
                    f"bench {tag} mixed {backend}",
                    bench.mixed_cluster(gpus),
                    bench.MIXED_MODEL,
                    costs=bench.MIXED.costs,
                    policy_state=pstate,
                    backend=backend,
                )
    for example in sorted((ROOT / "examples").glob("*.json")):
        request = PlanRequest.model_validate_json(example.read_text())
        for backend in ("auto", "enumeration"):
            run(
                f"example {example.name} {backend}",
                request.state,
                PearlMakespanModel(request.model),
                costs=request.costs,
                policy=request.policy,
                policy_state=request.policy_state,
                backend=backend,
            )
    rng = np.random.default_rng(12345)
    for i in range(150 if quick else 600):
        run(f"random {i}", random_state(rng, max_slots=7), RANDOM_MODEL, time_limit_s=30.0)
    rng = np.random.default_rng(777)
    for i in range(100 if quick else 400):
        run(f"sized {i}", random_sized_state(rng), SIZED_MODEL, costs=SIZED_COSTS, time_limit_s=30.0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", metavar="REF", help="the git revision to compare with")
    parser.add_argument("--quick", action="store_true", help="fewer states (module docstring)")
    parser.add_argument(
        "--rank-by-predict", action="store_true", help="plan every state with PolicyConfig(rank_by_predict=True)"
    )
    parser.add_argument("--emit", metavar="PATH", help=argparse.SUPPRESS)  # inside REF's tree: write and stop
    args = parser.parse_args()
    if args.emit:
        Path(args.emit).write_text(json.dumps(fingerprints(args.quick, args.rank_by_predict)))
        return
    if not args.compare:
        parser.error("--compare REF is required")
    with tempfile.TemporaryDirectory(prefix="plan-identity-") as scratch:
        tree = bench.unpack_revision(args.compare, Path(scratch))
        shutil.copyfile(Path(__file__), tree / "bench" / "plan_identity.py")
        emitted = Path(scratch) / "ref.json"
        command = [sys.executable, str(tree / "bench" / "plan_identity.py"), "--emit", str(emitted)]
        env = {**os.environ, DATA_ENV: str(default_data())}
        try:
            options = (["--quick"] if args.quick else []) + (["--rank-by-predict"] if args.rank_by_predict else [])
            subprocess.run(command + options, cwd=tree, env=env, check=True)
        except subprocess.CalledProcessError as exc:
            sys.exit(f"--compare {args.compare}: its run failed with exit status {exc.returncode}")
        theirs = json.loads(emitted.read_text())
    ours = fingerprints(args.quick, args.rank_by_predict)
    differs = [name for name in ours if ours[name][0] != theirs.get(name, [None])[0]]
    strict = sum(1 for name in ours if ours[name][1] == theirs.get(name, [None, None])[1])
    suffix = " ranking=predict" if args.rank_by_predict else ""
    same = len(ours) - len(differs)
    print(f"plan_identity ref={args.compare} plans={len(ours)} same={same} strict_same={strict}{suffix}")
    for name in differs:
        print(f"plan_identity differs {name} worktree={ours[name][0]} ref={theirs.get(name, ['missing'])[0]}")


if __name__ == "__main__":
    main()
