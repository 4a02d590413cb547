"""PNG figures: accuracy bars with bootstrap CIs, group-size deltas, and training curves.

matplotlib runs with the non-interactive Agg backend, so figures render on headless nodes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dfpo.evaluation.report_results import ReportResults
from dfpo.verl_logs import TrainingLog


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def accuracy_bars(results: ReportResults, model: str, path: Path) -> Path:
    """Grouped bars (benchmarks x methods) of the mean over seeds with asymmetric CI error bars."""
    plt = _pyplot()
    methods = [m for m in results.config.methods if any((model, m, s) in results.cells for s, _ in results.benchmarks)]
    n_b, n_m = len(results.benchmarks), len(methods)
    width = 0.8 / max(n_m, 1)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * n_b * max(n_m, 2) / 2), 3.8))
    for j, method in enumerate(methods):
        xs, means, lows, highs = [], [], [], []
        for i, (src, _) in enumerate(results.benchmarks):
            cell = results.cells.get((model, method, src))
            if cell is None:
                continue
            xs.append(i - 0.4 + width * (j + 0.5))
            means.append(100 * cell.ci.estimate)
            lows.append(100 * (cell.ci.estimate - cell.ci.low))
            highs.append(100 * (cell.ci.high - cell.ci.estimate))
        label = f"{method} (baseline)" if method == results.config.baseline else method
        ax.bar(xs, means, width=width * 0.95, yerr=[lows, highs], capsize=3, label=label)
    ax.set_xticks(range(n_b), [title for _, title in results.benchmarks])
    ks = sorted({k for c in results.cells.values() if c.model == model for k in c.ks})
    ax.set_ylabel(f"avg@{ks[0] if len(ks) == 1 else 'k'} (%)")
    ax.set_title(f"{model}: mean over seeds, {100 * results.settings.level:.0f}% bootstrap CI")
    ax.legend(fontsize=8, loc="best")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path


def group_size_plot(results: ReportResults, model: str, path: Path) -> Path | None:
    """Method minus baseline against group size, with CI error bars; None if there is nothing to draw."""
    rows = [c for c in results.group_size if c.model == model]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.0, 3.6))
    titles = dict(results.benchmarks)
    for method in results.config.methods:
        for src, _ in results.benchmarks:
            sel = sorted((c for c in rows if c.method == method and c.benchmark == src), key=lambda c: c.group_size)
            if not sel:
                continue
            g = [c.group_size for c in sel]
            d = np.array([100 * c.test.delta.estimate for c in sel])
            lo = d - np.array([100 * c.test.delta.low for c in sel])
            hi = np.array([100 * c.test.delta.high for c in sel]) - d
            ax.errorbar(g, d, yerr=[lo, hi], marker="o", capsize=3, label=f"{method}, {titles[src]}")
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xscale("log", base=2)
    sizes = sorted({c.group_size for c in rows})
    ax.set_xticks(sizes, [str(g) for g in sizes])
    ax.minorticks_off()
    ax.set_xlabel("group size G")
    ax.set_ylabel(f"Δ vs {results.config.baseline} (pp)")
    ax.set_title(model)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path


def training_curves(logs: dict[str, list[TrainingLog]], keys: list[str], title: str, path: Path) -> Path:
    """One panel per metric; per method the mean over seeds (on steps every seed logged) and the
    min-max range across seeds as a band."""
    if not keys:
        raise ValueError(f"{title}: none of the requested metrics is in the training logs")
    plt = _pyplot()
    cols = min(3, len(keys))
    rows = (len(keys) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax, key in zip(axes.ravel(), keys, strict=False):
        for method, seed_logs in logs.items():
            series = [log[key] for log in seed_logs if key in log]
            if not series:
                continue
            common = series[0].steps
            for s in series[1:]:
                common = np.intersect1d(common, s.steps)
            if common.size == 0:
                continue
            values = np.stack([s.values[np.searchsorted(s.steps, common)] for s in series])
            mean = np.nanmean(values, axis=0)
            (line,) = ax.plot(common, mean, label=f"{method} (n={len(series)})", linewidth=1.3)
            if len(series) > 1:
                ax.fill_between(
                    common,
                    np.nanmin(values, axis=0),
                    np.nanmax(values, axis=0),
                    color=line.get_color(),
                    alpha=0.2,
                    linewidth=0,
                )
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(keys) :]:
        ax.set_visible(False)
    axes.ravel()[0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
