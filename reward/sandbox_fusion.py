"""Optional backend: run code tests on a SandboxFusion server over HTTP.

For users who run SandboxFusion (https://github.com/bytedance/SandboxFusion) at scale.
Select it with ``code_backend=sandbox_fusion`` and ``sandbox_fusion_url=<the server's
run_code endpoint>`` (for example ``http://host:8080/run_code``, the same URL verl's own
``sandbox_fusion`` scorer takes).  Each test is one ``POST`` of ``{code, stdin, language:
"python", compile_timeout, run_timeout, memory_limit_MB, files, fetch_files}``; the server
answers ``{status, compile_result, run_result: {status, return_code, stdout, ...}}``.

Each test's script is LiveCodeBench's harness for that one test (the functions of
:mod:`reward.code_harness`: preamble, ``wrapped_function``, ``Solution``, stdin stand-ins,
guard) followed by the program and the input as literals; it prints the test's output,
base64-encoded after a per-call random marker, so the candidate's own prints cannot be
mistaken for it.  Outputs are compared here exactly as for the local sandbox
(:mod:`reward.code_tests`).  Unlike the local sandbox (and LiveCodeBench), each test runs
in a fresh process: state does not carry over from one test to the next.
"""

from __future__ import annotations

import binascii
import secrets
import time
from concurrent.futures import ThreadPoolExecutor

import requests

from reward import outcome
from reward.code_tests import (
    DEFAULT_CODE_LIMITS,
    HARNESS_SOURCE,
    CodeLimits,
    TestCase,
    output_matches,
    parse_submission,
    tests_verdict,
)

_MAIN_GUARD = '\nif __name__ == "__main__":\n    main()\n'
if not HARNESS_SOURCE.endswith(_MAIN_GUARD):
    raise ImportError("reward/code_harness.py must end with its main guard (sandbox_fusion strips it)")
_HARNESS_FUNCTIONS = HARNESS_SOURCE[: -len(_MAIN_GUARD)]

HTTP_ATTEMPTS = 3
HTTP_SLACK_S = 10.0

_REMOTE_DRIVER = """

def _remote_test(program, fn_name, text, marker):
    results = os.dup(1)
    for name in PRELOADED:
        __import__(name)
    source = functional_source(program) if fn_name else stdin_source(program)
    code = compile(source, "<solution>", "exec")
    load_time_stdin = prepare_process()
    output = run_test(load_program(code, source, fn_name), fn_name, text, load_time_stdin)
    os.write(results, ("\\n" + marker + _b64(output) + "\\n").encode())


_remote_test({program!r}, {fn_name!r}, {text!r}, {marker!r})
"""


def remote_program(program: str, test: TestCase, fn_name: str | None, marker: str) -> str:
    """A stand-alone script that grades one test as LiveCodeBench does (the functions of
    :mod:`reward.code_harness`) and prints ``marker`` + the base64 output on its last line."""
    return _HARNESS_FUNCTIONS + _REMOTE_DRIVER.format(program=program, fn_name=fn_name, text=test.input, marker=marker)


def _post(url: str, payload: dict, timeout_s: float) -> dict | None:
    """POST with retries on connection errors and 5xx; ``None`` when the server never answered well."""
    for attempt in range(HTTP_ATTEMPTS):
        try:
            response = requests.post(url, json=payload, timeout=timeout_s)
        except requests.RequestException:
            response = None
        if response is not None and response.status_code < 500:
            try:
                return response.json() if response.ok else None
            except ValueError:
                return None
        time.sleep(0.2 * 2**attempt)
    return None


def _run_test(url: str, program: str, test: TestCase, fn_name: str | None, limits: CodeLimits) -> tuple[bool, str]:
    """(passed, failure reason) of one test on the server."""
    marker = "@@reward-result-" + secrets.token_hex(8) + "@@"
    payload = {
        "code": remote_program(program, test, fn_name, marker),
        "stdin": "",  # the input is in the script; fd 0 is empty, as in LiveCodeBench's grader
        "language": "python",
        "compile_timeout": limits.test_timeout_s,
        "run_timeout": limits.test_timeout_s,
        "memory_limit_MB": int(limits.memory_mb),
        "files": {},
        "fetch_files": [],
    }
    reply = _post(url, payload, 2 * limits.test_timeout_s + HTTP_SLACK_S)
    if not isinstance(reply, dict) or reply.get("status") == "SandboxError":
        return False, outcome.SANDBOX_ERROR
    compile_result = reply.get("compile_result") or {}
    run = reply.get("run_result") or {}
    if compile_result.get("status") == "TimeLimitExceeded" or run.get("status") == "TimeLimitExceeded":
        return False, outcome.TIMEOUT
    if run.get("status") != "Finished" or run.get("return_code") != 0:
        return False, outcome.RUNTIME_ERROR
    stdout = run.get("stdout") or ""
    results = [line[len(marker) :] for line in stdout.split("\n") if line.startswith(marker)]
    try:
        output = binascii.a2b_base64(results[-1]).decode("utf-8", errors="replace") if results else None
    except binascii.Error:
        output = None
    if output is None:
        return False, outcome.RUNTIME_ERROR
    return (True, "") if output_matches(test, output) else (False, outcome.WRONG_ANSWER)


def score_code_remote(
    response: str,
    ground_truth: str | dict,
    *,
    url: str,
    mode: str = "all_pass",
    limits: CodeLimits = DEFAULT_CODE_LIMITS,
    concurrency: int = 4,
) -> outcome.Verdict:
    """Like :func:`reward.code_tests.score_code`, executing on a SandboxFusion server.

    ``all_pass`` runs the tests in batches of ``concurrency`` and stops after the first
    batch with a failure; ``fraction`` runs them all.  The problem budget bounds the total.
    """
    problem, program = parse_submission(ground_truth, response, mode)
    if program is None:
        return outcome.all_or_nothing(outcome.NO_ANSWER, None)
    started = time.monotonic()
    n = len(problem.tests)
    results: list[tuple[bool, str]] = []
    with ThreadPoolExecutor(max_workers=concurrency) as executor:
        for first in range(0, n, concurrency):
            if time.monotonic() - started > limits.run_budget_s(n):
                break
            batch = problem.tests[first : first + concurrency]
            results += executor.map(lambda test: _run_test(url, program, test, problem.fn_name, limits), batch)
            if mode == "all_pass" and not all(ok for ok, _ in results):
                break
    passed = sum(ok for ok, _ in results)
    failures = [reason for ok, reason in results if not ok]
    if len(results) < n and not failures:
        failures.append(outcome.TIMEOUT)  # the problem budget ran out
    return tests_verdict(program, passed, n, failures, mode)
