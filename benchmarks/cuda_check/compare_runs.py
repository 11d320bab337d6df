"""Compare the CUDA runs: same seed twice (determinism on CUDA), CUDA vs CPU, and a summary of each run."""

import json
import sys
from pathlib import Path

import torch

root = Path(sys.argv[1])


def metrics(name):
    p = root / name / "metrics.jsonl"
    return [json.loads(l) for l in p.read_text().splitlines() if l.strip()] if p.exists() else []


TIMING = ("seconds", "per_second", "bounds_frac")


def strip(rows):
    return [{k: v for k, v in r.items() if not any(t in k for t in TIMING)} for r in rows]


for name in ("grpo_cuda_a", "grpo_cuda_b", "bandpo_cuda", "grpo_cpu"):
    rows = metrics(name)
    if not rows:
        print(name, "no metrics")
        continue
    last = rows[-1]
    step_s = [r.get("step_seconds") for r in rows if r.get("step_seconds") is not None]
    tail = step_s[len(step_s) // 2 :]
    print(
        f"{name}: steps={len(rows)} reward first/last={rows[0].get('reward_mean'):.3f}/{last.get('reward_mean'):.3f} "
        f"entropy first/last={rows[0].get('entropy'):.3f}/{last.get('entropy'):.3f} "
        f"median step_s (2nd half)={sorted(tail)[len(tail) // 2]:.3f} clip={last.get('offpolicy/clipfrac')}"
    )
a, b = strip(metrics("grpo_cuda_a")), strip(metrics("grpo_cuda_b"))
print("cuda same-seed metrics identical:", a == b and len(a) > 0)
if a and b and a != b:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        d = {k: (x[k], y.get(k)) for k in x if x[k] != y.get(k)}
        if d:
            print(" first differing step", i, list(d.items())[:5])
            break


def weights(name):
    d = root / name / "model"
    f = list(d.glob("*.safetensors"))
    if not f:
        return None
    from safetensors.torch import load_file

    return load_file(str(f[0]))


wa, wb = weights("grpo_cuda_a"), weights("grpo_cuda_b")
if wa and wb:
    print(
        "cuda same-seed final weights equal:",
        all(torch.equal(wa[k], wb[k]) for k in wa),
        "max abs diff:",
        max(float((wa[k] - wb[k]).abs().max()) for k in wa),
    )
c = strip(metrics("grpo_cpu"))
if a and c:
    print("cuda vs cpu reward_mean step0:", a[0].get("reward_mean"), c[0].get("reward_mean"))
