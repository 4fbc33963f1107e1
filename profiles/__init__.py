"""Turning measured profiles into models the planner trusts.

- :mod:`~pearl_sched.profiles.readers` read SGLang request logs and ``/metrics`` scrapes, NVIDIA Dynamo
  profiles and splitwise-style CSVs into one validated :class:`ProfileDataset`;
- :mod:`~pearl_sched.profiles.components` holds the scikit-learn component models (prefill time, decode
  iteration time), monotone and non-negative, persisted as JSON;
- :mod:`~pearl_sched.profiles.fit` fits them with an honest held-out report;
- :mod:`~pearl_sched.profiles.kernels` composes prefill and decode step times of any shipped model at any TP
  from NVIDIA aiconfigurator's SGLang kernel tables (H100, H200);
- :mod:`~pearl_sched.profiles.telemetry` refits trajectory statistics online; :mod:`~pearl_sched.profiles.forecast`
  forecasts prefill and decode demand over the next planning interval;
- :mod:`~pearl_sched.profiles.dynamo` fits PEARL's closed-form parameters; :mod:`~pearl_sched.profiles.model_config`
  reads model architecture facts (KV bytes per token).
"""

from pearl_sched.errors import TelemetryRejected
from pearl_sched.profiles.components import (
    ExtrapolationWarning,
    MonotoneStepRegressor,
    TableInterpolator,
    from_json,
    to_json,
)
from pearl_sched.profiles.dataset import ProfileDataset, ProfileFormatError
from pearl_sched.profiles.dynamo import DynamoFit, fit_dynamo_profile
from pearl_sched.profiles.fit import FitReport, ProfileModels, crossval_predictions, fit_component, fit_profiles
from pearl_sched.profiles.forecast import DemandForecast, InFlight, Phase, forecast_demand, forecast_error
from pearl_sched.profiles.kernels import ComposedStepModel, KernelTables, shipped_config
from pearl_sched.profiles.model_config import ModelConfig
from pearl_sched.profiles.readers import (
    read_any,
    read_dynamo,
    read_prometheus_scrapes,
    read_sglang_requests,
    read_splitwise,
)
from pearl_sched.profiles.telemetry import TrajectoryStats, refit, refit_steps, step_statistics

__all__ = [
    "ComposedStepModel",
    "DemandForecast",
    "DynamoFit",
    "ExtrapolationWarning",
    "FitReport",
    "InFlight",
    "KernelTables",
    "ModelConfig",
    "MonotoneStepRegressor",
    "Phase",
    "ProfileDataset",
    "ProfileFormatError",
    "ProfileModels",
    "TableInterpolator",
    "TelemetryRejected",
    "TrajectoryStats",
    "crossval_predictions",
    "fit_component",
    "fit_dynamo_profile",
    "fit_profiles",
    "forecast_demand",
    "forecast_error",
    "from_json",
    "read_any",
    "read_dynamo",
    "read_prometheus_scrapes",
    "read_sglang_requests",
    "read_splitwise",
    "refit",
    "refit_steps",
    "shipped_config",
    "step_statistics",
    "to_json",
]
