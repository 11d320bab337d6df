"""The local GRPO trainer: one loop for every registered method (embedded CPU profile; runs on CUDA unchanged).

Per step (one rollout batch), top to bottom, in three functions (`train_step` = `collect` -> `score` -> `update`):

Collect:

1. draw ``prompts_per_step`` training problems (seeded by (seed, step): a resumed run draws the same ones);
2. roll out ``samples_per_prompt`` completions each with KV-cached ancestral sampling at ``temperature`` from the
   model's plain softmax (top_k = 0, top_p = 1), with the suite's sampler (`bandpo.sampling.sample_rows`): each
   prompt is pre-filled ONCE and its KV cache shared by the ``samples_per_prompt`` rows of its group, and rows that
   have emitted EOS are dropped from the batch and the cache once they are a quarter of it;
3. reward = ``bandpo.grader.grade(completion, answer)`` (1 or 0), the same grader that scores evaluation;

Score:

4. GRPO advantage per group: A = (R - mean_group) / (std_group + 1e-6), unbiased std, on every completion token;
5. old log-probs and token entropy: recomputed by a forward pass of the rollout policy (no grad; ``old_log_probs:
   recompute``, the default, as verl's actor), or the sampler's own (``old_log_probs: sampler``): each prompt
   is run once and its KV cache shared by its group's completions (`completion_log_probs_shared`, equal to a full
   forward pass of every prompt + completion row up to float rounding); old and new log-probs, the reference's and
   the entropy are those of softmax(logits / ``temperature``), the distribution that sampled (as verl's actor).
   This pass runs in a worker thread while step 3 grades (`collect`, `policy_view`): neither needs the other, and
   grading mostly waits for math-verify's worker processes;
6. the method's ratio bounds computed ONCE for the whole batch on valid tokens (`ResolvedMethod.bounds`: the
   method is resolved once per run, `bandpo.methods.resolve`), timed inside the step;

Update:

7. ``ppo_epochs`` passes of ``updates_per_step`` optimizer updates over disjoint mini-batches (``minibatch``: whole
   prompt groups, as verl counts mini-batches in prompts, or random sequences, partitioned afresh each pass; the
   first update is on-policy, all later ones off-policy, which is what makes clipping act), each prompt of a
   mini-batch run once with its KV cache shared by its completions and the mini-batch's all-padding columns
   trimmed: loss = the method's loss (+ optional k3 KL to the reference), AdamW (`bandpo.optim`: torch's, bit for
   bit, without importing torch._dynamo), gradient clipping;
   ``stopped_frac*``: tokens whose policy-loss gradient is 0 with A != 0, the same measure for every method
   (`bandpo.methods.stopped_diagnostics`);
8. one line of metrics.jsonl; a checkpoint every ``checkpoint_every`` steps. On a probe data set (rows with
   ``subset``, bandpo.probe) the line also holds the rollouts' accuracy per subset, and with ``probe_every`` the
   probe's measurement after the step's updates (``probe/p_correct``, ``probe/accuracy``: `probe_metrics`; its
   time and grades are not part of the step's ``step_seconds`` and ``grader_*``).

Crash safety: metrics go to ``metrics.jsonl.partial`` and are renamed at the end; checkpoints (model, optimizer,
RNG states, step, the metrics so far) are written through `bandpo.files.atomic_write_bytes` (a temporary file,
then a rename). A run killed at any point and started again with the same arguments resumes from its last
checkpoint and ends with the same metrics as an uninterrupted run (wall-clock fields aside). Outputs, in order:
``model/`` (save_pretrained, renamed into place), ``metrics.jsonl``, ``run.json`` (resolved config, the method's
``method_label`` and ``method_params``, timings, versions): ``run.json`` existing means the run is done.

Timings, one name each: per step ``rollout_seconds`` (collect: sampling and grading, with the old-log-prob pass
running meanwhile), ``update_seconds`` (the rest of score, and update) and
``step_seconds`` (the whole step) in metrics.jsonl; ``train_seconds_total`` in run.json is the run's training time
(the sum of its ``step_seconds``, over every process of a resumed run) and ``process_seconds`` the wall time of the
last process's loop.

CLI: ``python -m bandpo.train --help`` lists every `TrainConfig` field as a flag, with its type, default and doc::

    python -m bandpo.train --model resources/models/tiny-s --data resources/data/tiny-math --method bandpo \\
        --params '{"divergence": "kl"}' --seed 0 --out results/embedded/runs/tiny-s/bandpo_kl/seed0 --threads 1 \\
        [--steps 100 --lr 2e-4 --lr-end None ...] [--set steps=100 ...] [--method-module my_methods.py ...]

The command line is generated from the fields by tyro (`Command`): it reads the attribute docstrings below as they
are, so each field is documented once, in the source, and the help can not drift from it; it knows ``X | None``
(``--lr-end None``), bools (``--no-progress``) and, through one rule, the ``params`` JSON object. (transformers'
HfArgumentParser, the alternative already installed, needs each doc moved into ``metadata={"help": ...}`` and
cannot set an optional float to None from the command line.) ``--set KEY=VALUE`` (repeatable, applied after the
flags, values read as JSON: `apply_overrides`) is the form the workflow's train rule uses
(workflow/scripts/bench_config.py ``set_args``). ``--method-module`` (repeatable) imports a module of your own that
registers methods (`bandpo.methods`); ``BANDPO_METHOD_MODULES`` does the same from the environment. Bad values are
a usage error (exit status 2) naming the field, never a stack trace.
"""

from __future__ import annotations

import sys

if __name__ == "__main__" and not {"-h", "--help"} & set(sys.argv[1:]):
    # A training job: its grader worker starts first and loads math-verify on another core while this process
    # imports torch (about a second off each job's start-up; `bandpo.grader.start_workers`).
    import bandpo.grader

    bandpo.grader.start_workers()

import dataclasses
import hashlib
import io
import json
import math
import os
import random
import shutil
import time
from collections import defaultdict
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import torch
import tyro

from bandpo import methods
from bandpo.files import atomic_write_bytes, atomic_write_text, read_jsonl, replace_dir
from bandpo.grader import counting, grade_many, grader_info, warmup
from bandpo.models import lr_schedule
from bandpo.optim import AdamW
from bandpo.options import check_fields, exit_job, parse_assignments
from bandpo.provenance import machine, versions
from bandpo.sampling import completion_log_probs_shared, sample_rows

PROG = "python -m bandpo.train"
# Fields that measure wall-clock time: they differ between two runs of the same seed, everything else is identical.
TIMING_KEYS = (
    "step_seconds",
    "rollout_seconds",
    "update_seconds",
    "bounds_seconds",
    "bounds_frac",
    "tokens_per_second",
)


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
    """Rollout batches (= optimizer steps / (updates_per_step x ppo_epochs))."""
    prompts_per_step: int = 32
    """Prompts drawn per rollout batch (each sampled ``samples_per_prompt`` times)."""
    samples_per_prompt: int = 8
    """Group size n of GRPO."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts (plain softmax sampling, no top-k / top-p). The old and new log-probs,
    hence the ratio, and the logged entropy are those of the same softmax(logits / temperature), as in verl."""
    max_new_tokens: int = 48
    """Longest completion; a completion without EOS by then is truncated there."""
    chat_template: bool = False
    """Wrap each prompt in the model tokenizer's chat template (one user turn, then the assistant's generation
    prompt), as lm-eval's ``--apply-chat-template`` and verl do: for instruct models (the real-LM experiment). False
    (default): the row's prompt verbatim (the tiny models have no template)."""
    reward: str = "grader"
    """grader: bandpo.grader.grade against the reference (1 or 0). random: Bernoulli(0.5) per completion, seeded by
    (seed, step) - the random-reward control of the protocol, which isolates what clipping alone does to entropy."""
    updates_per_step: int = 4
    """Mini-batches per pass over a rollout batch (paper: 256 prompts / 64 per mini-batch = 4)."""
    ppo_epochs: int = 1
    """Passes over each rollout batch (verl's actor.ppo_epochs; paper: 1). Each pass splits the batch afresh into
    ``updates_per_step`` mini-batches: ppo_epochs x updates_per_step optimizer updates per step, the first on-policy
    and every later one off-policy (``offpolicy/*``). Varies staleness at a fixed mini-batch size."""
    minibatch: str = "random"
    """How a rollout batch is split into its ``updates_per_step`` mini-batches. group: a random partition of the
    prompt groups (all ``samples_per_prompt`` completions of a prompt in one mini-batch; verl's layout, whose
    mini-batches are counted in prompts): each update runs each of its prompts once
    (fastest). random (default): a random partition of the sequences (TRL's layout): a prompt's completions spread
    over the updates, whose advantages then do not cancel within a mini-batch, so the policy drifts further between
    updates and clipping acts more (tiny-s, lr 5e-4: 0.68% of off-policy tokens outside the bounds against 0.44%
    with group)."""
    old_log_probs: str = "recompute"
    """Where the old (rollout-policy) log-probs and the logged entropy come from. recompute (default): a no-grad
    forward pass of the rollout policy over the batch (as verl's actor): the first, on-policy update's ratio is
    exactly 1, so with updates_per_step 1 every bound method gives the same run (the off-policy axis's exact null).
    sampler: the sampler's own, computed while drawing from the same weights and distribution, with no extra pass
    (about 15% less time per step); they equal the recomputed ones up to float rounding (within ~1e-6 in log-prob on
    tiny-s), so the first ratio is 1 within that, not exactly."""
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
    dual_clip_c: float | None = methods.DEFAULT_DUAL_CLIP_C
    """Dual-clip constant c for negative advantages (paper: 10; None disables)."""
    adv_eps: float = 1e-6
    """Added to the group's reward std in the advantage's denominator."""
    probe_every: int = 0
    """Mechanism probe (a probe data set, bandpo.probe): every this many steps (and at the last), log the mean
    probability of the deciding correct token over the probe rows of the data's validation split
    (``probe/p_correct``, with ``probe/p_correct_median`` and ``probe/prefers_decoy``) and the sampled accuracy
    there (``probe/accuracy``, ``probe_k`` samples at T = 1.0). 0 = off. Every step logs the rollouts' accuracy per
    subset (``probe/rollout_accuracy``, ``rest/rollout_accuracy``) when the training rows carry ``subset``."""
    probe_k: int = 4
    """Samples per probe problem of ``probe/accuracy`` (0: the deciding-token probability only)."""
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
        for name in ("steps", "prompts_per_step", "samples_per_prompt", "max_new_tokens", "updates_per_step",
                     "ppo_epochs"):  # fmt: skip
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
        if self.old_log_probs not in ("sampler", "recompute"):
            problems.append(f"old_log_probs: must be 'sampler' or 'recompute', got {self.old_log_probs!r}")
        if self.minibatch not in ("group", "random"):
            problems.append(f"minibatch: must be 'group' or 'random', got {self.minibatch!r}")
        elif self.minibatch == "group" and self.prompts_per_step < self.updates_per_step:
            problems.append("updates_per_step: minibatch=group needs at least one prompt group per mini-batch")
        if self.reward not in ("grader", "random"):
            problems.append(f"reward: must be 'grader' or 'random', got {self.reward!r}")
        for name in ("probe_every", "probe_k"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                problems.append(f"{name}: must be an integer >= 0, got {getattr(self, name)!r}")
        if self.checkpoint_every < 1:
            problems.append(f"checkpoint_every: must be >= 1, got {self.checkpoint_every!r}")
        if self.threads < 1:
            problems.append(f"threads: must be >= 1, got {self.threads!r}")
        if self.chat_template and self.probe_every:
            problems.append("chat_template: the probe measures the raw prompt's deciding token; set probe_every 0")
        if problems:
            raise ValueError("invalid training config:\n  " + "\n  ".join(problems))
        self.resolve_method()  # unknown method / bad parameter: ValueError naming it

    def resolve_method(self) -> methods.ResolvedMethod:
        """The run's method with its parameters and loss settings, validated (`bandpo.methods.resolve`)."""
        settings = {"loss_agg_mode": self.loss_agg_mode, "dual_clip_c": self.dual_clip_c}
        return methods.resolve(self.method, self.params, settings)

    def identity(self) -> str:
        """Hash of the fields that can change the result: every field but out, progress, keep_checkpoint and
        checkpoint_every (threads and device are hashed: they change float rounding). A checkpoint of another
        identity is not resumed."""
        d = dataclasses.asdict(self)
        for k in ("out", "progress", "keep_checkpoint", "checkpoint_every"):
            d.pop(k)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


# Fields the workflow's train rule sets itself (from the method entry, the run and the rule): not overridable.
RUN_FIELDS = ("model", "data", "out", "method", "params", "seed", "threads", "progress")


def check_overrides(overrides: Mapping[str, Any]) -> None:
    """Validate the workflow's ``train:`` overrides against TrainConfig (keys, types, ranges), as the train rule
    would apply them; ValueError naming the offending key. Used at DAG start (bandpo.sweep)."""
    for key in overrides:
        if key in RUN_FIELDS:
            raise ValueError(f"training setting {key!r} is set by the workflow itself, not by train:")
    cfg = TrainConfig(model="<model>", data="<data>", out="<out>")
    for key, value in check_fields(overrides, TrainConfig, "training setting").items():
        setattr(cfg, key, value)
    try:
        cfg.validate()
    except ValueError as e:  # one line: "invalid training config: lr: must be ..."
        raise ValueError(" ".join(str(e).split())) from None


def apply_overrides(cfg: TrainConfig, assignments: list[str]) -> TrainConfig:
    """``key=value`` strings onto the config (`bandpo.options.parse_assignments`: JSON values, checked by type)."""
    for key, value in parse_assignments(assignments, TrainConfig).items():
        setattr(cfg, key, value)
    return cfg


def read_set_file(path: str | os.PathLike) -> list[str]:
    """``--set-file``: a JSON object of field values as ``key=value`` assignments; ValueError naming the file."""
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"--set-file {path}: {e}") from None
    if not isinstance(values, dict):
        raise ValueError(f"--set-file {path}: expected a JSON object of field values, got {type(values).__name__}")
    return [f"{k}={json.dumps(v)}" for k, v in values.items()]


# ----------------------------------------------------------------------------------------------------------------
# Data
PROBE_SPLIT = "validation.jsonl"  # where probe_every measures: never the test split lm-eval scores


def load_probe_rows(cfg: TrainConfig) -> list[dict]:
    """The probe rows measured every ``probe_every`` steps: the ``subset == "probe"`` rows of the validation split
    beside the training data; [] when probing is off. ValueError naming the file when there are none."""
    if not cfg.probe_every:
        return []
    path = (Path(cfg.data) if Path(cfg.data).is_dir() else Path(cfg.data).parent) / PROBE_SPLIT
    if not path.is_file():
        raise FileNotFoundError(f"probe_every: {path} not found (a probe data set: bandpo.tasks tiny-math --probe)")
    rows = [r for r in read_jsonl(path) if r.get("subset") == "probe"]
    if not rows:
        raise ValueError(f"probe_every: {path} has no rows with subset 'probe' (not a probe data set?)")
    return rows


def load_rows(path: str | os.PathLike) -> list[dict]:
    path = Path(path)
    if path.is_dir():
        path = path / "train.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"training data not found: {path}")
    rows = read_jsonl(path)
    for i, row in enumerate(rows, 1):
        if not isinstance(row.get("prompt"), str) or "answer" not in row:
            raise ValueError(f"{path}: row {i}: a row needs a string 'prompt' and an 'answer'")
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
    sampled_log_prob: torch.Tensor | None = None  # (B, T): the sampler's log-prob of each token
    sampled_entropy: torch.Tensor | None = None  # (B, T): the sampling distribution's entropy at each token


def rollout(model, tokenizer, prompts: list[str], cfg: TrainConfig, device: torch.device) -> Batch:
    """``samples_per_prompt`` completions per prompt, KV-cached sampling (group members are adjacent rows)."""
    n = cfg.samples_per_prompt
    tokenizer.padding_side = "left"
    if cfg.chat_template:
        prompts = chat_prompts(tokenizer, prompts)
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    prompt_ids, prompt_mask = enc["input_ids"], enc["attention_mask"]
    own = cfg.old_log_probs == "sampler"
    completion, response_mask, entropy, *log_prob = sample_rows(
        model, prompt_ids, prompt_mask, n, cfg.max_new_tokens, cfg.temperature, tokenizer.eos_token_id,
        with_entropy=own, with_log_probs=own,
    )  # fmt: skip
    is_eos = (completion == tokenizer.eos_token_id) & response_mask
    truncated = ~is_eos.any(1)
    completion = torch.where(response_mask, completion, tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(completion, skip_special_tokens=True)
    attention_mask = torch.cat([prompt_mask.repeat_interleave(n, 0), response_mask.long()], dim=1)
    input_ids = torch.cat([prompt_ids.repeat_interleave(n, 0), completion], 1)
    return Batch(input_ids, attention_mask, response_mask, prompt_ids.shape[1], texts, prompt_ids, prompt_mask,
                 truncated, log_prob[0] if own else None, entropy)  # fmt: skip


def chat_prompts(tokenizer, prompts: list[str]) -> list[str]:
    """Each prompt as one user turn of the tokenizer's chat template, ending in the assistant's generation prompt;
    ValueError when the tokenizer has none."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("chat_template: the model's tokenizer has no chat template")
    return [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
            for p in prompts]  # fmt: skip


def group_advantages(rewards: torch.Tensor, group: int, eps: float) -> torch.Tensor:
    """GRPO outcome advantage per sequence: (R - mean_group) / (std_group + eps), unbiased std."""
    r = rewards.view(-1, group)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True, unbiased=True) + eps)).view(-1)


# ----------------------------------------------------------------------------------------------------------------
# Checkpoints


def _save_checkpoint(obj: Any, path: Path) -> None:
    """``torch.save`` into memory, then `bandpo.files.atomic_write_bytes`: a crash leaves the old checkpoint."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write_bytes(path, buffer.getvalue())


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


@dataclass
class Run:
    """What every step of a run works with: the policy and its optimizer, the optional frozen reference, the
    training rows, the config and the method resolved once for the run."""

    cfg: TrainConfig
    method: methods.ResolvedMethod
    model: Any
    reference: Any
    tokenizer: Any
    optimizer: AdamW
    rows: list[dict]
    device: torch.device
    probe_rows: list[dict] = field(default_factory=list)  # the validation split's probe rows (cfg.probe_every)
    # the thread that runs each step's old-log-prob pass while the main thread grades (`collect`)
    background: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, "bandpo-policy-view"))

    def sync(self) -> None:
        """Wait for the device (CUDA kernels are asynchronous), so that timings are true."""
        if self.device.type == "cuda":
            torch.cuda.synchronize()


def train(cfg: TrainConfig) -> dict:
    """Run (or resume) one training run; returns the run summary also written to run.json."""
    methods.load_env_method_modules()  # the start of a run: methods of the user's own modules ($BANDPO_METHOD_MODULES)
    cfg.validate()
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
    method = cfg.resolve_method()

    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    model, tokenizer = load_policy(cfg.model, device)
    if cfg.chat_template and not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"chat_template: the tokenizer of {cfg.model} has no chat template (an instruct model has one)"
        )
    model.eval()  # no dropout anywhere: rollout, old log-probs and updates see the same function
    reference = None
    if cfg.kl_coef > 0:
        reference = load_policy(cfg.model, device)[0].eval()
        reference.requires_grad_(False)
    optimizer = AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    run = Run(cfg, method, model, reference, tokenizer, optimizer, rows, device, load_probe_rows(cfg))

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
                m = train_step(run, step)
            m.update(graded.metrics())
            if cfg.probe_every and ((step + 1) % cfg.probe_every == 0 or step + 1 == cfg.steps):
                m.update(probe_metrics(run, _step_seed(cfg.seed, step)))  # not counted in the step's time or grades
            history.append(m)
            metrics_file.write(json.dumps(m) + "\n")
            metrics_file.flush()
            bar.set_postfix(reward=f"{m['reward_mean']:.3f}", entropy=f"{m['entropy']:.3f}")
            if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
                _save_checkpoint(
                    {"identity": cfg.identity(), "step": step + 1, "model": model.state_dict(),
                     "optimizer": optimizer.state_dict(), "rng": _rng_state(), "metrics": history},
                    ckpt_path,
                )  # fmt: skip
    finally:
        metrics_file.close()
        run.background.shutdown()
    process_seconds = time.perf_counter() - t_run

    # Publish: model/ (renamed into place), metrics.jsonl, then run.json last.
    tmp_model = out / "model.tmp"
    shutil.rmtree(tmp_model, ignore_errors=True)
    model.save_pretrained(tmp_model)
    tokenizer.save_pretrained(tmp_model)
    replace_dir(tmp_model, out / "model")
    os.replace(partial_metrics, out / "metrics.jsonl")
    summary = {
        "config": dataclasses.asdict(cfg),
        "method": method.name,
        "method_label": method.label,
        "method_params": method.params.to_dict(),
        "method_modules": sorted(methods.loaded_method_modules()),
        "grader": grader_info(),
        "steps": cfg.steps,
        "resumed_from_step": start_step,
        "process_seconds": process_seconds,
        "train_seconds_total": sum(m["step_seconds"] for m in history),
        "final": {k: history[-1][k] for k in ("reward_mean", "entropy", "response_length")} if history else {},
        "versions": versions("torch", "transformers"),
        "machine": machine(),
        "device": str(device),
    }
    atomic_write_text(out / "run.json", json.dumps(summary, indent=2, default=str))
    if not cfg.keep_checkpoint:
        shutil.rmtree(out / "checkpoint", ignore_errors=True)
    return summary


def load_policy(model_dir: str, device: torch.device):
    """(model, tokenizer) in float32 on ``device``. The suite's tiny models (`bandpo.fastlm.light_loadable`) load
    without transformers (`bandpo.fastlm.load_light`: the same weights, layout and saved files, computed by
    `bandpo.fastlm.FastLlama`), which saves a job about 4 CPU-seconds of imports; any other model through
    transformers' Auto classes."""
    from bandpo.fastlm import light_loadable, load_light

    if light_loadable(model_dir):
        model, tokenizer = load_light(model_dir)
        return model.to(device), tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device), tokenizer


def lr_at(cfg: TrainConfig, step: int) -> float:
    """The learning rate of step ``step`` (0-based): ``lr``, or linear from ``lr`` to ``lr_end`` over the run
    (`bandpo.models.lr_schedule`: no warmup, decay from the first step to the last)."""
    if cfg.lr_end is None:
        return cfg.lr
    return lr_schedule(step, cfg.lr, cfg.lr_end, decay_steps=cfg.steps - 1)


@dataclass
class Collected:
    """A rollout batch with its grades and rewards (``scores``: the grader's 1 / 0, ``rewards``: what trains)."""

    batch: Batch
    scores: torch.Tensor
    rewards: torch.Tensor
    picked: list[int]  # the rows (of Run.rows) of the batch's prompt groups, in order


@dataclass
class Scored:
    """What the updates need from the rollout policy: advantages, old log-probs, token entropy, reference
    log-probs (with a KL term) and the method's bounds (bounds methods), all (B, T)."""

    advantages: torch.Tensor
    old_log_prob: torch.Tensor
    entropy: torch.Tensor
    ref_log_prob: torch.Tensor | None
    bounds: tuple[torch.Tensor, torch.Tensor] | None
    bounds_seconds: float


def collect(run: Run, step: int, seed: int) -> tuple[Collected, Future]:
    """Draw the step's prompts, sample ``samples_per_prompt`` completions of each, grade them, draw the rewards.

    While this thread grades, a worker thread computes the rollout policy's view of the batch (`policy_view`,
    returned as a future): the two do not depend on each other, and grading mostly waits for math-verify's worker
    processes, so the forward pass runs in that wait. Grading stays in this thread (math-verify's in-process
    fallback needs the main thread's signals); the forward pass computes the same numbers in any thread."""
    cfg = run.cfg
    picked = random.Random(seed).sample(range(len(run.rows)), k=min(cfg.prompts_per_step, len(run.rows)))
    torch.manual_seed(seed)  # the sampler's draws
    if run.device.type == "cuda":
        torch.cuda.manual_seed_all(seed)
    with torch.no_grad():
        batch = rollout(run.model, run.tokenizer, [run.rows[i]["prompt"] for i in picked], cfg, run.device)
    view = run.background.submit(policy_view, run, batch)
    answers = [str(run.rows[i]["answer"]) for i in picked for _ in range(cfg.samples_per_prompt)]
    try:
        scores = torch.tensor(grade_many(batch.texts, answers), dtype=torch.float32)
    except BaseException:
        if not view.cancel():
            view.exception()  # wait for it: not left running into a checkpoint or the next step
        raise
    if cfg.reward == "random":
        rewards = torch.bernoulli(torch.full_like(scores, 0.5), generator=torch.Generator().manual_seed(seed))
    else:
        rewards = scores
    return Collected(batch, scores, rewards, picked), view


def policy_view(run: Run, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The rollout policy's view of the batch, no grad: (old log-probs, token entropy, reference log-probs or
    None), each (B, T); each prompt is run once and its KV cache shared by its group (`completion_log_probs_shared`).
    With ``old_log_probs: sampler`` the first two are the sampler's own."""
    cfg = run.cfg
    n = cfg.samples_per_prompt
    rows_all = torch.arange(batch.response_mask.shape[0], device=run.device)
    with torch.no_grad():  # grad mode is per thread: set here, in the thread that runs this
        if batch.sampled_log_prob is not None:  # old_log_probs: sampler
            old_log_prob, entropy = batch.sampled_log_prob, batch.sampled_entropy
        else:
            old_log_prob, entropy = completion_log_probs_shared(run.model, batch, rows_all, n, with_entropy=True,
                                                                temperature=cfg.temperature)  # fmt: skip
        ref_log_prob = None
        if run.reference is not None:
            ref_log_prob, _ = completion_log_probs_shared(run.reference, batch, rows_all, n,
                                                          temperature=cfg.temperature)  # fmt: skip
    run.sync()
    return old_log_prob, entropy, ref_log_prob


def score(run: Run, collected: Collected, view: Future) -> Scored:
    """Advantages, the rollout policy's view of the batch (`policy_view`, awaited here) and the method's bounds
    once for the whole batch, on the valid tokens only."""
    cfg, batch = run.cfg, collected.batch
    mask = batch.response_mask
    seq_adv = group_advantages(collected.rewards, cfg.samples_per_prompt, cfg.adv_eps).to(run.device)
    advantages = seq_adv.unsqueeze(1).expand_as(mask).contiguous()
    old_log_prob, entropy, ref_log_prob = view.result()
    t_b = time.perf_counter()
    bounds = run.method.bounds(old_log_prob, mask) if run.method.has_bounds else None
    run.sync()
    return Scored(advantages, old_log_prob, entropy, ref_log_prob, bounds, time.perf_counter() - t_b)


def minibatches(cfg: TrainConfig, n_rows: int, seed: int) -> list[torch.Tensor]:
    """The mini-batches (row indices) of a rollout batch of ``n_rows`` rows, in update order: ``ppo_epochs`` passes,
    each a fresh random partition into ``updates_per_step`` disjoint mini-batches (one generator for all passes:
    the first pass is the same for any ``ppo_epochs``)."""
    gen = torch.Generator().manual_seed(seed)
    n, parts = cfg.samples_per_prompt, []
    for _ in range(cfg.ppo_epochs):
        if cfg.minibatch == "group":  # a random partition of the prompt groups, each group kept whole
            groups = torch.randperm(n_rows // n, generator=gen).tensor_split(cfg.updates_per_step)
            parts += [(g.unsqueeze(1) * n + torch.arange(n)).reshape(-1) for g in groups]
        else:  # a random partition of the rows
            parts += list(torch.randperm(n_rows, generator=gen).tensor_split(cfg.updates_per_step))
    return parts


def update(run: Run, batch: Batch, scored: Scored, seed: int) -> dict[str, list[float]]:
    """``ppo_epochs`` x ``updates_per_step`` optimizer updates, one per mini-batch (`minibatches`: the first
    on-policy, all later ones off-policy); returns each update's diagnostics (``offpolicy/<key>``: every update
    but the very first of the batch)."""
    cfg, model = run.cfg, run.model
    mask, old_log_prob, bounds = batch.response_mask, scored.old_log_prob, scored.bounds
    diag: dict[str, list[float]] = defaultdict(list)
    for u, idx in enumerate(part.to(run.device) for part in minibatches(cfg, mask.shape[0], seed)):
        log_prob, _ = completion_log_probs_shared(
            model, batch, idx, cfg.samples_per_prompt, temperature=cfg.temperature
        )
        part_bounds = (bounds[0][idx], bounds[1][idx]) if bounds is not None else None
        loss, info = run.method.loss(old_log_prob[idx], log_prob, scored.advantages[idx], mask[idx],
                                     bounds=part_bounds)  # fmt: skip
        grad = methods.loss_grad_wrt_log_prob(loss, log_prob)  # policy loss only; keeps the graph: update unchanged
        info = {**info, **methods.stopped_diagnostics(grad, scored.advantages[idx], old_log_prob[idx], mask[idx])}
        if scored.ref_log_prob is not None:
            # k3 estimator of KL(pi || pi_ref): exp(ref - logp) - (ref - logp) - 1, aggregated like the policy loss
            d = (scored.ref_log_prob[idx] - log_prob).clamp(-20, 20)
            kl = methods.aggregate_loss(torch.exp(d) - d - 1, mask[idx].float(), cfg.loss_agg_mode)
            loss = loss + cfg.kl_coef * kl
            diag["kl_ref"].append(float(kl.detach()))
        run.optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        run.optimizer.step()
        diag["loss"].append(float(loss.detach()))
        diag["grad_norm"].append(float(grad_norm))
        if part_bounds is not None:  # share of valid tokens whose ratio left [r_lo, r_hi], whatever the sign of A
            with torch.no_grad():
                ratio = torch.exp(log_prob.detach() - old_log_prob[idx])
                outside = ((ratio < part_bounds[0]) | (ratio > part_bounds[1])) & mask[idx]
                diag["outside_frac"].append(float(outside.sum() / mask[idx].sum().clamp(min=1)))
                if u > 0:
                    diag["offpolicy/outside_frac"].append(diag["outside_frac"][-1])
        for k, v in info.items():
            diag[k].append(float(v))
            if u > 0:
                diag[f"offpolicy/{k}"].append(float(v))
    return diag


def train_step(run: Run, step: int) -> dict:
    """One rollout batch and its updates: collect -> score -> update; returns the step's metrics."""
    cfg = run.cfg
    t0 = time.perf_counter()
    seed = _step_seed(cfg.seed, step)
    for group in run.optimizer.param_groups:
        group["lr"] = lr_at(cfg, step)

    collected, view = collect(run, step, seed)
    rollout_seconds = time.perf_counter() - t0  # sampling and grading (the old-log-prob pass runs meanwhile)
    scored = score(run, collected, view)
    diag = update(run, collected.batch, scored, seed)
    run.sync()
    step_seconds = time.perf_counter() - t0

    batch, rewards = collected.batch, collected.rewards
    mask = batch.response_mask
    n_tokens = int(mask.sum())
    groups = rewards.view(-1, cfg.samples_per_prompt)
    metrics = {
        "step": step + 1,
        "reward_mean": float(rewards.mean()),
        "accuracy": float(collected.scores.mean()),
        "mixed_group_frac": float(((groups.max(1).values - groups.min(1).values) > 0).float().mean()),
        "entropy": float(scored.entropy[mask.bool()].mean()) if n_tokens else 0.0,
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
    subsets = [run.rows[i].get("subset") for i in collected.picked]
    if any(subsets):  # a probe data set: the rollouts' accuracy per subset
        per_seq = collected.scores.view(-1, cfg.samples_per_prompt).mean(1)
        for name in ("probe", "rest"):
            picked = [i for i, s in enumerate(subsets) if s == name]
            if picked:  # absent from a step that drew no prompt of the subset
                metrics[f"{name}/rollout_accuracy"] = float(per_seq[picked].mean())
    metrics.update(
        {
            "lr": run.optimizer.param_groups[0]["lr"],
            "rollout_seconds": rollout_seconds,
            "update_seconds": step_seconds - rollout_seconds,
            "bounds_seconds": scored.bounds_seconds,
            "bounds_frac": scored.bounds_seconds / step_seconds,
            "step_seconds": step_seconds,
            "tokens_per_second": n_tokens / step_seconds,
        }
    )
    return metrics


def probe_metrics(run: Run, seed: int) -> dict[str, float]:
    """The mechanism probe's view of the policy after this step's updates (`bandpo.probe.measure` on the probe
    rows): the deciding correct token's probability and the sampled accuracy. The training RNG is left as it was."""
    from bandpo.probe import measure

    devices = [run.device.index or 0] if run.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        m = measure(run.model, run.tokenizer, run.probe_rows, k=run.cfg.probe_k, seed=seed, greedy=False)
    out = {
        "probe/p_correct": m["deciding"]["p_correct"]["mean"],
        "probe/p_correct_median": m["deciding"]["p_correct"]["median"],
        "probe/prefers_decoy": m["deciding"]["prefers_decoy_share"],
    }
    if run.cfg.probe_k:
        out["probe/accuracy"] = m["probe"]["sampled"]
    return out


@dataclass
class Command:
    """The command line of `main`: every `TrainConfig` field as a flag of its own (``--samples-per-prompt 8``,
    ``--lr-end None``, ``--no-progress``, ``--params '{"delta": 0.1}'``), generated by tyro from the fields, their
    types, defaults and attribute docstrings, plus the two options below."""

    config: Annotated[TrainConfig, tyro.conf.arg(name="")]  # flattened: --steps, not --config.steps
    set: Annotated[list[str], tyro.conf.UseAppendAction, tyro.conf.arg(metavar="KEY=VALUE")] = field(
        default_factory=list
    )
    """Set a field by name, the value read as JSON where it parses; applied after the flags. The form the
    workflow's train rule uses, e.g. --set steps=60 --set lr_end=null."""
    set_file: Annotated[list[str], tyro.conf.UseAppendAction, tyro.conf.arg(metavar="PATH")] = field(
        default_factory=list
    )
    """A JSON object of field values, applied after --set: settings that an earlier job chose (the workflow's
    selection rule, e.g. {"updates_per_step": 8})."""
    method_module: Annotated[list[str], tyro.conf.UseAppendAction, tyro.conf.arg(metavar="MODULE")] = field(
        default_factory=list
    )
    """Import a module of your own that registers methods: a module name or a .py path ($BANDPO_METHOD_MODULES is
    imported too)."""


def _json_object_rule(info: Any) -> Any:
    """tyro rule for ``dict`` fields (``params``): one JSON object on the command line."""
    if info.type_origin is not dict:
        return None

    def parse(args: list[str]) -> dict:
        value = json.loads(args[0])
        if not isinstance(value, dict):
            raise ValueError(f"expected a JSON object, got {args[0]!r}")
        return value

    return tyro.constructors.PrimitiveConstructorSpec(
        nargs=1,
        metavar="JSON",
        instance_from_str=parse,
        is_instance=lambda value: isinstance(value, dict),
        str_from_instance=lambda value: [json.dumps(value)],
    )


def _usage_error(message: str) -> int:
    print(f"usage: {PROG} [-h] [OPTIONS]\n{PROG}: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    try:  # methods of the user's own modules first: the help lists them
        methods.load_env_method_modules()
    except ImportError as e:
        return _usage_error(str(e))
    registry = tyro.constructors.ConstructorRegistry()
    registry.primitive_rule(_json_object_rule)
    description = (
        f"{__doc__.splitlines()[0]}\n\nEvery TrainConfig field is a flag; required: --model, --data, --out. "
        f"Methods: {', '.join(methods.list_methods())}."
    )
    cmd = tyro.cli(Command, args=argv, prog=PROG, description=description, registry=registry)
    cfg = cmd.config
    try:
        methods.load_method_modules(cmd.method_module)
        apply_overrides(cfg, cmd.set)
        for path in cmd.set_file:
            apply_overrides(cfg, read_set_file(path))
        cfg.validate()
    except (ImportError, ValueError) as e:
        return _usage_error(str(e))
    summary = train(cfg)
    print(json.dumps({"out": cfg.out, **summary["final"], "train_seconds_total": summary["train_seconds_total"]}))
    return 0


if __name__ == "__main__":
    exit_job(main())
