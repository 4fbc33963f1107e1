"""The improved predictor's prefill accounting against the simulator's, phase by phase (issue 13).

For one scenario's step-0 batch on one configuration, the simulated batch is run with a log of every prefill
request that completes (the trajectory, its turn index, the prompt and the cached tokens, whether it is a
retracted request's re-prefill), and the improved predictor (fitted from the colocated run's telemetry, exactly
as ``bench/predictor_accuracy.py``'s ``improved`` column) is asked for its per-phase accounting. Turns are bucketed
into the model's phases by turn index (phase j holds turns [j·S/6, (j+1)·S/6) of the predictor's S, the p90
turns or with ``--live-share turn-counts`` the longest trajectory's; turns at or beyond S go to a last ``beyond``
row). Per phase, simulated and predicted::

    trace scenario=<s> config=<c> phase=<j> sim_turns=<n> model_turns=<n> sim_prompt_per_turn=<x>
        model_prompt_per_turn=<x> sim_prefill_per_turn=<x> model_prefill_per_turn=<x> sim_hit=<x> model_hit=<x>
        sim_prefill_M=<x> model_prefill_M=<x>

and the totals (``first`` is the first-turn burst: the first prompts)::

    trace_total scenario=<s> config=<c> sim_turns=<n> model_turns=<n> sim_prompt_M=<x> model_prompt_M=<x>
        sim_prefill_M=<x> model_prefill_M=<x> sim_first_M=<x> model_first_M=<x> sim_retract_M=<x>

With ``--timeline`` the simulated prefill side's busy share and the live trajectories are also printed per tenth of
the makespan (``timeline ... t_s=<x> live=<n> decoding=<n> prefill_busy=<x> queued=<n>``).

With ``--admission`` each later turn's wait from the gateway to its admission on the prefill side (where SGLang's
PrefillAdder matches its cached prefix and locks it) is logged with the hit it found, and printed:

- by wait;
- over the batch, in eighths of the makespan, with how many of the workers admitting turns then found at least half
  of their prompts' tokens cached, and each such worker's load near the eighth's middle (the contexts of the live
  trajectories the gateway last sent it over its KV pool, how many they are, and its hit in the eighth, in order of
  load);
- how many of the prefill scheduling rounds that found requests waiting left the queue's head waiting, and why
  (``memory``: admission refused it, SGLang's NO_TOKEN; ``chunk``: the batch's token budget was spent)::

    admission scenario=<s> config=<c> wait_s=<lo>-<hi> requests=<n> hit=<x> full_miss=<share with hit < 0.2>
    admission_timeline scenario=<s> config=<c> t_s=<x> requests=<n> mean_wait_s=<x> hit=<x> workers_hitting=<k>/<n>
    admission_workers scenario=<s> config=<c> t_s=<x> load:live:hit=<load/pool>:<n>:<hit>,...
    admission_blocked scenario=<s> config=<c> rounds=<n> head_waits_memory=<n> head_waits_chunk=<n>

``--pd-prefill-queue on`` traces it with the PD prefill pool's queue in the cycle
(``ServingParams.pd_prefill_queue``). Each phase's line also carries the model's decoding share (n/b) and the
total line the model's batch makespan (``model_s``).

``--live-share turn-counts`` traces the improved predictor with its live share from the batch's turn counts
(``ServingParams.live_share``): the phases then span the longest trajectory's turns, and so do the buckets.

Usage: python bench/predictor_trace.py [--scenario e2e] [--gpus 8] [--configs 1P3D,4C] [--timeline] [--admission]
                                      [--live-share linear|turn-counts] [--pd-prefill-queue on|off]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import DATA
from bench.predictor_accuracy import (
    Run,
    fitted_params,
    improved,
    scenario_named,
    serving_from,
    simulate,
)
from pearl_sched import Mode, PoolCapacity
from pearl_sched.makespan_improved import PHASES, ImprovedMakespanModel
from pearl_sched.sim.cluster import ObservedStepTimes
from pearl_sched.sim.experiment import setting_for
from pearl_sched.sim.rollout import RolloutSimulation, _Job, _Kind
from pearl_sched.sim.setting import Setting


@dataclasses.dataclass
class Request:
    """One completed prefill request in the simulation."""

    trajectory: int
    turn: int
    prompt: int
    cached: float
    repeat: bool  # a retracted (or moved) request's re-prefill of a turn already prefilled
    at_s: float


@dataclasses.dataclass
class Admission:
    """One later turn admitted on the prefill side: when, after how long a wait, and what it found cached."""

    at_s: float
    wait_s: float
    prompt: int
    cached: float
    worker: int


ADMISSION_WAITS_S = (0.0, 0.5, 2.0, 5.0, 10.0, 30.0, math.inf)
"""The wait buckets ``--admission`` prints, in seconds."""

FULL_MISS_HIT = 0.2
"""A turn that found less than this share of its prompt cached counts as a full miss in ``--admission``."""


class TracedSimulation(RolloutSimulation):
    """The simulator, unchanged, with a log of completed prefill requests, admissions and a coarse timeline."""

    def __init__(self, *args: object, timeline_s: float = 0.0, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.requests: list[Request] = []
        self.seen: set[tuple[int, int]] = set()
        self.timeline_s = timeline_s
        self.samples: list[tuple[float, int, int, float, int]] = []
        self.worker_loads: list[tuple[float, dict[int, tuple[int, float]]]] = []  # per sample: worker → live, tokens
        self._next_sample = 0.0
        self._busy_since: dict[int, float] = {}
        self._busy_s = 0.0
        self.admissions: list[Admission] = []
        self.head_waits = {"memory": 0, "chunk": 0}
        self.rounds = 0  # prefill scheduling rounds that found requests waiting for admission
        self._arrived: dict[int, tuple[object, float, int]] = {}  # id(job) → (the job, kept alive; arrival; turn)

    def _queue_job(self, job: _Job) -> None:
        self._arrived[id(job)] = (job, self.now, self.trajectories[job.index].turn)
        super()._queue_job(job)

    def _start_prefill(self, worker: int) -> None:
        p = self.prefillers[worker]
        was = p.running
        waiting = [job for job in p.queue if not job.admitted] if was is None else []  # a running batch: no round
        super()._start_prefill(worker)
        if was is None and p.running is not None:
            self._busy_since[worker] = self.now
        if not waiting:  # a batch was running (nothing was scheduled), or none waited
            return
        self.rounds += 1
        for job in waiting:
            arrived = self._arrived.pop(id(job), None) if job.admitted else None
            if arrived is not None and arrived[2] > 0:  # a later turn (the first-turn burst is counted apart)
                wait_s = self.now - arrived[1]
                self.admissions.append(Admission(self.now, wait_s, job.prompt_tokens, job.cached, worker))
        if p.queue and not p.queue[0].admitted:  # the head waits: refused by memory, or the batch's budget spent
            spent = p.running is not None and sum(chunk for _, chunk in p.running) >= self.pool.chunk_tokens
            self.head_waits["chunk" if spent else "memory"] += 1

    def _prefill_done(self, worker: int) -> None:
        batch = list(self.prefillers[worker].running or [])
        since = self._busy_since.pop(worker, self.now)
        self._busy_s += self.now - since
        finishing = [job for job, chunk in batch if job.left == chunk]
        for job in finishing:
            t = self.trajectories[job.index]
            key = (job.index, t.turn)
            self.requests.append(Request(job.index, t.turn, job.prompt_tokens, job.cached, key in self.seen, self.now))
            self.seen.add(key)
        super()._prefill_done(worker)
        if worker in self._busy_since or self.prefillers[worker].running is not None:
            self._busy_since.setdefault(worker, self.now)

    def _push(self, at: float, kind: _Kind, who: int, version: int = 0) -> None:
        super()._push(at, kind, who, version)
        if self.timeline_s > 0 and self.now >= self._next_sample:
            self._next_sample = self.now + self.timeline_s
            live = sum(1 for t in self.trajectories if t.turn < len(t.spec.turns))
            decoding = sum(len(d.active) for d in self.decoders)
            queued = sum(len(p.queue) for p in self.prefillers) + sum(len(d.prealloc) for d in self.decoders)
            self.samples.append((self.now, live, decoding, self._busy_s, queued))
            loads: dict[int, tuple[int, float]] = {}  # the live trajectories the gateway last sent to each worker
            for index, (worker, _, _) in self.prefill_router.placed.items():
                t = self.trajectories[index]
                if t.turn < len(t.spec.turns):
                    n, tokens = loads.get(worker, (0, 0.0))
                    loads[worker] = (n + 1, tokens + t.context)
            self.worker_loads.append((self.now, loads))


def traced(setting: Setting, capacity: PoolCapacity, timeline_s: float = 0.0) -> tuple[TracedSimulation, float]:
    """The step-0 batch simulated on ``capacity`` with the request log; (simulation, makespan)."""
    observed = ObservedStepTimes(setting.steps, setting.step_overhead_s)
    pool = setting.pool(capacity.mode, int(capacity.prefill), int(capacity.decode), int(capacity.colocated))
    sim = TracedSimulation(dataclasses.replace(pool, step_times=observed), setting.batch(0), timeline_s=timeline_s)
    return sim, sim.run().makespan_s


def capacity_of(label: str) -> PoolCapacity:
    """``4C`` or ``1P3D`` as a configuration."""
    if label.endswith("C"):
        return PoolCapacity(mode=Mode.COLOCATED, colocated=int(label[:-1]))
    p, d = label[:-1].split("P")
    return PoolCapacity(mode=Mode.DISAGGREGATED, prefill=int(p), decode=int(d))


def trace(
    name: str,
    setting: Setting,
    ran: Run,
    label: str,
    timeline: bool,
    live_share: str = "linear",
    pd_prefill_queue: bool = False,
    admission: bool = False,
) -> None:
    """Print the per-phase accounting of one configuration, simulated and predicted (and its admissions)."""
    capacity = capacity_of(label)
    update = {"live_share": live_share, "pd_prefill_queue": pd_prefill_queue}
    serving = serving_from(setting, ran).model_copy(update=update)
    model = improved(fitted_params(setting, ran), serving)
    assert isinstance(model, ImprovedMakespanModel)
    workload = setting.workload()
    s, dl = model._span(workload), workload.appended_tokens_per_turn
    sim, makespan = traced(setting, capacity)
    if timeline or admission:
        sim, makespan = traced(setting, capacity, timeline_s=makespan / 20)
    pools = model._pools(workload, capacity)
    states = model._states(workload, pools.capacity, corrected=True)
    phases = model.phases(workload)
    flows = [
        model._flow(workload, pools.capacity, st.decoding, ph, pools=pools)
        for st, ph in zip(states, phases, strict=True)
    ]
    mode = capacity.mode
    workers = capacity.colocated if mode is Mode.COLOCATED else capacity.prefill
    per_phase = s / PHASES
    later = model._later(workload)
    rows: dict[str, list[Request]] = {str(j): [] for j in range(PHASES)}
    rows["beyond"] = []
    for req in sim.requests:
        if req.turn == 0 and not req.repeat:
            continue  # the first-turn burst, counted apart
        j = int(req.turn // per_phase)
        rows[str(j) if j < PHASES else "beyond"].append(req)
    total_model_prompt = total_model_prefill = 0.0
    for j, (ph, st, fl) in enumerate(zip(phases, states, flows, strict=True)):
        reqs = [r for r in rows[str(j)] if not r.repeat]
        turns = per_phase * ph.trajectories
        # the first turn of each trajectory is the burst: a phase's later turns are `later` of its turns
        model_turns = turns * later
        model_prompt = ph.context + dl
        model_prefill = fl.prefill_tokens / later if later > 0 else 0.0  # per later turn (burst apart)
        model_prefill -= (1 - later) / later * dl if later > 0 else 0.0
        sim_prompt = sum(r.prompt for r in reqs) / max(1, len(reqs))
        sim_prefill = sum(r.prompt - r.cached for r in reqs) / max(1, len(reqs))
        sim_hit = sum(r.cached for r in reqs) / max(1.0, sum(r.prompt for r in reqs))
        model_hit = 1 - model_prefill / model_prompt if model_prompt > 0 else 0.0
        total_model_prompt += model_turns * model_prompt
        total_model_prefill += turns * fl.prefill_tokens
        print(
            f"trace scenario={name} config={label} phase={j} sim_turns={len(reqs)} model_turns={model_turns:.0f}"
            f" sim_prompt_per_turn={sim_prompt:.0f} model_prompt_per_turn={model_prompt:.0f}"
            f" sim_prefill_per_turn={sim_prefill:.0f} model_prefill_per_turn={model_prefill:.0f}"
            f" sim_hit={sim_hit:.3f} model_hit={model_hit:.3f} model_prefill_hit={st.prefill_hit:.3f}"
            f" model_group_tokens={st.group_hit_tokens:.0f} model_decoding_share={st.decoding / ph.trajectories:.3f}"
            f" sim_prefill_M={sum(r.prompt - r.cached for r in reqs) / 1e6:.2f}"
            f" model_prefill_M={turns * fl.prefill_tokens / 1e6:.2f}",
            flush=True,
        )
    beyond = [r for r in rows["beyond"] if not r.repeat]
    print(
        f"trace scenario={name} config={label} phase=beyond sim_turns={len(beyond)} model_turns=0"
        f" sim_prompt_per_turn={sum(r.prompt for r in beyond) / max(1, len(beyond)):.0f}"
        f" sim_prefill_M={sum(r.prompt - r.cached for r in beyond) / 1e6:.2f}",
        flush=True,
    )
    later_reqs = [r for r in sim.requests if r.turn > 0 and not r.repeat]
    first = [r for r in sim.requests if r.turn == 0 and not r.repeat]
    repeats = [r for r in sim.requests if r.repeat]
    model_first = model._burst_tokens(workload, workers)
    mean_turns = sum(len(t.spec.turns) for t in sim.trajectories) / len(sim.trajectories)
    print(
        f"trace_total scenario={name} config={label} sim_s={makespan:.0f}"
        f" model_s={model.predict(workload, capacity).total_s:.0f} sim_turns={len(later_reqs)}"
        f" model_turns={sum(per_phase * ph.trajectories for ph in phases) * later:.0f}"
        f" sim_prompt_M={sum(r.prompt for r in later_reqs) / 1e6:.1f} model_prompt_M={total_model_prompt / 1e6:.1f}"
        f" sim_prefill_M={sum(r.prompt - r.cached for r in later_reqs) / 1e6:.1f}"
        f" model_prefill_M={total_model_prefill / 1e6:.1f}"
        f" sim_first_M={sum(r.prompt - r.cached for r in first) / 1e6:.2f} model_first_M={model_first / 1e6:.2f}"
        f" sim_retract_M={sum(r.prompt - r.cached for r in repeats) / 1e6:.2f} retracted={len(repeats)}"
        f" model_S={s:.1f} sim_mean_turns={mean_turns:.2f}",
        flush=True,
    )
    for at, live, decoding, busy, queued in sim.samples if timeline else ():
        print(
            f"timeline scenario={name} config={label} t_s={at:.0f} live={live} decoding={decoding}"
            f" prefill_busy_s={busy:.0f} queued={queued}",
            flush=True,
        )
    if admission:
        print_admissions(name, label, sim, makespan)
    if not math.isfinite(makespan):
        raise SystemExit("the simulation did not finish")


def print_admissions(name: str, label: str, sim: TracedSimulation, makespan_s: float) -> None:
    """``--admission``'s lines: the later turns' hits by their wait for admission, and over the batch."""

    def hit(rows: list[Admission]) -> float:
        return sum(a.cached for a in rows) / max(1.0, sum(a.prompt for a in rows))

    for lo, hi in itertools.pairwise(ADMISSION_WAITS_S):
        rows = [a for a in sim.admissions if lo <= a.wait_s < hi]
        if rows:
            full = sum(1 for a in rows if a.cached < FULL_MISS_HIT * a.prompt) / len(rows)
            print(
                f"admission scenario={name} config={label} wait_s={lo:g}-{hi:g} requests={len(rows)}"
                f" hit={hit(rows):.3f} full_miss={full:.3f}",
                flush=True,
            )
    span = makespan_s if math.isfinite(makespan_s) else max((a.at_s for a in sim.admissions), default=0.0)
    for k in range(8):
        rows = [a for a in sim.admissions if k * span / 8 <= a.at_s < (k + 1) * span / 8]
        if rows:
            workers: dict[int, list[Admission]] = {}
            for a in rows:
                workers.setdefault(a.worker, []).append(a)
            hitting = sum(1 for mine in workers.values() if hit(mine) >= 0.5)
            print(
                f"admission_timeline scenario={name} config={label} t_s={k * span / 8:.0f} requests={len(rows)}"
                f" mean_wait_s={sum(a.wait_s for a in rows) / len(rows):.2f} hit={hit(rows):.3f}"
                f" workers_hitting={hitting}/{len(workers)}",
                flush=True,
            )
            middle = (k + 0.5) * span / 8
            at, loads = min(sim.worker_loads, key=lambda sample: abs(sample[0] - middle), default=(middle, {}))
            each = []
            for worker in sorted(workers, key=lambda w: loads.get(w, (0, 0.0))[1]):
                n, tokens = loads.get(worker, (0, 0.0))
                pool = sim.prefillers[worker].memory.capacity_tokens
                each.append(f"{tokens / pool:.2f}:{n}:{hit(workers[worker]):.2f}")
            print(
                f"admission_workers scenario={name} config={label} t_s={at:.0f} load:live:hit={','.join(each)}",
                flush=True,
            )
    print(
        f"admission_blocked scenario={name} config={label} rounds={sim.rounds}"
        f" head_waits_memory={sim.head_waits['memory']} head_waits_chunk={sim.head_waits['chunk']}",
        flush=True,
    )


def main() -> None:
    """Trace each configuration of ``--configs`` on ``--scenario``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="e2e")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--configs", default="1P3D,4C")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--timeline", action="store_true")
    parser.add_argument("--admission", action="store_true", help="later turns' hits by their wait for admission")
    parser.add_argument("--live-share", choices=("linear", "turn-counts"), default="linear")
    parser.add_argument("--pd-prefill-queue", choices=("on", "off"), default="off")
    args = parser.parse_args()
    setting = setting_for(scenario_named(args.scenario), args.data)
    n = args.gpus // setting.scenario.tp
    ran = simulate(setting, PoolCapacity(mode=Mode.COLOCATED, colocated=n))
    for label in args.configs.split(","):
        live_share = args.live_share.replace("-", "_")
        queue = args.pd_prefill_queue == "on"
        trace(args.scenario, setting, ran, label, args.timeline, live_share, queue, admission=args.admission)


if __name__ == "__main__":
    main()
