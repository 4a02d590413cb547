"""The files of one evaluation run and how an interrupted run is resumed.

A run directory holds

* ``run.json``: the manifest (model, data files and their SHA-256, which files hold each
  data_source, backend, sampling, k, seed, scorer and the hash of its code, problem count). A
  resumed run must match it, so a directory never mixes samples drawn or scored under
  different settings.
* ``samples.jsonl``: one line per sample (problem id, sample index, seed, response, score,
  acc, pred, reason, token count, truncation). The k lines of a problem are written with one
  ``write`` call and flushed to disk before the next problem, so an interruption loses at most
  the problems in flight.
* ``summary.json``: the run's metrics (see ``summary.py``), written when every problem is done.

On resume the sample file is checked line by line: a torn last line (killed mid-write) and
problems with fewer than k samples are dropped and regenerated; any other malformed line is
an error naming the file and line.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

MANIFEST_FILE = "run.json"
SAMPLES_FILE = "samples.jsonl"
SUMMARY_FILE = "summary.json"
FORMAT_VERSION = 1
IDENTITY_KEYS = (
    "format_version",
    "model",
    "data",
    "backend",
    "sampling",
    "k",
    "seed",
    "scorer",
    "scorer_version",
    "n_problems",
)
"""Manifest keys that must match for a directory to be resumed."""
LATER_IDENTITY_KEYS = frozenset({"scorer_version"})
"""Identity keys added after format 1 was fixed: a manifest written before them is not compared on them."""
SAMPLE_KEYS = ("problem_id", "sample_index", "seed", "response", "score", "acc", "num_tokens", "truncated")


class RunMismatchError(ValueError):
    """The output directory holds a run made with other settings."""


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    """The manifest of a run directory."""
    path = Path(run_dir) / MANIFEST_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: {run_dir} is not an evaluation run directory (made by python -m evaluation.generate)"
        )
    return json.loads(path.read_text())


def _scan_samples(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """Parse samples.jsonl; also report whether its last line lacks a newline (a torn write)."""
    if not path.is_file():
        return [], False
    lines = path.read_bytes().split(b"\n")
    torn = lines.pop()  # text after the last newline (b"" for a complete file)
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} line {number}: not valid JSON ({exc}); the file is corrupted") from exc
        missing = [key for key in SAMPLE_KEYS if key not in record]
        if missing:
            raise ValueError(f"{path} line {number}: sample record lacks {missing}")
        records.append(record)
    return records, bool(torn)


def read_samples(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every sample record of a run, in file order; an interrupted write is an error here."""
    path = Path(run_dir) / SAMPLES_FILE
    records, torn = _scan_samples(path)
    if torn:
        raise ValueError(
            f"{path}: the last line is incomplete (the run was interrupted while writing); "
            "resume the run with the same generate command to repair it"
        )
    return records


def group_by_problem(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Records grouped by problem id, each group sorted by sample index."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups[record["problem_id"]].append(record)
    return {pid: sorted(group, key=lambda r: r["sample_index"]) for pid, group in groups.items()}


class RunStore:
    """Creates, checks and appends to one run directory."""

    def __init__(self, run_dir: str | Path, manifest: dict[str, Any], overwrite: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.manifest = {"format_version": FORMAT_VERSION, **manifest}
        self.k = int(self.manifest["k"])
        self.overwrite = overwrite

    @property
    def samples_path(self) -> Path:
        """Path of samples.jsonl."""
        return self.run_dir / SAMPLES_FILE

    def open(self) -> set[str]:
        """Prepare the directory and return the ids of problems that are already complete."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        manifest_path = self.run_dir / MANIFEST_FILE
        if self.overwrite:
            for name in (MANIFEST_FILE, SAMPLES_FILE, SUMMARY_FILE):
                (self.run_dir / name).unlink(missing_ok=True)
        if manifest_path.is_file():
            old = json.loads(manifest_path.read_text())
            diffs = [
                key
                for key in IDENTITY_KEYS
                if old.get(key) != self.manifest.get(key) and not (key in LATER_IDENTITY_KEYS and key not in old)
            ]
            if diffs:
                details = "; ".join(f"{key}: {old.get(key)!r} -> {self.manifest.get(key)!r}" for key in diffs)
                raise RunMismatchError(
                    f"{self.run_dir} holds a run with other settings ({details}). Use another --output-dir, "
                    "or --overwrite to discard it"
                )
        elif self.samples_path.exists():
            raise RunMismatchError(
                f"{self.samples_path} exists without {MANIFEST_FILE}; use --overwrite or another --output-dir"
            )
        else:
            self._write_json(manifest_path, self.manifest)
        return self._repair()

    def _repair(self) -> set[str]:
        records, torn = _scan_samples(self.samples_path)
        groups = group_by_problem(records)
        complete = {pid for pid, g in groups.items() if [r["sample_index"] for r in g] == list(range(self.k))}
        kept = [r for r in records if r["problem_id"] in complete]
        if torn or len(kept) != len(records):
            dropped = sorted(set(groups) - complete)
            warnings.warn(
                f"{self.samples_path}: the previous run was interrupted; dropping "
                f"{'an incomplete last line and ' if torn else ''}{len(dropped)} problem(s) with fewer than "
                f"{self.k} samples {dropped[:5]}, which will be generated again",
                stacklevel=2,
            )
            tmp = self.samples_path.with_suffix(".jsonl.tmp")
            with open(tmp, "w", encoding="utf-8") as fh:
                for record in kept:
                    fh.write(json.dumps(record, ensure_ascii=False) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.samples_path)
        return complete

    def append_problem(self, records: list[dict[str, Any]]) -> None:
        """Append the k records of one problem and flush them to disk."""
        if len(records) != self.k:
            raise ValueError(
                f"expected {self.k} records for {records[0]['problem_id'] if records else '?'}, got {len(records)}"
            )
        payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        with open(self.samples_path, "a", encoding="utf-8") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())

    def write_summary(self, summary: dict[str, Any]) -> Path:
        """Write summary.json and return its path."""
        path = self.run_dir / SUMMARY_FILE
        self._write_json(path, summary)
        return path

    @staticmethod
    def _write_json(path: Path, payload: dict[str, Any]) -> None:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
