"""Collective bytes per rank per training step, by phase and op, and the step time they imply.

FSDP2 without expert parallelism moves every parameter of a unit (a decoder layer with all its
experts) for every micro-batch, whatever the token routes to; for a model with few active parameters
that traffic, not the arithmetic, can set the step time. The plan follows what verl 0.9.1 and torch's
FSDP2 do (each rule names the code it reads):

* ``log_prob`` and the DFPO ``prepass`` are no-grad forwards: per micro-batch each unit is all-gathered
  once in the parameter dtype (``MixedPrecisionPolicy.param_dtype``, bf16; torch
  ``_fsdp_collectives.foreach_all_gather``).
* ``update`` (verl's ``update_actor``): per micro-batch a forward all-gather of every unit, a backward
  all-gather again of every unit (``reshard_after_forward=True``, which verl passes explicitly, so
  torch 2.11 reshards the root too: ``FSDPState._lazy_init``), and a reduce-scatter of every unit's
  gradient in ``reduce_dtype`` (fp32; torch ``foreach_reduce``). verl syncs gradients on every
  micro-batch (``use_no_sync_for_gradient_accumulation=false``, transformer_impl ``forward_backward_batch``).
* ``dfpo_measure_update_kl`` (the weight-sync check's probe) adds, inside ``update``, one no-grad forward
  of the rank's rows after the step's update, micro-batched as the log-prob pass.
* ``weight_sync``: verl's ``get_per_tensor_param`` calls ``full_tensor()`` on each fp32 parameter shard
  (an all-gather of the whole parameter in fp32) before the rollout receives it in bf16.
* ``model_init``: ``fsdp2_load_full_state_dict`` broadcasts every full fp32 tensor from rank 0
  (``set_model_state_dict(broadcast_from_rank0=True)``), then the buffers (not planned: rotary
  frequencies, bytes).

Bytes follow the meter's contract: per rank per call, the size of the full (unsharded) tensor
(all-gather: its output; reduce-scatter: its input; broadcast: the tensor). The ring moves
``(world - 1) / world`` of that over each rank's link. Scalar all-reduces (gradient norm, token
counts, the pre-pass's group ids: below a kilobyte each) are not planned.

Standard library only: the anatomy (:mod:`dfpo.launch.model_anatomy`) is passed in.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

ALL_GATHER = "all_gather_into_tensor"
REDUCE_SCATTER = "reduce_scatter_tensor"
BROADCAST = "broadcast"
PHASES = ("model_init", "log_prob", "prepass", "update", "weight_sync")

# Step-time assumptions [ours]: H100 SXM dense bf16 peak, the model FLOPs utilisation a long-sequence
# FSDP run reaches, and the bandwidth each GPU gets across nodes (8 x 400 Gb/s NICs per node, effective).
GPU_BF16_FLOPS = 989e12
MFU = 0.35
INTER_NODE_GB_PER_S = 40.0


def dynamic_micro_batch_count(lengths_per_rank: Sequence[Sequence[int]], max_token_len: int) -> int:
    """The micro-batch count verl 0.9.1's ``rearrange_micro_batches`` (verl/utils/seqlen_balancing.py)
    gives every data-parallel rank for these sequence lengths (one list per rank): it starts at
    ``min(sequences, ceil(tokens / max_token_len))``, the largest over the ranks
    (``same_micro_num_in_dp``), and adds one while any rank's balanced partition
    (:func:`balanced_partitions` of the attention workloads) has a micro-batch over ``max_token_len``.
    ``max_token_len`` is ``max_token_len_per_gpu × ulysses size`` (verl/workers/engine/utils.py)."""
    ranks = [list(lengths) for lengths in lengths_per_rank if lengths]
    if not ranks:
        return 0
    longest = max(max(lengths) for lengths in ranks)
    if longest > max_token_len:
        raise ValueError(
            f"a sequence of {longest} tokens exceeds the micro-batch budget {max_token_len}: raise "
            "ppo_max_token_len_per_gpu / log_prob_max_token_len_per_gpu (verl asserts the same)"
        )
    count = max(min(len(lengths), -(-sum(lengths) // max_token_len)) for lengths in ranks)
    while True:
        if count > min(len(lengths) for lengths in ranks):
            raise ValueError(f"no partition of {count} micro-batches keeps every one within {max_token_len} tokens")
        if all(
            all(
                sum(lengths[i] for i in part) <= max_token_len
                for part in balanced_partitions(workloads(lengths), count)
            )
            for lengths in ranks
        ):
            return count
        count += 1


def workloads(lengths: Sequence[int]) -> list[int]:
    """verl's ``calculate_workload``: ``24576 × length + length²`` (a 7B model's relative FLOPs)."""
    return [24576 * length + length * length for length in lengths]


def balanced_partitions(values: Sequence[int], k: int) -> list[list[int]]:
    """verl's ``karmarkar_karp(values, k, equal_size=False)``: the largest differencing method, with its
    tie-breaks (a state with the larger spread, then the larger first set, is merged first)."""

    class Part:
        def __init__(self, items: list[tuple[int, int]]) -> None:
            self.items, self.sum = items, sum(value for _, value in items)

        def key(self) -> tuple:
            return (self.sum, len(self.items), self.items)

    class State:
        def __init__(self, parts: list[Part]) -> None:
            self.parts = sorted(parts, key=Part.key, reverse=True)

        def spread(self) -> int:
            return self.parts[0].sum - self.parts[-1].sum

        def __lt__(self, other: State) -> bool:
            if self.spread() != other.spread():
                return self.spread() > other.spread()
            return self.parts[0].key() > other.parts[0].key()

    heap = []
    for value, index in sorted((value, index) for index, value in enumerate(values)):
        heapq.heappush(heap, State([Part([(index, value)])] + [Part([]) for _ in range(k - 1)]))
    while len(heap) > 1:
        first, second = heapq.heappop(heap), heapq.heappop(heap)
        merged = [Part(a.items + b.items) for a, b in zip(first.parts, reversed(second.parts), strict=True)]
        heapq.heappush(heap, State(merged))
    return [[index for index, _ in part.items] for part in heap[0].parts]


def fixed_micro_batch_count(sequences_per_rank: int, micro_batch_size: int) -> int:
    """verl's fixed micro-batches: ``chunk_tensordict`` into sequences / micro_batch_size chunks."""
    if micro_batch_size <= 0:
        raise ValueError("micro_batch_size_per_gpu must be positive when use_dynamic_bsz=false")
    return -(-sequences_per_rank // micro_batch_size)


@dataclass(frozen=True)
class StepShape:
    """How one training step's sequences reach each data-parallel rank."""

    world: int  # FSDP ranks (all GPUs; fsdp_size -1)
    sp: int  # Ulysses group size (dp = world / sp)
    sequences: int  # train_batch_size × rollout.n
    mini_batches: int  # train_batch_size // ppo_mini_batch_size
    epochs: int
    dynamic_bsz: bool
    ppo_tokens: int
    log_prob_tokens: int
    ppo_micro_batch: int
    log_prob_micro_batch: int
    prepass: bool  # DFPO's exact group pre-pass runs (loss_mode dfpo, dfpo_exact_groups)
    # dfpo_measure_update_kl: after each step's update, one more no-grad forward of the rank's rows,
    # micro-batched as the log-prob pass, inside update_actor (dfpo/verl/workers.py: train_mini_batch)
    update_kl_probe: bool = False

    @property
    def dp(self) -> int:
        return self.world // self.sp


def micro_batches_from_lengths(shape: StepShape, lengths_per_rank: Sequence[Sequence[int]]) -> dict[str, int]:
    """Micro-batches (forwards) per rank per step in each phase for the step's sequence lengths (prompt
    + response tokens), one list per data-parallel rank in verl's order (a measured step, or a guess).
    log_prob: the rank's sequences; update: each mini-batch, consecutive slices of the rank's sequences
    (the actor does not shuffle: ``actor.shuffle=false``), × epochs; prepass: every mini-batch but the
    first (at θ_old the pre-pass takes s_j = 1 and forwards nothing: dfpo/verl/group_prepass.py),
    micro-batched as the log-prob pass (it forwards the mini-batch through verl's no-grad
    ``infer_batch``, whose micro-batches are the log-prob pass's: dfpo/verl/group_prepass_wiring.py;
    measured in the tiny GPT-OSS run, 8 forwards of 64 rows at the log-prob pass's 8, not the
    update's 16 at 4)."""

    def count(groups: list[list[int]], budget: int, micro: int) -> int:
        if shape.dynamic_bsz:
            return dynamic_micro_batch_count(groups, budget * shape.sp)
        return max(fixed_micro_batch_count(len(group), micro) for group in groups)

    ranks = [list(lengths) for lengths in lengths_per_rank]
    size = -(-max(len(lengths) for lengths in ranks) // shape.mini_batches)
    minis = [[lengths[i * size : (i + 1) * size] for lengths in ranks] for i in range(shape.mini_batches)]
    each = [count(mini, shape.ppo_tokens, shape.ppo_micro_batch) for mini in minis]
    update = sum(each) * shape.epochs
    inferred = [count(mini, shape.log_prob_tokens, shape.log_prob_micro_batch) for mini in minis]
    log_prob = count(ranks, shape.log_prob_tokens, shape.log_prob_micro_batch)
    return {
        "log_prob": log_prob,
        "prepass": sum(inferred) * shape.epochs - inferred[0] if shape.prepass else 0,
        "update": update,
        "update_kl_probe": log_prob if shape.update_kl_probe else 0,  # no-grad forwards inside update
    }


def micro_batches_per_step(shape: StepShape, sequence_tokens: int) -> dict[str, int]:
    """:func:`micro_batches_from_lengths` when every sequence has ``sequence_tokens`` tokens."""
    per_rank = -(-shape.sequences // shape.dp)
    return micro_batches_from_lengths(shape, [[sequence_tokens] * per_rank])


def collective_bytes(
    anatomy,
    shape: StepShape,
    micro_batches: dict[str, int],
    reshard_after_forward: bool = True,
    param_bytes: int = 2,
    reduce_bytes: int = 4,
) -> dict[str, dict[str, int]]:
    """Bytes per rank per step, ``{phase: {op: bytes}}``, for ``micro_batches`` forwards per phase
    (:func:`micro_batches_per_step`, or counts a meter measured) on the FSDP2 wrap of ``anatomy``
    (:class:`dfpo.launch.model_anatomy.ModelAnatomy`). Every unit, the root included (verl sets
    ``reshard_after_forward`` explicitly), is all-gathered once per forward and, resharded after
    forward, once more per backward. ``model_init`` is once per run, not per step."""
    world = shape.world
    unit_elements = sum(unit.padded_params(world) for unit in anatomy.units)
    parameter_elements = sum(padded_parameter(s, world) for unit in anatomy.units for s in unit.shapes)
    gathers_per_training_forward = 2 if reshard_after_forward else 1
    plan = {
        "model_init": {BROADCAST: anatomy.params * 4},
        "log_prob": {ALL_GATHER: unit_elements * param_bytes * micro_batches["log_prob"]},
        "prepass": {ALL_GATHER: unit_elements * param_bytes * micro_batches["prepass"]}
        if micro_batches["prepass"]
        else {},
        "update": {
            ALL_GATHER: unit_elements
            * param_bytes
            * (gathers_per_training_forward * micro_batches["update"] + micro_batches.get("update_kl_probe", 0)),
            REDUCE_SCATTER: unit_elements * reduce_bytes * micro_batches["update"],
        },
        "weight_sync": {ALL_GATHER: parameter_elements * 4},
    }
    if not micro_batches["prepass"]:
        plan["prepass"] = {}
    return plan


def padded_parameter(shape: tuple[int, ...], world: int) -> int:
    """Elements a DTensor's ``full_tensor()`` of a dim-0 shard all-gathers: ``ceil(dim0 / world) × world``
    rows (torch pads uneven shards for the all-gather)."""
    if not shape:
        return world
    rest = 1
    for size in shape[1:]:
        rest *= size
    return -(-shape[0] // world) * world * rest


@dataclass(frozen=True)
class StepTime:
    """Seconds per step per phase: compute at ``MFU`` of ``GPU_BF16_FLOPS`` and collective time at
    ``INTER_NODE_GB_PER_S``; with FSDP2's overlap (the next unit's all-gather and the last unit's
    reduce-scatter run on their own streams beside the compute) a phase takes the larger of the two,
    without overlap their sum."""

    compute_s: dict[str, float]
    communication_s: dict[str, float]

    def overlapped_s(self, phase: str) -> float:
        return max(self.compute_s.get(phase, 0.0), self.communication_s.get(phase, 0.0))

    @property
    def total_overlapped_s(self) -> float:
        return sum(self.overlapped_s(p) for p in ("log_prob", "prepass", "update", "weight_sync"))

    @property
    def total_compute_s(self) -> float:
        return sum(self.compute_s.values())

    @property
    def total_communication_s(self) -> float:
        return sum(v for k, v in self.communication_s.items() if k != "model_init")

    @property
    def dominant(self) -> str:
        return "communication" if self.total_communication_s > self.total_compute_s else "compute"


def forward_flops_per_token(anatomy, sequence_tokens: int) -> float:
    """Forward FLOPs of one token: 2 × active parameters, plus the attention scores and values of its
    full/sliding-attention layers, 4 × heads × head_dim × the mean causal context (sequence/2, or the
    sliding window); the Gated DeltaNet layers are linear in the sequence (counted in their parameters)."""
    attention = 0.0
    for layer_type in anatomy.layer_types:
        if layer_type == "full_attention":
            context = sequence_tokens / 2
        elif layer_type == "sliding_attention":
            context = min(anatomy.sliding_window or sequence_tokens, sequence_tokens / 2)
        else:
            continue
        attention += 4 * anatomy.attention_heads * anatomy.head_dim * context
    return 2 * anatomy.active_params_per_token + attention


def step_time(
    anatomy,
    shape: StepShape,
    collectives: dict[str, dict[str, int]],
    sequence_tokens: int,
    gradient_checkpointing: bool = True,
    gpu_flops: float = GPU_BF16_FLOPS,
    mfu: float = MFU,
    bandwidth_gb_per_s: float = INTER_NODE_GB_PER_S,
) -> StepTime:
    """Compute vs communication seconds per step per phase: training costs 3 forwards per token
    (forward, backward twice its cost) plus 1 more with gradient checkpointing's recompute; the
    log-prob pass and each pre-pass forward cost 1."""
    tokens_per_rank = -(-shape.sequences // shape.dp) * sequence_tokens / shape.sp
    per_token = forward_flops_per_token(anatomy, sequence_tokens)
    rate = gpu_flops * mfu
    training_forwards = 4 if gradient_checkpointing else 3
    prepass_share = (shape.mini_batches * shape.epochs - 1) / shape.mini_batches if shape.prepass else 0.0
    compute = {
        "log_prob": per_token * tokens_per_rank / rate,
        "prepass": per_token * tokens_per_rank * prepass_share / rate,
        "update": training_forwards * per_token * tokens_per_rank * shape.epochs / rate,
    }
    wire = (shape.world - 1) / shape.world
    communication = {phase: sum(ops.values()) * wire / (bandwidth_gb_per_s * 1e9) for phase, ops in collectives.items()}
    return StepTime(compute, communication)
