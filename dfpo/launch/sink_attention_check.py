"""GPT-OSS's sink attention against eager on a tiny model: the forward and the training gradients.

    python -m dfpo.launch.sink_attention_check            # the GPT-OSS recipe's attention and layout, on CUDA
    python -m dfpo.launch.sink_attention_check --cpu      # the CPU backend's packed attention, on CPU
    python -m dfpo.launch.sink_attention_check --dtype bf16   # one precision only (default: fp32, then bf16)

GPT-OSS learns one attention-sink logit per head (``GptOssAttention.sinks``, passed to the
attention function as ``s_aux``) and alternates sliding-window and full-attention layers.
transformers' ``eager_attention_forward`` for GPT-OSS computes both and autograd differentiates
it, so it is the reference; an attention implementation that drops the sinks or the window in its
forward, or whose backward gives the sinks (or q/k/v) no or the wrong gradient, trains a different
model without any error. :func:`compare_with_eager` builds a 2-layer ``GptOssForCausalLM`` (one
sliding-window layer, window 4, one full-attention layer; hidden 64, 4 heads, 2 key/value heads,
4 experts), gives the sinks values that matter, and runs sequences longer than the window:
eager one sequence at a time, the implementation under test on all of them at once in the layout
verl gives it — packed into one row (``use_remove_padding=true``: position ids restarting at 0, no
mask) or right-padded rows with an attention mask (``false``, the GPT-OSS recipe's: GptOssModel
builds its masks without position ids, so a mask-based attention on a packed row attends across
its sequences). The logits and the gradients of every attention layer's q/k/v/o projections and
sinks must agree.

In fp32 they must agree to a tolerance. The recipe trains in bf16 (FSDP2's ``param_dtype``), where
every implementation rounds: there the implementation in bf16 and eager in bf16 are both compared
with eager in fp32, and the implementation's error may be at most :data:`BF16_ERROR_FACTOR` times
eager's own plus :data:`BF16_ERROR_FLOOR` (a kernel that rounds a sink's log-sum-exp to bf16 before
rescaling, say, shows there and not in fp32).

The GPU smoke (scripts/gpu_smoke.sh) runs this on CUDA with the recipe's implementation
(:func:`recipe_attention`); tests/cpu/test_sink_attention.py runs it on CPU. Exit status: 0 when
every quantity agrees, 1 when one does not, :data:`SKIPPED` when the device is absent.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
GPT_OSS_RECIPE_CONFIG = REPO_ROOT / "dfpo" / "config" / "base_model" / "gpt_oss_120b.yaml"
ATTENTION_KEY = "actor_rollout_ref.model.override_config.attn_implementation"
ATTENTION_KNOB = "GPT_OSS_ATTN_IMPLEMENTATION"
PACKING_KEY = "actor_rollout_ref.model.use_remove_padding"
PACKING_KNOB = "USE_REMOVE_PADDING"
CPU_PACKED_ATTENTION = "dfpo_cpu_varlen"
"""The CPU platform's attention for packed micro-batches (cpu_backend/varlen_attention.py)."""
SKIPPED = 77
"""Exit status when the requested device is not there (scripts/gpu_smoke.sh records SKIP)."""
LENGTHS = (11, 7, 9)
"""The packed sequences' lengths [ours]: each longer than :data:`SLIDING_WINDOW`, one odd one out."""
SLIDING_WINDOW = 4
ATTENTION_WEIGHTS = ("q_proj", "k_proj", "v_proj", "o_proj")
BF16_ERROR_FACTOR = 2.0
"""In bf16, an implementation's error from fp32 eager may be this many times eager-in-bf16's [ours]:
kernels round in another order, but one that loses precision eager keeps is off by far more."""
BF16_ERROR_FLOOR = 1e-3
"""Added to the bf16 bound [ours], for a quantity eager in bf16 happens to get almost exactly."""
DTYPES = ("fp32", "bf16")
INITIALIZER_RANGE = 0.3
"""Weights' standard deviation [ours]: at transformers' 0.02 the attention logits are near zero and
the attention output barely reaches the logits, so a dropped window or sink moved them by less than
the tolerance; at 0.3 each changes the compared quantities by far more than it."""


def recipe_attention(environ: dict[str, str] | None = None, config_file: Path = GPT_OSS_RECIPE_CONFIG) -> str:
    """The training attention the GPT-OSS recipe runs: ``GPT_OSS_ATTN_IMPLEMENTATION`` when set
    (recipes/common.sh passes it to ``actor_rollout_ref.model.override_config.attn_implementation``),
    else the value in dfpo/config/base_model/gpt_oss_120b.yaml."""
    environ = os.environ if environ is None else environ
    if environ.get(ATTENTION_KNOB):
        return environ[ATTENTION_KNOB]
    from omegaconf import OmegaConf

    value = OmegaConf.select(OmegaConf.load(config_file), ATTENTION_KEY)
    if not value:
        raise ValueError(f"{config_file} sets no {ATTENTION_KEY}: the GPT-OSS recipe's training attention is unknown")
    return str(value)


def recipe_packs(environ: dict[str, str] | None = None, config_file: Path = GPT_OSS_RECIPE_CONFIG) -> bool:
    """Whether the GPT-OSS recipe packs micro-batches into one row: ``USE_REMOVE_PADDING`` when set,
    else ``actor_rollout_ref.model.use_remove_padding`` in gpt_oss_120b.yaml."""
    environ = os.environ if environ is None else environ
    if environ.get(PACKING_KNOB):
        return environ[PACKING_KNOB].strip().lower() in ("1", "true", "yes")
    from omegaconf import OmegaConf

    value = OmegaConf.select(OmegaConf.load(config_file), PACKING_KEY)
    if value is None:
        raise ValueError(f"{config_file} sets no {PACKING_KEY}: the GPT-OSS recipe's batch layout is unknown")
    return bool(value)


def tiny_gpt_oss_config():
    """A 2-layer GPT-OSS [ours]: sliding-window layer then full-attention layer, hidden 64, 4 query
    heads and 2 key/value heads of 16, 4 experts (2 active), window :data:`SLIDING_WINDOW`."""
    from transformers import GptOssConfig

    return GptOssConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=SLIDING_WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=131072,  # YaRN's factor 32 over the default 4096 original positions
        initializer_range=INITIALIZER_RANGE,
    )


@dataclass
class SinkAttentionReport:
    """Each compared quantity's largest difference from fp32 eager, relative to eager's largest magnitude,
    and the bound it must keep (``tolerance`` in fp32; in bf16, from eager-in-bf16's own error)."""

    attn_implementation: str
    device: str
    tolerance: float
    errors: dict[str, float] = field(default_factory=dict)
    bounds: dict[str, float] = field(default_factory=dict)
    dtype: str = "fp32"

    def bound(self, name: str) -> float:
        return self.bounds.get(name, self.tolerance)

    def failures(self) -> list[str]:
        return [name for name, error in self.errors.items() if not error <= self.bound(name)]  # NaN fails too

    def lines(self) -> list[str]:
        return [
            f"{'ok' if error <= self.bound(name) else 'FAIL':>4}  {name}: {error:.2e} (bound {self.bound(name):.1e})"
            for name, error in self.errors.items()
        ]


def _relative_error(found, expected) -> float:
    scale = float(expected.abs().max())
    return float((found.double() - expected.double()).abs().max()) / max(scale, 1e-30)


def _prepare(attn_implementation: str) -> None:
    """Register an implementation that only exists once dfpo's CPU backend installs it."""
    if attn_implementation == CPU_PACKED_ATTENTION:
        from cpu_backend.varlen_attention import install

        install()


def _each_alone(model, sequences, weights):
    """Eager's way: each sequence in its own batch, the weighted logits' gradients accumulated; the logits."""
    import torch

    logits_of, start = [], 0
    for sequence in sequences:
        logits = model(input_ids=sequence.unsqueeze(0)).logits[0]
        (logits.float() * weights[start : start + len(sequence)]).sum().backward()
        logits_of.append(logits.detach())
        start += len(sequence)
    return torch.cat(logits_of)


def _all_at_once(model, sequences, weights, packed: bool):
    """The layout verl gives the implementation: one packed row (``use_remove_padding``: position ids
    restarting at 0, no mask) or right-padded rows with their attention mask; the real tokens' logits."""
    import torch

    device, lengths = sequences[0].device, [len(s) for s in sequences]
    if packed:
        row = torch.cat(sequences).unsqueeze(0)
        position_ids = torch.cat([torch.arange(n, device=device) for n in lengths]).unsqueeze(0)
        logits = model(input_ids=row, position_ids=position_ids).logits[0]
    else:
        rows = torch.nn.utils.rnn.pad_sequence(sequences, batch_first=True)
        mask = torch.nn.utils.rnn.pad_sequence([torch.ones_like(s) for s in sequences], batch_first=True)
        position_ids = torch.arange(rows.shape[1], device=device).expand_as(rows)
        padded = model(input_ids=rows, attention_mask=mask, position_ids=position_ids).logits
        logits = torch.cat([padded[i, :n] for i, n in enumerate(lengths)])
    (logits.float() * weights).sum().backward()
    return logits.detach()


def _compared(model, logits, layer_types) -> dict:
    """The compared quantities of a model that has run: its logits, each attention layer's q/k/v/o weight
    gradients and sinks gradient (None where the backward left one without)."""
    quantities = {"logits": logits}
    for index, layer in enumerate(model.model.layers):
        kind = layer_types[index]
        for name in ATTENTION_WEIGHTS:
            quantities[f"layer {index} ({kind}) {name}.weight grad"] = getattr(layer.self_attn, name).weight.grad
        quantities[f"layer {index} ({kind}) sinks grad"] = layer.self_attn.sinks.grad
    return quantities


def _errors(found: dict, truth: dict) -> dict[str, float]:
    return {
        name: float("nan") if found[name] is None else _relative_error(found[name], expected)
        for name, expected in truth.items()
    }


def compare_with_eager(
    attn_implementation: str,
    device: str = "cpu",
    lengths: Sequence[int] = LENGTHS,
    tolerance: float | None = None,
    seed: int = 0,
    packed: bool = True,
    dtype: str = "fp32",
) -> SinkAttentionReport:
    """Logits and attention gradients of ``attn_implementation`` on one packed row (``packed``) or
    on right-padded rows with an attention mask, against eager in float32 run on each sequence
    alone, on ``device``; the loss is a fixed random weighting of the real tokens' logits, so every
    one of their gradients reaches the attention. ``dtype`` ``fp32``: the implementation in float32,
    within ``tolerance`` (default 1e-4 on CPU, 1e-3 on an accelerator: kernels sum in another order)
    [ours]. ``bf16``: the implementation in bfloat16, its error at most :data:`BF16_ERROR_FACTOR` times
    that of eager in bfloat16 plus :data:`BF16_ERROR_FLOOR`."""
    import torch
    from transformers import GptOssForCausalLM
    from verl.models.transformers.monkey_patch import apply_monkey_patch

    if min(lengths) <= SLIDING_WINDOW:
        raise ValueError(f"lengths {list(lengths)}: each must exceed the sliding window ({SLIDING_WINDOW})")
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    model_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    _prepare(attn_implementation)
    torch.manual_seed(seed)
    config = tiny_gpt_oss_config()
    # a config each: _from_config writes the attention into the config object it is given
    reference = GptOssForCausalLM._from_config(tiny_gpt_oss_config(), attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():  # the initialiser's sinks (std 0.02) barely move the softmax; these do
        for layer in reference.model.layers:
            layer.self_attn.sinks.copy_(torch.randn_like(layer.self_attn.sinks) * 2.0)
    candidate = GptOssForCausalLM._from_config(config, attn_implementation=attn_implementation, dtype=model_dtype)
    candidate.load_state_dict(reference.state_dict())  # cast to the candidate's dtype
    if reference.config._attn_implementation != "eager":
        raise RuntimeError(f"the reference model runs {reference.config._attn_implementation}, not eager")
    reference, candidate = reference.to(device).train(), candidate.to(device).train()
    apply_monkey_patch(candidate, ulysses_sp_size=1, use_remove_padding=packed)  # as verl's FSDP engine does

    generator = torch.Generator().manual_seed(seed)
    sequences = [torch.randint(0, config.vocab_size, (n,), generator=generator) for n in lengths]
    weights = torch.randn(sum(lengths), config.vocab_size, generator=generator)
    sequences, weights = [s.to(device) for s in sequences], weights.to(device)

    truth = _compared(reference, _each_alone(reference, sequences, weights), config.layer_types)
    found = _compared(candidate, _all_at_once(candidate, sequences, weights, packed), config.layer_types)
    if tolerance is None:
        tolerance = 1e-4 if torch.device(device).type == "cpu" else 1e-3
    layout = "packed row" if packed else "padded rows"
    report = SinkAttentionReport(f"{attn_implementation} ({layout})", str(device), tolerance, dtype=dtype)
    report.errors = _errors(found, truth)
    if dtype == "bf16":  # eager's own rounding in bf16 sets what the implementation may lose
        eager = GptOssForCausalLM._from_config(tiny_gpt_oss_config(), attn_implementation="eager", dtype=model_dtype)
        eager.load_state_dict(reference.state_dict())
        eager = eager.to(device).train()
        rounded = _errors(_compared(eager, _each_alone(eager, sequences, weights), config.layer_types), truth)
        report.bounds = {name: BF16_ERROR_FACTOR * error + BF16_ERROR_FLOOR for name, error in rounded.items()}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dfpo.launch.sink_attention_check", description=__doc__)
    parser.add_argument(
        "--cpu",
        action="store_true",
        help=f"check the CPU backend's packed attention ({CPU_PACKED_ATTENTION}) on CPU, not the recipe's on CUDA",
    )
    parser.add_argument("--attn", help="the attention implementation to check (default: the GPT-OSS recipe's)")
    parser.add_argument(
        "--layout",
        choices=("packed", "padded"),
        help="one packed row or padded rows (default: packed with --cpu, else the GPT-OSS recipe's)",
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        action="append",
        help="the precision to check it in (default: fp32, then bf16, the recipe's)",
    )
    args = parser.parse_args(argv)
    import torch

    device = "cpu" if args.cpu else "cuda"
    attention = args.attn or (CPU_PACKED_ATTENTION if args.cpu else recipe_attention())
    packed = args.layout == "packed" if args.layout else (args.cpu or recipe_packs())
    if device == "cuda" and not torch.cuda.is_available():
        print(
            f"sink attention check SKIPPED: no CUDA device (torch {torch.__version__}, CUDA build "
            f"{torch.version.cuda}); {attention} was not checked against eager "
            "(python -m dfpo.launch.doctor says why torch sees no GPU)"
        )
        return SKIPPED
    status = 0
    for dtype in args.dtype or DTYPES:
        report = compare_with_eager(attention, device, packed=packed, dtype=dtype)
        bound = f"tolerance {report.tolerance:g}" if dtype == "fp32" else f"at most {BF16_ERROR_FACTOR:g} x eager's own"
        print(
            f"GPT-OSS sink attention in {dtype}: {report.attn_implementation} against fp32 eager on {device} ({bound})"
        )
        print("\n".join(report.lines()))
        failed = report.failures()
        if failed:
            print(
                f"FAIL: {attention} in {dtype} differs from eager in {', '.join(failed)}; it would train GPT-OSS's "
                f"sinks wrongly (set {ATTENTION_KNOB}=eager, or see docs/recipes.md, GPT-OSS-120B)"
            )
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
