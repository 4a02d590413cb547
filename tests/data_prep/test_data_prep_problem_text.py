"""Normalised problem text (shared by dedup and the contamination check), the
Deduplicator and the EvaluationIndex: labelled pairs and properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_prep.contamination import EvaluationIndex
from data_prep.dedup import Deduplicator
from data_prep.problem_text import exact_key, normalised_key, normalised_text

SAME = [
    ("Find $x$.", "find x"),
    ("Compute $\\dfrac{1}{2}$", "Compute \\frac{1}{2}"),
    ("Compute $\\tfrac12$", "Compute \\frac12"),
    ("$\\left( a+b \\right)^2$", "(a+b)^2"),
    ("Let $x_{1}$ and $y^{2}$ be given.", "Let $x_1$ and $y^2$ be given"),
    ("$a\\,b\\;c\\!d\\ e$", "abcde"),
    ("ＡＢＣ１２３", "abc123"),  # full-width letters (NFKC)
    ("  What is 2+2?  ", "What is 2+2"),
    ('Say "hi", then stop.', "say hi then stop"),
    ("$\\displaystyle\\sum_{i=1}^{n} i$", "\\sum_{i=1}^n i"),
]

DIFFERENT = [
    ("x is 3.5", "x is 35"),  # a decimal point is not sentence punctuation
    ("Find $x+1$", "Find $x-1$"),
    ("Compute $2^{10}$", "Compute $2^{1}0$"),
    ("Let $x_{12}$ be", "Let $x_1 2$ be"),  # x_{12} is not x_1 followed by 2
    ("\\frac{1}{2}", "\\frac{2}{1}"),
]


@pytest.mark.parametrize(("a", "b"), SAME)
def test_typesetting_variants_share_a_key(a, b):
    assert normalised_text(a) == normalised_text(b)
    assert normalised_key(a) == normalised_key(b)


@pytest.mark.parametrize(("a", "b"), DIFFERENT)
def test_different_problems_keep_different_keys(a, b):
    assert normalised_key(a) != normalised_key(b)


words = st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789+-=()", min_size=1, max_size=8), min_size=1, max_size=8)


@settings(max_examples=100, deadline=None)
@given(words, st.lists(st.sampled_from([" ", "  ", "\n", "\t"]), min_size=1, max_size=8))
def test_whitespace_and_case_never_matter(tokens, separators):
    spaced = "".join(token + separators[i % len(separators)] for i, token in enumerate(tokens))
    assert normalised_text(spaced.upper()) == normalised_text("".join(tokens))


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=60))
def test_normalisation_is_idempotent(text):
    once = normalised_text(text)
    assert normalised_text(once) == once


def test_exact_key_only_trims():
    assert exact_key("  A b \n") == "A b"
    assert exact_key("A b") != exact_key("a b")


def test_deduplicator_keeps_the_first_and_flags_answer_conflicts():
    dedup = Deduplicator()
    assert not dedup.check("What is $1+1$?", "2", "f row 0").is_duplicate
    repeat = dedup.check("what is 1+1", "2", "f row 1")
    assert repeat.is_duplicate and not repeat.answer_differs and repeat.first_location == "f row 0"
    conflict = dedup.check("What is $1+1$?", "3", "f row 2")
    assert conflict.is_duplicate and conflict.answer_differs
    assert not dedup.check("What is $1+2$?", "3", "f row 3").is_duplicate
    assert len(dedup) == 2


def test_evaluation_index_prefers_exact_then_normalised():
    index = EvaluationIndex()
    index.add("Find the sum of all bases $b>9$.", "aime25.parquet aime25 0")
    exact = index.match("  Find the sum of all bases $b>9$.\n")
    assert exact is not None and exact.kind == "exact" and exact.evaluation_problem == "aime25.parquet aime25 0"
    normalised = index.match("find the sum of all bases $b > 9$")
    assert normalised is not None and normalised.kind == "normalised"
    assert index.match("Find the sum of all bases $b>10$.") is None
