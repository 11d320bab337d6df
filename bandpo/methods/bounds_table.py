"""The ratio bounds of the built-in methods against the old probability p: the data of the report's bound figure.

    python -m bandpo.methods.bounds_table --out results/embedded/bounds.csv [--delta 0.1] [--cap 10]

Columns: method, p, r_lo, r_hi, dq_lo = p (r_lo - 1), dq_hi = p (r_hi - 1), delta. The bounds come from the method
registry (`bandpo.methods.compute_bounds`, torch), which is why this runs as its own step beside the methods and the
report (files only) just reads the table (`bandpo.analysis.load.load_bounds`). BandPO uses radius ``delta``; ``cap``
caps BandPO's and DCPO's r_hi (default: none, the uncapped region). The rows of method "simplex limit" are
r in [0, 1/p], i.e. the new probability q = p r in [0, 1]."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from bandpo.core.failures import run_job
from bandpo.core.files import atomic_write_text
from bandpo.methods import compute_bounds

BOUND_METHODS = (  # (label in the figure, method, parameters)
    ("BandPO-KL", "bandpo", {"divergence": "kl"}),
    ("BandPO-TV", "bandpo", {"divergence": "tv"}),
    ("BandPO-chi2", "bandpo", {"divergence": "chi2"}),
    ("GRPO", "grpo", {}),
    ("Clip-Higher", "clip_higher", {}),
    ("DCPO", "dcpo", {}),
)
SIMPLEX = "simplex limit"  # the dashed rows of the bound figure (bandpo.report.figures.SIMPLEX)


def bounds_table(delta: float = 0.1, p: Sequence[float] | None = None, cap: float | None = None) -> pd.DataFrame:
    """The table (see the module docstring) on the grid ``p`` (default: 397 points in [0.005, 0.995])."""
    grid = np.asarray(p if p is not None else np.linspace(0.005, 0.995, 397), dtype=np.float64)
    log_p = torch.log(torch.as_tensor(grid, dtype=torch.float64)).unsqueeze(0)
    mask = torch.ones_like(log_p, dtype=torch.bool)
    frames = []
    for label, method, params in BOUND_METHODS:
        params = dict(params)
        if method == "bandpo":
            params.update(delta=delta, cap=cap)
        elif method == "dcpo":
            params.update(cap=cap)
        lo, hi = compute_bounds(method, log_p, mask, params)
        frames.append(pd.DataFrame({"method": label, "p": grid, "r_lo": lo[0].numpy(), "r_hi": hi[0].numpy()}))
    frames.append(pd.DataFrame({"method": SIMPLEX, "p": grid, "r_lo": 0.0, "r_hi": 1.0 / grid}))
    df = pd.concat(frames, ignore_index=True)
    df["dq_lo"] = df["p"] * (df["r_lo"] - 1.0)
    df["dq_hi"] = df["p"] * (df["r_hi"] - 1.0)
    df["delta"] = float(delta)
    return df


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="CSV path")
    ap.add_argument("--delta", type=float, default=0.1, help="BandPO radius")
    ap.add_argument("--cap", type=float, default=None, help="cap of r_hi (default: none)")
    args = ap.parse_args(argv)
    table = bounds_table(args.delta, cap=args.cap)
    atomic_write_text(args.out, table.to_csv(index=False, lineterminator="\n"))
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_job(main, "python -m bandpo.methods.bounds_table"))
