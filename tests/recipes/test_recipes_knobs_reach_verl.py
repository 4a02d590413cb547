"""Every knob docs/recipes.md documents reaches a key that verl 0.9.1's V1 engine path reads, and no
recipe sets a key that nothing reads.

``tests/recipes/verl_readers.py`` lists, per config key, the line of the installed verl (or of this
project) that reads it on the path ``python -m dfpo.main`` runs, and the condition under which that
line runs at all. Three checks:

* each listed line really is in the installed source;
* every key a recipe sets is listed, and its reader's condition holds in that recipe's config
  (``actor.grad_clip`` has no reader: the engine clips with ``optim.clip_grad``; the KL and
  reference keys are read only with ``use_kl_loss``);
* for every knob in the table of docs/recipes.md ("Knobs"), exporting a different value changes the resolved value of
  at least one listed key whose reader runs.
"""

from __future__ import annotations

import copy
import re
from functools import cache

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict

from dfpo.hydra_config import compose_trainer_config
from tests.recipes.recipe_commands import REPO_ROOT, composed_config, default_command, dry_run
from tests.recipes.recipe_expectations import GPU_RUN_SCRIPTS, SWEEP_SCRIPT
from tests.recipes.verl_readers import READERS, reader_of

SCRIPT = "run_dfpo_min_replace_qwen3_32b.sh"

# A changed value for every knob of the table in docs/recipes.md, with the setting it needs to act at all.
KNOB_VALUES: dict[str, tuple[str, dict[str, str]]] = {
    "MODEL_PATH": ("/nonexistent/other-model", {}),
    "DATA_DIR": ("/nonexistent/other-data", {}),
    "TRAIN_FILES": ("/nonexistent/a.parquet", {}),
    "VAL_FILES": ("/nonexistent/b.parquet", {}),
    "NNODES": ("2", {}),
    "GPUS_PER_NODE": ("4", {}),
    "GROUP_SIZE": ("4", {}),
    "TRAIN_BATCH_SIZE": ("64", {}),
    "PPO_MINI_BATCH_SIZE": ("16", {}),
    "PPO_EPOCHS": ("2", {}),
    "TOTAL_TRAINING_STEPS": ("7", {}),
    "TOTAL_EPOCHS": ("3", {}),
    "LR": ("2e-6", {}),
    "LR_WARMUP_STEPS": ("3", {}),
    "WEIGHT_DECAY": ("0.05", {}),
    "GRAD_CLIP": ("0.5", {}),
    "MAX_PROMPT_LENGTH": ("1024", {}),
    "MAX_RESPONSE_LENGTH": ("16384", {}),
    "TEMPERATURE": ("0.9", {}),
    "TOP_P": ("0.9", {}),
    "TOP_K": ("50", {}),
    "VAL_N": ("2", {}),
    "VAL_TEMPERATURE": ("0.7", {}),
    "VAL_TOP_P": ("0.9", {}),
    "VAL_TOP_K": ("10", {}),
    "SP_SIZE": ("2", {}),
    "USE_REMOVE_PADDING": ("false", {"SP_SIZE": "1"}),
    "USE_DYNAMIC_BSZ": ("false", {}),
    "PPO_MICRO_BATCH_SIZE_PER_GPU": ("2", {"USE_DYNAMIC_BSZ": "false"}),
    "LOG_PROB_MICRO_BATCH_SIZE_PER_GPU": ("2", {"USE_DYNAMIC_BSZ": "false"}),
    "PPO_MAX_TOKEN_LEN_PER_GPU": ("20000", {}),
    "LOG_PROB_MAX_TOKEN_LEN_PER_GPU": ("40000", {}),
    "PARAM_OFFLOAD": ("false", {}),
    "OPTIMIZER_OFFLOAD": ("false", {}),
    "FSDP_SIZE": ("8", {}),
    "ACTOR_STRATEGY": ("fsdp", {}),
    "GRADIENT_CHECKPOINTING": ("false", {}),
    "ENTROPY_CHUNKING": ("false", {}),
    "ACTOR_SHUFFLE": ("true", {}),
    "ROLLOUT_TP": ("2", {}),
    "GPU_MEMORY_UTILIZATION": ("0.6", {}),
    "ROLLOUT_NAME": ("sglang", {}),
    "USE_KL_LOSS": ("true", {}),
    "KL_LOSS_COEF": ("0.01", {"USE_KL_LOSS": "true"}),
    "ENTROPY_COEFF": ("0.001", {}),
    "ROLLOUT_IS": ("token", {}),
    "ROLLOUT_IS_THRESHOLD": ("3.0", {"ROLLOUT_IS": "token"}),
    "REWARD_SCORE_MODE": ("signed", {}),
    "CODE_BACKEND": ("sandbox_fusion", {"SANDBOX_FUSION_URL": "http://sandbox:8080"}),
    "SANDBOX_FUSION_URL": ("http://sandbox:8080", {}),
    "REWARD_MANAGER": ("dapo", {}),
    "REWARD_NUM_WORKERS": ("4", {}),
    "SEED": ("2", {}),
    "PROJECT_NAME": ("other", {}),
    "EXPERIMENT_NAME": ("my-run", {}),
    "OUTPUT_ROOT": ("/nonexistent/out", {}),
    "CKPT_DIR": ("/nonexistent/ckpt", {}),
    "LOG_DIR": ("/nonexistent/logs", {}),
    "LOGGER": ("[console]", {}),
    "SAVE_FREQ": ("5", {}),
    "TEST_FREQ": ("5", {}),
    "VAL_BEFORE_TRAIN": ("false", {}),
    "RESUME_MODE": ("disable", {}),
    "MAX_CKPT_TO_KEEP": ("1", {}),
}
# Knobs of the launcher itself rather than of the config (tested in test_recipes_launcher.py).
LAUNCHER_KNOBS = {
    "PYTHON": "the interpreter of the printed command",
    "DRY_RUN": "print instead of run",
    "GPU_MEMORY_GB": "GPU memory the DRY_RUN memory plan assumes (test_recipes_memory_plan.py)",
    "ALLOW_LOCAL_CHECKPOINTS": "accept node-local checkpoints on several nodes (test_launch_multi_node.py)",
}


def readme_knobs() -> list[str]:
    """The variables named in the first column of the knob table (docs/recipes.md, "Knobs")."""
    text = (REPO_ROOT / "docs" / "recipes.md").read_text()
    section = text.split("\n## Knobs\n", 1)[1].split("\n## ", 1)[0]
    names = []
    for line in section.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names += re.findall(r"`([A-Z][A-Z0-9_]*)`", first)
    return names


def _flat(cfg) -> dict[str, object]:
    out: dict[str, object] = {}

    def walk(prefix, node):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            out[prefix] = node

    walk("", OmegaConf.to_container(cfg, resolve=True))
    # the file log's name holds the launch time: only the rest of it says where the log goes
    key = "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"
    out[key] = re.sub(r"\.\d{8}T\d{6}Z\.jsonl$", ".jsonl", str(out[key]))
    return out


@cache
def _compose(script: str, variables: tuple[tuple[str, str], ...]):
    (command,) = dry_run(script, **dict(variables))
    return command, compose_trainer_config(command.overrides, config_name="dfpo_trainer")


def _compose_changed(script: str, context: dict[str, str], variables: dict[str, str]):
    """The config of ``script`` under ``context`` + ``variables``: the context's composed config with
    the overrides that differ applied by Hydra's own override parser (a full Hydra compose per knob
    costs ~0.5 s; the values and interpolations are the same)."""
    base_command, base = _compose(script, tuple(sorted(context.items())))
    (command,) = dry_run(script, **{**context, **variables})
    base_keys = {o.split("=", 1)[0] for o in base_command.overrides}
    keys = {o.split("=", 1)[0] for o in command.overrides}
    if not base_keys <= keys:  # the knob drops overrides (USE_DYNAMIC_BSZ=false): compose afresh
        return compose_trainer_config(command.overrides, config_name="dfpo_trainer")
    cfg = copy.deepcopy(base)
    new = [o for o in command.overrides if o not in set(base_command.overrides)]
    for override in OverridesParser.create().parse_overrides(new):
        with open_dict(cfg):
            OmegaConf.update(cfg, override.key_or_group, override.value(), merge=False, force_add=True)
    return cfg


def test_every_reader_line_is_in_the_installed_source():
    for key, reader in READERS.items():
        path = reader.source_path()
        assert path.is_file(), f"{key}: {path} does not exist"
        assert reader.snippet in path.read_text(), f"{key}: {reader.file} no longer contains {reader.snippet!r}"


def test_the_knob_table_and_this_test_list_the_same_knobs():
    documented = readme_knobs()
    assert len(documented) == len(set(documented)), "a knob appears twice in the table of docs/recipes.md"
    assert set(documented) == set(KNOB_VALUES) | set(LAUNCHER_KNOBS)


@pytest.mark.parametrize("script", sorted(GPU_RUN_SCRIPTS))
def test_every_key_a_recipe_sets_is_read_on_the_v1_engine_path(script):
    command, cfg = default_command(script), composed_config(script)
    for override in command.overrides:
        key = override.split("=", 1)[0].lstrip("+")
        found = reader_of(key)
        assert found is not None, f"{script} sets {key}, which verl 0.9.1's V1 engine path never reads"
        listed, reader = found
        assert reader.when(cfg), f"{script} sets {key}, but {reader.file} reads it only under a condition that is off"


@pytest.mark.parametrize(
    "variables",
    [{"USE_KL_LOSS": "true"}, {"ROLLOUT_IS": "sequence"}, {"USE_KL_LOSS": "true", "USE_DYNAMIC_BSZ": "false"}],
    ids=["kl-loss", "rollout-is", "kl-loss-fixed-micro-batches"],
)
def test_conditional_keys_are_set_when_their_reader_runs(variables):
    # a full compose here: these commands add keys the default command lacks
    command, cfg = _compose(SCRIPT, tuple(variables.items()))
    for override in command.overrides:
        key = override.split("=", 1)[0].lstrip("+")
        listed, reader = reader_of(key)
        assert reader.when(cfg), key


@pytest.mark.parametrize("knob", sorted(KNOB_VALUES))
def test_every_documented_knob_changes_a_key_verl_reads(knob):
    value, context = KNOB_VALUES[knob]
    _, before = _compose(SCRIPT, tuple(sorted(context.items())))
    after = _compose_changed(SCRIPT, context, {knob: value})
    old, new = _flat(before), _flat(after)
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    assert changed, f"{knob}={value} changed nothing in the composed config"
    read = [k for k in changed if (found := reader_of(k)) is not None and found[1].when(after)]
    assert read, f"{knob}={value} changed only keys verl 0.9.1's V1 engine path does not read: {changed}"


def test_the_sweep_sets_only_read_keys():
    for command in dry_run(SWEEP_SCRIPT, SWEEP_GROUP_SIZES="2"):
        for override in command.overrides:
            assert reader_of(override.split("=", 1)[0].lstrip("+")) is not None, override
