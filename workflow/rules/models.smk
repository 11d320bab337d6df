# Models: resources/models/{model}/ (config.json marks a finished folder; both commands publish atomically).


def _tiny_build_args(wildcards):
    m = MODELS[wildcards.model]
    args = ["--size", m["size"], "--seed", str(m["seed"])]
    for key, value in sorted(m["build"].items()):
        args += [f"--{key.replace('_', '-')}", str(value)]
    return shlex.join(args)


def _pretrain_data(wildcards):
    return data_dir(model_data(config, MODELS[wildcards.model]))


# Embedded profile: a tiny Llama pretrained on this machine on its tiny-math data set (the model's `data`, default
# train_data[0]; the probe's model on the probe data set); no download.
rule model_tiny:
    input:
        train=lambda w: f"{_pretrain_data(w)}/train.jsonl",
        val=lambda w: f"{_pretrain_data(w)}/validation.jsonl",
    output:
        f"{model_dir('{model}')}/config.json",
    wildcard_constraints:
        model=_alternatives(TINY_MODELS),
    params:
        args=_tiny_build_args,
        data=_pretrain_data,
    threads: THREADS
    resources:
        **res("model_tiny"),
    log:
        f"{LOGS}/models/{{model}}.log",
    benchmark:
        f"{BENCH}/models/{{model}}.tsv"
    shell:
        "{ENV} python -m bandpo.models build {params.args} --data {params.data} "
        "--out resources/models/{wildcards.model} --threads {threads} --no-progress > {log} 2>&1"


def _hub_args(wildcards):
    m = MODELS[wildcards.model]
    args = ["--repo-id", m["repo_id"]]
    if m.get("revision"):
        args += ["--revision", m["revision"]]
    return shlex.join(args)


# GPU profile: a hub snapshot (huggingface_hub.snapshot_download).
rule model_hub:
    output:
        f"{model_dir('{model}')}/config.json",
    wildcard_constraints:
        model=_alternatives(HUB_MODELS),
    params:
        args=_hub_args,
    log:
        f"{LOGS}/models/{{model}}.log",
    benchmark:
        f"{BENCH}/models/{{model}}.tsv"
    resources:
        downloads=1,
        **res("model_hub"),
    shell:
        "python -m bandpo.models download {params.args} --out resources/models/{wildcards.model} > {log} 2>&1"
