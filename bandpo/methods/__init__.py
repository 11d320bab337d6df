"""Ratio-clipping methods as a registry, and the one PPO surrogate that every bound-based method shares.

A *method* is one of two kinds:

* **bounds** — a function ``(old_log_prob, response_mask, params) -> (lower, upper)`` that returns per-token ratio
  bounds. Every bounds method is trained by the same `ppo_surrogate`, so methods differ only in their bounds:
  GRPO, Clip-Higher, DCPO and BandPO are all bounds methods.
* **loss** — a whole policy loss ``(old_log_prob, log_prob, advantages, response_mask, params, settings, *,
  rollout_is_weights=None, global_batch_info=None, token_inputs=None) -> (loss, metrics)`` for methods that are not
  a clip interval around r (CISPO's stop-gradient weight, GSPO's sequence-level ratio, ...). It uses the same
  building blocks: `prepare_inputs` (checks, neutral padding), `aggregate_loss`, `clip_diagnostics`.
  ``token_inputs`` holds the per-token tensors a trainer has beyond the four every loss gets
  (`bandpo.methods.surrogate.TOKEN_INPUTS`: ``entropy``, the current policy's token entropy; ``rollout_log_prob``,
  the sampler's log-probs); a loss reads what it needs, and names in its config's ``requires`` what it cannot run
  without (the local trainer then computes it; verl, whose policy loss receives none, refuses the method). A loss
  written without the keyword is called without it.

Every method has one frozen dataclass of parameters (a `MethodConfig`): typed fields whose defaults are the paper's
settings, with validation that rejects unknown keys, wrong types, non-finite numbers and out-of-range values with a
message that names the method and the parameter. Shared loss settings (aggregation mode, dual clip c, log-ratio
clamp) are not per-method: they live in `SurrogateConfig`.

Built in (``list_methods()``)::

    grpo          bounds  [1 - 0.2, 1 + 0.2]
    clip_higher   bounds  [1 - 0.2, 1 + 0.28]                              (DAPO)
    dcpo          bounds  dynamic adaptive clipping, eps 0.16 / 0.20, r_hi capped at 10
    bandpo        bounds  Band operator (bandpo.methods.band), divergence kl | tv | chi2 | any registered one,
                          delta 0.05, r_hi capped at 10, relaxation off (relax: union with
                          [1 - 0.2, 1 + 0.28])
    bandpo_upper  bounds  [1 - 0.2, BandPO's r_hi]: Band's upper bound only (same divergence, delta, cap),
                          GRPO's fixed clip-low
    cispo         loss    -sg(clip(r, 1 - eps_low, 1 + eps_high)) * A * log pi        (token level)
    gspo          loss    PPO clip on the sequence ratio s = exp(mean_t log r_t)       (sequence level)
    luspo, vespo, two_sided_clip, top_entropy, offpolicy_mask
                  loss    the rules of TRL's GRPOConfig that act on the ratio or the token set
                          (`bandpo.methods.trl_rules`; TRL's aggregating loss types are loss_agg_modes there)
    tis_token, tis_seq, icepop
                  loss    verl's rollout-correction presets (bypass mode: truncated / masked importance weight;
                          `bandpo.methods.rollout_correction`)
    dppo_tv, dppo_kl, clip_cov, kl_cov, sapo, geo_mean, gpg, dro
                  verl    verl's own registered policy losses, called through verl's registry
                          (`bandpo.verl.losses`); in a verl run they are verl's own loss_mode

``python -m bandpo.methods`` lists every registered method with its kind, parameters, defaults and source, the
methods of your own modules too (``$BANDPO_METHOD_MODULES``, ``--method-module``: each with its file).

Adding a method = one registered function + one config dataclass, in this package or in a module of your own, then
one entry in the sweep config (``config/``): README.md, "Adding a method" (its worked example is
``tests/example_method.py``). A module of your own is named in the config's ``method_modules`` (a module name
importable from the repository root / ``PYTHONPATH``, or a ``.py`` file path relative to the repository root); the
workflow checks it at DAG start and passes it to every job in the environment variable ``BANDPO_METHOD_MODULES``
(``os.pathsep``-separated). Importing this package runs no user code: the modules are imported where a run starts
(`load_env_method_modules`: the trainer, the evaluation, verl's plugin in its driver and Ray workers; see
`bandpo.methods.user_modules`). By hand: ``python -m bandpo.train --method-module my_methods.py ...`` (or
``BANDPO_METHOD_MODULES=my_methods.py python -m bandpo.train ...``). A per-token bounds rule that needs computing
goes through `on_valid_tokens` (see `dcpo_bounds`); a whole loss is registered with
``@register_loss(name, config=...)`` (see `cispo_loss`). A bounds method's (lower, upper) must hold ratio 1
(lower <= 1 <= upper, no NaN) on every valid token: `ResolvedMethod.bounds` stops the run naming the method
otherwise.

A method is resolved once per run: ``resolve(name, params, settings)`` validates the name, the parameters and the
shared loss settings and returns a `ResolvedMethod` whose ``bounds`` / ``loss`` the trainers call per batch without
looking anything up again, and whose ``label`` is what leaderboards show (the trainer writes it into run.json as
``method_label``). `compute_bounds` / `compute_loss` are one-shot shortcuts (resolve, then call) for tests and
scripts.

The verl integration (`bandpo.verl.plugin`) registers every method of this registry in verl as
``bandpo.<name>``, including methods registered after it was imported (through `on_register`); verl's Ray workers
load a method of your own module from ``BANDPO_METHOD_MODULES`` (`bandpo.verl.command.VerlRun.method_modules`).

Where the bounds are computed
-----------------------------
Bounds depend on ``old_log_prob`` only, so they are constants of the rollout batch. `ResolvedMethod.bounds`
evaluates them once per rollout batch and on the valid tokens only (padding gets the neutral interval [1, 1]); the
local trainer slices the result per micro-batch and passes ``bounds=`` to `ResolvedMethod.loss`, which then skips
the bounds function.
verl calls a policy loss per micro-batch with no hook before it, so there the bounds are recomputed inside each
micro-batch call, still on the valid tokens only (elementwise, hence identical values; cheap next to the forward
pass).

Shapes: every token tensor is ``(batch, response_length)``; ``response_mask`` is bool or 0/1 of the same shape.

Modules (their names in `__all__` are re-exported here: ``from bandpo.methods import X`` / ``methods.X``)
--------------------------------------------------------------------------------------------------------
``config``        `MethodConfig` (typed, validated parameters), `SurrogateConfig`, `AGG_MODES`, `DEFAULT_DUAL_CLIP_C`
``registry``      `register_bounds` / `register_loss`, `get_method`, `list_methods`, `make_config`, `resolve`,
                  `ResolvedMethod`, `compute_bounds` / `compute_loss`
``user_modules``  `load_method_modules`, `load_env_method_modules`, `loaded_method_modules`, `method_module_of`
``surrogate``     `ppo_surrogate` and the building blocks of a method: `on_valid_tokens`, `constant_bounds`,
                  `prepare_inputs`, `aggregate_loss`, `check_shapes`, `check_bounds`, `global_batch_kwargs`
``builtin``       the built-in methods, each its config dataclass beside its function (`GRPOConfig` and
                  `fixed_clip_bounds`, ..., `GSPOConfig` and `gspo_loss`)
``trl_rules``     TRL's GRPOConfig rules (`LUSPOConfig` and `luspo_loss`, ...), `TRL_LOSS_AGGREGATION`
``rollout_correction``  verl's rollout-correction presets (`TISConfig`, `SeqTISConfig`, `IcePopConfig`)
``band``          the Band operator's math (`band_bounds`, the divergences)
``diagnostics``   `clip_diagnostics`, `stopped_diagnostics`, `BUCKET_EDGES`, `BUCKET_LABELS`
"""

from bandpo.methods.builtin import (
    BandPOConfig,
    BandPOUpperConfig,
    CISPOConfig,
    ClipHigherConfig,
    DCPOConfig,
    GRPOConfig,
    GSPOConfig,
    bandpo_bounds,
    bandpo_upper_bounds,
    cispo_loss,
    dcpo_bounds,
    fixed_clip_bounds,
    gspo_loss,
)
from bandpo.methods.config import AGG_MODES, DEFAULT_DUAL_CLIP_C, MethodConfig, SurrogateConfig
from bandpo.methods.diagnostics import (
    BUCKET_EDGES,
    BUCKET_LABELS,
    clip_diagnostics,
    loss_grad_wrt_log_prob,
    stopped_diagnostics,
)
from bandpo.methods.registry import (
    Method,
    ResolvedMethod,
    compute_bounds,
    compute_loss,
    get_method,
    list_methods,
    make_config,
    on_register,
    register_bounds,
    register_loss,
    register_verl_loss,
    resolve,
)
from bandpo.methods.surrogate import aggregate_loss, constant_bounds, on_valid_tokens, ppo_surrogate, prepare_inputs
from bandpo.methods.user_modules import (
    METHOD_MODULES_ENV,
    load_env_method_modules,
    load_method_modules,
    loaded_method_modules,
    method_module_of,
)

__all__ = [
    "AGG_MODES",
    "BUCKET_EDGES",
    "BUCKET_LABELS",
    "DEFAULT_DUAL_CLIP_C",
    "BandPOConfig",
    "BandPOUpperConfig",
    "CISPOConfig",
    "ClipHigherConfig",
    "DCPOConfig",
    "GRPOConfig",
    "GSPOConfig",
    "METHOD_MODULES_ENV",
    "Method",
    "MethodConfig",
    "ResolvedMethod",
    "SurrogateConfig",
    "aggregate_loss",
    "bandpo_bounds",
    "bandpo_upper_bounds",
    "cispo_loss",
    "clip_diagnostics",
    "compute_bounds",
    "compute_loss",
    "constant_bounds",
    "dcpo_bounds",
    "fixed_clip_bounds",
    "get_method",
    "gspo_loss",
    "list_methods",
    "load_env_method_modules",
    "load_method_modules",
    "loaded_method_modules",
    "loss_grad_wrt_log_prob",
    "make_config",
    "method_module_of",
    "on_register",
    "on_valid_tokens",
    "ppo_surrogate",
    "prepare_inputs",
    "register_bounds",
    "register_loss",
    "register_verl_loss",
    "resolve",
    "stopped_diagnostics",
]
