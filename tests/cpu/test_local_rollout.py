"""The local rollout server: sampling as specified, exact log-probs, batching that changes nothing."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cpu_backend.eos_tokens import eos_token_ids
from cpu_backend.server import LocalRolloutServer, decode_batch, response_budget
from cpu_backend.token_sampling import SamplingSettings, sample_next_tokens, truncated_log_probs
from cpu_examples.tiny_model import TinyModelSpec, build_char_tokenizer, build_model, chat_prompt_ids

SMALL = TinyModelSpec(hidden_size=32, intermediate_size=64, head_dim=8, seed=3)


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_model(SMALL, tokenizer).eval()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, model, tokenizer):
    directory = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@given(
    logits=st.lists(st.floats(-8, 8, allow_nan=False), min_size=2, max_size=40),
    temperature=st.floats(0.2, 2.0),
    top_k=st.integers(-1, 45),
    top_p=st.floats(0.05, 1.0),
    seed=st.integers(0, 2**31 - 1),
)
@settings(max_examples=150, deadline=None)
def test_sampled_token_is_in_the_nucleus_and_its_log_prob_is_the_tempered_one(logits, temperature, top_k, top_p, seed):
    z = torch.tensor([logits], dtype=torch.float64).float()
    settings_ = SamplingSettings(temperature=temperature, top_k=top_k, top_p=top_p)
    token, log_prob = sample_next_tokens(z, settings_, torch.Generator().manual_seed(seed))
    scaled = torch.log_softmax(z / temperature, dim=-1)
    assert torch.allclose(log_prob, scaled[0, token], atol=1e-6)
    kept = torch.isfinite(truncated_log_probs(scaled, top_k, top_p))[0]
    assert bool(kept[token])
    probs = scaled.exp()[0]
    if 0 < top_k < len(logits):
        assert int(kept.sum()) <= top_k or bool((probs[kept].min() == probs).sum() > 1)
    if top_p < 1.0:
        # the nucleus reaches top_p and is minimal: without its least likely token it would not
        mass = float(probs[kept].sum())
        if top_k <= 0 or top_k >= len(logits):
            assert mass >= top_p - 1e-6
            assert mass - float(probs[kept].min()) < top_p + 1e-6


def test_sampling_frequencies_follow_the_truncated_tempered_distribution():
    z = torch.tensor([[2.0, 1.5, 0.5, 0.0, -1.0, -3.0]])
    settings_ = SamplingSettings(temperature=0.7, top_k=4, top_p=0.9)
    generator = torch.Generator().manual_seed(0)
    draws = 20000
    tokens, _ = sample_next_tokens(z.expand(draws, -1), settings_, generator)
    expected = torch.softmax(truncated_log_probs(torch.log_softmax(z / 0.7, dim=-1), 4, 0.9), dim=-1)[0]
    observed = torch.bincount(tokens, minlength=z.shape[-1]).float() / draws
    assert torch.allclose(observed, expected, atol=0.015), (observed, expected)


def test_greedy_takes_the_arg_max_and_reports_the_untempered_log_prob():
    z = torch.tensor([[0.1, 3.0, -2.0], [5.0, 4.9, 0.0]])
    tokens, log_probs = sample_next_tokens(z, SamplingSettings(temperature=0.0))
    assert tokens.tolist() == [1, 0]
    assert torch.allclose(log_probs, torch.log_softmax(z, -1)[[0, 1], [1, 0]])


def _teacher_forced_log_probs(model, prompt: list[int], response: list[int], temperature: float) -> torch.Tensor:
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(-1, torch.tensor(response)[:, None])[:, 0]


def test_batched_left_padded_decoding_equals_one_prompt_at_a_time_and_log_probs_are_exact(model, tokenizer):
    prompts = [chat_prompt_ids(tokenizer, text) for text in ("What is 1 + 2?", "Hi", "What is 4 + 4? Think.")]
    stops = eos_token_ids(model, tokenizer)
    greedy = SamplingSettings(temperature=0.0)
    batched = decode_batch(model, prompts, [6, 9, 4], greedy, stops, tokenizer.pad_token_id)
    for prompt, budget, result in zip(prompts, [6, 9, 4], batched, strict=True):
        alone = decode_batch(model, [prompt], [budget], greedy, stops, tokenizer.pad_token_id)[0]
        assert result[0] == alone[0]
        assert len(result[0]) <= budget
        assert result[2] == ("stop" if result[0][-1] in stops else "length")
        expected = _teacher_forced_log_probs(model, prompt, result[0], temperature=1.0)
        assert torch.allclose(torch.tensor(result[1]), expected, atol=1e-5)
    # sampled responses: the reported log-prob is the tempered one under a plain forward pass
    sampled = decode_batch(
        model,
        prompts,
        [8, 8, 8],
        SamplingSettings(temperature=0.8),
        stops,
        tokenizer.pad_token_id,
        torch.Generator().manual_seed(1),
    )
    for prompt, (tokens, log_probs, _) in zip(prompts, sampled, strict=True):
        assert torch.allclose(torch.tensor(log_probs), _teacher_forced_log_probs(model, prompt, tokens, 0.8), atol=1e-5)


def test_decoding_stops_at_the_end_of_turn_token(model, tokenizer):
    stops = eos_token_ids(model, tokenizer)
    (end,) = stops
    # make the end-of-turn token overwhelmingly likely everywhere: the response is that one token
    biased = build_model(SMALL, tokenizer).eval()
    with torch.no_grad():
        biased.lm_head.weight.zero_()
        biased.model.norm.weight.fill_(1.0)
        biased.lm_head.weight[end] += 50.0 / biased.lm_head.weight.shape[1] ** 0.5
    prompt = chat_prompt_ids(tokenizer, "x")
    tokens, _, reason = decode_batch(
        biased, [prompt], [10], SamplingSettings(temperature=0.0), stops, tokenizer.pad_token_id
    )[0]
    assert tokens == [end] and reason == "stop"


def test_response_budget_follows_verls_vllm_server_rule():
    config = SimpleNamespace(max_model_len=None, prompt_length=100, response_length=20)
    assert response_budget(30, {}, config) == 20
    assert response_budget(110, {}, config) == 10  # prompt + response budget
    assert response_budget(30, {"max_tokens": 5}, config) == 5
    assert response_budget(30, {"max_tokens": 500}, config) == 90  # never past max_model_len
    with pytest.raises(ValueError, match="no room"):
        response_budget(120, {}, config)


def test_server_batches_concurrent_requests_and_honours_the_token_contract(model_dir, tokenizer, model):
    config = SimpleNamespace(max_model_len=None, prompt_length=64, response_length=6)
    server = LocalRolloutServer(config, str(model_dir), replica_rank=0, seed=0)
    prompts = [chat_prompt_ids(tokenizer, f"What is {i} + 1?") for i in range(5)]

    async def requests():
        return await asyncio.gather(
            *[
                server.generate(
                    prompt_ids=p,
                    sampling_params={"temperature": 0, "top_p": 1.0, "top_k": -1, "logprobs": True},
                    request_id=str(i),
                )
                for i, p in enumerate(prompts)
            ],
            server.generate(
                prompt_ids=prompts[0], sampling_params={"temperature": 0, "logprobs": False}, request_id="no-logprobs"
            ),
        )

    outputs = asyncio.run(requests())
    for prompt, output in zip(prompts, outputs[:5], strict=False):
        alone = decode_batch(
            model,
            [prompt],
            [6],
            SamplingSettings(temperature=0.0),
            eos_token_ids(model, tokenizer),
            tokenizer.pad_token_id,
        )[0]
        assert output.token_ids == alone[0]
        assert len(output.log_probs) == len(output.token_ids)
        assert output.stop_reason == "completed"
    assert outputs[5].log_probs is None


def test_weight_sync_replaces_the_policy_and_refuses_a_partial_state_dict(model_dir, tokenizer):
    config = SimpleNamespace(max_model_len=None, prompt_length=64, response_length=4)
    server = LocalRolloutServer(config, str(model_dir), replica_rank=0, seed=0)
    other = build_model(TinyModelSpec(hidden_size=32, intermediate_size=64, head_dim=8, seed=4), tokenizer)
    state = {name: tensor.clone() for name, tensor in other.state_dict().items()}
    server.load_weights(state)
    for name, tensor in server.model.state_dict().items():
        assert torch.equal(tensor, state[name]), name
    partial = {name: tensor for name, tensor in state.items() if "layers.1." not in name}
    with pytest.raises(ValueError, match="missing"):
        server.load_weights(partial)
    with pytest.raises(ValueError, match="unexpected"):
        server.load_weights({**state, "model.extra.weight": torch.zeros(1)})
