"""DFPO's options in verl's config: a ``PolicyLossConfig`` subclass selected with ``_target_``.

    actor_rollout_ref.actor.policy_loss._target_=dfpo.verl.loss_config.DFPOPolicyLossConfig
    actor_rollout_ref.actor.policy_loss.loss_mode=dfpo
    +actor_rollout_ref.actor.policy_loss.dfpo_transform=orth_proj      # '+' only without dfpo's yaml

(``dfpo/config/dfpo_trainer.yaml`` sets the target and the defaults, so there no ``+`` is needed.)
Invalid values fail when verl builds the actor config, with the list of valid values.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl.workers.config import PolicyLossConfig

from dfpo.algorithm.group_statistics import check_scope
from dfpo.algorithm.transforms import check_transform


@dataclass
class DFPOPolicyLossConfig(PolicyLossConfig):
    """verl's policy-loss config plus DFPO's options (used when ``loss_mode=dfpo``).

    Args:
        dfpo_transform: within-group transform: "min_replace" (Eq. 17, default), "orth_proj"
            (Eq. 18), "scale" (ablation: W̃ = κ·W) or "none" (control: GSPO weights, linear estimator).
        dfpo_scope: "all" (every response token gets W̃_i) or "shared_prefix" (only the tokens of the
            group's longest common response prefix; the rest keep W_i).
        dfpo_stop_grad: detach W̃ (DFPO). False is the "no stop-grad" ablation.
        dfpo_scale: κ of the "scale" ablation.
        dfpo_exact_groups: gather every group's statistics over micro-batches and data-parallel ranks
            at the current parameters before each mini-batch (needs ``python -m dfpo.main``); when
            False each micro-batch must hold whole groups, which is checked.
        dfpo_measure_update_kl: after each step's update, one more forward of the step's rows
            at the new parameters and ``dfpo/update_kl`` = KL(π_old ‖ π_new) on them (the token
            mean of log π_old − log π_new): what a rollout one update behind would show as
            ``rollout_corr/kl``, the scale of ``python -m dfpo.operations.run_checks``' weight-sync check.
            Costs one log-prob pass per step; ``scripts/gpu_smoke.sh`` turns it on.
    """

    dfpo_transform: str = "min_replace"
    dfpo_scope: str = "all"
    dfpo_stop_grad: bool = True
    dfpo_scale: float = 0.5
    dfpo_exact_groups: bool = True
    dfpo_measure_update_kl: bool = False

    def __post_init__(self):
        check_transform(self.dfpo_transform)
        check_scope(self.dfpo_scope)
        if not self.dfpo_scale > 0:
            raise ValueError(f"policy_loss.dfpo_scale must be > 0, got {self.dfpo_scale}")


def dfpo_options(config) -> DFPOPolicyLossConfig:
    """The DFPO options of an actor config, or a clear error when its policy_loss is verl's plain one."""
    policy_loss = config.policy_loss if config is not None else None
    if not isinstance(policy_loss, DFPOPolicyLossConfig):
        raise ValueError(
            "loss_mode=dfpo needs "
            "actor_rollout_ref.actor.policy_loss._target_=dfpo.verl.loss_config.DFPOPolicyLossConfig "
            f"(got {type(policy_loss).__name__}). Use the recipe config `--config-name dfpo_trainer` of "
            "`python -m dfpo.main`, or set the _target_ override."
        )
    return policy_loss
