"""Step-time sources the simulator's workers run on.

A :class:`StepTimes` gives one prefill batch's time, one decode iteration's time and one mixed iteration's time
(a prefill chunk in the same forward pass as a decode batch, as SGLang's chunked prefill runs them), and says in
``source`` which path produced them. Three implementations:

* :class:`LinearStepTimes` from PEARL's device parameters (``t_p`` per token; ``A + b·n`` per iteration);
* :class:`ComposedStepTimes` around a :class:`~pearl_sched.profiles.kernels.ComposedStepModel` (kernel tables
  composed for a model, GPU and TP), memoised on a coarse grid so a long simulation stays fast;
* ``pearl_sched.profiles.aic_engine.AicStepTimes``: NVIDIA aiconfigurator-core's compiled engine (the ``aic``
  extra), any model / GPU / backend / parallelism it ships, with online calibration from observed step times.

The first two have no model of a mixed pass: their ``mixed_s`` is the sum of the prefill and decode parts run
back to back (an upper bound: a real mixed pass reads the weights once for both).
"""

from __future__ import annotations

import functools
import math
from typing import Protocol, runtime_checkable

from pearl_sched.makespan import DeviceParams


@runtime_checkable
class StepTimes(Protocol):
    """Seconds of one prefill batch and one decode iteration on one worker."""

    def prefill_s(self, new_tokens: float, sequences: int, cached_tokens: float) -> float:
        """A prefill batch of ``sequences`` with ``new_tokens`` in all, after ``cached_tokens`` each on average."""
        ...

    def decode_s(self, batch: int, context_tokens: float) -> float:
        """One decode iteration of ``batch`` sequences of mean context ``context_tokens``."""
        ...

    def mixed_s(
        self,
        prefill_new_tokens: float,
        prefill_sequences: int,
        prefill_cached_tokens: float,
        decode_batch: int,
        decode_context_tokens: float,
    ) -> float:
        """One forward pass running a prefill chunk together with a decode batch."""
        ...

    @property
    def source(self) -> str:
        """Which path produced these step times (shown in every report)."""
        ...


def _sequential_mixed_s(
    steps: StepTimes,
    prefill_new_tokens: float,
    prefill_sequences: int,
    prefill_cached_tokens: float,
    decode_batch: int,
    decode_context_tokens: float,
) -> float:
    prefill = steps.prefill_s(prefill_new_tokens, prefill_sequences, prefill_cached_tokens)
    decode = steps.decode_s(decode_batch, decode_context_tokens) if decode_batch > 0 else 0.0
    return prefill + decode


class LinearStepTimes:
    """PEARL's linear forms: prefill ``t_p`` per new token, decode ``A + b·n`` (context-independent)."""

    def __init__(self, device: DeviceParams) -> None:
        self.device = device

    def prefill_s(self, new_tokens: float, sequences: int, cached_tokens: float) -> float:
        return new_tokens * self.device.prefill_s_per_token

    def decode_s(self, batch: int, context_tokens: float) -> float:
        return self.device.decode_iteration_s + self.device.decode_per_seq_s * batch

    def mixed_s(
        self,
        prefill_new_tokens: float,
        prefill_sequences: int,
        prefill_cached_tokens: float,
        decode_batch: int,
        decode_context_tokens: float,
    ) -> float:
        """Prefill part plus decode part back to back (PEARL's linear forms have no mixed pass)."""
        return _sequential_mixed_s(
            self, prefill_new_tokens, prefill_sequences, prefill_cached_tokens, decode_batch, decode_context_tokens
        )

    @property
    def source(self) -> str:
        """``pearl-linear``: PEARL's device parameters."""
        return "pearl-linear (device parameters; mixed = prefill + decode)"


class ComposedStepTimes:
    """Kernel-composed step times, memoised on a grid of ~6% steps in each argument."""

    def __init__(self, model: object) -> None:
        self.model = model

    @staticmethod
    @functools.lru_cache(maxsize=65536)
    def _snap(value: float) -> float:
        if value <= 1:
            return max(value, 0.0)
        return float(round(math.exp(round(math.log(value) / 0.06) * 0.06)))

    @functools.lru_cache(maxsize=65536)  # noqa: B019 - bounded, one per simulated worker type
    def _prefill(self, per_sequence: float, sequences: int, cached: float) -> float:
        return float(self.model.prefill_s(per_sequence, batch=sequences, cached_tokens=cached))  # type: ignore[attr-defined]

    @functools.lru_cache(maxsize=65536)  # noqa: B019
    def _decode(self, batch: int, context: float) -> float:
        return float(self.model.decode_s(batch, context))  # type: ignore[attr-defined]

    def prefill_s(self, new_tokens: float, sequences: int, cached_tokens: float) -> float:
        if new_tokens <= 0:
            return 0.0
        batch = int(self._snap(sequences))
        return self._prefill(self._snap(new_tokens / sequences), batch, self._snap(cached_tokens)) * sequences / batch

    def decode_s(self, batch: int, context_tokens: float) -> float:
        return self._decode(batch, self._snap(max(context_tokens, 1.0)))  # batch exact: the iteration's size

    def mixed_s(
        self,
        prefill_new_tokens: float,
        prefill_sequences: int,
        prefill_cached_tokens: float,
        decode_batch: int,
        decode_context_tokens: float,
    ) -> float:
        """Prefill part plus decode part back to back (the kernel composition has no mixed pass)."""
        return _sequential_mixed_s(
            self, prefill_new_tokens, prefill_sequences, prefill_cached_tokens, decode_batch, decode_context_tokens
        )

    @property
    def source(self) -> str:
        """``kernel-composition``: aiconfigurator's kernel tables composed here."""
        return "kernel-composition (aiconfigurator SGLang kernel tables; mixed = prefill + decode)"
