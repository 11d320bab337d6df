"""Doc blocks of the settled experiments: the random-reward control's entropy shift, the horizon run against
main's runs of the same seeds, and the real-LM comparison's pilot, held-out curves and clip fractions by bucket."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from bandpo.analysis.experiments import collapse_factors, primary_results
from bandpo.analysis.steps import read_steps
from bandpo.report.board import Board
from bandpo.report.metric_cost import choice, cost_table, table_markdown
from bandpo.stats.rule import BETTER, NOT_BETTER, t_interval
from bandpo.study import report_experiments
from docs.blocks.cells import METRIC, ci, margin_text, md_table, num, row_series, verdict_parts
from docs.blocks.publication import seed_range


def entropy_changes(board: Board) -> pd.DataFrame:
    """Random-reward runs: final entropy minus the entropy at step 1, per run (columns entry, seed, first, final,
    change)."""
    rr = board.runs[board.runs.experiment == "random-reward"]
    return pd.DataFrame(
        {
            "entry": rr.entry,
            "seed": rr.seed,
            "first": rr.entropy_first,
            "final": rr.entropy_final,
            "change": rr.entropy_final - rr.entropy_first,
        }  # fmt: skip
    )


def entropy_shift(board: Board) -> str:
    """Per rule and pooled: step-1 and final entropy, the paired t interval of final - step 1 and the descriptive
    verdict of primary.csv (the paired rule: no control, so not a verdict of the rule of #55)."""
    changes = entropy_changes(board)
    verdicts = board.primary[board.primary.experiment == "random-reward"].set_index("treatment")
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
            "" if v is None else v["verdict"],
        ])  # fmt: skip
    head = ["rule", "n", "entropy, step 1", "entropy, final", "final − step 1, paired t", "t interval excludes 0",
            "descriptive verdict"]  # fmt: skip
    return md_table(head, rows, right=1)


def entropy_pool(board: Board) -> str:
    changes = entropy_changes(board)["change"]
    lo, hi = t_interval(changes)
    return ci(changes.mean(), lo, hi, 3, 1.0, sign=True)


def _score_clause(p: pd.Series) -> str:
    """A primary.csv score row as a clause: the paired difference in points over the pairs its verdict rests on (the
    estimate), and the verdict with how it was reached, the margin where its words do not say it, and, where
    computed, its stability."""
    words, how = verdict_parts(p)
    margin = p.get("margin", np.nan)
    if margin == margin and "by" not in words:
        how += f", margin {margin_text(margin)} points"
    stab = p.get("stability", np.nan)
    how += f", stability {num(stab, 2, 1.0)}" if stab == stab else ""
    d = ci(p["difference"], p["ci_low"], p["ci_high"], sign=True)
    return f"{p['treatment']} − {p['control']} {p['metric']} {d} points over {int(p['n'])} seed pairs: {words} ({how})"


def _entropy_clause(e: pd.Series) -> str:
    """A primary.csv entropy row (entropy_final, entropy_auc: a secondary of the Holm family) as a clause, in nats."""
    what = {"entropy_final": "final entropy", "entropy_auc": "entropy AUC"}[e["metric"]]
    words = str(e["label"]).split(" (")[0]
    need = e.get("n_needed", np.nan)
    if words == "undecided" and need == need:
        words += f": a single look decides from n = {int(need)}"
    margin = e.get("margin", np.nan)
    judged = f", margin {margin:.3f} nats" if margin == margin and " by " not in words else ""
    d = ci(e["difference"], e["ci_low"], e["ci_high"], 3, 1.0, sign=True)
    return f"{what} {e['treatment']} − {e['control']} {d} nats ({words}; Holm{judged})"


def _experiment_primary(board: Board, name: str) -> tuple[pd.Series, pd.DataFrame]:
    p = board.primary[board.primary.experiment == name]
    if p.empty:
        raise KeyError(f"primary.csv has no rows of experiment {name!r}")
    return p[p.metric == METRIC].iloc[0], p[p.metric.str.startswith("entropy")]


def entropy_rows(experiment: str) -> Callable[[Board], str]:
    """The paired entropy rows of an experiment's primary.csv (final entropy, entropy AUC), one clause each."""

    def block(board: Board) -> str:
        _score, entropy = _experiment_primary(board, experiment)
        return "; ".join(_entropy_clause(e) for e in row_series(entropy))

    return block


def _steps_of(board: Board, experiment: str) -> int:
    runs = board.runs[board.runs.experiment == experiment]
    return int(runs["steps"].max())


def horizon(board: Board) -> str:
    """The horizon experiment in one sentence: its steps, the paired final mean@8 (verdict, margin, MDE) and each
    run's entropy fall, step-1 entropy / final (`collapse_factors`; its paired entropy rows: `entropy_rows`)."""
    score, _entropy = _experiment_primary(board, "horizon")
    parts = [f"at {_steps_of(board, 'horizon')} steps, {_score_clause(score)}"]
    falls = collapse_factors(board.runs, board.experiments)
    for i, (entry, g) in enumerate(falls[falls.experiment == "horizon"].groupby("entry", sort=False)):
        factors = ", ".join(f"{f:.1f}" for f in g["factor"])
        counts = f"{int(g['collapsed'].sum())} of {len(g)}"
        first = f"(step 1 / final; {counts} runs at least {g['threshold'].iloc[0]:g}-fold)"
        parts.append(
            f"{entry}'s entropy fell {factors}-fold {first}" if i == 0 else f"{entry}'s {factors}-fold ({counts})"
        )
    return "; ".join(parts)


def per_seed_differences(board: Board, experiment: str, p: pd.Series) -> pd.Series:
    """seed -> treatment's score minus control's (same base model and seed) of a primary.csv score row ``p``, read
    from scores.csv for ``experiment`` (another experiment's runs of the same model, task and pair where it is not
    ``p``'s own)."""
    s = board.scores
    s = s[(s.experiment == experiment) & (s.model == p["model"]) & (s.name == p["metric"]) & (s.task == p["task"])]
    wide = s.pivot_table(index="seed", columns="entry", values="value")
    return (wide[p["treatment"]] - wide[p["control"]]).dropna()


def horizon_holds(board: Board) -> str:
    """Whether the 64-step verdict of the primary pair on the horizon's model (main's primary) holds at the
    horizon's length, on the same seeds: main's runs of the horizon's seeds decided by a single look of the rule
    (`bandpo.analysis.experiments.primary_results` on those seeds' scores) beside the horizon's verdict, each with
    its difference, and the change from main's length to the horizon's, paired per seed (horizon's difference minus
    main's, 95% paired t). Neither confirmed nor contradicted when the longer run has no verdict (undecided, or
    exploratory)."""
    late, _ = _experiment_primary(board, "horizon")
    horizon = per_seed_differences(board, "horizon", late)
    seeds = sorted(horizon.index)
    s = board.scores
    spec = report_experiments(board.provenance.get("config") or {"experiments": board.experiments})["main"]
    spec = {**spec, "designs": None, "primary": {**spec["primary"], "seeds": seeds}}  # a single look at these pairs
    main = primary_results(s[(s.experiment == "main") & s.seed.isin(seeds)], {"main": spec})
    (early,) = row_series(main[(main.model == late["model"]) & (main.metric == late["metric"])])
    main_d = per_seed_differences(board, "main", early).reindex(seeds)
    if main_d.isna().any():
        raise ValueError(f"main has the horizon's seeds {seeds} only for {sorted(main_d.dropna().index)}")
    change = horizon.loc[seeds] - main_d
    lo, hi = t_interval(change, bounds=(-2.0, 2.0))

    def said(r: pd.Series, steps: int, xp: str) -> str:
        words, how = verdict_parts(r)
        d = ci(r["difference"], r["ci_low"], r["ci_high"], sign=True)
        return f"{words} at {steps} steps ({how}; {d} points, {xp}, {int(r['n'])} seed pairs)"

    who = f"seeds {seed_range(seeds)}"
    a = said(early, _steps_of(board, "main"), f"main's runs of {who}")
    b = said(late, _steps_of(board, "horizon"), f"horizon, {who}")
    paired_change = f"horizon − main on the same seeds, paired: {ci(change.mean(), lo, hi, sign=True)} points"
    if late["verdict"] not in (BETTER, NOT_BETTER):  # the longer run does not decide
        return f"is neither confirmed nor contradicted on {late['model']}: {a}; {b}; {paired_change}"
    if early["verdict"] == late["verdict"]:
        return f"holds on {late['model']}: {a}; {b}; {paired_change}"
    return f"does not hold on {late['model']}: {a}, but {b}; {paired_change}"


def held_out_curves(board: Board) -> pd.DataFrame:
    """The held-out curves of a published folder's runs (steps.csv's val/mean, ``val_every``): one row per run and
    measurement, columns experiment, model, entry, seed, step (0: before any update) and value (validation mean@k);
    empty when no run measured one."""
    steps = read_steps(board.folder / "steps.csv")
    keys = ["experiment", "model", "entry", "seed"]
    if "val/mean" not in steps:
        return pd.DataFrame(columns=[*keys, "step", "value"])
    before = steps.dropna(subset=["val/mean_before"]).assign(step=0, value=lambda f: f["val/mean_before"])
    after = steps.dropna(subset=["val/mean"]).assign(value=lambda f: f["val/mean"])
    return pd.concat([before, after])[[*keys, "step", "value"]].sort_values([*keys, "step"], ignore_index=True)


# The pilot's question, declared before it ran (issue #56, item 3): does validation mean@k move by at least this?
PILOT_BAR = 0.05


def pilot(board: Board) -> str:
    """The pilot of a comparison with held-out curves (issue #56, item 3): the primary's control (GRPO) on its first
    seed, its validation mean@k before training and after every measured step, the change from before training to
    its last measurement against the bar declared before it ran (`PILOT_BAR`), and the time of a training step (the
    median over the experiment's runs of runs.csv's training time over steps: a run resumed beside other jobs
    is no outlier there; the held-out measurements are not counted)."""
    score, _entropy = _experiment_primary(board, "main")
    runs = board.runs.query("experiment == 'main' and model == @score.model")
    run = runs[runs.entry == score.control].sort_values("seed").iloc[0]
    curves = held_out_curves(board)
    curve = curves[(curves.model == run.model) & (curves.entry == run.entry) & (curves.seed == run.seed)]
    if curve.empty or curve.step.iloc[0] != 0:
        raise ValueError(
            f"steps.csv has no held-out curve with a before-training value for {run.entry} seed {run.seed}"
        )
    k = board.provenance["config"]["train"]["val_k"]
    after = ", ".join(num(v) for v in curve.value.iloc[1:])
    steps = "/".join(str(s) for s in curve.step.iloc[1:])
    change = num(curve.value.iloc[-1] - curve.value.iloc[0], sign=True)
    moved = curve.value.iloc[-1] - curve.value.iloc[0] >= PILOT_BAR
    return (
        f"{run.entry}, seed {run.seed}: validation mean@{k} {num(curve.value.iloc[0])} before training, {after} "
        f"after steps {steps} ({change} points: {'' if moved else 'not '}at least {num(PILOT_BAR, 0)}); "
        f"a training step {(runs.train_seconds / runs.steps).median():.0f} s (the median over the {len(runs)} runs)"
    )  # fmt: skip


def held_out_table(board: Board) -> str:
    """The primary pair's validation mean@k at each measurement (0: before training): each entry's mean over seeds
    and the paired difference (treatment − control, same seed: the same problems and sampling stream), each with its
    95% t interval over the seeds; descriptive (the verdict is the test split's)."""
    score, _entropy = _experiment_primary(board, "main")
    curves = held_out_curves(board)
    wide = curves[curves.model == score.model].pivot_table(index=["step", "seed"], columns="entry", values="value")
    rows = []
    for step, g in wide.groupby(level="step"):
        d = (g[score.treatment] - g[score.control]).dropna()
        rows.append([
            "before training" if step == 0 else f"after step {step}", str(len(d)),
            *(ci(g[e].mean(), *t_interval(g[e].dropna())) for e in (score.control, score.treatment)),
            ci(d.mean(), *t_interval(d), sign=True),
        ])  # fmt: skip
    k = board.provenance["config"]["train"]["val_k"]
    head = ["measured", "seed pairs", f"{score.control}, mean@{k}", f"{score.treatment}, mean@{k}",
            f"{score.treatment} − {score.control}, paired"]  # fmt: skip
    return md_table(head, rows, right=1)


def clip_buckets(board: Board) -> str:
    """Where clipping binds, by the sampled token's old probability: steps.csv's ``clipfrac_upper/pA-B`` and
    ``clipfrac_lower/pA-B`` (the share of the bucket's tokens whose ratio the upper / lower bound clips, over the
    step's off-policy updates where the run had them, as the report's figure reads them). Per run the mean over its
    steps, then per entry of the primary pair the mean over seeds with its 95% t interval, in percent. The Band
    bounds differ from the fixed clip most in the low buckets' upper bound (a rare token with a positive advantage)."""
    score, _entropy = _experiment_primary(board, "main")
    steps = pd.read_csv(board.folder / "steps.csv", keep_default_na=False, na_values=[""])
    steps = steps[(steps.experiment.fillna("main") == "main") & (steps.model == score.model)]
    buckets = [c.split("/", 1)[1] for c in steps.columns if c.startswith("clipfrac_upper/")]
    if not buckets:
        raise ValueError(f"{board.folder / 'steps.csv'} has no clip fractions by probability bucket")
    per_run = steps.groupby(["entry", "seed"]).mean(numeric_only=True)
    rows = []
    for b in buckets:
        cells = [b.removeprefix("p")]
        for side in ("upper", "lower"):
            for entry in (score.control, score.treatment):
                v = per_run.loc[entry, f"clipfrac_{side}/{b}"].dropna()
                cells.append(ci(v.mean(), *t_interval(v), 2))
        rows.append(cells)
    c, t = score.control, score.treatment
    head = ["old probability", f"upper clip %, {c}", f"upper clip %, {t}", f"lower clip %, {c}",
            f"lower clip %, {t}"]  # fmt: skip
    return md_table(head, rows, right=1)


def beside_board(board: Board) -> Board:
    """The published folder a verl profile's runs stand beside (its config's ``beside``, a path from the repository
    root that holds ``board``'s folder, results/<profile>/)."""
    beside = board.provenance["config"].get("beside")
    if not beside:
        raise ValueError(f"{board.folder / 'provenance.json'}: the config names no `beside` folder")
    return Board.read(board.folder.resolve().parents[1] / beside)


def verl_held_out(board: Board) -> str:
    """A verl profile's held-out curve beside the local trainer's (issue #56, item 5): per entry, validation mean@k
    before training and at each of verl's measurements, for verl's runs, the local runs of the same seeds, and the
    local runs' mean over all their seeds with its 95% t interval; the change from before training to the last
    measurement. Rows where the local curve has no measurement at one of verl's steps fail (the design's premise)."""
    ours, other = held_out_curves(board), held_out_curves(beside_board(board))
    if ours.empty:
        raise ValueError(f"{board.folder / 'steps.csv'} has no held-out curve (val_every)")
    steps = sorted(ours.step.unique())
    seeds = sorted(ours.seed.unique())
    rows = []
    for entry in dict.fromkeys(ours.entry):
        mine = ours[ours.entry == entry]
        theirs = other[(other.entry == entry) & other.model.isin(mine.model.unique()) & other.step.isin(steps)]
        if set(theirs.step) != set(steps):
            raise ValueError(f"the local runs of {entry} have no held-out measurement at steps {steps}")
        for trainer, curve in (("verl", mine), ("local", theirs[theirs.seed.isin(seeds)]), ("local", theirs)):
            wide = curve.pivot_table(index="seed", columns="step", values="value")[steps]
            change = wide[steps[-1]] - wide[steps[0]]
            cells = [ci(wide[s].mean(), *t_interval(wide[s])) if len(wide) > 1 else num(wide[s].iloc[0]) for s in steps]
            cells.append(
                ci(change.mean(), *t_interval(change), sign=True) if len(wide) > 1 else num(change.iloc[0], sign=True)
            )
            rows.append([entry, trainer, seed_range(list(wide.index)), *cells])
    k = board.provenance["config"]["train"]["val_k"]
    head = ["entry", "trainer", "seeds", *(f"mean@{k} " + ("before training" if s == 0 else f"after step {s}")
                                          for s in steps), "change"]  # fmt: skip
    return md_table(head, rows, right=3)


def verl_step_cost(board: Board) -> str:
    """A verl profile's training time per step against the local trainer's it stands beside: per side the median
    over its runs of runs.csv's training seconds over steps (verl's: its timing of the step, checkpoint saves
    included, the held-out measurements apart; the local trainer's: its steps, the held-out measurements apart),
    and their ratio."""
    mine, theirs = board.runs, beside_board(board).runs
    theirs = theirs[theirs.model.isin(mine.model.unique())]
    verl = (mine.train_seconds / mine.steps).median()
    local = (theirs.train_seconds / theirs.steps).median()
    return (
        f"a verl step {verl:.0f} s (the median over its {len(mine)} runs), the local trainer's {local:.0f} s (over "
        f"its {len(theirs)} runs): {verl / local:.1f} times"
    )


def verl_control(board: Board) -> str:
    """The controls of a verl pair, one seed and one base model for every run, so the same bits are expected: the
    runs' validation mean@k before training, and their step-1 rollouts (accuracy and mean token entropy, drawn
    before any update); for each, whether the runs agree exactly."""
    curves = held_out_curves(board)
    before = curves[curves.step == 0].sort_values(["entry", "seed"])
    steps = read_steps(board.folder / "steps.csv")
    first = steps[steps.step == 1].sort_values(["entry", "seed"])
    if before.empty or first.empty:
        raise ValueError(f"{board.folder / 'steps.csv'} has no held-out measurement before training or no step 1")

    def same(frame: pd.DataFrame, column: str) -> str:  # within each seed: the runs of one seed share its bits
        return "the same" if frame.groupby("seed")[column].nunique().max() == 1 else "not the same"

    values = ", ".join(f"{r.entry} {num(r.value)}" for r in before.itertuples())
    rollouts = ", ".join(f"{r.entry} {num(r.accuracy)} / {r.entropy:.4f}" for r in first.itertuples())
    return (
        f"before training, validation mean@{board.provenance['config']['train']['val_k']} {same(before, 'value')} in "
        f"its {len(before)} runs ({values}); step 1's rollouts, accuracy / entropy, {same(first, 'accuracy')} / "
        f"{same(first, 'entropy')} ({rollouts})"
    )


def metric_cost(board: Board) -> str:
    """The real LM's candidate primary metrics with their measured paired SD, the minutes a pair costs, the design
    that gives a verdict stability 0.9 and its hours, and the choice the declared rule makes
    (`bandpo.report.metric_cost`), from a published real-LM comparison's folder."""
    table = cost_table(board.folder)
    return table_markdown(table) + "\n\nChoice, by the rule: " + choice(table) + "."
