"""Every recipe composes to the same verl config as before the launch layer moved into Hydra config groups.

``fixtures/recipe_overrides_before_config_groups.json`` holds the Hydra overrides each recipe printed
in DRY_RUN mode at commit b777d7d, when ``recipes/common.sh`` wrote every method's and model's keys
itself. Composed against today's ``dfpo_trainer`` they give that commit's configs (the old overrides
set every key the config groups set now), and today's DRY_RUN output must compose to the same
values, key for key; the only differences allowed are listed in :data:`EXPECTED_DIFFERENCES` with
their reasons.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from dfpo.hydra_config import compose_trainer_config
from tests.recipes.recipe_commands import REPO_ROOT, default_command, dry_run

BEFORE = json.loads((Path(__file__).parent / "fixtures" / "recipe_overrides_before_config_groups.json").read_text())
SCRIPTS = sorted(BEFORE["commands"])
_LAUNCH_TIME = re.compile(r"\.\d{8}T\d{6}Z\.jsonl")


def _normalised(overrides: list[str]) -> list[str]:
    """The placeholders of the fixture in place of this checkout's root and the launch's time stamp."""
    return [_LAUNCH_TIME.sub(".{launch_time}.jsonl", o.replace(str(REPO_ROOT), "{repo}")) for o in overrides]


def _flat(config, prefix: str = "") -> dict[str, object]:
    container = OmegaConf.to_container(config, resolve=False) if not isinstance(config, dict) else config
    out: dict[str, object] = {}
    for key, value in container.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _differences(before: list[str], now: list[str]) -> dict[str, tuple[object, object]]:
    old = _flat(compose_trainer_config(before, config_name="dfpo_trainer"))
    new = _flat(compose_trainer_config(now, config_name="dfpo_trainer"))
    return {k: (old.get(k, "<absent>"), new.get(k, "<absent>")) for k in sorted(old.keys() | new.keys()) if old.get(k, "<absent>") != new.get(k, "<absent>")}


def expected_differences(script: str, method: str, model: str) -> dict[str, tuple[object, object]]:
    """What may differ, and why: ``dfpo.method`` names the method group chosen (the old overrides did
    not choose one, so they compose with the default group's name); ``dfpo.model`` names the model
    for the memory plan, which the launcher computed itself before dfpo/preflight.py did."""
    differences: dict[str, tuple[object, object]] = {"dfpo.model": (None, model)}
    if method != "dfpo_min_replace":
        differences["dfpo.method"] = ("dfpo_min_replace", method)
    return differences


def _value_of(overrides: list[str], key: str) -> str:
    values = [o.split("=", 1)[1] for o in overrides if o.startswith(f"{key}=")]
    assert len(values) == 1, f"expected one {key}=<name> override, got {values}"
    return values[0]


@pytest.mark.parametrize("script", SCRIPTS)
def test_recipe_composes_to_the_config_it_composed_before(script):
    before = BEFORE["commands"][script]
    commands = dry_run(script) if len(before) > 1 else [default_command(script)]  # one command: the cached DRY_RUN
    now = [_normalised(command.overrides) for command in commands]
    assert len(now) == len(before), f"{script}: {len(now)} commands now, {len(before)} before"
    for old, new in zip(before, now, strict=True):
        assert _differences(old, new) == expected_differences(script, _value_of(new, "method"), _value_of(new, "dfpo.model"))


def test_the_comparison_sees_a_changed_key():
    """The mutant: a recipe whose method file changed a value fails the comparison."""
    script = "run_gspo_qwen3_32b.sh"
    now = _normalised(default_command(script).overrides)
    changed = _differences(BEFORE["commands"][script][0], [*now, "actor_rollout_ref.actor.clip_ratio_high=5e-4"])
    assert changed != expected_differences(script, "gspo", "qwen3_32b")
    assert changed["actor_rollout_ref.actor.clip_ratio_high"] == (0.0004, 0.0005)
