"""The plan of a GPU run: per-GPU memory by phase, host memory per node, collective bytes and step time.

``python -m dfpo.main`` prints it before Ray starts (:func:`dfpo.launch.preflight.memory_plan_report`;
``dfpo.dry_run=true`` prints it and stops). It also runs as a file, for settings that are not a
composed config::

    python dfpo/launch/memory_plan.py --model gpt_oss_120b --nnodes 16 --gpus-per-node 8 ...

The model is read from its real class (:mod:`dfpo.launch.model_anatomy`: the units verl's FSDP2 wraps),
the collectives from the wrap (:mod:`dfpo.launch.communication_plan`). Every number is an estimate
from verl 0.9.1's and torch's code paths, not a measurement; each rule names the code it follows,
and docs/recipes.md ("Memory plan") states them. Per GPU, a phase's peak is the largest of its
sub-steps (the forward, the backward through the logits, the backward through a layer, the optimizer
step), never a sum of things that do not coincide:

* **State.** fp32 parameter shards (4 B/param / world), fp32 gradient shards (4 B) and Adam's two
  moments (8 B). With ``param_offload`` / ``optimizer_offload`` they live in pinned host memory
  between phases; verl's train mode loads parameters, gradients and optimizer states for the whole
  update, its eval mode the parameters only (verl/workers/engine/base.py ``BaseEngineCtx._context_switch``).
* **Unsharded units.** Two units' bf16 parameters at once (the one computing and the next, all-gathered
  ahead: FSDP2's implicit forward and explicit backward prefetch), the two largest units counted.
  In the backward, the unit's unsharded bf16 gradients (2 B/param) and the fp32 reduce-scatter input
  they are copied into (4 B/param; torch ``_fsdp_collectives.foreach_reduce``), for the largest unit.
* **Activations.** Per token per layer ``34 × hidden`` bytes (Korthikanti et al., flash attention:
  no quadratic term) plus, in an MoE layer, ``8 × experts_per_token × expert_intermediate`` and
  ``8 × shared_intermediate`` bytes (each routed token's gate/up output, activation and product in
  bf16). Gradient checkpointing keeps each layer's bf16 input (2 × hidden) and recomputes one layer
  (its activations and their gradients: twice the layer's bytes); without it every layer's bytes are kept.
* **Logits** ``T × vocab`` entries per micro-batch of T tokens, bf16 (the lm_head's output under
  FSDP2's bf16 parameters), as verl's ``FSDPEngine.prepare_model_outputs`` computes them
  (verl/workers/engine/fsdp/transformer_impl.py), with flash-attn's cross-entropy (no vocabulary-sized
  temporary; requirements-gpu-build.txt installs it):
  packed (``use_remove_padding``): the logits (2 B/entry); the log-prob pass's entropy adds three fp32
  chunks of ``entropy_from_logits_chunk_size`` tokens with ``entropy_from_logits_with_chunking``
  (``entropy_from_logits_with_chunking``: the float copy, the softmax, the product), else the
  softmax and one temporary (4 B/entry); the update computes no entropy (``entropy_coeff`` 0) and the
  gradient is written in place.
  Padded (``use_remove_padding=false``): verl copies the logits into a packed tensor
  (``torch.cat`` of the narrowed rows) and computes the entropy unchunked on the padded logits
  (``entropy_from_logits``: the softmax and one temporary of ``logsumexp`` alive together), so the
  log-prob pass peaks at 6 B/entry (8 with a temperature other than 1: the scaled copy) whatever
  ``ENTROPY_CHUNKING`` says; the update holds the logits and the copy (4 B/entry).
* **vLLM** (colocated) takes ``gpu_memory_utilization × GPU memory`` during the rollout and releases
  it for training; the actor's non-offloaded state stays. The weight sync resumes vLLM's weights only
  (bf16, split over the rollout's tensor parallel group; verl/workers/engine_workers.py, ``resume(tags=
  ["weights"])`` before ``update_weights``, the KV cache after), while verl gathers one parameter at a
  time in fp32 (``get_per_tensor_param``'s ``full_tensor()``) and vLLM takes it in bf16: the largest
  parameter (an MoE layer's fused expert tensor) sets the peak. 3 GB per GPU of CUDA context, NCCL buffers
  and fragmentation in every phase [ours].

Host memory per node: rank 0 alone builds the whole model in fp32 on the CPU (verl's
``get_init_weight_context_manager``: ``cpu_init_weights`` on mesh coordinate 0, the others on the
meta device; verl/utils/fsdp_utils.py), while the other ranks wait in the first broadcast of
``fsdp2_load_full_state_dict``; after loading, every rank keeps its offloaded parameter and Adam
shards in pinned host memory (``offload_fsdp2_model_to_cpu`` and ``offload_fsdp_optimizer`` copy
with ``non_blocking=True``). verl's engine workers create the process group with no timeout
(verl/workers/engine_workers.py, ``initialize_global_process_group_ray(timeout_second=None)``), so
torch's default for a ``cpu:gloo,cuda:nccl`` group applies: 30 minutes (``default_pg_timeout``).

Standard library at import; the anatomy imports transformers and torch when it builds a model.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, fields
from pathlib import Path

if __package__ in (None, ""):  # run as a file: import the package from the repository
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dfpo.launch import communication_plan as comm  # noqa: E402
from dfpo.launch.model_anatomy import (  # noqa: E402
    PUBLISHED_CONFIGS,
    ModelAnatomy,
    hf_config_for,
    load_hf_config,
    model_anatomy,
    published_model_of,
)

GB = 1e9
OVERHEAD_GB = 3.0  # [ours] CUDA context, NCCL buffers, fragmentation
CHECKPOINT_READ_GB_PER_S = 1.0  # [ours] rank 0 reading the bf16 checkpoint from shared storage
DEFAULT_TIMEOUT_S = 1800  # torch default_pg_timeout for a non-NCCL-only default group (verl passes None)
KNOWN_MODELS = PUBLISHED_CONFIGS  # the models the plan knows without a config.json
RANK0_MODEL = "rank 0's full fp32 model (node 0, while loading)"


@dataclass(frozen=True)
class Settings:
    nnodes: int
    gpus_per_node: int
    sp: int
    rollout_tp: int
    gpu_memory_gb: float
    gpu_memory_utilization: float
    max_prompt: int
    max_response: int
    dynamic_bsz: bool
    ppo_tokens: int  # token budget per GPU (dynamic) ...
    log_prob_tokens: int
    ppo_micro_batch: int  # ... or sequences per micro-batch (fixed)
    log_prob_micro_batch: int
    param_offload: bool
    optimizer_offload: bool
    gradient_checkpointing: bool
    entropy_chunking: bool
    remove_padding: bool = True
    sequences: int = 1024  # train_batch_size × rollout.n
    mini_batches: int = 4
    epochs: int = 1
    reshard_after_forward: bool = True
    prepass: bool = False  # DFPO's exact group pre-pass (loss_mode dfpo, dfpo_exact_groups)
    update_kl_probe: bool = False  # dfpo_measure_update_kl: one more no-grad forward after each update
    entropy_chunk: int = 2048
    unit_temperature: bool = True
    param_bytes: int = 2  # fsdp_config.mixed_precision.param_dtype (bf16 when unset)
    reduce_bytes: int = 4  # ... reduce_dtype (fp32 when unset)

    @property
    def world(self) -> int:
        return self.nnodes * self.gpus_per_node

    @property
    def sequence_tokens(self) -> int:
        return self.max_prompt + self.max_response

    def tokens_per_gpu(self, phase: str) -> int:
        """Tokens of one micro-batch on one GPU (the worst case: full budgets, full-length sequences)."""
        if self.dynamic_bsz:
            return self.ppo_tokens if phase in ("update", "prepass") else self.log_prob_tokens
        sequences = self.ppo_micro_batch if phase in ("update", "prepass") else self.log_prob_micro_batch
        return -(-sequences * self.sequence_tokens // self.sp)

    def step_shape(self) -> comm.StepShape:
        return comm.StepShape(
            world=self.world,
            sp=self.sp,
            sequences=self.sequences,
            mini_batches=self.mini_batches,
            epochs=self.epochs,
            dynamic_bsz=self.dynamic_bsz,
            ppo_tokens=self.ppo_tokens,
            log_prob_tokens=self.log_prob_tokens,
            ppo_micro_batch=self.ppo_micro_batch,
            log_prob_micro_batch=self.log_prob_micro_batch,
            prepass=self.prepass,
            update_kl_probe=self.update_kl_probe,
        )


_DTYPE_BYTES = {"bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp32": 4, "float32": 4}


def _dtype_bytes(mixed_precision, key: str, default: str) -> int:
    name = str((mixed_precision or {}).get(key, default))
    if name not in _DTYPE_BYTES:
        raise KeyError(f"actor.fsdp_config.mixed_precision.{key}={name!r}: the plan knows {sorted(_DTYPE_BYTES)}")
    return _DTYPE_BYTES[name]


def settings_from_config(cfg, gpu_memory_gb: float = 80.0) -> Settings:
    """The settings of a composed verl config (``python -m dfpo.main``'s), read the way verl reads them."""
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    fsdp = actor.fsdp_config
    policy_loss = actor.get("policy_loss") or {}
    train_batch = int(cfg.data.train_batch_size)
    mixed_precision = fsdp.get("mixed_precision")
    return Settings(
        nnodes=int(cfg.trainer.nnodes),
        gpus_per_node=int(cfg.trainer.n_gpus_per_node),
        sp=int(actor.ulysses_sequence_parallel_size),
        rollout_tp=int(rollout.tensor_model_parallel_size),
        gpu_memory_gb=gpu_memory_gb,
        gpu_memory_utilization=float(rollout.gpu_memory_utilization),
        max_prompt=int(cfg.data.max_prompt_length),
        max_response=int(cfg.data.max_response_length),
        dynamic_bsz=bool(actor.use_dynamic_bsz),
        ppo_tokens=int(actor.ppo_max_token_len_per_gpu or 0),
        log_prob_tokens=int(rollout.log_prob_max_token_len_per_gpu or 0),
        ppo_micro_batch=int(actor.ppo_micro_batch_size_per_gpu or 0),
        log_prob_micro_batch=int(rollout.log_prob_micro_batch_size_per_gpu or 0),
        param_offload=bool(fsdp.param_offload),
        optimizer_offload=bool(fsdp.optimizer_offload),
        gradient_checkpointing=bool(cfg.actor_rollout_ref.model.enable_gradient_checkpointing),
        entropy_chunking=bool(actor.entropy_from_logits_with_chunking),
        remove_padding=bool(cfg.actor_rollout_ref.model.use_remove_padding),
        sequences=train_batch * int(rollout.n),
        mini_batches=max(1, train_batch // int(actor.ppo_mini_batch_size)),
        epochs=int(actor.ppo_epochs),
        reshard_after_forward=bool(fsdp.get("reshard_after_forward", True)),
        prepass=policy_loss.get("loss_mode") == "dfpo" and bool(policy_loss.get("dfpo_exact_groups", False)),
        update_kl_probe=bool(policy_loss.get("dfpo_measure_update_kl", False)),
        entropy_chunk=int(fsdp.get("entropy_from_logits_chunk_size", 2048) or 2048),
        unit_temperature=float(rollout.get("temperature", 1.0)) == 1.0,
        param_bytes=_dtype_bytes(mixed_precision, "param_dtype", "bf16"),
        reduce_bytes=_dtype_bytes(mixed_precision, "reduce_dtype", "fp32"),
    )


# --- GPU memory ---------------------------------------------------------------------------------------------


def layer_activation_bytes_per_token(anatomy: ModelAnatomy, hf_config: dict) -> float:
    """Bytes one token's activations take in one decoder layer (the module docstring's rule)."""
    text = hf_config.get("text_config", hf_config)
    dense = 34 * anatomy.hidden
    if not anatomy.experts:
        return dense
    expert_intermediate = int(text.get("moe_intermediate_size") or text.get("intermediate_size"))
    shared = int(text.get("shared_expert_intermediate_size") or 0)
    return dense + 8 * anatomy.experts_per_token * expert_intermediate + 8 * shared


def logits_bytes_per_entry(s: Settings, phase: str) -> float:
    """Bytes per (token × vocabulary entry) the logits take at their peak in ``phase`` (see the module
    docstring), beside the fp32 entropy chunks :func:`entropy_chunk_bytes` adds on the packed path."""
    if s.remove_padding:
        if phase == "log_prob":
            return 2.0 if s.entropy_chunking else 4.0 + (0 if s.unit_temperature else 2)
        return 2.0
    if phase == "log_prob":
        return 6.0 + (0 if s.unit_temperature else 2)
    return 4.0


def entropy_chunk_bytes(s: Settings, tokens: int, vocab: int) -> float:
    if s.remove_padding and s.entropy_chunking:
        return 3 * min(tokens, s.entropy_chunk) * vocab * 4
    return 0.0


def memory_by_phase(anatomy: ModelAnatomy, s: Settings, hf_config: dict) -> dict[str, dict[str, dict[str, float]]]:
    """GB per GPU, ``{phase: {sub-step: {component: GB}}}``, for the rollout, the log-prob pass, the
    DFPO pre-pass (when it runs), the weight sync and the update. A phase's peak is its largest sub-step
    (:func:`plan`)."""
    world, params = s.world, anatomy.params
    shards, grads, adam = 4 * params / world / GB, 4 * params / world / GB, 8 * params / world / GB
    by_size = sorted((unit.padded_params(world) for unit in anatomy.units), reverse=True)
    largest_layer = max(unit.padded_params(world) for unit in anatomy.layers)
    lm_head = max((u.padded_params(world) for u in anatomy.units if u.kind in ("lm_head", "root")), default=0)
    two_units = s.param_bytes * sum(by_size[:2]) / GB
    resident = (0.0 if s.param_offload else shards) + (0.0 if s.optimizer_offload else adam)
    per_layer = layer_activation_bytes_per_token(anatomy, hf_config)
    layers = len(anatomy.layers)

    def logits(phase: str) -> float:
        tokens = s.tokens_per_gpu(phase)
        entries = tokens * anatomy.vocab
        return (entries * logits_bytes_per_entry(s, phase) + entropy_chunk_bytes(s, tokens, anatomy.vocab)) / GB

    def reduce_buffers(unit_params: int) -> float:  # bf16 unsharded gradients + fp32 reduce-scatter input
        return (s.param_bytes + s.reduce_bytes) * unit_params / GB

    def forward_only(phase: str, state: dict[str, float]) -> dict[str, dict[str, float]]:
        tokens = s.tokens_per_gpu(phase)
        base = {**state, "unsharded units (2, bf16)": two_units, "overhead": OVERHEAD_GB}
        return {
            "a layer's forward": {**base, "activations (one layer)": tokens * per_layer / GB},
            "logits": {**base, "hidden states": tokens * anatomy.hidden * 4 / GB, "logits": logits(phase)},
        }

    tokens = s.tokens_per_gpu("update")
    if s.gradient_checkpointing:
        kept, recompute = tokens * 2 * anatomy.hidden * layers / GB, 2 * tokens * per_layer / GB
    else:
        kept, recompute = tokens * per_layer * layers / GB, 0.0
    train_state = {
        "parameter shards (fp32)": shards,
        "gradient shards (fp32)": grads,
        "Adam states (fp32)": adam,
        "unsharded units (2, bf16)": two_units,
        "activations kept": kept,
        "overhead": OVERHEAD_GB,
    }
    phases = {
        "rollout": {
            "generation": {
                "vLLM weights + KV cache": s.gpu_memory_utilization * s.gpu_memory_gb,
                "actor state kept on GPU": resident,
                "overhead": OVERHEAD_GB,
            }
        },
        "log_prob": forward_only("log_prob", {"parameter shards (fp32)": shards, "Adam states kept on GPU": resident}),
    }
    if s.prepass:  # inside train mode: parameters, gradients (none yet) and Adam states are loaded
        phases["prepass"] = forward_only("prepass", {"parameter shards (fp32)": shards, "Adam states (fp32)": adam})
    largest_parameter = max(comm.padded_parameter(shape, world) for unit in anatomy.units for shape in unit.shapes)
    phases["weight_sync"] = {
        "gathering the largest parameter": {
            "vLLM weights (bf16, ÷ rollout TP)": 2 * params / s.rollout_tp / GB,
            "parameter shards (fp32)": shards,
            "the parameter, full (fp32) and for vLLM (bf16)": 6 * largest_parameter / GB,
            "overhead": OVERHEAD_GB,
        }
    }
    phases["update"] = {
        "forward and loss": {**train_state, "logits": logits("update")},
        "backward through the logits": {
            **train_state,
            "logits and their gradient": logits("update"),
            "unit gradients (bf16) + reduce-scatter input (fp32)": reduce_buffers(lm_head),
        },
        "backward through a layer": {
            **train_state,
            "recomputed activations and gradients": recompute,
            "unit gradients (bf16) + reduce-scatter input (fp32)": reduce_buffers(largest_layer),
        },
        "optimizer step": {
            "parameter shards (fp32)": shards,
            "gradient shards (fp32)": grads,
            "Adam states (fp32)": adam,
            "Adam temporaries (fp32)": shards,
            "overhead": OVERHEAD_GB,
        },
    }
    return phases


def plan(anatomy: ModelAnatomy, s: Settings, hf_config: dict) -> dict[str, dict[str, float]]:
    """GB per GPU of each component in each phase, at the phase's peak sub-step."""
    return {phase: steps[peak_substep(steps)] for phase, steps in memory_by_phase(anatomy, s, hf_config).items()}


def peak_substep(steps: dict[str, dict[str, float]]) -> str:
    return max(steps, key=lambda name: sum(steps[name].values()))


def peak(phases: dict[str, dict[str, float]]) -> tuple[str, float]:
    name = max(phases, key=lambda p: sum(phases[p].values()))
    return name, sum(phases[name].values())


# --- host memory --------------------------------------------------------------------------------------------


def host_memory(anatomy: ModelAnatomy, s: Settings) -> dict[str, float]:
    """GB of host memory per node and the load's time against the collective timeout."""
    params = anatomy.params
    offloaded_per_rank = ((4 if s.param_offload else 0) + (8 if s.optimizer_offload else 0)) * params / s.world
    load_s = 2 * params / (CHECKPOINT_READ_GB_PER_S * GB)
    return {
        RANK0_MODEL: 4 * params / GB,
        "other ranks while loading (meta device)": 0.0,
        "pinned offloaded shards per node after loading": s.gpus_per_node * offloaded_per_rank / GB,
        # rank 0's full model is freed when the engine's _build_fsdp_module returns (its full_state),
        # before the node's ranks offload their shards: the two do not coincide
        "node 0 peak": max(4 * params, s.gpus_per_node * offloaded_per_rank) / GB,
        "rank 0 reads the bf16 checkpoint (s)": load_s,
        "collective timeout (s)": float(DEFAULT_TIMEOUT_S),
    }


# --- the whole plan -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunPlan:
    """Everything the dry run prints for one recipe."""

    name: str
    anatomy: ModelAnatomy
    settings: Settings
    memory: dict[str, dict[str, dict[str, float]]]
    host: dict[str, float]
    micro_batches: dict[str, int]
    collectives: dict[str, dict[str, int]]
    time: comm.StepTime


def run_plan(
    name: str,
    hf_config: dict | str | Path,
    s: Settings,
    wrap_classes: tuple[str, ...] | None = None,
    lengths_per_rank: list[list[int]] | None = None,
) -> RunPlan:
    """The plan of ``hf_config`` (a config.json, as a dict or its path) under ``s``; importable without verl
    or Ray. The micro-batch counts, hence the collectives and step time, are for ``lengths_per_rank``
    (each data-parallel rank's sequence lengths of one step, e.g. measured) when given, else for
    full-length sequences (the worst case)."""
    hf_config = load_hf_config(hf_config)
    anatomy = model_anatomy(hf_config, wrap_classes)
    shape = s.step_shape()
    if lengths_per_rank is None:
        micro = comm.micro_batches_per_step(shape, s.sequence_tokens)
    else:
        micro = comm.micro_batches_from_lengths(shape, lengths_per_rank)
    collectives = comm.collective_bytes(anatomy, shape, micro, s.reshard_after_forward, s.param_bytes, s.reduce_bytes)
    time = comm.step_time(anatomy, shape, collectives, s.sequence_tokens, s.gradient_checkpointing)
    return RunPlan(
        name, anatomy, s, memory_by_phase(anatomy, s, hf_config), host_memory(anatomy, s), micro, collectives, time
    )


def plan_of_config(config, name: str, hf_config: dict, gpu_memory_gb: float = 80.0) -> RunPlan:
    """The plan of a composed verl config for the model ``hf_config`` (its wrap policy and settings read
    from the config as verl reads them)."""
    wrap = config.actor_rollout_ref.actor.fsdp_config.get("wrap_policy", {}).get("transformer_layer_cls_to_wrap")
    settings = settings_from_config(config, gpu_memory_gb)
    return run_plan(name, hf_config, settings, tuple(wrap) if wrap else None)


def _gpu_memory_lines(p: RunPlan) -> list[str]:
    """Per-GPU memory by phase, its peak, host memory per node and rank 0's load against the timeout."""
    s, a, lines = p.settings, p.anatomy, []
    phases = {phase: steps[peak_substep(steps)] for phase, steps in p.memory.items()}
    for phase, steps in p.memory.items():
        substep = peak_substep(steps)
        parts = steps[substep]
        total = sum(parts.values())
        detail = ", ".join(f"{k} {v:.1f}" for k, v in parts.items() if v > 0.05)
        lines.append(f"  {phase:<11} {total:6.1f} GB of {s.gpu_memory_gb:.0f} at '{substep}' ({detail})")
    phase, total = peak(phases)
    lines.append(f"  peak: {phase}, {total:.1f} GB ({100 * total / s.gpu_memory_gb:.0f}% of the GPU)")
    h = p.host
    read_s = h["rank 0 reads the bf16 checkpoint (s)"]
    lines.append(
        f"  host memory per node: node 0 holds rank 0's full fp32 model while loading, "
        f"{h[RANK0_MODEL]:.0f} GB (the other ranks build on the "
        f"meta device); after loading, {h['pinned offloaded shards per node after loading']:.0f} GB of pinned "
        f"offloaded shards per node; node 0 peak {h['node 0 peak']:.0f} GB "
        "(less host memory there: killed while loading)"
    )
    lines.append(
        f"  load vs timeout: rank 0 reads {2 * a.params / GB:.0f} GB of bf16 weights in "
        f"~{read_s:.0f} s at {CHECKPOINT_READ_GB_PER_S:.0f} GB/s while the other ranks wait in a broadcast "
        f"under the {DEFAULT_TIMEOUT_S / 60:.0f}-minute default collective timeout "
        f"({'at risk' if read_s > DEFAULT_TIMEOUT_S / 2 else 'within it'}: slower storage scales the read)"
    )
    return lines


def render(p: RunPlan, on_cpu: bool = False) -> str:
    """The dry run's text. ``on_cpu``: a CPU run's plan, per CPU rank: the model's FSDP2 units, rank 0's
    load, the micro-batches and every collective's bytes (what the resource meter checks on the tiny
    MoE runs); the memory by phase and the step time are GPUs' and left out."""
    a = p.anatomy
    unit = "CPU rank" if on_cpu else "GPU"

    def count(n: float, gpu_digits: int = 2) -> str:  # the tiny CPU models in millions
        return f"{n / 1e6:.3g} M" if on_cpu else f"{n / 1e9:.{gpu_digits}f} B"

    title = "plan" if on_cpu else "memory plan"
    lines = [
        f"{title} per {unit} for {p.name} ({a.architecture}: {count(a.params, 1)} parameters, "
        f"{count(a.active_params_per_token)} active per token, {len(a.units)} FSDP2 units, largest "
        f"{count(a.largest_unit().params)}; estimates, assumptions: docs/recipes.md, 'Memory plan'):"
    ]
    by_type = ", ".join(
        f"{kind} {layers} × {count(total / layers)}"
        for kind, total in a.params_by_layer_type().items()
        for layers in [sum(1 for unit in a.layers if (unit.layer_type or "layer") == kind)]
    )
    lines.append(f"  layers: {by_type}; routed experts {a.expert_params / a.params:.0%} of the parameters")
    if on_cpu:
        lines.append(
            f"  host memory: rank 0 builds the whole model in fp32 while loading, "
            f"{p.host[RANK0_MODEL] * GB / 1e6:,.2f} MB (the other ranks build on the meta device)"
        )
    else:
        lines.extend(_gpu_memory_lines(p))
    micro = ", ".join(f"{k} {v}" for k, v in p.micro_batches.items())
    lines.append(f"  micro-batches per {unit} per step (full-length sequences): {micro}")
    for phase in ("log_prob", "prepass", "update", "weight_sync", "model_init"):
        ops = p.collectives.get(phase) or {}
        if ops:
            detail = ", ".join(
                f"{op} {f'{b / 1e6:,.2f} MB' if on_cpu else f'{b / GB:,.0f} GB'}" for op, b in ops.items()
            )
            lines.append(
                f"  collectives per {unit}, {phase}{' (once per run)' if phase == 'model_init' else ''}: {detail}"
            )
    if on_cpu:
        lines.append(
            "  memory by phase and step time: planned for GPUs only (vLLM's KV cache, CUDA's overhead and GPU "
            "throughput have no counterpart here); dfpo.resource_log_dir measures a CPU run's"
        )
        return "\n".join(lines)
    t = p.time
    lines.append(
        f"  step time: compute {t.total_compute_s:,.0f} s (at {comm.MFU:.0%} MFU of {comm.GPU_BF16_FLOPS / 1e12:.0f} "
        f"TFLOP/s) vs communication {t.total_communication_s:,.0f} s (at {comm.INTER_NODE_GB_PER_S:.0f} GB/s per GPU "
        f"across nodes); overlapped per phase {t.total_overlapped_s:,.0f} s: {t.dominant} dominates"
    )
    return "\n".join(lines)


def _bool(text: str) -> bool:
    return text.lower() in ("1", "true", "yes", "on")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python dfpo/launch/memory_plan.py", description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--model", required=True, help="the recipe's MODEL_NAME (a published config) ...")
    p.add_argument("--model-path", help="... or a checkpoint whose config.json is read")
    p.add_argument("--gpu-memory-gb", type=float, default=80.0)
    for name in ("nnodes", "gpus-per-node", "sp", "rollout-tp", "max-prompt", "max-response"):
        p.add_argument(f"--{name}", type=int, required=True)
    p.add_argument("--gpu-memory-utilization", type=float, required=True)
    p.add_argument("--dynamic-bsz", type=_bool, required=True)
    for name in ("ppo-tokens", "log-prob-tokens", "ppo-micro-batch", "log-prob-micro-batch"):
        p.add_argument(f"--{name}", type=int, default=0)
    for name in ("param-offload", "optimizer-offload", "gradient-checkpointing", "entropy-chunking"):
        p.add_argument(f"--{name}", type=_bool, required=True)
    defaults = {f.name: f.default for f in fields(Settings)}
    for name in ("remove-padding", "reshard-after-forward", "prepass", "update-kl-probe", "unit-temperature"):
        p.add_argument(f"--{name}", type=_bool, default=defaults[name.replace("-", "_")])
    for name in ("sequences", "mini-batches", "epochs", "entropy-chunk", "param-bytes", "reduce-bytes"):
        p.add_argument(f"--{name}", type=int, default=defaults[name.replace("-", "_")])
    args = p.parse_args(argv)
    settings = Settings(**{f.name: getattr(args, f.name) for f in fields(Settings)})
    try:
        hf_config = hf_config_for(args.model, args.model_path)
        print(render(run_plan(args.model, hf_config, settings)), file=sys.stderr)
    except KeyError as error:
        print(f"memory plan: {error.args[0]}", file=sys.stderr)
        return 2
    return 0


def known_model_of(hf_config: dict) -> str | None:
    """The name in :data:`KNOWN_MODELS` whose published config has the shape of ``hf_config``, or None."""
    return published_model_of(hf_config)


if __name__ == "__main__":
    sys.exit(main())
