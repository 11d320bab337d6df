"""The report stage: renders a profile's statistics (`bandpo.analysis`) as the leaderboard's tables, pages and
figures, all around one object, the board (`board.Board`). The generated blocks of this repository's own docs read
the same board from outside the library (`docs/blocks/`, ``python -m docs.blocks``).

It reads files only (the run outputs, the evaluation files, the bounds table and the atlas); it imports no method
registry and no torch. Modules:

    board      `Board`: the leaderboard, its tables, the config that shaped them and the text the pages print; read
               back from a published folder by `Board.read`
    build      `build_report`: a profile's results -> its board -> the tables, figures and pages
    text       numbers and Markdown cells as every page and doc prints them (`rounded`)
    columns    the columns of the leaderboard tables and the tables of one page (`sections`)
    notes      the pages' sentences: how to read the numbers, power, each experiment's note
    markdown   leaderboard.md, and beside.md
    page       leaderboard.html (Jinja2 template, CSS and JS in templates/ and static/)
    figures    the figures, each built from data with the data it plotted
    axis       the page's sections of each design axis
    atlas      the equivalence atlas's section
    smoke      the real-LM smoke section of the published page
    verdicts   the answer at the top of every page: each tier's verdict, what it shows and what it does not
    forest     the forest plot of every entry's paired difference from the baseline
    metric_cost  the real LM's candidate primary metrics priced by the cost of a decision (``metric-cost``)
    publish    `publish` and `provenance`: a profile's report copied to the top-level results/
    compare    a rerun against the published run (``compare``, ``compare --exact``), a profile beside another
    cli        ``python -m bandpo.report build|publish|compare|beside|smoke|metric-cost``

Outputs of `build_report` (``--out``, default: the results folder itself; every file written atomically)::

    leaderboard.csv        one row per (experiment, subset, model, entry): numbers as fractions, CI / IQM /
                           P(improvement) columns, the paired difference from the baseline (same base model and
                           seed) with its CI and P(improvement), its SD, MDE and the seeds an MDE of 2 points needs;
                           statistics within each (experiment, subset) (bandpo.analysis.experiments); runs without an
                           experiment belong to main
    leaderboard.md         the same, one table per (experiment, subset, model size) (and per task when there are
                           several), in percent, with the experiments' notes, notes on the statistics, the power of
                           the comparisons (MDE per experiment, model size and metric) and links to the figures
    leaderboard.html       one self-contained page: the tables (sortable, filtered by experiment and model size),
                           notes on how to read them, the figures embedded as data URIs; a Content-Security-Policy
                           admits only the page's own script
    stats.csv              long table: every (model, entry, task or "all", metric@k) with its statistics
    scores.csv             the per-seed scores exactly as read from lm-eval's files (`load_eval_scores`)
    runs.csv               one row per training run: final entropy / reward, clip fraction, training time
    steps.csv              one row per (run, step): entropy, reward, accuracy, KL, clip fractions overall / by
                           direction / by old-probability bucket, stopped fractions by advantage sign, the probe's
                           measurement (bandpo.analysis.steps): runs.csv's training columns and the training figures
                           recompute from it
    figures/bounds.png             (a) ratio bounds, (b) probability-change bounds against old probability, from
                                   the bounds table (bandpo.methods.bounds_table)
    figures/training_curves.png    token entropy and reward against step, mean over seeds with a 95% CI band
    figures/clipfrac_buckets.png   clip fraction by old-probability bucket (as logged) and direction
    figures/final_scores.png       final mean@k and pass@k with 95% CIs, per model size
    figures/random_reward_entropy.png   experiment random-reward: token entropy against step per method
    figures/probe_curves.png       experiment probe: deciding-token probability and probe accuracy against step
    figures/probe_clipfrac_buckets.png  experiment probe: clip fraction by old-probability bucket
    figures/{name}.csv             the data each figure plotted (an experiment's figures are placeholders, left off
                                   the page, when it has no runs)
    primary.csv            each experiment's primary comparison and its entropy secondaries (paired treatment -
                           control with its 95% paired t interval: the estimate; the verdict rule's verdict, how it
                           was reached: a sequential design's look, a single look, Holm, exploratory; stability)
    axis.csv, axis_runs.csv   the design axes' rules, and per run of an axis cell (with the config's axes)

With ``atlas.csv`` in the results folder (the equivalence atlas, rule ``atlas``: `bandpo.train.atlas`) the Markdown
and the page get an "Equivalence atlas" section, and `publish` copies the table.

The entry ``base`` is the untrained base model (the step-0 row); it has scores but no training run. An entry's
parameter label is its runs' ``method_label`` (run.json), else ``k=v, ...`` of their parameters.

`publish` copies a profile's ``leaderboard.{csv,md,html}``, tables and ``figures/*.png`` to the top-level
``results/`` (the published leaderboard of the embedded profile). The Markdown links its figures as
``figures/<name>.png`` and the HTML embeds them, so both read the same in either place.
"""

from bandpo.report.board import Board, Panel
from bandpo.report.build import build_report
from bandpo.report.cli import main
from bandpo.report.figures import (
    EXPERIMENT_FIGURES,
    FIGURE_CAPTIONS,
    FIGURES,
    SIMPLEX,
    bounds_figure,
    clipfrac_data,
    clipfrac_figure,
    entry_palette,
    final_scores_figure,
    placeholder_figure,
    save_figure,
    training_curves_figure,
)
from bandpo.report.markdown import leaderboard_markdown
from bandpo.report.page import leaderboard_html
from bandpo.report.publish import LEADERBOARD_FILES, PUBLISHED_TABLES, provenance, publish

__all__ = [
    "EXPERIMENT_FIGURES",
    "FIGURES",
    "FIGURE_CAPTIONS",
    "LEADERBOARD_FILES",
    "PUBLISHED_TABLES",
    "SIMPLEX",
    "Board",
    "Panel",
    "bounds_figure",
    "build_report",
    "clipfrac_data",
    "clipfrac_figure",
    "entry_palette",
    "final_scores_figure",
    "leaderboard_html",
    "leaderboard_markdown",
    "main",
    "placeholder_figure",
    "provenance",
    "publish",
    "save_figure",
    "training_curves_figure",
]
