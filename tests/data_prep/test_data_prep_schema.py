"""Row validation before writing: every broken shape is refused with the key at fault."""

from __future__ import annotations

import copy
import json

import pytest

from data_prep.code_ground_truth import CodeTest, decode_ground_truth, encode_ground_truth
from data_prep.schema import RowSchemaError, RowSchemaValidator


def math_row(index=0):
    return {
        "data_source": "aime25",
        "prompt": [{"role": "user", "content": "What is 1+1?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "2"},
        "extra_info": {"split": "test", "index": index, "source_id": "0", "problem": "What is 1+1?", "origin": "x"},
    }


def code_row(index=0):
    truth = encode_ground_truth([CodeTest("1\n", "2\n", "stdin")], None)
    return {
        "data_source": "livecodebench",
        "prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
        "ability": "code",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {"split": "test", "index": index, "num_tests": 1},
    }


def test_good_rows_pass():
    validator = RowSchemaValidator()
    validator.check(math_row(0), "r0")
    validator.check(math_row(1), "r1")
    RowSchemaValidator().check(code_row(), "c0")


def _mutate(row, path, value):
    target = row
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return row


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("data_source",), "gsm8k", "data_source"),
        (("ability",), "MATH", "ability"),
        (("prompt",), [], "prompt"),
        (("prompt",), [{"role": "user"}], r"prompt\[0\]"),
        (("prompt",), [{"role": "robot", "content": "x"}], r"prompt\[0\].role"),
        (("prompt",), [{"role": "user", "content": "  "}], r"prompt\[0\].content"),
        (
            ("prompt",),
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
            "prompt: the last message",
        ),
        (("reward_model", "style"), "model", "reward_model.style"),
        (("reward_model", "ground_truth"), "", "reward_model.ground_truth"),
        (("reward_model", "ground_truth"), 2, "reward_model.ground_truth"),
        (("extra_info", "split"), "validation", "extra_info.split"),
        (("extra_info", "index"), -1, "extra_info.index"),
        (("extra_info", "index"), KeyError, "extra_info.index"),
        (("extra_info", "problem"), ["a"], "extra_info.problem"),
        (("extra_info",), "x", "extra_info"),
        (("unexpected",), 1, "row"),
    ],
)
def test_bad_math_rows_name_the_key(path, value, message):
    row = _mutate(math_row(), path, value)
    with pytest.raises(RowSchemaError, match=f"where: {message}"):
        RowSchemaValidator().check(row, "where")


def test_extra_info_must_agree_across_rows():
    validator = RowSchemaValidator()
    validator.check(math_row(0), "r0")
    changed_type = _mutate(math_row(1), ("extra_info", "source_id"), 7)
    with pytest.raises(RowSchemaError, match="r1: extra_info: keys/types"):
        validator.check(changed_type, "r1")
    extra_key = _mutate(math_row(1), ("extra_info", "year"), "2025")
    with pytest.raises(RowSchemaError, match="differ from the first row"):
        validator.check(extra_key, "r1")


def test_indices_are_unique():
    validator = RowSchemaValidator()
    validator.check(math_row(0), "r0")
    with pytest.raises(RowSchemaError, match="used by an earlier row"):
        validator.check(math_row(0), "r1")


@pytest.mark.parametrize(
    ("truth", "message"),
    [
        ("not json", "not JSON"),
        (json.dumps({"tests": []}), "exactly the keys"),
        (json.dumps({"tests": [], "fn_name": None}), "non-empty list"),
        (json.dumps({"tests": [{"input": "1", "output": "2"}], "fn_name": None}), "test 0"),
        (json.dumps({"tests": [{"input": 1, "output": "2", "testtype": "stdin"}], "fn_name": None}), "strings"),
        (json.dumps({"tests": [{"input": "1", "output": "2", "testtype": "call"}], "fn_name": None}), "testtype"),
        (
            json.dumps({"tests": [{"input": "1", "output": "2", "testtype": "functional"}], "fn_name": None}),
            "fn_name is required",
        ),
        (
            json.dumps({"tests": [{"input": "1", "output": "2", "testtype": "stdin"}], "fn_name": "f"}),
            "fn_name is required",
        ),
        (
            json.dumps(
                {
                    "tests": [
                        {"input": "1", "output": "2", "testtype": "stdin"},
                        {"input": "1", "output": "2", "testtype": "functional"},
                    ],
                    "fn_name": "f",
                }
            ),
            "one testtype",
        ),
        (
            json.dumps({"tests": [{"input": "1", "output": "2", "testtype": "functional"}], "fn_name": ""}),
            "fn_name must",
        ),
    ],
)
def test_bad_code_ground_truth_is_refused(truth, message):
    with pytest.raises(ValueError, match=message):
        decode_ground_truth(truth)
    row = copy.deepcopy(code_row())
    row["reward_model"]["ground_truth"] = truth
    with pytest.raises(RowSchemaError, match="reward_model.ground_truth"):
        RowSchemaValidator().check(row, "c")


def test_ground_truth_round_trip():
    tests = [CodeTest("[1, 2]", "3", "functional"), CodeTest("ü\n", "ß", "functional")]
    assert decode_ground_truth(encode_ground_truth(tests, "add")) == (tests, "add")
