"""transformers ``generate`` backend for CPU and single-GPU evaluation of small models.

The k samples of a problem are drawn as one batch (``num_return_sequences``), or in slices of
``sample_batch_size``; the torch RNG is seeded before each slice with the seed of the slice's
first sample, and that seed is what each completion records. Problems are generated one at a
time, so a sample depends only on the model, the prompt, the sampling settings and its
recorded seed, never on which other problems were in flight (a resumed run reproduces an
uninterrupted one).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from cpu_backend.eos_tokens import eos_token_ids
from evaluation.backends import Completion, GenerationRequest, checkpoint_dtype, cpu_dtype
from evaluation.chat_prompt import render_prompt_ids
from evaluation.sampling_settings import SamplingConfig


class TransformersBackend:
    """Sample with ``transformers`` (``AutoModelForCausalLM.generate``)."""

    def __init__(
        self,
        model_path: str,
        sampling: SamplingConfig,
        device: str = "auto",
        dtype: str = "auto",
        sample_batch_size: int | None = None,
        trust_remote_code: bool = False,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cpu":  # bf16 only where this CPU computes it natively
            dtype = cpu_dtype(dtype, checkpoint_dtype(model_path, trust_remote_code))
        torch_dtype = dtype if dtype == "auto" else getattr(torch, dtype)
        self.model_path = model_path
        self.sampling = sampling
        self.device = device
        self.dtype = dtype
        self.sample_batch_size = sample_batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=torch_dtype, trust_remote_code=trust_remote_code
        ).to(device)
        self.model.eval()
        self.eos_ids = eos_token_ids(self.model, self.tokenizer)
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.eos_ids[0]

    def describe(self) -> dict[str, Any]:
        """Backend settings for the run manifest."""
        return {
            "name": "transformers",
            "device": self.device,
            "dtype": self.dtype,
            "sample_batch_size": self.sample_batch_size,
        }

    def _generation_kwargs(self) -> dict[str, Any]:
        s = self.sampling
        kwargs: dict[str, Any] = {
            "max_new_tokens": s.max_new_tokens,
            "eos_token_id": self.eos_ids,
            "pad_token_id": self.pad_id,
            "repetition_penalty": 1.0,
        }
        if s.temperature == 0:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(
                do_sample=True,
                temperature=s.temperature,
                top_p=s.top_p,
                top_k=0 if s.top_k is None else s.top_k,  # 0 disables transformers' top-k warper
                min_p=s.min_p if s.min_p > 0 else None,
            )
        return kwargs

    def _completion(self, tokens: list[int], seed: int) -> Completion:
        eos = set(self.eos_ids)
        end = next((i for i, t in enumerate(tokens) if t in eos), None)
        if end is None:
            # no end-of-sequence: this row ran until max_new_tokens (unfinished rows are never padded)
            body, truncated, num_tokens = tokens, True, len(tokens)
        else:
            body, truncated, num_tokens = tokens[:end], False, end + 1
        text = self.tokenizer.decode(body, skip_special_tokens=True)
        return Completion(text=text, num_tokens=num_tokens, truncated=truncated, seed=seed)

    def _shared_prefill_cache(self, input_ids: Any, attention_mask: Any, n: int) -> Any:
        """The prompt's keys and values but its last token's, computed once and repeated for n rows;
        None where the model's cache cannot be shared that way (a cache type set by the checkpoint's
        generation config, or layers that cannot be repeated, e.g. linear-attention state)."""
        from transformers import DynamicCache

        if input_ids.shape[1] < 2 or getattr(self.model.generation_config, "cache_implementation", None) is not None:
            return None
        supports = getattr(self.model, "_supports_default_dynamic_cache", None)
        if supports is not None and not supports():
            return None
        cache = DynamicCache(config=self.model.config)
        if not all(hasattr(layer, "batch_repeat_interleave") for layer in getattr(cache, "layers", [])):
            return None
        extra = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(self.model.forward).parameters else {}
        self.model(
            input_ids=input_ids[:, :-1],
            attention_mask=attention_mask[:, :-1],
            past_key_values=cache,
            use_cache=True,
            **extra,
        )
        cache.batch_repeat_interleave(n)
        return cache

    def _generate(
        self, input_ids: Any, attention_mask: Any, n: int, kwargs: dict[str, Any], prompt_len: int
    ) -> list[list[int]]:
        """n continuations of one prompt. The prompt's keys and values are computed once and shared
        by the n rows where the model's cache allows it (:meth:`_shared_prefill_cache`);
        ``num_return_sequences`` alone would run the prompt through the model n times: on a CPU,
        with prompts of ~100 tokens and answers of ~10, most of the evaluation's time. generate
        then runs only the prompt's last token and the new ones per row."""
        import torch

        with torch.no_grad():
            cache = self._shared_prefill_cache(input_ids, attention_mask, n)
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                num_return_sequences=n,
                past_key_values=cache,
                **kwargs,
            )
        return out[:, prompt_len:].tolist()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        """Draw len(request.seeds) samples for each request, one problem at a time."""
        import torch

        results: list[list[Completion]] = []
        kwargs = self._generation_kwargs()
        for request in requests:
            prompt = render_prompt_ids(self.tokenizer, request.messages, self.sampling.chat_template_kwargs)
            input_ids = torch.tensor([prompt], device=self.device)
            attention_mask = torch.ones_like(input_ids)
            k = len(request.seeds)
            step = self.sample_batch_size or k
            completions: list[Completion] = []
            greedy_rows: list[list[int]] | None = None
            for start in range(0, k, step):
                n = min(step, k - start)
                seed = request.seeds[start]
                if self.sampling.temperature == 0:
                    # greedy: every sample is the same response, and transformers refuses
                    # num_return_sequences > 1 without sampling; decode once per problem
                    if greedy_rows is None:
                        greedy_rows = self._generate(input_ids, attention_mask, 1, kwargs, len(prompt))
                    rows = greedy_rows * n
                else:
                    torch.manual_seed(seed)
                    rows = self._generate(input_ids, attention_mask, n, kwargs, len(prompt))
                completions.extend(self._completion(row, seed) for row in rows)
            results.append(completions)
        return results
