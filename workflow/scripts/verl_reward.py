"""verl reward function (``reward.custom_reward_function.path``): the paper's +1 / -1 outcome reward, graded by
the suite's one grader (`bandpo.grader`, also used by lm-eval scoring), so training reward and evaluation agree on
what a correct answer is.

verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)`` per response.
The grading mode (``math-dapo-paper``, the paper's rule: the ``Answer:`` line only, as the authors' verl fork;
``math-dapo``, verl 0.9.1's ``math_dapo.compute_score`` with its ``\\boxed{}`` fallback, both re-implemented in
`bandpo.grader.dapo`; ``math-boxed``, verl's ``\\boxed{}`` MATH rule; or the more lenient ``strict-answer-line`` /
``lenient``, which accept equivalent answers) comes from ``grader_modes[data_source]`` when the row's data set is
there (``reward.custom_reward_function.reward_kwargs.grader_modes``: the validation sets graded by the rule their
source used), else from ``reward_kwargs.grader_mode`` when set, else from the environment (``BANDPO_GRADER_MODE``,
passed to Ray workers through ``runtime_env``), else the grader's default (``lenient``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    grader_mode: str | None = None,
    grader_modes: Mapping[str, str] | None = None,
    **kwargs: Any,
):
    from bandpo.grader import grade_detailed

    mode = (grader_modes or {}).get(data_source, grader_mode)
    result = grade_detailed(solution_str, ground_truth, mode=mode)
    correct = result.score > 0
    # our 1 / 0 -> verl's +1 / -1 (math-dapo: the same reward as verl's math_dapo.compute_score)
    # "score" is the reward; "acc" feeds verl's accuracy metrics and DAPO's group filter (metric: acc); "pred", the
    # compared answer ("" for none), is what verl's validation metrics vote on (maj@k)
    return {"score": 1.0 if correct else -1.0, "acc": 1.0 if correct else 0.0, "pred": result.pred or ""}
