"""Scenario files: what a simulated run is made of, versioned in ``pearl_sched/sim/scenarios/``.

A scenario names the model and GPUs, the cluster's zones, the batch, where trajectories and environment times
come from, and its availability segments — each a window of the Bamboo trace scaled, as the file says, to a
target mean of rollout GPUs. Load one with :func:`load_scenario` (a name of a shipped file, or a path).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationError

from pearl_sched.errors import PearlSchedError
from pearl_sched.sim.availability import AvailabilityTrace
from pearl_sched.state import Frozen, NonNegFloat, PosFloat

SHIPPED = Path(__file__).resolve().parent / "scenarios"


class ScenarioError(PearlSchedError, ValueError):
    """A scenario that cannot be loaded; the message names the file and the field."""


class Segment(Frozen):
    """A window of the availability trace, scaled to a target mean of rollout GPUs."""

    name: str
    trace_start_s: NonNegFloat
    duration_s: PosFloat
    target_mean_rollout_gpus: NonNegFloat = Field(description="Dedicated + preemptible rollout GPUs, on average")
    fixed_rollout_gpus: int | None = Field(
        default=None, ge=0, description="Hold this many rollout GPUs throughout instead of following the trace"
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
    attention_dp: int = Field(default=1, ge=1, description="Attention data-parallel size (aiconfigurator-core)")
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
    cost_scale: float = Field(default=1.0, gt=0, description="Multiplier on every reconfiguration cost")
    policies: tuple[str, ...] = Field(default=(), description="Policies to compare (empty: all)")
    variants: tuple[dict[str, Any], ...] = Field(
        default=(), description="Runs of this scenario with fields overridden, each with a 'name'"
    )
    env_mean_s: NonNegFloat
    env_std_s: NonNegFloat
    availability_trace: str = Field(description="Path under ../shared/data")
    scaling: str = Field(description="How the trace's node counts become this pool's GPUs")
    segments: tuple[Segment, ...] = Field(min_length=1)

    @property
    def trajectories_per_step(self) -> int:
        return self.batch_prompts * self.group_size

    def expand(self) -> list[Scenario]:
        """This scenario, or one scenario per variant (``name`` suffixed, fields overridden)."""
        if not self.variants:
            return [self]
        out = []
        for variant in self.variants:
            fields = dict(variant)
            name = fields.pop("name", None)
            if not name:
                raise ScenarioError(f"scenario {self.name}: every variant needs a name")
            data = {**self.model_dump(), **fields, "name": f"{self.name}/{name}", "variants": ()}
            try:
                out.append(Scenario.model_validate(data))
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise ScenarioError(f"scenario {self.name}, variant {name}: {where}: {first['msg']}") from None
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
    """A shipped scenario by name (``e2e``) or a scenario file by path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = SHIPPED / f"{name_or_path}.json"
    try:
        return Scenario.model_validate_json(path.read_text())
    except OSError as exc:
        known = sorted(p.stem for p in SHIPPED.glob("*.json"))
        raise ScenarioError(f"{path}: cannot read ({exc.strerror or exc}); shipped scenarios: {known}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ScenarioError(f"{path}: {where}: {first['msg']} ({exc.error_count()} error(s))") from None


def shipped_scenarios() -> list[str]:
    """Names of the scenarios shipped with pearl_sched."""
    return sorted(p.stem for p in SHIPPED.glob("*.json"))


def dump(scenario: Scenario) -> str:
    """The scenario as the JSON of its file."""
    return json.dumps(scenario.model_dump(mode="json"), indent=2) + "\n"
