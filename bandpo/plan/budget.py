"""What a DAG run cost per rule, and what a config's DAG will cost before it runs.

    python -m bandpo.plan.budget times logs/embedded/benchmarks [--cores 2] [--log .snakemake/log/X.snakemake.log ...]
                                         [--csv results/dag_rules.csv] [--results results/embedded]
    python -m bandpo.plan.budget plan [--config config/config.yaml] [--measured results] [--cores 2]
                                        [--fixed-s 8] [--planned-fixed-s 7] [--separation-d 16]
                                        [--measured-separation-d 4] [--rl-steps tiny-s=48] [--build-steps tiny-s=1400]
                                        [--only main] [--seeds 5] [--budget-min 90]

``times``: the per-rule cost of a finished run, from the benchmark files Snakemake wrote
(logs/{profile}/benchmarks/**/*.tsv). A Markdown table, one row per rule kind (model builds per model, training runs
per model and experiment, lm-eval groups per model, data, report): jobs, mean and summed wall seconds, summed CPU
seconds, and the summed wall time divided by the cores (what the rule kind costs the DAG when the cores are kept
busy). The wall time of the whole run (``--log``: from the first to the last time stamp of snakemake's log of the
run; a run that was stopped and resumed has a log per start, and its wall time is the sum of their spans, the time
between the starts left out) against the sum / cores shows the scheduling gaps (a core idle while a job waits for
its inputs). ``--csv`` also writes the table (columns rule, jobs, wall_s_mean, wall_s_sum, cpu_s_sum,
minutes_per_core, elapsed_min), as the publication run's results/dag_rules.csv, from which docs/results.md's
per-rule table is generated. ``--results results/{profile}`` (the run's results folder) adds the fixed cost per job
(issue #23's measure): a training job's wall time in its benchmark file minus the training time its run.json records
(``train_seconds_total``, the sum of its steps), i.e. start-up, imports, model load, checkpoints, publishing and
exit; an lm-eval group's wall time minus the scoring time its task files record (``seconds.eval``, one scoring per
run). Printed per rule kind (median and mean over its jobs); the probe's training jobs also spend their probe
measurements outside the steps. With ``--csv`` the medians go into the table's column ``fixed_s`` (blank for other
rules), which ``plan`` uses as the measured run's fixed part of a training job.

``plan``: what a config's DAG will cost on the publication machine, estimated before the run from a measured run.
The unit costs come from a finished publication run's committed files (``--measured``, default ``results/``):
``dag_rules.csv`` (the ``times`` table of that run) and ``provenance.json`` (the resolved config that run used:
steps, pretraining steps and seeds behind each mean). The cost model is linear and says what it assumes:

- a training job costs ``fixed + steps x completions x per_completion(model, D)``, D = updates_per_step x
  ppo_epochs, completions = prompts_per_step x samples_per_prompt (the rollout batch: sampling, the old log-prob
  pass and the updates all scale with it; measured side by side on tiny-s, 16 prompts cost 0.485x of 32 per step,
  so the linear model is slightly conservative). ``per_completion`` comes from the measured kinds of that model:
  the one with the same D (an experiment of the measured run that trained at that D), else the nearest measured D
  of that model. ``fixed`` (start-up, model load, saving, the grader) is, in the calibration, the measured run's:
  its table's ``fixed_s`` per rule kind where the table has that column, else ``--fixed-s`` (default 8 s); in the
  plan ``--planned-fixed-s``, by default the median of the measured ``fixed_s`` over the training kinds, else
  ``--fixed-s`` (``benchmarks/bench_job_startup.py`` measures the change of a code change side by side);
- a base-model build costs ``(measured mean) x (build steps / measured build steps)`` (pretraining is ~97% of it);
- an lm-eval group costs ``(measured mean of that model's groups) x (seeds x test problems / the measured
  groups' seeds x test problems)`` (the test problems of its experiment's tasks, as the data entries give them);
- the other rules (data, atlas, select, report, publish) cost what they cost in the measured run;
- the separation run's D is chosen at run time by its selection rule: ``--separation-d`` (default: the largest D
  of its axis, the dearest case). In the measured run it is ``--measured-separation-d`` (docs/results.md states
  it); without it that experiment's runs do not calibrate a per-step cost (the axis cell whose settings they
  repeat does), though their fixed cost counts.

The estimate of the elapsed time is the summed wall time divided by the cores, times the measured run's ratio of
elapsed time to that quotient (its scheduling gaps). Applied to the measured run's own config it returns that
run's elapsed time up to the model's approximations (``tests/workflow/test_workflow.py`` checks within 5%).

``--only`` and ``--seeds`` ask what one experiment alone costs (the config's ``only``) with that many seeds (seeds
0 .. N-1 for the global seed list and for the named experiments; a primary pair with seeds of its own,
``primary.seeds``, keeps its extra seeds on top); with ``--budget-min`` it also prints the largest seed count whose
estimate fits the budget: what a saving buys in seeds.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from bandpo.models.sizes import SIZES
from bandpo.plan.config_files import read_config
from bandpo.plan.sweep import base_models, eval_groups, run_settings, runs, sequential_slots
from bandpo.plan.validate import ConfigError, validate_config
from bandpo.study import MAIN, by_id, slot_seeds, split_slot
from bandpo.train.settings import TrainConfig, typed_fields

__all__ = ["CostModel", "estimate", "fixed_costs", "jobs", "kind_label", "load_config", "read_measured",
           "stopped_pairs", "summarize", "table"]  # fmt: skip

FIXED_S = 8.0  # start-up, imports, grader workers, model load and saving of a training job, where a table lacks fixed_s
COLUMNS = ("rule", "jobs", "wall_s_mean", "wall_s_sum", "cpu_s_sum", "minutes_per_core", "elapsed_min", "fixed_s")


# -- times: the per-rule cost of a finished run ---------------------------------------------------------------------
def kind_label(kind: str, model: str, experiment: str | None = None) -> str:
    """The table's row name of a job kind (``train`` per model and experiment, ``build`` and ``eval`` per model);
    ``plan`` matches its planned jobs to a measured table by it."""
    return {"train": f"train {model} ({experiment})", "build": f"model build {model}",
            "eval": f"lm-eval group {model}"}[kind]  # fmt: skip


def rule_kind(rel: Path) -> str:
    """The row a benchmark file belongs to, from its path under the benchmarks folder."""
    parts = rel.with_suffix("").parts
    if parts[0] == "train" and len(parts) >= 3:  # train/{model}/{entry}[@{experiment}]/seed{s}
        return kind_label("train", parts[1], split_slot(parts[2])[1])
    if parts[0] == "models" and len(parts) >= 2:  # models/{model}[/seed{s}]
        return kind_label("build", parts[1])
    if parts[0] == "eval" and len(parts) >= 2:  # eval/{model}/...
        return kind_label("eval", parts[1])
    return parts[0]


def read_benchmark(path: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of the last run recorded in one benchmark file; NaN where a field is missing."""
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    if not rows:
        return math.nan, math.nan

    def number(key: str) -> float:
        try:
            return float(rows[-1].get(key, "nan"))
        except ValueError:
            return math.nan

    return number("s"), number("cpu_time")


def summarize(folder: Path) -> dict[str, list[tuple[float, float]]]:
    """Per rule kind, (wall s, CPU s) of each benchmark file under ``folder``."""
    kinds: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for path in sorted(folder.rglob("*.tsv")):
        kinds[rule_kind(path.relative_to(folder))].append(read_benchmark(path))
    return dict(kinds)


STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]", re.M)


def fixed_costs(folder: Path, results: Path) -> dict[str, list[float]]:
    """Per rule kind, each job's fixed cost in seconds (see the module's docstring): training jobs and lm-eval
    groups whose records are under ``results`` (``runs/`` and ``eval/``, laid out as the benchmark files)."""
    kinds: dict[str, list[float]] = defaultdict(list)
    for path in sorted(folder.rglob("*.tsv")):
        rel = path.relative_to(folder)
        wall, _ = read_benchmark(path)
        if rel.parts[0] == "train":  # train/{model}/{slot}/seed{s}.tsv -> runs/{model}/{slot}/seed{s}/run.json
            record = results / "runs" / Path(*rel.with_suffix("").parts[1:]) / "run.json"
            if record.is_file():
                kinds[rule_kind(rel)].append(wall - json.loads(record.read_text())["train_seconds_total"])
        elif rel.parts[0] == "eval" and len(rel.parts) == 3:  # eval/{model}/{slot}.tsv -> eval/{model}/{slot}/seed*/
            scored = []
            for run in sorted((results / "eval" / Path(*rel.with_suffix("").parts[1:])).glob("seed*")):
                # one scoring of a run covers all its tasks; each task file records that scoring's time
                times = [json.loads(t.read_text()).get("seconds", {}).get("eval") for t in run.glob("*.json")]
                scored += {x for x in times if isinstance(x, (int, float))}
            if scored:
                kinds[rule_kind(rel)].append(wall - sum(scored))
    return dict(kinds)


def elapsed_minutes(*logs: Path) -> float:
    """Minutes from the first to the last time stamp (``[Tue Dec  1 21:20:40 2026]``) of a snakemake log; of a run
    resumed after a stop (one log per start), the sum of the logs' spans."""
    total = 0.0
    for log in logs:
        text = log.read_text()
        stamps = [datetime.strptime(" ".join(m.split()), "%a %b %d %H:%M:%S %Y") for m in STAMP.findall(text)]
        if len(stamps) < 2:
            raise ValueError(f"{log}: fewer than two time stamps")
        total += (max(stamps) - min(stamps)).total_seconds() / 60
    return total


def table(kinds: dict[str, list[tuple[float, float]]], cores: int, elapsed: float = math.nan) -> list[dict]:
    """One row per rule kind and a last row ``all`` (carrying ``elapsed_min``)."""
    rows = []
    for kind in sorted(kinds):
        values = kinds[kind]
        wall = sum(w for w, _ in values if not math.isnan(w))
        cpu = sum(c for _, c in values if not math.isnan(c))
        rows.append({"rule": kind, "jobs": len(values), "wall_s_mean": wall / len(values), "wall_s_sum": wall,
                     "cpu_s_sum": cpu, "minutes_per_core": wall / cores / 60, "elapsed_min": math.nan})  # fmt: skip
    wall, cpu = sum(r["wall_s_sum"] for r in rows), sum(r["cpu_s_sum"] for r in rows)
    rows.append({"rule": "all", "jobs": sum(r["jobs"] for r in rows), "wall_s_mean": math.nan, "wall_s_sum": wall,
                 "cpu_s_sum": cpu, "minutes_per_core": wall / cores / 60, "elapsed_min": elapsed})  # fmt: skip
    return rows


def write_table(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """The table as CSV (results/dag_rules.csv): 6 significant digits, NaN as a blank cell."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else f"{v:.6g}" if isinstance(v, float)
                            else v) for k, v in r.items()})  # fmt: skip


def times(args: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    if not args.folder.is_dir():
        ap.error(f"not a folder: {args.folder}")
    kinds = summarize(args.folder)
    if not kinds:
        ap.error(f"no benchmark files under {args.folder}")
    rows = table(kinds, args.cores, elapsed_minutes(*args.log) if args.log else math.nan)
    fixed = fixed_costs(args.folder, args.results) if args.results else {}
    if fixed:
        for r in rows:
            r["fixed_s"] = statistics.median(fixed[r["rule"]]) if r["rule"] in fixed else math.nan
    print(f"| rule | jobs | wall s / job | wall s, sum | CPU s, sum | sum / {args.cores} cores, min |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        mean = "" if r["rule"] == "all" else f"{r['wall_s_mean']:.0f}"
        print(f"| {r['rule']} | {r['jobs']} | {mean} | {r['wall_s_sum']:.0f} | {r['cpu_s_sum']:.0f} | "
              f"{r['minutes_per_core']:.1f} |")  # fmt: skip
    if args.log:
        starts = f" (the sum over {len(args.log)} starts)" if len(args.log) > 1 else ""
        print(f"\nelapsed, first to last job: {rows[-1]['elapsed_min']:.1f} min{starts}")
    if fixed:
        print("\n| rule | jobs | fixed s / job, median | mean |")
        print("|---|---:|---:|---:|")
        for kind in sorted(fixed):
            v = fixed[kind]
            print(f"| {kind} | {len(v)} | {statistics.median(v):.2f} | {statistics.fmean(v):.2f} |")
    if args.csv:
        write_table(rows, args.csv)
    return 0


# -- plan: a config's cost, estimated from a measured run ------------------------------------------------------------
def _d(cfg: Mapping[str, Any], model: str, entry: str, experiment: str) -> tuple[int, int, int]:
    """(steps, D, completions per step) of a run: D = updates_per_step x ppo_epochs, completions = prompts_per_step
    x samples_per_prompt (TrainConfig's defaults where the config is silent)."""
    t = TrainConfig(**typed_fields(run_settings(cfg, model, entry, experiment)))
    return int(t.steps), t.updates_per_step * t.ppo_epochs, t.prompts_per_step * t.samples_per_prompt


def _build_steps(cfg: Mapping[str, Any], model: str) -> int:
    m = by_id(cfg["models"])[model]
    return int((m.get("build") or {}).get("steps", SIZES[m.get("size", model)].steps))


def _test_problems(cfg: Mapping[str, Any], experiment: str) -> int:
    """The test problems an experiment's scoring reads: the ``n_test`` of its tasks' data entries (1 for a data set
    that states none: its groups then scale by seeds alone)."""
    data = by_id(cfg["data"])
    return sum(int(data.get(t["data"], {}).get("n_test") or 1) for t in cfg["experiments"][experiment]["eval_tasks"])


def _separation_d(cfg: Mapping[str, Any], xp: Mapping[str, Any], default: int | None) -> int | None:
    sel = xp.get("select")
    if not sel:
        return None
    if default is not None:
        return default
    axis = cfg["axes"][sel["axis"]]
    return max(int(cfg["experiments"][c]["train"][axis["key"]]) for c in axis["cells"])


def jobs(
    cfg: Mapping[str, Any], separation_d: int | None = None, stopped: Mapping[tuple[str, str], int] | None = None
) -> list[dict[str, Any]]:
    """Every job of the DAG with what its cost depends on: kind, model, experiment, steps, D, seeds (``selected``:
    a training job whose D its experiment's selection rule picks at run time). A sequential primary's pair runs
    every look up to its n_max, unless ``stopped`` ({(experiment, model): pairs}, `stopped_pairs` of a finished run)
    says where it stopped: its runs and scored seeds beyond those pairs are left out."""
    out: list[dict[str, Any]] = []
    pairs = sequential_slots(cfg)

    def ran(model: str, slot: str, experiment: str) -> set[int] | None:  # None: every seed of the slot
        n = (stopped or {}).get((experiment, model))
        if n is None or slot not in pairs:
            return None
        return set(cfg["experiments"][experiment]["primary"]["seeds"][:n])

    for model, slot, seed in runs(cfg, builtin=True):
        entry, experiment = split_slot(slot)
        if (kept := ran(model, slot, experiment)) is not None and seed not in kept:
            continue
        xp = cfg["experiments"][experiment]
        steps, d, completions = _d(cfg, model, entry, experiment)
        sel_d = _separation_d(cfg, xp, separation_d)
        out.append({"kind": "train", "model": model, "experiment": experiment, "steps": steps,
                    "d": sel_d if sel_d is not None else d, "completions": completions,
                    "selected": bool(xp.get("select"))})  # fmt: skip
    for folder in base_models(cfg):  # resources/models/{model}/seed{s}
        model = folder.split("/")[2]
        if by_id(cfg["models"])[model]["source"] == "tiny":  # a download (hub, PyPI) is among the other rules
            out.append({"kind": "build", "model": model, "steps": _build_steps(cfg, model)})
    for model, slot in eval_groups(cfg):  # the slot's seeds: a primary pair's primary.seeds where set
        entry, experiment = split_slot(slot)
        seeds = slot_seeds(cfg, experiment, entry)
        kept = ran(model, slot, experiment)
        out.append({"kind": "eval", "model": model, "seeds": len(seeds if kept is None else kept & set(seeds)),
                    "problems": _test_problems(cfg, experiment)})  # fmt: skip
    return out


def stopped_pairs(folder: Path) -> dict[tuple[str, str], int]:
    """Where a finished run's sequential primaries stopped: {(experiment, model): the pairs its decided row in
    ``primary.csv`` rests on} (rows with ``rule`` sequential; none without the file)."""
    path = Path(folder) / "primary.csv"
    if not path.is_file():
        return {}
    with path.open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("rule") == "sequential" and r.get("n")]
    return {(r["experiment"], r["model"]): int(float(r["n"])) for r in rows}


def read_measured(folder: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The measured run's per-rule table (by row name; numbers as floats, a blank cell NaN) and its resolved
    config (``provenance.json``)."""
    folder = Path(folder)
    with (folder / "dag_rules.csv").open(newline="") as fh:
        rules = {r["rule"]: {k: (v if k == "rule" else float(v) if v != "" else math.nan) for k, v in r.items()}
                 for r in csv.DictReader(fh)}  # fmt: skip
    cfg = json.loads((folder / "provenance.json").read_text(encoding="utf-8"))["config"]
    return rules, cfg


def label(job: Mapping[str, Any]) -> str:
    """The per-rule table's row of a job (`kind_label`)."""
    return kind_label(job["kind"], job["model"], job.get("experiment"))


class CostModel:
    """Unit costs from a measured run (see the module docstring)."""

    def __init__(self, rules: Mapping[str, Mapping[str, float]], measured_cfg: Mapping[str, Any],
                 measured_separation_d: int | None = None, fixed_s: float = FIXED_S,
                 planned_fixed_s: float | None = None,
                 stopped: Mapping[tuple[str, str], int] | None = None) -> None:  # fmt: skip
        self._jobs_at: dict[tuple[str, int], float] = {}
        self.per_step: dict[str, dict[int, float]] = defaultdict(dict)  # model -> D -> wall s per step and completion
        self.build: dict[str, float] = {}  # model -> wall s per pretraining step
        self.eval: dict[str, float] = {}  # model -> wall s per seed of a group
        self.other = 0.0
        self.elapsed_factor = 1.0  # the measured run's elapsed time / (summed wall time / cores), when it has one
        measured: dict[str, list[dict[str, Any]]] = defaultdict(list)  # row name -> the measured run's jobs
        train_fixed: list[float] = []  # the measured fixed_s of each training kind that has one
        for j in jobs(measured_cfg, measured_separation_d, stopped):  # the jobs the measured run ran
            measured[label(j)].append(j)
        for rule, r in rules.items():
            mine = measured.get(rule)
            if rule == "all":
                if r["elapsed_min"] > 0:
                    self.elapsed_factor = r["elapsed_min"] / r["minutes_per_core"]
            elif not mine:
                self.other += r["wall_s_sum"]
            elif mine[0]["kind"] == "train":
                model, steps, d = mine[0]["model"], mine[0]["steps"], mine[0]["d"]
                # per completion of a step: the measured run's fixed part removed (not the planned one)
                measured_fixed = r["fixed_s"] if r.get("fixed_s", 0) > 0 else None  # NaN or absent: not measured
                if measured_fixed is not None:
                    train_fixed.append(measured_fixed)
                if mine[0]["selected"] and measured_separation_d is None:
                    continue  # its D is not known here: the axis cell it repeats calibrates that D
                per = (r["wall_s_mean"] - (measured_fixed or fixed_s)) / steps / mine[0]["completions"]
                # several kinds at one D (main, probe, random reward): the one with most jobs wins
                if d not in self.per_step[model] or r["jobs"] > self._jobs_at.get((model, d), 0):
                    self.per_step[model][d] = per
                    self._jobs_at[(model, d)] = r["jobs"]
            elif mine[0]["kind"] == "build":
                self.build[mine[0]["model"]] = r["wall_s_mean"] / mine[0]["steps"]
            else:
                self.eval[mine[0]["model"]] = r["wall_s_sum"] / max(1, sum(j["seeds"] * j["problems"] for j in mine))
        if planned_fixed_s is None:
            planned_fixed_s = statistics.median(train_fixed) if train_fixed else fixed_s
        self.fixed_s = planned_fixed_s

    def cost(self, job: Mapping[str, Any]) -> float:
        model = job["model"]
        if job["kind"] == "train":
            per = self.per_step.get(model) or self.per_step[_fallback(self.per_step, model)]
            d = min(per, key=lambda x: (abs(x - job["d"]), -x))  # the measured D nearest the planned one
            return self.fixed_s + job["steps"] * job["completions"] * per[d]
        if job["kind"] == "build":
            return job["steps"] * self.build.get(model, self.build[_fallback(self.build, model)])
        return job["seeds"] * job["problems"] * self.eval.get(model, self.eval[_fallback(self.eval, model)])


def _fallback(table: Mapping[str, Any], model: str) -> str:
    """A model the measured run did not have: the measured one whose id it starts with (tiny-s-x -> tiny-s)."""
    known = sorted((k for k in table if model.startswith(k)), key=len)
    if not known:
        raise SystemExit(f"no measured cost for model {model!r} (measured: {sorted(table)})")
    return known[-1]


def estimate(
    cfg: Mapping[str, Any],
    model: CostModel,
    cores: int,
    separation_d: int | None = None,
    stopped: Mapping[tuple[str, str], int] | None = None,
) -> dict:
    """Rows per job kind (kind, model, experiment: jobs, wall s) and the estimated elapsed minutes: at every
    sequential primary's maximum pairs, or where ``stopped`` says it stopped (`jobs`)."""
    rows: dict[str, list[float]] = defaultdict(list)
    for j in jobs(cfg, separation_d, stopped):
        rows[label(j)].append(model.cost(j))
    total = sum(sum(v) for v in rows.values()) + model.other
    return {
        "rows": {k: (len(v), sum(v)) for k, v in sorted(rows.items())},
        "other_s": model.other,
        "wall_s": total,
        "elapsed_min": total / cores / 60 * model.elapsed_factor,
    }


def load_config(path: str | os.PathLike, rl_steps: Sequence[str] = (), build_steps: Sequence[str] = (),
                only: str | None = None, seeds: int | None = None,
                root: str | os.PathLike = ".") -> dict[str, Any]:  # fmt: skip
    """The config, with what-if overrides of a model's RL steps or pretraining steps (``MODEL=STEPS``), of the
    experiments run (``only``) and of their seeds (0 .. seeds - 1: the global list, the named experiments' and those
    that take the global one; a primary pair with seeds of its own, ``primary.seeds``, keeps as many seeds beyond
    its experiment's as the config gives it: 0 .. seeds + extra - 1; a sequential primary keeps its seeds as they
    are, the maximum n of its design); validated with ``root`` as the repository."""
    raw = read_config(path)  # an overlay with the config it extends
    if only:
        raw["only"] = only
    if seeds is not None:
        if seeds < 2:
            raise SystemExit("--seeds: at least 2 (a paired interval needs two seeds)")
        xps = raw.get("experiments") or {}
        before = {x: list((v or {}).get("seeds", raw["seeds"])) for x, v in xps.items()}
        raw["seeds"] = list(range(seeds))
        for name in (only or "").split(","):
            if name.strip() in xps:
                xps[name.strip()]["seeds"] = list(range(seeds))
        if "seeds" in (xps.get(MAIN) or {}):  # a resolved config (a run's provenance): main's are the global seeds
            xps[MAIN]["seeds"] = list(range(seeds))
        for x, v in xps.items():
            primary = (v or {}).get("primary") or {}
            if primary.get("sequential") or not primary.get("seeds"):
                continue
            if list(v.get("seeds", raw["seeds"])) != before[x]:
                extra = len(set(primary["seeds"]) - set(before[x]))
                primary["seeds"] = list(range(seeds + extra))
    models = by_id(raw["models"])
    for assignments, key in ((rl_steps, "train"), (build_steps, "build")):
        for a in assignments:
            name, _, steps = a.partition("=")
            if name not in models or not steps.isdigit():
                raise SystemExit(f"--{'rl' if key == 'train' else 'build'}-steps {a!r}: expected MODEL=STEPS, MODEL "
                                 f"one of {sorted(models)}")  # fmt: skip
            models[name].setdefault(key, {})["steps"] = int(steps)
    return validate_config(raw, root=root)


def plan(args: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    for name in ("dag_rules.csv", "provenance.json"):
        if not (args.measured / name).is_file():
            ap.error(f"--measured {args.measured}: no {name} (a publication run's results folder)")
    if not Path(args.config).is_file():
        ap.error(f"--config {args.config}: not a file")
    rules, measured_cfg = read_measured(args.measured)
    model = CostModel(rules, measured_cfg, args.measured_separation_d, args.fixed_s, args.planned_fixed_s,
                      stopped=stopped_pairs(args.measured))  # fmt: skip

    def config(seeds: int | None) -> dict[str, Any]:
        return load_config(args.config, args.rl_steps, args.build_steps, args.only, seeds)

    est = estimate(config(args.seeds), model, args.cores, args.separation_d)
    print("| job kind | jobs | estimated wall s |\n|---|---:|---:|")
    for row, (n, wall) in est["rows"].items():
        print(f"| {row} | {n} | {wall:.0f} |")
    print(f"| other rules (as measured) | | {est['other_s']:.0f} |")
    print(
        f"\nsum {est['wall_s']:.0f} wall-s; estimated elapsed on {args.cores} cores: {est['elapsed_min']:.1f} min "
        f"(x {model.elapsed_factor:.3f}, the measured run's scheduling factor)"
    )
    if args.budget_min is not None:
        most = most_seeds_within(args.budget_min, lambda n: estimate(config(n), model, args.cores, args.separation_d))
        print(f"seeds that fit {args.budget_min:g} min: " + (f"at most {most}" if most else "none (2 do not)"))
    return 0


def most_seeds_within(budget_min: float, estimate_of: Callable[[int], Mapping[str, Any]]) -> int | None:
    """The largest seed count n in 2..40 whose estimate (``estimate_of(n)``, `estimate`'s dict) fits ``budget_min``
    minutes of elapsed time; None when none does. The search stops at the first n the config refuses (more seeds
    than a sequential primary's pair: the other entries never run more)."""
    fits = []
    for n in range(2, 41):
        try:
            est = estimate_of(n)
        except ConfigError:
            break
        if est["elapsed_min"] <= budget_min:
            fits.append(n)
    return max(fits, default=None)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bandpo.plan.budget",
        description=__doc__.split("\n\n``times``")[0] + "\n\n(the cost model: this module's docstring)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="{times,plan}")
    t = sub.add_parser(
        "times",
        help="the per-rule cost of a finished DAG run, from Snakemake's benchmark files",
        description="The per-rule cost of a DAG run (a Markdown table; --csv: results/dag_rules.csv).",
    )
    t.add_argument("folder", type=Path, help="logs/{profile}/benchmarks of a finished run")
    t.add_argument("--cores", type=int, default=2)
    t.add_argument(
        "--log",
        type=Path,
        nargs="+",
        default=None,
        help="snakemake's log of the run (.snakemake/log/*.log); several for a run resumed after a stop",
    )
    t.add_argument("--csv", type=Path, default=None, help="also write the table here")
    t.add_argument("--results", type=Path, default=None, help="the run's results/{profile}: fixed cost per job")
    t.set_defaults(run=times, parser=t)
    p = sub.add_parser(
        "plan",
        help="what a config's DAG will cost, estimated from a measured run's table",
        description="A config's DAG cost on the measured machine, from a publication run's "
        "dag_rules.csv and provenance.json (the cost model: the module's docstring).",
    )
    p.add_argument("--config", type=Path, default=Path("config/config.yaml"))
    p.add_argument("--measured", type=Path, default=Path("results"), help="a publication run's results folder")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument(
        "--fixed-s",
        type=float,
        default=FIXED_S,
        help="the measured run's fixed seconds per training job, where its table has no fixed_s",
    )
    p.add_argument(
        "--planned-fixed-s",
        type=float,
        default=None,
        help="the planned code's (default: the measured fixed_s median, else --fixed-s)",
    )
    p.add_argument("--separation-d", type=int, default=None, help="D the separation run's selection will pick")
    p.add_argument(
        "--measured-separation-d",
        type=int,
        default=None,
        help="D the measured run's selection picked (default: its runs calibrate no per-step cost)",
    )
    p.add_argument("--rl-steps", action="append", default=[], metavar="MODEL=STEPS", help="what if: RL steps")
    p.add_argument("--build-steps", action="append", default=[], metavar="MODEL=STEPS", help="what if: pretraining")
    p.add_argument("--only", default=None, help="what if: only these experiments (comma-separated, as only=)")
    p.add_argument("--seeds", type=int, default=None, help="what if: this many seeds (with --only: theirs too)")
    p.add_argument("--budget-min", type=float, default=None, help="also print the most seeds that fit this budget")
    p.set_defaults(run=plan, parser=p)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.run(args, args.parser)  # the subcommand's parser: its own usage line in an argument error


if __name__ == "__main__":
    raise SystemExit(main())
