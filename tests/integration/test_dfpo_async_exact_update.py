"""One DFPO update in each asynchronous trainer mode equals a single-process whole-group reference.

The old log-probs come from the trainer's own ``_compute_old_log_prob`` (verl's code: for
``separate_async`` the save of π_old to CPU at local update 0 and its restore for the later local
updates) run against the real actor worker on a gloo rank; the update from the trainer's own
``_update_actor``, which tells the worker whether those old log-probs are at the update's
parameters. Only TransferQueue is replaced, by an in-memory store.

* ``colocate_async``: old log-probs recomputed at θ just before the update (the rollout's are
  stale); 2 mini-batches — the first skips the pre-pass forward (s = 1 exactly), the second runs it.
* ``separate_async``, ``parameter_sync_step=2``: local update 0 on batch A at θ0 = π_old; local
  update 1 on batch B, whose old log-probs are log π_old(B) = log π_θ0(B) while the parameters are
  θ1: the pre-pass must run on its (first and only) mini-batch. The reference runs the same two
  steps; the same reference with s = 1 at local update 1 (the shortcut that is right only at θ_old)
  differs by far more than the tolerance.
"""

from __future__ import annotations

import pytest
import torch

from tests.integration import cpu_verl_harness as h

pytestmark = pytest.mark.slow

N = 4
OVERRIDES = [
    "actor_rollout_ref.actor.policy_loss._target_=dfpo.verl.loss_config.DFPOPolicyLossConfig",
    "actor_rollout_ref.actor.policy_loss.loss_mode=dfpo",
    "algorithm.adv_estimator=dfpo",
    f"actor_rollout_ref.rollout.n={N}",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
]
SEPARATE = [
    "data.train_batch_size=4",
    "trainer.v1.separate_async.parameter_sync_step=2",
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.checkpoint_engine.backend=local",
]


class _TrainerWorkers:
    """The actor worker group as the trainer drives it, over one real worker and an in-memory store."""

    def __init__(self, worker, store, batch):
        self.worker, self.store, self.batch = worker, store, batch
        self.outputs = []

    def _with_meta(self, data, meta):
        from verl.utils import tensordict_utils as tu

        data = data.copy()
        tu.assign_non_tensor(data, **meta.extra_info)
        return data

    def compute_log_prob(self, meta):
        output = self.worker.compute_log_prob(self._with_meta(self.batch, meta))
        self.store.store["log_probs"] = list(output["log_probs"].unbind())
        self.store.store["entropy"] = list(output["entropy"].unbind())
        return meta

    def update_actor(self, meta):
        data = self.batch.copy()
        for field in ("old_log_probs", "rollout_log_probs"):  # as TransferQueue holds them now
            data[field] = torch.nested.as_nested_tensor(self.store.store[field], layout=torch.jagged)
        output = self.worker.update_actor(self._with_meta(data, meta))
        self.outputs.append((data, dict(output["metrics"])))
        return output

    def save_model_to_cpu(self, n):
        self.worker.save_model_to_cpu(n)

    def restore_model_from_cpu(self, n):
        self.worker.restore_model_from_cpu(n)

    def clear_cpu_model(self, n):
        self.worker.clear_cpu_model(n)


def _store_for(batch, rollout_noise: float):
    from tests.dfpo.test_bypass_mode import _FakeTransferQueue

    generator = torch.Generator().manual_seed(5)
    old = list(batch["old_log_probs"].unbind())
    return _FakeTransferQueue(
        {
            "responses": list(batch["responses"].unbind()),
            "response_mask": list(batch["response_mask"].unbind()),
            # a stale rollout policy: its log-probs differ from the actor's
            "rollout_log_probs": [r + rollout_noise * torch.randn(len(r), generator=generator) for r in old],
        }
    )


def _trainer_step(trainer, workers, batch, global_steps, trigger):
    """One local update as verl's ``_step_once`` runs its actor part: old log-probs, then update."""
    from tests.dfpo.test_bypass_mode import _FakeBatch

    trainer.global_steps, trainer.local_trigger_step = global_steps, trigger
    meta = _FakeBatch(len(batch))
    # half the responses were started one policy version earlier (a partial rollout carried over)
    meta.tags = [
        {"min_global_steps": global_steps - 1 - i % 2, "max_global_steps": global_steps - 1} for i in range(len(batch))
    ]
    metrics = {}
    trainer._compute_old_log_prob(meta, metrics)
    update_meta = _FakeBatch(len(batch))  # the trainer updates with the batch _compute_advantage returned
    update_meta.tags = meta.tags
    trainer._update_actor(update_meta, metrics)
    return metrics


def _whole_group_loss(log_probs, sub_batch, force_unit_ratio=False):
    # force_unit_ratio: s = 1 exactly, group statistics at old = log π (the shortcut right only at θ_old)
    return h.whole_group_dfpo_loss(log_probs, sub_batch, log_probs.detach() if force_unit_ratio else None)


def _async_rounds(rank, world_size, tmp_path):
    from cpu_backend.activate import activate
    from dfpo.launch.compose import compose_trainer_config
    from dfpo.verl.trainer import DFPOColocateAsyncTrainer, DFPOSeparateAsyncTrainer
    from dfpo.verl.workers import DFPOActorRolloutRefWorker, DFPODetachActorWorker

    activate()  # the local CPU backend, as every process of a CPU run has it (sharded save copies)
    model_dir = h.ensure_tiny_model(f"{tmp_path}/model")
    out = {}

    # ---- colocate_async: 4 prompts, 2 mini-batches, stale rollout log-probs ------------------------
    batch = h.make_batch(model_dir, h.BatchSpec(num_prompts=4, n=N, seed=1))
    cfg = h.compose_actor_config(model_dir, OVERRIDES)
    trainer = DFPOColocateAsyncTrainer(
        compose_trainer_config(["trainer.v1.trainer_mode=dfpo_colocate_async", *OVERRIDES], "dfpo_trainer")
    )
    worker = DFPOActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor")
    worker.init_model()
    before = h.actor_state_dict(worker)
    store = _store_for(batch, rollout_noise=0.05)
    workers = _TrainerWorkers(worker, store, batch)
    trainer.actor_rollout_wg = workers
    monkey_tq(store)
    metrics = _trainer_step(trainer, workers, batch, global_steps=3, trigger=0)
    ((data, worker_metrics),) = workers.outputs
    model = h.load_hf_model(model_dir)
    meta = h.update_meta_from_config(worker.config)
    steps = h.global_mini_batches(len(data), 1, meta["mini_batch_size"], meta["epochs"], meta["shuffle"], meta["seed"])
    h.reference_update(model, h.optimizer_settings(worker), data, steps, _whole_group_loss)
    out["colocate_async"] = (
        before,
        h.actor_state_dict(worker),
        {n: p.detach().clone() for n, p in model.named_parameters()},
        None,
        worker_metrics,
        metrics,
    )

    # ---- separate_async: local update 0 on batch A, local update 1 on batch B ---------------------
    batch_a = h.make_batch(model_dir, h.BatchSpec(num_prompts=2, n=N, seed=2))
    batch_b = h.make_batch(model_dir, h.BatchSpec(num_prompts=2, n=N, seed=3))
    cfg = h.compose_actor_config(model_dir, OVERRIDES + SEPARATE)
    trainer = DFPOSeparateAsyncTrainer(
        compose_trainer_config(["trainer.v1.trainer_mode=dfpo_separate_async", *OVERRIDES, *SEPARATE], "dfpo_trainer")
    )
    assert trainer.parameter_sync_step == 2
    worker = DFPODetachActorWorker(cfg.actor_rollout_ref, role="actor")
    worker.init_model()
    before = h.actor_state_dict(worker)
    used, metrics = [], []
    for trigger, local_batch in enumerate((batch_a, batch_b)):
        store = _store_for(local_batch, rollout_noise=0.05)
        workers = _TrainerWorkers(worker, store, local_batch)
        trainer.actor_rollout_wg = workers
        monkey_tq(store)
        metrics.append(_trainer_step(trainer, workers, local_batch, global_steps=3, trigger=trigger))
        used.append(workers.outputs[0])
    # the old log-probs of local update 1 are π_old's (θ0), not θ1's
    torch.testing.assert_close(
        h.padded_response_field(used[1][0], "old_log_probs"),
        h.padded_response_field(batch_b, "old_log_probs"),
        rtol=0,
        atol=1e-5,
    )
    after = h.actor_state_dict(worker)
    from verl.utils import tensordict_utils as tu

    both = tu.concat_tensordict([used[0][0], used[1][0]])
    steps = [list(range(len(batch_a))), list(range(len(batch_a), len(both)))]
    references = {}
    for unit_ratio_at_update_1 in (False, True):
        model = h.load_hf_model(model_dir)
        step = iter(range(len(steps)))

        def loss(log_probs, sub_batch, force=unit_ratio_at_update_1, step=step):
            return _whole_group_loss(log_probs, sub_batch, force_unit_ratio=next(step) == 1 and force)

        h.reference_update(model, h.optimizer_settings(worker), both, steps, loss)
        references[unit_ratio_at_update_1] = {n: p.detach().clone() for n, p in model.named_parameters()}
    out["separate_async"] = (before, after, references[False], references[True], [m for _, m in used], metrics)
    return out


def monkey_tq(store):
    from verl.trainer.ppo.v1 import trainer_base

    trainer_base.tq = store


def _deltas_close(before, after, expected, label, scale=None):
    deltas = {k: after[k] - before[k] for k in after}
    scale = scale or max(float(d.abs().max()) for d in deltas.values())
    assert scale > 1e-4, f"{label}: the update did not move the parameters"
    for name, delta in deltas.items():
        torch.testing.assert_close(
            delta,
            expected[name] - before[name],
            rtol=1e-4,
            atol=1e-5 * scale,
            msg=lambda m, name=name: f"{label}: {name}: {m}",
        )
    return scale


def test_async_updates_equal_the_whole_group_reference(tmp_path):
    (rounds,) = h.run_ranks(_async_rounds, 1, str(tmp_path))

    before, after, expected, _, worker_metrics, metrics = rounds["colocate_async"]
    _deltas_close(before, after, expected, "colocate_async")
    assert worker_metrics["dfpo/prepass_forward"] == [0.0, 1.0]
    assert max(worker_metrics["dfpo/cancellation_residual_after"]) < 1e-6
    assert worker_metrics["dfpo/staleness/rollout_ratio_spread"][0] > 1e-3  # stale rollout log-probs
    assert metrics["dfpo/staleness/policy_lag_max"] == 1.0

    before, after, expected, wrong, worker_metrics, metrics = rounds["separate_async"]
    scale = _deltas_close(before, after, expected, "separate_async")
    assert [m["dfpo/prepass_forward"] for m in worker_metrics] == [[0.0], [1.0]]
    assert [m["dfpo/old_log_probs_recomputed"] for m in worker_metrics] == [[1.0], [0.0]]
    assert [m["dfpo/staleness/local_update"] for m in metrics] == [0.0, 1.0]
    # the shortcut s = 1 at local update 1 would be a different update: the test can tell them apart
    gap = max(float((wrong[k] - expected[k]).abs().max()) for k in expected)
    assert gap > 100 * 1e-5 * scale, gap


def _aliasing_rounds(rank, world_size):
    """verl's sharded save to CPU of an FSDP2 module on CPU, before an in-place parameter update."""
    from torch.distributed.fsdp import fully_shard
    from verl.utils import fsdp_utils

    from cpu_backend.activate import copying_sharded_save

    raw = getattr(fsdp_utils.fsdp2_sharded_save_to_cpu, "__wrapped__", fsdp_utils.fsdp2_sharded_save_to_cpu)
    results = {}
    for label, save in (("verl", raw), ("local backend", copying_sharded_save(raw))):
        module = fully_shard(torch.nn.Linear(4, 4))
        state, _ = save(module)
        with torch.no_grad():
            module.weight.add_(1.0)  # an optimizer step
        results[label] = float((state["weight"][0] - module.weight.to_local()).abs().max())
    return results


def test_sharded_save_to_cpu_keeps_pi_old_on_cpu():
    """verl keeps ``param._local_tensor.detach().cpu()``: on CPU the live parameter itself, so its
    separate-async π_old would follow every update; the local backend's wrapper copies."""
    (results,) = h.run_ranks(_aliasing_rounds, 1)
    assert results["verl"] == 0.0  # aliased: the "saved" weights moved with the update
    assert results["local backend"] == pytest.approx(1.0)
