"""Render the report's tables as Markdown and LaTeX (booktabs), in the paper's layouts.

* Table 1: rows grouped by model, one row per method, one column per benchmark; cells are
  ``mean ± half-width`` of the 95% bootstrap CI in percent; the best mean per model and
  benchmark is bold, the baseline row is marked "(baseline)".
* Paired tests: method minus baseline in percentage points, its CI and the p-value.
* Group size (the paper's Table 3): method minus baseline per G, one row per benchmark.
"""

from __future__ import annotations

from collections.abc import Callable

from dfpo.evaluation.report_results import Cell, Comparison, ReportResults

DASH = "–"
_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"$<$",
    ">": r"$>$",
    "±": r"$\pm$",
    "Δ": r"$\Delta$",
    "−": r"$-$",
    "–": "--",
}


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters in a label."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def format_p(p: float, n_resamples: int) -> str:
    """p-value text; at the resolution limit 1/(B+1) it is shown as an upper bound."""
    floor = 1.0 / (n_resamples + 1)
    if p <= floor * 1.0000001:
        return f"p<{_sig(2 * floor)}"
    if p < 0.001:
        return f"p={p:.1e}"
    return f"p={p:.3f}"


def _sig(x: float) -> str:
    return f"{x:.0e}" if x < 0.001 else f"{x:.3f}"


def _pct(x: float, signed: bool = False) -> str:
    return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"


def _ks(results: ReportResults) -> str:
    ks = sorted({c.k for c in results.cells.values()})
    return f"avg@{ks[0]}" if len(ks) == 1 else "avg@k (k = " + ", ".join(map(str, ks)) + ")"


def _method_label(results: ReportResults, method: str) -> str:
    return f"{method} (baseline)" if method == results.config.baseline else method


def _best(results: ReportResults, model: str, source: str) -> float | None:
    means = [c.ci.estimate for (m, _, s), c in results.cells.items() if m == model and s == source]
    return max(means) if means else None


def _rows(results: ReportResults) -> list[tuple[str, str, list[Cell | None]]]:
    rows = []
    for model in results.config.models:
        for method in results.config.methods:
            cells = [results.cells.get((model, method, src)) for src, _ in results.benchmarks]
            if any(c is not None for c in cells):
                rows.append((model, method, cells))
    return rows


def _caption(results: ReportResults) -> str:
    s = results.settings
    axes = {"both": "problems and seeds", "problems": "problems", "seeds": "seeds"}[s.resample]
    return (
        f"{_ks(results)} in %, mean over training seeds ± half-width of the {100 * s.level:.0f}% percentile "
        f"bootstrap CI ({s.n_resamples} resamples of {axes}); bold: best mean per model and benchmark."
    )


def _cell_text(results: ReportResults, cell: Cell | None, bold: Callable[[str], str]) -> str:
    if cell is None:
        return DASH
    text = f"{_pct(cell.ci.estimate)} ± {_pct(cell.ci.half_width)}"
    best = _best(results, cell.model, cell.benchmark)
    return bold(text) if best is not None and abs(cell.ci.estimate - best) < 1e-12 else text


def table1_markdown(results: ReportResults) -> str:
    """Table 1 as a Markdown table with a caption line."""
    header = ["Model", "Method"] + [f"{title} (%)" for _, title in results.benchmarks]
    lines = [
        f"**Table 1.** {_caption(results)}",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] * 2 + ["---:"] * len(results.benchmarks)) + "|",
    ]
    previous = None
    for model, method, cells in _rows(results):
        shown = model if model != previous else ""
        previous = model
        texts = [_cell_text(results, c, lambda t: f"**{t}**") for c in cells]
        lines.append("| " + " | ".join([shown, _method_label(results, method), *texts]) + " |")
    seeds = sorted({len(c.seeds) for c in results.cells.values()})
    lines += ["", f"Seeds per cell: {', '.join(map(str, seeds))}."]
    return "\n".join(lines) + "\n"


def _latex_table_head(caption: str, label: str | None, header: list[str]) -> list[str]:
    """Opening lines of a booktabs table whose first row is ``header`` (one left column, the rest centred)."""
    lines = [r"\begin{table}[t]", r"\centering", r"\small", rf"\caption{{{latex_escape(caption)}}}"]
    if label is not None:
        lines.append(rf"\label{{{label}}}")
    lines += [r"\begin{tabular}{l" + "c" * (len(header) - 1) + "}", r"\toprule", " & ".join(header) + r" \\"]
    return lines


def table1_latex(results: ReportResults) -> str:
    """Table 1 as a LaTeX table (needs \\usepackage{booktabs})."""
    n = len(results.benchmarks)
    lines = _latex_table_head(
        _caption(results), "tab:main", ["Model variant"] + [latex_escape(f"{t} (%)") for _, t in results.benchmarks]
    )
    previous = None
    for model, method, cells in _rows(results):
        if model != previous:
            lines += [r"\midrule", rf"\multicolumn{{{n + 1}}}{{l}}{{\textit{{{latex_escape(model)}}}}} \\"]
            previous = model
        texts = [_cell_text(results, c, lambda t: rf"\textbf{{{latex_escape(t)}}}") for c in cells]
        texts = [t if t.startswith("\\textbf") else latex_escape(t) for t in texts]
        lines.append(latex_escape(_method_label(results, method)) + " & " + " & ".join(texts) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _comparison_text(c: Comparison, n_resamples: int) -> str:
    d = c.test.delta
    return (
        f"{_pct(d.estimate, True)} [{_pct(d.low, True)}, {_pct(d.high, True)}] {format_p(c.test.p_value, n_resamples)}"
    )


def paired_markdown(results: ReportResults) -> str:
    """Paired bootstrap tests of every method against the baseline, per benchmark."""
    s = results.settings
    header = ["Model", f"Method − {results.config.baseline}"] + [f"{t} Δ (pp)" for _, t in results.benchmarks]
    lines = [
        f"**Paired bootstrap tests.** Difference in {_ks(results)} (percentage points) with its "
        f"{100 * s.level:.0f}% CI and two-sided p-value; problems and seeds resampled jointly for both arms "
        f"({s.n_resamples} resamples, seeds paired by label).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] * 2 + ["---:"] * len(results.benchmarks)) + "|",
    ]
    index = {(c.model, c.method, c.benchmark): c for c in results.comparisons}
    previous = None
    for model in results.config.models:
        for method in results.config.methods:
            found = [index.get((model, method, src)) for src, _ in results.benchmarks]
            if all(f is None for f in found):
                continue
            shown = model if model != previous else ""
            previous = model
            texts = [DASH if f is None else _comparison_text(f, s.n_resamples) for f in found]
            lines.append("| " + " | ".join([shown, method, *texts]) + " |")
    return "\n".join(lines) + "\n"


def paired_latex(results: ReportResults) -> str:
    """The paired tests as a LaTeX table."""
    s = results.settings
    n = len(results.benchmarks)
    index = {(c.model, c.method, c.benchmark): c for c in results.comparisons}
    caption = (
        f"Paired bootstrap tests against {results.config.baseline}: difference in percentage points, "
        f"{100 * s.level:.0f}% CI, two-sided p-value."
    )
    lines = _latex_table_head(
        caption, "tab:paired", ["Method"] + [latex_escape(f"{t} Δ (pp)") for _, t in results.benchmarks]
    )
    previous = None
    for model in results.config.models:
        for method in results.config.methods:
            found = [index.get((model, method, src)) for src, _ in results.benchmarks]
            if all(f is None for f in found):
                continue
            if model != previous:
                lines += [r"\midrule", rf"\multicolumn{{{n + 1}}}{{l}}{{\textit{{{latex_escape(model)}}}}} \\"]
                previous = model
            texts = [DASH if f is None else latex_escape(_comparison_text(f, s.n_resamples)) for f in found]
            lines.append(latex_escape(method) + " & " + " & ".join(texts) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _group_blocks(
    results: ReportResults,
) -> list[tuple[str, str, list[int], list[tuple[str, list[Comparison | None]]]]]:
    sizes = sorted({c.group_size for c in results.group_size if c.group_size is not None})
    index = {(c.model, c.method, c.benchmark, c.group_size): c for c in results.group_size}
    blocks = []
    for model in results.config.models:
        for method in results.config.methods:
            rows = []
            for src, title in results.benchmarks:
                found = [index.get((model, method, src, g)) for g in sizes]
                if any(f is not None for f in found):
                    rows.append((title, found))
            if rows:
                blocks.append((model, method, sizes, rows))
    return blocks


def group_size_markdown(results: ReportResults) -> str:
    """The paper's Table 3 layout: method minus baseline per group size G."""
    s = results.settings
    lines = [
        f"**Group size.** {_ks(results)} of the method minus {results.config.baseline} (percentage points) "
        "per group size G, with the paired-bootstrap p-value."
    ]
    blocks = _group_blocks(results)
    if not blocks:
        return "\n".join(lines + ["", "No runs with group_size on both the method and the baseline."]) + "\n"
    for model, method, sizes, rows in blocks:
        lines += [
            "",
            f"*{model}: {method} − {results.config.baseline}*",
            "",
            "| Benchmark | " + " | ".join(f"G={g}" for g in sizes) + " |",
            "|---|" + "|".join(["---:"] * len(sizes)) + "|",
        ]
        for title, found in rows:
            texts = [
                DASH
                if f is None
                else f"{_pct(f.test.delta.estimate, True)} ({format_p(f.test.p_value, s.n_resamples)})"
                for f in found
            ]
            lines.append("| " + " | ".join([title, *texts]) + " |")
    return "\n".join(lines) + "\n"


def group_size_latex(results: ReportResults) -> str:
    """The group-size table as LaTeX, one tabular per model and method."""
    out = []
    for model, method, sizes, rows in _group_blocks(results):
        caption = f"Group-size ablation: {method} minus {results.config.baseline} on {model} (percentage points)."
        out += _latex_table_head(caption, None, ["G"] + [str(g) for g in sizes]) + [r"\midrule"]
        for title, found in rows:
            texts = [DASH if f is None else f"{_pct(f.test.delta.estimate, True)}" for f in found]
            out.append(latex_escape(f"{title} {_ks(results)}") + " & " + " & ".join(texts) + r" \\")
        out += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(out) if out else "% no runs with group_size on both the method and the baseline\n"
