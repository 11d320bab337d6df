"""Each rule's job, built once: the folders of a profile, every job's environment and every job's command line.

`Jobs` wraps one validated config (`bandpo.config.validate.validate_config`). workflow/rules/*.smk build their
``params`` from it and nothing else, and so do the benchmarks that time a job as the DAG runs it
(benchmarks/bench_run_cost.py, benchmarks/bench_run_vs_base.py): a change to a job's command line is one change
here. Each ``*_args`` method returns the arguments after ``python -m <module>`` as a list; `Jobs.command` gives the
whole argv of a training job; ``shlex.join`` makes a shell string of either.

    from bandpo.config.jobs import Jobs
    from bandpo.config.validate import load_yaml, validate_config

    jobs = Jobs(validate_config(load_yaml("config/config.yaml")))
    # ['python', '-m', 'bandpo.train', '--model', 'resources/models/tiny-s/seed0', ...]
    jobs.command("tiny-s", "grpo", 0)
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from bandpo.config.sweep import (
    BASE_ENTRY,
    atlas_spec,
    by_id,
    method_module_specs,
    model_data,
    model_path,
    pretrain_seed,
    run_folder,
    set_args,
    slots,
    train_overrides,
    verl_fields,
)
from bandpo.core import numerics
from bandpo.core.files import package_data

__all__ = ["Jobs"]


def _stable_path(path: str) -> str:
    """Relative to the working directory when inside it (job params then survive moving the checkout)."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


class Jobs:
    """The jobs of one validated config. ``root``: the repository root (where workflow/scripts and the config's
    method modules are found), default the working directory."""

    def __init__(self, config: Mapping[str, Any], root: str | os.PathLike = ".") -> None:
        self.config = config
        self.root = str(root)
        self.profile = config["profile"]
        self.results = f"results/{self.profile}"
        self.runs_dir = f"{self.results}/runs"
        self.eval_root = f"{self.results}/eval"
        self.logs = f"logs/{self.profile}"
        self.threads = int(config["threads"])
        self.grader_mode = config["grader"]["mode"]
        self.data = by_id(config["data"])
        self.models = by_id(config["models"])
        self.entries = by_id(config["methods"])
        self.experiments = config["experiments"]
        self.slots = slots(config, base=True)  # slot -> {"experiment", "entry"}
        # lm-eval's task YAMLs (shipped in the package); verl loads its reward function by path
        self.tasks_dir = _stable_path(str(package_data("score", "lm_eval_tasks")))
        self.verl_reward = _stable_path(os.path.join(self.root, "workflow", "scripts", "verl_reward.py"))

    # -- the environment of every job ---------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """No network in an offline profile, one BLAS pool per job, quiet tokenizers, fixed hashing, the config's
        grader (``BANDPO_GRADER_MODE``, read by bandpo.grader in every job that grades) and the numerics settings
        (`bandpo.core.numerics.env`: the same kernels on every x86-64 CPU unless ``BANDPO_NUMERICS=native``), set
        from the job's start so that processes that are not ours (verl's trainer, its Ray workers) run under them."""
        env = {"TOKENIZERS_PARALLELISM": "false", "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": str(self.threads),
               "BANDPO_GRADER_MODE": self.grader_mode, **numerics.env()}  # fmt: skip
        if self.config["offline"]:
            env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        return env

    def env_prefix(self) -> str:
        """`env` as a shell prefix, ``K=V K=V``, sorted."""
        return " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env().items()))

    def method_modules(self) -> list[str]:
        """The config's method modules as the jobs import them ($BANDPO_METHOD_MODULES)."""
        return method_module_specs(self.config, self.root)

    # -- folders -----------------------------------------------------------------------------------------------
    def xp_of(self, slot: str) -> Mapping[str, Any]:
        """The experiment (its completed config) of a slot."""
        return self.experiments[self.slots[slot]["experiment"]]

    def entry_of(self, slot: str) -> Mapping[str, Any]:
        """The method entry (its config) of a slot; not for the base slots."""
        return self.entries[self.slots[slot]["entry"]]

    def tasks_of(self, slot: str) -> list[Mapping[str, Any]]:
        """The lm-eval tasks ({task, data, subset?}) that score a slot's runs."""
        return self.xp_of(slot)["eval_tasks"]

    @staticmethod
    def data_dir(data_id: str) -> str:
        return f"resources/data/{data_id}"

    def data_file(self, data_id: str, split: str) -> str:
        return f"{self.data_dir(data_id)}/{split}.jsonl"

    def model_dir(self, model_id: str, seed: int | str | None = None) -> str:
        """The base model that run seed ``seed`` trains from (and that the base row's seed scores): one folder per
        seed for tiny models with base_per_seed, else one folder for all seeds (`bandpo.config.sweep.model_path`)."""
        return model_path(self.config, model_id, seed)

    def run_dir(self, model_id: str, slot: str, seed: int | str) -> str:
        return f"{self.runs_dir}/{run_folder(model_id, slot, seed)}"

    def eval_dir(self, model_id: str, slot: str, seed: int | str) -> str:
        return f"{self.eval_root}/{run_folder(model_id, slot, seed)}"

    def select_file(self, experiment: str) -> str:
        """The setting an experiment's select rule chose (rule select; bandpo.train --set-file)."""
        return f"{self.results}/select/{experiment}.json"

    def checkpoint(self, model_id: str, slot: str, seed: int | str) -> str:
        """The config.json of what a scoring job scores: the base model, or the run's final model."""
        if self.slots[slot]["entry"] == BASE_ENTRY:
            return f"{self.model_dir(model_id, seed)}/config.json"
        return f"{self.run_dir(model_id, slot, seed)}/model/config.json"

    def run_meta(self, model_id: str, slot: str, seed: int | str) -> dict[str, Any]:
        """A scored run's place in the sweep, stored in every evaluation summary: the experiment, the method entry
        (not the slot), the subset of each task that scores a part of the data, and its folders. The run's method is
        not repeated here: bandpo.score.evaluate reads it from the run's run.json (the base model has none)."""
        experiment, entry_id = self.slots[slot]["experiment"], self.slots[slot]["entry"]
        meta = {"profile": self.profile, "model": model_id, "entry": entry_id, "seed": int(seed),
                "experiment": experiment}  # fmt: skip
        subsets = {t["task"]: t["subset"] for t in self.tasks_of(slot) if t.get("subset")}
        if subsets:
            meta["subsets"] = subsets
        if entry_id == BASE_ENTRY:
            meta.update({"step": 0, "model_dir": self.model_dir(model_id, seed)})
        else:
            meta.update({"step": "final", "run_dir": self.run_dir(model_id, slot, seed),
                         "base_model_dir": self.model_dir(model_id, seed)})  # fmt: skip
        return meta

    # -- data (data.smk: python -m bandpo.data) -----------------------------------------------------------------
    def tiny_math_args(self, data_id: str) -> list[str]:
        d = self.data[data_id]
        args = ["--seed", str(d["seed"]), "--n-train", str(d["n_train"]), "--n-val", str(d["n_val"]),
                "--n-test", str(d["n_test"])]  # fmt: skip
        if d.get("probe") is not None:  # the mechanism probe's variant (bandpo.data.tiny_math.ProbeSpec)
            args += ["--probe", json.dumps(d["probe"], sort_keys=True)]
        return args

    def real_args(self, data_id: str) -> list[str]:
        d = self.data[data_id]
        args = ["--name", d["name"]]
        if d.get("path"):
            args += ["--path", d["path"]]
        elif d.get("download"):
            args += ["--download"]
        if d.get("limit"):
            args += ["--limit", str(d["limit"])]
        return args

    # -- base models (models.smk: python -m bandpo.models, python -m bandpo.models.pypi) --------------------------
    def pretrain_data(self, model_id: str) -> str:
        return self.data_dir(model_data(self.config, self.models[model_id]))

    def tiny_build_args(self, model_id: str, seed: int | str | None = None) -> list[str]:
        m = self.models[model_id]
        args = ["--size", m["size"], "--seed", str(pretrain_seed(self.config, model_id, seed))]
        for key, value in sorted(m["build"].items()):
            args += [f"--{key.replace('_', '-')}", str(value)]
        return args + ["--out", self.model_dir(model_id, seed)]

    def hub_args(self, model_id: str) -> list[str]:
        m = self.models[model_id]
        args = ["--repo-id", m["repo_id"]]
        if m.get("revision"):
            args += ["--revision", m["revision"]]
        return args

    def pypi_args(self, model_id: str) -> list[str]:
        m = self.models[model_id]
        args = ["--package", m["package"], "--version", m["version"], "--sha256", m["sha256"],
                "--member", m["member"]]  # fmt: skip
        if m.get("path"):
            args += ["--path", m["path"]]
        return args

    # -- training (train.smk: python -m bandpo.train, or verl's trainer) ------------------------------------------
    def train_args(self, model_id: str, slot: str, seed: int | str) -> list[str]:
        """The run's own arguments of ``python -m bandpo.train`` (model, data, method, seed, the config's trainer
        overrides, an experiment's selected setting); `command` adds the out folder and threads."""
        entry, s = self.entry_of(slot), self.slots[slot]
        args = ["--model", self.model_dir(model_id, seed), "--data", self.data_dir(self.xp_of(slot)["data"]),
                "--method", entry["method"], "--params", json.dumps(entry["params"], sort_keys=True),
                "--seed", str(seed)]  # fmt: skip
        args += set_args(train_overrides(self.config, model_id, s["entry"], s["experiment"]))
        if self.experiments[s["experiment"]].get("select"):  # the axis setting chosen by rule select
            args += ["--set-file", self.select_file(s["experiment"])]
        return args

    def command(self, model_id: str, slot: str, seed: int | str, out: str | None = None, threads: int | None = None,
                python: str = "python") -> list[str]:  # fmt: skip
        """The whole argv of one local training job as rule ``train`` runs it (``out`` and ``threads`` default to
        the run folder and the config's threads); run it with `env` added to the environment."""
        return [python, "-m", "bandpo.train", *self.train_args(model_id, slot, seed),
                "--out", out if out is not None else self.run_dir(model_id, slot, seed),
                "--threads", str(threads if threads is not None else self.threads), "--no-progress"]  # fmt: skip

    def verl_run(self, model_id: str, slot: str, seed: int | str):
        """The run's `bandpo.verl.command.VerlRun` (its ``shell_command()`` is the job)."""
        from bandpo.verl.command import VerlRun

        entry = self.entry_of(slot)
        fields = verl_fields(self.config, model_id, slot)
        fields.setdefault("experiment_name", f"{model_id}-{slot}-seed{seed}")
        return VerlRun(
            model=os.path.abspath(self.model_dir(model_id, seed)),
            method=entry["method"],
            params=entry["params"],
            seed=int(seed),
            train_files=os.path.abspath(f"resources/data/_verl/{self.profile}/train.parquet"),
            val_files=os.path.abspath(f"resources/data/_verl/{self.profile}/val.parquet"),
            output_dir=os.path.abspath(self.run_dir(model_id, slot, seed)),
            reward_fn_path=self.verl_reward,
            method_modules=self.method_modules(),
            grader_mode=self.grader_mode,
            **fields,
        )

    def verl_gpus(self, model_id: str, slot: str) -> int:
        """GPUs a verl job asks for: nnodes x n_gpus_per_node (VerlRun's defaults where the config sets none)."""
        import dataclasses

        from bandpo.verl.command import VerlRun

        fields = verl_fields(self.config, model_id, slot)
        defaults = {f.name: f.default for f in dataclasses.fields(VerlRun)}
        return int(fields.get("nnodes", defaults["nnodes"])) * int(
            fields.get("n_gpus_per_node", defaults["n_gpus_per_node"])
        )

    # -- scoring (eval.smk: python -m bandpo.score) ----------------------------------------------------------------
    def eval_args(self, model_id: str, slot: str, seeds: Sequence[int | str]) -> list[str]:
        e = self.config["eval"]
        model_args = dict(e["model_args"])
        model_args.update(self.models[model_id].get("eval_model_args") or {})
        args = [
            "--include-path",
            self.tasks_dir,
            "--backend",
            e["backend"],
            # fmt: skip
            "--model-args",
            json.dumps(model_args, sort_keys=True),
            "--batch-size",
            str(e["batch_size"]),
        ]
        for t in self.tasks_of(slot):
            args += ["--task", f"{t['task']}={self.data_file(t['data'], 'test')}"]
        if e["apply_chat_template"]:
            args.append("--apply-chat-template")
        if e["limit"]:
            args += ["--limit", str(e["limit"])]
        for s in seeds:
            args += ["--run", os.path.dirname(self.checkpoint(model_id, slot, s)), self.eval_dir(model_id, slot, s),
                     str(s), "--meta", json.dumps(self.run_meta(model_id, slot, s), sort_keys=True)]  # fmt: skip
        return args

    # -- the report (report.smk) ---------------------------------------------------------------------------------
    def atlas(self) -> dict[str, Any] | None:
        """The equivalence atlas's model, seed, data and training settings (`bandpo.config.sweep.atlas_spec`);
        None: no atlas job."""
        return atlas_spec(self.config)

    def atlas_args(self) -> list[str]:
        a = self.atlas()
        return ["--model", a["model_dir"], "--data", self.data_dir(a["data"]), "--seed", str(a["seed"]),
                "--steps", str(a["steps"]), *set_args(a["train"])]  # fmt: skip
