"""The local GRPO trainer: one loop for every registered method (embedded CPU profile; runs on CUDA unchanged).

Per step (one rollout batch), top to bottom, in three functions (`train_step` = `collect` -> `score` -> `update`):

Collect:

1. draw ``prompts_per_step`` training problems (seeded by (seed, step): a resumed run draws the same ones);
2. roll out ``samples_per_prompt`` completions each with KV-cached ancestral sampling at ``temperature`` from the
   model's plain softmax (top_k = 0, top_p = 1), with the suite's sampler (`bandpo.runtime.sampling.sample_rows`): each
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
   This pass, and then the first update's forward pass (step 7), run in a worker thread while step 3 grades
   (`collect`, `policy_view`, `minibatch_log_probs`): neither needs the grades, and grading mostly waits for
   math-verify's worker processes;
6. the method's ratio bounds computed ONCE for the whole batch on valid tokens (`ResolvedMethod.bounds`: the
   method is resolved once per run, `bandpo.methods.resolve`), timed inside the step;

Update:

7. ``ppo_epochs`` passes of ``updates_per_step`` optimizer updates over disjoint mini-batches (``minibatch``: whole
   prompt groups, as verl counts mini-batches in prompts, or random sequences, partitioned afresh each pass; the
   first update is on-policy, all later ones off-policy, which is what makes clipping act), each prompt of a
   mini-batch run once with its KV cache shared by its completions and the mini-batch's all-padding columns
   trimmed: loss = the method's loss (given the loss call's token inputs: the rollout log-probs, and the update
   pass's token entropy for a method that requires it; `bandpo.methods.surrogate.TOKEN_INPUTS`) (+ optional k3 KL
   to the reference), AdamW (`bandpo.runtime.optim`: torch's, bit
   for bit, without importing torch._dynamo), gradient clipping;
   ``stopped_frac*``: tokens whose policy-loss gradient is 0 with A != 0, the same measure for every method
   (`bandpo.methods.stopped_diagnostics`);
8. one line of metrics.jsonl (and a step of each experiment tracker of ``trackers``: TensorBoard, MLflow,
   `bandpo.train.trackers`); a checkpoint every ``checkpoint_every`` steps. On a probe data set (rows with
   ``subset``, bandpo.train.probe) the line also holds the rollouts' accuracy per subset, and with ``probe_every`` the
   probe's measurement after the step's updates (``probe/p_correct``, ``probe/accuracy``: `probe_metrics`; its
   time and grades are not part of the step's ``step_seconds`` and ``grader_*``).

Crash safety (`bandpo.train.runfiles`): a run killed at any point and started again with the same settings resumes
from its last checkpoint and ends with the same metrics as an uninterrupted run (wall-clock fields aside); its
outputs are published in order, ``model/``, ``metrics.jsonl``, then ``run.json``: ``run.json`` existing means the
run is done.

Timings, one name each: per step ``rollout_seconds`` (collect: sampling, and handing the completions to the
grader), ``update_seconds`` (score and update, with the waits for grades: math-verify judges while the updates run,
`Grades`) and
``step_seconds`` (the whole step) in metrics.jsonl; ``train_seconds_total`` in run.json is the run's training time
(the sum of its ``step_seconds``, over every process of a resumed run) and ``process_seconds`` the wall time of the
last process's loop.
"""

from __future__ import annotations

import random
import sys
import time
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from bandpo import methods
from bandpo.data.tiny_math import chat_messages
from bandpo.grader import Grading, counting, grade_many, warmup
from bandpo.runtime.optim import AdamW
from bandpo.runtime.sampling import completion_log_probs_shared, draw_keys, sample_rows
from bandpo.runtime.schedule import lr_schedule
from bandpo.train.probe import measure
from bandpo.train.runfiles import Checkpoint, load_policy, load_probe_rows, load_rows, load_val_rows, publish
from bandpo.train.settings import TrainConfig

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


def rollout(model, tokenizer, prompts: list[str], cfg: TrainConfig, device: torch.device,
            shots: list | None = None, n: int | None = None, keys=None) -> Batch:  # fmt: skip
    """``n`` (default ``samples_per_prompt``) completions per prompt, KV-cached sampling (group members are adjacent
    rows). ``shots``: per prompt, its row's worked exchanges (`chat_prompts`), or None. ``keys``: the rows' common
    random numbers (`bandpo.runtime.sampling.draw_keys`), or None: torch's generator."""
    n = n or cfg.samples_per_prompt
    tokenizer.padding_side = "left"
    if cfg.chat_template:
        prompts = chat_prompts(tokenizer, prompts, shots)
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    prompt_ids, prompt_mask = enc["input_ids"], enc["attention_mask"]
    own = cfg.old_log_probs == "sampler"
    completion, response_mask, entropy, *log_prob = sample_rows(
        model, prompt_ids, prompt_mask, n, cfg.max_new_tokens, cfg.temperature, tokenizer.eos_token_id,
        with_entropy=own, with_log_probs=own, kernel=cfg.sampler_kernel, keys=keys,
    )  # fmt: skip
    is_eos = (completion == tokenizer.eos_token_id) & response_mask
    truncated = ~is_eos.any(1)
    completion = torch.where(response_mask, completion, tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(completion, skip_special_tokens=True)
    attention_mask = torch.cat([prompt_mask.repeat_interleave(n, 0), response_mask.long()], dim=1)
    input_ids = torch.cat([prompt_ids.repeat_interleave(n, 0), completion], 1)
    return Batch(input_ids, attention_mask, response_mask, prompt_ids.shape[1], texts, prompt_ids, prompt_mask,
                 truncated, log_prob[0] if own else None, entropy)  # fmt: skip


def chat_prompts(tokenizer, prompts: list[str], shots: list | None = None) -> list[str]:
    """Each prompt as the last user turn of the tokenizer's chat template (after its row's worked exchanges
    ``shots[i]``, if any: `chat_messages`), ending in the assistant's generation prompt; ValueError when the
    tokenizer has none."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("chat_template: the model's tokenizer has no chat template")
    shots = shots or [None] * len(prompts)
    return [tokenizer.apply_chat_template(chat_messages(p, s), tokenize=False, add_generation_prompt=True)
            for p, s in zip(prompts, shots, strict=True)]  # fmt: skip


def group_advantages(rewards: torch.Tensor, group: int, eps: float) -> torch.Tensor:
    """GRPO outcome advantage per sequence: (R - mean_group) / (std_group + eps), unbiased std."""
    r = rewards.view(-1, group)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True, unbiased=True) + eps)).view(-1)


def step_seed(seed: int, step: int) -> int:
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
    val_rows: list[dict] = field(default_factory=list)  # the validation split (cfg.val_every)
    # the thread that runs each step's old-log-prob pass while the main thread grades (`collect`)
    background: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, "bandpo-policy-view"))

    def own_stream(self):
        """A context in which the RNG may be reseeded and drawn from, the training RNG (CPU and this run's GPU)
        restored after it: the measurements' draws (probe, validation) never move the run's."""
        return torch.random.fork_rng(devices=[self.device.index or 0] if self.device.type == "cuda" else [])

    def sync(self) -> None:
        """Wait for the device (CUDA kernels are asynchronous), so that timings are true."""
        if self.device.type == "cuda":
            torch.cuda.synchronize()


def train(cfg: TrainConfig, method: methods.ResolvedMethod | None = None) -> dict:
    """Run (or resume) one training run; returns the run summary also written to run.json. ``method``: the method
    the command line resolved from ``cfg`` at the edge, where it validated ``cfg`` too (`bandpo.train.cli`): trusted
    here; None (a call from Python) validates ``cfg`` and resolves the method here."""
    if method is None:
        methods.load_env_method_modules()  # methods of the user's own modules ($BANDPO_METHOD_MODULES)
        cfg.validate()
        method = methods.resolve(cfg.method, cfg.params, cfg.loss_settings())
    torch.set_num_threads(cfg.threads)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = load_rows(cfg.data)
    problem = cfg.minibatch_problem(min(cfg.prompts_per_step, len(rows)))
    if problem:
        raise ValueError(f"{cfg.data}: {len(rows)} rows are too few: {problem}")
    if not cfg.chat_template and any(r.get("shots") for r in rows):
        raise ValueError(f"{cfg.data}: its rows show worked exchanges before the prompt (shots), as earlier turns of "
                         "a chat: set chat_template: true")  # fmt: skip
    warmup()  # start the grader's workers now, not inside the first timed step

    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    model, tokenizer = load_policy(cfg.model, device)
    if cfg.chat_template and not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"chat_template: the tokenizer of {cfg.model} has no chat template (instruct models have one)")
    model.eval()  # no dropout anywhere: rollout, old log-probs and updates see the same function
    reference = None
    if cfg.kl_coef > 0:
        reference = load_policy(cfg.model, device)[0].eval()
        reference.requires_grad_(False)
    optimizer = AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    run = Run(cfg, method, model, reference, tokenizer, optimizer, rows, device, load_probe_rows(cfg),
              load_val_rows(cfg))  # fmt: skip
    checkpoint = Checkpoint(out, cfg.identity(), cfg)
    start_step, history = checkpoint.resume(model, optimizer, device)

    bar = tqdm(range(start_step, cfg.steps), initial=start_step, total=cfg.steps, desc=f"{cfg.method} s{cfg.seed}",
               disable=not cfg.progress, file=sys.stderr, mininterval=1.0)  # fmt: skip
    t_run = time.perf_counter()
    try:
        for step in bar:
            before = validation_metrics(run, "_before") if cfg.val_every and step == 0 else {}  # the base policy
            with counting() as graded:  # grader_items, grader_slow_frac, grader_timeouts of this step
                m = train_step(run, step)
            m.update(graded.metrics())
            if cfg.probe_every and ((step + 1) % cfg.probe_every == 0 or step + 1 == cfg.steps):
                m.update(probe_metrics(run, step_seed(cfg.seed, step)))  # not counted in the step's time or grades
            m.update(before)
            if cfg.val_every and ((step + 1) % cfg.val_every == 0 or step + 1 == cfg.steps):
                m.update(validation_metrics(run))  # not counted in the step's time or grades
            history.append(m)
            checkpoint.log(m)
            bar.set_postfix(reward=f"{m['reward_mean']:.3f}", entropy=f"{m['entropy']:.3f}")
            if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
                checkpoint.save(step + 1, model, optimizer, history)
    finally:
        checkpoint.close()
        run.background.shutdown()
    process_seconds = time.perf_counter() - t_run
    return publish(cfg, run, checkpoint, history, start_step, process_seconds)


def lr_at(cfg: TrainConfig, step: int) -> float:
    """The learning rate of step ``step`` (0-based): ``lr``, or linear from ``lr`` to ``lr_end`` over the run
    (`bandpo.runtime.schedule.lr_schedule`: no warmup, decay from the first step to the last)."""
    if cfg.lr_end is None:
        return cfg.lr
    return lr_schedule(step, cfg.lr, cfg.lr_end, decay_steps=cfg.steps - 1)


class Grades:
    """A rollout batch's grades, judged while the updates run. The grader (`bandpo.grader.Grading`) was handed
    every completion in update order, so the first mini-batch's are judged first; :meth:`advantages` waits only
    for the prompt groups of the rows it is asked for. With ``minibatch: group`` an update thus waits for its own
    groups' grades while math-verify's worker judges the later mini-batches'; with ``random`` rows, the first
    update's rows span nearly every group and it waits for nearly all, as before."""

    def __init__(self, grading: Grading, n_rows: int, group: int, adv_eps: float, rewards: torch.Tensor | None):
        self.grading, self.group, self.adv_eps = grading, group, adv_eps
        self.fixed_rewards = rewards is not None  # reward: random (drawn, not graded)
        self.scores = torch.zeros(n_rows)  # the grader's 1 / 0
        self.rewards = rewards if rewards is not None else torch.zeros(n_rows)  # what trains
        self.seq_adv = torch.zeros(n_rows)  # GRPO advantage per sequence (`group_advantages`)
        self.graded = torch.zeros(n_rows // group, dtype=torch.bool)  # prompt groups whose grades are in

    def advantages(self, rows: torch.Tensor) -> torch.Tensor:
        """The sequence advantages of ``rows`` (len(rows),), once the grades of their prompt groups are in."""
        groups = torch.unique(torch.div(rows.cpu(), self.group, rounding_mode="floor"))
        todo = groups[~self.graded[groups]]
        if todo.numel():
            members = (todo.unsqueeze(1) * self.group + torch.arange(self.group)).reshape(-1)
            graded = self.grading.results(members.tolist())
            self.scores[members] = torch.tensor([r.score for r in graded], dtype=torch.float32)
            if not self.fixed_rewards:
                self.rewards[members] = self.scores[members]
            self.seq_adv[members] = group_advantages(self.rewards[members], self.group, self.adv_eps)
            self.graded[todo] = True
        return self.seq_adv[rows.cpu()]

    def wait_all(self) -> None:
        """Every grade in (`scores`, `rewards` complete)."""
        self.advantages(torch.arange(len(self.scores)))


@dataclass
class Collected:
    """A rollout batch, its mini-batches and its grades (judged as the updates need them: `Grades`)."""

    batch: Batch
    grades: Grades
    picked: list[int]  # the rows (of Run.rows) of the batch's prompt groups, in order
    parts: list[torch.Tensor]  # the step's mini-batches (row indices), in update order (`minibatches`)


@dataclass
class Scored:
    """What the updates need from the rollout policy: old log-probs, token entropy, reference log-probs (with a
    KL term) and the method's bounds (bounds methods), all (B, T)."""

    old_log_prob: torch.Tensor
    entropy: torch.Tensor
    ref_log_prob: torch.Tensor | None
    bounds: tuple[torch.Tensor, torch.Tensor] | None
    bounds_seconds: float


def collect(run: Run, step: int, seed: int) -> tuple[Collected, Future, Future]:
    """Draw the step's prompts, sample ``samples_per_prompt`` completions of each, hand them to the grader, draw the
    rewards.

    The completions go to the grader in update order (`Grades`): math-verify's worker process judges them while
    this thread goes on, and each update waits only for its own rows' prompt groups. Meanwhile a worker thread
    computes, in turn, the rollout policy's view of the batch (`policy_view`) and the first update's forward pass
    (`minibatch_log_probs` of the first mini-batch, with its graph), returned as two futures: neither depends on the
    grades. Waiting for grades stays in this thread (math-verify's in-process fallback needs the main thread's
    signals); the forward passes compute the same numbers in any thread, and the first update's weights are the
    rollout policy's until its optimizer step."""
    cfg = run.cfg
    picked = random.Random(seed).sample(range(len(run.rows)), k=min(cfg.prompts_per_step, len(run.rows)))
    torch.manual_seed(seed)  # the sampler's draws
    if run.device.type == "cuda":
        torch.cuda.manual_seed_all(seed)
    # sampler_draws keyed: a number per (seed, step, prompt, sample, position), shared by the runs of a pair
    keys = draw_keys(cfg.seed, step, picked, cfg.samples_per_prompt) if cfg.sampler_draws == "keyed" else None
    with torch.no_grad():
        batch = rollout(run.model, run.tokenizer, [run.rows[i]["prompt"] for i in picked], cfg, run.device,
                        [run.rows[i].get("shots") for i in picked], keys=keys)  # fmt: skip
    n_rows = batch.response_mask.shape[0]
    parts = [part.to(run.device) for part in minibatches(cfg, n_rows, seed)]
    view = run.background.submit(policy_view, run, batch)
    first = run.background.submit(minibatch_log_probs, run, batch, parts[0])
    answers = [str(run.rows[i]["answer"]) for i in picked for _ in range(cfg.samples_per_prompt)]
    grading = Grading(n_rows)
    try:
        order = dict.fromkeys([*(int(r) for part in parts for r in part), *range(n_rows)])  # update order, once each
        for row in order:
            grading.add(row, batch.texts[row], answers[row])
    except BaseException:
        grading.cancel()
        for future in (first, view):
            if not future.cancel():
                future.exception()  # wait for it: not left running into a checkpoint or the next step
        raise
    rewards = None
    if cfg.reward == "random":
        rewards = torch.bernoulli(torch.full((n_rows,), 0.5), generator=torch.Generator().manual_seed(seed))
    grades = Grades(grading, n_rows, cfg.samples_per_prompt, cfg.adv_eps, rewards)
    return Collected(batch, grades, picked, parts), view, first


def minibatch_log_probs(run: Run, batch: Batch, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The policy's log-probs of the completion tokens of rows ``idx`` (len(idx), T), with the graph to its weights
    (`completion_log_probs_shared`): the forward pass of one update; and, for a method that requires it (the
    ``entropy`` token input, e.g. ``top_entropy``), the token entropy of the same distribution (no graph), else
    None."""
    with_entropy = "entropy" in run.method.requires
    with torch.enable_grad():  # grad mode is per thread: set here, in the thread that runs this
        log_prob, entropy = completion_log_probs_shared(
            run.model, batch, idx, run.cfg.samples_per_prompt, with_entropy=with_entropy,
            temperature=run.cfg.temperature,
        )  # fmt: skip
    return log_prob, (entropy.detach() if entropy is not None else None)


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
    """The rollout policy's view of the batch (`policy_view`, awaited here) and the method's bounds once for the
    whole batch, on the valid tokens only."""
    mask = collected.batch.response_mask
    old_log_prob, entropy, ref_log_prob = view.result()
    t_b = time.perf_counter()
    bounds = run.method.bounds(old_log_prob, mask) if run.method.has_bounds else None
    run.sync()
    return Scored(old_log_prob, entropy, ref_log_prob, bounds, time.perf_counter() - t_b)


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


def update(run: Run, collected: Collected, scored: Scored, first: Future) -> dict[str, list[float]]:
    """``ppo_epochs`` x ``updates_per_step`` optimizer updates, one per mini-batch (``collected.parts``: the first
    on-policy, its forward pass ``first`` made while grading; all later ones off-policy); returns each update's
    diagnostics (``offpolicy/<key>``: every update but the very first of the batch). Each waits for its rows'
    grades (`Grades.advantages`)."""
    cfg, model, batch = run.cfg, run.model, collected.batch
    mask, old_log_prob, bounds = batch.response_mask, scored.old_log_prob, scored.bounds
    batch_info = loss_batch_info(cfg)
    diag: dict[str, list[float]] = defaultdict(list)
    for u, idx in enumerate(collected.parts):
        advantages = collected.grades.advantages(idx).to(run.device).unsqueeze(1).expand_as(mask[idx]).contiguous()
        log_prob, entropy = first.result() if u == 0 else minibatch_log_probs(run, batch, idx)
        part_bounds = (bounds[0][idx], bounds[1][idx]) if bounds is not None else None
        # the loss's token inputs (bandpo.methods.surrogate.TOKEN_INPUTS): the sampler is the rollout policy, so its
        # log-probs are the old ones (the sampler's own, or a recompute equal to them up to float rounding)
        inputs = {"rollout_log_prob": old_log_prob[idx]}
        if entropy is not None:
            inputs["entropy"] = entropy
        loss, info = run.method.loss(old_log_prob[idx], log_prob, advantages, mask[idx], bounds=part_bounds,
                                     global_batch_info=batch_info, token_inputs=inputs)  # fmt: skip
        grad = methods.loss_grad_wrt_log_prob(loss, log_prob)  # policy loss only; keeps the graph: update unchanged
        info = {**info, **methods.stopped_diagnostics(grad, advantages, old_log_prob[idx], mask[idx])}
        if scored.ref_log_prob is not None:
            # k3 estimator of KL(pi || pi_ref): exp(ref - logp) - (ref - logp) - 1, aggregated like the policy loss
            d = (scored.ref_log_prob[idx] - log_prob).clamp(-20, 20)
            kl = methods.aggregate_loss(torch.exp(d) - d - 1, mask[idx].float(), cfg.loss_agg_mode, **batch_info)
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


def loss_batch_info(cfg: TrainConfig) -> dict[str, int]:
    """The ``global_batch_info`` of every loss call: seq-mean-token-sum-norm divides by ``max_new_tokens`` (Dr.
    GRPO's constant, TRL's max_completion_length; verl: ``actor.loss_scale_factor``), not by the width of the
    mini-batch, which is its longest completion. The other modes read none of it (one micro-batch per update: the
    batch's own token and sequence counts are the global ones)."""
    return {"loss_scale_factor": cfg.max_new_tokens}


def train_step(run: Run, step: int) -> dict:
    """One rollout batch and its updates: collect -> score -> update; returns the step's metrics."""
    cfg = run.cfg
    t0 = time.perf_counter()
    seed = step_seed(cfg.seed, step)
    for group in run.optimizer.param_groups:
        group["lr"] = lr_at(cfg, step)

    collected, view, first = collect(run, step, seed)
    rollout_seconds = time.perf_counter() - t0  # sampling, and the grader's share of the main thread
    try:
        scored = score(run, collected, view)
        diag = update(run, collected, scored, first)
        collected.grades.wait_all()
    except BaseException:
        collected.grades.grading.cancel()
        raise
    run.sync()
    step_seconds = time.perf_counter() - t0

    batch, rewards, scores = collected.batch, collected.grades.rewards, collected.grades.scores
    mask = batch.response_mask
    n_tokens = int(mask.sum())
    groups = rewards.view(-1, cfg.samples_per_prompt)
    metrics = {
        "step": step + 1,
        "reward_mean": float(rewards.mean()),
        "accuracy": float(scores.mean()),
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
        per_seq = scores.view(-1, cfg.samples_per_prompt).mean(1)
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
    """The mechanism probe's view of the policy after this step's updates (`bandpo.train.probe.measure` on the probe
    rows): the deciding correct token's probability and the sampled accuracy. The training RNG is left as it was."""
    with run.own_stream():
        m = measure(run.model, run.tokenizer, run.probe_rows, k=run.cfg.probe_k, seed=seed, greedy=False)
    out = {
        "probe/p_correct": m["deciding"]["p_correct"]["mean"],
        "probe/p_correct_median": m["deciding"]["p_correct"]["median"],
        "probe/prefers_decoy": m["deciding"]["prefers_decoy_share"],
    }
    if run.cfg.probe_k:
        out["probe/accuracy"] = m["probe"]["sampled"]
    return out


def validation_metrics(run: Run, suffix: str = "") -> dict[str, float]:
    """The held-out curve (``val_every``): the policy's mean@k and pass@k on the validation split, k = ``val_k``,
    sampled as the rollouts are (temperature, max_new_tokens, chat template and shots, sampler kernel) in batches
    of ``prompts_per_step`` problems, graded by the training grader.

    mean@k = mean over problems of (correct samples / k); pass@k = the share of problems with at least one correct
    sample (the unbiased estimator 1 - C(n-c, k)/C(n, k) at n = k). The draws come from a stream of the run's seed
    alone (the same at every measurement, so the curve's points share their sampling noise, and the same for every
    method of a seed: paired), and the training RNG is left as it was, so a run trains the same with or without
    this measurement. Keys ``val/mean``, ``val/pass`` and ``val/seconds``, each with ``suffix``."""
    cfg, rows, k = run.cfg, run.val_rows, run.cfg.val_k
    t0 = time.perf_counter()
    correct: list[int] = []
    with run.own_stream(), torch.no_grad():
        for start in range(0, len(rows), cfg.prompts_per_step):
            chunk = rows[start : start + cfg.prompts_per_step]
            torch.manual_seed(step_seed(cfg.seed, -1 - start))  # the validation stream: never a training step's
            batch = rollout(run.model, run.tokenizer, [r["prompt"] for r in chunk], cfg, run.device,
                            [r.get("shots") for r in chunk], n=k)  # fmt: skip
            scores = grade_many(batch.texts, [str(r["answer"]) for r in chunk for _ in range(k)])
            correct += [round(sum(scores[i * k : (i + 1) * k])) for i in range(len(chunk))]
    return {
        f"val/mean{suffix}": sum(correct) / (k * len(correct)),
        f"val/pass{suffix}": sum(c > 0 for c in correct) / len(correct),
        f"val/seconds{suffix}": time.perf_counter() - t0,
    }
