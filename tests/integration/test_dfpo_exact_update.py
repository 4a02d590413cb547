"""DFPO through verl's real actor worker on CPU equals a single-process reference holding whole groups.

The reference: for each optimizer step (the global mini-batch verl forms, reproduced by
``global_mini_batches`` with verl's own iterator), log π_θ of every member of every group the
mini-batch touches at the current parameters (s = 1 exactly on the first mini-batch of the first
epoch, where θ = θ_old), DFPO's group weights over those whole groups, and the DFPO loss of the
mini-batch rows with the global normaliser; one SGD step. verl's run splits the same data over
micro-batches (fixed size 1, 2 or the whole mini-batch, or dynamic and reordered), over 1 or 2
gloo ranks (the batch reordered as the trainer's length balancing does, so groups straddle ranks),
2 mini-batches, 2 epochs, with and without shuffling, padded or packed as the GPU recipes run
(``use_remove_padding``: each micro-batch one ``(1, total tokens)`` row, which a hook on the model
confirms, attention split by position ids in transformers' eager or sdpa attention).

All runs of one world size share one set of spawned processes (importing verl costs far more
than a tiny update), so each test below checks a list of cases. Each case's config is composed once,
in the test process (Hydra costs seconds on 2 cores): the reference reads it and every rank builds
its worker from it. The test process computes with one intra-op thread, as the ranks do: the tiny
model's ops are microseconds, and two threads contending with the other test worker for 2 cores
made each reference forward ten times slower.
"""

from __future__ import annotations

import pytest
import torch

from cpu_backend.varlen_attention import CPU_VARLEN_ATTENTION
from dfpo.algorithm.group_ids import group_ids
from dfpo.algorithm.group_statistics import row_statistics
from dfpo.algorithm.group_weights import compute_group_weights
from dfpo.algorithm.loss import compute_dfpo_loss
from dfpo.algorithm.shared_prefix import shared_prefix_lengths
from tests.integration import cpu_verl_harness as h

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("single_torch_thread")]  # see the module doc

NUM_PROMPTS, N = 4, 4
BATCH_SPEC = h.BatchSpec(num_prompts=NUM_PROMPTS, n=N, seed=1)  # old log-probs = log π_θ0, as compute_log_prob writes
DELTA_ATOL_FRACTION, DELTA_RTOL = 1e-5, 1e-4

DFPO = [
    "actor_rollout_ref.actor.policy_loss._target_=dfpo.verl.loss_config.DFPOPolicyLossConfig",
    "actor_rollout_ref.actor.policy_loss.loss_mode=dfpo",
    "algorithm.adv_estimator=dfpo",
]
TWO_MINI_BATCHES_TWO_EPOCHS = [
    f"actor_rollout_ref.rollout.n={N}",
    f"actor_rollout_ref.actor.ppo_mini_batch_size={NUM_PROMPTS // 2}",
    "actor_rollout_ref.actor.ppo_epochs=2",
]
DYNAMIC = [
    "actor_rollout_ref.actor.use_dynamic_bsz=True",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=40",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=40",
]
SHUFFLE = ["actor_rollout_ref.actor.shuffle=True"]
# the GPU recipes' packed path (USE_REMOVE_PADDING=true): each micro-batch one (1, total tokens) row,
# attention kept within each sequence by its position ids (transformers' eager, the CPU recipes'
# attention, or sdpa, where the GPU recipes use flash-attention); the reference runs padded rows
PACKED = [
    "actor_rollout_ref.model.use_remove_padding=True",
    f"actor_rollout_ref.model.override_config.attn_implementation={CPU_VARLEN_ATTENTION}",
]
SDPA = ["actor_rollout_ref.model.override_config.attn_implementation=sdpa"]
# Ulysses sequence parallelism over both ranks (one data-parallel rank): each rank forwards half of
# every packed row, verl's all-to-all exchanges q/k/v per attention layer (gloo: cpu_backend/gloo_all_to_all.py)
SP2 = PACKED + ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"]


def micro(size: int) -> list[str]:
    return [f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={size}"]


def dfpo(transform="min_replace", scope="all", stop_grad=True) -> list[str]:
    return DFPO + [
        f"+actor_rollout_ref.actor.policy_loss.dfpo_transform={transform}",
        f"+actor_rollout_ref.actor.policy_loss.dfpo_scope={scope}",
        f"+actor_rollout_ref.actor.policy_loss.dfpo_stop_grad={str(stop_grad).lower()}",
    ]


def rounds(rank, world_size, cases, batch):
    """On one rank: for each (worker kind, config) build a fresh worker and run update_actor."""
    from verl.workers.engine_workers import ActorRolloutRefWorker

    from cpu_backend import gloo_all_to_all, varlen_attention
    from dfpo.verl.workers import DFPOActorRolloutRefWorker

    varlen_attention.install()  # the GPU path's packed attention and Ulysses all-to-all, as
    gloo_all_to_all.install()  # cpu_backend.activate installs them in the trainer's workers
    results = []
    for kind, cfg in cases:
        sp = int(cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size)
        shard = h.dispatch_shards(batch, world_size // sp)[rank // sp]  # a sequence-parallel group shares its data
        worker_cls = DFPOActorRolloutRefWorker if kind == "dfpo" else ActorRolloutRefWorker
        worker = worker_cls(cfg.actor_rollout_ref, role="actor")
        worker.init_model()
        before = h.actor_state_dict(worker)
        rows_per_call = []  # the batch dimension of every model call: 1 when verl packs the micro-batch
        hook = h.actor_module(worker).register_forward_pre_hook(
            lambda module, args, kwargs, rows=rows_per_call: rows.append(int(kwargs["input_ids"].shape[0])),
            with_kwargs=True,
        )
        output = worker.update_actor(h.with_update_meta(shard, **h.update_meta_from_config(worker.config)))
        hook.remove()
        metrics = dict(output["metrics"]) if output is not None else {}
        results.append((before, h.actor_state_dict(worker), metrics | {"model_call_rows": rows_per_call}))
    return results


def reference_update(tmp_path, batch, overrides, world_size):
    """Parameters after the whole-group single-process DFPO update described in the module doc."""
    cfg = h.compose_actor_config(h.ensure_tiny_model(f"{tmp_path}/model"), overrides)
    options = h.actor_loss_config(cfg).policy_loss
    meta = h.update_meta_from_config(cfg.actor_rollout_ref)
    steps = h.global_mini_batches(
        len(batch), world_size, meta["mini_batch_size"], meta["epochs"], meta["shuffle"], meta["seed"]
    )
    model = h.load_hf_model(f"{tmp_path}/model")
    optimizer = torch.optim.SGD(model.parameters(), lr=float(cfg.actor_rollout_ref.actor.optim.lr))
    gid = group_ids(list(batch["uid"]))
    old = h.padded_response_field(batch, "old_log_probs")
    adv = h.padded_response_field(batch, "advantages")
    mask = h.padded_response_field(batch, "response_mask").to(torch.bool)
    prefix = shared_prefix_lengths(gid, h.padded_response_field(batch, "responses"), mask)
    is_w = h.padded_response_field(batch, "rollout_is_weights") if "rollout_is_weights" in batch.keys() else None
    scope_prefix = prefix if options.dfpo_scope == "shared_prefix" else None
    for k, rows in enumerate(steps):
        rows_t = torch.tensor(rows)
        needed = torch.nonzero(torch.isin(gid, gid[rows_t])).flatten()
        with torch.no_grad():
            lp = old[needed] if k == 0 else h.hf_response_log_probs(model, h.select_samples(batch, needed.tolist()))
        lp = torch.nn.functional.pad(lp, (0, old.shape[1] - lp.shape[1]))
        stats = row_statistics(
            lp,
            old[needed],
            adv[needed],
            mask[needed],
            gid[needed],
            None if scope_prefix is None else scope_prefix[needed],
            None if is_w is None else is_w[needed],
        )
        weights = compute_group_weights(stats, options.dfpo_transform, options.dfpo_scale, options.dfpo_stop_grad)
        position = {int(r): i for i, r in enumerate(needed)}
        optimizer.zero_grad(set_to_none=True)
        log_prob = h.hf_response_log_probs(model, h.select_samples(batch, rows))
        width = log_prob.shape[1]
        loss, _ = compute_dfpo_loss(
            old[rows_t][:, :width],
            log_prob,
            adv[rows_t][:, :width],
            mask[rows_t][:, :width],
            gid[rows_t],
            transform=options.dfpo_transform,
            scope=options.dfpo_scope,
            stop_grad=options.dfpo_stop_grad,
            rollout_is_weights=None if is_w is None else is_w[rows_t][:, :width],
            num_sequences=len(rows),
            group_weights=weights.select(torch.tensor([position[r] for r in rows])),
            prefix_len=prefix[rows_t],
        )
        loss.backward()
        optimizer.step()
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def assert_same_update(before, after, expected_after, label):
    deltas = {k: after[k] - before[k] for k in after}
    scale = max(float(d.abs().max()) for d in deltas.values())
    assert scale > 1e-4, f"{label}: update_actor did not move the parameters"
    for name, delta in deltas.items():
        torch.testing.assert_close(
            delta,
            expected_after[name] - before[name],
            rtol=DELTA_RTOL,
            atol=DELTA_ATOL_FRACTION * scale,
            msg=lambda m, name=name: f"{label}: {name}: {m}",
        )


def composed(workdir, cases):
    """(worker kind, config composed for ``overrides``) for each (kind, overrides) of ``cases``."""
    return [(kind, h.compose_actor_config(h.ensure_tiny_model(f"{workdir}/model"), o)) for kind, o in cases]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("dfpo_exact")
    h.save_tiny_model(path / "model", seed=0)
    return path


WORLD1_CASES = {
    "min_replace micro=1": dfpo() + micro(1),
    "orth_proj micro=whole shuffle": dfpo("orth_proj") + micro(8) + SHUFFLE,
    "min_replace dynamic shuffle": dfpo() + DYNAMIC + SHUFFLE,
    "scale micro=2": dfpo("scale") + micro(2),
    "none shared_prefix micro=2": dfpo("none", "shared_prefix") + micro(2),
    "min_replace no-stop-grad micro=2": dfpo(stop_grad=False) + micro(2),
    "orth_proj no-stop-grad shared_prefix dynamic": dfpo("orth_proj", "shared_prefix", False) + DYNAMIC,
    "min_replace packed micro=2": dfpo() + micro(2) + PACKED,
    "orth_proj packed sdpa dynamic shuffle": dfpo("orth_proj") + DYNAMIC + SHUFFLE + PACKED + SDPA,
}

WORLD2_CASES = {
    "min_replace micro=1 shuffle": dfpo() + micro(1) + SHUFFLE,
    "orth_proj dynamic": dfpo("orth_proj") + DYNAMIC,
    "min_replace no-stop-grad shared_prefix micro=whole": dfpo(stop_grad=False, scope="shared_prefix") + micro(4),
    "min_replace packed dynamic": dfpo() + DYNAMIC + PACKED,
    "orth_proj packed micro=1 shuffle": dfpo("orth_proj") + micro(1) + SHUFFLE + PACKED,
}

SP2_CASES = {
    "min_replace packed sp=2 dynamic": dfpo() + DYNAMIC + SP2,
    "orth_proj packed sp=2 micro=2 shuffle": dfpo("orth_proj") + micro(2) + SHUFFLE + SP2,
}


def _check(workdir, batch, cases, world_size, sp=1):
    results = h.run_ranks(
        rounds,
        world_size,
        composed(workdir, [("dfpo", TWO_MINI_BATCHES_TWO_EPOCHS + o) for o in cases.values()]),
        batch,
    )
    for index, (label, overrides) in enumerate(cases.items()):
        before, after, metrics = results[0][index]
        expected = reference_update(str(workdir), batch, TWO_MINI_BATCHES_TWO_EPOCHS + overrides, world_size // sp)
        assert_same_update(before, after, expected, f"world={world_size} {label}")
        for other in results[1:]:  # FSDP keeps replicas identical
            for name, value in other[index][1].items():
                torch.testing.assert_close(value, after[name])
        calls = metrics["model_call_rows"]
        if "packed" in label:  # verl packed every micro-batch of the pre-pass and the update into one row
            assert calls and set(calls) == {1}, (label, calls)
        else:
            assert max(calls) > 1 or "micro=1" in label, (label, calls)
        assert len(metrics["dfpo/prepass_forward"]) == 4  # 2 mini-batches x 2 epochs
        assert metrics["dfpo/prepass_forward"][0] == 0.0 and all(v == 1.0 for v in metrics["dfpo/prepass_forward"][1:])
        if "orth_proj" in label or "min_replace" in label:
            assert max(metrics["dfpo/cancellation_residual_after"]) < 1e-6, (
                label,
                metrics["dfpo/cancellation_residual_after"],
            )
        if ("orth_proj" in label or "min_replace" in label) and " IS " not in label:
            # (the IS case's weights are drawn per token, unequal at a group's shared positions, where
            # real ones are equal: same context, same token; so its shared gradient does not cancel)
            # measured on the gradient of the loss verl backpropagated: rounding under stop-gradient;
            # the no-stop-grad ablation's W̃(θ) moves the shared tokens although its weights cancel
            # measured on groups a mini-batch holds whole: shuffled mini-batches and two ranks'
            # length balancing split them, unshuffled ones on one rank keep them whole
            residual = _shared_token_grad_residual(
                metrics, label, required=world_size // sp == 1 and "shuffle" not in label
            )
            if "no-stop-grad" in label:
                assert all(r > 1e-3 for r in residual), (label, residual)
            else:
                assert all(r < 1e-5 for r in residual), (label, residual)
        assert min(metrics["dfpo/cancellation_residual_before"]) > 1e-3
    return results


def _shared_token_grad_residual(metrics, label, required: bool = True) -> list[float]:
    """The mini-batches' gradient residuals (a mini-batch holding no whole group with a shared
    prefix logs none); with ``required``, at least one must have been measured."""
    groups = metrics["dfpo/shared_token_grad_groups"]
    residual = metrics.get("dfpo/shared_token_grad_residual", [])
    assert len(residual) == sum(1 for g in groups if g > 0), (label, groups, residual)
    assert residual or not required, (label, groups)
    # what was not measured says why: measured ⊆ with a shared prefix ⊆ whole
    counts = zip(
        groups,
        metrics["dfpo/shared_token_grad_prefix_groups"],
        metrics["dfpo/shared_token_grad_whole_groups"],
        strict=True,
    )
    assert all(g <= p <= w for g, p, w in counts), (label, metrics)
    assert all(eps == torch.finfo(torch.float32).eps for eps in metrics["dfpo/shared_token_grad_eps"]), label
    return residual


def test_world_size_1_matches_whole_group_reference(workdir):
    batch = h.make_batch(workdir / "model", BATCH_SPEC)
    _check(workdir, batch, WORLD1_CASES, 1)


def test_two_gloo_ranks_with_groups_split_by_length_balancing(workdir):
    batch = h.balance_like_trainer(h.make_batch(workdir / "model", BATCH_SPEC), 2)
    ranks_of_group = {}
    for position, uid in enumerate(list(batch["uid"])):
        ranks_of_group.setdefault(uid, set()).add(position // (len(batch) // 2))
    assert any(len(r) == 2 for r in ranks_of_group.values()), "the balanced batch should split some group over ranks"
    results = _check(workdir, batch, WORLD2_CASES, 2)
    # groups straddle mini-batches here: the pre-pass forwards members outside the mini-batch
    assert max(max(r[2]["dfpo/prepass_rows_per_mini_batch_row"]) for r in results[0]) > 1.0


def test_ulysses_sequence_parallel_2_equals_the_whole_group_reference(workdir):
    """SP 2 on 2 gloo ranks gives the reference's update, which is the SP 1 update (the other tests)."""
    batch = h.make_batch(workdir / "model", BATCH_SPEC)
    _check(workdir, batch, SP2_CASES, 2, sp=2)


def test_verl_gspo_update_is_unchanged_by_dfpo_worker(workdir):
    batch = h.make_batch(workdir / "model", BATCH_SPEC)
    gspo = TWO_MINI_BATCHES_TWO_EPOCHS + micro(2) + ["actor_rollout_ref.actor.policy_loss.loss_mode=gspo"]
    vanilla = TWO_MINI_BATCHES_TWO_EPOCHS + micro(2) + ["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"]
    # entropy bonus and KL loss on top: ppo_loss adds them after the policy loss; the wrapper must keep them
    regularised = gspo + [
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.kl_loss_coef=0.1",
    ]
    generator = torch.Generator().manual_seed(3)
    batch["ref_log_prob"] = torch.nested.as_nested_tensor(
        [r + 0.1 * torch.randn(len(r), generator=generator) for r in batch["old_log_probs"].unbind()],
        layout=torch.jagged,
    )
    cases = [
        ("verl", gspo),
        ("dfpo", gspo),
        ("verl", vanilla),
        ("dfpo", vanilla),
        ("verl", regularised),
        ("dfpo", regularised),
    ]
    (results,) = h.run_ranks(rounds, 1, composed(workdir, cases), batch)
    for verl_run, dfpo_run in ((results[0], results[1]), (results[2], results[3]), (results[4], results[5])):
        for name, value in verl_run[1].items():
            torch.testing.assert_close(dfpo_run[1][name], value, rtol=0, atol=0)
    assert "actor/entropy_loss" in results[5][2] and "kl_loss" in results[5][2]
    gspo_metrics, vanilla_metrics = results[1][2], results[3][2]
    assert all(0.0 <= v <= 1.0 for v in gspo_metrics["dfpo/cancellation_residual_before"])
    assert max(gspo_metrics["dfpo/cancellation_residual_before"]) > 1e-3  # GSPO pays the learning tax
    assert "dfpo/shared_token_clip_residual" in vanilla_metrics
    assert "dfpo/shared_prefix_token_frac" in gspo_metrics
    # the gradient GSPO's loss gives the shared tokens does not cancel; the update is verl's, bitwise (above)
    assert max(_shared_token_grad_residual(gspo_metrics, "gspo")) > 1e-3
    assert "dfpo/shared_token_grad_groups" not in results[5][2]  # with the KL loss: not measured


def test_rollout_is_weights_multiply_the_token_terms(workdir):
    """verl's rollout-correction IS weights (a batch field ppo_loss hands to the policy loss) enter
    DFPO's token terms and its no-stop-grad coefficients exactly as in the reference."""
    batch = h.make_batch(workdir / "model", BATCH_SPEC)
    generator = torch.Generator().manual_seed(7)
    weights = [0.5 + torch.rand(len(r), generator=generator) for r in batch["responses"].unbind()]
    batch["rollout_is_weights"] = torch.nested.as_nested_tensor(weights, layout=torch.jagged)
    cases = {
        "min_replace IS micro=2": dfpo() + micro(2),
        "orth_proj no-stop-grad shared_prefix IS dynamic": dfpo("orth_proj", "shared_prefix", False) + DYNAMIC,
    }
    _check(workdir, batch, cases, 1)
