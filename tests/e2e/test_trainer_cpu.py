"""The main job end to end: verl's whole trainer through the tiny CPU recipes.

Each run is a user's command — ``bash recipes/run_<method>_tiny_cpu.sh`` with environment knobs —
so everything between the shell and the optimizer step is under test: the launcher, data_prep's
parquet, the tiny model build, ``python -m dfpo.main``, Ray, verl's TaskRunner, TransferQueue,
the agent loop on verl's own vLLM rollout (``vLLMReplica`` / ``vLLMHttpServer`` on vLLM's CPU
build, one replica per rank), ``reward/score.py`` through verl's reward manager, old log-probs,
DFPO's exact update on 2 gloo ranks, verl's weight sync from the actor into vLLM, validation,
checkpoints and resume. The reward-fault run uses dfpo's local rollout server instead (what it
tests is the reward path, and the local server starts a minute faster).

The runs share one OUTPUT_ROOT, as a user's runs do (the model and data are built once).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dfpo.run_checks import ROLLOUT_GAP_BOUNDS
from tests.e2e.recipe_runs import REPO_ROOT, file_log_steps, run_command, run_recipe

pytestmark = pytest.mark.slow

STEPS, RESUMED_STEPS = 3, 4
VLLM = {"ROLLOUT_NAME": "vllm"}
# verl's vLLM server announces itself in the driver's output (Ray prefixes each actor's lines)
VLLM_SERVER_MARK = "(vLLMHttpServer pid="
# A whole run on 2 cores takes 1-2 minutes; far beyond that something hangs (the known one:
# verl's TaskRunner waiting forever in TransferQueue's init).
RUN_TIMEOUT_S = 600
DFPO_EXPERIMENT = "dfpo_min_replace-tiny_cpu-g8-seed1"
GSPO_EXPERIMENT = "gspo-tiny_cpu-g8-seed1"


def _training_steps(steps: dict[int, dict]) -> list[int]:
    return sorted(step for step, metrics in steps.items() if "actor/grad_norm" in metrics)


def _check_exit(run) -> None:
    assert run.returncode == 0, f"recipe exited with {run.returncode}:\n{run.tail()}"


def _check_served_by_vllm(run) -> None:
    assert VLLM_SERVER_MARK in run.output, "the run was not served by verl's vLLMHttpServer:\n" + run.tail()


@pytest.fixture(scope="module")
def output_root(tmp_path_factory):
    return tmp_path_factory.mktemp("dfpo_runs")


@pytest.fixture(scope="module")
def dfpo_run(output_root):
    run = run_recipe(
        "run_dfpo_min_replace_tiny_cpu.sh",
        {"OUTPUT_ROOT": str(output_root), "TOTAL_TRAINING_STEPS": str(STEPS), "GPUS_PER_NODE": "2", **VLLM},
        timeout_s=RUN_TIMEOUT_S,
    )
    _check_exit(run)
    _check_served_by_vllm(run)
    return run


@pytest.fixture(scope="module")
def resumed_run(output_root, dfpo_run):
    before = set(file_log_steps(output_root / "logs" / "dfpo"))
    run = run_recipe(
        "run_dfpo_min_replace_tiny_cpu.sh",
        {"OUTPUT_ROOT": str(output_root), "TOTAL_TRAINING_STEPS": str(RESUMED_STEPS), "GPUS_PER_NODE": "2", **VLLM},
        timeout_s=RUN_TIMEOUT_S,
    )
    _check_exit(run)
    _check_served_by_vllm(run)
    new_logs = {path: steps for path, steps in file_log_steps(output_root / "logs" / "dfpo").items() if path not in before}
    return run, new_logs


@pytest.fixture(scope="module")
def gspo_run(output_root):
    run = run_recipe(
        "run_gspo_tiny_cpu.sh",
        {"OUTPUT_ROOT": str(output_root), "TOTAL_TRAINING_STEPS": "2", "GPUS_PER_NODE": "1", **VLLM},
        timeout_s=RUN_TIMEOUT_S,
    )
    _check_exit(run)
    _check_served_by_vllm(run)
    return run


def _dfpo_log(output_root) -> dict[int, dict]:
    logs = [steps for path, steps in file_log_steps(output_root / "logs" / "dfpo").items() if path.name.startswith(DFPO_EXPERIMENT + ".")]
    assert logs, f"no file log of {DFPO_EXPERIMENT} under {output_root / 'logs' / 'dfpo'}"
    return logs[0]


def test_dfpo_run_logs_every_step_with_learning_signal(dfpo_run, output_root):
    steps = _dfpo_log(output_root)
    assert _training_steps(steps) == list(range(1, STEPS + 1))
    first = steps[1]
    # Mixed rewards at step 1: a policy that is always right or always wrong has zero advantages
    # and the update would be a no-op, so the run would pass without testing it.
    assert 0.0 < first["critic/score/mean"] < 1.0
    assert first["actor/grad_norm"] > 0.0 and math.isfinite(first["actor/grad_norm"])


def test_dfpo_run_cancels_the_drift_exactly(dfpo_run, output_root):
    steps = _dfpo_log(output_root)
    for step in _training_steps(steps):
        metrics = steps[step]
        assert any(key.startswith("actor/dfpo/") for key in metrics)
        assert metrics["actor/dfpo/cancellation_residual_after"] < 1e-6, step
        # a step whose groups all have equal rewards has nothing to cancel (both residuals 0)
        assert metrics["actor/dfpo/cancellation_residual_before"] >= metrics["actor/dfpo/cancellation_residual_after"], step
    # step 1 has mixed rewards (see above), so GSPO's weights leave a residual the transform removes
    assert steps[1]["actor/dfpo/cancellation_residual_before"] > 1e-4


def test_rollout_log_probs_match_the_actor_after_weight_sync(dfpo_run, output_root):
    steps = _dfpo_log(output_root)
    # Step 2 and later roll out with weights synced from the trained actor into vLLM: a sync that
    # did not reach the rollout would show as a log-prob gap of the size of the update. Both sides
    # are float32, so the gap is kernel rounding only (dfpo.run_checks states the bound's basis).
    for step in _training_steps(steps):
        assert steps[step]["training/rollout_probs_diff_max"] < ROLLOUT_GAP_BOUNDS["fp32"], step


def test_validation_runs_before_and_after_training(dfpo_run, output_root):
    steps = _dfpo_log(output_root)
    assert any(key.startswith("val-core/") for key in steps[0])
    assert any(key.startswith("val-core/") for key in steps[STEPS])


def test_checkpoint_of_every_rank(dfpo_run, output_root):
    experiment = output_root / "checkpoints" / "dfpo" / DFPO_EXPERIMENT
    assert (experiment / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    actor = experiment / f"global_step_{STEPS}" / "actor"
    for rank in range(2):
        for kind in ("model", "optim", "extra_state"):
            assert (actor / f"{kind}_world_size_2_rank_{rank}.pt").is_file(), f"{kind} of rank {rank} missing in {actor}"


def test_resume_continues_at_the_next_step(resumed_run, output_root):
    run, new_logs = resumed_run
    assert len(new_logs) == 1, f"expected one new file log, got {sorted(map(str, new_logs))}"
    (steps,) = new_logs.values()
    # Resumes that silently train nothing and exit 0 are a known failure of verl setups.
    assert _training_steps(steps) == list(range(STEPS + 1, RESUMED_STEPS + 1)), run.tail()
    experiment = output_root / "checkpoints" / "dfpo" / DFPO_EXPERIMENT
    assert (experiment / "latest_checkpointed_iteration.txt").read_text().strip() == str(RESUMED_STEPS)


def test_gspo_baseline_runs_through_the_same_path_on_one_rank(gspo_run, output_root):
    logs = [steps for path, steps in file_log_steps(output_root / "logs" / "dfpo").items() if path.name.startswith(GSPO_EXPERIMENT + ".")]
    assert len(logs) == 1
    steps = logs[0]
    assert _training_steps(steps) == [1, 2]
    first = steps[1]
    assert 0.0 < first["critic/score/mean"] < 1.0 and first["actor/grad_norm"] > 0.0
    # The baseline gets DFPO's learning-tax diagnostics but no transform.
    assert "actor/dfpo/cancellation_residual_before" in first
    actor = output_root / "checkpoints" / "dfpo" / GSPO_EXPERIMENT / "global_step_2" / "actor"
    assert (actor / "model_world_size_1_rank_0.pt").is_file()


@pytest.fixture(scope="module")
def faulty_reward_run(output_root):
    run = run_recipe(
        "run_dfpo_min_replace_tiny_cpu.sh",
        {
            "OUTPUT_ROOT": str(output_root), "TOTAL_TRAINING_STEPS": "2", "GPUS_PER_NODE": "1",
            "EXPERIMENT_NAME": "faulty-reward", "ROLLOUT_NAME": "local",
        },
        args=(
            f"reward.custom_reward_function.path='{REPO_ROOT / 'tests' / 'e2e' / 'faulty_reward.py'}'",
            "+reward.custom_reward_function.reward_kwargs.call_timeout_s=3",
        ),
        timeout_s=RUN_TIMEOUT_S,
    )
    _check_exit(run)
    return run


def test_a_reward_that_raises_or_hangs_is_bounded_scored_zero_counted_and_training_goes_on(faulty_reward_run, output_root):
    logs = [steps for path, steps in file_log_steps(output_root / "logs" / "dfpo").items() if path.name.startswith("faulty-reward.")]
    assert len(logs) == 1
    steps = logs[0]
    assert _training_steps(steps) == [1, 2], faulty_reward_run.tail()
    # validation holds 0+0 (raises) and 4+3 (hangs) among its 5 problems: 2 of 5 failed and were counted
    failed = steps[2]["val-aux/arithmetic_test/scorer_failed/mean@4"]
    assert failed == pytest.approx(2 / 5)
    assert "injected scorer fault" in faulty_reward_run.output
    assert "did not return within 3 s" in faulty_reward_run.output


@pytest.mark.skip(reason="the SmolLM2 quickstart takes ~12 min and is not yet verified through this test (issue 18 open)")
def test_the_readmes_first_command_runs_the_pipeline_on_the_pretrained_model(tmp_path):
    """``bash scripts/quickstart.sh`` (set-up, SmolLM2-135M-Instruct converted from the wheel, the
    sums task, both methods trained, merged, evaluated on the held-out sums, report and
    ``report/quickstart.json``), shortened by its own options to one step on one rank and 2 samples
    per problem. Whether the loop learns is tests/e2e/test_learning_cpu.py's question."""
    import json

    root = tmp_path / "quickstart"
    run = run_command(
        ["bash", "scripts/quickstart.sh", "--steps", "1", "--ranks", "1", "--k", "2", "--output-root", str(root)],
        {},
        timeout_s=2 * RUN_TIMEOUT_S,
    )
    assert run.returncode == 0, run.tail()
    for stage in range(1, 6):
        assert f"stage {stage}/5" in run.output
    assert "step 1/1: train reward" in run.output and "validation after step 0: held-out accuracy" in run.output
    model = root / "models" / "smollm2_135m_instruct"
    assert "Apache License" in (model / "LICENSE").read_text()
    tokenizer_config = json.loads((model / "tokenizer_config.json").read_text())
    assert tokenizer_config["eos_token"] == tokenizer_config["pad_token"] == "<|im_end|>"
    report = root / "report"
    table = (report / "table1.md").read_text()
    for row in ("DFPO (Min-Replace)", "GSPO (baseline)", "Start (no RL)", "Held-out sums"):
        assert row in table
    assert table in run.output
    result = json.loads((report / "quickstart.json").read_text())
    assert result["model"] == "SmolLM2-135M-Instruct" and result["pretrained"] is True and result["steps"] == 1
    assert set(result["seconds"]) == {"total", "prepare", "train_dfpo_min_replace", "train_gspo", "merge", "evaluate", "report"}
    held_out = result["held_out"]
    assert (held_out["benchmark"], held_out["n_problems"], held_out["k"]) == ("digit_sums_test", 41, 2)
    eval_dirs = {
        run["method"]: Path(run["benchmarks"]["digit_sums_test"]["eval_dir"])
        for run in json.loads((report / "report.json").read_text())["runs"]
    }
    for key, method in (("start", "Start (no RL)"), ("dfpo_min_replace", "DFPO (Min-Replace)"), ("gspo", "GSPO")):
        low, high = held_out[key]["ci95"]
        assert 0.0 <= low <= held_out[key]["avg@k"] <= high <= 1.0, key
        # the number is avg@k over the evaluation's samples.jsonl: per problem the mean of its k
        # samples' acc, then the mean over problems
        per_problem: dict[str, list[float]] = {}
        for line in (eval_dirs[method] / "samples.jsonl").read_text().splitlines():
            record = json.loads(line)
            per_problem.setdefault(record["problem_id"], []).append(record["acc"])
        assert len(per_problem) == 41 and all(len(v) == 2 for v in per_problem.values())
        expected = sum(sum(v) / len(v) for v in per_problem.values()) / len(per_problem)
        assert held_out[key]["avg@k"] == pytest.approx(expected), key
    for name in ("training_curves_smollm2_135m_instruct.png", "training_diagnostics_smollm2_135m_instruct.png"):
        assert (report / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
