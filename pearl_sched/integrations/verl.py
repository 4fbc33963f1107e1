"""verl: a policy in its dynamic-schedule registry, and its load balancer and replicas driven from a target.

Checked against verl 0.9.1 (PyPI; the ``verl`` extra installs it):

* ``verl/experimental/fully_async_policy/dynamic_schedule/base.py`` — ``register_policy(name)``,
  ``build_policy(name, **kwargs)``, ``DynamicSchedulePolicyBase`` and ``DynamicScheduleContext``. The fully
  async trainer (``fully_async_trainer.py``) builds the policy named by
  ``async_training.dynamic_schedule_policy`` with ``deactivate_ratio=`` and ``only_hybrid=`` and calls
  ``should_deactivate`` before each training step, ``deactivate_wait_samples`` for how many samples to buffer
  first, ``should_activate_after_step`` after each weight sync, then ``request_rebalance`` and
  ``update_after_step``. Its ``DynamicResourceController`` does the lending: hybrid replicas (on the trainer's
  GPUs) join the load balancer and resume; on deactivation they leave it, are aborted and sleep.
* ``verl/workers/rollout/router.py`` — ``GlobalRequestLoadBalancer.add_servers({address: handle})`` and
  ``remove_servers([address])``; ``verl/workers/rollout/replica.py`` — ``RolloutReplica.wake_up()``,
  ``sleep()``, ``abort_all_requests(reject_request=)`` and ``resume_generation()``.

verl imports this module itself: pearl_sched declares it under verl's ``verl.plugins`` entry points, which
``verl/__init__.py`` loads in every process that imports verl, so ``dynamic_schedule_policy: pearl_sched``
works in the trainer's Ray actor with nothing else to import. The policy reads its setup from
``$PEARL_SCHED_VERL_SETUP`` (a JSON file, :class:`VerlLendingSetup`) or from :func:`configure`.
"""

from __future__ import annotations

import inspect
import itertools
import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pearl_sched.config import PolicyConfig, TransitionCosts
from pearl_sched.errors import MissingExtraError
from pearl_sched.integrations.lending import IntegrationError, LendingGate

try:
    from verl.experimental.fully_async_policy.dynamic_schedule.base import (
        DynamicScheduleContext,
        DynamicSchedulePolicyBase,
        register_policy,
    )
except ImportError as exc:  # pragma: no cover - exercised where verl is absent
    raise MissingExtraError("verl", "verl") from exc

logger = logging.getLogger(__name__)

POLICY_NAME = "pearl_sched"
SETUP_ENV = "PEARL_SCHED_VERL_SETUP"


@dataclass(frozen=True)
class VerlLendingSetup:
    """What the policy needs beyond verl's context.

    Attributes:
        standalone_gpus: rollout-only GPUs (``rollout.nnodes × rollout.n_gpus_per_node``).
        hybrid_gpus: training GPUs that host hybrid replicas (``trainer.nnodes × trainer.n_gpus_per_node``).
        costs: activation / deactivation seconds before a toggle is measured (PEARL Table 3 by default).
        policy: the borrow gate's horizon, drain margin and EWMA weights.
    """

    standalone_gpus: int
    hybrid_gpus: int
    costs: TransitionCosts = field(default_factory=TransitionCosts)
    policy: PolicyConfig = field(default_factory=PolicyConfig)

    def __post_init__(self) -> None:
        """Check the GPU counts.

        Raises:
            IntegrationError: a negative count, or no hybrid GPU.
        """
        if self.standalone_gpus < 0 or self.hybrid_gpus < 1:
            raise IntegrationError(
                f"verl setup: standalone_gpus must be ≥ 0 and hybrid_gpus ≥ 1, "
                f"got {self.standalone_gpus} and {self.hybrid_gpus}"
            )

    @classmethod
    def from_json(cls, path: str | Path) -> VerlLendingSetup:
        """Read ``{"standalone_gpus": N, "hybrid_gpus": M, "costs": {...}, "policy": {...}}``.

        Raises:
            IntegrationError: the file is missing, not JSON, or a field is missing or wrong (named).
        """
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise IntegrationError(f"{path}: cannot read the verl setup: {exc}") from exc
        if not isinstance(data, dict):
            raise IntegrationError(f"{path}: the verl setup must be a JSON object")
        unknown = set(data) - {"standalone_gpus", "hybrid_gpus", "costs", "policy"}
        if unknown:
            raise IntegrationError(f"{path}: unknown field(s) {sorted(unknown)}")
        for name in ("standalone_gpus", "hybrid_gpus"):
            if not isinstance(data.get(name), int) or isinstance(data.get(name), bool):
                raise IntegrationError(f"{path}: {name} must be an integer, got {data.get(name)!r}")
        try:
            costs = TransitionCosts.model_validate(data.get("costs", {}))
            policy = PolicyConfig.model_validate(data.get("policy", {}))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise IntegrationError(f"{path}: {where}: {first['msg']}") from exc
        try:
            return cls(data["standalone_gpus"], data["hybrid_gpus"], costs, policy)
        except IntegrationError as exc:
            raise IntegrationError(f"{path}: {exc}") from exc


_configured: VerlLendingSetup | None = None


def configure(setup: VerlLendingSetup | None) -> None:
    """Set the setup the next policy verl builds in this process uses (``None`` goes back to the env file)."""
    global _configured
    _configured = setup


def current_setup() -> VerlLendingSetup:
    """The setup from :func:`configure`, else from ``$PEARL_SCHED_VERL_SETUP``.

    Raises:
        IntegrationError: neither is set (the message says how to set one).
    """
    if _configured is not None:
        return _configured
    path = os.environ.get(SETUP_ENV)
    if not path:
        raise IntegrationError(
            f"the {POLICY_NAME!r} verl policy needs its GPU counts: set {SETUP_ENV} to a JSON file "
            '{"standalone_gpus": N, "hybrid_gpus": M} (or call pearl_sched.integrations.verl.configure)'
        )
    return VerlLendingSetup.from_json(path)


@register_policy(POLICY_NAME)
class PearlSchedPolicy(DynamicSchedulePolicyBase):  # type: ignore[misc]  # verl is untyped (Any)
    """Lend the trainer's GPUs (verl's hybrid replicas) after a weight sync only when Eq. 7 says it pays.

    * ``should_deactivate``: the loan ends whenever training starts — the step needs its GPUs;
    * ``deactivate_wait_samples``: keep the loan until the step's first collection is buffered
      (``required_samples``): the trainer has nothing to train on before, so holding longer delays training and
      returning earlier wastes the idle GPUs; with no standalone replica the whole cycle
      (``step_required_samples``), as verl's own policies do;
    * ``should_activate_after_step``: :class:`~pearl_sched.integrations.lending.LendingGate` over the next
      collection: what is not yet buffered (``required_samples − (total_generated − expected)``), standalone vs
      standalone + hybrid GPUs, throughput measured from verl's ``step_wait_samples`` / ``step_wait_times``
      (collections run with the hybrid replicas asleep, so they time the standalone GPUs);
    * ``update_after_step``: the measured ``last_activate_duration_s + last_deactivate_duration_s`` of a cycle
      that did both updates ``T̂_toggle``.
    """

    def __init__(
        self, deactivate_ratio: float = 0.3, only_hybrid: bool = False, setup: VerlLendingSetup | None = None
    ) -> None:
        """Build as verl's ``build_policy`` does (``deactivate_ratio`` is accepted and unused: Eq. 7 decides).

        Args:
            deactivate_ratio: verl's ``dynamic_schedule_deactivate_ratio``; the built-in policies' knob.
            only_hybrid: no standalone replica: rollout runs only on the lent GPUs, so they are always lent.
            setup: GPU counts, costs and gate settings; :func:`current_setup` when ``None``.
        """
        self.deactivate_ratio = deactivate_ratio
        self.only_hybrid = only_hybrid
        self.setup = setup if setup is not None else current_setup()
        self.gate = LendingGate(costs=self.setup.costs, config=self.setup.policy)
        self.decisions: list[tuple[int, bool, str]] = []  # (global step, lend, reason)

    def should_deactivate(self, global_steps: int, is_hybrid_active: bool, ctx: DynamicScheduleContext) -> bool:
        """Reclaim the lent GPUs before every training step (nothing to reclaim when none are lent)."""
        return is_hybrid_active

    def deactivate_wait_samples(self, ctx: DynamicScheduleContext) -> int:
        """Samples to buffer before the GPUs go back: the first collection, or the cycle without standalone GPUs."""
        return int(ctx.step_required_samples if self.only_hybrid else ctx.required_samples)

    def should_activate_after_step(
        self, global_steps: int, is_hybrid_active: bool, ctx: DynamicScheduleContext
    ) -> bool:
        """Lend for the next collection if the seconds it saves beat the toggle cost (Eq. 7)."""
        if self.only_hybrid:
            return self._decided(global_steps, True, "borrow: no standalone replica, rollout runs on lent GPUs")
        if not is_hybrid_active and self.setup.standalone_gpus > 0:
            waited = sum(ctx.step_wait_samples)
            seconds = sum(t for t, n in zip(ctx.step_wait_times, ctx.step_wait_samples, strict=False) if n > 0)
            self.gate.throughput.observe(waited, seconds, self.setup.standalone_gpus)
        buffered = max(0, ctx.total_generated_samples - ctx.expected_samples)
        remaining = max(0, ctx.required_samples - buffered)
        decision = self.gate.decide(
            remaining_samples=remaining,
            batch_samples=max(1, ctx.required_samples),
            dedicated_gpus=self.setup.standalone_gpus,
            lent_gpus=self.setup.hybrid_gpus,
        )
        return self._decided(global_steps, decision.allow, decision.reason)

    def update_after_step(self, global_steps: int, ctx: DynamicScheduleContext) -> None:
        """Fold a cycle's measured activation + deactivation seconds into ``T̂_toggle``."""
        if ctx.last_activate_duration_s > 0 and ctx.last_deactivate_duration_s > 0:
            self.gate.observe_toggle(ctx.last_activate_duration_s + ctx.last_deactivate_duration_s)

    def _decided(self, global_steps: int, lend: bool, reason: str) -> bool:
        self.decisions.append((global_steps, lend, reason))
        logger.info("verl step %d: %s", global_steps, reason)
        return lend


async def _call(target: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call ``target.method`` on a Ray actor handle (``.remote``, awaited) or a plain object (awaited if async)."""
    bound = getattr(target, method)
    remote = getattr(bound, "remote", None)
    result = remote(*args, **kwargs) if remote is not None else bound(*args, **kwargs)
    return await result if inspect.isawaitable(result) else result


@dataclass(frozen=True)
class PoolChange:
    """What :meth:`VerlReplicaPool.apply` did: the addresses that joined and left the load balancer."""

    joined: tuple[str, ...]
    left: tuple[str, ...]


class VerlReplicaPool:
    """Keep the replicas in verl's load balancer equal to a target set, in verl's own order.

    Leaving: ``remove_servers`` first (no new request reaches it), then ``abort_all_requests(reject_request=
    True)`` (verl's clients retry partial rollouts elsewhere), then ``sleep()`` (KV cache and weights released).
    Joining: ``wake_up()``, ``add_servers``, ``resume_generation()``. This is how pearl_sched changes rollout
    capacity — and, with ``rollout.disaggregation.enabled``, prefill/decode capacity, by choosing among PD
    replicas of different shapes: verl fixes each PD replica's shape at launch (``SGLangPDReplica``: one
    prefill server, ``decode_replicas`` decode servers) and cannot re-role a server.

    verl's hybrid replicas (``RolloutMode.HYBRID``) refuse ``wake_up()``: they wake in the weight sync, which
    verl's ``DynamicResourceController`` runs — lend those through :class:`PearlSchedPolicy`, and give this pool
    standalone or colocated replicas.
    """

    def __init__(self, load_balancer: Any, replicas: Mapping[str, Any], *, active: Iterable[str] = ()) -> None:
        """Wrap verl's load balancer (a Ray actor handle or the plain class) and its replicas by address.

        Args:
            load_balancer: ``GlobalRequestLoadBalancer`` (or its Ray actor handle).
            replicas: server address → ``RolloutReplica``.
            active: the addresses already in the load balancer.

        Raises:
            IntegrationError: an active address that is not a known replica.
        """
        self.load_balancer = load_balancer
        self.replicas = dict(replicas)
        self.active = set(active)
        unknown = self.active - set(self.replicas)
        if unknown:
            raise IntegrationError(f"active addresses {sorted(unknown)} are not among the pool's replicas")

    async def apply(self, target: Iterable[str]) -> PoolChange:
        """Make the load balancer's set of these replicas exactly ``target``.

        Raises:
            IntegrationError: a target address that is not a known replica, or an empty target (verl's load
                balancer raises on a request when it has no server).
        """
        wanted = set(target)
        unknown = wanted - set(self.replicas)
        if unknown:
            raise IntegrationError(f"target addresses {sorted(unknown)} are not among the pool's replicas")
        if not wanted:
            raise IntegrationError("a target with no replica leaves verl's load balancer with no server")
        leaving = sorted(self.active - wanted)
        joining = sorted(wanted - self.active)
        if leaving:
            await _call(self.load_balancer, "remove_servers", leaving)
            self.active -= set(leaving)
            for address in leaving:
                await self.replicas[address].abort_all_requests(reject_request=True)
                await self.replicas[address].sleep()
        for address in joining:
            replica = self.replicas[address]
            await replica.wake_up()
            await _call(self.load_balancer, "add_servers", {address: replica.server_handle})
            self.active.add(address)
            await replica.resume_generation()
        if leaving or joining:
            logger.info("verl load balancer: joined %s, left %s", joining, leaving)
        return PoolChange(tuple(joining), tuple(leaving))


def pd_replicas_for(
    shapes: Mapping[str, tuple[int, int]], prefill_workers: int, decode_workers: int, *, max_replicas: int = 16
) -> list[str]:
    """The PD replicas whose servers come closest to a plan's prefill and decode worker counts.

    verl fixes each PD replica's shape at launch, so a plan's P:D is reached by which replicas are in the load
    balancer (:class:`VerlReplicaPool`). Among the non-empty subsets, the one minimising
    ``|ΣP − prefill_workers| + |ΣD − decode_workers|``, then with fewer replicas, then first in address order.

    Args:
        shapes: server address → (prefill servers, decode servers) of that replica (``(1, decode_replicas)`` in
            verl 0.9.1).
        prefill_workers: the plan's prefill workers.
        decode_workers: the plan's decode workers.
        max_replicas: the search is exhaustive; more replicas than this are refused.

    Raises:
        IntegrationError: no replica, more than ``max_replicas``, a negative count or an empty replica.
    """
    if not shapes or len(shapes) > max_replicas:
        raise IntegrationError(f"need 1 to {max_replicas} PD replicas to choose from, got {len(shapes)}")
    if prefill_workers < 0 or decode_workers < 0:
        raise IntegrationError("the plan's prefill and decode worker counts must be ≥ 0")
    for address, (prefill, decode) in shapes.items():
        if prefill < 0 or decode < 0 or prefill + decode == 0:
            raise IntegrationError(f"PD replica {address}: shape {(prefill, decode)} has no server")
    addresses = sorted(shapes)
    best: tuple[int, int, tuple[str, ...]] | None = None
    for size in range(1, len(addresses) + 1):
        for subset in itertools.combinations(addresses, size):
            prefill = sum(shapes[a][0] for a in subset)
            decode = sum(shapes[a][1] for a in subset)
            key = (abs(prefill - prefill_workers) + abs(decode - decode_workers), size, subset)
            if best is None or key < best:
                best = key
    assert best is not None
    return list(best[2])
