"""scripts/record_ci_run.py: what it reads from pytest's JUnit report, and the import timing it records
beside the run (benchmark_record.import_seconds)."""

from __future__ import annotations

import subprocess

import pytest

from tests.script_modules import load_script

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="4" time="123.4">
<testcase classname="tests.e2e.test_quickstart_cpu" name="test_a" time="100.0"/>
<testcase classname="tests.e2e.test_quickstart_cpu" name="test_b" time="3.0"><failure message="x"/></testcase>
<testcase classname="tests.dfpo.test_loss.TestClass" name="test_c" time="2.5"/>
<testcase classname="tests.dfpo.test_loss" name="test_d" time="0.5"><skipped message="y"/></testcase>
</testsuite></testsuites>
"""


def _record():
    return load_script("record_ci_run")


def test_modules_are_named_by_their_file_with_or_without_a_class():
    record = _record()
    assert record.module_of("tests.e2e.test_quickstart_cpu") == "tests/e2e/test_quickstart_cpu.py"
    assert record.module_of("tests.dfpo.test_loss.TestClass") == "tests/dfpo/test_loss.py"


def test_the_junit_report_gives_counts_seconds_per_module_and_the_slowest(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    summary = _record().junit_summary(path)
    assert summary["pytest_seconds"] == 123.4
    assert (summary["passed"], summary["failed"], summary["errors"], summary["skipped"]) == (2, 1, 0, 1)
    assert summary["seconds_per_module"] == {"tests/e2e/test_quickstart_cpu.py": 103.0, "tests/dfpo/test_loss.py": 3.0}
    assert summary["slowest_tests"][0] == ["tests/e2e/test_quickstart_cpu.py::test_a", 100.0]
    assert summary["pytest_seconds_per_part"] == {"junit": 123.4}


def test_the_two_parts_reports_add_up_in_the_order_they_ran(tmp_path):
    """scripts/test.sh's parallel and serial parts each write a report (DFPO_TEST_JUNIT_DIR)."""
    serial = JUNIT.replace('time="123.4"', 'time="200.0"').replace("test_quickstart_cpu", "test_trainer_cpu")
    for name, text in (("serial", serial), ("parallel", JUNIT.replace('time="123.4"', 'time="50.5"'))):
        (tmp_path / f"{name}.xml").write_text(text)
    reports = _record().junit_reports(tmp_path)
    assert [path.stem for path in reports] == ["parallel", "serial"]
    summary = _record().junit_summary(*reports)
    assert (
        summary["pytest_seconds_per_part"] == {"parallel": 50.5, "serial": 200.0} and summary["pytest_seconds"] == 250.5
    )
    assert (summary["passed"], summary["failed"], summary["errors"], summary["skipped"]) == (4, 2, 0, 2)
    assert summary["seconds_per_module"]["tests/e2e/test_trainer_cpu.py"] == 103.0
    assert summary["seconds_per_module"]["tests/dfpo/test_loss.py"] == 6.0


MULTI_NODE_STDERR = """2-node cluster up in 18 s
first run: worker node lost after step 1's checkpoint (9 processes killed); the run ended 17 s later
ray job submit run (resumed on 2 nodes after the node loss), followed: 83 s
"""
SLURM_STDERR = """slurm: SIGTERM after step 2; requeued 12 s later
slurm: the requeued job resumed and finished in 41 s
"""


def test_the_two_node_tests_measurements_are_read_from_its_captured_stderr(tmp_path):
    junit = JUNIT.replace(
        '<testcase classname="tests.dfpo.test_loss" name="test_d" time="0.5">',
        '<testcase classname="tests.e2e.test_multi_node_cpu" name="test_e" '
        f'time="9.0"><system-err>{MULTI_NODE_STDERR}</system-err></testcase>'
        '<testcase classname="tests.e2e.test_slurm_cpu" name="test_f" '
        f'time="9.0"><system-err>{SLURM_STDERR}</system-err></testcase>'
        '<testcase classname="tests.dfpo.test_loss" name="test_d" time="0.5">',
    )
    path = tmp_path / "junit.xml"
    path.write_text(junit)
    assert _record().junit_summary(path)["recovery"] == {
        "cluster_up_s": 18,
        "processes_killed": 9,
        "node_loss_to_exit_s": 17,
        "resumed_job_s": 83,
        "sigterm_after_step": 2,
        "sigterm_to_requeue_s": 12,
        "requeued_job_s": 41,
    }


def test_the_patterns_are_the_lines_the_fault_tests_print():
    """Each pattern matches what the print calls to stderr of tests/e2e/test_multi_node_cpu.py and
    tests/e2e/test_slurm_cpu.py write (their f-strings, wrapped or not, with numbers in place): a
    reworded print would leave the record without it."""
    import ast

    from tests.script_modules import REPO_ROOT

    source = "\n".join(
        (REPO_ROOT / "tests" / "e2e" / name).read_text() for name in ("test_multi_node_cpu.py", "test_slurm_cpu.py")
    )

    def text(node: ast.expr) -> str:  # a (joined) string, each replacement field as 7
        if isinstance(node, ast.Constant):
            return str(node.value)
        assert isinstance(node, ast.JoinedStr), ast.dump(node)
        return "".join(str(part.value) if isinstance(part, ast.Constant) else "7" for part in node.values)

    printed = [
        text(call.args[0])
        for call in ast.walk(ast.parse(source))
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "print"
        and any(k.arg == "file" and ast.unparse(k.value) == "sys.stderr" for k in call.keywords)
    ]
    assert len(printed) >= 5, printed
    for pattern, _ in _record().RECOVERY_LINES:
        assert any(pattern.search(line) for line in printed), (pattern.pattern, printed)
    assert _record().recovery("nothing measured") == {}


def test_the_disk_line_is_read_as_the_disk_plugin_writes_it(tmp_path):
    """The record's ``disk`` from the line tests/disk_space.py ends a session with (a reworded
    summary would leave the record without it)."""
    from tests.disk_space import GB, DiskWatch

    watch = DiskWatch(
        tmp_path,
        start=int(60.0 * GB),
        lowest=int(57.5 * GB),
        lowest_at="the teardown of tests/e2e/test_x.py::test_y[a-(b)]",
    )
    line = watch.summary()
    end = round(watch.free() / GB, 1)
    assert _record().disk(f"...\n{line}\n2 passed in 3.0s\n") == {
        "free_start_gb": 60.0,
        "free_lowest_gb": 57.5,
        "lowest_at": "the teardown of tests/e2e/test_x.py::test_y[a-(b)]",
        "free_end_gb": end,
        "used_peak_gb": 2.5,
    }
    assert _record().disk("2 passed in 3.0s\n") == {}


def test_the_disk_over_both_parts_is_their_first_start_lowest_last_end_and_largest_use(tmp_path):
    from tests.disk_space import GB, DiskWatch

    first = DiskWatch(
        tmp_path, start=int(60.0 * GB), lowest=int(59.0 * GB), lowest_at="the call of tests/a.py::test_a"
    ).summary()
    second = DiskWatch(
        tmp_path, start=int(59.5 * GB), lowest=int(57.5 * GB), lowest_at="the teardown of tests/b.py::test_b"
    ).summary()
    disk = _record().disk(f"{first}\n1 passed\n{second}\n1 passed\n")
    assert (disk["free_start_gb"], disk["free_lowest_gb"], disk["used_peak_gb"]) == (60.0, 57.5, 2.0)
    assert disk["lowest_at"] == "the teardown of tests/b.py::test_b"


def test_the_suites_disk_floor_covers_what_every_recorded_ci_run_used():
    """tests/disk_space.py refuses to start below MIN_FREE_GB: every recorded CI run must have used
    less (its ``disk``; runs recorded before the plugin have none), or the floor no longer
    protects a CI run."""
    import json

    from tests.disk_space import MIN_FREE_GB
    from tests.e2e.recipe_runs import REPO_ROOT

    for path in sorted((REPO_ROOT / "benchmarks" / "results").glob("ci_run-*.json")):
        used = json.loads(path.read_text()).get("disk", {}).get("used_peak_gb")
        assert used is None or used < MIN_FREE_GB, (path.name, used, MIN_FREE_GB)


def test_the_import_time_runs_the_imports_in_new_processes_without_writing_bytecode(tmp_path, monkeypatch):
    from tests.script_modules import load_script

    import_seconds = load_script("benchmark_record").import_seconds

    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)  # set on some machines: the function must set it
    calls = tmp_path / "calls"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "$* PYTHONDONTWRITEBYTECODE=$PYTHONDONTWRITEBYTECODE" >> {calls}\n')
    python.chmod(0o755)
    assert import_seconds(python, repeats=3) >= 0.0
    assert calls.read_text().splitlines() == ["-c import verl, vllm PYTHONDONTWRITEBYTECODE=1"] * 3
    python.write_text("#!/bin/sh\nexit 1\n")
    with pytest.raises(subprocess.CalledProcessError):
        import_seconds(python)
