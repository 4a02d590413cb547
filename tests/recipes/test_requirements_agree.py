"""The CPU test stack (requirements-cpu.txt) runs the versions the GPU stack (requirements.txt)
runs, so a test that inspects library code inspects the code the GPU runs execute.

Every package pinned in both files has the same version, and both agree with what verl 0.9.1's
``vllm`` extra pins (read from the installed verl's metadata), except where no CPU build of the
GPU version exists on the package registry this project installs from (listed below, with why).
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

from packaging.requirements import Requirement

REPO_ROOT = Path(__file__).resolve().parents[2]

# package -> why the CPU stack pins another version than the GPU stack
NO_CPU_BUILD = {
    "torch": "PyPI's torch 2.11.0 for Linux is the CUDA 13 build (multi-GB, nvidia-* wheels); "
    "the CPU stack uses the CPU wheel torch 2.13.0",
}


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


def test_shared_packages_have_the_same_version_in_both_stacks():
    gpu, cpu = pins(REPO_ROOT / "requirements.txt"), pins(REPO_ROOT / "requirements-cpu.txt")
    shared = sorted(gpu.keys() & cpu.keys())
    assert "transformers" in shared and "verl" in shared
    differ = {name: (gpu[name], cpu[name]) for name in shared if gpu[name] != cpu[name] and name not in NO_CPU_BUILD}
    assert not differ, f"GPU vs CPU versions differ (pin the CPU stack to the GPU stack's): {differ}"


def test_both_stacks_follow_verls_gpu_pins():
    verl_pins = verl_extra_pins("vllm")
    assert verl_pins["transformers"] and verl_pins["vllm"]
    for path in (REPO_ROOT / "requirements.txt", REPO_ROOT / "requirements-cpu.txt"):
        mine = pins(path)
        for name, version in verl_pins.items():
            if name in mine and not (path.name == "requirements-cpu.txt" and name in NO_CPU_BUILD):
                assert mine[name] == version, f"{path.name} pins {name}=={mine[name]}; verl[vllm]==0.9.1 pins {version}"


def test_the_tests_run_the_pinned_transformers():
    assert importlib.metadata.version("transformers") == pins(REPO_ROOT / "requirements-cpu.txt")["transformers"]


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
        assert ours.get(name) == version, f"the GPU install pins {name}=={ours.get(name)}; verl[fsdp]==0.9.1 pins {version}"
    for text in importlib.metadata.requires("verl") or []:
        requirement = Requirement(text)
        if requirement.marker is not None and requirement.marker.evaluate({"extra": "fsdp"}) and not requirement.name.startswith("verl"):
            assert _name(requirement.name) in ours, f"verl[fsdp] needs {requirement}; requirements.txt does not install it"
            assert requirement.specifier.contains(ours[_name(requirement.name)]), (requirement, ours[_name(requirement.name)])
    assert "flash-attn" not in pins(REPO_ROOT / "requirements.txt"), "flash-attn builds only without build isolation"
    assert pins(REPO_ROOT / "requirements.txt")["kernels"].startswith("0.12."), "transformers 5.9.0 wants kernels>=0.12,<0.13"
