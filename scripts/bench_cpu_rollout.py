"""Benchmark: the two CPU rollouts side by side through the same tiny recipe, in one run.

    python scripts/bench_cpu_rollout.py [--steps 3] [--ranks 1] [--output-root /tmp/bench_rollout]

Runs ``bash recipes/run_dfpo_min_replace_tiny_cpu.sh`` once with ``ROLLOUT_NAME=vllm`` (verl's own
vLLM rollout on vLLM's CPU build) and once with ``ROLLOUT_NAME=local`` (dfpo's transformers rollout
server), each from a fresh output root, and prints per backend: the whole run's wall time, the
start-up before the first training step (wall time minus the logged steps and validations), the
mean per-step timings verl logs (``timing_s/step``, ``gen``, ``old_log_prob``, ``update_actor``,
``update_weights``) over steps 2.. (step 1 carries first-call costs), the largest
``training/rollout_probs_diff_max``, and vLLM / local ratios. Record the output in BENCHMARKS.md
with the machine, the date and the load (``uptime``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TIMINGS = ("timing_s/step", "timing_s/gen", "timing_s/old_log_prob", "timing_s/update_actor", "timing_s/update_weights")


def run_backend(backend: str, root: Path, steps: int, ranks: int) -> dict:
    if root.exists():
        shutil.rmtree(root)
    env = {
        **os.environ,
        "OUTPUT_ROOT": str(root),
        "ROLLOUT_NAME": backend,
        "TOTAL_TRAINING_STEPS": str(steps),
        "GPUS_PER_NODE": str(ranks),
        "SAVE_FREQ": str(steps),
        "TEST_FREQ": str(steps),
        "PYTHON": sys.executable,
    }
    # build the model and data first, so that both backends' wall times count only the run
    subprocess.run(
        [sys.executable, "-m", "cpu_examples.prepare", "--output-root", str(root)],
        check=True,
        env=env,
        capture_output=True,
    )
    log = root / f"{backend}.console.log"
    started = time.monotonic()
    with log.open("w") as out:
        result = subprocess.run(
            ["bash", "recipes/run_dfpo_min_replace_tiny_cpu.sh"],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    wall = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(f"{backend}: the recipe exited with {result.returncode}; see {log}")
    (file_log,) = sorted((root / "logs" / "dfpo").glob("*.jsonl"))
    records = {}
    for line in file_log.read_text().splitlines():
        record = json.loads(line)
        records.setdefault(int(record["step"]), {}).update(record["data"])
    training = [records[s] for s in sorted(records) if "actor/grad_norm" in records[s]]
    later = training[1:] or training
    logged = sum(r.get("timing_s/step", 0.0) + r.get("timing_s/testing", 0.0) for r in training) + records.get(
        0, {}
    ).get("timing_s/testing", 0.0)
    return {
        "wall_s": wall,
        "startup_s": wall - logged,
        **{key: sum(r[key] for r in later) / len(later) for key in TIMINGS},
        "rollout_probs_diff_max": max(r["training/rollout_probs_diff_max"] for r in training),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--output-root", type=Path, default=Path("/tmp/bench_cpu_rollout"))
    args = parser.parse_args()
    results = {
        backend: run_backend(backend, args.output_root / backend, args.steps, args.ranks)
        for backend in ("vllm", "local")
    }
    print(
        f"tiny recipe, DFPO (Min-Replace), {args.steps} steps, {args.ranks} CPU rank(s), load {os.getloadavg()[0]:.1f}"
    )
    print(f"{'':28s}{'vllm':>10s}{'local':>10s}{'vllm/local':>12s}")
    for key in ("wall_s", "startup_s", *TIMINGS, "rollout_probs_diff_max"):
        v, loc = results["vllm"][key], results["local"][key]
        fmt = "{:>10.2e}" if key == "rollout_probs_diff_max" else "{:>10.2f}"
        print(f"{key:28s}" + fmt.format(v) + fmt.format(loc) + (f"{v / loc:>12.2f}" if loc else f"{'':>12s}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
