"""Training compute needed to reach a reward threshold (the paper's "0.91x GSPO's compute").

For each training run: smooth the reward curve (``critic/score/mean`` by default) with a trailing
moving average over ``window`` logged steps, find the first step where it reaches the threshold,
and read the compute spent until then as steps and as cumulative tokens (the running sum of
verl's ``perf/total_num_tokens``, prompt plus response tokens of each step's batch). A method's
figure is the mean over the seeds that reached the threshold; the ratio divides it by the
baseline's (tokens when every run logged them, steps otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dfpo.operations.training_logs import REWARD_KEY, TrainingLog

TOKENS_KEY = "perf/total_num_tokens"


@dataclass(frozen=True)
class Crossing:
    """Where one run's smoothed reward first reached the threshold (None: never)."""

    step: int | None
    tokens: float | None


@dataclass(frozen=True)
class EfficiencyRow:
    """One model and method: per-seed crossings and their means."""

    model: str
    method: str
    crossings: dict[str, Crossing]
    mean_steps: float | None
    mean_tokens: float | None
    ratio: float | None
    ratio_unit: str


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over ``window`` points; the first ``window - 1`` entries are NaN."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    out = np.full(values.shape, np.nan)
    if values.size >= window:
        csum = np.cumsum(np.insert(values.astype(float), 0, 0.0))
        out[window - 1 :] = (csum[window:] - csum[:-window]) / window
    return out


def first_crossing(log: TrainingLog, threshold: float, window: int, reward_key: str = REWARD_KEY) -> Crossing:
    """The first logged step whose smoothed reward is >= threshold, and the tokens spent until then."""
    if reward_key not in log:
        raise KeyError(f"the training log has no {reward_key!r} metric (found e.g. {sorted(log)[:5]})")
    reward = log[reward_key]
    smoothed = moving_average(reward.values, window)
    hits = np.flatnonzero(smoothed >= threshold)
    if hits.size == 0:
        return Crossing(None, None)
    step = int(reward.steps[hits[0]])
    tokens = None
    if TOKENS_KEY in log:
        series = log[TOKENS_KEY]
        tokens = float(np.nansum(series.values[series.steps <= step]))
    return Crossing(step, tokens)


def efficiency_rows(
    logs: dict[tuple[str, str], dict[str, TrainingLog]],
    baseline: str,
    threshold: float,
    window: int,
    reward_key: str = REWARD_KEY,
) -> list[EfficiencyRow]:
    """Rows for every (model, method) with training logs; ``logs[(model, method)][seed]``."""
    crossings = {
        key: {seed: first_crossing(log, threshold, window, reward_key) for seed, log in by_seed.items()}
        for key, by_seed in logs.items()
    }

    def means(values: dict[str, Crossing]) -> tuple[float | None, float | None, bool]:
        reached = [c for c in values.values() if c.step is not None]
        steps = float(np.mean([c.step for c in reached])) if reached else None
        with_tokens = [c.tokens for c in reached if c.tokens is not None]
        all_tokens = bool(reached) and len(with_tokens) == len(reached)
        tokens = float(np.mean(with_tokens)) if all_tokens else None
        return steps, tokens, all_tokens

    rows = []
    for (model, method), values in crossings.items():
        steps, tokens, has_tokens = means(values)
        ratio, unit = None, "tokens"
        base = crossings.get((model, baseline))
        if base is not None:
            b_steps, b_tokens, b_has_tokens = means(base)
            if has_tokens and b_has_tokens and tokens is not None and b_tokens:
                ratio = tokens / b_tokens
            elif steps is not None and b_steps:
                ratio, unit = steps / b_steps, "steps"
        rows.append(EfficiencyRow(model, method, values, steps, tokens, ratio, unit))
    return rows


def efficiency_markdown(
    rows: list[EfficiencyRow], baseline: str, threshold: float, window: int, reward_key: str
) -> str:
    """The rows as a Markdown table."""
    lines = [
        f"**Compute to reach {reward_key} ≥ {threshold:g}** (trailing mean over {window} logged steps; mean over "
        f"the seeds that reached it; ratio to {baseline}, in tokens where every run logged {TOKENS_KEY}).",
        "",
        "| Model | Method | reached | steps | tokens (M) | compute vs baseline |",
        "|---|---|---:|---:|---:|---:|",
    ]
    previous = None
    for row in rows:
        shown = row.model if row.model != previous else ""
        previous = row.model
        reached = sum(c.step is not None for c in row.crossings.values())
        steps = "–" if row.mean_steps is None else f"{row.mean_steps:.1f}"
        tokens = "–" if row.mean_tokens is None else f"{row.mean_tokens / 1e6:.2f}"
        ratio = "–" if row.ratio is None else f"{row.ratio:.2f}x ({row.ratio_unit})"
        lines.append(f"| {shown} | {row.method} | {reached}/{len(row.crossings)} | {steps} | {tokens} | {ratio} |")
    return "\n".join(lines) + "\n"
