"""Shared test settings."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from pearl_sched.shared_data import DATA_ENV, default_data

settings.register_profile(
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("dev", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The integration tests run the real smg gateway; scripts/setup.sh installs it in .smg/ (a venv of its own).
_SMG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".smg", "bin", "smg")
if os.path.exists(_SMG):
    os.environ.setdefault("PEARL_SCHED_SMG", _SMG)

# Tests marked ``needs_data`` read the third-party data (``$PEARL_SCHED_DATA``, else ../shared/data). Without it
# they skip, all with the one reason below; CI sets PEARL_SCHED_REQUIRE_DATA=1 (the data is always there), and
# then a missing folder fails them instead of skipping.
REQUIRE_DATA_ENV = "PEARL_SCHED_REQUIRE_DATA"
DATA_FOLDERS = (
    "agentic",
    "agentic-swe",
    "aiconfigurator-sglang",
    "bamboo",
    "dynamo-h200-llama31-8b",
    "model-configs",
    "splitwise-sim",
)


def _missing_data() -> str | None:
    data = default_data()
    missing = [name for name in DATA_FOLDERS if not (data / name).is_dir()]
    if not missing:
        return None
    return f"needs the shared data: {data} lacks {', '.join(missing)} (set {DATA_ENV} to the data folder)"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("needs_data") is None:
        return
    reason = _missing_data()
    if reason is None:
        return
    if os.environ.get(REQUIRE_DATA_ENV) == "1":
        pytest.fail(f"{reason}; {REQUIRE_DATA_ENV}=1 forbids skipping", pytrace=False)
    pytest.skip(reason)
