"""Inductor's vector-ISA checks once per machine (:mod:`cpu_backend.inductor_isa`).

The memo must give every process the verdict inductor's own check gives (same ISA picked, same
AVX512-BF16 answer), run the check only where no verdict with the same inputs is on disk, and
never serve a verdict across a change of what the check depends on. That vLLM's processes of a
CPU run install it (and only they): tests/cpu/test_vllm_cpu.py's probes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from cpu_backend import inductor_isa

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FakeIsa:
    def __init__(self, flags: str):
        self._arch_flags = flags

    def __str__(self) -> str:
        return "fake"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    return tmp_path / inductor_isa.VERDICTS


def test_the_check_runs_once_per_inputs_and_its_verdict_is_reused(cache):
    calls = []

    def check_build(isa, code):
        calls.append((isa._arch_flags, code))
        return isa._arch_flags != "-mbroken"

    memo = inductor_isa.memoized_check_build(check_build)
    assert memo(FakeIsa("-mavx2"), "int main(){}") is True
    assert memo(FakeIsa("-mavx2"), "int main(){}") is True  # from disk
    assert memo(FakeIsa("-mbroken"), "int main(){}") is False
    assert memo(FakeIsa("-mbroken"), "int main(){}") is False  # a failed check is remembered as failed
    assert memo(FakeIsa("-mavx2"), "other code") is True  # another test program: another key
    assert calls == [("-mavx2", "int main(){}"), ("-mbroken", "int main(){}"), ("-mavx2", "other code")]
    assert len(list(cache.glob("*.json"))) == 3 and not list(cache.glob("*.tmp"))


def test_a_changed_compiler_or_torch_is_a_new_key(cache, monkeypatch):
    isa = FakeIsa("-mavx2")
    key = inductor_isa.verdict_key(isa, "code")
    monkeypatch.setattr(inductor_isa, "_compiler_identity", lambda: "g++|/usr/bin/g++-99|1|2")
    assert inductor_isa.verdict_key(isa, "code") != key
    monkeypatch.undo()
    monkeypatch.setattr("torch.__version__", "0.0.0")
    assert inductor_isa.verdict_key(isa, "code") != key


def test_an_unreadable_verdict_is_checked_again(cache):
    calls = []
    memo = inductor_isa.memoized_check_build(lambda isa, code: calls.append(code) or True)
    isa = FakeIsa("-mavx2")
    cache.mkdir(parents=True)
    (cache / f"{inductor_isa.verdict_key(isa, 'code')}.json").write_text("{not json")
    assert memo(isa, "code") is True and calls == ["code"]
    assert json.loads((cache / f"{inductor_isa.verdict_key(isa, 'code')}.json").read_text())["ok"] is True


# In a fresh interpreter: the ISA inductor picks (and its BF16 answer), and how many test programs
# it loaded in a subprocess to get there (VecISA.check_build's `python -c "import torch; ..."`).
# Inductor's own cache directory (its test builds warm), the verdicts in a folder of the test's own.
PICK = textwrap.dedent(
    """
    import json, subprocess, sys
    loads = []
    real = subprocess.check_call
    def counting(args, *a, **k):
        if args[:2] == [sys.executable, "-c"] and "LoadLibrary" in args[2]:
            loads.append(1)
        return real(args, *a, **k)
    subprocess.check_call = counting
    from cpu_backend import inductor_isa
    inductor_isa.VERDICTS = sys.argv[1]
    inductor_isa.install()
    from torch._inductor import cpu_vec_isa
    isa = cpu_vec_isa.pick_vec_isa()
    bf16 = bool(getattr(isa, "is_avx512_bf16_supported", lambda: False)())
    print(json.dumps({"isa": str(isa), "bf16": bf16, "loads": len(loads)}))
    """
)


@pytest.fixture
def verdicts():
    """A verdict folder of this test's own in inductor's cache directory, removed afterwards."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    name = f"{inductor_isa.VERDICTS}-test-{os.getpid()}"
    yield name
    shutil.rmtree(os.path.join(cache_dir(), name), ignore_errors=True)


def _pick(verdicts: str) -> dict:
    env = {**os.environ, "PYTHONPATH": REPO_ROOT}
    env.pop("TORCHINDUCTOR_VEC_ISA_OK", None)
    done = subprocess.run(
        [sys.executable, "-c", PICK, verdicts], env=env, capture_output=True, text=True, check=True, cwd=REPO_ROOT
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_second_process_picks_the_same_isa_without_loading_a_test_program(verdicts):
    first = _pick(verdicts)  # no verdict yet: inductor's own checks, recorded
    second = _pick(verdicts)
    assert first["loads"] >= 1, first  # inductor loads a test program per ISA it checks
    assert second["loads"] == 0, second  # fails where the memo is not installed
    assert (second["isa"], second["bf16"]) == (first["isa"], first["bf16"])
