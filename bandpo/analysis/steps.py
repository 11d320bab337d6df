"""``steps.csv``: the per-step training metrics the published claims rest on, one row per (run, step), compact.

Every per-run statistic of ``runs.csv`` that comes from training (entropy at step 1 and final, final reward and
accuracy, clip fraction) and every training figure (entropy and reward curves, clip fraction by old-probability
bucket and direction, the probe's curves) is a function of these rows, so a reader recomputes them from the
committed file without the run folders (tests/unit/test_report.py checks it, through
`bandpo.analysis.training.run_stats`).

Columns, in order (a metric column only when some run logged it):

    experiment, model, entry, seed, step    the run and the step (from 1)
    offpolicy                               1: the update statistics below are over the off-policy updates of the
                                            step (metrics.jsonl's ``offpolicy/<key>``, what the report uses where
                                            logged); 0: over all its updates (a run without off-policy updates)
    entropy, reward_mean, accuracy          the rollouts': mean token entropy (nats), reward, share graded correct
    grader_retries, grader_timeouts         the rollouts' grading: items that overran the grader's first time budget
                                            and were graded again, items left undecided even then (scored 0;
                                            `bandpo.grader.api`): where a same-seed rerun's reward differs, these
                                            say whether a time budget decided it
    approx_kl_k3                            k3 estimate of KL(old || new) over the updates
    clipfrac, clipfrac_upper, clipfrac_lower            share of valid tokens clipped, and by direction (upper:
                                                        r > r_hi with A > 0; lower: r < r_lo with A < 0)
    clipfrac_upper/<bucket>, clipfrac_lower/<bucket>    the same within each old-probability bucket (p0.0-0.2 ...)
    token_frac/p0.0-0.2                     share of valid tokens in the lowest old-probability bucket
    stopped_frac_pos, stopped_frac_neg      tokens whose policy-loss gradient the loss stopped, with A > 0 / A < 0
    stopped_frac_pos/p0.0-0.2, stopped_frac_neg/p0.0-0.2   the same within the lowest bucket (the same measure for
                                                           every method: `bandpo.methods.stopped_diagnostics`)
    probe/p_correct, probe/accuracy         the probe's measurement (every ``probe_every`` steps; empty elsewhere)
    val/mean, val/pass                      the held-out curve: mean@k and pass@k on the validation split (every
                                            ``val_every`` steps; empty elsewhere); val/mean_before, val/pass_before
                                            on the first step's row: the policy before any update
    all/<key>                               for the runs of a design axis' cells only: the statistic over ALL the
                                            step's updates (the first, on-policy one included), as the axis' rules
                                            read it (`bandpo.analysis.axis.UPDATE_MEANS`: clip fractions, stopped
                                            fractions, approx_kl); empty for the other runs

Numbers are written with `STEP_DIGITS` significant digits: a statistic recomputed from the file agrees with the
report's (6 digits, from the full-precision metrics) to about 1e-5 relative.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from bandpo.core.files import atomic_write_text
from bandpo.core.run_contract import contract

STEP_DIGITS = 5
ID_COLUMNS = ["experiment", "model", "entry", "seed", "step"]
OFFPOLICY = "offpolicy"  # the flag column; also the prefix of the off-policy keys in metrics.jsonl
ALL = "all"  # prefix of the all-updates variant of an update statistic (the design axes' runs)
ROLLOUT_KEYS = ("entropy", "reward_mean", "accuracy", "grader_retries", "grader_timeouts")
PROBE_KEYS = ("probe/p_correct", "probe/accuracy")
VAL_KEYS = ("val/mean", "val/pass", "val/mean_before", "val/pass_before")


def lowest_bucket() -> str:
    return contract()["metrics"]["buckets"][0]


def update_keys() -> list[str]:
    """The statistics of a step's updates that steps.csv keeps (each the off-policy variant where the run logged
    one): KL, clip fractions overall, by direction and by bucket, the lowest bucket's token share and the stopped
    fractions by advantage sign."""
    buckets, low = contract()["metrics"]["buckets"], lowest_bucket()
    return [
        "approx_kl_k3",
        "clipfrac",
        "clipfrac_upper",
        "clipfrac_lower",
        *(f"clipfrac_{d}/{b}" for d in ("upper", "lower") for b in buckets),
        f"token_frac/{low}",
        "stopped_frac_pos",
        "stopped_frac_neg",
        f"stopped_frac_pos/{low}",
        f"stopped_frac_neg/{low}",
    ]


def steps_table(
    metrics: pd.DataFrame, all_updates: Sequence[str] = (), experiments: Collection[str] = ()
) -> pd.DataFrame:
    """The rows of steps.csv from the runs' metrics (`bandpo.analysis.load.run_metrics`: one row per run and step),
    sorted by experiment, model, entry, seed and step. A run's update statistics are its off-policy ones
    (``offpolicy/<key>``, flag ``offpolicy`` = 1) when it logged any, else those over all its updates (flag 0).
    ``all_updates``: keys whose all-updates value is also kept, as ``all/<key>``, for the runs of
    ``experiments`` (the design axes' cells, whose rules read them)."""
    if metrics.empty:
        return pd.DataFrame(columns=[*ID_COLUMNS, OFFPOLICY])
    m = metrics.copy()
    if "experiment" not in m:
        m["experiment"] = "main"
    m = m.sort_values(ID_COLUMNS, kind="stable").reset_index(drop=True)
    out = m[ID_COLUMNS].copy()
    out["seed"] = out["seed"].astype(int)
    out["step"] = out["step"].astype(int)
    keys = update_keys()
    logged_off = [f"{OFFPOLICY}/{k}" for k in keys if f"{OFFPOLICY}/{k}" in m]
    runs = m.groupby(["experiment", "model", "entry", "seed"], sort=False)
    has_off = runs[logged_off].transform(lambda c: c.notna().any()).any(axis=1) if logged_off else None
    off = has_off.to_numpy(bool) if has_off is not None else np.zeros(len(m), dtype=bool)
    out[OFFPOLICY] = off.astype(int)
    for key in ROLLOUT_KEYS:
        if key in m and m[key].notna().any():
            out[key] = pd.to_numeric(m[key], errors="coerce")
    for key in keys:
        plain = pd.to_numeric(m[key], errors="coerce") if key in m else pd.Series(np.nan, index=m.index)
        offp = f"{OFFPOLICY}/{key}"
        offv = pd.to_numeric(m[offp], errors="coerce") if offp in m else pd.Series(np.nan, index=m.index)
        value = offv.where(off, plain)
        if value.notna().any():
            out[key] = value
    for key in (*PROBE_KEYS, *VAL_KEYS):
        if key in m and m[key].notna().any():
            out[key] = pd.to_numeric(m[key], errors="coerce")
    cells = m["experiment"].isin(list(experiments))
    for key in all_updates:
        if key in m and cells.any():
            value = pd.to_numeric(m[key], errors="coerce").where(cells)
            if value.notna().any():
                out[f"{ALL}/{key}"] = value
    return out


def write_steps(
    metrics: pd.DataFrame, path: str | os.PathLike, all_updates: Sequence[str] = (), experiments: Collection[str] = ()
) -> Path:
    """Write `steps_table` of ``metrics`` to ``path`` (atomically), numbers to `STEP_DIGITS` significant digits."""
    table = steps_table(metrics, all_updates, experiments)
    text = table.to_csv(index=False, float_format=f"%.{STEP_DIGITS}g", lineterminator="\n")
    return atomic_write_text(Path(path), text)


def read_steps(path: str | os.PathLike, profile: str = "") -> pd.DataFrame:
    """steps.csv as a frame of the layout of `bandpo.analysis.load.run_metrics` (profile, experiment, model, entry,
    seed, step, metric columns; ``profile`` is not in the file: the published results are one profile's), with the
    update statistics of the off-policy rows under their ``offpolicy/<key>`` names (and the plain names left empty
    there), and each ``all/<key>`` column back under ``<key>`` where it is filled (a design axis' run: the
    all-updates value the run logged under that name), so that the report's functions
    (`bandpo.analysis.training.run_stats`, `bandpo.analysis.axis.run_outcomes`, the figures' data) read it as they read
    the run folders."""
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    frame.insert(0, "profile", profile)
    frame["experiment"] = frame["experiment"].fillna("main").astype(str)
    off = frame[OFFPOLICY].astype(bool) if OFFPOLICY in frame else pd.Series(False, index=frame.index)
    for key in update_keys():
        if key in frame:
            frame[f"{OFFPOLICY}/{key}"] = frame[key].where(off)
            frame[key] = frame[key].where(~off)
    for column in [c for c in frame.columns if c.startswith(f"{ALL}/")]:
        key = column[len(ALL) + 1 :]
        kept = frame.pop(column)
        frame[key] = kept.where(kept.notna(), frame[key]) if key in frame else kept
    return frame
