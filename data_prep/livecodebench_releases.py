"""Which jsonl files of ``livecodebench/code_generation_lite`` make up each release tag.

LiveCodeBench publishes its problems as cumulative jsonl shards: ``release_vN`` is the
union of ``test.jsonl`` .. ``testN.jsonl``, ``vN`` is the single shard added by release N,
and ``vA_vB`` the shards A..B (the tags of the dataset's own loading script).
"""

from __future__ import annotations

from data_prep.errors import DataPrepError

LIVECODEBENCH_HF_DATASET = "livecodebench/code_generation_lite"
LATEST_RELEASE_NUMBER = 6


def _shard_name(number: int) -> str:
    return "test.jsonl" if number == 1 else f"test{number}.jsonl"


def _build_release_files() -> dict[str, tuple[str, ...]]:
    tags: dict[str, tuple[str, ...]] = {}
    numbers = range(1, LATEST_RELEASE_NUMBER + 1)
    for last in numbers:
        tags[f"release_v{last}"] = tuple(_shard_name(n) for n in range(1, last + 1))
        tags[f"v{last}"] = (_shard_name(last),)
        for first in range(1, last):
            tags[f"v{first}_v{last}"] = tuple(_shard_name(n) for n in range(first, last + 1))
    tags["release_latest"] = tags[f"release_v{LATEST_RELEASE_NUMBER}"]
    return tags


RELEASE_FILES: dict[str, tuple[str, ...]] = _build_release_files()


def release_files(tag: str) -> tuple[str, ...]:
    """Shard file names of a release tag such as ``release_v6`` or ``v6``."""
    try:
        return RELEASE_FILES[tag]
    except KeyError:
        known = ", ".join(sorted(RELEASE_FILES))
        raise DataPrepError(f"unknown LiveCodeBench release tag {tag!r}; known tags: {known}") from None
