"""The repository's code style: ``ruff check`` (pycodestyle, pyflakes, import order, pyupgrade,
bugbear) and ``ruff format --check`` pass over the whole repository with the configuration in
pyproject.toml (``[tool.ruff]``), run by the ruff pinned in requirements-cpu.txt from this
interpreter's environment. A mutant (a small file that breaks both, checked with the repository's
configuration) shows the check can fail, and that it reads the repository's rules and line length.

To fix a failure here: ``ruff format .`` then ``ruff check .`` (``--fix`` applies the safe fixes).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG = REPO_ROOT / "pyproject.toml"
INSTALL_HINT = "pip install -r requirements-cpu.txt"


def _ruff_command() -> list[str]:
    """``python -m ruff`` of this interpreter, or the ruff installed beside it."""
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    beside = Path(sys.executable).parent / "ruff"
    if beside.exists():
        return [str(beside)]
    pytest.fail(f"ruff is not installed in the test environment ({sys.executable}): {INSTALL_HINT}")


def _ruff(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    # --no-cache: parallel test workers and a developer's own ruff runs share no cache files
    return subprocess.run([*_ruff_command(), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def _pinned_version() -> str:
    match = re.search(r"^ruff==(\S+)", (REPO_ROOT / "requirements-cpu.txt").read_text(), re.M)
    assert match, "requirements-cpu.txt pins no ruff version (ruff==X.Y.Z)"
    return match.group(1)


def test_ruff_is_the_pinned_version():
    """Another ruff version formats and lints differently: the repository is kept with the pinned one."""
    done = _ruff("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ruff", _pinned_version()], f"{done.stdout.strip()}; {INSTALL_HINT}"


def test_ruff_check_passes_over_the_repository():
    done = _ruff("check", "--no-cache", "--output-format", "concise", ".")
    assert done.returncode == 0, (
        f"ruff check . found problems (fix them, or run `ruff check --fix .` for the safe fixes):\n"
        f"{done.stdout[-6000:]}{done.stderr[-2000:]}"
    )


def test_ruff_format_check_passes_over_the_repository():
    done = _ruff("format", "--check", "--no-cache", ".")
    assert done.returncode == 0, f"run `ruff format .`:\n{done.stdout[-6000:]}{done.stderr[-2000:]}"


def test_the_check_covers_every_tracked_python_file():
    """No exclusion in the configuration hides part of the repository from the two checks above."""
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout: no list of tracked files to compare with")
    tracked = subprocess.run(
        ["git", "ls-files", "--", "*.py"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    done = _ruff("check", "--no-cache", "--show-files", ".")
    assert done.returncode == 0, done.stderr
    shown = {str(Path(line).resolve().relative_to(REPO_ROOT)) for line in done.stdout.split() if line.endswith(".py")}
    missing = [path for path in tracked if path not in shown and (REPO_ROOT / path).exists()]
    assert tracked and not missing, f"tracked Python files ruff does not check: {missing[:20]}"


# 100 characters: within the repository's line length (120), beyond ruff's default (88)
WITHIN_LIMIT = "VALUE = " + repr("x" * 90)
# 130 characters: beyond the repository's line length
BEYOND_LIMIT = "VALUE_TOO = " + repr("y" * 116)

MUTANT = f"""import os,sys
def pairs( a,b ):
    return list(zip(a,b))
{WITHIN_LIMIT}
{BEYOND_LIMIT}
"""


def test_a_badly_linted_and_formatted_file_is_reported_with_the_repository_config(tmp_path):
    assert len(WITHIN_LIMIT) == 100 and len(BEYOND_LIMIT) == 130
    mutant = tmp_path / "mutant.py"
    mutant.write_text(MUTANT)

    checked = _ruff("check", "--no-cache", "--output-format", "concise", "--config", str(CONFIG), str(mutant))
    assert checked.returncode == 1, checked.stdout + checked.stderr
    found = {(int(line), code) for line, code in re.findall(r"mutant\.py:(\d+):\d+: ([A-Z]+\d+)", checked.stdout)}
    codes = {code for _, code in found}
    # pyflakes (unused import), pycodestyle (two imports on a line), import order, and bugbear's
    # zip without strict: bugbear is not among ruff's default rules, so the repository's selection applies
    assert {"F401", "E401", "I001", "B905"} <= codes, checked.stdout
    # the repository's line length, not ruff's default: line 5 is too long, line 4 is not
    assert (5, "E501") in found and (4, "E501") not in found, checked.stdout

    formatted = _ruff("format", "--check", "--no-cache", "--config", str(CONFIG), str(mutant))
    assert formatted.returncode == 1, formatted.stdout + formatted.stderr
    assert "mutant.py" in formatted.stdout, formatted.stdout
