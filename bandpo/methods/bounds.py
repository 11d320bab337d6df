"""Ratio-bounds helpers (`on_valid_tokens`, `constant_bounds`) and the built-in bounds methods: GRPO and
Clip-Higher (fixed clip), DCPO, BandPO and its upper bound alone (bandpo_upper)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from bandpo.methods.band import band_bounds
from bandpo.methods.params import BandPOConfig, BandPOUpperConfig, ClipHigherConfig, DCPOConfig, GRPOConfig
from bandpo.methods.registry import register_bounds


def on_valid_tokens(fn: Callable[[Tensor], tuple[Tensor, Tensor]], old_log_prob: Tensor, response_mask: Tensor):
    """Evaluate an elementwise ``fn(log_p_valid) -> (lower, upper)`` on the valid tokens only.

    The valid old log-probs are gathered into one flat tensor (one host sync for the count), ``fn`` runs on them,
    and the results are scattered back; padding gets the neutral interval [1, 1].
    """
    valid = response_mask.bool()
    lower = torch.ones_like(old_log_prob)
    upper = torch.ones_like(old_log_prob)
    lo, hi = fn(old_log_prob.detach()[valid])
    lower[valid] = lo.to(lower.dtype)
    upper[valid] = hi.to(upper.dtype)
    return lower, upper


def constant_bounds(old_log_prob: Tensor, response_mask: Tensor, lower: float, upper: float):
    """The fixed interval [lower, upper] on valid tokens, [1, 1] on padding (no gather needed)."""
    valid = response_mask.bool()
    one = torch.ones_like(old_log_prob)
    return torch.where(valid, one * lower, one), torch.where(valid, one * upper, one)


@register_bounds("clip_higher", config=ClipHigherConfig)
@register_bounds("grpo", config=GRPOConfig)
def fixed_clip_bounds(old_log_prob: Tensor, response_mask: Tensor, params: GRPOConfig):
    """Fixed clip: r in [1 - eps_low, 1 + eps_high] (GRPO 0.2 / 0.2, Clip-Higher 0.2 / 0.28)."""
    return constant_bounds(old_log_prob, response_mask, 1.0 - params.eps_low, 1.0 + params.eps_high)


@register_bounds("dcpo", config=DCPOConfig)
def dcpo_bounds(old_log_prob: Tensor, response_mask: Tensor, params: DCPOConfig):
    """DCPO dynamic adaptive clipping: bounds widen as the old probability q shrinks.

    r_lo = 1/2 + 1/2 sqrt(max(1 - 4 eps_low / q, 0)),  r_hi = min(1/2 + 1/2 sqrt(1 + 4 eps_high / q), cap),
    with q = max(p, 1e-12) (and p <= 1).
    """

    def solve(log_p: Tensor):
        q = log_p.double().exp().clamp(1e-12, 1.0)
        lower = 0.5 + 0.5 * torch.sqrt(torch.clamp(1.0 - 4.0 * params.eps_low / q, min=0.0))
        upper = 0.5 + 0.5 * torch.sqrt(1.0 + 4.0 * params.eps_high / q)
        if params.cap is not None:
            upper = upper.clamp(max=params.cap)
        return lower, upper

    return on_valid_tokens(solve, old_log_prob, response_mask)


def _capped_band(log_p: Tensor, params: BandPOConfig | BandPOUpperConfig) -> tuple[Tensor, Tensor]:
    """Band's (r_lo, r_hi) for ``params``' divergence and delta, r_hi capped at ``params.cap`` when set."""
    lower, upper = band_bounds(log_p, params.divergence, params.delta)
    if params.cap is not None:
        upper = upper.clamp(max=params.cap)  # also maps r_hi = inf (p = 0) to the cap
    return lower, upper


@register_bounds("bandpo", config=BandPOConfig)
def bandpo_bounds(old_log_prob: Tensor, response_mask: Tensor, params: BandPOConfig):
    """BandPO: the f-divergence trust region {g_f(p, r) <= delta} as per-token bounds, r_hi capped, optional relax."""

    def solve(log_p: Tensor):
        lower, upper = _capped_band(log_p, params)
        if params.relax:  # union with the fixed interval: [min(r_lo, 1 - eps_low), max(r_hi, 1 + eps_high)]
            lower = lower.clamp(max=1.0 - params.relax_eps_low)
            upper = upper.clamp(min=1.0 + params.relax_eps_high)
        return lower, upper

    return on_valid_tokens(solve, old_log_prob, response_mask)


@register_bounds("bandpo_upper", config=BandPOUpperConfig)
def bandpo_upper_bounds(old_log_prob: Tensor, response_mask: Tensor, params: BandPOUpperConfig):
    """BandPO's upper bound only: r in [1 - eps_low, Band's r_hi] (capped), the fixed clip-low of GRPO."""

    def solve(log_p: Tensor):
        _, upper = _capped_band(log_p, params)
        return torch.full_like(upper, 1.0 - params.eps_low), upper

    return on_valid_tokens(solve, old_log_prob, response_mask)
