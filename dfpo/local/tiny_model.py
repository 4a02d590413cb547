"""The tiny model of the CPU recipes: a small Qwen3 with a character-level chat tokenizer, warm-started.

A randomly initialised model scores 0 on every sample, so its advantages and gradients are 0 and
a run "passes" without testing the update. The model is therefore built in code and given a
short supervised warm start on the toy task's training prompts (chat template applied exactly as
verl's agent loop applies it) that teaches the ``\\boxed{}`` answer format with answers drawn at
random (:func:`warm_start`): the rewards of a group differ from the first step, and which sum is
right is learned by RL alone.

Everything is deterministic for a given :class:`TinyModelSpec`; the checkpoint records its spec
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
class TinyModelSpec:
    """Architecture and warm start of the tiny model (every field enters the cache key)."""

    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    vocab_size: int = 128  # the character tokenizer's ids, padded with unused filler tokens
    max_position_embeddings: int = 512
    seed: int = 0
    warm_start_steps: int = 60
    warm_start_lr: float = 1e-2
    warm_start_batch: int = 16



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
    ids = tokenizer.apply_chat_template([{"role": "user", "content": user_content}], add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys") and "input_ids" in ids:  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def response_ids(tokenizer, answer: str) -> list[int]:
    """The target response of the warm start: ``\\boxed{answer}`` and Qwen3's end-of-turn token."""
    return tokenizer.encode(f"\\boxed{{{answer}}}", add_special_tokens=False) + [tokenizer.convert_tokens_to_ids(IM_END)]


def build_model(spec: TinyModelSpec, tokenizer):
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    if len(tokenizer) > spec.vocab_size:
        raise ValueError(f"vocab_size={spec.vocab_size} is smaller than the tokenizer's {len(tokenizer)} tokens")
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    config = Qwen3Config(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=im_end,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(spec.seed)
    model = Qwen3ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=[im_end], pad_token_id=tokenizer.pad_token_id)
    return model


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
        ids = pad_sequence([torch.tensor(p + t) for p, t in rows], batch_first=True, padding_value=tokenizer.pad_token_id)
        labels = pad_sequence([torch.tensor([-100] * len(p) + t) for p, t in rows], batch_first=True, padding_value=-100)
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


def ensure_tiny_model(target: str | os.PathLike, prompts: list[str], answer_pool: list[str], spec: TinyModelSpec = TinyModelSpec()) -> Path:
    """The warm-started tiny model's checkpoint in directory ``target``, (re)built unless the
    checkpoint there was built from ``spec``. Written to a temporary directory, then renamed: an
    interrupted build leaves no half-written checkpoint behind."""
    target = Path(target)
    record = target / SPEC_FILE
    if record.exists() and json.loads(record.read_text()).get("spec") == asdict(spec):
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
            json.dumps({"spec": asdict(spec), "warm_start_loss_first": losses[0], "warm_start_loss_last": losses[-1]}, indent=2)
        )
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
