"""Every GPU recipe composes into the verl 0.9.1 config it claims, and verl would accept it.

For each ``recipes/run_*.sh``: DRY_RUN prints the command; its Hydra overrides are composed against
``dfpo/config/dfpo_trainer.yaml`` exactly as ``python -m dfpo.main`` composes them (unknown keys fail
there); then the checks ``dfpo.main`` runs before training (verl's ``validate_config`` and
``check_trainer_mode``) run too, verl's config dataclasses are built, and the selected method,
group size, model settings and reward wiring are compared with tests/recipes/recipe_expectations.py.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER
from verl.trainer.ppo.reward import resolve_reward_manager_cls
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config
from verl.utils.import_utils import load_extern_object

from dfpo.main import check_trainer_mode
from dfpo.verl.loss_config import DFPOPolicyLossConfig
from reward.options import RewardOptions
from tests.recipes.recipe_commands import (
    DUMMY_MODEL_PATH,
    RECIPES_DIR,
    REPO_ROOT,
    TEST_HOME,
    composed_config,
    default_command,
)
from tests.recipes.recipe_expectations import (
    ALLOWED_NEW_KEY_PARENTS,
    CPU_RUN_SCRIPTS,
    DEFAULT_GROUP_SIZE,
    EXPECTED_RUN_SCRIPTS,
    GPU_RUN_SCRIPTS,
    LEGACY_TOP_LEVEL_SECTIONS,
    METHODS,
    THINKING_MIN_RESPONSE_LENGTH,
    split_script_name,
)

RUN_SCRIPTS = sorted(GPU_RUN_SCRIPTS)  # the paper grid and the newcomer recipes
PAPER_SCRIPTS = frozenset(EXPECTED_RUN_SCRIPTS)


def test_the_recipe_folder_holds_exactly_the_expected_run_scripts():
    present = {p.name for p in RECIPES_DIR.glob("run_*.sh")}
    expected = GPU_RUN_SCRIPTS | CPU_RUN_SCRIPTS
    assert present == expected, f"missing: {sorted(expected - present)}, unexpected: {sorted(present - expected)}"


@pytest.mark.parametrize("script", RUN_SCRIPTS)
def test_recipe_selects_its_method(script):
    method, _ = split_script_name(script)
    expected = METHODS[method]
    cfg = composed_config(script)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    algorithm = omega_conf_to_dataclass(cfg.algorithm)

    assert algorithm.adv_estimator == expected.adv_estimator
    assert algorithm.norm_adv_by_std_in_grpo is True
    assert actor.policy_loss.loss_mode == expected.loss_mode
    assert actor.loss_agg_mode == expected.loss_agg_mode
    if expected.clip_ratio is not None:
        assert (actor.clip_ratio_low, actor.clip_ratio_high) == expected.clip_ratio
    if expected.loss_mode == "dfpo":
        options = actor.policy_loss
        assert isinstance(options, DFPOPolicyLossConfig)
        assert options.dfpo_transform == expected.dfpo_transform
        assert options.dfpo_stop_grad is expected.dfpo_stop_grad
        assert options.dfpo_scope == "all"
        assert options.dfpo_exact_groups is True
        if expected.dfpo_scale is not None:
            assert options.dfpo_scale == expected.dfpo_scale
    # the same group size, objective-independent settings and no KL for every method
    if script in PAPER_SCRIPTS:
        assert cfg.actor_rollout_ref.rollout.n == DEFAULT_GROUP_SIZE
    assert actor.use_kl_loss is False and cfg.algorithm.use_kl_in_reward is False
    assert actor.entropy_coeff == 0


@pytest.mark.parametrize("script", RUN_SCRIPTS)
def test_recipe_passes_the_checks_dfpo_main_runs_before_training(script):
    cfg = composed_config(script)
    check_trainer_mode(cfg)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert not need_reference_policy(cfg) and not need_critic(cfg)
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    assert rollout.n == cfg.actor_rollout_ref.rollout.n


@pytest.mark.parametrize("script", RUN_SCRIPTS)
def test_recipe_resources_are_consistent(script):
    cfg = composed_config(script)
    actor, rollout, ref = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.ref
    gpus_per_node = cfg.trainer.n_gpus_per_node
    sp = actor.ulysses_sequence_parallel_size
    longest = cfg.data.max_prompt_length + cfg.data.max_response_length
    if actor.use_dynamic_bsz:
        # verl's dynamic batching packs max_token_len_per_gpu × SP tokens per micro-batch and
        # asserts that the longest sequence fits (verl/utils/seqlen_balancing.py)
        assert actor.ppo_max_token_len_per_gpu * sp >= longest
        assert rollout.log_prob_max_token_len_per_gpu * sp >= longest
        assert ref.log_prob_max_token_len_per_gpu * ref.ulysses_sequence_parallel_size >= longest
    else:
        assert actor.ppo_micro_batch_size_per_gpu >= 1 and rollout.log_prob_micro_batch_size_per_gpu >= 1
    assert ref.ulysses_sequence_parallel_size == sp
    # FSDP2 for actor and reference (verl syncs the engine's strategy from the actor's)
    assert omega_conf_to_dataclass(actor).fsdp_config.strategy == "fsdp2"
    assert ref.strategy == "fsdp2"
    # vLLM replicas and Ulysses groups stay inside a node
    assert gpus_per_node % rollout.tensor_model_parallel_size == 0
    assert gpus_per_node % sp == 0
    if sp > 1:
        assert cfg.actor_rollout_ref.model.use_remove_padding is True  # Ulysses needs packed inputs
    # whole mini-batches per step
    assert cfg.data.train_batch_size % actor.ppo_mini_batch_size == 0
    if script in PAPER_SCRIPTS:
        assert cfg.data.max_response_length >= THINKING_MIN_RESPONSE_LENGTH
    assert rollout.prompt_length == cfg.data.max_prompt_length
    assert rollout.response_length == cfg.data.max_response_length


@pytest.mark.parametrize("script", RUN_SCRIPTS)
def test_recipe_reads_the_model_and_the_prepared_data(script):
    cfg = composed_config(script)
    data_dir = f"{TEST_HOME}/data/dfpo"
    assert cfg.actor_rollout_ref.model.path == DUMMY_MODEL_PATH
    assert list(cfg.data.train_files) == [f"{data_dir}/math_train.parquet", f"{data_dir}/code_train.parquet"]
    assert list(cfg.data.val_files) == [f"{data_dir}/{name}.parquet" for name in ("aime25", "hmmt25", "lcb_v6")]
    assert cfg.data.prompt_key == "prompt"
    assert cfg.data.filter_overlong_prompts is True and cfg.data.truncation == "error"


@pytest.mark.parametrize("script", RUN_SCRIPTS)
def test_recipe_wires_the_projects_reward_through_verl_0_9_1_keys(script):
    cfg = composed_config(script)
    reward = cfg.reward
    assert Path(reward.custom_reward_function.path) == REPO_ROOT / "reward" / "score.py"
    # verl loads the scorer by file path, exactly like this (verl.trainer.ppo.reward.get_custom_reward_fn)
    scorer = load_extern_object(
        module_path=reward.custom_reward_function.path, object_name=reward.custom_reward_function.name
    )
    assert callable(scorer) and reward.custom_reward_function.name == "compute_score"
    RewardOptions.from_kwargs(OmegaConf.to_container(reward.custom_reward_function.reward_kwargs))
    # verl resolves the manager the recipe names: its registered naive one, or (thinking models) that one
    # plus the cut-off flag, loaded by file path (verl.trainer.ppo.reward.resolve_reward_manager_cls)
    manager = resolve_reward_manager_cls(cfg)
    if reward.reward_manager.source == "register":
        assert reward.reward_manager.name in REWARD_MANAGER and manager is REWARD_MANAGER["naive"]
    else:
        assert Path(reward.reward_manager.module.path) == REPO_ROOT / "reward" / "verl_reward_manager.py"
        assert manager.__name__ == "TruncationAwareRewardManager" and issubclass(manager, REWARD_MANAGER["naive"])
        assert reward.custom_reward_function.reward_kwargs.response_format != "plain"
    # nothing reached the legacy top-level sections that 0.9.1's main_ppo ignores
    assert all(value is None for value in cfg.custom_reward_function.values())
    assert cfg.reward_model.reward_manager is None and cfg.reward_model.model.path is None
    assert all(value is None for value in cfg.sandbox_fusion.values())


@pytest.mark.parametrize("script", RUN_SCRIPTS)
def test_recipe_adds_keys_only_where_verl_reads_free_form_dicts(script):
    base = composed_config(script)  # the recipe's own config, to look up where '+' keys landed
    for override in default_command(script).overrides:
        key = override.split("=", 1)[0]
        assert not key.startswith("~"), f"{script} deletes a config key: {override}"
        bare = key.lstrip("+")
        assert not bare.startswith(tuple(s + "." for s in LEGACY_TOP_LEVEL_SECTIONS)), (
            f"{script} sets {bare}, a key verl 0.9.1's main_ppo ignores; use the reward.* keys"
        )
        if key.startswith("+"):
            parent = bare.rsplit(".", 1)[0]
            assert parent in ALLOWED_NEW_KEY_PARENTS, (
                f"{script} adds {bare}: verl reads new keys only under {sorted(ALLOWED_NEW_KEY_PARENTS)}"
            )
            assert OmegaConf.select(base, bare) is not None


@pytest.mark.parametrize("script", RUN_SCRIPTS)
def test_recipe_names_and_logs_its_run(script):
    method, model = split_script_name(script)
    cfg = composed_config(script)
    name = cfg.trainer.experiment_name
    assert name == f"{method}-{model}-g{cfg.actor_rollout_ref.rollout.n}-seed1"
    assert cfg.trainer.default_local_dir == f"{TEST_HOME}/dfpo_runs/checkpoints/dfpo/{name}"
    assert "file" in cfg.trainer.logger and "console" in cfg.trainer.logger
    file_log = cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH
    assert file_log.startswith(f"{TEST_HOME}/dfpo_runs/logs/dfpo/{name}.") and file_log.endswith(".jsonl")
    assert cfg.trainer.resume_mode == "auto" and cfg.trainer.max_actor_ckpt_to_keep == 3


def test_recipes_have_distinct_experiment_names():
    names = [composed_config(script).trainer.experiment_name for script in RUN_SCRIPTS]
    assert len(set(names)) == len(names)


# ---- model-specific settings, each with the reason it exists --------------------------------------


def _scripts_for(model: str) -> list[str]:
    return [s for s in RUN_SCRIPTS if split_script_name(s)[1] == model]


@pytest.mark.parametrize("script", _scripts_for("qwen3_32b"))
def test_qwen3_32b_trains_in_thinking_mode(script):
    cfg = composed_config(script)
    assert OmegaConf.to_container(cfg.data.apply_chat_template_kwargs) == {"enable_thinking": True}
    assert cfg.actor_rollout_ref.model.use_remove_padding is True


@pytest.mark.parametrize("script", _scripts_for("qwen3_next_80b_a3b_thinking"))
def test_qwen3_next_never_packs_sequences(script):
    cfg = composed_config(script)
    assert cfg.actor_rollout_ref.model.use_remove_padding is False
    assert cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size == 1
    assert OmegaConf.to_container(cfg.data.apply_chat_template_kwargs) == {}


def test_the_reason_qwen3_next_cannot_pack_still_holds():
    """verl's FSDP engine passes packed-sequence boundaries only to models whose forward takes
    ``cu_seqlens``; transformers' Qwen3-Next does not, and its Gated DeltaNet layers take the
    boundaries from ``cu_seq_lens_q`` alone. When this fails, packing may have become safe: re-check
    and re-enable use_remove_padding in dfpo/config/base_model/qwen3_next_80b_a3b_thinking.yaml."""
    from transformers.models.qwen3_next import modeling_qwen3_next
    from verl.workers.engine.fsdp import transformer_impl

    assert "cu_seqlens" not in inspect.signature(modeling_qwen3_next.Qwen3NextForCausalLM.forward).parameters
    assert 'kwargs.get("cu_seq_lens_q")' in inspect.getsource(modeling_qwen3_next.Qwen3NextGatedDeltaNet.forward)
    assert '"cu_seqlens" in signature(module.forward).parameters' in inspect.getsource(transformer_impl)


@pytest.mark.parametrize("script", _scripts_for("gpt_oss_120b"))
def test_gpt_oss_uses_sink_attention_and_high_reasoning_effort(script):
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssPreTrainedModel

    cfg = composed_config(script)
    attention = cfg.actor_rollout_ref.model.override_config.attn_implementation
    sink_capable = set(GptOssPreTrainedModel._compatible_flash_implementations) | {"flex_attention", "eager"}
    assert GptOssPreTrainedModel._supports_flex_attn
    assert attention in sink_capable
    assert OmegaConf.to_container(cfg.data.apply_chat_template_kwargs) == {"reasoning_effort": "high"}
    assert cfg.actor_rollout_ref.rollout.val_kwargs.temperature == 1.0
