"""The method registry: registration by decorator (`register_bounds`, `register_loss`), look-up (`get_method`,
`list_methods`, `make_config`), and a method resolved once per run (`resolve` -> `ResolvedMethod`). The built-in
methods are registered by the modules of `BUILTIN_METHOD_MODULES`, loaded before the first look-up."""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bandpo.core.options import unknown_names
from bandpo.methods.config import MethodConfig, SurrogateConfig
from bandpo.methods.surrogate import TOKEN_INPUTS, check_bounds, check_shapes, check_token_inputs, ppo_surrogate

FILE_MODULE_PREFIX = "bandpo_method_module_"  # the module names `load_method_modules` gives the .py files it imports
METHOD_MODULES_ENV = "BANDPO_METHOD_MODULES"  # the user modules a run imports (bandpo.methods.user_modules)
LOADED_MODULES: dict[str, Any] = {}
"""The user modules imported in this process, by name or absolute .py path: filled by
`bandpo.methods.user_modules.load_method_modules`, named by `get_method`'s message for an unknown method. It lives
here, below user_modules, because both modules need it."""


def _display_path(path: str) -> str:
    """``path`` relative to the working directory when it lies under it, else absolute."""
    path = os.path.abspath(path)
    rel = os.path.relpath(path)
    return path if rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel


def source_file(fn: Callable[..., Any]) -> str | None:
    """The file that defines ``fn`` (a function or class; relative to the working directory when under it), None if
    it has none."""
    try:
        path = inspect.getsourcefile(inspect.unwrap(fn)) or inspect.getfile(inspect.unwrap(fn))
    except TypeError:
        return None
    return _display_path(path) if path else None


def function_origin(fn: Callable[..., Any]) -> str:
    """Where ``fn`` (a function or class) is defined: ``module.qualname`` inside bandpo, ``path/to/file.py:qualname``
    outside it (a user module: a .py file loaded by path has no importable name)."""
    module, qualname = getattr(fn, "__module__", None) or "", getattr(fn, "__qualname__", repr(fn))
    if module == "bandpo" or module.startswith("bandpo."):
        return f"{module}.{qualname}"
    path = source_file(fn)
    return f"{path}:{qualname}" if path else f"{module}.{qualname}"


@dataclass(frozen=True)
class Method:
    """A registered method: its name, kind ("bounds", "loss" or "verl": a policy loss that verl ships, called
    through verl's registry by `bandpo.verl.losses`), function and config class. ``takes_token_inputs``: whether
    its function has the ``token_inputs`` keyword (a whole loss written before that keyword existed has not, and is
    called without it)."""

    name: str
    kind: str
    fn: Callable[..., Any]
    config_cls: type[MethodConfig]
    takes_token_inputs: bool = False

    @property
    def origin(self) -> str:
        """Where its function is defined (`function_origin`): ``bandpo.methods.builtin.bandpo_bounds``,
        ``tests/example_method.py:half_clip_bounds``."""
        return function_origin(self.fn)

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
        if fn.__module__ not in BUILTIN_METHOD_MODULES:  # a name of a built-in method is taken, whatever the order
            load_builtin_methods()
        takes = kind != "bounds" and _takes_keyword(fn, "token_inputs")
        bad = [k for k in config.requires if k not in TOKEN_INPUTS]
        if bad or (config.requires and not takes):
            raise ValueError(
                f"method {name!r}: its config requires {list(config.requires)}: each must be one of "
                f"{', '.join(TOKEN_INPUTS)}, read by a whole loss with the keyword token_inputs"
            )
        method = Method(name=name, kind=kind, fn=fn, config_cls=config, takes_token_inputs=takes)
        old = _METHODS.get(name)
        if old is not None and (old.fn.__module__, old.fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(
                f"method {name!r} is already registered (by {old.origin}, not {function_origin(fn)}); "
                "choose another name"
            )
        _METHODS[name] = method
        for hook in _REGISTRATION_HOOKS:
            hook(method)
        return fn

    return decorator


def _takes_keyword(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` accepts the keyword argument ``name`` (by that name, or through ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        (p.name == name and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)) or p.kind == p.VAR_KEYWORD
        for p in params
    )


def on_register(hook: Callable[[Method], None]) -> Callable[[Method], None]:
    """Call ``hook(method)`` for every method registered from now on (used by `bandpo.verl.plugin`)."""
    _REGISTRATION_HOOKS.append(hook)
    return hook


def register_bounds(name: str, config: type[MethodConfig]):
    """Decorator: register ``fn(old_log_prob, response_mask, params) -> (lower, upper)`` as a bounds method."""
    return _register("bounds", name, config)


def register_loss(name: str, config: type[MethodConfig]):
    """Decorator: register a whole-loss method (its signature: the `bandpo.methods` docstring)."""
    return _register("loss", name, config)


def register_verl_loss(name: str, config: type[MethodConfig]):
    """Decorator: register an adapter of a policy loss that verl ships (same signature as a whole loss; see
    `bandpo.verl.losses`)."""
    return _register("verl", name, config)


KINDS = ("bounds", "loss", "verl")

BUILTIN_METHOD_MODULES = (
    "bandpo.methods.builtin",
    "bandpo.methods.trl_rules",
    "bandpo.methods.rollout_correction",
    "bandpo.verl.losses",
)
"""The modules whose import registers the built-in methods: this package's own (`bandpo.methods.builtin`), the
rules of TRL's GRPOConfig (`bandpo.methods.trl_rules`) and verl's rollout-correction presets
(`bandpo.methods.rollout_correction`), written here, and the policy losses verl ships, called through verl's
registry (`bandpo.verl.losses`, which lives with the rest of the verl knowledge in bandpo.verl).
`load_builtin_methods` imports them by name on the first look-up, once this package is imported: so the registry,
below every stage, imports no stage at import, and bandpo.verl.losses, which imports this registry, makes no
import cycle. Neither module imports verl, nor runs user code."""
_builtins_loaded = False


def load_builtin_methods() -> None:
    """Import `BUILTIN_METHOD_MODULES` (once per process); every look-up (`get_method`, `list_methods`) calls it
    first, so a look-up always sees the built-in methods."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True  # set first: the modules register through this registry while they are imported
    try:
        for module in BUILTIN_METHOD_MODULES:
            importlib.import_module(module)
    except BaseException:
        _builtins_loaded = False
        raise


def list_methods(kind: str | None = None) -> list[str]:
    """Registered method names, sorted; ``kind`` = "bounds", "loss" or "verl" filters."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)} or None, got {kind!r}")
    load_builtin_methods()
    return sorted(n for n, m in _METHODS.items() if kind is None or m.kind == kind)


def get_method(name: str) -> Method:
    """The registered method ``name``; ValueError with the registered choices otherwise, asking whether the module
    that defines it was left out (``method_modules`` in the config, ``--method-module`` on a command line)."""
    load_builtin_methods()
    try:
        return _METHODS[name]
    except (KeyError, TypeError):
        pass
    loaded = [_display_path(m) if m.endswith(".py") else m for m in LOADED_MODULES]
    if loaded:
        hint = (
            f"none of the loaded method modules ({', '.join(loaded)}) registers it: check the name there, or list "
            "the module that does in the config's method_modules (or pass --method-module)"
        )
    else:
        hint = (
            "a method of your own module? list the module in the config's method_modules (or pass --method-module, "
            f"or set ${METHOD_MODULES_ENV})"
        )
    raise ValueError(
        f"unknown method {unknown_names([name], list(_METHODS))} (registered: {', '.join(list_methods())}); {hint}"
    ) from None


def make_config(method: str, params: Mapping[str, Any] | MethodConfig | None = None) -> MethodConfig:
    """Validated parameters of ``method``: its defaults overridden by ``params``."""
    return get_method(method).config(params)


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
    def requires(self) -> tuple[str, ...]:
        """The token inputs the method cannot run without (`MethodConfig.requires`): () for most."""
        return self.params.requires

    @property
    def label(self) -> str:
        """The parameters as leaderboards show them (`MethodConfig.label`), e.g. ``"divergence=kl, delta=0.05"``."""
        return self.params.label()

    def _who(self) -> str:
        return f"method {self.name!r} ({self.method.origin}, {self.params!r})"

    def bounds(self, old_log_prob: Tensor, response_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Ratio bounds for a whole rollout batch, once, on the valid tokens only.

        Returns (lower, upper) of the shape of ``old_log_prob``, no gradient, [1, 1] on padding. Slice them with
        the batch and pass ``bounds=`` to `loss` in each micro-batch. ValueError naming the method if they violate
        lower <= 1 <= upper on a valid token, or are NaN there (upper = +inf, no upper clip, is allowed): a method
        without a validate() for its parameters, e.g. eps_high = -1, would otherwise train on an interval that
        excludes the on-policy ratio 1. The check is one reduction over the batch; the values are returned as the
        function computed them.
        """
        if not self.has_bounds:
            raise ValueError(f"method {self.name!r} is a whole-loss method: it has no ratio bounds")
        check_shapes(response_mask, old_log_prob=old_log_prob)
        with torch.no_grad():
            lower, upper = self.method.fn(old_log_prob.detach(), response_mask, self.params)
        try:
            check_shapes(response_mask, lower=lower, upper=upper)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{self._who()}: its bounds function returned a bad (lower, upper): {e}") from None
        check_bounds(lower, upper, response_mask, old_log_prob, self._who)  # lower <= 1 <= upper: one reduction
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
        token_inputs: Mapping[str, Tensor] | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The policy loss and its diagnostics.

        Args:
            old_log_prob, log_prob, advantages, response_mask: (batch, T).
            bounds: precomputed (lower, upper) from `bounds` (bounds methods only); computed here otherwise.
            rollout_is_weights, global_batch_info: see `ppo_surrogate`.
            token_inputs: optional per-token tensors (`bandpo.methods.surrogate.TOKEN_INPUTS`: ``entropy``,
                ``rollout_log_prob``), each (batch, T): a trainer passes what it has, and a whole loss that takes
                the keyword reads what it needs (bounds methods and losses without the keyword ignore them).
                ValueError naming the method when one of its `requires` is missing.

        Returns:
            (loss, metrics): a 0-d tensor and a dict of 0-d tensors (see `clip_diagnostics`).
        """
        if not self.has_bounds:
            if bounds is not None:
                raise ValueError(f"method {self.name!r} is a whole-loss method: it takes no precomputed bounds")
            check_shapes(response_mask, old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages)
            inputs = check_token_inputs(response_mask, token_inputs)
            missing = [k for k in self.requires if k not in inputs]
            if missing:
                raise ValueError(
                    f"{self._who()}: needs the token input(s) {missing} (token_inputs), which this call lacks; the "
                    "local trainer passes them, verl's policy loss receives none"
                )
            extra = {"token_inputs": inputs} if self.method.takes_token_inputs else {}
            return self.method.fn(
                old_log_prob,
                log_prob,
                advantages,
                response_mask,
                self.params,
                self.settings,
                rollout_is_weights=rollout_is_weights,
                global_batch_info=global_batch_info,
                **extra,
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
    token_inputs: Mapping[str, Tensor] | None = None,
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
        token_inputs=token_inputs,
    )
