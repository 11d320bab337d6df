"""The sentences of the pages: how to read the numbers (computed from the board), the power of the comparisons,
and each experiment's note (its question, primary metric and decision rule, the result, its family of
secondaries)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
from scipy.stats import chi2
from scipy.stats import t as student_t

from bandpo.analysis.leaderboard import headline_label
from bandpo.report.columns import baseline_of
from bandpo.report.text import fmt, fmt_ci, points
from bandpo.report.verdicts import WORDS
from bandpo.stats.rule import BETTER
from bandpo.study import BASE_ENTRY

STATS_NOTE = (
    "Scores are fractions of problems solved, shown in percent: the mean over seeds of each seed's lm-eval score "
    "(averaged over tasks with equal weight), with a 95% Student-t confidence interval over seeds (mean ± "
    "t(0.975, n-1) SD / sqrt(n) of the per-seed scores; leaderboard.csv also has rliable's percentile-bootstrap "
    "interval, columns *_ci_low / *_ci_high, which is too narrow at 3-5 seeds). {seeds} leaderboard.csv also has "
    "rliable's IQM (*_iqm), the interquartile mean of the (seed, task) scores. "
    "Comparisons with {baseline} are paired: Δ is the mean over seeds of this entry's score minus {baseline}'s "
    "trained from the same base model with the same seed, with the 95% paired t interval of those differences (the "
    "bootstrap one is in the csv); P(>{baseline}) is the probability of improvement on them: the share of seeds "
    "whose difference is positive, ties counting one half; 0.5 means no difference. The verdict column answers the "
    "one question of every comparison with {baseline}: is this entry better than {baseline} by at least the "
    "experiment's margin δ (fixed before the runs)? {words} Δ and its interval are the estimate beside the verdict "
    "(sign, size, equivalence), never a verdict. "
    "Within each experiment the secondaries (every other entry, metric and model, and the entropy comparisons) are "
    "one family, each of its two tests Holm-adjusted; the primary's own verdict (marked) comes from its design: a "
    "group-sequential one stops at the first look that decides, an exploratory primary has none. pass@k is the "
    "unbiased estimator "
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


def seed_counts(table: pd.DataFrame) -> list[int]:
    """The distinct seed counts of the trained rows (the base rows left out)."""
    if table.empty or "n_seeds" not in table:
        return []
    rows = table[table["entry"] != BASE_ENTRY] if "entry" in table else table
    return sorted({int(n) for n in rows["n_seeds"].dropna() if int(n) > 0})


def stats_note(table: pd.DataFrame, base_per_seed: bool | None = None) -> str:
    """How to read the tables (`STATS_NOTE`), with the sentence on base models that ``base_per_seed`` (the config's
    key; None when unknown) makes true."""
    return STATS_NOTE.format(
        baseline=baseline_of(table),
        seeds=BASE_MODELS[base_per_seed],
        words=" ".join(f"{w[0].upper()}{w[1:]}" for w in WORDS.values()),
    )


def seeds_note(table: pd.DataFrame) -> str:
    """The seed counts of the rows and the t quantile each gives, computed from the table."""
    counts = seed_counts(table)
    if not counts:
        return ""
    quantiles = ", ".join(f"{student_t.ppf(0.975, n - 1):.2f} at {n} seeds" for n in counts if n >= 2)
    rows = f"{counts[0]} seeds" if len(counts) == 1 else f"{counts[0]} to {counts[-1]} seeds"
    if not quantiles:  # one seed a row: no spread, so no interval and no comparison
        return (
            "Rows have 1 seed: there is no spread over seeds, so no interval, and a difference between rows is "
            "one draw, not evidence either way."
        )
    return (
        f"Rows have {rows}; the 95% t intervals multiply SD / sqrt(n) by t(0.975, n - 1): {quantiles}. That is "
        "the honest width of so few seeds, which a percentile bootstrap (a handful of distinct resamples) "
        "understates. Read P(improvement) near 0.5 as no evidence either way."
    )


def intervals_note(table: pd.DataFrame, alpha: float = 0.05) -> str:
    """How many paired Δ intervals of mean@k the tables show (every trained entry against the baseline), how many
    exclude 0, and how many would by chance were no entry different (alpha of them)."""
    label = headline_label(table, "mean") if not table.empty else None
    if not label or f"{label}_diff_t_ci_low" not in table:
        return ""
    rows = table[(table["entry"] != BASE_ENTRY) & table[f"{label}_diff_t_ci_low"].notna()]
    n = len(rows)
    if not n:
        return ""
    out = int(((rows[f"{label}_diff_t_ci_low"] > 0) | (rows[f"{label}_diff_t_ci_high"] < 0)).sum())
    return (
        f"The tables show {n} paired 95% intervals of {label} against the baseline (trained entries; the base rows "
        f"left out); were no entry different, about {fmt(alpha * n, 1, 1)} of them would exclude 0 by chance; "
        f"{out} {'does' if out == 1 else 'do'}. The verdict column corrects for this within each experiment (Holm)."
    )


def power_note(table: pd.DataFrame) -> str:
    """`POWER_NOTE` with the 95% interval of an SD estimated from the fewest seeds of the rows (chi-square)."""
    counts = [n for n in seed_counts(table) if n >= 2]
    if counts:
        df = counts[0] - 1
        low, high = math.sqrt(df / chi2.ppf(0.975, df)), math.sqrt(df / chi2.ppf(0.025, df))
        sd_range = f"at {counts[0]} seeds its 95% interval runs from {low:.2f} to {high:.1f} times the estimate"
    else:
        sd_range = "no row has 2 seeds"
    return POWER_NOTE.format(baseline=baseline_of(table), sd_range=sd_range)


ROWS_NOTE = (
    "Rows: the base model, then the baseline ({baseline}), then the entries by their paired difference from "
    "{baseline} in mean@k over the seeds that every trained row of the table has, largest first (so rows with more "
    "seeds, the primary pair's, are ordered on the same seeds as the rest; their Δ column is over all their pairs). "
    "The seeds column gives the count and the seeds."
)


def reading_notes(table: pd.DataFrame, base_per_seed: bool | None = None) -> list[str]:
    """The "How to read these numbers" paragraphs of the page and the Markdown, each computed from the table."""
    rows = ROWS_NOTE.format(baseline=baseline_of(table)) if not table.empty else ""
    return [x for x in (stats_note(table, base_per_seed), rows, seeds_note(table), intervals_note(table)) if x]


def grader_note(table: pd.DataFrame) -> str:
    """One sentence naming the grader(s) behind the table's scores; "" when none is recorded."""
    graders = sorted({g for cell in table.get("grader", []) if isinstance(cell, str) for g in cell.split("; ") if g})
    if not graders:
        return ""
    return (
        "Scores graded by " + ", ".join(graders) + " (bandpo.grader: name/mode@version; lenient: last \\boxed{} "
        "or Answer: line; strict-answer-line: the last Answer: line only; both accept equivalent answers; "
        "math-dapo: verl 0.9.1's math_dapo, the normalised last Answer: line string-equal to the reference, with a "
        "last-\\boxed{} fallback when there is no such line; math-dapo-paper: the paper's rule, the same without "
        "the fallback)."
    )


def unpaired_lines(table: pd.DataFrame) -> list[str]:
    """One sentence per group of leaderboard rows whose paired comparisons left the same seeds out (the
    ``*_unpaired`` columns): the model (and experiment), the seeds, the entries and the metrics."""
    groups: dict[tuple[str, str, str], dict[str, list[str]]] = {}
    for col in [c for c in table.columns if c.endswith("_unpaired")]:
        label = col.removesuffix("_unpaired")
        for _, r in table[table[col].notna() & (table[col].astype(str) != "")].iterrows():
            xp = str(r.get("experiment") or "")
            g = groups.setdefault((xp if xp != "main" else "", str(r["model"]), str(r[col])), {"e": [], "m": []})
            g["e"] += [] if r["entry"] in g["e"] else [str(r["entry"])]
            g["m"] += [] if label in g["m"] else [label]
    out = []
    for (xp, model, seeds), g in groups.items():
        entries = g["e"][0] if len(g["e"]) == 1 else f"{len(g['e'])} entries ({', '.join(g['e'])})"
        out.append(f"{xp + ' / ' if xp else ''}{model}: {seeds}: left out of the paired comparison of {entries} "
                   f"with {baseline_of(table)}, for {', '.join(g['m'])}.")  # fmt: skip
    return out


def power_lines(power: pd.DataFrame) -> list[str]:
    """One sentence per (model, metric) of `bandpo.analysis.scores.power_table`, in points; where the comparisons
    have different seed counts (the primary pair's ``primary.seeds``), each count with its comparisons, and the
    pooled MDE named as that of the fewest."""
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
        counts = getattr(r, "seed_counts", None) or ((r.n_seeds, r.n_comparisons),)
        if len(counts) == 1:  # every comparison has the same seeds
            over = f"{r.n_comparisons} comparison(s) with {r.n_seeds} seeds; MDE {fmt(r.mde, 100.0)} points"
        else:  # the primary pair has more seeds than the other entries: the pooled MDE is at the fewest
            over = (f"{r.n_comparisons} comparisons, " + ", ".join(f"{c} with {n} seeds" for n, c in counts)
                    + f"; MDE {fmt(r.mde, 100.0)} points at {r.n_seeds} seeds")  # fmt: skip
        out.append(
            f"{where}{r.model}, {r.label}: SD of the paired differences {fmt(r.sd, 100.0, 2)} points over {over} "
            f"(entries {fmt(r.mde_min, 100.0)} to {fmt(r.mde_max, 100.0)}); a {fmt(r.target, 100.0, 0)}-point "
            f"difference is {verdict} with {r.n_seeds} seeds; seeds for {fmt(r.target, 100.0, 0)} points: "
            f"{need_text}."
        )
    return out


def _how(r: Any) -> str:
    """How a primary.csv row was decided, in words without parentheses (they sit inside the result's)."""
    if r.rule == "sequential":
        return f"primary, group-sequential design: {r.label}".replace("(", "").replace(")", "")
    if r.rule == "exploratory":
        return "primary, exploratory: no verdict"
    if r.role == "demoted":
        return "demoted to a secondary, Holm-adjusted in the experiment's family"
    if r.role == "secondary":
        return "secondary, Holm-adjusted in the experiment's family"
    return "primary, a single look at its pairs, tested alone"


def _stability(r: Any) -> str:
    if r.stability != r.stability:
        return ""
    rerun = getattr(r, "rerun_better", float("nan"))
    words = (f": better {fmt(rerun, 1, 2)}, not better {fmt(r.rerun_not_better, 1, 2)}, undecided "
             f"{fmt(r.rerun_undecided, 1, 2)}" if rerun == rerun else "")  # fmt: skip
    return (f"; stability {fmt(r.stability, 1, 2)} (the probability that two independent reruns of the design give "
            f"the same verdict; a rerun's verdict{words})")  # fmt: skip


def _score_result(r: Any) -> str:
    """The sentence of a score comparison of primary.csv (`bandpo.analysis.experiments.primary_results`): every
    number named by what it is, from this row."""
    margin = f"margin {fmt(r.margin, 100.0, 1)} points" if r.margin == r.margin else "no margin declared"
    verdict = r.label
    if r.rule == "exploratory":
        verdict += f", {str(r.note).rstrip('.')}" if isinstance(r.note, str) and r.note else ""
    return (
        f"Result on {r.model} ({_how(r)}): {r.treatment} − {r.control} = {points(r.difference)} "
        f"[{points(r.ci_low)}, {points(r.ci_high)}] points of {r.metric} (mean of {int(r.n)} paired seed "
        f"differences, 95% paired t interval; {margin}): {verdict}{_stability(r)}"
    )


def _entropy_result(r: Any) -> str:
    """The sentence of an entropy row of primary.csv: a run's final entropy against its own step-1 entropy
    (control ``step 1``, `entropy_shift_results`, descriptive) or an entry's entropy against the control's, paired
    by seed (`run_pair_results`, a secondary of the family)."""
    what = "final entropy" if r.metric == "entropy_final" else "entropy area under the curve per step"
    if r.control == "step 1":
        margin = f"margin ±{fmt(r.margin, 1, 3)} nats" if r.margin == r.margin else "no equivalence margin declared"
        return (
            f"Result on {r.model}, {r.treatment}: {what} {fmt(r.treatment_mean, 1, 3)} (mean of its {r.n_pairs} "
            f"runs) against {fmt(r.control_mean, 1, 3)} at step 1 (the same runs' step-1 entropy), paired "
            f"difference {fmt_ci(r.difference, r.ci_low, r.ci_high, 1, 3)} nats (95% paired t; {margin}; "
            f"descriptive): {r.verdict}"
        )
    return _pair_result(r, what, 1.0, 3, "", "nats")


def _clip_result(r: Any) -> str:
    """The sentence of a clip-fraction row of primary.csv (`run_pair_results`, a secondary of the family): the share
    of an entry's rare tokens (old probability < 0.2) clipped at one bound against the control's, paired by seed,
    in percent of those tokens."""
    side = "upper" if r.metric == "clip_upper_low" else "lower"
    return _pair_result(r, f"rare tokens (old probability < 0.2) clipped at the {side} bound", 100.0, 1, "%", "points")


def _pair_result(r: Any, what: str, scale: float, digits: int, mark: str, unit: str) -> str:
    """A training statistic of an entry against the control's, paired by seed (`run_pair_results`): both means
    (``scale`` x the value to ``digits`` decimals, then ``mark``), the paired difference with its interval in
    ``unit``, the margin, how it was decided and the family's words."""
    margin = f"margin {fmt(r.margin, scale, digits)} {unit}" if r.margin == r.margin else "no margin declared"
    return (
        f"Result on {r.model}, {what}: {r.treatment} {fmt(r.treatment_mean, scale, digits)}{mark} against "
        f"{r.control} {fmt(r.control_mean, scale, digits)}{mark} (means over {r.n_pairs} seed pairs), paired "
        f"difference {fmt_ci(r.difference, r.ci_low, r.ci_high, scale, digits)} {unit} (95% paired t; {margin}; "
        f"{_how(r)}): {r.label}"
    )


def mechanism_sentence(rows: pd.DataFrame) -> list[str]:
    """Per (model, entry) with both a final-entropy row and a lower-bound clip row of `run_pair_results`: which way
    the entry's final entropy moved against the control's (the sign of the estimate, and whether its 95% interval
    excludes 0), and whether the lower bound on rare tokens accounts for it, read from the per-bucket rows: the
    candidate mechanism (a looser lower bound lets a rare token's probability fall further, which lowers entropy)
    is called consistent with the runs only when the entry clips fewer rare tokens at the lower bound (the family's
    verdict "lower") and its entropy's interval lies below 0; an association over seeds, never a cause."""
    out = []
    for (model, entry), g in rows.groupby(["model", "treatment"], sort=True):
        ent, clip = g[g["metric"] == "entropy_final"], g[g["metric"] == "clip_lower_low"]
        if ent.empty or clip.empty:
            continue
        e, c = ent.iloc[0], clip.iloc[0]
        way = "lower" if e["difference"] < 0 else "higher" if e["difference"] > 0 else "no different"
        shown = e["ci_high"] < 0 or e["ci_low"] > 0
        sure = "its 95% interval excludes 0" if shown else "its 95% interval includes 0, so the direction is not shown"
        fewer = c["verdict"] == BETTER
        if fewer and e["ci_high"] < 0:
            why = ("consistent with the runs: it clips fewer rare tokens at the lower bound (verdict lower) and its "
                   "entropy is lower; an association over seeds, not a shown cause")  # fmt: skip
        else:
            missing = [] if fewer else [f"its lower-bound clipping of rare tokens is not shown lower ({c['label']})"]
            missing += [] if e["ci_high"] < 0 else ["its entropy is not shown lower"]
            why = "not shown by these runs: " + " and ".join(missing)
        out.append(
            f"Mechanism on {model}: {entry}'s final entropy is {way} than {e['control']}'s "
            f"({fmt_ci(e['difference'], e['ci_low'], e['ci_high'], 1.0, 3)} nats; {sure}); the candidate mechanism, "
            f"a looser lower bound on rare tokens letting their probability fall further, is {why}"
        )
    return out


def family_sentence(f: Any, runs: str = "entropy comparisons") -> str:
    """One family of an experiment's secondaries (`bandpo.analysis.family.family_verdicts`), in words: ``all`` (the
    experiment's one family), ``verdicts`` (the declared metric's comparisons, the entries' verdicts) or
    ``estimates`` (the rest); ``runs`` names its comparisons of training statistics."""
    what = {
        "all": f"every other trained entry, metric and model of the experiment, and its {runs}",
        "verdicts": "every other trained entry's comparison in the declared metric, one family: the entries' "
        "verdicts, an undecided one an estimate only",
        "estimates": f"the other metrics and the {runs}, a family of their own",
    }[str(getattr(f, "family", "all"))]
    head = "Secondaries" if str(getattr(f, "family", "all")) != "estimates" else "Further secondaries"
    return (
        f"{head}: {int(f.n_tests)} paired tests against the baseline ({what}; an entry identical to the baseline on "
        f"every seed is no evidence and no member; Holm-adjusted, the test of no gain "
        f"at 5% and of a gain of the margin at 10%): {int(f.better)} better, {int(f.not_better)} not better by the "
        f"margin, {int(f.undecided)} undecided; unadjusted, {int(f.n_excluding_0)} of their 95% intervals exclude 0, "
        f"where about {fmt(f.expected_by_chance, 1, 1)} would by chance were no entry different"
    )


def collapse_sentence(rows: pd.DataFrame) -> str:
    """The entropy fall of each run of one experiment (`bandpo.analysis.experiments.collapse_factors`), per entry."""
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
    fam = family if family is not None and not family.empty else None
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
            metric = str(r.metric)
            parts.append(_entropy_result(r) if metric.startswith("entropy") else
                         _clip_result(r) if metric.startswith("clip_") else _score_result(r))  # fmt: skip
        parts += mechanism_sentence(rows[rows["role"] == "secondary"]) if not rows.empty else []
        if p.get("compare") and rows.empty:
            parts.append("Result: not available (no scores of both entries yet)")
        if collapse is not None and not collapse.empty and (collapse["experiment"] == xp).any():
            parts.append(collapse_sentence(collapse[collapse["experiment"] == xp]))
        if fam is not None:
            clips = not rows.empty and rows["metric"].astype(str).str.startswith("clip_").any()
            runs = "entropy and clip-fraction comparisons" if clips else "entropy comparisons"
            parts += [family_sentence(f, runs) for f in fam[fam["experiment"] == xp].itertuples()]
        if any(parts):  # sentences: a description that is a question keeps its "?" without a "." after it
            out.append((xp, " ".join(x if x.endswith(("?", "!")) else x + "." for x in parts if x)))
    return out
