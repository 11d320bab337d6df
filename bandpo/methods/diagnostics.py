"""Clipping diagnostics over the valid tokens (`clip_diagnostics`), shared by every method's loss, and the
method-independent stopped-token fractions (`stopped_diagnostics`, from the loss's gradient)."""

from __future__ import annotations

import torch
from torch import Tensor

BUCKET_EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
BUCKET_LABELS = tuple(f"p{lo:.1f}-{hi:.1f}" for lo, hi in zip(BUCKET_EDGES[:-1], BUCKET_EDGES[1:], strict=True))


@torch.no_grad()
def clip_diagnostics(
    old_log_prob: Tensor,
    log_ratio: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    lower: Tensor,
    upper: Tensor,
    dual_clip_c: float | None = None,
) -> dict[str, Tensor]:
    """Clipping statistics over the valid tokens, vectorised, as 0-d tensors.

    ``log_ratio`` is the (clamped) log r the loss used, so r = exp(log_ratio). Keys:

    clipfrac                       fraction of valid tokens whose gradient the clip removes (= verl's pg_clipfrac)
    clipfrac_upper / _lower        r > r_hi with A > 0 / r < r_lo with A < 0, over all valid tokens
    clipfrac_dual                  A < 0 and r > c (the dual clip binds)
    clipfrac_upper/<bucket>, clipfrac_lower/<bucket>   the same within an old-probability bucket
    token_frac/<bucket>            share of valid tokens in the bucket
    bound_lower_mean[/<bucket>], bound_upper_mean[/<bucket>]   mean r_lo / r_hi
    approx_kl                      mean(log pi_old - log pi) = k1 estimate of KL(old || new) (= verl's ppo_kl)
    approx_kl_k3                   mean(r - 1 - log r), the non-negative k3 estimate
    ratio_min / ratio_mean / ratio_max

    Buckets of p = exp(old_log_prob): [0, .2), [.2, .4), [.4, .6), [.6, .8), [.8, 1] (labels in BUCKET_LABELS).
    Empty bucket or no valid token: the statistic is 0 (ratio_* are 1). The valid tokens are gathered first (one
    host sync, for their count), and all per-bucket sums come from one weighted ``bincount``.
    """
    dtype = torch.float64 if old_log_prob.dtype == torch.float64 else torch.float32
    device = old_log_prob.device
    idx = response_mask.reshape(-1).bool().nonzero().squeeze(1)
    n = idx.numel()

    def take(t: Tensor) -> Tensor:
        return t.detach().reshape(-1).index_select(0, idx)

    log_ratio, adv = take(log_ratio).to(dtype), take(advantages)
    lower, upper = take(lower).to(dtype), take(upper).to(dtype)
    ratio = torch.exp(log_ratio)
    clip_up = (ratio > upper) & (adv > 0)
    clip_low = (ratio < lower) & (adv < 0)
    clip_dual = (ratio > dual_clip_c) & (adv < 0) if dual_clip_c is not None else torch.zeros_like(clip_up)

    # Per-bucket sums in one weighted bincount over (statistic, bucket) pairs, accumulated in float64.
    n_buckets = len(BUCKET_LABELS)
    p = torch.nan_to_num(take(old_log_prob).double().exp(), nan=0.0).clamp(0.0, 1.0)
    bucket = torch.clamp((p * n_buckets).long(), 0, n_buckets - 1)
    stats = torch.stack([torch.ones_like(p), clip_up.double(), clip_low.double(), lower.double(), upper.double()])
    keys = (torch.arange(5, device=device).unsqueeze(1) * n_buckets + bucket).reshape(-1)
    sums = torch.bincount(keys, weights=stats.reshape(-1), minlength=5 * n_buckets).reshape(5, n_buckets)
    per_bucket = (sums[1:] / sums[0].clamp(min=1.0)).to(dtype)  # means within each bucket; 0 where it is empty
    totals = (sums.sum(dim=1) / max(n, 1)).to(dtype)

    def mean(t: Tensor) -> Tensor:
        return t.to(dtype).sum() / max(n, 1)

    one = torch.ones((), dtype=dtype, device=device)
    out: dict[str, Tensor] = {
        "clipfrac": mean(clip_up | clip_low),
        "clipfrac_upper": totals[1],
        "clipfrac_lower": totals[2],
        "clipfrac_dual": mean(clip_dual),
        "bound_lower_mean": totals[3],
        "bound_upper_mean": totals[4],
        "approx_kl": -mean(log_ratio),
        "approx_kl_k3": mean(ratio - 1.0 - log_ratio),
        "ratio_mean": mean(ratio) if n else one,
        "ratio_min": ratio.min() if n else one,
        "ratio_max": ratio.max() if n else one,
    }
    token_frac = (sums[0] / max(n, 1)).to(dtype)
    for j, label in enumerate(BUCKET_LABELS):
        out[f"token_frac/{label}"] = token_frac[j]
        out[f"clipfrac_upper/{label}"] = per_bucket[0, j]
        out[f"clipfrac_lower/{label}"] = per_bucket[1, j]
        out[f"bound_lower_mean/{label}"] = per_bucket[2, j]
        out[f"bound_upper_mean/{label}"] = per_bucket[3, j]
    return out


def loss_grad_wrt_log_prob(loss: Tensor, log_prob: Tensor) -> Tensor:
    """d loss / d log_prob, per token, without touching any ``.grad`` (the graph is kept for the caller's own
    ``backward``); zeros where the loss does not depend on ``log_prob`` at all."""
    (grad,) = torch.autograd.grad(loss, log_prob, retain_graph=True, allow_unused=True)
    return torch.zeros_like(log_prob) if grad is None else grad


@torch.no_grad()
def stopped_diagnostics(
    grad: Tensor, advantages: Tensor, old_log_prob: Tensor, response_mask: Tensor
) -> dict[str, Tensor]:
    """Which tokens the loss stopped, the same measure for every method: a valid token is *stopped* when the loss's
    gradient with respect to its log-prob (``grad``, e.g. `loss_grad_wrt_log_prob`) is exactly 0 while its
    advantage is not.

    Keys (0-d tensors), in the layout of `clip_diagnostics`' clip fractions:

    stopped_frac                               stopped valid tokens / valid tokens
    stopped_frac_pos / stopped_frac_neg        stopped with A > 0 / with A < 0, over all valid tokens
    stopped_frac_pos/<bucket>, stopped_frac_neg/<bucket>   the same within an old-probability bucket (BUCKET_LABELS)

    For a bounds method trained by `ppo_surrogate` this is its clip fractions: stopped_frac_pos = clipfrac_upper,
    stopped_frac_neg = clipfrac_lower + clipfrac_dual (tests/unit/test_verl_losses.py); for a masking loss (DPPO,
    Clip-Cov, ...) it is the share of tokens its mask removed.
    """
    dtype = torch.float64 if old_log_prob.dtype == torch.float64 else torch.float32
    idx = response_mask.reshape(-1).bool().nonzero().squeeze(1)
    n = idx.numel()

    def take(t: Tensor) -> Tensor:
        return t.detach().reshape(-1).index_select(0, idx)

    adv = take(advantages)
    stopped = take(grad) == 0
    pos, neg = stopped & (adv > 0), stopped & (adv < 0)
    n_buckets = len(BUCKET_LABELS)
    p = torch.nan_to_num(take(old_log_prob).double().exp(), nan=0.0).clamp(0.0, 1.0)
    bucket = torch.clamp((p * n_buckets).long(), 0, n_buckets - 1)
    stats = torch.stack([torch.ones_like(p), pos.double(), neg.double()])
    keys = (torch.arange(3, device=p.device).unsqueeze(1) * n_buckets + bucket).reshape(-1)
    sums = torch.bincount(keys, weights=stats.reshape(-1), minlength=3 * n_buckets).reshape(3, n_buckets)
    per_bucket = (sums[1:] / sums[0].clamp(min=1.0)).to(dtype)
    totals = (sums.sum(dim=1) / max(n, 1)).to(dtype)
    out = {"stopped_frac": totals[1] + totals[2], "stopped_frac_pos": totals[1], "stopped_frac_neg": totals[2]}
    for j, label in enumerate(BUCKET_LABELS):
        out[f"stopped_frac_pos/{label}"] = per_bucket[0, j]
        out[f"stopped_frac_neg/{label}"] = per_bucket[1, j]
    return out
