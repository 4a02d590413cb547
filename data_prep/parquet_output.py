"""Writing validated rows to a parquet file, streamed in row groups and moved into place
only when the whole run succeeded (a failed run leaves no partial file behind).

A row group is written when it reaches ``ROWS_PER_GROUP`` rows or ``MAX_GROUP_BYTES`` of
(UTF-8) data, whichever comes first. The byte bound matters for code sets: LiveCodeBench and
DeepCoder rows carry test sets of up to hundreds of MB, and a row group whose column exceeds
Arrow's 2 GiB array limit is read back as a chunked nested column, which pandas, datasets and
verl reject (``ArrowNotImplementedError: Nested data conversions not implemented for chunked
array outputs``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from data_prep.schema import RowSchemaValidator

ROWS_PER_GROUP = 256
MAX_GROUP_BYTES = 256 * 1024 * 1024
"""Well below Arrow's 2 GiB per-array limit, so one row group never needs a chunked column."""


def approximate_bytes(value: Any) -> int:
    """The UTF-8 size of every string in ``value`` (nested lists/dicts), plus 8 per scalar."""
    if isinstance(value, str):
        return len(value.encode("utf-8", errors="surrogatepass"))
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, dict):
        return sum(approximate_bytes(k) + approximate_bytes(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(approximate_bytes(v) for v in value)
    return 8


class ValidatedParquetWriter:
    """Validate each row, buffer, write row groups to ``<output>.tmp``, rename on ``commit``."""

    def __init__(self, output: Path, max_group_bytes: int = MAX_GROUP_BYTES):
        if max_group_bytes < 1:
            raise ValueError(f"max_group_bytes must be positive, got {max_group_bytes}")
        self.output = output
        self.max_group_bytes = max_group_bytes
        self.temporary = output.with_name(output.name + ".tmp")
        self.rows_written = 0
        self._validator = RowSchemaValidator()
        self._buffer: list[dict[str, Any]] = []
        self._buffer_bytes = 0
        self._writer = None
        self._schema = None

    @property
    def rows_accepted(self) -> int:
        """Rows validated so far (written or still buffered); the next row's index."""
        return self.rows_written + len(self._buffer)

    def add(self, row: dict[str, Any], source_location: str) -> None:
        """Validate (error names ``source_location``, the input row) and queue ``row``."""
        self._validator.check(row, f"row built from {source_location}")
        size = approximate_bytes(row)
        if self._buffer and self._buffer_bytes + size > self.max_group_bytes:
            self._flush()
        self._buffer.append(row)
        self._buffer_bytes += size
        if len(self._buffer) >= ROWS_PER_GROUP or self._buffer_bytes >= self.max_group_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self._schema is None:
            self._schema = pa.Table.from_pylist(self._buffer).schema
            self.output.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.temporary, self._schema)
        table = pa.Table.from_pylist(self._buffer, schema=self._schema)
        self._writer.write_table(table)
        self.rows_written += len(self._buffer)
        self._buffer.clear()
        self._buffer_bytes = 0

    def commit(self) -> None:
        """Write what is buffered and move the file to its final path."""
        self._flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            os.replace(self.temporary, self.output)

    def abort(self) -> None:
        """Drop the partial file."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.temporary.unlink(missing_ok=True)
        self._buffer.clear()
        self._buffer_bytes = 0
