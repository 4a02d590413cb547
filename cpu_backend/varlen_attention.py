"""The GPU recipes' packed attention path on CPU: flash-attention's calling convention, a torch kernel.

With ``use_remove_padding=true`` verl feeds the model one ``(1, total_tokens)`` row per micro-batch
and marks where each sequence starts by its position ids (0 at every start). On GPUs the
recipes' ``flash_attention_2`` runs it as transformers'
``integrations.flash_attention.flash_attention_forward`` → ``_flash_attention_forward`` (the name
verl's ``apply_monkey_patch`` replaces by its ``_ulysses_flash_attention_forward`` whenever
padding is removed or ``ulysses_sequence_parallel_size > 1``: the Ulysses all-to-all of q/k/v
over the sequence-parallel group, DeepSpeed-Ulysses, arXiv 2309.14509) → flash-attn's varlen
kernel, causal attention within each sequence.

On CPU neither flash-attn nor its kernels exist, and ``eager``/``sdpa`` never go through that
entry point: they attend over the whole packed row under a block-diagonal mask, T² work for a
row of T tokens (measured on the tiny recipe at a 4096-token budget: old log-probs 3.6x, update
2.3x the padded path's time), and verl's Ulysses wrapper is never called, so ``SP_SIZE>1`` would
attend within each rank's slice only. :data:`CPU_VARLEN_ATTENTION` is an attention implementation
registered in transformers that is the flash-attention path itself — transformers' own
``flash_attention_forward``, looking up the (verl-patched) ``_flash_attention_forward`` at call
time — with only the kernel replaced: :func:`varlen_causal_attention` in verl's wrapper's module
(:func:`install`), the same causal attention within each sequence through ``torch``'s
``scaled_dot_product_attention`` on the sequences padded to a batch, no work across sequences.

GPT-OSS passes two more arguments down this path (``GptOssAttention.forward`` → transformers'
``flash_attention_forward`` → verl's wrapper → here): its learned attention sinks (``s_aux``, one
logit per query head) and, on its sliding-attention layers, ``sliding_window``. Both are honoured
exactly as transformers' ``eager_attention_forward`` for GPT-OSS computes them — the window keeps
the last ``sliding_window`` keys (the query's own included), the sink is one more logit per head in
the softmax's denominator with no value — in an explicit softmax per sequence (its gradient,
sinks included, is autograd's), so the tiny GPT-OSS trains packed on CPU with the GPU recipe's
attention semantics (tests/cpu/test_sink_attention.py checks it against eager).

Used by the CPU recipes (``dfpo/config/platform/cpu.yaml``) whenever padding is removed; inert on
GPUs (installed only by the local CPU backend, :mod:`cpu_backend.activate`).
"""

from __future__ import annotations

import functools

import torch

CPU_VARLEN_ATTENTION = "dfpo_cpu_varlen"


def sequence_index(position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sequence of each token, offset within it, length of each sequence) of a packed row whose
    sequences start where the position id is 0 (flash-attention's rule for packed rows)."""
    positions = position_ids.reshape(-1)
    starts = positions == 0
    if positions.numel() and not bool(starts[0]):
        raise ValueError(
            f"a packed row must start a sequence (position id 0), got position ids starting {positions[:8].tolist()}"
        )
    seq = torch.cumsum(starts.to(torch.long), dim=0) - 1
    lengths = torch.bincount(seq)
    first = torch.cumsum(lengths, dim=0) - lengths
    offset = torch.arange(positions.numel(), device=positions.device) - first[seq]
    return seq, offset, lengths


def varlen_causal_attention(
    query_states: torch.Tensor,
    key_states: torch.Tensor,
    value_states: torch.Tensor,
    attention_mask: torch.Tensor | None,
    query_length: int,
    *args,
    position_ids: torch.Tensor | None = None,
    is_causal: bool = True,
    dropout: float = 0.0,
    softmax_scale: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    s_aux: torch.Tensor | None = None,
    **kwargs,
) -> torch.Tensor:
    """Causal attention within each sequence of a packed ``(1, T, heads, head_dim)`` row, the
    contract of transformers' ``_flash_attention_forward`` for packed inputs:

        out_t = Σ_{u ∈ W(t)} exp(q_t·k_u · scale) v_u / (exp(s_h) + Σ_{u ∈ W(t)} exp(q_t·k_u · scale))

    with W(t) the keys of t's own sequence at offsets ``t - sliding_window < u ≤ t`` (all ``u ≤ t``
    without a window) and ``exp(s_h)`` the learned sink of query head h (``s_aux``; the term is
    absent without sinks: the plain softmax). Key/value heads may be fewer than query heads
    (grouped-query attention). Returns ``(1, T, heads, head_dim)`` in the query's dtype."""
    unsupported = {"dropout": dropout, "softcap": softcap}
    used = [name for name, value in unsupported.items() if value not in (None, 0, 0.0)]
    if used:
        raise NotImplementedError(
            f"{CPU_VARLEN_ATTENTION} attention does not implement {used}; use eager attention without packing"
        )
    if sliding_window is not None and int(sliding_window) < 1:
        raise ValueError(f"{CPU_VARLEN_ATTENTION} attention: sliding_window must be >= 1 key, got {sliding_window}")
    if s_aux is not None and tuple(s_aux.shape) != (query_states.shape[2],):
        raise ValueError(
            f"{CPU_VARLEN_ATTENTION} attention: s_aux (attention sinks) has shape {tuple(s_aux.shape)} but the query "
            f"has {query_states.shape[2]} heads: one sink per query head is needed (Ulysses sequence parallel splits "
            "the query heads but not the sinks; keep ulysses_sequence_parallel_size=1 for models with sinks)"
        )
    if not is_causal:
        raise NotImplementedError(f"{CPU_VARLEN_ATTENTION} attention is causal only (decoder language models)")
    if position_ids is None or query_states.shape[0] != 1 or attention_mask is not None:
        raise ValueError(
            f"{CPU_VARLEN_ATTENTION} attention runs packed rows only: batch 1 with position ids and no padding mask "
            "(actor_rollout_ref.model.use_remove_padding=true); set attn_implementation=eager for padded batches"
        )
    seq, offset, lengths = sequence_index(position_ids)
    shape = (len(lengths), int(lengths.max()))

    def to_batch(x: torch.Tensor) -> torch.Tensor:  # (1, T, h, d) -> (sequences, h, longest, d)
        padded = x.new_zeros(shape + tuple(x.shape[2:])).index_put((seq, offset), x[0])
        return padded.transpose(1, 2)

    q, k, v = to_batch(query_states), to_batch(key_states), to_batch(value_states)
    # right padding: a real query at offset t attends to offsets <= t, all real, so the causal
    # mask alone keeps every sequence to itself and the padding out
    if s_aux is None and sliding_window is None:
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=softmax_scale, enable_gqa=k.shape[1] != q.shape[1]
        )
    else:
        out = windowed_sink_attention(q, k, v, softmax_scale, sliding_window, s_aux)
    return out.transpose(1, 2)[seq, offset].unsqueeze(0).to(query_states.dtype)


def windowed_sink_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None,
    sliding_window: int | None,
    sinks: torch.Tensor | None,
) -> torch.Tensor:
    """Causal attention of a right-padded batch ``(sequences, heads, longest, head_dim)`` with an
    optional sliding window and optional per-head sink logits, written as transformers'
    ``eager_attention_forward`` for GPT-OSS computes it (the sink column joins the logits, the
    softmax runs over both, the sink's probability is dropped). Work and memory are per sequence,
    ``longest²`` per head: no attention across the packed sequences."""
    heads, length = q.shape[1], q.shape[2]
    if k.shape[1] != heads:  # grouped-query attention: each key/value head serves heads // kv_heads queries
        k, v = (x.repeat_interleave(heads // k.shape[1], dim=1) for x in (k, v))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    logits = torch.matmul(q, k.transpose(-1, -2)) * scale
    query_offset = torch.arange(length, device=q.device).unsqueeze(1)
    key_offset = torch.arange(length, device=q.device).unsqueeze(0)
    visible = key_offset <= query_offset
    if sliding_window is not None:
        visible = visible & (key_offset > query_offset - int(sliding_window))
    logits = logits.masked_fill(~visible, float("-inf"))
    if sinks is not None:
        sink_logits = sinks.to(logits.dtype).reshape(1, heads, 1, 1).expand(q.shape[0], heads, length, 1)
        logits = torch.cat([logits, sink_logits], dim=-1)
    logits = logits - logits.max(dim=-1, keepdim=True).values
    probs = torch.softmax(logits, dim=-1)[..., :length]  # the sink's share of each row is dropped
    return torch.matmul(probs.to(v.dtype), v)


SAVED_ATTENTION = None
"""What a configuration saved by a CPU run names instead of :data:`CPU_VARLEN_ATTENTION`: none, so
that a later load takes transformers' default for the model (sdpa for Qwen3, eager for GPT-OSS,
whose class refuses sdpa: naming sdpa made a tiny GPT-OSS checkpoint unloadable)."""


def saving_a_portable_attention(save_pretrained):
    """Wrap ``PretrainedConfig.save_pretrained`` so that a checkpoint written by a CPU run (verl
    saves the actor's config, ``attn_implementation`` included, next to every checkpoint) names an
    attention every transformers install has: :data:`CPU_VARLEN_ATTENTION` is registered only in
    the local backend's processes, and ``verl.model_merger`` or any later load of the checkpoint
    failed on it ("Specified attn_implementation=... is not supported")."""

    @functools.wraps(save_pretrained)
    def save_portable(self, *args, **kwargs):
        if getattr(self, "attn_implementation", None) != CPU_VARLEN_ATTENTION:
            return save_pretrained(self, *args, **kwargs)
        self.attn_implementation = SAVED_ATTENTION
        try:
            return save_pretrained(self, *args, **kwargs)
        finally:
            self.attn_implementation = CPU_VARLEN_ATTENTION

    save_portable.__dfpo_portable__ = True
    return save_portable


def install() -> None:
    """Register :data:`CPU_VARLEN_ATTENTION` in transformers, make it the kernel of verl's
    flash-attention wrapper, and keep it out of saved configurations (idempotent)."""
    from transformers import AttentionInterface, PretrainedConfig
    from transformers.integrations import flash_attention
    from verl.models.transformers import monkey_patch

    AttentionInterface.register(CPU_VARLEN_ATTENTION, flash_attention.flash_attention_forward)
    if not getattr(PretrainedConfig.save_pretrained, "__dfpo_portable__", False):
        PretrainedConfig.save_pretrained = saving_a_portable_attention(PretrainedConfig.save_pretrained)
    # the kernel verl's _ulysses_flash_attention_forward calls (a module global it imported from
    # transformers.modeling_flash_attention_utils), and the entry point before verl patches it
    monkey_patch._flash_attention_forward = varlen_causal_attention
    if not getattr(flash_attention._flash_attention_forward, "__module__", "").startswith("verl."):
        flash_attention._flash_attention_forward = varlen_causal_attention
