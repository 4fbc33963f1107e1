"""``pearl-sched advise``: the log readers, the Prometheus client (against a fake Prometheus, named as one), the
framework layouts, and the golden output per framework loaded the way each framework loads its configuration.

The logs under tests/data/advise are synthetic stand-ins for a verl run's (one run written in verl's three
formats), not measurements. Regenerate the golden files with ``PEARL_SCHED_REGEN_GOLDEN=1`` and review the diff
against docs/advise.md.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pearl_sched.advisor import AdviceError, AdviceInputs, workload_from_logs
from pearl_sched.cli import app
from pearl_sched.framework_configs import verl_nodes
from pearl_sched.profiles.dataset import ProfileFormatError
from pearl_sched.profiles.prometheus_api import PrometheusQueryError, ServingSummary, query_sglang, sglang_queries
from pearl_sched.profiles.rl_logs import summarise

from .fake_prometheus import FakePrometheus

pytest.importorskip("aiconfigurator_core")  # the step times come from the aic extra (installed in CI by dev)

ROOT = Path(__file__).resolve().parent.parent
DATA = Path("tests/data/advise")  # relative: the golden files name their source as given
GOLDEN = ROOT / "tests" / "golden" / "advise"
runner = CliRunner()

COMMON = ["--model", "qwen3-8b", "--gpu", "h200_sxm", "--generated-tokens-per-turn", "180"]
LOG = str(DATA / "verl_metrics.jsonl")
LENDING = [LOG, "--budget", "8", "--train-gpus", "8", "--tp", "2", "--batch", "512", *COMMON]  # the plan lends
PARTIAL = [LOG, "--budget", "16", "--train-gpus", "8", "--tp", "2", "--batch", "512", *COMMON]  # lends 3 of 4
DEDICATED = [LOG, "--budget", "16", "--tp", "1", "--batch", "128", *COMMON]  # the plan is disaggregated
GOLDEN_CASES = {
    "verl.txt": ["-f", "verl", *LENDING],
    "slime.yaml": ["-f", "slime", *LENDING],
    "roll.yaml": ["-f", "roll", *LENDING],
    "areal.yaml": ["-f", "areal", *LENDING],
    "roll_partial_loan.yaml": ["-f", "roll", *PARTIAL],
    "verl_dedicated.txt": ["-f", "verl", *DEDICATED],
    "slime_dedicated.yaml": ["-f", "slime", *DEDICATED],
    "verl_pd.txt": ["-f", "verl", LOG, "--budget", "12", "--tp", "1", "--batch", "64", *COMMON],
}

BASIC = ["--model", "qwen3-8b", "--gpu", "h200_sxm", "--tp", "2", "--batch", "512"]
SGLANG_RATES = {  # per second over the window, as a fake Prometheus holds them
    "sglang:inter_token_latency_seconds_sum": 3.0,
    "sglang:inter_token_latency_seconds_count": 100.0,  # ITL 30 ms
    "sglang:time_to_first_token_seconds_sum": 0.6,
    "sglang:time_to_first_token_seconds_count": 2.0,
    "sglang:e2e_request_latency_seconds_count": 2.0,
    "sglang:prompt_tokens_total": 6000.0,  # 3000 per request
    "sglang:generation_tokens_total": 400.0,  # 200 per request
    "sglang:cached_tokens_total": 5000.0,  # 2500 per request
}


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def advise(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["advise", *args])
    return result.exit_code, result.stdout, result.stderr


# -- the readers ---------------------------------------------------------------------------------------------
def test_verl_file_console_and_wandb_logs_read_alike() -> None:
    summaries = [summarise(DATA / name) for name in ("verl_metrics.jsonl", "verl_console.log", "wandb_history.csv")]
    kinds = [s.source.split("(")[1].split(",")[0] for s in summaries]
    assert kinds == ["verl-jsonl", "verl-console", "wandb-csv"]
    fields = [s.model_dump(exclude={"source"}) for s in summaries]
    assert fields[0] == fields[1] == fields[2]
    first = summaries[0]
    # medians of steps 2-4 (step 1 is left out as a warm-up): gen 655.9, 641.2, 668.7
    assert first.steps == 3 and first.gen_s == pytest.approx(655.9) and first.step_s == pytest.approx(948.3)
    assert first.training_wait_s == pytest.approx(948.3 - 655.9)
    assert first.llm_turns_max == 8.0  # num_turns/max 17 = user + assistant + 1 → 8 assistant turns
    assert first.llm_turns_mean == pytest.approx(10.8 / 2)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("a.jsonl", '{"step": 1, "data": {"timing_s/gen": 1.0}}\nnot json\n', r"a.jsonl:2: not a JSON object"),
        ("b.jsonl", '{"data": {}}\n', r'b.jsonl:1: not a verl metrics record: no "step"'),
        ("c.jsonl", '{"step": 1, "data": {"timing_s/gen": "fast"}}\n', r"c.jsonl:1 \[timing_s/gen\]: 'fast' is not"),
        ("d.jsonl", '{"step": 1, "data": {"critic/score/mean": 1}}\n', r"no step has timing_s/gen, prompt_length"),
        ("e.log", "Training started\nnothing else\n", r"neither verl metrics .* nor a wandb CSV"),
        ("f.csv", "a,b\n1,2\n", r"f.csv:1: a wandb history export needs a _step column"),
        ("g.jsonl", "", r"g.jsonl"),
    ],
)
def test_bad_logs_are_one_line_and_exit_2(tmp_path: Path, name: str, content: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ProfileFormatError, match=message):
        summarise(path)
    code, out, err = advise(str(path), "-f", "verl", "--budget", "8", *BASIC)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and re.search(message, err)


def test_a_multi_turn_verl_log_alone_does_not_say_the_tokens_per_turn() -> None:
    code, _, err = advise(
        LOG, "-f", "verl", "--budget", "8", "--model", "qwen3-8b", "--gpu", "h200_sxm", "--batch", "64"
    )
    assert code == 2 and "response_length counts tool output too" in err and err.count("\n") == 1


# -- Prometheus over its HTTP API -------------------------------------------------------------------------------
def test_prometheus_figures_come_from_rate_queries_over_the_window() -> None:
    fake = FakePrometheus(SGLANG_RATES, {"sglang:num_running_reqs": 96.0}, {"sglang:num_running_reqs": 4.0}).start()
    try:
        summary = query_sglang(fake.url, window="10m", selector='job="rollout"')
    finally:
        fake.stop()
    assert summary.itl_s == pytest.approx(0.03) and summary.ttft_s == pytest.approx(0.3)
    assert summary.prompt_tokens == 3000 and summary.generation_tokens == 200 and summary.cached_tokens == 2500
    assert summary.appended_tokens == 500 and summary.running_requests == 96 and summary.servers == 4
    assert set(fake.queries) == set(sglang_queries("10m", 'job="rollout"').values())
    assert all('{job="rollout"}' in q for q in fake.queries)
    assert 'sum(rate(sglang:inter_token_latency_seconds_sum{job="rollout"}[10m]))' in fake.queries[0]


def test_prometheus_profile_calibrates_decode_and_gives_per_turn_tokens() -> None:
    fake = FakePrometheus(SGLANG_RATES, {"sglang:num_running_reqs": 96.0}, {"sglang:num_running_reqs": 4.0}).start()
    try:
        code, out, err = advise(LOG, fake.url, "-f", "slime", "--budget", "16", *BASIC)
    finally:
        fake.stop()
    assert code == 0, err
    assert "generated tokens per turn 200.0: Prometheus http://127.0.0.1" in out
    assert "appended tokens per turn 500.0: prompt − cached per request" in out
    scale = re.search(
        r"decode calibrated ×([0-9.]+): measured ITL 30.00 ms at 96 running, (\d+)-token context, "
        r"against the engine's ([0-9.]+) ms",
        out,
    )
    assert scale is not None
    ratio = 30.0 / float(scale.group(3))
    assert float(scale.group(1)) == pytest.approx(min(max(ratio, 0.5), 2.0), rel=1e-3)  # clamped as Dynamo does
    assert int(scale.group(2)) == 3100  # prompt per request + half the generated tokens


def test_prometheus_failures_are_one_line() -> None:
    fake = FakePrometheus({}, {}, {}).start()  # no SGLang series at all
    try:
        code, _, err = advise(fake.url, "-f", "verl", "--budget", "8", "--turns", "4", "--env-time-s", "2", *BASIC)
    finally:
        fake.stop()
    assert code == 2 and "no data for itl_s over the last 5m" in err and err.count("\n") == 1
    slow = FakePrometheus(SGLANG_RATES, delay_s=2.0).start()
    try:
        with pytest.raises(PrometheusQueryError, match="unreachable: ReadTimeout"):
            query_sglang(slow.url, timeout_s=0.3)
    finally:
        slow.stop()
    with pytest.raises(ValueError, match="Prometheus duration"):
        sglang_queries("5 minutes")
    with pytest.raises(ValueError, match="label matchers"):
        sglang_queries("5m", 'job="a"} or vector(1) {')
    code, _, err = advise("http://127.0.0.1:9/", "-f", "verl", "--budget", "8", "--turns", "2", *BASIC)
    assert code == 2 and "unreachable" in err and err.count("\n") == 1


# -- golden output, loaded as each framework loads it ------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_output(name: str) -> None:
    code, out, err = advise(*GOLDEN_CASES[name])
    assert code == 0, err
    path = GOLDEN / name
    if os.environ.get("PEARL_SCHED_REGEN_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(out)
    assert out == path.read_text()


def golden(name: str) -> str:
    return (GOLDEN / name).read_text()


VERL_DISAGGREGATION_FIELDS = {  # verl 0.9.1 verl/workers/config/disaggregation.py, DisaggregationConfig
    "enabled",
    "prefill_replicas",
    "decode_replicas",
    "decode_tensor_model_parallel_size",
    "transfer_backend",
    "bootstrap_port",
    "ib_device",
    "mooncake_protocol",
}


@pytest.mark.parametrize("name", ["verl.txt", "verl_dedicated.txt", "verl_pd.txt"])
def test_verl_overrides_load_with_omegaconf_into_verls_schema(name: str) -> None:
    omegaconf = pytest.importorskip("omegaconf")
    lines = [line for line in golden(name).splitlines() if line and not line.startswith("#")]
    config = omegaconf.OmegaConf.from_dotlist(lines)  # how Hydra reads key=value overrides
    rollout = config.actor_rollout_ref.rollout
    assert rollout.name == "sglang" and config.trainer.v1.trainer_mode == "separate_async"
    disaggregation = omegaconf.OmegaConf.to_container(rollout.disaggregation)
    assert set(disaggregation) <= VERL_DISAGGREGATION_FIELDS
    try:  # where verl itself is installed, its own dataclass validates the block too
        from verl.workers.config.disaggregation import DisaggregationConfig  # type: ignore[import-not-found]
    except ImportError:
        pass
    else:
        DisaggregationConfig(**disaggregation)
    tp = rollout.tensor_model_parallel_size
    world = rollout.nnodes * rollout.n_gpus_per_node
    if disaggregation["enabled"]:
        assert disaggregation["prefill_replicas"] == 1  # sglang_pd_replica.py: prefill_replicas=1 only
        replica = tp + disaggregation["decode_replicas"] * disaggregation["decode_tensor_model_parallel_size"]
        assert world % replica == 0 and replica <= rollout.n_gpus_per_node  # whole replicas, each on one node
        # trainer_separate_async.py refuses lending with disaggregation
        assert config.trainer.v1.separate_async.hybrid_rollout.enable_switch is False
    else:
        assert world % tp == 0
    header = re.search(r"(\d+) GPUs", golden(name))
    assert header is not None
    lent = re.search(r"\((\d+) lent from training\)", golden(name))
    assert world + (int(lent.group(1)) if lent else 0) == int(header.group(1))


def test_slime_yaml_is_a_valid_sglang_config() -> None:
    """The checks of slime's ``SglangConfig.from_yaml`` / ``ServerGroupConfig.__post_init__``
    (slime/backends/sglang_utils/sglang_config.py; slime is not on the package index) and its docs' rules."""
    for name in ("slime.yaml", "slime_dedicated.yaml"):
        text = golden(name)
        data = yaml.safe_load(text)
        assert list(data) == ["sglang"]
        (model,) = data["sglang"]
        assert model["name"] == "actor" and model["update_weights"] is True
        kinds = {g["worker_type"] for g in model["server_groups"]}
        assert kinds <= {"regular", "prefill", "decode", "placeholder", "encoder"}
        assert not ("regular" in kinds and kinds & {"prefill", "decode"})  # never mixed in one model
        assert kinds != {"prefill"} and kinds != {"decode"}  # PD needs both
        per_engine = model["num_gpus_per_engine"]
        assert all(g["num_gpus"] > 0 and g["num_gpus"] % per_engine == 0 for g in model["server_groups"])
        launch = re.search(r"--rollout-num-gpus (\d+)", text)
        assert launch is not None  # docs: --rollout-num-gpus equals the GPUs of the config
        assert sum(g["num_gpus"] for g in model["server_groups"]) == int(launch.group(1))
    assert {g["worker_type"] for g in yaml.safe_load(golden("slime_dedicated.yaml"))["sglang"][0]["server_groups"]} == {
        "prefill",
        "decode",
    }


def _device_mapping(text: str) -> list[int]:
    """ROLL evaluates ``list(range(a,b))``; only that form is accepted here."""
    match = re.fullmatch(r"list\(range\((\d+),\s*(\d+)\)\)", text)
    assert match is not None, text
    return list(range(int(match.group(1)), int(match.group(2))))


def test_roll_yaml_loads_with_omegaconf_and_passes_partial_gpu_rules() -> None:
    """ROLL's configs are Hydra/OmegaConf YAML; partial-GPU mode's rules from
    roll/pipeline/agentic/agentic_pipeline.py ``_validate_partial_gpu_config``."""
    omegaconf = pytest.importorskip("omegaconf")
    config = omegaconf.OmegaConf.create(golden("roll.yaml"))
    infer = config.actor_infer
    assert infer.strategy_args.strategy_name == "sglang"
    tp = infer.strategy_args.strategy_config.tensor_parallel_size
    infer_gpus, train_gpus = _device_mapping(infer.device_mapping), _device_mapping(config.actor_train.device_mapping)
    assert len(infer_gpus) % tp == 0
    assert config.partial_gpu_mode is True
    assert set(train_gpus) < set(infer_gpus)  # Model B: train ⊂ infer
    assert len(infer_gpus) // tp >= 2 and config.async_generation_ratio > 0


AREAL_BACKEND = re.compile(r"^(sglang|vllm):((?:[dptce]\d+)+)$")  # docs/en/reference/alloc_mode.md


def test_areal_backend_string_follows_its_grammar() -> None:
    """AReaL's parser (areal/api/alloc_mode.py, lark) needs the areal package; its documented grammar
    ``<backend>:<dims>`` with d (instances) × t × p GPUs for inference is checked instead."""
    config = yaml.safe_load(golden("areal.yaml"))
    match = AREAL_BACKEND.match(config["rollout"]["backend"])
    assert match is not None
    dims = {d[0]: int(d[1:]) for d in re.findall(r"[dptce]\d+", match.group(2))}
    world = dims.get("d", 1) * dims.get("t", 1) * dims.get("p", 1)
    header = re.search(r"TP(\d+) workers, (\d+) GPUs", golden("areal.yaml"))
    assert header is not None and world == int(header.group(2)) and dims.get("t", 1) == int(header.group(1))


def test_each_framework_writes_only_what_it_can_express() -> None:
    """The lending plan (colocated with the training GPUs lent) is written as planned for verl (hybrid switch) and
    ROLL (partial-GPU mode); slime and AReaL cannot lend and get their best dedicated layout. A plan lending 3 of 4
    training workers is not ROLL's all-or-none loan; a PD plan of 3P13D is not verl's 1 prefill + n decode."""
    for name in ("verl.txt", "roll.yaml"):
        assert "(8 lent from training)" in golden(name) and "lending: lend the 8 training GPUs" in golden(name)
        assert "# pearl_sched's plan: this layout" in golden(name)
    for name in ("slime.yaml", "areal.yaml"):
        assert f"{name.split('.')[0]} has no way to lend training GPUs" in golden(name)
        assert "lending: none (the plan lends, but" in golden(name) and "cannot lend training GPUs)" in golden(name)
    for name in ("verl.txt", "slime.yaml", "roll.yaml", "areal.yaml"):  # the gate's own figures are shown
        assert re.search(r"# planner's decision: .*borrow: gain [0-9.]+ s > [a-z ]+ [0-9.]+ s", golden(name))
    assert "roll lends all 4 training workers or none, not 3" in golden("roll_partial_loan.yaml")
    assert "partial_gpu_mode: true" in golden("roll_partial_loan.yaml")
    assert "verl's PD replicas have 1 prefill and n decode servers each" in golden("verl_dedicated.txt")
    assert "actor_rollout_ref.rollout.disaggregation.enabled=True" in golden("verl_dedicated.txt")
    assert "# pearl_sched's plan: this layout" in golden("verl_pd.txt")
    gaps = [float(g) for g in re.findall(r"this layout is ([+-][0-9.]+)%", "".join(map(golden, GOLDEN_CASES)))]
    assert len(gaps) == 4 and all(g >= 0 for g in gaps)  # never better than the plan, scored the planner's way
    for name in GOLDEN_CASES:  # the plan's worker sizes, as pearl-sched plan prints them
        assert re.search(r"# plan's worker sizes: (prefill|colocated) \d+×tp[12]", golden(name))


def test_verl_places_whole_replicas_inside_nodes() -> None:
    assert verl_nodes(12, 2, 8) == (2, 6)  # 12 GPUs of 2-GPU replicas: 2 nodes × 6
    assert verl_nodes(16, 2, 8) == (2, 8)
    assert verl_nodes(6, 3, 8) == (1, 6)  # one node, 6 GPUs used
    assert verl_nodes(10, 5, 8) == (2, 5)  # two 5-GPU PD replicas, one per node
    assert verl_nodes(9, 2, 8) is None  # 2-GPU replicas never make 9 GPUs
    assert verl_nodes(10, 10, 8) is None  # a replica wider than a node
    assert verl_nodes(7, 1, 8) == (1, 7)


def test_unknown_framework_and_bad_options_exit_2() -> None:
    code, _, err = advise(*LENDING, "-f", "openrlhf")
    assert code == 2 and "--framework is one of verl, slime, roll, areal" in err
    code, _, err = advise(LOG, "-f", "verl", "--budget", "0", *BASIC)
    assert code == 2 and "budget_gpus" in err and err.count("\n") == 1
    code, _, err = advise(*DEDICATED, "-f", "verl", "--model", "gpt-9")  # the last --model counts
    assert code == 2 and "no shipped config 'gpt-9'" in err and err.count("\n") == 1


def test_the_lent_layout_predictions_use_the_same_model_as_the_plan() -> None:
    """The written layout's predicted makespan is recomputed by the plan's own predictor: a dedicated-only plan
    that a framework can express is written with the plan's figure exactly."""
    text = golden("slime_dedicated.yaml")
    assert "# pearl_sched's plan: this layout\n# planner's decision: initial configuration" in text  # as planned
    ratio = re.search(r"disaggregated (\d+)P(\d+)D", text)
    assert ratio is not None
    groups = yaml.safe_load(text)["sglang"][0]["server_groups"]
    per_engine = yaml.safe_load(text)["sglang"][0]["num_gpus_per_engine"]
    assert [g["num_gpus"] // per_engine for g in groups] == [int(ratio.group(1)), int(ratio.group(2))]


def test_each_workload_figure_says_which_input_it_needs() -> None:
    serving = ServingSummary(
        source="Prometheus fake",
        window="5m",
        itl_s=0.03,
        ttft_s=0.3,
        running_requests=96,
        prompt_tokens=3000,
        generation_tokens=200,
        servers=4,
    )  # no cached-token counter: all of the prompt counts as appended
    base = AdviceInputs(budget_gpus=8, model="qwen3-8b", gpu="h200_sxm", tp=2, batch_size=64)
    with pytest.raises(AdviceError, match="advise needs a profile"):
        workload_from_logs(base, None, None, 1.0)
    with pytest.raises(AdviceError, match="turns per trajectory"):
        workload_from_logs(base, None, serving, 1.0)
    with pytest.raises(AdviceError, match="tool time per turn"):
        workload_from_logs(base.model_copy(update={"turns": 3.0}), None, serving, 1.0)
    load, notes = workload_from_logs(
        base.model_copy(update={"turns": 3.0, "env_time_per_turn_s": 2.0}), None, serving, 1.0
    )
    assert (load.turns, load.generated_tokens_per_turn, load.appended_tokens_per_turn) == (3.0, 200, 3000)
    assert "prompt (no cached-token counter)" in notes[2]
    log = summarise(DATA / "verl_metrics.jsonl")  # 5.4 turns, 1491.7 + 5276.3 tokens per trajectory
    with pytest.raises(AdviceError, match=r"5\.40 turns × 2000 generated tokens exceed the 5276 response tokens"):
        workload_from_logs(base.model_copy(update={"generated_tokens_per_turn": 2000.0}), log, None, 1.0)
    load, _ = workload_from_logs(base.model_copy(update={"generated_tokens_per_turn": 180.0}), log, None, 1.0)
    assert load.appended_tokens_per_turn == pytest.approx((1491.7 + 5276.3 - 5.4 * 180) / 5.4)
    assert load.env_time_per_turn_s == pytest.approx(62.7 / 5.4) and load.turns == 8.0
