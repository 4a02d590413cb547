"""The commands documented in ``data_prep.math`` / ``data_prep.code`` (and copied to
docs/data.md) run as written, with the Hugging Face hub replaced by the committed fixtures, and
write the files the recipes read."""

from __future__ import annotations

import re
import shlex

import pyarrow.parquet as pq
import pytest

from data_prep import code as code_cli
from data_prep import math as math_cli
from data_prep.code_sources import CODE_SOURCE_TABLE
from data_prep.math_sources import MATH_SOURCE_TABLE
from data_prep.schema import validate_parquet_file

from .conftest import FIXTURES

HUB_FIXTURES = {
    ("math-ai/aime25", None): "aime25_test.jsonl",
    ("Maxwell-Jia/AIME_2024", None): "aime_2024_problems.parquet",
    ("MathArena/hmmt_feb_2025", None): "hmmt_feb_2025.parquet",
    ("HuggingFaceH4/MATH-500", None): "math500_test.jsonl",
    ("BytedTsinghua-SIA/DAPO-Math-17k", None): "dapo_math_17k.parquet",
    ("agentica-org/DeepCoder-Preview-Dataset", "lcbv5"): "deepcoder_lcbv5.parquet",
    ("agentica-org/DeepCoder-Preview-Dataset", "primeintellect"): "deepcoder_primeintellect.parquet",
    ("agentica-org/DeepCoder-Preview-Dataset", "taco"): "deepcoder_taco.parquet",
    ("PrimeIntellect/verifiable-coding-problems", None): "verifiable_coding_problems.parquet",
}
RECIPE_FILES = {"math_train", "aime24", "aime25", "hmmt25", "math500", "code_train", "lcb_v6"}


def documented_commands(module) -> list[list[str]]:
    text = module.__doc__.replace("\\\n", " ")
    return [shlex.split(line.strip()) for line in text.splitlines() if line.strip().startswith("python -m data_prep.")]


def fake_load_dataset(path, name=None, split=None):
    import json

    import datasets

    fixture = FIXTURES / HUB_FIXTURES[(path, name)]
    if fixture.suffix == ".parquet":
        rows = pq.read_table(fixture).to_pylist()
    else:
        rows = [json.loads(line) for line in fixture.read_text().splitlines() if line.strip()]
    assert split is not None, "documented commands name their split"
    return datasets.Dataset.from_list(rows)


def fake_hf_hub_download(repo_id, filename, repo_type):
    assert (repo_id, repo_type) == ("livecodebench/code_generation_lite", "dataset")
    return str(FIXTURES / "code_generation_lite" / filename)


@pytest.fixture
def offline_hub(monkeypatch):
    import datasets
    import huggingface_hub

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_hf_hub_download)


def test_documented_dataset_ids_are_the_known_ones():
    documented = set()
    for module in (math_cli, code_cli):
        for argv in documented_commands(module):
            documented |= set(re.findall(r"=hf:([^:@\s]+)", " ".join(argv)))
    known = {hf for table in (MATH_SOURCE_TABLE, CODE_SOURCE_TABLE) for s in table.values() for hf in s.hf_datasets}
    assert documented and documented <= known


def test_documented_commands_write_the_recipe_files(offline_hub, tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    written = set()
    # evaluation sets first: the training commands decontaminate against them
    for module in (math_cli, code_cli):
        commands = documented_commands(module)
        commands.sort(key=lambda argv: "--decontaminate-against" in argv)
        for argv in commands:
            argv = [arg.replace("$DATA_DIR", str(tmp_path)) for arg in argv[3:]]
            assert module.main(argv) == 0, argv
            output = argv[argv.index("--output") + 1]
            assert validate_parquet_file(output) > 0
            written.add(output.rsplit("/", 1)[1].removesuffix(".parquet"))
    assert RECIPE_FILES <= written
