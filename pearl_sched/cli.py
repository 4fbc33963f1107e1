"""The ``pearl-sched`` command line.

``pearl-sched plan REQUEST.json`` prints the plan (a readable summary, or ``--json``);
``pearl-sched schema`` prints the JSON schemas of the input and output documents;
``pearl-sched demo`` runs the end-to-end simulated comparison, ``pearl-sched simulate SCENARIO`` any scenario;
``pearl-sched advise --framework verl|slime|roll|areal --budget N PROFILE`` writes a rollout configuration in a
framework's own format from its training logs or Prometheus (docs/advise.md).
Errors in the input are reported in one clear message with exit code 2; an infeasible budget exits 3.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ValidationError

from pearl_sched.errors import InfeasiblePlanError, MissingExtraError, PearlSchedError
from pearl_sched.input_files import MAX_DOCUMENT_BYTES, InputFileError, read_text

try:
    import typer
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
except ImportError as exc:  # pragma: no cover - exercised only without the cli extra
    raise MissingExtraError(exc.name or "typer", "cli") from exc

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Elastic PD scheduling for agentic-RL rollout.")
console = Console()
errors = Console(stderr=True)

EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3
MAX_TIME_LIMIT_S = 3600.0  # an hour per solve: the planner runs between rollout steps of minutes
MAX_PROCESSES = 256  # parallel simulations: more than any one machine's cores


def _load(path: Path, kind: type[BaseModel], what: str) -> Any:
    """Read a JSON document of ``kind`` with strict numbers; any problem is one line and exit 2."""
    try:
        text = read_text(path, limit_bytes=MAX_DOCUMENT_BYTES)
    except InputFileError as exc:
        _fail(str(exc))
    try:
        return kind.model_validate_json(text, strict=True)
    except ValidationError as exc:
        _fail(f"{path}: invalid {what}: {validation_summary(exc)}")


def validation_summary(exc: ValidationError) -> str:
    """The first error of a pydantic ``ValidationError`` on one line, with the count of the others.

    The field path is printed (keys cut to 40 characters); the offending value is not, so a wrong file passed
    as a document never has its contents echoed.
    """
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(_loc_part(p) for p in first["loc"]) or "(document)"
    message = " ".join(str(first["msg"]).removeprefix("Value error, ").split())
    more = exc.error_count() - 1
    return f"{where}: {message}" + (f" (and {more} more error{'s' if more > 1 else ''})" if more else "")


def _loc_part(part: object) -> str:
    text = str(part)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= 40 else text[:37] + "..."


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> Any:
    """Print ``error: message`` as one line on stderr (never wrapped) and exit with ``code``."""
    line = " ".join(message.split())
    errors.print(f"[bold red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@app.command("plan")
def plan_command(
    request: Annotated[Path, typer.Argument(help="Plan request JSON: state, model parameters, settings")],
    current: Annotated[Path | None, typer.Option(help="The plan in force (JSON from --json)")] = None,
    backend: Annotated[str, typer.Option(help="auto, enumeration, or a solver backend")] = "auto",
    time_limit: Annotated[float, typer.Option(help="Seconds per solve")] = 2.0,
    predictor: Annotated[str, typer.Option(help="pearl (PEARL's closed form) or improved")] = "pearl",
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON")] = False,
) -> None:
    """Plan the PD mode, P:D ratio and minimal transition for a cluster state."""
    from pearl_sched.planner import plan
    from pearl_sched.plans import Plan
    from pearl_sched.predictors import PREDICTORS, make_predictor
    from pearl_sched.request import PlanRequest

    if predictor not in PREDICTORS:
        _fail(f"--predictor is pearl or improved, not {predictor!r}")
    if not (math.isfinite(time_limit) and 0 < time_limit <= MAX_TIME_LIMIT_S):
        _fail(f"--time-limit is seconds per solve, above 0 and at most {MAX_TIME_LIMIT_S:.0f}, not {time_limit}")
    req: PlanRequest = _load(request, PlanRequest, "plan request")
    previous: Plan | None = _load(current, Plan, "plan") if current is not None else None
    model = make_predictor(predictor, req.model)
    try:
        result = plan(
            req.state,
            model,
            current=previous,
            costs=req.costs,
            policy=req.policy,
            policy_state=req.policy_state,
            backend=backend,
            time_limit_s=time_limit,
        )
    except InfeasiblePlanError as exc:
        extra = f" (need ≥ {exc.min_gpus_needed} GPUs)" if exc.min_gpus_needed is not None else ""
        _fail(f"infeasible: {exc}{extra}; binding constraint: {exc.binding_constraint}", EXIT_INFEASIBLE)
    except OverflowError:
        _fail(f"{request}: a number in the request is too large for the planner's floating-point arithmetic")
    except ValidationError as exc:  # a value the planner derived from the inputs is out of range
        _fail(f"{request}: the request's numbers overflow in the planner ({exc.title}): {validation_summary(exc)}")
    except (PearlSchedError, ValueError) as exc:
        _fail(str(exc))
    if as_json:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
        return
    _print_plan(result, req.state)


def _print_plan(result: Any, state: Any) -> None:
    from pearl_sched.state import Role
    from pearl_sched.transition import chosen_sizes

    m = result.makespan
    console.print(
        f"[bold]{result.mode.value}[/] {result.ratio} on {result.gpus_used} GPUs — {result.decision.kind.value}"
    )
    sizes = chosen_sizes(state, result.actions)
    line = "; ".join(
        f"{role.value} " + " + ".join(f"{n}×{label}" for label, n in sorted(sizes[role].items()))
        for role in (Role.PREFILL, Role.DECODE, Role.COLOCATED)
        if role in sizes
    )
    console.print(f"  worker sizes: {line or 'none'}", highlight=False)
    console.print(f"  {escape(result.decision.reason)}", highlight=False)
    table = Table(title="predicted makespan (s)", show_edge=False)
    for column in ("total", "prefill", "decode", "transfer", "environment", "overhead"):
        table.add_column(column, justify="right")
    table.add_row(
        *(f"{v:.1f}" for v in (m.total_s, m.prefill_s, m.decode_s, m.transfer_s, m.environment_s, m.overhead_s))
    )
    console.print(table)
    gain = (
        "n/a" if result.expected_gain_s is None else f"{result.expected_gain_s:.1f} s ({result.expected_gain_pct:.1f}%)"
    )
    console.print(
        f"  expected gain {gain}; transition cost {result.transition_cost_s:.2f} s; objective {result.objective_s:.2f}"
    )
    if result.actions:
        actions = Table(title=f"{len(result.actions)} action(s), in order", show_edge=False)
        for column in ("kind", "worker", "from", "to", "group", "reason"):
            actions.add_column(column)
        for a in result.actions:
            actions.add_row(
                a.kind.value,
                a.worker_id,
                a.from_role.value if a.from_role else "-",
                a.to_role.value if a.to_role else "-",
                str(a.group or ""),
                a.reason,
            )
        console.print(actions)
    else:
        console.print("  no actions: the cluster already matches the plan")
    s = result.solver
    status = escape(f"[{s.status}]")
    console.print(
        f"  solver {s.backend} {status} {s.solves} solve(s), {s.rounds} round(s), {s.wall_time_s * 1000:.1f} ms",
        highlight=False,
    )


@app.command("fit")
def fit_command(
    data: Annotated[list[Path], typer.Argument(help="Profile sources: Dynamo dirs, scrape dirs, .csv, .jsonl")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the fitted models (JSON)")],
    gpu_type: Annotated[str, typer.Option(help="GPU type for sources that do not name it")] = "unknown",
    model: Annotated[str, typer.Option(help="Model name for sources that do not name it")] = "unknown",
    tp: Annotated[int, typer.Option(help="TP degree for sources that do not name it")] = 1,
    kind: Annotated[str, typer.Option(help="auto, monotone or table")] = "auto",
    split: Annotated[str, typer.Option(help="Held-out split: configuration or row")] = "configuration",
    plot: Annotated[Path | None, typer.Option(help="Directory for predicted-vs-measured PNGs")] = None,
) -> None:
    """Fit component models (prefill, decode step, TTFT, ITL) from measured profiles and report their error."""
    from rich.progress import Progress

    from pearl_sched.profiles.dataset import ProfileDataset
    from pearl_sched.profiles.fit import ProfileFitError, fit_profiles
    from pearl_sched.profiles.readers import read_any

    if kind not in ("auto", "monotone", "table") or split not in ("configuration", "row"):
        _fail("--kind is auto, monotone or table; --split is configuration or row")
    if not 1 <= tp <= 1024:
        _fail(f"--tp is a tensor-parallel degree from 1 to 1024, not {tp}")
    _check_writable_file(output, "-o/--output")
    if plot is not None:
        _check_writable_dir(plot, "--plot")
    sources = ", ".join(map(str, data))
    parts = []
    with Progress(console=errors, transient=True) as progress:
        reading = progress.add_task("reading", total=len(data))
        for path in data:
            try:
                parts.append(read_any(path, gpu_type=gpu_type, model=model, tp=tp))
            except PearlSchedError as exc:  # ProfileFormatError, or a missing extra
                _fail(str(exc))
            progress.advance(reading)
        dataset = ProfileDataset.concat(parts)
        groups = len(dataset.groups("source", "gpu_type", "model", "target"))
        fitting = progress.add_task("fitting", total=groups)

        def step(name: str) -> None:
            progress.update(fitting, advance=1, description=f"fitting {name}")

        try:
            models = fit_profiles(dataset, kind=kind, split=split, progress=step)  # type: ignore[arg-type]
        except ProfileFitError as exc:
            _fail(f"{sources}: {exc}")
    if not models.components:
        dropped = ", ".join(f"{k} ×{v}" for k, v in sorted(dataset.dropped.items()))
        _fail(
            f"{sources}: no group had the 3 rows a fit needs"
            + (f"; rows dropped as unusable: {dropped}" if dropped else "")
        )
    table = Table(title=f"{len(dataset)} rows fitted into {len(models.components)} model(s)", show_edge=False)
    for column in ("source", "gpu", "model", "target", "kind", "train", "held out", "MAPE %", "anomalous"):
        table.add_column(column, justify="right" if column in ("train", "held out", "MAPE %", "anomalous") else "left")
    for key in sorted(models.components):
        r = models.components[key].report
        table.add_row(
            r.source,
            r.gpu_type,
            r.model,
            r.target,
            r.kind,
            str(r.n_train),
            str(r.n_heldout),
            f"{r.heldout_mape_pct:.1f}",
            str(r.n_anomalous),
        )
    console.print(table)
    if dataset.dropped:
        console.print("dropped rows: " + ", ".join(f"{k} ×{v}" for k, v in sorted(dataset.dropped.items())))
    try:
        models.save(output)
    except OSError as exc:
        _fail(f"{output}: cannot write: {exc.strerror or exc}")
    console.print(f"wrote {output}")
    if plot is not None:
        from pearl_sched.profiles.plots import plot_fits

        for written in plot_fits(models, dataset, plot):
            console.print(f"wrote {written}")


def _check_writable_file(path: Path, option: str) -> None:
    """Fail now, before minutes of work, if ``path`` cannot be written as a file."""
    if path.is_dir():
        _fail(f"{option} {path}: is a directory; give a file name")
    if path.exists() and not path.is_file():
        _fail(f"{option} {path}: exists and is not a regular file")
    parent = path.parent
    if not parent.is_dir():
        _fail(f"{option} {path}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        _fail(f"{option} {path}: not writable")


def _check_writable_dir(path: Path, option: str) -> None:
    """Fail now if ``path`` is not a directory that exists or can be created, and written to."""
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        _fail(f"{option} {path}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        _fail(f"{option} {path}: {existing} is not writable")


DEMO_POLICIES = ("roll", "roll-large", "rlboost+", "pearl", "pearl_sched")


def _run_simulation(
    scenario_name: str,
    policies: list[str] | None,
    data: Path | None,
    out: Path,
    processes: int,
    plots: bool,
    ray: bool = False,
    ray_address: str | None = None,
    seeds: dict[str, int] | None = None,
) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from pearl_sched.sim.baselines import POLICIES
    from pearl_sched.sim.experiment import default_data, run_scenario
    from pearl_sched.sim.scenario import ScenarioError, load_scenario
    from pearl_sched.sim.workload import WorkloadDataError

    if not 0 <= processes <= MAX_PROCESSES:
        _fail(f"--processes is 0 (up to 2) to {MAX_PROCESSES}, not {processes}")
    if ray or ray_address is not None:
        try:
            import ray as _ray  # noqa: F401
        except ImportError:
            _fail("--ray needs the ray extra: pip install 'pearl-sched[ray]'")
    _check_writable_dir(out, "--out")
    try:
        base = load_scenario(scenario_name)
    except ScenarioError as exc:
        _fail(str(exc))
    if seeds:  # the command line's seeds over the file's (every variant inherits them)
        base = base.model_copy(update=seeds)
    chosen = policies or list(base.policies) or list(POLICIES)
    unknown = [p for p in chosen if p not in POLICIES]
    if unknown:
        _fail(f"unknown policies {unknown}; known: {', '.join(POLICIES)}")
    data = data or default_data()
    if not (data / "aiconfigurator-sglang").is_dir():
        _fail(f"{data} has no aiconfigurator-sglang/: pass --data or set PEARL_SCHED_DATA to the shared data")
    processes = processes or min(2, os.cpu_count() or 1)
    scenarios = base.expand()
    for scenario in scenarios:  # fail before minutes of simulation, not in the middle
        for segment in scenario.segments:
            try:
                scenario.availability(segment, data)
            except (PearlSchedError, ValueError, OSError) as exc:
                _fail(f"scenario {scenario.name}, segment {segment.name}: {exc}")
    for scenario in scenarios:
        jobs = len(chosen) * len(scenario.segments)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=errors, transient=True) as progress:
            task = progress.add_task(f"simulating {scenario.name}", total=jobs)

            def done(policy: str, segment: str, task: Any = task, name: str = scenario.name) -> None:
                progress.update(task, advance=1, description=f"{name}: {policy} {segment} done")

            try:
                report = run_scenario(
                    scenario,
                    chosen,
                    data,
                    processes=processes,
                    on_done=done,
                    ray=ray,
                    ray_address=ray_address,
                )
            except (ScenarioError, WorkloadDataError) as exc:
                _fail(str(exc))
            except ValueError as exc:  # a setting the data cannot serve (an unknown model config, ...)
                _fail(f"scenario {scenario.name}: {exc}")
        _print_report(report)
        target = _inside(out, scenario.name.replace("/", "-"))
        report.write(target / "report.json")
        console.print(f"wrote {target / 'report.json'}")
        if plots:
            from pearl_sched.sim.plots import plot_report

            for path in plot_report(report, target):
                console.print(f"wrote {path}")


def _inside(out: Path, name: str) -> Path:
    """``out / name``, refusing a name that would lead outside ``out`` (scenario names are checked on load too)."""
    target = out / name
    if target.resolve().parent != out.resolve():
        _fail(f"scenario name {name!r} would write outside --out {out}")
    return target


def _print_report(report: Any) -> None:
    segments = [s.name for s in report.scenario.segments]
    table = Table(
        title=f"{report.scenario.name}: step throughput, k tokens/s ({report.wall_s:.0f} s wall)", show_edge=False
    )
    oracle = f"vs {report.oracle()}" if report.oracle() is not None else "vs oracle"
    for column in ("policy", *segments, "end to end", "vs ROLL", "vs PEARL", oracle, "steps", "carried"):
        table.add_column(column, justify="left" if column == "policy" else "right", no_wrap=True)

    def ratio(x: float | None) -> str:
        return f"{x:.2f}×" if x is not None else "-"

    for row in report.rows():
        table.add_row(
            row["policy"],
            *(f"{row[s] / 1e3:.1f}" for s in segments),
            f"{row['end_to_end'] / 1e3:.1f}",
            ratio(row["vs_roll"]),
            ratio(row["vs_pearl"]),
            ratio(row["vs_oracle"]),
            str(row["steps"]),
            str(row["carried_over"]),
        )
    Console(width=max(console.width, 140)).print(table)  # wide enough for every column, even in a pipe


@app.command("simulate")
def simulate_command(
    scenario: Annotated[str, typer.Argument(help="A shipped scenario name (e2e, ablation, ...) or a JSON file")],
    policy: Annotated[
        list[str] | None, typer.Option("--policy", "-p", help="Policy to run (repeat); default: the scenario's")
    ] = None,
    data: Annotated[Path | None, typer.Option(help="The shared data directory (profiles, traces)")] = None,
    out: Annotated[Path, typer.Option("-o", "--out", help="Directory for report.json and plots")] = Path(
        "pearl-sched-runs"
    ),
    processes: Annotated[int, typer.Option(help="Parallel simulations (0: up to 2)")] = 0,
    plots: Annotated[bool, typer.Option(help="Write PNG plots")] = True,
    ray: Annotated[
        bool, typer.Option("--ray", help="Run each (policy, segment) as a Ray task (the ray extra)")
    ] = False,
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", help="Ray cluster to join (implies --ray); default: a local one")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(min=0, help="Seed of the batches (and of the gateway's ties); default: the file's")
    ] = None,
    tie_seed: Annotated[
        int | None,
        typer.Option(min=0, help="Seed of the gateway's random tie-break among equal scores; default: the batches'"),
    ] = None,
) -> None:
    """Simulate a scenario under several policies on real profiles; print the table, write a report and plots."""
    seeds = {k: v for k, v in (("seed", seed), ("tie_seed", tie_seed)) if v is not None}
    _run_simulation(scenario, policy, data, out, processes, plots, ray, ray_address, seeds)


@app.command("demo")
def demo_command(
    data: Annotated[Path | None, typer.Option(help="The shared data directory (profiles, traces)")] = None,
    out: Annotated[Path, typer.Option("-o", "--out", help="Directory for report.json and plots")] = Path(
        "pearl-sched-demo"
    ),
    processes: Annotated[int, typer.Option(help="Parallel simulations (0: up to 2)")] = 0,
) -> None:
    """The end-to-end comparison (PEARL §6 setting) of ROLL, ROLL-Large, RLBoost+, PEARL and pearl_sched."""
    _run_simulation("e2e", list(DEMO_POLICIES), data, out, processes, True)


@app.command("advise")
def advise_command(
    profile: Annotated[
        list[str], typer.Argument(help="verl metrics (JSONL or console log), a wandb history CSV, a Prometheus URL")
    ],
    framework: Annotated[str, typer.Option("--framework", "-f", help="verl, slime, roll or areal")],
    budget: Annotated[int, typer.Option(help="Dedicated rollout GPUs")],
    model: Annotated[str, typer.Option(help="Model: qwen3-8b, qwen3-30b-a3b, qwen3-32b or llama-3.1-8b")],
    gpu: Annotated[str, typer.Option(help="GPU as aiconfigurator names it: h200_sxm, h100_sxm, b200_sxm, ...")],
    batch: Annotated[int, typer.Option(help="Trajectories per rollout step (prompts × group size)")],
    tp: Annotated[int, typer.Option(help="GPUs per rollout worker (tensor parallel)")] = 1,
    train_gpus: Annotated[int, typer.Option(help="Training GPUs that may be lent to rollout")] = 0,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node")] = 8,
    turns: Annotated[float | None, typer.Option(help="LLM turns of the slowest trajectory (override)")] = None,
    generated_tokens_per_turn: Annotated[
        float | None, typer.Option(help="Tokens generated per LLM turn (override; needed for multi-turn verl logs)")
    ] = None,
    env_time_s: Annotated[float | None, typer.Option(help="Tool seconds per turn (override)")] = None,
    window: Annotated[str, typer.Option(help="Prometheus rate() window, e.g. 5m")] = "5m",
    prom_selector: Annotated[str, typer.Option(help='Prometheus label matchers, e.g. job="sglang"')] = "",
    timeout_s: Annotated[float, typer.Option(help="Seconds per Prometheus HTTP call")] = 10.0,
    predictor: Annotated[str, typer.Option(help="improved or pearl (PEARL's closed form)")] = "improved",
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Also write the config to this file")] = None,
) -> None:
    """Print the rollout mode, P:D ratio, worker size and lending policy in a framework's own config format."""
    from pearl_sched.advisor import FRAMEWORKS, AdviceError, AdviceInputs, advise
    from pearl_sched.framework_configs import render
    from pearl_sched.predictors import PREDICTORS
    from pearl_sched.profiles.prometheus_api import PrometheusQueryError, ServingSummary, query_sglang
    from pearl_sched.profiles.rl_logs import RolloutLogSummary, summarise

    if framework not in FRAMEWORKS:
        _fail(f"--framework is one of {', '.join(FRAMEWORKS)}, not {framework!r}")
    if predictor not in PREDICTORS:
        _fail(f"--predictor is pearl or improved, not {predictor!r}")
    if not (math.isfinite(timeout_s) and 0 < timeout_s <= 600):
        _fail(f"--timeout-s is seconds per HTTP call, above 0 and at most 600, not {timeout_s}")
    if output is not None:
        _check_writable_file(output, "-o/--output")
    try:
        inputs = AdviceInputs(
            budget_gpus=budget,
            model=model,
            gpu=gpu,
            tp=tp,
            batch_size=batch,
            training_gpus=train_gpus,
            gpus_per_node=gpus_per_node,
            turns=turns,
            generated_tokens_per_turn=generated_tokens_per_turn,
            env_time_per_turn_s=env_time_s,
        )
    except ValidationError as exc:
        _fail(f"advise options: {validation_summary(exc)}")
    log: RolloutLogSummary | None = None
    serving: ServingSummary | None = None
    for source in profile:
        is_url = source.startswith(("http://", "https://"))
        if (serving if is_url else log) is not None:
            _fail(f"{source}: give at most one training log and one Prometheus URL")
        try:
            if is_url:
                serving = query_sglang(source, window=window, selector=prom_selector, timeout_s=timeout_s)
            else:
                log = summarise(Path(source))
        except (PearlSchedError, ValueError) as exc:  # ProfileFormatError, PrometheusQueryError, a bad URL
            _fail(str(exc))
    try:
        advice = advise(inputs, log=log, serving=serving, predictor=predictor)
        text = render(advice, framework)  # type: ignore[arg-type]
    except InfeasiblePlanError as exc:
        extra = f" (need ≥ {exc.min_gpus_needed} GPUs)" if exc.min_gpus_needed is not None else ""
        _fail(f"infeasible: {exc}{extra}; binding constraint: {exc.binding_constraint}", EXIT_INFEASIBLE)
    except (AdviceError, PrometheusQueryError, PearlSchedError, ValueError) as exc:
        _fail(str(exc))
    sys.stdout.write(text)
    if output is not None:
        try:
            output.write_text(text)
        except OSError as exc:
            _fail(f"{output}: cannot write: {exc.strerror or exc}")


@app.command("schema")
def schema_command(
    document: Annotated[str, typer.Argument(help="request, state, plan or all")] = "all",
) -> None:
    """Print the JSON schema of the plan request, the cluster state or the plan."""
    from pearl_sched.plans import Plan
    from pearl_sched.request import PlanRequest
    from pearl_sched.state import ClusterState

    documents: dict[str, type[BaseModel]] = {"request": PlanRequest, "state": ClusterState, "plan": Plan}
    if document != "all" and document not in documents:
        _fail(f"unknown document {document!r}; choose from {', '.join(documents)} or all")
    chosen = documents if document == "all" else {document: documents[document]}
    schemas = {name: kind.model_json_schema() for name, kind in chosen.items()}
    out = schemas if document == "all" else schemas[document]
    sys.stdout.write(json.dumps(out, indent=2) + "\n")


@app.command("backends")
def backends_command() -> None:
    """List the solver backends and whether each is installed."""
    from pearl_sched.solvers import BACKENDS, DEFAULT_BACKEND

    table = Table(show_edge=False)
    for column in ("backend", "installed", "hint", "deterministic", "integer-only", "extra"):
        table.add_column(column)
    for name, cls in BACKENDS.items():
        caps = cls.capabilities
        label = f"{name} (default)" if name == DEFAULT_BACKEND else name
        table.add_row(
            label,
            "yes" if cls.is_available() else "no",
            str(caps.supports_hint).lower(),
            str(caps.deterministic).lower(),
            str(caps.integer_coefficients_only).lower(),
            cls.extra or "-",
        )
    console.print(table)


def main() -> None:
    """Console-script entry point: a usage error (unknown option, bad option value) is one line and exit 2 too."""
    try:  # typer ≥ 0.16 carries its own copy of click; older ones use click itself
        from typer._click import exceptions as click_errors
    except ImportError:  # pragma: no cover - depends on the installed typer
        import click.exceptions as click_errors  # type: ignore[no-redef]
    try:
        code = app(prog_name="pearl-sched", standalone_mode=False)
    except click_errors.NoArgsIsHelpError:
        sys.exit(EXIT_BAD_INPUT)  # the help is already printed
    except click_errors.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None else "pearl-sched"
        errors.print(
            f"[bold red]error:[/] {escape(' '.join(exc.format_message().split()))} (see {command} --help)",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(EXIT_BAD_INPUT)
    except typer.Abort:
        errors.print("aborted", highlight=False)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
