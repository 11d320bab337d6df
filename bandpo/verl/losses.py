"""The policy losses verl ships, as methods of the benchmark: each one CALLS verl's registered function (verl's
``POLICY_LOSS_REGISTRY``, verl 0.9.1), so verl stays the one source of truth of its losses.

A method here (kind ``"verl"``) has a frozen config dataclass whose fields are the knobs verl reads for that loss,
named as verl names them, with verl 0.9.1's defaults (`verl.workers.config.ActorConfig` /
``PolicyLossConfig``; the docstrings name the source of each default). Per call the adapter builds the verl
``ActorConfig`` the function expects from the method's config and the shared loss settings (`SurrogateConfig`:
``loss_agg_mode``; ``dual_clip_c`` as verl's ``clip_ratio_c`` where the loss reads it; the ``global_batch_info``
of the call), pads with neutral values (`prepare_inputs`) and returns verl's loss unchanged.

    name       verl loss_mode  what it is
    dppo_tv    dppo_tv         DPPO-Binary-TV: mask a token when |p - p_old| leaves the threshold on the pushed side
    dppo_kl    dppo_kl         DPPO-Binary-KL: the same with the binary KL between p_old and p
    clip_cov   clip_cov        Clip-Cov: PPO clip + no gradient on a random few high-covariance tokens
    kl_cov     kl_cov          KL-Cov: |log r| penalty on the top-k covariance tokens
    sapo       sapo            SAPO: a smooth sigmoid gate of r instead of a hard clip
    geo_mean   geo_mean        GMPO: geometric mean of the (sign-aware clipped) token ratios of a sequence
    gpg        gpg             GPG: plain -A log pi (no ratio)
    dro        dro             DRO: -A log pi + beta/2 (log r)^2

Not adapted: ``vanilla`` (it is the suite's ``grpo`` / ``clip_higher`` with the dual clip, bitwise:
tests/unit/test_verl_plugin.py), ``gspo`` and ``cispo`` (the suite keeps its own implementations, tested equal to
verl's), ``bypass_mode`` (a rollout-correction wrapper that needs the rollout's own log-probs, not a clipping
rule).

Caveats, all verl's and kept as they are: ``sapo`` aggregates seq-mean-token-mean whatever ``loss_agg_mode`` says;
``geo_mean`` takes the mean over sequences (fully padded ones included) and ignores ``loss_agg_mode`` and the
global batch info; ``clip_cov`` picks its tokens with ``torch.randperm`` (the global RNG); verl clamps log r at
+-20 (``log_ratio_clamp`` does not apply; ``clip_cov``, ``kl_cov``, ``dro`` do not clamp).

This module registers its methods in the method registry when the registry loads the built-in methods
(`bandpo.methods.registry.BUILTIN_METHOD_MODULES`): it is verl knowledge, so it lives in bandpo.verl beside the
plugin, and the registry (below every stage) names it rather than importing it. It imports verl only when one of
its losses is called: every process that looks a method up loads it, and the local pipeline runs without verl.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import torch
from torch import Tensor

from bandpo.methods.config import MethodConfig, SurrogateConfig
from bandpo.methods.diagnostics import clip_diagnostics, loss_grad_wrt_log_prob, stopped_diagnostics
from bandpo.methods.registry import register_verl_loss
from bandpo.methods.surrogate import global_batch_kwargs, prepare_inputs

# PolicyLossConfig's fields (actor_rollout_ref.actor.policy_loss.<key>); every other knob is an ActorConfig field.
POLICY_LOSS_KEYS = frozenset(
    {"clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef", "dro_beta"}
)
# verl's dppo losses read config.get("clip_ratio_c", 20.0); a verl run never reaches the 20.0 (verl's ActorConfig
# has clip_ratio_c = 3.0 by default, and bandpo.verl.command.VerlRun always passes the dual clip c): the local
# trainer uses it only when the dual clip is off (dual_clip_c: null), where verl has no equivalent
DPPO_TIS_FALLBACK = 20.0


@dataclass(frozen=True)
class VerlLossConfig(MethodConfig):
    """Base of the verl losses' parameters: ``verl_loss_mode`` is verl's name of the loss; every field is a verl
    config key of the same name (`verl_keys`)."""

    verl_loss_mode: ClassVar[str] = ""

    def verl_keys(self, settings: SurrogateConfig | None = None) -> dict[str, Any]:
        """verl's config keys under ``actor_rollout_ref.actor`` (``policy_loss.<key>`` for PolicyLossConfig's) with
        this config's values; ``clip_ratio_c`` resolved against the shared dual clip (`DPPOTVConfig`)."""
        out = {
            ("policy_loss." if f.name in POLICY_LOSS_KEYS else "") + f.name: getattr(self, f.name) for f in fields(self)
        }
        if "clip_ratio_c" in out:
            out["clip_ratio_c"] = self.effective_clip_ratio_c(settings)
        return out


def _check_clip(cfg: MethodConfig) -> None:
    cfg.require(0.0 < cfg.clip_ratio_low <= 1.0, "clip_ratio_low", "must be in (0, 1]")
    cfg.require(cfg.clip_ratio_high > 0.0, "clip_ratio_high", "must be > 0")


@dataclass(frozen=True)
class DPPOTVConfig(VerlLossConfig):
    """DPPO-Binary-TV (arXiv 2602.04879; verl ``dppo_tv``): a token with A > 0 loses its gradient once
    p - p_old > clip_ratio_high, a token with A < 0 once p - p_old < -clip_ratio_low; the kept tokens get
    -A sg(min(r, clip_ratio_c)) log pi (truncated IS).

    Attributes:
        clip_ratio_low, clip_ratio_high: the TV thresholds (verl reads ``actor.clip_ratio_low/high``). Default 0.2:
            verl 0.9.1's ActorConfig default, which is what a verl run of ``dppo_tv`` gets unless it sets them. The
            DPPO authors' recipe in verl's repository (examples/dppo_trainer/run_qwen30b_dppo.sh) sets 0.15 for TV
            and 0.05 for KL, with the dual clip off (clip_ratio_c 10000); the embedded sweep's entries use those
            thresholds (config/config.yaml).
        clip_ratio_c: the truncated-IS cap (verl reads ``actor.clip_ratio_c``). None (default): the shared dual clip
            c (`SurrogateConfig.dual_clip_c`, the protocol's 10, which is what verl gets as clip_ratio_c in a
            `bandpo.verl.command.VerlRun`), or 20.0 when the dual clip is off (the fallback in verl's dppo code,
            which a verl run never reaches: verl's ActorConfig default clip_ratio_c is 3.0; the DPPO paper
            recommends a large cap, Sec. 5.4).
    """

    verl_loss_mode = "dppo_tv"
    label_fields = ("clip_ratio_low", "clip_ratio_high")

    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float | None = None

    def validate(self) -> None:
        _check_clip(self)
        self.require(self.clip_ratio_c is None or self.clip_ratio_c > 1.0, "clip_ratio_c", "must be > 1 or None")

    def effective_clip_ratio_c(self, settings: SurrogateConfig | None) -> float:
        if self.clip_ratio_c is not None:
            return self.clip_ratio_c
        c = SurrogateConfig().dual_clip_c if settings is None else settings.dual_clip_c
        return DPPO_TIS_FALLBACK if c is None else c


@dataclass(frozen=True)
class DPPOKLConfig(DPPOTVConfig):
    """DPPO-Binary-KL (arXiv 2602.04879; verl ``dppo_kl``): as DPPO-Binary-TV with the binary KL
    p_old log(p_old / p) + (1 - p_old) log((1 - p_old) / (1 - p)) against the thresholds, in the direction the
    advantage pushes. Fields and defaults: `DPPOTVConfig` (thresholds 0.2: verl's ActorConfig default, not the
    paper's; the threshold here is a binary-KL value, not a probability difference)."""

    verl_loss_mode = "dppo_kl"


@dataclass(frozen=True)
class ClipCovConfig(VerlLossConfig):
    """Clip-Cov (arXiv 2505.22617; verl ``clip_cov``): the PPO clip [1 - clip_ratio_low, 1 + clip_ratio_high], and
    among the unclipped tokens whose centred covariance (A - mean A)(log pi - mean log pi) lies in
    (clip_cov_lb, clip_cov_ub), a random clip_cov_ratio share loses its gradient.

    Defaults, all verl 0.9.1's (ActorConfig / PolicyLossConfig; verl's loss is adapted from the paper authors' code,
    PRIME-RL/Entropy-Mechanism-of-RL, and its docstring gives the same covariance values): clip_ratio_low =
    clip_ratio_high = 0.2, clip_cov_ratio = 2e-4, clip_cov_lb = 1.0, clip_cov_ub = 5.0.
    """

    verl_loss_mode = "clip_cov"
    label_fields = ("clip_cov_ratio",)

    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0

    def validate(self) -> None:
        _check_clip(self)
        self.require(0.0 < self.clip_cov_ratio <= 1.0, "clip_cov_ratio", "must be in (0, 1]")
        self.require(self.clip_cov_lb < self.clip_cov_ub, "clip_cov_ub", "must be > clip_cov_lb")


@dataclass(frozen=True)
class KLCovConfig(VerlLossConfig):
    """KL-Cov (arXiv 2505.22617; verl ``kl_cov``): -A r, plus ppo_kl_coef |log r| on the top kl_cov_ratio share of
    the tokens by centred covariance (A - mean A)(log pi - mean log pi); no clip.

    Defaults: verl 0.9.1's PolicyLossConfig: kl_cov_ratio = 2e-4, ppo_kl_coef = 0.1 (verl's function docstring says
    1; its config default, which a verl run uses, is 0.1).
    """

    verl_loss_mode = "kl_cov"
    label_fields = ("kl_cov_ratio", "ppo_kl_coef")

    kl_cov_ratio: float = 0.0002
    ppo_kl_coef: float = 0.1

    def validate(self) -> None:
        self.require(0.0 < self.kl_cov_ratio <= 1.0, "kl_cov_ratio", "must be in (0, 1]")
        self.require(self.ppo_kl_coef >= 0.0, "ppo_kl_coef", "must be >= 0")


@dataclass(frozen=True)
class SAPOConfig(VerlLossConfig):
    """SAPO (arXiv 2511.20347; verl ``sapo``): L = -A (4 / tau) sigmoid(tau (r - 1)), tau = tau_pos for A > 0 and
    tau_neg otherwise; aggregated seq-mean-token-mean always (verl's choice).

    Defaults: verl 0.9.1's ActorConfig tau_pos = 1.0, tau_neg = 1.05 (verl's doc: tau_pos >= 1 keeps updates
    stable, tau_neg > tau_pos for asymmetry).
    """

    verl_loss_mode = "sapo"
    label_fields = ("tau_pos", "tau_neg")
    shipped_by = "verl 0.9.1: loss_mode='sapo'; TRL 1.16.0: GRPOConfig(loss_type='sapo')"
    parity_tests = (
        "tests/unit/test_verl_losses.py::test_loss_and_gradient_equal_verls_in_every_mode",
        "tests/unit/test_trl_rules.py::test_the_registrys_earlier_rules_equal_trls_too",
    )

    tau_pos: float = 1.0
    tau_neg: float = 1.05

    def validate(self) -> None:
        self.require(self.tau_pos > 0.0, "tau_pos", "must be > 0")
        self.require(self.tau_neg > 0.0, "tau_neg", "must be > 0")


@dataclass(frozen=True)
class GeoMeanConfig(VerlLossConfig):
    """GMPO (arXiv 2507.20673; verl ``geo_mean``): -A exp(mean_t clip(log r_t)), each log r_t clipped to
    [-clip_ratio_low, clip_ratio_high] on the side the advantage pushes; mean over sequences (verl ignores
    loss_agg_mode).

    Defaults: verl 0.9.1's ActorConfig clip_ratio_low = clip_ratio_high = 0.2 (applied to log r). The GMPO paper
    describes a wider range, (e^-0.4, e^0.4), i.e. 0.4 / 0.4 here (from memory of the paper, not re-checked).
    """

    verl_loss_mode = "geo_mean"
    label_fields = ("clip_ratio_low", "clip_ratio_high")

    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2

    def validate(self) -> None:
        self.require(self.clip_ratio_low > 0.0, "clip_ratio_low", "must be > 0")
        self.require(self.clip_ratio_high > 0.0, "clip_ratio_high", "must be > 0")


@dataclass(frozen=True)
class GPGConfig(VerlLossConfig):
    """GPG (verl ``gpg``): -A log pi, no ratio and no clip; no parameters."""

    verl_loss_mode = "gpg"


@dataclass(frozen=True)
class DROConfig(VerlLossConfig):
    """DRO (verl ``dro``): -(A log pi - dro_beta / 2 (log r)^2).

    dro_beta: verl 0.9.1 has no default (PolicyLossConfig.dro_beta = None and its loss raises until it is set);
    1.0 here is this project's placeholder, not a published setting: set it in the sweep.
    """

    verl_loss_mode = "dro"
    label_fields = ("dro_beta",)

    dro_beta: float = 1.0

    def validate(self) -> None:
        self.require(self.dro_beta > 0.0, "dro_beta", "must be > 0")


VERL_METHODS: dict[str, type[VerlLossConfig]] = {
    "dppo_tv": DPPOTVConfig,
    "dppo_kl": DPPOKLConfig,
    "clip_cov": ClipCovConfig,
    "kl_cov": KLCovConfig,
    "sapo": SAPOConfig,
    "geo_mean": GeoMeanConfig,
    "gpg": GPGConfig,
    "dro": DROConfig,
}


DESCRIPTIONS = {
    "dppo_tv": "DPPO-Binary-TV: no gradient once |p - p_old| passes the threshold on the pushed side",
    "dppo_kl": "DPPO-Binary-KL: no gradient once the binary KL(p_old, p) passes the threshold on the pushed side",
    "clip_cov": "Clip-Cov: PPO clip, plus no gradient on a random few high-covariance tokens",
    "kl_cov": "KL-Cov: -A r plus a |log r| penalty on the top-k covariance tokens",
    "sapo": "SAPO: a smooth sigmoid gate of r instead of a hard clip",
    "geo_mean": "GMPO: geometric mean of the sign-aware clipped token ratios of a sequence",
    "gpg": "GPG: plain -A log pi, no ratio and no clip",
    "dro": "DRO: -A log pi plus a quadratic (log r)^2 penalty",
}


@functools.lru_cache(maxsize=64)
def _actor_config(params: VerlLossConfig, settings: SurrogateConfig, info: tuple[tuple[str, Any], ...]):
    # lazy: the registry loads this module in every process that looks a method up (local training, scoring, the
    # config check), which must not pay verl's import (~6 CPU-seconds); only a verl job calls this
    from verl.workers.config import ActorConfig, PolicyLossConfig

    keys = params.verl_keys(settings)
    policy_loss = {k.removeprefix("policy_loss."): v for k, v in keys.items() if k.startswith("policy_loss.")}
    actor = {k: v for k, v in keys.items() if not k.startswith("policy_loss.")}
    if "clip_ratio_c" not in actor and settings.dual_clip_c is not None:
        actor["clip_ratio_c"] = settings.dual_clip_c  # unused by these losses; as a verl run would have it
    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        loss_agg_mode=settings.loss_agg_mode,
        policy_loss=PolicyLossConfig(loss_mode=params.verl_loss_mode, **policy_loss),
        global_batch_info=dict(info),
        **actor,
    )


def verl_actor_config(params: VerlLossConfig, settings: SurrogateConfig, global_batch_info: Mapping[str, Any] | None):
    """The verl ``ActorConfig`` that verl's loss reads: this method's knobs, the shared settings and the call's
    global batch info (cached per distinct values; treat it as read-only)."""
    info = global_batch_kwargs(global_batch_info)
    return _actor_config(params, settings, tuple(sorted((k, _plain(v)) for k, v in info.items())))


def _plain(v: Any) -> Any:
    return v.item() if torch.is_tensor(v) and v.numel() == 1 else v


_KEPT_DIAGNOSTICS = ("approx_kl", "approx_kl_k3", "ratio_mean", "ratio_min", "ratio_max")


def verl_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    params: VerlLossConfig,
    settings: SurrogateConfig,
    *,
    rollout_is_weights: Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    token_inputs: Mapping[str, Tensor] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """verl's registered ``params.verl_loss_mode`` on neutral-padded inputs: its loss unchanged (``token_inputs``
    are not read: verl's policy losses receive none).

    Metrics: the ratio diagnostics of `clip_diagnostics` (approx_kl, approx_kl_k3, ratio_*, token_frac/<bucket>);
    the clip-fraction columns of the bounds methods, filled from the loss's gradient by `stopped_diagnostics`
    (clipfrac: stopped_frac; clipfrac_upper[/<bucket>]: stopped with A > 0; clipfrac_lower[/<bucket>]: stopped with
    A < 0; for a bounds method these are its clip fractions, dual clip included in clipfrac_lower); verl's own
    metrics as ``verl/<name>`` (e.g. ``verl/pg_clipfrac``). The gradient needs a graph: a ``log_prob`` without
    one (e.g. under ``torch.no_grad``) is replaced by a leaf copy and the loss comes back detached.
    """
    # lazy: verl's import, paid by a verl job only (see _actor_config)
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    no_grad = not (torch.is_grad_enabled() and log_prob.requires_grad)
    given = log_prob.detach().requires_grad_() if no_grad else log_prob  # the stopped tokens need a gradient
    with torch.enable_grad():
        old_log_prob, log_prob, advantages, rollout_is_weights = prepare_inputs(
            old_log_prob, given, advantages, response_mask, settings, rollout_is_weights
        )
        config = verl_actor_config(params, settings, global_batch_info)
        fn = get_policy_loss_fn(params.verl_loss_mode)
        loss, verl_metrics = fn(
            old_log_prob, log_prob, advantages, response_mask, settings.loss_agg_mode, config, rollout_is_weights
        )
    x = settings.log_ratio_clamp
    log_ratio = torch.clamp(log_prob.detach() - old_log_prob, min=-x, max=x)
    neutral = torch.ones_like(old_log_prob)
    diag = clip_diagnostics(old_log_prob, log_ratio, advantages, response_mask, neutral, neutral, None)
    metrics = {k: v for k, v in diag.items() if k in _KEPT_DIAGNOSTICS or k.startswith("token_frac/")}
    # the clip-fraction columns of the bounds methods, from the gradient: stopped tokens (stopped_diagnostics)
    stopped = stopped_diagnostics(loss_grad_wrt_log_prob(loss, given), advantages, old_log_prob, response_mask)
    for k, v in stopped.items():
        metrics[k.replace("stopped_frac_pos", "clipfrac_upper").replace("stopped_frac_neg", "clipfrac_lower")] = v
    metrics["clipfrac"] = metrics.pop("stopped_frac")
    for k, v in (verl_metrics or {}).items():
        metrics[f"verl/{k.removeprefix('actor/')}"] = torch.as_tensor(v, dtype=diag["approx_kl"].dtype).detach()
    return (loss.detach() if no_grad else loss), metrics


def _register(name: str, config: type[VerlLossConfig]) -> None:
    def loss(*args, **kwargs):
        return verl_loss(*args, **kwargs)

    loss.__name__ = loss.__qualname__ = f"verl_{name}_loss"
    loss.__doc__ = f"{DESCRIPTIONS[name]} (verl's {config.verl_loss_mode}, called through verl's registry)."
    register_verl_loss(name, config=config)(loss)


for _name, _config in VERL_METHODS.items():
    _register(_name, _config)
