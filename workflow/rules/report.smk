# Report (placeholder until the leaderboard issue): one flat table of every scored run, read from the
# per-run summaries (which are read from lm-eval's results files).


rule collect_eval:
    input:
        all_eval_summaries(),
    output:
        f"{RESULTS}/eval/summary.csv",
    log:
        f"{LOGS}/report/collect_eval.log",
    benchmark:
        f"{BENCH}/report/collect_eval.tsv"
    shell:
        "python {SCRIPTS}/collect_eval.py --out {output} {input} > {log} 2>&1"


localrules:
    all,
    collect_eval,
