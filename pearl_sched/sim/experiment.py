"""Run a scenario's segments under several policies and compare them (``pearl-sched simulate`` and ``demo``).

Each (policy, segment) pair is an independent simulation, so they run in parallel processes. The report has
each policy's step throughput per segment and end to end — Σ (generated + training tokens) / Σ step time —
and its ratio to ROLL, to PEARL-faithful and to an oracle when those ran (``oracle-hindsight`` if it ran, else
``oracle-static``; the row says which).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.control import PlannerDecider
from pearl_sched.errors import MissingExtraError
from pearl_sched.plans import PolicyState
from pearl_sched.shared_data import DEFAULT_DATA as DEFAULT_DATA
from pearl_sched.shared_data import default_data as default_data
from pearl_sched.sim.availability import AvailabilityTrace
from pearl_sched.sim.baselines import POLICIES, fixed_pool_gpus
from pearl_sched.sim.cluster import SegmentResult, run_segment
from pearl_sched.sim.hindsight import HindsightSearch
from pearl_sched.sim.scenario import Scenario, ScenarioError
from pearl_sched.sim.setting import Setting

SLOW_POLICIES = ("oracle-hindsight", "oracle-lookahead", "oracle-static")
"""The policies that simulate ahead: several times a planner's run, so their runs are started first."""

SIZED_POLICIES = (
    "pearl_sched",
    "pearl_sched-no-borrow",
    "pearl_sched-one-batch",
    "pearl_sched-prepared",
    "ungated",
    "oracle-hindsight",
)
"""The policies that may choose worker sizes when the scenario declares ``worker_sizes``: pearl_sched's planner and
the hindsight search (its yardstick searches the sizes too); every other one (PEARL-faithful, the baselines,
``oracle-static``) keeps the scenario's one size."""


def costs_for(scenario: Scenario) -> TransitionCosts:
    """PEARL Table 3 for the scenario's model (Qwen3-8B's for others), scaled by ``cost_scale``.

    With ``worker_sizes``, a new worker's preparation is per TP degree
    (:meth:`~pearl_sched.config.TransitionCosts.pearl_table3_by_tp`, the extrapolation the planner charges too).
    """
    model = scenario.model if scenario.model in ("qwen3-8b", "qwen3-30b-a3b") else "qwen3-8b"
    if scenario.worker_sizes is not None:
        tps = tuple(sorted(scenario.worker_sizes.tps | {scenario.tp}))
        base = TransitionCosts.pearl_table3_by_tp(model, tps)  # type: ignore[arg-type]
    else:
        base = TransitionCosts.pearl_table3(model)  # type: ignore[arg-type]
    if scenario.cost_scale == 1.0:
        return base
    data = {
        k: v * scenario.cost_scale
        for k, v in base.model_dump().items()
        if k not in ("volatile_decode_s", "preparation_s_by_tp")
    }
    if base.preparation_s_by_tp:
        data["preparation_s_by_tp"] = {tp: v * scenario.cost_scale for tp, v in base.preparation_s_by_tp.items()}
    return base.model_copy(update=data)


@dataclass
class PolicyRun:
    """One policy over every segment of a scenario."""

    scenario: str
    policy: str
    segments: list[SegmentResult] = field(default_factory=list)

    @property
    def throughput_tok_s(self) -> float:
        """End-to-end step throughput in tokens/s: Σ (generated + training tokens) / Σ step time over all segments.

        0 when no step finished.
        """
        time = sum(s.step_time_s for seg in self.segments for s in seg.steps)
        tokens = sum(s.generated_tokens + s.training_tokens for seg in self.segments for s in seg.steps)
        return tokens / time if time > 0 else 0.0


@dataclass
class Report:
    """Every policy's runs of one scenario."""

    scenario: Scenario
    runs: dict[str, PolicyRun]
    wall_s: float = 0.0

    def ratio(self, policy: str, baseline: str, segment: str | None = None) -> float | None:
        """``policy``'s step throughput over ``baseline``'s, end to end or on one segment.

        Args:
            policy: The policy compared.
            baseline: The policy it is compared to.
            segment: A segment's name; ``None``: end to end.

        Returns:
            The ratio, or ``None`` when either policy did not run or the baseline's throughput is 0.

        Raises:
            ScenarioError: ``segment`` is not one of the segments both policies ran (the message names the run
                missing it and the segments it has).
        """
        if policy not in self.runs or baseline not in self.runs:
            return None
        a, b = self.runs[policy], self.runs[baseline]
        if segment is None:
            x, y = a.throughput_tok_s, b.throughput_tok_s
        else:
            x, y = self._segment(a, segment).throughput_tok_s, self._segment(b, segment).throughput_tok_s
        return x / y if y > 0 else None

    def _segment(self, run: PolicyRun, segment: str) -> SegmentResult:
        found = next((s for s in run.segments if s.segment == segment), None)
        if found is None:
            ran = ", ".join(s.segment for s in run.segments) or "none"
            raise ScenarioError(
                f"scenario {self.scenario.name!r}: policy {run.policy!r} has no run of segment {segment!r}"
                f" (it ran: {ran})"
            )
        return found

    def oracle(self) -> str | None:
        """The oracle the ``vs_oracle`` ratios use: ``oracle-hindsight`` when it ran, else ``oracle-static``."""
        return next((name for name in ("oracle-hindsight", "oracle-static") if name in self.runs), None)

    def rows(self) -> list[dict[str, Any]]:
        """One row per policy: throughput per segment and end to end, and the ratios."""
        out = []
        for name, run in self.runs.items():
            row: dict[str, Any] = {"policy": name}
            for seg in run.segments:
                row[seg.segment] = seg.throughput_tok_s
            row["end_to_end"] = run.throughput_tok_s
            for base in ("roll", "pearl"):
                row[f"vs_{base}"] = self.ratio(name, base)
            oracle = self.oracle()
            row["vs_oracle"] = self.ratio(name, oracle) if oracle is not None else None
            row["oracle"] = oracle.removeprefix("oracle-") if oracle is not None else None
            row["steps"] = sum(len(seg.steps) for seg in run.segments)
            row["carried_over"] = sum(seg.carried_over for seg in run.segments)
            out.append(row)
        return out

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data: the scenario, the wall time, :meth:`rows`, and every segment's run.

        Each run keeps its steps (with their throughput) and its role timeline; a run's wall time is left out, so
        the same scenario gives the same JSON however it was run (serial, processes, Ray) apart from ``wall_s``.
        """
        return {
            "scenario": self.scenario.model_dump(mode="json"),
            "wall_s": self.wall_s,
            "summary": self.rows(),
            "runs": {
                name: [
                    {
                        **{k: v for k, v in asdict(seg).items() if k not in ("steps", "timeline", "wall_s")},
                        "throughput_tok_s": seg.throughput_tok_s,
                        "steps": [{**asdict(s), "throughput_tok_s": s.throughput_tok_s} for s in seg.steps],
                        "timeline": seg.timeline,
                    }
                    for seg in run.segments
                ]
                for name, run in self.runs.items()
            },
        }

    def write(self, path: Path) -> None:
        """Write :meth:`to_json` to ``path`` (parent folders created).

        Raises:
            OSError: ``path`` or its folder cannot be written.
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")


def _job(scenario_json: str, policy: str, segment_index: int, data: str, tick_s: float) -> SegmentResult:
    scenario = Scenario.model_validate_json(scenario_json)
    return run_policy_segment(scenario, policy, segment_index, Path(data), tick_s=tick_s)


_SETTINGS: dict[str, Setting] = {}
_HAZARDS: dict[str, float] = {}


def fitted_hazard_per_s(scenario: Scenario, data: Path) -> float:
    """Preemptions per GPU-second over the scenario's whole availability trace, memoised per trace file.

    Counted per node of the trace, before any segment's scaling: the history an operator has before a run, used
    as the prior of the expansion gate.

    Args:
        scenario: The scenario whose ``availability_trace`` is read.
        data: The shared data folder the trace path is relative to.
    """
    path = data / scenario.availability_trace
    if str(path) not in _HAZARDS:
        _HAZARDS[str(path)] = AvailabilityTrace.from_bamboo(path).preemption_hazard_per_s()
    return _HAZARDS[str(path)]


def setting_for(scenario: Scenario, data: Path) -> Setting:
    """The scenario's :class:`Setting`, built once per process."""
    key = scenario.model_dump_json() + str(data)
    if key not in _SETTINGS:
        _SETTINGS[key] = Setting.load(scenario, data)
    return _SETTINGS[key]


def hindsight_search(scenario: Scenario, name: str = "oracle-hindsight") -> HindsightSearch:
    """The hindsight search ``scenario`` runs as ``oracle-hindsight``: the shipped one, or as the scenario declares it.

    Args:
        scenario: The scenario; its ``hindsight_search`` (beam, continuation), when set, replaces the shipped
            search's (beam 1, each state judged held to the batch's end).
        name: The policy's name in reports.
    """
    settings = scenario.hindsight_search
    if settings is None:
        return HindsightSearch(name)
    return HindsightSearch(name, beam=settings.beam, continuation=settings.continuation)


def run_policy_segment(
    scenario: Scenario,
    policy: str,
    segment_index: int,
    data: Path,
    *,
    tick_s: float = 60.0,
    config: PolicyConfig | None = None,
) -> SegmentResult:
    """One policy over one segment (``config``: the policy settings, default :class:`PolicyConfig`'s)."""
    if policy not in POLICIES:
        raise ScenarioError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    spec = POLICIES[policy]
    setting = setting_for(scenario, data)
    segment = scenario.segments[segment_index]
    trace, factor = scenario.availability(segment, data)
    fixed = fixed_pool_gpus(spec, scenario.dedicated_rollout_gpus, trace.mean(), scenario.tp)
    if fixed is not None:
        trace = AvailabilityTrace(np.zeros(1), np.array([float(fixed)]), trace.end_s)
    costs = costs_for(scenario)
    config = config or PolicyConfig()
    decider = spec.build(setting, costs, config)
    if isinstance(decider, HindsightSearch):
        decider = hindsight_search(scenario, decider.name)
    if spec.fitted_hazard and isinstance(decider, PlannerDecider):
        decider.policy_state = PolicyState(preemption_hazard_per_s=fitted_hazard_per_s(scenario, data))
    started = time.perf_counter()
    result = run_segment(
        setting,
        trace,
        decider,
        costs=costs,
        policy=config,
        segment=segment.name,
        scaling_factor=factor,
        tick_s=tick_s,
        allow_borrow=spec.allow_borrow,
        dedicated_gpus=fixed,
        preemptible_gpus=0 if fixed is not None else None,
        worker_sizes=scenario.worker_sizes if policy in SIZED_POLICIES else None,
        background_preparation=spec.background_preparation,
    )
    simulations = int(getattr(decider, "simulations", 0))  # the oracles that simulate ahead count their copies
    return dataclasses.replace(result, wall_s=time.perf_counter() - started, simulations=simulations)


def run_scenario(
    scenario: Scenario,
    policies: Sequence[str],
    data: Path,
    *,
    processes: int = 1,
    tick_s: float = 60.0,
    on_done: Callable[[str, str], None] | None = None,
    ray: bool = False,
    ray_address: str | None = None,
) -> Report:
    """Every policy over every segment.

    Args:
        scenario: The scenario.
        policies: Policy names (:data:`~pearl_sched.sim.baselines.POLICIES`).
        data: The shared data directory; with Ray on a real cluster it must be at this path on every node.
        processes: More than 1 runs the (policy, segment) pairs in that many local processes.
        tick_s: The periodic decision tick.
        on_done: Called with (policy, segment) as each pair finishes.
        ray: Run each pair as a Ray task instead (the ``ray`` extra); results are the same as serial.
        ray_address: The Ray cluster to join (``ray.init(address=...)``); None starts a local one.
    """
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ScenarioError(f"unknown policies {unknown}; known: {', '.join(POLICIES)}")
    start = time.perf_counter()
    setting_for(scenario, data)  # fail early on bad data, before spawning
    jobs = [(p, i) for p in policies for i in range(len(scenario.segments))]
    jobs.sort(key=lambda job: job[0] not in SLOW_POLICIES)  # the longest runs start first (results are keyed)
    results: dict[tuple[str, int], SegmentResult] = {}
    if ray or ray_address is not None:
        results = _run_on_ray(scenario, jobs, data, tick_s, ray_address, on_done)
    elif processes <= 1:
        for p, i in jobs:
            results[(p, i)] = run_policy_segment(scenario, p, i, data, tick_s=tick_s)
            if on_done is not None:
                on_done(p, scenario.segments[i].name)
    else:
        text = scenario.model_dump_json()
        with ProcessPoolExecutor(max_workers=processes) as pool:
            futures = {pool.submit(_job, text, p, i, str(data), tick_s): (p, i) for p, i in jobs}
            for future in as_completed(futures):
                p, i = futures[future]
                results[(p, i)] = future.result()
                if on_done is not None:
                    on_done(p, scenario.segments[i].name)
    runs = {p: PolicyRun(scenario.name, p, [results[(p, i)] for i in range(len(scenario.segments))]) for p in policies}
    return Report(scenario, runs, time.perf_counter() - start)


def _run_on_ray(
    scenario: Scenario,
    jobs: Sequence[tuple[str, int]],
    data: Path,
    tick_s: float,
    address: str | None,
    on_done: Callable[[str, str], None] | None,
) -> dict[tuple[str, int], SegmentResult]:
    """Each (policy, segment) pair as a Ray task (one CPU each); a pair is deterministic, so the order is free."""
    try:
        import ray
    except ImportError as exc:
        raise MissingExtraError("ray", "ray") from exc
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    task = ray.remote(num_cpus=1)(_job)
    text = scenario.model_dump_json()
    refs = {task.remote(text, p, i, str(data), tick_s): (p, i) for p, i in jobs}
    results: dict[tuple[str, int], SegmentResult] = {}
    waiting = list(refs)
    while waiting:
        done, waiting = ray.wait(waiting, num_returns=1)
        for ref in done:
            p, i = refs[ref]
            results[(p, i)] = ray.get(ref)
            if on_done is not None:
                on_done(p, scenario.segments[i].name)
    return results
