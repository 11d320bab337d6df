"""The run plan: one validated config read once into typed jobs, and each job's spec file.

`Plan` wraps a config that `bandpo.plan.validate.validate_config` checked and completed. For every training run it
builds the trainer's own settings dataclass, once, from the config's one ``train:`` key (global < model < method
entry < experiment, `bandpo.plan.sweep.run_settings`): `bandpo.train.settings.TrainConfig` for the local trainer,
`bandpo.verl.spec.VerlRun` for verl (both extend `bandpo.core.protocol.Protocol`), and for every scoring job a
`bandpo.score.spec.EvalJob`. Each is validated at construction (a bad setting stops the DAG before any job runs,
`ConfigError` naming the run and the field) and written to a spec file under ``results/{profile}/plan/`` that its job
reads (``python -m bandpo.train --spec FILE``, ``python -m bandpo.verl.launch --spec FILE``, ``python -m
bandpo.score --spec FILE``): a setting goes from the config to the code that uses it through this module and the
job's reader, typed the whole way. A spec file is rewritten only when its content changes, so Snakemake reruns
exactly the jobs whose settings changed.

workflow/rules/*.smk take their folders, environment and spec files from here and nothing else, and so do the
benchmarks that run a job as the DAG does::

    from bandpo.plan.runs import load_plan

    plan = load_plan("config/config.yaml")
    plan.train_spec("tiny-s", "grpo", 0)   # TrainConfig(model='resources/models/tiny-s', ..., steps=64, ...)
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bandpo.core import numerics
from bandpo.core.files import atomic_write_text, package_data
from bandpo.core.options import check_fields
from bandpo.core.protocol import spec_fields
from bandpo.plan.config_files import read_config
from bandpo.plan.sweep import (
    atlas_spec,
    eval_groups,
    method_module_specs,
    model_data,
    model_path,
    pretrain_seed,
    run_settings,
    runs,
    sequential_pairs,
    sequential_slots,
    slots,
)
from bandpo.plan.validate import ConfigError, validate_config
from bandpo.score.spec import EvalJob, EvalRun
from bandpo.study import BASE_ENTRY, Study, by_id, design_settings, look_blocks, run_folder, slot_id, slot_seeds
from bandpo.train.settings import RUN_FIELDS, TrainConfig, typed_fields
from bandpo.verl.spec import RUN_FIELDS as VERL_RUN_FIELDS
from bandpo.verl.spec import VerlRun

__all__ = ["Plan", "load_plan"]


def _stable_path(path: str) -> str:
    """Relative to the working directory when inside it (job params then survive moving the checkout)."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _write_json(path: Path, content: Mapping[str, Any]) -> bool:
    """Write ``content`` as JSON to ``path`` unless the file holds it already (its time then stays); whether it
    wrote."""
    text = json.dumps(content, indent=1, sort_keys=True) + "\n"
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return True


def load_plan(path: str | os.PathLike, root: str | os.PathLike = ".") -> Plan:
    """The plan of a config file: read, validated (`validate_config`), every job built; `ConfigError` naming the
    field."""
    return Plan(validate_config(read_config(path), root=root), root)


class Plan:
    """The jobs of one validated config. ``root``: the repository root (where workflow/scripts and the config's
    method modules are found), default the working directory. Builds and validates every training run's settings
    on construction (`ConfigError` naming the run and the field)."""

    def __init__(self, config: Mapping[str, Any], root: str | os.PathLike = ".") -> None:
        self.config = config
        self.root = str(root)
        self.profile = config["profile"]
        self.results = f"results/{self.profile}"
        self.runs_dir = f"{self.results}/runs"
        self.eval_root = f"{self.results}/eval"
        self.plan_dir = f"{self.results}/plan"
        self.logs = f"logs/{self.profile}"
        self.threads = int(config["threads"])
        self.grader_mode = config["grader"]["mode"]
        self.trainer = config["trainer"]
        self.data = by_id(config["data"])
        self.models = by_id(config["models"])
        self.entries = by_id(config["methods"])
        self.experiments = config["experiments"]
        self.slots = slots(config, base=True)  # slot -> {"experiment", "entry"}
        # lm-eval's task YAMLs (shipped in the package); verl loads its reward function by path
        self.tasks_dir = _stable_path(str(package_data("score", "lm_eval_tasks")))
        self.verl_reward = _stable_path(os.path.join(self.root, "workflow", "scripts", "verl_reward.py"))
        self.train_specs: dict[tuple[str, str, int], TrainConfig | VerlRun] = {
            (m, slot, int(s)): self._build_run(m, slot, int(s)) for m, slot, s in runs(config, builtin=True)
        }
        self.atlas_run = self._atlas_run()
        self.pairs = sequential_pairs(config)  # the sequential primaries' pairs, decided look by look
        self.study = Study.from_config(config)  # the planned experiments as the report and the rank rule read them
        self.stepwise = sequential_slots(config)

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
        seed for tiny models with base_per_seed, else one folder for all seeds (`bandpo.plan.sweep.model_path`)."""
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
        for key in ("kinds", "levels"):  # a subset of tiny-math's cells (default: all)
            if d.get(key) is not None:
                args += [f"--{key}", *map(str, d[key])]
        if d.get("prompt_format", "tiny") != "tiny":
            args += ["--prompt-format", d["prompt_format"]]
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

    # -- training (train.smk: python -m bandpo.train / bandpo.verl.launch --spec FILE) ----------------------------
    def spec_file(self, kind: str, model_id: str, slot: str, seed: int | str | None = None) -> str:
        """The spec file of one job: ``results/{profile}/plan/{kind}/{model}/{slot}[/seed{seed}].json`` (kind:
        ``train`` or ``eval``; an eval job of several seeds has none)."""
        name = f"{model_id}/{slot}" if seed is None else run_folder(model_id, slot, seed)
        return f"{self.plan_dir}/{kind}/{name}.json"

    def train_spec(self, model_id: str, slot: str, seed: int | str) -> TrainConfig | VerlRun:
        """The settings of one training run (`TrainConfig` or `VerlRun`, by the config's trainer), built and
        validated with the plan."""
        return self.train_specs[(model_id, slot, int(seed))]

    def _settings(self, model_id: str, slot: str, fixed: Sequence[str]) -> dict[str, Any]:
        """The run's ``train:`` settings, none of them a field the plan sets itself."""
        s = self.slots[slot]
        settings = run_settings(self.config, model_id, s["entry"], s["experiment"])
        for key in settings:
            if key in fixed:
                why = "set the grader once, as grader.mode" if key == "grader_mode" else "set by the workflow itself"
                raise ValueError(f"training setting {key!r}: {why}, not by train:")
        return settings

    def _build_run(self, model_id: str, slot: str, seed: int) -> TrainConfig | VerlRun:
        """The run's settings, typed and checked: `ConfigError` at the ``train:`` key that set a bad value (the most
        specific level that sets it: experiment, method entry, model, top level), naming the run."""
        run_id = run_folder(model_id, slot, seed)
        try:
            build = self._verl_run if self.trainer == "verl" else self._local_run
            run = build(model_id, slot, seed)
        except (TypeError, ValueError) as e:  # a name or type: checked per level already, so a run field here
            raise ConfigError(f"config error at train (the run {run_id}): {' '.join(str(e).split())}") from None
        problems = run.problems()
        if problems:
            name = problems[0].split(":", 1)[0]
            raise ConfigError(f"config error at {self._setting_path(model_id, slot, name)} (the run {run_id}): "
                              f"{problems[0]}")  # fmt: skip
        return run

    def _setting_path(self, model_id: str, slot: str, name: str) -> str:
        """Where the config sets ``name`` for this run (the level that wins, `run_settings`); ``train`` if nowhere
        (a default that another setting makes invalid)."""
        s = self.slots[slot]
        entry_index = [e["id"] for e in self.config["methods"]].index(s["entry"])
        model_index = [m["id"] for m in self.config["models"]].index(model_id)
        levels = [(f"experiments.{s['experiment']}.train", self.experiments[s["experiment"]].get("train") or {}),
                  (f"methods[{entry_index}].train", self.entries[s["entry"]].get("train") or {}),
                  (f"models[{model_index}].train", self.models[model_id].get("train") or {}),
                  ("train", self.config.get("train") or {})]  # fmt: skip
        return next((f"{path}.{name}" for path, settings in levels if name in settings), "train")

    def _local_run(self, model_id: str, slot: str, seed: int) -> TrainConfig:
        entry = self.entry_of(slot)
        fields = typed_fields(self._settings(model_id, slot, RUN_FIELDS))
        return TrainConfig(model=self.model_dir(model_id, seed), data=self.data_dir(self.xp_of(slot)["data"]),
                           out=self.run_dir(model_id, slot, seed), method=entry["method"], params=dict(entry["params"]),
                           seed=seed, threads=self.threads, progress=False, **fields)  # fmt: skip

    def _verl_run(self, model_id: str, slot: str, seed: int) -> VerlRun:
        entry = self.entry_of(slot)
        fields = check_fields(self._settings(model_id, slot, VERL_RUN_FIELDS), VerlRun, "training setting")
        fields.setdefault("experiment_name", f"{model_id}-{slot}-seed{seed}")
        return VerlRun(model=os.path.abspath(self.model_dir(model_id, seed)), method=entry["method"],
                       params=dict(entry["params"]), seed=seed,
                       train_files=os.path.abspath(f"resources/data/_verl/{self.profile}/train.parquet"),
                       val_files=os.path.abspath(f"resources/data/_verl/{self.profile}/val.parquet"),
                       output_dir=os.path.abspath(self.run_dir(model_id, slot, seed)), reward_fn_path=self.verl_reward,
                       method_modules=self.method_modules(), grader_mode=self.grader_mode,
                       val_grader_modes=dict(self.config["grader"].get("val_modes") or {}), **fields)  # fmt: skip

    def verl_gpus(self, model_id: str, slot: str, seed: int | str) -> int:
        """GPUs a verl job asks for: nnodes x n_gpus_per_node."""
        run = self.train_spec(model_id, slot, seed)
        return int(run.nnodes) * int(run.n_gpus_per_node)

    # -- scoring (eval.smk: python -m bandpo.score --spec FILE) ---------------------------------------------------
    def eval_spec(self, model_id: str, slot: str, seeds: Sequence[int | str]) -> EvalJob:
        """The scoring job of these seeds of one (model, slot): every checkpoint with its place in the sweep."""
        e = self.config["eval"]
        model_args = dict(e["model_args"])
        model_args.update(self.models[model_id].get("eval_model_args") or {})
        batch = e["batch_size"]
        job = EvalJob(
            runs=[
                EvalRun(
                    os.path.dirname(self.checkpoint(model_id, slot, s)),
                    self.eval_dir(model_id, slot, s),
                    int(s),
                    self.run_meta(model_id, slot, s),
                )
                for s in seeds
            ],  # fmt: skip
            tasks={t["task"]: self.data_file(t["data"], "test") for t in self.tasks_of(slot)},
            include_path=self.tasks_dir,
            backend=e["backend"],
            model_args=model_args,
            batch_size=int(batch) if str(batch).isdigit() else batch,
            threads=self.threads,
            apply_chat_template=bool(e["apply_chat_template"]),
            limit=e["limit"] or None,
        )
        job.validate()
        return job

    # -- a job as the DAG runs it, elsewhere (benchmarks) -------------------------------------------------------------
    def train_command(self, model_id: str, slot: str, seed: int | str, spec_path: str | os.PathLike,
                      python: str = "python", **changes: Any) -> list[str]:  # fmt: skip
        """The argv of one local training job as rule ``train`` runs it (run it with `env` added), its spec written
        to ``spec_path`` with ``changes`` (TrainConfig fields: another ``out``, ``threads``, ...) applied."""
        spec = dataclasses.replace(self.train_spec(model_id, slot, seed), **changes)
        spec.validate()
        _write_json(Path(spec_path), spec_fields(spec))
        return [python, "-m", "bandpo.train", "--spec", str(spec_path)]

    def eval_command(self, model_id: str, slot: str, seeds: Sequence[int | str], spec_path: str | os.PathLike,
                     python: str = "python", **changes: Any) -> list[str]:  # fmt: skip
        """The argv of one scoring job as the evaluation rules run it, its spec written to ``spec_path`` with
        ``changes`` (EvalJob fields: other ``runs``, ``threads``, ...) applied."""
        job = dataclasses.replace(self.eval_spec(model_id, slot, seeds), **changes)
        job.validate()
        _write_json(Path(spec_path), job.to_dict())
        return [python, "-m", "bandpo.score", "--spec", str(spec_path)]

    # -- spec files ------------------------------------------------------------------------------------------------
    def specs(self) -> dict[str, dict[str, Any]]:
        """Every spec file of the DAG -> its content: each training run's, each scoring job's, the atlas run's."""
        out = {self.spec_file("train", m, slot, s): spec_fields(run) for (m, slot, s), run in
               self.train_specs.items()}  # fmt: skip
        for m, slot in eval_groups(self.config):
            for seeds in self.eval_seed_lists(slot):
                out[self.eval_spec_file(m, slot, seeds)] = self.eval_spec(m, slot, seeds).to_dict()
        if self.atlas_run is not None:
            out[self.atlas_spec_file] = spec_fields(self.atlas_run)
        for pair in self.pairs:
            out[self.look_spec_file(pair["experiment"], pair["model"])] = self.look_spec(pair)
        return out

    def eval_spec_file(self, model_id: str, slot: str, seeds: Sequence[int | str]) -> str:
        """The spec file of the scoring job of these seeds: one per (model, slot) with eval.group_seeds (one per look
        for a sequential primary's pair), else one per run."""
        if not self.group_seeds:
            return self.spec_file("eval", model_id, slot, seeds[0])
        if slot in self.stepwise:
            return f"{self.plan_dir}/eval/{model_id}/{slot}/look{self.look_of(slot, seeds[0])}.json"
        return self.spec_file("eval", model_id, slot)

    @property
    def group_seeds(self) -> bool:
        """One scoring job per (model, slot) (eval.group_seeds), else one per run."""
        return bool(self.config["eval"]["group_seeds"])

    def eval_seed_lists(self, slot: str) -> list[list[int]]:
        """The seed lists of a slot's scoring jobs: all its seeds in one job (group_seeds; a sequential primary's
        pair: one job per look's seeds), else one job each."""
        if not self.group_seeds:
            return [[s] for s in self.seeds_of(slot)]
        if slot in self.stepwise:
            return look_blocks(self.config, self.slots[slot]["experiment"])
        return [self.seeds_of(slot)]

    def look_of(self, slot: str, seed: int | str) -> int:
        """The look (1-based) whose seeds hold ``seed`` of a sequential primary's pair."""
        blocks = look_blocks(self.config, self.slots[slot]["experiment"])
        return next(j for j, block in enumerate(blocks, 1) if int(seed) in block)

    # -- the looks of sequential primaries (looks.smk: python -m bandpo.decide look --spec FILE) ------------------
    def look_spec_file(self, experiment: str, model_id: str) -> str:
        return f"{self.plan_dir}/looks/{experiment}/{model_id}.json"

    def look_file(self, experiment: str, model_id: str, look: int | str) -> str:
        """The decision of one look (the checkpoint's output)."""
        return f"{self.results}/looks/{experiment}/{model_id}/look{look}.json"

    def look_spec(self, pair: Mapping[str, Any]) -> dict[str, Any]:
        """What a look of a sequential primary reads: its design (`bandpo.study.design_settings`, fractions of
        the score), the task and metric it compares, and per seed of the pair, in look order, the two evaluation
        summaries."""
        xp, model = pair["experiment"], pair["model"]
        primary = self.experiments[xp]["primary"]
        task = primary.get("task") or self.experiments[xp]["eval_tasks"][0]["task"]
        slots = {e: slot_id(xp, e) if e not in (self.experiments[xp].get("reuse") or ()) else e
                 for e in (pair["treatment"], pair["control"])}  # fmt: skip
        seeds = [s for block in pair["blocks"] for s in block]
        return {"experiment": xp, "model": model, "design": design_settings(self.config, xp, model),
                "task": task, "metric": primary.get("score", "mean"), "treatment": pair["treatment"],
                "control": pair["control"], "seeds": seeds,
                "summaries": {side: [f"{self.eval_dir(model, slots[pair[side]], s)}/{task}.json" for s in seeds]
                              for side in ("treatment", "control")}}  # fmt: skip

    def seeds_of(self, slot: str) -> list[int]:
        """The seeds a slot trains and scores (`bandpo.study.slot_seeds`)."""
        return slot_seeds(self.config, self.slots[slot]["experiment"], self.slots[slot]["entry"])

    def write_specs(self) -> list[str]:
        """Write every spec file whose content changed (atomically; an unchanged file keeps its time, so its job
        is not rerun); the paths written."""
        return [path for path, content in self.specs().items() if _write_json(Path(path), content)]

    # -- the equivalence atlas (report.smk: python -m bandpo.train.atlas --spec FILE) -----------------------------
    def _atlas_run(self) -> TrainConfig | None:
        """The run whose first steps the equivalence atlas measures (`bandpo.plan.sweep.atlas_spec`): the local
        trainer's GRPO from main's first tiny model and seed with main's settings of that model (under verl, whose
        settings are not the local trainer's, its defaults); None: no atlas job."""
        a = atlas_spec(self.config)
        if a is None:
            return None
        settings = a["train"] if self.trainer == "local" else {}
        try:
            run = TrainConfig(model=a["model_dir"], data=self.data_dir(a["data"]), out="-", seed=a["seed"],
                              threads=self.threads, progress=False, **typed_fields(settings))  # fmt: skip
            run.validate()
        except (TypeError, ValueError) as e:
            raise ConfigError(f"config error at train (the atlas run): {' '.join(str(e).split())}") from None
        return run

    @property
    def atlas_spec_file(self) -> str:
        return f"{self.plan_dir}/atlas.json"

    def atlas_steps(self) -> int:
        """The steps whose mini-batches the atlas measures."""
        return atlas_spec(self.config)["steps"]
