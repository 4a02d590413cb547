"""Launching a run: the composed config, the recipes' knobs, the checks before Ray starts, the memory plan.

Everything between a user's command and verl's trainer: :mod:`dfpo.launch.recipe` (one recipe's
command), :mod:`dfpo.launch.recipe_knobs` (its environment knobs), :mod:`dfpo.launch.compose` and
:mod:`dfpo.launch.config_resolvers` (the config), :mod:`dfpo.launch.driver_setup` (what the driver
does with it), :mod:`dfpo.launch.preflight` and :mod:`dfpo.launch.doctor` (the checks),
:mod:`dfpo.launch.memory_plan`, :mod:`dfpo.launch.resume` and :mod:`dfpo.launch.run_identity`.
"""

from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parents[1] / "config"
"""``dfpo/config``: verl's trainer config extended with one YAML file per method and base model."""
