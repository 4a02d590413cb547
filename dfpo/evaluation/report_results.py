"""Compute the report's numbers: Table 1 cells, paired tests against the baseline, group-size deltas."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from dfpo.evaluation.report_inputs import ReportConfig, RunAccuracy, RunSpec, accuracy_matrix, load_run_accuracy
from dfpo.evaluation.stats import BootstrapCI, PairedTest, bootstrap_ci, paired_bootstrap_test


@dataclass(frozen=True)
class BootstrapSettings:
    """How every interval and test of one report is computed."""

    level: float = 0.95
    n_resamples: int = 10_000
    resample: str = "both"
    rng_seed: int = 0


@dataclass(frozen=True)
class Cell:
    """One Table 1 entry: a model, a method, a benchmark, over its seeds."""

    model: str
    method: str
    benchmark: str
    ci: BootstrapCI
    seeds: list[str]
    n_problems: int
    k: int
    mean_tokens: float
    truncation: float


@dataclass(frozen=True)
class Comparison:
    """A method against the baseline on one benchmark (paired over seeds and problems)."""

    model: str
    method: str
    baseline: str
    benchmark: str
    test: PairedTest
    seeds: list[str]
    group_size: int | None = None


@dataclass(frozen=True)
class ReportResults:
    """All numbers of a report."""

    config: ReportConfig
    settings: BootstrapSettings
    benchmarks: list[tuple[str, str]]
    """(data_source, column title) in column order."""
    cells: dict[tuple[str, str, str], Cell]
    comparisons: list[Comparison]
    group_size: list[Comparison]


def _select(
    runs: list[RunSpec], model: str, method: str, group_size: int | None = None, any_size: bool = True
) -> list[RunSpec]:
    chosen = [r for r in runs if r.model == model and r.method == method and (any_size or r.group_size == group_size)]
    return sorted(chosen, key=lambda r: r.seed)


def _paired(
    method_runs: list[RunSpec],
    base_runs: list[RunSpec],
    accuracies: dict[Path, RunAccuracy],
    source: str,
    settings: BootstrapSettings,
    label: str,
) -> tuple[PairedTest, list[str]] | None:
    by_seed_m = {r.seed: r for r in method_runs}
    by_seed_b = {r.seed: r for r in base_runs}
    common = sorted(set(by_seed_m) & set(by_seed_b))
    if not common:
        warnings.warn(f"{label}: no seed label is shared with the baseline; no paired test", stacklevel=3)
        return None
    unpaired = sorted(set(by_seed_m) ^ set(by_seed_b))
    if unpaired:
        warnings.warn(f"{label}: seeds {unpaired} have no partner and are left out of the paired test", stacklevel=3)
    _, pids_m, x_m = accuracy_matrix([by_seed_m[s] for s in common], accuracies, source)
    _, pids_b, x_b = accuracy_matrix([by_seed_b[s] for s in common], accuracies, source)
    if pids_m != pids_b:
        raise ValueError(f"{label}: the method and the baseline were evaluated on different {source!r} problems")
    test = paired_bootstrap_test(
        x_m,
        x_b,
        level=settings.level,
        n_resamples=settings.n_resamples,
        resample=settings.resample,
        rng_seed=settings.rng_seed,
    )
    return test, common


def compute_results(config: ReportConfig, settings: BootstrapSettings, allow_incomplete: bool = False) -> ReportResults:
    """Load every run once and compute the cells, comparisons and group-size deltas."""
    accuracies = {run.eval_dir: load_run_accuracy(run.eval_dir, allow_incomplete) for run in config.runs}
    found = list(dict.fromkeys(src for acc in accuracies.values() for src in sorted(acc.by_source)))
    if config.benchmarks:
        absent = [b for b in config.benchmarks if b not in found]
        if absent:
            raise ValueError(f"{config.source}: benchmark(s) {absent} appear in no run; data sources found: {found}")
        benchmarks = list(config.benchmarks.items())
    else:
        benchmarks = [(src, src) for src in found]
    table_runs = config.table_runs()
    cells: dict[tuple[str, str, str], Cell] = {}
    comparisons: list[Comparison] = []
    for model in config.models:
        for method in config.methods:
            runs = _select(table_runs, model, method)
            if not runs:
                continue
            for source, _ in benchmarks:
                covered = [r for r in runs if source in accuracies[r.eval_dir].by_source]
                if not covered:
                    continue
                seeds, pids, matrix = accuracy_matrix(covered, accuracies, source)
                ci = bootstrap_ci(
                    matrix,
                    level=settings.level,
                    n_resamples=settings.n_resamples,
                    resample=settings.resample,
                    rng_seed=settings.rng_seed,
                )
                ks = {accuracies[r.eval_dir].k for r in covered}
                if len(ks) > 1:
                    warnings.warn(f"{model}/{method}/{source}: runs use different k {sorted(ks)}", stacklevel=2)
                cells[(model, method, source)] = Cell(
                    model,
                    method,
                    source,
                    ci,
                    seeds,
                    len(pids),
                    min(ks),
                    mean_tokens=sum(accuracies[r.eval_dir].mean_tokens[source] for r in covered) / len(covered),
                    truncation=sum(accuracies[r.eval_dir].truncation[source] for r in covered) / len(covered),
                )
                if method == config.baseline:
                    continue
                base = [
                    r for r in _select(table_runs, model, config.baseline) if source in accuracies[r.eval_dir].by_source
                ]
                if not base:
                    continue
                paired = _paired(covered, base, accuracies, source, settings, f"{model}/{method}/{source}")
                if paired is not None:
                    comparisons.append(Comparison(model, method, config.baseline, source, paired[0], paired[1]))
    group_rows: list[Comparison] = []
    sizes = sorted({r.group_size for r in config.runs if r.group_size is not None})
    for model in config.models:
        for method in config.methods:
            if method == config.baseline:
                continue
            for source, _ in benchmarks:
                for size in sizes:
                    m_runs = [
                        r
                        for r in _select(config.runs, model, method, size, any_size=False)
                        if source in accuracies[r.eval_dir].by_source
                    ]
                    b_runs = [
                        r
                        for r in _select(config.runs, model, config.baseline, size, any_size=False)
                        if source in accuracies[r.eval_dir].by_source
                    ]
                    if not m_runs or not b_runs:
                        continue
                    paired = _paired(
                        m_runs, b_runs, accuracies, source, settings, f"{model}/{method}/{source}/G={size}"
                    )
                    if paired is not None:
                        group_rows.append(
                            Comparison(model, method, config.baseline, source, paired[0], paired[1], size)
                        )
    return ReportResults(config, settings, benchmarks, cells, comparisons, group_rows)
