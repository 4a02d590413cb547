"""A run's results per benchmark, read from its evaluation directories and checked line by line.

For one run and one benchmark (``data_source``) with k samples per problem p:

* per-problem accuracy ``acc[p] = (1/k) sum_j acc_{p,j}`` (avg@k of the run is its mean over p);
* ``solved[p] = 1`` when some sample has ``acc == 1``: pass@k with n = k samples, where the
  unbiased estimator ``1 - C(n-c, k)/C(n, k)`` reduces to ``1[c > 0]``;
* mean response length (tokens) and truncation rate over all samples;
* the settings that decide whether two runs can be compared (see ``comparability.py``).

The samples are read through ``run_store`` and the per-run metrics computed by ``summary`` (as in
the run's summary.json). Every sample line is checked: valid JSON with the sample keys, ``acc`` a
number in [0, 1], ``sample_index`` an integer in [0, k) seen once per problem, one data_source per
problem. An error names the file and line and says what to do.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.comparability import run_settings
from evaluation.report_inputs import RunSpec
from evaluation.run_store import SAMPLES_FILE, group_by_problem, read_manifest, read_samples
from evaluation.summary import correctness_matrix, group_metrics

CHECKED_KEYS = ("problem_id", "data_source", "sample_index", "acc", "num_tokens", "truncated")


@dataclass(frozen=True)
class BenchmarkRun:
    """One run's samples of one benchmark, from one evaluation directory."""

    eval_dir: Path
    k: int
    accuracy: dict[str, float]
    """problem_id -> mean ``acc`` over the k samples."""
    solved: dict[str, float]
    """problem_id -> 1.0 when a sample is fully correct (pass@k with n = k), else 0.0."""
    mean_tokens: float
    truncation: float
    settings: dict[str, Any]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_record(record: Any, k: int, where: str) -> None:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: a sample must be a JSON object")
    missing = [key for key in CHECKED_KEYS if key not in record]
    if missing:
        raise ValueError(f"{where}: sample record lacks {missing}; the file was not written by generate")
    acc = record["acc"]
    if not _number(acc) and not isinstance(acc, bool):
        raise ValueError(
            f"{where}: acc is {acc!r}, not a number; the scorer must return acc in [0, 1] for every sample "
            "(re-score the run, or fix the scorer)"
        )
    if not 0.0 <= float(acc) <= 1.0:
        raise ValueError(f"{where}: acc = {acc!r} lies outside [0, 1]; avg@k is a mean of accuracies in [0, 1]")
    index = record["sample_index"]
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < k:
        raise ValueError(f"{where}: sample_index {index!r} is not an integer in [0, k) with k={k}")
    if not _number(record["num_tokens"]) or record["num_tokens"] < 0:
        raise ValueError(f"{where}: num_tokens {record['num_tokens']!r} is not a non-negative number")


def read_benchmarks(run_dir: Path, allow_incomplete: bool = False) -> dict[str, BenchmarkRun]:
    """Every benchmark of one evaluation directory; refuse unfinished runs unless ``allow_incomplete``."""
    manifest = read_manifest(run_dir)
    k = int(manifest["k"])
    path = Path(run_dir) / SAMPLES_FILE
    records = read_samples(run_dir)
    first_line: dict[tuple[str, int], int] = {}
    source_of: dict[str, tuple[str, int]] = {}
    for number, record in enumerate(records, start=1):
        where = f"{path} line {number}"
        _check_record(record, k, where)
        pid, src = str(record["problem_id"]), str(record["data_source"])
        known = source_of.setdefault(pid, (src, number))
        if known[0] != src:
            raise ValueError(f"{where}: problem {pid!r} has data_source {src!r} but {known[0]!r} on line {known[1]}")
        seen = first_line.setdefault((pid, record["sample_index"]), number)
        if seen != number:
            raise ValueError(
                f"{where}: problem {pid!r} sample_index {record['sample_index']} repeats line {seen}; "
                "each of the k samples must appear once (the file was edited or concatenated)"
            )
    groups = group_by_problem(records)
    short = [pid for pid, group in groups.items() if len(group) != k]
    if short:
        raise ValueError(f"{path}: problems {short[:3]} do not have k={k} samples; resume the run with generate")
    if len(groups) != int(manifest["n_problems"]) and not allow_incomplete:
        raise ValueError(
            f"{run_dir}: {len(groups)} of {manifest['n_problems']} problems are done; finish the run with the same "
            "generate command (it resumes), or pass --allow-incomplete"
        )
    by_source: dict[str, list[str]] = defaultdict(list)
    for pid in groups:
        by_source[source_of[str(pid)][0]].append(pid)
    results = {}
    for src, pids in by_source.items():
        acc = correctness_matrix(groups, pids)
        metrics = group_metrics(groups, pids, k)
        results[src] = BenchmarkRun(
            eval_dir=Path(run_dir),
            k=k,
            accuracy=dict(zip(map(str, pids), acc.mean(axis=1).tolist(), strict=True)),
            solved=dict(zip(map(str, pids), (acc >= 1.0).any(axis=1).astype(float).tolist(), strict=True)),
            mean_tokens=metrics["mean_response_tokens"],
            truncation=metrics["truncation_rate"],
            settings=run_settings(manifest, src),
        )
    return results


def load_run(run: RunSpec, allow_incomplete: bool = False) -> dict[str, BenchmarkRun]:
    """The benchmarks of a run, merged over its evaluation directories (one k each)."""
    merged: dict[str, BenchmarkRun] = {}
    for directory in run.eval_dirs:
        for source, result in read_benchmarks(directory, allow_incomplete).items():
            if source in merged:
                raise ValueError(
                    f"{run.where}: benchmark {source!r} is in both {merged[source].eval_dir} and {directory}; "
                    "list each benchmark of a run in one evaluation directory"
                )
            merged[source] = result
    return merged


def run_matrix(
    runs: list[RunSpec], results: dict[RunSpec, dict[str, BenchmarkRun]], source: str, field: str = "accuracy"
) -> tuple[list[str], np.ndarray]:
    """(problem ids, matrix[seed, problem]) of ``field`` (accuracy or solved) for runs of one cell.

    Every run must cover the same problems of ``source``, so seeds can be compared.
    """
    per_run = [getattr(results[r][source], field) for r in runs]
    reference = set(per_run[0])
    for run, values in zip(runs[1:], per_run[1:], strict=True):
        if set(values) != reference:
            diff = sorted(reference ^ set(values))
            raise ValueError(
                f"{run.where} and {runs[0].where} cover different {source!r} problems (e.g. {diff[:3]}); "
                "evaluate every seed on the same data"
            )
    problem_ids = sorted(reference)
    return problem_ids, np.array([[values[p] for p in problem_ids] for values in per_run])
