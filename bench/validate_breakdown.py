"""Where the aggregated SGLang rows' TPOT / E2E error comes from, by slice (docs/validation.md).

    python bench/validate.py --modes agg --silicon-only --csv rows.csv
    python bench/validate_breakdown.py rows.csv

Joins every replayed aggregated row of ``bench/validate.py --csv`` with its row of aiconfigurator-core's
``systems/silicon_sample.csv`` and prints, per slice (model, GPU, precision, SGLang version, benchmark client, launch
flags recorded or not, KV-bound or not, concurrency band, ISL / OSL, and the largest deployments), the rows, the
TPOT and E2E MAPE, the median signed error (replayed / measured − 1: negative = the replay is faster than the run)
and the slice's share of the summed absolute error. Then, for the InferenceMAX rows at ISL 8,192, the prefill time
per prompt that the measured TPOT implies (``prefill-implied``): with C closed-loop clients of unequal lengths, each
request's decode is interrupted about once by every other client's next prompt, so ``(measured − replayed TPOT) ×
(mean OSL − 1) / (C − 1)`` is what each of those prefills took beyond the replayed one. Constant over C, the excess
is prefill time; falling as 1 / C, it is a per-decode-step time. Nothing is fitted.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.validate import (
    INFERENCEMAX,
    harness_of,
    inferencemax_repeats,
    parallelism,
    recorded_launch,
    sglang_silicon_rows,
)

Slice = Callable[[dict[str, object]], str]


def _band(concurrency: int) -> str:
    for top in (4, 16, 64, 256):
        if concurrency <= top:
            return f"C<={top}"
    return "C>256"


def load(path: Path) -> list[dict[str, object]]:
    """The aggregated replayed rows of a ``bench/validate.py --csv`` file, each with its silicon row and errors."""
    silicon = sglang_silicon_rows()
    repeats = inferencemax_repeats(silicon)
    by_id = {row["id"]: row for row in silicon}
    out = []
    with path.open(newline="") as f:
        for rec in csv.DictReader(f):
            if rec["mode"] != "agg" or not rec["dataset"].startswith("silicon-sglang"):
                continue
            if any(tag in rec["dataset"] for tag in ("aic-estimate", "calibrated", "world-overhead")):
                continue
            row = by_id[rec["row_id"]]
            tp, adp, moe_tp, moe_ep, _ = parallelism(row)
            harness = harness_of(row, repeats)
            item: dict[str, object] = dict(row)
            item.update(
                model=row["model_path"].split("/")[-1],
                layout=f"TP{tp}" + (f"/ADP{adp}" if adp > 1 else "") + (f"/EP{moe_ep}" if (moe_ep or 1) > 1 else ""),
                version=row["backend_version"] or "(none)",
                harness="InferenceMAX" if harness is INFERENCEMAX else "unrecorded",
                launch="recorded" if recorded_launch(row, "agg", (tp, adp, moe_tp, moe_ep)) else "SGLang defaults",
                kvbound="kv-bound" if "kvbound" in rec["dataset"] else "fits",
                band=_band(int(float(row["batch_size"]))),
                lengths=f"{row['isl']}/{row['osl']}",
                concurrency=int(float(row["batch_size"])),
                mean_osl=harness.mean_osl(int(row["osl"])),
            )
            for target in ("ttft", "tpot", "e2e"):
                measured, sim = float(rec[f"measured_{target}_s"]), float(rec[f"sim_{target}_s"])
                item[f"measured_{target}"], item[f"sim_{target}"] = measured, sim
                item[f"err_{target}"] = sim / measured - 1
            out.append(item)
    return out


def table(rows: list[dict[str, object]], name: str, key: Slice, top: int | None = None) -> list[str]:
    """One line per slice: rows, TPOT / E2E MAPE, median signed error, share of the summed absolute error."""
    total = {t: sum(abs(float(r[f"err_{t}"])) for r in rows) or 1.0 for t in ("tpot", "e2e")}
    groups: dict[str, list[dict[str, object]]] = defaultdict(list)
    for row in rows:
        groups[key(row)].append(row)
    lines = []
    for label, items in groups.items():
        cells = [f"breakdown slice={name} value={label.replace(' ', '_')} rows={len(items)}"]
        for t in ("tpot", "e2e"):
            errs = [float(r[f"err_{t}"]) for r in items]
            cells.append(
                f"{t}_mape_pct={100 * statistics.fmean(abs(e) for e in errs):.1f} "
                f"{t}_median_pct={100 * statistics.median(errs):+.1f} "
                f"{t}_share_pct={100 * sum(abs(e) for e in errs) / total[t]:.1f}"
            )
        lines.append((sum(abs(float(r["err_e2e"])) for r in items), " ".join(cells)))
    lines.sort(key=lambda pair: -pair[0])
    return [line for _, line in lines[:top]]


def prefill_implied(rows: list[dict[str, object]]) -> list[str]:
    """Per InferenceMAX deployment at ISL 8,192: the excess prefill time per prompt the TPOT miss implies, by C."""
    groups: dict[tuple[str, ...], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    ttft4: dict[tuple[str, ...], list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        if r["harness"] != "InferenceMAX" or r["isl"] != "8192" or int(r["concurrency"]) < 2:
            continue
        key = (str(r["model"]), str(r["system"]), str(r["precision"]), str(r["layout"]), str(r["version"]))
        conc = int(r["concurrency"])
        excess = (float(r["measured_tpot"]) - float(r["sim_tpot"])) * (float(r["mean_osl"]) - 1) / (conc - 1)
        groups[key][conc].append(excess)
        if conc == 4:
            ttft4[key].append((float(r["measured_ttft"]), float(r["sim_ttft"])))
    lines = []
    for key, by_c in sorted(groups.items()):
        series = " ".join(f"C{c}={statistics.median(v):+.2f}" for c, v in sorted(by_c.items()))
        at4 = ttft4.get(key)
        ttft = f" ttft_c4_measured_s={at4[0][0]:.2f} ttft_c4_replayed_s={at4[0][1]:.2f}" if at4 else ""
        lines.append(f"prefill-implied {' '.join(key)} excess_prefill_s_per_prompt: {series}{ttft}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path, help="a bench/validate.py --csv file")
    args = parser.parse_args(argv)
    rows = load(args.csv)
    if not rows:
        print("no aggregated silicon-sglang rows in the file")
        return 1
    print(table(rows, "all", lambda r: "all")[0])
    slices: list[tuple[str, Slice, int | None]] = [
        ("model", lambda r: str(r["model"]), None),
        ("gpu", lambda r: str(r["system"]), None),
        ("precision", lambda r: str(r["precision"]) or "(model dtype)", None),
        ("version", lambda r: str(r["version"]), None),
        ("harness", lambda r: str(r["harness"]), None),
        ("launch_flags", lambda r: str(r["launch"]), None),
        ("kv", lambda r: str(r["kvbound"]), None),
        ("concurrency", lambda r: str(r["band"]), None),
        ("isl_osl", lambda r: str(r["lengths"]), 6),
        (
            "deployment",
            lambda r: f"{r['model']} {r['system']} {r['precision']} {r['layout']} {r['version']}",
            12,
        ),
    ]
    for name, key, top in slices:
        print("\n".join(table(rows, name, key, top)))
    print("\n".join(prefill_implied(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
