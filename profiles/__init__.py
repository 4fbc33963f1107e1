"""Turning measured profiles into makespan-model parameters.

This first part reads model configs (KV bytes per token) and fits PEARL's closed-form parameters from an
NVIDIA Dynamo profile. The general ingest, the scikit-learn component models and the improved predictor
come with the profiles work (issue 3) behind the same :class:`pearl_sched.makespan.MakespanModel` interface.
"""

from pearl_sched.profiles.dynamo import DynamoFit, fit_dynamo_profile
from pearl_sched.profiles.model_config import ModelConfig

__all__ = ["DynamoFit", "ModelConfig", "fit_dynamo_profile"]
