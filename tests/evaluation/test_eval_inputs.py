"""Input checking: verl parquet rows, scorer results, sampling settings and seeds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evaluation.problems import load_problems, to_builtin
from evaluation.sampling_settings import PRESETS, SamplingConfig, derive_seed, preset
from evaluation.scoring import ParallelScorer, ScoreJob, normalize_result, resolve_scorer


def _row(**overrides):
    row = {
        "data_source": "aime25",
        "prompt": [{"role": "user", "content": "1+1?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "2"},
        "extra_info": {"split": "test", "index": 0},
    }
    row.update(overrides)
    return row


def _write(tmp_path, rows, name="data.parquet"):
    path = tmp_path / name
    pd.DataFrame(rows).to_parquet(path)
    return path


def test_loads_verl_rows_with_numpy_prompts(math_parquet):
    problems = load_problems(math_parquet)
    assert [p.problem_id for p in problems] == [f"toy_math/{i}" for i in range(6)]
    first = problems[0]
    assert first.messages == [{"role": "user", "content": "Question 0: compute 2. Put the answer in \\boxed{}."}]
    assert first.ground_truth == "2" and first.difficulty == "easy"
    assert first.extra_info == {"split": "test", "index": 0, "difficulty": "easy"}
    assert isinstance(first.extra_info["index"], int)  # numpy scalars become Python values
    assert len(load_problems(math_parquet, limit=2)) == 2


def test_rows_without_index_get_row_ids(tmp_path):
    path = _write(tmp_path, [_row(extra_info={"split": "test"}), _row(extra_info={"split": "test"})])
    assert [p.problem_id for p in load_problems(path)] == ["aime25/row0", "aime25/row1"]


@pytest.mark.parametrize(
    "rows,message",
    [
        ([_row(), _row(prompt=[])], r"row 1: 'prompt' must be a non-empty list"),
        ([_row(prompt=[{"role": "user"}])], r"row 0: prompt\[0\] must be a dict with string 'role' and 'content'"),
        ([_row(reward_model={"style": "rule"})], r"row 0: 'reward_model' must be a dict with a 'ground_truth'"),
        ([_row(data_source="")], r"row 0: 'data_source' must be a non-empty string"),
        ([_row(), _row()], r"rows 0 and 1 share the problem id 'aime25/0'"),
    ],
)
def test_bad_rows_are_reported_with_file_and_row(tmp_path, rows, message):
    path = _write(tmp_path, rows)
    with pytest.raises(ValueError, match=message) as info:
        load_problems(path)
    assert "data.parquet" in str(info.value)


def test_missing_columns_and_files(tmp_path):
    path = _write(tmp_path, [{"data_source": "aime25", "question": "x"}])
    with pytest.raises(ValueError, match=r"missing column\(s\) \['prompt', 'reward_model'\]"):
        load_problems(path)
    with pytest.raises(FileNotFoundError, match="data_prep"):
        load_problems(tmp_path / "absent.parquet")


def test_to_builtin_converts_nested_numpy():
    value = {"a": np.array([{"b": np.int64(3)}], dtype=object), "c": np.float32(0.5), "d": (1, np.bool_(True))}
    assert to_builtin(value) == {"a": [{"b": 3}], "c": 0.5, "d": [1, True]}


JOB = ScoreJob("aime25/7", 3, "aime25", "\\boxed{2}", "2", {})


def test_scorer_results_are_checked_against_the_contract():
    ok = normalize_result(
        {"score": 1, "acc": True, "pred": 2, "reason": "correct", "pass_fraction": np.float64(1.0)}, JOB
    )
    assert ok == {"score": 1.0, "acc": 1.0, "pred": "2", "reason": "correct", "details": {"pass_fraction": 1.0}}
    with pytest.raises(KeyError, match=r"aime25/7 sample 3.*missing key\(s\) \['acc'\]"):
        normalize_result({"score": 1.0}, JOB)
    with pytest.raises(TypeError, match="expected a dict"):
        normalize_result(1.0, JOB)
    with pytest.raises(ValueError, match="'acc' must be"):
        normalize_result({"score": 1.0, "acc": 2}, JOB)
    with pytest.raises(ValueError, match="'score' must be a finite number"):
        normalize_result({"score": float("nan"), "acc": 0}, JOB)


def test_scorer_failures_name_the_sample():
    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom")

    with pytest.raises(RuntimeError, match=r"failed on aime25/7 sample 3: ZeroDivisionError"):
        ParallelScorer(broken, num_workers=0).submit([JOB])


def test_scorer_spec_resolution_errors():
    with pytest.raises(ValueError, match="module:function"):
        resolve_scorer("reward.score")
    with pytest.raises(ImportError, match="cannot import scorer module"):
        resolve_scorer("no_such_module_xyz:fn")
    with pytest.raises(ValueError, match="no callable 'absent'"):
        resolve_scorer("json:absent")


def test_presets_follow_the_model_cards():
    qwen = PRESETS["qwen3-thinking"]
    assert (qwen.temperature, qwen.top_p, qwen.top_k, qwen.min_p) == (0.6, 0.95, 20, 0.0)
    assert qwen.chat_template_kwargs == {"enable_thinking": True}
    assert PRESETS["gpt-oss-high"].chat_template_kwargs == {"reasoning_effort": "high"}
    changed = preset("qwen3-thinking", max_new_tokens=1024, temperature=None)
    assert changed.max_new_tokens == 1024 and changed.temperature == 0.6
    with pytest.raises(ValueError, match="unknown sampling preset"):
        preset("llama")
    for bad in ({"temperature": -1}, {"top_p": 0}, {"top_k": 0}, {"min_p": 1.0}, {"max_new_tokens": 0}):
        with pytest.raises(ValueError):
            SamplingConfig(**bad)


def test_seeds_are_stable_and_distinct():
    seeds = {derive_seed(0, f"aime25/{p}", j) for p in range(30) for j in range(32)}
    assert len(seeds) == 30 * 32
    assert all(0 <= s < 2**31 for s in seeds)
    assert derive_seed(0, "aime25/1", 2) == derive_seed(0, "aime25/1", 2) != derive_seed(1, "aime25/1", 2)
    # golden value: first 4 bytes of sha256(b"0:aime25/1:2"), top bit cleared; the same on every machine
    assert derive_seed(0, "aime25/1", 2) == 1385192047
