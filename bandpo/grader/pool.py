"""math-verify worker processes: a ``pebble`` process pool whose workers can be killed mid-computation.

Workers are forks of the caller, made after math-verify was imported and warmed up there, so that a worker (or a
replacement) is ready at once.  A job whose start-up is long can instead start its workers first
(:func:`start_workers`, before it imports torch): each worker then loads math-verify itself, on another core, while
the caller goes on (a second or so off a training job's start-up); the caller never loads it, and a replacement
worker loads it too before its first task.

``fork`` rather than ``spawn`` / ``forkserver``: those run the caller's ``__main__`` module again in every worker (a
training script's imports, or all of an unguarded script; impossible for ``python - <script``). A worker runs
nothing but math-verify on two strings. This works the same in the main thread, in other threads, in a forked child
(which starts its own pool) and inside lm-eval, and leaves the caller's signals and timers alone.

Budgets in CPU seconds, not wall seconds (issue #72)
----------------------------------------------------
A task's budget is the CPU time its worker spends on it: the task arms the worker's ``ITIMER_PROF`` timer (user +
system CPU of the worker) and, with ``SIGPROF`` at its default action, the kernel ends the worker when the budget is
spent, also inside C-level work no signal handler can interrupt (a huge integer power).  pebble reports the death,
the item is a ``timeout``, and pebble forks a replacement while the other workers keep answering.  Another process
on the machine slows a worker down but does not make it spend more CPU, so a verdict is the same under any load.

The caller waits for a task as long as the pool makes progress, however long the queue or the machine's load makes
that.  Two wall-clock guards stand only against a hung worker or pool, never against a slow one: pebble ends a task
that has run ``hang_guard_s`` wall seconds (default 600, at least twice its budget: a worker starved 25-fold on the
second budget of 24 CPU seconds still finishes), counted as ``hung``; and the caller gives up on a queued task when no
task of the pool has finished for that guard plus :data:`STARTUP_TIMEOUT_S`, counted as ``unavailable``.  Both score
0 and are counted (`bandpo.grader.counters`), neither is remembered as the pair's outcome.

The task a worker runs is this module's :func:`verify_in_worker`, looked up when each task is scheduled: a test
replaces it (``monkeypatch.setattr(pool, "verify_in_worker", fn)``, ``fn`` a module-level function the worker can
import) to make a worker hang, spin or run slowly.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import CancelledError
from concurrent.futures import TimeoutError as WaitTimeout  # the builtin TimeoutError from Python 3.11

from bandpo.grader import config, counters, judge

log = logging.getLogger("bandpo.grader")

STARTUP_TIMEOUT_S = 60.0  # one-off wait for the first worker of a process to import math-verify
_MAX_POOL_FAILURES = 3  # pools that broke before answering; after that many, math-verify runs in-process
_POLL_S = 1.0  # how often a waiting caller looks whether the pool still makes progress
CPU_BUDGET_EXIT = -signal.SIGPROF  # the exit code of a worker the kernel ended at its task's CPU budget


def hang_guard(budget: float) -> float:
    """Wall seconds after which a running task is taken as hung: the configured guard, at least twice ``budget``."""
    return max(config.current().hang_guard_s, 2.0 * budget)


def _limit_worker_memory() -> None:
    """At most 4 GiB of address space beyond what the worker inherited from its parent (a fork)."""
    try:
        import resource  # lazy, inside the try: Unix only (elsewhere the worker runs without this guard)

        with open("/proc/self/statm") as f:
            inherited = int(f.read().split()[0]) * resource.getpagesize()
        limit = inherited + (4 << 30)
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard == resource.RLIM_INFINITY or hard > limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except Exception:
        pass


_WORKER_JUDGE: judge.Judge | None = None


def _worker_init() -> None:
    """Initializer of each pool worker (a fork of the caller): quiet output, memory cap, math-verify ready, and
    ``SIGPROF`` at its default action, which ends the process: a task's CPU budget (:func:`verify_in_worker`)."""
    global _WORKER_JUDGE
    # pebble installs a Python-level SIGTERM handler, which cannot run while math-verify is inside a C-level
    # computation (a huge integer power); the default action ends the process at once when the pool stops it.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGPROF, signal.SIG_DFL)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # anything a library prints goes nowhere
    sys.stdout = open(os.devnull, "w")
    logging.disable(logging.CRITICAL)
    _limit_worker_memory()
    _WORKER_JUDGE = judge.inprocess_judge()  # the parent's (warm before the fork), or loaded here: start_workers


def _worker_ping() -> bool:
    return _WORKER_JUDGE is not None


def verify_in_worker(gold: str, pred: str, cpu_s: float) -> tuple[bool, float]:
    """One math-verify verdict and the CPU seconds it took, in a pool worker (pebble runs it in the worker's main
    thread).  The kernel ends the worker once the task has used ``cpu_s`` seconds of CPU (``ITIMER_PROF``, whose
    ``SIGPROF`` ends the process: `_worker_init`)."""
    if _WORKER_JUDGE is None:
        raise RuntimeError("math-verify is not loaded in this worker")
    c0 = time.process_time()
    signal.setitimer(signal.ITIMER_PROF, cpu_s)
    try:
        verdict = _WORKER_JUDGE(gold, pred)
    except Exception:  # math-verify failed on this pair: not equivalent
        verdict = False
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    return verdict, time.process_time() - c0


class _Pool:
    """This process's workers (see the module's docstring)."""

    def __init__(self, workers: int, load_here: bool = True) -> None:
        # lazy: pebble's pool is loaded by a process that starts grader workers, not by every importer of the grader
        from pebble import ProcessPool

        # shutdown() first at exit, before the handlers pebble and multiprocessing registered on import (atexit runs
        # last-in first-out): multiprocessing's would otherwise wait for our idle workers forever.
        atexit.unregister(shutdown)
        atexit.register(shutdown)
        if load_here:  # math-verify loaded and warmed here, inherited by every worker forked from now on
            if judge.inprocess_judge() is None:
                raise RuntimeError("math-verify cannot be imported")
        elif importlib.util.find_spec("math_verify") is None:  # each worker loads it (_worker_init)
            raise RuntimeError("math-verify is not installed")
        self.pid = os.getpid()
        self.ready = False  # a worker has answered
        self.progress = time.monotonic()  # when a task of this pool last finished (or the pool started)
        self.longest_guard = 0.0  # the longest hang guard of a task sent to this pool
        self.pool = ProcessPool(
            max_workers=workers, initializer=_worker_init, context=multiprocessing.get_context("fork")
        )
        counters.count("pool_starts")

    @property
    def broken(self) -> bool:
        return not self.pool.active

    def _progressed(self, _future) -> None:
        self.progress = time.monotonic()

    def submit(self, gold: str, pred: str, budget: float):
        """Send one pair to a worker now and return its future; :meth:`outcome` turns it into the verdict. The
        worker is ended once the task has used ``budget`` CPU seconds, or run :func:`hang_guard` wall seconds."""
        guard = hang_guard(budget)
        self.longest_guard = max(self.longest_guard, guard)
        future = self.pool.schedule(verify_in_worker, (gold, pred, budget), timeout=guard)
        future.add_done_callback(self._progressed)
        return future

    def outcome(self, future, budget: float) -> tuple[bool | None, str]:
        """``(verdict, "math_verify")`` of a submitted pair, or ``(None, why not)``: ``timeout`` (the worker spent
        the CPU budget and was ended), ``hung`` (it ran :func:`hang_guard` wall seconds), ``unavailable`` (no task
        of the pool finished for the longest guard plus the workers' start-up while this one waited), ``error`` (the
        worker
        died otherwise). Waits as long as the pool makes progress, whatever the load (the module's docstring)."""
        from pebble import ProcessExpired  # lazy: as in __init__ (a pool exists when this runs)

        stall = self.longest_guard + STARTUP_TIMEOUT_S  # a live pool ends some task within this
        waiting_since = time.monotonic()
        while True:
            try:
                verdict, cpu_s = future.result(timeout=_POLL_S)
                break
            except WaitTimeout:  # pebble's task timeout (the future is done) or this poll (it is not)
                if future.done():
                    return None, "hung"
                if time.monotonic() - max(self.progress, waiting_since) > stall:
                    future.cancel()  # a running task is stopped with its worker, a queued one never starts
                    return None, "unavailable"
            except ProcessExpired as died:
                return None, "timeout" if died.exitcode == CPU_BUDGET_EXIT else "error"
            except CancelledError:
                return None, "error"
        self.ready = True
        counters.note_cpu(cpu_s, budget)
        return bool(verdict), "math_verify"

    def verify(self, gold: str, pred: str, budget: float) -> tuple[bool | None, str]:
        """:meth:`submit` then :meth:`outcome`: the verdict within ``budget`` CPU seconds, or ``(None, why not)``."""
        return self.outcome(self.submit(gold, pred, budget), budget)

    def warm(self, timeout_s: float) -> bool:
        try:
            self.ready = bool(self.pool.schedule(_worker_ping).result(timeout=timeout_s))
        except Exception:
            return False
        return self.ready

    def close(self) -> None:
        self.pool.stop()
        self.pool.join(timeout=5)


_POOL: _Pool | None = None
_LOCK = threading.Lock()
_FAILURES = 0  # pools that broke before answering
_LOAD_HERE = True  # False once start_workers ran in this process: its pools, restarts too, load math-verify in workers


def get_pool() -> _Pool | None:
    """This process's worker pool (started on first use, restarted if it broke), or ``None`` where worker processes
    cannot be used."""
    global _POOL, _FAILURES
    with _LOCK:
        if _POOL is not None and _POOL.pid == os.getpid() and not _POOL.broken:
            return _POOL
        if _POOL is not None and _POOL.pid == os.getpid():
            _FAILURES += 0 if _POOL.ready else 1
            _POOL.close()
        _POOL = None
        if _FAILURES >= _MAX_POOL_FAILURES:
            return None
        try:
            _POOL = _Pool(config.current().workers, _LOAD_HERE)
        except Exception:  # e.g. pebble missing, processes refused
            log.debug("grader worker pool failed to start", exc_info=True)
            _FAILURES = _MAX_POOL_FAILURES
            return None
        return _POOL


def shutdown() -> None:
    """Stop the worker processes (they are restarted on demand).  Registered with ``atexit`` when a pool starts."""
    global _POOL, _FAILURES
    with _LOCK:
        pool, _POOL = _POOL, None
        _FAILURES = 0
    if pool is not None and pool.pid == os.getpid():
        try:
            pool.close()
        except Exception:
            log.debug("grader worker pool did not stop cleanly", exc_info=True)


def warm(timeout_s: float = STARTUP_TIMEOUT_S) -> bool:
    """Start the workers now; ``True`` when math-verify is usable (a worker answered, or it runs in-process)."""
    try:
        if config.current().isolation == "process":
            pool = get_pool()
            if pool is not None and pool.warm(timeout_s):
                return True
        return judge.inprocess_judge() is not None
    except Exception:
        return False


def start_workers(workers: int | None = 1) -> None:
    """Start this process's workers now, without loading math-verify here: each worker loads it itself while the
    caller goes on. Call it first thing in a job (`python -m bandpo.train`, `python -m bandpo.score`), before
    its heavy imports; :func:`warm` then waits for a worker. ``workers``: how many (default one: a job's grading
    overlaps other work, and a second worker, which loads math-verify too, made no training step faster), unless
    ``BANDPO_GRADER_WORKERS`` is set; ``None`` keeps the configured number. Nothing happens where workers are not
    used (``isolation="inprocess"``) or are already running."""
    global _LOAD_HERE
    try:
        if _POOL is not None and _POOL.pid == os.getpid():  # running: its worker count stays what it was started with
            return
        if workers is not None and "BANDPO_GRADER_WORKERS" not in os.environ:
            config.update(workers=workers)
        if config.current().isolation != "process":
            return
        _LOAD_HERE = False
        pool = get_pool()
        if pool is not None:
            pool.pool.schedule(_worker_ping)  # pebble forks its workers at the first task
    except Exception:  # the pool is started again, the usual way, at first use
        log.debug("grader workers did not start early", exc_info=True)


class Started:
    """A pair sent to a worker ahead of its verdict (:func:`start`); :meth:`outcome` waits for it."""

    def __init__(self, pool: _Pool, future, budget: float) -> None:
        self.pool, self.future, self.budget = pool, future, budget

    def outcome(self) -> tuple[bool | None, str]:
        """As :func:`verify_bounded`, for the pair sent earlier (its CPU budget counts from its start in a
        worker; the wait lasts as long as the pool makes progress)."""
        try:
            return self.pool.outcome(self.future, self.budget)
        except Exception:  # the pool broke (e.g. all workers died): the next call starts a new one
            log.debug("grader worker pool failed", exc_info=True)
            return None, "error"

    def cancel(self) -> None:
        """Forget the pair: a task no worker has started never starts; a running one is left to finish."""
        if not self.future.running():
            self.future.cancel()


def start(gold: str, pred: str, budget: float) -> Started | None:
    """Send the pair to a worker now, so that its verdict is computed while the caller goes on; ``None`` where
    workers cannot be used (the caller then asks :func:`verify_bounded`, in its main thread)."""
    pool = get_pool() if config.current().isolation == "process" else None
    if pool is None:
        return None
    try:
        return Started(pool, pool.submit(gold, pred, budget), budget)
    except Exception:  # the pool broke: the caller asks verify_bounded, which starts a new one
        log.debug("grader worker pool failed", exc_info=True)
        return None


def verify_bounded(gold: str, pred: str, budget: float) -> tuple[bool | None, str]:
    """math-verify's verdict within ``budget`` CPU seconds: ``(True/False, "math_verify")`` or ``(None, why not)``,
    in a worker, or in this process where workers cannot be used."""
    pool = get_pool() if config.current().isolation == "process" else None
    if pool is not None:
        try:
            return pool.verify(gold, pred, budget)
        except Exception:  # the pool broke (e.g. all workers died): the next call starts a new one
            log.debug("grader worker pool failed", exc_info=True)
            return None, "error"
    return judge.verify_inprocess(gold, pred, budget)


def _after_fork_in_child() -> None:
    """In a forked child: forget the parent's pool (its workers and threads belong to the parent) and lock."""
    global _POOL, _LOCK, _LOAD_HERE
    pebble_pools = sys.modules.get("pebble.pool.process")
    if _POOL is not None and pebble_pools is not None:
        # pebble stops every worker of "its" pools at interpreter exit; in a forked child those are the parent's
        # workers, not the child's to stop (the child's own pool, if it starts one, is stopped by shutdown()).
        atexit.unregister(getattr(pebble_pools, "interpreter_shutdown", lambda: None))
    _LOCK = threading.Lock()
    _POOL = None
    _LOAD_HERE = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
