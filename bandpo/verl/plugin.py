"""verl integration: every method of `bandpo.methods` as a verl policy loss named ``bandpo.<method>``.

No fork of verl and no monkey-patching: the losses go through verl's public registry
(``verl.trainer.ppo.core_algos.register_policy_loss``) when this module is imported, and verl imports it itself:

* **entry point** (verl >= 0.9): ``pip install`` of this package declares, in pyproject.toml,
  ``[project.entry-points."verl.plugins"] bandpo = "bandpo.verl.plugin"``. ``import verl`` loads every entry point
  of the ``verl.plugins`` group (``VERL_USE_EXTERNAL_PLUGINS``: ``auto`` by default, ``none`` or a list of entry
  point names) by ``EntryPoint.load()``, i.e. by importing this module: so the entry point names the module, not
  a function. Every Ray worker imports verl too, so the workers get the losses without anything else. verl
  swallows plugin import errors (logged at DEBUG): if ``bandpo.*`` is missing from verl's
  "Supported modes", run ``python -c "import bandpo.verl.plugin"`` to see the error.
* **fallback** (older verl, or entry points disabled): ``VERL_USE_EXTERNAL_MODULES=bandpo.verl.plugin``, which
  verl imports at ``import verl`` and whose errors are not swallowed. `bandpo.verl.command` sets it for the driver
  and, through Ray's runtime_env, for the workers.

Selecting a method in a verl run: ``actor_rollout_ref.actor.policy_loss.loss_mode=bandpo.<method>``; a method of
kind "verl" (`bandpo.verl.losses`: dppo_kl, clip_cov, ...) is verl's own loss and runs as verl's own
``loss_mode`` (``dppo_kl``, ...) with its parameters as verl's config keys (`bandpo.verl.command.VerlRun`); it is
not registered as ``bandpo.<method>``.

Parameters. verl's ``PolicyLossConfig`` is a closed dataclass (Hydra rejects new keys under ``policy_loss``), so a
method's own parameters travel in the environment variable ``BANDPO_METHOD_CONFIG``: either inline JSON or the path
of a JSON / YAML file, holding ``{"<method>": {<params>}}`` (several methods allowed). Without it the method runs
with its defaults (the paper's settings). `bandpo.verl.command` puts it into
``ray_kwargs.ray_init.runtime_env.env_vars`` so that every Ray worker sees it. The shared loss settings come from
verl's own actor config, as for verl's built-in losses: ``loss_agg_mode``, ``clip_ratio_c`` (the dual clip c;
``bandpo.methods.DEFAULT_DUAL_CLIP_C`` when absent),
``global_batch_info`` (data-parallel normalisation); ``clip_ratio*`` are not used by these losses.

Resolved once. Each ``bandpo.<method>`` loss resolves its method (`bandpo.methods.resolve`: name, parameters of
``BANDPO_METHOD_CONFIG``, verl's ``loss_agg_mode`` and ``clip_ratio_c``) on its first call in a process and keeps
the `ResolvedMethod`; later micro-batches with the same settings only look it up (a new resolution happens only if
those settings change, e.g. a test switching ``loss_agg_mode``).

Methods of your own modules. ``BANDPO_METHOD_MODULES`` (set by `bandpo.verl.command.VerlRun.method_modules` in the
driver's environment and in Ray's runtime_env) is read when this module is imported (`bandpo.methods` itself imports
no user code): so verl's driver and every Ray worker register those methods too, under ``bandpo.<name>``.

Bounds in verl. verl calls the policy loss once per micro-batch and offers no hook per rollout batch, so a bounds
method computes its bounds inside each call from that micro-batch's ``old_log_prob``, on its valid tokens only
(`bandpo.methods.on_valid_tokens`). Bounds are elementwise in old_log_prob, so the values are those of a
once-per-batch computation; only the (small) cost repeats per micro-batch and PPO epoch. The suite's local trainer
computes them once per rollout batch (`bandpo.methods.ResolvedMethod.bounds`) instead.

TRL beside verl. verl 0.9.1 patches TRL's value-head model whenever TRL is installed (its
``apply_monkey_patch``, when an actor builds its model), importing ``AutoModelForCausalLMWithValueHead`` from
``trl.experimental.ppo`` or ``trl``; TRL 1.16 (this project's ``dev`` and ``bench`` extras) ships neither, so every
verl actor failed to start in an environment that has TRL. No model can be an instance of a class TRL does not ship,
so the patch has nothing to do there: `_trl_value_head_available` replaces verl's ``is_trl_available`` (the one
adjustment of verl's code this module makes) and answers True only when TRL ships that class.

Metrics: verl's usual ``actor/pg_clipfrac``, ``actor/ppo_kl``, ``actor/pg_clipfrac_lower`` (dual clip), plus every
diagnostic of `bandpo.methods.clip_diagnostics` under ``actor/bandpo/``; one host sync per call for all of them.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

import torch
import yaml
from torch import Tensor

from bandpo import methods

try:
    import verl.utils.import_utils as verl_import_utils
    from verl.trainer.ppo import core_algos
except ImportError as e:  # pragma: no cover - verl is a dependency of the package
    raise ImportError(f"bandpo.verl.plugin needs verl >= 0.9 (verl.trainer.ppo.core_algos): {e}") from e

__all__ = [
    "ENV_VAR",
    "METRIC_PREFIX",
    "PREFIX",
    "load_method_configs",
    "method_config",
    "register_all",
    "registered_names",
    "resolved_method",
    "verl_loss_name",
    "verl_policy_loss",
]

ENV_VAR = "BANDPO_METHOD_CONFIG"
PREFIX = "bandpo."
# verl callers assume "actor/..." metric names (its distillation loss rewrites the "actor/" prefix).
METRIC_PREFIX = "actor/bandpo/"
logger = logging.getLogger(__name__)


def verl_loss_name(method: str) -> str:
    """verl's name of a suite method: ``bandpo.<method>`` (verl already owns e.g. ``gspo`` and ``cispo``), except a
    method of kind "verl" (`bandpo.verl.losses`), which is verl's own loss: its verl loss_mode."""
    m = methods.get_method(method)  # validates the name
    if m.kind == "verl":
        return m.config_cls.verl_loss_mode
    return PREFIX + method


# ----------------------------------------------------------------------------------------------------------------
# Method parameters from BANDPO_METHOD_CONFIG


@functools.lru_cache(maxsize=16)
def _parse(raw: str) -> dict[str, dict[str, Any]]:
    text = raw.strip()
    if text.startswith("{"):
        source = f"${ENV_VAR} (inline JSON)"
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{source} is not valid JSON: {e}") from None
    else:
        source = f"${ENV_VAR} file {text!r}"
        if not os.path.isfile(text):
            raise ValueError(f"{source} does not exist (expected inline JSON or the path of a JSON/YAML file)")
        with open(text, encoding="utf-8") as fh:
            content = fh.read()
        if text.endswith((".yaml", ".yml")):
            data = yaml.safe_load(content)
        else:
            try:
                data = json.loads(content)
            except json.JSONDecodeError as e:
                raise ValueError(f"{source} is not valid JSON: {e}") from None
    if not isinstance(data, Mapping) or not all(isinstance(v, Mapping) or v is None for v in data.values()):
        raise ValueError(f"{source} must map method names to parameter mappings, e.g. {{'bandpo': {{'delta': 0.05}}}}")
    unknown = [k for k in data if k not in methods.list_methods()]
    if unknown:
        raise ValueError(f"{source} names unknown method(s) {unknown}; valid: {', '.join(methods.list_methods())}")
    return {k: dict(v or {}) for k, v in data.items()}


def load_method_configs(raw: str | None = None) -> dict[str, dict[str, Any]]:
    """The ``{method: params}`` mapping of ``raw`` (default: the environment variable); {} when unset."""
    raw = os.environ.get(ENV_VAR) if raw is None else raw
    if not raw or not raw.strip():
        return {}
    return _parse(raw)


def method_config(method: str, raw: str | None = None) -> methods.MethodConfig:
    """Validated parameters of ``method`` for this process: its entry in BANDPO_METHOD_CONFIG, or its defaults.

    A BANDPO_METHOD_CONFIG that is set but has no entry for ``method`` is an error (the run would silently use
    other parameters than the sweep asked for).
    """
    configs = load_method_configs(raw)
    if not configs:
        _warn_defaults(method)
    elif method not in configs:
        raise ValueError(
            f"${ENV_VAR} has parameters for {sorted(configs)} but the loss is {verl_loss_name(method)!r}; "
            f"add a {method!r} entry (it may be empty for the defaults)"
        )
    return _cached_config(method, json.dumps(configs.get(method, {}), sort_keys=True))


@functools.cache
def _warn_defaults(method: str) -> None:
    logger.warning("$%s is not set: %s%s runs with its default parameters", ENV_VAR, PREFIX, method)


@functools.lru_cache(maxsize=64)
def _cached_config(method: str, params_json: str) -> methods.MethodConfig:
    return methods.make_config(method, json.loads(params_json))


@functools.lru_cache(maxsize=64)
def resolved_method(method: str, raw: str | None, loss_agg_mode: str, dual_clip_c: float | None):
    """``method`` resolved with its BANDPO_METHOD_CONFIG parameters (``raw``: the variable's value) and verl's loss
    settings; cached, so a run resolves each method once."""
    settings = methods.SurrogateConfig(loss_agg_mode=loss_agg_mode, dual_clip_c=dual_clip_c)
    return methods.resolve(method, method_config(method, raw or ""), settings)


# ----------------------------------------------------------------------------------------------------------------
# The verl policy losses


def _dual_clip_c(config: Any) -> float | None:
    """verl's clip_ratio_c; the project's default (`bandpo.methods.DEFAULT_DUAL_CLIP_C`) when the config lacks it."""
    if config is None:
        return methods.DEFAULT_DUAL_CLIP_C
    return config.get("clip_ratio_c", methods.DEFAULT_DUAL_CLIP_C)


def _global_batch_info(config: Any) -> dict[str, Any]:
    # verl's ppo_loss fills dp_size / batch_num_tokens / global_batch_size / loss_scale_factor per micro-batch.
    info = config.get("global_batch_info", None) if config is not None else None
    return dict(info or {})


def _verl_metrics(metrics: Mapping[str, Tensor]) -> dict[str, float]:
    keys = list(metrics)
    values = torch.stack([metrics[k].detach().float().reshape(()) for k in keys]).tolist()  # one host sync
    out = {f"{METRIC_PREFIX}{k}": v for k, v in zip(keys, values, strict=True)}
    out["actor/pg_clipfrac"] = out[f"{METRIC_PREFIX}clipfrac"]
    out["actor/ppo_kl"] = out[f"{METRIC_PREFIX}approx_kl"]
    out["actor/pg_clipfrac_lower"] = out[f"{METRIC_PREFIX}clipfrac_dual"]
    return out


def verl_policy_loss(method: str):
    """The verl policy-loss function of ``method`` (verl's ``PolicyLossFn`` signature)."""
    if methods.get_method(method).kind == "verl":
        raise ValueError(f"method {method!r} is verl's own loss: use verl's loss_mode {verl_loss_name(method)!r}")

    def policy_loss(
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str = "seq-mean-token-mean",
        config: Any = None,
        rollout_is_weights: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        resolved = resolved_method(method, os.environ.get(ENV_VAR), loss_agg_mode, _dual_clip_c(config))
        loss, metrics = resolved.loss(
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            rollout_is_weights=rollout_is_weights,
            global_batch_info=_global_batch_info(config),
        )
        return loss, _verl_metrics(metrics)

    policy_loss.__name__ = f"bandpo_{method}_policy_loss"
    policy_loss.__qualname__ = policy_loss.__name__
    policy_loss.__doc__ = (
        f"verl policy loss {PREFIX}{method}: the loss of `bandpo.methods.resolve('{method}', ...)` with the parameters "
        f"of ${ENV_VAR} and verl's loss_agg_mode / clip_ratio_c / global_batch_info.\n\n"
        "Shapes: old_log_prob, log_prob, advantages, response_mask, rollout_is_weights are (batch, response_length)."
    )
    return policy_loss


def _register_in_verl(method: methods.Method) -> None:
    if method.kind == "verl":  # verl's own loss: a verl run uses its own loss_mode (verl_loss_name)
        return
    core_algos.register_policy_loss(PREFIX + method.name)(verl_policy_loss(method.name))


def _own_methods() -> list[str]:
    return [m for m in methods.list_methods() if methods.get_method(m).kind != "verl"]


def register_all() -> list[str]:
    """Register every suite method in verl's registry (idempotent); returns the verl names. The methods of kind
    "verl" are verl's own losses and are not registered again: they run as verl's own loss_mode."""
    for method in _own_methods():
        _register_in_verl(methods.get_method(method))
    return [PREFIX + m for m in _own_methods()]


def registered_names() -> list[str]:
    """The ``bandpo.*`` names present in verl's registry of this process."""
    return sorted(n for n in core_algos.POLICY_LOSS_REGISTRY if n.startswith(PREFIX))


def _trl_value_head_available() -> bool:
    """Whether TRL is installed and ships the value-head model verl patches (``verl.utils.import_utils``'s
    ``is_trl_available`` asks only whether TRL is installed); see the module docstring, "TRL beside verl"."""
    if importlib.util.find_spec("trl") is None:
        return False
    for module in ("trl.experimental.ppo", "trl"):
        try:
            if hasattr(importlib.import_module(module), "AutoModelForCausalLMWithValueHead"):
                return True
        except ImportError:
            continue
    return False


def _patch_trl_check() -> None:
    """verl's modules that imported ``is_trl_available`` by name get `_trl_value_head_available` (cached: TRL's
    import is paid once, and only where verl asks)."""
    check = functools.cache(_trl_value_head_available)
    verl_import_utils.is_trl_available = check
    for name in ("verl.models.transformers.monkey_patch", "verl.utils.model"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "is_trl_available"):
            module.is_trl_available = check


_patch_trl_check()
register_all()
methods.on_register(_register_in_verl)  # methods registered later reach verl too
# verl's driver and every Ray worker import this module before they look a loss up: the start of a run on verl's side,
# where the methods of the user's own modules ($BANDPO_METHOD_MODULES, set by VerlRun) are imported and registered.
methods.load_env_method_modules()
