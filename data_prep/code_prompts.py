"""The code prompt, in LiveCodeBench's generic chat style.

LiveCodeBench (``lcb_runner/prompts/code_generation.py``) asks for the question under
``### Question:``, then a ``### Format:`` line that either shows the starter code to
complete (functional problems) or asks for a program reading stdin and writing stdout,
then ``### Answer: (use the provided format with backticks)``. The same layout is used for
the training sources so that training and evaluation prompts agree. A functional training
problem without starter code (some APPS/TACO rows) names the function to define instead.
"""

from __future__ import annotations

FORMAT_WITH_STARTER_CODE = (
    "You will use the following starter code to write the solution to the problem and enclose your code within "
    "delimiters."
)
FORMAT_STDIN = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on the sample "
    "inputs). Enclose your code within delimiters as follows. Ensure that when the python program runs, it reads the "
    "inputs, runs the algorithm and writes output to STDOUT."
)
FORMAT_FUNCTION_WITHOUT_STARTER = (
    "Define the function `{fn_name}`; it is called with the test arguments and its return value is checked. "
    "Enclose your code within delimiters as follows."
)
ANSWER_LINE = "### Answer: (use the provided format with backticks)\n\n"
SYSTEM_MESSAGE = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will generate a "
    "correct Python program that matches the specification and passes all tests."
)


def render_code_prompt(question: str, starter_code: str, fn_name: str | None) -> str:
    """The user message for a code problem."""
    text = f"### Question:\n{question}\n\n"
    if starter_code.strip():
        text += f"### Format: {FORMAT_WITH_STARTER_CODE}\n```python\n{starter_code}\n```\n\n"
    elif fn_name is not None:
        text += (
            f"### Format: {FORMAT_FUNCTION_WITHOUT_STARTER.format(fn_name=fn_name)}\n"
            "```python\n# YOUR CODE HERE\n```\n\n"
        )
    else:
        text += f"### Format: {FORMAT_STDIN}\n```python\n# YOUR CODE HERE\n```\n\n"
    return text + ANSWER_LINE


def code_messages(
    question: str, starter_code: str, fn_name: str | None, with_system_message: bool
) -> list[dict[str, str]]:
    """Chat messages: LiveCodeBench's system message (optional) and the user prompt."""
    messages = [{"role": "system", "content": SYSTEM_MESSAGE}] if with_system_message else []
    messages.append({"role": "user", "content": render_code_prompt(question, starter_code, fn_name)})
    return messages
