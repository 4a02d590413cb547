"""Benchmark: the CPU stack's set-up (``scripts/install_env.sh``) with uv (the default) and with pip.

    python scripts/bench_setup.py                       # 1 round: each installer once
    python scripts/bench_setup.py --rounds 2 --work-dir /tmp/setup_bench

Each run installs the whole pinned stack into a new ``.venv`` of a fresh copy of the project (its
tracked files as they are in the working tree), as on a fresh machine: the installer's download
cache is a new empty directory (``PIP_CACHE_DIR``, ``UV_CACHE_DIR``), and ``DFPO_INSTALLER`` picks
the installer. The installers alternate within a round. Each copy is deleted after its run
(about 7 GB each).

Records, per run: the seconds ``bash scripts/install_env.sh`` took, the size of the ``.venv``, every
distribution it holds (name and version), and the seconds ``import verl, vllm`` then takes in the
new venv with ``PYTHONDONTWRITEBYTECODE=1`` (the mean of 2; what every process of a run pays, and
twice as much where the install wrote no ``.pyc`` files). The comparison lists the distributions whose
versions differ between the installers, the installers themselves (pip, uv) left out: the set-up
must install the same stack whichever runs it. The summary gives each installer's mean and the
ratio uv / pip. Writes ``benchmarks/results/setup-<UTC time>-<cpu capability>.json`` with the
machine, date, commit and versions; docs/install.md quotes it through ``scripts/results_tables.py``.
Downloads are part of what is timed, so the figures hold for this machine's network; run it on a
quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmark_record import environment, import_seconds, mean, write_result  # noqa: E402

INSTALLERS = ("pip", "uv")
# what each installer puts into the venv of its own (pip comes with every venv, at the version the
# pip path upgrades it to; uv is the uv path's installer)
INSTALLER_DISTRIBUTIONS = {"pip", "uv"}
# the installed distributions, read by the new venv's own interpreter
LIST_DISTRIBUTIONS = (
    "import importlib.metadata as m, json, re; "
    "print(json.dumps({re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): d.version for d in m.distributions()}))"
)


def copy_project(destination: Path) -> None:
    """The project's tracked files, as they are in the working tree, into ``destination``."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def folder_bytes(path: Path) -> int:
    """Bytes under ``path``, each file counted once (uv hard-links files from its cache)."""
    seen, total = set(), 0
    for file in path.rglob("*"):
        if file.is_file() and not file.is_symlink():
            stat = file.stat()
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_size
    return total


def one_run(work_dir: Path, installer: str, number: int) -> dict:
    project = work_dir / f"run{number}-{installer}"
    shutil.rmtree(project, ignore_errors=True)
    copy_project(project)
    caches = project / ".bench_caches"
    env = {
        **os.environ,
        "DFPO_INSTALLER": installer,
        "PIP_CACHE_DIR": str(caches / "pip"),
        "UV_CACHE_DIR": str(caches / "uv"),
    }
    env.pop("VIRTUAL_ENV", None)
    started = time.monotonic()
    done = subprocess.run(["bash", "scripts/install_env.sh"], cwd=project, env=env, capture_output=True, text=True)
    seconds = round(time.monotonic() - started, 1)
    if done.returncode != 0:
        raise RuntimeError(
            f"DFPO_INSTALLER={installer} bash scripts/install_env.sh in {project} exited "
            f"{done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    listed = subprocess.run(
        [str(project / ".venv" / "bin" / "python"), "-c", LIST_DISTRIBUTIONS],
        capture_output=True,
        text=True,
        check=True,
    )
    result = {
        "installer": installer,
        "seconds": seconds,
        "venv_bytes": folder_bytes(project / ".venv"),
        "distributions": json.loads(listed.stdout),
        "import_verl_vllm_s": import_seconds(project / ".venv" / "bin" / "python"),
    }
    shutil.rmtree(project, ignore_errors=True)
    return result


def differences(runs: list[dict]) -> dict[str, dict[str, str | None]]:
    """{distribution: {installer: version or None}} for every distribution whose version differs
    between the runs (or that some run lacks), the installers' own left out."""
    names = set().union(*(run["distributions"] for run in runs)) - INSTALLER_DISTRIBUTIONS
    out = {}
    for name in sorted(names):
        versions = {
            f"run{number} ({run['installer']})": run["distributions"].get(name)
            for number, run in enumerate(runs, start=1)
        }
        if len(set(versions.values())) > 1:
            out[name] = versions
    return out


def summary(runs: list[dict]) -> dict:
    by_installer = {}
    for installer in INSTALLERS:
        mine = [run for run in runs if run["installer"] == installer]
        if mine:
            by_installer[installer] = {
                "runs": len(mine),
                "seconds": mean([run["seconds"] for run in mine]),
                "import_verl_vllm_s": mean([run["import_verl_vllm_s"] for run in mine]),
            }
    if len(by_installer) == 2:
        by_installer["uv_over_pip"] = round(by_installer["uv"]["seconds"] / by_installer["pip"]["seconds"], 2)
    return by_installer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1, help="rounds of both installers (default 1)")
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="where the fresh copies go (default: a new temporary directory)"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    work_dir = (args.work_dir or Path(tempfile.mkdtemp(prefix="dfpo-bench-setup-"))).expanduser().resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    from cpu_backend.precision import probe

    record = {
        "benchmark": "setup",
        "environment": environment(),
        "command": "python scripts/bench_setup.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "runs": [],
    }
    for round_number in range(args.rounds):
        for installer in INSTALLERS:
            number = len(record["runs"]) + 1
            print(f"run {number}: round {round_number + 1}, DFPO_INSTALLER={installer}", flush=True)
            result = one_run(work_dir, installer, number)
            print(
                f"run {number}: {result['seconds']} s, import verl, vllm {result['import_verl_vllm_s']} s, .venv "
                f"{result['venv_bytes'] / 1e9:.1f} GB, {len(result['distributions'])} distributions",
                flush=True,
            )
            record["runs"].append(result)
    record["differences"] = differences(record["runs"])
    record["summary"] = summary(record["runs"])
    print(json.dumps({"summary": record["summary"], "differences": record["differences"]}, indent=2))
    path = write_result("setup", probe().capability, record)
    print(f"wrote {path}")
    return 0 if not record["differences"] else 1


if __name__ == "__main__":
    sys.exit(main())
