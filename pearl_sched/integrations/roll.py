"""ROLL: lend the training GPUs to rollout through its partial-GPU mode, only when Eq. 7 says it pays.

Checked against alibaba/ROLL at commit 8eb27cc (ROLL is not on PyPI: the name ``roll`` there is an unrelated
package; its own ``setup.py`` says ``roll`` 0.3.0):

* ``roll/distributed/scheduler/rollout_scheduler.py`` — ``RolloutScheduler.shrink_sampler(target_gpus) ->
  dict`` and ``expand_sampler(target_gpus, skip_load=False) -> dict``, async methods of a Ray actor, which
  delegate to ``PartialGPUManager`` in ``roll/distributed/scheduler/router.py``: shrink aborts the requests on
  the inference DP ranks that touch ``target_gpus`` and offloads them (metrics ``aborted``, ``remapped``,
  ``shrink_duration_ms``, ``offload_ranks``); expand loads the ranks inside ``target_gpus`` (unless
  ``skip_load``) and rebalances routing onto them (``expand_duration_ms``, ``load_ranks``). Its check that a
  shrunk rank was active is commented out, so shrinking ranks that were never expanded is accepted.
* ``roll/pipeline/agentic/agentic_pipeline.py`` — in partial-GPU mode (``actor_train`` GPUs a subset of
  ``actor_infer``'s, ``async_generation_ratio > 0``) every step calls
  ``expand_sampler(train_gpus, skip_load=True)`` after ``model_update`` (which loaded the inference weights on
  all GPUs), generates the batch, then ``shrink_sampler(train_gpus)`` before training.

ROLL has no registry or callback there: the pipeline calls the scheduler actor directly. A pipeline subclass
replaces those two calls with :meth:`RollLending.expand` and :meth:`RollLending.shrink` (docs/adapters.md#roll).
The expand is skipped when lending does not pay; the shrink always runs, because ``model_update`` put the
inference weights on the training GPUs either way and training needs that memory back.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Sequence
from typing import Any

from pearl_sched.integrations.lending import IntegrationError, LendingGate

logger = logging.getLogger(__name__)


async def _call(target: Any, method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Call a Ray actor's method (``.remote``, awaited) or a plain object's; ROLL's return a metrics dict."""
    bound = getattr(target, method)
    remote = getattr(bound, "remote", None)
    result = remote(*args, **kwargs) if remote is not None else bound(*args, **kwargs)
    result = await result if inspect.isawaitable(result) else result
    if not isinstance(result, dict):
        raise IntegrationError(f"ROLL's {method} returned {type(result).__name__}, expected its metrics dict")
    return result


class RollLending:
    """ROLL's expand / shrink of the training GPUs behind a :class:`LendingGate`."""

    def __init__(
        self,
        scheduler: Any,
        *,
        train_gpus: Sequence[int],
        infer_only_gpus: int,
        gate: LendingGate | None = None,
        clock: Any = time.monotonic,
    ) -> None:
        """Wrap ROLL's train ``RolloutScheduler`` (its Ray actor handle, or the object).

        Args:
            scheduler: ``RolloutScheduler`` with ``shrink_sampler`` / ``expand_sampler``.
            train_gpus: the GPU ids ROLL shrinks and expands: ``actor_train``'s ``device_mapping`` (and the
                critic's under GAE), as the pipeline collects them.
            infer_only_gpus: GPUs that serve rollout whatever happens (``actor_infer`` less ``train_gpus``).
            gate: the Eq. 7 gate; a fresh :class:`LendingGate` (PEARL Table 3 costs) when ``None``.
            clock: seconds, for timing the rollout when ROLL's metrics do not.

        Raises:
            IntegrationError: no training GPU, a repeated GPU id, or no inference-only GPU (partial-GPU mode
                needs one: ROLL refuses ``actor_infer.dp_size < 2``).
        """
        if not train_gpus or len(set(train_gpus)) != len(train_gpus):
            raise IntegrationError(f"train_gpus must be distinct GPU ids, at least one; got {list(train_gpus)}")
        if infer_only_gpus < 1:
            raise IntegrationError("ROLL's partial-GPU mode needs at least one inference-only GPU")
        self.scheduler = scheduler
        self.train_gpus = list(train_gpus)
        self.infer_only_gpus = infer_only_gpus
        self.gate = gate or LendingGate()
        self.clock = clock
        self.lent = False
        self._expand_s: float | None = None

    async def expand(
        self,
        *,
        remaining_samples: float,
        batch_samples: float,
        skip_load: bool = True,
        makespan_dedicated_s: float | None = None,
        makespan_full_s: float | None = None,
    ) -> dict[str, Any]:
        """``expand_sampler(train_gpus, skip_load)`` if lending pays for what remains of the batch.

        Args:
            remaining_samples: samples of the step's batch not yet generated (with ``async_generation_ratio``
                some were generated during the last training step).
            batch_samples: ``rollout_batch_size``.
            skip_load: passed to ROLL (``True`` after ``model_update``, as its pipeline does).
            makespan_dedicated_s: ``T̂`` for the batch on the inference-only GPUs, from a fitted model; from the
                measured throughput (:meth:`observe_rollout`) when ``None``.
            makespan_full_s: ``T̂`` with the training GPUs lent.

        Returns:
            ROLL's metrics when it expanded, and always ``pearl/lend`` (1.0 or 0.0); the pipeline logs them
            under ``expand/``.
        """
        decision = self.gate.decide(
            remaining_samples=remaining_samples,
            batch_samples=batch_samples,
            dedicated_gpus=self.infer_only_gpus,
            lent_gpus=len(self.train_gpus),
            makespan_dedicated_s=makespan_dedicated_s,
            makespan_full_s=makespan_full_s,
        )
        if not decision.allow:
            logger.info("ROLL: expand of GPUs %s skipped: %s", self.train_gpus, decision.reason)
            return {"pearl/lend": 0.0}
        started = self.clock()
        metrics = await _call(self.scheduler, "expand_sampler", self.train_gpus, skip_load=skip_load)
        self.lent = True
        self._expand_s = _seconds(metrics, "expand_duration_ms", self.clock() - started)
        return {**metrics, "pearl/lend": 1.0}

    async def shrink(self) -> dict[str, Any]:
        """``shrink_sampler(train_gpus)``; after a lend, its time and the expand's update ``T̂_toggle``."""
        started = self.clock()
        metrics = await _call(self.scheduler, "shrink_sampler", self.train_gpus)
        if self.lent and self._expand_s is not None:
            self.gate.observe_toggle(self._expand_s + _seconds(metrics, "shrink_duration_ms", self.clock() - started))
        self.lent, self._expand_s = False, None
        return metrics

    def observe_rollout(self, samples: float, seconds: float) -> None:
        """Fold a finished rollout phase (``rollout_batch_size`` samples in ``time/step_rollout``) into throughput.

        The phase ran on the inference-only GPUs, plus the training GPUs when they were lent.
        """
        gpus = self.infer_only_gpus + (len(self.train_gpus) if self.lent else 0)
        self.gate.throughput.observe(samples, seconds, gpus)


def _seconds(metrics: dict[str, Any], key: str, fallback_s: float) -> float:
    value = metrics.get(key)
    return float(value) / 1000.0 if isinstance(value, int | float) and not isinstance(value, bool) else fallback_s
