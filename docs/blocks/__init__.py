"""The numbers of the documentation, generated from the published tables in ``results/``.

README.md, docs/*.md and results/README.md hold blocks ``<!-- generated:NAME -->`` ... ``<!-- /generated:NAME -->``
(a table on lines of its own, or a value inside a sentence); `render` rewrites each block's body from
``results/*.csv`` with the function ``BLOCKS[NAME]`` (``FOLDER/NAME``: from ``results/FOLDER/*.csv``, a settled
experiment published from a config of its own). ``python -m docs.blocks`` rewrites the files, ``--check``
only reports the stale ones (exit 1); tests/unit/test_docs.py asserts that the committed docs equal the output.
Numbers follow the leaderboard's conventions: scores in percent of problems (points), 95% Student-t intervals over
seeds, paired differences from GRPO of the same base model and seed.

The blocks read the published folder's board (`bandpo.report.board.Board.read`), by topic: `scores` (sections of
the leaderboard, primary comparisons, power, seeds), `experiments` (the settled experiments), `axes` (the design
axes and the selection made from them), `runs` (training time, the DAG's cost, the verl profile, the atlas) and
`publication` (provenance.json: the training commit, the machine and numerics, the base models' builds, each
experiment's seeds), `designs` (the rule each primary's config declares, and the plan of the designs as applied);
`cells` formats their numbers. Hand-written text around them carries no number of a run
(tests/unit/test_prose.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from bandpo.report.board import Board
from docs.blocks import axes, designs, experiments, publication, runs, scores

DOC_FILES = ("README.md", "docs/*.md", "results/README.md")
BLOCK = re.compile(r"(<!-- generated:(?P<name>[\w./-]+) -->)(?P<body>.*?)(<!-- /generated:(?P=name) -->)", re.S)


BLOCKS: dict[str, Callable[[Board], str]] = {
    "headline": scores.headline,
    "primary": scores.primary,
    "gains": scores.gains,
    "spread": scores.spread,
    "power": scores.power,
    "pairs-main": scores.pairs_main,
    "clipfrac-main": scores.clipfrac_main,
    "cost": runs.cost,
    "entropy-shift": experiments.entropy_shift,
    "entropy-pool": experiments.entropy_pool,
    "table-main": scores.leaderboard_block("main"),
    "table-random-reward": scores.leaderboard_block("random-reward"),
    "table-probe-probe": scores.leaderboard_block("probe", "probe"),
    "table-probe-rest": scores.leaderboard_block("probe", "rest"),
    "atlas": runs.atlas,
    "atlas-real": runs.atlas_real,
    "axis-verdict": axes.axis_verdict,
    "axis-rules": axes.axis_rules,
    "axis-accuracy": axes.axis_accuracy,
    "axis-accuracy-summary": axes.axis_accuracy_summary,
    "axis-table": axes.axis_table,
    "selection": axes.selection_table,
    "horizon": experiments.horizon,
    "horizon-entropy": experiments.entropy_rows("horizon"),
    "seeds": scores.seeds_summary,
    "mde-measured": scores.mde_measured,
    "horizon-holds": experiments.horizon_holds,
    "pilot": experiments.pilot,
    "metric-cost": experiments.metric_cost,
    "held-out": experiments.held_out_table,
    "clip-buckets": experiments.clip_buckets,
    "verl-held-out": experiments.verl_held_out,
    "verl-step-cost": experiments.verl_step_cost,
    "verl-control": experiments.verl_control,
    "table-horizon": scores.leaderboard_block("horizon"),
    "dag-cost": runs.dag_cost,
    "primary-summary": scores.primary_summary,
    "separated-main": scores.separated,
    "gains-summary": scores.gains_summary,
    "dag-elapsed": runs.dag_elapsed,
    "verl-beside": runs.verl_beside,
    # the verdict rule's plan, from the three publications' scores in git history, with the designs applied
    "sequential-plan": designs.sequential_plan,
    "declared-design": designs.declared_rules,
    "n-runs": lambda board: str(len(board.runs)),
    "publication": publication.publication,
    "machine": publication.machine,
    "base-models": publication.base_models,
    "published-numerics": publication.published_numerics,
    **{
        f"seeds-{xp}": publication.design_seeds(xp) for xp in ("main", "random-reward", "horizon", "probe", "offpolicy")
    },
    "entropy-main": scores.entropy_main,
    "probe-power": scores.probe_power,
    "sd-fewest": scores.sd_fewest,
    "rules": scores.rules,
}


def render(text: str, board: Board) -> str:
    """``text`` with every generated block's body rewritten; a table block keeps its own lines."""

    def body(m: re.Match) -> str:
        folder, _, name = m["name"].rpartition("/")  # FOLDER/NAME: the block made from results/FOLDER/
        if name not in BLOCKS:
            raise KeyError(f"unknown generated block {name!r}; known: {', '.join(sorted(BLOCKS))}")
        out = BLOCKS[name](board.part(folder) if folder else board)
        if m["body"].startswith("\n") or "\n" in out:  # a block on lines of its own
            out = f"\n{out}\n"
        return f"{m[1]}{out}{m[4]}"

    return BLOCK.sub(body, text)


def doc_files(root: str | Path = ".") -> list[Path]:
    """The doc files under ``root`` that may hold generated blocks (`DOC_FILES`)."""
    return sorted({p for pattern in DOC_FILES for p in Path(root).glob(pattern)})


def block_count(root: str | Path = ".") -> tuple[int, int]:
    """The generated blocks under ``root`` and the number of files that hold them."""
    counts = [len(BLOCK.findall(p.read_text(encoding="utf-8"))) for p in doc_files(root)]
    return sum(counts), sum(1 for n in counts if n)


def update(root: str | Path = ".", results: str | Path | None = None, check: bool = False) -> list[Path]:
    """Regenerate the blocks of every doc file under ``root``; returns the files whose text changed (with
    ``check``, the files that are stale, left as they are)."""
    root = Path(root)
    board = Board.read(results if results is not None else root / "results")
    changed = []
    for path in doc_files(root):
        text = path.read_text(encoding="utf-8")
        new = render(text, board)
        if new != text:
            changed.append(path)
            if not check:
                path.write_text(new, encoding="utf-8")
    return changed
