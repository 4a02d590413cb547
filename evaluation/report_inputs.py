"""The report's runs file: which runs exist, where their evaluations are, how they group.

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
      # k per benchmark: one evaluation directory per generate call (AIME25/HMMT25 at k=32, LCB at k=8)
      - {model: Qwen3-32B, method: GSPO, seed: 0, group_size: 16,
         eval: [evals/qwen3_32b/gspo_s0_math_k32, evals/qwen3_32b/gspo_s0_lcb_k8]}

``eval`` is a run directory written by ``python -m evaluation.generate``, or a list of
them when the benchmarks of one trained model were sampled with different k (each directory
has one k; two directories of a run must not share a benchmark). ``train_log`` (optional) is
verl's console capture, file-logger JSONL or TensorBoard directory. Rows and columns keep the
order of first appearance. Every run remembers its line in the file, so messages about a run
(errors and warnings) point at that line.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

RUN_KEYS = {"model", "method", "seed", "eval", "train_log", "group_size"}


@dataclass(frozen=True)
class RunSpec:
    """One evaluated training run."""

    model: str
    method: str
    seed: str
    eval_dirs: tuple[Path, ...]
    """Evaluation directories of this trained model (one per k used)."""
    train_log: Path | None = None
    group_size: int | None = None
    where: str = ""
    """``<runs file>:<line> (runs[i])``, for messages."""
    line: int = 0
    """Line of the entry in the runs file (0 when unknown)."""

    @property
    def label(self) -> str:
        """``model/method/seed s`` (and the group size when given)."""
        size = "" if self.group_size is None else f"/G={self.group_size}"
        return f"{self.model}/{self.method}{size}/seed {self.seed}"


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

    def warn(self, run: RunSpec | None, message: str) -> None:
        """A warning attributed to the runs file (at the run's line), not to the report's code."""
        filename = str(self.source) if self.source is not None else "<runs>"
        warnings.warn_explicit(message, UserWarning, filename, run.line if run is not None else 0)


def _entry_lines(text: str) -> list[int]:
    """1-based line of each ``runs`` entry (YAML and JSON files); empty when it cannot be told."""
    import yaml

    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return []
    if not isinstance(root, yaml.MappingNode):
        return []
    for key, value in root.value:
        if key.value == "runs" and isinstance(value, yaml.SequenceNode):
            return [node.start_mark.line + 1 for node in value.value]
    return []


def _eval_dirs(value: object, base_dir: Path, where: str) -> tuple[Path, ...]:
    items = value if isinstance(value, list) else [value]
    if not items or any(not isinstance(item, (str, Path)) or not str(item) for item in items):
        raise ValueError(f"{where}: 'eval' must be a directory or a non-empty list of directories, got {value!r}")
    dirs = tuple(base_dir / Path(str(item)).expanduser() for item in items)
    if len({d.resolve() for d in dirs}) != len(dirs):
        raise ValueError(f"{where}: 'eval' lists the same directory twice")
    return dirs


def load_report_config(path: str | Path, baseline: str | None = None) -> ReportConfig:
    """Parse and check the runs file; ``baseline`` overrides the file's."""
    import yaml

    path = Path(path).expanduser()
    text = path.read_text()
    raw = yaml.safe_load(text)
    if not isinstance(raw, dict) or not isinstance(raw.get("runs"), list) or not raw["runs"]:
        raise ValueError(f"{path}: expected a mapping with a non-empty 'runs' list")
    lines = _entry_lines(text)
    base_dir = path.parent
    runs = []
    for i, entry in enumerate(raw["runs"]):
        line = lines[i] if i < len(lines) else 0
        where = f"{path}:{line} (runs[{i}])" if line else f"{path} runs[{i}]"
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
                eval_dirs=_eval_dirs(entry["eval"], base_dir, where),
                train_log=None if train_log is None else (base_dir / Path(str(train_log)).expanduser()),
                group_size=group_size,
                where=where,
                line=line,
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
    _check_distinct_runs(config)
    return config


def _check_distinct_runs(config: ReportConfig) -> None:
    """Each evaluation directory belongs to one run; one Table 1 run per model, method and seed."""
    owner: dict[Path, RunSpec] = {}
    for run in config.runs:
        for directory in run.eval_dirs:
            first = owner.setdefault(directory.resolve(), run)
            if first is not run:
                raise ValueError(
                    f"{run.where}: evaluation directory {directory} is also the evaluation of {first.where} "
                    f"({first.label}); every run needs its own evaluation"
                )
    seen: set[tuple[str, str, str]] = set()
    for run in config.table_runs():
        key = (run.model, run.method, run.seed)
        if key in seen:
            raise ValueError(
                f"{run.where}: two Table 1 runs share model/method/seed {key}; give them group_size values and "
                "set table_group_size to the one Table 1 should use"
            )
        seen.add(key)
