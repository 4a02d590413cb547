"""PNG figures: accuracy bars with bootstrap CIs, group-size deltas, and training curves (what a reader
of a training run looks at: :func:`training_story`; any logged metric: :func:`training_curves`).

matplotlib runs with the non-interactive Agg backend, so figures render on headless nodes.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from dfpo.operations.training_logs import GSPO_WEIGHTS_RESIDUAL, MEASURED_RESIDUAL, TrainingLog
from evaluation.report_results import ReportResults


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _seeds_phrase(results: ReportResults, model: str) -> str:
    """ "seed 1" when every bar of ``model`` is one and the same seed, else "mean over N seeds"."""
    seeds = {tuple(cell.seeds) for cell in results.cells.values() if cell.model == model}
    if len(seeds) == 1 and len(next(iter(seeds))) == 1:
        return f"seed {next(iter(seeds))[0]}"
    most = max((len(s) for s in seeds), default=0)
    return f"mean over {most} seeds" if most > 1 else "one seed per method"


def accuracy_bars(results: ReportResults, model: str, path: Path) -> Path:
    """Grouped bars (benchmarks x methods) of the mean over seeds with asymmetric CI error bars."""
    plt = _pyplot()
    methods = [m for m in results.config.methods if any((model, m, s) in results.cells for s, _ in results.benchmarks)]
    n_b, n_m = len(results.benchmarks), len(methods)
    width = 0.8 / max(n_m, 1)
    fig_width = max(5.0, 1.6 * n_b * max(n_m, 2) / 2)
    fig, ax = plt.subplots(figsize=(fig_width, 3.8))
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
    # about 8 characters of the title's font per inch of figure: longer lines are wrapped
    ax.set_title(
        _wrapped(
            f"{model}: {_seeds_phrase(results, model)}, {100 * results.settings.level:.0f}% bootstrap CI",
            int(8 * fig_width),
        )
    )
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


def _mean_and_range(seed_logs: list[TrainingLog], key: str, every_step: bool = False):
    """(steps, mean, min, max, n) over the seeds that logged ``key``, on the steps all of them
    logged (``every_step``: on every step any of them logged, over the seeds that logged it there: a
    metric logged on some steps only); None when no seed logged it or they share no step."""
    series = [log[key] for log in seed_logs if key in log]
    if not series:
        return None
    if every_step:
        steps = np.unique(np.concatenate([s.steps for s in series]))
        values = np.full((len(series), steps.size), np.nan)
        for row, s in zip(values, series, strict=True):
            row[np.searchsorted(steps, s.steps)] = s.values
        return steps, np.nanmean(values, axis=0), np.nanmin(values, axis=0), np.nanmax(values, axis=0), len(series)
    common = series[0].steps
    for s in series[1:]:
        common = np.intersect1d(common, s.steps)
    if common.size == 0:
        return None
    values = np.stack([s.values[np.searchsorted(s.steps, common)] for s in series])
    return common, np.nanmean(values, axis=0), np.nanmin(values, axis=0), np.nanmax(values, axis=0), len(series)


def metric_keys(logs: dict[str, list[TrainingLog]], keys_of) -> list[str]:
    """``keys_of(log)`` over every seed's log of every method, each key once, in order of first appearance."""
    return list(dict.fromkeys(k for seed_logs in logs.values() for log in seed_logs for k in keys_of(log)))


def _panel_grid(plt, count: int, width: float, height: float):
    """A figure of ``count`` panels of ``width`` x ``height`` inches, three per row (the unused
    places hidden); returns the figure and the panels' axes."""
    cols = min(3, count)
    rows = (count + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, layout="constrained")
    for ax in axes.ravel()[count:]:
        ax.set_visible(False)
    return fig, axes.ravel()[:count]


def _draw(ax, steps, mean, low, high, n, label, color=None, linestyle="-", marker=None):
    (line,) = ax.plot(
        steps, mean, label=label, linewidth=1.3, color=color, linestyle=linestyle, marker=marker, markersize=4
    )
    if n > 1:
        ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    return line.get_color()


def _wrapped(text: str, width: int = 34) -> str:
    """``text`` on lines of at most ``width`` characters where it can be, broken after a ``/`` or
    at a space (a metric name such as ``actor/dfpo/cancellation_residual_before`` stays readable)."""
    pieces = re.findall(r"[^/ ]*/|[^/ ]+| ", text)
    lines, line = [], ""
    for piece in pieces:
        if line and len(line) + len(piece) > width:
            lines.append(line.rstrip())
            line = piece.lstrip()
        else:
            line += piece
    lines.append(line.rstrip())
    return "\n".join(item for item in lines if item) or text


def training_curves(logs: dict[str, list[TrainingLog]], keys: list[str], title: str, path: Path) -> Path:
    """One panel per metric; per method the mean over seeds (on steps every seed logged) and the
    min-max range across seeds as a band. Panel titles are the metric names, wrapped so that long
    ones do not run into their neighbours."""
    if not keys:
        raise ValueError(f"{title}: none of the requested metrics is in the training logs")
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, panels = _panel_grid(plt, len(keys), 4.4, 3.2)
    for ax, key in zip(panels, keys, strict=True):
        for method, seed_logs in logs.items():
            curve = _mean_and_range(seed_logs, key)
            if curve is not None:
                _draw(ax, *curve, label=f"{method} (n={curve[4]})")
        ax.set_title(_wrapped(key), fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    panels[0].legend(fontsize=7)
    fig.suptitle(title)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


SHARED_PREFIX_KEY = "actor/dfpo/shared_prefix_token_frac"
RESIDUAL_TITLE = "Shared-token residual: GSPO's weights would leave (solid), measured on the gradient (dashed)"


_VALIDATION_MEAN = re.compile(r"^val-core/([^/]+)/(acc|reward)/mean@(\d+)$")


def validation_keys(log: TrainingLog) -> list[str]:
    """verl's mean validation accuracy per data source (``val-core/<source>/acc/mean@<n>``); the
    mean validation reward where no accuracy is logged."""
    matches = [(m.group(1), m.group(2), k) for k in log if (m := _VALIDATION_MEAN.match(k))]
    keys = sorted(k for _, kind, k in matches if kind == "acc")
    covered = {source for source, kind, _ in matches if kind == "acc"}
    return keys + sorted(k for source, kind, k in matches if kind == "reward" and source not in covered)


def training_story(logs: dict[str, list[TrainingLog]], title: str, path: Path) -> Path | None:
    """What a reader of a training run looks at, one panel each: training reward, held-out accuracy at
    the validation steps, the learning tax (the residual GSPO's weights would leave on the group's
    shared tokens against the one measured on the gradient; log scale, exact zeros not drawn) and the
    share of response tokens it concerns (the shared prefix). Per method the mean over seeds and the
    min-max band (the measured residual: over the seeds that measured it at a step). Every other
    metric stays in the training logs (``--curve-metrics`` draws any of them). None when the logs
    hold none of these metrics."""
    from dfpo.operations.training_logs import REWARD_KEY

    val = metric_keys(logs, validation_keys)
    panels = [("Training reward (mean score)", [REWARD_KEY], False)]
    panels += [(f"Validation {k.split('/')[2]}, {k.split('/')[1]} ({k.rsplit('/', 1)[-1]})", [k], False) for k in val]
    panels += [
        (RESIDUAL_TITLE, [GSPO_WEIGHTS_RESIDUAL, MEASURED_RESIDUAL], True),
        ("Shared-prefix share of response tokens", [SHARED_PREFIX_KEY], False),
    ]
    sparse = {MEASURED_RESIDUAL}
    present = [
        p for p in panels if any(_mean_and_range(sl, k, k in sparse) is not None for sl in logs.values() for k in p[1])
    ]
    if not present:
        return None
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, axes = _panel_grid(plt, len(present), 4.6, 3.3)
    colors: dict[str, str] = {}
    for ax, (panel_title, keys, log_scale) in zip(axes, present, strict=True):
        for method, seed_logs in logs.items():
            for key, style in zip(keys, ("-", "--"), strict=False):
                curve = _mean_and_range(seed_logs, key, key in sparse)
                if curve is None:
                    continue
                steps, mean, low, high, n = curve
                if log_scale:
                    keep = mean > 0
                    steps, mean, low, high = steps[keep], mean[keep], np.maximum(low[keep], 1e-12), high[keep]
                    if steps.size == 0:
                        continue
                label = f"{method} (n={n})" if method not in colors else None
                marker = "o" if key.startswith("val-core/") or key in sparse or steps.size < 3 else None
                colors[method] = _draw(ax, steps, mean, low, high, n, label, colors.get(method), style, marker)
        if log_scale:
            ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(_wrapped(panel_title, 40), fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    handles, labels = [], []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)), fontsize=8)
    fig.suptitle(title)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
