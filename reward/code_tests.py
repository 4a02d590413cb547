"""LiveCodeBench-style code scoring: program extraction, test specification, comparison.

Ground truth (as ``data_prep`` writes it into ``reward_model.ground_truth``) is a JSON
string ``{"tests": [{"input": str, "output": str, "testtype": "stdin" | "functional"}],
"fn_name": str | null}``.  The program is the last fenced Python block of the response.

All tests of a problem run in ONE sandboxed process (:mod:`reward.code_harness`), each in
its own forked child with a per-test time limit, under a per-problem wall-clock budget.
Comparison happens here, in the parent, on plain strings / JSON values:

* stdin tests, as LiveCodeBench: outputs stripped and split into lines; same number of
  lines; each line equal after ``strip()``, or else equal as a list of ``Decimal`` numbers
  (``3.0`` == ``3``);
* functional tests: the child serialises the return value with ``json.dumps``; it is
  parsed here and compared with ``==`` to the expected JSON (tuples arrive as lists).

In ``all_pass`` mode the run stops at the first failing test (as LiveCodeBench does).
"""

from __future__ import annotations

import binascii
import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from reward import outcome
from reward.sandbox import Limits, Sandbox, SandboxUnavailable, default_sandbox

CODE_MODES: tuple[str, ...] = ("all_pass", "fraction")
TEST_TYPES: tuple[str, ...] = ("stdin", "functional")
HARNESS_SOURCE = Path(__file__).with_name("code_harness.py").read_text()

_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^[ \t]*```", re.MULTILINE | re.DOTALL)
_PYTHON_TAGS = {"", "python", "py", "python3", "py3"}


@dataclass(frozen=True)
class TestCase:
    input: str
    output: str
    testtype: str


@dataclass(frozen=True)
class CodeProblem:
    tests: tuple[TestCase, ...]
    fn_name: str | None


@dataclass(frozen=True)
class CodeLimits:
    """Per-test time limit, per-problem budget and resources of the sandbox.

    Defaults follow LiveCodeBench (6 s per test) with a 60 s cap per problem.
    """

    test_timeout_s: float = 6.0
    problem_budget_s: float = 60.0
    memory_mb: int = 2048
    output_mb: int = 16

    def __post_init__(self) -> None:
        for name in ("test_timeout_s", "problem_budget_s", "memory_mb", "output_mb"):
            if not getattr(self, name) > 0:
                raise ValueError(f"code limit {name} must be positive, got {getattr(self, name)!r}")


DEFAULT_CODE_LIMITS = CodeLimits()


def extract_program(response: str) -> str | None:
    """The last fenced code block tagged python (or untagged); ``None`` if there is none."""
    program = None
    for match in _FENCE.finditer(response):
        if match.group(1).lower() in _PYTHON_TAGS:
            program = match.group(2)
    if program is None or not program.strip():
        return None
    return program


def parse_ground_truth(ground_truth: str | dict) -> CodeProblem:
    """Validate a code ground truth; errors name the offending key or test index."""
    if isinstance(ground_truth, (str, bytes)):
        try:
            spec = json.loads(ground_truth)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"code ground_truth is not valid JSON ({error}); expected "
                '{"tests": [{"input": str, "output": str, "testtype": "stdin"|"functional"}], "fn_name": str|null}'
            ) from error
    elif isinstance(ground_truth, dict):
        spec = ground_truth
    else:
        raise ValueError(f"code ground_truth must be a JSON string, got {type(ground_truth).__name__}")
    if not isinstance(spec, dict) or "tests" not in spec:
        raise ValueError("code ground_truth must be a JSON object with a 'tests' list and an 'fn_name'")
    raw_tests = spec["tests"]
    if not isinstance(raw_tests, list) or not raw_tests:
        raise ValueError("code ground_truth 'tests' must be a non-empty list")
    fn_name = spec.get("fn_name")
    if fn_name is not None and (not isinstance(fn_name, str) or not fn_name.isidentifier()):
        raise ValueError(f"code ground_truth 'fn_name' must be a Python identifier or null, got {fn_name!r}")
    tests = []
    for index, test in enumerate(raw_tests):
        if not isinstance(test, dict):
            raise ValueError(f"code ground_truth tests[{index}] must be an object, got {type(test).__name__}")
        for key in ("input", "output", "testtype"):
            if not isinstance(test.get(key), str):
                raise ValueError(f"code ground_truth tests[{index}].{key} must be a string, got {test.get(key)!r:.80}")
        if test["testtype"] not in TEST_TYPES:
            raise ValueError(f"code ground_truth tests[{index}].testtype={test['testtype']!r}; use one of {TEST_TYPES}")
        if test["testtype"] == "functional":
            if fn_name is None:
                raise ValueError(f"code ground_truth tests[{index}] is functional but 'fn_name' is null")
            try:
                json.loads(test["output"])
            except json.JSONDecodeError as error:
                raise ValueError(f"code ground_truth tests[{index}].output is not JSON ({error})") from error
        tests.append(TestCase(test["input"], test["output"], test["testtype"]))
    return CodeProblem(tests=tuple(tests), fn_name=fn_name)


def _as_decimals(line: str) -> list[Decimal] | None:
    try:
        values = [Decimal(token) for token in line.split()]
    except InvalidOperation:
        return None
    return values


def stdin_output_matches(actual: str, expected: str) -> bool:
    """LiveCodeBench's stdin comparison (line by line after strip, then numerically)."""
    actual_lines = actual.strip().split("\n")
    expected_lines = expected.strip().split("\n")
    if len(actual_lines) != len(expected_lines):
        return False
    for got, want in zip(actual_lines, expected_lines):
        got, want = got.strip(), want.strip()
        if got == want:
            continue
        got_numbers, want_numbers = _as_decimals(got), _as_decimals(want)
        if got_numbers is None or want_numbers is None or got_numbers != want_numbers:
            return False
    return True


def functional_output_matches(actual_json: str, expected_json: str) -> bool:
    """Compare a JSON-serialised return value to the expected JSON value with ``==``."""
    try:
        actual = json.loads(actual_json)
    except (json.JSONDecodeError, RecursionError):
        return False
    return actual == json.loads(expected_json)


_STATUSES = ("ok", "timeout", "runtime_error", "output_limit")


def _parse_report(line: bytes, n_tests: int) -> tuple | None:
    """One harness report line -> ("READY",) | ("COMPILE_ERROR",) | ("RESULT", i, status, output).

    Returns ``None`` for anything malformed: the pipe is reachable by the sandboxed program
    (through /proc), so its content is untrusted input, parsed defensively.
    """
    fields = line.decode("ascii", errors="replace").split(" ")
    if fields == ["READY"]:
        return ("READY",)
    if len(fields) == 2 and fields[0] == "COMPILE_ERROR":
        return ("COMPILE_ERROR",)
    if len(fields) != 6 or fields[0] != "RESULT" or fields[2] not in _STATUSES or not fields[1].isdigit():
        return None
    i = int(fields[1])
    if i >= n_tests:
        return None
    try:
        output = "" if fields[4] == "-" else binascii.a2b_base64(fields[4]).decode("utf-8", errors="replace")
    except binascii.Error:
        return None
    return ("RESULT", i, fields[2], output)


_FAILURE_REASONS = {
    "timeout": outcome.TIMEOUT,
    "runtime_error": outcome.RUNTIME_ERROR,
    "output_limit": outcome.RUNTIME_ERROR,
}


def parse_submission(ground_truth: str | dict, response: str, mode: str) -> tuple[CodeProblem, str | None]:
    """Check ``mode``, parse the ground truth and take the response's program (None: no program)."""
    if mode not in CODE_MODES:
        raise ValueError(f"code_mode={mode!r} is not supported; use one of {CODE_MODES}")
    return parse_ground_truth(ground_truth), extract_program(response)


def score_code(
    response: str,
    ground_truth: str | dict,
    *,
    mode: str = "all_pass",
    limits: CodeLimits = DEFAULT_CODE_LIMITS,
    sandbox: Sandbox | None = None,
) -> outcome.Verdict:
    """Run the response's program on every test in the sandbox and grade it.

    ``mode``: ``all_pass`` (credit 1 only if every test passes; stops at the first failure)
    or ``fraction`` (credit = passed / total; runs every test).
    """
    problem, program = parse_submission(ground_truth, response, mode)
    if program is None:
        return outcome.all_or_nothing(outcome.NO_ANSWER, None)
    try:
        sandbox = sandbox or default_sandbox()
    except SandboxUnavailable:
        raise
    n = len(problem.tests)
    output_bytes = limits.output_mb << 20
    files = {"solution.py": program.encode()}
    manifest = ["solution.py", problem.fn_name or "-", repr(float(limits.test_timeout_s)), str(output_bytes)]
    for i, test in enumerate(problem.tests):
        files[f"in_{i}"] = test.input.encode()
        manifest.append(f"in_{i} {test.testtype}")
    files["manifest"] = ("\n".join(manifest) + "\n").encode()
    budget = min(limits.problem_budget_s, n * limits.test_timeout_s + 5.0)
    sandbox_limits = Limits(
        wall_s=budget,
        cpu_s=max(1, math.ceil(limits.test_timeout_s) + 1),
        memory_bytes=limits.memory_mb << 20,
        file_size_bytes=output_bytes + 1,
        output_bytes=n * (2 * output_bytes + 4096) + 65536,
    )
    passed: list[bool] = [False] * n
    first_failure: list[str] = []
    header: dict = {}
    reported: set[int] = set()
    seen = 0

    def on_line(line: bytes) -> bool:
        nonlocal seen
        record = _parse_report(line, n)
        if record is None:
            return True  # not a well-formed report line (something else wrote to the pipe)
        if record[0] in ("READY", "COMPILE_ERROR"):
            header[record[0]] = True
            return record[0] == "READY"
        _, i, status, output = record
        if passed[i] or i in reported:
            return True  # a test is graded once
        reported.add(i)
        seen += 1
        test = problem.tests[i]
        if status != "ok":
            ok, reason = False, _FAILURE_REASONS.get(status, outcome.RUNTIME_ERROR)
        elif test.testtype == "stdin":
            ok, reason = stdin_output_matches(output, test.output), outcome.WRONG_ANSWER
        else:
            ok, reason = functional_output_matches(output, test.output), outcome.WRONG_ANSWER
        passed[i] = ok
        if not ok and not first_failure:
            first_failure.append(reason)
        return ok or mode == "fraction"

    result = sandbox.run(
        ["python", "-I", "-B", "-c", HARNESS_SOURCE, "manifest"],
        files=files,
        limits=sandbox_limits,
        on_line=on_line,
    )
    if header.get("COMPILE_ERROR"):
        return outcome.Verdict(outcome.RUNTIME_ERROR, program, 0.0, 0.0)
    if not header.get("READY"):
        if result.timed_out:
            reason = outcome.TIMEOUT
        else:
            reason = outcome.SANDBOX_ERROR
        return outcome.Verdict(reason, program, 0.0, 0.0)
    if not first_failure and seen < n:
        # the harness stopped before reporting every test: killed from inside, or out of budget
        first_failure.append(outcome.TIMEOUT if result.timed_out else outcome.RUNTIME_ERROR)
    fraction = sum(passed) / n
    reason = outcome.CORRECT if all(passed) else first_failure[0]
    credit = fraction if mode == "fraction" else (1.0 if all(passed) else 0.0)
    return outcome.Verdict(reason, program, fraction, credit)
