"""A verdict is a function of the completion and the reference alone (issues #59 and #72): the same on a machine kept
busy by other processes (three per core) as on an idle one, in any worker, whatever that worker judged before, and
equal to the in-process judge's; a worker killed mid-item shows as a counted retry, never as another score, and the
load leaves no item undecided (the budgets count the worker's CPU seconds, `bandpo.grader.pool`).

The hard items are `benchmarks/bench_grader.py`'s ``HARD``. The completion of issue #59
(``tiny-s/grpo@separation/seed19``, step 42) is among them: its answer ``0:xed{0}`` parses as ``0/(x*E*d*0)``, whose
``is_zero`` sympy answered in the order its assumption system drew at random, one draw per worker process
(`bandpo.grader.judge`). The pool's workers here are forks of this process, so each would inherit this process's
draw; the task below reseeds sympy's generators once per worker from ``os.urandom``, as a worker that loaded sympy
itself (a training job's, `bandpo.grader.start_workers`) is seeded.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from conftest import busy_machine

from bandpo import grader as G
from bandpo.grader import api, counters, judge, pool

_BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_grader.py"
_spec = importlib.util.spec_from_file_location("bench_grader", _BENCH)
bench_grader = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("bench_grader", bench_grader)  # its dataclasses look their module up there
_spec.loader.exec_module(bench_grader)
HARD = bench_grader.HARD
# graded by the first batch only, first: the worker that starts it kills itself (its twin in another batch could be a
# task nobody waits for, whose worker's death no item would show)
KILLED = ("The answer is \\boxed{0/(0\\pi)}", "0")
KILLED_PRED = "0/(0\\pi)"
BATCHES = 4  # graded at once, from as many threads, by 2 workers: more grading work than cores
REPEATS = 5
HANG_GUARD_S = 300.0
# Fixed at import, before the pool forks its workers: the worker that starts KILLED while this file exists removes it
# and kills itself, mid-item.
KILL_FLAG = Path(tempfile.gettempdir()) / f"bandpo-test-determinism-kill-{os.getpid()}"
_SEEDED: list[int] = []  # pids of the workers whose sympy generators were reseeded
_REAL_VERIFY = pool.verify_in_worker


def verify_as_a_fresh_worker(gold, pred, cpu_s):
    """The real task, in a worker whose sympy generators are seeded from ``os.urandom`` at its first task (as a
    worker that loaded sympy itself), which kills itself in the middle of ``KILLED`` when it finds ``KILL_FLAG``."""
    if os.getpid() not in _SEEDED:
        import sympy.core.random

        sympy.core.random.seed(int.from_bytes(os.urandom(8), "little"))
        _SEEDED.append(os.getpid())
    if pred == KILLED_PRED:
        try:
            KILL_FLAG.unlink()
        except FileNotFoundError:
            pass
        else:
            os.kill(os.getpid(), signal.SIGKILL)
    return _REAL_VERIFY(gold, pred, cpu_s)


@pytest.fixture
def fresh_workers(monkeypatch):
    """Two workers (a fresh pool, forked after this module's import) running `verify_as_a_fresh_worker`."""
    G.configure(isolation="process", workers=2)
    G.shutdown()
    monkeypatch.setattr(pool, "verify_in_worker", verify_as_a_fresh_worker)
    assert G.warmup(), "math-verify workers did not start"
    api.clear_cache()
    yield
    KILL_FLAG.unlink(missing_ok=True)
    monkeypatch.undo()
    G.shutdown()  # its workers (replacements too) would keep the task above
    api.clear_cache()


def _grade_at_once(orders: list[list[int]]) -> dict[int, list[G.GradeResult]]:
    """The hard items graded in one batch per order, all batches at once (one thread each); the first batch grades
    ``KILLED`` too (its last result), sent to the workers before any other item."""
    results: dict[int, list[G.GradeResult]] = {}
    sent = threading.Event()

    def grade(b: int) -> None:
        grading = G.Grading(len(HARD) + (b == 0))
        if b == 0:
            grading.add(len(HARD), *KILLED)
            sent.set()
        for i in orders[b]:
            grading.add(i, *HARD[i])
        results[b] = grading.results()

    threads = [threading.Thread(target=grade, args=(b,)) for b in range(len(orders))]
    threads[0].start()
    sent.wait(HANG_GUARD_S)
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join(HANG_GUARD_S)
    return results


def test_verdicts_are_the_same_under_starvation_in_any_worker_and_in_process(fresh_workers):
    """On a machine kept busy by three processes per core, each repetition forgets every verdict, restarts the workers
    (fresh generators), grades the hard items in ``BATCHES`` batches at once, each in another order, and kills a
    worker in the middle of ``KILLED``. Every item of every batch gets the in-process judge's verdict (none left
    undecided by the load), and the counters account for every retry (the killed item's, and those of the items in
    flight when the kill takes the pool down)."""
    keys = [api._prepare(response, reference, "lenient").key for response, reference in [*HARD, KILLED]]
    assert all(key is not None for key in keys), "every hard item must need math-verify (no fast path, no cache)"
    assert keys[-1][1] == KILLED_PRED
    seen: list[list[float]] = []
    seen_killed: list[float] = []
    with busy_machine():
        for rep in range(REPEATS):
            api.clear_cache()
            G.shutdown()
            assert G.warmup()
            KILL_FLAG.touch()
            orders = [random.Random(rep * BATCHES + b).sample(range(len(HARD)), len(HARD)) for b in range(BATCHES)]
            with G.counting() as c:
                results = _grade_at_once(orders)
            assert sorted(results) == list(range(BATCHES)), "a batch did not finish"
            assert not KILL_FLAG.exists(), "no worker was killed mid-item"
            flat = [r for b in range(BATCHES) for r in results[b]]
            undecided = [(rep, r.pred, r.method) for r in flat if r.method != "math_verify"]
            assert not undecided, f"items the load left undecided: {undecided}"
            killed = results[0][-1]
            assert killed.retried, killed  # its second attempt decided it
            # the kill can also take down the pool when pebble sees the dead worker before the task it started
            # ("All workers expired"): the items then in flight are graded again too, and get the same verdicts
            assert sum(r.retried for r in flat) == c.counts.get("retried", 0) >= 1
            assert c.metrics()["grader_timeouts"] == 0 and c.counts["math_verify"] == len(flat)
            seen += [[r.score for r in results[b][: len(HARD)]] for b in range(BATCHES)]
            seen_killed.append(killed.score)
    # last: workers forked after this process judged the items would inherit its parsed answers (the old judge's
    # cache) and with them its verdicts
    in_process = judge.inprocess_judge()
    expected = [1.0 if in_process(*key) else 0.0 for key in keys]
    assert expected[9] == 1.0 and expected[10] == 0.0  # the plain ones, for scale
    moved = [(HARD[i][0], sorted({s[i] for s in seen}), expected[i]) for i in range(len(HARD))
             if any(s[i] != expected[i] for s in seen)]  # fmt: skip
    if any(score != expected[-1] for score in seen_killed):
        moved.append((KILLED[0], sorted(set(seen_killed)), expected[-1]))
    assert not moved, f"verdicts that moved (item, scores seen, in-process verdict): {moved}"


def test_the_hard_items_grade_the_same_on_a_busy_machine_as_on_an_idle_one():
    """``grade_many`` of the hard items with the default budgets, once with the machine as it is and once kept busy
    by three processes per core: the same scores and methods, no retry and no timeout counted either time, and the
    CPU seconds of the slowest verdict well inside its budget."""
    G.configure(isolation="process", workers=2)
    responses, references = zip(*HARD, strict=True)

    def grade() -> tuple[list[tuple[float, str]], dict]:
        api.clear_cache()
        G.shutdown()
        assert G.warmup()
        with G.counting() as c:
            results = G.grade_many_detailed(responses, references)
        return [(r.score, r.method) for r in results], c.metrics()

    try:
        idle, idle_counts = grade()
        with busy_machine():
            busy, busy_counts = grade()
    finally:
        G.shutdown()
        api.clear_cache()
    assert busy == idle and all(method == "math_verify" for _, method in idle), (idle, busy)
    assert idle_counts["grader_retries"] == busy_counts["grader_retries"] == 0, (idle_counts, busy_counts)
    assert idle_counts["grader_timeouts"] == busy_counts["grader_timeouts"] == 0, (idle_counts, busy_counts)
    slowest = counters.slowest_verdict()
    assert slowest["cpu_s"] < slowest["budget"] / 2, slowest


JUDGE_IN_A_FRESH_PROCESS = """
import json, sys
import sympy.core.random
sympy.core.random.seed(int(sys.argv[1]))  # another generator state than this test's processes
from bandpo.grader import judge
j = judge.Judge()
print(json.dumps([j(gold, pred) for gold, pred in json.loads(sys.argv[2])]))
"""


def test_verdicts_do_not_depend_on_the_hash_seed_or_the_process():
    """The hard items' verdicts in fresh processes with other hash seeds (sympy builds the facts it asks next from a
    set) and other generator states are this process's: the fixed order of sympy's queries is in force."""
    keys = [api._prepare(response, reference, "lenient").key for response, reference in [*HARD, KILLED]]
    here = [judge.inprocess_judge()(*key) for key in keys]
    root = str(Path(G.__file__).resolve().parents[2])  # the checkout whose grader this process imported
    for hash_seed, sympy_seed in (("1", 2), ("2", 3)):
        env = {**os.environ, "PYTHONPATH": root, "PYTHONHASHSEED": hash_seed}
        args = [sys.executable, "-c", JUDGE_IN_A_FRESH_PROCESS, str(sympy_seed), json.dumps(keys)]
        out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=HANG_GUARD_S)
        assert out.returncode == 0, out.stderr[-2000:]
        there = json.loads(out.stdout.splitlines()[-1])
        moved = [(HARD + [KILLED])[i][0] for i in range(len(keys)) if there[i] != here[i]]
        assert not moved, f"PYTHONHASHSEED={hash_seed}: verdicts that moved: {moved}"
