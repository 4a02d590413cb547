"""Import a script of ``scripts/`` (not a package) as a module, for the tests of its functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = REPO_ROOT / "scripts"


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module (executed fresh, its ``main`` not called)."""
    if (
        str(SCRIPTS) not in sys.path
    ):  # the scripts import their shared module (benchmark_record) as `python scripts/x.py` does
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
