"""The parameters of the built-in methods: one frozen `MethodConfig` dataclass each, defaults the papers' settings."""

from __future__ import annotations

from dataclasses import dataclass

from bandpo.methods.band import list_divergences
from bandpo.methods.config import MethodConfig


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


def _check_band(cfg: MethodConfig) -> None:
    """The Band operator's parameters: divergence, delta, cap."""
    divs = list_divergences()
    cfg.require(cfg.divergence in divs, "divergence", f"is not registered; valid: {', '.join(divs)}")
    cfg.require(cfg.delta > 0.0, "delta", "must be > 0")
    cfg.require(cfg.cap is None or cfg.cap > 1.0, "cap", "must be > 1 or None")


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
