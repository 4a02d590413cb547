"""The report command on fixture runs: numbers, table layouts, paired tests, group-size table, plots."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from evaluation.report import main as report_main
from evaluation.report import write_report
from evaluation.report_inputs import load_report_config
from evaluation.report_results import BootstrapSettings, compute_results
from evaluation.tables import format_p, latex_escape
from reward.sources import KNOWN_SOURCES

REPO = Path(__file__).resolve().parents[2]
SOURCES = {"aime25": 16, "hmmt25": 12}  # data_source -> problems
K = 4
SETTINGS = BootstrapSettings(n_resamples=4000, rng_seed=0)


def _correct(rng, shift: float) -> dict[str, np.ndarray]:
    out = {}
    for source, n in SOURCES.items():
        difficulty = np.linspace(0.15, 0.85, n)
        out[source] = (rng.random((n, K)) < np.clip(difficulty[:, None] + shift, 0, 1)).astype(float)
    return out


@pytest.fixture()
def runs_file(tmp_path, write_synthetic_run_fn, fixtures_dir):
    """Two models; on the first, DFPO (+35 points), GSPO (baseline) and GRPO (no shift), 3 seeds each,
    at G=16, plus DFPO and GSPO at G=4 (+10 points); on the second, DFPO and GSPO."""
    runs = []
    plan = [
        ("Qwen3-32B", "DFPO (Min-Replace)", 16, 0.35),
        ("Qwen3-32B", "GSPO", 16, 0.0),
        ("Qwen3-32B", "GRPO", 16, 0.0),
        ("Qwen3-32B", "DFPO (Min-Replace)", 4, 0.10),
        ("Qwen3-32B", "GSPO", 4, 0.0),
        ("Tiny_Model", "DFPO (Min-Replace)", 16, 0.2),
        ("Tiny_Model", "GSPO", 16, 0.0),
    ]
    for p_idx, (model, method, group, shift) in enumerate(plan):
        for seed in range(3):
            rng = np.random.default_rng(1000 * p_idx + seed)
            run_dir = tmp_path / "evals" / f"{p_idx}_{seed}"
            write_synthetic_run_fn(run_dir, _correct(rng, shift), seed=seed)
            entry = {
                "model": model,
                "method": method,
                "seed": seed,
                "group_size": group,
                "eval": f"evals/{p_idx}_{seed}",
            }
            if model == "Qwen3-32B" and group == 16 and method != "GRPO":
                entry["train_log"] = str(fixtures_dir / ("verl_file_logger.jsonl" if seed % 2 else "verl_console.log"))
            runs.append(entry)
    path = tmp_path / "runs.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "baseline": "GSPO",
                "table_group_size": 16,
                "benchmarks": {"aime25": "AIME25", "hmmt25": "HMMT25"},
                "runs": runs,
            }
        )
    )
    return path


def _avg_at_k(run_dir: Path, source: str) -> float:
    records = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    return float(np.mean([r["acc"] for r in records if r["data_source"] == source]))


def test_report_numbers_match_the_samples(runs_file):
    config = load_report_config(runs_file)
    results = compute_results(config, SETTINGS)
    for (model, method, source), cell in results.cells.items():
        runs = [r for r in config.table_runs() if r.model == model and r.method == method]
        expected = np.mean([_avg_at_k(r.eval_dirs[0], source) for r in runs])
        assert cell.ci.estimate == pytest.approx(expected)
        assert cell.ci.low <= cell.ci.estimate <= cell.ci.high
        assert cell.seeds == ["0", "1", "2"] and cell.k == K and cell.n_problems == SOURCES[source]
        assert 0 <= cell.ci.estimate <= cell.pass_at_k <= 1
        assert cell.truncation == pytest.approx(1 / K)  # sample 0 of every problem is marked truncated
    assert len(results.cells) == 3 * 2 + 2 * 2  # G=4 runs are not in Table 1
    by = {(c.model, c.method, c.benchmark): c for c in results.comparisons}
    strong = by[("Qwen3-32B", "DFPO (Min-Replace)", "aime25")]
    assert strong.test.p_value < 0.01 and strong.test.delta.low > 0
    for source in SOURCES:
        null = by[("Qwen3-32B", "GRPO", source)]
        assert not null.test.delta.excludes(0.0) and null.test.p_value > 0.05
    sizes = {(c.model, c.method, c.benchmark, c.group_size) for c in results.group_size}
    assert ("Qwen3-32B", "DFPO (Min-Replace)", "aime25", 4) in sizes
    assert ("Qwen3-32B", "DFPO (Min-Replace)", "aime25", 16) in sizes
    assert not any(c.method == "GRPO" and c.group_size == 4 for c in results.group_size)


def test_report_files_and_table_layouts(runs_file, tmp_path):
    out = tmp_path / "report"
    written = write_report(load_report_config(runs_file), SETTINGS, out)
    names = {p.name for p in written}
    assert {
        "table1.md",
        "table1.tex",
        "paired_tests.md",
        "paired_tests.tex",
        "group_size.md",
        "group_size.tex",
        "report.json",
        "accuracy_qwen3_32b.png",
        "accuracy_tiny_model.png",
        "group_size_qwen3_32b.png",
        "training_curves_qwen3_32b.png",
    } <= names
    assert "training_curves_tiny_model.png" not in names  # no train_log given for it
    # one training figure per model: the other diagnostics stay in the logs
    assert not [name for name in names if name.startswith("training_diagnostics")], names
    for name in names:
        if name.endswith(".png"):
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            import matplotlib.image

            height, width, _ = matplotlib.image.imread(out / name).shape
            assert height > 200 and width > 300

    report = json.loads((out / "report.json").read_text())
    table = (out / "table1.md").read_text().splitlines()
    header = next(line for line in table if line.startswith("| Model"))
    assert header == "| Model | Method | AIME25 (%) | HMMT25 (%) |"
    rows = [line for line in table if line.startswith("| ") and line != header]
    assert [r.split(" | ")[0:2] for r in rows] == [
        ["| Qwen3-32B", "DFPO (Min-Replace)"],
        ["| ", "GSPO (baseline)"],
        ["| ", "GRPO"],
        ["| Tiny_Model", "DFPO (Min-Replace)"],
        ["| ", "GSPO (baseline)"],
    ]
    cell = next(
        c
        for c in report["table1"]
        if c["model"] == "Qwen3-32B" and c["method"] == "DFPO (Min-Replace)" and c["data_source"] == "aime25"
    )
    ci = cell["avg_at_k"]
    # best of its model: bold; significantly better than GSPO (p < 0.01): dagger
    expected = f"**{100 * ci['estimate']:.1f} ± {100 * (ci['high'] - ci['low']) / 2:.1f}**†"
    assert rows[0].split(" | ")[2] == expected
    assert "**" not in rows[1]  # the baseline is worse on both benchmarks

    tex = (out / "table1.tex").read_text()
    assert tex.count(r"\begin{tabular}") == tex.count(r"\end{tabular}") == 1
    body = [line for line in tex.splitlines() if line.endswith(r"\\") and "multicolumn" not in line]
    assert all(line.count("&") == len(SOURCES) for line in body)
    assert r"\textit{Tiny\_Model}" in tex and r"$\pm$" in tex and "GSPO (baseline)" in tex

    paired = (out / "paired_tests.md").read_text()
    assert "| Qwen3-32B | DFPO (Min-Replace) | +" in paired
    assert re.search(r"p<\d", paired)  # the strong effect reaches the resolution limit of the test
    group = (out / "group_size.md").read_text()
    assert "| Benchmark | G=4 | G=16 |" in group and "*Qwen3-32B: DFPO (Min-Replace) − GSPO.*" in group
    # the G=4 effect (+10 points) is not significant at 0.01, the G=16 one (+35) reaches the test's resolution
    assert re.search(r"\| HMMT25 \| \+\d+\.\d \(p=0\.\d{3}\) \| \+\d+\.\d \(p<5e-04\)† \|", group)
    group_tex = (out / "group_size.tex").read_text()
    assert "G & 4 & 16" in group_tex and r"\label{tab:group-size-qwen3-32b-dfpo-min-replace}" in group_tex
    assert r"($p<5\times10^{-4}$)$^\dagger$" in group_tex  # p-values in math mode, 1/(4000+1) resolution

    details = (out / "table1_details.md").read_text()
    assert "| Model | Method | AIME25 avg@4 (%) | AIME25 pass@4 (%) | AIME25 tokens | AIME25 truncated (%) |" in details
    assert (
        "| Qwen3-32B | DFPO (Min-Replace) | "
        + f"{100 * ci['estimate']:.1f} | {100 * cell['pass_at_k']:.1f} | 115 | 25.0 |"
        in details
    )
    for tex_file in out.glob("*.tex"):  # every symbol escaped or typeset as math: plain ASCII LaTeX
        assert tex_file.read_text().isascii(), tex_file.name
    details_tex = (out / "table1_details.tex").read_text()
    assert r"\multicolumn{4}{c}{AIME25} & \multicolumn{4}{c}{HMMT25} \\" in details_tex
    assert r"\cmidrule(lr){2-5} \cmidrule(lr){6-9}" in details_tex


def test_report_command_line(runs_file, tmp_path, capsys):
    out = tmp_path / "cli"
    assert (
        report_main(
            [
                "--runs",
                str(runs_file),
                "--output-dir",
                str(out),
                "--n-resamples",
                "500",
                "--resample",
                "problems",
                "--curve-metrics",
                "critic/score/mean",
                "actor/entropy",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "| Model | Method | AIME25 (%) | HMMT25 (%) |" in printed and "training_curves_qwen3_32b.png" in printed
    assert json.loads((out / "report.json").read_text())["bootstrap"]["resample"] == "problems"


def test_report_module_runs_as_a_script(runs_file, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "evaluation.report", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "--runs" in proc.stdout


def test_report_refuses_unfinished_runs_unless_allowed(tmp_path, write_synthetic_run_fn):
    rng = np.random.default_rng(0)
    write_synthetic_run_fn(tmp_path / "a", _correct(rng, 0.0), n_problems=40)
    write_synthetic_run_fn(tmp_path / "b", _correct(rng, 0.0))
    path = tmp_path / "runs.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "baseline": "B",
                "runs": [
                    {"model": "m", "method": "A", "seed": 0, "eval": "a"},
                    {"model": "m", "method": "B", "seed": 0, "eval": "b"},
                ],
            }
        )
    )
    with pytest.raises(ValueError, match=r"28 of 40 problems are done.*resumes"):
        compute_results(load_report_config(path), SETTINGS)
    results = compute_results(load_report_config(path), SETTINGS, allow_incomplete=True)
    assert [b for b, _ in results.benchmarks] == ["aime25", "hmmt25"]


@pytest.mark.parametrize(
    "runs,extra,message",
    [
        (
            [{"model": "m", "method": "A", "seed": 0, "eval": "a", "colour": 1}],
            {},
            r"yaml:3 \(runs\[0\]\): unknown key",
        ),
        ([{"model": "m", "method": "A", "eval": "a"}], {}, r"runs\[0\]\): missing \['seed'\]"),
        ([{"model": "m", "method": "A", "seed": 0, "eval": "a"}], {"baseline": "Z"}, "baseline 'Z' is not among"),
        ([{"model": "m", "method": "A", "seed": 0, "eval": "a"}], {"baseline": None}, "name the baseline"),
        (
            [
                {"model": "m", "method": "A", "seed": 0, "eval": "a", "group_size": 4},
                {"model": "m", "method": "A", "seed": 0, "eval": "b", "group_size": 8},
            ],
            {},
            "set table_group_size",
        ),
    ],
)
def test_runs_file_errors_name_the_entry(tmp_path, runs, extra, message):
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"baseline": "A", "runs": runs, **extra}))
    with pytest.raises(ValueError, match=message):
        load_report_config(path)


def test_benchmark_missing_from_every_run_is_an_error(tmp_path, write_synthetic_run_fn):
    write_synthetic_run_fn(tmp_path / "a", _correct(np.random.default_rng(0), 0.0))
    path = tmp_path / "runs.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "baseline": "A",
                "benchmarks": {"livecodebench": "LiveCodeBench"},
                "runs": [{"model": "m", "method": "A", "seed": 0, "eval": "a"}],
            }
        )
    )
    with pytest.raises(ValueError, match=r"\['livecodebench'\] appear in no run"):
        compute_results(load_report_config(path), SETTINGS)


def test_formatting_helpers():
    assert latex_escape("DFPO_min & 50% {x}") == r"DFPO\_min \& 50\% \{x\}"
    assert latex_escape("p<0.01 ± Δ") == r"p$<$0.01 $\pm$ $\Delta$"
    assert format_p(1 / 10001, 10000) == "p<2e-04"
    assert format_p(0.0123, 10000) == "p=0.012"
    assert format_p(0.0005, 10000) == "p=5.0e-04"


def test_example_runs_file_parses_and_names_known_benchmarks():
    config = load_report_config(REPO / "evaluation" / "examples" / "runs_qwen3_32b.yaml")
    assert config.baseline == "GSPO" and config.table_group_size == 16
    assert len(config.table_runs()) == 25 and len(config.runs) == 55
    assert list(config.benchmarks.values()) == ["AIME25", "LiveCodeBench", "HMMT25"]
    assert set(config.benchmarks) <= set(KNOWN_SOURCES)


def test_moving_average_and_first_crossing_hand_computed():
    from dfpo.operations.training_logs import MetricSeries
    from evaluation.training_efficiency import first_crossing, moving_average

    values = np.array([0.1, 0.2, 0.5, 0.6, 0.7])
    np.testing.assert_allclose(moving_average(values, 2), [np.nan, 0.15, 0.35, 0.55, 0.65])
    np.testing.assert_allclose(moving_average(values, 3)[2:], np.convolve(values, np.ones(3) / 3, mode="valid"))
    steps = np.array([2, 4, 6, 8, 10])
    log = {
        "critic/score/mean": MetricSeries(steps, values),
        "perf/total_num_tokens": MetricSeries(steps, np.array([100.0, 200, 300, 400, 500])),
    }
    crossing = first_crossing(log, threshold=0.5, window=2)
    assert (crossing.step, crossing.tokens) == (8, 1000.0)  # MA 0.55 at step 8; 100+200+300+400 tokens
    assert first_crossing(log, threshold=0.9, window=2).step is None
    with pytest.raises(KeyError, match="no 'x/y' metric"):
        first_crossing(log, 0.5, 2, reward_key="x/y")


def test_efficiency_ratio_against_the_baseline():
    from dfpo.operations.training_logs import MetricSeries
    from evaluation.training_efficiency import efficiency_rows

    def log(cross_at: int) -> dict:
        steps = np.arange(1, 11)
        return {
            "critic/score/mean": MetricSeries(steps, (steps >= cross_at).astype(float)),
            "perf/total_num_tokens": MetricSeries(steps, np.full(10, 100.0)),
        }

    logs = {
        ("m", "DFPO"): {"0": log(9), "1": log(9)},
        ("m", "GSPO"): {"0": log(10), "1": log(10)},
        ("m", "never"): {"0": log(99)},
    }
    rows = {r.method: r for r in efficiency_rows(logs, "GSPO", threshold=1.0, window=1)}
    assert rows["DFPO"].mean_tokens == 900.0 and rows["GSPO"].mean_tokens == 1000.0
    assert rows["DFPO"].ratio == pytest.approx(0.9) and rows["DFPO"].ratio_unit == "tokens"
    assert rows["never"].mean_steps is None and rows["never"].ratio is None


def test_report_compute_to_threshold_from_training_logs(runs_file, tmp_path):
    out = tmp_path / "eff"
    assert (
        report_main(
            [
                "--runs",
                str(runs_file),
                "--output-dir",
                str(out),
                "--n-resamples",
                "200",
                "--reward-threshold",
                "0.5",
                "--reward-window",
                "2",
            ]
        )
        == 0
    )
    table = (out / "compute_to_threshold.md").read_text()
    # fixture rewards 0.1, 0.2, 0.8, ...: the 2-step mean reaches 0.5 at step 3, after 1000+2000+3000 tokens
    assert "| Qwen3-32B | DFPO (Min-Replace) | 3/3 | 3.0 | 0.01 | 1.00x (tokens) |" in table
    rows = json.loads((out / "report.json").read_text())["compute_to_threshold"]["rows"]
    assert rows[0]["per_seed"]["0"] == {"step": 3, "tokens": 6000.0}


def test_the_accuracy_figures_title_fits_inside_the_figure(runs_file, tmp_path, monkeypatch):
    """The quickstart's report/accuracy_<model>.png had its title cut off at the right edge."""
    import matplotlib.pyplot as plt

    from evaluation import plots

    kept, close = [], plt.close
    monkeypatch.setattr(plt, "close", kept.append)
    config = load_report_config(runs_file)
    results = compute_results(config, SETTINGS)
    for model in ("Qwen3-32B", "SmolLM2-135M-Instruct"):  # the quickstart's model: its title was cut
        plots.accuracy_bars(results, model, tmp_path / "accuracy.png")
    try:
        assert len(kept) == 2
        for figure in kept:
            renderer = figure.canvas.get_renderer()
            (ax,) = figure.axes
            box = ax.title.get_window_extent(renderer)
            assert 0 <= box.x0 and box.x1 <= figure.bbox.x1 and box.y1 <= figure.bbox.y1, (
                ax.get_title(),
                box,
                figure.bbox,
            )
    finally:
        for figure in kept:
            close(figure)


def test_the_accuracy_figures_title_says_whether_it_is_one_seed_or_a_mean(runs_file, tmp_path, monkeypatch):
    """A report of one seed (the quickstart's) says "seed N", not "mean over seeds"; the fixture's
    models have several seeds, and their figure says how many."""
    from types import SimpleNamespace

    import matplotlib.pyplot as plt

    from evaluation import plots

    def results_of(*cells):
        return SimpleNamespace(cells={i: SimpleNamespace(model=m, seeds=s) for i, (m, s) in enumerate(cells)})

    assert plots._seeds_phrase(results_of(("M", ["1"]), ("M", ["1"])), "M") == "seed 1"
    assert (
        plots._seeds_phrase(results_of(("M", ["1", "2", "3"]), ("M", ["1", "2"]), ("N", ["7"])), "M")
        == "mean over 3 seeds"
    )
    assert plots._seeds_phrase(results_of(("M", ["1"]), ("M", ["2"])), "M") == "one seed per method"
    kept = []
    monkeypatch.setattr(plt, "close", kept.append)
    results = compute_results(load_report_config(runs_file), SETTINGS)
    model = sorted({c.model for c in results.cells.values()})[0]
    most = max(len(c.seeds) for c in results.cells.values() if c.model == model)
    assert most > 1
    plots.accuracy_bars(results, model, tmp_path / "accuracy.png")
    assert f"mean over {most} seeds" in kept[-1].axes[0].get_title().replace("\n", " ")
