"""The local rollout server: a transformers model behind verl's token-in/token-out contract.

verl 0.9.1's agent loop sends every rollout request to a server actor as
``generate(prompt_ids, sampling_params, request_id, image_data=None, video_data=None, ...)``
and expects a :class:`verl.workers.rollout.replica.TokenOutput` (response token ids, their
log-probabilities when ``sampling_params["logprobs"]`` is true, a stop reason and
``extra_fields["global_steps"]``). :class:`LocalRolloutServer` answers that contract on CPU, the
way verl's vLLM server does on GPU:

* requests that arrive together are decoded together (left-padded batch, one KV cache), grouped
  by their sampling settings; each row stops at its own end-of-sequence token or token budget;
* the token budget is ``sampling_params["max_tokens"]`` or, as in verl's vLLM server,
  ``min(response_length, prompt_length + response_length - len(prompt))``, never past
  ``max_model_len``;
* sampling and the reported log-probabilities are :mod:`cpu_backend.token_sampling`'s;
* ``load_weights`` replaces the parameters (verl's weight sync after each training step);
  ``sleep``/``wake_up``/``clear_kv_cache`` and the abort calls have nothing to free on CPU and
  return at once, so the trainer's calls succeed.

It is not vLLM: no paged attention, no continuous batching across arrivals, no multi-modal input.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import torch

from cpu_backend.eos_tokens import eos_token_ids
from cpu_backend.moe_weights import pack_expert_weights
from cpu_backend.token_sampling import SamplingSettings, sample_next_tokens

logger = logging.getLogger(__name__)

# How long the batcher waits after the first request for others that belong in the same batch.
BATCH_WINDOW_S = 0.02


@dataclass
class _Request:
    prompt_ids: list[int]
    settings: SamplingSettings
    max_tokens: int
    want_log_probs: bool
    future: asyncio.Future = field(repr=False)


@torch.inference_mode()
def decode_batch(
    model,
    prompts: list[list[int]],
    max_tokens: list[int],
    settings: SamplingSettings,
    stop_ids: Collection[int],
    pad_id: int,
    generator: torch.Generator | None = None,
) -> list[tuple[list[int], list[float], str]]:
    """Decode every prompt with one KV cache; returns per prompt (token ids, log-probs, finish
    reason "stop" or "length"). The token that ended a response is part of it (as in vLLM)."""
    batch = len(prompts)
    longest = max(len(p) for p in prompts)
    input_ids = torch.full((batch, longest), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, longest), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, longest - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, longest - len(prompt) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    outputs: list[tuple[list[int], list[float], str]] = [([], [], "length") for _ in prompts]
    done = torch.zeros(batch, dtype=torch.bool)
    past = None
    step_ids, step_positions = input_ids, positions
    for step in range(max(max_tokens)):
        result = model(
            input_ids=step_ids,
            attention_mask=mask,
            position_ids=step_positions,
            past_key_values=past,
            use_cache=True,
            logits_to_keep=1,  # only the next-token logits, not the whole prompt's
        )
        past = result.past_key_values
        tokens, log_probs = sample_next_tokens(result.logits[:, -1, :], settings, generator)
        for row in range(batch):
            if done[row]:
                continue
            token = int(tokens[row])
            outputs[row][0].append(token)
            outputs[row][1].append(float(log_probs[row]))
            if token in stop_ids:
                outputs[row] = (outputs[row][0], outputs[row][1], "stop")
                done[row] = True
            elif step + 1 >= max_tokens[row]:
                done[row] = True
        if bool(done.all()):
            break
        step_ids = torch.where(done, torch.full_like(tokens, pad_id), tokens).unsqueeze(-1)
        step_positions = step_positions[:, -1:] + 1
        mask = torch.cat([mask, torch.ones((batch, 1), dtype=mask.dtype)], dim=-1)
    return outputs


def response_budget(prompt_len: int, sampling_params: dict, config: Any) -> int:
    """verl's vLLM server rule for the number of new tokens (see the module docstring)."""
    max_model_len = config.max_model_len or (config.prompt_length + config.response_length)
    room = max_model_len - prompt_len
    if room < 1:
        raise ValueError(
            f"prompt of {prompt_len} tokens leaves no room to generate within max_model_len={max_model_len}"
        )
    if "max_tokens" in sampling_params:
        wanted = int(sampling_params["max_tokens"])
    elif "max_new_tokens" in sampling_params:
        wanted = int(sampling_params["max_new_tokens"])
    else:
        wanted = min(config.response_length, config.prompt_length + config.response_length - prompt_len)
    return max(1, min(wanted, room))


class LocalRolloutServer:
    """The server actor of one local rollout replica (run as a Ray actor; see :mod:`cpu_backend.local_rollout`)."""

    def __init__(self, config: Any, model_path: str, replica_rank: int, seed: int) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        self.config = config
        self.replica_rank = replica_rank
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, attn_implementation="eager")
        self.model.eval()
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.stop_ids = set(eos_token_ids(self.model, tokenizer))
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.stop_ids)
        self.generator = torch.Generator().manual_seed(int(seed) + replica_rank)
        self.global_steps: int | None = None
        self._pending: list[_Request] = []
        self._wake: asyncio.Event | None = None
        self._batcher: asyncio.Task | None = None

    # ---- verl's token-in/token-out contract ---------------------------------------------------
    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        **kwargs: Any,
    ):
        from verl.workers.rollout.replica import TokenOutput

        if image_data is not None or video_data is not None or kwargs.get("audio_data") is not None:
            raise ValueError("the local rollout server takes text prompts only (request carried multi-modal data)")
        prompt_ids = [int(t) for t in prompt_ids]
        settings = SamplingSettings.from_request(sampling_params)
        loop = asyncio.get_running_loop()
        request = _Request(
            prompt_ids=prompt_ids,
            settings=settings,
            max_tokens=response_budget(len(prompt_ids), sampling_params, self.config),
            want_log_probs=bool(sampling_params.get("logprobs")),
            future=loop.create_future(),
        )
        self._pending.append(request)
        self._ensure_batcher()
        self._wake.set()
        token_ids, log_probs, reason = await request.future
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs if request.want_log_probs else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps, "finish_reason": reason},
        )

    def _ensure_batcher(self) -> None:
        if self._batcher is None or self._batcher.done():
            self._wake = asyncio.Event()
            self._batcher = asyncio.get_running_loop().create_task(self._run_batches())

    async def _run_batches(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(BATCH_WINDOW_S)
            self._wake.clear()
            pending, self._pending = self._pending, []
            groups: dict[SamplingSettings, list[_Request]] = {}
            for request in pending:
                groups.setdefault(request.settings, []).append(request)
            for settings, requests in groups.items():
                try:
                    results = await asyncio.to_thread(
                        decode_batch,
                        self.model,
                        [r.prompt_ids for r in requests],
                        [r.max_tokens for r in requests],
                        settings,
                        self.stop_ids,
                        self.pad_id,
                        self.generator,
                    )
                except Exception as error:  # every waiting request learns why
                    for request in requests:
                        if not request.future.done():
                            request.future.set_exception(error)
                    continue
                for request, result in zip(requests, results, strict=True):
                    if not request.future.done():
                        request.future.set_result(result)

    # ---- weight sync ---------------------------------------------------------------------------
    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> int:
        """Replace the model's parameters with the trainer's; returns how many tensors were loaded.

        Every key must be a parameter or buffer of the model, and every parameter must be given
        (or tied to one that is): a partial sync would silently roll out a mix of policies."""
        # verl sends Qwen-style MoE experts one by one under the checkpoint's names (cpu_backend/moe_weights.py)
        state_dict = pack_expert_weights(state_dict, dict(self.model.named_parameters()))
        missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
        tied = {
            name
            for name in missing
            if name.endswith("lm_head.weight") and getattr(self.model.config, "tie_word_embeddings", False)
        }
        if unexpected or set(missing) - tied:
            raise ValueError(
                f"weight sync does not match the rollout model: unexpected {sorted(unexpected)[:5]}, "
                f"missing {sorted(set(missing) - tied)[:5]}"
            )
        if tied:
            self.model.tie_weights()
        return len(state_dict)

    def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    # ---- lifecycle calls of verl's replica API: nothing to free or resume on CPU ----------------
    async def wake_up(self, tags: list[str] | None = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        while self._pending:
            await asyncio.sleep(BATCH_WINDOW_S)

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict[str, Any]:
        # Requests decode to completion (no partial rollout on CPU): nothing is ever aborted.
        return {"aborted_count": 0, "request_ids": []}

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict[str, Any]:
        return {"aborted": False, "request_id": request_id}

    async def resume_generation(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None
