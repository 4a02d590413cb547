"""The memory plan (dfpo/launch/memory_plan.py): every shipped GPU recipe fits an 80 GB GPU with a margin,
dfpo.main says the plan of the config it runs, and the estimate's parts follow their formulas."""

from __future__ import annotations

import re

import pytest

from dfpo.launch import memory_plan as mp
from dfpo.launch.preflight import memory_plan_report as mp_report
from tests.recipes.recipe_commands import composed_config, preflight_says
from tests.recipes.recipe_expectations import GPU_RUN_SCRIPTS, split_script_name

GPU_MEMORY_GB = 80.0
MARGIN = 0.10  # the estimate must leave 10% of the GPU (8 GB) for what it does not model


@pytest.mark.parametrize("script", sorted(GPU_RUN_SCRIPTS))
def test_every_recipe_fits_an_80_gb_gpu_with_a_margin(script):
    settings = mp.settings_from_config(composed_config(script), GPU_MEMORY_GB)
    phases = mp.plan(mp.KNOWN_MODELS[split_script_name(script)[1]], settings)
    phase, total = mp.peak(phases)
    assert total <= (1 - MARGIN) * GPU_MEMORY_GB, f"{script}: {phase} needs ~{total:.1f} GB per GPU\n" + mp.render(
        script, phases, GPU_MEMORY_GB
    )


def _plan(said: list[str]) -> str:
    (text,) = [t for t in said if t.startswith("memory plan per GPU")]
    return text


@pytest.mark.parametrize("script", ["run_gspo_qwen3_32b.sh", "run_grpo_qwen3_next_80b_a3b_thinking.sh"])
def test_the_launch_says_the_plan_of_the_config_it_runs(script):
    """dfpo.main's preflight prints the plan of the composed config, for the model dfpo.model names."""
    printed = re.search(r"peak: (.+?), ([\d.]+) GB", _plan(preflight_says(script)))
    settings = mp.settings_from_config(composed_config(script), GPU_MEMORY_GB)
    phase, total = mp.peak(mp.plan(mp.KNOWN_MODELS[split_script_name(script)[1]], settings))
    assert printed.group(1) == phase and float(printed.group(2)) == pytest.approx(total, abs=0.05)


def test_the_plan_follows_the_recipe_knobs():
    base = _plan(preflight_says("run_gspo_qwen3_32b.sh"))
    halved = _plan(preflight_says("run_gspo_qwen3_32b.sh", NNODES="2"))

    def update(text):
        return float(re.search(r"actor update\s+([\d.]+) GB", text).group(1))

    assert update(halved) > update(base)  # half the ranks: twice the optimizer-state shards


def test_a_model_without_a_plan_is_said(tmp_path):
    checkpoint = tmp_path / "my-model"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text('{"num_hidden_layers": 3, "hidden_size": 64, "vocab_size": 100}')
    config = composed_config("run_gspo_qwen3_32b.sh").copy()
    config.dfpo.model = None
    config.actor_rollout_ref.model.path = str(checkpoint)
    assert "no memory plan for" in mp_report(config) and "config.json matches no model" in mp_report(config)
    (checkpoint / "config.json").write_text('{"num_hidden_layers": 64, "hidden_size": 5120, "vocab_size": 151936}')
    assert mp_report(config).startswith("memory plan per GPU for qwen3_32b")  # found by its shape
    config.dfpo.model = "my_model"
    assert "no memory shape for model 'my_model'" in mp_report(config)
    config.trainer.device = "cpu"
    assert mp_report(config) is None


def test_the_parts_follow_their_formulas():
    shape = mp.ModelShape(params=80e9, layers=48, hidden=2048, vocab=151936)
    settings = mp.Settings(
        nnodes=4,
        gpus_per_node=8,
        sp=1,
        rollout_tp=4,
        gpu_memory_gb=80,
        gpu_memory_utilization=0.7,
        max_prompt=2048,
        max_response=32768,
        dynamic_bsz=False,
        ppo_tokens=0,
        log_prob_tokens=0,
        ppo_micro_batch=1,
        log_prob_micro_batch=1,
        param_offload=True,
        optimizer_offload=True,
        gradient_checkpointing=True,
        entropy_chunking=True,
    )
    update = mp.plan(shape, settings)["actor update"]
    assert update["Adam states (fp32)"] == pytest.approx(8 * 80e9 / 32 / 1e9)
    assert update["logits + gradient"] == pytest.approx(34816 * 151936 * 4 / 1e9)
    # the example: 30k + 2.4k + 2.4k under dynamic batching pads to ~90k tokens, ~27 GB of bf16 logits
    assert 3 * 30000 * 151936 * 2 / 1e9 == pytest.approx(27.3, abs=0.1)
    rollout = mp.plan(shape, settings)["rollout (vLLM)"]
    assert rollout["vLLM weights + KV cache"] == pytest.approx(56.0) and rollout["actor state kept on GPU"] == 0
