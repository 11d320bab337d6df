"""math-verify's judgement (``parse`` + ``verify``), and the in-process fallback that bounds it with an alarm.

The judge runs in the pool's worker processes (`bandpo.grader.pool`); where worker processes cannot be used
(``isolation="inprocess"``, or the pool failed to start), it runs in the calling process under a ``setitimer``
alarm, in the main thread only (elsewhere the item is ``unavailable``: only the fast structural verdicts decide).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import OrderedDict
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


class Judge:
    """math-verify's parse + verify, with a small cache of parsed answers.  math-verify's own ``signal.alarm``
    timeouts are off (``timeout_seconds=None``): they count whole seconds and turn a timeout into a ``False``
    verdict, where the caller's bound is finer and reports a timeout as such."""

    def __init__(self) -> None:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

        for name in ("math_verify", "math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).addFilter(_QuietTimeoutWarning())
        self._parse = parse
        self._verify = verify
        self._config = [LatexExtractionConfig(), ExprExtractionConfig()]
        self._cache: OrderedDict[str, list] = OrderedDict()

    def parsed(self, answer: str) -> list:
        hit = self._cache.get(answer)
        if hit is not None:
            self._cache.move_to_end(answer)
            return hit
        result = self._parse("$" + answer + "$", extraction_config=self._config, parsing_timeout=None)
        self._cache[answer] = result
        if len(self._cache) > 1024:
            self._cache.popitem(last=False)
        return result

    def __call__(self, gold: str, pred: str) -> bool:
        g = self.parsed(gold)
        p = self.parsed(pred)
        if not g or not p:
            return False
        return bool(self._verify(g, p, timeout_seconds=None))

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
    """Raised by the ``SIGALRM`` handler of the in-process fallback (a ``BaseException`` so that no library's
    ``except Exception`` swallows it)."""


def _raise_alarm(signum: int, frame: Any) -> None:
    raise Alarm()


def verify_inprocess(gold: str, pred: str, deadline: float) -> tuple[bool | None, str]:
    """math-verify's verdict in this process, under an alarm at ``deadline`` (``time.monotonic()``):
    ``(verdict, "math_verify")`` or ``(None, "timeout" | "unavailable")``.  Only in the main thread, and only when
    the caller's own alarm is not set (it is left alone)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return None, "unavailable"
    judge = inprocess_judge()  # one-off import, outside the alarm
    if judge is None:
        return None, "unavailable"
    if signal.getitimer(signal.ITIMER_REAL)[0] > 0:  # the caller uses the alarm: do not interfere
        return None, "unavailable"
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return None, "timeout"
    previous = signal.signal(signal.SIGALRM, _raise_alarm)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, remaining)
            verdict = judge(gold, pred)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Alarm:
        return None, "timeout"
    except Exception:
        return False, "math_verify"
    finally:
        signal.signal(signal.SIGALRM, previous)
    return verdict, "math_verify"
