"""Mechanism probe: tiny-math with rare correct answers, and the probability of the deciding correct token.

BandPO's claim is mechanistic: a fixed upper clip throttles the growth of low-probability tokens with positive
advantage, while Band bounds let them grow. The probe builds that situation into tiny-math (the data design,
`bandpo.data.tiny_math.ProbeSpec` and `bandpo.data.tiny_math.apply_probe`; this module measures on top of it). A stated
subset of
problems (kinds x levels whose integer answer ends in ``last_digit``, by default "word
problems of level 1 whose answer ends in 7") is shown in the *pretraining* targets with a plausible wrong final
answer most of the time: the decoy ``answer + 1`` (off by one in the last digit: ``...7`` becomes ``...8``) replaces the
result of the worked line and the boxed answer in a share ``decoy_share`` of the subset's train rows, so the base
model computes the problem but learns to write the decoy; the correct answer stays rare and reachable. Every
row keeps its true ``answer``, so the reward (``bandpo.grader`` on ``answer``) stays correct and RL can discover
the rare correct answer. The rest of the task is unchanged.

Rows of a probe data set carry three more fields (all splits):

    subset        str   ``probe`` (the row satisfies the rule) or ``rest``
    decoy         str   the decoy answer of a probe row; null for the rest
    shown_answer  str   the answer the row's ``solution`` shows (train: the decoy on decoy rows; else ``answer``);
                        pretraining's direct target ``\\boxed{shown_answer}`` follows it (bandpo.models.tiny)

The subset is small in the stratified test/validation splits (20 problems per (kind, level) cell), so
``n_test``/``n_val`` probe problems are guaranteed there: probe problems drawn from the subset's cells (unique,
from a separate seeded stream) are added to the split, and train rows that repeat one of them are replaced by
fresh draws of the same cell, so the splits stay disjoint by problem text and ``n_train`` stays exact.
Deterministic from the seed.

Measurement (:func:`measure`, callable on a loaded model, e.g. during RL): for each probe problem the *deciding
token* is the first position where the correct target departs from the model's greedy answer, teacher-forced
along the correct target (so the prefix is the model's own preferred prefix up to there), in the style (worked
line or bare ``\\boxed{}``) the model ranks first at the first answer token. Where the greedy answer is already
correct, the position where the correct target departs from the decoy target is used instead. Reported: the
correct token's probability there (mean, median, quartiles), the preferred token's probability, the share of
problems whose greedy answer is correct / takes the decoy token, and sampled accuracy (T = 1.0, k samples) on
the probe subset and on the rest.

CLI::

    python -m bandpo.data tiny-math --out resources/data/tiny-math-probe --seed 0 \\
        --probe '{"kinds": ["word"], "levels": [1], "last_digit": 7, "decoy_share": 0.95}'
    python -m bandpo.models build --size tiny-s --data resources/data/tiny-math-probe \\
        --out resources/models/tiny-s-probe --seed 0 --threads 1
    python -m bandpo.train.probe measure --model resources/models/tiny-s-probe --data resources/data/tiny-math-probe
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from bandpo.core.files import atomic_write_text, read_jsonl
from bandpo.data.tiny_math import boxed, decoy_solution, subset_rows


# --------------------------------------------------------------------------------------------------------------
# the deciding token
# --------------------------------------------------------------------------------------------------------------
def _target_logprobs(model, tokenizer, prompts: Sequence[str], targets: Sequence[str], batch_size: int):
    """Log-probabilities over the vocabulary at each target position, teacher-forced (list of [len, V])."""
    device = next(model.parameters()).device
    p_ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    t_ids = tokenizer(list(targets), add_special_tokens=False)["input_ids"]
    out = []
    for start in range(0, len(p_ids), batch_size):
        chunk = range(start, min(start + batch_size, len(p_ids)))
        seqs = [p_ids[i] + t_ids[i] for i in chunk]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for j, s in enumerate(seqs):  # right padding: real tokens keep positions 0..n-1
            ids[j, : len(s)] = torch.tensor(s)
            mask[j, : len(s)] = 1
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False).logits
        logp = torch.log_softmax(logits.float(), dim=-1).cpu()
        for j in range(len(seqs)):
            n_p, n_t = len(p_ids[start + j]), len(t_ids[start + j])
            out.append(logp[j, n_p - 1 : n_p - 1 + n_t])  # position t predicts target token t
    return out, t_ids


def _first_departure(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@torch.no_grad()
def deciding_tokens(model, tokenizer, rows: Sequence[dict], batch_size: int = 256) -> list[dict]:
    """Per probe row: the deciding position, the correct token's probability there and the model's preferred token.

    Style: the worked line if the model ranks its first token above ``\\`` (the bare ``\\boxed{}`` answer), else
    the bare answer. Rows need ``prompt``, ``answer``, ``solution`` (the correct worked line) and ``decoy``.
    """
    was_training = model.training
    model.eval()
    try:
        rows = list(rows)
        prompts = [r["prompt"] for r in rows]
        worked = [r["solution"] for r in rows]
        direct = [boxed(r["answer"]) for r in rows]
        lp_w, ids_w = _target_logprobs(model, tokenizer, prompts, worked, batch_size)
        lp_d, ids_d = _target_logprobs(model, tokenizer, prompts, direct, batch_size)
    finally:
        model.train(was_training)
    records = []
    for k, row in enumerate(rows):
        use_worked = lp_w[k][0, ids_w[k][0]] >= lp_d[k][0, ids_d[k][0]]
        lp, ids = (lp_w[k], ids_w[k]) if use_worked else (lp_d[k], ids_d[k])
        greedy = lp.argmax(-1).tolist()
        pos = _first_departure(ids, greedy)
        greedy_correct = pos is None
        if greedy_correct:
            if not row.get("decoy"):
                raise ValueError(f"row {row.get('id')}: greedy answer is correct and the row has no decoy")
            wrong = decoy_solution(row["solution"], row["answer"], row["decoy"]) if use_worked else boxed(row["decoy"])
            pos = _first_departure(ids, tokenizer(wrong, add_special_tokens=False)["input_ids"])
        decoy_tok = None
        if row.get("decoy"):
            wrong = decoy_solution(row["solution"], row["answer"], row["decoy"]) if use_worked else boxed(row["decoy"])
            wrong_ids = tokenizer(wrong, add_special_tokens=False)["input_ids"]
            if _first_departure(ids, wrong_ids) == pos and pos < len(wrong_ids):
                decoy_tok = wrong_ids[pos]
        pref = int(lp[pos].argmax())
        records.append(
            {
                "id": row.get("id"),
                "style": "worked" if use_worked else "direct",
                "position": pos,
                "correct_token": tokenizer.decode([ids[pos]]),
                "p_correct": math.exp(float(lp[pos, ids[pos]])),
                "preferred_token": tokenizer.decode([pref]),
                "p_preferred": math.exp(float(lp[pos, pref])),
                "p_decoy": math.exp(float(lp[pos, decoy_tok])) if decoy_tok is not None else None,
                "greedy_correct": greedy_correct,
                "prefers_decoy": decoy_tok is not None and pref == decoy_tok,
            }
        )
    return records


def _quantiles(xs: Sequence[float]) -> dict[str, float]:
    if not xs:
        return {k: float("nan") for k in ("mean", "median", "q25", "q75", "min", "max")}
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return {"mean": statistics.fmean(xs), "median": q[1], "q25": q[0], "q75": q[2], "min": min(xs), "max": max(xs)}


def summarize_deciding(records: Sequence[dict]) -> dict[str, Any]:
    n = len(records)
    p = [r["p_correct"] for r in records]
    decoy = [r["p_decoy"] for r in records if r["p_decoy"] is not None]
    return {
        "n": n,
        "p_correct": _quantiles(p),
        "p_correct_in_band": sum(0.01 <= x <= 0.1 for x in p) / n if n else float("nan"),
        "p_preferred_mean": statistics.fmean(r["p_preferred"] for r in records) if n else float("nan"),
        "p_decoy_mean": statistics.fmean(decoy) if decoy else float("nan"),
        "greedy_correct_share": sum(r["greedy_correct"] for r in records) / n if n else float("nan"),
        "prefers_decoy_share": sum(r["prefers_decoy"] for r in records) / n if n else float("nan"),
        "worked_style_share": sum(r["style"] == "worked" for r in records) / n if n else float("nan"),
    }


def measure(
    model,
    tokenizer,
    rows: Sequence[dict],
    k: int = 8,
    seed: int = 0,
    greedy: bool = True,
    keep_records: bool = False,
) -> dict[str, Any]:
    """The probe's measurement on a loaded model: deciding-token statistics on the probe rows, and accuracy
    (T = 1.0, ``k`` samples; greedy too unless ``greedy=False``) on the probe subset and on the rest.
    ``k=0`` skips sampling (the cheap part alone, e.g. for logging during training)."""
    # lazy: bandpo.models.tiny loads transformers, scipy and pandas (seconds); the trainer imports this module
    from bandpo.models.tiny import sample_accuracy

    probe, rest = subset_rows(rows, "probe"), subset_rows(rows, "rest")
    if not probe:
        raise ValueError("no probe rows to measure")
    records = deciding_tokens(model, tokenizer, probe)
    result: dict[str, Any] = {"deciding": summarize_deciding(records)}
    for name, part in (("probe", probe), ("rest", rest)):
        if not part:
            continue
        entry: dict[str, Any] = {"n_problems": len(part)}
        if k > 0:
            acc = sample_accuracy(model, tokenizer, part, k=k, temperature=1.0, seed=seed)
            entry.update({"sampled": acc["accuracy"], "k": k, "per_level": acc["per_level"],
                          "per_kind": acc["per_kind"], "token_entropy": acc["token_entropy"]})  # fmt: skip
        if greedy:
            entry["greedy"] = sample_accuracy(model, tokenizer, part, k=1, temperature=0.05, seed=seed)["accuracy"]
        result[name] = entry
    if keep_records:
        result["records"] = records
    return result


# --------------------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    from bandpo.models.tiny import load_model  # lazy: as in `measure`

    ap = argparse.ArgumentParser(prog="python -m bandpo.train.probe", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="deciding-token probability and subset accuracies of a model")
    m.add_argument("--model", required=True)
    m.add_argument("--data", required=True, help="probe data folder (or a JSONL split)")
    m.add_argument("--split", default="test")
    m.add_argument("--k", type=int, default=8)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--threads", type=int, default=1)
    m.add_argument("--no-greedy", action="store_true")
    m.add_argument("--out", default=None, help="write the result (with per-problem records) as JSON here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    path = Path(args.data)
    rows = read_jsonl(path / f"{args.split}.jsonl" if path.is_dir() else path)
    model, tok = load_model(args.model)
    res = measure(model, tok, rows, k=args.k, seed=args.seed, greedy=not args.no_greedy, keep_records=bool(args.out))
    print(json.dumps({key: v for key, v in res.items() if key != "records"}, indent=2))
    if args.out:
        atomic_write_text(args.out, json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
