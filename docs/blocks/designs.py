"""Doc blocks of the verdict rule as it was applied: each published folder's declared rule per primary
(`declared_rules`), and docs/statistics.md's plan of the designs (`sequential_plan`), whose designs are those the
published configs declare, not the ones a plan would derive again.

A design is the DAG's: `bandpo.stats.design.SequentialDesign` built from `bandpo.study.design_settings` of the
config the folder's provenance.json records (what `bandpo.plan.runs.Plan.look_spec` writes for each look and
`bandpo.decide.looks` decides with; `report_experiments` passes the same to the report), so the boundaries, n_max
and β printed are those of the looks that ran. A setting whose primary was declared exploratory has no design; the
plan prints the one it would need (`plan_design` at the setting's planning SD), the reason it is exploratory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bandpo.analysis.experiments import ENTROPY
from bandpo.report.board import Board
from bandpo.stats import plan
from bandpo.stats.design import ALPHA, BETA, SequentialDesign, plan_design
from bandpo.stats.power import pairs_needed
from bandpo.stats.rule import BETTER, NOT_BETTER, POINTS, UNDECIDED
from bandpo.stats.simulate import agreement, bootstrap_stability, fixed_n_stability, operating_characteristics
from bandpo.stats.simulate import stability as stability_of
from bandpo.study import look_blocks, report_experiments
from docs.blocks import history
from docs.blocks.publication import published_parts, seed_range

SEQUENTIAL, SINGLE_LOOK, EXPLORATORY, DEMOTED, DESCRIPTIVE = (
    "sequential", "single look", "exploratory", "demoted", "descriptive",
)  # fmt: skip
RULE_KINDS = (SEQUENTIAL, SINGLE_LOOK, EXPLORATORY, DEMOTED, DESCRIPTIVE)


# ------------------------------------------------------------------------------------------------------------
# The rule each published primary declares
# ------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Declared:
    """One primary (experiment, model) as its config declares it: ``kind`` (`RULE_KINDS`), the pair's seeds (of a
    sequential primary: the most it may run, `look_blocks`), the margin (fractions; descriptive: the entropy
    margin, nats), the design (sequential) and the
    reason (exploratory, demoted)."""

    experiment: str
    model: str
    kind: str
    seeds: tuple[int, ...]
    margin: float
    design: SequentialDesign | None = None
    reason: str = ""


def declared(config: Mapping[str, Any]) -> list[Declared]:
    """Every primary of a resolved config (provenance.json's), per experiment and model, in the config's order."""
    planned = report_experiments(config)
    out = []
    for xp, spec in (config.get("experiments") or {}).items():
        primary = spec.get("primary") or {}
        if not primary.get("compare") and primary.get("score") != ENTROPY:
            continue
        models = spec.get("models") or [m["id"] for m in config.get("models") or []]
        for model in models:
            design = (planned[xp].get("designs") or {}).get(model)
            margin = planned[xp]["margins"].get(model, float("nan"))
            seeds = tuple(int(s) for s in primary.get("seeds") or spec.get("seeds") or config.get("seeds") or ())
            reason = str(primary.get("exploratory") or primary.get("demoted") or "")
            if primary.get("score") == ENTROPY:
                kind, margin = DESCRIPTIVE, (planned[xp].get("entropy_margins") or {}).get(model, float("nan"))
            elif primary.get("exploratory"):
                kind = EXPLORATORY
            elif primary.get("demoted"):
                kind = DEMOTED
            elif design is not None:
                kind, seeds = SEQUENTIAL, tuple(s for block in look_blocks(config, xp, model) for s in block)
            else:
                kind = SINGLE_LOOK
            applied = SequentialDesign(**design) if kind == SEQUENTIAL else None
            out.append(Declared(xp, model, kind, seeds, margin, applied, reason))
    return out


def rule_text(d: Declared) -> str:
    """A primary's declared rule in words: "main, tiny-m: sequential, a look every 5 pairs up to n_max 15 (seeds
    0-14), β 0.15 (power 0.85) at a margin of 2.0 points, one-sided α 0.05, planning SD 2.52 points"."""
    head, margin = f"{d.experiment}, {d.model}: {d.kind}", f"a margin of {d.margin * POINTS:.1f} points"
    pairs = f"{len(d.seeds)} pairs (seeds {seed_range(d.seeds)})"
    if d.kind == SEQUENTIAL:
        des = d.design
        return (f"{head}, a look every {des.k} pairs up to n_max {des.n_max} (seeds {seed_range(d.seeds)}), "
                f"β {des.beta:.2f} (power {1 - des.beta:.2f}) at {margin}, one-sided α {des.alpha:g}, planning SD "
                f"{des.planning_sd * POINTS:.2f} points")  # fmt: skip
    if d.kind == SINGLE_LOOK:
        return f"{head} at {pairs}, β {BETA:.2f} at {margin}, one-sided α {ALPHA:g}"
    if d.kind == EXPLORATORY:
        return f"{head}, no verdict: the estimate at {pairs}, {margin}"
    if d.kind == DEMOTED:
        return f"{head} to a secondary, a single look Holm-adjusted at {pairs}, {margin}"
    return (f"{head}, no verdict: each method's final entropy against step 1 over {len(d.seeds)} seeds "
            f"({seed_range(d.seeds)}), an entropy margin of {d.margin:g} nats")  # fmt: skip


def declared_rules(board: Board) -> str:
    """The block ``declared-design`` (``FOLDER/declared-design``): the rule the folder's published config declares
    for each of its primaries (`rule_text`), "; "-separated."""
    rules = declared(board.provenance.get("config") or {})
    if not rules:
        raise ValueError(f"the config published in {board.folder} declares no primary")
    return "; ".join(map(rule_text, rules))


# ------------------------------------------------------------------------------------------------------------
# The plan of the designs (docs/statistics.md, block sequential-plan)
# ------------------------------------------------------------------------------------------------------------
_pts, _p, _table = plan.pts, plan.pct, plan.table  # the plan's number formats and Markdown tables, as the CLI prints


def setting_designs(board: Board, plans, k: int = plan.DEFAULT_K) -> dict[str, tuple[str, SequentialDesign]]:
    """Per setting of the plan (`docs.blocks.history.PRIMARIES`): (how its primary was declared, its design).
    A setting's primary is the first of its primaries that a published folder (this one, then those under it)
    declares; sequential: the design applied; exploratory: the one it would need (`plan_design` at the setting's
    planning SD, the config's margin)."""
    folders = [board, *(part for _name, part in published_parts(board))]
    rules = [d for b in folders for d in declared(b.provenance.get("config") or {})]
    out = {}
    for setting, p in plans.iterrows():
        names = [(name, xp, model) for name, (st, xp, model) in history.PRIMARIES.items() if st == setting]
        found = [(name, d) for name, xp, model in names for d in rules if (d.experiment, d.model) == (xp, model)]
        if not found:
            raise ValueError(f"no published folder declares a primary of the setting {setting!r}")
        name, d = found[0]
        if d.design is not None:
            out[setting] = (f"{name}: {d.kind}, as applied", d.design)
        else:
            out[setting] = (f"{name}: {d.kind}, would need", plan_design(d.margin, k, p["planning_sd"]))
    return out


def _sds_tables(diffs, plans) -> list[str]:
    rows = []
    for (c, primary), g in diffs.groupby(["publication", "primary"], sort=False):
        d = g["diff"].to_numpy()
        rows.append([f"`{c}`", primary, str(d.size), _pts(d.mean()), _pts(d.std(ddof=1))])
    out = ["The paired differences (BandPO-KL − GRPO, final mean@8, points) in each publication:", ""]
    out += _table(["publication", "primary", "pairs", "mean", "SD"], rows, "llrrr") + [""]
    cols = ["pooled_mean", "pooled_sd", "largest_sd", "planning_sd"]
    rows = [[st, f"{p['samples']:.0f}", f"{p['df']:.0f}", *(_pts(p[c]) for c in cols)] for st, p in plans.iterrows()]
    out += [f"Pooled per setting (planning SD: the one-sided {plan.SD_CONFIDENCE:.0%} upper confidence bound):", ""]
    header = ["setting", "samples", "df", "pooled mean", "pooled SD", "largest SD", "planning SD"]
    return out + _table(header, rows, "lrrrrrr") + [""]


def _designs_table(plans, designs, costs, reps: int, seed: int) -> list[str]:
    rows = []
    for st, p in plans.iterrows():
        how, des = designs[st]
        oc0 = operating_characteristics(des, 0.0, des.planning_sd, reps, seed)
        ocd = operating_characteristics(des, des.margin, des.planning_sd, reps, seed)
        ocw = operating_characteristics(des, des.margin, p["largest_sd"], reps, seed)
        oco = operating_characteristics(des, p["pooled_mean"], p["pooled_sd"], reps, seed)
        lo, hi = costs.loc[st, "min"], costs.loc[st, "max"]
        cost = [f"{lo:.1f}–{hi:.1f}", f"{des.n_max * lo:.0f}–{des.n_max * hi:.0f}"]
        rows.append([st, how, _pts(des.planning_sd), f"{1 - des.beta:.2f}", str(des.n_max), _p(oc0.p_better),
                     _p(1 - ocd.p_better), _p(1 - ocw.p_better), f"{oc0.expected_n:.1f}", f"{ocd.expected_n:.1f}",
                     f"{oco.expected_n:.1f}", *cost])  # fmt: skip
    header = ["setting", "design", "planning SD of the design", "power at δ", "n_max", "α (Δ = 0)", "β (Δ = δ)",
              "β at largest SD", "pairs at Δ = 0", "pairs at Δ = δ", "pairs at pooled mean, SD", "CPU-min a pair",
              "CPU-min at n_max"]  # fmt: skip
    out = ["Each setting's design: as applied, the design its published config declares (its planning SD as "
           "declared, its power and n_max); an exploratory setting's, the one it would need (power "
           f"{1 - BETA:.2f}, n_max the smallest that meets at the planning SD). Simulated ({reps} runs a cell; "
           "training CPU-minutes of one pair in the three publications):", ""]  # fmt: skip
    return out + _table(header, rows, "llrrrrrrrrrrr") + [""]


def _stability_tables(diffs, designs, reps: int, seed: int) -> list[str]:
    head = designs[history.HEADLINE_SETTING][1]
    out = [f"The headline's boundaries ({history.HEADLINE_SETTING}, the design applied):", ""]
    out += plan.boundaries_table(head) + [""]
    rows = []
    groups = [((c, pr), g) for (c, pr), g in diffs.groupby(["publication", "primary"], sort=False)]
    headline = diffs["setting"] == history.HEADLINE_SETTING
    groups += [((c, history.POOLED), diffs[(diffs["publication"] == c) & headline]) for c in history.PUBLICATIONS]
    for (c, primary), g in groups:
        d = g["diff"].to_numpy()
        setting = history.PRIMARIES[primary][0] if primary in history.PRIMARIES else history.HEADLINE_SETTING
        des = designs[setting][1]
        st = stability_of(des, float(d.mean()), float(d.std(ddof=1)), d.size, reps, seed)
        bs = bootstrap_stability(des, d, reps, seed)
        rows.append([f"`{c}`", primary, str(d.size), _pts(d.mean()), _pts(d.std(ddof=1)), _p(st.p_better),
                     f"{st.expected_n:.1f}", _p(st.stability), _p(bs.stability), _p(st.predictive)])  # fmt: skip
    header = ["publication", "primary", "pairs", "mean", "SD", "P(better)", "expected pairs", "stability",
              "bootstrap", "predictive"]  # fmt: skip
    out += ["Stability of each primary's verdict under its setting's design, from its observed mean and SD:", ""]
    out += _table(header, rows, "llrrrrrrrr") + [""]
    rows = []
    for delta in history.DELTA_GRID:
        oc = operating_characteristics(head, delta / POINTS, head.planning_sd, reps, seed)
        rows.append([f"{delta:+g}", _p(oc.p_better), f"{oc.expected_n:.1f}", _p(agreement(oc.p_better, reps))])
    out += [f"The headline's design over the true Δ at its planning SD ({_pts(head.planning_sd)} points):", ""]
    return out + _table(["true Δ (points)", "P(better)", "expected pairs", "stability"], rows, "rrrr") + [""]


def _fixed_n_table(diffs, plans, designs, reps: int, seed: int) -> list[str]:
    rows, words = [], (BETTER, NOT_BETTER, UNDECIDED)
    for st, p in plans.iterrows():
        margin = designs[st][1].margin
        n = int(diffs[diffs["setting"] == st].groupby(["publication", "primary"]).size().min())
        stab, probs = fixed_n_stability(p["pooled_mean"], p["pooled_sd"], n, margin, reps=reps, rng=seed)
        rows.append([st, str(n), _pts(p["pooled_mean"]), _pts(p["pooled_sd"]), *(_p(probs[w]) for w in words),
                     _p(stab), str(int(pairs_needed(p["pooled_sd"], margin)))])  # fmt: skip
    header = ["setting", "pairs", "pooled mean", "pooled SD", "P(better)", "P(not better)", "P(undecided)",
              "stability", "single look decides from"]  # fmt: skip
    out = ["A single look at the pairs each primary ran (`fixed_n_decision`), at the pooled mean and SD:", ""]
    return out + _table(header, rows, "lrrrrrrrr")


def sequential_plan(board: Board, reps: int = 40_000, seed: int = 0) -> str:
    """The block ``sequential-plan`` of docs/statistics.md ("The verdict rule and seeds until decided"): the SDs
    the three publications measured (`docs.blocks.history.publication_differences`, from git history), the
    planning SD per setting, each setting's design as applied (`setting_designs`) with its simulated error rates,
    expected pairs and training cost, the headline's boundaries, each primary's stability under its design, the
    stability over the true difference, and what the pairs run so far reach at a fixed n. Seeded."""
    repo = board.folder or "."
    diffs = history.publication_differences(repo)
    plans = history.planning_sds(diffs).set_index("setting")
    costs = history.publication_costs(repo).groupby("setting", sort=False)["cpu_min"].agg(["min", "max"])
    designs = setting_designs(board, plans)
    out = _sds_tables(diffs, plans) + _designs_table(plans, designs, costs, reps, seed)
    out += _stability_tables(diffs, designs, reps, seed) + _fixed_n_table(diffs, plans, designs, reps, seed)
    return "\n".join(out)
