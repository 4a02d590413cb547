"""The plan ``dfpo.dry_run=true`` prints, for a recipe, without its checkpoint or data on this machine.

    python -m dfpo.launch.plan_report dfpo_min_replace gpt_oss_120b [hydra overrides...]
    python -m dfpo.launch.plan_report --table     # the table of docs/recipes.md, "Memory plan"

The dry run (``bash recipes/run_<method>_<model>.sh dfpo.dry_run=true``) refuses a config whose
checkpoint or data are missing before it prints the plan; this command composes the same config
(the recipe's overrides under the environment's knobs, :func:`dfpo.launch.recipe.recipe_overrides`,
resolved as the driver resolves it) and prints the same text
(:func:`dfpo.launch.preflight.memory_plan_report`). The model is ``MODEL_PATH/config.json`` when it
exists, else the published config of the recipe's model. ``--table`` writes the docs' table of the
three paper models' DFPO Min-Replace recipes, which tests/recipes/test_recipes_memory_plan.py
compares with docs/recipes.md and the README's hardware column.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from dfpo.launch import memory_plan
from dfpo.launch.model_anatomy import hf_config_for

DOC_RECIPES = (
    ("dfpo_min_replace", "qwen3_32b", "Qwen3-32B"),
    ("dfpo_min_replace", "qwen3_next_80b_a3b_thinking", "Qwen3-Next-80B-A3B-Thinking"),
    ("dfpo_min_replace", "gpt_oss_120b", "GPT-OSS-120B"),
)
NO_CHECKPOINT = "no-checkpoint-on-this-machine"


def recipe_config(method: str, model: str, overrides: Sequence[str] = (), environ: dict[str, str] | None = None):
    """The resolved config ``python -m dfpo.main`` runs for recipe ``method`` × ``model`` under ``environ``
    (MODEL_PATH may be unset: the plan then reads the published config)."""
    from dfpo.launch.compose import compose_trainer_config
    from dfpo.launch.driver_setup import resolve
    from dfpo.launch.recipe import model_sets_path, recipe_overrides

    environ = dict(os.environ if environ is None else environ)
    if not model_sets_path(model):  # a CPU example's model file names its path under OUTPUT_ROOT
        environ.setdefault("MODEL_PATH", NO_CHECKPOINT)
    config = compose_trainer_config([*recipe_overrides(method, model, environ), *overrides], "dfpo_trainer")
    resolve(config)
    return config


def recipe_plan(
    method: str, model: str, overrides: Sequence[str] = (), environ: dict[str, str] | None = None
) -> memory_plan.RunPlan:
    """The plan of recipe ``method`` × ``model`` (``GPU_MEMORY_GB`` in ``environ``, default 80)."""
    environ = dict(os.environ if environ is None else environ)
    config = recipe_config(method, model, overrides, environ)
    name = str(config.dfpo.model)
    hf_config = hf_config_for(name, str(config.actor_rollout_ref.model.path))
    return memory_plan.plan_of_config(config, name, hf_config, float(environ.get("GPU_MEMORY_GB", "80")))


def _peak(plan: memory_plan.RunPlan) -> tuple[str, float]:
    return memory_plan.peak({phase: steps[memory_plan.peak_substep(steps)] for phase, steps in plan.memory.items()})


PHASE_COLUMNS = ("rollout", "log_prob", "prepass", "weight_sync", "update")


def _phase_gb(plan: memory_plan.RunPlan, phase: str) -> float:
    steps = plan.memory[phase]
    return sum(steps[memory_plan.peak_substep(steps)].values())


def _tb(plan: memory_plan.RunPlan) -> float:
    return sum(sum(ops.values()) for phase, ops in plan.collectives.items() if phase != "model_init") / 1e12


def hardware_cell(plan: memory_plan.RunPlan) -> str:
    """The plan's part of the README's hardware cell: the planned peak per GPU, the step's time and its
    split, and the command that prints the plan."""
    t = plan.time
    phase, total = _peak(plan)
    return (
        f"plan: peak {total:.0f} GB/GPU ({phase}), step ~{t.total_overlapped_s:,.0f} s: ~{t.total_compute_s:,.0f} s "
        f"compute vs ~{t.total_communication_s:,.0f} s FSDP2 communication "
        f"(`python -m dfpo.launch.plan_report dfpo_min_replace {plan.name}`)"
    )


def markdown_table(plans: Sequence[tuple[str, memory_plan.RunPlan]]) -> str:
    """The docs' table: GB per GPU per phase at its peak sub-step, host memory, collectives, step time."""
    lines = [
        "| model | nodes × GPUs | rollout | log_prob | prepass | weight_sync | update (peak sub-step) "
        "| node 0 host, loading | pinned host per node | collectives TB/GPU/step | compute s | communication s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, plan in plans:
        s, t, host = plan.settings, plan.time, plan.host
        gb = {phase: f"{_phase_gb(plan, phase):.0f}" if phase in plan.memory else "—" for phase in PHASE_COLUMNS}
        lines.append(
            f"| {label} | {s.nnodes} × {s.gpus_per_node} | {gb['rollout']} | {gb['log_prob']} | {gb['prepass']} "
            f"| {gb['weight_sync']} "
            f"| {gb['update']} ({memory_plan.peak_substep(plan.memory['update'])}) "
            f"| {host[memory_plan.RANK0_MODEL]:.0f} GB "
            f"| {host['pinned offloaded shards per node after loading']:.0f} GB "
            f"| {_tb(plan):.1f} | {t.total_compute_s:,.0f} | {t.total_communication_s:,.0f} |"
        )
    return "\n".join(lines)


def doc_table(environ: dict[str, str] | None = None) -> str:
    environ = {k: v for k, v in (os.environ if environ is None else environ).items() if k != "MODEL_PATH"}
    return markdown_table([(label, recipe_plan(method, model, (), environ)) for method, model, label in DOC_RECIPES])


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--table"]:
        print(doc_table())
        return 0
    if len(args) < 2 or args[0].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    from dfpo.launch.preflight import memory_plan_report
    from dfpo.launch.recipe import RecipeError

    try:
        print(memory_plan_report(recipe_config(args[0], args[1], args[2:])))  # the dry run's text
    except (RecipeError, KeyError, ValueError) as error:
        print(f"plan: {error.args[0] if error.args else error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
