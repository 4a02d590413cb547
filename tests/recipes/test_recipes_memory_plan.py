"""The plan (dfpo/launch/memory_plan.py): every shipped GPU recipe fits an 80 GB GPU with a margin, dfpo.main
prints the plan of the config it runs, and the parts follow the rules verl's code gives them."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from dfpo.launch import memory_plan as mp
from dfpo.launch.model_anatomy import PUBLISHED_CONFIGS, model_anatomy
from dfpo.launch.preflight import memory_plan_report as mp_report
from tests.recipes.recipe_commands import REPO_ROOT, composed_config, preflight_says
from tests.recipes.recipe_expectations import GPU_RUN_SCRIPTS, split_script_name

GPU_MEMORY_GB = 80.0
MARGIN = 0.10  # the estimate must leave 10% of the GPU (8 GB) for what it does not model


def _run_plan(script: str, **changes) -> mp.RunPlan:
    settings = mp.settings_from_config(composed_config(script), GPU_MEMORY_GB)
    if changes:
        settings = mp.Settings(**{**settings.__dict__, **changes})
    name = split_script_name(script)[1]
    return mp.run_plan(name, PUBLISHED_CONFIGS[name], settings)


def _peak(plan: mp.RunPlan) -> tuple[str, float]:
    return mp.peak({phase: steps[mp.peak_substep(steps)] for phase, steps in plan.memory.items()})


@pytest.mark.parametrize("script", sorted(GPU_RUN_SCRIPTS))
def test_every_recipe_fits_an_80_gb_gpu_with_a_margin(script):
    plan = _run_plan(script)
    phase, total = _peak(plan)
    assert total <= (1 - MARGIN) * GPU_MEMORY_GB, f"{script}: {phase} needs ~{total:.1f} GB per GPU\n" + mp.render(plan)


def _printed(said: list[str]) -> str:
    (text,) = [t for t in said if t.startswith("memory plan per GPU")]
    return text


@pytest.mark.parametrize(
    "script",
    ["run_gspo_qwen3_32b.sh", "run_grpo_qwen3_next_80b_a3b_thinking.sh", "run_dfpo_min_replace_gpt_oss_120b.sh"],
)
def test_the_launch_says_the_plan_of_the_config_it_runs(script):
    """dfpo.main's preflight prints the plan of the composed config, for the model dfpo.model names:
    the peak, the host memory, the collectives and the step time."""
    printed = _printed(preflight_says(script))
    plan = mp.render(_run_plan(script))
    if "qwen3_next" in script or "gpt_oss" in script:  # the MoE recipes: then the expert-parallel engines
        assert printed.startswith(plan + "\nEngines for the MoE recipes (dfpo/launch/engine_plan.py):\n"), printed
        assert re.search(r"FSDP2 \(the recipes\) .*\n.*Megatron EP", printed), printed
    else:
        assert printed == plan
    for part in ("peak: ", "host memory per node", "load vs timeout", "micro-batches per GPU", "collectives per GPU"):
        assert part in printed
    assert re.search(r"step time: compute [\d,]+ s .* vs communication [\d,]+ s", printed)


def test_the_plan_follows_the_recipe_knobs():
    base = _printed(preflight_says("run_gspo_qwen3_32b.sh"))
    halved = _printed(preflight_says("run_gspo_qwen3_32b.sh", NNODES="2"))

    def update(text):
        return float(re.search(r"update\s+([\d.]+) GB", text).group(1))

    assert update(halved) > update(base)  # half the ranks: twice the optimizer-state shards


def test_a_model_without_a_plan_is_said(tmp_path):
    checkpoint = tmp_path / "my-model"
    checkpoint.mkdir()
    config = composed_config("run_gspo_qwen3_32b.sh").copy()
    config.dfpo.model = None
    config.actor_rollout_ref.model.path = str(checkpoint)
    assert "there is no config.json there" in mp_report(config)
    (checkpoint / "config.json").write_text('{"num_hidden_layers": 3, "hidden_size": 64, "vocab_size": 100}')
    assert "the Hugging Face config has no 'model_type'" in mp_report(config)
    (checkpoint / "config.json").write_text(
        '{"model_type": "qwen3", "num_hidden_layers": 64, "hidden_size": 5120, "vocab_size": 151936}'
    )
    assert mp_report(config).startswith("memory plan per GPU for qwen3_32b")  # found by its shape
    config.dfpo.model = "my_model"  # a config.json wins over the name
    assert mp_report(config).startswith("memory plan per GPU for my_model (Qwen3ForCausalLM")
    (checkpoint / "config.json").unlink()
    assert "no published config for model 'my_model'" in mp_report(config)


def test_a_cpu_run_is_planned_per_cpu_rank_without_the_gpus_memory_or_time(tmp_path):
    """On CPU: the FSDP2 units, rank 0's load, micro-batches and collective bytes (the quantities the
    resource meter checks on the tiny MoE runs, tests/e2e/test_moe_architectures_cpu.py), in MB; the
    memory by phase and the step time, which model GPUs (vLLM's KV cache, CUDA, FLOP/s), are left out."""
    checkpoint = tmp_path / "qwen3"
    checkpoint.mkdir()
    hf = {"model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128}
    hf |= {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000}
    (checkpoint / "config.json").write_text(json.dumps(hf))
    config = composed_config("run_gspo_qwen3_32b.sh").copy()
    config.dfpo.model = "tiny_qwen3"
    config.actor_rollout_ref.model.path = str(checkpoint)
    gpu = mp_report(config)
    config.trainer.device = "cpu"
    cpu = mp_report(config)
    plan = mp.plan_of_config(config, "tiny_qwen3", hf)
    assert gpu.startswith("memory plan per GPU for tiny_qwen3") and "step time: compute" in gpu
    assert cpu.startswith("plan per CPU rank for tiny_qwen3 (Qwen3ForCausalLM: ")
    for gpu_only in ("GB of 80", "% of the GPU", "step time: compute", "pinned offloaded", "per GPU"):
        assert gpu_only not in cpu, gpu_only
    for phase in ("log_prob", "update", "weight_sync"):
        ops = ", ".join(f"{op} {b / 1e6:,.2f} MB" for op, b in plan.collectives[phase].items())
        assert f"  collectives per CPU rank, {phase}: {ops}\n" in cpu, (phase, cpu)
    micro = ", ".join(f"{k} {v}" for k, v in plan.micro_batches.items())
    assert f"micro-batches per CPU rank per step (full-length sequences): {micro}" in cpu
    assert f"{plan.host[mp.RANK0_MODEL] * 1e3:,.2f} MB" in cpu


def test_a_cpu_example_not_yet_written_says_how_its_plan_is_made(tmp_path):
    config = composed_config("run_dfpo_min_replace_tiny_qwen3_next_cpu.sh").copy()
    config.dfpo.output_root = str(tmp_path)
    config.actor_rollout_ref.model.path = str(tmp_path / "models" / "tiny_qwen3_next_cpu")
    said = mp_report(config)
    assert f"needs {tmp_path}/models/tiny_qwen3_next_cpu/config.json, which a launch writes first" in said
    assert f"python -m cpu_examples.prepare --output-root {tmp_path} --model tiny_qwen3_next" in said


def test_the_qwen3_next_log_prob_pass_holds_three_logits_copies():
    """Qwen3-Next runs unpadded (use_remove_padding=false): verl computes the entropy unchunked on
    the padded logits (softmax + logsumexp's temporary beside the logits: 6 B per entry) and copies
    the logits for the log-probs; ENTROPY_CHUNKING does not reach that path."""
    plan = _run_plan("run_dfpo_min_replace_qwen3_next_80b_a3b_thinking.sh")
    logits = plan.memory["log_prob"]["logits"]["logits"]
    assert logits == pytest.approx(6 * 34816 * 151936 / 1e9)
    chunking_off = _run_plan("run_dfpo_min_replace_qwen3_next_80b_a3b_thinking.sh", entropy_chunking=False)
    assert chunking_off.memory["log_prob"]["logits"]["logits"] == logits
    packed = _run_plan("run_dfpo_min_replace_qwen3_next_80b_a3b_thinking.sh", remove_padding=True)
    assert packed.memory["log_prob"]["logits"]["logits"] == pytest.approx(
        (2 * 34816 * 151936 + 3 * 2048 * 151936 * 4) / 1e9
    )


def test_the_backward_holds_a_units_bf16_gradients_and_fp32_reduce_scatter_input():
    """FSDP2's backward through a layer holds its unsharded bf16 gradients and the fp32 reduce-scatter
    input they are copied into: 6 B per parameter of GPT-OSS's 3.2 B-parameter layer, ~19 GB."""
    plan = _run_plan("run_dfpo_min_replace_gpt_oss_120b.sh")
    layer = plan.memory["update"]["backward through a layer"]
    largest = max(unit.padded_params(128) for unit in model_anatomy(PUBLISHED_CONFIGS["gpt_oss_120b"]).layers)
    assert layer["unit gradients (bf16) + reduce-scatter input (fp32)"] == pytest.approx(6 * largest / 1e9)
    assert layer["unit gradients (bf16) + reduce-scatter input (fp32)"] == pytest.approx(19.3, abs=0.1)


def test_the_weight_sync_holds_vllms_weights_and_the_largest_parameter_twice():
    """vLLM's bf16 weights (÷ rollout TP) are resumed before verl gathers each parameter in fp32 for vLLM
    to take in bf16: GPT-OSS's largest parameter is a layer's fused gate_up_proj, 128 × 5760 × 2880."""
    plan = _run_plan("run_dfpo_min_replace_gpt_oss_120b.sh")
    parts = plan.memory["weight_sync"]["gathering the largest parameter"]
    assert parts["the parameter, full (fp32) and for vLLM (bf16)"] == pytest.approx(6 * 128 * 5760 * 2880 / 1e9)
    assert parts["vLLM weights (bf16, ÷ rollout TP)"] == pytest.approx(2 * plan.anatomy.params / 8 / 1e9)


def test_a_phase_peak_is_its_largest_sub_step_not_their_sum():
    """The update's logits, a layer's recomputed activations and the reduce buffers of different units
    never coincide: the phase's peak is its largest sub-step, below the sum of every part it names."""
    plan = _run_plan("run_dfpo_min_replace_gpt_oss_120b.sh")
    steps = plan.memory["update"]
    totals = {name: sum(parts.values()) for name, parts in steps.items()}
    every_part: dict[str, float] = {}
    for parts in steps.values():
        every_part.update(parts)
    planned = mp.plan(plan.anatomy, plan.settings, PUBLISHED_CONFIGS["gpt_oss_120b"])["update"]
    assert sum(planned.values()) == max(totals.values()) < sum(every_part.values()) - 10


def test_host_memory_is_rank_0s_fp32_model_and_the_pinned_shards():
    plan = _run_plan("run_dfpo_min_replace_gpt_oss_120b.sh")
    params = plan.anatomy.params
    assert plan.host[mp.RANK0_MODEL] == pytest.approx(4 * params / 1e9)
    assert plan.host["pinned offloaded shards per node after loading"] == pytest.approx(8 * 12 * params / 128 / 1e9)
    assert plan.host["collective timeout (s)"] == 1800
    assert plan.host["node 0 peak"] == plan.host[mp.RANK0_MODEL]  # not summed with the shards pinned after it


def test_the_plan_runs_as_a_file():
    """python dfpo/launch/memory_plan.py works from any directory, for settings that are not a config."""
    args = "--model qwen3_next_80b_a3b_thinking --nnodes 8 --gpus-per-node 8 --sp 1 --rollout-tp 4"
    args += " --max-prompt 2048 --max-response 32768 --gpu-memory-utilization 0.7 --dynamic-bsz false"
    args += " --ppo-micro-batch 1 --log-prob-micro-batch 1 --param-offload true --optimizer-offload true"
    args += " --gradient-checkpointing true --entropy-chunking true --remove-padding false --prepass true"
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "dfpo" / "launch" / "memory_plan.py"), *args.split()],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "memory plan per GPU for qwen3_next_80b_a3b_thinking (Qwen3NextForCausalLM" in result.stderr
    assert "communication dominates" in result.stderr


def _no_model_path() -> dict[str, str]:
    import os

    return {key: value for key, value in os.environ.items() if key != "MODEL_PATH"}


def test_the_docs_table_is_the_commands_output():
    """docs/recipes.md's table between its markers is ``python -m dfpo.launch.plan_report --table``."""
    from dfpo.launch import plan_report

    text = (REPO_ROOT / "docs" / "recipes.md").read_text()
    block = re.search(r"<!-- plan: python -m dfpo.launch.plan_report --table -->\n(.*?)\n<!-- /plan -->", text, re.S)
    assert block is not None, "docs/recipes.md lost the plan table's markers"
    assert block.group(1) == plan_report.doc_table(_no_model_path())


def test_the_readme_hardware_cells_are_the_plans():
    """The README's hardware column of the MoE rows: the recipe's nodes and the DFPO Min-Replace plan."""
    from dfpo.launch import plan_report

    readme = (REPO_ROOT / "README.md").read_text()
    for method, model, label in plan_report.DOC_RECIPES[1:]:
        plan = plan_report.recipe_plan(method, model, (), _no_model_path())
        (row,) = [line for line in readme.splitlines() if line.startswith(f"| {label} | the five methods |")]
        hardware = row.split(" | ")[2]
        assert hardware.startswith(f"{plan.settings.nnodes} × {plan.settings.gpus_per_node} GPUs (80 GB")
        assert f"DFPO Min-Replace's {plan_report.hardware_cell(plan)} ([memory plan]" in hardware
        # the engine the recipe runs and where the comparison with expert parallelism is
        assert (
            "engine FSDP2, kept over the expert-parallel engines ([why](docs/recipes.md#engines-for-the-moe-recipes): "
            "`python -m dfpo.launch.engine_plan`)" in hardware
        )


def test_the_docs_plan_command_runs(monkeypatch, capsys):
    """The docs' command as a process; a model name it does not know through the function its
    ``__main__`` exits with (``sys.exit(main())``: the returned 1 is the exit status)."""
    from dfpo.launch import plan_report

    result = subprocess.run(
        [sys.executable, "-m", "dfpo.launch.plan_report", "dfpo_min_replace", "qwen3_next_80b_a3b_thinking"],
        cwd=REPO_ROOT,
        env=_no_model_path(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("memory plan per GPU for qwen3_next_80b_a3b_thinking")
    monkeypatch.delenv("MODEL_PATH", raising=False)
    monkeypatch.chdir(REPO_ROOT)
    capsys.readouterr()
    returncode = plan_report.main(["dfpo_min_replace", "qwen3_99b"])
    assert returncode == 1 and "qwen3_99b" in capsys.readouterr().err
