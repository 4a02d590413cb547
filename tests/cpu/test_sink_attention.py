"""GPT-OSS's sink attention on CPU (dfpo/launch/sink_attention_check.py): the CPU backend's packed
attention (cpu_backend/varlen_attention.py, what the CPU platform runs with use_remove_padding)
trains a tiny GPT-OSS exactly as eager does — logits and the gradients of every attention layer's
q/k/v/o weights and sinks, on a sliding-window and a full-attention layer, sequences longer than
the window, several sequences packed in one row against each sequence run alone. The comparison
catches an attention that drops the sinks or the window, and the two findings the GPU recipe's
choice rests on still hold: transformers' flex_attention refuses sinks on CPU, and eager on a
packed GPT-OSS row attends across its sequences. In bf16, the recipe's precision, the attention's error
from fp32 eager is bounded by eager-in-bf16's own, and the same mutants fail there."""

from __future__ import annotations

import pytest
import torch

from cpu_backend import varlen_attention
from dfpo.launch.sink_attention_check import (
    BF16_ERROR_FLOOR,
    CPU_PACKED_ATTENTION,
    LENGTHS,
    SKIPPED,
    SLIDING_WINDOW,
    compare_with_eager,
    main,
    recipe_attention,
    recipe_packs,
)

LAYERS = ("layer 0 (sliding_attention)", "layer 1 (full_attention)")


def test_the_cpu_packed_attention_trains_gpt_oss_like_eager():
    report = compare_with_eager(CPU_PACKED_ATTENTION)
    assert min(LENGTHS) > SLIDING_WINDOW and len(LENGTHS) > 1  # windows bite, rows are packed
    assert report.failures() == [], "\n".join(report.lines())
    expected = {"logits"} | {
        f"{layer} {name}" for layer in LAYERS for name in ("q_proj.weight grad", "k_proj.weight grad")
    }
    expected |= {f"{layer} {name}" for layer in LAYERS for name in ("v_proj.weight grad", "o_proj.weight grad")}
    expected |= {f"{layer} sinks grad" for layer in LAYERS}
    assert set(report.errors) == expected


def test_the_padded_layout_of_the_gpu_recipe_is_compared_too():
    """The GPT-OSS recipe's layout (use_remove_padding=false): right-padded rows with an attention
    mask. Eager there agrees with eager on each sequence, so the GPU stage's comparison of
    flex_attention in that layout measures flex, not the layout."""
    report = compare_with_eager("eager", packed=False)
    assert report.attn_implementation == "eager (padded rows)" and report.failures() == []


def _without_sinks(q, k, v, scale, sliding_window, sinks):
    return _windowed(q, k, v, scale, sliding_window, None)


def _without_window(q, k, v, scale, sliding_window, sinks):
    return _windowed(q, k, v, scale, None, sinks)


_windowed = varlen_attention.windowed_sink_attention


@pytest.mark.parametrize(
    ("mutant", "wrong"),
    [
        (
            _without_sinks,
            {"logits"} | {f"{layer} {name}" for layer in LAYERS for name in ("sinks grad", "q_proj.weight grad")},
        ),
        (_without_window, {"logits"} | {f"{LAYERS[0]} {name}" for name in ("sinks grad", "q_proj.weight grad")}),
    ],
)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_comparison_fails_an_attention_that_drops_the_sinks_or_the_window(monkeypatch, mutant, wrong, dtype):
    monkeypatch.setattr(varlen_attention, "windowed_sink_attention", mutant)
    assert wrong <= set(compare_with_eager(CPU_PACKED_ATTENTION, dtype=dtype).failures())


def test_the_comparison_fails_an_attention_whose_backward_leaves_the_sinks_untrained(monkeypatch):
    """The hub kernel's failure mode: the forward takes the sinks, the backward gives them nothing."""

    def sinks_detached(q, k, v, scale, sliding_window, sinks):
        return _windowed(q, k, v, scale, sliding_window, None if sinks is None else sinks.detach())

    monkeypatch.setattr(varlen_attention, "windowed_sink_attention", sinks_detached)
    for dtype in ("fp32", "bf16"):
        failures = compare_with_eager(CPU_PACKED_ATTENTION, dtype=dtype).failures()
        assert failures == [f"{layer} sinks grad" for layer in LAYERS], dtype


def test_in_bf16_the_bound_is_eagers_own_rounding():
    """The recipe's precision: the CPU attention in bf16 against fp32 eager, each quantity's error at most
    BF16_ERROR_FACTOR times eager-in-bf16's plus the floor; bf16 rounds far above fp32's tolerance."""
    report = compare_with_eager(CPU_PACKED_ATTENTION, dtype="bf16")
    assert report.dtype == "bf16" and report.failures() == [], "\n".join(report.lines())
    assert set(report.bounds) == set(report.errors)
    assert all(bound > BF16_ERROR_FLOOR for bound in report.bounds.values())  # eager's own error is not zero
    assert max(report.errors.values()) > 100 * compare_with_eager(CPU_PACKED_ATTENTION).tolerance
    with pytest.raises(ValueError, match="expected one of fp32, bf16"):
        compare_with_eager(CPU_PACKED_ATTENTION, dtype="fp16")


def test_flex_attention_refuses_sinks_on_cpu():
    """Why the CPU recipes cannot run the GPU recipe's flex_attention: transformers' flex
    integration returns no log-sum-exp on CPU and refuses sinks there."""
    from transformers.integrations.flex_attention import flex_attention_forward

    layer = torch.nn.Module()
    query, key = torch.zeros(1, 4, 8, 16), torch.zeros(1, 2, 8, 16)
    with pytest.raises(ValueError, match="Attention sinks cannot be run on CPU with flex attention"):
        flex_attention_forward(layer, query, key, key, None, scaling=0.25, s_aux=torch.zeros(4))


def test_the_reason_gpt_oss_cannot_pack_still_holds():
    """Eager on one packed row (verl's use_remove_padding layout: position ids restarting at 0, no
    mask) differs from eager on each sequence: transformers' GptOssModel builds its masks without
    the position ids, so its mask-based attentions (eager, flex_attention) attend across packed
    sequences. When this fails, packing may have become safe for GPT-OSS: re-check, and re-enable
    use_remove_padding in dfpo/config/base_model/gpt_oss_120b.yaml."""
    import inspect

    from transformers.models.gpt_oss import modeling_gpt_oss

    assert (
        "position_ids" not in inspect.getsource(modeling_gpt_oss.GptOssModel.forward).split("mask_kwargs = {")[1][:300]
    )
    assert "logits" in compare_with_eager("eager").failures()


def test_the_recipe_attention_and_layout_are_the_knobs_or_the_model_file(tmp_path):
    assert recipe_attention({}) == "flex_attention" and recipe_packs({}) is False
    assert recipe_attention({"GPT_OSS_ATTN_IMPLEMENTATION": "eager"}) == "eager"
    assert recipe_packs({"USE_REMOVE_PADDING": "true"}) is True
    empty = tmp_path / "model.yaml"
    empty.write_text("actor_rollout_ref:\n  model: {}\n")
    with pytest.raises(ValueError, match="sets no actor_rollout_ref.model.override_config.attn_implementation"):
        recipe_attention({}, empty)
    with pytest.raises(ValueError, match="sets no actor_rollout_ref.model.use_remove_padding"):
        recipe_packs({}, empty)


def test_the_cli_checks_the_cpu_attention_and_skips_without_cuda(capsys):
    assert main(["--cpu"]) == 0
    out = capsys.readouterr().out
    for dtype in ("fp32", "bf16"):  # both precisions by default: the recipe trains in bf16
        assert f"sink attention in {dtype}: {CPU_PACKED_ATTENTION} (packed row) against fp32 eager on cpu" in out
    if not torch.cuda.is_available():
        assert main([]) == SKIPPED
        assert "SKIPPED: no CUDA device" in capsys.readouterr().out
