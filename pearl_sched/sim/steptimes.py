"""Step-time sources the simulator's workers run on.

A :class:`StepTimes` gives one prefill batch's time and one decode iteration's time. Two implementations:
:class:`LinearStepTimes` from PEARL's device parameters (``t_p`` per token; ``A + b·n`` per iteration),
and :class:`ComposedStepTimes` around a :class:`~pearl_sched.profiles.kernels.ComposedStepModel` (kernel tables
composed for a model, GPU and TP), memoised on a coarse grid so a long simulation stays fast.
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


class LinearStepTimes:
    """PEARL's linear forms: prefill ``t_p`` per new token, decode ``A + b·n`` (context-independent)."""

    def __init__(self, device: DeviceParams) -> None:
        self.device = device

    def prefill_s(self, new_tokens: float, sequences: int, cached_tokens: float) -> float:
        return new_tokens * self.device.prefill_s_per_token

    def decode_s(self, batch: int, context_tokens: float) -> float:
        return self.device.decode_iteration_s + self.device.decode_per_seq_s * batch


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
