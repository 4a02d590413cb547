"""vLLM backend (GPU, tensor parallel), written against vllm 0.24 (the version verl 0.9.1's
``verl[vllm]`` extra pins).

Every sample is its own request with its own seed (``SamplingParams(n=1, seed=...)``), so the
random draws of a sample depend only on its recorded seed. The logits themselves depend on
the batch the request was scheduled in (batch size, chunking and split-K reductions change the
floating-point sums), so with default kernels a sample is reproducible only when the batching
is the same. vLLM 0.24 makes the output independent of batching only with batch-invariant
kernels, ``VLLM_BATCH_INVARIANT=1`` (set before vLLM is imported; GPUs of compute capability
8.0 or higher; slower). ``batch_invariant=True`` (``--batch-invariant`` in generate) sets it;
the manifest records whether it was on.

Prefix caching shares the prompt's KV cache between the k requests of a problem. Prompts are
rendered with the model's Hugging Face tokenizer and chat template (the same code path as the
transformers backend) and passed to vLLM as token ids. vLLM rejects temperatures above 2, so
such a setting is refused before the model is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from dfpo.evaluation.backends import Completion, GenerationRequest
from dfpo.evaluation.chat_prompt import render_prompt_ids
from dfpo.evaluation.sampling import SamplingConfig

VLLM_MISSING = (
    "the vllm backend needs vLLM on a GPU machine: pip install 'verl[vllm]==0.9.1' "
    "(vllm 0.24.0); on a machine without vLLM use --backend transformers"
)


BATCH_INVARIANT_ENV = "VLLM_BATCH_INVARIANT"
MAX_TEMPERATURE = 2.0
"""vLLM's SamplingParams refuses a larger temperature."""


def check_vllm_sampling(sampling: SamplingConfig) -> None:
    """Refuse settings vLLM would reject, before minutes are spent loading the model."""
    if sampling.temperature > MAX_TEMPERATURE:
        raise ValueError(
            f"temperature {sampling.temperature} is above vLLM's maximum of {MAX_TEMPERATURE}; "
            "use --temperature <= 2 with --backend vllm"
        )


def batch_invariant_enabled() -> bool:
    """Whether vLLM's batch-invariant kernels are on (``VLLM_BATCH_INVARIANT=1``)."""
    return os.environ.get(BATCH_INVARIANT_ENV, "0") == "1"


class VLLMBackend:
    """Sample with ``vllm.LLM.generate``."""

    def __init__(
        self,
        model_path: str,
        sampling: SamplingConfig,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        dtype: str = "auto",
        trust_remote_code: bool = False,
        enforce_eager: bool = False,
        batch_invariant: bool = False,
    ) -> None:
        check_vllm_sampling(sampling)
        if batch_invariant:
            os.environ[BATCH_INVARIANT_ENV] = "1"  # read by vLLM when it is imported and the engine built
        try:
            import vllm
        except ImportError as exc:
            raise ImportError(VLLM_MISSING) from exc
        from transformers import AutoTokenizer

        self.sampling = sampling
        self.tensor_parallel_size = tensor_parallel_size
        self.max_model_len = max_model_len
        self.dtype = dtype
        self.vllm_version = getattr(vllm, "__version__", "unknown")
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        engine_args: dict[str, Any] = {
            "model": model_path,
            "tensor_parallel_size": tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization,
            "dtype": dtype,
            "trust_remote_code": trust_remote_code,
            "enable_prefix_caching": True,
            "enforce_eager": enforce_eager,
        }
        if max_model_len is not None:
            engine_args["max_model_len"] = max_model_len
        self.llm = vllm.LLM(**engine_args)
        self._sampling_params_cls = vllm.SamplingParams

    def describe(self) -> dict[str, Any]:
        """Backend settings for the run manifest."""
        return {
            "name": "vllm",
            "vllm_version": self.vllm_version,
            "tensor_parallel_size": self.tensor_parallel_size,
            "max_model_len": self.max_model_len,
            "dtype": self.dtype,
            "batch_invariant": batch_invariant_enabled(),
        }

    def _params(self, seed: int) -> Any:
        s = self.sampling
        kwargs: dict[str, Any] = {
            "n": 1,
            "seed": seed,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "min_p": s.min_p,
            "max_tokens": s.max_new_tokens,
            "skip_special_tokens": True,
        }
        if s.top_k is not None:
            kwargs["top_k"] = s.top_k
        return self._sampling_params_cls(**kwargs)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        """Submit every sample of every request to vLLM at once and regroup by request."""
        prompts: list[dict[str, list[int]]] = []
        params: list[Any] = []
        owners: list[tuple[int, int]] = []
        for r_idx, request in enumerate(requests):
            ids = render_prompt_ids(self.tokenizer, request.messages, self.sampling.chat_template_kwargs)
            for s_idx, seed in enumerate(request.seeds):
                prompts.append({"prompt_token_ids": ids})
                params.append(self._params(seed))
                owners.append((r_idx, s_idx))
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=True)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
        results: list[list[Completion | None]] = [[None] * len(r.seeds) for r in requests]
        for (r_idx, s_idx), output in zip(owners, outputs, strict=True):
            out = output.outputs[0]
            if out.finish_reason not in ("stop", "length"):
                raise RuntimeError(
                    f"vLLM finished a sample of {requests[r_idx].problem_id} with reason {out.finish_reason!r} "
                    "(expected 'stop' or 'length'); the sample would be scored on an incomplete response"
                )
            results[r_idx][s_idx] = Completion(
                text=out.text,
                num_tokens=len(out.token_ids),
                truncated=out.finish_reason == "length",
                seed=requests[r_idx].seeds[s_idx],
            )
        return [[c for c in row if c is not None] for row in results]
