"""bench/predictor_trace.py's admission log: each later turn once, its wait and the prefix it found."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from bench.predictor_trace import TracedSimulation
from pearl_sched import Mode
from pearl_sched.sim import Pool, TrajectorySpec, Turn
from tests.builders import FLAT, TWO_TURNS
from tests.test_sim_memory import tight_batches


def test_a_turn_back_from_its_tool_call_is_admitted_at_once_with_its_prefix() -> None:
    # One worker, nothing else running: the second turn (50 tokens appended to the 100 + 10 cached) is admitted the
    # moment it arrives, 5 s after the first turn's decode ended, and matches the whole previous context.
    sim = TracedSimulation(Pool(Mode.COLOCATED, FLAT, colocated_workers=1), [TWO_TURNS])
    sim.run()
    (admission,) = sim.admissions
    assert admission.wait_s == pytest.approx(0.0)
    assert (admission.prompt, admission.cached, admission.worker) == (160, 110, 0)
    assert sim.head_waits == {"memory": 0, "chunk": 0}


@pytest.mark.parametrize(("output", "wait_s", "cached"), [(300, 3.1, 110), (4190, 42.0, 10)])
def test_a_turn_waiting_for_memory_keeps_its_prefix_only_until_the_decode_batch_grows_over_it(
    output: int, wait_s: float, cached: int
) -> None:
    # A 4,300-token pool: admission reserves 4,096 tokens of output per request (min(max_new, 4,096)), so only one
    # request runs at a time. a's first turn (100 + 10 tokens) ends at 0.2 s; its second turn (130 tokens) then waits
    # for memory while b decodes its output (0.01 s a token). Its 110-token prefix waits in the LRU: with 300 tokens
    # of output b's KV (400) leaves it whole; with 4,190, b's KV (4,290) grows over all but 10 of it, and the turn
    # re-prefills the rest.
    a = TrajectorySpec((Turn(100, 10, 0.0), Turn(20, 5, 0.0)))
    b = TrajectorySpec((Turn(100, output, 0.0),))
    pool = Pool(Mode.COLOCATED, FLAT, colocated_workers=1, kv_capacity_tokens=4300.0, max_context_tokens=4400)
    sim = TracedSimulation(pool, [a, b])
    sim.run()
    (admission,) = sim.admissions
    assert admission.wait_s == pytest.approx(wait_s, abs=0.01)
    assert (admission.prompt, admission.cached) == (130, cached)
    assert sim.head_waits["memory"] >= 1 and sim.head_waits["chunk"] == 0


@settings(max_examples=40, deadline=None)
@given(tight_batches())
def test_every_later_turn_is_logged_once_with_a_wait_and_a_hit_within_its_prompt(
    case: tuple[Pool, list[TrajectorySpec]],
) -> None:
    pool, trajectories = case
    sim = TracedSimulation(pool, trajectories, timeline_s=0.5)
    sim.run()
    for (_, live, *_), (_, loads) in zip(sim.samples, sim.worker_loads, strict=True):
        # each live trajectory the gateway has placed counts once, on the worker it last sent it to
        assert sum(n for n, _ in loads.values()) <= live
    later = [r for r in sim.requests if r.turn > 0 and not r.repeat]
    assert len(sim.admissions) == len(later)
    assert sum(a.cached for a in sim.admissions) == pytest.approx(sum(r.cached for r in later))
    assert all(a.wait_s >= 0 and 0 <= a.cached < a.prompt for a in sim.admissions)
    assert sim.head_waits["memory"] + sim.head_waits["chunk"] <= sim.rounds
