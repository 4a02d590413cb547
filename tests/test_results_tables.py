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
