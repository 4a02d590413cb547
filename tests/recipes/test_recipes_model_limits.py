"""Model-specific limits of verl 0.9.1 that the recipes work around, each with a test that the
reason still holds in the installed verl/transformers (so an upgrade that removes it is noticed).
"""

from __future__ import annotations

import inspect

import pytest

from dfpo.launch.preflight import PreflightError
from tests.recipes.recipe_commands import composed_config, preflight_says
from tests.recipes.recipe_expectations import GPU_RUN_SCRIPTS, split_script_name

GPT_OSS_SCRIPTS = sorted(s for s in GPU_RUN_SCRIPTS if split_script_name(s)[1] == "gpt_oss_120b")


def test_the_reason_gpt_oss_cannot_use_ulysses_still_holds():
    """GPT-OSS's attention passes its per-head sinks as ``s_aux``; verl's Ulysses wrapper splits the
    heads over the SP ranks but forwards ``**kwargs`` (``s_aux`` included) untouched, and patches
    only the flash-attention path. When this fails, verl may have learnt to split the sinks:
    re-check, and allow SP>1 in dfpo/launch/preflight.py (check_attention_sinks_with_ulysses) only with a test of equal
    log-probs at SP=1 and SP>1."""
    from transformers.models.gpt_oss import modeling_gpt_oss
    from verl.models.transformers import monkey_patch

    assert "s_aux=self.sinks" in inspect.getsource(modeling_gpt_oss.GptOssAttention.forward)
    ulysses = inspect.getsource(monkey_patch._ulysses_flash_attention_forward)
    assert "gather_seq_scatter_heads(query_states" in ulysses
    assert "s_aux" not in ulysses and "sinks" not in ulysses
    assert "flash_attention._flash_attention_forward = _ulysses_flash_attention_forward" in inspect.getsource(
        monkey_patch
    )


@pytest.mark.parametrize("script", GPT_OSS_SCRIPTS)
def test_gpt_oss_runs_without_sequence_parallel(script):
    cfg = composed_config(script)
    actor = cfg.actor_rollout_ref.actor
    longest = cfg.data.max_prompt_length + cfg.data.max_response_length
    assert actor.ulysses_sequence_parallel_size == 1
    # budgets re-derived for SP=1: one full-length sequence per micro-batch
    assert actor.ppo_max_token_len_per_gpu == longest
    assert cfg.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu == longest


def test_gpt_oss_refuses_ulysses(tmp_path):
    """Refused before Ray by name (the recipe's dfpo.model) and by the checkpoint's model_type."""
    with pytest.raises(
        PreflightError, match=r"ulysses_sequence_parallel_size=4 with a GPT-OSS checkpoint.*attention sinks"
    ):
        preflight_says(GPT_OSS_SCRIPTS[0], SP_SIZE="4")
    checkpoint = tmp_path / "some-gpt-oss"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text('{"model_type": "gpt_oss"}')
    with pytest.raises(PreflightError, match="attention sinks"):
        preflight_says("run_gspo_qwen3_32b.sh", MODEL_PATH=str(checkpoint), SP_SIZE="4")
    (checkpoint / "config.json").write_text('{"model_type": "qwen3"}')
    preflight_says("run_gspo_qwen3_32b.sh", MODEL_PATH=str(checkpoint), SP_SIZE="4")


@pytest.mark.parametrize("script", sorted(GPU_RUN_SCRIPTS))
def test_unpacked_micro_batches_are_bounded_in_padded_tokens(script):
    """Without packing, verl pads every row of a micro-batch to its longest row. Dynamic batching
    bounds real tokens only (30k + 2.4k + 2.4k fit 34,816 and pad to ~90k), so a recipe that does
    not pack must use fixed micro-batches of one sequence, for training and log-probs alike."""
    cfg = composed_config(script)
    if cfg.actor_rollout_ref.model.use_remove_padding:
        return
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert actor.use_dynamic_bsz is False and rollout.log_prob_use_dynamic_bsz is False
    assert actor.ppo_micro_batch_size_per_gpu == 1 and rollout.log_prob_micro_batch_size_per_gpu == 1


def test_unpacked_dynamic_batching_is_warned_about():
    said = preflight_says(
        "run_gspo_qwen3_next_80b_a3b_thinking.sh",
        USE_DYNAMIC_BSZ="true",
        PPO_MAX_TOKEN_LEN_PER_GPU="34816",
        LOG_PROB_MAX_TOKEN_LEN_PER_GPU="34816",
    )
    warnings = [text for text in said if "use_remove_padding=false with dynamic batching" in text]
    assert len(warnings) == 1 and "USE_DYNAMIC_BSZ=false" in warnings[0]
    assert not any(
        "use_remove_padding=false" in text for text in preflight_says("run_gspo_qwen3_next_80b_a3b_thinking.sh")
    )
