"""The rules a TRL user picks in ``GRPOConfig`` (TRL 1.16.0) that act on the ratio or on the token set, as methods,
each its config dataclass beside its registered function (as `bandpo.methods.builtin`). Written from the papers and
TRL's documented semantics; tests/unit/test_trl_rules.py checks each against TRL's own ``GRPOTrainer._compute_loss``
on the same tensors (loss and gradient).

    name            kind  what it does                                                  TRL's GRPOConfig
    luspo           loss  GSPO's sequence ratio, each sequence's loss scaled by its     loss_type="luspo",
                          length (LUSPO, arXiv 2602.05261)                              importance_sampling_level=
                                                                                        "sequence"
    vespo           loss  -sg(phi(w)) A log pi: a smooth asymmetric Gamma weight phi    loss_type="vespo"
                          of the sequence ratio w instead of a clip (VESPO,
                          arXiv 2602.10693)
    two_sided_clip  loss  the PPO clip, and r capped at delta where A < 0               delta
                          (INTELLECT-2, arXiv 2505.07291)
    top_entropy     loss  the PPO clip on the top-rho entropy tokens only: the          top_entropy_quantile
                          "80/20" rule (arXiv 2506.01939)
    offpolicy_mask  loss  the PPO clip without the A < 0 sequences whose KL to the      off_policy_mask_threshold
                          sampler passed delta (DeepSeek-V3.2, arXiv 2512.02556)

TRL's other loss types that are not a ratio rule (grpo, bnpo, dr_grpo, dapo) only aggregate: they are the
protocol's ``loss_agg_mode`` (`TRL_LOSS_AGGREGATION`), and so is the aggregation of the rules above: every loss
here aggregates with the protocol's mode like any other method. TRL fixes it per loss type instead: its luspo
equals ``luspo`` here under seq-mean-token-mean (the protocol's default: the length scaling times the per-sequence
token mean is TRL's per-sequence token sum), its vespo ``vespo`` under token-mean (TRL's dapo normalisation), the
modifiers (delta, top_entropy_quantile, off_policy_mask_threshold) the PPO clip under whichever of the four modes
TRL's loss_type selects. TRL has no dual clip: the PPO-clip rules here keep the protocol's (``dual_clip_c``; set it
to null to train them exactly as TRL does). TRL's ``importance_sampling_level`` is a property of the method here
(GSPO and LUSPO are sequence-level, VESPO's weight is; the token rules are token-level), not a protocol setting.

Two inputs beyond the four every loss gets come through the loss call's ``token_inputs``
(`bandpo.methods.surrogate.TOKEN_INPUTS`): ``top_entropy`` requires the current policy's token entropy (so it runs
in the local trainer, whose update pass computes it, not in verl, whose policy loss receives none);
``offpolicy_mask`` and ``vespo`` read the sampler's log-probs when given and fall back to the old log-probs, as TRL
does without vLLM (the local trainer's sampler is its rollout policy: the same numbers).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bandpo.methods.builtin import GSPOConfig, gspo_loss
from bandpo.methods.config import MethodConfig, SurrogateConfig
from bandpo.methods.diagnostics import clip_diagnostics
from bandpo.methods.registry import register_loss
from bandpo.methods.surrogate import (
    aggregate_loss,
    constant_bounds,
    global_batch_kwargs,
    ppo_surrogate,
    prepare_inputs,
)

TRL_LOSS_AGGREGATION: dict[str, str] = {
    "grpo": "seq-mean-token-mean",
    "bnpo": "token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
    "dapo": "token-mean",
}
"""TRL 1.16.0's aggregating loss types -> the protocol's ``loss_agg_mode`` that computes the same scalar.

grpo     mean over sequences of each sequence's token mean
bnpo     token sum / the micro-batch's valid tokens
dr_grpo  token sum / (sequences x max_completion_length): seq-mean-token-sum-norm with ``loss_scale_factor`` =
         max_new_tokens (the local trainer passes it, verl gets it as ``actor.loss_scale_factor``)
dapo     token sum / the valid tokens of the whole accumulated batch: verl's token-mean with the global token count
         (``global_batch_info``), the local trainer's token-mean (one micro-batch per update)

TRL's sapo and cispo aggregate as its grpo and dapo; its luspo and vespo: see this module's docstring. The
scalars agree on batches whose every sequence holds a token (a TRL completion always does: its EOS); a fully
padded sequence counts in TRL's mean over sequences, and not here (verl's convention).
"""

LOG_MIN_WEIGHT = math.log(1e-8)
"""VESPO's floor of a log importance weight (TRL's ``get_gamma_weights``: weights below 1e-8 are 1e-8)."""


def _check_eps(cfg: MethodConfig) -> None:
    cfg.require(0.0 < cfg.eps_low <= 1.0, "eps_low", "must be in (0, 1] (the lower bound 1 - eps_low is >= 0)")
    cfg.require(cfg.eps_high > 0.0, "eps_high", "must be > 0")


def _masked_frac(dropped: Tensor, response_mask: Tensor) -> Tensor:
    """Share of the valid tokens in ``dropped`` (0-d; 0 without valid tokens)."""
    valid = response_mask.bool()
    return (dropped & valid).sum().to(torch.float32) / valid.sum().clamp(min=1)


def _times(weights: Tensor, rollout_is_weights: Tensor | None) -> Tensor:
    """A rule's per-token factor, times the call's rollout weights when there are any."""
    return weights if rollout_is_weights is None else weights * rollout_is_weights


# ----------------------------------------------------------------------------------------------------------------
# luspo: GSPO, each sequence's loss scaled by its length


@dataclass(frozen=True)
class LUSPOConfig(GSPOConfig):
    """LUSPO: GSPO's clip on the sequence ratio, defaults 3e-4 / 4e-4 (GSPO's: LUSPO changes GSPO's length
    weighting, not its clip; TRL's luspo takes its epsilon / epsilon_high)."""

    shipped_by = 'TRL 1.16.0: GRPOConfig(loss_type="luspo", importance_sampling_level="sequence")'
    parity_tests = ("tests/unit/test_trl_rules.py::test_luspo_equals_trls_luspo",)


@register_loss("luspo", config=LUSPOConfig)
def luspo_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    params: LUSPOConfig,
    settings: SurrogateConfig,
    *,
    rollout_is_weights: Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    token_inputs: Mapping[str, Tensor] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """LUSPO: GSPO's loss on the sequence ratio, each sequence's loss scaled by its length |o_i|.

    L_it = |o_i| * GSPO's L_it (`gspo_loss`); under seq-mean-token-mean (the protocol's default) the loss is
    mean_i |o_i| L_i, TRL's ``loss_type="luspo"`` with ``importance_sampling_level="sequence"``: a long sequence
    weighs by its length, as in a token-level loss, where GSPO's mean over sequences weighs every sequence alike.
    Diagnostics: `gspo_loss`'s. Reads no ``token_inputs``.
    """
    lengths = response_mask.sum(dim=-1, keepdim=True).to(log_prob.dtype).expand_as(log_prob)
    return gspo_loss(old_log_prob, log_prob, advantages, response_mask, params, settings,
                     rollout_is_weights=_times(lengths, rollout_is_weights),
                     global_batch_info=global_batch_info)  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# vespo: a Gamma weight of the sequence ratio


@dataclass(frozen=True)
class VESPOConfig(MethodConfig):
    """VESPO's Gamma weight phi(w) = exp(lambda) w^k exp(-lambda w) (phi(1) = 1), k and lambda by the sign of A.

    Attributes:
        k_pos, lambda_pos: for A >= 0 (defaults 2.0 / 3.0, TRL's vespo_k_pos / vespo_lambda_pos): k sets how fast a
            weight below 1 is damped, lambda how fast one above 1 is.
        k_neg, lambda_neg: for A < 0 (defaults 3.0 / 2.0, TRL's).
    """

    label_fields = ("k_pos", "lambda_pos", "k_neg", "lambda_neg")
    shipped_by = 'TRL 1.16.0: GRPOConfig(loss_type="vespo")'
    parity_tests = ("tests/unit/test_trl_rules.py::test_vespo_equals_trls_vespo",)

    k_pos: float = 2.0
    lambda_pos: float = 3.0
    k_neg: float = 3.0
    lambda_neg: float = 2.0

    def validate(self) -> None:
        for name in ("k_pos", "k_neg"):
            self.require(getattr(self, name) >= 0.0, name, "must be >= 0")
        for name in ("lambda_pos", "lambda_neg"):  # TRL floors lambda at 1e-4; below it the weight is not damped
            self.require(getattr(self, name) >= 1e-4, name, "must be >= 1e-4")


@register_loss("vespo", config=VESPOConfig)
def vespo_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    params: VESPOConfig,
    settings: SurrogateConfig,
    *,
    rollout_is_weights: Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    token_inputs: Mapping[str, Tensor] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """VESPO: -sg(phi(w_i)) A log pi, phi a smooth asymmetric Gamma weight of the sequence ratio w_i.

    log w_i = sum_t clamp(log r_it, +-log_ratio_clamp) (the product of the token ratios, not GSPO's geometric mean),
    plus sum_t log(pi_old / pi_rollout) when ``token_inputs`` holds the sampler's log-probs (TRL: its vLLM
    importance ratio), floored at log 1e-8 and capped at 20; phi = exp(lambda + k log w - lambda w), non-finite -> 0.
    Nothing is clipped: a weight far from 1 is damped smoothly, asymmetrically for A >= 0 and A < 0. TRL aggregates
    it as dapo (token-mean), this loss with the protocol's mode. The dual clip does not apply. Metrics: the token
    ratio diagnostics (no clip: clipfrac 0) and ``phi_mean`` (over valid tokens).
    """
    old_log_prob, log_prob, advantages, rollout_is_weights = prepare_inputs(
        old_log_prob, log_prob, advantages, response_mask, settings, rollout_is_weights
    )
    valid = response_mask.bool()
    x = settings.log_ratio_clamp
    log_ratio = torch.clamp(log_prob.detach() - old_log_prob, min=-x, max=x)
    seq_log_w = torch.where(valid, log_ratio, 0.0).sum(dim=-1, keepdim=True)
    rollout = (token_inputs or {}).get("rollout_log_prob")
    if rollout is not None:  # the sampler's drift from the old policy, log(pi_old / pi_rollout), each floored
        drift = torch.clamp(old_log_prob - torch.where(valid, rollout, 0.0), min=LOG_MIN_WEIGHT, max=20.0)
        seq_log_w = seq_log_w + torch.where(valid, drift, 0.0).sum(dim=-1, keepdim=True)
    log_w = torch.clamp(seq_log_w, min=LOG_MIN_WEIGHT, max=20.0)
    w = torch.exp(log_w)
    nonneg = advantages >= 0
    k = torch.where(nonneg, params.k_pos, params.k_neg)
    lam = torch.where(nonneg, params.lambda_pos, params.lambda_neg)
    phi = torch.exp(lam + k * log_w - lam * w).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)  # (B, T): phi of the seq
    token_loss = -phi * advantages * log_prob
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    loss = aggregate_loss(token_loss, response_mask, settings.loss_agg_mode, **global_batch_kwargs(global_batch_info))
    metrics = _unclipped_diagnostics(old_log_prob, log_ratio, advantages, response_mask)
    metrics["phi_mean"] = torch.where(valid, phi, 0.0).sum() / valid.sum().clamp(min=1)
    return loss, metrics


def _unclipped_diagnostics(old_log_prob: Tensor, log_ratio: Tensor, advantages: Tensor, response_mask: Tensor):
    """`clip_diagnostics` of a loss that clips nothing (the interval [0, inf): every clip fraction 0), without its
    bound means."""
    zero = torch.zeros_like(old_log_prob)
    diag = clip_diagnostics(old_log_prob, log_ratio, advantages, response_mask, zero, zero + torch.inf, None)
    return {k: v for k, v in diag.items() if not k.startswith("bound_")}


# ----------------------------------------------------------------------------------------------------------------
# two_sided_clip: INTELLECT-2's delta


@dataclass(frozen=True)
class TwoSidedClipConfig(MethodConfig):
    """INTELLECT-2's two-sided clip: the PPO clip [1 - eps_low, 1 + eps_high] and, where A < 0, the ratio capped at
    delta; defaults eps 0.2 / 0.2 and delta 4 (INTELLECT-2 section 4.1, as TRL's paper index gives them)."""

    label_fields = ("delta",)
    shipped_by = "TRL 1.16.0: GRPOConfig(delta=...)"
    parity_tests = ("tests/unit/test_trl_rules.py::test_two_sided_clip_equals_trls_delta",)

    eps_low: float = 0.2
    eps_high: float = 0.2
    delta: float = 4.0

    def validate(self) -> None:
        _check_eps(self)
        self.require(self.delta > 1.0 + self.eps_high, "delta", "must be > 1 + eps_high (a cap above the clip)")


@register_loss("two_sided_clip", config=TwoSidedClipConfig)
def two_sided_clip_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    params: TwoSidedClipConfig,
    settings: SurrogateConfig,
    *,
    rollout_is_weights: Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    token_inputs: Mapping[str, Tensor] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """INTELLECT-2's two-sided clip: the PPO clip, with the unclipped ratio capped at delta (TRL's ``delta``).

    L = max(-A min(r, delta), -A clip(r, 1 - eps_low, 1 + eps_high)). With delta > 1 + eps_high the cap binds only
    where A < 0 and r > delta, where L = -A delta: the dual clip (Ye et al. 2020) with c = delta, which is how it is
    computed here (`ppo_surrogate`). With the protocol's dual clip c also on, the tighter of the two binds
    (min(delta, c)); clipfrac_dual counts the tokens where it does. Reads no ``token_inputs``.
    """
    c = params.delta if settings.dual_clip_c is None else min(params.delta, settings.dual_clip_c)
    lower, upper = constant_bounds(old_log_prob, response_mask, 1.0 - params.eps_low, 1.0 + params.eps_high)
    return ppo_surrogate(old_log_prob, log_prob, advantages, response_mask, lower, upper,
                         dataclasses.replace(settings, dual_clip_c=c), rollout_is_weights=rollout_is_weights,
                         global_batch_info=global_batch_info)  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# top_entropy: the 80/20 rule


@dataclass(frozen=True)
class TopEntropyConfig(MethodConfig):
    """The 80/20 rule: the PPO clip's gradient on the top-rho share of tokens by entropy only.

    Attributes:
        eps_low, eps_high: the PPO clip, defaults 0.2 / 0.28 (the paper trains on DAPO's clip-higher).
        rho: the share of tokens kept, by entropy (TRL's top_entropy_quantile; the paper's 0.2). 1 keeps every
            token, 0 only the highest-entropy one(s).
    """

    label_fields = ("rho",)
    requires = ("entropy",)
    shipped_by = "TRL 1.16.0: GRPOConfig(top_entropy_quantile=...)"
    parity_tests = ("tests/unit/test_trl_rules.py::test_top_entropy_equals_trls_top_entropy_quantile",)

    eps_low: float = 0.2
    eps_high: float = 0.28
    rho: float = 0.2

    def validate(self) -> None:
        _check_eps(self)
        self.require(0.0 <= self.rho <= 1.0, "rho", "must be in [0, 1]")


def high_entropy_mask(entropy: Tensor, response_mask: Tensor, rho: float) -> Tensor:
    """The valid tokens whose entropy is at least the (1 - rho) quantile of the valid tokens' entropies (linear
    interpolation, computed in float32 as TRL does); all False without valid tokens."""
    valid = response_mask.bool()
    values = entropy[valid].float()
    if values.numel() == 0:
        return torch.zeros_like(valid)
    return (entropy >= torch.quantile(values, 1.0 - rho)) & valid


@register_loss("top_entropy", config=TopEntropyConfig)
def top_entropy_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    params: TopEntropyConfig,
    settings: SurrogateConfig,
    *,
    rollout_is_weights: Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    token_inputs: Mapping[str, Tensor] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The 80/20 rule: the PPO clip, its gradient on the top-rho tokens by entropy only (TRL's top_entropy_quantile).

    Requires ``token_inputs["entropy"]``, the current policy's token entropy: the rule ranks the valid tokens of
    this call (a mini-batch) by it and zeroes the loss of all but those at or above the (1 - rho) quantile. The
    other tokens still count in the aggregation's denominators (TRL's masking). Metrics: `ppo_surrogate`'s and
    ``masked_frac`` (the valid tokens dropped).
    """
    keep = high_entropy_mask(token_inputs["entropy"], response_mask, params.rho)
    lower, upper = constant_bounds(old_log_prob, response_mask, 1.0 - params.eps_low, 1.0 + params.eps_high)
    loss, metrics = ppo_surrogate(old_log_prob, log_prob, advantages, response_mask, lower, upper, settings,
                                  rollout_is_weights=_times(keep.to(log_prob.dtype), rollout_is_weights),
                                  global_batch_info=global_batch_info)  # fmt: skip
    metrics["masked_frac"] = _masked_frac(~keep, response_mask).to(metrics["clipfrac"].dtype)
    return loss, metrics


# ----------------------------------------------------------------------------------------------------------------
# offpolicy_mask: DeepSeek-V3.2's off-policy sequence masking


@dataclass(frozen=True)
class OffPolicyMaskConfig(MethodConfig):
    """DeepSeek-V3.2's off-policy sequence mask on the PPO clip.

    Attributes:
        eps_low, eps_high: the PPO clip, defaults 0.2 / 0.2 (TRL's epsilon).
        threshold: delta, the largest mean KL(sampler || policy) per token a sequence with A < 0 may have and still
            train (TRL's off_policy_mask_threshold; default 0.5, TRL's example: the report gives no value).
    """

    label_fields = ("threshold",)
    shipped_by = "TRL 1.16.0: GRPOConfig(off_policy_mask_threshold=...)"
    parity_tests = ("tests/unit/test_trl_rules.py::test_offpolicy_mask_equals_trls_off_policy_mask_threshold",)

    eps_low: float = 0.2
    eps_high: float = 0.2
    threshold: float = 0.5

    def validate(self) -> None:
        _check_eps(self)
        self.require(self.threshold > 0.0, "threshold", "must be > 0")


def offpolicy_keep(log_prob: Tensor, behaviour_log_prob: Tensor, advantages: Tensor, response_mask: Tensor,
                   threshold: float) -> Tensor:  # fmt: skip
    """DeepSeek-V3.2's mask, per token: kept unless A < 0 and the sequence's mean log(pi_behaviour / pi) over its
    valid tokens (a k1 estimate of KL(pi_behaviour || pi), no gradient) exceeds ``threshold``."""
    valid = response_mask.bool()
    kl = torch.where(valid, behaviour_log_prob - log_prob.detach(), 0.0)
    seq_kl = kl.sum(dim=-1, keepdim=True) / valid.sum(dim=-1, keepdim=True).clamp(min=1)
    return (advantages >= 0) | (seq_kl <= threshold)


@register_loss("offpolicy_mask", config=OffPolicyMaskConfig)
def offpolicy_mask_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    params: OffPolicyMaskConfig,
    settings: SurrogateConfig,
    *,
    rollout_is_weights: Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    token_inputs: Mapping[str, Tensor] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """DeepSeek-V3.2's off-policy mask: the PPO clip, minus the A < 0 sequences that drifted past a KL threshold.

    TRL's ``off_policy_mask_threshold``: a token with A < 0 trains only while its sequence's mean KL to the sampler
    stays at or below the threshold. The KL is measured between the policy that sampled
    (``token_inputs["rollout_log_prob"]``, else the old log-probs, as TRL without vLLM) and the current one, so it
    sees both the drift of the updates and a sampler's mismatch. A masked sequence still counts in the aggregation's
    denominators (TRL's masking). Metrics: `ppo_surrogate`'s and ``masked_frac`` (the valid tokens dropped).
    """
    behaviour = (token_inputs or {}).get("rollout_log_prob", old_log_prob)
    keep = offpolicy_keep(log_prob, behaviour, advantages, response_mask, params.threshold)
    lower, upper = constant_bounds(old_log_prob, response_mask, 1.0 - params.eps_low, 1.0 + params.eps_high)
    loss, metrics = ppo_surrogate(old_log_prob, log_prob, advantages, response_mask, lower, upper, settings,
                                  rollout_is_weights=_times(keep.to(log_prob.dtype), rollout_is_weights),
                                  global_batch_info=global_batch_info)  # fmt: skip
    metrics["masked_frac"] = _masked_frac(~keep, response_mask).to(metrics["clipfrac"].dtype)
    return loss, metrics
