"""The cells and tables of the generated doc blocks: numbers as the leaderboard page rounds them (scores in points,
`bandpo.report.text.rounded`), intervals, the paired difference from the baseline, a Markdown table."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from bandpo.report.text import rounded

METRIC = "mean@8"  # the score the docs quote: the leaderboard's headline


def num(v: float, digits: int = 1, scale: float = 100.0, sign: bool = False) -> str:
    """A number as the docs print it (``—`` for NaN; ``sign``: always signed), rounded as the leaderboard page
    rounds it (`bandpo.report.text.rounded`: 6 significant digits, then half away from zero)."""
    if v is None or not np.isfinite(v):
        return "—"
    return f"{rounded(v, scale, digits):{'+' if sign else ''}.{digits}f}"


def ci(v: float, lo: float, hi: float, digits: int = 1, scale: float = 100.0, sign: bool = False) -> str:
    """``value [lo, hi]`` (`num`); "—" without a value."""
    if v is None or not np.isfinite(v):
        return "—"
    return f"{num(v, digits, scale, sign)} [{num(lo, digits, scale, sign)}, {num(hi, digits, scale, sign)}]"


def paired(r: pd.Series, label: str = METRIC) -> str:
    """The paired difference from the baseline with its t interval, or ``(baseline)``."""
    if r["entry"] == r["baseline"]:
        return "(baseline)"
    return ci(r[f"{label}_diff"], r[f"{label}_diff_t_ci_low"], r[f"{label}_diff_t_ci_high"], sign=True)


def md_table(head: Sequence[str], rows: Sequence[Sequence[str]], right: int = 1) -> str:
    """A Markdown table; the columns from ``right`` on are right-aligned."""
    align = ["---" if i < right else "---:" for i in range(len(head))]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines)


def row_series(frame: pd.DataFrame) -> list[pd.Series]:
    """The frame's rows, each a Series indexed by column."""
    return [r for _, r in frame.iterrows()]


def margin_text(v: float) -> str:
    """The verdict rule's margin δ (is the treatment better by at least δ?) in points; "—" when none was declared
    (NaN)."""
    return "—" if v != v else num(v)


def verdict_parts(p: pd.Series) -> tuple[str, str]:
    """A primary.csv score row's verdict in two parts: its words ("not better by 2 points", "undecided",
    "exploratory: no verdict") and how it was reached ("look 2 of 4", "single look", "single look, Holm, demoted",
    "a single look decides from n = 14" for an exploratory one)."""
    words = str(p["label"]).split(" (")[0]  # the words without what a label adds in parentheses
    if p["rule"] == "sequential":
        look = p.get("look", np.nan)
        return words, (f"look {int(look)} of {int(p['looks'])}" if look == look else "no look yet")
    if p["rule"] == "exploratory":
        need = p.get("n_needed", np.nan)
        return words, (f"a single look decides from n = {int(need)}" if need == need else "exploratory")
    return words, ("single look, Holm, demoted" if p.get("role") == "demoted" else "single look")


def verdict_cell(p: pd.Series) -> str:
    """A primary.csv score row's verdict with where it rests: "not better by 2 points (look 2 of 4, 10 pairs)",
    "not better by 2 points (single look, 10 pairs)", "exploratory: no verdict (a single look decides from n = 14,
    10 pairs)", a demoted primary's Holm verdict marked so."""
    words, how = verdict_parts(p)
    n = int(p["n"]) if p["n"] == p["n"] else int(p["n_pairs"])
    return f"{words} ({how}, {n} pairs)"
