"""Code limits that measure a program's own run: CPU time per test, a wall-clock backstop, the run's
CPU budget, run slots per usable core shared by the host, and a bounded wait for a slot.

The programs burn CPU by watching their own ``time.process_time()``, so a test's CPU use is the
same on every machine; the limits checked here are a few tenths of a second apart from it.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from reward import code_tests
from reward.code_tests import CodeLimits, score_code
from reward.sandbox import Sandbox, default_sandbox
from reward.sandbox.slots import MAX_RUNS_ENV, RunSlots, default_max_runs, usable_cores
from reward.score import compute_score

from .conftest import assert_no_stray_processes


def _add_problem(tests: int) -> str:
    return json.dumps(
        {
            "tests": [{"input": f"{i} 1\n", "output": f"{i + 1}\n", "testtype": "stdin"} for i in range(tests)],
            "fn_name": None,
        }
    )


def _burning(cpu_s: float) -> str:
    """A correct adder that first burns ``cpu_s`` CPU seconds of its own in every test."""
    return (
        "```python\nimport time\nstart = time.process_time()\n"
        f"while time.process_time() - start < {cpu_s}:\n    pass\n"
        "a, b = map(int, input().split())\nprint(a + b)\n```"
    )


CORRECT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


# --------------------------------------------------------------------------- the limits themselves
def test_each_test_has_its_own_cpu_limit(monkeypatch):
    """Three tests of 0.6 s CPU each under a 1 s limit pass: the limit is per test (1.8 s in all).
    (Wall-clock backstops widened: only CPU time is checked here, however loaded the machine.)"""
    monkeypatch.setattr(code_tests, "WALL_BACKSTOP_FACTOR", 20.0)
    verdict = score_code(_burning(0.6), _add_problem(3), limits=CodeLimits(test_timeout_s=1.0))
    assert verdict.reason == "correct", verdict
    assert_no_stray_processes()


def test_the_runs_cpu_budget_stops_the_run(monkeypatch):
    """With a whole-run budget of 1 s CPU, the second 0.6 s test is cut and nothing after it runs.
    (The wall-clock backstops are widened so that only the CPU budget can cut the run, however
    loaded the machine.)"""
    monkeypatch.setattr(code_tests, "WALL_BACKSTOP_FACTOR", 20.0)
    limits = CodeLimits(test_timeout_s=1.0, problem_budget_s=1.0)
    verdict = score_code(_burning(0.6), _add_problem(3), mode="fraction", limits=limits)
    assert (verdict.reason, verdict.pass_fraction) == ("timeout", pytest.approx(1 / 3)), verdict


def test_a_program_that_sleeps_is_ended_by_the_wall_clock_backstop():
    """No CPU used, so only the per-test backstop (3 x 0.5 s) ends it, long before the run's (24 s)."""
    limits = CodeLimits(test_timeout_s=0.5)
    started = time.monotonic()
    verdict = score_code("```python\nimport time\ntime.sleep(60)\n```", _add_problem(2), limits=limits)
    elapsed = time.monotonic() - started
    assert verdict.reason == "timeout", verdict
    assert limits.test_wall_s <= elapsed < limits.test_wall_s + 5.0 < limits.run_wall_s(2), elapsed
    assert_no_stray_processes()


@pytest.mark.serial  # loads a core with processes of its own and needs it to itself
def test_a_tests_limit_is_cpu_time_not_wall_clock(tmp_path):
    """A correct program needing 0.5 s CPU per test under a 1 s limit passes while two CPU hogs
    share its core, although its run takes well over 1 s of wall-clock time.  The hogs and the
    sandbox (started on demand: no spare launched earlier elsewhere) inherit this thread's core."""
    cores = sorted(os.sched_getaffinity(0))
    sandbox = Sandbox(default_sandbox().level, spares=0, slot_dir=str(tmp_path))
    os.sched_setaffinity(0, {cores[-1]})
    hogs = []
    try:
        hogs = [  # each in a session of its own, as the sandbox is: under autogroup scheduling
            subprocess.Popen(  # each session gets an equal share of the core
                [sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL, start_new_session=True
            )
            for _ in range(2)
        ]
        time.sleep(0.2)
        started = time.monotonic()
        verdict = score_code(_burning(0.5), _add_problem(1), limits=CodeLimits(test_timeout_s=1.0), sandbox=sandbox)
        elapsed = time.monotonic() - started
    finally:
        os.sched_setaffinity(0, set(cores))
        for hog in hogs:
            hog.kill()
            hog.wait()
        sandbox.close()
    assert verdict.reason == "correct", (verdict, elapsed)
    print(f"a 0.5 s CPU test beside 2 hogs on its core: {elapsed:.2f} s")
    assert elapsed > 1.0, f"the run took {elapsed:.2f} s: the hogs did not slow it, so this showed nothing"
    assert_no_stray_processes()


# --------------------------------------------------------------------------- run slots
def test_usable_cores_follow_the_affinity_and_the_cgroup_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    v2 = tmp_path / "v2"
    (v2 / "job").mkdir(parents=True)
    (v2 / "proc_cgroup").write_text("0::/job\n")
    (v2 / "job" / "cpu.max").write_text("max 100000\n")
    assert usable_cores(str(v2), str(v2 / "proc_cgroup")) == 8
    (v2 / "job" / "cpu.max").write_text("250000 100000\n")  # 2.5 cores
    assert usable_cores(str(v2), str(v2 / "proc_cgroup")) == 3
    v1 = tmp_path / "v1"
    (v1 / "cpu,cpuacct" / "job").mkdir(parents=True)
    (v1 / "proc_cgroup").write_text("4:memory:/job\n3:cpu,cpuacct:/job\n")
    (v1 / "cpu,cpuacct" / "job" / "cpu.cfs_quota_us").write_text("50000\n")
    (v1 / "cpu,cpuacct" / "job" / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cores(str(v1), str(v1 / "proc_cgroup")) == 1
    (v1 / "cpu,cpuacct" / "job" / "cpu.cfs_quota_us").write_text("-1\n")
    assert usable_cores(str(v1), str(v1 / "proc_cgroup")) == 8
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert usable_cores(str(tmp_path / "none"), str(tmp_path / "none")) == 1


def test_the_default_concurrency_is_the_environment_variable_else_the_usable_cores(monkeypatch):
    monkeypatch.delenv(MAX_RUNS_ENV, raising=False)
    assert default_max_runs() == usable_cores()
    monkeypatch.setenv(MAX_RUNS_ENV, "3")
    assert default_max_runs() == 3


@pytest.mark.parametrize("raw", ["abc", "0", "-2", "2.5", "100000"])
def test_a_bad_concurrency_setting_is_an_error_naming_it(raw, monkeypatch):
    monkeypatch.setenv(MAX_RUNS_ENV, raw)
    with pytest.raises(ValueError, match=MAX_RUNS_ENV):
        default_max_runs()
    monkeypatch.delenv(MAX_RUNS_ENV)
    with pytest.raises(ValueError, match="code_concurrency"):
        value = int(raw) if raw.lstrip("-").isdigit() else raw
        compute_score("livecodebench", CORRECT, _add_problem(1), code_concurrency=value)
    with pytest.raises(ValueError, match="max_runs"):
        Sandbox(default_sandbox().level, max_runs=0)


def test_run_slots_are_shared_by_every_process_using_the_lock_directory(tmp_path):
    """Two slot sets over one directory (as two reward processes would) hold one slot between them."""
    first, second = RunSlots(1, str(tmp_path)), RunSlots(1, str(tmp_path))
    slot = first.acquire()
    assert slot == 0
    assert second.acquire(time.monotonic() + 0.2) is None
    first.release(slot)
    assert second.acquire(time.monotonic() + 5.0) == 0


def test_callers_get_slots_in_the_order_they_asked(tmp_path):
    slots = RunSlots(1, str(tmp_path))
    held = slots.acquire()
    order: list[int] = []

    def wait(k: int) -> None:
        slot = slots.acquire()
        order.append(k)
        slots.release(slot)

    threads = []
    for k in range(6):
        threads.append(threading.Thread(target=wait, args=(k,)))
        threads[-1].start()
        while len(slots._line) < k + 1:  # in line before the next one asks
            time.sleep(0.001)
    slots.release(held)
    for thread in threads:
        thread.join(timeout=10)
    assert order == list(range(6))


def test_a_call_that_gets_no_slot_in_time_is_a_flagged_sandbox_error(tmp_path):
    """While another process holds the only slot, a call waits its queue limit and then scores 0 as
    ``sandbox_error`` with ``scorer_failed`` (no verdict on the program); once free, it passes."""
    holder = RunSlots(1, str(tmp_path))
    slot = holder.acquire()
    threading.Timer(2.0, holder.release, args=(slot,)).start()  # a waiting mutant ends too, failing
    sandbox = Sandbox(default_sandbox().level, max_runs=1, slot_dir=str(tmp_path))
    try:
        verdict = score_code(CORRECT, _add_problem(1), limits=CodeLimits(queue_timeout_s=0.3), sandbox=sandbox)
        assert (verdict.reason, verdict.guarded_failure, verdict.credit) == ("sandbox_error", True, 0.0), verdict
        verdict = score_code(CORRECT, _add_problem(1), limits=CodeLimits(queue_timeout_s=30), sandbox=sandbox)
        assert verdict.reason == "correct", verdict
    finally:
        sandbox.close()
    assert_no_stray_processes()


_SECOND_PROCESS = """
import random, sys, threading, time
from reward.sandbox.slots import RunSlots
slots, taken_at = RunSlots(1, sys.argv[1]), []
def use():
    slot = slots.acquire(time.monotonic() + 60)
    taken_at.append(time.monotonic())
    time.sleep(random.uniform(0.01, 0.03))
    slots.release(slot)
threads = [threading.Thread(target=use) for _ in range(int(sys.argv[2]))]
for thread in threads:
    thread.start()
print("ready", flush=True)
for thread in threads:
    thread.join()
print(" ".join(map(str, taken_at)), flush=True)
"""


def test_a_process_with_a_backlog_does_not_keep_the_slots_from_another(tmp_path):
    """Processes A and B, 20 and 8 callers in line for one shared slot, each caller holding it 10
    to 30 ms: they take turns while both have callers in line (a process handing its slot straight
    to its own next caller, whichever gets it first would keep it until its line is through)."""
    first = RunSlots(1, str(tmp_path))
    taken_at: list[float] = []

    def use() -> None:
        slot = first.acquire(time.monotonic() + 60)
        taken_at.append(time.monotonic())
        time.sleep(random.uniform(0.01, 0.03))
        first.release(slot)

    held = first.acquire()
    threads = [threading.Thread(target=use) for _ in range(20)]
    for k, thread in enumerate(threads):
        thread.start()
        while len(first._line) < k + 1:
            time.sleep(0.001)
    other = subprocess.Popen(
        [sys.executable, "-c", _SECOND_PROCESS, str(tmp_path), "8"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    try:
        assert other.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 10
        while not any(name.startswith("waiting-") for name in os.listdir(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.001)  # B found the slot taken and is waiting
        first.release(held)
        b_taken_at = [float(at) for at in other.stdout.readline().split()]
    finally:
        other.wait(timeout=60)
        for thread in threads:
            thread.join(timeout=60)
    assert len(taken_at) == 20 and len(b_taken_at) == 8
    order = "".join(name for _, name in sorted([(at, "A") for at in taken_at] + [(at, "B") for at in b_taken_at]))
    both = order[: order.rindex("B") + 1]  # while both had callers in line (A's line is longer)
    longest = max(len(run) for run in both.replace("AB", "A B").replace("BA", "B A").split())
    # strict turns: runs of 1; a little more where a process was kept off the CPU past the hold-off
    # (a process keeping the slot for its own line: a run of 8 or 20)
    assert longest <= 3, order
