"""Bad input to the profile readers and the scenario loader: one ``ProfileFormatError`` / ``ScenarioError`` line.

The readers are called directly on damaged npz archives, generated CSV and JSON-lines text, generated
Prometheus scrapes, FIFOs and oversize files; each either reads the input or raises the documented error
whose message is one line naming the file — never another exception, a hang, or the file's contents.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl_sched import input_files
from pearl_sched.profiles.dataset import ProfileFormatError
from pearl_sched.profiles.dynamo import fit_dynamo_profile
from pearl_sched.profiles.fit import ProfileModels
from pearl_sched.profiles.readers import read_any, read_dynamo, read_prometheus_scrapes, read_sglang_requests
from pearl_sched.shared_data import default_data
from pearl_sched.sim.scenario import SHIPPED, ScenarioError, load_scenario

SECRET = "SECRET-4c1d-do-not-echo"
SCENARIO = json.loads((SHIPPED / "e2e.json").read_text())


def one_line(error: Exception, path: Path) -> str:
    message = str(error)
    assert "\n" not in message and message.startswith(str(path)), message
    assert SECRET not in message
    return message


def npz_bytes(**arrays: object) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def dynamo_npz(tmp_path: Path, prefill: bytes, decode: bytes) -> Path:
    for name, content in (("selected_prefill_interpolation", prefill), ("selected_decode_interpolation", decode)):
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "raw_data.npz").write_bytes(content)
    return tmp_path


GOOD_PREFILL = npz_bytes(prefill_isl=np.array([100.0, 1000, 4000]), prefill_ttft=np.array([20.0, 40, 120]))
GOOD_DECODE = npz_bytes(
    x_kv_usage=np.array([0.1, 0.5, 0.9]),
    y_context_length=np.array([1000.0, 2000, 4000]),
    z_itl=np.array([6.0, 8, 12]),
    max_kv_tokens=np.array([100000.0]),
)


def test_good_npz_reads(tmp_path: Path) -> None:
    assert len(read_dynamo(dynamo_npz(tmp_path, GOOD_PREFILL, GOOD_DECODE))) == 6


@pytest.mark.parametrize(
    ("decode", "problem"),
    [
        (GOOD_DECODE[: len(GOOD_DECODE) // 2], "truncated or damaged"),
        (b"PK\x03\x04" + b"\x00" * 40, "truncated or damaged"),
        (b"not an archive at all", "not a numeric npz"),
        (
            npz_bytes(x_kv_usage=[0.1, 0.5], y_context_length=[1.0, 2, 3], z_itl=[1.0, 2], max_kv_tokens=[1.0]),
            "lengths",
        ),
        (npz_bytes(x_kv_usage=[0.1], y_context_length=[1.0], z_itl=[1.0], max_kv_tokens=np.array([])), "empty"),
        (npz_bytes(x_kv_usage=[0.1], y_context_length=[1.0]), "missing arrays"),
        (npz_bytes(x_kv_usage=np.array([SECRET]), y_context_length=[1.0], z_itl=[1.0], max_kv_tokens=[1.0]), "numeric"),
        (npz_bytes(x_kv_usage=np.ones((2, 2)), y_context_length=[1.0], z_itl=[1.0], max_kv_tokens=[1.0]), "shape"),
    ],
)
def test_damaged_npz_is_one_line(tmp_path: Path, decode: bytes, problem: str) -> None:
    directory = dynamo_npz(tmp_path, GOOD_PREFILL, decode)
    with pytest.raises(ProfileFormatError) as caught:
        read_dynamo(directory)
    assert problem in one_line(caught.value, directory / "selected_decode_interpolation" / "raw_data.npz")


@settings(max_examples=40)
@given(cut=st.integers(min_value=0, max_value=len(GOOD_DECODE) - 1), flip=st.integers(0, 255))
def test_any_truncated_or_flipped_npz_is_one_line(
    tmp_path_factory: pytest.TempPathFactory, cut: int, flip: int
) -> None:
    damaged = bytearray(GOOD_DECODE[:cut])
    if damaged:
        damaged[flip % len(damaged)] ^= 0xFF
    directory = dynamo_npz(tmp_path_factory.mktemp("npz"), GOOD_PREFILL, bytes(damaged))
    with pytest.raises(ProfileFormatError) as caught:
        read_dynamo(directory)
    one_line(caught.value, directory)


def test_fifo_and_device_profiles_are_refused_without_blocking(tmp_path: Path) -> None:
    for name in ("log.jsonl", "perf.csv"):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        with pytest.raises(ProfileFormatError, match="FIFO"):
            read_any(fifo)
    scrapes = tmp_path / "scrapes"
    scrapes.mkdir()
    os.mkfifo(scrapes / "0.prom")
    with pytest.raises(ProfileFormatError, match="FIFO"):
        read_any(scrapes)
    with pytest.raises(ProfileFormatError, match="character device"):
        read_sglang_requests("/dev/zero", gpu_type="h200", model="m", tp=1)


def test_profile_size_limit_is_stated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"prompt_tokens": 1, "completion_tokens": 2, "e2e_latency": 1.0}\n' * 100)
    monkeypatch.setattr("pearl_sched.profiles.readers.MAX_PROFILE_BYTES", 2**20 // 2**10)
    with pytest.raises(ProfileFormatError, match="over the 1024 bytes limit"):
        read_sglang_requests(path, gpu_type="h200", model="m", tp=1)


def test_read_bytes_refuses_one_byte_over_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert input_files.read_bytes(path, limit_bytes=10) == b"x" * 10
    with pytest.raises(input_files.InputFileError, match="over the 9 bytes limit"):
        input_files.read_bytes(path, limit_bytes=9)


CSV_HEADER = "model,hardware,prompt_size,batch_size,token_size,prompt_time,token_time,tensor_parallel\n"


@settings(max_examples=60)
@given(body=st.text(alphabet=st.sampled_from(list('0123456789.,e-"\n\r\x00 ab')), max_size=300))
def test_generated_csv_reads_or_is_one_line(tmp_path_factory: pytest.TempPathFactory, body: str) -> None:
    path = tmp_path_factory.mktemp("csv") / "perf.csv"
    path.write_text(CSV_HEADER + body, newline="")
    try:
        data = read_any(path)
    except ProfileFormatError as error:
        one_line(error, path)
    else:
        assert np.all(np.isfinite(data["value_s"].astype(float)))


JSON_LINE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
REQUEST_KEYS = ("prompt_tokens", "completion_tokens", "cached_tokens", "e2e_latency", "queue_time")


@settings(max_examples=60)
@given(
    records=st.lists(
        st.dictionaries(st.sampled_from([*REQUEST_KEYS, "first_token_latency", "meta_info"]), JSON_LINE, max_size=7)
        | JSON_LINE,
        max_size=4,
    )
)
def test_generated_request_logs_read_or_are_one_line(
    tmp_path_factory: pytest.TempPathFactory, records: list[object]
) -> None:
    path = tmp_path_factory.mktemp("jsonl") / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    try:
        read_sglang_requests(path, gpu_type="h200", model="m", tp=1)
    except ProfileFormatError as error:
        one_line(error, path)


@settings(max_examples=40)
@given(text=st.text(max_size=200))
def test_generated_scrapes_read_or_are_one_line(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    directory = tmp_path_factory.mktemp("scrapes")
    good = "sglang:time_to_first_token_seconds_sum 1\nsglang:time_to_first_token_seconds_count 1\n"
    (directory / "0.prom").write_text(good + "sglang:inter_token_latency_seconds_sum 1\n")
    (directory / "1.prom").write_text(text)
    try:
        read_prometheus_scrapes(sorted(directory.glob("*.prom")), gpu_type="h200", model="m", tp=1)
    except ProfileFormatError as error:
        one_line(error, directory)


SCENARIO_LEAVES = [k for k, v in SCENARIO.items() if not isinstance(v, list | dict)]


@settings(max_examples=40)
@given(
    key=st.sampled_from([*SCENARIO_LEAVES, "segments", "variants"]),
    value=st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(),
        st.text(max_size=12),
        st.sampled_from(["..", "../x", "/etc/passwd", "a/b", "e2e", 10**400]),
        st.lists(st.dictionaries(st.sampled_from(["name", "batch_prompts", "duration_s"]), JSON_LINE), max_size=2),
    ),
)
def test_mutated_scenarios_load_or_are_one_line(
    tmp_path_factory: pytest.TempPathFactory, key: str, value: object
) -> None:
    path = tmp_path_factory.mktemp("scenario") / "scenario.json"
    try:
        path.write_text(json.dumps({**SCENARIO, key: value}))
    except ValueError:  # json cannot write this float (never mind: not a file a user could give)
        return
    try:
        scenario = load_scenario(path)
    except ScenarioError as error:
        one_line(error, path)
    else:
        for variant in scenario.expand():
            assert "/" not in variant.name.split("/", 1)[-1] and not variant.name.startswith(".")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"format": "pearl_sched.profile-models/1", "components": [{"key": 1}]}', "a damaged bundle (KeyError)"),
        ('{"format": "pearl_sched.profile-models/1", "components": 3}', "a damaged bundle (TypeError)"),
        ('{"format": "other"}', "not a pearl_sched profile-models file"),
        (f'{{"{SECRET}": ', "not JSON"),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_damaged_model_bundles_are_one_line(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "models.json"
    path.write_text(content)
    with pytest.raises(input_files.InputFileError) as caught:
        ProfileModels.load(path)
    assert problem in one_line(caught.value, path)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(input_files.InputFileError, match="FIFO"):
        ProfileModels.load(fifo)


DYNAMO = default_data() / "dynamo-h200-llama31-8b" / "H200_TP1P_TP1D"


@pytest.mark.needs_data
@pytest.mark.parametrize(("ttft_ms", "problem"), [("0", "zero in every row"), ("1e300", "implausibly large")])
def test_dynamo_fit_refuses_empty_or_absurd_columns(tmp_path: Path, ttft_ms: str, problem: str) -> None:
    for name in ("prefill_ttft_vs_isl.csv", "decode_itl_vs_kvusage_context.csv"):
        (tmp_path / name).write_text((DYNAMO / name).read_text())
    prefill = tmp_path / "prefill_ttft_vs_isl.csv"
    header, *rows = prefill.read_text().splitlines()
    prefill.write_text("\n".join([header, *(",".join([r.split(",")[0], ttft_ms, *r.split(",")[2:]]) for r in rows)]))
    with pytest.raises(ProfileFormatError) as caught:
        fit_dynamo_profile(tmp_path)
    assert problem in one_line(caught.value, prefill)


def test_a_dynamo_profile_missing_one_csv_names_it(tmp_path: Path) -> None:
    (tmp_path / "prefill_ttft_vs_isl.csv").write_text("isl_tokens,ttft_ms\n100,20\n")
    with pytest.raises(ProfileFormatError) as caught:
        read_any(tmp_path)
    assert "a Dynamo profile's CSV dumps come in a pair" in one_line(
        caught.value, tmp_path / "decode_itl_vs_kvusage_context.csv"
    )
