"""Reading the run outputs: training runs (``runs/``), evaluation summaries and lm-eval's results files (``eval/``),
and the two tables other stages write for the report (the bounds table, the equivalence atlas).

Layout of one profile's results folder (``results/{profile}``)::

    runs/{model}/{entry}/seed{seed}/metrics.jsonl     one JSON object per step (bandpo.train.loop, or any trainer that
    runs/{model}/{entry}/seed{seed}/run.json          writes the same layout; run.json is optional)
    eval/{model}/{entry}/seed{seed}/{task}.json       the evaluation summary (bandpo.score.evaluate) naming lm-eval's
    eval/{model}/{entry}/seed{seed}/lm_eval_results.json   own results file, from which every score is read

lm-eval's aggregated results are read by `bandpo.score.lm_eval_results.lm_eval_task_scores` (bandpo.score.evaluate uses
it too).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bandpo.core.atlas_table import COLUMNS as ATLAS_COLUMNS
from bandpo.core.files import read_jsonl
from bandpo.core.run_contract import check_outputs, read_run
from bandpo.score.lm_eval_results import FILTER_NAME, lm_eval_task_scores
from bandpo.study import BASE_ENTRY, MAIN, split_slot

EVAL_SCHEMA_PREFIX = "bandpo-bench/eval-summary/"
_METRIC = re.compile(r"^(?P<family>[A-Za-z_]+)@(?P<k>\d+|n)(?P<suffix>_[A-Za-z]+)?$")
_SEED_DIR = re.compile(r"^seed(\d+)$")

SCORE_COLUMNS = ["profile", "experiment", "subset", "model", "entry", "method", "params", "seed", "task", "k",
                 "metric", "value", "name", "n", "stderr", "source", "grader"]  # fmt: skip
SUMMARY_COLUMNS = ["profile", "experiment", "model", "entry", "seed", "method", "params", "label", "steps",
                   "train_seconds", "finished"]  # fmt: skip


def canonical_params(params: Any) -> str:
    """Parameters as canonical JSON (sorted keys); "" for none (the base model)."""
    if params is None:
        return ""
    if isinstance(params, str):
        return params
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)


def params_label(params: str | Mapping[str, Any] | None) -> str:
    """Readable parameters when a run names no ``method_label``: ``k=v, ...`` in key order (JSON text is parsed
    first); "" for none."""
    if params in (None, ""):
        return ""
    if isinstance(params, str):
        try:
            params = json.loads(params)
        except json.JSONDecodeError:
            return params
    if not isinstance(params, Mapping):
        return str(params)
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items()))


def parse_metric(name: str) -> tuple[str, float]:
    """lm-eval's metric name -> (family, k): "pass@4" -> ("pass", 4.0), "best@8_bootstrap" -> ("best_bootstrap",
    8.0), "mean@n" -> ("mean", NaN); a name of another form -> (name, NaN)."""
    m = _METRIC.match(name)
    if not m:
        return name, float("nan")
    return m["family"] + (m["suffix"] or ""), float(int(m["k"])) if m["k"].isdigit() else float("nan")


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _seed_dirs(root: Path) -> Iterator[tuple[str, str, int, Path]]:
    """(model, entry, seed, folder) for every ``{model}/{entry}/seed{seed}`` folder under ``root``, sorted."""
    if not root.is_dir():
        return
    for model_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for entry_dir in sorted(p for p in model_dir.iterdir() if p.is_dir()):
            for seed_dir in sorted(p for p in entry_dir.iterdir() if p.is_dir()):
                m = _SEED_DIR.match(seed_dir.name)
                if m:
                    yield model_dir.name, entry_dir.name, int(m[1]), seed_dir


# ----------------------------------------------------------------------------------------------------------------
# Training runs


@dataclass
class Run:
    """One training run's outputs: its place (model, entry, seed, folder), the rows of ``metrics.jsonl`` and
    ``run.json`` ({} when absent: another trainer's run, or one still training)."""

    model: str
    entry: str
    seed: int
    folder: Path
    metrics: list[dict] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    finished: bool = False
    experiment: str = MAIN

    def summary(self, profile: str) -> dict[str, Any]:
        """A row of `load_run_summaries`. ``train_seconds`` is run.json's ``train_seconds_total`` (sum of step
        times over resumes), else the sum of the metrics' ``step_seconds``, else NaN (a trainer that logs
        neither); ``label`` is run.json's ``method_label``, else `params_label` of its parameters."""
        cfg = self.info.get("config") or {}
        params = self.info.get("method_params", cfg.get("params"))
        seconds = self.info.get("train_seconds_total")
        steps = self.info.get("steps", cfg.get("steps"))
        if seconds is None and self.metrics:
            times = [m["step_seconds"] for m in self.metrics if isinstance(m.get("step_seconds"), (int, float))]
            seconds = float(sum(times)) if times else None
            steps = steps if steps is not None else len(self.metrics)
        label = self.info.get("method_label")
        return {
            "profile": profile,
            "experiment": self.experiment,
            "model": self.model,
            "entry": self.entry,
            "seed": self.seed,
            "method": cfg.get("method"),
            "params": canonical_params(params) if params is not None else None,
            "label": label if isinstance(label, str) else params_label(params),
            "steps": steps,
            "train_seconds": float(seconds) if seconds is not None else float("nan"),
            "finished": self.finished,
        }


def load_run(folder: str | os.PathLike, model: str, entry: str, seed: int, experiment: str = MAIN) -> Run | None:
    """The outputs of one run folder (``metrics.jsonl``, ``run.json``); None when it holds neither (a run still
    training writes ``metrics.jsonl.partial``, which is not read). A finished run (``run.json`` present) must follow
    the run contract (`bandpo.core.run_contract`, each file read once): else `RunContractError` naming the run and the
    key."""
    folder = Path(folder)
    metrics_path, info_path = folder / "metrics.jsonl", folder / "run.json"
    if not metrics_path.is_file() and not info_path.is_file():
        return None
    if info_path.is_file():
        metrics, info = read_run(folder)
        check_outputs(folder, metrics, info)
    else:
        metrics, info = read_jsonl(metrics_path), {}
    return Run(model, entry, seed, folder, metrics, info, info_path.is_file(), experiment)


def load_runs(results_dir: str | os.PathLike) -> list[Run]:
    """Every run under ``results_dir/runs``, sorted by (model, folder, seed); a folder ``{entry}@{experiment}``
    is that experiment's run of the entry (`split_slot`)."""
    root = Path(results_dir) / "runs"
    return [r for m, e, s, folder in _seed_dirs(root) if (r := load_run(folder, m, *_entry_seed(e, s))) is not None]


def _entry_seed(folder_name: str, seed: int) -> tuple[str, int, str]:
    entry, experiment = split_slot(folder_name)
    return entry, seed, experiment


def run_metrics(runs: list[Run], profile: str) -> pd.DataFrame:
    """The runs' ``metrics.jsonl`` rows as one frame: profile, experiment, model, entry, seed, then one column per
    logged key (step, entropy, reward_mean, clipfrac_upper/p0.0-0.2, probe/p_correct, ...). Runs with no metrics
    rows are left out."""
    frames = []
    for run in runs:
        if not run.metrics:
            continue
        df = pd.DataFrame(run.metrics)
        if "step" not in df:
            df["step"] = np.arange(1, len(df) + 1)
        df.insert(0, "seed", run.seed)
        df.insert(0, "entry", run.entry)
        df.insert(0, "model", run.model)
        df.insert(0, "experiment", run.experiment)
        df.insert(0, "profile", profile)
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=["profile", "experiment", "model", "entry", "seed", "step"])
    return pd.concat(frames, ignore_index=True, sort=False)


def run_summaries(runs: list[Run], profile: str) -> pd.DataFrame:
    """One row per run (`Run.summary`)."""
    return pd.DataFrame([r.summary(profile) for r in runs], columns=SUMMARY_COLUMNS)


def load_run_metrics(results_dir: str | os.PathLike) -> pd.DataFrame:
    """`run_metrics` of every finished run under ``results_dir``."""
    return run_metrics(load_runs(results_dir), Path(results_dir).name)


def load_run_summaries(results_dir: str | os.PathLike) -> pd.DataFrame:
    """`run_summaries` of every run under ``results_dir``."""
    return run_summaries(load_runs(results_dir), Path(results_dir).name)


# ----------------------------------------------------------------------------------------------------------------
# Evaluation scores


def grader_label(summary: Mapping[str, Any]) -> str:
    """The grader that produced a summary's scores, ``name/mode@version`` (`bandpo.grader.grader_id`); "" when the
    summary does not say."""
    g = summary.get("grader")
    if not isinstance(g, Mapping):
        return ""
    if isinstance(g.get("id"), str):
        return g["id"]
    if g.get("name") and g.get("version"):
        return f"{g['name']}/{g.get('mode') or 'lenient'}@{g['version']}"  # a summary that names no mode: lenient
    return ""


def summary_values(
    path: str | os.PathLike, lm_cache: dict[Path, Any] | None = None
) -> tuple[dict, str, dict[str, float], dict[str, Any], str] | None:
    """One evaluation summary ``{task}.json``: (the summary, its task, the values by lm-eval's metric name
    (``mean@8``, ...), their stderr, the file they were read from); None for a file that is not a summary. The values
    come from the lm-eval results file the summary names (``lm_cache``: those already read), or, only where it is
    missing, from the summary's own copies (with a warning)."""
    path = Path(path)
    try:
        summary = read_json(path)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(summary, dict) or not str(summary.get("schema", "")).startswith(EVAL_SCHEMA_PREFIX):
        return None
    task = summary.get("task") or path.stem
    lm = summary.get("lm_eval") or {}
    values: dict[str, float] = {}
    stderr: dict[str, Any] = {}
    source = path
    results_file = path.parent / lm["results_file"] if lm.get("results_file") else None
    if results_file is not None and results_file.is_file():
        cache = {} if lm_cache is None else lm_cache
        if results_file not in cache:
            cache[results_file] = read_json(results_file)
        values, stderr = lm_eval_task_scores(cache[results_file], task, lm.get("filter", FILTER_NAME))
        source = results_file
    if not values:
        for name, value in (summary.get("metrics") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values[name] = float(value)
        stderr = dict(summary.get("stderr") or {})
        source = path
        if values and results_file is not None:
            warnings.warn(f"{results_file} missing: scores of {path} read from the summary", stacklevel=2)
    return summary, task, values, stderr, str(source)


def load_eval_scores(results_dir: str | os.PathLike) -> pd.DataFrame:
    """Every evaluation score under ``results_dir/eval`` as a tidy frame, one row per (run, task, metric).

    Columns: profile, experiment, subset, model, entry, method, params, seed, task, k, metric, value (the spec),
    then name (lm-eval's metric name, e.g. ``pass@4``), n (samples per problem), stderr (lm-eval's), source (the
    file the value came from). ``experiment`` is the summary's (else the folder's, `split_slot`: main for runs
    written before experiments existed); ``subset`` the part of the data the task scores (the summary's
    ``subsets``, e.g. probe / rest), "" for a whole task; grader the grader that scored it (`grader_label`).
    ``metric`` is the family (mean, pass, maj, best_bootstrap) and ``k`` its k: ``pass@4`` -> ("pass", 4).

    The per-task summary ``{task}.json`` (bandpo.score.evaluate, schema ``bandpo-bench/eval-summary/v1``) gives the
    run's
    identity and names lm-eval's aggregated results file and filter; the values are read from that lm-eval file
    (`lm_eval_task_scores`). Only when that file is missing are the summary's copies used (they were read from the
    same file by bandpo.score.evaluate), and ``source`` says so.
    """
    results_dir = Path(results_dir)
    rows = []
    lm_cache: dict[Path, Any] = {}
    for model, slot, seed, folder in _seed_dirs(results_dir / "eval"):
        entry, folder_experiment = split_slot(slot)
        for path in sorted(folder.glob("*.json")):
            read = summary_values(path, lm_cache)
            if read is None:
                continue  # lm_eval_results.json and anything else that is not a summary
            summary, task, values, stderr, source = read
            source = str(Path(source).relative_to(results_dir))
            method = summary.get("method")
            grader = grader_label(summary)
            for name, value in values.items():
                family, k = parse_metric(name)
                err = stderr.get(name)
                rows.append(
                    {
                        "profile": summary.get("profile") or results_dir.name,
                        "experiment": summary.get("experiment") or folder_experiment,
                        "subset": str((summary.get("subsets") or {}).get(task) or ""),
                        "model": summary.get("model") or model,
                        "entry": summary.get("entry") or entry,
                        "method": method if method else (BASE_ENTRY if entry == BASE_ENTRY else None),
                        "params": canonical_params(summary.get("params")),
                        "seed": int(summary.get("seed", seed)),
                        "task": task,
                        "k": k,
                        "metric": family,
                        "value": value,
                        "name": name,
                        "n": summary.get("k"),
                        "stderr": float(err) if isinstance(err, (int, float)) else float("nan"),
                        "source": source,
                        "grader": grader,
                    }
                )
    return pd.DataFrame(rows, columns=SCORE_COLUMNS)


# ----------------------------------------------------------------------------------------------------------------
# The tables other stages write: the bounds table (bandpo.methods.bounds_table), the atlas (bandpo.train.atlas)

BOUNDS_COLUMNS = ["method", "p", "r_lo", "r_hi", "dq_lo", "dq_hi", "delta"]


def load_bounds(path: str | os.PathLike) -> pd.DataFrame:
    """The ratio-bounds table of the bound figure; a missing column raises ValueError naming the file."""
    df = pd.read_csv(path)
    missing = [c for c in BOUNDS_COLUMNS if c not in df]
    if missing:
        raise ValueError(f"{path}: not a bounds table, missing column(s) {', '.join(missing)}")
    return df


def load_atlas(path: str | os.PathLike) -> pd.DataFrame | None:
    """``atlas.csv`` as a frame (columns `bandpo.core.atlas_table.COLUMNS`), or None when the file does not exist;
    ValueError naming the missing columns otherwise."""
    path = Path(path)
    if not path.is_file():
        return None
    table = pd.read_csv(path, keep_default_na=False, na_values=[""])
    missing = [c for c in ATLAS_COLUMNS if c not in table]
    if missing:
        raise ValueError(f"{path}: not an atlas table, missing column(s) {', '.join(missing)}")
    return table
