"""Validation of verl RL rows before they are written (and of prepared files read back).

A row is ``{data_source, prompt, ability, reward_model, extra_info}`` with
``prompt`` a list of ``{role, content}`` messages ending with the user turn,
``ability`` ``"math"`` or ``"code"`` matching the source, ``reward_model``
``{"style": "rule", "ground_truth": str}`` (code ground truth in the format of
:mod:`data_prep.code_ground_truth`) and ``extra_info`` holding at least ``split`` and
``index``, with the same keys and value types in every row of a file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from data_prep.code_ground_truth import decode_ground_truth
from data_prep.errors import DataPrepError

ROW_KEYS = frozenset({"data_source", "prompt", "ability", "reward_model", "extra_info"})
ROLES = ("system", "user", "assistant")
SPLITS = ("train", "test")


class RowSchemaError(DataPrepError):
    """A prepared row does not have the shape verl and ``reward/`` expect."""


class RowSchemaValidator:
    """Checks rows one at a time; ``extra_info`` keys and types are fixed by the first row."""

    def __init__(self) -> None:
        self._extra_info_types: dict[str, type] | None = None
        self._indices: set[int] = set()

    def check(self, row: dict[str, Any], where: str) -> None:
        """Raise :class:`RowSchemaError` naming ``where`` and the key at fault."""
        from reward.sources import KNOWN_SOURCES, source_kind

        def fail(key: str, problem: str) -> None:
            raise RowSchemaError(f"{where}: {key}: {problem}")

        if not isinstance(row, dict) or set(row) != ROW_KEYS:
            fail(
                "row",
                f"must have exactly the keys {sorted(ROW_KEYS)}, has "
                f"{sorted(row) if isinstance(row, dict) else type(row).__name__}",
            )
        source = row["data_source"]
        if source not in KNOWN_SOURCES:
            fail("data_source", f"{source!r} is not one of {', '.join(KNOWN_SOURCES)}")
        kind = source_kind(source)
        if row["ability"] != kind:
            fail("ability", f"must be {kind!r} for data_source {source!r}, got {row['ability']!r}")
        self._check_prompt(row["prompt"], fail)
        reward_model = row["reward_model"]
        if not isinstance(reward_model, dict) or set(reward_model) != {"style", "ground_truth"}:
            fail("reward_model", "must be {'style': 'rule', 'ground_truth': str}")
        if reward_model["style"] != "rule":
            fail("reward_model.style", f"must be 'rule', got {reward_model['style']!r}")
        truth = reward_model["ground_truth"]
        if not isinstance(truth, str) or not truth.strip():
            fail("reward_model.ground_truth", "must be a non-empty string")
        if kind == "code":
            try:
                decode_ground_truth(truth)
            except ValueError as exc:
                fail("reward_model.ground_truth", str(exc))
        self._check_extra_info(row["extra_info"], fail)

    @staticmethod
    def _check_prompt(prompt: Any, fail) -> None:
        if not isinstance(prompt, (list, tuple)) or not prompt:
            fail("prompt", "must be a non-empty list of {role, content} messages")
        for position, message in enumerate(prompt):
            if not isinstance(message, dict) or set(message) != {"role", "content"}:
                fail(f"prompt[{position}]", "must be a dict with exactly the keys role and content")
            if message["role"] not in ROLES:
                fail(f"prompt[{position}].role", f"must be one of {ROLES}, got {message['role']!r}")
            if not isinstance(message["content"], str) or not message["content"].strip():
                fail(f"prompt[{position}].content", "must be a non-empty string")
        if prompt[-1]["role"] != "user":
            fail("prompt", "the last message must be the user's")

    def _check_extra_info(self, extra_info: Any, fail) -> None:
        if not isinstance(extra_info, dict):
            fail("extra_info", "must be a dict")
        if extra_info.get("split") not in SPLITS:
            fail("extra_info.split", f"must be one of {SPLITS}, got {extra_info.get('split')!r}")
        index = extra_info.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            fail("extra_info.index", f"must be a non-negative int, got {index!r}")
        if index in self._indices:
            fail("extra_info.index", f"{index} is used by an earlier row")
        types = {key: type(value) for key, value in extra_info.items()}
        for key, value_type in types.items():
            if value_type not in (str, int, float, bool):
                fail(f"extra_info.{key}", f"must be a str, int, float or bool, got {value_type.__name__}")
        if self._extra_info_types is None:
            self._extra_info_types = types
        elif types != self._extra_info_types:
            expected = {k: t.__name__ for k, t in self._extra_info_types.items()}
            got = {k: t.__name__ for k, t in types.items()}
            fail("extra_info", f"keys/types {got} differ from the first row's {expected}")
        self._indices.add(index)


def _plain(value: Any) -> Any:
    """numpy arrays and scalars (as pandas returns them) to Python lists and scalars."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def validate_parquet_file(path: str | Path) -> int:
    """Check every row of a prepared parquet file (read back through pandas, as verl does).

    Returns the number of rows; raises :class:`RowSchemaError` naming the first bad row.
    """
    import pandas as pd

    frame = pd.read_parquet(path)
    validator = RowSchemaValidator()
    for position, row in enumerate(frame.to_dict(orient="records")):
        validator.check(_plain(row), f"{path} row {position}")
    return len(frame)
