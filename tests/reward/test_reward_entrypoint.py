"""The verl-facing entry point: dispatch, options, and the three ways verl calls it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from reward import sources
from reward.options import RewardOptions
from reward.score import compute_score, compute_score_async

REPO = Path(__file__).resolve().parents[2]
SCORE_FILE = REPO / "reward" / "score.py"
ADD = json.dumps({"tests": [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}], "fn_name": None})
ADD_PROGRAM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def test_source_names_are_the_agreed_ones():
    assert sources.MATH_SOURCES == (
        "math_dapo",
        "aime24",
        "aime25",
        "hmmt25",
        "math500",
        "deepscaler",
        "arithmetic",
        "arithmetic_test",
        "digit_sums",
        "digit_sums_test",
    )
    assert sources.CODE_SOURCES == ("livecodebench", "deepcoder", "primeintellect")
    assert all(sources.source_kind(name) == "math" for name in sources.MATH_SOURCES)
    assert all(sources.source_kind(name) == "code" for name in sources.CODE_SOURCES)


def test_unknown_source_lists_the_known_ones():
    with pytest.raises(ValueError) as error:
        compute_score("gsm8k", "\\boxed{1}", "1")
    for name in sources.KNOWN_SOURCES:
        assert name in str(error.value)


@pytest.mark.parametrize("source", sources.CODE_SOURCES)
def test_every_code_source_runs_code(source):
    assert compute_score(source, ADD_PROGRAM, ADD, code_test_timeout_s=5)["score"] == 1.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"score_mod": "signed"}, "unknown reward option"),
        ({"score_mode": "ternary"}, "score_mode"),
        ({"code_mode": "best"}, "code_mode"),
        ({"math_timeout_s": 0}, "math_timeout_s"),
        ({"math_timeout_s": "5"}, "math_timeout_s"),
        ({"math_workers": 0}, "math_workers"),
        ({"code_backend": "docker"}, "code_backend"),
        ({"code_backend": "sandbox_fusion"}, "sandbox_fusion_url"),
    ],
)
def test_bad_options_fail_with_the_valid_choices(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RewardOptions.from_kwargs(kwargs)


def test_verl_call_kwargs_are_accepted():
    result = compute_score("math500", "\\boxed{2}", "2", reward_router_address=None, reward_model_tokenizer=None)
    assert result["score"] == 1.0


def test_async_variant_runs_many_calls_concurrently():
    async def main():
        calls = [compute_score_async("aime24", f"\\boxed{{{i}}}", str(i % 3)) for i in range(12)]
        calls.append(compute_score_async("livecodebench", ADD_PROGRAM, ADD, code_test_timeout_s=5))
        return await asyncio.gather(*calls)

    results = asyncio.run(main())
    assert [r["score"] for r in results[:12]] == [1.0 if i == i % 3 else 0.0 for i in range(12)]
    assert results[12]["score"] == 1.0


def _verl_reward_fn(name: str, reward_kwargs: dict):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create(
        {"reward": {"custom_reward_function": {"path": str(SCORE_FILE), "name": name, "reward_kwargs": reward_kwargs}}}
    )
    return get_custom_reward_fn(config)


def test_loaded_by_path_the_way_verl_does():
    fn = _verl_reward_fn("compute_score", {"score_mode": "signed"})
    assert fn(data_source="aime25", solution_str="Answer: 3", ground_truth="4", extra_info={})["score"] == -1.0


class _ByteTokenizer:
    """Decodes token ids that are byte values (enough for a reward manager)."""

    def decode(self, ids, skip_special_tokens=True):
        return bytes(int(i) for i in ids).decode()


def _one_sample_batch(response: str, data_source: str, ground_truth: str):
    from verl import DataProto

    ids = torch.tensor([list(response.encode())])
    prompt = torch.tensor([[1, 2]])
    return DataProto.from_dict(
        tensors={
            "prompts": prompt,
            "responses": ids,
            "attention_mask": torch.ones(1, prompt.shape[1] + ids.shape[1], dtype=torch.long),
        },
        non_tensors={
            "data_source": np.array([data_source], dtype=object),
            "reward_model": np.array([{"ground_truth": ground_truth, "style": "rule"}], dtype=object),
            "extra_info": np.array([{"index": 0}], dtype=object),
        },
    )


@pytest.mark.parametrize("name", ["compute_score", "compute_score_async"])
def test_verl_naive_reward_manager_calls_it(name):
    """verl 0.9.1's naive manager calls a sync scorer from an executor thread, an async one in its loop."""
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    fn = _verl_reward_fn(name, {"math_timeout_s": 10})
    manager = NaiveRewardManager(OmegaConf.create({}), _ByteTokenizer(), fn)
    math_batch = _one_sample_batch("so \\boxed{\\frac{\\sqrt2}{2}}", "math500", "\\frac{1}{\\sqrt{2}}")
    code_batch = _one_sample_batch(ADD_PROGRAM, "livecodebench", ADD)
    math_out = manager.loop.run_until_complete(manager.run_single(math_batch))
    code_out = manager.loop.run_until_complete(manager.run_single(code_batch))
    assert math_out["reward_score"] == 1.0 and math_out["reward_extra_info"]["reason"] == "correct"
    assert code_out["reward_score"] == 1.0
    assert set(math_out["reward_extra_info"]) == set(code_out["reward_extra_info"])  # same keys for mixed batches


def test_survives_cloudpickle_into_another_process_like_the_remote_manager(tmp_path):
    """verl's remote manager ships the wrapped function to a Ray actor with cloudpickle."""
    import cloudpickle

    fn = _verl_reward_fn("compute_score", {"score_mode": "signed"})
    payload = tmp_path / "fn.pkl"
    payload.write_bytes(cloudpickle.dumps(fn))
    script = (
        "import pickle, sys, json\n"
        "fn = pickle.load(open(sys.argv[1], 'rb'))\n"
        "out = [fn(data_source='aime24', solution_str='\\\\boxed{\\\\sqrt{8}}', ground_truth='2\\\\sqrt2'),\n"
        f"       fn(data_source='livecodebench', solution_str={ADD_PROGRAM!r}, ground_truth={ADD!r})]\n"
        "print(json.dumps([o['score'] for o in out]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(payload)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [1.0, 1.0]


README_OVERRIDES = [
    f"reward.custom_reward_function.path={SCORE_FILE}",
    "reward.custom_reward_function.name=compute_score",
    "+reward.custom_reward_function.reward_kwargs.score_mode=signed",
    "+reward.custom_reward_function.reward_kwargs.code_test_timeout_s=6",
    "reward.reward_manager.name=naive",
    "reward.num_workers=8",
]


def test_readme_overrides_compose_with_verls_config():
    """The Hydra overrides docs/rewards.md gives compose with verl 0.9.1's ppo_trainer config
    and produce a working reward function (signed scores)."""
    from hydra import compose, initialize_config_module
    from verl.trainer.ppo.reward import get_custom_reward_fn

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name="ppo_trainer", overrides=README_OVERRIDES)
    fn = get_custom_reward_fn(config)
    assert fn(data_source="aime24", solution_str="Answer: 5", ground_truth="6")["score"] == -1.0
    assert fn(data_source="aime24", solution_str="Answer: 6", ground_truth="6")["score"] == 1.0


def test_every_reward_option_has_a_row_in_the_docs_table():
    """docs/rewards.md's reward_kwargs table names every RewardOptions field, and nothing else
    (the rows of its response-format table are the format names)."""
    import re
    from dataclasses import fields

    from reward.options import RewardOptions

    text = (REPO / "docs" / "rewards.md").read_text()
    rows = set()
    for line in text.splitlines():
        match = re.match(r"\| ((?:`\w+`(?: / )?)+) \|", line)
        if match:
            rows.update(re.findall(r"`(\w+)`", match.group(1)))
    options = {f.name for f in fields(RewardOptions)}
    assert options <= rows, f"options without a row in docs/rewards.md: {sorted(options - rows)}"
    assert rows & options == rows - {"plain", "qwen3_thinking", "harmony"}, sorted(rows - options)
