"""The exact path for numeric answers (reward.math_numbers) never contradicts math-verify.

Values are drawn as lists of terms ``coefficient * sqrt(r) * pi**k`` and written in LaTeX
in randomly chosen spellings (fractions, decimals, ``\\sqrt{c^2 r}``, shorthands, term
order); tuples, sets and matrices of such values too.  Whenever :func:`quick_compare`
decides a pair, math-verify (run here, on the main thread, with the worker's parse
configuration) must give the same verdict.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reward.math_answer import normalise, quick_compare
from reward.math_numbers import Number, clearly_different, parse_number

RADICANDS = [1, 1, 1, 2, 3, 5, 6, 7]
_terms = st.lists(
    st.tuples(
        st.fractions(min_value=-12, max_value=12, max_denominator=8).filter(bool),
        st.sampled_from(RADICANDS),
        st.sampled_from([0, 0, 0, 1]),
    ),
    min_size=1,
    max_size=2,
    unique_by=lambda term: (term[1], term[2]),
)


def _rational(draw, value: Fraction, leading: bool, slash: bool = True) -> str:
    """A spelling of a rational; ``leading``: may carry its own sign (it starts the answer);
    ``slash``: ``a/b`` allowed (not before a factor: ``1/3\\sqrt2`` is 1/(3 sqrt 2))."""
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    choices = [f"\\frac{{{magnitude.numerator}}}{{{magnitude.denominator}}}"]
    if magnitude.denominator == 1:
        choices.append(str(magnitude.numerator))
    if magnitude.numerator < 10 and magnitude.denominator < 10 and magnitude.denominator > 1:
        choices.append(f"\\frac{magnitude.numerator}{magnitude.denominator}")
    if 10**6 % magnitude.denominator == 0:
        choices.append(f"{float(magnitude):.6f}".rstrip("0").rstrip("."))
    if magnitude.denominator > 1 and slash:
        choices.append(f"{magnitude.numerator}/{magnitude.denominator}")
    text = draw(st.sampled_from(choices))
    if sign and leading and text.startswith("\\frac{") and draw(st.booleans()):
        return "\\frac{-" + text[len("\\frac{") :]
    return sign + text


def _term(draw, coefficient: Fraction, radicand: int, pi: int) -> str:
    """A spelling of one term, with its sign in front."""
    sign = "-" if coefficient < 0 else ""
    magnitude = abs(coefficient)
    factor = ""
    if radicand != 1:
        root = draw(st.sampled_from([f"\\sqrt{{{radicand}}}", f"\\sqrt{radicand}"]))
        factor += root
    if pi:
        factor += "\\pi"
    if not factor:
        return sign + _rational(draw, magnitude, leading=False)
    styles = ["coefficient first"]
    if magnitude.denominator > 1:
        styles.append("over denominator")
    if radicand != 1 and magnitude.denominator == 1 and not pi:
        styles.append("inside the root")
    style = draw(st.sampled_from(styles))
    if style == "inside the root":
        return f"{sign}\\sqrt{{{magnitude.numerator**2 * radicand}}}"
    if style == "over denominator":
        numerator = "" if magnitude.numerator == 1 else str(magnitude.numerator)
        return f"{sign}\\frac{{{numerator}{factor}}}{{{magnitude.denominator}}}"
    coefficient_text = "" if magnitude == 1 else _rational(draw, magnitude, leading=False, slash=False)
    return f"{sign}{coefficient_text}{factor}"


@st.composite
def _value(draw, terms=None):
    terms = terms if terms is not None else draw(_terms)
    order = draw(st.permutations(terms))
    parts = [_term(draw, *term) for term in order]
    text = parts[0]
    for part in parts[1:]:
        text += part if part.startswith("-") else "+" + part
    return terms, text


def _perturbed(terms, change: Fraction):
    coefficient, radicand, pi = terms[0]
    if coefficient + change == 0:
        change *= 2
    return [(coefficient + change, radicand, pi)] + list(terms[1:])


def _math_verify(gold: str, pred: str) -> bool:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    configs = [LatexExtractionConfig(), ExprExtractionConfig()]
    return verify(parse("\\boxed{" + gold + "}", configs), parse("\\boxed{" + pred + "}", configs))


def _check(gold: str, pred: str) -> bool | None:
    decided = quick_compare(gold, pred)
    if decided is not None:
        assert decided == _math_verify(gold, pred), (gold, pred, decided)
    return decided


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_same_value_in_two_spellings(data):
    terms, gold = data.draw(_value())
    _, pred = data.draw(_value(terms))
    assert _check(gold, pred) is True, (gold, pred)


@settings(max_examples=80, deadline=None)
@given(st.data(), st.sampled_from([Fraction(1), Fraction(-1, 2), Fraction(1, 3), Fraction(5)]))
def test_different_values(data, change):
    terms, gold = data.draw(_value())
    _, pred = data.draw(_value(_perturbed(terms, change)))
    assert _check(gold, pred) is False, (gold, pred)


@st.composite
def _structure(draw):
    kind = draw(st.sampled_from(["tuple", "set", "matrix"]))
    size = draw(st.integers(2, 3))
    values = [
        draw(
            _value(
                draw(
                    st.lists(
                        st.tuples(
                            st.fractions(-6, 6, max_denominator=4).filter(bool), st.sampled_from([1, 2, 3]), st.just(0)
                        ),
                        min_size=1,
                        max_size=1,
                    )
                )
            )
        )[1]
        for _ in range(size)
    ]
    if kind == "tuple":
        return "(" + ", ".join(values) + ")"
    if kind == "set":
        return "\\{" + ", ".join(values) + "\\}"
    return "\\begin{pmatrix} " + " \\\\ ".join(values) + " \\end{pmatrix}"


@settings(max_examples=40, deadline=None)
@given(_structure(), _structure())
def test_tuples_sets_and_matrices(gold, pred):
    _check(gold, pred)
    _check(gold, gold.replace(" ", ""))


@pytest.mark.parametrize(
    "gold, pred, expected",
    [
        ("\\sqrt{8}", "2\\sqrt{2}", True),
        ("\\frac{\\sqrt{5}-1}{2}", "\\frac{\\sqrt5}{2}-\\frac12", True),
        ("\\frac{9}{4}\\pi", "2.25\\pi", True),
        ("2^{20}", "4^{10}", True),
        ("\\binom{10}{3}", "120", True),
        ("5^{1/2}", "\\sqrt5", True),
        ("\\$18.90", "18.9", True),
        ("2\\pi", "4\\pi", False),
        ("\\frac{1}{3}", "0.333", False),
        ("\\frac{1}{3}", "0.333333", None),  # math-verify rounds floats to 6 places: equal there
        ("50\\%", "0.5", None),  # math-verify reads 50% as 0.5 too
        ("\\frac\\pi2", "\\frac{\\pi}{2}", None),  # math-verify does not read \frac\pi2 as pi/2
        ("\\sqrt23", "3\\sqrt2", None),  # shorthand that TeX and parsers may read differently
        ("(1, 1)", "(2, 2)", None),  # empty intervals to math-verify
        ("(2, -1)", "(-1, 2)", False),
        ("\\{1, 3\\}", "\\{3, 1\\}", True),
        ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", True),
        ("\\begin{pmatrix} -\\frac{1}{3} \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix} -1/3 \\\\ 2 \\end{pmatrix}", True),
        ("x^2", "x^3", None),
        ("e^2", "e^{3}", None),
    ],
)
def test_exact_path_labelled(gold, pred, expected):
    assert _check(gold, pred) is expected


@pytest.mark.parametrize(
    "text",
    [
        "x",
        "\\sqrt[3]{2}",
        "\\pi^2",
        "\\frac{1}{\\pi}",
        "\\frac{1}{1+\\sqrt2}",
        "10^{100}",
        "1" * 50,
        "\\sqrt{-4}",
        "2^{x}",
    ],
)
def test_outside_the_grammar_is_left_to_math_verify(text):
    assert parse_number(normalise(text)) is None


def test_canonical_forms():
    assert parse_number("\\frac{1}{\\sqrt{2}}") == parse_number("\\frac{\\sqrt{2}}{2}")
    assert parse_number("\\sqrt{2}\\sqrt{3}") == parse_number("\\sqrt{6}")
    assert parse_number("0") == Number({})
    assert not clearly_different(parse_number("\\frac{1}{3}"), parse_number("0.333334"))
