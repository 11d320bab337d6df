"""The training protocol both trainers share: one dataclass, `Protocol`, under the config key ``train:``.

The local trainer's settings (`bandpo.train.settings.TrainConfig`) and verl's (`bandpo.verl.spec.VerlRun`) each
extend `Protocol` with the fields only that trainer has; a setting the two share is declared once, here, with one
default and one check. The defaults are the embedded CPU profile's (``snakemake --cores all``); the paper's protocol
is written out in ``config/gpu.yaml``. docs/protocol-fields.md is this class with verl's names beside it
(`bandpo.verl.command.PROTOCOL_KEYS`).

Imports nothing heavy (no torch, no method registry): the run plan (`bandpo.plan`) builds and checks every run's
settings at DAG start from these classes.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
"""How per-token losses become a scalar (`bandpo.methods.aggregate_loss`; verl's loss_agg_mode)."""
DEFAULT_DUAL_CLIP_C = 10.0
"""The dual-clip constant c (the paper's 10): the default of `Protocol.dual_clip_c`, of
`bandpo.methods.SurrogateConfig` and of `bandpo.verl.plugin` when verl's config lacks clip_ratio_c."""
TRACKERS = ("tensorboard", "mlflow")
"""The experiment trackers a run's curves can also go to (`Protocol.trackers`), named as verl's ``trainer.logger``
names them."""
MLFLOW_DIR, MLFLOW_DB = "mlruns", "mlflow.db"  # a run's own MLflow store: <run>/mlruns/mlflow.db (SQLite)


def mlflow_store(out: str | os.PathLike) -> str:
    """The URI of the run's own MLflow store, ``<out>/mlruns/mlflow.db`` (SQLite; the local trainer's and verl's)."""
    return "sqlite:///" + Path(out, MLFLOW_DIR, MLFLOW_DB).resolve().as_posix()


SPEC_OMITTED_AT_DEFAULT = ("trackers", "sampler_draws")
"""Fields a run's spec file leaves out while they hold their default (`spec_fields`), so that adding the field
rewrote no spec file and reran no job: those that change where a run's numbers are shown, not the numbers, and those
whose default is what every earlier run did (``sampler_draws``: ``stream``)."""
SAMPLER_KERNELS = ("torch", "c")
"""How the local sampler computes a decoded token's attention (`bandpo.train.settings.TrainConfig.sampler_kernel`)."""
SAMPLER_DRAWS = ("stream", "keyed")
"""Where the local sampler's random numbers come from (`bandpo.train.settings.TrainConfig.sampler_draws`)."""


@dataclass(kw_only=True)
class Protocol:
    """The settings of a training run that both trainers have, in the local trainer's vocabulary (verl's names:
    docs/protocol-fields.md). Defaults: the embedded CPU profile."""

    steps: int | None = 64
    """Rollout batches (= optimizer steps / (updates_per_step x ppo_epochs)); verl: None lets its total_epochs
    decide."""
    prompts_per_step: int = 32
    """Prompts drawn per rollout batch (each sampled ``samples_per_prompt`` times)."""
    samples_per_prompt: int = 8
    """Group size n of GRPO."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts (plain softmax sampling, no top-k / top-p). The old and new log-probs,
    hence the ratio, and the logged entropy are those of the same softmax(logits / temperature), as in verl."""
    max_new_tokens: int = 48
    """Longest completion; a completion without EOS by then is truncated there."""
    updates_per_step: int = 4
    """Mini-batches per pass over a rollout batch (paper: 256 prompts / 64 per mini-batch = 4)."""
    ppo_epochs: int = 1
    """Passes over each rollout batch (verl's actor.ppo_epochs; paper: 1). Each pass splits the batch afresh into
    ``updates_per_step`` mini-batches: ppo_epochs x updates_per_step optimizer updates per step, the first on-policy
    and every later one off-policy. Varies staleness at a fixed mini-batch size."""
    lr: float = 5e-4
    """AdamW learning rate (of the first step)."""
    lr_end: float | None = 1e-4
    """Learning rate of the last step; None = constant ``lr``. The local trainer decays linearly from ``lr``, verl
    along a half cosine (its min_lr_ratio = lr_end / lr). A high early rate makes clipping act while the base model's
    entropy is high; the decay keeps the late updates from eroding what was learned."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Gradient clipping: maximum global gradient L2 norm per update."""
    kl_coef: float = 0.0
    """k3 KL-to-reference loss coefficient (paper: 0.001; 0 = off and no reference forward pass)."""
    loss_agg_mode: str = "seq-mean-token-mean"
    """How per-token losses become a scalar (`bandpo.methods.aggregate_loss`; the paper: seq-mean-token-mean)."""
    dual_clip_c: float | None = DEFAULT_DUAL_CLIP_C
    """Dual-clip constant c for negative advantages (paper: 10; None disables, local trainer only)."""
    trackers: list[str] = field(default_factory=list)
    """Experiment trackers that also receive each step's metrics, beside metrics.jsonl: ``tensorboard`` (event files
    in the run's ``tensorboard/`` folder) and / or ``mlflow`` (a SQLite store in the run's ``mlruns/`` folder, or
    the store of $MLFLOW_TRACKING_URI); each needs its package (the trackers extra). Empty (the default): none.
    verl: its ``trainer.logger``, after the "console" and "file" it always has."""

    def protocol_problems(self) -> list[str]:
        """What is wrong with the shared settings, one ``field: why`` line each (empty: nothing)."""
        problems = []
        for name in ("prompts_per_step", "samples_per_prompt", "max_new_tokens", "updates_per_step", "ppo_epochs"):
            if not _positive_int(getattr(self, name)):
                problems.append(f"{name}: must be an integer >= 1, got {getattr(self, name)!r}")
        if self.steps is not None and not _positive_int(self.steps):
            problems.append(f"steps: must be an integer >= 1 (or null: verl's epochs decide), got {self.steps!r}")
        if _positive_int(self.samples_per_prompt) and self.samples_per_prompt < 2:
            problems.append("samples_per_prompt: must be >= 2 (GRPO normalises within a group)")
        for name in ("temperature", "lr", "grad_clip"):
            if not _finite(getattr(self, name)) or getattr(self, name) <= 0:
                problems.append(f"{name}: must be a finite number > 0, got {getattr(self, name)!r}")
        if self.lr_end is not None and (not _finite(self.lr_end) or self.lr_end < 0):
            problems.append(f"lr_end: must be null or a finite number >= 0, got {self.lr_end!r}")
        for name in ("weight_decay", "kl_coef"):
            if not _finite(getattr(self, name)) or getattr(self, name) < 0:
                problems.append(f"{name}: must be a finite number >= 0, got {getattr(self, name)!r}")
        if self.loss_agg_mode not in AGG_MODES:
            problems.append(f"loss_agg_mode: must be one of {', '.join(AGG_MODES)}, got {self.loss_agg_mode!r}")
        if self.dual_clip_c is not None and (not _finite(self.dual_clip_c) or self.dual_clip_c <= 1.0):
            problems.append(f"dual_clip_c: must be null or a finite number > 1, got {self.dual_clip_c!r}")
        problems += trackers_problems(self.trackers)
        return problems


def trackers_problems(trackers: object) -> list[str]:
    """What is wrong with a ``trackers`` list (names in `TRACKERS`, each once, each where its package, of the same
    name, is installed), one line each."""
    if not isinstance(trackers, (list, tuple)) or not all(isinstance(t, str) for t in trackers):
        return [f"trackers: must be a list of tracker names ({', '.join(TRACKERS)}), got {trackers!r}"]
    problems = [f"trackers: unknown tracker {t!r}; valid: {', '.join(TRACKERS)}" for t in trackers if t not in TRACKERS]
    if len(set(trackers)) != len(trackers):
        problems.append(f"trackers: each tracker once, got {list(trackers)}")
    problems += [f"trackers: {t} needs the {t} package: pip install -e \".[trackers]\" (pyproject.toml)"
                 for t in TRACKERS if t in trackers and importlib.util.find_spec(t) is None]  # fmt: skip
    return problems


def spec_fields(settings: Protocol) -> dict[str, Any]:
    """A run's settings as its spec file holds them: every field (``dataclasses.asdict``) except those of
    `SPEC_OMITTED_AT_DEFAULT` that hold their default (reading the file back gives them their default again)."""
    values = dataclasses.asdict(settings)
    defaults = {f.name: f for f in dataclasses.fields(settings)}
    for name in (n for n in SPEC_OMITTED_AT_DEFAULT if n in defaults):  # a field of this trainer's settings
        f = defaults[name]
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if values.get(name) == default:
            values.pop(name)
    return values


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def raise_problems(what: str, problems: list[str]) -> None:
    """ValueError listing ``problems`` (one per line) under ``invalid <what>``; nothing when there are none."""
    if problems:
        raise ValueError(f"invalid {what}:\n  " + "\n  ".join(problems))
