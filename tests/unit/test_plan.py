"""The run plan (bandpo.plan.runs): a config read once into typed jobs, each written to the spec file its job reads."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path

import pytest
import yaml

from bandpo.core.protocol import Protocol
from bandpo.plan.config_files import command_line_configfiles, config_file_error
from bandpo.plan.runs import Plan, load_plan
from bandpo.plan.validate import ConfigError, validate_config
from bandpo.score.spec import read_spec as read_eval_spec
from bandpo.train.settings import TrainConfig, read_spec
from bandpo.verl.spec import VerlRun
from bandpo.verl.spec import read_spec as read_verl_spec

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "config").glob("*.yaml"))


def smoke() -> dict:
    return yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_shipped_config_plans_typed_runs_that_round_trip_through_their_spec_files(path, tmp_path, monkeypatch):
    """Each committed config builds its plan, and every spec file reads back as the job reads it: the same
    dataclass, field for field."""
    monkeypatch.chdir(tmp_path)  # spec files are written relative to the working directory, as the DAG's are
    plan = load_plan(path, root=ROOT)
    written = plan.write_specs()
    assert written and all(Path(p).is_file() for p in written)
    for (model, slot, seed), run in plan.train_specs.items():
        spec = plan.spec_file("train", model, slot, seed)
        if plan.trainer == "verl":
            assert isinstance(run, VerlRun) and read_verl_spec(spec) == run
        else:
            assert isinstance(run, TrainConfig) and read_spec(spec) == run
    for file in Path(plan.plan_dir, "eval").rglob("*.json"):
        read_eval_spec(file).validate()


def test_one_protocol_for_both_trainers():
    """The shared settings are declared once (`Protocol`), with one default: both trainers extend it."""
    shared = {f.name: f.default for f in dataclasses.fields(Protocol)}
    for cls in (TrainConfig, VerlRun):
        assert issubclass(cls, Protocol)
        assert {f.name: f.default for f in dataclasses.fields(cls) if f.name in shared} == shared


def test_settings_merge_top_model_entry_experiment_and_reach_the_spec(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = smoke()
    raw["train"] = {**raw.get("train", {}), "lr": 1e-3, "weight_decay": 0.02, "grad_clip": 0.5}
    raw["models"][0].setdefault("train", {})["lr"] = 2e-3
    raw["methods"][0]["train"] = {"weight_decay": 0.03}
    raw["experiments"]["random-reward"].setdefault("train", {})["grad_clip"] = 0.7
    plan = Plan(validate_config(raw))
    model, entry = raw["models"][0]["id"], raw["methods"][0]["id"]
    main = plan.train_spec(model, entry, 0)
    assert (main.lr, main.weight_decay, main.grad_clip) == (2e-3, 0.03, 0.5)
    control = plan.train_spec(model, f"{entry}@random-reward", 0)
    assert (control.lr, control.weight_decay, control.grad_clip, control.reward) == (2e-3, 0.03, 0.7, "random")
    plan.write_specs()
    spec = json.loads(Path(plan.spec_file("train", model, entry, 0)).read_text())
    assert (spec["lr"], spec["weight_decay"], spec["grad_clip"]) == (2e-3, 0.03, 0.5)


def test_a_spec_file_is_rewritten_only_where_its_settings_changed(tmp_path, monkeypatch):
    """What makes Snakemake rerun exactly the jobs a setting reaches: unchanged spec files keep their time."""
    monkeypatch.chdir(tmp_path)
    raw = smoke()
    Plan(validate_config(raw)).write_specs()
    times = {p: p.stat().st_mtime_ns for p in Path("results").rglob("*.json")}
    assert Plan(validate_config(raw)).write_specs() == []
    changed = copy.deepcopy(raw)
    changed["experiments"]["random-reward"]["train"]["steps"] = 2
    rewritten = Plan(validate_config(changed)).write_specs()
    assert rewritten and all("@random-reward" in p for p in rewritten)
    assert all(p.stat().st_mtime_ns == t for p, t in times.items() if str(p) not in rewritten)
    assert {os.path.basename(os.path.dirname(p)) for p in rewritten} == {
        slot for slot in Plan(validate_config(changed)).slots if slot.endswith("@random-reward") and "base" not in slot
    }


def test_clip_comparisons_need_their_margin_and_entries_of_the_experiment():
    """``primary.clip_compare`` (issue #67, item 4) names entries of the experiment and needs ``clip_margin``
    (points of the rare tokens), as ``entropy_compare`` needs ``entropy_margin``: clear errors before any work."""
    raw = smoke()
    primary = raw["experiments"]["main"]["primary"]
    primary |= {"clip_compare": ["bandpo_kl"], "clip_margin": 0.5}
    assert validate_config(raw)["experiments"]["main"]["primary"]["clip_margin"] == 0.5
    del primary["clip_margin"]
    with pytest.raises(ConfigError, match=r"primary\.clip_compare.*compares at primary\.clip_margin: declare it"):
        validate_config(raw)
    primary |= {"clip_compare": ["nobody"], "clip_margin": 0.5}
    with pytest.raises(ConfigError, match=r"clip_compare\[0\].*'nobody' is not among the experiment's methods"):
        validate_config(raw)
    primary |= {"clip_compare": ["bandpo_kl"], "clip_margin": 150}
    with pytest.raises(ConfigError, match=r"clip_margin"):
        validate_config(raw)


def test_an_entry_may_keep_fewer_seeds_than_its_experiment():
    """A method entry's ``seeds`` keep it to those of each experiment's seeds (issue #68: an entry identical to GRPO
    keeps its 3 while the others gain 2): its runs and score groups follow, the base model and the other entries
    keep the experiment's; on a primary pair's entry, or with no seed in common, a clear error before any work."""
    from bandpo import study
    from bandpo.plan import sweep

    raw = smoke()
    raw["methods"].append({"id": "clip_higher", "method": "clip_higher", "seeds": [1]})
    cfg = validate_config(raw)
    assert study.slot_seeds(cfg, "main", "clip_higher") == [1]
    assert study.slot_seeds(cfg, "main", "base") == [0, 1]
    runs = {(m, slot, s) for m, slot, s in sweep.runs(cfg) if slot.startswith("clip_higher")}
    assert {s for _m, _slot, s in runs} == {1}
    bad = smoke()
    bad["methods"][1]["seeds"] = [0]
    with pytest.raises(ConfigError, match=r"methods\[1\]\.seeds.*'bandpo_kl' is in the primary pair"):
        validate_config(bad)
    bad = smoke()
    bad["methods"].append({"id": "clip_higher", "method": "clip_higher", "seeds": [7]})
    with pytest.raises(ConfigError, match=r"methods\[2\]\.seeds.*share none with experiment 'main'"):
        validate_config(bad)


def test_a_bad_setting_is_reported_at_the_key_that_set_it():
    raw = smoke()
    raw["methods"][1]["train"] = {"lr": -1.0}
    with pytest.raises(ConfigError, match=r"config error at methods\[1\]\.train\.lr \(the run .*\): lr: must be"):
        Plan(validate_config(raw))
    raw = smoke()
    raw["train"] = {**raw.get("train", {}), "samples_per_prompt": 1}
    with pytest.raises(ConfigError, match=r"config error at train\.samples_per_prompt \(the run .*\): samples_per"):
        Plan(validate_config(raw))
    raw = smoke()
    raw["train"] = {**raw.get("train", {}), "out": "elsewhere"}
    with pytest.raises(ConfigError, match=r"train\.out: training setting 'out' is set by the workflow itself"):
        validate_config(raw)


def test_a_resumed_runs_elapsed_time_is_the_sum_of_its_starts(tmp_path):
    """`budget.elapsed_minutes`: first to last time stamp of a snakemake log; for a run stopped and resumed (a log
    per start), the sum of the spans, not counting the time between the starts."""
    from bandpo.plan.budget import elapsed_minutes

    first, second = tmp_path / "a.snakemake.log", tmp_path / "b.snakemake.log"
    first.write_text("[Sun Dec  6 08:41:00 2026]\nrule data:\n[Sun Dec  6 08:49:30 2026]\nFinished job 1.\n")
    second.write_text("[Sun Dec  6 09:00:00 2026]\nrule train:\n[Sun Dec  6 10:00:00 2026]\nFinished job 2.\n")
    assert elapsed_minutes(first) == 8.5
    assert elapsed_minutes(first, second) == 68.5
    second.write_text("no stamps\n")
    with pytest.raises(ValueError, match="fewer than two time stamps"):
        elapsed_minutes(first, second)


def test_an_overlay_is_read_after_the_config_it_extends(tmp_path, monkeypatch):
    """An overlay (``extends``) states only what it changes: merged over its base as Snakemake merges two
    --configfile (mappings at every depth, lists replaced), and a command that gives it without its base before it
    stops with one line naming the command that reads both. config/real-lm-next.yaml (issue #67) is one: the pilot's
    settings with 500 test problems, 10 seed pairs, an exploratory primary and the mechanism's secondaries."""
    from bandpo.plan.config_files import merge_config, overlay_error, read_config

    assert merge_config({"a": {"b": 1, "c": [1, 2]}, "d": 1}, {"a": {"c": [3]}, "e": 2}) == {
        "a": {"b": 1, "c": [3]}, "d": 1, "e": 2}  # fmt: skip
    monkeypatch.chdir(ROOT)
    base, over = "config/real-lm-compare.yaml", "config/real-lm-next.yaml"
    assert overlay_error([base, over]) is None and overlay_error([base]) is None
    assert overlay_error([over]) == (f"Invalid config ({over}): it extends {base}, which must come before it: "
                                     f"snakemake --configfile {base} {over}")  # fmt: skip
    assert overlay_error([over, base]) is not None
    pilot, cfg = validate_config(read_config(base)), validate_config(read_config(over))
    assert cfg["models"] == pilot["models"] and cfg["methods"] == pilot["methods"] and cfg["train"] == pilot["train"]
    assert cfg["seeds"] == list(range(10)) and cfg["data"][0]["n_test"] == 500 and cfg["profile"] != pilot["profile"]
    primary = cfg["experiments"]["main"]["primary"]
    assert primary["exploratory"] and primary["compare"] == ["bandpo_kl", "grpo"] and primary["margin"] == 2.0
    assert primary["clip_compare"] == primary["entropy_compare"] == ["bandpo_kl"]
    assert cfg["train"].get("sampler_draws", "stream") == pilot["train"].get("sampler_draws", "stream")
    plan = load_plan(over, root=ROOT)  # the plan reads an overlay with its base
    assert len(plan.train_specs) == 20


def test_a_config_file_is_read_as_snakemake_reads_it_with_one_line_per_error(tmp_path):
    """bandpo.plan.config_files, the workflow profile's check of every --configfile (the snakemake runs:
    tests/workflow/test_workflow.py): JSON first (tabs allowed), else YAML; a syntax error names line and column."""
    cases = {
        "ok.yaml": ("profile: x\nseeds: [0]\n", None),
        "tabs.json": ('{\n\t"profile": "x"\n}\n', None),
        "tabs.yaml": ("profile: x\n\tseeds: [0]\n", "Invalid config ({}:2:1): YAML syntax error: found character "
                      "'\\t' that cannot start any token"),
        "indent.yaml": ("profile: x\n  seeds: [0]\n", "Invalid config ({}:2:8): YAML syntax error: mapping values "
                        "are not allowed here"),
        "scalar.yaml": ("just text\n", "Invalid config ({}): not a mapping of config keys (the file holds a str)"),
    }  # fmt: skip
    for name, (text, expected) in cases.items():
        (tmp_path / name).write_text(text)
        path = tmp_path / name
        assert config_file_error(path) == (expected.format(path) if expected else None), name
    assert config_file_error(tmp_path / "nope.yaml") == f"Invalid config ({tmp_path / 'nope.yaml'}): no such file"
    argv = ["-n", "all", "--cores", "2", "--configfile", "a.yaml", "b.yaml", "--config", "only=main"]
    assert command_line_configfiles(argv) == ["a.yaml", "b.yaml"]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_the_typed_study_reads_every_config_and_round_trips_through_its_json(path):
    """`bandpo.study.Study`: each committed config's experiments as typed, read-only objects, margins and designs in
    fractions; the JSON the workflow passes to the report reads back as the same study, and a config's experiments
    passed without the plan's numbers are refused."""
    from types import MappingProxyType

    from bandpo.plan.config_files import read_config
    from bandpo.study import MAIN, PlannedExperiment, Study, primary_margin

    cfg = validate_config(copy.deepcopy(read_config(path)), root=str(ROOT))
    study = Study.from_config(cfg)
    data = json.loads(json.dumps(study.to_json()))
    assert Study.from_json(data) == study and Study.from_json(data).to_json() == data
    xp = MAIN if MAIN in study.experiments else next(iter(study.experiments))  # offpolicy, probe: no main
    main = study.experiments[xp]
    for model, margin in main.margins.items():
        assert 0 < margin < 1  # points became a fraction, once
        if xp == MAIN:
            assert margin == primary_margin(cfg, MAIN, model)
    assert main.margin("margins", "no-such-model") != main.margin("margins", "no-such-model")  # NaN
    assert isinstance(main.margins, MappingProxyType) and isinstance(study.experiments, MappingProxyType)
    with pytest.raises(dataclasses.FrozenInstanceError):
        main.margins = {}  # type: ignore[misc]
    with pytest.raises(TypeError):
        main.margins["x"] = 0.5  # type: ignore[index]
    primary = cfg["experiments"][xp].get("primary") or {}
    if primary.get("margin") is not None:
        with pytest.raises(ValueError, match="run plan's 'margins'"):
            PlannedExperiment.from_json(xp, cfg["experiments"][xp])  # the config's points, not the plan's
