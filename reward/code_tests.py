"""LiveCodeBench code scoring: program extraction, test specification, comparison.

Ground truth (as ``data_prep`` writes it into ``reward_model.ground_truth``) is a JSON
string ``{"tests": [{"input": str, "output": str, "testtype": "stdin" | "functional"}],
"fn_name": str | null}``; all tests of a problem share one testtype, and ``fn_name`` is
set exactly when they are functional.  The program is taken as LiveCodeBench takes it:
the lines between the last two lines that contain a code fence.

All tests of a problem run in ONE sandboxed process (:mod:`reward.code_harness`, which
reproduces LiveCodeBench's harness: import preamble, ``wrapped_function``, ``Solution``
instance, one load per problem), each test under the per-test limit, all of them under
LiveCodeBench's whole-run limit ``(per-test limit + 1) * tests + 5`` seconds.  So that a
verdict does not depend on what else the machine runs, the limits are CPU time of the run's
own processes, each backed by a wall-clock limit :data:`WALL_BACKSTOP_FACTOR` times as long,
and all of them count from the moment the run gets its sandbox slot (at most one run per
usable core at once, host-wide: :mod:`reward.sandbox.slots`); waiting for a slot has its own
limit, ``queue_timeout_s``.  Comparison happens here, in the parent, on plain strings / data:

* stdin tests, as LiveCodeBench: both outputs stripped and split into lines, each line
  stripped; same number of lines; each line equal as text or else as a list of
  ``Decimal`` numbers (``3.0`` == ``3``);
* functional tests: the returned value (a top-level tuple counts as a list) as plain data,
  compared with ``==`` to the expected JSON value.

In ``all_pass`` mode the run stops at the first failing test (as LiveCodeBench does).
"""

from __future__ import annotations

import binascii
import json
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from reward import outcome
from reward.sandbox import Limits, Sandbox, default_sandbox
from reward.sandbox.slots import check_max_runs

CODE_MODES: tuple[str, ...] = ("all_pass", "fraction")
TEST_TYPES: tuple[str, ...] = ("stdin", "functional")
HARNESS_SOURCE = Path(__file__).with_name("code_harness.py").read_text()
HARNESS_CPU_S = 3600
"""RLIMIT_CPU of the sandbox as launched (possibly ahead of the problem); the runner sets the
problem's own limit, ``ceil(whole-run limit) + 1`` seconds, before any program code runs."""
WALL_BACKSTOP_FACTOR = 3.0
"""Each CPU-time limit (a test's, the whole run's) is backed by a wall-clock limit this many times
as long, counted from the start of the test or of the run: a program that sleeps or blocks still
ends, and one that computes keeps its verdict while it gets a third of a core or more."""
TEARDOWN_S = 5.0
"""Time allowed for ending a sandbox that ran to its wall-clock limit and removing it."""

FENCE = "```"


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
    """Time limits and resources of a problem's sandboxed run.

    Attributes:
        test_timeout_s: CPU seconds each test (and loading the program) may use -- the CPU time
            of the test's process, all its threads -- LiveCodeBench's 6 s.  Its wall-clock
            backstop is :data:`WALL_BACKSTOP_FACTOR` times as long.
        problem_budget_s: cap on the whole run's limit; ``None`` (the default) is LiveCodeBench's,
            ``(test_timeout_s + 1) * tests + 5`` seconds (:meth:`run_budget_s`): CPU seconds of
            all tests together, backed by :meth:`run_wall_s` of wall-clock time.
        memory_mb / output_mb: address space per process / largest output per test.
        concurrency: sandboxed runs at once on this host (all scoring processes together); None:
            ``REWARD_SANDBOX_MAX_RUNS``, else the cores this process may use.  Changes the
            process's sandbox for every later call.
        queue_timeout_s: how long a call may wait for a sandbox slot, from its start; a call that
            gets none scores 0 as ``sandbox_error`` with ``scorer_failed`` (no verdict on the program).

    Every run's limits count from the moment it gets its slot: waiting for one is not part of it.
    """

    test_timeout_s: float = 6.0
    problem_budget_s: float | None = None
    memory_mb: int = 2048
    output_mb: int = 16
    concurrency: int | None = None
    queue_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        for name in ("test_timeout_s", "problem_budget_s", "memory_mb", "output_mb", "queue_timeout_s"):
            value = getattr(self, name)
            if value is None and name == "problem_budget_s":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"code limit {name} must be a positive number, got {value!r}")
        if self.concurrency is not None:
            check_max_runs(self.concurrency, "code limit concurrency")

    def run_budget_s(self, n_tests: int) -> float:
        """CPU seconds for all ``n_tests`` tests of a problem (LiveCodeBench's whole-run limit, or the cap)."""
        lcb = (self.test_timeout_s + 1.0) * n_tests + 5.0
        return lcb if self.problem_budget_s is None else min(lcb, self.problem_budget_s)

    @property
    def test_wall_s(self) -> float:
        """The wall-clock backstop of one test."""
        return WALL_BACKSTOP_FACTOR * self.test_timeout_s

    def run_wall_s(self, n_tests: int) -> float:
        """The wall-clock backstop of the whole run, from the moment it gets its slot."""
        return WALL_BACKSTOP_FACTOR * self.run_budget_s(n_tests)

    def call_bound_s(self, n_tests: int) -> float:
        """The longest one scoring call takes: waiting for a slot, the run, its teardown."""
        return self.queue_timeout_s + self.run_wall_s(n_tests) + TEARDOWN_S


DEFAULT_CODE_LIMITS = CodeLimits()


def extract_program(response: str) -> str | None:
    """The program as LiveCodeBench extracts it: the lines between the last two lines
    containing a code fence, whatever the fence's language tag; ``None`` when there are
    fewer than two such lines or nothing but blanks between them."""
    lines = response.split("\n")
    fences = [index for index, line in enumerate(lines) if FENCE in line]
    if len(fences) < 2:
        return None
    program = "\n".join(lines[fences[-2] + 1 : fences[-1]])
    return program if program.strip() else None


def _json_value(text: str):
    """Parse JSON with integers of any length (``Decimal``; compares exactly with int and float)."""
    return json.loads(text, parse_int=Decimal)


def parse_ground_truth(ground_truth: str | dict) -> CodeProblem:
    """Validate a code ground truth; errors name the offending key, test index and line."""
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
        if test["testtype"] != raw_tests[0].get("testtype"):
            raise ValueError(
                f"code ground_truth tests[{index}].testtype={test['testtype']!r} differs from tests[0]'s: "
                "all tests of a problem share one testtype"
            )
        if test["testtype"] == "stdin" and fn_name is not None:
            raise ValueError(
                f"code ground_truth has fn_name={fn_name!r} but stdin tests: LiveCodeBench calls fn_name whenever "
                "it is set, so fn_name must be null for stdin problems"
            )
        if test["testtype"] == "functional":
            if fn_name is None:
                raise ValueError(f"code ground_truth tests[{index}] is functional but 'fn_name' is null")
            for line_number, line in enumerate(test["input"].split("\n"), start=1):
                try:
                    _json_value(line)
                except ValueError as error:
                    raise ValueError(
                        f"code ground_truth tests[{index}].input line {line_number} is not one JSON value ({error}): "
                        "functional inputs hold one JSON argument per line, with no blank lines"
                    ) from error
            try:
                _json_value(test["output"])
            except ValueError as error:
                raise ValueError(f"code ground_truth tests[{index}].output is not JSON ({error})") from error
        tests.append(TestCase(test["input"], test["output"], test["testtype"]))
    return CodeProblem(tests=tuple(tests), fn_name=fn_name)


def _as_decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except (ArithmeticError, ValueError):
        return None


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def stdin_output_matches(actual: str, expected: str) -> bool:
    """LiveCodeBench's stdin comparison: both sides stripped and split into lines, each line
    stripped; equal line counts; each line equal as text, or else as a list of ``Decimal``s."""
    actual_lines, expected_lines = _stripped_lines(actual), _stripped_lines(expected)
    if len(actual_lines) != len(expected_lines):
        return False
    for got, want in zip(actual_lines, expected_lines, strict=True):
        if got == want:
            continue
        got_numbers, want_numbers = _as_decimals(got), _as_decimals(want)
        if got_numbers is None or want_numbers is None:
            return False
        try:
            if got_numbers != want_numbers:
                return False
        except ArithmeticError:  # a signalling NaN refuses comparison (LiveCodeBench: an error, a failure)
            return False
    return True


def output_matches(test: TestCase, output: str) -> bool:
    """Whether the harness's output for ``test`` passes it: stdin tests as
    :func:`stdin_output_matches`; functional tests compare the returned value, which the
    harness reports as ``=<json>`` for plain data and ``!`` for anything else (never equal),
    to the expected JSON value with ``==``."""
    if test.testtype == "stdin":
        return stdin_output_matches(output, test.output)
    if not output.startswith("="):
        return False
    try:
        actual = _json_value(output[1:])
    except (ValueError, RecursionError):
        return False
    return actual == _json_value(test.output)


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


def tests_verdict(program: str, passed: int, n_tests: int, failures: list[str], mode: str) -> outcome.Verdict:
    """The verdict on a program that passed ``passed`` of ``n_tests`` tests, ``failures[0]`` being
    the reason of the first failure: credit is the pass rate in ``fraction`` mode, else 1 or 0."""
    fraction = passed / n_tests
    reason = outcome.CORRECT if passed == n_tests else failures[0]
    credit = fraction if mode == "fraction" else (1.0 if passed == n_tests else 0.0)
    return outcome.Verdict(reason, program, fraction, credit)


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
    started = time.monotonic()
    problem, program = parse_submission(ground_truth, response, mode)
    if program is None:
        return outcome.all_or_nothing(outcome.NO_ANSWER, None)
    sandbox = sandbox or default_sandbox()
    if limits.concurrency is not None and limits.concurrency != sandbox.max_runs:
        sandbox.set_max_runs(limits.concurrency, "reward option code_concurrency")
    n = len(problem.tests)
    output_bytes = limits.output_mb << 20
    files = {"solution.py": program.encode("utf-8", errors="surrogatepass")}
    manifest = [
        "solution.py",
        problem.fn_name or "-",
        repr(float(limits.test_timeout_s)),  # CPU seconds per test
        repr(float(limits.test_wall_s)),  # its wall-clock backstop
        str(output_bytes),
        "1" if mode == "all_pass" else "0",
        repr(float(limits.run_budget_s(n))),  # CPU seconds for all tests
    ]
    for i, test in enumerate(problem.tests):
        files[f"in_{i}"] = test.input.encode("utf-8", errors="surrogatepass")
        manifest.append(f"in_{i}")
    files["manifest"] = ("\n".join(manifest) + "\n").encode()
    sandbox_limits = Limits(
        wall_s=limits.run_wall_s(n),
        cpu_s=HARNESS_CPU_S,  # the runner lowers it for the program (manifest), once the problem is known
        memory_bytes=limits.memory_mb << 20,
        file_size_bytes=output_bytes + 1,
        output_bytes=n * (2 * output_bytes + 4096) + 65536,
    )
    passed: list[bool] = [False] * n
    first_failure: list[str] = []
    header: dict = {}
    reported: set[int] = set()

    def on_line(line: bytes) -> bool:
        record = _parse_report(line, n)
        if record is None:
            return True  # not a well-formed report line (something else wrote to the pipe)
        if record[0] in ("READY", "COMPILE_ERROR"):
            header[record[0]] = True
            return record[0] == "READY"
        _, i, status, output = record
        if i in reported:
            return True  # a test is graded once
        reported.add(i)
        if status != "ok":
            ok, reason = False, _FAILURE_REASONS.get(status, outcome.RUNTIME_ERROR)
        else:
            ok, reason = output_matches(problem.tests[i], output), outcome.WRONG_ANSWER
        passed[i] = ok
        if not ok and not first_failure:
            first_failure.append(reason)
        return ok or mode == "fraction"

    result = sandbox.run(
        ["python", "-I", "-B", "-c", HARNESS_SOURCE, "manifest", "go"],
        files=files,
        limits=sandbox_limits,
        on_line=on_line,
        queue_deadline=started + limits.queue_timeout_s,
        prepared=True,
    )
    if result.not_started:  # no slot in time: no verdict on the program, a failure of the scorer
        return outcome.Verdict(outcome.SANDBOX_ERROR, program, 0.0, 0.0, guarded_failure=True)
    if header.get("COMPILE_ERROR"):
        return outcome.Verdict(outcome.RUNTIME_ERROR, program, 0.0, 0.0)
    if not header.get("READY"):
        return outcome.Verdict(outcome.TIMEOUT if result.timed_out else outcome.SANDBOX_ERROR, program, 0.0, 0.0)
    if not first_failure and len(reported) < n:
        # the harness stopped before reporting every test: killed from inside, or out of budget
        first_failure.append(outcome.TIMEOUT if result.timed_out else outcome.RUNTIME_ERROR)
    return tests_verdict(program, sum(passed), n, first_failure, mode)
