"""A verdict is a function of the completion and the reference alone (issue #59): the same under starvation, in any
worker, whatever that worker judged before, and equal to the in-process judge's; a worker killed mid-item shows as a
counted retry, never as another score.

The completion of issue #59 (``tiny-s/grpo@separation/seed19``, step 42) is among the hard items: its answer
``0:xed{0}`` parses as ``0/(x*E*d*0)``, whose ``is_zero`` sympy answered in the order its assumption system drew at
random, one draw per worker process (`bandpo.grader.judge`). The pool's workers here are forks of this process, so
each would inherit this process's draw; the task below reseeds sympy's generators once per worker from
``os.urandom``, as a worker that loaded sympy itself (a training job's, `bandpo.grader.start_workers`) is seeded.
"""

from __future__ import annotations

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

from bandpo import grader as G
from bandpo.grader import api, judge, pool

NOT_DECIDED = ("timeout", "unavailable", "error")
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
    """Each repetition forgets every verdict, restarts the workers (fresh generators), grades the hard items in
    ``BATCHES`` batches at once, each in another order, and kills a worker in the middle of ``KILLED``. Every item gets
    the in-process judge's verdict wherever it is decided (in some batch of every repetition, at least), and the
    counters account for every retry (the killed item's, and any first attempt the load left undecided) and every
    item left undecided (scored 0, counted in ``grader_timeouts``)."""
    keys = [api._prepare(response, reference, "lenient").key for response, reference in [*HARD, KILLED]]
    assert all(key is not None for key in keys), "every hard item must need math-verify (no fast path, no cache)"
    assert keys[-1][1] == KILLED_PRED
    seen: list[list[float | None]] = []
    seen_killed: list[float] = []
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
        assert {r.method for r in flat} <= {"math_verify", *NOT_DECIDED}, [(r.pred, r.method) for r in flat]
        undecided = [r for r in flat if r.method in NOT_DECIDED]
        # undecided: a batch whose second attempt waited for a twin's first attempt (another batch's) that no
        # worker started in time: scored 0, counted, never a verdict
        assert all(r.score == 0.0 and r.retried for r in undecided), undecided
        for i in range(len(HARD)):  # never vacuous: every item has its verdict in some batch of every repetition
            assert any(results[b][i].method == "math_verify" for b in range(BATCHES)), (rep, HARD[i][0])
        killed = results[0][-1]
        assert (killed.method, killed.retried) == ("math_verify", True), killed  # its second attempt decided it
        retried = sum(r.retried for r in flat)
        assert c.counts.get("retried", 0) == retried
        assert c.counts["items"] == len(flat) and c.counts.get("math_verify", 0) == len(flat) - len(undecided)
        assert c.metrics()["grader_retries"] == retried and c.metrics()["grader_timeouts"] == len(undecided)
        for b in range(BATCHES):
            seen.append([r.score if r.method == "math_verify" else None for r in results[b][: len(HARD)]])
        seen_killed.append(killed.score)
    # last: workers forked after this process judged the items would inherit its parsed answers (the old judge's
    # cache) and with them its verdicts
    in_process = judge.inprocess_judge()
    expected = [1.0 if in_process(*key) else 0.0 for key in keys]
    assert expected[9] == 1.0 and expected[10] == 0.0  # the plain ones, for scale
    moved = [(HARD[i][0], sorted({s[i] for s in seen if s[i] is not None}), expected[i]) for i in range(len(HARD))
             if any(s[i] not in (None, expected[i]) for s in seen)]  # fmt: skip
    if any(score != expected[-1] for score in seen_killed):
        moved.append((KILLED[0], sorted(set(seen_killed)), expected[-1]))
    assert not moved, f"verdicts that moved (item, scores seen, in-process verdict): {moved}"


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
