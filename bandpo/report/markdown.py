"""The leaderboard as Markdown (``leaderboard.md``), and one profile's runs beside another's (``beside.md``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from bandpo.analysis.leaderboard import BESIDE_KEYS
from bandpo.report.atlas import NOTE as ATLAS_NOTE
from bandpo.report.atlas import atlas_markdown
from bandpo.report.board import Board, Panel
from bandpo.report.columns import Column, by_model, display_columns, page_title, sections, task_columns, with_seeds
from bandpo.report.figures import FOREST
from bandpo.report.notes import grader_note, power_lines, power_note, reading_notes, unpaired_lines
from bandpo.report.text import fmt, md_cell
from bandpo.report.verdicts import section_markdown, tier_rows


def _md_table(rows: pd.DataFrame, cols: Sequence[Column]) -> list[str]:
    lines = ["| " + " | ".join(md_cell(c.head) for c in cols) + " |"]
    lines.append("|" + "|".join("---" if c.sort is None else "---:" for c in cols) + "|")
    for _, r in rows.iterrows():
        lines.append("| " + " | ".join(md_cell(c.text(r)) for c in cols) + " |")
    return lines


def panel_markdown(panel: Panel) -> list[str]:
    lines = [f"## {md_cell(panel.heading)}", ""]
    lines += [f"- {md_cell(line)}" for line in panel.lines] + ([""] if panel.lines else [])
    if panel.table is not None and not panel.table.empty:
        t = panel.table
        lines += ["| " + " | ".join(md_cell(str(c)) for c in t.columns) + " |", "|" + "---|" * len(t.columns)]
        lines += ["| " + " | ".join(md_cell(str(v)) for v in row) + " |" for row in t.itertuples(index=False)]
        lines.append("")
    return lines


def leaderboard_markdown(board: Board) -> str:
    """The leaderboard as Markdown: one table per (experiment, subset, model size) (and per-task tables when there
    are several tasks), the experiments' notes (`bandpo.report.notes.experiment_notes`), the panels, the notes on
    the statistics and on power, the equivalence atlas and links to the figures (``figures/<name>.png``). Every
    cell is escaped."""
    table = with_seeds(board.leaderboard, board.scores)
    lines = [f"# {md_cell(page_title(table, board.title))}", ""]
    answer = section_markdown(tier_rows(board.primary))
    lines += [answer, ""] if answer else []
    if FOREST in board.figures:  # the picture a reader looks at first, under the answer
        lines += [f"![{FOREST}](figures/{FOREST}.png)", ""]
    if table.empty:
        lines += ["No finished runs or evaluation scores were found.", ""]
    if board.notes:
        lines += ["## Experiments", ""]
        lines += [f"- **{md_cell(xp)}**: {md_cell(text)}" for xp, text in board.notes] + [""]
    cols = display_columns(table)
    for heading, _, g in sections(table):
        lines += [f"## {md_cell(heading)}", "", *_md_table(g, cols), ""]
    if board.per_task is not None and not board.per_task.empty:
        tcols = task_columns(board.per_task)
        for model, g in by_model(board.per_task):
            lines += [f"## {md_cell(str(model))}: per task", "", *_md_table(g, tcols), ""]
    for panel in board.panels:
        lines += panel_markdown(panel)
    lines += _reading_markdown(board)
    if board.atlas is not None and not board.atlas.empty:
        lines += ["## Equivalence atlas", "", md_cell(ATLAS_NOTE), "", atlas_markdown(board.atlas), ""]
    if board.figures:
        lines += ["## Figures", ""]
        for name in [n for n in board.figures if n != FOREST]:
            lines += [f"![{name}](figures/{name}.png)", ""]
    return "\n".join(lines)


def _reading_markdown(board: Board) -> list[str]:
    """The sections on how to read the numbers, on power, on unpaired seeds, and the grader's sentence."""
    table = board.leaderboard
    lines = ["## How to read these numbers", ""]
    for text in reading_notes(table, board.base_per_seed):
        lines += [md_cell(text), ""]
    if board.power is not None and not board.power.empty:
        lines += ["## Power", "", md_cell(power_note(table)), ""]
        lines += [f"- {md_cell(line)}" for line in power_lines(board.power)] + [""]
    unpaired = unpaired_lines(table)
    if unpaired:
        lines += ["## Unpaired seeds", "", *(f"- {md_cell(line)}" for line in unpaired), ""]
    if grader_note(table):
        lines += [md_cell(grader_note(table)), ""]
    return lines


def beside_markdown(table: pd.DataFrame, ours: str, other: str, metric: str = "mean@8") -> str:
    """`beside_table` as Markdown: one row per run, then per (experiment, model, entry, task) the means over the
    seeds present on both sides."""
    lines = [f"# {ours} beside {other}", "",
             f"{metric} in percent; entropy = final token entropy (nats); train acc = share of the rollouts graded "
             "correct over the last 10% of steps, in percent (comparable across trainers, unlike the reward's scale); "
             "clip = clip fraction; the same base model and seed on both sides.", "",
             f"| experiment | model | entry | seed | task | {metric} {ours} | {metric} {other} | diff | "
             f"entropy {ours} | entropy {other} | train acc {ours} | train acc {other} | clip {ours} | clip {other} |",
             "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip

    def row(r: Mapping[str, Any], seed: str) -> str:
        cells = [r["experiment"], r["model"], r["entry"], seed, r["task"], fmt(r[f"{metric}_ours"], 100),
                 fmt(r[f"{metric}_other"], 100), fmt(r["diff"], 100)]  # fmt: skip
        for key, scale, digits in (("entropy_final", 1, 3), ("accuracy_final", 100, 1), ("clipfrac", 1, 4)):
            cells += [fmt(r.get(f"{key}_ours"), scale, digits), fmt(r.get(f"{key}_other"), scale, digits)]
        return "| " + " | ".join(md_cell(str(c)) for c in cells) + " |"

    for r in table.to_dict("records"):
        lines.append(row(r, str(r["seed"])))
    both = table[table[f"{metric}_other"].notna()]
    if not both.empty:
        groups = both.groupby(BESIDE_KEYS[:3] + ["task"], sort=True)
        means = groups.mean(numeric_only=True).drop(columns="seed").join(groups["seed"].nunique()).reset_index()
        for r in means.to_dict("records"):
            lines.append(row(r, f"mean of {r['seed']}"))
    return "\n".join(lines) + "\n"
