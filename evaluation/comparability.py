"""Which evaluation settings must agree for two runs' numbers to be compared.

Runs of one model on one benchmark are compared (seeds averaged, methods tested against the
baseline) only when they were sampled and scored the same way. The settings compared, per
benchmark, from each evaluation directory's ``run.json``:

* ``data_sha256``: SHA-256 of the data file(s) holding the benchmark;
* ``sampling``: temperature, top-p, top-k, min-p, max new tokens, chat-template variables;
* ``k``: samples per problem;
* ``scorer`` (function and keyword arguments) and ``scorer_version`` (a hash of its package);
* ``backend``: name, dtype, context length and engine version; the parallel layout
  (tensor-parallel size, memory fraction, device, batch size) is left out.

Different models may use different settings (each model family has its own sampling preset).
"""

from __future__ import annotations

import json
from typing import Any

COMPARED = ("data_sha256", "sampling", "k", "scorer", "scorer_version", "backend")
BACKEND_LAYOUT_KEYS = frozenset({"tensor_parallel_size", "gpu_memory_utilization", "device", "sample_batch_size"})


def run_settings(manifest: dict[str, Any], data_source: str) -> dict[str, Any]:
    """The compared settings of one benchmark of a run directory, from its manifest.

    Manifests written before ``data_by_source`` existed name no file per benchmark; their
    ``data_sha256`` lists every data file of the directory.
    """
    by_source = manifest.get("data_by_source") or {}
    if data_source in by_source:
        hashes = sorted(by_source[data_source])
    else:
        hashes = sorted(str(d.get("sha256")) for d in manifest.get("data") or [] if isinstance(d, dict))
    backend = manifest.get("backend")
    if isinstance(backend, dict):
        backend = {k: v for k, v in sorted(backend.items()) if k not in BACKEND_LAYOUT_KEYS}
    return {
        "data_sha256": hashes,
        "sampling": manifest.get("sampling"),
        "k": int(manifest["k"]),
        "scorer": manifest.get("scorer"),
        "scorer_version": manifest.get("scorer_version"),
        "backend": backend,
    }


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def differing_keys(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The compared settings on which ``a`` and ``b`` disagree."""
    return [key for key in COMPARED if _text(a.get(key)) != _text(b.get(key))]


def describe_difference(a: dict[str, Any], b: dict[str, Any]) -> str:
    """``key: A vs B`` for every differing setting (sub-keys of dictionaries when they are the cause)."""
    parts = []
    for key in differing_keys(a, b):
        va, vb = a.get(key), b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            sub = [s for s in dict.fromkeys([*va, *vb]) if _text(va.get(s)) != _text(vb.get(s))]
            parts += [f"{key}.{s}: {va.get(s)!r} vs {vb.get(s)!r}" for s in sub]
        else:
            parts.append(f"{key}: {va!r} vs {vb!r}")
    return "; ".join(parts)
