"""The GPT-OSS recipes' training attention (dfpo/config/base_model/gpt_oss_120b.yaml): one whose
backward trains the learned sinks, as the doctor judges it, never a mask-based one on packed rows
(GptOssModel's masks ignore packed position ids: tests/cpu/test_sink_attention.py), and the
GPT_OSS_ATTN_IMPLEMENTATION knob reaching verl's key."""

from __future__ import annotations

import pytest

from dfpo.launch.doctor import FAIL, OK, SINK_ATTENTION_DIFFERENTIATED, check_gpt_oss_attention
from dfpo.launch.sink_attention_check import ATTENTION_KEY, recipe_attention
from tests.recipes.recipe_commands import composed_config, dry_run
from tests.recipes.recipe_expectations import GPU_RUN_SCRIPTS, split_script_name

GPT_OSS_SCRIPTS = sorted(s for s in GPU_RUN_SCRIPTS if split_script_name(s)[1] == "gpt_oss_120b")


@pytest.mark.parametrize("script", GPT_OSS_SCRIPTS)
def test_gpt_oss_trains_its_sinks_with_flex_attention_unpacked(script):
    cfg = composed_config(script)
    attention = cfg.actor_rollout_ref.model.override_config.attn_implementation
    assert attention == recipe_attention({}) == "flex_attention"
    assert attention in SINK_ATTENTION_DIFFERENTIATED and check_gpt_oss_attention(attention).status == OK
    # a mask-based attention on packed rows attends across sequences in GPT-OSS: padded rows of one sequence
    assert cfg.actor_rollout_ref.model.use_remove_padding is False
    assert cfg.actor_rollout_ref.actor.use_dynamic_bsz is False
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 1
    assert cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu == 1


def test_the_knob_reaches_verls_attention_key_and_the_doctor_judges_it():
    script = GPT_OSS_SCRIPTS[0]
    (command,) = dry_run(script, GPT_OSS_ATTN_IMPLEMENTATION="kernels-community/vllm-flash-attn3")
    assert f"{ATTENTION_KEY}=kernels-community/vllm-flash-attn3" in [o.replace("'", "") for o in command.overrides]
    assert check_gpt_oss_attention("kernels-community/vllm-flash-attn3").status == FAIL
