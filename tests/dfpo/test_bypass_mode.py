"""Rollout-correction bypass mode and DFPO's first-mini-batch shortcut (s = 1 at θ = θ_old).

verl 0.9.1's V1 trainer reads ``algorithm.rollout_correction.bypass_mode``; with it on,
``_compute_old_log_prob`` copies the rollout's log-probs into ``old_log_probs`` instead of asking
the actor, so θ_old (the rollout policy) ≠ θ already on the first mini-batch and the pre-pass must
forward it. The actor worker never sees that key: dfpo's trainer tells it
(``dfpo_old_log_probs_at_step_params``, :func:`dfpo.verl.trainer.bypass_mode`), and the worker asserts
the flag against the batch (:func:`dfpo.verl.old_log_probs_flag.check_old_log_probs_at_step_params`).
Tested here under the trainer's own config and code, and end to end through verl's real actor worker against a
reference that forwards every mini-batch.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict

from dfpo.launch.compose import compose_trainer_config
from dfpo.verl.old_log_probs_flag import OLD_LOG_PROBS_AT_STEP_PARAMS, check_old_log_probs_at_step_params
from dfpo.verl.trainer import bypass_mode


def _nested(rows):
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


class _FakeTransferQueue:
    """The two TransferQueue calls ``_compute_old_log_prob`` makes, over an in-memory store."""

    def __init__(self, fields: dict[str, list[torch.Tensor]]):
        self.store = {name: list(rows) for name, rows in fields.items()}

    def kv_batch_get(self, keys, partition_id, select_fields):
        return TensorDict({f: _nested(self.store[f]) for f in select_fields}, batch_size=[len(keys)])

    def kv_batch_put(self, keys, partition_id, fields):
        for name in fields.keys():
            value = fields[name]
            self.store[name] = list(value.unbind()) if value.is_nested else list(value)
        return SimpleNamespace(keys=keys, partition_id=partition_id, extra_info={}, __len__=lambda: len(keys))


class _FakeBatch:
    def __init__(self, n):
        self.keys = [f"k{i}" for i in range(n)]
        self.partition_id = "train"
        self.extra_info = {}

    def __len__(self):
        return len(self.keys)


def _trainer_old_log_probs(monkeypatch, overrides):
    """Run verl's own ``_compute_old_log_prob`` (V1 trainer) under the dfpo_trainer config with
    ``overrides``; the actor returns log π_θ that differs from the rollout's. Returns the store."""
    from verl.trainer.ppo.v1 import trainer_base

    generator = torch.Generator().manual_seed(0)
    lengths = [3, 5, 4, 2]
    rollout = [-torch.rand(n, generator=generator) for n in lengths]
    actor = [r - 0.05 * torch.rand(len(r), generator=generator) for r in rollout]
    fake_tq = _FakeTransferQueue(
        {
            "rollout_log_probs": rollout,
            "responses": [torch.ones(n, dtype=torch.long) for n in lengths],
            "response_mask": [torch.ones(n, dtype=torch.long) for n in lengths],
        }
    )

    def compute_log_prob(batch):
        # the actor worker writes per-position outputs over prompt + response (a 2-token prompt
        # here), shifted by one: position t holds log π_θ of token t + 1
        sequence = lambda response: torch.cat([torch.zeros(1), response, torch.zeros(1)])  # noqa: E731
        fake_tq.store["log_probs"] = [sequence(a) for a in actor]
        fake_tq.store["entropy"] = [sequence(torch.ones(n)) for n in lengths]
        return batch

    monkeypatch.setattr(trainer_base, "tq", fake_tq)
    cfg = compose_trainer_config(["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", *overrides], "dfpo_trainer")
    trainer = SimpleNamespace(config=cfg, actor_rollout_wg=SimpleNamespace(compute_log_prob=compute_log_prob))
    trainer_base.PPOTrainer._compute_old_log_prob(trainer, _FakeBatch(len(lengths)), {})
    return fake_tq.store, actor, cfg


def _padded(rows):
    return _nested(rows).to_padded_tensor(0.0)


@pytest.mark.parametrize("bypass", [True, False])
def test_the_flag_and_its_assertion_match_what_the_v1_trainer_did(monkeypatch, bypass):
    store, actor, cfg = _trainer_old_log_probs(
        monkeypatch, [f"algorithm.rollout_correction.bypass_mode={str(bypass).lower()}"]
    )
    old = _padded(store["old_log_probs"])
    expected = store["rollout_log_probs"] if bypass else actor
    torch.testing.assert_close(old, _padded(expected), rtol=0, atol=0)
    assert bypass_mode(cfg) is bypass  # the trainer's flag is `not bypass_mode(config)`
    mask = _padded([m.to(torch.float32) for m in store["response_mask"]]).to(torch.bool)
    rollout = _padded(store["rollout_log_probs"])
    if bypass:  # a flag of true on bypass-mode old log-probs is caught
        with pytest.raises(RuntimeError, match=OLD_LOG_PROBS_AT_STEP_PARAMS):
            check_old_log_probs_at_step_params(old, rollout, mask)
    else:
        check_old_log_probs_at_step_params(old, rollout, mask)


def test_the_assertion_from_the_batch():
    mask = torch.tensor([[True, True, False], [True, False, False]])
    old = torch.tensor([[-0.1, -0.2, 0.0], [-0.3, 0.0, 0.0]])
    # bypass needs rollout_log_probs (the trainer reads it): nothing to check without them
    check_old_log_probs_at_step_params(old, None, mask)
    # equal on the valid tokens (padding may differ): what bypass mode writes, not log π_θ
    with pytest.raises(RuntimeError, match="equal rollout_log_probs bitwise"):
        check_old_log_probs_at_step_params(old, old + torch.tensor([[0.0, 0.0, 5.0], [0.0, 1.0, 1.0]]), mask)
    check_old_log_probs_at_step_params(old, old - 1e-6, mask)
    # a rank with only padding rows shows nothing either way
    check_old_log_probs_at_step_params(old, old, torch.zeros_like(mask))


@pytest.mark.slow
def test_bypass_mode_update_equals_the_reference_that_forwards_every_mini_batch(tmp_path):
    """verl's real actor worker on CPU, DFPO Min-Replace, 2 mini-batches of whole groups: with
    bypass-mode batches (old = rollout log-probs ≠ log π_θ0, the trainer's flag false) the update
    equals a reference whose group weights come from log π_θ at every mini-batch, the first
    included; with recomputed old log-probs the first mini-batch still skips its forward; a bypass
    batch whose flag says true is refused before any update."""
    from tests.integration import cpu_verl_harness as h

    results = h.run_ranks(_bypass_rounds, 1, str(tmp_path))
    (rounds,) = results
    assert OLD_LOG_PROBS_AT_STEP_PARAMS in rounds.pop("bypass, flag true")
    for label, (state_before, state_after, metrics, expected) in rounds.items():
        deltas = {k: state_after[k] - state_before[k] for k in state_after}
        scale = max(float(d.abs().max()) for d in deltas.values())
        assert scale > 1e-5, label
        for name, delta in deltas.items():
            torch.testing.assert_close(
                delta,
                expected[name] - state_before[name],
                rtol=1e-4,
                atol=1e-5 * scale,
                msg=lambda m, name=name, label=label: f"{label}: {name}: {m}",
            )
        forwarded = metrics["dfpo/prepass_forward"]
        assert forwarded == ([1.0, 1.0] if label == "bypass" else [0.0, 1.0]), (label, forwarded)


def _bypass_rounds(rank, world_size, tmp_path):
    from verl.utils import tensordict_utils as tu

    from dfpo.verl.workers import DFPOActorRolloutRefWorker
    from tests.integration import cpu_verl_harness as h

    overrides = [
        "actor_rollout_ref.actor.policy_loss._target_=dfpo.verl.loss_config.DFPOPolicyLossConfig",
        "actor_rollout_ref.actor.policy_loss.loss_mode=dfpo",
        "algorithm.adv_estimator=dfpo",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    ]
    model_dir = h.ensure_tiny_model(f"{tmp_path}/model")
    clean = h.make_batch(model_dir, h.BatchSpec(num_prompts=4, n=4, seed=1))
    noisy = h.make_batch(model_dir, h.BatchSpec(num_prompts=4, n=4, seed=1, old_log_prob_noise=0.05))
    bypass = noisy.copy()
    bypass["rollout_log_probs"] = noisy["old_log_probs"]  # what _compute_old_log_prob does in bypass mode
    recomputed = clean.copy()
    recomputed["rollout_log_probs"] = noisy["old_log_probs"]  # old = log π_θ0, rollout's differ

    out = {}
    for label, batch in (("bypass", bypass), ("recomputed", recomputed)):
        h.install_cpu_platform()
        worker = DFPOActorRolloutRefWorker(h.compose_actor_config(model_dir, overrides).actor_rollout_ref, role="actor")
        worker.init_model()
        before = h.actor_state_dict(worker)
        meta = h.update_meta_from_config(worker.config)
        batch_with_meta = h.with_update_meta(batch, **meta)
        if label == "bypass":  # what dfpo's trainer says in bypass mode
            tu.assign_non_tensor(batch_with_meta, **{OLD_LOG_PROBS_AT_STEP_PARAMS: False})
        output = worker.update_actor(batch_with_meta)
        after = h.actor_state_dict(worker)
        model = h.load_hf_model(model_dir)
        steps = h.global_mini_batches(
            len(batch), 1, meta["mini_batch_size"], meta["epochs"], meta["shuffle"], meta["seed"]
        )
        h.reference_update(model, h.optimizer_settings(worker), batch, steps, h.whole_group_dfpo_loss)
        expected = {name: p.detach().clone() for name, p in model.named_parameters()}
        out[label] = (before, after, dict(output["metrics"]), expected)
    # the flag absent (taken as true) on bypass-mode old log-probs: refused before any update
    try:
        worker.update_actor(h.with_update_meta(bypass, **meta))
        out["bypass, flag true"] = "no error"
    except RuntimeError as error:
        out["bypass, flag true"] = str(error)
    return out
