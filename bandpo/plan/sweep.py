"""The sweep a validated config describes, listed for the rules (`bandpo.plan.validate` checks and completes the
config first): its runs, slots (and each slot's seeds) and score groups, their folders, each run's trainer settings
and base model, the job counts a fresh run schedules. Used by the Snakefile and workflow/rules/*.smk, the report and
the tests."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bandpo.core.atlas_table import STEPS as ATLAS_STEPS
from bandpo.study import (
    BASE_ENTRY,
    MAIN,
    by_id,
    look_blocks,
    runs_primary_seeds,
    sequential,
    slot_id,
    slot_seeds,
    split_slot,
)
from bandpo.train.settings import TrainConfig


def method_module_path(spec: str, root: str | os.PathLike = ".") -> Path | None:
    """The file of a ``method_modules`` entry: a .py path (relative to ``root``, the workflow's folder) or a module
    ``pkg/name.py`` under ``root``; None for other module names (a change there is not noticed by the config cache:
    run ``snakemake`` after removing .snakemake/bandpo-config-checked, or give a path)."""
    path = Path(spec) if spec.endswith(".py") else Path(*spec.split(".")).with_suffix(".py")
    path = Path(root, path).resolve()  # an absolute path stays itself
    return path if path.is_file() else None


def method_module_specs(cfg: Mapping[str, Any], root: str | os.PathLike = ".") -> list[str]:
    """The ``method_modules`` as the jobs and the validation import them, whatever their working directory: .py
    paths and modules found as files under ``root`` become absolute file paths; other module names stay names (they
    must be importable: installed or on PYTHONPATH)."""
    return [str(path) if (path := method_module_path(m, root)) is not None else m for m in cfg["method_modules"]]


# --------------------------------------------------------------------------------------------------------------
# the sweep
# --------------------------------------------------------------------------------------------------------------


def run_settings(cfg: Mapping[str, Any], model_id: str, entry_id: str, experiment: str = MAIN) -> dict[str, Any]:
    """The ``train:`` settings of one run (protocol and trainer fields, `bandpo.train.settings.TrainConfig` or
    `bandpo.verl.spec.VerlRun`): global ``train`` < the model's ``train`` < the method entry's ``train`` < the
    experiment's ``train``."""
    out = dict(cfg.get("train") or {})
    out.update(by_id(cfg["models"])[model_id].get("train") or {})
    out.update(by_id(cfg["methods"])[entry_id].get("train") or {})
    out.update(((cfg.get("experiments") or {}).get(experiment) or {}).get("train") or {})
    return out


def per_seed_base(cfg: Mapping[str, Any], model_id: str) -> bool:
    """Whether seed s of this model trains from a base model of its own (``base_per_seed``; tiny models only: a hub
    model is one download that every seed shares)."""
    return bool(cfg["base_per_seed"]) and by_id(cfg["models"])[model_id]["source"] == "tiny"


def model_path(cfg: Mapping[str, Any], model_id: str, seed: int | str | None = None) -> str:
    """The base model folder of seed ``seed``: ``resources/models/{model}/seed{s}/`` when the model is built per
    seed (`per_seed_base`), else ``resources/models/{model}/`` (the seed is then ignored)."""
    if not per_seed_base(cfg, model_id):
        return f"resources/models/{model_id}"
    if seed is None:
        raise ValueError(f"model {model_id!r} is built once per seed (base_per_seed): name the seed")
    return f"resources/models/{model_id}/seed{int(seed)}"


def pretrain_seed(cfg: Mapping[str, Any], model_id: str, seed: int | str | None = None) -> int:
    """The initialisation / pretraining seed of a tiny base model: the model's ``seed``, plus the run seed when the
    model is built per seed (so with the default ``seed: 0`` base model s is pretrained with seed s)."""
    base = int(by_id(cfg["models"])[model_id].get("seed", 0))
    return base + int(seed) if per_seed_base(cfg, model_id) else base


THREADED_RULES = ("model_tiny", "train", "eval_group", "eval_run")  # their commands run `threads` threads


def job_resources(cfg: Mapping[str, Any], rule: str) -> dict[str, int]:
    """One rule's job request (mem_mb, runtime, cpus_per_task): ``resources.default`` < ``resources.<rule>``."""
    return {**cfg["resources"]["default"], **(cfg["resources"].get(rule) or {})}


def verl_val_split(cfg: Mapping[str, Any]) -> str:
    """The split of ``val_data`` that is verl's val_files: ``val_split`` when the config sets it (the paper's
    protocol: ``test``), else the validation split when verl measures held-out (``train.val_every``, as the local
    trainer does), else the test split (verl requires val_files; unused)."""
    if cfg.get("val_split"):
        return cfg["val_split"]
    return "validation" if (cfg.get("train") or {}).get("val_every") else "test"


def val_data_ids(cfg: Mapping[str, Any]) -> list[str]:
    """The data sets of verl's val_files (``val_data``: one id or a list; none before the plan fills it in)."""
    val = cfg.get("val_data")
    return [] if val is None else [val] if isinstance(val, str) else list(val)


def model_data(cfg: Mapping[str, Any], model: Mapping[str, Any]) -> str:
    """The data set a model is pretrained on (tiny models): its ``data``, default train_data[0]."""
    return model.get("data") or cfg["train_data"][0]


def cell_models(cfg: Mapping[str, Any], xp: Mapping[str, Any], entry: str) -> list[str]:
    """The models an experiment runs a method entry on: the experiment's, restricted to the entry's ``models``."""
    allowed = by_id(cfg["methods"])[entry].get("models") if entry != BASE_ENTRY else None
    return [m for m in xp["models"] if allowed is None or m in allowed]


def reused_entries(cfg: Mapping[str, Any], experiment: str) -> list[str]:
    """The entries of an experiment whose runs are main's: every setting equal (models, data, tasks, the entry's
    seeds (`slot_seeds`) among main's seeds of that entry, the trainer settings of every model, no selected
    setting), and ``base`` when both score the base models (the experiment's seeds among main's). Not trained or
    scored again; the report reads main's runs for them. Empty for main, and when main is not part of the DAG
    (``only``)."""
    xps = cfg["experiments"]
    if experiment == MAIN or MAIN not in xps:
        return []
    xp, main = xps[experiment], xps[MAIN]
    if xp.get("select") or xp["data"] != main["data"] or xp["eval_tasks"] != main["eval_tasks"]:
        return []

    def seeds_among_mains(e: str) -> bool:
        return set(slot_seeds(cfg, experiment, e)) <= set(slot_seeds(cfg, MAIN, e))

    out = []
    if xp["base"] and main["base"] and set(xp["models"]) <= set(main["models"]) and seeds_among_mains(BASE_ENTRY):
        out.append(BASE_ENTRY)
    for e in xp["methods"]:
        models = cell_models(cfg, xp, e)
        if (
            e in main["methods"]
            and seeds_among_mains(e)
            and set(models) <= set(cell_models(cfg, main, e))
            and all(_same_settings(run_settings(cfg, m, e, experiment), run_settings(cfg, m, e, MAIN)) for m in models)
        ):
            out.append(e)
    return out


def _same_settings(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two runs' settings give the same TrainConfig: equal where both set a key, and a key set on one side
    only holds TrainConfig's default."""
    if any(a[k] != b[k] for k in a.keys() & b.keys()):
        return False
    one_sided = {k: v for k, v in [*a.items(), *b.items()] if (k in a) != (k in b)}
    if not one_sided:
        return True
    defaults = TrainConfig()
    return all(hasattr(defaults, k) and getattr(defaults, k) == v for k, v in one_sided.items())


def xp_entries(cfg: Mapping[str, Any], experiment: str, builtin: bool = False) -> list[str]:
    """The method entry ids an experiment trains (not those it reuses from main); ``builtin``: only those trained
    by the built-in train rule."""
    external = {e["id"] for e in cfg["methods"] if e.get("external")}
    xp = cfg["experiments"][experiment]
    reuse = set(xp.get("reuse") or ())
    return [e for e in xp["methods"] if e not in reuse and not (builtin and e in external)]


def slots(cfg: Mapping[str, Any], builtin: bool = False, base: bool = False) -> dict[str, dict[str, str]]:
    """Every (experiment, method entry) of the DAG by its slot id (`slot_id`): {"experiment", "entry"}.
    ``builtin``: only entries of the built-in train rule; ``base``: also each experiment's base-model slot."""
    out: dict[str, dict[str, str]] = {}
    for xp_id, xp in cfg["experiments"].items():
        own_base = base and xp["base"] and BASE_ENTRY not in (xp.get("reuse") or ())
        entries = ([BASE_ENTRY] if own_base else []) + xp_entries(cfg, xp_id, builtin)
        for e in entries:
            out[slot_id(xp_id, e)] = {"experiment": xp_id, "entry": e}
    return out


def runs(cfg: Mapping[str, Any], builtin: bool = False, first_look: bool = False) -> list[tuple[str, str, int]]:
    """(model, slot, seed) of every training run of the DAG: each experiment's entries on their models, each with
    its slot's seeds (`slot_seeds`: the primary pair's ``primary.seeds`` where set; a sequential primary's pair up
    to the model's n_max). ``first_look``: of a sequential primary's pair only the first look's seeds (what a fresh
    run schedules before any look)."""
    out = []
    for xp_id, xp in cfg["experiments"].items():
        for m in xp["models"]:
            for e in xp_entries(cfg, xp_id, builtin):
                if m in cell_models(cfg, xp, e):
                    out += [(m, slot_id(xp_id, e), s) for s in _run_seeds(cfg, xp_id, e, m, first_look)]
    return out


def _run_seeds(cfg: Mapping[str, Any], experiment: str, entry: str, model: str, first_look: bool) -> list[int]:
    """The seeds of an entry on a model: its slot's, a sequential primary's pair's in looks up to the model's n_max
    (the first look's only with ``first_look``)."""
    seeds = slot_seeds(cfg, experiment, entry)
    if slot_id(experiment, entry) not in sequential_slots(cfg):
        return seeds
    blocks = look_blocks(cfg, experiment, model)
    allowed = {s for block in (blocks[:1] if first_look else blocks) for s in block}
    return [s for s in seeds if s in allowed]


def eval_groups(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(model, slot) of every scored group: each experiment's entries, plus its base models when ``base``."""
    out = []
    for xp_id, xp in cfg["experiments"].items():
        own_base = xp["base"] and BASE_ENTRY not in (xp.get("reuse") or ())
        entries = ([BASE_ENTRY] if own_base else []) + xp_entries(cfg, xp_id)
        for m in xp["models"]:
            out += [(m, slot_id(xp_id, e)) for e in entries if m in cell_models(cfg, xp, e)]
    return out


def score_groups(cfg: Mapping[str, Any], experiment: str) -> list[tuple[str, str]]:
    """(model, slot) of every scored group an experiment's results are read from: its own (`eval_groups`) and
    main's groups of the entries it reuses."""
    xp = cfg["experiments"][experiment]
    own = [(m, slot) for m, slot in eval_groups(cfg) if split_slot(slot)[1] == experiment]
    reused = [(m, slot_id(MAIN, e)) for e in xp.get("reuse") or () for m in cell_models(cfg, xp, e)]
    return own + reused


def used_data(cfg: Mapping[str, Any]) -> list[str]:
    """Data sets the DAG builds: the experiments' training and task data, the models' pretraining data."""
    models = by_id(cfg["models"])
    ids = set()
    for xp in cfg["experiments"].values():
        ids.add(xp["data"])
        ids |= {t["data"] for t in xp["eval_tasks"]}
        ids |= {model_data(cfg, models[m]) for m in xp["models"] if models[m]["source"] == "tiny"}
    if cfg["trainer"] == "verl":
        ids |= set(cfg["train_data"]) | set(val_data_ids(cfg))
    return [d["id"] for d in cfg["data"] if d["id"] in ids]


def base_models(cfg: Mapping[str, Any], first_look: bool = False) -> list[str]:
    """Every base model folder the DAG builds or downloads (`model_path`): per (model, seed) used by any experiment
    for a model built per seed (the experiment's seeds on each of its models, and a primary pair's
    ``primary.seeds`` on the models the pair runs on, `_run_seeds`), else one per model. ``first_look``: a sequential
    primary's pair with its first look's seeds only (what a fresh run builds before any look)."""
    return sorted(
        {
            model_path(cfg, m, s)
            for xp_id, xp in cfg["experiments"].items()
            for e in [BASE_ENTRY, *xp["methods"]]
            for m in cell_models(cfg, xp, e)
            for s in _run_seeds(cfg, xp_id, e, m, first_look)
        }
    )


def atlas_spec(cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the equivalence atlas (`bandpo.train.atlas`, rule ``atlas``) measures on: the first tiny model of
    the main
    experiment with its first seed (its base model folder), main's data, and the training settings main's runs of
    that model get (global ``train`` < the model's ``train`` < main's ``train``), so that its real rollouts are
    the first steps of a GRPO run of the sweep. None when main has no tiny model (hub models: the GPU profile) or
    is not run (``only``)."""
    xp = (cfg.get("experiments") or {}).get(MAIN)
    models = by_id(cfg["models"])
    tiny = [m for m in (xp or {}).get("models", []) if models[m]["source"] == "tiny"]
    if not tiny:
        return None
    model, seed = tiny[0], int(xp["seeds"][0])
    train = dict(cfg.get("train") or {})
    train.update(models[model].get("train") or {})
    train.update(xp.get("train") or {})
    steps = min(ATLAS_STEPS, int(train.get("steps", ATLAS_STEPS)))  # the run's own steps may be fewer (smoke: 3)
    return {"model": model, "seed": seed, "model_dir": model_path(cfg, model, seed), "data": xp["data"],
            "train": train, "steps": steps}  # fmt: skip


def eval_rule_name(kind: str, experiment: str, primary: bool = False, look: int | None = None) -> str:
    """The evaluation rule of an experiment: ``eval_group`` / ``eval_run`` for main, ``eval_group_<experiment>``
    (non-identifier characters as _) for the others; ``primary``: the rule of its primary pair when the pair runs
    seeds of its own (``primary.seeds``; `eval_seed_groups`), that name plus ``_primary`` (``eval_group_primary``,
    ``eval_group_separation_primary``); ``look``: the rule of the seeds a sequential primary adds for look j
    (``eval_group_primary_look2``)."""
    name = kind if experiment == MAIN else f"{kind}_{re.sub(r'[^A-Za-z0-9_]', '_', experiment)}"
    name = f"{name}_primary" if primary else name
    return f"{name}_look{look}" if look is not None else name


def group_rule_name(kind: str, experiment: str, group: Mapping[str, Any]) -> str:
    """The evaluation rule of one of `eval_seed_groups`' groups: `eval_rule_name`, and for entries that keep seeds
    of their own (method entries' ``seeds``) that name plus ``_seeds`` and the seeds (``eval_group_seeds0_1_2``)."""
    name = eval_rule_name(kind, experiment, group["primary"], group["look"])
    own = group.get("entry_seeds")
    return f"{name}_seeds{'_'.join(str(s) for s in own)}" if own else name


def sequential_pairs(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every sequential primary on every model that runs both of its entries: {"experiment", "model", "treatment",
    "control", "blocks"} (`look_blocks`)."""
    out = []
    for xp_id, xp in cfg["experiments"].items():
        if sequential(cfg, xp_id) is None:
            continue
        treatment, control = xp["primary"]["compare"]
        for model in xp["models"]:
            if model in cell_models(cfg, xp, treatment) and model in cell_models(cfg, xp, control):
                out.append({"experiment": xp_id, "model": model, "treatment": treatment, "control": control,
                            "blocks": look_blocks(cfg, xp_id, model)})  # fmt: skip
    return out


def sequential_slots(cfg: Mapping[str, Any]) -> set[str]:
    """The slots whose seeds a sequential primary schedules look by look (its pair's), not all at once."""
    out = set()
    for xp_id, xp in cfg["experiments"].items():
        if sequential(cfg, xp_id) is not None:
            out |= {slot_id(xp_id, e) for e in xp["primary"]["compare"] if e not in (xp.get("reuse") or ())}
    return out


def eval_seed_groups(cfg: Mapping[str, Any], experiment: str) -> list[dict[str, Any]]:
    """The evaluation rules of an experiment, one per distinct seed list (`slot_seeds`) among the slots it scores
    (its own base slot and the entries it trains; not those it reuses from main): {"primary": bool (the rule's name
    takes `eval_rule_name`'s ``_primary`` suffix: its seeds are not the experiment's own, i.e. the primary pair's
    ``primary.seeds``), "look": the look whose seeds it scores (a sequential primary's pair: one rule per look's
    block of seeds) or None, "seeds": [int] (the seeds each job of the rule scores, the rule's outputs), "slots":
    [str] (the slot ids the rule's ``entry`` wildcard matches), "entry_seeds": the seeds of entries that keep seeds
    of their own (a method entry's ``seeds``; `group_rule_name`'s suffix), else None}; the group with the
    experiment's own seeds first.
    Empty when the experiment scores nothing of its own (every entry reused)."""
    own = [int(s) for s in cfg["experiments"][experiment]["seeds"]]
    stepwise = sequential_slots(cfg)
    groups: dict[tuple[int, ...], list[str]] = {}
    every = slots(cfg, base=True)
    for slot, where in every.items():
        if where["experiment"] == experiment:
            groups.setdefault(tuple(slot_seeds(cfg, experiment, where["entry"])), []).append(slot)
    out = []
    for seeds, ids in groups.items():
        if any(i in stepwise for i in ids):
            out += [{"primary": True, "look": j, "seeds": block, "slots": ids}
                    for j, block in enumerate(look_blocks(cfg, experiment), 1)]  # fmt: skip
        else:
            pair = any(runs_primary_seeds(cfg, experiment, every[i]["entry"]) for i in ids)
            entry_seeds = list(seeds) if list(seeds) != own and not pair else None
            out.append({"primary": list(seeds) != own and pair, "look": None, "seeds": list(seeds), "slots": ids,
                        "entry_seeds": entry_seeds})  # fmt: skip
    return sorted(out, key=lambda g: (g["primary"], g["look"] or 0, bool(g.get("entry_seeds"))))


def eval_rule_clash(cfg: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The first evaluation rule name two experiments would share (`group_rule_name`: ids that differ only in
    characters other than letters, digits and _ share one, and so would an experiment ``primary`` and main's primary
    pair), as (experiment, name, the other experiment); None when every rule has a name of its own."""
    seen: dict[str, str] = {}
    for xp_id in cfg["experiments"]:
        for group in eval_seed_groups(cfg, xp_id):
            name = group_rule_name("eval_group", xp_id, group)
            if seen.get(name, xp_id) != xp_id:
                return xp_id, name, seen[name]
            seen[name] = xp_id
    return None


def expected_jobs(cfg: Mapping[str, Any]) -> dict[str, int]:
    """How many jobs of each rule a fresh run of this config schedules (the tests compare with ``snakemake -n``)."""
    data, models = by_id(cfg["data"]), by_id(cfg["models"])
    # external entries are trained by their own rules; a sequential primary's pair first trains its first look's seeds
    n_runs = len(runs(cfg, builtin=True, first_look=True))
    jobs: dict[str, int] = {}
    jobs["data_tiny_math"] = sum(1 for d in used_data(cfg) if data[d]["source"] == "tiny-math")
    jobs["data_real"] = sum(1 for d in used_data(cfg) if data[d]["source"] == "real")
    folders = base_models(cfg, first_look=True)
    jobs["model_tiny"] = sum(1 for f in folders if models[f.split("/")[2]]["source"] == "tiny")
    jobs["model_hub"] = sum(1 for f in folders if models[f.split("/")[2]]["source"] == "hub")
    jobs["model_pypi"] = sum(1 for f in folders if models[f.split("/")[2]]["source"] == "pypi")
    if cfg["trainer"] == "verl":
        jobs["verl_data"] = 1
        jobs["train_verl"] = n_runs
        jobs["merge_verl"] = n_runs
    else:
        jobs["train"] = n_runs
    scored = eval_groups(cfg)
    for xp_id in cfg["experiments"]:
        for group in eval_seed_groups(cfg, xp_id):  # one rule per seed list: the primary pair's own seeds apart
            if (group["look"] or 1) > 1:
                continue  # the later looks' seeds: scheduled only when a look does not decide
            n_groups = sum(1 for _m, slot in scored if slot in group["slots"])
            if cfg["eval"]["group_seeds"]:
                jobs[group_rule_name("eval_group", xp_id, group)] = n_groups
            else:
                n = n_groups * len(group["seeds"])
                jobs[group_rule_name("eval_run", xp_id, group)] = n
    jobs["look"] = len(sequential_pairs(cfg))  # each sequential primary's first look
    jobs["decided"] = jobs["look"]  # and the copy of the look that decided it (looks.smk)
    jobs["select"] = sum(1 for xp in cfg["experiments"].values() if xp.get("select"))
    jobs["atlas"] = 1 if atlas_spec(cfg) is not None else 0
    jobs["report"] = 1
    jobs["publish"] = 1 if cfg["publish"] else 0
    jobs["all"] = 1
    return {k: v for k, v in jobs.items() if v}
