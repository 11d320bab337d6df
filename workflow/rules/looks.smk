# Seeds until decided: each sequential primary (config primary.sequential; docs/statistics.md, "The verdict rule and
# seeds until decided") is decided look by look. Look j reads the pair's first j x k seeds (their evaluation
# summaries) and writes its verdict (bandpo.decide.looks). It is a checkpoint: the report's inputs ask for look j + 1,
# and so for the training and scoring of its seeds, only when look j did not decide (`pair_looks`, common.smk); rule `decided` copies the look that decided,
# one job per pair, and the report asks for those.


checkpoint look:
    input:
        spec=lambda w: PLAN.look_spec_file(w.experiment, w.model),
        summaries=lambda w: _look_summaries(w.experiment, w.model, int(w.look)),
    output:
        f"{RESULTS}/looks/{{experiment}}/{{model}}/look{{look}}.json",
    wildcard_constraints:
        experiment=_alternatives(sorted({p["experiment"] for p in PLAN.pairs})),
        look=r"\d+",
    resources:
        **res("report"),
    log:
        f"{LOGS}/looks/{{experiment}}/{{model}}/look{{look}}.log",
    shell:
        "python -m bandpo.decide look --spec {input.spec} --look {wildcards.look} --out {output} > {log} 2>&1"


rule decided:
    input:
        unpack(pair_looks),
    output:
        f"{RESULTS}/looks/{{experiment}}/{{model}}/decided.json",
    wildcard_constraints:
        experiment=_alternatives(sorted({p["experiment"] for p in PLAN.pairs})),
    resources:
        **res("report"),
    log:
        f"{LOGS}/looks/{{experiment}}/{{model}}/decided.log",
    shell:
        # the last look (the one that decided): input.looks in look order, named by the files' pattern since the
        # input is known only once the checkpoints ran
        "cp -v $(printf '%s\\n' {input:q} | grep -E 'look[0-9]+[.]json$' | tail -n 1) {output:q} > {log} 2>&1"
