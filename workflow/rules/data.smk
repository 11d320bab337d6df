# Data sets: resources/data/{data}/{split}.jsonl (bandpo.data.tiny_math writes each file atomically).


rule data_tiny_math:
    output:
        expand("resources/data/{{data}}/{split}.jsonl", split=["train", "validation", "test"]),
    wildcard_constraints:
        data=_alternatives(TINY_MATH_DATA),
    params:
        args=_tiny_math_args,
        env=ENV,
    resources:
        **res("data_tiny_math"),
    log:
        f"{LOGS}/data/{{data}}.log",
    benchmark:
        f"{BENCH}/data/{{data}}.tsv"
    shell:
        "{params.env} python -m bandpo.data tiny-math --out resources/data/{wildcards.data} {params.args} > {log} 2>&1"


# Real data sets (GPU profile): hub sets through `datasets`, or local files in the source format.
rule data_real:
    output:
        "resources/data/{data}/{split}.jsonl",
    wildcard_constraints:
        data=_alternatives(REAL_DATA),
        split="train|test",
    params:
        args=_real_args,
    log:
        f"{LOGS}/data/{{data}}.{{split}}.log",
    benchmark:
        f"{BENCH}/data/{{data}}.{{split}}.tsv"
    resources:
        downloads=1,
        **res("data_real"),
    shell:
        "python -m bandpo.data real --out resources/data/{wildcards.data} {params.args} > {log} 2>&1"


# verl reads parquet in its own row format (chat prompt, reward_model.ground_truth): built from our JSONL.
rule verl_data:
    input:
        train=[data_file(d, "train") for d in TRAIN_DATA],
        val=[data_file(d, verl_val_split(config)) for d in val_data_ids(config)],
    output:
        train=f"resources/data/_verl/{PROFILE}/train.parquet",
        val=f"resources/data/_verl/{PROFILE}/val.parquet",
    params:
        split=verl_val_split(config),
    resources:
        **res("verl_data"),
    log:
        f"{LOGS}/data/verl_data.log",
    benchmark:
        f"{BENCH}/data/verl_data.tsv"
    shell:
        "python -m bandpo.verl.data --train {input.train} --val {input.val} "
        "--val-split {params.split} --out-train {output.train} --out-val {output.val} > {log} 2>&1"
