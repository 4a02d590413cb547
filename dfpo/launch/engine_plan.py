"""Engines for the MoE recipes: FSDP2's planned step cost against verl 0.9.1's expert-parallel engines.

    python -m dfpo.launch.engine_plan                      # both MoE recipes, full-length sequences
    python -m dfpo.launch.engine_plan --mean-tokens 12000  # a measured mean sequence length instead

Pure arithmetic on the standard library and the FSDP2 plan's micro-batch count
(dfpo.launch.communication_plan; no verl, no torch). Every assumption is a named constant below,
with its source; :func:`engine_report_for_config` gives a composed run config's comparison for the
dry run's printout (``None`` for a model that is not a MoE recipe's).

What verl 0.9.1 ships (``verl/workers/engine/*/transformer_impl.py``, ``EngineRegistry.register``;
chosen by ``model_engine=<name>`` in ``verl/trainer/config/model_engine/``, which sets the actor's
``strategy``):

* ``model_engine=dp`` (default): ``strategy=fsdp`` / ``fsdp2`` (the recipes' FSDP2, no expert
  parallelism), or ``fsdp_turbo`` (``engine/fsdp/fsdp_turbo_impl.py``, ``turbo_config.distributed.
  expert_parallel_size``).
* ``model_engine=megatron``: megatron-core with ``expert_model_parallel_size`` (and TP, PP, CP);
  ``engine/mindspeed`` is the same on Ascend NPUs.
* ``model_engine=veomni``: VeOmni with ``expert_parallel_size`` (FSDP2 over the rest).
* ``model_engine=torchtitan``: torchtitan with ``expert_parallel_size``.
* ``strategy=automodel`` (``engine/automodel``, ``ep_size``; CUDA only).

Two families of expert parallelism (EP) are planned: **Megatron** (experts split over ``ep`` ranks,
every rank keeps its dense and expert weights in bf16 between micro-batches, gradients reduced once
per optimizer step by the distributed optimizer) and **EP + FSDP** (VeOmni, torchtitan, fsdp_turbo:
experts split over ``ep`` ranks, then FSDP-sharded over the ``world / ep`` ranks that hold the same
experts, so each micro-batch all-gathers the rank's dense and expert shards as FSDP2 does).

Per MoE layer and micro-batch of ``T`` tokens, EP moves each token's hidden state to its ``top_k``
experts and back: ``T × top_k × hidden × 2 B`` per all-to-all (bf16; the contract's bytes: the
input of ``all_to_all_single``), :data:`ALL_TO_ALLS_PER_TRAINING_FORWARD` times in a training
micro-batch and :data:`ALL_TO_ALLS_PER_NO_GRAD_FORWARD` in a no-grad one. FSDP2 moves every
parameter of the layer instead (all experts), whatever the tokens: ``2 B`` all-gathered in the
forward, ``2 B`` again in the backward, ``4 B`` reduce-scattered (:data:`FSDP2_BYTES_PER_PARAM_TRAINING`).
Their break-even is ``T* = 8 × layer parameters / (12 × top_k × hidden)`` tokens per micro-batch.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from dfpo.launch import communication_plan as comm

GB = 1e9
BF16, FP32 = 2, 4

# --- hardware and efficiency [ours]: the FSDP2 communication plan's, so both plans price a step alike --------
GPU_BF16_FLOPS = comm.GPU_BF16_FLOPS  # H100 SXM dense bf16 peak (NVIDIA's datasheet)
MFU = comm.MFU  # model FLOPs utilisation a long-sequence run reaches [ours], the same for every engine
INTER_NODE_GB_PER_S = comm.INTER_NODE_GB_PER_S  # per GPU across nodes [ours]
NVLINK_GB_PER_S = 300.0  # per GPU within a node: NVLink 4 is 450 GB/s per direction, 2/3 effective in an all-to-all
GPU_MEMORY_GB = 80.0
MEMORY_HEADROOM = 0.9  # the memory plan's rule: a recipe stays within 90% of the GPU

# --- what each engine does per micro-batch (the sources named) ------------------------------------------------
# FSDP2 (torch _fsdp_collectives; verl 0.9.1 sets reshard_after_forward, param_dtype bf16, reduce_dtype fp32,
# use_no_sync_for_gradient_accumulation false): per training micro-batch a bf16 all-gather of every parameter in
# the forward and again in the backward, and an fp32 reduce-scatter of every gradient; per no-grad forward one
# bf16 all-gather. The weight sync all-gathers every parameter in fp32 (full_tensor() of each shard).
FSDP2_BYTES_PER_PARAM_TRAINING = BF16 + BF16 + FP32
FSDP2_BYTES_PER_PARAM_NO_GRAD = BF16
FSDP2_WEIGHT_SYNC_BYTES_PER_PARAM = FP32
# EP: dispatch and combine in the forward, their two gradients in the backward, and dispatch and combine again
# in gradient checkpointing's recompute (the recipes set enable_gradient_checkpointing); a no-grad forward: 2
ALL_TO_ALLS_PER_TRAINING_FORWARD = 6
ALL_TO_ALLS_PER_NO_GRAD_FORWARD = 2
# Megatron's distributed optimizer: fp32 gradients reduce-scattered and bf16 parameters all-gathered once per
# optimizer step; the weight sync gathers every parameter once in bf16 (the experts over the EP ranks)
MEGATRON_BYTES_PER_PARAM_PER_OPTIMIZER_STEP = FP32 + BF16
EP_WEIGHT_SYNC_BYTES_PER_PARAM = BF16
# compute: a training token costs a forward, a backward of twice its cost, and checkpointing's recompute
TRAINING_FORWARDS = 4
# static memory per GPU (no activations, no offload): Megatron keeps bf16 weights and fp32 gradients of what a
# rank holds (its dense copy and its experts) and shards fp32 master weights and Adam's two moments over every
# rank (distributed optimizer); FSDP2 and EP + FSDP shard all 16 B of a parameter over the ranks holding it and
# unshard two layers' weights in bf16 (the one computing and the one prefetched; EP: the rank's experts only)
MEGATRON_BYTES_PER_LOCAL_PARAM = BF16 + FP32
OPTIMIZER_BYTES_PER_PARAM = 3 * FP32
SHARDED_BYTES_PER_PARAM = FP32 + FP32 + 2 * FP32
UNSHARDED_LAYERS = 2


@dataclass(frozen=True)
class MoEModel:
    """The shape of a MoE model that the engines' traffic and compute depend on."""

    name: str
    layers: int
    hidden: int
    experts: int
    top_k: int
    total_params: int
    routed_expert_params: int  # all layers' routed experts (EP splits these; the rest is dense)
    active_params: float  # parameters one token's forward multiplies by
    attention_heads: int
    head_dim: int
    full_attention_layers: int
    sliding_attention_layers: int
    sliding_window: int
    source: str

    @property
    def dense_params(self) -> int:
        return self.total_params - self.routed_expert_params

    @property
    def layer_params(self) -> float:
        return self.total_params / self.layers

    def forward_flops_per_token(self, sequence_tokens: float) -> float:
        """2 × active parameters, plus the attention scores and values of the (sliding-)attention
        layers over the mean causal context (linear-attention layers: in their parameters)."""
        context = sequence_tokens / 2
        full = self.full_attention_layers * context
        sliding = self.sliding_attention_layers * min(self.sliding_window, context)
        return 2 * self.active_params + 4 * self.attention_heads * self.head_dim * (full + sliding)


# Parameter counts: the published config.json (transformers 5.9's Qwen3NextConfig() / GptOssConfig() defaults
# are those configs) built on the meta device and counted; routed experts = parameters under ``mlp.experts``.
# Active parameters: counted as the FSDP2 plan counts them (dfpo.launch.model_anatomy's active_params_per_token:
# every parameter but the routed experts', plus top_k of them; embeddings and head included), so that both
# plans give the same compute (the model cards round them: "3B activated", "5.1B active").
MODELS: dict[str, MoEModel] = {
    "qwen3_next_80b_a3b_thinking": MoEModel(
        name="Qwen3-Next-80B-A3B-Thinking",
        layers=48,
        hidden=2048,
        experts=512,
        top_k=10,
        total_params=79_674_391_296,
        routed_expert_params=77_309_411_328,  # 48 x 512 x 3 x 2048 x 512
        active_params=3_563_764_480,
        attention_heads=16,
        head_dim=256,
        full_attention_layers=12,  # full_attention_interval 4; the other 36 are Gated DeltaNet
        sliding_attention_layers=0,
        sliding_window=0,
        source="Qwen/Qwen3-Next-80B-A3B-Thinking config.json",
    ),
    "gpt_oss_120b": MoEModel(
        name="GPT-OSS-120B",
        layers=36,
        hidden=2880,
        experts=128,
        top_k=4,
        total_params=116_829_156_672,
        routed_expert_params=114_701_598_720,  # 36 x 128 x (3 x 2880 x 2880 + biases 3 x 2880)
        active_params=5_132_849_472,
        attention_heads=64,
        head_dim=64,
        full_attention_layers=18,
        sliding_attention_layers=18,
        sliding_window=128,
        source="openai/gpt-oss-120b config.json",
    ),
}


@dataclass(frozen=True)
class RecipeRun:
    """What one training step of a recipe hands each rank (dfpo/config/base_model/<model>.yaml over
    recipe_defaults.yaml; :func:`RecipeRun.from_config` reads a composed config)."""

    model: str
    nodes: int
    gpus_per_node: int
    prompts_per_step: int  # data.train_batch_size
    group_size: int  # actor_rollout_ref.rollout.n
    mini_batch_prompts: int  # actor_rollout_ref.actor.ppo_mini_batch_size
    epochs: int
    sequence_tokens: int  # prompt + response budget: one padded sequence per micro-batch
    micro_batch_sequences: int  # ppo_micro_batch_size_per_gpu = log_prob_micro_batch_size_per_gpu
    prepass: bool  # DFPO's exact group pre-pass runs

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    @classmethod
    def from_config(cls, config) -> RecipeRun:
        """From a composed run config (attribute access: OmegaConf or any namespace)."""
        actor = config.actor_rollout_ref.actor
        policy_loss = actor.policy_loss
        return cls(
            model=str(config.dfpo.model),
            nodes=int(config.trainer.nnodes),
            gpus_per_node=int(config.trainer.n_gpus_per_node),
            prompts_per_step=int(config.data.train_batch_size),
            group_size=int(config.actor_rollout_ref.rollout.n),
            mini_batch_prompts=int(actor.ppo_mini_batch_size),
            epochs=int(actor.ppo_epochs),
            sequence_tokens=int(config.data.max_prompt_length) + int(config.data.max_response_length),
            micro_batch_sequences=int(actor.ppo_micro_batch_size_per_gpu),
            prepass=str(policy_loss.loss_mode) == "dfpo" and bool(getattr(policy_loss, "dfpo_exact_groups", False)),
        )


# The recipes as shipped (base_model/<model>.yaml, recipe_defaults.yaml, method dfpo_min_replace);
# tests/dfpo/test_engine_plan.py checks them against the composed recipe configs.
def _as_shipped(model: str, nodes: int) -> RecipeRun:
    """A MoE recipe as shipped: 8 GPUs per node, 128 prompts × 8 responses per step, mini-batches of
    32 prompts, one epoch, 2,048 + 32,768 tokens, one sequence per micro-batch, DFPO's pre-pass."""
    return RecipeRun(
        model=model,
        nodes=nodes,
        gpus_per_node=8,
        prompts_per_step=128,
        group_size=8,
        mini_batch_prompts=32,
        epochs=1,
        sequence_tokens=2048 + 32768,
        micro_batch_sequences=1,
        prepass=True,
    )


RECIPES: dict[str, RecipeRun] = {
    "qwen3_next_80b_a3b_thinking": _as_shipped("qwen3_next_80b_a3b_thinking", nodes=8),
    "gpt_oss_120b": _as_shipped("gpt_oss_120b", nodes=16),
}


def micro_batches_per_rank(run: RecipeRun) -> dict[str, int]:
    """Forwards per rank per step with fixed micro-batches (the MoE recipes' ``use_dynamic_bsz=false``),
    counted as the FSDP2 plan counts them (:func:`dfpo.launch.communication_plan.micro_batches_per_step`):
    ``log_prob`` every sequence of the rank; ``update`` each mini-batch's (× epochs); ``prepass`` every
    mini-batch but the first, through verl's ``infer_batch`` at the log-prob pass's micro-batch size,
    which the MoE recipes set to the update's (one sequence)."""
    shape = comm.StepShape(
        world=run.world,
        sp=1,
        sequences=run.prompts_per_step * run.group_size,
        mini_batches=run.prompts_per_step // run.mini_batch_prompts,
        epochs=run.epochs,
        dynamic_bsz=False,
        ppo_tokens=0,
        log_prob_tokens=0,
        ppo_micro_batch=run.micro_batch_sequences,
        log_prob_micro_batch=run.micro_batch_sequences,
        prepass=run.prepass,
    )
    micro = comm.micro_batches_per_step(shape, run.sequence_tokens)
    return {phase: micro[phase] for phase in ("log_prob", "prepass", "update")}


def optimizer_steps(run: RecipeRun) -> int:
    return run.prompts_per_step // run.mini_batch_prompts * run.epochs


@dataclass(frozen=True)
class Engine:
    """One engine layout: ``family`` is ``fsdp2``, ``megatron`` or ``ep_fsdp``; ``ep`` the expert-parallel size."""

    family: str
    ep: int = 1

    @property
    def label(self) -> str:
        names = {"fsdp2": "FSDP2 (the recipes)", "megatron": "Megatron EP", "ep_fsdp": "EP + FSDP (VeOmni, torchtitan)"}
        return names[self.family] + (f", ep={self.ep}" if self.family != "fsdp2" else "")


def all_to_all_bytes_per_layer(model: MoEModel, tokens: float) -> float:
    """One EP all-to-all (dispatch or combine) of a micro-batch of ``tokens`` tokens in one MoE layer."""
    return tokens * model.top_k * model.hidden * BF16


def break_even_tokens(model: MoEModel) -> float:
    """Tokens per training micro-batch at which one layer's EP all-to-alls move as many bytes as FSDP2's
    all-gathers and reduce-scatter of the layer."""
    per_token = ALL_TO_ALLS_PER_TRAINING_FORWARD * model.top_k * model.hidden * BF16
    return FSDP2_BYTES_PER_PARAM_TRAINING * model.layer_params / per_token


def step_bytes(model: MoEModel, run: RecipeRun, engine: Engine, tokens: float) -> dict[str, dict[str, float]]:
    """Bytes per rank per step, ``{phase: {op: bytes}}`` (the meter's contract and op names), for
    micro-batches of ``tokens`` tokens."""
    micro = micro_batches_per_rank(run)
    params = model.total_params
    if engine.family == "fsdp2":
        return {
            "log_prob": {"all_gather_into_tensor": params * FSDP2_BYTES_PER_PARAM_NO_GRAD * micro["log_prob"]},
            "prepass": {"all_gather_into_tensor": params * FSDP2_BYTES_PER_PARAM_NO_GRAD * micro["prepass"]},
            "update": {
                "all_gather_into_tensor": params * 2 * BF16 * micro["update"],
                "reduce_scatter_tensor": params * FP32 * micro["update"],
            },
            "weight_sync": {"all_gather_into_tensor": params * FSDP2_WEIGHT_SYNC_BYTES_PER_PARAM},
        }
    a2a = all_to_all_bytes_per_layer(model, tokens) * model.layers
    local = model.dense_params + model.routed_expert_params / engine.ep  # what one rank holds of the model
    plan = {
        "log_prob": {"all_to_all_single": ALL_TO_ALLS_PER_NO_GRAD_FORWARD * a2a * micro["log_prob"]},
        "prepass": {"all_to_all_single": ALL_TO_ALLS_PER_NO_GRAD_FORWARD * a2a * micro["prepass"]},
        "update": {"all_to_all_single": ALL_TO_ALLS_PER_TRAINING_FORWARD * a2a * micro["update"]},
        "weight_sync": {"all_gather_into_tensor": params * EP_WEIGHT_SYNC_BYTES_PER_PARAM},
    }
    if engine.family == "megatron":
        steps = optimizer_steps(run)
        plan["update"]["reduce_scatter_tensor"] = local * FP32 * steps
        plan["update"]["all_gather_into_tensor"] = local * BF16 * steps
    else:  # EP + FSDP: the rank's dense and expert shards gathered per micro-batch, as FSDP2 does
        for phase in ("log_prob", "prepass"):
            plan[phase]["all_gather_into_tensor"] = local * FSDP2_BYTES_PER_PARAM_NO_GRAD * micro[phase]
        plan["update"]["all_gather_into_tensor"] = local * 2 * BF16 * micro["update"]
        plan["update"]["reduce_scatter_tensor"] = local * FP32 * micro["update"]
    return plan


def _all_to_all_seconds(nbytes: float, run: RecipeRun, ep: int) -> float:
    """An all-to-all over ``ep`` ranks: the share to the rank's own node over NVLink, the rest across nodes."""
    same_node = min(ep, run.gpus_per_node)
    return nbytes * ((same_node - 1) / ep / (NVLINK_GB_PER_S * GB) + (ep - same_node) / ep / (INTER_NODE_GB_PER_S * GB))


def _ring_seconds(nbytes: float, ranks: int, across_nodes: bool) -> float:
    """A ring collective over ``ranks`` ranks: ``(ranks - 1) / ranks`` of the bytes over the slowest link."""
    if ranks <= 1:
        return 0.0
    link = INTER_NODE_GB_PER_S if across_nodes else NVLINK_GB_PER_S
    return nbytes * (ranks - 1) / ranks / (link * GB)


@dataclass(frozen=True)
class EngineCost:
    engine: Engine
    bytes_per_step: dict[str, dict[str, float]]
    compute_s: dict[str, float]
    communication_s: dict[str, float]
    step_s: float
    static_memory_gb: float

    @property
    def total_bytes(self) -> float:
        return sum(sum(ops.values()) for ops in self.bytes_per_step.values())

    @property
    def fits(self) -> bool:
        return self.static_memory_gb <= GPU_MEMORY_GB * MEMORY_HEADROOM


def engine_cost(model: MoEModel, run: RecipeRun, engine: Engine, tokens: float | None = None) -> EngineCost:
    """Bytes, seconds and static memory per GPU of one step of ``run`` on ``engine``. Step time: FSDP2
    overlaps its collectives with the compute (a phase takes the larger); EP's all-to-alls sit between
    the attention and the experts, on the critical path (a phase takes the sum)."""
    tokens = run.sequence_tokens if tokens is None else tokens
    micro = micro_batches_per_rank(run)
    plan = step_bytes(model, run, engine, tokens)
    rate = GPU_BF16_FLOPS * MFU
    per_forward = model.forward_flops_per_token(tokens) * tokens * run.micro_batch_sequences / rate
    compute = {
        "log_prob": per_forward * micro["log_prob"],
        "prepass": per_forward * micro["prepass"],
        "update": TRAINING_FORWARDS * per_forward * micro["update"],
        "weight_sync": 0.0,
    }
    communication = {}
    for phase, ops in plan.items():
        seconds = 0.0
        for op, nbytes in ops.items():
            if op == "all_to_all_single":
                seconds += _all_to_all_seconds(nbytes, run, engine.ep)
            elif engine.family == "fsdp2" or phase == "weight_sync":
                seconds += _ring_seconds(nbytes, run.world, run.nodes > 1)
            else:  # the rank's dense part over every rank, its experts over the ranks holding the same ones
                dense_share = model.dense_params / (model.dense_params + model.routed_expert_params / engine.ep)
                seconds += _ring_seconds(nbytes * dense_share, run.world, run.nodes > 1)
                expert_ranks = run.world // engine.ep  # one per EP group: on other nodes once ep fills a node
                seconds += _ring_seconds(nbytes * (1 - dense_share), expert_ranks, engine.ep >= run.gpus_per_node)
        communication[phase] = seconds
    local = model.dense_params + model.routed_expert_params / engine.ep  # FSDP2: ep 1, every parameter
    if engine.family == "fsdp2":
        step = sum(max(compute[p], communication[p]) for p in plan)
    else:
        step = sum(compute[p] + communication[p] for p in plan)
    if engine.family == "megatron":
        memory = local * MEGATRON_BYTES_PER_LOCAL_PARAM + model.total_params * OPTIMIZER_BYTES_PER_PARAM / run.world
    else:
        unsharded = UNSHARDED_LAYERS * BF16 * local / model.layers
        memory = model.total_params * SHARDED_BYTES_PER_PARAM / run.world + unsharded
    return EngineCost(engine, plan, compute, communication, step, memory / GB)


def candidate_engines(model: MoEModel, run: RecipeRun) -> list[Engine]:
    """FSDP2, then both EP families at every EP size from one node's GPUs up to all of them that
    divides the experts and the world."""
    sizes = [ep for ep in (2**i for i in range(3, 12)) if ep <= run.world and model.experts % ep == 0]
    sizes = [ep for ep in sizes if run.world % ep == 0 and ep >= run.gpus_per_node]
    return [Engine("fsdp2")] + [Engine(family, ep) for family in ("megatron", "ep_fsdp") for ep in sizes]


def comparison(recipe: str | RecipeRun, tokens: float | None = None) -> str:
    """The printed comparison of one recipe (a name of :data:`RECIPES`, or a run)."""
    run = RECIPES[recipe] if isinstance(recipe, str) else recipe
    model = MODELS[run.model]
    tokens = run.sequence_tokens if tokens is None else tokens
    micro = micro_batches_per_rank(run)
    lines = [
        f"{model.name}: {run.nodes} x {run.gpus_per_node} GPUs, {tokens:,.0f} tokens per micro-batch, per rank per "
        f"step {micro['log_prob']} log-prob, {micro['prepass']} pre-pass and {micro['update']} training micro-batches",
        f"  per layer per training micro-batch: EP all-to-alls {ALL_TO_ALLS_PER_TRAINING_FORWARD} x "
        f"{all_to_all_bytes_per_layer(model, tokens) / GB:.2f} GB, FSDP2 {FSDP2_BYTES_PER_PARAM_TRAINING} B x "
        f"{model.layer_params / 1e9:.2f} B params = {FSDP2_BYTES_PER_PARAM_TRAINING * model.layer_params / GB:.1f} GB; "
        f"break-even at {break_even_tokens(model):,.0f} tokens per micro-batch",
        f"  {'engine':<38} {'TB/rank/step':>12} {'comm s':>8} {'compute s':>9} {'step s':>8} {'static GB/GPU':>14}",
    ]
    for engine in candidate_engines(model, run):
        cost = engine_cost(model, run, engine, tokens)
        note = "" if cost.fits else f"  over {MEMORY_HEADROOM:.0%} of {GPU_MEMORY_GB:.0f} GB"
        lines.append(
            f"  {engine.label:<38} {cost.total_bytes / 1e12:>12.2f} {sum(cost.communication_s.values()):>8.0f} "
            f"{sum(cost.compute_s.values()):>9.0f} {cost.step_s:>8.0f} {cost.static_memory_gb:>14.1f}{note}"
        )
    return "\n".join(lines)


def engine_report_for_config(config) -> str | None:
    """The comparison for a composed run config whose ``dfpo.model`` is a MoE recipe's model (for the
    dry run's printout), else ``None``."""
    model = getattr(getattr(config, "dfpo", None), "model", None)
    if model not in MODELS:
        return None
    return "Engines for the MoE recipes (dfpo/launch/engine_plan.py):\n" + comparison(RecipeRun.from_config(config))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dfpo.launch.engine_plan", description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", choices=sorted(RECIPES), action="append", help="default: every MoE recipe")
    parser.add_argument(
        "--mean-tokens", type=float, help="tokens per micro-batch (default: the full prompt + response budget)"
    )
    args = parser.parse_args(argv)
    if args.mean_tokens is not None and args.mean_tokens <= 0:
        parser.error("--mean-tokens must be positive")
    print("\n\n".join(comparison(name, args.mean_tokens) for name in (args.recipe or sorted(RECIPES))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
