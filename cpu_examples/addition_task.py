"""The toy task of the CPU recipes: single-digit addition with ``\\boxed{}`` answers.

Problems read "What is a + b?" for a, b in 0..:data:`MAX_TERM` (25 problems, sums 0..8). A
fixed, seeded split puts
:data:`NUM_TEST_PROBLEMS` of them in the evaluation set and the rest in the training set, so
evaluation is on sums the policy never trained on. The raw rows are written as JSON lines in the
plain math schema (``problem``, ``answer``, ``id``) and turned into verl parquet by data_prep's
real pipeline (``python -m data_prep.math`` with the sources ``arithmetic`` and
``arithmetic_test``), so the CPU runs read exactly what the GPU recipes read, and
``reward/score.py`` scores them with the math scorer like any other math source.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

MAX_TERM = 4
NUM_TEST_PROBLEMS = 5
SPLIT_SEED = 0
TRAIN_SOURCE, TEST_SOURCE = "arithmetic", "arithmetic_test"
TRAIN_FILE, TEST_FILE = "arithmetic_train.parquet", "arithmetic_test.parquet"
RAW_FILES = ("arithmetic_train.jsonl", "arithmetic_test.jsonl")  # (train, test) under data/raw


@dataclass(frozen=True)
class ArithmeticProblem:
    a: int
    b: int

    @property
    def problem(self) -> str:
        return f"What is {self.a} + {self.b}?"

    @property
    def answer(self) -> str:
        return str(self.a + self.b)

    @property
    def id(self) -> str:
        return f"{self.a}+{self.b}"

    def raw_row(self) -> dict:
        return {"problem": self.problem, "answer": self.answer, "id": self.id}


def arithmetic_split() -> tuple[list[ArithmeticProblem], list[ArithmeticProblem]]:
    """(train, test): every pair of terms exactly once, test a seeded sample of :data:`NUM_TEST_PROBLEMS`."""
    problems = [ArithmeticProblem(a, b) for a in range(MAX_TERM + 1) for b in range(MAX_TERM + 1)]
    shuffled = problems[:]
    random.Random(SPLIT_SEED).shuffle(shuffled)
    test = set(shuffled[:NUM_TEST_PROBLEMS])
    return [p for p in problems if p not in test], [p for p in problems if p in test]


def answer_pool() -> list[str]:
    """Every answer the task has (the sums 0..2·MAX_TERM), for the format-only warm start."""
    return [str(total) for total in range(2 * MAX_TERM + 1)]


def raw_lines(problems: list[ArithmeticProblem]) -> str:
    """The problems' raw rows (plain math schema), one JSON line each."""
    return "".join(json.dumps(p.raw_row()) + "\n" for p in problems)


def prepare_split_parquet(
    data_dir: Path,
    split: tuple[list[ArithmeticProblem], list[ArithmeticProblem]],
    raw_files: tuple[str, str],
    sources: tuple[str, str],
    parquet_files: tuple[str, str],
    extra_arguments: tuple[str, ...] = (),
) -> tuple[Path, Path]:
    """A (train, test) split as verl parquet in ``data_dir``: raw rows written to
    ``data_dir/raw/<raw_files>``, each turned into ``data_dir/<parquet_files>`` by
    ``python -m data_prep.math --input <source>=<raw> --output <parquet> <extra_arguments>``.

    Raises ``RuntimeError`` with the command if the pipeline refuses a file."""
    from data_prep.math import main as data_prep_math

    raw_dir = data_dir / "raw"
    raw_dir.mkdir(parents=True, exist_ok=True)
    for name, problems in zip(raw_files, split, strict=True):
        (raw_dir / name).write_text(raw_lines(problems), encoding="utf-8")
    outputs = []
    for source, raw_name, name in zip(sources, raw_files, parquet_files, strict=True):
        output = data_dir / name
        arguments = ["--input", f"{source}={raw_dir / raw_name}", "--output", str(output), *extra_arguments]
        status = data_prep_math(arguments)
        if status != 0:
            raise RuntimeError(f"python -m data_prep.math {' '.join(arguments)} failed (exit {status})")
        outputs.append(output)
    return outputs[0], outputs[1]


def prepare_parquet(data_dir: Path) -> tuple[Path, Path]:
    """The toy task as verl parquet in ``data_dir`` (train, test), through ``data_prep.math``."""
    return prepare_split_parquet(
        data_dir, arithmetic_split(), RAW_FILES, (TRAIN_SOURCE, TEST_SOURCE), (TRAIN_FILE, TEST_FILE)
    )
