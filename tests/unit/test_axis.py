"""Design axes (config ``axes``; bandpo.analysis.axis, bandpo.decide.selection): reuse of main's runs, the
pre-registered rules (a)-(c) on synthetic runs whose answer is known, the selection rule, and the trainer's
--set-file."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from bandpo.analysis import axis
from bandpo.decide import selection
from bandpo.decide.cli import main as decide_main
from bandpo.plan import sweep, validate
from bandpo.report.axis import axis_panels

AXES = {"off": {"key": "updates_per_step", "label": "D", "cells": ["off-1", "off-4", "off-8"],
                "primary": {"task": "t", "control": "grpo", "rules": {}}}}  # fmt: skip
CONFIGS = {"config": Path(__file__).resolve().parents[2] / "config" / "config.yaml"}


def read_config(name: str) -> dict:
    return yaml.safe_load(CONFIGS[name].read_text())


EXPERIMENTS = {
    "main": {"reuse": []},
    "off-1": {"train": {"updates_per_step": 1}, "reuse": ["base"], "models": ["m"], "seeds": [0, 1, 2]},
    "off-4": {"train": {"updates_per_step": 4}, "reuse": ["grpo", "arm"], "models": ["m"], "seeds": [0, 1, 2]},
    "off-8": {"train": {"updates_per_step": 8}, "reuse": [], "models": ["m"], "seeds": [0, 1, 2]},
    "sep": {"select": {"axis": "off", "rule": "largest-learning", "entry": "grpo", "fallback": 4}},
}


def _metrics(rows):
    """Per-step metric rows (5 steps per run) from {(experiment, entry, seed): (clip_upper_low, entropy)}."""
    out = []
    for (xp, entry, seed), (clip, ent) in rows.items():
        for step in range(1, 6):
            out.append({"experiment": xp, "model": "m", "entry": entry, "seed": seed, "step": step,
                        "entropy": ent, "clipfrac_upper/p0.0-0.2": clip, "reward_mean": 0.5})  # fmt: skip
    return pd.DataFrame(out)


def _scores(values):
    return pd.DataFrame([{"experiment": xp, "model": "m", "entry": e, "seed": s, "task": "t", "metric": "mean",
                          "k": 8.0, "value": v} for (xp, e, s), v in values.items()])  # fmt: skip


def test_with_reuse_copies_mains_rows_into_the_cell():
    frame = pd.DataFrame([{"experiment": "main", "model": "m", "entry": e, "seed": s, "v": i}
                          for i, (e, s) in enumerate([("grpo", 0), ("arm", 1), ("dcpo", 0), ("grpo", 5)])])  # fmt: skip
    out = axis.with_reuse(frame, EXPERIMENTS)
    cell = out[out["experiment"] == "off-4"]
    assert sorted(zip(cell["entry"], cell["seed"], strict=True)) == [
        ("arm", 1),
        ("grpo", 0),
    ]  # seed 5 is not the cell's
    assert len(out[out["experiment"] == "main"]) == 4


def _outcomes(slope_clip: float, slope_ent: float, noise: float = 0.002):
    rng = np.random.default_rng(0)
    rows = {}
    for seed in range(3):
        for xp, d in (("off-1", 1), ("off-4", 4), ("off-8", 8)):
            rows[(xp, "grpo", seed)] = (slope_clip * d + rng.normal(0, noise), 0.3)
            if d > 1:
                rows[(xp, "arm", seed)] = (0.0, 0.3 + slope_ent * d + rng.normal(0, noise))
    return axis.run_outcomes(_metrics(rows), _scores({}), AXES, EXPERIMENTS)


def test_rules_find_an_engaged_axis_and_a_mechanism():
    res = axis.axis_results(_outcomes(0.01, 0.01), AXES)
    a = res[res["rule"] == "a engagement"].iloc[0]
    assert a["holds"] is True and a["estimate"] == pytest.approx(0.01, abs=1e-3) and a["ci_low"] > 0
    b = res[res["rule"] == "b mechanism"].iloc[0]
    assert b["arm"] == "arm" and b["holds"] is True and b["estimate"] == pytest.approx(0.01, abs=1e-3)
    top = res[(res["rule"] == "entropy auc diff") & (res["value"] == 8)].iloc[0]
    assert top["estimate"] == pytest.approx(0.08, abs=5e-3) and top["n"] == 3 and top["mde"] > 0
    assert axis.axis_verdicts(res) == ["off, m: (a) holds and (b) holds for arm"]


def test_rules_report_engagement_without_mechanism_and_no_engagement():
    res = axis.axis_results(_outcomes(0.01, 0.0), AXES)
    assert res[res["rule"] == "b mechanism"]["holds"].iloc[0] is False
    assert "still shows no mechanism" in axis.axis_verdicts(res)[0]
    res = axis.axis_results(_outcomes(0.0, 0.01), AXES)
    assert res[res["rule"] == "a engagement"]["holds"].iloc[0] is False
    assert "does not engage clipping" in axis.axis_verdicts(res)[0]


def _select_scores(gains):
    """Base scores 0.2 per seed (main's base row, reused by off-1) and grpo's per cell: base + gain + seed noise."""
    values = {("main", "base", s): 0.2 for s in range(3)}
    for xp, gain in gains.items():
        for s in range(3):
            src = "main" if xp == "off-4" else xp  # off-4 reuses main's grpo
            values[(src, "grpo", s)] = 0.2 + gain + 0.01 * (s - 1)
    return _scores(values)


def test_selection_takes_the_largest_value_that_still_learns():
    setting, table = selection.select_setting(_select_scores({"off-1": 0.1, "off-4": 0.1, "off-8": 0.0}),
                                         EXPERIMENTS, AXES, "sep")  # fmt: skip
    assert setting == {"updates_per_step": 4}
    assert table.set_index("value")["qualifies"].to_dict() == {1.0: True, 4.0: True, 8.0: False}
    assert table[table["selected"]]["value"].tolist() == [4.0]
    setting, _ = selection.select_setting(_select_scores({"off-1": 0.1, "off-4": 0.1, "off-8": 0.1}), EXPERIMENTS, AXES,
                                     "sep")  # fmt: skip
    assert setting == {"updates_per_step": 8}


def test_selection_falls_back_when_nothing_learns(tmp_path):
    setting, table = selection.select_setting(_select_scores({"off-1": -0.05, "off-4": 0.0, "off-8": 0.0}),
                                         EXPERIMENTS, AXES, "sep")  # fmt: skip
    assert setting == {"updates_per_step": 4} and not table["selected"].any()


def test_selection_revision_2_never_picks_a_cell_without_the_compared_arms():
    """Revision 1 chose D = 1 when only the on-policy null learned (the 0bafd06 publication); revision 2 reads only
    the cells that run both compared arms, so it falls back to 4 there, and otherwise picks as revision 1."""
    xps = {**EXPERIMENTS,
           "off-1": {**EXPERIMENTS["off-1"], "methods": ["grpo"]},
           "off-4": {**EXPERIMENTS["off-4"], "methods": ["grpo", "arm"]},
           "off-8": {**EXPERIMENTS["off-8"], "methods": ["grpo", "arm"]},
           "sep": {"primary": {"compare": ["arm", "grpo"]},
                   "select": {**EXPERIMENTS["sep"]["select"], "rule": "largest-learning-compared"}}}  # fmt: skip
    only_null = _select_scores({"off-1": 0.1, "off-4": 0.0, "off-8": 0.0})
    assert selection.select_setting(only_null, EXPERIMENTS, AXES, "sep")[0] == {"updates_per_step": 1}  # revision 1
    setting, table = selection.select_setting(only_null, xps, AXES, "sep")
    assert setting == {"updates_per_step": 4} and not table["selected"].any()
    assert table["value"].tolist() == [4.0, 8.0]  # the null cell is not read
    setting, table = selection.select_setting(
        _select_scores({"off-1": 0.1, "off-4": 0.1, "off-8": 0.1}), xps, AXES, "sep"
    )
    assert setting == {"updates_per_step": 8} and table[table["selected"]]["value"].tolist() == [8.0]
    *_, chosen = axis_panels(axis.axis_results(_outcomes(0.01, 0.01), AXES), AXES, {"sep": table},
                                  {"sep": "largest-learning-compared"})  # fmt: skip
    assert chosen.lines == (selection.SELECT_RULES["largest-learning-compared"],)
    bad = {**xps, "sep": {**xps["sep"], "select": {**xps["sep"]["select"], "rule": "largest"}}}
    with pytest.raises(ValueError, match="unknown selection rule 'largest'"):
        selection.select_setting(only_null, bad, AXES, "sep")


def test_select_command_needs_scores(tmp_path):
    (tmp_path / "eval").mkdir()
    code = decide_main(
        [
            "select",
            "--results",
            str(tmp_path),
            "--experiment",
            "sep",
            "--experiments-json",
            json.dumps(EXPERIMENTS),
            "--axes-json",
            json.dumps(AXES),
            "--out",
            str(tmp_path / "s.json"),
        ]
    )
    assert code == 2 and not (tmp_path / "s.json").exists()


# ----------------------------------------------------------------------------------------------------------------
# the config


# The separation run as the last publication that ran it declared it (commit 73d879f's results/provenance.json; since
# #55 it is pooled into main's pair, and the present publication has none) and its regime, fixed before that run.
SEPARATION = {
    "description": "separation run in the regime the published off-policy axis selects (rule revision 3: D = 4, "
    "main's setting), on fresh seeds (10-14; the primary pair 10-19), the five bound rules",
    "models": ["tiny-s"],
    "methods": ["grpo", "clip_higher", "dcpo", "bandpo_kl", "bandpo_upper"],
    "seeds": [10, 11, 12, 13, 14],
}
SEPARATION_TRAIN = {"updates_per_step": 4}


def _cfg():
    """The default config with the off-policy axis of config/offpolicy.yaml back in it and the separation run
    (`SEPARATION`) selecting its regime from the axis (rule revision 3), as the default DAG ran them until #37: the
    composite the axis's validation and reuse rules are exercised on."""
    raw = copy.deepcopy(read_config("config"))
    off = yaml.safe_load((CONFIGS["config"].parent / "offpolicy.yaml").read_text())
    raw["experiments"].update(off["experiments"])
    raw["axes"] = off["axes"]
    sep = raw["experiments"]["separation"] = copy.deepcopy(SEPARATION)
    sep["primary"] = {
        "metric": "final mean@8",
        "rule": "the verdict rule",
        "compare": ["bandpo_kl", "grpo"],
        "margin": 2.0,
    }
    sep["select"] = {"axis": "offpolicy", "rule": "largest-learning-compared", "entry": "grpo", "fallback": 4,
                     "min_gain": 2.0}  # fmt: skip
    return raw


def test_offpolicy_axis_config():
    """config/offpolicy.yaml: the four cells at D = 1, 4, 8, 16 (D = 1 GRPO alone), each training its own runs
    (main is not run there); in the composite with main the cell at main's setting reuses main's runs."""
    cfg = validate.validate_config(yaml.safe_load((CONFIGS["config"].parent / "offpolicy.yaml").read_text()))
    ax, xps = cfg["axes"]["offpolicy"], cfg["experiments"]
    assert [xps[c]["train"]["updates_per_step"] for c in ax["cells"]] == [1, 4, 8, 16] and list(xps) == ax["cells"]
    assert xps["offpolicy-D1"]["methods"] == ["grpo"]  # D = 1: on-policy, every bound method gives GRPO's run
    arms = {"grpo", "clip_higher", "bandpo_kl", "bandpo_upper"}
    assert all(set(xps[c]["methods"]) == arms and len(xps[c]["seeds"]) >= 3 for c in ax["cells"][1:])
    assert all(not xps[c]["reuse"] for c in ax["cells"])
    assert set(ax["primary"]["rules"]) == {"engagement", "mechanism", "accuracy", "verdicts"}
    composite = validate.validate_config(_cfg())
    xps = composite["experiments"]
    assert set(xps["offpolicy-D4"]["reuse"]) == arms  # main's setting: main's runs
    assert xps["offpolicy-D1"]["reuse"] == ["base"] and xps["offpolicy-D8"]["reuse"] == []
    sep = xps["separation"]
    assert len(sep["seeds"]) >= 5 and not set(sep["seeds"]) & set(xps["offpolicy-D8"]["seeds"])
    assert {"grpo", "clip_higher", "dcpo", "bandpo_kl", "bandpo_upper"} <= set(sep["methods"])
    runs = sweep.runs(composite)
    assert not [r for r in runs if r[1].endswith("@offpolicy-D4")]
    assert ("tiny-m", "dppo_kl", 0) not in runs and ("tiny-s", "dppo_kl", 0) in runs  # entry models: tiny-s only


def test_reuse_needs_every_setting_equal():
    raw = _cfg()
    raw["experiments"]["offpolicy-D4"]["train"]["lr"] = 1e-3
    assert validate.validate_config(raw)["experiments"]["offpolicy-D4"]["reuse"] == []
    raw = _cfg()
    raw["experiments"]["offpolicy-D4"]["seeds"] = [0, 1, 2, 99]  # a seed main runs for no entry
    assert validate.validate_config(raw)["experiments"]["offpolicy-D4"]["reuse"] == []
    only = validate.validate_config({**_cfg(), "only": "offpolicy"})  # an axis id names its cells; main is not run
    assert set(only["experiments"]) == set(only["axes"]["offpolicy"]["cells"])
    assert only["experiments"]["offpolicy-D4"]["reuse"] == []


def test_reuse_compares_each_entrys_seeds_with_mains():
    """With primary.seeds an entry's runs are main's when its seeds (study.slot_seeds) are among main's seeds of
    that entry: main's pair running more seeds keeps the cell's reuse; a cell's own pair with seeds main's pair lacks
    trains and scores that pair itself (a rule of its own), the other entries are still main's."""
    raw = yaml.safe_load((CONFIGS["config"].parent / "smoke.yaml").read_text())
    raw["methods"].append({"id": "clip_higher", "method": "clip_higher"})
    raw["seeds"] = [0, 1]
    cell = raw["experiments"]["off-D4"]  # main's settings
    cell.update(methods=["grpo", "bandpo_kl", "clip_higher"], seeds=[0, 1])
    raw["experiments"]["main"]["primary"].pop("seeds", None)
    raw["experiments"]["main"]["primary"].pop("sequential", None)  # the seeds below in one look (reuse, not looks)
    assert validate.validate_config(raw)["experiments"]["off-D4"]["reuse"] == ["grpo", "bandpo_kl", "clip_higher"]
    raw["experiments"]["main"]["primary"]["seeds"] = [0, 1, 2, 3]
    cfg = validate.validate_config(raw)
    assert cfg["experiments"]["off-D4"]["reuse"] == ["grpo", "bandpo_kl", "clip_higher"]
    assert cfg["experiments"]["off-D1"]["reuse"] == ["base"]  # the base models keep main's own seeds
    cell["primary"] = {"metric": "m", "rule": "r", "compare": ["bandpo_kl", "grpo"], "seeds": [0, 1, 2, 3, 4]}
    cfg = validate.validate_config(raw)
    assert cfg["experiments"]["off-D4"]["reuse"] == ["clip_higher"]
    assert [(g["primary"], g["slots"]) for g in sweep.eval_seed_groups(cfg, "off-D4")] == [
        (True, ["grpo@off-D4", "bandpo_kl@off-D4"])
    ]
    assert sweep.expected_jobs(cfg)[sweep.eval_rule_name("eval_group", "off-D4", primary=True)] == 2
    assert {(s, r) for _m, s, r in sweep.runs(cfg) if s.endswith("@off-D4")} == {
        (f"{e}@off-D4", r) for e in ("grpo", "bandpo_kl") for r in range(5)
    }
    cell["primary"]["seeds"] = [0, 1, 2, 3]  # main's pair's seeds: main's runs again
    assert validate.validate_config(raw)["experiments"]["off-D4"]["reuse"] == ["grpo", "bandpo_kl", "clip_higher"]


AXIS_CASES = {
    "cell_without_key": (lambda c: c["experiments"]["offpolicy-D8"]["train"].pop("updates_per_step"),
                         r"experiments\.offpolicy-D8\.train: a cell of axis 'offpolicy' sets updates_per_step"),
    "decreasing": (lambda c: c["axes"]["offpolicy"].update(cells=["offpolicy-D1", "offpolicy-D8", "offpolicy-D4",
                                                                    "offpolicy-D16"]),
                   r"axes\.offpolicy\.cells: .*increasing order"),
    "unknown_cell": (lambda c: c["axes"]["offpolicy"]["cells"].append("nope"), r"axes\.offpolicy\.cells\[4\]"),
    "select_entry": (lambda c: c["experiments"]["separation"]["select"].update(entry="dcpo"),
                     r"separation\.select\.entry: entry 'dcpo' is not in cell"),
    "select_sets_key": (lambda c: c["experiments"]["separation"].setdefault("train", {}).update(updates_per_step=2),
                        r"separation\.train: updates_per_step is chosen by select"),
    "entry_models": (lambda c: c["methods"][1].update(models=["tiny-m"]),
                     r"experiments\.separation\.methods\[1\]: entry 'clip_higher' runs on none"),
    "only_select_alone": (lambda c: c.update(only="separation"), r"only: 'separation' selects from axis 'offpolicy'"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(AXIS_CASES))
def test_bad_axis_config_is_rejected_naming_the_field(case):
    raw = _cfg()
    mutate, pattern = AXIS_CASES[case]
    mutate(raw)
    with pytest.raises(validate.ConfigError, match=pattern):
        validate.validate_config(raw)


def test_set_file_overrides_the_trainer(tmp_path):
    import json

    from bandpo.train.settings import read_spec

    spec, path = tmp_path / "spec.json", tmp_path / "s.json"
    spec.write_text(json.dumps({"model": "m", "data": "d", "out": "o"}))
    path.write_text('{"updates_per_step": 8}')
    assert read_spec(spec, [str(path)]).updates_per_step == 8
    path.write_text("[8]")
    with pytest.raises(ValueError, match=re.escape(f"--set-file {path}: expected a JSON object")):
        read_spec(spec, [str(path)])
    path.write_text('{"updates_per_stp": 8}')
    with pytest.raises(ValueError, match="did you mean 'updates_per_step'"):
        read_spec(spec, [str(path)])
    assert _cfg()["axes"]["offpolicy"]["key"] == "updates_per_step"


def test_panels_show_the_rules_the_per_value_table_and_the_selection():
    res = axis.axis_results(_outcomes(0.01, 0.01), AXES)
    _, sel = selection.select_setting(
        _select_scores({"off-1": 0.1, "off-4": 0.1, "off-8": 0.0}), EXPERIMENTS, AXES, "sep"
    )
    rules, per_value, chosen = axis_panels(res, AXES, {"sep": sel})
    assert "Verdict: off, m: (a) holds and (b) holds for arm" in rules.lines
    assert list(rules.table["holds"]) == ["yes", "yes"]
    assert list(per_value.table["D"]) == ["4", "8"] and set(per_value.table["arm"]) == {"arm"}
    top = per_value.table["entropy diff, mean over steps (nats)"].iloc[1]
    assert float(top.split()[0]) == pytest.approx(0.08, abs=5e-3) and top.count("[") == 1
    assert set(per_value.table["mean@k diff (points)"]) == {"not scored"}  # no lm-eval scores in this frame
    assert chosen.heading == "Experiment sep: the regime the axis selected (D = 4)"
    assert list(chosen.table["interval above 0"]) == ["yes", "yes", "no"]


def test_secondary_entropy_pairs_by_seed():
    from bandpo.analysis.experiments import run_pair_results

    per_run = pd.DataFrame([{"experiment": "sep", "model": "m", "entry": e, "seed": s, "entropy_final": v + 0.01 * s}
                            for e, v in (("grpo", 0.1), ("arm", 0.2), ("other", 0.1)) for s in range(4)])  # fmt: skip
    specs = {"sep": {"primary": {"compare": ["arm", "grpo"], "entropy_compare": ["arm", "other"],
                                 "entropy_margin": 0.02}, "entropy_margins": {"m": 0.02}}}  # fmt: skip
    rows = run_pair_results(per_run, specs).set_index("treatment")
    # the single look of the verdict rule (unadjusted here; its Holm family: family_verdicts): higher entropy than
    # the control by at least the margin?
    assert rows.loc["arm", "difference"] == pytest.approx(0.1) and rows.loc["arm", "verdict"] == "better"
    assert rows.loc["arm", "label"] == "higher" and rows.loc["arm", "margin"] == 0.02
    assert rows.loc["arm", "n_pairs"] == 4 and rows.loc["other", "difference"] == pytest.approx(0.0)
    assert rows.loc["other", "verdict"] == "not better by the margin" and set(rows["control"]) == {"grpo"}
    assert rows.loc["other", "label"] == "not higher by 0.02 nats" and set(rows["role"]) == {"secondary"}


def test_rule_revision_3_on_the_published_axis_chooses_main_setting():
    """The last publication's separation run (`SEPARATION_TRAIN`) fixed its regime at D = 4 under rule
    revision 3 (GRPO's paired gain over the base model must have a 95% interval above min_gain = 2 points). It was
    fixed from the axis of 2026-12-02 (then in results/; git history); recomputed here on its republication under
    the fixed numerics (results/offpolicy/): D = 4 qualifies, D = 8 (the cell a rerun on another CPU model chose
    under revision 2, whose interval lies below 2 points) and D = 16 do not."""
    from docs.blocks.axes import SEPARATION_RULE

    root = Path(__file__).resolve().parents[2]
    published = json.loads((root / "results" / "offpolicy" / "provenance.json").read_text())["config"]
    scores = pd.read_csv(root / "results" / "offpolicy" / "scores.csv")
    experiments = copy.deepcopy(published["experiments"])
    experiments["separation"] = {"select": SEPARATION_RULE, "primary": {"compare": ["bandpo_kl", "grpo"]}}
    assert SEPARATION_RULE["min_gain"] == 2.0
    setting, table = selection.select_setting(scores, experiments, published["axes"], "separation")
    assert setting == SEPARATION_TRAIN == {"updates_per_step": 4}
    by_d = table.set_index("value")
    assert by_d.loc[4, "ci_low"] > 0.02 and by_d.loc[8, "ci_low"] < 0.02
    assert list(by_d["qualifies"]) == [True, False, False]
