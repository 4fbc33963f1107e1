"""The gateway's routing policy: which worker a trajectory's next turn goes to.

As the SGLang model gateway (``smg``, successor of ``sgl-router``) does it, with its defaults (``smg launch
--help``): ``cache_aware`` (the default) pins a request to the worker whose approximate prefix tree matches at
least ``--cache-threshold`` 0.3 of its prompt, unless that worker is overloaded — its load above the mean by
the absolute threshold (64, capped at two standard deviations of the load, never under 4) *and* above
``--balance-rel-threshold`` 1.5 × the mean — when it spills to the least loaded worker; a request that matches
nowhere goes to the least loaded worker. Its placements stay routable ``--cache-ttl-secs`` 180 s.
``least_load`` and ``round_robin`` ignore prefixes. Load is the requests a worker has in flight.

The router's tree holds the prompts it routed (never the tokens a decode worker generated), so a trajectory's
match is its previous turn's prompt on the worker that served it, or, for the members of a GRPO group (which
share their first prompt), the group's prompt on the worker that a sibling was last routed to — whichever
matches more of the prompt. Whether that worker still *holds* the prefix is the worker's radix cache's business
(:mod:`~pearl_sched.sim.memory`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

ROUTER_POLICIES = ("cache_aware", "least_load", "round_robin")
CACHE_THRESHOLD = 0.3
BALANCE_ABS_THRESHOLD = 64.0
BALANCE_REL_THRESHOLD = 1.5
CACHE_TTL_S = 180.0


def _by_load(worker_load: tuple[int, int]) -> tuple[int, int]:
    return worker_load[1], worker_load[0]


@dataclass
class Router:
    """One routing policy over one set of workers (prefill, decode or colocated)."""

    policy: str = "cache_aware"
    placed: dict[int, tuple[int, float, float]] = field(default_factory=dict)  # trajectory → worker, prompt, time
    turn: int = 0
    groups: dict[int, tuple[int, float]] = field(default_factory=dict)  # trajectory → (group key, shared prompt)

    def __post_init__(self) -> None:
        """Refuse a policy the gateway does not have."""
        if self.policy not in ROUTER_POLICIES:
            raise ValueError(f"unknown router policy {self.policy!r}; choose one of {', '.join(ROUTER_POLICIES)}")

    def route(self, index: int, prompt_tokens: float, now_s: float, loads: Sequence[tuple[int, int]]) -> int:
        """The worker for the trajectory's request; ``loads`` holds (worker, requests in flight) of live workers."""
        least = min(loads, key=_by_load)[0]
        if self.policy == "round_robin":
            live = sorted(w for w, _ in loads)
            worker = live[self.turn % len(live)]
            self.turn += 1
        elif self.policy == "least_load":
            worker = least
        else:
            worker = least
            last = self.placed.get(index)
            group = self.groups.get(index)
            load = dict(loads)
            if group is not None:  # the group's prompt, where a sibling went, may match more than the own prefix
                sibling = self.placed.get(group[0])
                near = sibling is not None and sibling[0] in load and now_s - sibling[2] <= CACHE_TTL_S
                fresh = last is not None and last[0] in load and now_s - last[2] <= CACHE_TTL_S
                if near and (not fresh or (sibling is not None and last is not None and sibling[1] > last[1])):
                    last = sibling
            if last is not None and last[0] in load and now_s - last[2] <= CACHE_TTL_S:
                share = last[1] / prompt_tokens if prompt_tokens > 0 else 0.0
                mean = sum(load.values()) / len(load)
                margin = min(BALANCE_ABS_THRESHOLD, max(4.0, 2 * math.sqrt(mean)))
                spill = load[last[0]] > mean + margin and load[last[0]] > BALANCE_REL_THRESHOLD * mean
                if share >= CACHE_THRESHOLD and not spill:
                    worker = last[0]
        self.placed[index] = (worker, prompt_tokens, now_s)
        group = self.groups.get(index)
        if group is not None and prompt_tokens >= group[1]:
            self.placed[group[0]] = (worker, group[1], now_s)
        return worker
