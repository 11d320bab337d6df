# Training: one job per run, results/{profile}/runs/{model}/{entry}/seed{seed}/ holding the run-output contract
# (metrics.jsonl, model/ as a Hugging Face checkpoint, run.json). Any rule that writes this gets scored.


if config["trainer"] == "verl":

    # verl on Ray with vLLM rollouts: the run's spec (bandpo.verl.spec.VerlRun) -> verl's command line
    # (bandpo.verl.launch, bandpo.verl.command; method parameters travel in BANDPO_METHOD_CONFIG through Ray's
    # runtime_env). A killed job started again resumes from its latest logged checkpoint.
    rule train_verl:
        input:
            spec=_train_spec,
            model=base_model,
            train=f"resources/data/_verl/{PROFILE}/train.parquet",
            val=f"resources/data/_verl/{PROFILE}/val.parquet",
        output:
            # written when the trainer succeeds: a killed job's checkpoints and logs are not Snakemake's outputs,
            # so they stay for the next start (bandpo.verl.launch.prepare_resume)
            done=f"{RUNS}/{{model}}/{{entry}}/seed{{seed}}/train_done.json",
        wildcard_constraints:
            entry=_alternatives(BUILTIN_SLOTS),
        threads: THREADS
        resources:
            gpu=_verl_gpus,
            **res("train_verl"),
        log:
            f"{LOGS}/train/{{model}}/{{entry}}/seed{{seed}}.log",
        benchmark:
            f"{BENCH}/train/{{model}}/{{entry}}/seed{{seed}}.tsv"
        shell:
            "python -m bandpo.verl.launch --spec {input.spec} --done {output.done} > {log} 2>&1"

    # verl's FSDP checkpoint of the last step -> a Hugging Face model (python -m verl.model_merger merge),
    # verl's JSONL log -> metrics.jsonl, and run.json: the run contract (bandpo/schemas/run.schema.yaml), checked.
    rule merge_verl:
        input:
            spec=_train_spec,
            done=rules.train_verl.output.done,
        output:
            model=f"{RUNS}/{{model}}/{{entry}}/seed{{seed}}/model/config.json",
            metrics=f"{RUNS}/{{model}}/{{entry}}/seed{{seed}}/metrics.jsonl",
            run=f"{RUNS}/{{model}}/{{entry}}/seed{{seed}}/run.json",
        params:
            run=lambda w: run_dir(w.model, w.entry, w.seed),
            base=lambda w: model_dir(w.model, w.seed),
            meta=lambda w: q(json.dumps(run_meta(w.model, w.entry, w.seed), sort_keys=True)),
        resources:
            **res("merge_verl"),
        log:
            f"{LOGS}/merge/{{model}}/{{entry}}/seed{{seed}}.log",
        benchmark:
            f"{BENCH}/merge/{{model}}/{{entry}}/seed{{seed}}.tsv"
        shell:
            "python -m bandpo.verl.merge --run-dir {params.run} --base-model {params.base} "
            "--meta {params.meta} --spec {input.spec} > {log} 2>&1"

else:

    # The local trainer (bandpo.train.loop): CPU by default, one job per core; the run's settings are its spec file
    # (bandpo.train.settings.TrainConfig, from the run plan). It publishes its outputs itself (model/ renamed into
    # place, then metrics.jsonl, then run.json) and resumes from its checkpoint/ when a killed job is started again,
    # so it writes straight into the run folder.
    rule train:
        input:
            spec=_train_spec,
            model=base_model,
            train=lambda w: data_file(xp_of(w.entry)["data"], "train"),
            select=_train_select_input,
        output:
            metrics=f"{RUNS}/{{model}}/{{entry}}/seed{{seed}}/metrics.jsonl",
            model=f"{RUNS}/{{model}}/{{entry}}/seed{{seed}}/model/config.json",
            run=f"{RUNS}/{{model}}/{{entry}}/seed{{seed}}/run.json",
        wildcard_constraints:
            entry=_alternatives(BUILTIN_SLOTS),
        params:
            env=ENV,  # the job's environment, grader.mode included: a change reruns the job (params are a rerun trigger)
            select=lambda w, input: " ".join(f"--set-file {f}" for f in input.select),
        threads: THREADS
        resources:
            **res("train"),
        log:
            f"{LOGS}/train/{{model}}/{{entry}}/seed{{seed}}.log",
        benchmark:
            f"{BENCH}/train/{{model}}/{{entry}}/seed{{seed}}.tsv"
        shell:
            "{params.env} python -m bandpo.train --spec {input.spec} {params.select} > {log} 2>&1"
