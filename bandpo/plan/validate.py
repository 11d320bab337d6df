"""The workflow config, loaded, completed and validated before any job is scheduled (the Snakefile and the tests).

`validate_config` checks, in order:

1. the JSON schema ``bandpo/schemas/config.schema.yaml`` (defaults filled in, unknown keys rejected);
2. cross references: unique ids, data sets named by ``train_data`` / ``val_data`` / ``eval.tasks`` exist, tiny
   model sizes and real data set names are registered (each with a ``path`` that exists, relative to the working
   folder, or ``download: true``), every lm-eval task has its YAML;
3. every method entry through ``bandpo.methods.make_config`` (unknown method, unknown divergence, delta <= 0, ...),
   after importing the config's ``method_modules`` (methods of your own), and every ``train:`` override (top level,
   per model, per method entry) against ``bandpo.train.loop.TrainConfig`` (unknown key with a did-you-mean, type,
   range).

Any failure raises `ConfigError` whose message starts with the offending field, e.g.
``config error at methods[3].params (entry 'bandpo_kl'): method 'bandpo': BandPOConfig: parameter 'delta' = 0.0
must be > 0``.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import best_match

from bandpo.core.files import package_data
from bandpo.core.options import check_fields
from bandpo.data.real import REAL_DATASETS, real_entry_problems
from bandpo.data.tiny_math import ProbeSpec
from bandpo.models.sizes import SIZES
from bandpo.plan.sweep import (
    THREADED_RULES,
    cell_models,
    eval_rule_clash,
    job_resources,
    method_module_path,
    method_module_specs,
    model_data,
    reused_entries,
    sequential_pairs,
    val_data_ids,
    verl_val_split,
)
from bandpo.study import MAIN, by_id, design_settings
from bandpo.train.settings import RUN_FIELDS, TrainConfig
from bandpo.verl.spec import RUN_FIELDS as VERL_RUN_FIELDS
from bandpo.verl.spec import VerlRun

SCHEMA_PATH = package_data("schemas", "config.schema.yaml")
TASKS_DIR = package_data("score", "lm_eval_tasks")  # the lm-eval task YAMLs (and their utils.py hooks)


class ConfigError(ValueError):
    """An invalid workflow config; the message names the field."""


def fail(path: Sequence[Any], message: str, label: str = "") -> NoReturn:
    """Raise `ConfigError` for the field at ``path`` (``label``: the entry it belongs to, e.g. `` (entry 'grpo')``)."""
    raise ConfigError(f"config error at {_path_str(path)}{label}: {message}")


def _path_str(path: Sequence[Any]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<top level>"


def load_yaml(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _validator_with_defaults(schema: Mapping[str, Any]):
    """A Draft 2020-12 validator that also fills in ``default`` values of absent properties."""
    base = Draft202012Validator

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from base.VALIDATORS["properties"](validator, properties, instance, schema)

    return validators.extend(base, {"properties": set_defaults})(schema)


def _schema_errors(config: dict, schema: Mapping[str, Any]) -> list[str]:
    validator = _validator_with_defaults(schema)
    errors = list(validator.iter_errors(config))
    if not errors:
        return []
    msgs = []
    for err in sorted(errors, key=lambda e: (list(map(str, e.absolute_path)), e.message)):
        leaf = err
        if err.context:  # anyOf / allOf: report the most specific sub-error
            leaf = best_match(err.context)
        path = list(err.absolute_path) + list(leaf.relative_path if leaf is not err else [])
        message = leaf.message
        if leaf.validator == "additionalProperties" and isinstance(leaf.instance, dict):
            allowed = sorted((leaf.schema.get("properties") or {}).keys())
            unknown = sorted(k for k in leaf.instance if k not in allowed)
            if unknown:
                path = path + [unknown[0]]
                message = f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}"
                if allowed:
                    message += f"; allowed here: {', '.join(allowed)}"
        if leaf.validator == "not" and path[:1] == ["methods"] and path[-1:] == ["id"]:
            message = f"{leaf.instance!r} is reserved (the entry of the untrained base models)"
        if leaf.validator == "required":
            m = re.match(r"'(.+?)' is a required property", message)
            if m:
                path = path + [m.group(1)]
                message = f"missing required key {m.group(1)!r}"
                if path[:1] in (["models"], ["data"]) and len(path) == 3 and isinstance(leaf.instance, dict):
                    src = leaf.instance.get("source")
                    message += f" (needed for source {src!r})" if src else ""
        msgs.append(f"config error at {_path_str(path)}: {message}")
    return msgs


_LABELS = {"methods": "entry", "models": "model", "data": "data set"}
_PARAM_IN_MESSAGE = re.compile(r"parameter(?:\(s\))? '([A-Za-z_][A-Za-z0-9_]*)'")


def _entry_label(config: Mapping[str, Any], key: str, i: int) -> str:
    items = config.get(key) or []
    if i < len(items) and isinstance(items[i], Mapping) and "id" in items[i]:
        return f" ({_LABELS.get(key, key)} {items[i]['id']!r})"
    return ""


def validate_config(
    config: Mapping[str, Any],
    schema_path: str | os.PathLike = SCHEMA_PATH,
    cache_dir: str | os.PathLike | None = None,
    root: str | os.PathLike = ".",
) -> dict[str, Any]:
    """The config completed with the schema's defaults; `ConfigError` (naming the field) if it is invalid.

    ``cache_dir``: remember configs that passed the registry checks (keyed by the config and the bandpo sources), so
    that a no-op ``snakemake`` run does not pay the torch import of the method registry again. ``root``: the folder
    that relative ``include_rules`` and ``method_modules`` paths are relative to (the Snakefile passes its own).
    """
    if not isinstance(config, Mapping) or not config:
        raise ConfigError("config error at <top level>: empty config (pass --configfile config/<profile>.yaml)")
    cfg = json.loads(json.dumps(config))  # plain, deep copy (YAML may hold tuples, ...)
    _check_retired_keys(cfg)
    errors = _schema_errors(cfg, load_yaml(schema_path))
    if errors:
        extra = f" (and {len(errors) - 1} more: {'; '.join(errors[1:4])})" if len(errors) > 1 else ""
        raise ConfigError(errors[0] + extra)

    _check_unique_ids(cfg)
    data_ids = {d["id"]: d for d in cfg["data"]}
    if cfg["publish_dir"] == f"results/{cfg['profile']}":
        fail(["publish_dir"], f"{cfg['publish_dir']} is the profile's own folder (its runs and report): publish "
                              "elsewhere, or rename the profile")  # fmt: skip
    _check_data(cfg, data_ids)
    _check_eval(cfg, data_ids)
    _check_models(cfg, data_ids)
    complete_experiments(cfg)
    _check_rules_and_resources(cfg, root)
    if cache_dir is not None:
        stamp = Path(cache_dir) / f"config-ok-{_registry_fingerprint(cfg, root)}"
        if not stamp.exists():
            check_registries(cfg, root)
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(json.dumps(cfg, sort_keys=True) + "\n", encoding="utf-8")
    else:
        check_registries(cfg, root)

    if cfg["trainer"] == "verl" and cfg.get("val_data") is None:
        cfg["val_data"] = cfg["eval"]["tasks"][0]["data"]
    _check_train_levels(cfg)
    return cfg


def _check_unique_ids(cfg: Mapping[str, Any]) -> None:
    """No two entries of ``data``, ``models`` or ``methods`` share an id."""
    for key in ("data", "models", "methods"):
        seen: dict[str, int] = {}
        for i, item in enumerate(cfg[key]):
            if item["id"] in seen:
                fail([key, i, "id"], f"duplicate id {item['id']!r} (also {key}[{seen[item['id']]}])")
            seen[item["id"]] = i


def _splits_of(d: Mapping[str, Any]) -> set[str]:
    """The splits a data set writes: tiny-math all three, a real data set its one output split."""
    if d["source"] == "tiny-math":
        return {"train", "validation", "test"}
    return {REAL_DATASETS[d["name"]].out_split}


def _check_data(cfg: Mapping[str, Any], data_ids: Mapping[str, Mapping[str, Any]]) -> None:
    """Real data sets are registered; ``train_data`` names data sets with a train split, ``val_data`` one with
    the split verl validates on (`verl_val_split`)."""
    for i, d in enumerate(cfg["data"]):
        for key, why in real_entry_problems(d, cfg["profile"]) if d["source"] == "real" else ():
            fail(["data", i, *key], why, _entry_label(cfg, "data", i) if key != ["name"] else "")
    for i, did in enumerate(cfg["train_data"]):
        if did not in data_ids:
            fail(["train_data", i], f"unknown data set {did!r}; defined: {', '.join(data_ids)}")
        if "train" not in _splits_of(data_ids[did]):
            fail(["train_data", i], f"data set {did!r} has no train split")
    val_ids = val_data_ids(cfg)
    for i, did in enumerate(val_ids):
        path = ["val_data"] if isinstance(cfg["val_data"], str) else ["val_data", i]
        if did not in data_ids:
            fail(path, f"unknown data set {did!r}; defined: {', '.join(data_ids)}")
        split = verl_val_split(cfg)
        if split not in _splits_of(data_ids[did]):
            why = " (train.val_every measures held-out on it)" if split == "validation" else ""
            fail(path, f"data set {did!r} has no {split} split{why}")
    for did in (cfg.get("grader") or {}).get("val_modes") or {}:
        if did not in val_ids:
            fail(["grader", "val_modes", did], f"not a data set of val_data ({', '.join(val_ids) or 'none'})")


def _check_eval(cfg: Mapping[str, Any], data_ids: Mapping[str, Mapping[str, Any]]) -> None:
    """Every lm-eval task scores a data set with a test split, has its YAML and is listed once; the bandpo-tiny
    backend scores the local trainer's tiny models only, without a chat template."""
    for i, t in enumerate(cfg["eval"]["tasks"]):
        if t["data"] not in data_ids:
            fail(["eval", "tasks", i, "data"], f"unknown data set {t['data']!r}; defined: {', '.join(data_ids)}")
        if "test" not in _splits_of(data_ids[t["data"]]):
            fail(["eval", "tasks", i, "data"], f"data set {t['data']!r} has no test split")
        if not (TASKS_DIR / f"{t['task']}.yaml").is_file():
            known = sorted(p.stem for p in TASKS_DIR.glob("*.yaml"))
            fail(["eval", "tasks", i, "task"], f"no lm-eval task YAML {t['task']}.yaml in {TASKS_DIR}; known: {known}")
    tasks = [t["task"] for t in cfg["eval"]["tasks"]]
    if len(set(tasks)) != len(tasks):
        fail(["eval", "tasks"], f"a task is listed twice: {tasks}")
    if cfg["eval"]["backend"] == "bandpo-tiny":
        other = [m["id"] for m in cfg["models"] if m["source"] != "tiny"]
        if other or cfg["trainer"] != "local" or cfg["eval"].get("apply_chat_template"):
            why = f"models {other} are not tiny ones" if other else "it scores the local trainer's tiny models only"
            fail(["eval", "backend"], f"bandpo-tiny scores the suite's tiny Llamas without a chat template: {why} "
                                      "(use hf)")  # fmt: skip


def _check_models(cfg: Mapping[str, Any], data_ids: Mapping[str, Mapping[str, Any]]) -> None:
    """A probe block belongs to a tiny-math data set; a model's data set exists, and a tiny model's is tiny-math."""
    for i, d in enumerate(cfg["data"]):
        if d.get("probe") is not None and d["source"] != "tiny-math":
            fail(["data", i, "probe"], "a probe block needs source tiny-math", _entry_label(cfg, "data", i))
    for i, m in enumerate(cfg["models"]):
        if m.get("data") is not None and m["data"] not in data_ids:
            fail(["models", i, "data"], f"unknown data set {m['data']!r}; defined: {', '.join(data_ids)}")
        if m["source"] == "tiny" and data_ids[model_data(cfg, m)]["source"] != "tiny-math":
            where = ["models", i, "data"] if m.get("data") else ["train_data", 0]
            fail(where, "tiny models are pretrained on a tiny-math data set (their data, default train_data[0])",
                 _entry_label(cfg, "models", i))  # fmt: skip


def _check_rules_and_resources(cfg: Mapping[str, Any], root: str | os.PathLike) -> None:
    """``include_rules`` files exist; every threaded rule has at least ``threads`` CPUs; the local trainer reads one
    data set."""
    for i, path in enumerate(cfg["include_rules"]):
        full = Path(root, path)  # an absolute path stays itself
        if not full.is_file():
            fail(["include_rules", i], f"rule file not found: {full}")
    for rule in THREADED_RULES:
        cpus = job_resources(cfg, rule).get("cpus_per_task")
        if cpus is not None and cpus < cfg["threads"]:
            where = rule if "cpus_per_task" in cfg["resources"].get(rule, {}) else "default"
            fail(
                ["resources", where, "cpus_per_task"],
                f"{cpus} < threads ({cfg['threads']}): rule {rule} runs that many",
            )
    if cfg["trainer"] == "local" and len(cfg["train_data"]) != 1:
        fail(["train_data"], "the local trainer (bandpo.train.loop --data DIR) takes exactly one data set")


def _check_retired_keys(cfg: dict[str, Any]) -> None:
    """A key the config format no longer has, with what replaced it (before the schema's "unknown key"). An empty
    ``verl: {}`` (the default the old format wrote into every resolved config, e.g. a published provenance.json's)
    is dropped: it set nothing."""
    places = [(["verl"], cfg)] + [
        ([key, i, "verl"], item) for key in ("models", "methods") for i, item in enumerate(cfg.get(key) or [])
        if isinstance(item, dict)
    ]  # fmt: skip
    for path, mapping in places:
        if mapping.get("verl") == {}:
            del mapping["verl"]
        elif "verl" in mapping:
            fail(path, "verl's settings moved under train: (one key for both trainers: the shared protocol and the "
                       "configured trainer's own fields)")  # fmt: skip


def _registry_fingerprint(cfg: Mapping[str, Any], root: str | os.PathLike) -> str:
    """Hash of the completed config and of the bandpo sources (size, mtime): the registries' answer cannot change
    unless one of them does. Computed without importing bandpo (no torch import)."""

    h = hashlib.sha256(json.dumps(cfg, sort_keys=True).encode())
    spec = importlib.util.find_spec("bandpo")
    package_dirs = (spec.submodule_search_locations or []) if spec else []
    sources = [f for loc in package_dirs for f in sorted(Path(loc).rglob("*.py"))]
    sources += [p for spec in cfg.get("method_modules", []) if (p := method_module_path(spec, root)) is not None]
    for f in sources:
        st = f.stat()
        h.update(f"{f}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:32]


def check_registries(cfg: Mapping[str, Any], root: str | os.PathLike = ".") -> None:
    """Model sizes, method entries and sequential designs against the bandpo registries. The method registry imports
    torch and the design's boundaries scipy (seconds), so they are imported here, when a config is checked that was
    not checked unchanged before (`validate_config`'s cache), and not by every Snakemake start."""

    for i, m in enumerate(cfg["models"]):
        if m["source"] == "tiny" and m["size"] not in SIZES:
            fail(["models", i, "size"], f"unknown tiny model size {m['size']!r}; known: {', '.join(sorted(SIZES))}",
                 _entry_label(cfg, "models", i))  # fmt: skip

    # the probe's data design (bandpo.data.tiny_math.ProbeSpec checks kinds, levels, last digit, decoy share)
    for i, d in enumerate(cfg["data"]):
        label = _entry_label(cfg, "data", i)
        if d["source"] != "tiny-math":  # tiny-math's own options on a real data set
            for key in ("kinds", "levels", "probe"):
                if d.get(key) is not None:
                    fail(["data", i, key], f"a tiny-math option; this data set's source is {d['source']}", label)
            if d.get("prompt_format", "tiny") != "tiny":
                fail(["data", i, "prompt_format"], f"a tiny-math option; this data set's source is {d['source']}",
                     label)  # fmt: skip
        if d.get("probe") is not None:
            if d.get("prompt_format", "tiny") != "tiny":
                fail(["data", i, "prompt_format"], "the mechanism probe's variant has the tiny prompt format only",
                     label)  # fmt: skip
            try:
                ProbeSpec.from_dict(d["probe"])
            except (ValueError, TypeError) as e:
                fail(["data", i, "probe"], str(e), label)

    # methods of the user's own modules, then the method entries: the registry validates names and parameters
    from bandpo import methods  # imports torch: see the docstring

    for i, spec in enumerate(method_module_specs(cfg, root) if cfg.get("method_modules") else []):
        try:
            methods.load_method_modules([spec], root=root)
        except (ImportError, ValueError) as e:
            fail(["method_modules", i], str(e))

    # each sequential primary's design: its last look's boundaries meet within n_max at the planning SD
    from bandpo.stats.design import SequentialDesign  # imports scipy: see the docstring

    for pair in sequential_pairs(cfg):
        try:
            SequentialDesign(**design_settings(cfg, pair["experiment"], pair["model"]))
        except ValueError as e:
            fail(["experiments", pair["experiment"], "primary", "sequential"], f"on {pair['model']}: {e}")

    for i, entry in enumerate(cfg["methods"]):
        if entry.get("external"):
            continue  # trained by its own rule: the method is a label, not a registry name
        label = _entry_label(cfg, "methods", i)
        try:
            requires = methods.get_method(entry["method"]).config_cls.requires
        except ValueError as e:
            fail(["methods", i, "method"], str(e), label)
        if requires and cfg["trainer"] == "verl":
            fail(["methods", i, "method"], f"{entry['method']} requires the token input(s) {list(requires)}, which "
                 "verl's policy loss does not receive: train it with trainer: local", label)  # fmt: skip
        try:
            methods.make_config(entry["method"], entry["params"])
        except (ValueError, TypeError) as e:
            m = _PARAM_IN_MESSAGE.search(str(e))
            fail(["methods", i, "params"] + ([m.group(1)] if m else []), str(e), label)


def _check_train_levels(cfg: Mapping[str, Any]) -> None:
    """Each ``train:`` mapping (top level, per model, per method entry, per experiment) against the trainer's
    settings dataclass: names (with a did-you-mean hint) and types, the error at the key's own path. The ranges and
    the settings of each run as merged are checked once, when the run plan builds the runs
    (`bandpo.plan.runs.Plan`)."""
    verl = cfg["trainer"] == "verl"
    schema, fixed = (VerlRun, VERL_RUN_FIELDS) if verl else (TrainConfig, RUN_FIELDS)
    levels = [(["train"], cfg.get("train") or {}, "")]
    for key in ("models", "methods"):
        for i, item in enumerate(cfg[key]):
            levels.append(([key, i, "train"], item.get("train") or {}, _entry_label(cfg, key, i)))
    levels += [(["experiments", x, "train"], xp.get("train") or {}, "") for x, xp in cfg["experiments"].items()]
    for path, settings, label in levels:
        for key, value in settings.items():
            if key == "grader_mode":
                fail(path + [key], "set the grader once, as grader.mode (it also grades evaluation)", label)
            if key in fixed:
                fail(path + [key], f"training setting {key!r} is set by the workflow itself, not by train:", label)
            try:
                check_fields({key: value}, schema, "training setting")
            except ValueError as e:
                fail(path + [key], str(e), label)


def complete_experiments(cfg: dict[str, Any]) -> None:
    """Fill ``cfg["experiments"]`` (``main`` always present, every default filled in), check the references and
    the primary pair's ``primary.seeds`` (a superset of the experiment's seeds; `ConfigError`), and apply ``only``
    (keep the named experiments; nothing is published then)."""
    data_ids = by_id(cfg["data"])
    model_ids = by_id(cfg["models"])
    entry_ids = by_id(cfg["methods"])
    given = cfg.get("experiments") or {}
    main_models = [m["id"] for m in cfg["models"] if model_data(cfg, m) == cfg["train_data"][0]]
    out: dict[str, dict[str, Any]] = {}
    for xp_id in [MAIN] + [x for x in given if x != MAIN]:
        xp = dict(given.get(xp_id) or {})
        where = ["experiments", xp_id]
        if xp_id != MAIN and cfg["trainer"] != "local":
            fail(where, "experiments other than main need the local trainer (trainer: local)")
        if xp_id == MAIN:  # the sweep itself (a completed config repeats its values: validation is idempotent)
            sweep = {"data": cfg["train_data"][0], "models": main_models, "methods": [e["id"] for e in cfg["methods"]],
                     "seeds": list(cfg["seeds"]), "train": {}, "eval_tasks": cfg["eval"]["tasks"]}  # fmt: skip
            for key, value in sweep.items():
                if key in xp and xp[key] != value:
                    fail(where + [key], "main is the sweep itself: set the top-level key instead")
        xp.setdefault("description", "")
        xp.setdefault("data", cfg["train_data"][0])
        xp.setdefault("models", main_models if xp_id == MAIN else list(out[MAIN]["models"]))
        xp.setdefault("methods", [e["id"] for e in cfg["methods"] if xp_id == MAIN or not e.get("external")])
        xp.setdefault("seeds", list(cfg["seeds"]))
        xp.setdefault("train", {})
        xp.setdefault("base", cfg["eval"]["base"])
        xp.setdefault("eval_tasks", [dict(t) for t in cfg["eval"]["tasks"]])
        if xp["data"] not in data_ids:
            fail(where + ["data"], f"unknown data set {xp['data']!r}; defined: {', '.join(data_ids)}")
        if xp_id != MAIN and data_ids[xp["data"]]["source"] != "tiny-math":
            fail(where + ["data"], f"data set {xp['data']!r}: experiments train on a tiny-math data set")
        if not xp["models"]:
            fail(where + ["models"], "no model (main: every model pretrained on train_data[0])")
        for i, m in enumerate(xp["models"]):
            if m not in model_ids:
                fail(where + ["models", i], f"unknown model {m!r}; defined: {', '.join(model_ids)}")
        for i, e in enumerate(xp["methods"]):
            if e not in entry_ids:
                fail(where + ["methods", i], f"unknown method entry {e!r}; defined: {', '.join(entry_ids)}")
            if xp_id != MAIN and entry_ids[e].get("external"):
                fail(where + ["methods", i], f"entry {e!r} is external: only main runs external entries")
        for i, t in enumerate(xp["eval_tasks"]):
            if t["data"] not in data_ids:
                fail(where + ["eval_tasks", i, "data"], f"unknown data set {t['data']!r}")
            if not (TASKS_DIR / f"{t['task']}.yaml").is_file():
                fail(where + ["eval_tasks", i, "task"], f"no lm-eval task YAML {t['task']}.yaml in {TASKS_DIR}")
        tasks = [t["task"] for t in xp["eval_tasks"]]
        if len(set(tasks)) != len(tasks):
            fail(where + ["eval_tasks"], f"a task is listed twice: {tasks}")
        for key in ("compare", "entropy_compare", "clip_compare"):
            for i, e in enumerate((xp.get("primary") or {}).get(key) or []):
                if e not in xp["methods"]:
                    fail(where + ["primary", key, i], f"entry {e!r} is not among the experiment's methods")
        _check_primary(xp, where)
        for i, e in enumerate(xp["methods"]):
            if not cell_models(cfg, xp, e):
                fail(where + ["methods", i], f"entry {e!r} runs on none of the experiment's models {xp['models']}"
                     f" (its models: {entry_ids[e]['models']})")  # fmt: skip
            own, pair = entry_ids[e].get("seeds"), e in ((xp.get("primary") or {}).get("compare") or ())
            if own is not None and (pair or not set(own) & set(xp["seeds"])):
                fail(["methods", list(entry_ids).index(e), "seeds"], f"entry {e!r} is in the primary pair of "
                     f"experiment {xp_id!r}: its seeds are the pair's" if pair else f"entry {e!r}'s seeds {own} "
                     f"share none with experiment {xp_id!r}'s {xp['seeds']}: it would run no seed there")  # fmt: skip
        out[xp_id] = xp
    _check_axes(cfg, out)
    if cfg.get("only"):
        out = _apply_only(cfg, out)
    cfg["experiments"] = out
    for xp_id, xp in out.items():
        xp["reuse"] = reused_entries(cfg, xp_id)
    _check_eval_rule_names(cfg)


def _apply_only(cfg: dict[str, Any], out: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The experiments ``only`` names (an axis: all its cells; a selection needs its axis named too), and the axes
    whose cells all remain (in ``cfg``); a part of the DAG publishes nothing."""
    axes = cfg["axes"]
    named = [x.strip() for x in str(cfg["only"]).split(",") if x.strip()]
    wanted = [c for x in named for c in (axes[x]["cells"] if x in axes else [x])]  # an axis: all its cells
    unknown = [x for x in wanted if x not in out]
    if unknown or not wanted:
        fail(["only"], f"unknown experiment(s) {unknown or cfg['only']!r}; defined: {', '.join([*out, *axes])}")
    for x in wanted:
        sel = out[x].get("select")
        if sel and not set(axes[sel["axis"]]["cells"]) <= set(wanted):
            fail(["only"], f"{x!r} selects from axis {sel['axis']!r}: name it too (only={sel['axis']},{x})")
    out = {x: out[x] for x in out if x in wanted}
    cfg["axes"] = {a: v for a, v in axes.items() if set(v["cells"]) <= set(out)}  # axes with all their cells
    for xp in out.values():
        if xp.get("axis") is not None and xp["axis"] not in cfg["axes"]:
            del xp["axis"]
    if cfg["publish_dir"] == "results":
        cfg["publish"] = False  # a part of the DAG never overwrites the published page
    return out


def _check_primary(xp: Mapping[str, Any], where: list[Any]) -> None:
    """An experiment's ``primary`` beyond its entries: ``seeds`` (the primary pair's) need ``compare`` and hold the
    experiment's own seeds (main's: the top-level ``seeds``); a ``margin`` mapping names models of the experiment."""
    primary = xp.get("primary") or {}
    if "seeds" in primary:
        if not primary.get("compare"):
            fail(where + ["primary", "seeds"], "the seeds of the primary pair need primary.compare (the two entries "
                 "that run them)")  # fmt: skip
        missing = [s for s in xp["seeds"] if s not in primary["seeds"]]
        if missing:
            own = "the top-level seeds" if where[-1] == MAIN else "the experiment's seeds"
            fail(where + ["primary", "seeds"], f"{primary['seeds']} must contain {own} {xp['seeds']} (missing "
                 f"{missing}): the primary pair runs more seeds than the other entries, never others")  # fmt: skip
    for entries, margin in (("entropy_compare", "entropy_margin"), ("clip_compare", "clip_margin")):
        if primary.get(entries) and primary.get(margin) is None:
            fail(where + ["primary", entries], f"primary.{entries} compares at primary.{margin}: declare it")
    for key in ("margin",):
        if isinstance(primary.get(key), Mapping):
            _check_models_named(primary[key], xp, where + ["primary", key])
    design = primary.get("sequential")
    if design is not None:
        at = where + ["primary", "sequential"]
        if primary.get("exploratory"):
            fail(at, "an exploratory primary gives no verdict: no sequential design beside primary.exploratory")
        if not primary.get("compare") or "margin" not in primary:
            fail(at, "a sequential design decides primary.compare against primary.margin: set both")
        for key in ("n_max", "planning_sd", "alpha", "beta"):
            if isinstance(design[key], Mapping):
                _check_models_named(design[key], xp, at + [key])
                missing = [m for m in xp["models"] if m not in design[key]]
                if missing:
                    fail(at + [key], f"no value for model(s) {missing}")
        seeds = primary.get("seeds") or xp["seeds"]
        n_max = design["n_max"] if isinstance(design["n_max"], Mapping) else {m: design["n_max"] for m in xp["models"]}
        if any(n % design["k"] for n in n_max.values()) or len(seeds) != max(n_max.values()):
            fail(at + ["n_max"], f"{design['n_max']} must be multiples of k = {design['k']}, the largest the number "
                 f"of the pair's seeds (primary.seeds, in look order: {len(seeds)} given)")  # fmt: skip


def _check_models_named(mapping: Mapping[str, Any], xp: Mapping[str, Any], where: list[Any]) -> None:
    for model in mapping:
        if model not in xp["models"]:
            fail(where + [model], f"model {model!r} is not among the experiment's models {xp['models']}")


def _check_eval_rule_names(cfg: Mapping[str, Any]) -> None:
    """Every evaluation rule of the DAG has a name of its own (`bandpo.plan.sweep.eval_rule_clash`)."""
    clash = eval_rule_clash(cfg)
    if clash:
        fail(["experiments", clash[0]], f"its evaluation rule would be named {clash[1]!r}, the name of a rule of "
             f"experiment {clash[2]!r}: rename the experiment")  # fmt: skip


def _check_axes(cfg: dict[str, Any], experiments: Mapping[str, Mapping[str, Any]]) -> None:
    """Axes name existing cells that set the axis key, in increasing value; each cell knows its axis; a `select`
    names an axis and one of its entries."""
    axes = cfg.setdefault("axes", {})
    for axis_id, axis in axes.items():
        where = ["axes", axis_id]
        axis.setdefault("label", axis["key"])
        values = []
        for i, cell in enumerate(axis["cells"]):
            if cell == MAIN or cell not in experiments:
                fail(where + ["cells", i], f"unknown experiment {cell!r} (a cell is an experiment other than main)")
            xp = experiments[cell]
            if axis["key"] not in xp["train"]:
                fail(["experiments", cell, "train"], f"a cell of axis {axis_id!r} sets {axis['key']} in its train")
            if xp.get("axis", axis_id) != axis_id:
                fail(["experiments", cell, "axis"], f"listed as a cell of axis {axis_id!r}, not {xp['axis']!r}")
            xp["axis"] = axis_id
            values.append(xp["train"][axis["key"]])
        if any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in values) or values != sorted(set(values)):
            fail(where + ["cells"], f"the cells' {axis['key']} values must be numbers in increasing order: {values}")
        control = (axis.get("primary") or {}).get("control")
        for cell in axis["cells"]:
            if control is not None and control not in experiments[cell]["methods"]:
                fail(where + ["primary", "control"], f"the control {control!r} is not an entry of cell {cell!r}")
    for xp_id, xp in experiments.items():
        if xp.get("axis") is not None and xp["axis"] not in axes:
            fail(["experiments", xp_id, "axis"], f"unknown axis {xp['axis']!r}; defined: {', '.join(axes) or 'none'}")
        if xp.get("axis") is not None and xp_id not in axes[xp["axis"]]["cells"]:
            fail(["experiments", xp_id, "axis"], f"not among the cells of axis {xp['axis']!r}")
        sel = xp.get("select")
        if sel is None:
            continue
        if sel["axis"] not in axes:
            fail(["experiments", xp_id, "select", "axis"], f"unknown axis {sel['axis']!r}")
        cells = axes[sel["axis"]]["cells"]
        missing = [c for c in cells if sel["entry"] not in experiments[c]["methods"]]
        if missing:
            fail(["experiments", xp_id, "select", "entry"], f"entry {sel['entry']!r} is not in cell(s) {missing}")
        if not any(experiments[c]["base"] for c in cells):
            fail(["experiments", xp_id, "select"], f"the rule compares with the base model: a cell of axis "
                 f"{sel['axis']!r} needs base: true (main's base row is reused where the settings match)")  # fmt: skip
        if axes[sel["axis"]]["key"] in xp["train"]:
            fail(["experiments", xp_id, "train"], f"{axes[sel['axis']]['key']} is chosen by select, not set here")
