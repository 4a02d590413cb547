"""Every command, module, path and link that the README, the docs/ pages and the benchmark pages
(BENCHMARKS.md, benchmarks/*.md) name exists; the README's Hydra overrides (and the docs') compose
with verl."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CODE_BLOCKS = re.findall(r"```(?:bash|python)?\n(.*?)```", README, flags=re.S)
REPO_DIRS = (
    "dfpo",
    "reward",
    "data_prep",
    "cpu_backend",
    "cpu_examples",
    "evaluation",
    "demo",
    "quickstart",
    "recipes",
    "scripts",
    "tests",
    "docs",
    "benchmarks",
    ".ci",
)
# a path ends where a name's placeholder begins: benchmarks/results/ci_run-<date>... names the folder
_DIRS = "|".join(re.escape(d) for d in REPO_DIRS)
PATH_RE = re.compile(rf"(?<![\w$/.~-])((?:{_DIRS})/[\w./*-]*[\w*])(?![\w<-])")
# the front page and every reference page (each opens with "When you need this")
DOCS = ["README.md"] + sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
# the measurements' pages: the run histories and one-off studies docs/ links to
BENCHMARK_PAGES = ["BENCHMARKS.md"] + sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "benchmarks").glob("*.md"))
# the checks of paths, links and commands run over all of them
PAGES = DOCS + BENCHMARK_PAGES
LINK_RE = re.compile(r"\]\(([^)\s]+)\)")


def _text(doc: str) -> str:
    return (ROOT / doc).read_text(encoding="utf-8")


def _code_blocks(doc: str) -> list[str]:
    return re.findall(r"```(?:bash|python)?\n(.*?)```", _text(doc), flags=re.S)


def _cases(find) -> list:
    return [pytest.param(doc, item, id=f"{doc}:{item}") for doc in PAGES for item in find(doc)]


def _paths(doc: str) -> list[str]:
    text = _text(doc)
    found = set(PATH_RE.findall(text))
    found |= {p for p in ("requirements.txt", "requirements-cpu.txt", "pyproject.toml") if p in text}
    return sorted(found)


@pytest.mark.parametrize(("doc", "path"), _cases(_paths))
def test_named_paths_exist(doc, path):
    matches = list(ROOT.glob(path)) if "*" in path else [ROOT / path]
    assert matches and all(m.exists() for m in matches), f"{doc} names {path}, which does not exist"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: inline markup dropped, lower case, punctuation removed, spaces to '-'."""
    text = re.sub(r"[`*]", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(doc: str) -> set[str]:
    anchors, in_code = set(), False
    for line in _text(doc).splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and re.match(r"#{1,6} ", line):
            anchors.add(_slug(line.lstrip("#")))
    return anchors


def _links(doc: str) -> list[str]:
    return sorted({link for link in LINK_RE.findall(_text(doc)) if not re.match(r"[a-z]+:", link)})


@pytest.mark.parametrize(("doc", "link"), _cases(_links))
def test_links_resolve_to_files_and_headings(doc, link):
    target, _, anchor = link.partition("#")
    path = (ROOT / doc).parent / target if target else ROOT / doc
    assert path.exists(), f"{doc} links to {target}, which does not exist"
    if anchor and path.suffix == ".md":
        assert anchor in _anchors(path.relative_to(ROOT).as_posix()), f"{doc} links to {link}: no such heading"


def _modules(doc: str) -> list[str]:
    return sorted(set(re.findall(r"python3? -m ([\w.]+)", _text(doc))) - {"pip", "pytest"})


@pytest.mark.parametrize(("doc", "module"), _cases(_modules))
def test_python_modules_exist(doc, module):
    assert importlib.util.find_spec(module) is not None, f"{doc} runs `python -m {module}`, which is not importable"


def test_readme_is_a_front_page_that_links_every_docs_page():
    assert len(README.splitlines()) < 250
    for doc in DOCS[1:]:
        assert f"]({doc})" in README, f"README does not link {doc}"


def test_every_benchmark_page_is_linked_from_benchmarks_md():
    """The histories moved out of docs/ stay findable: BENCHMARKS.md (which the README links) links
    every page under benchmarks/, and each of them links back to a docs/ page it serves."""
    assert "](BENCHMARKS.md)" in README
    index = _text("BENCHMARKS.md")
    for page in BENCHMARK_PAGES[1:]:
        assert f"]({page})" in index, f"BENCHMARKS.md does not link {page}"
        assert "](../docs/" in _text(page), f"{page} links no docs/ page"


def test_the_readme_opens_with_the_method_the_switch_the_commands_and_the_status():
    """A verl user's first 40 lines: what DFPO changes in GSPO, the overrides that switch a verl run
    to it, the two commands and the paper's numbers beside our status."""
    top = "\n".join(README.splitlines()[:40])
    for needed in (
        "Σ_i Â_i W̃_i = 0",
        "Min-Replace",
        "Orth-Proj",
        "stop-gradient",
        "actor_rollout_ref.actor.policy_loss.loss_mode=dfpo",
        "algorithm.adv_estimator=dfpo",
        "dfpo_transform",
        "bash scripts/quickstart.sh",
        "bash scripts/test.sh",
        "82.5",
    ):
        assert needed in top, f"README's first 40 lines lack {needed!r}"
    assert "Drift-Fixing" not in README  # the paper never expands the acronym


@pytest.mark.parametrize("doc", DOCS[1:])
def test_each_docs_page_opens_with_when_you_need_it(doc):
    paragraphs = [p for p in _text(doc).split("\n\n") if p.strip()]
    assert paragraphs[0].startswith("# ") and paragraphs[1].startswith("**When you need this:**"), doc


def test_first_two_commands_are_the_main_job_and_the_tests_and_ci_runs_the_test_command():
    first_block = CODE_BLOCKS[0].strip().splitlines()
    assert first_block[0].startswith("bash scripts/quickstart.sh")
    assert first_block[1].startswith("bash scripts/test.sh")
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    for script in ("scripts/quickstart.sh", "scripts/demo.sh", "scripts/test.sh", "scripts/setup_env.sh"):
        assert (ROOT / script).exists()
    # each sets itself up on a fresh machine, then runs the real thing
    for script, runs in (("scripts/quickstart.sh", "python -m quickstart"), ("scripts/test.sh", "python -m pytest")):
        text = (ROOT / script).read_text()
        assert "source scripts/setup_env.sh" in text and runs in text, script


def _dfpo_main_overrides() -> list[list[str]]:
    commands = []
    for block in [block for doc in PAGES for block in _code_blocks(doc)]:
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            if "python -m dfpo.main" in line:
                tokens = line.split("python -m dfpo.main", 1)[1].split()
                command = [t.replace("$HOME", "/home/user").replace("$PWD", str(ROOT)) for t in tokens if "=" in t]
                if command not in commands:  # the same example on two pages composes once
                    commands.append(command)
    return commands


@pytest.mark.parametrize("overrides", _dfpo_main_overrides())
def test_dfpo_main_examples_compose_with_verl_config(overrides):
    from verl.utils.config import omega_conf_to_dataclass

    from dfpo.launch.compose import compose_trainer_config
    from dfpo.verl.loss_config import DFPOPolicyLossConfig

    cfg = compose_trainer_config(overrides + ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"], "dfpo_trainer")
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert isinstance(actor.policy_loss, DFPOPolicyLossConfig)
    assert cfg.trainer.v1.trainer_mode == "dfpo_sync"
    assert cfg.algorithm.adv_estimator == "dfpo"
