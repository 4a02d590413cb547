"""Run summary bookkeeping, the progress bar, and the test caps (properties against their definition)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from data_prep.code_ground_truth import CodeTest
from data_prep.code_test_caps import CodeTestCaps, apply_test_caps
from data_prep.summary import RunSummary, with_progress


def test_summary_accounts_for_every_row():
    summary = RunSummary(output="out.parquet")
    summary.rows_read["a.jsonl"] += 3
    summary.rows_written = 1
    summary.drop("duplicate problem", "a.jsonl:line 2")
    summary.drop("duplicate problem", "a.jsonl:line 3")
    summary.note("tests removed by --max-tests", 4)
    assert summary.is_balanced()
    text = summary.format()
    assert "dropped          2  duplicate problem  (first: a.jsonl:line 2)" in text
    assert "note             4  tests removed by --max-tests" in text
    summary.rows_written = 2
    assert not summary.is_balanced()


def test_progress_bar_passes_every_item_through(capsys):
    assert list(with_progress(iter(range(5)), 5, "rows", enabled=True)) == [0, 1, 2, 3, 4]
    assert "rows" in capsys.readouterr().err
    assert list(with_progress(iter(range(3)), None, "rows", enabled=False)) == [0, 1, 2]
    assert capsys.readouterr().err == ""


texts = st.text(alphabet="ab\nü", max_size=6)
tests_strategy = st.lists(st.builds(CodeTest, texts, texts, st.just("stdin")), max_size=12)
caps_strategy = st.builds(CodeTestCaps, st.none() | st.integers(1, 14), st.none() | st.integers(1, 30))


@settings(max_examples=300, deadline=None)
@given(tests_strategy, caps_strategy)
def test_caps_keep_an_ordered_greedy_prefix_within_both_limits(tests, caps):
    result = apply_test_caps(tests, caps)
    window = tests if caps.max_tests is None else tests[: caps.max_tests]
    assert result.removed_by_count == len(tests) - len(window)
    assert result.removed_by_count + result.removed_by_bytes + len(result.kept) == len(tests)
    # kept tests are the window's tests, in order, chosen greedily under the byte budget
    used, expected = 0, []
    for test in window:
        if caps.max_bytes is None or used + test.size_bytes() <= caps.max_bytes:
            expected.append(test)
            used += test.size_bytes()
    assert result.kept == expected
    if caps.max_bytes is not None:
        assert sum(t.size_bytes() for t in result.kept) <= caps.max_bytes


def test_size_counts_utf8_bytes():
    assert CodeTest("ü", "ab", "stdin").size_bytes() == 4


def test_caps_must_be_positive():
    import pytest

    from data_prep.errors import DataPrepError

    with pytest.raises(DataPrepError, match="--max-tests must be at least 1"):
        CodeTestCaps(max_tests=0)
    with pytest.raises(DataPrepError, match="--max-test-bytes must be at least 1"):
        CodeTestCaps(max_bytes=-5)


def test_row_details_list_the_first_of_each_kind_and_count_the_rest():
    from data_prep.pipeline import LISTED_DETAILS, RowDetails

    details = RowDetails()
    for i in range(LISTED_DETAILS + 3):
        details.add("contamination matches", f"match {i}")
    details.add("skipped bad rows", "skipped one")
    lines = details.format()
    assert lines[:LISTED_DETAILS] == [f"match {i}" for i in range(LISTED_DETAILS)]
    assert "skipped one" in lines and f"match {LISTED_DETAILS}" not in lines
    assert lines[-1] == "... and 3 more contamination matches not listed"
