"""Verdicts and limits under load: many callers at once.

verl's reward managers call ``compute_score`` from many executor threads at once.  A math
call's limit counts from the call's start, waiting for a math-verify worker included, so no
call may run past it whatever the others are doing (the assertions allow a margin for thread
start-up and tear-down on a loaded CI machine; the failures they catch, queueing behind other
callers' work, are several limits long).  A code verdict must not depend on the others at
all: a program's limits are CPU time counted from its own run's start, with a run per core.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from reward.math_scoring import verdict_cache
from reward.sandbox import default_sandbox
from reward.score import compute_score

from .conftest import assert_no_stray_processes

# serial: each test times calls against their limit, which other tests running beside it would stretch
pytestmark = pytest.mark.serial

MARGIN_S = 3.0
"""Slack over a limit for thread scheduling and process tear-down on a loaded 2-core machine."""
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
    for (response, gold, kind), (seconds, result) in zip(jobs, results, strict=True):
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
        "tests": [
            {"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
            {"input": "5 7", "output": "12", "testtype": "stdin"},
        ],
        "fn_name": None,
    }
)
CORRECT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
ENDLESS = "```python\nwhile True:\n    pass\n```"
HEAVY_CPU_S = 0.25
"""CPU seconds each test of a heavy correct program burns (measured by the program itself, so the
same on any machine) before it answers: half the per-test limit below."""
HEAVY = (
    "```python\nimport time\nstart = time.process_time()\nwhile time.process_time() - start < "
    f"{HEAVY_CPU_S}:\n    pass\na, b = map(int, input().split())\nprint(a + b)\n```"
)
LOAD_TEST_LIMIT_S = 0.5
CORRECT_PROGRAMS, HEAVY_PROGRAMS, LOOPS = 16, 6, 48


def test_code_verdicts_do_not_depend_on_load():
    """Correct programs scored beside three times as many endless loops, from 64 threads at once:
    every correct program passes (6 of them need half their per-test limit in CPU time), every
    loop times out, and the whole batch ends within a bound derived from the limits.  The limit is
    0.5 s CPU per test (LiveCodeBench's is 6 s) to keep the test short; what matters is the ratio.

    Before the limits were CPU time counted from a run's own slot, with at most a run per core
    (64 runs at once, wall-clock limits counted from the call's start), all 6 heavy programs here
    timed out (docs/rewards.md, "Code limits under load").
    """
    jobs = []  # (response, expected reason), loops and correct programs interleaved
    for k in range(CORRECT_PROGRAMS + LOOPS):
        if k % 4:
            jobs.append((ENDLESS, "timeout"))
        else:
            jobs.append((HEAVY if k // 4 < HEAVY_PROGRAMS else CORRECT, "correct"))
    assert [expected for _, expected in jobs].count("correct") == CORRECT_PROGRAMS
    sources = ("livecodebench", "deepcoder", "primeintellect")
    calls = [
        (
            lambda response=response, source=sources[k % 3]: compute_score(
                source, response, ADD, code_test_timeout_s=LOAD_TEST_LIMIT_S
            )
        )
        for k, (response, _) in enumerate(jobs)
    ]
    started = time.monotonic()
    results = _run_all(calls)
    elapsed = time.monotonic() - started
    failures = [
        (k, response[:40], result)
        for k, ((response, expected), (_, result)) in enumerate(zip(jobs, results, strict=True))
        if result["reason"] != expected or result["scorer_failed"]
    ]
    assert not failures, failures
    # Bound: every test's CPU limit used in full (a loop's first test; both tests of a correct
    # program), shared by the run slots, twice over, plus 20 s for starting 64 sandboxes.
    # Measured: 21-25 s on 2 cores beside other work (docs/rewards.md, "Code limits under load").
    slots = default_sandbox().max_runs
    cpu_limits = LOOPS * LOAD_TEST_LIMIT_S + CORRECT_PROGRAMS * 2 * LOAD_TEST_LIMIT_S
    bound = 2 * cpu_limits / slots + 20.0
    print(f"{len(jobs)} calls on {slots} run slots: {elapsed:.1f} s (bound {bound:.0f} s)")
    assert elapsed <= bound, f"the batch took {elapsed:.1f} s; bound {bound:.0f} s"
    assert_no_stray_processes()
