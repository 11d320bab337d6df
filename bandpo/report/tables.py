"""The leaderboard as tables: the wide frame (leaderboard.csv), the per-task frame, and their Markdown rendering.

The displayed columns are described once (`display_columns`, `Column`) and used by the Markdown here and the HTML
page (bandpo.report.page): a column is a key, a header, the cell text of a row and a numeric sort value.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pandas as pd

from bandpo.core.files import atomic_write_text
from bandpo.plan.sweep import BASE_ENTRY
from bandpo.report.atlas import NOTE as ATLAS_NOTE
from bandpo.report.atlas import atlas_markdown
from bandpo.report.load import params_label, parse_metric
from bandpo.report.stats import ALL_TASKS, DEFAULT_BASELINE, HEADLINE, PAIRED_COLUMNS


def write_csv(df: pd.DataFrame, path: Path) -> None:
    atomic_write_text(path, df.to_csv(index=False, float_format="%.6g", lineterminator="\n"))


def entry_labels(summaries: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(model, entry) -> the label of its runs (`bandpo.report.load.Run.summary`), the first seed's when seeds
    disagree; entries whose runs carry no label are left out."""
    if summaries.empty:
        return {}
    named = summaries[summaries["label"].fillna("") != ""].sort_values(["model", "entry", "seed"])
    return {(r.model, r.entry): r.label for r in named.drop_duplicates(["model", "entry"]).itertuples()}


def entry_graders(scores: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(model, entry) -> the grader(s) of its scores (``name/mode@version``, several joined by "; ")."""
    if scores.empty or "grader" not in scores:
        return {}
    known = scores[scores["grader"].fillna("") != ""]
    return {key: "; ".join(sorted(set(g["grader"]))) for key, g in known.groupby(["model", "entry"], sort=True)}


def grader_note(board: pd.DataFrame) -> str:
    """One sentence naming the grader(s) behind the board's scores; "" when none is recorded."""
    graders = sorted({g for cell in board.get("grader", []) if isinstance(cell, str) for g in cell.split("; ") if g})
    if not graders:
        return ""
    return (
        "Scores graded by " + ", ".join(graders) + " (bandpo.grader: name/mode@version; lenient: last \\boxed{} "
        "or Answer: line; strict-answer-line: the last Answer: line only; both accept equivalent answers; "
        "math-dapo: the paper's rule, verl's math_dapo, the normalised last Answer: line string-equal to the "
        "reference)."
    )


def entry_order(entries: Iterable[str], baseline: str | None = DEFAULT_BASELINE) -> list[str]:
    """A stable display order: the base model, the baseline, then the rest alphabetically."""
    entries = sorted(set(entries))
    first = [e for e in (BASE_ENTRY, baseline) if e in entries]
    return first + [e for e in entries if e not in first]


def leaderboard(
    stats: pd.DataFrame,
    per_entry: pd.DataFrame,
    per_run: pd.DataFrame | None = None,
    labels: Mapping[tuple[str, str], str] | None = None,
    graders: Mapping[tuple[str, str], str] | None = None,
) -> pd.DataFrame:
    """The wide leaderboard: one row per (model, entry), the base model first, then by mean@k (best first).

    Per headline metric L (e.g. ``mean@8``): L, L_ci_low, L_ci_high (percentile bootstrap), L_t_ci_low, L_t_ci_high
    (Student t over seeds: the interval the tables show), L_iqm, L_poi, L_poi_ci_low, L_poi_ci_high
    (rliable's P(improvement) over ``baseline``, all seed pairs), and the paired comparison with the baseline
    (`bandpo.report.stats.paired_comparison`): L_diff, L_diff_ci_low, L_diff_ci_high, L_diff_t_ci_low,
    L_diff_t_ci_high, L_diff_sd, L_diff_poi,
    L_diff_poi_ci_low, L_diff_poi_ci_high, L_mde, L_seeds_for_target, L_n_pairs, L_unpaired; then the training
    columns of `run_stats`. ``params`` is the entry's label
    from ``labels`` ((model, entry) -> the runs' ``method_label``, `entry_labels`), else `params_label` of its
    parameters; ``params_json`` the parameters as canonical JSON; ``grader`` the grader(s) of its scores from
    ``graders`` (`entry_graders`)."""
    overall = stats[stats["task"] == ALL_TASKS] if not stats.empty else stats
    keys = set()
    if not overall.empty:
        keys |= set(map(tuple, overall[["model", "entry"]].to_numpy()))
    if not per_entry.empty:
        keys |= set(map(tuple, per_entry[["model", "entry"]].to_numpy()))
    ident: dict[tuple[str, str], dict[str, Any]] = {}
    for frame in (per_run, overall):  # eval identity wins over run.json's (same values when both exist)
        if frame is None or frame.empty:
            continue
        for r in frame.drop_duplicates(["model", "entry"]).itertuples():
            ident.setdefault((r.model, r.entry), {}).update(
                {k: getattr(r, k) for k in ("profile", "method", "params") if isinstance(getattr(r, k), str)}
            )
    rows = []
    for model, entry in sorted(keys):
        meta = ident.get((model, entry), {})
        method = meta.get("method") or (BASE_ENTRY if entry == BASE_ENTRY else "")
        row: dict[str, Any] = {
            "profile": meta.get("profile", ""),
            "model": model,
            "entry": entry,
            "method": method,
            "params": (labels or {}).get((model, entry)) or params_label(meta.get("params")),
            "params_json": meta.get("params", ""),
            "grader": (graders or {}).get((model, entry), ""),
        }
        sub = overall[(overall["model"] == model) & (overall["entry"] == entry)] if not overall.empty else overall
        row["n_seeds"] = int(sub["n_seeds"].max()) if not sub.empty else 0
        row["baseline"] = sub["baseline"].dropna().iloc[0] if not sub.empty and sub["baseline"].notna().any() else ""
        for family in HEADLINE:
            s = sub[sub["metric"] == family] if not sub.empty else sub
            if s.empty:
                continue
            r = s.iloc[0]
            label = r["label"]
            row.update(
                {
                    label: r["mean"],
                    f"{label}_ci_low": r["ci_low"],
                    f"{label}_ci_high": r["ci_high"],
                    f"{label}_t_ci_low": r["t_ci_low"],
                    f"{label}_t_ci_high": r["t_ci_high"],
                    f"{label}_iqm": r["iqm"],
                    f"{label}_poi": r["poi"],
                    f"{label}_poi_ci_low": r["poi_ci_low"],
                    f"{label}_poi_ci_high": r["poi_ci_high"],
                    **{f"{label}_{c}": r[c] for c in PAIRED_COLUMNS if c in r},
                }
            )
        t = per_entry[(per_entry["model"] == model) & (per_entry["entry"] == entry)] if not per_entry.empty else None
        if t is not None and not t.empty:
            row.update({c: t.iloc[0][c] for c in per_entry.columns if c not in ("model", "entry")})
        rows.append(row)
    board = pd.DataFrame(rows)
    if board.empty:
        return board
    for c in ("n_runs",):
        if c in board:
            board[c] = board[c].fillna(0).astype(int)
    sort_col = headline_label(board, "mean")
    board["_base"] = board["entry"] != BASE_ENTRY
    board["_score"] = -board[sort_col].astype(float) if sort_col else 0.0
    board = board.sort_values(["model", "_base", "_score", "entry"], na_position="last", kind="stable")
    return board.drop(columns=["_base", "_score"]).reset_index(drop=True)


def headline_label(board: pd.DataFrame, family: str) -> str | None:
    """The leaderboard column of a metric family (``mean`` -> ``mean@8``), None if absent."""
    for c in board.columns:
        if "_ci_" in c or c.endswith(("_iqm", "_poi")) or any(c.endswith(f"_{p}") for p in PAIRED_COLUMNS):
            continue
        fam, _ = parse_metric(c)
        if fam == family or (family == "mean" and c == "mean@n"):
            return c
    return None


# ----------------------------------------------------------------------------------------------------------------
# Markdown and HTML

T_INTERVAL = "t_"  # the tables show Student-t intervals over seeds; leaderboard.csv has the bootstrap ones too

STATS_NOTE = (
    "Scores are fractions of problems solved, shown in percent: the mean over seeds of each seed's lm-eval score "
    "(averaged over tasks with equal weight), with a 95% Student-t confidence interval over seeds (mean ± "
    "t(0.975, n-1) SD / sqrt(n) of the per-seed scores; leaderboard.csv also has rliable's percentile-bootstrap "
    "interval, columns *_ci_low / *_ci_high, which is too narrow at 3-5 seeds). {seeds} leaderboard.csv also has "
    "rliable's IQM (*_iqm), the interquartile mean of the (seed, task) scores. "
    "Comparisons with {baseline} are paired: Δ is the mean over seeds of this entry's score minus {baseline}'s "
    "trained from the same base model with the same seed, with the 95% paired t interval of those differences (the "
    "bootstrap one is in the csv); P(>{baseline}) is the probability of improvement on them: the share of seeds "
    "whose difference is positive, ties counting one half; 0.5 means no difference. The verdict column is the "
    "Holm-adjusted verdict of mean@k within the experiment's family of secondaries (the primary's own, tested alone "
    "at 5%, on its row): better or worse (the 95% interval excludes 0), equivalent (the 90% interval lies inside "
    "the experiment's margin, fixed before the runs), else unresolved. pass@k is the unbiased estimator "
    "1 - C(n-c, k)/C(n, k); best@k (bootstrap) is the paper's resampled variant, labelled as such. Entropy is the "
    "rollout policy's mean token entropy over the last 10% of training steps, with its t interval over seeds; "
    "time is per training run."
)
BASE_MODELS = {
    True: "Seed s of every entry trains from base model s (pretrained with seed s; the base row's seed s is that "
    "model), so the spread over seeds holds the pretraining draw, the RL run's randomness and the evaluation's "
    "sampling.",
    False: "Every seed of every entry trains from the one base model of its size (base_per_seed: false); seed s is "
    "the RL run's and the evaluation's seed, so the spread over seeds holds the RL run's randomness and the "
    "evaluation's sampling, not the pretraining draw, and the base row's seeds are evaluation draws of that one "
    "model.",
    None: "Seed s of every entry is the RL run's seed; runs of one seed share their base model.",
}
POWER_NOTE = (
    "Minimum detectable difference (MDE): the smallest true difference from {baseline} that a two-sided paired "
    "t-test at level 0.05 finds with 80% power from n seeds, solved exactly from the noncentral t distribution "
    "(n - 1 degrees of freedom, noncentrality MDE x sqrt(n) / SD), where SD is the standard deviation of the "
    "paired differences (pooled over a model's trained entries: the root mean square of their SDs). Differences "
    "below the MDE are not resolved by this many seeds; 'seeds for 2 points' is the fewest seeds whose MDE at this "
    "SD is at most 2 points. The SD is itself estimated from these few seeds ({sd_range}), so read both as rough."
)


def seed_counts(board: pd.DataFrame) -> list[int]:
    """The distinct seed counts of the trained rows (the base rows left out)."""
    if board.empty or "n_seeds" not in board:
        return []
    rows = board[board["entry"] != BASE_ENTRY] if "entry" in board else board
    return sorted({int(n) for n in rows["n_seeds"].dropna() if int(n) > 0})


def stats_note(board: pd.DataFrame, base_per_seed: bool | None = None) -> str:
    """How to read the tables (`STATS_NOTE`), with the sentence on base models that ``base_per_seed`` (the config's
    key; None when unknown) makes true."""
    return STATS_NOTE.format(baseline=baseline_of(board), seeds=BASE_MODELS[base_per_seed])


def seeds_note(board: pd.DataFrame) -> str:
    """The seed counts of the rows and the t quantile each gives, computed from the board."""
    from scipy.stats import t

    counts = seed_counts(board)
    if not counts:
        return ""
    quantiles = ", ".join(f"{t.ppf(0.975, n - 1):.2f} at {n} seeds" for n in counts if n >= 2)
    rows = f"{counts[0]} seeds" if len(counts) == 1 else f"{counts[0]} to {counts[-1]} seeds"
    return (
        f"Rows have {rows}; the 95% t intervals multiply SD / sqrt(n) by t(0.975, n - 1): {quantiles}. That is "
        "the honest width of so few seeds, which a percentile bootstrap (a handful of distinct resamples) "
        "understates. Read P(improvement) near 0.5 as no evidence either way."
    )


def intervals_note(board: pd.DataFrame, alpha: float = 0.05) -> str:
    """How many paired Δ intervals of mean@k the tables show (every trained entry against the baseline), how many
    exclude 0, and how many would by chance were no entry different (alpha of them)."""
    label = headline_label(board, "mean") if not board.empty else None
    if not label or f"{label}_diff_t_ci_low" not in board:
        return ""
    rows = board[(board["entry"] != BASE_ENTRY) & board[f"{label}_diff_t_ci_low"].notna()]
    n = len(rows)
    if not n:
        return ""
    out = int(((rows[f"{label}_diff_t_ci_low"] > 0) | (rows[f"{label}_diff_t_ci_high"] < 0)).sum())
    return (
        f"The tables show {n} paired 95% intervals of {label} against the baseline (trained entries; the base rows "
        f"left out); were no entry different, about {fmt(alpha * n, 1, 1)} of them would exclude 0 by chance; "
        f"{out} {'does' if out == 1 else 'do'}. The verdict column corrects for this within each experiment (Holm)."
    )


def power_note(board: pd.DataFrame) -> str:
    """`POWER_NOTE` with the 95% interval of an SD estimated from the fewest seeds of the rows (chi-square)."""
    from scipy.stats import chi2

    counts = [n for n in seed_counts(board) if n >= 2]
    if counts:
        df = counts[0] - 1
        low, high = math.sqrt(df / chi2.ppf(0.975, df)), math.sqrt(df / chi2.ppf(0.025, df))
        sd_range = f"at {counts[0]} seeds its 95% interval runs from {low:.2f} to {high:.1f} times the estimate"
    else:
        sd_range = "no row has 2 seeds"
    return POWER_NOTE.format(baseline=baseline_of(board), sd_range=sd_range)


def reading_notes(board: pd.DataFrame, base_per_seed: bool | None = None) -> list[str]:
    """The "How to read these numbers" paragraphs of the page and the Markdown, each computed from the board."""
    return [x for x in (stats_note(board, base_per_seed), seeds_note(board), intervals_note(board)) if x]


def num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return f


def rounded(v: float, scale: float = 1.0, digits: int = 1) -> Decimal:
    """``v * scale`` to ``digits`` decimals as every page and doc prints it: first to the 6 significant digits the
    csv tables hold (`write_csv`), then half away from zero on that decimal text. A value read back from a csv and
    the full-precision value it was written from thus print the same, ties included (-0.0125 prints -1.3 at scale
    100 either way; binary rounding of the float would print -1.2 or -1.3 depending on its last bit)."""
    v = float(v)
    text = f"{v:.6g}" if abs(v) < 1e6 else repr(v)  # large values (seconds, counts) keep their integer digits
    return (Decimal(text) * Decimal(repr(float(scale)))).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP)


def fmt(v: Any, scale: float = 1.0, digits: int = 1) -> str:
    f = num(v)
    return "—" if not math.isfinite(f) else f"{rounded(f, scale, digits):.{digits}f}"


def fmt_ci(v: Any, lo: Any, hi: Any, scale: float = 100.0, digits: int = 1) -> str:
    s = fmt(v, scale, digits)
    if s == "—" or math.isnan(num(lo)) or math.isnan(num(hi)):
        return s
    return f"{s} [{fmt(lo, scale, digits)}, {fmt(hi, scale, digits)}]"


def fmt_seconds(v: Any) -> str:
    f = num(v)
    if math.isnan(f):
        return "—"
    if f < 10:
        return f"{f:.1f} s"
    if f < 120:
        return f"{f:.0f} s"
    if f < 7200:
        return f"{f / 60:.1f} min"
    return f"{f / 3600:.1f} h"


@dataclass(frozen=True)
class Column:
    """A column of the Markdown / HTML tables: sort key, header, cell text of a row, numeric sort value (None:
    sorted as text)."""

    key: str
    head: str
    text: Callable[[Mapping[str, Any]], str]
    sort: Callable[[Mapping[str, Any]], float] | None = None


def ci_column(key: str, head: str, scale: float = 100.0, digits: int = 1, interval: str = "") -> Column:
    """``value [ci_low, ci_high]`` of the columns key, key_{interval}ci_low, key_{interval}ci_high (``interval``
    "t_": the Student-t interval, "": the column's only one)."""
    return Column(
        key,
        head,
        lambda r: fmt_ci(
            r.get(key), r.get(f"{key}_{interval}ci_low"), r.get(f"{key}_{interval}ci_high"), scale, digits
        ),  # fmt: skip
        lambda r: num(r.get(key)),
    )


def baseline_of(board: pd.DataFrame) -> str:
    return next((b for b in board.get("baseline", []) if isinstance(b, str) and b), DEFAULT_BASELINE)


def identity_columns(board: pd.DataFrame) -> list[Column]:
    cols = [
        Column("entry", "entry", lambda r: str(r["entry"])),
        Column("method", "method", lambda r: str(r.get("method") or "")),
        Column("params", "params", lambda r: str(r.get("params") or "")),
    ]
    if "n_seeds" in board:
        cols.append(Column("n_seeds", "seeds", lambda r: fmt(r.get("n_seeds"), 1.0, 0), lambda r: num(r["n_seeds"])))
    return cols


def display_columns(board: pd.DataFrame) -> list[Column]:
    """The columns of the leaderboard tables (Markdown and HTML)."""
    cols = identity_columns(board)
    baseline = baseline_of(board)
    for family in HEADLINE:
        label = headline_label(board, family)
        if not label:
            continue
        cols.append(ci_column(label, label.replace("_bootstrap", " (bootstrap)") + " %", interval=T_INTERVAL))
        if family == "mean":
            # the paired comparison with the baseline (that of the other metrics, and rliable's IQM ``mean@k_iqm``,
            # are in leaderboard.csv)
            cols.append(
                Column(f"{label}_diff", f"{label} Δ %", lambda r, c=label: diff_text(r, c),
                       lambda r, c=label: num(r.get(f"{c}_diff")))
            )  # fmt: skip
            cols.append(
                Column(f"{label}_diff_poi", f"{label} P(>{baseline})", lambda r, c=label: poi_text(r, c),
                        lambda r, c=label: num(r.get(f"{c}_diff_poi")))
            )  # fmt: skip
            if f"{label}_verdict_holm" in board:  # `bandpo.report.experiments.family_verdicts`
                cols.append(Column(f"{label}_verdict_holm", "verdict",
                                   lambda r, c=label: verdict_text(r, c)))  # fmt: skip
    if "entropy_final" in board:
        cols.append(ci_column("entropy_final", "entropy (final)", 1.0, 3))
    if "clipfrac" in board:
        cols.append(Column("clipfrac", "clipped %", lambda r: fmt(r.get("clipfrac"), 100.0, 2),
                            lambda r: num(r.get("clipfrac"))))  # fmt: skip
    for key, head in (("train_seconds_mean", "train time / run"),):  # the total over seeds: leaderboard.csv
        if key in board:
            cols.append(Column(key, head, lambda r, k=key: fmt_seconds(r.get(k)), lambda r, k=key: num(r.get(k))))
    return cols


def per_task_table(
    stats: pd.DataFrame, board: pd.DataFrame, families: Sequence[str] = ("mean", "pass")
) -> pd.DataFrame:
    """One row per (model, entry), in the leaderboard's order, with each task's headline scores: for task T and
    metric label L (k = the task's n), columns ``T L``, ``T L_ci_low``, ``T L_ci_high`` (the t interval over
    seeds). Empty with one task."""
    if stats.empty or board.empty:
        return pd.DataFrame()
    per = stats[(stats["task"] != ALL_TASKS) & stats["metric"].isin(families)]
    per = per[per["k"] == per.groupby(["task", "metric"])["k"].transform("max")]  # pass@n, not pass@2 ...
    if per["task"].nunique() < 2:
        return pd.DataFrame()
    out = board[["profile", "model", "entry", "method", "params", "params_json", "n_seeds", "baseline"]].copy()
    for (task, label), g in per.groupby(["task", "label"], sort=True):
        name = f"{task} {label}"
        values = g.set_index(["model", "entry"])[["mean", "t_ci_low", "t_ci_high"]]
        values.columns = [name, f"{name}_ci_low", f"{name}_ci_high"]
        out = out.join(values, on=["model", "entry"])
    return out


def task_columns(table: pd.DataFrame) -> list[Column]:
    cols = identity_columns(table)
    for c in table.columns:
        if " " in c and not c.endswith(("_ci_low", "_ci_high")):
            cols.append(ci_column(c, f"{c} %"))
    return cols


def poi_text(r: Mapping[str, Any], label: str) -> str:
    """P(improvement) on the paired differences, with its interval."""
    if r.get("entry") == r.get("baseline"):
        return "(baseline)"
    key = f"{label}_diff_poi"
    return fmt_ci(r.get(key), r.get(f"{key}_ci_low"), r.get(f"{key}_ci_high"), 1.0, 2)


def diff_text(r: Mapping[str, Any], label: str) -> str:
    """The mean paired difference from the baseline in points, signed, with its interval."""
    if r.get("entry") == r.get("baseline"):
        return "(baseline)"
    key = f"{label}_diff"
    text = fmt_ci(r.get(key), r.get(f"{key}_{T_INTERVAL}ci_low"), r.get(f"{key}_{T_INTERVAL}ci_high"))
    return text if text == "—" or text.startswith("-") else "+" + text


def verdict_text(r: Mapping[str, Any], label: str) -> str:
    """The verdict cell: the Holm-adjusted verdict of a secondary, the primary's own (marked) on its row."""
    verdict = r.get(f"{label}_verdict_holm")
    if not isinstance(verdict, str) or not verdict:
        return ""
    return f"{verdict} (primary)" if r.get(f"{label}_role") == "primary" else verdict


def unpaired_lines(board: pd.DataFrame) -> list[str]:
    """One sentence per leaderboard row whose paired comparison left seeds out (the ``*_unpaired`` columns)."""
    out = []
    for col in [c for c in board.columns if c.endswith("_unpaired")]:
        label = col.removesuffix("_unpaired")
        for _, r in board[board[col].notna() & (board[col].astype(str) != "")].iterrows():
            out.append(f"{r['model']} / {r['entry']}, {label}: left out of the paired comparison: {r[col]}.")
    return out


def power_lines(power: pd.DataFrame) -> list[str]:
    """One sentence per (model, metric) of `bandpo.report.stats.power_table`, in points."""
    out = []
    for r in power.itertuples():
        need = r.seeds_for_target
        if math.isnan(need):
            need_text = "unknown"
        elif math.isinf(need):
            need_text = "more than 10000"
        else:
            need_text = f"{int(need)}"
        verdict = "resolved" if r.mde <= r.target else "not resolved"
        section = [str(x) for x in (getattr(r, "experiment", ""), getattr(r, "subset", "")) if x and x == x]
        where = f"{' / '.join(section)}: " if section and section != ["main"] else ""
        out.append(
            f"{where}{r.model}, {r.label}: SD of the paired differences {fmt(r.sd, 100.0, 2)} points over "
            f"{r.n_comparisons} comparison(s) with {r.n_seeds} seeds; MDE {fmt(r.mde, 100.0)} points (entries "
            f"{fmt(r.mde_min, 100.0)} to {fmt(r.mde_max, 100.0)}); a {fmt(r.target, 100.0, 0)}-point difference is "
            f"{verdict} with {r.n_seeds} seeds; seeds for {fmt(r.target, 100.0, 0)} points: {need_text}."
        )
    return out


def _md_cell(text: str) -> str:
    """Markdown table cell: HTML-escaped (renderers pass raw HTML through) and with | and newlines neutralised."""
    return html.escape(text, quote=False).replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def _md_table(rows: pd.DataFrame, cols: Sequence[Column]) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(c.head) for c in cols) + " |"]
    lines.append("|" + "|".join("---" if c.sort is None else "---:" for c in cols) + "|")
    for _, r in rows.iterrows():
        lines.append("| " + " | ".join(_md_cell(c.text(r)) for c in cols) + " |")
    return lines


def max_seeds(board: pd.DataFrame) -> int:
    return int(board["n_seeds"].max()) if "n_seeds" in board and len(board) else 0


def by_model(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    return [] if table.empty else list(table.groupby("model", sort=False))


def section_heading(experiment: str, subset: str, model: str) -> str:
    """A table's heading: the model size for the main experiment, else ``experiment: model`` (and the subset)."""
    if experiment in ("", "main") and not subset:
        return model
    return f"{experiment}: {model}" + (f", subset {subset}" if subset else "")


def sections(table: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(heading, model, rows) of each table: one per (experiment, subset, model) in the table's order (a table
    without experiment columns: one per model)."""
    if table.empty:
        return []
    if "experiment" not in table:
        return [(str(m), str(m), g) for m, g in by_model(table)]
    keys = table[["experiment", "subset"]].astype(object).fillna("").astype(str)
    out = []
    for (xp, subset), g in table.groupby([keys["experiment"], keys["subset"]], sort=False):
        out += [(section_heading(xp, subset, str(m)), str(m), gm) for m, gm in by_model(g)]
    return out


def _points(v: Any, sign: bool = True) -> str:
    """A score difference in points, signed, one decimal (as the tables round)."""
    text = fmt(v, 100.0, 1)
    return text if not sign or text.startswith("-") or text == "—" else "+" + text


def _score_result(r: Any) -> str:
    """The sentence of a score comparison of primary.csv (`bandpo.report.experiments.primary_results`): every
    number named by what it is, from this row."""
    margin = (f"against the equivalence margin ±{fmt(r.margin, 100.0, 1)} points" if r.margin == r.margin
              else "no equivalence margin declared")  # fmt: skip
    role = "demoted to a secondary" if r.role == "demoted" else "primary, tested alone at 5%"
    return (
        f"Result on {r.model} ({role}): {r.treatment} − {r.control} = {_points(r.difference)} "
        f"[{_points(r.ci_low)}, {_points(r.ci_high)}] points of {r.metric} (mean of {r.n_pairs} paired seed "
        f"differences, 95% paired t interval; 90% interval [{_points(r.ci90_low)}, {_points(r.ci90_high)}] "
        f"{margin}; MDE {fmt(r.mde, 100.0, 1)} points at 80% power): {r.verdict}"
    )


def _entropy_result(r: Any) -> str:
    """The sentence of an entropy row of primary.csv: a run's final entropy against its own step-1 entropy
    (control ``step 1``, `entropy_shift_results`) or an entry's entropy against the control's, paired by seed
    (`entropy_pair_results`)."""
    margin = f"margin ±{fmt(r.margin, 1, 3)} nats" if r.margin == r.margin else "no equivalence margin declared"
    what = "final entropy" if r.metric == "entropy_final" else "entropy area under the curve per step"
    if r.control == "step 1":
        return (
            f"Result on {r.model}, {r.treatment}: {what} {fmt(r.treatment_mean, 1, 3)} (mean of its {r.n_pairs} "
            f"runs) against {fmt(r.control_mean, 1, 3)} at step 1 (the same runs' step-1 entropy), paired "
            f"difference {fmt_ci(r.difference, r.ci_low, r.ci_high, 1, 3)} nats (95% paired t; {margin}): "
            f"{r.verdict}"
        )
    return (
        f"Result on {r.model}, {what}: {r.treatment} {fmt(r.treatment_mean, 1, 3)} against {r.control} "
        f"{fmt(r.control_mean, 1, 3)} (means over {r.n_pairs} seed pairs), paired difference "
        f"{fmt_ci(r.difference, r.ci_low, r.ci_high, 1, 3)} nats (95% paired t; {margin}): {r.verdict}"
    )


def family_sentence(f: Any) -> str:
    """One experiment's family of secondaries (`bandpo.report.experiments.family_verdicts`), in words."""
    return (
        f"Secondaries: {int(f.n_tests)} paired tests against the baseline (every other trained entry and metric of "
        f"the experiment, Holm-adjusted at 5%): {int(f.better)} better, {int(f.worse)} worse, {int(f.equivalent)} "
        f"equivalent, {int(f.unresolved)} unresolved; unadjusted, {int(f.n_excluding_0)} of their 95% intervals "
        f"exclude 0, where about {fmt(f.expected_by_chance, 1, 1)} would by chance were no entry different"
    )


def collapse_sentence(rows: pd.DataFrame) -> str:
    """The entropy fall of each run of one experiment (`bandpo.report.experiments.collapse_factors`), per entry."""
    parts = []
    for (model, entry), g in rows.groupby(["model", "entry"], sort=True):
        factors = ", ".join(f"{f:.1f}" for f in g["factor"])
        parts.append(f"{model} {entry}: {factors} ({int(g['collapsed'].sum())} of {len(g)} runs at least "
                     f"{g['threshold'].iloc[0]:g}-fold)")  # fmt: skip
    return "Entropy fall per run, step-1 entropy / final entropy: " + "; ".join(parts)


def experiment_notes(
    specs: Mapping[str, Mapping[str, Any]],
    primary: pd.DataFrame,
    family: pd.DataFrame | None = None,
    collapse: pd.DataFrame | None = None,
) -> list[tuple[str, str]]:
    """(experiment, text) per experiment: its description, its primary metric and decision rule (fixed before the
    runs, from the config), a demotion's reason, the primary comparison's result (`_score_result`,
    `_entropy_result`: one template per kind of row), its runs' entropy fall (``collapse``, `collapse_sentence`) and
    its family of secondaries (`family_sentence`)."""
    out = []
    fam = family.set_index("experiment") if family is not None and not family.empty else None
    for xp, spec in specs.items():
        parts = [str(spec.get("description") or "").rstrip(".")]
        p = spec.get("primary") or {}
        if p:
            parts.append(f"Primary metric: {p.get('metric')}" + (f" ({p['compare'][0]} against {p['compare'][1]})"
                                                                  if p.get("compare") else ""))  # fmt: skip
            parts.append(f"Decision rule: {p.get('rule')}")
            if p.get("demoted"):
                parts.append(f"Demoted to a secondary: {str(p['demoted']).rstrip('.')}")
        rows = primary[primary["experiment"] == xp] if not primary.empty else primary
        for r in rows.itertuples():
            parts.append(_entropy_result(r) if str(r.metric).startswith("entropy") else _score_result(r))
        if p.get("compare") and rows.empty:
            parts.append("Result: not available (no scores of both entries yet)")
        if collapse is not None and not collapse.empty and (collapse["experiment"] == xp).any():
            parts.append(collapse_sentence(collapse[collapse["experiment"] == xp]))
        if fam is not None and xp in fam.index:
            parts.append(family_sentence(fam.loc[xp]))
        if any(parts):  # sentences: a description that is a question keeps its "?" without a "." after it
            out.append((xp, " ".join(x if x.endswith(("?", "!")) else x + "." for x in parts if x)))
    return out


def page_title(board: pd.DataFrame, title: str | None) -> str:
    profile = next((p for p in board.get("profile", []) if isinstance(p, str) and p), "")
    return title or f"BandPO-Bench leaderboard: {profile or 'results'}"


@dataclass(frozen=True)
class Panel:
    """A section of the page beside the leaderboard tables: a heading, sentences, and a table whose cells are
    text already (e.g. the off-policy axis's rules, `bandpo.report.axis.axis_panels`)."""

    heading: str
    lines: tuple[str, ...] = ()
    table: pd.DataFrame | None = None


def panel_markdown(panel: Panel) -> list[str]:
    lines = [f"## {_md_cell(panel.heading)}", ""]
    lines += [f"- {_md_cell(line)}" for line in panel.lines] + ([""] if panel.lines else [])
    if panel.table is not None and not panel.table.empty:
        t = panel.table
        lines += ["| " + " | ".join(_md_cell(str(c)) for c in t.columns) + " |", "|" + "---|" * len(t.columns)]
        lines += ["| " + " | ".join(_md_cell(str(v)) for v in row) + " |" for row in t.itertuples(index=False)]
        lines.append("")
    return lines


def leaderboard_markdown(
    board: pd.DataFrame,
    figures: Sequence[str] = (),
    title: str | None = None,
    per_task: pd.DataFrame | None = None,
    notes: Sequence[tuple[str, str]] = (),
    power: pd.DataFrame | None = None,
    panels: Sequence[Panel] = (),
    atlas: pd.DataFrame | None = None,
    base_per_seed: bool | None = None,
) -> str:
    """The leaderboard as Markdown: one table per (experiment, subset, model size) (and per-task tables when there
    are several tasks), the experiments' notes (`experiment_notes`), the notes on the statistics and on power
    (``power``: `bandpo.report.stats.power_table`), the equivalence atlas (``atlas``: atlas.csv,
    `bandpo.report.atlas`), links to the figures (``figures/<name>.png``). Every cell is escaped."""
    lines = [f"# {_md_cell(page_title(board, title))}", ""]
    if board.empty:
        lines += ["No finished runs or evaluation scores were found.", ""]
    if notes:
        lines += ["## Experiments", ""]
        lines += [f"- **{_md_cell(xp)}**: {_md_cell(text)}" for xp, text in notes] + [""]
    cols = display_columns(board)
    for heading, _, g in sections(board):
        lines += [f"## {_md_cell(heading)}", "", *_md_table(g, cols), ""]
    if per_task is not None and not per_task.empty:
        tcols = task_columns(per_task)
        for model, g in by_model(per_task):
            lines += [f"## {_md_cell(str(model))}: per task", "", *_md_table(g, tcols), ""]
    for panel in panels:
        lines += panel_markdown(panel)
    lines += ["## How to read these numbers", ""]
    for text in reading_notes(board, base_per_seed):
        lines += [_md_cell(text), ""]
    if power is not None and not power.empty:
        lines += ["## Power", "", _md_cell(power_note(board)), ""]
        lines += [f"- {_md_cell(line)}" for line in power_lines(power)] + [""]
    unpaired = unpaired_lines(board)
    if unpaired:
        lines += ["## Unpaired seeds", "", *(f"- {_md_cell(line)}" for line in unpaired), ""]
    if grader_note(board):
        lines += [_md_cell(grader_note(board)), ""]
    if atlas is not None and not atlas.empty:
        lines += ["## Equivalence atlas", "", _md_cell(ATLAS_NOTE), "", atlas_markdown(atlas), ""]
    if figures:
        lines += ["## Figures", ""]
        for name in figures:
            lines += [f"![{name}](figures/{name}.png)", ""]
    return "\n".join(lines)


BESIDE_KEYS = ["experiment", "model", "entry", "seed", "task"]
BESIDE_RUN_COLUMNS = ["steps", "entropy_final", "accuracy_final", "reward_final", "clipfrac", "train_seconds"]


def _read_table(folder: Path, name: str) -> pd.DataFrame:
    path = folder / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found (a report folder holds scores.csv and runs.csv)")
    df = pd.read_csv(path, keep_default_na=False, na_values=[""])
    if "subset" in df:  # a scored subset is part of the task's identity here
        sub = df["subset"].astype(object).fillna("").astype(str)
        df["task"] = df["task"].where(sub == "", df["task"].astype(str) + ":" + sub)
    return df


def beside_table(ours: str | Path, other: str | Path, metric: str = "mean@8") -> pd.DataFrame:
    """Each scored run of the report folder ``ours`` beside the run of the same experiment, model, entry, seed and
    task in the report folder ``other`` (their ``scores.csv`` and ``runs.csv``): e.g. the verl trainer's runs beside
    the local trainer's published ones, which start from the same base model of each seed. Columns: the keys,
    ``{metric}`` and the training columns (final entropy, reward, clip fraction, steps, seconds) of each side
    (suffixes ``_ours`` / ``_other``) and ``diff`` = ours - other on the metric; a run without a match on the
    other side keeps blanks there. Rows: only ``ours``'s runs. ``table.attrs["profiles"]``: each side's name (its
    profiles, else its folder's name), for headings."""
    ours, other = Path(ours), Path(other)
    frames, names = [], []
    for folder in (ours, other):
        scores = _read_table(folder, "scores.csv")
        if "name" not in scores:
            raise ValueError(f"{folder / 'scores.csv'}: no 'name' column (not a report's scores.csv)")
        profiles = sorted(set(scores["profile"].dropna().astype(str))) if "profile" in scores else []
        names.append("+".join(profiles) or folder.name)
        picked = scores[scores["name"] == metric][BESIDE_KEYS + ["value"]].rename(columns={"value": metric})
        runs = _read_table(folder, "runs.csv")
        cols = [c for c in BESIDE_RUN_COLUMNS if c in runs]
        picked = picked.merge(runs[BESIDE_KEYS[:-1] + cols], on=BESIDE_KEYS[:-1], how="left")
        frames.append(picked.drop_duplicates(BESIDE_KEYS))
    if frames[0].empty:
        raise ValueError(f"{ours / 'scores.csv'} holds no {metric!r} score")
    table = frames[0].merge(frames[1], on=BESIDE_KEYS, how="left", suffixes=("_ours", "_other"))
    table["diff"] = table[f"{metric}_ours"] - table[f"{metric}_other"]
    table = table.sort_values(BESIDE_KEYS).reset_index(drop=True)
    table.attrs["profiles"] = tuple(names)
    return table


def beside_markdown(table: pd.DataFrame, ours: str, other: str, metric: str = "mean@8") -> str:
    """`beside_table` as Markdown: one row per run, then per (experiment, model, entry, task) the means over the
    seeds present on both sides."""
    lines = [f"# {ours} beside {other}", "",
             f"{metric} in percent; entropy = final token entropy (nats); train acc = share of the rollouts graded "
             "correct over the last 10% of steps, in percent (comparable across trainers, unlike the reward's scale); "
             "clip = clip fraction; the same base model and seed on both sides.", "",
             f"| experiment | model | entry | seed | task | {metric} {ours} | {metric} {other} | diff | "
             f"entropy {ours} | entropy {other} | train acc {ours} | train acc {other} | clip {ours} | clip {other} |",
             "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip

    def row(r: Mapping[str, Any], seed: str) -> str:
        cells = [r["experiment"], r["model"], r["entry"], seed, r["task"], fmt(r[f"{metric}_ours"], 100),
                 fmt(r[f"{metric}_other"], 100), fmt(r["diff"], 100)]  # fmt: skip
        for key, scale, digits in (("entropy_final", 1, 3), ("accuracy_final", 100, 1), ("clipfrac", 1, 4)):
            cells += [fmt(r.get(f"{key}_ours"), scale, digits), fmt(r.get(f"{key}_other"), scale, digits)]
        return "| " + " | ".join(_md_cell(str(c)) for c in cells) + " |"

    for r in table.to_dict("records"):
        lines.append(row(r, str(r["seed"])))
    both = table[table[f"{metric}_other"].notna()]
    if not both.empty:
        groups = both.groupby(BESIDE_KEYS[:3] + ["task"], sort=True)
        means = groups.mean(numeric_only=True).drop(columns="seed").join(groups["seed"].nunique()).reset_index()
        for r in means.to_dict("records"):
            lines.append(row(r, f"mean of {r['seed']}"))
    return "\n".join(lines) + "\n"
