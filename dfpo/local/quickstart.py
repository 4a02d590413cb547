"""``python -m dfpo.local.quickstart``: the paper's pipeline in miniature, on CPU (``scripts/quickstart.sh``).

Stages, each through the same command a user runs for the real thing:

1. data and model — the toy task through ``data_prep`` and the warm-started tiny model
   (``python -m dfpo.local.prepare``; built once under the output root);
2. training — DFPO (Min-Replace) and GSPO, each ``bash recipes/run_<method>_tiny_cpu.sh``, i.e.
   ``python -m dfpo.main`` and verl's whole trainer on 2 CPU ranks (progress: one line per step);
3. checkpoints to Hugging Face models — ``python -m verl.model_merger merge --backend fsdp``;
4. evaluation — ``python -m dfpo.evaluation.generate --backend transformers`` on the held-out
   sums and on the training sums, for both trained models and the warm-started model they
   started from (the tiny model learns which sums it is rewarded on; it does not learn addition);
5. report — ``python -m dfpo.evaluation.report``: the Table 1-style mini table (avg@k with
   bootstrap CIs over problems, paired tests against GSPO) and its figures.

Everything is written under ``--output-root`` in the recipes' layout (``logs/``, ``checkpoints/``,
``models/``, ``data/``) plus ``merged/``, ``evals/`` and ``report/``. A stage whose outputs exist is
not run again, so a rerun after an interruption continues; any failing stage stops the run with
its command and the tail of its log.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dfpo.local.prepare import prepare
from dfpo.local.toy_task import TEST_SOURCE, TRAIN_SOURCE

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Method:
    recipe_method: str  # the run_<method>_tiny_cpu.sh name
    label: str  # the report's method name


METHODS = (Method("dfpo_min_replace", "DFPO (Min-Replace)"), Method("gspo", "GSPO"))
WARM_START = "Warm start (no RL)"
MODEL = "tiny_cpu"
EXPERIMENT_LOGS = "logs/quickstart"


class StageFailed(RuntimeError):
    pass


def say(message: str) -> None:
    print(f"[quickstart {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run_logged(command: list[str], log: Path, env: dict[str, str] | None = None, on_poll=None) -> None:
    """Run ``command`` with its output appended to ``log``; ``on_poll()`` every second while it runs.
    Raises :class:`StageFailed` with the log's tail when it exits non-zero."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        while process.poll() is None:
            if on_poll is not None:
                on_poll()
            time.sleep(1.0)
    if on_poll is not None:
        on_poll()
    if process.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise StageFailed(f"`{' '.join(command)}` exited with {process.returncode}; last lines of {log}:\n{tail}")


def experiment_name(method: Method, steps: int) -> str:
    return f"quickstart-{method.recipe_method}-{steps}steps"


class StepProgress:
    """Prints one line per new training step found in the run's verl file log."""

    def __init__(self, log_dir: Path, experiment: str, total: int) -> None:
        self.log_dir, self.experiment, self.total = log_dir, experiment, total
        self.seen: set[int] = set()

    def __call__(self) -> None:
        for path in sorted(self.log_dir.glob(f"{self.experiment}.*.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line being written
                step, data = int(record["step"]), record["data"]
                if step in self.seen or "actor/grad_norm" not in data:
                    continue
                self.seen.add(step)
                residual = data.get("actor/dfpo/cancellation_residual_after")
                say(
                    f"  step {step}/{self.total}: train reward {data.get('critic/score/mean', float('nan')):.3f}, "
                    f"learning-tax residual {data.get('actor/dfpo/cancellation_residual_before', float('nan')):.2e}"
                    + (f" -> {residual:.1e} after the transform" if residual is not None and "dfpo" in self.experiment else "")
                    + f", {data.get('timing_s/step', float('nan')):.1f} s"
                )


def train(method: Method, root: Path, steps: int, ranks: int, seed: int) -> Path:
    """Train with the method's tiny CPU recipe; returns the final checkpoint's actor directory."""
    experiment = experiment_name(method, steps)
    checkpoints = root / "checkpoints" / "dfpo" / experiment
    latest = checkpoints / "latest_checkpointed_iteration.txt"
    if latest.exists() and latest.read_text().strip() == str(steps):
        say(f"{method.label}: {steps} steps already trained ({checkpoints})")
    else:
        say(f"{method.label}: training {steps} steps on {ranks} CPU ranks (bash recipes/run_{method.recipe_method}_tiny_cpu.sh)")
        env = {
            "OUTPUT_ROOT": str(root),
            "TOTAL_TRAINING_STEPS": str(steps),
            "GPUS_PER_NODE": str(ranks),
            "SEED": str(seed),
            "EXPERIMENT_NAME": experiment,
            "SAVE_FREQ": str(steps),
            "TEST_FREQ": str(steps),
            "PYTHON": sys.executable,
        }
        progress = StepProgress(root / "logs" / "dfpo", experiment, steps)
        run_logged(
            ["bash", f"recipes/run_{method.recipe_method}_tiny_cpu.sh"],
            root / EXPERIMENT_LOGS / f"train_{method.recipe_method}.log",
            env=env,
            on_poll=progress,
        )
        if len(progress.seen) != steps:
            raise StageFailed(f"{method.label}: the run exited 0 but logged steps {sorted(progress.seen)}, not 1..{steps}")
    return checkpoints / f"global_step_{steps}" / "actor"


def merge(actor_dir: Path, target: Path, log: Path) -> Path:
    if not (target / "config.json").exists():
        run_logged(
            [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(actor_dir), "--target_dir", str(target)],
            log,
        )
    return target


def evaluate(model_dir: Path, data: list[Path], output_dir: Path, k: int, seed: int, log: Path) -> Path:
    if not (output_dir / "summary.json").exists():
        run_logged(
            [
                sys.executable, "-m", "dfpo.evaluation.generate",
                "--model", str(model_dir), "--data", *map(str, data), "--output-dir", str(output_dir),
                "--backend", "transformers", "--device", "cpu", "--k", str(k), "--seed", str(seed),
                "--temperature", "1.0", "--top-p", "1.0", "--top-k", "0", "--max-new-tokens", "16",
                "--score-workers", "0", "--no-progress",
            ],
            log,
        )
    return output_dir


def write_runs_file(path: Path, evals: dict[str, Path], train_logs: dict[str, Path | None]) -> None:
    lines = ["baseline: GSPO", "benchmarks:", f"  {TEST_SOURCE}: Held-out sums", f"  {TRAIN_SOURCE}: Training sums", "runs:"]
    for label, eval_dir in evals.items():
        entry = {"model": MODEL, "method": label, "seed": 0, "eval": str(eval_dir)}
        if train_logs.get(label) is not None:
            entry["train_log"] = str(train_logs[label])
        lines.append(f"  - {json.dumps(entry)}")
    path.write_text("\n".join(lines) + "\n")


def run(root: Path, steps: int, ranks: int, k: int, seed: int) -> Path:
    started = time.monotonic()
    logs = root / EXPERIMENT_LOGS
    say(f"stage 1/5: toy data and tiny model under {root}")
    base_model, train_file, test_file = prepare(root)

    trained: dict[str, Path] = {}
    train_logs: dict[str, Path | None] = {WARM_START: None}
    for number, method in enumerate(METHODS, start=2):
        say(f"stage {number}/5: {method.label}")
        trained[method.label] = train(method, root, steps, ranks, seed)
        found = sorted((root / "logs" / "dfpo").glob(f"{experiment_name(method, steps)}.*.jsonl"))
        train_logs[method.label] = found[-1] if found else None

    say(f"stage 4/5: merging checkpoints and sampling k={k} answers per problem")
    models = {WARM_START: base_model}
    for label, actor_dir in trained.items():
        models[label] = merge(actor_dir, root / "merged" / actor_dir.parent.parent.name, logs / "merge.log")
    evals = {}
    for label, model_dir in models.items():
        evals[label] = evaluate(model_dir, [test_file, train_file], root / "evals" / model_dir.name, k, seed, logs / "evaluate.log")
        say(f"  {label}: evaluated ({evals[label]})")

    say("stage 5/5: report")
    runs_file = root / "report" / "runs.yaml"
    runs_file.parent.mkdir(parents=True, exist_ok=True)
    write_runs_file(runs_file, evals, train_logs)
    report_dir = root / "report"
    run_logged(
        [sys.executable, "-m", "dfpo.evaluation.report", "--runs", str(runs_file), "--output-dir", str(report_dir), "--resample", "problems", "--alpha", "0.05"],
        logs / "report.log",
    )
    print()
    print((report_dir / "table1.md").read_text())
    figures = sorted(report_dir.glob("*.png"))
    say("figures: " + ", ".join(str(p) for p in figures))
    say(f"done in {time.monotonic() - started:.0f} s; everything is under {root}")
    return report_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dfpo.local.quickstart", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--output-root", type=Path, default=Path(os.environ.get("OUTPUT_ROOT", "outputs/quickstart")),
        help="where everything is written (default: $OUTPUT_ROOT or outputs/quickstart)",
    )
    parser.add_argument("--steps", type=int, default=8, help="training steps per method (default 8)")
    parser.add_argument("--ranks", type=int, default=2, help="CPU ranks (FSDP2 over gloo) per training run (default 2)")
    parser.add_argument("--k", type=int, default=8, help="samples per evaluation problem (default 8)")
    parser.add_argument("--seed", type=int, default=1, help="training seed (SEED of the recipes) and evaluation seed")
    args = parser.parse_args(argv)
    for name in ("steps", "ranks", "k"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    try:
        run(args.output_root.expanduser().resolve(), args.steps, args.ranks, args.k, args.seed)
    except StageFailed as failure:
        say(f"FAILED: {failure}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
