"""Benchmark the DFPO reward against verl 0.9.1's scorers, side by side in one run.

Math: on two labelled corpora (response, reference answer, label) -- the scorer's own
``tests/reward/data/math_labelled.jsonl`` and the held-out ``math_realistic.jsonl`` (written
from the public answer formats of AIME, HMMT, MATH-500 and DAPO-Math-17k by
``tests/reward/data/make_math_realistic.py``) -- accuracy and throughput of

* ours: ``reward.score.compute_score`` (its verdict cache is cleared before every pass),
* verl's ``verl.utils.reward_score.math_verify.compute_score`` (4-process spawn pool),
* verl's ``verl.utils.reward_score.math_dapo.compute_score`` (string matching),

sequentially and from 8 threads, plus the subset of rows our exact path cannot decide
(where both sides pay for math-verify).  One untimed warm-up pass per scorer first (so
worker start-up is excluded from both sides).

Code: per-problem wall time of ``reward.code_tests.score_code`` (one sandboxed process per
problem, at every isolation level available here, with the sandbox launched on demand and
launched ahead) vs running the same program once per test with bare
``python3 program.py < input`` and comparing the same way.

Usage: ``python scripts/bench_reward.py [--passes 5] [--code-repeats 10] [--only math|code] [--out FILE]``.
Prints a Markdown report (ratios computed within this run) and writes it, with the machine, date,
commit and versions, to ``benchmarks/results/reward-<UTC time>-<cpu capability>.json`` (BENCHMARKS.md
quotes it through ``scripts/results_tables.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CORPORA = (
    REPO / "tests" / "reward" / "data" / "math_labelled.jsonl",
    REPO / "tests" / "reward" / "data" / "math_realistic.jsonl",
)


def _load_corpus(corpus: Path) -> list[dict]:
    with open(corpus) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _math_scorers():
    from verl.utils.reward_score import math_dapo, math_verify

    from reward.math_scoring import verdict_cache
    from reward.score import compute_score

    def ours(response: str, gold: str) -> bool:
        return compute_score("math_dapo", response, gold)["acc"] == 1.0

    def verl_math_verify(response: str, gold: str) -> bool:
        return math_verify.compute_score(response, gold) > 0

    def verl_math_dapo(response: str, gold: str) -> bool:
        return bool(math_dapo.compute_score(response, gold)["acc"])

    return {
        "ours (reward.score)": (ours, verdict_cache.clear),
        "verl math_verify": (verl_math_verify, lambda: None),
        "verl math_dapo": (verl_math_dapo, lambda: None),
    }


def _timed_passes(fn, reset, rows, passes: int, threads: int) -> tuple[float, list[bool]]:
    """(seconds per call, verdicts of the last pass)."""
    verdicts: list[bool] = []
    started = time.perf_counter()
    for _ in range(passes):
        reset()
        if threads == 1:
            verdicts = [fn(row["response"], row["ground_truth"]) for row in rows]
        else:
            with ThreadPoolExecutor(threads) as executor:
                verdicts = list(executor.map(lambda row: fn(row["response"], row["ground_truth"]), rows))
    return (time.perf_counter() - started) / (passes * len(rows)), verdicts


def bench_math(passes: int, corpus: Path) -> list[str]:
    from reward.math_answer import extract_answer, quick_compare

    rows = _load_corpus(corpus)
    hard_rows = [
        row
        for row in rows
        if (pred := extract_answer(row["response"])) is not None and quick_compare(row["ground_truth"], pred) is None
    ]
    scorers = _math_scorers()
    for fn, reset in scorers.values():  # warm-up: pools started, first-call costs paid
        reset()
        for row in rows:
            fn(row["response"], row["ground_truth"])
    lines = [
        f"Corpus: `{corpus.relative_to(REPO)}`, {len(rows)} labelled responses "
        f"({sum(r['label'] for r in rows)} correct); {len(hard_rows)} of them need math-verify "
        f"(our exact path cannot decide). {passes} timed passes each, cache cleared per pass.",
        "",
        "| scorer | accuracy | ms/call, 1 thread | ms/call, 8 threads | ms/call, math-verify subset (1 thread) |",
        "|---|---|---|---|---|",
    ]
    results = {}
    for name, (fn, reset) in scorers.items():
        single, verdicts = _timed_passes(fn, reset, rows, passes, 1)
        multi, _ = _timed_passes(fn, reset, rows, passes, 8)
        hard, _ = _timed_passes(fn, reset, hard_rows, passes, 1)
        correct = sum(v == bool(row["label"]) for v, row in zip(verdicts, rows, strict=True))
        results[name] = (single, multi, hard, correct)
        lines.append(
            f"| {name} | {correct}/{len(rows)} ({correct / len(rows):.1%}) | {single * 1e3:.3f} | "
            f"{multi * 1e3:.3f} | {hard * 1e3:.3f} |"
        )
    ours = results["ours (reward.score)"]
    anchor = results["verl math_verify"]
    lines += [
        "",
        f"Throughput ratio ours / verl math_verify (higher is better): 1 thread "
        f"{anchor[0] / ours[0]:.1f}x, 8 threads {anchor[1] / ours[1]:.1f}x, "
        f"math-verify subset {anchor[2] / ours[2]:.2f}x.",
    ]
    return lines


PROBLEMS = {
    "a+b, 1 test": (
        "a, b = map(int, input().split())\nprint(a + b)\n",
        [("1 2\n", "3")],
    ),
    "a+b, 10 tests": (
        "a, b = map(int, input().split())\nprint(a + b)\n",
        [(f"{i} {2 * i}\n", str(3 * i)) for i in range(10)],
    ),
    "prime sieve to 2e6, 3 tests": (
        "n = int(input())\nsieve = bytearray([1]) * (n + 1)\nsieve[0:2] = b'\\x00\\x00'\n"
        "for i in range(2, int(n ** 0.5) + 1):\n    if sieve[i]:\n"
        "        sieve[i * i :: i] = bytearray(len(range(i * i, n + 1, i)))\nprint(sum(sieve))\n",
        [("2000000\n", "148933"), ("1000000\n", "78498"), ("100\n", "25")],
    ),
}


def _bare(program: str, tests: list[tuple[str, str]]) -> bool:
    from reward.code_tests import stdin_output_matches

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "program.py")
        Path(path).write_text(program)
        ok = True
        for test_input, expected in tests:
            done = subprocess.run(
                ["/usr/bin/python3", path], input=test_input, capture_output=True, text=True, timeout=30
            )
            ok = ok and done.returncode == 0 and stdin_output_matches(done.stdout, expected)
        return ok


def bench_code(repeats: int) -> list[str]:
    from reward import sandbox as sandbox_module
    from reward.code_tests import CodeLimits, score_code

    levels = [level for level in sandbox_module.LEVELS if sandbox_module._probe(level)[0] is not None]
    # per level: sandboxes launched on demand (spares=0) and launched ahead (the default, spares=2)
    variants = {
        f"{level} {kind}": sandbox_module.Sandbox(level, spares=spares)
        for level in levels
        for kind, spares in (("on demand", 0), ("ahead", 2))
    }
    header = "| problem | bare python3 (ms) | " + " | ".join(f"{name} (ms) | / bare" for name in variants) + " |"
    lines = [
        f"Median of {repeats} runs per problem, variants interleaved round-robin; "
        "bare = one `python3 program.py < input` per test. `on demand`: the sandbox is launched "
        "when the problem arrives; `ahead`: the default, a sandbox launched ahead in the background "
        "takes the problem (one per problem, never reused). "
        f"Isolation levels available here: {', '.join(levels)}.",
        "",
        header,
        "|---|---|" + "---|---|" * len(variants),
    ]
    for name, (program, tests) in PROBLEMS.items():
        spec = json.dumps(
            {"tests": [{"input": i, "output": o, "testtype": "stdin"} for i, o in tests], "fn_name": None}
        )
        response = f"```python\n{program}```"
        times: dict[str, list[float]] = {"bare": [], **{variant: [] for variant in variants}}
        for _ in range(repeats):  # round-robin, so load bursts from elsewhere hit every variant alike
            started = time.perf_counter()
            assert _bare(program, tests)
            times["bare"].append(time.perf_counter() - started)
            for variant, sandbox in variants.items():
                started = time.perf_counter()
                verdict = score_code(response, spec, limits=CodeLimits(), sandbox=sandbox)
                times[variant].append(time.perf_counter() - started)
                assert verdict.reason == "correct", (variant, name, verdict.reason)
        bare = statistics.median(times["bare"])
        cells = [f"{bare * 1e3:.1f}"]
        for variant in variants:
            ours = statistics.median(times[variant])
            cells += [f"{ours * 1e3:.1f}", f"{ours / bare:.2f}x"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for sandbox in variants.values():
        sandbox.close()
    return lines + ["", *_cpu_per_problem(levels, repeats)]


def _cpu_seconds() -> float:
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _cpu_per_problem(levels: list[str], repeats: int) -> list[str]:
    """CPU time (this process and all its finished children) per one-test problem, each variant
    run alone; sandboxes launched ahead are closed at the end, so their launches are counted."""
    from reward import sandbox as sandbox_module
    from reward.code_tests import CodeLimits, score_code

    program, tests = PROBLEMS["a+b, 1 test"]
    spec = json.dumps({"tests": [{"input": i, "output": o, "testtype": "stdin"} for i, o in tests], "fn_name": None})
    response = f"```python\n{program}```"
    started = _cpu_seconds()
    for _ in range(repeats):
        assert _bare(program, tests)
    cells = {"bare python3": (_cpu_seconds() - started) / repeats}
    for level in [level for level in levels if level != "bwrap"]:  # see the note below
        for kind, spares in (("on demand", 0), ("ahead", 2)):
            sandbox = sandbox_module.Sandbox(level, spares=spares)
            started = _cpu_seconds()
            for _ in range(repeats):
                assert score_code(response, spec, limits=CodeLimits(), sandbox=sandbox).reason == "correct"
            sandbox.close()
            cells[f"{level} {kind}"] = (_cpu_seconds() - started) / repeats
    bare = cells["bare python3"]
    return [
        f'CPU time per problem, "a+b, 1 test" ({repeats} problems per variant, run alone; user + system '
        "time of this process and its finished children, so launches made ahead are counted):",
        "",
        "| " + " | ".join(cells) + " |",
        "|" + "---|" * len(cells),
        "| " + " | ".join(f"{value * 1e3:.1f} ms ({value / bare:.2f}x)" for value in cells.values()) + " |",
        "",
        "(bwrap is left out: the processes inside its PID namespace are not all reaped through the "
        "chain of waits that `getrusage(RUSAGE_CHILDREN)` counts, so its CPU time reads far too low.)",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=int, default=5, help="timed passes over the math corpus per scorer")
    parser.add_argument("--code-repeats", type=int, default=10, help="runs per code problem and level")
    parser.add_argument("--out", type=Path, help="also write the Markdown report here")
    parser.add_argument("--only", choices=("math", "code"), help="run one part only")
    args = parser.parse_args()
    from reward.sandbox import isolation

    report = isolation()
    lines = [
        f"Date (UTC): {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M')}; machine: {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load average at start "
        f"{os.getloadavg()[0]:.1f}; sandbox isolation: {report.level}.",
        "",
    ]
    if args.only in (None, "math"):
        for corpus in CORPORA:
            lines += [f"#### Math: accuracy and throughput ({corpus.stem})", "", *bench_math(args.passes, corpus), ""]
    if args.only in (None, "code"):
        lines += ["#### Code: sandbox overhead per problem", "", *bench_code(args.code_repeats), ""]
    text = "\n".join(lines).rstrip("\n")
    print(text)
    if args.out:
        args.out.write_text(text)
    import torch
    from benchmark_record import environment, write_result

    record = {
        "benchmark": "reward",
        "command": "python scripts/bench_reward.py " + " ".join(sys.argv[1:]),
        "environment": {**environment(), "sandbox_isolation": report.level},
        "report_markdown": text,
    }
    print(f"wrote {write_result('reward', str(torch.backends.cpu.get_cpu_capability()), record)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
