"""Band operator on CUDA: exactness against float64 CPU, and kl / tv / fixed clip timed side by side on the GPU."""

import time

import torch

from bandpo.methods.band import band_bounds

torch.manual_seed(0)
n = 16_000_000
logp = -torch.rand(n, dtype=torch.float64) * 18.0  # p in [1.5e-8, 1]
for div in ("kl", "tv", "chi2"):
    for dt in (torch.float32, torch.float64):
        xin = logp[:1_000_000].to(dt)
        lo_ref, hi_ref = band_bounds(xin.double(), div, 0.05)  # CPU float64 reference on the same (rounded) input
        lo, hi = band_bounds(xin.to("cuda"), div, 0.05)
        al = (lo.double().cpu() - lo_ref).abs().max().item()
        fin = torch.isfinite(hi_ref)
        rh = ((hi.double().cpu()[fin] - hi_ref[fin]).abs() / hi_ref[fin].abs()).max().item()
        print(
            f"{div} {str(dt):14s} vs CPU float64 on the same input: "
            f"lower max abs err {al:.2e}, upper max rel err {rh:.2e}"
        )
x = logp.to("cuda", torch.float32)


def fixed(x):
    return torch.full_like(x, 0.8), torch.full_like(x, 1.2)


fns = {
    "fixed": fixed,
    "tv": lambda x: band_bounds(x, "tv", 0.05),
    "chi2": lambda x: band_bounds(x, "chi2", 0.05),
    "kl": lambda x: band_bounds(x, "kl", 0.05),
}
for f in fns.values():
    f(x)
torch.cuda.synchronize()
times = {k: [] for k in fns}
for _ in range(20):
    for k, f in fns.items():
        torch.cuda.synchronize()
        t = time.perf_counter()
        f(x)
        torch.cuda.synchronize()
        times[k].append(time.perf_counter() - t)
med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
for k, v in med.items():
    print(f"{k:6s} {n / 1e6:.0f}M float32 tokens on CUDA: median {v * 1e3:.2f} ms ({v / n * 1e9:.3f} ns/token)")
print(f"ratios: kl/tv {med['kl'] / med['tv']:.2f}x  kl/fixed {med['kl'] / med['fixed']:.2f}x")
try:
    t = time.perf_counter()
    cf = torch.compile(lambda x: band_bounds(x, "kl", 0.05), fullgraph=True)
    lo_c, hi_c = cf(x)
    torch.cuda.synchronize()
    lo_e, hi_e = band_bounds(x, "kl", 0.05)
    print(
        f"torch.compile fullgraph on CUDA: ok in {time.perf_counter() - t:.1f} s; max |diff| vs eager: "
        f"{(lo_c - lo_e).abs().max().item():.2e} / {(hi_c - hi_e).abs().nan_to_num(0).max().item():.2e}"
    )
except Exception as e:
    print("torch.compile fullgraph on CUDA failed:", type(e).__name__, str(e)[:300])
