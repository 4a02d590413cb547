"""Combine evaluation runs (models x methods x seeds) into the paper's tables and figures.

    python -m evaluation.report --runs runs.yaml --output-dir report/

Writes into ``--output-dir``:

* ``table1.md`` / ``table1.tex``: mean over seeds ± 95% bootstrap CI per model, method, benchmark,
  with a dagger on cells significantly better than the baseline (``--alpha``, ``--correction``);
* ``table1_details.md`` / ``table1_details.tex``: avg@k, pass@k, mean response length, truncation;
* ``paired_tests.md`` / ``paired_tests.tex``: each method minus the baseline, CI and p-value;
* ``group_size.md`` / ``group_size.tex``: method minus baseline per group size G, with p-values;
* ``report.json``: every number above, with seeds, problem counts, k, lengths, truncation, and
  each run's evaluation settings per benchmark (data hash, sampling, k, scorer, backend);
* ``compute_to_threshold.md`` (with ``--reward-threshold``): training steps and tokens until the
  smoothed reward reaches the threshold, and the ratio to the baseline (see training_efficiency.py);
* ``accuracy_<model>.png``, ``group_size_<model>.png`` and ``training_curves_<model>.png`` (training
  reward, held-out accuracy at validation steps, the shared-token residual GSPO's weights would leave
  against the one measured on the gradient, the shared-prefix share of response tokens; with
  ``--curve-metrics``, one panel per metric named; every other metric stays in the training logs).

The runs file format is documented in ``report_inputs.py``. The report refuses inputs that
would mislead (``report_results.py``): runs of one model and benchmark evaluated with other
settings (unless ``--accept-mismatched-settings``), a seed missing a benchmark its siblings
have (unless ``--allow-incomplete``), one evaluation directory given to two runs, malformed or
out-of-range samples, and ``--resample seeds`` with a single seed (every replicate would equal
the observed difference).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dfpo.operations.training_logs import REWARD_KEY, TrainingLog, curve_keys, read_training_log
from evaluation import plots, tables
from evaluation.names import slug
from evaluation.report_inputs import ReportConfig, load_report_config
from evaluation.report_results import (
    CORRECTIONS,
    BootstrapSettings,
    ReportResults,
    SignificanceSettings,
    compute_results,
)
from evaluation.stats import RESAMPLE_AXES
from evaluation.training_efficiency import efficiency_markdown, efficiency_rows


def _ci(c) -> dict[str, float]:
    return {"estimate": c.estimate, "low": c.low, "high": c.high, "level": c.level}


def _comparison_json(results: ReportResults, c) -> dict[str, Any]:
    return {
        "model": c.model,
        "method": c.method,
        "baseline": c.baseline,
        "data_source": c.benchmark,
        "delta": _ci(c.test.delta),
        "p_value": c.test.p_value,
        "p_adjusted": c.p_adjusted,
        "significantly_better": c.better(results.significance.alpha),
        "seeds": c.seeds,
        "n_problems": c.test.n_problems,
    }


def _runs_json(results: ReportResults) -> list[dict[str, Any]]:
    """Each run with, per benchmark, its evaluation directory, k and compared settings."""
    return [
        {
            "model": run.model,
            "method": run.method,
            "seed": run.seed,
            "group_size": run.group_size,
            "entry": run.where,
            "benchmarks": {
                source: {"eval_dir": str(b.eval_dir), "k": b.k, "settings": b.settings}
                for source, b in results.runs[run].items()
            },
        }
        for run in results.config.runs
    ]


def results_json(results: ReportResults) -> dict[str, Any]:
    """Machine-readable form of every number in the tables, and of the settings behind them."""
    return {
        "baseline": results.config.baseline,
        "bootstrap": dataclasses.asdict(results.settings),
        "significance": dataclasses.asdict(results.significance),
        "benchmarks": [{"data_source": s, "title": t} for s, t in results.benchmarks],
        "table1": [
            {
                "model": c.model,
                "method": c.method,
                "data_source": c.benchmark,
                "avg_at_k": _ci(c.ci),
                "pass_at_k": c.pass_at_k,
                "k": c.k,
                "ks": list(c.ks),
                "seeds": c.seeds,
                "n_problems": c.n_problems,
                "mean_response_tokens": c.mean_tokens,
                "truncation_rate": c.truncation,
            }
            for c in results.cells.values()
        ],
        "paired_tests": [_comparison_json(results, c) for c in results.comparisons],
        "group_size": [{**_comparison_json(results, c), "group_size": c.group_size} for c in results.group_size],
        "runs": _runs_json(results),
        "settings_mismatches": results.mismatches,
    }


def _training_logs(config: ReportConfig) -> dict[tuple[str, str], dict[str, TrainingLog]]:
    """Training logs of the Table 1 runs that name one: ``[(model, method)][seed]``."""
    logs: dict[tuple[str, str], dict[str, TrainingLog]] = {}
    for run in config.table_runs():
        if run.train_log is not None:
            logs.setdefault((run.model, run.method), {})[run.seed] = read_training_log(run.train_log)
    return logs


@dataclass(frozen=True)
class EfficiencySettings:
    """The compute-to-threshold table: off unless a threshold is given."""

    threshold: float | None = None
    window: int = 10
    reward_key: str = REWARD_KEY


def write_report(
    config: ReportConfig,
    settings: BootstrapSettings,
    output_dir: Path,
    curve_metrics: Sequence[str] | None = None,
    allow_incomplete: bool = False,
    efficiency: EfficiencySettings | None = None,
    *,
    accept_mismatched_settings: bool = False,
    significance: SignificanceSettings | None = None,
) -> list[Path]:
    """Compute everything and write the files; return their paths."""
    results = compute_results(
        config,
        settings,
        allow_incomplete,
        accept_mismatched_settings=accept_mismatched_settings,
        significance=significance,
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, render in [
        ("table1.md", tables.table1_markdown),
        ("table1.tex", tables.table1_latex),
        ("table1_details.md", tables.table1_detail_markdown),
        ("table1_details.tex", tables.table1_detail_latex),
        ("paired_tests.md", tables.paired_markdown),
        ("paired_tests.tex", tables.paired_latex),
        ("group_size.md", tables.group_size_markdown),
        ("group_size.tex", tables.group_size_latex),
    ]:
        path = output_dir / name
        path.write_text(render(results), encoding="utf-8")
        written.append(path)
    payload = results_json(results)
    logs = _training_logs(config)
    if efficiency is not None and efficiency.threshold is not None:
        if not logs:
            raise ValueError(f"{config.source}: --reward-threshold needs runs with a train_log")
        rows = efficiency_rows(logs, config.baseline, efficiency.threshold, efficiency.window, efficiency.reward_key)
        path = output_dir / "compute_to_threshold.md"
        path.write_text(
            efficiency_markdown(rows, config.baseline, efficiency.threshold, efficiency.window, efficiency.reward_key),
            encoding="utf-8",
        )
        written.append(path)
        payload["compute_to_threshold"] = {
            "threshold": efficiency.threshold,
            "window": efficiency.window,
            "reward_key": efficiency.reward_key,
            "rows": [
                {
                    "model": r.model,
                    "method": r.method,
                    "mean_steps": r.mean_steps,
                    "mean_tokens": r.mean_tokens,
                    "ratio_to_baseline": r.ratio,
                    "ratio_unit": r.ratio_unit,
                    "per_seed": {seed: {"step": c.step, "tokens": c.tokens} for seed, c in r.crossings.items()},
                }
                for r in rows
            ],
        }
    path = output_dir / "report.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    written.append(path)
    for model in config.models:
        written.append(plots.accuracy_bars(results, model, output_dir / f"accuracy_{slug(model)}.png"))
        group_plot = plots.group_size_plot(results, model, output_dir / f"group_size_{slug(model)}.png")
        if group_plot is not None:
            written.append(group_plot)
        model_logs = {method: list(by_seed.values()) for (m, method), by_seed in logs.items() if m == model}
        if model_logs and curve_metrics:
            keys = plots.metric_keys(model_logs, lambda log: curve_keys(log, tuple(curve_metrics)))
            path = output_dir / f"training_curves_{slug(model)}.png"
            written.append(plots.training_curves(model_logs, keys, model, path))
        elif model_logs:
            path = plots.training_story(model_logs, model, output_dir / f"training_curves_{slug(model)}.png")
            if path is not None:
                written.append(path)
    return written


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(prog="python -m evaluation.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", required=True, help="YAML/JSON file listing the runs (see report_inputs.py)")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--baseline", help="baseline method (overrides the runs file)")
    parser.add_argument("--level", type=float, default=0.95, help="confidence level of the intervals")
    parser.add_argument("--n-resamples", type=int, default=10_000)
    parser.add_argument(
        "--resample",
        choices=RESAMPLE_AXES,
        default="both",
        help="what the bootstrap resamples: problems, training seeds, or both (default); seeds needs at "
        "least 2 seeds per cell",
    )
    parser.add_argument("--bootstrap-seed", type=int, default=0)
    parser.add_argument(
        "--curve-metrics",
        nargs="+",
        help="training-log keys to plot, one panel each, in training_curves_<model>.png (default: reward, "
        "held-out accuracy, the shared-token residual GSPO's weights would leave against the measured one, "
        "the shared-prefix share)",
    )
    parser.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="report runs that have not finished, and cells where some seeds lack a benchmark (warned)",
    )
    parser.add_argument(
        "--accept-mismatched-settings",
        action="store_true",
        help="compare runs of one model and benchmark evaluated with different data, sampling, k, scorer or "
        "backend (warned, and listed in report.json); refused by default",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.01,
        help="significance level of the paired tests; Table 1 marks cells significantly better than the "
        "baseline (default 0.01, as in the paper)",
    )
    parser.add_argument(
        "--correction",
        choices=CORRECTIONS,
        default="none",
        help="multiple-comparison correction of the p-values: holm, over the methods x benchmarks of each model",
    )
    parser.add_argument(
        "--reward-threshold",
        type=float,
        help="also write compute_to_threshold.md: steps and tokens until the smoothed training reward reaches this",
    )
    parser.add_argument("--reward-window", type=int, default=10, help="moving-average window (logged steps)")
    parser.add_argument("--reward-key", default=REWARD_KEY, help="training-log metric used as the reward")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m evaluation.report``; input errors exit with their message."""
    args = build_parser().parse_args(argv)
    settings = BootstrapSettings(
        level=args.level, n_resamples=args.n_resamples, resample=args.resample, rng_seed=args.bootstrap_seed
    )
    efficiency = EfficiencySettings(args.reward_threshold, args.reward_window, args.reward_key)
    try:
        written = write_report(
            load_report_config(args.runs, baseline=args.baseline),
            settings,
            Path(args.output_dir),
            args.curve_metrics,
            args.allow_incomplete,
            efficiency,
            accept_mismatched_settings=args.accept_mismatched_settings,
            significance=SignificanceSettings(alpha=args.alpha, correction=args.correction),
        )
    except (ValueError, FileNotFoundError) as exc:  # the messages name the input and what to do
        raise SystemExit(f"error: {exc}") from None
    print((Path(args.output_dir) / "table1.md").read_text())
    print("wrote:\n" + "\n".join(f"  {p}" for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
