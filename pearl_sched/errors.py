"""The exception tree of pearl_sched.

Every error the library raises on purpose derives from :class:`PearlSchedError`; each subclass carries the
data a caller needs to react (not just a message), so an orchestrator can, for example, ask for more GPUs
when a budget is infeasible.
"""

from __future__ import annotations


class PearlSchedError(Exception):
    """Root of every error raised by pearl_sched on purpose."""


class InvalidStateError(PearlSchedError, ValueError):
    """An input the planner cannot model: the makespan model has no parameters for a worker's GPU type and TP.

    Raised by :meth:`~pearl_sched.makespan.PearlMakespanModel.device` (so by ``plan()`` and every predictor
    call) when a worker's (GPU type, TP degree) pair is missing from the model's parameters; the message lists
    the pairs it knows. The cluster state's own rules — field-level ones and those that span several objects
    (a GPU in two workers, a TP group across nodes, ...) — are checked by the state's validators, which raise
    ``ValueError`` surfaced by Pydantic as ``ValidationError`` (docs/state.md).
    """


class InfeasiblePlanError(PearlSchedError):
    """No configuration satisfies the budget and the constraints.

    Attributes:
        min_gpus_needed: The fewest rollout GPUs with which some configuration would be feasible, or ``None``
            when no number of GPUs helps (e.g. a KV requirement no pool in the cluster can meet).
        binding_constraint: Short name of the constraint that binds: ``"budget"``, ``"kv_capacity"``,
            ``"prefill_capacity"``, ``"kv_and_prefill_capacity"`` (both fall short: lifting either one alone
            does not help), ``"no_eligible_workers"`` or ``"disaggregated_needs_prefill_and_decode"``.
    """

    def __init__(self, message: str, *, min_gpus_needed: int | None, binding_constraint: str) -> None:
        """Carry the message and the data of the class docstring's attributes."""
        super().__init__(message)
        self.min_gpus_needed = min_gpus_needed
        self.binding_constraint = binding_constraint


class SolverUnavailableError(PearlSchedError):
    """A solver backend was asked for but its package is not installed.

    Attributes:
        backend: The backend name.
        extra: The pip extra that installs it (``pip install 'pearl-sched[<extra>]'``).
    """

    def __init__(self, backend: str, extra: str | None) -> None:
        """Name the backend and, when there is one, the extra to install."""
        hint = f": pip install 'pearl-sched[{extra}]'" if extra else ""
        super().__init__(f"solver backend {backend!r} is not installed{hint}")
        self.backend = backend
        self.extra = extra


class SolverError(PearlSchedError):
    """A solver backend failed in a way that has no feasible fallback."""


class MissingExtraError(PearlSchedError, ImportError):
    """An optional dependency is missing; the message names the extra that installs it."""

    def __init__(self, package: str, extra: str) -> None:
        """Name the missing package and the extra that installs it."""
        super().__init__(f"{package} is needed here: pip install 'pearl-sched[{extra}]'")
        self.package = package
        self.extra = extra


class TelemetryRejected(PearlSchedError, ValueError):
    """A step's rollout telemetry was not usable; ``reason`` says why.

    Raised by :func:`pearl_sched.profiles.step_statistics`; :func:`pearl_sched.profiles.refit` catches it and
    keeps the running estimate (docs/profiles.md).

    Attributes:
        reason: One line naming the column or rule the telemetry broke.
    """

    def __init__(self, reason: str) -> None:
        """Reject with ``reason``."""
        super().__init__(reason)
        self.reason = reason


class SimulationError(PearlSchedError, RuntimeError):
    """The simulated cluster reached a state it cannot run from (no rollout worker, a stalled batch).

    Raised by :func:`pearl_sched.sim.cluster.run_segment` and the simulated cluster it drives; it means the
    decider under test left the cluster unable to serve, not that the simulator failed (docs/simulator.md).
    """


class UnknownModelError(PearlSchedError, ValueError):
    """A model name has no shipped config; the message lists the known ones (docs/profiles.md)."""
