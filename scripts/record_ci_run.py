"""Record one whole CI run: ``python3 scripts/record_ci_run.py`` in a fresh clone.

Runs ``bash .ci/run`` (the README's test command: set-up of ``.venv`` on a fresh machine, then the
whole suite) as CI does, with pytest also writing a JUnit report, and writes
``benchmarks/results/ci_run-<UTC time>-<cpu capability>.json``: the wall time of the whole run and
of its set-up, pytest's counts (passed, failed, skipped), the seconds of each test module (set-up
of module fixtures included: that is where the e2e runs are), the slowest tests, the machine, the
commit and the stack's versions. BENCHMARKS.md quotes the newest through ``scripts/results_tables.py``.

Run it where nothing else runs (a quiet machine: the figure is CI's budget) and from a fresh clone
(``git clone <repo> /tmp/ci && cd /tmp/ci && python3 scripts/record_ci_run.py``), then copy the
file into the repository's ``benchmarks/results/``. It starts with the system Python (``.venv``
does not exist yet on a fresh clone) and reads the versions with ``.venv``'s at the end. Exits
with the run's exit status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SETUP_DONE_MARK = "[setup] .venv ready"


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
    return {
        "pytest_seconds": round(float(suite.get("time", 0.0)), 1),
        **counts,
        "seconds_per_module": {name: round(seconds, 1) for name, seconds in sorted(per_module.items(), key=lambda item: -item[1])},
        "slowest_tests": [[name, round(seconds, 1)] for name, seconds in sorted(tests, key=lambda item: -item[1])[:15]],
    }


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        env = {**os.environ, "PYTEST_ADDOPTS": f"{os.environ.get('PYTEST_ADDOPTS', '')} --junitxml={junit}".strip()}
        started = time.monotonic()
        setup_seconds = None
        process = subprocess.Popen(["bash", ".ci/run"], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
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
