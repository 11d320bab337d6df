# BandPO-Bench: one DAG from data and models to trained runs and lm-eval scores.
#
#   snakemake --cores all                                   # the embedded CPU profile (config/config.yaml)
#   snakemake --cores 2 --configfile config/smoke.yaml      # a few minutes (the test suite runs it)
#   snakemake --cores all --config only=random-reward       # one experiment alone (config `experiments:`)
#   snakemake --cores all --configfile config/offpolicy.yaml # a settled experiment: the off-policy axis (also probe.yaml)
#   snakemake --cores all results/embedded/rank/ENTRY.md     # rank a new entry against the published runs
#   snakemake -n --configfile config/gpu.yaml               # the paper's protocol (verl + vLLM), dry run
#   snakemake --configfile config/gpu.yaml --workflow-profile profiles/slurm   # on a SLURM cluster
#
# Layout: data -> resources/data/{id}/, models -> resources/models/{id}/, runs -> results/{profile}/runs/
# ({model}/{entry}/seed{seed}; {model}/{entry}@{experiment}/seed{seed} for experiments other than main),
# scores -> results/{profile}/eval/, logs and per-rule benchmarks -> logs/{profile}/.

import os
import sys
import uuid

# bandpo is installed (`pip install -e .` in dev and CI, or its wheel): the run plan, the config's schema and the
# lm-eval tasks come from the package (bandpo/plan/, bandpo/schemas/, bandpo/score/lm_eval_tasks/).
from bandpo.core.failures import RUN_ENV
from bandpo.plan.config_files import config_file_error, overlay_error
from bandpo.plan.run_lock import clear_stale_locks
from bandpo.plan.runs import Plan
from bandpo.plan.validate import ConfigError, validate_config
from bandpo.report.figures import check_views

# A run killed by SIGKILL leaves Snakemake's lock files behind; with no other run alive here they are stale, and the
# plain command clears them instead of asking for --unlock (bandpo/plan/run_lock.py). Jobs re-parsing this file
# (cluster executors) are not the main process and leave the locks alone.
if workflow.is_main_process and clear_stale_locks():
    print("Removed the lock files of a Snakemake run that was killed (no other run is alive here).", file=sys.stderr)

# The default config is read only when no --configfile is given: snakemake would otherwise merge the two files
# (the sweep of config.yaml would leak into smoke.yaml / gpu.yaml). Checked first, as the workflow profile checks a
# --configfile (bandpo/plan/config_files.py): a syntax error is one line naming the file, line and column.
if not workflow.overwrite_configfiles:
    _default_config = os.path.join(workflow.basedir, "config", "config.yaml")
    if _error := config_file_error(_default_config):
        raise SystemExit(_error)
    workflow.configfile(_default_config)
elif _error := overlay_error(workflow.overwrite_configfiles):  # an overlay without the config it extends before it
    raise SystemExit(_error)

try:
    # The config read once into the run plan: validated (registry checks, which import torch, are skipped for a
    # config already checked unchanged), then every job built and checked (bandpo/plan/runs.py).
    _validated = validate_config(
        config, cache_dir=os.path.join(".snakemake", "bandpo-config-checked"), root=workflow.basedir
    )
    PLAN = Plan(_validated, workflow.basedir)
    try:
        check_views(_validated["experiments"])  # the report's figures each experiment names, before any job
    except ValueError as _views:
        raise ConfigError(str(_views)) from None
except ConfigError as _err:
    # A config error, not a broken Snakefile: one line naming the config file and the field, without the location
    # and traceback in the Snakefile that Snakemake prints for an exception raised here (WorkflowError included).
    _files = ", ".join(map(str, workflow.overwrite_configfiles or ["config/config.yaml"]))
    raise SystemExit(f"Invalid config ({_files}): {_err}") from None
config.clear()
config.update(_validated)
# Each job's spec file (results/{profile}/plan/), an input of its rule: rewritten only where its settings changed,
# so exactly those jobs rerun. Jobs that re-parse this file (cluster executors) find them written. A dry run writes
# them too (docs/workflow.md, "Dry runs").
if workflow.is_main_process:
    PLAN.write_specs()
    # This command's id in every job's environment: a job's deterministic error is printed once, and the retries of
    # this command end at once instead of running it again (bandpo/core/failures.py).
    os.environ[RUN_ENV] = uuid.uuid4().hex


envvars:
    RUN_ENV,


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/eval.smk"
include: "workflow/rules/looks.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/rank.smk"


# Rules of external trainers (method entries with `external: true`): workflow/README.md, "Adding a method".
for _rules_file in config["include_rules"]:

    include: os.path.join(workflow.basedir, _rules_file)


rule all:
    default_target: True
    input:
        all_eval_summaries(),
        report_targets(),
