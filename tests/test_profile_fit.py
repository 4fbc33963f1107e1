"""Profile ingest and component models: real rows, malformed input, scikit-learn conformance, persistence."""

from __future__ import annotations

import json
import math
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.utils.estimator_checks import parametrize_with_checks
from typer.testing import CliRunner

from pearl_sched.cli import app
from pearl_sched.profiles.components import (
    ExtrapolationWarning,
    MonotoneStepRegressor,
    TableInterpolator,
    from_json,
    to_json,
)
from pearl_sched.profiles.dataset import ProfileDataset, ProfileFormatError
from pearl_sched.profiles.fit import FEATURES, ProfileModels, _features, fit_component, monotone_outliers
from pearl_sched.profiles.readers import (
    read_any,
    read_dynamo,
    read_prometheus_scrapes,
    read_sglang_requests,
    read_splitwise,
)

from .builders import DATA

SPLITWISE = DATA / "splitwise-sim" / "perf_model.csv"
DYNAMO = DATA / "dynamo-h200-llama31-8b" / "H200_TP1P_TP1D"


@parametrize_with_checks([MonotoneStepRegressor(), TableInterpolator()])
def test_sklearn_conformance(estimator: object, check: object) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)  # the checks predict far outside the data on purpose
        check(estimator)  # type: ignore[operator]


@pytest.mark.needs_data
def test_splitwise_rows_are_normalised_to_seconds() -> None:
    data = read_splitwise(SPLITWISE)
    assert len(data) == 2 * 1260 and not data.dropped
    first = data.select(target="prefill")
    # First CSV row: llama2-70b on a100-80gb, TP2, 512-token prompt, batch 1, prompt_time 196.25 ms.
    assert first["model"][0] == "llama2-70b" and first["tp"][0] == 2
    assert first["value_s"][0] == pytest.approx(0.1962532191537321)
    decode = data.select(target="decode_step")
    assert decode["context_tokens"][0] == pytest.approx(512 + 128 / 2)


@pytest.mark.needs_data
def test_dynamo_csv_and_npz_readers_agree(tmp_path: Path) -> None:
    from_csv = read_dynamo(DYNAMO)
    for sub in ("selected_prefill_interpolation", "selected_decode_interpolation"):
        shutil.copytree(DYNAMO / sub, tmp_path / sub)
    from_npz = read_dynamo(tmp_path)
    assert len(from_csv) == len(from_npz) == 17 + 41
    for column in ("value_s", "batch_size", "context_tokens"):
        assert np.allclose(np.sort(from_csv[column]), np.sort(from_npz[column]))


def _write_jsonl(path: Path, objects: list[object]) -> Path:
    path.write_text("\n".join(json.dumps(o) for o in objects) + "\n")
    return path


def test_sglang_request_log_gives_ttft_and_itl(tmp_path: Path) -> None:
    log = _write_jsonl(
        tmp_path / "requests.jsonl",
        [
            {
                "text": "…",
                "meta_info": {
                    "prompt_tokens": 1200,
                    "completion_tokens": 101,
                    "cached_tokens": 1000,
                    "e2e_latency": 2.5,
                    "queue_time": 0.1,
                    "first_token_latency": 0.5,
                },
            },
            {"prompt_tokens": 300, "completion_tokens": 1, "e2e_latency": 0.2, "first_token_latency": 0.2},
            {"prompt_tokens": 300, "completion_tokens": 10, "e2e_latency": 0.9},
        ],
    )
    data = read_sglang_requests(log, gpu_type="h200", model="qwen3-8b", tp=2)
    ttft = data.select(target="ttft")
    assert list(ttft["value_s"]) == pytest.approx([0.4, 0.2])  # queueing removed
    assert list(ttft["tokens"]) == [200.0, 300.0]
    itl = data.select(target="itl")
    assert list(itl["value_s"]) == pytest.approx([(2.5 - 0.5) / 100])
    assert data.dropped["ttft: no first_token_latency"] == 1


def test_sglang_log_errors_name_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt_tokens": 3, "completion_tokens": 2, "e2e_latency": 1}\n{oops\n')
    with pytest.raises(ProfileFormatError, match=r"bad.jsonl:2: not JSON"):
        read_sglang_requests(bad, gpu_type="x", model="m", tp=1)
    bad.write_text('{"prompt_tokens": "many", "completion_tokens": 2, "e2e_latency": 1}\n')
    with pytest.raises(ProfileFormatError, match=r"bad.jsonl:1 \[prompt_tokens\]: not a number"):
        read_sglang_requests(bad, gpu_type="x", model="m", tp=1)
    bad.write_text('{"completion_tokens": 2, "e2e_latency": 1}\n')
    with pytest.raises(ProfileFormatError, match=r"\[prompt_tokens\]: missing field"):
        read_sglang_requests(bad, gpu_type="x", model="m", tp=1)


_JSON_VALUES = st.one_of(st.none(), st.floats(), st.text(max_size=5), st.integers())
_LINES = st.one_of(
    st.text(max_size=40),
    st.dictionaries(st.sampled_from(["prompt_tokens", "completion_tokens", "e2e_latency", "x"]), _JSON_VALUES),
)


@given(st.lists(_LINES, max_size=5))
def test_garbage_request_logs_fail_cleanly(lines: list[object]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "garbage.jsonl"
        path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines).replace("\r", "") + "\n")
        try:
            data = read_sglang_requests(path, gpu_type="x", model="m", tp=1)
        except ProfileFormatError:
            return
        assert np.all(np.isfinite(data["value_s"])) and np.all(data["value_s"] >= 0)


@given(
    st.lists(st.lists(st.one_of(st.text(max_size=6), st.floats(), st.integers()), min_size=1, max_size=9), max_size=6)
)
def test_garbage_splitwise_csv_fails_cleanly(cells: list[list[object]]) -> None:
    import tempfile

    header = (
        "model,hardware,prompt_size,batch_size,token_size,peak_power,average_power,"
        "prompt_time,token_time,e2e_time,tensor_parallel"
    )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "perf.csv"
        body = "\n".join(
            ",".join(str(c).replace(",", ";").replace("\n", " ").replace("\r", " ").replace('"', "") for c in row)
            for row in cells
        )
        path.write_text(header + "\n" + body + "\n")
        try:
            data = read_splitwise(path)
        except ProfileFormatError:
            return
        assert np.all(np.isfinite(data["value_s"])) and np.all(data["value_s"] >= 0)


def _scrape(
    ttft_sum: float,
    ttft_count: float,
    itl_sum: float,
    itl_count: float,
    running: float,
    prompt: float,
    generated: float,
    finished: float,
) -> str:
    return f"""# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{model_name="m"}} {running}
# TYPE sglang:prompt_tokens counter
sglang:prompt_tokens_total{{model_name="m"}} {prompt}
# TYPE sglang:generation_tokens counter
sglang:generation_tokens_total{{model_name="m"}} {generated}
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{{le="+Inf",model_name="m"}} {ttft_count}
sglang:time_to_first_token_seconds_sum{{model_name="m"}} {ttft_sum}
sglang:time_to_first_token_seconds_count{{model_name="m"}} {ttft_count}
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{{le="+Inf",model_name="m"}} {itl_count}
sglang:inter_token_latency_seconds_sum{{model_name="m"}} {itl_sum}
sglang:inter_token_latency_seconds_count{{model_name="m"}} {itl_count}
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_bucket{{le="+Inf",model_name="m"}} {finished}
sglang:e2e_request_latency_seconds_sum{{model_name="m"}} {finished * 3}
sglang:e2e_request_latency_seconds_count{{model_name="m"}} {finished}
"""


def test_prometheus_scrapes_give_window_means(tmp_path: Path) -> None:
    (tmp_path / "000.prom").write_text(_scrape(1.0, 10, 2.0, 100, 30, 10_000, 1_000, 5))
    (tmp_path / "001.prom").write_text(_scrape(3.0, 20, 6.0, 300, 50, 30_000, 5_000, 15))
    (tmp_path / "002.prom").write_text(_scrape(0.1, 1, 0.1, 5, 10, 100, 10, 1))  # server restarted
    data = read_any(tmp_path, gpu_type="h200", model="m", tp=1)
    ttft, itl = data.select(target="ttft"), data.select(target="itl")
    assert list(ttft["value_s"]) == pytest.approx([0.2])  # (3 − 1) / (20 − 10)
    assert list(itl["value_s"]) == pytest.approx([0.02])  # (6 − 2) / (300 − 100)
    assert list(itl["batch_size"]) == [40.0]
    assert list(itl["context_tokens"]) == pytest.approx([2000 + 400 / 2])  # 20k prompt tokens / 10 requests
    assert data.dropped["window: counter reset"] == 1
    (tmp_path / "003.prom").write_text("this is { not prometheus\n")
    with pytest.raises(ProfileFormatError, match=r"003\.prom"):
        read_prometheus_scrapes(sorted(tmp_path.glob("*.prom")), gpu_type="h200", model="m", tp=1)


def test_nan_and_negative_rows_are_dropped_and_counted() -> None:
    records = [
        {
            "source": "s",
            "gpu_type": "g",
            "model": "m",
            "tp": 1,
            "target": "prefill",
            "tokens": 10,
            "batch_size": 1,
            "value_s": 0.1,
        },
        {
            "source": "s",
            "gpu_type": "g",
            "model": "m",
            "tp": 1,
            "target": "prefill",
            "tokens": 10,
            "batch_size": 1,
            "value_s": math.nan,
        },
        {
            "source": "s",
            "gpu_type": "g",
            "model": "m",
            "tp": 1,
            "target": "prefill",
            "tokens": -5,
            "batch_size": 1,
            "value_s": 0.1,
        },
    ]
    data = ProfileDataset.from_records(records)
    assert len(data) == 1
    assert data.dropped == {"prefill: bad value_s": 1, "prefill: bad tokens": 1}


@pytest.mark.needs_data
def test_failed_measurement_is_flagged_as_anomalous() -> None:
    data = read_splitwise(SPLITWISE).select(target="prefill", model="llama2-70b", gpu_type="a100-80gb")
    X, y = _features(data, "prefill")
    flagged = monotone_outliers(X, y, FEATURES["prefill"][0])
    # TP2, 512-token prompts, batch 64 measured 0.80 s while batch 32 took 6.6 s: a failed run.
    configs = {tuple(row) for row in X[flagged]}
    assert configs == {(512.0, 0.0, 64.0, 2.0)}


@pytest.mark.needs_data
@pytest.mark.parametrize("target", ["prefill", "decode_step"])
def test_fits_are_monotone_in_load(target: str) -> None:
    data = read_splitwise(SPLITWISE).select(model="llama2-70b", gpu_type="h100-80gb")
    fitted = fit_component(data, target, kind="monotone")  # type: ignore[arg-type]
    grid = np.linspace(1, 64, 50)
    if target == "prefill":
        X = np.column_stack([np.full(50, 1024.0), np.zeros(50), grid, np.full(50, 4.0)])
    else:
        X = np.column_stack([grid, np.full(50, 2048.0), np.full(50, 4.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        predicted = fitted.predict(X)
    assert np.all(np.diff(predicted) >= -1e-12) and np.all(predicted >= 0)


@pytest.mark.needs_data
def test_json_round_trip_predicts_identically(tmp_path: Path) -> None:
    data = read_splitwise(SPLITWISE).select(model="bloom-176b", gpu_type="h100-80gb")
    for kind in ("monotone", "table"):
        fitted = fit_component(data, "decode_step", kind=kind)  # type: ignore[arg-type]
        X = _features(data.select(target="decode_step"), "decode_step")[0]
        again = from_json(to_json(fitted.estimator))
        assert np.array_equal(again.predict(X), fitted.predict(X))
    models = ProfileModels({("splitwise", "h100-80gb", "bloom-176b", "decode_step"): fitted})
    path = tmp_path / "models.json"
    models.save(path)
    loaded = ProfileModels.load(path)
    (key,) = loaded.components
    assert loaded.components[key].report == fitted.report
    with pytest.raises(ValueError, match="not a pearl_sched profile-models file"):
        ProfileModels.from_json('{"format": "other"}')


def test_prediction_outside_the_fitted_box_warns() -> None:
    model = MonotoneStepRegressor("decode").fit([[1, 100, 1], [8, 100, 1], [16, 400, 1]], [0.01, 0.02, 0.04])
    with pytest.warns(ExtrapolationWarning, match="1 of 1 predictions extrapolate"):
        model.predict([[64, 100, 1]])


@pytest.mark.needs_data
def test_fit_cli_writes_models_and_plots(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "fit",
            str(DYNAMO),
            "--gpu-type",
            "h200",
            "--model",
            "llama-3.1-8b",
            "-o",
            str(tmp_path / "m.json"),
            "--plot",
            str(tmp_path / "plots"),
        ],
    )
    assert result.exit_code == 0, result.output
    models = ProfileModels.load(tmp_path / "m.json")
    assert {k[3] for k in models.components} == {"ttft", "itl"}
    assert len(list((tmp_path / "plots").glob("*.png"))) == 2
    bad = CliRunner().invoke(app, ["fit", str(tmp_path / "nothing.csv"), "-o", str(tmp_path / "x.json")])
    assert bad.exit_code == 2 and "cannot read" in bad.output
