"""The quickstart's task: the split by unordered pair, the demonstration turn, data_prep's parquet,
and reward/score.py on it."""

from __future__ import annotations

import pandas as pd
import pytest

from cpu_examples import sums_task
from data_prep.math import DEMONSTRATION_DROP_REASON
from data_prep.math import main as data_prep_math
from data_prep.math_prompts import BOXED_SUFFIX
from data_prep.schema import validate_parquet_file
from reward.score import compute_score


def test_split_is_disjoint_by_unordered_pair_and_holds_at_least_40_problems():
    train, held_out = sums_task.sums_split()
    assert len(held_out) >= sums_task.MIN_TEST_PROBLEMS == 40
    assert {p.pair for p in train}.isdisjoint({p.pair for p in held_out})  # 3+4 held out: 4+3 too
    everything = {(p.a, p.b) for p in train + held_out}
    assert len(everything) == len(train) + len(held_out) == 100 - 2  # all pairs but 2+5 and 5+2
    assert (2, 5) not in everything and (5, 2) not in everything
    assert sums_task.sums_split() == (train, held_out)  # fixed, seeded


def test_split_is_stratified_by_the_answer():
    # both splits have the same answer distribution, so no constant answer pays more in training
    # than on held-out sums (a random split over pairs gave 8 and 9 to 28 % of the training problems)
    train, held_out = sums_task.sums_split()
    for total in range(19):
        everything = sum(1 for p in train + held_out if p.a + p.b == total)
        held = sum(1 for p in held_out if p.a + p.b == total)
        # whole pairs (two problems each, or one for a + a) as close to the fraction as they allow
        assert abs(held - sums_task.HELD_OUT_FRACTION * everything) <= 1.0, (total, held, everything)
    for split in (train, held_out):
        most_common = max(sum(1 for p in split if p.a + p.b == total) for total in range(19))
        assert most_common / len(split) < 0.11


def test_data_prep_writes_the_demonstration_turn_and_reward_scores_it(tmp_path):
    train_file, test_file = sums_task.prepare_parquet(tmp_path)
    train, held_out = sums_task.sums_split()
    assert validate_parquet_file(train_file) == len(train) and validate_parquet_file(test_file) == len(held_out)
    rows = pd.read_parquet(test_file).to_dict(orient="records")
    assert {r["data_source"] for r in rows} == {sums_task.TEST_SOURCE}
    first, problem = rows[0], held_out[0]
    assert sums_task.TEMPLATE == "boxed"
    assert [dict(m) for m in first["prompt"]] == [
        {"role": "user", "content": "What is 2 + 5?" + BOXED_SUFFIX},
        {"role": "assistant", "content": "\\boxed{7}"},
        {"role": "user", "content": problem.problem + BOXED_SUFFIX},
    ]
    truth = first["reward_model"]["ground_truth"]
    assert truth == problem.answer and first["extra_info"]["split"] == "test"
    assert compute_score(sums_task.TEST_SOURCE, f"\\boxed{{{truth}}}", truth)["score"] == 1.0
    assert compute_score(sums_task.TEST_SOURCE, f"\\boxed{{{int(truth) + 1}}}", truth)["score"] == 0.0
    assert compute_score(sums_task.TRAIN_SOURCE, "\\boxed{7}", "7")["acc"] == 1.0


def test_an_output_root_from_another_version_of_the_task_is_rebuilt(tmp_path):
    from cpu_examples.prepare import data_dir, prepare_parquet_if_stale

    directory = data_dir(tmp_path)
    assert not sums_task.is_current(directory)
    sums_task.prepare_parquet(directory)
    assert sums_task.is_current(directory)
    raw = directory / "raw" / sums_task.RAW_FILES[1]
    raw.write_text(raw.read_text().replace('"id": "', '"id": "x', 1))  # as written by another split
    assert not sums_task.is_current(directory)
    prepare_parquet_if_stale(directory)
    assert sums_task.is_current(directory)
    # the same problems written in another template (data_prep's bare one: no instruction)
    test_file = directory / sums_task.TEST_FILE
    frame = pd.read_parquet(test_file)
    frame["prompt"] = [[{**m, "content": m["content"].removesuffix(BOXED_SUFFIX)} for m in p] for p in frame["prompt"]]
    frame.to_parquet(test_file)
    assert not sums_task.is_current(directory)
    prepare_parquet_if_stale(directory)
    assert sums_task.is_current(directory)
    assert len(sums_task.task_digest()) == 8 and sums_task.task_digest() == sums_task.task_digest()


def test_data_prep_drops_the_demonstration_problem_itself(tmp_path):
    raw = tmp_path / "raw.jsonl"
    raw.write_text(
        '{"problem": "What is 2 + 5?", "answer": "7", "id": "a"}\n'
        '{"problem": "What is 1 + 1?", "answer": "2", "id": "b"}\n'
    )
    summary = tmp_path / "summary.json"
    output = tmp_path / "out.parquet"
    assert (
        data_prep_math(
            [
                "--input",
                f"digit_sums={raw}",
                "--output",
                str(output),
                "--demonstration",
                "What is 2 + 5?",
                "7",
                "--summary-json",
                str(summary),
            ]
        )
        == 0
    )
    assert [r["extra_info"]["problem"] for r in pd.read_parquet(output).to_dict(orient="records")] == ["What is 1 + 1?"]
    assert DEMONSTRATION_DROP_REASON in summary.read_text()


def test_data_prep_refuses_an_empty_demonstration(tmp_path, capsys):
    raw = tmp_path / "raw.jsonl"
    raw.write_text('{"problem": "What is 1 + 1?", "answer": "2", "id": "b"}\n')
    assert (
        data_prep_math(
            ["--input", f"digit_sums={raw}", "--output", str(tmp_path / "o.parquet"), "--demonstration", " ", "7"]
        )
        == 2
    )
    assert "--demonstration needs a non-empty problem and answer" in capsys.readouterr().err


@pytest.mark.parametrize("template,reply", [("boxed", "\\boxed{7}"), ("dapo", "Answer: 7"), ("bare", "\\boxed{7}")])
def test_the_demonstration_answers_in_the_templates_form(template, reply):
    from data_prep.math_prompts import math_messages

    messages = math_messages("What is 1 + 1?", template, ("What is 2 + 5?", "7"))
    assert [m["role"] for m in messages] == ["user", "assistant", "user"] and messages[1]["content"] == reply
    assert math_messages("What is 1 + 1?", template) == messages[2:]


def test_the_bare_template_is_the_problem_alone_and_scores_like_boxed(tmp_path):
    raw = tmp_path / "raw.jsonl"
    raw.write_text('{"problem": "What is 1 + 1?", "answer": "2", "id": "b"}\n')
    output = tmp_path / "bare.parquet"
    assert (
        data_prep_math(
            [
                "--input",
                f"digit_sums={raw}",
                "--output",
                str(output),
                "--template",
                "bare",
                "--demonstration",
                "What is 2 + 5?",
                "7",
            ]
        )
        == 0
    )
    (row,) = pd.read_parquet(output).to_dict(orient="records")
    assert [m["content"] for m in row["prompt"]] == ["What is 2 + 5?", "\\boxed{7}", "What is 1 + 1?"]
    assert compute_score(row["data_source"], "\\boxed{2}", row["reward_model"]["ground_truth"])["score"] == 1.0
