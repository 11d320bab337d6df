"""Time the policy-loss step (bounds + PPO surrogate + diagnostics) of BandPO-KL against GRPO on one rollout batch.

    python benchmarks/bench_surrogate.py [--batch 64] [--length 512] [--padding 0.3] [--micro-batches 4]
                                         [--repeats 40] [--threads 1] [--device cpu]

The batch is realistic in shape: ``batch`` responses of up to ``length`` tokens, right-padded so that a fraction
``padding`` of the positions are padding; old probabilities are mostly high with a long tail (p = sigmoid(z),
z ~ N(3, 2.5)), the new policy moves log-probs by N(0, 0.1), advantages are per-sequence +-1.

It times, per rollout batch (best of ``repeats``, the calls of all parts and methods interleaved so that a busy,
shared CPU disturbs them alike):
- bounds, once per batch on the valid tokens (what the suite's trainer does: `compute_bounds`),
- bounds, once per batch over every position including padding (what the suite avoids),
- bounds recomputed inside each of ``micro-batches`` loss calls (what a verl policy loss must do),
- surrogate + diagnostics, forward only and forward + backward, with the precomputed bounds,
and prints the BandPO-KL / GRPO ratio of the whole step (bounds once + surrogate + diagnostics, fwd + bwd).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from _timing import interleaved_times

from bandpo.methods import compute_bounds, get_method, ppo_surrogate

METHODS = {"grpo": ("grpo", {}), "bandpo-kl": ("bandpo", {"divergence": "kl"})}
STEP = "step (bounds once + fwd+bwd)"


def best_seconds(
    fns: dict[tuple[str, str], Callable[[], object]], repeats: int, sync: Callable[[], None] = lambda: None
) -> dict[tuple[str, str], float]:
    """Best-of-``repeats`` wall time of each function, calls interleaved (`_timing.interleaved_times`)."""
    return {k: min(v) for k, v in interleaved_times(fns, repeats, sync).items()}


def make_batch(batch: int, length: int, padding: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    # Response lengths uniform around the mean that gives the requested padding fraction.
    mean_len = (1.0 - padding) * length
    spread = min(mean_len, length - mean_len)
    lengths = (mean_len + spread * (2 * torch.rand(batch, generator=g) - 1)).round().long().clamp(1, length)
    mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)
    old = torch.nn.functional.logsigmoid(3.0 + 2.5 * torch.randn(batch, length, generator=g))
    new = old + 0.1 * torch.randn(batch, length, generator=g)
    adv = torch.sign(torch.randn(batch, 1, generator=g)).expand(batch, length).contiguous()
    return old, new, adv, mask


def loss_step_parts(method: str, params: dict, old, new, adv, mask, micro_batches: int) -> dict[str, Callable]:
    """The parts of one method's loss step, as zero-argument callables."""
    get_method(method)
    settings = {"loss_agg_mode": "seq-mean-token-mean", "dual_clip_c": 10.0}
    all_positions = torch.ones_like(mask)
    chunks = torch.arange(mask.shape[0]).chunk(micro_batches)
    bounds = compute_bounds(method, old, mask, params)

    def bounds_valid():
        return compute_bounds(method, old, mask, params)

    def bounds_all_positions():
        return compute_bounds(method, old, all_positions, params)

    def bounds_per_micro_batch():
        for idx in chunks:
            compute_bounds(method, old[idx], mask[idx], params)

    def surrogate_forward():
        with torch.no_grad():
            return ppo_surrogate(old, new, adv, mask, *bounds, settings)

    def surrogate_forward_backward():
        log_prob = new.clone().requires_grad_()
        loss, metrics = ppo_surrogate(old, log_prob, adv, mask, *bounds, settings)
        loss.backward()
        return metrics

    return {
        "bounds (valid tokens, once)": bounds_valid,
        "bounds (all positions)": bounds_all_positions,
        f"bounds (x{micro_batches} micro-batches)": bounds_per_micro_batch,
        "surrogate+diag fwd": surrogate_forward,
        "surrogate+diag fwd+bwd": surrogate_forward_backward,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--padding", type=float, default=0.3)
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (GPU timings synchronise after each call)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    old, new, adv, mask = (t.to(device) for t in make_batch(args.batch, args.length, args.padding))
    n_valid = int(mask.sum())
    print(
        f"batch {args.batch} x {args.length} tokens, {1 - n_valid / mask.numel():.1%} padding ({n_valid} valid), "
        f"float32, {device}, {args.threads} thread(s), torch {torch.__version__}, best of {args.repeats} (interleaved)"
    )
    parts = {
        label: loss_step_parts(method, params, old, new, adv, mask, args.micro_batches)
        for label, (method, params) in METHODS.items()
    }
    calls = {(label, k): fn for label, fns in parts.items() for k, fn in fns.items()}
    best = best_seconds(calls, args.repeats, sync)
    results = {label: {k: best[(label, k)] for k in fns} for label, fns in parts.items()}
    for r in results.values():
        r[STEP] = r["bounds (valid tokens, once)"] + r["surrogate+diag fwd+bwd"]

    g, b = results["grpo"], results["bandpo-kl"]
    width = max(len(k) for k in g)
    print(f"{'':{width}}  {'grpo':>10}  {'bandpo-kl':>10}  {'ratio':>7}")
    for k in g:
        print(f"{k:{width}}  {g[k] * 1e3:8.2f}ms  {b[k] * 1e3:8.2f}ms  {b[k] / g[k]:6.2f}x")
    valid, everywhere = b["bounds (valid tokens, once)"], b["bounds (all positions)"]
    print(
        f"BandPO-KL / GRPO, whole step: {b[STEP] / g[STEP]:.2f}x; "
        f"KL bounds on valid tokens / on all positions: {valid / everywhere:.2f}x; "
        f"KL bounds share of the BandPO-KL step: {valid / b[STEP]:.1%}"
    )


if __name__ == "__main__":
    main()
