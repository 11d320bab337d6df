"""The equivalence atlas's table (``atlas.csv``, written by `bandpo.report.atlas_measure`) as the report shows it: its
columns, its
reader and its Markdown. Torch-free, like the rest of the report (the atlas itself is computed in
`bandpo.report.atlas_measure`).

One row per (pair of rules, source, slice):

    pair, rule_a, rule_b      the pair's id and each rule's label (method, parameters, dual clip)
    source                    synthetic (a grid of (p, r, sign of A)) | real (the testbed's rollouts)
    slice                     all | adv>0 | adv<0 | p<0.2 | p>=0.2 (p: the token's old probability)
    tokens                    valid tokens with A != 0 in the slice (A = 0 tokens get no gradient from any rule)
    stopped_a, stopped_b      tokens each rule stops (d loss / d log pi = 0 while A != 0)
    stopped_both, stopped_only_a, stopped_only_b
    grad_differ               tokens where |g_a - g_b| > atol + rtol max(|g_a|, |g_b|), g = d loss / d log pi
    grad_max_abs_diff         max |g_a - g_b| over the slice (per-token loss, token-sum: g = dL_t / d log pi_t)
    predicted                 tokens inside the region where the derivation says the rules differ
    unexplained               tokens where the measured difference (a stop-set or gradient difference) and the
                              derived region disagree: a difference outside it, or none inside it
    batches                   mini-batches the real rows were measured on (0 for the synthetic grid)
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd

COLUMNS = ("pair", "rule_a", "rule_b", "source", "slice", "tokens", "stopped_a", "stopped_b", "stopped_both",
           "stopped_only_a", "stopped_only_b", "grad_differ", "grad_max_abs_diff", "predicted", "unexplained",
           "batches")  # fmt: skip
SOURCES = ("synthetic", "real")
SLICES = ("all", "adv>0", "adv<0", "p<0.2", "p>=0.2")
HEAD = ("pair", "source", "slice", "tokens", "stopped by both", "only A", "only B", "gradient differs",
        "max |Δg|", "derived region", "unexplained")  # fmt: skip

NOTE = (
    "Each pair of clipping rules evaluated on the same tensors: tokens with A ≠ 0 that each rule stops (zero "
    "gradient of the loss with respect to the token's log-prob), tokens where the per-token gradients differ (relative "
    "tolerance), the tokens of the region where the derivation (bandpo/report/atlas_measure.py, docs/methods.md) "
    "says the two must "
    "differ, and the tokens where measurement and derivation disagree (unexplained; 0 when the derivation holds). "
    "synthetic: a grid of old probabilities p in (0, 1] and ratios r in (0, 30] with p r ≤ 1, both advantage signs; "
    "real: the old and new log-probs of every mini-batch of the first GRPO steps on the testbed's base model."
)


def load_atlas(path: str | Path) -> pd.DataFrame | None:
    """``atlas.csv`` as a frame (columns `COLUMNS`), or None when the file does not exist; ValueError naming the
    missing columns otherwise."""
    path = Path(path)
    if not path.is_file():
        return None
    table = pd.read_csv(path, keep_default_na=False, na_values=[""])
    missing = [c for c in COLUMNS if c not in table]
    if missing:
        raise ValueError(f"{path}: not an atlas table, missing column(s) {', '.join(missing)}")
    return table


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


def _md_cell(text: str) -> str:
    return html.escape(str(text), quote=False).replace("|", "\\|").replace("\n", " ")


def atlas_markdown(table: pd.DataFrame) -> str:
    """The atlas as Markdown: a legend of the pairs (A and B of each), then one table row per (pair, source,
    slice)."""
    lines = [f"- `{_md_cell(p)}`: A = {_md_cell(a)}; B = {_md_cell(b)}" for p, a, b in atlas_pairs(table)]
    lines += ["", "| " + " | ".join(_md_cell(h) for h in HEAD) + " |"]
    lines.append("|" + "|".join("---" if i < 3 else "---:" for i in range(len(HEAD))) + "|")
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in atlas_cells(table)]
    return "\n".join(lines)
