"""Ranking a new method entry against the published runs (bandpo.decide.rank): the base-model check and the
paired table, on scores made here. The whole route through the DAG: tests/workflow/test_workflow.py
(test_a_new_method_ranks_against_the_published_runs_without_rerunning_them, marker dag)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from bandpo.decide.rank import base_check, plan_margins, published_margins, rank_frame, rank_markdown


def _scores(rows):
    return pd.DataFrame(
        [
            {
                "experiment": "main",
                "subset": "",
                "model": m,
                "entry": e,
                "seed": s,
                "task": "tiny_math",
                "name": n,
                "value": v,
            }
            for m, e, s, n, v in rows
        ]  # fmt: skip
    )


def _model(folder, payload: bytes):
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(payload)
    return folder


def test_base_check_compares_the_weights_with_the_published_record(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _model(tmp_path / "resources/models/m/seed0", b"a")
    _model(tmp_path / "resources/models/m/seed1", b"b")
    published = tmp_path / "published"
    published.mkdir()
    with pytest.raises(FileNotFoundError, match="provenance.json not found"):
        base_check(published, "m", ["resources/models/m/seed0"])
    from bandpo.core.provenance import weights_sha256

    record = [{"path": "resources/models/m/seed0", "weights_sha256": weights_sha256("resources/models/m/seed0")},
              {"path": "resources/models/m/seed1", "weights_sha256": {"model.safetensors": "0" * 64}}]  # fmt: skip
    (published / "provenance.json").write_text(json.dumps({"git_commit": "abc1234def", "base_models": record}))
    ok = base_check(published, "m", ["resources/models/m/seed0"])
    assert ok["match"] and ok["folders"][0]["status"] == "identical" and ok["published_commit"] == "abc1234def"
    both = base_check(published, "m", ["resources/models/m/seed0", "resources/models/m/seed1"])
    assert not both["match"] and both["folders"][1]["status"] == "weights differ from the published ones"
    _model(tmp_path / "resources/models/m/seed2", b"c")
    missing = base_check(published, "m", ["resources/models/m/seed2"])
    assert not missing["match"] and missing["folders"][0]["status"] == "not in the published provenance"
    (tmp_path / "resources/models/empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no weights file"):
        base_check(published, "m", ["resources/models/empty"])


def test_rank_frame_pairs_with_the_published_runs_or_with_a_rerun():
    theirs = _scores(
        [("s", "grpo", seed, "mean@8", v) for seed, v in enumerate([0.30, 0.32, 0.31])]
        + [("s", "clip", seed, "mean@8", v) for seed, v in enumerate([0.40, 0.41, 0.42])]
        + [("s", "base", seed, "mean@8", 0.9) for seed in range(3)]  # the base row never ranks
    )
    ours = _scores(
        [("s", "new", seed, "mean@8", v) for seed, v in enumerate([0.35, 0.38, 0.36])]
        + [("s", "grpo", seed, "mean@8", v) for seed, v in enumerate([0.50, 0.50, 0.50])]  # a rerun's GRPO
    )
    check = {"model": "s", "match": True, "folders": [], "published_commit": "abc1234"}
    table = rank_frame(ours, theirs, "new", [check], metrics=["mean@8"], margins={"s": 0.02})
    row = table.iloc[0]
    assert row["baseline_source"] == "published" and row["n_pairs"] == 3
    # +5.3 points, steady: the one-sided test of no gain rejects: better (one test: Holm changes nothing)
    assert row["diff"] == pytest.approx((0.05 + 0.06 + 0.05) / 3) and row["verdict"] == "better"
    assert row["p_better_holm"] == row["p_better"] < 0.05 and row["label"] == "better"
    assert row["baseline_mean"] == pytest.approx(0.31)
    assert (row["place"], row["of"]) == (2, 3)  # below clip, above grpo; base left out
    page = rank_markdown(table, [check], "new", "published")
    assert "(commit `abc1234`)" in page and "| s | mean@8 | 3 | 36.3 | 31.0 (published) | +5.3 [" in page
    assert "| 2.0 | better | 2 of 3 |" in page

    rerun = rank_frame(ours, theirs, "new", [{**check, "match": False}], metrics=["mean@8"], margins={"s": 0.02})
    rerun = rerun.iloc[0]  # paired with a GRPO run here that scored 50: far below it, not better by the margin
    assert rerun["baseline_source"] == "rerun here" and rerun["verdict"] == "not better by the margin"
    assert rerun["label"] == "not better by 2 points" and math.isnan(rerun["place"])
    # no margin: no test of H1, so a loss reads undecided, not "not better"
    bare = rank_frame(ours, theirs, "new", [{**check, "match": False}], metrics=["mean@8"]).iloc[0]
    assert math.isnan(bare["margin"]) and bare["verdict"] == "undecided" and "| — | undecided |" in rank_markdown(
        pd.DataFrame([bare]), [check], "new", "published")  # fmt: skip
    with pytest.raises(ValueError, match="no pass@8 of entry 'new'"):
        rank_frame(ours, theirs, "new", [check], metrics=["pass@8"])
    with pytest.raises(ValueError, match="no mean@8 of 'grpo' on model 's' in the published scores"):
        rank_frame(ours, theirs[theirs["entry"] != "grpo"], "new", [check], metrics=["mean@8"])


def test_the_ranking_is_one_holm_family_over_models_and_metrics():
    """Every model and metric ranked is one family: each one-sided test's p-values Holm-adjusted over its rows."""
    from bandpo.stats.rule import holm

    rows = []
    for m, gain in (("s", 0.03), ("t", 0.004)):
        rows += [(m, "grpo", seed, n, 0.30 + 0.01 * seed) for seed in range(4) for n in ("mean@8", "pass@8")]
        rows += [(m, "new", seed, n, 0.30 + 0.01 * seed + gain + 0.004 * (-1) ** seed) for seed in range(4)
                 for n in ("mean@8", "pass@8")]  # fmt: skip
    scores = _scores(rows)
    checks = [{"model": m, "match": False, "folders": []} for m in ("s", "t")]
    table = rank_frame(scores, scores, "new", checks, margins={"s": 0.02, "t": 0.02})
    assert len(table) == 4
    for col in ("p_better", "p_not_better"):
        assert table[f"{col}_holm"].tolist() == pytest.approx(holm(table[col].to_numpy()).tolist())
    assert (table["n_needed"] >= 2).all() and set(table["verdict"]) <= {
        "better",
        "not better by the margin",
        "undecided",
    }


def test_margins_come_from_the_plan_not_primary_csv(tmp_path):
    """rank's margins are main's from the run plan (`report_experiments`: the config's points as fractions): rule
    rank passes this config's, the command line falls back to the published config's, never primary.csv."""
    margin = {"tiny-s": 2.0, "tiny-m": 3.0}
    cfg = {"experiments": {"main": {"models": ["tiny-s", "tiny-m"],
                                    "primary": {"compare": ["bandpo_kl", "grpo"], "margin": margin}}}}  # fmt: skip
    assert plan_margins(cfg) == pytest.approx({"tiny-s": 0.02, "tiny-m": 0.03})
    assert plan_margins({"experiments": {"other": {}}}) == {}
    with pytest.raises(FileNotFoundError, match="provenance.json not found"):
        published_margins(tmp_path)
    (tmp_path / "provenance.json").write_text(json.dumps({"config": cfg}))
    pd.DataFrame({"experiment": ["main"], "model": ["tiny-s"], "role": ["primary"], "margin": [0.09]}).to_csv(
        tmp_path / "primary.csv", index=False)  # fmt: skip
    assert published_margins(tmp_path) == pytest.approx({"tiny-s": 0.02, "tiny-m": 0.03})  # not primary.csv's 0.09
