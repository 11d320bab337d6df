"""Doc blocks of the scores and their comparisons: the leaderboard's sections, the primary comparisons, GRPO's
gain over the base model, the spread over seeds, the power and the seeds behind each experiment."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy.stats import chi2

from bandpo.analysis.scores import power_table
from bandpo.analysis.training import RUN_METRICS
from bandpo.report.board import Board
from bandpo.report.columns import by_model, by_paired_difference, run_column, verdict_text, with_seeds
from bandpo.report.verdicts import PARTS, rerun_text, shows
from bandpo.stats.power import minimum_detectable_difference, pairs_needed
from bandpo.stats.rule import BETTER, NOT_BETTER
from docs.blocks.cells import (
    METRIC,
    ci,
    margin_text,
    md_table,
    num,
    paired,
    row_series,
    verdict_cell,
    verdict_parts,
)


def section(board: Board, experiment: str, subset: str = "") -> pd.DataFrame:
    return board.leaderboard[(board.leaderboard.experiment == experiment) & (board.leaderboard.subset == subset)]


TRAINING = ("entropy_final", "clipfrac")  # the training statistics a leaderboard block shows, as the page does


def leaderboard_block(experiment: str, subset: str = "") -> Callable[[Board], str]:
    """Every row of one section of the leaderboard, in the page's order (`by_paired_difference`): model, entry,
    mean@8, paired Δ, P(>grpo), pass@8, maj@8, then each training statistic of `TRAINING` with the page's header and
    text (`bandpo.report.columns.run_column` of its `RUN_METRICS` declaration)."""

    def block(board: Board) -> str:
        rows = []
        if section(board, experiment, subset).empty:
            return f"No rows of experiment {experiment} in this publication."
        shown = with_seeds(section(board, experiment, subset), board.scores).sort_values("model", kind="stable")
        training = [c for c in (run_column(RUN_METRICS[n], shown) for n in TRAINING) if c is not None]
        for r in row_series(pd.concat([by_paired_difference(g) for _, g in by_model(shown)])):
            base = r["entry"] == r["baseline"]
            rows.append([
                r["model"], r["entry"], ci(r[METRIC], r[f"{METRIC}_t_ci_low"], r[f"{METRIC}_t_ci_high"]), paired(r),
                "(baseline)" if base else num(r[f"{METRIC}_diff_poi"], 2, 1.0),
                num(r["pass@8"]), num(r["maj@8"]), *(c.text(r) for c in training),
            ])  # fmt: skip
        head = ["model", "entry", "mean@8", "Δ vs grpo (paired)", "P(>grpo)", "pass@8", "maj@8",
                *(c.head for c in training)]  # fmt: skip
        return md_table(head, rows, right=2)

    return block


def _base_row(board: Board, experiment: str, model: str, subset: str) -> pd.Series | None:
    """The base model's row of an experiment, else main's for that model (an experiment with ``base: false``, the
    horizon, scores no base row of its own), else None."""
    for xp in (experiment, "main"):
        try:
            return board.row(xp, model, "base", subset)
        except KeyError:
            continue
    return None


HEADLINE_PARTS = PARTS  # the published folders whose primaries the headline adds (bandpo.report.verdicts.PARTS)


def headline(board: Board, parts: tuple[str, ...] = HEADLINE_PARTS) -> str:
    """BandPO-KL against GRPO where the config fixed a primary comparison of scores, with the base model: the paired
    difference with its 95% paired t interval (the estimate), the margin δ of the question (is BandPO-KL better
    than GRPO by at least δ?), the verdict with the look and pairs it rests on, and the verdicts an independent
    rerun would give (`bandpo.report.verdicts.rerun_text`), from primary.csv (a demoted primary marked so); then the
    same rows of each published folder of ``parts``, its experiment named ``FOLDER`` (``FOLDER: EXPERIMENT`` when
    not main). Under the table, per row, what its verdict shows and what it does not (`bandpo.report.verdicts.shows`,
    the page's answer)."""
    rows, said = _headline_rows(board)
    for name in parts:
        more, words = _headline_rows(board.part(name), name)
        rows, said = rows + more, said + words
    head = ["experiment", "model", "base", "GRPO", "BandPO-KL", "BandPO-KL − GRPO, paired t", "margin",
            "verdict (look, pairs)", "a rerun: better / not better / undecided"]  # fmt: skip
    return md_table(head, rows, right=2) + "\n\n" + "\n".join(said)


def _headline_rows(board: Board, folder: str = "") -> tuple[list[list[str]], list[str]]:
    rows, said = [], []
    for p in row_series(board.primary[board.primary.metric == METRIC]):
        subset = board.scores.loc[board.scores.task == p["task"], "subset"].iloc[0]  # the task's part of the data
        where = p["model"] + ("" if not subset else f", {subset} subset")
        base = _base_row(board, p["experiment"], p["model"], subset)
        control, treatment = (board.row(p["experiment"], p["model"], e, subset) for e in (p["control"], p["treatment"]))
        experiment = (
            p["experiment"] if not folder else folder + ("" if p["experiment"] == "main" else f": {p['experiment']}")
        )
        rows.append([
            experiment, where, "—" if base is None else num(base[METRIC]), num(control[METRIC]),
            num(treatment[METRIC]), ci(p["difference"], p["ci_low"], p["ci_high"], sign=True),
            margin_text(p.get("margin", np.nan)), verdict_cell(p), rerun_text(p),
        ])  # fmt: skip
        did, did_not = shows(p)
        said.append(f"- {experiment}, {where}: {verdict_parts(p)[0]}. Shows: {did}. Does not show: {did_not}.")
    return rows, said


def primary(board: Board) -> str:
    """primary.csv as it stands: scores in points, entropies in nats; how each row was decided (a sequential design,
    a single look alone, a single look in the Holm family, exploratory, descriptive), the pairs, the estimate, the
    margin and the verdict."""
    rows = []
    for p in row_series(board.primary):
        entropy = p["metric"].startswith("entropy")
        digits, scale = (3, 1.0) if entropy else (1, 100.0)
        margin = "—" if p["margin"] != p["margin"] else num(p["margin"], digits, scale)
        rows.append([
            p["experiment"], p["model"], p["metric"] + ("" if entropy else f" ({p['task']})"),
            f"{p['treatment']} − {p['control']}", p["rule"], str(p["n_pairs"]),
            ci(p["difference"], p["ci_low"], p["ci_high"], digits, scale, sign=True), margin, p["label"],
        ])  # fmt: skip
    head = ["experiment", "model", "metric", "comparison", "rule", "pairs", "difference [95% paired t]", "margin",
            "verdict"]  # fmt: skip
    return md_table(head, rows, right=5)


def base_rows(board: Board) -> list[tuple[str, str, pd.Series]]:
    """(experiment, subset, base row) of every leaderboard section that has a base row, in the board's order. A base
    row's paired difference from its baseline, negated, is the baseline's (GRPO's) gain over the base model."""
    b = board.leaderboard
    return [(experiment, subset, base)
            for experiment, subset in dict.fromkeys(zip(b.experiment, b.subset, strict=True))
            for base in row_series(section(board, experiment, subset).query("entry == 'base'"))]  # fmt: skip


def gains(board: Board) -> str:
    """GRPO's gain over the base model, paired per seed, per section and model: what RL does at all."""
    rows = []
    for experiment, subset, base in base_rows(board):
        g, lo, hi = (-base[f"{METRIC}_{k}"] for k in ("diff", "diff_t_ci_high", "diff_t_ci_low"))
        rows.append([
            experiment + (f" ({subset})" if subset else ""), base["model"], num(base[METRIC]),
            num(board.row(experiment, base["model"], base["baseline"], subset)[METRIC]),
            ci(g, lo, hi, sign=True), num(base[f"{METRIC}_diff_sd"], 2), "yes" if lo > 0 or hi < 0 else "no",
        ])  # fmt: skip
    head = ["experiment", "model", "base", "GRPO", "GRPO − base, paired t", "SD of the differences",
            "interval excludes 0"]  # fmt: skip
    return md_table(head, rows, right=2)


def spread(board: Board) -> str:
    """Per-seed mean@8 of the base models and of GRPO's runs (min to max over seeds), per section and model."""
    s = board.scores[board.scores.name == METRIC]
    rows = []
    for (experiment, model, task), g in s.groupby(["experiment", "model", "task"], sort=True):
        cells = []
        for entry in ("base", "grpo"):
            v = g[g.entry == entry]["value"]
            cells.append(f"{num(v.min())}–{num(v.max())}" if len(v) else "—")
        rows.append([experiment, model, task, g["seed"].nunique(), *cells])
    return md_table(["experiment", "model", "task", "seeds", "base models", "GRPO runs"], rows, right=3)


def power(board: Board) -> str:
    """The power of the comparisons with GRPO (bandpo.analysis.scores.power_table of stats.csv); the seeds of each
    comparison ("3 for 11, 10 for 1": 11 comparisons at 3 seeds, one at 10), the MDE at the fewest."""
    rows = []
    for p in row_series(power_table(board.stats)):
        where = p["experiment"] + (f" ({p['subset']})" if p["subset"] else "")
        counts = p["seed_counts"]
        seeds = str(counts[0][0]) if len(counts) == 1 else ", ".join(f"{n} for {c}" for n, c in counts)
        rows.append([
            where, p["model"], p["label"], num(p["sd"], 2), seeds, num(p["mde"]),
            f"{num(p['mde_min'])}–{num(p['mde_max'])}", int(p["seeds_for_target"]),
        ])  # fmt: skip
    head = ["experiment", "model", "metric", "SD, points", "seeds", "MDE at the fewest, points", "MDE per entry",
            "seeds for 2 points"]  # fmt: skip
    return md_table(head, rows, right=3)


def pairs_main(board: Board) -> str:
    """The pairs a single look of the rule would need to decide for sure at the SD the main experiment's primary
    pair measured (primary.csv's ``n_needed``; for a group-sequential primary, which records none, computed from its
    ``sd`` and ``margin`` by the same `bandpo.stats.power.pairs_needed`), per model size in reverse name order
    (tiny-s, then tiny-m), with the seed pairs run: "12 seed pairs on tiny-s (10 run), 14 on tiny-m (10)"."""
    p = board.primary[(board.primary["experiment"] == "main") & (board.primary["metric"] == METRIC)]
    p = p.sort_values("model", ascending=False)
    parts = []
    for i, r in enumerate(row_series(p)):
        need = r["n_needed"]
        if need != need and r["sd"] == r["sd"] and r["margin"] == r["margin"]:
            need = pairs_needed(float(r["sd"]), float(r["margin"]))
        need = "—" if not math.isfinite(need) else str(int(need))
        unit, run = (" seed pairs", " run") if i == 0 else ("", "")
        parts.append(f"{need}{unit} on {r['model']} ({int(r['n_pairs'])}{run})")
    return ", ".join(parts)


def clipfrac_main(board: Board) -> str:
    """The share of off-policy tokens clipping binds on in main's runs (runs.csv ``clipfrac``, a run's mean over
    its steps): the range over runs and over the entries' means, in percent."""
    r = board.runs[board.runs["experiment"] == "main"].dropna(subset=["clipfrac"])
    means = r.groupby("entry")["clipfrac"].mean()
    return (f"{num(r['clipfrac'].min(), 2)}-{num(r['clipfrac'].max(), 2)}% of off-policy tokens per run "
            f"({num(means.min(), 2)}-{num(means.max(), 2)}% as the entries' means)")  # fmt: skip


def mde_measured(board: Board) -> str:
    """Per primary score comparison: the seed pairs, the SD of the paired differences this run measured (from
    scores.csv) and the MDE at 80% power it gives (`minimum_detectable_difference`: the yardstick the seeds were
    planned by), beside the margin."""
    rows = []
    for p in row_series(board.primary[board.primary.metric == METRIC]):
        sc = board.scores[(board.scores.experiment == p["experiment"]) & (board.scores.model == p["model"])
                        & (board.scores.name == METRIC) & (board.scores.task == p["task"])]  # fmt: skip
        per_seed = sc.pivot_table(index="seed", columns="entry", values="value")
        d = (per_seed[p["treatment"]] - per_seed[p["control"]]).dropna()
        mde = minimum_detectable_difference(float(d.std(ddof=1)), len(d))
        rows.append([p["experiment"], p["model"], f"{100 * d.std(ddof=1):.2f}", str(len(d)), num(mde),
                     margin_text(p.get("margin", np.nan))])  # fmt: skip
    head = ["experiment", "model", "SD measured (points)", "seed pairs", "measured MDE (points)", "margin"]
    return md_table(head, rows, right=4)


def seeds_summary(board: Board) -> str:
    """How many seeds each experiment's rows average (runs.csv): the primary pair's (primary.csv's treatment and
    control), then the other trained entries', per experiment in the order the runs list them; a count that differs
    between models is given per model."""
    parts = []
    for xp, runs in board.runs.groupby("experiment", sort=False):
        counts = runs.groupby(["model", "entry"])["seed"].nunique()
        p = board.primary[(board.primary.experiment == xp) & (board.primary.metric == METRIC)]
        pair = counts.index.get_level_values("entry").isin(set(p["treatment"]) | set(p["control"]))
        if not pair.any():
            parts.append(f"{xp} {_seed_counts(counts)}")
            continue
        text = f"{xp} {_seed_counts(counts[pair])} for the primary pair"
        parts.append(text + (f", {_seed_counts(counts[~pair])} for the other entries" if (~pair).any() else ""))
    return "; ".join(parts)


def _seed_counts(counts: pd.Series) -> str:
    """Seed counts indexed by (model, entry): one number when every model has it, else each model's; an entry that
    keeps another count than most (a method entry's own ``seeds``) in brackets: "5 (offpolicy_mask 3)"."""

    def of_model(g: pd.Series) -> str:
        most = g.value_counts().sort_index(ascending=False).idxmax()
        others = ", ".join(f"{e} {n}" for (_m, e), n in g.items() if n != most)
        return f"{most} ({others})" if others else str(most)

    by_model = {m: of_model(g) for m, g in counts.groupby(level="model")}
    if len(set(by_model.values())) == 1:
        return next(iter(by_model.values()))
    return ", ".join(f"{n} on {m}" for m, n in by_model.items())


# sentences: what the tables say, generated so that the prose cannot go stale
def _where(experiment: str, model: str, subset: str = "") -> str:
    return f"{experiment} ({model}{', ' + subset + ' subset' if subset else ''})"


def primary_summary(board: Board) -> str:
    """The verdict of every score comparison of primary.csv (BandPO-KL − GRPO, paired), one clause each."""
    rows = row_series(board.primary[board.primary.metric == METRIC])
    parts = []
    for p in rows:
        subset = board.scores.loc[board.scores.task == p["task"], "subset"].iloc[0]
        parts.append(f"{_where(p['experiment'], p['model'], subset)} {verdict_cell(p)}")
    n = sum(1 for p in rows if p["verdict"] in (BETTER, NOT_BETTER))
    return f"{n} of {len(parts)} decided: " + "; ".join(parts)


def separated(board: Board, experiment: str = "main") -> str:
    """How many entries of an experiment's sections have a paired mean@8 interval from GRPO that excludes 0, and
    which (with the sign of the difference)."""
    b = board.leaderboard[(board.leaderboard.experiment == experiment) & (board.leaderboard.entry != "base")]
    b = b[b.entry != b.baseline]
    lo, hi = b[f"{METRIC}_diff_t_ci_low"], b[f"{METRIC}_diff_t_ci_high"]
    hits = [f"{r['entry']} on {r['model']} ({'+' if r[f'{METRIC}_diff'] > 0 else '−'})"
            for r in row_series(b[(lo > 0) | (hi < 0)])]  # fmt: skip
    return f"{len(hits)} of its {len(b)} comparisons with GRPO (entry x model)" + (
        f": {', '.join(hits)}" if hits else ""
    )


def gains_summary(board: Board) -> str:
    """Where GRPO's paired gain over its base model has a 95% interval above 0, and where not."""
    yes, no = [], []
    for experiment, subset, base in base_rows(board):
        (yes if base[f"{METRIC}_diff_t_ci_high"] < 0 else no).append(_where(experiment, base["model"], subset))
    return f"above 0 on {', '.join(yes) or 'none'}; not on {', '.join(no) or 'none'}"


def entropy_main(board: Board, model: str = "tiny-s") -> str:
    """The entropy of main's runs on ``model`` (runs.csv): their mean final entropy and their mean entropy at step
    1, in nats: "0.156 nats over its 53 runs, from 0.462 at step 1" (the scale the entropy margin is read against)."""
    r = board.runs[(board.runs.experiment == "main") & (board.runs.model == model)]
    if r.empty:
        raise KeyError(f"runs.csv has no main runs on {model!r}")
    first, final = r["entropy_first"].mean(), r["entropy_final"].mean()
    return f"{num(final, 3, 1.0)} nats over its {len(r)} runs, from {num(first, 3, 1.0)} at step 1"


def probe_power(board: Board) -> str:
    """The probe's primary comparison (primary.csv of results/probe/, BandPO-KL − GRPO on the probe subset): the SD
    of its paired differences at its seed pairs and the pairs a single look of the verdict rule would need at that
    SD and the margin (primary.csv's ``n_needed``, `bandpo.stats.power.pairs_needed`): why it is demoted."""
    (p,) = row_series(board.primary[board.primary.metric == METRIC].head(1))
    need = "an unknown number of" if p["n_needed"] != p["n_needed"] else f"about {int(p['n_needed'])}"
    return (
        f"{100 * float(p['sd']):.2f} points at {int(p['n_pairs'])} seed pairs; a single look of the rule at a margin "
        f"of {margin_text(p['margin'])} points would need {need} seed pairs"
    )


def sd_fewest(board: Board) -> str:
    """The fewest seeds behind an SD of the power table and how far an SD from so few can be off: the 95% interval
    of the true SD over the estimate at n − 1 degrees of freedom (chi-square)."""
    n = int(power_table(board.stats)["n_seeds"].min())
    df = n - 1
    low, high = np.sqrt(df / chi2.ppf(0.975, df)), np.sqrt(df / chi2.ppf(0.025, df))
    return (
        f"{n} seeds ({df} degrees of freedom), and a 95% interval for an SD with {df} degrees of freedom runs from "
        f"{low:.2f} to {high:.1f} times the estimate (chi-square)"
    )


FRAMEWORKS = ("verl", "TRL")  # as `MethodConfig.shipped_by` names them
SUITE = "this suite"


def frameworks_of(shipped_by: str) -> str:
    """The frameworks a method's ``shipped_by`` names ("verl", "verl, TRL", "TRL"), or "this suite" for a rule no
    framework ships."""
    named = [f for f in FRAMEWORKS if f"{f} " in shipped_by]
    return ", ".join(named) or SUITE


def rules(board: Board) -> str:
    """Every rule main ranks against GRPO, by the framework that ships it (`MethodConfig.shipped_by`, verl's and
    TRL's settings that give it), the tests that check it equals that framework's own computation
    (`MethodConfig.parity_tests`), and its paired difference in mean@8 from GRPO with its verdict (Holm within
    main's family; the primary's own rule on its row), on the model every entry trains on."""
    from bandpo.methods.__main__ import describe  # the registry imports torch: only this block needs it

    main = section(board, "main")
    main = main[main.entry != "base"]
    if main.empty:
        return "No rows of experiment main in this publication."
    model = main.groupby("model")["entry"].nunique().idxmax()  # the model every entry trains on
    order = {name: i for i, name in enumerate(["verl", "verl, TRL", "TRL", SUITE])}
    rows = []
    for r in row_series(main[main.model == model]):
        info = describe(r["method"])
        tests = ", ".join(f"`{t.rpartition('/')[2]}`" for t in info["parity_tests"]) or "—"
        where = frameworks_of(info["shipped_by"])
        setting = info["shipped_by"].replace("; ", "<br>") or "—"
        verdict = "(baseline)" if r["entry"] == r["baseline"] else verdict_text(r, METRIC)
        rows.append((order.get(where, len(order)), r["entry"],
                     [where, r["entry"], setting, tests, paired(r), verdict]))  # fmt: skip
    head = ["shipped by", "entry", "framework setting", "parity test", f"Δ {METRIC} vs grpo (paired)", "verdict"]
    return f"On {model}:\n\n" + md_table(head, [cells for *_, cells in sorted(rows, key=lambda x: x[:2])], right=4)
