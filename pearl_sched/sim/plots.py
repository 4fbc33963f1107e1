"""PNG plots of a simulated comparison: throughput per step, the GPU-role timeline, the configuration over time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pearl_sched.errors import MissingExtraError
from pearl_sched.sim.experiment import Report

ROLE_COLOURS = {
    "prefill": "#1f77b4",
    "decode": "#ff7f0e",
    "colocated": "#2ca02c",
    "training": "#d3d3d3",
    "off": "#ffffff",
    "preempted": "#ffffff",
}


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingExtraError("matplotlib", "plot") from exc
    return plt


def plot_report(report: Report, directory: str | Path, *, focus: str = "pearl_sched") -> list[Path]:
    """Write ``throughput.png``, ``timeline.png`` and ``ratio.png``; returns their paths."""
    plt = _pyplot()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    runs = [p for p in (focus, "pearl") if p in report.runs] or list(report.runs)[:1]
    return [
        _save(plot_throughput(report, plt), directory / "throughput.png", plt),
        _save(plot_timeline(report, runs, plt), directory / "timeline.png", plt),
        _save(plot_ratio(report, runs, plt), directory / "ratio.png", plt),
    ]


def plot_throughput(report: Report, plt: Any) -> Any:
    """Step throughput over time, one panel per segment, one line per policy."""
    segments = [s.name for s in report.scenario.segments]
    fig, axes = plt.subplots(1, len(segments), figsize=(5 * len(segments), 3.8), sharey=True, squeeze=False)
    for ax, name in zip(axes[0], segments, strict=True):
        for policy, run in report.runs.items():
            seg = next(s for s in run.segments if s.segment == name)
            if not seg.steps:
                continue
            xs = [s.train_end_s / 60 for s in seg.steps]
            ys = [s.throughput_tok_s / 1e3 for s in seg.steps]
            ax.plot(xs, ys, marker="o", ms=3, label=policy)
        ax.set_title(name)
        ax.set_xlabel("minutes")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("step throughput (k tokens/s)")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{report.scenario.name}: throughput per step by policy")
    fig.tight_layout()
    return fig


def plot_timeline(report: Report, runs: list[str], plt: Any) -> Any:
    """Each TP group's role over time, one row of panels per policy in ``runs``."""
    segments = report.scenario.segments
    fig, axes = plt.subplots(len(runs), len(segments), figsize=(5 * len(segments), 3.2 * len(runs)), squeeze=False)
    for row, policy in enumerate(runs):
        for col, seg in enumerate(report.runs[policy].segments):
            ax = axes[row][col]
            slots = sorted({slot for _, slot, _ in seg.timeline})
            for y, slot in enumerate(slots):
                changes = [(t, label) for t, s, label in seg.timeline if s == slot]
                for (start, label), (end, _) in zip(changes, [*changes[1:], (seg.duration_s, "")], strict=True):
                    if end > start:
                        ax.barh(y, (end - start) / 60, left=start / 60, color=ROLE_COLOURS.get(label, "#999"), lw=0)
            ax.set_yticks(range(len(slots)), slots, fontsize=6)
            ax.set_title(f"{policy}: {seg.segment}", fontsize=9)
            ax.set_xlabel("minutes")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for k, c in ROLE_COLOURS.items() if k not in ("off", "preempted")]
    fig.legend(handles, ["prefill", "decode", "colocated", "with the trainer"], loc="upper right", fontsize=7)
    fig.suptitle("GPU-role timeline (one row per TP group; blank: not in use or preempted)")
    fig.tight_layout()
    return fig


def plot_ratio(report: Report, runs: list[str], plt: Any) -> Any:
    """Workers per role over time (the configuration chosen), one row of panels per policy in ``runs``."""
    segments = report.scenario.segments
    fig, axes = plt.subplots(len(runs), len(segments), figsize=(5 * len(segments), 3.0 * len(runs)), squeeze=False)
    for row, policy in enumerate(runs):
        for col, seg in enumerate(report.runs[policy].segments):
            ax = axes[row][col]
            counts = {"prefill": 0, "decode": 0, "colocated": 0}
            current: dict[str, str] = {}
            times: list[float] = []
            series: dict[str, list[int]] = {k: [] for k in counts}
            for t, slot, label in seg.timeline:
                current[slot] = label
                times.append(t / 60)
                for k in counts:
                    series[k].append(sum(1 for v in current.values() if v == k))
            for k, counted in series.items():
                if any(counted):
                    ax.step(times, counted, where="post", label=k, color=ROLE_COLOURS[k])
            ax.set_title(f"{policy}: {seg.segment}", fontsize=9)
            ax.set_xlabel("minutes")
            ax.set_ylabel("workers")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle("Chosen configuration over time (workers per role)")
    fig.tight_layout()
    return fig


def _save(fig: Any, path: Path, plt: Any) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
