"""Tests of bandpo.grader: extraction, equivalences, hostile inputs, time bounds, threads, provenance.

No test asserts wall-clock time (a loaded machine slows everything down).  Work in this process is bounded by its
process time (``time.process_time``) against the configured budget or by ratios of process times measured side by
side.  What the budgets (CPU seconds of the judging worker) and the hang guard (wall seconds) do to worker processes
is checked by its effects, never by elapsed seconds: which budgets an item's attempts were given (the calls of
`bandpo.grader.pool.verify_bounded`, recorded by ``attempts``), the grader's counters, the result (``timeout`` or
``hung``, score 0) and that the process of a hung worker task ended.  Tests make a worker hang, spin on the CPU or run
slowly by replacing the task the pool schedules (`bandpo.grader.pool.verify_in_worker`) with a function of this
module.  Waits for an event poll a bounded number of times and threads are joined with a
generous limit: hang guards that make a broken test fail instead of hanging, never a bound on the work itself.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from bandpo import __version__ as bandpo_version
from bandpo import grader as G
from bandpo.grader import api, config, judge, pool
from bandpo.grader.normalise import normalise, structural_verdict

SLACK_S = 5.0  # beyond the configured budgets: a worker's kill and replacement, a busy machine
NOT_DECIDED = ("timeout", "hung", "unavailable", "error")
HANG_GUARD_S = 300.0  # hang guards only (see the module's docstring): far beyond anything a passing test waits
POLL_S = 0.05


@pytest.fixture(scope="module", autouse=True)
def workers():
    """One warm worker pool for the module."""
    G.configure(isolation="process", workers=2)
    G.shutdown()
    assert G.warmup(), "math-verify workers did not start"
    yield
    G.shutdown()


@pytest.fixture
def short_budgets():
    """Budgets that keep spinning and hanging items short: 0.2 CPU seconds, then 15x (3 s), and a hang guard of
    1 wall second (6 s for the second budget: at least twice the budget; a test whose worker spins sets a generous
    guard, `generous_guard`, so that a loaded machine does not end the spin as a hang before it spends its CPU
    budget); the defaults come back after the test."""
    s = config.current()
    old = (s.timeout_s, s.retry_factor, s.hang_guard_s)
    G.configure(timeout_s=0.2, retry_factor=15, hang_guard_s=1.0)
    yield 0.2, 3.0
    G.configure(timeout_s=old[0], retry_factor=old[1], hang_guard_s=old[2])


def item_cpu_bound_s(timeout_s: float | None = None) -> float:
    """The most process time an item may cost this process: both budgets (configured, or ``timeout_s`` and its
    multiple) plus slack.  A bound on CPU seconds, not on elapsed ones: load makes an item take longer, never makes
    it use more CPU."""
    s = config.current()
    first = timeout_s or s.timeout_s
    return first * (1 + s.retry_factor) + SLACK_S


def graded(response, reference, **kw) -> tuple[G.GradeResult, float]:
    """The result and this process's CPU seconds."""
    c0 = time.process_time()
    result = G.grade_detailed(response, reference, **kw)
    return result, time.process_time() - c0


def eventually(predicate, what: str) -> None:
    """Wait for an event that must happen (``predicate()`` true), polling a bounded number of times (a hang guard)."""
    for _ in range(int(HANG_GUARD_S / POLL_S)):
        if predicate():
            return
        time.sleep(POLL_S)
    assert predicate(), what


def ended(pid: int) -> bool:
    """Whether process ``pid`` is gone (or a zombie: ended, not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return Path("/proc/self").exists()  # gone meanwhile, unless there is no /proc to look in
    except (OSError, IndexError):
        return False


@pytest.fixture
def attempts(monkeypatch):
    """``attempts``: ``(gold, budget)`` of every math-verify attempt the grader makes in this test (each call of
    `bandpo.grader.pool.verify_bounded`, in any thread), in order."""
    calls = []
    real = pool.verify_bounded

    def recording(gold, pred, budget):
        calls.append((gold, budget))  # list.append is atomic
        return real(gold, pred, budget)

    monkeypatch.setattr(pool, "verify_bounded", recording)
    return calls


# Worker tasks that stand in for math-verify (module-level, so that a worker can import them by name).
HANG = "\\testhang"  # a reference whose worker task hangs (asleep, no CPU): only the hang guard ends it
SPIN = "\\testspin"  # a reference whose worker task spins on the CPU like a runaway computation: its budget ends it
_REAL_VERIFY = pool.verify_in_worker
SLOW_S = 0.6  # the slow tasks' extra time: twice a first budget of 0.3 s, far under its 30x retry budget
# Where a hanging task writes its worker's pid: fixed at import, before the pool forks its workers, so that every
# worker (a replacement too) knows it.
HUNG_LOG = Path(tempfile.gettempdir()) / f"bandpo-test-grader-hung-{os.getpid()}.log"


def verify_or_hang(gold, pred, cpu_s):
    """Hangs on ``HANG`` and spins on ``SPIN`` (the real task, `bandpo.grader.pool.verify_in_worker`, with a judge that
    spins) until killed (a worker that is never killed gives the verdict True, after a hang guard)."""
    if gold in (HANG, SPIN):
        with open(HUNG_LOG, "a") as f:
            f.write(f"{os.getpid()}\n")
    if gold == HANG:
        time.sleep(HANG_GUARD_S)
        return True, 0.0
    if gold == SPIN:
        return _with_judge(lambda g, p: _spin(HANG_GUARD_S) or True, gold, pred, cpu_s)
    return _REAL_VERIFY(gold, pred, cpu_s)


def _spin(cpu_s: float) -> None:
    """Burn ``cpu_s`` seconds of this process's CPU time."""
    c0 = time.process_time()
    while time.process_time() - c0 < cpu_s:
        pass


def _with_judge(judge_fn, gold, pred, cpu_s):
    """The real worker task, with ``judge_fn`` as the worker's judge."""
    real, pool._WORKER_JUDGE = pool._WORKER_JUDGE, judge_fn
    try:
        return _REAL_VERIFY(gold, pred, cpu_s)
    finally:
        pool._WORKER_JUDGE = real


def hung_pids() -> list[int]:
    """The workers that started a hanging task in this test."""
    return [int(pid) for pid in HUNG_LOG.read_text().split()] if HUNG_LOG.exists() else []


def starved_verify(gold, pred, cpu_s):
    """math-verify's real verdict, after a delay without CPU: a worker that other processes keep off the CPU."""
    time.sleep(SLOW_S)
    return _REAL_VERIFY(gold, pred, cpu_s)


def spin_verify(gold, pred, cpu_s):
    """math-verify's real verdict, after ``SLOW_S`` seconds of CPU work in the judge: an item that is expensive to
    judge."""
    real = pool._WORKER_JUDGE
    return _with_judge(lambda g, p: _spin(SLOW_S) or real(g, p), gold, pred, cpu_s)


@pytest.fixture
def worker_task(monkeypatch):
    """``worker_task(fn)``: workers run ``fn`` instead of math-verify's task.  Afterwards the pool is stopped: a
    worker forked meanwhile (a replacement) would keep ``fn`` under the task's name."""
    yield lambda fn: monkeypatch.setattr(pool, "verify_in_worker", fn)
    monkeypatch.undo()
    G.shutdown()


@pytest.fixture
def hanging(worker_task):
    """Workers hang on the reference ``HANG`` (and judge every other pair as usual); see ``hung_pids``.  Timeouts
    remembered earlier in this process are forgotten: a test (or its rerun) sees each pair's attempts afresh."""
    api.clear_cache()
    HUNG_LOG.unlink(missing_ok=True)
    worker_task(verify_or_hang)
    yield
    HUNG_LOG.unlink(missing_ok=True)


def boxed(s: str) -> str:
    return "Some reasoning first.  So the result is $\\boxed{" + s + "}$."


# --------------------------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("so $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("the answer is \\boxed{42", "42"),  # a stop sequence removed the closing brace
        ("\\boxed{\\frac{1}{2", "\\frac{1}{2"),
        ("\\boxed 5 is it", "5"),
        ("\\fbox{3}", "3"),
        ("\\boxed{\\boxed{7}}", "7"),
        ("\\boxed{3}\nOn reflection:\nAnswer: 4", "4"),
        ("Answer: 4\nWait, actually \\boxed{5}.", "5"),
        ("Answer: 1\nmore\nanswer: 2", "2"),
        ("**Answer:** $-3$.", "-3"),
        ("Answer:\n\n  17", "17"),
        ("Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", "\\frac{3}{4}"),
        ("Janet has 3 eggs left.\n#### 18", "18"),
        ("Answer: $\\boxed{9}$", "9"),
        ("\u0130\u0130\u0130 answer: 12", "12"),  # non-ASCII case folding must not shift positions
        ("no final answer here", None),
        ("\\boxed{}", None),
        ("", None),
        (None, None),
        (b"\\boxed{8}", "8"),
    ],
)
def test_extract_answer(text, expected):
    assert G.extract_answer(text) == expected


def _cpu_seconds(fn, arg, repeats: int = 3) -> float:
    """Least process time of ``fn(arg)`` over a few runs."""
    best = float("inf")
    for _ in range(repeats):
        c0 = time.process_time()
        fn(arg)
        best = min(best, time.process_time() - c0)
    return best


@pytest.mark.parametrize(
    "make",
    [
        lambda n: "\\boxed{" * (n // 7),
        lambda n: "\\boxed{" + "{" * n,
        lambda n: "answer " * (n // 7),
        lambda n: "Answer: 1" + " " * n + "x",
        lambda n: "x" * n + "\\boxed{3}",
        lambda n: "\\" * n,
        lambda n: "}" * (n // 2) + "{" * (n // 2),
    ],
    ids=["many-boxed", "open-braces", "many-answer-words", "space-run", "long-prefix", "backslashes", "braces"],
)
def test_extract_and_grade_are_linear_on_megabyte_inputs(make):
    """Four times the text costs at most about four times the CPU (a quadratic scan would cost 16 times), and a
    megabyte never reaches math-verify."""
    small, big = make(250_000), make(1_000_000)
    for fn in (G.extract_answer, lambda text: G.grade_detailed(text, "3")):
        assert _cpu_seconds(fn, big) < 8 * _cpu_seconds(fn, small) + 0.01
    assert G.grade_detailed(big, "3").method not in ("math_verify", *NOT_DECIDED)


# --------------------------------------------------------------------------------------------------------------
# Equivalences (both directions)
# --------------------------------------------------------------------------------------------------------------
EQUIVALENT = [
    ("\\frac{1}{2}", "0.5"),
    ("1/2", "\\frac{1}{2}"),
    ("0.5", "1/2"),
    ("\\dfrac{1}{2}", "\\frac12"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
    ("3\\sqrt{3}", "\\sqrt{27}"),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}"),
    ("[1, 3)", "[1,3)"),
    ("(-\\infty, 2]", "\\left(-\\infty,2\\right]"),
    ("(0, \\infty)", "(0,\\infty)"),
    ("[-2, 5]", "[-2.0, 5]"),
    ("\\{1, 2, 3\\}", "\\{3, 2, 1\\}"),
    ("\\{-1, 4\\}", "\\{4, -1\\}"),
    ("(3, -4)", "\\left( 3, -4 \\right)"),
    ("-5", "-5.0"),
    ("-5", "\u22125"),
    ("-\\frac{3}{4}", "-0.75"),
    ("\\frac{-3}{4}", "-\\frac{3}{4}"),
    ("1,000", "1000"),
    ("12{,}345", "12345"),
    ("1,234,567", "1234567"),
    ("(x+1)^2", "x^2+2x+1"),
    ("\\frac{\\pi}{2}", "\\pi/2"),
    ("90^\\circ", "90"),
    ("\\text{(B)}", "B"),
    ("2^{10}", "1024"),
]

NOT_EQUIVALENT = [
    ("\\frac{1}{2}", "0.52"),
    ("\\frac{1}{3}", "0.33"),
    ("2\\sqrt{2}", "\\sqrt{6}"),
    ("[1, 3)", "(1, 3]"),
    ("[1, 3)", "[1, 3]"),
    ("(-\\infty, 2]", "(-\\infty, 2)"),
    ("\\{1, 2, 3\\}", "\\{1, 2\\}"),
    ("(3, -4)", "(-4, 3)"),
    ("-5", "5"),
    ("-\\frac{3}{4}", "\\frac{3}{4}"),
    ("1,000", "100"),
    ("1000", "10000"),
    ("12{,}345", "12,346"),
    ("(x+1)^2", "x^2+1"),
    ("\\frac{\\pi}{2}", "\\pi"),
    ("\\text{(B)}", "C"),
    ("3", "4"),
    ("2^{10}", "1000"),
]


def _grade_pairs(pairs):
    responses = [boxed(b) for _, b in pairs] + [boxed(a) for a, _ in pairs]
    references = [a for a, _ in pairs] + [b for _, b in pairs]
    return list(zip(responses, references, G.grade_many(responses, references), strict=True))


def test_equivalent_forms_score_one_both_ways():
    failures = [(r, g, s) for r, g, s in _grade_pairs(EQUIVALENT) if s != 1.0]
    assert not failures


def test_wrong_answers_score_zero_both_ways():
    failures = [(r, g, s) for r, g, s in _grade_pairs(NOT_EQUIVALENT) if s != 0.0]
    assert not failures


@pytest.mark.parametrize(
    "response",
    [
        "\\boxed{0.5",  # truncated
        "Answer: 0.5",
        "**Answer:** $\\frac{1}{2}$",
        "Final Answer: The final answer is $1/2$. I hope it is correct.",
        "First \\boxed{3}, but no: \\boxed{\\frac{1}{2}}",
    ],
)
def test_response_shapes(response):
    assert G.grade(response, "\\frac{1}{2}") == 1.0


def test_reference_may_be_a_full_solution_or_a_number():
    assert G.grade("\\boxed{6}", "We add them: $2+4=\\boxed{6}$.") == 1.0
    assert G.grade("\\boxed{18}", "She sells 9*2 = 18 eggs.\n#### 18") == 1.0
    assert G.grade("\\boxed{18}", 18) == 1.0
    assert G.grade("\\boxed{0.25}", Fraction(1, 4)) == 1.0
    assert G.grade("\\boxed{2.5}", Decimal("2.5")) == 1.0


def test_no_answer_scores_zero():
    assert G.grade("The answer is 4", "4") == 0.0
    assert G.grade_detailed("I could not solve it.", "4").method == "no_answer"


# --------------------------------------------------------------------------------------------------------------
# Hostile inputs: bounded time, score 0, nothing executed
# --------------------------------------------------------------------------------------------------------------
HOSTILE = [
    "\\boxed{9^9^9^9}",
    "\\boxed{9^{9^{9^{9}}}}",
    "\\boxed{10^{10^{10}}}",
    "\\boxed{x^{9^{9^9}}}",
    "\\boxed{2^{99999999}}",
    "\\boxed{(2^{9999})^{9999}}",
    "\\boxed{99^99^99^99}",
    "\\boxed{{2^{999}}^{999}}",
    "\\boxed{99999999!}",
    "\\boxed{((4!)!)!}",
    "\\boxed{\\binom{1000000000}{500000000}}",
    "\\boxed{\\sum_{k=1}^{99999} k^{k}}",
    "\\boxed{\\prod_{k=1}^{100000} k}",
    "\\boxed{" + "(" * 31 + "1" + ")" * 31 + "}",
    "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}",
    "\\boxed{" + "{" * 10_000,
    "\\boxed{" + "\\frac{1}{" * 5_000 + "2" + "}" * 5_000 + "}",
    "\\boxed{" + "1+" * 500_000 + "1}",
    "\\boxed{" + "7" * 5_000 + "}",
    "Answer: " + "x" * 1_000_000,
    "a" * 1_000_000,
    "\\boxed{" + "\\sqrt{" * 3_000 + "2" + "}" * 3_000 + "}",
]


@pytest.mark.parametrize("response", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_input_is_bounded_and_scores_zero(response):
    """Refused up front (or decided by math-verify without a timeout), within the first budget of this process's
    CPU; what a worker does is bounded by the budgets: an item refused up front never reaches math-verify, one that
    does gets a verdict (not a timeout)."""
    with G.counting() as c:
        result, cpu = graded(response, "5")
    assert result.score == 0.0
    assert result.method.startswith("rejected:") or result.method in ("no_answer", "math_verify"), result.method
    assert cpu < config.current().timeout_s, (result.method, cpu)
    metrics = c.metrics()
    assert (metrics["grader_items"], metrics["grader_timeouts"]) == (1, 0), c.counts
    assert metrics["grader_slow_frac"] == (1.0 if result.method == "math_verify" else 0.0), c.counts


def test_hostile_reference_is_bounded():
    for reference in (HOSTILE[1], HOSTILE[14], "9" * 1_000_000):
        result, cpu = graded("\\boxed{5}", reference)
        assert (result.score, result.method[:9]) == (0.0, "rejected:")
        assert cpu < config.current().timeout_s


def test_python_payloads_are_never_executed(tmp_path):
    target = tmp_path / "pwned"
    payloads = [
        f"__import__('os').system('touch {target}')",
        f"exec(\"open('{target}', 'w').write('x')\")",
        f"eval(\"open('{target}', 'w')\")",
        f"os.system('touch {target}')",
        f"(lambda: open('{target}', 'w'))()",
    ]
    for payload in payloads:
        for response in (f"\\boxed{{{payload}}}", f"Answer: {payload}", f"The final answer is {payload}", payload):
            for reference in ("1", payload):
                assert G.grade_detailed(response, reference).method not in NOT_DECIDED
        assert G.extract_answer(f"\\boxed{{{payload}}}") == payload
    time.sleep(0.05)
    assert not target.exists()


class _BadStr:
    def __str__(self):
        raise RuntimeError("boom")

    __repr__ = __str__


WEIRD = [
    None,
    b"\\boxed{3}",
    b"\xff\xfe\\boxed{\xc3(}",
    bytearray(b"Answer: 3"),
    memoryview(b"\\boxed{3}"),
    3,
    3.0,
    float("nan"),
    float("inf"),
    10**5000,
    True,
    Fraction(3, 1),
    Decimal("3"),
    _BadStr(),
    object(),
    ["\\boxed{3}"],
    {"answer": 3},
    "\ud800\\boxed{\udfff}",
    "\x00\\boxed{3\x00}",
    "\\boxed{\u202e3\u202d}",
    "\\boxed{\U0001f600}",
    "\\boxed{3\u0301}",
    "Answer: \u0663",
    "\\boxed{\\}",
    "\\boxed{}}}}}",
    "\\boxed{$}$",
    "$$$$$$",
    "\\boxed{\\boxed{\\boxed{",
]


def test_never_raises_on_weird_input():
    for response in WEIRD:
        for reference in ("3", WEIRD[2], None, _BadStr(), 3, "\ud800"):
            assert G.grade_detailed(response, reference).method not in NOT_DECIDED
        G.extract_answer(response)
    assert G.grade("\\boxed{3}", 3) == 1.0
    assert G.grade(b"\\boxed{3}", b"3") == 1.0


def test_hung_worker_is_killed_and_the_spare_answers_next(hanging, short_budgets, attempts):
    """A task that hangs without using CPU: the worker is ended at the hang guard of the first attempt, the item is
    tried once more with the second budget (and its guard), then scores 0, counted as ``hung``: two attempts, with
    the two budgets, and every worker that ran the task is ended; replacement workers answer the next item."""
    first, second = short_budgets
    with G.counting() as c:
        result = G.grade_detailed("\\boxed{1}", HANG)
    assert (result.score, result.method, result.retried) == (0.0, "hung", True)
    assert attempts == [(HANG, first), (HANG, second)]
    hung = hung_pids()
    assert len(hung) == len(set(hung)) <= 2, hung  # at most one worker per attempt (none if it never started)
    eventually(lambda: all(ended(pid) for pid in hung), f"the hung workers {hung} were not ended")
    assert c.counts == {"items": 1, "slow": 1, "hung": 1, "retried": 1}
    assert c.metrics() == {"grader_items": 1, "grader_slow_frac": 1.0, "grader_retries": 1, "grader_timeouts": 1}
    result = G.grade_detailed(boxed("x^2-9"), "(x-3)(x+3)")  # the replacement workers answer
    assert (result.score, result.method) == (1.0, "math_verify")


def generous_guard() -> None:
    """A hang guard no spinning task meets, however loaded the machine (its CPU budget ends it first)."""
    G.configure(hang_guard_s=HANG_GUARD_S)


def test_a_spinning_worker_is_ended_at_its_cpu_budget(hanging, short_budgets, attempts):
    """A task that spins on the CPU, as a runaway computation does: the kernel ends its worker when the task has
    spent its CPU budget, at each of the two budgets (the hang guard is far away: the worker's CPU time is bounded),
    and the item scores 0 as a ``timeout``."""
    first, second = short_budgets
    generous_guard()
    assert G.warmup()  # the pool starts outside the counted block
    with G.counting() as c:
        result = G.grade_detailed("\\boxed{1}", SPIN)
    assert (result.score, result.method, result.retried) == (0.0, "timeout", True)
    assert attempts == [(SPIN, first), (SPIN, second)]
    hung = hung_pids()
    eventually(lambda: all(ended(pid) for pid in hung), f"the spinning workers {hung} were not ended")
    assert c.counts == {"items": 1, "slow": 1, "timeout": 1, "retried": 1}


def test_a_hard_timeout_is_remembered_a_hang_is_not(hanging, short_budgets, attempts):
    """A pair that spent the second budget is not given it again in this process (a repeat costs nothing: no attempt
    at all); a pair that only spent a budget too small for it is tried again: its next grading gives the real
    verdict; a hang is never remembered (it says nothing about the pair)."""
    first, second = short_budgets
    generous_guard()
    first_try = G.grade_detailed("\\boxed{2}", SPIN)
    assert (first_try.method, first_try.retried) == ("timeout", True)
    assert attempts == [(SPIN, first), (SPIN, second)]
    again = G.grade_detailed("\\boxed{2}", SPIN)
    assert (again.score, again.method, again.retried) == (0.0, "timeout", False)
    assert attempts == [(SPIN, first), (SPIN, second)]  # the repeat asked no worker
    G.configure(hang_guard_s=1.0)  # short_budgets' guard, for the hangs
    assert G.grade_detailed("\\boxed{2}", HANG).method == "hung"
    assert G.grade_detailed("\\boxed{2}", HANG).method == "hung"
    assert [gold for gold, _ in attempts].count(HANG) == 4  # asked again: two attempts each time
    generous_guard()
    pair = (boxed("x^2-25"), "(x-5)(x+5)")
    api.clear_cache()  # an earlier test may have graded the same pair
    assert G.warmup()
    assert G.grade_detailed(*pair, timeout_s=1e-6).method == "timeout"  # no CPU time at all, even 15x
    assert api._cached((normalise("(x-5)(x+5)"), "x^2-25")) is None  # not remembered as wrong
    assert G.warmup()  # the workers ended above are replaced
    result = G.grade_detailed(*pair)
    assert (result.score, result.method) == (1.0, "math_verify")


LOADED_ITEMS = [
    (boxed("x^2-49"), "(x-7)(x+7)"),
    (boxed("x^2+49"), "(x-7)(x+7)"),
    (boxed("\\frac{x}{2}+1"), "\\frac{x+2}{2}"),
    (boxed("x^3"), "x \\cdot x^2 + 1"),
]


def test_load_leaves_the_score_unchanged_and_an_expensive_item_gets_the_second_budget(worker_task):
    """A worker kept off the CPU past its first budget's worth of wall time (load) changes nothing against an
    unloaded grading: the same scores, no retry, no timeout (the budget counts CPU seconds). An item whose judging
    itself costs twice the first budget of CPU is graded again with the 30x budget (after the batch in
    ``grade_many``, at once in ``grade``) and keeps its score."""
    responses, references = zip(*LOADED_ITEMS, strict=True)
    assert G.warmup()
    api.clear_cache()
    unloaded = G.grade_many_detailed(responses, references, timeout_s=5.0)  # a budget no item comes near
    assert [(r.method, r.retried) for r in unloaded] == [("math_verify", False)] * len(LOADED_ITEMS)
    expected = [r.score for r in unloaded]
    assert expected == [1.0, 0.0, 1.0, 0.0]

    worker_task(starved_verify)
    api.clear_cache()
    with G.counting() as c:
        starved = G.grade_many_detailed(responses, references, timeout_s=0.3)
    assert [(r.score, r.method, r.retried) for r in starved] == [(e, "math_verify", False) for e in expected]
    assert (c.metrics()["grader_retries"], c.metrics()["grader_timeouts"]) == (0, 0)

    worker_task(spin_verify)
    assert config.current().retry_factor * 0.3 > 5 * SLOW_S  # the default factor: the expensive task fits the retry
    api.clear_cache()
    with G.counting() as c:
        expensive = G.grade_many_detailed(responses, references, timeout_s=0.3)
    assert [r.score for r in expensive] == expected
    assert [(r.method, r.retried) for r in expensive] == [("math_verify", True)] * len(LOADED_ITEMS)
    assert (c.metrics()["grader_retries"], c.metrics()["grader_timeouts"]) == (len(LOADED_ITEMS), 0)

    api.clear_cache()
    for (response, reference), score in list(zip(LOADED_ITEMS, expected, strict=True))[:2]:
        result = G.grade_detailed(response, reference, timeout_s=0.3)
        assert (result.score, result.method, result.retried) == (score, "math_verify", True)
    api.clear_cache()


def test_non_main_threads_are_bounded_too(hanging, short_budgets, attempts):
    """Grading in other threads: right scores, and a hung task there is ended too (by its budgets): each of its items
    makes at most the two attempts (a twin's verdict or overrun is shared), every worker that ran it is ended."""
    items = [
        (boxed("\\sqrt{8}"), "2\\sqrt{2}", 1.0),
        (boxed("\\{2, 1\\}"), "\\{1, 2\\}", 1.0),
        (boxed("x^2-1"), "(x-1)(x+1)", 1.0),
        (boxed("\\frac{\\pi}{3}"), "\\pi/4", 0.0),
        (HOSTILE[1], "5", 0.0),
        (HOSTILE[5], "5", 0.0),
        (HOSTILE[14], "5", 0.0),
        ("\\boxed{3}", HANG, 0.0),
    ] * 3

    ex = ThreadPoolExecutor(max_workers=6)
    try:
        results = list(ex.map(lambda item: G.grade_detailed(item[0], item[1]), items, timeout=HANG_GUARD_S))
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
    wrong = [(i, r) for i, (r, (_, _, e)) in enumerate(zip(results, items, strict=True)) if r.score != e]
    assert not wrong, wrong
    hanging_items = [r for r, (_, reference, _) in zip(results, items, strict=True) if reference == HANG]
    assert len(hanging_items) == 3 and all(r.method in NOT_DECIDED for r in hanging_items), hanging_items
    first, second = short_budgets
    hang_budgets = [budget for gold, budget in attempts if gold == HANG]
    assert hang_budgets.count(first) >= 1 and hang_budgets.count(second) >= 1, hang_budgets
    assert len(hang_budgets) <= 2 * len(hanging_items) and set(hang_budgets) == {first, second}, hang_budgets
    hung = hung_pids()
    assert len(hung) <= len(hang_budgets), hung
    eventually(lambda: all(ended(pid) for pid in hung), f"the hung workers {hung} were not ended")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_grades_with_its_own_workers_and_the_parent_keeps_its_own():
    assert G.warmup()  # workers ended by earlier tests are replaced
    assert G.grade(boxed("x^2-4"), "(x-2)(x+2)") == 1.0  # the parent's pool is up
    pid = os.fork()
    if pid == 0:  # child: the parent's pool is not ours; a new one starts on demand
        code = 1
        try:
            result = G.grade_detailed(boxed("x^2-16"), "(x-4)(x+4)", timeout_s=60)
            code = 0 if (result.score, result.method) == (1.0, "math_verify") else 2
            G.shutdown()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    result = G.grade_detailed(boxed("x^2-36"), "(x-6)(x+6)")
    assert (result.score, result.method) == (1.0, "math_verify")


FORK_THEN_EXIT = """
import os, sys, time
from bandpo import grader as G
from bandpo.grader import pool as P
assert G.warmup()
pool = P.get_pool()
pid = os.fork()
if pid == 0:
    r = G.grade_detailed("\\\\boxed{x^2-1}", "(x-1)(x+1)", timeout_s=60)
    print("child", r.method, flush=True)
    sys.exit(0)  # a normal exit: the child's atexit handlers run
os.waitpid(pid, 0)
time.sleep(0.5)
r = G.grade_detailed("\\\\boxed{x^2-4}", "(x-2)(x+2)")
print("parent", r.method, P.get_pool() is pool, G.stats().get("pool_starts"), flush=True)
"""


def test_a_forked_child_exiting_normally_leaves_the_parents_workers_alone():
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", FORK_THEN_EXIT], text=True, capture_output=True, env=env, timeout=120)
    assert out.stdout.splitlines() == ["child math_verify", "parent math_verify True 1"], out.stderr[-2000:]


def _probe_thread() -> tuple[bool, bool]:
    """In a worker: is this the main thread, and does ``signal.alarm`` (math-verify's own timeout) work here?"""
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.01)
        time.sleep(0.2)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return threading.current_thread() is threading.main_thread(), bool(fired)


def test_worker_tasks_run_in_the_workers_main_thread(hanging, short_budgets):
    """Also in a replacement worker, forked by pebble's manager thread after a kill."""
    workers = pool.get_pool()
    assert workers.pool.schedule(_probe_thread).result(timeout=30) == (True, True)
    assert pool.verify_bounded(HANG, "1", 0.2) == (None, "hung")  # the hung worker is ended and replaced
    generous_guard()
    assert pool.verify_bounded(SPIN, "1", 0.2) == (None, "timeout")  # and the spinning one
    assert [workers.pool.schedule(_probe_thread).result(timeout=30) for _ in range(3)] == [(True, True)] * 3


def test_workers_do_not_run_the_callers_main_module_again(tmp_path):
    """A script fed on stdin (no file to import) without a ``__main__`` guard: workers must neither need its file
    nor run its body again (the side effect below would happen once per worker)."""
    marker = tmp_path / "runs"
    script = f"""
import os
from bandpo import grader as G
with open({str(marker)!r}, "a") as f:
    f.write("x")
r = G.grade_detailed("\\\\boxed{{x^2-1}}", "(x-1)(x+1)", timeout_s=30)
print(r.score, r.method)
"""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-"], input=script, text=True, capture_output=True, env=env, timeout=120)
    assert out.stdout.split() == ["1.0", "math_verify"], out.stderr[-2000:]
    assert marker.read_text() == "x"


def test_workers_started_first_load_math_verify_themselves():
    """`bandpo.grader.start_workers` (a training job's first step): the caller never loads math-verify; its worker
    does, and so does a worker that replaces one ended by a timeout, or the pool restarted after a worker died."""
    script = """
import multiprocessing, os, signal, sys, time
from bandpo import grader as G
G.configure(workers=1)
G.start_workers()
assert G.warmup()
out = [G.grade_detailed("\\\\boxed{x^2-1}", "(x-1)(x+1)")]
out.append(G.grade_detailed("\\\\boxed{x^2-9}", "(x-3)(x+3)", timeout_s=1e-6))  # its worker is ended
out.append(G.grade_detailed("\\\\boxed{x^2-16}", "(x-4)(x+4)"))
for worker in multiprocessing.active_children():
    os.kill(worker.pid, signal.SIGKILL)
time.sleep(0.5)
out.append(G.grade_detailed("\\\\boxed{x^2-4}", "(x-2)(x+2)"))
print(*[(r.score, r.method) for r in out], "math_verify" in sys.modules, G.stats().get("pool_starts"), sep=";")
"""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("BANDPO_GRADER_WORKERS", None)
    out = subprocess.run([sys.executable, "-c", script], text=True, capture_output=True, env=env, timeout=180)
    fields = out.stdout.strip().split(";")
    assert len(fields) == 6, out.stderr[-2000:]
    first, cut_short, after_timeout, after_death, loaded_here, _ = fields
    assert first == after_timeout == after_death == "(1.0, 'math_verify')"
    assert cut_short == "(0.0, 'timeout')"
    assert loaded_here == "False"


# --------------------------------------------------------------------------------------------------------------
# API, provenance, consistency with math-verify
# --------------------------------------------------------------------------------------------------------------
def test_provenance():
    assert G.GRADER_NAME == "bandpo.grader"
    assert bandpo_version in G.GRADER_VERSION
    info = G.grader_info()
    assert info["name"] == G.GRADER_NAME and info["version"] == G.GRADER_VERSION
    assert info["math_verify_version"] != "missing"
    assert info["math_verify_version"] in G.GRADER_VERSION
    record = G.grade_detailed(boxed("4"), "4").as_record()
    assert record["grader"] == G.GRADER_NAME and record["grader_version"] == G.GRADER_VERSION
    assert record["score"] == 1.0 and record["pred"] == "4" and record["gold"] == "4"


def test_grade_many_matches_grade():
    responses = [boxed("0.5"), boxed("\\sqrt{8}"), boxed("7"), "nothing", boxed("\\sqrt{8}"), HOSTILE[0]]
    references = ["1/2", "2\\sqrt{2}", "8", "1", "2\\sqrt{2}", "5"]
    assert G.grade_many(responses, references) == [G.grade(r, g) for r, g in zip(responses, references, strict=True)]
    assert G.grade_many([], []) == []
    with pytest.raises(ValueError):
        G.grade_many(["a"], [])


# Where a worker task records the pairs it judged: fixed at import, like HUNG_LOG.
JUDGED_LOG = Path(tempfile.gettempdir()) / f"bandpo-test-grader-judged-{os.getpid()}.log"


def verify_and_record(gold, pred, cpu_s):
    """math-verify's real verdict, after recording that a worker judged the pair."""
    with open(JUDGED_LOG, "a") as f:
        f.write(f"{gold!r} {pred!r}\n")
    return _REAL_VERIFY(gold, pred, cpu_s)


def test_grading_judges_in_the_worker_as_items_are_added_and_answers_any_subset(worker_task):
    """`Grading`: the math-verify pairs are judged by a worker as soon as they are added (before any result is
    asked for), a subset's results can be taken first, and every score is `grade`'s, whatever the order of
    adding and asking."""
    items = [*LOADED_ITEMS, (boxed("7"), "7"), ("no answer here", "3"), LOADED_ITEMS[0]]
    expected = [G.grade(r, g) for r, g in items]
    api.clear_cache()
    JUDGED_LOG.unlink(missing_ok=True)
    assert G.warmup()
    worker_task(verify_and_record)
    grading = G.Grading(len(items))
    for i in reversed(range(len(items))):
        grading.add(i, *items[i])
    judged = lambda: JUDGED_LOG.read_text().splitlines() if JUDGED_LOG.exists() else []  # noqa: E731
    # four distinct pairs need math-verify (the repeat of item 0 is verified once): all judged with no one waiting
    eventually(lambda: len(judged()) == len(LOADED_ITEMS), f"the worker judged {judged()}")
    assert [r.score for r in grading.results([5, 1])] == [expected[5], expected[1]]
    assert [r.score for r in grading.results()] == expected
    assert [r.method for r in grading.results([0, 6, 4])] == ["math_verify", "math_verify", "exact"]
    assert len(judged()) == len(LOADED_ITEMS)  # nothing judged twice
    with pytest.raises(ValueError, match="added twice"):
        grading.add(0, *items[0])
    partial = G.Grading(3)
    partial.add(1, boxed("7"), "7")
    assert [r.score for r in partial.results([1])] == [1.0]
    with pytest.raises(ValueError, match=r"never added: \[0, 2\]"):
        partial.results()
    JUDGED_LOG.unlink(missing_ok=True)


def test_fast_paths_agree_with_math_verify():
    """The plain-number, choice and tuple/interval/set shortcuts must give math-verify's own verdicts."""

    def math_verify(gold, pred):
        verdict, method = pool.verify_bounded(gold, pred, 10)  # straight to a worker
        assert method == "math_verify"
        return verdict

    pairs = [
        ("0.5", "\\frac{1}{2}"),
        ("1/3", "0.333333"),
        ("1/3", "0.3333"),
        ("10.0", "10"),
        ("-3", "3"),
        ("2.5", "5/2"),
        ("1,000", "1000"),
        ("(1,2)", "[1,2]"),
        ("[1,2]", "[1, 2.0]"),
        ("(-\\infty,3)", "(-\\infty, 3]"),
        ("\\{1,2\\}", "\\{2,1,1\\}"),
        ("\\{0.5\\}", "\\{1/2\\}"),
        ("(1,2,3)", "(1,3,2)"),
        ("(0.5, 1)", "(\\frac12, 1)"),
        ("A", "(A)"),
        ("(B)", "A"),
    ]
    checked = 0
    for gold, pred in pairs:
        g, p = normalise(gold), normalise(pred)
        fast = structural_verdict(g, p)
        if fast is not None:
            checked += 1
            assert fast == math_verify(g, p), (gold, pred)
    assert checked >= 12


def _radical_forms(k: int, r: int, d: int, pi: bool) -> list[str]:
    """Ways of writing k * sqrt(r) / d (times pi)."""
    root = f"\\sqrt{{{r}}}" if r > 1 else ""
    tail = root + ("\\pi" if pi else "")
    kk = "" if k == 1 and tail else str(k)
    forms = [f"\\frac{{{kk}{tail}}}{{{d}}}", f"{kk}{tail}/{d}", f"\\frac{{{k}}}{{{d}}}{tail}"] if d > 1 else []
    forms.append(f"{kk}{tail}" if d == 1 else f"\\frac{{{k}{tail}}}{{{d}}}")
    if r > 1:
        forms.append(f"\\sqrt{{{r * 4}}}" if k == 2 and d == 1 and not pi else f"{k * 3}{tail}/{d * 3}")
    return forms


def test_radical_and_pi_fast_path_agrees_with_math_verify():
    """Rational multiples of a square root or of pi are decided without math-verify, with math-verify's verdict
    (checked here against math-verify itself on a corpus of equal and unequal pairs)."""
    import random

    rng = random.Random(0)
    pairs = [("\\sqrt{4}", "2"), ("2\\sqrt{2}", "\\sqrt{8}"), ("\\pi", "3"), ("\\frac{\\pi}{2}", "\\frac{1}{2}\\pi")]
    for _ in range(40):
        k, r, d, pi = (
            rng.randint(1, 9),
            rng.choice([1, 2, 3, 5, 6, 7, 12, 18]),
            rng.choice([1, 2, 3, 4]),
            rng.random() < 0.4,
        )
        forms = _radical_forms(k, r, d, pi)
        other = _radical_forms(k + rng.choice([-1, 1, 2]) or 3, r, d, pi) + _radical_forms(k, r, d, not pi)
        pairs.append((rng.choice(forms), rng.choice(forms)))
        pairs.append((rng.choice(forms), rng.choice(other)))
    fast = 0
    for gold, pred in pairs:
        g, p = normalise(gold), normalise(pred)
        verdict = structural_verdict(g, p)
        if verdict is None:
            continue
        fast += 1
        slow, method = pool.verify_bounded(g, p, 10)
        assert method == "math_verify" and verdict == slow, (gold, pred, verdict, slow)
    assert fast >= 70


def test_benchmark_items_agree_with_their_labels(monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "bench_grader", Path(__file__).resolve().parents[2] / "benchmarks" / "bench_grader.py"
    )
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_grader", bench)  # dataclasses look their module up there
    spec.loader.exec_module(bench)
    items = bench.make_items(150, group_size=1, seed=7, hostile_rate=0.05)
    results = G.grade_many_detailed([it.response for it in items], [it.reference for it in items])
    disagreements = [(it, r) for it, r in zip(items, results, strict=True) if (it.label or 0.0) != r.score]
    assert not disagreements
    assert not [r for r in results if r.method in NOT_DECIDED]


# --------------------------------------------------------------------------------------------------------------
# In-process mode (the fallback when worker processes are unavailable).  Last: it stops the worker pool.
# --------------------------------------------------------------------------------------------------------------
class _SpinningJudge:
    """A judge that only an alarm stops: it spins (until a hang guard of CPU seconds, then gives the verdict False).
    ``calls``: how often it was asked; ``unstopped``: how often it ran out its hang guard."""

    def __init__(self) -> None:
        self.calls = 0
        self.unstopped = 0

    def __call__(self, gold, pred):
        self.calls += 1
        _spin(HANG_GUARD_S / 5)
        self.unstopped += 1
        return False


@pytest.fixture
def inprocess(monkeypatch):
    G.configure(isolation="inprocess")
    yield monkeypatch
    G.configure(isolation="process")


def test_inprocess_alarm_bounds_the_main_thread(inprocess, short_budgets):
    """The alarm stops the judge at each of the two budgets: asked at most twice (an attempt whose budget ran out
    before the judge was reached does not ask it), stopped every time, and the CPU this process spent is within the
    budgets (the spinning judge would otherwise burn its whole hang guard)."""
    spinner = _SpinningJudge()
    inprocess.setattr(judge, "_INPROCESS", spinner)
    handler = signal.getsignal(signal.SIGPROF)
    result, cpu = graded(boxed("x+1"), "x+2", timeout_s=0.05)
    assert (result.score, result.method, result.retried) == (0.0, "timeout", True)
    assert spinner.calls <= 2 and spinner.unstopped == 0, (spinner.calls, spinner.unstopped)
    assert cpu < item_cpu_bound_s(0.05)
    assert signal.getsignal(signal.SIGPROF) is handler
    assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)


def test_inprocess_off_main_thread_and_foreign_alarm_do_not_block(inprocess):
    spinner = _SpinningJudge()
    inprocess.setattr(judge, "_INPROCESS", spinner)
    out = {}
    thread = threading.Thread(target=lambda: out.update(r=G.grade_detailed(boxed("x+1"), "x+3")))
    thread.start()
    thread.join(HANG_GUARD_S)  # a hang guard only
    assert (out["r"].score, out["r"].method) == (0.0, "unavailable")  # no alarm off the main thread
    assert spinner.calls == 0  # at once: the judge was not even asked
    # Plain numbers never need math-verify, in any thread.
    assert G.grade(boxed("0.5"), "\\frac{1}{2}") == 1.0

    fired = []
    previous = signal.signal(signal.SIGPROF, lambda *_: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_PROF, HANG_GUARD_S, HANG_GUARD_S)
        assert G.grade_detailed(boxed("x+1"), "x+4").method == "unavailable"
        value, interval = signal.getitimer(signal.ITIMER_PROF)
        # the caller's CPU-time timer is untouched: still running, with its own interval (one the grader set has none;
        # the kernel keeps a CPU-time timer in clock ticks, so its value reads up to a tick above what was set)
        assert interval == HANG_GUARD_S and 0 < value <= HANG_GUARD_S + 1
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
    assert not fired and spinner.calls == 0


def test_inprocess_real_math_verify(inprocess):
    assert G.warmup()  # loads math-verify into this process (one-off)
    result = G.grade_detailed(boxed("x^2-49"), "(x-7)(x+7)")
    assert (result.score, result.method) == (1.0, "math_verify")
    result, cpu = graded(boxed("(2^{99})^{99}"), "7")  # not rejected up front, parsed under the alarm
    assert result.score == 0.0 and result.method in ("math_verify", "timeout"), result.method
    assert cpu < item_cpu_bound_s()


def test_pool_that_cannot_start_falls_back_to_inprocess(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("no processes here")

    G.shutdown()
    monkeypatch.setattr(pool, "_Pool", refuse)
    try:
        assert G.warmup()  # no workers: loads math-verify into this process instead (one-off)
        result = G.grade_detailed(boxed("x^2-64"), "(x-8)(x+8)")
        assert (result.score, result.method) == (1.0, "math_verify")  # in-process, under the alarm
        assert pool.get_pool() is None
    finally:
        G.shutdown()


# --------------------------------------------------------------------------------------------------------------
# Grading modes, the one boxed extraction, counters
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("work...\nAnswer: 42", "42"),
        ("answer:  $\\frac{1}{2}$.", "\\frac{1}{2}"),
        ("Answer: \\boxed{7}", "7"),  # a box on the Answer line is unwrapped
        ("Answer: 41\nWait, it is \\boxed{42}", "41"),  # no boxed fallback: only the Answer line counts
        ("So \\boxed{42}", None),
        ("The final answer is 42", None),
        ("Janet...\n#### 18", None),
        ("Answer: 1\nmore\nAnswer: 2", "2"),
    ],
)
def test_strict_answer_line_extraction(text, expected):
    assert G.extract_answer(text, "strict-answer-line") == expected


def test_modes_grade_differently_and_are_recorded():
    boxed_only = "I get \\boxed{12}."
    assert G.grade(boxed_only, "12") == 1.0
    result = G.grade_detailed(boxed_only, "12", mode="strict-answer-line")
    assert (result.score, result.method, result.mode) == (0.0, "no_answer", "strict-answer-line")
    assert G.grade("Answer: 0.5", "\\frac{1}{2}", mode="strict-answer-line") == 1.0
    assert G.grade_many([boxed_only, "Answer: 12"], ["12", "12"], mode="strict-answer-line") == [0.0, 1.0]
    with pytest.raises(ValueError, match="unknown grader mode 'strict'"):
        G.grade(boxed_only, "12", mode="strict")
    assert G.grader_info()["mode"] == "lenient"
    assert G.grader_id("strict-answer-line") == f"bandpo.grader/strict-answer-line@{G.GRADER_VERSION}"
    G.configure(mode="strict-answer-line")
    try:
        assert G.grade(boxed_only, "12") == 0.0
        assert G.grader_info()["mode"] == "strict-answer-line"
        assert G.grader_info()["id"] == G.grader_id("strict-answer-line")
    finally:
        G.configure(mode="lenient")


def test_verl_reward_follows_the_mode_it_is_given(monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "verl_reward", Path(__file__).resolve().parents[2] / "workflow" / "scripts" / "verl_reward.py"
    )
    reward = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reward)
    out = reward.compute_score("math", "so \\boxed{3}", "3")
    assert out == {"score": 1.0, "acc": 1.0, "pred": "3"}
    assert reward.compute_score("math", "so \\boxed{3}", "3", grader_mode="strict-answer-line")["score"] == -1.0
    assert reward.compute_score("math", "Answer: 3", "3", grader_mode="strict-answer-line")["score"] == 1.0


def test_last_boxed_is_the_one_copy():
    from bandpo.data import real

    assert real.last_boxed is G.last_boxed
    assert G.last_boxed("a \\boxed{1} b \\boxed{\\frac{2}{3}} c") == "\\frac{2}{3}"
    assert G.last_boxed("\\fbox{ 9 }") == "9"
    assert G.last_boxed("cut \\boxed{4") == "4"
    assert G.last_boxed("no box") is None and G.last_boxed(None) is None and G.last_boxed("\\boxed{ }") is None


def test_counting_reports_items_slow_path_and_timeouts():
    with G.counting() as c:
        G.grade_many([boxed("3"), boxed("\\sqrt{8}"), boxed("x^2-1"), "none"], ["3", "2\\sqrt{2}", "(x-1)(x+1)", "1"])
    assert c.counts["items"] == 4
    assert c.counts["slow"] == 1  # only the polynomial needs math-verify
    assert c.metrics() == {"grader_items": 4, "grader_slow_frac": 0.25, "grader_retries": 0, "grader_timeouts": 0}


@pytest.fixture
def fresh_settings(monkeypatch):
    """No settings yet: the next use reads the (patched) environment; afterwards this process's settings return."""
    monkeypatch.setattr(config, "_SETTINGS", None)
    return monkeypatch


def test_the_environment_is_read_at_first_use_not_at_import(fresh_settings):
    fresh_settings.setenv("BANDPO_GRADER_MODE", "strict-answer-line")
    fresh_settings.setenv("BANDPO_GRADER_TIMEOUT_S", "0.5")
    fresh_settings.setenv("BANDPO_GRADER_RETRY_FACTOR", "not a number")  # ignored: the default stays
    fresh_settings.setenv("BANDPO_GRADER_HANG_GUARD_S", "90")
    info = G.grader_info()
    assert (info["mode"], info["timeout_s"], info["retry_timeout_s"]) == ("strict-answer-line", 0.5, 15.0)
    assert (info["budget_clock"], info["hang_guard_s"]) == ("cpu", 90.0)
    assert G.grade("I get \\boxed{12}.", "12") == 0.0
    # An unknown mode does not break the import; it is an error where the grader is first used.
    code = "import bandpo.grader as G\ntry:\n    G.grade('a', 'b')\nexcept ValueError as e:\n    print(e)"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "BANDPO_GRADER_MODE": "bogus"}
    out = subprocess.run([sys.executable, "-c", code], text=True, capture_output=True, env=env, timeout=120)
    assert "BANDPO_GRADER_MODE: unknown grader mode 'bogus'" in out.stdout, out.stderr[-2000:]


def test_unequal_lengths_are_an_error_not_a_truncation():
    for fn in (G.grade_many, G.grade_many_detailed):
        with pytest.raises(ValueError, match="differ in length"):
            fn(["\\boxed{1}", "\\boxed{2}"], ["1"])
