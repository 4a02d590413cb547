"""De-duplication of problems by normalised statement (first occurrence kept).

DAPO-Math-17k holds ~1.79M rows that are ~17.4k problems each repeated ~100 times, and the
code training sources overlap (DeepCoder includes a PrimeIntellect subset). A duplicate whose
reference answer differs from the kept row's is reported separately: it usually means the
two copies are not the same problem after all, or that one label is wrong.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from data_prep.problem_text import normalised_key


@dataclass(frozen=True)
class DuplicateCheck:
    """Outcome for one problem: is it a repeat, and does its answer disagree with the first copy."""

    is_duplicate: bool
    answer_differs: bool = False
    first_location: str = ""


class Deduplicator:
    """Remembers the normalised key (a digest) and answer of each problem kept so far.

    Normalising is the costly step, and most repeats (DAPO's ~100 copies) are byte-identical,
    so the normalised key of each distinct exact text is remembered by a 16-byte digest.
    """

    def __init__(self) -> None:
        self._kept: dict[str, tuple[str, str]] = {}
        self._key_of_exact_text: dict[bytes, str] = {}

    def _key(self, problem: str) -> str:
        exact = hashlib.blake2b(problem.encode("utf-8"), digest_size=16).digest()
        key = self._key_of_exact_text.get(exact)
        if key is None:
            key = self._key_of_exact_text[exact] = normalised_key(problem)
        return key

    def check(self, problem: str, answer: str, location: str) -> DuplicateCheck:
        """Register ``problem`` if new; otherwise report it as a duplicate of the first copy."""
        key = self._key(problem)
        first = self._kept.get(key)
        if first is None:
            self._kept[key] = (answer, location)
            return DuplicateCheck(False)
        first_answer, first_location = first
        return DuplicateCheck(True, answer_differs=first_answer != answer, first_location=first_location)

    def __len__(self) -> int:
        return len(self._kept)
