"""One exception tree: everything pearl_sched raises on purpose derives from PearlSchedError."""

from __future__ import annotations

import inspect
import sys

import pytest

import pearl_sched
from pearl_sched import errors
from pearl_sched.control import LoopMetrics
from pearl_sched.profiles import step_statistics


def test_every_error_class_is_under_the_root() -> None:
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, BaseException)]
    assert {c.__name__ for c in classes} >= {"TelemetryRejected", "SimulationError", "MissingExtraError"}
    for cls in classes:
        assert issubclass(cls, errors.PearlSchedError), cls
        assert getattr(pearl_sched, cls.__name__) is cls  # exported from the package root


def test_rejected_telemetry_is_a_pearl_sched_error() -> None:
    table = {"trajectory": [0], "turn": [0], "appended_tokens": [10], "generated_tokens": [5]}
    with pytest.raises(errors.PearlSchedError, match="telemetry lacks the column") as caught:
        step_statistics(table)
    assert isinstance(caught.value, errors.TelemetryRejected)
    assert isinstance(caught.value, ValueError)  # callers that caught ValueError still do
    assert caught.value.reason.startswith("telemetry lacks the column")


def test_metrics_without_prometheus_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import now raises ImportError
    with pytest.raises(errors.MissingExtraError, match=r"pearl-sched\[client\]") as caught:
        LoopMetrics()
    assert isinstance(caught.value, ImportError)
    assert caught.value.extra == "client"


def test_simulation_error_is_still_a_runtime_error() -> None:
    assert issubclass(errors.SimulationError, RuntimeError)


def test_an_unknown_model_names_the_shipped_ones() -> None:
    from pearl_sched.profiles.kernels import shipped_config

    with pytest.raises(errors.UnknownModelError, match=r"no shipped config 'gpt-9'; known: llama-3\.1-8b, ") as caught:
        shipped_config("gpt-9")
    assert isinstance(caught.value, ValueError)  # callers that caught ValueError still do
