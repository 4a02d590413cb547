"""evaluation.from_validation: verl's validation dump as an evaluation run directory.

The dump is written here by verl's own writer (``PPOTrainer._write_generations``, the function
``trainer.validation_data_dir`` calls), with the prompts decoded as verl's ``_validate`` decodes
them (the agent loop's chat-template ids, left-padded with the pad token, decoded without special
tokens) and every response scored by ``reward/score.py``; the quickstart's e2e test runs the real
trainer's dump through it.
"""

from __future__ import annotations

import json
import random

import pytest

from evaluation.benchmark_runs import read_benchmarks
from evaluation.from_validation import convert, main
from evaluation.problems import load_problems
from evaluation.sampling_settings import SamplingConfig
from reward.score import compute_score

K = 3
SAMPLING = SamplingConfig(temperature=0.6, top_p=1.0, top_k=None, max_new_tokens=24)
ANSWERS = ["2", "6", "9", "12"]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture()
def data(tmp_path, write_math_parquet_fn):
    return write_math_parquet_fn(tmp_path / "sums.parquet", "digit_sums_test", ANSWERS)


def verl_prompt_text(tokenizer, messages, pad_to: int = 64) -> str:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    padded = [tokenizer.pad_token_id] * (pad_to - len(ids)) + list(ids)  # verl's prompts are left-padded
    return tokenizer.decode(padded, skip_special_tokens=True)


def write_dump(path, tokenizer, data, responses, k=K, drop_acc=False):
    """responses(problem index, sample) -> text; returns {problem_id: [acc of sample 0..k-1]}."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    rows, accs = [], {}
    for i, problem in enumerate(load_problems(data)):
        uid = f"{random.Random(i).getrandbits(64):016x}"
        for j in range(k):
            text = responses(i, j)
            scored = compute_score(problem.data_source, text, problem.ground_truth)
            accs.setdefault(problem.problem_id, []).append(scored["acc"])
            rows.append(
                (f"{uid}_{j}_0", verl_prompt_text(tokenizer, problem.messages), text, problem.ground_truth, scored)
            )
    random.Random(0).shuffle(rows)  # verl sorts by its key (problems in uid order); the converter relies on no order
    extra = {
        key: [row[4][key] for row in rows] for key in rows[0][4] if key != "score" and not (drop_acc and key == "acc")
    }
    PPOTrainer._write_generations(
        inputs=[row[1] for row in rows],
        outputs=[row[2] for row in rows],
        gts=[row[3] for row in rows],
        scores=[row[4]["score"] for row in rows],
        reward_extra_infos_dict={**extra, "reward": [row[4]["score"] for row in rows], "uid": [row[0] for row in rows]},
        dump_path=str(path),
        global_steps=5,
    )
    return accs


def right_on_even_samples(i: int, j: int) -> str:
    return f"\\boxed{{{ANSWERS[i]}}}" if j % 2 == 0 else "\\boxed{0}"


def test_the_dump_becomes_a_run_the_report_reads_with_every_sample_in_place(tmp_path, tokenizer, data):
    accs = write_dump(
        tmp_path / "val", tokenizer, data, lambda i, j: right_on_even_samples(i, j) if i != 1 else "\\boxed{6}"
    )
    out = tmp_path / "eval"
    summary = convert(
        tmp_path / "val" / "5.jsonl",
        [data],
        tokenizer,
        out,
        K,
        SAMPLING,
        backend={"engine": "vllm", "dtype": "float32"},
    )
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [(s["problem_id"], s["sample_index"]) for s in samples] == [
        (f"digit_sums_test/{i}", j) for i in range(4) for j in range(K)
    ]
    for sample in samples:  # each sample is the response verl drew as that sample, with its reward's verdict
        i, j = int(sample["problem_id"].split("/")[1]), sample["sample_index"]
        assert sample["response"] == (right_on_even_samples(i, j) if i != 1 else "\\boxed{6}")
        assert sample["acc"] == accs[sample["problem_id"]][j] and sample["pred"] is not None
    expected = sum(sum(a) / K for a in accs.values()) / len(accs)
    assert expected == pytest.approx((3 * 2 / 3 + 1) / 4)
    assert summary["overall"]["avg@k"] == pytest.approx(expected)
    (result,) = read_benchmarks(out).values()
    assert result.accuracy["digit_sums_test/1"] == 1.0 and result.accuracy["digit_sums_test/0"] == pytest.approx(2 / 3)
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["backend"] == {"name": "verl-validation", "engine": "vllm", "dtype": "float32"}
    assert manifest["validation_dump"]["step"] == 5 and manifest["k"] == K and manifest["n_problems"] == 4
    assert manifest["sampling"]["temperature"] == 0.6


def test_response_lengths_are_re_tokenized_and_a_full_length_one_is_truncated(tmp_path, tokenizer, data):
    long = "1 + " * 40
    write_dump(tmp_path / "val", tokenizer, data, lambda i, j: long if (i, j) == (2, 1) else "\\boxed{1}")
    convert(tmp_path / "val" / "5.jsonl", [data], tokenizer, tmp_path / "eval", K, SAMPLING, backend={})
    samples = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()]
    truncated = [(s["problem_id"], s["sample_index"]) for s in samples if s["truncated"]]
    assert truncated == [("digit_sums_test/2", 1)]
    assert all(s["num_tokens"] == len(tokenizer.encode(s["response"], add_special_tokens=False)) for s in samples)


def test_a_dump_of_other_data_is_refused_naming_the_line(tmp_path, tokenizer, data, write_math_parquet_fn):
    other = write_math_parquet_fn(tmp_path / "other.parquet", "digit_sums_test", ["3", "4", "5", "7"])
    write_dump(tmp_path / "val", tokenizer, other, right_on_even_samples)
    with pytest.raises(ValueError, match=r"5\.jsonl line 1: its prompt is none of the 4 problems"):
        convert(tmp_path / "val" / "5.jsonl", [data], tokenizer, tmp_path / "eval", K, SAMPLING, backend={})
    assert not (tmp_path / "eval").exists()


def test_another_number_of_samples_per_problem_is_refused(tmp_path, tokenizer, data):
    write_dump(tmp_path / "val", tokenizer, data, right_on_even_samples, k=2)
    with pytest.raises(ValueError, match=r"every problem needs k=3 samples .*4 have another number"):
        convert(tmp_path / "val" / "5.jsonl", [data], tokenizer, tmp_path / "eval", K, SAMPLING, backend={})


def test_a_dump_without_acc_is_refused_saying_what_the_reward_must_return(tmp_path, tokenizer, data):
    write_dump(tmp_path / "val", tokenizer, data, right_on_even_samples, drop_acc=True)
    with pytest.raises(ValueError, match=r"line 1: no 'acc'"):
        convert(tmp_path / "val" / "5.jsonl", [data], tokenizer, tmp_path / "eval", K, SAMPLING, backend={})


def test_the_command_line_writes_the_run(tmp_path, tiny_model_dir, tokenizer, data, capsys):
    write_dump(tmp_path / "val", tokenizer, data, right_on_even_samples)
    args = [
        "--dump",
        str(tmp_path / "val" / "5.jsonl"),
        "--data",
        str(data),
        "--tokenizer",
        str(tiny_model_dir),
        "--output-dir",
        str(tmp_path / "eval"),
        "--k",
        "3",
        "--temperature",
        "0.6",
        "--top-p",
        "1.0",
        "--top-k",
        "-1",
        "--max-new-tokens",
        "24",
    ]
    assert main(args) == 0
    assert "4 problems x 3 samples: avg@3 = 66.67%" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="from_validation: .*does not exist"):
        main([*args[:1], str(tmp_path / "val" / "6.jsonl"), *args[2:]])
