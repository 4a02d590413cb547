"""Benchmark: a CPU trainer's start-up with torch.compile off and on (on: the default).

    python scripts/bench_trainer_startup.py                 # 2 rounds: each setting once per round
    python scripts/bench_trainer_startup.py --rounds 3 --output-root /tmp/startup

Each run is the quickstart's DFPO training run as the quickstart launches it
(:func:`quickstart.pipeline.train`: ``python -m dfpo.main method=dfpo_min_replace
base_model=smollm2_135m_cpu`` with the quickstart's knobs: one CPU rank, verl's vLLM rollout, the
held-out validation before the first step) for 2 steps, with every Ray process under
``TORCHDYNAMO_DISABLE=1`` (off: torch.compile returns each function as written) or as the platform
runs them (on), the two settings alternating within a round. Off is not the default: vLLM's CPU
sampler compiles its random sampling as its workaround for PyTorch's CPU ``exponential_``
(pytorch/pytorch#132395, #151218), so off, training's and the held-out evaluation's samples would
come from another sampler (docs/cpu.md). Every run starts from an empty inductor cache (``TORCHINDUCTOR_CACHE_DIR``:
a new directory, as on a fresh machine) and in its own output root (the model and the task prepared
once and linked in).

Records, per run: the seconds from the launch to verl's "all initialize finished, ready to fit"
(Ray, verl's workers, vLLM's engine), the two steps by verl's timers (``timing_s/step``), the whole
run, and the size of the inductor cache it left (0 where nothing was compiled: the setting reached
the processes). The summary gives each setting's mean and the ratio off / on. Writes
``benchmarks/results/trainer_startup-<UTC time>-<cpu capability>.json`` with the machine, date, commit
and versions; BENCHMARKS.md quotes it through ``scripts/results_tables.py``. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmark_record import environment, mean, write_result  # noqa: E402

from quickstart import pipeline as quickstart  # noqa: E402

STEPS = 2
SETTINGS = ("off", "on")
COMPILE_OFF = "+ray_kwargs.ray_init.runtime_env.env_vars.TORCHDYNAMO_DISABLE='1'"  # in every Ray process
READY = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}):all initialize finished, ready to fit")


def ready_seconds(log: Path, launched: datetime.datetime) -> float:
    """Seconds from ``launched`` (local time, as the log's) to verl's "ready to fit" line in ``log``."""
    match = READY.search(log.read_text(errors="replace"))
    if match is None:
        raise RuntimeError(f"{log} has no verl 'ready to fit' line")
    ready = datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(
        microsecond=int(match.group(2)) * 1000
    )
    return round((ready - launched).total_seconds(), 1)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def one_run(root: Path, shared: Path, setting: str, number: int) -> dict:
    run_root = root / f"run{number}-compile-{setting}"
    overrides = (COMPILE_OFF,) if setting == "off" else ()
    shutil.rmtree(run_root, ignore_errors=True)
    run_root.mkdir(parents=True)
    for name in ("models", "data"):
        (run_root / name).symlink_to(shared / name)
    cache = run_root / "inductor_cache"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)  # the launch's environment: the driver's, Ray's workers'
    precision = quickstart.Precision.resolve("auto", "float32")  # the quickstart's defaults
    knobs = {**precision.recipe_env(), **quickstart.validation_knobs(quickstart.DEFAULT_K, validate_start=True)}
    launched = datetime.datetime.now()
    started = time.monotonic()
    trained = quickstart.train(quickstart.METHODS[0], run_root, STEPS, quickstart.DEFAULT_RANKS, 1, overrides, knobs)
    seconds = round(time.monotonic() - started, 1)
    steps = {}
    for line in trained.file_log.read_text().splitlines():
        record = json.loads(line)
        if "timing_s/step" in record["data"]:
            steps[record["step"]] = round(record["data"]["timing_s/step"], 1)
    log = run_root / quickstart.EXPERIMENT_LOGS / f"train_{quickstart.METHODS[0].recipe_method}.log"
    result = {
        "torch_compile": setting == "on",
        "ready_to_fit_s": ready_seconds(log, launched),
        "steps_s": [steps[s] for s in sorted(steps)],
        "run_s": seconds,
        "inductor_cache_bytes": folder_bytes(cache),
    }
    shutil.rmtree(run_root / "checkpoints", ignore_errors=True)
    return result


def summary(runs: list[dict]) -> dict:
    by_setting = {}
    for compile_on in (False, True):
        mine = [r for r in runs if r["torch_compile"] is compile_on]
        if mine:
            by_setting["on" if compile_on else "off"] = {
                "runs": len(mine),
                "ready_to_fit_s": mean([r["ready_to_fit_s"] for r in mine]),
                "steps_s": mean([sum(r["steps_s"]) for r in mine]),
                "run_s": mean([r["run_s"] for r in mine]),
            }
    if len(by_setting) == 2:
        by_setting["off_over_on"] = {
            key: round(by_setting["off"][key] / by_setting["on"][key], 2) for key in ("ready_to_fit_s", "run_s")
        }
    return by_setting


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both settings (default 2)")
    parser.add_argument(
        "--output-root",
        type=Path,
        default=Path("outputs/bench_trainer_startup"),
        help="the runs' output roots (default outputs/bench_trainer_startup)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    root = args.output_root.expanduser().resolve()
    shared = root / "shared"
    from cpu_backend.precision import probe
    from cpu_examples.prepare import prepare_pretrained

    prepare_pretrained(shared, log=quickstart.say)
    record = {
        "benchmark": "trainer_startup",
        "environment": environment(),
        "command": "python scripts/bench_trainer_startup.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "steps": STEPS,
        "runs": [],
    }
    for round_number in range(args.rounds):
        for setting in SETTINGS:
            number = len(record["runs"]) + 1
            quickstart.say(f"run {number}: round {round_number + 1}, torch.compile {setting}")
            result = one_run(root, shared, setting, number)
            quickstart.say(
                f"run {number}: ready to fit after {result['ready_to_fit_s']} s, steps {result['steps_s']}, "
                f"{result['run_s']} s in all"
            )
            record["runs"].append(result)
    record["summary"] = summary(record["runs"])
    print(json.dumps(record["summary"], indent=2))
    path = write_result("trainer_startup", probe().capability, record)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
