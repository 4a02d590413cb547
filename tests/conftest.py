"""Runs that several test modules read, launched once per test session.

Each launch of verl's trainer costs minutes on 2 cores, so a run whose output two modules check is
shared rather than repeated (docs/cpu.md, "Where CI's time goes").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.recipe_runs import RecipeRun, run_command

pytest_plugins = ["tests.disk_space"]  # the session's free disk: checked at the start, reported at the end

# The whole CPU mode with its training stage on 2 ranks: about 11 minutes on the slowest 2-core machine
# measured (AVX2 only); far beyond that something hangs.
CPU_SMOKE_TIMEOUT_S = 1500
CPU_SMOKE_RANKS = 2


def pytest_configure(config: pytest.Config) -> None:
    """On a pytest-xdist worker (the suite's parallel part: one worker per core), torch computes on
    one thread in the test process: two workers of two threads each on 2 cores oversubscribe them,
    and small ops then wait on each other's spinning threads (a tiny model's forward in
    tests/integration/test_dfpo_exact_update.py ran about 10 times slower). Subprocesses the tests
    start are not affected; the serial part keeps torch's default."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


@pytest.fixture(scope="module")
def single_torch_thread():
    """One intra-op thread for a module's in-process torch work, the count restored afterwards: tiny
    models' ops are microseconds, and threads contending for 2 cores make them many times slower
    (``pytest.mark.usefixtures("single_torch_thread")``; also where a module runs alone)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that reads the smoke's CPU run below is ``serial`` (scripts/test.sh runs those one at
    a time): its launch of verl's trainer needs the machine to itself. Before ``-m`` selects."""
    for item in items:
        if "cpu_smoke_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.serial)


@dataclass
class CpuSmokeRun:
    """``bash scripts/gpu_smoke.sh --cpu`` on ``ranks`` CPU ranks: its output and ``OUTPUT_ROOT``."""

    run: RecipeRun
    output_root: Path
    ranks: int
    project: str = "dfpo_gpu_smoke"
    experiment: str = "dfpo"  # the 2-step training stage (the bypass stage's is "dfpo-bypass")
    steps: int = 2


@pytest.fixture(scope="session")
def cpu_smoke_run(tmp_path_factory) -> CpuSmokeRun:
    """The GPU smoke's every stage on CPU (doctor, data and tiny model, DFPO 2 steps through verl's vLLM
    rollout on 2 ranks as the tiny recipe runs by default, 1 bypass-mode step on one rank, merge,
    vLLM evaluation). Read by tests/recipes/test_gpu_smoke.py (the script's stages) and by
    tests/e2e/test_trainer_cpu.py (the training stage's log, validation and checkpoints)."""
    output_root = tmp_path_factory.mktemp("cpu_smoke") / "smoke"
    run = run_command(
        ["bash", "scripts/gpu_smoke.sh", "--cpu"],
        {"OUTPUT_ROOT": str(output_root), "PYTHON": sys.executable, "GPUS_PER_NODE": str(CPU_SMOKE_RANKS)},
        timeout_s=CPU_SMOKE_TIMEOUT_S,
    )
    print(f"bash scripts/gpu_smoke.sh --cpu on {CPU_SMOKE_RANKS} ranks: {run.seconds:.0f} s")
    return CpuSmokeRun(run, output_root, CPU_SMOKE_RANKS)


@pytest.fixture(scope="session")
def tiny_example(tmp_path_factory):
    """``tiny_example(output_root)``: ``output_root`` with the tiny recipes' model and data in it,
    built once per session (``python -m cpu_examples.prepare --model tiny``, about 10 s on 2 cores)
    and copied, so that the end-to-end runs' launches find them current instead of each building
    its own. The GPU smoke's CPU run builds its own: that stage is part of what it tests."""
    from cpu_examples.prepare import data_dir, model_dir

    built = tmp_path_factory.mktemp("tiny_example")
    subprocess.run(
        [sys.executable, "-m", "cpu_examples.prepare", "--model", "tiny", "--output-root", str(built)],
        check=True,
        stdout=subprocess.DEVNULL,
    )

    def into(output_root: Path) -> Path:
        for folder in (data_dir, model_dir):
            shutil.copytree(folder(built), folder(output_root))
        return output_root

    return into
