"""``python -m dfpo.launch.recipe METHOD MODEL [hydra overrides...]``: launch one recipe's training run.

The shell recipes (``recipes/run_<method>_<model>.sh``) are this one line. It turns the recipe
into the ``python -m dfpo.main`` command that trains it and replaces itself with that command
(so a scheduler's SIGTERM to the recipe reaches the driver, and the recipe's exit status is the
driver's):

    python -m dfpo.main method=<METHOD> base_model=<MODEL> [one override per knob set] [overrides...]

* ``METHOD`` is a file of ``dfpo/config/method/``, ``MODEL`` one of ``dfpo/config/base_model/``:
  every value of the recipe lives there (and in ``recipe_defaults.yaml`` and, for the CPU models,
  ``platform/cpu.yaml``).
* Each environment knob that is set becomes one override of its key
  (:mod:`dfpo.launch.recipe_knobs`); four knobs choose instead: ``TRAINER_MODE`` (``trainer_mode=``),
  ``USE_KL_LOSS=true`` (``kl_loss=low_var_kl``), ``USE_DYNAMIC_BSZ=false`` (fixed micro-batches)
  and ``ROLLOUT_IS`` (with ``ROLLOUT_IS_THRESHOLD``).
* The extra arguments are Hydra overrides, appended last: they win over everything.

Precedence, lowest to highest: verl's ``ppo_trainer`` < DFPO's ``dfpo_trainer.yaml`` < the method
file < the recipe defaults < the model file < a knob exported in the environment < an override
given to the recipe.

``DRY_RUN=1`` prints the command on one shell-quoted line instead of running it (for a CPU model,
after the environment its driver needs: ``VERL_PLATFORM=cpu RAY_DEDUP_LOGS=0 python -m dfpo.main ...``). Everything that
needs the composed config (the files the run reads, batches, token budgets, checkpoint storage,
the checkpoint to resume, the memory plan) is checked by ``python -m dfpo.main`` before Ray starts,
on every path; ``dfpo.dry_run=true`` runs those checks and prints the config without starting
anything.
"""

from __future__ import annotations

import os
import shlex
import sys
from functools import cache
from pathlib import Path

from dfpo.launch import CONFIG_DIR
from dfpo.launch.recipe_knobs import BY_NAME, KnobError, is_true, knob_overrides
from dfpo.launch.resume import flatten

TRAINER_MODES = ("sync", "colocate_async", "separate_async")
ROLLOUT_IS_LEVELS = ("null", "token", "sequence")


class RecipeError(ValueError):
    """The recipe cannot be launched as asked (the message says what to change)."""


def choices(group: str) -> list[str]:
    """The file names of one of dfpo's config groups (``dfpo/config/<group>/*.yaml``)."""
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


def _check_choice(group: str, name: str, what: str) -> None:
    if name not in choices(group):
        raise RecipeError(
            f"unknown {what} '{name}'; valid {what}s: {' '.join(choices(group))} (dfpo/config/{group}/*.yaml)"
        )


def _model_file_path(model: str) -> Path:
    return CONFIG_DIR / "base_model" / f"{model}.yaml"


def _model_file(model: str) -> dict:
    """The model file's content, read once per launch (callers do not modify it)."""
    return _load_yaml(_model_file_path(model))


@cache
def _load_yaml(path: Path) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path))


def model_platform(model: str) -> str:
    """``cpu`` when the model file builds on ``platform/cpu.yaml``, else ``gpu``."""
    return "cpu" if "/platform/cpu" in _model_file(model).get("defaults", []) else "gpu"


def model_keys(model: str) -> frozenset[str]:
    """The keys the model file itself sets."""
    return frozenset(flatten({k: v for k, v in _model_file(model).items() if k != "defaults"}))


def model_sets_path(model: str) -> bool:
    """Whether the model file names its own checkpoint (the CPU examples build theirs); False for a model
    with no file (the launch then names it among the known ones)."""
    if not _model_file_path(model).is_file():
        return False
    return bool(_model_file(model).get("actor_rollout_ref", {}).get("model", {}).get("path"))


def _choosing_overrides(environ: dict[str, str]) -> list[str]:
    """The overrides of the knobs that choose a config file or add conditional keys."""
    overrides = []
    mode = environ.get("TRAINER_MODE") or "sync"
    if mode not in TRAINER_MODES:
        raise RecipeError(f"TRAINER_MODE={mode}: expected sync, colocate_async or separate_async")
    if mode != "sync":
        overrides.append(f"trainer_mode={mode}")
    if is_true("USE_KL_LOSS", environ.get("USE_KL_LOSS") or "false"):
        overrides.append("kl_loss=low_var_kl")
    elif environ.get("KL_LOSS_COEF"):
        raise RecipeError(
            f"KL_LOSS_COEF={environ['KL_LOSS_COEF']} has no effect without USE_KL_LOSS=true: set USE_KL_LOSS=true or "
            "unset KL_LOSS_COEF"
        )
    if not is_true("USE_DYNAMIC_BSZ", environ.get("USE_DYNAMIC_BSZ") or "true"):
        # fixed micro-batches of PPO_MICRO_BATCH_SIZE_PER_GPU / LOG_PROB_MICRO_BATCH_SIZE_PER_GPU
        # sequences (one by default) in place of the token budgets
        for name in ("PPO_MICRO_BATCH_SIZE_PER_GPU", "LOG_PROB_MICRO_BATCH_SIZE_PER_GPU"):
            if not environ.get(name):
                overrides.append(f"{BY_NAME[name].key}=1")
    level = environ.get("ROLLOUT_IS") or "null"
    if level not in ROLLOUT_IS_LEVELS:
        raise RecipeError(f"ROLLOUT_IS={level}: expected token or sequence (or null: off)")
    if level != "null":
        overrides.append(f"algorithm.rollout_correction.rollout_is={level}")
        if not environ.get("ROLLOUT_IS_THRESHOLD"):
            overrides.append("algorithm.rollout_correction.rollout_is_threshold=2.0")
    elif environ.get("ROLLOUT_IS_THRESHOLD"):
        raise RecipeError(
            f"ROLLOUT_IS_THRESHOLD={environ['ROLLOUT_IS_THRESHOLD']} has no effect without ROLLOUT_IS (token or "
            "sequence): "
            "set ROLLOUT_IS or unset ROLLOUT_IS_THRESHOLD"
        )
    return overrides


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def recipe_overrides(method: str, model: str, environ: dict[str, str], via: str | None = None, say=_say) -> list[str]:
    """The ``python -m dfpo.main`` overrides of recipe ``method`` x ``model`` under ``environ``."""
    _check_choice("method", method, "method")
    _check_choice("base_model", model, "model")
    if not environ.get("MODEL_PATH") and not model_sets_path(model):
        example = f"bash {via}" if via else f"python -m dfpo.launch.recipe {method} {model}"
        model_id = _model_file(model).get("dfpo", {}).get("model_id")
        trains = f"base_model={model} trains {model_id}. " if model_id else ""
        raise RecipeError(
            f"MODEL_PATH is not set. {trains}Export it to the model's local Hugging Face checkpoint directory, "
            f"e.g. MODEL_PATH=/path/to/checkpoint {example}"
        )
    platform = model_platform(model)
    rollout = environ.get("ROLLOUT_NAME")
    if platform == "cpu" and rollout and rollout not in ("vllm", "local"):
        raise RecipeError(f"ROLLOUT_NAME on CPU must be vllm or local, got '{rollout}'")
    try:
        overrides = [
            f"method={method}",
            f"base_model={model}",
            *knob_overrides(environ, platform, model_keys(model), say),
            *_choosing_overrides(environ),
        ]
    except KnobError as error:
        raise RecipeError(str(error)) from None
    return overrides


def interpreter(environ: dict[str, str]) -> str:
    """The Python that runs the driver: ``$PYTHON``, else this one."""
    return environ.get("PYTHON") or sys.executable


def recipe_command(
    method: str,
    model: str,
    args: list[str] | tuple[str, ...] = (),
    environ: dict[str, str] | None = None,
    via: str | None = None,
) -> list[str]:
    """The whole command line: ``<python> -m dfpo.main <recipe overrides> <args>``."""
    environ = dict(os.environ) if environ is None else environ
    return [interpreter(environ), "-m", "dfpo.main", *recipe_overrides(method, model, environ, via), *args]


def platform_environment(model: str, environ: dict[str, str]) -> dict[str, str]:
    """What a CPU model's driver needs in its environment: verl on CPU (``VERL_PLATFORM=cpu``, read
    when verl is imported) and Ray's log de-duplication off, so that every rank's lines show."""
    if model_platform(model) != "cpu":
        return {}
    return {"VERL_PLATFORM": "cpu", "RAY_DEDUP_LOGS": environ.get("RAY_DEDUP_LOGS", "0")}


def recipe_environment(model: str, environ: dict[str, str]) -> dict[str, str]:
    """The driver's whole environment: ``environ``, :func:`platform_environment`, unbuffered output."""
    return {**environ, **platform_environment(model, environ), "PYTHONUNBUFFERED": "1"}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    via = None
    if len(args) >= 2 and args[0] == "--via":
        via, args = args[1], args[2:]
    if len(args) < 2 or args[0].startswith("-"):
        print(
            "usage: python -m dfpo.launch.recipe METHOD MODEL [hydra overrides...]\n  methods: "
            f"{' '.join(choices('method'))}\n  models: {' '.join(choices('base_model'))}",
            file=sys.stderr,
        )
        return 2
    method, model, extra = args[0], args[1], args[2:]
    environ = dict(os.environ)
    try:
        command = recipe_command(method, model, extra, environ, via)
        dry = is_true("DRY_RUN", environ.get("DRY_RUN") or "0")
    except (RecipeError, KnobError) as error:
        print(f"dfpo recipe error: {error}", file=sys.stderr)
        return 1
    if dry:
        # a line that runs as printed: a CPU model's driver needs VERL_PLATFORM=cpu before it starts
        assignments = [f"{name}={shlex.quote(value)}" for name, value in platform_environment(model, environ).items()]
        print(" ".join([*assignments, shlex.join(command)]))
        return 0
    sys.stdout.flush()
    os.execvpe(command[0], command, recipe_environment(model, environ))
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
