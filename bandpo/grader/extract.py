"""Final answers of model responses and of references: linear-time extraction that never evaluates anything.

Every function here runs in time linear in the length of its input (reversed-text anchor searches, one brace scan,
capped at 64 KiB) and never raises on untrusted input.
"""

from __future__ import annotations

import numbers
import re
import string
from typing import Any

from bandpo.grader import config, dapo

MAX_EXTRACTED_CHARS = 4096  # longer extracted answers are rejected before any normalisation


def to_text(obj: Any) -> str | None:
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


def scan_braced(text: str, start: int, limit: int | None = None) -> str:
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
        return scan_braced(text, i + 1, _MAX_SCAN_CHARS)
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
    s = to_text(text)
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


def boxed_math_answer(text: str) -> str | None:
    """The answer verl's ``\\boxed{}`` MATH rule compares (``verl.utils.reward_score.math_reward``, its own
    functions, imported at first use): the content of the last ``\\boxed{...}`` / ``\\fbox{...}`` of the whole
    text; ``None`` when there is none or it is not closed (verl's rule then scores 0)."""
    from verl.utils.reward_score import math_reward  # lazy: verl loads only where the math-boxed mode grades

    boxed = math_reward.last_boxed_only_string(text)
    if boxed is None:
        return None
    try:
        return math_reward.remove_boxed(boxed)
    except AssertionError:  # verl's compute_score catches the same error and scores 0
        return None


def extract_answer(text: Any, mode: str | None = None) -> str | None:
    """Final answer of a model response, or ``None`` if it has none.

    ``lenient`` (the default mode): the content of the last ``\\boxed{...}``/``\\fbox{...}`` (a missing closing
    brace is tolerated) or the rest of the last ``Answer:`` / ``The final answer is`` / ``####`` line, whichever
    comes last; a ``\\boxed`` inside the chosen line wins over the line itself.  ``strict-answer-line``: the rest
    of the last ``Answer:`` line only (a ``\\boxed`` on it is unwrapped).  Runs in time linear in ``len(text)``; a
    ``\\boxed`` argument is read up to 64 KiB.  ``math-dapo``: the answer verl's ``math_dapo`` rule compares (the
    Minerva-normalised last ``Answer:`` line of the last 300 characters, else the last ``\\boxed{}`` of the last
    100; `bandpo.grader.dapo.prediction`), ``None`` for none or an empty one; ``math-dapo-paper`` the same without
    the ``\\boxed{}`` fallback.  ``math-boxed``: the content of the last closed ``\\boxed{}`` / ``\\fbox{}`` as
    verl's ``math_reward`` reads it.  ``mode=None`` uses the configured mode.
    """
    mode = config.current().mode if mode is None else config.check_mode(mode)
    try:
        s = to_text(text)
        if not s:
            return None
        if mode in ("math-dapo", "math-dapo-paper"):
            pred, _ = dapo.prediction(s, box_fallback=mode == "math-dapo")
            return pred if pred and pred != dapo.INVALID else None
        if mode == "math-boxed":
            return boxed_math_answer(s) or None
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


def reference_answer(reference: Any) -> str | None:
    s = to_text(reference)
    if s is None:
        return None
    found = extract_answer(s, "lenient") if ("\\boxed" in s or "\\fbox" in s or "####" in s) else None
    return (found if found is not None else s.strip()) or None
