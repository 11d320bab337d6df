"""The equivalence atlas as the pages show it (``atlas.csv``: its columns in `bandpo.core.atlas_table`, measured
by `bandpo.train.atlas`, read by `bandpo.analysis.load.load_atlas`): the note above it, the legend of its pairs
and one table row per (pair, source, slice)."""

from __future__ import annotations

import math

import pandas as pd

from bandpo.report.text import md_cell

HEAD = ("pair", "source", "slice", "tokens", "stopped by both", "only A", "only B", "gradient differs",
        "max |Δg|", "derived region", "unexplained")  # fmt: skip


# The note as the published page prints it: "bandpo/report/atlas_measure.py" is where the derivation was when the
# page was published (now bandpo/train/atlas.py); the path changes with the page's next publication.
NOTE = (
    "Each pair of clipping rules evaluated on the same tensors: tokens with A ≠ 0 that each rule stops (zero "
    "gradient of the loss with respect to the token's log-prob), tokens where the per-token gradients differ (relative "
    "tolerance), the tokens of the region where the derivation (bandpo/report/atlas_measure.py, docs/methods.md) "
    "says the two must "
    "differ, and the tokens where measurement and derivation disagree (unexplained; 0 when the derivation holds). "
    "synthetic: a grid of old probabilities p in (0, 1] and ratios r in (0, 30] with p r ≤ 1, both advantage signs; "
    "real: the old and new log-probs of every mini-batch of the first GRPO steps on the testbed's base model."
)


def _count(n: float, total: float) -> str:
    """A token count with its share of the slice: ``0``, ``12 (0.35%)``, ``1 (0.004%)`` (shares under 0.01% to one
    significant digit)."""
    n, total = int(n), int(total)
    if n == 0 or not total:
        return str(n)
    pct = 100.0 * n / total
    return f"{n} ({pct:.2f}%)" if pct >= 0.01 else f"{n} ({pct:.1g}%)"


def _number(v: float) -> str:
    return "—" if v is None or not math.isfinite(v) else ("0" if v == 0 else f"{v:.3g}")


def atlas_cells(table: pd.DataFrame) -> list[list[str]]:
    """The cells of the atlas table, one list per row, in the order of `HEAD` (also the HTML page's rows)."""
    rows = []
    for r in table.itertuples(index=False):
        rows.append([
            r.pair, r.source, r.slice, str(int(r.tokens)), _count(r.stopped_both, r.tokens),
            _count(r.stopped_only_a, r.tokens), _count(r.stopped_only_b, r.tokens), _count(r.grad_differ, r.tokens),
            _number(r.grad_max_abs_diff), _count(r.predicted, r.tokens), str(int(r.unexplained)),
        ])  # fmt: skip
    return rows


def atlas_pairs(table: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(pair, rule A, rule B) in the table's order."""
    seen = table[["pair", "rule_a", "rule_b"]].drop_duplicates()
    return [(r.pair, r.rule_a, r.rule_b) for r in seen.itertuples(index=False)]


def atlas_markdown(table: pd.DataFrame) -> str:
    """The atlas as Markdown: a legend of the pairs (A and B of each), then one table row per (pair, source,
    slice)."""
    lines = [f"- `{md_cell(str(p))}`: A = {md_cell(str(a))}; B = {md_cell(str(b))}" for p, a, b in atlas_pairs(table)]
    lines += ["", "| " + " | ".join(md_cell(h) for h in HEAD) + " |"]
    lines.append("|" + "|".join("---" if i < 3 else "---:" for i in range(len(HEAD))) + "|")
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in atlas_cells(table)]
    return "\n".join(lines)
