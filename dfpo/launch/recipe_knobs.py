"""The recipes' environment knobs, each with the one config key it sets (docs/recipes.md, "Knobs").

A recipe's values live in its config files (``dfpo/config/recipe_defaults.yaml``, the model's
``base_model/<name>.yaml``, the method's ``method/<name>.yaml``). A knob exported in the
environment is one Hydra override of its key, emitted only when it is set, so an unset knob leaves
the files' value and the files are the one place a default is written. Values are checked here
(a positive integer, a boolean, a path Hydra can take) and the error names the knob.

Four knobs choose rather than set, and are :func:`dfpo.launch.recipe.recipe_overrides`'s:
``TRAINER_MODE`` (a ``trainer_mode`` file), ``USE_KL_LOSS`` (``kl_loss=low_var_kl``),
``USE_DYNAMIC_BSZ=false`` (fixed micro-batches, default one sequence each) and ``ROLLOUT_IS``
(with its threshold).

Standard library only: ``scripts/launch/ray_job_submit.sh`` runs this file on the submitting
machine (``--job-runtime-env``), where the project need not be installed.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass


class KnobError(ValueError):
    """A knob's value cannot be passed on (the message names the knob and what to do)."""


@dataclass(frozen=True)
class Knob:
    name: str  # the environment variable
    key: str  # the config key it sets ('+' prefix: a key the composed config does not declare)
    kind: str  # int (> 0) | signed (any integer) | bool | float | text | path | paths | raw | choice
    choices: tuple[str, ...] = ()
    platform: str | None = None  # "cpu": only a CPU model's config has the key
    model_key: bool = False  # only for a model whose file sets the key (GPT-OSS's chat template)

    @property
    def config_key(self) -> str:
        return self.key.lstrip("+")


KNOBS: tuple[Knob, ...] = (
    # paths and data
    Knob("MODEL_PATH", "actor_rollout_ref.model.path", "path"),
    Knob("DATA_DIR", "dfpo.data_dir", "path"),
    Knob("TRAIN_FILES", "data.train_files", "paths"),
    Knob("VAL_FILES", "data.val_files", "paths"),
    Knob("OUTPUT_ROOT", "dfpo.output_root", "path"),
    Knob("CKPT_DIR", "trainer.default_local_dir", "path"),
    Knob("LOG_DIR", "dfpo.log_dir", "path"),
    # cluster, batch, lengths
    Knob("NNODES", "trainer.nnodes", "int"),
    Knob("GPUS_PER_NODE", "trainer.n_gpus_per_node", "int"),
    Knob("GROUP_SIZE", "actor_rollout_ref.rollout.n", "int"),
    Knob("TRAIN_BATCH_SIZE", "data.train_batch_size", "int"),
    Knob("PPO_MINI_BATCH_SIZE", "actor_rollout_ref.actor.ppo_mini_batch_size", "int"),
    Knob("PPO_EPOCHS", "actor_rollout_ref.actor.ppo_epochs", "int"),
    Knob("MAX_PROMPT_LENGTH", "data.max_prompt_length", "int"),
    Knob("MAX_RESPONSE_LENGTH", "data.max_response_length", "int"),
    Knob("SEED", "data.seed", "int"),
    Knob("TOTAL_TRAINING_STEPS", "trainer.total_training_steps", "int"),
    Knob("TOTAL_EPOCHS", "trainer.total_epochs", "int"),
    # model, memory, parallelism
    Knob("SP_SIZE", "actor_rollout_ref.actor.ulysses_sequence_parallel_size", "int"),
    Knob("ROLLOUT_TP", "actor_rollout_ref.rollout.tensor_model_parallel_size", "int"),
    Knob("USE_REMOVE_PADDING", "actor_rollout_ref.model.use_remove_padding", "bool"),
    Knob("USE_DYNAMIC_BSZ", "actor_rollout_ref.actor.use_dynamic_bsz", "bool"),
    Knob("PPO_MAX_TOKEN_LEN_PER_GPU", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "int"),
    Knob("LOG_PROB_MAX_TOKEN_LEN_PER_GPU", "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", "int"),
    Knob("PPO_MICRO_BATCH_SIZE_PER_GPU", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "int"),
    Knob("LOG_PROB_MICRO_BATCH_SIZE_PER_GPU", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", "int"),
    Knob("GRADIENT_CHECKPOINTING", "actor_rollout_ref.model.enable_gradient_checkpointing", "bool"),
    Knob("ACTOR_STRATEGY", "actor_rollout_ref.actor.strategy", "choice", ("fsdp", "fsdp2")),
    Knob("ENTROPY_CHUNKING", "actor_rollout_ref.actor.entropy_from_logits_with_chunking", "bool"),
    Knob("PARAM_OFFLOAD", "actor_rollout_ref.actor.fsdp_config.param_offload", "bool"),
    Knob("OPTIMIZER_OFFLOAD", "actor_rollout_ref.actor.fsdp_config.optimizer_offload", "bool"),
    Knob("FSDP_SIZE", "actor_rollout_ref.actor.fsdp_config.fsdp_size", "raw"),
    # optimizer and PPO loop
    Knob("LR", "actor_rollout_ref.actor.optim.lr", "float"),
    Knob(
        "LR_WARMUP_STEPS", "actor_rollout_ref.actor.optim.lr_warmup_steps", "signed"
    ),  # -1: verl's lr_warmup_steps_ratio
    Knob("WEIGHT_DECAY", "actor_rollout_ref.actor.optim.weight_decay", "float"),
    Knob("GRAD_CLIP", "actor_rollout_ref.actor.optim.clip_grad", "float"),
    Knob("ACTOR_SHUFFLE", "actor_rollout_ref.actor.shuffle", "bool"),
    Knob("ENTROPY_COEFF", "actor_rollout_ref.actor.entropy_coeff", "float"),
    Knob("KL_LOSS_COEF", "actor_rollout_ref.actor.kl_loss_coef", "float"),
    Knob("ROLLOUT_IS_THRESHOLD", "algorithm.rollout_correction.rollout_is_threshold", "float"),
    # rollout and validation sampling
    Knob("ROLLOUT_NAME", "actor_rollout_ref.rollout.name", "text"),
    Knob("GPU_MEMORY_UTILIZATION", "actor_rollout_ref.rollout.gpu_memory_utilization", "float"),
    Knob("TEMPERATURE", "actor_rollout_ref.rollout.temperature", "float"),
    Knob("TOP_P", "actor_rollout_ref.rollout.top_p", "float"),
    Knob("TOP_K", "actor_rollout_ref.rollout.top_k", "raw"),
    Knob("VAL_N", "actor_rollout_ref.rollout.val_kwargs.n", "int"),
    Knob("VAL_TEMPERATURE", "actor_rollout_ref.rollout.val_kwargs.temperature", "float"),
    Knob("VAL_TOP_P", "actor_rollout_ref.rollout.val_kwargs.top_p", "float"),
    Knob("VAL_TOP_K", "actor_rollout_ref.rollout.val_kwargs.top_k", "raw"),
    Knob(
        "GPT_OSS_REASONING_EFFORT",
        "data.apply_chat_template_kwargs.reasoning_effort",
        "choice",
        ("low", "medium", "high"),
        model_key=True,
    ),
    Knob(
        "GPT_OSS_ATTN_IMPLEMENTATION",
        "actor_rollout_ref.model.override_config.attn_implementation",
        "text",
        model_key=True,
    ),
    # reward
    Knob("REWARD_SCORE_MODE", "reward.custom_reward_function.reward_kwargs.score_mode", "text"),
    Knob("CODE_BACKEND", "reward.custom_reward_function.reward_kwargs.code_backend", "text"),
    Knob("SANDBOX_FUSION_URL", "+reward.custom_reward_function.reward_kwargs.sandbox_fusion_url", "text"),
    Knob("REWARD_MANAGER", "reward.reward_manager.name", "text"),
    Knob("REWARD_NUM_WORKERS", "reward.num_workers", "int"),
    # trainer
    Knob("PROJECT_NAME", "trainer.project_name", "text"),
    Knob("EXPERIMENT_NAME", "trainer.experiment_name", "text"),
    Knob("LOGGER", "trainer.logger", "raw"),
    Knob("SAVE_FREQ", "trainer.save_freq", "raw"),
    Knob("MAX_CKPT_TO_KEEP", "trainer.max_actor_ckpt_to_keep", "raw"),
    Knob("TEST_FREQ", "trainer.test_freq", "raw"),
    Knob("VAL_BEFORE_TRAIN", "trainer.val_before_train", "bool"),
    Knob("RESUME_MODE", "trainer.resume_mode", "text"),
    Knob("ROLLOUT_NNODES", "dfpo.separate_async.rollout_nnodes", "int"),
    Knob("ROLLOUT_GPUS_PER_NODE", "dfpo.separate_async.rollout_gpus_per_node", "int"),
    Knob("CHECKPOINT_ENGINE", "dfpo.separate_async.checkpoint_engine", "text"),
    # the CPU platform (dfpo/config/platform/cpu.yaml)
    Knob("ACTOR_DTYPE", "dfpo.cpu.actor_dtype", "choice", ("auto", "fp32", "bf16"), platform="cpu"),
    Knob("ROLLOUT_DTYPE", "dfpo.cpu.rollout_dtype", "choice", ("auto", "float32", "bfloat16"), platform="cpu"),
    Knob("CPU_THREADS_PER_RANK", "dfpo.cpu.threads_per_rank", "int", platform="cpu"),
    Knob("VLLM_KV_CACHE_GB", "dfpo.cpu.vllm_kv_cache_gb", "int", platform="cpu"),
    Knob("VLLM_CPU_OMP_THREADS_BIND", "dfpo.cpu.omp_threads_bind", "text", platform="cpu"),
    Knob("VLLM_BLOCK_SIZE", "actor_rollout_ref.rollout.engine_kwargs.vllm.block_size", "int", platform="cpu"),
    Knob(
        "WEIGHT_BUCKET_MB",
        "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes",
        "int",
        platform="cpu",
    ),
    Knob("RAY_OBJECT_STORE_BYTES", "ray_kwargs.ray_init.object_store_memory", "int", platform="cpu"),
)

# the knobs that choose a config file or add conditional keys (dfpo.launch.recipe.recipe_overrides)
CHOOSING_KNOBS = ("TRAINER_MODE", "USE_KL_LOSS", "ROLLOUT_IS")

# read by the launch itself, not mapped to a key
LAUNCH_VARIABLES = ("DRY_RUN", "PYTHON", "RAY_DEDUP_LOGS", "ALLOW_LOCAL_CHECKPOINTS")

# besides the knobs, what a job submitted to a running cluster needs from the submitting shell:
# the Hugging Face cache and dfpo.main's node-watch and preemption settings
JOB_ENVIRONMENT = (
    "HF_HOME",
    "HF_HUB_OFFLINE",
    "DFPO_NODE_WATCH_S",
    "DFPO_PREEMPT_GRACE_S",
    "GPU_MEMORY_GB",  # the memory plan's GPU size (dfpo/launch/preflight.py)
    # the code reward's sandbox (reward/sandbox): its level, uids, and the opt-in to a weak level
    "REWARD_SANDBOX_ISOLATION",
    "REWARD_SANDBOX_UID_BASE",
    "REWARD_SANDBOX_ALLOW_WEAK",
)

BY_NAME = {knob.name: knob for knob in KNOBS}


def names() -> list[str]:
    """Every environment variable a recipe reads."""
    return [knob.name for knob in KNOBS] + list(CHOOSING_KNOBS) + list(LAUNCH_VARIABLES)


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_POSITIVE_INT = re.compile(r"[1-9][0-9]*")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def is_true(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise KnobError(f"{name}: expected a boolean (1/0, true/false), got '{value}'")


def expand_home(path: str, environ: dict[str, str]) -> str:
    """A leading ``~/`` becomes ``$HOME/`` (Hydra and verl do not expand it)."""
    return environ.get("HOME", os.path.expanduser("~")) + path[1:] if path.startswith("~/") else path


def quoted(name: str, text: str) -> str:
    """``text`` as a single-quoted Hydra string (paths and names may hold characters Hydra parses)."""
    if "'" in text or "\\" in text:
        raise KnobError(
            f"{name}: cannot pass '{text}' to Hydra: it contains a quote or a backslash; rename or link the path"
        )
    return f"'{text}'"


def hydra_value(knob: Knob, value: str, environ: dict[str, str]) -> str:
    """The Hydra override value of ``knob`` set to ``value`` (checked)."""
    name = knob.name
    if knob.kind == "int":
        if not _POSITIVE_INT.fullmatch(value):
            raise KnobError(f"{name} must be a positive integer, got '{value}'")
        return value
    if knob.kind == "signed":
        if not re.fullmatch(r"-?[0-9]+", value):
            raise KnobError(f"{name} must be an integer, got '{value}'")
        return value
    if knob.kind == "bool":
        return "true" if is_true(name, value) else "false"
    if knob.kind == "float":
        if not _FLOAT.fullmatch(value):
            raise KnobError(f"{name} must be a number, got '{value}'")
        return value
    if knob.kind == "choice":
        if value not in knob.choices:
            raise KnobError(f"{name} must be one of {', '.join(knob.choices)}, got '{value}'")
        return value
    if knob.kind == "path":
        if not value:
            raise KnobError(f"{name} is set but empty")
        return quoted(name, expand_home(value, environ))
    if knob.kind == "paths":
        files = [expand_home(item, environ) for item in value.split(",") if item]
        if not files:
            raise KnobError(f"{name}: empty file list '{value}'")
        return "[" + ",".join(quoted(name, item) for item in files) + "]"
    if knob.kind == "text":
        return quoted(name, value)
    if knob.kind == "raw":
        if not value.strip():
            raise KnobError(f"{name} is set but empty")
        return value
    raise AssertionError(f"unknown knob kind {knob.kind!r}")


def knob_overrides(
    environ: dict[str, str], platform: str, model_keys: frozenset[str] = frozenset(), say=None
) -> list[str]:
    """One Hydra override per knob set (non-empty) in ``environ``, in the table's order. A knob whose
    key the model's config does not have (a CPU knob with a GPU model; a GPT-OSS knob with another
    model, whose file, ``model_keys``, does not set it) is left out, and ``say`` is told so."""
    overrides = []
    for knob in KNOBS:
        value = environ.get(knob.name)
        if value is None or value == "":
            continue
        if (knob.platform is not None and knob.platform != platform) or (
            knob.model_key and knob.config_key not in model_keys
        ):
            if say is not None:
                where = "the CPU recipes" if knob.platform else "the models whose file sets " + knob.config_key
                say(
                    f"dfpo recipe: {knob.name}={value} not passed: it is a setting of {where}, not of this recipe's "
                    "model"
                )
            continue
        overrides.append(f"{knob.key}={hydra_value(knob, value, environ)}")
    return overrides


def job_environment(environ: dict[str, str]) -> dict[str, str]:
    """What ``ray job submit`` passes on to the recipe on the head node: every knob and launch
    variable set here, and :data:`JOB_ENVIRONMENT`."""
    wanted = set(names()) | set(JOB_ENVIRONMENT)
    return {name: value for name, value in sorted(environ.items()) if name in wanted}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--names"]:
        print("\n".join(names()))
        return 0
    if args == ["--job-runtime-env"]:
        print(json.dumps({"env_vars": job_environment(dict(os.environ))}))
        return 0
    print("usage: python -m dfpo.launch.recipe_knobs --names | --job-runtime-env", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
