"""Multi-node runs: checkpoints on shared storage, and the two launches verl's examples ship
(`ray job submit`, SLURM sbatch), run here with stand-ins for ray, srun and scontrol."""

from __future__ import annotations

import json
import subprocess

from tests.recipes.recipe_commands import REPO_ROOT, recipe_env, run_recipe
from tests.recipes.test_recipes_launcher import run_setup  # noqa: F401  (the fixture)

SCRIPT = "run_dfpo_min_replace_qwen3_32b.sh"
LAUNCH = REPO_ROOT / "scripts" / "launch"


def test_multi_node_run_refuses_node_local_checkpoints(run_setup):
    tmp_path, env = run_setup
    result = run_recipe(SCRIPT, env={**env, "NNODES": "2", "OUTPUT_ROOT": str(tmp_path / "runs")})
    assert result.returncode != 0
    assert "not shared storage, with NNODES=2" in result.stderr and "OUTPUT_ROOT" in result.stderr
    assert not (tmp_path / "args.txt").exists()
    # a single node, or an explicit override, runs
    assert run_recipe(SCRIPT, env={**env, "NNODES": "1", "OUTPUT_ROOT": str(tmp_path / "runs")}).returncode == 0
    allowed = {**env, "NNODES": "2", "OUTPUT_ROOT": str(tmp_path / "runs"), "ALLOW_LOCAL_CHECKPOINTS": "1"}
    assert run_recipe(SCRIPT, env=allowed).returncode == 0


def test_dry_run_only_warns_about_node_local_checkpoints():
    result = run_recipe(SCRIPT, env=recipe_env(NNODES="2"))
    assert result.returncode == 0 and "not shared storage" in result.stderr


def test_shared_filesystem_types_pass(tmp_path):
    fake_df = tmp_path / "bin" / "df"
    fake_df.parent.mkdir()
    fake_df.write_text("#!/usr/bin/env bash\necho Type\necho nfs4\n")
    fake_df.chmod(0o755)
    check = subprocess.run(
        ["bash", "-c", f"source recipes/common.sh; dfpo_check_shared_checkpoints 4 {tmp_path}/ckpt && echo passed"],
        cwd=REPO_ROOT,
        env={**recipe_env(DRY_RUN=None), "PATH": f"{fake_df.parent}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert check.stdout.strip() == "passed", check.stderr


def _stand_in(directory, name, body):
    path = directory / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)


def test_ray_job_submit_sends_the_recipe_and_the_exported_knobs(tmp_path):
    _stand_in(tmp_path, "ray", 'printf "%s\\n" "$@" > "$FAKE_RAY_ARGS"\n')
    env = {
        "PATH": f"{tmp_path}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "RAY_ADDRESS": "http://head:8265",
        "MODEL_PATH": "/shared/models/Qwen3-32B",
        "SEED": "3",
        "UNRELATED_SECRET": "x",
        "FAKE_RAY_ARGS": str(tmp_path / "ray_args.txt"),
    }
    result = subprocess.run(
        ["bash", str(LAUNCH / "ray_job_submit.sh"), f"recipes/{SCRIPT}", "trainer.total_training_steps=5"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    args = (tmp_path / "ray_args.txt").read_text().splitlines()
    assert args[:3] == ["job", "submit", "--address=http://head:8265"]
    runtime_env = json.loads(next(a for a in args if a.startswith("--runtime-env-json=")).split("=", 1)[1])
    assert runtime_env["env_vars"] == {"MODEL_PATH": "/shared/models/Qwen3-32B", "SEED": "3"}
    entrypoint = args[args.index("--") + 1 :]
    assert entrypoint[:2] == ["bash", "-c"]
    assert entrypoint[2] == f"cd {REPO_ROOT} && bash {REPO_ROOT}/recipes/{SCRIPT} trainer.total_training_steps=5"


def test_ray_job_submit_needs_the_cluster_address():
    result = subprocess.run(
        ["bash", str(LAUNCH / "ray_job_submit.sh"), f"recipes/{SCRIPT}"], cwd=REPO_ROOT, env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True
    )
    assert result.returncode != 0 and "RAY_ADDRESS" in result.stderr


def test_slurm_script_starts_ray_on_every_node_then_the_recipe_on_the_head(tmp_path):
    log = tmp_path / "calls.txt"
    _stand_in(tmp_path, "scontrol", 'printf "gpu-a\\ngpu-b\\ngpu-c\\n"\n')
    _stand_in(tmp_path, "srun", f'echo "srun $*" >> {log}\nif [[ "$*" == *hostname* ]]; then echo 10.0.0.1; fi\n')
    _stand_in(tmp_path, "ray", f'echo "ray $*" >> {log}\nif [[ "$1" == status ]]; then printf " 1 node_a\\n 1 node_b\\n 1 node_c\\n"; fi\n')
    recipe = tmp_path / "recipe.sh"
    recipe.write_text(f'echo "recipe NNODES=$NNODES GPUS_PER_NODE=$GPUS_PER_NODE RAY_ADDRESS=$RAY_ADDRESS $*" >> {log}\n')
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "SLURM_JOB_NODELIST": "gpu-[a-c]", "SLURM_GPUS_ON_NODE": "8", "RAY_START_WAIT_S": "0"}
    result = subprocess.run(
        ["bash", str(LAUNCH / "slurm_dfpo.sbatch"), str(recipe), "trainer.save_freq=5"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    calls = log.read_text().splitlines()
    starts = [c for c in calls if c.startswith("srun") and "ray start" in c]
    assert any("-w gpu-a ray start --head --node-ip-address=10.0.0.1 --port=6379 --num-gpus=8" in c for c in starts)
    assert {c.split("-w ")[1].split()[0] for c in starts if "--address=10.0.0.1:6379" in c} == {"gpu-b", "gpu-c"}
    recipe_line = "recipe NNODES=3 GPUS_PER_NODE=8 RAY_ADDRESS=10.0.0.1:6379 trainer.save_freq=5"
    assert recipe_line in calls  # (the background ray starts may log after it)
    assert any(c.startswith("ray status") for c in calls[: calls.index(recipe_line)]), "the recipe ran before the nodes joined"


def test_launch_scripts_parse_and_hold_no_cluster_paths():
    for path in LAUNCH.iterdir():
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0, path
        text = path.read_text()
        for forbidden in ("/mnt/", "/cpfs", "/nas/", "conda activate", "--output=/", "API_KEY"):
            assert forbidden not in text, f"{path.name} hard-codes {forbidden}"
