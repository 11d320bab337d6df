"""Throughput and latency of ``bandpo.grader`` on realistic, labelled items; the CPU margin of the hardest items.

Builds a deterministic set of model responses (MATH-style answers: integers, thousands separators, fractions,
decimals, radicals, multiples of pi, intervals, sets, tuples, polynomials, multiple-choice letters), about half of
them right (often in an equivalent but different form) and half wrong, in the shapes models produce them
(``\\boxed{}``, truncated ``\\boxed{``, ``Answer:`` lines, "The final answer is"), plus a few hostile ones (power
towers, huge powers, deep nesting, megabyte outputs, Python payloads).  Responses come in groups that share a
reference, as the rollouts of one prompt do in GRPO-style training (``--group-size``; 1 makes every item distinct).

Grades them with ``grade_many`` (and optionally one by one) and prints items/s, total seconds, the slowest item,
how each score was decided and whether the scores agree with the labels.

``--margin``: the CPU seconds a worker spends on each of the hardest items known (``HARD``: completions of published
runs that needed math-verify and the shapes the grader's tests use) and on the slowest of the labelled items, each
the most of ``--repeats`` fresh verdicts, against the first budget (the budgets count the judging worker's CPU
seconds, `bandpo.grader.pool`): how much slower a CPU would have to be before one of them spent its budget.

``--base-commit COMMIT``: ``grade_many``'s throughput on the labelled items with this tree's grader and with
COMMIT's, side by side (processes alternated, ``--repeats`` rounds), and their ratio.

    python benchmarks/bench_grader.py                # 1,000 items, groups of 4
    python benchmarks/bench_grader.py --group-size 1 --sequential
    python benchmarks/bench_grader.py --margin
    python benchmarks/bench_grader.py --base-commit HEAD~1 --repeats 7
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from math import gcd
from pathlib import Path

from bandpo import grader

# The hardest items known: each needs math-verify (no fast path decides it), and sympy's work on it is the longest
# of the items seen. Also the items of the grader's determinism tests (tests/unit/test_grader_determinism.py).
ISSUE_59 = "4x=-7+7=0, x=0/4=0. \\boxed{0:xed{0}"  # tiny-s/grpo@separation/seed19, step 42: published score 1
HARD = [
    (ISSUE_59, "0"),
    ("1/5+1/5=2/5. \\boxed{2/F5}", "2/5"),  # the same step's other item math-verify judged
    ("\\boxed{0e0/0}", "0"),
    ("\\boxed{0\\pi/0}", "0"),
    ("So the ratio is \\boxed{0:e{0}}", "0"),
    ("\\boxed{0:ye{0}}", "0"),
    ("\\boxed{\\frac{0}{x\\cdot 0}}", "0"),
    ("\\boxed{0/(0e)}", "0"),
    ("Answer: (x-1)(x+1)", "x^2-1"),
    ("\\boxed{\\frac{x}{2}+1}", "\\frac{x+2}{2}"),
    ("\\boxed{x^3}", "x \\cdot x^2 + 1"),
]


@dataclass(frozen=True)
class Item:
    response: str
    reference: str
    label: float | None  # expected score; None for hostile items (must score 0 and stay within the time bound)
    kind: str


def _frac_latex(q: Fraction) -> str:
    sign = "-" if q < 0 else ""
    return f"{sign}\\frac{{{abs(q.numerator)}}}{{{q.denominator}}}"


def _thousands(n: int) -> str:
    return f"{n:,}"


def _reference_and_forms(rng: random.Random) -> tuple[str, list[str], list[str], str]:
    """A reference answer, equivalent forms of it, wrong answers, and the answer kind."""
    kind = rng.choices(
        ["int", "big_int", "fraction", "decimal", "sqrt", "pi", "interval", "set", "tuple", "poly", "choice"],
        weights=[30, 8, 14, 5, 10, 5, 7, 6, 5, 6, 4],
    )[0]
    if kind == "int":
        n = rng.randint(-200, 999)
        return str(n), [str(n), f"{n}.0", f"{n}."], [str(n + rng.choice([-2, -1, 1, 3])), str(-n if n else 7)], kind
    if kind == "big_int":
        n = rng.randint(1_000, 9_999_999)
        ref = _thousands(n) if rng.random() < 0.5 else str(n)
        return ref, [str(n), _thousands(n), _thousands(n).replace(",", "{,}")], [str(n + 10), str(n * 10)], kind
    if kind == "fraction":
        while True:
            a, b = rng.randint(-40, 40), rng.randint(2, 30)
            if a and gcd(a, b) == 1:
                break
        q = Fraction(a, b)
        forms = [_frac_latex(q), f"{a}/{b}", f"\\dfrac{{{a}}}{{{b}}}", f"\\frac{{{2 * a}}}{{{2 * b}}}"]
        if 1_000_000 % b == 0:
            forms.append(str(float(q)))
        return _frac_latex(q), forms, [_frac_latex(q + 1), _frac_latex(Fraction(b, a)), f"{a}/{b + 1}"], kind
    if kind == "decimal":
        q = Fraction(rng.randint(1, 999), 4)
        dec = f"{float(q):g}"
        return dec, [dec, _frac_latex(q) if q.denominator > 1 else str(q.numerator)], [f"{float(q) + 0.5:g}"], kind
    if kind == "sqrt":
        k, m = rng.randint(2, 9), rng.choice([2, 3, 5, 6, 7, 10])
        ref = f"{k}\\sqrt{{{m}}}"
        right = [ref, f"\\sqrt{{{k * k * m}}}", f"{k} \\sqrt{{ {m} }}"]
        return ref, right, [f"{k + 1}\\sqrt{{{m}}}", f"\\sqrt{{{k * m}}}"], kind
    if kind == "pi":
        k, m = rng.randint(1, 9), rng.randint(2, 6)
        if gcd(k, m) != 1:
            k = 1
        ref = f"\\frac{{{k}\\pi}}{{{m}}}"
        right = [ref, f"{k}\\pi/{m}", f"\\frac{{{k}}}{{{m}}}\\pi"]
        return ref, right, [f"\\frac{{{k + m}\\pi}}{{{m}}}", f"{k}/{m}"], kind
    if kind == "interval":
        a, b = sorted(rng.sample(range(-20, 21), 2))
        left, right = rng.choice("[("), rng.choice("])")
        ref = f"{left}{a}, {b}{right}"
        flip = ("(" if left == "[" else "[") + f"{a},{b}" + right
        return ref, [ref, f"{left}{a},{b}{right}", f"\\left{left}{a}, {b}\\right{right}"], [flip], kind
    if kind == "set":
        xs = rng.sample(range(-9, 10), 3)
        ref = "\\{" + ", ".join(map(str, xs)) + "\\}"
        return ref, [ref, "\\{" + ",".join(map(str, reversed(xs))) + "\\}"], ["\\{" + f"{xs[0]}, {xs[1]}" + "\\}"], kind
    if kind == "tuple":
        a, b = rng.randint(-9, 9), rng.randint(-9, 9)
        ref = f"({a}, {b})"
        return ref, [ref, f"\\left({a},{b}\\right)"], [f"({b + 1}, {a})", f"({a}, {b + 2})"], kind
    if kind == "poly":
        r, s = rng.randint(1, 6), rng.randint(1, 6)
        ref = f"(x+{r})(x+{s})"
        expanded = f"x^2+{r + s}x+{r * s}"
        return ref, [ref, expanded, f"(x+{s})(x+{r})"], [f"x^2+{r + s + 1}x+{r * s}", f"(x-{r})(x+{s})"], kind
    letter = rng.choice("ABCDE")
    other = "ABCDE"["ABCDE".index(letter) - 1]
    right = [f"\\text{{({letter})}}", letter, f"({letter})"]
    return f"\\text{{({letter})}}", right, [other, f"\\text{{({other})}}"], kind


_FILLER = (
    "We start by rewriting the expression and simplifying each term carefully. ",
    "Substituting the values back, the two sides agree, so the computation is consistent. ",
    "Let us double-check the arithmetic: the intermediate results match. ",
)


def _wrap(rng: random.Random, answer: str) -> str:
    body = "".join(rng.choice(_FILLER) for _ in range(rng.randint(2, 12)))
    shape = rng.random()
    if shape < 0.55:
        return f"{body}Therefore the answer is $\\boxed{{{answer}}}$."
    if shape < 0.70:
        return f"{body}\n\nAnswer: {answer}"
    if shape < 0.85:
        return f"{body}\nFinal Answer: The final answer is ${answer}$. I hope it is correct."
    if shape < 0.95:
        return f"{body}So we get \\boxed{{{answer}"  # a stop sequence removed the closing brace
    return f"{body}\\boxed{{0}} was a first guess; after checking, \\boxed{{{answer}}}."


def _hostile(rng: random.Random) -> str:
    choice = rng.randrange(8)
    if choice == 0:
        return "\\boxed{9^{9^{9^{9}}}}"
    if choice == 1:
        return "\\boxed{(2^{99999})^{99999}}"
    if choice == 2:
        return "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}"
    if choice == 3:
        return "Answer: __import__('os').system('true')"
    if choice == 4:
        return "x" * 1_000_000 + "\\boxed{" + "7" * 100
    if choice == 5:
        return "\\boxed{" + "(" * 50 + "1" + ")" * 50 + "}"
    if choice == 6:
        return "\\boxed{99999999!}"
    return "\\boxed{" + "1+" * 300_000 + "1}"


def make_items(n: int = 1000, group_size: int = 4, seed: int = 0, hostile_rate: float = 0.01) -> list[Item]:
    """``n`` labelled items, in groups of ``group_size`` responses to one reference."""
    rng = random.Random(seed)
    items: list[Item] = []
    while len(items) < n:
        ref, right, wrong, kind = _reference_and_forms(rng)
        for _ in range(min(group_size, n - len(items))):
            if rng.random() < hostile_rate:
                items.append(Item(_hostile(rng), ref, None, "hostile"))
            elif rng.random() < 0.5:
                items.append(Item(_wrap(rng, rng.choice(right)), ref, 1.0, kind))
            else:
                items.append(Item(_wrap(rng, rng.choice(wrong)), ref, 0.0, kind))
    return items


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=1000, help="number of items (default 1000)")
    ap.add_argument("--group-size", type=int, default=4, help="responses per reference (default 4)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sequential", action="store_true", help="also time grade() one item at a time")
    ap.add_argument("--margin", action="store_true", help="the hardest items' CPU seconds against the budget")
    ap.add_argument("--base-commit", help="grade_many's throughput against COMMIT's grader, side by side")
    ap.add_argument("--repeats", type=int, default=5, help="--margin: verdicts per item; --base-commit: rounds")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one timing, for --base-commit
    args = ap.parse_args(argv)

    items = make_items(args.n, args.group_size, args.seed)
    if args.json:
        return _timing_json(items, args.repeats)
    if args.base_commit:
        return _side_by_side(args)
    t0 = time.perf_counter()
    ready = grader.warmup()
    warm_s = time.perf_counter() - t0
    info = grader.grader_info()
    print(f"grader {info['id']}  isolation={info['isolation']}  math-verify ready={ready}")
    print(f"warm-up (one-off worker start): {warm_s:.2f} s")
    if args.margin:
        _margin(items, args.repeats)
        grader.shutdown()
        return 0

    t0 = time.perf_counter()
    results = grader.grade_many_detailed([it.response for it in items], [it.reference for it in items])
    total = time.perf_counter() - t0
    _report("grade_many", items, results, total)

    if args.sequential:
        # Fresh workers and an empty verdict cache, so that the batch above does not help.
        grader.shutdown()
        grader.api.clear_cache()
        grader.warmup()
        t0 = time.perf_counter()
        seq = [grader.grade_detailed(it.response, it.reference) for it in items]
        _report("grade (one by one)", items, seq, time.perf_counter() - t0)
    grader.shutdown()
    return 0


def _worker_cpu_seconds(gold: str, pred: str, budget: float, repeats: int) -> tuple[float, bool | None]:
    """The most CPU seconds a worker spent on the normalised pair over ``repeats`` fresh verdicts (each from the
    same sympy state, `bandpo.grader.judge`), and the verdict (None: the budget was spent)."""
    pool = grader.pool.get_pool()
    most, verdict = 0.0, None
    for _ in range(repeats):
        try:
            verdict, cpu_s = pool.submit(gold, pred, budget).result()
        except Exception:  # the worker spent the budget and was ended
            return budget, None
        most = max(most, cpu_s)
    return most, verdict


def _margin(items: list[Item], repeats: int) -> None:
    """Each hard item's and the slowest labelled items' worker CPU seconds against the first budget."""
    budget = grader.config.current().timeout_s
    pairs = [("hard", *pair) for pair in HARD] + [(it.kind, it.response, it.reference) for it in items]
    rows, seen = [], set()
    for kind, response, reference in pairs:
        key = grader.api._prepare(response, reference, "lenient").key
        if key is None or key in seen:  # decided without math-verify, or already measured
            continue
        seen.add(key)
        cpu_s, verdict = _worker_cpu_seconds(*key, budget=budget, repeats=repeats)
        rows.append((cpu_s, kind, key, verdict))
    hard = [r for r in rows if r[1] == "hard"]
    labelled = sorted((r for r in rows if r[1] != "hard"), reverse=True)[:5]
    print(f"\nworker CPU seconds per verdict (most of {repeats}) against the first budget, {budget:g} CPU s:")
    for cpu_s, kind, (gold, pred), verdict in [*hard, *labelled]:
        print(f"  {cpu_s:8.4f} s  {budget / cpu_s:7.1f}x under  {kind:8} {verdict!s:5}  {pred[:40]!r} vs {gold[:20]!r}")
    worst = max(rows)
    print(f"items measured: {len(hard)} hard, {len(rows) - len(hard)} labelled that need math-verify")
    print(
        f"slowest: {worst[0]:.4f} CPU s ({worst[1]}): a CPU {budget / worst[0]:.1f}x slower than this one would be "
        f"needed before it spent the first budget ({budget:g} s), {30 * budget / worst[0]:.0f}x for the second"
    )


def _timing_json(items: list[Item], repeats: int) -> int:
    """One process's ``grade_many`` seconds on ``items`` (fresh cache each time; the least of ``repeats``), as JSON."""
    assert grader.warmup()
    responses, references = [it.response for it in items], [it.reference for it in items]
    times = []
    for _ in range(repeats):
        grader.api.clear_cache()
        t0 = time.perf_counter()
        grader.grade_many(responses, references)
        times.append(time.perf_counter() - t0)
    grader.shutdown()
    print(json.dumps({"seconds": min(times), "items": len(items)}))
    return 0


def _side_by_side(args: argparse.Namespace) -> int:
    """This tree's grader against ``args.base_commit``'s: processes alternated, the ratio of their throughputs."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _worktree import ROOT, base_worktree, tree_env

    script = [sys.executable, str(Path(__file__).resolve()), "--json", "-n", str(args.n),
              "--group-size", str(args.group_size), "--seed", str(args.seed), "--repeats", "3"]  # fmt: skip
    with base_worktree(args.base_commit) as base:
        trees = {"this tree": ROOT, args.base_commit: base}
        seconds: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(args.repeats):
            for name, tree in trees.items():
                out = subprocess.run(script, env=tree_env(tree, {"PYTHONHASHSEED": "0"}), cwd=tree,
                                     capture_output=True, text=True, check=False)  # fmt: skip
                if out.returncode != 0:
                    raise SystemExit(f"{name}: {out.stderr[-2000:]}")
                seconds[name].append(json.loads(out.stdout.splitlines()[-1])["seconds"])
    for name, times in seconds.items():
        print(
            f"{name:>12}: grade_many of {args.n} items {statistics.median(times):.3f} s median "
            f"({min(times):.3f}-{max(times):.3f}) = {args.n / statistics.median(times):.0f} items/s"
        )
    ratios = [b / a for a, b in zip(seconds["this tree"], seconds[args.base_commit], strict=True)]
    print(
        f"throughput, this tree / {args.base_commit}: {statistics.median(ratios):.3f}x median of {len(ratios)} "
        f"rounds ({min(ratios):.3f}-{max(ratios):.3f})"
    )
    return 0


def _report(name: str, items: list[Item], results: list[grader.GradeResult], total: float) -> None:
    n = len(items)
    slowest = max(range(n), key=lambda i: results[i].seconds)
    wrong = [(it, r) for it, r in zip(items, results, strict=True) if (it.label or 0.0) != r.score]
    methods = Counter(r.method.split(":")[0] for r in results)
    slow = sum(methods[m] for m in ("math_verify", "timeout", "unavailable", "error"))
    print(f"\n{name}: {n} items in {total:.2f} s = {n / total:.0f} items/s")
    print(f"  slowest item {results[slowest].seconds:.3f} s ({items[slowest].kind}, {results[slowest].method})")
    print(f"  methods: {dict(sorted(methods.items()))}; slow path (math-verify) {slow / n:.1%} of items")
    print(f"  graded again after overrunning the first budget: {sum(r.retried for r in results)}")
    print(f"  agreement with labels: {n - len(wrong)}/{n}")
    for it, r in wrong[:10]:
        print(f"    label={it.label} score={r.score} method={r.method} pred={r.pred!r:.60} gold={r.gold!r:.40}")


if __name__ == "__main__":
    raise SystemExit(main())
