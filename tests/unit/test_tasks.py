"""tiny-math generator and real-set loaders (bandpo.data.tiny_math)."""

from __future__ import annotations

import json
import re
from collections import Counter
from fractions import Fraction

import pytest

from bandpo.data import cli, real, tiny_math
from bandpo.data.real import REAL_DATASETS, load_real_dataset
from bandpo.data.tiny_math import KINDS, LEVELS, PAPER_PROMPT, generate_tiny_math, load_split, write_tiny_math
from bandpo.grader.extract import last_boxed

SMALL = {"n_train": 600, "n_val": 45, "n_test": 60}


@pytest.fixture(scope="module")
def splits():
    return generate_tiny_math(seed=7, **SMALL)


# ------------------------------------------------------------------------------------------------------------
# an independent evaluator for the problems and worked solutions (a tiny recursive-descent parser, no eval)
# ------------------------------------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(\d+|[x+\-*/()])")


def _tokens(expr: str) -> list[str]:
    expr = expr.strip()
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        assert m, f"cannot tokenise {expr!r} at {pos}"
        out.append(m.group(1))
        pos = m.end()
    return out


def evaluate(expr: str, x: Fraction | None = None) -> Fraction:
    """Value of an expression over integers, x, + - * / and unary minus; ``3x`` means 3*x."""
    toks = _tokens(expr)
    i = 0

    def peek():
        return toks[i] if i < len(toks) else None

    def take():
        nonlocal i
        i += 1
        return toks[i - 1]

    def atom() -> Fraction:
        t = take()
        if t == "-":
            return -atom()
        if t == "(":
            v = add()
            assert take() == ")"
            return v
        if t == "x":
            assert x is not None
            return x
        v = Fraction(int(t))
        if peek() == "x":  # coefficient
            take()
            assert x is not None
            return v * x
        return v

    def mul() -> Fraction:
        v = atom()
        while peek() in ("*", "/"):
            v = v * atom() if take() == "*" else v / atom()
        return v

    def add() -> Fraction:
        v = mul()
        while peek() in ("+", "-"):
            v = v + mul() if take() == "+" else v - mul()
        return v

    v = add()
    assert i == len(toks), f"trailing tokens in {expr!r}"
    return v


def linear_form(expr: str) -> tuple[Fraction, Fraction]:
    """(coefficient of x, constant) of a linear expression, from two evaluations."""
    c0 = evaluate(expr, Fraction(0))
    return evaluate(expr, Fraction(1)) - c0, c0


def expected_answer(kind: str, problem: str) -> Fraction:
    """Recompute the answer from the problem text alone."""
    if kind in ("arith", "frac"):
        m = re.fullmatch(r"Compute (.+)\.", problem)
        return evaluate(m.group(1))
    if kind == "linear":
        m = re.fullmatch(r"Solve for x: (.+)=(.+)\.", problem)
        (a, b), (c, d) = linear_form(m.group(1)), linear_form(m.group(2))
        return (d - b) / (a - c)
    if kind == "mod":
        m = re.fullmatch(r"What is (\d+) mod (\d+)\?", problem)
        return Fraction(int(m.group(1)) % int(m.group(2)))
    assert kind == "word"
    nums = [int(n) for n in re.findall(r"\d+", problem)]
    if "gets" in problem:
        return Fraction(nums[0] + nums[1])
    if "buys" in problem and "gives away" in problem:
        return Fraction(nums[0] * nums[1] - nums[2])
    if "gives away" in problem:
        return Fraction(nums[0] - nums[1])
    if "buys" in problem:
        return Fraction(nums[0] * nums[1])
    assert "shared by" in problem
    assert nums[0] % nums[1] == 0
    return Fraction(nums[0], nums[1])


def canonical(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


# ------------------------------------------------------------------------------------------------------------
# tiny-math
# ------------------------------------------------------------------------------------------------------------
def test_deterministic_from_seed(splits):
    again = generate_tiny_math(seed=7, **SMALL)
    assert again == splits
    other = generate_tiny_math(seed=8, **SMALL)
    assert other["test"] != splits["test"]


def test_split_sizes_schema_and_balance(splits):
    assert {s: len(r) for s, r in splits.items()} == {"train": 600, "validation": 45, "test": 60}
    for rows in splits.values():
        ids = [r["id"] for r in rows]
        assert len(set(ids)) == len(ids)
        for r in rows:
            assert set(r) == set(tiny_math.ROW_FIELDS)
            assert r["prompt"] == f"Q: {r['problem']}\nA: "
            assert r["kind"] in KINDS and r["level"] in LEVELS
            assert isinstance(r["level"], int)
    cells = Counter((r["kind"], r["level"]) for r in splits["test"])
    assert len(cells) == len(KINDS) * len(LEVELS)
    assert set(cells.values()) == {60 // 15}


def test_splits_disjoint_by_problem(splits):
    test = [r["problem"] for r in splits["test"]]
    val = [r["problem"] for r in splits["validation"]]
    train = {r["problem"] for r in splits["train"]}
    assert len(set(test)) == len(test) and len(set(val)) == len(val)
    assert not set(test) & set(val)
    assert not train & set(test)
    assert not train & set(val)


def test_answers_recomputed_independently(splits):
    for rows in splits.values():
        for r in rows:
            want = expected_answer(r["kind"], r["problem"])
            assert r["answer"] == canonical(want), r


def test_worked_solutions_are_correct_and_short(splits):
    for rows in splits.values():
        for r in rows:
            sol = r["solution"]
            assert sol.endswith(". \\boxed{" + r["answer"] + "}"), sol
            assert len(sol) <= 40, sol
            assert "\\boxed" not in sol[: -len("\\boxed{" + r["answer"] + "}")]
            work = sol[: sol.rindex(". \\boxed{")]
            x = Fraction(r["answer"]) if r["kind"] == "linear" else None
            for step in work.split(", "):
                values = {evaluate(part, x) for part in step.split("=")}
                assert len(values) == 1, (r["problem"], step)


def test_difficulty_ladder(splits):
    """Level 3 takes two worked steps for arith, linear and word problems; level 1 takes one."""
    for r in splits["train"]:
        if r["kind"] in ("arith", "linear", "word"):
            steps = r["solution"].count(", ") + 1
            assert steps == (2 if r["level"] == 3 else 1) or (r["kind"] == "linear" and r["level"] == 2), r


def test_write_and_load_jsonl_roundtrip(tmp_path):
    paths = write_tiny_math(tmp_path / "tm", seed=1, n_train=90, n_val=15, n_test=30)
    assert sorted(p.name for p in (tmp_path / "tm").iterdir()) == ["test.jsonl", "train.jsonl", "validation.jsonl"]
    expected = generate_tiny_math(seed=1, n_train=90, n_val=15, n_test=30)
    for split, path in paths.items():
        ds = load_split(path)
        assert ds.num_rows == len(expected[split])
        assert ds.to_list() == expected[split]
        assert ds.features["level"].dtype == "int64"


def test_cli_tiny_math(tmp_path, capsys):
    out = tmp_path / "data"
    assert cli.main(["tiny-math", "--out", str(out), "--seed", "3", "--n-train", "30", "--n-val", "15",
                       "--n-test", "15"]) == 0  # fmt: skip
    rows = [json.loads(line) for line in (out / "test.jsonl").read_text().splitlines()]
    assert rows == generate_tiny_math(seed=3, n_train=30, n_val=15, n_test=15)["test"]
    assert "test:" in capsys.readouterr().out


def test_write_jsonl_is_atomic_on_failure(tmp_path):
    target = tmp_path / "x.jsonl"
    tiny_math.write_jsonl(target, [{"a": 1}])

    def bad_rows():
        yield {"a": 2}
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        tiny_math.write_jsonl(target, bad_rows())
    assert target.read_text() == '{"a": 1}\n'  # old content intact
    assert [p.name for p in tmp_path.iterdir()] == ["x.jsonl"]  # no temp file left


def test_unknown_kind_rejected():
    with pytest.raises(ValueError):
        generate_tiny_math(seed=0, n_train=1, n_val=1, n_test=1, kinds=("calculus",))
    with pytest.raises(ValueError, match="levels among"):
        generate_tiny_math(seed=0, n_train=1, n_val=1, n_test=1, levels=(4,))
    with pytest.raises(ValueError, match="prompt format"):
        generate_tiny_math(seed=0, n_train=1, n_val=1, n_test=1, prompt_format="chat")
    with pytest.raises(ValueError, match="tiny prompt format only"):
        tiny_math.write_tiny_math("unused", n_train=1, n_val=1, n_test=1, probe={}, prompt_format="answer-line")


def test_answer_line_format_subset_and_shots(tmp_path, capsys):
    """The real LM's format (config/real-lm.yaml): level 1 only, the bare problem as the prompt, the four worked
    exchanges on every row (never a problem of any split), each exchange's reply graded correct by the strict
    answer-line mode; the default format's rows are unchanged by the option (same draws)."""
    from bandpo.grader import grade

    splits = generate_tiny_math(seed=0, n_train=400, n_val=50, n_test=50, levels=(1,), prompt_format="answer-line")
    shots = [list(s) for s in tiny_math.ANSWER_LINE_SHOTS]
    questions = {q for q, _ in shots}
    for rows in splits.values():
        assert {r["level"] for r in rows} == {1} and {r["kind"] for r in rows} == set(tiny_math.KINDS)
        assert all(r["prompt"] == r["problem"] and r["shots"] == shots for r in rows)
        assert not questions & {r["problem"] for r in rows}
    for (_question, reply), kind in zip(tiny_math.ANSWER_LINE_SHOTS, ("arith", "word", "mod", "linear"), strict=True):
        answer = reply.rsplit("=", 1)[1]
        assert grade(reply, answer, mode="strict-answer-line") == 1.0
        assert grade(reply, str(int(answer) + 1), mode="strict-answer-line") == 0.0
        assert any(r["kind"] == kind for r in splits["train"])
    assert [dict(s) for s in tiny_math.answer_line_shots()] == [{"prompt": q, "reply": a} for q, a in shots]
    plain = generate_tiny_math(seed=0, n_train=50, n_val=15, n_test=15)
    assert plain == generate_tiny_math(seed=0, n_train=50, n_val=15, n_test=15, prompt_format="tiny")
    assert all("shots" not in r for r in plain["test"])
    out = tmp_path / "d"
    assert cli.main(["tiny-math", "--out", str(out), "--n-train", "40", "--n-val", "10", "--n-test", "10",
                     "--levels", "1", "--kinds", "arith", "word", "--prompt-format", "answer-line"]) == 0  # fmt: skip
    rows = [json.loads(line) for line in (out / "test.jsonl").read_text().splitlines()]
    assert rows == generate_tiny_math(seed=0, n_train=40, n_val=10, n_test=10, kinds=("arith", "word"), levels=(1,),
                                      prompt_format="answer-line")["test"]  # fmt: skip


# ------------------------------------------------------------------------------------------------------------
# real data sets: parsing of small local files in the hub formats
# ------------------------------------------------------------------------------------------------------------
def _parquet(path, records):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(records), path)
    return path


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _dapo_record(problem, answer, index):
    return {
        "data_source": "math_dapo",
        "prompt": [{"content": PAPER_PROMPT.format(problem=problem), "role": "user"}],
        "ability": "MATH",
        "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": index},
    }


def test_dapo_parquet_dedup_english(tmp_path):
    recs = [
        _dapo_record("What is $1+1$?", "2", "a"),
        _dapo_record("What is $1+1$?", "2", "b"),  # duplicate problem
        _dapo_record("计算 $2+2$。", "4", "c"),  # not English
        _dapo_record("Find $k$ such that $k^2=9$, $k>0$.", "3", "d"),
    ]
    rows = load_real_dataset("dapo-math-17k", path=_parquet(tmp_path / "dapo.parquet", recs))
    assert [r["problem"] for r in rows] == ["What is $1+1$?", "Find $k$ such that $k^2=9$, $k>0$."]
    assert [r["answer"] for r in rows] == ["2", "3"]
    assert rows[0]["id"] == "dapo-math-17k-a"
    assert rows[1]["prompt"] == PAPER_PROMPT.format(problem="Find $k$ such that $k^2=9$, $k>0$.")
    assert rows[0]["kind"] == "dapo-math-17k" and rows[0]["level"] == 0


def test_dapo_processed_string_prompt(tmp_path):
    """open-r1's processed variant: ``prompt`` is the bare problem string and ``solution`` the answer."""
    recs = [{"prompt": "What is $3\\cdot 4$?", "solution": "12", "data_source": "math_dapo"}]
    rows = load_real_dataset("dapo-math-17k", path=_jsonl(tmp_path / "d.jsonl", recs))
    assert rows[0]["problem"] == "What is $3\\cdot 4$?" and rows[0]["answer"] == "12" and rows[0]["solution"] == ""


def _math12k_record(uid, level, subject, answer, problem=None):
    """One row in the layout of nlile/hendrycks-MATH-benchmark (MATH's 12k train split, MATH-500 as its test)."""
    return {
        "problem": problem or f"Problem {uid}",
        "solution": f"Work. So the answer is $\\boxed{{{answer}}}$.",
        "answer": answer,
        "subject": subject,
        "level": level,
        "unique_id": uid,
    }


def test_math_12k_levels_3_to_5(tmp_path):
    """math-l3-5 reads the 12k-problem MATH train split (train problems and the test problems outside MATH-500,
    told apart by their unique_id) and keeps levels 3-5; the reference is the set's own ``answer`` field."""
    recs = [
        _math12k_record("train/algebra/1.json", 3, "Algebra", "\\frac{1}{2}"),
        _math12k_record("train/algebra/2.json", 2, "Algebra", "4"),
        _math12k_record("test/number_theory/7.json", 5, "Number Theory", "7"),  # a MATH test problem, not in MATH-500
        _math12k_record("train/geometry/3.json", 1, "Geometry", "1"),
        _math12k_record("test/precalculus/9.json", 4, "Precalculus", "(1, 2)"),
    ]
    rows = load_real_dataset("math-l3-5", path=_parquet(tmp_path / "train-00000-of-00001.parquet", recs))
    assert [(r["id"], r["level"], r["answer"], r["kind"]) for r in rows] == [
        ("math-l3-5-train/algebra/1.json", 3, "\\frac{1}{2}", "Algebra"),
        ("math-l3-5-test/number_theory/7.json", 5, "7", "Number Theory"),
        ("math-l3-5-test/precalculus/9.json", 4, "(1, 2)", "Precalculus"),
    ]
    assert rows[0]["prompt"] == PAPER_PROMPT.format(problem="Problem train/algebra/1.json")
    assert rows[0]["solution"].startswith("Work.")


def test_math_in_another_layout_is_an_error_naming_the_field(tmp_path):
    """MATH's 7.5k layout (EleutherAI/hendrycks_math: no answer field, type for subject) is not silently taken."""
    old = [{"problem": "P1", "level": "Level 3", "type": "Algebra", "solution": "$\\boxed{4}$"}]
    with pytest.raises(ValueError, match=r"math-l3-5: source row 0 .* no field\(s\) 'answer', 'subject'"):
        load_real_dataset("math-l3-5", path=_jsonl(tmp_path / "algebra.jsonl", old))


def test_math500_aime_amc_formats(tmp_path):
    m500 = [{"problem": "Q", "solution": "s \\boxed{5}", "answer": "5", "subject": "Algebra", "level": 2,
             "unique_id": "test/algebra/1.json"}]  # fmt: skip
    rows = load_real_dataset("math-500", path=_jsonl(tmp_path / "m.jsonl", m500))
    assert rows[0]["id"] == "math-500-test/algebra/1.json" and rows[0]["level"] == 2 and rows[0]["kind"] == "Algebra"

    aime24 = [{"id": 60, "problem": "A", "solution": "...", "answer": "204", "url": "u", "year": "2024"}]
    rows = load_real_dataset("aime-2024", path=_parquet(tmp_path / "a.parquet", aime24))
    assert rows[0]["answer"] == "204" and rows[0]["prompt"] == PAPER_PROMPT.format(problem="A")

    aime25 = [{"problem": "B", "answer": "70", "id": "0"}, {"problem": "C", "answer": "588", "id": "1"}]
    rows = load_real_dataset("aime-2025", path=_jsonl(tmp_path / "b.jsonl", aime25))
    assert [r["answer"] for r in rows] == ["70", "588"] and rows[1]["id"] == "aime-2025-1"

    amc = [
        {"id": 0, "question": "D", "answer": 27.0, "url": "u"},
        {"id": 1, "question": "E", "answer": 0.5, "url": "u"},
    ]
    rows = load_real_dataset("amc-2023", path=_parquet(tmp_path / "c.parquet", amc))
    assert [(r["problem"], r["answer"]) for r in rows] == [("D", "27"), ("E", "0.5")]


def test_real_cli_writes_split(tmp_path):
    src = _jsonl(tmp_path / "b.jsonl", [{"problem": "B", "answer": "70", "id": "0"}])
    assert cli.main(["real", "--name", "aime-2025", "--out", str(tmp_path / "out"), "--path", str(src)]) == 0
    rows = load_split(tmp_path / "out" / "test.jsonl").to_list()
    assert rows[0]["answer"] == "70"


def test_no_download_without_permission_and_hub_arguments(monkeypatch):
    with pytest.raises(RuntimeError, match="downloads are off"):
        load_real_dataset("aime-2024")
    with pytest.raises(ValueError):
        load_real_dataset("gsm9k")

    calls = []

    def fake_load_dataset(hub_id, config=None, split=None, **kw):
        calls.append((hub_id, config, split))
        return [_math12k_record("train/algebra/1.json", 4, "Algebra", "1")]

    import datasets

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    rows = load_real_dataset("math-l3-5", allow_download=True)
    spec = REAL_DATASETS["math-l3-5"]
    assert calls == [("nlile/hendrycks-MATH-benchmark", None, "train")] == [(spec.hub_id, None, spec.split)]
    assert len(rows) == 1
    calls.clear()
    load_real_dataset("aime-2025", allow_download=True)
    assert calls == [("math-ai/aime25", None, "test")]


def test_last_boxed_and_normalisation():
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{2}{3}} c") == "\\frac{2}{3}"
    assert last_boxed("no box") is None
    assert last_boxed("\\fbox{ 9 }") == "9"
    assert real.normalize_answer(27.0) == "27" and real.normalize_answer(" 4.00 ") == "4"
    assert real.strip_paper_prompt(PAPER_PROMPT.format(problem="Z?")) == "Z?"
    assert real.strip_paper_prompt("plain") == "plain"
