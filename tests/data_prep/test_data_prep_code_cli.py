"""``python -m data_prep.code`` end to end: LiveCodeBench releases and windows, private
tests, filters, caps, the training sources' test layouts, and refusal of a malicious pickle."""

from __future__ import annotations

import base64
import json
import os
import pickle
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_prep import code as code_cli
from data_prep.code_ground_truth import decode_ground_truth
from data_prep.code_prompts import FORMAT_STDIN, FORMAT_WITH_STARTER_CODE, SYSTEM_MESSAGE
from data_prep.schema import validate_parquet_file

from .conftest import read_rows, read_summary


def run(argv: list[str]) -> int:
    return code_cli.main(argv)


def prepare_lcb(fixtures: Path, tmp_path: Path, *extra: str) -> tuple[list[dict], dict]:
    output = tmp_path / "lcb.parquet"
    summary = tmp_path / "lcb.json"
    assert (
        run(
            [
                "--input",
                f"livecodebench={fixtures / 'code_generation_lite'}",
                "--output",
                str(output),
                "--summary-json",
                str(summary),
                *extra,
            ]
        )
        == 0
    )
    validate_parquet_file(output)
    return read_rows(output), read_summary(summary)


def test_v6_window(fixtures, tmp_path):
    rows, summary = prepare_lcb(fixtures, tmp_path, "--start-date", "2025-02-01", "--end-date", "2025-05-01")
    assert [r["extra_info"]["source_id"] for r in rows] == ["abc392_a", "3700", "2080C"]
    assert summary["dropped"] == {"contest_date before 2025-02-01": 5, "contest_date after 2025-05-01": 1}
    assert {r["extra_info"]["split"] for r in rows} == {"test"}
    assert all(r["data_source"] == "livecodebench" and r["ability"] == "code" for r in rows)
    assert {r["extra_info"]["origin"] for r in rows} == {"code_generation_lite (release_v6)"}


def test_public_and_private_tests_are_joined(fixtures, tmp_path):
    rows, _ = prepare_lcb(fixtures, tmp_path, "--start-date", "2025-02-01", "--end-date", "2025-05-01")
    tests, fn_name = decode_ground_truth(rows[0]["reward_model"]["ground_truth"])
    assert fn_name is None
    # 1 public + 2 private (decoded from the base64/zlib/pickle blob), public first
    assert [(t.input, t.output, t.testtype) for t in tests] == [
        ("3\n1 2 3\n", "6\n", "stdin"),
        ("2\n10 -4\n", "6\n", "stdin"),
        ("1\n7\n", "7\n", "stdin"),
    ]
    assert rows[0]["extra_info"]["num_tests"] == 3


def test_functional_problem_keeps_fn_name_and_starter_code(fixtures, tmp_path):
    rows, _ = prepare_lcb(fixtures, tmp_path, "--platform", "leetcode")
    [row] = rows
    tests, fn_name = decode_ground_truth(row["reward_model"]["ground_truth"])
    assert fn_name == "sumOfArray" and [t.testtype for t in tests] == ["functional", "functional"]
    starter = "class Solution:\n    def sumOfArray(self, nums: List[int]) -> int:\n        "
    assert row["extra_info"]["starter_code"] == starter
    prompt = row["prompt"][-1]["content"]
    assert prompt.startswith("### Question:\nGiven an integer array nums, return the sum of its elements.\n\n")
    assert f"### Format: {FORMAT_WITH_STARTER_CODE}\n```python\n{starter}\n```\n\n" in prompt
    assert prompt.endswith("### Answer: (use the provided format with backticks)\n\n")


def test_stdin_prompt_and_optional_system_message(fixtures, tmp_path):
    rows, _ = prepare_lcb(fixtures, tmp_path, "--platform", "codeforces", "--system-message")
    assert [r["extra_info"]["source_id"] for r in rows] == ["1900A", "2080C"]
    assert rows[0]["prompt"][0] == {"role": "system", "content": SYSTEM_MESSAGE}
    assert f"### Format: {FORMAT_STDIN}\n```python\n# YOUR CODE HERE\n```" in rows[0]["prompt"][1]["content"]


def test_release_and_difficulty_filters(fixtures, tmp_path):
    rows, summary = prepare_lcb(fixtures, tmp_path, "--release", "release_v5", "--difficulty", "EASY")
    assert [r["extra_info"]["source_id"] for r in rows] == ["abc300_a", "abc320_a", "abc360_a", "abc388_a"]
    assert summary["dropped"] == {"difficulty not selected": 1}
    assert sum(summary["rows_read"].values()) == 5


def test_caps_on_tests_and_bytes_are_counted(fixtures, tmp_path):
    rows, summary = prepare_lcb(
        fixtures, tmp_path, "--start-date", "2025-02-01", "--end-date", "2025-05-01", "--max-tests", "2"
    )
    assert [r["extra_info"]["num_tests"] for r in rows] == [2, 2, 2]
    assert summary["notes"] == {"problems with tests removed by --max-tests": 1, "tests removed by --max-tests": 1}
    rows, summary = prepare_lcb(
        fixtures, tmp_path, "--start-date", "2025-02-01", "--end-date", "2025-05-01", "--max-test-bytes", "12"
    )
    # abc392_a: tests of 10, 10, 6 bytes; 3700: 10, 13; 2080C: 8, 9 -> only the first of each fits in 12
    assert [r["extra_info"]["num_tests"] for r in rows] == [1, 1, 1]
    assert summary["notes"]["tests removed by --max-test-bytes"] == 4


def test_nothing_left_is_an_error(fixtures, tmp_path, capsys):
    assert (
        run(
            [
                "--input",
                f"livecodebench={fixtures / 'code_generation_lite'}",
                "--output",
                str(tmp_path / "o.parquet"),
                "--max-test-bytes",
                "3",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "no rows left to write" in err and "no test fits in --max-test-bytes" in err
    assert not (tmp_path / "o.parquet").exists()


def test_bad_dates_are_refused(fixtures, tmp_path, capsys):
    with pytest.raises(SystemExit):
        run(
            [
                "--input",
                f"livecodebench={fixtures / 'code_generation_lite'}",
                "--output",
                str(tmp_path / "o.parquet"),
                "--start-date",
                "Feb 2025",
            ]
        )
    assert "expected a date YYYY-MM-DD" in capsys.readouterr().err
    assert (
        run(
            [
                "--input",
                f"livecodebench={fixtures / 'code_generation_lite'}",
                "--output",
                str(tmp_path / "o.parquet"),
                "--start-date",
                "2025-05-01",
                "--end-date",
                "2025-02-01",
            ]
        )
        == 2
    )
    assert "is after --end-date" in capsys.readouterr().err


class _Exploit:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _lcb_file_with_malicious_blob(tmp_path: Path, fixtures: Path) -> tuple[Path, Path]:
    marker = tmp_path / "pwned"
    good = (fixtures / "code_generation_lite" / "test6.jsonl").read_text().splitlines()
    evil = json.loads(good[0])
    evil["question_id"] = "evil"
    evil["question_content"] = "A different question."
    evil["private_test_cases"] = base64.b64encode(zlib.compress(pickle.dumps(_Exploit(str(marker))))).decode()
    path = tmp_path / "test6.jsonl"
    path.write_text("\n".join([good[1], json.dumps(evil), good[2]]) + "\n")
    return path, marker


def test_malicious_private_tests_stop_the_run_without_running(tmp_path, fixtures, capsys):
    path, marker = _lcb_file_with_malicious_blob(tmp_path, fixtures)
    assert run(["--input", f"livecodebench={path}", "--output", str(tmp_path / "o.parquet")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:line 2:" in err and "refused" in err
    assert not marker.exists()


def test_malicious_private_tests_can_be_skipped_and_counted(tmp_path, fixtures):
    path, marker = _lcb_file_with_malicious_blob(tmp_path, fixtures)
    output, summary = tmp_path / "o.parquet", tmp_path / "s.json"
    assert (
        run(
            [
                "--input",
                f"livecodebench={path}",
                "--output",
                str(output),
                "--skip-bad-rows",
                "--summary-json",
                str(summary),
            ]
        )
        == 0
    )
    assert [r["extra_info"]["source_id"] for r in read_rows(output)] == ["3700", "2080C"]
    assert read_summary(summary)["dropped"] == {"malformed: refused pickle in private_test_cases": 1}
    assert not marker.exists()


def prepare_training(fixtures: Path, tmp_path: Path, *extra: str) -> tuple[list[dict], dict]:
    output, summary = tmp_path / "code_train.parquet", tmp_path / "train.json"
    inputs = []
    for name in ("deepcoder_lcbv5", "deepcoder_primeintellect", "deepcoder_taco"):
        inputs += ["--input", f"deepcoder={fixtures / (name + '.parquet')}"]
    inputs += ["--input", f"primeintellect={fixtures / 'verifiable_coding_problems.parquet'}"]
    assert run([*inputs, "--output", str(output), "--summary-json", str(summary), *extra]) == 0
    validate_parquet_file(output)
    return read_rows(output), read_summary(summary)


def test_training_sources_map_to_one_test_format(fixtures, tmp_path):
    rows, summary = prepare_training(fixtures, tmp_path)
    by_id = {(r["data_source"], r["extra_info"]["origin"], r["extra_info"]["source_id"]): r for r in rows}
    assert len(rows) == 7 and {r["extra_info"]["split"] for r in rows} == {"train"}

    def truth(key):
        tests, fn_name = decode_ground_truth(by_id[key]["reward_model"]["ground_truth"])
        return [(t.input, t.output, t.testtype) for t in tests], fn_name

    assert truth(("deepcoder", "deepcoder_lcbv5.parquet", "row 1")) == ([("3\n4", "12", "functional")], "multiply")
    assert truth(("deepcoder", "deepcoder_primeintellect.parquet", "row 0")) == (
        [("3\n", "6\n", "stdin"), ("10\n", "55\n", "stdin")],
        None,
    )
    assert truth(("deepcoder", "deepcoder_taco.parquet", "row 0")) == (
        [("16", "7", "functional"), ("942", "6", "functional")],
        "digital_root",
    )
    assert truth(("deepcoder", "deepcoder_taco.parquet", "row 1")) == ([("a\nb\nc", "3", "stdin")], None)
    assert truth(("primeintellect", "verifiable_coding_problems.parquet", "vcu_2")) == (
        [("3", "[1, 4, 9]", "functional"), ("1", "[1]", "functional")],
        "squares",
    )
    assert summary["dropped"] == {"language is cpp, not python": 1}
    assert summary["notes"]["function-call outputs unwrapped from APPS' one-element list"] == 4


def test_primeintellect_wrapper_is_replaced_by_the_lcb_prompt(fixtures, tmp_path):
    rows, _ = prepare_training(fixtures, tmp_path)
    squares = next(r for r in rows if r["extra_info"]["source_id"] == "vcu_2")
    assert squares["extra_info"]["problem"] == "Return the list of the first n square numbers, starting at 1."
    assert squares["extra_info"]["starter_code"] == "def squares(n):"
    content = squares["prompt"][-1]["content"]
    assert "Solve the following coding problem" not in content and "Now solve the problem" not in content
    assert "```python\ndef squares(n):\n```" in content
    even = next(r for r in rows if r["extra_info"]["source_id"] == "vcu_1")
    assert even["extra_info"]["problem"] == "Read an integer w. Print YES if w is even and w > 2, else NO."
    assert even["extra_info"]["platform"] == "codeforces" and even["extra_info"]["difficulty"] == "800"


def test_training_defaults_cap_tests_and_no_caps_keeps_all(fixtures, tmp_path):
    path = tmp_path / "many.parquet"
    tests = [{"type": "stdin_stdout", "input": f"{i}\n", "output": f"{i}\n"} for i in range(40)]
    pq.write_table(pa.Table.from_pylist([{"problem": "Echo the number.", "tests": json.dumps(tests)}]), path)
    output = tmp_path / "o.parquet"
    assert run(["--input", f"deepcoder={path}", "--output", str(output)]) == 0
    assert read_rows(output)[0]["extra_info"]["num_tests"] == code_cli.DEFAULT_TRAIN_CAPS.max_tests
    assert run(["--input", f"deepcoder={path}", "--output", str(output), "--no-caps"]) == 0
    assert read_rows(output)[0]["extra_info"]["num_tests"] == 40


def test_duplicates_across_training_sources_are_dropped(fixtures, tmp_path):
    path = tmp_path / "dup.parquet"
    pq.write_table(
        pa.Table.from_pylist(
            [
                {
                    "problem": "Read an integer n and print n*(n+1)/2.",
                    "tests": json.dumps([{"type": "stdin_stdout", "input": "1\n", "output": "1\n"}]),
                }
            ]
        ),
        path,
    )
    output, summary = tmp_path / "o.parquet", tmp_path / "s.json"
    assert (
        run(
            [
                "--input",
                f"deepcoder={fixtures / 'deepcoder_primeintellect.parquet'}",
                "--input",
                f"deepcoder={path}",
                "--output",
                str(output),
                "--summary-json",
                str(summary),
            ]
        )
        == 0
    )
    assert len(read_rows(output)) == 1
    report = read_summary(summary)
    assert report["dropped"] == {"duplicate problem": 1}
    assert report["notes"] == {"duplicates whose answer differs from the kept copy (kept the first)": 1}


def test_training_set_decontaminated_against_lcb(fixtures, tmp_path):
    lcb = tmp_path / "lcb.parquet"
    assert run(["--input", f"livecodebench={fixtures / 'code_generation_lite'}", "--output", str(lcb)]) == 0
    path = tmp_path / "leak.parquet"
    pq.write_table(
        pa.Table.from_pylist(
            [
                {
                    "problem": "Given an integer array nums, return the SUM of its elements",
                    "tests": json.dumps({"fn_name": "sumOfArray", "inputs": [[[1]]], "outputs": [[1]]}),
                },
                {"problem": "Something new.", "tests": json.dumps({"inputs": ["1\n"], "outputs": ["1\n"]})},
            ]
        ),
        path,
    )
    output, summary = tmp_path / "o.parquet", tmp_path / "s.json"
    assert (
        run(
            [
                "--input",
                f"deepcoder={path}",
                "--output",
                str(output),
                "--decontaminate-against",
                str(lcb),
                "--drop-contaminated",
                "--summary-json",
                str(summary),
            ]
        )
        == 0
    )
    assert [r["extra_info"]["problem"] for r in read_rows(output)] == ["Something new."]
    assert read_summary(summary)["dropped"] == {"contaminated (normalised match with an evaluation problem)": 1}


@pytest.mark.parametrize(
    ("tests", "message"),
    [
        ("not json", "tests is not valid JSON (Expecting value) nor a Python literal"),
        ("__import__('os').system('true')", "nor a Python literal"),
        (json.dumps([{"type": "stdin_stdout", "input": 3, "output": "3"}]), "must be a string or a list of strings"),
        (json.dumps([{"type": "function_call", "input": "7", "output": "[7]", "fn_name": "f"}]), "list of arguments"),
        (json.dumps([{"type": "weird", "input": "1", "output": "1"}]), "unknown type 'weird'"),
        (json.dumps({"inputs": ["1"], "outputs": []}), "equal length"),
        (json.dumps([{"type": "function_call", "input": [1], "output": [1]}]), "need a function name"),
        (
            json.dumps(
                [
                    {"type": "function_call", "input": [1], "output": [1], "fn_name": "f"},
                    {"type": "stdin_stdout", "input": "1", "output": "1"},
                ]
            ),
            "mixes stdin and functional",
        ),
    ],
)
def test_malformed_training_tests_name_the_row(tests, message, tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps({"problem": "ok", "tests": "[]"}) + "\n" + json.dumps({"problem": "p", "tests": tests}) + "\n"
    )
    assert run(["--input", f"deepcoder={path}", "--output", str(tmp_path / "o.parquet")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:line 2: " in err and message in err


def test_only_livecodebench_reads_a_release_folder(fixtures, tmp_path, capsys):
    assert (
        run(["--input", f"deepcoder={fixtures / 'code_generation_lite'}", "--output", str(tmp_path / "o.parquet")]) == 2
    )
    assert "only the livecodebench source accepts it" in capsys.readouterr().err


def test_python_literal_tests_are_read_without_running_code(tmp_path):
    path = tmp_path / "literal.jsonl"
    tests = "[{'type': 'stdin_stdout', 'input': '1\\n', 'output': '2\\n', 'fn_name': None}]"
    path.write_text(json.dumps({"problem": "Add one.", "tests": tests}) + "\n")
    output, summary = tmp_path / "o.parquet", tmp_path / "s.json"
    assert run(["--input", f"deepcoder={path}", "--output", str(output), "--summary-json", str(summary)]) == 0
    tests_read, _ = decode_ground_truth(read_rows(output)[0]["reward_model"]["ground_truth"])
    assert [(t.input, t.output) for t in tests_read] == [("1\n", "2\n")]
    assert read_summary(summary)["notes"] == {"tests written as a Python literal (read with ast.literal_eval)": 1}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("public_test_cases", json.dumps(["1 2"]), "test 0 must be an object"),
        (
            "public_test_cases",
            json.dumps([{"input": "1", "output": "2", "testtype": "call"}]),
            "testtype must be stdin or functional",
        ),
        ("private_test_cases", "%%%", "neither JSON nor base64"),
        ("metadata", json.dumps([1]), "metadata must decode to an object"),
        ("contest_date", "last Tuesday", "contest_date must be an ISO date/time"),
        ("question_content", "", "question_content must be a non-empty string"),
    ],
)
def test_malformed_livecodebench_rows_name_the_line(field, value, message, fixtures, tmp_path, capsys):
    row = json.loads((fixtures / "code_generation_lite" / "test6.jsonl").read_text().splitlines()[0])
    row[field] = value
    path = tmp_path / "test6.jsonl"
    path.write_text(json.dumps(row) + "\n")
    assert run(["--input", f"livecodebench={path}", "--output", str(tmp_path / "o.parquet")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:line 1: " in err and message in err


def test_livecodebench_functional_tests_need_func_name(fixtures, tmp_path, capsys):
    row = json.loads((fixtures / "code_generation_lite" / "test6.jsonl").read_text().splitlines()[1])
    row["metadata"] = "{}"
    path = tmp_path / "test6.jsonl"
    path.write_text(json.dumps(row) + "\n")
    assert run(["--input", f"livecodebench={path}", "--output", str(tmp_path / "o.parquet")]) == 2
    assert "functional tests need metadata.func_name" in capsys.readouterr().err
