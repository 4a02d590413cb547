"""Run verl 0.9.1's real actor worker path on CPU, for integration tests (test-only).

verl 0.9.1 ships no CPU platform and registers its FSDP engine for ``cuda``/``npu`` only. This
module uses dfpo's local CPU backend (:mod:`cpu_backend`, shared with the CPU recipes) for what is
missing, through verl's own extension points, without editing verl's files:

* :class:`cpu_backend.platform.PlatformCPU`, registered with verl's ``PlatformRegistry`` as
  ``cpu`` and made current by :func:`install_cpu_platform` (``VERL_PLATFORM=cpu`` in rank
  processes): device ``"cpu"``, backend ``gloo`` and a ``torch.cuda``-style device module;
* verl's own ``FSDPEngineWithLMHead`` registered for device ``"cpu"``, backend ``fsdp2``
  (:func:`cpu_backend.activate.register_cpu_engine`).

On top of the shim, what a test needs (each documented below):

* model and config: :func:`save_tiny_model` / :func:`ensure_tiny_model` (:data:`TINY_MODEL`, a
  random 2-layer fp32 Qwen2 of :mod:`cpu_examples.tiny_model`, and an offline tokenizer),
  :func:`compose_actor_config` (verl's ``ppo_trainer`` composed with Hydra, :data:`CPU_OVERRIDES`
  first), :func:`build_actor_worker` (a real ``ActorRolloutRefWorker(role="actor")`` after
  ``init_model()``);
* data: :func:`make_batch` (the jagged TensorDict the V1 trainer hands the worker),
  :func:`with_update_meta` / :func:`with_log_prob_meta` / :func:`update_meta_from_config` (the
  non-tensor fields ``_update_actor`` / ``_compute_old_log_prob`` attach),
  :func:`balance_like_trainer`, :func:`dispatch_shards`;
* ranks: :func:`single_process_group` (world size 1 in this process), :func:`run_ranks` (a
  function on N gloo ranks in fresh processes), :func:`actor_round` (build, compute_log_prob,
  update_actor on a rank's shard);
* references: :func:`load_hf_model`, :func:`hf_response_log_probs`, :func:`actor_state_dict`,
  :func:`optimizer_settings`, :func:`actor_loss_config`, :func:`global_mini_batches` (the
  optimizer steps verl takes), :func:`reference_update` (a plain torch loop over them).
"""

from __future__ import annotations

import copy
import functools
import io
import os
import queue as queue_module
import socket
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from verl.plugin.platform import PlatformBase, get_platform, set_platform

from cpu_backend.activate import register_cpu_engine
from cpu_backend.platform import CPU_PLATFORM_NAME, PlatformCPU
from cpu_examples.tiny_model import TinyModelSpec, build_char_tokenizer, save_untrained_model

# The repository root, put on a rank process's sys.path before it runs the test's function.
_REPO_ROOT = str(Path(__file__).resolve().parents[2])


# ---------------------------------------------------------------------------------------------
# 1. The CPU shim
# ---------------------------------------------------------------------------------------------


# Registering only adds the class to verl's registry (cpu_backend.platform does it at import); nothing
# uses it until VERL_PLATFORM=cpu or install_cpu_platform() selects it. Importing it here, before verl
# resolves its platform, lets a process that imports this module first (the forkserver of
# run_ranks) resolve "cpu".


def install_cpu_platform() -> PlatformBase:
    """Make verl in this process run on CPU; returns the platform it replaced. Idempotent; called
    by :func:`build_actor_worker`, :func:`single_process_group` and every rank of :func:`run_ranks`.

    Replaces verl's platform singleton (resolved on first use; verl falls back to "nvidia" when it
    detects nothing), and only then imports ``verl.workers.engine`` (``fsdp/transformer_impl.py``
    reads the platform at import time) to register verl's ``FSDPEngineWithLMHead`` for device
    ``cpu``, backend ``fsdp2``. ``VERL_PLATFORM`` is deliberately left alone: it would leak into
    Ray workers of later tests, which do not know the ``cpu`` platform.

    If another test imported ``verl.workers.engine`` earlier in the same process, that module's
    import-time ``device_name`` stays ``"cuda"``; verl uses it only to build the Ulysses
    sequence-parallel mesh, which CPU runs do not use (``ulysses_sequence_parallel_size=1``).
    """
    previous = get_platform()
    if previous.device_name != "cpu":
        set_platform(PlatformCPU())

    # Only fsdp2: with strategy=fsdp, verl then says "No engine registered for device='cpu' ...
    # backend='fsdp'" instead of failing inside FSDP1.
    register_cpu_engine()
    return previous


# ---------------------------------------------------------------------------------------------
# 2. Tiny model and tokenizer
# ---------------------------------------------------------------------------------------------


# The one tiny model definition (cpu_examples.tiny_model) as this harness's tests were verified with
# it: a 2-layer Qwen2 of width 32 (4 heads of 8), untied output layer, eager attention, small enough
# for many update steps per second on one CPU core; verl's synthetic padding samples are 128 tokens
# long.
TINY_MODEL = TinyModelSpec(
    architecture="qwen2",
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    head_dim=None,
    max_position_embeddings=256,
    tie_word_embeddings=False,
    attn_implementation="eager",
)

# dfpo's character-level chat tokenizer (cpu_examples.tiny_model): padding 0, <|im_start|> 1,
# <|im_end|> (eos) 2, then one token per printable character and fillers up to vocab_size.
EOS_TOKEN_ID = 2
FIRST_ORDINARY_TOKEN_ID = 3


def _build_tokenizer(vocab_size: int):
    """The character-level tokenizer filled with unused tokens up to ``vocab_size`` ids."""
    tokenizer = build_char_tokenizer()
    return build_char_tokenizer(extra_tokens=max(0, vocab_size - len(tokenizer)))


def save_tiny_model(directory: str | os.PathLike, seed: int = 0, spec: TinyModelSpec = TINY_MODEL) -> str:
    """Save the untrained fp32 model of ``spec`` with initial-weights seed ``seed`` (default: the
    harness's :data:`TINY_MODEL`) and its tokenizer to ``directory``; returns the directory as a
    string. Same seed, same weights."""
    return str(save_untrained_model(directory, replace(spec, seed=seed), _build_tokenizer(spec.vocab_size)))


def load_hf_model(model_dir: str | os.PathLike):
    """The saved tiny model as a plain transformers module (fp32, eager attention, train mode
    off): the starting point of a single-process reference."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="eager")
    model.eval()  # dropout is 0 in Qwen2; eval() only documents that nothing is stochastic.
    return model


# ---------------------------------------------------------------------------------------------
# 3. Config and worker
# ---------------------------------------------------------------------------------------------

# CPU-friendly settings on top of verl's ppo_trainer defaults; each can be overridden by the
# caller's overrides, which come after these.
CPU_OVERRIDES: tuple[str, ...] = (
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "+actor_rollout_ref.model.override_config.attn_implementation=eager",
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.actor.fsdp_config.strategy=fsdp2",
    "actor_rollout_ref.actor.fsdp_config.model_dtype=fp32",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=fp32",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.buffer_dtype=fp32",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    # torch.compile of the entropy function costs tens of seconds on CPU and changes nothing here.
    "actor_rollout_ref.actor.use_torch_compile=False",
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
    # Plain SGD by default: parameters after an update are then linear in the gradients, so a
    # reference comparison sees any error in loss scale (dp_size, micro-batch count, token
    # normalisation). AdamW's first step is about lr * sign(gradient): it hides scale errors and
    # turns gradient differences of order eps (1e-8) into parameter differences of order lr.
    # To test AdamW exactly, override "actor_rollout_ref.actor.optim.optimizer=AdamW" with a large
    # eps: "actor_rollout_ref.actor.optim.override_optimizer_config={eps:1e-3}".
    "actor_rollout_ref.actor.optim.optimizer=SGD",
    "actor_rollout_ref.actor.optim.lr=0.1",
    "actor_rollout_ref.actor.optim.weight_decay=0.0",
    "actor_rollout_ref.actor.optim.lr_scheduler_type=constant",
    "actor_rollout_ref.actor.optim.lr_warmup_steps=0",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.0",
    # No clipping in effect, so a reference loop needs no global gradient norm.
    "actor_rollout_ref.actor.optim.clip_grad=1e6",
    "actor_rollout_ref.actor.grad_clip=1e6",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    # Mandatory (``???``) in verl's config; role="actor" builds no rollout, so nothing reads it.
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
    "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
    "actor_rollout_ref.actor.clip_ratio_low=0.2",
    "actor_rollout_ref.actor.clip_ratio_high=0.2",
)


def compose_actor_config(model_dir: str | os.PathLike, config_overrides: Sequence[str] = ()):
    """verl's full ``ppo_trainer`` config (a DictConfig) composed with Hydra
    (:func:`dfpo.launch.compose.compose_trainer_config`), pointed at ``model_dir``, with
    :data:`CPU_OVERRIDES` and then ``config_overrides`` applied.

    Composition takes seconds on CPU, so results are cached per (model_dir, overrides) in this
    process; every call returns a fresh copy that the caller may modify.
    """
    overrides = (f"actor_rollout_ref.model.path={model_dir}", *CPU_OVERRIDES, *config_overrides)
    return copy.deepcopy(_compose_cached(overrides))


@functools.lru_cache(maxsize=64)
def _compose_cached(overrides: tuple[str, ...]):
    from hydra.core.global_hydra import GlobalHydra

    from dfpo.launch.compose import compose_trainer_config

    GlobalHydra.instance().clear()  # a Hydra left initialised elsewhere in the process would refuse
    return compose_trainer_config(overrides, config_name="ppo_trainer")


def build_actor_worker(config_overrides, tmp_path: str | os.PathLike, *, model_seed: int = 0):
    """A real ``ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor")`` after ``init_model()``.

    ``config_overrides`` is a list of Hydra overrides applied after :data:`CPU_OVERRIDES` (the
    config is composed here with the model path ``<tmp_path>/model``), or a config already
    composed by :func:`compose_actor_config` for that path (compose once in the test process and
    hand it to every rank: a fresh rank process would spend seconds composing). The tiny model is
    saved to ``<tmp_path>/model`` unless a checkpoint is already there, so every rank and the
    test's reference see the same weights. The process must already be a rank of a gloo group
    (:func:`single_process_group` or :func:`run_ranks`).
    """
    from omegaconf import DictConfig

    install_cpu_platform()
    from verl.workers.engine_workers import ActorRolloutRefWorker

    if not dist.is_initialized():
        raise RuntimeError(
            "build_actor_worker needs a torch.distributed gloo group: wrap the call in "
            "single_process_group() or run it through run_ranks()"
        )
    model_dir = ensure_tiny_model(Path(tmp_path) / "model", seed=model_seed)
    if isinstance(config_overrides, DictConfig):
        cfg = config_overrides
        if Path(cfg.actor_rollout_ref.model.path) != Path(model_dir):
            raise ValueError(
                f"the composed config points at {cfg.actor_rollout_ref.model.path}, but this worker's "
                f"model is {model_dir}: compose it with compose_actor_config({model_dir!r}, ...)"
            )
    else:
        cfg = compose_actor_config(model_dir, config_overrides)
    worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor")
    worker.init_model()
    return worker


def ensure_tiny_model(model_dir: str | os.PathLike, seed: int = 0) -> str:
    """Save the tiny model to ``model_dir`` unless a checkpoint is already there."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").exists():
        save_tiny_model(model_dir, seed=seed)
    return str(model_dir)


def actor_module(worker) -> torch.nn.Module:
    """The worker's FSDP-wrapped training module."""
    return worker.actor.engine.module


def actor_state_dict(worker) -> dict[str, torch.Tensor]:
    """Full (unsharded) parameters of the worker's actor as detached CPU fp32 tensors, keyed by
    the Hugging Face parameter names. Collective: every rank must call it."""
    from torch.distributed.fsdp import FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from verl.utils.fsdp_utils import fsdp_version

    module = actor_module(worker)
    if fsdp_version(module) == 1:
        config = FullStateDictConfig(offload_to_cpu=True, rank0_only=False)
        with FSDP.state_dict_type(module, StateDictType.FULL_STATE_DICT, config):
            state = module.state_dict()
    else:
        state = {
            name: (value.full_tensor() if hasattr(value, "full_tensor") else value)
            for name, value in module.state_dict().items()
        }
    return {name: value.detach().to("cpu", torch.float32).clone() for name, value in state.items()}


@dataclass(frozen=True)
class OptimizerSettings:
    """The optimizer a reference loop must replay: the class the worker built and every
    constructor argument it was built with (read back from its parameter group), plus verl's
    gradient-clipping norm."""

    optimizer_class: type
    kwargs: dict[str, Any]
    clip_grad: float

    def build(self, parameters) -> torch.optim.Optimizer:
        return self.optimizer_class(parameters, **self.kwargs)


def optimizer_settings(worker) -> OptimizerSettings:
    """The optimizer settings the worker's optimizer was actually built with (read back from the
    optimizer, not the config, so a verl default cannot slip past a reference)."""
    import inspect

    optimizer = worker.actor.engine.optimizer
    if len(optimizer.param_groups) != 1:
        raise TypeError(f"the reference replays one parameter group; the worker has {len(optimizer.param_groups)}")
    accepted = set(inspect.signature(type(optimizer)).parameters) - {"params"}
    group = optimizer.param_groups[0]
    return OptimizerSettings(
        optimizer_class=type(optimizer),
        kwargs={key: value for key, value in group.items() if key in accepted},
        clip_grad=float(worker.actor.engine.optimizer_config.clip_grad),
    )


# ---------------------------------------------------------------------------------------------
# 4. Batches
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchSpec:
    """Shape of a synthetic rollout batch: ``num_prompts`` groups of ``n`` responses.

    Every group has one prompt; its responses share a common prefix of random length (0 up to
    the shortest response) and then diverge; lengths vary within and across groups.
    """

    num_prompts: int = 4
    n: int = 4
    prompt_len: tuple[int, int] = (3, 8)  # inclusive range
    response_len: tuple[int, int] = (2, 10)  # inclusive range
    seed: int = 0
    vocab_size: int = TINY_MODEL.vocab_size
    # Synthetic padding samples appended the way the V1 trainer's upsampling does (uid
    # ``pad<hex>``, 127 prompt tokens, 1 response token, all-zero response/loss mask).
    num_padding_samples: int = 0
    # Standard deviation of Gaussian noise added to old_log_probs (0: old_log_probs are exactly
    # log pi_theta0, as the trainer's compute_log_prob writes them).
    old_log_prob_noise: float = 0.0


def _nested(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(tensors, layout=torch.jagged)


def make_batch(model_dir: str | os.PathLike, spec: BatchSpec = BatchSpec()):
    """A TensorDict laid out as the V1 trainer's TransferQueue hands it to the actor worker.

    Per sample (batch dimension B = num_prompts * n [+ padding]), jagged (``torch.jagged``) int64
    / fp32 tensors:

    * ``prompts`` (P_i), ``responses`` (T_i), ``input_ids`` = prompt + response (P_i + T_i),
      ``attention_mask`` (ones, P_i + T_i), ``position_ids`` (0..P_i+T_i-1);
    * ``response_mask`` and ``loss_mask`` (int64 ones over the response, T_i);
    * ``old_log_probs`` (T_i): log pi_theta0(response token) under the saved model at
      ``model_dir`` (plus ``spec.old_log_prob_noise``), as compute_log_prob would write them;
    * ``advantages`` and ``returns`` (T_i): GRPO outcome advantages (reward 0/1 per response,
      normalised within its group, broadcast over the response);
    * ``token_level_rewards`` (T_i): the reward on the last response token;

    and ``uid``: a NonTensorStack of strings, one per prompt, repeated over its n responses.
    Samples are in rollout order (group after group). No non-tensor meta is attached: see
    :func:`with_update_meta` and :func:`with_log_prob_meta`.
    """
    from tensordict import NonTensorStack, TensorDict

    if spec.num_prompts < 1 or spec.n < 1:
        raise ValueError(f"BatchSpec needs num_prompts >= 1 and n >= 1, got {spec}")
    if not (1 <= spec.prompt_len[0] <= spec.prompt_len[1] and 1 <= spec.response_len[0] <= spec.response_len[1]):
        raise ValueError(f"BatchSpec prompt_len and response_len must be ranges (lo, hi) with 1 <= lo <= hi: {spec}")
    generator = torch.Generator().manual_seed(spec.seed)

    def randint(low: int, high_inclusive: int) -> int:
        return int(torch.randint(low, high_inclusive + 1, (1,), generator=generator))

    first = FIRST_ORDINARY_TOKEN_ID
    prompts, responses, rewards, uids = [], [], [], []
    for _ in range(spec.num_prompts):
        prompt = torch.randint(first, spec.vocab_size, (randint(*spec.prompt_len),), generator=generator)
        lengths = [randint(*spec.response_len) for _ in range(spec.n)]
        prefix = torch.randint(first, spec.vocab_size, (randint(0, min(lengths)),), generator=generator)
        group_rewards = torch.randint(0, 2, (spec.n,), generator=generator).to(torch.float32)
        if spec.n > 1 and bool((group_rewards == group_rewards[0]).all()):
            group_rewards[int(torch.randint(0, spec.n, (1,), generator=generator))] = 1.0 - group_rewards[0]
        uid = str(uuid.UUID(int=int(torch.randint(0, 2**62, (1,), generator=generator))))
        for length, reward in zip(lengths, group_rewards.tolist(), strict=True):
            tail = torch.randint(first, spec.vocab_size, (length - len(prefix),), generator=generator)
            prompts.append(prompt.clone())
            responses.append(torch.cat([prefix, tail]))
            rewards.append(reward)
            uids.append(uid)

    advantages = _grpo_advantages(torch.tensor(rewards), uids)
    model = load_hf_model(model_dir)
    with torch.no_grad():
        old_log_probs = hf_response_log_probs_from_lists(model, prompts, responses)
    if spec.old_log_prob_noise:
        old_log_probs = [
            lp + spec.old_log_prob_noise * torch.randn(lp.shape, generator=generator) for lp in old_log_probs
        ]

    fields: dict[str, list[torch.Tensor]] = {key: [] for key in _SAMPLE_FIELDS}
    samples = zip(prompts, responses, advantages.tolist(), rewards, old_log_probs, strict=True)
    for prompt, response, advantage, reward, old in samples:
        _append_sample(fields, prompt, response, torch.ones_like(response), advantage, reward, old)

    if spec.num_padding_samples:
        from verl.trainer.ppo.padding_utils import SYNTHETIC_PADDING_SEQ_LEN

        pad_uid = f"pad{uuid.UUID(int=int(torch.randint(0, 2**62, (1,), generator=generator))).hex}"
        for _ in range(spec.num_padding_samples):
            prompt = torch.full((SYNTHETIC_PADDING_SEQ_LEN - 1,), EOS_TOKEN_ID, dtype=torch.int64)
            response = torch.full((1,), EOS_TOKEN_ID, dtype=torch.int64)
            with torch.no_grad():
                old = hf_response_log_probs_from_lists(model, [prompt], [response])[0]
            _append_sample(fields, prompt, response, torch.zeros_like(response), 0.0, 0.0, old)
            uids.append(pad_uid)

    batch = TensorDict({key: _nested(values) for key, values in fields.items()}, batch_size=[len(uids)])
    batch["uid"] = NonTensorStack(*uids)
    return batch


_SAMPLE_FIELDS = (
    "prompts",
    "responses",
    "input_ids",
    "attention_mask",
    "position_ids",
    "response_mask",
    "loss_mask",
    "old_log_probs",
    "advantages",
    "returns",
    "token_level_rewards",
)


def _append_sample(fields, prompt, response, response_mask, advantage: float, reward: float, old_log_probs) -> None:
    input_ids = torch.cat([prompt, response])
    token_level_reward = torch.zeros(len(response), dtype=torch.float32)
    token_level_reward[-1] = reward
    fields["prompts"].append(prompt)
    fields["responses"].append(response)
    fields["input_ids"].append(input_ids)
    fields["attention_mask"].append(torch.ones_like(input_ids))
    fields["position_ids"].append(torch.arange(len(input_ids), dtype=torch.int64))
    fields["response_mask"].append(response_mask.to(torch.int64))
    fields["loss_mask"].append(response_mask.to(torch.int64))
    fields["old_log_probs"].append(old_log_probs.to(torch.float32))
    fields["advantages"].append(torch.full((len(response),), advantage, dtype=torch.float32) * response_mask)
    fields["returns"].append(fields["advantages"][-1].clone())
    fields["token_level_rewards"].append(token_level_reward)


def _grpo_advantages(rewards: torch.Tensor, uids: list[str], eps: float = 1e-6) -> torch.Tensor:
    advantages = torch.zeros_like(rewards)
    for uid in dict.fromkeys(uids):
        members = torch.tensor([i for i, u in enumerate(uids) if u == uid])
        group = rewards[members]
        std = group.std() if len(group) > 1 else torch.tensor(1.0)
        advantages[members] = (group - group.mean()) / (std + eps)
    return advantages


def with_update_meta(
    batch,
    *,
    mini_batch_size: int,
    epochs: int = 1,
    shuffle: bool = False,
    seed: int = 42,
    temperature: float = 1.0,
    calculate_entropy: bool = False,
):
    """A copy of ``batch`` with the non-tensor fields ``_update_actor`` puts in ``extra_info``.

    ``mini_batch_size`` and ``global_batch_size`` are in samples (the trainer passes
    ``ppo_mini_batch_size * rollout.n``), summed over data-parallel ranks.
    """
    from verl.utils import tensordict_utils as tu

    batch = batch.copy()
    tu.assign_non_tensor(
        batch,
        calculate_entropy=calculate_entropy,
        distillation_use_topk=False,
        distillation_only=False,
        global_batch_size=mini_batch_size,
        mini_batch_size=mini_batch_size,
        epochs=epochs,
        seed=seed,
        dataloader_kwargs={"shuffle": shuffle},
        temperature=temperature,
    )
    return batch


def with_log_prob_meta(batch, *, temperature: float = 1.0, calculate_entropy: bool = True):
    """A copy of ``batch`` with the non-tensor fields ``_compute_old_log_prob`` puts in ``extra_info``."""
    from verl.utils import tensordict_utils as tu

    batch = batch.copy()
    tu.assign_non_tensor(batch, calculate_entropy=calculate_entropy, compute_loss=False, temperature=temperature)
    return batch


def update_meta_from_config(actor_rollout_ref) -> dict[str, Any]:
    """The keyword arguments of :func:`with_update_meta` that ``_update_actor`` derives from the
    ``actor_rollout_ref`` config (``cfg.actor_rollout_ref`` or ``worker.config``): mini-batch in
    samples (``ppo_mini_batch_size * rollout.n``), epochs, shuffle, loader seed, temperature and
    whether entropy is computed."""
    actor = actor_rollout_ref.actor
    return dict(
        mini_batch_size=int(actor.ppo_mini_batch_size) * int(actor_rollout_ref.rollout.n),
        epochs=int(actor.ppo_epochs),
        shuffle=bool(actor.shuffle),
        seed=int(actor.data_loader_seed),
        temperature=float(actor_rollout_ref.rollout.temperature),
        calculate_entropy=bool(actor.calculate_entropy or actor.entropy_coeff != 0.0),
    )


def dispatch_shards(batch, world_size: int) -> list:
    """The contiguous chunks verl's ``make_nd_compute_dataproto_dispatch_fn`` gives data-parallel
    ranks 0..world_size-1 (via ``verl.protocol.BatchData.chunk``, as the dispatch does)."""
    from verl.protocol import BatchData

    if len(batch) % world_size:
        raise ValueError(f"batch of {len(batch)} samples does not split evenly over {world_size} ranks")
    return list(BatchData(batch).chunk(chunks=world_size))


def balance_like_trainer(batch, dp_size: int):
    """Reorder ``batch`` the way the V1 trainer's ``_balance_batch`` does before dispatch
    (sequence-length balanced partitions, groups not kept together)."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.seqlen_balancing import calculate_workload, get_seqlen_balanced_partitions

    seqlens = batch["input_ids"].offsets().diff().to(torch.int64)
    partitions = get_seqlen_balanced_partitions(calculate_workload(seqlens), k_partitions=dp_size, equal_size=True)
    order = [index for partition in partitions for index in partition]
    return tu.index_select_tensor_dict(batch, torch.tensor(order))


# ---------------------------------------------------------------------------------------------
# 5. Log-probs from the plain HF model (for references)
# ---------------------------------------------------------------------------------------------


def hf_response_log_probs_from_lists(
    model: torch.nn.Module, prompts: Sequence[torch.Tensor], responses: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """log pi(response_t | prompt, response_<t) for each sample, computed one sequence at a time
    (no padding); returns a list of (T_i,) tensors carrying the model's autograd graph when
    grad is enabled."""
    out = []
    for prompt, response in zip(prompts, responses, strict=True):
        input_ids = torch.cat([prompt, response]).unsqueeze(0)
        logits = model(input_ids=input_ids, use_cache=False).logits[0].float()
        log_probs = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
        out.append(log_probs.gather(-1, response.unsqueeze(-1)).squeeze(-1))
    return out


def padded_response_field(batch, key: str) -> torch.Tensor:
    """A jagged per-response field of ``batch`` as a right-padded (B, T_max) tensor."""
    return batch[key].to_padded_tensor(0)


def hf_response_log_probs(model: torch.nn.Module, batch) -> torch.Tensor:
    """Response log-probs of every sample of ``batch`` under ``model``, as a right-padded
    (B, T_max) tensor aligned with :func:`padded_response_field` (padding entries are 0)."""
    prompts, responses = list(batch["prompts"].unbind()), list(batch["responses"].unbind())
    per_sample = hf_response_log_probs_from_lists(model, prompts, responses)
    return torch.nn.utils.rnn.pad_sequence(per_sample, batch_first=True, padding_value=0.0)


def response_log_probs(output, batch) -> torch.Tensor:
    """compute_log_prob's output ``log_probs`` (a jagged tensor over prompt + response, shifted
    by one) cut to the responses the way the trainer does (``response_from_nested``), as a
    right-padded (B, T_max) tensor."""
    from verl.workers.utils.padding import response_from_nested

    return response_from_nested(output["log_probs"], batch["response_mask"]).to_padded_tensor(0.0)


def actor_loss_config(cfg):
    """The actor config dataclass verl's ``ppo_loss`` passes to the policy loss
    (``FSDPActorConfig`` built from ``cfg.actor_rollout_ref.actor``)."""
    from verl.utils.config import omega_conf_to_dataclass

    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def global_mini_batches(
    num_samples: int,
    world_size: int,
    mini_batch_size: int,
    epochs: int = 1,
    shuffle: bool = False,
    seed: int = 42,
) -> list[list[int]]:
    """The samples of each optimizer step of ``update_actor``, as indices into the batch in
    dispatch order (before :func:`dispatch_shards`).

    Reproduces ``TrainingWorker.train_mini_batch`` by running verl's own ``make_iterator`` on
    each rank's contiguous shard (seed ``seed + dp_rank``, ``mini_batch_size / world_size``
    samples per rank); step k takes every rank's k-th mini-batch, ranks in order.
    """
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    if num_samples % world_size or mini_batch_size % world_size:
        raise ValueError(f"{num_samples=} and {mini_batch_size=} must both be multiples of {world_size=}")
    shard = num_samples // world_size
    per_rank: list[list[list[int]]] = []
    for rank in range(world_size):
        indices = TensorDict({"index": torch.arange(rank * shard, (rank + 1) * shard)}, batch_size=[shard])
        iterator = tu.make_iterator(
            indices,
            mini_batch_size=mini_batch_size // world_size,
            epochs=epochs,
            seed=seed + rank,
            dataloader_kwargs={"shuffle": shuffle},
        )
        per_rank.append([mini_batch["index"].tolist() for mini_batch in iterator])
    return [[i for rank_steps in per_rank for i in rank_steps[step]] for step in range(len(per_rank[0]))]


def select_samples(batch, indices: Sequence[int]):
    """The sub-batch with the given sample indices, in that order (verl's index_select)."""
    from verl.utils import tensordict_utils as tu

    return tu.index_select_tensor_dict(batch, torch.as_tensor(list(indices), dtype=torch.int64))


def whole_group_dfpo_loss(
    log_probs: torch.Tensor, sub_batch, old_log_probs: torch.Tensor | None = None
) -> torch.Tensor:
    """DFPO's loss (default transform) of ``sub_batch`` with every group whole in it: the group
    statistics from ``log_probs`` (B, T, with grad) against the batch's ``old_log_probs`` (or the
    given ones), normalised over the sub-batch's sequences. A ``loss_fn`` for :func:`reference_update`."""
    from dfpo.algorithm.group_ids import group_ids
    from dfpo.algorithm.loss import compute_dfpo_loss

    width = log_probs.shape[1]
    field = lambda key: padded_response_field(sub_batch, key)[:, :width]  # noqa: E731
    loss, _ = compute_dfpo_loss(
        field("old_log_probs") if old_log_probs is None else old_log_probs,
        log_probs,
        field("advantages"),
        field("response_mask").to(torch.bool),
        group_ids(list(sub_batch["uid"])),
        num_sequences=len(sub_batch),
    )
    return loss


def reference_update(
    model: torch.nn.Module,
    settings: OptimizerSettings,
    batch,
    steps: Sequence[Sequence[int]],
    loss_fn: Callable[[torch.Tensor, Any], torch.Tensor],
) -> list[float]:
    """A plain single-process training loop: for each entry of ``steps`` (sample indices, e.g.
    from :func:`global_mini_batches`), one AdamW step on ``loss_fn(log_probs, sub_batch)`` where
    ``log_probs`` is :func:`hf_response_log_probs` of the sub-batch (B_k, T_max) with grad;
    gradients clipped to ``settings.clip_grad`` and a non-finite step skipped, as verl's
    ``optimizer_step`` does. Updates ``model`` in place; returns the losses."""
    optimizer = settings.build(model.parameters())
    losses = []
    for indices in steps:
        sub_batch = select_samples(batch, indices)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(hf_response_log_probs(model, sub_batch), sub_batch)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=settings.clip_grad)
        if torch.isfinite(grad_norm):
            optimizer.step()
        losses.append(float(loss.detach()))
    return losses


# ---------------------------------------------------------------------------------------------
# 6. One actor round on a rank
# ---------------------------------------------------------------------------------------------


@dataclass
class ActorRound:
    """What :func:`actor_round` observed on one rank (all CPU tensors / plain values)."""

    rank: int
    # compute_log_prob on the rank's shard, cut to the responses: (B_shard, T_max), or None.
    log_probs: torch.Tensor | None
    # update_actor's metrics dict (lists per mini-batch / micro-batch, as verl returns them).
    metrics: dict[str, Any]
    # Full parameters before and after update_actor (actor_state_dict).
    state_before: dict[str, torch.Tensor]
    state_after: dict[str, torch.Tensor]
    optimizer: OptimizerSettings


def actor_round(
    rank: int,
    world_size: int,
    tmp_path: str,
    config_overrides,
    batch,
    compute_log_prob: bool = True,
) -> ActorRound:
    """On a rank of a gloo group: build the actor worker, take this rank's dispatch shard of
    ``batch`` (dispatch order; see :func:`dispatch_shards`), run compute_log_prob (optional) and
    update_actor on it with the meta ``_update_actor`` would attach for this config, and report.
    ``config_overrides`` is what :func:`build_actor_worker` accepts (overrides or a composed config).

    Usable as ``run_ranks(actor_round, 2, tmp_path, overrides, batch)`` or, in-process, inside
    :func:`single_process_group` as ``actor_round(0, 1, tmp_path, overrides, batch)``.
    """
    worker = build_actor_worker(config_overrides, tmp_path)
    shard = dispatch_shards(batch, world_size)[rank]
    log_probs = None
    if compute_log_prob:
        output = worker.compute_log_prob(with_log_prob_meta(shard))
        log_probs = response_log_probs(output, shard)
    state_before = actor_state_dict(worker)
    output = worker.update_actor(with_update_meta(shard, **update_meta_from_config(worker.config)))
    return ActorRound(
        rank=rank,
        log_probs=log_probs,
        metrics=dict(output["metrics"]) if output is not None else {},
        state_before=state_before,
        state_after=actor_state_dict(worker),
        optimizer=optimizer_settings(worker),
    )


# ---------------------------------------------------------------------------------------------
# 7. Process groups
# ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank_environment(rank: int, world_size: int, port: int) -> dict[str, str]:
    # What verl's Worker.__init__ reads (RANK, WORLD_SIZE, MASTER_*; LOCAL_RANK for device
    # selection) and what initialize_global_process_group_ray would use.
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "VERL_PLATFORM": CPU_PLATFORM_NAME,
    }


@contextmanager
def single_process_group() -> Iterator[None]:
    """This process as rank 0 of a world of 1 over gloo, for building workers in-process.

    verl's ``initialize_global_process_group_ray`` would ask for ``"cpu:gloo,cpu:gloo"``; a
    group initialised here first is reused by it. On exit the group is destroyed and the
    environment and verl's previous platform are restored, so later tests in the same process
    see verl as it was.
    """
    if dist.is_initialized():
        raise RuntimeError("a torch.distributed process group is already initialised in this process")
    previous_platform = install_cpu_platform()
    with _environment(_rank_environment(0, 1, free_port())):
        dist.init_process_group(backend="gloo", rank=0, world_size=1)
        try:
            yield
        finally:
            dist.destroy_process_group()
            set_platform(previous_platform)


@contextmanager
def _environment(variables: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _to_bytes(obj: Any) -> bytes:
    # torch.save rather than the multiprocessing pickler: torch registers shared-memory reductions
    # for tensors there, which break when the sending rank exits before the parent reads, and
    # nested (jagged) tensors do not survive them.
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _from_bytes(payload: bytes) -> Any:
    return torch.load(io.BytesIO(payload), weights_only=False)


def _rank_main(rank: int, world_size: int, port: int, fn: Callable, args_payload: bytes, queue) -> None:
    try:
        if _REPO_ROOT not in sys.path:
            sys.path.insert(0, _REPO_ROOT)
        os.environ.update(_rank_environment(rank, world_size, port))
        torch.set_num_threads(1)
        install_cpu_platform()
        dist.init_process_group(backend="gloo", rank=rank, world_size=world_size)
        try:
            result = fn(rank, world_size, *_from_bytes(args_payload))
            dist.barrier()  # no rank tears its group down while another still runs a collective
        finally:
            dist.destroy_process_group()
        queue.put((rank, True, _to_bytes(result)))
    except BaseException:  # reported to the parent, which raises it with the rank's traceback
        queue.put((rank, False, traceback.format_exc()))


class RankFailed(RuntimeError):
    """A rank of :func:`run_ranks` raised or did not answer; the message holds its traceback."""


# Imported once by the forkserver that forks every rank process: a rank then starts in well under
# a second instead of importing torch, transformers and verl (tens of seconds of CPU) itself.
# This module goes first so that the CPU platform is registered before verl resolves it.
_RANK_PRELOAD = (
    __name__,
    "verl.workers.engine_workers",
    "verl.workers.engine.fsdp.transformer_impl",
    "transformers.models.qwen2.modeling_qwen2",
)


def run_ranks(fn: Callable, world_size: int, *args, timeout_s: float = 600.0) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` gloo ranks in fresh processes and
    return the results in rank order.

    The processes come from a ``multiprocessing`` forkserver that has imported this module,
    verl's engine workers and transformers' Qwen2 once (the first call pays for that, later calls
    start in about a second); each rank process is fresh, so no verl or torch.distributed state
    leaks between calls. ``fn`` must be a module-level function (it is pickled by reference); ``args`` and the
    result travel through ``torch.save`` (CPU tensors, TensorDicts with jagged tensors, dicts).
    Before ``fn`` runs, each process has RANK / WORLD_SIZE / LOCAL_RANK=0 / MASTER_ADDR=127.0.0.1
    / MASTER_PORT (a free port) in its environment, one intra-op thread, the CPU platform
    installed and the default gloo process group initialised. The first failing rank's
    traceback is raised as :class:`RankFailed`; surviving ranks are killed.
    """
    import multiprocessing
    from multiprocessing import forkserver

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(_RANK_PRELOAD))
    # The forkserver keeps the environment it starts with: VERL_PLATFORM=cpu there (not in this
    # process) makes the preloaded verl modules resolve the CPU platform at import.
    with _environment({"VERL_PLATFORM": CPU_PLATFORM_NAME}):
        forkserver.ensure_running()
    queue = context.Queue()
    port = free_port()
    args_payload = _to_bytes(args)
    processes = [
        context.Process(target=_rank_main, args=(rank, world_size, port, fn, args_payload, queue), daemon=True)
        for rank in range(world_size)
    ]
    for process in processes:
        process.start()
    results: dict[int, Any] = {}
    failure = None
    deadline = time.monotonic() + timeout_s
    try:
        while len(results) < world_size and failure is None:
            try:
                rank, ok, payload = queue.get(timeout=1.0)
            except queue_module.Empty:
                # A rank that died without reporting (killed, crashed in the interpreter, or
                # failed before _rank_main's handler) would otherwise leave us waiting.
                dead = [
                    f"rank {rank} exited with code {process.exitcode} without a result"
                    for rank, process in enumerate(processes)
                    if process.exitcode is not None and rank not in results
                ]
                if dead:
                    failure = "; ".join(dead)
                elif time.monotonic() > deadline:
                    missing = sorted(set(range(world_size)) - set(results))
                    failure = f"no result from ranks {missing} within {timeout_s:.0f} s"
                continue
            if ok:
                results[rank] = _from_bytes(payload)
            else:
                failure = f"rank {rank} failed:\n{payload}"
    finally:
        for process in processes:
            process.join(timeout=5 if failure else 60)
            if process.is_alive():
                process.kill()
                process.join()
    if failure is not None:
        raise RankFailed(failure)
    return [results[rank] for rank in range(world_size)]
