"""Held-out accuracy of the fitted component models on the real profiles in ../shared/data.

Every row is predicted by a model fitted without it (5-fold cross-validation per GPU × model group, the model
kind chosen on the training folds only). Two splits are printed side by side:

- ``split=row``: rows dealt into folds at random — what "held-out rows" means; repeated measurements of the
  same configuration (splitwise repeats each 5-45 times) may sit in the training folds;
- ``split=configuration``: every distinct configuration held out whole — the error at a point never measured.

One line per dataset, target and split:

    fit_mape dataset=<name> target=<ttft|itl|prefill|decode_step> split=<row|configuration>
             heldout_mape_pct=<x> n=<rows>

Targets (issue 3): ≤ 5% held-out on the Dynamo H200 and splitwise data.
Usage: python bench/fit_accuracy.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pearl_sched.profiles.fit import crossval_predictions
from pearl_sched.profiles.readers import read_dynamo, read_splitwise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
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


if __name__ == "__main__":
    main()
