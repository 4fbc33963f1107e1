"""Where the third-party data (profiles, kernel tables, traces, model configs) is found.

``$PEARL_SCHED_DATA`` when set, else ``../shared/data`` next to the checkout. The CLI, the simulator's scenarios,
the benches and the tests all ask :func:`default_data`, so one variable moves them all.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "PEARL_SCHED_DATA"
"""The environment variable that points at the data folder."""

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
"""``../shared/data`` next to the checkout."""


def default_data() -> Path:
    """``$PEARL_SCHED_DATA``, else ``../shared/data`` next to the checkout."""
    return Path(os.environ.get(DATA_ENV, DEFAULT_DATA))
