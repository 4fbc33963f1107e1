"""Makespan predictors against the simulator's ground truth and against measured serving runs.

**Simulated scenarios** (``--scenarios``, default e2e, sensitivity/short-batch, swe-qwen3-8b, swe-qwen3-30b-a3b):
each scenario's step-0 batch (1,024 trajectories) is simulated on every configuration of ``--gpus`` GPUs (its TP's
workers: colocated, and 1P…(N−1)P disaggregated) in the SGLang-memory world (docs/simulator.md). The predictors
are fitted the way the planners are in the simulated cluster, from the telemetry of *one* run, the colocated one
(PEARL refits from the last step, under whatever configuration ran):

- device parameters (t_p, A, b) from that run's observed step times (``ObservedStepTimes``, framework overhead
  included as a worker measures it); the batch's statistics are the planners' prior (``Setting.workload``);
- ``pearl``: PEARL's closed form with θ measured in that run;
- ``improved-prior``: the improved predictor with SGLang's launch settings only (KV pool, router, flags), no
  /metrics (its structural cache and retraction estimates);
- ``improved``: the same fitted from the run's SGLang series (``sglang:prompt_tokens_total``,
  ``sglang:cached_tokens_total``, ``sglang:num_retracted_requests_total``, ``sglang:max_total_num_tokens``) through
  ``profiles.telemetry.observe_serving`` / ``refit_serving``; the disaggregated configurations keep the structural
  estimate (no PD run reported).
- ``improved-own``: fitted from each configuration's own run (an upper bound, as PEARL's θ of the same run was).

The three improved ones also get the decode cost on KV tokens, t = A + b·n + c·K, fitted from the run's decode
iterations as SGLang's decode log lines report them (``ObservedStepTimes.decode_sums``,
``profiles.telemetry.fit_decode_cost``; ``ServingParams.decode_costs``), as the simulated cluster refits it after
each batch and plan() then predicts with it (docs/makespan.md, "Decode cost on KV tokens"); ``--decode-cost pearl``
leaves it out (PEARL's refitted A + b·n, the bench before issue 13's s12 round), and a run whose iterations cannot
be fitted keeps PEARL's line either way.

With ``--prefill-cost two-term`` the three improved ones also charge the two-term prefill cost α·n + β·n·(c + n/2)
fitted, as t_p is, from the run's prefill steps (new and cached tokens per batch, as SGLang logs them:
``profiles.telemetry.PrefillSteps``; ``ServingParams.prefill_cost_by_context``); the default ``one-term`` is the
predictor as plan() runs it (t_p per token whatever the context). With ``--prefill-batch-cost on`` they charge the
cost fitted with a per-batch intercept, t₀ + α·n (with ``two-term`` t₀ + α·n + β·n·(c + n/2);
``PrefillSteps.fit_with_intercept``;
``ServingParams.prefill_batch_cost``), t₀ once per prefill batch the model expects. With ``--shared-prompts on``
(the default, as the predictor) a GRPO group's members share their first prompt in the cache
(``ServingParams.shared_prompt_hits``); ``off`` is the predictor before it. The fits are
printed either way. Per (scenario, GPUs)::

    prefill_cost scenario=<s> gpus=<g> t_p_us=<x> alpha_us=<x> beta_ps=<x> step_t0_ms=<x> step_alpha_us=<x>
        step_beta_ps=<x>                      (two_term=none / step=none: not fitted)

Lines, per configuration and per (scenario, GPUs)::

    predict scenario=<s> gpus=<g> config=<2P6D> sim_s=<x> pearl_s=<x> improved_s=<x> ... sim_hit=<x> improved_hit=<x>
    predict_mape scenario=<s> gpus=<g> model=<name> mape_pct=<x> best_pick_gap_pct=<y> n=<configs>
    predict_mape_mode scenario=<s> gpus=<g> model=<name> mode=<colocated|disaggregated> mape_pct=<x> n=<configs>

``best_pick_gap_pct``: how much slower (simulated) the configuration the predictor ranks first is than the fastest.
``sim_hit`` / ``improved_hit``: the prefill side's cached share of prompt tokens, simulated and as ``improved``
predicts it (``sglang:cached_tokens_total`` over ``sglang:prompt_tokens_total``).

**Decisions**: at each GPU count, what ``plan()`` chooses (``plan_resident`` on a cluster of that many dedicated GPUs
and no training GPUs to lend, no transition costs, as bench/reproduce.py's ratio selection does) with each predictor,
before any telemetry (``prior``: the setting's fit and launch settings) and after the colocated run's (``refit``)::

    decide scenario=<s> gpus=<g> model=<pearl|improved|improved-turns|...> fit=<prior|refit|refit-unchecked>
        chosen=<label> best=<label> gap_pct=<x>

**Measured serving runs** (``--silicon-rows``, 0 to skip): the aggregated SGLang rows of aiconfigurator-core's
``silicon_sample.csv`` that bench/validate.py replays (its loaders, reused as they are). A closed-loop run at
concurrency C is, request by request, a one-turn batch of C: its makespan is a request's end-to-end latency
(``TTFT + (OSL − 1)·TPOT``, the measured E2E). Both predictors get device parameters fitted to aiconfigurator-core's
step times for the row (``profiles.to_pearl.fit_device``) and the engine's estimate of SGLang's KV pool; PEARL sees
the prompt as its ΔL, the improved model as the first-turn prompt. Lines::

    predict_measured dataset=<silicon-sglang|silicon-sglang-kvbound> model=<name> rows=<n> mape_pct=<x>

``improved-turns`` is ``improved`` with the live share from the batch's turn counts (``Workload.turn_quantiles``,
every 5%; ``ServingParams.live_share="turn_counts"``, opt-in): the batch spans its longest trajectory's turns
instead of the p90's, each phase holding the trajectories still live there rather than a linearly falling share
(docs/makespan.md, "The live share from turn counts"). Its ``decide`` lines are plan() with it after the refit.
``fit=refit-unchecked`` lines are plan() with ``improved`` and ``improved-turns-queue`` after the refit and
``PolicyConfig(mode_by_predict=False)``: the MILP surrogate's optimum standing, without the default check of each
solve's mode by ``predict`` (docs/formulation.md, "The mode checked by predict").
``improved-queue`` and ``improved-turns-queue`` are ``improved`` and ``improved-turns`` with the PD prefill pool's
queue in the trajectory's cycle (``ServingParams.pd_prefill_queue``, opt-in; docs/makespan.md, "The PD prefill queue
in the cycle"), with their own ``decide`` lines after the refit.

Usage: python bench/predictor_accuracy.py [--scenarios e2e,...] [--gpus 8,16] [--silicon-rows 400]
                                         [--prefill-cost one-term|two-term] [--prefill-batch-cost on|off]
                                         [--shared-prompts on|off] [--decode-cost kv|pearl]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import logging
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import DATA, FREE
from pearl_sched import Mode, PoolCapacity, Workload
from pearl_sched.config import PolicyConfig
from pearl_sched.control import plan_resident
from pearl_sched.errors import TelemetryRejected
from pearl_sched.makespan import MakespanModel, PearlMakespanModel, PearlParams
from pearl_sched.makespan_improved import ImprovedMakespanModel, ImprovedParams, PrefillCost, ServingParams
from pearl_sched.profiles.telemetry import (
    CACHED_TOKENS,
    MAX_TOTAL_NUM_TOKENS,
    PROMPT_TOKENS,
    RETRACTED,
    fit_decode_cost,
    observe_serving,
    refit_serving,
)
from pearl_sched.sim.cluster import ObservedStepTimes, SimCluster
from pearl_sched.sim.experiment import setting_for
from pearl_sched.sim.rollout import BatchResult, simulate_batch
from pearl_sched.sim.scenario import Scenario, load_scenario
from pearl_sched.sim.setting import Setting
from pearl_sched.state import ratio_label

SCENARIOS = "e2e,sensitivity/short-batch,swe-qwen3-8b,swe-qwen3-30b-a3b"
TWO_TERM = False
"""``--prefill-cost``: whether the improved predictors charge the fitted two-term prefill cost."""
KV_DECODE = True
"""``--decode-cost``: whether the improved predictors get the decode cost on KV tokens fitted from the run."""
OPT_IN: dict[str, object] = {}
"""``--shared-prompts``: the improved predictors' opt-in serving flags this run turns on."""
MODELS = (
    "pearl",
    "improved-prior",
    "improved",
    "improved-own",
    "improved-turns",
    "improved-queue",
    "improved-turns-queue",
)
TURNS: dict[str, object] = {"live_share": "turn_counts"}
"""``improved-turns``: the live share from the batch's turn counts."""
QUEUE: dict[str, object] = {"pd_prefill_queue": True}
"""``improved-queue``: the PD prefill pool's queue in the cycle."""


def scenario_named(name: str) -> Scenario:
    """A shipped scenario, or one variant of it (``sensitivity/short-batch``)."""
    base, _, variant = name.partition("/")
    scenario = load_scenario(base)
    if not variant:
        return scenario
    for expanded in scenario.expand():
        if expanded.name == name:
            return expanded
    raise SystemExit(f"scenario {base} has no variant {variant!r}")


def prefill_cost(run: Run) -> PrefillCost | None:
    """The two-term prefill cost fitted from the run's prefill steps (None without a spread in context)."""
    return run.observed.prefill_cost()


def prefill_fits(run: Run, tp: int, gpu_type: str) -> dict[str, object]:
    """The run's step fits as serving fields: prefill (through the origin, with the per-batch intercept) and decode.

    The decode cost on KV tokens (``KV_DECODE``) is fitted from the run's decode iterations as the simulated cluster
    fits it (``SimCluster._refit_decode_costs``); none where they cannot be fitted (PEARL's A + b·n then).
    """
    fits: dict[str, object] = {
        "prefill_cost": prefill_cost(run),
        "prefill_step_cost": run.observed.prefill_step_cost(by_context=TWO_TERM),
    }
    if KV_DECODE:
        try:
            fits["decode_costs"] = (fit_decode_cost(run.observed.decode_sums(), gpu_type=gpu_type, tp=tp),)
        except TelemetryRejected as exc:
            logging.getLogger(__name__).info("no decode cost on KV tokens: %s", exc.reason)
    return fits


@dataclasses.dataclass
class Run:
    """One simulated configuration and the telemetry its workers would report."""

    capacity: PoolCapacity
    result: BatchResult
    observed: ObservedStepTimes


def simulate(setting: Setting, capacity: PoolCapacity) -> Run:
    """The step-0 batch on a configuration, its step times recorded as the workers measure them."""
    observed = ObservedStepTimes(setting.steps, setting.step_overhead_s)
    pool = setting.pool(capacity.mode, int(capacity.prefill), int(capacity.decode), int(capacity.colocated))
    result = simulate_batch(dataclasses.replace(pool, step_times=observed), setting.batch(0))
    return Run(capacity, result, observed)


def fitted_params(setting: Setting, run: Run) -> PearlParams:
    """PEARL's parameters refitted from one run's observed step times (the setting's fit where they cannot be)."""
    prior = setting.pearl_params
    device = run.observed.fit(prior.devices[0]) or prior.devices[0]
    return prior.model_copy(update={"devices": (device,), "source": "refitted from one run's observed steps"})


def serving_from(setting: Setting, run: Run) -> ServingParams:
    """The improved predictor's serving parameters fitted from the run's SGLang series."""
    r = run.result
    c = run.capacity
    workers = c.colocated + c.prefill + c.decode
    before = {PROMPT_TOKENS: 0.0, CACHED_TOKENS: 0.0, RETRACTED: 0.0}
    after = {
        PROMPT_TOKENS: float(r.prefill_tokens + r.cache_hit_tokens),
        CACHED_TOKENS: float(r.cache_hit_tokens),
        RETRACTED: float(r.retractions),
        MAX_TOTAL_NUM_TOKENS: float(setting.kv_pool_tokens) * workers,
    }
    turns = sum(len(t.turns) for t in setting.batch(0))
    observation = observe_serving(
        before, after, turns=turns, prefill_workers=c.prefill, decode_workers=c.decode, colocated_workers=c.colocated
    )
    refitted = refit_serving(setting.serving_params(), c.mode, observation, after, workers=workers)
    fits = prefill_fits(run, setting.scenario.tp, setting.gpu_type)
    return refitted.model_copy(update={**fits, "prefill_cost_by_context": TWO_TERM, **OPT_IN})


def prior_serving(setting: Setting, run: Run) -> ServingParams:
    """SGLang's launch settings, and the two-term prefill cost fitted from the run's steps (as t_p is)."""
    fits = prefill_fits(run, setting.scenario.tp, setting.gpu_type)
    return setting.serving_params(**fits, prefill_cost_by_context=TWO_TERM, **OPT_IN)


def improved(params: PearlParams, serving: ServingParams) -> MakespanModel:
    """The improved predictor on PEARL parameters and serving parameters."""
    return ImprovedMakespanModel(ImprovedParams(pearl=params, serving=serving))


def mape(predicted: list[float], truth: list[float]) -> float:
    """Mean absolute percentage error."""
    return 100 * statistics.fmean(abs(p - t) / t for p, t in zip(predicted, truth, strict=True))


def scenario_accuracy(name: str, gpu_counts: list[int], data: Path) -> dict[str, list[float]]:
    """Print each configuration's simulated and predicted makespans; return the MAPEs per model."""
    setting = setting_for(scenario_named(name), data)
    tp = setting.scenario.tp
    workload = setting.workload()
    errors: dict[str, list[float]] = {m: [] for m in MODELS}
    print(f"# {name}: {setting.steps.source}; KV pool {setting.kv_pool_tokens} tokens/worker", flush=True)
    for gpus in gpu_counts:
        n = gpus // tp
        if n < 2:
            continue
        configs = [PoolCapacity(mode=Mode.COLOCATED, colocated=n)] + [
            PoolCapacity(mode=Mode.DISAGGREGATED, prefill=p, decode=n - p) for p in range(1, n)
        ]
        runs = [simulate(setting, c) for c in configs]
        ran = runs[0]  # the colocated run reports the telemetry every predictor is fitted from
        params = fitted_params(setting, ran)
        theta_workload = workload.model_copy(update={"bubble_ratio": ran.result.bubble_ratio})
        pearl = PearlMakespanModel(params)
        prior = improved(params, prior_serving(setting, ran))
        cost = prefill_cost(ran)
        step = ran.observed.prefill_step_cost(by_context=TWO_TERM)
        print(
            f"prefill_cost scenario={name} gpus={gpus} t_p_us={1e6 * params.devices[0].prefill_s_per_token:.2f}"
            + (
                f" alpha_us={1e6 * cost.per_token_s:.2f} beta_ps={1e12 * cost.per_token_context_s:.1f}"
                if cost is not None
                else " two_term=none"
            )
            + (
                f" step_t0_ms={1e3 * step.per_batch_s:.2f} step_alpha_us={1e6 * step.per_token_s:.2f}"
                f" step_beta_ps={1e12 * step.per_token_context_s:.1f}"
                if step is not None
                else " step=none"
            ),
            flush=True,
        )
        serving = serving_from(setting, ran)
        corrected = improved(params, serving)
        counted = improved(params, serving.model_copy(update=TURNS))
        queued = improved(params, serving.model_copy(update=QUEUE))
        counted_queued = improved(params, serving.model_copy(update={**TURNS, **QUEUE}))
        truth = [r.result.makespan_s for r in runs]
        predictions: dict[str, list[float]] = {m: [] for m in MODELS}
        for run in runs:
            c = run.capacity
            own = improved(fitted_params(setting, run), serving_from(setting, run))  # its own t_p and (α, β) too
            values = {
                "pearl": pearl.predict(theta_workload, c).total_s,
                "improved-prior": prior.predict(workload, c).total_s,
                "improved": corrected.predict(workload, c).total_s,
                "improved-own": own.predict(workload, c).total_s,
                "improved-turns": counted.predict(workload, c).total_s,
                "improved-queue": queued.predict(workload, c).total_s,
                "improved-turns-queue": counted_queued.predict(workload, c).total_s,
            }
            for model, value in values.items():
                predictions[model].append(value)
            r = run.result
            hit = r.cache_hit_tokens / max(1.0, r.prefill_tokens + r.cache_hit_tokens)
            label = ratio_label(c.mode, int(c.prefill), int(c.decode), int(c.colocated))
            print(
                f"predict scenario={name} gpus={gpus} config={label} sim_s={r.makespan_s:.0f} "
                + " ".join(f"{m}_s={v:.0f}" for m, v in values.items())
                + f" sim_hit={hit:.3f} improved_hit={corrected.token_hit_rate(workload, c):.3f}"
                + f" retractions={r.retractions}",
                flush=True,
            )
        decisions(name, setting, gpus, runs, params, ran)
        best = min(truth)
        for model in MODELS:
            error = mape(predictions[model], truth)
            errors[model].append(error)
            pick = truth[min(range(len(configs)), key=lambda i: predictions[model][i])]
            print(
                f"predict_mape scenario={name} gpus={gpus} model={model} mape_pct={error:.1f}"
                f" best_pick_gap_pct={100 * (pick - best) / best:.1f} n={len(configs)}",
                flush=True,
            )
            for mode in Mode:
                chosen = [i for i, c in enumerate(configs) if c.mode is mode]
                mode_error = mape([predictions[model][i] for i in chosen], [truth[i] for i in chosen])
                print(
                    f"predict_mape_mode scenario={name} gpus={gpus} model={model} mode={mode.value}"
                    f" mape_pct={mode_error:.1f} n={len(chosen)}",
                    flush=True,
                )
    return errors


def decisions(name: str, setting: Setting, gpus: int, runs: list[Run], params: PearlParams, ran: Run) -> None:
    """What plan() chooses with each predictor at ``gpus``, against the simulated best of the configurations."""
    measured = {
        ratio_label(r.capacity.mode, int(r.capacity.prefill), int(r.capacity.decode), int(r.capacity.colocated)): (
            r.result.makespan_s
        )
        for r in runs
    }
    best = min(measured, key=lambda k: measured[k])
    cluster = SimCluster(setting, costs=FREE, dedicated_gpus=gpus, preemptible_gpus=0)
    cluster.trainer_idle_at = float("inf")  # no training GPUs to lend: the pool is the interval's
    state = cluster.observe()
    theta = state.workload.model_copy(update={"bubble_ratio": ran.result.bubble_ratio})
    serving = serving_from(setting, ran)
    refitted = improved(params, serving)
    turns_queue = improved(params, serving.model_copy(update={**TURNS, **QUEUE}))
    unchecked = PolicyConfig(mode_by_predict=False)  # the surrogate's optimum standing (the planner before s16)
    models: dict[tuple[str, str], tuple[MakespanModel, Workload, PolicyConfig | None]] = {
        ("pearl", "prior"): (setting.predictor("pearl"), state.workload, None),
        ("improved", "prior"): (
            setting.predictor("improved", serving=setting.serving_params(**OPT_IN)),
            state.workload,
            None,
        ),
        ("pearl", "refit"): (PearlMakespanModel(params), theta, None),
        ("improved", "refit"): (refitted, state.workload, None),
        ("improved-turns", "refit"): (improved(params, serving.model_copy(update=TURNS)), state.workload, None),
        ("improved-queue", "refit"): (improved(params, serving.model_copy(update=QUEUE)), state.workload, None),
        ("improved-turns-queue", "refit"): (turns_queue, state.workload, None),
        ("improved", "refit-unchecked"): (refitted, state.workload, unchecked),
        ("improved-turns-queue", "refit-unchecked"): (turns_queue, state.workload, unchecked),
    }
    for (model, fit), (predictor, workload, policy) in models.items():
        plan, _ = plan_resident(state.model_copy(update={"workload": workload}), predictor, costs=FREE, policy=policy)
        chosen = plan.ratio
        if chosen not in measured:  # a configuration using fewer GPUs than the sweep's
            capacity = PoolCapacity(
                mode=plan.mode,
                prefill=plan.prefill_workers,
                decode=plan.decode_workers,
                colocated=plan.colocated_workers,
            )
            measured[chosen] = simulate(setting, capacity).result.makespan_s
        gap = 100 * (measured[chosen] - measured[best]) / measured[best]
        print(
            f"decide scenario={name} gpus={gpus} model={model} fit={fit} chosen={chosen} best={best} gap_pct={gap:.1f}",
            flush=True,
        )


def measured_accuracy(limit: int) -> None:
    """PEARL's and the improved predictor's error against the measured SGLang serving rows (bench/validate.py's)."""
    import aiconfigurator_core

    from bench import validate
    from pearl_sched.profiles.to_pearl import fit_device

    path = Path(aiconfigurator_core.__file__).parent / "systems" / "silicon_sample.csv"
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["backend"] == "sglang" and r["mode"] == "agg"]
    rows = [{k: ("" if v == "nan" else v) for k, v in r.items()} for r in rows][:limit]
    cache: dict[tuple[object, ...], object] = {}
    errors: dict[tuple[str, str], list[float]] = {}
    skipped = 0
    for row in rows:
        engine = validate._engine(row, cache)  # type: ignore[arg-type]
        if isinstance(engine, str):
            skipped += 1
            continue
        isl, osl, conc = int(row["isl"]), int(row["osl"]), int(float(row["batch_size"]))
        pool = float(validate.POOLS[engine])
        measured = float(row["silicon_ttft_ms"]) / 1e3 + (osl - 1) * float(row["silicon_tpot_ms"]) / 1e3
        try:
            device = fit_device(
                gpu_type=row["system"],
                tp=validate._int(row["tp_size"]) or 1,
                prefill_s=lambda n, c, e=engine: e.prefill_s(n, 1, c),
                decode_s=lambda b, c, e=engine: e.decode_s(max(1, round(b)), c),
                context_tokens=isl + osl / 2,
                appended_tokens=isl,
                max_batch=max(2, conc),
                kv_capacity=pool,
            )
        except Exception as exc:  # an engine call outside its coverage: the row is skipped and counted
            logging.getLogger(__name__).debug("row %s skipped: %s", row["id"], exc)
            skipped += 1
            continue
        params = PearlParams(devices=(device,), switch_overhead_s=0.0, kv_bandwidth_bytes_per_s=1e12, source="aic")
        one_turn = dict(batch_size=conc, unfinished=conc, turns=1.0, generated_tokens_per_turn=float(osl))
        common = dict(env_time_per_turn_s=0.0, kv_bytes_per_token=1.0, max_context_tokens=float(isl + osl))
        pearl_load = Workload(
            **one_turn, **common, appended_tokens_per_turn=float(isl), mean_context_tokens=isl + osl / 2
        )
        ours_load = Workload(
            **one_turn,
            **common,
            appended_tokens_per_turn=0.0,
            prompt_tokens=float(isl),
            mean_context_tokens=isl + osl / 2,
        )
        capacity = PoolCapacity(mode=Mode.COLOCATED, colocated=1)
        dataset = "silicon-sglang-kvbound" if conc * (isl + osl) > pool else "silicon-sglang"
        predicted = {
            "pearl": PearlMakespanModel(params).predict(pearl_load, capacity).total_s,
            "improved": improved(params, ServingParams(kv_pool_tokens=pool)).predict(ours_load, capacity).total_s,
        }
        for model, value in predicted.items():
            errors.setdefault((dataset, model), []).append(abs(value - measured) / measured * 100)
    for (dataset, model), values in sorted(errors.items()):
        error = statistics.fmean(values)
        print(f"predict_measured dataset={dataset} model={model} rows={len(values)} mape_pct={error:.1f}")
    print(f"predict_measured skipped={skipped} (rows the engine cannot model)")


def main() -> None:
    """Run the simulated scenarios and the measured rows; print the figures side by side."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default=SCENARIOS)
    parser.add_argument("--gpus", default="8,16")
    parser.add_argument("--silicon-rows", type=int, default=400)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--prefill-cost", choices=("two-term", "one-term"), default="one-term")
    parser.add_argument("--prefill-batch-cost", choices=("on", "off"), default="off")
    parser.add_argument("--shared-prompts", choices=("on", "off"), default="on")
    parser.add_argument("--decode-cost", choices=("kv", "pearl"), default="kv")
    args = parser.parse_args()
    global TWO_TERM, KV_DECODE
    TWO_TERM = args.prefill_cost == "two-term"
    KV_DECODE = args.decode_cost == "kv"
    OPT_IN["shared_prompt_hits"] = args.shared_prompts == "on"
    OPT_IN["prefill_batch_cost"] = args.prefill_batch_cost == "on"
    logging.basicConfig(level=logging.WARNING)
    gpu_counts = [int(g) for g in args.gpus.split(",")]
    overall: dict[str, list[float]] = {m: [] for m in MODELS}
    for name in args.scenarios.split(","):
        for model, values in scenario_accuracy(name, gpu_counts, args.data).items():
            overall[model].extend(values)
    for model, values in overall.items():
        if values:
            print(
                f"predict_mape scenario=all model={model} mean_mape_pct={statistics.fmean(values):.1f} n={len(values)}"
            )
    if args.silicon_rows:
        measured_accuracy(args.silicon_rows)


if __name__ == "__main__":
    main()
