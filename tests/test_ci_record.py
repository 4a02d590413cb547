"""scripts/record_ci_run.py: what it reads from pytest's JUnit report."""

from __future__ import annotations

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
