"""Prompt templates for math problems (user message content).

* ``boxed`` -- the problem followed by the request to reason step by step and put the final
  answer in ``\\boxed{}`` (the convention of Qwen/DeepSeek math evaluation and of AIME/HMMT
  reporting for thinking models).
* ``dapo`` -- DAPO-Math-17k's own wording: the last line must be ``Answer: $Answer``.

Both are scored by ``reward/``'s math scorer (math-verify reads ``\\boxed{}`` and, failing
that, the final answer line).
"""

from __future__ import annotations

from data_prep.errors import DataPrepError

DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'
BOXED_SUFFIX = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."

TEMPLATES = ("boxed", "dapo")
DEFAULT_TEMPLATE = "boxed"


def render_math_prompt(problem: str, template: str) -> str:
    """The user message for ``problem`` in the named template."""
    if template == "boxed":
        return problem + BOXED_SUFFIX
    if template == "dapo":
        return DAPO_PREFIX + problem + DAPO_SUFFIX
    raise DataPrepError(f"unknown math prompt template {template!r}; choose one of {', '.join(TEMPLATES)}")


def strip_dapo_prompt(content: str) -> str | None:
    """The bare problem inside a DAPO-format user message, or None if it is not in that format."""
    if content.startswith(DAPO_PREFIX) and content.endswith(DAPO_SUFFIX):
        return content[len(DAPO_PREFIX): len(content) - len(DAPO_SUFFIX)]
    return None
