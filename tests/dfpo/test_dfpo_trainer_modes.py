"""dfpo's trainers for verl's three V1 modes (dfpo/verl/trainer.py): verl's trainer of each mode with
DFPO's actor worker, verl's mode-dependent choices intact, and the old-log-probs flag the actor
receives checked against what verl's own ``_compute_old_log_prob`` does in that mode."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dfpo.launch.compose import compose_trainer_config
from tests.dfpo.test_bypass_mode import _FakeBatch, _FakeTransferQueue

MODES = ("dfpo_sync", "dfpo_colocate_async", "dfpo_separate_async")
SEPARATE = [
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "trainer.v1.separate_async.parameter_sync_step=2",
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.checkpoint_engine.backend=local",
]


def _config(mode: str, overrides=()):
    extra = SEPARATE if "separate" in mode else []
    return compose_trainer_config(
        [
            f"trainer.v1.trainer_mode={mode}",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            *extra,
            *overrides,
        ],
        "dfpo_trainer",
    )


def _trainer(mode: str, overrides=()):
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

    import dfpo.verl.trainer  # noqa: F401  (registers the modes)

    return get_trainer_cls(mode)(_config(mode, overrides))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("use_ref", [False, True])
def test_each_mode_is_verls_trainer_with_dfpo_actor_worker(mode, use_ref):
    from verl.experimental.separation.engine_workers import DetachActorWorker
    from verl.trainer.ppo.utils import Role
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls
    from verl.workers.engine_workers import ActorRolloutRefWorker

    from dfpo.verl.trainer import DFPO_TRAINER_MODES
    from dfpo.verl.workers import DFPOActorRolloutRefWorker, DFPODetachActorWorker

    trainer = _trainer(mode, ["actor_rollout_ref.actor.use_kl_loss=true"] if use_ref else [])
    assert isinstance(trainer, get_trainer_cls(DFPO_TRAINER_MODES[mode]))
    trainer._init_resource_pool_mgr()
    expected = DFPODetachActorWorker if "separate" in mode else DFPOActorRolloutRefWorker
    actor_roles = [r for r in (Role.Actor, Role.ActorRollout, Role.ActorRolloutRef) if r in trainer.role_worker_mapping]
    assert actor_roles
    for role in actor_roles:
        assert trainer.role_worker_mapping[role].__ray_metadata__.class_name == expected.__name__
    if Role.RefPolicy in trainer.role_worker_mapping:  # the reference keeps verl's class
        ref_cls = DetachActorWorker if "separate" in mode else ActorRolloutRefWorker
        assert trainer.role_worker_mapping[Role.RefPolicy].__ray_metadata__.class_name == ref_cls.__name__
    assert issubclass(DFPODetachActorWorker, DetachActorWorker) and issubclass(
        DFPODetachActorWorker, DFPOActorRolloutRefWorker
    )


@pytest.mark.parametrize("mode", MODES)
def test_verls_mode_dependent_choices_are_those_of_verls_own_mode(mode):
    """verl branches on ``trainer_mode``: under the name dfpo_<mode> verl would pick the async
    replay buffer for sync and a parameter_sync_step of 1 for separate_async."""
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

    from dfpo.verl.trainer import DFPO_TRAINER_MODES

    verl_mode = DFPO_TRAINER_MODES[mode]
    ours = _trainer(mode)
    theirs = get_trainer_cls(verl_mode)(_config(mode, [f"trainer.v1.trainer_mode={verl_mode}"]))
    assert ours.trainer_mode == theirs.trainer_mode == verl_mode
    assert type(ours.replay_buffer) is type(theirs.replay_buffer)
    assert ours.parameter_sync_step == theirs.parameter_sync_step == (2 if "separate" in mode else 1)
    with pytest.raises(ValueError, match=mode):
        ours.trainer_mode = verl_mode


class _VersionedWorkers:
    """The actor worker group as the trainer drives it, with weights reduced to a version number:
    compute_log_prob writes log-probs that encode the version, update_actor takes one optimizer
    step (version + 1), save/restore_model_from_cpu behave as verl's DetachActorWorker."""

    def __init__(self, tq: _FakeTransferQueue, lengths: list[int]):
        self.tq, self.lengths = tq, lengths
        self.version, self.saved, self.update_meta = 0, {}, []

    @staticmethod
    def code(version: int) -> float:
        return -0.1 * (version + 1)

    def compute_log_prob(self, batch):
        # per-position outputs over a 1-token prompt + response, shifted by one
        self.tq.store["log_probs"] = [torch.full((n + 1,), self.code(self.version)) for n in self.lengths]
        self.tq.store["entropy"] = [torch.ones(n + 1) for n in self.lengths]
        return batch

    def save_model_to_cpu(self, n):
        self.saved[n] = self.version

    def restore_model_from_cpu(self, n):
        if n in self.saved:
            self.version = self.saved[n]

    def clear_cpu_model(self, n):
        self.saved.pop(n, None)

    def update_actor(self, batch):
        old = torch.cat(self.tq.store["old_log_probs"])
        self.update_meta.append((dict(batch.extra_info), bool(torch.all(old == self.code(self.version)))))
        self.version += 1
        return {"metrics": {"mfu": [0.0]}}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bypass", [False, True])
def test_the_flag_says_whether_verls_old_log_probs_are_at_the_update_parameters(monkeypatch, mode, bypass):
    """Two training steps through the trainer's own ``_compute_old_log_prob`` (verl's, with its
    separate-async save/restore of π_old) and ``_update_actor``: the flag the actor receives is true
    exactly when the old log-probs are log π at the parameters the update starts from."""
    from verl.trainer.ppo.v1 import trainer_base

    from dfpo.verl.old_log_probs_flag import OLD_LOG_PROBS_AT_STEP_PARAMS

    lengths = [3, 2, 4, 1]
    generator = torch.Generator().manual_seed(0)
    tq = _FakeTransferQueue(
        {
            "rollout_log_probs": [-torch.rand(n, generator=generator) for n in lengths],
            "responses": [torch.ones(n, dtype=torch.long) for n in lengths],
            "response_mask": [torch.ones(n, dtype=torch.long) for n in lengths],
        }
    )
    monkeypatch.setattr(trainer_base, "tq", tq)
    trainer = _trainer(mode, [f"algorithm.rollout_correction.bypass_mode={str(bypass).lower()}"])
    workers = _VersionedWorkers(tq, lengths)
    trainer.actor_rollout_wg = workers
    observed = []
    for step in (1, 2):
        trainer.global_steps = step
        for trigger in range(trainer.parameter_sync_step):
            trainer.local_trigger_step = trigger
            batch = _FakeBatch(len(lengths))
            batch.tags = [
                {"min_global_steps": step - 1 - (i % 2), "max_global_steps": step - 1} for i in range(len(lengths))
            ]
            metrics = {}
            trainer._compute_old_log_prob(batch, metrics)
            trainer._update_actor(batch, metrics)
            meta, at_update_params = workers.update_meta[-1]
            assert meta[OLD_LOG_PROBS_AT_STEP_PARAMS] is at_update_params, (step, trigger)
            assert metrics["dfpo/staleness/policy_lag_max"] == 1.0 and metrics["dfpo/staleness/local_update"] == trigger
            observed.append(at_update_params)
    if bypass:
        assert not any(observed)
    elif "separate" in mode:
        assert observed == [True, False, True, False]  # local update 1 trains on π_old of update 0
    else:
        assert all(observed)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("interval", [None, 0.2])
def test_the_replay_buffer_polls_at_the_configured_interval(monkeypatch, mode, interval):
    """``dfpo.sampler_poll_interval_s`` reaches the replay buffer verl builds in every mode, and the
    buffer's wait sleeps that long (verl's own ``_wait_for_next_poll``); null keeps verl's 2 s."""
    from verl.trainer.ppo.v1 import replay_buffer

    trainer = _trainer(mode, [f"dfpo.sampler_poll_interval_s={'null' if interval is None else interval}"])
    slept = []
    monkeypatch.setattr(replay_buffer.time, "sleep", slept.append)
    trainer.replay_buffer._wait_for_next_poll("train", last_debug_time=replay_buffer.time.time())
    assert slept == [2.0 if interval is None else interval]


def test_a_poll_interval_that_is_not_positive_is_refused():
    with pytest.raises(ValueError, match="dfpo.sampler_poll_interval_s"):
        _trainer("dfpo_sync", ["dfpo.sampler_poll_interval_s=0"])


def test_the_cpu_platform_polls_faster_than_verls_default():
    from omegaconf import OmegaConf

    from dfpo.launch.compose import DFPO_CONFIG_DIR

    assert 0 < OmegaConf.load(Path(DFPO_CONFIG_DIR) / "platform" / "cpu.yaml").dfpo.sampler_poll_interval_s < 2.0
