"""One answer grader for training rewards and for evaluation.

``grade(response, reference)`` returns 1.0 when the final answer of ``response`` is mathematically equivalent to
``reference`` and 0.0 otherwise.  Which part of the response is its final answer depends on the grading mode
(:data:`MODES`, ``BANDPO_GRADER_MODE`` or :func:`configure`):

* ``lenient`` (the default): the content of the last ``\\boxed{...}`` (also a truncated ``\\boxed{42`` whose closing
  brace a stop sequence removed) or of the last ``Answer:`` / ``The final answer is`` / ``####`` line, whichever
  comes last in the text;
* ``strict-answer-line``: the last ``Answer:`` line only, no ``\\boxed{}`` fallback (the paper's reward rule).

A reference may be a bare answer, a number, or a full solution with a ``\\boxed{}`` or ``####`` line.  Answers are
compared by, in order:

1. a normalised string comparison (whitespace, ``\\left``/``\\right``, ``\\dfrac``, degree signs, ...);
2. exact shortcuts that give math-verify's own verdict much faster: plain numbers (integers, thousands separators,
   decimals, ``a/b``, ``\\frac{a}{b}``; a decimal matches when both sides agree to 6 decimal places, as in
   math-verify), tuples, intervals and sets of plain numbers, and multiple-choice letters;
3. math-verify (``parse`` + ``verify``) for everything else: the slow path.

Model output is untrusted.  Nothing here evaluates text (no ``eval``/``exec``/``sympify``); only math-verify's own
parser ever sees it.  ``grade`` never raises and returns within a bounded time whatever the input, from any thread
(``timeout_s``: 0.8 s by default, under the suite's bound of 1 s per item):

* extraction is linear in the length of the text (reversed-text anchor searches, one brace scan, capped at 64 KiB);
* cheap pre-checks reject absurd answers before any parsing: too long, nested too deep, power towers, huge
  exponents or powers of powers, factorials, binomials, sums or products of huge numbers, huge literals;
* math-verify runs in a ``pebble`` process pool (workers forked after math-verify is imported and warmed up in
  the caller; they run nothing but math-verify on two strings).  A task that overruns the item's deadline is
  cancelled and pebble ends its worker (which also ends C-level work no signal handler can interrupt, such as a
  huge integer power) and forks a replacement, while the other worker answers the next item.  This works the same
  in the main thread, in other threads, in a forked child (which starts its own pool) and inside lm-eval, and
  leaves the caller's ``SIGALRM`` alone.  Starting the pool (importing math-verify, a second or two) is a one-off
  cost per process, paid by :func:`warmup` or by the first item that needs math-verify.
* Where worker processes cannot be used (``isolation="inprocess"``, or if the pool fails to start), math-verify
  runs in the calling process under a ``setitimer`` alarm in the main thread; in other threads only steps 1-2 are
  used.

math-verify verdicts are cached per normalised (reference, answer) pair, and a pair already being verified by
another thread is waited for rather than verified twice.  A timeout is not a verdict: it scores 0 for that item,
is counted (:func:`stats`, :func:`counting`: ``grader_timeouts`` and ``grader_slow_frac`` in training metrics and
evaluation summaries) and is never cached, so the same answer is tried again next time.  Environment:
``BANDPO_GRADER_MODE``, ``BANDPO_GRADER_TIMEOUT_S``, ``BANDPO_GRADER_WORKERS``, ``BANDPO_GRADER_ISOLATION`` (or
:func:`configure`).

Every score should be logged with the grader's provenance: :func:`grader_info` (name, mode, version: bandpo
version, rules revision and math-verify version) or the one-string :func:`grader_id`; :func:`grade_detailed` returns
a record with the score, the method that decided it, the extracted answers and the mode, and
``GradeResult.as_record()`` adds the name and version.
"""

from __future__ import annotations

import atexit
import logging
import numbers
import os
import re
import signal
import string
import sys
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from fractions import Fraction
from importlib import metadata
from typing import Any

from bandpo import __version__ as _BANDPO_VERSION

__all__ = [
    "GRADER_NAME",
    "GRADER_VERSION",
    "MODES",
    "Counts",
    "GradeResult",
    "configure",
    "counting",
    "extract_answer",
    "grade",
    "grade_detailed",
    "grade_many",
    "grade_many_detailed",
    "grader_id",
    "grader_info",
    "last_boxed",
    "shutdown",
    "stats",
    "warmup",
]

log = logging.getLogger(__name__)

# Bump when extraction, normalisation or pre-check rules change in a way that can change a score.
_RULES_REVISION = 2  # 2: sqrt/pi fast path, timeouts not cached, strict-answer-line mode


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except Exception:
        return "missing"


_MATH_VERIFY_VERSION = _dist_version("math-verify")
GRADER_NAME = "bandpo.grader"
GRADER_VERSION = f"{_BANDPO_VERSION}.r{_RULES_REVISION}+math-verify-{_MATH_VERIFY_VERSION}"

# ---------------------------------------------------------------------------------------------------------------
# Limits
# ---------------------------------------------------------------------------------------------------------------
MAX_EXTRACTED_CHARS = 4096  # longer extracted answers are rejected before any normalisation
MAX_ANSWER_CHARS = 512  # longer normalised answers are not handed to math-verify
MAX_NESTING = 8  # bracket nesting ((, [, {) beyond this makes the LaTeX parser slow: rejected
MAX_LITERAL_DIGITS = 60  # integer literals with more digits are rejected
MAX_EXPONENT = 100_000  # numeric exponents above this are rejected
MAX_COMBINATORIAL_ARG = 10_000  # n!, \binom{n}{k} with literals above this are rejected
MAX_POWER_BITS = 1_000_000  # estimated bits of a numeric power (chains and powers of powers multiply)
MAX_SERIES_BOUND = 1_000  # \sum / \prod with literals above this are rejected
DEFAULT_TIMEOUT_S = 0.8  # per-item wall-clock budget, under the suite's hard bound of 1 s per item
_STARTUP_TIMEOUT_S = 60.0  # one-off wait for the first worker of a process to import math-verify
_VERDICT_CACHE_SIZE = 8192


MODES = ("lenient", "strict-answer-line")
"""Grading modes: which part of a response is its final answer (the comparison is the same in both).

``lenient`` (the default): the last ``\\boxed{}`` (also a truncated one) or ``Answer:`` / ``The final answer is`` /
``####`` line, whichever comes last.  ``strict-answer-line``: only the last ``Answer:`` line (a ``\\boxed{}`` on
that line is unwrapped); no ``\\boxed{}`` elsewhere counts: the rule of the paper's training and validation
reward (verl's ``math_dapo`` with its ``Answer:`` pattern, rewards +1 / -1 in ``workflow/scripts/verl_reward.py``).
"""
ISOLATIONS = ("process", "inprocess")


@dataclass
class _Config:
    timeout_s: float = DEFAULT_TIMEOUT_S
    workers: int = 2  # math-verify worker processes
    mode: str = "lenient"  # one of MODES
    isolation: str = "process"  # "process" (worker pool) | "inprocess" (alarm in the main thread)


def _env_config() -> _Config:
    """Defaults, overridden by ``BANDPO_GRADER_TIMEOUT_S``, ``BANDPO_GRADER_WORKERS``, ``BANDPO_GRADER_MODE`` and
    ``BANDPO_GRADER_ISOLATION``.  An unknown mode is an error (scores must not silently come from another rule)."""
    cfg = _Config()
    try:
        timeout_s = float(os.environ.get("BANDPO_GRADER_TIMEOUT_S", cfg.timeout_s))
        if timeout_s > 0:
            cfg.timeout_s = timeout_s
    except ValueError:
        pass
    try:
        cfg.workers = max(1, int(os.environ.get("BANDPO_GRADER_WORKERS", cfg.workers)))
    except ValueError:
        pass
    cfg.mode = _check_mode(os.environ.get("BANDPO_GRADER_MODE") or cfg.mode, "BANDPO_GRADER_MODE")
    isolation = os.environ.get("BANDPO_GRADER_ISOLATION", cfg.isolation)
    if isolation in ISOLATIONS:
        cfg.isolation = isolation
    if os.name != "posix":
        cfg.isolation = "inprocess"
    return cfg


def _check_mode(mode: str, where: str = "mode") -> str:
    if mode not in MODES:
        raise ValueError(f"{where}: unknown grader mode {mode!r}; choose one of {', '.join(MODES)}")
    return mode


_CONFIG = _env_config()


def configure(
    *,
    timeout_s: float | None = None,
    workers: int | None = None,
    mode: str | None = None,
    isolation: str | None = None,
) -> None:
    """Change the per-item time budget, the number of worker processes, the grading mode (one of :data:`MODES`)
    or the isolation (``"process"`` or ``"inprocess"``).

    Changing the workers or the isolation stops the current worker pool; the next grading call starts a new one.
    """
    if timeout_s is not None:
        if not timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        _CONFIG.timeout_s = float(timeout_s)
    if mode is not None:
        _CONFIG.mode = _check_mode(mode)
    restart = False
    if workers is not None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        restart |= workers != _CONFIG.workers
        _CONFIG.workers = int(workers)
    if isolation is not None:
        if isolation not in ISOLATIONS:
            raise ValueError(f"isolation must be one of {', '.join(ISOLATIONS)}")
        restart |= isolation != _CONFIG.isolation
        _CONFIG.isolation = isolation
    if restart:
        shutdown()


# ---------------------------------------------------------------------------------------------------------------
# Text coercion and extraction (linear time, never evaluates anything)
# ---------------------------------------------------------------------------------------------------------------
def _to_text(obj: Any) -> str | None:
    """Best-effort conversion of untrusted input to ``str``; ``None`` when there is no usable text."""
    if obj is None:
        return None
    if isinstance(obj, str):
        return obj
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj).decode("utf-8", errors="replace")
    if isinstance(obj, bool):
        return None
    if isinstance(obj, numbers.Number):  # e.g. an integer reference from a dataset column
        try:
            text = str(obj)
        except Exception:  # e.g. an int too large to print
            return None
        return text if len(text) <= MAX_EXTRACTED_CHARS else None
    return None


# One token of a brace scan: an escaped character (``\{``, ``\}``, ``\\``, or the first letter of a command), or a
# bare brace.  Every character of the scanned region is visited once: linear time.
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)
_BOXED_MARKERS = ("\\boxed", "\\fbox")
_BARE_TOKEN = re.compile(r"[^\s$}]+")
# Anchors are searched in the reversed text, so that the first match found is the last one in the text.
_ANSWER_COLON_REVERSED = re.compile(r":[ \t]{0,3}(?:\*{1,2})?rewsna", re.IGNORECASE | re.ASCII)
_BLANKS = re.compile(r"[ \t]*")
_FINAL_ANSWER_IS_REVERSED = re.compile(r"si rewsna lanif", re.IGNORECASE | re.ASCII)
_HOPE = "i hope it is correct"
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_MAX_SCAN_CHARS = 65_536  # a \boxed{...} argument is read up to this length (longer answers are rejected anyway)
_MAX_BOXED_CANDIDATES = 1_000  # \boxed markers without an argument skipped before giving up


def _scan_braced(text: str, start: int, limit: int | None = None) -> str:
    """Content of the brace group whose ``{`` is at ``start - 1``: up to its matching ``}``, or to the end of
    ``text`` (or to ``start + limit``) when it is not closed.  Each character is visited once."""
    stop = len(text) if limit is None else min(len(text), start + limit)
    depth = 1
    for m in _BRACE_TOKEN.finditer(text, start, stop):
        tok = m.group()
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth == 0:
                return text[start : m.start()]
    return text[start:stop]


def _boxed_after(text: str, i: int) -> str | None:
    """Argument of a ``\\boxed`` marker ending at ``i``: a brace group (maybe unclosed) or one bare token."""
    n = len(text)
    if i < n and text[i].isalpha():  # e.g. \boxedfoo: another command
        return None
    i = _BLANKS.match(text, i).end()
    if i >= n:
        return None
    if text[i] == "{":
        return _scan_braced(text, i + 1, _MAX_SCAN_CHARS)
    m = _BARE_TOKEN.match(text, i, i + _MAX_SCAN_CHARS)
    return m.group() if m else None


def _last_boxed(text: str) -> tuple[int, str] | None:
    best: tuple[int, str] | None = None
    for marker in _BOXED_MARKERS:
        end = len(text)
        for _ in range(_MAX_BOXED_CANDIDATES):
            pos = text.rfind(marker, 0, end)
            if pos < 0 or (best is not None and pos < best[0]):
                break
            content = _boxed_after(text, pos + len(marker))
            if content is not None:
                best = (pos, content)
                break
            end = pos
    return best


def last_boxed(text: Any) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` of ``text`` (a missing closing brace is tolerated;
    ``\\boxed 5`` gives ``5``), stripped; ``None`` if there is none.  Linear time.  The suite's one copy of this
    extraction: model answers, reference solutions of the data loaders, everything."""
    s = _to_text(text)
    found = _last_boxed(s) if s else None
    return (found[1].strip() or None) if found is not None else None


def _line_after(text: str, i: int) -> str:
    """Rest of the line starting at ``i``; if it is blank, the next non-blank line (looking at most 3 lines on)."""
    for _ in range(4):
        j = text.find("\n", i)
        line = text[i:] if j < 0 else text[i:j]
        if line.strip() or j < 0:
            return line
        i = j + 1
    return ""


def _last_anchor_line(text: str, reversed_text: str, pattern: re.Pattern[str]) -> tuple[int, str] | None:
    """Position and rest of the line of the last match of an anchor (``pattern`` is written reversed)."""
    m = pattern.search(reversed_text)
    if m is None:
        return None
    n = len(text)
    return n - m.end(), _line_after(text, n - m.start())


def _tidy_line(s: str) -> str:
    s = s.strip()
    if len(s) > MAX_EXTRACTED_CHARS:  # rejected later anyway; keep the tidying linear and cheap
        return s
    tail = s.rstrip(".").rstrip()
    if tail.translate(_ASCII_LOWER).endswith(_HOPE):
        s = tail[: len(tail) - len(_HOPE)].rstrip()
    s = s.strip().strip("*").strip()
    if s.startswith(":"):
        s = s[1:].strip()
    s = s.rstrip(".").strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s.strip("$").strip()
    return s


def extract_answer(text: Any, mode: str | None = None) -> str | None:
    """Final answer of a model response, or ``None`` if it has none.

    ``lenient`` (the default mode): the content of the last ``\\boxed{...}``/``\\fbox{...}`` (a missing closing
    brace is tolerated) or the rest of the last ``Answer:`` / ``The final answer is`` / ``####`` line, whichever
    comes last; a ``\\boxed`` inside the chosen line wins over the line itself.  ``strict-answer-line``: the rest
    of the last ``Answer:`` line only (a ``\\boxed`` on it is unwrapped).  Runs in time linear in ``len(text)``; a
    ``\\boxed`` argument is read up to 64 KiB.  ``mode=None`` uses the configured mode.
    """
    mode = _CONFIG.mode if mode is None else _check_mode(mode)
    try:
        s = _to_text(text)
        if not s:
            return None
        reversed_s = s[::-1]
        if mode == "strict-answer-line":
            found = _last_anchor_line(s, reversed_s, _ANSWER_COLON_REVERSED)
            if found is None:
                return None
            line = found[1]
            boxed = _last_boxed(line) if len(line) <= MAX_EXTRACTED_CHARS else None
            answer = boxed[1].strip() if boxed is not None else _tidy_line(line)
            return answer or None
        candidates: list[tuple[int, str, bool]] = []
        boxed = _last_boxed(s)
        if boxed is not None:
            candidates.append((boxed[0], boxed[1], True))
        for found in (
            _last_anchor_line(s, reversed_s, _ANSWER_COLON_REVERSED),
            _last_anchor_line(s, reversed_s, _FINAL_ANSWER_IS_REVERSED),
        ):
            if found is not None:
                candidates.append((found[0], found[1], False))
        hashes = s.rfind("####")
        if hashes >= 0:
            candidates.append((hashes, _line_after(s, hashes + 4), False))
        if not candidates:
            return None
        _, content, is_boxed = max(candidates, key=lambda c: c[0])
        answer = content.strip() if is_boxed else _tidy_line(content)
        return answer or None
    except Exception:  # pragma: no cover - defensive: extraction must never raise
        return None


def _reference_answer(reference: Any) -> str | None:
    s = _to_text(reference)
    if s is None:
        return None
    found = extract_answer(s, "lenient") if ("\\boxed" in s or "\\fbox" in s or "####" in s) else None
    return (found if found is not None else s.strip()) or None


# ---------------------------------------------------------------------------------------------------------------
# Normalisation, plain numbers and pre-checks
# ---------------------------------------------------------------------------------------------------------------
_UNICODE = str.maketrans(
    {
        "\u2212": "-",  # minus sign
        "\u2013": "-",  # en dash (used as a minus by some models)
        "\u00a0": " ",
        "\u2009": " ",
        "\u202f": " ",
        "\u200b": "",
        "\ufeff": "",
        "\u00d7": "\\times ",
        "\u00b7": "\\cdot ",
        "\u03c0": "\\pi ",
        "\u221e": "\\infty ",
        "\u00b0": "",  # degree sign
        "\x00": "",
    }
)
_SPACING = re.compile(r"\\(?:[,;:! ]|quad(?![a-zA-Z])|qquad(?![a-zA-Z]))")
_LEFT_RIGHT = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big)(?![a-zA-Z])")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?")
_FRAC_ALIASES = re.compile(r"\\[dt]frac(?![a-zA-Z])")
_STYLE = re.compile(r"\\(?:displaystyle|textstyle)(?![a-zA-Z])")
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\{")
_SPACE_RUN = re.compile(r"\s+")


def _squash_spaces(s: str) -> str:
    """Drop insignificant whitespace: keep a space only after a letter before a letter or digit (``\\pi r``) and
    between two digits (``1 2``); ``x + 1`` becomes ``x+1`` and ``6 \\sqrt{2}`` becomes ``6\\sqrt{2}``."""
    parts = _SPACE_RUN.split(s)
    out = parts[0]
    for part in parts[1:]:
        if out and part and ((out[-1].isalpha() and part[0].isalnum()) or (out[-1].isdigit() and part[0].isdigit())):
            out += " "
        out += part
    return out


def _normalise(ans: str) -> str:
    s = ans.translate(_UNICODE)
    s = s.replace("\\$", "").replace("$", "")
    s = _SPACING.sub(" ", s)
    s = _LEFT_RIGHT.sub("", s)
    s = _STYLE.sub("", s)
    s = _FRAC_ALIASES.sub("\\\\frac", s)
    s = _DEGREES.sub("", s)
    s = s.replace("{,}", ",")
    s = _squash_spaces(s.strip())
    # \( ... \) and \[ ... \] wrappers
    for head, tail in (("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(head) and s.endswith(tail) and len(s) >= 4:
            s = s[2:-2].strip()
    # a whole-answer \text{...} wrapper
    m = _TEXT_WRAPPER.match(s)
    if m and s.endswith("}") and _scan_braced(s, m.end()) == s[m.end() : -1]:
        s = s[m.end() : -1].strip()
    while s.endswith(".") and not s.endswith("..."):
        s = s[:-1].rstrip()
    return s


_INT = r"[0-9]+"
_NUM_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"([+-]?)([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.([0-9]+))?"), "dec"),
    (re.compile(r"([+-]?)()\.([0-9]+)"), "dec"),
    (re.compile(rf"([+-]?)({_INT})/({_INT})"), "frac"),
    (re.compile(rf"([+-]?)\\frac\{{([+-]?{_INT})\}}\{{([+-]?{_INT})\}}"), "frac"),
    (re.compile(r"([+-]?)\\frac([0-9])([0-9])"), "frac"),
]


def _plain_number(s: str) -> tuple[Fraction, bool] | None:
    """Value of a plain number and whether it is written as a decimal; ``None`` for anything else."""
    if len(s) > 2 * MAX_LITERAL_DIGITS:
        return None
    for pattern, kind in _NUM_PATTERNS:
        m = pattern.fullmatch(s)
        if not m:
            continue
        sign = -1 if m.group(1) == "-" else 1
        if kind == "dec":
            whole = m.group(2).replace(",", "") or "0"
            frac = m.group(3) or ""
            value = Fraction(int(whole + frac), 10 ** len(frac))
            return sign * value, bool(m.group(3))
        num, den = int(m.group(2)), int(m.group(3))
        if den == 0:
            return None
        return sign * Fraction(num, den), False
    return None


def _round6(x: Fraction) -> Fraction:
    return Fraction(round(x * 1_000_000), 1_000_000)


def _numbers_equal(a: tuple[Fraction, bool], b: tuple[Fraction, bool]) -> bool:
    if a[1] or b[1]:  # math-verify: a float on either side compares after rounding to 6 decimals
        return _round6(a[0]) == _round6(b[0])
    return a[0] == b[0]


_CHOICE = re.compile(r"\(?([A-E])\)?")
_AMBIGUOUS_COMMA = re.compile(r"[0-9],[0-9]{3}(?![0-9])")  # "1,234" inside brackets: a pair or a thousands separator?
_INFINITY = {"\\infty": 1, "+\\infty": 1, "-\\infty": -1}


def _element(s: str) -> tuple[Fraction, bool] | tuple[float, bool] | None:
    s = s.strip()
    if s in _INFINITY:
        return float(_INFINITY[s]) * float("inf"), False
    return _plain_number(s)


def _elements_equal(a: tuple[Any, bool], b: tuple[Any, bool]) -> bool:
    if isinstance(a[0], float) or isinstance(b[0], float):  # infinities
        return a[0] == b[0]
    return _numbers_equal(a, b)


def _number_sequence(s: str) -> tuple[str, list[tuple[Any, bool]]] | None:
    """``(delimiters, elements)`` of a tuple, interval or set of plain numbers, e.g. ``("[)", [...])`` for
    ``[1, 3)`` and ``("{}", [...])`` for ``\\{1, 2\\}``; ``None`` for anything else."""
    if s.startswith("\\{") and s.endswith("\\}"):
        delims, inner = "{}", s[2:-2]
    elif len(s) >= 2 and s[0] in "([" and s[-1] in ")]":
        delims, inner = s[0] + s[-1], s[1:-1]
    else:
        return None
    if _AMBIGUOUS_COMMA.search(inner):
        return None
    parts = inner.split(",")
    if not 2 <= len(parts) <= 32:
        return None
    elements = []
    for part in parts:
        e = _element(part)
        if e is None:
            return None
        elements.append(e)
    return delims, elements


_ATOM = r"(?P<k>[0-9]{1,6})?(?:\\sqrt\{(?P<r>[0-9]{1,6})\}|\\sqrt(?P<r1>[0-9]))?(?P<pi>\\pi)?"
_RADICAL_FORMS = [
    re.compile(rf"(?P<s>[+-]?){_ATOM}"),  # 3\sqrt{2}, -\pi, 2\sqrt{3}\pi
    re.compile(rf"(?P<s>[+-]?)\\frac\{{(?P<s2>[+-]?){_ATOM}\}}\{{(?P<d>[0-9]{{1,6}})\}}"),  # \frac{3\sqrt{2}}{4}
    re.compile(rf"(?P<s>[+-]?){_ATOM}/(?P<d>[0-9]{{1,6}})"),  # 3\pi/4, \sqrt{2}/2
    re.compile(rf"(?P<s>[+-]?)\\frac\{{(?P<n>[0-9]{{1,6}})\}}\{{(?P<d>[0-9]{{1,6}})\}}{_ATOM}"),  # \frac{1}{2}\sqrt{3}
]


def _squarefree(n: int) -> tuple[int, int]:
    """``(m, r)`` with ``n == m * m * r`` and ``r`` square-free (``n`` up to 10**6: trial division)."""
    m, r, f = 1, n, 2
    while f * f <= r:
        while r % (f * f) == 0:
            r //= f * f
            m *= f
        f += 1
    return m, r


def _radical(s: str) -> tuple[Fraction, int, bool] | None:
    """``q * sqrt(r) * pi**e`` as ``(q, r, e)`` with ``r`` square-free, for a rational multiple of a square root
    and/or of pi written in one of the common forms; ``None`` for anything else (decimals included: math-verify
    compares those numerically)."""
    for form in _RADICAL_FORMS:
        m = form.fullmatch(s)
        if m is None:
            continue
        g = m.groupdict()
        radicand = g["r"] or g["r1"]
        if radicand is None and g["pi"] is None:
            return None  # a plain number: _plain_number's business
        if g.get("n") is not None and g["k"] is not None:
            return None  # \frac{1}{2}3\sqrt{2}: not a common form
        q = Fraction(int(g["k"] or 1), 1)
        if g.get("n") is not None:
            q *= Fraction(int(g["n"]), 1)
        if g.get("d") is not None:
            if int(g["d"]) == 0:
                return None
            q /= int(g["d"])
        if (g["s"] == "-") != (g.get("s2") == "-"):
            q = -q
        root, r = _squarefree(int(radicand)) if radicand is not None else (1, 1)
        q *= root
        if r == 0 or q == 0:
            return Fraction(0), 1, False
        return q, r, g["pi"] is not None
    return None


def _structural_verdict(g: str, p: str) -> bool | None:
    """Decide without math-verify when both answers are plain numbers, rational multiples of a square root or of
    pi (``3\\sqrt{2}``, ``\\frac{\\sqrt{3}}{2}``, ``\\frac{3\\pi}{4}``, against each other or an exact plain number),
    multiple-choice letters, or tuples, intervals or sets of plain numbers (the same verdict math-verify gives, much
    faster); else ``None``."""
    gn, pn = _plain_number(g), _plain_number(p)
    if gn is not None and pn is not None:
        return _numbers_equal(gn, pn)
    if (gn is None or not gn[1]) and (pn is None or not pn[1]):  # no decimals
        gr = (gn[0], 1, False) if gn is not None else _radical(g)
        pr = (pn[0], 1, False) if pn is not None else _radical(p) if gr is not None else None
        if gr is not None and pr is not None:
            return gr == pr
    gc, pc = _CHOICE.fullmatch(g), _CHOICE.fullmatch(p)
    if gc and pc:
        return gc.group(1) == pc.group(1)
    gs = _number_sequence(g) if g[:1] in "([\\" else None
    ps = _number_sequence(p) if gs is not None else None
    if gs is None or ps is None:
        return None
    (gd, ge), (pd, pe) = gs, ps
    if gd == "{}" and pd == "{}":  # sets: order and repetition do not matter
        return all(any(_elements_equal(x, y) for y in pe) for x in ge) and all(
            any(_elements_equal(x, y) for x in ge) for y in pe
        )
    if gd == "{}" or pd == "{}":
        return None  # a set against a tuple or interval: leave it to math-verify
    if gd == pd:
        return len(ge) == len(pe) and all(_elements_equal(x, y) for x, y in zip(ge, pe, strict=False))
    if len(ge) == 2 and len(pe) == 2:  # intervals with different ends
        return False
    return None


_DIGIT_RUN = re.compile(r"[0-9]+")
_COMMAND = re.compile(r"\\[a-zA-Z]+")
_NESTED_FACTORIAL = re.compile(r"![)}\]]+!")


def _exponent_group(s: str, i: int) -> str:
    """The exponent following a ``^`` at ``i - 1``: a brace group, a command, a digit run or one character."""
    n = len(s)
    while i < n and s[i] == " ":
        i += 1
    if i >= n:
        return ""
    if s[i] == "{":
        return _scan_braced(s, i + 1)
    m = _COMMAND.match(s, i) or _DIGIT_RUN.match(s, i)
    return m.group() if m else s[i]


def _base_span(s: str, caret: int) -> tuple[int, int] | None:
    """``(start, end)`` of the base of the power whose ``^`` is at ``caret``, when that base is a bracket group or a
    digit run; ``None`` for a symbol, a command or anything else."""
    j = caret - 1
    while j >= 0 and s[j] == " ":
        j -= 1
    if j < 0:
        return None
    if s[j] in ")]}":
        depth = 0
        for k in range(j, -1, -1):
            if s[k] in ")]}":
                depth += 1
            elif s[k] in "([{":
                depth -= 1
                if depth == 0:
                    return k, j + 1
        return None
    if s[j].isdigit():
        k = j
        while k > 0 and s[k - 1].isdigit():
            k -= 1
        return k, j + 1
    return None


def _check_powers(s: str) -> str | None:
    """Reject numeric powers whose value would be too big to compute: towers such as ``9^{9^{9}}``, huge exponents,
    and chains or powers of powers (``(2^{9999})^{9999}``, ``99^99^99``: the LaTeX parser is left-associative, so
    the exponents multiply).  ``bits[c]`` estimates the size in bits of the power whose ``^`` is at ``c``."""
    bits: dict[int, int] = {}
    caret = s.find("^")
    while caret >= 0:
        exponent = _exponent_group(s, caret + 1)
        if "^" in exponent and not re.search(r"[a-zA-Z]", _COMMAND.sub("", exponent)):
            return "power_tower"  # a numeric tower sympy would try to evaluate
        for m in _DIGIT_RUN.finditer(exponent):
            if len(m.group()) > 6 or int(m.group()) > MAX_EXPONENT:
                return "huge_exponent"
        plain = _DIGIT_RUN.fullmatch(exponent.strip().lstrip("+-").strip())
        e = int(plain.group()) if plain else 1
        base = 1
        span = _base_span(s, caret)
        if span is not None:
            a, b = span
            for c, size in bits.items():
                if a <= c < b:
                    base = max(base, size)
            for m in _DIGIT_RUN.finditer(s, a, b):
                base = max(base, int(m.group()).bit_length())
            if a > 0 and s[a - 1] == "^":  # a chain x^{a}^{b}: the base is the previous power
                base = max(base, bits.get(a - 1, 1))
        bits[caret] = base * e
        if bits[caret] > MAX_POWER_BITS:
            return "huge_power"
        caret = s.find("^", caret + 1)
    return None


def _precheck(s: str) -> str | None:
    """Reason to refuse parsing the normalised answer ``s``, or ``None`` if it looks like a sane math answer."""
    if len(s) > MAX_ANSWER_CHARS:
        return "too_long"
    if "__" in s:  # dunder names are never maths; nothing is evaluated anyway, this just skips the parser
        return "code_like"
    depth = peak = 0
    for ch in s:
        if ch in "([{":
            depth += 1
            peak = max(peak, depth)
        elif ch in ")]}":
            depth -= 1
    if peak > MAX_NESTING:
        return "too_deep"
    for m in _DIGIT_RUN.finditer(s):
        if len(m.group()) > MAX_LITERAL_DIGITS:
            return "huge_literal"
    why = _check_powers(s)
    if why is not None:
        return why
    if "\\sum" in s or "\\prod" in s:
        for m in _DIGIT_RUN.finditer(s):
            if len(m.group()) > 4 or int(m.group()) > MAX_SERIES_BOUND:
                return "huge_series"
    if "!" in s or "binom" in s or "choose" in s:
        for m in _DIGIT_RUN.finditer(s):
            if len(m.group()) > 6 or int(m.group()) > MAX_COMBINATORIAL_ARG:
                return "huge_combinatorial"
    if _NESTED_FACTORIAL.search(s):  # e.g. ((4!)!)!
        return "huge_combinatorial"
    return None


# ---------------------------------------------------------------------------------------------------------------
# math-verify judge (runs in a worker process, or in-process as a fallback)
# ---------------------------------------------------------------------------------------------------------------
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


class _Judge:
    """math-verify's parse + verify, with a small cache of parsed answers."""

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


def _arm_cpu_guard(seconds: int = 5) -> None:
    """Let the kernel end this worker (SIGXCPU) if one request burns ``seconds`` of CPU: the pool stops it much
    sooner, but if the calling process itself died mid-request nobody else would stop a C-level computation."""
    try:
        import resource

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
        import resource

        with open("/proc/self/statm") as f:
            inherited = int(f.read().split()[0]) * resource.getpagesize()
        limit = inherited + (4 << 30)
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard == resource.RLIM_INFINITY or hard > limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except Exception:
        pass


_TEST_HANG_MARKER = "\\bandpotesthang"
_WORKER_JUDGE: _Judge | None = None


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
    _WORKER_JUDGE = _INPROCESS_JUDGE or _Judge()  # imported and warmed up by the parent before the fork


def _worker_ping() -> bool:
    return _WORKER_JUDGE is not None


def _worker_verify(gold: str, pred: str) -> bool:
    """One math-verify verdict, in a pool worker.  pebble runs tasks in the worker's main thread, so math-verify
    could use its own ``signal.alarm`` timeouts here; it does not (``timeout_seconds=None``): those count whole
    seconds and turn a timeout into a ``False`` verdict, where the pool's deadline is finer and reports it."""
    if gold == _TEST_HANG_MARKER and os.environ.get("BANDPO_GRADER_TEST_HOOKS") == "1":
        # Test hook (off unless the environment asks for it): stands in for a C-level computation that nothing
        # but ending the process can stop.
        time.sleep(3600)
    _arm_cpu_guard()
    assert _WORKER_JUDGE is not None
    try:
        return _WORKER_JUDGE(gold, pred)
    except Exception:  # math-verify failed on this pair: not equivalent
        return False


class _Pool:
    """math-verify workers: a ``pebble.ProcessPool`` whose workers are forks of this process, made after math-verify
    was imported and warmed up here, so that a worker (or a replacement) is ready at once.  ``fork`` rather than
    ``spawn`` / ``forkserver``: those run the caller's ``__main__`` module again in every worker (a training
    script's imports, or all of an unguarded script; impossible for ``python - <script``).  A worker runs nothing
    but math-verify on two strings.  pebble ends a worker whose task overruns its timeout (or is cancelled) and
    forks a replacement; the other workers keep answering meanwhile."""

    def __init__(self, workers: int) -> None:
        import multiprocessing

        from pebble import ProcessPool

        # shutdown() first at exit, before the handlers pebble and multiprocessing registered on import (atexit runs
        # last-in first-out): multiprocessing's would otherwise wait for our idle workers forever.
        atexit.unregister(shutdown)
        atexit.register(shutdown)
        if _load_inprocess_judge() is None:
            raise RuntimeError("math-verify cannot be imported")
        self.pid = os.getpid()
        self.ready = False  # a worker has answered
        self.pool = ProcessPool(
            max_workers=workers, initializer=_worker_init, context=multiprocessing.get_context("fork")
        )
        _count("pool_starts")

    @property
    def broken(self) -> bool:
        return not self.pool.active

    def verify(self, gold: str, pred: str, deadline: float) -> tuple[bool | None, str]:
        """``(verdict, "math_verify")``, or ``(None, why not)``: ``timeout`` (the worker overran the deadline and is
        ended), ``unavailable`` (no worker free by the deadline), ``error`` (the worker died)."""
        from concurrent.futures import CancelledError
        from concurrent.futures import TimeoutError as WaitTimeout  # the builtin TimeoutError from Python 3.11

        from pebble import ProcessExpired

        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None, "unavailable"
        # The first task of a pool also waits for the workers to start (once, beyond the item's deadline).
        wait = remaining if self.ready else remaining + _STARTUP_TIMEOUT_S
        future = self.pool.schedule(_worker_verify, (gold, pred), timeout=remaining)
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
_POOL_LOCK = threading.Lock()
_POOL_FAILURES = 0  # pools that broke before answering; after a few, math-verify runs in-process
_MAX_POOL_FAILURES = 3
_INPROCESS_JUDGE: _Judge | None = None
_STATS: Counter[str] = Counter()
_STATS_LOCK = threading.Lock()
_VERDICTS: OrderedDict[tuple[str, str], bool] = OrderedDict()
_VERDICTS_LOCK = threading.Lock()
_INFLIGHT: dict[tuple[str, str], threading.Event] = {}


def _count(key: str, n: int = 1) -> None:
    with _STATS_LOCK:
        _STATS[key] += n


def _get_pool() -> _Pool | None:
    """This process's worker pool (started on first use, restarted if it broke), or ``None`` where worker processes
    cannot be used."""
    global _POOL, _POOL_FAILURES
    with _POOL_LOCK:
        if _POOL is not None and _POOL.pid == os.getpid() and not _POOL.broken:
            return _POOL
        if _POOL is not None and _POOL.pid == os.getpid():
            _POOL_FAILURES += 0 if _POOL.ready else 1
            _POOL.close()
        _POOL = None
        if _POOL_FAILURES >= _MAX_POOL_FAILURES:
            return None
        try:
            _POOL = _Pool(_CONFIG.workers)
        except Exception:  # e.g. pebble missing, processes refused
            log.debug("grader worker pool failed to start", exc_info=True)
            _POOL_FAILURES = _MAX_POOL_FAILURES
            return None
        return _POOL


def shutdown() -> None:
    """Stop the worker processes (they are restarted on demand).  Registered with ``atexit`` when a pool starts."""
    global _POOL, _POOL_FAILURES
    with _POOL_LOCK:
        pool, _POOL = _POOL, None
        _POOL_FAILURES = 0
    if pool is not None and pool.pid == os.getpid():
        try:
            pool.close()
        except Exception:
            log.debug("grader worker pool did not stop cleanly", exc_info=True)


def _after_fork_in_child() -> None:
    """In a forked child: forget the parent's pool (its workers and threads belong to the parent) and locks."""
    global _POOL, _POOL_LOCK, _STATS_LOCK, _VERDICTS_LOCK
    pebble_pools = sys.modules.get("pebble.pool.process")
    if _POOL is not None and pebble_pools is not None:
        # pebble stops every worker of "its" pools at interpreter exit; in a forked child those are the parent's
        # workers, not the child's to stop (the child's own pool, if it starts one, is stopped by shutdown()).
        atexit.unregister(getattr(pebble_pools, "interpreter_shutdown", lambda: None))
    _INFLIGHT.clear()
    _POOL_LOCK = threading.Lock()
    _STATS_LOCK = threading.Lock()
    _VERDICTS_LOCK = threading.Lock()
    _POOL = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def warmup(timeout_s: float = _STARTUP_TIMEOUT_S) -> bool:
    """Start the math-verify workers now (a one-off cost of a few seconds) so that later items meet the budget.

    Returns ``True`` when math-verify is usable (a worker answered, or the in-process judge loaded).
    """
    try:
        if _CONFIG.isolation == "process":
            pool = _get_pool()
            if pool is not None and pool.warm(timeout_s):
                return True
        return _load_inprocess_judge() is not None
    except Exception:
        return False


def _load_inprocess_judge() -> _Judge | None:
    global _INPROCESS_JUDGE
    if _INPROCESS_JUDGE is None:
        try:
            judge = _Judge()
        except Exception:
            return None
        judge.warm_up()  # first uses of sympy's code paths are slow: not inside an item's budget
        _INPROCESS_JUDGE = judge
    return _INPROCESS_JUDGE


class _Alarm(BaseException):
    """Raised by the ``SIGALRM`` handler of the in-process fallback (a ``BaseException`` so that no library's
    ``except Exception`` swallows it)."""


def _raise_alarm(signum: int, frame: Any) -> None:
    raise _Alarm()


def _verify_inprocess(gold: str, pred: str, deadline: float) -> tuple[bool | None, str]:
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return None, "unavailable"
    judge = _load_inprocess_judge()  # one-off import, outside the alarm
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
    except _Alarm:
        return None, "timeout"
    except Exception:
        return False, "math_verify"
    finally:
        signal.signal(signal.SIGALRM, previous)
    return verdict, "math_verify"


def _verify_bounded(gold: str, pred: str, deadline: float) -> tuple[bool | None, str]:
    """math-verify's verdict within the deadline: ``(True/False, "math_verify")`` or ``(None, why not)``."""
    pool = _get_pool() if _CONFIG.isolation == "process" else None
    if pool is not None:
        try:
            return pool.verify(gold, pred, deadline)
        except Exception:  # the pool broke (e.g. all workers died): the next call starts a new one
            log.debug("grader worker pool failed", exc_info=True)
            return None, "error"
    return _verify_inprocess(gold, pred, deadline)  # no worker processes: in-process fallback


# ---------------------------------------------------------------------------------------------------------------
# Public grading API
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GradeResult:
    """A score with how it was decided.  ``method`` is one of: ``exact``, ``numeric``, ``math_verify``,
    ``no_answer``, ``no_reference``, ``rejected:<why>``, ``timeout``, ``unavailable``, ``error``.  The last three
    are not verdicts (the item scores 0 and is counted, see :func:`stats`)."""

    score: float
    method: str
    pred: str | None
    gold: str | None
    seconds: float
    mode: str = "lenient"

    def as_record(self) -> dict[str, Any]:
        """The result plus the grader's name, mode and version, ready to log next to the score."""
        record = asdict(self)
        record["grader"] = GRADER_NAME
        record["grader_version"] = GRADER_VERSION
        return record


_SLOW = ("math_verify", "timeout", "unavailable", "error")  # methods of items that needed math-verify
_NOT_DECIDED = ("timeout", "unavailable", "error")


def _cached(key: tuple[str, str]) -> bool | None:
    with _VERDICTS_LOCK:
        hit = _VERDICTS.get(key)
        if hit is not None:
            _VERDICTS.move_to_end(key)
        return hit


def _remember(key: tuple[str, str], verdict: bool) -> None:
    with _VERDICTS_LOCK:
        _VERDICTS[key] = verdict
        if len(_VERDICTS) > _VERDICT_CACHE_SIZE:
            _VERDICTS.popitem(last=False)


@dataclass
class _Item:
    pred: str | None
    gold: str | None
    result: tuple[float, str] | None = None  # decided without asking math-verify
    key: tuple[str, str] | None = None  # normalised (gold, pred) still to verify


def _prepare(response: Any, reference: Any, mode: str) -> _Item:
    """Everything up to (not including) math-verify: extraction, normalisation, fast paths, pre-checks."""
    pred = extract_answer(response, mode)
    gold = _reference_answer(reference)
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
    g = _normalise(gold) if len(gold) <= MAX_EXTRACTED_CHARS else gold
    p = _normalise(pred)
    if not p:
        item.result = (0.0, "no_answer")
        return item
    if g == p:
        item.result = (1.0, "exact")
        return item
    decided = _structural_verdict(g, p)
    if decided is not None:
        item.result = (1.0 if decided else 0.0, "numeric")
        return item
    for answer in (p, g):
        why = _precheck(answer)
        if why is not None:
            item.result = (0.0, f"rejected:{why}")
            return item
    key = (g, p)
    hit = _cached(key)
    if hit is not None:
        _count("cache_hits")
        item.result = (1.0 if hit else 0.0, "math_verify")
        return item
    item.key = key
    return item


def _finish(item: _Item, deadline: float) -> tuple[float, str]:
    """Score of a prepared item; asks math-verify if needed.  Only verdicts are cached: a timeout is an event of
    this moment's machine load, not a property of the answer, and the same pair is tried again next time."""
    if item.result is not None:
        return item.result
    key = item.key
    assert key is not None
    with _VERDICTS_LOCK:
        hit = _VERDICTS.get(key)  # another thread may have just decided it
        running = _INFLIGHT.get(key) if hit is None else None
        if hit is None and running is None:
            _INFLIGHT[key] = threading.Event()
    if hit is not None:
        return (1.0 if hit else 0.0, "math_verify")
    if running is not None:  # the same pair is being verified right now: wait for that verdict, not a new worker
        running.wait(max(0.0, deadline - time.monotonic()))
        hit = _cached(key)
        return (1.0 if hit else 0.0, "math_verify") if hit is not None else (0.0, "unavailable")
    try:
        verdict, method = _verify_bounded(key[0], key[1], deadline)
        if verdict is not None:
            _remember(key, verdict)
    finally:
        with _VERDICTS_LOCK:
            done = _INFLIGHT.pop(key, None)
        if done is not None:
            done.set()
    return (1.0 if verdict else 0.0, method)


def _tally(method: str, n: int = 1) -> None:
    method = method.split(":")[0]
    with _STATS_LOCK:
        _STATS["items"] += n
        _STATS[method] += n
        if method in _SLOW:
            _STATS["slow"] += n


def grade_detailed(
    response: Any, reference: Any, *, timeout_s: float | None = None, mode: str | None = None
) -> GradeResult:
    """Like :func:`grade`, returning a :class:`GradeResult` (score, method, extracted answers, seconds, mode)."""
    t0 = time.monotonic()
    mode = _CONFIG.mode if mode is None else _check_mode(mode)
    budget = timeout_s if timeout_s is not None and timeout_s > 0 else _CONFIG.timeout_s
    item = _Item(None, None)
    try:
        item = _prepare(response, reference, mode)
        score, method = _finish(item, t0 + budget)
    except _Alarm:  # pragma: no cover - an alarm that fired just after the in-process judge returned
        score, method = 0.0, "timeout"
    except Exception:
        log.debug("grader error", exc_info=True)
        score, method = 0.0, "error"
    _tally(method)
    return GradeResult(score, method, item.pred, item.gold, time.monotonic() - t0, mode)


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
    the math-verify work is spread over the worker pool.  Each item keeps its own time budget."""
    if len(responses) != len(references):
        raise ValueError("responses and references differ in length")
    return [r.score for r in grade_many_detailed(responses, references, timeout_s=timeout_s, mode=mode)]


def grade_many_detailed(
    responses: Sequence[Any],
    references: Sequence[Any],
    *,
    timeout_s: float | None = None,
    mode: str | None = None,
) -> list[GradeResult]:
    """:func:`grade_many` returning :class:`GradeResult` records."""
    mode = _CONFIG.mode if mode is None else _check_mode(mode)
    budget = timeout_s if timeout_s is not None and timeout_s > 0 else _CONFIG.timeout_s
    n = min(len(responses), len(references))
    results: list[GradeResult | None] = [None] * n
    pending: dict[tuple[str, str], list[tuple[int, _Item, float]]] = {}
    for i in range(n):
        t0 = time.monotonic()
        try:
            item = _prepare(responses[i], references[i], mode)
        except Exception:
            item = _Item(None, None, (0.0, "error"))
        if item.result is not None:
            results[i] = GradeResult(item.result[0], item.result[1], item.pred, item.gold, time.monotonic() - t0, mode)
            _tally(item.result[1])
        else:
            assert item.key is not None
            pending.setdefault(item.key, []).append((i, item, time.monotonic() - t0))

    def run(entries: list[tuple[int, _Item, float]]) -> None:
        t0 = time.monotonic()
        try:
            score, method = _finish(entries[0][1], t0 + budget)
        except Exception:
            score, method = 0.0, "error"
        spent = time.monotonic() - t0
        for i, item, prep in entries:
            results[i] = GradeResult(score, method, item.pred, item.gold, prep + spent, mode)
        _tally(method, len(entries))

    groups = list(pending.values())
    if _CONFIG.isolation == "process" and _CONFIG.workers > 1 and len(groups) > 1:
        with ThreadPoolExecutor(max_workers=_CONFIG.workers, thread_name_prefix="bandpo-grader") as ex:
            list(ex.map(run, groups))
    else:
        for entries in groups:
            run(entries)
    return [r if r is not None else GradeResult(0.0, "error", None, None, 0.0, mode) for r in results]


def grader_info() -> dict[str, Any]:
    """Provenance of the scores: record it next to every score (training logs, lm-eval results)."""
    return {
        "name": GRADER_NAME,
        "mode": _CONFIG.mode,
        "version": GRADER_VERSION,
        "id": grader_id(),
        "bandpo_version": _BANDPO_VERSION,
        "rules_revision": _RULES_REVISION,
        "math_verify_version": _MATH_VERIFY_VERSION,
        "latex2sympy2_extended_version": _dist_version("latex2sympy2_extended"),
        "sympy_version": _dist_version("sympy"),
        "pebble_version": _dist_version("pebble"),
        "isolation": _CONFIG.isolation,
        "timeout_s": _CONFIG.timeout_s,
        "workers": _CONFIG.workers,
    }


def grader_id(mode: str | None = None) -> str:
    """One string naming the rule that produced a score: ``name/mode@version``."""
    return f"{GRADER_NAME}/{_CONFIG.mode if mode is None else _check_mode(mode)}@{GRADER_VERSION}"


def stats() -> dict[str, int]:
    """Counters since start-up: ``items`` graded, how many each method decided (``exact``, ``numeric``,
    ``math_verify``, ``timeout``, ...), ``slow`` (items that needed math-verify), ``cache_hits`` and
    ``pool_starts``."""
    with _STATS_LOCK:
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
        """``grader_items``, ``grader_slow_frac`` (share that needed math-verify) and ``grader_timeouts`` (items
        not decided within their time budget: worker overran, no worker free, or a worker died; each scored 0)."""
        c = self.counts
        items = c.get("items", 0)
        return {
            "grader_items": items,
            "grader_slow_frac": c.get("slow", 0) / items if items else 0.0,
            "grader_timeouts": sum(c.get(k, 0) for k in _NOT_DECIDED),
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
