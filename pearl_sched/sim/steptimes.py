"""Step-time sources the simulator's workers run on.

A :class:`StepTimes` gives one prefill batch's time, one decode iteration's time and one mixed iteration's time
(a prefill chunk in the same forward pass as a decode batch, as SGLang's chunked prefill runs them), and says in
``source`` which path produced them. Four implementations:

* :class:`LinearStepTimes` from PEARL's device parameters (``t_p`` per token; ``A + b·n`` per iteration);
* :class:`ComposedStepTimes` around a :class:`~pearl_sched.profiles.kernels.ComposedStepModel` (kernel tables
  composed for a model, GPU and TP), memoised on a coarse grid so a long simulation stays fast;
* ``pearl_sched.profiles.aic_engine.AicStepTimes``: NVIDIA aiconfigurator-core's compiled engine (the ``aic``
  extra), any model / GPU / backend / parallelism it ships, with online calibration from observed step times;
* :class:`FittedStepTimes`: component models fitted to a deployment's own logged metrics (``profiles.fit``).

The linear, composed and fitted ones have no model of a mixed pass: their ``mixed_s`` is the sum of the prefill and
decode parts run back to back (an upper bound: a real mixed pass reads the weights once for both).
"""

from __future__ import annotations

import functools
import math
import warnings
from abc import ABC, abstractmethod
from typing import Any, Protocol, runtime_checkable

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


class _SequentialMixed(ABC):
    """Step times with no model of a mixed pass: its ``mixed_s`` runs the prefill and decode parts back to back."""

    @abstractmethod
    def prefill_s(self, new_tokens: float, sequences: int, cached_tokens: float) -> float:
        """A prefill batch of ``sequences`` with ``new_tokens`` in all, after ``cached_tokens`` each on average."""

    @abstractmethod
    def decode_s(self, batch: int, context_tokens: float) -> float:
        """One decode iteration of ``batch`` sequences of mean context ``context_tokens``."""

    def mixed_s(
        self,
        prefill_new_tokens: float,
        prefill_sequences: int,
        prefill_cached_tokens: float,
        decode_batch: int,
        decode_context_tokens: float,
    ) -> float:
        """Prefill part plus decode part back to back (an upper bound on one mixed pass)."""
        prefill = self.prefill_s(prefill_new_tokens, prefill_sequences, prefill_cached_tokens)
        decode = self.decode_s(decode_batch, decode_context_tokens) if decode_batch > 0 else 0.0
        return prefill + decode


class LinearStepTimes(_SequentialMixed):
    """PEARL's linear forms: prefill ``t_p`` per new token, decode ``A + b·n`` (context-independent)."""

    def __init__(self, device: DeviceParams) -> None:
        """Run on one worker type's fitted PEARL parameters.

        Args:
            device: ``t_p`` (s per prefill token), ``A`` (s per decode iteration) and ``b`` (s per running sequence).
        """
        self.device = device

    def prefill_s(self, new_tokens: float, sequences: int, cached_tokens: float) -> float:
        """``t_p · new_tokens`` seconds; batch size and cached prefix do not enter PEARL's linear form."""
        return new_tokens * self.device.prefill_s_per_token

    def decode_s(self, batch: int, context_tokens: float) -> float:
        """``A + b · batch`` seconds; the context length does not enter PEARL's linear form."""
        return self.device.decode_iteration_s + self.device.decode_per_seq_s * batch

    @property
    def source(self) -> str:
        """``pearl-linear``: PEARL's device parameters."""
        return "pearl-linear (device parameters; mixed = prefill + decode)"


class ComposedStepTimes(_SequentialMixed):
    """Kernel-composed step times, memoised on a grid of ~6% steps in each argument."""

    def __init__(self, model: object) -> None:
        """Wrap a kernel-composed model.

        Args:
            model: a :class:`~pearl_sched.profiles.kernels.ComposedStepModel` (anything with its ``prefill_s`` and
                ``decode_s``) for one model, GPU and TP degree.
        """
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
        """Seconds of a prefill batch, from the kernel tables at the snapped per-sequence length and batch size.

        The time at the snapped batch size is rescaled to ``sequences``; ``0.0`` when there is nothing to prefill.
        """
        if new_tokens <= 0:
            return 0.0
        batch = int(self._snap(sequences))
        return self._prefill(self._snap(new_tokens / sequences), batch, self._snap(cached_tokens)) * sequences / batch

    def decode_s(self, batch: int, context_tokens: float) -> float:
        """Seconds of one decode iteration of exactly ``batch`` sequences at the snapped mean context."""
        return self._decode(batch, self._snap(max(context_tokens, 1.0)))  # batch exact: the iteration's size

    @property
    def source(self) -> str:
        """``kernel-composition``: aiconfigurator's kernel tables composed here."""
        return "kernel-composition (aiconfigurator SGLang kernel tables; mixed = prefill + decode)"


class FittedStepTimes(_SequentialMixed):
    """Step times from component models fitted to a deployment's logged metrics (``profiles.fit``).

    ``prefill`` predicts from (tokens, cached tokens, batch size, TP) — a ``prefill`` or ``ttft`` component —
    and ``decode`` from (batch size, context tokens, TP) — a ``decode_step`` or ``itl`` component; both are
    :class:`~pearl_sched.profiles.fit.FittedComponent`. Calls are memoised on the same ~6% grid as
    :class:`ComposedStepTimes`. A call outside the box the components were fitted on is still answered (the
    components extrapolate monotonically) and counted in ``extrapolated``, which ``source`` reports. ``mixed_s`` is
    prefill + decode back to back (the logged metrics have no mixed pass).
    """

    def __init__(self, prefill: Any, decode: Any, tp: int) -> None:
        """Answer from two fitted components at one tensor-parallel degree.

        Args:
            prefill: a ``prefill`` or ``ttft`` :class:`~pearl_sched.profiles.fit.FittedComponent` (seconds).
            decode: a ``decode_step`` or ``itl`` :class:`~pearl_sched.profiles.fit.FittedComponent` (seconds).
            tp: the tensor-parallel degree fed to both components as a feature.
        """
        self.prefill = prefill
        self.decode = decode
        self.tp = tp
        self.extrapolated = 0
        self._prefill = functools.lru_cache(maxsize=65536)(self._prefill_exact)
        self._decode = functools.lru_cache(maxsize=65536)(self._decode_exact)

    def _predict(self, component: Any, row: list[float]) -> float:
        import numpy as np

        from pearl_sched.profiles.components import ExtrapolationWarning

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ExtrapolationWarning)
            value = float(component.predict(np.array([row]))[0])
        self.extrapolated += any(issubclass(w.category, ExtrapolationWarning) for w in caught)
        return max(value, 0.0)

    def _prefill_exact(self, tokens: float, sequences: int, cached: float) -> float:
        return self._predict(self.prefill, [tokens, cached, float(sequences), float(self.tp)])

    def _decode_exact(self, batch: int, context: float) -> float:
        return self._predict(self.decode, [float(batch), context, float(self.tp)])

    def prefill_s(self, new_tokens: float, sequences: int, cached_tokens: float) -> float:
        """A prefill batch of ``sequences`` with ``new_tokens`` in all, after ``cached_tokens`` each on average."""
        if new_tokens <= 0:
            return 0.0
        snap = ComposedStepTimes._snap
        return self._prefill(snap(new_tokens), max(sequences, 1), snap(cached_tokens))

    def decode_s(self, batch: int, context_tokens: float) -> float:
        """One decode iteration of ``batch`` sequences of mean context ``context_tokens``."""
        return self._decode(batch, ComposedStepTimes._snap(max(context_tokens, 1.0)))

    @property
    def source(self) -> str:
        """``fitted-profile``: the components' source, GPU, model and held-out errors."""
        parts = []
        for name, comp in (("prefill", self.prefill), ("decode", self.decode)):
            report = getattr(comp, "report", None)
            if report is not None:
                parts.append(
                    f"{name} {report.target} from {report.source} {report.gpu_type} {report.model} "
                    f"(held-out MAPE {report.heldout_mape_pct:.1f}%)"
                )
        where = "; ".join(parts) if parts else "components without reports"
        return f"fitted-profile ({where}; {self.extrapolated} extrapolated calls; mixed = prefill + decode)"
