# Report: every run's metrics and lm-eval scores -> leaderboard (csv / md / html), statistics and figures
# (bandpo.report, which reads files only; the bound figure's table is written first by
# bandpo.methods.bounds_table, which needs the method registry). With `publish: true` (the embedded default)
# the leaderboard and figures are also copied to the top-level results/ folder, the published results page, with
# provenance.json (git commit, package versions, the resolved config, each base model's weights sha256 and build
# machine, and the CPU model / torch CPU capability / thread counts the training and evaluation jobs ran with).

from bandpo.report.figures import FIGURES

REPORT_FIGURES = list(FIGURES)  # the report's figures, declared once (bandpo.report.figures.FIGURES)
REPORT_TABLES = ["leaderboard.csv", "leaderboard.md", "leaderboard.html", "stats.csv", "scores.csv", "runs.csv",
                 "primary.csv", "steps.csv"]  # fmt: skip
# What the report reads of each experiment (description, primary metric and decision rule; the runs it reuses from
# main; its axis and selection; an axis cell's methods, which a select rule reads; the margins of its verdicts as
# fractions per model and a sequential primary's design), from the run plan's study (bandpo.study.Study, built once:
# the one place where the config's points become fractions), and the design axes whose cells are in this DAG. Main's
# methods are left out: adding a method entry must not rerun rule select.
REPORT_EXPERIMENTS = PLAN.study.to_json()
REPORT_AXES = {a: v for a, v in config["axes"].items() if all(c in EXPERIMENTS for c in v["cells"])}
REPORT_TABLES += ["axis.csv", "axis_runs.csv"] if REPORT_AXES else []
SELECTING = [x for x, v in EXPERIMENTS.items() if v.get("select")]


# The setting an experiment's select rule chooses from its axis's scores (bandpo.decide.selection.select_setting),
# read by that experiment's training jobs (bandpo.train.loop --set-file); the table beside it says why.
rule select:
    input:
        select_inputs,
    output:
        setting=f"{RESULTS}/select/{{experiment}}.json",
        table=f"{RESULTS}/select/{{experiment}}.csv",
    wildcard_constraints:
        experiment=_alternatives(SELECTING),
    params:
        results=lambda w, output: os.path.dirname(os.path.dirname(output.setting)),  # RESULTS
        experiments=json.dumps(REPORT_EXPERIMENTS, sort_keys=True),
        axes=json.dumps(REPORT_AXES, sort_keys=True),
    resources:
        **res("report"),
    log:
        f"{LOGS}/select/{{experiment}}.log",
    benchmark:
        f"{BENCH}/select/{{experiment}}.tsv"
    shell:
        "python -m bandpo.decide select --results {params.results} --experiment {wildcards.experiment} "
        "--experiments-json {params.experiments:q} --axes-json {params.axes:q} --out {output.setting} > {log} 2>&1"


if ATLAS:

    # The equivalence atlas (bandpo.train.atlas): where clipping rules that look different act the same, on a synthetic
    # grid and on every mini-batch of the first GRPO steps from main's first tiny model and seed (the sweep's own
    # training settings, bandpo.plan.sweep.atlas_spec); a section of the leaderboard page, published as
    # results/atlas.csv and shown in docs/methods.md. tiny-s: 23 s CPU (37 s wall on a loaded 2-core machine).
    rule atlas:
        input:
            spec=PLAN.atlas_spec_file,
            model=f"{ATLAS.model}/config.json",
            train=f"{ATLAS.data}/train.jsonl",
        output:
            ATLAS_CSV,
        params:
            steps=PLAN.atlas_steps(),
            env=ENV,
        threads: THREADS
        resources:
            **res("atlas"),
        log:
            f"{LOGS}/atlas.log",
        benchmark:
            f"{BENCH}/atlas.tsv"
        shell:
            "{params.env} python -m bandpo.train.atlas --spec {input.spec} --steps {params.steps} --no-progress "
            "--out {output} > {log} 2>&1"


rule report:
    input:
        runs=[f"{run_dir(m, e, s)}/metrics.jsonl" for m, e, s in RUNS_AT_ONCE],
        evals=all_eval_summaries(),
        looks=decided_files(),
        selected=[select_file(x) for x in SELECTING],
        atlas=ATLAS_CSV,
    output:
        csv=report(f"{RESULTS}/leaderboard.csv", caption="../report/leaderboard.rst", category="Leaderboard"),
        md=f"{RESULTS}/leaderboard.md",
        html=report(f"{RESULTS}/leaderboard.html", caption="../report/leaderboard.rst", category="Leaderboard"),
        stats=f"{RESULTS}/stats.csv",
        bounds=f"{RESULTS}/bounds.csv",
        scores=f"{RESULTS}/scores.csv",
        runs=f"{RESULTS}/runs.csv",
        primary=f"{RESULTS}/primary.csv",
        axis=[f"{RESULTS}/{name}" for name in ("axis.csv", "axis_runs.csv") if REPORT_AXES],
        steps=f"{RESULTS}/steps.csv",
        figures=[
            report(f"{RESULTS}/figures/{name}.png", caption=f"../report/{name}.rst", category="Figures")
            for name in REPORT_FIGURES
        ],
        figure_data=[f"{RESULTS}/figures/{name}.csv" for name in REPORT_FIGURES],
    params:
        results=lambda w, output: os.path.dirname(output.csv),  # RESULTS
        experiments=json.dumps(REPORT_EXPERIMENTS, sort_keys=True),
        axes=json.dumps(REPORT_AXES, sort_keys=True),
        base_per_seed="true" if config["base_per_seed"] else "false",
    resources:
        **res("report"),
    log:
        f"{LOGS}/report.log",
    benchmark:
        f"{BENCH}/report.tsv"
    shell:
        "(python -m bandpo.methods.bounds_table --out {output.bounds} && "
        "python -m bandpo.report build --results {params.results} --bounds {output.bounds} "
        "--experiments-json {params.experiments:q} --axes-json {params.axes:q} --base-per-seed {params.base_per_seed}) "
        "> {log} 2>&1"


rule publish:
    input:
        rules.report.output,
        atlas=ATLAS_CSV,
        scores=rules.report.output.scores,
        models=lambda w: [f"{d}/config.json" for d in all_base_models()],
    output:
        tables=[f"{PUBLISH_DIR}/{name}" for name in REPORT_TABLES] + ([f"{PUBLISH_DIR}/atlas.csv"] if ATLAS else []),
        figures=[f"{PUBLISH_DIR}/figures/{name}.png" for name in REPORT_FIGURES],
        figure_data=[f"{PUBLISH_DIR}/figures/{name}.csv" for name in REPORT_FIGURES],
        provenance=f"{PUBLISH_DIR}/provenance.json",
    params:
        results=lambda w, input: os.path.dirname(input.scores),  # RESULTS
        dest=lambda w, output: os.path.dirname(output.provenance),  # PUBLISH_DIR
        config=json.dumps(config, sort_keys=True, default=str),
        models=lambda w: all_base_models(),
    resources:
        **res("publish"),
    log:
        f"{LOGS}/publish.log",
    benchmark:
        f"{BENCH}/publish.tsv"
    shell:
        "python -m bandpo.report publish --src {params.results} --dest {params.dest} --config-json {params.config:q} "
        "--models {params.models:q} > {log} 2>&1"


if config["beside"]:
    if not os.path.isfile(os.path.join(config["beside"], "scores.csv")):
        raise ValueError(f"config beside: {config['beside']!r} holds no scores.csv (a report folder, e.g. 'results')")

    # Each run of this profile beside the run of the same model, entry and seed in another trainer's report (the
    # other folder is read, not produced here: it is not an input, so no rule of this DAG rewrites it).
    rule beside:
        input:
            scores=rules.report.output.scores,
            runs=rules.report.output.runs,
        output:
            csv=f"{RESULTS}/beside.csv",
            md=f"{RESULTS}/beside.md",
        params:
            results=lambda w, input: os.path.dirname(input.scores),  # RESULTS
            other=config["beside"],
        resources:
            **res("report"),
        log:
            f"{LOGS}/beside.log",
        benchmark:
            f"{BENCH}/beside.tsv"
        shell:
            "python -m bandpo.report beside --results {params.results} --other {params.other:q} > {log} 2>&1"


if config["smoke_section"]:

    # A smoke profile (config/real-lm.yaml, config/real-lm-verl.yaml): the smoke section of the published page
    # (results/leaderboard.{md,html}) rewritten from every smoke profile's tables under results/ (bandpo.report.smoke);
    # the rest of the page is left as it is. Its outputs, in the profile's folder: the section's Markdown and
    # provenance.json (commit, versions, config, the base model's source, version and hashes).
    rule smoke_section:
        input:
            scores=rules.report.output.scores,
            runs=rules.report.output.runs,
            beside=[rules.beside.output.md] if config["beside"] else [],
        output:
            md=f"{RESULTS}/smoke_section.md",
            provenance=f"{RESULTS}/provenance.json",
        params:
            results=lambda w, output: os.path.dirname(output.md),  # RESULTS
            config=json.dumps(config, sort_keys=True, default=str),
            models=lambda w: all_base_models(),
        resources:
            **res("report"),
        log:
            f"{LOGS}/smoke_section.log",
        benchmark:
            f"{BENCH}/smoke_section.tsv"
        shell:
            "python -m bandpo.report smoke --dest results --out {output.md} --results {params.results} "
            "--config-json {params.config:q} --models {params.models:q} > {log} 2>&1"


localrules:
    all,
    publish,
