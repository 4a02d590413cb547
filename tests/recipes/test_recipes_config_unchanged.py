"""Every recipe composes to the same verl config as before the launch layer moved into Hydra config groups.

``fixtures/recipe_overrides_before_config_groups.json`` holds the Hydra overrides each recipe printed
in DRY_RUN mode at commit b777d7d, when ``recipes/common.sh`` wrote every method's and model's keys
itself. Composed against today's ``dfpo_trainer`` they give that commit's configs (the old overrides
set every key the config groups set now), and today's DRY_RUN output must compose to the same
values, key for key, for every verl key (``dfpo.*`` keys are dfpo's own record, read by no verl
code); the only differences allowed are listed in :func:`expected_differences` with their reasons.

Since the model files moved into ``dfpo/config/base_model`` the recipes' configs are resolved by
dfpo's resolvers on the machine that launches. Two of the fixture's values were computed by the
machine that recorded it (this project's 2-core CI kind with native bf16): the CPU actor's dtype
where a model asks for ``auto``, and each rank's threads. They are given back to today's recipe as
its knobs (``ACTOR_DTYPE``, ``CPU_THREADS_PER_RANK``), so that the comparison is of the launch
layer on any machine, not of the machine.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.recipes.recipe_commands import REPO_ROOT, default_command, dry_run, resolved_config

BEFORE = json.loads((Path(__file__).parent / "fixtures" / "recipe_overrides_before_config_groups.json").read_text())
SCRIPTS = sorted(BEFORE["commands"])
THINKING_MODELS = {
    "qwen3_32b": "qwen3_thinking",
    "qwen3_next_80b_a3b_thinking": "qwen3_thinking",
    "gpt_oss_120b": "harmony",
}
_LAUNCH_TIME = re.compile(r"\.\d{8}T\d{6}Z\.jsonl")
# GPT-OSS trains with flex_attention on padded micro-batches of one sequence (the hub kernel's
# backward has no sink gradient; GPT-OSS's masks ignore packed position ids): gpt_oss_120b.yaml
GPT_OSS_TRAINING_ATTENTION = {
    "actor_rollout_ref.model.override_config.attn_implementation": (
        "kernels-community/vllm-flash-attn3",
        "flex_attention",
    ),
    "actor_rollout_ref.model.use_remove_padding": (True, False),
    "actor_rollout_ref.actor.use_remove_padding": (True, False),
    "actor_rollout_ref.actor.use_dynamic_bsz": (True, False),
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": (None, 1),
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": (True, False),
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": (True, False),
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": (None, 1),
    "critic.use_dynamic_bsz": (True, False),
}


def _normalised(overrides: list[str]) -> list[str]:
    """The placeholders of the fixture in place of this checkout's root and the launch's time stamp."""
    return [_LAUNCH_TIME.sub(".{launch_time}.jsonl", o.replace(str(REPO_ROOT), "{repo}")) for o in overrides]


def _flat(config, prefix: str = "") -> dict[str, object]:
    container = OmegaConf.to_container(config, resolve=True) if not isinstance(config, dict) else config
    out: dict[str, object] = {}
    for key, value in container.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _verl_keys(overrides: list[str]) -> dict[str, object]:
    flat = _flat(resolved_config(overrides))
    return {k: _normalised([v])[0] if isinstance(v, str) else v for k, v in flat.items() if not k.startswith("dfpo.")}


def _differences(before: list[str], now: list[str]) -> dict[str, tuple[object, object]]:
    old, new = _verl_keys(before), _verl_keys(now)
    return {
        k: (old.get(k, "<absent>"), new.get(k, "<absent>"))
        for k in sorted(old.keys() | new.keys())
        if old.get(k, "<absent>") != new.get(k, "<absent>")
    }


def expected_differences(before: list[str]) -> dict[str, tuple[object, object]]:
    """What may differ, and why. A CPU recipe (``trainer.device=cpu``) now also sets
    ``VLLM_CPU_OMP_THREADS_BIND`` with one tensor-parallel worker, to ``auto``, vLLM's own default
    (platform/cpu.yaml sets it for every TP degree; the launcher set it only for TP > 1), and the
    reference policy's dtype, read only with the KL loss (the launcher set it only then). A thinking
    model's recipe now reads only the final answer (its base model file sets the reward's
    ``response_format`` and verl's naive manager plus the cut-off flag, loaded through verl's importlib
    source: docs/rewards.md, "Thinking models"). GPT-OSS's training attention and batching changed
    (:data:`GPT_OSS_TRAINING_ATTENTION`)."""
    experiment = _value_of(before, "trainer.experiment_name")
    for model, response_format in THINKING_MODELS.items():
        if f"-{model}-" in experiment:
            return {
                "reward.custom_reward_function.reward_kwargs.response_format": ("<absent>", response_format),
                "reward.reward_manager.module.path": (None, "{repo}/reward/verl_reward_manager.py"),
                "reward.reward_manager.name": ("naive", "TruncationAwareRewardManager"),
                "reward.reward_manager.source": ("register", "importlib"),
                **(GPT_OSS_TRAINING_ATTENTION if model == "gpt_oss_120b" else {}),
            }
    if "trainer.device=cpu" not in before:
        return {}
    differences: dict[str, tuple[object, object]] = {
        "ray_kwargs.ray_init.runtime_env.env_vars.VLLM_CPU_OMP_THREADS_BIND": ("<absent>", "auto")
    }
    actor_dtype = _value_of(before, "++actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype")
    if actor_dtype != "fp32":
        differences["actor_rollout_ref.ref.fsdp_config.model_dtype"] = ("fp32", actor_dtype)
    return differences


def _value_of(overrides: list[str], key: str) -> str:
    values = [o.split("=", 1)[1] for o in overrides if o.startswith(f"{key}=")]
    assert len(values) == 1, f"expected one {key}=<value> override, got {values}"
    return values[0]


def machine_knobs(before: list[str]) -> dict[str, str]:
    """The knobs that give today's recipe the values the fixture's machine computed (see the module)."""
    if "trainer.device=cpu" not in before:
        return {}
    threads = _value_of(before, "+ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS").strip("'")
    return {
        "ACTOR_DTYPE": _value_of(before, "++actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype"),
        "CPU_THREADS_PER_RANK": threads,
    }


@pytest.mark.parametrize("script", SCRIPTS)
def test_recipe_composes_to_the_config_it_composed_before(script):
    before = BEFORE["commands"][script]
    commands = dry_run(script, **machine_knobs(before[0]))
    now = [_normalised(command.overrides) for command in commands]
    assert len(now) == len(before), f"{script}: {len(now)} commands now, {len(before)} before"
    for old, new in zip(before, now, strict=True):
        assert _differences(old, new) == expected_differences(old)


def test_the_comparison_sees_a_changed_key():
    """The mutant: a recipe whose method file changed a value fails the comparison."""
    script = "run_gspo_qwen3_32b.sh"
    now = _normalised(default_command(script).overrides)
    changed = _differences(BEFORE["commands"][script][0], [*now, "actor_rollout_ref.actor.clip_ratio_high=5e-4"])
    assert changed != expected_differences(BEFORE["commands"][script][0])
    assert changed["actor_rollout_ref.actor.clip_ratio_high"] == (0.0004, 0.0005)
