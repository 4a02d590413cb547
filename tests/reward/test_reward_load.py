"""A call's time limit holds under load: from 8 and from 64 concurrent callers.

verl's reward managers call ``compute_score`` from many executor threads at once.  Each
call's limit counts from the call's start, waiting for a math-verify worker or a sandbox
slot included, so no call may run past its limit whatever the others are doing.  The
assertions allow a margin for thread start-up and tear-down on a loaded CI machine; the
failures they catch (queueing behind other callers' work) are several limits long.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from reward.code_tests import CodeLimits, score_code
from reward.math_scoring import verdict_cache
from reward.sandbox import Sandbox, default_sandbox
from reward.score import compute_score

from .conftest import assert_no_stray_processes

# serial: each test times calls against their limit, which other tests running beside it would stretch
pytestmark = pytest.mark.serial

MARGIN_S = 3.0
"""Slack over a limit for thread scheduling and process tear-down on a loaded 2-core machine."""
CODE_MARGIN_S = 5.0
"""The same for sandboxes, whose tear-down (namespaces, directory) comes after the limit."""
MATH_LIMIT_S = 2.0
HOSTILE_MATH = ("\\boxed{9^{9^{9^9}}}", "\\boxed{(10^{10})!}")


def _run_all(calls: list) -> list[tuple[float, object]]:
    """Run every zero-argument call in its own thread, all released at once; (seconds, result) each."""
    results: list = [None] * len(calls)
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(calls))

    def run(index: int) -> None:
        try:
            barrier.wait()
            started = time.monotonic()
            value = calls[index]()
            results[index] = (time.monotonic() - started, value)
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors[:3]
    return results


def _math_jobs(callers: int) -> list[tuple[str, str, str]]:
    """(response, gold, kind): three quarters hostile, the rest ordinary answers (both paths)."""
    jobs = []
    for k in range(callers):
        if k % 4 != 3:
            jobs.append((HOSTILE_MATH[k % 2], "7", "hostile"))
        elif k % 8 == 3:
            jobs.append((f"\\boxed{{\\frac{{{k}}}{{2}}}}", str(k / 2), "exact"))
        else:  # decided by math-verify; distinct per job so no cache answers it
            jobs.append((f"\\boxed{{\\sqrt{{{8 * k * k}}}}}", f"{2 * k}\\sqrt{{2}}", "math-verify"))
    return jobs


@pytest.mark.usefixtures("own_math_pool")
@pytest.mark.parametrize("callers", [8, 64])
def test_math_limit_holds_from_many_callers(callers):
    compute_score("math500", "\\boxed{\\sqrt{8}}", "2\\sqrt{2}", math_timeout_s=120)  # math-verify imported once
    verdict_cache.clear()
    jobs = _math_jobs(callers)
    calls = [
        (lambda response=response, gold=gold: compute_score("hmmt25", response, gold, math_timeout_s=MATH_LIMIT_S))
        for response, gold, _ in jobs
    ]
    results = _run_all(calls)
    slowest = max(seconds for seconds, _ in results)
    assert slowest <= MATH_LIMIT_S + MARGIN_S, f"a call took {slowest:.1f} s; its limit is {MATH_LIMIT_S} s"
    for (response, gold, kind), (seconds, result) in zip(jobs, results):
        if kind == "hostile":
            assert result["reason"] == "timeout" and result["score"] == 0.0, (response, result)
        elif kind == "exact" or callers <= 8:
            # with up to 8 callers every ordinary answer gets a worker (extra ones are forked)
            assert result["reason"] == "correct", (response, gold, result, seconds)
        else:  # 48 hostile answers saturate the machine: a late answer is a timeout, never "wrong"
            assert result["reason"] in ("correct", "timeout"), (response, gold, result)
    assert_no_stray_processes()


ADD = json.dumps(
    {
        "tests": [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}, {"input": "5 7", "output": "12", "testtype": "stdin"}],
        "fn_name": None,
    }
)
CORRECT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
ENDLESS = "```python\nwhile True:\n    pass\n```"


def test_code_limit_counts_waiting_for_a_sandbox_slot():
    """24 callers share a sandbox that runs 2 programs at a time: queueing comes out of the limit
    (counted from the run's start instead, the last callers took 15 s and more)."""
    sandbox = Sandbox(default_sandbox().level, max_runs=2)
    limits = CodeLimits(test_timeout_s=1.0, problem_budget_s=3.0)
    calls = [(lambda: score_code(ENDLESS, ADD, limits=limits, sandbox=sandbox)) for _ in range(24)]
    try:
        results = _run_all(calls)
    finally:
        sandbox.close()
    slowest = max(seconds for seconds, _ in results)
    assert slowest <= limits.problem_budget_s + CODE_MARGIN_S, f"a call took {slowest:.1f} s; its limit is 3 s"
    assert all(verdict.reason == "timeout" for _, verdict in results)
    assert_no_stray_processes()


@pytest.mark.parametrize("callers", [8, pytest.param(64, marks=pytest.mark.slow)])
def test_code_limit_holds_from_many_callers(callers):
    test_limit_s = 2.0
    budget = CodeLimits(test_timeout_s=test_limit_s).run_budget_s(2)
    jobs = [(ENDLESS, "timeout") if k % 2 else (CORRECT, "correct") for k in range(callers)]
    sources = ("livecodebench", "deepcoder", "primeintellect")
    calls = [
        (
            lambda response=response, source=sources[k % 3]: compute_score(
                source, response, ADD, code_test_timeout_s=test_limit_s
            )
        )
        for k, (response, _) in enumerate(jobs)
    ]
    results = _run_all(calls)
    slowest = max(seconds for seconds, _ in results)
    assert slowest <= budget + CODE_MARGIN_S, f"a call took {slowest:.1f} s; its limit is {budget} s"
    reasons = [result["reason"] for _, result in results]
    if callers <= 8:
        assert reasons == [reason for _, reason in jobs]
    else:
        # 32 endless programs hold both cores for their whole limit: a correct program late to
        # the CPU is a timeout (the limit is wall-clock, as LiveCodeBench's), never wrong, and an
        # endless one is never passed (a CI run: 8 of 32 correct ones timed out)
        assert all(r == "timeout" for r, (_, expected) in zip(reasons, jobs) if expected == "timeout"), reasons
        assert all(r in ("correct", "timeout") for r in reasons), reasons
        assert "correct" in reasons, reasons
    assert_no_stray_processes()
