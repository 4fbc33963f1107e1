"""The rollout simulator: hand-computed makespans, and invariants on random batches.

Invariants (hypothesis): every trajectory started finishes; every generated token is counted once; no
trajectory finishes before its own critical path (its prefills, decodes at batch 1 and environment calls);
the same inputs give the same result.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl_sched import DeviceParams, Mode
from pearl_sched.sim import LinearStepTimes, Pool, TrajectorySpec, Turn, sample_trajectories, simulate_batch
from tests.builders import FLAT, TWO_TURNS


def test_colocated_single_trajectory_by_hand() -> None:
    # prefill 100 × 1 ms = 0.1 s; decode 10 × 10 ms = 0.1 s; environment 5 s; prefill 50 tokens 0.05 s;
    # decode 20 × 10 ms = 0.2 s: 5.45 s.
    result = simulate_batch(Pool(Mode.COLOCATED, FLAT, colocated_workers=1), [TWO_TURNS])
    assert result.makespan_s == pytest.approx(5.45)
    assert result.generated_tokens == 30 and result.prefill_tokens == 150


def test_disaggregated_adds_the_kv_transfer() -> None:
    # 1,000 bytes per token over a 1 MB/s link: 0.1 s after the first prefill (100 tokens). The second turn's
    # prompt is 100 + 10 generated + 50 appended: the prefill worker holds only the 100 it prefilled, so it
    # computes 60 tokens (0.06 s, not the 0.05 s of the 50 appended ones: the 10 tokens generated on the decode
    # worker are recomputed), and SGLang's decode side keeps no radix cache, so the whole 160-token context
    # crosses the link (0.16 s; the old expectation sent only the 50 appended tokens' KV).
    pool = Pool(
        Mode.DISAGGREGATED, FLAT, prefill_workers=1, decode_workers=1, kv_bytes_per_token=1000, link_bytes_per_s=1e6
    )
    result = simulate_batch(pool, [TWO_TURNS])
    assert result.makespan_s == pytest.approx(5.45 + 0.01 + 0.1 + 0.16)
    assert result.transferred_bytes == pytest.approx((100 + 160) * 1000)


def test_sequences_share_a_decode_iteration() -> None:
    steps = LinearStepTimes(
        DeviceParams(
            gpu_type="x",
            tp=1,
            prefill_s_per_token=1e-9,
            decode_iteration_s=0.01,
            decode_per_seq_s=0.005,
            kv_capacity_bytes=1.0,
        )
    )
    one = TrajectorySpec((Turn(1, 10, 0.0),))
    pool = Pool(Mode.DISAGGREGATED, steps, prefill_workers=1, decode_workers=1)
    # Both decode together: 10 iterations of 0.01 + 2 × 0.005 = 0.2 s (prefill takes nanoseconds).
    assert simulate_batch(pool, [one, one]).makespan_s == pytest.approx(0.2, rel=1e-6)
    two = Pool(Mode.DISAGGREGATED, steps, prefill_workers=1, decode_workers=2)
    assert simulate_batch(two, [one, one]).makespan_s == pytest.approx(0.15, rel=1e-6)


def test_colocated_prefill_pauses_the_decode_batch() -> None:
    long_prefill = TrajectorySpec((Turn(1000, 10, 0.0),))
    short = TrajectorySpec((Turn(1, 20, 0.0),))
    result = simulate_batch(Pool(Mode.COLOCATED, FLAT, colocated_workers=1), [short, long_prefill])
    # short: prefill (batched with the long one: 1,001 tokens, 1.001 s), then 20 iterations; both decode
    # together after the shared prefill, so short ends at 1.001 + 0.2 s.
    assert max(result.finish_times_s) == pytest.approx(1.001 + 0.2)


def test_kv_capacity_makes_trajectories_wait_but_all_finish() -> None:
    batch = sample_trajectories(
        8, turns=2, prompt_tokens=400, appended_tokens=50, generated_tokens=50, env_mean_s=1.0, env_std_s=0.0
    )
    roomy = Pool(Mode.DISAGGREGATED, FLAT, prefill_workers=1, decode_workers=1)
    tight = Pool(Mode.DISAGGREGATED, FLAT, prefill_workers=1, decode_workers=1, kv_capacity_tokens=1200)
    fast, slow = simulate_batch(roomy, batch), simulate_batch(tight, batch)
    assert slow.finished == fast.finished == 8
    assert slow.makespan_s > fast.makespan_s
    # Every worker has the pool; the decode worker preallocates the 400-token prompt (+ 512 reserved) before the
    # prefill runs (DecodePreallocQueue), so the refusal comes from the decode side first.
    with pytest.raises(ValueError, match="more than a decode worker holds"):
        simulate_batch(
            Pool(Mode.DISAGGREGATED, FLAT, prefill_workers=1, decode_workers=1, kv_capacity_tokens=100), batch
        )


def test_pool_shape_is_validated() -> None:
    with pytest.raises(ValueError, match="colocated pool"):
        Pool(Mode.COLOCATED, FLAT, prefill_workers=1)
    with pytest.raises(ValueError, match="disaggregated pool"):
        Pool(Mode.DISAGGREGATED, FLAT, prefill_workers=1)


def _prompts(spec: TrajectorySpec) -> int:
    """Σ over turns of the whole prompt: everything appended and generated before the turn, and its append."""
    total = context = 0
    for turn in spec.turns:
        context += turn.appended_tokens
        total += context
        context += turn.generated_tokens
    return total


@st.composite
def batches(draw: st.DrawFn) -> tuple[Pool, list[TrajectorySpec]]:
    steps = LinearStepTimes(
        DeviceParams(
            gpu_type="x",
            tp=1,
            prefill_s_per_token=draw(st.sampled_from([1e-5, 1e-3])),
            decode_iteration_s=draw(st.sampled_from([0.005, 0.02])),
            decode_per_seq_s=draw(st.sampled_from([1e-5, 1e-3])),
            kv_capacity_bytes=1.0,
        )
    )
    trajectories = [
        TrajectorySpec(
            tuple(
                Turn(draw(st.integers(1, 3000)), draw(st.integers(1, 300)), draw(st.floats(0, 20)))
                for _ in range(draw(st.integers(1, 5)))
            )
        )
        for _ in range(draw(st.integers(1, 20)))
    ]
    if draw(st.booleans()):
        pool = Pool(
            Mode.COLOCATED,
            steps,
            colocated_workers=draw(st.integers(1, 4)),
            chunk_tokens=draw(st.sampled_from([512, 8192])),
        )
    else:
        pool = Pool(
            Mode.DISAGGREGATED,
            steps,
            prefill_workers=draw(st.integers(1, 3)),
            decode_workers=draw(st.integers(1, 4)),
            kv_bytes_per_token=draw(st.sampled_from([0.0, 131072.0])),
            link_bytes_per_s=50e9,
            kv_capacity_tokens=draw(st.sampled_from([float("inf"), 20000.0])),
        )
    return pool, trajectories


@given(batches())
def test_invariants(case: tuple[Pool, list[TrajectorySpec]]) -> None:
    """Every trajectory finishes, tokens are counted once, nobody beats its own critical path, runs repeat."""
    pool, trajectories = case
    result = simulate_batch(pool, trajectories)
    assert result.finished == result.trajectories == len(trajectories)
    assert result.generated_tokens == sum(t.generated_tokens for t in trajectories)
    # Every turn's whole prompt is either a prefix-cache hit or computed (SGLang caches a finished turn, and a
    # PD prefill worker never holds the tokens the decode worker generated, so it is no longer true that only
    # the appended tokens are prefilled): with room for everything nothing is retracted.
    assert result.retractions == 0
    assert result.prefill_tokens + result.cache_hit_tokens == sum(_prompts(t) for t in trajectories)
    assert result.prefill_tokens >= sum(turn.appended_tokens for t in trajectories for turn in t.turns)
    steps = pool.step_times
    critical = max(
        sum(
            steps.prefill_s(turn.appended_tokens, 1, 0)
            + turn.generated_tokens * steps.decode_s(1, 0)
            + (turn.env_after_s if k < len(t.turns) - 1 else 0.0)
            for k, turn in enumerate(t.turns)
        )
        for t in trajectories
    )
    assert result.makespan_s >= critical * (1 - 1e-9)
    assert simulate_batch(pool, trajectories) == result


def test_preempted_decode_worker_keeps_the_partial_turn_and_reprefills_its_prefix() -> None:
    from pearl_sched.sim import PoolChange

    one = TrajectorySpec((Turn(100, 10, 0.0),))
    pool = Pool(Mode.DISAGGREGATED, FLAT, prefill_workers=1, decode_workers=1)
    # Prefill 0.1 s; 5 of 10 tokens decoded by 0.15 s, when decode worker 0 leaves and worker 1 joins.
    # The 105-token prefix is resubmitted; the prefill worker's radix cache still holds the 100-token prompt
    # it prefilled (the old expectation recomputed all 105), so it computes the 5 generated tokens (0.005 s),
    # then the last 5 tokens decode (0.05 s): 0.205 s.
    change = PoolChange(at_s=0.15, add_decode=1, remove_decode=(0,))
    result = simulate_batch(pool, [one], [change])
    assert result.makespan_s == pytest.approx(0.205)
    assert result.generated_tokens == 10
    assert result.prefill_tokens == 100 + 5


def test_pool_changes_are_validated() -> None:
    from pearl_sched.sim import PoolChange

    one = TrajectorySpec((Turn(100, 10, 0.0),))
    pool = Pool(Mode.DISAGGREGATED, FLAT, prefill_workers=1, decode_workers=1)
    with pytest.raises(ValueError, match="cannot finish: the pool was left with no decode worker"):
        simulate_batch(pool, [one], [PoolChange(at_s=0.15, remove_decode=(0,))])
    # A worker that leaves and is replaced later only delays the batch: the turn waits for the new one.
    gap = [PoolChange(at_s=0.15, remove_decode=(0,)), PoolChange(at_s=1.0, add_decode=1)]
    assert simulate_batch(pool, [one], gap).finished == 1
    with pytest.raises(ValueError, match="changes by prefill and decode workers only"):
        simulate_batch(pool, [one], [PoolChange(at_s=0.15, add_colocated=1)])
    twice = [PoolChange(at_s=0.15, add_decode=1, remove_decode=(0,)), PoolChange(at_s=0.2, remove_decode=(0,))]
    with pytest.raises(ValueError, match="already left"):
        simulate_batch(pool, [one], twice)


@st.composite
def changing_batches(draw: st.DrawFn) -> tuple[Pool, list[TrajectorySpec], list[object]]:
    from pearl_sched.sim import PoolChange

    pool, trajectories = draw(batches())
    colocated = pool.mode is Mode.COLOCATED
    prefill = pool.colocated_workers if colocated else pool.prefill_workers
    decode = pool.colocated_workers if colocated else pool.decode_workers
    alive_p, alive_d = list(range(prefill)), list(range(decode))
    changes = []
    at = 0.0
    for _ in range(draw(st.integers(0, 4))):
        at += draw(st.floats(0.01, 30.0))
        add = draw(st.integers(0, 2))
        if colocated:
            leave = draw(st.sampled_from(alive_p)) if len(alive_p) + add > 1 and draw(st.booleans()) else None
            changes.append(
                PoolChange(at_s=at, add_colocated=add, remove_colocated=(leave,) if leave is not None else ())
            )
            total = prefill + sum(c.add_colocated for c in changes)
            alive_p = [w for w in range(total) if w not in {r for c in changes for r in c.remove_colocated}]
        else:
            leave_d = draw(st.sampled_from(alive_d)) if len(alive_d) + add > 1 and draw(st.booleans()) else None
            leave_p = draw(st.sampled_from(alive_p)) if len(alive_p) > 1 and draw(st.booleans()) else None
            changes.append(
                PoolChange(
                    at_s=at,
                    add_decode=add,
                    remove_decode=(leave_d,) if leave_d is not None else (),
                    remove_prefill=(leave_p,) if leave_p is not None else (),
                )
            )
            total_d = decode + sum(c.add_decode for c in changes)
            alive_d = [w for w in range(total_d) if w not in {r for c in changes for r in c.remove_decode}]
            alive_p = [w for w in range(prefill) if w not in {r for c in changes for r in c.remove_prefill}]
    return pool, trajectories, changes


@given(changing_batches())
def test_no_trajectory_is_lost_when_workers_come_and_go(case: tuple[Pool, list[TrajectorySpec], list[object]]) -> None:
    pool, trajectories, changes = case
    result = simulate_batch(pool, trajectories, changes)  # type: ignore[arg-type]
    assert result.finished == len(trajectories)
    assert result.generated_tokens == sum(t.generated_tokens for t in trajectories)
    assert result.prefill_tokens >= sum(turn.appended_tokens for t in trajectories for turn in t.turns)
