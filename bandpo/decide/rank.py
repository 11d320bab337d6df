"""Rank a new method entry against the published runs, without rerunning them.

With the fixed numerics (`bandpo.core.numerics`) a fresh clone rebuilds the same base models bit for bit, so the
published GRPO scores of base model m and seed s are the scores a GRPO run here would get. The workflow's target
``results/{profile}/rank/{entry}.md`` (workflow/rules/rank.smk) then trains and scores only the new entry:

1. `base_check` (rule ``base_check``, one per model): the sha256 of every base model folder built here against
   ``base_models`` of the published ``provenance.json``. All equal: the published runs of that model pair with
   ours. Any differs (another CPU without AVX2, native numerics, another commit's recipe): the rule says so and the
   DAG trains and scores GRPO here too, and the entry is paired with that instead.
2. `rank_table` (rule ``rank``): per model and metric, the entry's scores paired by seed with GRPO's (published or
   rerun, as the check decided): the mean paired difference with its 95% paired t interval (the estimate) and the
   verdict rule's single look (`bandpo.stats.rule.fixed_n_decision`, docs/statistics.md): is the entry better
   than GRPO by at least main's margin for that model? ``better``, ``not better by the margin`` or ``undecided``,
   with Holm's adjustment of each one-sided test's p-values within the ranking's family (every model and metric
   ranked); the margins are the run plan's (`bandpo.study.report_experiments`: the config's, fixed before the
   runs, as fractions; rule ``rank`` passes this config's, the command line falls back to the published config's);
   and, when paired with the published runs, its place among the published entries of that model by mean.

    python -m bandpo.decide base-check --published results --model tiny-s --dirs resources/models/tiny-s --out X.json
    python -m bandpo.decide rank --results results/embedded --entry half_clip --published results \\
        --checks results/embedded/rank/base/tiny-s.json --out results/embedded/rank/half_clip.md
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from bandpo.analysis.experiments import verdict_label
from bandpo.analysis.load import load_eval_scores
from bandpo.analysis.scores import DEFAULT_BASELINE, paired_comparison
from bandpo.core.files import atomic_write_text, write_csv
from bandpo.core.provenance import weights_sha256
from bandpo.stats.design import ALPHA, BETA
from bandpo.stats.power import pairs_needed
from bandpo.stats.rule import BETTER, NOT_BETTER, UNDECIDED, WORDS, holm, one_sided_tests, rule_verdict
from bandpo.study import MAIN, Study

RANK_METRICS = ("mean@8", "pass@8")  # the leaderboard's headline metrics
BASELINE = DEFAULT_BASELINE


def _published_provenance(published: str | os.PathLike) -> dict:
    path = Path(published) / "provenance.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: rank pairs with a published results folder (config rank_against)")
    return json.loads(path.read_text(encoding="utf-8"))


def base_check(published: str | os.PathLike, model: str, dirs: Sequence[str | os.PathLike]) -> dict:
    """Whether the base model folders ``dirs`` of ``model`` built here are the published ones: per folder the sha256
    of its weights now (`bandpo.core.provenance.weights_sha256`) against the published provenance's record of the
    same path. ``match`` is True only when every folder is recorded there and equal."""
    prov = _published_provenance(published)
    recorded = {m["path"]: m.get("weights_sha256") for m in prov.get("base_models") or []}
    folders = []
    for folder in map(str, dirs):
        local = weights_sha256(folder)
        if not local:
            raise FileNotFoundError(f"base model {folder}: no weights file (build it first)")
        theirs = recorded.get(Path(folder).as_posix())
        reason = (
            "not in the published provenance"
            if theirs is None
            else ("identical" if theirs == local else "weights differ from the published ones")
        )
        folders.append({"path": Path(folder).as_posix(), "local": local, "published": theirs, "status": reason})
    return {
        "model": model,
        "published": str(published),
        "published_commit": prov.get("git_commit"),
        "match": all(f["status"] == "identical" for f in folders),
        "folders": folders,
    }


def _per_seed(scores: pd.DataFrame, model: str, entry: str, metric: str) -> pd.DataFrame:
    rows = scores[
        (scores["experiment"] == MAIN)
        & (scores["model"] == model)
        & (scores["entry"] == entry)
        & (scores["name"] == metric)
        & (scores["subset"].fillna("") == "")
    ]
    return rows[["seed", "task", "value"]].astype({"seed": int, "value": float})


def plan_margins(config: dict) -> dict[str, float]:
    """Main's margin per model, a fraction of the score, from the run plan of a config (`Study.from_config`: the
    config's points converted there); {} when main is not part of it or declares none."""
    return Study.from_config(config).margins(MAIN) if MAIN in (config.get("experiments") or {}) else {}


def published_margins(published: str | os.PathLike) -> dict[str, float]:
    """Main's margin per model from the config the published run recorded (provenance.json), through the run plan
    (`plan_margins`); {} without one (then no comparison can read "not better by the margin")."""
    return plan_margins(_published_provenance(published).get("config") or {})


RANK_COLUMNS = ["model", "metric", "entry", "baseline_source", "n_pairs", "entry_mean", "baseline_mean", "diff",
                "diff_t_ci_low", "diff_t_ci_high", "diff_sd", "margin", "p_better", "p_not_better", "p_better_holm",
                "p_not_better_holm", "verdict", "label", "n_needed", "place", "of", "unpaired"]  # fmt: skip


def rank_table(
    results_dir: str | os.PathLike,
    entry: str,
    published: str | os.PathLike,
    checks: Sequence[dict],
    metrics: Sequence[str] = RANK_METRICS,
    margins: dict[str, float] | None = None,
) -> pd.DataFrame:
    """The entry against GRPO per model (one `base_check` each) and metric (`rank_frame`). ``margins``: main's per
    model from the run plan (fractions; rule ``rank`` passes this config's); None: the published config's
    (`published_margins`). Scores in [0, 1]."""
    ours = load_eval_scores(results_dir)
    if ours.empty or entry not in set(ours["entry"]):
        raise ValueError(f"no scores of entry {entry!r} under {results_dir}/eval")
    path = Path(published) / "scores.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: rank pairs with a published results folder (config rank_against)")
    theirs = pd.read_csv(path, keep_default_na=False, na_values=[""])
    return rank_frame(
        ours,
        theirs,
        entry,
        checks,
        metrics,
        margins=published_margins(published) if margins is None else margins,
        where=(str(path), f"{results_dir}/eval"),
    )


def rank_frame(
    ours: pd.DataFrame,
    theirs: pd.DataFrame,
    entry: str,
    checks: Sequence[dict],
    metrics: Sequence[str] = RANK_METRICS,
    margins: dict[str, float] | None = None,
    where: tuple[str, str] = ("the published scores", "the scores here"),
) -> pd.DataFrame:
    """`rank_table` from the score frames: ``ours`` (this checkout's, `load_eval_scores`) and ``theirs`` (the
    published scores.csv); ``margins`` per model (fractions, main's from the run plan; main applies its margin to
    every metric); ``where`` names the two in errors. Columns (`RANK_COLUMNS`): model, metric, entry,
    baseline_source (``published`` or ``rerun here``), n_pairs, entry_mean, baseline_mean, diff with its 95%
    paired t interval and SD, margin (NaN if none), p_better (of H0: Δ <= 0) and p_not_better (of H1: Δ >=
    margin) raw and Holm-adjusted within the ranking's family (its rows), the adjusted verdict and its words
    (label), n_needed (the pairs at which a single look at the family's strictest levels decides for sure at this
    SD), place (1 = the highest mean among the published entries of the model with this one added; NaN when paired
    with a rerun) and of (how many entries that ranking holds)."""
    rows = []
    for check in checks:
        model = check["model"]
        source = "published" if check["match"] else "rerun here"
        baseline_scores = theirs if check["match"] else ours
        for metric in metrics:
            x = _per_seed(ours, model, entry, metric)
            y = _per_seed(baseline_scores, model, BASELINE, metric)
            if x.empty:
                raise ValueError(f"no {metric} of entry {entry!r} on model {model!r} in {where[1]}")
            if y.empty:
                source_name = where[0] if check["match"] else where[1]
                raise ValueError(f"no {metric} of {BASELINE!r} on model {model!r} in {source_name}")
            cmp = paired_comparison(x, y, n_resamples=0)
            margin = float((margins or {}).get(model, float("nan")))
            tests = one_sided_tests(cmp["diff"], cmp["diff_sd"], cmp["n_pairs"], margin)
            mean = float(x.groupby("seed")["value"].mean().mean())
            seeds = set(x["seed"])  # means over the entry's seeds (GRPO, the primary pair, may have more)
            place, of = float("nan"), float("nan")
            if check["match"]:
                pub = theirs[(theirs["experiment"] == MAIN) & (theirs["model"] == model) & (theirs["name"] == metric)]
                pub = pub[(pub["entry"] != "base") & (pub["entry"] != entry) & (pub["subset"].fillna("") == "")]
                pub = pub[pub["seed"].isin(seeds)]
                means = pub.groupby("entry")["value"].mean()
                place, of = 1 + int((means > mean).sum()), len(means) + 1
            rows.append({"model": model, "metric": metric, "entry": entry, "baseline_source": source,
                         "n_pairs": cmp["n_pairs"], "entry_mean": mean,
                         "baseline_mean": float(y[y["seed"].isin(seeds)].groupby("seed")["value"].mean().mean()),
                         "diff": cmp["diff"], "diff_t_ci_low": cmp["diff_t_ci_low"],
                         "diff_t_ci_high": cmp["diff_t_ci_high"], "diff_sd": cmp["diff_sd"], "margin": margin,
                         "p_better": tests["p_better"], "p_not_better": tests["p_not_better"], "place": place,
                         "of": of, "unpaired": cmp["unpaired"]})  # fmt: skip
    table = pd.DataFrame(rows, columns=RANK_COLUMNS)
    if table.empty:
        return table
    m = int(table["p_better"].notna().sum()) or 1
    table["p_better_holm"] = holm(table["p_better"].to_numpy(np.float64))
    table["p_not_better_holm"] = holm(table["p_not_better"].to_numpy(np.float64))
    table["verdict"] = [rule_verdict(b, nb) for b, nb in zip(table["p_better_holm"], table["p_not_better_holm"],
                                                             strict=True)]  # fmt: skip
    table["n_needed"] = [pairs_needed(sd, mg, ALPHA / m, BETA / m) for sd, mg in zip(table["diff_sd"], table["margin"],
                                                                                   strict=True)]  # fmt: skip
    words = zip(table["verdict"], table["margin"], table["n_needed"], strict=True)
    table["label"] = [verdict_label(v, mg, n_needed=need) for v, mg, need in words]
    return table[RANK_COLUMNS]


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def rank_markdown(table: pd.DataFrame, checks: Sequence[dict], entry: str, published: str) -> str:
    """The ranking as a page: the base-model check per model, then one row per model and metric (points)."""
    commit = next((c.get("published_commit") for c in checks if c.get("published_commit")), None)
    lines = [f"# {entry} against the published runs", ""]
    lines.append(f"Published runs: `{published}`" + (f" (commit `{str(commit)[:7]}`)" if commit else "") + ".")
    lines.append("")
    for c in checks:
        if c["match"]:
            lines.append(f"- {c['model']}: the base models built here are the published ones (sha256 identical): "
                         f"paired with the published {BASELINE} runs, which were not rerun.")  # fmt: skip
        else:
            bad = "; ".join(f"{f['path']}: {f['status']}" for f in c["folders"] if f["status"] != "identical")
            lines.append(f"- {c['model']}: base models differ from the published ones ({bad}): {BASELINE} was "
                         "trained and scored here too, and the entry is paired with that run.")  # fmt: skip
    lines += [
        "",
        f"| model | metric | seeds | {entry} | {BASELINE} | {entry} − {BASELINE}, paired 95% t | margin | verdict | "
        "place among published entries |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in table.itertuples():
        place = f"{int(r.place)} of {int(r.of)}" if r.place == r.place else "(paired with a rerun)"
        margin_text = f"{100 * r.margin:.1f}" if r.margin == r.margin else "—"
        lines.append(
            f"| {r.model} | {r.metric} | {r.n_pairs} | {100 * r.entry_mean:.1f} | {100 * r.baseline_mean:.1f} "
            f"({r.baseline_source}) | {_pts(r.diff)} [{_pts(r.diff_t_ci_low)}, {_pts(r.diff_t_ci_high)}] | "
            f"{margin_text} | {r.label} | {place} |"
        )
    lines += [
        "",
        "Scores in percent (mean over seeds); differences in points, per seed the entry's run minus "
        f"{BASELINE}'s from the same base model and seed: the estimate, with its 95% paired t interval. The verdict "
        f"answers one question (docs/statistics.md): is {entry} better than {BASELINE} by at least the margin δ "
        "(main's, fixed in the config before the runs; points of every metric)? What each word shows: "
        + " ".join(WORDS[w] for w in (BETTER, NOT_BETTER, UNDECIDED))
        + f" The {len(table)} rows are one family: each test's p-values Holm-adjusted within it. The place ranks the "
        "entry's mean among the published entries' means of that model (the published page's ranking), when paired "
        "with the published runs.",
        "",
    ]
    return "\n".join(lines)


def write_rank(
    results_dir: str | os.PathLike, entry: str, published: str | os.PathLike, checks: Sequence[str | os.PathLike],
    out: str | os.PathLike, margins: dict[str, float] | None = None,
) -> list[Path]:  # fmt: skip
    """Write ``out`` (Markdown) and ``out`` with .csv from the base checks' JSON files; returns both paths.
    ``margins``: main's per model from the run plan (None: the published config's)."""
    parsed = [json.loads(Path(c).read_text(encoding="utf-8")) for c in checks]
    table = rank_table(results_dir, entry, published, parsed, margins=margins)
    out = Path(out)
    csv_path = out.with_suffix(".csv")
    write_csv(table, csv_path)
    atomic_write_text(out, rank_markdown(table, parsed, entry, str(published)))
    return [out, csv_path]
