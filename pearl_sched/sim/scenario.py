"""Scenario files: what a simulated run is made of, versioned in ``pearl_sched/sim/scenarios/``.

A scenario names the model and GPUs, the cluster's zones, the batch, where trajectories and environment times
come from, and its availability segments — each a window of the Bamboo trace scaled, as the file says, to a
target mean of rollout GPUs. Load one with :func:`load_scenario` (a name of a shipped file, or a path).
"""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationError, field_validator, model_validator

from pearl_sched.errors import PearlSchedError
from pearl_sched.input_files import MAX_DOCUMENT_BYTES, InputFileError, read_text
from pearl_sched.sim.availability import AvailabilityTrace
from pearl_sched.state import Frozen, NonNegFloat, PosFloat, WorkerSize, WorkerSizes

SHIPPED = Path(__file__).resolve().parent / "scenarios"

GPUS_PER_NODE = 8
"""GPUs of one simulated node (the cluster numbers each zone's GPUs in nodes of 8, as H100/H200 servers hold)."""


class ScenarioError(PearlSchedError, ValueError):
    """A scenario that cannot be loaded; the message names the file and the field."""


NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
"""A scenario, variant, model or GPU name: one path component that cannot climb out of a folder (no ``/``, no
leading dot), since names become file and folder names (``--out``/<name>, the kernel tables' <gpu>.yaml)."""

# Sizes beyond which `pearl-sched simulate` refuses a scenario file instead of running for hours. The shipped
# e2e scenario (1,024 trajectories a step, 32 GPUs, three 2-hour segments) simulates one policy's segment in
# about 15 s (docs/simulator.md); the wall time grows with trajectories × simulated hours.
LIMITS: dict[str, float] = {
    "trajectories_per_step": 16_384,  # 2× the largest published RL rollout batch we know (512 prompts × 16)
    "gpus": 4_096,  # training + dedicated + preemptible
    "tp": 64,
    "max_length_tokens": 1_048_576,  # the longest context windows of current models (1M tokens)
    "segment_duration_s": 86_400.0,  # one simulated day per segment
    "segments": 64,
    "variants": 64,
    "staleness": 64,
    "env_mean_s": 86_400.0,
}


def check_limits(scenario: Scenario, source: object) -> None:
    """Refuse a scenario too large to simulate in reasonable time, naming the limit (see :data:`LIMITS`).

    Raises:
        ScenarioError: A size over its limit; the message names ``source`` (the file), the field and the limit.
    """
    sizes: dict[str, tuple[str, float]] = {
        "trajectories_per_step": ("batch_prompts × group_size", scenario.trajectories_per_step),
        "gpus": (
            "training_gpus + dedicated_rollout_gpus + max_preemptible_gpus",
            scenario.training_gpus + scenario.dedicated_rollout_gpus + scenario.max_preemptible_gpus,
        ),
        "tp": ("tp", scenario.tp),
        "max_length_tokens": ("max_length_tokens", scenario.max_length_tokens),
        "segment_duration_s": ("segments.*.duration_s", max(s.duration_s for s in scenario.segments)),
        "segments": ("number of segments", len(scenario.segments)),
        "variants": ("number of variants", len(scenario.variants)),
        "staleness": ("staleness", scenario.staleness),
        "env_mean_s": ("env_mean_s", scenario.env_mean_s),
    }
    for key, (field, value) in sizes.items():
        if value > LIMITS[key]:
            raise ScenarioError(
                f"{source}: {field} is {_show(value)}, over the simulator's limit of {LIMITS[key]:g}; "
                "larger settings would run for hours (see docs/reliability.md)"
            )


def _show(value: float) -> str:
    if isinstance(value, int) and len(str(value)) > 15:
        return f"a {len(str(value))}-digit number"
    return f"{value:g}"


def _check_name(value: str, what: str) -> str:
    if not NAME_PATTERN.fullmatch(value):
        raise ValueError(f"{what} must be 1-64 letters, digits, '_', '.', '+' or '-' and start with a letter or digit")
    return value


class Segment(Frozen):
    """A window of the availability trace, scaled to a target mean of rollout GPUs."""

    name: str
    trace_start_s: NonNegFloat
    duration_s: PosFloat
    target_mean_rollout_gpus: NonNegFloat = Field(description="Dedicated + preemptible rollout GPUs, on average")
    fixed_rollout_gpus: int | None = Field(
        default=None, ge=0, description="Hold this many rollout GPUs throughout instead of following the trace"
    )


class HindsightSettings(Frozen):
    """How ``oracle-hindsight`` searches a scenario that declares it (docs/simulator.md, "Oracles")."""

    beam: int | None = Field(
        default=1, ge=1, description="States kept per decision point (null: exhaustive, for small instances only)"
    )
    continuation: bool = Field(
        default=False,
        description="Judge each state also by a continuation that uses every usable worker at the later decision "
        "points, not only by its configuration held to the batch's end",
    )


class Scenario(Frozen):
    """One simulated setting (PEARL §6 for the end-to-end one)."""

    name: str
    description: str
    model: str = Field(description="A shipped model config, e.g. qwen3-8b")
    gpu: str = Field(description="aiconfigurator system folder, e.g. h200_sxm")
    tp: int = Field(default=2, ge=1)
    training_gpus: int = Field(ge=0, description="The trainer's GPUs (the overlap zone)")
    dedicated_rollout_gpus: int = Field(ge=0)
    max_preemptible_gpus: int = Field(ge=0)
    batch_prompts: int = Field(gt=0)
    group_size: int = Field(gt=0)
    max_length_tokens: int = Field(gt=0)
    staleness: int = Field(default=1, ge=0)
    trajectories: str = Field(
        description="Where turns come from: 'tau-bench' or 'tau-bench+mooncake-outputs' (../shared/data/agentic), "
        "or a coding-agent source 'swe-deepseek', 'swe-gemini', 'swe-mini', 'claude-code' (../shared/data/agentic-swe)"
    )
    step_times: Literal["kernel-composition", "aiconfigurator-core"] = Field(
        default="kernel-composition",
        description="Where worker step times come from: aiconfigurator's SGLang kernel tables composed here, or "
        "aiconfigurator-core's compiled engine (the aic extra)",
    )
    backend: Literal["sglang", "vllm", "trtllm"] = Field(
        default="sglang", description="Serving framework the aiconfigurator-core engine models"
    )
    attention_dp: int = Field(
        default=1,
        ge=1,
        description="Attention data-parallel ranks of each worker (SGLang --dp-size with --enable-dp-attention; "
        "divides tp, each rank runs attention at TP tp/attention_dp; aiconfigurator-core step times)",
    )
    moe_ep: int | None = Field(default=None, ge=1, description="MoE expert-parallel size (aiconfigurator-core)")
    output_scale: float = Field(
        default=1.0,
        gt=0,
        description="Multiplier on logged output lengths per turn (an assumption the description must justify)",
    )
    training_mfu: float = Field(
        default=0.35, gt=0, le=1, description="Model-FLOPs utilisation of a training step (an assumption)"
    )
    seed: int = Field(default=0, ge=0, description="Seed of the batches: every policy sees the same work")
    tie_seed: int | None = Field(
        default=None,
        ge=0,
        exclude_if=lambda v: v is None,  # scenarios that do not set it dump (and report) as before
        description="Seed of the gateway's random tie-break among equally scored workers, as smg breaks ties "
        "(none: the batches' seed)",
    )
    cost_scale: float = Field(default=1.0, gt=0, description="Multiplier on every reconfiguration cost")
    policies: tuple[str, ...] = Field(default=(), description="Policies to compare (empty: all)")
    worker_sizes: WorkerSizes | None = Field(
        default=None,
        exclude_if=lambda v: v is None,  # scenarios without sizes dump (and report) as before
        description="Worker sizes pearl_sched's planner may regroup GPUs into, per role (none: every worker keeps "
        "the scenario's size; policies that do not know sizes always keep it)",
    )
    hindsight_search: HindsightSettings | None = Field(
        default=None,
        exclude_if=lambda v: v is None,  # scenarios that do not declare it dump (and report) as before
        description="How oracle-hindsight searches this scenario (none: the shipped default, beam 1 held)",
    )
    variants: tuple[dict[str, Any], ...] = Field(
        default=(), description="Runs of this scenario with fields overridden, each with a 'name'"
    )
    env_mean_s: NonNegFloat
    env_std_s: NonNegFloat
    availability_trace: str = Field(description="Path under ../shared/data")
    scaling: str = Field(description="How the trace's node counts become this pool's GPUs")
    segments: tuple[Segment, ...] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        # A variant's scenario is named "<scenario>/<variant>": each part a plain name.
        for part in value.split("/", 1):
            _check_name(part, "a scenario name")
        return value

    @field_validator("model", "gpu")
    @classmethod
    def _plain_component(cls, value: str) -> str:
        return _check_name(value, "a model or GPU name")

    @field_validator("availability_trace")
    @classmethod
    def _inside_data(cls, value: str) -> str:
        path = PurePosixPath(value)
        if path.is_absolute() or ".." in path.parts or "\\" in value or not value.strip():
            raise ValueError("availability_trace is a relative path inside the data folder, without '..'")
        return value

    @model_validator(mode="after")
    def _sizes_the_simulator_runs(self) -> Scenario:
        if self.tp % self.attention_dp:
            raise ValueError(f"attention_dp ({self.attention_dp}) must divide tp ({self.tp})")
        declared = [z for role in (self.worker_sizes.by_role() if self.worker_sizes else {}).values() for z in role]
        for size in [self.size, *declared]:
            if size.dp > 1 and self.step_times != "aiconfigurator-core":
                raise ValueError(
                    f"a worker size with attention-DP ({_show(size.dp)} ranks) needs the aiconfigurator-core step times"
                )
        for size in declared:  # the scenario's own tp is held to LIMITS when the file loads
            if size.tp > GPUS_PER_NODE:
                raise ValueError(
                    f"worker_sizes: a worker of {_show(size.tp)} GPUs needs more than a simulated node holds"
                    f" ({GPUS_PER_NODE})"
                )
        return self

    @property
    def size(self) -> WorkerSize:
        """The size of every worker of policies that do not choose sizes: ``tp`` GPUs, ``attention_dp`` ranks."""
        return WorkerSize(tp=self.tp, dp=self.attention_dp)

    @property
    def gateway_tie_seed(self) -> int:
        """The seed of the gateway's tie-break: ``tie_seed``, else the batches' ``seed``."""
        return self.seed if self.tie_seed is None else self.tie_seed

    @property
    def trajectories_per_step(self) -> int:
        """Trajectories one RL step rolls out: ``batch_prompts`` prompts × ``group_size`` samples each."""
        return self.batch_prompts * self.group_size

    def expand(self) -> list[Scenario]:
        """This scenario, or one scenario per variant (``name`` suffixed, fields overridden)."""
        if not self.variants:
            return [self]
        out = []
        for variant in self.variants:
            fields = dict(variant)
            name = fields.pop("name", None)
            if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
                raise ScenarioError(
                    f"scenario {self.name}: every variant needs a name of 1-64 letters, digits, '_', '.', '+' or '-'"
                )
            data = {**self.model_dump(mode="json"), **fields, "name": f"{self.name}/{name}", "variants": ()}
            try:
                # Through JSON, strictly: a variant's override is checked like the file it came from.
                out.append(Scenario.model_validate_json(json.dumps(data), strict=True))
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise ScenarioError(f"scenario {self.name}, variant {name}: {where}: {first['msg']}") from None
            except (TypeError, ValueError, RecursionError):  # an override json cannot write (nested too deep)
                raise ScenarioError(f"scenario {self.name}, variant {name}: not a JSON value") from None
        return out

    def availability(self, segment: Segment, data: Path) -> tuple[AvailabilityTrace, float]:
        """Rollout GPUs over the segment (dedicated plus scaled preemptible) and the scaling factor used."""
        if segment.fixed_rollout_gpus is not None:
            count = np.array([float(segment.fixed_rollout_gpus)])
            return AvailabilityTrace(np.zeros(1), count, segment.duration_s), 0.0
        trace = AvailabilityTrace.from_bamboo(data / self.availability_trace)
        window = trace.window(segment.trace_start_s, segment.duration_s)
        target = segment.target_mean_rollout_gpus - self.dedicated_rollout_gpus
        preemptible, factor = window.scaled_to_mean(target, self.max_preemptible_gpus, step=self.tp)
        total = type(preemptible)(
            preemptible.times_s, preemptible.counts + self.dedicated_rollout_gpus, preemptible.end_s
        )
        return total, factor


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A shipped scenario by name (``e2e``) or a scenario file by path.

    A plain name (no folder, no ``.json``) is looked up among the shipped scenarios only, so a name never reads
    a file outside ``pearl_sched/sim/scenarios/``; anything else is read as the path given. Numbers are strict
    (``true`` is not 1), every variant is expanded and checked, and sizes are held to :data:`LIMITS`.

    Raises:
        ScenarioError: An unknown name, an unreadable file or an invalid scenario, in one line naming the file
            and the field (never the file's contents).
    """
    text = str(name_or_path)
    if NAME_PATTERN.fullmatch(text) and not text.endswith(".json"):
        known = shipped_scenarios()
        if text not in known:
            raise ScenarioError(
                f"no shipped scenario named {text!r}; shipped scenarios: {', '.join(known)} "
                "(give a scenario file as a path, e.g. ./my-scenario.json)"
            )
        path = SHIPPED / f"{text}.json"
    else:
        path = Path(name_or_path)
    try:
        scenario = Scenario.model_validate_json(read_text(path, limit_bytes=MAX_DOCUMENT_BYTES), strict=True)
    except InputFileError as exc:
        raise ScenarioError(str(exc)) from None
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p)[:40] for p in first["loc"]) or "(document)"
        message = " ".join(str(first["msg"]).removeprefix("Value error, ").split())
        raise ScenarioError(f"{path}: {where}: {message} ({exc.error_count()} error(s))") from None
    check_limits(scenario, path)
    try:
        variants = scenario.expand()
    except ScenarioError as exc:
        raise ScenarioError(f"{path}: {exc}") from None
    for variant in variants:
        check_limits(variant, f"{path} (variant {variant.name})")
    return scenario


def shipped_scenarios() -> list[str]:
    """Names of the scenarios shipped with pearl_sched."""
    return sorted(p.stem for p in SHIPPED.glob("*.json"))


def dump(scenario: Scenario) -> str:
    """The scenario as the JSON of its file."""
    return json.dumps(scenario.model_dump(mode="json"), indent=2) + "\n"
