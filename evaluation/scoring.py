"""Score sampled responses with the project's rule-based rewards, in parallel worker processes.

The scorer follows verl's custom reward contract, extended by ``reward/``:
``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw) -> dict`` with at
least ``score`` and ``acc`` (plus ``pred``, ``reason`` and any extra fields). It is named by an
import path (``module:function``, default ``reward.score:compute_score``) so worker processes
can import it, or passed as a callable, which then runs in this process (used by tests).

Worker processes, not threads: math-verify's timeouts use ``signal.alarm``, which only works
on a process's main thread.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from evaluation.problems import to_builtin

DEFAULT_SCORER = "reward.score:compute_score"
ScoreFn = Callable[..., Any]


@dataclass(frozen=True)
class ScoreJob:
    """One response to score, with where it came from (for error messages)."""

    problem_id: str
    sample_index: int
    data_source: str
    solution_str: str
    ground_truth: Any
    extra_info: dict[str, Any]


@lru_cache(maxsize=8)
def resolve_scorer(spec: str) -> ScoreFn:
    """Import ``module:function``; raise a clear error when either part is missing."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"scorer must be given as 'module:function', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(
            f"cannot import scorer module {module_name!r} ({exc}); install the project (pip install -e .) "
            "or run from the repository root"
        ) from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"scorer {spec!r}: {module_name} has no callable {attr!r}")
    return fn


def normalize_result(result: Any, job: ScoreJob) -> dict[str, Any]:
    """Check a scorer's return value against the contract and make it JSON-able.

    ``acc`` must be a boolean or a number in [0, 1]; ``score`` a finite number. Other keys are
    kept under ``details``.
    """
    where = f"scorer result for {job.problem_id} sample {job.sample_index} ({job.data_source})"
    if not isinstance(result, dict):
        raise TypeError(f"{where}: expected a dict with 'score' and 'acc' keys, got {type(result).__name__}")
    missing = [key for key in ("score", "acc") if key not in result]
    if missing:
        raise KeyError(f"{where}: missing key(s) {missing}; the scorer must return score and acc")
    result = to_builtin(result)
    acc = result["acc"]
    if isinstance(acc, bool):
        acc = float(acc)
    if not isinstance(acc, int | float) or not 0.0 <= float(acc) <= 1.0:
        raise ValueError(f"{where}: 'acc' must be a bool or a number in [0, 1], got {result['acc']!r}")
    score = result["score"]
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        raise ValueError(f"{where}: 'score' must be a finite number, got {score!r}")
    pred = result.get("pred")
    details = {k: v for k, v in result.items() if k not in ("score", "acc", "pred", "reason")}
    return {
        "score": float(score),
        "acc": float(acc),
        "pred": None if pred is None else str(pred),
        "reason": str(result.get("reason", "")),
        "details": details,
    }


def _call(fn: ScoreFn, job: ScoreJob, kwargs: dict[str, Any]) -> Any:
    return fn(job.data_source, job.solution_str, job.ground_truth, extra_info=job.extra_info, **kwargs)


def scorer_version(scorer: str | ScoreFn) -> dict[str, Any]:
    """A version of the scorer's code: the SHA-256 of every ``.py`` file of its top-level package.

    ``reward.score:compute_score`` hashes ``reward/**/*.py``, so any change to the scoring
    rules gives another version. A scorer whose package has no files on disk (defined in
    ``__main__`` or built at run time) has ``sha256: None``.
    """
    module = scorer.partition(":")[0] if isinstance(scorer, str) else scorer.__module__
    package = module.split(".")[0]
    spec = importlib.util.find_spec(package) if package != "__main__" else None
    if spec is None or spec.origin is None or not spec.has_location:
        return {"package": package, "sha256": None}
    origin = Path(spec.origin)
    files = sorted(origin.parent.rglob("*.py")) if spec.submodule_search_locations else [origin]
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(origin.parent)).encode() + b"\0" + path.read_bytes() + b"\0")
    return {"package": package, "sha256": digest.hexdigest()}


class ParallelScorer:
    """Score batches of responses; ``submit`` returns at once so scoring overlaps generation."""

    def __init__(
        self, scorer: str | ScoreFn = DEFAULT_SCORER, num_workers: int = 4, kwargs: dict[str, Any] | None = None
    ) -> None:
        """``kwargs`` go to every scorer call (for ``reward/``: RewardOptions fields such as code_backend)."""
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.spec = scorer if isinstance(scorer, str) else None
        self.fn = resolve_scorer(scorer) if isinstance(scorer, str) else scorer
        self.name = scorer if isinstance(scorer, str) else f"{scorer.__module__}:{scorer.__qualname__}"
        self.kwargs = dict(kwargs or {})
        self.num_workers = num_workers if self.spec is not None else 0
        self._pool: ProcessPoolExecutor | None = None
        if self.num_workers > 0:
            self._pool = ProcessPoolExecutor(self.num_workers, mp_context=multiprocessing.get_context("spawn"))

    def submit(self, jobs: Sequence[ScoreJob]) -> list[Future | Any]:
        """Start scoring ``jobs``; without workers they are scored here and now."""
        if self._pool is None:
            results = []
            for job in jobs:
                try:
                    results.append(_call(self.fn, job, self.kwargs))
                except Exception as exc:
                    raise RuntimeError(
                        f"scorer {self.name} failed on {job.problem_id} sample {job.sample_index}: {exc!r}"
                    ) from exc
            return results
        # the scorer itself is sent (pickled by reference): workers import only its module, not dfpo
        return [
            self._pool.submit(
                self.fn, job.data_source, job.solution_str, job.ground_truth, extra_info=job.extra_info, **self.kwargs
            )
            for job in jobs
        ]

    def collect(self, jobs: Sequence[ScoreJob], handles: list[Future | Any]) -> list[dict[str, Any]]:
        """Wait for the results of ``submit`` and check them against the contract."""
        results = []
        for job, handle in zip(jobs, handles, strict=True):
            if isinstance(handle, Future):
                try:
                    raw = handle.result()
                except BrokenProcessPool as exc:
                    raise RuntimeError(
                        f"a scoring worker died while scoring {job.problem_id} sample {job.sample_index} "
                        "(out of memory or a crash in the scorer); the run can be resumed after fixing it"
                    ) from exc
                except Exception as exc:
                    raise RuntimeError(
                        f"scorer {self.name} failed on {job.problem_id} sample {job.sample_index}: {exc!r}"
                    ) from exc
            else:
                raw = handle
            results.append(normalize_result(raw, job))
        return results

    def close(self) -> None:
        """Shut the worker processes down."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> ParallelScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
