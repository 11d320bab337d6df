"""The Band operator against an independent high-precision oracle, its limits, and its properties."""

from __future__ import annotations

import math

import mpmath as mp
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bandpo.methods.band as band_module
from bandpo.methods.band import band_bounds, get_divergence, list_divergences, register_divergence

mp.mp.dps = 60

# ------------------------------------------------------------------------------------------------------------------
# Oracle: g_f(p, r) straight from the definition, roots by 60-digit bisection. No trick shared with the solver.

MP_F = {
    "kl": lambda u: -mp.log(u) + u - 1 if u > 0 else mp.inf,
    "tv": lambda u: abs(u - 1) / 2,
    "chi2": lambda u: (u - 1) ** 2,
    "rkl": lambda u: (u * mp.log(u) if u > 0 else mp.mpf(0)) - u + 1,
    "hellinger": lambda u: (mp.sqrt(u) - 1) ** 2,
}


def _register_runtime_divergences() -> None:
    register_divergence("rkl", lambda u: torch.xlogy(u, u) - u + 1.0)
    register_divergence("hellinger", lambda u: (torch.sqrt(u) - 1.0) ** 2)


_register_runtime_divergences()


def oracle(name: str, log_p: float, delta: float) -> tuple[mp.mpf, mp.mpf]:
    f = MP_F[name]
    p = mp.e ** mp.mpf(log_p)
    d = mp.mpf(delta)

    def g(r):
        return p * f(r) + (1 - p) * f((1 - r * p) / (1 - p))

    def bisect(lo, hi, increasing):
        for _ in range(260):
            mid = (lo + hi) / 2
            if (g(mid) > d) == increasing:
                hi = mid
            else:
                lo = mid
        return (lo + hi) / 2

    upper = 1 / p if g(1 / p) <= d else bisect(mp.mpf(1), 1 / p, True)
    lower = mp.mpf(0) if g(mp.mpf(0)) <= d else bisect(mp.mpf(0), mp.mpf(1), False)
    return lower, upper


P_GRID = [1e-8, 3e-7, 1e-5, 1e-3, 0.01, 0.08, 0.2, 0.37, 0.5, 0.73, 0.9, 0.99, 1 - 1e-4, 1 - 1e-6, 1 - 1e-8]
DELTAS = [1e-3, 0.05, 1.0]


@pytest.mark.parametrize("name", ["kl", "tv", "chi2", "rkl", "hellinger"])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-9), (torch.float32, 1e-5)])
def test_accuracy_against_oracle(name, dtype, tol):
    log_p = torch.tensor([math.log(p) for p in P_GRID], dtype=dtype)
    for delta in DELTAS:
        lower, upper = band_bounds(log_p, name, delta)
        assert lower.dtype == dtype and upper.dtype == dtype and lower.shape == log_p.shape
        for i, lp in enumerate(log_p.tolist()):  # the oracle sees exactly the value the solver saw
            exact_lo, exact_hi = oracle(name, lp, delta)
            assert abs(lower[i].item() - float(exact_lo)) <= tol, (name, lp, delta, lower[i].item(), exact_lo)
            rel = abs(upper[i].item() - float(exact_hi)) / float(exact_hi)
            assert rel <= tol, (name, lp, delta, upper[i].item(), exact_hi)


# Reference values of the math page, delta = 0.05, 6 significant digits.
REFERENCE = {
    0.01: {"kl": (0.00249739, 7.80985), "tv": (0.0, 6.0), "chi2": (0.0, 3.22486)},
    0.08: {"kl": (0.261696, 2.41055), "tv": (0.375, 1.625), "chi2": (0.241712, 1.75829)},
    0.2: {"kl": (0.475941, 1.71768), "tv": (0.75, 1.25), "chi2": (0.552786, 1.44721)},
    0.5: {"kl": (0.691516, 1.30848), "tv": (0.9, 1.1), "chi2": (0.776393, 1.22361)},
    0.9: {"kl": (0.866579, 1.07636), "tv": (0.944444, 1.05556), "chi2": (0.925464, 1.07454)},
    0.99: {"kl": (0.931214, 1.01008), "tv": (0.949495, 1.0101), "chi2": (0.977527, 1.0101)},
}


@pytest.mark.parametrize("p", sorted(REFERENCE))
def test_reference_table(p):
    for name, (lo, hi) in REFERENCE[p].items():
        lower, upper = band_bounds(torch.tensor([math.log(p)], dtype=torch.float64), name, 0.05)
        assert lower.item() == pytest.approx(lo, rel=1e-5, abs=1e-8)
        assert upper.item() == pytest.approx(hi, rel=1e-5)


def g_float64(name: str, p: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    f = get_divergence(name).f
    return p * f(r) + (1 - p) * f((1 - r * p) / (1 - p))


def test_saturation():
    log_p = torch.log(torch.tensor([0.01, 0.03, 0.3, 0.9], dtype=torch.float64))
    p = log_p.exp()
    # tv: r = 1 -+ delta / p clamped to [0, 1/p]; delta = 0.5 saturates below for p <= 0.5, above for p >= 0.5.
    lo, hi = band_bounds(log_p, "tv", 0.5)
    assert lo.tolist()[:3] == [0.0, 0.0, 0.0] and lo[3].item() == pytest.approx(1 - 0.5 / 0.9)
    assert hi[2].item() == pytest.approx(1 + 0.5 / 0.3) and hi[3].item() == pytest.approx(1 / 0.9)
    assert hi[0].item() == pytest.approx(51.0)
    # chi2 (delta = 1) saturates below for p <= delta / (1 + delta) and above for p >= 1 / (1 + delta).
    lo, hi = band_bounds(log_p, "chi2", 1.0)
    assert lo.tolist()[:3] == [0.0, 0.0, 0.0] and lo[3].item() == pytest.approx(1 - math.sqrt(0.1 / 0.9))
    assert hi[3].item() == pytest.approx(1 / 0.9) and hi[2].item() == pytest.approx(1 + math.sqrt(0.7 / 0.3))
    # kl never saturates: 0 < r_lo and r_hi < 1/p, even at a large radius, and g = delta holds at both ends.
    for delta in (0.05, 1.0):
        lo, hi = band_bounds(log_p, "kl", delta)
        assert bool((lo > 0).all()) and bool((hi < 1 / p).all())
        torch.testing.assert_close(g_float64("kl", p, hi), torch.full_like(p, delta), rtol=1e-9, atol=0)
        torch.testing.assert_close(g_float64("kl", p, lo), torch.full_like(p, delta), rtol=1e-9, atol=0)


@pytest.mark.parametrize("delta", [0.01, 0.05, 0.5])
def test_limits(delta):
    near_one = torch.tensor([0.0, -0.0, 1e-30, 3e-7, -1e-14], dtype=torch.float64)  # p = 1 and rounding noise
    expected_lo = {"kl": math.exp(-delta), "tv": 1 - delta, "chi2": 1.0}
    for name, lo_at_one in expected_lo.items():
        lo, hi = band_bounds(near_one, name, delta)
        assert hi[:4].tolist() == [1.0] * 4, name
        assert lo[:4].tolist() == pytest.approx([lo_at_one] * 4, abs=1e-12), name
        assert hi[4].item() == pytest.approx(1.0, abs=1e-6) and lo[4].item() == pytest.approx(lo_at_one, abs=1e-6)
    # p -> 0: r_lo -> 0, r_hi -> inf, allowed gain p (r_hi - 1) -> 1 - exp(-delta) (kl), delta (tv), 0 (chi2).
    log_p = torch.tensor([-30.0, -60.0, -690.0, -1e4, -math.inf], dtype=torch.float64)
    p = log_p.exp()
    gains = {"kl": 1 - math.exp(-delta), "tv": delta}
    for name in ("kl", "tv", "chi2"):
        lo, hi = band_bounds(log_p, name, delta)
        assert lo.tolist() == pytest.approx([0.0] * 5, abs=1e-12)
        assert math.isinf(hi[3].item()) and math.isinf(hi[4].item())
        gain = (p[:3] * (hi[:3] - 1)).tolist()
        if name in gains:
            assert gain == pytest.approx([gains[name]] * 3, rel=1e-9)
        else:
            assert gain[1] < 1e-12 and gain[0] > gain[1]


def test_no_gradient_and_nan_positions():
    x = torch.tensor([[-0.5, float("nan")], [-2.0, -0.01]], requires_grad=True)
    for name in list_divergences():
        lo, hi = band_bounds(x, name, 0.05)
        assert not lo.requires_grad and not hi.requires_grad
        assert torch.isnan(lo).tolist() == [[False, True], [False, False]]
        assert torch.isnan(hi).tolist() == [[False, True], [False, False]]


def test_bad_input_is_rejected_clearly():
    x = torch.zeros(3)
    with pytest.raises(ValueError, match="valid choices: .*chi2.*kl.*tv"):
        band_bounds(x, "klx")
    for bad in (0.0, -0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="delta"):
            band_bounds(x, "kl", bad)
    with pytest.raises(TypeError):
        band_bounds(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="f\\(1\\) must be 0"):
        register_divergence("shifted", lambda u: (u - 1.0) ** 2 + 1.0)
    with pytest.raises(ValueError, match="not convex"):
        register_divergence("concave", lambda u: -((u - 1.0) ** 2))
    assert "shifted" not in list_divergences() and "concave" not in list_divergences()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kl_path_compiles_fullgraph(dtype):
    """No graph break means no data-dependent Python control flow and no host synchronisation (.item(), etc.)."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: band_bounds(t, "kl", 0.05), fullgraph=True, backend="aot_eager")
    x = -torch.rand(257, dtype=dtype) * 12
    lo_c, hi_c = compiled(x)
    lo, hi = band_bounds(x, "kl", 0.05)
    torch.testing.assert_close(lo_c, lo, rtol=0, atol=0)
    torch.testing.assert_close(hi_c, hi, rtol=0, atol=0)


@pytest.mark.parametrize("delta", [1e-3, 0.05, 1.0])
def test_kl_interpolated_path_matches_polished_path(delta):
    """Below float64 the KL bounds come from the interpolation tables alone; over the whole table range (and past
    both ends) they must agree with the float64 solver on the same inputs to float32 precision."""
    log_p = torch.cat(
        (
            -torch.logspace(-40, math.log10(60.0), 20001, dtype=torch.float64),
            torch.tensor([-1e-300, -200.0, -710.0, -800.0], dtype=torch.float64),
        )
    )
    x = log_p.float().double()  # values exactly representable in float32, seen alike by both paths
    lo32, hi32 = band_bounds(x.float(), "kl", delta)
    lo64, hi64 = band_bounds(x, "kl", delta)
    finite = torch.isfinite(hi64) & (hi64 < torch.finfo(torch.float32).max)
    rel_hi = ((hi32.double() - hi64).abs() / hi64)[finite]
    assert rel_hi.max().item() <= 2e-7
    assert bool(torch.isinf(hi32[~finite]).all())
    assert (lo32.double() - lo64).abs().max().item() <= 2e-7


def test_kl_tables_are_cached_per_delta_and_device():
    band_module._KL_TABLE_CACHE.clear()
    x = -torch.rand(100, dtype=torch.float64) * 20
    with torch.inference_mode():  # tables built here must also serve calls outside inference mode
        lo1, hi1 = band_bounds(x, "kl", 0.0731)
    assert (0.0731, x.device, "float64") in band_module._KL_TABLE_CACHE
    cached = band_module._KL_TABLE_CACHE[(0.0731, x.device, "float64")]
    assert not cached.is_inference() and cached.dtype == torch.float64
    lo2, hi2 = band_bounds(x, "kl", 0.0731)  # cache hit, same result
    assert torch.equal(lo1, lo2) and torch.equal(hi1, hi2)
    band_module._KL_TABLE_CACHE.clear()
    lo3, hi3 = band_bounds(x, "kl", 0.0731)  # rebuilt, same result
    assert torch.equal(lo1, lo3) and torch.equal(hi1, hi3)
    for i in range(band_module._KL_TABLE_CACHE_SIZE + 3):  # bounded
        band_bounds(x[:3], "kl", 0.01 + i * 1e-3)
    assert len(band_module._KL_TABLE_CACHE) <= band_module._KL_TABLE_CACHE_SIZE


@pytest.mark.parametrize("delta", [1e-3, 0.05, 1.0])
def test_kl_float32_path_over_every_binade(delta):
    """Float32 inputs take the bit-indexed tables: over random float32 values of every binade (and densely where
    the bounds vary), r_hi within 2e-7 relative and r_lo within 2e-7 absolute of the float64 solver, inf exactly
    where the float64 value overflows float32; whatever the chunking of the input."""
    gen = torch.Generator().manual_seed(7)
    bits = torch.cat(
        (
            torch.randint(0, 0x7F800000, (100_000,), generator=gen, dtype=torch.int32),  # every finite x >= 0
            torch.randint(0x30000000, 0x43000000, (100_000,), generator=gen, dtype=torch.int32),  # x in [5e-10, 128)
        )
    )
    x = -bits.view(torch.float32)
    lo32, hi32 = band_bounds(x, "kl", delta)
    lo64, hi64 = band_bounds(x.double(), "kl", delta)
    finite = hi64 < torch.finfo(torch.float32).max
    assert ((hi32.double() - hi64).abs() / hi64)[finite].max().item() <= 2e-7
    assert bool(torch.isinf(hi32[~finite]).all())
    assert (lo32.double() - lo64).abs().max().item() <= 2e-7
    chunked = band_module._KL32_CHUNK
    try:
        band_module._KL32_CHUNK = 1000  # a chunk size that does not divide the input
        lo_c, hi_c = band_bounds(x.view(400, 500), "kl", delta)
    finally:
        band_module._KL32_CHUNK = chunked
    assert torch.equal(lo_c.reshape(-1), lo32) and torch.equal(hi_c.reshape(-1), hi32)


def test_kl_float32_path_special_values():
    """p = 1 (log p = 0, -0.0, rounding noise above 0), p = 0 (-inf), and NaN of any payload or sign."""
    nan_bits = torch.tensor([0x7FC00000, -0x400000, 0x7F800001, 0x7F80FFFF, -0x7FFFFF], dtype=torch.int32)
    x = torch.cat((torch.tensor([0.0, -0.0, 3e-8, 1e-3, -math.inf, -1e-45]), nan_bits.view(torch.float32)))
    lo, hi = band_bounds(x, "kl", 0.05)
    e = torch.tensor([-0.05]).exp()  # r_lo = exp(-delta) by float32's exp, as the operator computes it (<= 1 ulp)
    assert abs(e.item() - math.exp(-0.05)) <= torch.finfo(torch.float32).eps
    assert torch.equal(lo[:3], e.expand(3)) and torch.equal(hi[:3], torch.ones(3))
    assert lo[4].item() == 0.0 and hi[4].item() == math.inf
    assert bool(torch.isnan(lo[6:]).all()) and bool(torch.isnan(hi[6:]).all())
    lo64, hi64 = band_bounds(x[:6].double(), "kl", 0.05)
    torch.testing.assert_close(lo[:6].double(), lo64, rtol=0, atol=2e-7)
    torch.testing.assert_close(hi[:6].double(), hi64, rtol=2e-7, atol=0)
    for dtype in (torch.float16, torch.bfloat16):  # lower precisions go through float32
        lo_d, hi_d = band_bounds(x.to(dtype), "kl", 0.05)
        assert lo_d.dtype == dtype and hi_d.dtype == dtype
        lo_f, hi_f = band_bounds(x.to(dtype).float(), "kl", 0.05)
        torch.testing.assert_close(lo_d, lo_f.to(dtype), equal_nan=True, rtol=0, atol=0)
        torch.testing.assert_close(hi_d, hi_f.to(dtype), equal_nan=True, rtol=0, atol=0)


@pytest.mark.slow
def test_kl_path_compiles_with_inductor():
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: band_bounds(t, "kl", 0.05), fullgraph=True)
    x = -torch.rand(4096, dtype=torch.float64) * 12
    lo_c, hi_c = compiled(x)
    lo, hi = band_bounds(x, "kl", 0.05)
    torch.testing.assert_close(lo_c, lo, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(hi_c, hi, rtol=1e-12, atol=0)


# ------------------------------------------------------------------------------------------------------------------
# Properties over dtypes, including special and hostile values.

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
SPECIAL = [-math.inf, -1e4, -700.0, -88.0, -30.0, -1e-30, -1e-7, -0.0, 0.0, 1e-30, 1e-7]
log_prob_values = st.one_of(st.sampled_from(SPECIAL), st.floats(min_value=-40.0, max_value=0.0))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(log_prob_values, min_size=1, max_size=40),
    dtype=st.sampled_from(DTYPES),
    name=st.sampled_from(["kl", "tv", "chi2", "hellinger"]),
    delta=st.floats(min_value=1e-3, max_value=1.0),
)
def test_properties(values, dtype, name, delta):
    x = torch.tensor(values, dtype=torch.float64).to(dtype)
    lo, hi = band_bounds(x, name, delta)
    assert lo.dtype == dtype and hi.dtype == dtype
    assert not bool(torch.isnan(lo).any()) and not bool(torch.isnan(hi).any())
    assert bool((lo >= 0).all()) and bool((lo <= 1).all()) and bool((hi >= 1).all())

    # Monotone in p (up to float64 round-off of the solver, 1e-11 relative): sort by the value actually seen.
    order = torch.argsort(x.double())
    lo_s, hi_s = lo.double()[order], hi.double()[order]
    slack = 1e-11
    assert bool((lo_s[1:] >= lo_s[:-1] * (1 - slack) - 1e-300).all())
    finite = torch.isfinite(hi_s[:-1]) & torch.isfinite(hi_s[1:])
    assert bool((hi_s[1:][finite] <= hi_s[:-1][finite] * (1 + slack)).all())

    # +inf only where the exact bound overflows the dtype: compare with the float64 result for the same input.
    lo64, hi64 = band_bounds(x.double(), name, delta)
    max_dtype = torch.finfo(dtype).max
    is_inf = torch.isinf(hi)
    assert bool((hi64[is_inf] >= max_dtype * 0.999).all())
    assert bool(torch.isinf(hi)[hi64 > max_dtype * 1.001].all())

    # On the float64 result, g_f(p, bound) = delta wherever the bound is not saturated and representable.
    if dtype == torch.float64:
        p = x.exp()
        ok = (p > 1e-6) & (p < 1 - 1e-9)
        inner_hi = ok & (hi64 < 1 / p * (1 - 1e-9))
        inner_lo = ok & (lo64 > 1e-9)
        div_p = p.clamp(1e-300, 1 - 1e-16)
        torch.testing.assert_close(
            g_float64(name, div_p[inner_hi], hi64[inner_hi]), torch.full_like(hi64[inner_hi], delta), rtol=1e-7, atol=0
        )
        torch.testing.assert_close(
            g_float64(name, div_p[inner_lo], lo64[inner_lo]), torch.full_like(lo64[inner_lo], delta), rtol=1e-7, atol=0
        )
