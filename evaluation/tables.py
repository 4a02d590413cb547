"""Render the report's tables as Markdown and LaTeX (booktabs), in the paper's layouts.

* Table 1: rows grouped by model, one row per method, one column per benchmark; cells are
  ``mean ± half-width`` of the bootstrap CI of avg@k in percent; the best mean per model and
  benchmark is bold, the baseline row is marked "(baseline)", and a dagger marks a cell
  significantly better than the baseline (paired test, p below alpha, Holm-adjusted when asked).
  When benchmarks use different k the column titles name it; a cell whose seeds used different
  k (accepted mismatch) says which.
* Table 1 details: avg@k, pass@k, mean response length and truncation rate per benchmark.
* Paired tests: method minus baseline in percentage points, its CI and the p-value.
* Group size (the paper's Table 3): method minus baseline per G with its p-value.

Every caption states what the bootstrap resampled. In LaTeX every number is typeset in math
mode (a true minus sign, ``\\pm``, ``p<2\\times10^{-4}``) and every label is escaped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from evaluation.names import slug
from evaluation.report_results import Cell, Comparison, ReportResults

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
    "†": r"$^\dagger$",
    "×": r"$\times$",
}
RESAMPLING = {
    "both": "problems and training seeds resampled independently",
    "problems": "problems resampled, training seeds fixed",
    "seeds": "training seeds resampled, problems fixed",
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


def _latex_p(p: float, n_resamples: int) -> str:
    """``format_p`` in math mode: ``$p<2\\times10^{-4}$``, ``$p=0.012$``."""
    text = format_p(p, n_resamples)
    relation, number = text[1], text[2:]
    if "e" in number:
        mantissa, exponent = number.split("e")
        number = rf"{mantissa}\times10^{{{int(exponent)}}}"
    return f"$p{relation}{number}$"


@dataclass(frozen=True)
class Markup:
    """How one output format writes numbers, emphasis and marks."""

    latex: bool

    def text(self, label: str) -> str:
        """A label (escaped in LaTeX)."""
        return latex_escape(label) if self.latex else label

    def pct(self, x: float, signed: bool = False) -> str:
        """A fraction in percent with one decimal (a math-mode number in LaTeX)."""
        number = f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"
        return f"${number}$" if self.latex else number

    def estimate(self, mean: float, half_width: float, bold: bool) -> str:
        """``mean ± half-width``, bold when asked."""
        if self.latex:
            body = rf"${100 * mean:.1f} \pm {100 * half_width:.1f}$"
            return rf"{{\boldmath{body}}}" if bold else body
        body = f"{100 * mean:.1f} ± {100 * half_width:.1f}"
        return f"**{body}**" if bold else body

    def interval(self, estimate: float, low: float, high: float) -> str:
        """A signed difference with its CI, in percentage points."""
        if self.latex:
            return rf"${100 * estimate:+.1f}\ [{100 * low:+.1f}, {100 * high:+.1f}]$"
        return f"{100 * estimate:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"

    def p(self, p: float, n_resamples: int) -> str:
        """A p-value."""
        return _latex_p(p, n_resamples) if self.latex else format_p(p, n_resamples)

    @property
    def dash(self) -> str:
        """An empty cell."""
        return "--" if self.latex else DASH

    @property
    def mark(self) -> str:
        """The significance mark."""
        return r"$^\dagger$" if self.latex else "†"


MD, TEX = Markup(latex=False), Markup(latex=True)


def _metric(results: ReportResults) -> str:
    """``avg@32`` when every cell of the report has k = 32, else ``avg@k``."""
    ks = sorted({k for c in results.cells.values() for k in c.ks})
    return f"avg@{ks[0]}" if len(ks) == 1 else "avg@k"


def _column_k(results: ReportResults, source: str) -> list[int]:
    return sorted({k for c in results.cells.values() if c.benchmark == source for k in c.ks})


def _column_metric(results: ReportResults, source: str) -> str:
    """``avg@32`` when every cell of the column has k = 32, else ``avg@k``."""
    ks = _column_k(results, source)
    return f"avg@{ks[0]}" if len(ks) == 1 else "avg@k"


def _column_title(results: ReportResults, source: str, title: str) -> str:
    """``title`` alone when one k serves the whole table, else ``title avg@k`` with the column's k."""
    return title if _metric(results) != "avg@k" else f"{title} {_column_metric(results, source)}"


def _method_label(results: ReportResults, method: str) -> str:
    return f"{method} (baseline)" if method == results.config.baseline else method


def _best(results: ReportResults, model: str, source: str) -> float | None:
    means = [c.ci.estimate for (m, _, s), c in results.cells.items() if m == model and s == source]
    return max(means) if means else None


def _rows(results: ReportResults, entries: dict) -> list[tuple[str, str, list]]:
    """(model, method, the entry of each benchmark or None) for each model and method with any
    entry; ``entries`` is keyed by (model, method, benchmark)."""
    rows = []
    for model in results.config.models:
        for method in results.config.methods:
            found = [entries.get((model, method, src)) for src, _ in results.benchmarks]
            if any(f is not None for f in found):
                rows.append((model, method, found))
    return rows


def _markdown_table(title: str, header: list[str], rows: list[tuple[str, list[str]]]) -> list[str]:
    """Lines of a Markdown table under ``title``: (model, the rest of the row) per row, the model
    shown only where it changes, the first two columns left-aligned and the rest right-aligned."""
    lines = [
        title,
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + "|",
    ]
    previous = None
    for model, texts in rows:
        lines.append("| " + " | ".join([model if model != previous else "", *texts]) + " |")
        previous = model
    return lines


def _significance_text(results: ReportResults) -> str:
    sig = results.significance
    corrected = ", Holm-adjusted over the methods × benchmarks of each model" if sig.correction == "holm" else ""
    return f"p<{sig.alpha:g} in the paired bootstrap test{corrected}"


def _caption(results: ReportResults) -> str:
    s = results.settings
    ks = "" if _metric(results) != "avg@k" else " (k per benchmark in the column titles)"
    return (
        f"{_metric(results)} in %{ks}, mean over training seeds ± half-width of the {100 * s.level:.0f}% "
        f"percentile bootstrap CI ({s.n_resamples} resamples; {RESAMPLING[s.resample]}); bold: best mean per "
        f"model and benchmark; †: better than {results.config.baseline} with {_significance_text(results)}."
    )


def _cell_text(results: ReportResults, cell: Cell | None, markup: Markup) -> str:
    if cell is None:
        return markup.dash
    best = _best(results, cell.model, cell.benchmark)
    is_best = best is not None and abs(cell.ci.estimate - best) < 1e-12
    text = markup.estimate(cell.ci.estimate, cell.ci.half_width, is_best)
    comparison = results.comparison(cell.model, cell.method, cell.benchmark)
    if comparison is not None and comparison.better(results.significance.alpha):
        text += markup.mark
    if len(_column_k(results, cell.benchmark)) > 1:
        text += markup.text(f" (k={'/'.join(map(str, cell.ks))})")
    return text


def table1_markdown(results: ReportResults) -> str:
    """Table 1 as a Markdown table with a caption line."""
    header = ["Model", "Method"] + [f"{_column_title(results, s, t)} (%)" for s, t in results.benchmarks]
    rows = [
        (model, [_method_label(results, method), *(_cell_text(results, c, MD) for c in cells)])
        for model, method, cells in _rows(results, results.cells)
    ]
    lines = _markdown_table(f"**Table 1.** {_caption(results)}", header, rows)
    seeds = sorted({len(c.seeds) for c in results.cells.values()})
    lines += ["", f"Seeds per cell: {', '.join(map(str, seeds))}."]
    return "\n".join(lines) + "\n"


def _latex_table_head(
    caption: str, label: str | None, header: list[str], spans: list[tuple[str, int]] | None = None
) -> list[str]:
    """Opening lines of a booktabs table whose first row is ``header`` (one left column, the rest centred).

    ``spans`` adds a row above it: (title, number of columns) groups after the first column.
    """
    lines = [r"\begin{table}[t]", r"\centering", r"\small", rf"\caption{{{latex_escape(caption)}}}"]
    if label is not None:
        lines.append(rf"\label{{{label}}}")
    lines += [r"\begin{tabular}{l" + "c" * (len(header) - 1) + "}", r"\toprule"]
    if spans:
        lines.append(" & ".join([""] + [rf"\multicolumn{{{n}}}{{c}}{{{t}}}" for t, n in spans]) + r" \\")
        start, rules = 2, []
        for _, n in spans:
            rules.append(rf"\cmidrule(lr){{{start}-{start + n - 1}}}")
            start += n
        lines.append(" ".join(rules))
    lines.append(" & ".join(header) + r" \\")
    return lines


def _latex_table_end() -> list[str]:
    return [r"\bottomrule", r"\end{tabular}", r"\end{table}"]


def _latex_table(
    caption: str,
    label: str,
    header: list[str],
    rows: list[tuple[str, str, list[str]]],
    spans: list[tuple[str, int]] | None = None,
) -> str:
    """A booktabs table of (model, row label, cell texts) rows under a rule naming each model."""
    lines = _latex_table_head(caption, label, header, spans)
    previous = None
    for model, row_label, texts in rows:
        if model != previous:
            lines += [r"\midrule", rf"\multicolumn{{{len(header)}}}{{l}}{{\textit{{{latex_escape(model)}}}}} \\"]
            previous = model
        lines.append(latex_escape(row_label) + " & " + " & ".join(texts) + r" \\")
    return "\n".join(lines + _latex_table_end()) + "\n"


def table1_latex(results: ReportResults) -> str:
    """Table 1 as a LaTeX table (needs \\usepackage{booktabs})."""
    header = ["Model variant"] + [latex_escape(f"{_column_title(results, s, t)} (%)") for s, t in results.benchmarks]
    rows = [
        (model, _method_label(results, method), [_cell_text(results, c, TEX) for c in cells])
        for model, method, cells in _rows(results, results.cells)
    ]
    return _latex_table(_caption(results), "tab:main", header, rows)


DETAIL_COLUMNS: list[tuple[str, Callable[[Cell, Markup], str]]] = [
    ("avg@{k} (%)", lambda c, m: m.pct(c.ci.estimate)),
    ("pass@{k} (%)", lambda c, m: m.pct(c.pass_at_k)),
    ("tokens", lambda c, m: f"${c.mean_tokens:.0f}$" if m.latex else f"{c.mean_tokens:.0f}"),
    ("truncated (%)", lambda c, m: m.pct(c.truncation)),
]
"""Column title (``{k}``: the column's k, or ``k`` when its cells differ) and cell text."""


def _detail_titles(results: ReportResults, source: str) -> list[str]:
    ks = _column_k(results, source)
    k = str(ks[0]) if len(ks) == 1 else "k"
    return [name.format(k=k) for name, _ in DETAIL_COLUMNS]


def _detail_texts(cells: list[Cell | None], markup: Markup) -> list[str]:
    return [markup.dash if c is None else render(c, markup) for c in cells for _, render in DETAIL_COLUMNS]


def _detail_caption(results: ReportResults) -> str:
    return (
        "Per benchmark: avg@k and pass@k in % (pass@k with n = k samples: a problem passes when one of its k "
        "samples is fully correct), mean response length in tokens and share of truncated responses, each the "
        "mean over training seeds. k per benchmark: "
        + ", ".join(f"{t} {'/'.join(map(str, _column_k(results, s)))}" for s, t in results.benchmarks)
        + "."
    )


def table1_detail_markdown(results: ReportResults) -> str:
    """avg@k, pass@k, mean response length and truncation rate beside each other, per benchmark."""
    header = ["Model", "Method"] + [f"{t} {name}" for s, t in results.benchmarks for name in _detail_titles(results, s)]
    rows = [
        (model, [_method_label(results, method), *_detail_texts(cells, MD)])
        for model, method, cells in _rows(results, results.cells)
    ]
    return "\n".join(_markdown_table(f"**Table 1 details.** {_detail_caption(results)}", header, rows)) + "\n"


def table1_detail_latex(results: ReportResults) -> str:
    """The details table in LaTeX: one column group per benchmark."""
    width = len(DETAIL_COLUMNS)
    spans = [(latex_escape(t), width) for _, t in results.benchmarks]
    header = ["Method"] + [latex_escape(name) for s, _ in results.benchmarks for name in _detail_titles(results, s)]
    rows = [
        (model, _method_label(results, method), _detail_texts(cells, TEX))
        for model, method, cells in _rows(results, results.cells)
    ]
    return _latex_table(_detail_caption(results), "tab:main-details", header, rows, spans)


def _comparison_text(results: ReportResults, c: Comparison | None, markup: Markup) -> str:
    if c is None:
        return markup.dash
    d = c.test.delta
    text = f"{markup.interval(d.estimate, d.low, d.high)} {markup.p(c.p_reported, results.settings.n_resamples)}"
    return text + (markup.mark if c.better(results.significance.alpha) else "")


def _paired_title(results: ReportResults) -> str:
    return f"Paired bootstrap tests against {results.config.baseline}"


def _paired_caption(results: ReportResults) -> str:
    """The caption after its title: what is tested and how."""
    s = results.settings
    p_kind = "Holm-adjusted two-sided p-value" if results.significance.correction == "holm" else "two-sided p-value"
    return (
        f"Difference in {_metric(results)} "
        f"(percentage points) with its {100 * s.level:.0f}% CI and {p_kind} ({s.n_resamples} resamples; "
        f"{RESAMPLING[s.resample]}, the same draws for the method and the baseline, seeds paired by label); "
        f"†: better than {results.config.baseline} with {_significance_text(results)}."
    )


def _paired_rows(results: ReportResults) -> list[tuple[str, str, list[Comparison | None]]]:
    return _rows(results, {(c.model, c.method, c.benchmark): c for c in results.comparisons})


def paired_markdown(results: ReportResults) -> str:
    """Paired bootstrap tests of every method against the baseline, per benchmark."""
    header = ["Model", f"Method − {results.config.baseline}"] + [
        f"{_column_title(results, s, t)} Δ (pp)" for s, t in results.benchmarks
    ]
    rows = [
        (model, [method] + [_comparison_text(results, f, MD) for f in found])
        for model, method, found in _paired_rows(results)
    ]
    return "\n".join(_markdown_table(f"**{_paired_title(results)}.** {_paired_caption(results)}", header, rows)) + "\n"


def paired_latex(results: ReportResults) -> str:
    """The paired tests as a LaTeX table."""
    header = ["Method"] + [latex_escape(f"{_column_title(results, s, t)} Δ (pp)") for s, t in results.benchmarks]
    rows = [
        (model, method, [_comparison_text(results, f, TEX) for f in found])
        for model, method, found in _paired_rows(results)
    ]
    return _latex_table(f"{_paired_title(results)}. {_paired_caption(results)}", "tab:paired", header, rows)


def _group_blocks(
    results: ReportResults,
) -> list[tuple[str, str, list[int], list[tuple[str, str, list[Comparison | None]]]]]:
    sizes = sorted({c.group_size for c in results.group_size if c.group_size is not None})
    index = {(c.model, c.method, c.benchmark, c.group_size): c for c in results.group_size}
    blocks = []
    for model in results.config.models:
        for method in results.config.methods:
            rows = []
            for src, title in results.benchmarks:
                found = [index.get((model, method, src, g)) for g in sizes]
                if any(f is not None for f in found):
                    rows.append((src, title, found))
            if rows:
                blocks.append((model, method, sizes, rows))
    return blocks


def _group_caption(results: ReportResults, model: str, method: str) -> str:
    s = results.settings
    p_kind = "Holm-adjusted p-value" if results.significance.correction == "holm" else "p-value"
    return (
        f"Group-size ablation on {model}: {method} minus {results.config.baseline} in percentage points per "
        f"group size G, with the paired-bootstrap {p_kind} ({s.n_resamples} resamples; {RESAMPLING[s.resample]})."
    )


def _group_cell(results: ReportResults, f: Comparison | None, markup: Markup) -> str:
    if f is None:
        return markup.dash
    mark = markup.mark if f.better(results.significance.alpha) else ""
    return f"{markup.pct(f.test.delta.estimate, True)} ({markup.p(f.p_reported, results.settings.n_resamples)}){mark}"


def group_size_markdown(results: ReportResults) -> str:
    """The paper's Table 3 layout: method minus baseline per group size G."""
    lines = [f"**Group size.** {_metric(results)} of the method minus {results.config.baseline} per group size G."]
    blocks = _group_blocks(results)
    if not blocks:
        return "\n".join(lines + ["", "No runs with group_size on both the method and the baseline."]) + "\n"
    for model, method, sizes, rows in blocks:
        lines += [
            "",
            f"*{model}: {method} − {results.config.baseline}.* {_group_caption(results, model, method)}",
            "",
            "| Benchmark | " + " | ".join(f"G={g}" for g in sizes) + " |",
            "|---|" + "|".join(["---:"] * len(sizes)) + "|",
        ]
        for src, title, found in rows:
            texts = [_group_cell(results, f, MD) for f in found]
            lines.append("| " + " | ".join([_column_title(results, src, title), *texts]) + " |")
    return "\n".join(lines) + "\n"


def group_size_latex(results: ReportResults) -> str:
    """The group-size table as LaTeX, one labelled tabular per model and method."""
    out = []
    for model, method, sizes, rows in _group_blocks(results):
        label = f"tab:group-size-{slug(model)}-{slug(method)}".replace("_", "-")
        out += _latex_table_head(_group_caption(results, model, method), label, ["G"] + [str(g) for g in sizes])
        out.append(r"\midrule")
        for src, title, found in rows:
            name = latex_escape(f"{title} {_column_metric(results, src)}")
            out.append(name + " & " + " & ".join(_group_cell(results, f, TEX) for f in found) + r" \\")
        out += _latex_table_end() + [""]
    return "\n".join(out) if out else "% no runs with group_size on both the method and the baseline\n"
