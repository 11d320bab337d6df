"""Reading lm-eval's aggregated results file: the one reader of its scores, shared by evaluation
(`bandpo.score.evaluate`,
which writes the summaries) and the report (`bandpo.analysis.load`, which reads every score back from the same file).

A leaf module: the standard library only, so that lm-eval's hooks do not import the report's pandas and Jinja2.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FILTER_NAME = "all_k"  # the task YAMLs' filter_list name: metric keys in lm-eval's results read "mean@8,all_k"


def lm_eval_task_scores(
    results: Mapping[str, Any], task: str, filter_name: str = FILTER_NAME
) -> tuple[dict[str, float], dict[str, float | None]]:
    """(values, stderr) of one task from lm-eval's aggregated results (``results[task]["<metric>,<filter>"]``):
    numeric values by metric name; stderr by metric name, None where lm-eval wrote none ("N/A"). Both are empty
    when the task is not in the results."""
    values: dict[str, float] = {}
    stderr: dict[str, float | None] = {}
    suffix = f",{filter_name}"
    for key, value in ((results.get("results") or {}).get(task) or {}).items():
        if not key.endswith(suffix):
            continue
        name = key[: -len(suffix)]
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if name.endswith("_stderr"):
            stderr[name[: -len("_stderr")]] = None if number is None else float(number)
        elif number is not None:
            values[name] = float(number)
    return values, stderr
