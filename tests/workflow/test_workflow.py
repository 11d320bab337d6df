"""The Snakemake workflow: config validation (each bad case stops before any job, naming the field), the job matrix of
every profile (dry runs), and the smoke DAG end to end with the no-op rerun and the add-one-method-entry checks.

Every snakemake call runs in a temporary working directory (``-d``), so nothing is written into the repository.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import snakemake

from bandpo import study
from bandpo.plan import run_lock, sweep, validate
from bandpo.plan.runs import Plan
from bandpo.verl import command
from bandpo.verl.spec import read_spec as read_verl_spec

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = {name: ROOT / "config" / f"{name}.yaml" for name in ("config", "smoke", "gpu")}

pytestmark = pytest.mark.skipif(importlib.util.find_spec("snakemake") is None, reason="snakemake is not installed")


def read_config(name: str) -> dict:
    return yaml.safe_load(CONFIGS[name].read_text())


def verl_line(spec: Path) -> str:
    """The shell line verl's job runs for a run's spec file (``python -m bandpo.verl.launch --spec`` prints it)."""
    return command.shell_command(read_verl_spec(spec))


def job_counts(output: str) -> dict[str, int]:
    """The "Job stats" table of a snakemake (dry) run."""
    counts: dict[str, int] = {}
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^job\s+count\s*$", line):
            for row in lines[i + 2 :]:
                m = re.match(r"^(\S+)\s+(\d+)\s*$", row)
                if not m:
                    break
                counts[m.group(1)] = int(m.group(2))
            break
    counts.pop("total", None)
    return counts


def write_config(tmp_path: Path, cfg: dict, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


# ----------------------------------------------------------------------------------------------------------------
# config validation


@pytest.mark.parametrize("name", ["config", "smoke", "gpu"])
def test_shipped_configs_are_valid(name):
    cfg = validate.validate_config(read_config(name))
    assert cfg["profile"] == {"config": "embedded"}.get(name, name)
    assert cfg["eval"]["base"] is True  # the base model is scored (step-0 row) in every profile


def test_defaults_are_filled_in():
    raw = read_config("smoke")
    raw.pop("trainer")
    raw.pop("offline")
    raw["eval"].pop("group_seeds")
    cfg = validate.validate_config(raw)
    assert cfg["trainer"] == "local" and cfg["offline"] is True and cfg["eval"]["group_seeds"] is True
    assert cfg["methods"][0]["params"] == {} and cfg["models"][0]["train"] == {}
    assert "trainer" not in raw  # the caller's config is not modified


def test_group_size_16_at_the_same_rollout_count_is_a_config_setting():
    """Group size 16 at the default rollout count (TrainConfig: 32 prompts x 8 = 16 x 16 = 256 completions per
    step) needs no code: a method entry or an experiment sets train: {samples_per_prompt: 16, prompts_per_step: 16};
    the config validates and the run plan's specs carry both."""
    from bandpo.train.loop import TrainConfig

    default = TrainConfig()
    assert default.prompts_per_step * default.samples_per_prompt == 16 * 16
    g16 = {"samples_per_prompt": 16, "prompts_per_step": 16}
    raw = read_config("config")
    raw["methods"].append({"id": "grpo_g16", "method": "grpo", "train": dict(g16)})  # an entry of main
    raw["experiments"]["group16"] = {**raw["experiments"]["random-reward"], "train": {"steps": 8, **g16}}
    plan = Plan(validate.validate_config(raw))
    entry = plan.train_spec("tiny-s", "grpo_g16", 0)
    assert entry.samples_per_prompt == entry.prompts_per_step == 16 and entry.steps == 64
    assert plan.train_spec("tiny-s", "grpo", 0).steps == 64 and "samples_per_prompt" not in plan.config["train"]
    xp = plan.train_spec("tiny-s", "bandpo_kl@group16", 0)
    assert (xp.samples_per_prompt, xp.prompts_per_step, xp.steps) == (16, 16, 8)
    bad = {**raw, "methods": [*raw["methods"][:-1], {"id": "grpo_g16", "method": "grpo",
                                                     "train": {"samples_per_prompt": 1}}]}  # fmt: skip
    with pytest.raises(validate.ConfigError, match=r"the run tiny-s/grpo_g16/seed0\): .*samples_per_prompt"):
        Plan(validate.validate_config(bad))


@pytest.mark.parametrize("name", ["config", "smoke", "gpu"])
def test_validation_is_idempotent(name):
    """A completed config (experiments filled in) validates to itself: jobs that re-read it see the same DAG."""
    cfg = validate.validate_config(read_config(name))
    assert validate.validate_config(cfg) == cfg
    only = validate.validate_config({**read_config(name), "only": "main"})
    assert validate.validate_config(only) == only


def test_embedded_config_matrix():
    cfg = validate.validate_config(read_config("config"))
    models = study.by_id(cfg["models"])
    assert [models[m]["size"] for m in cfg["experiments"][study.MAIN]["models"]] == ["tiny-s", "tiny-m"]
    # model size stays an axis of the main comparison: the primary pair trains on every size
    main = cfg["experiments"][study.MAIN]
    for entry in main["primary"]["compare"]:
        assert sweep.cell_models(cfg, main, entry) == main["models"]
    # the controls: experiments of the same DAG; the probe: its own config (settled); rules fixed in the config
    rr = cfg["experiments"]["random-reward"]
    probe_cfg = validate.validate_config(yaml.safe_load((ROOT / "config" / "probe.yaml").read_text()))
    probe = probe_cfg["experiments"]["probe"]
    assert rr["train"]["reward"] == "random" and len(rr["seeds"]) >= 3 and rr["models"] == ["tiny-s"]
    rr_methods = {e["id"]: e["method"] for e in cfg["methods"] if e["id"] in rr["methods"]}
    assert rr_methods == {"grpo": "grpo", "bandpo_kl": "bandpo"}  # the primary pair (cut to fit the budget)
    assert len(probe["seeds"]) >= 3 and {"grpo", "bandpo_kl"} <= set(probe["methods"])
    assert probe["primary"]["compare"] == ["bandpo_kl", "grpo"] and probe["primary"]["task"] == "tiny_math_probe"
    (probe_model,) = probe["models"]
    probe_models = study.by_id(probe_cfg["models"])
    assert study.by_id(probe_cfg["data"])[probe_models[probe_model]["data"]]["probe"]
    assert probe["train"]["probe_every"] > 0 and probe["primary"]["demoted"]
    assert {t["subset"] for t in probe["eval_tasks"]} == {"probe", "rest"}
    # rules fixed before any run: each experiment's, or for the cells of a design axis the axis's
    assert all(v.get("axis") or v["primary"]["rule"] for v in cfg["experiments"].values())
    assert all(a["primary"]["rules"] for a in cfg["axes"].values())
    entries = {e["id"]: (e["method"], e["params"]) for e in cfg["methods"]}
    assert {m for m, _ in entries.values()} >= {"grpo", "clip_higher", "dcpo", "bandpo"}
    assert {p.get("divergence") for m, p in entries.values() if m == "bandpo"} == {"kl", "tv", "chi2"}
    assert "relax: true" in CONFIGS["config"].read_text()  # the relaxed BandPO-KL ablation, one line to enable
    assert len(cfg["seeds"]) >= 3
    assert cfg["offline"] is True and cfg["eval"]["backend"] == "bandpo-tiny"


def _smoke_without_primary_seeds() -> dict:
    """config/smoke.yaml with an entry outside the primary pairs (clip_higher, in main and in the separation run),
    the seeds these tests count on (main 0-1, separation 2, a base model per seed), no primary.seeds, no min_gain, and
    main's pair at a single look (no sequential design: its looks need the pair's seeds of their own)."""
    raw = read_config("smoke")
    raw["methods"].append({"id": "clip_higher", "method": "clip_higher"})
    raw["seeds"], raw["base_per_seed"] = [0, 1], True
    sep = raw["experiments"]["separation"]
    sep["methods"], sep["seeds"] = ["grpo", "bandpo_kl", "clip_higher"], [2]
    sep["select"].pop("min_gain", None)
    for x in ("main", "separation"):
        raw["experiments"][x]["primary"].pop("seeds", None)
        raw["experiments"][x]["primary"].pop("sequential", None)
    return raw


def _with_primary_seeds(raw: dict, main_seeds: list[int], separation_seeds: list[int]) -> dict:
    """A config with seeds of their own for the primary pairs of main and of the separation run."""
    raw = copy.deepcopy(raw)
    raw["experiments"]["main"]["primary"]["seeds"] = main_seeds
    raw["experiments"]["separation"]["primary"]["seeds"] = separation_seeds
    return raw


def test_primary_pair_runs_seeds_of_its_own():
    """primary.seeds: both compare entries train and score those seeds on every model of the experiment they run
    on; the other entries and the base models keep the experiment's seeds; the new keys of primary and select
    validate (and validation stays idempotent)."""
    from bandpo.plan import budget

    raw = _smoke_without_primary_seeds()
    plain = validate.validate_config(raw)
    assert plain["experiments"]["separation"]["select"]["min_gain"] == 0  # the default
    raw = _with_primary_seeds(raw, [0, 1, 2, 3], [2, 3, 4])
    raw["experiments"]["main"]["primary"].update(margin={"smoke-tiny": 2.0}, entropy_margin=0.05)
    raw["experiments"]["probe"]["primary"].update(margin=3, demoted="not decidable at an affordable seed count")
    raw["experiments"]["separation"]["select"]["min_gain"] = 1.0
    cfg = validate.validate_config(raw)
    assert validate.validate_config(cfg) == cfg
    xps = cfg["experiments"]
    pairs = {"main": [0, 1, 2, 3], "separation": [2, 3, 4]}
    for x, seeds in pairs.items():
        pair = xps[x]["primary"]["compare"]
        assert [study.slot_seeds(cfg, x, e) for e in pair] == [seeds, seeds]
        assert study.slot_seeds(cfg, x, "clip_higher") == study.slot_seeds(cfg, x, study.BASE_ENTRY) == xps[x]["seeds"]
    assert xps["main"]["seeds"] == cfg["seeds"] == [0, 1] and xps["separation"]["seeds"] == [2]
    assert study.slot_seeds(cfg, "probe", "bandpo_kl") == xps["probe"]["seeds"]  # no primary.seeds there
    # the runs: the pairs' extra seeds on every model the pair runs on, nothing else
    extra = {(m, study.slot_id(x, e), s) for x, seeds in pairs.items() for e in xps[x]["primary"]["compare"]
             for m in sweep.cell_models(cfg, xps[x], e) for s in seeds if s not in xps[x]["seeds"]}  # fmt: skip
    assert len(extra) == 2 * 2 + 2 * 2  # 2 entries x 2 seeds, one model, in each experiment
    assert set(sweep.runs(cfg)) == set(sweep.runs(plain)) | extra and len(sweep.runs(cfg)) == len(set(sweep.runs(cfg)))
    # scoring: the pair in a rule of its own, whose jobs score its seeds (and the budget counts them)
    groups = sweep.eval_seed_groups(cfg, "main")
    assert [(g["primary"], g["seeds"], sorted(g["slots"])) for g in groups] == [
        (False, [0, 1], ["base", "clip_higher"]),
        (True, [0, 1, 2, 3], ["bandpo_kl", "grpo"]),
    ]
    jobs, before = sweep.expected_jobs(cfg), sweep.expected_jobs(plain)
    assert jobs["eval_group_primary"] == jobs["eval_group_separation_primary"] == 2
    assert jobs["eval_group"] + jobs["eval_group_primary"] == before["eval_group"]
    assert jobs["train"] == before["train"] + len(extra)
    scored = [sum(j["seeds"] for j in budget.jobs(c) if j["kind"] == "eval") for c in (cfg, plain)]
    assert scored[0] == scored[1] + len(extra)


def test_budget_scales_scoring_by_the_test_problems_and_reads_an_overlay():
    """The budget of config/real-lm-next.yaml (an overlay) from the published pilot's table: a downloaded model is no
    build job, and a scoring group costs in proportion to seeds x test problems (500 against the pilot's 48), so the
    larger test set is priced before its runs."""
    from bandpo.plan import budget

    rules, measured_cfg = budget.read_measured(ROOT / "results" / "real-lm")
    model = budget.CostModel(rules, measured_cfg)
    pilot = budget.load_config(ROOT / "config" / "real-lm-compare.yaml", root=ROOT)
    nxt = budget.load_config(ROOT / "config" / "real-lm-next.yaml", root=ROOT)
    jobs = {name: budget.jobs(c) for name, c in (("pilot", pilot), ("next", nxt))}
    assert not any(j["kind"] == "build" for js in jobs.values() for j in js)
    evals = {name: [j for j in js if j["kind"] == "eval"] for name, js in jobs.items()}
    assert {j["problems"] for j in evals["pilot"]} == {48} and {j["problems"] for j in evals["next"]} == {500}
    cost = {name: sum(model.cost(j) for j in js) for name, js in evals.items()}
    seeds = {name: sum(j["seeds"] for j in js) for name, js in evals.items()}
    assert cost["next"] / cost["pilot"] == pytest.approx(500 * seeds["next"] / (48 * seeds["pilot"]))
    assert sum(model.cost(j) for j in evals["pilot"]) == pytest.approx(
        rules["lm-eval group smollm2-135m"]["wall_s_sum"]
    )


def test_budget_seeds_what_if_keeps_the_primary_pairs_extra_seeds(tmp_path):
    """`budget plan --seeds N`: the pair keeps as many seeds beyond its experiment's as the config gives it."""
    from bandpo.plan import budget

    path = write_config(tmp_path, _with_primary_seeds(_smoke_without_primary_seeds(), [0, 1, 2], [2, 3, 4]))
    cfg = budget.load_config(path, seeds=4, root=ROOT)
    assert cfg["seeds"] == list(range(4)) and study.slot_seeds(cfg, "main", "grpo") == list(range(5))
    assert study.slot_seeds(cfg, "separation", "grpo") == [2, 3, 4]  # seeds of its own: untouched
    cfg = budget.load_config(path, only="separation,offpolicy", seeds=3, root=ROOT)
    assert study.slot_seeds(cfg, "separation", "bandpo_kl") == list(range(5))


def bad(mutate):
    cfg = copy.deepcopy(read_config("smoke"))
    mutate(cfg)
    return cfg


def _set(path, value):
    """A mutation of the smoke config: set the value at ``path`` (keys and list indices), creating dicts."""

    def mutate(cfg):
        node = cfg
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(node, dict) else node[key]
        node[path[-1]] = value

    return mutate


def _drop(key):
    return lambda cfg: cfg.pop(key)


def _duplicate_first_entry(cfg):
    cfg["methods"].append(dict(cfg["methods"][0]))


BAD_CASES = {  # case: (mutation of config/smoke.yaml, regex the error message must match)
    "unknown_method": (_set(["methods", 0, "method"], "grpoo"), r"methods\[0\]\.method .*'grpoo'.*did you mean 'grpo'"),
    "delta_zero": (_set(["methods", 1, "params", "delta"], 0), r"methods\[1\]\.params\.delta .*must be > 0"),
    "delta_negative": (_set(["methods", 1, "params", "delta"], -0.1), r"methods\[1\]\.params\.delta .*must be > 0"),
    "unknown_divergence": (
        _set(["methods", 1, "params", "divergence"], "hellinger2"),
        r"methods\[1\]\.params\.divergence .*'hellinger2' is not registered",
    ),
    "unknown_param": (_set(["methods", 0, "params", "eps_lo"], 0.1), r"methods\[0\]\.params\.eps_lo .*unknown"),
    "missing_models": (_drop("models"), r"config error at models: missing required key 'models'"),
    "empty_models": (_set(["models"], []), r"config error at models: .*(non-empty|too short)"),
    "hub_model_without_repo": (
        _set(["models"], [{"id": "m", "source": "hub"}]),
        r"models\[0\]\.repo_id: missing required key 'repo_id'",
    ),
    "unknown_model_size": (_set(["models", 0, "size"], "tiny-xl"), r"models\[0\]\.size .*'tiny-xl'"),
    "unknown_top_level_key": (_set(["sweeps"], 1), r"config error at sweeps: unknown key 'sweeps'"),
    "unknown_nested_key": (_set(["eval", "temprature"], 1.0), r"config error at eval\.temprature: unknown key"),
    "unknown_entry_key": (_set(["methods", 0, "parms"], {}), r"methods\[0\]\.parms: unknown key"),
    "duplicate_entry_id": (_duplicate_first_entry, r"methods\[2\]\.id: duplicate id 'grpo'"),
    "reserved_entry_id": (_set(["methods", 0, "id"], "base"), r"methods\[0\]\.id: 'base' is reserved"),
    "unknown_eval_data": (_set(["eval", "tasks", 0, "data"], "nope"), r"eval\.tasks\[0\]\.data: unknown data set"),
    "unknown_eval_task": (_set(["eval", "tasks", 0, "task"], "nope"), r"eval\.tasks\[0\]\.task: no lm-eval task"),
    "bad_seed": (_set(["seeds"], [0, -1]), r"config error at seeds\[1\]"),
    "train_typo": (_set(["train", "stpes"], 3), r"config error at train\.stpes: .*'stpes' \(did you mean 'steps'\?\)"),
    "model_train_bad_value": (
        _set(["models", 0, "train", "lr"], 0),
        r"models\[0\]\.train\.lr \(the run smoke-tiny/grpo/seed0\): lr: must be a finite number > 0",
    ),
    "entry_train_typo": (
        _set(["methods", 1, "train", "updates_per_stp"], 2),
        r"methods\[1\]\.train\.updates_per_stp \(entry 'bandpo_kl'\): .*did you mean 'updates_per_step'",
    ),
    "train_sets_a_run_field": (_set(["train", "seed"], 1), r"train\.seed: .*set by the workflow itself"),
    "experiment_unknown_model": (
        _set(["experiments", "probe", "models"], ["nope"]),
        r"experiments\.probe\.models\[0\]: unknown model 'nope'",
    ),
    "experiment_unknown_entry": (
        _set(["experiments", "probe", "methods"], ["grpo", "gpro"]),
        r"experiments\.probe\.methods\[1\]: unknown method entry 'gpro'",
    ),
    "experiment_train_typo": (
        _set(["experiments", "random-reward", "train", "rewrd"], "random"),
        r"experiments\.random-reward\.train\.rewrd: .*did you mean 'reward'",
    ),
    "experiment_bad_reward": (
        _set(["experiments", "random-reward", "train", "reward"], "coin"),
        r"experiments\.random-reward\.train\.reward \(the run smoke-tiny/grpo@random-reward/seed0\): reward: must be "
        r"one of grader, random",
    ),
    "experiment_primary_not_an_entry": (
        _set(["experiments", "probe", "primary", "compare"], ["bandpo_kl", "dcpo"]),
        r"experiments\.probe\.primary\.compare\[1\]: entry 'dcpo' is not among",
    ),
    "experiment_main_sets_models": (
        _set(["experiments", "main", "models"], ["smoke-tiny-probe"]),
        r"experiments\.main\.models: main is the sweep itself",
    ),
    "only_unknown": (_set(["only"], "probe,nope"), r"config error at only: unknown experiment"),
    "primary_seeds_not_a_superset": (
        _set(["experiments", "probe", "primary", "seeds"], [0, 5]),
        r"experiments\.probe\.primary\.seeds: \[0, 5\] must contain the experiment's seeds \[0, 1\] \(missing \[1\]\)",
    ),
    "primary_seeds_main_not_a_superset": (
        _set(["experiments", "main", "primary", "seeds"], [1, 2, 3]),
        r"experiments\.main\.primary\.seeds: .*must contain the top-level seeds \[0, 1\] \(missing \[0\]\)",
    ),
    "primary_seeds_without_compare": (
        _set(["experiments", "random-reward", "primary", "seeds"], [0, 1]),
        r"experiments\.random-reward\.primary\.seeds: the seeds of the primary pair need primary\.compare",
    ),
    "primary_seeds_too_few": (_set(["experiments", "probe", "primary", "seeds"], [0]), r"primary\.seeds: .*short"),
    "primary_margin_unknown_model": (
        _set(["experiments", "probe", "primary", "margin"], {"smoke-tiny": 2.0}),
        r"experiments\.probe\.primary\.margin\.smoke-tiny: model 'smoke-tiny' is not among the experiment's models",
    ),
    "primary_margin_not_positive": (
        _set(["experiments", "probe", "primary", "margin"], 0),
        r"experiments\.probe\.primary\.margin: 0 is less than or equal to the minimum of 0",
    ),
    "primary_margin_of_a_model_not_positive": (
        _set(["experiments", "probe", "primary", "margin"], {"smoke-tiny-probe": -1}),
        r"experiments\.probe\.primary\.margin\.smoke-tiny-probe: -1 is less than or equal to the minimum of 0",
    ),
    "eval_rule_name_clash": (
        lambda c: c["experiments"].update(random_reward=c["experiments"]["random-reward"]),
        r"experiments\.random_reward: its evaluation rule would be named 'eval_group_random_reward', the name of a "
        r"rule of experiment 'random-reward'",
    ),
    "select_min_gain_negative": (_set(["experiments", "separation", "select", "min_gain"], -1), r"select\.min_gain"),
    "probe_bad_kinds": (
        _set(["data", 1, "probe", "kinds"], ["mod"]),
        r"data\[1\]\.probe \(data set 'tiny-math-probe-smoke'\): probe\.kinds",
    ),
    "unknown_grader_mode": (_set(["grader", "mode"], "strict"), r"grader\.mode: 'strict' is not one of"),
    "method_module_missing": (
        _set(["method_modules"], ["tests/no_such_methods.py"]),
        r"method_modules\[0\]: method module 'tests/no_such_methods.py': file not found",
    ),
    "real_data_path_missing": (
        lambda c: c["data"].append({"id": "aime", "source": "real", "name": "aime-2024", "path": "/no/such.jsonl"}),
        r"config error at data\[2\]\.path \(data set 'aime'\): /no/such\.jsonl does not exist$",
    ),
    "real_data_without_path_or_download": (
        lambda c: c["data"].append({"id": "aime", "source": "real", "name": "aime-2024"}),
        r"config error at data\[2\] \(data set 'aime'\): no path, and download is off \(profile 'smoke'\): set "
        r"path to a local copy of HuggingFaceH4/aime_2024 in its format, or download: true$",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_config_is_rejected_naming_the_field(case):
    mutate, pattern = BAD_CASES[case]
    with pytest.raises(validate.ConfigError) as exc:
        Plan(validate.validate_config(bad(mutate)))  # as the Snakefile reads a config
    assert re.search(pattern, str(exc.value)), str(exc.value)


@pytest.mark.parametrize(
    "case",
    [
        "delta_zero",
        "unknown_divergence",
        "unknown_nested_key",
        "missing_models",
        "train_typo",
        "real_data_path_missing",
    ],
)
def test_bad_config_stops_snakemake_before_any_job(tmp_path, case):
    mutate, pattern = BAD_CASES[case]
    proc = snakemake(tmp_path / "wd", "-n", configfile=write_config(tmp_path, bad(mutate)))
    assert proc.returncode != 0
    assert re.search(pattern, proc.output), proc.output[-3000:]
    assert "Job stats" not in proc.output and "rule " not in proc.output  # no job was even planned
    assert not (tmp_path / "wd" / "results").exists() and not (tmp_path / "wd" / "resources").exists()


@pytest.mark.parametrize("case", ["syntax", "missing", "not_a_mapping"])
def test_a_bad_config_file_is_one_line_before_snakemake_reads_it(tmp_path, case):
    """Snakemake loads a --configfile before the Snakefile runs; the workflow profile checks it first
    (bandpo/plan/config_files.py): one line naming the file (line and column of a syntax error), no traceback, and
    not even the working folder created."""
    path = tmp_path / "cfg.yaml"
    texts = {"syntax": "profile: smoke\nseeds: [0, 1\nmodels: []\n", "not_a_mapping": "- profile: smoke\n"}
    if case in texts:
        path.write_text(texts[case])
    expected = {
        "syntax": f"Invalid config ({path}:3:7): YAML syntax error: expected ',' or ']', but got ':' (while parsing "
        "a flow sequence at line 2, column 8)",
        "missing": f"Invalid config ({path}): no such file",
        "not_a_mapping": f"Invalid config ({path}): not a mapping of config keys (the file holds a list)",
    }[case]
    proc = snakemake(tmp_path / "wd", "-n", configfile=path)
    assert proc.returncode == 1
    assert [line for line in proc.output.splitlines() if not line.startswith("Using workflow")] == [expected]
    assert not (tmp_path / "wd").exists()


TOY_SNAKEFILE = """
import os, uuid
from bandpo.core.failures import RUN_ENV

os.environ[RUN_ENV] = uuid.uuid4().hex  # as the project's Snakefile does, once per snakemake command

rule all:
    input: "bad.done", "killed.done", "offline.done"

rule job:
    output: "{name}.done"
    log: "{name}.log"
    shell: "python job.py {wildcards.name} {output} > {log} 2>&1"
"""
TOY_JOB = """
import os, signal, sys
from pathlib import Path
from bandpo.core.failures import run_job

def main():
    name, out = sys.argv[1:]
    starts = Path(name + ".starts")
    starts.write_text((starts.read_text() if starts.exists() else "") + "x")
    if name == "bad":  # the same inputs give the same error: printed once, not run again
        raise ValueError("its bounds violate lower <= 1 <= upper on 3 of 8 valid tokens")
    if len(starts.read_text()) == 1:  # the first start only: transient, retried
        if name == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        raise ConnectionError("connection reset by peer")
    Path(out).write_text("ok")
    return 0

raise SystemExit(run_job(main, "python job.py"))
"""


def test_snakemakes_retries_rerun_a_killed_job_but_not_a_deterministic_error(tmp_path):
    """bandpo.core.failures.run_job under real retries (--retries 2, as profiles/default sets): a job killed by SIGKILL
    and one whose network dropped are started again and finish; a ValueError is printed once, as one line, and the
    two retries end at once without running the job."""
    (tmp_path / "Snakefile").write_text(TOY_SNAKEFILE)
    (tmp_path / "job.py").write_text(TOY_JOB)
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", "--retries", "2", "--keep-going", "--show-failed-logs"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert (tmp_path / "killed.done").is_file() and (tmp_path / "offline.done").is_file()
    starts = {name: len((tmp_path / f"{name}.starts").read_text()) for name in ("bad", "killed", "offline")}
    assert starts == {"bad": 1, "killed": 2, "offline": 2}
    assert out.count("lower <= 1 <= upper") == 1
    assert re.search(r"^python job\.py: error: ValueError: its bounds violate lower <= 1 <= upper on 3 of 8 valid "
                     r"tokens \(ValueError raised at job\.py:\d+\)$", out, re.M), out[-3000:]  # fmt: skip
    retried = r"^python job\.py: not run again: its first attempt in this snakemake command failed with a deterministic"
    assert len(re.findall(retried, out, re.M)) == 2
    assert out.count("Traceback") == 1  # the ConnectionError's, retried as before


def test_a_deterministic_job_error_in_the_dag_is_printed_once(tmp_path):
    """The project's Snakefile and profile (retries: 2): a real data set whose rows lack the fields of its layout
    fails its job with one line, once; both retries say so in a line of their own."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"question": "1+1", "answer": "2"}\n')
    cfg = bad(lambda c: c["data"].append({"id": "math", "source": "real", "name": "math-l3-5", "path": str(rows)}))
    proc = snakemake(tmp_path / "wd", "--cores", "1", "resources/data/math/train.jsonl",
                     configfile=write_config(tmp_path, cfg))  # fmt: skip
    assert proc.returncode == 1
    error = (f"python -m bandpo.data: error: ValueError: math-l3-5: source row 0 ({rows}) has no field(s) 'problem', "
             "'solution', 'subject', 'level'")  # fmt: skip
    assert proc.output.count(error) == 1, proc.output[-3000:]
    assert proc.output.count("python -m bandpo.data: not run again:") == 2
    assert proc.output.count("Trying to restart job") == 2 and "Traceback" not in proc.output


# ----------------------------------------------------------------------------------------------------------------
# dry runs: the job matrix of each profile


def test_gpu_dry_run_lists_the_full_matrix(tmp_path):
    cfg = validate.validate_config(read_config("gpu"))
    proc = snakemake(tmp_path, "-n", "--quiet", "rules", configfile=CONFIGS["gpu"])
    assert proc.returncode == 0, proc.output[-3000:]
    counts = job_counts(proc.output)
    n_models, n_entries, n_seeds = len(cfg["models"]), len(cfg["methods"]), len(cfg["seeds"])
    assert (n_models, n_seeds) == (4, 3) and n_entries >= 7
    assert counts == sweep.expected_jobs(cfg)
    assert counts["train_verl"] == counts["merge_verl"] == n_models * n_entries * n_seeds
    assert counts["eval_run"] == n_models * (n_entries + 1) * n_seeds  # + the base models
    assert counts["model_hub"] == 4 and counts["data_real"] == 6 and counts["verl_data"] == 1


def test_gpu_dry_run_dynamic_sampling_rows(tmp_path):
    """The dapo and bandpo_kl_ds rows: one group of dynamic-sampling overrides (a YAML alias in config/gpu.yaml) in
    both verl commands; the authors' epochs, warmup and weight decay per row (docs/paper-protocol.md)."""
    raw = read_config("gpu")
    rows = {e["id"]: e for e in raw["methods"]}
    assert rows["dapo"]["train"]["extra_overrides"][0] is rows["bandpo_kl_ds"]["train"]["extra_overrides"][0]
    run = "results/gpu/runs/r1-distill-qwen-7b/{}/seed2/model/config.json"
    expected = {"dapo": ("token-mean", 10, 0.1, 20), "bandpo_kl_ds": ("seq-mean-token-mean", 0, 0.01, 24)}
    for entry, (agg, warmup, wd, epochs) in expected.items():
        proc = snakemake(tmp_path / entry, "-n", "-p", run.format(entry), configfile=CONFIGS["gpu"])
        assert proc.returncode == 0, proc.output[-3000:]
        spec = f"results/gpu/plan/train/r1-distill-qwen-7b/{entry}/seed2.json"
        assert f"python -m bandpo.verl.launch --spec {spec}" in proc.output
        line = verl_line(tmp_path / entry / spec)
        for key in ("enable=true", "metric=acc", "max_num_gen_batches=100"):
            assert f" algorithm.filter_groups.{key}" in line, (entry, key)
        assert f"actor_rollout_ref.actor.loss_agg_mode='\"'\"'{agg}'\"'\"'" in line
        assert f" actor_rollout_ref.actor.optim.lr_warmup_steps={warmup} " in line
        assert f" actor_rollout_ref.actor.optim.weight_decay={wd} " in line
        assert f" trainer.total_epochs={epochs} " in line
        assert ("reward.reward_manager.name=dapo" in line) == (entry == "dapo")


def test_gpu_dry_run_commands(tmp_path):
    """The verl command comes from bandpo.verl.command, the merge from verl.model_merger, scoring from lm-eval vllm."""
    targets = [
        "results/gpu/runs/qwen2.5-3b-instruct/bandpo_tv/seed1/model/config.json",
        "results/gpu/eval/qwen2.5-3b-instruct/bandpo_tv/seed1/aime24.json",
    ]
    proc = snakemake(tmp_path, "-n", "-p", *targets, configfile=CONFIGS["gpu"])
    assert proc.returncode == 0, proc.output[-3000:]
    spec = "results/gpu/plan/train/qwen2.5-3b-instruct/bandpo_tv/seed1.json"
    assert f"python -m bandpo.verl.launch --spec {spec}" in proc.output
    verl = verl_line(tmp_path / spec)
    eval_spec = json.loads((tmp_path / "results/gpu/plan/eval/qwen2.5-3b-instruct/bandpo_tv/seed1.json").read_text())
    out = proc.output + "\n" + verl
    assert "python -m verl.trainer.main_ppo" in out
    assert "actor_rollout_ref.actor.policy_loss.loss_mode='\"'\"'bandpo.bandpo'\"'\"'" in out
    assert 'BANDPO_METHOD_CONFIG=\'{"bandpo":{"cap":10.0,"delta":0.05,"divergence":"tv"' in out
    assert "bandpo.verl.merge --run-dir results/gpu/runs/qwen2.5-3b-instruct/bandpo_tv/seed1" in out
    assert "python -m bandpo.score --spec results/gpu/plan/eval/qwen2.5-3b-instruct/bandpo_tv/seed1.json" in out
    assert eval_spec["backend"] == "vllm" and eval_spec["apply_chat_template"] is True
    # the authors' grader (grader.mode) in verl's reward (keyword and Ray workers' env) and in lm-eval scoring; AMC23's
    # validation rows by the boxed MATH rule (grader.val_modes)
    assert "+reward.custom_reward_function.reward_kwargs.grader_mode='\"'\"'math-dapo-paper'\"'\"'" in out
    assert "+reward.custom_reward_function.reward_kwargs.grader_modes={amc-2023:'\"'\"'math-boxed'\"'\"'}" in out
    assert "BANDPO_GRADER_MODE=math-dapo-paper" in out
    eval_line = next(line for line in out.splitlines() if "python -m bandpo.score" in line)
    assert "BANDPO_GRADER_MODE=math-dapo-paper" in eval_line


def test_grader_mode_reaches_every_job_that_grades(tmp_path):
    """grader.mode is BANDPO_GRADER_MODE in the training, scoring and model-build commands of the DAG."""
    cfg = copy.deepcopy(read_config("smoke"))
    cfg["grader"] = {"mode": "math-dapo"}
    proc = snakemake(tmp_path / "wd", "-n", "-p", configfile=write_config(tmp_path, cfg))
    assert proc.returncode == 0, proc.output[-3000:]
    lines = proc.output.splitlines()
    for job in ("python -m bandpo.train", "python -m bandpo.score", "python -m bandpo.models build"):
        found = [line for line in lines if job in line]
        assert found and all("BANDPO_GRADER_MODE=math-dapo" in line for line in found), job
    cfg = validate.validate_config(read_config("smoke"))
    assert cfg["grader"] == {"mode": "lenient"}  # the default
    bad = yaml.safe_load((ROOT / "config" / "verl-cpu.yaml").read_text())
    bad["train"]["grader_mode"] = "lenient"
    with pytest.raises(validate.ConfigError, match=r"train\.grader_mode: set the grader once, as grader\.mode"):
        validate.validate_config(bad)
    bad["verl"] = bad.pop("train")  # the retired key: a pointer to where its settings went
    with pytest.raises(validate.ConfigError, match=r"config error at verl: verl's settings moved under train:"):
        validate.validate_config(bad)


def test_embedded_dry_run(tmp_path):
    cfg = validate.validate_config(read_config("config"))
    proc = snakemake(tmp_path, "-n", "--quiet", "rules")  # no --configfile: config/config.yaml is the default
    assert proc.returncode == 0, proc.output[-3000:]
    counts = job_counts(proc.output)
    assert counts == sweep.expected_jobs(cfg)
    xps = cfg["experiments"]
    n_cells = {
        x: sum(len(sweep.cell_models(cfg, v, e)) for e in v["methods"] if e not in v["reuse"]) for x, v in xps.items()
    }
    # each cell with its seeds: the experiment's, or the primary pair's first look's (a sequential primary)
    pairs = sweep.sequential_pairs(cfg)

    def n_seeds(x, e, m):
        first = [p["blocks"][0] for p in pairs if (p["experiment"], p["model"]) == (x, m) and e in p.values()]
        return len(first[0]) if first else len(study.slot_seeds(cfg, x, e))

    assert counts["train"] == sum(n_seeds(x, e, m) for x, v in xps.items() for e in v["methods"] if e not in v["reuse"]
                                  for m in sweep.cell_models(cfg, v, e))  # fmt: skip

    def groups(rule):  # one lm-eval process per (model, entry) group, the primary pair's in a rule of its own
        return counts.get(rule, 0) + counts.get(f"{rule}_primary", 0)

    # the sequential pair's groups of its first look (its later looks join when a look does not decide)
    assert [p["model"] for p in pairs] == ["tiny-s", "tiny-m"] and counts["look"] == counts["decided"] == 2
    assert counts["eval_group_primary_look1"] == 2 * len(pairs)
    # entries that keep seeds of their own (offpolicy_mask: its 3) are scored by a rule of their own
    kept = {e for e in xps[study.MAIN]["methods"] if study.by_id(cfg["methods"])[e].get("seeds")}
    assert kept == {"offpolicy_mask"} and counts["eval_group_seeds0_1_2"] == len(kept)
    assert counts["eval_group"] + counts["eval_group_primary_look1"] + counts["eval_group_seeds0_1_2"] == (
        n_cells[study.MAIN] + 2)  # base models too  # fmt: skip
    assert groups("eval_group_random_reward") == len(xps["random-reward"]["methods"])  # one group per entry
    assert set(xps) == {"main", "random-reward"} and "select" not in counts  # the other experiments: own configs
    assert counts["atlas"] == 1  # the equivalence atlas, before the report


@pytest.mark.parametrize("name, experiments", [("offpolicy", ["offpolicy-D1", "offpolicy-D4", "offpolicy-D8",
                                                              "offpolicy-D16"]), ("probe", ["probe"])])  # fmt: skip
def test_settled_experiments_run_from_configs_of_their_own(tmp_path, name, experiments):
    """config/offpolicy.yaml and config/probe.yaml (issue #37's budget): each schedules its experiment(s) alone and
    publishes to results/NAME/, with the recipe of its own publication (results/NAME/provenance.json's config,
    which repeated the recipe of the run that settled them: the same cells, models, method parameters, seeds and
    trainer settings) and the default config's base models (the same build settings, so the same bytes in
    resources/models/)."""
    cfg = validate.validate_config(yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text()))
    assert list(cfg["experiments"]) == experiments and cfg["publish"] and cfg["publish_dir"] == f"results/{name}"
    published = json.loads((ROOT / "results" / name / "provenance.json").read_text())["config"]
    entries = {e["id"]: e for e in published["methods"]}
    models = {m["id"]: m for m in published["models"]}
    default = {m["id"]: m for m in read_config("config")["models"]}
    for x in experiments:
        ours, theirs = cfg["experiments"][x], published["experiments"][x]
        for key in ("models", "methods", "seeds", "train", "data", "eval_tasks", "axis"):
            assert ours.get(key) == theirs.get(key), (x, key)
        for e in ours["methods"]:
            mine = next(m for m in cfg["methods"] if m["id"] == e)
            assert mine.get("params", {}) == entries[e].get("params", {}), e
        for m in ours["models"]:
            mine = next(v for v in cfg["models"] if v["id"] == m)
            for key in ("size", "data", "build", "train", "seed"):
                assert mine.get(key) == models[m].get(key), (m, key)
            if m in default:  # as written in both files, the build settings of the base model
                raw = next(v for v in yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())["models"]
                           if v["id"] == m)  # fmt: skip
                assert {k: v for k, v in raw.items() if k != "train"} == {
                    k: v for k, v in default[m].items() if k != "train"}  # fmt: skip
    if name == "offpolicy":  # the rules as published
        assert cfg["axes"]["offpolicy"]["primary"] == published["axes"]["offpolicy"]["primary"]
    proc = snakemake(tmp_path, "-n", "--quiet", "rules", configfile=ROOT / "config" / f"{name}.yaml")
    assert proc.returncode == 0, proc.output[-3000:]
    assert job_counts(proc.output) == sweep.expected_jobs(cfg)
    bad = {**yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text()), "profile": name}
    with pytest.raises(validate.ConfigError, match=r"publish_dir: results/.* is the profile's own folder"):
        validate.validate_config(bad)


@pytest.mark.parametrize("group_seeds", [True, False])
def test_primary_seeds_dry_run(tmp_path, group_seeds):
    """The smoke config with seeds of their own for main's primary pair and the separation run's: the dry run
    schedules exactly sweep.expected_jobs, the pairs scored by rules of their own (eval_group_primary,
    eval_group_separation_primary; eval_run_* per run), the base model of the pairs' new seed built."""
    plain = _smoke_without_primary_seeds()
    raw = _with_primary_seeds(plain, [0, 1, 2], [2, 3])
    for c in (plain, raw):
        c["eval"]["group_seeds"] = group_seeds
    cfg = validate.validate_config(raw)
    proc = snakemake(tmp_path / "wd", "-n", "--quiet", "rules", configfile=write_config(tmp_path, raw))
    assert proc.returncode == 0, proc.output[-3000:]
    counts = job_counts(proc.output)
    assert counts == sweep.expected_jobs(cfg)
    kind = "eval_group" if group_seeds else "eval_run"
    # 2 entries on one model; per run (eval_run): main's pair 3 seeds, the separation run's 2
    assert (counts[f"{kind}_primary"], counts[f"{kind}_separation_primary"]) == ((2, 2) if group_seeds else (6, 4))
    before = validate.validate_config(plain)
    assert counts["train"] == sweep.expected_jobs(before)["train"] + 2 + 2
    assert set(sweep.base_models(cfg)) - set(sweep.base_models(before)) == {"resources/models/smoke-tiny/seed3"}


def test_atlas_measures_mains_first_tiny_base_model(tmp_path):
    """The rule atlas (bandpo.train.atlas) runs on main's first tiny model and seed with main's data and the
    training
    settings of main's GRPO run of that model, before the report; no atlas without a tiny model in main."""
    cfg = validate.validate_config(read_config("config"))
    spec = sweep.atlas_spec(cfg)
    assert (spec["model_dir"], spec["data"], spec["seed"], spec["steps"]) == (
        "resources/models/tiny-s",
        "tiny-math",
        0,
        sweep.ATLAS_STEPS,
    )
    assert spec["train"] == sweep.run_settings(cfg, "tiny-s", "grpo")
    proc = snakemake(tmp_path, "-n", "-p", "--cores", "1", "results/embedded/leaderboard.html")
    assert proc.returncode == 0, proc.output[-3000:]
    assert (f"python -m bandpo.train.atlas --spec results/embedded/plan/atlas.json "
            f"--steps {sweep.ATLAS_STEPS} --no-progress --out results/embedded/atlas.csv" in proc.output)  # fmt: skip
    measured = json.loads((tmp_path / "results/embedded/plan/atlas.json").read_text())
    grpo = dataclasses.asdict(Plan(cfg).train_spec("tiny-s", "grpo", 0))
    same = ("model", "data", "method", "params", "seed", "steps", "prompts_per_step", "old_log_probs", "sampler_kernel")
    assert {k: measured[k] for k in same} == {k: grpo[k] for k in same}  # the first steps of main's GRPO run
    assert job_counts(proc.output)["atlas"] == 1
    assert sweep.atlas_spec(validate.validate_config(read_config("smoke")))["steps"] == 3  # smoke runs 3 steps
    assert sweep.atlas_spec(validate.validate_config(read_config("gpu"))) is None  # hub models only
    probe_only = yaml.safe_load((ROOT / "config" / "probe.yaml").read_text())
    assert sweep.atlas_spec(validate.validate_config(probe_only)) is None  # only: probe, main not run


def test_rerun_check_is_the_main_tiny_s_slice(tmp_path):
    """config/rerun-check.yaml (docs/results.md, "Checking a rerun") reruns exactly the published main rows of
    tiny-s: the same data, model, method entries, seeds, training and scoring as config/config.yaml."""
    main, rerun = read_config("config"), yaml.safe_load((ROOT / "config" / "rerun-check.yaml").read_text())
    same = ("methods", "seeds", "base_per_seed", "train", "eval", "train_data", "threads", "trainer")
    assert {k: rerun[k] for k in same} == {k: main[k] for k in same}
    assert rerun["data"] == [d for d in main["data"] if d["id"] in main["train_data"]]
    assert rerun["models"] == [m for m in main["models"] if m["id"] == "tiny-s"]
    assert list(rerun["experiments"]) == [study.MAIN] and rerun["publish"] is False
    proc = snakemake(tmp_path, "-n", "--quiet", "rules", configfile=ROOT / "config" / "rerun-check.yaml")
    assert proc.returncode == 0, proc.output[-3000:]
    counts = job_counts(proc.output)
    cfg = validate.validate_config(rerun)
    n_runs = sum(len(study.slot_seeds(cfg, study.MAIN, e["id"])) for e in rerun["methods"])
    assert n_runs == 5 * len(rerun["methods"]) - 2  # offpolicy_mask keeps its 3 seeds
    assert counts["model_tiny"] == 1 and counts["train"] == n_runs
    assert counts["eval_group"] + counts["eval_group_seeds0_1_2"] == len(rerun["methods"]) + 1  # one base model


# ----------------------------------------------------------------------------------------------------------------
# helper scripts of the rules


def run_module(name: str, *args: str, cwd: Path | None = None):
    return subprocess.run([sys.executable, "-m", name, *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("only", ["random-reward", "main", "main,random-reward"])
def test_one_experiment_alone_dry_run(tmp_path, only):
    """`--config only=ID[,ID]` schedules exactly those experiments' jobs (their data and models included) and
    publishes nothing; an axis id stands for its cells."""
    proc = snakemake(tmp_path, "-n", "--cores", "2", "--config", f"only={only}", configfile=CONFIGS["config"])
    assert proc.returncode == 0, proc.output[-3000:]
    cfg = validate.validate_config({**read_config("config"), "only": only})
    axes = cfg["axes"]
    named = [c for x in only.split(",") for c in (axes[x]["cells"] if x in axes else [x])]
    only = ",".join(named)
    assert set(cfg["experiments"]) == set(named) and cfg["publish"] is False
    counts = job_counts(proc.output)
    assert counts == sweep.expected_jobs(cfg) and "publish" not in counts
    slots = set(re.findall(r"wildcards: model=[^,\n]+, entry=([^,\n]+)", proc.output))
    assert slots and all(study.split_slot(s)[1] in only.split(",") for s in slots)


def test_atomic_dir_publishes_only_finished_folders(tmp_path):
    final = tmp_path / "runs" / "seed0"
    final.mkdir(parents=True)  # snakemake creates the output folder first
    (final / "stale.txt").write_text("old")
    write = "import pathlib, sys; p = pathlib.Path(sys.argv[1]); p.mkdir(); (p / 'a.txt').write_text('new')"
    proc = run_module("bandpo.core.atomic_dir", "--final", str(final), "--", sys.executable, "-c", write, "{tmp}")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in final.iterdir()) == ["a.txt"]
    assert sorted(p.name for p in final.parent.iterdir()) == ["seed0"]  # no temporary folder left
    fail = "import pathlib, sys; p = pathlib.Path(sys.argv[1]); p.mkdir(); (p / 'b.txt').write_text('x'); sys.exit(3)"
    proc = run_module("bandpo.core.atomic_dir", "--final", str(final), "--", sys.executable, "-c", fail, "{tmp}")
    assert proc.returncode == 3
    assert sorted(p.name for p in final.iterdir()) == ["a.txt"]  # unchanged
    assert sorted(p.name for p in final.parent.iterdir()) == ["seed0"]


def test_verl_data_and_reward(tmp_path):
    pd = pytest.importorskip("pandas")
    src = tmp_path / "tiny" / "train.jsonl"
    src.parent.mkdir()
    rows = [{"id": f"r{i}", "prompt": f"Q: {i}+1?\nA: ", "answer": str(i + 1), "level": 1} for i in range(5)]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out_train, out_val = tmp_path / "v" / "train.parquet", tmp_path / "v" / "val.parquet"
    proc = run_module("bandpo.verl.data", "--train", str(src), "--val", str(src), "--out-train", str(out_train),
                      "--out-val", str(out_val))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    df = pd.read_parquet(out_train)
    assert len(df) == 5 and set(df.columns) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    first = df.iloc[0]
    assert first["data_source"] == "tiny" and list(first["prompt"]) == [{"role": "user", "content": "Q: 0+1?\nA: "}]
    assert first["reward_model"]["ground_truth"] == "1"
    spec = importlib.util.spec_from_file_location("verl_reward", ROOT / "workflow" / "scripts" / "verl_reward.py")
    reward = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reward)
    assert reward.compute_score("tiny", "1+1=2. \\boxed{2}", "2") == {"score": 1.0, "acc": 1.0, "pred": "2"}
    assert reward.compute_score("tiny", "Answer: 3", "2") == {"score": -1.0, "acc": 0.0, "pred": "3"}  # +1 / -1


# ----------------------------------------------------------------------------------------------------------------
# the smoke DAG, end to end


def test_smoke_dag_end_to_end(smoke_run):
    wd, proc = smoke_run
    cfg = validate.validate_config(read_config("smoke"))
    assert job_counts(proc.output) == sweep.expected_jobs(cfg)
    entries = [study.BASE_ENTRY] + [e["id"] for e in cfg["methods"]]
    model = cfg["models"][0]["id"]
    # seeds until decided: the pair scores the same (t = 0), so look 1 (3 pairs) is undecided, and the checkpoint
    # schedules look 2's seeds; look 2 (n_max) decides, and rule `decided` keeps its copy for the report
    looks = wd / "results" / "smoke" / "looks" / study.MAIN / model
    first, decided = (json.loads((looks / f"{name}.json").read_text()) for name in ("look1", "decided"))
    assert (first["verdict"], first["n"], first["next_n"]) == ("undecided", 3, 6)
    assert decided == json.loads((looks / "look2.json").read_text()) and (decided["look"], decided["n"]) == (2, 6)
    assert decided["verdict"] != "undecided" and sorted(p.name for p in looks.iterdir()) == [
        "decided.json", "look1.json", "look2.json"]  # fmt: skip
    pair = cfg["experiments"][study.MAIN]["primary"]["compare"]
    seeds_of = {e: (decided["seeds"] if e in pair else cfg["seeds"]) for e in entries}
    assert seeds_of["grpo"] == list(range(6))
    for entry in entries:
        for seed in seeds_of[entry]:
            d = wd / "results" / "smoke" / "eval" / model / entry / f"seed{seed}"
            summary = json.loads((d / "tiny_math.json").read_text())
            results = json.loads((d / "lm_eval_results.json").read_text())
            assert summary["entry"] == entry and summary["seed"] == seed and summary["k"] == 8
            assert summary["metrics"]["mean@8"] == results["results"]["tiny_math"]["mean@8,all_k"]
            assert results["config"]["random_seed"] == seed
            assert (d / "tiny_math.samples.jsonl").stat().st_size > 0
            base_dir = f"resources/models/{model}/seed{seed}"  # base_per_seed: seed s starts from base model s
            assert summary["model_dir" if entry == study.BASE_ENTRY else "base_model_dir"] == base_dir
            if entry != study.BASE_ENTRY:
                run = wd / "results" / "smoke" / "runs" / model / entry / f"seed{seed}"
                assert (run / "model" / "config.json").is_file() and (run / "run.json").is_file()
                assert len((run / "metrics.jsonl").read_text().splitlines()) == cfg["train"]["steps"]
                assert summary["method"] == next(e["method"] for e in cfg["methods"] if e["id"] == entry)
                assert summary["params"] == json.loads((run / "run.json").read_text())["method_params"]  # one source
    # one base model per seed, pretrained with that seed, with its weights' checksum
    infos = [json.loads((wd / "resources/models" / model / f"seed{s}" / "info.json").read_text()) for s in cfg["seeds"]]
    assert [i["seed"] for i in infos] == cfg["seeds"]
    assert len({json.dumps(i["weights_sha256"]) for i in infos}) == len(cfg["seeds"])
    # the report stage: leaderboard rows per entry (+ base), per-seed scores read from lm-eval's files
    board = pd.read_csv(wd / "results" / "smoke" / "leaderboard.csv")
    assert sorted(board.loc[board["experiment"] == study.MAIN, "entry"]) == sorted(entries)
    scores = pd.read_csv(wd / "results" / "smoke" / "scores.csv")
    main_scores = scores[scores["experiment"] == study.MAIN]
    scored = {tuple(x) for x in main_scores[["entry", "seed"]].drop_duplicates().itertuples(index=False)}
    assert scored == {(e, s) for e in entries for s in seeds_of[e]}
    assert set(scores["metric"]) >= {"mean", "pass", "maj"}
    assert set(scores["grader"]) == {summary["grader"]["id"]} and "/lenient@" in summary["grader"]["id"]
    assert not (wd / "results" / "leaderboard.csv").exists()  # smoke does not publish
    # every rule logs and records a benchmark; `python -m bandpo.plan.budget times` sums them per rule kind
    tsv = list((wd / "logs" / "smoke" / "benchmarks").rglob("*.tsv"))
    assert tsv
    log = sorted((wd / ".snakemake" / "log").glob("*.snakemake.log"))[0]  # the smoke run's log: its time stamps
    table = subprocess.run([sys.executable, "-m", "bandpo.plan.budget", "times",
                            str(wd / "logs" / "smoke" / "benchmarks"), "--log", str(log),
                            "--csv", str(wd / "dag_rules.csv")], cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert table.returncode == 0, table.stderr
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in table.stdout.splitlines()[2:]
            if line.startswith("|")}  # fmt: skip
    dag = pd.read_csv(wd / "dag_rules.csv")  # the same table (results/dag_rules.csv of a publication run)
    assert list(dag["rule"]) == list(rows) and dag["jobs"].iloc[-1] == len(tsv)
    assert 0 < dag["minutes_per_core"].iloc[-1] and 0 < dag["elapsed_min"].iloc[-1] < 60
    assert {f"train {model} (main)", f"model build {model}", f"lm-eval group {model}", "report"} <= set(rows)
    assert int(rows["all"][1]) == len(tsv)
    assert int(rows[f"train {model} (main)"][1]) == sum(len(seeds_of[e]) for e in entries if e != study.BASE_ENTRY)
    # one lm-eval process scored all seeds of an entry, or of a look for the pair
    eval_logs = wd / "logs" / "smoke" / "eval" / model
    assert (eval_logs / "base.log").read_text().count("tiny_math: mean@8=") == len(cfg["seeds"])
    for look in (1, 2):
        assert (eval_logs / "grpo" / f"look{look}.log").read_text().count("tiny_math: mean@8=") == 3
    # the fixed cost per job (benchmark file's wall time minus the steps / the scoring the job's records hold)
    fixed = subprocess.run([sys.executable, "-m", "bandpo.plan.budget", "times",
                            str(wd / "logs" / "smoke" / "benchmarks"), "--results", str(wd / "results" / "smoke")],
                           cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert fixed.returncode == 0, fixed.stderr
    lines = fixed.stdout.split("fixed s / job")[1].splitlines()[2:]
    cells = [x.split(" | ") for x in lines if x.startswith("|")]
    per_kind = {c[0].lstrip("| "): float(c[2]) for c in cells}
    assert {f"train {model} (main)", f"lm-eval group {model}"} <= set(per_kind)
    assert all(0 < v < 60 for v in per_kind.values()), per_kind


def test_smoke_experiments_end_to_end(smoke_run):
    """The random-reward control and the mechanism probe ran as experiments of the one DAG: their runs (with the
    experiment's trainer settings), lm-eval scores per subset, the leaderboard's experiment / subset columns, the
    probe's logged deciding-token probability, the primary comparison and the figures."""
    wd, _ = smoke_run
    cfg = validate.validate_config(read_config("smoke"))
    results = wd / "results" / "smoke"
    rr, probe = cfg["experiments"]["random-reward"], cfg["experiments"]["probe"]
    for model, slot, seed in sweep.runs(cfg):
        info = json.loads((results / "runs" / model / slot / f"seed{seed}" / "run.json").read_text())
        assert info["config"]["reward"] == ("random" if slot.endswith("@random-reward") else "grader")
        experiment = study.split_slot(slot)[1]
        assert info["config"]["data"] == f"resources/data/{cfg['experiments'][experiment]['data']}"
    for entry in probe["methods"]:
        for seed in probe["seeds"]:
            run = results / "runs" / probe["models"][0] / study.slot_id("probe", entry) / f"seed{seed}"
            rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            every = probe["train"]["probe_every"]
            logged = [r["step"] for r in rows if "probe/p_correct" in r]
            assert logged == [r["step"] for r in rows if r["step"] % every == 0 or r["step"] == len(rows)]
            assert all(
                0 < r["probe/p_correct"] < 1 and 0 <= r["probe/accuracy"] <= 1 for r in rows if "probe/accuracy" in r
            )
            assert any("probe/rollout_accuracy" in r or "rest/rollout_accuracy" in r for r in rows)
    # lm-eval scored the probe's two subsets as two tasks; the subset task saw only the probe problems
    d = results / "eval" / probe["models"][0] / "grpo@probe" / "seed0"
    summaries = {t: json.loads((d / f"{t}.json").read_text()) for t in ("tiny_math_probe", "tiny_math_rest")}
    n_probe = cfg["data"][1]["probe"]["n_test"]
    assert summaries["tiny_math_probe"]["n_problems"] >= n_probe
    assert summaries["tiny_math_probe"]["n_problems"] + summaries["tiny_math_rest"]["n_problems"] == len(
        (wd / "resources/data/tiny-math-probe-smoke/test.jsonl").read_text().splitlines()
    )
    assert summaries["tiny_math_probe"]["experiment"] == "probe" and summaries["tiny_math_probe"]["entry"] == "grpo"
    # the leaderboard: experiment column; the probe's rows name their subset; entries per experiment
    board = pd.read_csv(results / "leaderboard.csv", keep_default_na=False)
    assert set(board["experiment"]) == {study.MAIN, "random-reward", "probe", *cfg["axes"]["offpolicy"]["cells"],
                                        "separation"}  # fmt: skip
    assert set(board.loc[board["experiment"] == "probe", "subset"]) == {"probe", "rest"}
    assert set(board.loc[board["experiment"] != "probe", "subset"]) == {""}
    assert sorted(board.loc[board["experiment"] == "random-reward", "entry"]) == sorted(rr["methods"])
    for subset in ("probe", "rest"):
        rows = board[(board["experiment"] == "probe") & (board["subset"] == subset)]
        assert sorted(rows["entry"]) == sorted([study.BASE_ENTRY, *probe["methods"]])
        assert (rows["n_seeds"] == len(probe["seeds"])).all()
    primary = pd.read_csv(results / "primary.csv")
    row = primary[primary["experiment"] == "probe"].iloc[0]
    assert (row["treatment"], row["control"], row["task"]) == ("bandpo_kl", "grpo", "tiny_math_probe")
    assert row["n_treatment"] == row["n_control"] == len(probe["seeds"])
    shifts = primary[primary["experiment"] == "random-reward"]  # the control's entropy rule, one row per method
    assert sorted(shifts["treatment"]) == sorted(rr["methods"]) and set(shifts["control"]) == {"step 1"}
    md = (results / "leaderboard.md").read_text()
    assert "## probe: smoke-tiny-probe, subset probe" in md and "## random-reward: smoke-tiny" in md
    assert "Decision rule:" in md
    # figures: entropy under random reward per method; the probe's curves against step
    ent = pd.read_csv(results / "figures" / "random_reward_entropy.csv")
    assert set(ent["entry"]) == set(rr["methods"]) and set(ent["metric"]) == {"entropy"}
    curves = pd.read_csv(results / "figures" / "probe_curves.csv")
    assert set(curves["metric"]) == {"probe/p_correct", "probe/accuracy"} and set(curves["entry"]) == set(
        probe["methods"]
    )


def test_smoke_axis_and_selection_end_to_end(smoke_run):
    """The off-policy axis ran in the one DAG: the cell at main's settings reused main's runs (no folder of its
    own) and the leaderboard shows them in the cell; the select job chose D from the cells' scores; the separation
    runs trained with that D; axis.csv holds the rules' rows and the page their panels."""
    wd, _ = smoke_run
    cfg = validate.validate_config(read_config("smoke"))
    results = wd / "results" / "smoke"
    assert not (results / "runs" / "smoke-tiny" / "grpo@off-D4").exists()  # reused: main's runs
    board = pd.read_csv(results / "leaderboard.csv", keep_default_na=False)
    assert sorted(board.loc[board["experiment"] == "off-D4", "entry"]) == ["bandpo_kl", "grpo"]
    chosen = json.loads((results / "select" / "separation.json").read_text())
    table = pd.read_csv(results / "select" / "separation.csv")
    # rule revision 2 reads only the cells that run both compared arms: D = 1 (GRPO only) is not a candidate
    assert set(chosen) == {"updates_per_step"} and sorted(table["value"]) == [4.0, 8.0]
    assert chosen["updates_per_step"] in (4, 8)  # the largest that learns, or the fallback 4
    for entry in cfg["experiments"]["separation"]["methods"]:
        info = json.loads((results / "runs" / "smoke-tiny" / f"{entry}@separation" / "seed2" / "run.json").read_text())
        assert info["config"]["updates_per_step"] == chosen["updates_per_step"]
    for slot, d in (("grpo@off-D8", 8), ("grpo@off-D1", 1)):
        info = json.loads((results / "runs" / "smoke-tiny" / slot / "seed0" / "run.json").read_text())
        assert info["config"]["updates_per_step"] == d
    axis_rows = pd.read_csv(results / "axis.csv")
    assert {"a engagement", "b mechanism", "c accuracy"} <= set(axis_rows["rule"])
    runs = pd.read_csv(results / "axis_runs.csv")
    assert sorted(runs.groupby("value").size().to_dict().items()) == [(1.0, 2), (4.0, 4), (8.0, 4)]
    md = (results / "leaderboard.md").read_text()
    assert "## Axis offpolicy: rules fixed before the runs" in md and "Experiment separation: the regime" in md
    dose = pd.read_csv(results / "figures" / "offpolicy_dose.csv")
    assert set(dose["panel"]) == {"clip upper low", "entropy auc diff"}


def test_smoke_rerun_is_a_fast_noop(smoke_run):
    """A rerun schedules no job. Its CPU time (snakemake and its jobs) is judged against the first run's, measured
    in the same session (a ratio of process times: neither wall time nor an absolute figure, CI machines are
    noisy)."""
    wd, first = smoke_run
    proc = snakemake(wd, "--cores", "2", configfile=CONFIGS["smoke"])
    assert proc.returncode == 0, proc.output[-3000:]
    assert "Nothing to be done" in proc.output
    assert not re.search(r"^(local)?rule \w+:", proc.output, re.M), proc.output[-3000:]
    assert proc.cpu_seconds < 0.3 * first.cpu_seconds, (
        f"no-op rerun {proc.cpu_seconds:.1f} CPU-s vs first run {first.cpu_seconds:.1f} CPU-s"
    )


def test_stale_locks_are_cleared_only_when_no_run_is_alive(tmp_path):
    """bandpo.plan.run_lock: a live run's flock protects its Snakemake locks; a dead run's are removed."""
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.output.lock").write_text("results/x\n")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from bandpo.plan import run_lock; "
         "print(len(run_lock.clear_stale_locks(sys.argv[1])), flush=True); time.sleep(60)",
         str(tmp_path / ".snakemake")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "1"  # it found the stale lock and holds the run lock now
        (locks / "0.output.lock").write_text("results/x\n")  # the live run's own lock
        assert run_lock.clear_stale_locks(tmp_path / ".snakemake") == []  # a live run: its locks stay
        assert (locks / "0.output.lock").exists()
    finally:
        holder.kill()
        holder.wait()
    assert [p.name for p in run_lock.clear_stale_locks(tmp_path / ".snakemake")] == ["0.output.lock"]
    assert not (locks / "0.output.lock").exists()


# What a run produces, without what the clock decides (wall times, throughput): compared between runs.
_CLOCK = re.compile(r"seconds|_frac$|tokens_per_second")


def _run_outputs(results: Path, entries: list[str]) -> dict:
    """Scores, leaderboard rows, per-step training metrics and lm-eval's samples of a smoke run's results folder."""
    out = {}
    for table in ("scores", "leaderboard", "runs"):
        df = pd.read_csv(results / f"{table}.csv")
        df = df[df["entry"].isin(entries)].drop(columns=[c for c in df.columns if _CLOCK.search(c)])
        out[table] = df.sort_values(list(df.columns[:6])).reset_index(drop=True)
    for path in sorted(results.glob("runs/*/*/seed*/metrics.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        out[str(path.relative_to(results))] = [{k: v for k, v in r.items() if not _CLOCK.search(k)} for r in rows]
    for path in sorted(results.glob("eval/*/*/seed*/*.samples.jsonl")):
        out[str(path.relative_to(results))] = [(s["doc_id"], s["resps"]) for s in map(json.loads, path.open())]
    return out


@pytest.mark.slow
def test_plain_command_resumes_after_sigkill_of_the_dag(smoke_run, tmp_path):
    """A new user's crash: the whole DAG (its process group) is killed with SIGKILL while job 7 of 11 runs, then the
    README's command is run again as it is, in a copy of the repository: it finishes with the outputs of an
    uninterrupted run, without --rerun-incomplete or any other flag (profiles/default supplies them)."""
    import os
    import shutil
    import signal

    # time limits as multiples of the uninterrupted smoke DAG measured in this session (same machine, same load), not
    # fixed wall-clock figures: job 7 of 11 starts well before a whole run ends, and the resumed run redoes less
    whole_run = smoke_run[1].seconds
    repo = tmp_path / "repo"
    for name in ("workflow", "config", "profiles"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "Snakefile", repo / "Snakefile")
    readme_command = [sys.executable, "-m", "snakemake", "--cores", "all", "--configfile", "config/smoke.yaml"]
    log = tmp_path / "first.log"
    incomplete = repo / ".snakemake" / "incomplete"
    with open(log, "w") as f:
        dag = subprocess.Popen(readme_command, cwd=repo, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 3 * whole_run
        while time.monotonic() < deadline and dag.poll() is None:
            done = [int(m) for m in re.findall(r"^(\d+) of \d+ steps", log.read_text(), re.M)]
            if done and max(done) >= 6 and incomplete.is_dir() and any(incomplete.iterdir()):
                break  # six jobs finished, a seventh is running (its outputs are marked incomplete)
            time.sleep(0.1)
        assert dag.poll() is None, "the DAG ended before it could be killed:\n" + log.read_text()[-3000:]
        os.killpg(dag.pid, signal.SIGKILL)
        dag.wait(timeout=60)
    finally:
        if dag.poll() is None:
            os.killpg(dag.pid, signal.SIGKILL)
    assert any(incomplete.iterdir()), "the kill left no incomplete job: nothing to resume"

    again = subprocess.run(readme_command, cwd=repo, capture_output=True, text=True, timeout=3 * whole_run)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output[-5000:]
    assert "IncompleteFilesException" not in output and "profiles/default" in output
    entries = [study.BASE_ENTRY] + [e["id"] for e in read_config("smoke")["methods"]]
    resumed, uninterrupted = (
        _run_outputs(repo / "results" / "smoke", entries),
        _run_outputs(smoke_run[1].reference, entries),
    )
    assert resumed.keys() == uninterrupted.keys()
    for key, value in uninterrupted.items():
        if isinstance(value, pd.DataFrame):
            pd.testing.assert_frame_equal(resumed[key], value, check_exact=True, obj=key)
        else:
            assert resumed[key] == value, key


def test_adding_a_method_entry_reruns_only_its_jobs(smoke_run, tmp_path):
    wd, _ = smoke_run
    cfg = read_config("smoke")
    cfg["methods"].append({"id": "bandpo_tv_d0.1", "method": "bandpo", "params": {"divergence": "tv", "delta": 0.1}})
    proc = snakemake(wd, "-n", "--cores", "2", configfile=write_config(tmp_path, cfg))
    assert proc.returncode == 0, proc.output[-3000:]
    counts = job_counts(proc.output)
    n_models, n_seeds = len(validate.validate_config(cfg)["experiments"][study.MAIN]["models"]), len(cfg["seeds"])
    assert counts == {"train": n_models * n_seeds, "eval_group": n_models, "report": 1, "all": 1}
    planned = set(re.findall(r"wildcards: model=[^,\n]+, entry=([^,\n]+)", proc.output))
    assert planned == {"bandpo_tv_d0.1"}


# A stand-in for another framework's trainer: any command that writes the run-output contract into {tmp}
# (metrics.jsonl, model/ as a Hugging Face checkpoint, run.json); bandpo.core.atomic_dir publishes the folder.
EXTERNAL_TRAINER = """
import argparse, json, shutil
from pathlib import Path

from bandpo.core.run_contract import check_run

ap = argparse.ArgumentParser()
ap.add_argument("--model")
ap.add_argument("--out")
args = ap.parse_args()
out = Path(args.out)
shutil.copytree(args.model, out / "model")
# the run contract (bandpo/schemas/run.schema.yaml): no training, so no clipping
keys = ("reward_mean", "accuracy", "entropy", "response_length", "clipfrac", "clipfrac_upper", "clipfrac_lower")
row = {"step": 1, **dict.fromkeys(keys, 0.0), "step_seconds": 0.0}
(out / "metrics.jsonl").write_text(json.dumps(row) + "\\n")
info = {"trainer": "copy", "config": {"method": "copy-of-base"}, "method_params": {}, "steps": 1,
        "train_seconds_total": 0.0, "versions": {}}
(out / "run.json").write_text(json.dumps(info) + "\\n")
check_run(out)
"""

EXTERNAL_RULE = """
rule train_copy:
    input:
        model=base_model,  # the base model of the job's seed (common.smk)
    output:
        metrics=f"{RUNS}/{{model}}/{{entry}}/seed{{seed}}/metrics.jsonl",
        model=f"{RUNS}/{{model}}/{{entry}}/seed{{seed}}/model/config.json",
        run=f"{RUNS}/{{model}}/{{entry}}/seed{{seed}}/run.json",
    wildcard_constraints:
        entry="copy_trainer",
    params:
        run=lambda w: run_dir(w.model, w.entry, w.seed),
        base=lambda w: model_dir(w.model, w.seed),
        script=TRAINER_SCRIPT,
    log:
        f"{LOGS}/train/{{model}}/{{entry}}/seed{{seed}}.log",
    shell:
        "python -m bandpo.core.atomic_dir --final {params.run} -- "
        "python {params.script} --model {params.base} --out {{tmp}} > {log} 2>&1"
"""


@pytest.mark.dag
def test_external_trainer_rule_gets_scored(smoke_run, tmp_path):
    """A method with its own trainer: an `external` entry + a rule file writing the run-output contract."""
    wd, _ = smoke_run
    script = tmp_path / "copy_trainer.py"
    script.write_text(EXTERNAL_TRAINER)
    rules = tmp_path / "copy_trainer.smk"
    rules.write_text(f"TRAINER_SCRIPT = {str(script)!r}\n" + EXTERNAL_RULE)
    cfg = read_config("smoke")
    cfg["include_rules"] = [str(rules)]
    cfg["methods"].append({"id": "copy_trainer", "method": "copy-of-base", "external": True})
    proc = snakemake(wd, "--cores", "2", configfile=write_config(tmp_path, cfg))
    assert proc.returncode == 0, proc.output[-3000:]
    n_seeds = len(cfg["seeds"])
    assert job_counts(proc.output) == {"train_copy": n_seeds, "eval_group": 1, "report": 1, "all": 1}
    model = cfg["models"][0]["id"]
    for seed in cfg["seeds"]:
        summary = json.loads(
            (wd / "results/smoke/eval" / model / "copy_trainer" / f"seed{seed}" / "tiny_math.json").read_text()
        )
        base_eval = wd / "results/smoke/eval" / study.run_folder(model, study.BASE_ENTRY, seed)
        base = json.loads((base_eval / "tiny_math.json").read_text())
        assert summary["method"] == "copy-of-base" and summary["trainer"] == "copy"  # as its run.json says
        assert summary["metrics"] == base["metrics"]  # the same weights, the same evaluation seed: the same scores
    scores = pd.read_csv(wd / "results/smoke/scores.csv")
    assert set(scores.loc[scores["entry"] == "copy_trainer", "seed"]) == set(cfg["seeds"])


@pytest.mark.dag
def test_a_method_of_a_users_module_runs_through_the_dag(smoke_run, tmp_path):
    """A method defined in a file outside bandpo/ (tests/example_method.py), named in method_modules: checked at DAG
    start, trained by the local trainer, scored and reported like a built-in method."""
    wd, _ = smoke_run
    cfg = read_config("smoke")
    cfg["methods"].append({"id": "half_clip", "method": "half_clip", "params": {"eps": 0.1}})
    # without the module the entry is an unknown method, before any job
    proc = snakemake(wd, "-n", configfile=write_config(tmp_path, cfg, "without.yaml"))
    assert proc.returncode != 0 and re.search(r"methods\[2\]\.method .*unknown method 'half_clip'", proc.output)
    bad = copy.deepcopy(cfg)
    bad["methods"][-1]["params"] = {"eps": 1.5}  # the module's own validation runs at DAG start too
    bad["method_modules"] = ["tests/example_method.py"]
    proc = snakemake(wd, "-n", configfile=write_config(tmp_path, bad, "bad.yaml"))
    assert proc.returncode != 0 and re.search(r"methods\[2\]\.params\.eps .*must be in \(0, 1\)", proc.output)

    cfg["method_modules"] = ["tests/example_method.py"]
    proc = snakemake(wd, "--cores", "2", configfile=write_config(tmp_path, cfg))
    assert proc.returncode == 0, proc.output[-3000:]
    n_seeds = len(cfg["seeds"])
    assert job_counts(proc.output) == {"train": n_seeds, "eval_group": 1, "report": 1, "all": 1}
    model = cfg["models"][0]["id"]
    for seed in cfg["seeds"]:
        run = json.loads((wd / "results/smoke/runs" / model / "half_clip" / f"seed{seed}" / "run.json").read_text())
        assert run["method"] == "half_clip" and run["method_label"] == "eps=0.1"
        assert run["method_params"] == {"eps": 0.1} and run["method_modules"][0].endswith("tests/example_method.py")
        metrics = (wd / "results/smoke/runs" / model / "half_clip" / f"seed{seed}" / "metrics.jsonl").read_text()
        steps = [json.loads(line) for line in metrics.splitlines()]
        assert all(m["bound_upper_mean"] == pytest.approx(1.1) for m in steps)  # its bounds were the ones used
        scored = wd / "results/smoke/eval" / model / "half_clip" / f"seed{seed}" / "tiny_math.json"
        summary = json.loads(scored.read_text())
        assert summary["method"] == "half_clip" and summary["params"] == {"eps": 0.1}
    board = pd.read_csv(wd / "results" / "smoke" / "leaderboard.csv")
    assert "half_clip" in set(board["entry"])


@pytest.mark.dag
def test_a_new_method_ranks_against_the_published_runs_without_rerunning_them(smoke_run, tmp_path):
    """README "Adding a method": a checkout without the published run folders trains and scores only the new entry
    and pairs it with the published GRPO scores, because the base models it rebuilds have the published sha256;
    when a base model differs, it says so and trains GRPO too."""
    wd, _ = smoke_run
    cfg = read_config("smoke")
    full = validate.validate_config(copy.deepcopy(cfg))
    main = full["experiments"][study.MAIN]
    # every base model of main's that the smoke run built (its pair's looks' seeds included), as rule publish does
    dirs = [d for d in sweep.base_models(full) if d.split("/")[2] in main["models"] and (wd / d).is_dir()]
    published = tmp_path / "published"  # the smoke run, published as the embedded run publishes results/
    proc = run_module("bandpo.report", "publish", "--src", "results/smoke", "--dest", str(published),
                      "--models", *dirs, cwd=wd)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]

    clone = tmp_path / "clone"  # a fresh clone: no runs, no base models
    clone.mkdir()
    cfg["methods"].append({"id": "half_clip", "method": "half_clip", "params": {"eps": 0.1}})
    cfg["method_modules"] = ["tests/example_method.py"]
    cfg["rank_against"] = str(published)
    config = write_config(tmp_path, cfg)
    target = "results/smoke/rank/half_clip.md"
    proc = snakemake(clone, "--cores", "2", target, configfile=config)
    assert proc.returncode == 0, proc.output[-3000:]
    n_seeds, n_models = len(main["seeds"]), len(main["models"])
    counts = job_counts(proc.output)
    assert counts["train"] == n_seeds * n_models and counts["eval_group"] == n_models  # the new entry's only
    assert counts["base_check"] == n_models and counts["rank"] == 1
    assert not list((clone / "results/smoke/runs").glob("*/grpo"))  # GRPO was not rerun
    table = pd.read_csv(clone / "results/smoke/rank/half_clip.csv")
    theirs = pd.read_csv(published / "scores.csv", keep_default_na=False)
    for row in table.itertuples():
        assert row.baseline_source == "published" and row.n_pairs == n_seeds
        grpo = theirs.query("experiment == 'main' and model == @row.model and entry == 'grpo' and name == @row.metric")
        assert row.baseline_mean == pytest.approx(grpo["value"].mean())
        assert row.verdict in ("better", "not better by the margin", "undecided") and 1 <= row.place <= row.of
        assert row.margin == pytest.approx(study.report_experiments(full)[study.MAIN]["margins"][row.model])
    page = (clone / target).read_text()
    assert "the base models built here are the published ones (sha256 identical)" in page

    # another base model than the published one (as on a CPU without AVX2): GRPO is trained and scored here too
    prov = json.loads((published / "provenance.json").read_text())
    prov["base_models"][0]["weights_sha256"] = {"model.safetensors": "0" * 64}
    (published / "provenance.json").write_text(json.dumps(prov))
    for path in (clone / "results/smoke/rank").rglob("*.*"):
        path.unlink()
    proc = snakemake(clone, "--cores", "2", target, configfile=config)
    assert proc.returncode == 0, proc.output[-3000:]
    # GRPO's jobs join the DAG after the check (a checkpoint), so the job table printed first does not list them;
    # GRPO is the sequential pair's control, so its runs are those of its own seeds (every look's), a superset of
    # the new entry's
    n_grpo = len(study.slot_seeds(full, study.MAIN, "grpo")) * n_models
    assert n_grpo >= n_seeds * n_models
    assert len(list((clone / "results/smoke/runs").glob("*/grpo/seed*/run.json"))) == n_grpo
    assert len(list((clone / "results/smoke/eval").glob("*/grpo/seed*/tiny_math.json"))) == n_grpo
    table = pd.read_csv(clone / "results/smoke/rank/half_clip.csv")
    assert set(table["baseline_source"]) == {"rerun here"} and table["place"].isna().all()
    assert "weights differ from the published ones" in (clone / target).read_text()


def test_run_cost_benchmark_runs_the_rules_command(tmp_path):
    """benchmarks/bench_run_cost.py times the job the rule train runs (so its figures are the DAG's): the same entry
    point and the spec the DAG's run plan writes, but for its own out folder and threads."""
    spec = importlib.util.spec_from_file_location("bench_run_cost", ROOT / "benchmarks" / "bench_run_cost.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cfg = validate.validate_config(read_config("config"))
    for model in ("tiny-s", "tiny-m"):
        run = f"results/embedded/runs/{model}/bandpo_kl/seed1"
        proc = snakemake(tmp_path / "wd", "-n", "-p", f"{run}/run.json")
        assert proc.returncode == 0, proc.output[-3000:]
        dag_spec = f"results/embedded/plan/train/{model}/bandpo_kl/seed1.json"
        assert f"python -m bandpo.train --spec {dag_spec}" in proc.output
        mine = tmp_path / f"{model}.json"
        cmd = bench.run_command(cfg, model, "bandpo_kl", 1, str(tmp_path / "out"), str(mine), threads=2)
        assert cmd[1:] == ["-m", "bandpo.train", "--spec", str(mine)]
        ours, dags = json.loads(mine.read_text()), json.loads((tmp_path / "wd" / dag_spec).read_text())
        assert (ours.pop("out"), ours.pop("threads"), dags.pop("out"), dags.pop("threads")) == (
            str(tmp_path / "out"), 2, run, 1)  # fmt: skip
        assert ours == dags


def _measured_separation_d() -> int | None:
    """The D the published run's selection rule picked, made again from its scores.csv (`docs.blocks.axes`);
    None when the published config fixed the separation run's D in advance (no select rule)."""
    from bandpo.report.board import Board
    from docs.blocks.axes import selection

    board = Board.read(ROOT / "results")
    if not any(v.get("select") for v in board.experiments.values()):
        return None
    _name, setting, _table = selection(board)
    (d,) = (int(v) for v in setting.values())
    return d


def test_budget_estimate_counts_the_dags_jobs_and_reproduces_the_measured_run():
    """`python -m bandpo.plan.budget plan`: its job list has the DAG's counts (sweep.expected_jobs, which the dry-run
    tests compare with snakemake), and applied to the published run's own config, where its sequential primaries
    stopped (`stopped_pairs`), it gives back that run's elapsed time (results/dag_rules.csv) within 5%; a planned
    config that trains more steps costs more. Without the D the
    published run's selection picked (the command line's default) its unit costs are the same."""
    from bandpo.plan import budget

    cfg = validate.validate_config(read_config("config"))
    expected = sweep.expected_jobs(cfg)
    jobs = budget.jobs(cfg)
    kinds = {k: sum(1 for j in jobs if j["kind"] == k) for k in ("train", "build", "eval")}
    # the budget is the maximum n: a sequential pair's runs of every look, of which the DAG schedules the first look's
    # at the start; its scoring is one job per model and entry (the looks' jobs together score those seeds)
    later = sum(2 * len(b) for p in sweep.sequential_pairs(cfg) for b in p["blocks"][1:])
    n_eval = sum(v for k, v in expected.items() if k.startswith("eval_group") and "_look" not in k)
    n_eval += 2 * len(sweep.sequential_pairs(cfg))
    assert later > 0 and kinds == {"train": expected["train"] + later, "build": expected["model_tiny"], "eval": n_eval}

    rules, measured_cfg = budget.read_measured(ROOT / "results")
    stopped = budget.stopped_pairs(ROOT / "results")
    measured_d = _measured_separation_d()
    model = budget.CostModel(rules, measured_cfg, measured_d, stopped=stopped)
    default = budget.CostModel(rules, measured_cfg, stopped=stopped)
    assert (default.per_step, default.fixed_s, default.other) == (model.per_step, model.fixed_s, model.other)
    run = validate.validate_config(measured_cfg)
    est = budget.estimate(run, model, cores=2, separation_d=measured_d, stopped=stopped)
    measured = rules["all"]["elapsed_min"]
    assert abs(est["elapsed_min"] - measured) <= 0.05 * measured, (est["elapsed_min"], measured)
    # where the looks stopped is what it ran: the training runs and builds of the per-rule table, kind by kind (its
    # scoring is priced per seed: a look's seeds are scored by a group of their own)
    kinds = ("train", "model build")
    ran = {k: int(r["jobs"]) for k, r in rules.items() if k.startswith(kinds)}
    assert {k: n for k, (n, _s) in est["rows"].items() if k.startswith(kinds)} == ran
    assert stopped and budget.estimate(run, model, cores=2, separation_d=measured_d)["elapsed_min"] > est["elapsed_min"]

    longer = copy.deepcopy(read_config("config"))
    next(m for m in longer["models"] if m["id"] == "tiny-s")["train"]["steps"] = 96
    more = budget.estimate(validate.validate_config(longer), model, cores=2, separation_d=8)
    full = budget.estimate(cfg, model, cores=2, separation_d=8)["elapsed_min"]
    assert more["elapsed_min"] > full
    # what main alone costs with N seeds: more with more seeds, less than the whole DAG at 3
    main = [budget.estimate(budget.load_config(CONFIGS["config"], only="main", seeds=n), model, cores=2)["elapsed_min"]
            for n in (3, 4)]  # fmt: skip
    assert main[0] < main[1] and main[0] < full


def test_benchmarks_readme_quotes_the_published_run(tmp_path, capsys):
    """benchmarks/README.md's entries of `python -m bandpo.plan.budget`: the published run's elapsed time and the
    fixed cost of a tiny-s main training job (results/dag_rules.csv), and the seed counts `plan` estimates from that
    table, as its command line computes them; benchmarks/CHANGELOG.md's record of that run against the one before it
    and of the same seed counts."""
    from bandpo.plan import budget

    rules, measured_cfg = budget.read_measured(ROOT / "results")
    model = budget.CostModel(rules, measured_cfg, stopped=budget.stopped_pairs(ROOT / "results"))
    text = " ".join((ROOT / "benchmarks" / "README.md").read_text().split())
    log = " ".join((ROOT / "benchmarks" / "CHANGELOG.md").read_text().split())
    elapsed = f"{rules['all']['elapsed_min']:.1f} minutes"
    assert f"took **{elapsed}** first job to last" in text
    assert f"tiny-s main training job {rules['train tiny-s (main)']['fixed_s']:.2f} s" in text
    assert f"**{elapsed}** of elapsed time, first job to last" in log
    builds = f"the base-model builds {rules['model build tiny-s']['wall_s_mean']:.0f} s and "
    assert builds + f"{rules['model build tiny-m']['wall_s_mean']:.0f} s" in log
    assert f"tiny-s main training job: {rules['train tiny-s (main)']['fixed_s']:.2f} s" in log

    # the what-ifs on the measured run's own config (a later config may plan other seeds: its estimate is the
    # planner's, `test_budget_estimate_counts_the_dags_jobs_and_reproduces_the_measured_run`)
    measured_file = tmp_path / "measured.yaml"
    measured_file.write_text(yaml.safe_dump(measured_cfg))

    def estimate(only: str | None, seeds: int) -> dict:
        return budget.estimate(budget.load_config(measured_file, only=only, seeds=seeds, root=ROOT), model, cores=2)

    def minutes(only: str | None, seeds: int) -> float:
        return estimate(only, seeds)["elapsed_min"]

    most = budget.most_seeds_within(90, lambda n: estimate("main", n))
    argv = ["plan", "--config", str(measured_file), "--measured", str(ROOT / "results"), "--only", "main"]
    assert budget.main([*argv, "--budget-min", "90"]) == 0  # the command line's search is the same
    assert capsys.readouterr().out.strip().endswith(f"seeds that fit 90 min: at most {most}")
    for doc in (text, log):
        assert f"main alone at most **{most} seeds** within 90 minutes ({minutes('main', 3):.1f} min at 3)" in doc
        assert f"{minutes(None, 6):.1f} min with 6 seeds, {minutes(None, 8):.1f} with 8" in doc


def test_snakemake_lint_is_clean_but_for_the_accepted_lint():
    """`snakemake --lint` over the default config reports no lint but "Specify a conda environment or container for
    each rule" (every rule runs in the project's one environment: .ci/run, which runs the same check)."""
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--lint"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "Error" not in out, out[-3000:]
    lints = [line for line in out.splitlines() if line.startswith("    * ")]
    assert lints and all("Specify a conda environment or container for each rule" in x for x in lints), [
        x for x in lints if "conda environment" not in x
    ]


def test_the_real_lm_comparison_is_the_pilot_at_five_pairs_and_the_benchmark_times_its_step(tmp_path):
    """config/real-lm-compare.yaml (#56): the smoke profile's pinned model, the task format chosen before any RL
    run, the training settings that benchmarks/bench_real_lm_step.py times (the pilot's), 5 seed pairs in one look
    at the tiny testbed's margin, published to results/real-lm/ (the smoke keeps a folder of its own); its dry run
    schedules exactly the sweep's jobs."""
    raw = yaml.safe_load((ROOT / "config" / "real-lm-compare.yaml").read_text())
    smoke = yaml.safe_load((ROOT / "config" / "real-lm.yaml").read_text())
    cfg = validate.validate_config(copy.deepcopy(raw), root=str(ROOT))
    assert raw["models"] == smoke["models"] and cfg["base_per_seed"] is False
    assert cfg["publish_dir"] == "results/real-lm" and f"results/{smoke['profile']}" != cfg["publish_dir"]
    (data,) = raw["data"]
    assert data["levels"] == [1] and data["prompt_format"] == "answer-line"
    assert (data["n_val"], data["n_test"]) == (48, 48) and cfg["grader"]["mode"] == "strict-answer-line"
    assert cfg["eval"]["tasks"][0]["task"] == "tiny_math_answer_line"
    task_file = ROOT / "bandpo/score/lm_eval_tasks/tiny_math_answer_line.yaml"
    task = yaml.safe_load(re.sub(r"!function \S+", "fn", task_file.read_text()))
    assert task["generation_kwargs"]["temperature"] == raw["train"]["temperature"]
    assert task["generation_kwargs"]["max_gen_toks"] == raw["train"]["max_new_tokens"]
    spec = importlib.util.spec_from_file_location("bench_real_lm_step", ROOT / "benchmarks" / "bench_real_lm_step.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = argparse.Namespace(model="m", data="d", seed=0, threads=2, warmup_steps=1, steps=1, max_new_tokens=32,
                              temperature=0.7)  # fmt: skip
    timed = bench.suite_run(args, "out", "fast")
    for key, value in raw["train"].items():
        if key not in ("steps", "checkpoint_every", "val_every", "val_k"):  # the run's length; no step's numbers
            assert getattr(timed, key) == value, key
    primary = cfg["experiments"]["main"]["primary"]
    assert cfg["seeds"] == [0, 1, 2, 3, 4] and "sequential" not in primary and primary["margin"] == 2.0
    assert primary["compare"] == ["bandpo_kl", "grpo"] and not primary.get("exploratory")
    proc = snakemake(tmp_path, "-n", "--quiet", "rules", configfile=ROOT / "config" / "real-lm-compare.yaml")
    assert proc.returncode == 0, proc.output[-3000:]
    assert job_counts(proc.output) == sweep.expected_jobs(cfg) and job_counts(proc.output)["train"] == 10
    # item 5: the same comparison through verl's trainer, one seed pair: its data, model, entries, grader, held-out
    # measurement and every protocol setting the local runs set are the comparison's, but the steps (declared: 4,
    # the local runs' first held-out measurement)
    from bandpo.core.protocol import Protocol

    verl = validate.validate_config(yaml.safe_load((ROOT / "config" / "real-lm-compare-verl.yaml").read_text()),
                                    root=str(ROOT))  # fmt: skip
    assert verl["trainer"] == "verl" and verl["beside"] == cfg["publish_dir"] and verl["seeds"] == [0]
    assert all(verl[k] == cfg[k] for k in ("data", "models", "methods", "grader", "base_per_seed"))
    protocol = {f.name for f in dataclasses.fields(Protocol)}
    same = (protocol - {"steps"}) | {"val_every", "val_k"}
    assert {k: v for k, v in raw["train"].items() if k in same} == {
        k: v for k, v in verl["train"].items() if k in same and k in raw["train"]}  # fmt: skip
    assert verl["train"]["steps"] == raw["train"]["val_every"] < raw["train"]["steps"]
