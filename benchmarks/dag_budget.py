"""What a config's DAG will cost on the publication machine, estimated before the run from a measured run.

    python benchmarks/dag_budget.py [--config config/config.yaml] [--measured results] [--cores 2]
                                    [--separation-d 16] [--rl-steps tiny-s=48] [--build-steps tiny-s=1400]
                                    [--only main] [--seeds 5] [--budget-min 90]

The unit costs come from a finished publication run's committed files (``--measured``, default ``results/``):
``dag_rules.csv`` (mean wall seconds per job of each rule kind, from Snakemake's benchmark files) and
``provenance.json`` (the resolved config that run used: steps, pretraining steps and seeds behind each mean). The
cost model is linear and says what it assumes:

- a training job costs ``fixed + steps x completions x per_completion(model, D)``, D = updates_per_step x
  ppo_epochs, completions = prompts_per_step x samples_per_prompt (the rollout batch: sampling, the old log-prob
  pass and the updates all scale with it; measured side by side on tiny-s, 16 prompts cost 0.485x of 32 per step,
  so the linear model is slightly conservative). ``per_completion`` comes from the measured kinds of that model:
  the one with the same D (an experiment of the measured run that trained at that D), else the nearest measured D
  of that model. ``fixed`` (start-up, model load, saving, the grader) is, in the calibration, the measured run's:
  its table's ``fixed_s`` per rule kind where the table has that column (`dag_rule_times.py --results`: wall time
  minus the steps the run recorded), else ``--fixed-s`` (default 8 s); in the plan ``--planned-fixed-s``, by default
  the median of the measured ``fixed_s`` over the training kinds, else ``--fixed-s``
  (``benchmarks/bench_job_startup.py`` measures the change of a code change side by side);
- a base-model build costs ``(measured mean) x (build steps / measured build steps)`` (pretraining is ~97% of it);
- an lm-eval group costs ``(measured mean of that model's groups) x (seeds / measured seeds per group)``;
- the other rules (data, atlas, select, report, publish) cost what they cost in the measured run;
- the separation run's D is chosen at run time by its selection rule: ``--separation-d`` (default: the largest D
  of its axis, the dearest case).

The estimate of the elapsed time is the summed wall time divided by the cores, times the measured run's ratio of
elapsed time to that quotient (its scheduling gaps). Applied to the measured run's own config it returns that
run's elapsed time up to the model's approximations (``tests/test_workflow.py`` checks within 5%).

``--only`` and ``--seeds`` ask what one experiment alone costs (the config's ``only``) with that many seeds (seeds
0 .. N-1 for the global seed list and for the named experiments); with ``--budget-min`` the script also prints the
largest seed count whose estimate fits the budget: what a saving buys in seeds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bandpo.sweep import base_models, by_id, eval_groups, load_yaml, runs, split_slot, train_overrides, validate_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dag_rule_times import kind_label  # noqa: E402  (the measured table's row names)

ROOT = Path(__file__).resolve().parents[1]
FIXED_S = 8.0  # start-up, imports, grader workers, model load and saving of a training job, where a table lacks fixed_s


def _d(cfg: Mapping[str, Any], model: str, entry: str, experiment: str) -> tuple[int, int, int]:
    """(steps, D, completions per step) of a run: D = updates_per_step x ppo_epochs, completions = prompts_per_step
    x samples_per_prompt (TrainConfig's defaults where the config is silent)."""
    from bandpo.train import TrainConfig

    t = {"steps": TrainConfig.steps, "updates_per_step": TrainConfig.updates_per_step,
         "ppo_epochs": TrainConfig.ppo_epochs, "prompts_per_step": TrainConfig.prompts_per_step,
         "samples_per_prompt": TrainConfig.samples_per_prompt,
         **train_overrides(cfg, model, entry, experiment)}  # fmt: skip
    completions = int(t["prompts_per_step"]) * int(t["samples_per_prompt"])
    return int(t["steps"]), int(t["updates_per_step"]) * int(t["ppo_epochs"]), completions


def _build_steps(cfg: Mapping[str, Any], model: str) -> int:
    from bandpo.models import SIZES

    m = by_id(cfg["models"])[model]
    return int((m.get("build") or {}).get("steps", SIZES[m.get("size", model)].steps))


def _separation_d(cfg: Mapping[str, Any], xp: Mapping[str, Any], default: int | None) -> int | None:
    sel = xp.get("select")
    if not sel:
        return None
    if default is not None:
        return default
    axis = cfg["axes"][sel["axis"]]
    return max(int(cfg["experiments"][c]["train"][axis["key"]]) for c in axis["cells"])


def jobs(cfg: Mapping[str, Any], separation_d: int | None = None) -> list[dict[str, Any]]:
    """Every job of the DAG with what its cost depends on: kind, model, experiment, steps, D, seeds."""
    out: list[dict[str, Any]] = []
    for model, slot, _seed in runs(cfg, builtin=True):
        entry, experiment = split_slot(slot)
        xp = cfg["experiments"][experiment]
        steps, d, completions = _d(cfg, model, entry, experiment)
        sel_d = _separation_d(cfg, xp, separation_d)
        out.append({"kind": "train", "model": model, "experiment": experiment, "steps": steps,
                    "d": sel_d if sel_d is not None else d, "completions": completions})  # fmt: skip
    for folder in base_models(cfg):  # resources/models/{model}/seed{s}
        model = folder.split("/")[2]
        out.append({"kind": "build", "model": model, "steps": _build_steps(cfg, model)})
    for model, slot in eval_groups(cfg):
        experiment = split_slot(slot)[1]
        out.append({"kind": "eval", "model": model, "seeds": len(cfg["experiments"][experiment]["seeds"])})
    return out


def read_measured(folder: Path) -> tuple[dict[str, dict[str, float]], dict[str, Any], int | None]:
    """The measured run's per-rule table (by row name), its resolved config and the D its selection rule picked
    (made again from its scores.csv, `bandpo.report.docs.Results.selection`)."""
    from bandpo.report.docs import Results

    res = Results(folder)
    rules = {r["rule"]: r for r in res.dag.to_dict("records")}
    cfg = res.provenance["config"]
    selected = None
    if any(x.get("select") for x in cfg["experiments"].values()):
        _name, setting, _table = res.selection
        (selected,) = (int(v) for v in setting.values())
    return rules, cfg, selected


def label(job: Mapping[str, Any]) -> str:
    """The per-rule table's row of a job (`dag_rule_times.kind_label`)."""
    return kind_label(job["kind"], job["model"], job.get("experiment"))


class CostModel:
    """Unit costs from a measured run (see the module docstring)."""

    def __init__(self, rules: Mapping[str, Mapping[str, float]], measured_cfg: Mapping[str, Any],
                 measured_separation_d: int | None = None, fixed_s: float = FIXED_S,
                 planned_fixed_s: float | None = None) -> None:  # fmt: skip
        self._jobs_at: dict[tuple[str, int], float] = {}
        self.per_step: dict[str, dict[int, float]] = defaultdict(dict)  # model -> D -> wall s per step and completion
        self.build: dict[str, float] = {}  # model -> wall s per pretraining step
        self.eval: dict[str, float] = {}  # model -> wall s per seed of a group
        self.other = 0.0
        self.elapsed_factor = 1.0  # the measured run's elapsed time / (summed wall time / cores), when it has one
        measured: dict[str, list[dict[str, Any]]] = defaultdict(list)  # row name -> the measured run's jobs
        train_fixed: list[float] = []  # the measured fixed_s of each training kind that has one
        for j in jobs(measured_cfg, measured_separation_d):
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
                per = (r["wall_s_mean"] - (measured_fixed or fixed_s)) / steps / mine[0]["completions"]
                # several kinds at one D (main, probe, random reward): the one with most jobs wins
                if d not in self.per_step[model] or r["jobs"] > self._jobs_at.get((model, d), 0):
                    self.per_step[model][d] = per
                    self._jobs_at[(model, d)] = r["jobs"]
            elif mine[0]["kind"] == "build":
                self.build[mine[0]["model"]] = r["wall_s_mean"] / mine[0]["steps"]
            else:
                self.eval[mine[0]["model"]] = r["wall_s_sum"] / max(1, sum(j["seeds"] for j in mine))
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
        return job["seeds"] * self.eval.get(model, self.eval[_fallback(self.eval, model)])


def _fallback(table: Mapping[str, Any], model: str) -> str:
    """A model the measured run did not have: the measured one whose id it starts with (tiny-s-x -> tiny-s)."""
    known = sorted((k for k in table if model.startswith(k)), key=len)
    if not known:
        raise SystemExit(f"no measured cost for model {model!r} (measured: {sorted(table)})")
    return known[-1]


def estimate(cfg: Mapping[str, Any], model: CostModel, cores: int, separation_d: int | None = None) -> dict:
    """Rows per job kind (kind, model, experiment: jobs, wall s) and the estimated elapsed minutes."""
    rows: dict[str, list[float]] = defaultdict(list)
    for j in jobs(cfg, separation_d):
        rows[label(j)].append(model.cost(j))
    total = sum(sum(v) for v in rows.values()) + model.other
    return {
        "rows": {k: (len(v), sum(v)) for k, v in sorted(rows.items())},
        "other_s": model.other,
        "wall_s": total,
        "elapsed_min": total / cores / 60 * model.elapsed_factor,
    }


def load_config(path: Path, rl_steps: Sequence[str] = (), build_steps: Sequence[str] = (), only: str | None = None,
                seeds: int | None = None) -> dict[str, Any]:  # fmt: skip
    """The config, with what-if overrides of a model's RL steps or pretraining steps (``MODEL=STEPS``), of the
    experiments run (``only``) and of their seeds (0 .. seeds - 1)."""
    raw = load_yaml(path)
    if only:
        raw["only"] = only
    if seeds is not None:
        if seeds < 2:
            raise SystemExit("--seeds: at least 2 (a paired interval needs two seeds)")
        raw["seeds"] = list(range(seeds))
        for name in (only or "").split(","):
            if name.strip() in (raw.get("experiments") or {}):
                raw["experiments"][name.strip()]["seeds"] = list(range(seeds))
    models = by_id(raw["models"])
    for assignments, key in ((rl_steps, "train"), (build_steps, "build")):
        for a in assignments:
            name, _, steps = a.partition("=")
            if name not in models or not steps.isdigit():
                raise SystemExit(f"--{'rl' if key == 'train' else 'build'}-steps {a!r}: expected MODEL=STEPS, MODEL "
                                 f"one of {sorted(models)}")  # fmt: skip
            models[name].setdefault(key, {})["steps"] = int(steps)
    return validate_config(raw, root=ROOT)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, default=ROOT / "config" / "config.yaml")
    ap.add_argument("--measured", type=Path, default=ROOT / "results", help="a publication run's results folder")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument(
        "--fixed-s",
        type=float,
        default=FIXED_S,
        help="the measured run's fixed seconds per training job, where its table has no fixed_s",
    )
    ap.add_argument(
        "--planned-fixed-s",
        type=float,
        default=None,
        help="the planned code's (default: the measured fixed_s median, else --fixed-s)",
    )
    ap.add_argument("--separation-d", type=int, default=None, help="D the separation run's selection will pick")
    ap.add_argument("--rl-steps", action="append", default=[], metavar="MODEL=STEPS", help="what if: RL steps")
    ap.add_argument("--build-steps", action="append", default=[], metavar="MODEL=STEPS", help="what if: pretraining")
    ap.add_argument("--only", default=None, help="what if: only these experiments (comma-separated, as only=)")
    ap.add_argument("--seeds", type=int, default=None, help="what if: this many seeds (with --only: theirs too)")
    ap.add_argument("--budget-min", type=float, default=None, help="also print the most seeds that fit this budget")
    args = ap.parse_args(argv)
    rules, measured_cfg, measured_d = read_measured(args.measured)
    model = CostModel(rules, measured_cfg, measured_d, args.fixed_s, args.planned_fixed_s)
    plan = load_config(args.config, args.rl_steps, args.build_steps, args.only, args.seeds)
    est = estimate(plan, model, args.cores, args.separation_d)
    print("| job kind | jobs | estimated wall s |\n|---|---:|---:|")
    for label, (n, wall) in est["rows"].items():
        print(f"| {label} | {n} | {wall:.0f} |")
    print(f"| other rules (as measured) | | {est['other_s']:.0f} |")
    print(f"\nsum {est['wall_s']:.0f} wall-s; estimated elapsed on {args.cores} cores: {est['elapsed_min']:.1f} min "
          f"(x {model.elapsed_factor:.3f}, the measured run's scheduling factor)")  # fmt: skip
    if args.budget_min is not None:
        fits = [n for n in range(2, 41) if estimate(load_config(args.config, args.rl_steps, args.build_steps, args.only,
                                                                n), model, args.cores, args.separation_d)["elapsed_min"]
                <= args.budget_min]  # fmt: skip
        print(f"seeds that fit {args.budget_min:g} min: " + (f"at most {max(fits)}" if fits else "none (2 do not)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
