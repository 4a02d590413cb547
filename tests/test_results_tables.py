"""Every measured figure the docs quote in a generated block equals what its results file gives
(scripts/results_tables.py): a number edited by hand, or a results file replaced, fails here."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.script_modules import load_script


def _tables():
    return load_script("results_tables")


def test_every_generated_block_matches_its_results_files(capsys):
    tables = _tables()
    blocks = sum(len(tables.BLOCK.findall(path.read_text())) for path in tables.documents())
    assert blocks >= 2, "no generated block found in the docs"
    assert tables.main(["--check"]) == 0, capsys.readouterr().out


def test_every_results_file_is_named_for_a_renderer():
    tables = _tables()
    for path in sorted(tables.RESULTS.glob("*.json")):
        match = tables.NAME.match(path.name)
        assert match is not None and match["name"] in tables.RENDERERS, path.name
        assert {"date", "cpu", "commit", "torch", "verl"} <= set(json.loads(path.read_text())["environment"]), path.name


def test_a_number_edited_by_hand_is_found(tmp_path):
    tables = _tables()
    source = next(path for path in tables.documents() if "<!-- results: cpu_precision" in path.read_text())
    text, name = source.read_text(), str(source.relative_to(tables.REPO_ROOT))
    assert tables.update(text, name) == text
    edited = text.replace("404.5 / 11.9 ms", "304.5 / 11.9 ms", 1)
    assert edited != text
    assert tables.update(edited, name) == text


def test_links_to_results_files_are_relative_to_the_document():
    tables = _tables()
    block = "<!-- results: cpu_precision-*.json -->\nold\n<!-- /results -->"
    assert "](benchmarks/results/cpu_precision-" in tables.update(block, "README.md")
    assert "](../benchmarks/results/cpu_precision-" in tables.update(block, "docs/cpu.md")


def test_a_changed_results_file_changes_the_block(tmp_path):
    tables = _tables()
    results = tmp_path / "results"
    shutil.copytree(tables.RESULTS, results)
    (path,) = results.glob("cpu_precision-*.json")
    data = json.loads(path.read_text())
    data["probe"]["bf16_ms"] = 999.0
    path.write_text(json.dumps(data))
    block = "<!-- results: cpu_precision-*.json -->\nold\n<!-- /results -->"
    assert "999.0 / 11.9 ms" in tables.update(block, "doc", results)


def test_a_block_naming_no_file_says_which_document_and_block(tmp_path):
    tables = _tables()
    with pytest.raises(tables.ResultsError, match=r"doc\.md: the block `<!-- results: nothing-\*\.json"):
        tables.update("<!-- results: nothing-*.json -->\nx\n<!-- /results -->", "doc.md", tmp_path)


def test_a_block_can_name_several_runs_of_the_main_job(tmp_path):
    """``a.json,b.json main_job``: one row per run (the README's command measured twice), each with
    its own held-out cells and seconds; a pattern matching nothing is an error, not a shorter table."""
    tables = _tables()
    results = tmp_path / "results"
    results.mkdir()
    source = tables.RESULTS / "quickstart_seeds-2026-12-05T2347-avx512.json"
    for name, seconds in (
        ("quickstart_seeds-2026-12-07T0100-avx512.json", 501.0),
        ("quickstart_seeds-2026-12-07T0200-avx512.json", 523.0),
    ):
        data = json.loads(source.read_text())
        data["runs"][0]["quickstart"]["seconds"]["total"] = seconds
        (results / name).write_text(json.dumps(data))
    both = "quickstart_seeds-2026-12-07T0100-avx512.json,quickstart_seeds-2026-12-07T0200-avx512.json"
    table = tables.render(both, "main_job", results)
    rows = [line for line in table.splitlines() if line.startswith("| 20")]
    assert len(rows) == 2 and "**501**" in rows[0] and "**523**" in rows[1], table
    assert "41.5 (29.6-54.0)" in rows[0] and "50.9 (38.1-63.4)" in rows[1]  # DFPO's and GSPO's cells
    with pytest.raises(tables.ResultsError, match="quickstart_seeds-2026-12-07T0300"):
        tables.render(both + ",quickstart_seeds-2026-12-07T0300-avx512.json", "main_job", results)
    with pytest.raises(tables.ResultsError, match="several only in the main_job view"):
        tables.render(both, "seeds", results)


def test_a_ci_run_in_two_parts_shows_each_parts_time(tmp_path):
    """scripts/test.sh's parallel and serial parts: their seconds beside pytest's, and the modules
    view says a parallel module's seconds are its worker's; a run of one part shows pytest's only."""
    tables = _tables()
    results = tmp_path / "results"
    results.mkdir()
    source = tables.RESULTS / "ci_run-2026-12-06T1038-avx512.json"
    data = json.loads(source.read_text())
    (results / "ci_run-2026-12-07T0100-avx512.json").write_text(json.dumps(data))
    data["pytest_seconds_per_part"] = {"parallel": 400.2, "serial": 1500.4}
    data["pytest_seconds"] = 1900.6
    (results / "ci_run-2026-12-07T0200-avx512.json").write_text(json.dumps(data))
    table = tables.render("ci_run-*.json", None, results)
    one, two = [line for line in table.splitlines() if line.startswith("| [ci_run-")]
    assert "| 2811 s |" in one and "| 1901 s (parallel 400 + serial 1500) |" in two, table
    assert "on one of its workers" in tables.render("ci_run-*.json", "modules", results)
    assert "on one of its workers" not in tables.render("ci_run-2026-12-07T0100-avx512.json", "modules", results)


def test_a_ci_run_shows_the_machines_import_time_where_it_was_recorded(tmp_path):
    tables = _tables()
    results = tmp_path / "results"
    results.mkdir()
    data = json.loads((tables.RESULTS / "ci_run-2026-12-06T1952-avx2.json").read_text())
    data.pop("import_verl_vllm_s", None)
    (results / "ci_run-2026-12-07T0100-avx2.json").write_text(json.dumps(data))
    data["import_verl_vllm_s"] = 9.46
    (results / "ci_run-2026-12-07T0200-avx2.json").write_text(json.dumps(data))
    table = tables.render("ci_run-*.json", None, results)
    assert table.splitlines()[0].endswith("| `import verl, vllm` after |")
    older, newer = [line for line in table.splitlines() if line.startswith("| [ci_run-")]
    assert older.endswith("| not recorded |") and newer.endswith("| 9.5 s |"), table


def test_run_histories_are_written_to_the_benchmark_pages_not_to_docs():
    """docs/ quotes the runs a user needs by name; the block over every recorded CI run (the glob
    ci_run-*.json, one row per run) belongs to the pages under benchmarks/, which the script writes too."""
    tables = _tables()
    pages = {path.relative_to(tables.REPO_ROOT).as_posix(): path.read_text() for path in tables.documents()}
    assert {"benchmarks/ci_runs.md", "benchmarks/quickstart_history.md"} <= set(pages)
    assert "<!-- results: ci_run-*.json -->" in pages["benchmarks/ci_runs.md"]
    for name, text in pages.items():
        if name.startswith("docs/"):
            for block in tables.BLOCK.finditer(text):
                assert block["pattern"] != "ci_run-*.json" or block["view"] == "recovery", (name, block["pattern"])
