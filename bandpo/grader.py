"""One answer grader for training rewards and for evaluation.

``grade(response, reference)`` returns 1.0 when the final answer of ``response`` is mathematically equivalent to
``reference`` and 0.0 otherwise.  The final answer is the content of the last ``\\boxed{...}`` (also a truncated
``\\boxed{42`` whose closing brace a stop sequence removed) or of the last ``Answer:`` / ``The final answer is`` /
``####`` line, whichever comes last in the text.  A reference may be a bare answer, a number, or a full solution
with a ``\\boxed{}`` or ``####`` line.  Answers are compared by, in order:

1. a normalised string comparison (whitespace, ``\\left``/``\\right``, ``\\dfrac``, degree signs, ...);
2. exact shortcuts that give math-verify's own verdict much faster: plain numbers (integers, thousands separators,
   decimals, ``a/b``, ``\\frac{a}{b}``; a decimal matches when both sides agree to 6 decimal places, as in
   math-verify), tuples, intervals and sets of plain numbers, and multiple-choice letters;
3. math-verify (``parse`` + ``verify``) for everything else.

Model output is untrusted.  Nothing here evaluates text (no ``eval``/``exec``/``sympify``); only math-verify's own
parser ever sees it.  ``grade`` never raises and returns within a bounded time whatever the input, from any thread
(``timeout_s``: 0.8 s by default, so under the 1 s per item that the benchmark requires):

* extraction is linear in the length of the text (reversed-text anchor searches, one brace scan, capped at 64 KiB);
* cheap pre-checks reject absurd answers before any parsing: too long, nested too deep, power towers, huge
  exponents or powers of powers, factorials, binomials, sums or products of huge numbers, huge literals;
* math-verify runs in a small pool of persistent worker processes.  A worker that has not answered by the item's
  deadline is killed (``SIGKILL``, which also ends C-level work that no signal handler can interrupt, such as a
  huge integer power) and replaced, while a second warm worker answers the next item.  This works the same in the
  main thread, in other threads and inside lm-eval, and leaves the caller's ``SIGALRM`` alone.  Starting the pool
  (importing math-verify, a few seconds) is a one-off cost per process, paid by :func:`warmup` or by the first
  item that needs math-verify.
* Where worker processes cannot be used (``mode="inprocess"``, or if they fail to start), math-verify runs in the
  calling process under a ``setitimer`` alarm in the main thread; in other threads only steps 1-2 are used.

Verdicts are cached per normalised (reference, answer) pair, and a pair already being verified by another thread
is waited for rather than verified twice.  Environment: ``BANDPO_GRADER_TIMEOUT_S``, ``BANDPO_GRADER_WORKERS``,
``BANDPO_GRADER_MAX_WORKERS``, ``BANDPO_GRADER_MODE`` (or :func:`configure`).

Every score should be logged with the grader's provenance: ``GRADER_NAME``, ``GRADER_VERSION`` (bandpo version,
rules revision and math-verify version) and :func:`grader_info`; :func:`grade_detailed` returns a record with the
score, the method that decided it and the extracted answers, and ``GradeResult.as_record()`` adds the provenance.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import numbers
import os
import re
import select
import signal
import string
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from fractions import Fraction
from importlib import metadata
from typing import Any

from bandpo import __version__ as _BANDPO_VERSION

__all__ = [
    "GRADER_NAME",
    "GRADER_VERSION",
    "GradeResult",
    "configure",
    "extract_answer",
    "grade",
    "grade_detailed",
    "grade_many",
    "grade_many_detailed",
    "grader_info",
    "shutdown",
    "stats",
    "warmup",
]

log = logging.getLogger(__name__)

# Bump when extraction, normalisation or pre-check rules change in a way that can change a score.
_RULES_REVISION = 1


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
DEFAULT_TIMEOUT_S = 0.8  # per-item wall-clock budget; the hard bound is 1 s
_STARTUP_TIMEOUT_S = 60.0  # one-off wait for the first worker of a process to import math-verify
_VERDICT_CACHE_SIZE = 8192


@dataclass
class _Config:
    timeout_s: float = DEFAULT_TIMEOUT_S
    workers: int = 2  # kept warm
    max_workers: int = 4  # started when concurrent callers find all workers busy
    mode: str = "subprocess"  # "subprocess" | "inprocess"


def _env_config() -> _Config:
    cfg = _Config()
    try:
        timeout_s = float(os.environ.get("BANDPO_GRADER_TIMEOUT_S", cfg.timeout_s))
        if timeout_s > 0:
            cfg.timeout_s = timeout_s
    except ValueError:
        pass
    try:
        cfg.workers = max(1, int(os.environ.get("BANDPO_GRADER_WORKERS", cfg.workers)))
        cfg.max_workers = max(cfg.workers, int(os.environ.get("BANDPO_GRADER_MAX_WORKERS", cfg.max_workers)))
    except ValueError:
        pass
    mode = os.environ.get("BANDPO_GRADER_MODE", cfg.mode)
    if mode in ("subprocess", "inprocess"):
        cfg.mode = mode
    if os.name != "posix":
        cfg.mode = "inprocess"
    return cfg


_CONFIG = _env_config()


def configure(
    *,
    timeout_s: float | None = None,
    workers: int | None = None,
    max_workers: int | None = None,
    mode: str | None = None,
) -> None:
    """Change the per-item time budget, the number of warm workers, the most workers concurrent callers may use,
    or the mode (``"subprocess"`` or ``"inprocess"``).

    Changing the workers or the mode stops the current worker pool; the next grading call starts a new one.
    """
    if timeout_s is not None:
        if not timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        _CONFIG.timeout_s = float(timeout_s)
    restart = False
    if workers is not None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        restart |= workers != _CONFIG.workers
        _CONFIG.workers = int(workers)
    if max_workers is not None:
        restart |= max_workers != _CONFIG.max_workers
        _CONFIG.max_workers = int(max_workers)
    _CONFIG.max_workers = max(_CONFIG.max_workers, _CONFIG.workers)
    if mode is not None:
        if mode not in ("subprocess", "inprocess"):
            raise ValueError("mode must be 'subprocess' or 'inprocess'")
        restart |= mode != _CONFIG.mode
        _CONFIG.mode = mode
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


def extract_answer(text: Any) -> str | None:
    """Final answer of a model response, or ``None`` if it has none.

    The answer is the content of the last ``\\boxed{...}``/``\\fbox{...}`` (a missing closing brace is tolerated)
    or the rest of the last ``Answer:`` / ``The final answer is`` / ``####`` line, whichever comes last.  A
    ``\\boxed`` inside the chosen line wins over the line itself.  Runs in time linear in ``len(text)``; a
    ``\\boxed`` argument is read up to 64 KiB.
    """
    try:
        s = _to_text(text)
        if not s:
            return None
        reversed_s = s[::-1]
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
    found = extract_answer(s) if ("\\boxed" in s or "\\fbox" in s or "####" in s) else None
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


def _structural_verdict(g: str, p: str) -> bool | None:
    """Decide without math-verify when both answers are plain numbers, multiple-choice letters, or tuples,
    intervals or sets of plain numbers (the same verdict math-verify gives, much faster); else ``None``."""
    gn, pn = _plain_number(g), _plain_number(p)
    if gn is not None and pn is not None:
        return _numbers_equal(gn, pn)
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
    """Let the kernel end this worker (SIGXCPU) if one request burns ``seconds`` of CPU: the parent kills it much
    sooner, but if the parent itself died mid-request nobody else would stop a C-level computation."""
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
    try:
        import resource

        limit = 4 << 30
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard == resource.RLIM_INFINITY or hard > limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except Exception:
        pass


_TEST_HANG_MARKER = "\\bandpotesthang"


def _worker_main() -> None:
    """Entry point of a worker process: JSON lines in on stdin, JSON lines out on the original stdout."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    channel = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # anything a library prints must not corrupt the protocol
    sys.stdout = open(os.devnull, "w")
    logging.disable(logging.CRITICAL)
    _limit_worker_memory()

    def send(obj: dict) -> None:
        channel.write(json.dumps(obj).encode() + b"\n")

    try:
        judge = _Judge()
        judge.warm_up()
    except Exception as exc:
        send({"ready": False, "error": f"{type(exc).__name__}: {exc}"[:500]})
        return
    send({"ready": True, "math_verify": _MATH_VERIFY_VERSION, "pid": os.getpid()})
    # Test hook (off unless the environment asks for it): a gold answer equal to this marker makes the worker hang,
    # standing in for a C-level computation that nothing but killing the process can stop.
    hang_marker = _TEST_HANG_MARKER if os.environ.get("BANDPO_GRADER_TEST_HOOKS") == "1" else None
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return
        rid = None
        try:
            req = json.loads(line)
            rid = req["i"]
            if hang_marker is not None and req["g"] == hang_marker:
                time.sleep(3600)
            _arm_cpu_guard()
            send({"i": rid, "v": judge(req["g"], req["p"])})
        except Exception as exc:
            send({"i": rid, "v": False, "e": type(exc).__name__})


_WORKER_BOOT = (
    "import os, sys; sys.path.insert(0, os.environ['BANDPO_GRADER_PKG_PARENT']); "
    "import bandpo.grader as g; g._worker_main()"
)


class _WorkerGone(Exception):
    pass


class _Worker:
    def __init__(self) -> None:
        env = dict(os.environ)
        env["BANDPO_GRADER_PKG_PARENT"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONSAFEPATH"] = "1"  # do not put the caller's working directory on the worker's sys.path
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_BOOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
            start_new_session=True,  # no SIGINT from the caller's terminal
        )
        self._fd = self.proc.stdout.fileno()
        self._buf = b""
        self._next_id = 0
        self.ready = False
        self.failed: str | None = None

    def _readline(self, deadline: float) -> bytes | None:
        """One line from the worker; ``None`` at the deadline; raises ``_WorkerGone`` at end of file."""
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            poller = select.poll()
            poller.register(self._fd, select.POLLIN)
            if not poller.poll(math.ceil(remaining * 1000) if remaining > 0 else 0):  # 0: just look
                if time.monotonic() >= deadline:
                    return None
                continue
            chunk = os.read(self._fd, 65536)
            if not chunk:
                raise _WorkerGone("worker closed its output")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def wait_ready(self, deadline: float) -> bool:
        if self.ready:
            return True
        try:
            while True:
                line = self._readline(deadline)
                if line is None:
                    return False
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if isinstance(msg, dict) and "ready" in msg:
                    if msg["ready"]:
                        self.ready = True
                        return True
                    self.failed = str(msg.get("error", "worker failed to start"))
                    return False
        except (_WorkerGone, OSError) as exc:
            self.failed = self.failed or str(exc) or "worker exited"
            return False

    def ask(self, gold: str, pred: str, deadline: float) -> bool | None:
        """math-verify's verdict, or ``None`` if the worker did not answer by the deadline."""
        self._next_id += 1
        rid = self._next_id
        payload = json.dumps({"i": rid, "g": gold, "p": pred}).encode() + b"\n"
        self.proc.stdin.write(payload)  # small (answers are capped) and the pipe is empty: does not block
        self.proc.stdin.flush()
        while True:
            line = self._readline(deadline)
            if line is None:
                return None
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict) and msg.get("i") == rid:
                return bool(msg.get("v"))

    def kill(self) -> None:
        try:
            self.proc.kill()
        except Exception:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except Exception:
                pass
        try:
            self.proc.wait(timeout=0.2)  # a SIGKILLed process is reaped in milliseconds
        except Exception:
            pass

    def close(self) -> None:
        """Polite stop: end of file on stdin makes the worker exit; kill it if it does not."""
        try:
            self.proc.stdin.close()
        except Exception:
            pass
        try:
            self.proc.wait(timeout=0.5)
        except Exception:
            pass
        self.kill()


class _Pool:
    """Persistent math-verify workers: ``size`` kept warm, up to ``max_size`` under concurrent use.  A worker that
    overruns a deadline is killed and replaced.  Workers are only read while holding the pool's lock, or by the
    one thread that has acquired them."""

    _MAX_START_FAILURES = 3
    _POLL_S = 0.02

    def __init__(self, size: int, max_size: int) -> None:
        self.size = size
        self.max_size = max(size, max_size)
        self.pid = os.getpid()
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._alive = 0
        self._ever_ready = False
        self._start_failures = 0
        self.broken: str | None = None

    def _spawn_locked(self) -> None:
        try:
            self._idle.append(_Worker())
        except Exception as exc:  # e.g. no sys.executable, fork refused
            self.broken = f"cannot start worker: {type(exc).__name__}: {exc}"
            return
        self._alive += 1
        _count("worker_starts")

    def _top_up_locked(self) -> None:
        while self.broken is None and self._alive < self.size:
            self._spawn_locked()

    def _take_ready_locked(self) -> _Worker | None:
        """An idle worker that is ready (checking starting ones without blocking), or ``None``."""
        chosen = None
        for worker in self._idle:
            if worker.ready or worker.wait_ready(time.monotonic()):
                chosen = worker
                break
        self._take_failed_locked()
        if chosen is not None:
            self._idle.remove(chosen)
            self._ever_ready = True
            self._start_failures = 0
        return chosen

    def acquire(self, deadline: float) -> _Worker | None:
        """A ready worker, or ``None`` if none is free by ``deadline``.  The first start of the pool (importing
        math-verify, a few seconds) is waited for once, beyond the deadline."""
        with self._cond:
            if not self._ever_ready:
                deadline = max(deadline, time.monotonic() + _STARTUP_TIMEOUT_S)
            while True:
                self._top_up_locked()
                if self.broken is not None:
                    return None
                worker = self._take_ready_locked()
                if worker is not None:
                    return worker
                if self._ever_ready and not self._idle and self._alive < self.max_size:
                    self._spawn_locked()  # all busy: add a worker for the calls to come
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(min(remaining, self._POLL_S))

    def release(self, worker: _Worker) -> None:
        with self._cond:
            self._idle.append(worker)
            self._cond.notify()

    def discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._cond:
            self._alive -= 1
            self._top_up_locked()
            self._cond.notify()

    def warm(self, timeout_s: float) -> bool:
        """Start the warm workers and wait until they are all ready; ``True`` if at least one is."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                self._top_up_locked()
                if self.broken is not None:
                    return False
                for worker in self._idle:
                    if not worker.ready:
                        worker.wait_ready(time.monotonic())
                ready = sum(w.ready for w in self._idle)
                if ready:
                    self._ever_ready = True
                if ready >= self.size or (ready and time.monotonic() >= deadline):
                    return True
                if time.monotonic() >= deadline:
                    return False
                self._take_failed_locked()
                self._cond.wait(self._POLL_S)

    def _take_failed_locked(self) -> None:
        """Drop idle workers that failed to start (e.g. math-verify missing); give up after a few."""
        for worker in [w for w in self._idle if w.failed is not None]:
            self._idle.remove(worker)
            worker.kill()
            self._alive -= 1
            self._start_failures += 1
            if self._start_failures >= self._MAX_START_FAILURES:
                self.broken = worker.failed

    def close(self) -> None:
        with self._cond:
            workers, self._idle = self._idle, []
            self._alive = 0
        for w in workers:
            w.close()

    def forget(self) -> None:
        """In a forked child: drop the parent's pipes without touching the parent's workers."""
        for w in self._idle:
            for f in (w.proc.stdin, w.proc.stdout):
                try:
                    f.close()
                except Exception:
                    pass
        self._idle = []


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()
_INPROCESS_JUDGE: _Judge | None = None
_STATS: dict[str, int] = {}
_STATS_LOCK = threading.Lock()
_VERDICTS: OrderedDict[tuple[str, str], tuple[float, str]] = OrderedDict()
_VERDICTS_LOCK = threading.Lock()
_INFLIGHT: dict[tuple[str, str], threading.Event] = {}


def _count(key: str) -> None:
    with _STATS_LOCK:
        _STATS[key] = _STATS.get(key, 0) + 1


def _get_pool() -> _Pool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():
            _POOL = _Pool(_CONFIG.workers, _CONFIG.max_workers)
        return _POOL


def shutdown() -> None:
    """Stop the worker processes (they are restarted on demand).  Registered with ``atexit``."""
    global _POOL
    with _POOL_LOCK:
        pool, _POOL = _POOL, None
    if pool is not None and pool.pid == os.getpid():
        pool.close()


def _after_fork_in_child() -> None:
    global _POOL, _POOL_LOCK, _STATS_LOCK, _VERDICTS_LOCK
    _INFLIGHT.clear()
    _POOL_LOCK = threading.Lock()
    _STATS_LOCK = threading.Lock()
    _VERDICTS_LOCK = threading.Lock()
    if _POOL is not None:
        _POOL.forget()
    _POOL = None


atexit.register(shutdown)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def warmup(timeout_s: float = _STARTUP_TIMEOUT_S) -> bool:
    """Start the math-verify workers now (a one-off cost of a few seconds) so that later items meet the budget.

    Returns ``True`` when math-verify is usable (workers ready, or the in-process judge loaded).
    """
    try:
        if _CONFIG.mode == "subprocess":
            if _get_pool().warm(timeout_s):
                return True
        return _load_inprocess_judge() is not None
    except Exception:
        return False


def _load_inprocess_judge() -> _Judge | None:
    global _INPROCESS_JUDGE
    if _INPROCESS_JUDGE is None:
        try:
            _INPROCESS_JUDGE = _Judge()
        except Exception:
            return None
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
    """math-verify's verdict within the deadline: ``(True/False, method)`` or ``(None, why not)``."""
    if _CONFIG.mode == "subprocess":
        pool = _get_pool()
        worker = pool.acquire(deadline) if pool.broken is None else None
        if worker is not None:
            try:
                verdict = worker.ask(gold, pred, deadline)
            except Exception:  # the worker died (e.g. a crash in a C extension)
                verdict = None
                worker.failed = "crashed"
            if verdict is None:
                _count("worker_kills" if worker.failed is None else "worker_crashes")
                pool.discard(worker)
                return None, "timeout" if worker.failed is None else "error"
            pool.release(worker)
            return verdict, "math_verify"
        if pool.broken is None:
            return None, "unavailable"  # all workers busy (or still starting) until the deadline
    return _verify_inprocess(gold, pred, deadline)  # no worker processes: in-process fallback


# ---------------------------------------------------------------------------------------------------------------
# Public grading API
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GradeResult:
    """A score with how it was decided.  ``method`` is one of: ``exact``, ``numeric``, ``math_verify``,
    ``no_answer``, ``no_reference``, ``rejected:<why>``, ``timeout``, ``unavailable``, ``error``."""

    score: float
    method: str
    pred: str | None
    gold: str | None
    seconds: float

    def as_record(self) -> dict[str, Any]:
        """The result plus the grader's name and version, ready to log next to the score."""
        record = asdict(self)
        record["grader"] = GRADER_NAME
        record["grader_version"] = GRADER_VERSION
        return record


def _cached(key: tuple[str, str]) -> tuple[float, str] | None:
    with _VERDICTS_LOCK:
        hit = _VERDICTS.get(key)
        if hit is not None:
            _VERDICTS.move_to_end(key)
        return hit


def _remember(key: tuple[str, str], value: tuple[float, str]) -> None:
    with _VERDICTS_LOCK:
        _VERDICTS[key] = value
        if len(_VERDICTS) > _VERDICT_CACHE_SIZE:
            _VERDICTS.popitem(last=False)


@dataclass
class _Item:
    pred: str | None
    gold: str | None
    result: tuple[float, str] | None = None  # decided without math-verify
    key: tuple[str, str] | None = None  # normalised (gold, pred) still to verify


def _prepare(response: Any, reference: Any) -> _Item:
    """Everything up to (not including) math-verify: extraction, normalisation, fast paths, pre-checks."""
    pred = extract_answer(response)
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
        item.result = hit
        return item
    item.key = key
    return item


def _finish(item: _Item, deadline: float) -> tuple[float, str]:
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
        return hit
    if running is not None:  # the same pair is being verified right now: wait for that verdict, not a new worker
        running.wait(max(0.0, deadline - time.monotonic()))
        return _cached(key) or (0.0, "unavailable")
    try:
        verdict, method = _verify_bounded(key[0], key[1], deadline)
        result = (1.0 if verdict else 0.0, method)
        if method in ("math_verify", "timeout"):
            _remember(key, result)
    finally:
        with _VERDICTS_LOCK:
            done = _INFLIGHT.pop(key, None)
        if done is not None:
            done.set()
    return result


def grade_detailed(response: Any, reference: Any, *, timeout_s: float | None = None) -> GradeResult:
    """Like :func:`grade`, returning a :class:`GradeResult` (score, method, extracted answers, seconds)."""
    t0 = time.monotonic()
    budget = timeout_s if timeout_s is not None and timeout_s > 0 else _CONFIG.timeout_s
    item = _Item(None, None)
    try:
        item = _prepare(response, reference)
        score, method = _finish(item, t0 + budget)
    except _Alarm:  # pragma: no cover - an alarm that fired just after the in-process judge returned
        score, method = 0.0, "timeout"
    except Exception:
        log.debug("grader error", exc_info=True)
        score, method = 0.0, "error"
    _count(method.split(":")[0])
    return GradeResult(score, method, item.pred, item.gold, time.monotonic() - t0)


def grade(response: Any, reference: Any) -> float:
    """1.0 if the final answer of ``response`` is equivalent to ``reference``, else 0.0.  Never raises."""
    return grade_detailed(response, reference).score


def grade_many(responses: Sequence[Any], references: Sequence[Any], *, timeout_s: float | None = None) -> list[float]:
    """``[grade(r, g) for r, g in zip(responses, references)]``, faster: identical pairs are verified once and
    the math-verify work is spread over the worker pool.  Each item keeps its own time budget."""
    if len(responses) != len(references):
        raise ValueError("responses and references differ in length")
    return [r.score for r in grade_many_detailed(responses, references, timeout_s=timeout_s)]


def grade_many_detailed(
    responses: Sequence[Any], references: Sequence[Any], *, timeout_s: float | None = None
) -> list[GradeResult]:
    """:func:`grade_many` returning :class:`GradeResult` records."""
    budget = timeout_s if timeout_s is not None and timeout_s > 0 else _CONFIG.timeout_s
    n = min(len(responses), len(references))
    results: list[GradeResult | None] = [None] * n
    pending: dict[tuple[str, str], list[tuple[int, _Item, float]]] = {}
    for i in range(n):
        t0 = time.monotonic()
        try:
            item = _prepare(responses[i], references[i])
        except Exception:
            item = _Item(None, None, (0.0, "error"))
        if item.result is not None:
            results[i] = GradeResult(item.result[0], item.result[1], item.pred, item.gold, time.monotonic() - t0)
            _count(item.result[1].split(":")[0])
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
            results[i] = GradeResult(score, method, item.pred, item.gold, prep + spent)
            _count(method.split(":")[0])

    groups = list(pending.values())
    parallel = _CONFIG.mode == "subprocess" and _CONFIG.workers > 1 and len(groups) > 1
    if parallel:
        with ThreadPoolExecutor(max_workers=_CONFIG.workers, thread_name_prefix="bandpo-grader") as ex:
            list(ex.map(run, groups))
    else:
        for entries in groups:
            run(entries)
    return [r if r is not None else GradeResult(0.0, "error", None, None, 0.0) for r in results]


def grader_info() -> dict[str, Any]:
    """Provenance of the scores: record it next to every score (training logs, lm-eval results)."""
    return {
        "name": GRADER_NAME,
        "version": GRADER_VERSION,
        "bandpo_version": _BANDPO_VERSION,
        "rules_revision": _RULES_REVISION,
        "math_verify_version": _MATH_VERIFY_VERSION,
        "latex2sympy2_extended_version": _dist_version("latex2sympy2_extended"),
        "sympy_version": _dist_version("sympy"),
        "mode": _CONFIG.mode,
        "timeout_s": _CONFIG.timeout_s,
        "workers": _CONFIG.workers,
        "max_workers": _CONFIG.max_workers,
    }


def stats() -> dict[str, int]:
    """Counters since start-up: how many scores each method decided, worker starts and kills, cache hits."""
    with _STATS_LOCK:
        return dict(_STATS)
