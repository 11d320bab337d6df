"""Doc blocks of the runs themselves: their training time, the DAG's per-rule cost, the CPU verl profile beside the
local trainer, and the equivalence atlas."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from bandpo.report.atlas import atlas_markdown
from bandpo.report.board import Board
from docs.blocks.cells import METRIC, md_table, num, row_series


def cost(board: Board) -> str:
    """Training time of the published runs (runs.csv), per experiment and model."""
    rows = []
    r = board.runs
    for (experiment, model), g in r.groupby(["experiment", "model"], sort=True):
        t = g["train_seconds"]
        rows.append([experiment, model, len(g), int(g["steps"].iloc[0]), f"{t.min():.0f}–{t.max():.0f}",
                     num(t.sum(), 1, 1 / 60)])  # fmt: skip
    rows.append(["all", "", len(r), "", "", num(r["train_seconds"].sum(), 1, 1 / 60)])
    return md_table(["experiment", "model", "runs", "steps", "s per run", "minutes, sum"], rows, right=2)


def _dag_table(dag: pd.DataFrame) -> str:
    """A DAG run's per-rule cost table (a dag_rules.csv of `python -m bandpo.plan.budget times --csv`), with the
    median fixed cost per job (``fixed_s``: wall time minus the steps or scorings the job recorded) where the table has
    it."""
    fixed = "fixed_s" in dag.columns
    rows = [[r["rule"], int(r["jobs"]), "" if r["rule"] == "all" else f"{r['wall_s_mean']:.0f}",
             f"{r['wall_s_sum']:.0f}", f"{r['cpu_s_sum']:.0f}", f"{r['minutes_per_core']:.1f}"]
            + ([f"{r['fixed_s']:.1f}" if pd.notna(r["fixed_s"]) else ""] if fixed else [])
            for r in row_series(dag)]  # fmt: skip
    head = ["rule", "jobs", "wall s / job", "wall s, sum", "CPU s, sum", "sum / cores, min"]
    return md_table(head + (["fixed s / job (median)"] if fixed else []), rows, right=1)


def _dag_elapsed(dag: pd.DataFrame) -> str:
    """A DAG run's wall time in minutes, first to last job (row ``all``)."""
    return f"{dag.loc[dag['rule'] == 'all', 'elapsed_min'].iloc[0]:.1f}"


def dag_cost(board: Board) -> str:
    """The per-rule cost of the publication run (dag_rules.csv)."""
    return _dag_table(board.dag)


def dag_elapsed(board: Board) -> str:
    """The publication run's wall time in minutes (dag_rules.csv)."""
    return _dag_elapsed(board.dag)


def verl_beside(board: Board) -> str:
    """Per entry, a verl profile's runs (results/verl-cpu, results/real-lm-compare-verl) beside the local trainer's
    runs of the same base model and seed (its beside.csv, `bandpo.analysis.leaderboard.beside_table`): mean@8 of
    each, the per-seed differences and their mean, the training accuracy over the last 10% of steps, the steps and
    the training seconds per run (blank where absent)."""

    def mean(col: pd.Series, fmt: Callable[[float], str]) -> str:
        return fmt(col.mean()) if col.notna().any() else ""

    seconds = lambda v: f"{v:.0f}"  # noqa: E731
    rows = []
    for entry, g in board.beside.groupby("entry", sort=False):
        g = g.sort_values("seed")
        both = g[g[f"{METRIC}_other"].notna()]
        rows.append([entry, ", ".join(str(int(s)) for s in g["seed"]), mean(g[f"{METRIC}_ours"], num),
                     mean(both[f"{METRIC}_other"], num), ", ".join(num(d, sign=True) for d in both["diff"]),
                     mean(both["diff"], lambda v: num(v, sign=True)), mean(g["accuracy_final_ours"], num),
                     mean(both["accuracy_final_other"], num), mean(g["steps_ours"], seconds),
                     mean(both["steps_other"], seconds), mean(g["train_seconds_ours"], seconds),
                     mean(both["train_seconds_other"], seconds)])  # fmt: skip
    head = ["entry", "seeds", f"{METRIC} verl", f"{METRIC} local", "verl − local per seed", "mean",
            "train acc verl", "train acc local", "steps, verl", "steps, local", "train s / run, verl",
            "train s / run, local"]  # fmt: skip
    return md_table(head, rows, right=2)


def atlas(board: Board) -> str:
    """The equivalence atlas (atlas.csv: `bandpo.report.atlas.atlas_markdown`); a line saying how to make it
    before it is published."""
    if board.atlas is None:
        return "(not published yet: `snakemake --cores all` writes results/atlas.csv, rule atlas)"
    return atlas_markdown(board.atlas)


def _tokens(n: int, none: str = "no token") -> str:
    return none if n == 0 else f"{n} token{'s' if n != 1 else ''}"


def atlas_real(board: Board) -> str:
    """What the atlas measured on the testbed's own rollouts (atlas.csv, source ``real``, all tokens), pair by pair:
    the tokens both rules of a Band / DPPO pair stop and those whose gradient differs, where Clip-Higher and GRPO
    differ, and where the dual clip acts."""
    if board.atlas is None:
        return "(not published yet)"
    real = board.atlas[(board.atlas["source"] == "real") & (board.atlas["slice"] == "all")].set_index("pair")
    kl, tv = real.loc["bandpo_kl~dppo_kl"], real.loc["bandpo_tv~dppo_tv"]
    ch, dual = real.loc["clip_higher~grpo"], real.loc["dual_clip~none"]
    tv_differ = "none either" if tv["grad_differ"] == kl["grad_differ"] == 0 else str(int(tv["grad_differ"]))
    return (
        f"BandPO-KL and DPPO-KL stop the same {int(kl['stopped_both'])} tokens and differ on {int(kl['grad_differ'])} "
        f"of {int(kl['tokens'])}, BandPO-TV and DPPO-TV stop the same {int(tv['stopped_both'])} and differ on "
        f"{tv_differ}, Clip-Higher and GRPO differ on {int(ch['grad_differ'])} (A > 0 with 1.2 < r ≤ 1.28), and the "
        f"dual clip acts on {_tokens(int(dual['grad_differ']))}"
    )
