"""Round trip: every prepared fixture row, given a correct solution, scores 1 with
``reward.score.compute_score`` (and a wrong one scores 0), so the written prompt, data_source
and ground truth are exactly what the reward reads."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from data_prep import code as code_cli
from data_prep import math as math_cli

from .conftest import read_rows

if importlib.util.find_spec("reward.score") is None:
    pytest.skip("reward/score.py does not exist yet (written by the reward engineer)", allow_module_level=True)

from reward.score import compute_score  # noqa: E402

MATH_SOLUTIONS = {
    # source -> (fixture file, {source_id: correct final answer as a model would write it})
    "aime25": ("aime25_test.jsonl", {"0": "70", "1": "24"}),
    "aime24": ("aime_2024_problems.parquet", {"2024-I-1": "144", "2024-I-2": "81"}),
    "hmmt25": ("hmmt_feb_2025.parquet", {"1": "4", "2": "\\dfrac{5}{6}"}),
    "math500": ("math500_test.jsonl", {"test/algebra/1.json": "5\\sqrt{2}", "test/prealgebra/2.json": "6"}),
    "deepscaler": ("deepscaler.json", {"row 0": "8", "row 1": "32"}),
    "math_dapo": ("dapo_math_17k.parquet", {"a1-0": "55", "a2-1": "25", "a3-3": "70"}),
}

CODE_SOLUTIONS = {
    "abc392_a": "n = int(input())\nprint(sum(map(int, input().split())))\n",
    "3700": "class Solution:\n    def sumOfArray(self, nums):\n        return sum(nums)\n",
    "2080C": "print(max(map(int, input().split())))\n",
    "row 0@deepcoder_lcbv5.parquet": "print(input()[::-1])\n",
    "row 1@deepcoder_lcbv5.parquet": "class Solution:\n    def multiply(self, a, b):\n        return a * b\n",
    "row 0@deepcoder_primeintellect.parquet": "n = int(input())\nprint(n * (n + 1) // 2)\n",
    "row 0@deepcoder_taco.parquet": "def digital_root(n):\n    return n if n < 10 else digital_root(sum(map(int, "
    "str(n))))\n",
    "row 1@deepcoder_taco.parquet": "import sys\nprint(len(sys.stdin.read().split()))\n",
    "vcu_1": "w = int(input())\nprint('YES' if w % 2 == 0 and w > 2 else 'NO')\n",
    "vcu_2": "def squares(n):\n    return [i * i for i in range(1, n + 1)]\n",
}
WRONG_PROGRAM = "print(0)\n"


def boxed(answer: str) -> str:
    return f"Working through the problem gives the result.\n\nThe final answer is $\\boxed{{{answer}}}$."


@pytest.mark.parametrize("source", sorted(MATH_SOLUTIONS))
def test_prepared_math_rows_score_one_with_the_right_answer(source, fixtures, tmp_path):
    name, answers = MATH_SOLUTIONS[source]
    output = tmp_path / f"{source}.parquet"
    assert math_cli.main(["--input", f"{source}={fixtures / name}", "--output", str(output)]) == 0
    rows = read_rows(output)
    assert {r["extra_info"]["source_id"] for r in rows} == set(answers)
    for row in rows:
        truth = row["reward_model"]["ground_truth"]
        right = compute_score(
            row["data_source"], boxed(answers[row["extra_info"]["source_id"]]), truth, row["extra_info"]
        )
        wrong = compute_score(row["data_source"], boxed("123456789"), truth, row["extra_info"])
        assert (right["score"], wrong["acc"]) == (1.0, 0.0), (row["extra_info"]["source_id"], right, wrong)


def _code_rows(fixtures: Path, tmp_path: Path) -> list[dict]:
    lcb, train = tmp_path / "lcb.parquet", tmp_path / "train.parquet"
    assert (
        code_cli.main(
            [
                "--input",
                f"livecodebench={fixtures / 'code_generation_lite'}",
                "--output",
                str(lcb),
                "--start-date",
                "2025-02-01",
                "--end-date",
                "2025-05-01",
            ]
        )
        == 0
    )
    inputs = []
    for name in ("deepcoder_lcbv5", "deepcoder_primeintellect", "deepcoder_taco"):
        inputs += ["--input", f"deepcoder={fixtures / (name + '.parquet')}"]
    inputs += ["--input", f"primeintellect={fixtures / 'verifiable_coding_problems.parquet'}"]
    assert code_cli.main([*inputs, "--output", str(train)]) == 0
    return read_rows(lcb) + read_rows(train)


def _key(row: dict) -> str:
    info = row["extra_info"]
    return info["source_id"] if not info["source_id"].startswith("row ") else f"{info['source_id']}@{info['origin']}"


def test_prepared_code_rows_score_one_with_a_correct_program(fixtures, tmp_path):
    from reward.sandbox import SandboxUnavailable, default_sandbox

    try:
        default_sandbox()
    except SandboxUnavailable as exc:
        pytest.skip(f"no sandbox to run code on this machine: {exc}")
    rows = _code_rows(fixtures, tmp_path)
    assert sorted(_key(r) for r in rows) == sorted(CODE_SOLUTIONS)
    for row in rows:
        truth = row["reward_model"]["ground_truth"]
        response = f"Here is the program.\n\n```python\n{CODE_SOLUTIONS[_key(row)]}```\n"
        right = compute_score(row["data_source"], response, truth, row["extra_info"])
        wrong = compute_score(row["data_source"], f"```python\n{WRONG_PROGRAM}```", truth, row["extra_info"])
        assert (right["score"], wrong["acc"]) == (1.0, 0.0), (_key(row), json.loads(truth), right, wrong)


def test_dapo_template_answer_line_scores_one(fixtures, tmp_path):
    output = tmp_path / "dapo.parquet"
    assert (
        math_cli.main(
            [
                "--input",
                f"math_dapo={fixtures / 'dapo_math_17k.parquet'}",
                "--output",
                str(output),
                "--template",
                "dapo",
            ]
        )
        == 0
    )
    answers = MATH_SOLUTIONS["math_dapo"][1]
    for row in read_rows(output):
        response = f"Adding the terms step by step.\nAnswer: {answers[row['extra_info']['source_id']]}"
        scored = compute_score(row["data_source"], response, row["reward_model"]["ground_truth"], row["extra_info"])
        assert scored["score"] == 1.0, (row["extra_info"]["source_id"], scored)
