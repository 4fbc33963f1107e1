"""What an RL team's training logs say about its rollout: verl's step metrics, as a file, a console or wandb.

verl logs the same keys to every backend it has (``verl/utils/tracking.py``): its ``file`` backend writes one JSON
object a line, ``{"step": N, "data": {...}}``; its ``console`` backend prints ``step:N - key:value - key:value``
(``verl/utils/logger/aggregate_logger.py``, ``concat_dict_to_str``); a wandb run exported from the web UI is a
CSV of the run's history, one row a step, one column a key. :func:`read_rl_log` reads any of the three into
the per-step values of the keys below and :func:`summarise` reduces them to a :class:`RolloutLogSummary`
(medians over steps, the first step left out as a warm-up when there are more than two).

Keys read (verl 0.9.1), and where verl computes them:

- ``timing_s/gen`` (``ray_trainer.py``, ``marked_timer("gen")``): the measured rollout makespan of a step;
- ``timing_s/step`` (``marked_timer("step")``): the whole step; step − gen is the time rollout waits for training;
- ``prompt_length/mean``, ``response_length/mean`` (``metric_utils.py``, ``compute_data_metrics``): tokens per
  trajectory; the response counts every token after the prompt, tool output included in multi-turn;
- ``num_turns/mean``, ``num_turns/max`` (``compute_data_metrics``): messages per trajectory, user + assistant + 1
  (``experimental/agent_loop/tool_agent_loop.py``), so LLM turns ≈ ⌊num_turns / 2⌋;
- ``timing_s/agent_loop/tool_calls/mean`` (``agent_loop.py``, ``_performance_metrics``): tool seconds per trajectory.

Structural problems (not JSON, no step, a value that is not a number, a key the summary needs missing from every
step) raise :class:`~pearl_sched.profiles.dataset.ProfileFormatError` naming the file, line and key.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import statistics
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field

from pearl_sched.input_files import MAX_PROFILE_BYTES, InputFileError, read_text
from pearl_sched.profiles.dataset import ProfileFormatError
from pearl_sched.state import Frozen, NonNegFloat, PosFloat

GEN_S = "timing_s/gen"
STEP_S = "timing_s/step"
PROMPT_TOKENS = "prompt_length/mean"
RESPONSE_TOKENS = "response_length/mean"
TURNS_MEAN = "num_turns/mean"
TURNS_MAX = "num_turns/max"
TOOL_S = "timing_s/agent_loop/tool_calls/mean"
KEYS = (GEN_S, STEP_S, PROMPT_TOKENS, RESPONSE_TOKENS, TURNS_MEAN, TURNS_MAX, TOOL_S)
"""The keys read; any other key in the log is ignored."""
REQUIRED = (GEN_S, PROMPT_TOKENS, RESPONSE_TOKENS)

_CONSOLE_STEP = re.compile(r"(?:^|\s)step:(\d+)\s+-\s+(.*)$")
_NUMPY_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")  # pprint of a numpy scalar: np.float64(1.5)


class RolloutLogSummary(Frozen):
    """A training run's rollout as its logs measured it: medians over the steps read."""

    source: str = Field(description="The log file and its format")
    steps: int = Field(ge=1, description="Steps summarised")
    gen_s: PosFloat = Field(description="Rollout makespan per step (timing_s/gen)")
    step_s: PosFloat | None = Field(default=None, description="Whole step (timing_s/step)")
    prompt_tokens: NonNegFloat = Field(description="Prompt tokens per trajectory")
    response_tokens: PosFloat = Field(description="Response tokens per trajectory (tool output included)")
    llm_turns_mean: PosFloat = Field(default=1.0, description="LLM (assistant) turns per trajectory")
    llm_turns_max: PosFloat = Field(default=1.0, description="LLM turns of the longest trajectory")
    tool_s_per_trajectory: NonNegFloat = Field(default=0.0, description="Seconds a trajectory spends in tools")

    @property
    def training_wait_s(self) -> float | None:
        """Seconds per step rollout GPUs are not generating (step − gen): the trainer's share of the step."""
        return None if self.step_s is None else max(self.step_s - self.gen_s, 0.0)


def _number(path: Path, line: int, key: str, value: object) -> float:
    if isinstance(value, bool) or value is None:
        raise ProfileFormatError(path, f"{value!r} is not a number", row=line, column=key)
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    match = _NUMPY_SCALAR.match(text)
    try:
        return float(match.group(1) if match else text)
    except ValueError:
        raise ProfileFormatError(path, f"{text[:40]!r} is not a number", row=line, column=key) from None


def _step(path: Path, line: int, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ProfileFormatError(path, "the step is not a number", row=line, column="step")
    try:
        number = float(value)
    except ValueError:
        raise ProfileFormatError(path, "the step is not a number", row=line, column="step") from None
    if not (math.isfinite(number) and number == int(number)):
        raise ProfileFormatError(path, "the step is not a whole number", row=line, column="step")
    return int(number)


def _keep(path: Path, line: int, data: Mapping[str, object]) -> dict[str, float]:
    return {k: _number(path, line, k, data[k]) for k in KEYS if k in data and data[k] not in ("", None)}


def _read_jsonl(path: Path, text: str) -> dict[int, dict[str, float]]:
    steps: dict[int, dict[str, float]] = {}
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError:
            raise ProfileFormatError(path, "not a JSON object", row=line) from None
        if not isinstance(record, dict) or "step" not in record:
            raise ProfileFormatError(path, 'not a verl metrics record: no "step"', row=line)
        data = record.get("data", record)  # verl's FileLogger nests the metrics under "data"
        if not isinstance(data, dict):
            raise ProfileFormatError(path, '"data" is not an object', row=line, column="data")
        steps.setdefault(_step(path, line, record["step"]), {}).update(_keep(path, line, data))
    return steps


def _read_console(path: Path, text: str) -> dict[int, dict[str, float]]:
    steps: dict[int, dict[str, float]] = {}
    for line, raw in enumerate(text.splitlines(), start=1):
        match = _CONSOLE_STEP.search(raw)
        if match is None:
            continue  # a console log holds much else: only verl's metric lines are read
        fields: dict[str, str] = {}
        for part in match.group(2).split(" - "):
            key, sep, value = part.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        steps.setdefault(int(match.group(1)), {}).update(_keep(path, line, fields))
    return steps


def _read_wandb_csv(path: Path, text: str) -> dict[int, dict[str, float]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    steps: dict[int, dict[str, float]] = {}
    try:
        names = reader.fieldnames or []
        step_column = next((c for c in ("_step", "step", "Step", "trainer/global_step") if c in names), None)
        if step_column is None:
            raise ProfileFormatError(path, "a wandb history export needs a _step column", row=1)
        for record in reader:
            line = reader.line_num
            steps.setdefault(_step(path, line, record[step_column]), {}).update(_keep(path, line, record))
    except csv.Error:
        raise ProfileFormatError(path, "not a well-formed CSV row", row=reader.line_num + 1) from None
    return steps


def read_rl_log(path: str | Path) -> tuple[str, dict[int, dict[str, float]]]:
    """The format (``verl-jsonl``, ``verl-console``, ``wandb-csv``) and each step's values of :data:`KEYS`.

    Raises:
        ProfileFormatError: The file cannot be read, or is none of the three formats.
    """
    path = Path(path)
    try:
        text = read_text(path, limit_bytes=MAX_PROFILE_BYTES)
    except InputFileError as exc:
        raise ProfileFormatError(path, exc.problem, row=exc.row) from None
    first = next((line for line in text.splitlines() if line.strip()), "")
    if path.suffix.lower() == ".csv":
        return "wandb-csv", _read_wandb_csv(path, text)
    if first.lstrip().startswith("{"):
        return "verl-jsonl", _read_jsonl(path, text)
    steps = _read_console(path, text)
    if not steps:
        raise ProfileFormatError(
            path, "neither verl metrics (JSON lines or 'step:N - key:value' console lines) nor a wandb CSV"
        )
    return "verl-console", steps


def summarise(path: str | Path) -> RolloutLogSummary:
    """:func:`read_rl_log` reduced to medians over steps (the first left out as a warm-up when there are > 2).

    Raises:
        ProfileFormatError: The log is unreadable, or no step has a key the summary needs.
    """
    path = Path(path)
    kind, steps = read_rl_log(path)
    ordered = [steps[s] for s in sorted(steps)]
    usable = [s for s in ordered if all(k in s for k in REQUIRED)]
    if not usable:
        missing = [k for k in REQUIRED if not any(k in s for s in ordered)]
        raise ProfileFormatError(
            path, f"no step has {', '.join(missing or REQUIRED)}: log verl's timing and data metrics"
        )
    if len(usable) > 2:
        usable = usable[1:]

    def median(key: str) -> float | None:
        values = [s[key] for s in usable if key in s and math.isfinite(s[key])]
        return statistics.median(values) if values else None

    def required(key: str) -> float:
        value = median(key)
        if value is None or value < 0 or (key != PROMPT_TOKENS and value == 0):
            raise ProfileFormatError(path, f"{key} is {value!r} in every step: it must be a positive number")
        return value

    turns_mean, turns_max = median(TURNS_MEAN), median(TURNS_MAX)
    step_s = median(STEP_S)
    return RolloutLogSummary(
        source=f"{path} ({kind}, {len(usable)} step{'s' if len(usable) > 1 else ''})",
        steps=len(usable),
        gen_s=required(GEN_S),
        step_s=step_s if step_s is not None and step_s > 0 else None,
        prompt_tokens=required(PROMPT_TOKENS),
        response_tokens=required(RESPONSE_TOKENS),
        llm_turns_mean=max(1.0, turns_mean / 2) if turns_mean is not None else 1.0,
        llm_turns_max=max(1.0, float(math.floor(turns_max / 2))) if turns_max is not None else 1.0,
        tool_s_per_trajectory=max(median(TOOL_S) or 0.0, 0.0),
    )
