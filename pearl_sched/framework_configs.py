"""An :class:`~pearl_sched.advisor.Advice` written in an RL framework's own configuration (docs/advise.md).

Each framework can express only some rollout layouts; where pearl_sched's plan is not one of them, the best layout
the framework can express (lowest predicted makespan, then fewest GPUs; a layout that lends only where the planner's
borrowing gate passes it) is written instead and the gap is said.
What each can express, read from its code:

- **verl 0.9.1** (``verl/workers/config/disaggregation.py``, ``verl/trainer/config/rollout/rollout.yaml``,
  ``verl/workers/rollout/sglang_rollout/sglang_pd_replica.py``, ``verl/trainer/ppo/v1/trainer_separate_async.py``):
  colocated replicas, or PD replicas of exactly 1 prefill + n decode servers (``prefill_replicas`` must be 1; a
  replica fits one node), all replicas alike, the rollout GPUs ``nnodes × n_gpus_per_node``. Lending idle trainer
  GPUs (``trainer.v1.separate_async.hybrid_rollout.enable_switch``) lends all of them and is refused with
  disaggregation.
- **slime** (``slime/backends/sglang_utils/sglang_config.py``, docs/en/advanced/sglang-config.md): any numbers of
  prefill and decode servers as ``--sglang-config`` server groups; no way to lend training GPUs to rollout.
- **ROLL** (``roll/pipeline/agentic/agentic_pipeline.py`` ``_validate_partial_gpu_config``,
  ``roll/configs/worker_config.py``): colocated SGLang workers only (no PD disaggregation in ``actor_infer``);
  lending is partial-GPU mode — ``actor_train.device_mapping`` inside ``actor_infer.device_mapping``, at least 2
  inference workers and ``async_generation_ratio`` > 0 — and lends every training GPU.
- **AReaL** (``areal/api/alloc_mode.py``, docs/en/reference/alloc_mode.md): ``rollout.backend`` is
  ``sglang:d<instances>t<tp>``; the grammar has no prefill/decode split and no lending.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pearl_sched.advisor import LENDABLE_PREFIX, STEADY_STATE_COSTS, Advice, Framework
from pearl_sched.config import PolicyConfig
from pearl_sched.plans import PolicyState
from pearl_sched.policies import borrow_gate
from pearl_sched.state import Mode, Role, ratio_label

VERL_VERSION = "0.9.1"


@dataclass(frozen=True)
class Layout:
    """A rollout layout of same-size workers: counts per role, how many are lent training workers, its prediction."""

    mode: Mode
    prefill: int
    decode: int
    colocated: int
    lent: int
    predicted_s: float

    @property
    def ratio(self) -> str:
        """``3P5D`` or ``8C``."""
        return ratio_label(self.mode, self.prefill, self.decode, self.colocated)

    @property
    def workers(self) -> int:
        """Rollout workers, lent ones included."""
        return self.prefill + self.decode + self.colocated


@dataclass(frozen=True)
class FrameworkAdvice:
    """What is written for one framework: the layout, whether it is the plan's own, and why not if not."""

    framework: Framework
    layout: Layout
    planned: Layout
    limitation: str

    @property
    def gap_pct(self) -> float:
        """How much slower (predicted) the written layout is than pearl_sched's plan, in percent."""
        return 100.0 * (self.layout.predicted_s / self.planned.predicted_s - 1.0)


def planned_layout(advice: Advice) -> Layout:
    """pearl_sched's plan as a :class:`Layout`, scored as the planner scores it (:func:`_makespan_s`)."""
    p = advice.plan
    counts = (p.prefill_workers, p.decode_workers, p.colocated_workers)
    return Layout(p.mode, *counts, advice.lent_workers, _makespan_s(advice, p.mode, *counts))


def _worker_counts(advice: Advice) -> tuple[int, int]:
    lendable = sum(1 for a in advice.plan.assignment if a.worker_id.startswith(LENDABLE_PREFIX))
    return len(advice.plan.assignment) - lendable, lendable


def _predict(advice: Advice, mode: Mode, prefill: int, decode: int, colocated: int, lent: int) -> Layout | None:
    """The layout with its makespan as the planner scores it, or None when the batch's KV does not fit its KV workers.

    Same-size workers count one reference worker each (the advice has one worker size).
    """
    w = advice.workload
    device = advice.params.devices[0]
    holders = decode if mode is Mode.DISAGGREGATED else colocated
    if holders * device.kv_capacity_bytes < w.unfinished * w.kv_bytes_per_trajectory:
        return None
    total = _makespan_s(advice, mode, prefill, decode, colocated)
    return Layout(mode, prefill, decode, colocated, lent, total) if math.isfinite(total) else None


def _makespan_s(advice: Advice, mode: Mode, prefill: int, decode: int, colocated: int) -> float:
    """The makespan the planner scores a configuration by: the slowest pool's time plus the environment's.

    ``MakespanModel.terms``, as ``problem.evaluate`` uses them, with same-size workers one reference worker each.
    """
    terms = advice.model.terms(advice.workload)
    counts = {Role.PREFILL: prefill, Role.DECODE: decode, Role.COLOCATED: colocated}
    roles = (Role.PREFILL, Role.DECODE) if mode is Mode.DISAGGREGATED else (Role.COLOCATED,)
    return max(terms.pool(role).time_s(float(counts[role])) for role in roles) + terms.environment_s


def verl_nodes(gpus: int, replica_gpus: int, per_node: int) -> tuple[int, int] | None:
    """The ``(nnodes, n_gpus_per_node)`` verl needs for ``gpus`` rollout GPUs of whole replicas, each in one node.

    verl places ``nnodes × n_gpus_per_node`` GPUs and cuts them into replicas of ``replica_gpus`` (``llm_server.py``:
    ``num_replicas = world_size // rollout_world_size``; a PD replica must fit one node, ``sglang_pd_replica.py``),
    so ``n_gpus_per_node`` (at most the node's GPUs) must be a multiple of the replica and divide ``gpus``. The
    widest such ``n_gpus_per_node`` is chosen; None when there is none.
    """
    for n in range(min(per_node, gpus), 0, -1):
        if gpus % n == 0 and n % replica_gpus == 0:
            return gpus // n, n
    return None


def _loan_pays(advice: Advice, dedicated_used: int, layout: Layout) -> bool:
    """The planner's borrowing gate on a colocated layout with its loan against the same without it."""
    alone = _makespan_s(advice, Mode.COLOCATED, 0, 0, dedicated_used)
    return borrow_gate(
        makespan_dedicated_s=alone,
        makespan_full_s=layout.predicted_s,
        unfinished_fraction=advice.workload.unfinished_fraction,
        state=PolicyState(),
        costs=STEADY_STATE_COSTS,
        config=PolicyConfig(),
        idle_window_s=advice.idle_window_s,
    ).allow


def _candidates(advice: Advice, framework: Framework) -> Iterator[Layout | None]:
    dedicated, lendable = _worker_counts(advice)
    tp, per_node = advice.inputs.tp, advice.inputs.gpus_per_node
    lend_options = [0] + ([lendable] if advice.lent_workers and framework in ("verl", "roll") else [])
    for lent in lend_options:
        for used in range(1, dedicated + 1):  # dedicated workers used, the lent ones on top
            layout = _predict(advice, Mode.COLOCATED, 0, 0, used + lent, lent)
            if lent and layout is not None and not _loan_pays(advice, used, layout):
                continue
            yield layout
    if framework == "verl":
        for decode_per in range(1, dedicated):
            for replicas in range(1, dedicated // (1 + decode_per) + 1):
                if verl_nodes(replicas * (1 + decode_per) * tp, (1 + decode_per) * tp, per_node):
                    yield _predict(advice, Mode.DISAGGREGATED, replicas, replicas * decode_per, 0, 0)
    elif framework == "slime":
        for p in range(1, dedicated):
            for d in range(1, dedicated - p + 1):
                yield _predict(advice, Mode.DISAGGREGATED, p, d, 0, 0)


def _expressible(advice: Advice, framework: Framework, layout: Layout) -> str:
    """Why ``framework`` cannot express ``layout`` (``""`` when it can)."""
    tp, per_node = advice.inputs.tp, advice.inputs.gpus_per_node
    _, lendable = _worker_counts(advice)
    if layout.lent and framework in ("slime", "areal"):
        return f"{framework} has no way to lend training GPUs to rollout"
    if layout.lent and layout.lent != lendable:
        return f"{framework} lends all {lendable} training workers or none, not {layout.lent}"
    if layout.mode is Mode.DISAGGREGATED:
        if framework in ("roll", "areal"):
            return f"{framework} has no prefill-decode disaggregation in its rollout configuration"
        if framework == "verl":
            if layout.lent:
                return "verl refuses hybrid_rollout.enable_switch (lending) with rollout disaggregation"
            if layout.decode % layout.prefill:
                return "verl's PD replicas have 1 prefill and n decode servers each (prefill_replicas=1)"
            replica = (1 + layout.decode // layout.prefill) * tp
            if not verl_nodes(layout.prefill * replica, replica, per_node):
                return f"verl's PD replicas of {replica} GPUs do not fit nodes of {per_node} GPUs"
    elif framework == "verl" and not verl_nodes((layout.colocated - layout.lent) * tp, tp, per_node):
        return f"verl's rollout GPUs are nnodes × n_gpus_per_node on nodes of {per_node}"
    if framework == "roll" and layout.lent and layout.colocated < 2:
        return "ROLL's partial-GPU mode needs at least 2 inference workers"
    return ""


def advise_for(advice: Advice, framework: Framework) -> FrameworkAdvice:
    """The layout to write for ``framework``: the plan's own when it can express it, else its best expressible one."""
    planned = planned_layout(advice)
    why = _expressible(advice, framework, planned)
    if not why:
        return FrameworkAdvice(framework, planned, planned, "")
    options = [c for c in _candidates(advice, framework) if c is not None and not _expressible(advice, framework, c)]
    if not options:
        raise ValueError(f"{framework} can express no layout whose KV holds the batch within the budget")
    best = min(options, key=lambda c: (round(c.predicted_s, 9), c.workers))
    return FrameworkAdvice(framework, best, planned, why)


# -- writing ------------------------------------------------------------------------------------------------------
def _sizes(advice: Advice) -> str:
    """The plan's workers by role and size (``prefill 5×tp2; decode 3×tp2``), as ``pearl-sched plan`` prints them."""
    from pearl_sched.transition import chosen_sizes

    assert advice.state is not None
    sizes = chosen_sizes(advice.state, advice.plan.actions)
    return "; ".join(
        f"{role.value} " + " + ".join(f"{n}×{label}" for label, n in sorted(sizes[role].items()))
        for role in (Role.PREFILL, Role.DECODE, Role.COLOCATED)
        if role in sizes
    )


def _why_no_loan(fa: FrameworkAdvice) -> str:
    if not fa.planned.lent:
        return ""
    if fa.framework in ("slime", "areal"):
        return f" (the plan lends, but {fa.framework} cannot lend training GPUs)"
    return " (the plan's loan pays in its own layout; in this one the borrowing gate refuses it)"


def _header(advice: Advice, fa: FrameworkAdvice, comment: str = "#") -> list[str]:
    a, layout, tp = advice, fa.layout, advice.inputs.tp
    gpus = layout.workers * tp
    lines = [
        f"pearl-sched advise for {fa.framework}: {layout.mode.value} {layout.ratio}, TP{tp} workers, {gpus} GPUs"
        + (f" ({layout.lent * tp} lent from training)" if layout.lent else ""),
        f"predicted rollout makespan {layout.predicted_s:.1f} s ({a.model.name} predictor)"
        + (f"; measured timing_s/gen {a.log.gen_s:.1f} s on the current setup" if a.log is not None else ""),
    ]
    if fa.limitation:
        lines.append(
            f"pearl_sched's plan is {fa.planned.mode.value} {fa.planned.ratio}"
            + (
                f" with {fa.planned.lent} training workers ({fa.planned.lent * tp} GPUs) lent"
                if fa.planned.lent
                else ""
            )
            + f" ({fa.planned.predicted_s:.1f} s); {fa.limitation}: this layout is {fa.gap_pct:+.1f}%"
        )
    else:
        lines.append("pearl_sched's plan: this layout")
    lines.append(f"planner's decision: {a.plan.decision.reason}")  # the gates' figures: gain against toggle cost
    if a.state is not None:
        lines.append(f"plan's worker sizes: {_sizes(a)}")
    lines.append(
        "lending: "
        + (
            f"lend the {layout.lent * tp} training GPUs while the trainer waits (PEARL Eq. 7 gate passed)"
            if layout.lent
            else "none" + _why_no_loan(fa)
        )
    )
    lines.extend(f"from: {note}" for note in a.notes)
    return [f"{comment} {line}" for line in lines]


def render_verl(advice: Advice, fa: FrameworkAdvice) -> str:
    """Hydra overrides for ``python -m verl.trainer.main_ppo`` (verl 0.9.1 keys), one a line."""
    layout, tp = fa.layout, advice.inputs.tp
    dedicated_workers = layout.workers - layout.lent
    pd = layout.mode is Mode.DISAGGREGATED
    replica_gpus = (1 + layout.decode // layout.prefill) * tp if pd else tp
    nodes = verl_nodes(dedicated_workers * tp, replica_gpus, advice.inputs.gpus_per_node)
    assert nodes is not None, "advise_for writes only layouts verl can place"
    nnodes, per_node = nodes
    r = "actor_rollout_ref.rollout"
    keys = [
        ("trainer.v1.trainer_mode", "separate_async"),
        (f"{r}.name", "sglang"),
        (f"{r}.tensor_model_parallel_size", str(tp)),
        (f"{r}.nnodes", str(nnodes)),
        (f"{r}.n_gpus_per_node", str(per_node)),
        (f"{r}.disaggregation.enabled", str(pd)),
    ]
    if pd:
        keys += [
            (f"{r}.disaggregation.prefill_replicas", "1"),
            (f"{r}.disaggregation.decode_replicas", str(layout.decode // layout.prefill)),
            (f"{r}.disaggregation.decode_tensor_model_parallel_size", str(tp)),
        ]
    keys.append(("trainer.v1.separate_async.hybrid_rollout.enable_switch", str(bool(layout.lent))))
    lines = _header(advice, fa)
    if pd:
        lines.append(
            f"# {layout.prefill} PD replica(s) of 1 prefill + {layout.decode // layout.prefill} decode servers"
        )
    lines += [f"{k}={v}" for k, v in keys]
    return "\n".join(lines) + "\n"


def render_slime(advice: Advice, fa: FrameworkAdvice) -> str:
    """A ``--sglang-config`` YAML document (slime's ``SglangConfig.from_yaml``) and the launch flags as comments."""
    layout, tp = fa.layout, advice.inputs.tp
    if layout.mode is Mode.DISAGGREGATED:
        groups = [("prefill", layout.prefill), ("decode", layout.decode)]
    else:
        groups = [("regular", layout.colocated)]
    lines = _header(advice, fa)
    lines.append(f"# launch: --sglang-config THIS_FILE --rollout-num-gpus {layout.workers * tp}")
    lines += ["sglang:", "  - name: actor", "    update_weights: true", f"    num_gpus_per_engine: {tp}"]
    lines.append("    server_groups:")
    for kind, count in groups:
        lines += [f"      - worker_type: {kind}", f"        num_gpus: {count * tp}"]
    return "\n".join(lines) + "\n"


def _device_mapping(start: int, stop: int) -> str:
    return f"list(range({start},{stop}))"


def render_roll(advice: Advice, fa: FrameworkAdvice) -> str:
    """ROLL agentic-pipeline YAML keys: ``actor_infer`` on SGLang, device mappings and partial-GPU lending."""
    layout, tp = fa.layout, advice.inputs.tp
    dedicated_gpus = (layout.workers - layout.lent) * tp
    training = advice.inputs.training_gpus
    lines = _header(advice, fa)
    lines += [
        f"num_gpus_per_node: {advice.inputs.gpus_per_node}",
        f"partial_gpu_mode: {str(bool(layout.lent)).lower()}",
    ]
    if layout.lent:
        lines.append("async_generation_ratio: 1  # partial-GPU mode needs > 0")
    if training:
        lines += ["actor_train:", f"  device_mapping: {_device_mapping(dedicated_gpus, dedicated_gpus + training)}"]
    infer_stop = dedicated_gpus + (training if layout.lent else 0)
    lines += [
        "actor_infer:",
        "  strategy_args:",
        "    strategy_name: sglang",
        "    strategy_config:",
        f"      tensor_parallel_size: {tp}",
        f"  device_mapping: {_device_mapping(0, infer_stop)}",
    ]
    return "\n".join(lines) + "\n"


def render_areal(advice: Advice, fa: FrameworkAdvice) -> str:
    """AReaL's per-engine ``rollout.backend`` allocation string (and the legacy ``allocation_mode`` as a comment)."""
    layout, tp = fa.layout, advice.inputs.tp
    rollout = f"sglang:d{layout.colocated}" + (f"t{tp}" if tp > 1 else "")
    lines = _header(advice, fa)
    if advice.inputs.training_gpus:
        lines.append(f"# legacy launchers: allocation_mode: {rollout}+fsdp:d{advice.inputs.training_gpus}")
    lines += ["rollout:", f'  backend: "{rollout}"']
    return "\n".join(lines) + "\n"


RENDERERS: dict[str, Callable[[Advice, FrameworkAdvice], str]] = {
    "verl": render_verl,
    "slime": render_slime,
    "roll": render_roll,
    "areal": render_areal,
}


def render(advice: Advice, framework: Framework) -> str:
    """The advice for ``framework`` in its own configuration format (comments say where each figure came from)."""
    return RENDERERS[framework](advice, advise_for(advice, framework))
