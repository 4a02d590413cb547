"""Writing validated rows to a parquet file, streamed in row groups and moved into place
only when the whole run succeeded (a failed run leaves no partial file behind)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from data_prep.schema import RowSchemaValidator

ROWS_PER_GROUP = 256


class ValidatedParquetWriter:
    """Validate each row, buffer, write row groups to ``<output>.tmp``, rename on ``commit``."""

    def __init__(self, output: Path):
        self.output = output
        self.temporary = output.with_name(output.name + ".tmp")
        self.rows_written = 0
        self._validator = RowSchemaValidator()
        self._buffer: list[dict[str, Any]] = []
        self._writer = None
        self._schema = None

    @property
    def rows_accepted(self) -> int:
        """Rows validated so far (written or still buffered); the next row's index."""
        return self.rows_written + len(self._buffer)

    def add(self, row: dict[str, Any], source_location: str) -> None:
        """Validate (error names ``source_location``, the input row) and queue ``row``."""
        self._validator.check(row, f"row built from {source_location}")
        self._buffer.append(row)
        if len(self._buffer) >= ROWS_PER_GROUP:
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
