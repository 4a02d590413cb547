"""The paper's two MoE architectures through verl's whole trainer on CPU, as a user runs them.

Two of the paper's three models are mixture-of-experts models no dense test model resembles:
Qwen3-Next (Gated DeltaNet linear attention beside gated full attention, experts with a shared
expert) and GPT-OSS (learnable attention sinks, alternating sliding window, experts). Each is
built in code at a tiny size with transformers' real classes (``cpu_examples/tiny_moe_models.py``)
and trained 2 steps by its recipe (``recipes/run_dfpo_min_replace_tiny_{qwen3_next,gpt_oss}_cpu.sh``,
``python -m dfpo.main``) the way the GPU recipes run: verl's FSDP2 on 2 gloo ranks with parameter
and optimizer offload on, padded fixed micro-batches (neither model can be packed), the weight
sync into the rollout after every update, DFPO's exact group pre-pass.

Checked on each run's own log: every step trains; DFPO cancels the drift (by its weights and,
measured on the gradient verl backpropagated, on the shared tokens); the rollout's log-probs
match the actor's after every weight sync (verl's sync of the MoE experts reached the rollout);
``python -m dfpo.operations.run_checks --weight-sync`` passes; the checkpoint of every rank is
written; and the plan the launch prints before Ray (as ``dfpo.dry_run=true`` and
``python -m dfpo.launch.plan_report`` do; ``dfpo/launch/communication_plan.py``, from the
model's real FSDP2 wrap) predicts, for each rank's last whole step, the forward passes and the bytes
of every all-gather and reduce-scatter FSDP2 issued and of the weight sync's gathers, as the
resource meter counted them in the run (``dfpo.resource_log_dir``). The rollout is dfpo's local
transformers server: vLLM 0.24.0's CPU build cannot run Qwen3-Next and runs GPT-OSS in bf16 only
(docs/recipes.md, "The paper's MoE architectures on CPU").
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from dfpo.operations.run_checks import ROLLOUT_GAP_BOUNDS, shared_gradient_tolerance
from tests.e2e.recipe_runs import REPO_ROOT, file_log_steps, run_recipe

pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,
]  # serial: verl's trainer through Ray needs the machine to itself

STEPS = 2
RANKS = 2
# model -> (recipe, the transformers class verl's FSDP engine builds)
MODELS = {
    "tiny_gpt_oss": ("run_dfpo_min_replace_tiny_gpt_oss_cpu.sh", "GptOssForCausalLM"),
    "tiny_qwen3_next": ("run_dfpo_min_replace_tiny_qwen3_next_cpu.sh", "Qwen3NextForCausalLM"),
}
# The plan's bytes against the meter's: exact for FSDP2's gathers and reduce-scatters of the wrap;
# DFPO's pre-pass and residual meters add small all-gathers of per-row statistics (rows x a few
# floats: kilobytes against the megabytes of one layer), hence a relative tolerance, not equality.
BYTES_TOLERANCE = 0.01
# the weight-sync check compares each step's rollout/actor KL with the previous update's, which this
# probe measures (one more forward after each update: the plan counts it)
PROBE = ("actor_rollout_ref.actor.policy_loss.dfpo_measure_update_kl=true",)


@pytest.fixture(scope="module")
def model_builds(tmp_path_factory):
    """Each model's build (``python -m cpu_examples.prepare``, as the launch would) started at once, in
    the background: each warm start runs on one thread (about 35 s for Qwen3-Next's torch Gated
    DeltaNet, 12 s for GPT-OSS, one after the other), so on 2 cores the two overlap, and Qwen3-Next's
    goes on beside the start-up of GPT-OSS's launch (Ray, the workers: one busy core at a time),
    which waits for its own model only. model -> (OUTPUT_ROOT, the build's process, its stderr file)."""
    builds = {}
    for model in MODELS:
        root = tmp_path_factory.mktemp(model)
        errors = root.parent / f"{root.name}.prepare.stderr"
        with errors.open("w") as stderr:  # a file, not a pipe: nothing reads it while the other run goes
            process = subprocess.Popen(
                [sys.executable, "-m", "cpu_examples.prepare", "--model", model, "--output-root", str(root)],
                cwd=REPO_ROOT,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        builds[model] = (root, process, errors)
    yield builds
    for _, process, _ in builds.values():  # a build left running by a failed test
        if process.poll() is None:
            process.kill()
            process.wait()


def _built(model_builds, model: str) -> Path:
    """``model``'s OUTPUT_ROOT once its build has finished (a launch would otherwise build it again)."""
    root, process, errors = model_builds[model]
    assert process.wait(timeout=600) == 0, errors.read_text()[-4000:]
    return root


@pytest.fixture(scope="module", params=sorted(MODELS))
def moe_run(request, model_builds):
    """(model, the run, the output root, its file log path, its steps' metrics), one launch per model."""
    model = request.param
    recipe, _ = MODELS[model]
    output_root = _built(model_builds, model)
    env = {
        "OUTPUT_ROOT": str(output_root),
        "TOTAL_TRAINING_STEPS": str(STEPS),
        "GPUS_PER_NODE": str(RANKS),
        "PROJECT_NAME": "moe",
    }
    args = (*PROBE, f"dfpo.resource_log_dir={output_root / 'meter'}")
    run = run_recipe(recipe, env, args, timeout_s=900)
    print(f"{recipe}: {run.seconds:.0f} s")
    assert run.returncode == 0, run.tail(120)
    ((log, steps),) = file_log_steps(output_root / "logs" / "moe").items()
    return model, run, output_root, log, steps


def _trained(steps: dict[int, dict]) -> dict[int, dict]:
    return {step: metrics for step, metrics in steps.items() if "actor/grad_norm" in metrics}


def test_the_real_architecture_trains_with_offload_on_every_rank(moe_run):
    model, run, _, _, steps = moe_run
    _, architecture = MODELS[model]
    assert f"{architecture} contains" in run.output, f"verl's FSDP engine did not build a {architecture}"
    # verl's printed config: the offload the GPU recipes turn on, on the path that ran
    assert "'param_offload': True" in run.output and "'optimizer_offload': True" in run.output
    trained = _trained(steps)
    assert sorted(trained) == list(range(1, STEPS + 1)), sorted(steps)
    for step, metrics in trained.items():
        assert metrics["actor/grad_norm"] > 0.0 and math.isfinite(metrics["actor/grad_norm"]), (step, metrics)


def test_dfpo_cancels_the_drift_by_its_weights_and_on_the_gradient(moe_run):
    _, _, _, _, steps = moe_run
    trained = _trained(steps)
    for step, metrics in trained.items():
        assert metrics["actor/dfpo/cancellation_residual_after"] < 1e-6, step
    assert max(m["actor/dfpo/cancellation_residual_before"] for m in trained.values()) > 1e-4
    # one mini-batch per step holds every group whole (the model files' ppo_mini_batch_size)
    measured = {s: m for s, m in trained.items() if m["actor/dfpo/shared_token_grad_groups"] > 0}
    assert measured, {s: m["actor/dfpo/shared_token_grad_prefix_groups"] for s, m in trained.items()}
    for step, metrics in measured.items():
        bound = shared_gradient_tolerance(metrics["actor/dfpo/shared_token_grad_eps"])
        assert metrics["actor/dfpo/shared_token_grad_residual"] < bound, (step, metrics)


def test_the_rollout_gets_the_trained_experts_after_every_update(moe_run):
    _, _, _, log, steps = moe_run
    # Each step rolls out with the weights synced from the actor (experts included: verl sends
    # Qwen3-Next's one by one, cpu_backend/moe_weights.py packs them back). A sync that missed
    # them would show as a log-prob gap of the size of the update; both sides are float32.
    for step, metrics in _trained(steps).items():
        assert metrics["training/rollout_probs_diff_max"] < ROLLOUT_GAP_BOUNDS["fp32"], (step, metrics)
    command = [sys.executable, "-m", "dfpo.operations.run_checks", str(log), "--steps", str(STEPS), "--dfpo"]
    command += ["--old-log-probs", "recomputed", "--rollout-numerics", "fp32", "--weight-sync"]
    checks = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
    assert checks.returncode == 0, checks.stdout + checks.stderr
    assert checks.stdout.count("PASS  ") == 7 and "FAIL" not in checks.stdout, checks.stdout
    assert any("weights reached the rollout" in line and line.startswith("PASS") for line in checks.stdout.splitlines())


def test_every_rank_checkpoints_the_moe_model(moe_run):
    _, _, output_root, _, _ = moe_run
    (experiment,) = (output_root / "checkpoints" / "moe").iterdir()
    assert (experiment / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    actor = experiment / f"global_step_{STEPS}" / "actor"
    for rank in range(RANKS):
        assert (actor / f"model_world_size_{RANKS}_rank_{rank}.pt").is_file(), sorted(actor.iterdir())


def test_the_plan_predicts_what_each_rank_moved(moe_run):
    from cpu_examples.prepare import model_dir
    from dfpo.launch import communication_plan as comm
    from dfpo.launch.plan_report import recipe_plan
    from dfpo.operations.resource_meter import last_complete_step

    model, run, output_root, _, _ = moe_run

    environ = {
        "OUTPUT_ROOT": str(output_root),
        "GPUS_PER_NODE": str(RANKS),
        "MODEL_PATH": str(model_dir(output_root, model)),
    }
    plan = recipe_plan("dfpo_min_replace", f"{model}_cpu", PROBE, environ=environ)
    # the plan checked here is the one the launch printed before Ray (dfpo.launch.preflight.memory_plan_report)
    printed = [line.strip() for line in run.output.splitlines() if "per CPU rank" in line]
    assert printed and printed[0].startswith(f"plan per CPU rank for {model}_cpu"), run.tail(200)
    for phase in ("log_prob", "prepass", "update", "weight_sync"):
        ops = ", ".join(f"{op} {b / 1e6:,.2f} MB" for op, b in plan.collectives[phase].items())
        assert f"collectives per CPU rank, {phase}: {ops}" in printed, (phase, ops, printed)
    records = sorted((output_root / "meter").glob("*-rank*-pid*.json"))
    ranks = {}
    for path in records:
        record = json.loads(path.read_text())
        step = last_complete_step(record)
        if step is not None:  # the actor's ranks (other metered processes run no training step)
            ranks[record["rank"]] = step
    assert sorted(ranks) == list(range(RANKS)), [p.name for p in records]
    for rank, step in ranks.items():
        assert step["step"] == STEPS, (rank, step["step"])
        forwards = plan.micro_batches
        assert forwards["update_kl_probe"] > 0 and forwards["prepass"] > 0, forwards  # both run in these runs
        expected = {
            "log_prob": forwards["log_prob"],
            "prepass": forwards["prepass"],
            "update": forwards["update"] + forwards["update_kl_probe"],  # the probe forwards inside update
        }
        for phase, count in expected.items():
            assert step["phases"][phase]["forward_passes"] == count, (rank, phase, step["phases"][phase])
        for phase in ("log_prob", "prepass", "update", "weight_sync"):
            for op in (comm.ALL_GATHER, comm.REDUCE_SCATTER):
                planned = plan.collectives[phase].get(op, 0)
                measured = step["phases"][phase]["bytes"].get(op, 0)
                assert abs(measured - planned) <= BYTES_TOLERANCE * max(planned, 1), (
                    rank,
                    phase,
                    op,
                    measured,
                    planned,
                )
