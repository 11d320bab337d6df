"""A method defined outside ``bandpo/``: the worked example of the workflow's ``method_modules``.

Named in a config as ``method_modules: [tests/example_method.py]`` (a path relative to the repository root), it is
imported by the DAG's config check and by every job (``BANDPO_METHOD_MODULES``); an entry
``{id: half_clip, method: half_clip, params: {eps: 0.1}}`` then trains, is scored and reported like a built-in
method (tests/workflow/test_workflow.py runs it through the smoke DAG).
"""

from __future__ import annotations

from dataclasses import dataclass

from bandpo.methods import MethodConfig, constant_bounds, register_bounds


@dataclass(frozen=True)
class HalfClipConfig(MethodConfig):
    """eps: half-width of the fixed interval (default 0.1)."""

    label_fields = ("eps",)  # leaderboards show eps=... even at its default
    eps: float = 0.1

    def validate(self) -> None:
        self.require(0.0 < self.eps < 1.0, "eps", "must be in (0, 1)")


@register_bounds("half_clip", config=HalfClipConfig)
def half_clip_bounds(old_log_prob, response_mask, params):
    """Fixed clip [1 - eps, 1 + eps]."""
    return constant_bounds(old_log_prob, response_mask, 1.0 - params.eps, 1.0 + params.eps)
