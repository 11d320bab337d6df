"""The real LM's metric and horizon chosen by the cost of a decision (issue #67, item 2;
bandpo.report.metric_cost)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bandpo.report import metric_cost as mc

ROOT = Path(__file__).resolve().parents[2]
REAL_LM = ROOT / "results" / "real-lm"


def test_a_saturating_curve_gives_back_its_asymptote_and_a_climbing_one_says_it_is_not_identified():
    t = np.array([4.0, 8, 12, 16, 20, 24, 40, 60])
    y = mc.saturating(t, 0.7, 10.0, 2.0, 0.2)
    a, bound = mc.fit_asymptote(t, y, 0.2)
    assert a == pytest.approx(0.7, abs=1e-3) and not bound
    a, bound = mc.fit_asymptote(t[:6], 0.2 + 0.02 * t[:6], 0.2)  # a straight climb: no asymptote in sight
    assert bound


def test_a_row_plans_the_design_where_it_can_and_bounds_it_where_it_cannot():
    small = mc.cost_row("x", True, 0.01, 5, 30.0)
    assert small["n_max"] >= small["n_single"] >= 2 and small["n_max"] % mc.K == 0
    assert small["pairs_at_0"] <= small["n_max"] and small["pairs_at_delta"] <= small["n_max"]
    assert small["hours_n_max"] == pytest.approx(small["n_max"] * 0.5) and small["within_budget"] == (
        small["hours_n_max"] <= mc.BUDGET_HOURS)  # fmt: skip
    big = mc.cost_row("y", True, 0.125, 5, 30.0)
    assert big["n_single"] > mc.MAX_PLANNED and "n_max" not in big and not big["within_budget"]
    assert big["planning_sd"] > 12.5  # the upper bound of an SD from 5 pairs lies above it
    assert "planning_sd" not in mc.cost_row("z", True, float("nan"), 0, 30.0)


def test_the_choice_rule_takes_the_cheapest_that_answers():
    rows = pd.DataFrame([
        {**mc.cost_row("fast but early", False, 0.005, 5, 10.0), "answers": False},
        mc.cost_row("final", True, 0.01, 5, 10.0),
        mc.cost_row("final, noisier", True, 0.02, 5, 10.0),
    ])  # fmt: skip
    assert rows.loc[1, "within_budget"]
    assert mc.choice(rows).startswith("final: the cheapest that answers the question")
    expensive = pd.DataFrame([mc.cost_row("final", True, 0.125, 5, 30.0)])
    assert "exploratory, declared before its runs" in mc.choice(expensive)


def test_the_published_table_measures_what_the_published_primary_says():
    table = mc.cost_table(REAL_LM).set_index("candidate")
    final = table.iloc[0]
    primary = pd.read_csv(REAL_LM / "primary.csv").query("metric == 'mean@8'").iloc[0]
    assert final["sd"] == pytest.approx(primary["sd"] * 100, rel=1e-4) and final["pairs"] == primary["n"]
    big = table.loc[f"final test mean@8 at 24 steps on {mc.BIG_TEST} problems"]
    assert big["sd"] <= final["sd"] and big["minutes_a_pair"] > final["minutes_a_pair"]
    assert math.isnan(table.iloc[-1]["sd"])  # the plateau rule: not measurable from 24-step runs
    md = mc.table_markdown(table.reset_index())
    assert md.count("\n| ") == len(table) and md.endswith(mc.DESIGN_NOTE)  # the header, then a row per candidate


def test_the_pair_and_margin_come_from_the_folders_config(tmp_path):
    assert mc.primary_pair(REAL_LM) == (("bandpo_kl", "grpo"), pytest.approx(0.02))
    (tmp_path / "provenance.json").write_text('{"config": {"experiments": {"main": {}}}}', encoding="utf-8")
    with pytest.raises(ValueError, match="no primary comparison"):
        mc.primary_pair(tmp_path)


def test_the_command_line_prints_the_table_and_refuses_a_folder_without_scores(tmp_path, capsys):
    from bandpo.report.cli import main

    assert main(["metric-cost", "--results", str(REAL_LM)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| candidate |") and "\nChoice: " in out
    assert main(["metric-cost", "--results", str(tmp_path)]) == 2
    assert "holds no scores.csv" in capsys.readouterr().err
