"""Differential suite: our code scorer against LiveCodeBench's own harness.

Every case is a response whose verdict under LiveCodeBench's rules was derived by hand
(the ``reason`` column).  Each must get that verdict from our sandboxed scorer AND from
LiveCodeBench's real evaluator (``lcb_oracle``: ``extract_code`` + ``evaluate_generations``
of the ``nvidia-livecodebench`` package), so our reading of the harness is checked against
the harness itself.  The programs are the suite's own (trusted): the oracle runs them
unsandboxed.

Covered: the import preamble and its recursion limit, ``class Solution`` and the shared
instance, module state carried across tests, JSON arguments per line, tuples as lists,
plain-data equality, the stdin wrapping (``wrapped_function``, ``__main__`` guard,
hoisted imports, top-level ``return``), LiveCodeBench's stdin stand-ins, line-by-line
comparison with its Decimal fallback, ``SystemExit``, the guarded ``os`` functions, the
per-test time limit (run and load), code extraction from the last fenced block; and tests
in the DeepCoder / PrimeIntellect / TACO layouts, mapped by ``data_prep`` into the same
ground-truth format.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from data_prep.code_sources import Notes, convert_test_list
from reward.code_tests import CodeLimits, score_code

from .conftest import assert_no_stray_processes
from .lcb_oracle import lcb_results, lcb_verdict

TIMEOUT_S = 2
"""Per-test limit for both harnesses (LiveCodeBench's is an integer number of seconds)."""
LIMITS = CodeLimits(test_timeout_s=TIMEOUT_S)


def fenced(code: str, tag: str = "python") -> str:
    return f"Here is the solution.\n```{tag}\n{code.strip()}\n```\n"


def stdin_spec(*pairs: tuple[str, str]) -> str:
    return json.dumps({"tests": [{"input": i, "output": o, "testtype": "stdin"} for i, o in pairs], "fn_name": None})


def functional_spec(fn_name: str, *pairs: tuple[str, str]) -> str:
    tests = [{"input": i, "output": o, "testtype": "functional"} for i, o in pairs]
    return json.dumps({"tests": tests, "fn_name": fn_name})


def mapped_spec(raw_tests) -> str:
    """A DeepCoder / PrimeIntellect / TACO test list through data_prep's mapping."""
    tests, fn_name = convert_test_list(raw_tests, Notes())
    return json.dumps(
        {"tests": [{"input": t.input, "output": t.output, "testtype": t.testtype} for t in tests], "fn_name": fn_name}
    )


ADD = stdin_spec(("1 2\n", "3\n"), ("5 7", "12"))
ECHO = stdin_spec(("5\n", "5\n"))
SUM = functional_spec("total", ("[1,2,3]", "6"), ("[]", "0"))

CASES: list[tuple[str, str, str, str]] = [
    # ---------------------------------------------------------------- functional (LeetCode)
    (
        "List[int] annotations without importing typing",
        fenced("class Solution:\n    def total(self, nums: List[int]) -> int:\n        return sum(nums)"),
        SUM,
        "correct",
    ),
    (
        "preamble names: Counter, heapq, bisect, lru_cache, inf, gcd, accumulate",
        fenced(
            "class Solution:\n    def total(self, nums: List[int]) -> int:\n"
            "        @lru_cache(None)\n        def g(a, b):\n            return gcd(a, b)\n"
            "        h = list(nums); heapify(h)\n        c = Counter(nums)\n"
            "        assert bisect_left(sorted(nums), inf) == len(nums) and g(4, 6) == 2\n"
            "        return sum(c[x] * x for x in c) + 0 * sum(accumulate(h))"
        ),
        SUM,
        "correct",
    ),
    (
        "top-level function when there is no class Solution",
        fenced("def total(nums):\n    return sum(nums)"),
        SUM,
        "correct",
    ),
    (
        "one Solution instance shared by all tests",
        fenced(
            "class Solution:\n    calls = 0\n    def count(self, x):\n        self.calls += 1\n        return "
            "self.calls"
        ),
        functional_spec("count", ("7", "1"), ("7", "2"), ("7", "3")),
        "correct",
    ),
    (
        "module state carried across tests",
        fenced("seen = []\ndef count(x):\n    seen.append(x)\n    return len(seen)"),
        functional_spec("count", ("7", "1"), ("7", "2")),
        "correct",
    ),
    (
        "one JSON argument per input line",
        fenced("class Solution:\n    def join(self, words, sep, times):\n        return sep.join(words) * times"),
        functional_spec("join", ('["a","b"]\n"-"\n2', '"a-ba-b"')),
        "correct",
    ),
    (
        "a returned tuple counts as a list",
        fenced("def pair(x):\n    return (x, [x])"),
        functional_spec("pair", ("1", "[1, [1]]")),
        "correct",
    ),
    (
        "a nested tuple does not equal a list",
        fenced("def pair(x):\n    return [(x, x)]"),
        functional_spec("pair", ("1", "[[1, 1]]")),
        "wrong_answer",
    ),
    (
        "a set does not equal a list",
        fenced("def uniq(xs):\n    return set(xs)"),
        functional_spec("uniq", ("[1,2]", "[1, 2]")),
        "wrong_answer",
    ),
    ("1.0 equals 1", fenced("def half(x):\n    return x / 2"), functional_spec("half", ("2", "1")), "correct"),
    (
        "0.1 + 0.2 is not 0.3",
        fenced("def add(a, b):\n    return a + b"),
        functional_spec("add", ("0.1\n0.2", "0.3")),
        "wrong_answer",
    ),
    ("True equals 1", fenced("def odd(x):\n    return x % 2 == 1"), functional_spec("odd", ("3", "1")), "correct"),
    (
        "a Counter equals a dict",
        fenced("def freq(s):\n    return Counter(s)"),
        functional_spec("freq", ('"aab"', '{"a": 2, "b": 1}')),
        "correct",
    ),
    ("None equals null", fenced("def none(x):\n    pass"), functional_spec("none", ("1", "null")), "correct"),
    (
        "integers beyond 4300 digits",
        fenced("def big(x):\n    return 10 ** x"),
        functional_spec("big", ("6000", "1" + "0" * 6000)),
        "correct",
    ),
    (
        "recursion 20000 deep (the preamble's recursion limit)",
        fenced("class Solution:\n    def depth(self, n):\n        return 0 if n == 0 else 1 + self.depth(n - 1)"),
        functional_spec("depth", ("20000", "20000")),
        "correct",
    ),
    (
        "Solution without the method",
        fenced("class Solution:\n    def other(self, nums):\n        return 0"),
        SUM,
        "runtime_error",
    ),
    (
        "'class Solution' in a comment hides the module function",
        fenced("# not a class Solution\ndef total(nums):\n    return sum(nums)"),
        SUM,
        "runtime_error",
    ),
    (
        "exception in the method",
        fenced("class Solution:\n    def total(self, nums):\n        return nums[10]"),
        SUM,
        "runtime_error",
    ),
    (
        "second test wrong",
        fenced("class Solution:\n    def total(self, nums):\n        return sum(nums) if nums else 1"),
        SUM,
        "wrong_answer",
    ),
    (
        "endless method: time limit",
        fenced("class Solution:\n    def total(self, nums):\n        while True:\n            pass"),
        SUM,
        "timeout",
    ),
    (
        "endless loop while loading: LiveCodeBench reports an error",
        fenced("def total(nums):\n    return sum(nums)\nwhile True:\n    pass"),
        SUM,
        "runtime_error",
    ),
    # ---------------------------------------------------------------- stdin
    ("input()", fenced("a, b = map(int, input().split())\nprint(a + b)"), ADD, "correct"),
    ("sys.stdin.read()", fenced("import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)"), ADD, "correct"),
    (
        "sys.stdin.readline keeps the newline",
        fenced("import sys\nline = sys.stdin.readline()\nprint(len(line))"),
        stdin_spec(("ab\ncd", "3")),
        "correct",
    ),
    (
        "for line in sys.stdin",
        fenced("import sys\nfor line in sys.stdin:\n    print(line.strip())"),
        stdin_spec(("1\n2", "1\n2")),
        "correct",
    ),
    (
        "from sys import stdin; stdin.readline() (patched, no newline)",
        fenced("from sys import stdin\nline = stdin.readline()\nprint(len(line))"),
        stdin_spec(("ab\ncd", "2")),
        "correct",
    ),
    ("open(0) reads the real, empty stdin", fenced("print(open(0).read().strip())"), ECHO, "wrong_answer"),
    (
        "sys.stdin.buffer does not exist",
        fenced("import sys\nprint(sys.stdin.buffer.read().decode())"),
        ECHO,
        "runtime_error",
    ),
    (
        "main guard at the end is unwrapped",
        fenced("def main():\n    print(input())\n\nif __name__ == '__main__':\n    main()"),
        ECHO,
        "correct",
    ),
    (
        "main guard not at the end does not run",
        fenced("def main():\n    print(input())\nif __name__ == '__main__':\n    main()\nx = 1"),
        ECHO,
        "wrong_answer",
    ),
    (
        "global of a top-level name fails (top level is a function body)",
        fenced("count = 0\ndef bump():\n    global count\n    count += 1\nbump()\nprint(count + int(input()) - 1)"),
        ECHO,
        "runtime_error",
    ),
    (
        "top-level return is allowed",
        fenced("n = int(input())\nif n == 5:\n    print(5)\n    return\nprint(0)"),
        ECHO,
        "correct",
    ),
    ("top-level yield: nothing runs", fenced("print(input())\nyield 1"), ECHO, "wrong_answer"),
    ("quit() is disabled", fenced("print(input())\nquit()"), ECHO, "runtime_error"),
    ("exit() ends normally", fenced("print(input())\nexit()"), ECHO, "correct"),
    ("sys.exit(3) ends normally", fenced("import sys\nprint(input())\nsys.exit(3)"), ECHO, "correct"),
    ("os.getcwd is disabled", fenced("import os\nos.getcwd()\nprint(input())"), ECHO, "runtime_error"),
    ("import resource is refused", fenced("import resource\nprint(input())"), ECHO, "runtime_error"),
    ("input('prompt') prints the prompt", fenced("print(input('n? '))"), ECHO, "wrong_answer"),
    ("os.write(1) is not captured", fenced("import os\nos.write(1, input().encode())"), ECHO, "wrong_answer"),
    ("sys.stdout.write", fenced("import sys\nsys.stdout.write(input())"), ECHO, "correct"),
    (
        "'class Solution' in a stdin program's string",
        fenced("label = 'class Solution'\nprint(input())"),
        ECHO,
        "runtime_error",
    ),
    (
        "preamble names in a stdin program: deque, sqrt, Counter",
        fenced("q = deque([int(input())])\nprint(int(sqrt(q[0] ** 2)) + len(Counter()))"),
        ECHO,
        "correct",
    ),
    ("printing a 5000-digit integer", fenced("print(10 ** 5000)"), stdin_spec(("", "1" + "0" * 5000)), "correct"),
    ("3.0 equals 3 (Decimal fallback)", fenced("print(float(input()))"), ECHO, "correct"),
    ("1e2 equals 100", fenced("input()\nprint('1e2')"), stdin_spec(("x", "100")), "correct"),
    ("case matters", fenced("input()\nprint('YES')"), stdin_spec(("x", "yes")), "wrong_answer"),
    (
        "trailing spaces and blank lines are stripped",
        fenced("print(input() + '   ')\nprint()\nprint()"),
        ECHO,
        "correct",
    ),
    (
        "a blank line inside the output counts",
        fenced("print(1)\nprint()\nprint(2)"),
        stdin_spec(("", "1\n2")),
        "wrong_answer",
    ),
    ("tokens compared per line", fenced("print(1)\nprint(2)"), stdin_spec(("", "1 2")), "wrong_answer"),
    ("exception", fenced("print(input())\nraise ValueError('boom')"), ECHO, "runtime_error"),
    ("syntax error", fenced("def broken(:\n    pass"), ECHO, "runtime_error"),
    ("endless loop: time limit", fenced("while True:\n    pass"), ECHO, "timeout"),
    ("sleeping past the limit", fenced("import time\ntime.sleep(30)"), ECHO, "timeout"),
    # ---------------------------------------------------------------- extraction
    (
        "the last fenced block is the program, whatever its tag",
        fenced("print(0)") + fenced("a, b = map(int, input().split())\nprint(a + b)", tag="py"),
        ADD,
        "correct",
    ),
    (
        "a trailing output block is taken as the program",
        fenced("a, b = map(int, input().split())\nprint(a + b)") + "Output:\n```\n3\n```\n",
        ADD,
        "wrong_answer",
    ),
    ("no code block", "The answer is to add the two numbers.", ADD, "no_answer"),
    ("an unterminated block", "```python\nprint(input())", ECHO, "no_answer"),
    # ---------------------------------------------------------------- DeepCoder / PrimeIntellect / TACO layouts
    (
        "PrimeIntellect function_call test (APPS-wrapped output)",
        fenced("def add(a, b):\n    return a + b"),
        mapped_spec([{"type": "function_call", "fn_name": "add", "input": [1, 2], "output": [3]}]),
        "correct",
    ),
    (
        "PrimeIntellect function_call through class Solution",
        fenced("class Solution:\n    def add(self, a, b):\n        return a + b"),
        mapped_spec([{"type": "function_call", "fn_name": "add", "input": [1, 2], "output": [3]}]),
        "correct",
    ),
    (
        "PrimeIntellect function_call returning a list (tuple accepted)",
        fenced("def span(xs):\n    return (min(xs), max(xs))"),
        mapped_spec([{"type": "function_call", "fn_name": "span", "input": [[3, 1, 2]], "output": [[1, 3]]}]),
        "correct",
    ),
    (
        "PrimeIntellect stdin_stdout test",
        fenced("a, b = map(int, input().split())\nprint(a + b)"),
        mapped_spec([{"type": "stdin_stdout", "input": "1 2\n", "output": "3\n"}]),
        "correct",
    ),
    (
        "TACO layout: stdin lines given as lists",
        fenced("n = int(input())\nfor _ in range(n):\n    print(int(input()) * 2)"),
        mapped_spec({"inputs": [["2", "1", "5"]], "outputs": [["2", "10"]]}),
        "correct",
    ),
    (
        "TACO layout: function with wrapped outputs, wrong value",
        fenced("def double(x):\n    return x * 3"),
        mapped_spec({"inputs": [[2]], "outputs": [[4]], "fn_name": "double"}),
        "wrong_answer",
    ),
    (
        "DeepCoder lcbv5 layout (LiveCodeBench tests)",
        fenced("class Solution:\n    def total(self, nums: List[int]) -> int:\n        return sum(nums)"),
        mapped_spec(
            [{"input": "[1,2,3]", "output": "6", "testtype": "functional", "metadata": {"func_name": "total"}}]
        ),
        "correct",
    ),
]

REASON_DIFFERS = {"no code block": "runtime_error", "an unterminated block": "runtime_error"}
"""Where LiveCodeBench names the failure differently (both fail): it compiles an empty program."""


def _our_reason(case) -> str:
    try:
        return score_code(case[1], case[2], limits=LIMITS).reason
    except Exception as error:  # noqa: BLE001 - reported per case by the test below
        return f"raised {type(error).__name__}: {error}"[:300]


@pytest.fixture(scope="module")
def both_verdicts():
    """(ours, LiveCodeBench's) verdict per case; LiveCodeBench runs while we score."""
    with ThreadPoolExecutor(1) as oracle_thread:
        oracle = oracle_thread.submit(lcb_results, [(response, spec) for _, response, spec, _ in CASES], TIMEOUT_S)
        with ThreadPoolExecutor(4) as pool:
            ours = list(pool.map(_our_reason, CASES))
        theirs = oracle.result()
    return {
        case[0]: (mine, lcb_verdict(result, len(json.loads(case[2])["tests"])))
        for case, mine, result in zip(CASES, ours, theirs, strict=True)
    }


@pytest.mark.parametrize("name, response, spec, reason", CASES, ids=[case[0] for case in CASES])
def test_same_verdict_as_livecodebench(both_verdicts, name, response, spec, reason):
    ours, theirs = both_verdicts[name]
    assert theirs == REASON_DIFFERS.get(name, reason), f"LiveCodeBench itself says {theirs}: the case is mislabelled"
    assert ours == reason


def test_no_process_left_after_the_suite(both_verdicts):
    assert_no_stray_processes()


def test_preamble_is_livecodebench_import_string():
    from livecodebench.evaluation.testing_util import import_string

    from reward.code_harness import PREAMBLE

    assert PREAMBLE == import_string
