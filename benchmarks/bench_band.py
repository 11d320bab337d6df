"""Time `band_bounds` for kl / tv / chi2 against a plain fixed clip, on the same old log-probs, in one run.

    python benchmarks/bench_band.py [--tokens 1000000] [--repeats 7] [--threads N]

Prints the median time of each (timed round-robin, so that load from other jobs hits all alike) and the ratios
kl / tv and kl / fixed clip. Then times the authors' KL solver as they ship it against the suite's on the same
tokens, in the same run and round-robin, and prints that ratio: a saturation check, then bisection in r in the
input's dtype for the upper bound and then for the lower one, each loop leaving at a 1e-6 bracket or after 50
iterations, one host synchronisation per iteration (`authors_kl_bisection`, written here from the description of
their algorithm, not from their code), and how closely the bounds agree.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from _timing import interleaved_times

from bandpo.core import numerics
from bandpo.methods.band import band_bounds


def interleaved_median_seconds(fns: dict, repeats: int, sync=lambda: None) -> dict:
    """Median time of each function over ``repeats`` interleaved calls (`_timing.interleaved_times`)."""
    return {name: statistics.median(t) for name, t in interleaved_times(fns, repeats, sync).items()}


BISECT_MAX_ITERS = 50  # the shipped solver's iteration cap, per bound
BISECT_TOL = 1e-6  # ... and its exit: the widest bracket (in r) over the whole tensor at most this
BISECT_EPS = 1e-12  # the floor both arguments of the divergence function are clamped to before the logarithm


def authors_kl_bisection(old_log_prob: torch.Tensor, delta: float, max_iters: int = BISECT_MAX_ITERS):
    """The authors' KL solver as they ship it, written here from its description (not from their GPL code).

    Per token, with p = exp(old_log_prob) in the input's dtype, g(r) = p f(r) + (1 - p) f((1 - p r) / (1 - p)) with
    f(t) = -log t, both arguments clamped to at least 1e-12 first. First a saturation check: g at r = 1/p and at
    r = 0 (a bound whose end of the simplex lies inside the trust region is that end). Then two bisections one
    after the other, each with its own exit: the upper root on [1, 1/p] (g increasing), then the lower one on
    [0, 1] (g decreasing); each halves its bracket until the widest bracket over the whole tensor is at most 1e-6
    (read on the host: one synchronisation per iteration) or after 50 iterations, and returns the bracket's
    midpoint. Returns (r_lo, r_hi, iterations run by both loops)."""
    p = old_log_prob.detach().exp()
    pc = 1.0 - p

    def g(r: torch.Tensor) -> torch.Tensor:
        comp = (1.0 - r * p) / pc
        return p * -torch.log(torch.clamp(r, min=BISECT_EPS)) + pc * -torch.log(torch.clamp(comp, min=BISECT_EPS))

    upper_end = 1.0 / p
    upper_saturated, lower_saturated = g(upper_end) <= delta, g(torch.zeros_like(p)) <= delta
    iters = 0

    def bisect(lo: torch.Tensor, hi: torch.Tensor, increasing: bool) -> torch.Tensor:
        nonlocal iters
        for _ in range(max_iters):
            iters += 1
            mid = 0.5 * (lo + hi)
            root_above = (g(mid) < delta) if increasing else (g(mid) >= delta)
            lo, hi = torch.where(root_above, mid, lo), torch.where(root_above, hi, mid)
            if torch.max(hi - lo).item() <= BISECT_TOL:  # the host sync
                break
        return 0.5 * (lo + hi)

    upper = torch.where(upper_saturated, upper_end, bisect(torch.ones_like(p), upper_end, increasing=True))
    lower = bisect(torch.zeros_like(p), torch.ones_like(p), increasing=False)
    lower = torch.where(lower_saturated, torch.zeros_like(p), lower)
    return lower, upper, iters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    parser.add_argument("--delta", type=float, default=0.05)
    parser.add_argument("--bisect-repeats", type=int, default=5, help="timed calls of each in the versus round-robin")
    parser.add_argument("--device", default="cpu", help="cpu or cuda: where the tokens live and both solvers run")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    # Realistic old log-probs: most tokens near p = 1, a long tail of unlikely ones.
    old_log_prob = -(torch.distributions.Exponential(1.0).sample((args.tokens,)) ** 2)
    old_log_prob = old_log_prob.float().to(args.device)
    sync = torch.cuda.synchronize if old_log_prob.is_cuda else (lambda: None)

    eps = 0.2
    ratio = torch.exp(old_log_prob + 0.01 * torch.randn_like(old_log_prob) - old_log_prob)
    timings = interleaved_median_seconds(
        {
            "fixed clip": lambda: ratio.clamp(1 - eps, 1 + eps),
            "tv": lambda: band_bounds(old_log_prob, "tv", args.delta),
            "chi2": lambda: band_bounds(old_log_prob, "chi2", args.delta),
            "kl": lambda: band_bounds(old_log_prob, "kl", args.delta),
        },
        args.repeats,
        sync,
    )
    # the authors' algorithm, in the same run on the same tokens, timed round-robin with the suite's KL solver
    versus = interleaved_median_seconds(
        {
            "kl": lambda: band_bounds(old_log_prob, "kl", args.delta),
            "bisection": lambda: authors_kl_bisection(old_log_prob, args.delta),
        },
        args.bisect_repeats,
        sync,
    )
    # both solve the same equation; the bisection's brackets are in r, in float32: it resolves r to its tolerance or
    # to float32 round-off, whichever is coarser, and where p rounds to 1 in float32 its g is 0/0 (NaN)
    ours = band_bounds(old_log_prob, "kl", args.delta)
    lo_b, hi_b, iters = authors_kl_bisection(old_log_prob, args.delta)
    defined = old_log_prob.exp() < 1
    d_hi = float(((hi_b - ours[1]).abs() / ours[1])[defined & torch.isfinite(hi_b) & torch.isfinite(ours[1])].max())
    d_lo = float((lo_b - ours[0]).abs()[defined].max())
    where = torch.cuda.get_device_name() if old_log_prob.is_cuda else f"cpu, torch threads={torch.get_num_threads()}"
    where += (
        f", numerics {numerics.record()['mode']} (bandpo.core.numerics; BANDPO_NUMERICS=native for the machine's own)"
    )
    print(f"tokens={args.tokens} float32, delta={args.delta}, {where}")
    for name, secs in timings.items():
        print(f"  {name:<11} {secs * 1e3:9.2f} ms   {args.tokens / secs / 1e6:8.1f} M tokens/s")
    print(f"the authors' KL bisection as shipped ({iters} iterations, a host sync each): "
          f"{versus['bisection'] * 1e3:.1f} ms, the suite's kl {versus['kl'] * 1e3:.2f} ms in the same round-robin "
          f"({args.bisect_repeats} calls each); where p < 1 in float32 ({int(defined.sum())} tokens) the bounds "
          f"agree to {d_hi:.1e} relative (r_hi, both finite) and {d_lo:.1e} absolute (r_lo)")  # fmt: skip
    print(f"ratio kl / tv          = {timings['kl'] / timings['tv']:.2f}x   (target <= 5x, stretch <= 2x)")
    print(f"ratio kl / chi2        = {timings['kl'] / timings['chi2']:.2f}x")
    print(f"ratio kl / fixed clip  = {timings['kl'] / timings['fixed clip']:.1f}x")
    print(f"ratio authors' bisection / kl = {versus['bisection'] / versus['kl']:.0f}x   (same run, same tokens; "
          "target >= 100x on 1M float32 tokens, one thread)")  # fmt: skip


if __name__ == "__main__":
    main()
