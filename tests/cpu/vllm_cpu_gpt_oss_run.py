"""Serve the tiny GPT-OSS with vLLM's CPU build in bf16 and sync weights into it as verl does (run in a
subprocess by ``test_vllm_cpu_gpt_oss.py``, with ``VERL_PLATFORM=cpu`` and vLLM's engine in this
process; prints one JSON object).

``python tests/cpu/vllm_cpu_gpt_oss_run.py DIR`` writes :data:`cpu_examples.tiny_moe_models.TINY_GPT_OSS`
(untrained, with a redrawn embedding and output layer: :data:`EMBEDDING_STD`), starts ``vllm.LLM``
on it in bf16 with dfpo's vLLM plugins, and reports, for one ChatML prompt, how far vLLM's
next-token distributions are from transformers' in float32 (total variation distance, the largest
over the prompt's positions; transformers' own bf16 for scale), then what two weight syncs do to
them: verl's ``_update_weights`` (``load_weights`` with the Hugging Face names, experts packed as
transformers keeps them) followed by vLLM's ``process_weights_after_loading``, first with every
expert tensor halved, then with the original.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch

PROMPT = "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n\\boxed{5}<|im_end|>"
VOCAB = 128
# [ours] The untrained model's embedding and output layer are redrawn so that its next-token
# distributions are peaked (top probability ~0.5, against 1/128 for the uniform one a missing output
# layer gives) and its residual stream stays well-conditioned (transformers in bf16 is within 0.05
# total variation of float32 at every position; with stronger experts it is not). The other weights
# keep transformers' initialisation (std 0.02).
EMBEDDING_STD, OUTPUT_STD = 1.0, 0.3


def write_checkpoint(directory: Path) -> Path:
    from cpu_examples.tiny_model import build_char_tokenizer, build_model
    from cpu_examples.tiny_moe_models import TINY_GPT_OSS

    tokenizer = build_char_tokenizer(TINY_GPT_OSS.vocab_size - len(build_char_tokenizer()))
    model = build_model(TINY_GPT_OSS, tokenizer)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            std = EMBEDDING_STD if "embed_tokens" in name else OUTPUT_STD if "lm_head" in name else None
            if std is not None:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def transformers_prompt_logprobs(directory: Path, ids: list[int], dtype: torch.dtype) -> torch.Tensor:
    """[len(ids) - 1, VOCAB] next-token log-probs of transformers' GptOssForCausalLM."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, dim=-1)


def main(directory: Path) -> dict:
    from safetensors.torch import load_file
    from vllm import LLM, SamplingParams
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import process_weights_after_loading

    write_checkpoint(directory)
    llm = LLM(
        model=str(directory),
        dtype="bfloat16",
        enforce_eager=True,
        max_model_len=128,
        max_num_batched_tokens=256,
        block_size=32,
        max_logprobs=VOCAB,
    )
    ids = llm.get_tokenizer()(PROMPT)["input_ids"]

    def vllm_prompt_logprobs() -> torch.Tensor:
        params = SamplingParams(max_tokens=1, prompt_logprobs=VOCAB, temperature=0.0)
        positions = llm.generate([{"prompt_token_ids": ids}], params)[0].prompt_logprobs[1:]
        table = torch.full((len(ids) - 1, VOCAB), float("nan"))
        for row, logprobs in enumerate(positions):
            for token, logprob in logprobs.items():
                table[row, token] = logprob.logprob
        return table

    runner = {}
    llm.collective_rpc(lambda worker: runner.setdefault("runner", worker.model_runner) and None)
    model_runner = runner["runner"]
    checkpoint = load_file(str(directory / "model.safetensors"))

    def sync(expert_scale: float) -> torch.Tensor:
        """verl's weight update in the vLLM worker: load_weights, then vLLM's post-load processing."""
        weights = ((n, t * expert_scale if ".mlp.experts." in n else t) for n, t in checkpoint.items())
        with set_current_vllm_config(model_runner.vllm_config):
            model_runner.model.load_weights(weights)
            process_weights_after_loading(
                model_runner.model, model_runner.vllm_config.model_config, torch.device("cpu")
            )
        return vllm_prompt_logprobs()

    served = vllm_prompt_logprobs()
    halved, restored = sync(0.5), sync(1.0)
    hf_bf16 = transformers_prompt_logprobs(directory, ids, torch.bfloat16)
    hf_fp32 = transformers_prompt_logprobs(directory, ids, torch.float32)

    def total_variation(a: torch.Tensor, b: torch.Tensor) -> float:
        """The largest total variation distance between two rows' next-token distributions."""
        return (a.exp() - b.exp()).abs().sum(dim=1).max().item() / 2

    return {
        "complete_rows": bool(not served.isnan().any()),
        "hf_fp32_mean_top_probability": hf_fp32.exp().max(dim=1).values.mean().item(),
        "vllm_vs_hf_fp32": total_variation(served, hf_fp32),
        "hf_bf16_vs_hf_fp32": total_variation(hf_bf16, hf_fp32),
        "uniform_vs_hf_fp32": total_variation(torch.full_like(hf_fp32, -math.log(VOCAB)), hf_fp32),
        "argmax_agreement": (served.argmax(1) == hf_fp32.argmax(1)).float().mean().item(),
        "halved_experts_change": total_variation(halved, served),
        "restored_change": total_variation(restored, served),
    }


if __name__ == "__main__":
    print("REPORT " + json.dumps(main(Path(sys.argv[1]))))
