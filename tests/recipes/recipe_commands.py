"""The commands the recipes would run, and the configs they compose, read in-process.

A run script is one line, ``dfpo_launch METHOD MODEL "$@"``: its command is
:func:`dfpo.launch.recipe.recipe_command` of that method and model, which these helpers call directly
(the shell path itself is tested where it matters: tests/recipes/test_recipes_launcher.py). A
script that loops (the group-size sweep) runs in DRY_RUN mode. Every recipe sees a clean
environment (only PATH, a fake HOME and what the test sets), so a variable exported in the
developer's shell can never change what is checked.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from contextlib import contextmanager
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


def _group_file_keys(path: Path) -> list[str]:
    """Every key a config file sets, with the files its defaults list names (``/recipe_defaults``,
    ``/platform/cpu``): what choosing it sets."""
    from omegaconf import OmegaConf

    content = OmegaConf.to_container(OmegaConf.load(path))
    keys = []
    for entry in content.pop("defaults", []):
        if entry != "_self_":
            keys += _group_file_keys(DFPO_CONFIG_DIR / f"{entry.lstrip('/')}.yaml")
    return keys + _file_keys(content)


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
    keys = []
    for override in overrides:
        choice = group_choice(override)
        if choice is None:
            key = override.split("=", 1)[0].lstrip("+")
            keys += [] if key.startswith("dfpo.") else [key]
            continue
        group, name = choice
        keys += [k for k in _group_file_keys(DFPO_CONFIG_DIR / group / f"{name}.yaml") if not k.startswith("dfpo.")]
    return list(dict.fromkeys(keys))


def file_keys(overrides: list[str]) -> set[str]:
    """The keys of :func:`keys_set` that come from config files (group choices), not from the command
    line: a model file sets its model's values for every mode (e.g. token budgets with fixed
    micro-batches chosen), so such a key may go unread where a command-line key may not."""
    return set(keys_set([o for o in overrides if group_choice(o)]))


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
        """The last value the command line gives ``key`` (Hydra keeps the last), with or without a
        ``+`` prefix; for a key it leaves to the config files, the resolved config's value as text."""
        values = [o.split("=", 1)[1] for o in self.overrides if o.split("=", 1)[0].lstrip("+") == key]
        if values:
            return values[-1]
        from omegaconf import OmegaConf

        found = OmegaConf.select(self.config, key, default=KeyError)
        if found is KeyError:
            raise KeyError(f"the command's config has no {key}")
        return str(found)

    @property
    def config(self):
        """The config ``python -m dfpo.main`` composes and resolves from this command (cached)."""
        return _resolved_config_cached(tuple(self.overrides))


_ASSIGNMENT = re.compile(r"[A-Z_][A-Z0-9_]*=")


def parse_commands(stdout: str) -> list[RecipeCommand]:
    """The commands of a DRY_RUN output: one shell-quoted ``<python> -m dfpo.main ...`` per line
    (after ``NAME=value`` assignments of the driver's environment, for a CPU model)."""
    commands = []
    for line in stdout.splitlines():
        words = shlex.split(line)
        while words and _ASSIGNMENT.match(words[0]):
            words.pop(0)
        argv = tuple(words)
        if list(argv[1 : 1 + len(ENTRY)]) != ENTRY:
            raise AssertionError(f"DRY_RUN printed a line that is not a dfpo.main command: {line!r}")
        commands.append(RecipeCommand(argv))
    return commands


_LAUNCH_LINE = re.compile(r'^dfpo_launch (\w+) (\w+) "\$@"$', re.MULTILINE)


def launch_of(script: str | Path) -> tuple[str, str] | None:
    """(method, model) of a one-line run script, or None for a script that does more."""
    path = Path(script) if Path(script).is_absolute() else RECIPES_DIR / script
    found = _LAUNCH_LINE.findall(path.read_text())
    return found[0] if len(found) == 1 else None


def dry_run(script: str | Path, *args: str, **variables: str | None) -> list[RecipeCommand]:
    """The commands ``script`` would run; fails with the recipe's error when it refuses."""
    launch = launch_of(script)
    if launch is not None:
        from dfpo.launch.recipe import RecipeError, recipe_command

        path = Path(script) if Path(script).is_absolute() else RECIPES_DIR / script
        try:
            return [
                RecipeCommand(
                    tuple(
                        recipe_command(
                            *launch,
                            list(args),
                            recipe_env(**variables),
                            via=str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path),
                        )
                    )
                )
            ]
        except RecipeError as error:
            raise AssertionError(f"{script} refused in DRY_RUN mode:\n{error}") from None
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
    """The verl config ``python -m dfpo.main`` would build from ``script``'s overrides, resolved (cached)."""
    return resolved_config(default_command(script).overrides)


def preflight_says(
    script: str, *args: str, environ: dict[str, str] | None = None, **variables: str | None
) -> list[str]:
    """What ``python -m dfpo.main`` says before Ray for the command ``script`` prints under
    ``variables`` (its config composed in-process and :func:`dfpo.launch.preflight.preflight` run on it,
    with ``environ`` as the launch's environment); a refused config raises PreflightError. Without
    ``environ`` the environment says ALLOW_LOCAL_CHECKPOINTS=1: the recipes' OUTPUT_ROOT is on this
    machine's disk, and only the tests of checkpoint storage are about it."""
    from dfpo.launch.preflight import preflight

    (command,) = dry_run(script, *args, **variables)
    cfg = resolved_config(command.overrides)
    said: list[str] = []
    preflight(
        cfg, say=said.append, environ={"ALLOW_LOCAL_CHECKPOINTS": "1"} if environ is None else environ, files=False
    )
    return said


def resolved_config(overrides: list[str]):
    """The config ``python -m dfpo.main overrides`` runs: composed and resolved as its driver does
    (dfpo.launch.driver_setup.resolve), on this machine, with the recipes' test HOME (``${oc.env:HOME}``)."""
    from dfpo.launch.compose import compose_trainer_config
    from dfpo.launch.driver_setup import resolve

    cfg = compose_trainer_config(overrides, config_name="dfpo_trainer")
    with recipe_home():
        resolve(cfg)
    return cfg


@cache
def _resolved_config_cached(overrides: tuple[str, ...]):
    return resolved_config(list(overrides))


@contextmanager
def recipe_home():
    """HOME is the recipes' test HOME while this block resolves a config (``${oc.env:HOME}``)."""
    home = os.environ.get("HOME")
    os.environ["HOME"] = TEST_HOME
    try:
        yield
    finally:
        if home is None:
            os.environ.pop("HOME")
        else:
            os.environ["HOME"] = home
