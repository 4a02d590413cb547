"""The answer region of a response, per model format: what a thinking model's final answer is.

The paper's models are thinking models (Qwen3-32B with thinking on, Qwen3-Next-80B-A3B-Thinking,
GPT-OSS-120B). Their responses hold reasoning first and the final answer after it; only the final
answer is scored, and a response that never reached it, or was cut off inside it, is *unfinished*
(scored 0 with reason ``unfinished``, counted apart from wrong answers).

The text scored is what verl 0.9.1's reward managers hand over: the response ids decoded with
``skip_special_tokens=True`` (``verl/experimental/reward_loop/reward_manager/naive.py``). What
survives that decode differs per tokenizer, and decides how the answer region is found:

``plain``
    The whole response (the tiny and SmolLM2 recipes, and Qwen3 with thinking off). Unchanged
    from before this option existed: truncation is not looked at.
``qwen3_thinking``
    Qwen3's ``<think>``/``</think>`` are added tokens that are *not* special, so they stay in
    the text. The thinking closes at ``</think>``; the final region is what follows the last
    one (Qwen3's chat template splits a turn the same way). The opening ``<think>`` may be in
    the response (Qwen3-32B with ``enable_thinking``) or in the prompt (Qwen3-Next-Thinking's
    template opens it there), so only the close is required.
``harmony``
    GPT-OSS's harmony markers (``<|start|>``, ``<|channel|>``, ``<|message|>``, ``<|end|>``,
    ``<|return|>``) are special, so the decode drops them and the channel names run into the
    text: ``<|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…``
    arrives as ``analysis…assistantfinal…``. The final region is what follows the last final-channel
    header (``assistantfinal``, or ``final`` at the very start when the response opens in the
    final channel); the marked form (decoded without skipping special tokens) is read too.

A response cut off at the length cap (``extra_info["response_truncated"]``, set by
:class:`reward.verl_reward_manager.TruncationAwareRewardManager` from the token ids) is unfinished
in the thinking formats wherever it was cut, its final region included: the decoded text alone
cannot show that the final answer was complete, because the end-of-turn token is special.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PLAIN = "plain"
QWEN3_THINKING = "qwen3_thinking"
HARMONY = "harmony"
RESPONSE_FORMATS: tuple[str, ...] = (PLAIN, QWEN3_THINKING, HARMONY)

QWEN3_THINK_CLOSE = "</think>"
"""Qwen3's end-of-thinking marker: an added, non-special token (id 151668), kept by the decode."""

_HARMONY_FINAL_HEADER = re.compile(
    # with the special markers dropped by the decode: "...assistantfinal<answer>";
    # with them kept: "...<|start|>assistant<|channel|>final<|message|><answer>"
    r"(?:<\|start\|>)?assistant(?:<\|channel\|>)?final(?:<\|message\|>)?"
)
_HARMONY_OPENS_FINAL = re.compile(r"\A(?:<\|channel\|>)?final(?:<\|message\|>)?")

TRUNCATED_KEY = "response_truncated"
"""The ``extra_info`` key that says the response ran into the length cap without ending its turn."""


@dataclass(frozen=True)
class AnswerRegion:
    """The part of a response to score, or why there is none.

    Attributes:
        text: the final region (``None`` when the response is unfinished).
        unfinished: why the response is unfinished (``None`` when it is finished).
    """

    text: str | None
    unfinished: str | None = None


def check_response_format(response_format: str) -> None:
    """Raise a ValueError naming the valid formats when ``response_format`` is not one of them."""
    if response_format not in RESPONSE_FORMATS:
        raise ValueError(
            f"response_format={response_format!r} is not supported; use one of {RESPONSE_FORMATS} in "
            "reward.custom_reward_function.reward_kwargs (plain: the whole response; qwen3_thinking: "
            "after </think>; harmony: GPT-OSS's final channel)"
        )


def answer_region(response: str, response_format: str, truncated: bool = False) -> AnswerRegion:
    """The region of ``response`` to score under ``response_format`` (see the module doc).

    Args:
        response: the decoded response, as verl's reward manager hands it over.
        response_format: one of :data:`RESPONSE_FORMATS`.
        truncated: the response hit the length cap without its end-of-turn token.
    """
    check_response_format(response_format)
    if response_format == PLAIN:
        return AnswerRegion(response)
    if response_format == QWEN3_THINKING:
        close = response.rfind(QWEN3_THINK_CLOSE)
        if close < 0:
            return AnswerRegion(
                None, "cut off in its thinking" if truncated else "the thinking never closed (no </think>)"
            )
        final = response[close + len(QWEN3_THINK_CLOSE) :]
    else:
        headers = list(_HARMONY_FINAL_HEADER.finditer(response))
        if headers:
            final = response[headers[-1].end() :]
        else:
            opening = _HARMONY_OPENS_FINAL.match(response)
            if opening is None:
                return AnswerRegion(
                    None, "cut off in its analysis" if truncated else "no final channel (the analysis never ended)"
                )
            final = response[opening.end() :]
    if truncated:
        return AnswerRegion(None, "cut off in its final answer (the length cap)")
    return AnswerRegion(final)


def is_truncated(extra_info: object) -> bool:
    """Whether verl's per-sample ``extra_info`` says the response was cut off at the length cap."""
    return isinstance(extra_info, dict) and bool(extra_info.get(TRUNCATED_KEY))


def template_response_format(tokenizer, chat_template_kwargs: dict | None = None) -> str:
    """The format a model's responses take, read off its tokenizer and chat template.

    ``harmony`` when the vocabulary's ``<|channel|>`` and ``<|message|>`` are special tokens (GPT-OSS);
    ``qwen3_thinking`` when ``</think>`` is an added token and the generation prompt, rendered with
    ``chat_template_kwargs``, leaves the thinking to the response (Qwen3 with thinking on opens
    nothing, Qwen3-Next-Thinking opens ``<think>``); ``plain`` otherwise -- Qwen3 with thinking
    off closes an empty thinking block in the prompt, so its responses hold no ``</think>``.
    ``evaluation.generate`` scores with this format by default, and ``dfpo.main``'s preflight
    checks that a recipe's ``response_format`` agrees with it.
    """
    added = {token.content: token.special for token in tokenizer.added_tokens_decoder.values()}
    if added.get("<|channel|>") and added.get("<|message|>"):
        return HARMONY
    if QWEN3_THINK_CLOSE not in added:
        return PLAIN
    probe = [{"role": "user", "content": "What is 1 + 1?"}]
    prompt = tokenizer.apply_chat_template(
        probe, add_generation_prompt=True, tokenize=False, **dict(chat_template_kwargs or {})
    )
    return PLAIN if prompt.rstrip().endswith(QWEN3_THINK_CLOSE) else QWEN3_THINKING
