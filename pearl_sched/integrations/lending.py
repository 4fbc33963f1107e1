"""Lending training GPUs to rollout, decided the same way in every framework: PEARL's Eq. 7.

A framework hands its training GPUs to rollout between optimizer steps (verl's hybrid replicas, ROLL's
``expand_sampler``). :class:`LendingGate` says whether that pays for the batch in flight: the rollout seconds
the lent GPUs save, ``(R/B)·(T̂_dedicated − T̂_full)`` (or that saving over the trainer's idle window, per
``PolicyConfig.gate_horizon``), against ``T̂_toggle``, the EWMA of measured activation + deactivation seconds
(:func:`pearl_sched.policies.borrow_gate`). ``T̂`` comes from the caller's makespan model when it has one,
else from the throughput the framework reports (:class:`Throughput`: samples per second per rollout GPU,
scaled by GPU count — an assumption the docs state; a fitted profile is better).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.errors import PearlSchedError
from pearl_sched.plans import PolicyState
from pearl_sched.policies import GateDecision, borrow_gate, observe_toggle

logger = logging.getLogger(__name__)


class IntegrationError(PearlSchedError, ValueError):
    """A framework integration was given something it cannot use (the message names what and why)."""


def _finite_non_negative(value: float, what: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise IntegrationError(f"{what} must be a finite number ≥ 0, got {value!r}")
    return value


@dataclass
class Throughput:
    """EWMA of rollout throughput, in samples per second per rollout GPU.

    Attributes:
        alpha: weight of a new measurement.
        per_gpu_samples_per_s: the estimate; ``None`` before the first measurement.
    """

    alpha: float = 0.3
    per_gpu_samples_per_s: float | None = None

    def observe(self, samples: float, seconds: float, gpus: int) -> None:
        """Fold in ``samples`` finished in ``seconds`` by ``gpus`` rollout GPUs (ignored when nothing was timed).

        Raises:
            IntegrationError: a negative or non-finite count, or fewer than one GPU.
        """
        _finite_non_negative(samples, "samples")
        _finite_non_negative(seconds, "seconds")
        if gpus < 1:
            raise IntegrationError(f"gpus must be ≥ 1, got {gpus}")
        if seconds == 0 or samples == 0:
            return
        sample = samples / seconds / gpus
        previous = self.per_gpu_samples_per_s
        self.per_gpu_samples_per_s = sample if previous is None else (1 - self.alpha) * previous + self.alpha * sample

    def makespan_s(self, samples: float, gpus: int) -> float | None:
        """Seconds ``gpus`` rollout GPUs take for ``samples`` more samples; ``None`` before any measurement."""
        if self.per_gpu_samples_per_s is None or gpus < 1:
            return None
        return samples / (self.per_gpu_samples_per_s * gpus)


class LendingGate:
    """Eq. 7 for one framework run: decides each lend, learns ``T̂_toggle`` from the measured ones."""

    def __init__(
        self,
        *,
        costs: TransitionCosts | None = None,
        config: PolicyConfig | None = None,
        state: PolicyState | None = None,
        throughput: Throughput | None = None,
    ) -> None:
        """Start from PEARL's Table 3 costs (``TransitionCosts()``) until a toggle is measured.

        Args:
            costs: activation / deactivation seconds used before a toggle is measured, and the drain margin's
                companions for the idle-window rule.
            config: the gate's horizon, drain margin and EWMA weights.
            state: carried-over ``T̂_toggle`` (e.g. from a previous run).
            throughput: the throughput estimate :meth:`decide` falls back on.
        """
        self.costs = costs or TransitionCosts()
        self.config = config or PolicyConfig()
        self.state = state or PolicyState()
        self.throughput = throughput or Throughput()
        self.last: GateDecision | None = None

    def decide(
        self,
        *,
        remaining_samples: float,
        batch_samples: float,
        dedicated_gpus: int,
        lent_gpus: int,
        makespan_dedicated_s: float | None = None,
        makespan_full_s: float | None = None,
        idle_window_s: float | None = None,
    ) -> GateDecision:
        """Whether lending ``lent_gpus`` training GPUs to the ``dedicated_gpus`` rollout GPUs pays now.

        Args:
            remaining_samples: samples of the batch still to generate (``R``).
            batch_samples: samples in the batch (``B``).
            dedicated_gpus: rollout GPUs that serve whether or not the trainer lends.
            lent_gpus: training GPUs the lend would add.
            makespan_dedicated_s: ``T̂_dedicated`` for the whole batch from the caller's model; from
                :attr:`throughput` when ``None``.
            makespan_full_s: ``T̂_full`` likewise, with the lent GPUs.
            idle_window_s: the trainer's idle seconds the loan would fill; by default the time the dedicated GPUs
                need for what remains (the trainer waits that long without a loan).

        Raises:
            IntegrationError: a negative count, ``batch_samples`` of 0, or only one of the two makespans.
        """
        _finite_non_negative(remaining_samples, "remaining_samples")
        if _finite_non_negative(batch_samples, "batch_samples") == 0:
            raise IntegrationError("batch_samples must be > 0")
        if lent_gpus < 1:
            return self._record(GateDecision(False, "no borrow: no training GPU to lend"))
        if dedicated_gpus < 1:
            return self._record(GateDecision(True, "borrow: no dedicated rollout GPU, rollout runs on lent GPUs"))
        if remaining_samples == 0:
            return self._record(GateDecision(False, "no borrow: the batch is already generated"))
        if (makespan_dedicated_s is None) != (makespan_full_s is None):
            raise IntegrationError("give both makespan_dedicated_s and makespan_full_s, or neither")
        if makespan_dedicated_s is None or makespan_full_s is None:
            dedicated = self.throughput.makespan_s(batch_samples, dedicated_gpus)
            full = self.throughput.makespan_s(batch_samples, dedicated_gpus + lent_gpus)
            if dedicated is None or full is None:
                return self._record(GateDecision(True, "borrow: no throughput measured yet, lending to measure it"))
            makespan_dedicated_s, makespan_full_s = dedicated, full
        fraction = remaining_samples / batch_samples
        window = idle_window_s if idle_window_s is not None else fraction * makespan_dedicated_s
        decision = borrow_gate(
            makespan_dedicated_s=_finite_non_negative(makespan_dedicated_s, "makespan_dedicated_s"),
            makespan_full_s=_finite_non_negative(makespan_full_s, "makespan_full_s"),
            unfinished_fraction=fraction,
            state=self.state,
            costs=self.costs,
            config=self.config,
            idle_window_s=window,
        )
        return self._record(decision)

    def observe_toggle(self, measured_s: float) -> None:
        """Fold one measured activation + deactivation (seconds) into ``T̂_toggle``.

        Raises:
            IntegrationError: a negative or non-finite time.
        """
        self.state = observe_toggle(
            self.state, _finite_non_negative(measured_s, "measured toggle seconds"), self.config
        )

    def _record(self, decision: GateDecision) -> GateDecision:
        self.last = decision
        logger.info("lending: %s", decision.reason)
        return decision
