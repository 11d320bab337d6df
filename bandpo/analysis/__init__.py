"""The analysis: a profile's run outputs and scores read into frames, and every statistic the report shows,
computed from them. Pure pandas, numpy and scipy: no rendering, no method registry, no torch. Modules:

    load         the run outputs and the scores in lm-eval's results files (read as bandpo.score.evaluate reads
                 them: `bandpo.score.lm_eval_results`); `load_run` reads one run folder; the bounds table, the atlas
    scores       stats.csv: each score's interval, IQM, probability of improvement, the paired comparison with
                 the baseline and its power, a rerun's agreement (the statistics themselves: `bandpo.stats`)
    training     the training statistics of each run and entry (`run_stats`), the bands over seeds of the curves
    steps        steps.csv: the per-step training metrics, compact (`steps_table`, `write_steps`, `read_steps`)
    leaderboard  the wide leaderboard frame, the per-task frame, one profile's runs beside another's
    experiments  one section per (experiment, subset); each experiment's primary comparison and family of secondaries
    axis         the design axes: each run's outcomes and the rules fixed for the axis
"""

from bandpo.analysis.experiments import build_sections, entropy_shift_results, of_experiment, primary_results
from bandpo.analysis.leaderboard import entry_labels, entry_order, leaderboard, per_task_table
from bandpo.analysis.load import (
    Run,
    load_bounds,
    load_eval_scores,
    load_run,
    load_run_metrics,
    load_run_summaries,
    load_runs,
    params_label,
)
from bandpo.analysis.scores import (
    ALL_TASKS,
    DEFAULT_BASELINE,
    MDE_TARGET,
    metric_label,
    paired_comparison,
    power_table,
    rerun_agreement,
    score_stats,
)
from bandpo.analysis.steps import read_steps, steps_table, write_steps
from bandpo.analysis.training import run_stats, seed_bands

__all__ = [
    "ALL_TASKS",
    "DEFAULT_BASELINE",
    "MDE_TARGET",
    "Run",
    "build_sections",
    "entropy_shift_results",
    "entry_labels",
    "entry_order",
    "leaderboard",
    "load_bounds",
    "load_eval_scores",
    "load_run",
    "load_run_metrics",
    "load_run_summaries",
    "load_runs",
    "metric_label",
    "of_experiment",
    "paired_comparison",
    "params_label",
    "per_task_table",
    "power_table",
    "primary_results",
    "read_steps",
    "rerun_agreement",
    "run_stats",
    "score_stats",
    "seed_bands",
    "steps_table",
    "write_steps",
]
