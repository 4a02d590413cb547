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


def write_raw_files(directory: Path) -> tuple[Path, Path]:
    """Write ``arithmetic_train.jsonl`` and ``arithmetic_test.jsonl`` (raw rows) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, problems in zip(("arithmetic_train.jsonl", "arithmetic_test.jsonl"), arithmetic_split(), strict=True):
        path = directory / name
        path.write_text("".join(json.dumps(p.raw_row()) + "\n" for p in problems), encoding="utf-8")
        paths.append(path)
    return paths[0], paths[1]


def prepare_parquet(data_dir: Path) -> tuple[Path, Path]:
    """The toy task as verl parquet in ``data_dir`` (train, test), through ``data_prep.math``.

    Raises ``RuntimeError`` with data_prep's message if the pipeline refuses a file."""
    from data_prep.math import main as data_prep_math

    raw_train, raw_test = write_raw_files(data_dir / "raw")
    outputs = []
    for source, raw, name in ((TRAIN_SOURCE, raw_train, TRAIN_FILE), (TEST_SOURCE, raw_test, TEST_FILE)):
        output = data_dir / name
        status = data_prep_math(["--input", f"{source}={raw}", "--output", str(output)])
        if status != 0:
            raise RuntimeError(f"python -m data_prep.math --input {source}={raw} --output {output} failed (exit {status})")
        outputs.append(output)
    return outputs[0], outputs[1]
