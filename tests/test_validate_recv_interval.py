"""bench/validate.py: the ``--scheduler-recv-interval`` of the recorded InferenceX launch scripts."""

from __future__ import annotations

import pytest

pytest.importorskip("aiconfigurator_core", reason="the aic extra (aiconfigurator-core) is not installed")

from bench import validate


def _agg_launches() -> list[validate.LaunchFlags]:
    return [
        launch
        for roles in validate.RECORDED_LAUNCHES.values()
        for (role, _), launches in roles.items()
        if role == "agg"
        for launch in launches
    ]


def test_every_interval_belongs_to_a_recorded_launch() -> None:
    scripts = {launch.script for roles in validate.RECORDED_LAUNCHES.values() for ls in roles.values() for launch in ls}
    assert set(validate.SCHEDULER_RECV_INTERVALS) <= scripts  # no entry for a script nothing launches


def test_the_gb200_low_latency_pd_decode_engines_receive_every_10_iterations() -> None:
    # srt-slurm recipes/gb200-fp8/{1k1k,8k1k}/low-latency.yaml and dynamo's gb200-fp8/disagg/1k1k-low-latency.sh set
    # --scheduler-recv-interval 10 on both engines; the replay applies it to the decode engine (a prefill engine's
    # every forward weighs 1000, so it receives every iteration anyway). The B200 STP recipes set none.
    rows = {r["id"]: r for r in validate.sglang_silicon_rows()}
    picked = [
        rows[i]
        for i in (
            "dsr1_gb200_sglang_fp8_disagg_1024x1024_c4_cfg502",
            "dsr1_gb200_sglang_fp8_disagg_8192x1024_c8_cfg536",
            "dsr1_b200_sglang_fp8_disagg_1024x1024_c4_cfg455",
        )
    ]
    replayed, skipped = validate.disagg_rows(picked, {})
    assert not skipped and len(replayed) == 3
    intervals = {d.row.row_id: tuple(role.scheduler_recv_interval for role in d.roles or ()) for d in replayed}
    assert intervals == {
        "dsr1_gb200_sglang_fp8_disagg_1024x1024_c4_cfg502": (1, 10),
        "dsr1_gb200_sglang_fp8_disagg_8192x1024_c8_cfg536": (1, 10),
        "dsr1_b200_sglang_fp8_disagg_1024x1024_c4_cfg455": (1, 1),
    }


def test_intervals_follow_the_scripts_concurrency_rule() -> None:
    # `if [[ $CONC -ge 16 ]]; then SCHEDULER_RECV_INTERVAL=30; else SCHEDULER_RECV_INTERVAL=10; fi`
    fp4_b200 = next(launch for launch in _agg_launches() if launch.script == validate._DSR1_FP4_B200_SH)
    assert [validate.scheduler_recv_interval(fp4_b200, c) for c in (4, 8, 15, 16, 256)] == [10, 10, 10, 30, 30]
    # dsr1_fp8_b200.sh's TP=4 branch sets 10 at every C; dsr1_fp8_h200.sh sets none (SGLang's default, 1)
    tp4 = next(launch for launch in _agg_launches() if launch.script == validate._DSR1_FP8_B200_SH)
    assert validate.scheduler_recv_interval(tp4, 32) == 10
    h200 = next(launch for launch in _agg_launches() if launch.script == validate._DSR1_FP8_H200_SH)
    assert validate.scheduler_recv_interval(h200, 64) == 1
    assert validate.scheduler_recv_interval(None, 64) == 1  # no recorded launch: SGLang's default
