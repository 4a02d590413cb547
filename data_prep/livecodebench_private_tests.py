"""Decoding LiveCodeBench's ``private_test_cases`` field without trusting its pickle.

The field is either a JSON string or ``base64(zlib(pickle(json_string)))``. Unpickling
can run arbitrary code through the globals a pickle names, so the unpickler used here
refuses every global and every persistent id: a legitimate blob pickles only a ``str``,
which needs neither. The decompressed size is bounded before unpickling.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import zlib
from typing import Any

# LiveCodeBench's largest private-test blobs decompress to tens of MB; refuse anything
# beyond this instead of exhausting memory.
MAX_DECOMPRESSED_BYTES = 1 << 30


class RefusedPickleError(ValueError):
    """The pickle asked for a global or persistent object: it is not a plain test blob."""


class _NoGlobalsUnpickler(pickle.Unpickler):
    """An unpickler that builds only plain values (str, bytes, numbers, lists, dicts, ...)."""

    def find_class(self, module: str, name: str) -> Any:
        raise RefusedPickleError(
            f"private test blob refers to the global {module}.{name}; refused (a test blob holds only a string)"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickleError("private test blob uses a persistent id; refused")


def restricted_loads(data: bytes) -> Any:
    """``pickle.loads`` that refuses every global and persistent id."""
    return _NoGlobalsUnpickler(io.BytesIO(data)).load()


def _inflate(compressed: bytes) -> bytes:
    inflater = zlib.decompressobj()
    data = inflater.decompress(compressed, MAX_DECOMPRESSED_BYTES)
    if inflater.unconsumed_tail:
        raise ValueError(f"private test blob decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes; refused")
    return data + inflater.flush()


def decode_private_tests(field: str) -> list[dict[str, Any]]:
    """Return the list of test dicts held by a ``private_test_cases`` value.

    Raises ValueError (RefusedPickleError for a pickle naming a global) with the reason.
    """
    if not isinstance(field, str):
        raise ValueError(f"private_test_cases must be a string, got {type(field).__name__}")
    if not field.strip():
        return []
    try:
        tests = json.loads(field)
    except json.JSONDecodeError:
        try:
            compressed = base64.b64decode(field, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("private_test_cases is neither JSON nor base64") from None
        try:
            pickled = _inflate(compressed)
        except zlib.error as exc:
            raise ValueError(f"private_test_cases is base64 but not zlib data ({exc})") from None
        try:
            unpickled = restricted_loads(pickled)
        except RefusedPickleError:
            raise
        except Exception as exc:  # a damaged pickle raises many types
            raise ValueError(f"private_test_cases holds a damaged pickle ({type(exc).__name__}: {exc})") from None
        if not isinstance(unpickled, str):
            raise ValueError(
                f"private_test_cases pickle holds {type(unpickled).__name__}, expected a JSON string"
            ) from None
        try:
            tests = json.loads(unpickled)
        except json.JSONDecodeError as exc:
            raise ValueError(f"private_test_cases pickle holds invalid JSON ({exc.msg})") from None
    if not isinstance(tests, list):
        raise ValueError(f"private_test_cases must decode to a list, got {type(tests).__name__}")
    return tests


def encode_private_tests(tests: list[dict[str, Any]]) -> str:
    """The inverse of :func:`decode_private_tests` for the compressed form (used to build fixtures)."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode("ascii")
