"""Run a function right after a module is imported, once: the CPU backend's lazy activation.

:func:`after_import` calls ``callback(module)`` at once where the module is imported already, and
otherwise right after the module's code has run, at its first import in this process: a one-shot
finder at the front of ``sys.meta_path`` finds the module as the finders behind it do and wraps
the loader's ``exec_module``, and leaves ``sys.meta_path`` once the callback has succeeded. Whoever
imports the module gets it with the callback's work done, before any ``from module import name``
copies a name out of it. A callback that raises makes the import raise, and the finder stays, so
that the next import of the module runs it (and raises) again instead of returning it unpatched.

Standard library only (the backend's layer imports nothing of this repository outside
``cpu_backend``). The same pattern, for one module each: :mod:`dfpo.vllm_fixes.gpt_oss_bf16_loading`
and tests/e2e/weight_sync_skipped.py.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from collections.abc import Callable
from types import ModuleType

Callback = Callable[[ModuleType], None]


class RunAfterImport(importlib.abc.MetaPathFinder):
    """Finds :attr:`name` through the other finders and runs :attr:`callback` right after the module ran."""

    def __init__(self, name: str, callback: Callback) -> None:
        self.name = name
        self.callback = callback
        self._finding = threading.local()  # set while this finder asks the others (no recursion)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {getattr(self.callback, '__qualname__', self.callback)!r})"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or getattr(self._finding, "active", False):
            return None
        self._finding.active = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                find_spec = getattr(finder, "find_spec", None)
                if finder is self or find_spec is None:
                    continue
                spec = find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._finding.active = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_module_then_callback(module):
            exec_module(module)
            self.callback(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)

        spec.loader.exec_module = exec_module_then_callback
        return spec


def pending() -> list[RunAfterImport]:
    """The hooks waiting for their module's import in this process."""
    return [finder for finder in sys.meta_path if isinstance(finder, RunAfterImport)]


def after_import(name: str, callback: Callback) -> None:
    """Run ``callback(module)`` on the module ``name``: now if it is imported, else right after its first import.

    Idempotent for the same ``(name, callback)``: a hook already waiting is not added twice."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
    elif not any(hook.name == name and hook.callback == callback for hook in pending()):
        sys.meta_path.insert(0, RunAfterImport(name, callback))
