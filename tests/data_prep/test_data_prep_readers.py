"""Input locations and readers: SOURCE=LOCATION parsing, local formats, LiveCodeBench
release shards, and the Hugging Face paths (with the hub replaced by local stand-ins)."""

from __future__ import annotations

import json

import pytest

from data_prep.errors import DataPrepError
from data_prep.livecodebench_releases import RELEASE_FILES, release_files
from data_prep.readers import open_records, parse_input_spec

SOURCES = ("aime25", "livecodebench", "deepcoder")


def test_hf_locations_are_parsed():
    spec = parse_input_spec("deepcoder=hf:agentica-org/DeepCoder-Preview-Dataset:lcbv5@train", SOURCES)
    assert (spec.source, spec.hf_dataset, spec.hf_config, spec.hf_split) == (
        "deepcoder",
        "agentica-org/DeepCoder-Preview-Dataset",
        "lcbv5",
        "train",
    )
    assert spec.origin == "agentica-org/DeepCoder-Preview-Dataset:lcbv5@train"
    plain = parse_input_spec("aime25=hf:math-ai/aime25", SOURCES)
    assert (plain.hf_config, plain.hf_split) == (None, None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("aime25", "expected SOURCE=LOCATION"),
        ("gsm8k=hf:openai/gsm8k", "unknown source 'gsm8k'"),
        ("aime25=hf:aime25", "hf:OWNER/NAME"),
        ("aime25=hf:math-ai/aime25@", "hf:OWNER/NAME"),
        ("aime25=/does/not/exist.jsonl", "does not exist"),
    ],
)
def test_bad_locations_are_explained(text, message):
    with pytest.raises(DataPrepError, match=message):
        parse_input_spec(text, SOURCES)


def test_unknown_suffix_is_refused(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("a,b\n")
    with pytest.raises(DataPrepError, match="not a .jsonl, .json or .parquet"):
        parse_input_spec(f"aime25={path}", SOURCES)


def test_jsonl_rows_carry_line_numbers_and_bad_lines_are_marked(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n{broken\n[1, 2]\n{"a": 2}\n')
    stream = open_records(parse_input_spec(f"aime25={path}", SOURCES))
    records = list(stream.records)
    assert stream.total == 4
    assert [r.location.rsplit(":", 1)[1] for r in records] == ["line 1", "line 3", "line 4", "line 5"]
    assert records[0].data == {"a": 1} and records[0].error is None
    assert records[1].data is None and records[1].error[0] == "invalid JSON"
    assert records[2].error[0] == "not an object"
    assert records[3].data == {"a": 2}


def test_invalid_utf8_line_is_marked(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": "\xff"}\n')
    records = list(open_records(parse_input_spec(f"aime25={path}", SOURCES)).records)
    assert records[0].data == {"a": 1}
    assert records[1].error == ("invalid UTF-8", "not UTF-8 text (byte 7)")


def test_damaged_parquet_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "rows.parquet"
    path.write_bytes(b"PAR1 this is not really parquet PAR1")
    with pytest.raises(DataPrepError, match=f"{path}: cannot read as parquet"):
        open_records(parse_input_spec(f"aime25={path}", SOURCES))


def test_json_file_must_hold_a_list(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps({"problem": "x"}))
    with pytest.raises(DataPrepError, match="expected a JSON list"):
        open_records(parse_input_spec(f"aime25={path}", SOURCES))
    path.write_text(json.dumps([{"problem": "x"}, 3]))
    records = list(open_records(parse_input_spec(f"aime25={path}", SOURCES)).records)
    assert records[0].location.endswith("row 0") and records[1].error[0] == "not an object"


def test_release_tags_are_cumulative():
    assert release_files("release_v1") == ("test.jsonl",)
    assert release_files("release_v6") == tuple(["test.jsonl"] + [f"test{n}.jsonl" for n in range(2, 7)])
    assert release_files("v6") == ("test6.jsonl",)
    assert release_files("v5_v6") == ("test5.jsonl", "test6.jsonl")
    assert RELEASE_FILES["release_latest"] == RELEASE_FILES["release_v6"]
    with pytest.raises(DataPrepError, match="unknown LiveCodeBench release tag 'release_v9'"):
        release_files("release_v9")


def test_release_folder_reads_only_the_release_shards(fixtures):
    spec = parse_input_spec(f"livecodebench={fixtures / 'code_generation_lite'}", SOURCES)
    v5 = list(open_records(spec, "release_v5").records)
    v6 = open_records(spec, "release_v6")
    assert len(v5) == 5 and v6.total == 9
    assert not any("test6.jsonl" in r.location for r in v5)
    only_v6 = list(open_records(spec, "v6").records)
    assert len(only_v6) == 4 and all("test6.jsonl" in r.location for r in only_v6)


def test_release_folder_with_missing_shards_says_which(tmp_path, fixtures):
    (tmp_path / "test.jsonl").write_text((fixtures / "code_generation_lite" / "test.jsonl").read_text())
    spec = parse_input_spec(f"livecodebench={tmp_path}", SOURCES)
    with pytest.raises(DataPrepError, match="missing test2.jsonl"):
        open_records(spec, "release_v2")


def test_folder_needs_the_livecodebench_source(fixtures):
    spec = parse_input_spec(f"aime25={fixtures / 'code_generation_lite'}", SOURCES)
    with pytest.raises(DataPrepError, match="only the livecodebench source"):
        open_records(spec, None)


def test_livecodebench_hub_id_downloads_release_shards(monkeypatch, fixtures):
    requested = []

    def fake_download(repo_id, filename, repo_type):
        requested.append((repo_id, filename, repo_type))
        return str(fixtures / "code_generation_lite" / filename)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    spec = parse_input_spec("livecodebench=hf:livecodebench/code_generation_lite:release_v2", SOURCES)
    records = list(open_records(spec, "release_v6").records)  # the release named in the input wins
    assert [f for _, f, _ in requested] == ["test.jsonl", "test2.jsonl"]
    assert {r for r, _, t in requested} == {"livecodebench/code_generation_lite"} and requested[0][2] == "dataset"
    assert len(records) == 2


def test_hf_dataset_ids_go_through_datasets(monkeypatch):
    import datasets

    calls = []

    def fake_load(path, name=None, split=None):
        calls.append((path, name, split))
        table = datasets.Dataset.from_list([{"problem": "p", "answer": "1"}, {"problem": "q", "answer": "2"}])
        return table if split else datasets.DatasetDict({"train": table, "test": table})

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    stream = open_records(parse_input_spec("aime25=hf:math-ai/aime25@test", SOURCES))
    records = list(stream.records)
    assert calls == [("math-ai/aime25", None, "test")]
    assert stream.total == 2 and records[1].data == {"problem": "q", "answer": "2"}
    assert records[1].location == "math-ai/aime25@test row 1"
    with pytest.raises(DataPrepError, match="choose one with @SPLIT"):
        open_records(parse_input_spec("aime25=hf:math-ai/aime25", SOURCES))


def test_hub_failures_become_clear_errors(monkeypatch):
    import datasets
    import huggingface_hub

    def no_network(*args, **kwargs):
        raise ConnectionError("offline")

    monkeypatch.setattr(datasets, "load_dataset", no_network)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_network)
    with pytest.raises(
        DataPrepError, match=r"cannot load math-ai/aime25 \(config None, split test\).*ConnectionError: offline"
    ):
        open_records(parse_input_spec("aime25=hf:math-ai/aime25@test", SOURCES))
    with pytest.raises(DataPrepError, match="cannot download test.jsonl of livecodebench/code_generation_lite"):
        open_records(parse_input_spec("livecodebench=hf:livecodebench/code_generation_lite", SOURCES), "release_v1")


def test_parquet_rows_stream_in_order(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([{"i": i} for i in range(150)]), path)
    stream = open_records(parse_input_spec(f"aime25={path}", SOURCES))
    records = list(stream.records)
    assert stream.total == 150 and [r.data["i"] for r in records] == list(range(150))
    assert records[149].location == f"{path} row 149"
