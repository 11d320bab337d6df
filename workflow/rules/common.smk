# Shared names, paths and helpers. `config` has been validated and completed by the Snakefile.

import json
import re
import shlex

from bench_config import (
    BASE_ENTRY,
    builtin_entries,
    by_id,
    eval_entries,
    job_resources,
    method_modules_env,
    set_args,
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


SCRIPTS = _stable_path(os.path.join(workflow.basedir, "workflow", "scripts"))
TASKS_DIR = _stable_path(os.path.join(workflow.basedir, "workflow", "lm_eval_tasks"))

DATA = by_id(config["data"])
MODELS = by_id(config["models"])
ENTRIES = by_id(config["methods"])
SEEDS = list(config["seeds"])
EVAL_TASKS = [t["task"] for t in config["eval"]["tasks"]]
EVAL_ENTRIES = eval_entries(config)
BUILTIN_ENTRIES = builtin_entries(config)  # trained by rule train / train_verl; the others by their own rules
TRAIN_DATA = list(config["train_data"])
THREADS = int(config["threads"])


def _alternatives(ids):
    """A wildcard constraint that matches exactly these ids (and nothing when there are none)."""
    ids = list(ids)
    return "|".join(re.escape(i) for i in ids) if ids else "(?!x)x"


TINY_MATH_DATA = [d for d, v in DATA.items() if v["source"] == "tiny-math"]
REAL_DATA = [d for d, v in DATA.items() if v["source"] == "real"]
TINY_MODELS = [m for m, v in MODELS.items() if v["source"] == "tiny"]
HUB_MODELS = [m for m, v in MODELS.items() if v["source"] == "hub"]


wildcard_constraints:
    model=_alternatives(MODELS),
    entry=_alternatives(ENTRIES),
    seed=r"\d+",


# Environment of every job: no network in the embedded profile, one BLAS pool per job, quiet tokenizers, the grader.
# BANDPO_GRADER_MODE: the config's grader for every job that grades (bandpo.grader reads it).
GRADER_MODE = config["grader"]["mode"]
_env = {"TOKENIZERS_PARALLELISM": "false", "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": str(THREADS),
        "BANDPO_GRADER_MODE": GRADER_MODE}  # fmt: skip
if config["offline"]:
    _env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
if config["method_modules"]:  # methods of the user's own modules, imported by bandpo.methods in every job
    _env["BANDPO_METHOD_MODULES"] = method_modules_env(config)
ENV = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(_env.items()))


def data_dir(data_id):
    return f"resources/data/{data_id}"


def data_file(data_id, split):
    return f"{data_dir(data_id)}/{split}.jsonl"


def model_dir(model_id):
    return f"resources/models/{model_id}"


def run_dir(model_id, entry_id, seed):
    return f"{RUNS}/{model_id}/{entry_id}/seed{seed}"


def eval_dir(model_id, entry_id, seed):
    return f"{EVAL}/{model_id}/{entry_id}/seed{seed}"


def eval_outputs(model_id, entry_id, seeds):
    """Files one evaluation job writes for these seeds (lm-eval's results and samples kept beside the summary)."""
    out = []
    for s in seeds:
        d = eval_dir(model_id, entry_id, s)
        out.append(f"{d}/lm_eval_results.json")
        for t in EVAL_TASKS:
            out += [f"{d}/{t}.json", f"{d}/{t}.samples.jsonl"]
    return out


def all_eval_summaries():
    return [f"{eval_dir(m, e, s)}/{t}.json" for m in MODELS for e in EVAL_ENTRIES for s in SEEDS for t in EVAL_TASKS]


def all_eval_outputs():
    return [f for m in MODELS for e in EVAL_ENTRIES for f in eval_outputs(m, e, SEEDS)]


def run_meta(model_id, entry_id, seed):
    """Identity of a scored run, stored in every evaluation summary."""
    meta = {"profile": PROFILE, "model": model_id, "entry": entry_id, "seed": int(seed)}
    if entry_id == BASE_ENTRY:
        meta.update({"method": None, "params": None, "step": 0, "model_dir": model_dir(model_id)})
    else:
        meta.update(
            {
                "method": ENTRIES[entry_id]["method"],
                "params": ENTRIES[entry_id]["params"],  # completed by bandpo.evaluate (no torch import here)
                "train": train_overrides(config, model_id, entry_id),
                "trainer": "external" if ENTRIES[entry_id]["external"] else config["trainer"],
                "external": bool(ENTRIES[entry_id]["external"]),
                "step": "final",
                "run_dir": run_dir(model_id, entry_id, seed),
            }
        )
    return meta


def res(rule_name):
    """The rule's job request from config `resources` (mem_mb, runtime, cpus_per_task): `resources: **res(...)`."""
    return job_resources(config, rule_name)


def q(x):
    return shlex.quote(str(x))
