"""Coding-agent trajectories (agentic-swe) and the scenarios that use them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pearl_sched.sim.scenario import ScenarioError, load_scenario
from pearl_sched.sim.swe_workload import REQUIRED_COLUMNS, CodingAgentTurns
from pearl_sched.sim.workload import WorkloadDataError
from tests.builders import DATA

SWE = DATA / "agentic-swe"
needs_data = pytest.mark.needs_data  # skips without the data; fails under PEARL_SCHED_REQUIRE_DATA=1

HEADER = ",".join(REQUIRED_COLUMNS)


def _write(tmp_path: Path, rows: list[str], header: str = HEADER) -> Path:
    (tmp_path / "swe_agent_turns.csv").write_text("\n".join([header, *rows]) + "\n")
    return tmp_path


def _row(tid: str, k: int, prompt: int, out: int, new: int, tool: str) -> str:
    return f"msa-deepseek-swebench-lite,{tid},{k},{prompt},{out},{new},{tool}"


def test_turns_follow_the_log(tmp_path: Path) -> None:
    folder = _write(
        tmp_path, [_row("a", 0, 100, 10, 100, "0.5"), _row("a", 1, 150, 20, 40, "1.5"), _row("a", 2, 215, 5, 45, "")]
    )
    turns = CodingAgentTurns.load(folder, "swe-deepseek")
    (traj,) = turns.sample(1, env_mean_s=9.0, env_std_s=0.0, max_length=10_000, seed=0)
    assert [(t.appended_tokens, t.generated_tokens, t.env_after_s) for t in traj.turns] == [
        (100, 10, 0.5),
        (40, 20, 1.5),
        (45, 5, 0.0),
    ]


def test_missing_tool_latency_is_drawn_and_the_cut_is_at_max_length(tmp_path: Path) -> None:
    folder = _write(tmp_path, [_row("a", 0, 100, 10, 100, ""), _row("a", 1, 150, 500, 40, "")])
    (traj,) = CodingAgentTurns.load(folder, "swe-deepseek").sample(
        1, env_mean_s=7.0, env_std_s=0.0, max_length=300, seed=0
    )
    assert traj.turns[0].env_after_s == 7.0
    assert traj.turns[-1].generated_tokens == 300 - 100 - 10 - 40
    assert sum(t.appended_tokens + t.generated_tokens for t in traj.turns) == 300


def test_missing_columns_are_refused_with_the_file(tmp_path: Path) -> None:
    folder = _write(tmp_path, ["x"], header="source,trajectory_id,turn_index")
    with pytest.raises(WorkloadDataError, match=r"swe_agent_turns.csv: missing column\(s\) prompt_tokens"):
        CodingAgentTurns.load(folder, "swe-deepseek")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (_row("b", 1, 150, -3, 40, "0.1"), "output_tokens='-3'"),
        (_row("b", 1, 150, 3, 40, "-0.7"), "tool_latency_s='-0.7'"),
        (_row("b", 1, 150, 3.5, 40, "0.1"), "output_tokens='3.5'"),
        (_row("b", 1, 150, 3, 40, "soon"), "tool_latency_s='soon'"),
        (_row("b", 2, 150, 3, 40, "0.1"), "turn_index 2 where 1 was expected"),
    ],
)
def test_impossible_values_refuse_the_trajectory_with_file_and_line(tmp_path: Path, bad: str, message: str) -> None:
    rows = [_row("a", 0, 100, 10, 100, "0.5"), _row("b", 0, 100, 10, 100, "0.5"), bad]
    folder = _write(tmp_path, rows)
    turns = CodingAgentTurns.load(folder, "swe-deepseek")
    assert len(turns.trajectories) == 1
    (reason,) = turns.refused
    assert "swe_agent_turns.csv:4" in reason and message in reason
    with pytest.raises(WorkloadDataError, match=r"swe_agent_turns\.csv:4"):
        CodingAgentTurns.load(folder, "swe-deepseek", strict=True)


def test_unknown_source_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(WorkloadDataError, match="known: swe-deepseek"):
        CodingAgentTurns.load(tmp_path, "swe-llama")


@needs_data
def test_real_runs_have_the_documented_shape() -> None:
    deepseek = CodingAgentTurns.load(SWE, "swe-deepseek")
    assert len(deepseek.trajectories) + len(deepseek.refused) == 201
    assert deepseek.tool_latency_logged > 0.99
    calls = sorted(len(t.generated) for t in deepseek.trajectories)
    assert 60 <= calls[len(calls) // 2] <= 90
    gemini = CodingAgentTurns.load(SWE, "swe-gemini")
    assert len(gemini.trajectories) == 500 and gemini.tool_latency_logged == 0.0
    claude = CodingAgentTurns.load(SWE, "claude-code")
    assert len(claude.trajectories) == 213
    batch = claude.sample(64, env_mean_s=1.0, env_std_s=0.0, max_length=65536, seed=3)
    assert all(sum(t.appended_tokens + t.generated_tokens for t in b.turns) <= 65536 for b in batch)
    assert all(not math.isnan(t.env_after_s) for b in batch for t in b.turns)


@needs_data
@pytest.mark.parametrize("name", ["swe-qwen3-8b", "swe-qwen3-30b-a3b"])
def test_swe_scenarios_select_the_engine_and_their_trajectories(name: str) -> None:
    pytest.importorskip("aiconfigurator_core", reason="the aic extra is not installed")
    from pearl_sched.sim.sources import step_times_for, trajectories_for

    scenario = load_scenario(name)
    assert scenario.step_times == "aiconfigurator-core"
    runs = {s.name.split("/")[1]: s for s in scenario.expand()}
    assert runs["32k"].max_length_tokens == 32768 and runs["64k"].max_length_tokens == 65536
    steps = step_times_for(runs["32k"], DATA)
    assert steps.source.startswith("aiconfigurator-core")
    turns = trajectories_for(runs["claude-code"], DATA)
    assert isinstance(turns, CodingAgentTurns) and turns.source == "claude-code"


def test_default_step_time_source_is_unchanged(tmp_path: Path) -> None:
    assert load_scenario("e2e").step_times == "kernel-composition"
    bad = load_scenario("e2e").model_dump(mode="json") | {"step_times": "vidur"}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ScenarioError, match=r"bad\.json: step_times"):
        load_scenario(path)


def test_a_grpo_group_shares_its_first_prompt_and_draws_its_own_turns(tmp_path: Path) -> None:
    folder = _write(
        tmp_path,
        [_row("a", 0, 100, 10, 100, "0.5"), _row("a", 1, 150, 20, 40, ""), _row("b", 0, 300, 7, 300, "")],
    )
    turns = CodingAgentTurns.load(folder, "swe-deepseek")
    batch = turns.sample(8, env_mean_s=1.0, env_std_s=0.0, max_length=10_000, seed=3, group_size=4)
    alone = turns.sample(8, env_mean_s=1.0, env_std_s=0.0, max_length=10_000, seed=3)
    assert [t.group for t in batch] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert len({t.turns[0].appended_tokens for t in alone}) == 2  # the draws mix both tasks
    for k, (grouped, own) in enumerate(zip(batch, alone, strict=True)):
        # the group's first draw sets the prompt; every later turn is the member's own draw
        assert grouped.turns[0].appended_tokens == alone[k - k % 4].turns[0].appended_tokens
        assert grouped.turns[1:] == own.turns[1:]
        assert grouped.turns[0].generated_tokens == own.turns[0].generated_tokens
