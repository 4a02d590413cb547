"""Read evaluation problems from a verl RL parquet file.

The row layout is verl's: ``data_source`` (str), ``prompt`` (list of ``{role, content}``;
a numpy array when read back through pandas), ``ability``, ``reward_model`` (``{style,
ground_truth}``) and ``extra_info`` (``{split, index, ...}``, optionally ``difficulty``).
Every malformed row is reported with the file, the row number and the key at fault.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model")


@dataclass(frozen=True)
class EvalProblem:
    """One prompt to sample from, with what the scorer needs to judge a response."""

    problem_id: str
    """Unique id: ``<data_source>/<extra_info.index>``, or ``<data_source>/row<N>`` without an index."""
    row: int
    data_source: str
    messages: list[dict[str, str]]
    ground_truth: Any
    extra_info: dict[str, Any] = field(default_factory=dict)
    difficulty: str | None = None


def to_builtin(value: Any) -> Any:
    """Convert numpy containers and scalars (as pandas returns them) into JSON-able Python."""
    if isinstance(value, np.ndarray):
        return [to_builtin(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): to_builtin(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_builtin(v) for v in value]
    return value


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file, recorded so a resumed run can check it reads the same data."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _parse_messages(raw: Any, where: str) -> list[dict[str, str]]:
    messages = to_builtin(raw)
    if not isinstance(messages, list) or not messages:
        raise ValueError(
            f"{where}: 'prompt' must be a non-empty list of {{role, content}} messages "
            f"(verl's chat format), got {type(raw).__name__}"
        )
    parsed = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str) or not isinstance(msg.get("content"), str):
            raise ValueError(f"{where}: prompt[{i}] must be a dict with string 'role' and 'content', got {msg!r:.200}")
        parsed.append({"role": msg["role"], "content": msg["content"]})
    return parsed


def load_problems(path: str | Path, limit: int | None = None) -> list[EvalProblem]:
    """Load and validate every row of a verl RL parquet file (the first ``limit`` rows if given)."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"evaluation data {path} does not exist; prepare it with the data_prep commands "
            "(see docs/data.md) or pass --data with a verl RL parquet"
        )
    frame = pd.read_parquet(path)
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{path}: missing column(s) {missing}; a verl RL parquet needs {list(REQUIRED_COLUMNS)} "
            f"(found {list(frame.columns)})"
        )
    if limit is not None:
        frame = frame.iloc[:limit]
    problems: list[EvalProblem] = []
    seen: dict[str, int] = {}
    for row, record in enumerate(frame.to_dict(orient="records")):
        where = f"{path} row {row}"
        data_source = record["data_source"]
        if not isinstance(data_source, str) or not data_source:
            raise ValueError(f"{where}: 'data_source' must be a non-empty string, got {data_source!r}")
        messages = _parse_messages(record["prompt"], where)
        reward_model = to_builtin(record["reward_model"])
        if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
            raise ValueError(
                f"{where}: 'reward_model' must be a dict with a 'ground_truth' key, got {reward_model!r:.200}"
            )
        ground_truth = reward_model["ground_truth"]
        if ground_truth is None:
            raise ValueError(f"{where}: reward_model.ground_truth is empty; every evaluation problem needs an answer")
        extra_info = to_builtin(record.get("extra_info")) if "extra_info" in frame.columns else None
        if extra_info is None:
            extra_info = {}
        if not isinstance(extra_info, dict):
            raise ValueError(f"{where}: 'extra_info' must be a dict, got {type(extra_info).__name__}")
        index = extra_info.get("index")
        problem_id = f"{data_source}/{index}" if index is not None else f"{data_source}/row{row}"
        if problem_id in seen:
            raise ValueError(
                f"{path}: rows {seen[problem_id]} and {row} share the problem id {problem_id!r} "
                "(data_source + extra_info.index); make extra_info.index unique per data_source"
            )
        seen[problem_id] = row
        difficulty = extra_info.get("difficulty")
        problems.append(
            EvalProblem(
                problem_id=problem_id,
                row=row,
                data_source=data_source,
                messages=messages,
                ground_truth=ground_truth,
                extra_info=extra_info,
                difficulty=None if difficulty is None else str(difficulty),
            )
        )
    if not problems:
        raise ValueError(f"{path}: no rows to evaluate")
    return problems
