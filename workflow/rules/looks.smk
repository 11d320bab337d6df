# Seeds until decided: each sequential primary (config primary.sequential; docs/statistics.md, "The verdict rule and
# seeds until decided") is decided look by look. Look j reads the pair's first j x k seeds (their evaluation
# summaries) and writes its verdict (bandpo.decide.looks). It is a checkpoint: the report's inputs ask for look j + 1,
# and so for the training and scoring of its seeds, only when look j did not decide (`decided_looks`, common.smk).


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
