"""Every command, module and path the README names exists; its Hydra overrides compose with verl."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CODE_BLOCKS = re.findall(r"```(?:bash|python)?\n(.*?)```", README, flags=re.S)
REPO_DIRS = ("dfpo", "reward", "data_prep", "recipes", "scripts", "tests", "docs", ".ci")
PATH_RE = re.compile(r"(?<![\w$/.~-])((?:%s)/[\w./*-]*[\w*])" % "|".join(re.escape(d) for d in REPO_DIRS))


def _paths() -> list[str]:
    found = set(PATH_RE.findall(README))
    found |= set(re.findall(r"\((\w[\w-]*\.md)\)", README))
    found |= {p for p in ("requirements.txt", "requirements-cpu.txt", "pyproject.toml") if p in README}
    return sorted(found)


@pytest.mark.parametrize("path", _paths())
def test_named_paths_exist(path):
    matches = list(ROOT.glob(path)) if "*" in path else [ROOT / path]
    assert matches and all(m.exists() for m in matches), f"README names {path}, which does not exist"


def _modules() -> list[str]:
    return sorted(set(re.findall(r"python3? -m ([\w.]+)", README)) - {"pip", "pytest"})


@pytest.mark.parametrize("module", _modules())
def test_python_modules_exist(module):
    assert importlib.util.find_spec(module) is not None, f"README runs `python -m {module}`, which is not importable"


def test_first_two_commands_are_the_main_job_and_the_tests_and_ci_runs_the_test_command():
    first_block = CODE_BLOCKS[0].strip().splitlines()
    assert first_block[0].startswith("bash scripts/quickstart.sh")
    assert first_block[1].startswith("bash scripts/test.sh")
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    for script in ("scripts/quickstart.sh", "scripts/demo.sh", "scripts/test.sh", "scripts/setup_env.sh"):
        assert (ROOT / script).exists()
    # each sets itself up on a fresh machine, then runs the real thing
    for script, runs in (("scripts/quickstart.sh", "python -m dfpo.local.quickstart"), ("scripts/test.sh", "python -m pytest")):
        text = (ROOT / script).read_text()
        assert "source scripts/setup_env.sh" in text and runs in text, script


def _dfpo_main_overrides() -> list[list[str]]:
    commands = []
    for block in CODE_BLOCKS:
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            if "python -m dfpo.main" in line:
                tokens = line.split("python -m dfpo.main", 1)[1].split()
                commands.append([t.replace("$HOME", "/home/user").replace("$PWD", str(ROOT)) for t in tokens if "=" in t])
    return commands


@pytest.mark.parametrize("overrides", _dfpo_main_overrides())
def test_dfpo_main_examples_compose_with_verl_config(overrides):
    from verl.utils.config import omega_conf_to_dataclass

    from dfpo.hydra_config import compose_trainer_config
    from dfpo.loss_config import DFPOPolicyLossConfig

    cfg = compose_trainer_config(overrides + ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"], "dfpo_trainer")
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert isinstance(actor.policy_loss, DFPOPolicyLossConfig)
    assert cfg.trainer.v1.trainer_mode == "dfpo_sync"
    assert cfg.algorithm.adv_estimator == "dfpo"
