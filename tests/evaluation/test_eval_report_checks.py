"""The report refuses what would mislead: degenerate bootstraps, incomparable runs, malformed
samples, seeds missing a benchmark; and it states what it did (captions, k per column, marks)."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

from evaluation.report import main as report_main
from evaluation.report_inputs import load_report_config
from evaluation.report_results import BootstrapSettings, SignificanceSettings, compute_results
from evaluation.stats import DegenerateBootstrapError
from evaluation.tables import paired_latex, paired_markdown, table1_latex, table1_markdown

SETTINGS = BootstrapSettings(n_resamples=400, rng_seed=0)


def _correct(seed: int, shift: float = 0.0, problems: int = 12, k: int = 4, source: str = "aime25") -> dict:
    rng = np.random.default_rng(seed)
    p = np.clip(np.linspace(0.2, 0.8, problems)[:, None] + shift, 0, 1)
    return {source: (rng.random((problems, k)) < p).astype(float)}


def _runs_file(tmp_path: Path, runs: list[dict], **extra) -> Path:
    """A runs file with one run per line (flow style), so that entry i is on line ``_line(path, i)``."""
    path = tmp_path / "runs.yaml"
    head = yaml.safe_dump({"baseline": "B", **extra}, sort_keys=False)
    path.write_text(head + "runs:\n" + "".join(f"  - {json.dumps(r)}\n" for r in runs))
    return path


def _line(path: Path, index: int) -> int:
    """The line of ``runs[index]``."""
    return [n for n, text in enumerate(path.read_text().splitlines(), 1) if text.startswith("  - ")][index]


def _edit_manifest(run_dir: Path, **changes) -> None:
    path = run_dir / "run.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def _edit_line(run_dir: Path, number: int, **changes) -> None:
    path = run_dir / "samples.jsonl"
    lines = path.read_text().splitlines()
    lines[number - 1] = json.dumps({**json.loads(lines[number - 1]), **changes})
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture()
def pair(tmp_path, write_synthetic_run_fn):
    """Method A and baseline B, one seed each, no real difference."""
    write_synthetic_run_fn(tmp_path / "a", _correct(1))
    write_synthetic_run_fn(tmp_path / "b", _correct(2))
    return _runs_file(
        tmp_path,
        [
            {"model": "m", "method": "A", "seed": 0, "eval": "a"},
            {"model": "m", "method": "B", "seed": 0, "eval": "b"},
        ],
    )


def test_resampling_seeds_with_one_seed_is_refused_with_the_cell_named(pair, tmp_path):
    config = load_report_config(pair)
    seeds_only = BootstrapSettings(n_resamples=400, resample="seeds")
    with pytest.raises(DegenerateBootstrapError, match=r"runs.yaml: m/A/aime25 \(seeds \['0'\]\): .*only 1 seed"):
        compute_results(config, seeds_only)
    with pytest.raises(SystemExit, match="^error: .*resample problems or both"):
        report_main(["--runs", str(pair), "--output-dir", str(tmp_path / "r"), "--resample", "seeds"])
    # a normal single-seed run with the default or --resample problems keeps working
    for mode in ("both", "problems"):
        results = compute_results(config, BootstrapSettings(n_resamples=400, resample=mode))
        test = results.comparisons[0].test
        assert test.delta.high > test.delta.low and test.p_value > 0.01


@pytest.mark.parametrize(
    "mode,phrase",
    [
        ("both", "problems and training seeds resampled independently"),
        ("problems", "problems resampled, training seeds fixed"),
        ("seeds", "training seeds resampled, problems fixed"),
    ],
)
def test_captions_state_the_resampling_mode(tmp_path, write_synthetic_run_fn, mode, phrase):
    runs = []
    for seed in range(2):
        for method, shift in (("A", 0.1), ("B", 0.0)):
            write_synthetic_run_fn(tmp_path / f"{method}{seed}", _correct(10 * seed + len(method), shift))
            runs.append({"model": "m", "method": method, "seed": seed, "eval": f"{method}{seed}"})
    results = compute_results(
        load_report_config(_runs_file(tmp_path, runs)), BootstrapSettings(n_resamples=400, resample=mode)
    )
    for render in (paired_markdown, paired_latex, table1_markdown, table1_latex):
        assert phrase in render(results), render.__name__
    assert "jointly" not in paired_markdown(results)


def test_runs_sampled_differently_are_refused_unless_accepted(tmp_path, write_synthetic_run_fn):
    for name, seed in (("a", 1), ("b", 2), ("c", 3)):
        write_synthetic_run_fn(tmp_path / name, _correct(seed))
    _edit_manifest(tmp_path / "b", sampling={"temperature": 1.0, "max_new_tokens": 100})
    _edit_manifest(tmp_path / "a", sampling={"temperature": 0.6, "max_new_tokens": 100})
    _edit_manifest(tmp_path / "c", sampling={"temperature": 0.6, "max_new_tokens": 100})
    _edit_manifest(tmp_path / "c", data=[{"path": "x", "sha256": "other"}])
    path = _runs_file(
        tmp_path,
        [
            {"model": "m", "method": "A", "seed": 0, "eval": "a"},
            {"model": "m", "method": "B", "seed": 0, "eval": "b"},
            {"model": "m", "method": "C", "seed": 0, "eval": "c"},
        ],
    )
    config = load_report_config(path)
    second, third = _line(path, 1), _line(path, 2)
    with pytest.raises(
        ValueError,
        match=rf"runs.yaml:{second} \(runs\[1\]\) \(m/B/seed 0\) was evaluated with other settings than "
        rf".*runs.yaml:{second - 1} \(runs\[0\]\).*sampling.temperature: 0.6 vs 1.0.*--accept-mismatched-settings",
    ):
        compute_results(config, SETTINGS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = compute_results(config, SETTINGS, accept_mismatched_settings=True)
    found = [(w.filename, w.lineno, str(w.message)) for w in caught]
    assert (str(path), second) in [(f, n) for f, n, _ in found]  # the warning points at the runs file entry
    assert any("data_sha256: [] vs ['other']" in m and n == third for _, n, m in found)
    assert [m["differing"] for m in results.mismatches] == [["sampling"], ["data_sha256"]]

    out = tmp_path / "report"
    assert (
        report_main(
            ["--runs", str(path), "--output-dir", str(out), "--n-resamples", "200", "--accept-mismatched-settings"]
        )
        == 0
    )
    report = json.loads((out / "report.json").read_text())
    assert len(report["settings_mismatches"]) == 2
    recorded = report["runs"][1]["benchmarks"]["aime25"]
    assert recorded["k"] == 4 and recorded["settings"]["sampling"] == {"temperature": 1.0, "max_new_tokens": 100}
    assert set(recorded["settings"]) == {"data_sha256", "sampling", "k", "scorer", "scorer_version", "backend"}


def test_two_runs_cannot_share_an_evaluation_directory(tmp_path):
    path = _runs_file(
        tmp_path,
        [
            {"model": "m", "method": "A", "seed": 0, "eval": "a"},
            {"model": "m", "method": "A", "seed": 1, "eval": "./a"},
        ],
        baseline="A",
    )
    with pytest.raises(
        ValueError,
        match=rf"runs.yaml:{_line(path, 1)} \(runs\[1\]\): evaluation directory .*a is also the evaluation of "
        rf".*runs.yaml:{_line(path, 0)} \(runs\[0\]\) \(m/A/seed 0\); every run needs its own evaluation",
    ):
        load_report_config(path)


@pytest.mark.parametrize(
    "line,change,message",
    [
        (3, {"sample_index": 1}, r"samples.jsonl line 3: problem 'aime25/0' sample_index 1 repeats line 2"),
        (2, {"acc": 1.5}, r"samples.jsonl line 2: acc = 1.5 lies outside \[0, 1\]"),
        (2, {"acc": -0.1}, r"line 2: acc = -0.1 lies outside"),
        (5, {"acc": None}, r"samples.jsonl line 5: acc is None, not a number"),
        (1, {"sample_index": 7}, r"line 1: sample_index 7 is not an integer in \[0, k\) with k=4"),
        (6, {"data_source": "hmmt25"}, r"line 6: problem 'aime25/1' has data_source 'hmmt25' but 'aime25' on line 5"),
    ],
)
def test_malformed_samples_are_named_by_file_and_line(pair, tmp_path, line, change, message):
    _edit_line(tmp_path / "a", line, **change)
    with pytest.raises(ValueError, match=message):
        compute_results(load_report_config(pair), SETTINGS)


def test_a_seed_missing_a_benchmark_is_refused_or_warned_at_its_entry(tmp_path, write_synthetic_run_fn):
    both = {**_correct(1), **_correct(2, source="hmmt25")}
    runs = []
    for seed in range(3):
        write_synthetic_run_fn(tmp_path / f"a{seed}", both if seed < 2 else _correct(3))  # seed 2: no hmmt25
        write_synthetic_run_fn(tmp_path / f"b{seed}", {**_correct(4 + seed), **_correct(5 + seed, source="hmmt25")})
        runs += [
            {"model": "m", "method": "A", "seed": seed, "eval": f"a{seed}"},
            {"model": "m", "method": "B", "seed": seed, "eval": f"b{seed}"},
        ]
    path = _runs_file(tmp_path, runs)
    config = load_report_config(path)
    line = _line(path, 4)
    with pytest.raises(
        ValueError,
        match=rf"m/A/hmmt25: .*runs.yaml:{line} \(runs\[4\]\) \(seed 2\) have no 'hmmt25'.*--allow-incomplete",
    ):
        compute_results(config, SETTINGS)
    with pytest.warns(UserWarning, match="reported over 2 seed") as caught:
        results = compute_results(config, SETTINGS, allow_incomplete=True)
    assert caught[0].filename == str(path) and caught[0].lineno == line
    assert results.cells[("m", "A", "hmmt25")].seeds == ["0", "1"]
    assert results.cells[("m", "A", "aime25")].seeds == ["0", "1", "2"]


def test_k_per_benchmark_from_several_evaluation_directories(tmp_path, write_synthetic_run_fn):
    runs = []
    for method, shift in (("A", 0.3), ("B", 0.0)):
        for seed in range(2):
            math_dir, code_dir = f"{method}{seed}_math", f"{method}{seed}_lcb"
            write_synthetic_run_fn(tmp_path / math_dir, _correct(seed, shift, problems=20, k=8))
            write_synthetic_run_fn(tmp_path / code_dir, _correct(seed + 5, shift, problems=20, k=2, source="lcb"))
            runs.append({"model": "m", "method": method, "seed": seed, "eval": [math_dir, code_dir]})
    path = _runs_file(tmp_path, runs, benchmarks={"aime25": "AIME25", "lcb": "LiveCodeBench"})
    results = compute_results(load_report_config(path), SETTINGS)
    assert results.cells[("m", "A", "aime25")].k == 8 and results.cells[("m", "A", "lcb")].k == 2
    table = table1_markdown(results)
    assert "| Model | Method | AIME25 avg@8 (%) | LiveCodeBench avg@2 (%) |" in table
    assert "avg@k in % (k per benchmark in the column titles)" in table
    assert "(k=" not in table  # each column has one k: no cell needs to say it

    write_synthetic_run_fn(tmp_path / "A0_math_k4", _correct(9, 0.3, problems=20, k=4))
    runs[0]["eval"] = ["A0_math", "A0_lcb", "A0_math_k4"]  # two directories of one run holding the same benchmark
    with pytest.raises(ValueError, match=r"runs\[0\]\): benchmark 'aime25' is in both .*A0_math and .*A0_math_k4"):
        compute_results(load_report_config(_runs_file(tmp_path, runs)), SETTINGS)


def test_methods_sampled_with_different_k_say_which_k_when_accepted(tmp_path, write_synthetic_run_fn):
    write_synthetic_run_fn(tmp_path / "a", _correct(1, k=8))
    write_synthetic_run_fn(tmp_path / "b", _correct(2, k=4))
    path = _runs_file(
        tmp_path,
        [
            {"model": "m", "method": "A", "seed": 0, "eval": "a"},
            {"model": "m", "method": "B", "seed": 0, "eval": "b"},
        ],
    )
    with pytest.raises(ValueError, match="k: 8 vs 4"):
        compute_results(load_report_config(path), SETTINGS)
    with pytest.warns(UserWarning, match="k: 8 vs 4"):
        results = compute_results(load_report_config(path), SETTINGS, accept_mismatched_settings=True)
    table = table1_markdown(results)
    assert re.search(r"\| m \| A \| [\d.]+ ± [\d.]+ \(k=8\) \|", table)
    assert re.search(r"\| B \(baseline\) \| (\*\*)?[\d.]+ ± [\d.]+(\*\*)? \(k=4\) \|", table)
    assert "| aime25 avg@k (%) |" in table  # the column mixes k: its title does not claim one


def test_holm_correction_marks_and_latex_minus_signs(tmp_path, write_synthetic_run_fn):
    runs = []
    plan = {"DFPO_v2 & co": 0.4, "Worse": -0.3, "Same": 0.0, "B": 0.0}
    for m_idx, (method, shift) in enumerate(plan.items()):
        for seed in range(3):
            name = f"r{m_idx}_{seed}"
            write_synthetic_run_fn(tmp_path / name, _correct(100 * m_idx + seed, shift, problems=30))
            runs.append({"model": "m", "method": method, "seed": seed, "eval": name})
    config = load_report_config(_runs_file(tmp_path, runs))
    plain = compute_results(config, SETTINGS)
    holm = compute_results(config, SETTINGS, significance=SignificanceSettings(alpha=0.05, correction="holm"))
    for a, b in zip(plain.comparisons, holm.comparisons, strict=True):
        assert a.p_adjusted is None and b.p_adjusted >= b.test.p_value
    by_method = {c.method: c for c in holm.comparisons}
    assert by_method["DFPO_v2 & co"].better(0.05) and not by_method["Worse"].better(0.05)

    md, tex = table1_markdown(holm), table1_latex(holm)
    assert "Holm-adjusted" in md and "Holm-adjusted" in paired_markdown(holm)
    dfpo_row = next(line for line in md.splitlines() if "DFPO_v2" in line)
    assert dfpo_row.endswith("†* |") or dfpo_row.endswith("† |")
    assert "†" not in next(line for line in md.splitlines() if "| Worse |" in line)
    assert r"DFPO\_v2 \& co & {\boldmath$" in tex and r"$^\dagger$" in tex

    paired = paired_latex(holm)
    worse = next(line for line in paired.splitlines() if line.startswith("Worse"))
    assert re.search(r"\$-\d+\.\d\\ \[-\d+\.\d, [+-]\d+\.\d\]\$", worse)  # the minus sign in math mode
    assert re.search(r"\$p[<=]", worse) and "e-0" not in paired  # p-values as math, never 2e-04
    assert tex.isascii() and paired.isascii()  # the Holm caption's "×" is escaped too
    body = "\n".join(line for line in paired.splitlines() if line.endswith(r"\\"))
    assert not re.search(r"(?<![$\[ ,{])-\d", body)  # no bare hyphen before a number outside math
