"""Keys for comparing problem statements: exact (whitespace-trimmed) and normalised.

The normalised key ignores what typesetting changes without changing the problem: Unicode
compatibility forms, letter case, whitespace, math delimiters (``$``, ``$$``, ``\\(``, ``\\)``,
``\\[``, ``\\]``), ``\\left``/``\\right``, ``\\displaystyle``, LaTeX spacing commands,
``\\dfrac``/``\\tfrac`` versus ``\\frac``, braces around a one-character sub/superscript
(``x_{1}`` versus ``x_1``), quotes in prose, and sentence punctuation.

It never drops a character that can change the mathematics: digits, operators and ``!``
always stay, and so does punctuation inside math (``(0, 0)`` keys as ``(0,0)``, so ``\\gcd(1, 23)``
and ``\\gcd(12, 3)`` stay apart). Sentence punctuation (``. , ; : ?``) is dropped only in prose,
and only when the next character that is not whitespace or a delimiter is a letter, a quote or
the end of the text (``3.5`` keeps its point, ``1, 23`` keeps its comma). Whitespace is removed
last, after every decision that looks at it. Dedup and the contamination check both use these keys.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

_FRACTION_VARIANTS = re.compile(r"\\[dt]frac(?![a-zA-Z])")
_DROPPED_COMMANDS = re.compile(r"\\(?:left|right|displaystyle|textstyle|quad|qquad)(?![a-zA-Z])|\\[,;:! ]")
_MATH_DELIMITER = re.compile(r"(?<!\\)\$\$?|\\[()\[\]]")
_SENTENCE_PUNCTUATION = re.compile(r"[.,;:?](?:[\s~]*[.,;:?])*")
_QUOTES = "'\"`"
_SKIPPED_AFTER_PUNCTUATION = re.compile(r"(?:\s|~|(?<!\\)\$|\\[()\[\]])*")
_WHITESPACE = re.compile(r"[\s~]+")
_BRACED_SCRIPT = re.compile(r"([_^])\{(\w)\}")


def exact_key(text: str) -> str:
    """The problem text with surrounding whitespace removed."""
    return text.strip()


def _ends_a_sentence(text: str, end: int) -> bool:
    """Whether punctuation ending at ``end`` is followed (past whitespace and delimiters) by a
    letter, a quote or the end of the text."""
    after = _SKIPPED_AFTER_PUNCTUATION.match(text, end).end()
    return after == len(text) or text[after].isalpha() or text[after] in _QUOTES


def _prose_segment(text: str, start: int, stop: int) -> str:
    """Prose between math segments: drop sentence punctuation and quotes."""
    out = []
    position = start
    for match in _SENTENCE_PUNCTUATION.finditer(text, start, stop):
        out.append(text[position : match.start()])
        if not _ends_a_sentence(text, match.end()):
            out.append(match.group())
        position = match.end()
    out.append(text[position:stop])
    return "".join(ch for ch in "".join(out) if ch not in _QUOTES)


def _strip_punctuation_and_delimiters(text: str) -> str:
    """Walk prose and math segments (split at unescaped delimiters); keep math as it is,
    except a sentence's closing punctuation typed just inside the closing delimiter."""
    out = []
    in_math = False
    position = 0
    for delimiter in [*_MATH_DELIMITER.finditer(text), None]:
        stop = len(text) if delimiter is None else delimiter.start()
        if in_math:
            segment = text[position:stop]
            trailing = re.search(r"[.,;:](?:\s*[.,;:])*\s*\Z", segment)
            if trailing is not None and delimiter is not None and _ends_a_sentence(text, delimiter.end()):
                segment = segment[: trailing.start()]
            out.append(segment)
        else:
            out.append(_prose_segment(text, position, stop))
        if delimiter is not None:
            position = delimiter.end()
            in_math = not in_math
    return "".join(out)


def normalised_text(text: str) -> str:
    """The problem text with typesetting-only differences removed (see module docstring).

    One pass in this order: Unicode NFKC and case folding; LaTeX variants and spacing
    commands; punctuation and delimiters (decided while whitespace still separates tokens);
    whitespace; script braces; a final NFKC so characters brought together by the removals
    compose the same way as in a text typed without them.
    """
    text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    text = _FRACTION_VARIANTS.sub(r"\\frac", text)
    text = _DROPPED_COMMANDS.sub(" ", text)
    text = _strip_punctuation_and_delimiters(text)
    text = _WHITESPACE.sub("", text)
    text = _BRACED_SCRIPT.sub(r"\1\2", text)
    return unicodedata.normalize("NFKC", text)


def normalised_key(text: str) -> str:
    """A short digest of :func:`normalised_text` (keeps memory flat on large sets)."""
    return hashlib.sha1(normalised_text(text).encode("utf-8")).hexdigest()
