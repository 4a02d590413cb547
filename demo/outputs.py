"""The demo's outputs: a terminal table, a PNG figure and a JSON file of every number.

The JSON holds only quantities that the seed determines (no timings, no dates), so two runs
with the same settings write identical files.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path
from typing import Any

from demo.training import DemoResult, MethodResult

EXPLANATION = """\
residual  = sum over groups and shared positions |sum_i dL/dlog pi_(i,t)| / sum |dL/dlog pi_(i,t)|,
            read exactly from autograd on the groups' common response prefix (the template header).
            At a shared position every member has the same history and token, so the position's
            own gradient is (sum_i dL/dlog pi_(i,t)) * grad log pi_t: 0 = it cancels, 1 = no cancellation.
            Mean over all updates; the rightmost column is the largest single update.
preference drift = mean |change of log pi(written header token) - log pi(its variant spelling)| on a
            fixed probe, from the warm start to the last step (nats). The two spellings' rows of the
            output layer get gradient almost only at the header positions, so this moves mainly by the
            shared positions' own gradient; other updates reach it only through the header's hidden states.
log-prob drift = mean |change of log pi(written header token)| (nats). It also contains probability
            mass that leaks into the header positions from tokens trained elsewhere (YES/NO/EOS).
Drift is not zero under DFPO: updates from the divergent tokens (answer, filler, EOS) still move the
parameters the header shares with them; only the shared positions' own gradient cancels."""


def summarize(result: MethodResult) -> dict[str, Any]:
    """The table's numbers for one method."""
    residuals = [r for r in result.update_residuals if r is not None]
    last = result.steps[-1]
    tail = result.steps[-min(5, len(result.steps)) :]
    return {
        "reward_first": result.steps[0].reward,
        "reward_last5": sum(s.reward for s in tail) / len(tail),
        "residual_mean": sum(residuals) / len(residuals) if residuals else None,
        "residual_max": max(residuals) if residuals else None,
        "preference_drift": last.spelling_drift,
        "preference_drift_signed": last.spelling_drift_signed,
        "log_prob_drift": last.header_drift,
        "log_prob_drift_signed": last.header_drift_signed,
        "header_entropy_change": last.header_entropy - result.initial_header_entropy,
        "answer_entropy_change": last.answer_entropy - result.initial_answer_entropy,
    }


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def format_table(result: DemoResult) -> str:
    """The terminal table: one row per method, then the definitions."""
    header = (
        f"{'method':<18} {'reward':>11} {'residual':>9} {'pref.drift':>10} {'logp drift':>10} "
        f"{'dH header':>9} {'dH answer':>9} {'max resid.':>10}"
    )
    lines = [header, "-" * len(header)]
    for method in result.methods:
        s = summarize(method)
        lines.append(
            f"{method.method.name:<18} {s['reward_first']:>4.2f}->{s['reward_last5']:<5.2f} "
            f"{_fmt(s['residual_mean'], '.1e'):>9} {s['preference_drift']:>10.3f} {s['log_prob_drift']:>10.3f} "
            f"{s['header_entropy_change']:>+9.3f} {s['answer_entropy_change']:>+9.3f} "
            f"{_fmt(s['residual_max'], '.1e'):>10}"
        )
    lines.append("")
    lines.append(
        "reward: first step -> mean of the last 5 steps; dH: entropy change (nats) at the header / answer positions."
    )
    lines.append(EXPLANATION)
    return "\n".join(lines)


def environment() -> dict[str, str]:
    """Versions of the packages that produce the numbers."""
    return {name: version(name) for name in ("torch", "verl", "transformers", "matplotlib")}


def to_json(result: DemoResult) -> dict[str, Any]:
    """Every number of the run as a JSON-serialisable dict (deterministic given the config)."""
    return {
        "config": asdict(result.config),
        "environment": environment(),
        "definitions": EXPLANATION,
        "warm_start_losses": result.warm_start_losses,
        "methods": {
            m.method.key: {
                "name": m.method.name,
                "loss_mode": m.method.loss_mode,
                "loss_agg_mode": m.method.loss_agg_mode,
                "adv_estimator": m.method.adv_estimator,
                "clip_ratio": [m.method.clip_ratio_low, m.method.clip_ratio_high],
                "dfpo_options": m.method.dfpo_options,
                "summary": summarize(m),
                "initial_header_entropy": m.initial_header_entropy,
                "initial_answer_entropy": m.initial_answer_entropy,
                "update_residuals": m.update_residuals,
                "steps": [asdict(s) for s in m.steps],
            }
            for m in result.methods
        },
    }


def write_json(result: DemoResult, path: Path) -> Path:
    """Write :func:`to_json` to ``path`` (parents created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_json(result), indent=1) + "\n")
    return path


RESIDUAL_FLOOR = 1e-10
"""Residuals below this (or exactly 0) are drawn at this value on the log axis."""


def write_figure(result: DemoResult, path: Path) -> Path:
    """Six panels over RL steps: residual, preference drift, log-prob drift, entropies, reward."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 8.2), constrained_layout=True)
    panels = [
        ("residual", "cancellation residual on shared positions", "residual (log)"),
        ("spelling_drift_signed", "preference drift: Δ log-odds(written vs variant)", "nats"),
        ("header_drift", "|Δ log π| of the header tokens", "nats"),
        ("header_entropy", "entropy at the header positions", "nats"),
        ("answer_entropy", "entropy at the answer position", "nats"),
        ("reward", "reward (rollout mean)", "reward"),
    ]
    styles = {
        "grpo": "C0",
        "gspo": "C3",
        "grpo_fix": "C2",
        "dfpo_min_replace": "C4",
        "dfpo_orth_proj": "C9",
        "dfpo_no_stop_grad": "C1",
        "dfpo_scale_0p5": "C5",
    }
    for ax, (field, title, ylabel) in zip(axes.flat, panels, strict=True):
        for m in result.methods:
            steps = [s.step for s in m.steps]
            values = [getattr(s, field) for s in m.steps]
            if field == "residual":
                values = [RESIDUAL_FLOOR if v is None or v < RESIDUAL_FLOOR else v for v in values]
            elif field in ("header_entropy", "answer_entropy"):
                initial = m.initial_header_entropy if field == "header_entropy" else m.initial_answer_entropy
                steps, values = [0, *steps], [initial, *values]
            elif field in ("spelling_drift_signed", "header_drift"):
                steps, values = [0, *steps], [0.0, *values]
            dashed = m.method.loss_mode == "dfpo" and m.method.key in ("dfpo_no_stop_grad", "dfpo_scale_0p5")
            ax.plot(
                steps,
                values,
                label=m.method.name,
                color=styles.get(m.method.key),
                linestyle="--" if dashed else "-",
                linewidth=1.6,
            )
        if field == "residual":
            ax.set_yscale("log")
            ax.axhspan(RESIDUAL_FLOOR / 3, 1e-6, color="0.9", zorder=0)
            ax.text(0.02, 0.04, "float-noise level", transform=ax.transAxes, fontsize=8, color="0.4")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("RL step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8, loc="center right")
    cfg = result.config
    fig.suptitle(
        f"The learning tax on a shared template header (tiny Qwen3, G={cfg.group_size}, {cfg.prompts_per_step} "
        "prompts/step, "
        f"{cfg.mini_batches} mini-batches/step, {cfg.optimizer} lr {cfg.learning_rate}, seed {cfg.seed})",
        fontsize=11,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
