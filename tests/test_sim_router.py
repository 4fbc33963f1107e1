"""The simulated gateway's cache_aware policy against hand-computed traces of smg 1.13.0's rules (docs/simulator.md,
"The gateway")."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from pearl_sched.sim.router import MAX_TREE_SIZE, LoadReport, Router


def _burst(router: Router, members: list[int], prompt: float, workers: int) -> list[int]:
    """Route each member once, every request staying in flight; the workers chosen, in order."""
    load = dict.fromkeys(range(workers), 0)
    chosen = []
    for index in members:
        worker = router.route(index, prompt, 0.0, sorted(load.items()))
        load[worker] += 1
        chosen.append(worker)
    return chosen


def test_a_grpo_group_stays_together_on_its_first_burst() -> None:
    """The first sibling misses (empty tree) and goes to the least loaded; the others match its prompt fully."""
    members = [0, 1, 2, 3]
    groups = {i: (-1, 1000.0) for i in members}
    assert _burst(Router("cache_aware", groups=groups), members, 1000.0, 4) == [0, 0, 0, 0]
    assert _burst(Router("least_load", groups=groups), members, 1000.0, 4) == [0, 1, 2, 3]


def test_a_hot_holder_spills_to_the_least_loaded_which_becomes_a_holder() -> None:
    """Ten workers: with k siblings in flight on worker 0 the mean is k/10 and the margin max(4, 2 sqrt(k/10)) = 4, so
    worker 0 is hot from k = 5 (5 > 0.5 + 4 and 5 > 0.75): the sixth sibling spills to worker 1, and the seventh and
    eighth go to worker 1, the group prompt's holder that is not hot (worker 0: 5 > 0.7 + 4). smg before 1.10 checked
    the pool instead (max - min > 64) and would have kept all eight on worker 0."""
    members = list(range(8))
    groups = {i: (-1, 1000.0) for i in members}
    assert _burst(Router("cache_aware", groups=groups), members, 1000.0, 10) == [0, 0, 0, 0, 0, 1, 1, 1]


def test_the_spill_margin_is_two_standard_deviations_of_the_mean_below_the_absolute_threshold() -> None:
    """Loads 120 / 40 / 40: mean 66.7, margin min(64, 2 sqrt(66.7)) = 16.3; 120 > 83.0 and 120 > 100: hot, so the
    trajectory's turn leaves worker 0 (with the absolute 64 alone it would stay: 120 < 130.7)."""
    router = Router("cache_aware")
    assert router.route(7, 4000.0, 0.0, [(0, 0), (1, 5), (2, 5)]) == 0
    assert router.route(7, 5000.0, 1.0, [(0, 120), (1, 40), (2, 41)]) == 1
    assert 2 * math.sqrt(200 / 3) < 64
    # 80 / 45 / 45: mean 56.7, margin 15.1; 80 > 71.7 but not above 1.5 x 56.7 = 85: both parts must hold
    router = Router("cache_aware")
    router.route(7, 4000.0, 0.0, [(0, 0), (1, 5), (2, 5)])
    assert router.route(7, 5000.0, 1.0, [(0, 80), (1, 45), (2, 45)]) == 0


def test_a_miss_goes_to_the_least_loaded_worker_not_the_smallest_tree() -> None:
    """Worker 0 holds a 10,000-token prompt, worker 1 nothing; a new trajectory matches nothing and goes to the
    least loaded, worker 0 (smg's old get_smallest_tenant would have picked worker 1)."""
    router = Router("cache_aware")
    assert router.route(1, 10_000.0, 0.0, [(0, 0), (1, 0)]) == 0
    assert router.route(2, 100.0, 1.0, [(0, 0), (1, 3)]) == 0
    assert router.route(3, 100.0, 2.0, [(0, 4), (1, 3)]) == 1


@pytest.mark.parametrize(
    ("held", "prompt", "expected"),
    [
        (480.0, 1600.0, 1),  # 480 / 1600 = 0.3: not above the threshold, a miss to the least loaded
        (480.0, 1599.0, 0),  # 480 / 1599 > 0.3: the holder
        (495.0, 1600.0, 1),  # 495 tokens are 30 whole pages, 480: still 0.3
        (496.0, 1600.0, 0),  # 31 pages, 496 / 1600 = 0.31
    ],
)
def test_the_match_rate_counts_whole_pages_and_must_exceed_the_threshold(
    held: float, prompt: float, expected: int
) -> None:
    router = Router("cache_aware")
    assert router.route(5, held, 0.0, [(0, 0), (1, 1)]) == 0
    assert router.route(5, prompt, 1.0, [(0, 2), (1, 1)]) == expected


def test_a_second_turn_matches_the_group_prompt_and_a_third_its_own() -> None:
    """Siblings on workers 0 and 1 make both tenants of the group prompt: a member's second turn (whose longest
    match is that prompt) goes to the less loaded tenant even though its first turn was on the other; its third turn
    matches its own second prompt, held by one worker only."""
    groups = {i: (-1, 1000.0) for i in range(8)}
    router = Router("cache_aware", groups=groups)
    assert _burst(router, list(range(8)), 1000.0, 10) == [0, 0, 0, 0, 0, 1, 1, 1]
    assert router.route(0, 1500.0, 10.0, [(0, 3), (1, 1)] + [(w, 0) for w in range(2, 10)]) == 1
    assert router.route(0, 2000.0, 20.0, [(0, 0), (1, 2)] + [(w, 0) for w in range(2, 10)]) == 1


def test_a_placement_stays_routable_without_a_ttl_and_a_departed_worker_is_purged() -> None:
    router = Router("cache_aware")
    assert router.route(4, 1000.0, 0.0, [(0, 0), (1, 0)]) == 0
    assert router.route(4, 1200.0, 10_000.0, [(0, 1), (1, 0)]) == 0  # smg's tree has no TTL (cache-ttl: hash index)
    assert router.route(4, 1400.0, 10_001.0, [(1, 0), (2, 0)]) == 1  # worker 0 left: no holder, a miss


def test_an_oversized_tree_evicts_its_least_recently_used_prompts_at_the_eviction_interval() -> None:
    """50M + 30M tokens exceed the 67,108,864 bound: at the first eviction (60 s) the older 50M go, and the
    trajectory that held them misses."""
    router = Router("cache_aware")
    assert router.route(1, 50e6, 0.0, [(0, 0), (1, 0)]) == 0
    assert router.route(2, 30e6, 1.0, [(0, 1), (1, 0)]) == 1
    assert router.tree_tokens == 80e6 > MAX_TREE_SIZE
    assert router.route(1, 50e6 + 100, 30.0, [(0, 1), (1, 0)]) == 0  # before the interval: still held
    assert router.route(2, 30e6 + 100, 31.0, [(0, 1), (1, 0)]) == 1
    assert router.route(1, 50e6 + 200, 61.0, [(0, 1), (1, 0)]) == 1  # after it: trajectory 1's, the least recent, go
    assert router.route(1, 50e6 + 300, 62.0, [(0, 0), (1, 5)]) == 1  # re-inserted for worker 1 at 61 s


def test_round_robin_and_least_load_ignore_prefixes() -> None:
    rr = Router("round_robin")
    assert [rr.route(1, 1000.0, t, [(0, 0), (1, 9), (2, 0)]) for t in range(4)] == [0, 1, 2, 0]
    ll = Router("least_load")
    assert [ll.route(1, 1000.0, t, [(0, 2), (1, 1), (2, 1)]) for t in range(2)] == [1, 1]


def _reports(table: dict[int, LoadReport]) -> Callable[[int], LoadReport]:
    return lambda w: table[w]


def test_a_miss_goes_to_the_least_reported_token_work_over_throughput() -> None:
    """Worker 0 reports 3 waiting requests (no token count: 3 x 1024 = 3072 tokens) at 1,000 tok/s: 3.07 s;
    worker 1 reports 6,000 waiting uncached tokens at 4,000 tok/s: 1.5 s; worker 2 nothing waiting but KV usage
    0.9 at 2,000 tok/s: 0.15 x 0.9 / 0.1 = 1.35 s. In-flight counts (0 / 5 / 5) would pick worker 0."""
    table = {
        0: LoadReport(waiting_reqs=3, gen_throughput=1000.0),
        1: LoadReport(waiting_reqs=2, waiting_uncached_tokens=6000.0, gen_throughput=4000.0),
        2: LoadReport(token_usage=0.79, gen_throughput=2000.0),
    }
    # worker 2 at 0.79: 0.15 x 0.79 / 0.21 = 0.564 s, the least
    router = Router("cache_aware")
    assert router.route(1, 2000.0, 0.0, [(0, 0), (1, 5), (2, 5)], _reports(table)) == 2
    # the tokens routed since the poll count: 2,000 more on worker 2 (1.0 + 0.564 s) vs worker 1's 1.5 s
    assert router.route(2, 100.0, 1.0, [(0, 0), (1, 5), (2, 6)], _reports(table)) == 1
    # and with no reports the in-flight count decides, as before
    assert Router("cache_aware").route(1, 2000.0, 0.0, [(0, 0), (1, 5), (2, 5)]) == 0


def test_running_requests_count_as_1024_tokens_each() -> None:
    """smg 1.13.0 as probed (docs/simulator.md, "The load reports"): worker 0 reports 3 running requests at
    1,000 tok/s, 3 x 1024 / 1000 = 3.072 s; worker 1 reports 2,000 waiting uncached tokens at 1,000 tok/s,
    2.0 s. The miss goes to worker 1, which a scorer without the running term would not choose (0 < 2.0 s).
    Both terms add: 3 running and 2,000 uncached tokens score 5.072 s, beaten by 4 running (4.096 s)."""
    table = {
        0: LoadReport(gen_throughput=1000.0, running_reqs=3),
        1: LoadReport(waiting_reqs=1, waiting_uncached_tokens=2000.0, gen_throughput=1000.0),
    }
    assert Router("cache_aware").route(1, 100.0, 0.0, [(0, 3), (1, 1)], _reports(table)) == 1
    table = {
        0: LoadReport(waiting_reqs=1, waiting_uncached_tokens=2000.0, gen_throughput=1000.0, running_reqs=3),
        1: LoadReport(gen_throughput=1000.0, running_reqs=4),
    }
    router = Router("cache_aware")
    assert router.route(1, 100.0, 0.0, [(0, 4), (1, 4)], _reports(table)) == 1
    # worker 1 with 100 tokens routed since the poll: 4.196 s < 5.072; with 1,100: 5.196 s > 5.072, so worker 0
    assert router.route(2, 1000.0, 1.0, [(0, 4), (1, 5)], _reports(table)) == 1
    assert router.route(3, 100.0, 2.0, [(0, 4), (1, 6)], _reports(table)) == 0


def test_reports_are_stale_between_polls_every_ten_seconds() -> None:
    """The snapshot taken at 0 s holds until 10 s although worker 1's queue grew at 5 s; the since-poll tally
    (1,000 tokens at the default 2,000 tok/s: 0.5 s each) water-fills in between and restarts at the poll."""
    table = {0: LoadReport(), 1: LoadReport(waiting_reqs=1)}  # 1024 / 2000 = 0.512 s on worker 1
    router = Router("cache_aware")
    live = [(0, 0), (1, 0)]
    assert router.route(1, 1000.0, 0.0, live, _reports(table)) == 0  # 0 < 0.512
    assert router.route(2, 1000.0, 1.0, live, _reports(table)) == 0  # 0.5 < 0.512
    table[1] = LoadReport(waiting_reqs=20)  # worker 1's queue grows at 5 s: smg does not know yet
    assert router.route(3, 1000.0, 5.0, live, _reports(table)) == 1  # 0.512 < 1.0
    assert router.route(4, 1000.0, 10.0, live, _reports(table)) == 0  # polled: 0 < 20 x 1024 / 2000


def test_an_overloaded_worker_is_left_out_while_another_is_under_both_thresholds() -> None:
    """Worker 0's last report has 8 waiting requests (the threshold, inclusive), worker 1 KV usage 0.8: both are
    vetoed, even for the trajectory whose prefix worker 0 holds; worker 2 gets everything. Under 8 and 0.8 they
    are back at the next poll; with every worker over, all stay eligible (no shedding by default)."""
    table = {0: LoadReport(), 1: LoadReport(), 2: LoadReport(waiting_reqs=7, token_usage=0.79)}
    router = Router("cache_aware", overload_protection=True)
    assert router.route(5, 4000.0, 0.0, [(0, 0), (1, 1), (2, 1)], _reports(table)) == 0  # the holder
    table[0], table[1] = LoadReport(waiting_reqs=8), LoadReport(token_usage=0.8)
    assert router.route(5, 5000.0, 9.0, [(0, 1), (1, 1), (2, 1)], _reports(table)) == 0  # not polled yet
    assert router.route(5, 6000.0, 10.0, [(0, 1), (1, 1), (2, 1)], _reports(table)) == 2  # vetoed: a miss to 2
    assert router.route(6, 100.0, 11.0, [(0, 0), (1, 0), (2, 9)], _reports(table)) == 2
    table[0] = LoadReport(waiting_reqs=7)
    assert router.route(7, 100.0, 20.0, [(0, 0), (1, 0), (2, 9)], _reports(table)) == 0
    every = {w: LoadReport(waiting_reqs=9) for w in range(3)}
    router = Router("cache_aware", overload_protection=True)
    assert router.route(8, 100.0, 0.0, [(0, 3), (1, 1), (2, 2)], _reports(every)) == 0  # 9 x 1024: tie, index


def test_without_overload_protection_the_holder_keeps_its_trajectory() -> None:
    """The same reports as above on a gateway launched as pearl_sched's adapters launch it
    (``--disable-worker-overload-protection``, the simulator's default): worker 0 reports 8 waiting requests, yet
    trajectory 5's next turn goes to it, the holder of its prefix (one candidate, not hot); a miss ranks every
    worker by expected wait, vetoed or not (worker 1 at 0.8 KV: 0.15 x 0.8 / 0.2 = 0.6 s, less than
    (8 x 1024 + 6,000 routed since the poll) / 2000 = 7.1 s on worker 0 and 7 x 1024 / 2000 + 0.56 = 4.1 s on
    worker 2)."""
    table = {0: LoadReport(), 1: LoadReport(), 2: LoadReport(waiting_reqs=7, token_usage=0.79)}
    router = Router("cache_aware")
    assert not router.overload_protection
    assert router.route(5, 4000.0, 0.0, [(0, 0), (1, 1), (2, 1)], _reports(table)) == 0
    table[0], table[1] = LoadReport(waiting_reqs=8), LoadReport(token_usage=0.8)
    assert router.route(5, 6000.0, 10.0, [(0, 1), (1, 1), (2, 1)], _reports(table)) == 0  # not vetoed: the holder
    assert router.route(6, 100.0, 11.0, [(0, 0), (1, 0), (2, 9)], _reports(table)) == 1


def test_the_simulated_gateway_is_launched_as_the_adapters_launch_smg() -> None:
    """The simulator's overload-protection default is the adapters' Gateway's, and the argv says so to smg."""
    from pearl_sched.adapters.gateway import Gateway
    from pearl_sched.sim.router import GATEWAY_OVERLOAD_PROTECTION

    default = Gateway(port=30000, binary="smg", api_key=None)
    assert default.overload_protection is GATEWAY_OVERLOAD_PROTECTION
    assert ("--disable-worker-overload-protection" in default.argv()) is not GATEWAY_OVERLOAD_PROTECTION
    assert default.policy == Router().policy == "cache_aware"
    kept = Gateway(port=30000, binary="smg", api_key=None, overload_protection=True)
    assert "--disable-worker-overload-protection" not in kept.argv()


def test_a_joining_worker_gets_one_miss_in_four_during_its_first_minute() -> None:
    """Workers 0 and 1 are older than 60 s; worker 2 joins at 100 s and is the most loaded, so the least-wait
    rule never picks it: misses 4 and 8 (every fourth, counted from the router's first) go to it until 160 s."""
    router = Router("cache_aware")
    for i in range(3):  # misses 1-3 at 0 s (workers 0 and 1 warming too, but the least loaded is among them)
        router.route(100 + i, 100.0, 0.0, [(0, 0), (1, 0)])
    live = [(0, 0), (1, 0), (2, 9)]
    chosen = [router.route(i, 100.0, 100.0 + i, live) for i in range(5)]
    assert chosen == [2, 0, 0, 0, 2]  # misses 4 and 8
    assert [router.route(10 + i, 100.0, 160.0 + i, live) for i in range(4)] == [0, 0, 0, 0]  # miss 12: too old


def test_equal_scores_are_a_uniform_random_tie_reproducible_from_the_seed() -> None:
    """smg's ``select_min_expected_wait`` picks uniformly among equal scores (its own test: "equal-score ties must
    spread across all workers"). Four idle workers, no reports: every miss is a four-way tie on in-flight 0 (each
    request leaves at once). A seeded router spreads 4,000 misses near 1,000 a worker, the same seed repeats the
    sequence, another seed gives another; without a seed every tie goes to worker 0."""

    def misses(router: Router) -> list[int]:
        return [router.route(i, 100.0, 0.0, [(w, 0) for w in range(4)]) for i in range(4000)]

    seeded = misses(Router("cache_aware", tie_seed=7))
    counts = [seeded.count(w) for w in range(4)]
    assert all(900 < c < 1100 for c in counts), counts  # binomial(4000, 1/4): sd 27, so ±100 is ±3.6 sd
    assert misses(Router("cache_aware", tie_seed=7)) == seeded
    assert misses(Router("cache_aware", tie_seed=8)) != seeded
    assert set(misses(Router("cache_aware"))) == {0}


def test_only_exact_ties_are_random() -> None:
    """A strictly lower score always wins, seeded or not: worker 2 reports less token work than the others."""
    reports = {w: LoadReport(waiting_reqs=0 if w == 2 else 1) for w in range(4)}
    for seed in range(20):
        router = Router("cache_aware", tie_seed=seed)
        assert router.route(seed, 100.0, 0.0, [(w, 0) for w in range(4)], reports.__getitem__) == 2


def test_least_load_breaks_in_flight_ties_at_random() -> None:
    """``least_load`` ranks by in-flight count: workers 1 and 3 tie at 2, below 0 and 2; both are chosen over seeds,
    never 0 or 2."""
    chosen = {
        Router("least_load", tie_seed=seed).route(0, 100.0, 0.0, [(0, 5), (1, 2), (2, 3), (3, 2)]) for seed in range(40)
    }
    assert chosen == {1, 3}
