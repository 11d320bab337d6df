"""The numbers of the documentation, generated from the published tables in ``results/``.

README.md and docs/*.md hold blocks ``<!-- generated:NAME -->`` ... ``<!-- /generated:NAME -->`` (a table on lines
of its own, or a value inside a sentence); `render` rewrites each block's body from ``results/*.csv`` with the
function ``BLOCKS[NAME]`` (``FOLDER/NAME``: from ``results/FOLDER/*.csv``, a settled experiment published from a
config of its own). ``python -m bandpo.report docs`` rewrites the files, ``--check`` only reports the stale
ones (exit 1); tests/unit/test_docs.py asserts that the committed docs equal the output. Numbers follow the
leaderboard's conventions: scores in percent of problems (points), 95% Student-t intervals over seeds, paired
differences from GRPO of the same base model and seed."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from bandpo.report.atlas import atlas_markdown, load_atlas
from bandpo.report.axis import axis_verdicts, select_setting
from bandpo.report.experiments import collapse_factors
from bandpo.report.stats import UNRESOLVED, power_table, t_interval
from bandpo.report.tables import rounded

DOC_FILES = ("README.md", "docs/*.md")
BLOCK = re.compile(r"(<!-- generated:(?P<name>[\w./-]+) -->)(?P<body>.*?)(<!-- /generated:(?P=name) -->)", re.S)
METRIC = "mean@8"
# Rule revision 3 (config/config.yaml, separation): applied to a republished axis that no experiment selects from
SEPARATION_RULE = {"axis": "offpolicy", "rule": "largest-learning-compared", "entry": "grpo", "fallback": 4,
                   "min_gain": 2.0}  # fmt: skip


class Results:
    """The published tables of one results folder, each read once: ``board`` (leaderboard.csv), ``primary``,
    ``runs``, ``scores``, ``stats``, ``axis`` (axis.csv: the design axes' rules), ``dag`` (dag_rules.csv: the
    per-rule cost of the publication run), ``atlas`` (None without atlas.csv) and ``provenance``
    (provenance.json)."""

    FILES = {"board": "leaderboard.csv", "primary": "primary.csv", "runs": "runs.csv", "scores": "scores.csv",
             "stats": "stats.csv", "axis": "axis.csv", "dag": "dag_rules.csv"}  # fmt: skip

    def __init__(self, folder: str | Path = "results"):
        self.folder, self._tables = Path(folder), {}

    def __getattr__(self, name: str):
        if name not in self.FILES:
            raise AttributeError(name)
        if name not in self._tables:
            frame = pd.read_csv(self.folder / self.FILES[name], keep_default_na=False, na_values=[""])
            for col in ("experiment", "subset"):
                if col in frame:
                    frame[col] = frame[col].astype(object).fillna("")
            self._tables[name] = frame
        return self._tables[name]

    @cached_property
    def atlas(self) -> pd.DataFrame | None:
        """atlas.csv (the equivalence atlas, `bandpo.report.atlas_measure`), or None before one is published."""
        return load_atlas(self.folder / "atlas.csv")

    @cached_property
    def selection(self) -> tuple[str, dict, pd.DataFrame]:
        """(experiment, setting, table) of the published config's one select rule, made again from scores.csv
        (`bandpo.report.axis.select_setting`); for a published axis without a selecting experiment (its own config,
        config/offpolicy.yaml), what `SEPARATION_RULE` (rule revision 3, by which config/config.yaml fixed the
        separation run's regime before the publication run of #37) picks from it."""
        cfg = self.provenance["config"]
        xps = dict(cfg["experiments"])
        names = [x for x, v in xps.items() if v.get("select")]
        if not names:
            names = ["separation"]
            xps["separation"] = {"select": SEPARATION_RULE, "primary": {"compare": ["bandpo_kl", "grpo"]}}
        (name,) = names
        setting, table = select_setting(self.scores, xps, cfg["axes"], name)
        return name, setting, table

    @cached_property
    def provenance(self) -> dict:
        return json.loads((self.folder / "provenance.json").read_text(encoding="utf-8"))

    def part(self, folder: str) -> Results:
        """The tables of a settled experiment published from a config of its own (``publish_dir``:
        results/offpolicy, results/probe), read once."""
        parts = self.__dict__.setdefault("_parts", {})
        if folder not in parts:
            if not (self.folder / folder).is_dir():
                raise FileNotFoundError(f"no published folder {self.folder / folder} (its config publishes it)")
            parts[folder] = Results(self.folder / folder)
        return parts[folder]

    def row(self, experiment: str, model: str, entry: str, subset: str = "") -> pd.Series:
        b = self.board
        sel = b[(b.experiment == experiment) & (b.subset == subset) & (b.model == model) & (b.entry == entry)]
        if len(sel) != 1:
            raise KeyError(f"leaderboard.csv has {len(sel)} rows for {(experiment, subset, model, entry)}")
        return sel.iloc[0]


def num(v: float, digits: int = 1, scale: float = 100.0, sign: bool = False) -> str:
    """A number as the docs print it (``—`` for NaN; ``sign``: always signed), rounded as the leaderboard page
    rounds it (`bandpo.report.tables.rounded`: 6 significant digits, then half away from zero)."""
    if v is None or not np.isfinite(v):
        return "—"
    return f"{rounded(v, scale, digits):{'+' if sign else ''}.{digits}f}"


def ci(v: float, lo: float, hi: float, digits: int = 1, scale: float = 100.0, sign: bool = False) -> str:
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


def section(res: Results, experiment: str, subset: str = "") -> pd.DataFrame:
    return res.board[(res.board.experiment == experiment) & (res.board.subset == subset)]


def leaderboard_block(experiment: str, subset: str = "") -> Callable[[Results], str]:
    """Every row of one section of the leaderboard: model, entry, mean@8, paired Δ, P(>grpo), pass@8, maj@8,
    final entropy, share of off-policy tokens clipped."""

    def block(res: Results) -> str:
        rows = []
        for r in _row_series(section(res, experiment, subset).sort_values("model", kind="stable")):
            base = r["entry"] == r["baseline"]
            rows.append([
                r["model"], r["entry"], ci(r[METRIC], r[f"{METRIC}_t_ci_low"], r[f"{METRIC}_t_ci_high"]), paired(r),
                "(baseline)" if base else num(r[f"{METRIC}_diff_poi"], 2, 1.0),
                num(r["pass@8"]), num(r["maj@8"]),
                ci(r["entropy_final"], r["entropy_final_ci_low"], r["entropy_final_ci_high"], 3, 1.0),
                "" if r["entry"] == "base" else num(r["clipfrac"], 2) + "%",
            ])  # fmt: skip
        head = ["model", "entry", "mean@8", "Δ vs grpo (paired)", "P(>grpo)", "pass@8", "maj@8", "entropy (final)",
                "clipped"]  # fmt: skip
        return md_table(head, rows, right=2)

    return block


def _row_series(frame: pd.DataFrame) -> list[pd.Series]:
    return [r for _, r in frame.iterrows()]


def _base_row(res: Results, experiment: str, model: str, subset: str) -> pd.Series | None:
    """The base model's row of an experiment, else main's for that model (an experiment with ``base: false``, the
    horizon, scores no base row of its own), else None."""
    for xp in (experiment, "main"):
        try:
            return res.row(xp, model, "base", subset)
        except KeyError:
            continue
    return None


def _margin_text(v: float) -> str:
    return "—" if v != v else f"±{num(v)}"


def headline(res: Results) -> str:
    """BandPO-KL against GRPO where the config fixed a primary comparison of scores, with the base model: the
    primary rule's paired difference, its 95% paired t interval, verdict, the margin it was judged against and the
    MDE beside it (primary.csv; a demoted primary marked so)."""
    rows = []
    for p in _row_series(res.primary[res.primary.metric == METRIC]):
        subset = res.scores.loc[res.scores.task == p["task"], "subset"].iloc[0]  # the task's part of the data
        where = p["model"] + ("" if not subset else f", {subset} subset")
        base = _base_row(res, p["experiment"], p["model"], subset)
        control, treatment = (res.row(p["experiment"], p["model"], e, subset) for e in (p["control"], p["treatment"]))
        demoted = " (demoted)" if p.get("role") == "demoted" else ""
        rows.append([
            p["experiment"], where, "—" if base is None else num(base[METRIC]), num(control[METRIC]),
            num(treatment[METRIC]), ci(p["difference"], p["ci_low"], p["ci_high"], sign=True),
            _margin_text(p.get("margin", np.nan)), num(p["mde"]), f"{p['verdict']}{demoted}",
        ])  # fmt: skip
    head = ["experiment", "model", "base", "GRPO", "BandPO-KL", "BandPO-KL − GRPO, paired t", "margin", "MDE",
            "verdict"]  # fmt: skip
    return md_table(head, rows, right=2)


def primary(res: Results) -> str:
    """primary.csv as it stands: scores in points, entropies in nats; the paired rule, then the bootstrap rule the
    published run was fixed with before issue #21 (secondary)."""
    rows = []
    for p in _row_series(res.primary):
        entropy = p["metric"].startswith("entropy")
        digits, scale = (3, 1.0) if entropy else (1, 100.0)
        rows.append([
            p["experiment"], p["model"], p["metric"] + ("" if entropy else f" ({p['task']})"),
            f"{p['treatment']} − {p['control']}", str(p["n_pairs"]),
            ci(p["difference"], p["ci_low"], p["ci_high"], digits, scale, sign=True), p["verdict"],
            f"[{num(p['bootstrap_ci_low'], digits, scale, True)}, {num(p['bootstrap_ci_high'], digits, scale, True)}]"
            f" {p['bootstrap_verdict']}",
        ])  # fmt: skip
    head = ["experiment", "model", "metric", "comparison", "pairs", "difference [95% paired t]", "verdict",
            "before #21: bootstrap CI, verdict"]  # fmt: skip
    return md_table(head, rows, right=4)


def base_rows(res: Results) -> list[tuple[str, str, pd.Series]]:
    """(experiment, subset, base row) of every leaderboard section that has a base row, in the board's order. A base
    row's paired difference from its baseline, negated, is the baseline's (GRPO's) gain over the base model."""
    return [(experiment, subset, base)
            for experiment, subset in dict.fromkeys(zip(res.board.experiment, res.board.subset, strict=True))
            for base in _row_series(section(res, experiment, subset).query("entry == 'base'"))]  # fmt: skip


def gains(res: Results) -> str:
    """GRPO's gain over the base model, paired per seed, per section and model: what RL does at all."""
    rows = []
    for experiment, subset, base in base_rows(res):
        g, lo, hi = (-base[f"{METRIC}_{k}"] for k in ("diff", "diff_t_ci_high", "diff_t_ci_low"))
        rows.append([
            experiment + (f" ({subset})" if subset else ""), base["model"], num(base[METRIC]),
            num(res.row(experiment, base["model"], base["baseline"], subset)[METRIC]),
            ci(g, lo, hi, sign=True), num(base[f"{METRIC}_diff_sd"], 2), "yes" if lo > 0 or hi < 0 else "no",
        ])  # fmt: skip
    head = ["experiment", "model", "base", "GRPO", "GRPO − base, paired t", "SD of the differences",
            "interval excludes 0"]  # fmt: skip
    return md_table(head, rows, right=2)


def entropy_changes(res: Results) -> pd.DataFrame:
    """Random-reward runs: final entropy minus the entropy at step 1, per run (columns entry, seed, first, final,
    change)."""
    rr = res.runs[res.runs.experiment == "random-reward"]
    return pd.DataFrame(
        {
            "entry": rr.entry,
            "seed": rr.seed,
            "first": rr.entropy_first,
            "final": rr.entropy_final,
            "change": rr.entropy_final - rr.entropy_first,
        }  # fmt: skip
    )


def entropy_shift(res: Results) -> str:
    """Per rule and pooled: step-1 and final entropy, the paired t interval of final - step 1, the primary verdict
    (primary.csv: the paired rule) and the verdict of the bootstrap rule fixed before issue #21."""
    changes = entropy_changes(res)
    verdicts = res.primary[res.primary.experiment == "random-reward"].set_index("treatment")
    by_seed = changes.groupby("seed", as_index=False)[["first", "final", "change"]].mean()
    groups = [*changes.groupby("entry", sort=True), (f"pool of all {len(changes)} runs", changes),
              (f"per seed: mean over the rules, {len(by_seed)} seeds", by_seed)]  # fmt: skip
    rows = []
    for entry, g in groups:
        lo, hi = t_interval(g["change"])
        v = verdicts.loc[entry] if entry in verdicts.index else None
        rows.append([
            entry, len(g), num(g["first"].mean(), 3, 1.0), num(g["final"].mean(), 3, 1.0),
            ci(g["change"].mean(), lo, hi, 3, 1.0, sign=True), "yes" if lo > 0 or hi < 0 else "no",
            "" if v is None else v["verdict"], "" if v is None else v["bootstrap_verdict"],
        ])  # fmt: skip
    head = ["rule", "n", "entropy, step 1", "entropy, final", "final − step 1, paired t", "t interval excludes 0",
            "primary verdict", "before #21: bootstrap rule"]  # fmt: skip
    return md_table(head, rows, right=1)


def entropy_pool(res: Results) -> str:
    changes = entropy_changes(res)["change"]
    lo, hi = t_interval(changes)
    return ci(changes.mean(), lo, hi, 3, 1.0, sign=True)


def spread(res: Results) -> str:
    """Per-seed mean@8 of the base models and of GRPO's runs (min to max over seeds), per section and model."""
    s = res.scores[res.scores.name == METRIC]
    rows = []
    for (experiment, model, task), g in s.groupby(["experiment", "model", "task"], sort=True):
        cells = []
        for entry in ("base", "grpo"):
            v = g[g.entry == entry]["value"]
            cells.append(f"{num(v.min())}–{num(v.max())}" if len(v) else "—")
        rows.append([experiment, model, task, g["seed"].nunique(), *cells])
    return md_table(["experiment", "model", "task", "seeds", "base models", "GRPO runs"], rows, right=3)


def power(res: Results) -> str:
    """The power of the comparisons with GRPO (bandpo.report.stats.power_table of stats.csv)."""
    rows = []
    for p in _row_series(power_table(res.stats)):
        where = p["experiment"] + (f" ({p['subset']})" if p["subset"] else "")
        rows.append([
            where, p["model"], p["label"], num(p["sd"], 2), int(p["n_seeds"]), num(p["mde"]),
            f"{num(p['mde_min'])}–{num(p['mde_max'])}", int(p["seeds_for_target"]),
        ])  # fmt: skip
    head = ["experiment", "model", "metric", "SD, points", "seeds", "MDE, points", "MDE per entry",
            "seeds for 2 points"]  # fmt: skip
    return md_table(head, rows, right=3)


def mde_main(res: Results) -> str:
    """The MDE of the main experiment's primary pair (primary.csv, BandPO-KL − GRPO on mean@8) per model size, in
    reverse name order (tiny-s, then tiny-m), with the seed pairs and the margin beside it:
    "4.8 points on tiny-s (3 seed pairs), 8.6 on tiny-m (3)"."""
    p = res.primary[(res.primary["experiment"] == "main") & (res.primary["metric"] == METRIC)]
    p = p.sort_values("model", ascending=False)
    parts = []
    for i, r in enumerate(_row_series(p)):
        unit, pairs = (" points", " seed pairs") if i == 0 else ("", "")
        parts.append(f"{num(r['mde'])}{unit} on {r['model']} ({int(r['n_pairs'])}{pairs})")
    return ", ".join(parts)


def clipfrac_main(res: Results) -> str:
    """The share of off-policy tokens clipping binds on in main's runs (runs.csv ``clipfrac``, a run's mean over
    its steps): the range over runs and over the entries' means, in percent."""
    r = res.runs[res.runs["experiment"] == "main"].dropna(subset=["clipfrac"])
    means = r.groupby("entry")["clipfrac"].mean()
    return (f"{num(r['clipfrac'].min(), 2)}-{num(r['clipfrac'].max(), 2)}% of off-policy tokens per run "
            f"({num(means.min(), 2)}-{num(means.max(), 2)}% as the entries' means)")  # fmt: skip


def cost(res: Results) -> str:
    """Training time of the published runs (runs.csv), per experiment and model."""
    rows = []
    r = res.runs
    for (experiment, model), g in r.groupby(["experiment", "model"], sort=True):
        t = g["train_seconds"]
        rows.append([experiment, model, len(g), int(g["steps"].iloc[0]), f"{t.min():.0f}–{t.max():.0f}",
                     num(t.sum(), 1, 1 / 60)])  # fmt: skip
    rows.append(["all", "", len(r), "", "", num(r["train_seconds"].sum(), 1, 1 / 60)])
    return md_table(["experiment", "model", "runs", "steps", "s per run", "minutes, sum"], rows, right=2)


def atlas(res: Results) -> str:
    """The equivalence atlas (atlas.csv: `bandpo.report.atlas.atlas_markdown`); a line saying how to make it
    before it is published."""
    if res.atlas is None:
        return "(not published yet: `snakemake --cores all` writes results/atlas.csv, rule atlas)"
    return atlas_markdown(res.atlas)


# --------------------------------------------------------------------------------------------------------------
# the off-policy axis and the separation run (issue #21)
def _holds(v) -> bool | None:
    """axis.csv's ``holds`` as read back (True / False / empty for a statistic without a verdict)."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    return {"true": True, "false": False}.get(str(v).strip().lower())


def _axis(res: Results) -> pd.DataFrame:
    a = res.axis.copy()
    a["holds"] = a["holds"].map(_holds).astype(object)
    return a


def axis_verdict(res: Results) -> str:
    """The verdict sentence of each design axis and model, as the config's ``verdicts`` rule fixes it."""
    return "; ".join(axis_verdicts(_axis(res))) + "."


def _yes(v) -> str:
    return {True: "yes", False: "no"}.get(_holds(v), "")


def axis_rules(res: Results) -> str:
    """Rules (a) and (b) of each axis: the per-seed slope over the axis value (mean, 95% t interval over seeds) and
    the statistic at the largest value; clip fractions in percent, entropy differences in nats."""
    a = _axis(res)
    rows = []
    for (axis_id, model), g in a.groupby(["axis", "model"], sort=True):
        top = g["value"].max()
        label = f"{axis_id}, {model}"
        for r in _row_series(g[g["rule"] == "a engagement"]):
            at = g[(g["rule"] == "clip upper low") & (g["arm"] == r["arm"]) & (g["value"] == top)]
            at_top = ci(*at[["estimate", "ci_low", "ci_high"]].iloc[0], 2) + "%" if len(at) else ""
            rows.append([label, "(a) engagement: upper clip fraction, old p < 0.2", r["arm"], int(r["n"]),
                         ci(r["estimate"], r["ci_low"], r["ci_high"], 3, 100.0, sign=True) + " pp",
                         at_top, _yes(r["holds"])])  # fmt: skip
        for r in _row_series(g[g["rule"] == "b mechanism"]):
            at = g[(g["rule"] == "entropy auc diff") & (g["arm"] == r["arm"]) & (g["value"] == top)]
            at_top = ci(*at[["estimate", "ci_low", "ci_high"]].iloc[0], 3, 1.0, sign=True) if len(at) else ""
            rows.append([label, f"(b) mechanism: entropy, {r['arm']} − {r['control']}", r["arm"], int(r["n"]),
                         ci(r["estimate"], r["ci_low"], r["ci_high"], 4, 1.0, sign=True), at_top,
                         _yes(r["holds"])])  # fmt: skip
    top_label = "largest D" if a.empty else f"at D = {a['value'].max():g}"
    head = ["axis", "rule", "arm", "seeds", "slope per unit D [95% t]", f"{top_label} [95% t]", "holds"]
    return md_table(head, rows, right=3)


def axis_accuracy(res: Results) -> str:
    """Rule (c): per arm and axis value, the paired mean@8 difference from the control (points, 95% paired t
    interval, and its minimum detectable difference at 80% power)."""
    a = _axis(res)
    c = a[a["rule"] == "c accuracy"]
    values = sorted(c["value"].dropna().unique())
    rows = []
    for (model, arm), g in c.groupby(["model", "arm"], sort=False):
        by = g.set_index("value")
        cells = []
        for v in values:
            if v in by.index:
                r = by.loc[v]
                cells.append(f"{ci(r['estimate'], r['ci_low'], r['ci_high'], sign=True)} (MDE {num(r['mde'])})")
            else:
                cells.append("—")
        rows.append([model, f"{arm} − {g['control'].iloc[0]}", *cells])
    return md_table(["model", "paired mean@8 difference", *[f"D = {v:g}" for v in values]], rows, right=2)


def axis_accuracy_summary(res: Results) -> str:
    """Rule (c) in one sentence: how many of the paired mean@8 differences exclude 0, and which."""
    c = _axis(res)
    c = c[c["rule"] == "c accuracy"].dropna(subset=["ci_low", "ci_high"])
    out = c[(c["ci_low"] > 0) | (c["ci_high"] < 0)]
    named = "; ".join(f"{r.arm} − {r.control} at D = {r.value:g}, {ci(r.estimate, r.ci_low, r.ci_high, sign=True)}"
                      for r in out.itertuples())  # fmt: skip
    return f"{len(out)} of {len(c)} paired mean@8 differences exclude 0" + (f" ({named})" if named else "")


def axis_table(res: Results) -> str:
    """Per axis value and arm (mean over seeds): upper and lower clip fractions among tokens of old probability
    < 0.2 and overall, mean rollout entropy (area under the curve per step), final entropy, approx KL and mean@8
    (axis_runs.csv)."""
    r = pd.read_csv(res.folder / "axis_runs.csv")
    cols = ["clip_upper_low", "clip_lower_low", "clip_upper", "clip_lower", "entropy_auc", "entropy_final",
            "approx_kl", "score"]  # fmt: skip
    g = r.groupby(["model", "value", "entry"], sort=True)
    m = g[cols].mean()
    n = g.size()
    rows = []
    for (model, value, entry), x in m.iterrows():
        rows.append([model, f"{value:g}", entry, int(n[(model, value, entry)]),
                     *(num(x[c], 2) + "%" for c in cols[:4]), num(x["entropy_auc"], 3, 1.0),
                     num(x["entropy_final"], 3, 1.0), num(x["approx_kl"], 4, 1.0), num(x["score"])])  # fmt: skip
    head = ["model", "D", "entry", "seeds", "upper clip, p < 0.2", "lower clip, p < 0.2", "upper clip", "lower clip",
            "entropy (mean)", "entropy (final)", "approx KL", "mean@8"]  # fmt: skip
    return md_table(head, rows, right=3)


def selection_table(res: Results) -> str:
    """The selection rule's table (`Results.selection`): per D, GRPO's paired gain over the base model, whether its
    interval lies above the rule's minimum (0, or revision 3's ``min_gain``) and the cell chosen."""
    name, _setting, t = res.selection
    cfg = res.provenance["config"]["experiments"].get(name) or {}
    min_gain = float((cfg.get("select") or SEPARATION_RULE).get("min_gain") or 0.0)
    rows = [[r["model"], f"{r['value']:g}", r["entry"], int(r["n"]),
             ci(r["gain"], r["ci_low"], r["ci_high"], sign=True), _yes(r["qualifies"]), "yes" if r["selected"] else ""]
            for r in _row_series(t)]  # fmt: skip
    above = f"interval above {min_gain:g} points" if min_gain else "interval above 0"
    head = ["model", "D", "entry", "seeds", "gain over the base model, paired t", above, "selected"]
    return md_table(head, rows, right=3)


def _score_clause(p: pd.Series) -> str:
    """A primary.csv score row as a clause: the paired difference in points over its seed pairs, its verdict, the
    margin it was judged against and the MDE."""
    margin = p.get("margin", np.nan)
    judged = f"margin {_margin_text(margin)}, " if margin == margin else ""
    return (
        f"{p['treatment']} − {p['control']} {p['metric']} {ci(p['difference'], p['ci_low'], p['ci_high'], sign=True)}"
        f" points over {int(p['n_pairs'])} seed pairs, {p['verdict']} ({judged}MDE {num(p['mde'])} points)"
    )


def _entropy_clause(e: pd.Series) -> str:
    """A primary.csv entropy row (entropy_final, entropy_auc) as a clause, in nats."""
    what = {"entropy_final": "final entropy", "entropy_auc": "entropy AUC"}[e["metric"]]
    margin = e.get("margin", np.nan)
    judged = f", margin ±{margin:.3f}" if margin == margin else ""
    d = ci(e["difference"], e["ci_low"], e["ci_high"], 3, 1.0, sign=True)
    return f"{what} {e['treatment']} − {e['control']} {d} nats ({e['verdict']}{judged})"


def _experiment_primary(res: Results, name: str) -> tuple[pd.Series, pd.DataFrame]:
    p = res.primary[res.primary.experiment == name]
    if p.empty:
        raise KeyError(f"primary.csv has no rows of experiment {name!r}")
    return p[p.metric == METRIC].iloc[0], p[p.metric.str.startswith("entropy")]


def separation(res: Results) -> str:
    """One sentence: the separation run's regime (selected from the axis by its rule, or fixed in advance in its
    config's ``train``) and the primary paired difference with its interval, verdict, margin and MDE (its entropy
    rows: `entropy_rows`)."""
    cfg = res.provenance["config"]["experiments"]
    name = "separation"
    if any(v.get("select") for v in cfg.values()):
        name, setting, table = res.selection
        ((key, value),) = setting.items()
        how = "selected" if table["selected"].any() else "the fallback: no D qualified"
    else:
        ((key, value),) = (cfg[name].get("train") or {}).items()
        how = "fixed before the run"
    score, _entropy = _experiment_primary(res, name)
    parts = [f"at {key} = {value:g} ({how}), {_score_clause(score)}"]
    s = res.scores[(res.scores.experiment == name) & (res.scores.name == METRIC) & (res.scores.task == score["task"])]
    per_seed = s.pivot_table(index="seed", columns="entry", values="value")
    if (per_seed[score["treatment"]] == per_seed[score["control"]]).all():
        parts.append("the same score on every seed")
    return "; ".join(parts)


def entropy_rows(experiment: str) -> Callable[[Results], str]:
    """The paired entropy rows of an experiment's primary.csv (final entropy, entropy AUC), one clause each."""

    def block(res: Results) -> str:
        _score, entropy = _experiment_primary(res, experiment)
        return "; ".join(_entropy_clause(e) for e in _row_series(entropy))

    return block


def _steps_of(res: Results, experiment: str) -> int:
    runs = res.runs[res.runs.experiment == experiment]
    return int(runs["steps"].max())


def mde_measured(res: Results) -> str:
    """Per primary score comparison: the seed pairs, the SD of the paired differences this run measured (from
    scores.csv) and the MDE at 80% power it gives (primary.csv's ``mde``), beside the margin."""
    rows = []
    for p in _row_series(res.primary[res.primary.metric == METRIC]):
        sc = res.scores[(res.scores.experiment == p["experiment"]) & (res.scores.model == p["model"])
                        & (res.scores.name == METRIC) & (res.scores.task == p["task"])]  # fmt: skip
        per_seed = sc.pivot_table(index="seed", columns="entry", values="value")
        d = (per_seed[p["treatment"]] - per_seed[p["control"]]).dropna()
        rows.append([p["experiment"], p["model"], f"{100 * d.std(ddof=1):.2f}", str(len(d)), num(p["mde"]),
                     _margin_text(p.get("margin", np.nan))])  # fmt: skip
    head = ["experiment", "model", "SD measured (points)", "seed pairs", "measured MDE (points)", "margin"]
    return md_table(head, rows, right=4)


def seeds_summary(res: Results) -> str:
    """How many seeds each experiment's rows average (runs.csv): the primary pair's (primary.csv's treatment and
    control), then the other trained entries', per experiment in the order the runs list them."""
    parts = []
    for xp, runs in res.runs.groupby("experiment", sort=False):
        counts = runs.groupby(["model", "entry"])["seed"].nunique()
        p = res.primary[(res.primary.experiment == xp) & (res.primary.metric == METRIC)]
        pair = set(p["treatment"]) | set(p["control"])
        in_pair = counts[[e in pair for _m, e in counts.index]]
        others = sorted(set(counts[[e not in pair for _m, e in counts.index]]))
        if in_pair.empty:
            parts.append(f"{xp} {'/'.join(map(str, sorted(set(counts))))}")
            continue
        text = f"{xp} {'/'.join(map(str, sorted(set(in_pair))))} for the primary pair"
        parts.append(text + (f", {'/'.join(map(str, others))} for the other entries" if others else ""))
    return "; ".join(parts)


def horizon(res: Results) -> str:
    """The horizon experiment in one sentence: its steps, the paired final mean@8 (verdict, margin, MDE) and each
    run's entropy fall, step-1 entropy / final (`collapse_factors`; its paired entropy rows: `entropy_rows`)."""
    score, _entropy = _experiment_primary(res, "horizon")
    parts = [f"at {_steps_of(res, 'horizon')} steps, {_score_clause(score)}"]
    falls = collapse_factors(res.runs, res.provenance["config"]["experiments"])
    for entry, g in falls[falls.experiment == "horizon"].groupby("entry", sort=False):
        factors = ", ".join(f"{f:.1f}" for f in g["factor"])
        parts.append(f"{entry}'s entropy fell {factors}-fold (step 1 / final; {int(g['collapsed'].sum())} of "
                     f"{len(g)} runs at least {g['threshold'].iloc[0]:g}-fold)")  # fmt: skip
    return "; ".join(parts)


def horizon_holds(res: Results) -> str:
    """Whether the 64-step verdict of the primary pair on the horizon's model (main's primary) holds at the
    horizon's length: the same verdict or not, each with its difference and seed pairs."""
    late, _ = _experiment_primary(res, "horizon")
    p = res.primary
    (early,) = _row_series(p[(p.experiment == "main") & (p.model == late["model"]) & (p.metric == METRIC)])

    def said(r: pd.Series, steps: int, xp: str) -> str:
        d = ci(r["difference"], r["ci_low"], r["ci_high"], sign=True)
        return f"{r['verdict']} at {steps} steps ({d} points, {xp}, {int(r['n_pairs'])} seed pairs)"

    a, b = said(early, _steps_of(res, "main"), "main"), said(late, _steps_of(res, "horizon"), "horizon")
    if early["verdict"] == late["verdict"]:
        return f"holds on {late['model']}: {a}; {b}"
    if late["verdict"] == UNRESOLVED:  # the longer run cannot decide: neither confirmed nor contradicted
        return (f"is neither confirmed nor contradicted on {late['model']}: {a}; {b}, MDE {num(late['mde'])} points "
                f"against the margin {_margin_text(late.get('margin', np.nan))}")  # fmt: skip
    return f"does not hold on {late['model']}: {a}, but {b}"


def _dag_table(dag: pd.DataFrame) -> str:
    """A DAG run's per-rule cost table (a dag_rules.csv of `python -m bandpo.plan.budget times --csv`), with the
    median fixed cost per job (``fixed_s``: wall time minus the steps or scorings the job recorded) where the table has
    it."""
    fixed = "fixed_s" in dag.columns
    rows = [[r["rule"], int(r["jobs"]), "" if r["rule"] == "all" else f"{r['wall_s_mean']:.0f}",
             f"{r['wall_s_sum']:.0f}", f"{r['cpu_s_sum']:.0f}", f"{r['minutes_per_core']:.1f}"]
            + ([f"{r['fixed_s']:.1f}" if pd.notna(r["fixed_s"]) else ""] if fixed else [])
            for r in _row_series(dag)]  # fmt: skip
    head = ["rule", "jobs", "wall s / job", "wall s, sum", "CPU s, sum", "sum / cores, min"]
    return md_table(head + (["fixed s / job (median)"] if fixed else []), rows, right=1)


def _dag_elapsed(dag: pd.DataFrame) -> str:
    """A DAG run's wall time in minutes, first to last job (row ``all``)."""
    return f"{dag.loc[dag['rule'] == 'all', 'elapsed_min'].iloc[0]:.1f}"


def dag_cost(res: Results) -> str:
    """The per-rule cost of the publication run (dag_rules.csv)."""
    return _dag_table(res.dag)


def dag_elapsed(res: Results) -> str:
    """The publication run's wall time in minutes (dag_rules.csv)."""
    return _dag_elapsed(res.dag)


# --------------------------------------------------------------------------------------------------------------
# the CPU verl profile (config/verl-cpu.yaml), published under results/verl-cpu/
VERL_PROFILE = "verl-cpu"


def _verl_table(res: Results, name: str) -> pd.DataFrame:
    return pd.read_csv(res.folder / VERL_PROFILE / name, keep_default_na=False, na_values=[""])


def verl_beside(res: Results) -> str:
    """Per entry, verl's runs beside the local trainer's runs of the same base model and seed (results/verl-cpu/local)
    (beside.csv, `bandpo.report.tables.beside_table`): mean@8 of each, the per-seed differences and their mean,
    the training accuracy over the last 10% of steps, and the training seconds per run (blank where absent)."""

    def mean(col: pd.Series, fmt: Callable[[float], str]) -> str:
        return fmt(col.mean()) if col.notna().any() else ""

    seconds = lambda v: f"{v:.0f}"  # noqa: E731
    rows = []
    for entry, g in _verl_table(res, "beside.csv").groupby("entry", sort=False):
        g = g.sort_values("seed")
        both = g[g[f"{METRIC}_other"].notna()]
        rows.append([entry, ", ".join(str(int(s)) for s in g["seed"]), mean(g[f"{METRIC}_ours"], num),
                     mean(both[f"{METRIC}_other"], num), ", ".join(num(d, sign=True) for d in both["diff"]),
                     mean(both["diff"], lambda v: num(v, sign=True)), mean(g["accuracy_final_ours"], num),
                     mean(both["accuracy_final_other"], num), mean(g["train_seconds_ours"], seconds),
                     mean(both["train_seconds_other"], seconds)])  # fmt: skip
    head = ["entry", "seeds", f"{METRIC} verl", f"{METRIC} local", "verl − local per seed", "mean", "train acc verl",
            "train acc local", "train s / run, verl", "train s / run, local"]  # fmt: skip
    return md_table(head, rows, right=2)


def verl_cost(res: Results) -> str:
    """The per-rule cost of the profile's run (results/verl-cpu/dag_rules.csv)."""
    return _dag_table(_verl_table(res, "dag_rules.csv"))


def verl_elapsed(res: Results) -> str:
    """The profile's wall time in minutes (results/verl-cpu/dag_rules.csv)."""
    return _dag_elapsed(_verl_table(res, "dag_rules.csv"))


# --------------------------------------------------------------------------------------------------------------
# sentences: what the tables say, generated so that the prose cannot go stale
def _where(experiment: str, model: str, subset: str = "") -> str:
    return f"{experiment} ({model}{', ' + subset + ' subset' if subset else ''})"


def primary_summary(res: Results) -> str:
    """The verdict of every score comparison of primary.csv (BandPO-KL − GRPO, paired), one clause each."""
    parts = []
    for p in _row_series(res.primary[res.primary.metric == METRIC]):
        subset = res.scores.loc[res.scores.task == p["task"], "subset"].iloc[0]
        parts.append(f"{_where(p['experiment'], p['model'], subset)} {p['verdict']}")
    n = sum(1 for p in _row_series(res.primary[res.primary.metric == METRIC]) if p["verdict"] != "unresolved")
    return f"{n} of {len(parts)} resolved: " + "; ".join(parts)


def separated(res: Results, experiment: str = "main") -> str:
    """How many entries of an experiment's sections have a paired mean@8 interval from GRPO that excludes 0, and
    which (with the sign of the difference)."""
    b = res.board[(res.board.experiment == experiment) & (res.board.entry != "base")]
    b = b[b.entry != b.baseline]
    lo, hi = b[f"{METRIC}_diff_t_ci_low"], b[f"{METRIC}_diff_t_ci_high"]
    hits = [f"{r['entry']} on {r['model']} ({'+' if r[f'{METRIC}_diff'] > 0 else '−'})"
            for r in _row_series(b[(lo > 0) | (hi < 0)])]  # fmt: skip
    return f"{len(hits)} of its {len(b)} comparisons with GRPO (entry x model)" + (
        f": {', '.join(hits)}" if hits else ""
    )


def gains_summary(res: Results) -> str:
    """Where GRPO's paired gain over its base model has a 95% interval above 0, and where not."""
    yes, no = [], []
    for experiment, subset, base in base_rows(res):
        (yes if base[f"{METRIC}_diff_t_ci_high"] < 0 else no).append(_where(experiment, base["model"], subset))
    return f"above 0 on {', '.join(yes) or 'none'}; not on {', '.join(no) or 'none'}"


BLOCKS: dict[str, Callable[[Results], str]] = {
    "headline": headline,
    "primary": primary,
    "gains": gains,
    "spread": spread,
    "power": power,
    "mde-main": mde_main,
    "clipfrac-main": clipfrac_main,
    "cost": cost,
    "entropy-shift": entropy_shift,
    "entropy-pool": entropy_pool,
    "table-main": leaderboard_block("main"),
    "table-random-reward": leaderboard_block("random-reward"),
    "table-probe-probe": leaderboard_block("probe", "probe"),
    "table-probe-rest": leaderboard_block("probe", "rest"),
    "atlas": atlas,
    "axis-verdict": axis_verdict,
    "axis-rules": axis_rules,
    "axis-accuracy": axis_accuracy,
    "axis-accuracy-summary": axis_accuracy_summary,
    "axis-table": axis_table,
    "selection": selection_table,
    "separation": separation,
    "table-separation": leaderboard_block("separation"),
    "horizon": horizon,
    "horizon-entropy": entropy_rows("horizon"),
    "separation-entropy": entropy_rows("separation"),
    "seeds": seeds_summary,
    "mde-measured": mde_measured,
    "horizon-holds": horizon_holds,
    "table-horizon": leaderboard_block("horizon"),
    "dag-cost": dag_cost,
    "primary-summary": primary_summary,
    "separated-main": separated,
    "gains-summary": gains_summary,
    "dag-elapsed": dag_elapsed,
    "verl-beside": verl_beside,
    "verl-cost": verl_cost,
    "verl-elapsed": verl_elapsed,
    "n-runs": lambda res: str(len(res.runs)),
    "commit": lambda res: f"`{res.provenance['git_commit'][:7]}`",
}


def render(text: str, res: Results) -> str:
    """``text`` with every generated block's body rewritten; a table block keeps its own lines."""

    def body(m: re.Match) -> str:
        folder, _, name = m["name"].rpartition("/")  # FOLDER/NAME: the block made from results/FOLDER/
        if name not in BLOCKS:
            raise KeyError(f"unknown generated block {name!r}; known: {', '.join(sorted(BLOCKS))}")
        out = BLOCKS[name](res.part(folder) if folder else res)
        if m["body"].startswith("\n") or "\n" in out:  # a block on lines of its own
            out = f"\n{out}\n"
        return f"{m[1]}{out}{m[4]}"

    return BLOCK.sub(body, text)


def update(root: str | Path = ".", results: str | Path | None = None, check: bool = False) -> list[Path]:
    """Regenerate the blocks of every doc file under ``root``; returns the files whose text changed (with
    ``check``, the files that are stale, left as they are)."""
    root = Path(root)
    res = Results(results if results is not None else root / "results")
    changed = []
    for path in sorted({p for pattern in DOC_FILES for p in root.glob(pattern)}):
        text = path.read_text(encoding="utf-8")
        new = render(text, res)
        if new != text:
            changed.append(path)
            if not check:
                path.write_text(new, encoding="utf-8")
    return changed
