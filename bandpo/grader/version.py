"""The grader's provenance: its name and version (bandpo version, rules revision and math-verify version)."""

from __future__ import annotations

from importlib import metadata

from bandpo import __version__ as BANDPO_VERSION

# Bump when extraction, normalisation, pre-check or timeout rules change in a way that can change a score.
RULES_REVISION = 4  # 2: sqrt/pi fast path, strict-answer-line mode; 3: a timed-out item is graded again (30x budget)
# (the math-dapo mode came with revision 3 unchanged: no verdict of the older modes changed; the mode is in the id)
# (math-dapo-paper and math-boxed came with revision 4 unchanged, for the same reason)
# 4: math-verify judges each pair from the same sympy state (bandpo.grader.judge, issue #59). Under 3 the verdict of an
# answer on which sympy's assumption rules disagree (e.g. 0/(x*E*d*0) against 0) was a draw per worker process; 4
# gives each such answer one verdict, which may differ from the draw a run under 3 recorded. Every other verdict is
# unchanged (all 222 distinct pairs math-verify judged in tiny-s/grpo@separation/seed19 kept theirs).
# (the budgets in CPU seconds of the judging worker instead of wall seconds, issue #72, came with revision 4
# unchanged: on a machine that leaves the worker its CPU no verdict changes, and no published run graded an item
# again or timed one out; under load the CPU budget keeps the verdict the wall-clock one could lose)


def dist_version(name: str) -> str:
    """Installed version of a distribution, ``"missing"`` when it is not installed."""
    try:
        return metadata.version(name)
    except Exception:
        return "missing"


MATH_VERIFY_VERSION = dist_version("math-verify")
GRADER_NAME = "bandpo.grader"
GRADER_VERSION = f"{BANDPO_VERSION}.r{RULES_REVISION}+math-verify-{MATH_VERIFY_VERSION}"
