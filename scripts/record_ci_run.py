"""Record one whole CI run: ``python3 scripts/record_ci_run.py`` in a fresh clone.

Runs ``bash .ci/run`` (the README's test command: set-up of ``.venv`` on a fresh machine, then the
whole suite in its two parts, parallel and serial) as CI does, with each part also writing a JUnit
report (``DFPO_TEST_JUNIT_DIR``, read by scripts/test.sh), and writes
``benchmarks/results/ci_run-<UTC time>-<cpu capability>.json``: the wall time of the whole run and
of its set-up, pytest's counts (passed, failed, skipped), the seconds of each test module (set-up
of module fixtures included: that is where the e2e runs are; in the parallel part a module's
seconds are its worker's), the wall time of each part (``pytest_seconds_per_part``), the slowest
tests, what the 2-node test measured of a lost node and a preemption (the lines it prints, read from
the report's captured stderr: ``recovery``), the sessions' disk (the summary lines of
``tests/disk_space.py``, one per part: ``disk``), the seconds ``import verl, vllm`` then takes in
``.venv`` (``import_verl_vllm_s``: how fast this machine runs the launches' chains of imports, so
that runs on machines of one kind that differ in speed can be told apart),
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
# what tests/e2e/test_multi_node_cpu.py (its cluster, the lost node, the resumed Ray job) and
# tests/e2e/test_slurm_cpu.py (the preemption through SLURM: SIGTERM, requeue, resume) print to stderr:
# each pattern's groups become the named fields of the record's ``recovery``
RECOVERY_LINES = (
    (re.compile(r"2-node cluster up in (\d+) s"), ("cluster_up_s",)),
    (
        re.compile(
            r"first run: worker node lost after step 1's checkpoint \((\d+) processes killed\); the run ended (\d+) s "
            r"later"
        ),
        ("processes_killed", "node_loss_to_exit_s"),
    ),
    (
        re.compile(r"ray job submit run \(resumed on 2 nodes after the node loss\), followed: (\d+) s"),
        ("resumed_job_s",),
    ),
    (
        re.compile(r"slurm: SIGTERM after step (\d+); requeued (\d+) s later"),
        ("sigterm_after_step", "sigterm_to_requeue_s"),
    ),
    (
        re.compile(r"slurm: the requeued job resumed and finished in (\d+) s"),
        ("requeued_job_s",),
    ),
)
IMPORT_REPEATS = 3  # `import verl, vllm` timed after the run, in .venv's Python (the record's import_verl_vllm_s)
# the last line of tests/disk_space.py's terminal summary
DISK_LINE = re.compile(
    r"disk: ([\d.]+) GB free under \S+ at the start, ([\d.]+) GB at the lowest \(at (.+)\), ([\d.]+) GB at the end: "
    r"the session used up to ([\d.]+) GB"
)


def disk(output: str) -> dict:
    """The disk over the sessions whose summary lines ``output`` holds, in order: free at the first
    one's start, at the lowest of any (and where), at the last one's end, and the most any session
    used (empty if the run printed none)."""
    sessions = [
        {
            "free_start_gb": float(start),
            "free_lowest_gb": float(lowest),
            "lowest_at": where,
            "free_end_gb": float(end),
            "used_peak_gb": float(used),
        }
        for start, lowest, where, end, used in DISK_LINE.findall(output)
    ]
    if not sessions:
        return {}
    lowest = min(sessions, key=lambda session: session["free_lowest_gb"])
    return {
        "free_start_gb": sessions[0]["free_start_gb"],
        "free_lowest_gb": lowest["free_lowest_gb"],
        "lowest_at": lowest["lowest_at"],
        "free_end_gb": sessions[-1]["free_end_gb"],
        "used_peak_gb": max(session["used_peak_gb"] for session in sessions),
    }


def module_of(classname: str) -> str:
    """JUnit's ``tests.e2e.test_x`` (or ``tests.e2e.test_x.TestClass``) -> ``tests/e2e/test_x.py``."""
    parts = classname.split(".")
    while parts and not parts[-1].startswith("test_"):
        parts.pop()
    return "/".join(parts) + ".py" if parts else classname


def junit_summary(*paths: Path) -> dict:
    """Counts, seconds per module and the slowest tests over pytest JUnit reports (one per part of
    the run, in order), and each report's wall time."""
    suites = []
    for path in paths:
        root = ET.parse(path).getroot()
        suites.append(root if root.tag == "testsuite" else root.find("testsuite"))
    per_module: dict[str, float] = defaultdict(float)
    tests = []
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    for case in (case for suite in suites for case in suite.iter("testcase")):
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
    captured = "\n".join(element.text or "" for suite in suites for element in suite.iter("system-err"))
    part_seconds = {
        path.stem: round(float(suite.get("time", 0.0)), 1) for path, suite in zip(paths, suites, strict=True)
    }
    return {
        "pytest_seconds": round(sum(part_seconds.values()), 1),
        "pytest_seconds_per_part": part_seconds,
        "recovery": recovery(captured),
        **counts,
        "seconds_per_module": {
            name: round(seconds, 1) for name, seconds in sorted(per_module.items(), key=lambda item: -item[1])
        },
        "slowest_tests": [[name, round(seconds, 1)] for name, seconds in sorted(tests, key=lambda item: -item[1])[:15]],
    }


def junit_reports(directory: Path) -> list[Path]:
    """scripts/test.sh's reports in the order its parts run (parallel, then serial; one ``pytest``
    report when it ran a single part)."""
    order = {"parallel": 0, "serial": 1, "pytest": 2}
    return sorted(directory.glob("*.xml"), key=lambda path: (order.get(path.stem, len(order)), path.name))


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
        # the reports keep each test's captured stderr: the 2-node test's measurements
        addopts = f"{os.environ.get('PYTEST_ADDOPTS', '')} -o junit_logging=system-err".strip()
        env = {**os.environ, "PYTEST_ADDOPTS": addopts, "DFPO_TEST_JUNIT_DIR": tmp}
        started = time.monotonic()
        setup_seconds = None
        disk_lines = []  # tests/disk_space.py's summary line: the only output the record reads
        process = subprocess.Popen(
            ["bash", ".ci/run"], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
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
            **(
                junit_summary(*reports)
                if (reports := junit_reports(Path(tmp)))
                else {"junit": "pytest wrote no report"}
            ),
        }
    python = REPO_ROOT / ".venv" / "bin" / "python"
    # the machine's own speed beside the run's: machines of one kind differ in speed from one run
    # to the next (docs/cpu.md's CI records), which a launch's chain of imports shows first
    # (benchmark_record.import_seconds)
    code = (
        "import json, sys, torch; sys.path.insert(0, 'scripts'); from benchmark_record import environment, "
        "import_seconds, write_result; "
        "record = json.loads(sys.stdin.read()); record['environment'] = environment(); "
        f"record['import_verl_vllm_s'] = import_seconds(sys.executable, repeats={IMPORT_REPEATS}); "
        "print(write_result('ci_run', str(torch.backends.cpu.get_cpu_capability()), record))"
    )
    written = subprocess.run(
        [str(python), "-c", code], cwd=REPO_ROOT, input=json.dumps(record), capture_output=True, text=True
    )
    if written.returncode != 0:
        print(
            "record_ci_run: could not write the record with "
            f"{python}:\n{written.stderr}\n{json.dumps(record, indent=2)}"
        )
        return returncode or 1
    print(f"record_ci_run: {total:.0f} s in all (set-up {setup_seconds} s); wrote {written.stdout.strip()}")
    return returncode


if __name__ == "__main__":
    sys.exit(main())
