"""The resource meter on verl 0.9.1's real actor worker (DFPO's, FSDP2 over 2 gloo ranks, parameters
and optimizer offloaded): the phases its methods run in (dfpo/verl/resource_phases.py), each phase's
forward passes, and the bytes FSDP2 must move.

One training step (compute_log_prob, then update_actor over 2 mini-batches of whole groups, each
after DFPO's exact pre-pass) on the harness's tiny Qwen2 (fp32), checked against what verl does
(P: every parameter's fp32 bytes, dim 0 padded to a multiple of the 2 ranks, computed here from the
parameters' full shapes):

* ``model_init``, ``log_prob``, ``prepass`` and ``update`` are recorded, in one step, though the
  worker's methods are metered twice (its class and the test's subclass);
* forward passes: ``log_prob`` one per infer micro-batch (2), ``prepass`` one (the first
  mini-batch's statistics use the old log-probs, taken at the same parameters), ``update`` one per
  training micro-batch (4);
* all-gathers: every parameter once per no-grad forward (P per forward) and twice per training
  micro-batch (forward, and again in the backward: FSDP2 reshards after the forward);
* reduce-scatters: every gradient (P) after every micro-batch: verl 0.9.1's config leaves
  ``use_no_sync_for_gradient_accumulation`` false, so FSDP2 syncs each micro-batch's gradients;
* the plan (:func:`dfpo.launch.communication_plan.collective_bytes` on the model's anatomy, fp32
  parameters as on this CPU, the measured forward counts) predicts every one of those bytes exactly.
"""

from __future__ import annotations

import math

import pytest

from tests.integration import cpu_verl_harness as h

pytestmark = pytest.mark.slow

NUM_PROMPTS, N, WORLD = 4, 4, 2
OVERRIDES = [
    "actor_rollout_ref.actor.policy_loss._target_=dfpo.verl.loss_config.DFPOPolicyLossConfig",
    "actor_rollout_ref.actor.policy_loss.loss_mode=dfpo",
    "algorithm.adv_estimator=dfpo",
    f"actor_rollout_ref.rollout.n={N}",
    f"actor_rollout_ref.actor.ppo_mini_batch_size={NUM_PROMPTS // 2}",  # 2 mini-batches of 2 groups
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",  # 2 micro-batches per mini-batch per rank
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",  # 2 infer micro-batches per rank
    "actor_rollout_ref.actor.fsdp_config.param_offload=True",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
]


def metered_round(rank, world_size, tmp_path, batch):
    import os

    os.environ["DFPO_RESOURCE_LOG_DIR"] = f"{tmp_path}/meter"
    from dfpo.operations import resource_meter
    from dfpo.verl.resource_phases import metered_phases
    from dfpo.verl.workers import DFPOActorRolloutRefWorker

    # dfpo.verl.workers may be imported already (without the variable) or now (with it): decorated here too
    worker_cls = metered_phases(type("MeteredWorker", (DFPOActorRolloutRefWorker,), {}))
    cfg = h.compose_actor_config(h.ensure_tiny_model(f"{tmp_path}/model"), OVERRIDES)
    worker = worker_cls(cfg.actor_rollout_ref, role="actor")
    worker.init_model()
    shard = h.dispatch_shards(batch, world_size)[rank]
    worker.compute_log_prob(h.with_log_prob_meta(shard))
    worker.update_actor(h.with_update_meta(shard, **h.update_meta_from_config(worker.config)))
    padded_param_bytes = sum(
        math.ceil(p.shape[0] / world_size) * world_size * math.prod(p.shape[1:]) * 4
        for p in h.actor_module(worker).parameters()
    )
    meter = resource_meter._PROCESS_METER
    return {"record": meter.record(), "padded_param_bytes": padded_param_bytes, "path": str(meter.path())}


def test_a_metered_training_step_on_verls_worker(tmp_path):
    batch = h.make_batch(h.ensure_tiny_model(tmp_path / "model"), h.BatchSpec(num_prompts=NUM_PROMPTS, n=N, seed=1))
    results = h.run_ranks(metered_round, WORLD, str(tmp_path), batch)
    for rank, result in enumerate(results):
        record, param_bytes = result["record"], result["padded_param_bytes"]
        assert result["path"].endswith(f"actor-rank{rank}-pid{record['pid']}.json")
        assert (record["rank"], record["world"]) == (rank, WORLD)
        phases = record["phases"]
        assert set(phases) == {"model_init", "log_prob", "prepass", "update"}
        assert [sorted(step["phases"]) for step in record["steps"]] == [["log_prob", "prepass", "update"]]
        forwards = {phase: phases[phase]["forward_passes"] for phase in ("log_prob", "prepass", "update")}
        assert forwards == {"log_prob": 2, "prepass": 1, "update": 4}
        for phase, gathers_per_forward in (("log_prob", 1), ("prepass", 1), ("update", 2)):
            expected = gathers_per_forward * forwards[phase] * param_bytes
            assert phases[phase]["bytes"]["all_gather_into_tensor"] == expected, phase
        assert phases["update"]["bytes"]["reduce_scatter_tensor"] == forwards["update"] * param_bytes
        assert phases["model_init"]["rss_peak_bytes"] >= phases["model_init"]["rss_start_bytes"] > 0
        planned = _planned_bytes(tmp_path / "model" / "config.json", forwards)
        for phase in ("log_prob", "prepass", "update"):
            measured = {op: phases[phase]["bytes"][op] for op in planned[phase]}
            assert measured == planned[phase], (phase, measured, planned[phase])


def _planned_bytes(config_json, forwards: dict[str, int]) -> dict[str, dict[str, int]]:
    """The plan's bytes for these forward counts (fp32 parameters: the harness's actor dtype)."""
    from dfpo.launch.communication_plan import StepShape, collective_bytes
    from dfpo.launch.model_anatomy import model_anatomy

    shape = StepShape(
        world=WORLD,
        sp=1,
        sequences=NUM_PROMPTS * N,
        mini_batches=2,
        epochs=1,
        dynamic_bsz=False,
        ppo_tokens=0,
        log_prob_tokens=0,
        ppo_micro_batch=2,
        log_prob_micro_batch=4,
        prepass=True,
    )
    return collective_bytes(model_anatomy(config_json), shape, forwards, param_bytes=4, reduce_bytes=4)
