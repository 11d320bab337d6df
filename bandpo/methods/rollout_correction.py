"""verl 0.9.1's rollout-correction presets that act on the ratio, as methods: truncated importance sampling (token
and sequence level) and IcePop's two-sided masking, each its config dataclass beside the one function they share.
Written from verl's documented semantics (``RolloutCorrectionConfig``, docs/algo/rollout_corr_math.md) and the TIS
and IcePop posts; tests/unit/test_trl_rules.py checks each against verl's own ``bypass_mode`` policy loss on the same
tensors (loss and gradient).

    name       kind  what it does                                        verl's RolloutCorrectionConfig
    tis_token  loss  -sg(min(r_t, C)) A log pi                           rollout_is="token", threshold C = 2
    tis_seq    loss  -sg(min(prod_t r_t, C)) A log pi                    bypass_pg_is(): "sequence", C = 2
    icepop     loss  -sg(r_t 1[lo <= r_t <= hi]) A log pi                bypass_pg_token_icepop(): [0.5, 5]

with r = pi / pi_rollout, the ratio of the current policy to the one that sampled. These are verl's *bypass* mode
with the REINFORCE loss (``bypass_mode=True, loss_type="reinforce"``): the rollout policy is the old policy, and the
rule reshapes the importance weight of the same ratio every clip rule here acts on, which is what makes them
comparable with the clip rules. In verl's *decoupled* mode the same weights correct the old policy's recomputed
log-probs towards the sampler's under a PPO clip instead; they then act on pi_old / pi_rollout, a ratio that is 1
up to float rounding in the local trainer (its sampler is its rollout policy), so the decoupled presets are not
methods here.

The rollout policy's log-probs come through the loss call's ``token_inputs["rollout_log_prob"]``; without them the
old log-probs are the rollout policy's (verl's bypass mode sets old = rollout; the local trainer's sampler is its
rollout policy).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from bandpo.methods.config import MethodConfig, SurrogateConfig
from bandpo.methods.diagnostics import clip_diagnostics
from bandpo.methods.registry import register_loss
from bandpo.methods.surrogate import aggregate_loss, constant_bounds, global_batch_kwargs, prepare_inputs


@dataclass(frozen=True)
class TISConfig(MethodConfig):
    """Truncated importance sampling on the token ratio: weight min(r_t, threshold); threshold C = 2.0 (verl's
    ``rollout_is_threshold`` default and ``decoupled_token_is`` preset)."""

    level: ClassVar[str] = "token"
    label_fields = ("threshold",)
    shipped_by = 'verl 0.9.1: RolloutCorrectionConfig(rollout_is="token", bypass_mode=True, loss_type="reinforce")'
    parity_tests = ("tests/unit/test_trl_rules.py::test_rollout_correction_presets_equal_verls_bypass_mode",)

    threshold: float = 2.0

    def validate(self) -> None:
        self.require(self.threshold > 0.0, "threshold", "must be > 0")

    def bounds(self) -> tuple[float, float]:
        """The interval the rule's weight is kept in: [0, threshold] (truncated above)."""
        return 0.0, self.threshold

    def rollout_correction(self) -> dict[str, Any]:
        """verl's ``RolloutCorrectionConfig`` fields of this rule (bypass mode, REINFORCE)."""
        return {"rollout_is": self.level, "rollout_is_threshold": self.threshold, "rollout_rs": None,
                "bypass_mode": True, "loss_type": "reinforce"}  # fmt: skip


@dataclass(frozen=True)
class SeqTISConfig(TISConfig):
    """Truncated importance sampling on the sequence ratio prod_t r_t: weight min(prod_t r_t, threshold);
    threshold C = 2.0 (verl's ``bypass_pg_is`` preset)."""

    level: ClassVar[str] = "sequence"
    shipped_by = "verl 0.9.1: RolloutCorrectionConfig.bypass_pg_is()"


@dataclass(frozen=True)
class IcePopConfig(MethodConfig):
    """IcePop: the token weight r_t kept where threshold_lower <= r_t <= threshold, 0 elsewhere; defaults 0.5 / 5.0
    (verl's ``bypass_pg_token_icepop`` / ``decoupled_token_icepop`` presets)."""

    level: ClassVar[str] = "token"
    label_fields = ("threshold_lower", "threshold")
    shipped_by = "verl 0.9.1: RolloutCorrectionConfig.bypass_pg_token_icepop()"
    parity_tests = ("tests/unit/test_trl_rules.py::test_rollout_correction_presets_equal_verls_bypass_mode",)

    threshold_lower: float = 0.5
    threshold: float = 5.0

    def validate(self) -> None:
        self.require(self.threshold_lower > 0.0, "threshold_lower", "must be > 0")
        self.require(self.threshold >= self.threshold_lower, "threshold", "must be >= threshold_lower")

    def bounds(self) -> tuple[float, float]:
        """The interval the rule's weight is kept in: [threshold_lower, threshold] (masked outside)."""
        return self.threshold_lower, self.threshold

    def rollout_correction(self) -> dict[str, Any]:
        """verl's ``RolloutCorrectionConfig`` fields of this rule (bypass mode, REINFORCE)."""
        return {"rollout_is": self.level, "rollout_is_threshold": f"{self.threshold_lower}_{self.threshold}",
                "rollout_rs": None, "bypass_mode": True, "loss_type": "reinforce"}  # fmt: skip


def rollout_correction_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    params: TISConfig | IcePopConfig,
    settings: SurrogateConfig,
    *,
    rollout_is_weights: Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    token_inputs: Mapping[str, Tensor] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """verl's rollout correction in bypass mode: REINFORCE with a truncated (TIS) or masked (IcePop) importance weight.

    L = -A log pi * sg(w), w from r = pi / pi_rollout: token level w_t = exp(clamp(log r_t)), sequence level
    w = exp(clamp(sum_t log r_t)) on each of its tokens (clamp: +-log_ratio_clamp, verl's 20); then TIS truncates
    w at the threshold, IcePop zeroes it outside [threshold_lower, threshold]. pi_rollout: ``token_inputs
    ["rollout_log_prob"]``, else the old log-probs. The dual clip does not apply. Metrics: the ratio diagnostics of
    `clip_diagnostics` with the rule's interval as bounds (clipfrac_upper: w above it with A > 0, clipfrac_lower: w
    below it with A < 0, as for the clip rules) and ``is_weight_mean``, ``masked_frac`` (weights zeroed) and
    ``truncated_frac`` (weights truncated), over valid tokens.
    """
    old_log_prob, log_prob, advantages, rollout_is_weights = prepare_inputs(
        old_log_prob, log_prob, advantages, response_mask, settings, rollout_is_weights
    )
    valid = response_mask.bool()
    rollout = (token_inputs or {}).get("rollout_log_prob")
    behaviour = old_log_prob if rollout is None else torch.where(valid, rollout, 0.0)
    x = settings.log_ratio_clamp
    log_ratio = log_prob.detach() - behaviour  # log(pi / pi_rollout), 0 on padding
    if params.level == "sequence":
        log_w = torch.clamp(log_ratio.sum(dim=-1, keepdim=True), min=-x, max=x).expand_as(log_ratio)
    else:
        log_w = torch.clamp(log_ratio, min=-x, max=x)
    raw = torch.exp(log_w) * valid
    lo, hi = params.bounds()
    if isinstance(params, IcePopConfig):
        kept = (raw >= lo) & (raw <= hi)
        weight = torch.where(kept, raw, 0.0)
        masked, truncated = valid & ~kept, torch.zeros_like(valid)
    else:
        weight = raw.clamp(max=hi)
        masked, truncated = torch.zeros_like(valid), valid & (raw > hi)
    token_loss = -advantages * log_prob * weight
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    loss = aggregate_loss(token_loss, response_mask, settings.loss_agg_mode, **global_batch_kwargs(global_batch_info))
    lower, upper = constant_bounds(old_log_prob, response_mask, lo, hi)
    metrics = clip_diagnostics(old_log_prob, log_w, advantages, response_mask, lower, upper, None)
    n = valid.sum().clamp(min=1)
    dtype = metrics["clipfrac"].dtype
    metrics["is_weight_mean"] = (weight.sum() / n).to(dtype)
    metrics["masked_frac"] = (masked.sum() / n).to(dtype)
    metrics["truncated_frac"] = (truncated.sum() / n).to(dtype)
    return loss, metrics


@register_loss("tis_token", config=TISConfig)
def tis_token_loss(*args, **kwargs) -> tuple[Tensor, dict[str, Tensor]]:
    """Token TIS: -sg(min(r_t, C)) A log pi, r_t = pi / pi_rollout per token (`rollout_correction_loss`)."""
    return rollout_correction_loss(*args, **kwargs)


@register_loss("tis_seq", config=SeqTISConfig)
def tis_seq_loss(*args, **kwargs) -> tuple[Tensor, dict[str, Tensor]]:
    """Sequence TIS: -sg(min(prod_t r_t, C)) A log pi, on every token of the sequence (`rollout_correction_loss`)."""
    return rollout_correction_loss(*args, **kwargs)


@register_loss("icepop", config=IcePopConfig)
def icepop_loss(*args, **kwargs) -> tuple[Tensor, dict[str, Tensor]]:
    """IcePop: -sg(r_t 1[lo <= r_t <= hi]) A log pi, r_t = pi / pi_rollout per token (`rollout_correction_loss`)."""
    return rollout_correction_loss(*args, **kwargs)
