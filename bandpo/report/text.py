"""Numbers and Markdown cells as every page and doc of the report prints them: one rounding (`rounded`), so that
a value read back from a published csv prints as the value it was written from."""

from __future__ import annotations

import html
import math
from decimal import ROUND_HALF_UP, Decimal
from typing import Any


def as_float(v: Any) -> float:
    """``v`` as a float; NaN for what is not a number (None, text)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return f


def rounded(v: float, scale: float = 1.0, digits: int = 1) -> Decimal:
    """``v * scale`` to ``digits`` decimals as every page and doc prints it: first to the 6 significant digits the
    csv tables hold (`bandpo.core.files.write_csv`), then half away from zero on that decimal text. A value read back
    from a csv and the full-precision value it was written from thus print the same, ties included (-0.0125 prints
    -1.3 at scale 100 either way; binary rounding of the float would print -1.2 or -1.3 depending on its last
    bit)."""
    v = float(v)
    text = f"{v:.6g}" if abs(v) < 1e6 else repr(v)  # large values (seconds, counts) keep their integer digits
    return (Decimal(text) * Decimal(repr(float(scale)))).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP)


def fmt(v: Any, scale: float = 1.0, digits: int = 1) -> str:
    """``v * scale`` to ``digits`` decimals (`rounded`); "—" for what is not a finite number."""
    f = as_float(v)
    return "—" if not math.isfinite(f) else f"{rounded(f, scale, digits):.{digits}f}"


def points(v: Any, sign: bool = True) -> str:
    """A score difference in points, one decimal (`fmt` at scale 100), signed unless ``sign`` is False."""
    text = fmt(v, 100.0, 1)
    return text if not sign or text.startswith("-") or text == "—" else "+" + text


def fmt_ci(v: Any, lo: Any, hi: Any, scale: float = 100.0, digits: int = 1) -> str:
    """``value [lo, hi]`` (`fmt`, scores in percent by default); the value alone without both interval ends."""
    s = fmt(v, scale, digits)
    if s == "—" or math.isnan(as_float(lo)) or math.isnan(as_float(hi)):
        return s
    return f"{s} [{fmt(lo, scale, digits)}, {fmt(hi, scale, digits)}]"


def fmt_seconds(v: Any) -> str:
    """A duration in the unit that reads best: seconds, minutes or hours."""
    f = as_float(v)
    if math.isnan(f):
        return "—"
    if f < 10:
        return f"{f:.1f} s"
    if f < 120:
        return f"{f:.0f} s"
    if f < 7200:
        return f"{f / 60:.1f} min"
    return f"{f / 3600:.1f} h"


def md_cell(text: str) -> str:
    """Markdown table cell: HTML-escaped (renderers pass raw HTML through) and with | and newlines neutralised."""
    return html.escape(text, quote=False).replace("|", "\\|").replace("\n", " ").replace("\r", " ")
