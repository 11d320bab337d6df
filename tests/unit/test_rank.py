"""Ranking a new method entry against the published runs (bandpo.decide.rank): the base-model check and the
paired table, on scores made here. The whole route through the DAG: tests/workflow/test_workflow.py
(test_a_new_method_ranks_against_the_published_runs_without_rerunning_them, marker dag)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from bandpo.decide.rank import base_check, published_margins, rank_frame, rank_markdown


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
    table = rank_frame(ours, theirs, "new", [check], metrics=["mean@8"])
    row = table.iloc[0]
    assert row["baseline_source"] == "published" and row["n_pairs"] == 3
    assert row["diff"] == pytest.approx((0.05 + 0.06 + 0.05) / 3) and row["verdict"] == "better"
    assert row["baseline_mean"] == pytest.approx(0.31)
    assert (row["place"], row["of"]) == (2, 3)  # below clip, above grpo; base left out
    page = rank_markdown(table, [check], "new", "published")
    assert "(commit `abc1234`)" in page and "| s | mean@8 | 3 | 36.3 | 31.0 (published) | +5.3 [" in page

    rerun = rank_frame(ours, theirs, "new", [{**check, "match": False}], metrics=["mean@8"]).iloc[0]
    assert rerun["baseline_source"] == "rerun here" and rerun["verdict"] == "worse"
    assert math.isnan(rerun["place"])
    # the published margin turns a difference smaller than it into "equivalent" (90% interval inside +-margin)
    within = rank_frame(ours, theirs, "new", [check], metrics=["mean@8"], margins={"s": 0.10}).iloc[0]
    assert within["margin"] == 0.10 and within["p_equivalence"] < 0.05 and within["verdict"] == "equivalent"
    assert "| ±10.0 | equivalent |" in rank_markdown(pd.DataFrame([within]), [check], "new", "published")
    assert math.isnan(row["margin"]) and "| — | better |" in page
    with pytest.raises(ValueError, match="no pass@8 of entry 'new'"):
        rank_frame(ours, theirs, "new", [check], metrics=["pass@8"])
    with pytest.raises(ValueError, match="no mean@8 of 'grpo' on model 's' in the published scores"):
        rank_frame(ours, theirs[theirs["entry"] != "grpo"], "new", [check], metrics=["mean@8"])


def test_published_margins_are_mains_primary_margins(tmp_path):
    assert published_margins(tmp_path) == {}  # nothing published: no equivalence
    pd.DataFrame(
        {
            "experiment": ["main", "main", "separation", "probe"],
            "model": ["tiny-s", "tiny-m", "tiny-s", "tiny-s"],
            "role": ["primary", "primary", "primary", "demoted"],
            "margin": [0.02, float("nan"), 0.05, 0.09],
        }
    ).to_csv(tmp_path / "primary.csv", index=False)
    assert published_margins(tmp_path) == {"tiny-s": 0.02}
