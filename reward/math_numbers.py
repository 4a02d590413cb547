"""Exact values of numeric LaTeX answers: rational combinations of square roots and pi.

:func:`parse_number` reads a normalised answer (:func:`reward.math_answer.normalise`)
written in a small grammar -- integers, decimals, ``\\frac``, ``/``, ``\\sqrt`` of a
rational, ``\\pi``, ``\\binom`` of small integers, integer powers (and ``^{1/2}``), sums,
products and parentheses -- into a canonical :class:`Number`: a map from basis elements
``sqrt(r) * pi**k`` (``r`` square-free, ``k`` 0 or 1) to rational coefficients.

Canonical forms decide equality exactly: square roots of distinct square-free integers
are linearly independent over the rationals, and pi is transcendental, so two values are
equal if and only if their maps are equal.  Anything outside the grammar (variables,
``e``, ``i``, logarithms, nested or cube roots, ``pi**2``...) returns ``None`` and is left
to math-verify.  Shorthand arguments that TeX and a parser could read differently
(``\\sqrt23``, ``\\frac123``) are refused.  Every size is bounded (number length,
exponents, radicands), so parsing costs microseconds whatever the input.
"""

from __future__ import annotations

import re
from decimal import Decimal, localcontext
from fractions import Fraction
from math import comb

MAX_DIGITS = 40
"""Longest number token accepted."""
MAX_EXPONENT = 64
MAX_RADICAND = 10**8
MAX_BINOMIAL = 200
_PI_50 = Decimal("3.14159265358979323846264338327950288419716939937510")

_TOKEN = re.compile(r"\d+(?:\.\d*)?|\.\d+|\\(?:frac|sqrt|pi|binom|cdot|times)(?![A-Za-z])|[-+*/^{}()]")


class _Refused(Exception):
    """The answer is outside the grammar (math-verify decides it)."""


Basis = tuple[int, int]
"""(square-free radicand r >= 1, power of pi k in {0, 1}) standing for sqrt(r) * pi**k."""


class Number:
    """sum(coefficient * sqrt(r) * pi**k); ``terms`` never holds a zero coefficient."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[Basis, Fraction]) -> None:
        self.terms = {basis: value for basis, value in terms.items() if value}

    @classmethod
    def rational(cls, value: Fraction) -> Number:
        return cls({(1, 0): Fraction(value)})

    def as_rational(self) -> Fraction | None:
        if not self.terms:
            return Fraction(0)
        if set(self.terms) == {(1, 0)}:
            return self.terms[(1, 0)]
        return None

    def __add__(self, other: Number) -> Number:
        terms = dict(self.terms)
        for basis, value in other.terms.items():
            terms[basis] = terms.get(basis, Fraction(0)) + value
        return Number(terms)

    def __neg__(self) -> Number:
        return Number({basis: -value for basis, value in self.terms.items()})

    def __mul__(self, other: Number) -> Number:
        terms: dict[Basis, Fraction] = {}
        for (r1, k1), v1 in self.terms.items():
            for (r2, k2), v2 in other.terms.items():
                if k1 + k2 > 1:
                    raise _Refused("pi squared")
                outside, radicand = _square_free(r1 * r2)
                basis = (radicand, k1 + k2)
                terms[basis] = terms.get(basis, Fraction(0)) + v1 * v2 * outside
        return Number(terms)

    def inverse(self) -> Number:
        """1 / self, for a single term without pi (c * sqrt(r) -> sqrt(r) / (c * r))."""
        if len(self.terms) != 1:
            raise _Refused("division by a sum")
        (((radicand, pi_power), value),) = self.terms.items()
        if pi_power:
            raise _Refused("division by pi")
        return Number({(radicand, 0): 1 / (value * radicand)})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Number) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(frozenset(self.terms.items()))

    def approximate(self) -> Decimal:
        """The value to about 45 significant digits."""
        with localcontext() as context:
            context.prec = 50
            total = Decimal(0)
            for (radicand, pi_power), value in self.terms.items():
                term = Decimal(value.numerator) / Decimal(value.denominator)
                if radicand != 1:
                    term *= Decimal(radicand).sqrt()
                if pi_power:
                    term *= _PI_50
                total += term
            return total

    def __repr__(self) -> str:
        return f"Number({self.terms})"


def _square_free(n: int) -> tuple[int, int]:
    """(a, b) with n == a * a * b and b square-free."""
    if n > MAX_RADICAND:
        raise _Refused("radicand too large")
    outside, rest = 1, n
    factor = 2
    while factor * factor <= rest:
        while rest % (factor * factor) == 0:
            rest //= factor * factor
            outside *= factor
        factor += 1
    return outside, rest


def _sqrt(value: Number) -> Number:
    rational = value.as_rational()
    if rational is None or rational < 0:
        raise _Refused("square root of a non-rational or negative value")
    if rational == 0:
        return Number({})
    # sqrt(p / q) = sqrt(p * q) / q
    outside, radicand = _square_free(rational.numerator * rational.denominator)
    return Number({(radicand, 0): Fraction(outside, rational.denominator)})


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        position = 0
        for match in _TOKEN.finditer(text):
            if match.start() != position:
                raise _Refused(f"unexpected {text[position : match.start()]!r}")
            self.tokens.append(match.group())
            position = match.end()
        if position != len(text) or not self.tokens:
            raise _Refused("unexpected trailing text")
        self.index = 0

    def peek(self) -> str | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise _Refused(f"expected {expected!r}, got {token!r}")
        self.index += 1
        return token

    def expression(self) -> Number:
        sign = 1
        if self.peek() in ("+", "-"):
            sign = -1 if self.take() == "-" else 1
        value = self.term()
        value = -value if sign < 0 else value
        while self.peek() in ("+", "-"):
            operator = self.take()
            term = self.term()
            value = value + (-term if operator == "-" else term)
        return value

    def term(self) -> Number:
        value = self.power()
        while True:
            token = self.peek()
            if token in ("\\cdot", "\\times", "*"):
                self.take()
                value = value * self.power()
            elif token == "/":
                self.take()
                value = value * self.power().inverse()
                if self.peek() not in (None, "+", "-", ")", "}"):
                    raise _Refused("a product after '/'")  # 1/3\sqrt2 is 1/(3 sqrt 2) to math-verify
            elif token in ("\\sqrt", "\\pi", "\\frac"):  # implicit product: 2\sqrt3, \frac12\pi
                value = value * self.power()
            else:
                return value

    def power(self) -> Number:
        base = self.atom()
        if self.peek() != "^":
            return base
        self.take()
        exponent = self.argument().as_rational()
        if exponent is None:
            raise _Refused("non-rational exponent")
        if exponent == Fraction(1, 2):
            return _sqrt(base)
        if exponent.denominator != 1 or abs(exponent) > MAX_EXPONENT:
            raise _Refused("exponent")
        rational = base.as_rational()
        if rational is not None:
            if rational == 0 and exponent < 0:
                raise _Refused("zero to a negative power")
            if abs(rational.numerator) > 10**6 or rational.denominator > 10**6:
                raise _Refused("power too large")
            return Number.rational(rational ** int(exponent))
        if exponent < 0 or exponent > 4:
            raise _Refused("power of an irrational value")
        result = Number.rational(Fraction(1))
        for _ in range(int(exponent)):
            result = result * base
        return result

    def atom(self) -> Number:
        token = self.take()
        if token[0].isdigit() or token[0] == ".":
            if len(token) > MAX_DIGITS:
                raise _Refused("number too long")
            return Number.rational(Fraction(token))
        if token == "\\pi":
            return Number({(1, 1): Fraction(1)})
        if token == "\\frac":
            digits = self.peek()
            if digits is not None and len(digits) == 2 and digits.isdigit():  # \frac12
                self.take()
                return Number.rational(Fraction(int(digits[0]), int(digits[1])))
            if self.peek() != "{":
                raise _Refused("\\frac with an unbraced numerator")
            numerator, denominator = self.argument(), self.argument()
            return numerator * denominator.inverse()
        if token == "\\sqrt":
            return _sqrt(self.argument())
        if token == "\\binom":
            n, k = self.argument().as_rational(), self.argument().as_rational()
            if n is None or k is None or n.denominator != 1 or k.denominator != 1 or not 0 <= n <= MAX_BINOMIAL:
                raise _Refused("binomial")
            return Number.rational(Fraction(comb(int(n), int(k)) if k >= 0 else 0))
        if token in ("(", "{"):
            value = self.expression()
            self.take(")" if token == "(" else "}")
            return value
        raise _Refused(f"unexpected {token!r}")

    def argument(self) -> Number:
        """A braced group or a one-digit number (``\\sqrt3``, ``\\frac{\\pi}2``).

        ``\\frac\\pi2`` is refused too: math-verify does not read it as pi / 2.
        """
        token = self.peek()
        if token == "{":
            return self.atom()  # the braced group, read as atom() reads one
        if token is not None and token.isdigit():
            self.take()
            if len(token) != 1:
                raise _Refused("ambiguous shorthand argument")  # \sqrt23 is sqrt(2)*3 to TeX
            return Number.rational(Fraction(int(token)))
        raise _Refused("argument")


def parse_number(normalised: str) -> Number | None:
    """The exact value of a normalised numeric answer, or ``None`` outside the grammar."""
    if not normalised or len(normalised) > 400:
        return None
    try:
        parser = _Parser(normalised)
        value = parser.expression()
        if parser.peek() is not None:
            return None
        return value
    except (_Refused, ZeroDivisionError, OverflowError, ValueError, RecursionError):
        return None


def clearly_different(a: Number, b: Number) -> bool:
    """True when the values differ by more than math-verify's tolerances could bridge.

    math-verify rounds to 6 decimals when a side is a float and evaluates differences to
    15 digits otherwise, so a gap above 1e-5 (absolute, and relative to the larger value)
    can never compare equal there.
    """
    a_value, b_value = a.approximate(), b.approximate()
    scale = max(Decimal(1), abs(a_value), abs(b_value))
    return abs(a_value - b_value) > Decimal("1e-5") * scale
