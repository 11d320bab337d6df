"""The built-in whole-loss methods (not a clip interval around r): CISPO and GSPO."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from bandpo.methods.bounds import constant_bounds
from bandpo.methods.config import SurrogateConfig
from bandpo.methods.diagnostics import clip_diagnostics
from bandpo.methods.params import CISPOConfig, GSPOConfig
from bandpo.methods.registry import register_loss
from bandpo.methods.surrogate import _global_info, aggregate_loss, prepare_inputs


@register_loss("cispo", config=CISPOConfig)
def cispo_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    params: CISPOConfig,
    settings: SurrogateConfig,
    *,
    rollout_is_weights: Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO: token-level REINFORCE with a clipped, stop-gradient importance weight.

    L = -sg(clip(r, 1 - eps_low, 1 + eps_high)) * A * log pi(a|s): every token keeps a gradient (the weight is
    clipped, the token is not dropped). The dual clip does not apply. Loss and gradient equal verl's registered
    ``cispo`` bitwise (tests/unit/test_verl_plugin.py); its clipfrac counts a clipped weight on the side the advantage
    pushes (as for every method here), where verl's pg_clipfrac counts every clipped weight.
    """
    old_log_prob, log_prob, advantages, rollout_is_weights = prepare_inputs(
        old_log_prob, log_prob, advantages, response_mask, settings, rollout_is_weights
    )
    x = settings.log_ratio_clamp
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-x, max=x).detach()
    lower, upper = constant_bounds(old_log_prob, response_mask, 1.0 - params.eps_low, 1.0 + params.eps_high)
    weight = torch.clamp(torch.exp(log_ratio), min=lower, max=upper)  # sg(clip(r)): log_ratio is detached
    token_loss = -weight * advantages * log_prob
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    loss = aggregate_loss(token_loss, response_mask, settings.loss_agg_mode, **_global_info(global_batch_info))
    return loss, clip_diagnostics(old_log_prob, log_ratio, advantages, response_mask, lower, upper, None)


@register_loss("gspo", config=GSPOConfig)
def gspo_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    params: GSPOConfig,
    settings: SurrogateConfig,
    *,
    rollout_is_weights: Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO: PPO clip on the sequence ratio s_i = exp(mean_t log r_it) instead of the token ratio.

    Token form (same gradient for a per-sequence advantage): log s_it = sg[log s_i] + log pi_it - sg[log pi_it],
    L_it = max(-A s_it, -A clip(s_it, 1 - eps_low, 1 + eps_high)). The dual clip does not apply; diagnostics
    report the sequence ratio on each of its tokens. Equals verl's registered ``gspo`` bitwise while the sequence
    log-ratio stays below 10: verl caps log s_it at 10, this loss clamps it at +-log_ratio_clamp (20).
    """
    old_log_prob, log_prob, advantages, rollout_is_weights = prepare_inputs(
        old_log_prob, log_prob, advantages, response_mask, settings, rollout_is_weights
    )
    x = settings.log_ratio_clamp
    n_tokens = response_mask.sum(dim=-1).clamp(min=1)
    seq_log_ratio = (log_prob - old_log_prob).sum(dim=-1) / n_tokens  # padding is 0 after _prepare
    seq_log_ratio = torch.clamp(seq_log_ratio, min=-x, max=x).detach().unsqueeze(-1)
    log_s = log_prob - log_prob.detach() + seq_log_ratio  # value: exactly log s_i; gradient: d log pi_it
    s = torch.exp(log_s)
    lower, upper = constant_bounds(old_log_prob, response_mask, 1.0 - params.eps_low, 1.0 + params.eps_high)
    token_loss = torch.maximum(-advantages * s, -advantages * torch.clamp(s, min=lower, max=upper))
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    loss = aggregate_loss(token_loss, response_mask, settings.loss_agg_mode, **_global_info(global_batch_info))
    seq_ratio_per_token = seq_log_ratio.expand_as(log_prob)
    return loss, clip_diagnostics(old_log_prob, seq_ratio_per_token, advantages, response_mask, lower, upper, None)
