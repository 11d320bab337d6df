"""The Band operator: exact per-token ratio bounds from an f-divergence trust region.

Math: for a sampled token with old probability p = exp(old_log_prob) and ratio r = pi_new / pi_old, the cheapest
way to move the token's probability to q = p r rescales every other action by c = (1 - r p) / (1 - p). The trust
region D_f(new || old) <= delta then reduces to

    g_f(p, r) = p f(r) + (1 - p) f((1 - r p) / (1 - p)) <= delta,        r in [0, 1/p],

whose feasible set is one interval [r_lo(p), r_hi(p)] containing 1. `band_bounds` returns that interval, exactly
(to float64 round-off), with no cap and no relaxation: those belong to the method layer (`bandpo.methods`).

Solvers
- ``tv`` and ``chi2``: closed forms, clamped to the simplex [0, 1/p].
- ``kl`` (f(u) = -log u + u - 1, i.e. KL(old || new)): g is the Bernoulli divergence KL(Bern(p) || Bern(q)),
  q = p r. In logit space z = log(q / (1 - q)) it is convex with derivative sigmoid(z) - p, so Newton steps
  started on the outer side of the root decrease monotonically onto it. The lower root uses the mirror identity
  KL(p || q) = KL(1 - p || 1 - q), so one solver serves both sides. Since delta is one number per call, the
  bounds are functions of p alone: that solver runs once per delta on table nodes, and each token reads its
  bounds off quadratic interpolation tables. float64 inputs: tables in s = log(-log p) - log p (error below 4e-9),
  then one float64 Newton step (error squared: round-off). float32 and lower inputs: tables indexed by the bits of
  the float32 number -log p, so a token costs a few table reads and two exps, no logarithm (`_kl_bounds_float32`;
  within float32's rounding of the float64 result). A fixed number of steps, no data-dependent exit and no host
  synchronisation off the CPU: the whole path compiles with ``torch.compile(fullgraph=True)`` (the tables enter the
  graph through an opaque custom op).
- any other registered convex f: bisection with a fixed number of halvings in a cancellation-free
  parametrisation (upper: q = p + (1 - p) t; lower: r = 1 - u), float64 throughout.

Apart from that float32 KL path, all arithmetic runs in float64 from log p and log(1 - p) (log1mexp form), so p
close to 1 and tiny p keep their precision; results are cast back to the input dtype. Special inputs: log p >= 0
(p = 1, including tiny positive rounding noise) gives (r_lo(1), 1); log p = -inf (p = 0) gives (0, +inf); NaN
stays NaN in its own position.
The bounds are constants of ``old_log_prob``: they carry no gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["Divergence", "band_bounds", "get_divergence", "list_divergences", "register_divergence"]

# log p is clamped to at most -_LOGP_ONE before solving (1 - p = 1e-300): the p -> 1 limit to float64 precision.
_LOGP_ONE = 1e-300
# Below exp(_LOGP_FLOOR) the solvers work at the floor: r_lo ~ exp(-delta / p) is 0 there to float64 precision and
# r_hi = q_hi / p uses the floor's q_hi (see `_kl_bounds` and `_bisect_bounds`).
_LOGP_FLOOR = -700.0
# KL, float64 output: Newton steps from the interpolated roots (see `_kl_bounds`).
_F64_NEWTON_STEPS = 1
_BISECTION_STEPS = 64

ClosedForm = Callable[[Tensor, float, torch.dtype], tuple[Tensor, Tensor]]


@dataclass(frozen=True)
class Divergence:
    """A registered f-divergence.

    Attributes:
        name: registry key.
        f: convex generator with f(1) = 0, a torch function of a float64 tensor u >= 0 (may return +inf, e.g.
            -log(0); write u log u as ``torch.xlogy(u, u)`` so that f(0) is finite where the limit is).
        closed_form: optional ``(log_p, delta, out_dtype) -> (lower, upper)`` on float64 tensors with log_p in
            [-inf, 0); ``out_dtype`` is the dtype the result will be cast to, so an iterative solver may stop at that
            precision. Without it the generic bisection solver is used.
        float32_form: optional ``(old_log_prob, delta) -> (lower, upper)`` on float32 tensors, used instead of
            ``closed_form`` for every input dtype below float64; it takes the raw input (any value, NaN and
            +-inf included) and returns the final bounds, special values handled as `band_bounds` documents.
    """

    name: str
    f: Callable[[Tensor], Tensor]
    closed_form: ClosedForm | None = None
    float32_form: Callable[[Tensor, float], tuple[Tensor, Tensor]] | None = None


_REGISTRY: dict[str, Divergence] = {}


def register_divergence(
    name: str,
    f: Callable[[Tensor], Tensor],
    closed_form: ClosedForm | None = None,
    float32_form: Callable[[Tensor, float], tuple[Tensor, Tensor]] | None = None,
) -> Divergence:
    """Register a convex generator ``f`` (f(1) = 0) under ``name``; returns the registered `Divergence`.

    ``f`` is checked on a grid: f(1) must be 0 and f must be convex (midpoint test), else ValueError.
    Re-registering a name replaces the previous entry.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"divergence name must be a non-empty string, got {name!r}")
    u = torch.linspace(0.05, 8.0, 161, dtype=torch.float64)
    fu = f(u)
    f1 = f(torch.ones(1, dtype=torch.float64))
    if not torch.is_tensor(fu) or fu.shape != u.shape:
        raise ValueError(f"divergence {name!r}: f must map a tensor to a tensor of the same shape")
    if abs(float(f1)) > 1e-12:
        raise ValueError(f"divergence {name!r}: f(1) must be 0, got {float(f1)!r}")
    midpoint_gap = (fu[:-2] + fu[2:]) / 2 - fu[1:-1]
    if not bool((midpoint_gap >= -1e-9 * (1 + fu[1:-1].abs())).all()):
        raise ValueError(f"divergence {name!r}: f is not convex on [0.05, 8]")
    div = Divergence(name, f, closed_form, float32_form)
    _REGISTRY[name] = div
    return div


def list_divergences() -> list[str]:
    """Names of the registered divergences, sorted."""
    return sorted(_REGISTRY)


def get_divergence(name: str) -> Divergence:
    """The registered divergence ``name``; ValueError naming the valid choices otherwise."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown divergence {name!r}; valid choices: {', '.join(list_divergences())}") from None


def band_bounds(old_log_prob: Tensor, divergence: str = "kl", delta: float = 0.05) -> tuple[Tensor, Tensor]:
    """Exact trust-region ratio bounds (r_lo, r_hi) for each token, elementwise.

    Args:
        old_log_prob: log pi_old(a|s) of the sampled tokens, any shape, any floating dtype, any device.
        divergence: a registered divergence name (`list_divergences()`): "kl", "tv", "chi2", or your own.
        delta: trust-region radius, > 0.

    Returns:
        (lower, upper), same shape and dtype as ``old_log_prob``, no gradient; 0 <= lower <= 1 <= upper <= 1/p.
    """
    div = get_divergence(divergence)
    if not isinstance(delta, (int, float)) or isinstance(delta, bool) or not math.isfinite(delta) or delta <= 0:
        raise ValueError(f"delta must be a finite number > 0, got {delta!r}")
    if not torch.is_tensor(old_log_prob) or not old_log_prob.is_floating_point():
        raise TypeError("old_log_prob must be a floating-point torch.Tensor")
    x = old_log_prob.detach()
    if div.float32_form is not None and x.dtype != torch.float64:
        lower, upper = div.float32_form(x.to(torch.float32), float(delta))
        return lower.to(x.dtype), upper.to(x.dtype)
    log_p = x.to(torch.float64).clamp(max=-_LOGP_ONE)  # p = 1 (and rounding noise above it) -> the p -> 1 limit
    if div.closed_form is not None:
        lower, upper = div.closed_form(log_p, float(delta), x.dtype)
    else:
        lower, upper = _bisect_bounds(div.f, log_p, float(delta))
    lower, upper = lower.clamp_(0.0, 1.0), upper.clamp_(min=1.0)
    upper.masked_fill_(x >= 0, 1.0)  # exactly 1 at p = 1
    p_zero = log_p == -math.inf
    lower.masked_fill_(p_zero, 0.0)
    upper.masked_fill_(p_zero, math.inf)
    nan = torch.isnan(log_p)  # a NaN input stays NaN in its own position (the bisection would otherwise hide it)
    lower.masked_fill_(nan, math.nan)
    upper.masked_fill_(nan, math.nan)
    return lower.to(x.dtype), upper.to(x.dtype)


# ----------------------------------------------------------------------------------------------------------------
# Helpers in log space


def _log1mexp(a: Tensor) -> Tensor:
    """log(1 - exp(a)) for a < 0: exact relative precision near 0, absolute precision ~1e-16 far from it,
    which is all the solvers need (this value only ever enters sums of bounded terms)."""
    return torch.log(-torch.expm1(a))


# ----------------------------------------------------------------------------------------------------------------
# Closed forms


def _tv_bounds(log_p: Tensor, delta: float, out_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    # g = p |r - 1| = delta  ->  r = 1 +- delta / p, clamped to [0, 1/p].
    inv_p = torch.exp(-log_p)
    return (1.0 - delta * inv_p).clamp(min=0.0), torch.minimum(1.0 + delta * inv_p, inv_p)


def _chi2_bounds(log_p: Tensor, delta: float, out_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    # g = p (r - 1)^2 / (1 - p) = delta  ->  r = 1 +- sqrt(delta (1 - p) / p), clamped to [0, 1/p].
    half_width = torch.exp(0.5 * (math.log(delta) + _log1mexp(log_p) - log_p))
    return (1.0 - half_width).clamp(min=0.0), torch.minimum(1.0 + half_width, torch.exp(-log_p))


def _kl_newton(z: Tensor, p: Tensor, pc: Tensor, c: Tensor, steps: int) -> Tensor:
    """``steps`` Newton steps, in place on ``z``, for the upper root of h(z) = KL(p || sigmoid(z)) - delta.

    With H = -p log p - (1 - p) log(1 - p) and c = -H - delta, in logit space
        h(z) = c + softplus(-z) + (1 - p) z,    h'(z) = sigmoid(z) - p = (1 - p) - sigmoid(-z),    h'' > 0,
    so from any start on the outer side (h(z0) >= 0, z0 > logit p) the iterates decrease monotonically onto the root;
    from a start just inside the root the first step lands just outside it.
    In-place on a few buffers: on the CPU a fresh tensor per operation costs about as much as the arithmetic.
    """
    u, h, dh = torch.empty_like(z), torch.empty_like(z), torch.empty_like(z)
    for _ in range(steps):
        torch.exp(torch.neg(z, out=u), out=u)  # u = exp(-z): softplus(-z) = log1p(u), sigmoid(-z) = u / (1 + u)
        torch.log1p(u, out=h).add_(c).addcmul_(pc, z)  # h
        torch.sub(pc, torch.div(u, torch.add(u, 1.0, out=dh), out=dh), out=dh)  # h'
        z.sub_(h.div_(dh))
    return z


def _kl_upper_logit(log_p: Tensor, log_1mp: Tensor, delta: float, steps: int) -> Tensor:
    """z = logit(q) of the root q in (p, 1) of KL(Bern(p) || Bern(q)) = delta: outer start, then Newton.

    Inputs must be finite, with p = exp(log_p) and 1 - p = exp(log_1mp) both normal numbers of their dtype.
    """
    p, pc = torch.exp(log_p), torch.exp(log_1mp)
    c = torch.mul(p, log_p).addcmul_(pc, log_1mp).sub_(delta)  # -H - delta
    # Outer starting points (h(z0) >= 0 and z0 > logit p); the tightest one wins. For q >= p:
    #  KL(p || q) >= (q - p)^2 / (2 q)        ->  q <= p + delta + sqrt(delta^2 + 2 delta p);
    #  KL(p || q) >= (q - p)^2 / (2 (1 - p))  ->  q <= p + sqrt(2 delta (1 - p))   (the mirror of the first);
    #  KL(p || q) >= p log p + (1 - p)(log(1 - p) - log(1 - q))   (drop -p log q >= 0), solved for log(1 - q).
    q = torch.mul(p, 2.0 * delta).add_(delta * delta).sqrt_().add_(p).add_(delta)
    torch.minimum(q, torch.mul(pc, 2.0 * delta).sqrt_().add_(p), out=q).clamp_(max=1.0)
    z = torch.log(q).sub_(torch.log1p(q.neg_()))  # logit q; +inf where the bound leaves the simplex
    log_1mq = torch.mul(p, log_p).neg_().add_(delta).div_(pc).neg_().add_(log_1mp)
    z_entropy = torch.expm1(log_1mq).neg_().log_().sub_(log_1mq)  # logit(1 - exp(log_1mq)), rounded outwards
    return _kl_newton(torch.minimum(z, z_entropy, out=z), p, pc, c, steps)


# KL tables. The bounds depend on p and delta only, and delta is one number per call, so each call needs four
# functions of one variable, tabulated once per (delta, device) and interpolated per token:
#     T_hi = log q_hi                       (r_hi = exp(T_hi - log p))
#     P_lo = p log r_lo                     (r_lo = exp(P_lo / p))
#     M_hi = (1 - p) log((1 - p) / (1 - q_hi))
#     L_lo = log q_lo'   with q_lo' = 1 - p r_lo, the upper root of the mirror problem
# (the last two give the logits of both roots for the float64 polish, see `_kl_bounds`). All four are bounded and
# smooth in s = log(-log p) - log p, which resolves both ends: s ~ log(1 - p) as p -> 1 and s ~ -log p as p -> 0.
# Beyond [_KL_S_MIN, s(_KL_LOGP_MIN)] they sit at their limits to ~1e-16 relative, so s is clamped there.
# Interpolation: the quadratic through 3 neighbouring nodes (uniform in s). Measured against 40-step float64
# solutions, delta in [1e-4, 10]: relative error of r_hi and absolute error of r_lo below 4e-9, which float32 and
# lower outputs use as is; float64 outputs add one float64 Newton step (error squared, down to round-off).
_KL_NODE_STEP = 0.01
_KL_S_MIN = -36.0
_KL_LOGP_MIN = -50.0
_KL_INTERVALS = math.ceil((math.log(-_KL_LOGP_MIN) - _KL_LOGP_MIN - _KL_S_MIN) / _KL_NODE_STEP)
_KL_TABLE_NEWTON_STEPS = 8
_KL_TABLE_CACHE: dict[tuple[float, torch.device, str], Tensor] = {}
_KL_TABLE_CACHE_SIZE = 32


def _kl_build_tables(delta: float, device: torch.device) -> Tensor:
    """Quadratic interpolation coefficients, shape (4 functions, 3 powers of the fraction, _KL_INTERVALS), float64."""
    # Nodes s_j = _KL_S_MIN + h (j - 1), j = 0 .. n + 1 (n intervals and a ghost node on the left).
    s = torch.arange(-1, _KL_INTERVALS + 1, dtype=torch.float64, device=device).mul_(_KL_NODE_STEP).add_(_KL_S_MIN)
    # Invert s = u + exp(u), u = log(-log p): convex in u, Newton from the outer start min(s, log s) (converges
    # monotonically, quadratically; 12 steps are far more than enough over this range).
    u = torch.minimum(s, torch.log(s.clamp(min=1.0)))
    for _ in range(12):
        e = torch.exp(u)
        u = u - (u + e - s) / (1.0 + e)
    log_p = -torch.exp(u)
    log_1mp = _log1mexp(log_p)
    z = _kl_upper_logit(
        torch.stack((log_p, log_1mp)), torch.stack((log_1mp, log_p)), delta, _KL_TABLE_NEWTON_STEPS
    )  # row 0: token, row 1: mirror problem
    logsig = torch.nn.functional.logsigmoid
    p, pc = torch.exp(log_p), torch.exp(log_1mp)
    y = torch.stack(
        (
            logsig(z[0]),  # T_hi
            (logsig(-z[1]) - log_p).mul_(p),  # P_lo
            (log_1mp - logsig(-z[0])).mul_(pc),  # M_hi
            logsig(z[1]),  # L_lo
        )
    )
    # On the interval [s_k, s_k+1], the quadratic through the nodes at fractions -1, 0, 1, in powers of the fraction.
    ym, y0, y1 = y[:, :-2], y[:, 1:-1], y[:, 2:]
    return torch.stack((y0, (y1 - ym) / 2, (y1 + ym) / 2 - y0), dim=1).contiguous()


def _kl_tables(delta: float, device: torch.device, kind: str = "float64") -> Tensor:
    """The ``kind`` tables ("float64": `_kl_build_tables`, "float32": `_kl32_build_tables`) for ``delta`` on
    ``device``, built on first use and cached (a bounded dict).

    Under ``torch.compile`` they come from the opaque custom op ``bandpo::kl_band_tables`` (same cache): traced
    into the graph, the build's chains of Newton steps would cost inductor minutes of lowering.
    """
    if torch.compiler.is_compiling():
        return _kl_tables_op(delta, device, kind)
    key = (delta, device, kind)
    tables = _KL_TABLE_CACHE.get(key)
    if tables is None:
        with torch.inference_mode(False), torch.no_grad():
            tables = (_kl_build_tables if kind == "float64" else _kl32_build_tables)(delta, device)
        if len(_KL_TABLE_CACHE) >= _KL_TABLE_CACHE_SIZE:
            _KL_TABLE_CACHE.clear()
        _KL_TABLE_CACHE[key] = tables
    return tables


@torch.library.custom_op("bandpo::kl_band_tables", mutates_args=())
def _kl_tables_op(delta: float, device: torch.device, kind: str) -> Tensor:
    return _kl_tables(delta, device, kind).clone()  # a custom op returns a fresh tensor (the cache stays private)


@_kl_tables_op.register_fake
def _(delta: float, device: torch.device, kind: str) -> Tensor:
    shape = (4, 3, _KL_INTERVALS) if kind == "float64" else (2, 3, _KL32_ROWS)
    return torch.empty(shape, dtype=torch.float64, device=device)


def _kl_interpolate(log_p: Tensor, tables: Tensor, functions: int) -> list[Tensor]:
    """The first ``functions`` tabulated functions at each log p (NaN where log p is NaN).

    Few, reused buffers: on the CPU each fresh tensor of a million float64 costs page faults comparable to the
    arithmetic, so every step writes in place or into a buffer of an earlier one.
    """
    flat = log_p.reshape(-1)
    f = torch.mul(flat, -math.exp(-_KL_S_MIN))
    torch.log(f, out=f).sub_(flat).mul_(1.0 / _KL_NODE_STEP)  # (s - s_min) / h
    f.clamp_(0.0, _KL_INTERVALS - 1e-9)  # the limits beyond the table; keeps NaN
    i = f.int().clamp_(0, _KL_INTERVALS - 1)  # interval (NaN -> any valid interval)
    f.frac_()  # fraction in the interval (NaN stays NaN)
    out = []
    work = torch.empty_like(f)
    for coef in tables[:functions]:
        acc = torch.index_select(coef[-1], 0, i)
        for c in reversed(coef[:-1]):  # Horner: acc <- c + acc f
            torch.index_select(c, 0, i, out=work).addcmul_(acc, f)
            acc, work = work, acc
        out.append(acc.view(log_p.shape))
    return out


def _kl_bounds(log_p: Tensor, delta: float, out_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    tables = _kl_tables(delta, log_p.device)
    if out_dtype != torch.float64:
        # Interpolation alone: ~1e-9, far below the output's own rounding. Both forms keep p -> 0 exact:
        # r_hi overflows to inf only where q / p does, r_lo = exp(P_lo / p) underflows to 0 (and P_lo / 0 = -inf).
        t_hi, p_lo = _kl_interpolate(log_p, tables, 2)
        return p_lo.div_(torch.exp(log_p)).exp_(), t_hi.sub_(log_p).exp_()
    # float64: the interpolated roots, as logits, then one Newton step each (quadratic: 1e-9 -> round-off).
    t_hi, p_lo, m_hi, l_lo = _kl_interpolate(log_p, tables, 4)
    safe = log_p.clamp(min=_LOGP_FLOOR)
    pc = torch.expm1(safe).neg_()
    log_1mp = torch.log(pc)
    p = torch.exp(safe)
    c = torch.mul(p, safe).addcmul_(pc, log_1mp).sub_(delta)  # -H - delta, shared by the token and mirror problem
    # z = logit q_hi = log q - log(1 - q) = T_hi + M_hi / (1 - p) - log(1 - p); the mirror root likewise.
    z = _kl_newton(m_hi.div_(pc).add_(t_hi).sub_(log_1mp), p, pc, c, _F64_NEWTON_STEPS)
    z_mirror = _kl_newton(l_lo.sub_(safe).sub_(p_lo.div_(p)), pc, p, c, _F64_NEWTON_STEPS)
    # r_hi = q / p = exp(log sigmoid(z) - log p), with the true log p (inf once it overflows).
    upper = torch.nn.functional.logsigmoid(z).sub_(log_p).exp_()
    # r_lo = (1 - q_hi(1 - p)) / p = exp(log sigmoid(-z_mirror) - log p).
    lower = torch.nn.functional.logsigmoid(z_mirror.neg_()).sub_(safe).exp_()
    lower.masked_fill_(log_p < _LOGP_FLOOR, 0.0)  # below the floor r_lo ~ exp(-delta / p) underflows to 0
    return lower, upper


# KL below float64: one table lookup per token, indexed by the bits of the float32 input.
# x = -log p >= 0 as a float32 number is (exponent, mantissa). Its top 8 + _KL32_BITS bits pick a row: a piece of one
# binade of relative width 2^-_KL32_BITS (the same resolution in x from 1e-45 to 3e38), and the remaining
# _KL32_LOW mantissa bits, read as an integer m, are the exact position within the piece. On each row a quadratic in
# m through the float64 solutions at the row's start, middle and end gives R = log r_hi and another L = log r_lo.
# No logarithm, no float64 copy of the input, no clamping of it: constant rows hold the limits (x < 2^-40: p = 1;
# x >= 2^10 and +inf: p = 0) and NaN. Measured over random float32 values of every binade against the float64 path
# (tests/unit/test_band.py), delta in [1e-3, 1]: r_hi within 7e-8 relative, r_lo within 7e-8 absolute (float32's own
# rounding is 6e-8).
_KL32_BITS = 8
_KL32_LOW = 23 - _KL32_BITS  # the mantissa bits that make the position m in the row
_KL32_ROWS = 256 << _KL32_BITS
# Rows solved: x in [2^-40, 2^10). Below, r_hi - 1 and r_lo - exp(-delta) are under 1e-10 (float32 rounds them away);
# above, log r_hi >= x + log(1 - exp(-delta)) > 89 for any delta >= 1e-300 (inf in float32) and r_lo underflows to 0.
_KL32_SOLVED_EXPONENTS = (127 - 40, 127 + 10)
_KL32_NEWTON_STEPS = 10  # from the outer start: converged to round-off
_KL32_LOG_CAP = 700.0  # log r_hi is stored <= 700: its float64 exp stays normal (fast), float32 holds inf beyond 89
_KL32_L_NORMAL = math.log(torch.finfo(torch.float32).tiny)  # a row whose log r_lo reaches below holds -inf
# Coefficients of the quadratic through the nodes t = 0, 1/2, 1 in powers of m = t 2^_KL32_LOW (so that the lookup
# needs no scaling): coef = diag(2^(-k _KL32_LOW)) @ inverse Vandermonde @ values.
_KL32_NODES = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)
_KL32_FIT = torch.linalg.inv(_KL32_NODES[:, None] ** torch.arange(3, dtype=torch.float64))
_KL32_FIT *= torch.exp2(-_KL32_LOW * torch.arange(3, dtype=torch.float64))[:, None]
_KL32_CHUNK = 65536  # tokens per chunk on the CPU (measured: 32k-128k alike, 1M 2x slower)
# per chunk: bits, row; the position and two Horner buffers in float64 (R); the position and one buffer in float32 (L)
_KL32_BUFFERS = (torch.int32, torch.int32, torch.float64, torch.float64, torch.float64, torch.float32, torch.float32)


def _kl32_build_tables(delta: float, device: torch.device) -> Tensor:
    """Quadratic coefficients, shape (2 functions [R, L], 3 powers of m, _KL32_ROWS), float64."""
    first, stop = _KL32_SOLVED_EXPONENTS[0] << _KL32_BITS, _KL32_SOLVED_EXPONENTS[1] << _KL32_BITS
    # Nodes: every solved row's start and middle, and the end of the last one (a row's end is the next row's start).
    node = torch.arange((stop - first) * 2 + 1, dtype=torch.int64, device=device)
    row, j = first + node // 2, node % 2
    x0 = (row << _KL32_LOW).to(torch.int32).view(torch.float32).to(torch.float64)
    width = torch.exp2(((row >> _KL32_BITS) - 127 - _KL32_BITS).to(torch.float64))
    log_p = (-(x0 + width * j / 2)).clamp(max=-_LOGP_ONE)
    safe = log_p.clamp(min=_LOGP_FLOOR)
    log_1mp = _log1mexp(safe)
    z = _kl_upper_logit(torch.stack((safe, log_1mp)), torch.stack((log_1mp, safe)), delta, _KL32_NEWTON_STEPS)
    logsig = torch.nn.functional.logsigmoid
    r_log = (logsig(z[0]) - log_p).clamp(max=_KL32_LOG_CAP)  # log r_hi = log q_hi - log p
    l_log = (logsig(-z[1]) - safe).clamp(min=-_KL32_LOG_CAP)  # log r_lo = log(1 - q_hi(1 - p)) - log p
    l_log.masked_fill_(log_p < _LOGP_FLOOR, -_KL32_LOG_CAP)
    values = torch.stack((r_log, l_log))  # (2, nodes)
    per_row = values[:, :-1].view(2, stop - first, 2)
    ends = torch.cat((per_row[:, 1:, :1], values[:, -1:, None]), dim=1)  # each row's last node: the next row's first
    coef = torch.zeros((2, _KL32_ROWS, 3), dtype=torch.float64, device=device)
    nodes = torch.cat((per_row, ends), dim=2)  # (2, solved rows, 3)
    coef[:, first:stop] = nodes @ _KL32_FIT.to(device).T
    coef[1, first:stop][nodes[1].amin(dim=1) < _KL32_L_NORMAL] = torch.tensor([-math.inf, 0.0, 0.0], dtype=coef.dtype)
    coef[1, :first, 0] = -delta  # x < 2^-40: the p = 1 limits r_hi = 1, r_lo = exp(-delta) (float32's exp)
    coef[0, stop:, 0], coef[1, stop:, 0] = _KL32_LOG_CAP, -math.inf  # x >= 2^10, +inf (p = 0): (0, inf)
    coef[:, (255 << _KL32_BITS) + 1 :] = math.nan  # NaN inputs
    return coef.transpose(1, 2).contiguous()


def _kl_bounds_float32(old_log_prob: Tensor, delta: float) -> tuple[Tensor, Tensor]:
    """KL bounds for a float32 input (every dtype below float64 comes here as float32): see the tables above.

    R = c0 + m (c1 + m c2) and r_hi = exp(R) in float64 (R reaches ~89 before r_hi overflows float32), then a cast;
    L and r_lo = exp(L) in float32 (an absolute error e of L moves r_lo by e r_lo; the float32 exp adds <= 1 ulp).
    The L tables never make exp underflow (a float32 exp with a denormal result takes ~6x its usual time): a row
    where r_lo falls below float32's smallest normal holds -inf (r_lo = 0). On the CPU the tokens go through in
    chunks of _KL32_CHUNK with the same few buffers for every chunk, so that the elementwise passes read and write
    cache, not memory."""
    (r0, r1, r2), (l0, l1, l2) = _kl_tables(delta, old_log_prob.device, "float32")
    l0, l1, l2 = l0.to(torch.float32), l1.to(torch.float32), l2.to(torch.float32)
    flat = old_log_prob.reshape(-1)
    lower, upper = torch.empty_like(flat), torch.empty_like(flat)
    n = flat.numel()
    whole = flat.device.type != "cpu" or torch.compiler.is_compiling()
    chunk = max(n, 1) if whole else _KL32_CHUNK
    buffers = [torch.empty(min(n, chunk), dtype=dtype, device=flat.device) for dtype in _KL32_BUFFERS]
    for xs, lo, hi in zip(flat.split(chunk), lower.split(chunk), upper.split(chunk), strict=True):
        b, r, m64, a64, w64, m32, a32 = buffers if len(xs) == chunk else [t[: len(xs)] for t in buffers]
        # x = -log p by flipping the sign bit; p >= 1 (log p >= 0, rounding noise) gives a negative integer, clamped
        # to the bits of x = 0, the p = 1 limit (so is -0.0).
        torch.bitwise_xor(xs.view(torch.int32), -(2**31), out=b).clamp_(min=0)
        torch.bitwise_right_shift(b, _KL32_LOW, out=r)
        m32.copy_(b.bitwise_and_((1 << _KL32_LOW) - 1))  # the position in the row, an exact integer
        m64.copy_(m32)
        torch.index_select(r2, 0, r, out=a64)  # Horner in m: acc <- c + acc m
        torch.index_select(r1, 0, r, out=w64).addcmul_(a64, m64)
        hi.copy_(torch.index_select(r0, 0, r, out=a64).addcmul_(w64, m64).exp_())
        torch.index_select(l2, 0, r, out=a32)
        torch.index_select(l1, 0, r, out=lo).addcmul_(a32, m32)
        torch.exp(torch.index_select(l0, 0, r, out=a32).addcmul_(lo, m32), out=lo)
    # NaN inputs (a +NaN was clamped to x = 0 above, some payloads share the +inf row) go back to their positions.
    # On the CPU a max (NaN propagates) tells cheaply whether there is any; elsewhere no host synchronisation.
    if whole or (n and math.isnan(float(flat.max()))):
        nan = torch.isnan(flat)
        lower.masked_fill_(nan, math.nan), upper.masked_fill_(nan, math.nan)
    return lower.view(old_log_prob.shape), upper.view(old_log_prob.shape)


# ----------------------------------------------------------------------------------------------------------------
# Generic solver for any registered convex f


def _bisect_bounds(f: Callable[[Tensor], Tensor], log_p: Tensor, delta: float) -> tuple[Tensor, Tensor]:
    """Bisection on g_f(p, r) = delta with a fixed number of halvings.

    Upper side: q = p + (1 - p) t, t in [0, 1], so r = 1 + s t and c = 1 - t with s = (1 - p) / p.
    Lower side: r = 1 - u, u in [0, 1], so c = 1 + u / s. Neither form subtracts nearly equal numbers.
    For p < exp(_LOGP_FLOOR) the root in q is taken at p = exp(_LOGP_FLOOR) (its p -> 0 limit to float64
    precision for divergences whose q_hi has a positive limit, such as KL), then divided by the true p.
    """
    floor = _LOGP_FLOOR
    solve_log_p = log_p.clamp(min=floor)
    p, pc = torch.exp(solve_log_p), torch.exp(_log1mexp(solve_log_p))
    s = torch.exp(_log1mexp(solve_log_p) - solve_log_p)
    inv_s = torch.exp(solve_log_p - _log1mexp(solve_log_p))

    def g_upper(t: Tensor) -> Tensor:
        return p * f(1.0 + s * t) + pc * f(1.0 - t)

    def g_lower(u: Tensor) -> Tensor:
        return p * f(1.0 - u) + pc * f(1.0 + u * inv_s)

    def bisect(g: Callable[[Tensor], Tensor]) -> Tensor:
        lo, hi = torch.zeros_like(p), torch.ones_like(p)  # invariant: g(lo) <= delta < g(hi) unless saturated
        for _ in range(_BISECTION_STEPS):
            mid = 0.5 * (lo + hi)
            infeasible = g(mid) > delta
            lo = torch.where(infeasible, lo, mid)
            hi = torch.where(infeasible, mid, hi)
        saturated = g(torch.ones_like(p)) <= delta
        return torch.where(saturated, torch.ones_like(p), 0.5 * (lo + hi))

    t, u = bisect(g_upper), bisect(g_lower)
    # r_hi = q / p with q = p + (1 - p) t computed at the solve point, divided by the true p.
    log_q = torch.log(p + pc * t)
    upper = torch.where(log_p < floor, torch.exp(log_q - log_p), 1.0 + s * t)
    lower = torch.where(log_p < floor, torch.zeros_like(u), 1.0 - u)
    return lower, upper


# ----------------------------------------------------------------------------------------------------------------
# Built-in divergences


def _f_kl(u: Tensor) -> Tensor:
    return -torch.log(u) + u - 1.0


def _f_tv(u: Tensor) -> Tensor:
    return 0.5 * (u - 1.0).abs()


def _f_chi2(u: Tensor) -> Tensor:
    return (u - 1.0) ** 2


register_divergence("kl", _f_kl, _kl_bounds, _kl_bounds_float32)
register_divergence("tv", _f_tv, _tv_bounds)
register_divergence("chi2", _f_chi2, _chi2_bounds)
