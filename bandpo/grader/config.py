"""The grader's settings: grading mode, time budgets, worker processes, isolation.

The environment is read lazily: once per process, by the first call that needs a setting (grading, extraction
without an explicit mode, :func:`bandpo.grader.warmup`, :func:`bandpo.grader.grader_info`), never at import.
``bandpo.grader.configure`` overrides it afterwards; a forked child inherits its parent's settings.

* ``BANDPO_GRADER_MODE``: one of :data:`MODES` (default ``lenient``); an unknown mode is an error at first use
  (scores must not silently come from another rule);
* ``BANDPO_GRADER_TIMEOUT_S``: the first per-item budget in CPU seconds of the judging process (default 0.8);
* ``BANDPO_GRADER_RETRY_FACTOR``: the budget of the second attempt of an item that overran the first, as a
  multiple of the first (default 30);
* ``BANDPO_GRADER_HANG_GUARD_S``: wall seconds after which a worker task is taken as hung (default 600; at least
  twice the task's budget), a guard against a hung worker only (`bandpo.grader.pool`);
* ``BANDPO_GRADER_WORKERS``: math-verify worker processes (default 2; a training or scoring job that starts its
  workers first, `bandpo.grader.start_workers`, uses 1 unless this is set);
* ``BANDPO_GRADER_ISOLATION``: ``process`` (worker pool, the default) or ``inprocess`` (an alarm in the main thread).

Malformed numbers are ignored (the default stays).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

MODES = ("lenient", "strict-answer-line", "math-dapo", "math-dapo-paper", "math-boxed")
"""Grading modes: which part of a response is its final answer, and how it is compared with the reference.

``lenient`` (the default): the last ``\\boxed{}`` (also a truncated one) or ``Answer:`` / ``The final answer is`` /
``####`` line, whichever comes last.  ``strict-answer-line``: only the last ``Answer:`` line (a ``\\boxed{}`` on
that line is unwrapped); no ``\\boxed{}`` elsewhere counts.  Both compare by normalisation, exact shortcuts and
math-verify equivalence (``0.5`` = ``1/2`` = ``\\frac{1}{2}``): more lenient than the paper's rule.
``math-dapo``: verl 0.9.1's ``math_dapo.compute_score``: the last ``Answer:`` line of the last 300 characters,
Minerva-normalised, equal as a string to the normalised reference (a ``\\boxed{}`` in the last 100 characters only
when there is no such line); no math-verify (`bandpo.grader.dapo`).  ``math-dapo-paper``: the paper's training
reward and validation rule, the ``math_dapo`` of the authors' verl fork: the same without the ``\\boxed{}``
fallback (the ``Answer:`` line only).  ``math-boxed``: verl's ``\\boxed{}`` MATH rule
(``math_reward.compute_score``, run by verl's own functions): the last ``\\boxed{}`` of the whole response, equal
to the reference after the Hendrycks MATH normalisation; the rule the authors' AMC23 validation rows are tagged for.
"""
ISOLATIONS = ("process", "inprocess")
DEFAULT_TIMEOUT_S = 0.8  # first per-item budget: most items that need math-verify take a few ms
DEFAULT_RETRY_FACTOR = 30.0  # second attempt: 30x the first budget (24 CPU seconds by default)
DEFAULT_HANG_GUARD_S = 600.0  # 25x the default second budget in wall seconds: a worker starved 25-fold still finishes


@dataclass
class Settings:
    timeout_s: float = DEFAULT_TIMEOUT_S
    retry_factor: float = DEFAULT_RETRY_FACTOR
    hang_guard_s: float = DEFAULT_HANG_GUARD_S  # wall seconds: a worker task running longer is ended as hung
    workers: int = 2  # math-verify worker processes
    mode: str = "lenient"  # one of MODES
    isolation: str = "process"  # "process" (worker pool) | "inprocess" (alarm in the main thread)


def check_mode(mode: str, where: str = "mode") -> str:
    if mode not in MODES:
        raise ValueError(f"{where}: unknown grader mode {mode!r}; choose one of {', '.join(MODES)}")
    return mode


def _positive(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


def from_env() -> Settings:
    """Defaults overridden by the ``BANDPO_GRADER_*`` variables (see the module's docstring)."""
    s = Settings()
    s.timeout_s = _positive("BANDPO_GRADER_TIMEOUT_S", s.timeout_s)
    s.retry_factor = max(1.0, _positive("BANDPO_GRADER_RETRY_FACTOR", s.retry_factor))
    s.hang_guard_s = _positive("BANDPO_GRADER_HANG_GUARD_S", s.hang_guard_s)
    try:
        s.workers = max(1, int(os.environ.get("BANDPO_GRADER_WORKERS", s.workers)))
    except ValueError:
        pass
    s.mode = check_mode(os.environ.get("BANDPO_GRADER_MODE") or s.mode, "BANDPO_GRADER_MODE")
    isolation = os.environ.get("BANDPO_GRADER_ISOLATION", s.isolation)
    if isolation in ISOLATIONS:
        s.isolation = isolation
    if os.name != "posix":
        s.isolation = "inprocess"
    return s


_SETTINGS: Settings | None = None
_LOCK = threading.Lock()


def current() -> Settings:
    """This process's settings: read from the environment on first use, then as :func:`update` left them."""
    global _SETTINGS
    settings = _SETTINGS
    if settings is None:
        with _LOCK:
            if _SETTINGS is None:
                _SETTINGS = from_env()
            settings = _SETTINGS
    return settings


def update(
    *,
    timeout_s: float | None = None,
    retry_factor: float | None = None,
    hang_guard_s: float | None = None,
    workers: int | None = None,
    mode: str | None = None,
    isolation: str | None = None,
) -> bool:
    """Change settings (all checked before any is changed); ``True`` when the worker pool must be restarted."""
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError("timeout_s must be positive")
    if retry_factor is not None and not retry_factor >= 1:
        raise ValueError("retry_factor must be >= 1")
    if hang_guard_s is not None and not hang_guard_s > 0:
        raise ValueError("hang_guard_s must be positive")
    if workers is not None and workers < 1:
        raise ValueError("workers must be >= 1")
    if isolation is not None and isolation not in ISOLATIONS:
        raise ValueError(f"isolation must be one of {', '.join(ISOLATIONS)}")
    if mode is not None:
        check_mode(mode)
    s = current()
    restart = (workers is not None and workers != s.workers) or (isolation is not None and isolation != s.isolation)
    if timeout_s is not None:
        s.timeout_s = float(timeout_s)
    if retry_factor is not None:
        s.retry_factor = float(retry_factor)
    if hang_guard_s is not None:
        s.hang_guard_s = float(hang_guard_s)
    if workers is not None:
        s.workers = int(workers)
    if isolation is not None:
        s.isolation = isolation
    if mode is not None:
        s.mode = mode
    return restart


def _after_fork_in_child() -> None:
    global _LOCK
    _LOCK = threading.Lock()  # another thread of the parent may have held it


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
