"""The shipped examples are reproducible from ../shared/data and the orchestrator example runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.needs_data
def test_example_requests_regenerate_identically(tmp_path: Path) -> None:
    script = (
        (ROOT / "examples" / "make_examples.py")
        .read_text()
        .replace('OUT = Path("examples")', f"OUT = Path({str(tmp_path)!r})")
    )
    runner = tmp_path / "make.py"
    runner.write_text(script)
    subprocess.run([sys.executable, str(runner)], cwd=ROOT, check=True, capture_output=True)
    for name in ("initial.json", "running.json", "mixed-sizes.json"):
        assert json.loads((tmp_path / name).read_text()) == json.loads((ROOT / "examples" / name).read_text())


def test_orchestrator_example_runs_and_settles() -> None:
    result = subprocess.run(
        [sys.executable, "examples/orchestrator.py"], cwd=ROOT, check=True, capture_output=True, text=True
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("step")]
    assert len(lines) == 3
    assert lines[-1].endswith("0 action(s)")
