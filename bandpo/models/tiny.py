"""The embedded profile's tiny base models: built, pretrained and evaluated here.

``build_model`` makes a character-level tokenizer and a Llama-architecture causal LM of one registered size
(`bandpo.models.sizes.SIZES`), pretrains it on tiny-math's train split and saves both with ``save_pretrained``
(plus a ``generation_config.json`` for true temperature-1.0 sampling, i.e. ``top_k=0``, and an ``info.json``), so
everything downstream loads it with ``from_pretrained`` like a hub model. The output directory is built under a
temporary name beside the target and renamed at the end: a crash never leaves a directory that looks complete.

Tokenizer: one token per character (WordLevel over printable ASCII and newline, a per-character Split
pre-tokenizer and a Fuse decoder) in ``PreTrainedTokenizerFast``; ``<pad>``=0, ``<eos>``=1, ``<unk>``=2 (any
other character), no BOS, no chat template, left padding, ``model_max_length`` 256.

Pretraining is supervised on answer tokens + EOS only (prompt masked), AdamW, linear warmup then linear decay,
batches of random rows packed into rows of ``pack_len`` tokens (block-diagonal attention through restarting
position ids, so packed examples never see each other). A share ``direct_frac`` (0.25) of the targets is the bare
answer ``\\boxed{ANS}`` instead of the worked line: the base model mixes a reliable worked style with a cheap
direct guess (accurate on level 1, mostly wrong on level 3). That first-token choice is a genuinely uncertain,
useful decision at T=1.0, the worked style's low-probability alternative being the one RL can grow, and the
digits of intermediate steps are where the model is unsure; both are where clipping methods differ. On the
mechanism probe's data (``bandpo.train.probe``) the bare answer is the row's ``shown_answer``: the decoy on decoy rows.

The cross-entropy is label-smoothed (``label_smoothing`` 0.03): the model keeps its argmax but spreads a little
probability over every other token, so that samples at T=1.0 are much noisier than its greedy answers (tiny-s: 24%
sampled against 52% greedy on the test split). That is the regime of real base LLMs, whose sampled accuracy lies
well below what they can produce, and it gives GRPO something to learn in two CPU-minutes: sharpening onto the
answers the model already ranks first, with a token entropy (~0.43 nats) that starts high enough for the clipping
methods to differ (benchmarks/CHANGELOG.md, "the tiny models' recipe", has the base model without smoothing).

Deterministic from the seed at a fixed thread count (CPU); the sizes and what they reach: `bandpo.models.sizes`.
The command line: `bandpo.models.cli` (``python -m bandpo.models build`` / ``eval``).
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers
from tokenizers.models import WordLevel
from tqdm.auto import tqdm
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from bandpo.core.files import new_tmp_dir, publish_dir, read_jsonl, write_json
from bandpo.core.provenance import machine, versions, weights_sha256
from bandpo.grader import grade, grader_id
from bandpo.models.sizes import SizeSpec, get_size
from bandpo.runtime.optim import AdamW
from bandpo.runtime.sampling import sample_rows
from bandpo.runtime.schedule import lr_schedule

SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<eos>", "<unk>")
# printable ASCII plus newline: covers every tiny-math prompt and answer; anything else maps to <unk>
CHARSET: tuple[str, ...] = tuple(chr(i) for i in range(32, 127)) + ("\n",)
MAX_NEW_TOKENS = 48
STOP_STRING = "}"  # a tiny-math answer ends with the closing brace of \boxed{...}


# --------------------------------------------------------------------------------------------------------------
# tokenizer and model
# --------------------------------------------------------------------------------------------------------------
def build_tokenizer(model_max_length: int = 256):
    """Character-level tokenizer (WordLevel over printable ASCII + newline, one token per character) wrapped in
    ``PreTrainedTokenizerFast``: pad/eos/unk specials, left padding (for generation), no BOS, no chat template,
    no clean-up of spaces on decode."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARSET)}
    tk = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tk.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        model_max_length=model_max_length,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )


def llama_config(spec: SizeSpec, tokenizer):
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )


def init_model(spec: SizeSpec, tokenizer, seed: int = 0):
    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama_config(spec, tokenizer))
    model.generation_config = make_generation_config(tokenizer)
    return model


def make_generation_config(tokenizer, max_new_tokens: int = MAX_NEW_TOKENS):
    """Plain sampling at T=1.0 (``top_k=0``: HF would otherwise apply top-k 50)."""
    return GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def count_parameters(model) -> int:
    """Unique parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def load_model(model_dir: str | os.PathLike):
    """(model, tokenizer) of a saved model folder, through transformers' Auto classes, the model in eval mode."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    model.eval()
    return model, tokenizer


# --------------------------------------------------------------------------------------------------------------
# pretraining
# --------------------------------------------------------------------------------------------------------------
def lr_lambda(spec: SizeSpec) -> Callable[[int], float]:
    """Pretraining's multiplier of ``spec.lr`` (`lr_schedule` with peak 1): warmup (linear), constant, then linear
    decay to ``min_lr_frac`` over the last ``decay_frac`` of steps."""
    decay_start = int(spec.steps * (1.0 - spec.decay_frac))
    decay_steps = spec.steps - decay_start if spec.decay_frac > 0 else 0
    return lambda step: lr_schedule(step, 1.0, spec.min_lr_frac, warmup_steps=spec.warmup_steps,
                                    decay_start=decay_start, decay_steps=decay_steps)  # fmt: skip


def direct_target(answer: str) -> str:
    return "\\boxed{" + answer + "}"


def _encode(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    return tokenizer(list(texts), add_special_tokens=False)["input_ids"]


def _batches(n: int, batch_size: int, gen: torch.Generator, rng: random.Random, direct_frac: float):
    """Endless batches of (row index, use the direct target): epochs of random permutations (tail dropped)."""
    if n < batch_size:
        raise ValueError(f"need at least batch_size={batch_size} training rows, got {n}")
    while True:
        perm = torch.randperm(n, generator=gen).tolist()
        for start in range(0, n - batch_size + 1, batch_size):
            yield [(i, rng.random() < direct_frac) for i in perm[start : start + batch_size]]


def pack_sequences(
    seqs: Sequence[list[int]], labels: Sequence[list[int]], capacity: int, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pack examples into rows of at most ``max(capacity, longest)`` tokens (first fit, longest first).

    Returns input_ids, position_ids (restarting at 0 for each example) and labels (-100 on padding). With
    ``attention_mask=None`` and ``use_cache=False``, transformers turns restarting position ids into a
    block-diagonal causal mask, so packed examples never see each other; each example's first label is a
    masked prompt token, so nothing is predicted across a boundary. Padding continues the last example's
    positions (it attends only backwards and carries no loss).
    """
    cap = max(capacity, max(len(s) for s in seqs))
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
    rows: list[list[int]] = []
    fill: list[int] = []
    for i in order:
        for r, used in enumerate(fill):
            if used + len(seqs[i]) <= cap:
                rows[r].append(i)
                fill[r] += len(seqs[i])
                break
        else:
            rows.append([i])
            fill.append(len(seqs[i]))
    width = max(fill)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    pos = torch.zeros((len(rows), width), dtype=torch.long)
    lab = torch.full((len(rows), width), -100, dtype=torch.long)
    for r, members in enumerate(rows):
        col = 0
        for i in members:
            k = len(seqs[i])
            ids[r, col : col + k] = torch.tensor(seqs[i])
            lab[r, col : col + k] = torch.tensor(labels[i])
            pos[r, col : col + k] = torch.arange(k)
            col += k
        if col < width:
            last = pos[r, col - 1].item()
            pos[r, col:] = torch.arange(last + 1, last + 1 + width - col)
    return ids, pos, lab


def pad_sequences(
    seqs: Sequence[list[int]], labels: Sequence[list[int]], pad_id: int
) -> tuple[torch.Tensor, None, torch.Tensor]:
    """Right-padded batch (causal attention keeps padding from affecting real tokens; no loss on it)."""
    width = max(len(s) for s in seqs)
    ids = torch.tensor([list(s) + [pad_id] * (width - len(s)) for s in seqs])
    lab = torch.tensor([list(x) + [-100] * (width - len(x)) for x in labels])
    return ids, None, lab


@torch.no_grad()
def packing_isolates(model) -> bool:
    """Whether this transformers version turns restarting position ids into a block-diagonal mask (so packed
    examples do not attend to each other): compares a packed forward pass against separate ones."""
    was_training = model.training
    model.eval()
    try:
        a, b = torch.arange(3, 10)[None], torch.arange(11, 16)[None]
        ids = torch.cat([a, b], dim=1)
        pos = torch.cat([torch.arange(a.shape[1]), torch.arange(b.shape[1])])[None]
        packed = model(input_ids=ids, position_ids=pos, use_cache=False).logits[0, a.shape[1] :]
        alone = model(input_ids=b, use_cache=False).logits[0]
        return bool(torch.allclose(packed, alone, atol=1e-4, rtol=1e-3))
    finally:
        model.train(was_training)


def make_optimizer(model, spec: SizeSpec) -> AdamW:
    """Pretraining's AdamW: weight decay ``spec.weight_decay`` on the weight matrices, none on norms and vectors."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "norm" in name else decay).append(p)
    return AdamW(
        [{"params": decay, "weight_decay": spec.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=spec.lr,
        betas=(0.9, 0.98),
        eps=1e-8,
    )


def pretrain_loss(model, input_ids, position_ids, labels, label_smoothing: float) -> torch.Tensor:
    """The batch's cross-entropy over its answer tokens (labels -100 elsewhere), label-smoothed when
    ``label_smoothing`` > 0 (else the model's own loss)."""
    if label_smoothing <= 0:
        return model(input_ids=input_ids, position_ids=position_ids, labels=labels, use_cache=False).loss
    logits = model(input_ids=input_ids, position_ids=position_ids, use_cache=False).logits
    # position t predicts token t + 1
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100,
        label_smoothing=label_smoothing,
    )  # fmt: skip


def pretrain(
    model,
    tokenizer,
    rows: Sequence[dict],
    spec: SizeSpec,
    seed: int = 0,
    progress: bool = True,
    log_every: int = 100,
) -> dict:
    """Supervised pretraining on tiny-math rows (loss on answer tokens + EOS only). Returns loss history."""
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id
    prompts = _encode(tokenizer, [r["prompt"] for r in rows])
    worked = _encode(tokenizer, [r["solution"] for r in rows])
    # the bare answer the row shows: its answer, or the probe's decoy where the worked line shows it
    # (bandpo.train.probe)
    direct = _encode(tokenizer, [direct_target(r.get("shown_answer") or r["answer"]) for r in rows])
    n = len(rows)
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)

    model.train()
    opt = make_optimizer(model, spec)
    multiplier = lr_lambda(spec)  # the learning rate of step k is spec.lr * multiplier(k) (torch's LambdaLR's)
    packing = spec.pack_len > 0 and packing_isolates(model)
    if spec.pack_len > 0 and not packing:
        print("pretrain: this transformers version does not isolate packed sequences; padding instead", file=sys.stderr)
    history: list[dict] = []
    running, running_n = 0.0, 0
    batches = _batches(n, spec.batch_size, gen, rng, spec.direct_frac)
    bar = tqdm(range(spec.steps), desc="pretrain", disable=not progress, mininterval=2.0, file=sys.stderr)
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = spec.lr * multiplier(step)
        seqs, labels = [], []
        for i, use_direct in next(batches):
            tgt = (direct[i] if use_direct else worked[i]) + [eos]
            seqs.append(prompts[i] + tgt)
            labels.append([-100] * len(prompts[i]) + tgt)
        # packing: random batches keep every kind and style mixed in each step (length-sorted batches train
        # much worse) while avoiding the ~2x padding of random batches
        if packing:
            input_ids, position_ids, label_t = pack_sequences(seqs, labels, spec.pack_len, pad)
        else:
            input_ids, position_ids, label_t = pad_sequences(seqs, labels, pad)
        loss = pretrain_loss(model, input_ids, position_ids, label_t, spec.label_smoothing)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        running += loss.item()
        running_n += 1
        if (step + 1) % log_every == 0 or step + 1 == spec.steps:
            history.append(
                {"step": step + 1, "loss": round(running / running_n, 4), "lr": spec.lr * multiplier(step + 1)}
            )
            bar.set_postfix(loss=f"{running / running_n:.3f}")
            running, running_n = 0.0, 0
    model.eval()
    return {
        "history": history,
        "final_loss": history[-1]["loss"] if history else float("nan"),
        "packed": packing,
    }


# --------------------------------------------------------------------------------------------------------------
# sampling and accuracy
# --------------------------------------------------------------------------------------------------------------
@torch.no_grad()
def sample_completions(
    model,
    tokenizer,
    prompts: Sequence[str],
    k: int = 8,
    temperature: float = 1.0,
    max_new_tokens: int = MAX_NEW_TOKENS,
    seed: int = 0,
    batch_size: int = 1024,
) -> tuple[list[list[str]], dict]:
    """``k`` samples per prompt with the trainer's KV-cached sampler (`bandpo.runtime.sampling.sample_rows`: plain
    softmax sampling, each prompt pre-filled once for its ``k`` rows), at most ``batch_size`` rows per chunk.

    Returns completions (prompt-major) and stats: mean token entropy (nats, of the sampling distribution
    softmax(logits / T), over generated tokens up to and including EOS) and mean completion length in tokens.
    """
    model.eval()
    # sort by prompt length so that chunks need little padding; results are put back in order below
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    per_chunk = max(1, batch_size // max(k, 1))
    torch.manual_seed(seed)
    grouped: list[list[str]] = [[] for _ in prompts]
    ent_sum, tok_n = 0.0, 0
    pad_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        for start in range(0, len(order), per_chunk):
            idx = order[start : start + per_chunk]
            enc = tokenizer([prompts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False)
            tokens, mask, entropy = sample_rows(model, enc["input_ids"], enc["attention_mask"], k, max_new_tokens,
                                                temperature, tokenizer.eos_token_id, with_entropy=True)  # fmt: skip
            ent_sum += float(entropy.sum())
            tok_n += int(mask.sum())
            texts = tokenizer.batch_decode(torch.where(mask, tokens, tokenizer.pad_token_id), skip_special_tokens=True)
            for j, i in enumerate(idx):
                grouped[i] = texts[j * k : (j + 1) * k]
    finally:
        tokenizer.padding_side = pad_side
    n_texts = len(prompts) * k
    return grouped, {"token_entropy": ent_sum / max(tok_n, 1), "mean_tokens": tok_n / max(n_texts, 1)}


def sample_accuracy(
    model: Any,
    tokenizer: Any,
    rows: Sequence[dict],
    k: int = 8,
    temperature: float = 1.0,
    max_new_tokens: int = MAX_NEW_TOKENS,
    seed: int = 0,
    batch_size: int = 1024,
    grader: Callable[[str, str], float] | None = None,
    keep_samples: bool = False,
) -> dict:
    """Mean accuracy over ``k`` samples per row at ``temperature`` (plus per level / kind, entropy, styles).

    ``model`` may be a model directory (then ``tokenizer`` may be None) or a loaded model.
    """
    if isinstance(model, str | os.PathLike):
        model, tok = load_model(model)
        tokenizer = tokenizer or tok
    if grader is None:
        grader, grader_name = grade, grader_id()  # name/mode@version: the mode of BANDPO_GRADER_MODE
    else:
        grader_name = getattr(grader, "__qualname__", str(grader))
    rows = list(rows)
    completions, stats = sample_completions(
        model, tokenizer, [r["prompt"] for r in rows], k, temperature, max_new_tokens, seed, batch_size
    )
    by_level: dict[int, list[float]] = defaultdict(list)
    by_kind: dict[str, list[float]] = defaultdict(list)
    style: dict[str, list[float]] = defaultdict(list)
    scores: list[float] = []
    samples = []
    for row, comps in zip(rows, completions, strict=True):
        row_scores = [float(grader(c, row["answer"])) for c in comps]
        scores.extend(row_scores)
        by_level[int(row.get("level", 0))].extend(row_scores)
        by_kind[str(row.get("kind", ""))].extend(row_scores)
        for c, s in zip(comps, row_scores, strict=True):
            style["direct" if c.lstrip().startswith("\\boxed") else "worked"].append(s)
        if keep_samples:
            samples.append({"id": row["id"], "completions": comps, "scores": row_scores})

    def mean(xs: Sequence[float]) -> float:
        return sum(xs) / len(xs) if xs else float("nan")

    result = {
        "accuracy": mean(scores),
        "k": k,
        "temperature": temperature,
        "n_problems": len(rows),
        "n_samples": len(scores),
        "per_level": {str(lv): mean(v) for lv, v in sorted(by_level.items())},
        "per_kind": {kd: mean(v) for kd, v in sorted(by_kind.items())},
        "direct_share": len(style["direct"]) / max(len(scores), 1),
        "accuracy_direct": mean(style["direct"]),
        "accuracy_worked": mean(style["worked"]),
        "token_entropy": stats["token_entropy"],
        "mean_tokens": stats["mean_tokens"],
        "grader": grader_name,
    }
    if keep_samples:
        result["samples"] = samples
    return result


# --------------------------------------------------------------------------------------------------------------
# build
# --------------------------------------------------------------------------------------------------------------
def build_model(
    size: str | SizeSpec,
    data_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    seed: int = 0,
    threads: int | None = 1,
    progress: bool = True,
    eval_limit: int | None = None,
    **overrides: Any,
) -> dict:
    """Build, pretrain, evaluate (validation split, k samples at T=1.0) and save one tiny model atomically.

    Returns the ``info.json`` content.
    """
    t0, c0 = time.time(), time.process_time()
    if threads:
        torch.set_num_threads(threads)
    spec = get_size(size, **overrides)
    size_name = size if isinstance(size, str) else "custom"
    data_dir = Path(data_dir)
    out_dir = Path(out_dir)
    train_rows = read_jsonl(data_dir / "train.jsonl")
    val_rows = read_jsonl(data_dir / "validation.jsonl")
    if eval_limit is not None:
        val_rows = val_rows[:eval_limit]

    tokenizer = build_tokenizer(spec.max_position_embeddings)
    model = init_model(spec, tokenizer, seed)
    n_params = count_parameters(model)
    t1 = time.time()
    pre = pretrain(model, tokenizer, train_rows, spec, seed=seed, progress=progress)
    t2 = time.time()
    acc = sample_accuracy(model, tokenizer, val_rows, k=spec.eval_k, temperature=1.0, seed=seed)
    t3 = time.time()

    tmp = new_tmp_dir(out_dir)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        info = {
            "kind": "tiny",
            "size": size_name,
            "architecture": "LlamaForCausalLM",
            "params": n_params,
            "seed": seed,
            "threads": torch.get_num_threads(),
            "spec": dataclasses.asdict(spec),
            "data": str(data_dir),
            "n_train_rows": len(train_rows),
            "final_loss": pre["final_loss"],
            "packed_batches": pre["packed"],
            "loss_history": pre["history"],
            "validation": {key: v for key, v in acc.items() if key != "samples"},
            "base_accuracy_validation": acc["accuracy"],
            "seconds": {
                "setup": round(t1 - t0, 2),
                "pretrain": round(t2 - t1, 2),
                "eval": round(t3 - t2, 2),
                "total": round(time.time() - t0, 2),
            },
            "build_seconds": round(time.time() - t0, 2),
            # CPU time of this process: what the build costs on an otherwise idle core (wall time grows with load)
            "build_cpu_seconds": round(time.process_time() - c0, 2),
            "versions": versions("torch", "transformers", "tokenizers"),
            "machine": machine(),  # CPU model, torch's CPU capability and thread counts: what decides the bits
            "weights_sha256": weights_sha256(tmp),
        }
        write_json(tmp / "info.json", info)
        publish_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info
