"""The tiny model, defined once: a small Qwen3 built in code (no download), and its character tokenizer.

:class:`TinyModelSpec` and :func:`build_model` build every tiny model here: the CPU recipes' (the
defaults, warm-started by :func:`ensure_tiny_model` for ``python -m cpu_examples.prepare``), the
learning-tax demo's (:func:`demo.policy_model.build_policy`, no tokenizer) and the untrained
ones of ``tests/integration/cpu_verl_harness.py`` and ``tests/evaluation/conftest.py``
(:func:`save_untrained_model`), each at its own size and seed and in the variant its tests were
verified with (Qwen2, untied output layer, eager attention).

For the CPU recipes a randomly initialised model would not do: it scores 0 on every sample, so
its advantages and gradients are 0 and a run "passes" without testing the update. Their model is
therefore given a short supervised warm start on the toy task's training prompts (chat template
applied exactly as verl's agent loop applies it) that teaches the ``\\boxed{}`` answer format with
answers drawn at random (:func:`warm_start`): the rewards of a group differ from the first step,
and which sum is right is learned by RL alone.

Everything is deterministic for a given :class:`TinyModelSpec`; the recipes' checkpoint records its spec
(``dfpo_tiny_model.json``) and is reused by reruns built from the same spec.

The tokenizer is built in code (no download): one token per printable ASCII character plus
ChatML's ``<|im_start|>`` / ``<|im_end|>`` and a padding token, with a ChatML chat template (the
format of Qwen's templates, without the thinking block). A character vocabulary keeps the output
layer ~1,000 times smaller than Qwen3's 151,936-way one, which would be nearly all of the cost
of a model this small on CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import string
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

SPEC_FILE = "dfpo_tiny_model.json"
PAD_TOKEN, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
CHARACTERS = string.ascii_letters + string.digits + string.punctuation + " \n"

# ChatML, as Qwen's templates render a plain conversation.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class TinyMoeSpec:
    """The mixture-of-experts and attention-pattern fields of a tiny MoE model (part of its
    :class:`~cpu_examples.tiny_model.TinyModelSpec`, so of its cache key)."""

    num_experts: int = 32
    num_experts_per_tok: int = 2
    expert_intermediate_size: int = 128  # Qwen3-Next's moe_intermediate_size; GPT-OSS's intermediate_size
    shared_expert_intermediate_size: int = 128  # Qwen3-Next only
    layer_types: tuple[str, ...] = ()
    sliding_window: int = 0  # GPT-OSS only: shorter than the toy task's ~130-token sequences
    # Qwen3-Next's Gated DeltaNet (linear attention) heads
    linear_num_key_heads: int = 2
    linear_num_value_heads: int = 4
    linear_key_head_dim: int = 32
    linear_value_head_dim: int = 32
    linear_conv_kernel_dim: int = 4


@dataclass(frozen=True)
class TinyModelSpec:
    """Architecture, initialisation and warm start of a tiny model (every field enters the cache
    key of :func:`ensure_tiny_model`). The defaults are the CPU recipes' model."""

    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int | None = 32  # None: hidden_size // num_attention_heads (the only value Qwen2 has)
    vocab_size: int = 128  # for the CPU recipes, the character tokenizer's ids and unused ids above them
    max_position_embeddings: int = 512
    seed: int = 0  # of the initial weights and of the warm start's sampling
    warm_start_steps: int = 60  # warm_start_*: read by ensure_tiny_model only
    warm_start_lr: float = 1e-2
    warm_start_batch: int = 16
    # Variants kept for the models the demo and tests were verified with:
    architecture: str = "qwen3"  # or "qwen2" (no q/k norms): the verl harness and evaluation tests
    tie_word_embeddings: bool = True  # False: the demo and the verl harness
    attn_implementation: str | None = None  # None: transformers' default; "eager": the demo and verl harness
    use_cache: bool = True  # False: the demo (full-sequence forwards only)
    # The paper's MoE architectures (architecture "qwen3_next" or "gpt_oss"): their experts and
    # layer pattern (cpu_examples/tiny_moe_models.py)
    moe: TinyMoeSpec | None = None


def build_char_tokenizer(extra_tokens: int = 0):
    """A fast character-level tokenizer with ChatML special tokens and chat template.

    Ids: padding 0, ``<|im_start|>`` 1, ``<|im_end|>`` 2, then one id per character of
    :data:`CHARACTERS`, then ``extra_tokens`` unused filler tokens (``<|t0|>``, ...)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = [PAD_TOKEN, IM_START, IM_END]
    vocab = {token: i for i, token in enumerate(specials)}
    for token in list(CHARACTERS) + [f"<|t{i}|>" for i in range(extra_tokens)]:
        vocab.setdefault(token, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD_TOKEN))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character, newlines too
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in specials])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        eos_token=IM_END,
        additional_special_tokens=[IM_START],
        chat_template=CHAT_TEMPLATE,
    )


def chat_prompt_ids(tokenizer, user_content: str) -> list[int]:
    """Prompt token ids exactly as verl's agent loop builds them (chat template, generation prompt)."""
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": user_content}], add_generation_prompt=True, tokenize=True
    )
    if hasattr(ids, "keys") and "input_ids" in ids:  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def response_ids(tokenizer, answer: str) -> list[int]:
    """The target response of the warm start: ``\\boxed{answer}`` and Qwen3's end-of-turn token."""
    return tokenizer.encode(f"\\boxed{{{answer}}}", add_special_tokens=False) + [
        tokenizer.convert_tokens_to_ids(IM_END)
    ]


def build_model(spec: TinyModelSpec, tokenizer=None):
    """The randomly initialised fp32 model of ``spec`` (the same spec, the same weights).

    With a ``tokenizer``, the model's padding and end-of-sequence ids and its generation config
    (stop at the tokenizer's eos token) are the tokenizer's; without one (the demo, whose toy
    vocabulary has no tokenizer) no special token ids are set."""
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    from cpu_examples import tiny_moe_models

    architectures = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM)}
    if spec.architecture not in (*architectures, *tiny_moe_models.MOE_ARCHITECTURES):
        raise ValueError(
            f"architecture={spec.architecture!r}: expected one of "
            f"{sorted((*architectures, *tiny_moe_models.MOE_ARCHITECTURES))}"
        )
    head_dim = spec.head_dim if spec.head_dim is not None else spec.hidden_size // spec.num_attention_heads
    kwargs = {}
    if spec.architecture == "qwen3":
        kwargs["head_dim"] = head_dim
    elif spec.architecture == "qwen2" and head_dim * spec.num_attention_heads != spec.hidden_size:
        raise ValueError(f"Qwen2's head_dim is hidden_size / num_attention_heads, not {head_dim}: {spec}")
    if spec.attn_implementation is not None:
        kwargs["attn_implementation"] = spec.attn_implementation
    if tokenizer is not None:
        if len(tokenizer) > spec.vocab_size:
            raise ValueError(f"vocab_size={spec.vocab_size} is smaller than the tokenizer's {len(tokenizer)} tokens")
        kwargs.update(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    if spec.architecture in tiny_moe_models.MOE_ARCHITECTURES:
        config = tiny_moe_models.moe_config(spec, **kwargs)
        model_class = tiny_moe_models.model_class(spec)
        return _initialised(model_class, config, spec, tokenizer)
    if spec.moe is not None:
        raise ValueError(f"spec.moe is for the MoE architectures {tiny_moe_models.MOE_ARCHITECTURES}, not {spec}")
    config_class, model_class = architectures[spec.architecture]
    config = config_class(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings,
        use_cache=spec.use_cache,
        **kwargs,
    )
    return _initialised(model_class, config, spec, tokenizer)


def _initialised(model_class, config, spec: TinyModelSpec, tokenizer):
    from transformers import GenerationConfig

    torch.manual_seed(spec.seed)
    model = model_class(config).to(torch.float32)
    if tokenizer is not None:
        model.generation_config = GenerationConfig(
            eos_token_id=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id
        )
    return model


def save_untrained_model(directory: str | os.PathLike, spec: TinyModelSpec, tokenizer) -> Path:
    """:func:`build_model` of ``spec`` (no warm start) saved to ``directory`` with ``tokenizer``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    build_model(spec, tokenizer).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def warm_start(model, tokenizer, spec: TinyModelSpec, prompts: list[str], answer_pool: list[str]) -> list[float]:
    """Supervised steps teaching the answer *format* only: each example pairs a prompt with
    ``\\boxed{a}`` for an answer ``a`` drawn uniformly from ``answer_pool`` afresh at every step,
    so the model learns to answer in the boxed format with an answer distribution that does not
    depend on the problem. Everything about which answer is right is left to RL, and a group of
    responses to one prompt has mixed rewards from the first step. Loss on the response tokens
    only; returns the losses. Deterministic for a given seed."""
    from torch.nn.utils.rnn import pad_sequence

    generator = torch.Generator().manual_seed(spec.seed)
    prompt_ids = [chat_prompt_ids(tokenizer, prompt) for prompt in prompts]
    answer_ids = [response_ids(tokenizer, answer) for answer in answer_pool]
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.warm_start_lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(spec.warm_start_steps):
        picks = torch.randint(0, len(prompt_ids), (spec.warm_start_batch,), generator=generator).tolist()
        answers = torch.randint(0, len(answer_ids), (spec.warm_start_batch,), generator=generator).tolist()
        rows = [(prompt_ids[p], answer_ids[a]) for p, a in zip(picks, answers, strict=True)]
        ids = pad_sequence(
            [torch.tensor(p + t) for p, t in rows], batch_first=True, padding_value=tokenizer.pad_token_id
        )
        labels = pad_sequence(
            [torch.tensor([-100] * len(p) + t) for p, t in rows], batch_first=True, padding_value=-100
        )
        lengths = torch.tensor([len(p) + len(t) for p, t in rows])
        mask = (torch.arange(ids.shape[1]) < lengths[:, None]).long()
        # Logits only where a label follows (the response): the 151,936-way output layer is
        # nearly all of the model's cost, and the prompt positions carry no loss.
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
        targets = labels[:, 1:]
        selected = targets != -100
        logits = model.lm_head(hidden[:, :-1][selected])
        loss = torch.nn.functional.cross_entropy(logits.float(), targets[selected])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def is_built(target: str | os.PathLike, spec: TinyModelSpec = TinyModelSpec()) -> bool:
    """Whether directory ``target`` holds the checkpoint built from ``spec`` (its recorded spec)."""
    record = Path(target) / SPEC_FILE
    return record.exists() and json.loads(record.read_text()).get("spec") == json.loads(json.dumps(asdict(spec)))


def ensure_tiny_model(
    target: str | os.PathLike, prompts: list[str], answer_pool: list[str], spec: TinyModelSpec = TinyModelSpec()
) -> Path:
    """The warm-started tiny model's checkpoint in directory ``target``, (re)built unless the
    checkpoint there was built from ``spec``. Written to a temporary directory, then renamed: an
    interrupted build leaves no half-written checkpoint behind."""
    target = Path(target)
    if is_built(target, spec):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = build_char_tokenizer()
    model = build_model(spec, tokenizer)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small: one thread measured 3-4x faster than two on 2 cores
    try:
        losses = warm_start(model, tokenizer, spec, prompts, answer_pool)
    finally:
        torch.set_num_threads(threads)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / SPEC_FILE).write_text(
            json.dumps(
                {"spec": asdict(spec), "warm_start_loss_first": losses[0], "warm_start_loss_last": losses[-1]}, indent=2
            )
        )
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
