"""Prompt templates for math problems (user message content).

* ``boxed`` -- the problem followed by the request to reason step by step and put the final
  answer in ``\\boxed{}`` (the convention of Qwen/DeepSeek math evaluation and of AIME/HMMT
  reporting for thinking models).
* ``dapo`` -- DAPO-Math-17k's own wording: the last line must be ``Answer: $Answer``.
* ``bare`` -- the problem as written, no instruction: the answer's form (``\\boxed{}``) is taught
  by a demonstration turn alone (few-shot prompting). Meant with ``--demonstration``; without one
  the model is not told how to answer.

Both are scored by ``reward/``'s math scorer (math-verify reads ``\\boxed{}`` and, failing
that, the final answer line).

A *demonstration turn* (``python -m data_prep.math --demonstration PROBLEM ANSWER``) puts one
solved example before the problem: a user message with PROBLEM in the same template and an
assistant message with the answer in the form the template asks for (``\\boxed{ANSWER}`` or
``Answer: ANSWER``). A small instruct model that almost never writes ``\\boxed{}`` zero-shot uses
it in most responses after one demonstration (the CPU quickstart's task, ``cpu_examples.sums_task``).
"""

from __future__ import annotations

from data_prep.errors import DataPrepError

DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'
BOXED_SUFFIX = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."

TEMPLATES = ("boxed", "dapo", "bare")
DEFAULT_TEMPLATE = "boxed"


def render_math_prompt(problem: str, template: str) -> str:
    """The user message for ``problem`` in the named template."""
    if template == "boxed":
        return problem + BOXED_SUFFIX
    if template == "dapo":
        return DAPO_PREFIX + problem + DAPO_SUFFIX
    if template == "bare":
        return problem
    raise DataPrepError(f"unknown math prompt template {template!r}; choose one of {', '.join(TEMPLATES)}")


def demonstration_answer(answer: str, template: str) -> str:
    """The assistant's reply of a demonstration turn: ``answer`` in the form ``template`` asks for."""
    if template in ("boxed", "bare"):
        return f"\\boxed{{{answer}}}"
    if template == "dapo":
        return f"Answer: {answer}"
    raise DataPrepError(f"unknown math prompt template {template!r}; choose one of {', '.join(TEMPLATES)}")


def math_messages(problem: str, template: str, demonstration: tuple[str, str] | None = None) -> list[dict[str, str]]:
    """The verl chat prompt of ``problem``: one user message, preceded by the demonstration's user
    and assistant messages when ``demonstration`` = (problem, answer) is given."""
    messages = []
    if demonstration is not None:
        demo_problem, demo_answer = demonstration
        if not demo_problem.strip() or not demo_answer.strip():
            raise DataPrepError(f"--demonstration needs a non-empty problem and answer, got {demonstration!r}")
        messages += [
            {"role": "user", "content": render_math_prompt(demo_problem.strip(), template)},
            {"role": "assistant", "content": demonstration_answer(demo_answer.strip(), template)},
        ]
    messages.append({"role": "user", "content": render_math_prompt(problem, template)})
    return messages


def strip_dapo_prompt(content: str) -> str | None:
    """The bare problem inside a DAPO-format user message, or None if it is not in that format."""
    if content.startswith(DAPO_PREFIX) and content.endswith(DAPO_SUFFIX):
        return content[len(DAPO_PREFIX) : len(content) - len(DAPO_SUFFIX)]
    return None
