"""The report's inputs: which runs exist (a YAML/JSON file) and their per-problem accuracies.

Example ``runs.yaml`` (paths relative to the file)::

    baseline: GSPO                 # method every other method is tested against
    table_group_size: 16           # runs with this group_size (or none) form Table 1
    benchmarks:                    # data_source -> column title, in column order (optional)
      aime25: AIME25
      lcb_v6: LiveCodeBench
      hmmt25: HMMT25
    runs:
      - {model: Qwen3-32B, method: DFPO (Min-Replace), seed: 0, group_size: 16,
         eval: evals/qwen3_32b/dfpo_minrep_s0, train_log: logs/dfpo_minrep_s0.jsonl}
      - {model: Qwen3-32B, method: GSPO, seed: 0, group_size: 16, eval: evals/qwen3_32b/gspo_s0}

``eval`` is a run directory written by ``python -m dfpo.evaluation.generate``; ``train_log``
(optional) is verl's console capture, file-logger JSONL or TensorBoard directory. Rows and
columns keep the order of first appearance.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dfpo.evaluation.run_store import SAMPLES_FILE, read_manifest

RUN_KEYS = {"model", "method", "seed", "eval", "train_log", "group_size"}


@dataclass(frozen=True)
class RunSpec:
    """One evaluated training run."""

    model: str
    method: str
    seed: str
    eval_dir: Path
    train_log: Path | None = None
    group_size: int | None = None


@dataclass(frozen=True)
class ReportConfig:
    """Everything the report reads."""

    baseline: str
    runs: list[RunSpec]
    benchmarks: dict[str, str] = field(default_factory=dict)
    table_group_size: int | None = None
    source: Path | None = None

    @property
    def models(self) -> list[str]:
        """Models in order of first appearance."""
        return list(dict.fromkeys(r.model for r in self.runs))

    @property
    def methods(self) -> list[str]:
        """Methods in order of first appearance."""
        return list(dict.fromkeys(r.method for r in self.runs))

    def table_runs(self) -> list[RunSpec]:
        """Runs that form Table 1 and the paired tests."""
        if self.table_group_size is None:
            return list(self.runs)
        return [r for r in self.runs if r.group_size in (None, self.table_group_size)]


def load_report_config(path: str | Path, baseline: str | None = None) -> ReportConfig:
    """Parse and check the runs file; ``baseline`` overrides the file's."""
    import yaml

    path = Path(path).expanduser()
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict) or not isinstance(raw.get("runs"), list) or not raw["runs"]:
        raise ValueError(f"{path}: expected a mapping with a non-empty 'runs' list")
    base_dir = path.parent
    runs = []
    for i, entry in enumerate(raw["runs"]):
        where = f"{path} runs[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: each run must be a mapping")
        unknown = set(entry) - RUN_KEYS
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(RUN_KEYS)}")
        missing = [k for k in ("model", "method", "seed", "eval") if entry.get(k) is None]
        if missing:
            raise ValueError(f"{where}: missing {missing}")
        train_log = entry.get("train_log")
        group_size = entry.get("group_size")
        if group_size is not None and (not isinstance(group_size, int) or group_size < 1):
            raise ValueError(f"{where}: group_size must be a positive integer, got {group_size!r}")
        runs.append(
            RunSpec(
                model=str(entry["model"]),
                method=str(entry["method"]),
                seed=str(entry["seed"]),
                eval_dir=(base_dir / Path(str(entry["eval"])).expanduser()),
                train_log=None if train_log is None else (base_dir / Path(str(train_log)).expanduser()),
                group_size=group_size,
            )
        )
    chosen = baseline if baseline is not None else raw.get("baseline")
    if chosen is None:
        raise ValueError(f"{path}: name the baseline method ('baseline: GSPO' or --baseline)")
    methods = {r.method for r in runs}
    if chosen not in methods:
        raise ValueError(f"{path}: baseline {chosen!r} is not among the runs' methods {sorted(methods)}")
    benchmarks = raw.get("benchmarks") or {}
    if isinstance(benchmarks, list):
        benchmarks = {str(b): str(b) for b in benchmarks}
    if not isinstance(benchmarks, dict):
        raise ValueError(f"{path}: 'benchmarks' must map data_source to a column title")
    config = ReportConfig(
        baseline=str(chosen),
        runs=runs,
        benchmarks={str(k): str(v) for k, v in benchmarks.items()},
        table_group_size=raw.get("table_group_size"),
        source=path,
    )
    seen: dict[tuple[str, str, str], int] = {}
    for i, run in enumerate(config.table_runs()):
        key = (run.model, run.method, run.seed)
        if key in seen:
            raise ValueError(
                f"{path}: two Table 1 runs share model/method/seed {key}; give them group_size values and "
                "set table_group_size to the one Table 1 should use"
            )
        seen[key] = i
    return config


@dataclass(frozen=True)
class RunAccuracy:
    """Per-problem accuracy (mean of ``acc`` over the k samples) of one run, by data_source."""

    k: int
    by_source: dict[str, dict[str, float]]
    """data_source -> problem_id -> accuracy."""
    mean_tokens: dict[str, float]
    truncation: dict[str, float]


def load_run_accuracy(run_dir: Path, allow_incomplete: bool = False) -> RunAccuracy:
    """Read a run directory; refuse unfinished runs unless ``allow_incomplete``."""
    manifest = read_manifest(run_dir)
    k = int(manifest["k"])
    path = Path(run_dir) / SAMPLES_FILE
    sums: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    tokens: dict[str, list[float]] = defaultdict(list)
    truncated: dict[str, list[float]] = defaultdict(list)
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.endswith("\n"):
                raise ValueError(f"{path} line {number}: incomplete (interrupted run); resume it with generate first")
            record = json.loads(line)
            src = record["data_source"]
            sums[src][record["problem_id"]].append(float(record["acc"]))
            tokens[src].append(float(record["num_tokens"]))
            truncated[src].append(float(record["truncated"]))
    n_done = sum(1 for per in sums.values() for acc in per.values() if len(acc) == k)
    short = [pid for per in sums.values() for pid, acc in per.items() if len(acc) != k]
    if short:
        raise ValueError(f"{path}: problems {short[:3]} do not have k={k} samples; resume the run with generate")
    if n_done != int(manifest["n_problems"]) and not allow_incomplete:
        raise ValueError(
            f"{run_dir}: {n_done} of {manifest['n_problems']} problems are done; finish the run with the same "
            "generate command (it resumes), or pass --allow-incomplete"
        )
    by_source = {src: {pid: float(np.mean(acc)) for pid, acc in per.items()} for src, per in sums.items()}
    return RunAccuracy(
        k=k,
        by_source=by_source,
        mean_tokens={src: float(np.mean(v)) for src, v in tokens.items()},
        truncation={src: float(np.mean(v)) for src, v in truncated.items()},
    )


def accuracy_matrix(
    runs: list[RunSpec], accuracies: dict[Path, RunAccuracy], data_source: str
) -> tuple[list[str], list[str], np.ndarray]:
    """(seed labels, problem ids, matrix[seed, problem]) for runs of one model and method.

    Every run must cover the same problems of ``data_source``, so seeds can be compared.
    """
    seeds = [r.seed for r in runs]
    problem_sets = [set(accuracies[r.eval_dir].by_source.get(data_source, {})) for r in runs]
    if not problem_sets or not problem_sets[0]:
        raise ValueError(f"{runs[0].eval_dir} has no problems of data_source {data_source!r}")
    reference = problem_sets[0]
    for run, problems in zip(runs[1:], problem_sets[1:], strict=True):
        if problems != reference:
            diff = sorted(reference ^ problems)
            raise ValueError(
                f"{run.eval_dir} and {runs[0].eval_dir} cover different {data_source!r} problems "
                f"(e.g. {diff[:3]}); evaluate every seed on the same data"
            )
    problem_ids = sorted(reference)
    matrix = np.array([[accuracies[r.eval_dir].by_source[data_source][p] for p in problem_ids] for r in runs])
    return seeds, problem_ids, matrix
