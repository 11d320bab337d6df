"""The local GRPO trainer: one loop for every registered method (embedded CPU profile; runs on CUDA unchanged).

Per step (one rollout batch), top to bottom:

1. draw ``prompts_per_step`` training problems (seeded by (seed, step): a resumed run draws the same ones);
2. roll out ``samples_per_prompt`` completions each with KV-cached ancestral sampling at ``temperature`` from the
   model's plain softmax (top_k = 0, top_p = 1), with the trainer's own loop (`_sample_rows`): each prompt is
   pre-filled ONCE and its KV cache shared by the ``samples_per_prompt`` rows of its group, and rows that have
   emitted EOS are dropped from the batch and the cache once they are a quarter of it;
3. reward = ``bandpo.grader.grade(completion, answer)`` (1 or 0), the same grader that scores evaluation;
4. GRPO advantage per group: A = (R - mean_group) / (std_group + 1e-6), unbiased std, on every completion token;
5. old log-probs recomputed by a forward pass of the rollout policy (no grad), with its token entropy: each prompt
   is run once and its KV cache shared by its group's completions (`completion_log_probs_shared`, equal to a full
   forward pass of every prompt + completion row up to float rounding);
6. the method's ratio bounds computed ONCE for the whole batch on valid tokens (`bandpo.methods.compute_bounds`),
   timed inside the step;
7. ``updates_per_step`` optimizer updates over disjoint mini-batches (``minibatch``: whole prompt groups, as verl
   counts mini-batches in prompts, or random sequences; the first one is on-policy, the later ones off-policy,
   which is what makes clipping act), each prompt of a mini-batch run once with its KV cache shared by its
   completions and the mini-batch's all-padding columns trimmed: loss = the method's loss (+ optional k3 KL to the
   reference), AdamW, gradient clipping;
8. one line of metrics.jsonl; a checkpoint every ``checkpoint_every`` steps.

Crash safety: metrics go to ``metrics.jsonl.partial`` and are renamed at the end; checkpoints (model, optimizer,
RNG states, step, the metrics so far) are written to a temporary file and renamed. A run killed at any point and
started again with the same arguments resumes from its last checkpoint and ends with the same metrics as an
uninterrupted run (wall-clock fields aside). Outputs, in order: ``model/`` (save_pretrained, renamed into place),
``metrics.jsonl``, ``run.json`` (resolved config, timings, versions): ``run.json`` existing means the run is done.

CLI (used by the Snakemake rule)::

    python -m bandpo.train --model resources/models/tiny-s --data resources/data/tiny-math --method bandpo \\
        --params '{"divergence": "kl"}' --seed 0 --out results/embedded/runs/tiny-s/bandpo_kl/seed0 --threads 1 \\
        [--set steps=100 --set lr=2e-4 ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bandpo import methods
from bandpo.files import atomic_write_text, replace_dir
from bandpo.grader import counting, grade_many, grader_info, warmup

# Fields that measure wall-clock time: they differ between two runs of the same seed, everything else is identical.
TIMING_KEYS = ("step_seconds", "rollout_seconds", "train_seconds", "bounds_seconds", "bounds_frac", "tokens_per_second")


@dataclass
class TrainConfig:
    """Everything that defines a run. Defaults: the embedded CPU profile (tiny-s model, tiny-math)."""

    model: str = ""
    """Hugging Face model directory (``from_pretrained``)."""
    data: str = ""
    """Directory with ``train.jsonl`` (rows with ``prompt`` and ``answer``), or a JSONL file."""
    out: str = ""
    """Run directory: metrics.jsonl, model/, run.json, checkpoint/."""
    method: str = "grpo"
    """A registered method (`bandpo.methods.list_methods()`)."""
    params: dict[str, Any] = field(default_factory=dict)
    """The method's parameters (validated by its config; defaults are the paper's)."""
    seed: int = 0
    """Seeds initialisation-free randomness: prompt draws, sampling, mini-batch order (each step from (seed, step))."""
    steps: int = 64
    """Rollout batches (= optimizer steps / updates_per_step)."""
    prompts_per_step: int = 32
    """Prompts drawn per rollout batch (each sampled ``samples_per_prompt`` times)."""
    samples_per_prompt: int = 8
    """Group size n of GRPO."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts (plain softmax sampling, no top-k / top-p)."""
    max_new_tokens: int = 48
    """Longest completion; a completion without EOS by then is truncated there."""
    reward: str = "grader"
    """grader: bandpo.grader.grade against the reference (1 or 0). random: Bernoulli(0.5) per completion, seeded by
    (seed, step) - the random-reward control of the protocol, which isolates what clipping alone does to entropy."""
    updates_per_step: int = 4
    """Mini-batches per rollout batch (paper: 256 prompts / 64 per mini-batch = 4)."""
    minibatch: str = "random"
    """How a rollout batch is split into its ``updates_per_step`` mini-batches. group: a random partition of the
    prompt groups (all ``samples_per_prompt`` completions of a prompt in one mini-batch; verl's layout, whose
    mini-batches are counted in prompts): each update runs each of its prompts once
    (fastest). random (default): a random partition of the sequences (TRL's layout): a prompt's completions spread
    over the updates, whose advantages then do not cancel within a mini-batch, so the policy drifts further between
    updates and clipping acts more (tiny-s, lr 5e-4: 0.68% of off-policy tokens outside the bounds against 0.44%
    with group)."""
    lr: float = 5e-4
    """AdamW learning rate (of the first step)."""
    lr_end: float | None = 1e-4
    """Learning rate of the last step, reached by a linear decay from ``lr``; None = constant ``lr``. A high early
    rate makes clipping act while the base model's entropy is high; the decay keeps the late updates from eroding
    what was learned (tiny-s, 70 steps: const 3e-4 +11.4 points, 5e-4 -> 1e-4 +12.5, const or decayed 6e-4 worse)."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Gradient clipping: maximum global gradient L2 norm per update."""
    kl_coef: float = 0.0
    """k3 KL-to-reference loss coefficient (paper: 0.001; 0 = off and no reference forward pass)."""
    loss_agg_mode: str = "seq-mean-token-mean"
    """How per-token losses become a scalar (`bandpo.methods.aggregate_loss`; the paper: seq-mean-token-mean)."""
    dual_clip_c: float | None = 10.0
    """Dual-clip constant c for negative advantages (paper: 10; None disables)."""
    adv_eps: float = 1e-6
    """Added to the group's reward std in the advantage's denominator."""
    checkpoint_every: int = 10
    """Write a crash-safety checkpoint every this many steps."""
    keep_checkpoint: bool = False
    """Keep checkpoint/ after a successful run (default: removed, the final model is in model/)."""
    threads: int = 1
    """torch CPU threads (the Snakemake rule passes its ``threads``)."""
    device: str = "auto"
    """auto | cpu | cuda[:i]."""
    progress: bool = True
    """Show a tqdm progress bar on stderr."""

    def validate(self) -> None:
        problems = []
        if not self.model:
            problems.append("model: required (a Hugging Face model directory)")
        if not self.data:
            problems.append("data: required")
        if not self.out:
            problems.append("out: required")
        for name in ("steps", "prompts_per_step", "samples_per_prompt", "max_new_tokens", "updates_per_step"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                problems.append(f"{name}: must be an integer >= 1, got {getattr(self, name)!r}")
        if self.samples_per_prompt < 2:
            problems.append("samples_per_prompt: must be >= 2 (GRPO normalises within a group)")
        if self.prompts_per_step * self.samples_per_prompt < self.updates_per_step:
            problems.append("updates_per_step: more mini-batches than sequences in a rollout batch")
        for name in ("temperature", "lr", "grad_clip", "adv_eps"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                problems.append(f"{name}: must be a finite number > 0, got {value!r}")
        if self.lr_end is not None and (
            not isinstance(self.lr_end, (int, float)) or not math.isfinite(self.lr_end) or self.lr_end < 0
        ):
            problems.append(f"lr_end: must be null or a finite number >= 0, got {self.lr_end!r}")
        for name in ("weight_decay", "kl_coef"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                problems.append(f"{name}: must be a finite number >= 0, got {value!r}")
        if self.minibatch not in ("group", "random"):
            problems.append(f"minibatch: must be 'group' or 'random', got {self.minibatch!r}")
        elif self.minibatch == "group" and self.prompts_per_step < self.updates_per_step:
            problems.append("updates_per_step: minibatch=group needs at least one prompt group per mini-batch")
        if self.reward not in ("grader", "random"):
            problems.append(f"reward: must be 'grader' or 'random', got {self.reward!r}")
        if self.checkpoint_every < 1:
            problems.append(f"checkpoint_every: must be >= 1, got {self.checkpoint_every!r}")
        if self.threads < 1:
            problems.append(f"threads: must be >= 1, got {self.threads!r}")
        if problems:
            raise ValueError("invalid training config:\n  " + "\n  ".join(problems))
        methods.make_config(self.method, self.params)  # unknown method / bad parameter: ValueError naming it
        methods.SurrogateConfig.from_params({"loss_agg_mode": self.loss_agg_mode, "dual_clip_c": self.dual_clip_c})

    def identity(self) -> str:
        """Hash of the fields that determine the result (not out, threads, device or progress)."""
        d = dataclasses.asdict(self)
        for k in ("out", "progress", "keep_checkpoint", "checkpoint_every"):
            d.pop(k)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def apply_overrides(cfg: TrainConfig, assignments: list[str]) -> TrainConfig:
    """``key=value`` strings onto the config; values parsed as JSON when they parse (numbers, null, objects)."""
    types = {f.name: f.type for f in dataclasses.fields(cfg)}
    for item in assignments:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or key not in types:
            valid = ", ".join(sorted(types))
            raise ValueError(f"--set {item!r}: expected key=value with key one of: {valid}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        current = getattr(cfg, key)
        if isinstance(current, bool) and not isinstance(value, bool):
            raise ValueError(f"--set {key}: expected true/false, got {raw!r}")
        if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        setattr(cfg, key, value)
    return cfg


# ----------------------------------------------------------------------------------------------------------------
# Data


def load_rows(path: str | os.PathLike) -> list[dict]:
    path = Path(path)
    if path.is_dir():
        path = path / "train.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"training data not found: {path}")
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or "answer" not in row:
                raise ValueError(f"{path}:{i}: a row needs a string 'prompt' and an 'answer'")
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


# ----------------------------------------------------------------------------------------------------------------
# Rollouts and log-probs


@dataclass
class Batch:
    """A rollout batch in one layout: left-padded prompts (P columns) then right-padded completions (T columns).

    Group members are adjacent rows (row r belongs to prompt r // samples_per_prompt); ``prompt_ids`` and
    ``prompt_mask`` hold each prompt once (G rows)."""

    input_ids: torch.Tensor  # (B, P + T)
    attention_mask: torch.Tensor  # (B, P + T)
    response_mask: torch.Tensor  # (B, T) bool: completion tokens up to and including EOS
    prompt_len: int  # P
    texts: list[str]
    prompt_ids: torch.Tensor  # (G, P)
    prompt_mask: torch.Tensor  # (G, P)
    truncated: torch.Tensor  # (B,) bool: no EOS within max_new_tokens


COMPACT_FRAC = 0.25
"""A rollout drops its finished rows from the batch and the KV cache once they are this fraction of its rows."""


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded layout: 0 at each row's first real token."""
    return (mask.cumsum(1) - 1).clamp(min=0)


@torch.no_grad()
def _sample_rows(model, prompt_ids, prompt_mask, n: int, max_new_tokens: int, temperature: float, eos: int,
                 with_log_probs: bool = False):  # fmt: skip
    """KV-cached ancestral sampling of ``n`` completions per prompt from softmax(logits / temperature).

    Each prompt (a row of the left-padded ``prompt_ids``) is pre-filled once and its KV cache repeated for its ``n``
    rows (row r continues prompt r // n). A row that has emitted EOS stops; once the stopped rows are
    ``COMPACT_FRAC`` of the rows still in the cache they are dropped from it, so late steps run only the rows still
    generating. Returns the tokens (B, T) with T the longest completion (pad 0 after EOS), the mask of valid tokens
    (up to and including EOS) and, with ``with_log_probs``, the log-prob of each sampled token under the untempered
    policy (what a forward pass of the model scores; zero on padding), else None."""
    G, P = prompt_ids.shape
    B, device = G * n, prompt_ids.device
    out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=_positions(prompt_mask),
                use_cache=True, logits_to_keep=1)  # fmt: skip
    cache = out.past_key_values
    cache.batch_repeat_interleave(n)
    logits = out.logits[:, -1].float().repeat_interleave(n, 0)  # (B, V): the distribution of completion token 0
    tokens = torch.zeros(B, max_new_tokens, dtype=torch.long, device=device)
    log_prob = torch.zeros(B, max_new_tokens, device=device) if with_log_probs else None
    lengths = torch.full((B,), max_new_tokens, dtype=torch.long, device=device)
    rows = torch.arange(B, device=device)  # the batch row of each cache row
    live = torch.ones(B, dtype=torch.bool, device=device)  # cache rows still generating
    attn = torch.cat([prompt_mask.repeat_interleave(n, 0), prompt_mask.new_ones(B, max_new_tokens)], 1)
    row_positions = prompt_mask.sum(1).repeat_interleave(n)  # position of completion token 0
    for t in range(max_new_tokens):
        probs = torch.softmax(logits if temperature == 1.0 else logits / temperature, -1)
        tok = torch.multinomial(probs, 1).squeeze(1)
        tokens[rows, t] = tok  # a finished row still in the cache writes after its EOS: masked, then zeroed below
        if log_prob is not None:
            log_prob[rows, t] = torch.log_softmax(logits, -1).gather(1, tok.unsqueeze(1)).squeeze(1)
        done = live & (tok == eos)
        if bool(done.any()):
            lengths[rows[done]] = t + 1
            live = live & ~done
            n_live = int(live.sum())
            if n_live == 0:
                break
            if live.numel() - n_live >= COMPACT_FRAC * live.numel():
                keep = live.nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                rows, tok, live = rows[keep], tok[keep], live[keep]
        if t + 1 == max_new_tokens:
            break
        position_ids = (row_positions[rows] + t).unsqueeze(1)
        out = model(input_ids=tok.unsqueeze(1), attention_mask=attn[rows, : P + t + 1], position_ids=position_ids,
                    past_key_values=cache, use_cache=True)  # fmt: skip
        logits = out.logits[:, -1].float()
    T = int(lengths.max())
    response_mask = torch.arange(T, device=device).unsqueeze(0) < lengths.unsqueeze(1)
    tokens = tokens[:, :T] * response_mask
    return tokens, response_mask, (log_prob[:, :T] * response_mask if log_prob is not None else None)


def rollout(model, tokenizer, prompts: list[str], cfg: TrainConfig, device: torch.device) -> Batch:
    """``samples_per_prompt`` completions per prompt, KV-cached sampling (group members are adjacent rows)."""
    n = cfg.samples_per_prompt
    tokenizer.padding_side = "left"
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    prompt_ids, prompt_mask = enc["input_ids"], enc["attention_mask"]
    completion, response_mask, _ = _sample_rows(
        model, prompt_ids, prompt_mask, n, cfg.max_new_tokens, cfg.temperature, tokenizer.eos_token_id
    )
    is_eos = (completion == tokenizer.eos_token_id) & response_mask
    truncated = ~is_eos.any(1)
    completion = torch.where(response_mask, completion, tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(completion, skip_special_tokens=True)
    attention_mask = torch.cat([prompt_mask.repeat_interleave(n, 0), response_mask.long()], dim=1)
    input_ids = torch.cat([prompt_ids.repeat_interleave(n, 0), completion], 1)
    return Batch(input_ids, attention_mask, response_mask, prompt_ids.shape[1], texts, prompt_ids, prompt_mask,
                 truncated)  # fmt: skip


def completion_log_probs(model, input_ids, attention_mask, prompt_len: int, with_entropy: bool = False):
    """Log-probs of the completion tokens (B, T) under ``model`` (and the token entropy of its distribution), one
    forward pass over the full prompt + completion rows (the reference that `completion_log_probs_shared` equals)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=_positions(attention_mask)).logits
    logits = logits[:, prompt_len - 1 : -1].float()  # position t predicts token t + 1
    log_probs = torch.log_softmax(logits, dim=-1)
    token_log_prob = log_probs.gather(-1, input_ids[:, prompt_len:].unsqueeze(-1)).squeeze(-1)
    if not with_entropy:
        return token_log_prob, None
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    return token_log_prob, entropy


def completion_log_probs_shared(model, batch: Batch, idx: torch.Tensor, group: int, with_entropy: bool = False):
    """`completion_log_probs` of rows ``idx`` of ``batch`` (each (len(idx), T), zero on padding), computed with each
    distinct prompt among those rows run once and its KV cache shared by its rows: one forward pass over the
    prompts, then one over the completions. Prompt columns that are padding in every prompt of ``idx`` and
    completion columns past the longest completion of ``idx`` are not computed. Differentiable (the gradient
    flows back into the shared prompt pass); equal to the full forward pass up to float rounding."""
    T = batch.response_mask.shape[1]
    groups = torch.div(idx, group, rounding_mode="floor")
    uniq, inverse = torch.unique(groups, return_inverse=True)
    p_mask = batch.prompt_mask[uniq]
    first = int((p_mask.sum(0) > 0).nonzero()[0])  # leading columns that are padding in every prompt here
    p_ids, p_mask = batch.prompt_ids[uniq, first:], p_mask[:, first:]
    out = model(input_ids=p_ids, attention_mask=p_mask, position_ids=_positions(p_mask), use_cache=True,
                logits_to_keep=1)  # fmt: skip
    cache = out.past_key_values
    cache.batch_select_indices(inverse)  # differentiable gather: each row gets its prompt's keys and values
    logits = out.logits[:, -1:][inverse]  # (n, 1, V): predicts completion token 0
    resp = batch.response_mask[idx]
    t_max = max(int(resp.sum(1).max()), 1)
    comp = batch.input_ids[idx, batch.prompt_len : batch.prompt_len + t_max]
    if t_max > 1:
        attn = torch.cat([p_mask[inverse], resp[:, : t_max - 1].long()], 1)
        pos = p_mask.sum(1)[inverse].unsqueeze(1) + torch.arange(t_max - 1, device=idx.device).unsqueeze(0)
        rest = model(input_ids=comp[:, :-1], attention_mask=attn, position_ids=pos, past_key_values=cache,
                     use_cache=True).logits  # fmt: skip
        logits = torch.cat([logits, rest], 1)
    log_probs = torch.log_softmax(logits.float(), -1)
    token_log_prob = log_probs.gather(-1, comp.unsqueeze(-1)).squeeze(-1) * resp[:, :t_max]
    token_log_prob = torch.nn.functional.pad(token_log_prob, (0, T - t_max))
    if not with_entropy:
        return token_log_prob, None
    entropy = -(log_probs.exp() * log_probs).sum(-1) * resp[:, :t_max]
    return token_log_prob, torch.nn.functional.pad(entropy, (0, T - t_max))


def group_advantages(rewards: torch.Tensor, group: int, eps: float) -> torch.Tensor:
    """GRPO outcome advantage per sequence: (R - mean_group) / (std_group + eps), unbiased std."""
    r = rewards.view(-1, group)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True, unbiased=True) + eps)).view(-1)


# ----------------------------------------------------------------------------------------------------------------
# Checkpoints


def _atomic_torch_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _step_seed(seed: int, step: int) -> int:
    """Every random draw of a step derives from (seed, step): a resumed run draws exactly what it would have."""
    return (seed * 1_000_003 + step * 7919 + 12345) % (2**63 - 1)


# ----------------------------------------------------------------------------------------------------------------
# The loop


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def train(cfg: TrainConfig) -> dict:
    """Run (or resume) one training run; returns the run summary also written to run.json."""
    cfg.validate()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(cfg.threads)
    if cfg.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(cfg.device)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt_path = out / "checkpoint" / "ckpt.pt"
    partial_metrics = out / "metrics.jsonl.partial"

    rows = load_rows(cfg.data)
    prompts = min(cfg.prompts_per_step, len(rows))
    if (prompts if cfg.minibatch == "group" else prompts * cfg.samples_per_prompt) < cfg.updates_per_step:
        raise ValueError(f"{cfg.data}: {len(rows)} rows are too few for {cfg.updates_per_step} mini-batches")
    warmup()  # start the grader's workers now, not inside the first timed step
    params = methods.make_config(cfg.method, cfg.params)
    settings = methods.SurrogateConfig.from_params({"loss_agg_mode": cfg.loss_agg_mode, "dual_clip_c": cfg.dual_clip_c})
    is_bounds_method = methods.get_method(cfg.method).kind == "bounds"

    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(cfg.model)
    model = AutoModelForCausalLM.from_pretrained(cfg.model, torch_dtype=torch.float32).to(device)
    model.eval()  # no dropout anywhere: rollout, old log-probs and updates see the same function
    reference = None
    if cfg.kl_coef > 0:
        reference = AutoModelForCausalLM.from_pretrained(cfg.model, torch_dtype=torch.float32).to(device).eval()
        reference.requires_grad_(False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    start_step, history = 0, []
    if ckpt_path.is_file():
        ckpt = torch.load(ckpt_path, map_location=device, weights_only=False)
        if ckpt["identity"] != cfg.identity():
            raise RuntimeError(f"{ckpt_path} belongs to a different run configuration; remove {out} to start over")
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        _set_rng_state(ckpt["rng"])
        start_step, history = ckpt["step"], ckpt["metrics"]
    atomic_write_text(partial_metrics, "".join(json.dumps(m) + "\n" for m in history))

    from tqdm import tqdm

    bar = tqdm(range(start_step, cfg.steps), initial=start_step, total=cfg.steps, desc=f"{cfg.method} s{cfg.seed}",
               disable=not cfg.progress, file=sys.stderr, mininterval=1.0)  # fmt: skip
    t_run = time.perf_counter()
    metrics_file = open(partial_metrics, "a", encoding="utf-8")
    try:
        for step in bar:
            with counting() as graded:  # grader_items, grader_slow_frac, grader_timeouts of this step
                m = train_step(step, model, reference, tokenizer, optimizer, rows, cfg, params, settings,
                               is_bounds_method, device)  # fmt: skip
            m.update(graded.metrics())
            history.append(m)
            metrics_file.write(json.dumps(m) + "\n")
            metrics_file.flush()
            bar.set_postfix(reward=f"{m['reward_mean']:.3f}", entropy=f"{m['entropy']:.3f}")
            if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
                ckpt_path.parent.mkdir(exist_ok=True)
                _atomic_torch_save(
                    {"identity": cfg.identity(), "step": step + 1, "model": model.state_dict(),
                     "optimizer": optimizer.state_dict(), "rng": _rng_state(), "metrics": history},
                    ckpt_path,
                )  # fmt: skip
    finally:
        metrics_file.close()
    train_seconds = time.perf_counter() - t_run

    # Publish: model/ (renamed into place), metrics.jsonl, then run.json last.
    tmp_model = out / "model.tmp"
    shutil.rmtree(tmp_model, ignore_errors=True)
    model.save_pretrained(tmp_model)
    tokenizer.save_pretrained(tmp_model)
    replace_dir(tmp_model, out / "model")
    os.replace(partial_metrics, out / "metrics.jsonl")
    summary = {
        "config": dataclasses.asdict(cfg),
        "method_params": params.to_dict(),
        "grader": grader_info(),
        "steps": cfg.steps,
        "resumed_from_step": start_step,
        "train_seconds_this_process": train_seconds,
        "train_seconds_total": sum(m["step_seconds"] for m in history),
        "final": {k: history[-1][k] for k in ("reward_mean", "entropy", "response_length")} if history else {},
        "versions": _versions(),
        "device": str(device),
    }
    atomic_write_text(out / "run.json", json.dumps(summary, indent=2, default=str))
    if not cfg.keep_checkpoint:
        shutil.rmtree(out / "checkpoint", ignore_errors=True)
    return summary


def lr_at(cfg: TrainConfig, step: int) -> float:
    """The learning rate of step ``step`` (0-based): ``lr``, or linear from ``lr`` to ``lr_end`` over the run."""
    if cfg.lr_end is None or cfg.steps < 2:
        return cfg.lr
    return cfg.lr + (cfg.lr_end - cfg.lr) * step / (cfg.steps - 1)


def train_step(step, model, reference, tokenizer, optimizer, rows, cfg, params, settings, is_bounds_method, device):
    """One rollout batch and its ``updates_per_step`` optimizer updates; returns the step's metrics."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    seed = _step_seed(cfg.seed, step)
    for group in optimizer.param_groups:
        group["lr"] = lr_at(cfg, step)
    picked = random.Random(seed).sample(range(len(rows)), k=min(cfg.prompts_per_step, len(rows)))
    torch.manual_seed(seed)  # the sampling draws of generate()
    if device.type == "cuda":
        torch.cuda.manual_seed_all(seed)

    # 1-3. rollouts and rewards
    with torch.no_grad():
        batch = rollout(model, tokenizer, [rows[i]["prompt"] for i in picked], cfg, device)
    answers = [str(rows[i]["answer"]) for i in picked for _ in range(cfg.samples_per_prompt)]
    scores = torch.tensor(grade_many(batch.texts, answers), dtype=torch.float32)
    if cfg.reward == "random":
        rewards = torch.bernoulli(torch.full_like(scores, 0.5), generator=torch.Generator().manual_seed(seed))
    else:
        rewards = scores
    sync()
    t_rollout = time.perf_counter() - t0

    # 4. group-normalised advantages, broadcast over the completion tokens
    mask = batch.response_mask
    seq_adv = group_advantages(rewards, cfg.samples_per_prompt, cfg.adv_eps).to(device)
    advantages = seq_adv.unsqueeze(1).expand_as(mask).contiguous()

    # 5. old log-probs of the rollout policy (recomputed by a forward pass, no grad) and its token entropy
    n = cfg.samples_per_prompt
    rows_all = torch.arange(mask.shape[0], device=device)
    with torch.no_grad():
        old_log_prob, entropy = completion_log_probs_shared(model, batch, rows_all, n, with_entropy=True)
        ref_log_prob = None
        if reference is not None:
            ref_log_prob, _ = completion_log_probs_shared(reference, batch, rows_all, n)

    # 6. bounds once per rollout batch, on valid tokens only
    t_b = time.perf_counter()
    bounds = methods.compute_bounds(cfg.method, old_log_prob, mask, params) if is_bounds_method else None
    sync()
    bounds_seconds = time.perf_counter() - t_b

    # 7. off-policy updates over disjoint mini-batches
    gen = torch.Generator().manual_seed(seed)
    if cfg.minibatch == "group":  # a random partition of the prompt groups, each group kept whole
        group_order = torch.randperm(mask.shape[0] // n, generator=gen)
        parts = [
            (g.unsqueeze(1) * n + torch.arange(n)).reshape(-1) for g in group_order.tensor_split(cfg.updates_per_step)
        ]
    else:  # a random partition of the sequences
        parts = torch.randperm(mask.shape[0], generator=gen).tensor_split(cfg.updates_per_step)
    diag: dict[str, list[float]] = defaultdict(list)
    for u, idx in enumerate(part.to(device) for part in parts):
        log_prob, _ = completion_log_probs_shared(model, batch, idx, n)
        loss, info = methods.compute_loss(
            cfg.method, old_log_prob[idx], log_prob, advantages[idx], mask[idx], params, settings,
            bounds=(bounds[0][idx], bounds[1][idx]) if bounds is not None else None,
        )  # fmt: skip
        if reference is not None:
            # k3 estimator of KL(pi || pi_ref): exp(ref - logp) - (ref - logp) - 1, aggregated like the policy loss
            d = (ref_log_prob[idx] - log_prob).clamp(-20, 20)
            kl = methods.aggregate_loss(torch.exp(d) - d - 1, mask[idx].float(), cfg.loss_agg_mode)
            loss = loss + cfg.kl_coef * kl
            diag["kl_ref"].append(float(kl.detach()))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        diag["loss"].append(float(loss.detach()))
        diag["grad_norm"].append(float(grad_norm))
        if bounds is not None:  # share of valid tokens whose ratio left [r_lo, r_hi], whatever the advantage's sign
            with torch.no_grad():
                ratio = torch.exp(log_prob.detach() - old_log_prob[idx])
                outside = ((ratio < bounds[0][idx]) | (ratio > bounds[1][idx])) & mask[idx]
                diag["outside_frac"].append(float(outside.sum() / mask[idx].sum().clamp(min=1)))
                if u > 0:
                    diag["offpolicy/outside_frac"].append(diag["outside_frac"][-1])
        for k, v in info.items():
            diag[k].append(float(v))
            if u > 0:
                diag[f"offpolicy/{k}"].append(float(v))
    sync()
    step_seconds = time.perf_counter() - t0

    n_tokens = int(mask.sum())
    valid = mask.bool()
    groups = rewards.view(-1, cfg.samples_per_prompt)
    metrics = {
        "step": step + 1,
        "reward_mean": float(rewards.mean()),
        "accuracy": float(scores.mean()),
        "mixed_group_frac": float(((groups.max(1).values - groups.min(1).values) > 0).float().mean()),
        "entropy": float(entropy[valid].mean()) if n_tokens else 0.0,
        "response_length": n_tokens / mask.shape[0],
        "truncated_frac": float(batch.truncated.float().mean()),
    }
    for k, values in diag.items():
        if k.endswith("ratio_min"):
            metrics[k] = min(values)
        elif k.endswith("ratio_max"):
            metrics[k] = max(values)
        else:
            metrics[k] = _mean(values)
    metrics.update(
        {
            "lr": optimizer.param_groups[0]["lr"],
            "rollout_seconds": t_rollout,
            "train_seconds": step_seconds - t_rollout,
            "bounds_seconds": bounds_seconds,
            "bounds_frac": bounds_seconds / step_seconds,
            "step_seconds": step_seconds,
            "tokens_per_second": n_tokens / step_seconds,
        }
    )
    return metrics


def _versions() -> dict:
    import platform

    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bandpo.train", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face model directory")
    ap.add_argument("--data", required=True, help="directory with train.jsonl, or a JSONL file")
    ap.add_argument("--method", default="grpo", help=f"one of: {', '.join(methods.list_methods())}")
    ap.add_argument("--params", default="{}", help="the method's parameters as a JSON object")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="run directory")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a TrainConfig field (repeatable), e.g. --set steps=60")  # fmt: skip
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    try:
        params = json.loads(args.params)
        if not isinstance(params, dict):
            raise ValueError("--params must be a JSON object")
        cfg = TrainConfig(model=args.model, data=args.data, out=args.out, method=args.method, params=params,
                          seed=args.seed, threads=args.threads, progress=not args.no_progress)  # fmt: skip
        apply_overrides(cfg, args.overrides)
        cfg.validate()
    except (ValueError, json.JSONDecodeError) as e:
        ap.error(str(e))
    summary = train(cfg)
    print(json.dumps({"out": cfg.out, **summary["final"], "train_seconds": summary["train_seconds_total"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
