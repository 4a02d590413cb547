"""Keys for comparing problem statements: exact (whitespace-trimmed) and normalised.

The normalised key ignores what typesetting changes without changing the problem: Unicode
compatibility forms, letter case, whitespace, ``$`` delimiters, ``\\left``/``\\right``,
``\\displaystyle``, LaTeX spacing commands, ``\\dfrac``/``\\tfrac`` versus ``\\frac``, braces
around a one-character sub/superscript (``x_{1}`` versus ``x_1``), quotes and sentence
punctuation (a period or comma before a space or the end; ``3.5`` keeps its point). Dedup and
the contamination check both use these keys.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

_FRACTION_VARIANTS = re.compile(r"\\[dt]frac(?![a-zA-Z])")
_DROPPED_COMMANDS = re.compile(r"\\(?:left|right|displaystyle|textstyle|quad|qquad)(?![a-zA-Z])|\\[,;:! ]")
_SENTENCE_PUNCTUATION = re.compile(r"[.,;:!?]+(?=[\s$]|\Z)")
_DROPPED_CHARACTERS = re.compile(r"[\s$~'\"`]+")
_BRACED_SCRIPT = re.compile(r"([_^])\{(\w)\}")


def exact_key(text: str) -> str:
    """The problem text with surrounding whitespace removed."""
    return text.strip()


def _normalise_once(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _FRACTION_VARIANTS.sub(r"\\frac", text)
    text = _DROPPED_COMMANDS.sub("", text)
    text = _SENTENCE_PUNCTUATION.sub("", text)
    text = _DROPPED_CHARACTERS.sub("", text)
    return _BRACED_SCRIPT.sub(r"\1\2", text)


def normalised_text(text: str) -> str:
    """The problem text with typesetting-only differences removed (see module docstring).

    Removing characters can expose new matches (a period that now ends the text, a combining
    mark now next to its letter), so the rules are applied until nothing changes; every pass
    that changes the text shortens it or composes characters, so this ends quickly.
    """
    while True:
        normalised = _normalise_once(text)
        if normalised == text:
            return normalised
        text = normalised


def normalised_key(text: str) -> str:
    """A short digest of :func:`normalised_text` (keeps memory flat on large sets)."""
    return hashlib.sha1(normalised_text(text).encode("utf-8")).hexdigest()
