"""math-verify worker processes: a ``pebble`` process pool whose workers can be killed mid-computation.

Workers are forks of the caller, made after math-verify was imported and warmed up there, so that a worker (or a
replacement) is ready at once.  A job whose start-up is long can instead start its workers first
(:func:`start_workers`, before it imports torch): each worker then loads math-verify itself, on another core, while
the caller goes on (a second or so off a training job's start-up); the caller never loads it, and a replacement
worker loads it too before its first task (an item that meets a worker still loading is graded again with the
second budget, as for any first-budget overrun).

``fork`` rather than ``spawn`` / ``forkserver``: those run the caller's ``__main__`` module again in every worker (a
training script's imports, or all of an unguarded script; impossible for ``python - <script``). A worker runs
nothing but math-verify on two strings. A task that overruns its budget is cancelled and pebble ends its worker
(which also ends C-level work no signal handler can interrupt, such as a huge integer power) and forks a
replacement, while the other workers keep answering. This works the same in the main thread, in other threads, in a
forked child (which starts its own pool) and inside lm-eval, and leaves the caller's ``SIGALRM`` alone.

The task a worker runs is this module's :func:`verify_in_worker`, looked up when each task is scheduled: a test
replaces it (``monkeypatch.setattr(pool, "verify_in_worker", fn)``, ``fn`` a module-level function the worker can
import) to make a worker hang or run slowly.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import math
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
_CPU_SLACK_S = 5  # CPU seconds a task may use beyond its budget before the kernel ends its worker


def _arm_cpu_guard(seconds: int) -> None:
    """Let the kernel end this worker (SIGXCPU) if one task burns ``seconds`` of CPU: the pool stops it sooner,
    but if the calling process itself died mid-task nobody else would stop a C-level computation."""
    try:
        import resource  # lazy, inside the try: Unix only (elsewhere the worker runs without this guard)

        usage = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(usage.ru_utime + usage.ru_stime) + seconds
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except Exception:
        pass


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
    """Initializer of each pool worker (a fork of the caller): quiet output, memory cap, math-verify ready."""
    global _WORKER_JUDGE
    # pebble installs a Python-level SIGTERM handler, which cannot run while math-verify is inside a C-level
    # computation (a huge integer power); the default action ends the process at once when the pool stops it.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # anything a library prints goes nowhere
    sys.stdout = open(os.devnull, "w")
    logging.disable(logging.CRITICAL)
    _limit_worker_memory()
    _WORKER_JUDGE = judge.inprocess_judge()  # the parent's (warm before the fork), or loaded here: start_workers


def _worker_ping() -> bool:
    return _WORKER_JUDGE is not None


def verify_in_worker(gold: str, pred: str, cpu_s: int) -> bool:
    """One math-verify verdict, in a pool worker (pebble runs it in the worker's main thread); the worker is
    ended by the kernel if the task uses more than ``cpu_s`` seconds of CPU."""
    _arm_cpu_guard(cpu_s)
    if _WORKER_JUDGE is None:
        raise RuntimeError("math-verify is not loaded in this worker")
    try:
        return _WORKER_JUDGE(gold, pred)
    except Exception:  # math-verify failed on this pair: not equivalent
        return False


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
        self.pool = ProcessPool(
            max_workers=workers, initializer=_worker_init, context=multiprocessing.get_context("fork")
        )
        counters.count("pool_starts")

    @property
    def broken(self) -> bool:
        return not self.pool.active

    def submit(self, gold: str, pred: str, budget: float):
        """Send one pair to a worker now and return its future; :meth:`outcome` turns it into the verdict. The
        task is ended with its worker if it runs longer than ``budget`` seconds once a worker has started it."""
        cpu_s = math.ceil(budget) + _CPU_SLACK_S
        return self.pool.schedule(verify_in_worker, (gold, pred, cpu_s), timeout=budget)

    def outcome(self, future, budget: float) -> tuple[bool | None, str]:
        """``(verdict, "math_verify")`` of a submitted pair, or ``(None, why not)``: ``timeout`` (the worker
        overran the budget and is ended), ``unavailable`` (no worker started it within ``budget`` seconds of this
        call), ``error`` (the worker died)."""
        from pebble import ProcessExpired  # lazy: as in __init__ (a pool exists when this runs)

        # The first task of a pool also waits for the workers to start (once, beyond the item's budget).
        wait = budget if self.ready else budget + STARTUP_TIMEOUT_S
        try:
            verdict = bool(future.result(timeout=wait))
        except WaitTimeout:  # pebble's task timeout (the future is done) or the wait above (it is not)
            started = future.done() or future.running()
            future.cancel()  # a running task is stopped with its worker, a queued one never starts
            return None, "timeout" if started else "unavailable"
        except (ProcessExpired, CancelledError):
            return None, "error"
        self.ready = True
        return verdict, "math_verify"

    def verify(self, gold: str, pred: str, budget: float) -> tuple[bool | None, str]:
        """:meth:`submit` then :meth:`outcome`: the verdict within ``budget`` seconds, or ``(None, why not)``."""
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
        """As :func:`verify_bounded`, for the pair sent earlier; the ``budget`` seconds of waiting for a worker to
        start it count from this call (the task's own budget counts from its start, in the worker)."""
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
    """math-verify's verdict within ``budget`` seconds: ``(True/False, "math_verify")`` or ``(None, why not)``, in a
    worker, or in this process where workers cannot be used."""
    pool = get_pool() if config.current().isolation == "process" else None
    if pool is not None:
        try:
            return pool.verify(gold, pred, budget)
        except Exception:  # the pool broke (e.g. all workers died): the next call starts a new one
            log.debug("grader worker pool failed", exc_info=True)
            return None, "error"
    return judge.verify_inprocess(gold, pred, time.monotonic() + budget)


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
