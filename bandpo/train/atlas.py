"""Equivalence atlas: where clipping rules that look different act the same, and exactly where they do not.

For pairs of rules, on the same tensors (old_log_prob, log_prob, advantages, response_mask), it measures (a) the
tokens each rule *stops* (the loss's gradient with respect to the token's log-prob is 0 while its advantage is not:
`bandpo.methods.stopped_diagnostics`'s definition) and (b) the per-token gradient g = d loss / d log pi, and checks
both against the region where the derivation below says the two rules must differ. Two sources of tensors:

* synthetic: a grid that covers the regions (old probability p in (0, 1], ratio r in (0, 30] with p r <= 1 so that
  the new probability is one, both signs of A);
* real: the testbed's rollouts: the first GRPO steps of the local trainer (`bandpo.train.loop`, its own sampler, scoring
  and updates, unchanged) on a base model, and at every mini-batch update the actual (old, new) log-probs of that
  mini-batch; every rule is evaluated on them, the run itself trains with GRPO.

The derivation
--------------

Per token: p = exp(old_log_prob), r = exp(clamp(log_prob - old_log_prob, -20, 20)) (the surrogate and verl clamp the
same way), A the advantage. The loss is aggregated token-sum, so g_t = dL_t / d log pi_t, and d r / d log pi = r.

Shared PPO surrogate of the bounds methods (`bandpo.methods.ppo_surrogate`), bounds [lo, hi], dual clip c:

    L = max(-A r, -A clip(r, lo, hi)),  then L = min(L, -A c) for A < 0
    A > 0:  g = -A r  if r <= hi,       else 0           (r > hi: the clipped branch is the max and constant)
    A < 0:  g = -A r  if lo <= r <= c,  else 0           (r < lo: clip-low; r > c: the dual clip; no c: c = inf)

DPPO, verl 0.9.1's ``dppo_kl`` / ``dppo_tv`` (thresholds clip_ratio_low / clip_ratio_high, truncation C =
clip_ratio_c), with p' = p r the new probability:

    L = -A sg(min(r, C)) log pi * m
    A > 0:  m = 1  iff  D(p, p') <= clip_ratio_high  or  p' <= p        g = -A min(r, C) m
    A < 0:  m = 1  iff  D(p, p') <= clip_ratio_low   or  p' >= p
    D = KL:  p log(p / p') + (1 - p) log((1 - p + 1e-8) / (1 - p' + 1e-8))  (the Bernoulli KL, verl's 1e-8 aside)
    D = TV:  A > 0: p' - p <= thr,  A < 0: p' - p >= -thr                   (|p' - p| on the pushed side)

Band (`bandpo.methods.band`): [r_lo, r_hi] = {r in [0, 1/p] : g_f(p, r) <= delta}; for KL, g_f(p, r) is exactly the
Bernoulli KL(p || p r) (f(u) = -log u + u - 1: KL(old || new), the same direction as DPPO's), for TV p |r - 1|.
Both are 0 at r = 1 and monotone on either side of it, so for every feasible r (p r <= 1)

    {D <= delta  or  r <= 1} = {r <= r_hi}        {D <= delta  or  r >= 1} = {r >= r_lo}.

BandPO caps the upper bound: hi = min(r_hi, 10), and trains with the dual clip c = 10.

Pairs 1 and 2, BandPO-KL / BandPO-TV (delta 0.05, cap 10, c = 10) against dppo_kl / dppo_tv with both thresholds =
delta and C = 20 (verl's own fallback; the suite's adapter passes the dual clip instead when one is set, and any
C >= 10 gives the same differing tokens, only DPPO's gradient there changes):

    A > 0, r <= min(r_hi, 10)         both -A r (r <= 10 < C: the truncation does not bind)          identical
    A > 0, r > r_hi                   both 0                                                         identical
    A > 0, min(r_hi, 10) < r <= r_hi  BandPO 0 (its cap), DPPO -A r; only where r_hi > 10, i.e.
                                      p < 0.00714 (KL) / p < delta / 9 = 0.00556 (TV)                DIFFER
    A < 0, r < r_lo                   both 0                                                         identical
    A < 0, r_lo <= r <= 10            both -A r                                                      identical
    A < 0, r > 10                     BandPO 0 (dual clip), DPPO -A min(r, 20) != 0; only p < 0.1     DIFFER

So DPPO's stop set is contained in BandPO's; BandPO stops more exactly in the two DIFFER regions, and everywhere
else the two gradients are equal: the same trust region, different tails.

Pair 3, Clip-Higher [0.8, 1.28] against GRPO [0.8, 1.2], both c = 10: they differ exactly for A > 0 and
1.2 < r <= 1.28 (GRPO stops, Clip-Higher -A r); for A < 0 the lower bound and the dual clip are the same.

Pair 4, GRPO with the dual clip c = 10 against GRPO without: they differ exactly for A < 0 and r > 10 (with it
the token is stopped, without it g = -A r); for A > 0 the dual clip never acts.

Boundaries (r exactly at a bound) and verl's 1e-8 move a token only when it lies within rounding of a bound: every
rule is evaluated in float64 (the real rollouts' float32 log-probs are exact in float64), so that rounding in the
rules' own arithmetic does not pose as a difference. The `predicted` masks below are the DIFFER regions, computed
from r, p, A and Band's exact bounds; the atlas counts the tokens where a measured difference (stop sets or
gradients beyond the tolerance) and the derived region disagree as ``unexplained``.

Command line::

    python -m bandpo.train.atlas --spec results/embedded/plan/atlas.json --out atlas.csv [--steps 6]
    python -m bandpo.train.atlas --model resources/models/tiny-s --data resources/data/tiny-math --out ...
        [--synthetic-only] [--no-progress]

``--spec`` is the measured run (`bandpo.train.settings.TrainConfig`, as the workflow's run plan writes it: its
``steps`` is the length of the learning-rate schedule, of which the first ``--steps`` are measured); by hand,
``--model`` and ``--data`` measure GRPO with TrainConfig's defaults. Deterministic for a run's spec. It runs the
trainer, so it is a job of the training stage; the table's shape (`bandpo.core.atlas_table`) is shared with the
report, which renders it (`bandpo.report.atlas`).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import Tensor
from tqdm import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer

from bandpo import methods
from bandpo.core.atlas_table import COLUMNS, SLICES
from bandpo.core.atlas_table import STEPS as ATLAS_STEPS
from bandpo.core.failures import run_job
from bandpo.core.files import write_csv
from bandpo.grader import warmup
from bandpo.methods.band import band_bounds
from bandpo.methods.diagnostics import loss_grad_wrt_log_prob
from bandpo.runtime.optim import AdamW
from bandpo.train import loop as trainer
from bandpo.train.settings import TrainConfig, from_dict, read_spec

PROG = "python -m bandpo.train.atlas"
DELTA = 0.05  # BandPO's radius (paper), and DPPO's thresholds set equal to it
CAP = 10.0  # BandPO's cap on r_hi (BandPOConfig default)
DUAL_C = methods.DEFAULT_DUAL_CLIP_C  # the dual clip c = 10 of the shared surrogate
DPPO_C = 20.0  # DPPO's truncation of the importance ratio (verl's fallback clip_ratio_c)
LOG_RATIO_CLAMP = 20.0  # log r is clamped to [-20, 20] by the surrogate and by verl
RTOL, ATOL = 1e-9, 1e-12  # gradients differ when |g_a - g_b| > ATOL + RTOL max(|g_a|, |g_b|) (float64)
P_SMALL = 0.2  # the old-probability split of the slices: p < 0.2 and the rest


# ----------------------------------------------------------------------------------------------------------------
# Rules and pairs


@dataclass(frozen=True)
class Rule:
    """A clipping rule: a registered method with its parameters and the dual clip of the shared loss settings.
    Evaluated with token-sum aggregation, so that d loss / d log pi_t is the token's own dL_t / d log pi_t."""

    label: str
    method: str
    params: Mapping[str, Any] = field(default_factory=dict)
    dual_clip_c: float | None = DUAL_C

    def resolved(self) -> methods.ResolvedMethod:
        settings = {"loss_agg_mode": "token-sum", "dual_clip_c": self.dual_clip_c}
        return methods.resolve(self.method, dict(self.params), settings)


RULES: dict[str, Rule] = {
    "bandpo_kl": Rule("bandpo kl, delta 0.05, cap 10, dual clip 10", "bandpo", {"divergence": "kl", "delta": DELTA}),
    "dppo_kl": Rule("dppo_kl, thresholds 0.05 / 0.05, truncation 20", "dppo_kl",
                    {"clip_ratio_low": DELTA, "clip_ratio_high": DELTA, "clip_ratio_c": DPPO_C}),
    "bandpo_tv": Rule("bandpo tv, delta 0.05, cap 10, dual clip 10", "bandpo", {"divergence": "tv", "delta": DELTA}),
    "dppo_tv": Rule("dppo_tv, thresholds 0.05 / 0.05, truncation 20", "dppo_tv",
                    {"clip_ratio_low": DELTA, "clip_ratio_high": DELTA, "clip_ratio_c": DPPO_C}),
    "clip_higher": Rule("clip_higher [0.8, 1.28], dual clip 10", "clip_higher"),
    "grpo": Rule("grpo [0.8, 1.2], dual clip 10", "grpo"),
    "grpo_no_dual": Rule("grpo [0.8, 1.2], no dual clip", "grpo", dual_clip_c=None),
}  # fmt: skip


def ratio_of(old_log_prob: Tensor, log_prob: Tensor) -> Tensor:
    """r = exp(clamp(log pi - log pi_old, -20, 20)), as the surrogate and verl compute it."""
    return torch.exp(torch.clamp(log_prob - old_log_prob, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


def band_gap(divergence: str) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    """The DIFFER regions of BandPO (cap 10, dual clip 10) against DPPO (C >= 10) at the same delta:
    A > 0 with min(r_hi, 10) < r <= r_hi (Band's exact, uncapped r_hi), and A < 0 with r > 10."""

    def predicted(old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor) -> Tensor:
        r = ratio_of(old_log_prob, log_prob)
        _, r_hi = band_bounds(old_log_prob, divergence, DELTA)
        cap_gap = (advantages > 0) & (r > r_hi.clamp(max=CAP)) & (r <= r_hi)
        dual_tail = (advantages < 0) & (r > DUAL_C)
        return cap_gap | dual_tail

    return predicted


def clip_higher_gap(old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor) -> Tensor:
    """Clip-Higher against GRPO: A > 0 and 1.2 < r <= 1.28."""
    r = ratio_of(old_log_prob, log_prob)
    return (advantages > 0) & (r > 1.2) & (r <= 1.28)


def dual_clip_gap(old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor) -> Tensor:
    """The dual clip on against off: A < 0 and r > c."""
    return (advantages < 0) & (ratio_of(old_log_prob, log_prob) > DUAL_C)


@dataclass(frozen=True)
class Pair:
    """Two rules (keys of `RULES`) and the region where the derivation says they differ."""

    name: str
    a: str
    b: str
    predicted: Callable[[Tensor, Tensor, Tensor], Tensor]


PAIRS: tuple[Pair, ...] = (
    Pair("bandpo_kl~dppo_kl", "bandpo_kl", "dppo_kl", band_gap("kl")),
    Pair("bandpo_tv~dppo_tv", "bandpo_tv", "dppo_tv", band_gap("tv")),
    Pair("clip_higher~grpo", "clip_higher", "grpo", clip_higher_gap),
    Pair("dual_clip~none", "grpo", "grpo_no_dual", dual_clip_gap),
)


# ----------------------------------------------------------------------------------------------------------------
# Per-token stop masks and gradients


def check_inputs(old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor) -> None:
    """ValueError naming the problem: shapes differ, a NaN / inf on a valid token, or a log-prob above 0 (not a
    probability). Padding may hold anything: it is never read."""
    for name, t in (("old_log_prob", old_log_prob), ("log_prob", log_prob), ("advantages", advantages)):
        if not torch.is_tensor(t) or t.shape != response_mask.shape:
            shape = tuple(t.shape) if torch.is_tensor(t) else type(t).__name__
            raise ValueError(f"{name} has shape {shape}, expected {tuple(response_mask.shape)} (response_mask)")
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
    valid = response_mask.bool()
    for name, t in (("old_log_prob", old_log_prob), ("log_prob", log_prob), ("advantages", advantages)):
        bad = int((~torch.isfinite(t.detach()) & valid).sum())
        if bad:
            raise ValueError(f"{name}: {bad} NaN / inf value(s) on valid tokens; the atlas takes finite tensors only")
    for name, t in (("old_log_prob", old_log_prob), ("log_prob", log_prob)):
        bad = int(((t.detach() > 0) & valid).sum())
        if bad:
            raise ValueError(f"{name}: {bad} value(s) above 0 on valid tokens: not log-probabilities")


def token_grads(
    rule: Rule, old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor
) -> Tensor:
    """g = d loss / d log pi per token (float64; 0 on padding): the rule's loss on these tensors, token-sum, so g_t
    is dL_t / d log pi_t."""
    check_inputs(old_log_prob, log_prob, advantages, response_mask)
    mask = response_mask.bool()
    old, adv = old_log_prob.detach().double(), advantages.detach().double()
    lp = log_prob.detach().double().requires_grad_()
    with torch.enable_grad():
        loss, _ = rule.resolved().loss(old, lp, adv, mask)
        grad = loss_grad_wrt_log_prob(loss, lp)
    return torch.where(mask, grad, 0.0).detach()


def stop_mask(grad: Tensor, advantages: Tensor, response_mask: Tensor) -> Tensor:
    """Stopped tokens: valid, A != 0 and d loss / d log pi == 0 (the definition of
    `bandpo.methods.stopped_diagnostics`)."""
    return response_mask.bool() & (advantages != 0) & (grad == 0)


def grads_differ(grad_a: Tensor, grad_b: Tensor, rtol: float = RTOL, atol: float = ATOL) -> Tensor:
    """|g_a - g_b| > atol + rtol max(|g_a|, |g_b|), per token."""
    return (grad_a - grad_b).abs() > atol + rtol * torch.maximum(grad_a.abs(), grad_b.abs())


# ----------------------------------------------------------------------------------------------------------------
# Evaluating every rule on a batch, and comparing pairs


@dataclass
class Tokens:
    """The valid tokens with A != 0 of one or more batches, flat: old log-prob, advantage, each rule's gradient and
    each pair's derived region."""

    old_log_prob: Tensor
    advantages: Tensor
    grads: dict[str, Tensor]
    predicted: dict[str, Tensor]
    batches: int = 1

    @staticmethod
    def cat(parts: Sequence[Tokens]) -> Tokens:
        return Tokens(
            torch.cat([t.old_log_prob for t in parts]),
            torch.cat([t.advantages for t in parts]),
            {k: torch.cat([t.grads[k] for t in parts]) for k in parts[0].grads},
            {k: torch.cat([t.predicted[k] for t in parts]) for k in parts[0].predicted},
            sum(t.batches for t in parts),
        )


def evaluate(old_log_prob: Tensor, log_prob: Tensor, advantages: Tensor, response_mask: Tensor,
             pairs: Sequence[Pair] = PAIRS) -> Tokens:  # fmt: skip
    """Every rule of ``pairs`` on one batch (all tensors (batch, T)), kept on the valid tokens with A != 0."""
    check_inputs(old_log_prob, log_prob, advantages, response_mask)
    keep = response_mask.bool() & (advantages != 0)
    old, lp, adv = (t.detach().double() for t in (old_log_prob, log_prob, advantages))
    names = list(dict.fromkeys(n for p in pairs for n in (p.a, p.b)))
    grads = {n: token_grads(RULES[n], old, lp, adv, response_mask)[keep] for n in names}
    predicted = {p.name: p.predicted(old, lp, adv)[keep] for p in pairs}
    return Tokens(old[keep], adv[keep], grads, predicted)


def slices(tokens: Tokens) -> dict[str, Tensor]:
    """The token masks of `bandpo.core.atlas_table.SLICES`: all, by the sign of A, by old probability p < 0.2 or not."""
    p = tokens.old_log_prob.exp()
    every = torch.ones_like(p, dtype=torch.bool)
    out = {"all": every, "adv>0": tokens.advantages > 0, "adv<0": tokens.advantages < 0, "p<0.2": p < P_SMALL,
           "p>=0.2": p >= P_SMALL}  # fmt: skip
    assert tuple(out) == SLICES
    return out


def compare(tokens: Tokens, pair: Pair, source: str, rtol: float = RTOL, atol: float = ATOL) -> list[dict]:
    """One row per slice (`bandpo.core.atlas_table.COLUMNS`) of the pair's comparison on these tokens."""
    g_a, g_b = tokens.grads[pair.a], tokens.grads[pair.b]
    stop_a, stop_b = g_a == 0, g_b == 0  # every token here is valid with A != 0
    differ = grads_differ(g_a, g_b, rtol, atol) | (stop_a != stop_b)
    predicted = tokens.predicted[pair.name]
    rows = []
    for name, s in slices(tokens).items():
        diff = (g_a - g_b).abs()[s]
        rows.append({
            "pair": pair.name, "rule_a": RULES[pair.a].label, "rule_b": RULES[pair.b].label, "source": source,
            "slice": name, "tokens": int(s.sum()), "stopped_a": int((stop_a & s).sum()),
            "stopped_b": int((stop_b & s).sum()), "stopped_both": int((stop_a & stop_b & s).sum()),
            "stopped_only_a": int((stop_a & ~stop_b & s).sum()), "stopped_only_b": int((~stop_a & stop_b & s).sum()),
            "grad_differ": int((grads_differ(g_a, g_b, rtol, atol) & s).sum()),
            "grad_max_abs_diff": float(diff.max()) if diff.numel() else 0.0,
            "predicted": int((predicted & s).sum()), "unexplained": int(((differ != predicted) & s).sum()),
            "batches": tokens.batches if source == "real" else 0,
        })  # fmt: skip
    return rows


def atlas_table(sources: Mapping[str, Tokens], pairs: Sequence[Pair] = PAIRS) -> pd.DataFrame:
    """The atlas: one row per pair x source x slice, in that order."""
    rows = [row for p in pairs for source, tokens in sources.items() for row in compare(tokens, p, source)]
    return pd.DataFrame(rows, columns=list(COLUMNS))


# ----------------------------------------------------------------------------------------------------------------
# Source 1: a synthetic grid


def synthetic_grid() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(old_log_prob, log_prob, advantages, response_mask), each (1, N), float64: every (p, r) of the grid with
    p r <= 1, once with A = +1 and once with A = -1.

    p: 81 values log-spaced over [1e-4, 1] (1 included); r: 1e-6, 1e-3, every 0.05 over (0, 30) and every 0.005
    over (0.5, 1.5) (around the fixed clips), each offset by half a step (0.025, 0.075, ..., 29.975), so that no
    point lies exactly on a bound (0.8, 1.2, 1.28, 10, Band-TV's 1 -+ delta / p at p = 1, 0.1, 0.01), where
    float rounding alone would decide the side."""
    f64 = torch.float64
    p = torch.logspace(-4, 0, 81, dtype=f64)
    r = torch.cat([torch.tensor([1e-6, 1e-3], dtype=f64), 0.025 + 0.05 * torch.arange(600, dtype=f64),
                   0.5025 + 0.005 * torch.arange(200, dtype=f64)]).unique()  # fmt: skip
    P, R = torch.meshgrid(p, r, indexing="ij")
    feasible = P * R <= 1.0
    old = P[feasible].log()
    new = (old + R[feasible].log()).clamp(max=0.0)  # p r = 1 up to rounding: the new probability is 1
    n = old.numel()
    adv = torch.cat([torch.ones(n, dtype=torch.float64), -torch.ones(n, dtype=torch.float64)])
    old, new = old.repeat(2), new.repeat(2)
    mask = torch.ones(1, 2 * n, dtype=torch.bool)
    return old.unsqueeze(0), new.unsqueeze(0), adv.unsqueeze(0), mask


# ----------------------------------------------------------------------------------------------------------------
# Source 2: real rollouts of the local trainer


class _Recorder:
    """Stands in for the run's resolved method: the trainer's update calls ``loss`` on every mini-batch, which keeps
    a copy of that mini-batch's (old_log_prob, log_prob, advantages, response_mask) and hands the call on unchanged;
    everything else is the method's own."""

    def __init__(self, method: methods.ResolvedMethod):
        self._method = method
        self.batches: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []

    def __getattr__(self, name: str):
        return getattr(self._method, name)

    def loss(self, old_log_prob, log_prob, advantages, response_mask, **kwargs):
        self.batches.append(
            tuple(t.detach().cpu().clone() for t in (old_log_prob, log_prob, advantages, response_mask))
        )
        return self._method.loss(old_log_prob, log_prob, advantages, response_mask, **kwargs)


def rollout_batches(cfg: TrainConfig, steps: int, progress: bool = False) -> Iterator[tuple[Tensor, ...]]:
    """The (old_log_prob, log_prob, advantages, response_mask) of every mini-batch update of the first ``steps``
    steps of the local-trainer run ``cfg`` (`bandpo.train.settings.TrainConfig`, validated), as the run's loss saw
    them. The run is the trainer's own: its `train_step` (rollouts,
    grading, advantages, old log-probs, mini-batch updates) on a `bandpo.train.loop.Run` set up as
    `bandpo.train.loop.train`
    sets it up; nothing is written."""
    if not (Path(cfg.model) / "config.json").is_file():
        raise FileNotFoundError(f"model folder not found (no config.json): {cfg.model}")
    if not 1 <= steps <= cfg.steps:
        raise ValueError(f"steps must be in [1, {cfg.steps}] (the run's steps), got {steps}")
    methods.load_env_method_modules()
    torch.set_num_threads(cfg.threads)
    device = torch.device("cuda" if cfg.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if cfg.device == "auto" else cfg.device))  # fmt: skip
    rows = trainer.load_rows(cfg.data)
    warmup()
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(cfg.model)
    policy = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=torch.float32).to(device).eval()
    reference = None
    if cfg.kl_coef > 0:
        reference = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=torch.float32).to(device).eval()
        reference.requires_grad_(False)
    optimizer = AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    recorder = _Recorder(methods.resolve(cfg.method, cfg.params, cfg.loss_settings()))
    run = trainer.Run(cfg, recorder, policy, reference, tokenizer, optimizer, rows, device)
    try:
        for step in tqdm(range(steps), desc="atlas rollouts", disable=not progress, file=sys.stderr):
            trainer.train_step(run, step)
            yield from recorder.batches
            recorder.batches.clear()
    finally:
        run.background.shutdown()  # the step's old-log-prob thread


# ----------------------------------------------------------------------------------------------------------------
# The atlas, and its command line


def build_atlas(run: TrainConfig | None = None, steps: int = ATLAS_STEPS, progress: bool = False) -> pd.DataFrame:
    """The atlas table: every pair on the synthetic grid, and (with a ``run``) on every mini-batch of the first
    ``steps`` steps of that run (`rollout_batches`)."""
    sources = {"synthetic": evaluate(*synthetic_grid())}
    if run is not None:
        parts = [evaluate(*batch) for batch in rollout_batches(run, steps, progress)]
        sources["real"] = Tokens.cat(parts)
    return atlas_table(sources)


def summary(table: pd.DataFrame) -> list[str]:
    """One line per pair and source of the atlas (its slice ``all``): the tokens, how many the two rules treat
    differently, how many the derivation predicts, and how many of those disagree (0 when the derivation holds).
    The table itself is rendered by the report (`bandpo.report.atlas`)."""
    rows = table[table["slice"] == "all"]
    return [f"{r.pair} ({r.source}): {int(r.tokens)} tokens, {int(r.grad_differ)} with a different gradient, "
            f"{int(r.predicted)} in the derived region, {int(r.unexplained)} unexplained"
            for r in rows.itertuples()]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", help="the measured run's spec file (JSON: every TrainConfig field; the workflow's run "
                    "plan writes it), e.g. GRPO from resources/models/tiny-s")  # fmt: skip
    ap.add_argument("--model", help="by hand, instead of --spec: a base model folder (GRPO, TrainConfig's defaults)")
    ap.add_argument("--data", help="with --model: a tiny-math folder with train.jsonl (or a JSONL file)")
    ap.add_argument("--out", required=True, help="the atlas CSV to write")
    ap.add_argument("--steps", type=int, default=ATLAS_STEPS,
                    help=f"training steps whose mini-batches are measured (default {ATLAS_STEPS})")  # fmt: skip
    ap.add_argument("--synthetic-only", action="store_true", help="the synthetic grid only (no model, no data)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        run = None if args.synthetic_only else _run(args)
        table = build_atlas(run, args.steps, not args.no_progress)
    except (FileNotFoundError, ValueError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    write_csv(table, Path(args.out))
    print("\n".join(summary(table)))
    print(f"{PROG}: wrote {args.out} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return 0


def _run(args: argparse.Namespace) -> TrainConfig:
    """The measured run: the spec file, or GRPO from ``--model`` on ``--data`` with TrainConfig's defaults."""
    if args.spec:
        return read_spec(args.spec)
    if args.model is None or args.data is None:
        raise ValueError("give --spec, or --model and --data (or --synthetic-only)")
    return from_dict({"model": args.model, "data": args.data, "out": "-", "progress": False})


if __name__ == "__main__":
    sys.exit(run_job(main, "python -m bandpo.train.atlas"))
