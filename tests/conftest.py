"""Shared test settings."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("dev", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The integration tests run the real smg gateway; scripts/setup.sh installs it in .smg/ (a venv of its own).
_SMG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".smg", "bin", "smg")
if os.path.exists(_SMG):
    os.environ.setdefault("PEARL_SCHED_SMG", _SMG)
