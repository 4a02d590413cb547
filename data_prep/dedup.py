"""De-duplication of problems: training sets by normalised statement, evaluation sets by id.

Training sets: DAPO-Math-17k holds ~1.79M rows that are ~17.4k problems each repeated ~100
times, and the code training sources overlap (DeepCoder includes a PrimeIntellect subset), so
repeats of a normalised statement are dropped (first occurrence kept). A duplicate whose
reference answer differs from the kept row's is reported separately: it usually means the
two copies are not the same problem after all, or that one label is wrong.

Evaluation sets: a benchmark is a fixed list of problems, and two of its problems may share a
statement (with different figures, constraints or ids). Only a repeated id is a duplicate; a
repeated statement under another id is kept and reported. A repeated id whose statement
differs is an error (two problems would share a ``problem_id`` downstream).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from data_prep.errors import DataPrepError
from data_prep.problem_text import normalised_key


@dataclass(frozen=True)
class DuplicateCheck:
    """Outcome for one problem: is it a repeat, and does its answer disagree with the first copy.

    For evaluation sets, ``same_statement_as`` names an earlier problem (another id) with the
    same normalised statement; the problem is kept.
    """

    is_duplicate: bool
    answer_differs: bool = False
    first_location: str = ""
    same_statement_as: str = ""


class Deduplicator:
    """Remembers the normalised key (a digest) and answer of each problem kept so far.

    Normalising is the costly step, and most repeats (DAPO's ~100 copies) are byte-identical,
    so the normalised key of each distinct exact text is remembered by a 16-byte digest.
    """

    def __init__(self) -> None:
        self._kept: dict[str, tuple[str, str]] = {}
        self._key_of_exact_text: dict[bytes, str] = {}
        self._by_id: dict[str, tuple[str, str, str]] = {}

    def _key(self, problem: str) -> str:
        exact = hashlib.blake2b(problem.encode("utf-8"), digest_size=16).digest()
        key = self._key_of_exact_text.get(exact)
        if key is None:
            key = self._key_of_exact_text[exact] = normalised_key(problem)
        return key

    def check(self, problem: str, answer: str, location: str) -> DuplicateCheck:
        """Training sets: register ``problem`` if new; otherwise report it as a duplicate of the first copy."""
        key = self._key(problem)
        first = self._kept.get(key)
        if first is None:
            self._kept[key] = (answer, location)
            return DuplicateCheck(False)
        first_answer, first_location = first
        return DuplicateCheck(True, answer_differs=first_answer != answer, first_location=first_location)

    def check_evaluation(self, problem_id: str, problem: str, answer: str, location: str) -> DuplicateCheck:
        """Evaluation sets: a duplicate is a repeated ``problem_id``; a repeated statement is only reported."""
        key = self._key(problem)
        seen = self._by_id.get(problem_id)
        if seen is not None:
            first_key, first_answer, first_location = seen
            if first_key != key:
                raise DataPrepError(
                    f"{location}: evaluation problem id {problem_id!r} was already used by {first_location} for "
                    "another statement; give every evaluation problem its own id"
                )
            return DuplicateCheck(True, answer_differs=first_answer != answer, first_location=first_location)
        self._by_id[problem_id] = (key, answer, location)
        first = self._kept.setdefault(key, (answer, location))
        return DuplicateCheck(False, same_statement_as="" if first[1] == location else first[1])

    def __len__(self) -> int:
        return len(self._kept) if not self._by_id else len(self._by_id)
