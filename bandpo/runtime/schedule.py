"""The learning-rate schedule of the suite, one function for the tiny models' pretraining (`bandpo.models.tiny`)
and the trainer's RL steps (`bandpo.train.loop`)."""

from __future__ import annotations


def lr_schedule(step: int, peak: float, end: float, *, warmup_steps: int = 0, decay_start: int = 0,
                decay_steps: int = 0) -> float:  # fmt: skip
    """The learning rate of step ``step`` (0-based), the one schedule of the suite (pretraining and RL):
    linear warmup to ``peak`` over ``warmup_steps``, ``peak`` until ``decay_start``, then linear to ``end``,
    reached ``decay_steps`` steps later and kept (``decay_steps`` 0: no decay)."""
    if step < warmup_steps:
        return peak * ((step + 1) / warmup_steps)
    if step < decay_start or decay_steps <= 0:
        return peak
    span = max(1, decay_steps)
    return peak + (end - peak) * min(step - decay_start, span) / span
