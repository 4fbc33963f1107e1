"""Every step-time source answers the StepTimes protocol, says where its numbers come from, and mixes honestly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pearl_sched.makespan import DeviceParams
from pearl_sched.profiles.fit import fit_component
from pearl_sched.profiles.readers import read_dynamo
from pearl_sched.sim.steptimes import ComposedStepTimes, FittedStepTimes, LinearStepTimes, StepTimes

DYNAMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "dynamo-h200-llama31-8b" / "H200_TP1P_TP1D"


def test_linear_mixed_is_prefill_plus_decode() -> None:
    steps = LinearStepTimes(
        DeviceParams(
            gpu_type="h200",
            tp=1,
            prefill_s_per_token=1e-4,
            decode_iteration_s=0.01,
            decode_per_seq_s=1e-4,
            kv_capacity_bytes=1e10,
        )
    )
    assert isinstance(steps, StepTimes)
    assert steps.mixed_s(1000, 1, 0, 10, 500) == pytest.approx(0.1 + 0.011)
    assert steps.mixed_s(1000, 1, 0, 0, 0) == pytest.approx(0.1)
    assert steps.source.startswith("pearl-linear")


@pytest.mark.needs_data
def test_fitted_profile_step_times_follow_their_components() -> None:
    data = read_dynamo(DYNAMO, gpu_type="h200", model="llama-3.1-8b", tp=1)
    prefill = fit_component(data, "ttft", kind="monotone")
    decode = fit_component(data, "itl", kind="monotone")
    steps = FittedStepTimes(prefill, decode, tp=1)
    assert isinstance(steps, StepTimes)
    # memoised on the ~6% grid: the component evaluated at the snapped point
    assert steps.prefill_s(4096, 1, 0) == pytest.approx(
        float(prefill.predict(np.array([[ComposedStepTimes._snap(4096), 0.0, 1.0, 1.0]]))[0])
    )
    assert steps.decode_s(32, 2000) == pytest.approx(
        float(decode.predict(np.array([[32.0, ComposedStepTimes._snap(2000), 1.0]]))[0])
    )
    assert steps.mixed_s(4096, 1, 0, 32, 2000) == pytest.approx(steps.prefill_s(4096, 1, 0) + steps.decode_s(32, 2000))
    assert "fitted-profile" in steps.source and "held-out MAPE" in steps.source
    before = steps.extrapolated
    steps.decode_s(4096, 900_000)  # far outside the profile
    assert steps.extrapolated == before + 1 and f"{before + 1} extrapolated" in steps.source
