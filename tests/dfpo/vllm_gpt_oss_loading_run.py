"""Load a GPT-OSS checkpoint through vLLM's real ``GptOssForCausalLM.load_weights`` (run in a subprocess
by ``test_vllm_gpt_oss_bf16_loading.py``; prints one JSON object).

``python tests/dfpo/vllm_gpt_oss_loading_run.py CHECKPOINT_DIR TIED_CHECKPOINT_DIR`` builds vLLM's model on CPU in this
process (vLLM's config, a one-rank gloo group, ``initialize_model``: no engine, no KV cache), lets vLLM
load its general plugins as its processes do, and loads the checkpoint's tensors by their Hugging Face
names, as verl's weight sync does. It reports whether the plugins patched the loader, which vLLM
parameters differ from the checkpoint after vLLM's documented layout transform, and what the loader
raises without the fix (the mutant), when vLLM's loader already remaps (the fix retires) and when the
loader's arguments changed (the fix refuses). From the second checkpoint, one with
``tie_word_embeddings: true``, it reports whether vLLM's output layer is the loaded embedding (in
vLLM 0.24 it is not: GptOssForCausalLM skips ``lm_head.*`` for a tied model and never ties it).
"""

from __future__ import annotations

import inspect
import json
import sys
import tempfile
from pathlib import Path

import torch

DTYPE = torch.bfloat16  # the GPU recipe's rollout dtype, and the only one vLLM's CPU GPT-OSS attention runs


def build_vllm_model(checkpoint: Path):
    """vLLM's GptOssForCausalLM for ``checkpoint``, with dummy weights, on CPU."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    config = EngineArgs(
        model=str(checkpoint),
        dtype="bfloat16",
        load_format="dummy",
        enforce_eager=True,
        max_model_len=128,
        skip_tokenizer_init=True,
    ).create_engine_config()
    with set_current_vllm_config(config):
        init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            distributed_init_method=f"file://{tempfile.mkdtemp()}/rendezvous",
            backend="gloo",
        )
        ensure_model_parallel_initialized(1, 1)
        with set_default_torch_dtype(DTYPE), torch.device("cpu"):
            return initialize_model(vllm_config=config), config


def expected_parameters(checkpoint_tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """vLLM's name and value of every expert tensor, sink and output layer of the checkpoint.

    The transform is vLLM's GPT-OSS loader's (``_load_weights_other``, one rank): the experts move
    under ``experts.routed_experts`` and their matrices are transposed from transformers' ``[E, in,
    out]`` to vLLM's ``[E, out, in]`` (``permute(0, 2, 1)``), gate and up staying interleaved;
    biases, sinks and ``lm_head`` are copied as they are."""
    expected = {}
    for name, tensor in checkpoint_tensors.items():
        value = tensor.to(DTYPE)
        if ".mlp.experts." in name:
            suffix = {"gate_up_proj": "w13_weight", "down_proj": "w2_weight"}
            suffix |= {"gate_up_proj_bias": "w13_bias", "down_proj_bias": "w2_bias"}
            prefix, _, hf_name = name.rpartition(".")
            if hf_name in ("gate_up_proj", "down_proj"):
                value = value.permute(0, 2, 1)
            expected[f"{prefix}.routed_experts.{suffix[hf_name]}"] = value
        elif name.endswith(".self_attn.sinks"):
            expected[name.replace(".self_attn.", ".attn.")] = value
        elif name == "lm_head.weight":
            expected[name] = value
    return expected


def mismatches(model, expected: dict[str, torch.Tensor]) -> list[str]:
    parameters = dict(model.named_parameters())
    return sorted(
        name
        for name, value in expected.items()
        if name not in parameters
        or parameters[name].shape != value.shape
        or not torch.equal(parameters[name].data, value)
    )


def load_error(model, weights) -> str | None:
    try:
        model.load_weights(weights)
    except Exception as error:  # the report names what was raised
        return f"{type(error).__name__}: {error}"
    return None


def tied_output_layer(checkpoint: Path) -> dict:
    """What vLLM's output layer holds after loading a checkpoint with tied embeddings."""
    from safetensors.torch import load_file
    from vllm.config import set_current_vllm_config

    model, config = build_vllm_model(checkpoint)
    tensors = load_file(str(checkpoint / "model.safetensors"))
    with set_current_vllm_config(config):
        for parameter in model.parameters():
            parameter.data.zero_()
        model.load_weights((n, t.to(DTYPE)) for n, t in tensors.items())
    embedding = tensors["model.embed_tokens.weight"].to(DTYPE)
    return {
        "checkpoint_has_lm_head": "lm_head.weight" in tensors,
        "embedding_loaded": torch.equal(model.model.embedding.weight.data, embedding),
        "lm_head_is_embedding": torch.equal(model.lm_head.weight.data, embedding),
        "lm_head_left_zero": not model.lm_head.weight.data.any().item(),
    }


def main(checkpoint: Path, tied_checkpoint: Path) -> dict:
    from safetensors.torch import load_file
    from vllm.model_executor.models.gpt_oss import GptOssModel
    from vllm.plugins import load_general_plugins

    from dfpo.vllm_fixes import gpt_oss_bf16_loading as fix

    load_general_plugins()  # as vLLM does in each of its processes
    report = {"patched_by_plugins": getattr(GptOssModel._load_weights_other, fix.PATCHED_MARK, False)}
    model, config = build_vllm_model(checkpoint)
    tensors = load_file(str(checkpoint / "model.safetensors"))
    expected = expected_parameters(tensors)
    report["expert_tensors"] = sorted(n for n in expected if ".routed_experts." in n)
    from vllm.config import set_current_vllm_config

    with set_current_vllm_config(config):
        for parameter in model.parameters():  # no value left from the dummy weights
            parameter.data.zero_()
        report["fixed_error"] = load_error(model, ((n, t.to(DTYPE)) for n, t in tensors.items()))
        report["fixed_mismatches"] = mismatches(model, expected)

        patched = GptOssModel._load_weights_other
        original = inspect.unwrap(patched)
        GptOssModel._load_weights_other = original  # the mutant: vLLM 0.24.0 as released
        report["unfixed_error"] = load_error(model, ((n, t.to(DTYPE)) for n, t in tensors.items()))

        report["fix_applies_again"] = fix.apply() and fix.apply()
        report["fix_wraps_once"] = GptOssModel._load_weights_other.__wrapped__ is original

        def upstream_fixed(
            self, ep_rank_end, ep_rank_start, heads_per_rank, head_start, weights, stacked_params_mapping
        ):
            """Stands for a vLLM with vllm-project/vllm#45818: its loader remaps the names itself."""
            from vllm.model_executor.model_loader.weight_utils import remap_moe_expert_weights

            weights = remap_moe_expert_weights(weights, dict(self.named_parameters()))
            return original(
                self, ep_rank_end, ep_rank_start, heads_per_rank, head_start, weights, stacked_params_mapping
            )

        GptOssModel._load_weights_other = upstream_fixed
        report["upstream_fixed_patched"] = fix.apply()
        report["upstream_fixed_left_alone"] = GptOssModel._load_weights_other is upstream_fixed

        def changed_arguments(self, weights, stacked_params_mapping):
            return original(self, 0, 0, 0, 0, weights, stacked_params_mapping)

        GptOssModel._load_weights_other = changed_arguments
        try:
            fix.apply()
            report["changed_loader_error"] = None
        except fix.GptOssLoaderChanged as error:
            report["changed_loader_error"] = str(error)
        GptOssModel._load_weights_other = patched
    report["tied"] = tied_output_layer(tied_checkpoint)
    return report


if __name__ == "__main__":
    print("REPORT " + json.dumps(main(Path(sys.argv[1]), Path(sys.argv[2]))))
