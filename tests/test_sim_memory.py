"""SGLang's memory in the simulator: KV pool sizing, the LRU radix cache, routing, PD transfer, chunking, retraction.

Invariants (hypothesis, finite pools in both modes): no worker ever holds more KV than its pool; every
trajectory finishes; every token is generated exactly once; retracted colocated work is prefilled again (the
prefill + cache-hit tokens exceed the turns' prompts by what was retracted), PD retraction is an offload (no
second prefill).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl_sched import Mode
from pearl_sched.makespan import DeviceParams
from pearl_sched.sim import LinearStepTimes, Pool, TrajectorySpec, Turn, simulate_batch
from pearl_sched.sim.memory import WorkerMemory, default_mem_fraction_static, kv_pool_tokens
from pearl_sched.sim.rollout import Engine, RolloutSimulation
from pearl_sched.sim.router import LoadReport
from tests.builders import DATA, FLAT, TWO_TURNS

ReportOf = Callable[[int], LoadReport]


def test_radix_cache_evicts_least_recently_used_tails_and_never_locked_prefixes() -> None:
    mem = WorkerMemory(100)
    mem.release(0, 40, 40)  # trajectory 0's turn ends: 40 tokens cached
    mem.release(1, 30, 30)  # then trajectory 1's: 30 tokens, more recent
    mem.private_tokens = 50  # a request allocates 50: 120 > 100, so 20 go from 0's tail
    mem.settle(0)
    assert (mem.cached(0), mem.cached(1)) == (20, 30)
    assert mem.lock(0, 500) == 20  # 0 is matched (locked) ...
    mem.release(0, 20, 0)  # ... and finishes: now the most recent
    mem.private_tokens = 80  # 20 + 30 + 80 = 130: 1 is least recent and goes whole
    mem.settle(0)
    assert (mem.cached(0), mem.cached(1)) == (20, 0)
    assert mem.lock(0, 20) == 20
    mem.private_tokens = 90  # locked prefixes are never evicted: the pool is over, which admission prevents
    mem.settle(0)
    assert mem.cached(0) == 20 and mem.evicted_tokens == 50
    assert mem.peak_tokens == 110


def test_mem_fraction_static_and_pool_size_as_sglang_derives_them() -> None:
    # H200 (141 GiB = 144,384 MiB), TP2: reserved 512 + 1.5 × 8192 + 2 × 256 + 2/8 × 1024 = 13,568 MiB.
    h200 = 151397597184
    assert default_mem_fraction_static(h200, 2) == pytest.approx(round((144384 - 13568) / 144384, 3))
    # H100 80 GiB, TP1: 512 + 12,288 + 512 + 128 = 13,440 MiB.
    assert default_mem_fraction_static(80 * 2**30, 1) == pytest.approx(round((81920 - 13440) / 81920, 3))
    # 2 GPUs of 100 bytes at 0.9, 60 bytes of weights, 4 KV bytes a token: (90 − 30) // 2 = 30 tokens per GPU
    # shard, and a token's KV is split over both GPUs, so the pool is 30 tokens.
    assert (
        kv_pool_tokens(gpu_memory_bytes=100, tp=2, weights_bytes=60, kv_bytes_per_token=4, mem_fraction_static=0.9)
        == 30
    )
    with pytest.raises(ValueError, match="do not fit"):
        kv_pool_tokens(gpu_memory_bytes=100, tp=1, weights_bytes=95, kv_bytes_per_token=4, mem_fraction_static=0.9)


def _pd(**kwargs: object) -> Pool:
    return Pool(
        Mode.DISAGGREGATED,
        FLAT,
        prefill_workers=1,
        decode_workers=1,
        kv_bytes_per_token=1000,
        link_bytes_per_s=1e6,
        **kwargs,  # type: ignore[arg-type]
    )


def test_pd_turn_ships_the_whole_context_unless_the_decode_radix_cache_is_on() -> None:
    # Turn 2's prompt is 100 + 10 + 50 = 160 tokens; all of it crosses the link by default.
    full = simulate_batch(_pd(), [TWO_TURNS])
    assert full.transferred_bytes == pytest.approx((100 + 160) * 1000)
    # --disaggregation-decode-enable-radix-cache: the decode worker still holds turn 1's 110-token sequence, so
    # only the 50 new tokens are sent; 0.11 s less on the link.
    cached = simulate_batch(_pd(decode_radix_cache=True), [TWO_TURNS])
    assert cached.transferred_bytes == pytest.approx((100 + 50) * 1000)
    assert full.makespan_s - cached.makespan_s == pytest.approx(0.11)
    # Either way the prefill worker recomputes the 10 tokens generated on the decode worker.
    assert full.prefill_tokens == cached.prefill_tokens == 100 + 60


def test_chunked_prefill_splits_a_long_prompt_into_steps() -> None:
    one = TrajectorySpec((Turn(1000, 10, 0.0),))
    # 1,000 tokens in chunks of 300: 4 prefill steps, each paying the 10 ms framework overhead, then 10 decode
    # steps of 10 + 10 ms: 1.0 + 0.04 + 0.2 s.
    chunked = Pool(Mode.COLOCATED, FLAT, colocated_workers=1, chunk_tokens=300, step_overhead_s=0.01)
    assert simulate_batch(chunked, [one]).makespan_s == pytest.approx(1.24)
    whole = Pool(Mode.COLOCATED, FLAT, colocated_workers=1, chunk_tokens=8192, step_overhead_s=0.01)
    assert simulate_batch(whole, [one]).makespan_s == pytest.approx(1.0 + 0.01 + 0.2)


def test_cache_aware_routing_keeps_the_prefix_and_round_robin_loses_it() -> None:
    three = TrajectorySpec((Turn(100, 10, 1.0), Turn(50, 10, 1.0), Turn(50, 10, 0.0)))
    # Cache-aware: every turn returns to the worker holding its sequence: turn 2 (prompt 160) hits 110, turn 3
    # (prompt 220) hits 170.
    aware = simulate_batch(Pool(Mode.COLOCATED, FLAT, colocated_workers=2), [three])
    assert aware.cache_hit_tokens == 110 + 170
    assert aware.prefill_tokens == 100 + 50 + 50
    # Round robin: turn 2 goes to the other worker (a miss, 160 tokens computed); turn 3 comes back to worker
    # 0, which still holds turn 1's 110-token sequence.
    rr = simulate_batch(Pool(Mode.COLOCATED, FLAT, colocated_workers=2, router="round_robin"), [three])
    assert rr.cache_hit_tokens == 110
    assert rr.prefill_tokens == 100 + 160 + (220 - 110)


def _linear(scale: float) -> LinearStepTimes:
    """1 ms a prefill token, 10 ms + 10 ms a sequence a decode iteration, all times ``scale``."""
    device = DeviceParams(
        gpu_type="x",
        tp=1,
        prefill_s_per_token=0.001 * scale,
        decode_iteration_s=0.01 * scale,
        decode_per_seq_s=0.01 * scale,
        kv_capacity_bytes=1e12,
    )
    return LinearStepTimes(device)


def test_the_cache_aware_gateway_gives_a_fast_and_a_slow_worker_the_same_trajectories() -> None:
    """smg's cache_aware policy balances requests in flight by count and keeps each trajectory on its worker, so a
    worker twice as fast gets as many trajectories as a slow one and the slow one sets the makespan: exactly that
    of two slow workers. Least-load routes every turn to the worker with fewest in flight, so the fast worker
    takes more and the batch ends sooner (the split ImprovedMakespanModel predicts, docs/makespan.md)."""
    slow, fast = Engine(_linear(1.0), 1e6), Engine(_linear(0.5), 1e6)
    batch = [TrajectorySpec((Turn(100, 20, 1.0), Turn(50, 20, 1.0), Turn(50, 20, 0.0))) for _ in range(8)]

    def run(engines: tuple[Engine, ...], router: str) -> tuple[float, list[int]]:
        pool = Pool(Mode.COLOCATED, _linear(1.0), colocated_workers=2, router=router, colocated_engines=engines)
        sim = RolloutSimulation(pool, batch)
        seen: list[set[int]] = [set(), set()]
        route = sim.prefill_router.route

        def record(
            index: int, prompt: float, now: float, loads: list[tuple[int, int]], report: ReportOf | None = None
        ) -> int:
            worker = route(index, prompt, now, loads, report)
            seen[worker].add(index)
            return worker

        sim.prefill_router.route = record  # type: ignore[method-assign]
        return sim.run().makespan_s, [len(s) for s in seen]

    mixed, split = run((slow, fast), "cache_aware")
    assert split == [4, 4]
    assert mixed == pytest.approx(run((slow, slow), "cache_aware")[0], rel=1e-12)
    assert mixed > run((fast, fast), "cache_aware")[0]
    least, _ = run((slow, fast), "least_load")
    assert least < run((slow, slow), "least_load")[0]


def test_admission_holds_a_request_until_its_reserve_fits() -> None:
    # A pool of 5,000 tokens; each request needs 1,000 prompt + min(max_new, 4096) = 4,096 reserved: only one
    # is admitted at a time, so the second waits for the first to finish (no retraction needed).
    one = TrajectorySpec((Turn(1000, 100, 0.0),))
    pool = Pool(Mode.COLOCATED, FLAT, colocated_workers=1, kv_capacity_tokens=5200)
    result = simulate_batch(pool, [one, one])
    assert result.retractions == 0
    assert result.finish_times_s == pytest.approx((1.0 + 1.0, 2 * (1.0 + 1.0)))


class FakeMixedStepTimes(LinearStepTimes):
    """A fake whose mixed step costs its prefill chunk alone: the decode rows ride along for free."""

    def mixed_s(
        self,
        prefill_new_tokens: float,
        prefill_sequences: int,
        prefill_cached_tokens: float,
        decode_batch: int,
        decode_context_tokens: float,
    ) -> float:
        return self.prefill_s(prefill_new_tokens, prefill_sequences, prefill_cached_tokens)


def test_mixed_chunk_lets_decode_advance_during_a_prefill() -> None:
    short = TrajectorySpec((Turn(10, 30, 0.0),))
    late = TrajectorySpec((Turn(10, 1, 0.0), Turn(4000, 1, 0.0)))  # a long second prompt while short decodes
    # short's prompt is prefilled alone (0.01 s; it was queued first), then late's (0.01 s), then one decode step
    # for both (0.03 s), after which late's 4,000-token prompt comes back at once. Prefill first: short (1 token
    # done) waits out the 8 chunks (4 s) and then decodes 29 tokens: 4.32 s.
    steps = FakeMixedStepTimes(FLAT.device)
    plain = simulate_batch(Pool(Mode.COLOCATED, steps, colocated_workers=1, chunk_tokens=500), [short, late])
    assert max(plain.finish_times_s) == pytest.approx(0.03 + 4.0 + 0.01 + 0.28)
    # Mixed: late's first prompt already rides with short's first decode step, and each of the 8 chunks decodes
    # one more token for short, so 10 are done by 4.03 s; the remaining 20 end at 4.23 s.
    mixed = simulate_batch(
        Pool(Mode.COLOCATED, steps, colocated_workers=1, chunk_tokens=500, enable_mixed_chunk=True), [short, late]
    )
    assert max(mixed.finish_times_s) == pytest.approx(0.03 + 4.0 + 0.20)
    assert mixed.generated_tokens == plain.generated_tokens == 32
    # LinearStepTimes has no model of a mixed pass: its mixed_s is the prefill plus the decode step, so no gain.
    additive = simulate_batch(
        Pool(Mode.COLOCATED, FLAT, colocated_workers=1, chunk_tokens=500, enable_mixed_chunk=True), [short, late]
    )
    assert max(additive.finish_times_s) == pytest.approx(max(plain.finish_times_s))
    assert mixed.generated_tokens == plain.generated_tokens == 32


def test_attention_dp_prefill_on_one_rank_holds_the_other_ranks_decode() -> None:
    short = TrajectorySpec((Turn(10, 30, 0.0),))
    late = TrajectorySpec((Turn(10, 1, 0.0), Turn(4000, 1, 0.0)))
    # Two ranks: late on rank 0, short on rank 1 (rank 0's since-poll tally is 10 tokens); late's second turn is a
    # miss whose ranks tie at 10 tokens each, the tie to rank 0 (the simulator's; smg breaks it at random). Both
    # prompts prefill in parallel (0.01 s), one decode step (0.02 s) ends late's first turn, and its 4,000-token
    # prompt prefills on rank 0 for 4 s.
    separate = simulate_batch(Pool(Mode.COLOCATED, FLAT, colocated_workers=2), [late, short])
    assert max(separate.finish_times_s) == pytest.approx(4.02 + 0.01)  # short ended at 0.31 s, untouched
    assert min(separate.finish_times_s) == pytest.approx(0.01 + 0.30)
    # One engine with attention-DP 2: rank 1's 4 s prefill holds rank 0's decode, so short (1 token done at
    # 0.02 s) decodes its other 29 after 4.02 s (Prorsa's first reason).
    engine = simulate_batch(Pool(Mode.COLOCATED, FLAT, colocated_workers=2, attention_dp=2), [late, short])
    assert max(engine.finish_times_s) == pytest.approx(4.02 + 0.29)


@st.composite
def tight_batches(draw: st.DrawFn) -> tuple[Pool, list[TrajectorySpec]]:
    trajectories = [
        TrajectorySpec(
            tuple(
                Turn(draw(st.integers(1, 1500)), draw(st.integers(1, 600)), draw(st.floats(0, 5)))
                for _ in range(draw(st.integers(1, 4)))
            )
        )
        for _ in range(draw(st.integers(1, 16)))
    ]
    group_size = draw(st.sampled_from([1, 2, 4]))
    if group_size > 1:  # GRPO groups: consecutive trajectories share the first prompt of the group's first
        trajectories = [
            TrajectorySpec(
                (
                    Turn(
                        trajectories[i - i % group_size].turns[0].appended_tokens,
                        t.turns[0].generated_tokens,
                        t.turns[0].env_after_s,
                    ),
                    *t.turns[1:],
                ),
                group=i // group_size,
            )
            for i, t in enumerate(trajectories)
        ]
    longest = max(sum(t.appended_tokens + t.generated_tokens for t in tr.turns) for tr in trajectories)
    capacity = float(longest + 4096 + draw(st.integers(0, 6000)))  # the longest fits alone, with its reserve
    common = {
        "kv_capacity_tokens": capacity,
        "chunk_tokens": draw(st.sampled_from([256, 2048, 8192])),
        "router": draw(st.sampled_from(["cache_aware", "least_load", "round_robin"])),
        "max_context_tokens": longest + 4096,
    }
    if draw(st.booleans()):
        pool = Pool(
            Mode.COLOCATED,
            FLAT,
            colocated_workers=draw(st.integers(1, 3)),
            enable_mixed_chunk=draw(st.booleans()),
            attention_dp=draw(st.sampled_from([1, 2])),
            **common,  # type: ignore[arg-type]
        )
    else:
        pool = Pool(
            Mode.DISAGGREGATED,
            FLAT,
            prefill_workers=draw(st.integers(1, 2)),
            decode_workers=draw(st.integers(1, 3)),
            kv_bytes_per_token=1000.0,
            link_bytes_per_s=1e9,
            decode_radix_cache=draw(st.booleans()),
            **common,  # type: ignore[arg-type]
        )
    return pool, trajectories


def _prompts(spec: TrajectorySpec) -> int:
    total = context = 0
    for turn in spec.turns:
        context += turn.appended_tokens
        total += context
        context += turn.generated_tokens
    return total


@given(tight_batches())
def test_memory_invariants(case: tuple[Pool, list[TrajectorySpec]]) -> None:
    """No pool overflows; all finish; tokens generated once; retracted colocated work is prefilled again."""
    pool, trajectories = case
    sim = RolloutSimulation(pool, trajectories)
    result = sim.run()
    assert all(peak <= pool.kv_capacity_tokens * (1 + 1e-9) + 1e-6 for peak in sim.peak_kv_tokens())
    assert result.finished == len(trajectories)
    assert result.generated_tokens == sum(t.generated_tokens for t in trajectories)
    prompts = sum(_prompts(t) for t in trajectories)
    if pool.mode is Mode.COLOCATED and result.retractions:
        assert result.prefill_tokens + result.cache_hit_tokens > prompts
    else:
        assert result.prefill_tokens + result.cache_hit_tokens == pytest.approx(prompts)


def test_tight_colocated_pool_retracts_and_reprefills() -> None:
    # Four 500-token prompts generating 4,000 tokens each on a 12,000-token pool. Two are admitted in the first
    # batch (each reserves 500 + 4,096 in full); a third joins once they run, since the running ones reserve only
    # new_token_ratio (0.7) × 4,096 each: 11,000 − 2 × 2,867 > 4,596. Three outputs of 4,000 do not fit: decode
    # runs out, the fewest-output request is retracted and prefilled again later, and everything still finishes
    # with every token generated once.
    long = TrajectorySpec((Turn(500, 4000, 0.0),))
    pool = Pool(Mode.COLOCATED, FLAT, colocated_workers=1, kv_capacity_tokens=12000, max_context_tokens=4596)
    sim = RolloutSimulation(pool, [long] * 4)
    result = sim.run()
    assert result.retractions > 0
    assert result.generated_tokens == 4 * 4000
    assert result.prefill_tokens + result.cache_hit_tokens > 4 * 500
    assert max(sim.peak_kv_tokens()) <= 12000 + 1e-6


@pytest.mark.needs_data
def test_colocated_workers_hit_their_kv_limit_on_the_e2e_batch_at_4_gpus() -> None:
    from pearl_sched.sim.experiment import setting_for
    from pearl_sched.sim.scenario import load_scenario

    setting = setting_for(load_scenario("e2e"), DATA)
    sim = RolloutSimulation(setting.pool(Mode.COLOCATED, colocated=2), setting.batch(0))
    result = sim.run()
    assert result.peak_kv_fraction > 0.99  # both TP2 workers fill their pools ...
    assert max(sim.peak_kv_tokens()) <= setting.kv_pool_tokens * (1 + 1e-9)  # ... and never exceed them
    assert sim.pool.kv_capacity_tokens == setting.kv_pool_tokens


@pytest.mark.needs_data
def test_step_overhead_is_the_median_gap_between_measured_itl_and_the_kernel_sum() -> None:
    import csv

    import numpy as np

    from pearl_sched.profiles.kernels import ComposedStepModel, KernelTables, shipped_config
    from pearl_sched.sim.setting import STEP_OVERHEAD_S

    model = ComposedStepModel(
        shipped_config("llama-3.1-8b"), KernelTables(DATA / "aiconfigurator-sglang" / "h200_sxm"), tp=1
    )
    path = DATA / "dynamo-h200-llama31-8b" / "H200_TP1P_TP1D" / "decode_itl_vs_kvusage_context.csv"
    gaps = []
    with path.open() as f:
        for row in csv.DictReader(f):
            context = float(row["context_length"])
            batch = max(1, round(float(row["kv_usage_frac"]) * float(row["max_kv_tokens"]) / context))
            gaps.append(float(row["itl_ms"]) / 1000 - model.decode_s(batch, context))
    assert float(np.median(gaps)) == pytest.approx(STEP_OVERHEAD_S, abs=1e-5)


def test_a_groups_shared_prompt_is_evicted_only_after_every_members_tail() -> None:
    # Trajectories 0 and 1 are one GRPO group sharing a 40-token prompt (the radix tree's parent node).
    mem = WorkerMemory(100, groups={0: (-1, 40.0), 1: (-1, 40.0)})
    assert mem.share_prompt(0, 40) == 40  # 0's prefill computed the prompt: it enters the tree, locked by 0
    mem.release(0, 60, 20)  # 0 ends with 60 tokens: its 20-token tail hangs under the prompt
    assert (mem.cached(0), mem.cached(1)) == (60, 40)  # the sibling matches the whole prompt
    assert mem.lock(1, 39) == 39  # 1's first turn matches all but its last prompt token
    mem.release(1, 70, 31)  # 1 ends with 70 tokens (its private 31 = the recomputed last token + 30 generated)
    assert mem.evictable_tokens == 20 + 30 + 40  # the prompt is held once, the tails apart
    mem.private_tokens = 40  # 130 > 100: 0's tail (least recent) goes whole, then 10 of 1's tail
    mem.settle(0)
    assert (mem.cached(0), mem.cached(1)) == (40, 60)
    mem.private_tokens = 90  # 150 > 100: 1's last 20 tail tokens, then the prompt (now a leaf) loses 30
    mem.settle(0)
    assert (mem.cached(0), mem.cached(1)) == (10, 10) and mem.evicted_tokens == 30 + 50


def _group(members: int) -> list[TrajectorySpec]:
    return [TrajectorySpec((Turn(100, 10, 0.0),), group=0) for _ in range(members)]


def test_a_sibling_prefilled_after_the_first_hits_the_groups_prompt() -> None:
    # Colocated, one worker: member 0's prefill (100 tokens, 0.1 s) puts the prompt in the cache; member 1 waits
    # for that step (FCFS, one batch at a time), then matches 99 tokens and computes 1 (1 ms). Both then decode
    # 10 iterations of 10 ms: 0.101 + 0.1 s.
    pool = Pool(Mode.COLOCATED, FLAT, colocated_workers=1)
    shared = simulate_batch(pool, _group(2))
    assert (shared.prefill_tokens, shared.cache_hit_tokens) == (101, 99)
    assert shared.makespan_s == pytest.approx(0.201)
    # The same two trajectories outside a group share nothing: 2 × 100 tokens, 0.2 s of prefill.
    apart = simulate_batch(pool, [TrajectorySpec((Turn(100, 10, 0.0),))] * 2)
    assert (apart.prefill_tokens, apart.cache_hit_tokens) == (200, 0)
    assert apart.makespan_s == pytest.approx(0.3)


def test_the_router_decides_whether_siblings_meet_their_prompt() -> None:
    # Two colocated workers, three siblings arriving together. Cache-aware sends all three to the worker the first
    # went to (its load 2 is not over mean + 4): the two later ones hit 99 tokens each. Least-load and round-robin
    # spread them, so the second lands on the other worker and computes the whole prompt.
    def run(router: str) -> tuple[int, float]:
        result = simulate_batch(Pool(Mode.COLOCATED, FLAT, colocated_workers=2, router=router), _group(3))
        return result.prefill_tokens, result.cache_hit_tokens

    assert run("cache_aware") == (100 + 1 + 1, 2 * 99)
    assert run("least_load") == (100 + 100 + 1, 99)
    assert run("round_robin") == (100 + 100 + 1, 99)


def test_pd_prefill_worker_caches_the_groups_prompt_and_still_ships_the_whole_context() -> None:
    # The prefill worker computes 100 + 1 tokens; the decode worker has no radix cache, so both prompts' KV
    # (2 × 100 tokens × 1,000 bytes) crosses the 1 MB/s link, one after the other: 0.1 → 0.2 and 0.2 → 0.3 s.
    result = simulate_batch(_pd(), _group(2))
    assert (result.prefill_tokens, result.cache_hit_tokens) == (101, 99)
    assert result.transferred_bytes == pytest.approx(200 * 1000)
    assert result.makespan_s == pytest.approx(0.3 + 10 * 0.01)


def test_a_group_must_share_its_first_prompt() -> None:
    odd = [TrajectorySpec((Turn(100, 10, 0.0),), group=3), TrajectorySpec((Turn(90, 10, 0.0),), group=3)]
    with pytest.raises(ValueError, match="group 3"):
        simulate_batch(Pool(Mode.COLOCATED, FLAT, colocated_workers=1), odd)


def test_pd_decode_preallocates_before_the_prefill_runs() -> None:
    # 1P1D, pools of 1,000 tokens. The decode worker preallocates a 100-token prompt plus 512 reserved decode
    # tokens before the prefill may start (DecodePreallocQueue). The second request needs 612 more, but only
    # 1,000 − 100 − 512 is left while the first is preallocated or running, so its prefill waits for the first to
    # finish: prefill 0–0.1, transfer 0.1–0.2, decode 0.2–0.3; then the same again, 0.3–0.6.
    one = TrajectorySpec((Turn(100, 10, 0.0),))
    tight = simulate_batch(_pd(kv_capacity_tokens=1000), [one, one])
    assert tight.finish_times_s == pytest.approx((0.3, 0.6))
    # With room for both, the second prefill runs at once and only the link (FCFS) and the batch order it.
    roomy = simulate_batch(_pd(), [one, one])
    assert roomy.finish_times_s == pytest.approx((0.3, 0.4))


@pytest.mark.parametrize("mode", [Mode.COLOCATED, Mode.DISAGGREGATED])
def test_load_reports_count_the_decode_batch_as_running(mode: Mode) -> None:
    """What each worker tells the gateway at a poll, as SGLang's ``get_loads`` does: ``num_running_reqs`` is the
    decode batch (colocated and PD decode workers), and a PD prefill worker, whose loop keeps no running batch,
    reports none. The batch's second turns arrive while other trajectories decode, so some polls see them."""
    # 10 ms an iteration: first turns decode 10 to 17 s, so the second turns route (and poll, at 10 s) mid-batch
    batch = [TrajectorySpec((Turn(100, 1000 + 100 * i, 1.0), Turn(50, 300, 0.0))) for i in range(8)]
    if mode is Mode.COLOCATED:
        pool = Pool(mode, FLAT, colocated_workers=2, router="cache_aware")
    else:
        # the gateway ranks decode workers by their reports when their radix cache is on (else least_load)
        pool = Pool(mode, FLAT, prefill_workers=1, decode_workers=2, router="cache_aware", decode_radix_cache=True)
    sim = RolloutSimulation(pool, batch)
    seen: list[tuple[str, int, int]] = []  # (side, reported running, decode batch at that moment)

    def spy(side: str, report: ReportOf) -> ReportOf:
        def read(worker: int) -> LoadReport:
            r = report(worker)
            decoding = len(sim.decoders[worker].active) if side != "prefill" else 0
            seen.append((side, r.running_reqs, decoding))
            return r

        return read

    side = "prefill" if mode is Mode.DISAGGREGATED else "colocated"
    sim._report = spy(side, sim._report)  # type: ignore[method-assign]
    sim._decode_report = spy("decode", sim._decode_report)  # type: ignore[method-assign]
    assert sim.run().finished == len(batch)
    assert seen and all(running == decoding for _, running, decoding in seen)
    if mode is Mode.DISAGGREGATED:
        assert {running for side, running, _ in seen if side == "prefill"} == {0}
    assert max(running for side, running, _ in seen if side != "prefill") > 0


def test_the_pools_tie_seed_seeds_both_routers_on_their_own_streams() -> None:
    """``Pool.tie_seed`` s gives the prefill (or colocated) router seed 2s and the decode router 2s + 1; ``None``
    keeps the index tie-break in both."""
    sim = RolloutSimulation(_pd(tie_seed=5), [TWO_TURNS])
    assert (sim.prefill_router.tie_seed, sim.decode_router.tie_seed) == (10, 11)
    sim = RolloutSimulation(_pd(tie_seed=None), [TWO_TURNS])
    assert (sim.prefill_router.tie_seed, sim.decode_router.tie_seed) == (None, None)


@pytest.mark.needs_data
def test_a_steps_tie_seed_comes_from_the_scenario_and_the_step() -> None:
    """Every policy's step k runs behind the same seeded gateway: the scenario's ``tie_seed`` (default: its batch
    seed) × 1,000,003 + k, as the batches are seeded."""
    from pearl_sched.sim.experiment import setting_for
    from pearl_sched.sim.scenario import load_scenario

    e2e = load_scenario("e2e")
    assert setting_for(e2e, DATA).pool(Mode.COLOCATED, colocated=2, step=3).tie_seed == 3
    reseeded = e2e.model_copy(update={"seed": 2})
    assert setting_for(reseeded, DATA).pool(Mode.COLOCATED, colocated=2, step=3).tie_seed == 2 * 1_000_003 + 3
    ties_only = e2e.model_copy(update={"tie_seed": 4})
    assert ties_only.seed == 0 and ties_only.gateway_tie_seed == 4
    assert setting_for(ties_only, DATA).pool(Mode.DISAGGREGATED, 1, 1).tie_seed == 4 * 1_000_003
