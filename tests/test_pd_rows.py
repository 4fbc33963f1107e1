"""bench/pd_rows.py: one line per KV-bound disaggregated row, its TTFT split into the replay's phases."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("aiconfigurator_core", reason="the aic extra (aiconfigurator-core) is not installed")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import pd_rows
from bench.validate import UNRECORDED, DisaggReplayed, Row
from pearl_sched.sim.replay import PDRole


class FakeSteps:
    """A named fake: prefill 10 ms + 0.1 ms/token, decode 5 ms + 0.01 ms/sequence."""

    def prefill_s(self, new_tokens: float, sequences: int, cached_tokens: float) -> float:
        return 0.010 + 1e-4 * new_tokens

    def decode_s(self, batch: int, context_tokens: float) -> float:
        return 0.005 + 1e-5 * batch

    def mixed_s(self, new: float, seqs: int, cached: float, batch: int, context: float) -> float:
        return 0.010 + 1e-4 * new + 1e-5 * batch


def _item(row_id: str, dataset: str) -> DisaggReplayed:
    steps = FakeSteps()
    prefill = PDRole(steps, 1, 1, 1_000_000, kv_bytes_per_token=1000.0, link_bytes_per_s=1e8)  # type: ignore[arg-type]
    decode = PDRole(steps, 1, 1, 2_500)  # type: ignore[arg-type]
    row = Row(dataset, "disagg", row_id, 1.0, 0.01, 1.1, 0.0, 0.0, 0.0)
    return DisaggReplayed(row, steps, 1000, 11, 2, False, (prefill, decode), UNRECORDED)  # type: ignore[arg-type]


def test_one_line_per_kvbound_row_with_its_ttft_phases(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fields = {"model_path": "m", "system": "g", "mode": "disagg", "silicon_data_source": "silicon_concurrency=2"}
    monkeypatch.setattr(pd_rows, "sglang_silicon_rows", lambda: [{**fields, "id": "a"}, {**fields, "id": "b"}])
    items = [_item("a", "silicon-sglang-kvbound"), _item("b", "silicon-sglang")]
    monkeypatch.setattr(pd_rows, "disagg_rows", lambda rows, cache: (items, {}))
    assert pd_rows.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pd-row id=a ")  # the row that is not KV-bound is left out
    values = dict(re.findall(r"(\w+)=(\S+)", lines[0]))
    phases = ("prealloc_wait_s", "prefill_queue_s", "prefill_run_s", "transfer_s", "join_wait_s")
    assert sum(float(values[k]) for k in phases) == pytest.approx(float(values["replay_ttft_s"]), abs=3e-3)
    # the decode pool (2,500 tokens) holds one request of 1,000 + 512 at a time: the second client waits for it
    assert float(values["prealloc_wait_s"]) > 0 and values["max_rank_batch"] == "1"
    assert float(values["rank_capacity"]) == pytest.approx(2_500 / 1_011, abs=0.05)  # printed to 0.1
    assert pd_rows.main(["--all"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
