"""LiveCodeBench's own evaluation harness, run as an oracle for the differential tests.

The ``nvidia-livecodebench`` package (installed for the tests only, without its
dependencies, from ``requirements-test-oracle.txt``) ships LiveCodeBench's evaluator.
:func:`lcb_verdicts` runs a batch of (response, ground truth) pairs through it exactly as
``lcb_runner`` does for a benchmark run: ``extract_code`` (chat-model style) takes the
program, and ``evaluate_generations`` grades it in a pool of worker processes
(``check_correctness`` -> ``run_test``), with its per-test limit and whole-run limit.

The programs run with no sandbox (LiveCodeBench has none), so only the test suite's own,
trusted programs may be given to it.  It runs in a separate interpreter and writes its
results to a file: LiveCodeBench's ``reliability_guard`` disables parts of ``os`` and
``shutil`` in whichever process grades, and functional programs print to the real stdout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ORACLE_PACKAGE = "nvidia-livecodebench"
ORACLE_REQUIREMENTS = "requirements-test-oracle.txt"

_RUNNER = r"""
import json, sys
from livecodebench.evaluation.compute_code_generation_metrics import evaluate_generations
from livecodebench.lm_styles import LMStyle
from livecodebench.utils.extraction_utils import extract_code

with open(sys.argv[1]) as handle:
    batch = json.load(handle)
samples, generations = [], []
for response, ground_truth in batch["cases"]:
    spec = json.loads(ground_truth)
    samples.append({"input_output": json.dumps({
        "inputs": [test["input"] for test in spec["tests"]],
        "outputs": [test["output"] for test in spec["tests"]],
        "fn_name": spec["fn_name"],
    })})
    generations.append([extract_code(response, LMStyle.OpenAIChat)])
results, _ = evaluate_generations(samples, generations, num_process_evaluate=batch["workers"], timeout=batch["timeout"])
with open(sys.argv[2], "w") as handle:
    json.dump([results[index][0] for index in range(len(samples))], handle, default=bool)
"""


class OracleMissing(RuntimeError):
    """LiveCodeBench's evaluator is not installed in this environment."""


def check_oracle_installed() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import livecodebench.evaluation.testing_util"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        raise OracleMissing(
            f"{ORACLE_PACKAGE} (LiveCodeBench's evaluator, the oracle of these tests) is not importable: "
            f"{probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else 'unknown error'}. "
            f"Install it with `pip install --no-deps -r {ORACLE_REQUIREMENTS}` (scripts/setup_env.sh does)."
        )


def lcb_results(cases: list[tuple[str, str]], timeout_s: int, workers: int = 2) -> list[list]:
    """LiveCodeBench's per-test result list for each (response, ground truth JSON) pair."""
    check_oracle_installed()
    with tempfile.TemporaryDirectory(prefix="lcb-oracle-") as directory:
        batch, out = Path(directory, "batch.json"), Path(directory, "results.json")
        batch.write_text(json.dumps({"cases": cases, "timeout": int(timeout_s), "workers": workers}))
        done = subprocess.run(
            [sys.executable, "-c", _RUNNER, str(batch), str(out)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=directory,
            timeout=600,
        )
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"the LiveCodeBench oracle failed: {done.stderr.decode(errors='replace')[-2000:]}")
        return json.loads(out.read_text())


def lcb_verdict(results: list, n_tests: int) -> str:
    """LiveCodeBench's result list as one of our reasons.

    A problem passes when every entry is > 0 (``True``); the first other entry names the
    failure: ``False``/-2 wrong answer, -3 time limit, -1 whole-run limit (also recorded
    when the grading process died), -4 runtime or compile error.
    """
    if len(results) == n_tests and all(entry is True for entry in results):
        return "correct"
    first = next(entry for entry in results if entry is not True)
    if first is False or first == -2:
        return "wrong_answer"
    if first in (-3, -1):
        return "timeout"
    if first == -4:
        return "runtime_error"
    raise AssertionError(f"unexpected LiveCodeBench result entry {first!r} in {results!r}")
