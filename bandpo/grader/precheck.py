"""Cheap pre-checks that refuse absurd answers before math-verify parses them.

math-verify (sympy underneath) can take unbounded time or memory on some inputs: power towers, huge exponents or
powers of powers, factorials, binomials, sums or products of huge numbers, huge literals, deep nesting.  These
checks are linear in the (already normalised, at most :data:`MAX_ANSWER_CHARS` long) answer.
"""

from __future__ import annotations

import re

from bandpo.grader.extract import scan_braced

MAX_ANSWER_CHARS = 512  # longer normalised answers are not handed to math-verify
MAX_NESTING = 8  # bracket nesting ((, [, {) beyond this makes the LaTeX parser slow: rejected
MAX_LITERAL_DIGITS = 60  # integer literals with more digits are rejected
MAX_EXPONENT = 100_000  # numeric exponents above this are rejected
MAX_COMBINATORIAL_ARG = 10_000  # n!, \binom{n}{k} with literals above this are rejected
MAX_POWER_BITS = 1_000_000  # estimated bits of a numeric power (chains and powers of powers multiply)
MAX_SERIES_BOUND = 1_000  # \sum / \prod with literals above this are rejected

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
        return scan_braced(s, i + 1)
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


def precheck(s: str) -> str | None:
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
