"""Held-out accuracy of the fitted component models on the real profiles in ../shared/data.

Every row is predicted by a model fitted without it (5-fold cross-validation per GPU × model group, the model
kind chosen on the training folds only). Two splits are printed side by side:

- ``split=row``: rows dealt into folds at random — what "held-out rows" means; repeated measurements of the
  same configuration (splitwise repeats each 5-45 times) may sit in the training folds;
- ``split=configuration``: every distinct configuration held out whole — the error at a point never measured.

One line per dataset, target and split:

    fit_mape dataset=<name> target=<ttft|itl|prefill|decode_step> split=<row|configuration>
             heldout_mape_pct=<x> n=<rows>

Then the kernel-composed Llama-3.1-8B (aiconfigurator SGLang tables, H200, FP8 GEMMs, TP1) against Dynamo's
measured vLLM profile of the same model and GPU — raw, and with the framework's fixed cost per step calibrated on
one point (the shortest prompt for TTFT, batch 1 for ITL) and the error taken over the other points:

    compose_mape dataset=dynamo-h200 target=<ttft|itl> calibration=<none|one-point> mape_pct=<x> n=<points>

Targets (issue 3): ≤ 5% held-out on the Dynamo H200 and splitwise data; ≤ 15% for kernel compositions.
Usage: python bench/fit_accuracy.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pearl_sched.profiles.fit import crossval_predictions
from pearl_sched.profiles.kernels import ComposedStepModel, KernelTables, composed_mape, shipped_config
from pearl_sched.profiles.readers import read_dynamo, read_splitwise
from pearl_sched.shared_data import default_data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=default_data())
    args = parser.parse_args()
    sources = [
        ("dynamo-h200", read_dynamo(args.data / "dynamo-h200-llama31-8b" / "H200_TP1P_TP1D"), ("ttft", "itl")),
        ("splitwise", read_splitwise(args.data / "splitwise-sim" / "perf_model.csv"), ("prefill", "decode_step")),
    ]
    for name, data, targets in sources:
        for target in targets:
            for split in ("row", "configuration"):
                measured, predicted = crossval_predictions(data, target, split=split)  # type: ignore[arg-type]
                mape = float(np.mean(np.abs(predicted - measured) / measured) * 100)
                print(
                    f"fit_mape dataset={name} target={target} split={split}"
                    f" heldout_mape_pct={mape:.2f} n={len(measured)}",
                    flush=True,
                )

    compose(args.data)


def compose(data: Path) -> None:
    tables = KernelTables(data / "aiconfigurator-sglang" / "h200_sxm", gemm_dtype="fp8")
    raw = ComposedStepModel(shipped_config("llama-3.1-8b"), tables, tp=1)
    profile = read_dynamo(data / "dynamo-h200-llama31-8b" / "H200_TP1P_TP1D")
    ttft = profile.select(target="ttft")
    itl = profile.select(target="itl")
    first_ttft = int(np.argmin(ttft["tokens"]))
    first_itl = int(np.argmin(itl["batch_size"]))
    calibrated = raw.calibrated(
        prefill=(float(ttft["tokens"][first_ttft]), float(ttft["value_s"][first_ttft])),
        decode=(
            float(itl["batch_size"][first_itl]),
            float(itl["context_tokens"][first_itl]),
            float(itl["value_s"][first_itl]),
        ),
    )
    for label, model, skip in (("none", raw, None), ("one-point", calibrated, (first_ttft, first_itl))):
        for target, rows, predict, skipped in (
            ("ttft", ttft, lambda m, r: m.prefill_s(r[0]), skip[0] if skip else None),
            ("itl", itl, lambda m, r: m.decode_s(r[1], r[2]), skip[1] if skip else None),
        ):
            points = [
                (float(rows["tokens"][i]), float(rows["batch_size"][i]), float(rows["context_tokens"][i]))
                for i in range(len(rows))
                if i != skipped
            ]
            measured = [float(rows["value_s"][i]) for i in range(len(rows)) if i != skipped]
            mape = composed_mape([predict(model, p) for p in points], measured)
            print(
                f"compose_mape dataset=dynamo-h200 target={target} calibration={label}"
                f" mape_pct={mape:.2f} n={len(points)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
