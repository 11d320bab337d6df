"""The base real LM's mean@k on tiny-math's validation split under candidate task formats (#56, part 2), seeded.

    python benchmarks/real_lm_task_formats.py [--model resources/models/smollm2-135m] [--n 100] [--k 8]
        [--seed 0] [--candidates NAME ...] [--json FILE]

Each candidate is a task format: the prompt (``bandpo.data.tiny_math`` prompt format, or a zero-shot instruction),
the tiny-math levels, the sampling temperature, the grader mode and the completion budget. For each, the script
generates tiny-math's splits as the data stage does (``generate_tiny_math`` with the seed and the sizes of
config/real-lm.yaml's data entry: ``--n`` validation and test problems, the test split drawn first), takes the
validation split, renders every prompt as the trainer does (`bandpo.train.loop.chat_prompts`: the model's chat
template, the format's worked exchanges as earlier turns), draws k completions per problem with the suite's sampler
(`bandpo.runtime.sampling.sample_rows`, the C attention kernel, 16 problems per batch, torch seeded with ``--seed``
at the start of each candidate) and grades them with `bandpo.grader` in the candidate's mode.

Printed per candidate: mean@k (the mean over problems of each problem's share of correct samples) with a 95%
interval over problems (normal approximation, mean +- 1.96 sd / sqrt(n): the k samples of a problem are not
independent, so the interval is taken over the n problem means), the Wilson interval over all n k samples as if
they were independent (narrower; for reference), pass@k, the share of samples whose final answer the grader finds at
all (the format followed), the mean completion length and the share cut at the budget. The candidates run one after
another in one process, on the same model; the figures do not depend on the machine's speed.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ZERO_SHOT = '{problem}\nReply with only the final answer, in the form "Answer: <number>".'


@dataclass(frozen=True)
class Candidate:
    name: str
    prompt_format: str  # a bandpo.data.tiny_math prompt format, or "zero-shot" (ZERO_SHOT, no worked exchanges)
    levels: tuple[int, ...]
    temperature: float
    grader_mode: str
    max_new_tokens: int


CANDIDATES = (
    # the real-LM profile as it was: the tiny models' prompt, every level, T = 1.0, boxed or Answer: line (lenient)
    Candidate("tiny-prompt", "tiny", (1, 2, 3), 1.0, "lenient", 48),
    Candidate("zero-shot-L1", "zero-shot", (1,), 1.0, "strict-answer-line", 32),
    Candidate("answer-line", "answer-line", (1, 2, 3), 1.0, "strict-answer-line", 32),
    Candidate("answer-line-L1", "answer-line", (1,), 1.0, "strict-answer-line", 32),
    Candidate("answer-line-T0.7", "answer-line", (1, 2, 3), 0.7, "strict-answer-line", 32),
    Candidate("answer-line-L1-T0.7", "answer-line", (1,), 0.7, "strict-answer-line", 32),
    Candidate("answer-line-L12-T0.7", "answer-line", (1, 2), 0.7, "strict-answer-line", 32),
)


def wilson(successes: int, total: int, z: float = 1.96) -> tuple[float, float]:
    if total == 0:
        return (float("nan"), float("nan"))
    p = successes / total
    den = 1 + z * z / total
    mid = (p + z * z / (2 * total)) / den
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / den
    return mid - half, mid + half


def validation_rows(c: Candidate, n: int, seed: int, n_train: int) -> list[dict]:
    """The validation split of the candidate's data entry (seed, n_train, n_val = n_test = n, its levels)."""
    from bandpo.data.tiny_math import generate_tiny_math

    fmt = "tiny" if c.prompt_format == "zero-shot" else c.prompt_format
    rows = generate_tiny_math(seed=seed, n_train=n_train, n_val=n, n_test=n, levels=c.levels, prompt_format=fmt)
    rows = rows["validation"]
    if c.prompt_format == "zero-shot":
        rows = [{**r, "prompt": ZERO_SHOT.format(problem=r["problem"])} for r in rows]
    return rows


def measure(model, tokenizer, c: Candidate, rows: list[dict], k: int, seed: int, batch: int = 16) -> dict:
    import torch

    from bandpo.grader import configure, extract_answer, grade_many
    from bandpo.runtime.sampling import sample_rows
    from bandpo.train.loop import chat_prompts

    configure(mode=c.grader_mode)
    tokenizer.padding_side = "left"
    torch.manual_seed(seed)
    scores, found, lengths, cut, prompt_tokens = [], [], [], [], []
    t0 = time.perf_counter()
    for start in range(0, len(rows), batch):
        part = rows[start : start + batch]
        prompts = chat_prompts(tokenizer, [r["prompt"] for r in part], [r.get("shots") for r in part])
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        prompt_tokens += enc["attention_mask"].sum(1).tolist()
        tokens, resp, _ = sample_rows(model, enc["input_ids"], enc["attention_mask"], k, c.max_new_tokens,
                                      c.temperature, tokenizer.eos_token_id, kernel="c")  # fmt: skip
        texts = tokenizer.batch_decode(torch.where(resp, tokens, tokenizer.pad_token_id), skip_special_tokens=True)
        scores += grade_many(texts, [str(r["answer"]) for r in part for _ in range(k)])
        found += [extract_answer(t) is not None for t in texts]
        n_tok = resp.sum(1)
        lengths += n_tok.tolist()
        ends = (tokens == tokenizer.eos_token_id) & resp
        cut += (~ends.any(1)).tolist()
    per_problem = [statistics.fmean(scores[i * k : (i + 1) * k]) for i in range(len(rows))]
    mean = statistics.fmean(per_problem)
    half = 1.96 * statistics.stdev(per_problem) / math.sqrt(len(per_problem)) if len(per_problem) > 1 else float("nan")
    correct = int(round(sum(scores)))
    return {
        "candidate": asdict(c),
        "n": len(rows),
        "k": k,
        "mean": mean,
        "ci95_problems": [max(0.0, mean - half), min(1.0, mean + half)],
        "ci95_wilson_samples": list(wilson(correct, len(scores))),
        "pass_at_k": statistics.fmean(p > 0 for p in per_problem),
        "answer_found": statistics.fmean(found),
        "mean_length": statistics.fmean(lengths),
        "truncated": statistics.fmean(cut),
        "prompt_tokens_mean": statistics.fmean(prompt_tokens),
        "seconds": time.perf_counter() - t0,
        "per_problem": per_problem,
    }


def main(argv: list[str] | None = None) -> int:
    names = [c.name for c in CANDIDATES]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resources/models/smollm2-135m")
    ap.add_argument("--n", type=int, default=100, help="validation problems (and the test split's size)")
    ap.add_argument("--n-train", type=int, default=2000, help="the data entry's n_train (the splits' draw order)")
    ap.add_argument("--k", type=int, default=8, help="samples per problem")
    ap.add_argument("--seed", type=int, default=0, help="the data seed and the sampler's torch seed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--candidates", nargs="+", choices=names, default=names)
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args(argv)
    if args.n < 2 or args.k < 1:
        ap.error("--n must be >= 2 and --k >= 1")
    model_dir = Path(args.model)
    model_dir = model_dir if model_dir.is_absolute() else ROOT / model_dir
    if not (model_dir / "config.json").is_file():
        ap.error(f"--model: {model_dir} is not a model folder (build it: snakemake ... resources/models/smollm2-135m/"
                 "config.json --configfile config/real-lm.yaml)")  # fmt: skip

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bandpo.grader import start_workers
    from bandpo.runtime.fastlm import FastLlama

    start_workers()
    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    if FastLlama.for_model(model) is None:
        raise SystemExit(f"{model_dir}: not a model the suite's fast path covers")
    results = []
    print(f"model {model_dir}; validation split of tiny-math seed {args.seed} (n_val = n_test = {args.n}), "
          f"k = {args.k}", flush=True)  # fmt: skip
    header = (f"{'candidate':<22} {'levels':<7} {'T':>4} {'grader':<19} {'n':>4} {'mean@k':>7} {'95% (problems)':>15} "
              f"{'Wilson (samples)':>16} {'pass@k':>7} {'found':>6} {'len':>5} {'cut':>5}")  # fmt: skip
    print(header, flush=True)
    for c in CANDIDATES:
        if c.name not in args.candidates:
            continue
        rows = validation_rows(c, args.n, args.seed, args.n_train)
        r = measure(model, tokenizer, c, rows, args.k, args.seed)
        results.append(r)
        lo, hi = r["ci95_problems"]
        wlo, whi = r["ci95_wilson_samples"]
        print(f"{c.name:<22} {','.join(map(str, c.levels)):<7} {c.temperature:>4} {c.grader_mode:<19} {r['n']:>4} "
              f"{r['mean']:>7.3f} [{lo:.3f}, {hi:.3f}] {'':>1}[{wlo:.3f}, {whi:.3f}] {r['pass_at_k']:>7.3f} "
              f"{r['answer_found']:>6.2f} {r['mean_length']:>5.1f} {r['truncated']:>5.2f}", flush=True)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
