"""The per-token DFPO loss (the formula) and the per-row one (production) agree, and the check has teeth.

:func:`dfpo.algorithm.loss.dfpo_loss_per_token` writes the objective token by token;
:func:`dfpo.algorithm.loss.compute_dfpo_loss` computes it from per-row sums. Both must give the same
value and the same gradient with respect to ``log_prob`` on random batches (ragged and empty rows,
groups of 1 to 5) for every option: transform, scope, stop-gradient, rollout IS weights. The
per-token form is also checked against the independent plain-loop reference (tests/dfpo/reference.py).

Each mutant below edits one line of the source of one form (the line must still be there: an edit
that no longer applies fails loudly rather than testing nothing) and must make the comparison fail.
"""

from __future__ import annotations

import inspect
import itertools
import textwrap

import pytest
import torch

import dfpo.algorithm.loss as loss_module
from dfpo.algorithm.loss import compute_dfpo_loss, dfpo_loss_per_token
from tests.dfpo.batches import random_batch
from tests.dfpo.reference import reference_dfpo_loss

TRANSFORMS = ["min_replace", "orth_proj", "scale", "none"]
OPTIONS = list(itertools.product(TRANSFORMS, ["all", "shared_prefix"], [True, False], [False, True]))
SEEDS = range(6)  # seed 5 holds a group of one


def _grad(loss: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
    if not loss.requires_grad:
        return torch.zeros_like(leaf)
    (g,) = torch.autograd.grad(loss, leaf, allow_unused=True)
    return torch.zeros_like(leaf) if g is None else g


def _value_and_grad(loss_fn, b, transform, scope, stop_grad, with_is, **extra):
    kw = dict(transform=transform, scope=scope, stop_grad=stop_grad, scale=0.5, **b.kwargs(with_is), **extra)
    out = loss_fn(b.old_log_prob, b.log_prob, b.advantages, b.response_mask, b.group_index, **kw)
    loss = out[0] if isinstance(out, tuple) else out
    return loss.detach().double(), _grad(loss, b.log_prob).double()


def _per_row(*args, **kw):
    return compute_dfpo_loss(*args, **kw)[0]


def _disagreement(per_token, per_row, seed, options) -> str | None:
    """None when both forms agree on the batch of ``seed``, else what differs."""
    b = random_batch(seed)
    value_t, grad_t = _value_and_grad(per_token, b, *options)
    value_r, grad_r = _value_and_grad(per_row, b, *options)
    if not torch.allclose(value_t, value_r, rtol=1e-9, atol=1e-12):
        return f"value {float(value_t)} != {float(value_r)}"
    if not torch.allclose(grad_t, grad_r, rtol=1e-8, atol=1e-12):
        return f"gradient differs by up to {float((grad_t - grad_r).abs().max()):.3g}"
    return None


def test_the_random_batches_cover_empty_rows_singletons_and_shared_prefixes():
    batches = [random_batch(seed) for seed in SEEDS]
    assert any(bool((b.response_mask.sum(-1) == 0).any()) for b in batches)
    assert any(bool((torch.unique(b.group_index, return_counts=True)[1] == 1).any()) for b in batches)
    assert any(bool((torch.unique(b.group_index, return_counts=True)[1] >= 3).any()) for b in batches)


@pytest.mark.parametrize("transform,scope,stop_grad,with_is", OPTIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_per_token_and_per_row_forms_agree(seed, transform, scope, stop_grad, with_is):
    b = random_batch(seed)
    value_t, grad_t = _value_and_grad(dfpo_loss_per_token, b, transform, scope, stop_grad, with_is)
    value_r, grad_r = _value_and_grad(_per_row, b, transform, scope, stop_grad, with_is)
    torch.testing.assert_close(value_t, value_r, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad_t, grad_r, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("transform,scope,stop_grad,with_is", OPTIONS)
@pytest.mark.parametrize("seed", range(2))
def test_per_token_form_matches_the_plain_loop_reference(seed, transform, scope, stop_grad, with_is):
    b = random_batch(seed)
    value_t, grad_t = _value_and_grad(dfpo_loss_per_token, b, transform, scope, stop_grad, with_is)
    ref = torch.as_tensor(
        reference_dfpo_loss(
            b.old_log_prob,
            b.log_prob,
            b.advantages,
            b.response_mask,
            b.group_index,
            transform=transform,
            scope=scope,
            stop_grad=stop_grad,
            scale=0.5,
            **b.kwargs(with_is),
        ),
        dtype=torch.float64,
    )
    torch.testing.assert_close(value_t, ref.detach(), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad_t, _grad(ref, b.log_prob).double(), rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("transform", ["min_replace", "orth_proj"])
def test_the_forms_agree_with_a_global_normaliser_data_parallel_scale_and_float32(transform):
    b = random_batch(3)
    extra = dict(num_sequences=11, dp_size=4)
    for options in ((transform, "shared_prefix", True, True), (transform, "all", False, False)):
        value_t, grad_t = _value_and_grad(dfpo_loss_per_token, b, *options, **extra)
        value_r, grad_r = _value_and_grad(_per_row, b, *options, **extra)
        torch.testing.assert_close(value_t, value_r, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(grad_t, grad_r, rtol=1e-8, atol=1e-12)
    b32 = random_batch(3, dtype=torch.float32)
    value_t, grad_t = _value_and_grad(dfpo_loss_per_token, b32, transform, "all", True, True)
    value_r, grad_r = _value_and_grad(_per_row, b32, transform, "all", True, True)
    torch.testing.assert_close(value_t, value_r, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad_t, grad_r, rtol=1e-5, atol=1e-6)


def _mutant(func, old: str, new: str):
    """``func`` of dfpo.algorithm.loss with the one occurrence of ``old`` in its source replaced by ``new``."""
    source = textwrap.dedent(inspect.getsource(func))
    assert source.count(old) == 1, f"the mutant's line {old!r} is no longer in {func.__name__}: update the mutant"
    namespace = dict(vars(loss_module))
    exec(compile(source.replace(old, new), f"<mutant of {func.__name__}>", "exec"), namespace)
    return namespace[func.__name__]


def _caught(per_token, per_row) -> bool:
    """Whether the comparison fails on at least one of the random batches and options."""
    return any(_disagreement(per_token, per_row, seed, options) for seed in SEEDS for options in OPTIONS)


PER_TOKEN_MUTANTS = {
    "forgets the stop-gradient": ("weights = weights.detach()", "weights = weights"),
    "aggregates as verl's seq-mean-token-mean": (
        "token_loss.sum() / num_sequences",
        "(token_loss.sum(dim=-1) / length.clamp(min=1.0)).sum() / num_sequences",
    ),
    "transforms every token's weight whatever the scope": (
        "torch.where(in_scope, transformed.unsqueeze(-1), weights.unsqueeze(-1))",
        "transformed.unsqueeze(-1).expand_as(mask)",
    ),
    "drops the rollout IS weights": (
        "rho = 1.0 if rollout_is_weights is None else rollout_is_weights.to(torch.float64)",
        "rho = 1.0",
    ),
    "clips the gradient as verl's gspo": (
        "* unit_ratio * mask",
        "* torch.where((((seq_adv > 0) & (log_s > 0.18)) | ((seq_adv < 0) & (log_s < -0.22))).unsqueeze(-1),"
        " unit_ratio.detach(), unit_ratio) * mask",
    ),
    "counts empty rows in N": ("max(int(valid.sum()), 1)", "max(len(valid), 1)"),
}

PER_ROW_MUTANTS = {
    # (function of dfpo.algorithm.loss, line, replacement)
    "drops the no-stop-grad coefficients": (
        "dfpo_loss_from_group_weights",
        "if group_weights.grad_coef is not None:",
        "if False:",
    ),
    "gives the tokens after the prefix W̃ in the gradient": (
        "dfpo_loss_from_group_weights",
        "total = total + (k_out.to(acc)",
        "total = total + (k_in.to(acc)",
    ),
    "gives the tokens in scope W in the value": (
        "dfpo_loss_from_group_weights",
        "value = (k_in * sums.mass_in",
        "value = (k_out * sums.mass_in",
    ),
    "counts empty rows in N": (
        "compute_dfpo_loss",
        "num_sequences = max(int((sums.length > 0).sum()), 1)",
        "num_sequences = max(len(sums.length), 1)",
    ),
}


def test_the_unmutated_forms_agree_on_every_case():
    assert not _caught(dfpo_loss_per_token, _per_row)


@pytest.mark.parametrize("name", list(PER_TOKEN_MUTANTS))
def test_a_mutant_of_the_per_token_form_is_caught(name):
    old, new = PER_TOKEN_MUTANTS[name]
    assert _caught(_mutant(dfpo_loss_per_token, old, new), _per_row), f"per-token mutant survived: {name}"


@pytest.mark.parametrize("name", list(PER_ROW_MUTANTS))
def test_a_mutant_of_the_per_row_form_is_caught(name, monkeypatch):
    func_name, old, new = PER_ROW_MUTANTS[name]
    monkeypatch.setattr(loss_module, func_name, _mutant(getattr(loss_module, func_name), old, new))
    assert _caught(dfpo_loss_per_token, lambda *a, **kw: loss_module.compute_dfpo_loss(*a, **kw)[0]), (
        f"per-row mutant survived: {name}"
    )
