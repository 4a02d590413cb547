"""verl 0.9.1's real actor worker on CPU through the test harness, with verl's built-in ``gspo``.

The harness is only useful if what it runs is verl's actual update: these tests check that
compute_log_prob matches a plain transformers forward, that update_actor trains and reports
verl's metrics, and that one update on 1 and on 2 gloo ranks lands on the parameters of a plain
torch loop (same model, data, AdamW and verl's own gspo loss on the whole mini-batch).
"""

from __future__ import annotations

import pytest
import torch

from tests.integration import cpu_verl_harness as harness

pytestmark = pytest.mark.slow

NUM_PROMPTS, N = 4, 4


def whole_batch_overrides(world_size: int) -> list[str]:
    """One mini-batch holding the whole batch, one epoch, one micro-batch per rank: the setting
    in which verl's update is exactly one optimizer step on the gspo loss of the whole batch."""
    return [
        f"actor_rollout_ref.rollout.n={N}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={NUM_PROMPTS}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={NUM_PROMPTS * N // world_size}",
        "actor_rollout_ref.actor.ppo_epochs=1",
    ]


# Old log-probs off the current policy, so that sequence ratios differ from 1 and some clip.
BATCH_SPEC = harness.BatchSpec(num_prompts=NUM_PROMPTS, n=N, seed=3, old_log_prob_noise=0.3)

# The update verl applied must equal the reference update, compared as parameter deltas: fp32 on
# both sides, differing only in summation order (padding, FSDP flat buffers). The absolute
# tolerance is relative to the largest element of the whole update.
DELTA_ATOL_FRACTION, DELTA_RTOL = 1e-5, 1e-4

SGD = []  # the harness default: torch.optim.SGD, lr 0.1, no weight decay
# AdamW as verl builds it, with an eps large enough that its first step is not lr * sign(g).
ADAMW = [
    "actor_rollout_ref.actor.optim.optimizer=AdamW",
    "actor_rollout_ref.actor.optim.lr=1e-2",
    "actor_rollout_ref.actor.optim.weight_decay=0.01",
    "actor_rollout_ref.actor.optim.override_optimizer_config={eps:1e-3}",
]
OPTIMIZERS = {"sgd": SGD, "adamw": ADAMW}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("cpu_harness")
    harness.save_tiny_model(path / "model", seed=0)
    return path


@pytest.fixture(scope="module")
def batch(workdir):
    return harness.make_batch(workdir / "model", BATCH_SPEC)


def gspo_reference(workdir, batch, overrides, world_size=1):
    """Initial and final parameters of a plain-torch loop over the optimizer steps verl takes for
    this config (:func:`harness.global_mini_batches`), each on verl's gspo loss over the whole
    global mini-batch, with the optimizer class and arguments the config asks for."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    cfg = harness.compose_actor_config(workdir / "model", overrides)
    loss_config = harness.actor_loss_config(cfg)
    gspo = get_policy_loss_fn("gspo")

    def loss_fn(log_probs, sub_batch):
        mask = harness.padded_response_field(sub_batch, "response_mask").bool()
        loss_config.global_batch_info.update(
            dp_size=1,
            batch_num_tokens=int(mask.sum()),
            global_batch_size=len(sub_batch),
            loss_scale_factor=loss_config.loss_scale_factor,
        )
        loss, _ = gspo(
            old_log_prob=harness.padded_response_field(sub_batch, "old_log_probs"),
            log_prob=log_probs,
            advantages=harness.padded_response_field(sub_batch, "advantages"),
            response_mask=mask,
            loss_agg_mode=loss_config.loss_agg_mode,
            config=loss_config,
            rollout_is_weights=None,
        )
        return loss

    optim = cfg.actor_rollout_ref.actor.optim
    kwargs = {"lr": float(optim.lr), "weight_decay": float(optim.weight_decay)}
    if optim.optimizer == "AdamW":
        kwargs.update(betas=tuple(optim.betas), **(optim.override_optimizer_config or {}))
    settings = harness.OptimizerSettings(getattr(torch.optim, optim.optimizer), kwargs, float(optim.clip_grad))

    model = harness.load_hf_model(workdir / "model")
    initial = {name: value.detach().clone() for name, value in model.state_dict().items()}
    meta = harness.update_meta_from_config(cfg.actor_rollout_ref)
    steps = harness.global_mini_batches(
        len(batch), world_size, meta["mini_batch_size"], meta["epochs"], meta["shuffle"], meta["seed"]
    )
    harness.reference_update(model, settings, batch, steps, loss_fn)
    final = {name: value.detach().clone() for name, value in model.state_dict().items()}
    return {"initial": initial, "final": final, "settings": settings}


@pytest.fixture(scope="module")
def references(workdir, batch):
    cache = {}

    def get(optimizer: str):
        if optimizer not in cache:
            cache[optimizer] = gspo_reference(workdir, batch, [*whole_batch_overrides(1), *OPTIMIZERS[optimizer]])
        return cache[optimizer]

    return get


def assert_same_update(actual: dict, reference: dict) -> None:
    """``actual`` (parameters after verl's update) moved from the reference's initial parameters
    by the same amount as the reference did, tensor by tensor."""
    initial, expected = reference["initial"], reference["final"]
    assert actual.keys() == expected.keys()
    deltas = {name: expected[name] - initial[name] for name in expected}
    atol = DELTA_ATOL_FRACTION * max(float(delta.abs().max()) for delta in deltas.values())
    for name, expected_delta in deltas.items():
        # Only meaningful if the update moved this tensor well beyond tolerance.
        assert expected_delta.abs().max() > 10 * atol, name
        torch.testing.assert_close(
            actual[name] - initial[name],
            expected_delta,
            atol=atol,
            rtol=DELTA_RTOL,
            msg=lambda m, name=name: f"{name}: {m}",
        )


def assert_optimizer_as_configured(settings: harness.OptimizerSettings, reference: dict) -> None:
    expected = reference["settings"]
    assert settings.optimizer_class is expected.optimizer_class
    assert settings.clip_grad == expected.clip_grad
    for key, value in expected.kwargs.items():
        assert settings.kwargs[key] == pytest.approx(value), key


def test_batch_layout_matches_the_v1_trainer(batch):
    assert len(batch) == NUM_PROMPTS * N
    for key in ("input_ids", "prompts", "responses", "response_mask", "loss_mask", "old_log_probs", "advantages"):
        assert batch[key].is_nested and batch[key].layout == torch.jagged, key
    uids = list(batch["uid"])
    assert len(set(uids)) == NUM_PROMPTS and all(uids.count(u) == N for u in uids)
    lengths = batch["responses"].offsets().diff()
    assert len(set(lengths.tolist())) > 1, "responses must vary in length"
    prompt_lengths = batch["prompts"].offsets().diff()
    assert torch.equal(batch["input_ids"].offsets().diff(), prompt_lengths + lengths)
    # Responses of a group share a common prefix, and at least one group has a non-empty one.
    responses = list(batch["responses"].unbind())
    shared = []
    for g in range(NUM_PROMPTS):
        group = responses[g * N : (g + 1) * N]
        k = 0
        while all(len(r) > k for r in group) and all(r[k] == group[0][k] for r in group):
            k += 1
        shared.append(k)
    assert max(shared) > 0
    # GRPO advantages are constant over each response and sum to zero within a group.
    advantages = [a for a in batch["advantages"].unbind()]
    group_sums = [sum(float(a[0]) for a in advantages[g * N : (g + 1) * N]) for g in range(NUM_PROMPTS)]
    assert all(torch.all(a == a[0]) for a in advantages)
    assert max(abs(s) for s in group_sums) < 1e-5


def test_padding_samples_look_like_the_trainers(workdir):
    from verl.trainer.ppo.padding_utils import SYNTHETIC_PADDING_SEQ_LEN

    padded = harness.make_batch(workdir / "model", harness.BatchSpec(num_prompts=1, n=2, num_padding_samples=2))
    assert len(padded) == 4
    uids = list(padded["uid"])
    assert uids[2] == uids[3] and uids[2].startswith("pad") and uids[2] != uids[0]
    pad_lengths = padded["input_ids"].offsets().diff()[2:]
    assert pad_lengths.tolist() == [SYNTHETIC_PADDING_SEQ_LEN] * 2
    assert [int(m.sum()) for m in padded["response_mask"].unbind()[2:]] == [0, 0]


def test_compute_log_prob_matches_plain_forward_world_size_1(workdir, batch):
    with harness.single_process_group():
        worker = harness.build_actor_worker([], workdir)
        output = worker.compute_log_prob(harness.with_log_prob_meta(batch))
    log_probs = harness.response_log_probs(output, batch)
    lengths = batch["responses"].offsets().diff()
    assert log_probs.shape == (len(batch), int(lengths.max()))
    assert torch.isfinite(log_probs).all()
    with torch.no_grad():
        expected = harness.hf_response_log_probs(harness.load_hf_model(workdir / "model"), batch)
    torch.testing.assert_close(log_probs, expected, atol=1e-5, rtol=1e-5)
    assert output["entropy"].is_nested and torch.isfinite(output["entropy"].values()).all()


def test_update_actor_trains_and_reports_metrics_world_size_1(workdir, batch):
    # The harness defaults: 2 mini-batches of 2 prompts x 4 responses, micro-batches of 2.
    with harness.single_process_group():
        result = harness.actor_round(0, 1, str(workdir), [], batch, compute_log_prob=False)
    assert "actor/pg_loss" in result.metrics and "grad_norm" in result.metrics
    assert len(result.metrics["grad_norm"]) == 2, "two mini-batches, two optimizer steps"
    assert all(torch.isfinite(torch.tensor(v)) for v in result.metrics["actor/pg_loss"])
    unchanged = [name for name, value in result.state_before.items() if torch.equal(value, result.state_after[name])]
    assert not unchanged, f"parameters not updated: {unchanged}"


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_update_actor_matches_plain_torch_loop_world_size_1(workdir, batch, references, optimizer):
    reference = references(optimizer)
    overrides = [*whole_batch_overrides(1), *OPTIMIZERS[optimizer]]
    with harness.single_process_group():
        result = harness.actor_round(0, 1, str(workdir), overrides, batch, compute_log_prob=False)
    assert_optimizer_as_configured(result.optimizer, reference)
    assert len(result.metrics["grad_norm"]) == 1
    for name, value in reference["initial"].items():
        torch.testing.assert_close(result.state_before[name], value, atol=0, rtol=0)
    assert_same_update(result.state_after, reference)


# Two ranks, two mini-batches per epoch, two epochs, shuffled mini-batches, dynamic micro-batches:
# the reference replays verl's per-rank shuffling (seed + dp_rank) through global_mini_batches.
TWO_RANK_OVERRIDES = [
    f"actor_rollout_ref.rollout.n={N}",
    f"actor_rollout_ref.actor.ppo_mini_batch_size={NUM_PROMPTS // 2}",
    "actor_rollout_ref.actor.ppo_epochs=2",
    "actor_rollout_ref.actor.shuffle=True",
    "actor_rollout_ref.actor.use_dynamic_bsz=True",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=40",
]


def test_two_gloo_ranks_match_plain_torch_loop(workdir, batch):
    steps = harness.global_mini_batches(len(batch), 2, mini_batch_size=NUM_PROMPTS * N // 2, epochs=2, shuffle=True)
    assert len(steps) == 4 and steps[0] != steps[2], "two shuffled epochs of two mini-batches"
    reference = gspo_reference(workdir, batch, TWO_RANK_OVERRIDES, world_size=2)
    cfg = harness.compose_actor_config(workdir / "model", TWO_RANK_OVERRIDES)
    results = harness.run_ranks(harness.actor_round, 2, str(workdir), cfg, batch)
    shards = harness.dispatch_shards(batch, 2)
    with torch.no_grad():
        model = harness.load_hf_model(workdir / "model")
        for result, shard in zip(results, shards, strict=True):
            lengths = shard["responses"].offsets().diff()
            assert result.log_probs.shape == (len(shard), int(lengths.max()))
            expected = harness.hf_response_log_probs(model, shard)
            torch.testing.assert_close(result.log_probs, expected, atol=1e-5, rtol=1e-5)
    # Only the collecting rank returns metrics; they hold both ranks' values.
    assert "actor/pg_loss" in results[0].metrics
    assert len(results[0].metrics["grad_norm"]) == 4
    assert_optimizer_as_configured(results[0].optimizer, reference)
    for name in reference["final"]:
        torch.testing.assert_close(results[0].state_after[name], results[1].state_after[name], atol=0, rtol=0)
    assert_same_update(results[0].state_after, reference)


def test_single_process_group_leaves_no_trace():
    import os

    import torch.distributed as dist
    import verl.workers.engine  # noqa: F401  (verl's own import-time environment changes happen here)
    from verl.plugin.platform import get_platform

    keys = ("VERL_PLATFORM", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    before_platform, before_env = get_platform(), {key: os.environ.get(key) for key in keys}
    with harness.single_process_group():
        assert get_platform().device_name == "cpu" and dist.get_world_size() == 1
        assert os.environ["VERL_PLATFORM"] == "cpu" and os.environ["RANK"] == "0"
    assert get_platform() is before_platform
    assert {key: os.environ.get(key) for key in keys} == before_env
    assert not dist.is_initialized()
