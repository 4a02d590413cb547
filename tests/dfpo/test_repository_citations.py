"""Every document the repository cites is in the repository, and nothing cites a machine path.

Code, tests, recipes and docs cite notes such as ``docs/method.md §4``; a cited ``NAME.md`` must be
a tracked file (by path, or by name when cited without a folder), and no tracked file may point at
a path of the machine it was written on.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = {".py", ".sh", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg"}
# a note cited by name (README.md, METHOD.md, CPU_E2E.md) or by path (docs/method.md); lower-case bare
# names such as table1.md are files that tools write, not citations
MD_CITATION = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]+\.md|[A-Z][A-Z0-9_]*\.md)\b")
MACHINE_PATHS = re.compile(r"(/work/|/home/\w+/|shared/spec|\.\./shared/|/root/)")
THIS_FILE = Path(__file__).resolve()


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    files = [REPO_ROOT / name for name in listed if name]
    return [f for f in files if f.suffix in TEXT_SUFFIXES and f.is_file() and f.resolve() != THIS_FILE]


def test_cited_documents_exist():
    files = tracked_text_files()
    tracked_md = {f.relative_to(REPO_ROOT).as_posix() for f in files if f.suffix == ".md"}
    names = {Path(p).name for p in tracked_md}
    missing = []
    for path in files:
        for cited in MD_CITATION.findall(path.read_text(encoding="utf-8", errors="replace")):
            relative = (path.parent / cited).resolve()
            exists = cited in tracked_md or cited in names or relative.is_file()
            if not exists:
                missing.append(f"{path.relative_to(REPO_ROOT)} cites {cited}")
    assert not missing, "documents cited but not in the repository:\n" + "\n".join(sorted(set(missing)))


def test_no_machine_paths():
    hits = []
    for path in tracked_text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if MACHINE_PATHS.search(line):
                hits.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}")
    assert not hits, "machine paths in tracked files:\n" + "\n".join(hits)


def test_the_method_note_has_the_cited_sections():
    text = (REPO_ROOT / "docs" / "method.md").read_text(encoding="utf-8")
    for section in ("## 1. ", "## 2. ", "## 3. ", "## 4. "):
        assert section in text
