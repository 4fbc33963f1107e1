"""plan() latency, side by side for every installed backend and PEARL's enumeration.

Clusters of 16 … 4,096 GPUs, one or two GPU types (H200 and H100, TP1 workers), in a running state: half the
dedicated and in-use preemptible GPUs serving a 1:3 P:D split, 10% of the preemptible GPUs just preempted,
idle preemptible GPUs waiting to join and training GPUs lendable for 15 minutes; four node groups; the batch
grows with the cluster (16 trajectories per GPU). Each line:

    plan_latency gpus=<N> types=<1|2> sizes=<worker sizes> backend=<name> p50_ms=<x> p95_ms=<y>
        cpu_p50_ms=<z> objective=<J> plan=<ratio> fp=<plan fingerprint>

``cpu_p50_ms`` is the process CPU time of the call (all its threads): on a machine shared with other jobs it
moves far less than the wall time.

``sizes=1`` is the case above (every slot keeps its size; plan() chooses roles). The mixed-size case
(``sizes=P1/2/4,D2/4/8,C2/4/8``, two GPU types) lets plan() regroup each node's GPUs into workers of three sizes
per role (docs/formulation.md, "Worker sizes"): Qwen3-30B-A3B with the per-(GPU, TP) parameters, model limits
and TP-dependent costs of ``examples/mixed-sizes.json``; the same zones and node groups, serving GPUs in TP2
workers, idle preemptible GPUs in TP1 slots, training GPUs in TP8 slots. PEARL's enumeration keeps its own action
space there (one size per slot, as in the paper's search), so its objective is no longer the same problem's.

``backend=auto`` is plan() with its default settings (the measured default backend). ``fp`` is the first 12 hex
digits of the plan's fingerprint without the solver's bookkeeping (``Plan.fingerprint()`` less the number of
solves and cut rounds, which a faster planner changes by design): everything decided — roles, actions, the
exact objective, the decision and its reasons, the solver status — is in it.

plan()'s default policy ranks the mixed-size case by the model's own predict and the ``sizes=1`` cases by the
MILP's surrogate (docs/formulation.md, "Ranking by predict"). ``--rank-by-predict`` runs every case with
``PolicyConfig(rank_by_predict=True)``; its lines end in ``ranking=predict``. ``--rank-by-surrogate`` runs every
case with ``PolicyConfig(rank_by_predict=False)`` (the MILP's surrogate ranks, also with worker sizes); its lines
end in ``ranking=surrogate``. With ``--compare`` the revision runs with the same option, so the option's cost
before and after a change comes from one run, with its plans compared.

``--model improved`` runs the mixed-size case with the improved predictor
(:class:`~pearl_sched.makespan_improved.ImprovedMakespanModel` on the example's PEARL parameters, each non-reference
size's own KV pool its device's H_max/K, SGLang's other defaults) in place of PEARL's; the ``sizes=1`` cases keep
PEARL's. Its lines end in ``model=improved`` (REF's too with ``--compare``).

``--compare REF`` measures plan() at git revision REF too (its tree unpacked to a temporary folder with
``git archive``, this bench run there against REF's code for the same cases), so before and after come from one
run under one load: each case's line for the working tree (``code=worktree``) is followed by REF's
(``code=<REF>``), and a last line counts the cases whose plans are the same (``plan_latency_compare``).

``--breakdown`` adds, after each case on the default backend, where a call's CPU time goes (the mean over the
repeats), the solver's share measured around each HiGHS solve (model conversion, ``passModel`` and ``run``)::

    plan_latency_breakdown gpus=<N> types=<1|2> sizes=<worker sizes> milps=<MILPs per call> highs_runs=<n>
        highs_cpu_ms=<x> largest_run_ms=<y> other_cpu_ms=<z> cpu_ms=<total>

``other_cpu_ms`` is everything else: classifying slots, PEARL's enumeration as each MILP's start, writing the
models, placing workers, building the plan. It is the most a faster planner around the same MILPs could save.

Usage: python bench/plan_latency.py [--sizes 16,64,...] [--repeats 7] [--backends highs,cpsat,...]
    [--worker-sizes one,mixed] [--compare REF] [--rank-by-predict | --rank-by-surrogate] [--breakdown]
    [--model pearl|improved]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pearl_sched import GPU, Budget, ClusterState, PearlMakespanModel, Role, Status, Worker, Zone, plan
from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.makespan import MakespanModel
from pearl_sched.makespan_improved import ImprovedMakespanModel, ImprovedParams, ServingParams, SizePool
from pearl_sched.plans import Plan, canonical_json
from pearl_sched.reference import PARAMS, reference_workload
from pearl_sched.request import PlanRequest
from pearl_sched.shared_data import DATA_ENV, default_data
from pearl_sched.solvers import available_backends, get_backend

ROOT = Path(__file__).resolve().parent.parent
SLOW_BACKEND_BUDGET_S = 20.0
MODEL = PearlMakespanModel(PARAMS)
MIXED = PlanRequest.model_validate_json(
    (Path(__file__).resolve().parent.parent / "examples" / "mixed-sizes.json").read_text()
)
MIXED_MODEL = PearlMakespanModel(MIXED.model)


def improved_mixed_model() -> MakespanModel:
    """The improved predictor on the mixed-size example (``--model improved``): each other size's pool its H_max/K."""
    k = MIXED.state.workload.kv_bytes_per_token
    pools = tuple(
        SizePool(gpu_type=d.gpu_type, tp=d.tp, kv_pool_tokens=d.kv_capacity_bytes / k) for d in MIXED.model.devices[1:]
    )
    return ImprovedMakespanModel(ImprovedParams(pearl=MIXED.model, serving=ServingParams(size_pools=pools)))


MIXED_LABEL = "P1/2/4,D2/4/8,C2/4/8"


def mixed_cluster(gpus: int) -> ClusterState:
    """The mixed-size case of the module docstring: the same cluster, regroupable into three sizes per role."""
    base = cluster(gpus, 2)
    workers: list[Worker] = []
    by_node: dict[str, list[GPU]] = {}
    for g in base.gpus:
        by_node.setdefault(g.node, []).append(g)
    old = {w.gpu_ids[0]: w for w in base.workers}
    for node_gpus in by_node.values():
        first = old[node_gpus[0].id]
        width = 8 if first.role is Role.TRAINING else 2 if first.status is Status.ACTIVE else 1
        for i in range(0, len(node_gpus), width):
            group = node_gpus[i : i + width]
            lead = old[group[0].id]
            ids = tuple(g.id for g in group)
            workers.append(Worker(id=f"w-{ids[0]}", gpu_ids=ids, role=lead.role, status=lead.status))
    load = MIXED.state.workload.model_copy(
        update={"batch_size": base.workload.batch_size, "unfinished": base.workload.unfinished}
    )
    return ClusterState(
        gpus=base.gpus, workers=tuple(workers), workload=load, budget=base.budget, worker_sizes=MIXED.state.worker_sizes
    )


def cluster(gpus: int, types: int) -> ClusterState:
    """A running cluster as described in the module docstring."""
    gpu_list, workers = [], []
    for i in range(gpus):
        share = i / gpus
        zone = Zone.DEDICATED if share < 0.25 else Zone.PREEMPTIBLE if share < 0.75 else Zone.OVERLAP
        gpu_type = "h100" if types == 2 and (i // 8) % 2 else "h200"
        available = not (zone is Zone.PREEMPTIBLE and i % 10 == 0)
        gid = f"g{i}"
        gpu_list.append(
            GPU(
                id=gid,
                node=f"n{i // 8}",
                type=gpu_type,
                zone=zone,
                node_group=f"pod{(i // 8) % 4}",
                available=available,
                reclaim_in_s=900.0 if zone is Zone.OVERLAP else None,
            )
        )
        serving = zone is Zone.DEDICATED or (zone is Zone.PREEMPTIBLE and share < 0.5)
        if serving:
            role, status = (Role.PREFILL if i % 4 == 0 else Role.DECODE), Status.ACTIVE
        elif zone is Zone.OVERLAP:
            role, status = Role.TRAINING, Status.ACTIVE
        else:
            role, status = Role.DECODE, Status.INACTIVE
        workers.append(Worker(id=f"w{i}", gpu_ids=(gid,), role=role, status=status))
    batch = 16 * gpus
    return ClusterState(
        gpus=tuple(gpu_list),
        workers=tuple(workers),
        workload=reference_workload(batch_size=batch, unfinished=batch * 3 // 4),
        budget=Budget(max_gpus=gpus),
    )


def measure(
    state: ClusterState,
    backend: str,
    repeats: int,
    model: MakespanModel = MODEL,
    costs: TransitionCosts | None = None,
    policy: PolicyConfig | None = None,
) -> tuple[list[float], list[float], object]:
    """Wall and CPU milliseconds of each plan() call, and the last plan."""
    times, cpu, result = [], [], None
    for _ in range(repeats):
        if isinstance(model, ImprovedMakespanModel):  # a fresh one: its memo of predictions would answer the repeats
            model = ImprovedMakespanModel(model.params)
        start, start_cpu = time.perf_counter(), time.process_time()
        result = plan(state, model, backend=backend, time_limit_s=30.0, costs=costs, policy=policy)
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
        if sum(times) > SLOW_BACKEND_BUDGET_S * 1000:
            break
    return times, cpu, result


def breakdown(
    state: ClusterState, repeats: int, model: MakespanModel, costs: TransitionCosts | None, policy: PolicyConfig | None
) -> dict[str, float]:
    """Per call on the default backend (HiGHS): MILPs, HiGHS solves and their CPU ms, and the rest (docstring)."""
    from pearl_sched import planner
    from pearl_sched.solvers import highs

    runs: list[float] = []
    milps = [0]
    solve, solve_class_problem = highs.HighsBackend.solve, planner.solve_class_problem

    def timed_solve(self: highs.HighsBackend, lp: object, *, time_limit_s: float) -> object:
        start = time.process_time()
        try:
            return solve(self, lp, time_limit_s=time_limit_s)  # type: ignore[arg-type]
        finally:
            runs.append((time.process_time() - start) * 1000)

    def counted(*args: object, **kwargs: object) -> object:
        milps[0] += 1
        return solve_class_problem(*args, **kwargs)  # type: ignore[arg-type]

    plan(state, model, time_limit_s=30.0, costs=costs, policy=policy)  # warm, as measure()'s first call is
    highs.HighsBackend.solve = timed_solve  # type: ignore[assignment,method-assign]
    planner.solve_class_problem = counted  # type: ignore[assignment]
    try:
        start = time.process_time()
        for _ in range(repeats):
            plan(state, model, time_limit_s=30.0, costs=costs, policy=policy)
        total = (time.process_time() - start) * 1000
    finally:
        highs.HighsBackend.solve = solve  # type: ignore[method-assign]
        planner.solve_class_problem = solve_class_problem
    return {
        "milps": milps[0] / repeats,
        "highs_runs": len(runs) / repeats,
        "highs_cpu_ms": sum(runs) / repeats,
        "largest_run_ms": max(runs, default=0.0),
        "other_cpu_ms": (total - sum(runs)) / repeats,
        "cpu_ms": total / repeats,
    }


def plan_fingerprint(result: Plan) -> str:
    """The plan's fingerprint without the solver's bookkeeping (module docstring), 12 hex digits."""
    data = result.model_dump(mode="json")
    for noisy in ("wall_time_s", "bound_s", "solves", "rounds"):
        data["solver"].pop(noisy, None)
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()[:12]


def unpack_revision(ref: str, into: Path) -> Path:
    """The repository at ``ref``, unpacked under ``into`` and importable as it would be installed.

    The package maps some folders into ``pearl_sched`` (``[tool.setuptools.package-dir]``); links in the
    unpacked tree make the same map, so that tree's code, not the installed one, is imported there.
    """
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True).stdout
    tree = into / "tree"
    tree.mkdir()
    archive_path = into / "tree.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(tree, filter="data")
    for package, folder in _package_dirs((tree / "pyproject.toml").read_text()).items():
        link = tree / package.replace(".", "/")
        if package != folder and not link.exists():
            link.symlink_to((tree / folder).resolve(), target_is_directory=True)
    shutil.copyfile(Path(__file__), tree / "bench" / "plan_latency.py")  # the same cases and line, REF's code
    return tree


def _package_dirs(pyproject: str) -> dict[str, str]:
    """``[tool.setuptools.package-dir]`` of a pyproject.toml (quoted keys and values; tomllib is 3.11+)."""
    table = re.search(r"^\[tool\.setuptools\.package-dir\]\n(.*?)(?:^\[|\Z)", pyproject, re.M | re.S)
    return dict(re.findall(r'^"([^"]+)"\s*=\s*"([^"]*)"', table.group(1), re.M)) if table else {}


def reference_lines(tree: Path, gpus: int, args: argparse.Namespace) -> dict[tuple[str, ...], str]:
    """The bench at the unpacked revision, for ``gpus``: its lines by (types, sizes, backend)."""
    command = [sys.executable, str(tree / "bench" / "plan_latency.py"), "--sizes", str(gpus), "--repeats"]
    command += [str(args.repeats), "--backends", args.backends, "--worker-sizes", args.worker_sizes]
    command += ["--rank-by-predict"] if args.rank_by_predict else []
    command += ["--rank-by-surrogate"] if args.rank_by_surrogate else []
    command += ["--model", args.model] if args.model != "pearl" else []
    env = {**os.environ, DATA_ENV: str(default_data())}
    out = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=True).stdout
    lines = {}
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split()[1:])
        lines[fields["types"], fields["sizes"], fields["backend"]] = line
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="16,64,256,1024,4096")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--backends", default=",".join(["auto", *available_backends(), "enumeration"]))
    parser.add_argument("--worker-sizes", default="one,mixed", help="one (sizes=1), mixed (three per role), or both")
    parser.add_argument("--compare", metavar="REF", help="also measure the code at this git revision")
    parser.add_argument(
        "--breakdown", action="store_true", help="after each default-backend case, where its CPU time goes"
    )
    parser.add_argument(
        "--model",
        choices=["pearl", "improved"],
        default="pearl",
        help="the mixed-size case's predictor (lines end in model=improved; REF's too with --compare)",
    )
    ranking = parser.add_mutually_exclusive_group()
    ranking.add_argument(
        "--rank-by-predict",
        action="store_true",
        help="plan() with PolicyConfig(rank_by_predict=True) (lines end in ranking=predict; REF's too with --compare)",
    )
    ranking.add_argument(
        "--rank-by-surrogate",
        action="store_true",
        help="plan() with PolicyConfig(rank_by_predict=False) (lines end in ranking=surrogate; REF's too)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="plan-latency-") as scratch:
        try:
            tree = unpack_revision(args.compare, Path(scratch)) if args.compare else None
            run_cases(args, tree)
        except subprocess.CalledProcessError as exc:  # git archive, or the revision's own bench
            detail = (exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or "").strip()
            last = detail.splitlines()[-1] if detail else f"exit status {exc.returncode}"
            sys.exit(f"--compare {args.compare}: {Path(str(exc.cmd[0])).name} failed: {last}")


def run_cases(args: argparse.Namespace, tree: Path | None) -> None:
    """Measure every case; with ``tree`` (the ``--compare`` revision), its line follows each of ours."""
    cases = args.worker_sizes.split(",")
    policy = PolicyConfig(rank_by_predict=True) if args.rank_by_predict else None
    suffix = " ranking=predict" if args.rank_by_predict else ""
    if args.rank_by_surrogate:
        policy, suffix = PolicyConfig(rank_by_predict=False), " ranking=surrogate"
    if args.model != "pearl":
        suffix += f" model={args.model}"
    mixed_model = improved_mixed_model() if args.model == "improved" else MIXED_MODEL
    same = compared = 0
    for gpus in (int(s) for s in args.sizes.split(",")):
        reference = reference_lines(tree, gpus, args) if tree is not None else {}
        runs: list[tuple[int, str, ClusterState, MakespanModel, TransitionCosts | None]] = []
        if "one" in cases:
            runs += [(types, "1", cluster(gpus, types), MODEL, None) for types in (1, 2)]
        if "mixed" in cases:
            runs.append((2, MIXED_LABEL, mixed_cluster(gpus), mixed_model, MIXED.costs))
        for types, label, state, model, costs in runs:
            for backend in args.backends.split(","):
                times, cpu, result = measure(state, backend, args.repeats, model, costs, policy)
                p50 = statistics.median(times)
                p95 = sorted(times)[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
                line = (
                    f"plan_latency gpus={gpus} types={types} sizes={label} backend={backend} p50_ms={p50:.1f}"
                    f" p95_ms={p95:.1f} cpu_p50_ms={statistics.median(cpu):.1f}"
                    f" objective={result.objective_s:.4f} plan={result.ratio}"  # type: ignore[attr-defined]
                    f" fp={plan_fingerprint(result)}{suffix}"  # type: ignore[arg-type]
                )
                if tree is None:
                    print(line, flush=True)
                else:
                    theirs = reference.get((str(types), label, backend), "plan_latency missing")
                    print(f"{line} code=worktree", flush=True)
                    print(f"{theirs} code={args.compare}", flush=True)
                    compared += 1
                    same += line.split(" fp=")[1] == theirs.split(" fp=")[-1]
                if args.breakdown and backend == "auto" and get_backend("auto").name == "highs":
                    parts = breakdown(state, args.repeats, model, costs, policy)
                    print(
                        f"plan_latency_breakdown gpus={gpus} types={types} sizes={label} milps={parts['milps']:.0f}"
                        f" highs_runs={parts['highs_runs']:.0f} highs_cpu_ms={parts['highs_cpu_ms']:.1f}"
                        f" largest_run_ms={parts['largest_run_ms']:.1f} other_cpu_ms={parts['other_cpu_ms']:.1f}"
                        f" cpu_ms={parts['cpu_ms']:.1f}{suffix}",
                        flush=True,
                    )
    if tree is not None:
        print(f"plan_latency_compare ref={args.compare} cases={compared} same_plans={same}")


if __name__ == "__main__":
    main()
