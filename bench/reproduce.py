"""Reproduce PEARL §6's shapes in the simulator: every scenario under every policy, ratio selection, crossover.

Scenarios (pearl_sched/sim/scenarios/*.json) run with their policies; one line per policy per segment and one
end to end (segment=all), the step throughput and its ratio to ROLL, to PEARL-faithful and to the oracle:

    reproduce scenario=<name> segment=<name|all> policy=<name> throughput_tok_s=<x>
              vs_roll=<r> vs_pearl=<r> vs_oracle=<r> oracle=<static|hindsight>      (on one line)

``vs_oracle`` is against ``oracle-hindsight`` when the scenario ran it, else ``oracle-static``; ``oracle=`` says
which (docs/simulator.md, "Oracles").

Ratio selection (PEARL Table 2 style): for every constant-resource level of the e2e segments (rollout GPUs
available, and the same with the 16 training GPUs lent) and Table 2's own levels, every configuration is
simulated on the e2e batch; plan() chooses with the improved predictor (pearl_sched) and PEARL's (pearl),
transition costs zero (a fresh choice):

    ratio_select interval=<gpus> model=<improved|pearl> chosen=<pPdD|nC> best=<pPdD|nC> gap_pct=<x>

Ratio selection with worker sizes (``--only ratio-sizes``, not in the default; ``--sizes-intervals``): the e2e
scenario with bench/sim_sizes.py's ``worker_sizes`` declared, at each interval of that many dedicated GPUs, plan()
chooses among sizes too and the choice is simulated against the best of the sized configurations
(``pearl_sched.sim.sized_configs``: every GPU serving, one size per role, and whatever a model chose)::

    ratio_select interval=<gpus> sizes=<P1/2,D2/4,C2/4> model=<improved|pearl> chosen=<e.g. 2P(tp1)3D(tp2)>
        best=<…> gap_pct=<x> configs=<n>                                                     (on one line)
    ratio_select_sizes model=<name> equal_best=<k>/<n> mean_gap_pct=<x>

plan() runs with its default policy, which ranks by the model's own predict where worker sizes are declared (the
sized selection) and by the MILP's surrogate without them (docs/formulation.md, "Ranking by predict"). With
``--rank-by-predict`` both ratio selections add ``model=improved-ranked``: the improved predictor with
``PolicyConfig(rank_by_predict=True)`` (on the sized selection the same as ``improved``); the targets stay on
``improved``.

Mode crossover (PEARL Fig. 2c): Qwen3-30B-A3B on 8 TP2 workers, batch 32 … 96 prompts × group 16, the best
disaggregated configuration against colocated, on the e2e workload and on the short-output chat one:

    crossover workload=<name> batch=<b> colocated_s=<x> best_disaggregated=<pPdD> disaggregated_s=<y> gain_pct=<z>

Then the issue's targets, each with met=yes|no. Usage:
    python bench/reproduce.py [--only scenarios,ratio,crossover,ratio-sizes] [--sizes-intervals 8,16]
                              [--scenarios e2e,sensitivity/short-batch]
                              [--processes 2] [--out DIR (reports, plots)]
                              [--ray [--ray-address ADDR]]   (the runs as Ray tasks: same figures as serial)
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import FREE
from pearl_sched import Mode
from pearl_sched.config import PolicyConfig
from pearl_sched.control import plan_resident
from pearl_sched.sim.cluster import SimCluster
from pearl_sched.sim.experiment import Report, default_data, hindsight_search, run_scenario, setting_for
from pearl_sched.sim.rollout import simulate_batch
from pearl_sched.sim.scenario import Scenario, load_scenario
from pearl_sched.sim.setting import Setting
from pearl_sched.sim.sized_configs import (
    SizedConfig,
    serving_configuration,
    simulate_sized,
    sized_configurations,
    sized_label,
)
from pearl_sched.state import WorkerSizes, ratio_label

SCENARIOS = ("e2e", "ablation", "sensitivity", "swe-qwen3-8b", "swe-qwen3-30b-a3b")
HINDSIGHT = "oracle-hindsight"


def _fmt(x: float | None) -> str:
    return "nan" if x is None else f"{x:.3f}"


def report_lines(report: Report) -> list[str]:
    """The ``reproduce scenario=…`` lines of one report: each policy per segment and end to end, with its ratios."""
    oracle = report.oracle()
    lines = []
    for policy, run in report.runs.items():
        for seg in [*run.segments, None]:
            segment = seg.segment if seg is not None else "all"
            throughput = seg.throughput_tok_s if seg is not None else run.throughput_tok_s
            where = seg.segment if seg is not None else None
            lines.append(
                f"reproduce scenario={report.scenario.name} segment={segment} policy={policy}"
                f" throughput_tok_s={throughput:.0f} vs_roll={_fmt(report.ratio(policy, 'roll', where))}"
                f" vs_pearl={_fmt(report.ratio(policy, 'pearl', where))}"
                f" vs_oracle={_fmt(report.ratio(policy, oracle, where) if oracle else None)}"
                f" oracle={oracle.removeprefix('oracle-') if oracle else 'none'}"
            )
    return lines


def scenarios(
    data: Path,
    processes: int,
    out: Path | None,
    only: set[str] | None = None,
    ray_address: str | None = None,
    ray: bool = False,
    hindsight: bool = False,
) -> list[Report]:
    reports = []
    for name in SCENARIOS:
        for scenario in load_scenario(name).expand():
            if only is not None and name not in only and scenario.name not in only:
                continue
            policies = list(scenario.policies)
            if hindsight and HINDSIGHT not in policies:
                policies.append(HINDSIGHT)
            report = run_scenario(scenario, policies, data, processes=processes, ray=ray, ray_address=ray_address)
            reports.append(report)
            if out is not None:
                from pearl_sched.sim.plots import plot_report

                target = out / scenario.name.replace("/", "-")
                report.write(target / "report.json")
                plot_report(report, target)
            for text in report_lines(report):
                print(text, flush=True)
            _oracle_lines(report)
            print(f"# {scenario.name}: {report.wall_s:.0f} s wall", flush=True)
    return reports


def _oracle_lines(report: Report) -> None:
    """What the hindsight oracle cost per segment, and every segment where a policy beat it (with the cause)."""
    run = report.runs.get(HINDSIGHT)
    if run is None:
        return
    kind = hindsight_search(report.scenario).describe(report.scenario.worker_sizes)
    for seg in run.segments:
        print(
            f"# {HINDSIGHT} scenario={report.scenario.name} segment={seg.segment} search={kind}"
            f" simulations={seg.simulations} wall_s={seg.wall_s:.0f}",
            flush=True,
        )
    for policy in report.runs:
        if policy == HINDSIGHT:
            continue
        for seg in run.segments:
            ratio = report.ratio(policy, HINDSIGHT, seg.segment)
            if ratio is not None and ratio > 1 + 1e-9:
                print(
                    f"oracle_beaten scenario={report.scenario.name} segment={seg.segment} policy={policy}"
                    f" ratio={ratio:.4f} search={kind}",
                    flush=True,
                )


def noise(data: Path, processes: int, reports: list[Report], names: tuple[str, ...] = ("e2e",)) -> list[float]:
    """pearl_sched vs PEARL-faithful per segment, over seeds: the run-to-run noise of the comparison.

    Two kinds of run: two workload seeds (the batches and the gateway's ties both change: ``seeds=``), and three
    gateway tie seeds on the scenario's batches (only where equally scored workers' requests go: ``tie_seeds=``).

    Returns:
        The spread (percentage points between the largest and smallest ratio) of every segment, both kinds.
    """
    spreads = []
    for name in names:
        base = load_scenario(name).expand()[0]
        existing = {r.scenario.name: r for r in reports}.get(name)
        if existing is None or not {"pearl", "pearl_sched"} <= set(existing.runs):
            existing = run_scenario(base, ["pearl", "pearl_sched"], data, processes=processes)

        def rerun(update: dict[str, int], scenario: Scenario = base) -> Report:
            return run_scenario(scenario.model_copy(update=update), ["pearl", "pearl_sched"], data, processes=processes)

        ties = base.gateway_tie_seed
        runs = {
            "seeds": {base.seed: existing, base.seed + 1: rerun({"seed": base.seed + 1})},
            "tie_seeds": {ties: existing, **{ties + k: rerun({"tie_seed": ties + k}) for k in (1, 2)}},
        }
        for kind, by_seed in runs.items():
            for segment in [*(s.name for s in base.segments), None]:
                ratios = [r.ratio("pearl_sched", "pearl", segment) or 0.0 for r in by_seed.values()]
                spread = 100 * (max(ratios) - min(ratios))
                spreads.append(spread)
                print(
                    f"noise scenario={name} segment={segment or 'all'} {kind}={','.join(map(str, by_seed))}"
                    f" pearl_sched_vs_pearl={','.join(f'{r:.4f}' for r in ratios)} spread_pct={spread:.2f}",
                    flush=True,
                )
    return spreads


def _levels(scenario: Scenario, data: Path) -> list[int]:
    levels: set[int] = {10, 12, 16, 26, 28, 32}  # PEARL Table 2: dedicated GPUs, and those plus 16 lent
    for segment in scenario.segments:
        trace, _ = scenario.availability(segment, data)
        for count in trace.counts:
            levels.add(int(count))
            levels.add(int(count) + scenario.training_gpus)
    return sorted(level for level in levels if level >= 2 * scenario.tp)


def _sweep(args: tuple[str, int, str]) -> tuple[int, dict[str, float]]:
    scenario_json, gpus, data = args
    scenario = Scenario.model_validate_json(scenario_json)
    setting = setting_for(scenario, Path(data))
    n = gpus // scenario.tp
    batch = setting.batch(0)
    colocated = ratio_label(Mode.COLOCATED, colocated=n)
    measured = {colocated: simulate_batch(setting.pool(Mode.COLOCATED, colocated=n), batch).makespan_s}
    for p in range(1, n):
        pool = setting.pool(Mode.DISAGGREGATED, p, n - p)
        measured[ratio_label(Mode.DISAGGREGATED, p, n - p)] = simulate_batch(pool, batch).makespan_s
    return gpus, measured


def _choosers(rank_by_predict: bool) -> list[tuple[str, str, PolicyConfig | None]]:
    """(line label, predictor, policy) of each plan() asked: improved and pearl, and with ``--rank-by-predict``
    the improved predictor with ``PolicyConfig(rank_by_predict=True)`` (label ``improved-ranked``)."""
    choosers: list[tuple[str, str, PolicyConfig | None]] = [("improved", "improved", None), ("pearl", "pearl", None)]
    if rank_by_predict:
        choosers.append(("improved-ranked", "improved", PolicyConfig(rank_by_predict=True)))
    return choosers


def ratio_selection(
    data: Path, processes: int, ray_address: str | None = None, ray: bool = False, rank_by_predict: bool = False
) -> list[tuple[str, float, bool]]:
    scenario = load_scenario("e2e")
    setting = setting_for(scenario, data)
    levels = _levels(scenario, data)
    jobs = [(scenario.model_dump_json(), gpus, str(data)) for gpus in levels]
    if ray or ray_address is not None:
        import ray as ray_module  # the --ray flag checked the extra

        if not ray_module.is_initialized():
            ray_module.init(address=ray_address, include_dashboard=False, log_to_driver=False)
        task = ray_module.remote(num_cpus=1)(_sweep)
        sweeps = dict(ray_module.get([task.remote(job) for job in jobs]))
    else:
        with ProcessPoolExecutor(max_workers=processes) as pool:
            sweeps = dict(pool.map(_sweep, jobs))
    outcomes = []
    for gpus in levels:
        measured = sweeps[gpus]
        best = min(measured, key=lambda k: measured[k])
        cluster = SimCluster(setting, costs=FREE, dedicated_gpus=gpus, preemptible_gpus=0)
        cluster.trainer_idle_at = math.inf  # no training GPUs to lend: the pool is the interval's
        state = cluster.observe()
        for name, predictor, policy in _choosers(rank_by_predict):
            chosen = plan_resident(state, setting.predictor(predictor), costs=FREE, policy=policy)[0].ratio
            gap = 100 * (measured[chosen] - measured[best]) / measured[best]
            outcomes.append((name, gap, chosen == best))
            print(
                f"ratio_select interval={gpus} model={name} chosen={chosen} best={best} gap_pct={gap:.2f}", flush=True
            )
    return outcomes


SIZES = {"prefill": [1, 2], "decode": [2, 4], "colocated": [2, 4]}
"""The worker sizes of the sized ratio selection: bench/sim_sizes.py's."""


def _sized_sweep(args: tuple[str, int, str]) -> tuple[int, dict[str, float]]:
    """Every enumerated sized configuration of one interval, simulated (label → makespan)."""
    scenario_json, gpus, data = args
    scenario = Scenario.model_validate_json(scenario_json)
    setting = setting_for(scenario, Path(data))
    sizes = scenario.worker_sizes
    assert sizes is not None
    configs = sized_configurations(sizes, gpus)
    return gpus, {sized_label(c, scenario.size): simulate_sized(setting, c) for c in configs}


def _chosen_config(
    setting: Setting, sizes: WorkerSizes, gpus: int, model: str, policy: PolicyConfig | None = None
) -> SizedConfig:
    """What plan() chooses on ``gpus`` dedicated GPUs that may be regrouped into ``sizes`` (no transition costs)."""
    cluster = SimCluster(setting, costs=FREE, dedicated_gpus=gpus, preemptible_gpus=0, worker_sizes=sizes)
    cluster.trainer_idle_at = math.inf  # no training GPUs to lend: the pool is the interval's
    chosen = plan_resident(cluster.observe(), setting.predictor(model), costs=FREE, policy=policy)[0]
    cluster.apply(chosen)
    return serving_configuration(cluster)


def ratio_selection_sized(
    data: Path, intervals: list[int], processes: int, rank_by_predict: bool = False
) -> list[tuple[str, float, bool]]:
    """The ``ratio_select … sizes=`` lines: plan()'s sized choice against the simulated best of the sized space."""
    base = load_scenario("e2e")
    scenario = Scenario.model_validate({**base.model_dump(), "worker_sizes": SIZES})
    sizes = scenario.worker_sizes
    assert sizes is not None
    setting = setting_for(scenario, data)
    tag = ",".join(f"{k[0].upper()}{'/'.join(str(t) for t in v)}" for k, v in SIZES.items())
    jobs = [(scenario.model_dump_json(), gpus, str(data)) for gpus in intervals]
    with ProcessPoolExecutor(max_workers=processes) as pool:
        sweeps = dict(pool.map(_sized_sweep, jobs))
    outcomes = []
    for gpus in intervals:
        measured = sweeps[gpus]
        enumerated = len(measured)
        for name, predictor, policy in _choosers(rank_by_predict):
            config = _chosen_config(setting, sizes, gpus, predictor, policy)
            chosen = sized_label(config, scenario.size)
            if chosen not in measured:  # outside the enumeration (fewer GPUs, mixed sizes in a role): simulate it
                measured[chosen] = simulate_sized(setting, config)
            best = min(measured, key=lambda k: measured[k])
            gap = 100 * (measured[chosen] - measured[best]) / measured[best]
            outcomes.append((name, gap, chosen == best))
            print(
                f"ratio_select interval={gpus} sizes={tag} model={name} chosen={chosen} best={best}"
                f" gap_pct={gap:.2f} configs={enumerated}",
                flush=True,
            )
    for name, _, _ in _choosers(rank_by_predict):
        mine = [(gap, equal) for model, gap, equal in outcomes if model == name]
        print(
            f"ratio_select_sizes model={name} equal_best={sum(e for _, e in mine)}/{len(mine)}"
            f" mean_gap_pct={statistics.mean(g for g, _ in mine):.2f}",
            flush=True,
        )
    return outcomes


def crossover(data: Path) -> None:
    base = load_scenario("e2e")
    for workload, scale in (("e2e", base.output_scale), ("chat", 1.0)):
        for batch in (32, 48, 64, 80, 96):
            scenario = base.model_copy(update={"model": "qwen3-30b-a3b", "batch_prompts": batch, "output_scale": scale})
            setting = setting_for(scenario, data)
            trajectories = setting.batch(0)
            colocated = simulate_batch(setting.pool(Mode.COLOCATED, colocated=8), trajectories).makespan_s
            split = {
                p: simulate_batch(setting.pool(Mode.DISAGGREGATED, p, 8 - p), trajectories).makespan_s
                for p in range(1, 8)
            }
            p = min(split, key=lambda k: split[k])
            gain = 100 * (colocated - split[p]) / colocated
            print(
                f"crossover workload={workload} batch={batch} colocated_s={colocated:.1f}"
                f" best_disaggregated={ratio_label(Mode.DISAGGREGATED, p, 8 - p)} disaggregated_s={split[p]:.1f}"
                f" gain_pct={gain:.2f}",
                flush=True,
            )


def targets(reports: list[Report], selection: list[tuple[str, float, bool]], spreads: list[float]) -> None:
    def line(name: str, value: str, met: bool) -> None:
        print(f"target {name} value={value} met={'yes' if met else 'no'}", flush=True)

    e2e = next((r for r in reports if r.scenario.name == "e2e"), None)
    if e2e is not None:
        vs_roll = e2e.ratio("pearl", "roll") or 0.0
        line("pearl_vs_roll>=2", f"{vs_roll:.2f}", vs_roll >= 2)
        segments = [s.name for s in e2e.scenario.segments]
        gains = {s: e2e.ratio("pearl_sched", "pearl", s) or 0.0 for s in segments}
        line("pearl_sched>=pearl_every_segment", ",".join(f"{g:.3f}" for g in gains.values()), min(gains.values()) >= 1)
        scarce = min(e2e.scenario.segments, key=lambda s: s.target_mean_rollout_gpus).name
        line("pearl_sched_vs_pearl_scarce>=1.10", f"{gains[scarce]:.3f}", gains[scarce] >= 1.10)
    for r in reports:  # issue 13: within 3% of the hindsight oracle in every scenario (goal 2%)
        vs_hindsight = r.ratio("pearl_sched", HINDSIGHT)
        if vs_hindsight is not None:
            line(f"pearl_sched_within_3pct_of_hindsight@{r.scenario.name}", f"{vs_hindsight:.4f}", vs_hindsight >= 0.97)
    others = [r for r in reports if "pearl" in r.runs and "pearl_sched" in r.runs]
    if others:
        worst = min((r.ratio("pearl_sched", "pearl") or 0.0, r.scenario.name) for r in others)
        noise_pct = f",noise<={max(spreads):.2f}pp" if spreads else ""
        line(
            "pearl_sched>=pearl_every_scenario_within_0.5pct",
            f"{worst[0]:.4f}@{worst[1]}{noise_pct}",
            worst[0] >= 0.995,
        )
    sweeps = ("oracle-static", HINDSIGHT, "oracle-lookahead", "best-colocated", "best-disaggregated")  # not rivals
    rivals: list[tuple[float, str]] = []
    vs_sweep: list[tuple[float, str]] = []
    for r in reports:
        if "pearl_sched" not in r.runs:
            continue
        for segment in [*(s.name for s in r.scenario.segments), None]:
            where = f"{r.scenario.name}:{segment or 'all'}"
            for other in r.runs:
                ratio = r.ratio("pearl_sched", other, segment)
                if ratio is None or other == "pearl_sched":
                    continue
                (vs_sweep if other in sweeps else rivals).append((ratio, f"{other}@{where}"))
    if rivals:
        worst = min(rivals)
        line("pearl_sched>=every_policy_within_0.5pct", f"{worst[0]:.4f}:{worst[1]}", worst[0] >= 0.995)
    if vs_sweep:
        worst = min(vs_sweep)
        line("pearl_sched_within_3pct_of_every_oracle_and_sweep", f"{worst[0]:.4f}:{worst[1]}", worst[0] >= 0.97)
    ours = [(gap, equal) for name, gap, equal in selection if name == "improved"]
    if ours:
        share = sum(equal for _, equal in ours) / len(ours)
        mean_gap = statistics.fmean(gap for gap, _ in ours)
        line("ratio_equal_best>=90pct", f"{100 * share:.0f}%", share >= 0.9)
        line("ratio_mean_gap<=1pct", f"{mean_gap:.2f}%", mean_gap <= 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=default_data())
    parser.add_argument("--only", default="scenarios,ratio,crossover,noise")
    parser.add_argument(
        "--hindsight", action="store_true", help=f"Add {HINDSIGHT} to every scenario's policies (it is costly)"
    )
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument(
        "--rank-by-predict",
        action="store_true",
        help="ratio selection: also plan() with PolicyConfig(rank_by_predict=True) (model=improved-ranked lines)",
    )
    parser.add_argument(
        "--sizes-intervals", default="8,16", help="Dedicated GPUs of each interval of the sized ratio selection"
    )
    parser.add_argument("--out", type=Path, help="Write each scenario's report.json and plots here")
    parser.add_argument("--ray", action="store_true", help="Run the independent runs as Ray tasks (the ray extra)")
    parser.add_argument("--ray-address", help="Ray cluster to join (implies --ray); default: a local one")
    parser.add_argument(
        "--scenarios", help="Comma-separated scenario files or variants to run, e.g. e2e,sensitivity/short-batch"
    )
    args = parser.parse_args()
    use_ray = args.ray or args.ray_address is not None
    if use_ray:
        try:
            import ray  # noqa: F401
        except ImportError:
            parser.error("--ray needs the ray extra: pip install 'pearl-sched[ray]'")
    parts = set(args.only.split(","))
    start = time.perf_counter()
    only = set(args.scenarios.split(",")) if args.scenarios else None
    reports = (
        scenarios(args.data, args.processes, args.out, only, args.ray_address, use_ray, args.hindsight)
        if "scenarios" in parts
        else []
    )
    selection = (
        ratio_selection(args.data, args.processes, args.ray_address, use_ray, args.rank_by_predict)
        if "ratio" in parts
        else []
    )
    if "ratio-sizes" in parts:
        intervals = [int(x) for x in args.sizes_intervals.split(",")]
        ratio_selection_sized(args.data, intervals, args.processes, args.rank_by_predict)
    if "crossover" in parts:
        crossover(args.data)
    spreads = noise(args.data, args.processes, reports) if "noise" in parts else []
    targets(reports, selection, spreads)
    print(f"# reproduce: {time.perf_counter() - start:.0f} s wall", flush=True)


if __name__ == "__main__":
    main()
