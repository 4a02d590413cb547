"""Final-answer extraction and the cheap exact comparison that runs before math-verify.

Extraction: the answer is the content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) or
the last DAPO-style ``Answer: ...`` line, whichever starts later in the response.  Only
the last :data:`SCAN_CHARS` characters are scanned, and the scan is a single linear pass,
so hostile inputs (megabytes of braces, thousands of nested boxes) cost bounded time here;
what they cost in math-verify is bounded by :mod:`reward.math_verify_pool`.

Cheap path: :func:`quick_compare` decides pairs that need no computer algebra (the same
string after conservative normalisation, exact values -- rationals, square roots, pi,
powers, binomials, see :mod:`reward.math_numbers` -- and tuples, sets, matrices and
intervals of them, choice letters) and returns ``None`` when math-verify must decide.
It answers only where math-verify cannot disagree (property-tested against math-verify
in tests/reward).
"""

from __future__ import annotations

import re
from fractions import Fraction

from reward.math_numbers import Number, clearly_different, parse_number

SCAN_CHARS = 65536
"""How many characters at the end of a response are searched for the final answer."""

_BOX_OR_BRACE = re.compile(r"\\(?:boxed|fbox)\s*\{|\\boxed +(?=[^\s{])|[{}]")
_ANSWER_LINE = re.compile(r"(?im)^[ \t>*#_]*(?:final\s+)?answer[ \t*_]*:[ \t*_]*(.*?)[ \t]*$")
_SPACE_TOKEN = re.compile(r"\\boxed +([^\s$]+)")


def extract_answer(response: str) -> str | None:
    """The final answer of a response, or ``None`` when it gives none.

    >>> extract_answer(r"so \\boxed{\\frac{1}{2}}.")
    '\\\\frac{1}{2}'
    >>> extract_answer("blah\\nAnswer: $42$")
    '42'
    """
    tail = response[-SCAN_CHARS:]
    box_start, box_content = _last_box(tail)
    line_start, line_content = _last_answer_line(tail)
    if box_start < 0 and line_start < 0:
        return None
    content = (box_content if box_start >= line_start else line_content).strip()
    return content or None


def _last_box(text: str) -> tuple[int, str]:
    """(start offset, content) of the completed box that opens last; (-1, "") if none.

    One left-to-right pass with a stack of open braces, each marked as a box opener or a
    plain brace, so nested and unbalanced inputs stay linear.
    """
    stack: list[int] = []  # content start for a box opener, -1 for a plain brace
    starts: list[int] = []  # position of the backslash for box openers
    best_start, best_content = -1, ""
    for match in _BOX_OR_BRACE.finditer(text):
        token = match.group()
        if token == "{":
            stack.append(-1)
            starts.append(-1)
        elif token == "}":
            if not stack:
                continue
            content_start = stack.pop()
            start = starts.pop()
            if content_start >= 0 and start > best_start:
                best_start, best_content = start, text[content_start : match.start()]
        elif token.endswith("{"):
            stack.append(match.end())
            starts.append(match.start())
        else:  # "\boxed 5": a single space-delimited token
            spaced = _SPACE_TOKEN.match(text, match.start())
            if spaced is not None and match.start() > best_start:
                best_start, best_content = match.start(), spaced.group(1)
    return best_start, best_content


def _last_answer_line(text: str) -> tuple[int, str]:
    """(start offset, cleaned content) of the last ``Answer: ...`` line; (-1, "") if none."""
    last = None
    for match in _ANSWER_LINE.finditer(text):
        last = match
    if last is None:
        return -1, ""
    return last.start(), _strip_math_delimiters(last.group(1))


def _strip_math_delimiters(content: str) -> str:
    """Remove the markup around an ``Answer:`` value: ``$..$``, ``\\(..\\)``, ``\\[..\\]``, bold, final period."""
    s = content.strip()
    changed = True
    while changed and s:
        changed = False
        for left, right in (("**", "**"), ("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
            if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
                s = s[len(left) : len(s) - len(right)].strip()
                changed = True
        if s.endswith("."):
            s = s[:-1].strip()
            changed = True
        if s.endswith("$") and s.count("$") == 1:
            s = s[:-1].strip()
            changed = True
        if s.startswith("$") and s.count("$") == 1:
            s = s[1:].strip()
            changed = True
    return s


_UNWRAP = re.compile(r"\\(?:text|textbf|mathrm|mathbf|operatorname)\s*\{([^{}]*)\}")
_SPACING = re.compile(r"(?<!\\)\\(?:left|right|displaystyle|[,;:! ])|\\q?quad")  # not the "\\" of a row break
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?")
_CHOICE = re.compile(r"^\(?([A-Ea-e])\)?$")
_INTEGER = re.compile(r"^[+-]?\d{1,100}$")


def normalise(answer: str) -> str:
    """A conservative canonical spelling: only rewrites that never change the value.

    Drops ``$`` (and a ``\\$`` currency sign), spacing commands, ``\\left``/``\\right``, whitespace, degree signs, a
    trailing period and percent sign (math-verify treats ``50\\%`` as 50), unwraps
    ``\\text{...}``-like macros, spells ``\\dfrac``/``\\tfrac`` as ``\\frac`` and a lone
    multiple-choice letter ``(B)`` as ``B``.
    """
    s = answer.replace("\\$", "").replace("$", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    previous = None
    while previous != s:
        previous = s
        s = _UNWRAP.sub(r"\1", s)
    s = _SPACING.sub("", s)
    s = _DEGREES.sub("", s)
    s = "".join(s.split())
    s = s.rstrip(".")
    if s.endswith("\\%"):
        s = s[:-2]
    elif s.endswith("%"):
        s = s[:-1]
    choice = _CHOICE.match(s)
    if choice is not None:
        s = choice.group(1).upper()
    return s


_BRACKETED = re.compile(r"^([(\[])([^()\[\]]*)([)\]])$")
_INFINITY = {"\\infty": 1, "+\\infty": 1, "-\\infty": -1}


def _as_number(s: str) -> Fraction | int | None:
    """A rational, or +1 / -1 standing for +/- infinity (tagged by type: ``int``)."""
    if s in _INFINITY:
        return _INFINITY[s]
    value = parse_number(s)
    return None if value is None else value.as_rational()


def _ordered(low: Fraction | int, high: Fraction | int) -> bool:
    """``low < high`` on the extended line (ints are the +/-1 infinity tags)."""
    low_key = (low * 2, 0) if type(low) is int else (0, low)
    high_key = (high * 2, 0) if type(high) is int else (0, high)
    return low_key < high_key


def _effective_brackets(match: re.Match, values: list) -> tuple[str, str]:
    """Brackets, with an infinite end always open (``[2, \\infty]`` is ``[2, \\infty)``)."""
    left = "(" if type(values[0]) is int else match.group(1)
    right = ")" if type(values[-1]) is int else match.group(3)
    return left, right


def _compare_bracketed(g: str, p: str) -> bool | None:
    """Intervals / pairs of two increasing numbers: ``(1,2)``, ``[1,3)``, ``(-\\infty,2]``.

    Equal iff same brackets and the same two numbers; decided only when both sides are
    such pairs (else ``None``).
    """
    g_match, p_match = _BRACKETED.match(g), _BRACKETED.match(p)
    if g_match is None or p_match is None:
        return None
    g_items, p_items = g_match.group(2).split(","), p_match.group(2).split(",")
    if len(g_items) != 2 or len(p_items) != 2:
        return None  # [1,2,3] may be a set
    g_values = [_as_number(item) for item in g_items]
    p_values = [_as_number(item) for item in p_items]
    if any(value is None for value in g_values + p_values):
        return None
    if not (_ordered(*g_values) and _ordered(*p_values)):
        return None  # only proper intervals / increasing pairs: (0,0] is empty
    same_brackets = _effective_brackets(g_match, g_values) == _effective_brackets(p_match, p_values)
    same_values = all(type(a) is type(b) and a == b for a, b in zip(g_values, p_values, strict=True))
    return same_brackets and same_values


_MATRIX = re.compile(r"^\\begin\{([pb]matrix)\}(.*)\\end\{\1\}$")


def _numbers(items: list[str]) -> list[Number] | None:
    values = [parse_number(item) for item in items]
    return None if any(value is None for value in values) else values  # type: ignore[return-value]


def _compare_numbers(g: list[Number], p: list[Number]) -> bool | None:
    """Element by element: all equal -> True; one clearly different -> False; else None."""
    if all(a == b for a, b in zip(g, p, strict=True)):
        return True
    if any(a != b and clearly_different(a, b) for a, b in zip(g, p, strict=True)):
        return False
    return None


def _compare_structures(g: str, p: str) -> bool | None:
    """Tuples ``(a, b, ...)``, sets ``\\{a, b\\}`` and matrices of exact numbers (see reward.math_numbers)."""
    if g.startswith("(") and g.endswith(")") and p.startswith("(") and p.endswith(")"):
        g_items, p_items = _numbers(g[1:-1].split(",")), _numbers(p[1:-1].split(","))
        if g_items is None or p_items is None or len(g_items) != len(p_items) or len(g_items) < 2:
            return None
        if len(g_items) == 2 and (g_items[0] == g_items[1] or p_items[0] == p_items[1]):
            return None  # (a, a) is an empty interval to math-verify
        return _compare_numbers(g_items, p_items)
    if g.startswith("\\{") and g.endswith("\\}") and p.startswith("\\{") and p.endswith("\\}"):
        g_items, p_items = _numbers(g[2:-2].split(",")), _numbers(p[2:-2].split(","))
        if g_items is None or p_items is None:
            return None
        if set(g_items) == set(p_items):
            return True
        lonely = [a for a in g_items if a not in p_items] + [b for b in p_items if b not in g_items]
        others = {id(a): p_items if a in g_items else g_items for a in lonely}
        if any(all(clearly_different(a, b) for b in others[id(a)]) for a in lonely):
            return False
        return None
    g_matrix, p_matrix = _MATRIX.match(g), _MATRIX.match(p)
    if g_matrix is None or p_matrix is None:
        return None
    g_rows = [row.split("&") for row in g_matrix.group(2).split("\\\\")]
    p_rows = [row.split("&") for row in p_matrix.group(2).split("\\\\")]
    if [len(row) for row in g_rows] != [len(row) for row in p_rows] or len({len(row) for row in g_rows}) != 1:
        return None
    g_items = _numbers([cell for row in g_rows for cell in row])
    p_items = _numbers([cell for row in p_rows for cell in row])
    if g_items is None or p_items is None:
        return None
    return _compare_numbers(g_items, p_items)


def quick_compare(gold: str, pred: str) -> bool | None:
    """Decide ``gold == pred`` without computer algebra when that is safe, else ``None``.

    ``True``: the normalised strings match, or both have the same exact value
    (:mod:`reward.math_numbers`: rationals, square roots, pi, powers, binomials), or are
    the same tuple, set, matrix or interval of such values.  ``False``: both are choice
    letters and differ, or both are such values and differ by more than math-verify's
    tolerances (never when a percent sign is present: math-verify reads ``50\\%`` as 0.5
    too).  ``None``: ask math-verify.  Property-tested against math-verify in tests/reward.
    """
    g, p = normalise(gold), normalise(pred)
    if g == p and g:
        return True
    if _INTEGER.match(g) and _INTEGER.match(p):
        return int(g) == int(p)
    if len(g) == len(p) == 1 and g in "ABCDE" and p in "ABCDE":
        return False  # distinct choice letters (equal ones matched above)
    percent = "%" in gold or "%" in pred
    g_value, p_value = parse_number(g), parse_number(p)
    if g_value is not None and p_value is not None:
        if g_value == p_value:
            return True
        return False if not percent and clearly_different(g_value, p_value) else None
    if not percent:
        structured = _compare_structures(g, p)
        if structured is not None:
            return structured
    return _compare_bracketed(g, p)
