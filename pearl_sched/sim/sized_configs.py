"""The sized action space of one constant-resource interval, for ratio selection with worker sizes.

``bench/reproduce.py --only ratio-sizes`` (docs/benchmarks.md) asks plan() for a configuration on an interval of
dedicated GPUs where the scenario declares ``worker_sizes``, and compares it with the simulated best over the
configurations enumerated here. The enumeration is capped: every GPU of the interval serves, and each role has
one size (``2P(tp1)3D(tp2)``, never ``3P(2×tp1+1×tp2)…``); the configurations a planner chooses are simulated too,
so a choice outside the enumeration is still measured. Labels are those of ``SimCluster.serving``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping

from pearl_sched.sim.cluster import SimCluster
from pearl_sched.sim.rollout import simulate_batch
from pearl_sched.sim.scenario import GPUS_PER_NODE
from pearl_sched.sim.setting import Setting
from pearl_sched.state import ROLLOUT_ROLES, Mode, Role, WorkerSize, WorkerSizes, ratio_label, sized_ratio_label

SizedConfig = Mapping[Role, tuple[WorkerSize, ...]]
"""Rollout role → the sizes of its workers (one entry per worker)."""

_LETTERS = ((Role.PREFILL, "P"), (Role.DECODE, "D"), (Role.COLOCATED, "C"))


def node_capacities(gpus: int, node_gpus: int = GPUS_PER_NODE) -> list[int]:
    """GPUs per node of ``gpus`` dedicated GPUs numbered in order (whole nodes, then the rest on one more)."""
    return [node_gpus] * (gpus // node_gpus) + ([gpus % node_gpus] if gpus % node_gpus else [])


def packs(config: SizedConfig, nodes: list[int]) -> bool:
    """Whether the workers fit on ``nodes``, each on one node (first fit, largest first).

    The sizes divide one another, so placing them largest first keeps each node's free GPUs a multiple of the
    size being placed: first fit then succeeds exactly when an aligned packing exists.
    """
    free = list(nodes)
    for size in sorted((z.tp for sizes in config.values() for z in sizes), reverse=True):
        slot = next((i for i, f in enumerate(free) if f >= size), None)
        if slot is None:
            return False
        free[slot] -= size
    return True


def _splits(gpus: int, small: int, large: int) -> list[tuple[int, int]]:
    """(a, b) with a·small + b·large = gpus, a, b ≥ 1."""
    out = [(a, (gpus - a * small) // large) for a in range(1, gpus // small) if (gpus - a * small) % large == 0]
    return [(a, b) for a, b in out if b >= 1]


def sized_configurations(sizes: WorkerSizes, gpus: int, node_gpus: int = GPUS_PER_NODE) -> list[SizedConfig]:
    """Every configuration of ``gpus`` dedicated GPUs with one size per role, all GPUs serving, that packs.

    Colocated: n workers of one colocated size with n·tp = gpus. Disaggregated: p prefill workers of one prefill
    size and d decode workers of one decode size, p, d ≥ 1, p·tp_P + d·tp_D = gpus. The order is colocated first,
    then by prefill size, decode size and prefill count.
    """
    nodes = node_capacities(gpus, node_gpus)
    out: list[SizedConfig] = []
    for z in sizes.colocated:
        if gpus % z.tp == 0:
            out.append({Role.COLOCATED: (z,) * (gpus // z.tp)})
    for zp, zd in itertools.product(sizes.prefill, sizes.decode):
        for p, d in _splits(gpus, zp.tp, zd.tp):
            out.append({Role.PREFILL: (zp,) * p, Role.DECODE: (zd,) * d})
    return [c for c in out if packs(c, nodes)]


def mode_of(config: SizedConfig) -> Mode:
    """Colocated when the configuration has colocated workers, else disaggregated."""
    return Mode.COLOCATED if config.get(Role.COLOCATED) else Mode.DISAGGREGATED


def sized_label(config: SizedConfig, default: WorkerSize) -> str:
    """The configuration as ``SimCluster.serving`` writes it.

    ``4C`` or ``3P5D`` when every worker has ``default``'s size, else e.g. ``2P(tp1)3D(tp2)`` or
    ``3P(2×tp1+1×tp2)4D(tp2)``.
    """
    counts = {role: len(config.get(role, ())) for role, _ in _LETTERS}
    if all(z == default for sizes in config.values() for z in sizes):
        return ratio_label(mode_of(config), counts[Role.PREFILL], counts[Role.DECODE], counts[Role.COLOCATED])
    return sized_ratio_label(config)


def simulate_sized(setting: Setting, config: SizedConfig, step: int = 0) -> float:
    """The makespan of step ``step``'s batch on ``config``, every worker at its own size from the start."""
    mode = mode_of(config)
    keys = {Role.PREFILL: "prefill", Role.DECODE: "decode", Role.COLOCATED: "colocated"}
    engines = {keys[r]: tuple(setting.engine(z) for z in config.get(r, ())) for r in keys}
    ranks = {key: sum(e.ranks for e in group) for key, group in engines.items()}
    pool = dataclasses.replace(
        setting.pool(mode, **ranks, step=step),
        prefill_engines=engines["prefill"],
        decode_engines=engines["decode"],
        colocated_engines=engines["colocated"],
    )
    return simulate_batch(pool, setting.batch(step)).makespan_s


def serving_configuration(cluster: SimCluster) -> SizedConfig:
    """The sizes of the workers a simulated cluster has serving each rollout role (what ``serving`` labels)."""
    serving = [s for s in cluster.slots if s.role is not None]
    return {role: tuple(s.size for s in serving if s.role is role) for role in ROLLOUT_ROLES}
