"""The code ground-truth format written to ``reward_model.ground_truth`` and scored by ``reward/``.

A JSON string ``{"tests": [{"input": str, "output": str, "testtype": "stdin"|"functional"}],
"fn_name": str|null}``, in LiveCodeBench's conventions: a ``stdin`` test feeds ``input`` on
standard input and expects ``output`` on standard output; a ``functional`` test calls
``fn_name`` (a method of ``class Solution`` when the starter code defines one) with the
arguments given one JSON value per line in ``input``, and expects the JSON value ``output``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

TEST_TYPES = ("stdin", "functional")


@dataclass(frozen=True)
class CodeTest:
    """One test case in the ground-truth format."""

    input: str
    output: str
    testtype: str

    def __post_init__(self) -> None:
        if not isinstance(self.input, str) or not isinstance(self.output, str):
            raise TypeError("test input and output must be strings")
        if self.testtype not in TEST_TYPES:
            raise ValueError(f"testtype must be one of {TEST_TYPES}, got {self.testtype!r}")

    def size_bytes(self) -> int:
        """UTF-8 size of input plus output (what the byte cap counts)."""
        return len(self.input.encode("utf-8")) + len(self.output.encode("utf-8"))


def encode_ground_truth(tests: list[CodeTest], fn_name: str | None) -> str:
    """Serialise tests and the function name to the ground-truth JSON string."""
    return json.dumps(
        {"tests": [{"input": t.input, "output": t.output, "testtype": t.testtype} for t in tests], "fn_name": fn_name},
        ensure_ascii=False,
    )


def decode_ground_truth(text: str) -> tuple[list[CodeTest], str | None]:
    """Parse and check a ground-truth string; raises ValueError naming the first problem."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"ground truth is not JSON ({exc.msg})") from None
    if not isinstance(data, dict) or set(data) != {"tests", "fn_name"}:
        raise ValueError('ground truth must be an object with exactly the keys "tests" and "fn_name"')
    fn_name = data["fn_name"]
    if fn_name is not None and (not isinstance(fn_name, str) or not fn_name):
        raise ValueError("fn_name must be a non-empty string or null")
    tests = data["tests"]
    if not isinstance(tests, list) or not tests:
        raise ValueError('"tests" must be a non-empty list')
    decoded = []
    for position, test in enumerate(tests):
        if not isinstance(test, dict) or set(test) != {"input", "output", "testtype"}:
            raise ValueError(f"test {position} must have exactly the keys input, output, testtype")
        try:
            decoded.append(CodeTest(test["input"], test["output"], test["testtype"]))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"test {position}: {exc}") from None
    kinds = {t.testtype for t in decoded}
    if len(kinds) != 1:
        raise ValueError("all tests of a problem must share one testtype")
    if ("functional" in kinds) != (fn_name is not None):
        raise ValueError("fn_name is required exactly when the tests are functional")
    return decoded, fn_name
