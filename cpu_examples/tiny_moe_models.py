"""Tiny versions of the paper's two mixture-of-experts models, built in code with the real classes.

Two of the paper's three models are mixture-of-experts models whose layers no dense test model has:

* **Qwen3-Next-80B-A3B** (``Qwen3NextForCausalLM``): Gated DeltaNet linear attention in three layers
  of every four, gated full attention in the fourth, and in every layer a router over many small
  experts plus a shared expert behind a sigmoid gate.
* **GPT-OSS-120B** (``GptOssForCausalLM``): learnable attention sinks (one logit per head in the
  softmax's denominator), layers alternating between a sliding window and full attention, biased
  attention projections, and a router over experts with a clamped SwiGLU.

:data:`TINY_QWEN3_NEXT` and :data:`TINY_GPT_OSS` keep each model's layer pattern (the real configs'
``layer_types``, the shared expert, the sinks, a sliding window shorter than the toy task's
sequences so the window really cuts) at a size a 2-core CPU trains in seconds: 4 layers, hidden
128, 2 experts active per token of 32 (Qwen3-Next) or 8 (GPT-OSS). The published sizes are 48 layers, 512 experts,
10 active (Qwen3-Next) and 36 layers, 128 experts, 4 active (GPT-OSS); the ratios we keep are the
layer pattern's, not the sizes'. The experts are most of the parameters (as in the real models),
so FSDP2's all-gathers of whole layers, the offloaded optimizer states and the weight sync move a
measurable amount.

Both use the character tokenizer and ChatML template of :mod:`cpu_examples.tiny_model` (the toy
task's format, not the real models' chat formats: the Harmony format of GPT-OSS and the thinking
block of Qwen3-Next are tested in ``reward/`` against their real renderings). They are built,
warm-started and cached exactly like the dense tiny model (:func:`cpu_examples.tiny_model.build_model`
dispatches here on ``spec.architecture``).
"""

from __future__ import annotations

from cpu_examples.tiny_model import TinyModelSpec, TinyMoeSpec

# Qwen3-Next's published pattern: full attention every fourth layer (full_attention_interval 4).
TINY_QWEN3_NEXT = TinyModelSpec(
    architecture="qwen3_next",
    tie_word_embeddings=False,  # as the published model (and vLLM's Qwen3-Next never ties lm_head)
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    moe=TinyMoeSpec(
        expert_intermediate_size=128,
        shared_expert_intermediate_size=128,
        layer_types=("linear_attention", "linear_attention", "linear_attention", "full_attention"),
    ),
)

# GPT-OSS's published pattern: sliding-window and full attention alternating, sliding first.
TINY_GPT_OSS = TinyModelSpec(
    architecture="gpt_oss",
    num_hidden_layers=4,
    # Untied, as GPT-OSS-120B's published config: vLLM 0.24's GptOssForCausalLM skips a checkpoint's lm_head
    # when tie_word_embeddings is set but never ties it to the embedding, so a tied model samples noise there.
    tie_word_embeddings=False,
    max_position_embeddings=131072,  # the published value, which GPT-OSS's YaRN RoPE factor (32 x 4,096) assumes
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    moe=TinyMoeSpec(
        # 8 experts, not 32: with no shared expert, 32 experts left the 60-step warm start at a
        # 9% chance of the boxed format (each expert sees few tokens), 8 at 60%
        num_experts=8,
        expert_intermediate_size=128,
        layer_types=("sliding_attention", "full_attention", "sliding_attention", "full_attention"),
        sliding_window=16,
    ),
)

MOE_ARCHITECTURES = ("qwen3_next", "gpt_oss")


def moe_config(spec: TinyModelSpec, **kwargs):
    """The transformers config of a tiny MoE ``spec`` (``kwargs``: token ids, attention implementation)."""
    from transformers import GptOssConfig, Qwen3NextConfig

    moe = spec.moe
    if moe is None or spec.architecture not in MOE_ARCHITECTURES:
        raise ValueError(f"not a tiny MoE spec (architecture {spec.architecture!r}, moe {moe!r})")
    if len(moe.layer_types) != spec.num_hidden_layers:
        raise ValueError(f"moe.layer_types has {len(moe.layer_types)} entries for {spec.num_hidden_layers} layers")
    common = dict(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings,
        use_cache=spec.use_cache,
        num_experts_per_tok=moe.num_experts_per_tok,
        layer_types=list(moe.layer_types),
        **kwargs,
    )
    if spec.architecture == "gpt_oss":
        if not 0 < moe.sliding_window:
            raise ValueError("a tiny GPT-OSS needs moe.sliding_window > 0")
        return GptOssConfig(
            num_local_experts=moe.num_experts,
            intermediate_size=moe.expert_intermediate_size,
            sliding_window=moe.sliding_window,
            **common,
        )
    return Qwen3NextConfig(
        num_experts=moe.num_experts,
        moe_intermediate_size=moe.expert_intermediate_size,
        shared_expert_intermediate_size=moe.shared_expert_intermediate_size,
        intermediate_size=moe.expert_intermediate_size,  # dense MLP size; unused, every layer is sparse
        linear_num_key_heads=moe.linear_num_key_heads,
        linear_num_value_heads=moe.linear_num_value_heads,
        linear_key_head_dim=moe.linear_key_head_dim,
        linear_value_head_dim=moe.linear_value_head_dim,
        linear_conv_kernel_dim=moe.linear_conv_kernel_dim,
        **common,
    )


def model_class(spec: TinyModelSpec):
    from transformers import GptOssForCausalLM, Qwen3NextForCausalLM

    return {"gpt_oss": GptOssForCausalLM, "qwen3_next": Qwen3NextForCausalLM}[spec.architecture]
