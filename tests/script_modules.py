"""Import a script of ``scripts/`` (not a package) as a module, for the tests of its functions."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from dfpo.benchmark_record import REPO_ROOT


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module (executed fresh, its ``main`` not called)."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
