"""The validation framework of method parameters (`MethodConfig`) and the loss settings every method shares
(`SurrogateConfig`, with the project's one dual-clip default `DEFAULT_DUAL_CLIP_C`)."""

from __future__ import annotations

import functools
import math
import typing
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from bandpo.core.options import allowed_types, unknown_names
from bandpo.core.protocol import AGG_MODES, DEFAULT_DUAL_CLIP_C

__all__ = ["AGG_MODES", "DEFAULT_DUAL_CLIP_C", "MethodConfig", "SurrogateConfig"]


@dataclass(frozen=True)
class MethodConfig:
    """Base class of every method's parameters: a frozen dataclass, type-checked and validated on construction.

    Field types supported: ``float``, ``int``, ``bool``, ``str`` and ``X | None``. Ints are accepted for floats;
    bools are never accepted as numbers; floats must be finite. Subclasses add range checks in `validate`, and name
    in ``label_fields`` the parameters that identify a variant (shown in leaderboards even at their defaults).
    A whole loss that cannot run without one of the optional per-token inputs of a loss call
    (`bandpo.methods.surrogate.TOKEN_INPUTS`: the token entropy, the rollout policy's log-probs) names it in
    ``requires``: the trainer then computes it (the local trainer's update pass computes the entropy only for such a
    method), `ResolvedMethod.loss` stops a call without it naming the method, and a verl run, whose policy loss
    receives neither, is refused where its command is built (`bandpo.verl.command`).
    """

    label_fields: ClassVar[tuple[str, ...]] = ()
    requires: ClassVar[tuple[str, ...]] = ()
    shipped_by: ClassVar[str] = ""
    """The framework settings that give this rule, for the listing and the ranking page (e.g. ``TRL 1.16.0:
    GRPOConfig(loss_type="luspo", importance_sampling_level="sequence")``); "" for a rule of this suite only."""
    parity_tests: ClassVar[tuple[str, ...]] = ()
    """The tests that compare this rule with the shipping framework's own computation on the same tensors (pytest
    node ids, ``tests/unit/test_trl_rules.py::test_luspo_equals_trls_luspo``; a verl loss's is derived,
    `bandpo.methods.__main__.describe`); () for a rule of this suite only. The ranking page names them."""

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
    dual_clip_c: float | None = DEFAULT_DUAL_CLIP_C
    log_ratio_clamp: float = 20.0
    check_finite: bool = True

    def validate(self) -> None:
        self.require(self.loss_agg_mode in AGG_MODES, "loss_agg_mode", f"must be one of {', '.join(AGG_MODES)}")
        self.require(self.dual_clip_c is None or self.dual_clip_c > 1.0, "dual_clip_c", "must be > 1 or None")
        self.require(self.log_ratio_clamp > 0.0, "log_ratio_clamp", "must be > 0")
