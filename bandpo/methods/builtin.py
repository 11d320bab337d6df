"""The built-in methods, each read in one place as a method of your own module is (``tests/example_method.py``):
its parameters (a frozen `MethodConfig` dataclass whose defaults are the paper's settings) beside its registered
function.

    grpo, clip_higher  bounds  fixed clip [1 - eps_low, 1 + eps_high]             `fixed_clip_bounds`
    dcpo               bounds  dynamic adaptive clipping                          `dcpo_bounds`
    bandpo             bounds  the Band operator's trust region                   `bandpo_bounds`
    bandpo_upper       bounds  Band's upper bound, GRPO's fixed lower bound       `bandpo_upper_bounds`
    cispo              loss    clipped stop-gradient weight (token level)         `cispo_loss`
    gspo               loss    PPO clip on the sequence ratio                     `gspo_loss`

The policy losses that verl ships (dppo_tv, clip_cov, ...) are methods too, registered by `bandpo.verl.losses`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bandpo.methods.band import band_bounds, list_divergences
from bandpo.methods.config import MethodConfig, SurrogateConfig
from bandpo.methods.diagnostics import clip_diagnostics
from bandpo.methods.registry import register_bounds, register_loss
from bandpo.methods.surrogate import (
    aggregate_loss,
    constant_bounds,
    global_batch_kwargs,
    on_valid_tokens,
    prepare_inputs,
)


def _check_eps(cfg: MethodConfig, low: str = "eps_low", high: str = "eps_high") -> None:
    """A fixed interval [1 - low, 1 + high]: low in (0, 1], high > 0."""
    cfg.require(0.0 < getattr(cfg, low) <= 1.0, low, "must be in (0, 1] (the lower bound 1 - eps_low is >= 0)")
    cfg.require(getattr(cfg, high) > 0.0, high, "must be > 0")


# ----------------------------------------------------------------------------------------------------------------
# grpo, clip_higher: the fixed clip


@dataclass(frozen=True)
class GRPOConfig(MethodConfig):
    """Canonical PPO/GRPO clip [1 - eps_low, 1 + eps_high]; defaults 0.2 / 0.2."""

    label_fields = ("eps_low", "eps_high")
    shipped_by = 'verl 0.9.1: loss_mode="vanilla"; TRL 1.16.0: GRPOConfig(epsilon=0.2)'
    parity_tests = ("tests/unit/test_methods.py::test_surrogate_equals_verl_vanilla_exactly",)

    eps_low: float = 0.2
    eps_high: float = 0.2

    def validate(self) -> None:
        _check_eps(self)


@dataclass(frozen=True)
class ClipHigherConfig(GRPOConfig):
    """Clip-Higher (DAPO): [1 - eps_low, 1 + eps_high] with defaults 0.2 / 0.28."""

    shipped_by = 'verl 0.9.1: loss_mode="vanilla", clip_ratio_high=0.28; TRL 1.16.0: GRPOConfig(epsilon_high=0.28)'

    eps_low: float = 0.2
    eps_high: float = 0.28


@register_bounds("clip_higher", config=ClipHigherConfig)
@register_bounds("grpo", config=GRPOConfig)
def fixed_clip_bounds(old_log_prob: Tensor, response_mask: Tensor, params: GRPOConfig):
    """Fixed clip: r in [1 - eps_low, 1 + eps_high] (GRPO 0.2 / 0.2, Clip-Higher 0.2 / 0.28)."""
    return constant_bounds(old_log_prob, response_mask, 1.0 - params.eps_low, 1.0 + params.eps_high)


# ----------------------------------------------------------------------------------------------------------------
# dcpo


@dataclass(frozen=True)
class DCPOConfig(MethodConfig):
    """DCPO dynamic adaptive clipping; defaults eps_low 0.16, eps_high 0.20, r_hi capped at 10 (None: no cap)."""

    label_fields = ("eps_low", "eps_high")

    eps_low: float = 0.16
    eps_high: float = 0.20
    cap: float | None = 10.0

    def validate(self) -> None:
        _check_eps(self)
        self.require(self.cap is None or self.cap > 1.0, "cap", "must be > 1 or None")


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


# ----------------------------------------------------------------------------------------------------------------
# bandpo, bandpo_upper: the Band operator (bandpo.methods.band)


def _check_band(cfg: MethodConfig) -> None:
    """The Band operator's parameters: divergence, delta, cap."""
    divs = list_divergences()
    cfg.require(cfg.divergence in divs, "divergence", f"is not registered; valid: {', '.join(divs)}")
    cfg.require(cfg.delta > 0.0, "delta", "must be > 0")
    cfg.require(cfg.cap is None or cfg.cap > 1.0, "cap", "must be > 1 or None")


@dataclass(frozen=True)
class BandPOConfig(MethodConfig):
    """BandPO: the Band operator's exact trust-region bounds.

    Attributes:
        divergence: a registered divergence (`bandpo.methods.band.list_divergences()`): kl (paper), tv, chi2, or your
        own.
        delta: trust-region radius (paper: 0.05).
        cap: r_hi is capped at this value (paper: 10); None disables the cap.
        relax: take the union with [1 - relax_eps_low, 1 + relax_eps_high] (paper: off; reported to hurt).
        relax_eps_low, relax_eps_high: the fixed interval of the relaxation, default 0.2 / 0.28: the paper's
            relaxed runs union the Band interval with the Clip-Higher interval (clip_ratio_high 0.28).
    """

    label_fields = ("divergence", "delta")

    divergence: str = "kl"
    delta: float = 0.05
    cap: float | None = 10.0
    relax: bool = False
    relax_eps_low: float = 0.2
    relax_eps_high: float = 0.28

    def inactive_fields(self) -> tuple[str, ...]:
        """The relaxation's interval does nothing while ``relax`` is off."""
        return () if self.relax else ("relax_eps_low", "relax_eps_high")

    def validate(self) -> None:
        _check_band(self)
        _check_eps(self, "relax_eps_low", "relax_eps_high")


@dataclass(frozen=True)
class BandPOUpperConfig(MethodConfig):
    """BandPO's upper bound only: Band's r_hi (the same divergence / delta / cap as ``bandpo``) with the fixed lower
    bound 1 - eps_low. It isolates the room the Band operator gives rare tokens to grow from its wider clip-low.

    Attributes:
        divergence, delta, cap: as ``bandpo`` (defaults kl, 0.05, 10).
        eps_low: the fixed lower bound is 1 - eps_low (default 0.2, GRPO's and Clip-Higher's).
    """

    label_fields = ("divergence", "delta")

    divergence: str = "kl"
    delta: float = 0.05
    cap: float | None = 10.0
    eps_low: float = 0.2

    def validate(self) -> None:
        _check_band(self)
        self.require(0.0 < self.eps_low <= 1.0, "eps_low", "must be in (0, 1] (the lower bound 1 - eps_low is >= 0)")


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


# ----------------------------------------------------------------------------------------------------------------
# cispo: a whole loss (a clipped stop-gradient weight, not a clip interval around r)


@dataclass(frozen=True)
class CISPOConfig(MethodConfig):
    """CISPO (MiniMax-M1) weight clip [1 - eps_low, 1 + eps_high].

    The BandPO paper does not run CISPO. Defaults: eps_low = 1.0, i.e. no lower bound on the weight, as MiniMax-M1
    describes; eps_high = 0.28, the Clip-Higher value (MiniMax-M1 tunes it per setting).
    """

    label_fields = ("eps_low", "eps_high")
    shipped_by = 'verl 0.9.1: loss_mode="cispo"; TRL 1.16.0: GRPOConfig(loss_type="cispo", epsilon_high=1 + eps_high)'
    parity_tests = ("tests/unit/test_trl_rules.py::test_the_registrys_earlier_rules_equal_trls_too",)

    eps_low: float = 1.0
    eps_high: float = 0.28

    def validate(self) -> None:
        _check_eps(self)


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
    token_inputs: Mapping[str, Tensor] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO: token-level REINFORCE with a clipped, stop-gradient importance weight.

    L = -sg(clip(r, 1 - eps_low, 1 + eps_high)) * A * log pi(a|s): every token keeps a gradient (the weight is
    clipped, the token is not dropped). The dual clip does not apply. Loss and gradient equal verl's registered
    ``cispo`` bitwise (tests/unit/test_verl_plugin.py); its clipfrac counts a clipped weight on the side the advantage
    pushes (as for every method here), where verl's pg_clipfrac counts every clipped weight. Reads no
    ``token_inputs``.
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
    loss = aggregate_loss(token_loss, response_mask, settings.loss_agg_mode, **global_batch_kwargs(global_batch_info))
    return loss, clip_diagnostics(old_log_prob, log_ratio, advantages, response_mask, lower, upper, None)


# ----------------------------------------------------------------------------------------------------------------
# gspo: a whole loss (the PPO clip on the sequence ratio)


@dataclass(frozen=True)
class GSPOConfig(MethodConfig):
    """GSPO clip on the length-normalised sequence ratio; defaults 3e-4 / 4e-4 (the GSPO paper's)."""

    label_fields = ("eps_low", "eps_high")
    shipped_by = 'verl 0.9.1: loss_mode="gspo"; TRL 1.16.0: GRPOConfig(importance_sampling_level="sequence")'
    parity_tests = ("tests/unit/test_trl_rules.py::test_the_registrys_earlier_rules_equal_trls_too",)

    eps_low: float = 3e-4
    eps_high: float = 4e-4

    def validate(self) -> None:
        _check_eps(self)


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
    token_inputs: Mapping[str, Tensor] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO: PPO clip on the sequence ratio s_i = exp(mean_t log r_it) instead of the token ratio.

    Token form (same gradient for a per-sequence advantage): log s_it = sg[log s_i] + log pi_it - sg[log pi_it],
    L_it = max(-A s_it, -A clip(s_it, 1 - eps_low, 1 + eps_high)). The dual clip does not apply; diagnostics
    report the sequence ratio on each of its tokens. Equals verl's registered ``gspo`` bitwise while the sequence
    log-ratio stays below 10: verl caps log s_it at 10, this loss clamps it at +-log_ratio_clamp (20). Reads no
    ``token_inputs``.
    """
    old_log_prob, log_prob, advantages, rollout_is_weights = prepare_inputs(
        old_log_prob, log_prob, advantages, response_mask, settings, rollout_is_weights
    )
    x = settings.log_ratio_clamp
    n_tokens = response_mask.sum(dim=-1).clamp(min=1)
    seq_log_ratio = (log_prob - old_log_prob).sum(dim=-1) / n_tokens  # padding is 0 after prepare_inputs
    seq_log_ratio = torch.clamp(seq_log_ratio, min=-x, max=x).detach().unsqueeze(-1)
    log_s = log_prob - log_prob.detach() + seq_log_ratio  # value: exactly log s_i; gradient: d log pi_it
    s = torch.exp(log_s)
    lower, upper = constant_bounds(old_log_prob, response_mask, 1.0 - params.eps_low, 1.0 + params.eps_high)
    token_loss = torch.maximum(-advantages * s, -advantages * torch.clamp(s, min=lower, max=upper))
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    loss = aggregate_loss(token_loss, response_mask, settings.loss_agg_mode, **global_batch_kwargs(global_batch_info))
    seq_ratio_per_token = seq_log_ratio.expand_as(log_prob)
    return loss, clip_diagnostics(old_log_prob, seq_ratio_per_token, advantages, response_mask, lower, upper, None)
