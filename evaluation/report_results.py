"""Compute the report's numbers: Table 1 cells, paired tests against the baseline, group-size deltas.

Before any number is computed the inputs are checked, and the report stops with an error
naming the runs file line (or, where a flag allows it, warns at that line):

* runs of one model on one benchmark must share their evaluation settings (data hash,
  sampling, k, scorer and version, backend; ``comparability.py``) unless
  ``accept_mismatched_settings``; accepted mismatches are listed in the results;
* every seed of a cell must cover the benchmark when any seed does, unless ``allow_incomplete``;
* the bootstrap must resample an axis with more than one entry (``stats.check_resampling``).

Significance: a comparison is significant when its p-value (Holm-adjusted with
``correction="holm"``, over the methods x benchmarks of one model, and separately over the
methods x benchmarks x group sizes of the group-size table) is below ``alpha``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from evaluation.benchmark_runs import BenchmarkRun, load_run, run_matrix
from evaluation.comparability import describe_difference, differing_keys
from evaluation.report_inputs import ReportConfig, RunSpec
from evaluation.stats import (
    BootstrapCI,
    DegenerateBootstrapError,
    PairedTest,
    bootstrap_ci,
    holm_adjust,
    paired_bootstrap_test,
)

CORRECTIONS = ("none", "holm")


@dataclass(frozen=True)
class BootstrapSettings:
    """How every interval and test of one report is computed."""

    level: float = 0.95
    n_resamples: int = 10_000
    resample: str = "both"
    rng_seed: int = 0


@dataclass(frozen=True)
class SignificanceSettings:
    """When a difference from the baseline counts as significant (and is marked in Table 1)."""

    alpha: float = 0.01
    """Threshold on the (adjusted) p-value; 0.01 as in the paper's Table 1."""
    correction: str = "none"
    """``none`` or ``holm`` (family: the methods x benchmarks of one model)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.correction not in CORRECTIONS:
            raise ValueError(f"correction must be one of {CORRECTIONS}, got {self.correction!r}")


@dataclass(frozen=True)
class Cell:
    """One Table 1 entry: a model, a method, a benchmark, over its seeds."""

    model: str
    method: str
    benchmark: str
    ci: BootstrapCI
    seeds: list[str]
    n_problems: int
    ks: tuple[int, ...]
    """The distinct k of the cell's runs (one unless mismatched settings were accepted)."""
    pass_at_k: float
    """Mean over seeds and problems of pass@k with n = k (a problem passes when a sample is fully correct)."""
    mean_tokens: float
    truncation: float

    @property
    def k(self) -> int | None:
        """The cell's k, or None when its runs used different k."""
        return self.ks[0] if len(self.ks) == 1 else None


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
    p_adjusted: float | None = None
    """Holm-adjusted p-value, when a correction was asked for."""

    @property
    def p_reported(self) -> float:
        """The p-value the tables show and significance uses (adjusted when corrected)."""
        return self.test.p_value if self.p_adjusted is None else self.p_adjusted

    def better(self, alpha: float) -> bool:
        """Significantly better than the baseline: positive difference with p below ``alpha``."""
        return self.test.delta.estimate > 0 and self.p_reported < alpha


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
    significance: SignificanceSettings = SignificanceSettings()
    runs: dict[RunSpec, dict[str, BenchmarkRun]] = dataclasses.field(default_factory=dict)
    mismatches: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Accepted settings mismatches: model, benchmark, the two runs and what differs."""

    def comparison(self, model: str, method: str, benchmark: str) -> Comparison | None:
        """The paired test of a Table 1 cell against the baseline, if any."""
        for c in self.comparisons:
            if (c.model, c.method, c.benchmark) == (model, method, benchmark):
                return c
        return None


def _select(
    runs: list[RunSpec], model: str, method: str, group_size: int | None = None, any_size: bool = True
) -> list[RunSpec]:
    chosen = [r for r in runs if r.model == model and r.method == method and (any_size or r.group_size == group_size)]
    return sorted(chosen, key=lambda r: r.seed)


class _Computation:
    """State shared by the steps of :func:`compute_results`."""

    def __init__(
        self, config: ReportConfig, settings: BootstrapSettings, loaded: dict[RunSpec, dict[str, BenchmarkRun]]
    ) -> None:
        self.config = config
        self.settings = settings
        self.loaded = loaded

    def _bootstrap(self, label: str, compute):
        try:
            return compute()
        except DegenerateBootstrapError as exc:
            raise DegenerateBootstrapError(f"{self.config.source}: {label}: {exc}") from None

    def covering(self, runs: list[RunSpec], source: str, allow_incomplete: bool, label: str) -> list[RunSpec]:
        """The runs that hold ``source``; a seed without it is an error unless ``allow_incomplete``."""
        covered = [r for r in runs if source in self.loaded[r]]
        missing = [r for r in runs if source not in self.loaded[r]]
        if covered and missing:
            names = ", ".join(f"{r.where} (seed {r.seed})" for r in missing)
            message = (
                f"{label}: {names} have no {source!r} problems while seeds {[r.seed for r in covered]} do; "
                "evaluate the missing seeds on it"
            )
            if not allow_incomplete:
                raise ValueError(f"{message}, or pass --allow-incomplete to report the cell over fewer seeds")
            for run in missing:
                self.config.warn(run, f"{message}; the cell is reported over {len(covered)} seed(s)")
        return covered

    def cell(self, model: str, method: str, source: str, runs: list[RunSpec]) -> Cell:
        s = self.settings
        pids, accuracy = run_matrix(runs, self.loaded, source)
        _, solved = run_matrix(runs, self.loaded, source, "solved")
        label = f"{model}/{method}/{source} (seeds {[r.seed for r in runs]})"
        ci = self._bootstrap(
            label,
            lambda: bootstrap_ci(
                accuracy, level=s.level, n_resamples=s.n_resamples, resample=s.resample, rng_seed=s.rng_seed
            ),
        )
        results = [self.loaded[r][source] for r in runs]
        return Cell(
            model,
            method,
            source,
            ci,
            [r.seed for r in runs],
            len(pids),
            tuple(sorted({b.k for b in results})),
            pass_at_k=float(solved.mean()),
            mean_tokens=sum(b.mean_tokens for b in results) / len(results),
            truncation=sum(b.truncation for b in results) / len(results),
        )

    def paired(
        self, method_runs: list[RunSpec], base_runs: list[RunSpec], source: str, label: str
    ) -> tuple[PairedTest, list[str]] | None:
        by_seed_m = {r.seed: r for r in method_runs}
        by_seed_b = {r.seed: r for r in base_runs}
        common = sorted(set(by_seed_m) & set(by_seed_b))
        if not common:
            self.config.warn(method_runs[0], f"{label}: no seed label is shared with the baseline; no paired test")
            return None
        unpaired = sorted(set(by_seed_m) ^ set(by_seed_b))
        if unpaired:
            run = next(r for r in [*method_runs, *base_runs] if r.seed in unpaired)
            self.config.warn(run, f"{label}: seeds {unpaired} have no partner and are left out of the paired test")
        m_runs = [by_seed_m[seed] for seed in common]
        b_runs = [by_seed_b[seed] for seed in common]
        pids_m, x_m = run_matrix(m_runs, self.loaded, source)
        pids_b, x_b = run_matrix(b_runs, self.loaded, source)
        if pids_m != pids_b:
            raise ValueError(
                f"{m_runs[0].where} and {b_runs[0].where}: {label}: the method and the baseline were evaluated on "
                f"different {source!r} problems"
            )
        s = self.settings
        test = self._bootstrap(
            f"{label} (seeds {common})",
            lambda: paired_bootstrap_test(
                x_m, x_b, level=s.level, n_resamples=s.n_resamples, resample=s.resample, rng_seed=s.rng_seed
            ),
        )
        return test, common


def check_settings(
    config: ReportConfig, loaded: dict[RunSpec, dict[str, BenchmarkRun]], accept: bool
) -> list[dict[str, Any]]:
    """Runs of one model on one benchmark must share their settings; return accepted mismatches."""
    mismatches = []
    for model in config.models:
        runs = [r for r in config.runs if r.model == model]
        sources = list(dict.fromkeys(src for r in runs for src in loaded[r]))
        for source in sources:
            holders = [r for r in runs if source in loaded[r]]
            reference = holders[0]
            for run in holders[1:]:
                a, b = loaded[reference][source].settings, loaded[run][source].settings
                keys = differing_keys(a, b)
                if not keys:
                    continue
                message = (
                    f"{model}/{source}: {run.where} ({run.label}) was evaluated with other settings than "
                    f"{reference.where} ({reference.label}): {describe_difference(a, b)}"
                )
                if not accept:
                    raise ValueError(
                        f"{message}. Re-evaluate the runs with the same settings, or pass "
                        "--accept-mismatched-settings to compare them anyway (listed in report.json)"
                    )
                config.warn(run, message)
                mismatches.append(
                    {
                        "model": model,
                        "data_source": source,
                        "run": run.where,
                        "reference": reference.where,
                        "differing": keys,
                        "detail": describe_difference(a, b),
                    }
                )
    return mismatches


def _holm(comparisons: list[Comparison]) -> list[Comparison]:
    """Holm-adjust the p-values of each model's comparisons as one family."""
    out = list(comparisons)
    for model in dict.fromkeys(c.model for c in comparisons):
        idx = [i for i, c in enumerate(comparisons) if c.model == model]
        adjusted = holm_adjust([comparisons[i].test.p_value for i in idx])
        for i, p in zip(idx, adjusted, strict=True):
            out[i] = dataclasses.replace(comparisons[i], p_adjusted=float(p))
    return out


def compute_results(
    config: ReportConfig,
    settings: BootstrapSettings,
    allow_incomplete: bool = False,
    *,
    accept_mismatched_settings: bool = False,
    significance: SignificanceSettings | None = None,
) -> ReportResults:
    """Load every run once, check the inputs, and compute the cells, comparisons and group-size deltas."""
    significance = significance or SignificanceSettings()
    loaded = {run: load_run(run, allow_incomplete) for run in config.runs}
    found = list(dict.fromkeys(src for per in loaded.values() for src in sorted(per)))
    if config.benchmarks:
        absent = [b for b in config.benchmarks if b not in found]
        if absent:
            raise ValueError(f"{config.source}: benchmark(s) {absent} appear in no run; data sources found: {found}")
        benchmarks = list(config.benchmarks.items())
    else:
        benchmarks = [(src, src) for src in found]
    mismatches = check_settings(config, loaded, accept_mismatched_settings)
    work = _Computation(config, settings, loaded)
    table_runs = config.table_runs()
    cells: dict[tuple[str, str, str], Cell] = {}
    comparisons: list[Comparison] = []
    for model in config.models:
        for method in config.methods:
            runs = _select(table_runs, model, method)
            if not runs:
                continue
            for source, _ in benchmarks:
                label = f"{model}/{method}/{source}"
                covered = work.covering(runs, source, allow_incomplete, label)
                if not covered:
                    continue
                cells[(model, method, source)] = work.cell(model, method, source, covered)
                if method == config.baseline:
                    continue
                base = [r for r in _select(table_runs, model, config.baseline) if source in loaded[r]]
                if not base:
                    continue
                paired = work.paired(covered, base, source, label)
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
                    m_runs = [r for r in _select(config.runs, model, method, size, False) if source in loaded[r]]
                    b_runs = [
                        r for r in _select(config.runs, model, config.baseline, size, False) if source in loaded[r]
                    ]
                    if not m_runs or not b_runs:
                        continue
                    paired = work.paired(m_runs, b_runs, source, f"{model}/{method}/{source}/G={size}")
                    if paired is not None:
                        group_rows.append(
                            Comparison(model, method, config.baseline, source, paired[0], paired[1], size)
                        )
    if significance.correction == "holm":
        comparisons, group_rows = _holm(comparisons), _holm(group_rows)
    return ReportResults(config, settings, benchmarks, cells, comparisons, group_rows, significance, loaded, mismatches)
