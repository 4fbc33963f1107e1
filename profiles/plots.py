"""Predicted-vs-measured plots of fitted component models (matplotlib, written as PNG files)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from pearl_sched.errors import MissingExtraError
from pearl_sched.profiles.components import ExtrapolationWarning
from pearl_sched.profiles.dataset import ProfileDataset
from pearl_sched.profiles.fit import FEATURES, ProfileModels


def plot_fits(models: ProfileModels, data: ProfileDataset, directory: str | Path) -> list[Path]:
    """One PNG per fitted group: measured against predicted step time, with the y = x line and ±5% band."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingExtraError("matplotlib", "plot") from exc
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for key, component in sorted(models.components.items()):
        source, gpu, model, target = key
        rows = data.select(source=source, gpu_type=gpu, model=model, target=target)
        X = np.nan_to_num(rows.features(FEATURES[target][0]))
        measured = rows["value_s"].astype(float) * 1e3
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExtrapolationWarning)
            predicted = component.predict(X) * 1e3
        fig, ax = plt.subplots(figsize=(4.5, 4.5))
        ax.scatter(measured, predicted, s=10, alpha=0.6)
        top = float(max(measured.max(), predicted.max())) * 1.05
        line = np.array([0.0, top])
        ax.plot(line, line, color="black", lw=1)
        ax.fill_between(line, line * 0.95, line * 1.05, color="grey", alpha=0.2, label="±5%")
        report = component.report
        ax.set_title(
            f"{model} on {gpu}: {target}\nheld-out MAPE {report.heldout_mape_pct:.1f}% ({report.kind})", fontsize=9
        )
        ax.set_xlabel("measured (ms)")
        ax.set_ylabel("predicted (ms)")
        ax.legend(loc="upper left", fontsize=8)
        fig.tight_layout()
        path = directory / f"{source}_{gpu}_{model}_{target}.png".replace("/", "-")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
