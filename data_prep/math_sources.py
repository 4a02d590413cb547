"""Per-source readers turning a raw math row into a problem, its answer and its id.

Field names follow each dataset's card on the Hugging Face Hub:

=============  =====================================================  ==========================
source         dataset ids                                            fields read
=============  =====================================================  ==========================
math_dapo      BytedTsinghua-SIA/DAPO-Math-17k                        prompt, reward_model, extra_info.index
deepscaler     agentica-org/DeepScaleR-Preview-Dataset                problem, answer
aime24         Maxwell-Jia/AIME_2024, HuggingFaceH4/aime_2024         Problem/problem, Answer/answer, ID/id
aime25         math-ai/aime25, yentinglin/aime_2025                   problem, answer, id
hmmt25         MathArena/hmmt_feb_2025                                problem, answer, problem_idx
math500        HuggingFaceH4/MATH-500                                 problem, answer, unique_id
arithmetic     the tiny CPU recipes' toy task (``cpu_examples.addition_task``)  problem, answer, id
arithmetic_test  its held-out evaluation split                        problem, answer, id
digit_sums     the CPU quickstart's task (``cpu_examples.sums_task``)    problem, answer, id
digit_sums_test  its held-out evaluation split                        problem, answer, id
=============  =====================================================  ==========================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from data_prep.errors import RowError
from data_prep.math_prompts import strip_dapo_prompt

PROBLEM_FIELDS = ("problem", "Problem", "question")
ANSWER_FIELDS = ("answer", "Answer")
ID_FIELDS = ("id", "ID", "problem_idx", "unique_id", "idx")


@dataclass(frozen=True)
class MathProblem:
    """A math problem statement, its reference answer and the id it has in its dataset."""

    problem: str
    answer: str
    source_id: str


@dataclass(frozen=True)
class MathSource:
    """How to read one math source and whether it is a training or an evaluation set."""

    name: str
    split: str  # "train" or "test"
    hf_datasets: tuple[str, ...]
    read: Callable[[dict[str, Any], int], MathProblem]


def answer_text(value: Any) -> str:
    """A reference answer as a string (integers as digits; never an empty string)."""
    if isinstance(value, bool) or value is None:
        raise RowError("missing answer", f"answer must be a number or a string, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value).strip()
    if not text:
        raise RowError("missing answer", "answer is empty")
    return text


def _field(data: dict[str, Any], names: tuple[str, ...], what: str) -> Any:
    """The first of ``names`` that holds a value; a present but null field is named as such."""
    for name in names:
        if name in data and data[name] is not None:
            return data[name]
    nulls = [name for name in names if name in data]
    if nulls:
        raise RowError(f"missing {what}", f"{what} field {nulls[0]!r} is null; give the row a {what}")
    raise RowError(
        f"missing {what}", f"no {what} field: expected one of {', '.join(names)}; row has {', '.join(sorted(data))}"
    )


def _problem_text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RowError("missing problem", f"problem must be a non-empty string, got {type(value).__name__}")
    return value.strip()


def read_plain_math_row(data: dict[str, Any], ordinal: int) -> MathProblem:
    """Rows with a problem, an answer and optionally an id field (every source but DAPO)."""
    problem = _problem_text(_field(data, PROBLEM_FIELDS, "problem"))
    answer = answer_text(_field(data, ANSWER_FIELDS, "answer"))
    source_id = next((str(data[name]) for name in ID_FIELDS if data.get(name) is not None), f"row {ordinal}")
    return MathProblem(problem, answer, source_id)


def read_dapo_row(data: dict[str, Any], ordinal: int) -> MathProblem:
    """DAPO-Math-17k rows are already verl-shaped: the problem sits inside DAPO's prompt."""
    prompt = data.get("prompt")
    if not isinstance(prompt, (list, tuple)) or len(prompt) != 1 or not isinstance(prompt[0], dict):
        raise RowError("bad DAPO prompt", "prompt must be a list holding one {role, content} message")
    content = prompt[0].get("content")
    problem = strip_dapo_prompt(content) if isinstance(content, str) else None
    if problem is None:
        raise RowError(
            "bad DAPO prompt", "prompt content is not in DAPO's 'Solve the following math problem ... Answer:' format"
        )
    reward_model = data.get("reward_model")
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        raise RowError("missing answer", "reward_model.ground_truth is missing")
    answer = answer_text(reward_model["ground_truth"])
    extra_info = data.get("extra_info")
    index = extra_info.get("index") if isinstance(extra_info, dict) else None
    return MathProblem(_problem_text(problem), answer, str(index) if index is not None else f"row {ordinal}")


MATH_SOURCE_TABLE: dict[str, MathSource] = {
    source.name: source
    for source in (
        MathSource("math_dapo", "train", ("BytedTsinghua-SIA/DAPO-Math-17k",), read_dapo_row),
        MathSource("deepscaler", "train", ("agentica-org/DeepScaleR-Preview-Dataset",), read_plain_math_row),
        MathSource("aime24", "test", ("Maxwell-Jia/AIME_2024", "HuggingFaceH4/aime_2024"), read_plain_math_row),
        MathSource("aime25", "test", ("math-ai/aime25", "yentinglin/aime_2025"), read_plain_math_row),
        MathSource("hmmt25", "test", ("MathArena/hmmt_feb_2025",), read_plain_math_row),
        MathSource("math500", "test", ("HuggingFaceH4/MATH-500",), read_plain_math_row),
        # The toy task of the CPU recipes, written as local JSON lines by cpu_examples.addition_task.
        MathSource("arithmetic", "train", (), read_plain_math_row),
        MathSource("arithmetic_test", "test", (), read_plain_math_row),
        # The CPU quickstart's task, written as local JSON lines by cpu_examples.sums_task.
        MathSource("digit_sums", "train", (), read_plain_math_row),
        MathSource("digit_sums_test", "test", (), read_plain_math_row),
    )
}


def _check_table_against_reward() -> None:
    from reward.sources import MATH_SOURCES

    if set(MATH_SOURCE_TABLE) != set(MATH_SOURCES):
        raise ImportError(
            f"data_prep math sources {sorted(MATH_SOURCE_TABLE)} differ from reward.sources.MATH_SOURCES "
            f"{sorted(MATH_SOURCES)}; update data_prep/math_sources.py"
        )


_check_table_against_reward()
