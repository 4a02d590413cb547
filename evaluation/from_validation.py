"""An evaluation run directory from verl's own validation: the held-out samples the trainer drew.

    python -m evaluation.from_validation \\
        --dump outputs/validation/<experiment>/120.jsonl --data ~/data/dfpo/aime25.parquet \\
        --tokenizer /path/to/model --output-dir runs/qwen3_32b_dfpo_s0_step120 \\
        --k 32 --temperature 0.6 --top-p 0.95 --top-k 20 --max-new-tokens 38912

With ``trainer.validation_data_dir=DIR`` verl's trainer writes every validation to
``DIR/<step>.jsonl`` (``RayPPOTrainer._dump_generations``): one line per sample with the decoded
prompt (``input``), the decoded response (``output``), the ground truth (``gts``), the reward
(``score``), whatever the reward function returned beside it (``reward/score.py``: ``acc``,
``pred``, ``reason``, ...) and verl's sample key (``uid``: ``<prompt uid>_<sample>_<turn>``). This
module turns one such file into the directory ``python -m evaluation.generate`` writes
(``run.json``, ``samples.jsonl``, ``summary.json``; see ``run_store.py``), so the report computes
avg@k, its bootstrap CI and the paired tests from the very samples the trainer validated on,
scored by the same reward function, with no second model load or generation.

Each line is matched to its problem of ``--data`` by the prompt: a problem's messages through the
tokenizer's chat template with the generation prompt, decoded without special tokens — the text
verl's validation decodes from the prompt ids its agent loop built the same way. A line whose
prompt is no problem's, a problem with other than k samples, or a line without ``acc`` is an error
naming the file and line, never dropped.

What the dump does not hold is recorded as such in ``run.json``: the per-sample seed (``null``:
the engine's, ``actor_rollout_ref.rollout.seed``), and the response length, which is the decoded
response re-tokenized (``num_tokens``; the end-of-sequence token is not counted), truncated when it
reaches ``--max-new-tokens``.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evaluation.problems import EvalProblem, file_sha256, load_problems
from evaluation.run_store import RunStore
from evaluation.sampling_settings import SamplingConfig
from evaluation.scoring import DEFAULT_SCORER, scorer_version
from evaluation.summary import summarize

BACKEND_NAME = "verl-validation"
# the keys of verl's dump that are verl's own; every other key is the reward function's extra info
VERL_KEYS = frozenset({"input", "output", "gts", "score", "step", "uid", "reward"})


def rendered_prompt(tokenizer, problem: EvalProblem, chat_template_kwargs: dict[str, Any]) -> str:
    """The prompt as verl's validation dump shows it: the chat template with the generation
    prompt, tokenized, then decoded without special tokens."""
    ids = tokenizer.apply_chat_template(
        problem.messages, add_generation_prompt=True, tokenize=True, **chat_template_kwargs
    )
    if hasattr(ids, "keys") and "input_ids" in ids:  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return tokenizer.decode(list(ids), skip_special_tokens=True)


def prompt_index(
    tokenizer, problems: Sequence[EvalProblem], chat_template_kwargs: dict[str, Any]
) -> dict[str, EvalProblem]:
    """Rendered prompt -> problem; two problems with one prompt cannot be told apart in a dump."""
    index: dict[str, EvalProblem] = {}
    for problem in problems:
        text = rendered_prompt(tokenizer, problem, chat_template_kwargs).strip()
        if text in index:
            raise ValueError(
                f"problems {index[text].problem_id} and {problem.problem_id} have the same prompt: verl's validation "
                "dump "
                "names a sample's problem by its prompt only, so these two cannot be told apart"
            )
        index[text] = problem
    return index


def _sample_number(uid: Any, where: str) -> tuple[str, int]:
    """(prompt uid, sample number) from verl's ``<prompt uid>_<sample>_<turn>`` key."""
    parts = str(uid).rsplit("_", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        raise ValueError(f"{where}: uid {uid!r} is not verl's <prompt uid>_<sample>_<turn> key")
    return parts[0], int(parts[1])


def read_dump(path: Path) -> list[dict[str, Any]]:
    """The lines of one validation dump, each checked for the keys this module reads."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist: verl writes <trainer.validation_data_dir>/<step>.jsonl at each validation "
            "(set trainer.validation_data_dir, and trainer.test_freq / trainer.val_before_train for the steps)"
        )
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        where = f"{path} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{where}: not valid JSON ({error})") from None
        missing = [key for key in ("input", "output", "score", "uid") if key not in record]
        if missing:
            raise ValueError(f"{where}: lacks {missing}; not a verl validation dump")
        if "acc" not in record:
            raise ValueError(
                f"{where}: no 'acc': the reward function returned no accuracy beside the score "
                "(reward/score.py's compute_score does; use it, or a function that returns acc in [0, 1])"
            )
        records.append(record)
    if not records:
        raise ValueError(f"{path} is empty: the validation generated nothing")
    return records


def convert(
    dump: Path,
    data: Sequence[Path],
    tokenizer,
    output_dir: Path,
    k: int,
    sampling: SamplingConfig,
    backend: dict[str, Any],
    scorer_kwargs: dict[str, Any] | None = None,
    model: str | None = None,
) -> dict[str, Any]:
    """Write ``output_dir`` (run.json, samples.jsonl, summary.json) from the dump; return the summary."""
    problems: list[EvalProblem] = []
    data_info, data_by_source = [], {}
    for path in data:
        loaded = load_problems(path)
        digest = file_sha256(path)
        data_info.append({"path": str(Path(path).resolve()), "sha256": digest, "rows": len(loaded)})
        for source in dict.fromkeys(p.data_source for p in loaded):
            data_by_source.setdefault(source, []).append(digest)
        problems.extend(loaded)
    by_prompt = prompt_index(tokenizer, problems, sampling.chat_template_kwargs)
    samples: dict[str, list[tuple[str, int, dict[str, Any]]]] = defaultdict(list)
    for number, record in enumerate(read_dump(dump), start=1):
        where = f"{dump} line {number}"
        problem = by_prompt.get(str(record["input"]).strip())
        if problem is None:
            raise ValueError(
                f"{where}: its prompt is none of the {len(problems)} problems of {', '.join(map(str, data))} as "
                f"{getattr(tokenizer, 'name_or_path', 'the tokenizer')}'s chat template renders them; the dump is of "
                "other "
                "data, another tokenizer, or other chat-template variables. Its prompt ends: "
                f"{str(record['input'])[-120:]!r}"
            )
        samples[problem.problem_id].append((*_sample_number(record["uid"], where), record))
    absent = [p.problem_id for p in problems if p.problem_id not in samples]
    wrong = {pid: len(rows) for pid, rows in samples.items() if len(rows) != k}
    if absent or wrong:
        raise ValueError(
            f"{dump}: every problem needs k={k} samples (actor_rollout_ref.rollout.val_kwargs.n); "
            + (f"{len(absent)} have none, e.g. {absent[:3]}; " if absent else "")
            + (f"{len(wrong)} have another number, e.g. {dict(list(wrong.items())[:3])}" if wrong else "")
        )
    per_problem: list[list[dict[str, Any]]] = []
    for problem in problems:
        rows = sorted(samples[problem.problem_id], key=lambda row: row[1])
        if len({uid for uid, _, _ in rows}) != 1:
            raise ValueError(
                f"{dump}: the samples of {problem.problem_id} come from several validation prompts (the dump mixes "
                "validations)"
            )
        lines = []
        for index, (_, _, record) in enumerate(rows):
            tokens = len(tokenizer.encode(str(record["output"]), add_special_tokens=False))
            extra = {key: value for key, value in record.items() if key not in VERL_KEYS}
            lines.append(
                {
                    "problem_id": problem.problem_id,
                    "data_source": problem.data_source,
                    "difficulty": problem.difficulty,
                    "row": problem.row,
                    "sample_index": index,
                    "seed": None,
                    "response": record["output"],
                    "num_tokens": tokens,
                    "truncated": tokens >= sampling.max_new_tokens,
                    **extra,
                    "score": record["score"],
                    "acc": record["acc"],
                }
            )
        per_problem.append(lines)
    manifest = {
        "model": model,
        "data": data_info,
        "backend": {"name": BACKEND_NAME, **backend},
        "sampling": sampling.to_dict(),
        "k": k,
        "seed": None,
        "scorer": {"function": DEFAULT_SCORER, "kwargs": scorer_kwargs or {}},
        "scorer_version": scorer_version(DEFAULT_SCORER),
        "n_problems": len(problems),
        "data_by_source": data_by_source,
        "validation_dump": {"path": str(Path(dump).resolve()), "sha256": file_sha256(dump), "step": _step(dump)},
        "num_tokens": "the decoded response re-tokenized, without its end-of-sequence token",
    }
    # the run directory as evaluation.generate writes it (a new one each time: the dump is the run)
    store = RunStore(output_dir, manifest, overwrite=True)
    store.open()
    for lines in per_problem:
        store.append_problem(lines)
    summary = {"manifest": store.manifest, **summarize([line for lines in per_problem for line in lines], k)}
    store.write_summary(summary)
    return summary


def _step(dump: Path) -> int | None:
    return int(dump.stem) if dump.stem.isdigit() else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m evaluation.from_validation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", required=True, type=Path, help="<trainer.validation_data_dir>/<step>.jsonl")
    parser.add_argument(
        "--data", required=True, nargs="+", type=Path, help="the validation parquet file(s) (data.val_files)"
    )
    parser.add_argument("--tokenizer", required=True, help="the model's directory (its tokenizer and chat template)")
    parser.add_argument("--output-dir", required=True, type=Path)
    parser.add_argument(
        "--k", type=int, required=True, help="samples per problem: actor_rollout_ref.rollout.val_kwargs.n"
    )
    parser.add_argument("--temperature", type=float, required=True, help="val_kwargs.temperature")
    parser.add_argument("--top-p", type=float, required=True, help="val_kwargs.top_p")
    parser.add_argument("--top-k", type=int, required=True, help="val_kwargs.top_k (-1 or 0: off)")
    parser.add_argument("--max-new-tokens", type=int, required=True, help="data.max_response_length")
    parser.add_argument(
        "--chat-template-kwargs", type=json.loads, default={}, help="JSON: the run's chat-template variables"
    )
    parser.add_argument(
        "--scorer-kwargs", type=json.loads, default={}, help="JSON: reward.custom_reward_function.reward_kwargs"
    )
    parser.add_argument(
        "--dtype", default=None, help="the rollout engine's dtype (recorded; runs compare only at equal dtypes)"
    )
    parser.add_argument(
        "--engine", default="vllm", help="the rollout engine (actor_rollout_ref.rollout.name; recorded)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from transformers import AutoTokenizer

    sampling = SamplingConfig(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=None if args.top_k <= 0 else args.top_k,
        max_new_tokens=args.max_new_tokens,
        chat_template_kwargs=args.chat_template_kwargs,
    )
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    try:
        summary = convert(
            args.dump,
            args.data,
            tokenizer,
            args.output_dir,
            args.k,
            sampling,
            backend={"engine": args.engine, "dtype": args.dtype},
            scorer_kwargs=args.scorer_kwargs,
            model=str(args.tokenizer),
        )
    except (ValueError, FileNotFoundError) as error:
        raise SystemExit(f"evaluation.from_validation: {error}") from None
    overall = summary["overall"]
    print(
        f"{overall['n_problems']} problems x {args.k} samples: avg@{args.k} = {100 * overall['avg@k']:.2f}%; wrote "
        f"{args.output_dir}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
