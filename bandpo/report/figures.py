"""The report's figures (matplotlib Agg + seaborn). Each builder returns (figure, the data it plotted); build_report
saves the figure with `save_figure` and the data beside it as CSV. With nothing to plot a builder returns a
placeholder figure that says so, and an empty frame.

Every series comes from files: the run metrics (`bandpo.analysis.load`), the statistics (`bandpo.analysis.scores`)
and the bounds table written by `bandpo.methods.bounds_table` (the report imports no method registry).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.ticker
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from bandpo.analysis.leaderboard import entry_order
from bandpo.analysis.scores import ALL_TASKS, DEFAULT_BASELINE
from bandpo.analysis.training import seed_bands
from bandpo.core.files import atomic_write_bytes
from bandpo.stats.resample import bootstrap_ci, mean_of_means
from bandpo.study import BASE_ENTRY

FOREST = "forest"  # the forest plot (bandpo.report.forest): the pages show it first, under the answer
PROBE_CURVES = ("probe/p_correct", "probe/accuracy")  # logged by bandpo.train.loop with probe_every
VAL_CURVE = "val/mean"  # validation mean@k, logged by bandpo.train.loop with val_every
TRAINING_CURVES = ("entropy", "reward_mean", VAL_CURVE)
# The figures of one kind of experiment: the views the config's experiments name (``views``), else known by what an
# experiment declares or its runs log, never by its id (`bandpo.report.build.figure_experiments`): always written (a
# placeholder without such runs), shown only when the page has runs of an experiment they draw. RANDOM_REWARD:
# trained with ``train: {reward: random}`` (the entropy control); PROBE: runs that logged the probe's curves
# (`PROBE_CURVES`); UPDATES_AXIS: the cells of a design axis over the mini-batch updates per rollout batch
# (``key: updates_per_step``, the off-policy degree D).
RANDOM_REWARD, PROBE, UPDATES_AXIS = "random reward", "probe", "updates axis"


@dataclass(frozen=True)
class Figure:
    """A figure of the report, declared once (`FIGURE_LIST`): its name (``figures/<name>.png`` and ``.csv``, the
    report rule's outputs in workflow/rules/report.smk), its caption (``{delta}``: the Band rules' delta), and the
    kind of experiment it draws (`experiments_of_kind`; None: the main experiment's, always shown). Its drawing is
    `bandpo.report.build.draw_figures`' entry of the same name."""

    name: str
    caption: str
    kind: str | None = None


# fmt: off
FIGURE_LIST = (
    Figure(FOREST, "Each trained entry of the main experiment against the baseline, per model size: the paired "
           "difference of the headline score (entry - baseline, same seeds; points) with its 95% paired t interval, "
           "sorted by the difference; shaded: the margin delta the verdict tests; the marker gives the verdict "
           "(Holm-adjusted), the primary comparison is starred."),
    Figure("bounds", "Ratio bounds (a) and allowed probability change p(r - 1) (b) against the old probability p, of "
           "the rules this page compares among BandPO KL / TV / chi2 at delta = {delta:g} (uncapped), GRPO, "
           "Clip-Higher and DCPO; dashed: the simplex limits."),
    Figure("training_curves", "Token entropy and reward against training step, and where the runs measured it "
           "(val_every) validation mean@k (step 0: before training), mean over seeds with a 95% bootstrap band."),
    Figure("clipfrac_buckets", "Fraction of tokens clipped, by old-probability bucket and direction (upper: r > r_hi "
           "with A > 0; lower: r < r_lo with A < 0), off-policy updates, mean over steps and seeds with 95% CI."),
    Figure("final_scores", "Final mean@k and pass@k per method (percent), mean over seeds with 95% "
           "stratified-bootstrap CI."),
    Figure("random_reward_entropy", "Random-reward control (Bernoulli(0.5) reward per completion): token entropy "
           "against step per method, mean over seeds with a 95% bootstrap band: what clipping alone does to entropy.",
           RANDOM_REWARD),
    Figure("probe_curves", "Mechanism probe: probability of the deciding correct token (mean over the probe problems "
           "of the validation split) and sampled accuracy on them against step, mean over seeds with a 95% bootstrap "
           "band.", PROBE),
    Figure("probe_clipfrac_buckets", "Mechanism probe: fraction of tokens clipped by old-probability bucket and "
           "direction (the lowest bucket holds the rare correct tokens), mean over steps and seeds with 95% CI.",
           PROBE),
    Figure("offpolicy_dose", "Off-policy axis: (a) the upper clip fraction among lowest-bucket tokens (old "
           "probability < 0.2) per arm and (b) the paired difference of the mean per-step entropy, arm - GRPO (same "
           "base model and seed), against D, the mini-batch updates per rollout batch; mean over seeds with a 95% t "
           "interval.", UPDATES_AXIS),
    Figure("offpolicy_entropy", "Off-policy axis: token entropy against step per arm, one row of panels per D, mean "
           "over seeds with a 95% bootstrap band.", UPDATES_AXIS),
)
# fmt: on
FIGURES = tuple(f.name for f in FIGURE_LIST)  # in the pages' order: the forest plot first
FIGURE_CAPTIONS = {f.name: f.caption for f in FIGURE_LIST}
EXPERIMENT_FIGURES = {f.name: f.kind for f in FIGURE_LIST if f.kind}  # the views an experiment may name


def check_views(experiments: Mapping[str, Mapping[str, Any]]) -> None:
    """The config's ``experiments.<id>.views`` name figures that draw one kind of experiment (`EXPERIMENT_FIGURES`):
    ValueError naming the experiment, the figure and the choices otherwise (before any job of the DAG runs)."""
    for xp, spec in experiments.items():
        unknown = [v for v in (spec or {}).get("views") or () if v not in EXPERIMENT_FIGURES]
        if unknown:
            choices = ", ".join(EXPERIMENT_FIGURES)
            raise ValueError(f"experiments.{xp}.views: {', '.join(map(repr, unknown))}: not a figure an experiment "
                             f"can name; choose from {choices} (bandpo.report.figures)")  # fmt: skip


UPDATES_KEY = "updates_per_step"


def _pyplot():
    """matplotlib.pyplot, drawing off-screen (Agg). Imported here, on the first figure, rather than with the module:
    importing pyplot (or seaborn, which imports it) fixes the backend of the whole process, and a process that only
    imports the report (the doc blocks, a notebook) keeps its own."""
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # not at the top: the backend is set first (see the docstring)

    return plt


def _seaborn():
    """seaborn, imported after `_pyplot` set the backend (seaborn imports pyplot)."""
    _pyplot()
    import seaborn as sns  # not at the top: it imports pyplot, after the backend is set (`_pyplot`)

    return sns


@contextlib.contextmanager
def _style():
    """seaborn's whitegrid style, and text taken literally: an entry named ``a$b$`` is not parsed as mathtext."""
    sns = _seaborn()
    with matplotlib.rc_context({"text.parse_math": False}), sns.axes_style("whitegrid"):
        yield


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Render ``fig`` as PNG and write it atomically (`bandpo.core.files.atomic_write_bytes`); closes the figure."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    finally:
        _pyplot().close(fig)
    return atomic_write_bytes(path, buf.getvalue())


def placeholder_figure(title: str, message: str):
    """A figure that says why there is nothing to plot."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 2.5))
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, wrap=True)
    return fig


def entry_palette(entries: Iterable[str], baseline: str | None = DEFAULT_BASELINE) -> dict[str, Any]:
    """One colour per entry, the same in every figure (the base model grey)."""
    sns = _seaborn()

    order = entry_order(entries, baseline)
    others = [e for e in order if e != BASE_ENTRY]
    colours = sns.color_palette("tab10" if len(others) <= 10 else "husl", n_colors=max(len(others), 1))
    palette = dict(zip(others, colours, strict=False))
    if BASE_ENTRY in order:
        palette[BASE_ENTRY] = (0.55, 0.55, 0.55)
    return palette


LEGEND_LINE_PT = 13.0  # the height of one legend line at fontsize "small" (10 pt font: 8.33 pt text and spacing)


def legend_columns(n: int, height_in: float) -> int:
    """The columns a compact legend (fontsize "small") of ``n`` entries needs to fit a panel row ``height_in``
    inches tall."""
    per_column = max(1, int(height_in * 72 / LEGEND_LINE_PT))
    return max(1, math.ceil(n / per_column))


def row_legend(ax, entries: Sequence[str], palette: dict[str, Any], height_in: float, kind: str = "line") -> None:
    """The legend of one row of panels (one model size): ``entries`` (that row's, in the display order) in the
    colours of the figure's ``palette``, outside ``ax`` (the row's last panel) on the right; ``kind``: "line"
    handles (curves) or "patch" handles (bars)."""
    if ax.get_legend() is not None:
        ax.get_legend().remove()
    if not entries:
        return
    handles = [Line2D([], [], color=palette[e], linewidth=1.6) if kind == "line" else Patch(facecolor=palette[e])
               for e in entries]  # fmt: skip
    ax.legend(handles, list(entries), loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
              fontsize="small", ncol=legend_columns(len(entries), height_in), frameon=False, handlelength=1.5,
              columnspacing=1.0, labelspacing=0.3)  # fmt: skip


SIMPLEX = "simplex limit"


def bound_key(name: str) -> str:
    """The name of a rule as a key that a bounds table's label ("BandPO-KL", "Clip-Higher") and a leaderboard's
    method or entry id ("bandpo_kl", "clip_higher") share: lower case, "-" and " " as "_"."""
    return re.sub(r"[-\s]+", "_", str(name).strip().lower())


def bound_keys(table: pd.DataFrame) -> set[str]:
    """The rules a leaderboard compares, as `bound_key`s: each trained row's method id, and for a method with a
    divergence parameter (BandPO: ``params_json`` ``{"divergence": "kl"}``) the method with it (``bandpo_kl``, the
    bounds table's "BandPO-KL"); a table without a method column gives its entries."""
    if table.empty or "entry" not in table:
        return set()
    rows = table[table["entry"] != BASE_ENTRY]
    if "method" not in rows:
        return {bound_key(e) for e in rows["entry"]}
    keys = set()
    for method, params in zip(rows["method"], rows.get("params_json", pd.Series([""] * len(rows))), strict=True):
        divergence = _json_field(params, "divergence")
        keys.add(bound_key(f"{method}_{divergence}" if divergence else method))
    return keys


def _json_field(text: Any, key: str) -> str:
    """``key`` of a JSON object given as text ("" when the text is not one or lacks it)."""
    try:
        value = json.loads(text) if isinstance(text, str) and text else {}
    except ValueError:
        return ""
    return str(value.get(key) or "") if isinstance(value, dict) else ""


def bounds_figure(
    data: pd.DataFrame, methods: Iterable[str] | None = None, baseline: str | None = DEFAULT_BASELINE
) -> tuple[Any, pd.DataFrame]:
    """The paper's bound figure from a bounds table (`bandpo.analysis.load.load_bounds`): (a) ratio bounds
    r_lo(p), r_hi(p); (b) allowed probability change p (r - 1); one line per method in the table's order, and the
    rows of method "simplex limit" (r in [0, 1/p], i.e. q in [0, 1]) dashed. ``methods``: the rules of the page
    (`bound_keys` of its leaderboard, or names matching the table's labels by `bound_key`): only those, the
    ``baseline``'s and the simplex limit are drawn (None: every rule of the table). Returns (figure, the rows
    drawn)."""
    sns = _seaborn()

    if methods is not None and not data.empty:
        keep = {bound_key(m) for m in methods} | ({bound_key(baseline)} if baseline else set())
        data = data[data["method"].map(lambda m: m == SIMPLEX or bound_key(m) in keep)].reset_index(drop=True)
        if data["method"].eq(SIMPLEX).all():
            return placeholder_figure("ratio bounds", "no rule of this page is in the bounds table"), data.iloc[0:0]
    if data.empty:
        return placeholder_figure("ratio bounds", "no bounds table (bandpo.methods.bounds_table)"), data
    plt = _pyplot()
    long = pd.concat(
        [
            data.melt(
                id_vars=["method", "p"], value_vars=["r_lo", "r_hi"], var_name="bound", value_name="value"
            ).assign(panel="ratio"),
            data.melt(
                id_vars=["method", "p"], value_vars=["dq_lo", "dq_hi"], var_name="bound", value_name="value"
            ).assign(panel="dq"),
        ],
        ignore_index=True,
    )
    long["bound"] = long["bound"].str.endswith("_hi").map({True: "upper", False: "lower"})
    methods = [m for m in dict.fromkeys(data["method"]) if m != SIMPLEX]
    palette = dict(zip(methods, sns.color_palette("tab10", max(len(methods), 1)), strict=False))
    delta = float(data["delta"].iloc[0])
    with _style():
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
        for ax, panel in zip(axes, ("ratio", "dq"), strict=True):
            d = long[long["panel"] == panel]
            sns.lineplot(
                data=d[d["method"] != SIMPLEX],
                x="p",
                y="value",
                hue="method",
                hue_order=methods,
                units="bound",
                estimator=None,
                palette=palette,
                ax=ax,
                linewidth=1.6,
            )
            simplex = d[d["method"] == SIMPLEX]
            for i, (_, s) in enumerate(simplex.groupby("bound")):
                ax.plot(
                    s["p"], s["value"], color="black", linestyle="--", linewidth=1.0, label=SIMPLEX if i == 0 else None
                )
            ax.axhline(1.0 if panel == "ratio" else 0.0, color="grey", linewidth=0.8)
            ax.set_xlim(0, 1)
            ax.set_xlabel("old probability p")
        axes[0].set_ylim(0, 4)
        axes[0].set_ylabel("ratio bound r")
        axes[0].set_title(f"(a) ratio bounds [r_lo, r_hi] (delta = {delta:g})")
        axes[1].set_ylim(-0.4, 0.4)
        axes[1].set_ylabel("probability change q - p = p (r - 1)")
        axes[1].set_title("(b) allowed probability change")
        handles, labels = axes[0].get_legend_handles_labels()
        for ax in axes:
            if ax.get_legend() is not None:
                ax.get_legend().remove()
        fig.tight_layout(rect=(0, 0.08, 1, 1))
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    return fig, data


def with_validation_before(metrics: pd.DataFrame) -> pd.DataFrame:
    """``metrics`` with each run's validation score before training (``val/mean_before``, on its first step's row)
    as a step-0 point of `VAL_CURVE`, so that the validation curve starts where the base model stands."""
    before = f"{VAL_CURVE}_before"
    if before not in metrics or metrics[before].isna().all():
        return metrics
    rows = metrics[metrics[before].notna()]
    ids = [c for c in ("profile", "experiment", "model", "entry", "seed") if c in rows]
    zero = rows[ids].assign(step=0, **{VAL_CURVE: rows[before].to_numpy()})
    return pd.concat([metrics, zero], ignore_index=True)


def training_curves_figure(
    metrics: pd.DataFrame,
    columns: Sequence[str] = ("entropy", "reward_mean"),
    baseline: str | None = DEFAULT_BASELINE,
    n_resamples: int = 1000,
    seed: int = 0,
) -> tuple[Any, pd.DataFrame]:
    """Token entropy and reward against step per method entry: mean over seeds with a 95% bootstrap band over
    seeds (`seed_bands`); one row of panels per model size, entropy on a log axis. Returns the plotted bands:
    model, entry, metric, step, mean, ci_low, ci_high, n_seeds."""
    sns = _seaborn()

    present = [c for c in columns if c in metrics and metrics[c].notna().any()]
    cols = ["model", "entry", "metric", "step", "mean", "ci_low", "ci_high", "n_seeds"]
    if metrics.empty or not present:
        return placeholder_figure("training curves", "no training metrics found"), pd.DataFrame(columns=cols)
    long = metrics.melt(id_vars=["model", "entry", "seed", "step"], value_vars=present, var_name="metric",
                        value_name="value").dropna(subset=["value"])  # fmt: skip
    bands = seed_bands(long, ["model", "entry", "metric"], "step", n_resamples=n_resamples, seed=seed)[cols]
    models = sorted(bands["model"].unique())
    order = entry_order(bands["entry"], baseline)
    palette = entry_palette(order, baseline)
    plt = _pyplot()
    row_height = 3.6
    with _style():
        fig, axes = plt.subplots(len(models), len(present), figsize=(5.5 * len(present) + 2, row_height * len(models)),
                                 squeeze=False)  # fmt: skip
        for i, model in enumerate(models):
            for j, metric in enumerate(present):
                ax = axes[i, j]
                d = bands[(bands["model"] == model) & (bands["metric"] == metric)]
                hue_order = [e for e in order if e in set(d["entry"])]
                sns.lineplot(data=d, x="step", y="mean", hue="entry", hue_order=hue_order, palette=palette,
                             errorbar=None, ax=ax, linewidth=1.4, legend=False)  # fmt: skip
                for entry, e in d.groupby("entry"):
                    ax.fill_between(e["step"], e["ci_low"], e["ci_high"], color=palette[entry], alpha=0.18, lw=0)
                if metric == "entropy" and (d["mean"] > 0).all():
                    ax.set_yscale("log")
                    # plain tick labels: math text is off in these figures (entry names are user text)
                    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
                    ax.yaxis.set_major_formatter(plain)
                    ax.yaxis.set_minor_formatter(plain)
                ax.set_title(f"{model}: {metric}")
                ax.set_ylabel(f"{metric} (mean over seeds)")
            row = set(bands.loc[bands["model"] == model, "entry"])
            row_legend(axes[i, -1], [e for e in order if e in row], palette, row_height)
        fig.tight_layout()
    return fig, bands.reset_index(drop=True)


CLIPFRAC_COLUMNS = ["model", "entry", "seed", "bucket", "direction", "value"]
_BUCKET_COLUMN = re.compile(r"^(?P<prefix>offpolicy/)?clipfrac_(?P<direction>upper|lower)/(?P<bucket>.+)$")


def clipfrac_data(metrics: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Per run (model, entry, seed), bucket and direction: the clipped fraction of the bucket's tokens, mean over
    steps. The buckets are those the runs logged (columns ``[offpolicy/]clipfrac_{upper,lower}/<bucket>``, in the
    order logged). Uses the off-policy updates' statistics (``offpolicy/...``) when logged, else all updates;
    returns the data and which ("off-policy updates" / "all updates")."""
    found = [(m, c) for c in metrics.columns if (m := _BUCKET_COLUMN.match(str(c)))]
    offpolicy = any(m["prefix"] for m, _ in found)
    which = "off-policy updates" if offpolicy else "all updates"
    rows = []
    for direction in ("upper", "lower"):
        for m, col in found:
            if m["direction"] != direction or bool(m["prefix"]) != offpolicy:
                continue
            g = metrics.groupby(["model", "entry", "seed"], sort=True)[col].mean().dropna()
            for (model, entry, seed), value in g.items():
                rows.append(
                    {
                        "model": model,
                        "entry": entry,
                        "seed": seed,
                        "bucket": m["bucket"],
                        "direction": direction,
                        "value": float(value),
                    }
                )
    return pd.DataFrame(rows, columns=CLIPFRAC_COLUMNS), which


def _ci_callable(n_resamples: int, confidence: float, seed: int) -> Callable[[Any], tuple[float, float]]:
    """A seaborn ``errorbar=`` callable: the percentile-bootstrap CI of the mean of a vector (scipy, seeded)."""

    def ci(values) -> tuple[float, float]:
        x = np.asarray(values, dtype=np.float64)
        lo, hi = bootstrap_ci([x], mean_of_means, n_resamples, np.random.default_rng(seed), confidence)
        return (lo, hi) if not math.isnan(lo) else (float(x.mean()), float(x.mean()))

    return ci


def clipfrac_figure(
    metrics: pd.DataFrame,
    baseline: str | None = DEFAULT_BASELINE,
    n_resamples: int = 1000,
    seed: int = 0,
) -> tuple[Any, pd.DataFrame]:
    """Clip fraction by old-probability bucket (x) and direction (columns), one bar per method entry, one row of
    panels per model size; bars are means over seeds of each run's mean over steps, with 95% bootstrap CIs.
    Returns (figure, `clipfrac_data`'s frame)."""
    sns = _seaborn()

    data, which = clipfrac_data(metrics) if not metrics.empty else (pd.DataFrame(), "")
    if data.empty:
        empty = pd.DataFrame(columns=CLIPFRAC_COLUMNS)
        return placeholder_figure("clip fraction by bucket", "no per-bucket clip statistics found"), empty
    buckets = list(dict.fromkeys(data["bucket"]))
    models = sorted(data["model"].unique())
    order = entry_order(data["entry"], baseline)
    palette = entry_palette(order, baseline)
    plt = _pyplot()
    row_height = 3.8
    with _style():
        fig, axes = plt.subplots(len(models), 2, figsize=(13, row_height * len(models)), squeeze=False, sharey="row")
        for i, model in enumerate(models):
            for j, direction in enumerate(("upper", "lower")):
                ax = axes[i, j]
                d = data[(data["model"] == model) & (data["direction"] == direction)].copy()
                d["value"] = 100.0 * d["value"]
                sns.barplot(
                    data=d,
                    x="bucket",
                    y="value",
                    hue="entry",
                    order=buckets,
                    hue_order=[e for e in order if e in set(d["entry"])],
                    palette=palette,
                    errorbar=_ci_callable(n_resamples, 0.95, seed),
                    saturation=1.0,  # the bars in the legend's colours (seaborn desaturates them by default)
                    legend=False,
                    ax=ax,
                )
                arrow = "r > r_hi, A > 0" if direction == "upper" else "r < r_lo, A < 0"
                ax.set_title(f"{model}: {direction} clip ({arrow})")
                ax.set_xlabel("old probability p bucket")
                ax.set_ylabel(f"clipped tokens in bucket (%), {which}", fontsize=9)
            row = set(data.loc[data["model"] == model, "entry"])
            row_legend(axes[i, -1], [e for e in order if e in row], palette, row_height, kind="patch")
        fig.tight_layout()
    return fig, data


def final_scores_figure(
    stats: pd.DataFrame,
    families: Sequence[str] = ("mean", "pass"),
    baseline: str | None = DEFAULT_BASELINE,
) -> tuple[Any, pd.DataFrame]:
    """Final mean@k and pass@k per method entry with the 95% stratified-bootstrap CIs of `score_stats` (over tasks:
    ``task == "all"``), one row of panels per model size. Returns the plotted rows: model, entry, metric, label,
    mean, ci_low, ci_high (fractions)."""
    sns = _seaborn()

    cols = ["model", "entry", "metric", "label", "mean", "ci_low", "ci_high"]
    data = stats[(stats["task"] == ALL_TASKS) & stats["metric"].isin(families)][cols] if not stats.empty else None
    if data is None or data.empty:
        return placeholder_figure("final scores", "no evaluation scores found"), pd.DataFrame(columns=cols)
    data = data.reset_index(drop=True)
    models = sorted(data["model"].unique())
    fams = [f for f in families if f in set(data["metric"])]
    order = entry_order(data["entry"], baseline)
    palette = entry_palette(order, baseline)
    bars = bar_counts(data, models)
    plt = _pyplot()
    with _style():
        fig, axes = plt.subplots(
            len(models),
            len(fams),
            figsize=(6 * len(fams), BAR_HEIGHT_IN * sum(bars) + PANEL_EXTRA_IN * len(models)),
            squeeze=False,
            gridspec_kw={"height_ratios": bars},
        )
        for i, model in enumerate(models):
            for j, fam in enumerate(fams):
                ax = axes[i, j]
                d = data[(data["model"] == model) & (data["metric"] == fam)]
                entries = [e for e in order if e in set(d["entry"])]
                d = d.set_index("entry").loc[entries].reset_index()
                sns.barplot(
                    data=d.assign(pct=100 * d["mean"]),
                    y="entry",
                    x="pct",
                    hue="entry",
                    order=entries,
                    hue_order=entries,
                    palette=palette,
                    errorbar=None,
                    legend=False,
                    ax=ax,
                )
                lo = 100 * (d["mean"] - d["ci_low"])
                hi = 100 * (d["ci_high"] - d["mean"])
                ok = lo.notna() & hi.notna()
                ax.errorbar(
                    100 * d["mean"][ok],
                    np.arange(len(d))[ok.to_numpy()],
                    xerr=[lo[ok], hi[ok]],
                    fmt="none",
                    ecolor="black",
                    capsize=3,
                    linewidth=1,
                )
                ax.set_title(f"{model}: {d['label'].iloc[0]}")
                ax.set_xlabel(f"{d['label'].iloc[0]} (%)")
                ax.set_ylabel("")
                if j > 0:
                    ax.set_yticklabels([])
        fig.tight_layout()
    return fig, data


BAR_HEIGHT_IN = 0.32  # the height a bar of the final-scores panels takes (inches)
PANEL_EXTRA_IN = 1.3  # and each row's title, axis labels and space (inches)
MIN_BARS, MAX_BARS = 2, 40  # a row is sized for at least / at most this many bars


def bar_counts(data: pd.DataFrame, models: Sequence[str]) -> list[int]:
    """Per model (one row of panels), the bars its panels draw (its entries), clipped to [MIN_BARS, MAX_BARS]:
    the rows' heights are proportional to these."""
    return [min(max(data.loc[data["model"] == m, "entry"].nunique(), MIN_BARS), MAX_BARS) for m in models]


AXIS_DOSE_COLUMNS = ["panel", "model", "arm", "value", "estimate", "ci_low", "ci_high", "n"]


def axis_dose_figure(results: pd.DataFrame, label: str = "D", baseline: str | None = DEFAULT_BASELINE):
    """Dose-response of an axis (`bandpo.analysis.axis.axis_results`): per arm, the upper clip fraction in the lowest
    bucket and the paired entropy difference from the control against the axis value, mean over seeds with its t
    interval. Returns the plotted rows (`AXIS_DOSE_COLUMNS`)."""
    panels = {"clip upper low": "upper clip fraction, p < 0.2 (%)", "entropy auc diff": "entropy - GRPO's (nats)"}
    if results.empty:
        return placeholder_figure("off-policy axis", "no runs of an axis"), pd.DataFrame(columns=AXIS_DOSE_COLUMNS)
    data = results[results["rule"].isin(panels)].rename(columns={"rule": "panel"})[AXIS_DOSE_COLUMNS]
    data = data.dropna(subset=["estimate"]).reset_index(drop=True)
    if data.empty:
        return placeholder_figure("off-policy axis", "no runs of an axis"), pd.DataFrame(columns=AXIS_DOSE_COLUMNS)
    models = sorted(data["model"].unique())
    order = entry_order(data["arm"], baseline)
    palette = entry_palette(order, baseline)
    plt = _pyplot()
    with _style():
        fig, axes = plt.subplots(len(models), 2, figsize=(11, 3.8 * len(models)), squeeze=False)
        for i, model in enumerate(models):
            for j, (panel, ylabel) in enumerate(panels.items()):
                ax = axes[i, j]
                d = data[(data["model"] == model) & (data["panel"] == panel)]
                scale = 100.0 if panel == "clip upper low" else 1.0
                for k, arm in enumerate(a for a in order if a in set(d["arm"])):
                    e = d[d["arm"] == arm].sort_values("value")
                    x = e["value"].to_numpy(float) * (1 + 0.03 * (k - 1.5))  # a small dodge on the log axis
                    y = e["estimate"].to_numpy(float) * scale
                    err = np.vstack([y - e["ci_low"].to_numpy(float) * scale, e["ci_high"].to_numpy(float) * scale - y])
                    ax.errorbar(x, y, yerr=np.nan_to_num(err), marker="o", ms=4, lw=1.3, capsize=3,
                                color=palette[arm], label=arm)  # fmt: skip
                if panel == "entropy auc diff":
                    ax.axhline(0.0, color="0.4", lw=0.8, ls="--")
                ax.set_xscale("log", base=2)
                ax.set_xticks(sorted(data["value"].unique()))
                ax.set_xticklabels([f"{v:g}" for v in sorted(data["value"].unique())])
                ax.set_xlabel(label)
                ax.set_ylabel(ylabel)
                ax.set_title(f"{model}: {'(a) engagement' if j == 0 else '(b) mechanism'}")
        handles, labels = axes[0, 0].get_legend_handles_labels()
        fig.tight_layout(rect=(0, 0.08, 1, 1))
        if handles:
            fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    return fig, data


def axis_entropy_figure(metrics: pd.DataFrame, cells: Sequence[tuple[str, float]], label: str = "D",
                        baseline: str | None = DEFAULT_BASELINE, seed: int = 0):  # fmt: skip
    """Entropy against step per arm, one row of panels per axis cell (``cells``: (experiment, value)); the bands
    of `training_curves_figure`, whose ``model`` column here names the cell ("D = 8, tiny-s")."""
    keep = {xp: f"{label} = {v:3g}" for xp, v in cells}  # padded: the rows sort by value
    m = (
        metrics[metrics["experiment"].isin(keep)]
        if not metrics.empty and "experiment" in metrics
        else metrics.iloc[0:0]
    )
    if not m.empty:
        m = m.assign(model=m["experiment"].map(keep) + ", " + m["model"].astype(str))
    return training_curves_figure(m, columns=("entropy",), baseline=baseline, seed=seed)
