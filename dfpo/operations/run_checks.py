"""``python -m dfpo.operations.run_checks LOG.jsonl --steps N`` — did a short training run do what it should?

Reads verl's file log of one launch and checks, printing one PASS/FAIL line each:

* every step 1..N was logged (a resumed run that silently trained 0 steps fails here);
* the reward was computed (``critic/score/mean``) and the gradient is finite at every step and
  non-zero at every step with a learning signal (``actor/grad_norm``). A step whose groups all
  scored alike (every advantage 0: ``critic/advantages/max`` = ``min`` = 0, e.g. no response of a
  weak model right) has a zero gradient by construction; at least one step must have a signal;
* for DFPO (``--dfpo``): the shared tokens get no net gradient, measured on the loss's own
  gradient (``actor/dfpo/shared_token_grad_residual``, :mod:`dfpo.verl.residual_meters`) below
  :func:`shared_gradient_tolerance` of the log-probs' dtype, on the steps where a mini-batch held
  a whole group sharing a prefix; where none did, the weights' residual
  (``actor/dfpo/cancellation_residual_after`` < 1e-6), and the line says so;
* ``--old-log-probs recomputed|rollout``: whether the DFPO worker found the old log-probs
  recomputed by the actor (the default) or copied from the rollout (verl's rollout-correction
  bypass mode) — ``actor/dfpo/old_log_probs_recomputed`` = 1 or 0;
* the rollout-vs-actor log-prob gap: ``training/rollout_probs_diff_max``, the largest per-token
  |log p_rollout - log p_actor| of a step, below the bound of the run's rollout numerics
  (``--rollout-numerics``, bounds in :data:`ROLLOUT_GAP_BOUNDS`). It is the number that shows the
  actor's weights reached the rollout: a sync that did not arrive leaves the rollout sampling
  with the previous weights, and the gap becomes the size of an update. In bypass mode
  (``--old-log-probs rollout``) the actor does not recompute them and verl logs no gap; it is
  judged only if logged. At bf16 a per-token bound cannot tell a rollout one small update behind
  from the engines' own differences, hence:
* ``--weight-sync``: every step's rollout sampled with the weights of the update before it,
  judged against the size of that update (:func:`_weight_sync_check`; the run needs
  ``actor_rollout_ref.actor.policy_loss.dfpo_measure_update_kl=true``).

Used by ``scripts/gpu_smoke.sh``; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from dfpo.operations.training_logs import MEASURED_RESIDUAL, TrainingLog, read_file_log

WEIGHT_RESIDUAL_TOLERANCE = 1e-6  # the weights' residual is computed in float64 (rounding: 1e-15 and below)


def shared_gradient_tolerance(eps: float) -> float:
    """The largest shared-token residual that is rounding, for log-probs of machine epsilon ``eps``.

    float32 (eps 1.2e-7): measured at 2-3e-8 through verl's trainer on CPU (the tiny recipe, 2 ranks);
    GSPO's weights and the no-stop-grad ablation leave more than 1e-3 (the ablation about 1e-2;
    tests/dfpo/test_shared_token_gradient.py), so 1e-4 separates them. bfloat16 (eps 7.8e-3): one gradient
    carries 8 significant bits and a group sum of them rounds at a few 1e-3, so 5e-2 is the bound:
    it still fails GSPO-size residuals (tenths), not the ablation's 1e-2."""
    return 1e-4 if eps <= 1.2e-7 else 5e-2


# Largest allowed training/rollout_probs_diff_max, by the numerics of rollout and actor:
# - fp32: both in float32 (the CPU recipes). The two sides differ only in kernels and summation
#   order: measured on CPU up to 1.1e-4 per token with vLLM's CPU build (oneDNN GEMMs against
#   torch's) and below 1e-5 with dfpo's transformers rollout server, on the tiny model and on
#   SmolLM2-135M. The bound is ~10x the largest measured gap.
# - bf16: either side in bfloat16 (the GPU recipes: vLLM and the FSDP actor both bf16). bfloat16
#   has 8 significant bits, so one token's log-prob can move by tenths of a nat between two
#   kernels (measured on CPU with a bf16 actor against a float32 rollout: 0.08-0.09 per step on
#   SmolLM2-135M). 1.0 nat still fails a rollout that samples from other weights than the actor
#   (a failed or partial sync, a wrong checkpoint or tokenizer), but not one a single small update
#   behind: on bf16 the fp32 check's precision is not available.
ROLLOUT_GAP_BOUNDS = {"fp32": 1e-3, "bf16": 1.0}

# Step-to-step spread of rollout_corr/kl in a synced run, by numerics (the weight-sync check's noise):
# - fp32: measured 2.5e-5 to 8.1e-5 over 4 steps of the tiny recipe through vLLM's CPU build, in
#   two runs (docs/exactness.md), so 1e-4;
# - bf16: measured -1.0e-3 to 1.7e-4 over 3 steps of the same recipe with a bf16 actor and a bf16
#   vLLM engine on CPU, so 2.5e-3 (GPU kernels are not measured: the first GPU smoke run prints the
#   numbers); an update is then decisive from update_kl = 0.05.
ROLLOUT_KL_SPREAD = {"fp32": 1e-4, "bf16": 2.5e-3}
SYNC_EXCESS_FRACTION = 0.1


def _values(log: TrainingLog, key: str) -> list[float]:
    series = log.get(key)
    return [] if series is None else [float(v) for v in series.values]


def _gradient_check(log: TrainingLog) -> tuple[bool, str]:
    """Finite everywhere; non-zero wherever some advantage is non-zero; at least one such step."""
    grad = log.get("actor/grad_norm")
    if grad is None or len(grad.values) == 0:
        return False, "finite non-zero gradient: actor/grad_norm not logged"
    adv_max, adv_min = log.get("critic/advantages/max"), log.get("critic/advantages/min")
    signal_steps = []
    for step, value in zip(grad.steps.tolist(), grad.values.tolist(), strict=True):
        if not math.isfinite(value):
            return False, f"finite non-zero gradient: actor/grad_norm = {value} at step {step}"
        spread = [series.values[series.steps == step] for series in (adv_max, adv_min) if series is not None]
        # without the advantage metrics every step counts as one with a signal
        has_signal = len(spread) < 2 or any(float(v[0]) != 0.0 for v in spread if len(v))
        if has_signal:
            signal_steps.append(step)
            if value <= 0:
                return (
                    False,
                    f"finite non-zero gradient: actor/grad_norm = 0 at step {step}, whose advantages are not all 0",
                )
    text = f"finite non-zero gradient: actor/grad_norm = {grad.values.tolist()}"
    if not signal_steps:
        return (
            False,
            f"{text}: no step had a learning signal (every advantage 0: all responses of each group scored alike), so "
            "the gradient was never tested; rerun with more steps",
        )
    skipped = sorted(set(grad.steps.tolist()) - set(signal_steps))
    return True, text + (f" (steps {skipped}: every advantage 0, no signal)" if skipped else "")


def _shared_token_check(log: TrainingLog) -> tuple[bool, str]:
    """DFPO's shared tokens get no net gradient: the gradient residual where a mini-batch held a
    whole group with a shared prefix; where none did (several mini-batches per step split groups),
    the weights' residual, which shows that the transform ran, and the line says so."""
    text = "DFPO gives the shared tokens no net gradient: "
    residual = _values(log, MEASURED_RESIDUAL)
    if residual:
        bound = shared_gradient_tolerance(max(_values(log, "actor/dfpo/shared_token_grad_eps") or [1.0]))
        return max(residual) < bound, text + f"{MEASURED_RESIDUAL} = {residual} (bound {bound:g})"
    weights = _values(log, "actor/dfpo/cancellation_residual_after")
    return (
        bool(weights) and max(weights) < WEIGHT_RESIDUAL_TOLERANCE,
        text + "no mini-batch held a whole group with a shared prefix, so the gradient was not measured; "
        f"the weights' actor/dfpo/cancellation_residual_after = {weights or 'not logged'} (bound "
        f"{WEIGHT_RESIDUAL_TOLERANCE:g})",
    )


def _by_step(log: TrainingLog, key: str) -> dict[int, float]:
    series = log.get(key)
    return (
        {}
        if series is None
        else {int(s): float(v) for s, v in zip(series.steps.tolist(), series.values.tolist(), strict=True)}
    )


def _weight_sync_check(log: TrainingLog, rollout_numerics: str) -> tuple[bool, str]:
    """The rollout samples with the weights the actor just trained.

    verl logs ``rollout_corr/kl``, the token mean of log π_rollout − log π_actor over each step's
    samples (the actor's log-probs at the parameters the step starts from). At step 1 no update
    has happened, so its value is the two engines' numerics alone. A rollout one update behind
    samples at step k from π_{k−1} and shows, above that, KL(π_{k−1} ‖ π_k), the size of the
    previous step's update, which the worker measures as ``actor/dfpo/update_kl``
    (``dfpo_measure_update_kl=true``; ½ mean squared log-ratio on that step's samples). So at
    every step k ≥ 2

        excess_k = kl_k − kl_1  <  SYNC_EXCESS_FRACTION · update_kl_{k−1}

    Measured on the tiny CPU recipe (fp32, vLLM's CPU build, docs/exactness.md): synced,
    |excess| / update_kl ≤ 1.4e-3 over 3 steps; with the sync skipped, 1.8 one update behind and
    1.6-3.1 further behind. :data:`SYNC_EXCESS_FRACTION` = 0.1 sits between with a margin both
    ways. Where the update is too small for that (its tenth below twice the numerics' step-to-step
    spread of kl, :data:`ROLLOUT_KL_SPREAD`), an excess above twice the spread still shows a
    rollout on other weights; one within it decides nothing. At least one step must decide."""
    text = "weights reached the rollout (rollout_corr/kl above step 1's, against the previous update's KL): "
    kl, update = _by_step(log, "rollout_corr/kl"), _by_step(log, "actor/dfpo/update_kl")
    if 1 not in kl or not update:
        missing = (
            "rollout_corr/kl at step 1"
            if 1 not in kl
            else "actor/dfpo/update_kl (set actor_rollout_ref.actor.policy_loss.dfpo_measure_update_kl=true)"
        )
        return False, text + f"{missing} not logged"
    spread = ROLLOUT_KL_SPREAD[rollout_numerics]
    decisive, lines = [], []
    for step in sorted(k for k in kl if k >= 2 and k - 1 in update):
        excess, bound = kl[step] - kl[1], SYNC_EXCESS_FRACTION * update[step - 1]
        if excess >= max(bound, 2 * spread):
            decisive.append(False)
            lines.append(f"step {step}: excess {excess:.3g} vs {bound:.3g} (one update behind or more)")
        elif bound >= 2 * spread:
            decisive.append(True)
            lines.append(f"step {step}: excess {excess:.3g} vs {bound:.3g}")
        else:
            lines.append(
                f"step {step}: excess {excess:.3g}, update_kl {update[step - 1]:.2g} too small to tell at "
                f"{rollout_numerics} (spread {spread:g}), not decisive"
            )
    if not decisive:
        return False, text + "; ".join(
            lines or ["no step after step 1 logged both"]
        ) + "; no decisive step: run more steps or a larger LR"
    return all(decisive), text + "; ".join(lines)


def check_run(
    log: TrainingLog,
    steps: int,
    dfpo: bool,
    old_log_probs: str | None,
    rollout_numerics: str = "bf16",
    weight_sync: bool = False,
) -> list[tuple[bool, str]]:
    """(passed, description) for each check of a run expected to log steps 1..``steps``."""
    results = []
    logged = sorted({int(s) for series in log.values() for s in series.steps})
    expected = list(range(1, steps + 1))
    results.append((all(s in logged for s in expected), f"steps {expected[0]}..{expected[-1]} logged (found {logged})"))
    score = _values(log, "critic/score/mean")
    results.append(
        (bool(score) and all(math.isfinite(v) for v in score), f"reward computed: critic/score/mean = {score}")
    )
    results.append(_gradient_check(log))
    if dfpo:
        results.append(_shared_token_check(log))
    if old_log_probs is not None:
        flag = _values(log, "actor/dfpo/old_log_probs_recomputed")
        want = 1.0 if old_log_probs == "recomputed" else 0.0
        results.append(
            (
                bool(flag) and all(v == want for v in flag),
                f"old log-probs {old_log_probs}: actor/dfpo/old_log_probs_recomputed = {flag}",
            )
        )
    if weight_sync:
        results.append(_weight_sync_check(log, rollout_numerics))
    gap = _values(log, "training/rollout_probs_diff_max")
    bound = ROLLOUT_GAP_BOUNDS[rollout_numerics]
    if not gap and old_log_probs == "rollout":
        # bypass mode: the actor never recomputes the log-probs, so verl has no gap to log
        results.append(
            (
                True,
                "rollout log-probs vs the actor's: not computed in bypass mode (the rollout's are the old log-probs)",
            )
        )
        return results
    results.append(
        (
            bool(gap) and all(math.isfinite(v) and v < bound for v in gap),
            f"rollout log-probs match the actor's ({rollout_numerics} bound {bound:g}): "
            f"training/rollout_probs_diff_max = {gap or 'not logged'}",
        )
    )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dfpo.operations.run_checks", description=__doc__.split("\n\n", 1)[0]
    )
    parser.add_argument(
        "log", type=Path, help="verl's file log of the launch (<OUTPUT_ROOT>/logs/<project>/<experiment>.<time>.jsonl)"
    )
    parser.add_argument("--steps", type=int, required=True, help="the run's TOTAL_TRAINING_STEPS")
    parser.add_argument("--dfpo", action="store_true", help="the run used the dfpo loss")
    parser.add_argument(
        "--old-log-probs", choices=("recomputed", "rollout"), help="where the old log-probs must have come from"
    )
    parser.add_argument(
        "--rollout-numerics",
        choices=sorted(ROLLOUT_GAP_BOUNDS),
        default="bf16",
        help="fp32: rollout and actor both float32 (CPU recipes); bf16 (default): either in bfloat16 (GPU recipes)",
    )
    parser.add_argument(
        "--weight-sync",
        action="store_true",
        help="check that each step's rollout sampled with the weights of the step before (needs "
        "dfpo_measure_update_kl=true)",
    )
    args = parser.parse_args(argv)
    try:
        log = read_file_log(args.log)
    except (OSError, ValueError) as error:
        print(f"FAIL  cannot read {args.log}: {error}")
        return 1
    results = check_run(log, args.steps, args.dfpo, args.old_log_probs, args.rollout_numerics, args.weight_sync)
    for passed, text in results:
        print(f"{'PASS' if passed else 'FAIL'}  {text}")
    return 0 if all(passed for passed, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
