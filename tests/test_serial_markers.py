"""scripts/test.sh runs the suite in two parts: the tests not marked ``serial`` on parallel workers,
then the ``serial`` ones one at a time. A test that trains through verl's trainer (Ray, its workers,
vLLM engines and the update on both cores; up to 17 GB for the quickstart) beside other tests would
slow both and could run the machine out of memory, and a test that times a limit would measure the
other tests' load. So each is ``serial``: the end-to-end modules (tests/e2e) by their
``pytestmark``, every test reading the GPU smoke's CPU run by tests/conftest.py's rule on its
fixture, the timed tests by their own mark. A launch that stops before training (the GPU smoke's
GPU-mode launch, which ends where CUDA is first needed; dfpo.main's preflight) shares the machine."""

from __future__ import annotations

import importlib
import subprocess
import sys

from tests.e2e.recipe_runs import REPO_ROOT

# train through verl's trainer or time a limit outside tests/e2e, marked by hand or by fixture
SERIAL_ELSEWHERE = (
    "tests/recipes/test_gpu_smoke.py::test_gpu_smoke_cpu_mode_runs_every_stage_for_real",
    "tests/reward/test_reward_load.py::test_code_verdicts_do_not_depend_on_load",
    "tests/cpu/test_cpu_precision.py::test_the_probes_verdict_predicts_which_dtype_trains_faster_here",
)


def _collected(*args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_every_end_to_end_module_is_serial():
    for path in sorted((REPO_ROOT / "tests" / "e2e").glob("test_*.py")):
        module = importlib.import_module(".".join(path.relative_to(REPO_ROOT).with_suffix("").parts))
        marks = getattr(module, "pytestmark", [])
        names = {mark.name for mark in (marks if isinstance(marks, list) else [marks])}
        assert "serial" in names, (
            f"{path.name} launches verl's trainer: add pytest.mark.serial to its pytestmark (scripts/test.sh)"
        )


def test_the_tests_that_launch_or_time_elsewhere_are_serial_and_the_rest_of_their_modules_not():
    modules = sorted({test.split("::")[0] for test in SERIAL_ELSEWHERE})
    serial = _collected("-m", "serial", *modules)
    for test in SERIAL_ELSEWHERE:
        assert test in serial, (test, serial)
    # the smoke's stand-in tests and its GPU-mode launch (no training) run in the parallel part
    parallel = _collected("-m", "not serial", "tests/recipes/test_gpu_smoke.py")
    for test in (
        "test_gpu_smoke_needs_a_model",
        "test_gpu_smoke_gpu_mode_training_launch_runs_for_real_until_cuda_is_needed",
    ):
        assert f"tests/recipes/test_gpu_smoke.py::{test}" in parallel, parallel
