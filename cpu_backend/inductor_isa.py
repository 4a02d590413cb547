"""torch.compile's vector-ISA checks on CPU, once per machine instead of once per process.

Before inductor compiles its first kernel on a CPU, it picks the widest vector ISA that works
here (``torch._inductor.cpu_vec_isa.pick_vec_isa``): for every ISA the CPU's flags list (AVX512
with VNNI, AVX512, AVX512-BF16, AVX2 ...) ``VecISA.check_build`` builds a test library with the
C++ compiler (kept in inductor's cache directory) and then loads it in a fresh interpreter,
``python -c "import torch; cdll.LoadLibrary(...)"``. The build is cached on disk; the load is not,
and the verdict is cached only in the process (``functools.cache``). So every process that compiles
pays one ``import torch`` per check: vLLM's CPU worker compiles its random sampling at every engine
start (vLLM's own workaround for PyTorch's CPU ``exponential_``), so each engine start paid six
checks on an AVX512 machine with BF16 and VNNI (most of its warm-up there), one where the CPU lists
AVX2 only.

:func:`install` memoizes ``check_build`` on disk: the first process on a machine runs inductor's
check as it is and records its verdict; later processes with the same inputs read it. The inputs
are everything the check depends on: the test code, the ISA's compiler flags, the compiler (its
path, size and modification time), torch's version and the interpreter; a change to any of them is
a new key, so the check runs again. The verdicts live in inductor's own cache directory
(``TORCHINDUCTOR_CACHE_DIR``, else ``/tmp/torchinductor_<user>``), which is local to the machine:
each node of a cluster checks for itself. ``TORCHINDUCTOR_VEC_ISA_OK`` (inductor's own switch to
skip the checks) still wins, since inductor then never calls ``check_build``.

Installed by the vLLM general plugin (:func:`cpu_backend.vllm_cpu.register`) in every vLLM process
of a CPU run, right after ``torch._inductor.cpu_vec_isa`` is imported (``cpu_backend.import_hooks``):
a process that never compiles never imports it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

MODULE = "torch._inductor.cpu_vec_isa"
VERDICTS = "dfpo_vec_isa_verdicts"  # the folder in inductor's cache directory


def _compiler_identity() -> str:
    from torch._inductor.cpp_builder import get_cpp_compiler

    compiler = get_cpp_compiler()
    path = shutil.which(compiler) or compiler
    try:
        real = os.path.realpath(path)
        stat = os.stat(real)
        return f"{compiler}|{real}|{stat.st_size}|{stat.st_mtime_ns}"
    except OSError:
        return f"{compiler}|missing"


def verdict_key(isa, code: str) -> str:
    """The key of one ``check_build(code)`` of ``isa``: everything its result depends on."""
    import torch

    parts = [type(isa).__name__, isa._arch_flags, code, _compiler_identity(), torch.__version__, sys.executable]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def verdict_dir() -> Path:
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir()) / VERDICTS


def memoized_check_build(check_build):
    """``VecISA.check_build`` with its verdict kept on disk under :func:`verdict_key`."""

    def check_build_once_per_machine(self, code: str) -> bool:
        path = verdict_dir() / f"{verdict_key(self, code)}.json"
        try:
            return bool(json.loads(path.read_text())["ok"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        ok = bool(check_build(self, code))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps({"ok": ok, "isa": str(self), "flags": self._arch_flags}))
            partial.replace(path)  # atomic: a reader sees the whole verdict or none
        except OSError:
            pass  # a read-only cache: the next process checks again, as inductor would
        return ok

    check_build_once_per_machine.__wrapped__ = check_build
    check_build_once_per_machine.__dfpo_memoized__ = True
    return check_build_once_per_machine


def _memoize(module: ModuleType) -> None:
    vec_isa = getattr(module, "VecISA", None)
    check_build = getattr(vec_isa, "check_build", None)
    if check_build is None or getattr(check_build, "__dfpo_memoized__", False):
        return  # another torch: inductor checks as it always does
    vec_isa.check_build = memoized_check_build(check_build)


def install() -> None:
    """Memoize inductor's ISA check in this process, now or when ``torch._inductor.cpu_vec_isa`` is imported."""
    from cpu_backend.import_hooks import after_import

    after_import(MODULE, _memoize)
