"""Study: the quickstart's learning over seeds, the record the learning test's bar is set from.

    python scripts/study_quickstart_seeds.py --seeds 1-5                  # DFPO alone, 5 seeds
    python scripts/study_quickstart_seeds.py --seeds 1 --negate           # the control: the negated reward
    python scripts/study_quickstart_seeds.py --seeds 1-3 --methods dfpo_min_replace gspo

For each seed, the README's first command at its defaults with that seed,
``python -m quickstart --seed N --methods ... --output-root ROOT/seed<N>`` (DFPO alone by
default, as the README's command), in turn. ``--negate`` trains on the negated signal instead
(``reward/negated_score.py``: score 1 - score, every advantage negated exactly; the held-out
accuracy is still the true one), the run that shows the learning is the reward's doing and that the
learning test can fail.

Writes ``benchmarks/results/quickstart_seeds-<UTC time>-<cpu capability>.json`` (``quickstart_seeds_negated-``
with ``--negate``) after every seed: the environment (machine, date, commit, versions), the
command, each seed's ``report/quickstart.json`` (held-out avg@k with its CI for the start and each
method, DFPO's gain, ``target_met``, the precision, the seconds) and the summary: every gain, the
smallest, the seeds that met the bar, the highest start and the lowest CI lower end of DFPO.
With ``--sample-memory`` each seed's run also records its memory, sampled every second: the
machine's (total - available; everything else running on it included) and the run's own (the RSS
of its process tree: the driver, Ray, its workers, vLLM's engine), each at its peak, and the
largest processes at the run's peak. Exits 1 if a seed's run failed (its exit status is recorded; the
other seeds still run).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmark_record import environment, write_result  # noqa: E402

from quickstart.pipeline import METHODS  # noqa: E402

NEGATED_REWARD = REPO_ROOT / "reward" / "negated_score.py"


def parse_seeds(text: str) -> list[int]:
    """``1-5`` or ``1,3,7`` (or a mix: ``1-3,7``) -> the seeds in order, each once."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            low, _, high = part.partition("-")
            values = range(int(low), int(high or low) + 1)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--seeds takes numbers and ranges like 1-5 or 1,3,7; got {part!r}"
            ) from None
        if not values:
            raise argparse.ArgumentTypeError(f"--seeds: the range {part!r} is empty")
        seeds += [seed for seed in values if seed not in seeds]
    return seeds


class MemorySampler:
    """Samples, every ``interval`` seconds while a process runs, the machine's used memory
    (total - available) and the summed RSS of the process's tree; keeps the peaks, and the largest
    processes of the tree at its peak."""

    def __init__(self, pid: int, interval: float = 1.0) -> None:
        self.root, self.interval = psutil.Process(pid), interval
        self.machine_peak = self.tree_peak = 0
        self.top_at_peak: list[tuple[str, int]] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        memory = psutil.virtual_memory()
        self.machine_peak = max(self.machine_peak, memory.total - memory.available)
        sizes = []
        for process in [self.root, *self.root.children(recursive=True)]:
            try:
                sizes.append((process.name(), process.memory_info().rss))
            except psutil.Error:  # ended between the listing and the reading
                continue
        tree = sum(size for _, size in sizes)
        if tree > self.tree_peak:
            self.tree_peak, self.top_at_peak = tree, sorted(sizes, key=lambda item: -item[1])[:8]
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sample()
            except psutil.Error:  # the root has ended
                return
            self._stop.wait(self.interval)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def record(self) -> dict:
        gib = 2**30
        return {
            "interval_s": self.interval,
            "samples": self.samples,
            "machine_used_peak_gib": round(self.machine_peak / gib, 2),
            "machine_total_gib": round(psutil.virtual_memory().total / gib, 2),
            "run_rss_peak_gib": round(self.tree_peak / gib, 2),
            "largest_processes_at_the_run_peak_gib": [[name, round(size / gib, 2)] for name, size in self.top_at_peak],
        }


def summary(runs: list[dict]) -> dict:
    """What the learning test's bar is set from, over the seeds whose run finished."""
    held_out = [run["quickstart"]["held_out"] for run in runs if "quickstart" in run]
    with_dfpo = [h for h in held_out if "dfpo_gain" in h]
    return {
        "seeds_finished": len(held_out),
        "seeds_failed": [run["seed"] for run in runs if "quickstart" not in run],
        "dfpo_gains": [round(h["dfpo_gain"], 4) for h in with_dfpo],
        "min_dfpo_gain": min((h["dfpo_gain"] for h in with_dfpo), default=None),
        "target_met_seeds": [
            run["seed"] for run in runs if run.get("quickstart", {}).get("held_out", {}).get("target_met")
        ],
        "max_start": max((h["start"]["avg@k"] for h in held_out), default=None),
        "min_dfpo_ci_low": min((h["dfpo_min_replace"]["ci95"][0] for h in with_dfpo), default=None),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("1-5"), help="e.g. 1-5 (default) or 1,3,7")
    parser.add_argument(
        "--methods", nargs="+", choices=[m.recipe_method for m in METHODS], default=["dfpo_min_replace"]
    )
    parser.add_argument(
        "--negate", action="store_true", help="train on the negated reward (reward/negated_score.py): the control run"
    )
    parser.add_argument(
        "--sample-memory", action="store_true", help="record each run's peak memory (sampled every second)"
    )
    parser.add_argument(
        "--output-root",
        type=Path,
        default=Path("outputs/seed_study"),
        help="each seed's run under ROOT/seed<N> (default outputs/seed_study)",
    )
    args = parser.parse_args(argv)
    root = args.output_root.expanduser().resolve() / ("negated" if args.negate else "")
    from cpu_backend.precision import probe

    capability = probe().capability
    name = "quickstart_seeds_negated" if args.negate else "quickstart_seeds"
    record = {
        "study": name,
        "environment": environment(),
        "command": "python scripts/study_quickstart_seeds.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "runs": [],
    }
    path = None
    for seed in args.seeds:
        command = [
            sys.executable,
            "-m",
            "quickstart",
            "--seed",
            str(seed),
            "--methods",
            *args.methods,
            "--output-root",
            str(root / f"seed{seed}"),
        ]
        if args.negate:
            command += ["--override", f"reward.custom_reward_function.path='{NEGATED_REWARD}'"]
        print(f"[study] seed {seed}: {' '.join(command)}", flush=True)
        # as a user would type it: no interpreter or checkout path of this machine in the record
        recorded = " ".join(["python", *command[1:]]).replace(
            str(NEGATED_REWARD), NEGATED_REWARD.relative_to(REPO_ROOT).as_posix()
        )
        started = time.monotonic()
        process = subprocess.Popen(command, cwd=REPO_ROOT)
        if args.sample_memory:
            with MemorySampler(process.pid) as memory:
                returncode = process.wait()
        else:
            returncode = process.wait()
        run: dict = {
            "seed": seed,
            "command": recorded,
            "exit_status": returncode,
            "seconds": round(time.monotonic() - started, 1),
        }
        if args.sample_memory:
            run["memory"] = memory.record()
        result_file = root / f"seed{seed}" / "report" / "quickstart.json"
        if returncode == 0 and result_file.exists():
            run["quickstart"] = json.loads(result_file.read_text())
            held_out = run["quickstart"]["held_out"]
            print(
                f"[study] seed {seed}: start {held_out['start']['avg@k']:.3f} -> DFPO "
                f"{held_out.get('dfpo_min_replace', {}).get('avg@k', float('nan')):.3f}",
                flush=True,
            )
        record["runs"].append(run)
        record["summary"] = summary(record["runs"])
        if path is not None:
            path.unlink()
        path = write_result(name, capability, record)
    print(json.dumps(record["summary"], indent=2))
    print(f"[study] wrote {path}")
    return 1 if record["summary"]["seeds_failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
