"""Normalisation of answers and the fast structural verdicts that give math-verify's own verdict much faster.

After :func:`normalise` (whitespace, ``\\left``/``\\right``, ``\\dfrac``, degree signs, ...),
:func:`structural_verdict` decides plain numbers (integers, thousands separators, decimals, ``a/b``,
``\\frac{a}{b}``; a decimal matches when both sides agree to 6 decimal places, as in math-verify), rational
multiples of a square root or of pi, multiple-choice letters, and tuples, intervals and sets of plain numbers.
Anything else is left to math-verify (``None``).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from bandpo.grader.extract import scan_braced
from bandpo.grader.precheck import MAX_LITERAL_DIGITS

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


def normalise(ans: str) -> str:
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
    if m and s.endswith("}") and scan_braced(s, m.end()) == s[m.end() : -1]:
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


def structural_verdict(g: str, p: str) -> bool | None:
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
