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
    ("Let $A = (0, 0)$ and $B = (1, 2)$.", "Let $A=(0,0)$ and $B=(1,2)$"),  # re-typeset evaluation problem
    ("Find $x=5.$ Then stop", "Find $x=5$. Then stop"),  # sentence period typed inside the math
    ("Solve \\(x+1=2\\).", "Solve $x+1=2$"),
    ("Let $f'(x) = 2x$.", "let $f'(x)=2x$"),
]

DIFFERENT = [
    ("x is 3.5", "x is 35"),  # a decimal point is not sentence punctuation
    ("Find $x+1$", "Find $x-1$"),
    ("Compute $2^{10}$", "Compute $2^{1}0$"),
    ("Let $x_{12}$ be", "Let $x_1 2$ be"),  # x_{12} is not x_1 followed by 2
    ("\\frac{1}{2}", "\\frac{2}{1}"),
    ("Compute $25!$.", "Compute $25$."),  # a factorial is not sentence punctuation
    ("Find $\\gcd(1, 23)$.", "Find $\\gcd(12, 3)$."),  # a comma inside math separates numbers
    ("The numbers 1, 23 and 4.", "The numbers 12, 3 and 4."),  # ... and in prose before a digit
    ("Let $f'(x) = 2x$.", "Let $f(x) = 2x$."),  # a prime in math is not a quote
    ("Find $(a, b)$.", "Find $(ab)$."),
]


@pytest.mark.parametrize(("a", "b"), SAME)
def test_typesetting_variants_share_a_key(a, b):
    assert normalised_text(a) == normalised_text(b)
    assert normalised_key(a) == normalised_key(b)


@pytest.mark.parametrize(("a", "b"), DIFFERENT)
def test_different_problems_keep_different_keys(a, b):
    assert normalised_key(a) != normalised_key(b)


# Texts without backslashes (a LaTeX command name is not text to re-space) and without "$$"
# (``$ $`` is an empty formula, not a re-spaced ``$$``).
TEXT_ALPHABET = "abcxyzABC0123456789+-*/=<>^!.,;:?()[]{}_$'\" "
OPERATORS = "+-*/=<>^!"
texts = st.text(alphabet=TEXT_ALPHABET, min_size=1, max_size=40).filter(lambda t: "$$" not in t)


@settings(max_examples=200, deadline=None)
@given(texts, st.data())
def test_inserted_whitespace_and_case_changes_keep_the_key(text, data):
    positions = data.draw(st.lists(st.integers(0, len(text)), max_size=6))
    spaced = text
    for position in sorted(positions, reverse=True):
        spaced = spaced[:position] + data.draw(st.sampled_from([" ", "  ", "\n", "\t", "~"])) + spaced[position:]
    variant = spaced.swapcase() if data.draw(st.booleans()) else spaced.lower()
    assert normalised_key(variant) == normalised_key(text)


def _mutations(text: str, data) -> str:
    """``text`` with one digit, operator or ``!`` replaced, inserted or deleted."""
    sensitive = [i for i, ch in enumerate(text) if ch.isdigit() or ch in OPERATORS]
    kind = data.draw(st.sampled_from(["insert", "replace", "delete"] if sensitive else ["insert"]))
    if kind == "insert":
        position = data.draw(st.integers(0, len(text)))
        return text[:position] + data.draw(st.sampled_from("0123456789" + OPERATORS)) + text[position:]
    position = data.draw(st.sampled_from(sensitive))
    if kind == "delete":
        return text[:position] + text[position + 1 :]
    pool = "0123456789" if text[position].isdigit() else OPERATORS
    return text[:position] + data.draw(st.sampled_from(pool.replace(text[position], ""))) + text[position + 1 :]


@settings(max_examples=300, deadline=None)
@given(texts, st.data())
def test_changing_a_digit_operator_or_factorial_changes_the_key(text, data):
    assert normalised_key(_mutations(text, data)) != normalised_key(text)


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
