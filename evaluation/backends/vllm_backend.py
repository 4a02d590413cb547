"""vLLM backend (GPU, tensor parallel; CPU with vLLM's CPU build), written against vllm 0.24
(the version verl 0.9.1's ``verl[vllm]`` extra pins).

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

On CPU (vLLM's CPU build, ``vllm.platforms.current_platform.is_cpu()``) three settings have no
GPU meaning, and what is not given is chosen here (GPU runs keep vLLM's own defaults):

* ``enforce_eager``: on by default (there are no CUDA graphs on CPU, and without it vLLM's CPU
  build first compiles the model with torch's inductor, which the CPU recipes never do);
* the KV cache: ``kv_cache_gib`` GiB, else ``VLLM_CPU_KVCACHE_SPACE`` (GiB, read by vLLM
  itself), else :data:`CPU_DEFAULT_KV_CACHE_GIB`. vLLM's GPU rule (``gpu_memory_utilization`` of
  the machine's whole memory) would claim 90 % of the host's RAM;
* ``dtype="auto"`` is the checkpoint's own dtype, as the transformers backend loads it. vLLM's
  ``auto`` casts a float32 checkpoint to bfloat16, so the two backends would sample from
  different numbers. A bfloat16 checkpoint on a CPU without native bf16 is computed in float32
  (:func:`cpu_backend.precision.for_checkpoint`, said on stderr; an explicit ``bfloat16``
  there runs with a warning).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from evaluation.backends import Completion, GenerationRequest, checkpoint_dtype, cpu_dtype
from evaluation.chat_prompt import render_prompt_ids
from evaluation.sampling_settings import SamplingConfig

VLLM_MISSING = (
    "the vllm backend needs vLLM: on a GPU machine pip install -r requirements.txt (vllm 0.24.0), "
    "on CPU bash scripts/setup_env.sh (vLLM 0.24.0's CPU build, docs/install.md); "
    "or use --backend transformers"
)


BATCH_INVARIANT_ENV = "VLLM_BATCH_INVARIANT"
MAX_TEMPERATURE = 2.0
"""vLLM's SamplingParams refuses a larger temperature."""
CPU_KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
CPU_DEFAULT_KV_CACHE_GIB = 1.0
"""KV cache of a CPU engine when neither ``kv_cache_gib`` nor ``VLLM_CPU_KVCACHE_SPACE`` is set."""
GIB = 1 << 30
CPU_BLOCK_SIZE = 32  # tokens per KV block on CPU (a multiple of 32, as vLLM's CPU backend prefers)


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


def vllm_device() -> str:
    """The device type of the platform vLLM found: ``"cpu"`` for its CPU build, ``"cuda"`` on GPUs."""
    try:
        from vllm.platforms import current_platform
    except ImportError:  # a vLLM without the platforms module (older or stand-in): GPU semantics
        return "cuda"
    return "cpu" if current_platform.is_cpu() else str(current_platform.device_type)


def cpu_kv_cache_gib(requested: float | None, environ: Mapping[str, str] = os.environ) -> float:
    """The KV cache of a CPU engine in GiB: ``requested``, else ``VLLM_CPU_KVCACHE_SPACE``, else 1 GiB.

    vLLM overrides its engine argument with ``VLLM_CPU_KVCACHE_SPACE`` when that is set, so a
    request that disagrees with the variable is refused rather than silently ignored."""
    if CPU_KV_CACHE_ENV in environ:
        env = environ[CPU_KV_CACHE_ENV]
        try:
            from_env = float(int(env))
        except ValueError:
            raise ValueError(
                f"{CPU_KV_CACHE_ENV}={env!r} must be a whole number of GiB (vLLM reads it as one); set it or unset it"
            ) from None
        if requested is not None and requested != from_env:
            raise ValueError(
                f"--kv-cache-gib {requested:g} disagrees with {CPU_KV_CACHE_ENV}={env}, which vLLM's CPU "
                f"build applies instead; unset {CPU_KV_CACHE_ENV} or pass --kv-cache-gib {env}"
            )
        return from_env
    return CPU_DEFAULT_KV_CACHE_GIB if requested is None else float(requested)


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
        enforce_eager: bool | None = None,
        batch_invariant: bool = False,
        kv_cache_gib: float | None = None,
    ) -> None:
        check_vllm_sampling(sampling)
        if kv_cache_gib is not None and kv_cache_gib <= 0:
            raise ValueError(f"kv_cache_gib must be > 0, got {kv_cache_gib} (--kv-cache-gib)")
        if batch_invariant:
            os.environ[BATCH_INVARIANT_ENV] = "1"  # read by vLLM when it is imported and the engine built
        try:
            import vllm
        except ImportError as exc:
            raise ImportError(VLLM_MISSING) from exc
        from transformers import AutoTokenizer

        self.device = vllm_device()
        if self.device == "cpu":
            enforce_eager = True if enforce_eager is None else enforce_eager
            kv_cache_gib = cpu_kv_cache_gib(kv_cache_gib)
            dtype = cpu_dtype(dtype, checkpoint_dtype(model_path, trust_remote_code))
        self.sampling = sampling
        self.tensor_parallel_size = tensor_parallel_size
        self.max_model_len = max_model_len
        self.dtype = dtype
        self.enforce_eager = bool(enforce_eager)
        self.kv_cache_gib = kv_cache_gib
        self.vllm_version = getattr(vllm, "__version__", "unknown")
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        engine_args: dict[str, Any] = {
            "model": model_path,
            "tensor_parallel_size": tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization,
            "dtype": dtype,
            "trust_remote_code": trust_remote_code,
            "enable_prefix_caching": True,
            "enforce_eager": self.enforce_eager,
        }
        if max_model_len is not None:
            engine_args["max_model_len"] = max_model_len
        if kv_cache_gib is not None:
            engine_args["kv_cache_memory_bytes"] = int(kv_cache_gib * GIB)
        if self.device == "cpu":
            # vLLM's CPU default block (128 tokens) is longer than many prompts, and the prefix cache
            # reuses whole blocks only (scripts/bench_vllm_cpu_block_size.py)
            engine_args["block_size"] = CPU_BLOCK_SIZE
        self.llm = vllm.LLM(**engine_args)
        self._sampling_params_cls = vllm.SamplingParams

    def describe(self) -> dict[str, Any]:
        """Backend settings for the run manifest."""
        return {
            "name": "vllm",
            "vllm_version": self.vllm_version,
            "device": self.device,
            "tensor_parallel_size": self.tensor_parallel_size,
            "max_model_len": self.max_model_len,
            "dtype": self.dtype,
            "enforce_eager": self.enforce_eager,
            "kv_cache_gib": self.kv_cache_gib,
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
