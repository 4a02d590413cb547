"""``python -m data_prep.math`` end to end on fixtures in each source's real file format."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_prep import math as math_cli
from data_prep.math_prompts import BOXED_SUFFIX, DAPO_PREFIX, DAPO_SUFFIX
from data_prep.schema import validate_parquet_file

from .conftest import read_rows, read_summary

REPO = Path(__file__).resolve().parents[2]

EVAL_FIXTURES = {
    "aime25": ("aime25_test.jsonl", [("0", "70"), ("1", "24")]),
    "aime24": ("aime_2024_problems.parquet", [("2024-I-1", "144"), ("2024-I-2", "81")]),
    "hmmt25": ("hmmt_feb_2025.parquet", [("1", "4"), ("2", "\\frac{5}{6}")]),
    "math500": ("math500_test.jsonl", [("test/algebra/1.json", "5\\sqrt{2}"), ("test/prealgebra/2.json", "6")]),
}


def run(argv: list[str]) -> int:
    return math_cli.main(argv)


@pytest.mark.parametrize("source", sorted(EVAL_FIXTURES))
def test_evaluation_sets(source, fixtures, tmp_path):
    name, expected = EVAL_FIXTURES[source]
    output = tmp_path / f"{source}.parquet"
    assert run(["--input", f"{source}={fixtures / name}", "--output", str(output)]) == 0
    assert validate_parquet_file(output) == len(expected)
    rows = read_rows(output)
    assert [(r["extra_info"]["source_id"], r["reward_model"]["ground_truth"]) for r in rows] == expected
    for position, row in enumerate(rows):
        assert row["data_source"] == source and row["ability"] == "math"
        assert row["extra_info"]["split"] == "test" and row["extra_info"]["index"] == position
        assert row["prompt"] == [{"role": "user", "content": row["extra_info"]["problem"] + BOXED_SUFFIX}]


def test_deepscaler_json_list(fixtures, tmp_path):
    output = tmp_path / "deepscaler.parquet"
    assert run(["--input", f"deepscaler={fixtures / 'deepscaler.json'}", "--output", str(output)]) == 0
    rows = read_rows(output)
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["8", "32"]
    assert [r["extra_info"]["source_id"] for r in rows] == ["row 0", "row 1"]
    assert {r["extra_info"]["split"] for r in rows} == {"train"}


def test_dapo_is_deduplicated_and_its_prompt_reproduced(fixtures, tmp_path):
    source = fixtures / "dapo_math_17k.parquet"
    output = tmp_path / "math_train.parquet"
    summary = tmp_path / "summary.json"
    assert (
        run(
            [
                "--input",
                f"math_dapo={source}",
                "--output",
                str(output),
                "--template",
                "dapo",
                "--summary-json",
                str(summary),
            ]
        )
        == 0
    )
    rows = read_rows(output)
    originals = pq.read_table(source).to_pylist()
    # 6 rows = 3 problems (first copies at rows 0, 1 and 3), prompts byte-identical to DAPO's
    assert [r["prompt"][0]["content"] for r in rows] == [originals[i]["prompt"][0]["content"] for i in (0, 1, 3)]
    assert [r["extra_info"]["source_id"] for r in rows] == ["a1-0", "a2-1", "a3-3"]
    assert [r["reward_model"] for r in rows] == [{"style": "rule", "ground_truth": a} for a in ("55", "25", "70")]
    assert all(r["ability"] == "math" for r in rows)  # DAPO's "MATH" is normalised to the reward's kind
    report = read_summary(summary)
    assert report["rows_written"] == 3 and report["dropped"] == {"duplicate problem": 3}
    assert sum(report["rows_read"].values()) == 6


def test_no_dedup_keeps_every_copy(fixtures, tmp_path):
    output = tmp_path / "all.parquet"
    assert (
        run(["--input", f"math_dapo={fixtures / 'dapo_math_17k.parquet'}", "--output", str(output), "--no-dedup"]) == 0
    )
    assert len(read_rows(output)) == 6


def test_boxed_template_wraps_the_bare_problem(fixtures, tmp_path):
    output = tmp_path / "boxed.parquet"
    assert run(["--input", f"math_dapo={fixtures / 'dapo_math_17k.parquet'}", "--output", str(output)]) == 0
    first = read_rows(output)[0]
    assert first["prompt"][0]["content"] == "What is $1+2+\\cdots+10$?" + BOXED_SUFFIX
    assert DAPO_PREFIX not in first["prompt"][0]["content"] and DAPO_SUFFIX not in first["prompt"][0]["content"]


def test_contamination_is_reported_then_dropped(fixtures, tmp_path, capsys):
    aime25 = tmp_path / "aime25.parquet"
    assert run(["--input", f"aime25={fixtures / 'aime25_test.jsonl'}", "--output", str(aime25)]) == 0
    train = tmp_path / "train.parquet"
    base = [
        "--input",
        f"math_dapo={fixtures / 'dapo_math_17k.parquet'}",
        "--output",
        str(train),
        "--decontaminate-against",
        str(aime25),
    ]
    summary = tmp_path / "s.json"
    assert run(base + ["--summary-json", str(summary)]) == 0
    out = capsys.readouterr().out
    assert "dapo_math_17k.parquet row 3: normalised match with evaluation problem aime25.parquet aime25 0" in out
    assert len(read_rows(train)) == 3
    assert list(read_summary(summary)["notes"].values()) == [1]

    assert run(base + ["--drop-contaminated", "--summary-json", str(summary)]) == 0
    kept = read_rows(train)
    assert [r["extra_info"]["source_id"] for r in kept] == ["a1-0", "a2-1"]
    assert read_summary(summary)["dropped"]["contaminated (normalised match with an evaluation problem)"] == 1

    # the stand-alone report over prepared files finds the same pair (exit 1 = overlap found)
    from data_prep import contamination

    assert run(["--input", f"math_dapo={fixtures / 'dapo_math_17k.parquet'}", "--output", str(train)]) == 0
    assert contamination.main([str(train), "--against", str(aime25)]) == 1
    assert "0 exact and 1 normalised-text matches" in capsys.readouterr().out


def test_paraphrased_evaluation_problems_are_reported_as_near_duplicates_and_optionally_dropped(
    fixtures, tmp_path, capsys
):
    aime25 = tmp_path / "aime25.parquet"
    assert run(["--input", f"aime25={fixtures / 'aime25_test.jsonl'}", "--output", str(aime25)]) == 0
    path = tmp_path / "train.jsonl"
    rows = [
        {
            "problem": "Determine the sum of all integer bases b > 9 for which 17_b is a divisor of 97_b, then add 1.",
            "answer": "71",
        },  # AIME25 problem 0 reworded: shares a run of 18 words
        {"problem": "Find the sum of all integer bases $b>7$ for which $12_b$ divides $34_b$.", "answer": "3"},
        {"problem": "Find the remainder when $2^{10}$ is divided by $1000$.", "answer": "24"},  # AIME25 problem 1
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train, summary = tmp_path / "train.parquet", tmp_path / "s.json"
    base = [
        "--input",
        f"deepscaler={path}",
        "--output",
        str(train),
        "--decontaminate-against",
        str(aime25),
        "--summary-json",
        str(summary),
    ]
    assert run(base) == 0
    out = capsys.readouterr().out
    assert (
        f'{path}:line 1: ngram match with evaluation problem aime25.parquet aime25 0 (shares "the sum of all '
        'integer bases b 9 for which 17 b is")'
    ) in out
    assert len(read_rows(train)) == 3
    assert read_summary(summary)["notes"] == {
        "kept rows matching an evaluation problem (ngram); --drop-near-duplicates drops them": 1,
        "kept rows matching an evaluation problem (exact); --drop-contaminated drops them": 1,
    }

    assert run(base + ["--drop-contaminated"]) == 0  # tier 1 only
    assert [r["reward_model"]["ground_truth"] for r in read_rows(train)] == ["71", "3"]
    assert run(base + ["--drop-near-duplicates"]) == 0  # both tiers
    assert [r["reward_model"]["ground_truth"] for r in read_rows(train)] == ["3"]
    assert read_summary(summary)["dropped"] == {
        "contaminated (ngram match with an evaluation problem)": 1,
        "contaminated (exact match with an evaluation problem)": 1,
    }

    from data_prep import contamination

    assert run(["--input", f"deepscaler={path}", "--output", str(train)]) == 0
    capsys.readouterr()
    assert contamination.main([str(train), "--against", str(aime25)]) == 1
    assert (
        "1 exact and 0 normalised-text matches, 1 near duplicates (a shared run of 13 words)" in capsys.readouterr().out
    )
    capsys.readouterr()
    assert contamination.main([str(train), "--against", str(aime25), "--ngram-size", "19"]) == 1  # shared run: 18 words
    assert "1 exact and 0 normalised-text matches, 0 near duplicates" in capsys.readouterr().out


def test_near_duplicate_words_ignore_typesetting():
    from data_prep.near_duplicates import NgramIndex, words

    assert words("Let $x_{1} = \\dfrac{3}{4}$, ÉTÉ.") == ["let", "x", "1", "\\dfrac", "3", "4", "été"]
    index = NgramIndex(3)
    index.add("one two three four", "eval 0")
    assert index.match("zero ONE two, three") is not None
    assert index.match("one two four three") is None
    assert NgramIndex(5).match("one two") is None


def test_training_and_evaluation_sources_do_not_mix(fixtures, tmp_path, capsys):
    code = run(
        [
            "--input",
            f"math_dapo={fixtures / 'dapo_math_17k.parquet'}",
            "--input",
            f"aime25={fixtures / 'aime25_test.jsonl'}",
            "--output",
            str(tmp_path / "x.parquet"),
        ]
    )
    assert code == 2
    assert "training and evaluation sources cannot share an output file" in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()


@pytest.mark.parametrize("flag", ["--drop-contaminated", "--drop-near-duplicates"])
def test_drop_flags_need_evaluation_files(fixtures, tmp_path, capsys, flag):
    assert (
        run(["--input", f"aime25={fixtures / 'aime25_test.jsonl'}", "--output", str(tmp_path / "x.parquet"), flag]) == 2
    )
    assert f"{flag} needs --decontaminate-against" in capsys.readouterr().err


def _bad_jsonl(tmp_path: Path) -> Path:
    path = tmp_path / "aime.jsonl"
    rows = [
        json.dumps({"id": "0", "problem": "What is 2+3?", "answer": "5"}),
        json.dumps({"id": "1", "problem": "What is 2+4?"}),  # no answer
        "{truncated",
        json.dumps({"id": "3", "problem": "", "answer": "1"}),
        json.dumps({"id": "4", "problem": "What is 2+5?", "answer": 7}),
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_malformed_row_stops_the_run_naming_file_and_line(tmp_path, capsys):
    path = _bad_jsonl(tmp_path)
    output = tmp_path / "out.parquet"
    assert run(["--input", f"aime25={path}", "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:line 2: no answer field: expected one of answer, Answer" in err
    assert "--skip-bad-rows" in err
    assert not output.exists() and not Path(str(output) + ".tmp").exists()


def test_null_answer_is_named_as_null_not_as_a_missing_field(tmp_path, capsys):
    path = tmp_path / "aime.jsonl"
    path.write_text(json.dumps({"id": "0", "problem": "What is 2+3?", "answer": None}) + "\n")
    assert run(["--input", f"aime25={path}", "--output", str(tmp_path / "out.parquet")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:line 1: answer field 'answer' is null" in err
    assert "no answer field" not in err


def test_skipped_bad_rows_are_counted(tmp_path, capsys):
    path = _bad_jsonl(tmp_path)
    output = tmp_path / "out.parquet"
    summary = tmp_path / "s.json"
    assert (
        run(["--input", f"aime25={path}", "--output", str(output), "--skip-bad-rows", "--summary-json", str(summary)])
        == 0
    )
    assert [r["reward_model"]["ground_truth"] for r in read_rows(output)] == ["5", "7"]
    report = read_summary(summary)
    assert report["dropped"] == {
        "malformed: missing answer": 1,
        "malformed: invalid JSON": 1,
        "malformed: missing problem": 1,
    }
    assert report["first_dropped_row"]["malformed: invalid JSON"] == f"{path}:line 3"
    assert report["rows_written"] + sum(report["dropped"].values()) == 5
    assert f"skipped {path}:line 2" in capsys.readouterr().out


def test_dapo_row_in_another_format_is_malformed(tmp_path, capsys):
    path = tmp_path / "dapo.parquet"
    pq.write_table(
        pa.Table.from_pylist(
            [
                {
                    "data_source": "math_dapo",
                    "prompt": [{"content": "Just a problem", "role": "user"}],
                    "ability": "MATH",
                    "reward_model": {"ground_truth": "1", "style": "rule"},
                    "extra_info": {"index": "x"},
                }
            ]
        ),
        path,
    )
    assert run(["--input", f"math_dapo={path}", "--output", str(tmp_path / "o.parquet")]) == 2
    assert f"{path} row 0: prompt content is not in DAPO's" in capsys.readouterr().err


def test_conflicting_duplicate_answers_are_reported(tmp_path, capsys):
    path = tmp_path / "d.jsonl"
    path.write_text(
        json.dumps({"problem": "Find x.", "answer": "1"})
        + "\n"
        + json.dumps({"problem": "find x", "answer": "2"})
        + "\n"
    )
    summary = tmp_path / "s.json"
    assert (
        run(["--input", f"deepscaler={path}", "--output", str(tmp_path / "o.parquet"), "--summary-json", str(summary)])
        == 0
    )
    assert "same problem as" in capsys.readouterr().out
    assert read_summary(summary)["notes"] == {"duplicates whose answer differs from the kept copy (kept the first)": 1}


def test_evaluation_sets_are_keyed_by_id_and_repeated_statements_reported(tmp_path, capsys):
    path = tmp_path / "aime.jsonl"
    rows = [
        {"id": "1", "problem": "Find $x$.", "answer": "1"},
        {"id": "2", "problem": "find x", "answer": "2"},  # same statement, another problem of the benchmark
        {"id": "1", "problem": "Find $x$.", "answer": "1"},  # the same problem listed twice
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    output, summary = tmp_path / "o.parquet", tmp_path / "s.json"
    assert run(["--input", f"aime25={path}", "--output", str(output), "--summary-json", str(summary)]) == 0
    assert [r["extra_info"]["source_id"] for r in read_rows(output)] == ["1", "2"]
    report = read_summary(summary)
    assert report["dropped"] == {"duplicate problem id": 1}
    assert report["notes"] == {
        "evaluation problems whose statement repeats another id's (kept; evaluation sets are keyed by id)": 1
    }
    assert f"{path}:line 2: same statement as {path}:line 1 under another id (kept)" in capsys.readouterr().out


def test_evaluation_id_reused_for_another_statement_is_an_error(tmp_path, capsys):
    path = tmp_path / "aime.jsonl"
    path.write_text(
        json.dumps({"id": "1", "problem": "Find x.", "answer": "1"})
        + "\n"
        + json.dumps({"id": "1", "problem": "Find y.", "answer": "2"})
        + "\n"
    )
    assert run(["--input", f"aime25={path}", "--output", str(tmp_path / "o.parquet")]) == 2
    assert (
        f"{path}:line 2: evaluation problem id 'aime25/1' was already used by {path}:line 1" in capsys.readouterr().err
    )


def test_module_entry_point_runs(fixtures, tmp_path):
    output = tmp_path / "aime25.parquet"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "data_prep.math",
            "--input",
            f"aime25={fixtures / 'aime25_test.jsonl'}",
            "--output",
            str(output),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "written          2" in done.stdout
    assert validate_parquet_file(output) == 2
