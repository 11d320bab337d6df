"""The generated "tiny-math" testbed (and its mechanism-probe variant) in the suite's one row schema.

Every loader returns rows in one schema (all splits, all sources)::

    id        str   unique within a split
    problem   str   the bare problem statement
    prompt    str   what the policy sees (tiny-math: ``Q: {problem}\\nA: ``; real sets: the paper's user turn,
                    to be wrapped in the model's chat template downstream)
    answer    str   the reference answer (normalised string)
    solution  str   a worked solution ending in ``\\boxed{answer}`` (tiny-math); the source's solution or ""
    level     int   difficulty level (tiny-math 1-3, MATH 1-5); 0 where the source has none
    kind      str   problem family (tiny-math kind, MATH subject, or the data set's name)

and, optionally (tiny-math's ``answer-line`` prompt format)::

    shots     list  [[user, assistant], ...]: worked exchanges shown before ``prompt`` as earlier turns of the chat
                    template (the trainer's `bandpo.train.loop.chat_prompts`; lm-eval's few-shot turns of the task
                    ``tiny_math_answer_line``, `answer_line_shots`)

tiny-math
---------
Five kinds of short problems, three levels each (15 cells); every problem has one canonical worked solution of
at most 40 characters that ends in ``\\boxed{answer}``::

    Q: Compute 17+9-4.                      A: 17+9=26, 26-4=22. \\boxed{22}
    Q: Solve for x: 6x-2=2x+14.             A: 4x=14+2=16, x=16/4=4. \\boxed{4}
    Q: Compute 1/2+1/3.                     A: 3/6+2/6=5/6. \\boxed{5/6}
    Q: What is 49 mod 4?                    A: 49=12*4+1. \\boxed{1}
    Q: Eva buys 5 bags of 8 eggs and gives away 15. How many are left?   A: 5*8=40, 40-15=25. \\boxed{25}

    kind    level 1                    level 2                         level 3
    arith   a+-b, single digits        2-digit +- up to 19             two steps (2-digit, then +- one digit)
    linear  x+b=c                      ax+b=c (two steps)              ax+b=cx+d, x may be negative
    frac    a/d+b/d, no reduction      a/d+b/d, reduce                 a/b+-c/d, common denominator
    mod     a<=40 mod 2..5             a<=60 mod 3..9                  a<=150 mod 6..12
    word    add/subtract digits        times tables (x or /)           multiply then subtract

Answers are integers or reduced fractions (``-7/12``). Levels are sized for the embedded profile's tiny models:
pretrained for a few CPU minutes they solve roughly 50-80% of level 1 and 20-45% of level 3 (bandpo.models.tiny).
``kinds`` and ``levels`` restrict the cells drawn (every split).

Prompt formats (``prompt_format``, `PROMPT_FORMATS`): ``tiny`` (the default), ``Q: {problem}\\nA: `` as the tiny
models were pretrained on, graded on its ``\\boxed{}``; ``answer-line``, for a real instruct LM under its chat
template (config/real-lm.yaml): the bare problem as the user turn after `ANSWER_LINE_SHOTS`, four worked exchanges
whose replies are one line ``Answer: <computation>=<result>`` (``Answer: 9-5=4``), graded by the strict answer-line
mode (math-verify reads the last side of the equation). The shots' problems are held out of every split.

``--probe`` (``probe=`` of :func:`write_tiny_math`) writes the mechanism probe's variant instead: a stated subset
whose pretraining targets mostly show a decoy answer, rows marked ``subset: probe|rest`` (``bandpo.train.probe``).

The generator is deterministic from its seed (``random.Random`` seeded with a string, so independent of
``PYTHONHASHSEED``). Test and validation problems are unique and stratified over (kind, level); train rows are
drawn from the same distribution with every test/validation problem excluded (train may repeat a problem, since
some level-1 spaces are small), so the three splits are disjoint by problem text.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from bandpo.core.files import atomic_write_text

KINDS: tuple[str, ...] = ("arith", "linear", "frac", "mod", "word")
LEVELS: tuple[int, ...] = (1, 2, 3)
SPLITS: tuple[str, ...] = ("train", "validation", "test")
TINY_PROMPT = "Q: {problem}\nA: "

# The BandPO paper's user turn (DAPO's template), for training and evaluation alike; wrapped in the model's chat
# template downstream.
PAPER_PROMPT = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)

ROW_FIELDS: tuple[str, ...] = ("id", "problem", "prompt", "answer", "solution", "level", "kind")

# The answer-line format's worked exchanges (user turn, assistant turn), shown before each problem: one of each kind a
# 135M instruct model meets at level 1 but fractions; answers all different, so that none is a default to copy.
ANSWER_LINE_SHOTS: tuple[tuple[str, str], ...] = (
    ("Compute 4+3.", "Answer: 4+3=7"),
    ("Tom has 9 cups and gives away 5. How many now?", "Answer: 9-5=4"),
    ("What is 19 mod 4?", "Answer: 19-4*4=3"),
    ("Solve for x: x+2=8.", "Answer: x=8-2=6"),
)
PROMPT_FORMATS: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "tiny": (TINY_PROMPT, ()),
    "answer-line": ("{problem}", ANSWER_LINE_SHOTS),
}
"""Prompt format -> (the user turn's template, the worked exchanges shown before it)."""


# --------------------------------------------------------------------------------------------------------------
# formatting helpers
# --------------------------------------------------------------------------------------------------------------
def format_number(x: Fraction | int) -> str:
    """Canonical answer string: integers as ``-12``, other rationals reduced as ``-7/12``."""
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def boxed(answer: str) -> str:
    return "\\boxed{" + answer + "}"


def _signed(b: int) -> str:
    """``+5`` / ``-5``: a term appended after another term."""
    return f"+{b}" if b >= 0 else f"-{-b}"


def tiny_prompt(problem: str) -> str:
    return TINY_PROMPT.format(problem=problem)


def chat_messages(prompt: str, shots=None) -> list[dict[str, str]]:
    """The chat of one row: its worked exchanges ``shots`` ([[user, assistant], ...], the row's ``shots``) as
    earlier turns, then ``prompt`` as the user turn (the trainer's `bandpo.train.loop.chat_prompts`, verl's rows
    `bandpo.verl.data.verl_rows`; lm-eval renders a task's few-shot samples as the same turns)."""
    turns = []
    for user, assistant in shots or ():
        turns += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return [*turns, {"role": "user", "content": prompt}]


def answer_line_shots() -> list[dict[str, str]]:
    """`ANSWER_LINE_SHOTS` as lm-eval's few-shot samples (``prompt``: the user turn, ``reply``: the assistant's)."""
    return [{"prompt": q, "reply": a} for q, a in ANSWER_LINE_SHOTS]


# --------------------------------------------------------------------------------------------------------------
# tiny-math generators: each returns (problem, answer, solution) for one (kind, level)
# --------------------------------------------------------------------------------------------------------------
Problem = tuple[str, str, str]


def _finish(problem: str, answer: Fraction | int, work: str) -> Problem:
    ans = format_number(answer)
    return problem, ans, f"{work}. {boxed(ans)}"


def _add_or_sub(a: int, b: int, sub: bool) -> tuple[str, int]:
    return (f"{a}-{b}", a - b) if sub else (f"{a}+{b}", a + b)


def _gen_arith(rng: random.Random, level: int) -> Problem:
    if level == 1:  # one step, single digits
        a, b = rng.randint(1, 9), rng.randint(1, 9)
    elif level == 2:  # one step, a two-digit number
        a, b = rng.randint(10, 59), rng.randint(2, 19)
    else:  # two steps
        a, b, c = rng.randint(10, 59), rng.randint(2, 19), rng.randint(2, 9)
        e1, t = _add_or_sub(a, b, rng.random() < 0.5)
        e2, r = _add_or_sub(t, c, rng.random() < 0.5 and c <= t)
        op2 = e2[len(str(t))]
        return _finish(f"Compute {e1}{op2}{c}.", r, f"{e1}={t}, {e2}={r}")
    e, r = _add_or_sub(a, b, rng.random() < 0.5 and b <= a)
    return _finish(f"Compute {e}.", r, f"{e}={r}")


def _gen_linear(rng: random.Random, level: int) -> Problem:
    if level == 1:  # x + b = c
        x, b = rng.randint(0, 9), rng.choice([i for i in range(-9, 10) if i != 0])
        c = x + b
        return _finish(f"Solve for x: x{_signed(b)}={c}.", x, f"x={c}{_signed(-b)}={x}")
    if level == 2:  # a x + b = c
        a, x = rng.randint(2, 5), rng.randint(0, 9)
        b = rng.choice([i for i in range(-9, 10) if i != 0])
        c = a * x + b
        return _finish(f"Solve for x: {a}x{_signed(b)}={c}.", x, f"{a}x={c}{_signed(-b)}={a * x}, x={a * x}/{a}={x}")
    # level 3: a x + b = c x + d with e = a - c >= 2; x may be negative
    e, x = rng.randint(2, 4), rng.randint(-5, 12)
    c = rng.randint(1, 4)
    a = c + e
    b = rng.choice([i for i in range(-19, 20) if i != 0])
    d = e * x + b
    cx = "x" if c == 1 else f"{c}x"
    problem = f"Solve for x: {a}x{_signed(b)}={cx}{_signed(d)}."
    return _finish(problem, x, f"{e}x={d}{_signed(-b)}={e * x}, x={e * x}/{e}={x}")


def _gen_frac(rng: random.Random, level: int) -> Problem:
    if level in (1, 2):  # same denominator; level 1 needs no reduction, level 2 does (or is improper)
        while True:
            d = rng.randint(3, 9) if level == 1 else rng.randint(4, 12)
            a, b = rng.randint(1, d - 1), rng.randint(1, d - 1)
            s = Fraction(a + b, d)
            if (s.denominator == d) == (level == 1):
                break
        work = f"{a}/{d}+{b}/{d}={a + b}/{d}"
        if s.denominator != d:
            work += f"={format_number(s)}"
        return _finish(f"Compute {a}/{d}+{b}/{d}.", s, work)
    # level 3: different denominators, sum or difference (answers may be negative)
    b, d = rng.sample(range(2, 7), 2)
    a, c = rng.randint(1, b - 1), rng.randint(1, d - 1)
    L = b * d // math.gcd(b, d)
    na, nc = a * (L // b), c * (L // d)
    sign = rng.choice((1, -1))
    o = "+" if sign > 0 else "-"
    r = Fraction(a, b) + sign * Fraction(c, d)
    num = na + sign * nc
    work = f"{na}/{L}{o}{nc}/{L}={num}/{L}"
    if r.denominator != L or r.numerator != num:
        work += f"={format_number(r)}"
    return _finish(f"Compute {a}/{b}{o}{c}/{d}.", r, work)


def _gen_mod(rng: random.Random, level: int) -> Problem:
    if level == 1:
        a, b = rng.randint(3, 40), rng.randint(2, 5)
    elif level == 2:
        a, b = rng.randint(10, 60), rng.randint(3, 9)
    else:
        a, b = rng.randint(40, 150), rng.randint(6, 12)
    q, r = divmod(a, b)
    return _finish(f"What is {a} mod {b}?", r, f"{a}={q}*{b}+{r}")


_NAMES = ("Ann", "Bob", "Eva", "Tom", "Max", "Sue", "Kim", "Leo")
_ITEMS = ("apples", "pens", "cards", "coins", "books", "eggs", "cups", "stamps")


def _gen_word(rng: random.Random, level: int) -> Problem:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    if level == 1:  # one addition or subtraction of single digits
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        if rng.random() < 0.5 or b >= a:
            return _finish(f"{name} has {a} {item} and gets {b} more. How many now?", a + b, f"{a}+{b}={a + b}")
        return _finish(f"{name} has {a} {item} and gives away {b}. How many now?", a - b, f"{a}-{b}={a - b}")
    if level == 2:  # one multiplication or division from the times tables
        n, k = rng.randint(2, 9), rng.randint(2, 9)
        if rng.random() < 0.5:
            return _finish(f"{name} buys {n} bags of {k} {item}. How many {item}?", n * k, f"{n}*{k}={n * k}")
        p = n * k
        return _finish(f"{p} {item} are shared by {n} kids. How many each?", k, f"{p}/{n}={k}")
    # level 3: multiplication then subtraction
    n, k = rng.randint(2, 9), rng.randint(2, 9)
    p = n * k
    m = rng.randint(1, min(p - 1, 19))
    return _finish(
        f"{name} buys {n} bags of {k} {item} and gives away {m}. How many are left?",
        p - m,
        f"{n}*{k}={p}, {p}-{m}={p - m}",
    )


GENERATORS: dict[str, Callable[[random.Random, int], Problem]] = {
    "arith": _gen_arith,
    "linear": _gen_linear,
    "frac": _gen_frac,
    "mod": _gen_mod,
    "word": _gen_word,
}


def make_row(row_id: str, problem: str, answer: str, solution: str, level: int, kind: str, prompt: str) -> dict:
    return {
        "id": row_id,
        "problem": problem,
        "prompt": prompt,
        "answer": answer,
        "solution": solution,
        "level": int(level),
        "kind": kind,
    }


def _cells(kinds: Sequence[str], levels: Sequence[int]) -> list[tuple[str, int]]:
    return [(k, lv) for k in kinds for lv in levels]


def _per_cell(n: int, n_cells: int) -> list[int]:
    base, extra = divmod(n, n_cells)
    return [base + (1 if i < extra else 0) for i in range(n_cells)]


def generate_tiny_math(
    seed: int = 0,
    n_train: int = 50_000,
    n_val: int = 300,
    n_test: int = 300,
    kinds: Sequence[str] = KINDS,
    levels: Sequence[int] = LEVELS,
    prompt_format: str = "tiny",
) -> dict[str, list[dict]]:
    """Generate the three splits (dict split -> rows), deterministic from ``seed``.

    Test then validation are drawn first, each unique and stratified equally over (kind, level) cells; train rows
    are drawn cell-balanced too, rejecting any test/validation problem (duplicates within train are allowed).
    Rows are shuffled within each split (deterministically). ``prompt_format``: one of `PROMPT_FORMATS` (the rows'
    ``prompt`` and, with shots, ``shots``; the shots' problems are drawn in no split).
    """
    for k in kinds:
        if k not in GENERATORS:
            raise ValueError(f"unknown tiny-math kind {k!r}; known: {sorted(GENERATORS)}")
    bad_levels = [lv for lv in levels if lv not in LEVELS]
    if not kinds or not levels or bad_levels:
        raise ValueError(f"tiny-math: kinds and levels must be non-empty, levels among {list(LEVELS)}; got "
                         f"kinds {list(kinds)}, levels {list(levels)}")  # fmt: skip
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"unknown tiny-math prompt format {prompt_format!r}; known: {sorted(PROMPT_FORMATS)}")
    template, shots = PROMPT_FORMATS[prompt_format]
    cells = _cells(kinds, levels)
    rng = random.Random(f"tiny-math:{seed}")
    held_out: set[str] = {q for q, _ in shots}  # never a problem of any split (train included: rejected below)
    out: dict[str, list[dict]] = {}
    for split, n in (("test", n_test), ("validation", n_val), ("train", n_train)):
        rows: list[dict] = []
        unique = split != "train"
        for (kind, level), count in zip(cells, _per_cell(n, len(cells)), strict=True):
            gen = GENERATORS[kind]
            got, attempts = 0, 0
            while got < count:
                attempts += 1
                if attempts > 200 * count + 10_000:
                    raise RuntimeError(f"tiny-math: cannot draw {count} {split} problems for ({kind}, {level})")
                problem, answer, solution = gen(rng, level)
                if problem in held_out:
                    continue
                if unique:
                    held_out.add(problem)
                row = make_row("", problem, answer, solution, level, kind, template.format(problem=problem))
                if shots:
                    row["shots"] = [list(shot) for shot in shots]
                rows.append(row)
                got += 1
        rng.shuffle(rows)
        for i, row in enumerate(rows):
            row["id"] = f"{split}-{i:06d}"
        out[split] = rows
    return out


# --------------------------------------------------------------------------------------------------------------
# the mechanism probe's variant: its data design (the measurement is bandpo.train.probe's, built on this)
# --------------------------------------------------------------------------------------------------------------
SUBSETS: tuple[str, ...] = ("probe", "rest")


@dataclass(frozen=True)
class ProbeSpec:
    """The probe subset's rule and the decoy design (the ``probe:`` block of a tiny-math data entry)."""

    kinds: tuple[str, ...] = ("word",)
    levels: tuple[int, ...] = (1,)
    last_digit: int = 7  # subset: non-negative integer answers ending in this digit (0-8: the decoy adds one)
    decoy_share: float = 0.95  # share of the subset's train rows that show the decoy instead of the answer
    n_test: int = 40  # at least this many probe problems in the test split (extra ones are added)
    n_val: int = 20  # same for the validation split

    def __post_init__(self) -> None:
        bad = [k for k in self.kinds if k not in GENERATORS or k == "mod"]
        if not self.kinds or bad:
            raise ValueError(
                f"probe.kinds: {bad or 'empty'} not allowed; use kinds whose worked line ends in '=ANSWER': "
                f"{sorted(k for k in GENERATORS if k != 'mod')}"
            )
        if not self.levels or any(lv not in (1, 2, 3) for lv in self.levels):
            raise ValueError(f"probe.levels must be a non-empty subset of 1, 2, 3, got {list(self.levels)}")
        if not (isinstance(self.last_digit, int) and 0 <= self.last_digit <= 8):
            raise ValueError(f"probe.last_digit must be an integer 0-8 (decoy: answer + 1), got {self.last_digit!r}")
        if not 0.0 <= self.decoy_share <= 1.0:
            raise ValueError(f"probe.decoy_share must lie in [0, 1], got {self.decoy_share!r}")
        for name in ("n_test", "n_val"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 0):
                raise ValueError(f"probe.{name} must be a non-negative integer, got {getattr(self, name)!r}")

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> ProbeSpec:
        d = dict(d or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"probe: unknown keys {unknown}; known: {sorted(known)}")
        for key in ("kinds", "levels"):
            if key in d:
                d[key] = tuple(d[key]) if isinstance(d[key], list | tuple) else (d[key],)
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def in_subset(row: dict, spec: ProbeSpec) -> bool:
    """Whether a row satisfies the probe rule: kind and level listed, integer answer >= 0 ending in the digit."""
    answer = str(row["answer"])
    return (
        row["kind"] in spec.kinds
        and int(row["level"]) in spec.levels
        and re.fullmatch(r"\d+", answer) is not None
        and int(answer) % 10 == spec.last_digit
    )


def decoy_answer(answer: str) -> str:
    """The plausible wrong answer: off by one in the last digit (``27`` -> ``28``)."""
    return str(int(answer) + 1)


def decoy_solution(solution: str, answer: str, decoy: str) -> str:
    """The worked line with its final result and boxed answer replaced by the decoy."""
    tail = f"={answer}. {boxed(answer)}"
    if not solution.endswith(tail):
        raise ValueError(f"probe: worked solution {solution!r} does not end in {tail!r}; cannot place a decoy")
    return solution[: -len(tail)] + f"={decoy}. {boxed(decoy)}"


def _mark(row: dict, spec: ProbeSpec) -> dict:
    member = in_subset(row, spec)
    row["subset"] = "probe" if member else "rest"
    row["decoy"] = decoy_answer(row["answer"]) if member else None
    row["shown_answer"] = row["answer"]
    return row


def _draw(rng: random.Random, kind: str, level: int) -> dict:
    problem, answer, solution = GENERATORS[kind](rng, level)
    return {
        "id": "",
        "problem": problem,
        "prompt": tiny_prompt(problem),
        "answer": answer,
        "solution": solution,
        "level": level,
        "kind": kind,
    }


def apply_probe(splits: dict[str, list[dict]], spec: ProbeSpec, seed: int) -> dict[str, list[dict]]:
    """Turn generated tiny-math splits into the probe variant (new lists; the input rows are copied)."""
    rng = random.Random(f"tiny-math-probe:{seed}")
    out = {split: [_mark(dict(r), spec) for r in rows] for split, rows in splits.items()}
    held = {r["problem"] for split in ("test", "validation") for r in out.get(split, [])}
    cells = [(k, lv) for k in spec.kinds for lv in spec.levels]
    for split, want in (("test", spec.n_test), ("validation", spec.n_val)):
        rows = out[split]
        have = sum(r["subset"] == "probe" for r in rows)
        attempts = 0
        while have < want:
            attempts += 1
            if attempts > 1000 * want + 10_000:
                raise RuntimeError(
                    f"probe: cannot draw {want} unique {split} problems for {spec.to_dict()} (found {have}); "
                    "the subset's problem space is too small"
                )
            row = _mark(_draw(rng, *rng.choice(cells)), spec)
            if row["subset"] != "probe" or row["problem"] in held:
                continue
            held.add(row["problem"])
            rows.append(row)
            have += 1
        rng.shuffle(rows)
        for i, row in enumerate(rows):
            row["id"] = f"{split}-{i:06d}"
    train = out["train"]
    for i, row in enumerate(train):
        while row["problem"] in held:  # repeats an added test/validation problem: redraw from its cell
            row = _mark(_draw(rng, row["kind"], row["level"]), spec)
        if row["subset"] == "probe" and rng.random() < spec.decoy_share:
            row["solution"] = decoy_solution(row["solution"], row["answer"], row["decoy"])
            row["shown_answer"] = row["decoy"]
        row["id"] = f"train-{i:06d}"
        train[i] = row
    trained = {(r["kind"], r["level"]) for r in train if r["subset"] == "probe"}
    starved = [cell for cell in cells if cell not in trained]
    if train and starved:  # e.g. arith level 1: its ~10 subset problems all end up held out
        raise ValueError(
            f"probe: no train row of the subset in cells {starved} (their few subset problems are all in "
            "test/validation, so the model never sees those answers); drop those cells or lower n_test/n_val"
        )
    return out


def subset_rows(rows: Sequence[dict], subset: str) -> list[dict]:
    if subset not in SUBSETS:
        raise ValueError(f"subset must be one of {SUBSETS}, got {subset!r}")
    missing = [r.get("id") for r in rows if r.get("subset") not in SUBSETS]
    if missing:
        raise ValueError(f"rows without a probe 'subset' field (not a probe data set?), e.g. {missing[:3]}")
    return [r for r in rows if r["subset"] == subset]


# --------------------------------------------------------------------------------------------------------------
# JSONL output (read with `bandpo.core.files.read_jsonl`)
# --------------------------------------------------------------------------------------------------------------
def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> Path:
    """Write rows as JSONL atomically (`bandpo.core.files.atomic_write_text`: temp file, fsync, rename)."""
    return atomic_write_text(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def write_tiny_math(
    out_dir: str | os.PathLike, seed: int = 0, probe: dict | None = None, **kwargs: Any
) -> dict[str, Path]:
    """Generate tiny-math and write ``{train,validation,test}.jsonl`` under ``out_dir`` (each file atomic).

    ``probe``: the mechanism probe's rule and decoy design (`ProbeSpec` fields); None: plain tiny-math.
    """
    if probe is not None and kwargs.get("prompt_format", "tiny") != "tiny":
        raise ValueError("probe: the mechanism probe's variant has the tiny prompt format only")
    splits = generate_tiny_math(seed=seed, **kwargs)
    if probe is not None:
        splits = apply_probe(splits, ProbeSpec.from_dict(probe), seed)
    out = Path(out_dir)
    return {split: write_jsonl(out / f"{split}.jsonl", rows) for split, rows in splits.items()}


def load_split(path: str | os.PathLike):
    """Load one JSONL split (local file) as a ``datasets.Dataset`` through the json builder."""
    # lazy: datasets takes about a second to import; every training job imports this module (the probe's rows)
    from datasets import load_dataset

    return load_dataset("json", data_files=str(path), split="train")
