# Scoring with lm-eval: results/{profile}/eval/{model}/{entry}/seed{seed}/{task}.json, with lm-eval's own
# results (lm_eval_results.json) and samples ({task}.samples.jsonl) kept beside it. Entry "base" is the
# untrained model of each size (the step-0 row); its seed s scores base model s (base_per_seed), the model that
# every entry's seed s trained from.
#
# lm-eval start-up (imports, task index, model class) costs ~14 s per process on the 2-core testbed, far more than
# scoring one tiny checkpoint. With eval.group_seeds (CPU default) one job scores all seeds of one
# (model, method entry) in one process: start-up is paid once per group, and adding a method entry still adds
# (and reruns) only that entry's jobs. On GPUs (group_seeds: false) each run is its own job: one vLLM engine per
# job, jobs spread over GPUs.


# One evaluation rule per experiment and seed list (its seeds and tasks fix the rule's outputs): eval_group / eval_run
# for main, eval_group_<experiment> / eval_run_<experiment> (bandpo.plan.sweep.eval_rule_name) for the others; an
# experiment whose primary pair runs seeds of its own (primary.seeds) scores the pair with a rule of its own,
# eval_group_primary / eval_group_<experiment>_primary (bandpo.plan.sweep.eval_seed_groups); a sequential primary
# with one rule per look's seeds (eval_group_primary_look1, ...), scheduled as its looks ask (looks.smk); entries that
# keep seeds of their own (a method entry's seeds) one more (eval_group_seeds0_1_2; bandpo.plan.sweep.group_rule_name).
for _xp_id, _xp in EXPERIMENTS.items():
    for _group in eval_seed_groups(config, _xp_id):

        if config["eval"]["group_seeds"]:

            rule:
                name:
                    group_rule_name("eval_group", _xp_id, _group)
                input:
                    spec=lambda w, seeds=_group["seeds"]: _eval_spec(w.model, w.entry, seeds),
                    models=lambda w, seeds=_group["seeds"]: [_checkpoint(w.model, w.entry, s) for s in seeds],
                    runs=lambda w, seeds=_group["seeds"]: _run_records(w.model, w.entry, seeds),
                    data=lambda w: _task_data_files(w.entry),
                output:
                    eval_outputs("{model}", "{entry}", _group["seeds"], _xp["eval_tasks"]),
                wildcard_constraints:
                    entry=_alternatives(_group["slots"]),
                params:
                    env=ENV,  # the job's environment, grader.mode included: a change reruns the job (params are a rerun trigger)
                threads: THREADS
                resources:
                    gpu=config["eval"]["gpus"],
                    **res("eval_group"),
                log:
                    eval_group_file(LOGS, _group["look"], ".log")
                benchmark:
                    eval_group_file(BENCH, _group["look"], ".tsv")
                shell:
                    "{params.env} python -m bandpo.score --spec {input.spec} > {log} 2>&1"

        else:

            rule:
                name:
                    group_rule_name("eval_run", _xp_id, _group)
                input:
                    spec=lambda w: _eval_spec(w.model, w.entry, [int(w.seed)]),
                    model=lambda w: _checkpoint(w.model, w.entry, w.seed),
                    run=lambda w: _run_records(w.model, w.entry, [w.seed]),
                    data=lambda w: _task_data_files(w.entry),
                output:
                    eval_outputs("{model}", "{entry}", ["{seed}"], _xp["eval_tasks"]),
                wildcard_constraints:
                    entry=_alternatives(_group["slots"]),
                    seed=_alternatives(map(str, _group["seeds"])),
                params:
                    env=ENV,  # the job's environment, grader.mode included: a change reruns the job (params are a rerun trigger)
                threads: THREADS
                resources:
                    gpu=config["eval"]["gpus"],
                    **res("eval_run"),
                log:
                    f"{LOGS}/eval/{{model}}/{{entry}}/seed{{seed}}.log",
                benchmark:
                    f"{BENCH}/eval/{{model}}/{{entry}}/seed{{seed}}.tsv"
                shell:
                    "{params.env} python -m bandpo.score --spec {input.spec} > {log} 2>&1"
