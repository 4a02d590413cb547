"""Per-GPU memory estimate of a GPU run, phase by phase (printed by ``python -m dfpo.main`` before Ray
starts, :func:`dfpo.launch.preflight.memory_plan_report`; ``dfpo.dry_run=true`` prints it and stops).

    python dfpo/launch/memory_plan.py --model qwen3_32b --nnodes 4 --gpus-per-node 8 --sp 4 ...

Standard library only; it also runs as a file, for settings that are not a composed config. The
numbers are estimates from the model's shape and the recipe's settings, not measurements; their
assumptions (docs/recipes.md, "Memory plan"):

* FSDP shards the fp32 master parameters (4 B/param), gradients (4 B) and Adam's two moments (8 B)
  over all ``nnodes × gpus_per_node`` ranks; with ``param_offload`` / ``optimizer_offload`` they
  live on the CPU between phases and come back to the GPU for the phase that needs them (so they
  count in that phase). The unsharded bf16 weights of two layers are on the GPU at once (the
  layer computing and the one prefetched).
* Tokens per GPU per micro-batch: the token budget (dynamic batching; Ulysses splits a micro-batch
  of ``budget × sp`` tokens over ``sp`` GPUs), or ``micro_batch × (prompt + response)`` padded
  tokens with fixed micro-batches.
* Activations with gradient checkpointing: each layer's bf16 input (2 B × hidden per token) kept
  for the backward, plus one layer's recompute at 34 B × hidden per token (Korthikanti et al.,
  flash attention: no quadratic term); without checkpointing every layer's 34 B × hidden.
  The no-grad log-prob pass holds one layer's activations at a time.
* Logits: the training pass keeps bf16 logits and their gradient in place (verl's flash-attn
  cross-entropy) — 4 B per token × vocabulary entry; the log-prob pass also computes the entropy
  over the full vocabulary — 8 B per entry, or 2 B plus one fp32 chunk of 2,048 tokens with
  ``entropy_from_logits_with_chunking``.
* vLLM (colocated) takes ``gpu_memory_utilization × GPU memory`` during the rollout (its weights and
  KV cache) and releases it while the actor trains; the actor's non-offloaded state stays on the
  GPU during the rollout. 3 GB per GPU of CUDA context, NCCL buffers and fragmentation in every phase.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, fields
from pathlib import Path

GB = 1e9
OVERHEAD_GB = 3.0
CHUNK_TOKENS = 2048  # verl's entropy_from_logits_chunk_size default


@dataclass(frozen=True)
class ModelShape:
    params: float  # total parameters (all experts)
    layers: int
    hidden: int
    vocab: int

    @property
    def layer_params(self) -> float:
        return self.params / self.layers


# Public configs of the recipes' models (config.json of each Hugging Face checkpoint).
KNOWN_MODELS: dict[str, ModelShape] = {
    "qwen3_32b": ModelShape(params=32.8e9, layers=64, hidden=5120, vocab=151936),
    "qwen3_next_80b_a3b_thinking": ModelShape(params=81.3e9, layers=48, hidden=2048, vocab=151936),
    "gpt_oss_120b": ModelShape(params=116.8e9, layers=36, hidden=2880, vocab=201088),
    "qwen3_1p7b": ModelShape(params=2.03e9, layers=28, hidden=2048, vocab=151936),
    "qwen3_0p6b": ModelShape(params=0.75e9, layers=28, hidden=1024, vocab=151936),
}


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

    @property
    def world(self) -> int:
        return self.nnodes * self.gpus_per_node

    def tokens_per_gpu(self, phase: str) -> int:
        if self.dynamic_bsz:
            return self.ppo_tokens if phase == "update" else self.log_prob_tokens
        sequences = self.ppo_micro_batch if phase == "update" else self.log_prob_micro_batch
        return -(-sequences * (self.max_prompt + self.max_response) // self.sp)


def settings_from_config(cfg, gpu_memory_gb: float = 80.0) -> Settings:
    """The settings of a composed verl config (``python -m dfpo.main``'s), read the way verl reads them."""
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
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
        param_offload=bool(actor.fsdp_config.param_offload),
        optimizer_offload=bool(actor.fsdp_config.optimizer_offload),
        gradient_checkpointing=bool(cfg.actor_rollout_ref.model.enable_gradient_checkpointing),
        entropy_chunking=bool(actor.entropy_from_logits_with_chunking),
    )


def plan(model: ModelShape, s: Settings) -> dict[str, dict[str, float]]:
    """GB per GPU of each component in each phase (rollout, log-prob pass, actor update)."""
    shard = model.params / s.world
    params, grads, adam = 4 * shard / GB, 4 * shard / GB, 8 * shard / GB
    unsharded = 2 * 2 * model.layer_params / GB
    resident = (0.0 if s.param_offload else params) + (0.0 if s.optimizer_offload else adam)

    def logits(tokens: int, bytes_per_entry: float) -> float:
        return tokens * model.vocab * bytes_per_entry / GB

    lp_tokens = s.tokens_per_gpu("log_prob")
    lp_logits = (
        logits(lp_tokens, 2) + logits(min(lp_tokens, CHUNK_TOKENS), 4 * 3)
        if s.entropy_chunking
        else logits(lp_tokens, 8)
    )
    up_tokens = s.tokens_per_gpu("update")
    if s.gradient_checkpointing:
        activations = (up_tokens * model.hidden * (2 * model.layers + 34)) / GB
    else:
        activations = up_tokens * model.hidden * 34 * model.layers / GB
    return {
        "rollout (vLLM)": {
            "vLLM weights + KV cache": s.gpu_memory_utilization * s.gpu_memory_gb,
            "actor state kept on GPU": resident,
            "overhead": OVERHEAD_GB,
        },
        "log-prob pass": {
            "parameter shards (fp32)": params,
            "Adam states kept on GPU": 0.0 if s.optimizer_offload else adam,
            "unsharded layers (bf16)": unsharded,
            "activations (one layer)": lp_tokens * model.hidden * 34 / GB,
            "logits + entropy": lp_logits,
            "overhead": OVERHEAD_GB,
        },
        "actor update": {
            "parameter shards (fp32)": params,
            "gradient shards (fp32)": grads,
            "Adam states (fp32)": adam,
            "unsharded layers (bf16)": unsharded,
            "activations": activations,
            "logits + gradient": logits(up_tokens, 4),
            "overhead": OVERHEAD_GB,
        },
    }


def peak(phases: dict[str, dict[str, float]]) -> tuple[str, float]:
    name = max(phases, key=lambda p: sum(phases[p].values()))
    return name, sum(phases[name].values())


def known_model_of(hf_config: dict) -> str | None:
    """The name in KNOWN_MODELS whose shape a Hugging Face ``config.json`` (as a dict) has, or None."""
    text = hf_config.get("text_config", hf_config)
    shape = (text.get("num_hidden_layers"), text.get("hidden_size"), text.get("vocab_size"))
    for name, known in KNOWN_MODELS.items():
        if shape == (known.layers, known.hidden, known.vocab):
            return name
    return None


def model_shape(name: str, model_path: str | None) -> ModelShape:
    """From ``MODEL_PATH/config.json`` when it is there (text_config for multimodal), else the table."""
    config_file = Path(model_path or "") / "config.json"
    if model_path and config_file.is_file():
        config = json.loads(config_file.read_text())
        config = config.get("text_config", config)
        known = KNOWN_MODELS.get(name)
        if known is not None:  # parameter counts are not in config.json; the shape is
            return ModelShape(known.params, config["num_hidden_layers"], config["hidden_size"], config["vocab_size"])
    if name not in KNOWN_MODELS:
        raise KeyError(f"no memory shape for model {name!r}; known: {sorted(KNOWN_MODELS)}")
    return KNOWN_MODELS[name]


def render(name: str, phases: dict[str, dict[str, float]], gpu_memory_gb: float) -> str:
    lines = [f"memory plan per GPU for {name} (estimates; assumptions: docs/recipes.md, 'Memory plan'):"]
    for phase, parts in phases.items():
        total = sum(parts.values())
        detail = ", ".join(f"{k} {v:.1f}" for k, v in parts.items() if v > 0.05)
        lines.append(f"  {phase:<15} {total:6.1f} GB of {gpu_memory_gb:.0f}  ({detail})")
    phase, total = peak(phases)
    lines.append(f"  peak: {phase}, {total:.1f} GB ({100 * total / gpu_memory_gb:.0f}% of the GPU)")
    return "\n".join(lines)


def _bool(text: str) -> bool:
    return text.lower() in ("1", "true", "yes", "on")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python dfpo/launch/memory_plan.py", description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--model", required=True, help="the recipe's MODEL_NAME")
    p.add_argument("--model-path", help="read the shape from its config.json when present")
    p.add_argument("--gpu-memory-gb", type=float, default=80.0)
    for name in ("nnodes", "gpus-per-node", "sp", "rollout-tp", "max-prompt", "max-response"):
        p.add_argument(f"--{name}", type=int, required=True)
    p.add_argument("--gpu-memory-utilization", type=float, required=True)
    p.add_argument("--dynamic-bsz", type=_bool, required=True)
    for name in ("ppo-tokens", "log-prob-tokens", "ppo-micro-batch", "log-prob-micro-batch"):
        p.add_argument(f"--{name}", type=int, default=0)
    for name in ("param-offload", "optimizer-offload", "gradient-checkpointing", "entropy-chunking"):
        p.add_argument(f"--{name}", type=_bool, required=True)
    args = p.parse_args(argv)
    settings = Settings(**{f.name: getattr(args, f.name) for f in fields(Settings)})
    try:
        shape = model_shape(args.model, args.model_path)
    except KeyError as error:
        print(f"memory plan: {error.args[0]}", file=sys.stderr)
        return 0
    print(render(args.model, plan(shape, settings), args.gpu_memory_gb), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
