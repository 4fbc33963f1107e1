"""bench/validate_breakdown.py: the per-slice error table and the implied prefill time, on rows built by hand."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

pytest.importorskip("aiconfigurator_core", reason="the aic extra (aiconfigurator-core) is not installed")

from bench import validate, validate_breakdown


def _row(group: str, err_tpot: float, err_e2e: float, **extra: object) -> dict[str, object]:
    return {"group": group, "err_tpot": err_tpot, "err_e2e": err_e2e, **extra}


def test_table_shares_medians_and_order() -> None:
    rows = [_row("a", -0.2, -0.1), _row("a", -0.4, -0.3), _row("b", 0.1, 0.2)]
    lines = validate_breakdown.table(rows, "g", lambda r: str(r["group"]))
    assert lines[0].startswith("breakdown slice=g value=a rows=2 ")  # the larger summed E2E error first
    assert "tpot_mape_pct=30.0 tpot_median_pct=-30.0 tpot_share_pct=85.7" in lines[0]  # 0.6 of 0.7
    assert "e2e_share_pct=66.7" in lines[0] and "e2e_share_pct=33.3" in lines[1]
    assert len(validate_breakdown.table(rows, "g", lambda r: str(r["group"]), top=1)) == 1


def test_prefill_implied_recovers_a_constant_prefill_excess() -> None:
    # each request's decode is interrupted once by each of the other C - 1 clients' prompts: a prefill 0.5 s longer
    # than replayed adds 0.5 × (C - 1) / (mean OSL - 1) to the TPOT at every C
    rows = []
    for conc in (4, 16):
        sim = 0.010
        measured = sim + 0.5 * (conc - 1) / (921.5 - 1)
        rows.append(
            {
                "harness": "InferenceMAX",
                "isl": "8192",
                "concurrency": conc,
                "model": "M",
                "system": "gpu",
                "precision": "fp8",
                "layout": "TP4",
                "version": "0.5.10.post1",
                "mean_osl": 921.5,
                "measured_tpot": measured,
                "sim_tpot": sim,
                "measured_ttft": 0.6,
                "sim_ttft": 0.1,
            }
        )
    (line,) = validate_breakdown.prefill_implied(rows)
    assert "C4=+0.50 C16=+0.50" in line and "ttft_c4_measured_s=0.60" in line


def test_load_joins_the_silicon_row(tmp_path: Path) -> None:
    silicon = next(r for r in validate.sglang_silicon_rows() if r["mode"] == "agg")
    path = tmp_path / "rows.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(validate.Row.__dataclass_fields__)
        writer.writerow(["silicon-sglang", "agg", silicon["id"], 1.0, 0.02, 21.0, 0.5, 0.015, 15.0])
        writer.writerow(["silicon-sglang-aic-estimate", "agg", silicon["id"], 1.0, 0.02, 21.0, 0.4, 0.01, 11.0])
    (row,) = validate_breakdown.load(path)  # the aic-estimate line is not a replay
    assert row["system"] == silicon["system"] and row["err_tpot"] == pytest.approx(-0.25)
    assert row["err_e2e"] == pytest.approx(15.0 / 21.0 - 1)
