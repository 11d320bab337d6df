"""The report stage: every run's metrics and lm-eval scores turned into a leaderboard, statistics and figures.

It reads files only (the run outputs, the evaluation files and a bounds table); it imports no method registry
and no torch. Modules:

    load       the run outputs and lm-eval's results files (the one reader of lm-eval's results, also used by
               bandpo.score.evaluate); `load_run` reads one run folder
    stats      bootstrap CIs, IQM, probability of improvement, paired differences from the baseline, minimum
               detectable difference and seeds needed, training statistics (pure functions)
    tables     the leaderboard frame, the per-task frame, their columns, the Markdown
    experiments  one section per (experiment, subset); each experiment's primary comparison
    page       the self-contained HTML page (Jinja2 template, CSS and JS in templates/ and static/)
    atlas      the equivalence atlas's table (atlas.csv, computed by bandpo.report.atlas_measure): columns, reader,
    Markdown
    figures    the figures, each built from data with the data it plotted
    steps      steps.csv: the per-step training metrics, compact (`steps_table`, `write_steps`, `read_steps`)
    cli        build_report, publish, provenance and ``python -m bandpo.report build|publish``

Outputs of `build_report` (``--out``, default: the results folder itself; every file written atomically)::

    leaderboard.csv        one row per (experiment, subset, model, entry): numbers as fractions, CI / IQM /
                           P(improvement) columns, the paired difference from the baseline (same base model and
                           seed) with its CI and P(improvement), its SD, MDE and the seeds an MDE of 2 points needs;
                           statistics within each (experiment, subset) (bandpo.report.experiments); runs without an
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
                           measurement (bandpo.report.steps): runs.csv's training columns and the training figures
                           recompute from it
    figures/bounds.png             (a) ratio bounds, (b) probability-change bounds against old probability, from
                                   the bounds table (bandpo.report.bounds_table)
    figures/training_curves.png    token entropy and reward against step, mean over seeds with a 95% CI band
    figures/clipfrac_buckets.png   clip fraction by old-probability bucket (as logged) and direction
    figures/final_scores.png       final mean@k and pass@k with 95% CIs, per model size
    figures/random_reward_entropy.png   experiment random-reward: token entropy against step per method
    figures/probe_curves.png       experiment probe: deciding-token probability and probe accuracy against step
    figures/probe_clipfrac_buckets.png  experiment probe: clip fraction by old-probability bucket
    figures/{name}.csv             the data each figure plotted (an experiment's figures are placeholders, left off
                                   the page, when it has no runs)
    primary.csv            each experiment's primary comparison (paired treatment - control, 95% paired t
                           interval, verdict; the earlier bootstrap rule beside it)

With ``atlas.csv`` in the results folder (the equivalence atlas, rule ``atlas``: `bandpo.report.atlas_measure`) the
Markdown and
the page get an "Equivalence atlas" section, and `publish` copies the table.

The entry ``base`` is the untrained base model (the step-0 row); it has scores but no training run. An entry's
parameter label is its runs' ``method_label`` (run.json), else ``k=v, ...`` of their parameters.

`publish` copies a profile's ``leaderboard.{csv,md,html}``, tables and ``figures/*.png`` to the top-level
``results/`` (the published leaderboard of the embedded profile). The Markdown links its figures as
``figures/<name>.png`` and the HTML embeds them, so both read the same in either place.
"""

from bandpo.plan.sweep import BASE_ENTRY
from bandpo.report.cli import LEADERBOARD_FILES, PUBLISHED_TABLES, build_report, main, provenance, publish
from bandpo.report.experiments import build_sections, entropy_shift_results, of_experiment, primary_results
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
from bandpo.report.load import (
    Run,
    load_bounds,
    load_eval_scores,
    load_run,
    load_run_metrics,
    load_run_summaries,
    load_runs,
    params_label,
)
from bandpo.report.page import leaderboard_html
from bandpo.report.stats import (
    ALL_TASKS,
    DEFAULT_BASELINE,
    MDE_TARGET,
    metric_label,
    minimum_detectable_difference,
    paired_comparison,
    paired_t_power,
    power_table,
    probability_of_improvement,
    rerun_agreement,
    score_stats,
    seeds_needed,
    t_interval,
)
from bandpo.report.steps import read_steps, steps_table, write_steps
from bandpo.report.tables import entry_labels, entry_order, leaderboard, leaderboard_markdown, per_task_table
from bandpo.report.training import run_stats, seed_bands
from bandpo.score.lm_eval_results import lm_eval_task_scores

__all__ = [
    "ALL_TASKS",
    "EXPERIMENT_FIGURES",
    "BASE_ENTRY",
    "DEFAULT_BASELINE",
    "FIGURES",
    "FIGURE_CAPTIONS",
    "LEADERBOARD_FILES",
    "MDE_TARGET",
    "PUBLISHED_TABLES",
    "SIMPLEX",
    "Run",
    "bounds_figure",
    "build_report",
    "build_sections",
    "clipfrac_data",
    "clipfrac_figure",
    "entry_labels",
    "entry_order",
    "entry_palette",
    "final_scores_figure",
    "leaderboard",
    "leaderboard_html",
    "leaderboard_markdown",
    "lm_eval_task_scores",
    "load_bounds",
    "load_eval_scores",
    "load_run",
    "load_run_metrics",
    "load_run_summaries",
    "load_runs",
    "main",
    "metric_label",
    "minimum_detectable_difference",
    "t_interval",
    "of_experiment",
    "paired_comparison",
    "paired_t_power",
    "params_label",
    "per_task_table",
    "placeholder_figure",
    "power_table",
    "primary_results",
    "entropy_shift_results",
    "probability_of_improvement",
    "provenance",
    "publish",
    "rerun_agreement",
    "run_stats",
    "save_figure",
    "score_stats",
    "seed_bands",
    "seeds_needed",
    "read_steps",
    "steps_table",
    "write_steps",
    "training_curves_figure",
]
