"""What each recipe must select, written down independently of dfpo/config and dfpo/launch/recipe.py.

Methods follow docs/method.md §4 (baselines) and §3 (DFPO and its ablations); models are the paper's
three. A recipe whose composed config disagrees with this table fails the tests.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MethodExpectation:
    """The verl settings that define one method of the paper."""

    adv_estimator: str
    loss_mode: str
    loss_agg_mode: str
    clip_ratio: tuple[float, float] | None = None  # (low, high) for the clipped baselines
    dfpo_transform: str | None = None
    dfpo_stop_grad: bool | None = None
    dfpo_scale: float | None = None


_DFPO = dict(adv_estimator="dfpo", loss_mode="dfpo", loss_agg_mode="seq-mean-token-mean")

METHODS: dict[str, MethodExpectation] = {
    "dfpo_min_replace": MethodExpectation(**_DFPO, dfpo_transform="min_replace", dfpo_stop_grad=True),
    "dfpo_orth_proj": MethodExpectation(**_DFPO, dfpo_transform="orth_proj", dfpo_stop_grad=True),
    "dfpo_no_stop_grad": MethodExpectation(**_DFPO, dfpo_transform="min_replace", dfpo_stop_grad=False),
    "dfpo_scale_0p5": MethodExpectation(**_DFPO, dfpo_transform="scale", dfpo_stop_grad=True, dfpo_scale=0.5),
    # GSPO: sequence ratio with the GSPO paper's clip range.
    "gspo": MethodExpectation("grpo", "gspo", "seq-mean-token-mean", clip_ratio=(3e-4, 4e-4)),
    # GRPO: token-level PPO clip, group-normalised advantage.
    "grpo": MethodExpectation("grpo", "vanilla", "token-mean", clip_ratio=(0.2, 0.2)),
    # GRPO-fix: CISPO's detached truncation, symmetric so that it does not depend on the sign of Â.
    "grpo_fix": MethodExpectation("grpo", "cispo", "token-mean", clip_ratio=(0.2, 0.2)),
}

MAIN_METHODS = ("dfpo_min_replace", "dfpo_orth_proj", "gspo", "grpo", "grpo_fix")
ABLATIONS = ("dfpo_no_stop_grad", "dfpo_scale_0p5")  # run on Qwen3-32B only, as in the paper
MODELS = ("qwen3_32b", "qwen3_next_80b_a3b_thinking", "gpt_oss_120b")

EXPECTED_RUN_SCRIPTS = frozenset(
    [f"run_{method}_{model}.sh" for method in MAIN_METHODS for model in MODELS]
    + [f"run_{method}_qwen3_32b.sh" for method in ABLATIONS]
)

# Not the paper's grid: a first affordable GPU run (Qwen3-1.7B, one node, short responses) and the
# one-GPU smoke run of scripts/gpu_smoke.sh (Qwen3-0.6B, 2 steps).
NEWCOMER_MODELS = ("qwen3_1p7b", "qwen3_0p6b")
NEWCOMER_RUN_SCRIPTS = frozenset(
    ["run_dfpo_min_replace_qwen3_1p7b.sh", "run_gspo_qwen3_1p7b.sh", "run_dfpo_min_replace_qwen3_0p6b.sh"]
)
SMOKE_SCRIPT = "run_dfpo_min_replace_qwen3_0p6b.sh"
# Every GPU run script: what the launcher tests and the "every key is read" test cover.
GPU_RUN_SCRIPTS = EXPECTED_RUN_SCRIPTS | NEWCOMER_RUN_SCRIPTS
# The CPU recipes, tested end to end elsewhere: the tiny model (dfpo/config/base_model/tiny_cpu.yaml), one per
# method; SmolLM2-135M-Instruct (dfpo/config/base_model/smollm2_135m_cpu.yaml), the quickstart's two methods.
CPU_MODELS = ("tiny_cpu", "smollm2_135m_cpu")
QUICKSTART_METHODS = ("dfpo_min_replace", "gspo")
CPU_RUN_SCRIPTS = frozenset(
    [f"run_{method}_tiny_cpu.sh" for method in METHODS]
    + [f"run_{method}_smollm2_135m_cpu.sh" for method in QUICKSTART_METHODS]
    # the paper's MoE architectures at a tiny size (tests/e2e/test_moe_architectures_cpu.py)
    + [f"run_dfpo_min_replace_tiny_{model}_cpu.sh" for model in ("qwen3_next", "gpt_oss")]
)

SWEEP_SCRIPT = "sweep_group_size_qwen3_32b.sh"
PAPER_GROUP_SIZES = (2, 4, 8, 16)
DEFAULT_GROUP_SIZE = 8
THINKING_MIN_RESPONSE_LENGTH = 32768  # all three models reason at length before answering

# Keys a recipe may add with a leading '+': only the free-form dicts verl 0.9.1 passes on as keyword
# arguments (anything else added with '+' would be a key verl never reads).
ALLOWED_NEW_KEY_PARENTS: dict[str, str] = {
    "data.apply_chat_template_kwargs": "verl's RLHFDataset and agent loop pass it to tokenizer.apply_chat_template",
    "actor_rollout_ref.model.override_config": "HFModelConfig reads attn_implementation and updates the HF config",
    "reward.custom_reward_function.reward_kwargs": "verl's get_custom_reward_fn passes it to compute_score",
    "ray_kwargs.ray_init.runtime_env.env_vars": "verl's run_ppo merges ray_kwargs.ray_init.runtime_env into ray.init",
}

# Top-level keys verl 0.9.1 accepts but main_ppo ignores (the reward config moved under `reward`).
LEGACY_TOP_LEVEL_SECTIONS = ("custom_reward_function", "reward_model", "sandbox_fusion")


def split_script_name(script: str) -> tuple[str, str]:
    """``run_<method>_<model>.sh`` -> (method, model), matching the longest known model suffix."""
    stem = script.removeprefix("run_").removesuffix(".sh")
    for model in MODELS + NEWCOMER_MODELS + CPU_MODELS:
        if stem.endswith("_" + model):
            return stem[: -len(model) - 1], model
    raise ValueError(f"{script}: no known model in the name (known: {MODELS})")
