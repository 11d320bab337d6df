"""math-verify's judgement (``parse`` + ``verify``), and the in-process fallback that bounds it with an alarm.

The judge runs in the pool's worker processes (`bandpo.grader.pool`); where worker processes cannot be used
(``isolation="inprocess"``, or the pool failed to start), it runs in the calling process under a CPU-time
``setitimer`` alarm, in the main thread only (elsewhere the item is ``unavailable``: only the fast structural
verdicts decide).

A verdict is a function of the two answers alone, not of the process that computes it (issue #59)
-------------------------------------------------------------------------------------------------
sympy's assumption system (``is_zero``, ``is_finite``, ...) asks the facts it does not know yet in a random order:
``sympy.core.assumptions._ask`` shuffles them with a generator of its own, seeded from ``os.urandom`` when sympy is
imported. Where sympy's rules for a fact are not consistent with each other the answer depends on that order: the
completion ``4x=-7+7=0, x=0/4=0. \\boxed{0:xed{0}`` against the reference ``0`` parses as ``0/(x*E*d*0)`` (``:``
is a ratio); ``simplify(0 - 0/(x*E*d*0))`` first asks ``is_zero`` of that unevaluated product, gets 0 in one order
and NaN in another, and math-verify's verdict is ``True`` or ``False``: one draw per worker process (each loads
sympy itself), moved further by everything the worker judged before (facts sympy keeps on the objects of its
cache, the parse caches, the generator's position). So half the fresh workers scored that completion 1 and half 0,
idle or loaded, with no retry and no timeout. Each call of a :class:`Judge` therefore starts from the same state:
the facts are asked in a fixed order (`_in_fixed_order`), sympy's cache and math-verify's caches of parsed answers
are emptied, sympy's generators are seeded (and left afterwards as the caller had them) and its ``Dummy`` symbols
are numbered from the same base. The verdict then depends on the two answers and the packages' versions, not on the
worker, the items judged before it, their order, the load or the machine. The fixed order also takes Python's hash
seed out of those queries (the shuffled list came from a set); sympy iterates sets elsewhere too, so every job of the
workflow still runs with ``PYTHONHASHSEED=0``.
"""

from __future__ import annotations

import importlib
import logging
import signal
import threading
from typing import Any


class _QuietTimeoutWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


_WARMUP = (
    ("\\frac{1}{2}", "0.5"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
    ("[1,3)", "(1,3]"),
    ("(-\\infty, 2]", "(-\\infty,2]"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("(x+1)^2", "x^2+2x+1"),
    ("(\\frac{1}{2}, -3)", "(0.5,-3)"),
    ("\\frac{3\\pi}{4}", "3\\pi/4"),
    ("5\\%", "5"),
    ("\\text{(B)}", "B"),
)


_SYMPY_SEED = 0
# sympy numbers its Dummy symbols from a base it draws per process (1e6 .. 9e6): ours lies beyond any it draws, so
# that a Dummy of a verdict never equals one of the caller's (the in-process judge)
_DUMMY_BASE = 10**8


def _in_fixed_order(facts: list) -> None:
    """Replaces sympy's shuffle of the facts its assumption system asks next (``sympy.core.assumptions``): the same
    order whatever the generator's state."""
    facts.sort()


def _clearable_parser_caches() -> list:
    """math-verify's caches of parsed answers (functools caches of ``math_verify.parser``; not its compiled regular
    expressions, ``lazy_*``, which are the same for every answer)."""
    import math_verify.parser as parser  # lazy: math-verify loads where verdicts are made (`Judge`)

    return [
        f
        for name, f in vars(parser).items()
        if callable(getattr(f, "cache_clear", None)) and not name.startswith("lazy_")
    ]


class Judge:
    """math-verify's parse + verify, each call from the same state of sympy (see the module's docstring).
    math-verify's own ``signal.alarm`` timeouts are off (``timeout_seconds=None``): they count whole seconds and turn
    a timeout into a ``False`` verdict, where the caller's bound is finer and reports a timeout as such."""

    def __init__(self) -> None:
        # lazy: math-verify and sympy (seconds of import) load in the process that judges, a grader worker or an
        # in-process judge, not in every process that imports the grader (bandpo.grader.pool.start_workers)
        import sympy.core.random as sympy_random
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
        from sympy import Dummy
        from sympy.core.cache import clear_cache

        for name in ("math_verify", "math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).addFilter(_QuietTimeoutWarning())
        self._parse = parse
        self._verify = verify
        self._config = [LatexExtractionConfig(), ExprExtractionConfig()]
        # the module: ``import sympy.core.assumptions`` names the function sympy.core exports under that name
        assumptions = importlib.import_module("sympy.core.assumptions")
        self._assumptions = assumptions if hasattr(assumptions, "shuffle") else None
        self._clear = [clear_cache, *(f.cache_clear for f in _clearable_parser_caches())]
        self._rngs = [getattr(sympy_random, n) for n in ("rng", "_assumptions_rng") if hasattr(sympy_random, n)]
        self._dummy = Dummy

    def parsed(self, answer: str) -> list:
        return self._parse("$" + answer + "$", extraction_config=self._config, parsing_timeout=None)

    def __call__(self, gold: str, pred: str) -> bool:
        """The verdict, from the same state of sympy whatever ran before; sympy's generators, Dummy numbering and
        shuffle are left as they were (its cache stays emptied): the in-process judge runs in the caller's process."""
        for clear in self._clear:
            clear()
        saved = (
            [rng.getstate() for rng in self._rngs],
            self._dummy._count,
            self._dummy._base_dummy_index,
            self._assumptions.shuffle if self._assumptions is not None else None,
        )
        try:
            for rng in self._rngs:
                rng.seed(_SYMPY_SEED)
            self._dummy._count, self._dummy._base_dummy_index = 0, _DUMMY_BASE
            if self._assumptions is not None:
                self._assumptions.shuffle = _in_fixed_order
            g = self.parsed(gold)
            p = self.parsed(pred)
            if not g or not p:
                return False
            return bool(self._verify(g, p, timeout_seconds=None))
        finally:
            states, self._dummy._count, self._dummy._base_dummy_index, shuffle = saved
            for rng, state in zip(self._rngs, states, strict=True):
                rng.setstate(state)
            if self._assumptions is not None:
                self._assumptions.shuffle = shuffle

    def warm_up(self) -> None:
        for gold, pred in _WARMUP:
            try:
                self(gold, pred)
            except Exception:
                pass


_INPROCESS: Judge | None = None


def inprocess_judge() -> Judge | None:
    """This process's judge (math-verify imported and warmed up on first use, a one-off second or two), or
    ``None`` when math-verify cannot be imported."""
    global _INPROCESS
    if _INPROCESS is None:
        try:
            judge = Judge()
        except Exception:
            return None
        judge.warm_up()  # first uses of sympy's code paths are slow: not inside an item's budget
        _INPROCESS = judge
    return _INPROCESS


class Alarm(BaseException):
    """Raised by the ``SIGPROF`` handler of the in-process fallback (a ``BaseException`` so that no library's
    ``except Exception`` swallows it)."""


def _raise_alarm(signum: int, frame: Any) -> None:
    raise Alarm()


def verify_inprocess(gold: str, pred: str, budget: float) -> tuple[bool | None, str]:
    """math-verify's verdict in this process, within ``budget`` seconds of this process's CPU time (an
    ``ITIMER_PROF`` alarm: CPU of all the process's threads, so work the caller runs in other threads meanwhile counts
    too; the worker pool, `bandpo.grader.pool`, counts the judge's alone): ``(verdict, "math_verify")`` or ``(None,
    "timeout" | "unavailable")``.  Only in the main thread, and only when the caller's own CPU-time timer is not set
    (it is left alone).  A Python-level handler cannot interrupt C-level work: the in-process judge is the fallback
    where worker processes cannot be used."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return None, "unavailable"
    judge = inprocess_judge()  # one-off import, outside the alarm
    if judge is None:
        return None, "unavailable"
    if signal.getitimer(signal.ITIMER_PROF)[0] > 0:  # the caller uses the timer: do not interfere
        return None, "unavailable"
    previous = signal.signal(signal.SIGPROF, _raise_alarm)
    try:
        try:
            signal.setitimer(signal.ITIMER_PROF, budget)
            verdict = judge(gold, pred)
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
    except Alarm:
        return None, "timeout"
    except Exception:
        return False, "math_verify"
    finally:
        signal.signal(signal.SIGPROF, previous)
    return verdict, "math_verify"
