"""What the grader did: process-wide counters (:func:`stats`) and counters over a block (:func:`counting`)."""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

SLOW = ("math_verify", "timeout", "hung", "unavailable", "error")  # methods of items that needed math-verify
NOT_DECIDED = ("timeout", "hung", "unavailable", "error")  # methods that are not verdicts: the item scores 0

_STATS: Counter[str] = Counter()
_SLOWEST: dict[str, float] = {}  # the verdict of this process that took the most CPU seconds: cpu_s, budget
_LOCK = threading.Lock()


def count(key: str, n: int = 1) -> None:
    with _LOCK:
        _STATS[key] += n


def tally(method: str, n: int = 1) -> None:
    """Count ``n`` graded items decided by ``method`` (``rejected:<why>`` counts as ``rejected``)."""
    method = method.split(":")[0]
    with _LOCK:
        _STATS["items"] += n
        _STATS[method] += n
        if method in SLOW:
            _STATS["slow"] += n


def note_cpu(cpu_s: float, budget: float) -> None:
    """A worker's verdict took ``cpu_s`` CPU seconds of its ``budget`` (see :func:`slowest_verdict`)."""
    with _LOCK:
        if cpu_s > _SLOWEST.get("cpu_s", -1.0):
            _SLOWEST.update(cpu_s=cpu_s, budget=budget)


def slowest_verdict() -> dict[str, float]:
    """``{"cpu_s", "budget"}`` of the verdict of this process's workers that took the most CPU seconds (empty before
    the first): how close the hardest item came to its budget."""
    with _LOCK:
        return dict(_SLOWEST)


def stats() -> dict[str, int]:
    """Counters since start-up: ``items`` graded, how many each method decided (``exact``, ``numeric``,
    ``math_verify``, ``timeout`` (a worker spent the CPU budget), ``hung`` (a worker task ran past the wall-clock
    hang guard), ...), ``slow`` (items that needed math-verify), ``retried`` (items graded a second time, with the
    larger budget, after overrunning the first), ``cache_hits`` and ``pool_starts``."""
    with _LOCK:
        return dict(_STATS)


class Counts:
    """Grading counters from its creation to :meth:`stop` (or over a ``with`` block, see :func:`counting`)."""

    def __init__(self) -> None:
        self._start = stats()
        self.counts: dict[str, int] = {}

    def stop(self) -> None:
        end = stats()
        self.counts = {k: v - self._start.get(k, 0) for k, v in end.items() if v - self._start.get(k, 0)}

    def metrics(self) -> dict[str, float]:
        """``grader_items``, ``grader_slow_frac`` (share that needed math-verify), ``grader_retries`` (items that
        overran the first budget and were graded again) and ``grader_timeouts`` (items not decided even then: a
        worker spent the second CPU budget or ran past the hang guard, the pool made no progress, or a worker died;
        each scored 0)."""
        c = self.counts
        items = c.get("items", 0)
        return {
            "grader_items": items,
            "grader_slow_frac": c.get("slow", 0) / items if items else 0.0,
            "grader_retries": c.get("retried", 0),
            "grader_timeouts": sum(c.get(k, 0) for k in NOT_DECIDED),
        }


@contextmanager
def counting() -> Iterator[Counts]:
    """``with counting() as c: ...`` then ``c.counts`` / ``c.metrics()``: what the grader did inside the block
    (in this process, all threads included)."""
    c = Counts()
    try:
        yield c
    finally:
        c.stop()


def _after_fork_in_child() -> None:
    global _LOCK
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
