"""Per-source readers turning a raw code row into a problem with tests in one format.

===============  =====================================================================
source           rows read
===============  =====================================================================
livecodebench    ``livecodebench/code_generation_lite`` release jsonl: question_content,
                 question_title, platform, question_id, contest_date, starter_code,
                 difficulty, public_test_cases (JSON), private_test_cases (JSON or
                 base64/zlib/pickle, decoded without trusting the pickle), metadata
                 (JSON, ``func_name`` for functional problems)
deepcoder        ``agentica-org/DeepCoder-Preview-Dataset`` (configs lcbv5, primeintellect,
                 taco, codeforces): problem, tests (JSON in the subset's own layout),
                 starter_code and metadata when present
primeintellect   ``PrimeIntellect/verifiable-coding-problems``: problem_id, prompt,
                 verification_info (JSON: language, test_cases), metadata (JSON), source
===============  =====================================================================

Test layouts met in these sources and how they map to :class:`CodeTest`:

* LiveCodeBench ``{input, output, testtype}``: kept as is (functional input is one JSON
  argument per line, output a JSON value).
* PrimeIntellect/DeepCoder ``{input, output, type: stdin_stdout|function_call, fn_name}`` and
  TACO ``{inputs: [...], outputs: [...], fn_name?}`` (APPS layout): stdin input/output given
  as a list of lines are joined with newlines (as APPS' runner does); a function-call input is
  the list of arguments, written one JSON value per line, and its output is APPS' one-element
  list around the return value, unwrapped (a longer list is kept as the value).
* Codeforces ``{input, output}``: stdin.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from data_prep.code_ground_truth import CodeTest
from data_prep.errors import RowError
from data_prep.livecodebench_private_tests import RefusedPickleError, decode_private_tests


@dataclass(frozen=True)
class CodeProblem:
    """A code problem in the common form (strings empty where a source has no such field)."""

    question: str
    tests: list[CodeTest]
    fn_name: str | None
    starter_code: str
    source_id: str
    title: str = ""
    platform: str = ""
    difficulty: str = ""
    contest_date: datetime | None = None
    language: str = "python"


class Notes(dict):
    """Counts of conversions applied to a row's tests (reported in the run summary)."""

    def add(self, what: str) -> None:
        self[what] = self.get(what, 0) + 1


def _json_field(value: Any, what: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise RowError(f"invalid {what}", f"{what} is not valid JSON ({exc.msg})") from None
    return value


def _test_field(value: Any, what: str, notes: Notes) -> Any:
    """A tests field: JSON text, or (as some APPS-derived rows have) a Python literal.

    ``ast.literal_eval`` only builds literals (no names, calls or attribute access), so it runs
    no code from the row; deep nesting or huge literals are reported as a bad row.
    """
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        json_error = exc.msg
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        raise RowError(f"invalid {what}", f"{what} is not valid JSON ({json_error}) nor a Python literal") from None
    notes.add(f"{what} written as a Python literal (read with ast.literal_eval)")
    return parsed


def _required_text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise RowError(f"missing {key}", f"{key} must be a non-empty string; row has keys {', '.join(sorted(data))}")
    return value


def _optional_text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RowError(f"invalid {key}", f"{key} must be a string, got {type(value).__name__}")
    return value


def _lines(value: Any, what: str, notes: Notes) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        notes.add("stdin test values given as a list of lines (joined with newlines)")
        return "\n".join(value)
    raise RowError(
        f"invalid test {what}", f"stdin test {what} must be a string or a list of strings, got {type(value).__name__}"
    )


def _function_call_test(raw_input: Any, raw_output: Any, notes: Notes) -> CodeTest:
    """An APPS-layout function-call test: argument list in, one-element list around the result out."""
    arguments = _json_field(raw_input, "function-call test input")
    if not isinstance(arguments, list):
        raise RowError(
            "invalid test input",
            f"function-call test input must be a list of arguments, got {type(arguments).__name__}",
        )
    expected = _json_field(raw_output, "function-call test output")
    if isinstance(expected, list) and len(expected) == 1:
        expected = expected[0]
        notes.add("function-call outputs unwrapped from APPS' one-element list")
    return CodeTest("\n".join(json.dumps(argument) for argument in arguments), json.dumps(expected), "functional")


def _livecodebench_test(test: Any, position: int) -> CodeTest:
    if not isinstance(test, dict):
        raise RowError("invalid test", f"test {position} must be an object, got {type(test).__name__}")
    if not isinstance(test.get("input"), str) or not isinstance(test.get("output"), str):
        raise RowError("invalid test", f"test {position}: input and output must be strings")
    if test.get("testtype") not in ("stdin", "functional"):
        raise RowError(
            "invalid test", f"test {position}: testtype must be stdin or functional, got {test.get('testtype')!r}"
        )
    return CodeTest(test["input"], test["output"], test["testtype"])


def convert_test_list(tests: Any, notes: Notes) -> tuple[list[CodeTest], str | None]:
    """Tests in any of the layouts listed in the module docstring, and the function name."""
    tests = _test_field(tests, "tests", notes)
    if isinstance(tests, dict):  # TACO / APPS: {"inputs": [...], "outputs": [...], "fn_name": ...}
        inputs, outputs, fn_name = tests.get("inputs"), tests.get("outputs"), tests.get("fn_name") or None
        if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
            raise RowError("invalid tests", "APPS-layout tests need lists 'inputs' and 'outputs' of equal length")
        if fn_name is not None:
            return [_function_call_test(i, o, notes) for i, o in zip(inputs, outputs, strict=True)], str(fn_name)
        return [
            CodeTest(_lines(i, "input", notes), _lines(o, "output", notes), "stdin")
            for i, o in zip(inputs, outputs, strict=True)
        ], None
    if not isinstance(tests, list):
        raise RowError("invalid tests", f"tests must be a list or an APPS-layout object, got {type(tests).__name__}")
    converted: list[CodeTest] = []
    fn_name: str | None = None
    for position, test in enumerate(tests):
        if not isinstance(test, dict) or "input" not in test or "output" not in test:
            raise RowError("invalid test", f"test {position} must be an object with input and output")
        if "testtype" in test:  # LiveCodeBench layout (DeepCoder lcbv5)
            converted.append(_livecodebench_test(test, position))
            metadata = _json_field(test.get("metadata") or {}, "test metadata")
            if test["testtype"] == "functional" and isinstance(metadata, dict) and metadata.get("func_name"):
                fn_name = fn_name or str(metadata["func_name"])
        elif test.get("type", "stdin_stdout") == "stdin_stdout":
            converted.append(
                CodeTest(_lines(test["input"], "input", notes), _lines(test["output"], "output", notes), "stdin")
            )
        elif test.get("type") == "function_call":
            converted.append(_function_call_test(test["input"], test["output"], notes))
            fn_name = fn_name or (str(test["fn_name"]) if test.get("fn_name") else None)
        else:
            raise RowError(
                "invalid test",
                f"test {position}: unknown type {test.get('type')!r} (expected stdin_stdout or function_call)",
            )
    return converted, fn_name


def parse_contest_date(value: Any) -> datetime | None:
    """LiveCodeBench's ISO ``contest_date`` (a datetime object is accepted as is)."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value.replace(tzinfo=None)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).replace(tzinfo=None)
        except ValueError:
            pass
    raise RowError("invalid contest_date", f"contest_date must be an ISO date/time, got {value!r}")


def read_livecodebench_row(data: dict[str, Any], ordinal: int, notes: Notes) -> CodeProblem:
    """A row of a LiveCodeBench ``code_generation_lite`` release file."""
    question = _required_text(data, "question_content")
    public = _json_field(data.get("public_test_cases") or "[]", "public_test_cases")
    try:
        private = decode_private_tests(data.get("private_test_cases") or "")
    except RefusedPickleError as exc:
        raise RowError("refused pickle in private_test_cases", str(exc)) from None
    except ValueError as exc:
        raise RowError("invalid private_test_cases", str(exc)) from None
    if not isinstance(public, list):
        raise RowError("invalid public_test_cases", "public_test_cases must decode to a list")
    tests = [_livecodebench_test(test, position) for position, test in enumerate(public + private)]
    metadata = _json_field(data.get("metadata") or "{}", "metadata")
    if not isinstance(metadata, dict):
        raise RowError("invalid metadata", "metadata must decode to an object")
    fn_name = metadata.get("func_name") or None
    if any(test.testtype == "functional" for test in tests) and not fn_name:
        raise RowError("missing func_name", "functional tests need metadata.func_name")
    return CodeProblem(
        question=question,
        tests=tests,
        fn_name=str(fn_name) if fn_name and tests and tests[0].testtype == "functional" else None,
        starter_code=_optional_text(data, "starter_code"),
        source_id=str(data.get("question_id") or f"row {ordinal}"),
        title=_optional_text(data, "question_title"),
        platform=_optional_text(data, "platform"),
        difficulty=_optional_text(data, "difficulty"),
        contest_date=parse_contest_date(data.get("contest_date")),
    )


_PRIME_HEADER = re.compile(r"\A\s*Solve the following coding problem using the programming language (\w+):\s*\n", re.I)
_PRIME_STARTER = re.compile(r"\n\s*Write your solution by modifying this code:\s*```(?:python)?\n(.*?)```", re.S)
_PRIME_TRAILERS = (
    "\nThe input will be stdin and you should print your solution to stdout",
    "\nThe input will be given via stdin and the output should be printed to stdout",
    "\nYour solution should implemented in the function",
    "\nNow solve the problem and return the code.",
)


def split_primeintellect_prompt(text: str) -> tuple[str, str]:
    """The bare statement and the starter code inside a PrimeIntellect-style prompt.

    Those prompts wrap the statement as ``Solve the following coding problem using the
    programming language python: ... [Write your solution by modifying this code: ```...```]
    The input will be stdin ... Now solve the problem and return the code.``; a text without
    the header is returned unchanged.
    """
    header = _PRIME_HEADER.match(text)
    if header is None:
        return text.strip(), ""
    body = text[header.end() :]
    starter = ""
    found = _PRIME_STARTER.search(body)
    if found is not None:
        starter = found.group(1).rstrip()
        body = body[: found.start()]
    cuts = [body.find(marker) for marker in _PRIME_TRAILERS if marker in body]
    if cuts:
        body = body[: min(cuts)]
    return body.strip(), starter


def read_deepcoder_row(data: dict[str, Any], ordinal: int, notes: Notes) -> CodeProblem:
    """A row of DeepCoder-Preview-Dataset (any config)."""
    question, starter_from_prompt = split_primeintellect_prompt(_required_text(data, "problem"))
    if "tests" not in data:
        raise RowError("missing tests", f"no tests field; row has keys {', '.join(sorted(data))}")
    tests, fn_name = convert_test_list(data["tests"], notes)
    metadata = _json_field(data.get("metadata") or {}, "metadata")
    if fn_name is None and isinstance(metadata, dict) and metadata.get("func_name"):
        fn_name = str(metadata["func_name"])  # some rows name the function once, at row level
    difficulty = metadata.get("difficulty") if isinstance(metadata, dict) else None
    source_id = next(
        (str(data[k]) for k in ("question_id", "problem_id", "id") if data.get(k) is not None), f"row {ordinal}"
    )
    return CodeProblem(
        question=question,
        tests=tests,
        fn_name=fn_name,
        starter_code=_optional_text(data, "starter_code") or starter_from_prompt,
        source_id=source_id,
        difficulty=str(difficulty) if difficulty is not None else "",
    )


def read_primeintellect_row(data: dict[str, Any], ordinal: int, notes: Notes) -> CodeProblem:
    """A row of PrimeIntellect/verifiable-coding-problems."""
    question, starter = split_primeintellect_prompt(_required_text(data, "prompt"))
    info = _test_field(data.get("verification_info"), "verification_info", notes)
    if not isinstance(info, dict) or "test_cases" not in info:
        raise RowError("invalid verification_info", "verification_info must be an object with test_cases")
    tests, fn_name = convert_test_list(info["test_cases"], notes)
    metadata = _json_field(data.get("metadata") or {}, "metadata")
    difficulty = metadata.get("difficulty") if isinstance(metadata, dict) else None
    return CodeProblem(
        question=question,
        tests=tests,
        fn_name=fn_name,
        starter_code=starter,
        source_id=str(data.get("problem_id") or f"row {ordinal}"),
        platform=_optional_text(data, "source"),
        difficulty=str(difficulty) if difficulty is not None else "",
        language=str(info.get("language") or "python").lower(),
    )


@dataclass(frozen=True)
class CodeSource:
    """How to read one code source and whether it is a training or an evaluation set."""

    name: str
    split: str
    hf_datasets: tuple[str, ...]
    read: Callable[[dict[str, Any], int, Notes], CodeProblem]


CODE_SOURCE_TABLE: dict[str, CodeSource] = {
    source.name: source
    for source in (
        CodeSource("livecodebench", "test", ("livecodebench/code_generation_lite",), read_livecodebench_row),
        CodeSource("deepcoder", "train", ("agentica-org/DeepCoder-Preview-Dataset",), read_deepcoder_row),
        CodeSource("primeintellect", "train", ("PrimeIntellect/verifiable-coding-problems",), read_primeintellect_row),
    )
}


def _check_table_against_reward() -> None:
    from reward.sources import CODE_SOURCES

    if set(CODE_SOURCE_TABLE) != set(CODE_SOURCES):
        raise ImportError(
            f"data_prep code sources {sorted(CODE_SOURCE_TABLE)} differ from reward.sources.CODE_SOURCES "
            f"{sorted(CODE_SOURCES)}; update data_prep/code_sources.py"
        )


_check_table_against_reward()
