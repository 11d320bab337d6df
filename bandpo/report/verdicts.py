"""The answer at the top of a leaderboard page: one row per tier (each model of each primary comparison of scores)
with the verdict, what it shows and what it does not, the estimate with its interval, the look and pairs it rests
on and the verdicts an independent rerun would give; and the definitions of the verdict words (`WORDS`), the one
place they are written.

The rule (`bandpo.stats.rule`) tests H0: Δ <= 0 against H1: Δ >= δ. So "better" shows a gain above 0, not a gain
of δ (at many pairs it is a plain test of Δ > 0), and "not better by δ" rules out a gain of δ or more without showing
that the treatment is worse or that the two are equivalent: those are read from the estimate's interval, and the
row says which of them the interval shows.

The section sits between two markers under the page's title (`START`, `END`). `bandpo.report.build` writes it from
the board's own primaries; `write_section` rewrites it on a published page from that folder's primary.csv and the
primary.csv of each published folder of `PARTS` (the real LM, a profile of its own), so that the top-level page
answers for every tier.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd

from bandpo.core.files import atomic_write_text
from bandpo.report.text import as_float, fmt, md_cell, points
from bandpo.stats.rule import BETTER, NOT_BETTER, UNDECIDED, WORDS

PARTS: tuple[str, ...] = ("real-lm",)
"""Published folders (results/FOLDER/, a profile of its own) whose primaries join the top-level page's answer and
the README's headline, after the embedded profile's."""
START, END = "<!-- verdicts:top -->", "<!-- /verdicts:top -->"
TITLE = "The answer: is BandPO-KL better than GRPO?"
HEAD = ["tier", "verdict", "look, pairs", "estimate, paired 95% t", "what the verdict shows", "what it does not show",
        "a rerun: better / not better / undecided"]  # fmt: skip
RERUN = (
    "a rerun: the probability of each verdict word in an independent rerun of the same design, simulated at the "
    "observed mean and SD of the pairs (a sequential design always decides by n_max, so its undecided is 0)"
)


def shows(p: pd.Series) -> tuple[str, str]:
    """(what the verdict shows, what it does not) for a primary.csv row of scores, the second read from the
    estimate's interval against 0 and ±δ."""
    lo, hi, margin = as_float(p.get("ci_low")), as_float(p.get("ci_high")), as_float(p.get("margin"))
    d = points(margin, sign=False)
    verdict = str(p.get("verdict") or "")
    interval = f"[{points(lo)}, {points(hi)}]"
    if verdict == BETTER:
        not_ = f"a gain of {d} points or more ({interval} reaches below {d})" if lo < margin else "—"
        return "a gain above 0", not_
    if verdict == NOT_BETTER:
        if hi >= 0:
            worse = f"worse ({interval} includes 0)"
        else:
            worse = f"worse by the rule ({interval} lies below 0: an estimate, not the verdict)"
        if lo < -margin or hi > margin:
            equal = f"equivalence within ±{d} ({interval} reaches beyond)"
        else:
            equal = f"equivalence by the rule ({interval} lies within ±{d}: an estimate, not the verdict)"
        return f"no gain of {d} points or more", f"{worse}; {equal}"
    need = as_float(p.get("n_needed"))
    more = f"; a single look decides from n = {int(need)}" if math.isfinite(need) else ""
    if verdict == UNDECIDED:
        return "nothing either way" + more, f"a direction ({interval} holds both signs)"
    return "no verdict (exploratory)" + more, "any claim: an estimate only"


def rerun_text(p: pd.Series) -> str:
    """The "better / not better / undecided" probabilities of a rerun (`RERUN`); "—" where none was simulated."""
    vals = [as_float(p.get(c)) for c in ("rerun_better", "rerun_not_better", "rerun_undecided")]
    return " / ".join(fmt(v, 1.0, 2) for v in vals) if all(math.isfinite(v) for v in vals) else "—"


def tier_rows(primary: pd.DataFrame | None, folder: str = "") -> list[list[str]]:
    """One row (`HEAD`) per primary comparison of scores (role primary) of a primary.csv; its tier named by the
    model (and the published folder, when not the page's own)."""
    if primary is None or primary.empty:
        return []
    rows = []
    scores = primary[(primary["role"] == "primary") & ~primary["metric"].astype(str).str.startswith("entropy")]
    for _, p in scores.iterrows():
        tier = str(p["model"]) + (f" ({folder})" if folder else "")
        if str(p.get("experiment")) not in ("main", ""):
            tier += f", {p['experiment']}"
        words = str(p.get("label") or p.get("verdict")).split(" (")[0]
        look = as_float(p.get("look"))
        how = f"look {int(look)} of {int(p['looks'])}" if math.isfinite(look) else str(p.get("rule"))
        interval = f"[{points(p['ci_low'])}, {points(p['ci_high'])}]"
        est = f"{p['treatment']} − {p['control']} = {points(p['difference'])} {interval}"
        did, did_not = shows(p)
        rows.append([tier, words, f"{how}, {int(p['n'])} pairs", est + " points", did, did_not, rerun_text(p)])
    return rows


def section_markdown(rows: list[list[str]]) -> str:
    """The section as Markdown: its heading, the table and the words' definitions (`WORDS`)."""
    if not rows:
        return ""
    lines = [START, f"## {TITLE}", "", "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(md_cell(c) for c in r) + " |" for r in rows]
    lines += ["", *(f"- {md_cell(w)}" for w in WORDS.values()), f"- {md_cell(RERUN)}", "", END]
    return "\n".join(lines)


def section_html(rows: list[list[str]]) -> str:
    """The section as HTML (every cell escaped)."""
    if not rows:
        return ""
    e = html.escape
    head = "".join(f'<th scope="col">{e(h)}</th>' for h in HEAD)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows)
    words = "".join(f"<li>{e(w)}</li>" for w in (*WORDS.values(), RERUN))
    return (f'{START}<section id="answer" class="answer"><h2>{e(TITLE)}</h2><div class="scroll"><table class="answer">'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div><ul class=\"words\">{words}</ul>"
            f"</section>{END}")  # fmt: skip


def published_rows(dest: str | Path, parts: tuple[str, ...] = PARTS) -> list[list[str]]:
    """The tiers of a published folder: its own primary.csv, then each of ``parts`` present under it."""
    dest = Path(dest)
    rows = tier_rows(_read(dest / "primary.csv"))
    for name in parts:
        rows += tier_rows(_read(dest / name / "primary.csv"), name)
    return rows


def _read(path: Path) -> pd.DataFrame | None:
    return pd.read_csv(path, keep_default_na=False, na_values=[""]) if path.is_file() else None


def _replace(text: str, section: str, anchor: str) -> str:
    """``text`` with the section between the markers replaced, or inserted after ``anchor`` (its first line)."""
    if START in text and END in text:
        head, _, rest = text.partition(START)
        return head + section + rest.partition(END)[2]
    i = text.find(anchor)
    if i < 0 or not section:
        return text
    j = text.find("\n", i) + 1 or len(text)
    return text[:j] + section + "\n" + text[j:]


def write_section(dest: str | Path, parts: tuple[str, ...] = PARTS) -> list[Path]:
    """Rewrite the answer section of ``dest/leaderboard.md`` (under its title) and ``.html`` (after its header)
    from the tiers of `published_rows`. Returns the pages written."""
    dest, rows, written = Path(dest), published_rows(dest, parts), []
    for name, section, anchor in (("leaderboard.md", section_markdown(rows), "# "),
                                  ("leaderboard.html", section_html(rows), "</header>")):  # fmt: skip
        path = dest / name
        if path.is_file():
            before = path.read_text(encoding="utf-8")
            after = _replace(before, section, anchor)
            if after != before:
                written.append(atomic_write_text(path, after))
    return written
