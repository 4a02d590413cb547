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

The same holds for every CPU run script (``recipes/run_*_cpu.sh``, found by name so that a CPU model
added later is covered), with each of the two CPU rollouts (``ROLLOUT_NAME=vllm``: verl's vLLM rollout
on vLLM's CPU build; ``ROLLOUT_NAME=local``: dfpo's transformers server), with the KL loss, and with
``TRAINER_MODE=separate_async`` (its checkpoint-engine and standalone-rollout keys); and for the
knobs of the CPU platform (``CPU_KNOB_VALUES``: ``dfpo/launch/recipe_knobs.py``'s knobs of
``platform/cpu.yaml``, CPU-only, so docs/cpu.md's to describe, not the GPU table of
docs/recipes.md; ``ROLLOUT_NAME`` is in both).

A key set by a config file (a model file, ``recipe_defaults.yaml``, ``platform/cpu.yaml``) holds
the model's value for every mode, so it may go unread in some: each such key and the reason is in
:data:`IDLE_FILE_KEYS`, and any other key, and every key the command line sets, must be read.
"""

from __future__ import annotations

import copy
import re
from functools import cache

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict

from dfpo.launch.compose import compose_trainer_config
from tests.recipes.recipe_commands import (
    RECIPES_DIR,
    REPO_ROOT,
    composed_config,
    default_command,
    dry_run,
    file_keys,
    group_choice,
    keys_set,
    recipe_home,
)
from tests.recipes.recipe_expectations import CPU_RUN_SCRIPTS, GPU_RUN_SCRIPTS, METHODS, SWEEP_SCRIPT
from tests.recipes.verl_readers import READERS, reader_of, readers, running_reader, source_path

SCRIPT = "run_dfpo_min_replace_qwen3_32b.sh"

# ---- the CPU recipes -------------------------------------------------------------------------------
CPU_RUN_SCRIPT_GLOB = "run_*_cpu.sh"  # every CPU run script, whatever its model
CPU_ROLLOUTS = ("vllm", "local")  # ROLLOUT_NAME of dfpo/config/platform/cpu.yaml
CPU_SCRIPT = "run_dfpo_min_replace_tiny_cpu.sh"

# Keys a config file sets that go unread in some modes, and why (see the module's docstring).
IDLE_FILE_KEYS = {
    "actor_rollout_ref.ref.fsdp_config.model_dtype": "the CPU reference policy's dtype: built only with the KL loss",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": "a model's training token budget: read with dynamic batching "
    "only",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": "a model's log-prob token budget: read with dynamic "
    "batching only",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": "the KL loss's reference pass budget: read with dynamic "
    "batching only",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "the KL loss's reference micro-batch: read with fixed "
    "micro-batches only",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "vLLM's memory share: not read by dfpo's local CPU rollout",
    "actor_rollout_ref.rollout.dtype": "vLLM's dtype: not read by dfpo's local CPU rollout",
    "actor_rollout_ref.rollout.enforce_eager": "a vLLM setting: not read by dfpo's local CPU rollout",
    "actor_rollout_ref.rollout.enable_sleep_mode": "a vLLM setting: not read by dfpo's local CPU rollout",
    "actor_rollout_ref.rollout.max_model_len": "a vLLM setting: not read by dfpo's local CPU rollout",
    "actor_rollout_ref.rollout.max_num_batched_tokens": "a vLLM setting: not read by dfpo's local CPU rollout",
    "actor_rollout_ref.rollout.engine_kwargs.vllm.block_size": "a vLLM setting: not read by dfpo's local CPU rollout",
    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes": "verl's weight sync into vLLM: not "
    "used by dfpo's local CPU rollout",
    "ray_kwargs.ray_init.runtime_env.env_vars.VLLM_CPU_KVCACHE_SPACE": "vLLM's CPU KV cache: no vLLM engine with "
    "dfpo's local CPU rollout",
    "ray_kwargs.ray_init.runtime_env.env_vars.VLLM_CPU_OMP_THREADS_BIND": "vLLM's thread binding: no vLLM engine with "
    "dfpo's local CPU rollout",
}


def check_every_key_is_read(label: str, overrides: list[str], cfg) -> None:
    """Every key ``overrides`` sets has a reader on the path that runs, except a file's key listed
    in :data:`IDLE_FILE_KEYS`, which must still have a reader somewhere."""
    from_files = file_keys([o for o in overrides if group_choice(o)]) - {
        o.split("=", 1)[0].lstrip("+") for o in overrides if not group_choice(o)
    }
    for key in keys_set(overrides):
        found = reader_of(key)
        assert found is not None, (
            f"{label} sets {key}, which no reader in tests/recipes/verl_readers.py reads on the path "
            "python -m dfpo.main runs (find the line of verl, vLLM or dfpo that reads it, or stop setting it)"
        )
        if running_reader(key, cfg) is None:
            assert key in from_files and key in IDLE_FILE_KEYS, (
                f"{label} sets {key}, but {', '.join(r.file for r in found[1])} reads it only under a "
                "condition that is off in this config"
            )


def cpu_run_scripts() -> list[str]:
    return sorted(p.name for p in RECIPES_DIR.glob(CPU_RUN_SCRIPT_GLOB))


def cpu_model(script: str) -> str:
    """``run_<method>_<model>.sh`` -> model, for any model name (the method is one of METHODS)."""
    stem = script.removeprefix("run_").removesuffix(".sh")
    for method in sorted(METHODS, key=len, reverse=True):
        if stem.startswith(method + "_"):
            return stem[len(method) + 1 :]
    raise ValueError(f"{script}: no known method in the name (known: {sorted(METHODS)})")


def _cpu_cases() -> list:
    scripts = cpu_run_scripts()
    cases = [
        pytest.param(script, {"ROLLOUT_NAME": rollout}, id=f"{script}-{rollout}")
        for script in scripts
        for rollout in CPU_ROLLOUTS
    ]
    # per CPU model, its first script with the KL loss (the reference policy's keys) and with the
    # separate-async trainer (its standalone rollout and checkpoint engine)
    first_per_model = {}
    for script in scripts:
        first_per_model.setdefault(cpu_model(script), script)
    for script in sorted(first_per_model.values()):
        for rollout in CPU_ROLLOUTS:
            for name, extra in (
                ("kl-loss", {"USE_KL_LOSS": "true"}),
                ("separate_async", {"TRAINER_MODE": "separate_async"}),
            ):
                cases.append(pytest.param(script, {"ROLLOUT_NAME": rollout, **extra}, id=f"{script}-{rollout}-{name}"))
    return cases


# A changed value for every knob of the CPU platform, with the setting it needs to act.
CPU_KNOB_VALUES: dict[str, tuple[str, dict[str, str]]] = {
    "ROLLOUT_NAME": ("local", {"ROLLOUT_NAME": "vllm"}),
    "ACTOR_DTYPE": ("bf16", {"ROLLOUT_NAME": "vllm"}),
    "ROLLOUT_DTYPE": ("bfloat16", {"ROLLOUT_NAME": "vllm"}),
    "VLLM_KV_CACHE_GB": ("3", {"ROLLOUT_NAME": "vllm"}),
    "VLLM_BLOCK_SIZE": ("64", {"ROLLOUT_NAME": "vllm"}),
    "WEIGHT_BUCKET_MB": ("512", {"ROLLOUT_NAME": "vllm"}),
    "RAY_OBJECT_STORE_BYTES": ("2000000000", {"ROLLOUT_NAME": "vllm"}),
    "CPU_THREADS_PER_RANK": ("7", {"ROLLOUT_NAME": "vllm"}),
    "VLLM_CPU_OMP_THREADS_BIND": ("0|1", {"ROLLOUT_NAME": "vllm"}),
}

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
    "GPU_MEMORY_GB": "GPU memory the memory plan of dfpo.main's preflight assumes (dfpo/launch/preflight.py)",
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

    with recipe_home():
        walk("", OmegaConf.to_container(cfg, resolve=True))
    # the file log's name holds the launch time: only the rest of it says where the log goes
    key = "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"
    out[key] = re.sub(r"\.\d{8}T\d{6}Z\.jsonl$", ".jsonl", str(out[key]))
    return out


# Configs composed by Hydra so far, with the keys of their overrides ('+' prefixes included).
_COMPOSED: list[tuple[frozenset[str], object]] = []


def _override_keys(overrides: list[str]) -> frozenset[str]:
    """The keys of ``overrides``, and each config-group choice whole (``method=gspo``): a config
    composed with another choice is no base for this one."""
    return frozenset(o if group_choice(o) else o.split("=", 1)[0] for o in overrides)


def _config_for(overrides: list[str]):
    """The config ``python -m dfpo.main`` composes from ``overrides``. A full Hydra compose costs
    0.5-2 s, so it runs only for a set of keys not seen before; otherwise an earlier composed config
    whose keys are a subset gets every one of ``overrides`` applied, in order, by Hydra's own
    override parser (each of its keys is set again, the others are new: the same values and
    interpolations; test_a_derived_config_equals_a_full_compose checks it). The base must have chosen
    the same config-group files: another choice sets other keys."""
    keys = _override_keys(overrides)
    groups = {k for k in keys if group_choice(k)}
    for base_keys, base in _COMPOSED:
        if base_keys <= keys and {k for k in base_keys if group_choice(k)} == groups:
            cfg = copy.deepcopy(base)
            for override in OverridesParser.create().parse_overrides([o for o in overrides if not group_choice(o)]):
                with open_dict(cfg):
                    OmegaConf.update(cfg, override.key_or_group, override.value(), merge=False, force_add=True)
            return cfg
    cfg = compose_trainer_config(overrides, config_name="dfpo_trainer")
    _COMPOSED.append((keys, cfg))
    return cfg


@cache
def _compose(script: str, variables: tuple[tuple[str, str], ...]):
    """The command ``script`` prints under ``variables`` and its config (cached)."""
    (command,) = dry_run(script, **dict(variables))
    return command, _config_for(command.overrides)


def _compose_changed(script: str, context: dict[str, str], variables: dict[str, str]):
    """The config of ``script`` under ``context`` + ``variables``."""
    return _compose(script, tuple(sorted({**context, **variables}.items())))[1]


def test_every_reader_line_is_in_the_installed_source():
    for key, entry in READERS.items():
        for reader in readers(entry):
            for file, snippet in reader.lines():
                path = source_path(file)
                assert path.is_file(), f"{key}: {path} does not exist"
                assert snippet in path.read_text(), f"{key}: {file} no longer contains {snippet!r}"


def test_the_knob_table_and_this_test_list_the_same_knobs():
    documented = readme_knobs()
    assert len(documented) == len(set(documented)), "a knob appears twice in the table of docs/recipes.md"
    assert set(documented) == set(KNOB_VALUES) | set(LAUNCHER_KNOBS)


@pytest.mark.parametrize("script", sorted(GPU_RUN_SCRIPTS))
def test_every_key_a_recipe_sets_is_read_on_the_v1_engine_path(script):
    command, cfg = default_command(script), composed_config(script)
    check_every_key_is_read(script, command.overrides, cfg)


@pytest.mark.parametrize(
    "variables",
    [{"USE_KL_LOSS": "true"}, {"ROLLOUT_IS": "sequence"}, {"USE_KL_LOSS": "true", "USE_DYNAMIC_BSZ": "false"}],
    ids=["kl-loss", "rollout-is", "kl-loss-fixed-micro-batches"],
)
def test_conditional_keys_are_set_when_their_reader_runs(variables):
    # a full compose here: these commands add keys the default command lacks
    command, cfg = _compose(SCRIPT, tuple(variables.items()))
    check_every_key_is_read(f"{SCRIPT} {variables}", command.overrides, cfg)


@pytest.mark.parametrize("knob", sorted(KNOB_VALUES))
def test_every_documented_knob_changes_a_key_verl_reads(knob):
    value, context = KNOB_VALUES[knob]
    _, before = _compose(SCRIPT, tuple(sorted(context.items())))
    after = _compose_changed(SCRIPT, context, {knob: value})
    old, new = _flat(before), _flat(after)
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    assert changed, f"{knob}={value} changed nothing in the composed config"
    read = [k for k in changed if running_reader(k, after) is not None]
    assert read, f"{knob}={value} changed only keys verl 0.9.1's V1 engine path does not read: {changed}"


def test_the_sweep_sets_only_read_keys():
    for command in dry_run(SWEEP_SCRIPT, SWEEP_GROUP_SIZES="2"):
        for key in keys_set(command.overrides):
            assert reader_of(key) is not None, key


def test_the_cpu_run_scripts_are_found_by_name():
    found = cpu_run_scripts()
    assert set(CPU_RUN_SCRIPTS) <= set(found), (
        f"not matched by {CPU_RUN_SCRIPT_GLOB}: {sorted(set(CPU_RUN_SCRIPTS) - set(found))}"
    )
    for script in found:
        cpu_model(script)  # every one is run_<method>_<model>.sh


@pytest.mark.parametrize(("script", "variables"), _cpu_cases())
def test_every_key_a_cpu_recipe_sets_is_read_on_the_path_that_runs(script, variables):
    command, cfg = _compose(script, tuple(sorted(variables.items())))
    assert cfg.actor_rollout_ref.rollout.name == variables["ROLLOUT_NAME"]
    check_every_key_is_read(f"{script} {variables}", command.overrides, cfg)


def test_the_cpu_knobs_are_the_cpu_platforms():
    from dfpo.launch.recipe_knobs import KNOBS

    assert {k.name for k in KNOBS if k.platform == "cpu"} | {"ROLLOUT_NAME"} == set(CPU_KNOB_VALUES)


def test_an_idle_key_set_on_the_command_line_is_refused():
    """The mutant of the exemption: a listed key set by an override (not a file) still fails."""
    command, cfg = _compose(CPU_SCRIPT, (("ROLLOUT_NAME", "local"),))
    with pytest.raises(AssertionError, match="gpu_memory_utilization"):
        check_every_key_is_read(
            "mutant", [*command.overrides, "actor_rollout_ref.rollout.gpu_memory_utilization=0.5"], cfg
        )


@pytest.mark.parametrize("knob", sorted(CPU_KNOB_VALUES))
def test_every_cpu_knob_changes_a_key_that_is_read(knob):
    value, context = CPU_KNOB_VALUES[knob]
    _, before = _compose(CPU_SCRIPT, tuple(sorted(context.items())))
    after = _compose_changed(CPU_SCRIPT, context, {knob: value})
    old, new = _flat(before), _flat(after)
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    assert changed, f"{knob}={value} changed nothing in the composed config"
    read = [k for k in changed if running_reader(k, after) is not None]
    assert read, f"{knob}={value} changed only keys nothing reads on the CPU path: {changed}"


def test_a_derived_config_equals_a_full_compose():
    variables = (("ROLLOUT_NAME", "local"), ("TRAINER_MODE", "separate_async"), ("USE_KL_LOSS", "true"))
    _compose(CPU_SCRIPT, (("ROLLOUT_NAME", "local"),))  # a base whose keys are a subset
    command, derived = _compose(CPU_SCRIPT, variables)
    assert any(keys < _override_keys(command.overrides) for keys, _ in _COMPOSED), "nothing to derive from"
    assert _flat(derived) == _flat(compose_trainer_config(command.overrides, config_name="dfpo_trainer"))
    assert derived.actor_rollout_ref.actor.use_kl_loss is True  # the kl_loss file's keys are there
