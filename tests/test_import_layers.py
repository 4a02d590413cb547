"""The repository's layers, as its imports show them: each package imports only the layers below it.

Read from the source (every ``import`` statement, at module level or inside a function), so a lazy
import counts as much as a top-level one:

* ``dfpo/algorithm``: the paper's maths: the standard library, torch and numpy only;
* ``dfpo/operations``: preemption, node loss, run logs: nothing of DFPO's maths or of the verl seam;
* ``dfpo/verl``: the seam: the maths, operations, verl;
* ``dfpo/vllm_fixes``: the seam into vLLM, loaded in vLLM's own processes: nothing of this repository;
* ``dfpo/launch``: the checks and the config before Ray starts: anything of ``dfpo`` but the entry point,
  the CPU backend (its switch), the CPU examples (their preparation) and the rewards (their checks);
* ``cpu_backend``: verl on CPU: nothing of this repository;
* ``reward`` and ``data_prep``: nothing of ``dfpo`` or of the packages above it;
* no module imports, directly or through others, one that imports it back when it is imported.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dfpo", "reward", "data_prep", "cpu_backend", "cpu_examples", "evaluation", "demo", "quickstart")
STDLIB = set(sys.stdlib_module_names)


def _module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_nodes(node: ast.AST, in_function: bool = False):
    """Each import statement under ``node``, with whether it runs only when a function is called."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, in_function
        yield from _import_nodes(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))


def _imports(path: Path, module: str, ours: set[str], at_import_only: bool = False) -> set[str]:
    """Every module ``path`` imports: ``from a import b`` counts as ``a.b`` when that is one of ``ours``,
    else as ``a`` (a package's ``__init__`` is imported only for names it defines itself)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node, in_function in _import_nodes(tree):
        if at_import_only and in_function:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against this module's package
                base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            for alias in node.names:
                found.add(f"{name}.{alias.name}" if f"{name}.{alias.name}" in ours else name)
    return found


def _graph(root: Path = REPO_ROOT, at_import_only: bool = False) -> dict[str, set[str]]:
    files = {_module_name(root, p): p for package in PACKAGES for p in (root / package).rglob("*.py")}
    ours = set(files)
    graph = {}
    for module, path in files.items():
        graph[module] = set()
        for name in _imports(path, module, ours, at_import_only):
            if name.split(".")[0] in PACKAGES:  # the longest name that is a module of ours
                while name and name not in ours:
                    name = name.rpartition(".")[0]
                if name and name != module:
                    graph[module].add(name)
            else:
                graph[module].add(name)
    return graph


GRAPH = _graph()
GRAPH_AT_IMPORT = _graph(at_import_only=True)  # without the imports inside functions (made lazy to break a cycle)


def _within(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _violations(graph: dict[str, set[str]], layer: str, allowed) -> list[str]:
    return sorted(
        f"{module} imports {name}"
        for module, names in graph.items()
        if _within(module, layer)
        for name in names
        if not allowed(name)
    )


def _is_third_party(name: str) -> bool:
    return name.split(".")[0] not in PACKAGES


RULES = {
    # the maths: torch, numpy and the standard library
    "dfpo.algorithm": lambda n: _within(n, "dfpo.algorithm", "torch", "numpy") or n.split(".")[0] in STDLIB,
    "dfpo.operations": lambda n: _within(n, "dfpo.operations") or _is_third_party(n),
    "dfpo.verl": lambda n: _within(n, "dfpo", "dfpo.algorithm", "dfpo.operations", "dfpo.verl") or _is_third_party(n),
    # loaded by vLLM in its own processes, which need not import verl or anything else of dfpo
    "dfpo.vllm_fixes": lambda n: _within(n, "dfpo.vllm_fixes") or _is_third_party(n),
    "dfpo.launch": lambda n: (
        (_within(n, "dfpo") and not _within(n, "dfpo.main"))
        or _within(n, "cpu_backend", "cpu_examples", "reward")
        or _is_third_party(n)
    ),
    "cpu_backend": lambda n: _within(n, "cpu_backend") or _is_third_party(n),
    "reward": lambda n: _within(n, "reward") or _is_third_party(n),
    "data_prep": lambda n: _within(n, "data_prep", "reward") or _is_third_party(n),
}


@pytest.mark.parametrize("layer", sorted(RULES))
def test_each_layer_imports_only_the_layers_below_it(layer):
    assert _violations(GRAPH, layer, RULES[layer]) == []


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among our modules (as a path a -> b -> ... -> a), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for name in sorted(graph.get(module, ())):
            if name not in graph:
                continue
            if state.get(name) == 1:
                return path[path.index(name) :] + [name]
            if name not in state and (found := visit(name)):
                return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_no_module_imports_itself_back():
    """At import time (an import inside a function, such as a backend factory's, runs later)."""
    assert _cycle(GRAPH_AT_IMPORT) is None, " -> ".join(_cycle(GRAPH_AT_IMPORT))


def test_the_checks_fail_on_an_upward_import_and_on_a_cycle(tmp_path):
    """Mutants: the maths importing verl's seam, a vLLM fix importing it, the CPU backend importing dfpo, and a
    two-module cycle."""
    for package, files in {
        "dfpo": {
            "__init__.py": "",
            "algorithm/__init__.py": "",
            "algorithm/loss.py": "import torch\nfrom dfpo.verl.plugin import DFPO_NAME\n",
            "verl/__init__.py": "",
            "verl/plugin.py": "from dfpo.algorithm import loss\n",
            "vllm_fixes/__init__.py": "",
            "vllm_fixes/fix.py": "import vllm\nfrom dfpo.verl import plugin\n",
        },
        "cpu_backend": {"__init__.py": "", "platform.py": "def f():\n    from dfpo.verl import plugin\n"},
    }.items():
        for name, text in files.items():
            (tmp_path / package / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / package / name).write_text(text)
    for package in PACKAGES[1:]:
        (tmp_path / package).mkdir(exist_ok=True)
    graph = _graph(tmp_path)
    assert _violations(graph, "dfpo.algorithm", RULES["dfpo.algorithm"]) == [
        "dfpo.algorithm.loss imports dfpo.verl.plugin"
    ]
    assert _violations(graph, "dfpo.vllm_fixes", RULES["dfpo.vllm_fixes"]) == [
        "dfpo.vllm_fixes.fix imports dfpo.verl.plugin"
    ]
    assert _violations(graph, "cpu_backend", RULES["cpu_backend"]) == ["cpu_backend.platform imports dfpo.verl.plugin"]
    assert set(_cycle(graph)) == {"dfpo.algorithm.loss", "dfpo.verl.plugin"}
    assert _cycle(_graph(tmp_path, at_import_only=True)) is not None
    # the real graph is read the same way: the edges these mutants add are ones it would see
    assert "dfpo.algorithm.transforms" in GRAPH["dfpo.algorithm.loss"]
