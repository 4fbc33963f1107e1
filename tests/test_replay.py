"""Closed-loop benchmark replay on one SGLang-scheduled worker."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl_sched.sim.replay import (
    DisaggReplayResult,
    PDRole,
    ReplayError,
    SGLangDefaultScheduler,
    _drive,
    benchmark_lengths,
    replay_closed_loop,
    replay_disagg_closed_loop,
    replay_open_loop,
    sglang_chunked_prefill_size,
    sglang_cuda_graph_batch_sizes,
    sglang_release,
)
from pearl_sched.sim.steptimes import StepTimes


class FakeSteps:
    """A named fake: prefill 10 ms + 0.1 ms/token, decode 5 ms + 0.01 ms/sequence; it counts its calls."""

    source = "fake"

    def __init__(self) -> None:
        self.calls = {"prefill": 0, "decode": 0, "mixed": 0}
        self.prefill_tokens = 0

    def prefill_s(self, new_tokens: float, sequences: int, cached_tokens: float) -> float:
        self.calls["prefill"] += 1
        self.prefill_tokens += int(new_tokens)
        return 0.010 + 1e-4 * new_tokens

    def decode_s(self, batch: int, context_tokens: float) -> float:
        self.calls["decode"] += 1
        return 0.005 + 1e-5 * batch

    def mixed_s(self, new: float, seqs: int, cached: float, batch: int, context: float) -> float:
        self.calls["mixed"] += 1
        self.prefill_tokens += int(new)
        return 0.010 + 1e-4 * new + 1e-5 * batch


def test_fake_is_a_step_times() -> None:
    assert isinstance(FakeSteps(), StepTimes)


def test_one_client_by_hand() -> None:
    steps = FakeSteps()
    res = replay_closed_loop(steps, isl=1000, osl=11, concurrency=1, pool_tokens=10_000, rounds=3)
    assert res.ttft_s == pytest.approx(0.010 + 0.1)
    assert res.tpot_s == pytest.approx(0.005 + 1e-5)
    assert res.e2e_s == pytest.approx(0.110 + 10 * 0.00501)
    assert (res.prefill_steps, res.decode_steps, res.retractions) == (3, 30, 0)


def test_long_prompts_are_chunked() -> None:
    steps = FakeSteps()
    res = replay_closed_loop(steps, isl=10_000, osl=2, concurrency=1, pool_tokens=50_000, chunked_prefill_size=4096)
    assert res.prefill_steps == 5 * math.ceil(10_000 / 4096)
    assert res.ttft_s == pytest.approx(3 * 0.010 + 1e-4 * 10_000)


def test_prefill_first_delays_decode_of_running_requests() -> None:
    # two clients: the second prompt is prefilled before the first request's first decode step
    res = replay_closed_loop(FakeSteps(), isl=100, osl=3, concurrency=2, pool_tokens=10_000, rounds=1)
    assert res.ttft_s == pytest.approx(0.010 + 1e-4 * 200)  # both prompts fit one prefill batch
    res = replay_closed_loop(
        FakeSteps(), isl=100, osl=3, concurrency=2, pool_tokens=10_000, rounds=1, chunked_prefill_size=100
    )
    assert res.ttft_s == pytest.approx((0.02 + 0.04) / 2)


def test_mixed_chunk_runs_prefill_with_decode() -> None:
    steps = FakeSteps()
    replay_closed_loop(
        steps, isl=500, osl=50, concurrency=4, pool_tokens=10_000, rounds=3, chunked_prefill_size=500, mixed_chunk=True
    )
    assert steps.calls["mixed"] > 0


@given(
    isl=st.integers(1, 3000),
    osl=st.integers(1, 400),
    concurrency=st.integers(1, 40),
    slack=st.floats(1.0, 30.0),
)
def test_pool_is_never_exceeded_and_every_request_finishes(isl: int, osl: int, concurrency: int, slack: float) -> None:
    pool = int((isl + osl) * slack) + 1  # SGLang admits only when prompt + answer < free tokens
    steps = FakeSteps()
    res = replay_closed_loop(steps, isl=isl, osl=osl, concurrency=concurrency, pool_tokens=pool, rounds=2)
    assert res.max_used_tokens <= pool
    assert res.requests == 2 * concurrency
    # every token generated once: decode steps carry at most one token per request per step
    assert res.decode_steps >= osl - 1
    assert res.ttft_s > 0 and res.e2e_s >= res.ttft_s
    if res.retractions:
        # retracted work is prefilled again: more prefill tokens than prompts
        assert steps.prefill_tokens > res.requests * isl


def test_a_kv_bound_row_retracts_and_still_finishes() -> None:
    steps = FakeSteps()
    res = replay_closed_loop(steps, isl=100, osl=1000, concurrency=20, pool_tokens=6000, rounds=2)
    assert res.retractions > 0
    assert res.max_used_tokens <= 6000
    assert steps.prefill_tokens > 40 * 100


def test_impossible_rows_are_refused() -> None:
    with pytest.raises(ReplayError, match="does not fit the KV pool"):
        replay_closed_loop(FakeSteps(), isl=1000, osl=1000, concurrency=1, pool_tokens=1500)
    with pytest.raises(ReplayError, match="positive"):
        replay_closed_loop(FakeSteps(), isl=0, osl=10, concurrency=1, pool_tokens=1500)


def test_sglang_chunk_size_tiers() -> None:
    assert sglang_chunked_prefill_size(80 * 2**30) == 8192
    assert sglang_chunked_prefill_size(180 * 2**30) == 16384
    assert sglang_chunked_prefill_size(24 * 2**30) == 2048


def test_open_loop_waits_for_arrivals() -> None:
    res = replay_open_loop(FakeSteps(), [(5.0, 1000, 11)], pool_tokens=10_000)
    assert res.ttft_s == pytest.approx(0.110)
    assert res.e2e_s == pytest.approx(0.110 + 10 * 0.00501)


def test_vllm_policy_mixes_decode_into_prefill_steps_within_the_budget() -> None:
    steps = FakeSteps()
    requests = [(0.01 * i, 300 + 7 * i, 40 + i) for i in range(30)]
    res = replay_open_loop(
        steps, requests, pool_tokens=5000, policy="vllm-v1", max_num_batched_tokens=512, max_running_requests=16
    )
    assert steps.calls["mixed"] > 0
    assert res.requests == 30 and res.max_used_tokens <= 5000


def test_open_loop_refuses_bad_requests() -> None:
    with pytest.raises(ReplayError, match="unknown policy"):
        replay_open_loop(FakeSteps(), [(0.0, 10, 10)], pool_tokens=100, policy="tgi")
    with pytest.raises(ReplayError, match="arrival_s"):
        replay_open_loop(FakeSteps(), [(0.0, 0, 10)], pool_tokens=100)


@given(
    sizes=st.lists(st.tuples(st.integers(1, 800), st.integers(1, 200)), min_size=1, max_size=30),
    gap=st.floats(0.0, 0.05),
    slack=st.floats(1.0, 10.0),
    policy=st.sampled_from(["sglang", "vllm-v1"]),
)
def test_open_loop_pool_invariant_and_token_accounting(
    sizes: list[tuple[int, int]], gap: float, slack: float, policy: str
) -> None:
    pool = int(max(i + o for i, o in sizes) * slack) + 1
    steps = FakeSteps()
    requests = [(gap * k, i, o) for k, (i, o) in enumerate(sizes)]
    res = replay_open_loop(steps, requests, pool_tokens=pool, policy=policy, max_num_batched_tokens=1024)
    assert res.max_used_tokens <= pool
    assert res.requests == len(sizes)
    assert steps.prefill_tokens >= sum(i for i, _ in sizes)  # every prompt computed (retracted ones again)


def test_admission_reserves_the_new_requests_whole_clipped_answer() -> None:
    # SGLang's PrefillAdder.add_one_req: prompt + min(max_new, 4096) must be below the free tokens, where running
    # requests (and requests already in the batch) reserve their answers; only the running ones scaled by the ratio.
    res = replay_closed_loop(FakeSteps(), isl=100, osl=1000, concurrency=2, pool_tokens=2000, rounds=1)
    # 1100 + 1100 > 2000: the second prompt waits for the next iteration (and, the pool being short of both answers,
    # one request is later retracted and prefilled once more)
    assert res.prefill_steps - res.retractions == 2
    res = replay_closed_loop(FakeSteps(), isl=100, osl=1000, concurrency=2, pool_tokens=2201, rounds=1)
    assert (res.prefill_steps, res.retractions) == (1, 0)


def test_a_request_filling_the_pool_exactly_is_refused() -> None:
    with pytest.raises(ReplayError, match="does not fit"):
        replay_closed_loop(FakeSteps(), isl=100, osl=100, concurrency=1, pool_tokens=200)


def test_benchmark_lengths_follow_the_harness_range() -> None:
    rng = np.random.RandomState(0)
    lengths = benchmark_lengths(1000, 5000, 0.8, rng)
    assert min(lengths) == 800 and max(lengths) == 1000
    assert np.mean(lengths) == pytest.approx(900, abs=5)
    assert benchmark_lengths(1000, 3, 1.0, rng) == [1000, 1000, 1000]
    with pytest.raises(ReplayError, match="range_ratio"):
        benchmark_lengths(1000, 3, 0.0, rng)


def test_unequal_lengths_spread_the_prefills_over_the_run() -> None:
    # lock-step clients prefill together each round; with lengths drawn from [0.8, 1] x the clients drift apart, so
    # a prompt meets fewer others in the queue (lower TTFT) and decode steps are interleaved with prefills
    kwargs = {"isl": 4000, "osl": 200, "concurrency": 16, "pool_tokens": 200_000, "rounds": 10}
    lockstep = replay_closed_loop(FakeSteps(), **kwargs, chunked_prefill_size=4096)
    spread = replay_closed_loop(FakeSteps(), **kwargs, chunked_prefill_size=4096, range_ratio=0.8)
    assert spread.requests == lockstep.requests == 160
    assert spread.ttft_s < lockstep.ttft_s
    assert spread.tpot_s > lockstep.tpot_s


def test_replay_is_deterministic_per_seed() -> None:
    kwargs = {"isl": 500, "osl": 50, "concurrency": 8, "pool_tokens": 50_000, "range_ratio": 0.8}
    a = replay_closed_loop(FakeSteps(), **kwargs, seed=1)
    b = replay_closed_loop(FakeSteps(), **kwargs, seed=1)
    c = replay_closed_loop(FakeSteps(), **kwargs, seed=2)
    assert (a.ttft_s, a.tpot_s) == (b.ttft_s, b.tpot_s)
    assert (a.ttft_s, a.tpot_s) != (c.ttft_s, c.tpot_s)


def test_decode_steps_run_at_the_captured_cuda_graph_batch() -> None:
    # three clients decode as a batch of 3, padded to the captured 4 (FakeSteps: 5 ms + 0.01 ms per sequence)
    plain = replay_closed_loop(FakeSteps(), isl=10, osl=101, concurrency=3, pool_tokens=10_000, rounds=1)
    padded = replay_closed_loop(
        FakeSteps(), isl=10, osl=101, concurrency=3, pool_tokens=10_000, rounds=1, cuda_graph_bs=(1, 2, 4, 8)
    )
    assert plain.tpot_s == pytest.approx(0.005 + 3e-5)
    assert padded.tpot_s == pytest.approx(0.005 + 4e-5)
    # larger than every captured size: no graph, no padding
    eager = replay_closed_loop(
        FakeSteps(), isl=10, osl=101, concurrency=3, pool_tokens=10_000, rounds=1, cuda_graph_bs=(1, 2)
    )
    assert eager.tpot_s == pytest.approx(plain.tpot_s)


def _closed_loop(interval: int, requests: list[tuple[int, int]], concurrency: int) -> list[float]:
    """Per-request TTFT of ``requests`` (ISL, OSL) sent in order by ``concurrency`` closed-loop clients."""
    sched = SGLangDefaultScheduler(FakeSteps(), 10_000, scheduler_recv_interval=interval)
    res = _drive(sched, [(0.0, i, o) for i, o in requests], len(requests), concurrency=concurrency)
    return [ttft for ttft, _, _ in res.per_request]


def test_scheduler_recv_interval_delays_a_request_sent_during_decode_by_hand() -> None:
    # two clients prefill together (12 ms), decode at batch 2; the OSL-3 request finishes after 2 decode steps and its
    # client sends the third request. Interval 1: received at once, prefilled alone (11 ms). Interval 10: the prefill
    # adds 1000 (receive at the next iteration), each decode 1; the counter is 1 after the first decode and reaches 10
    # at the top of the 12th iteration, after 8 decode steps of the lone OSL-20 request (5.01 ms each)
    requests = [(10, 3), (10, 20), (10, 5)]
    assert _closed_loop(1, requests, 2)[2] == pytest.approx(0.011)
    assert _closed_loop(10, requests, 2)[2] == pytest.approx(8 * (0.005 + 1e-5) + 0.011)
    assert _closed_loop(10, requests, 2)[:2] == _closed_loop(1, requests, 2)[:2]  # the first C arrive at an idle server


def test_scheduler_recv_interval_idle_server_receives_at_once() -> None:
    # one client: the server is idle when the next request is sent, and an idle loop spins through the count
    requests = [(10, 3), (10, 3), (10, 3)]
    assert _closed_loop(30, requests, 1) == pytest.approx([0.011] * 3)
    res = replay_closed_loop(FakeSteps(), isl=50, osl=40, concurrency=4, pool_tokens=10_000, range_ratio=0.8, rounds=3)
    same = replay_closed_loop(
        FakeSteps(),
        isl=50,
        osl=40,
        concurrency=4,
        pool_tokens=10_000,
        range_ratio=0.8,
        rounds=3,
        scheduler_recv_interval=1,
    )
    assert same.per_request == res.per_request  # 1 is SGLang's default: every iteration receives
    slow = replay_closed_loop(
        FakeSteps(),
        isl=50,
        osl=40,
        concurrency=4,
        pool_tokens=10_000,
        range_ratio=0.8,
        rounds=3,
        scheduler_recv_interval=30,
    )
    assert slow.ttft_s > res.ttft_s and slow.prefill_steps < res.prefill_steps  # arrivals wait, then prefill together


def test_sglang_cuda_graph_sizes() -> None:
    # SGLang 0.5.3 on (ServerArgs._generate_cuda_graph_batch_sizes): 12, then every 8 to 256, every 16 to 496, every
    # 32 from 512, capped at the default --cuda-graph-max-bs (256 at TP < 4 below 160 GiB, else 512)
    h100 = sglang_cuda_graph_batch_sizes(80 * 2**30, 1, backend_version="0.5.9")
    assert h100[:6] == (1, 2, 4, 8, 12, 16) and h100[-1] == 256 and 168 in h100
    b200 = sglang_cuda_graph_batch_sizes(180 * 2**30, 8, backend_version="0.5.9")
    assert b200[-3:] == (480, 496, 512) and 264 not in b200 and 272 in b200 and 12 in b200
    assert sglang_cuda_graph_batch_sizes(180 * 2**30, 8) == b200  # no release named: the current list
    assert sglang_cuda_graph_batch_sizes(180 * 2**30, 8, backend_version="nightly-dev-20260216-d3bae71e") == b200
    assert sglang_cuda_graph_batch_sizes(24 * 2**30, 1)[-1] == 24  # --cuda-graph-max-bs 24 below 35 GiB
    # a launch's --cuda-graph-max-bs 32 (InferenceX dsr1_fp8_b200.sh at TP 4): the default list stops there
    assert sglang_cuda_graph_batch_sizes(180 * 2**30, 4, 32) == (1, 2, 4, 8, 12, 16, 24, 32)
    assert sglang_cuda_graph_batch_sizes(180 * 2**30, 4, 1024, backend_version="0.5.10.post1")[-3:] == (960, 992, 1024)
    # before 0.5.3 (cuda_graph_runner.get_batch_sizes_to_capture in 0.5.1.post1 / 0.5.2): no 12, 160 on 80 GiB
    # (no default cap there), 256 above 90 GiB, every 16 to 512 above 160 GB; a cap beyond the list extends it by 16
    old_h100 = sglang_cuda_graph_batch_sizes(80 * 2**30, 1, backend_version="0.5.1.post1")
    assert old_h100 == (1, 2, 4, 8, *range(16, 161, 8))
    old_h200 = sglang_cuda_graph_batch_sizes(141 * 2**30, 8, backend_version="0.5.2")
    assert old_h200[-1] == 256 and 12 not in old_h200
    assert sglang_cuda_graph_batch_sizes(180 * 2**30, 8, backend_version="0.5.1")[-2:] == (496, 512)
    # --cuda-graph-max-bs 200 on 0.5.1: range(160, 201, 16) appended, so 192 is the largest graph
    assert sglang_cuda_graph_batch_sizes(80 * 2**30, 1, 200, backend_version="0.5.1.post1")[-3:] == (160, 176, 192)


def test_sglang_release() -> None:
    assert sglang_release("0.5.1.post1") == (0, 5, 1)
    assert sglang_release("0.5.10.post1") == (0, 5, 10)
    assert sglang_release("0.5.9") == (0, 5, 9)
    assert sglang_release("0.5.3rc0") == (0, 5, 3)
    assert sglang_release("nightly-dev-20260402-d7256eb6") is None
    assert sglang_release("") is None and sglang_release(None) is None


# -- disaggregated (PD) replay --------------------------------------------------------------------------------------


class BatchRecordingSteps(FakeSteps):
    """A named fake: :class:`FakeSteps` that also records every decode batch it was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.decode_batches: list[int] = []

    def decode_s(self, batch: int, context_tokens: float) -> float:
        self.decode_batches.append(batch)
        return super().decode_s(batch, context_tokens)


def _pd(
    prefill_steps: FakeSteps,
    decode_steps: FakeSteps,
    *,
    prefill_ranks: int = 1,
    decode_ranks: int = 1,
    prefill_workers: int = 1,
    decode_workers: int = 1,
    kv_bytes: float = 1000.0,
    link: float = 1e9,
    decode_pool: int = 1_000_000,
    graphs: tuple[int, ...] = (),
) -> tuple[PDRole, PDRole]:
    prefill = PDRole(
        prefill_steps, prefill_workers, prefill_ranks, 1_000_000, kv_bytes_per_token=kv_bytes, link_bytes_per_s=link
    )
    return prefill, PDRole(decode_steps, decode_workers, decode_ranks, decode_pool, cuda_graph_bs=graphs)


def test_disagg_one_client_by_hand_uses_both_roles() -> None:
    p, d = FakeSteps(), FakeSteps()
    prefill, decode = _pd(p, d, kv_bytes=1000.0, link=1e8)
    res = replay_disagg_closed_loop(prefill, decode, isl=1000, osl=11, concurrency=1, rounds=3)
    transfer = 1000 * 1000.0 / 1e8
    assert res.ttft_s == pytest.approx(0.010 + 0.1 + transfer)  # prefill, then the whole prompt's KV over the link
    assert res.tpot_s == pytest.approx(0.005 + 1e-5)
    assert res.e2e_s == pytest.approx(0.110 + transfer + 10 * 0.00501)
    assert p.calls == {"prefill": 3, "decode": 0, "mixed": 0}  # the prefill engine only prefills
    assert d.calls == {"prefill": 0, "decode": 30, "mixed": 0}  # the decode engine only decodes
    assert (res.prefill_steps, res.decode_steps) == (3, 30)


def test_disagg_ttft_phases_by_hand() -> None:
    prefill, decode = _pd(FakeSteps(), FakeSteps(), kv_bytes=1000.0, link=1e8)
    res = replay_disagg_closed_loop(prefill, decode, isl=1000, osl=11, concurrency=1, rounds=3)
    # one client: nothing waits; the first token is the prefill (0.11 s) plus the transfer (0.01 s)
    assert (res.prealloc_wait_s, res.prefill_queue_s, res.join_wait_s) == (0.0, 0.0, 0.0)
    assert (res.prefill_run_s, res.transfer_s) == (pytest.approx(0.110), pytest.approx(0.010))
    request_s = 0.120 + 10 * 0.00501
    assert res.makespan_s == pytest.approx(3 * request_s)
    assert res.prefill_busy == pytest.approx(0.110 / request_s)  # one engine, stepping 0.11 s per request
    assert res.decode_busy == pytest.approx(10 * 0.00501 / request_s)
    assert res.mean_decode_rank_batch == 1.0


def test_disagg_full_decode_pool_holds_requests_in_the_prealloc_queue() -> None:
    # 2,500 tokens: one prompt of 1,000 + 512 reserved fits; a second needs 1,512 more beside the first's 1,000 + 512
    prefill, decode = _pd(FakeSteps(), FakeSteps(), kv_bytes=1000.0, link=1e8, decode_pool=2_500)
    res = replay_disagg_closed_loop(prefill, decode, isl=1000, osl=11, concurrency=2, rounds=2)
    request_s = 0.120 + 10 * 0.00501  # prefill + transfer + 10 decode steps of one
    # requests 2, 3 and 4 each wait for the one before them to finish: the waits are 0, 1, 1, 1 request times
    assert res.prealloc_wait_s == pytest.approx(0.75 * request_s)
    assert res.ttft_s == pytest.approx(0.75 * request_s + 0.120)
    assert res.ttft_s == pytest.approx(
        res.prealloc_wait_s + res.prefill_queue_s + res.prefill_run_s + res.transfer_s + res.join_wait_s
    )
    assert res.max_decode_rank_batch == 1 and res.retractions == 0
    assert res.makespan_s == pytest.approx(4 * request_s)


def test_disagg_transfers_every_prompts_whole_kv() -> None:
    rng = np.random.RandomState(0)
    isls = benchmark_lengths(2000, 4 * 16, 0.8, rng)
    prefill, decode = _pd(FakeSteps(), FakeSteps(), kv_bytes=70_272.0, prefill_workers=2, prefill_ranks=2)
    res = replay_disagg_closed_loop(prefill, decode, isl=2000, osl=50, concurrency=16, rounds=4, range_ratio=0.8)
    assert res.transferred_bytes == pytest.approx(sum(isls) * 70_272.0)  # context × KV bytes/token, each request
    assert sum(res.prefill_rank_requests) == res.requests == 64


def test_disagg_attention_dp_ranks_split_the_batch() -> None:
    one = BatchRecordingSteps()
    replay_disagg_closed_loop(*_pd(FakeSteps(), one), isl=100, osl=200, concurrency=32, rounds=2)
    assert max(one.decode_batches) == 32  # one rank holds every request
    ranked = BatchRecordingSteps()
    res = replay_disagg_closed_loop(
        *_pd(FakeSteps(), ranked, decode_ranks=8, prefill_ranks=4), isl=100, osl=200, concurrency=32, rounds=2
    )
    assert len(res.decode_rank_requests) == 8 and all(n > 0 for n in res.decode_rank_requests)
    assert len(res.prefill_rank_requests) == 4 and all(n > 0 for n in res.prefill_rank_requests)
    assert sum(res.decode_rank_requests) == 64
    # a lock-step engine steps at its busiest rank's batch: more than the mean of 4, far less than 32
    assert max(ranked.decode_batches) == res.max_decode_rank_batch
    assert 4 < res.max_decode_rank_batch < 32


def test_disagg_decode_pads_to_the_cuda_graph_batch() -> None:
    steps = BatchRecordingSteps()
    replay_disagg_closed_loop(*_pd(FakeSteps(), steps, graphs=(1, 2, 4, 8)), isl=100, osl=20, concurrency=3, rounds=1)
    assert set(steps.decode_batches) <= {1, 2, 4}  # 3 running run as 4


def test_disagg_small_decode_pool_retracts_and_finishes_everything() -> None:
    prefill, decode = _pd(FakeSteps(), FakeSteps(), decode_pool=4_000)
    res = replay_disagg_closed_loop(prefill, decode, isl=500, osl=1500, concurrency=6, rounds=2)
    assert res.retractions > 0  # the decode rank ran out of KV and offloaded some requests
    assert res.resumes == res.retractions  # every offloaded request came back (none re-prefilled)
    assert res.ttft_s == pytest.approx(
        res.prealloc_wait_s + res.prefill_queue_s + res.prefill_run_s + res.transfer_s + res.join_wait_s
    )
    assert res.requests == 12 and all(not math.isnan(e2e) for _, _, e2e in res.per_request)
    assert res.max_used_tokens <= 4_000  # never above the pool, preallocations included


def test_disagg_refuses_impossible_sizes() -> None:
    with pytest.raises(ReplayError, match="does not fit"):
        replay_disagg_closed_loop(*_pd(FakeSteps(), FakeSteps(), decode_pool=1_000), isl=900, osl=10, concurrency=1)
    with pytest.raises(ReplayError, match="workers"):
        replay_disagg_closed_loop(*_pd(FakeSteps(), FakeSteps(), decode_workers=0), isl=10, osl=10, concurrency=1)


def _two_rank_run(seed: int, prebuilt_step: bool, ranks: int = 2) -> DisaggReplayResult:
    prefill = PDRole(FakeSteps(), 1, 1, 1_000_000, kv_bytes_per_token=1000.0, link_bytes_per_s=1e7)
    decode = PDRole(FakeSteps(), 1, ranks, 1_000_000, prebuilt_step=prebuilt_step)
    return replay_disagg_closed_loop(prefill, decode, isl=100, osl=20, concurrency=2, rounds=1, seed=seed)


def test_disagg_prebuilt_iteration_costs_an_attention_dp_rank_one_step_by_hand() -> None:
    # SGLang 0.5.5-0.5.9: a rank that takes in a transferred request runs that prebuilt batch instead of its
    # running batch, with an idle forward while the other ranks decode. Both prompts prefill in one 30 ms batch and
    # cross the link one after the other (10 ms each): the first reaches its rank at 40 ms with nothing else running
    # (no step is lost), the second reaches the other rank during the first's decode steps, so its rank sits out one
    # step of the first rank (5.01 ms at batch 1) before it decodes
    seed = next(s for s in range(20) if _two_rank_run(s, False).decode_rank_requests == [1, 1])
    merged, prebuilt = _two_rank_run(seed, False), _two_rank_run(seed, True)
    assert (merged.skipped_rank_steps, prebuilt.skipped_rank_steps) == (0, 1)
    assert prebuilt.decode_steps == merged.decode_steps + 1
    first, second = sorted(range(2), key=lambda k: merged.per_request[k][2])
    assert prebuilt.per_request[first] == merged.per_request[first]
    assert prebuilt.per_request[second][2] == pytest.approx(merged.per_request[second][2] + 0.00501)
    assert prebuilt.per_request[second][0] == merged.per_request[second][0]  # the first token is not later


def test_disagg_prebuilt_iteration_costs_nothing_on_one_rank_or_one_busy_rank() -> None:
    # one rank (plain TP): the prebuilt iteration runs no forward; two requests on one rank: no other rank steps
    for seed in range(4):
        one = _two_rank_run(seed, False, ranks=1), _two_rank_run(seed, True, ranks=1)
        assert one[0].per_request == one[1].per_request and one[1].skipped_rank_steps == 0
    seed = next(s for s in range(20) if 0 in _two_rank_run(s, False).decode_rank_requests)
    assert _two_rank_run(seed, True).per_request == _two_rank_run(seed, False).per_request


def test_disagg_prebuilt_iterations_finish_every_request_with_ttft_phases_intact() -> None:
    prefill, _ = _pd(FakeSteps(), FakeSteps(), prefill_ranks=4)
    decode = PDRole(FakeSteps(), 2, 8, 20_000, prebuilt_step=True)
    res = replay_disagg_closed_loop(prefill, decode, isl=1000, osl=200, concurrency=64, rounds=3, range_ratio=0.8)
    assert res.skipped_rank_steps > 0 and res.requests == 192
    assert all(not math.isnan(e2e) for _, _, e2e in res.per_request)
    assert res.ttft_s == pytest.approx(
        res.prealloc_wait_s + res.prefill_queue_s + res.prefill_run_s + res.transfer_s + res.join_wait_s
    )
    assert res.max_used_tokens <= 20_000


def test_disagg_running_caps_bound_the_prefill_batch_and_the_decode_rank() -> None:
    # --max-running-requests per rank: a prefill batch holds at most that many prompts (three arrive at once: the
    # first prefills alone, the other two in one batch uncapped, in two at a cap of 1); a decode rank's running batch
    # stops there and a transferred request waits, holding its KV, until the one before it finishes
    # (get_new_prebuilt_batch)
    def run(prefill_cap: int | None, decode_cap: int | None) -> DisaggReplayResult:
        prefill = PDRole(FakeSteps(), 1, 1, 1_000_000, max_running_requests=prefill_cap)
        decode = PDRole(FakeSteps(), 1, 1, 1_000_000, max_running_requests=decode_cap)
        return replay_disagg_closed_loop(prefill, decode, isl=100, osl=20, concurrency=3, rounds=1)

    free, one_prompt, one_running = run(None, None), run(1, None), run(None, 1)
    assert (free.prefill_steps, one_prompt.prefill_steps) == (2, 3)
    assert (free.max_decode_rank_batch, one_running.max_decode_rank_batch) == (3, 1)
    assert one_running.join_wait_s > 0.05 > free.join_wait_s  # a whole generation against part of a step
    by_ttft = sorted(one_running.per_request, key=lambda r: r[0])
    for before, after in itertools.pairwise(by_ttft):
        assert after[0] == pytest.approx(before[2])  # its first token comes when the one before it finished
    assert one_running.ttft_s == pytest.approx(
        one_running.prealloc_wait_s
        + one_running.prefill_queue_s
        + one_running.prefill_run_s
        + one_running.transfer_s
        + one_running.join_wait_s
    )


def _recv_run(interval: int, concurrency: int, prebuilt_step: bool = True, ranks: int = 1) -> DisaggReplayResult:
    prefill = PDRole(FakeSteps(), 1, 1, 1_000_000, kv_bytes_per_token=1000.0, link_bytes_per_s=1e9)
    decode = PDRole(FakeSteps(), 2, ranks, 1_000_000, prebuilt_step=prebuilt_step, scheduler_recv_interval=interval)
    return replay_disagg_closed_loop(
        prefill, decode, isl=200, osl=60, concurrency=concurrency, rounds=4, range_ratio=0.5, seed=3
    )


def test_disagg_recv_interval_holds_requests_sent_while_the_decode_engine_decodes() -> None:
    # SGLang's SchedulerRecvSkipper on a PD decode engine: a request sent while it decodes waits before its
    # preallocation until the decode iterations since the last receive reach the interval; 1 is the default
    base, slow = _recv_run(1, 6), _recv_run(10, 6)
    assert base.prealloc_wait_s == 0.0 < slow.prealloc_wait_s
    # each wait is at most the interval's decode steps (5 ms plus 10 us per request of the batch of at most 6)
    assert slow.prealloc_wait_s <= 10 * (0.005 + 6e-5)
    assert slow.ttft_s == pytest.approx(
        slow.prealloc_wait_s + slow.prefill_queue_s + slow.prefill_run_s + slow.transfer_s + slow.join_wait_s
    )
    assert all(not math.isnan(e2e) for _, _, e2e in slow.per_request) and slow.requests == 24
    # one client per engine: each request is sent to an idle engine, whose loop spins through the count
    assert _recv_run(30, 1).per_request == _recv_run(1, 1).per_request


def test_disagg_recv_interval_is_refused_with_attention_dp() -> None:
    # SchedulerRecvSkipper asserts `not server_args.enable_dp_attention`
    with pytest.raises(ReplayError, match="attention-DP"):
        _recv_run(10, 4, ranks=2)
