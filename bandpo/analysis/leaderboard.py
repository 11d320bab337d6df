"""The leaderboard as frames: the wide frame of leaderboard.csv (one row per model and entry, with every headline
statistic and the training columns), the per-task frame, and one profile's runs beside another's (beside.csv).
Pure functions of frames; the Markdown and HTML renderings are `bandpo.report`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from bandpo.analysis.load import params_label, parse_metric
from bandpo.analysis.scores import ALL_TASKS, DEFAULT_BASELINE, HEADLINE, PAIRED_COLUMNS
from bandpo.study import BASE_ENTRY


def entry_labels(summaries: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(model, entry) -> the label of its runs (`bandpo.analysis.load.Run.summary`), the first seed's when seeds
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
    (`bandpo.analysis.scores.paired_comparison`): L_diff, L_diff_ci_low, L_diff_ci_high, L_diff_t_ci_low,
    L_diff_t_ci_high, L_diff_sd, L_diff_poi, L_diff_poi_ci_low, L_diff_poi_ci_high, L_mde, L_seeds_for_target,
    L_n_pairs, L_unpaired; then the training columns of `run_stats`. ``params`` is the entry's label from
    ``labels`` ((model, entry) -> the runs' ``method_label``, `entry_labels`), else `params_label` of its
    parameters; ``params_json`` the parameters as canonical JSON; ``grader`` the grader(s) of its scores from
    ``graders`` (`entry_graders`)."""
    overall = stats[stats["task"] == ALL_TASKS] if not stats.empty else stats
    keys = set()
    if not overall.empty:
        keys |= set(map(tuple, overall[["model", "entry"]].to_numpy()))
    if not per_entry.empty:
        keys |= set(map(tuple, per_entry[["model", "entry"]].to_numpy()))
    ident = _identities(per_run, overall)
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
        row.update(_headline_columns(sub))
        t = per_entry[(per_entry["model"] == model) & (per_entry["entry"] == entry)] if not per_entry.empty else None
        if t is not None and not t.empty:
            row.update({c: t.iloc[0][c] for c in per_entry.columns if c not in ("model", "entry")})
        rows.append(row)
    return _ordered(pd.DataFrame(rows))


def _identities(per_run: pd.DataFrame | None, overall: pd.DataFrame) -> dict[tuple[str, str], dict[str, Any]]:
    """(model, entry) -> its profile, method and parameters, from the runs and the scores' statistics (the scores'
    identity wins over run.json's; both hold the same values when both exist)."""
    ident: dict[tuple[str, str], dict[str, Any]] = {}
    for frame in (per_run, overall):
        if frame is None or frame.empty:
            continue
        for r in frame.drop_duplicates(["model", "entry"]).itertuples():
            ident.setdefault((r.model, r.entry), {}).update(
                {k: getattr(r, k) for k in ("profile", "method", "params") if isinstance(getattr(r, k), str)}
            )
    return ident


def _headline_columns(sub: pd.DataFrame) -> dict[str, Any]:
    """One (model, entry)'s statistics over tasks (``sub``: its rows of stats.csv with task "all"), as the
    leaderboard's columns of each headline metric (`leaderboard`)."""
    out: dict[str, Any] = {}
    for family in HEADLINE:
        s = sub[sub["metric"] == family] if not sub.empty else sub
        if s.empty:
            continue
        r = s.iloc[0]
        label = r["label"]
        out.update(
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
    return out


def _ordered(table: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard's rows in display order: per model, the base model first, then by mean@k, best first."""
    if table.empty:
        return table
    if "n_runs" in table:
        table["n_runs"] = table["n_runs"].fillna(0).astype(int)
    sort_col = headline_label(table, "mean")
    table["_base"] = table["entry"] != BASE_ENTRY
    table["_score"] = -table[sort_col].astype(float) if sort_col else 0.0
    table = table.sort_values(["model", "_base", "_score", "entry"], na_position="last", kind="stable")
    return table.drop(columns=["_base", "_score"]).reset_index(drop=True)


def headline_label(table: pd.DataFrame, family: str) -> str | None:
    """The leaderboard column of a metric family (``mean`` -> ``mean@8``), None if absent."""
    for c in table.columns:
        if "_ci_" in c or c.endswith(("_iqm", "_poi")) or any(c.endswith(f"_{p}") for p in PAIRED_COLUMNS):
            continue
        fam, _ = parse_metric(c)
        if fam == family or (family == "mean" and c == "mean@n"):
            return c
    return None


def identical_to_baseline(r: Mapping[str, Any], label: str) -> bool:
    """Whether every paired difference of a leaderboard row from its baseline is exactly 0 (mean and SD both 0; an SD
    exists only from 2 pairs on): the entry ran as the baseline on every seed, no evidence either way (no member of
    a family of tests, `bandpo.analysis.family`; the pages say "identical")."""
    if r.get("entry") == r.get("baseline"):
        return False
    try:
        mean, sd = (float(r.get(f"{label}_{k}")) for k in ("diff", "diff_sd"))
    except (TypeError, ValueError):
        return False
    return mean == 0.0 and sd == 0.0


def per_task_table(
    stats: pd.DataFrame, table: pd.DataFrame, families: Sequence[str] = ("mean", "pass")
) -> pd.DataFrame:
    """One row per (model, entry), in the leaderboard's order, with each task's headline scores: for task T and
    metric label L (k = the task's n), columns ``T L``, ``T L_ci_low``, ``T L_ci_high`` (the t interval over
    seeds). Empty with one task."""
    if stats.empty or table.empty:
        return pd.DataFrame()
    per = stats[(stats["task"] != ALL_TASKS) & stats["metric"].isin(families)]
    per = per[per["k"] == per.groupby(["task", "metric"])["k"].transform("max")]  # pass@n, not pass@2 ...
    if per["task"].nunique() < 2:
        return pd.DataFrame()
    out = table[["profile", "model", "entry", "method", "params", "params_json", "n_seeds", "baseline"]].copy()
    for (task, label), g in per.groupby(["task", "label"], sort=True):
        name = f"{task} {label}"
        values = g.set_index(["model", "entry"])[["mean", "t_ci_low", "t_ci_high"]]
        values.columns = [name, f"{name}_ci_low", f"{name}_ci_high"]
        out = out.join(values, on=["model", "entry"])
    return out


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
