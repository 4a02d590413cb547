"""Reading raw input rows: local jsonl / json / parquet files, LiveCodeBench release
folders, or Hugging Face dataset ids (downloaded by ``datasets`` on the user's machine).

An input is given on the command line as ``SOURCE=LOCATION`` where ``SOURCE`` is a
``data_source`` name and ``LOCATION`` is either a path or ``hf:DATASET_ID[:CONFIG][@SPLIT]``.
Every row comes with a human-readable location (file and line/row) used in error messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_prep.errors import DataPrepError
from data_prep.livecodebench_releases import LIVECODEBENCH_HF_DATASET, release_files

HF_PREFIX = "hf:"
LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")
PARQUET_BATCH_ROWS = 64


@dataclass(frozen=True)
class InputSpec:
    """One ``SOURCE=LOCATION`` input of a run."""

    source: str
    location: str
    path: Path | None = None
    hf_dataset: str | None = None
    hf_config: str | None = None
    hf_split: str | None = None

    @property
    def origin(self) -> str:
        """Where the rows come from, as written into ``extra_info.origin``."""
        if self.hf_dataset is not None:
            text = self.hf_dataset
            if self.hf_config:
                text += f":{self.hf_config}"
            if self.hf_split:
                text += f"@{self.hf_split}"
            return text
        assert self.path is not None
        return self.path.name


@dataclass(frozen=True)
class RawRecord:
    """One input row and where it was read from (``file:line N`` or ``file row N``).

    A row that could not even be parsed has ``data`` None and ``error`` set to
    ``(reason, detail)``; the pipeline stops on it or counts it (``--skip-bad-rows``).
    """

    location: str
    data: dict[str, Any] | None
    error: tuple[str, str] | None = None


@dataclass
class RecordStream:
    """An iterator of raw records with a row count when it is known up front."""

    records: Iterator[RawRecord]
    total: int | None


def parse_input_spec(text: str, known_sources: tuple[str, ...]) -> InputSpec:
    """Parse ``SOURCE=LOCATION`` (``LOCATION`` a path or ``hf:ID[:CONFIG][@SPLIT]``)."""
    source, sep, location = text.partition("=")
    if not sep or not source or not location:
        raise DataPrepError(
            f"--input {text!r}: expected SOURCE=LOCATION, e.g. aime25=hf:math-ai/aime25@test "
            f"or aime25=/data/aime25.jsonl; SOURCE is one of {', '.join(known_sources)}"
        )
    if source not in known_sources:
        raise DataPrepError(
            f"--input {text!r}: unknown source {source!r}; this command accepts {', '.join(known_sources)}"
        )
    if location.startswith(HF_PREFIX):
        rest = location[len(HF_PREFIX) :]
        rest, at, split = rest.partition("@")
        dataset, colon, config = rest.partition(":")
        if not dataset or "/" not in dataset or (at and not split) or (colon and not config):
            raise DataPrepError(
                f"--input {text!r}: expected hf:OWNER/NAME[:CONFIG][@SPLIT], "
                "e.g. hf:agentica-org/DeepCoder-Preview-Dataset:lcbv5@train"
            )
        return InputSpec(source, location, hf_dataset=dataset, hf_config=config or None, hf_split=split or None)
    path = Path(location).expanduser()
    if not path.exists():
        raise DataPrepError(f"--input {text!r}: {path} does not exist (for a Hugging Face dataset write hf:OWNER/NAME)")
    if path.is_file() and not path.name.endswith(LOCAL_SUFFIXES):
        raise DataPrepError(f"--input {text!r}: {path} is not a .jsonl, .json or .parquet file")
    return InputSpec(source, location, path=path)


def _iter_jsonl(path: Path) -> Iterator[RawRecord]:
    with path.open("rb") as handle:
        for line_number, raw_line in enumerate(handle, start=1):
            if not raw_line.strip():
                continue
            location = f"{path}:line {line_number}"
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield RawRecord(location, None, ("invalid UTF-8", f"not UTF-8 text (byte {exc.start})"))
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                yield RawRecord(location, None, ("invalid JSON", f"invalid JSON ({exc.msg} at column {exc.colno})"))
                continue
            if not isinstance(data, dict):
                yield RawRecord(location, None, ("not an object", f"expected a JSON object, got {type(data).__name__}"))
                continue
            yield RawRecord(location, data)


def _count_jsonl_rows(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


def _json_rows(path: Path) -> list[Any]:
    try:
        with path.open("r", encoding="utf-8") as handle:
            data = json.load(handle)
    except json.JSONDecodeError as exc:
        raise DataPrepError(
            f"{path}: invalid JSON ({exc.msg} at line {exc.lineno}); expected a list of objects"
        ) from None
    if not isinstance(data, list):
        raise DataPrepError(
            f"{path}: expected a JSON list of row objects, got {type(data).__name__} (use .jsonl for one object per "
            "line)"
        )
    return data


def _iter_json(path: Path, rows: list[Any]) -> Iterator[RawRecord]:
    for row_number, data in enumerate(rows):
        location = f"{path} row {row_number}"
        if not isinstance(data, dict):
            yield RawRecord(location, None, ("not an object", f"expected a JSON object, got {type(data).__name__}"))
            continue
        yield RawRecord(location, data)


def _iter_parquet(path: Path) -> Iterator[RawRecord]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    row_number = 0
    batches = pq.ParquetFile(path).iter_batches(batch_size=PARQUET_BATCH_ROWS)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (pa.ArrowException, OSError) as exc:
            raise DataPrepError(
                f"{path}: cannot read the rows after row {row_number} ({exc}); the file is damaged"
            ) from None
        for data in batch.to_pylist():
            yield RawRecord(f"{path} row {row_number}", data)
            row_number += 1


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path).metadata.num_rows
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise DataPrepError(f"{path}: cannot read as parquet ({exc})") from None


def _open_file(path: Path) -> RecordStream:
    if path.name.endswith(".jsonl"):
        return RecordStream(_iter_jsonl(path), _count_jsonl_rows(path))
    if path.name.endswith(".json"):
        rows = _json_rows(path)
        return RecordStream(_iter_json(path, rows), len(rows))
    return RecordStream(_iter_parquet(path), _parquet_rows(path))


def _chain(streams: list[RecordStream]) -> RecordStream:
    def records() -> Iterator[RawRecord]:
        for stream in streams:
            yield from stream.records

    totals = [s.total for s in streams]
    return RecordStream(records(), None if None in totals else sum(totals))  # type: ignore[arg-type]


def _livecodebench_release_paths(spec: InputSpec, release: str) -> list[Path]:
    names = release_files(release)
    if spec.path is not None:
        missing = [name for name in names if not (spec.path / name).is_file()]
        if missing:
            raise DataPrepError(
                f"{spec.path}: LiveCodeBench release {release} needs {', '.join(names)}; missing {', '.join(missing)} "
                f"(download them from https://huggingface.co/datasets/{LIVECODEBENCH_HF_DATASET})"
            )
        return [spec.path / name for name in names]
    from huggingface_hub import hf_hub_download

    paths = []
    for name in names:
        try:
            paths.append(Path(hf_hub_download(repo_id=spec.hf_dataset, filename=name, repo_type="dataset")))
        except Exception as exc:  # network, authentication and missing-file errors of huggingface_hub
            raise DataPrepError(
                f"{spec.location}: cannot download {name} of {spec.hf_dataset} ({type(exc).__name__}: {exc}); "
                "check the network, or download the release files and pass their folder instead"
            ) from exc
    return paths


def _open_hf_dataset(spec: InputSpec) -> RecordStream:
    import datasets

    try:
        loaded = datasets.load_dataset(spec.hf_dataset, name=spec.hf_config, split=spec.hf_split)
    except Exception as exc:  # datasets raises many types (not found, bad config/split, network)
        raise DataPrepError(
            f"{spec.location}: cannot load {spec.hf_dataset} (config {spec.hf_config}, split {spec.hf_split}) with "
            f"datasets.load_dataset ({type(exc).__name__}: {exc}); check the id, config and split on the hub, the "
            "network and HF_TOKEN, or pass a local file instead"
        ) from exc
    if isinstance(loaded, datasets.DatasetDict):
        splits = list(loaded)
        if len(splits) != 1:
            raise DataPrepError(
                f"{spec.location}: the dataset has splits {', '.join(splits)}; choose one with @SPLIT, "
                f"e.g. hf:{spec.hf_dataset}@{splits[0]}"
            )
        loaded = loaded[splits[0]]
    label = spec.origin

    def records() -> Iterator[RawRecord]:
        for row_number, data in enumerate(loaded):
            yield RawRecord(f"{label} row {row_number}", dict(data))

    return RecordStream(records(), len(loaded))


def open_records(spec: InputSpec, livecodebench_release: str | None = None) -> RecordStream:
    """Open the rows of one input.

    ``livecodebench_release`` (e.g. ``release_v6``) selects the shard files when the input is
    a folder of LiveCodeBench jsonl files or the ``livecodebench/code_generation_lite`` id
    (``hf:livecodebench/code_generation_lite:release_v5`` names the release in the input).
    """
    is_lcb_hub = spec.hf_dataset == LIVECODEBENCH_HF_DATASET
    if (spec.path is not None and spec.path.is_dir()) or is_lcb_hub:
        livecodebench_release = spec.hf_config or livecodebench_release
        if livecodebench_release is None:
            raise DataPrepError(
                f"{spec.location}: a folder or {LIVECODEBENCH_HF_DATASET} input is read as LiveCodeBench release "
                "shards; only the livecodebench source accepts it"
            )
        return _chain([_open_file(path) for path in _livecodebench_release_paths(spec, livecodebench_release)])
    if spec.path is not None:
        return _open_file(spec.path)
    return _open_hf_dataset(spec)
