"""The registered loss honours verl 0.9.1's interface; DFPO's options compose with verl's config."""

from __future__ import annotations

import inspect

import pytest
import torch
from hydra.errors import InstantiationException
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.utils.config import omega_conf_to_dataclass

from dfpo import compute_dfpo_loss
from dfpo.verl.loss_config import DFPOPolicyLossConfig
from dfpo.verl.micro_batch_groups import MicroBatchGroups, micro_batch_groups
from tests.dfpo.batches import random_batch
from tests.dfpo.verl_config import DFPO_OVERRIDES, actor_config, compose_ppo_trainer


def test_signature_matches_verl_builtin_losses():
    ours = inspect.signature(get_policy_loss_fn("dfpo"))
    for name in ("gspo", "vanilla", "cispo"):
        theirs = inspect.signature(get_policy_loss_fn(name))
        assert [p.name for p in ours.parameters.values()] == [p.name for p in theirs.parameters.values()]
        assert [p.kind for p in ours.parameters.values()] == [p.kind for p in theirs.parameters.values()]


@pytest.mark.parametrize("transform", ["min_replace", "orth_proj", "scale", "none"])
@pytest.mark.parametrize("scope", ["all", "shared_prefix"])
def test_hydra_overrides_reach_the_actor_config(transform, scope):
    cfg = compose_ppo_trainer(
        DFPO_OVERRIDES
        + [
            f"+actor_rollout_ref.actor.policy_loss.dfpo_transform={transform}",
            f"+actor_rollout_ref.actor.policy_loss.dfpo_scope={scope}",
            "+actor_rollout_ref.actor.policy_loss.dfpo_stop_grad=false",
            "+actor_rollout_ref.actor.policy_loss.dfpo_scale=0.25",
        ]
    )
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    pl = actor.policy_loss
    assert isinstance(pl, DFPOPolicyLossConfig)
    assert (pl.loss_mode, pl.dfpo_transform, pl.dfpo_scope, pl.dfpo_stop_grad, pl.dfpo_scale) == (
        "dfpo",
        transform,
        scope,
        False,
        0.25,
    )
    assert cfg.algorithm.adv_estimator == "dfpo"


@pytest.mark.parametrize(
    "override,message",
    [
        ("+actor_rollout_ref.actor.policy_loss.dfpo_transform=minreplace", "valid transforms are"),
        ("+actor_rollout_ref.actor.policy_loss.dfpo_scope=prefix", "valid scopes are"),
        ("+actor_rollout_ref.actor.policy_loss.dfpo_scale=0", "dfpo_scale must be > 0"),
    ],
)
def test_invalid_options_fail_at_config_time(override, message):
    cfg = compose_ppo_trainer(DFPO_OVERRIDES + [override])
    with pytest.raises((ValueError, InstantiationException), match=message):
        omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def _dfpo_actor_config(transform="min_replace", rollout_n=None):
    extra = [f"+actor_rollout_ref.actor.policy_loss.dfpo_transform={transform}"]
    if rollout_n:
        extra.append(f"actor_rollout_ref.rollout.n={rollout_n}")
    return actor_config(DFPO_OVERRIDES[:2] + extra)


@pytest.mark.parametrize("transform", ["min_replace", "orth_proj"])
@pytest.mark.parametrize("with_is", [False, True])
def test_registered_loss_equals_compute_dfpo_loss_with_global_batch_info(transform, with_is):
    b = random_batch(4, empty_rows=False)
    cfg = _dfpo_actor_config(transform, rollout_n=int(torch.bincount(b.group_index).max()))
    cfg.global_batch_info.update(dp_size=2, batch_num_tokens=None, global_batch_size=40, loss_scale_factor=None)
    is_w = b.rollout_is_weights if with_is else None
    # whole groups of equal size are required without the exact pre-pass: keep the largest group only
    keep = b.group_index == torch.bincount(b.group_index).argmax()
    args = [x[keep] for x in (b.old_log_prob, b.log_prob, b.advantages, b.response_mask)]
    ids = b.group_index[keep]
    is_kept = None if is_w is None else is_w[keep]
    with micro_batch_groups(MicroBatchGroups(group_index=ids)):
        loss, metrics = get_policy_loss_fn("dfpo")(*args, "token-mean", cfg, is_kept)
    expected, _ = compute_dfpo_loss(
        *args, ids, transform=transform, rollout_is_weights=is_kept, num_sequences=40, dp_size=2
    )
    assert isinstance(loss, torch.Tensor) and loss.dim() == 0
    assert isinstance(metrics, dict) and all(isinstance(v, float) for v in metrics.values())
    torch.testing.assert_close(loss, expected)
    assert "dfpo/cancellation_residual_after" in metrics


def test_registered_loss_refuses_split_groups_and_missing_context():
    b = random_batch(4, empty_rows=False)
    cfg = _dfpo_actor_config(rollout_n=8)
    args = (b.old_log_prob, b.log_prob, b.advantages, b.response_mask, "token-mean", cfg, None)
    with pytest.raises(RuntimeError, match="which responses form a group"):
        get_policy_loss_fn("dfpo")(*args)
    with micro_batch_groups(MicroBatchGroups(group_index=b.group_index)):
        with pytest.raises(RuntimeError, match="of the 8 responses of a group"):
            get_policy_loss_fn("dfpo")(*args)


def test_plain_policy_loss_config_is_refused_with_the_fix():
    b = random_batch(4)
    cfg = actor_config(["actor_rollout_ref.actor.policy_loss.loss_mode=dfpo"])
    with pytest.raises(ValueError, match="DFPOPolicyLossConfig"):
        get_policy_loss_fn("dfpo")(b.old_log_prob, b.log_prob, b.advantages, b.response_mask, "token-mean", cfg, None)
