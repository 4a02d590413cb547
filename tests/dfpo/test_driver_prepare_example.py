"""``dfpo.main``'s driver prepares an example's model and task only when they are missing or stale.

A launch of a CPU recipe names its example (``dfpo.example``); the driver checks the output root in
its own process (:func:`cpu_examples.prepare.is_prepared`) and runs ``python -m
cpu_examples.prepare`` only when something is missing or was written for another version, so a
relaunch (a resume, the quickstart's training after its prepare stage) does not pay that command's
imports again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from cpu_examples import prepare
from cpu_examples import pretrained_model as pm
from cpu_examples.addition_task import TEST_FILE, TRAIN_FILE
from cpu_examples.prepare import DEFAULT_SPEC
from cpu_examples.tiny_model import SPEC_FILE, TinyModelSpec
from dfpo.launch import driver_setup as driver


def _tiny_root(root: Path, spec: TinyModelSpec = DEFAULT_SPEC) -> Path:
    """An output root laid out as ``python -m cpu_examples.prepare --model tiny`` leaves it (the
    files' contents are not read by the check: the parquet files' presence and the model's spec)."""
    data = prepare.data_dir(root)
    data.mkdir(parents=True)
    for name in (TRAIN_FILE, TEST_FILE):
        (data / name).write_bytes(b"parquet")
    model = prepare.model_dir(root)
    model.mkdir(parents=True)
    (model / SPEC_FILE).write_text(json.dumps({"spec": asdict(spec)}))
    return root


def _config(root: Path, example: str = "tiny"):
    return OmegaConf.create({"dfpo": {"example": example, "output_root": str(root)}})


@pytest.fixture
def commands(monkeypatch):
    """The commands the driver runs (each one succeeds)."""
    ran = []

    def run(command, **kwargs):
        ran.append(command)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(driver.subprocess, "run", run)
    return ran


def test_a_prepared_tiny_root_runs_no_command(tmp_path, commands):
    root = _tiny_root(tmp_path / "out")
    assert prepare.is_prepared(root, "tiny")
    driver.prepare_example(_config(root))
    assert commands == []


@pytest.mark.parametrize("missing", ["train", "test", "model"])
def test_a_tiny_root_missing_a_file_runs_the_prepare_command(tmp_path, commands, missing):
    root = _tiny_root(tmp_path / "out")
    {
        "train": prepare.data_dir(root) / TRAIN_FILE,
        "test": prepare.data_dir(root) / TEST_FILE,
        "model": prepare.model_dir(root) / SPEC_FILE,
    }[missing].unlink()
    assert not prepare.is_prepared(root, "tiny")
    driver.prepare_example(_config(root))
    assert commands == [[sys.executable, "-m", "cpu_examples.prepare", "--model", "tiny", "--output-root", str(root)]]


def test_a_tiny_model_built_from_another_spec_is_rebuilt(tmp_path, commands):
    root = _tiny_root(tmp_path / "out", TinyModelSpec(seed=TinyModelSpec().seed + 1))
    assert not prepare.is_prepared(root, "tiny")
    driver.prepare_example(_config(root))
    assert len(commands) == 1


def test_an_unreadable_record_leaves_it_to_the_prepare_command(tmp_path, commands):
    root = _tiny_root(tmp_path / "out")
    (prepare.model_dir(root) / SPEC_FILE).write_text("{not json")
    driver.prepare_example(_config(root))
    assert len(commands) == 1


def test_a_failing_prepare_command_stops_the_driver_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(driver.subprocess, "run", lambda command, **kwargs: subprocess.CompletedProcess(command, 3))
    with pytest.raises(driver.DriverSetupError, match=r"cpu_examples\.prepare --model tiny .* failed \(exit status 3"):
        driver.prepare_example(_config(tmp_path / "empty"))


def test_no_example_runs_nothing(tmp_path, commands):
    driver.prepare_example(OmegaConf.create({"dfpo": {"example": None, "output_root": str(tmp_path)}}))
    assert commands == []


def test_an_unknown_example_is_refused():
    with pytest.raises(ValueError, match="unknown example model 'huge'"):
        prepare.is_prepared(Path("/nonexistent"), "huge")


def test_the_quickstarts_root_is_prepared_only_with_the_current_task_and_conversion(tmp_path, monkeypatch):
    def fake_convert(source, target, record):  # the conversion itself runs in the quickstart's end-to-end test
        target.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "model.safetensors"):
            (target / name).write_text("{}")
        (target / pm.RECORD_FILE).write_text(json.dumps(record))

    monkeypatch.setattr(pm, "convert", fake_convert)
    root = tmp_path / "out"
    assert not prepare.is_prepared(root, "smollm2_135m")
    prepare.prepare_pretrained(root, log=lambda _: None)  # the sums task through data_prep, the (fake) conversion
    assert prepare.is_prepared(root, "smollm2_135m")

    record_file = pm.model_dir(root) / pm.RECORD_FILE
    record = json.loads(record_file.read_text())
    record_file.write_text(json.dumps({**record, "conversion": record["conversion"] - 1}))
    assert not prepare.is_prepared(root, "smollm2_135m")  # an older conversion
    record_file.write_text(json.dumps(record))

    raw = prepare.data_dir(root) / "raw"
    stale = next(raw.iterdir())
    stale.write_text(stale.read_text() + "1 + 1 = 2\n")
    assert not prepare.is_prepared(root, "smollm2_135m")  # another version of the task


def test_a_different_gguf_file_leaves_the_root_unprepared_for_the_command_to_explain(tmp_path, monkeypatch):
    fake = tmp_path / "other.gguf"
    fake.write_bytes(b"not the pinned file")
    monkeypatch.setattr(pm, "locate_gguf", lambda: pm.GgufSource(fake, pm.DISTRIBUTION_VERSION, None))
    assert not pm.is_converted(tmp_path)
    with pytest.raises(pm.PretrainedModelError, match="SHA-256"):
        pm.ensure_pretrained_model(tmp_path, log=lambda _: None)
