"""The seven methods the demo compares, each one through verl's own registries.

Every method is a (policy-loss config, advantage estimator) pair. The loss is looked up with
``verl.trainer.ppo.core_algos.get_policy_loss_fn(loss_mode)`` and called with verl's 7-argument
signature and an ``FSDPActorConfig`` whose ``global_batch_info`` is filled the way
``verl.workers.utils.losses.ppo_loss`` fills it (dp_size, tokens and sequences of the mini-batch),
so the numbers are those of the functions verl's actor calls:

=====================  ==========  ===============================================================
method                 adv. est.   policy loss (verl registry name and settings)
=====================  ==========  ===============================================================
GRPO                   grpo        ``vanilla``: token PPO clip 0.2/0.2 (dual clip 3), token-mean
GSPO                   grpo        ``gspo``: sequence ratio, clip 3e-4/4e-4, seq-mean-token-mean
GRPO-fix               grpo        ``cispo``: −sg[clip(r, 0.8, 1.2)]·Â·log π, token-mean
DFPO Min-Replace       dfpo        ``dfpo``: transform min_replace (Eq. 17), stop-grad
DFPO Orth-Proj         dfpo        ``dfpo``: transform orth_proj (Eq. 18), stop-grad
DFPO no stop-grad      dfpo        ``dfpo``: min_replace without stop-gradient (ablation)
DFPO scale 0.5         dfpo        ``dfpo``: W̃ = 0.5·W (ablation: keeps the asymmetry)
=====================  ==========  ===============================================================

The ``dfpo`` loss and estimator are registered by :mod:`dfpo.verl.plugin` (the module the
package's ``verl.plugins`` entry point loads; it is imported here as well so that the demo also
runs from a source checkout). verl's 7-argument interface carries no group ids; the demo
publishes them with :func:`dfpo.verl.micro_batch_groups.micro_batch_groups`, as dfpo's actor loss
function does, and every mini-batch holds whole groups.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn
from verl.workers.config import FSDPActorConfig, PolicyLossConfig

import dfpo.verl.plugin  # noqa: F401  (registers loss_mode=dfpo and adv_estimator=dfpo)
from dfpo.launch.methods import load_method
from dfpo.verl.loss_config import DFPOPolicyLossConfig
from dfpo.verl.micro_batch_groups import MicroBatchGroups, micro_batch_groups


@dataclass(frozen=True)
class MethodSpec:
    """One compared method: a display name, a short key, verl's loss config and advantage estimator."""

    name: str
    """Name in the table and the figure."""
    key: str
    """Short identifier (JSON keys, ``--methods``)."""
    loss_mode: str
    """verl policy-loss registry name."""
    loss_agg_mode: str
    """verl ``actor.loss_agg_mode``."""
    adv_estimator: str
    """verl advantage-estimator registry name."""
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    dfpo_options: dict[str, Any] = field(default_factory=dict)
    """DFPOPolicyLossConfig fields (loss_mode=dfpo only)."""
    summary: str = ""
    """One line on what the method does to the shared positions."""


# (display name, method file, summary), in display order; the verl settings come from the file
_DISPLAY: tuple[tuple[str, str, str], ...] = (
    ("GRPO", "grpo", "token ratio with asymmetric clip"),
    ("GSPO", "gspo", "sequence ratio and 1/L_i per trajectory"),
    ("GRPO-fix", "grpo_fix", "detached symmetric truncation, token-mean"),
    ("DFPO Min-Replace", "dfpo_min_replace", "W~_i = min_j W_j (Eq. 17), stop-grad"),
    ("DFPO Orth-Proj", "dfpo_orth_proj", "W~ = W - (A.W/|A|^2) A (Eq. 18), stop-grad"),
    ("DFPO no stop-grad", "dfpo_no_stop_grad", "Min-Replace, gradient through W~"),
    ("DFPO scale 0.5", "dfpo_scale_0p5", "W~ = 0.5 W (asymmetry kept)"),
)


def _spec(name: str, key: str, summary: str) -> MethodSpec:
    selection = load_method(key)
    return MethodSpec(
        name,
        key,
        selection.loss_mode,
        selection.loss_agg_mode,
        selection.adv_estimator,
        selection.clip_ratio_low,
        selection.clip_ratio_high,
        # the demo's batches hold whole groups: statistics need no gathering
        dfpo_options={k: v for k, v in selection.dfpo_options.items() if k != "dfpo_exact_groups"},
        summary=summary,
    )


METHODS: tuple[MethodSpec, ...] = tuple(_spec(*entry) for entry in _DISPLAY)
"""The methods in display order."""

METHOD_KEYS: tuple[str, ...] = tuple(m.key for m in METHODS)


def select_methods(keys: list[str] | None) -> list[MethodSpec]:
    """The methods named by ``keys`` (all when None), in display order; unknown keys raise."""
    if keys is None:
        return list(METHODS)
    unknown = [k for k in keys if k not in METHOD_KEYS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; valid keys are {list(METHOD_KEYS)}")
    return [m for m in METHODS if m.key in keys]


def build_actor_config(method: MethodSpec, group_size: int, prompts_per_mini_batch: int) -> FSDPActorConfig:
    """verl's actor config for ``method`` (the fields its policy loss reads)."""
    if method.loss_mode == "dfpo":
        policy_loss: PolicyLossConfig = DFPOPolicyLossConfig(
            loss_mode="dfpo", **method.dfpo_options, dfpo_exact_groups=False
        )
    else:
        policy_loss = PolicyLossConfig(loss_mode=method.loss_mode)
    return FSDPActorConfig(
        strategy="fsdp",
        rollout_n=group_size,
        ppo_mini_batch_size=prompts_per_mini_batch,
        ppo_micro_batch_size_per_gpu=prompts_per_mini_batch * group_size,
        use_torch_compile=False,
        clip_ratio_low=method.clip_ratio_low,
        clip_ratio_high=method.clip_ratio_high,
        loss_agg_mode=method.loss_agg_mode,
        policy_loss=policy_loss,
    )


@dataclass
class PolicyLoss:
    """``method``'s registered verl policy loss, called as verl's ``ppo_loss`` calls it (dp_size 1)."""

    method: MethodSpec
    config: FSDPActorConfig

    def __post_init__(self) -> None:
        self.loss_fn: Callable[..., tuple[torch.Tensor, dict[str, Any]]] = get_policy_loss_fn(self.method.loss_mode)

    def __call__(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        group_index: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Loss of one mini-batch (one micro-batch: whole groups), and verl's metrics."""
        mask = response_mask.to(torch.bool)
        # As verl.workers.utils.losses.ppo_loss: global mini-batch statistics for agg_loss.
        self.config.global_batch_info.update(
            dp_size=1,
            batch_num_tokens=int(mask.sum()),
            global_batch_size=int(mask.shape[0]),
            loss_scale_factor=self.config.loss_scale_factor,
        )
        groups = (
            micro_batch_groups(MicroBatchGroups(group_index=group_index))
            if self.method.loss_mode == "dfpo"
            else contextlib.nullcontext()
        )
        with groups:
            return self.loss_fn(
                old_log_prob=old_log_prob,
                log_prob=log_prob,
                advantages=advantages,
                response_mask=mask,
                loss_agg_mode=self.config.loss_agg_mode,
                config=self.config,
                rollout_is_weights=None,
            )


def compute_advantages(
    method: MethodSpec, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, uid: np.ndarray
) -> torch.Tensor:
    """(B, R) advantages from verl's registered estimator, called as verl's trainer calls it."""
    estimator = get_adv_estimator_fn(method.adv_estimator)
    algorithm = OmegaConf.create({"adv_estimator": method.adv_estimator, "norm_adv_by_std_in_grpo": True})
    advantages, _ = estimator(
        token_level_rewards=token_level_rewards, response_mask=response_mask, config=algorithm, index=uid
    )
    return advantages
