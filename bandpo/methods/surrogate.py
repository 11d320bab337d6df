"""The clipped PPO surrogate every bounds method is trained by (`ppo_surrogate`), and the building blocks methods
are written with: bounds on the valid tokens (`on_valid_tokens`, `constant_bounds`), input checks
(`check_shapes`, `prepare_inputs`, `check_bounds`) and the aggregation of per-token losses (`aggregate_loss`,
verl's conventions, with `global_batch_kwargs`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from bandpo.methods.config import AGG_MODES, SurrogateConfig
from bandpo.methods.diagnostics import clip_diagnostics

GLOBAL_BATCH_KEYS = ("dp_size", "batch_num_tokens", "global_batch_size", "loss_scale_factor")
"""The keys of ``global_batch_info`` (verl's data-parallel normalisation), the keyword arguments of `aggregate_loss`."""
TOKEN_INPUTS = ("entropy", "rollout_log_prob")
"""The keys of ``token_inputs``, the per-token tensors a whole loss may read beyond the four every loss gets, each
(batch, T) and without gradient:

entropy           the current policy's token entropy (of the update's own forward pass, as TRL and verl's actor
                  compute it; the local trainer computes it only for a method whose config `requires` it)
rollout_log_prob  the log-probs of the policy that sampled the tokens (vLLM's in TRL and verl; the local trainer's
                  sampler is its rollout policy, so there these are the old log-probs)

A method names the ones it cannot run without in its config's ``requires`` (`MethodConfig.requires`); one that
only can use an input falls back when it is absent (``rollout_log_prob``: the old log-probs, as TRL does without
vLLM)."""


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


def check_shapes(response_mask: Tensor, **tensors: Tensor | None) -> None:
    """Raise unless ``response_mask`` is a (batch, response_length) tensor and every named tensor (None: skipped)
    a tensor of its shape; the messages name the tensor."""
    if not torch.is_tensor(response_mask):
        raise TypeError(f"response_mask must be a torch.Tensor, got {type(response_mask).__name__}")
    if response_mask.dim() != 2:
        raise ValueError(
            f"tensors must be (batch, response_length); response_mask has shape {tuple(response_mask.shape)}"
        )
    for name, t in tensors.items():
        if t is None:
            continue
        if not torch.is_tensor(t):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.shape != response_mask.shape:
            raise ValueError(
                f"{name} has shape {tuple(t.shape)}, expected {tuple(response_mask.shape)} (response_mask)"
            )


def _check_finite(valid: Tensor, **tensors: Tensor) -> None:
    """Raise if any tensor is NaN/inf on a valid token (one host sync for all tensors together)."""
    counts = torch.stack([(~torch.isfinite(t) & valid).sum() for t in tensors.values()]).tolist()
    bad = {name: n for name, n in zip(tensors, counts, strict=True) if n}
    if bad:
        detail = ", ".join(f"{name}: {n}" for name, n in bad.items())
        raise ValueError(f"non-finite values on valid (unmasked) tokens ({detail}); check the rollout / model outputs")


def check_bounds(
    lower: Tensor, upper: Tensor, response_mask: Tensor, old_log_prob: Tensor, who: Callable[[], str]
) -> None:
    """Raise unless lower <= 1 <= upper on every valid token (``who()``: the method, for the message).

    A clip interval that leaves out r = 1 clips even the on-policy ratio, and a NaN bound clips nothing: either
    trains on something other than the method. Checked once per bounds computation: a few elementwise comparisons
    and one reduction (one host sync); the values are not touched. NaN fails both comparisons; upper = +inf is an
    interval (no upper clip: Band's r_hi where p underflows, without a cap), lower = -inf is not (a lower bound of a
    ratio is >= 0). The counts of the message are computed only once the check has failed.
    """
    valid = response_mask.bool()
    ok = (lower <= 1.0) & (upper >= 1.0) & (lower > -torch.inf)
    if not bool((valid & ~ok).any()):
        return
    bad_input = valid & ~torch.isfinite(old_log_prob)
    if bool(bad_input.any()):  # the bounds of a NaN / inf old log-prob: the input is at fault, not the method
        _check_finite(valid, old_log_prob=old_log_prob)
    n_valid = int(valid.sum())
    bad = valid & ~ok
    nan = valid & (lower.isnan() | upper.isnan())
    counts = {
        "lower > 1": int((valid & (lower > 1.0)).sum()),
        "upper < 1": int((valid & (upper < 1.0)).sum()),
        "lower = -inf": int((valid & (lower == -torch.inf)).sum()),
        "NaN": int(nan.sum()),
    }
    detail = ", ".join(f"{k}: {n}" for k, n in counts.items() if n)
    first = tuple(int(i) for i in bad.nonzero()[0])
    raise ValueError(
        f"{who()}: its bounds violate lower <= 1 <= upper on {int(bad.sum())} of {n_valid} valid tokens ({detail}; "
        f"e.g. token {list(first)}: lower = {float(lower[first]):.6g}, upper = {float(upper[first]):.6g}). A bounds "
        "method must return an interval that holds ratio 1 (a finite lower <= 1, upper >= 1, no NaN) on every valid "
        "token: check the bounds function and its parameters (a validate() in its config rejects bad ones before "
        "any run)"
    )


def global_batch_kwargs(global_batch_info: Mapping[str, Any] | None) -> dict[str, Any]:
    """``global_batch_info`` (None: {}) as keyword arguments of `aggregate_loss`; ValueError on a key outside
    `GLOBAL_BATCH_KEYS`."""
    info = dict(global_batch_info or {})
    unknown = [k for k in info if k not in GLOBAL_BATCH_KEYS]
    if unknown:
        raise ValueError(f"unknown global_batch_info key(s) {unknown}; valid: {', '.join(GLOBAL_BATCH_KEYS)}")
    return info


def check_token_inputs(response_mask: Tensor, token_inputs: Mapping[str, Tensor] | None) -> dict[str, Tensor]:
    """``token_inputs`` (None: {}) checked: keys among `TOKEN_INPUTS` (ValueError naming the unknown ones), each a
    tensor of ``response_mask``'s shape; returned detached, as a new dict."""
    inputs = dict(token_inputs or {})
    unknown = [k for k in inputs if k not in TOKEN_INPUTS]
    if unknown:
        raise ValueError(f"unknown token_inputs key(s) {unknown}; valid: {', '.join(TOKEN_INPUTS)}")
    check_shapes(response_mask, **inputs)
    return {k: v.detach() for k, v in inputs.items()}


def _masked_sum(values: Tensor, mask: Tensor) -> Tensor:
    return (torch.where(mask.bool(), values, 0.0) * mask).sum()


def aggregate_loss(
    loss_mat: Tensor,
    loss_mask: Tensor,
    loss_agg_mode: str,
    dp_size: int = 1,
    batch_num_tokens: int | Tensor | None = None,
    global_batch_size: int | Tensor | None = None,
    loss_scale_factor: int | None = None,
) -> Tensor:
    """Aggregate a (batch, T) per-token loss into a scalar; same conventions as verl's ``agg_loss``.

    token-mean               sum_valid L / N_tokens
    token-sum                sum_valid L
    seq-mean-token-mean      mean_seq( sum_t L / n_t )           (the paper)
    seq-mean-token-sum       mean_seq( sum_t L )
    seq-mean-token-sum-norm  mean_seq( sum_t L ) / loss_scale_factor (default T)    (Dr. GRPO)

    Under data parallelism pass the global token / sequence counts and ``dp_size`` so that the gradients averaged
    over ranks equal the global-batch mean; sequences with no valid token are excluded from the sequence mean.
    """
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            if dp_size > 1:
                raise ValueError("batch_num_tokens (global) is required when dp_size > 1")
            batch_num_tokens = loss_mask.sum()
        return _masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size
    if loss_agg_mode == "token-sum":
        return _masked_sum(loss_mat, loss_mask) * dp_size
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean"):
        per_seq_tokens = torch.sum(loss_mask, dim=-1)
        seq_losses = torch.sum(torch.where(loss_mask.bool(), loss_mat, 0.0) * loss_mask, dim=-1)
        if loss_agg_mode == "seq-mean-token-mean":
            seq_losses = seq_losses / (per_seq_tokens + 1e-8)
        seq_mask = (per_seq_tokens > 0).float()  # fully padded sequences do not count
        if global_batch_size is None:
            if dp_size > 1:
                raise ValueError("global_batch_size is required when dp_size > 1")
            global_batch_size = seq_mask.sum()
        loss = _masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
        if loss_agg_mode == "seq-mean-token-sum-norm":
            loss = loss / (loss_scale_factor if loss_scale_factor is not None else loss_mask.shape[-1])
        return loss
    raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; valid: {', '.join(AGG_MODES)}")


def prepare_inputs(old_log_prob, log_prob, advantages, response_mask, settings, rollout_is_weights=None):
    """Shape / finiteness checks; returns (old_log_prob, log_prob, advantages, rollout_is_weights) with padding
    replaced by neutral values (0, 0, 0, 0) so that nothing non-finite reaches the loss or its gradient."""
    check_shapes(
        response_mask,
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        rollout_is_weights=rollout_is_weights,
    )
    valid = response_mask.bool()
    if settings.check_finite:
        tensors = {"log_prob": log_prob.detach(), "old_log_prob": old_log_prob, "advantages": advantages}
        if rollout_is_weights is not None:
            tensors["rollout_is_weights"] = rollout_is_weights
        _check_finite(valid, **tensors)
    old_log_prob = torch.where(valid, old_log_prob.detach(), 0.0)
    log_prob = torch.where(valid, log_prob, 0.0)
    advantages = torch.where(valid, advantages.detach(), 0.0)
    if rollout_is_weights is not None:
        rollout_is_weights = torch.where(valid, rollout_is_weights.detach(), 0.0)
    return old_log_prob, log_prob, advantages, rollout_is_weights


def ppo_surrogate(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    lower: Tensor,
    upper: Tensor,
    settings: SurrogateConfig | Mapping[str, Any] | None = None,
    *,
    rollout_is_weights: Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The clipped PPO surrogate with per-token bounds, shared by every bounds method.

    Per token, with r = exp(clamp(log_prob - old_log_prob, -x, x)):

        L = max(-A r, -A clip(r, r_lo, r_hi))
        L = min(L, -A c)            for A < 0, when the dual clip c is set

    then optional rollout importance weights multiply L, and L is aggregated over valid tokens
    (`aggregate_loss`). With lower = 1 - eps_low, upper = 1 + eps_high and c = verl's clip_ratio_c this is exactly
    verl's ``vanilla`` policy loss.

    Args:
        old_log_prob, log_prob, advantages: (batch, T); gradients flow through ``log_prob`` only.
        response_mask: (batch, T) bool or 0/1.
        lower, upper: (batch, T) ratio bounds (constants; e.g. from `compute_bounds`).
        settings: `SurrogateConfig` or a mapping of its fields.
        rollout_is_weights: optional (batch, T) per-token weights (verl's rollout correction).
        global_batch_info: optional dp_size / batch_num_tokens / global_batch_size / loss_scale_factor.

    Returns:
        (loss: 0-d tensor, metrics: dict of 0-d tensors from `clip_diagnostics`).
    """
    settings = SurrogateConfig.from_params(settings)
    check_shapes(response_mask, lower=lower, upper=upper)
    old_log_prob, log_prob, advantages, rollout_is_weights = prepare_inputs(
        old_log_prob, log_prob, advantages, response_mask, settings, rollout_is_weights
    )
    lower, upper = lower.detach(), upper.detach()
    x = settings.log_ratio_clamp

    log_ratio = torch.clamp(log_prob - old_log_prob, min=-x, max=x)  # clamp log r before exp
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio  # -A r
    loss_clipped = -advantages * torch.clamp(ratio, min=lower, max=upper)  # -A clip(r, r_lo, r_hi)
    token_loss = torch.maximum(loss_unclipped, loss_clipped)  # pessimistic: max of the two losses
    if settings.dual_clip_c is not None:  # dual clip: for A < 0, L <= -A c
        loss_dual = -advantages * settings.dual_clip_c
        token_loss = torch.where(advantages < 0, torch.minimum(loss_dual, token_loss), token_loss)
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights

    loss = aggregate_loss(token_loss, response_mask, settings.loss_agg_mode, **global_batch_kwargs(global_batch_info))
    metrics = clip_diagnostics(old_log_prob, log_ratio, advantages, response_mask, lower, upper, settings.dual_clip_c)
    return loss, metrics
