"""Record one whole CI run: ``python3 scripts/record_ci_run.py`` in a fresh clone.

Runs ``bash .ci/run`` (the README's test command: set-up of ``.venv`` on a fresh machine, then the
whole suite) as CI does, with pytest also writing a JUnit report, and writes
``benchmarks/results/ci_run-<UTC time>-<cpu capability>.json``: the wall time of the whole run and
of its set-up, pytest's counts (passed, failed, skipped), the seconds of each test module (set-up
of module fixtures included: that is where the e2e runs are), the slowest tests, what the 2-node
test measured of a lost node and a preemption (the lines it prints, read from the report's captured
stderr: ``recovery``), the session's disk (the summary line of ``tests/disk_space.py``: ``disk``),
the machine, the commit and the stack's versions. BENCHMARKS.md, docs/cpu.md
and docs/recipes.md quote the newest through ``scripts/results_tables.py``.

Run it where nothing else runs (a quiet machine: the figure is CI's budget) and from a fresh clone
(``git clone <repo> /tmp/ci && cd /tmp/ci && python3 scripts/record_ci_run.py``), then copy the
file into the repository's ``benchmarks/results/``. It starts with the system Python (``.venv``
does not exist yet on a fresh clone) and reads the versions with ``.venv``'s at the end. Exits
with the run's exit status.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SETUP_DONE_MARK = "[setup] .venv ready"
# what tests/e2e/test_multi_node_cpu.py prints (to stderr) of its cluster, the lost node and the
# preemption: each pattern's groups become the named fields of the record's ``recovery``
RECOVERY_LINES = (
    (re.compile(r"2-node cluster up in (\d+) s"), ("cluster_up_s",)),
    (re.compile(r"first run: worker node lost after step 1's checkpoint \((\d+) processes killed\); the run ended (\d+) s later"),
     ("processes_killed", "node_loss_to_exit_s")),
    (re.compile(r"preempted run: SIGTERM after step (\d+); the run ended (\d+) s later"), ("sigterm_after_step", "sigterm_to_exit_s")),
    (re.compile(r"ray job submit run \(resumed on 2 nodes after the SIGTERM'd launch\), followed: (\d+) s"), ("resumed_job_s",)),
)
# the last line of tests/disk_space.py's terminal summary
DISK_LINE = re.compile(
    r"disk: ([\d.]+) GB free under \S+ at the start, ([\d.]+) GB at the lowest \(at (.+)\), ([\d.]+) GB at the end: "
    r"the session used up to ([\d.]+) GB"
)


def disk(output: str) -> dict:
    """The session's disk as its summary line gives it (empty if the run printed none)."""
    match = DISK_LINE.search(output)
    if not match:
        return {}
    start, lowest, where, end, used = match.groups()
    return {"free_start_gb": float(start), "free_lowest_gb": float(lowest), "lowest_at": where, "free_end_gb": float(end), "used_peak_gb": float(used)}


def module_of(classname: str) -> str:
    """JUnit's ``tests.e2e.test_x`` (or ``tests.e2e.test_x.TestClass``) -> ``tests/e2e/test_x.py``."""
    parts = classname.split(".")
    while parts and not parts[-1].startswith("test_"):
        parts.pop()
    return "/".join(parts) + ".py" if parts else classname


def junit_summary(path: Path) -> dict:
    """Counts, seconds per module and the slowest tests of a pytest JUnit report."""
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    per_module: dict[str, float] = defaultdict(float)
    tests = []
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    for case in suite.iter("testcase"):
        seconds = float(case.get("time", 0.0))
        name = f"{module_of(case.get('classname', ''))}::{case.get('name')}"
        per_module[module_of(case.get("classname", ""))] += seconds
        tests.append((name, seconds))
        if case.find("failure") is not None:
            counts["failed"] += 1
        elif case.find("error") is not None:
            counts["errors"] += 1
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    captured = "\n".join(element.text or "" for element in suite.iter("system-err"))
    return {
        "pytest_seconds": round(float(suite.get("time", 0.0)), 1),
        "recovery": recovery(captured),
        **counts,
        "seconds_per_module": {name: round(seconds, 1) for name, seconds in sorted(per_module.items(), key=lambda item: -item[1])},
        "slowest_tests": [[name, round(seconds, 1)] for name, seconds in sorted(tests, key=lambda item: -item[1])[:15]],
    }


def recovery(captured: str) -> dict[str, int]:
    """The 2-node test's measurements in ``captured`` (its printed lines; fields absent when a line is)."""
    found: dict[str, int] = {}
    for pattern, names in RECOVERY_LINES:
        match = pattern.search(captured)
        if match:
            found.update({name: int(value) for name, value in zip(names, match.groups(), strict=True)})
    return found


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        # the report keeps each test's captured stderr: the 2-node test's measurements
        addopts = f"{os.environ.get('PYTEST_ADDOPTS', '')} --junitxml={junit} -o junit_logging=system-err".strip()
        env = {**os.environ, "PYTEST_ADDOPTS": addopts}
        started = time.monotonic()
        setup_seconds = None
        disk_lines = []  # tests/disk_space.py's summary line: the only output the record reads
        process = subprocess.Popen(["bash", ".ci/run"], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if line.startswith("disk: "):
                disk_lines.append(line)
            if setup_seconds is None and line.startswith(SETUP_DONE_MARK):
                setup_seconds = round(time.monotonic() - started, 1)
        returncode = process.wait()
        total = round(time.monotonic() - started, 1)
        record = {
            "benchmark": "ci_run",
            "command": "python3 scripts/record_ci_run.py",
            "exit_status": returncode,
            "seconds": total,
            "setup_seconds": setup_seconds,
            "disk": disk("".join(disk_lines)),
            **(junit_summary(junit) if junit.exists() else {"junit": "pytest wrote no report"}),
        }
    python = REPO_ROOT / ".venv" / "bin" / "python"
    code = (
        "import json, sys, torch; from dfpo.benchmark_record import environment, write_result; "
        "record = json.loads(sys.stdin.read()); record['environment'] = environment(); "
        "print(write_result('ci_run', str(torch.backends.cpu.get_cpu_capability()), record))"
    )
    written = subprocess.run([str(python), "-c", code], cwd=REPO_ROOT, input=json.dumps(record), capture_output=True, text=True)
    if written.returncode != 0:
        print(f"record_ci_run: could not write the record with {python}:\n{written.stderr}\n{json.dumps(record, indent=2)}")
        return returncode or 1
    print(f"record_ci_run: {total:.0f} s in all (set-up {setup_seconds} s); wrote {written.stdout.strip()}")
    return returncode


if __name__ == "__main__":
    sys.exit(main())
