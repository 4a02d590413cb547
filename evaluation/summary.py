"""Per-run metrics from the sample records: avg@k, unbiased pass@k, length, truncation and
unfinished thinking (reason ``unfinished``, reward/response_format.py: counted apart from wrong answers).

Computed overall, per data_source and, where rows carry ``extra_info.difficulty``, per
difficulty within each data_source. Every problem has exactly k samples, so every problem
weighs the same in avg@k.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from evaluation.run_store import group_by_problem
from evaluation.stats import avg_at_k, pass_at_k, pass_at_k_ladder
from reward.outcome import UNFINISHED


def correctness_matrix(groups: dict[str, list[dict[str, Any]]], problem_ids: list[str]) -> np.ndarray:
    """(problems, k) array of ``acc`` in the given problem order."""
    return np.array([[r["acc"] for r in groups[pid]] for pid in problem_ids], dtype=float)


def group_metrics(groups: dict[str, list[dict[str, Any]]], problem_ids: list[str], k: int) -> dict[str, Any]:
    """Metrics of a set of problems: avg@k, pass@j (j = 1, 2, 4, ..., k), length, truncation, unfinished."""
    acc = correctness_matrix(groups, problem_ids)
    # a sample counts as correct for pass@k when acc == 1 (partial credit never passes)
    n_correct = (acc >= 1.0).sum(axis=1)
    records = [r for pid in problem_ids for r in groups[pid]]
    tokens = np.array([r["num_tokens"] for r in records], dtype=float)
    truncated = np.array([bool(r["truncated"]) for r in records], dtype=float)
    scores = np.array([r["score"] for r in records], dtype=float)
    unfinished = np.array([r.get("reason") == UNFINISHED for r in records], dtype=float)
    return {
        "n_problems": len(problem_ids),
        "n_samples": len(records),
        "avg@k": avg_at_k(acc),
        "pass@k": {
            str(j): float(pass_at_k(np.full(len(problem_ids), k), n_correct, j).mean()) for j in pass_at_k_ladder(k)
        },
        "mean_score": float(scores.mean()),
        "mean_response_tokens": float(tokens.mean()),
        "truncation_rate": float(truncated.mean()),
        # responses that never reached their final answer (thinking formats): scored 0, not wrong answers
        "unfinished_rate": float(unfinished.mean()),
    }


def summarize(records: list[dict[str, Any]], k: int) -> dict[str, Any]:
    """The run's summary.json content (without the manifest fields the caller adds)."""
    groups = group_by_problem(records)
    incomplete = [pid for pid, g in groups.items() if len(g) != k]
    if incomplete:
        raise ValueError(
            f"cannot summarize: {len(incomplete)} problem(s) do not have k={k} samples, e.g. {incomplete[:3]}"
        )
    first = {pid: g[0] for pid, g in groups.items()}
    by_source: dict[str, list[str]] = defaultdict(list)
    by_difficulty: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for pid, record in first.items():
        by_source[record["data_source"]].append(pid)
        if record.get("difficulty") is not None:
            by_difficulty[record["data_source"]][record["difficulty"]].append(pid)
    summary: dict[str, Any] = {
        "k": k,
        "overall": group_metrics(groups, list(groups), k),
        "by_data_source": {src: group_metrics(groups, pids, k) for src, pids in sorted(by_source.items())},
    }
    if by_difficulty:
        summary["by_difficulty"] = {
            src: {level: group_metrics(groups, pids, k) for level, pids in sorted(levels.items())}
            for src, levels in sorted(by_difficulty.items())
        }
    return summary
