"""Code scoring: labelled LiveCodeBench-style cases and the adversarial suite.

Adversarial programs are written so that any failure of the sandbox would turn into a
pass (they print the right answer only if their attack worked), and every case checks
that the run ended in bounded time, left no process behind and wrote nothing outside
its temporary directory.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
import uuid

import pytest

from reward.code_tests import (
    CodeLimits,
    extract_program,
    parse_ground_truth,
    score_code,
    stdin_output_matches,
)
from reward.score import compute_score

from .conftest import assert_no_new_sandbox_dirs, assert_no_stray_processes, sandbox_dirs

ADD = json.dumps(
    {
        "tests": [
            {"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
            {"input": "5 7\n", "output": "12", "testtype": "stdin"},
            {"input": "-4 4\n", "output": "0\n", "testtype": "stdin"},
        ],
        "fn_name": None,
    }
)
TWO_SUM = json.dumps(
    {
        "tests": [
            {"input": "[2,7,11,15]\n9", "output": "[0, 1]", "testtype": "functional"},
            {"input": "[3,2,4]\n6", "output": "[1, 2]", "testtype": "functional"},
        ],
        "fn_name": "twoSum",
    }
)
FAST = CodeLimits(test_timeout_s=2.0, problem_budget_s=20.0, memory_mb=512, output_mb=4)


def fenced(code: str, tag: str = "python") -> str:
    return f"Here is my solution.\n```{tag}\n{code.strip()}\n```\n"


LABELLED = [
    ("stdin correct", fenced("a, b = map(int, input().split())\nprint(a + b)"), ADD, "correct", 1.0),
    (
        "stdin read all",
        fenced("import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)"),
        ADD,
        "correct",
        1.0,
    ),
    # LiveCodeBench's preamble binds open to the real one: open(0) reads the harness's empty stdin
    ("stdin via open(0)", fenced("a, b = map(int, open(0).read().split())\nprint(a + b)"), ADD, "runtime_error", 0.0),
    ("numeric formatting", fenced("a, b = map(int, input().split())\nprint(f'{a + b:.1f}')"), ADD, "correct", 1.0),
    (
        "main guard",
        fenced(
            "def main():\n    a, b = map(int, input().split())\n    print(a + b)\n"
            "if __name__ == '__main__':\n    main()"
        ),
        ADD,
        "correct",
        1.0,
    ),
    (
        "last block wins",
        fenced("print(0)") + fenced("a, b = map(int, input().split())\nprint(a + b)"),
        ADD,
        "correct",
        1.0,
    ),
    ("untagged fence", fenced("a, b = map(int, input().split())\nprint(a + b)", tag=""), ADD, "correct", 1.0),
    ("stdin wrong", fenced("a, b = map(int, input().split())\nprint(a - b)"), ADD, "wrong_answer", 0.0),
    (
        "extra line",
        fenced("a, b = map(int, input().split())\nprint(a + b)\nprint()\nprint(1)"),
        ADD,
        "wrong_answer",
        0.0,
    ),
    ("runtime error", fenced("raise ValueError('boom')"), ADD, "runtime_error", 0.0),
    ("syntax error", fenced("def broken(:\n    pass"), ADD, "runtime_error", 0.0),
    # SystemExit ends a stdin test normally (LiveCodeBench): test 1 passes, test 2 is wrong
    ("nonzero exit", fenced("import sys\nprint(3)\nsys.exit(2)"), ADD, "wrong_answer", 0.0),
    ("timeout", fenced("while True:\n    pass"), ADD, "timeout", 0.0),
    ("no code block", "I think the answer is to add the numbers.", ADD, "no_answer", 0.0),
    ("cpp block only", fenced("int main(){}", tag="cpp"), ADD, "runtime_error", 0.0),  # run as Python, as LCB does
    (
        "leetcode class",
        fenced(
            "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
            "        for i, x in enumerate(nums):\n            if target - x in seen:\n"
            "                return [seen[target - x], i]\n            seen[x] = i"
        ),
        TWO_SUM,
        "correct",
        1.0,
    ),
    (
        "top-level function returning tuple",
        fenced(
            "def twoSum(nums, target):\n    for i in range(len(nums)):\n        for j in range(i + 1, len(nums)):\n"
            "            if nums[i] + nums[j] == target:\n                return (i, j)"
        ),
        TWO_SUM,
        "correct",
        1.0,
    ),
    (
        "functional wrong",
        fenced("class Solution:\n    def twoSum(self, nums, target):\n        return [0, 0]"),
        TWO_SUM,
        "wrong_answer",
        0.0,
    ),
    (
        "functional prints ignored",
        fenced("class Solution:\n    def twoSum(self, nums, target):\n        print('[0, 1]')\n        return None"),
        TWO_SUM,
        "wrong_answer",
        0.0,
    ),
    (
        "missing method",
        fenced("class Solution:\n    def other(self):\n        return 1"),
        TWO_SUM,
        "runtime_error",
        0.0,
    ),
]


@pytest.mark.parametrize("name, response, ground_truth, reason, score", LABELLED, ids=[case[0] for case in LABELLED])
def test_labelled_code_case(name, response, ground_truth, reason, score):
    verdict = score_code(response, ground_truth, limits=FAST)
    assert (verdict.reason, verdict.credit) == (reason, score), name


def test_fraction_mode_gives_partial_credit_and_runs_every_test():
    program = fenced("a, b = map(int, input().split())\nprint(a + b if a != 5 else 0)")
    all_pass = score_code(program, ADD, mode="all_pass", limits=FAST)
    fraction = score_code(program, ADD, mode="fraction", limits=FAST)
    assert (all_pass.credit, all_pass.reason) == (0.0, "wrong_answer")
    assert fraction.credit == pytest.approx(2 / 3) and fraction.pass_fraction == pytest.approx(2 / 3)
    signed = compute_score(
        "livecodebench", program, ADD, code_mode="fraction", score_mode="signed", code_test_timeout_s=2
    )
    assert signed["score"] == pytest.approx(2 * 2 / 3 - 1) and signed["acc"] == 0.0


def test_all_pass_stops_at_first_failure():
    started = time.monotonic()
    verdict = score_code(fenced("while True:\n    pass"), ADD, limits=FAST)
    assert verdict.reason == "timeout"
    assert time.monotonic() - started < 3 * FAST.test_timeout_s  # not one timeout per test


@pytest.mark.parametrize(
    "actual, expected, same",
    [
        ("3\n", "3", True),
        ("3.0", "3", True),
        ("1 2  3 \n4", "1 2 3\n4", True),
        ("  hello world  ", "hello world", True),
        ("1e2", "100", True),
        ("3", "4", False),
        ("1 2", "1 2 3", False),
        ("YES", "yes", False),
        ("1\n2", "1 2", False),
        ("", "0", False),
    ],
)
def test_stdin_comparison_like_livecodebench(actual, expected, same):
    assert stdin_output_matches(actual, expected) is same


@pytest.mark.parametrize(
    "spec, message",
    [
        ("not json", "not valid JSON"),
        (json.dumps({"fn_name": None}), "'tests'"),
        (json.dumps({"tests": [], "fn_name": None}), "non-empty"),
        (json.dumps({"tests": [{"input": "1", "output": 1, "testtype": "stdin"}]}), r"tests\[0\].output"),
        (json.dumps({"tests": [{"input": "1", "output": "1", "testtype": "file"}]}), r"tests\[0\].testtype"),
        (json.dumps({"tests": [{"input": "1", "output": "1", "testtype": "functional"}], "fn_name": None}), "fn_name"),
        (
            json.dumps({"tests": [{"input": "1", "output": "{bad", "testtype": "functional"}], "fn_name": "f"}),
            "not JSON",
        ),
        (json.dumps({"tests": [{"input": "1", "output": "1", "testtype": "stdin"}], "fn_name": "1bad"}), "identifier"),
        (
            json.dumps(
                {
                    "tests": [
                        {"input": "1", "output": "1", "testtype": "functional"},
                        {"input": "1", "output": "1", "testtype": "stdin"},
                    ],
                    "fn_name": "f",
                }
            ),
            r"tests\[1\].testtype='stdin' differs",
        ),
        (json.dumps({"tests": [{"input": "1", "output": "1", "testtype": "stdin"}], "fn_name": "f"}), "must be null"),
        (
            json.dumps({"tests": [{"input": "[1]\n", "output": "1", "testtype": "functional"}], "fn_name": "f"}),
            r"tests\[0\].input line 2 is not one JSON value",
        ),
    ],
)
def test_bad_code_ground_truth_names_the_problem(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_ground_truth(spec)


def test_whole_run_limit_is_livecodebench_s_unless_capped():
    assert CodeLimits(test_timeout_s=6).run_budget_s(10) == (6 + 1) * 10 + 5
    assert CodeLimits(test_timeout_s=6, problem_budget_s=30).run_budget_s(10) == 30
    with pytest.raises(ValueError, match="problem_budget_s"):
        CodeLimits(problem_budget_s=0)


def test_extract_program_takes_the_last_fenced_block_like_livecodebench():
    text = "```python\nfirst\n```\ntext\n```py\nsecond\n```\n```cpp\nthird\n```"
    assert extract_program(text) == "third"  # the lines between the last two fence lines, any tag
    assert extract_program("```python\nunterminated") is None
    assert extract_program("```python\n\n  \n```") is None
    assert extract_program("a ```python x\nbody\nend ``` b") == "body"  # a fence anywhere in the line


# ----------------------------------------------------------------------------- adversarial
ESCAPE_TOKEN = f"reward-escape-{uuid.uuid4().hex[:12]}"
ESCAPE_PATHS = [
    f"/tmp/{ESCAPE_TOKEN}",
    f"/var/tmp/{ESCAPE_TOKEN}",
    f"/dev/shm/{ESCAPE_TOKEN}",
    f"{os.getcwd()}/{ESCAPE_TOKEN}",
    f"{tempfile.gettempdir()}/{ESCAPE_TOKEN}-2",
]


def _listening_socket() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    return server


ADVERSARIAL = {
    "infinite loop": "while True:\n    pass",
    # posix.*: the os names LiveCodeBench's guard sets to None are still reachable; the sandbox must hold
    "fork bomb": "import posix\nwhile True:\n    try:\n        posix.fork()\n    except OSError:\n        pass",
    "memory bomb": "blocks = []\nwhile True:\n    blocks.append(bytearray(64 << 20))",
    "write outside": (
        "import os\n"
        "for path in {paths!r} + ['../' + {token!r}, os.path.expanduser('~/' + {token!r})]:\n"
        "    try:\n        with open(path, 'w') as f:\n            f.write('x')\n"
        "    except OSError:\n        pass"
    ),
    "open a socket": (
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
        "    a, b = map(int, input().split())\n    print(a + b)\nexcept OSError:\n    pass"
    ),
    "kill the parent": (
        "import os, posix, signal, time\nfor pid in (os.getppid(), 1, -1):\n    try:\n        posix.kill(pid, "
        "signal.SIGKILL)\n"
        "    except OSError:\n        pass\ntime.sleep(1)"
    ),
    "setsid and fork to escape": (
        "import os, posix, time\nif posix.fork() == 0:\n    os.setsid()\n    if posix.fork() == 0:\n"
        "        while True:\n            time.sleep(0.05)\n    os._exit(0)\ntime.sleep(0.2)"
    ),
    "flood stdout": "import sys\nwhile True:\n    sys.stdout.write('9' * 65536)",
    "sys.exit(0) before output": "import sys\nsys.exit(0)\na, b = map(int, input().split())\nprint(a + b)",
    "__eq__ always true": None,  # functional, below
}
NEEDS_NAMESPACES = {"write outside", "open a socket"}


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_program_scores_zero_and_leaves_nothing(name, isolation_report):
    if name in NEEDS_NAMESPACES and isolation_report.level == "rlimits":
        pytest.skip(f"isolation level rlimits does not isolate this ({isolation_report.weaknesses})")
    if name == "kill the parent" and isolation_report.level == "rlimits" and not isolation_report.dedicated_uids:
        pytest.skip("rlimits without a dedicated uid cannot protect the caller from kill(-1)")
    server = _listening_socket()
    ground_truth = ADD
    if name == "__eq__ always true":
        program = (
            "class Always:\n    def __eq__(self, other):\n        return True\n"
            "class Solution:\n    def twoSum(self, nums, target):\n        return Always()"
        )
        ground_truth = TWO_SUM
    else:
        program = ADVERSARIAL[name].format(paths=ESCAPE_PATHS, token=ESCAPE_TOKEN, port=server.getsockname()[1])
    sandboxes_before = sandbox_dirs()
    started = time.monotonic()
    try:
        verdict = score_code(fenced(program), ground_truth, limits=FAST)
        elapsed = time.monotonic() - started
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody reached the host's loopback
    finally:
        server.close()
    assert verdict.credit == 0.0 and verdict.reason != "correct", verdict
    assert verdict.reason != "sandbox_error"
    assert elapsed < 15.0, f"{name} took {elapsed:.1f}s"
    assert_no_stray_processes()
    leaked = [path for path in ESCAPE_PATHS + [os.path.expanduser(f"~/{ESCAPE_TOKEN}")] if os.path.exists(path)]
    assert not leaked, f"written outside the sandbox: {leaked}"
    assert_no_new_sandbox_dirs(sandboxes_before)


@pytest.mark.parametrize(
    "line, expected",
    [
        (b"READY", ("READY",)),
        (b"COMPILE_ERROR U3ludGF4RXJyb3I=", ("COMPILE_ERROR",)),
        (b"RESULT 1 ok 0.0100 Mwo= -", ("RESULT", 1, "ok", "3\n")),
        (b"RESULT 0 timeout 6.0000 - -", ("RESULT", 0, "timeout", "")),
        (b"RESULT 2 ok 0.0100 Mwo= -", None),  # index out of range
        (b"RESULT -1 ok 0.0100 Mwo= -", None),
        (b"RESULT 0 passed 0.0100 Mwo= -", None),  # unknown status
        (b"RESULT 0 ok 0.0100 !!!notbase64 -", None),
        (b"RESULT 0 ok", None),
        (b"\xff\xfe garbage", None),
        (b"", None),
    ],
)
def test_report_lines_are_parsed_defensively(line, expected):
    from reward.code_tests import _parse_report

    assert _parse_report(line, 2) == expected
