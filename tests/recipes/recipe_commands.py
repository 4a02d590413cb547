"""Run the GPU recipes in DRY_RUN mode and read back the commands they would run.

Every recipe runs in a clean environment (only PATH, a fake HOME and what the test sets), so a
variable exported in the developer's shell can never change what is checked.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPES_DIR = REPO_ROOT / "recipes"
DUMMY_MODEL_PATH = "/nonexistent/models/dfpo-recipe-test"
TEST_HOME = "/nonexistent/home/dfpo-recipe-test"
ENTRY = ["-m", "dfpo.main"]  # after the interpreter (python3, or $PYTHON)
DFPO_CONFIG_DIR = REPO_ROOT / "dfpo" / "config"
# dfpo's Hydra config groups (dfpo/config/<group>/<choice>.yaml): an override group=choice selects a file
CONFIG_GROUPS = frozenset(p.name for p in DFPO_CONFIG_DIR.iterdir() if p.is_dir() and any(p.glob("*.yaml")))


def group_choice(override: str) -> tuple[str, str] | None:
    """(group, choice) when ``override`` selects a file of one of dfpo's config groups, else None."""
    key, _, value = override.partition("=")
    return (key, value) if key in CONFIG_GROUPS else None


def _file_keys(node, prefix: str = "") -> list[str]:
    keys = []
    for key, value in node.items():
        if isinstance(value, dict) and value:
            keys += _file_keys(value, f"{prefix}{key}.")
        else:
            keys.append(f"{prefix}{key}")
    return keys


def keys_set(overrides: list[str]) -> list[str]:
    """The config keys a command sets: each ``key=value``'s key ('+' prefixes dropped) and, for a
    group choice ``group=choice``, every key its file sets; the ``dfpo.*`` keys are left out (dfpo's
    record of its own choices, for dfpo to read, not verl)."""
    from omegaconf import OmegaConf

    keys = []
    for override in overrides:
        choice = group_choice(override)
        if choice is None:
            key = override.split("=", 1)[0].lstrip("+")
            keys += [] if key.startswith("dfpo.") else [key]
            continue
        group, name = choice
        content = OmegaConf.to_container(OmegaConf.load(DFPO_CONFIG_DIR / group / f"{name}.yaml"))
        keys += [k for k in _file_keys(content) if not k.startswith("dfpo.")]
    return keys


def recipe_env(**variables: str | None) -> dict[str, str]:
    """A clean environment for a recipe: DRY_RUN=1, a dummy MODEL_PATH, then ``variables``
    (a value of None removes the variable)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": TEST_HOME,
        "LANG": "C.UTF-8",
        "DRY_RUN": "1",
        "MODEL_PATH": DUMMY_MODEL_PATH,
    }
    for name, value in variables.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_recipe(script: str | Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``bash recipes/<script> args...`` from the repository root; never raises on failure."""
    path = Path(script) if Path(script).is_absolute() else RECIPES_DIR / script
    return subprocess.run(
        ["bash", str(path), *args],
        cwd=REPO_ROOT,
        env=env if env is not None else recipe_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


@dataclass(frozen=True)
class RecipeCommand:
    """One command line printed by a recipe in DRY_RUN mode."""

    argv: tuple[str, ...]

    @property
    def overrides(self) -> list[str]:
        """The Hydra overrides given to ``python -m dfpo.main``."""
        return list(self.argv[1 + len(ENTRY) :])

    def value(self, key: str) -> str:
        """The last value given to ``key`` (Hydra keeps the last), with or without a ``+`` prefix."""
        values = [o.split("=", 1)[1] for o in self.overrides if o.split("=", 1)[0].lstrip("+") == key]
        if not values:
            raise KeyError(f"the command sets no value for {key}")
        return values[-1]


def parse_commands(stdout: str) -> list[RecipeCommand]:
    """The commands of a DRY_RUN output: one shell-quoted ``<python> -m dfpo.main ...`` per line."""
    commands = []
    for line in stdout.splitlines():
        argv = tuple(shlex.split(line))
        if list(argv[1 : 1 + len(ENTRY)]) != ENTRY:
            raise AssertionError(f"DRY_RUN printed a line that is not a dfpo.main command: {line!r}")
        commands.append(RecipeCommand(argv))
    return commands


def dry_run(script: str | Path, *args: str, **variables: str | None) -> list[RecipeCommand]:
    """The commands ``script`` would run; fails with the recipe's stderr when it exits non-zero."""
    result = run_recipe(script, *args, env=recipe_env(**variables))
    if result.returncode != 0:
        raise AssertionError(f"{script} exited {result.returncode} in DRY_RUN mode:\n{result.stderr}")
    return parse_commands(result.stdout)


@cache
def default_command(script: str) -> RecipeCommand:
    """The single command a run script prints with only MODEL_PATH set (cached per script)."""
    commands = dry_run(script)
    if len(commands) != 1:
        raise AssertionError(f"{script} printed {len(commands)} commands in DRY_RUN mode, expected 1")
    return commands[0]


@cache
def composed_config(script: str):
    """The verl config ``python -m dfpo.main`` would build from ``script``'s overrides (cached)."""
    from dfpo.hydra_config import compose_trainer_config

    return compose_trainer_config(default_command(script).overrides, config_name="dfpo_trainer")


def preflight_says(script: str, *args: str, environ: dict[str, str] | None = None, **variables: str | None) -> list[str]:
    """What ``python -m dfpo.main`` says before Ray for the command ``script`` prints under
    ``variables`` (its config composed in-process and :func:`dfpo.preflight.preflight` run on it,
    with ``environ`` as the launch's environment); a refused config raises PreflightError. Without
    ``environ`` the environment says ALLOW_LOCAL_CHECKPOINTS=1: the recipes' OUTPUT_ROOT is on this
    machine's disk, and only the tests of checkpoint storage are about it."""
    from dfpo.hydra_config import compose_trainer_config
    from dfpo.preflight import preflight

    (command,) = dry_run(script, *args, **variables)
    cfg = compose_trainer_config(command.overrides, config_name="dfpo_trainer")
    said: list[str] = []
    preflight(cfg, say=said.append, environ={"ALLOW_LOCAL_CHECKPOINTS": "1"} if environ is None else environ)
    return said
