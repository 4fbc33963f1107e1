"""What the simulator benchmarks share: the e2e scenario's simulated world, and batches of tau-bench's mean shape.

The world (kernel-composed step times, KV capacity, the P→D link, the PEARL fit) is
:class:`pearl_sched.sim.setting.Setting`, the same one the scenarios run on (docs/simulator.md); the benches
only choose the batch.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from pearl_sched import Mode, TransitionCosts, Workload
from pearl_sched.shared_data import default_data
from pearl_sched.sim import BatchResult, TrajectorySpec, sample_trajectories, simulate_batch
from pearl_sched.sim.experiment import setting_for
from pearl_sched.sim.scenario import load_scenario
from pearl_sched.sim.setting import Setting
from pearl_sched.sim.workload import read_agentic_turns

DATA = default_data()

FREE = TransitionCosts(
    preparation_s=0,
    finalisation_s=0,
    activation_s=0,
    deactivation_s=0,
    role_switch_s=0,
    restart_s=0,
    stop_s=0,
    volatile_decode_s=0,
)


def bench_setting(data: Path) -> Setting:
    """Qwen3-8B on H200 TP2 workers with tau-bench's turns: the e2e scenario's world."""
    return setting_for(load_scenario("e2e").model_copy(update={"trajectories": "tau-bench"}), data)


def tau_bench_shape(data: Path) -> dict[str, float]:
    """Mean first prompt, appended and generated tokens per turn, and 90th-percentile turns of tau-bench."""
    rows = [r for r in read_agentic_turns(data / "agentic" / "agentic_turns.csv") if r.source.startswith("tau-bench")]
    turns: dict[str, int] = {}
    for r in rows:
        turns[r.trajectory_id] = max(turns.get(r.trajectory_id, 0), r.turn_index + 1)
    return {
        "prompt": statistics.fmean(float(r.prompt_tokens) for r in rows if r.turn_index == 0),
        "appended": statistics.fmean(float(r.new_input_tokens) for r in rows if r.turn_index != 0),
        "generated": statistics.fmean(float(r.output_tokens) for r in rows),
        "turns": statistics.quantiles(turns.values(), n=10)[-1],
    }


def mean_shape_trajectories(count: int, shape: dict[str, float], seed: int = 0) -> list[TrajectorySpec]:
    """``count`` trajectories of tau-bench's mean shape, environment times from RollArt's Normal(10 s, 3 s)."""
    return sample_trajectories(
        count,
        turns=round(shape["turns"]),
        prompt_tokens=round(shape["prompt"]),
        appended_tokens=round(shape["appended"]),
        generated_tokens=round(shape["generated"]),
        env_mean_s=10.0,
        env_std_s=3.0,
        seed=seed,
    )


class MeanShapeBatch:
    """A batch of tau-bench's mean shape on a :class:`Setting`'s workers, with PEARL parameters fitted around it."""

    def __init__(self, setting: Setting, trajectories: int, shape: dict[str, float], fit_max_batch: int | None = None):
        self.setting = setting
        self.turns = round(shape["turns"])
        self.shape = shape
        self.trajectories = trajectories
        self.mean_context = shape["prompt"] + self.turns * (shape["appended"] + shape["generated"]) / 2
        self.batch = mean_shape_trajectories(trajectories, shape)
        self.params = setting.fit_pearl_params(
            context_tokens=self.mean_context,
            appended_tokens=shape["appended"],
            max_batch=fit_max_batch or max(2, trajectories // 4),
        )

    def run(self, mode: Mode, prefill: int = 0, decode: int = 0, colocated: int = 0) -> BatchResult:
        """The whole simulation result of the batch on a pool."""
        return simulate_batch(self.setting.pool(mode, prefill, decode, colocated), self.batch)

    def workload(self, bubble_ratio: float = 0.0) -> Workload:
        """The batch in the planner's terms (tau-bench's mean shape, not the sampled batch's statistics)."""
        return Workload(
            batch_size=self.trajectories,
            unfinished=self.trajectories,
            turns=self.turns,
            appended_tokens_per_turn=self.shape["appended"],
            generated_tokens_per_turn=self.shape["generated"],
            env_time_per_turn_s=10.0,
            env_time_std_s=3.0,
            bubble_ratio=bubble_ratio,
            mean_context_tokens=self.mean_context,
            kv_bytes_per_token=self.setting.kv_bytes_per_token,
            prompt_tokens=self.shape["prompt"],
        )
