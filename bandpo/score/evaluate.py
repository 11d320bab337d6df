"""Scoring checkpoints with lm-eval: k-sample metrics, the task hooks, and a driver that scores many checkpoints
in one process.

Metrics (per problem, from its n = ``repeats`` samples; lm-eval averages them over problems)
---------------------------------------------------------------------------------------------
``mean@n``             fraction of the n samples graded correct (the paper's mean@32)
``pass@k``             the unbiased estimator 1 - C(n-c, k) / C(n, k) (Chen et al. 2021), for k = 2, 4, ..., n
``maj@n``              the most frequent extracted answer (string-normalised; ties: first seen) is graded
``best@n_bootstrap``   the paper's "pass@32": n draws with replacement from the n samples, max score, averaged
                       over ``BOOTSTRAP_RESAMPLES`` resamples, seeded from the problem id (reproducible from the
                       samples file alone). Labelled as the bootstrap variant; ``pass@n`` is the primary number.

Every sample is graded by `bandpo.grader` (the suite's one grader, also the training reward) in the mode of
``BANDPO_GRADER_MODE`` (the workflow's ``grader.mode``): ``lenient``, the last ``\\boxed{...}`` (a truncated
``\\boxed{42`` too) or ``Answer:`` line, ``strict-answer-line``, the last ``Answer:`` line only (both compared by
math-verify equivalence), ``math-dapo-paper``, the paper's rule (the last ``Answer:`` line of the last 300
characters, Minerva-normalised, string-equal to the reference), ``math-dapo`` (verl 0.9.1's ``math_dapo``: the same
with a ``\\boxed{}`` fallback) or ``math-boxed`` (verl's ``\\boxed{}`` MATH rule); each summary records the grader
(``grader``: name, mode, version, id).

lm-eval hooks (used by the task YAMLs in ``bandpo/score/lm_eval_tasks``): `keep_all_samples` is a custom filter
that keeps all ``repeats`` samples of a problem (lm-eval's default ``take_first`` keeps one), and
`process_results` turns them into the metrics above. Numbers downstream are read from lm-eval's own results and
samples files.

Driver: `evaluate_runs` scores several checkpoints (the seeds of one method entry, say) in one Python process,
so the start-up of lm-eval (imports, task index, about 14 s on the 2-core testbed) is paid once per group and not
once per checkpoint. Per checkpoint it writes, atomically, into its output folder::

    lm_eval_results.json      lm-eval's aggregated results file (EvaluationTracker), all tasks of the run
    {task}.samples.jsonl      lm-eval's samples file of each task (every sample, its score, the per-problem metrics)
    {task}.json               the suite's summary: metrics and stderr read from lm_eval_results.json, the run's
                              identity (model, entry, seed from ``--meta``; method, params, trainer from the run's
                              run.json, `run_method`), lm-eval config and versions, grader

CLI (one group)::

    python -m bandpo.score --include-path bandpo/score/lm_eval_tasks \\
        --task tiny_math=resources/data/tiny-math/test.jsonl --backend hf --model-args '{"dtype": "float32"}' \\
        --batch-size 1024 --threads 1 --run MODEL_DIR OUT_DIR SEED [--run ...] [--meta '{"entry": ...}' ...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bandpo.core.files import atomic_move, atomic_write_text
from bandpo.core.provenance import machine, versions
from bandpo.grader import Counts, extract_answer, grade_many, grader_info
from bandpo.score.lm_eval_results import FILTER_NAME, lm_eval_task_scores
from bandpo.score.spec import BACKENDS, EvalJob, EvalRun, read_spec

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "FILTER_NAME",
    "EvalRun",
    "best_at_k_bootstrap",
    "evaluate_runs",
    "keep_all_samples",
    "majority_answer",
    "mean_at_k",
    "metric_names",
    "pass_at_k",
    "pass_ks",
    "process_results",
    "score_responses",
    "summarize_task",
]

BOOTSTRAP_RESAMPLES = 1000  # the paper's
SUMMARY_SCHEMA = "bandpo-bench/eval-summary/v1"


# --------------------------------------------------------------------------------------------------------------
# k-sample metrics
# --------------------------------------------------------------------------------------------------------------
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k) (exact integer arithmetic)."""
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError("n, c and k must be integers")
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need n >= 1, 0 <= c <= n, 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_at_k(scores: Sequence[float]) -> float:
    if not scores:
        raise ValueError("no samples")
    return float(sum(scores)) / len(scores)


def pass_ks(n: int) -> list[int]:
    """The k of the pass@k metrics for n samples: powers of two from 2 up to n, and n itself (n = 1: [1])."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if n == 1:
        return [1]
    ks = {n}
    k = 2
    while k < n:
        ks.add(k)
        k *= 2
    return sorted(ks)


def metric_names(n: int) -> list[str]:
    """Names of the metrics `process_results` returns for n samples per problem (the task YAML lists the same)."""
    return [f"mean@{n}", *(f"pass@{k}" for k in pass_ks(n)), f"maj@{n}", f"best@{n}_bootstrap"]


def bootstrap_seed(key: str, base_seed: int = 0) -> int:
    return (zlib.crc32(str(key).encode("utf-8")) ^ (base_seed * 0x9E3779B1)) & 0xFFFFFFFF


def best_at_k_bootstrap(
    scores: Sequence[float], k: int | None = None, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> float:
    """The paper's bootstrap "pass@k": mean over ``resamples`` of max(k draws with replacement from ``scores``)."""
    x = np.asarray(scores, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no samples")
    k = x.size if k is None else k
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, k))
    return float(x[idx].max(axis=1).mean())


_SPACES = re.compile(r"\s+")


def _vote_key(answer: str) -> str:
    s = _SPACES.sub("", answer)
    s = s.strip("$").rstrip(".")
    return s


def majority_answer(responses: Sequence[str]) -> tuple[int | None, str | None]:
    """(index of a response carrying the majority answer, that answer); (None, None) if no response has one.

    Answers are extracted by `bandpo.grader.extract_answer` and compared after removing whitespace, ``$`` and a
    trailing period; ties go to the answer seen first.
    """
    keys: list[str | None] = []
    for r in responses:
        a = extract_answer(r)
        keys.append(_vote_key(a) if a is not None and _vote_key(a) else None)
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return None, None
    best = max(counts.values())
    for i, k in enumerate(keys):  # first seen among the most frequent
        if k is not None and counts[k] == best:
            return i, k
    raise AssertionError("unreachable")


def score_responses(
    responses: Sequence[str], reference: Any, key: str = "", resamples: int = BOOTSTRAP_RESAMPLES
) -> dict[str, float]:
    """All metrics of one problem from its n sampled responses (see the module docstring)."""
    responses = [r if isinstance(r, str) else str(r) for r in responses]
    n = len(responses)
    if n == 0:
        raise ValueError("no responses")
    scores = [float(s) for s in grade_many(responses, [reference] * n)]
    c = int(sum(1 for s in scores if s > 0))
    out: dict[str, float] = {f"mean@{n}": mean_at_k(scores)}
    for k in pass_ks(n):
        out[f"pass@{k}"] = pass_at_k(n, c, k)
    idx, _ = majority_answer(responses)
    out[f"maj@{n}"] = 0.0 if idx is None else scores[idx]
    out[f"best@{n}_bootstrap"] = best_at_k_bootstrap(scores, n, resamples, bootstrap_seed(key))
    return out


# --------------------------------------------------------------------------------------------------------------
# lm-eval hooks
# --------------------------------------------------------------------------------------------------------------
def keep_all_samples(resps, docs):
    """lm-eval custom filter: keep every sample of every problem (``repeats`` of them) as a list."""
    return [list(r) for r in resps]


def _subset_docs(dataset, subset: str):
    """The rows of one subset of a probe data set (bandpo.train.probe: ``subset`` is ``probe`` or ``rest``)."""
    if "subset" not in dataset.column_names:
        raise ValueError(f"task of the {subset!r} subset: the data has no 'subset' column (not a probe data set)")
    out = dataset.filter(lambda row: row["subset"] == subset)
    if len(out) == 0:
        raise ValueError(f"task of the {subset!r} subset: no row of that subset in the data")
    return out


def probe_docs(dataset):
    """lm-eval ``process_docs`` of task tiny_math_probe: the probe subset only."""
    return _subset_docs(dataset, "probe")


def rest_docs(dataset):
    """lm-eval ``process_docs`` of task tiny_math_rest: the rest of the task (every row outside the probe subset)."""
    return _subset_docs(dataset, "rest")


def process_results(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, float]:
    """lm-eval ``process_results``: ``results`` holds one entry, the list of the problem's n filtered samples."""
    if len(results) != 1 or not isinstance(results[0], list | tuple):
        raise ValueError(
            "bandpo.score.evaluate.process_results expects all samples of a problem as one list: add the "
            "'keep_all_samples' "
            f"filter (filter_list name {FILTER_NAME!r}) to the task YAML"
        )
    key = str(doc.get("id", doc.get("problem", "")))
    return score_responses(list(results[0]), doc["answer"], key=key)


# --------------------------------------------------------------------------------------------------------------
# reading lm-eval's files
# --------------------------------------------------------------------------------------------------------------
def summarize_task(results: Mapping[str, Any], task: str, filter_name: str = FILTER_NAME) -> dict[str, Any]:
    """Metrics, stderr, k and problem count of one task, read from lm-eval's aggregated results dict (with the
    reader the report uses, `bandpo.score.lm_eval_results.lm_eval_task_scores`)."""
    if task not in results.get("results", {}):
        raise KeyError(f"task {task!r} is not in lm-eval's results (tasks: {sorted(results.get('results', {}))})")
    metrics, stderr = lm_eval_task_scores(results, task, filter_name)
    if not metrics:
        raise KeyError(
            f"no metrics with filter {filter_name!r} for task {task!r}: keys {sorted(results['results'][task])}"
        )
    cfg = results.get("configs", {}).get(task, {})
    n_samples = results.get("n-samples", {}).get(task, {})
    return {
        "metrics": metrics,
        "stderr": stderr,
        "k": cfg.get("repeats"),
        "n_problems": n_samples.get("effective"),
        "generation_kwargs": cfg.get("generation_kwargs"),
    }


# --------------------------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------------------------
def run_method(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The method of a scored run, from the one record of it: the run's ``run.json`` in ``meta["run_dir"]``
    (``method``, else ``config.method``; ``method_params``, its full parameters; ``trainer``, absent = the local
    trainer). The untrained base model has no run folder and no method: ``{"method": None, "params": None}``."""
    if not meta.get("run_dir"):
        return {"method": None, "params": None}
    path = Path(meta["run_dir"]) / "run.json"
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"scored run {meta['run_dir']}: cannot read its run.json ({err})") from None
    return {
        "method": info.get("method") or (info.get("config") or {}).get("method"),
        "params": info.get("method_params"),
        "trainer": info.get("trainer", "local"),
    }


def task_config(task_manager, task: str, data_file: str | None) -> dict[str, Any]:
    """The task's YAML (loaded by lm-eval's own loader, ``!function`` resolved) with its data file set."""
    from lm_eval.tasks._yaml_loader import load_yaml  # lazy: lm-eval loads with the job's start-up (evaluate_runs)

    entry = task_manager.task_index.get(task)
    if entry is None or entry.yaml_path is None:
        raise KeyError(f"lm-eval task {task!r} not found under the include path {task_manager.include_path}")
    cfg = dict(load_yaml(entry.yaml_path, resolve_func=True))
    if data_file is not None:
        if not Path(data_file).is_file():
            raise FileNotFoundError(f"data file of task {task!r} not found: {data_file}")
        kwargs = dict(cfg.get("dataset_kwargs") or {})
        split = cfg.get("test_split", "test")
        kwargs["data_files"] = {split: str(Path(data_file).resolve())}
        cfg["dataset_kwargs"] = kwargs
    meta = dict(cfg.get("metadata") or {})
    meta["task_yaml"] = str(entry.yaml_path)
    cfg["metadata"] = meta
    return cfg


def evaluate_runs(
    runs: Sequence[EvalRun],
    tasks: Mapping[str, str | None],
    include_path: str | os.PathLike,
    backend: str = "hf",
    model_args: Mapping[str, Any] | None = None,
    batch_size: int | str = 1024,
    threads: int | None = 1,
    apply_chat_template: bool = False,
    bootstrap_iters: int = 1000,
    limit: int | None = None,
    log=print,
) -> list[dict[str, Any]]:
    """Score every run on every task in this process; write each run's files atomically. Returns the summaries.

    ``tasks`` maps lm-eval task names (YAMLs under ``include_path``) to their data file (None: the YAML's own).
    ``model_args`` go to lm-eval's model (``pretrained`` is set per run; for vllm ``seed`` too).
    """
    t_start = time.time()
    # lm-eval and torch are imported after t_start: their seconds of import are the start-up each summary records
    # (seconds.process_startup), and the job's grader worker loads math-verify meanwhile (bandpo/score/__main__.py)
    if threads:
        import torch  # lazy: the job's start-up (above)

        torch.set_num_threads(threads)
    import lm_eval  # lazy: the job's start-up (above)
    from lm_eval.loggers import EvaluationTracker  # lazy: the job's start-up (above)
    from lm_eval.tasks import TaskManager  # lazy: the job's start-up (above)

    if backend == "bandpo-tiny":
        import bandpo.score.tiny_lm  # noqa: F401  (lazy: registers its model with lm-eval, for this backend only)

    tm = TaskManager(include_path=str(include_path), include_defaults=False)
    configs = {name: task_config(tm, name, data) for name, data in tasks.items()}
    startup_s = time.time() - t_start
    log(f"[bandpo.score.evaluate] lm-eval {lm_eval.__version__ if hasattr(lm_eval, '__version__') else ''} ready in "
        f"{startup_s:.1f} s; {len(runs)} run(s) x {len(configs)} task(s)")  # fmt: skip
    summaries: list[dict[str, Any]] = []
    for run in runs:
        t0 = time.time()
        identity = {**run.meta, **run_method(run.meta)}
        out_dir = Path(run.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        args = _model_args(run, model_args, backend)
        with tempfile.TemporaryDirectory(prefix=".lm_eval-", dir=out_dir) as tmp:
            tracker = EvaluationTracker(output_path=tmp)
            graded = Counts()  # the grading done by process_results, all tasks of this run
            results = lm_eval.simple_evaluate(
                model=_lm_eval_model(backend, args, batch_size),
                model_args=args,
                tasks=[dict(c) for c in configs.values()],
                task_manager=tm,
                batch_size=batch_size,
                limit=limit,
                log_samples=True,
                evaluation_tracker=tracker,
                apply_chat_template=apply_chat_template,
                bootstrap_iters=bootstrap_iters,
                random_seed=run.seed,
                numpy_random_seed=run.seed,
                torch_random_seed=run.seed,
                fewshot_random_seed=run.seed,
            )
            graded.stop()
            if results is None:  # not rank 0
                continue
            samples = results.pop("samples")
            tracker.save_results_aggregated(results=results, samples=samples)
            for name in configs:
                tracker.save_results_samples(task_name=name, samples=samples[name])
            results_path = out_dir / "lm_eval_results.json"
            eval_seconds = time.time() - t0
            saved = _keep_lm_eval_files(Path(tmp), configs, out_dir, results_path)
        summaries += _write_summaries(
            run, identity, configs, saved, graded, results_path, backend, eval_seconds, startup_s, log
        )
    log(f"[bandpo.score.evaluate] done in {time.time() - t_start:.1f} s (start-up {startup_s:.1f} s)")
    return summaries


def _write_summaries(
    run: EvalRun,
    identity: Mapping[str, Any],
    configs: Mapping[str, Mapping[str, Any]],
    saved: Mapping[str, Any],
    graded: Any,
    results_path: Path,
    backend: str,
    eval_seconds: float,
    startup_s: float,
    log,
) -> list[dict[str, Any]]:
    """Write one run's summary per task (``{task}.json``: the run, its scores read from lm-eval's results, the
    grading it took, lm-eval's files and settings, and the process); returns them."""
    out_dir = Path(run.out_dir)
    summaries = []
    for name in configs:
        summary = {
            "schema": SUMMARY_SCHEMA,
            **identity,
            "seed": run.seed,
            "task": name,
            **summarize_task(saved, name),
            "grader": {**grader_info(), "counts": graded.counts, **graded.metrics()},
            "lm_eval": _lm_eval_fields(saved, name, configs[name], results_path, backend),
            **_provenance(eval_seconds, startup_s),
        }
        atomic_write_text(out_dir / f"{name}.json", json.dumps(summary, indent=2, default=str) + "\n")
        summaries.append(summary)
        m = summary["metrics"]
        log(f"[bandpo.score.evaluate] {run.out_dir} {name}: " + ", ".join(f"{k}={v:.4f}" for k, v in m.items())
            + f" ({eval_seconds:.1f} s)")  # fmt: skip
    return summaries


def _model_args(run: EvalRun, model_args: Mapping[str, Any] | None, backend: str) -> dict[str, Any]:
    """lm-eval's model arguments for one run: the config's, with the run's checkpoint (and for vllm its seed)."""
    args = dict(model_args or {})
    args["pretrained"] = str(run.model_dir)
    if backend == "vllm":
        args.setdefault("seed", run.seed)
    return args


def _lm_eval_model(backend: str, args: Mapping[str, Any], batch_size: int | str) -> Any:
    """The ``model`` lm-eval scores: for hf, lm-eval's HF model sampling with the suite's sampler where it applies
    (`suite_sampler_hflm`); else the backend's name (vllm, or bandpo-tiny: the suite's own class, from lm-eval's
    model registry)."""
    if backend == "hf":
        return suite_sampler_hflm().create_from_arg_obj(args, {"batch_size": batch_size})
    return backend


def _provenance(eval_seconds: float, startup_s: float) -> dict[str, Any]:
    """What a summary records of the scoring process: package versions, the machine, and its seconds."""
    return {
        "versions": versions("lm_eval", "torch", "transformers", "datasets", "vllm", "bandpo"),
        "machine": machine(),
        "seconds": {"eval": round(eval_seconds, 2), "process_startup": round(startup_s, 2)},
    }


def _keep_lm_eval_files(tmp: Path, configs: Mapping[str, Any], out_dir: Path, results_path: Path) -> dict[str, Any]:
    """Move the one results file and each task's one samples file lm-eval wrote under ``tmp`` to the run's folder
    (``results_path``, ``{task}.samples.jsonl``); returns the results as lm-eval wrote them (the numbers come from
    its file). `RuntimeError` when a file is missing or repeated."""
    written = {p.name: p for p in tmp.rglob("*.json*")}
    res_files = [p for n, p in written.items() if n.startswith("results_") and n.endswith(".json")]
    if len(res_files) != 1:
        raise RuntimeError(f"expected one lm-eval results file, found {sorted(written)}")
    sample_files = {}
    for name in configs:
        found = [p for n, p in written.items() if n.startswith(f"samples_{name}_") and n.endswith(".jsonl")]
        if len(found) != 1:
            raise RuntimeError(f"expected one lm-eval samples file for {name}, found {sorted(written)}")
        sample_files[name] = found[0]
    with open(res_files[0], encoding="utf-8") as f:
        saved = json.load(f)
    for name, src in sample_files.items():
        atomic_move(src, out_dir / f"{name}.samples.jsonl")
    atomic_move(res_files[0], results_path)
    return saved


def _lm_eval_fields(
    saved: Mapping[str, Any], name: str, config: Mapping[str, Any], results_path: Path, backend: str
) -> dict[str, Any]:
    """The ``lm_eval`` block of a task's summary: lm-eval's version, files, model and seeds, the task's hash and
    YAML, and the filter whose answers are scored."""
    return {
        "version": saved.get("lm_eval_version") or versions("lm_eval")["lm_eval"],
        "results_file": results_path.name,
        "samples_file": f"{name}.samples.jsonl",
        "model": backend,
        "model_args": saved.get("config", {}).get("model_args"),
        "random_seed": saved.get("config", {}).get("random_seed"),
        "task_hash": saved.get("task_hashes", {}).get(name),
        "filter": FILTER_NAME,
        "task_yaml": config.get("metadata", {}).get("task_yaml"),
    }


_SUITE_HFLM = None


def suite_sampler_hflm():
    """lm-eval's ``HFLM`` (the ``hf`` backend) with one change: where a request is plain sampling (``do_sample``,
    temperature > 0, no top-k / top-p, stopping at EOS only) from a model `bandpo.runtime.fastlm.FastLlama` covers (the
    tiny Llamas), its completions are drawn by the suite's sampler (`bandpo.runtime.sampling.sample_rows`, the
    trainer's),
    not by HF ``generate``: the same distribution (softmax(logits / T), EOS ends a completion, at most
    ``max_gen_toks`` tokens), several times faster; other requests and models go to ``generate`` as before. Draws
    come from torch's generator, which lm-eval seeds per run (``torch_random_seed``): reproducible, but other
    draws than ``generate``'s."""
    global _SUITE_HFLM
    if _SUITE_HFLM is not None:
        return _SUITE_HFLM
    # lazy, for the hf backend only: lm-eval's HF model (transformers), the fast model and the tiny LM (torch)
    from lm_eval.models.huggingface import HFLM

    from bandpo.runtime.fastlm import FastLlama  # lazy: the hf backend only (above)
    from bandpo.score.tiny_lm import plain_sampling, sample_completions  # lazy: the hf backend only (above)

    class SuiteSamplerHFLM(HFLM):
        def _model_generate(self, context, max_length, stop, **generation_kwargs):
            kw = generation_kwargs
            mask = kw.get("attention_mask")
            eos = self.eot_token_id
            eos_text = self.tok_decode(eos, skip_special_tokens=False)
            plain = (
                mask is not None
                and plain_sampling({k: v for k, v in kw.items() if k != "attention_mask"}, stop, eos_text)
                and getattr(self, "backend", "causal") == "causal"
                and FastLlama.for_model(self.model) is not None
            )
            if not plain:
                return super()._model_generate(context, max_length, stop, **generation_kwargs)
            pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
            return sample_completions(self.model, context, mask, max_length - context.shape[1],
                                      float(kw["temperature"]), eos, pad)  # fmt: skip

    _SUITE_HFLM = SuiteSamplerHFLM
    return _SUITE_HFLM


# --------------------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------------------
def _task_arg(text: str) -> tuple[str, str | None]:
    name, sep, path = text.partition("=")
    return name, (path if sep else None)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bandpo.score", description=__doc__.split("\n")[0])
    ap.add_argument("--spec", default=None, help="the job's spec file (JSON: bandpo.score.spec.EvalJob), as the "
                    "workflow's run plan writes it; no other option beside it")  # fmt: skip
    ap.add_argument("--include-path", help="folder of lm-eval task YAMLs (bandpo/score/lm_eval_tasks)")
    ap.add_argument("--task", action="append", type=_task_arg, help="NAME[=DATA_FILE], repeatable")
    ap.add_argument("--run", action="append", nargs=3, metavar=("MODEL_DIR", "OUT_DIR", "SEED"))
    ap.add_argument("--meta", action="append", default=[], help="JSON object per --run: its place in the sweep "
                    "(model, entry, ...; run_dir of a trained run, whose run.json names the method)")  # fmt: skip
    ap.add_argument("--backend", default="hf", choices=BACKENDS,
                    help="lm-eval model: hf, vllm, or the suite's tiny Llamas' (bandpo.score.tiny_lm)")  # fmt: skip
    ap.add_argument("--model-args", default="{}", help="JSON object of lm-eval model_args")
    ap.add_argument("--batch-size", default="1024")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--apply-chat-template", action="store_true")
    ap.add_argument("--bootstrap-iters", type=int, default=1000, help="lm-eval's stderr bootstrap (non-mean metrics)")
    ap.add_argument("--limit", type=int, default=None, help="problems per task (testing only)")
    args = ap.parse_args(argv)
    try:
        job = read_spec(args.spec) if args.spec else _job_from_flags(args)
    except ValueError as e:
        ap.error(str(e))
    evaluate_runs(job.runs, job.tasks, job.include_path, backend=job.backend, model_args=job.model_args,
                  batch_size=job.batch_size, threads=job.threads, apply_chat_template=job.apply_chat_template,
                  bootstrap_iters=job.bootstrap_iters, limit=job.limit,
                  log=lambda s: print(s, file=sys.stderr, flush=True))  # fmt: skip
    return 0


def _job_from_flags(args: argparse.Namespace) -> EvalJob:
    """The job the flags describe (``--include-path``, ``--task``, ``--run`` required); ValueError naming the flag."""
    given = {"--include-path": args.include_path, "--task": args.task, "--run": args.run}
    missing = [flag for flag, value in given.items() if not value]
    if missing:
        raise ValueError(f"give --spec, or {', '.join(missing)}")
    if args.meta and len(args.meta) != len(args.run):
        raise ValueError("give one --meta per --run, or none")
    metas = [json.loads(m) for m in args.meta] or [{} for _ in args.run]
    batch: int | str = int(args.batch_size) if args.batch_size.isdigit() else args.batch_size
    job = EvalJob(runs=[EvalRun(m, o, int(s), meta) for (m, o, s), meta in zip(args.run, metas, strict=True)],
                  tasks=dict(args.task), include_path=args.include_path, backend=args.backend,
                  model_args=json.loads(args.model_args), batch_size=batch, threads=args.threads,
                  apply_chat_template=args.apply_chat_template, bootstrap_iters=args.bootstrap_iters,
                  limit=args.limit)  # fmt: skip
    job.validate()
    return job
