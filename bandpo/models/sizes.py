"""The tiny models' sizes: the architecture and pretraining recipe of each (`SizeSpec`, `SIZES`), read by the
build (`bandpo.models.tiny`) and by the config check and the DAG's budget (`bandpo.config`), which need the names
and the step counts without importing torch or transformers.

Measured with one thread while another job used the second core (seed 0; test split, 300 problems x 8 samples at
T=1.0, graded by ``bandpo.grader.grade``; greedy: T=0.05)::

    size    architecture                   params   steps  build wall/CPU  test acc  L1 / L2 / L3        greedy  entropy
    tiny-s  d64, 4 layers, 4 heads, ff 172 204,544  2800   385 s / 233 s   0.240     0.38 / 0.23 / 0.11  0.520   0.44
    tiny-m  d128, 3 layers, 4 heads, ff 344 606,464 2400   472 s / 314 s   0.340     0.47 / 0.33 / 0.21  0.757   0.43

Entropy: mean token entropy (nats) of the sampled answers. ``tiny-m`` is three layers wide rather than deeper: per
step, cost grows with depth more than with width here, and at about the same CPU time the 3-layer model learned
more than a deeper 1M-parameter one (benchmarks/CHANGELOG.md, "the tiny models' recipe").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SizeSpec:
    """Architecture and pretraining recipe of one tiny model size (Llama, tied embeddings, no biases)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    steps: int
    lr: float
    batch_size: int = 32
    warmup_steps: int = 100
    decay_frac: float = 0.9  # warmup, constant, then linear decay to min_lr_frac over the last decay_frac of steps
    min_lr_frac: float = 0.0
    weight_decay: float = 0.01
    direct_frac: float = 0.25  # share of targets that are the bare \boxed{answer} instead of the worked line
    label_smoothing: float = 0.0  # of the pretraining cross-entropy: T=1.0 samples noisier than the argmax
    pack_len: int = 128  # the examples of a batch are packed into rows of this many tokens (0: pad instead)
    eval_k: int = 8  # samples per validation problem for info.json's base accuracy
    max_position_embeddings: int = 256


SIZES: dict[str, SizeSpec] = {
    "tiny-s": SizeSpec(hidden_size=64, num_layers=4, num_heads=4, intermediate_size=172, steps=2800, lr=3e-3,
                       label_smoothing=0.03),
    "tiny-m": SizeSpec(hidden_size=128, num_layers=3, num_heads=4, intermediate_size=344, steps=2400, lr=2e-3,
                       label_smoothing=0.03),
    # for unit tests only: seconds to build, not meant to be right
    "tiny-test": SizeSpec(
        hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, steps=20, lr=3e-3, batch_size=8,
        warmup_steps=5, eval_k=2,
    ),
}  # fmt: skip


def get_size(size: str | SizeSpec, **overrides: Any) -> SizeSpec:
    """The `SizeSpec` of a size name (or ``size`` itself), with the fields of ``overrides`` that are not None
    replaced; ValueError naming the known sizes for an unknown name."""
    spec = size if isinstance(size, SizeSpec) else SIZES.get(size)
    if spec is None:
        raise ValueError(f"unknown model size {size!r}; known: {sorted(SIZES)}")
    overrides = {k: v for k, v in overrides.items() if v is not None}
    return dataclasses.replace(spec, **overrides) if overrides else spec
