"""The report stage: reading runs and lm-eval files, the statistics (against rliable), the tables, the figures'
content, the HTML page (escaping, sorting, filters, layout and figures in headless Chromium), publishing, the
published leaderboard rebuilt from its tables, and the Snakemake report captions."""

from __future__ import annotations

import html
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bandpo import analysis, report, study
from bandpo.analysis.leaderboard import beside_table
from bandpo.methods import BUCKET_LABELS
from bandpo.methods import bounds_table as bounds_script
from bandpo.report import Board, verdicts
from bandpo.report.notes import experiment_notes
from bandpo.report.smoke import SMOKE_PROFILES, write_section
from bandpo.score.lm_eval_results import lm_eval_task_scores
from bandpo.stats import power as stats_power
from bandpo.stats import resample as stats_resample
from bandpo.stats import rule as stats_rule


def seeds_for_target(sd: float, target: float = 0.02) -> float:
    """stats.csv's seeds_for_target: the pairs the two-sided paired t test needs for an MDE of ``target``."""
    return stats_power.pairs_needed(sd, target, stats_power.ALPHA, 1 - stats_power.POWER, two_sided=True)


ROOT = Path(__file__).resolve().parents[2]
PROFILE = "testprof"
MAIN_FIGURES = [name for name in report.FIGURES if name not in report.EXPERIMENT_FIGURES]
GRADER_ID = "bandpo.grader/strict-answer-line@0.1.0.r2+math-verify-0.8.0"
TASK = "tiny_math"
N = 8  # samples per problem
METRICS = [f"mean@{N}", "pass@2", "pass@4", f"pass@{N}", f"maj@{N}", f"best@{N}_bootstrap"]
XSS = "</script><script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"
XSS_ENTRY = 'evil<img src=x onerror="document.title=1">&x$^_$'  # a folder name: no '/', but markup and mathtext
ENTRIES = {
    # entry: (method, params, mean@8 per seed, final entropy, the trainer's method_label in run.json)
    "grpo": ("grpo", {"eps_high": 0.2, "eps_low": 0.2}, [0.40, 0.42, 0.41], 0.02, "eps_low=0.2, eps_high=0.2"),
    "clip_higher": (
        "clip_higher",
        {"eps_high": 0.28, "eps_low": 0.2},
        [0.40, 0.43, 0.39],
        0.03,
        "eps_low=0.2, eps_high=0.28",
    ),
    "bandpo_kl": (
        "bandpo",
        {"divergence": "kl", "delta": 0.05, "cap": 10.0, "relax": False, "relax_eps_low": 0.2, "relax_eps_high": 0.2},
        [0.50, 0.52, 0.55],
        0.2,
        "divergence=kl, delta=0.05",
    ),
    # no method_label (a run written before the trainer recorded it): labelled k=v of its parameters
    XSS_ENTRY: ("bandpo", {"divergence": "tv", "delta": 0.05, "note": XSS}, [0.30, 0.31, 0.32], 0.1, None),
}
BASE_SCORES = [0.35, 0.36, 0.34]
SEEDS = (0, 1, 2)


def _write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1), encoding="utf-8")


def write_eval(root: Path, model, entry, seed, method, params, mean, with_lm_file=True, task=TASK, n=N, summary_k=True):
    """One run's evaluation files in bandpo.score.evaluate's format: lm-eval's results file (all tasks of the run in one
    file) and the suite's per-task summary."""
    folder = root / "eval" / model / entry / f"seed{seed}"
    metrics = {f"mean@{n}": mean, f"maj@{n}": min(1, 1.2 * mean), f"best@{n}_bootstrap": min(1, 1.9 * mean)}
    for k in (2, 4, 8):
        if k <= n:
            metrics[f"pass@{k}"] = min(1.0, (1 + k / 8) * mean)
    if with_lm_file:
        path = folder / "lm_eval_results.json"
        results = json.loads(path.read_text()) if path.is_file() else {"results": {}, "configs": {}, "n-samples": {}}
        results["results"][task] = {
            "alias": task,
            **{f"{k},all_k": v for k, v in metrics.items()},
            **{f"{k}_stderr,all_k": 0.01 for k in metrics},
        }
        results["configs"][task] = {"repeats": n}
        results["n-samples"][task] = {"original": 100, "effective": 100}
        _write(path, results)
    summary = {
        "schema": "bandpo-bench/eval-summary/v1",
        "profile": PROFILE,
        "model": model,
        "entry": entry,
        "seed": seed,
        "method": method,
        "params": params,
        "step": 0 if method is None else "final",
        "task": task,
        # deliberately different from lm-eval's file: the loader must read lm-eval's numbers when that file exists
        "metrics": {k: v + 0.5 for k, v in metrics.items()},
        "stderr": {k: 0.01 for k in metrics},
        "k": n if summary_k else None,
        "n_problems": 100,
        "lm_eval": {"results_file": "lm_eval_results.json", "samples_file": f"{task}.samples.jsonl", "filter": "all_k"},
        "grader": {"name": "bandpo.grader", "mode": "strict-answer-line", "id": GRADER_ID},
    }
    _write(folder / f"{task}.json", summary)


def write_run(root: Path, model: str, entry: str, seed: int, method, params, entropy: float, steps=10, label=None):
    folder = root / "runs" / model / entry / f"seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for step in range(1, steps + 1):
        m = {
            "step": step,
            "reward_mean": 0.3 + 0.01 * step + 0.001 * seed,
            "accuracy": 0.3,
            "entropy": entropy * (1 + 0.05 * seed) * (1 + (steps - step) / steps),
            "response_length": 20.0,
            "clipfrac": 0.01,
            "clipfrac_upper": 0.006,
            "clipfrac_lower": 0.004,
            "offpolicy/clipfrac": 0.013,
            "step_seconds": 1.0 + seed,
            "bounds_seconds": 0.001,
        }
        for j, b in enumerate(BUCKET_LABELS):
            for direction in ("upper", "lower"):
                m[f"clipfrac_{direction}/{b}"] = 0.001 * (j + 1)
                m[f"offpolicy/clipfrac_{direction}/{b}"] = 0.002 * (j + 1) * (2 if direction == "upper" else 1)
            m[f"bound_lower_mean/{b}"] = 0.8
            m[f"bound_upper_mean/{b}"] = 1.2
        rows.append(m)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    _write(folder / "model" / "config.json", {})
    _write(
        folder / "run.json",
        {
            "config": {
                "model": f"resources/models/{model}",
                "method": method,
                "params": params,
                "seed": seed,
                "steps": steps,
            },
            "method_params": params,
            **({"method_label": label} if label is not None else {}),
            "steps": steps,
            "train_seconds_total": 10.0 * (1 + seed),
            "grader": {"name": "bandpo.grader"},
            "versions": {},
        },
    )


def make_results(root: Path, models=("tiny-s", "tiny-m")) -> Path:
    root = root / PROFILE
    for model in models:
        for seed, value in zip(SEEDS, BASE_SCORES, strict=True):
            write_eval(root, model, "base", seed, None, None, value)
        for entry, (method, params, means, entropy, label) in ENTRIES.items():
            for seed, value in zip(SEEDS, means, strict=True):
                write_eval(root, model, entry, seed, method, params, value)
                write_run(root, model, entry, seed, method, params, entropy, label=label)
    bounds_script.main(["--out", str(root / "bounds.csv")])  # what the report rule runs first
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Synthetic results of two model sizes, and the report built from them once (shared by the tests below)."""
    base = tmp_path_factory.mktemp("report")
    results = make_results(base)
    assert report.main(["build", "--results", str(results), "--resamples", "500"]) == 0  # the CLI, in process
    written = {f"figures/{n}.png": results / "figures" / f"{n}.png" for n in report.FIGURES}
    return results, written


# ----------------------------------------------------------------------------------------------------------------
# Loading


def test_load_eval_scores_reads_lm_evals_file(built):
    results, _ = built
    scores = analysis.load_eval_scores(results)
    assert list(scores.columns[:12]) == [
        "profile",
        "experiment",
        "subset",
        "model",
        "entry",
        "method",
        "params",
        "seed",
        "task",
        "k",
        "metric",
        "value",
    ]
    n_runs = 2 * (len(ENTRIES) + 1) * len(SEEDS)
    assert len(scores) == n_runs * len(METRICS)
    row = scores[
        (scores.model == "tiny-s") & (scores.entry == "bandpo_kl") & (scores.seed == 2) & (scores.metric == "mean")
    ].iloc[0]
    assert row.value == pytest.approx(0.55)  # lm-eval's number, not the summary's (+0.5)
    assert row.k == N and row["name"] == f"mean@{N}" and row.source.endswith("lm_eval_results.json")
    p4 = scores[(scores.metric == "pass") & (scores.k == 4)]
    assert set(p4["name"]) == {"pass@4"}
    assert set(scores["metric"]) == {"mean", "pass", "maj", "best_bootstrap"}
    base = scores[scores.entry == "base"]
    assert set(base["method"]) == {"base"} and set(base["params"]) == {""}
    assert json.loads(row.params)["divergence"] == "kl"


def test_every_score_names_its_grader(built, tmp_path):
    """scores.csv and the leaderboard carry the grader of each score (the summary's bandpo.grader id); a summary
    from before grader modes (name and version only) was graded leniently; one without a grader gives ""."""
    results, _ = built
    assert set(pd.read_csv(results / "scores.csv")["grader"]) == {GRADER_ID}
    assert set(pd.read_csv(results / "leaderboard.csv")["grader"]) == {GRADER_ID}
    assert f"Scores graded by {GRADER_ID}" in (results / "leaderboard.md").read_text()
    assert f"Scores graded by {GRADER_ID}" in (results / "leaderboard.html").read_text()
    assert analysis.load.grader_label({"grader": {"name": "bandpo.grader", "version": "0.1.r1"}}) == (
        "bandpo.grader/lenient@0.1.r1"
    )
    assert analysis.load.grader_label({}) == ""


def test_load_eval_scores_falls_back_to_the_summary(tmp_path):
    root = tmp_path / PROFILE
    write_eval(root, "m", "grpo", 0, "grpo", {}, 0.4, with_lm_file=False)
    (root / "eval" / "m" / "grpo" / "seed0" / "notes.json").write_text('{"anything": 1}')  # not a summary: ignored
    with pytest.warns(UserWarning, match="missing"):
        scores = analysis.load_eval_scores(root)
    assert len(scores) == len(METRICS)
    assert scores.loc[scores["name"] == f"mean@{N}", "value"].item() == pytest.approx(0.9)
    assert scores["source"].str.endswith(f"{TASK}.json").all()


def test_load_runs(built):
    results, _ = built
    metrics = analysis.load_run_metrics(results)
    assert len(metrics) == 2 * len(ENTRIES) * len(SEEDS) * 10
    assert {"entropy", "reward_mean", "offpolicy/clipfrac_upper/p0.0-0.2"} <= set(metrics.columns)
    runs = analysis.load_run_summaries(results)
    assert len(runs) == 2 * len(ENTRIES) * len(SEEDS)
    assert runs.loc[runs.seed == 2, "train_seconds"].eq(30.0).all()


def test_a_finished_run_must_follow_the_run_contract(tmp_path):
    """A run with run.json is finished and checked (bandpo.core.run_contract): a missing key names the run and the
    key."""
    root = tmp_path / PROFILE
    write_run(root, "m", "grpo", 0, "grpo", {}, 0.1, steps=2)
    metrics = root / "runs" / "m" / "grpo" / "seed0" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    metrics.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "entropy"}) + "\n" for r in rows))
    with pytest.raises(ValueError, match=r"run .*/runs/m/grpo/seed0: metrics.jsonl line 1 lacks the key 'entropy'"):
        analysis.load_run_summaries(root)


def test_runs_without_run_json_are_read_from_metrics(tmp_path):
    """A run without run.json (not finished; the contract is checked once it is): time from step_seconds; the
    partial file of a live run ignored."""
    root = tmp_path / PROFILE
    write_run(root, "m", "ext", 0, "grpo", {}, 0.1, steps=4)
    (root / "runs" / "m" / "ext" / "seed0" / "run.json").unlink()
    live = root / "runs" / "m" / "live" / "seed0"
    live.mkdir(parents=True)
    (live / "metrics.jsonl.partial").write_text('{"step": 1}\n')
    runs = analysis.load_run_summaries(root)
    assert runs[["entry", "train_seconds", "finished", "steps"]].values.tolist() == [["ext", 4.0, False, 4]]
    assert set(analysis.load_run_metrics(root)["entry"]) == {"ext"}


def test_labels_come_from_run_json(tmp_path):
    """The leaderboard's params column is run.json's method_label; without one, k=v of the run's parameters."""
    root = tmp_path / PROFILE
    write_run(root, "m", "labelled", 0, "bandpo", {"divergence": "kl", "delta": 0.05, "cap": 10.0}, 0.1, label="KL")
    write_run(root, "m", "plain", 0, "bandpo", {"divergence": "kl", "delta": 0.05, "cap": 10.0}, 0.1)
    summaries = analysis.load_run_summaries(root)
    assert analysis.entry_labels(summaries) == {
        ("m", "labelled"): "KL",
        ("m", "plain"): "cap=10.0, delta=0.05, divergence=kl",
    }
    per_run, per_entry = analysis.run_stats(analysis.load_run_metrics(root), summaries)
    board = analysis.leaderboard(pd.DataFrame(), per_entry, per_run, analysis.entry_labels(summaries))
    assert dict(zip(board["entry"], board["params"], strict=True)) == {
        "labelled": "KL",
        "plain": "cap=10.0, delta=0.05, divergence=kl",
    }
    assert analysis.params_label('{"b": 1, "a": "x"}') == "a=x, b=1" and analysis.params_label(None) == ""


def test_one_reader_of_lm_eval_results():
    """bandpo.score.evaluate's summaries and the report read lm-eval's results with the same function."""
    from bandpo.score import evaluate

    results = {
        "results": {TASK: {"alias": TASK, "mean@8,all_k": 0.5, "mean@8_stderr,all_k": 0.01, "pass@8,all_k": 0.75,
                           "pass@8_stderr,all_k": "N/A", "mean@8,other": 0.1, "flag,all_k": True}},
        "configs": {TASK: {"repeats": 8}},
        "n-samples": {TASK: {"effective": 300}},
    }  # fmt: skip
    values, stderr = lm_eval_task_scores(results, TASK, "all_k")
    assert values == {"mean@8": 0.5, "pass@8": 0.75} and stderr == {"mean@8": 0.01, "pass@8": None}
    summary = evaluate.summarize_task(results, TASK)
    assert (summary["metrics"], summary["stderr"], summary["k"], summary["n_problems"]) == (values, stderr, 8, 300)
    assert lm_eval_task_scores(results, "absent", "all_k") == ({}, {})
    with pytest.raises(KeyError, match="not in lm-eval's results"):
        evaluate.summarize_task(results, "absent")


def test_the_report_reads_files_only():
    """`import bandpo.report` imports neither torch nor the method registry (checked in a fresh interpreter)."""
    code = "import sys, bandpo.report; print(sorted(m for m in sys.modules if m == 'torch' or m == 'bandpo.methods'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


# ----------------------------------------------------------------------------------------------------------------
# Statistics


def test_probability_of_improvement():
    assert stats_resample.probability_of_improvement([3, 4, 5], [0, 1, 2])[0] == 1.0
    assert stats_resample.probability_of_improvement([0, 1, 2], [3, 4, 5])[0] == 0.0
    assert stats_resample.probability_of_improvement([1, 1], [1, 1])[0] == 0.5
    # pairs: (1>0) (1=1) (1<2) (3>0) (3>1) (3>2) -> (4 + 0.5) / 6
    est, lo, hi = stats_resample.probability_of_improvement([1, 3], [0, 1, 2], n_resamples=300)
    assert est == pytest.approx(4.5 / 6) and 0 <= lo <= est <= hi <= 1
    # two tasks: averaged; deterministic given the seed
    x, y = {"a": [1, 2, 3], "b": [0, 0, 0]}, {"a": [0, 0, 0], "b": [1, 1, 1]}
    assert stats_resample.probability_of_improvement(x, y)[0] == 0.5
    assert stats_resample.probability_of_improvement(x, y, rng=7) == stats_resample.probability_of_improvement(
        x, y, rng=7
    )
    # one score summed in two orders differs in its last bits: still a tie, as it is
    # once the tables round it to 6 digits (the published main tiny-m pass@2 of seed 6 was such a pair)
    a, b = sum([0.1, 0.2, 0.3]) / 3, sum([0.3, 0.2, 0.1]) / 3
    assert a != b and abs(a - b) < 1e-12
    assert stats_resample.probability_of_improvement([a], [b])[0] == 0.5
    frame = lambda v: pd.DataFrame({"seed": [0], "task": ["t"], "value": [v]})  # noqa: E731
    assert analysis.paired_comparison(frame(a), frame(b), n_resamples=10)["diff_poi"] == 0.5


@pytest.fixture
def rliable(monkeypatch):
    """rliable's library, made to run on the installed arch: rliable 1.2.0 (its latest release) hands its bootstrap
    classes ``random_state=``, which arch 8 renamed ``seed=`` (and arch 7, which still took it, does not import
    under pandas 3). The keyword is passed on under its new name; nothing else changes."""
    pytest.importorskip("rliable", reason="rliable is a test dependency: pip install --no-deps rliable==1.2.0")
    import arch.bootstrap
    from rliable import library, metrics

    for cls in (arch.bootstrap.IIDBootstrap, arch.bootstrap.IndependentSamplesBootstrap):

        def init(self, *args, random_state=None, seed=None, _init=cls.__init__, **kwargs):
            _init(self, *args, seed=seed if random_state is None else random_state, **kwargs)

        monkeypatch.setattr(cls, "__init__", init)
    return library, metrics


def test_statistics_agree_with_rliable(rliable):
    """Mean, IQM and probability of improvement with their stratified-bootstrap 95% CIs, over 10 seeds x 3 tasks:
    the same point estimates as rliable, and CIs within Monte-Carlo error of rliable's (different generators)."""
    library, metrics = rliable
    rng = np.random.default_rng(3)
    tasks, n_seeds = ("a", "b", "c"), 10
    x, y = rng.beta(5, 3, size=(n_seeds, len(tasks))), rng.beta(4, 4, size=(n_seeds, len(tasks)))
    rows = [
        {"profile": "p", "model": "m", "entry": entry, "method": entry, "params": "", "seed": s, "task": t, "k": 8.0,
         "metric": "mean", "value": scores[s, j], "name": "mean@8", "n": 8}
        for entry, scores in (("x", x), ("grpo", y)) for s in range(n_seeds) for j, t in enumerate(tasks)
    ]  # fmt: skip
    stats = analysis.score_stats(pd.DataFrame(rows), baseline="grpo", n_resamples=4000)
    ours = stats[(stats.entry == "x") & (stats.task == "all")].iloc[0]
    reps, seed = 4000, np.random.RandomState(0)
    point, ci = library.get_interval_estimates(
        {"x": x}, lambda s: np.array([metrics.aggregate_mean(s), metrics.aggregate_iqm(s)]), reps=reps,
        random_state=seed,
    )  # fmt: skip
    poi_point, poi_ci = library.get_interval_estimates(
        {"x,y": [x, y]}, lambda a, b: np.array([metrics.probability_of_improvement(a, b)]), reps=reps,
        random_state=seed,
    )  # fmt: skip
    theirs = {
        "mean": (point["x"][0], *ci["x"][:, 0]),
        "iqm": (point["x"][1], *ci["x"][:, 1]),
        "poi": (poi_point["x,y"][0], *poi_ci["x,y"][:, 0]),
    }
    for name, (estimate, low, high) in theirs.items():
        lo_col, hi_col = ("ci_low", "ci_high") if name == "mean" else (f"{name}_ci_low", f"{name}_ci_high")
        assert ours[name] == pytest.approx(estimate, abs=1e-12), name
        assert high - low > 0.05  # wide enough that the tolerance below means something
        assert ours[lo_col] == pytest.approx(low, abs=0.01) and ours[hi_col] == pytest.approx(high, abs=0.01), name


def test_score_stats(built):
    results, _ = built
    scores = analysis.load_eval_scores(results)
    stats = analysis.score_stats(scores, n_resamples=500)
    again = analysis.score_stats(scores, n_resamples=500)
    pd.testing.assert_frame_equal(stats, again)  # seeded
    row = stats[
        (stats.model == "tiny-s") & (stats.entry == "bandpo_kl") & (stats.task == "all") & (stats.metric == "mean")
    ].iloc[0]
    assert row["mean"] == pytest.approx(np.mean([0.50, 0.52, 0.55]))
    assert row.iqm == pytest.approx(row["mean"])  # 3 scores: nothing trimmed
    assert 0.50 <= row.ci_low <= row["mean"] <= row.ci_high <= 0.55
    assert row.poi == 1.0 and row.baseline == "grpo" and row.label == f"mean@{N}" and row.n_seeds == 3
    grpo = stats[(stats.entry == "grpo") & (stats.task == "all") & (stats.metric == "mean")]
    assert grpo["poi"].isna().all()  # the baseline's own row
    worse = stats[(stats.entry == XSS_ENTRY) & (stats.task == "all") & (stats.metric == "mean")]
    assert (worse["poi"] == 0.0).all()
    # per task: every pass@k; over tasks ("all"): the headline k = n only
    per_task = stats[
        (stats.task == TASK) & (stats.metric == "pass") & (stats.entry == "grpo") & (stats.model == "tiny-s")
    ]
    assert sorted(per_task["k"]) == [2, 4, N]
    overall = stats[(stats.task == "all") & (stats.entry == "grpo") & (stats.model == "tiny-s")]
    assert sorted(overall["label"]) == sorted([f"mean@{N}", f"pass@{N}", f"maj@{N}", f"best@{N}_bootstrap"])


def _scores(values: dict[str, dict[int, float]], task: str = "t", k: float = 8.0) -> pd.DataFrame:
    """A scores frame (`load_eval_scores`' columns) of mean@k: entry -> {seed: value}, one task."""
    return pd.DataFrame(
        [
            {"profile": "p", "model": "m", "entry": e, "method": e, "params": "", "seed": s, "task": task, "k": k,
             "metric": "mean", "value": v, "name": f"mean@{int(k)}", "n": k}
            for e, by_seed in values.items() for s, v in by_seed.items()
        ]
    )  # fmt: skip


def test_paired_difference_and_its_interval_by_hand():
    """Mean of the per-seed differences; its percentile interval matches the exact bootstrap distribution of the
    mean of 5 pairs (all 5^5 resamples, enumerated); P(improvement) is the share of positive differences."""
    import itertools

    d = np.array([0.03, -0.01, 0.05, 0.02, 0.04])
    y = np.array([0.30, 0.40, 0.25, 0.35, 0.45])  # the base models differ much more than the methods do
    scores = _scores({"x": dict(enumerate(y + d)), "grpo": dict(enumerate(y))})
    row = analysis.score_stats(scores, n_resamples=20000).query("entry == 'x' and task == 'all'").iloc[0]
    assert row.n_pairs == 5 and row["diff"] == pytest.approx(d.mean(), abs=1e-12)
    assert row.diff_sd == pytest.approx(np.std(d, ddof=1), abs=1e-12)
    exact = np.array([d[list(idx)].mean() for idx in itertools.product(range(5), repeat=5)])
    lo, hi = np.quantile(exact, [0.025, 0.975])
    assert row.diff_ci_low == pytest.approx(lo, abs=0.002) and row.diff_ci_high == pytest.approx(hi, abs=0.002)
    assert row.diff_poi == pytest.approx(0.8)  # 4 of 5 seeds improve
    # pairing removes the base models' spread: the all-pairs P(improvement) sees mostly that spread
    assert row.poi < 0.7 and row.diff_ci_low > 0
    assert row.mde == pytest.approx(stats_power.minimum_detectable_difference(np.std(d, ddof=1), 5))


def test_t_intervals_of_the_mean_and_of_the_paired_differences():
    """The intervals the tables show: Student t over seeds, as scipy's t.interval; wider than the percentile
    bootstrap at 3 seeds (t(0.975, 2) = 4.303), and NaN for one seed."""
    from scipy import stats as st

    x = np.array([0.31, 0.36, 0.33])
    lo, hi = stats_rule.t_interval(x)
    ref = st.t.interval(0.95, 2, loc=x.mean(), scale=st.sem(x))
    assert (lo, hi) == pytest.approx(ref, abs=1e-12)
    assert hi - lo == pytest.approx(2 * 4.303 * np.std(x, ddof=1) / math.sqrt(3), abs=1e-3)
    assert (
        all(math.isnan(v) for v in stats_rule.t_interval([0.3])) and stats_rule.t_interval([0.2, np.nan, 0.4])[0] < 0.2
    )
    assert stats_rule.t_interval([0.0, 0.1, 0.9], bounds=(0.0, 1.0)) == pytest.approx((0.0, 1.0))  # a score's range
    d = np.array([0.03, -0.01, 0.05])
    y = np.array([0.30, 0.40, 0.25])
    scores = _scores({"x": dict(enumerate(y + d)), "grpo": dict(enumerate(y))})
    row = analysis.score_stats(scores, n_resamples=2000).query("entry == 'x' and task == 'all'").iloc[0]
    assert (row.diff_t_ci_low, row.diff_t_ci_high) == pytest.approx(
        st.t.interval(0.95, 2, loc=d.mean(), scale=st.sem(d)), abs=1e-12
    )
    assert (row.t_ci_low, row.t_ci_high) == pytest.approx(stats_rule.t_interval(y + d), abs=1e-12)
    assert row.diff_t_ci_low < row.diff_ci_low and row.diff_t_ci_high > row.diff_ci_high  # the bootstrap's narrower
    board = analysis.leaderboard(
        analysis.score_stats(scores, n_resamples=200), pd.DataFrame(columns=["model", "entry"])
    )
    md = report.leaderboard_markdown(Board(board))
    x_row = board.set_index("entry").loc["x"]
    shown = f"{100 * x_row['mean@8']:.1f} [{100 * x_row['mean@8_t_ci_low']:.1f}, {100 * x_row['mean@8_t_ci_high']:.1f}]"
    assert shown in md  # the tables show the t interval


def test_minimum_detectable_difference_is_exact():
    """The MDE solves the exact power equation of the two-sided paired t-test (noncentral t): the power at the
    returned difference is 80% to 1e-6; at few seeds it lies above the usual t-quantile approximation, which gives
    less than 80% power there; and it falls with the seed count."""
    from scipy import stats as st

    for sd, n in ((1.0, 2), (1.0, 3), (0.0177, 3), (2.0, 5), (0.03, 10), (0.01, 200)):
        mde = stats_power.minimum_detectable_difference(sd, n)
        assert stats_power.paired_t_power(mde, sd, n) == pytest.approx(0.8, abs=1e-6)
        approx = (st.t.ppf(0.975, n - 1) + st.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)
        if n <= 10:  # few seeds: the approximation is too small (at 200 both agree to 1e-4)
            assert mde > approx and stats_power.paired_t_power(approx, sd, n) < 0.8
        assert mde == pytest.approx(approx, rel=0.2 if n <= 3 else 0.02)
    # at 3 seeds: 5.653 SDs / sqrt(3) (the approximation: (4.303 + 1.061) / sqrt(3), 77% power)
    assert stats_power.minimum_detectable_difference(1.0, 3) * math.sqrt(3) == pytest.approx(5.6535, abs=1e-3)
    assert stats_power.paired_t_power((4.303 + 1.061) / math.sqrt(3), 1.0, 3) == pytest.approx(0.766, abs=1e-3)
    mdes = [stats_power.minimum_detectable_difference(1.0, n) for n in range(2, 60)]
    assert all(a > b for a, b in zip(mdes, mdes[1:], strict=False))
    # large n: the normal approximation (z_0.975 + z_0.8) sd / sqrt(n)
    assert stats_power.minimum_detectable_difference(1.0, 5000) * math.sqrt(5000) == pytest.approx(2.8016, abs=2e-3)
    assert math.isnan(stats_power.minimum_detectable_difference(1.0, 1))
    assert stats_power.minimum_detectable_difference(0.0, 3) == 0
    assert math.isnan(stats_power.minimum_detectable_difference(float("nan"), 3))
    for sd in (0.005, 0.01, 0.03):
        n = int(seeds_for_target(sd, 0.02))
        assert (
            stats_power.minimum_detectable_difference(sd, n)
            <= 0.02
            < stats_power.minimum_detectable_difference(sd, n - 1)
        )
    assert seeds_for_target(0.0) == 2 and math.isinf(seeds_for_target(10.0, 0.02))


def test_paired_t_power_matches_monte_carlo():
    """The exact power against a brute-force simulation of the paired t-test (normal differences, n pairs): at the
    MDE about 80% of the simulated tests reject, and the approximation's smaller difference rejects less often."""
    from scipy import stats as st

    rng = np.random.default_rng(20260301)
    reps = 200_000
    for sd, n in ((0.0177, 3), (1.0, 5)):
        mde = stats_power.minimum_detectable_difference(sd, n)
        approx = (st.t.ppf(0.975, n - 1) + st.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)
        crit = st.t.ppf(0.975, n - 1)
        for d in (mde, approx, 0.0):
            x = rng.normal(d, sd, size=(reps, n))
            tstat = x.mean(axis=1) / (x.std(axis=1, ddof=1) / math.sqrt(n))
            rate = float((np.abs(tstat) > crit).mean())
            exact = stats_power.paired_t_power(d, sd, n) if d else 0.05
            assert rate == pytest.approx(exact, abs=0.005), (sd, n, d)
        assert stats_power.paired_t_power(mde, sd, n) - stats_power.paired_t_power(approx, sd, n) > 0.005


def test_unmatched_seeds_are_left_out_and_named(tmp_path):
    scores = _scores({"x": {0: 0.5, 1: 0.6, 2: 0.7, 3: 0.9}, "grpo": {0: 0.4, 1: 0.5, 2: 0.6, 4: 0.1}})
    stats = analysis.score_stats(scores, n_resamples=200)
    row = stats.query("entry == 'x' and task == 'all'").iloc[0]
    assert row.n_pairs == 3 and row["diff"] == pytest.approx(0.1)  # seeds 0-2 only
    assert row.unpaired == "seed(s) 3 only in x; seed(s) 4 only in grpo"
    board = analysis.leaderboard(stats, pd.DataFrame(columns=["model", "entry"]))
    md = report.leaderboard_markdown(Board(board))
    assert "## Unpaired seeds" in md and ("m: seed(s) 3 only in x; seed(s) 4 only in grpo: left out of the paired "
                                          "comparison of x with grpo, for mean@8") in md  # fmt: skip
    nothing = analysis.score_stats(_scores({"x": {0: 0.5}, "grpo": {1: 0.4}}), n_resamples=200)
    alone = nothing.query("entry == 'x' and task == 'all'").iloc[0]
    assert alone.n_pairs == 0 and math.isnan(alone["diff"]) and "only in x" in alone.unpaired


def test_power_is_published_per_model_and_metric(built):
    results, _ = built
    stats = pd.read_csv(results / "stats.csv")
    power = analysis.power_table(stats)
    assert set(power["model"]) == {"tiny-s", "tiny-m"} and set(power["label"]) == {f"mean@{N}", f"pass@{N}"}
    row = power[(power.model == "tiny-s") & (power.label == f"mean@{N}")].iloc[0]
    trained = stats[(stats.model == "tiny-s") & (stats.task == "all") & (stats.metric == "mean")]
    trained = trained[~trained.entry.isin(["base", "grpo"])]
    assert row.n_comparisons == len(trained) and row.n_seeds == 3
    assert row.sd == pytest.approx(math.sqrt((trained["diff_sd"] ** 2).mean()))
    assert row.mde == pytest.approx(stats_power.minimum_detectable_difference(row.sd, 3))
    assert row.seeds_for_target == seeds_for_target(row.sd)
    md = (results / "leaderboard.md").read_text()
    assert "## Power" in md and f"tiny-s, mean@{N}: SD of the paired differences" in md
    assert "Minimum detectable difference" in (results / "leaderboard.html").read_text()
    board = pd.read_csv(results / "leaderboard.csv")
    assert {f"mean@{N}_diff", f"mean@{N}_diff_ci_low", f"mean@{N}_diff_poi", f"mean@{N}_mde"} <= set(board.columns)


def test_power_notes_name_every_seed_count():
    """Where the primary pair has more seeds than the other entries (main's and the separation run's in the
    published stats), the power table counts the comparisons per seed count and the page's note names each count
    and the MDE as that of the fewest; where every comparison has the same seeds, the note is as it was (#55)."""
    from bandpo.report.board import read_table
    from bandpo.report.notes import power_lines

    stats = read_table(ROOT / "results" / "stats.csv")
    power = analysis.power_table(stats)
    mixed = power[power["seed_counts"].map(len) > 1]
    assert not mixed.empty
    for r, line in zip(mixed.itertuples(), power_lines(mixed), strict=True):
        g = stats[(stats.experiment == r.experiment) & (stats.subset == r.subset) & (stats.model == r.model)
                  & (stats.label == r.label) & (stats.task == "all") & (stats.entry != "base")
                  & stats.diff_sd.notna()]  # fmt: skip
        counts = g["n_pairs"].astype(int).value_counts().sort_index()
        assert r.seed_counts == tuple(counts.items()) and r.n_seeds == counts.index.min()
        each = ", ".join(f"{c} with {n} seeds" for n, c in counts.items())
        assert f"over {len(g)} comparisons, {each}; MDE " in line and f" points at {r.n_seeds} seeds (entries" in line
    same = power[power["seed_counts"].map(len) == 1]
    for r, line in zip(same.itertuples(), power_lines(same), strict=True):
        assert f"over {r.n_comparisons} comparison(s) with {r.n_seeds} seeds; MDE " in line


def test_rerun_agreement_flags_rows_outside_and_broken_claims(built, tmp_path, capsys):
    results, _ = built
    board = pd.read_csv(results / "leaderboard.csv", keep_default_na=False, na_values=[""])
    label = f"mean@{N}"
    rerun = board.copy()
    kl = (rerun.model == "tiny-s") & (rerun.entry == "bandpo_kl")
    rerun.loc[kl, label] = rerun.loc[kl, f"{label}_t_ci_high"] + 0.05  # outside its published (t) interval
    rerun.loc[kl, f"{label}_diff"] = -0.01  # and its paired difference changes sign
    table = analysis.rerun_agreement(board, rerun, [label])
    row = table[(table.model == "tiny-s") & (table.entry == "bandpo_kl")].iloc[0]
    published_claim = board.loc[kl, f"{label}_diff_t_ci_low"].iloc[0] > 0
    assert not row.inside and row.claim == (1 if published_claim else 0)
    assert row.claim_holds is (False if published_claim else None)
    others = table[~((table.model == "tiny-s") & (table.entry == "bandpo_kl"))]
    assert others["inside"].dropna().all() and all(h in (True, None) for h in others["claim_holds"])
    rerun.to_csv(tmp_path / "rerun.csv", index=False)
    assert report.main(["compare", "--published", str(results / "leaderboard.csv"), "--rerun",
                        str(tmp_path / "rerun.csv"), "--metrics", label]) == 0  # fmt: skip
    out = capsys.readouterr().out
    rated = table["inside"].notna().sum()
    assert f"rerun inside the published 95% interval: {rated - 1} of {rated} rows" in out
    assert "inside the percentile-bootstrap interval instead:" in out
    assert report.main(["compare", "--published", str(tmp_path / "none.csv"), "--rerun", str(tmp_path)]) == 2
    # a rerun whose whole-task rows read back with a float column of blanks still matches the published rows
    published = board.assign(experiment="main", subset="")
    blank = rerun.assign(experiment="main", subset=float("nan"))
    assert len(analysis.rerun_agreement(published, blank, [label])) == len(table)


def test_stratified_over_tasks_and_one_seed():
    rows = []
    for task, values in (("a", [0.1, 0.2, 0.3]), ("b", [0.9, 0.8])):
        for seed, v in enumerate(values):
            rows.append(
                {
                    "profile": "p",
                    "model": "m",
                    "entry": "x",
                    "method": "grpo",
                    "params": "",
                    "seed": seed,
                    "task": task,
                    "k": 4.0,
                    "metric": "mean",
                    "value": v,
                    "name": "mean@4",
                    "n": 4,
                }
            )
    rows.append({**rows[0], "entry": "solo", "task": "a", "value": 0.5})
    stats = analysis.score_stats(pd.DataFrame(rows), baseline=None, n_resamples=400)
    overall = stats[(stats.entry == "x") & (stats.task == "all")].iloc[0]
    assert overall["mean"] == pytest.approx((0.2 + 0.85) / 2)  # tasks weigh equally
    assert overall.iqm == pytest.approx(1.3 / 3)  # trim_mean([.1,.2,.3,.8,.9], .25) = mean(.2,.3,.8)
    assert overall.ci_low < overall["mean"] < overall.ci_high
    solo = stats[(stats.entry == "solo") & (stats.task == "all")].iloc[0]
    assert solo["mean"] == 0.5 and math.isnan(solo.ci_low)  # one seed: no interval, not a fake one


def test_several_tasks_with_different_k(tmp_path):
    """Tasks with different sample counts (as AIME with 32 and MATH-500 with 4): the aggregate over tasks uses each
    task's k = n and is labelled "@n"; per-task tables appear in the Markdown and the HTML."""
    root = tmp_path / PROFILE
    for entry, method, means in (("grpo", "grpo", [0.2, 0.3]), ("bandpo_kl", "bandpo", [0.4, 0.5])):
        for seed, mean in enumerate(means):
            write_eval(root, "m", entry, seed, method, {}, mean, task="aime", n=4, summary_k=False)
            write_eval(root, "m", entry, seed, method, {}, mean / 2, task="math", n=8)
    scores = analysis.load_eval_scores(root)
    assert set(scores["task"]) == {"aime", "math"} and scores["source"].str.endswith("lm_eval_results.json").all()
    stats = analysis.score_stats(scores, n_resamples=200)
    overall = stats[(stats.task == "all") & (stats.entry == "bandpo_kl")].set_index("label")
    assert set(overall.index) == {"mean@n", "pass@n", "maj@n", "best@n_bootstrap"}
    assert overall.loc["mean@n", "mean"] == pytest.approx((0.45 + 0.225) / 2)
    assert overall.loc["pass@n", "mean"] == pytest.approx((1.5 * 0.45 + 2 * 0.225) / 2)  # pass@4 of aime, @8 of math
    assert overall.loc["mean@n", "poi"] == 1.0
    board = analysis.leaderboard(stats, pd.DataFrame(columns=["model", "entry"]))
    assert list(board["entry"]) == ["bandpo_kl", "grpo"] and "mean@n" in board
    tasks = analysis.per_task_table(stats, board)
    assert {"aime mean@4", "math mean@8", "aime pass@4", "math pass@8", "aime mean@4_ci_low"} <= set(tasks.columns)
    md = report.leaderboard_markdown(Board(board, per_task=tasks))
    assert "## m: per task" in md and "aime mean@4 %" in md
    page = report.leaderboard_html(Board(board, per_task=tasks))
    assert page.count("<table") == 2 and 'data-key="math pass@8"' in page


def test_leaderboard_rows_and_order(built):
    results, _ = built
    board = pd.read_csv(results / "leaderboard.csv", dtype={"params": str}).fillna({"params": ""})
    assert len(board) == 2 * (len(ENTRIES) + 1)
    for _, g in board.groupby("model"):
        assert g["entry"].iloc[0] == "base"
        assert g["entry"].iloc[1] == "bandpo_kl"  # then by mean@k, best first
        assert set(g["entry"]) == {"base", *ENTRIES}
    cols = set(board.columns)
    for label in (f"mean@{N}", f"pass@{N}", f"maj@{N}"):
        assert {label, f"{label}_ci_low", f"{label}_ci_high", f"{label}_iqm", f"{label}_poi"} <= cols
    assert {"entropy_final", "entropy_final_ci_low", "train_seconds_mean", "train_seconds_total"} <= cols
    kl = board[(board.model == "tiny-s") & (board.entry == "bandpo_kl")].iloc[0]
    assert kl["train_seconds_total"] == pytest.approx(60.0) and kl["train_seconds_mean"] == pytest.approx(20.0)
    assert kl["params"] == "divergence=kl, delta=0.05" and kl["method"] == "bandpo"  # what makes the variant
    grpo = board[(board.model == "tiny-s") & (board.entry == "grpo")].iloc[0]
    assert grpo["params"] == "eps_low=0.2, eps_high=0.2"
    tv = board[board.entry == XSS_ENTRY].iloc[0]
    assert "divergence=tv" in tv["params"] and "note=" in tv["params"]
    base = board[board.entry == "base"].iloc[0]
    assert math.isnan(base["entropy_final"]) and base["method"] == "base"


def test_markdown(built):
    results, _ = built
    md = (results / "leaderboard.md").read_text()
    assert md.count("\n## tiny-") == 2 and "the 95% t intervals multiply SD / sqrt(n) by t(0.975, n - 1)" in md
    assert "<script>" not in md and "&lt;/script&gt;" in md and "evil&lt;img" in md
    for name in report.FIGURES:  # the figures of experiments without runs are left off
        assert (f"(figures/{name}.png)" in md) == (name in MAIN_FIGURES)
    table = [line for line in md.splitlines() if line.startswith("| bandpo_kl")]
    assert len(table) == 2 and all(line.count(" | ") == table[0].count(" | ") for line in table)


# ----------------------------------------------------------------------------------------------------------------
# Figures: the data each one draws, its axes and legend (the matplotlib Figure objects), and the files


@pytest.fixture
def close_figures():
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


def _legend_texts(legend) -> list[str]:
    return [t.get_text() for t in legend.get_texts()] if legend is not None else []


def test_figures_exist(built):
    results, written = built
    for name in report.FIGURES:
        png = results / "figures" / f"{name}.png"
        assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and written[f"figures/{name}.png"] == png


def test_bounds_table(tmp_path):
    """The bound figure's data (bandpo.methods.bounds_table): closed forms of the registered bounds."""
    data = bounds_script.bounds_table(delta=0.1)
    labels = {"BandPO-KL", "BandPO-TV", "BandPO-chi2", "GRPO", "Clip-Higher", "DCPO", report.SIMPLEX}
    assert set(data["method"]) == labels and data["delta"].eq(0.1).all()
    d = data.set_index(["method", "p"])
    near = data.loc[(data.p - 0.5).abs().idxmin(), "p"]
    assert d.loc[("BandPO-TV", near), "r_hi"] == pytest.approx(1 + 0.1 / near)  # tv closed form
    assert d.loc[("GRPO", near), "r_lo"] == pytest.approx(0.8)
    assert d.loc[("Clip-Higher", near), "r_hi"] == pytest.approx(1.28)
    assert d.loc[("DCPO", near), "r_hi"] == pytest.approx(0.5 + 0.5 * math.sqrt(1 + 4 * 0.2 / near))
    # (b) is p (r - 1); every Band bound lies inside the simplex limits r in [0, 1/p]
    assert np.allclose(data["dq_hi"], data["p"] * (data["r_hi"] - 1))
    band = data[data.method.str.startswith("BandPO")]
    assert (band.r_lo >= -1e-12).all() and (band.r_hi <= 1 / band.p + 1e-9).all()
    simplex = data[data.method == report.SIMPLEX]
    assert np.allclose(simplex.dq_lo, -simplex.p) and np.allclose(simplex.dq_hi, 1 - simplex.p)
    grpo = data[(data.method == "GRPO") & (data.p > 0.9)]
    assert (grpo.r_hi > 1 / grpo.p).all()  # fixed clipping leaves the simplex near p = 1: 1.2 > 1/p
    # the CLI writes the same table, and the report reads it back unchanged
    assert bounds_script.main(["--out", str(tmp_path / "b.csv")]) == 0
    pd.testing.assert_frame_equal(analysis.load_bounds(tmp_path / "b.csv"), data, check_dtype=False)
    (tmp_path / "bad.csv").write_text("method,p\nx,0.5\n")
    with pytest.raises(ValueError, match="bad.csv: not a bounds table, missing column"):
        analysis.load_bounds(tmp_path / "bad.csv")


def test_bounds_figure_draws_the_table(close_figures):
    data = bounds_script.bounds_table(delta=0.1, p=np.linspace(0.01, 0.99, 50))
    fig, plotted = report.bounds_figure(data)
    assert plotted is data
    ratio, dq = fig.axes
    assert ratio.get_xlabel() == "old probability p" and ratio.get_ylabel() == "ratio bound r"
    assert dq.get_ylabel() == "probability change q - p = p (r - 1)" and "delta = 0.1" in ratio.get_title()
    methods = ["BandPO-KL", "BandPO-TV", "BandPO-chi2", "GRPO", "Clip-Higher", "DCPO"]
    assert _legend_texts(fig.legends[0]) == [*methods, report.SIMPLEX]
    # every bound of every method is a line of panel (a), and p (r - 1) of panel (b), with the table's numbers
    for ax, (lo_col, hi_col) in ((ratio, ("r_lo", "r_hi")), (dq, ("dq_lo", "dq_hi"))):
        drawn = [(line.get_xdata(), line.get_ydata()) for line in ax.get_lines() if len(line.get_xdata()) == 50]
        for method in [*methods, report.SIMPLEX]:
            m = data[data.method == method]
            for col in (lo_col, hi_col):
                assert any(np.allclose(x, m.p) and np.allclose(y, m[col]) for x, y in drawn), (method, col)
    dashed = [line for line in ratio.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 2  # the simplex limits r = 0 and r = 1/p
    empty_fig, empty = report.bounds_figure(pd.DataFrame(columns=data.columns))
    assert empty.empty and "no bounds table" in empty_fig.axes[0].texts[0].get_text()


def test_training_curves_figure(built, close_figures):
    results, _ = built
    metrics = analysis.load_run_metrics(results)
    fig, bands = report.training_curves_figure(metrics, n_resamples=200)
    axes = np.asarray(fig.axes).reshape(2, 2)
    assert [ax.get_title() for ax in axes.ravel()] == [f"{m}: {c}" for m in ("tiny-m", "tiny-s") for c in
                                                        ("entropy", "reward_mean")]  # fmt: skip
    assert axes[0, 0].get_yscale() == "log" and axes[0, 1].get_ylabel() == "reward_mean (mean over seeds)"
    order = analysis.entry_order(ENTRIES)
    assert _legend_texts(axes[0, 1].get_legend()) == order  # one legend, every entry in the display order
    # each entry's line is its mean over seeds at every step, with a CI band around it
    ax = axes[1, 1]  # tiny-s, reward
    d = bands[(bands.model == "tiny-s") & (bands.metric == "reward_mean")]
    lines = {tuple(np.round(line.get_ydata(), 9)) for line in ax.get_lines()}
    for entry in ENTRIES:
        e = d[d.entry == entry].sort_values("step")
        expected = np.mean([0.3 + 0.01 * e.step + 0.001 * s for s in SEEDS], axis=0)
        assert np.allclose(e["mean"], expected)
        assert tuple(np.round(e["mean"].to_numpy(), 9)) in lines
    assert len(ax.collections) == len(ENTRIES)  # the bands
    assert set(bands["n_seeds"]) == {3} and (bands.ci_low <= bands["mean"]).all()
    empty_fig, empty = report.training_curves_figure(pd.DataFrame())
    assert empty.empty and "no training metrics" in empty_fig.axes[0].texts[0].get_text()


def test_the_validation_curve_starts_before_training(close_figures):
    """Runs that measured the validation split (val_every) get a third panel: val/mean against step, with each
    run's score before training (val/mean_before on its first step) as step 0; runs without it keep two panels."""
    from bandpo.report.figures import TRAINING_CURVES, with_validation_before

    rows = []
    for entry in ("grpo", "bandpo_kl"):
        for seed in (0, 1):
            for step in (1, 2, 3, 4):
                row = {"model": "lm", "entry": entry, "seed": seed, "step": step, "entropy": 0.5, "reward_mean": 0.3}
                if step == 1:
                    row["val/mean_before"] = 0.2 + 0.01 * seed
                if step in (2, 4):
                    row["val/mean"] = 0.2 + 0.1 * step + 0.01 * seed + (0.05 if entry == "grpo" else 0.0)
                rows.append(row)
    metrics = pd.DataFrame(rows)
    fig, bands = report.training_curves_figure(with_validation_before(metrics), columns=TRAINING_CURVES,
                                               n_resamples=200)  # fmt: skip
    assert [ax.get_title() for ax in fig.axes[:3]] == ["lm: entropy", "lm: reward_mean", "lm: val/mean"]
    val = bands[(bands.metric == "val/mean") & (bands.entry == "bandpo_kl")].sort_values("step")
    assert val["step"].tolist() == [0, 2, 4] and np.allclose(val["mean"], [0.205, 0.405, 0.605])
    no_before = metrics.drop(columns=["val/mean_before"])
    assert with_validation_before(no_before) is no_before  # nothing measured before training: nothing added
    two, _ = report.training_curves_figure(metrics.drop(columns=["val/mean", "val/mean_before"]),
                                           columns=TRAINING_CURVES, n_resamples=200)  # fmt: skip
    assert [ax.get_title() for ax in two.axes[:2]] == ["lm: entropy", "lm: reward_mean"] and len(two.axes) == 2


def test_clipfrac_figure(built, close_figures):
    results, _ = built
    metrics = analysis.load_run_metrics(results)
    fig, data = report.clipfrac_figure(metrics, n_resamples=200)
    assert set(data["bucket"]) == set(BUCKET_LABELS) and set(data["entry"]) == set(ENTRIES)
    axes = np.asarray(fig.axes).reshape(2, 2)
    upper = axes[1, 0]  # tiny-s, upper
    assert upper.get_title().startswith("tiny-s: upper clip") and "off-policy updates" in upper.get_ylabel()
    assert [t.get_text() for t in upper.get_xticklabels()] == list(BUCKET_LABELS)
    assert _legend_texts(axes[0, 1].get_legend()) == analysis.entry_order(ENTRIES)
    # bar heights: percent of the off-policy statistic, 0.2% x (bucket index + 1) x 2 for the upper side
    heights = sorted(round(p.get_height(), 6) for p in upper.patches if p.get_height() > 0)
    expected = sorted(round(100 * 0.002 * (j + 1) * 2, 6) for j in range(len(BUCKET_LABELS)) for _ in ENTRIES)
    assert heights == expected


def test_clipfrac_buckets_come_from_the_logged_columns(close_figures):
    """The buckets are whatever the run logged (here a trainer with two buckets), in the logged order."""
    rows = [
        {"model": "m", "entry": "x", "seed": s, "step": t, "clipfrac_upper/high": 0.1, "clipfrac_upper/low": 0.3,
         "clipfrac_lower/high": 0.2, "clipfrac_lower/low": 0.0}
        for s in (0, 1) for t in (1, 2)
    ]  # fmt: skip
    fig, data = report.clipfrac_figure(pd.DataFrame(rows), n_resamples=100)
    assert list(dict.fromkeys(data["bucket"])) == ["high", "low"]
    upper = fig.axes[0]
    assert [t.get_text() for t in upper.get_xticklabels()] == ["high", "low"] and "all updates" in upper.get_ylabel()
    assert [round(p.get_height(), 6) for p in upper.patches if p.get_height() > 0] == [10.0, 30.0]


def test_final_scores_figure(built, close_figures):
    results, _ = built
    stats = analysis.score_stats(analysis.load_eval_scores(results), n_resamples=200)
    fig, data = report.final_scores_figure(stats)
    assert set(data["label"]) == {f"mean@{N}", f"pass@{N}"} and set(data["entry"]) == {"base", *ENTRIES}
    axes = np.asarray(fig.axes).reshape(2, 2)
    ax = axes[1, 0]  # tiny-s, mean@8
    assert ax.get_title() == f"tiny-s: mean@{N}" and ax.get_xlabel() == f"mean@{N} (%)"
    entries = [t.get_text() for t in ax.get_yticklabels()]
    assert entries == analysis.entry_order(["base", *ENTRIES])
    widths = [p.get_width() for p in ax.patches]
    d = data[(data.model == "tiny-s") & (data.metric == "mean")].set_index("entry")
    assert np.allclose(widths, [100 * d.loc[e, "mean"] for e in entries])
    assert widths[entries.index("bandpo_kl")] == pytest.approx(100 * np.mean([0.50, 0.52, 0.55]))
    assert len(ax.collections) == 1  # the CI error bars
    empty_fig, empty = report.final_scores_figure(pd.DataFrame())
    assert empty.empty and "no evaluation scores" in empty_fig.axes[0].texts[0].get_text()


def _two_rows_of_metrics(n_many: int = 20) -> pd.DataFrame:
    """Per-step metrics of two model sizes: "m-small" with grpo and two entries, "m-large" with grpo, one of those
    and ``n_many`` - 2 more (a row whose legend needs two columns), each with one clip-fraction bucket."""
    rows = []
    entries = {
        "m-small": ["grpo", "alpha", "beta"],
        "m-large": ["grpo", "beta", *(f"e{k:02d}" for k in range(n_many - 2))],
    }
    for model, names in entries.items():
        for k, entry in enumerate(names):
            for seed in (0, 1):
                for step in (1, 2, 3):
                    rows.append({"model": model, "entry": entry, "seed": seed, "step": step,
                                 "entropy": 0.5 + 0.01 * k, "reward_mean": 0.1 * step + 0.001 * k,
                                 "clipfrac_upper/p0": 0.01 * (k + 1),
                                 "clipfrac_lower/p0": 0.002 * (k + 1)})  # fmt: skip
    return pd.DataFrame(rows)


def _row_legends(fig, n_rows: int) -> list[dict[str, tuple]]:
    """Per row of panels, the legend of its last panel: {entry: colour of its handle (RGBA)}."""
    from matplotlib.colors import to_rgba
    from matplotlib.patches import Patch

    axes = np.asarray(fig.axes).reshape(n_rows, -1)
    out = []
    for ax in axes[:, -1]:
        legend = ax.get_legend()
        assert legend is not None, ax.get_title()
        colours = [h.get_facecolor() if isinstance(h, Patch) else h.get_color() for h in legend.legend_handles]
        texts = [t.get_text() for t in legend.get_texts()]
        out.append({t: tuple(np.round(to_rgba(c), 6)) for t, c in zip(texts, colours, strict=True)})
    return out


@pytest.mark.parametrize("which", ["training_curves", "clipfrac_buckets"])
def test_every_row_of_panels_has_a_legend_of_its_entries_in_the_figures_colours(which, close_figures):
    """Each model size's row of panels has its own legend (its entries, in the display order, outside on the
    right), and an entry has one colour in every row: the palette is the figure's, over all its entries."""
    from bandpo.report.figures import legend_columns

    metrics = _two_rows_of_metrics()
    draw = report.training_curves_figure if which == "training_curves" else report.clipfrac_figure
    fig, _ = draw(metrics, n_resamples=50)
    large, small = _row_legends(fig, 2)  # rows sorted by model name: m-large, m-small
    for legend, model in ((large, "m-large"), (small, "m-small")):
        assert list(legend) == analysis.entry_order(metrics.loc[metrics.model == model, "entry"]), model
    assert large["grpo"] == small["grpo"] and large["beta"] == small["beta"]  # one colour per entry in every row
    everything = {**large, **small}
    assert len(set(everything.values())) == len(everything)  # and distinct entries, distinct colours
    if which == "clipfrac_buckets":  # the bars are drawn in the legend's colours
        upper_small = np.asarray(fig.axes).reshape(2, 2)[1, 0]
        faces = {tuple(np.round(p.get_facecolor(), 6)) for p in upper_small.patches if p.get_height() > 0}
        assert faces == {small[e] for e in small}
    # a compact legend: fontsize small, as many columns as the row's height needs
    assert legend_columns(3, 3.6) == 1 and legend_columns(20, 3.6) == 2 and legend_columns(60, 3.6) == 4


def test_final_scores_panels_are_as_tall_as_their_bars(close_figures):
    """Each model's row of panels is sized by its own number of bars, not by every entry of every model."""
    rows = []
    for model, n in (("m-few", 3), ("m-many", 12)):
        for k in range(n):
            for fam in ("mean", "pass"):
                rows.append({"task": "all", "model": model, "entry": f"e{k:02d}", "metric": fam,
                             "label": f"{fam}@8", "mean": 0.3 + 0.01 * k, "ci_low": 0.28 + 0.01 * k,
                             "ci_high": 0.32 + 0.01 * k})  # fmt: skip
    fig, data = report.final_scores_figure(pd.DataFrame(rows))
    axes = np.asarray(fig.axes).reshape(2, 2)
    height = [ax.get_position().height * fig.get_figheight() for ax in axes[:, 0]]  # inches: m-few, m-many
    assert [len(ax.patches) for ax in axes[:, 0]] == [3, 12]
    assert height[1] / height[0] == pytest.approx(12 / 3, rel=1e-6)
    assert height[0] < 1.5  # three bars: a short panel
    assert len(data) == 2 * (3 + 12)


def test_bounds_figure_draws_only_the_pages_rules(built, close_figures):
    """The bound figure draws the rules the page compares (its leaderboard's methods, with BandPO's divergence),
    the baseline's and the simplex limit, and its data is what it draws."""
    from bandpo.report.figures import bound_key, bound_keys

    data = bounds_script.bounds_table(delta=0.1, p=np.linspace(0.01, 0.99, 50))
    fig, plotted = report.bounds_figure(data, methods={"bandpo_kl", "clip_higher"})
    assert _legend_texts(fig.legends[0]) == ["BandPO-KL", "GRPO", "Clip-Higher", report.SIMPLEX]
    assert list(dict.fromkeys(plotted["method"])) == ["BandPO-KL", "GRPO", "Clip-Higher", report.SIMPLEX]
    ratio = fig.axes[0]
    assert len([line for line in ratio.get_lines() if len(line.get_xdata()) == 50]) == 2 * 4  # lo and hi each
    assert bound_key("BandPO-chi2") == "bandpo_chi2" and bound_key("Clip-Higher") == "clip_higher"
    none_fig, none = report.bounds_figure(data, methods=["vespo"], baseline=None)
    assert none.empty and "no rule of this page" in none_fig.axes[0].texts[0].get_text()
    # the leaderboard's rules: method ids, BandPO with its divergence; the base model is no rule
    board = pd.DataFrame({"entry": ["base", "grpo", "b", "c"], "method": ["base", "grpo", "bandpo", "dcpo"],
                          "params_json": ["", "{}", '{"divergence": "chi2"}', "{}"]})  # fmt: skip
    assert bound_keys(board) == {"grpo", "bandpo_chi2", "dcpo"}
    # the report's bound figure: the built board's rules only (grpo, clip_higher, bandpo kl and tv)
    results, _ = built
    drawn = set(pd.read_csv(results / "figures" / "bounds.csv")["method"])
    assert drawn == {"GRPO", "Clip-Higher", "BandPO-KL", "BandPO-TV", report.SIMPLEX}


def _forest_board() -> pd.DataFrame:
    """A leaderboard of two model sizes: the base model, the baseline, entries with a paired difference (one the
    primary, one whose runs are the baseline's again) and a row of another experiment."""
    cols = ["experiment", "subset", "model", "entry", "method", "baseline", "n_seeds", "mean@8", "mean@8_diff",
            "mean@8_diff_t_ci_low", "mean@8_diff_t_ci_high", "mean@8_diff_sd", "mean@8_margin",
            "mean@8_verdict_holm", "mean@8_label", "mean@8_role"]  # fmt: skip
    rows = [
        ("main", "", "tiny-s", "base", "base", "grpo", 3, 0.3, -0.1, -0.12, -0.08, 0.01, None, "", "", ""),
        ("main", "", "tiny-s", "grpo", "grpo", "grpo", 5, 0.4, None, None, None, None, None, "", "", ""),
        ("main", "", "tiny-s", "low", "x", "grpo", 3, 0.41, 0.01, -0.02, 0.04, 0.01, 0.02, "better", "", "secondary"),
        ("main", "", "tiny-s", "top", "bandpo", "grpo", 5, 0.43, 0.03, 0.0, 0.06, 0.02, 0.02, "undecided",
         "undecided (look 1 of 4, 5 pairs)", "primary"),
        ("main", "", "tiny-s", "same", "y", "grpo", 3, 0.4, 0.0, 0.0, 0.0, 0.0, 0.02, "undecided", "undecided",
         "secondary"),
        ("random-reward", "", "tiny-s", "rr", "bandpo", "grpo", 3, 0.2, -0.2, -0.3, -0.1, 0.05, 0.02, "undecided",
         "", "secondary"),
        ("main", "", "tiny-m", "grpo", "grpo", "grpo", 3, 0.5, None, None, None, None, None, "", "", ""),
        ("main", "", "tiny-m", "low", "x", "grpo", 3, 0.48, -0.02, -0.05, 0.01, 0.01, 0.02, "not better by the margin",
         "", "secondary"),
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def test_forest_plot_of_the_paired_differences(close_figures):
    """The forest plot: per model size, each trained entry of main at its paired difference (points) with its t
    interval, largest at the top, the margin shaded from 0 to +delta, the verdict's words in the legend, the
    primary starred, and an entry identical to the baseline labelled so."""
    from bandpo.report.forest import MARGIN_LABEL, forest_figure

    assert report.FIGURES[0] == "forest" and "forest" in report.FIGURE_CAPTIONS
    fig, data = forest_figure(_forest_board())
    assert list(data["model"]) == ["tiny-m", "tiny-s", "tiny-s", "tiny-s"]  # no base, baseline or other experiment
    small = data[data.model == "tiny-s"]
    assert list(small["entry"]) == ["top", "low", "same"]  # sorted by the difference, largest first
    assert np.allclose(small["diff"], [3.0, 1.0, 0.0]) and np.allclose(small["ci_low"], [0.0, -2.0, 0.0])
    assert np.allclose(small["ci_high"], [6.0, 4.0, 0.0]) and (data["margin"] == 2.0).all()
    assert list(small["verdict"]) == ["undecided (look 1 of 4, 5 pairs)", "better", "identical to grpo"]
    assert list(small["label"]) == ["★ top (5 seeds)", "low (3 seeds)", "same (3 seeds)"]
    assert data.loc[data.model == "tiny-m", "verdict"].tolist() == ["not better by the margin"]
    ax_m, ax_s = fig.axes
    assert "tiny-s" in ax_s.get_title() and "mean@8" in ax_s.get_xlabel()
    ticks = sorted(ax_s.get_yticklabels(), key=lambda t: -t.get_position()[1])  # top to bottom
    assert [t.get_text() for t in ticks] == list(small["label"])
    assert [t.get_fontweight() for t in ticks] == ["bold", "normal", "normal"]  # the primary's
    points = {
        round(line.get_xdata()[0], 6): line.get_ydata()[0] for line in ax_s.get_lines() if line.get_marker() != "None"
    }
    assert set(points) == {3.0, 1.0, 0.0} and points[3.0] > points[1.0] > points[0.0]
    assert any(np.allclose(line.get_xdata(), 0.0) and line.get_linestyle() == "-" for line in ax_s.get_lines())
    fig.canvas.draw()
    spans = [ax_s.transData.inverted().transform(p.get_window_extent().get_points())[:, 0] for p in ax_s.patches]
    assert any(np.allclose(x, [0.0, 2.0], atol=1e-6) for x in spans)  # the margin, shaded from 0 to +delta
    assert _legend_texts(ax_s.get_legend()) == [MARGIN_LABEL, "undecided (look 1 of 4, 5 pairs)", "better",
                                                "identical to grpo"]  # fmt: skip
    assert _legend_texts(ax_m.get_legend()) == [MARGIN_LABEL, "not better by the margin"]
    # panel heights follow the rows: three rows against one (sized as two, the least)
    heights = [ax.get_position().height for ax in (ax_m, ax_s)]
    assert heights[1] / heights[0] == pytest.approx(3 / 2, rel=1e-6)


def test_forest_plot_without_paired_comparisons_is_a_placeholder(built, close_figures):
    from bandpo.report.forest import forest_figure

    for table in (pd.DataFrame(), _forest_board()[["model", "entry", "mean@8"]],
                  _forest_board().query("entry in ['base', 'grpo']")):  # fmt: skip
        fig, data = forest_figure(table)
        assert data.empty and "no paired comparison" in fig.axes[0].texts[0].get_text()
    results, _ = built  # the report draws it from its leaderboard, first of the figures
    forest = pd.read_csv(results / "figures" / "forest.csv")
    assert set(forest["entry"]) == {e for e in ENTRIES if e != "grpo"} and set(forest["model"]) == {"tiny-s", "tiny-m"}


# ----------------------------------------------------------------------------------------------------------------
# HTML: escaping (static) and rendering (Chromium)


class _Rows(HTMLParser):
    """Collects the rows of the leaderboard tables: (model, entry, cell texts) and every <script>/<img> seen."""

    def __init__(self):
        super().__init__()
        self.rows, self.scripts, self.imgs, self.title = [], 0, [], ""
        self._model, self._row, self._cell, self._in_title = None, None, None, False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and "leaderboard" in (a.get("class") or ""):
            self._model = a.get("data-model")
        elif tag == "tr" and self._model is not None and "data-entry" in a:
            self._row = [self._model, a["data-entry"], []]
        elif tag == "td" and self._row is not None:
            self._cell = ""
        elif tag == "script":
            self.scripts += 1
        elif tag == "img":
            self.imgs.append(a.get("src", ""))
        elif tag == "title":
            self._in_title = True

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self._row[2].append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(tuple(self._row))
            self._row = None
        elif tag == "table":
            self._model = None
        elif tag == "title":
            self._in_title = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data
        if self._in_title:
            self.title += data


def parse(text: str) -> _Rows:
    p = _Rows()
    p.feed(text)
    return p


def test_html_is_standalone_and_escaped(built):
    results, _ = built
    page = (results / "leaderboard.html").read_text()
    p = parse(page)
    assert p.scripts == 1 and "pwned" not in p.title
    assert all(src.startswith("data:image/png;base64,") for src in p.imgs) and len(p.imgs) == len(MAIN_FIGURES)
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page)
    assert XSS not in page and "<img src=x" not in page and "evil&lt;img src=x onerror=&#34;" in page
    assert "script-src 'sha256-" in page  # only the page's own script may run
    entries = {(m, e) for m, e, _ in p.rows}
    assert entries == {(m, e) for m in ("tiny-s", "tiny-m") for e in ("base", *ENTRIES)}
    # filters: the experiment (here main: runs written without one) and every model size
    assert re.search(r'<option value="main">main</option>', page)
    assert '<option value="tiny-s">tiny-s</option>' in page and '<option value="tiny-m">tiny-m</option>' in page
    # parameters: each key=value in an unbreakable span, joined by ", " (the only place a line may break)
    assert '<span class="kv">divergence=kl</span>, <span class="kv">delta=0.05</span>' in page
    assert "How to read these numbers" in page and len(re.findall(r"<figcaption>", page)) == len(MAIN_FIGURES)


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium not installed (Debian: `apt-get install -y chromium`; .ci/run installs it)",
)


def chromium(url: str, tmp_path: Path, *args: str, size: str = "1200,800") -> subprocess.CompletedProcess:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--mute-audio",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        f"--window-size={size}",
        *args,
        url,
    ]
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=env, check=True)


@needs_chromium
def test_html_renders_in_chromium(built, tmp_path):
    results, _ = built
    page = results / "leaderboard.html"
    shot = tmp_path / "shot.png"
    chromium(page.as_uri(), tmp_path, f"--screenshot={shot}")
    import matplotlib.image

    img = matplotlib.image.imread(shot)
    assert img.shape[0] >= 700 and img.shape[1] >= 1100
    assert float(img[..., :3].std()) > 0.01  # not blank
    assert float((img[..., :3].mean(axis=-1) < 0.5).mean()) > 0.001  # some dark pixels: text

    dom = chromium(page.as_uri(), tmp_path, "--dump-dom", "--virtual-time-budget=3000").stdout
    assert 'data-sortable="ready"' in dom  # the script ran (the CSP admits it)
    p = parse(dom)
    assert "pwned" not in p.title and p.scripts == 1
    by_model = {}
    for model, entry, cells in p.rows:
        by_model.setdefault(model, []).append(entry)
        assert len(cells) == len(p.rows[0][2])
    assert set(by_model) == {"tiny-s", "tiny-m"}
    assert all(sorted(v) == sorted(["base", *ENTRIES]) for v in by_model.values())
    assert any(f"note={XSS}" in cells[2] for _, e, cells in p.rows if e == XSS_ENTRY)  # shown as text, inert

    # sorting: #sort=<column>:asc runs the page's sort on load (what a header click does)
    dom = chromium(page.as_uri() + f"#sort=mean@{N}:asc", tmp_path, "--dump-dom", "--virtual-time-budget=3000").stdout
    rows = [(m, e) for m, e, _ in parse(dom).rows if m == "tiny-s"]
    assert [e for _, e in rows] == [XSS_ENTRY, "base", "clip_higher", "grpo", "bandpo_kl"]
    assert re.search(r'data-key="mean@8"[^>]*aria-sort="ascending"', dom)

    # filters: #model=<size> (what choosing it in the select does) hides the other size's table
    dom = chromium(page.as_uri() + "#model=tiny-s", tmp_path, "--dump-dom", "--virtual-time-budget=3000").stdout
    sections = dict(re.findall(r'<section class="board" id="[^"]+" data-model="([^"]+)"( hidden="")?', dom))
    assert sections == {"tiny-s": "", "tiny-m": ' hidden=""'}
    dom = chromium(page.as_uri() + "#experiment=main&model=tiny-m", tmp_path, "--dump-dom",
                   "--virtual-time-budget=3000").stdout  # fmt: skip
    sections = dict(re.findall(r'<section class="board" id="[^"]+" data-model="([^"]+)"( hidden="")?', dom))
    assert sections == {"tiny-s": ' hidden=""', "tiny-m": ""} and "<tr hidden" not in dom


# Added to a copy of the page (with its Content-Security-Policy removed) to measure it once loaded: the document's
# and every table container's overflow, each figure's natural width, and the lines each key=value label takes.
MEASURE = """<script>
window.addEventListener("load", function () {
  var out = {innerWidth: window.innerWidth, scrollWidth: document.documentElement.scrollWidth, tables: [],
             images: [], kv: []};
  document.querySelectorAll(".scroll").forEach(function (d) {
    out.tables.push([d.parentNode.id, d.scrollWidth, d.clientWidth]);
  });
  document.querySelectorAll("img").forEach(function (i) {
    out.images.push([i.naturalWidth, i.getBoundingClientRect().width]);
  });
  document.querySelectorAll(".kv").forEach(function (k) {
    var row = k.closest("tr").getAttribute("data-entry");
    out.kv.push([row, k.textContent, Math.round(k.getBoundingClientRect().height)]);
  });
  var pre = document.createElement("pre");
  pre.id = "measure";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def measure_page(page: Path, tmp_path: Path, width: int = 1400) -> dict:
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text(encoding="utf-8"))
    copy = tmp_path / "measured.html"
    copy.write_text(text.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    dom = chromium(copy.as_uri(), tmp_path, "--dump-dom", "--virtual-time-budget=5000", size=f"{width},900").stdout
    m = re.search(r'<pre id="measure">(.*?)</pre>', dom, re.S)
    assert m, dom[-2000:]
    return json.loads(html.unescape(m[1]))


@needs_chromium
@pytest.mark.parametrize("which", ["built", "published"])
def test_page_layout_in_chromium(which, built, tmp_path):
    """At 1,400 px nothing scrolls sideways (the page, nor any table), every figure renders, and a parameter label
    breaks only between its key=value parts. Checked on a built page and on the published results/leaderboard.html."""
    page = built[0] / "leaderboard.html" if which == "built" else ROOT / "results" / "leaderboard.html"
    m = measure_page(page, tmp_path)
    assert m["innerWidth"] == 1400 and m["scrollWidth"] <= m["innerWidth"], m
    assert m["tables"] and all(scroll <= client for _, scroll, client in m["tables"]), m["tables"]
    # the built page has no runs of the other experiments, so their figures are left off; the published one shows
    # the figures of the experiments it has runs of
    # the published page has the random-reward control (train: {reward: random}) and no probe or off-policy runs
    shown = [*MAIN_FIGURES, "random_reward_entropy"]
    assert len(m["images"]) == (len(MAIN_FIGURES) if which == "built" else len(shown)), m["images"]
    assert all(natural > 0 and shown > 0 for natural, shown in m["images"]), m["images"]
    # one line each (the height of one line), except a part too long for the column (the test's hostile note=...)
    one_line = [k for k in m["kv"] if k[0] != XSS_ENTRY]
    assert one_line and all(h == min(h for _, _, h in one_line) > 0 for _, _, h in one_line), one_line


# ----------------------------------------------------------------------------------------------------------------
# steps.csv: the per-step metrics behind runs.csv and the training figures

RUN_STEP_COLUMNS = ["steps", "entropy_first", "entropy_final", "reward_final", "accuracy_final", "clipfrac"]


def _random_metrics(seed: int = 0) -> pd.DataFrame:
    """Per-step metrics of a small run set with full-precision random values: two experiments, runs with and
    without off-policy updates, a step count not a multiple of 10, the probe's keys every 4th step, a key only
    some runs log."""
    from bandpo.analysis.steps import lowest_bucket

    rng = np.random.default_rng(seed)
    rows = []
    for xp, entries, steps, offpolicy in (("main", ("grpo", "bandpo_kl"), 23, True),
                                          ("probe", ("grpo", "bandpo_kl"), 17, True),
                                          ("onpolicy", ("grpo",), 12, False)):  # fmt: skip
        for entry in entries:
            for seed_ in range(3):
                for step in range(1, steps + 1):
                    m = {"profile": PROFILE, "experiment": xp, "model": "tiny-s", "entry": entry, "seed": seed_,
                         "step": step, "entropy": rng.uniform(0.05, 0.6), "reward_mean": rng.uniform(-1, 1),
                         "accuracy": rng.uniform(0, 1), "response_length": 20.0,
                         "grader_retries": int(rng.integers(0, 3)),
                         "grader_timeouts": int(rng.random() < 0.05)}  # fmt: skip
                    keys = ["approx_kl_k3", "clipfrac", "clipfrac_upper", "clipfrac_lower", "stopped_frac_pos",
                            "stopped_frac_neg", f"token_frac/{lowest_bucket()}", f"stopped_frac_pos/{lowest_bucket()}",
                            f"stopped_frac_neg/{lowest_bucket()}",
                            *(f"clipfrac_{d}/{b}" for d in ("upper", "lower") for b in BUCKET_LABELS)]  # fmt: skip
                    for k in keys:
                        m[k] = 10 ** rng.uniform(-5, -1)
                        if offpolicy:
                            m[f"offpolicy/{k}"] = 10 ** rng.uniform(-5, -1)
                    if xp == "probe" and step % 4 == 0:
                        m["probe/p_correct"], m["probe/accuracy"] = rng.uniform(0, 0.2), rng.uniform(0, 1)
                    rows.append(m)
    return pd.DataFrame(rows)


def _summaries_of(metrics: pd.DataFrame) -> pd.DataFrame:
    """runs.csv's training columns of each experiment, as the report computes them (`run_stats` per experiment)."""
    frames = []
    for xp, g in metrics.groupby("experiment", sort=True):
        per_run, _ = analysis.run_stats(g, pd.DataFrame(columns=analysis.load.SUMMARY_COLUMNS))
        frames.append(per_run.assign(experiment=xp))
    return pd.concat(frames, ignore_index=True).set_index(["experiment", "model", "entry", "seed"]).sort_index()


def _assert_recomputed(ours: pd.DataFrame, published: pd.DataFrame) -> None:
    """Training columns recomputed from steps.csv equal the report's to steps.csv's 5 significant digits (and the
    published 6)."""
    assert list(ours.index) == list(published.index)
    for col in RUN_STEP_COLUMNS:
        a, b = ours[col].to_numpy(np.float64), published[col].to_numpy(np.float64)
        assert (np.isnan(a) == np.isnan(b)).all(), col
        np.testing.assert_allclose(a[~np.isnan(a)], b[~np.isnan(b)], rtol=6e-5, atol=1e-9, err_msg=col)


def test_steps_csv_recomputes_the_run_statistics_and_figure_data(tmp_path):
    """steps.csv of a random run set: one row per (run, step); runs.csv's training columns (entropy at step 1 and
    final = mean over the last 10% of steps, final reward and accuracy, clip fraction) and the clip-fraction
    figure's data recompute from the file alone, within its rounding; runs without off-policy updates keep their
    all-updates statistics (flag offpolicy = 0)."""
    from bandpo.analysis.steps import read_steps, write_steps
    from bandpo.report.figures import clipfrac_data

    metrics = _random_metrics()
    path = write_steps(metrics, tmp_path / "steps.csv")
    raw = pd.read_csv(path)
    assert len(raw) == len(metrics) and not raw.duplicated(["experiment", "model", "entry", "seed", "step"]).any()
    assert list(raw.columns[:6]) == ["experiment", "model", "entry", "seed", "step", "offpolicy"]
    assert {"clipfrac_upper/p0.0-0.2", "stopped_frac_neg/p0.0-0.2", "approx_kl_k3", "probe/p_correct"} <= set(raw)
    assert "response_length" not in raw and not any(c.startswith("offpolicy/") for c in raw)
    # the grading record of each step's rollouts, exact (a rerun's differing reward is traced to a time budget)
    for key in ("grader_retries", "grader_timeouts"):
        assert raw[key].tolist() == metrics.sort_values(["experiment", "model", "entry", "seed", "step"])[key].tolist()
    assert set(raw.loc[raw.experiment == "onpolicy", "offpolicy"]) == {0} and raw.loc[raw.experiment == "main",
                                                                                       "offpolicy"].all()  # fmt: skip
    # 5 significant digits: every number's text has at most 5 of them
    body = path.read_text().splitlines()[1:]
    digits = [len(re.sub(r"^0\.0*", "", f.split("e")[0].lstrip("-")).replace(".", "")) for line in body
              for f in line.split(",")[6:] if f]  # fmt: skip
    assert max(digits) <= 5
    steps = read_steps(path)
    for xp in ("main", "onpolicy"):  # each experiment as the report reads it: off-policy statistics where logged
        ours = _summaries_of(steps[steps.experiment == xp])
        _assert_recomputed(ours, _summaries_of(metrics[metrics.experiment == xp]))
    assert _summaries_of(steps[steps.experiment == "onpolicy"])["clipfrac"].notna().all()
    main = metrics[metrics.experiment == "main"]
    fig_ours, which = clipfrac_data(steps[steps.experiment == "main"])
    fig_theirs, which_theirs = clipfrac_data(main)
    assert which == which_theirs == "off-policy updates" and len(fig_ours) == len(fig_theirs) == 2 * 3 * 5 * 2
    np.testing.assert_allclose(fig_ours["value"], fig_theirs["value"], rtol=6e-5)
    probe = steps[(steps.experiment == "probe") & steps["probe/p_correct"].notna()]
    assert len(probe) == 2 * 3 * 4 and (probe["step"] % 4 == 0).all()
    # a design axis' runs also keep the all-updates statistics its rules read (all/<key>), which read_steps gives
    # back under the plain names: the axis' per-run outcomes recompute from the file
    from bandpo.analysis.axis import UPDATE_MEANS

    keys = [k for k in UPDATE_MEANS if k in metrics]
    assert "clipfrac_upper/p0.0-0.2" in keys
    path = write_steps(metrics, tmp_path / "axis_steps.csv", UPDATE_MEANS, ["main"])
    raw = pd.read_csv(path)
    assert {f"all/{k}" for k in keys} <= set(raw)
    assert raw.loc[raw.experiment != "main", "all/clipfrac_upper"].isna().all()
    back = read_steps(path)
    assert not any(c.startswith("all/") for c in back)
    ids = ["model", "entry", "seed", "step"]
    ours, theirs = (f.sort_values(ids).reset_index(drop=True) for f in (back[back.experiment == "main"], main))
    for k in keys:
        np.testing.assert_allclose(ours[k].to_numpy(float), theirs[k].to_numpy(float), rtol=6e-5, err_msg=k)


def test_report_writes_steps_csv_that_recomputes_runs_csv(built):
    """The report's own steps.csv (build_report) and runs.csv agree."""
    from bandpo.analysis.steps import read_steps

    results, _ = built
    steps = read_steps(results / "steps.csv")
    runs = pd.read_csv(results / "runs.csv").set_index(["experiment", "model", "entry", "seed"]).sort_index()
    _assert_recomputed(_summaries_of(steps), runs)
    assert len(steps) == int(runs["steps"].sum())


def test_published_steps_csv_recomputes_the_published_runs_csv():
    """results/steps.csv, where published, gives results/runs.csv's training columns; until a publication run
    writes it (the run folders of the published run are not committed), the report and the DAG must publish it."""
    from bandpo.analysis.steps import read_steps

    published = ROOT / "results"
    assert "steps.csv" in report.PUBLISHED_TABLES and '"steps.csv"' in REPORT_RULE
    assert 'steps=f"{RESULTS}/steps.csv"' in REPORT_RULE
    if (published / "steps.csv").is_file():
        runs = pd.read_csv(published / "runs.csv", keep_default_na=False, na_values=[""])
        runs = runs.set_index(["experiment", "model", "entry", "seed"]).sort_index()
        _assert_recomputed(_summaries_of(read_steps(published / "steps.csv")), runs)
        assert (published / "steps.csv").stat().st_size < 3_000_000


# ----------------------------------------------------------------------------------------------------------------
# Publishing, CLI, Snakemake report


def test_publish(built, tmp_path):
    results, _ = built
    (tmp_path / "top").mkdir()
    (tmp_path / "top" / "axis.csv").write_text("an older run's table\n")  # this run made none: it must not stay
    written = report.publish(results, tmp_path / "top", config={"profile": "embedded", "seeds": [0, 1, 2]})
    assert not (tmp_path / "top" / "axis.csv").exists()
    names = sorted(p.relative_to(tmp_path / "top").as_posix() for p in written)
    tables = [n for n in report.PUBLISHED_TABLES if (results / n).is_file()]  # axis tables: only with an axis
    assert set(report.PUBLISHED_TABLES) - set(tables) == {"axis.csv", "axis_runs.csv"}
    # each figure with the data it plotted: the published figures/<name>.csv never lag the picture
    expected = [
        *report.LEADERBOARD_FILES,
        *tables,
        *(f"figures/{n}.{ext}" for n in report.FIGURES for ext in ("png", "csv")),
    ]
    expected.append("provenance.json")
    assert names == sorted(expected)
    assert (tmp_path / "top" / "leaderboard.html").read_bytes() == (results / "leaderboard.html").read_bytes()
    prov = json.loads((tmp_path / "top" / "provenance.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    assert prov["git_commit"] == head and isinstance(prov["code_dirty"], bool) and "git_dirty" not in prov
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", prov["published_on"])  # the date the docs name the publication by
    assert prov["code_dirty"] == bool(prov["code_changes"])
    assert prov["packages"]["pandas"] == pd.__version__
    assert prov["config"] == {"profile": "embedded", "seeds": [0, 1, 2]}
    assert prov["base_models"] == [] and {n["stage"] for n in prov["numerics"]} == {"train", "eval"}
    with pytest.raises(FileNotFoundError, match="missing"):
        report.publish(tmp_path / "nothing", tmp_path / "top")


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env).stdout


def test_provenance_records_code_changes_not_outputs(tmp_path):
    """A fresh clone that ran the DAG (outputs rewritten under results/, new files under resources/, logs/,
    .snakemake/) is not dirty; a changed .py, a changed config and a new untracked module are, each named with a
    hash of its diff that is the same for the same change."""
    from bandpo.core.provenance import code_changes

    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "config").mkdir()
    (repo / "results").mkdir()
    (repo / "pkg" / "mod.py").write_text("X = 1\n")
    (repo / "config" / "config.yaml").write_text("seeds: [0, 1, 2]\n")
    (repo / "results" / "leaderboard.csv").write_text("a\n1\n")
    (repo / ".gitignore").write_text("/resources/\n/logs/\n.snakemake/\n/results/*/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "init")
    outputs = ("results/leaderboard.csv", "results/steps.csv", "results/embedded/runs/m/e/seed0/metrics.jsonl",
               "resources/models/m/seed0/config.json", "logs/embedded/report.log", ".snakemake/log/x.log")  # fmt: skip
    for path in outputs:
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("output\n")
    assert code_changes(repo) == {"code_dirty": False, "code_changes": []}
    prov = report.provenance(repo=repo)
    assert prov["git_commit"] == _git(repo, "rev-parse", "HEAD").strip() and prov["code_dirty"] is False

    (repo / "pkg" / "mod.py").write_text("X = 2\n")
    (repo / "config" / "config.yaml").write_text("seeds: [0]\n")
    (repo / "pkg" / "new.py").write_text("Y = 1\n")
    got = code_changes(repo / "pkg")  # any folder of the checkout
    assert got["code_dirty"] is True
    assert [(c["path"], c["status"]) for c in got["code_changes"]] == [
        ("config/config.yaml", "modified"), ("pkg/mod.py", "modified"), ("pkg/new.py", "untracked")]  # fmt: skip
    assert all(re.fullmatch(r"[0-9a-f]{12}", c["sha256"]) for c in got["code_changes"])
    first = {c["path"]: c["sha256"] for c in got["code_changes"]}
    _git(repo, "add", "pkg/mod.py")  # staged or not: the same difference from HEAD, the same hash
    (repo / "pkg" / "new.py").write_text("Y = 2\n")
    again = {c["path"]: c["sha256"] for c in code_changes(repo)["code_changes"]}
    assert again["pkg/mod.py"] == first["pkg/mod.py"] and again["pkg/new.py"] != first["pkg/new.py"]
    (repo / "pkg" / "mod.py").unlink()  # staged change, then deleted: what runs has no such file
    assert {c["path"]: c["status"] for c in code_changes(repo)["code_changes"]}["pkg/mod.py"] == "deleted"
    assert code_changes(tmp_path) == {"code_dirty": None, "code_changes": None}  # not a git checkout


def test_provenance_records_base_model_checksums_and_numerics(tmp_path):
    """Each base model's weights sha256 (recomputed, checked against its build record) and build machine; the CPU
    model, torch CPU capability and thread counts of the jobs, grouped."""
    import hashlib

    from bandpo.report.publish import base_models, numerics

    facts = {"cpu_model": "Xeon", "torch_cpu_capability": "AVX512", "torch_threads": 1, "torch_interop_threads": 1}
    folders = []
    for seed in (0, 1):
        d = tmp_path / "models" / "tiny-s" / f"seed{seed}"
        _write(d / "config.json", {})
        (d / "model.safetensors").write_bytes(bytes([seed]) * 64)
        sha = hashlib.sha256(bytes([seed]) * 64).hexdigest()
        recorded = {"model.safetensors": sha if seed == 0 else "0" * 64}  # seed 1's weights changed after its build
        _write(d / "info.json", {"kind": "tiny", "seed": seed, "machine": {**facts, "platform": "x"},
                                 "weights_sha256": recorded})  # fmt: skip
        folders.append(d)
    got = base_models(folders)
    assert [m["seed"] for m in got] == [0, 1] and got[0]["built_on"] == facts
    assert got[0]["weights_sha256"] == {"model.safetensors": hashlib.sha256(bytes(64)).hexdigest()}
    assert [m["matches_build_record"] for m in got] == [True, False]
    with pytest.raises(FileNotFoundError, match="no config.json"):
        base_models([tmp_path / "missing"])
    for seed, threads in ((0, 1), (1, 1), (2, 4)):
        _write(tmp_path / "res" / "runs" / "m" / "grpo" / f"seed{seed}" / "run.json",
               {"machine": {**facts, "torch_threads": threads}})  # fmt: skip
    rows = numerics(tmp_path / "res")
    assert sorted((r["torch_threads"], r["jobs"]) for r in rows) == [(1, 2), (4, 1)]
    assert all(r["stage"] == "train" and r["torch_cpu_capability"] == "AVX512" for r in rows)


def test_cli_errors_and_unembedded_page(built, tmp_path):
    bad = subprocess.run(
        [sys.executable, "-m", "bandpo.report", "build", "--results", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and "results folder not found" in bad.stderr
    (tmp_path / "empty" / "runs").mkdir(parents=True)
    assert report.main(["build", "--results", str(tmp_path / "empty")]) == 2  # nothing to report: a clear error
    results, _ = built
    board = pd.read_csv(results / "leaderboard.csv")
    page = report.leaderboard_html(Board(board))
    assert "<img" not in page and "<figure" not in page and page.count("<table") == 2


def test_published_leaderboard_is_rebuilt_from_its_tables(tmp_path):
    """The report run again on the inputs behind results/leaderboard.* (rebuilt from the published scores and runs
    tables, `published_runs`) gives the published Markdown exactly, and the CSV up to the tables' 6 digits (a
    statistic of differences of such values, within 1e-5; the page shows 1e-3): the committed pages, leaderboard.csv
    and primary.csv are those of today's rule (`published_runs.rerender_published` writes them when the rule
    changes)."""
    from published_runs import (
        page_differences,
        published_axes,
        published_config,
        published_experiments,
        rebuild_run_outputs,
    )

    published = ROOT / "results"
    results = rebuild_run_outputs(published, tmp_path)
    bounds_script.main(["--out", str(results / "bounds.csv")])
    report.build_report(results, tmp_path / "out", experiments=published_experiments(published),
                        axes=published_axes(published),
                        base_per_seed=published_config(published).get("base_per_seed"))  # fmt: skip
    # as `report publish` does: the smoke section (bandpo.report.smoke) from the published smoke profiles' tables
    for profile in SMOKE_PROFILES:
        if (published / profile).is_dir():
            shutil.copytree(published / profile, tmp_path / "out" / profile)
    write_section(tmp_path / "out")
    # and the answer at the top with the published parts' tiers (bandpo.report.verdicts.PARTS: the real LM)
    for part in verdicts.PARTS:
        (tmp_path / "out" / part).mkdir(exist_ok=True)
        shutil.copy(published / part / "primary.csv", tmp_path / "out" / part / "primary.csv")
    verdicts.write_section(tmp_path / "out")
    ours, theirs = ((folder / "leaderboard.md").read_text() for folder in (tmp_path / "out", published))
    assert not page_differences(ours, theirs), page_differences(ours, theirs)
    for name in ("leaderboard.csv", "primary.csv", "stats.csv", "scores.csv", "runs.csv"):
        ours, theirs = pd.read_csv(tmp_path / "out" / name), pd.read_csv(published / name)
        if "grader" in ours and "grader" not in theirs:  # published before scores recorded their grader
            assert ours.pop("grader").isna().all(), name  # and its summaries name none
        assert list(ours.columns) == list(theirs.columns) and ours.shape == theirs.shape, name
        numbers = theirs.select_dtypes("number").columns
        pd.testing.assert_frame_equal(ours.drop(columns=numbers), theirs.drop(columns=numbers), check_dtype=False)
        # a p-value of a t statistic from 6-digit means and SDs moves in its 5th digit (the verdicts read it at 0.05)
        pvalues = [c for c in numbers if re.search(r"p_(not_)?better(_holm)?$", c)]
        # the pairs a single look needs: the smallest n whose test decides at the SD, so a 6-digit SD can move it by 1
        needed = [c for c in numbers if c.endswith("n_needed")]
        pd.testing.assert_frame_equal(ours[needed], theirs[needed], check_dtype=False, rtol=0, atol=1)
        rest = [c for c in numbers if c not in pvalues and c not in needed]
        # primary.csv's entropy rows: the rebuilt runs' entropies come from steps.csv, which keeps 5 significant
        # digits of each step (the published ones, from the full-precision runs, are runs.csv's)
        rtol, atol = (2e-4, 5e-5) if name == "primary.csv" else (2e-5, 1e-5)
        pd.testing.assert_frame_equal(ours[rest], theirs[rest], check_dtype=False, rtol=rtol, atol=atol)
        p_atol = 2e-3 if name == "primary.csv" else 2e-4  # those entropies again, a p-value times Holm's m
        pd.testing.assert_frame_equal(ours[pvalues], theirs[pvalues], check_dtype=False, rtol=0, atol=p_atol)


# The rule proposed for workflow/rules/report.smk (names from workflow/rules/common.smk); the slow test below runs it
# in a minimal Snakefile and builds `snakemake --report` from it.
REPORT_RULE = (ROOT / "workflow" / "rules" / "report.smk").read_text()  # the real rule file

MINI_SNAKEFILE = f"""
import json
report: "workflow/report/workflow.rst"
config["profile"] = "{PROFILE}"
config["publish"] = False
# what workflow/rules/common.smk gives report.smk, for a config without experiments (no looks, no select rule)
config.update(experiments={{}}, axes={{}}, base_per_seed=False, beside=None, smoke_section=False)
EXPERIMENTS, PUBLISH_DIR = {{}}, "published"
RESULTS, LOGS, BENCH = "results/{PROFILE}", "logs/{PROFILE}", "logs/{PROFILE}/benchmarks"
ATLAS, ATLAS_CSV = None, []  # no equivalence atlas (its rule, in report.smk, needs a tiny base model)
MODELS, ENTRIES, SEEDS, EVAL_TASKS = ["tiny-s"], {sorted(e for e in ENTRIES if e != XSS_ENTRY)!r}, [0, 1, 2], ["{TASK}"]
EVAL_ENTRIES = ["base", *ENTRIES]
RUNS_AT_ONCE = [(m, e, s) for m in MODELS for e in ENTRIES for s in SEEDS]
decided_files = lambda: []


def res(stage):
    return {{}}


def select_file(experiment):
    return f"{{RESULTS}}/select/{{experiment}}.json"


def _alternatives(names):
    return "|".join(names) or "__none__"


def all_base_models():
    return []


def run_dir(m, e, s):
    return f"{{RESULTS}}/runs/{{m}}/{{e}}/seed{{s}}"


def all_eval_summaries():
    return [f"{{RESULTS}}/eval/{{m}}/{{e}}/seed{{s}}/{{t}}.json"
            for m in MODELS for e in EVAL_ENTRIES for s in SEEDS for t in EVAL_TASKS]


include: "workflow/rules/report.smk"


rule all:
    input:
        rules.report.output,
"""


def test_snakemake_report_captions_exist():
    """Every caption the report rule names (workflow/report/*.rst) exists and has text."""
    folder = ROOT / "workflow" / "report"
    named = set(re.findall(r'caption=f?"\.\./report/([^"]+)"', REPORT_RULE))
    names = {"workflow.rst", *(n.replace("{name}", f) for n in named for f in report.FIGURES)}
    assert {"leaderboard.rst", "bounds.rst", "final_scores.rst"} <= names
    for name in names:
        assert len((folder / name).read_text().strip()) > 40, name


@pytest.mark.slow
def test_snakemake_report(tmp_path):
    """The report rule runs in a DAG and `snakemake --report` makes a self-contained report with the captions."""
    results = make_results(tmp_path / "wf" / "results", models=("tiny-s",))
    (results / "bounds.csv").unlink()  # the rule writes it
    shutil.rmtree(results / "runs" / "tiny-s" / XSS_ENTRY)
    shutil.rmtree(results / "eval" / "tiny-s" / XSS_ENTRY)
    wf = tmp_path / "wf"
    (wf / "workflow" / "rules").mkdir(parents=True)
    shutil.copytree(ROOT / "workflow" / "report", wf / "workflow" / "report")
    (wf / "workflow" / "rules" / "report.smk").write_text(REPORT_RULE)
    (wf / "Snakefile").write_text(MINI_SNAKEFILE)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    run = [sys.executable, "-m", "snakemake", "--cores", "1"]
    subprocess.run(run, cwd=wf, env=env, check=True, capture_output=True, timeout=300)
    assert (results / "leaderboard.html").is_file()
    subprocess.run([*run, "--report", "report.html"], cwd=wf, env=env, check=True, capture_output=True, timeout=300)
    page = (wf / "report.html").read_text()
    assert "trust-region bounds stay inside the simplex" in page  # the bounds caption
    assert "final_scores.png" in page and "leaderboard.html" in page


# ----------------------------------------------------------------------------------------------------------------
# Experiments: sections per (experiment, subset) and the primary comparison


def test_split_slot():
    from bandpo.study import split_slot

    assert split_slot("grpo@probe") == ("grpo", "probe")
    assert split_slot("bandpo_kl@random-reward") == ("bandpo_kl", "random-reward")
    assert split_slot("grpo") == ("grpo", "main") and split_slot("base") == ("base", "main")


def _experiment_scores() -> pd.DataFrame:
    """Per-seed mean@8 of main (one task) and of the probe (two subsets, bandpo_kl 0.10 above grpo on the probe)."""
    rows = []
    for xp, subsets in (
        ("main", [("tiny_math", "")]),
        ("probe", [("tiny_math_probe", "probe"), ("tiny_math_rest", "rest")]),
    ):
        for entry, shift in (("grpo", 0.0), ("bandpo_kl", 0.10)):
            for seed in range(5):
                for task, subset in subsets:
                    value = 0.3 + (shift if subset == "probe" else 0.0) + 0.01 * seed
                    rows.append({"profile": PROFILE, "experiment": xp, "subset": subset, "model": "tiny-s",
                                 "entry": entry, "method": entry.split("_")[0], "params": "", "seed": seed,
                                 "task": task, "k": 8.0, "metric": "mean", "value": value, "name": "mean@8",
                                 "n": 8, "stderr": float("nan"), "source": "x"})  # fmt: skip
    return pd.DataFrame(rows)


def test_sections_and_primary_comparison():
    scores = _experiment_scores()
    empty = pd.DataFrame(columns=["profile", "experiment", "model", "entry", "seed", "step"])
    summaries = pd.DataFrame(columns=analysis.load.SUMMARY_COLUMNS)
    board, stats, _ = analysis.build_sections(scores, empty, summaries, "grpo", 200, 0.95, 0)
    assert list(board.columns[:2]) == ["experiment", "subset"]
    assert sorted(map(tuple, board[["experiment", "subset", "entry"]].to_numpy())) == sorted(
        (x, s, e) for x, s in (("main", ""), ("probe", "probe"), ("probe", "rest")) for e in ("grpo", "bandpo_kl")
    )
    probe = board[(board["experiment"] == "probe") & (board["subset"] == "probe")].set_index("entry")
    assert probe.loc["bandpo_kl", "mean@8"] == pytest.approx(probe.loc["grpo", "mean@8"] + 0.10)
    rest = board[(board["experiment"] == "probe") & (board["subset"] == "rest")].set_index("entry")
    assert rest.loc["bandpo_kl", "mean@8"] == pytest.approx(rest.loc["grpo", "mean@8"])
    specs = {"probe": {"primary": {"task": "tiny_math_probe", "compare": ["bandpo_kl", "grpo"], "metric": "m",
                                   "rule": "r"}, "margins": {"tiny-s": 0.02}},
             "main": {"primary": {"metric": "m", "rule": "r"}}}  # fmt: skip
    primary = analysis.primary_results(scores, specs)
    (row,) = primary.itertuples()
    assert (row.experiment, row.treatment, row.control, row.metric) == ("probe", "bandpo_kl", "grpo", "mean@8")
    assert row.difference == pytest.approx(0.10) and row.n_treatment == row.n_control == row.n_pairs == row.n == 5
    # every seed's difference is exactly 0.10: the paired interval has no width, and a single look (no design in
    # the specs) says better: the one-sided test of no gain rejects
    assert (row.ci_low, row.ci_high) == pytest.approx((0.10, 0.10)) and row.verdict == "better"
    assert (row.rule, row.label, row.margin) == ("single look", "better", 0.02) and row.p_better < 1e-10
    assert 0.0 <= row.stability <= 1.0 and row.stability == pytest.approx(1.0)
    # the reversed comparison, and the rest subset (no difference): not better by the margin
    specs["probe"]["primary"]["compare"] = ["grpo", "bandpo_kl"]
    again = analysis.primary_results(scores, specs)
    assert again["verdict"].tolist() == ["not better by the margin"] and again["label"].tolist() == [
        "not better by 2 points"]  # fmt: skip
    specs["probe"]["primary"]["task"] = "tiny_math_rest"
    assert analysis.primary_results(scores, specs)["verdict"].tolist() == ["not better by the margin"]
    # no margin from the run plan: no question to answer, no verdict
    unplanned = {"probe": {"primary": {**specs["probe"]["primary"]}}}
    (row,) = analysis.primary_results(scores, unplanned).itertuples()
    assert row.verdict == "" and row.label == "no margin declared"
    md = report.leaderboard_markdown(Board(board, notes=tuple(experiment_notes(specs, primary))))
    assert "## probe: tiny-s, subset probe" in md and "## tiny-s\n" in md and "Decision rule: r" in md
    # a description that asks a question keeps its "?" and no "." after it; the other sentences end in "."
    specs["probe"]["description"] = "does it hold at the plateau?"
    ((_, note), _) = experiment_notes(specs, primary)
    assert note.startswith("does it hold at the plateau? Primary metric: m (grpo against bandpo_kl). Decision rule: r.")


def test_primary_rule_is_paired():
    """The primary rule pairs seed s of the treatment with seed s of the control (same base model and seed): a
    difference that is small against the seeds' spread but the same on every seed is resolved by the paired t
    interval (mean of the per-seed differences +- t(0.975, n-1) SD / sqrt(n)), where the unpaired bootstrap of the
    difference of seed means (the secondary column) is not; a seed only one side has is left out."""
    from scipy import stats as st

    base = np.array([0.20, 0.35, 0.28, 0.41, 0.25])  # the base models of 5 seeds: a wide spread
    d = np.array([0.021, 0.018, 0.025, 0.015, 0.022])  # the treatment's gain on each: small and steady
    rows = []
    for entry, values in (("grpo", base), ("bandpo_kl", base + d)):
        for seed, v in enumerate(values):
            rows.append({"experiment": "main", "subset": "", "model": "tiny-s", "entry": entry, "seed": seed,
                         "task": "tiny_math", "k": 8.0, "metric": "mean", "value": v})  # fmt: skip
    rows.append({**rows[-1], "seed": 7, "value": 0.9})  # a seed the control lacks: left out of the pairs
    scores = pd.DataFrame(rows)
    specs = {"main": {"primary": {"metric": "m", "rule": "r", "compare": ["bandpo_kl", "grpo"]},
                      "margins": {"tiny-s": 0.01}}}  # fmt: skip
    (row,) = analysis.primary_results(scores, specs).itertuples()
    assert (row.n_treatment, row.n_control, row.n_pairs) == (6, 5, 5)
    assert row.difference == pytest.approx(d.mean(), abs=1e-12)
    assert row.treatment_mean - row.control_mean == pytest.approx(row.difference, abs=1e-12)
    lo, hi = st.t.interval(0.95, 4, loc=d.mean(), scale=st.sem(d))
    assert (row.ci_low, row.ci_high) == pytest.approx((lo, hi), abs=1e-12)
    # the single look on the pairs: better (p of no gain, one-sided), and the gain is even above the 1-point margin
    assert row.verdict == "better" and row.p_better == pytest.approx(st.ttest_1samp(d, 0, alternative="greater").pvalue)
    assert row.p_not_better == pytest.approx(st.ttest_1samp(d, 0.01, alternative="less").pvalue)
    # the reverse: not better by the margin; one pair: no interval, no verdict
    specs["main"]["primary"]["compare"] = ["grpo", "bandpo_kl"]
    assert analysis.primary_results(scores, specs)["verdict"].tolist() == ["not better by the margin"]
    one = scores[scores["seed"].isin([0, 7])]
    (row,) = analysis.primary_results(one, specs).itertuples()
    assert row.n_pairs == 1 and math.isnan(row.ci_low) and row.verdict == "no interval (fewer than 2 pairs)"


def _entropy_metrics(rise: dict[str, float], seeds: int = 3, steps: int = 20) -> pd.DataFrame:
    """Training metrics of a random-reward experiment: entropy 0.45 (+0.001 x seed) at step 1, moving linearly by
    ``rise[entry]`` nats by the last step, plus per-seed noise of +-0.005."""
    rows = []
    for entry, delta in rise.items():
        for seed in range(seeds):
            for step in range(1, steps + 1):
                noise = 0.005 * (-1) ** seed if step > 1 else 0.0
                value = 0.45 + 0.001 * seed + delta * (step - 1) / (steps - 1) + noise
                rows.append({"profile": PROFILE, "experiment": "random-reward", "model": "tiny-s", "entry": entry,
                             "seed": seed, "step": step, "entropy": value})  # fmt: skip
    return pd.DataFrame(rows)


def test_entropy_rule_of_the_random_reward_control():
    """`score: entropy`: each run's final entropy (last 10% of steps) minus its own entropy at step 1, the mean over
    seeds with its paired t interval; rises / falls / unmoved follow the interval, and the note states it."""
    specs = {"random-reward": {"primary": {"metric": "final entropy", "score": "entropy", "rule": "r"}}}

    def shifts(metrics: pd.DataFrame) -> pd.DataFrame:
        _, _, per_run = analysis.build_sections(
            pd.DataFrame(columns=["experiment", "model", "entry", "seed"]), metrics,
            pd.DataFrame(columns=analysis.load.SUMMARY_COLUMNS), "grpo", 0, 0.95, 0,
        )  # fmt: skip
        assert (per_run["entropy_first"] == 0.45 + 0.001 * per_run["seed"]).all()  # runs.csv keeps step 1's entropy
        return analysis.entropy_shift_results(per_run, specs, n_resamples=500)

    from scipy import stats as st

    res = shifts(_entropy_metrics({"grpo": 0.08, "dcpo": -0.06, "bandpo_kl": 0.0})).set_index("treatment")
    assert set(res.index) == {"grpo", "dcpo", "bandpo_kl"} and (res["control"] == "step 1").all()
    assert res["control_mean"].iloc[0] == pytest.approx(0.451) and (res["n_pairs"] == 3).all()
    assert res.loc["grpo", "verdict"] == "entropy rises" and res.loc["dcpo", "verdict"] == "entropy falls"
    assert res.loc["bandpo_kl", "verdict"] == "unresolved"  # no entropy_margin declared: no equivalence
    # final = mean of the last 2 of 20 steps: 0.45 + 0.001 s + 0.08 (1 + 18/19) / 2 +- noise; paired with step 1
    change = np.array([0.08 * (1 + 18 / 19) / 2 + 0.005 * (-1) ** s for s in range(3)])
    assert res.loc["grpo", "treatment_mean"] == pytest.approx(0.451 + change.mean())
    assert res.loc["grpo", "difference"] == pytest.approx(change.mean())
    lo, hi = st.t.interval(0.95, 2, loc=change.mean(), scale=st.sem(change))
    assert (res.loc["grpo", "ci_low"], res.loc["grpo", "ci_high"]) == pytest.approx((lo, hi), abs=1e-9)
    # primary_results leaves such an experiment alone; one seed gives no interval, not a verdict
    assert analysis.primary_results(_experiment_scores(), specs).empty
    one = shifts(_entropy_metrics({"grpo": 0.08}, seeds=1))
    assert one["verdict"].tolist() == ["no interval (fewer than 2 pairs)"]
    ((_, note),) = experiment_notes(specs, res.reset_index())
    assert (
        "Result on tiny-s, grpo: final entropy" in note
        and "against 0.451 at step 1 (the same runs' step-1 entropy), paired difference" in note
    )
    assert "(95% paired t; no equivalence margin declared; descriptive): entropy rises" in note


def test_entropy_rule_is_paired_within_runs():
    """Runs whose step-1 entropies differ (one base model per seed) but whose entropy rises by the same amount in
    each: the paired rule resolves the rise (the base models' spread cancels; the retired bootstrap of the final
    entropies against the pooled step-1 mean did not)."""
    rows = []
    for seed, start in enumerate((0.30, 0.55, 0.42)):
        for step in range(1, 11):
            rows.append({"profile": PROFILE, "experiment": "random-reward", "model": "tiny-s", "entry": "grpo",
                         "seed": seed, "step": step,
                         "entropy": start + (0.03 + 0.001 * seed if step > 1 else 0.0)})  # fmt: skip
    _, _, per_run = analysis.build_sections(
        pd.DataFrame(columns=["experiment", "model", "entry", "seed"]), pd.DataFrame(rows),
        pd.DataFrame(columns=analysis.load.SUMMARY_COLUMNS), "grpo", 0, 0.95, 0,
    )  # fmt: skip
    specs = {"random-reward": {"primary": {"metric": "final entropy", "score": "entropy", "rule": "r"}}}
    (row,) = analysis.entropy_shift_results(per_run, specs, n_resamples=2000).itertuples()
    assert row.difference == pytest.approx(0.031) and row.ci_low > 0.02 and row.verdict == "entropy rises"
    assert row.rule == "descriptive" and row.control == "step 1"


def _report_folder(path: Path, profile: str, scores: dict, runs: dict) -> Path:
    """A report folder with scores.csv ({(entry, seed): mean@8}) and runs.csv ({(entry, seed): entropy_final})."""
    path.mkdir(parents=True)
    pd.DataFrame(
        [
            {
                "profile": profile,
                "experiment": "main",
                "subset": "",
                "model": "tiny-s",
                "entry": e,
                "seed": s,
                "task": "tiny_math",
                "name": name,
                "value": v if name == "mean@8" else 0.9,
            }
            for (e, s), v in scores.items()
            for name in ("mean@8", "pass@8")
        ]  # fmt: skip
    ).to_csv(path / "scores.csv", index=False)
    pd.DataFrame(
        [
            {
                "experiment": "main",
                "profile": profile,
                "model": "tiny-s",
                "entry": e,
                "seed": s,
                "steps": 64,
                "entropy_final": v,
                "reward_final": 0.4,
                "accuracy_final": v + 0.1,
                "clipfrac": 0.01,
                "train_seconds": 100.0,
            }
            for (e, s), v in runs.items()
        ]  # fmt: skip
    ).to_csv(path / "runs.csv", index=False)
    return path


def test_beside_pairs_each_run_with_the_other_trainers_run(tmp_path, capsys):
    ours = _report_folder(tmp_path / "verl", "verl-cpu", {("grpo", 0): 0.30, ("grpo", 1): 0.40, ("base", 0): 0.2},
                          {("grpo", 0): 0.20, ("grpo", 1): 0.25})  # fmt: skip
    other = _report_folder(tmp_path / "local", "embedded",
                           {("grpo", 0): 0.35, ("grpo", 2): 0.5, ("base", 0): 0.2, ("dcpo", 0): 0.3},
                           {("grpo", 0): 0.15, ("grpo", 2): 0.1, ("dcpo", 0): 0.1})  # fmt: skip
    table = beside_table(ours, other)
    assert [(r.entry, r.seed) for r in table.itertuples()] == [("base", 0), ("grpo", 0), ("grpo", 1)]  # ours only
    grpo0 = table[(table["entry"] == "grpo") & (table["seed"] == 0)].iloc[0]
    assert grpo0["diff"] == pytest.approx(-0.05) and grpo0["entropy_final_other"] == pytest.approx(0.15)
    assert table.loc[(table["entry"] == "grpo") & (table["seed"] == 1), "mean@8_other"].isna().all()  # no match
    assert beside_table(ours, other).equals(table)

    assert report.main(["beside", "--results", str(ours), "--other", str(other)]) == 0
    md = (ours / "beside.md").read_text()
    assert "# verl-cpu beside embedded" in md
    # mean@8 both sides, diff, entropy both sides, train accuracy (%) both sides, clip both sides
    assert "| main | tiny-s | grpo | 0 | tiny_math | 30.0 | 35.0 | -5.0 | 0.200 | 0.150 | 30.0 | 25.0 | 0.0100 |" in md
    assert "| main | tiny-s | grpo | mean of 1 | tiny_math | 30.0 | 35.0 | -5.0 |" in md  # seeds on both sides only
    assert pd.read_csv(ours / "beside.csv")["diff"].notna().sum() == 2
    assert report.main(["beside", "--results", str(ours), "--other", str(tmp_path / "nowhere")]) == 2
    assert "scores.csv not found" in capsys.readouterr().err


def test_paired_problems_gain_over_the_base_model(tmp_path, capsys):
    """benchmarks/paired_problems.py: per-seed and pooled gain of an entry over its base model on the same problems,
    with a bootstrap interval over problems; mismatched problem sets are an error, not a silent pairing."""
    spec = importlib.util.spec_from_file_location("paired_problems", ROOT / "benchmarks" / "paired_problems.py")
    pp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pp)
    gains = {0: 0.25, 1: 0.0}  # seed 0's trained model solves a quarter more of every problem; seed 1's no more

    def write(entry: str, seed: int, values: list[float]) -> None:
        folder = tmp_path / entry / f"seed{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps({"doc_id": i, "doc": {"id": f"t{i}"}, "mean@8": v}) for i, v in enumerate(values)]
        (folder / "tiny_math.samples.jsonl").write_text("\n".join(lines) + "\n")

    rng = np.random.default_rng(0)
    for seed, gain in gains.items():
        base = rng.choice([0.0, 0.25, 0.5], size=200)
        write("base", seed, list(base))
        write("grpo", seed, list(base + gain))
    rows = pp.paired_gains(tmp_path, "grpo", "base", "tiny_math", "mean@8", [0, 1], 2000)
    assert [r[0] for r in rows] == ["seed 0", "seed 1", "pooled over 2 seeds"] and rows[0][1] == 200
    assert rows[0][2:] == pytest.approx((0.25, 0.25, 0.25)) and rows[1][2:] == pytest.approx((0.0, 0.0, 0.0))
    assert rows[2][2] == pytest.approx(0.125)
    write("base", 1, [0.5] * 199)  # seed 1's base model scored one problem fewer
    assert pp.main(["--eval", str(tmp_path), "--entry", "grpo"]) == 2
    assert "different problems" in capsys.readouterr().err


def test_recipe_check_windows_and_curve_rule(monkeypatch, capsys):
    """benchmarks/bench_recipe_check.py: a curve agrees when every window's mean difference over seeds is at most
    the old arm's seed spread in that window, and fails on one window outside it; the score side is the verdict rule
    on old - new; identical arms are refused before anything runs."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("bench_recipe_check", ROOT / "benchmarks" / "bench_recipe_check.py")
    rc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rc)
    assert rc.windows([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], 3) == pytest.approx([1.5, 4.0, 6.5])  # 2 / 3 / 2 steps
    old = [[0.0] * 4 + [1.0] * 4, [0.2] * 4 + [1.2] * 4, [0.4] * 4 + [1.4] * 4]  # window spread 0.2 each
    near = [[v + 0.15 for v in seed] for seed in old]
    check = rc.curve_check(old, near, 2)
    assert check["agree"] and [w["spread"] for w in check["windows"]] == pytest.approx([0.2, 0.2])
    assert check["worst"] == pytest.approx(0.75)
    late = [seed[:4] + [v + 0.3 for v in seed[4:]] for seed in old]  # the second window moved by 1.5 spreads
    check = rc.curve_check(old, late, 2)
    assert not check["agree"] and check["windows"][1]["diff"] == pytest.approx(0.3)
    # the score side: the verdict rule on old - new (points in, fractions inside), in looks of 5 pairs
    design = rc.plan_design(0.015, 5, 0.027)
    close = [0.3, -0.4, 0.1, -0.2, 0.5]  # new - old, points: at the first look too close to call
    assert rc.score_rule(design, close[:4]) is None and rc.recipe_verdict(None, True) == "UNRESOLVED"
    assert rc.recipe_verdict(rc.score_rule(design, close), True) == "UNRESOLVED"
    same = [2.1, 1.8, 2.4, 1.9, 2.2]  # the new recipe scores 2 points more: the old one is not better by 1.5
    rule = rc.score_rule(design, same)
    assert (rule.verdict, rule.n) == (rc.NOT_BETTER, 5) and rc.recipe_verdict(rule, True) == "SAME RECIPE"
    assert rc.recipe_verdict(rule, False) == "RECIPE CHANGE"  # a curve left its spread
    worse = [-9.0, -8.5, -9.5, -8.0, -9.2] * 2  # the new recipe loses ~9 points: the old one is better, at look 2
    assert rc.score_rule(design, worse[:5]).verdict == "undecided"  # O'Brien-Fleming: nothing to spare at look 1
    assert rc.recipe_verdict(rc.score_rule(design, worse), True) == "RECIPE CHANGE"
    with pytest.raises(SystemExit):
        rc.main(["--old-set", "steps=4", "--new-set", "steps=4"])
    assert "the two arms are the same" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rc.main(["--new-env", "MKL_CBWR"])
    assert "expected KEY=VALUE" in capsys.readouterr().err
    env = {"BANDPO_NUMERICS": "fixed", "MKL_CBWR": "AVX2,STRICT", "OMP_NUM_THREADS": "1"}
    assert rc.arm_env(env, []) is env  # an arm without numerics variables runs the jobs' own environment
    assert rc.arm_env(env, ["MKL_CBWR=AVX2"]) == {**env, "BANDPO_NUMERICS": "native", "MKL_CBWR": "AVX2"}


def test_run_vs_base_leaves_out_settings_an_older_trainer_lacks(monkeypatch, tmp_path):
    """benchmarks/_worktree.py (bench_run_vs_base.py, bench_recipe_check.py): an older tree's command carries this
    tree's run as flags and a ``--set`` per setting, keeps every ``--set`` its trainer has a field for (a
    ``TrainConfig`` in bandpo/train.py or bandpo/train/) and drops the others, value included; this tree's command
    reads the run's spec file."""
    from bandpo.train.settings import TrainConfig, read_spec

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("_worktree", ROOT / "benchmarks" / "_worktree.py")
    wt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wt)
    old = tmp_path / "old"
    (old / "bandpo").mkdir(parents=True)
    (old / "bandpo" / "train.py").write_text("class TrainConfig:\n    steps: int = 64\n    seed: int = 0\n")
    cmd = ["python", "-m", "bandpo.train", "--set", "old_log_probs=sampler", "--set", "steps=64", "--out", "x"]
    assert wt.unknown_sets(cmd, old) == [3]
    assert wt.known_sets_only(cmd, old) == ["python", "-m", "bandpo.train", "--set", "steps=64", "--out", "x"]
    assert wt.unknown_sets(cmd, ROOT) == []  # this tree knows both
    run = TrainConfig(model="m", data="d", out="o", params={"delta": 0.1}, seed=3, threads=1, progress=False, steps=7,
                      lr_end=None)  # fmt: skip
    full = wt.legacy_train_command(run, None, "python")
    assert full[:13] == ["python", "-m", "bandpo.train", "--model", "m", "--data", "d", "--method", "grpo",
                         "--params", '{"delta": 0.1}', "--seed", "3"]  # fmt: skip
    assert full[-5:] == ["--out", "o", "--threads", "1", "--no-progress"]
    assert "lr_end=null" in full and "minibatch=random" in full  # JSON, text as it is
    assert wt.unknown_sets(full, ROOT) == []  # every setting, none of the run's own fields
    assert wt.legacy_train_command(run, old, "python") == [*full[:13], "--set", "steps=7", *full[-5:]]
    this = wt.train_command(run, ROOT, tmp_path / "spec.json", "python")
    assert this == ["python", "-m", "bandpo.train", "--spec", str(tmp_path / "spec.json")]
    assert read_spec(tmp_path / "spec.json") == run


def test_page_and_docs_round_a_value_and_its_csv_text_the_same():
    """The leaderboard page formats full-precision values, the docs the csv's 6 significant digits: one rule
    (`tables.rounded`) makes them print the same, ties included (a paired mean of -30/2400 printed -1.2 on the page
    and -1.3 in the docs before)."""
    from bandpo.report.text import fmt
    from docs.blocks.cells import num

    tie = (-0.0125 * 3 + 1e-17) / 3  # a tie whose float sits a bit off -0.0125
    assert fmt(tie, 100) == fmt(float(f"{tie:.6g}"), 100) == num(tie) == "-1.3"
    assert fmt(0.2875, 100) == num(0.28749999999999998) == "28.8" and fmt(0.0125, 100) == "1.3"
    rng = np.random.default_rng(0)
    for v, d in zip(rng.uniform(-1, 1, 2000), rng.integers(2, 7, 2000), strict=True):
        v = round(float(v), int(d))  # many values on or near a tie of the printed digit
        assert fmt(v, 100) == fmt(float(f"{v:.6g}"), 100) == num(float(f"{v:.6g}"))
    assert fmt(float("nan")) == fmt(None) == num(float("nan")) == "—"
    assert fmt(12345678.9, 1, 0) == "12345679"  # large values keep their integer digits


# ----------------------------------------------------------------------------------------------------------------
# the descriptive rule's four verdicts (the random-reward control, issue #37), the verdict rule of every comparison
# with the control and its family of secondaries (issue #55)


def test_paired_tests_are_scipys_t_tests_and_tost_is_the_90_interval_inside_the_margin():
    from scipy import stats as st

    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(2, 12))
        d = rng.normal(rng.normal(0, 0.02), 0.015, n)
        margin = float(rng.uniform(0.005, 0.04))
        out = stats_rule.paired_tests(d, margin)
        assert out["p_value"] == pytest.approx(st.ttest_1samp(d, 0.0).pvalue, rel=1e-9)
        lower = st.ttest_1samp(d, -margin, alternative="greater").pvalue  # H0: mean <= -margin
        upper = st.ttest_1samp(d, margin, alternative="less").pvalue  # H0: mean >= +margin
        assert out["p_equivalence"] == pytest.approx(max(lower, upper), rel=1e-9, abs=1e-15)
        lo, hi = st.t.interval(0.90, n - 1, loc=d.mean(), scale=st.sem(d))
        assert (out["ci90_low"], out["ci90_high"]) == pytest.approx((lo, hi))
        assert (out["p_equivalence"] < 0.05) == (-margin < lo and hi < margin)
    assert np.isnan(stats_rule.paired_tests([0.01, 0.02])["p_equivalence"])  # no margin: no equivalence test
    assert np.isnan(stats_rule.paired_tests([0.01])["p_value"])  # one pair: no test
    same = stats_rule.paired_tests([0.01, 0.01, 0.01], 0.02)
    assert same["p_value"] == 0.0 and same["p_equivalence"] == 0.0


def test_four_verdicts():
    v = stats_rule.four_verdict
    assert v(0.03, 0.01, 0.9, "better", "worse") == "better" and v(-0.03, 0.01, 0.9, "b", "w") == "w"
    assert v(0.001, 0.5, 0.01, "b", "w") == "equivalent"
    assert v(0.004, 0.01, 0.01, "b", "w") == "equivalent"  # resolved but inside the margin: too small to act on
    assert v(0.01, 0.3, 0.3, "b", "w") == "unresolved" and v(0.01, np.nan, np.nan, "b", "w") == "unresolved"


def test_holm_step_down():
    adjusted = stats_rule.holm([0.01, 0.04, 0.03, np.nan, 0.5])
    # sorted 0.01, 0.03, 0.04, 0.5 (m = 4): x4, x3, x2, x1, made non-decreasing, capped at 1
    np.testing.assert_allclose(adjusted, [0.04, 0.09, 0.09, np.nan, 0.5])
    assert stats_rule.holm([0.3, 0.6])[1] == 0.6 and stats_rule.holm([0.6, 0.9]).max() <= 1.0
    assert np.isnan(stats_rule.holm([np.nan])).all()


def _board_row(entry, diff, sd, n=10, experiment="main", lo=None, hi=None):
    return {"experiment": experiment, "subset": "", "model": "tiny-s", "entry": entry, "baseline": "grpo",
            "mean@8": 0.3, "mean@8_diff": diff, "mean@8_diff_sd": sd, "mean@8_n_pairs": n,
            "mean@8_diff_t_ci_low": diff - 0.01 if lo is None else lo,
            "mean@8_diff_t_ci_high": diff + 0.01 if hi is None else hi}  # fmt: skip


def test_one_sided_tests_are_the_single_look_of_the_rule():
    """leaderboard.csv holds each comparison's mean, SD and pairs: the two one-sided p-values from them give the
    verdict of `fixed_n_decision` on the differences themselves (p of H0: Δ <= 0 at alpha, of H1: Δ >= δ at beta),
    and are scipy's one-sided t tests."""
    from scipy import stats as st

    from bandpo.stats.rule import fixed_n_decision, one_sided_tests, rule_verdict

    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(2, 15))
        d = rng.normal(rng.normal(0.01, 0.02), 0.02, n)
        out = one_sided_tests(d.mean(), d.std(ddof=1), n, 0.02)
        assert rule_verdict(out["p_better"], out["p_not_better"]) == fixed_n_decision(d, 0.02).verdict
        assert out["p_better"] == pytest.approx(st.ttest_1samp(d, 0.0, alternative="greater").pvalue, rel=1e-9)
        assert out["p_not_better"] == pytest.approx(st.ttest_1samp(d, 0.02, alternative="less").pvalue, rel=1e-9)
    assert np.isnan(one_sided_tests(0.01, 0.02, 1, 0.02)["p_better"])  # one pair: no test
    assert np.isnan(one_sided_tests(0.01, 0.02, 5, float("nan"))["p_not_better"])  # no margin: no test of H1


def test_family_verdicts_adjust_the_secondaries_and_leave_the_primary_alone():
    """One family per experiment: every secondary's two one-sided p-values Holm-adjusted among themselves (p_better
    at alpha = 0.05, p_not_better at beta = 0.10); the primary cell is not a member and shows the primary's own
    verdict; a demoted primary is a member."""
    from bandpo.analysis.family import family_verdicts
    from bandpo.stats.rule import holm, one_sided_tests

    board = pd.DataFrame([_board_row("base", -0.08, 0.01), _board_row("grpo", np.nan, np.nan),
                          _board_row("bandpo_kl", 0.001, 0.005), _board_row("a", 0.04, 0.01),
                          _board_row("b", 0.012, 0.02, lo=-0.002, hi=0.026),
                          _board_row("c", -0.03, 0.004)])  # fmt: skip
    specs = {"main": {"primary": {"compare": ["bandpo_kl", "grpo"], "task": "tiny_math", "margin": 2.0},
                      "margins": {"tiny-s": 0.02}}}  # fmt: skip
    primary = pd.DataFrame([{c: np.nan for c in analysis.experiments.PRIMARY_COLUMNS} | {
        "experiment": "main", "model": "tiny-s", "role": "primary", "rule": "sequential", "treatment": "bandpo_kl",
        "control": "grpo", "verdict": "not better by the margin",
        "label": "not better by 2 points (look 1 of 4, 5 pairs)"}])  # fmt: skip
    out, primary_out, family = family_verdicts(board, specs, {"tiny_math": ""}, primary)
    by = out.set_index("entry")
    assert by.loc["bandpo_kl", "mean@8_role"] == "primary"
    assert by.loc["bandpo_kl", "mean@8_verdict_holm"] == by.loc["bandpo_kl", "mean@8_verdict"] == (
        "not better by the margin")  # the primary's own (its design's), not a test of the cell  # fmt: skip
    assert by.loc["bandpo_kl", "mean@8_label"] == "not better by 2 points (look 1 of 4, 5 pairs)"
    assert by.loc["base", "mean@8_role"] == "" and by.loc["grpo", "mean@8_role"] == ""  # no test in these rows
    members = ["a", "b", "c"]
    raw = [one_sided_tests(by.loc[e, "mean@8_diff"], by.loc[e, "mean@8_diff_sd"], 10, 0.02) for e in members]
    np.testing.assert_allclose(by.loc[members, "mean@8_p_better"], [t["p_better"] for t in raw])
    np.testing.assert_allclose(by.loc[members, "mean@8_p_better_holm"], holm([t["p_better"] for t in raw]))
    np.testing.assert_allclose(by.loc[members, "mean@8_p_not_better_holm"], holm([t["p_not_better"] for t in raw]))
    assert list(by.loc[members, "mean@8_verdict_holm"]) == ["better", "undecided", "not better by the margin"]
    assert list(by.loc[members, "mean@8_label"]) == ["better", "undecided", "not better by 2 points"]
    assert (by.loc[members, "mean@8_margin"] == 0.02).all() and (by.loc[members, "mean@8_n_needed"] >= 2).all()
    (f,) = family.itertuples()
    assert (f.n_tests, f.better, f.not_better, f.undecided) == (3, 1, 1, 1)
    assert f.expected_by_chance == pytest.approx(0.15) and f.n_excluding_0 == 2  # a and c: intervals off 0
    assert primary_out["verdict"].tolist() == ["not better by the margin"]  # left alone
    # a demoted primary is one more secondary, and its primary.csv row takes the family's verdict of its cell
    specs["main"]["primary"]["demoted"] = "why"
    demoted = primary.assign(role="demoted", rule="single look, Holm", margin=0.02, verdict="x")
    out, primary_out, family = family_verdicts(board, specs, {"tiny_math": ""}, demoted)
    assert family["n_tests"].iloc[0] == 4
    cell = out.set_index("entry").loc["bandpo_kl"]
    assert cell["mean@8_role"] == "secondary"
    assert primary_out["verdict"].iloc[0] == cell["mean@8_verdict_holm"] == "not better by the margin"
    assert primary_out["p_better_holm"].iloc[0] == cell["mean@8_p_better_holm"]


def test_declared_verdict_metric_splits_the_family_and_says_estimate_only():
    """``secondaries: {verdicts: mean}`` (issue #68): the entries' mean@8 comparisons are one Holm family, their
    verdicts, an undecided one reading "estimate only" with the pairs a verdict needs; every other metric is a
    second family, adjusted among itself only. Without the key the experiment keeps one family of all."""
    from bandpo.analysis.family import family_verdicts
    from bandpo.report.columns import verdict_text
    from bandpo.stats.rule import holm, one_sided_tests

    rows = [_board_row("grpo", np.nan, np.nan), _board_row("a", 0.04, 0.01), _board_row("b", 0.012, 0.02),
            _board_row("c", -0.03, 0.004)]  # fmt: skip
    for r, (d, sd) in zip(rows, [(np.nan, np.nan), (0.01, 0.03), (0.2, 0.01), (-0.001, 0.002)], strict=True):
        r.update({"pass@8": 0.5, "pass@8_diff": d, "pass@8_diff_sd": sd, "pass@8_n_pairs": 10,
                  "pass@8_diff_t_ci_low": d - 0.01, "pass@8_diff_t_ci_high": d + 0.01})  # fmt: skip
    board = pd.DataFrame(rows)
    specs = {"main": {"primary": {"compare": ["bandpo_kl", "grpo"], "margin": 2.0}, "margins": {"tiny-s": 0.02},
                      "secondaries": {"verdicts": "mean"}}}  # fmt: skip
    out, _primary, family = family_verdicts(board, specs, {})
    assert sorted(zip(family["family"], family["n_tests"], strict=True)) == [("estimates", 3), ("verdicts", 3)]
    by = out.set_index("entry")
    members = ["a", "b", "c"]
    raw = [one_sided_tests(by.loc[e, "mean@8_diff"], by.loc[e, "mean@8_diff_sd"], 10, 0.02) for e in members]
    np.testing.assert_allclose(by.loc[members, "mean@8_p_better_holm"], holm([t["p_better"] for t in raw]))
    raw = [one_sided_tests(by.loc[e, "pass@8_diff"], by.loc[e, "pass@8_diff_sd"], 10, 0.02) for e in members]
    np.testing.assert_allclose(by.loc[members, "pass@8_p_better_holm"], holm([t["p_better"] for t in raw]))
    assert list(by.loc[members, "mean@8_label"]) == ["better", "estimate only", "not better by 2 points"]
    assert by.loc["b", "pass@8_label"] == "better" and by.loc["a", "pass@8_label"] == "undecided"
    need = int(by.loc["b", "mean@8_n_needed"])
    assert verdict_text(by.loc["b"].to_dict() | {"entry": "b"}, "mean@8") == (
        f"estimate only (a single look decides from n = {need})")  # fmt: skip
    specs["main"].pop("secondaries")
    _out, _primary, family = family_verdicts(board, specs, {})
    assert family["family"].tolist() == ["all"] and family["n_tests"].tolist() == [6]


def test_the_holm_family_holds_the_entropy_secondaries():
    """The entropy comparisons of ``primary.entropy_compare`` (role secondary in primary.csv, margin in nats) are
    members of their experiment's family beside the leaderboard's cells (issue #55, item 6): their p-values are
    Holm-adjusted with the cells', the family counts them, and their rows carry the adjusted verdict."""
    from bandpo.analysis.experiments import run_pair_results
    from bandpo.analysis.family import family_verdicts
    from bandpo.stats.rule import holm

    arms = (("grpo", 0.10), ("bandpo_kl", 0.15), ("other", 0.10))
    per_run = pd.DataFrame([{"experiment": "sep", "model": "tiny-s", "entry": e, "seed": s,
                             "entropy_final": v + 0.002 * (s % 3), "entropy_auc": v + 0.001 * s}
                            for e, v in arms for s in range(6)])  # fmt: skip
    specs = {"sep": {"primary": {"compare": ["bandpo_kl", "grpo"], "entropy_compare": ["bandpo_kl", "other"],
                                 "margin": 2.0, "entropy_margin": 0.02},
                     "margins": {"tiny-s": 0.02}, "entropy_margins": {"tiny-s": 0.02}}}  # fmt: skip
    entropy = run_pair_results(per_run, specs)
    assert set(entropy["role"]) == {"secondary"} and set(entropy["rule"]) == {"single look, Holm"}
    assert len(entropy) == 4 and (entropy["margin"] == 0.02).all()
    board = pd.DataFrame([_board_row("grpo", np.nan, np.nan, experiment="sep"),
                          _board_row("clip", 0.001, 0.02, experiment="sep")])  # fmt: skip
    out, primary, family = family_verdicts(board, specs, {}, entropy)
    (f,) = family.itertuples()
    assert f.n_tests == 5  # one leaderboard cell and four entropy comparisons
    p_all = [out.loc[1, "mean@8_p_better"], *entropy["p_better"]]
    np.testing.assert_allclose(primary["p_better_holm"], holm(p_all)[1:])
    np.testing.assert_allclose(out.loc[1, "mean@8_p_better_holm"], holm(p_all)[0])
    kl = primary.set_index(["treatment", "metric"]).loc[("bandpo_kl", "entropy_final")]
    assert kl["verdict"] == "better" and kl["label"] == "higher"  # 0.05 nats above, every seed
    other = primary.set_index(["treatment", "metric"]).loc[("other", "entropy_final")]
    assert other["verdict"] == "not better by the margin" and other["label"] == "not higher by 0.02 nats"
    assert f.better == 2 and f.not_better + f.undecided == 3


def test_clip_fractions_of_rare_tokens_are_lower_claims_in_the_family_and_the_page_reads_the_mechanism():
    """``primary.clip_compare`` (issue #67, item 4): each entry's mean clip fraction of the rare tokens at each bound
    against the control's, paired by seed, is a secondary whose claim is a *lower* value (the rule reads control -
    entry, at the clip margin, a fraction of those tokens), a member of the family with the entropy comparisons; the
    page gives each row's sentence and says which way entropy moved and whether the lower-bound clipping of rare
    tokens goes with it, from the rows' verdicts and intervals."""
    from bandpo.analysis.experiments import RUN_STATISTICS, run_pair_results
    from bandpo.analysis.family import family_verdicts
    from bandpo.report.notes import experiment_notes, mechanism_sentence
    from bandpo.study import report_experiments

    # grpo clips 7% of rare tokens at the lower bound, bandpo_kl 1% (every seed); the upper bound: both about 2%
    arms = {"grpo": (0.020, 0.070, 0.110), "bandpo_kl": (0.0205, 0.010, 0.080)}
    per_run = pd.DataFrame([{"experiment": "main", "model": "lm", "entry": e, "seed": s,
                             "clip_upper_low": up + 0.004 * ((s * 7) % 5 - 2), "clip_lower_low": lo + 0.001 * s,
                             "entropy_final": ent + 0.002 * (s % 3), "entropy_auc": ent + 0.001 * s}
                            for e, (up, lo, ent) in arms.items() for s in range(6)])  # fmt: skip
    cfg = {"experiments": {"main": {"models": ["lm"], "primary": {
        "compare": ["bandpo_kl", "grpo"], "margin": 2.0, "entropy_compare": ["bandpo_kl"], "entropy_margin": 0.02,
        "clip_compare": ["bandpo_kl"], "clip_margin": 0.5}}}}  # fmt: skip
    specs = report_experiments(cfg)
    assert specs["main"]["clip_margins"] == {"lm": 0.005}  # points -> a fraction, in the study alone
    rows = run_pair_results(per_run, specs).set_index("metric")
    assert list(rows.index) == ["entropy_final", "entropy_auc", "clip_upper_low", "clip_lower_low"]
    lower = rows.loc["clip_lower_low"]
    assert lower["difference"] == pytest.approx(-0.06) and lower["verdict"] == "better" and lower["label"] == "lower"
    assert lower["p_better"] < 1e-6  # the test of "no fall" (grpo - bandpo_kl <= 0) rejects
    upper = rows.loc["clip_upper_low"]
    assert upper["verdict"] == "not better by the margin" and upper["label"] == "not lower by 0.5 points"
    assert RUN_STATISTICS["clip_lower_low"].lower and not RUN_STATISTICS["entropy_final"].lower
    board = pd.DataFrame([{**_board_row("grpo", np.nan, np.nan), "model": "lm"}])
    _, primary, family = family_verdicts(board, specs, {}, rows.reset_index())
    assert int(family["n_tests"].sum()) == 4  # the entropy and clip comparisons: one family
    assert primary.set_index("metric").loc["clip_lower_low", "label"] == "lower"
    (sentence,) = mechanism_sentence(primary)
    assert "bandpo_kl's final entropy is lower than grpo's" in sentence and "excludes 0" in sentence
    assert "consistent with the runs" in sentence
    notes = dict(experiment_notes(specs, primary, family))["main"]
    assert "rare tokens (old probability < 0.2) clipped at the lower bound: bandpo_kl 1.3% against grpo 7.3%" in notes
    assert "its entropy and clip-fraction comparisons" in notes
    # the same runs with the lower bound clipping as often in both arms: the mechanism is not shown
    same = primary.copy()
    same.loc[same["metric"] == "clip_lower_low", ["verdict", "label"]] = ["undecided", "undecided"]
    (sentence,) = mechanism_sentence(same)
    assert "not shown by these runs: its lower-bound clipping of rare tokens is not shown lower" in sentence


def test_run_statistics_are_declared_once_and_computed_from_the_steps():
    """A run statistic is one declaration (`RUN_METRICS`: its per-step source, aggregation and unit) that runs.csv,
    the axes' per-run outcomes and the secondaries read; one runs.csv lacks (the rare tokens' clip fractions) is
    computed from the per-step metrics for an experiment that compares it (`with_run_metrics`), NaN for a run that
    logged none."""
    from bandpo.analysis.axis import STEP_MEANS
    from bandpo.analysis.experiments import run_pair_results
    from bandpo.analysis.training import RUN_COLUMNS, RUN_METRICS, run_value, with_run_metrics

    steps = pd.DataFrame([{"model": "lm", "entry": e, "seed": s, "step": t, "entropy": 0.5 - 0.1 * t + 0.01 * s,
                           "clipfrac_lower/p0.0-0.2": (0.07 if e == "grpo" else 0.01) + 0.001 * t}
                          for e in ("grpo", "bandpo_kl") for s in range(3) for t in range(1, 5)])  # fmt: skip
    g = steps[(steps.entry == "grpo") & (steps.seed == 0)]
    assert run_value(g, RUN_METRICS["entropy_first"]) == pytest.approx(0.4)
    assert run_value(g, RUN_METRICS["entropy_final"]) == pytest.approx(0.1)  # the last 10% of 4 steps: step 4
    assert run_value(g, RUN_METRICS["clip_lower_low"]) == pytest.approx(0.0725)
    assert math.isnan(run_value(g, RUN_METRICS["clip_upper_low"]))  # never logged
    assert STEP_MEANS == {m.name: m.source for m in RUN_METRICS.values() if m.aggregate == "mean" and not m.fallback}
    assert "clip_lower_low" not in RUN_COLUMNS  # runs.csv keeps its published columns
    per_run = pd.DataFrame([{"experiment": "main", "model": "lm", "entry": e, "seed": s}
                            for e in ("grpo", "bandpo_kl") for s in range(4)])  # fmt: skip
    out = with_run_metrics(per_run, steps, ["clip_lower_low", "entropy_auc"])
    assert out.loc[0, "clip_lower_low"] == pytest.approx(0.0725) and math.isnan(out.loc[3, "clip_lower_low"])
    assert out.loc[4, "entropy_auc"] == pytest.approx(0.25)
    specs = {"main": {"primary": {"compare": ["bandpo_kl", "grpo"], "clip_compare": ["bandpo_kl"], "clip_margin": 0.5},
                      "clip_margins": {"lm": 0.005}}}  # fmt: skip
    (row,) = run_pair_results(per_run, specs, metrics=steps).query("metric == 'clip_lower_low'").itertuples()
    assert row.n_pairs == 3 and row.difference == pytest.approx(-0.06) and row.verdict == "better"
    assert run_pair_results(per_run, specs).empty  # without the steps there is nothing to compare


def _sequential_scores(diffs, base: float = 0.3) -> pd.DataFrame:
    rows = []
    for seed, d in enumerate(diffs):
        for entry, v in (("grpo", base + 0.001 * seed), ("bandpo_kl", base + 0.001 * seed + d)):
            rows.append({"experiment": "main", "subset": "", "model": "tiny-s", "entry": entry, "seed": seed,
                         "task": "tiny_math", "k": 8.0, "metric": "mean", "value": v})  # fmt: skip
    return pd.DataFrame(rows)


def _sequential_specs(design: dict, seeds: list[int], **primary) -> dict:
    return {"main": {"primary": {"compare": ["bandpo_kl", "grpo"], "task": "tiny_math", "margin": 2.0,
                                 "seeds": seeds, "sequential": {"k": design["k"]}, **primary},
                     "margins": {"tiny-s": design["margin"]}, "designs": {"tiny-s": design}}}  # fmt: skip


def test_a_sequential_primary_is_decided_by_its_design_at_the_first_crossing():
    """A primary with a sequential design: its verdict is `decide` on the paired differences in the order of the
    primary's seeds, and stops at the first look that crosses even when more pairs are present (the DAG's look files
    say the same: a later look never changes an earlier decision); the page shows the look, the pairs it rests on,
    the boundaries and its stability."""
    import dataclasses

    from bandpo.stats.design import plan_design
    from bandpo.stats.rule import decide
    from bandpo.stats.simulate import stability

    design = plan_design(0.02, 5, 0.027)
    fields = dataclasses.asdict(design)
    rng = np.random.default_rng(11)
    first = rng.normal(-0.03, 0.01, 5)  # far below the margin: "not better" at the first look
    later = rng.normal(0.08, 0.01, 10)  # would say "better" if the comparison went on
    diffs = np.concatenate([first, later])
    seeds = list(range(15))
    (row,) = analysis.primary_results(_sequential_scores(diffs), _sequential_specs(fields, seeds)).itertuples()
    expected = decide(design, diffs)
    assert (row.verdict, row.look, row.n) == (expected.verdict, expected.look, expected.n) == (
        "not better by the margin", 1, 5)  # fmt: skip
    assert row.n_pairs == 15 and row.rule == "sequential" and row.looks == design.looks
    assert row.difference == pytest.approx(first.mean(), abs=1e-12) and row.t == pytest.approx(expected.t)
    assert (row.efficacy_t, row.futility_t) == pytest.approx((expected.efficacy_t, expected.futility_t))
    assert row.label == f"not better by 2 points (look 1 of {design.looks}, 5 pairs)"
    again = stability(design, expected.estimate, expected.sd, reps=analysis.experiments.STABILITY_REPS,
                      rng=stats_resample.seeded_rng(0, "stability", "main", "tiny-s"))  # fmt: skip
    assert row.stability == again.stability and 0 <= row.stability_se < 0.01
    # seed order is the design's (primary.seeds), not the seeds' numbers: reversed, the later pairs come first
    (rev,) = analysis.primary_results(_sequential_scores(diffs), _sequential_specs(fields, seeds[::-1])).itertuples()
    assert rev.verdict == decide(design, diffs[::-1]).verdict and rev.n == decide(design, diffs[::-1]).n
    # not yet decided: undecided with the next look; fewer pairs than the first look: undecided, no look
    flat = rng.normal(0.01, 0.03, 5)
    (und,) = analysis.primary_results(_sequential_scores(flat), _sequential_specs(fields, seeds)).itertuples()
    assert und.verdict == decide(design, flat).verdict
    if und.verdict == "undecided":
        assert und.label.startswith("undecided at look 1") and np.isnan(und.stability)
    (few,) = analysis.primary_results(_sequential_scores(first[:3]), _sequential_specs(fields, seeds)).itertuples()
    assert few.verdict == "undecided" and few.n == 3 and "fewer than the first look's 5" in few.label


def test_the_report_checks_its_sequential_verdict_against_the_dags_last_look(tmp_path):
    """The report recomputes a sequential primary's verdict from the scores; the DAG's last look file for it says
    the same (decide stops at the first crossing), and a row whose look file disagrees says so in its note."""
    import dataclasses

    from bandpo.report.build import check_looks
    from bandpo.stats.design import plan_design

    design = plan_design(0.02, 5, 0.027)
    diffs = np.random.default_rng(11).normal(-0.03, 0.01, 10)
    scores = _sequential_scores(diffs)
    primary = analysis.primary_results(scores, _sequential_specs(dataclasses.asdict(design), list(range(10))))
    folder = tmp_path / "looks" / "main" / "tiny-s"
    folder.mkdir(parents=True)
    assert check_looks(tmp_path, primary).equals(primary)  # no look file: nothing to check
    # the look file's fields that matter here (bandpo.decide.looks.look_record writes them among others)
    record = {"verdict": primary["verdict"].iloc[0], "n": int(primary["n"].iloc[0]), "look": 1}
    (folder / "look1.json").write_text(json.dumps(record))
    assert check_looks(tmp_path, primary)["note"].fillna("").tolist() == [""]  # they agree
    (folder / "look2.json").write_text(json.dumps({"verdict": "better", "n": 10}))
    (note,) = check_looks(tmp_path, primary)["note"]
    assert note.startswith("the DAG's look2.json says 'better' at n = 10; recomputed from the scores")


def test_an_exploratory_primary_has_no_verdict_and_the_pairs_it_would_need():
    from bandpo.stats.power import pairs_needed

    diffs = np.random.default_rng(2).normal(-0.01, 0.025, 5)
    specs = {"horizon": {"primary": {"compare": ["bandpo_kl", "grpo"], "task": "tiny_math", "margin": 2.0,
                                     "exploratory": "its n_max does not fit the budget"},
                         "margins": {"tiny-s": 0.02}}}  # fmt: skip
    scores = _sequential_scores(diffs).assign(experiment="horizon")
    (row,) = analysis.primary_results(scores, specs).itertuples()
    assert row.verdict == "exploratory" and row.rule == "exploratory" and row.role == "primary"
    assert row.n_needed == pairs_needed(float(np.std(diffs, ddof=1)), 0.02) and row.n == 5
    assert row.note == "its n_max does not fit the budget" and np.isnan(row.stability)
    assert row.label == f"exploratory: no verdict (a single look decides from n = {int(row.n_needed)})"
    assert row.difference == pytest.approx(diffs.mean(), abs=1e-12) and row.ci_low < row.difference < row.ci_high
    ((_, note),) = experiment_notes(specs, pd.DataFrame([row._asdict()]).drop(columns="Index"))
    assert "(primary, exploratory: no verdict)" in note and "its n_max does not fit the budget" in note


def test_margins_are_the_run_plans_fractions_only():
    """The report reads its margins as the run plan gives them (`report_experiments`: fractions of the score per
    model, nats for entropy, the design's fields), with the published configs' points converted by the same
    function; the analysis converts no points itself, and a spec that carries the config's points without the
    plan's fractions is an error, not a silent factor of 100."""
    cfg = {"experiments": {
        "main": {"models": ["s", "m"], "primary": {"compare": ["a", "grpo"], "margin": {"s": 2.0, "m": 3.0},
                                                   "seeds": list(range(10)),
                                                   "sequential": {"k": 5, "n_max": 20, "planning_sd": 2.7,
                                                                  "alpha": 0.05, "beta": 0.1, "spending": "obf",
                                                                  "futility_spending": "hsd:-2"}}},
        "cell": {"models": ["s"], "axis": "ax", "methods": ["grpo"]},
        "other": {"models": ["s"], "primary": {"compare": ["a", "grpo"], "entropy_margin": 0.02,
                                               "entropy_compare": ["a"]}},
    }, "axes": {"ax": {"primary": {"margin": 4.0}}}}  # fmt: skip
    plan = study.report_experiments(cfg)
    assert plan["main"]["margins"] == pytest.approx({"s": 0.02, "m": 0.03})
    assert plan["main"]["designs"]["s"]["margin"] == pytest.approx(0.02)
    assert plan["main"]["designs"]["m"]["planning_sd"] == pytest.approx(0.027)
    assert plan["cell"]["margins"] == pytest.approx({"s": 0.04}) and plan["cell"]["methods"] == ["grpo"]
    assert plan["other"]["margins"] == pytest.approx({"s": 0.02}) and plan["other"]["entropy_margins"] == {"s": 0.02}
    assert "designs" not in plan["other"] and "methods" not in plan["main"]
    # the analysis reads them as they are: no conversion of its own
    from bandpo.analysis.experiments import score_margin

    assert score_margin(plan, "main", "m") == pytest.approx(0.03) and score_margin(plan, "nope", "s") == 0.02
    with pytest.raises(ValueError, match="primary.margin without the run plan's 'margins'"):
        score_margin({"main": cfg["experiments"]["main"]}, "main", "s")
    # no module of the analysis or of the DAG's decision jobs scales a margin by 100 (docs.blocks.history plans
    # from the publications' points in git history and is not the report's); the report prints fractions as
    # points, nothing more
    for path in sorted([*(ROOT / "bandpo" / "analysis").glob("*.py"), *(ROOT / "bandpo" / "decide").glob("*.py")]):
        text = path.read_text()
        assert not re.search(r"\bPOINTS\b|/\s*100\b|\*\s*0?\.01\b|\bscale\s*=\s*POINTS", text), path.name
    # the published configs (points) go through the same plan function
    from published_runs import published_experiments

    published = published_experiments(ROOT / "results")
    assert published["main"]["margins"] == pytest.approx({"tiny-s": 0.02, "tiny-m": 0.02})
    assert published_experiments(ROOT / "results" / "horizon")["horizon"]["entropy_margins"] == {"tiny-s": 0.02}


def test_a_run_digest_leaves_out_what_wall_clock_time_decides(tmp_path):
    """Two runs of one seed that differ only in timings and in ``grader_retries`` (items regraded with a longer time
    budget: the same grades, a count that follows the machine's load) have one digest; any other field changes it."""
    from bandpo.report.publish import run_digests

    def digest(rows: list[dict]) -> str:
        run = tmp_path / "runs" / "tiny-s" / "grpo" / "seed0"
        run.mkdir(parents=True, exist_ok=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        (digests,) = run_digests(tmp_path)
        return digests["metrics_sha256"]

    row = {"step": 1, "reward_mean": 0.25, "entropy": 0.5, "grader_timeouts": 0}
    same = digest([{**row, "step_seconds": 1.0, "grader_retries": 0}])
    assert digest([{**row, "step_seconds": 9.5, "grader_retries": 3}]) == same
    assert digest([{**row, "step_seconds": 1.0, "grader_retries": 0, "grader_timeouts": 1}]) != same
    assert digest([{**row, "step_seconds": 1.0, "grader_retries": 0, "reward_mean": 0.5}]) != same


def test_the_seeds_note_gives_each_seed_count_its_t_quantile_and_says_so_of_one_seed():
    from bandpo.report.notes import seeds_note

    table = pd.DataFrame({"entry": ["base", "grpo", "bandpo_kl"], "n_seeds": [1, 3, 5]})
    note = seeds_note(table)
    assert "Rows have 3 to 5 seeds" in note and "4.30 at 3 seeds, 2.78 at 5 seeds" in note
    one = seeds_note(pd.DataFrame({"entry": ["base", "grpo"], "n_seeds": [1, 1]}))
    assert "Rows have 1 seed" in one and "t(0.975" not in one


def test_the_run_statistics_registry_gives_the_published_columns_and_the_pages():
    """`RUN_METRICS` declares each training statistic once: runs.csv's columns and leaderboard.csv's training columns
    come from it in the published order (results/runs.csv, results/leaderboard.csv), the page shows those that
    declare a display, and a statistic declared with a display appears on the page with no other change."""
    import dataclasses

    from bandpo.analysis import training
    from bandpo.report import columns

    published_runs = (ROOT / "results" / "runs.csv").read_text().splitlines()[0].split(",")
    assert ["experiment", *training.RUN_COLUMNS] == published_runs  # the experiment: bandpo.analysis.experiments
    board = (ROOT / "results" / "leaderboard.csv").read_text().splitlines()[0].split(",")
    trained = [c for c in training.ENTRY_COLUMNS if c not in ("model", "entry")]
    assert [c for c in board if c in trained] == trained
    table = pd.DataFrame([{"entry": "grpo", "method": "grpo", "params": "", "entropy_final": 0.25,
                           "entropy_final_ci_low": 0.2, "entropy_final_ci_high": 0.3, "clipfrac": 0.0123,
                           "train_seconds_mean": 90.0, "approx_kl": 0.01}])  # fmt: skip
    shown = {c.key: c for c in columns.display_columns(table)}
    row = table.iloc[0].to_dict()
    assert shown["entropy_final"].text(row) == "0.250 [0.200, 0.300]"
    assert shown["clipfrac"].text(row) == "1.23" and "train_seconds_mean" in shown
    assert "approx_kl" not in shown  # declared without a display
    kl = dataclasses.replace(training.RUN_METRICS["approx_kl"], entry="mean", display=training.Display("KL", 1.0, 3))
    assert columns.run_column(kl, table).text(row) == "0.010"
    # the claim of a run comparison is its statistic's better direction
    from bandpo.analysis.experiments import RUN_STATISTICS

    assert {s.metric: (s.word, s.lower) for s in RUN_STATISTICS.values()} == {
        "entropy_final": ("higher", False), "entropy_auc": ("higher", False),
        "clip_upper_low": ("lower", True), "clip_lower_low": ("lower", True)}  # fmt: skip


def test_experiments_name_their_views_else_the_report_infers_them():
    """An experiment's ``views`` (config) are the figures that draw its runs; one that names none is drawn by the
    figures of its kind (reward: random; the probe's curves logged; an updates_per_step axis's cells). A name that
    is not a figure of one kind of experiment is a config error naming the experiment and the choices."""
    from types import SimpleNamespace

    from bandpo.report.build import figure_experiments
    from bandpo.report.figures import EXPERIMENT_FIGURES, check_views

    experiments = {
        "main": {},
        "rr": {"train": {"reward": "random"}},
        "rr-probed": {"train": {"reward": "random"}, "views": ["probe_curves"]},  # named: not the inferred kind
        "named": {"views": ["random_reward_entropy"]},
    }
    board = SimpleNamespace(experiments=experiments, axes={"off": {"key": "updates_per_step", "cells": ["d1", "d8"]}})
    metrics = pd.DataFrame({"experiment": ["p", "rr-probed", "main"], "probe/p_correct": [0.1, 0.2, np.nan]})
    views = figure_experiments(metrics, board)
    assert set(views) == set(EXPERIMENT_FIGURES)
    assert views["random_reward_entropy"] == ["rr", "named"]
    assert views["probe_curves"] == ["p", "rr-probed"] and views["probe_clipfrac_buckets"] == ["p"]
    assert views["offpolicy_dose"] == views["offpolicy_entropy"] == ["d1", "d8"]
    check_views(experiments)
    for bad in ("forest", "probe_curve"):
        with pytest.raises(ValueError, match=rf"experiments\.named\.views: '{bad}'.*choose from random_reward_entropy"):
            check_views({"named": {"views": [bad]}})


def test_a_view_no_figure_draws_fails_the_dag_before_any_job(tmp_path):
    """`snakemake -n` on a config whose experiment names an unknown view: one line naming the field and the choices,
    exit 1, no job planned (the Snakefile checks the views with the config)."""
    from conftest import snakemake

    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "config" / "smoke.yaml").read_text().replace("views: [random_reward_entropy]",
                                                                       "views: [random_reward_entropi]"))  # fmt: skip
    proc = snakemake(tmp_path, "-n", "--cores", "1", configfile=bad, timeout=300)
    assert proc.returncode == 1, proc.output[-2000:]
    assert "Invalid config" in proc.output and "experiments.random-reward.views: 'random_reward_entropi'" in proc.output
    assert "Traceback" not in proc.output and "Job stats" not in proc.output and not (tmp_path / "results").exists()
