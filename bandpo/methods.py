"""Ratio-clipping methods as a registry, and the one PPO surrogate that every bound-based method shares.

A *method* is one of two kinds:

* **bounds** — a function ``(old_log_prob, response_mask, params) -> (lower, upper)`` that returns per-token ratio
  bounds. Every bounds method is trained by the same `ppo_surrogate`, so methods differ only in their bounds:
  GRPO, Clip-Higher, DCPO and BandPO are all bounds methods.
* **loss** — a whole policy loss ``(old_log_prob, log_prob, advantages, response_mask, params, settings, *,
  rollout_is_weights=None, global_batch_info=None) -> (loss, metrics)`` for methods that are not a clip interval
  around r (CISPO's stop-gradient weight, GSPO's sequence-level ratio, ...). It uses the same building blocks:
  `prepare_inputs` (checks, neutral padding), `aggregate_loss`, `clip_diagnostics`.

Every method has one frozen dataclass of parameters (a `MethodConfig`): typed fields whose defaults are the paper's
settings, with validation that rejects unknown keys, wrong types, non-finite numbers and out-of-range values with a
message that names the method and the parameter. Shared loss settings (aggregation mode, dual clip c, log-ratio
clamp) are not per-method: they live in `SurrogateConfig`.

Built in (``list_methods()``)::

    grpo          bounds  [1 - 0.2, 1 + 0.2]
    clip_higher   bounds  [1 - 0.2, 1 + 0.28]                              (DAPO)
    dcpo          bounds  dynamic adaptive clipping, eps 0.16 / 0.20, r_hi capped at 10
    bandpo        bounds  Band operator (bandpo.band), divergence kl | tv | chi2 | any registered one,
                          delta 0.05, r_hi capped at 10, relaxation off (relax: union with
                          [1 - 0.2, 1 + 0.28])
    cispo         loss    -sg(clip(r, 1 - eps_low, 1 + eps_high)) * A * log pi        (token level)
    gspo          loss    PPO clip on the sequence ratio s = exp(mean_t log r_t)       (sequence level)

Adding a method = one registered function + one config dataclass, in this module or in a module of your own, then
one entry in the sweep config (``config/``). A module of your own is named in the config's ``method_modules`` (a
module name importable from the repository root / ``PYTHONPATH``, or a ``.py`` file path relative to the repository
root); the workflow checks it at DAG start and passes it to every job in the environment variable
``BANDPO_METHOD_MODULES`` (``os.pathsep``-separated), which this module imports at the end of its own import
(`load_method_modules`): so the trainer, the evaluation, the report and verl's driver and Ray workers all see it.
By hand: ``BANDPO_METHOD_MODULES=my_methods.py python -m bandpo.train ...`` (or ``--method-module``)::

    @dataclass(frozen=True)
    class HalfClipConfig(MethodConfig):
        \"\"\"eps: half-width of the fixed interval (default 0.1).\"\"\"
        label_fields = ("eps",)  # leaderboards show eps=... even at its default
        eps: float = 0.1

        def validate(self) -> None:
            self.require(0.0 < self.eps < 1.0, "eps", "must be in (0, 1)")

    @register_bounds("half_clip", config=HalfClipConfig)
    def half_clip_bounds(old_log_prob, response_mask, params):
        \"\"\"Fixed clip [1 - eps, 1 + eps].\"\"\"  # its first line is the method's description
        return constant_bounds(old_log_prob, response_mask, 1.0 - params.eps, 1.0 + params.eps)

A per-token bounds rule that needs computing goes through `on_valid_tokens` (see `dcpo_bounds`); a whole loss
is registered with ``@register_loss(name, config=...)`` (see `cispo_loss`).

A method is resolved once per run: ``resolve(name, params, settings)`` validates the name, the parameters and the
shared loss settings and returns a `ResolvedMethod` whose ``bounds`` / ``loss`` the trainers call per batch without
looking anything up again, and whose ``label`` is what leaderboards show (the trainer writes it into run.json as
``method_label``). `compute_bounds` / `compute_loss` are one-shot shortcuts (resolve, then call) for tests and
scripts.

The verl integration (`bandpo.verl_plugin`) registers every method of this registry in verl as
``bandpo.<name>``, including methods registered after it was imported (through `on_register`); verl's Ray workers
see a method of your own module through ``BANDPO_METHOD_MODULES`` (`bandpo.verl_command.VerlRun.method_modules`).

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
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import math
import os
import sys
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from bandpo.band import band_bounds, list_divergences
from bandpo.options import allowed_types, unknown_names

__all__ = [
    "AGG_MODES",
    "BUCKET_EDGES",
    "BUCKET_LABELS",
    "BandPOConfig",
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
    "load_method_modules",
    "loaded_method_modules",
    "make_config",
    "on_register",
    "on_valid_tokens",
    "ppo_surrogate",
    "prepare_inputs",
    "register_bounds",
    "register_loss",
    "resolve",
]

AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
BUCKET_EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
BUCKET_LABELS = tuple(f"p{lo:.1f}-{hi:.1f}" for lo, hi in zip(BUCKET_EDGES[:-1], BUCKET_EDGES[1:], strict=True))
_GLOBAL_BATCH_KEYS = ("dp_size", "batch_num_tokens", "global_batch_size", "loss_scale_factor")


# ----------------------------------------------------------------------------------------------------------------
# Typed, validated configs


@dataclass(frozen=True)
class MethodConfig:
    """Base class of every method's parameters: a frozen dataclass, type-checked and validated on construction.

    Field types supported: ``float``, ``int``, ``bool``, ``str`` and ``X | None``. Ints are accepted for floats;
    bools are never accepted as numbers; floats must be finite. Subclasses add range checks in `validate`, and name
    in ``label_fields`` the parameters that identify a variant (shown in leaderboards even at their defaults).
    """

    label_fields: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        hints = _type_hints(type(self))
        for f in fields(self):
            object.__setattr__(self, f.name, self._coerce(f.name, getattr(self, f.name), hints[f.name]))
        self.validate()

    def validate(self) -> None:
        """Range checks; raise through `require`."""

    def require(self, ok: bool, name: str, message: str) -> None:
        if not ok:
            raise ValueError(f"{self._label()}: parameter {name!r} = {getattr(self, name)!r} {message}")

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | MethodConfig | None = None):
        """Build from a mapping (e.g. a YAML entry); unknown keys raise ValueError with close matches."""
        if isinstance(params, cls):
            return params
        if isinstance(params, MethodConfig):
            raise TypeError(f"{cls.__name__}: expected {cls.__name__} or a mapping, got {type(params).__name__}")
        if not isinstance(params, (Mapping, type(None))):
            raise TypeError(f"{cls.__name__}: parameters must be a mapping, got {type(params).__name__}")
        params = dict(params or {})
        known = [f.name for f in fields(cls)]
        unknown = [k for k in params if k not in known]
        if unknown:
            detail = unknown_names(unknown, known)
            raise ValueError(f"{cls._label()}: unknown parameter(s) {detail}; valid: {', '.join(known) or 'none'}")
        return cls(**params)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def label(self) -> str:
        """Short human label: the ``label_fields``, then every other parameter that differs from its default
        (``"divergence=kl, delta=0.05"``, ``"eps_low=0.2, eps_high=0.28"``), except those `inactive_fields` names;
        "" when there is nothing to show."""
        values, defaults = self.to_dict(), type(self)().to_dict()
        inactive = set(self.inactive_fields())
        shown = [k for k in self.label_fields if k in values]
        shown += [k for k in sorted(values) if k not in shown and k not in inactive and values[k] != defaults[k]]
        return ", ".join(f"{k}={values[k]}" for k in shown)

    def inactive_fields(self) -> tuple[str, ...]:
        """Parameters that have no effect with these values (left out of `label`); none by default."""
        return ()

    @classmethod
    def _label(cls) -> str:
        return cls.__name__

    def _coerce(self, name: str, value: Any, hint: Any) -> Any:
        allowed = allowed_types(hint)
        if value is None:
            if type(None) in allowed:
                return None
            raise ValueError(f"{self._label()}: parameter {name!r} must not be None")
        if isinstance(value, bool):
            if bool in allowed:
                return value
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            if float in allowed:
                if not math.isfinite(value):
                    raise ValueError(f"{self._label()}: parameter {name!r} must be finite, got {value!r}")
                return float(value)
            if int in allowed and isinstance(value, int):
                return value
        elif isinstance(value, str) and str in allowed:
            return value
        names = " or ".join("None" if t is type(None) else t.__name__ for t in allowed)
        raise ValueError(f"{self._label()}: parameter {name!r} must be {names}, got {type(value).__name__} {value!r}")


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@dataclass(frozen=True)
class SurrogateConfig(MethodConfig):
    """Loss settings shared by all methods (not per method).

    Attributes:
        loss_agg_mode: token-mean | token-sum | seq-mean-token-mean (the paper) | seq-mean-token-sum |
            seq-mean-token-sum-norm (Dr. GRPO).
        dual_clip_c: dual-clip constant c for A < 0 (paper: 10); None disables; must be > 1.
        log_ratio_clamp: log r is clamped to [-x, x] before exp (verl: 20).
        check_finite: raise ValueError when log_prob / old_log_prob / advantages are NaN or inf on a valid token
            (one host sync per call); padding may hold anything either way.
    """

    loss_agg_mode: str = "seq-mean-token-mean"
    dual_clip_c: float | None = 10.0
    log_ratio_clamp: float = 20.0
    check_finite: bool = True

    def validate(self) -> None:
        self.require(self.loss_agg_mode in AGG_MODES, "loss_agg_mode", f"must be one of {', '.join(AGG_MODES)}")
        self.require(self.dual_clip_c is None or self.dual_clip_c > 1.0, "dual_clip_c", "must be > 1 or None")
        self.require(self.log_ratio_clamp > 0.0, "log_ratio_clamp", "must be > 0")


def _check_eps(cfg: MethodConfig, low: str = "eps_low", high: str = "eps_high") -> None:
    cfg.require(0.0 < getattr(cfg, low) <= 1.0, low, "must be in (0, 1] (the lower bound 1 - eps_low is >= 0)")
    cfg.require(getattr(cfg, high) > 0.0, high, "must be > 0")


@dataclass(frozen=True)
class GRPOConfig(MethodConfig):
    """Canonical PPO/GRPO clip [1 - eps_low, 1 + eps_high]; defaults 0.2 / 0.2."""

    label_fields = ("eps_low", "eps_high")

    eps_low: float = 0.2
    eps_high: float = 0.2

    def validate(self) -> None:
        _check_eps(self)


@dataclass(frozen=True)
class ClipHigherConfig(GRPOConfig):
    """Clip-Higher (DAPO): [1 - eps_low, 1 + eps_high] with defaults 0.2 / 0.28."""

    eps_low: float = 0.2
    eps_high: float = 0.28


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


@dataclass(frozen=True)
class BandPOConfig(MethodConfig):
    """BandPO: the Band operator's exact trust-region bounds.

    Attributes:
        divergence: a registered divergence (`bandpo.band.list_divergences()`): kl (paper), tv, chi2, or your own.
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
        divs = list_divergences()
        self.require(self.divergence in divs, "divergence", f"is not registered; valid: {', '.join(divs)}")
        self.require(self.delta > 0.0, "delta", "must be > 0")
        self.require(self.cap is None or self.cap > 1.0, "cap", "must be > 1 or None")
        _check_eps(self, "relax_eps_low", "relax_eps_high")


@dataclass(frozen=True)
class CISPOConfig(MethodConfig):
    """CISPO (MiniMax-M1) weight clip [1 - eps_low, 1 + eps_high].

    The BandPO paper does not run CISPO. Defaults: eps_low = 1.0, i.e. no lower bound on the weight, as MiniMax-M1
    describes; eps_high = 0.28, the Clip-Higher value (MiniMax-M1 tunes it per setting).
    """

    label_fields = ("eps_low", "eps_high")

    eps_low: float = 1.0
    eps_high: float = 0.28

    def validate(self) -> None:
        _check_eps(self)


@dataclass(frozen=True)
class GSPOConfig(MethodConfig):
    """GSPO clip on the length-normalised sequence ratio; defaults 3e-4 / 4e-4 (the GSPO paper's)."""

    label_fields = ("eps_low", "eps_high")

    eps_low: float = 3e-4
    eps_high: float = 4e-4

    def validate(self) -> None:
        _check_eps(self)


# ----------------------------------------------------------------------------------------------------------------
# Registry

BoundsFn = Callable[[Tensor, Tensor, Any], tuple[Tensor, Tensor]]
LossFn = Callable[..., tuple[Tensor, dict[str, Tensor]]]


@dataclass(frozen=True)
class Method:
    """A registered method: its name, kind ("bounds" or "loss"), function and config class."""

    name: str
    kind: str
    fn: Callable[..., Any]
    config_cls: type[MethodConfig]

    @property
    def description(self) -> str:
        doc = (self.fn.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    def config(self, params: Mapping[str, Any] | MethodConfig | None = None) -> MethodConfig:
        """The validated parameters: defaults overridden by ``params`` (a mapping or a ``config_cls`` instance)."""
        if isinstance(params, MethodConfig) and not isinstance(params, self.config_cls):
            raise TypeError(
                f"method {self.name!r} takes {self.config_cls.__name__} or a mapping, got {type(params).__name__}"
            )
        try:
            return self.config_cls.from_params(params)
        except ValueError as e:
            raise ValueError(f"method {self.name!r}: {e}") from None


_METHODS: dict[str, Method] = {}
_REGISTRATION_HOOKS: list[Callable[[Method], None]] = []


def _register(kind: str, name: str, config: type[MethodConfig]):
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(f"method name must be a non-empty string of letters, digits, '_' or '-', got {name!r}")
    if not (isinstance(config, type) and issubclass(config, MethodConfig)):
        raise TypeError(f"method {name!r}: config must be a MethodConfig subclass, got {config!r}")

    def decorator(fn):
        method = Method(name=name, kind=kind, fn=fn, config_cls=config)
        old = _METHODS.get(name)
        if old is not None and (old.fn.__module__, old.fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(
                f"method {name!r} is already registered (by {old.fn.__module__}.{old.fn.__qualname__}); "
                "choose another name"
            )
        _METHODS[name] = method
        for hook in _REGISTRATION_HOOKS:
            hook(method)
        return fn

    return decorator


def on_register(hook: Callable[[Method], None]) -> Callable[[Method], None]:
    """Call ``hook(method)`` for every method registered from now on (used by `bandpo.verl_plugin`)."""
    _REGISTRATION_HOOKS.append(hook)
    return hook


def register_bounds(name: str, config: type[MethodConfig]):
    """Decorator: register ``fn(old_log_prob, response_mask, params) -> (lower, upper)`` as a bounds method."""
    return _register("bounds", name, config)


def register_loss(name: str, config: type[MethodConfig]):
    """Decorator: register a whole-loss method (signature in the module docstring)."""
    return _register("loss", name, config)


def list_methods(kind: str | None = None) -> list[str]:
    """Registered method names, sorted; ``kind`` = "bounds" or "loss" filters."""
    if kind not in (None, "bounds", "loss"):
        raise ValueError(f"kind must be 'bounds', 'loss' or None, got {kind!r}")
    return sorted(n for n, m in _METHODS.items() if kind is None or m.kind == kind)


def get_method(name: str) -> Method:
    """The registered method ``name``; ValueError with the valid choices otherwise."""
    try:
        return _METHODS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown method {unknown_names([name], list(_METHODS))}; valid: {', '.join(list_methods())}"
        ) from None


def make_config(method: str, params: Mapping[str, Any] | MethodConfig | None = None) -> MethodConfig:
    """Validated parameters of ``method``: its defaults overridden by ``params``."""
    return get_method(method).config(params)


# ----------------------------------------------------------------------------------------------------------------
# Methods defined outside bandpo/

METHOD_MODULES_ENV = "BANDPO_METHOD_MODULES"
_LOADED_MODULES: dict[str, Any] = {}


def _split_specs(specs: Iterable[str] | str | None) -> list[str]:
    if specs is None:
        return []
    if isinstance(specs, str):
        specs = specs.split(os.pathsep)
    return [s.strip() for s in specs if s and s.strip()]


def load_method_modules(specs: Iterable[str] | str | None, root: str | os.PathLike | None = None) -> list[str]:
    """Import the user modules that register methods (each once per process); returns the methods they added.

    ``specs``: module names (``my_methods``, ``pkg.methods``; importable from ``sys.path``) or paths of ``.py``
    files (relative ones against ``root``, default the working directory), as a list or one
    ``os.pathsep``-separated string (the form of ``$BANDPO_METHOD_MODULES``). A module that cannot be found or
    fails to import raises ImportError naming it.
    """
    before = set(_METHODS)
    for spec in _split_specs(specs):
        if spec.endswith(".py"):
            path = Path(spec) if Path(spec).is_absolute() else Path(root or os.getcwd()) / spec
            key = str(path.resolve())
            if key in _LOADED_MODULES:
                continue
            if not path.is_file():
                raise ImportError(f"method module {spec!r}: file not found ({path})")
            name = f"bandpo_method_module_{path.stem}_{hashlib.sha256(key.encode()).hexdigest()[:8]}"
            module_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            try:
                module_spec.loader.exec_module(module)
            except Exception as e:
                del sys.modules[name]
                raise ImportError(f"method module {spec!r} ({path}) failed to import: {type(e).__name__}: {e}") from e
            _LOADED_MODULES[key] = module
        else:
            if spec in _LOADED_MODULES:
                continue
            try:
                _LOADED_MODULES[spec] = importlib.import_module(spec)
            except ImportError as e:
                raise ImportError(
                    f"method module {spec!r} is not importable ({e}); give a module on sys.path / PYTHONPATH or "
                    "the path of a .py file"
                ) from e
    return sorted(set(_METHODS) - before)


def loaded_method_modules() -> list[str]:
    """The user modules imported by `load_method_modules` in this process (names, or absolute file paths)."""
    return list(_LOADED_MODULES)


# ----------------------------------------------------------------------------------------------------------------
# A method resolved once


@dataclass(frozen=True)
class ResolvedMethod:
    """A registered method with its validated parameters and loss settings: resolved once per run by `resolve`,
    then called per batch (no name lookup or validation on the way).

    Attributes:
        method: the registry entry (name, kind, function, config class).
        params: the method's validated parameters.
        settings: the shared loss settings (aggregation, dual clip, clamp).
    """

    method: Method
    params: MethodConfig
    settings: SurrogateConfig

    @property
    def name(self) -> str:
        return self.method.name

    @property
    def has_bounds(self) -> bool:
        """True for a bounds method (its loss is `ppo_surrogate` with its bounds), False for a whole loss."""
        return self.method.kind == "bounds"

    @property
    def label(self) -> str:
        """The parameters as leaderboards show them (`MethodConfig.label`), e.g. ``"divergence=kl, delta=0.05"``."""
        return self.params.label()

    def bounds(self, old_log_prob: Tensor, response_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Ratio bounds for a whole rollout batch, once, on the valid tokens only.

        Returns (lower, upper) of the shape of ``old_log_prob``, no gradient, [1, 1] on padding. Slice them with
        the batch and pass ``bounds=`` to `loss` in each micro-batch.
        """
        if not self.has_bounds:
            raise ValueError(f"method {self.name!r} is a whole-loss method: it has no ratio bounds")
        _check_shapes(response_mask, old_log_prob=old_log_prob)
        with torch.no_grad():
            lower, upper = self.method.fn(old_log_prob.detach(), response_mask, self.params)
        return lower.detach(), upper.detach()

    def loss(
        self,
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        *,
        bounds: tuple[Tensor, Tensor] | None = None,
        rollout_is_weights: Tensor | None = None,
        global_batch_info: Mapping[str, Any] | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The policy loss and its diagnostics.

        Args:
            old_log_prob, log_prob, advantages, response_mask: (batch, T).
            bounds: precomputed (lower, upper) from `bounds` (bounds methods only); computed here otherwise.
            rollout_is_weights, global_batch_info: see `ppo_surrogate`.

        Returns:
            (loss, metrics): a 0-d tensor and a dict of 0-d tensors (see `clip_diagnostics`).
        """
        if not self.has_bounds:
            if bounds is not None:
                raise ValueError(f"method {self.name!r} is a whole-loss method: it takes no precomputed bounds")
            _check_shapes(response_mask, old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages)
            return self.method.fn(
                old_log_prob,
                log_prob,
                advantages,
                response_mask,
                self.params,
                self.settings,
                rollout_is_weights=rollout_is_weights,
                global_batch_info=global_batch_info,
            )
        lower, upper = self.bounds(old_log_prob, response_mask) if bounds is None else bounds
        return ppo_surrogate(
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            lower,
            upper,
            self.settings,
            rollout_is_weights=rollout_is_weights,
            global_batch_info=global_batch_info,
        )


def resolve(
    method: str,
    params: Mapping[str, Any] | MethodConfig | None = None,
    settings: SurrogateConfig | Mapping[str, Any] | None = None,
) -> ResolvedMethod:
    """``method`` with its parameters (None: the paper's defaults) and loss settings, validated: ValueError naming
    the method and the parameter otherwise."""
    m = get_method(method)
    return ResolvedMethod(m, m.config(params), SurrogateConfig.from_params(settings))


# ----------------------------------------------------------------------------------------------------------------
# Bounds helpers


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


# ----------------------------------------------------------------------------------------------------------------
# Built-in bounds methods


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


@register_bounds("bandpo", config=BandPOConfig)
def bandpo_bounds(old_log_prob: Tensor, response_mask: Tensor, params: BandPOConfig):
    """BandPO: the f-divergence trust region {g_f(p, r) <= delta} as per-token bounds, r_hi capped, optional relax."""

    def solve(log_p: Tensor):
        lower, upper = band_bounds(log_p, params.divergence, params.delta)
        if params.cap is not None:
            upper = upper.clamp(max=params.cap)  # also maps r_hi = inf (p = 0) to the cap
        if params.relax:  # union with the fixed interval: [min(r_lo, 1 - eps_low), max(r_hi, 1 + eps_high)]
            lower = lower.clamp(max=1.0 - params.relax_eps_low)
            upper = upper.clamp(min=1.0 + params.relax_eps_high)
        return lower, upper

    return on_valid_tokens(solve, old_log_prob, response_mask)


# ----------------------------------------------------------------------------------------------------------------
# Input checks, aggregation, diagnostics


def _check_shapes(response_mask: Tensor, **tensors: Tensor | None) -> None:
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


def _global_info(global_batch_info: Mapping[str, Any] | None) -> dict[str, Any]:
    info = dict(global_batch_info or {})
    unknown = [k for k in info if k not in _GLOBAL_BATCH_KEYS]
    if unknown:
        raise ValueError(f"unknown global_batch_info key(s) {unknown}; valid: {', '.join(_GLOBAL_BATCH_KEYS)}")
    return info


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


def prepare_inputs(old_log_prob, log_prob, advantages, response_mask, settings, rollout_is_weights=None):
    """Shape / finiteness checks; returns (old_log_prob, log_prob, advantages, rollout_is_weights) with padding
    replaced by neutral values (0, 0, 0, 0) so that nothing non-finite reaches the loss or its gradient."""
    _check_shapes(
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


# ----------------------------------------------------------------------------------------------------------------
# The PPO surrogate


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
    _check_shapes(response_mask, lower=lower, upper=upper)
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

    loss = aggregate_loss(token_loss, response_mask, settings.loss_agg_mode, **_global_info(global_batch_info))
    metrics = clip_diagnostics(old_log_prob, log_ratio, advantages, response_mask, lower, upper, settings.dual_clip_c)
    return loss, metrics


# ----------------------------------------------------------------------------------------------------------------
# Built-in whole-loss methods


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
    ``cispo`` bitwise (tests/test_verl_plugin.py); its clipfrac counts a clipped weight on the side the advantage
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


# ----------------------------------------------------------------------------------------------------------------
# One-shot entry points (tests, scripts): resolve, then call


def compute_bounds(
    method: str,
    old_log_prob: Tensor,
    response_mask: Tensor,
    params: Mapping[str, Any] | MethodConfig | None = None,
) -> tuple[Tensor, Tensor]:
    """One-shot `ResolvedMethod.bounds` (resolves ``method`` and ``params`` first: not for a training loop)."""
    return resolve(method, params).bounds(old_log_prob, response_mask)


def compute_loss(
    method: str,
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    params: Mapping[str, Any] | MethodConfig | None = None,
    settings: SurrogateConfig | Mapping[str, Any] | None = None,
    *,
    bounds: tuple[Tensor, Tensor] | None = None,
    rollout_is_weights: Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """One-shot `ResolvedMethod.loss` (resolves ``method``, ``params`` and ``settings`` first: not for a training
    loop)."""
    return resolve(method, params, settings).loss(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        bounds=bounds,
        rollout_is_weights=rollout_is_weights,
        global_batch_info=global_batch_info,
    )


# Methods of the user's own modules (the workflow's ``method_modules``), last: they import this module.
load_method_modules(os.environ.get(METHOD_MODULES_ENV))
