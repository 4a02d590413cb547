"""Second tier of the contamination check: long word n-gram overlap with an evaluation problem.

The first tier (exact and normalised statement, :mod:`data_prep.problem_text`) misses
evaluation problems that were paraphrased or embedded in a longer text. Common decontamination
practice flags a training text that shares any run of n consecutive words with a benchmark
item (13-grams in GPT-3's contamination study, Brown et al. 2020, Appendix C). Here the words
are the alphanumeric runs and LaTeX command names of the NFKC, case-folded text (punctuation,
``$`` and spacing are ignored), and the default n is 13: shorter runs recur across unrelated
competition problems ("find the number of ordered pairs of positive integers"). A text with
fewer than n words can only match in the first tier.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

DEFAULT_NGRAM_SIZE = 13
_WORD = re.compile(r"\\[^\W\d_]+|[^\W_]+")


def words(text: str) -> list[str]:
    """Alphanumeric runs and LaTeX command names of the folded text, in order."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def _digest(ngram: list[str]) -> bytes:
    return hashlib.blake2b(" ".join(ngram).encode("utf-8"), digest_size=8).digest()


@dataclass(frozen=True)
class NgramMatch:
    """A shared run of ``n`` words and the evaluation problem it belongs to."""

    label: str
    shared: str


class NgramIndex:
    """Every n-gram of the evaluation problems (8-byte digests), with the first problem holding it."""

    def __init__(self, n: int = DEFAULT_NGRAM_SIZE) -> None:
        if n < 1:
            raise ValueError(f"the n-gram size must be a positive number of words, got {n}")
        self.n = n
        self._labels: dict[bytes, str] = {}

    def add(self, text: str, label: str) -> None:
        """Index the n-grams of one evaluation problem."""
        tokens = words(text)
        for start in range(len(tokens) - self.n + 1):
            self._labels.setdefault(_digest(tokens[start : start + self.n]), label)

    def match(self, text: str) -> NgramMatch | None:
        """The first evaluation problem sharing an n-gram with ``text``, if any."""
        tokens = words(text)
        for start in range(len(tokens) - self.n + 1):
            ngram = tokens[start : start + self.n]
            label = self._labels.get(_digest(ngram))
            if label is not None:
                return NgramMatch(label, " ".join(ngram))
        return None
