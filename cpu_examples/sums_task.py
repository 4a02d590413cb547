"""The CPU quickstart's task: single-digit sums with one demonstration turn.

Problems read "What is a + b?" for a, b in 0..9, in data_prep's ``boxed`` template, after one
solved example (:data:`DEMONSTRATION`: the user asks "What is 2 + 5? ..." and the assistant answers
``\\boxed{7}``). The answer is scored by ``reward/score.py``'s math scorer (1 for the right
``\\boxed{}`` answer, else 0) like any math source.

Why this task. SmolLM2-135M-Instruct almost never writes ``\\boxed{}`` zero-shot; with the
demonstration it answers in that form in most responses and gets about a third of these sums right
greedily but only about one in ten at temperature 1, so rewards are mixed from the first step and
there is room to learn. A plain group-baseline policy gradient raises its held-out accuracy within
ten steps, so the quickstart can show a policy getting better in minutes on a CPU.

The prompt is most of what the actor computes per step (101 tokens against responses of about 8).
data_prep's ``bare`` template (the problem alone, the demonstration showing the ``\\boxed{}`` form)
makes it 63 tokens and keeps the start's answers (``scripts/screen_sums_prompts.py``), but in its
seed study one of two seeds collapsed onto one answer (docs/cpu.md, "The main job on CPU"): the
quickstart keeps ``boxed``.

The split is by *unordered pair*: a held-out problem's two terms never appear together in a
training problem, in either order (3 + 4 held out means 4 + 3 is held out too). It is also
*stratified by the answer*: for every sum 0..18, a seeded pass over its pairs holds out about
:data:`HELD_OUT_FRACTION` of its problems (as whole pairs allow), so both splits have about the
same answer distribution. Without that, a split drawn at random over pairs had 8 and 9 as the answers of 28 % of
the training problems and of 7 % of the held-out ones: a policy that learned to answer "8" to
everything earned more training reward than the start and looked, on held-out sums, like a
collapse (measured: the quickstart's DFPO run answered ``\boxed{8}`` in 276 of 328 held-out
samples). With the answers distributed alike, a constant answer earns about a tenth in either split,
and a gain on held-out sums means the policy adds better. The demonstration's own pair is in
neither split.

The raw rows (plain math schema:
``problem``, ``answer``, ``id``) are written as JSON lines and turned into verl parquet by
``python -m data_prep.math --demonstration ...`` (sources ``digit_sums`` / ``digit_sums_test``),
so the quickstart reads exactly what data_prep writes for the GPU recipes.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

from cpu_examples.addition_task import ArithmeticProblem, prepare_split_parquet, raw_lines
from data_prep.math_prompts import render_math_prompt

MAX_TERM = 9
MIN_TEST_PROBLEMS = 40  # the held-out split's floor; HELD_OUT_FRACTION gives 41 (sums_split checks it)
HELD_OUT_FRACTION = 0.42  # of each sum's problems
SPLIT_SEED = 0
DEMONSTRATION = ("What is 2 + 5?", "7")
TEMPLATE = "boxed"  # data_prep.math --template (docs/cpu.md: the bare template was tried)
DEMONSTRATION_PAIR = frozenset({2, 5})
TRAIN_SOURCE, TEST_SOURCE = "digit_sums", "digit_sums_test"
TRAIN_FILE, TEST_FILE = "digit_sums_train.parquet", "digit_sums_test.parquet"
RAW_FILES = ("digit_sums_train.jsonl", "digit_sums_test.jsonl")  # (train, held-out) under data/raw
TEST_TITLE, TRAIN_TITLE = "Held-out sums", "Training sums"


@dataclass(frozen=True)
class SumProblem(ArithmeticProblem):
    """A sum "What is a + b?" (the tiny task's problem), with its unordered pair for the split."""

    @property
    def pair(self) -> frozenset[int]:
        return frozenset({self.a, self.b})


def sums_split() -> tuple[list[SumProblem], list[SumProblem]]:
    """(train, held-out), each in (a, b) order: disjoint by unordered pair, the demonstration's pair
    in neither, stratified by the answer: for each sum, its pairs in a seeded order, each one held
    out while that brings the sum's held-out problems closer to :data:`HELD_OUT_FRACTION` of its
    problems (a greedy pass: the shares range from a third to two thirds, and the four sums with
    one or two problems, 0, 1, 17 and 18, stay in training)."""
    by_sum: dict[int, list[frozenset[int]]] = {}
    for a in range(MAX_TERM + 1):
        for b in range(a, MAX_TERM + 1):
            if frozenset({a, b}) != DEMONSTRATION_PAIR:
                by_sum.setdefault(a + b, []).append(frozenset({a, b}))
    rng = random.Random(SPLIT_SEED)
    held_out: set[frozenset[int]] = set()
    for total in sorted(by_sum):
        pairs = by_sum[total]
        rng.shuffle(pairs)
        # a pair stands for len(pair) problems: a + b and b + a, or a + a once
        target = HELD_OUT_FRACTION * sum(len(pair) for pair in pairs)
        count = 0
        for pair in pairs:  # add whole pairs while that brings the count closer to the target
            if abs(count + len(pair) - target) < abs(count - target):
                held_out.add(pair)
                count += len(pair)
    problems = [
        SumProblem(a, b)
        for a in range(MAX_TERM + 1)
        for b in range(MAX_TERM + 1)
        if frozenset({a, b}) != DEMONSTRATION_PAIR
    ]
    train, test = [p for p in problems if p.pair not in held_out], [p for p in problems if p.pair in held_out]
    assert len(test) >= MIN_TEST_PROBLEMS, len(test)
    return train, test


def task_digest() -> str:
    """A short digest of the task (the split, the template, the demonstration, the sources): part of the
    quickstart's run and evaluation names, so results made for another version of the task are
    never reused."""
    train, test = sums_split()
    text = json.dumps([TEMPLATE, DEMONSTRATION, TRAIN_SOURCE, TEST_SOURCE, raw_lines(train), raw_lines(test)])
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def is_current(data_dir: Path) -> bool:
    """Whether ``data_dir`` holds this version of the task: both parquet files, raw files equal to
    what :func:`sums_split` gives now, and prompts in :data:`TEMPLATE` (an output root from an
    earlier version is rebuilt)."""
    raw = data_dir / "raw"
    expected = dict(zip(RAW_FILES, map(raw_lines, sums_split()), strict=True))
    files_current = (
        (data_dir / TRAIN_FILE).exists()
        and (data_dir / TEST_FILE).exists()
        and all(
            (raw / name).exists() and (raw / name).read_text(encoding="utf-8") == text
            for name, text in expected.items()
        )
    )
    return files_current and all(
        _first_turn(data_dir / name) == render_math_prompt(DEMONSTRATION[0], TEMPLATE)
        for name in (TRAIN_FILE, TEST_FILE)
    )


def _first_turn(parquet: Path) -> str | None:
    """The first message of the parquet's first prompt (the demonstration's question, as written)."""
    import pyarrow.parquet as pq

    prompts = pq.read_table(parquet, columns=["prompt"]).column("prompt").to_pylist()
    return prompts[0][0]["content"] if prompts and prompts[0] else None


def prepare_parquet(data_dir: Path) -> tuple[Path, Path]:
    """The task as verl parquet in ``data_dir`` (train, held-out), through ``data_prep.math`` in
    :data:`TEMPLATE` with the demonstration turn (``--demonstration``).

    Raises ``RuntimeError`` with the command if the pipeline refuses a file."""
    return prepare_split_parquet(
        data_dir,
        sums_split(),
        RAW_FILES,
        (TRAIN_SOURCE, TEST_SOURCE),
        (TRAIN_FILE, TEST_FILE),
        ("--template", TEMPLATE, "--demonstration", *DEMONSTRATION),
    )
