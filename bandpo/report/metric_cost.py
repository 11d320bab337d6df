"""The real LM's primary metric and horizon, chosen by the cost of a decision (issue #67, item 2).

The candidates are declared here, before any comparison run (`CANDIDATES`). Each is measured on the published
real-LM comparison (``results/real-lm/``: 5 seed pairs of GRPO and BandPO-KL at 24 steps; per-seed scores in
scores.csv, the held-out curve every 4 steps in steps.csv, training seconds in runs.csv, the scoring jobs' seconds in
dag_rules.csv):

* the paired SD of the treatment's value minus the control's (points; per seed; the folder's primary pair and
  margin, from the config its provenance.json records);
* the planning SD: its one-sided 90% upper confidence bound (`bandpo.stats.plan.upper_sd`, as the tiny
  tier's designs plan);
* the minutes a pair costs on the machine of the publication (two training runs and their scoring);
* the group-sequential design of the tiny tier's rule (`bandpo.stats.design.plan_design`: looks of k = 5 pairs,
  α = 0.05 and β = 0.05, so that a verdict's stability is at least 0.9 at Δ = 0 and at Δ = δ = 2 points) planned at
  that SD: n_max, the expected pairs at Δ = 0 and at Δ = δ (`bandpo.stats.simulate.operating_characteristics`),
  and the hours to n_max and the expected hours (the larger of the two Δ).

The choice rule, fixed with the candidates: among those that answer the paper's question (final or asymptotic
accuracy, not early speed alone: ``answers``; a fitted asymptote answers only where most runs' fits do not end on a
bound of the fit), the one with the fewest expected hours (the single look's hours, a lower bound, where a
candidate's single look alone needs more than `MAX_PLANNED` pairs); a candidate whose n_max
takes more than `BUDGET_HOURS` is a verdict the budget cannot buy: the comparison is then exploratory, declared in
advance with the pairs and hours a verdict would need.

Two candidates are estimates, said so in their rows: the 500-problem test set (the measurement part of the paired
variance, each arm's lm-eval stderr squared, shrunk by 48/500: an optimistic bound, since the two arms' problem
draws are shared and their errors correlate) and the plateau rule (the published runs stop at 24 steps, still
climbing: its SD and cost need runs past 24 steps).

``python -m bandpo.report metric-cost [--results results/real-lm]`` prints the table and the choice.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import curve_fit

from bandpo.stats.design import plan_design
from bandpo.stats.plan import upper_sd
from bandpo.stats.power import pairs_needed
from bandpo.stats.rule import POINTS
from bandpo.stats.simulate import operating_characteristics
from bandpo.study import MAIN, primary_margin

MARGIN = 0.02  # δ: 2 points of mean@8 (the folder's primary declares it; this is the default)
K, ALPHA_, BETA_ = 5, 0.05, 0.05  # looks of 5 pairs; stability >= 0.9 at Δ = 0 and Δ = δ
BUDGET_HOURS = 16.0  # the comparison's budget on 2 cores, to n_max
BIG_TEST = 500  # problems of the larger test set candidate
REPS = 20_000  # simulated runs per expected-pairs figure
MAX_PLANNED = 200  # a candidate whose single look needs more pairs gets no sequential plan (its n_max is larger)
SEED = 0


Pair = tuple[str, str]  # (treatment, control): the folder's primary comparison


def primary_pair(folder: Path) -> tuple[Pair, float]:
    """The published folder's primary comparison (treatment, control) and its margin on its first model (a
    fraction, `bandpo.study.primary_margin`; `MARGIN` where none is declared), from the config its provenance.json
    records."""
    path = folder / "provenance.json"
    config = json.loads(path.read_text(encoding="utf-8")).get("config") or {} if path.is_file() else {}
    primary = ((config.get("experiments") or {}).get("main") or {}).get("primary") or {}
    compare = primary.get("compare")
    if not compare or len(compare) != 2:
        raise ValueError(f"{path}: no primary comparison (experiments.main.primary.compare) recorded")
    model = next((str(m["id"]) for m in config.get("models") or [] if "id" in m), "")
    margin = primary_margin(config, MAIN, model)
    return (str(compare[0]), str(compare[1])), MARGIN if math.isnan(margin) else margin


@dataclass(frozen=True)
class Candidate:
    """A primary metric: its name, whether it answers the paper's question (final or asymptotic accuracy), how its
    per-run values are read from a published folder, and a note (an estimate's assumption)."""

    name: str
    answers: bool
    values: Callable[[Path, Pair], pd.DataFrame] | None  # rows (entry, seed, value); None: not measurable here
    note: str = ""


def _read(folder: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(folder / name, keep_default_na=False, na_values=[""])


def final_test(folder: Path, pair: Pair) -> pd.DataFrame:
    """Final test mean@8 per run (scores.csv)."""
    s = _read(folder, "scores.csv")
    s = s[(s["name"] == "mean@8") & s["entry"].isin(pair)]
    return s[["entry", "seed", "value"]].reset_index(drop=True)


def _held_out(folder: Path, pair: Pair) -> pd.DataFrame:
    s = _read(folder, "steps.csv")
    s = s[s["entry"].isin(pair) & s["val/mean"].notna()]
    return s[["entry", "seed", "step", "val/mean"]].rename(columns={"val/mean": "value"})


def held_out_last(folder: Path, pair: Pair) -> pd.DataFrame:
    """Held-out mean@8 at the last step (steps.csv's validation curve)."""
    h = _held_out(folder, pair)
    return h[h["step"] == h.groupby(["entry", "seed"])["step"].transform("max")].drop(columns="step")


def held_out_mean(folder: Path, pair: Pair) -> pd.DataFrame:
    """The mean of the held-out curve over its steps (after step 0)."""
    return _held_out(folder, pair).groupby(["entry", "seed"], as_index=False)["value"].mean()


def saturating(t: np.ndarray, a: float, mid: float, b: float, r0: float) -> np.ndarray:
    """ScaleRL's saturating curve: r0 + (a - r0) / (1 + (mid / t)^b), t > 0 (r0 at t = 0)."""
    t = np.asarray(t, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(t > 0, r0 + (a - r0) / (1.0 + (mid / np.maximum(t, 1e-12)) ** b), r0)


def fit_asymptote(t: np.ndarray, y: np.ndarray, r0: float) -> tuple[float, bool]:
    """(A, whether the fit ended on a bound) of `saturating` through (t, y) with r0 fixed: A bounded to [r0, 1],
    the midpoint to [1, 1000] steps, the slope to [0.3, 5]."""
    lo, hi = [max(r0, 1e-6), 1.0, 0.3], [1.0, 1000.0, 5.0]
    start = [min(max(float(y[-1]), lo[0]) + 0.05, 1.0), 12.0, 1.5]

    def curve(t: np.ndarray, a: float, mid: float, b: float) -> np.ndarray:
        return saturating(t, a, mid, b, r0)

    params, _ = curve_fit(curve, t, y, p0=start, bounds=(lo, hi), maxfev=20_000)
    on_bound = any(math.isclose(v, x, rel_tol=1e-3) for v, x in (*zip(params, lo), *zip(params, hi)))  # noqa: B905
    return float(params[0]), bool(on_bound)


def asymptote(folder: Path, pair: Pair) -> pd.DataFrame:
    """Each run's fitted asymptote A (`fit_asymptote`) on its held-out curve, the step-0 value
    (``val/mean_before``) as r0. ``at_bound``: the fit ended on a bound (the curve does not say where it
    saturates)."""
    s = _read(folder, "steps.csv")
    rows = []
    for (entry, seed), g in s[s["entry"].isin(pair)].groupby(["entry", "seed"]):
        c = g.dropna(subset=["val/mean"])
        a, bound = fit_asymptote(c["step"].to_numpy(float), c["val/mean"].to_numpy(float),
                                 float(g["val/mean_before"].dropna().iloc[0]))  # fmt: skip
        rows.append({"entry": entry, "seed": int(seed), "value": a, "at_bound": bound})
    return pd.DataFrame(rows)


CANDIDATES = (
    Candidate("final test mean@8 at 24 steps (48 problems)", True, final_test),
    Candidate("held-out mean@8 at 24 steps (48 problems)", True, held_out_last),
    Candidate("mean of the held-out curve, steps 4-24", False, held_out_mean,
              "weights early steps as much as late ones: speed and level mixed"),
    Candidate("fitted asymptote of the held-out curve (ScaleRL's form)", True, asymptote),
    Candidate(f"final test mean@8 at 24 steps on {BIG_TEST} problems", True, None,
              f"estimated: the measured arms' lm-eval variance shrunk by 48/{BIG_TEST} (optimistic)"),
    Candidate("final test mean@8 at a plateau rule's horizon", True, None,
              "not measurable here: the published runs stop at 24 steps, still climbing"),
)  # fmt: skip


def paired(values: pd.DataFrame, pair: Pair) -> np.ndarray:
    """The treatment's value minus the control's per seed (seeds both have), in seed order."""
    w = values.pivot_table(index="seed", columns="entry", values="value").dropna()
    return (w[pair[0]] - w[pair[1]]).to_numpy(float)


def pair_minutes(folder: Path, pair: Pair, test_scale: float = 1.0) -> float:
    """Minutes a pair costs: the two arms' median training seconds (runs.csv) and their scoring (dag_rules.csv's
    lm-eval seconds per run, times ``test_scale`` for a larger test set)."""
    runs = _read(folder, "runs.csv")
    train = runs[runs["entry"].isin(pair)].groupby("entry")["train_seconds"].median().sum()
    dag = _read(folder, "dag_rules.csv")
    ev = dag[dag["rule"].str.startswith("lm-eval")]
    per_run = float(ev["wall_s_sum"].sum()) / max(int(runs["seed"].nunique()) * (runs["entry"].nunique() + 1), 1)
    return float(train + 2 * per_run * test_scale) / 60.0


def _big_test_sd(folder: Path, pair: Pair) -> tuple[float, int]:
    """The paired SD with a `BIG_TEST`-problem test set, estimated from the 48-problem one (see the module)."""
    d = paired(final_test(folder, pair), pair)
    s = _read(folder, "scores.csv")
    s = s[(s["name"] == "mean@8") & s["entry"].isin(pair)]
    measurement = float((s.groupby("seed")["stderr"].apply(lambda x: float((x**2).sum()))).mean())
    n_test = 48
    var = float(np.var(d, ddof=1)) - (1.0 - n_test / BIG_TEST) * measurement
    return math.sqrt(max(var, 0.0)), int(d.size)


def cost_row(name: str, answers: bool, sd: float, n: int, minutes: float, note: str = "",
             margin: float = MARGIN) -> dict:  # fmt: skip
    """One candidate's row: its SD, the design at the planning SD, the expected pairs and hours."""
    row = {"candidate": name, "answers": answers, "pairs": n, "sd": sd * POINTS, "minutes_a_pair": minutes,
           "note": note}  # fmt: skip
    if not (math.isfinite(sd) and n >= 2):
        return row
    plan = upper_sd(sd, n - 1)
    single = pairs_needed(max(plan, 1e-6), margin, ALPHA_, BETA_)
    single = int(single) if math.isfinite(single) else single  # a count of pairs (inf beyond any count)
    row.update(planning_sd=plan * POINTS, n_single=single, hours_single=single * minutes / 60.0)
    if single > MAX_PLANNED:  # far beyond any budget: the single look's n bounds the design's n_max from below
        row["within_budget"] = False
        return row
    design = plan_design(margin, K, max(plan, 1e-6), ALPHA_, BETA_)
    rng = np.random.default_rng(SEED)
    exp = [operating_characteristics(design, mu, plan, REPS, rng).expected_n for mu in (0.0, margin)]
    row.update(n_max=design.n_max, pairs_at_0=exp[0], pairs_at_delta=exp[1],
               hours_n_max=design.n_max * minutes / 60.0, hours_expected=max(exp) * minutes / 60.0)  # fmt: skip
    row["within_budget"] = row["hours_n_max"] <= BUDGET_HOURS
    return row


def cost_table(folder: str | Path = "results/real-lm") -> pd.DataFrame:
    """Every candidate's row (`cost_row`), in the order declared, for the folder's primary pair and margin."""
    folder = Path(folder)
    pair, margin = primary_pair(folder)
    minutes = pair_minutes(folder, pair)
    rows = []
    for c in CANDIDATES:
        if c.values is not None:
            values = c.values(folder, pair)
            note, answers = c.note, c.answers
            if "at_bound" in values and values["at_bound"].any():
                bound = int(values["at_bound"].sum())
                note = f"{bound} of {len(values)} fits end on a bound"
                if 2 * bound > len(values):  # the curves do not identify their asymptote: it answers nothing yet
                    answers, note = False, note + ": the asymptote is not identified at these steps"
            d = paired(values, pair)
            rows.append(cost_row(c.name, answers, float(np.std(d, ddof=1)), int(d.size), minutes, note, margin))
        elif c.name.endswith(f"on {BIG_TEST} problems"):
            sd, n = _big_test_sd(folder, pair)
            rows.append(cost_row(c.name, c.answers, sd, n, pair_minutes(folder, pair, BIG_TEST / 48), c.note, margin))
        else:
            rows.append(cost_row(c.name, c.answers, float("nan"), 0, float("nan"), c.note, margin))
    return pd.DataFrame(rows)


def choice(table: pd.DataFrame) -> str:
    """The choice rule (see the module) applied to the table, in words: the cheapest candidate that answers the
    question by its expected hours (by the single look's hours, a lower bound, where no design was planned)."""
    ok = table[table["answers"] & table["n_single"].notna()].copy()
    ok["cost"] = ok["hours_expected"].fillna(ok["hours_single"]) if "hours_expected" in ok else ok["hours_single"]
    best = ok.loc[ok["cost"].idxmin()]
    if best["within_budget"]:
        return (f"{best['candidate']}: the cheapest that answers the question, its design's n_max "
                f"({int(best['n_max'])} pairs) within {BUDGET_HOURS:g} hours")  # fmt: skip
    pairs = int(best["n_max"]) if best.get("n_max") == best.get("n_max") and "n_max" in best else int(best["n_single"])
    return (f"{best['candidate']}, the cheapest that answers the question, needs at least {pairs} pairs, "
            f"{pairs * best['minutes_a_pair'] / 60:.0f} hours, beyond the {BUDGET_HOURS:g}-hour budget: the "
            "comparison is exploratory, declared before its runs")  # fmt: skip


DESIGN_NOTE = (
    f"Design of each row: the tiny tier's rule, looks of k = {K} pairs, α = {ALPHA_}, β = {BETA_} (a verdict's "
    f"stability at least 0.9 at Δ = 0 and at Δ = δ = {MARGIN * POINTS:g} points), planned at the planning SD (the "
    f"one-sided 90% upper bound of the paired SD); budget {BUDGET_HOURS:g} hours on 2 cores to n_max. A row "
    f"whose single look needs more than {MAX_PLANNED} pairs gets no sequential plan: n_max and its hours are at "
    "least the single look's. Minutes a pair: both arms' median training time and scoring on the publication's "
    "machine."
)


def table_markdown(table: pd.DataFrame) -> str:
    """The table as Markdown (points, minutes, hours), then `DESIGN_NOTE`."""

    def f(v: float, digits: int = 1) -> str:
        return "—" if not (isinstance(v, float | int) and math.isfinite(v)) else f"{v:.{digits}f}"

    head = ["candidate", "answers final accuracy", "paired SD (pairs)", "planning SD", "min a pair", "n_max",
            "E pairs at Δ = 0 / δ", "hours to n_max", "expected hours", "note"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * 7 + "---|"]
    for r in table.to_dict("records"):
        planned = isinstance(r.get("n_max"), float | int) and r.get("n_max") == r.get("n_max")
        single = r.get("n_single")
        n_max = f"{int(r['n_max'])}" if planned else (f"≥ {int(single)}" if single == single and single else "—")
        hours = f(r.get("hours_n_max"), 0) if planned else (f"≥ {f(r.get('hours_single'), 0)}" if single == single
                                                             and single else "—")  # fmt: skip
        pairs = f"{f(r.get('pairs_at_0'))} / {f(r.get('pairs_at_delta'))}"
        sd = f"{f(r['sd'], 2)} ({r['pairs']})" if r["pairs"] else "—"
        answers = "yes" if r["answers"] else ("in part" if "speed" in r["note"] else "no")
        lines.append(f"| {r['candidate']} | {answers} | {sd} | {f(r.get('planning_sd'), 2)} "
                     f"| {f(r['minutes_a_pair'])} | {n_max} | {pairs} | {hours} | "
                     f"{f(r.get('hours_expected'), 0)} | {r['note']} |")  # fmt: skip
    return "\n".join(lines) + "\n\n" + DESIGN_NOTE
