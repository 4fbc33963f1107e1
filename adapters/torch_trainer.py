"""A reference TrainerAdapter for a plain torch model and optimizer.

``lend`` moves the parameters, their gradients and the optimizer state to host memory and releases the CUDA
cache, so SGLang can take the GPUs; ``reclaim`` moves everything back (and says how long that took against
the deadline). ``publish_weights`` writes the weights as safetensors for ``/update_weights_from_disk`` and
returns the directory; the weight version counts finished training steps. A training step while the GPUs are
lent is refused (:meth:`TorchTrainer.training`), never silently run on the wrong device.

Hooks for the RL frameworks' step boundaries are in docs/adapters.md (verl, ROLL, slime).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pearl_sched.errors import MissingExtraError, PearlSchedError

try:
    import torch
except ImportError as exc:  # pragma: no cover - the torch extra installs it
    raise MissingExtraError(exc.name or "torch", "torch") from exc

logger = logging.getLogger(__name__)


class TrainerBusyError(PearlSchedError):
    """The trainer was asked to train while its GPUs are lent to rollout (or to lend while training)."""


class TorchTrainer:
    """Implements :class:`pearl_sched.control.TrainerAdapter` for one model and its optimizer."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        gpu_ids: Sequence[str],
        publish_dir: str | Path,
        device: str | torch.device = "cuda",
        offload_device: str | torch.device = "cpu",
    ) -> None:
        """Manage one model and optimizer on the trainer's GPUs.

        Args:
            model: the policy being trained.
            optimizer: its optimizer; its state moves with the parameters.
            gpu_ids: the cluster's ids of the GPUs this trainer owns and may lend.
            publish_dir: where :meth:`publish_weights` writes each version.
            device: where training runs.
            offload_device: where parameters, gradients and optimizer state wait while the GPUs are lent.
        """
        self.model = model
        self.optimizer = optimizer
        self.gpu_ids = tuple(gpu_ids)
        self.publish_dir = Path(publish_dir)
        self.device = torch.device(device)
        self.offload_device = torch.device(offload_device)
        self.lent: set[str] = set()
        self.version = 0
        self.busy = False
        self.last_reclaim_s: float | None = None

    # -- TrainerAdapter -------------------------------------------------------------------------------------
    def weight_version(self) -> int:
        """The number of training steps completed (the version :meth:`publish_weights` writes)."""
        return self.version

    def lend(self, gpu_ids: Sequence[str]) -> None:
        """Move parameters, gradients and optimizer state to ``offload_device`` and free the CUDA cache.

        The first GPU lent moves everything; lending more only records them.

        Raises:
            ValueError: a GPU id the trainer does not own.
            TrainerBusyError: called during a training step.
        """
        unknown = set(gpu_ids) - set(self.gpu_ids)
        if unknown:
            raise ValueError(f"the trainer does not own GPUs {sorted(unknown)}")
        if self.busy:
            raise TrainerBusyError("cannot lend GPUs in the middle of a training step")
        if not self.lent:
            self._move(self.offload_device)
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        self.lent |= set(gpu_ids)

    def reclaim(self, gpu_ids: Sequence[str], deadline_s: float) -> None:
        """Take GPUs back; once none is lent, move the state back to ``device``.

        The seconds it took are kept in ``last_reclaim_s``; exceeding ``deadline_s`` (when > 0) logs a warning.
        """
        start = time.monotonic()
        self.lent -= set(gpu_ids)
        if not self.lent:
            self._move(self.device)
        self.last_reclaim_s = time.monotonic() - start
        if deadline_s > 0 and self.last_reclaim_s > deadline_s:
            logger.warning("reclaim took %.2f s, past its %.2f s deadline", self.last_reclaim_s, deadline_s)

    def publish_weights(self) -> str:
        """Write ``model.safetensors`` (and the version) under ``publish_dir/v<version>``; returns that dir."""
        from safetensors.torch import save_file

        target = self.publish_dir / f"v{self.version}"
        target.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in self.model.state_dict().items()}
        save_file(tensors, str(target / "model.safetensors"), metadata={"weight_version": str(self.version)})
        return str(target)

    # -- the training side ----------------------------------------------------------------------------------
    @contextmanager
    def training(self) -> Iterator[None]:
        """Wrap one training step: refused while GPUs are lent; the version advances when it ends."""
        if self.lent:
            raise TrainerBusyError(f"GPUs {sorted(self.lent)} are lent to rollout: reclaim them before training")
        self.busy = True
        try:
            yield
            self.version += 1
        finally:
            self.busy = False

    def _move(self, device: torch.device) -> None:
        self.model.to(device)
        for param in self.model.parameters():
            if param.grad is not None:
                param.grad = param.grad.to(device)
        for state in self.optimizer.state.values():
            for key, value in list(state.items()):
                if isinstance(value, torch.Tensor):
                    state[key] = value.to(device)

    def state_fingerprint(self) -> dict[str, Any]:
        """Sums of every parameter and optimizer tensor: equal before lending and after reclaiming."""
        out: dict[str, Any] = {f"p:{k}": float(v.double().sum()) for k, v in self.model.state_dict().items()}
        for i, state in enumerate(self.optimizer.state.values()):
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    out[f"o:{i}:{key}"] = float(value.double().sum())
        return out
