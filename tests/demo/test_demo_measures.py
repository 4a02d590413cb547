"""Unit tests of the demo's task rules and measures (labelled cases, no training)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from demo.group_sampling import sample_groups
from demo.measures import (
    cancellation_sums,
    group_common_prefix_lengths,
    header_drift,
    length_reward_correlation,
    read_probe,
)
from demo.policy_model import build_policy, response_logits, token_log_probs
from demo.task import (
    DIGIT_OFFSET,
    EOS,
    HEADER_LEN,
    HEADER_TOKENS,
    NO,
    RESPONSE_LEN,
    YES,
    all_prompts,
    make_prompts,
    outcome_reward,
)


def _response(free: list[int]) -> tuple[list[int], list[float]]:
    tokens = list(HEADER_TOKENS) + free
    mask = [1.0] * len(tokens)
    pad = RESPONSE_LEN - len(tokens)
    return tokens + [EOS] * pad, mask + [0.0] * pad


def test_reward_rule_labelled_cases():
    digit_3 = DIGIT_OFFSET + 3
    cases = [
        (_response([YES, digit_3, EOS]), YES, 1.0),  # correct and ended
        (_response([YES, EOS]), YES, 1.0),  # correct, no filler
        (_response([NO, digit_3, EOS]), YES, 0.0),  # wrong answer
        (_response([EOS]), NO, 0.0),  # no answer at all
        (_response([YES] + [digit_3] * 7), YES, 0.0),  # cut off at the length limit: no EOS
        (_response([digit_3, YES, EOS]), YES, 0.0),  # the answer must come first
    ]
    responses = torch.tensor([c[0][0] for c in cases])
    mask = torch.tensor([c[0][1] for c in cases])
    answer = torch.tensor([c[1] for c in cases])
    assert outcome_reward(responses, mask, answer).tolist() == [c[2] for c in cases]


def test_prompts_answer_parity():
    prompts = all_prompts()
    assert prompts.tokens.shape == (8, 2)
    assert prompts.answer.tolist() == [NO, YES, NO, YES, NO, YES, NO, YES]
    try:
        make_prompts(torch.tensor([8]))
    except ValueError as err:
        assert "0..7" in str(err)
    else:
        raise AssertionError("a digit outside 0..7 must be rejected")


def test_common_prefix_lengths_labelled():
    responses = torch.tensor(
        [
            [2, 3, 4, 5, 10, 0],  # group 0
            [2, 3, 4, 5, 10, 14],
            [2, 3, 4, 5, 11, 0],
            [2, 3, 9, 5, 10, 0],  # group 1: differs at position 2
            [2, 3, 4, 5, 10, 0],
        ]
    )
    mask = torch.ones_like(responses, dtype=torch.float32)
    mask[0, 5] = 0.0  # padding ends the common prefix even where the ids agree
    group = torch.tensor([0, 0, 0, 1, 1])
    assert group_common_prefix_lengths(responses, mask, group).tolist() == [4, 4, 4, 2, 2]


def test_cancellation_sums_labelled():
    # Two groups; shared prefix 2 positions in group 0 and 1 position in group 1.
    coef = torch.tensor(
        [
            [1.0, -2.0, 5.0],
            [-1.0, 1.0, 7.0],  # group 0, position 0 cancels, position 1 nets -1
            [3.0, 9.0, 9.0],
            [1.0, 9.0, 9.0],  # group 1, position 0 nets 4
        ]
    )
    prefix = torch.tensor([2, 2, 1, 1])
    group = torch.tensor([0, 0, 1, 1])
    sums = cancellation_sums(coef, prefix, group)
    assert sums.net == 0.0 + 1.0 + 4.0
    assert sums.magnitude == 2.0 + 3.0 + 4.0
    assert sums.shared_positions == 3
    assert abs(sums.residual - 5.0 / 9.0) < 1e-12
    none = cancellation_sums(torch.zeros(2, 3), torch.tensor([2, 2]), torch.tensor([0, 0]))
    assert none.residual is None


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(2, 6), min_size=1, max_size=4),
    prefix=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
    scale=st.floats(1e-3, 1e3),
)
def test_cancellation_sums_properties(sizes, prefix, seed, scale):
    """residual ∈ [0, 1]; unchanged by a positive scale; 0 for weights of the form Â_i·w with Σ Â_i = 0."""
    generator = torch.Generator().manual_seed(seed)
    group = torch.cat([torch.full((n,), g) for g, n in enumerate(sizes)])
    coef = torch.randn(len(group), 5, generator=generator, dtype=torch.float64)
    common = torch.full((len(group),), prefix)
    residual = cancellation_sums(coef, common, group).residual
    assert 0.0 <= residual <= 1.0 + 1e-12
    assert abs(cancellation_sums(coef * scale, common, group).residual - residual) < 1e-9
    adv = torch.randn(len(group), generator=generator, dtype=torch.float64)
    for g in range(len(sizes)):
        adv[group == g] -= adv[group == g].mean()
    cancelling = adv.unsqueeze(1) * torch.rand(1, 5, generator=generator, dtype=torch.float64)
    assert cancellation_sums(cancelling, common, group).residual < 1e-12
    same_sign = coef.abs()
    assert abs(cancellation_sums(same_sign, common, group).residual - 1.0) < 1e-12


def test_length_reward_correlation_labelled():
    assert abs(length_reward_correlation(torch.tensor([5.0, 7.0, 9.0]), torch.tensor([1.0, 0.5, 0.0])) + 1.0) < 1e-12
    assert length_reward_correlation(torch.tensor([5.0, 7.0]), torch.tensor([1.0, 1.0])) is None


def test_shared_positions_have_one_gradient_vector():
    """The residual's premise: at a shared position every member's ∇θ log π is the same vector."""
    torch.manual_seed(0)
    model = build_policy(seed=3)
    rollout = sample_groups(
        model, make_prompts(torch.tensor([2, 5])), group_size=4, generator=torch.Generator().manual_seed(1)
    )
    log_prob = token_log_probs(response_logits(model, rollout.prompts, rollout.responses), rollout.responses)
    params = [p for p in model.parameters() if p.requires_grad]
    for t in range(HEADER_LEN):
        grads = [
            torch.cat([g.reshape(-1) for g in torch.autograd.grad(log_prob[i, t], params, retain_graph=True)])
            for i in (4, 6)
        ]
        assert torch.allclose(grads[0], grads[1], rtol=1e-5, atol=1e-7)
        assert torch.allclose(log_prob[4:8, t], log_prob[4, t].expand(4), rtol=0, atol=1e-6)


def test_probe_drift_is_zero_for_the_same_policy_and_positive_after_a_change():
    """Drift compares with the initial reading: zero for an unchanged policy, positive after a change."""
    model = build_policy(seed=0)
    probe = all_prompts()
    first = read_probe(model, probe)
    assert header_drift(read_probe(model, probe), first) == (0.0, 0.0)
    with torch.no_grad():
        model.lm_head.weight[HEADER_TOKENS[0]] += 0.5
    moved, signed = header_drift(read_probe(model, probe), first)
    assert moved > 0 and abs(signed) <= moved
