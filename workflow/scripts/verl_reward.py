"""verl reward function (``reward.custom_reward_function.path``): the paper's +1 / -1 outcome reward, graded by
the suite's one grader (`bandpo.grader.grade`, also used by lm-eval scoring), so training reward and evaluation
agree on what a correct answer is.

verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info)`` per response.
"""

from __future__ import annotations

from typing import Any


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any):
    from bandpo.grader import grade

    correct = grade(solution_str, ground_truth) > 0
    # "score" is the reward; "acc" feeds verl's accuracy metrics and DAPO's group filter (metric: acc)
    return {"score": 1.0 if correct else -1.0, "acc": 1.0 if correct else 0.0}
