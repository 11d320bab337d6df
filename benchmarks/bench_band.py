"""Time `band_bounds` for kl / tv / chi2 against a plain fixed clip, on the same old log-probs, in one run.

    python benchmarks/bench_band.py [--tokens 1000000] [--repeats 7] [--threads N]

Prints the median time of each (timed round-robin, so that load from other jobs hits all alike) and the ratios
kl / tv and kl / fixed clip. Then times the authors' KL solver against the suite's on the same tokens, in the same
run and round-robin, and prints that ratio: bisection with a fixed number of iterations and one host
synchronisation per iteration (`authors_kl_bisection`, written here from the description of their algorithm, not
from their code), and how closely the two solvers' bounds agree.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from _timing import interleaved_times

from bandpo.band import band_bounds


def interleaved_median_seconds(fns: dict, repeats: int, sync=lambda: None) -> dict:
    """Median time of each function over ``repeats`` interleaved calls (`_timing.interleaved_times`)."""
    return {name: statistics.median(t) for name, t in interleaved_times(fns, repeats, sync).items()}


BISECT_ITERS = 50  # halvings of a bracket of width <= 1 in q: 2^-50 ~ 1e-15, float64 resolution near q = 1


def authors_kl_bisection(old_log_prob: torch.Tensor, delta: float, iters: int = BISECT_ITERS):
    """The authors' KL solver, re-implemented from its description (not their code): per token, bisection in
    q = p r on KL(Bern(p) || Bern(q)) = delta for the root below p and the one above it, both brackets halved
    together ``iters`` times (a fixed count, no early exit), in float64, and once per halving the widest bracket is
    read on the host: one host synchronisation per iteration. Returns (r_lo, r_hi), the feasible ends."""
    p = old_log_prob.double().exp()
    const = torch.xlogy(p, p) + torch.xlogy(1 - p, 1 - p)  # the part of KL(p || q) that does not depend on q

    def kl(q: torch.Tensor) -> torch.Tensor:
        return const - p * torch.log(q) - (1 - p) * torch.log1p(-q)

    lo_a, hi_a = torch.zeros_like(p), p.clone()  # lower root: kl(lo_a) > delta >= kl(hi_a)
    lo_b, hi_b = p.clone(), torch.ones_like(p)  # upper root: kl(lo_b) <= delta < kl(hi_b)
    for _ in range(iters):
        mid_a, mid_b = (lo_a + hi_a) / 2, (lo_b + hi_b) / 2
        out_a, out_b = kl(mid_a) > delta, kl(mid_b) > delta
        lo_a, hi_a = torch.where(out_a, mid_a, lo_a), torch.where(out_a, hi_a, mid_a)
        lo_b, hi_b = torch.where(out_b, lo_b, mid_b), torch.where(out_b, mid_b, hi_b)
        float(torch.maximum(hi_a - lo_a, hi_b - lo_b).max())  # the per-iteration host sync
    return hi_a / p, lo_b / p


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    parser.add_argument("--delta", type=float, default=0.05)
    parser.add_argument("--bisect-iters", type=int, default=BISECT_ITERS, help="halvings of the authors' solver")
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
            "bisection": lambda: authors_kl_bisection(old_log_prob, args.delta, args.bisect_iters),
        },
        args.bisect_repeats,
        sync,
    )
    # both solve the same equation: the largest difference of the bounds as probabilities q = p r (bisection halves
    # an interval of q, so that is what it resolves: 2^-iters)
    ours = band_bounds(old_log_prob.double(), "kl", args.delta)
    theirs = authors_kl_bisection(old_log_prob, args.delta, args.bisect_iters)
    p = old_log_prob.double().exp()
    dq = max(float((p * (a - b)).abs().max()) for a, b in zip(theirs, ours, strict=True))

    where = torch.cuda.get_device_name() if old_log_prob.is_cuda else f"cpu, torch threads={torch.get_num_threads()}"
    print(f"tokens={args.tokens} float32, delta={args.delta}, {where}")
    for name, secs in timings.items():
        print(f"  {name:<11} {secs * 1e3:9.2f} ms   {args.tokens / secs / 1e6:8.1f} M tokens/s")
    print(f"the authors' KL bisection ({args.bisect_iters} iterations, a host sync each): "
          f"{versus['bisection'] * 1e3:.1f} ms, the suite's kl {versus['kl'] * 1e3:.2f} ms in the same round-robin "
          f"({args.bisect_repeats} calls each); bounds agree to |dq| <= {dq:.1e} in q = p r")  # fmt: skip
    print(f"ratio kl / tv          = {timings['kl'] / timings['tv']:.2f}x   (target <= 5x, stretch <= 2x)")
    print(f"ratio kl / chi2        = {timings['kl'] / timings['chi2']:.2f}x")
    print(f"ratio kl / fixed clip  = {timings['kl'] / timings['fixed clip']:.1f}x")
    print(f"ratio authors' bisection / kl = {versus['bisection'] / versus['kl']:.0f}x   (same run, same tokens)")


if __name__ == "__main__":
    main()
