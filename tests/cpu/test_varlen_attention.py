"""The packed attention of the GPU path on CPU (cpu_backend/varlen_attention.py): causal attention
within each sequence of a packed row (with GPT-OSS's sliding windows and sinks), against a
per-sequence reference written out as the formula, its gradient, and the whole seam: a model
loaded with the registered implementation, patched by verl's apply_monkey_patch as verl's FSDP
engine does, gives a packed row the padded model's log-probs."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cpu_backend.varlen_attention import CPU_VARLEN_ATTENTION, install, sequence_index, varlen_causal_attention


def reference(q, k, v, lengths, scale, window=None, sinks=None):
    """out_t = Σ_{u ∈ W(t)} exp(q_t·k_u·scale) v_u / (exp(s_h) + Σ_{u ∈ W(t)} exp(q_t·k_u·scale)), W(t) the
    keys u ≤ t of t's sequence (the last ``window`` of them with a window), the sink term only with
    ``sinks``; one sequence and head at a time."""
    heads, kv_heads = q.shape[2], k.shape[2]
    out, start = torch.zeros_like(q), 0
    for length in lengths:
        for h in range(heads):
            hk = h // (heads // kv_heads)
            for t in range(start, start + length):
                keys = range(start if window is None else max(start, t - window + 1), t + 1)
                scores = torch.stack([q[0, t, h] @ k[0, u, hk] * scale for u in keys])
                norm = torch.exp(scores).sum() + (0 if sinks is None else torch.exp(sinks[h]))
                out[0, t, h] = sum(torch.exp(x) / norm * v[0, u, hk] for x, u in zip(scores, keys, strict=True))
        start += length
    return out


def packed(lengths, heads=4, kv_heads=2, dim=8, dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    total = sum(lengths)
    q, k, v = (torch.randn(1, total, n, dim, generator=generator, dtype=dtype) for n in (heads, kv_heads, kv_heads))
    position_ids = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    return q, k, v, position_ids


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 6), min_size=1, max_size=4), gqa=st.booleans())
def test_each_sequence_attends_causally_to_itself_only(lengths, gqa):
    q, k, v, position_ids = packed(lengths, kv_heads=2 if gqa else 4)
    scale = 1 / math.sqrt(q.shape[-1])
    out = varlen_causal_attention(q, k, v, None, q.shape[1], position_ids=position_ids, softmax_scale=scale)
    torch.testing.assert_close(out, reference(q, k, v, lengths, scale), rtol=1e-10, atol=1e-10)


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 7), min_size=1, max_size=3),
    window=st.one_of(st.none(), st.integers(1, 5)),
    with_sinks=st.booleans(),
)
def test_sliding_windows_and_sinks_are_gpt_oss_attention(lengths, window, with_sinks):
    """GPT-OSS's two extras on this path: ``sliding_window`` (its sliding layers) and ``s_aux``
    (one learned sink logit per query head in the softmax's denominator)."""
    q, k, v, position_ids = packed(lengths)
    sinks = torch.randn(q.shape[2], dtype=q.dtype, generator=torch.Generator().manual_seed(3)) if with_sinks else None
    out = varlen_causal_attention(
        q, k, v, None, q.shape[1], position_ids=position_ids, softmax_scale=0.4, sliding_window=window, s_aux=sinks
    )
    expected = reference(q, k, v, lengths, 0.4, window, sinks)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


def test_the_sinks_gradient_matches_finite_differences():
    q, k, v, position_ids = packed([4, 2], heads=2, kv_heads=1, dim=2)
    sinks = torch.randn(q.shape[2], dtype=q.dtype)
    inputs = tuple(t.requires_grad_(True) for t in (q, k, v, sinks))
    assert torch.autograd.gradcheck(
        lambda a, b, c, s: varlen_causal_attention(
            a, b, c, None, 6, position_ids=position_ids, softmax_scale=0.5, sliding_window=2, s_aux=s
        ),
        inputs,
    )


def test_a_sequence_does_not_see_the_one_before_it():
    """Changing the first sequence leaves the second's output unchanged (no attention across sequences)."""
    q, k, v, position_ids = packed([3, 4])
    out = varlen_causal_attention(q, k, v, None, 7, position_ids=position_ids, softmax_scale=0.5)
    k2, v2 = k.clone(), v.clone()
    k2[0, :3] += 1.0
    v2[0, :3] -= 2.0
    changed = varlen_causal_attention(q, k2, v2, None, 7, position_ids=position_ids, softmax_scale=0.5)
    torch.testing.assert_close(changed[0, 3:], out[0, 3:], rtol=0, atol=0)
    assert not torch.allclose(changed[0, :3], out[0, :3])


def test_gradient_matches_finite_differences():
    q, k, v, position_ids = packed([2, 3, 1], dim=4)
    inputs = tuple(t.requires_grad_(True) for t in (q, k, v))
    assert torch.autograd.gradcheck(
        lambda a, b, c: varlen_causal_attention(a, b, c, None, 6, position_ids=position_ids, softmax_scale=0.5), inputs
    )


def test_sequence_index():
    seq, offset, lengths = sequence_index(torch.tensor([[0, 1, 2, 0, 1, 0]]))
    assert (
        seq.tolist() == [0, 0, 0, 1, 1, 2] and offset.tolist() == [0, 1, 2, 0, 1, 0] and lengths.tolist() == [3, 2, 1]
    )


def test_what_it_does_not_run_is_refused_with_the_way_out():
    q, k, v, position_ids = packed([3, 2])
    with pytest.raises(ValueError, match="use_remove_padding=true"):
        varlen_causal_attention(q, k, v, torch.ones(1, 5), 5, position_ids=position_ids)
    with pytest.raises(ValueError, match="use_remove_padding=true"):
        varlen_causal_attention(q, k, v, None, 5, position_ids=None)
    with pytest.raises(NotImplementedError, match="softcap"):
        varlen_causal_attention(q, k, v, None, 5, position_ids=position_ids, softcap=30.0)
    with pytest.raises(ValueError, match="one sink per query head.*ulysses_sequence_parallel_size=1"):
        varlen_causal_attention(q, k, v, None, 5, position_ids=position_ids, s_aux=torch.zeros(8))
    with pytest.raises(ValueError, match="sliding_window must be >= 1"):
        varlen_causal_attention(q, k, v, None, 5, position_ids=position_ids, sliding_window=0)
    with pytest.raises(ValueError, match="must start a sequence"):
        varlen_causal_attention(q, k, v, None, 5, position_ids=position_ids + 1)


def test_a_model_with_the_registered_attention_under_verls_patch_matches_the_padded_model(tmp_path):
    """The whole GPU-path seam on CPU: transformers' flash-attention integration, verl's
    _ulysses_flash_attention_forward (installed by apply_monkey_patch for packed inputs), this kernel."""
    from transformers import AutoModelForCausalLM
    from verl.models.transformers.monkey_patch import apply_monkey_patch

    from cpu_examples.tiny_model import TinyModelSpec, build_model

    install()
    build_model(TinyModelSpec()).save_pretrained(tmp_path)
    padded_model = AutoModelForCausalLM.from_pretrained(
        tmp_path, attn_implementation="eager", dtype=torch.float32
    ).eval()
    packed_model = AutoModelForCausalLM.from_pretrained(
        tmp_path, attn_implementation=CPU_VARLEN_ATTENTION, dtype=torch.float32
    ).eval()
    apply_monkey_patch(packed_model, ulysses_sp_size=1, use_remove_padding=True)
    lengths = [5, 9, 3]
    generator = torch.Generator().manual_seed(1)
    sequences = [torch.randint(3, 100, (n,), generator=generator) for n in lengths]
    with torch.no_grad():
        row = torch.cat(sequences).unsqueeze(0)
        position_ids = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
        packed_logits = packed_model(input_ids=row, position_ids=position_ids).logits[0]
        start = 0
        for sequence in sequences:
            alone = padded_model(input_ids=sequence.unsqueeze(0)).logits[0]
            torch.testing.assert_close(packed_logits[start : start + len(sequence)], alone, rtol=1e-5, atol=1e-5)
            start += len(sequence)


@pytest.mark.parametrize(("model", "loads_with"), [("qwen3", "sdpa"), ("gpt_oss", "eager")])
def test_a_saved_configuration_names_an_attention_every_install_has(tmp_path, model, loads_with):
    """verl saves the actor's config with every checkpoint; verl.model_merger (a process without
    the local backend) must be able to build the model from it: the saved config names no
    attention, and transformers picks the model's default (GPT-OSS refuses sdpa)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from cpu_examples.tiny_model import TinyModelSpec, build_model
    from dfpo.launch.sink_attention_check import tiny_gpt_oss_config

    install()
    config = build_model(TinyModelSpec()).config if model == "qwen3" else tiny_gpt_oss_config()
    config.attn_implementation = CPU_VARLEN_ATTENTION  # as verl's override_config sets it
    config.save_pretrained(tmp_path)
    assert config.attn_implementation == CPU_VARLEN_ATTENTION  # the running model keeps its kernel
    saved = (tmp_path / "config.json").read_text()
    assert CPU_VARLEN_ATTENTION not in saved and '"attn_implementation": null' in saved
    loaded = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp_path))
    assert loaded.config._attn_implementation == loads_with
