"""Throughput and latency of ``bandpo.grader`` on realistic, labelled items.

Builds a deterministic set of model responses (MATH-style answers: integers, thousands separators, fractions,
decimals, radicals, multiples of pi, intervals, sets, tuples, polynomials, multiple-choice letters), about half of
them right (often in an equivalent but different form) and half wrong, in the shapes models produce them
(``\\boxed{}``, truncated ``\\boxed{``, ``Answer:`` lines, "The final answer is"), plus a few hostile ones (power
towers, huge powers, deep nesting, megabyte outputs, Python payloads).  Responses come in groups that share a
reference, as the rollouts of one prompt do in GRPO-style training (``--group-size``; 1 makes every item distinct).

Grades them with ``grade_many`` (and optionally one by one) and prints items/s, total seconds, the slowest item,
how each score was decided and whether the scores agree with the labels.

    python benchmarks/bench_grader.py                # 1,000 items, groups of 4
    python benchmarks/bench_grader.py --group-size 1 --sequential
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from math import gcd

from bandpo import grader


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
    args = ap.parse_args(argv)

    items = make_items(args.n, args.group_size, args.seed)
    t0 = time.perf_counter()
    ready = grader.warmup()
    warm_s = time.perf_counter() - t0
    info = grader.grader_info()
    print(f"grader {info['id']}  isolation={info['isolation']}  math-verify ready={ready}")
    print(f"warm-up (one-off worker start): {warm_s:.2f} s")

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
