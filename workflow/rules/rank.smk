# Rank a new method entry against the published runs without rerunning them (bandpo.decide.rank):
#
#   snakemake --cores all results/embedded/rank/<entry>.md
#
# The entry must be one of main's method entries (config `methods`). Only its runs are trained and scored; each
# model's base models are rebuilt here and checked against the sha256 of the published provenance.json (config
# `rank_against`, default results/). Where they are the published ones (the fixed numerics make them so on any
# x86-64 CPU with AVX2), the entry is paired with the published GRPO scores of the same base model and seed; where
# they differ, the check says so and GRPO is trained and scored here too (a checkpoint: the DAG learns which after
# the check ran). The verdicts: the rule's single look against main's margin in this config (RANK_MARGINS),
# Holm-adjusted over the models and metrics ranked. The published folder is read, not an input: no rule of this DAG
# rewrites it (rule publish would), and a missing or incomplete one stops the check with an error naming the file.
# Its names and input functions (RANK_*, _rank_models, _rank_baseline_inputs, ...) are in common.smk.


# main's margin per model, fractions of the score, from the run plan's study (bandpo.study.Study.margins): the
# question of the ranking's verdicts (is the entry better than GRPO by at least it?), fixed in this config
RANK_MARGINS = PLAN.study.margins(MAIN)


checkpoint base_check:
    input:
        lambda w: [f"{d}/config.json" for d in _main_base_dirs(w.model)],
    output:
        f"{RESULTS}/rank/base/{{model}}.json",
    wildcard_constraints:
        model=_alternatives(RANK_MODELS),
    params:
        dirs=lambda w: _main_base_dirs(w.model),
        published=lambda w: RANK_AGAINST,
    resources:
        **res("report"),
    log:
        f"{LOGS}/rank/base_check_{{model}}.log",
    shell:
        "python -m bandpo.decide base-check --published {params.published:q} --model {wildcards.model} "
        "--dirs {params.dirs:q} --out {output} > {log} 2>&1"


rule rank:
    input:
        evals=lambda w: [f for m in _rank_models(w.entry) for f in _summaries(m, w.entry)],
        baseline=_rank_baseline_inputs,
        checks=lambda w: [f"{RESULTS}/rank/base/{m}.json" for m in _rank_models(w.entry)],
    output:
        md=f"{RESULTS}/rank/{{entry}}.md",
        csv=f"{RESULTS}/rank/{{entry}}.csv",
    wildcard_constraints:
        entry=_alternatives(RANK_ENTRIES),
    params:
        results=lambda w, output: os.path.dirname(os.path.dirname(output.md)),  # RESULTS
        published=lambda w: RANK_AGAINST,
        margins=json.dumps(RANK_MARGINS, sort_keys=True),
    resources:
        **res("report"),
    log:
        f"{LOGS}/rank/{{entry}}.log",
    shell:
        "python -m bandpo.decide rank --results {params.results} --entry {wildcards.entry} "
        "--published {params.published:q} --checks {input.checks:q} --margins-json {params.margins:q} "
        "--out {output.md} > {log} 2>&1"
