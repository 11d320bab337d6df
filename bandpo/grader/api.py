"""The public grading API: ``grade`` and friends, the verdict cache, time budgets, provenance.

Time budgets in CPU seconds, and why the machine's load never decides a score (issue #72)
--------------------------------------------------------------------------------------------------
An item that needs math-verify gets a first budget (``timeout_s``, 0.8 s by default) of the judging worker's own CPU
time (`bandpo.grader.pool`: the kernel ends the worker when the task has spent it), not of wall time: another
process on the machine slows a worker down but does not make it spend more CPU, so a loaded machine grades as an
idle one, and the caller waits for a verdict as long as the workers make progress. Nearly all items take a few ms.
One that spends its first budget is graded again with ``retry_factor`` times it (30x: 24 CPU seconds by default):
``grade_many`` (and :meth:`Grading.results`, for the items asked for) does it after the first attempts, one item at
a time; ``grade`` / ``grade_detailed`` at once. Only an item that spends the second budget too is scored 0 and
counted as a timeout (``grader_timeouts``); first-budget overruns are counted as ``grader_retries``. What is left to
the machine: a CPU slower than the one that graded a published run needs more CPU seconds for the same work, so an
item within a factor of the CPUs' speed of its budget could score otherwise there (benchmarks/README.md,
``bench_grader.py --margin``, measures how far the hardest known items are from it).

A deterministic bound (counting sympy's operations) would not depend on the CPU either, but math-verify offers no
such count, and the answers that can run away (towers of powers, huge factorials) spend their time inside single
C-level big-integer operations that no Python-level counter can interrupt; a CPU-time timer whose signal ends the
worker does.  The prechecks (`bandpo.grader.precheck`) refuse the known runaway shapes up front.  A wall-clock guard
(``hang_guard_s``, 600 s) only ends a worker that hangs; such an item is counted as ``hung``, and the caller gives up
on a pool that finished no task for that long (``unavailable``): both score 0 and count as timeouts.  A pair that
spent a budget is remembered (with that budget) so that it does not cost it again in this process; hangs and waits
are never remembered.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bandpo.grader import config, counters, dapo, judge, pool
from bandpo.grader.extract import MAX_EXTRACTED_CHARS, boxed_math_answer, extract_answer, reference_answer, to_text
from bandpo.grader.normalise import normalise, structural_verdict
from bandpo.grader.precheck import precheck
from bandpo.grader.version import (
    BANDPO_VERSION,
    GRADER_NAME,
    GRADER_VERSION,
    MATH_VERIFY_VERSION,
    RULES_REVISION,
    dist_version,
)

log = logging.getLogger("bandpo.grader")

_VERDICT_CACHE_SIZE = 8192
_HARD_TIMEOUT_MEMO_SIZE = 1024


@dataclass(frozen=True)
class GradeResult:
    """A score with how it was decided.  ``method`` is one of: ``exact``, ``numeric``, ``math_verify``,
    ``math_dapo`` (mode ``math-dapo``: verl's string comparison, either verdict), ``no_answer``, ``no_reference``,
    ``rejected:<why>``, ``timeout``, ``unavailable``, ``error``.  The last three are not verdicts (the item scores 0
    and is counted, see :func:`bandpo.grader.stats`).  ``retried``: the item overran its first budget and was
    graded again with the larger one.  In mode ``math-dapo``, ``pred`` and ``gold`` are the two strings compared
    (normalised, or as given for the ``\\boxed{}`` fallback)."""

    score: float
    method: str
    pred: str | None
    gold: str | None
    seconds: float
    mode: str = "lenient"
    retried: bool = False

    def as_record(self) -> dict[str, Any]:
        """The result plus the grader's name, mode and version, ready to log next to the score."""
        record = asdict(self)
        record["grader"] = GRADER_NAME
        record["grader_version"] = GRADER_VERSION
        return record


# ---------------------------------------------------------------------------------------------------------------
# Verdicts of math-verify: cache, pairs in flight, pairs that overran the second budget
# ---------------------------------------------------------------------------------------------------------------
_VERDICTS: OrderedDict[tuple[str, str], bool] = OrderedDict()
_HARD_TIMEOUTS: OrderedDict[tuple[str, str], float] = OrderedDict()  # pair -> the largest CPU budget it spent
_INFLIGHT: dict[tuple[str, str], threading.Event] = {}
_LOCK = threading.Lock()


def _cached(key: tuple[str, str]) -> bool | None:
    with _LOCK:
        hit = _VERDICTS.get(key)
        if hit is not None:
            _VERDICTS.move_to_end(key)
        return hit


def clear_cache() -> None:
    """Forget every verdict and remembered timeout of this process (e.g. before timing the grader)."""
    with _LOCK:
        _VERDICTS.clear()
        _HARD_TIMEOUTS.clear()


def _remember(store: OrderedDict, key: tuple[str, str], value: Any, size: int) -> None:
    with _LOCK:
        store[key] = value
        store.move_to_end(key)
        if len(store) > size:
            store.popitem(last=False)


def _overran(key: tuple[str, str], budget: float) -> bool:
    """Whether the pair is remembered to have spent a CPU budget of ``budget`` (or more) without a verdict."""
    with _LOCK:
        return _HARD_TIMEOUTS.get(key, 0.0) >= budget


def _attempt(key: tuple[str, str], budget: float, started: pool.Started | None = None) -> tuple[bool | None, str]:
    """One try at math-verify's verdict on a normalised ``(gold, pred)`` pair within ``budget`` CPU seconds.  A pair
    another thread is verifying is waited for rather than verified twice; if that try ends without a verdict (a
    smaller budget, a hang), this one goes on.  A timeout (the CPU budget spent) is remembered with its budget: the
    pair is not given that budget again.  ``started``: the pair was sent to a worker already (`pool.start`, with this
    budget); its outcome is this attempt's (or it is forgotten, when the cache or another thread answers)."""
    while True:
        with _LOCK:
            hit = _VERDICTS.get(key)
            overran = _HARD_TIMEOUTS.get(key, 0.0) >= budget
            running = _INFLIGHT.get(key) if hit is None and not overran else None
            if hit is None and not overran and running is None:
                _INFLIGHT[key] = threading.Event()
        if started is not None and (hit is not None or overran or running is not None):
            started.cancel()
            started = None
        if hit is not None:
            return hit, "math_verify"
        if overran:
            return None, "timeout"
        if running is None:
            break
        running.wait()  # the twin's own wait is bounded (`bandpo.grader.pool`); then look again
    verdict, method = None, "error"
    try:
        if started is not None:
            verdict, method = started.outcome()
        else:
            verdict, method = pool.verify_bounded(key[0], key[1], budget)
        if verdict is not None:
            _remember(_VERDICTS, key, verdict, _VERDICT_CACHE_SIZE)
        elif method == "timeout":
            _remember(_HARD_TIMEOUTS, key, budget, _HARD_TIMEOUT_MEMO_SIZE)
    finally:
        with _LOCK:
            done = _INFLIGHT.pop(key, None)
        if done is not None:
            done.set()
    return verdict, method


# ---------------------------------------------------------------------------------------------------------------
# Items
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class _Item:
    pred: str | None
    gold: str | None
    result: tuple[float, str] | None = None  # decided without asking math-verify
    key: tuple[str, str] | None = None  # normalised (gold, pred) still to verify


def _prepare(response: Any, reference: Any, mode: str) -> _Item:
    """Everything up to (not including) math-verify: extraction, normalisation, fast paths, pre-checks.  The
    ``math-dapo`` mode is decided here (string work only, `bandpo.grader.dapo`)."""
    if mode in ("math-dapo", "math-dapo-paper"):
        return _prepare_dapo(response, reference, box_fallback=mode == "math-dapo")
    if mode == "math-boxed":
        return _prepare_boxed(response, reference)
    pred = extract_answer(response, mode)
    gold = reference_answer(reference)
    item = _Item(pred, gold)
    if gold is None:
        item.result = (0.0, "no_reference")
        return item
    if pred is None:
        item.result = (0.0, "no_answer")
        return item
    if len(pred) > MAX_EXTRACTED_CHARS:
        item.result = (0.0, "rejected:too_long")
        return item
    g = normalise(gold) if len(gold) <= MAX_EXTRACTED_CHARS else gold
    p = normalise(pred)
    if not p:
        item.result = (0.0, "no_answer")
        return item
    if g == p:
        item.result = (1.0, "exact")
        return item
    decided = structural_verdict(g, p)
    if decided is not None:
        item.result = (1.0 if decided else 0.0, "numeric")
        return item
    for answer in (p, g):
        why = precheck(answer)
        if why is not None:
            item.result = (0.0, f"rejected:{why}")
            return item
    key = (g, p)
    hit = _cached(key)
    if hit is not None:
        counters.count("cache_hits")
        item.result = (1.0 if hit else 0.0, "math_verify")
        return item
    item.key = key
    return item


def _prepare_dapo(response: Any, reference: Any, box_fallback: bool) -> _Item:
    """verl's ``math_dapo`` verdict (``box_fallback``: verl 0.9.1's, else the ``Answer:`` line only): the reference
    as given (its text; not extracted from a solution), the response's last 300 characters.  A missing or blank
    reference scores 0 (``no_reference``)."""
    gold = to_text(reference)
    if gold is None or not gold.strip():
        return _Item(None, None, (0.0, "no_reference"))
    text = to_text(response) or ""
    correct, pred, compared = dapo.judge(text, gold, box_fallback)
    if pred == dapo.INVALID and not correct:
        return _Item(None, compared, (0.0, "no_answer"))
    return _Item(pred, compared, (1.0 if correct else 0.0, "math_dapo"))


def _prepare_boxed(response: Any, reference: Any) -> _Item:
    """verl's ``\\boxed{}`` MATH rule (``verl.utils.reward_score.math_reward.compute_score``, by verl's own
    functions): the last ``\\boxed{}`` of the whole response (`extract.boxed_math_answer`), equal to the reference
    after the Hendrycks MATH normalisation (``is_equiv``).  A missing or blank reference scores 0."""
    from verl.utils.reward_score import math_reward  # lazy: verl loads only where the math-boxed mode grades

    gold = to_text(reference)
    if gold is None or not gold.strip():
        return _Item(None, None, (0.0, "no_reference"))
    pred = boxed_math_answer(to_text(response) or "")
    if pred is None:
        return _Item(None, gold, (0.0, "no_answer"))
    return _Item(pred, gold, (1.0 if math_reward.is_equiv(pred, gold) else 0.0, "math_boxed"))


def _budgets(timeout_s: float | None) -> tuple[float, float]:
    s = config.current()
    first = timeout_s if timeout_s is not None and timeout_s > 0 else s.timeout_s
    return first, first * s.retry_factor


def _score(verdict: bool | None) -> float:
    return 1.0 if verdict else 0.0


def grade_detailed(
    response: Any, reference: Any, *, timeout_s: float | None = None, mode: str | None = None
) -> GradeResult:
    """Like :func:`grade`, returning a :class:`GradeResult` (score, method, extracted answers, seconds, mode).
    ``timeout_s``: the first budget of this item (the second is ``retry_factor`` times it)."""
    t0 = time.monotonic()
    mode = config.current().mode if mode is None else config.check_mode(mode)
    first, second = _budgets(timeout_s)
    item = _Item(None, None)
    retried = False
    try:
        item = _prepare(response, reference, mode)
        if item.result is not None:
            score, method = item.result
        else:
            assert item.key is not None
            verdict, method = _attempt(item.key, first)
            if method in counters.NOT_DECIDED and not _overran(item.key, second):
                retried = True
                counters.count("retried")
                verdict, method = _attempt(item.key, second)
            score = _score(verdict)
    except judge.Alarm:  # pragma: no cover - an alarm that fired just after the in-process judge returned
        score, method = 0.0, "timeout"
    except Exception:
        log.debug("grader error", exc_info=True)
        score, method = 0.0, "error"
    counters.tally(method)
    return GradeResult(score, method, item.pred, item.gold, time.monotonic() - t0, mode, retried)


def grade(response: Any, reference: Any, *, mode: str | None = None) -> float:
    """1.0 if the final answer of ``response`` is equivalent to ``reference``, else 0.0.  Never raises (except
    for an unknown ``mode``, a caller's error)."""
    return grade_detailed(response, reference, mode=mode).score


def grade_many(
    responses: Sequence[Any],
    references: Sequence[Any],
    *,
    timeout_s: float | None = None,
    mode: str | None = None,
) -> list[float]:
    """``[grade(r, g) for r, g in zip(responses, references)]``, faster: identical pairs are verified once and
    the math-verify work is spread over the worker pool; items that overran their first budget are graded again
    after the batch, one at a time."""
    return [r.score for r in grade_many_detailed(responses, references, timeout_s=timeout_s, mode=mode)]


def grade_many_detailed(
    responses: Sequence[Any],
    references: Sequence[Any],
    *,
    timeout_s: float | None = None,
    mode: str | None = None,
) -> list[GradeResult]:
    """:func:`grade_many` returning :class:`GradeResult` records."""
    if len(responses) != len(references):
        raise ValueError("responses and references differ in length")
    grading = Grading(len(responses), timeout_s=timeout_s, mode=mode)
    for i, (response, reference) in enumerate(zip(responses, references, strict=True)):
        grading.add(i, response, reference)
    return grading.results()


class Grading:
    """A batch of ``n`` items whose math-verify work runs while the caller goes on: :meth:`add` each item,
    :meth:`results` when (some of) their scores are needed.  ``add`` decides what it can at once (the fast paths,
    the verdict cache) and sends a pair that needs math-verify to a worker process straight away, in the order
    added; ``results`` waits for the verdicts it asks for, then grades the items among them that overran their
    first budget again with the second, one at a time.  A trainer that adds its first mini-batch's items first
    can start updating on them while the worker judges the rest.  The scores are those of :func:`grade` item by
    item; :func:`grade_many` adds all, then asks for all.  Identical pairs are verified once per batch."""

    def __init__(self, n: int, *, timeout_s: float | None = None, mode: str | None = None) -> None:
        self.mode = config.current().mode if mode is None else config.check_mode(mode)
        self.first, self.second = _budgets(timeout_s)
        self._results: list[GradeResult | None] = [None] * n
        self._added = [False] * n
        # normalised (gold, pred) still to verify -> (its worker task, if sent; its items: (index, item, seconds
        # spent preparing))
        self._pending: dict[tuple[str, str], tuple[pool.Started | None, list[tuple[int, _Item, float]]]] = {}

    def add(self, i: int, response: Any, reference: Any) -> None:
        """Item ``i`` (0 <= i < n, each once): ``response`` graded against ``reference``."""
        if not 0 <= i < len(self._results) or self._added[i]:
            raise ValueError(f"item {i}: outside 0..{len(self._results) - 1} or added twice")
        self._added[i] = True
        t0 = time.monotonic()
        try:
            item = _prepare(response, reference, self.mode)
        except Exception:
            item = _Item(None, None, (0.0, "error"))
        if item.result is not None:
            score, method = item.result
            self._results[i] = GradeResult(score, method, item.pred, item.gold, time.monotonic() - t0, self.mode)
            counters.tally(method)
            return
        key = item.key
        assert key is not None
        if key not in self._pending:
            started = pool.start(key[0], key[1], self.first) if not _overran(key, self.first) else None
            self._pending[key] = (started, [])
        self._pending[key][1].append((i, item, time.monotonic() - t0))

    def results(self, items: Sequence[int] | None = None) -> list[GradeResult]:
        """The results of ``items`` (default: all ``n``, in order), every one of which must have been added."""
        wanted = range(len(self._results)) if items is None else items
        missing = [i for i in wanted if not (0 <= i < len(self._added) and self._added[i])]
        if missing:
            raise ValueError(f"items never added: {missing[:10]}{' ...' if len(missing) > 10 else ''}")
        wanted_set = set(wanted)
        keys = [k for k, (_, entries) in self._pending.items() if any(i in wanted_set for i, _, _ in entries)]
        retry: list[list[tuple[int, _Item, float]]] = []
        for key in keys:
            started, entries = self._pending.pop(key)
            self._run(entries, self.first, False, retry, started)
        # Those first attempts are done: items that overran the first budget get the second, one at a time.
        for entries in sorted(retry, key=lambda e: e[0][0]):
            counters.count("retried", len(entries))
            self._run(entries, self.second, True, retry)
        return [self._results[i] or GradeResult(0.0, "error", None, None, 0.0, self.mode) for i in wanted]

    def cancel(self) -> None:
        """Abandon the batch: pairs sent to a worker that no worker has started yet never start."""
        for key, (started, entries) in self._pending.items():
            if started is not None:
                started.cancel()
                self._pending[key] = (None, entries)

    def _run(self, entries, budget: float, final: bool, retry: list, started: pool.Started | None = None) -> None:
        key = entries[0][1].key
        assert key is not None
        t0 = time.monotonic()
        try:
            verdict, method = _attempt(key, budget, started)
        except Exception:
            log.debug("grader error", exc_info=True)
            verdict, method = None, "error"
        spent = time.monotonic() - t0
        if not final and method in counters.NOT_DECIDED and not _overran(key, self.second):
            retry.append([(i, item, prep + spent) for i, item, prep in entries])
            return
        score = _score(verdict)
        for i, item, prep in entries:
            self._results[i] = GradeResult(score, method, item.pred, item.gold, prep + spent, self.mode, final)
        counters.tally(method, len(entries))


# ---------------------------------------------------------------------------------------------------------------
# Settings, workers, provenance
# ---------------------------------------------------------------------------------------------------------------
def configure(
    *,
    timeout_s: float | None = None,
    retry_factor: float | None = None,
    hang_guard_s: float | None = None,
    workers: int | None = None,
    mode: str | None = None,
    isolation: str | None = None,
) -> None:
    """Change the first per-item budget (CPU seconds), the second budget's factor (``retry_factor``: the budget of an
    item's second attempt is ``retry_factor * timeout_s``), the wall-clock guard against a hung worker
    (``hang_guard_s``), the number of worker processes, the grading mode (one of
    :data:`bandpo.grader.MODES`) or the isolation (``"process"`` or ``"inprocess"``).  Overrides the environment
    (`bandpo.grader.config`).

    Changing the workers or the isolation stops the current worker pool; the next grading call starts a new one.
    """
    if config.update(timeout_s=timeout_s, retry_factor=retry_factor, hang_guard_s=hang_guard_s, workers=workers,
                     mode=mode, isolation=isolation):  # fmt: skip
        pool.shutdown()


def warmup(timeout_s: float = pool.STARTUP_TIMEOUT_S) -> bool:
    """Start the math-verify workers now (a one-off cost of a few seconds) so that later items meet the budget.

    Returns ``True`` when math-verify is usable (a worker answered, or the in-process judge loaded).
    """
    return pool.warm(timeout_s)


def grader_info() -> dict[str, Any]:
    """Provenance of the scores: record it next to every score (training logs, lm-eval results)."""
    s = config.current()
    return {
        "name": GRADER_NAME,
        "mode": s.mode,
        "version": GRADER_VERSION,
        "id": grader_id(),
        "bandpo_version": BANDPO_VERSION,
        "rules_revision": RULES_REVISION,
        "math_verify_version": MATH_VERIFY_VERSION,
        "latex2sympy2_extended_version": dist_version("latex2sympy2_extended"),
        "sympy_version": dist_version("sympy"),
        "pebble_version": dist_version("pebble"),
        "isolation": s.isolation,
        "budget_clock": "cpu",  # the budgets below are CPU seconds of the judging process (issue #72)
        "timeout_s": s.timeout_s,
        "retry_timeout_s": s.timeout_s * s.retry_factor,
        "hang_guard_s": s.hang_guard_s,
        "workers": s.workers,
    }


def grader_id(mode: str | None = None) -> str:
    """One string naming the rule that produced a score: ``name/mode@version``."""
    return f"{GRADER_NAME}/{config.current().mode if mode is None else config.check_mode(mode)}@{GRADER_VERSION}"


def _after_fork_in_child() -> None:
    global _LOCK
    _INFLIGHT.clear()  # the parent's threads verifying those pairs are not in this process
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
