"""LiveCodeBench private-test decoding: JSON and base64/zlib/pickle forms, and refusal of
every pickle that names a global (nothing in a blob may run code)."""

from __future__ import annotations

import base64
import json
import os
import pickle
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_prep import livecodebench_private_tests as lcb
from data_prep.livecodebench_private_tests import RefusedPickleError, decode_private_tests, restricted_loads


def lcb_blob(payload) -> str:
    """LiveCodeBench's own encoding, written out here independently of the module under test."""
    return base64.b64encode(zlib.compress(pickle.dumps(payload))).decode("ascii")


TESTS = [
    {"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
    {"input": "[1]", "output": "1", "testtype": "functional"},
]


def test_json_form_is_read_directly():
    assert decode_private_tests(json.dumps(TESTS)) == TESTS


def test_compressed_pickled_form_is_decoded():
    assert decode_private_tests(lcb_blob(json.dumps(TESTS))) == TESTS


def test_empty_field_means_no_private_tests():
    assert decode_private_tests("") == []


class _RunsCode:
    """Unpickling this calls os.system: the classic pickle exploit."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    blob = lcb_blob(_RunsCode(str(marker)))
    with pytest.raises(RefusedPickleError, match="posix.system|os.system|nt.system"):
        decode_private_tests(blob)
    assert not marker.exists()


@pytest.mark.parametrize(
    "payload",
    [
        pickle.dumps({1, 2}, protocol=2),  # builtins.set (protocol 2 has no set opcode)
        pickle.dumps(bytearray(b"x"), protocol=2),  # builtins.bytearray
        pickle.dumps(range(3)),  # builtins.range
    ],
    ids=["set", "bytearray", "range"],
)
def test_every_global_is_refused_even_harmless_builtins(payload):
    with pytest.raises(RefusedPickleError):
        restricted_loads(payload)


def test_persistent_ids_are_refused():
    # protocol-0 PERSID opcode: "P<id>\n" then STOP
    with pytest.raises(RefusedPickleError, match="persistent"):
        restricted_loads(b"Pabc\n.")


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("not json and not base64 !", "neither JSON nor base64"),
        (base64.b64encode(b"plain bytes").decode(), "not zlib"),
        (base64.b64encode(zlib.compress(b"not a pickle")).decode(), "damaged pickle"),
        (lcb_blob(["a list", "not a str"]), "holds list"),
        (lcb_blob("{not json"), "invalid JSON"),
        (lcb_blob(json.dumps({"input": "1"})), "must decode to a list"),
    ],
)
def test_malformed_blobs_say_what_is_wrong(field, message):
    with pytest.raises(ValueError, match=message):
        decode_private_tests(field)


def test_decompression_is_bounded(monkeypatch):
    monkeypatch.setattr(lcb, "MAX_DECOMPRESSED_BYTES", 1000)
    with pytest.raises(ValueError, match="more than 1000 bytes"):
        decode_private_tests(lcb_blob("x" * 5000))


test_strings = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"input": test_strings, "output": test_strings, "testtype": st.sampled_from(["stdin", "functional"])}
        ),
        max_size=6,
    )
)
def test_round_trip_through_both_encodings(tests):
    assert decode_private_tests(lcb_blob(json.dumps(tests))) == tests
    assert decode_private_tests(lcb.encode_private_tests(tests)) == tests
    if tests:
        assert decode_private_tests(json.dumps(tests)) == tests
