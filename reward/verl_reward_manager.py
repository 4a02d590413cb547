"""verl's naive reward manager, telling the reward which responses were cut off at the length cap.

verl 0.9.1's reward managers hand the reward only the decoded text, and decode with
``skip_special_tokens=True``: the end-of-turn token (Qwen3's ``<|im_end|>``, GPT-OSS's
``<|return|>``) is gone, so the text cannot show whether a thinking model finished its final
answer or ran into ``data.max_response_length``. This manager is verl's own
``NaiveRewardManager`` (reward loop, ``verl/experimental/reward_loop/reward_manager/naive.py``)
with one addition before verl's ``run_single``: it sets ``extra_info["response_truncated"]``
from the token ids — the response fills the whole response window and its last token is not a
special token (an end-of-turn token is special in both tokenizers). :mod:`reward.response_format`
scores such a response in the thinking formats as ``unfinished``; the ``plain`` format ignores it.

Selected in verl 0.9.1 through its importlib source (``dfpo/config/recipe_defaults.yaml``)::

    reward.reward_manager.source=importlib
    reward.reward_manager.name=TruncationAwareRewardManager
    reward.reward_manager.module.path=<repo>/reward/verl_reward_manager.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

if __package__ in (None, ""):
    # Loaded by file path (verl's reward_manager.module.path): make the package importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reward.response_format import TRUNCATED_KEY  # noqa: E402


def response_truncated(response_ids, attention_mask, special_ids: frozenset[int]) -> bool:
    """Whether a padded response ran into the length cap without ending its turn.

    ``response_ids`` is the response window (verl pads every response to
    ``rollout.response_length``), ``attention_mask`` the mask over prompt and response.
    """
    window = int(response_ids.shape[-1])
    length = int(attention_mask[-window:].sum())
    if length < window:
        return False
    return int(response_ids[length - 1]) not in special_ids


class TruncationAwareRewardManager(NaiveRewardManager):
    """verl's naive reward manager plus ``extra_info["response_truncated"]`` (see the module doc)."""

    def __init__(self, config, tokenizer, compute_score, reward_router_address=None, reward_model_tokenizer=None):
        super().__init__(config, tokenizer, compute_score, reward_router_address, reward_model_tokenizer)
        self.special_ids = frozenset(int(i) for i in tokenizer.all_special_ids)

    async def run_single(self, data):
        last = data[-1:]  # verl's naive manager scores the last sequence of a multi-sequence output
        item = last[0]
        truncated = response_truncated(item.batch["responses"], item.batch["attention_mask"], self.special_ids)
        extra_infos = data.non_tensor_batch.get("extra_info")
        if extra_infos is None:
            extra_infos = np.array([{} for _ in range(len(data))], dtype=object)
            data.non_tensor_batch["extra_info"] = extra_infos
        info = extra_infos[-1]
        if not isinstance(info, dict):
            raise ValueError(
                f"extra_info of a sample is a {type(info).__name__}, not a dict: the data's extra_info column must "
                "hold one dict per row (data_prep writes {split, index, ...})"
            )
        extra_infos[-1] = {**info, TRUNCATED_KEY: truncated}
        return await super().run_single(data)
