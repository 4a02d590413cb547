"""Shared helpers for the data_prep tests: fixture paths and reading prepared rows back."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "data_prep"


def plain(value):
    """numpy arrays/scalars from pandas to Python lists/scalars."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def read_rows(path: Path) -> list[dict]:
    """Rows of a prepared parquet file, read the way verl reads them (pandas)."""
    return [plain(row) for row in pd.read_parquet(path).to_dict(orient="records")]


def read_summary(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
