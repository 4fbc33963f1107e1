"""The command line: readable output, JSON, schemas, and clear errors with exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pearl_sched.cli import app
from pearl_sched.plans import Plan
from pearl_sched.request import PlanRequest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
runner = CliRunner()


def test_plan_prints_a_summary() -> None:
    result = runner.invoke(app, ["plan", str(EXAMPLES / "running.json")])
    assert result.exit_code == 0, result.output
    assert "disaggregated" in result.output
    assert "preempted: GPU unavailable" in result.output
    assert "predicted makespan" in result.output


def test_plan_json_round_trips_and_feeds_current(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(EXAMPLES / "initial.json"), "--json"])
    assert result.exit_code == 0, result.output
    plan = Plan.model_validate_json(result.stdout)
    assert plan.actions
    saved = tmp_path / "plan.json"
    saved.write_text(result.stdout)
    again = runner.invoke(app, ["plan", str(EXAMPLES / "initial.json"), "--current", str(saved), "--json"])
    assert again.exit_code == 0, again.output
    assert Plan.model_validate_json(again.stdout).fingerprint() == plan.fingerprint()


def test_schema_prints_every_document() -> None:
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0
    schemas = json.loads(result.stdout)
    assert set(schemas) == {"request", "state", "plan"}
    one = json.loads(runner.invoke(app, ["schema", "state"]).stdout)
    assert one["title"] == "ClusterState"
    assert runner.invoke(app, ["schema", "nope"]).exit_code == 2


def test_invalid_request_is_one_clear_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    data = json.loads((EXAMPLES / "running.json").read_text())
    data["state"]["workload"]["turns"] = -3
    bad.write_text(json.dumps(data))
    result = runner.invoke(app, ["plan", str(bad)])
    assert result.exit_code == 2
    assert "state.workload.turns" in result.output
    assert "Traceback" not in result.output


def test_missing_file_and_infeasible_budget_exit_codes(tmp_path: Path) -> None:
    assert runner.invoke(app, ["plan", str(tmp_path / "none.json")]).exit_code == 2
    request = PlanRequest.model_validate_json((EXAMPLES / "initial.json").read_text())
    tight = request.model_copy(
        update={
            "state": request.state.model_copy(
                update={"budget": request.state.budget.model_copy(update={"max_gpus": 1})}
            )
        }
    )
    path = tmp_path / "tight.json"
    path.write_text(tight.model_dump_json())
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 3
    assert "binding constraint: budget" in result.output


def test_backends_lists_the_default() -> None:
    result = runner.invoke(app, ["backends"])
    assert result.exit_code == 0
    assert "highs (default)" in result.output


def test_plan_with_the_improved_predictor() -> None:
    result = runner.invoke(app, ["plan", str(EXAMPLES / "running.json"), "--predictor", "improved", "--json"])
    assert result.exit_code == 0, result.output
    assert Plan.model_validate_json(result.stdout).model == "improved"
    assert runner.invoke(app, ["plan", str(EXAMPLES / "running.json"), "--predictor", "oracle"]).exit_code == 2


@pytest.mark.needs_data
def test_simulate_writes_a_report_and_plots(tmp_path: Path) -> None:
    from .builders import DATA, tiny

    scenario = tmp_path / "tiny.json"
    scenario.write_text(tiny().model_copy(update={"name": "tiny"}).model_dump_json())
    result = runner.invoke(
        app,
        [
            "simulate",
            str(scenario),
            "-p",
            "roll",
            "-p",
            "pearl_sched",
            "--out",
            str(tmp_path / "out"),
            "--data",
            str(DATA),
            "--processes",
            "1",
            "--tie-seed",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "pearl_sched" in result.output and "vs ROLL" in result.output
    report = json.loads((tmp_path / "out" / "tiny" / "report.json").read_text())
    assert report["scenario"]["tie_seed"] == 3 and report["scenario"]["seed"] == 0  # the run used the option
    assert {row["policy"] for row in report["summary"]} == {"roll", "pearl_sched"}
    assert all(row["carried_over"] >= 0 for row in report["summary"])
    for name in ("throughput.png", "timeline.png", "ratio.png"):
        assert (tmp_path / "out" / "tiny" / name).stat().st_size > 10_000


def test_simulate_rejects_unknown_scenarios_and_policies(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", "no-such-scenario", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "shipped scenarios" in result.output
    result = runner.invoke(app, ["simulate", "e2e", "-p", "magic", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "unknown policies ['magic']" in result.output
    result = runner.invoke(app, ["simulate", "e2e", "--tie-seed", "-1", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--tie-seed" in result.output
