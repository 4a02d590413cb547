"""Turn a verl chat prompt into token ids with the model's own chat template."""

from __future__ import annotations

from typing import Any


def render_prompt_ids(
    tokenizer: Any, messages: list[dict[str, str]], chat_template_kwargs: dict[str, Any]
) -> list[int]:
    """Apply the tokenizer's chat template (with the generation prompt) and tokenize the result.

    The template adds the special tokens itself, so tokenization adds none.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"the tokenizer of {getattr(tokenizer, 'name_or_path', '<unknown>')} has no chat template; "
            "evaluate an instruction/chat model or add a chat_template to its tokenizer_config.json"
        )
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **chat_template_kwargs)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
