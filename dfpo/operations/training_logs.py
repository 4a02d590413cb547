"""Read training metrics from the three local formats verl 0.9.1's ``Tracking`` writes.

* ``trainer.logger=[console]`` (``verl.utils.logger.LocalLogger``): one line per step,
  ``step:N - key:value - key:value ...``, values formatted with ``pprint.pformat`` (so numpy
  scalars appear as ``np.float64(0.5)``); under Ray each line carries a prefix such as
  ``(TaskRunner pid=123)`` and possibly ANSI colours. Other output in the same stream is ignored.
* ``trainer.logger=[file]`` (``verl.utils.tracking.FileLogger``): JSON lines
  ``{"step": N, "data": {key: value}}`` at ``$VERL_FILE_LOGGER_PATH`` or
  ``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl``; orjson writes NaN as ``null``.
* ``trainer.logger=[tensorboard]`` (``SummaryWriter.add_scalar``): event files under
  ``$TENSORBOARD_DIR`` or ``tensorboard_log/<project>/<experiment>``, read with the
  ``tensorboard`` package's event accumulator.

When a resumed training run logs a step again, the last value logged for that step wins.

The recipes give each launch of an experiment its own file log,
``<log_dir>/<experiment>.<UTC launch time>.jsonl`` (verl's FileLogger truncates its file when it opens
it, so one path per experiment would lose the launches before a resume). ``<log_dir>/<experiment>.jsonl``,
which no launch writes, names the experiment's whole series: :func:`read_training_log` reads its
launches in launch order as one log (:func:`launch_file_logs`).
"""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CONSOLE_STEP = re.compile(r"(?:^|\s|\))step:(\d+) - (.*)$")
_NUMPY_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")

REWARD_KEY = "critic/score/mean"
RESPONSE_LENGTH_KEY = "response_length/mean"
ENTROPY_KEY = "actor/entropy"
DEFAULT_CURVE_KEYS = (REWARD_KEY, RESPONSE_LENGTH_KEY, ENTROPY_KEY)
DFPO_PREFIX = "dfpo/"
# The learning tax as DFPO's residual meters log it (dfpo/verl/residual_meters.py; docs/exactness.md,
# "Diagnostics"): the residual GSPO's weights would leave on a batch's shared tokens (GSPO's own in a
# GSPO run), and the residual measured on the gradient the loss gave the log-probs, logged on the
# steps with whole groups with a shared prefix to measure (their number). DFPO's transformed weights'
# residual (``cancellation_residual_after``) is 0 by construction: no measurement to show.
GSPO_WEIGHTS_RESIDUAL = "actor/dfpo/cancellation_residual_before"
MEASURED_RESIDUAL = "actor/dfpo/shared_token_grad_residual"
MEASURED_GROUPS = "actor/dfpo/shared_token_grad_groups"


@dataclass(frozen=True)
class MetricSeries:
    """One metric over training steps (steps ascending, unique)."""

    steps: np.ndarray
    values: np.ndarray


TrainingLog = dict[str, MetricSeries]


def _finalize(points: dict[str, dict[int, float]]) -> TrainingLog:
    log: TrainingLog = {}
    for key, by_step in points.items():
        steps = np.array(sorted(by_step), dtype=np.int64)
        log[key] = MetricSeries(steps, np.array([by_step[s] for s in steps], dtype=float))
    return log


def parse_console_value(text: str) -> float | None:
    """A console value as a float: ``0.5``, ``nan``, ``np.float64(0.5)``, ``True``; None if not numeric."""
    text = text.strip()
    match = _NUMPY_SCALAR.match(text)
    if match:
        text = match.group(1)
    if text in ("True", "False"):
        return 1.0 if text == "True" else 0.0
    try:
        return float(text)
    except ValueError:
        return None


def read_console_log(path: str | Path) -> TrainingLog:
    """Metrics from a captured console stream (``python -m verl.trainer.main_ppo ... | tee train.log``)."""
    path = Path(path)
    points: dict[str, dict[int, float]] = {}
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            match = _CONSOLE_STEP.search(_ANSI.sub("", line.rstrip("\n")))
            if not match:
                continue
            step = int(match.group(1))
            for item in match.group(2).split(" - "):
                key, sep, raw = item.rpartition(":")
                if not sep or not key:
                    continue
                value = parse_console_value(raw)
                if value is not None:
                    points.setdefault(key, {})[step] = value
    if not points:
        raise ValueError(f"{path}: no 'step:N - key:value' lines from verl's console logger were found")
    return _finalize(points)


def read_file_log(path: str | Path) -> TrainingLog:
    """Metrics from verl's file logger (JSON lines ``{"step": N, "data": {...}}``).

    Non-numeric values (verl logs only numbers, but other tools may append) are skipped;
    ``null`` is read as NaN. A truncated last line (training killed mid-write) is dropped with
    a warning; any other malformed line is an error naming the line.
    """
    path = Path(path)
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1].strip():
        try:
            json.loads(lines[-1])
        except json.JSONDecodeError:
            warnings.warn(f"{path}: dropping a truncated last line (training stopped while writing)", stacklevel=2)
            lines.pop()
    points: dict[str, dict[int, float]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} line {number}: not valid JSON ({exc})") from exc
        if not isinstance(entry, dict) or "step" not in entry or not isinstance(entry.get("data"), dict):
            raise ValueError(f"{path} line {number}: expected verl's file-logger record {{'step': N, 'data': {{...}}}}")
        step = int(entry["step"])
        for key, value in entry["data"].items():
            if value is None:
                points.setdefault(key, {})[step] = math.nan
            elif isinstance(value, bool | int | float):
                points.setdefault(key, {})[step] = float(value)
    if not points:
        raise ValueError(f"{path}: no metrics found in verl's file-logger format")
    return _finalize(points)


def read_tensorboard(path: str | Path) -> TrainingLog:
    """Scalar metrics from a TensorBoard log directory (or one event file)."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    path = Path(path)
    if path.is_dir():
        event_files = sorted(path.rglob("events.out.tfevents.*"))
        if not event_files:
            raise ValueError(f"{path}: no TensorBoard event files (events.out.tfevents.*) found")
        sources = sorted({f.parent for f in event_files})
    else:
        sources = [path]
    points: dict[str, dict[int, float]] = {}
    for source in sources:
        accumulator = EventAccumulator(str(source), size_guidance={SCALARS: 0})
        accumulator.Reload()
        for tag in accumulator.Tags().get("scalars", []):
            for event in sorted(accumulator.Scalars(tag), key=lambda e: e.wall_time):
                points.setdefault(tag, {})[int(event.step)] = float(event.value)
    if not points:
        raise ValueError(f"{path}: the TensorBoard events hold no scalars")
    return _finalize(points)


LAUNCH_STAMP = r"\.\d{8}T\d{6}Z\.jsonl"  # the recipes' per-launch file log: <experiment>.<UTC time>.jsonl


def launch_file_logs(path: str | Path) -> list[Path]:
    """The per-launch file logs of the experiment ``<dir>/<experiment>.jsonl`` names, oldest first
    (the stamps are UTC times, so their order is the launches'); [] when there are none."""
    path = Path(path).expanduser()
    stamped = re.compile(re.escape(path.name.removesuffix(".jsonl")) + LAUNCH_STAMP + "$")
    if not path.parent.is_dir():
        return []
    return sorted(candidate for candidate in path.parent.iterdir() if stamped.fullmatch(candidate.name))


def read_launches(paths: list[Path]) -> TrainingLog:
    """One series from an experiment's launches, in order: a step a later launch logged again (it
    ran again after a launch that ended before that step's checkpoint) has the later launch's value."""
    points: dict[str, dict[int, float]] = {}
    for path in paths:
        for key, series in read_file_log(path).items():
            points.setdefault(key, {}).update(zip(series.steps.tolist(), series.values.tolist(), strict=True))
    return _finalize(points)


def read_training_log(path: str | Path) -> TrainingLog:
    """Read any of the three formats: a directory or event file is TensorBoard, ``*.jsonl`` the
    file logger, anything else a console capture. ``<dir>/<experiment>.jsonl`` where only the
    experiment's per-launch logs exist reads them all as one series (:func:`launch_file_logs`)."""
    path = Path(path).expanduser()
    if not path.exists() and path.suffix == ".jsonl":
        launches = launch_file_logs(path)
        if launches:
            return read_launches(launches)
    if not path.exists():
        raise FileNotFoundError(f"training log {path} does not exist")
    if path.is_dir() or path.name.startswith("events.out.tfevents"):
        return read_tensorboard(path)
    if path.suffix == ".jsonl":
        return read_file_log(path)
    return read_console_log(path)


def curve_keys(log: TrainingLog, requested: tuple[str, ...] | None = None) -> list[str]:
    """Metrics to plot: the requested ones, or reward, response length, entropy and every ``dfpo/``
    metric present (also when nested, e.g. ``actor/dfpo/...``)."""
    if requested:
        return [k for k in requested if k in log]
    keys = [k for k in DEFAULT_CURVE_KEYS if k in log]
    return keys + sorted(k for k in log if k.startswith(DFPO_PREFIX) or f"/{DFPO_PREFIX}" in k)
