"""Overlap check between training problems and evaluation problems, in two tiers.

Evaluation problems are read from prepared parquet files (``extra_info.problem``). Tier 1: a
training problem matches when its statement is identical after trimming (``exact``) or after
:func:`data_prep.problem_text.normalised_text` (``normalised``). Tier 2 (near duplicates,
``ngram``): it shares a run of n consecutive words with an evaluation problem
(:mod:`data_prep.near_duplicates`), which catches paraphrases and problems quoted inside longer
texts. The preparation CLIs report both tiers with counts, drop tier 1 with
``--drop-contaminated`` and tier 2 with ``--drop-near-duplicates``;
``python -m data_prep.contamination`` reports the overlap between already prepared files::

    python -m data_prep.contamination ~/data/dfpo/math_train.parquet \\
        --against ~/data/dfpo/aime24.parquet ~/data/dfpo/aime25.parquet ~/data/dfpo/hmmt25.parquet
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from data_prep.errors import DataPrepError
from data_prep.near_duplicates import DEFAULT_NGRAM_SIZE, NgramIndex
from data_prep.problem_text import exact_key, normalised_key

NEAR_DUPLICATE = "ngram"


@dataclass(frozen=True)
class ContaminationMatch:
    """A training problem matching an evaluation problem: how (``exact``/``normalised``/``ngram``) and which."""

    kind: str
    evaluation_problem: str  # "<file> <data_source> <source_id>"
    shared: str = ""  # the shared words of an ``ngram`` match

    @property
    def is_near_duplicate(self) -> bool:
        """A tier-2 match (shared n-gram), not an equal statement."""
        return self.kind == NEAR_DUPLICATE

    def describe(self) -> str:
        """``<kind> match with evaluation problem <label>`` plus the shared words of an n-gram match."""
        text = f"{self.kind} match with evaluation problem {self.evaluation_problem}"
        return f'{text} (shares "{self.shared}")' if self.shared else text


@dataclass
class EvaluationIndex:
    """Exact and normalised keys and word n-grams of every evaluation problem, with a label for reports."""

    exact: dict[str, str] = field(default_factory=dict)
    normalised: dict[str, str] = field(default_factory=dict)
    ngrams: NgramIndex = field(default_factory=NgramIndex)

    def add(self, problem: str, label: str) -> None:
        self.exact.setdefault(exact_key(problem), label)
        self.normalised.setdefault(normalised_key(problem), label)
        self.ngrams.add(problem, label)

    def match(self, problem: str) -> ContaminationMatch | None:
        """The evaluation problem ``problem`` duplicates or nearly duplicates, if any (the first tier preferred)."""
        label = self.exact.get(exact_key(problem))
        if label is not None:
            return ContaminationMatch("exact", label)
        label = self.normalised.get(normalised_key(problem))
        if label is not None:
            return ContaminationMatch("normalised", label)
        near = self.ngrams.match(problem)
        if near is not None:
            return ContaminationMatch(NEAR_DUPLICATE, near.label, near.shared)
        return None

    def __len__(self) -> int:
        return len(self.exact)


def read_prepared_problems(path: Path) -> list[tuple[str, str, str]]:
    """``(data_source, source_id, problem)`` of every row of a file written by data_prep."""
    import pyarrow.parquet as pq

    if not path.is_file():
        raise DataPrepError(
            f"{path}: evaluation file does not exist (prepare it first with python -m data_prep.math/code)"
        )
    table = pq.read_table(path, columns=["data_source", "extra_info"])
    rows = []
    for position, (source, extra_info) in enumerate(
        zip(table["data_source"].to_pylist(), table["extra_info"].to_pylist(), strict=True)
    ):
        if not isinstance(extra_info, dict) or not isinstance(extra_info.get("problem"), str):
            raise DataPrepError(
                f"{path} row {position}: extra_info.problem is missing; the contamination check reads files written by "
                "python -m data_prep.math / data_prep.code"
            )
        rows.append((source, str(extra_info.get("source_id", position)), extra_info["problem"]))
    return rows


def load_evaluation_index(paths: list[Path], ngram_size: int = DEFAULT_NGRAM_SIZE) -> EvaluationIndex:
    """Index the problems of the given prepared evaluation files (n-grams of ``ngram_size`` words)."""
    index = EvaluationIndex(ngrams=NgramIndex(ngram_size))
    for path in paths:
        for source, source_id, problem in read_prepared_problems(path):
            index.add(problem, f"{path.name} {source} {source_id}")
    return index


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive number of words, got {value}")
    return value


def add_ngram_argument(parser: argparse.ArgumentParser) -> None:
    """``--ngram-size``: words in a run shared with an evaluation problem that makes a near duplicate."""
    parser.add_argument(
        "--ngram-size",
        type=_positive_int,
        default=DEFAULT_NGRAM_SIZE,
        metavar="N",
        help=f"near duplicates share a run of N words with an evaluation problem (default {DEFAULT_NGRAM_SIZE})",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m data_prep.contamination",
        description="Report training problems that also appear in evaluation files (exact or normalised text, "
        "or a shared run of n words).",
    )
    parser.add_argument("train", type=Path, help="prepared training parquet")
    parser.add_argument("--against", type=Path, nargs="+", required=True, help="prepared evaluation parquet files")
    parser.add_argument("--show", type=int, default=20, help="print at most this many matches (default 20)")
    add_ngram_argument(parser)
    args = parser.parse_args(argv)
    try:
        index = load_evaluation_index(args.against, args.ngram_size)
        counts: Counter = Counter()
        shown = 0
        train_rows = read_prepared_problems(args.train)
        for source, source_id, problem in train_rows:
            found = index.match(problem)
            if found is None:
                continue
            counts[found.kind] += 1
            if shown < args.show:
                shared = f'  (shares "{found.shared}")' if found.shared else ""
                print(
                    f"{found.kind:>10}  {args.train.name} {source} {source_id}  ==  {found.evaluation_problem}{shared}"
                )
                shown += 1
    except DataPrepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{len(train_rows)} training problems checked against {len(index)} evaluation problems: "
        f"{counts['exact']} exact and {counts['normalised']} normalised-text matches, "
        f"{counts[NEAR_DUPLICATE]} near duplicates (a shared run of {args.ngram_size} words)"
    )
    return 1 if counts else 0


if __name__ == "__main__":
    sys.exit(main())
