"""Row groups of prepared files are bounded by bytes as well as rows, and read back whole."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from data_prep.math import build_math_row
from data_prep.parquet_output import MAX_GROUP_BYTES, ROWS_PER_GROUP, ValidatedParquetWriter, approximate_bytes

from .conftest import read_rows


def _row(index: int, answer_size: int) -> dict:
    row = build_math_row("aime25", "test", f"Problem {index}?", str(index) * answer_size, str(index), "test", "boxed")
    row["extra_info"] = {**row["extra_info"], "index": index}
    return row


def test_large_rows_close_row_groups_by_bytes_and_read_back(tmp_path):
    output = tmp_path / "big.parquet"
    rows = [_row(i, 30_000) for i in range(7)]
    writer = ValidatedParquetWriter(output, max_group_bytes=70_000)
    for i, row in enumerate(rows):
        writer.add(row, f"input row {i}")
    writer.commit()
    metadata = pq.ParquetFile(output).metadata
    sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
    assert sizes == [2, 2, 2, 1]  # 256 rows would have fitted one group; 3 rows pass 70 kB
    assert [r["reward_model"]["ground_truth"] for r in read_rows(output)] == [
        r["reward_model"]["ground_truth"] for r in rows
    ]


def test_small_rows_still_group_by_count(tmp_path):
    output = tmp_path / "small.parquet"
    writer = ValidatedParquetWriter(output)
    for i in range(ROWS_PER_GROUP + 3):
        writer.add(_row(i, 1), f"input row {i}")
    writer.commit()
    metadata = pq.ParquetFile(output).metadata
    assert [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)] == [ROWS_PER_GROUP, 3]


def test_byte_estimate_and_default_bound():
    assert approximate_bytes({"a": ["é" * 3, 1]}) == 1 + 6 + 8
    assert MAX_GROUP_BYTES < 2**31  # Arrow's per-array limit
    with pytest.raises(ValueError, match="max_group_bytes"):
        ValidatedParquetWriter(None, max_group_bytes=0)
