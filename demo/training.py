"""The RL loop of the demo: per step one rollout batch, several off-policy mini-batch updates.

Per method and step (as verl's actor update with ``ppo_epochs=1``, ``shuffle=False``):

1. sample ``prompts_per_step`` × ``group_size`` responses from the current policy;
2. compute the old log-probabilities (the policy before this step's updates) and the rewards;
3. compute advantages with the method's verl estimator;
4. split the batch into ``mini_batches`` mini-batches of whole groups and take one optimizer
   step on each; every mini-batch after the first is off-policy (the policy already moved);
5. at each update, read the exact cancellation residual on the groups' common prefixes
   (:mod:`demo.measures`), and after the step read the probe.

Every method starts from the same warm-start weights and sees the same prompt schedule; the
sampling generator starts from the same seed, so the first step's responses are identical
across methods (later ones differ because the policies differ).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from demo.compared_methods import MethodSpec, PolicyLoss, build_actor_config, compute_advantages
from demo.config import DemoConfig
from demo.group_sampling import sample_groups
from demo.measures import (
    CancellationSums,
    ProbeReading,
    cancellation_sums,
    group_common_prefix_lengths,
    header_drift,
    length_reward_correlation,
    read_probe,
    spelling_drift,
)
from demo.policy_model import build_policy, response_logits, token_log_probs
from demo.task import PromptBatch, all_prompts, sample_prompts
from demo.warm_start import warm_start


@dataclass
class StepRecord:
    """The numbers of one RL step of one method."""

    step: int
    reward: float
    """Mean reward of the step's rollout (before the step's updates)."""
    response_length: float
    """Mean response length (tokens, header included)."""
    length_reward_corr: float | None
    """Correlation of length and reward in the rollout (negative: wrong answers are longer)."""
    residual: float | None
    """Cancellation residual over all of the step's updates (ratio of sums)."""
    residual_max: float | None
    """Largest per-update residual of the step."""
    header_drift: float
    """Mean |log π_step − log π_0| of the header tokens on the probe (nats)."""
    header_drift_signed: float
    """Mean (log π_step − log π_0) of the header tokens on the probe (nats)."""
    spelling_drift: float
    """Mean |Δ (log π(header token) − log π(variant))| on the probe (nats)."""
    spelling_drift_signed: float
    """Mean Δ (log π(header token) − log π(variant)) on the probe (nats)."""
    header_entropy: float
    """Mean entropy at the header positions on the probe (nats)."""
    answer_entropy: float
    """Mean entropy at the answer position on the probe (nats)."""
    clip_fraction: float
    """Mean of verl's actor/pg_clipfrac over the step's updates."""


@dataclass
class MethodResult:
    """All numbers of one method."""

    method: MethodSpec
    initial_header_entropy: float
    initial_answer_entropy: float
    steps: list[StepRecord] = field(default_factory=list)
    update_residuals: list[float | None] = field(default_factory=list)
    """Residual of every single update, in order (None: no gradient on shared positions)."""
    seconds: float = 0.0


def set_determinism(seed: int) -> None:
    """Seed torch and forbid nondeterministic kernels."""
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)


def build_optimizer(model: torch.nn.Module, cfg: DemoConfig) -> torch.optim.Optimizer:
    """The RL optimizer named by ``cfg.optimizer``."""
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=cfg.learning_rate)
    return torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)


def prepare_start(cfg: DemoConfig) -> tuple[dict[str, torch.Tensor], list[float]]:
    """The warm-start weights every method begins from, and the warm-start losses."""
    model = build_policy(cfg.seed, cfg.hidden_size)
    losses = warm_start(model, cfg.warm_start, cfg.seed)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, losses


def prompt_schedule(cfg: DemoConfig) -> list[PromptBatch]:
    """The prompts of every step (shared by all methods)."""
    generator = torch.Generator().manual_seed(cfg.seed + 1)
    return [sample_prompts(cfg.prompts_per_step, generator) for _ in range(cfg.steps)]


def run_method(
    method: MethodSpec, cfg: DemoConfig, start: dict[str, torch.Tensor], schedule: list[PromptBatch]
) -> MethodResult:
    """Train one method from ``start`` on ``schedule`` and record its measures."""
    began = time.perf_counter()
    set_determinism(cfg.seed)
    model = build_policy(cfg.seed, cfg.hidden_size)
    model.load_state_dict(start)
    optimizer = build_optimizer(model, cfg)
    prompts_per_mini_batch = cfg.prompts_per_step // cfg.mini_batches
    policy_loss = PolicyLoss(method, build_actor_config(method, cfg.group_size, prompts_per_mini_batch))
    sampler = torch.Generator().manual_seed(cfg.seed + 2)
    probe = all_prompts()
    initial: ProbeReading = read_probe(model, probe)
    result = MethodResult(method, initial.header_entropy, initial.answer_entropy)
    rows_per_mini_batch = prompts_per_mini_batch * cfg.group_size

    for step, prompts in enumerate(schedule):
        rollout = sample_groups(model, prompts, cfg.group_size, sampler)
        with torch.no_grad():
            old_log_prob = token_log_probs(
                response_logits(model, rollout.prompts, rollout.responses), rollout.responses
            )
        advantages = compute_advantages(method, rollout.token_level_rewards(), rollout.response_mask, rollout.uid)
        common_prefix = group_common_prefix_lengths(rollout.responses, rollout.response_mask, rollout.group_index)
        step_sums = CancellationSums(0.0, 0.0, 0)
        step_max: float | None = None
        clip_fractions = []
        for mb in range(cfg.mini_batches):
            rows = slice(mb * rows_per_mini_batch, (mb + 1) * rows_per_mini_batch)
            logits = response_logits(model, rollout.prompts[rows], rollout.responses[rows])
            log_prob = token_log_probs(logits, rollout.responses[rows])
            log_prob.retain_grad()
            loss, metrics = policy_loss(
                old_log_prob[rows], log_prob, advantages[rows], rollout.response_mask[rows], rollout.group_index[rows]
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            sums = cancellation_sums(log_prob.grad, common_prefix[rows], rollout.group_index[rows])
            step_sums = step_sums + sums
            result.update_residuals.append(sums.residual)
            if sums.residual is not None:
                step_max = sums.residual if step_max is None else max(step_max, sums.residual)
            clip_fractions.append(float(metrics.get("actor/pg_clipfrac", 0.0)))
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
        reading = read_probe(model, probe)
        drift_abs, drift_signed = header_drift(reading, initial)
        odds_abs, odds_signed = spelling_drift(reading, initial)
        result.steps.append(
            StepRecord(
                step=step + 1,
                reward=float(rollout.rewards.mean()),
                response_length=float(rollout.lengths.mean()),
                length_reward_corr=length_reward_correlation(rollout.lengths, rollout.rewards),
                residual=step_sums.residual,
                residual_max=step_max,
                header_drift=drift_abs,
                header_drift_signed=drift_signed,
                spelling_drift=odds_abs,
                spelling_drift_signed=odds_signed,
                header_entropy=reading.header_entropy,
                answer_entropy=reading.answer_entropy,
                clip_fraction=sum(clip_fractions) / len(clip_fractions),
            )
        )
    result.seconds = time.perf_counter() - began
    return result


@dataclass
class DemoResult:
    """The whole run: config, warm-start losses and every method's result."""

    config: DemoConfig
    warm_start_losses: list[float]
    methods: list[MethodResult]


def run_demo(cfg: DemoConfig, methods: list[MethodSpec], progress=print) -> DemoResult:
    """Warm-start once, then train every method in ``methods`` from the same start."""
    set_determinism(cfg.seed)
    progress(f"[demo] warm start: {cfg.warm_start.steps} supervised steps of a tiny Qwen3 (seed {cfg.seed})")
    start, losses = prepare_start(cfg)
    schedule = prompt_schedule(cfg)
    results = []
    for method in methods:
        result = run_method(method, cfg, start, schedule)
        last = result.steps[-1]
        progress(
            f"[demo] {method.name:<18} {cfg.steps} steps in {result.seconds:5.1f}s  "
            f"reward {last.reward:.2f}  preference drift {last.spelling_drift:.3f}"
        )
        results.append(result)
    return DemoResult(cfg, losses, results)
