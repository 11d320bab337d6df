"""Time `band_bounds` for kl / tv / chi2 against a plain fixed clip, on the same old log-probs, in one run.

    python benchmarks/bench_band.py [--tokens 1000000] [--repeats 7] [--threads N]

Prints the median time of each (timed round-robin, so that load from other jobs hits all alike) and the ratios
kl / tv and kl / fixed clip. Also times the authors' style of KL
solver (bisection with a host synchronisation per iteration, re-implemented here from the paper's description)
on a subsample, to put the suite's solver in scale. That baseline is this file's own re-implementation of the
pattern, not the authors' code (GPL-3.0), so its time is only indicative of theirs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bandpo.band import band_bounds


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved_median_seconds(fns: dict, repeats: int) -> dict:
    """Median time of each function, timed round-robin so that a change of machine load hits all of them alike."""
    for fn in fns.values():
        fn()  # warm-up
    times: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def bisection_with_sync(old_log_prob: torch.Tensor, delta: float, iters: int = 60, tol: float = 1e-10):
    """A bisection KL solver that checks convergence on the host every iteration (the pattern the suite avoids)."""
    p = old_log_prob.double().exp().clamp(1e-12, 1 - 1e-12)

    def kl(q):
        return p * torch.log(p / q) + (1 - p) * torch.log((1 - p) / (1 - q))

    lo, hi = p.clone(), torch.ones_like(p) - 1e-15
    for _ in range(iters):
        mid = (lo + hi) / 2
        over = kl(mid) > delta
        hi, lo = torch.where(over, mid, hi), torch.where(over, lo, mid)
        if float((hi - lo).max()) < tol:  # host sync, data-dependent exit
            break
    upper = hi / p
    lo2, hi2 = torch.full_like(p, 1e-300), p.clone()
    for _ in range(iters):
        mid = (lo2 + hi2) / 2
        over = kl(mid) > delta
        lo2, hi2 = torch.where(over, mid, lo2), torch.where(over, hi2, mid)
        if float((hi2 - lo2).max()) < tol:
            break
    return lo2 / p, upper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    parser.add_argument("--delta", type=float, default=0.05)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    # Realistic old log-probs: most tokens near p = 1, a long tail of unlikely ones.
    old_log_prob = -(torch.distributions.Exponential(1.0).sample((args.tokens,)) ** 2)
    old_log_prob = old_log_prob.float()

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
    )
    sub = old_log_prob[:100_000]
    sync_s = median_seconds(lambda: bisection_with_sync(sub, args.delta), 3) * (args.tokens / sub.numel())

    print(f"tokens={args.tokens} float32, delta={args.delta}, torch threads={torch.get_num_threads()}")
    for name, secs in timings.items():
        print(f"  {name:<11} {secs * 1e3:9.2f} ms   {args.tokens / secs / 1e6:8.1f} M tokens/s")
    print(f"  host-sync bisection KL (extrapolated from 100k tokens) {sync_s * 1e3:9.1f} ms")
    print(f"ratio kl / tv          = {timings['kl'] / timings['tv']:.2f}x   (target <= 5x, stretch <= 2x)")
    print(f"ratio kl / chi2        = {timings['kl'] / timings['chi2']:.2f}x")
    print(f"ratio kl / fixed clip  = {timings['kl'] / timings['fixed clip']:.1f}x")
    print(f"speed-up vs host-sync bisection KL = {sync_s / timings['kl']:.0f}x")


if __name__ == "__main__":
    main()
