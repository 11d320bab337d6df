"""The forest plot (figure ``forest`` of `bandpo.report.figures.FIGURES`, the page's first): per model size, every
trained entry of the main experiment against the baseline, from the leaderboard alone (``board.leaderboard``, the
columns of leaderboard.csv): the paired difference of the headline score (``mean@k_diff``, entry - baseline on the
same seeds) with its 95% paired t interval, the margin the verdict rule tests, and the verdict."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from bandpo.analysis.leaderboard import headline_label, identical_to_baseline
from bandpo.report.figures import _pyplot, _style, placeholder_figure
from bandpo.stats.rule import BETTER, NOT_BETTER, UNDECIDED
from bandpo.study import BASE_ENTRY, MAIN

FOREST_COLUMNS = ["model", "subset", "entry", "n_seeds", "label", "diff", "ci_low", "ci_high", "margin", "verdict",
                  "kind", "primary", "identical"]  # fmt: skip
# the marker and colour of a verdict (the Holm-adjusted verdict of the rule; the legend prints the row's words)
VERDICT_STYLES = {BETTER: ("^", "tab:green"), NOT_BETTER: ("v", "tab:red"), UNDECIDED: ("o", "tab:orange")}
OTHER_STYLE = ("s", "tab:blue")  # a verdict word of no class above (an exploratory primary's, a future rule's)
IDENTICAL_STYLE = ("D", "0.45")  # an entry whose paired differences are all zero: the baseline's runs again
NO_VERDICT = "no verdict"
MARGIN_LABEL = "margin δ"
ROW_HEIGHT_IN, PANEL_EXTRA_IN = 0.34, 1.2  # one row of a panel, and each panel's title and axis (inches)


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def forest_data(table: pd.DataFrame, experiment: str = MAIN) -> pd.DataFrame:
    """The rows the forest plot draws (`FOREST_COLUMNS`), per model in the leaderboard table's order: by the paired
    difference on the seeds every row has (``diff_common``, `bandpo.report.columns.with_seeds`), else by the row's
    own, largest first: the trained entries of ``experiment`` (main: also rows whose experiment is "") other than
    the base model and the baseline, with a paired difference. ``diff``, ``ci_low``, ``ci_high`` and ``margin`` in
    points (the table's fractions x 100); ``verdict`` the words shown (the row's label, else its Holm verdict, else "no
    verdict"; an entry whose differences are all zero: "identical to <baseline>"), ``kind`` its class (the Holm
    verdict, "identical" or ""); ``label`` the y label "entry (n seeds)" (subset in brackets when there are
    several), starred for the primary comparison. Empty when the table lacks the headline's paired columns."""
    lab = headline_label(table, "mean") if not table.empty else None
    paired = ("diff", "diff_t_ci_low", "diff_t_ci_high", "diff_sd")
    need = ["model", "entry", "n_seeds", "baseline", *(f"{lab}_{c}" for c in paired)]
    if lab is None or not set(need) <= set(table.columns):
        return pd.DataFrame(columns=FOREST_COLUMNS)
    t = table
    if "experiment" in t:
        xp = t["experiment"].fillna("").astype(str)
        t = t[(xp == experiment) | ((xp == "") & (experiment == MAIN))]
    t = t[(t["entry"] != BASE_ENTRY) & (t["entry"] != t["baseline"]) & t[f"{lab}_diff"].notna()]
    if t.empty:
        return pd.DataFrame(columns=FOREST_COLUMNS)
    subsets = t["subset"].fillna("").astype(str) if "subset" in t else pd.Series("", index=t.index)
    several = subsets.groupby(t["model"]).transform("nunique") > 1
    rows = []
    for (_, r), subset, tagged in zip(t.iterrows(), subsets, several, strict=True):
        identical = identical_to_baseline(r, lab)
        holm, words = _text(r.get(f"{lab}_verdict_holm")), _text(r.get(f"{lab}_label"))
        verdict = f"identical to {r['baseline']}" if identical else (words or holm or NO_VERDICT)
        primary = _text(r.get(f"{lab}_role")) == "primary"
        name = f"{r['entry']} [{subset}]" if tagged and subset else str(r["entry"])
        n = int(r["n_seeds"]) if pd.notna(r["n_seeds"]) else 0
        margin = r.get(f"{lab}_margin")
        order = r.get("diff_common") if pd.notna(r.get("diff_common", float("nan"))) else r[f"{lab}_diff"]
        rows.append({"model": r["model"], "subset": subset, "entry": r["entry"], "n_seeds": n, "order": order,
                     "label": f"{'★ ' if primary else ''}{name} ({n} seeds)", "diff": 100.0 * r[f"{lab}_diff"],
                     "ci_low": 100.0 * r[f"{lab}_diff_t_ci_low"], "ci_high": 100.0 * r[f"{lab}_diff_t_ci_high"],
                     "margin": 100.0 * float(margin) if pd.notna(margin) else float("nan"), "verdict": verdict,
                     "kind": "identical" if identical else holm, "primary": primary,
                     "identical": identical})  # fmt: skip
    data = pd.DataFrame(rows, columns=[*FOREST_COLUMNS, "order"])
    data = data.sort_values(["model", "order", "entry"], ascending=[True, False, True], kind="stable")
    return data.drop(columns="order").reset_index(drop=True)


def _style_of(kind: str) -> tuple[str, str]:
    return IDENTICAL_STYLE if kind == "identical" else VERDICT_STYLES.get(kind, OTHER_STYLE)


def forest_figure(table: pd.DataFrame, experiment: str = MAIN) -> tuple[Any, pd.DataFrame]:
    """The forest plot of ``table`` (a leaderboard: `forest_data`'s rows): one panel per model size, its height
    proportional to its rows; each entry a point at its paired difference (points) with its 95% paired t interval
    as a bar, the largest difference at the top; a line at 0 and the margin shaded from 0 to +δ; the marker and
    colour give the verdict (legend: the words), the primary's y label is starred. Returns (figure, the rows)."""
    data = forest_data(table, experiment)
    lab = headline_label(table, "mean") if not table.empty else None
    if data.empty:
        return placeholder_figure("paired differences", "no paired comparison with the baseline"), data
    models = list(dict.fromkeys(sorted(data["model"])))
    counts = [max(int((data["model"] == m).sum()), 2) for m in models]  # a panel is sized for 2 rows at least
    plt = _pyplot()
    baseline = str(table["baseline"].dropna().iloc[0]) if table["baseline"].notna().any() else "baseline"
    with _style():
        height = ROW_HEIGHT_IN * sum(counts) + PANEL_EXTRA_IN * len(models)
        fig, axes = plt.subplots(len(models), 1, figsize=(9.5, height), squeeze=False,
                                 gridspec_kw={"height_ratios": counts})  # fmt: skip
        for ax, model in zip(axes[:, 0], models, strict=True):
            _panel(ax, data[data["model"] == model].reset_index(drop=True))
            ax.set_title(f"{model}: {lab} difference from {baseline} (paired, same seeds)")
            ax.set_xlabel(f"{lab}: entry - {baseline} (points), 95% paired t interval")
        fig.tight_layout()
    return fig, data


def _panel(ax, d: pd.DataFrame) -> None:
    """One model's rows on ``ax`` (top row first), with its legend (the margin, and each verdict's words once)
    outside on the right."""
    legend: dict[str, Any] = {}
    y = np.arange(len(d))[::-1].astype(float)  # the first row (largest difference) at the top
    margin = d["margin"].dropna()
    if not margin.empty and margin.iloc[0] > 0:
        band = ax.axvspan(0.0, float(margin.iloc[0]), color="tab:green", alpha=0.12, lw=0)
        legend.setdefault(MARGIN_LABEL, band)
    ax.axvline(0.0, color="0.3", lw=1.0)
    ok = d["ci_low"].notna() & d["ci_high"].notna()
    ax.hlines(y[ok.to_numpy()], d["ci_low"][ok], d["ci_high"][ok], color="0.25", lw=1.6)
    for k, r in d.iterrows():
        marker, colour = _style_of(r["kind"])
        (h,) = ax.plot([r["diff"]], [y[k]], marker=marker, color=colour, ms=8, ls="none", mec="black", mew=0.6)
        legend.setdefault(r["verdict"], h)
    ax.set_yticks(y)
    ax.set_yticklabels(d["label"])
    for tick, primary in zip(ax.get_yticklabels(), d["primary"], strict=True):
        if primary:
            tick.set_fontweight("bold")
    ax.set_ylim(-0.7, len(d) - 0.3)
    ax.legend(list(legend.values()), list(legend), loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
              fontsize="small", frameon=False)  # fmt: skip
