"""The engine comparison's arithmetic (dfpo/launch/engine_plan.py), by hand on a small case; its
constants against the recipes as they compose and the models as transformers builds them; the
printout in docs/recipes.md is the command's; the dry run's hook."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from dfpo.launch import engine_plan
from dfpo.launch.engine_plan import Engine, MoEModel, RecipeRun

ROOT = Path(__file__).resolve().parents[2]

TOY = MoEModel(
    name="toy",
    layers=2,
    hidden=4,
    experts=8,
    top_k=2,
    total_params=1000,
    routed_expert_params=800,
    active_params=300,
    attention_heads=2,
    head_dim=3,
    full_attention_layers=1,
    sliding_attention_layers=1,
    sliding_window=2,
    source="test",
)
# 2 nodes x 4 GPUs; 4 prompts x 4 responses = 2 sequences per rank; 2 mini-batches of 1 sequence per rank
TOY_RUN = RecipeRun(
    model="toy",
    nodes=2,
    gpus_per_node=4,
    prompts_per_step=4,
    group_size=4,
    mini_batch_prompts=2,
    epochs=1,
    sequence_tokens=10,
    micro_batch_sequences=1,
    prepass=True,
)


def test_micro_batches_per_rank_by_hand():
    assert engine_plan.micro_batches_per_rank(TOY_RUN) == {"log_prob": 2, "prepass": 1, "update": 2}
    no_prepass = RecipeRun(**{**TOY_RUN.__dict__, "prepass": False, "epochs": 2})
    assert engine_plan.micro_batches_per_rank(no_prepass) == {"log_prob": 2, "prepass": 0, "update": 4}


def test_fsdp2_moves_every_parameter_per_micro_batch():
    assert engine_plan.step_bytes(TOY, TOY_RUN, Engine("fsdp2"), tokens=10) == {
        "log_prob": {"all_gather_into_tensor": 1000 * 2 * 2},  # bf16, 2 forwards
        "prepass": {"all_gather_into_tensor": 1000 * 2 * 1},
        "update": {"all_gather_into_tensor": 1000 * 2 * 2 * 2, "reduce_scatter_tensor": 1000 * 4 * 2},
        "weight_sync": {"all_gather_into_tensor": 1000 * 4},
    }


def test_megatron_ep_moves_tokens_per_micro_batch_and_weights_per_optimizer_step():
    a2a = 10 * 2 * 4 * 2 * 2  # tokens x top_k x hidden x bf16, x 2 layers = 320 B per all-to-all of the model
    local = 200 + 800 / 4  # dense copy + a quarter of the experts
    assert engine_plan.step_bytes(TOY, TOY_RUN, Engine("megatron", 4), tokens=10) == {
        "log_prob": {"all_to_all_single": 2 * a2a * 2},
        "prepass": {"all_to_all_single": 2 * a2a * 1},
        "update": {
            "all_to_all_single": 6 * a2a * 2,
            "reduce_scatter_tensor": local * 4 * 2,  # 2 optimizer steps
            "all_gather_into_tensor": local * 2 * 2,
        },
        "weight_sync": {"all_gather_into_tensor": 1000 * 2},
    }


def test_ep_fsdp_gathers_the_ranks_share_per_micro_batch():
    local = 200 + 800 / 4
    plan = engine_plan.step_bytes(TOY, TOY_RUN, Engine("ep_fsdp", 4), tokens=10)
    assert plan["log_prob"]["all_gather_into_tensor"] == local * 2 * 2
    assert plan["update"]["all_gather_into_tensor"] == local * 2 * 2 * 2
    assert plan["update"]["reduce_scatter_tensor"] == local * 4 * 2


def test_break_even_and_seconds_by_hand():
    # 8 B x 500 params per layer = 12 B x top_k 2 x hidden 4 x T  ->  T = 4000 / 96
    assert engine_plan.break_even_tokens(TOY) == pytest.approx(4000 / 96)
    cost = engine_plan.engine_cost(TOY, TOY_RUN, Engine("fsdp2"), tokens=10)
    wire = 7 / 8 / (engine_plan.INTER_NODE_GB_PER_S * 1e9)  # a ring over 8 ranks on 2 nodes
    assert cost.communication_s["update"] == pytest.approx((8000 + 8000) * wire)
    rate = engine_plan.GPU_BF16_FLOPS * engine_plan.MFU
    flops_per_token = 2 * 300 + 4 * 2 * 3 * (5 + 2)  # full attention over 10/2 tokens, sliding over min(2, 5)
    assert cost.compute_s["update"] == pytest.approx(4 * flops_per_token * 10 * 2 / rate)
    assert cost.step_s == pytest.approx(sum(max(cost.compute_s[p], cost.communication_s[p]) for p in cost.compute_s))
    ep = engine_plan.engine_cost(TOY, TOY_RUN, Engine("megatron", 4), tokens=10)
    a2a = 6 * 320 * 2
    network = engine_plan.INTER_NODE_GB_PER_S * 1e9
    weights = 400 * 4 * 2 + 400 * 2 * 2  # the optimizer steps' reduce-scatters and all-gathers, half of it dense
    assert ep.communication_s["update"] == pytest.approx(
        a2a * 3 / 4 / (engine_plan.NVLINK_GB_PER_S * 1e9)  # ep 4 = one node: NVLink only
        + weights / 2 * wire  # the dense half over all 8 ranks
        + weights / 2 * (1 / 2) / network  # the experts' half over the 2 ranks holding the same experts
    )
    assert ep.step_s == pytest.approx(sum(ep.compute_s.values()) + sum(ep.communication_s.values()))
    assert ep.static_memory_gb == pytest.approx((400 * 6 + 1000 * 12 / 8) / 1e9)


def test_an_ep_group_across_nodes_sends_its_remote_share_over_the_network():
    run = RecipeRun(**{**TOY_RUN.__dict__, "gpus_per_node": 2, "nodes": 4})
    seconds = engine_plan._all_to_all_seconds(800.0, run, ep=8)
    nvlink, network = engine_plan.NVLINK_GB_PER_S * 1e9, engine_plan.INTER_NODE_GB_PER_S * 1e9
    assert seconds == pytest.approx(800 * (1 / 8 / nvlink + 6 / 8 / network))


@pytest.mark.parametrize("name", sorted(engine_plan.RECIPES))
def test_the_recipes_as_they_compose(name):
    from tests.recipes.recipe_commands import composed_config

    config = composed_config(f"run_dfpo_min_replace_{name}.sh")
    assert RecipeRun.from_config(config) == engine_plan.RECIPES[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(engine_plan.MODELS))
def test_the_models_parameters_as_transformers_builds_them(name):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    model = engine_plan.MODELS[name]
    model_type = {"qwen3_next_80b_a3b_thinking": "qwen3_next", "gpt_oss_120b": "gpt_oss"}[name]
    config = AutoConfig.for_model(model_type)  # transformers' defaults are these models' published configs
    assert (config.num_hidden_layers, config.hidden_size) == (model.layers, model.hidden)
    assert (getattr(config, "num_experts", None) or config.num_local_experts) == model.experts
    assert config.num_experts_per_tok == model.top_k
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(config)
    counts = {"total": 0, "experts": 0}
    for parameter_name, parameter in built.named_parameters():
        counts["total"] += parameter.numel()
        counts["experts"] += parameter.numel() if ".mlp.experts." in parameter_name else 0
    assert counts == {"total": model.total_params, "experts": model.routed_expert_params}
    # the FSDP2 plan's count of a token's parameters: both plans then give one compute time
    from dfpo.launch.model_anatomy import PUBLISHED_CONFIGS, model_anatomy

    assert model_anatomy(PUBLISHED_CONFIGS[name]).active_params_per_token == model.active_params


def test_the_dry_run_hook_answers_for_the_moe_models_only():
    run = engine_plan.RECIPES["gpt_oss_120b"]
    config = SimpleNamespace(
        dfpo=SimpleNamespace(model="gpt_oss_120b"),
        trainer=SimpleNamespace(nnodes=run.nodes, n_gpus_per_node=run.gpus_per_node),
        data=SimpleNamespace(train_batch_size=128, max_prompt_length=2048, max_response_length=32768),
        actor_rollout_ref=SimpleNamespace(
            rollout=SimpleNamespace(n=8),
            actor=SimpleNamespace(
                ppo_mini_batch_size=32,
                ppo_epochs=1,
                ppo_micro_batch_size_per_gpu=1,
                policy_loss=SimpleNamespace(loss_mode="dfpo", dfpo_exact_groups=True),
            ),
        ),
    )
    report = engine_plan.engine_report_for_config(config)
    assert report.startswith("Engines for the MoE recipes") and engine_plan.comparison("gpt_oss_120b") in report
    config.dfpo.model = "qwen3_32b"
    assert engine_plan.engine_report_for_config(config) is None


def test_the_docs_show_the_commands_printout(capsys):
    assert engine_plan.main([]) == 0
    printed = capsys.readouterr().out.strip()
    docs = (ROOT / "docs" / "recipes.md").read_text()
    section = docs.split("## Engines for the MoE recipes", 1)[1]
    block = re.search(r"```text\n(.*?)```", section, flags=re.S).group(1).strip()
    assert block == printed, "docs/recipes.md: paste the output of python -m dfpo.launch.engine_plan"
    with pytest.raises(SystemExit):
        engine_plan.main(["--mean-tokens", "0"])


@pytest.mark.parametrize("name", sorted(engine_plan.RECIPES))
def test_fsdp2s_row_is_the_dry_runs_plan_of_the_recipe(name):
    """The engine comparison's FSDP2 row and the plan the dry run prints (dfpo.launch.communication_plan on
    the composed recipe, from the real FSDP2 wrap) give one compute and one communication time per phase:
    README's hardware column quotes the second, docs/recipes.md's engine table the first."""
    from dfpo.launch.plan_report import recipe_plan

    plan = recipe_plan("dfpo_min_replace", name, environ={})
    fsdp2 = engine_plan.engine_cost(engine_plan.MODELS[name], engine_plan.RECIPES[name], Engine("fsdp2"))
    for phase in ("log_prob", "prepass", "update"):
        assert fsdp2.compute_s[phase] == pytest.approx(plan.time.compute_s[phase], rel=1e-3), phase
    assert sum(fsdp2.communication_s.values()) == pytest.approx(plan.time.total_communication_s, rel=0.02)
