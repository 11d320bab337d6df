"""The equivalence atlas (bandpo.train.atlas): the derivation's identities on the synthetic grid, checked against the
tensors directly (not through the atlas's own region functions); stop masks against the clip diagnostics; the
real-rollout path on a tiny model built here; input errors; the report's atlas section and its publication."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from bandpo import methods
from bandpo.analysis.load import load_atlas
from bandpo.core.atlas_table import COLUMNS, SLICES
from bandpo.data.tiny_math import generate_tiny_math, write_jsonl
from bandpo.methods.band import band_bounds
from bandpo.models.tiny import build_tokenizer, get_size, init_model
from bandpo.report.atlas import atlas_markdown
from bandpo.train import atlas
from bandpo.train.settings import TrainConfig, from_dict

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def grid():
    """The synthetic grid, every rule's gradient on it, and the grid's p, r and A (flat)."""
    old, new, adv, mask = atlas.synthetic_grid()
    tokens = atlas.evaluate(old, new, adv, mask)
    p, r = old.exp()[0], torch.exp(new - old)[0]
    return tokens, p, r, adv[0], (old, new, adv, mask)


def test_the_grid_covers_every_region(grid):
    tokens, p, r, adv, _ = grid
    assert (p * r <= 1 + 1e-12).all() and p.max() == 1.0 and p.min() < 1.001e-4
    assert r.min() < 1e-3 and r.max() > 29.9 and set(adv.tolist()) == {1.0, -1.0}
    for region in (  # each pair's DIFFER regions hold grid points, on both sides
        (adv > 0) & (r > 1.2) & (r <= 1.28),
        (adv < 0) & (r > 10),
        (adv > 0) & (r > 10) & (p < 0.0071),
        (adv < 0) & (r < 0.5),
        (adv > 0) & (p > 0.5) & (r > 1.3),
    ):
        assert region.sum() > 10
    assert tokens.old_log_prob.numel() == p.numel()  # no token dropped: every one has A != 0


def test_clip_higher_and_grpo_differ_exactly_for_positive_advantages_between_the_two_upper_bounds(grid):
    tokens, _, r, adv, _ = grid
    g_ch, g_grpo = tokens.grads["clip_higher"], tokens.grads["grpo"]
    region = (adv > 0) & (r > 1.2) & (r <= 1.28)
    differ = g_ch != g_grpo
    assert torch.equal(differ, region) and region.sum() > 0
    assert (g_grpo[region] == 0).all()  # GRPO stops them ...
    torch.testing.assert_close(g_ch[region], -adv[region] * r[region], rtol=1e-12, atol=0)  # ... Clip-Higher: -A r
    assert not ((adv < 0) & differ).any()  # same lower bound and dual clip


def test_the_dual_clip_only_matters_for_negative_advantages_above_c(grid):
    tokens, _, r, adv, _ = grid
    on, off = tokens.grads["grpo"], tokens.grads["grpo_no_dual"]
    region = (adv < 0) & (r > 10)
    assert torch.equal(on != off, region) and region.sum() > 0
    assert (on[region] == 0).all()
    torch.testing.assert_close(off[region], -adv[region] * r[region], rtol=1e-12, atol=0)


@pytest.mark.parametrize("div, p_cap", [("kl", 0.00714), ("tv", 0.05 / 9)])
def test_bandpo_and_dppo_share_the_trust_region_and_differ_only_in_the_tails(grid, div, p_cap):
    tokens, p, r, adv, (old, *_) = grid
    g_band, g_dppo = tokens.grads[f"bandpo_{div}"], tokens.grads[f"dppo_{div}"]
    stop_band, stop_dppo = g_band == 0, g_dppo == 0
    assert not (stop_dppo & ~stop_band).any()  # DPPO's stop set is inside BandPO's
    differ = ~torch.isclose(g_band, g_dppo, rtol=1e-12, atol=0)
    assert torch.equal(differ, stop_band & ~stop_dppo)  # where both pass, the gradients are equal
    # BandPO stops more exactly at its cap (A > 0, rare tokens) and at the dual clip (A < 0, r > 10)
    _, r_hi = band_bounds(old[0], div, 0.05)
    cap = (adv > 0) & (r > 10) & (r <= r_hi)
    tail = (adv < 0) & (r > 10)
    assert torch.equal(differ, cap | tail) and cap.sum() > 0 and tail.sum() > 0
    assert p[cap].max() < p_cap and ((adv > 0) & (r > 10) & (p > p_cap)).sum() > 0  # the cap binds on rare tokens
    torch.testing.assert_close(g_dppo[tail], -adv[tail] * r[tail].clamp(max=20), rtol=1e-12, atol=0)
    # the same trust region: the stops for A > 0 up to the cap are Band's r > r_hi, for A < 0 Band's r < r_lo
    lo, hi = band_bounds(old[0], div, 0.05)
    assert torch.equal(stop_dppo & (adv > 0), (adv > 0) & (r > hi))
    assert torch.equal(stop_dppo & (adv < 0), (adv < 0) & (r < lo))


def test_the_atlas_table_finds_no_unexplained_token_on_the_grid(grid):
    tokens = grid[0]
    table = atlas.atlas_table({"synthetic": tokens})
    assert list(table.columns) == list(COLUMNS)
    assert len(table) == len(atlas.PAIRS) * len(SLICES)
    assert (table["unexplained"] == 0).all()
    everything = table[table["slice"] == "all"].set_index("pair")
    assert (everything["predicted"] > 0).all() and (everything["grad_differ"] == everything["predicted"]).all()
    assert everything.loc["clip_higher~grpo", "stopped_only_a"] == 0  # Clip-Higher never stops more than GRPO
    t = table.set_index(["pair", "slice"])
    for pair in everything.index:  # the slices add up: adv>0 + adv<0 = all = p<0.2 + p>=0.2
        for col in ("tokens", "stopped_a", "stopped_b", "stopped_both", "grad_differ", "predicted"):
            total = t.loc[(pair, "all"), col]
            assert t.loc[(pair, "adv>0"), col] + t.loc[(pair, "adv<0"), col] == total
            assert t.loc[(pair, "p<0.2"), col] + t.loc[(pair, "p>=0.2"), col] == total


def test_a_wrong_derivation_is_caught(grid):
    """The unexplained count can fail: a pair whose derived region is off by the cap counts the difference."""
    tokens = grid[0]
    wrong = atlas.Pair("bandpo_kl~dppo_kl", "bandpo_kl", "dppo_kl", atlas.dual_clip_gap)  # forgets the cap region
    parts = atlas.evaluate(*grid[4], pairs=[wrong])
    rows = atlas.compare(parts, wrong, "synthetic")
    assert rows[0]["unexplained"] == rows[0]["grad_differ"] - rows[0]["predicted"] > 0
    assert tokens.grads["bandpo_kl"].shape == parts.grads["bandpo_kl"].shape


@pytest.mark.parametrize("name", ["bandpo_kl", "bandpo_tv", "clip_higher", "grpo", "grpo_no_dual"])
def test_stop_masks_of_bound_rules_are_their_clip_diagnostics(name):
    """On random tensors with A = 0 tokens and padding: the atlas's stop mask is `stopped_diagnostics`'s measure,
    and for a bounds rule the surrogate's own clip fractions (upper; lower + dual)."""
    gen = torch.Generator().manual_seed(3)
    old = torch.log(torch.rand(6, 40, generator=gen, dtype=torch.float64).clamp(1e-4, 1.0))
    r = torch.exp(torch.randn(6, 40, generator=gen, dtype=torch.float64) * 1.2).clamp(max=1 / old.exp())
    new = (old + r.log()).clamp(max=0.0)
    adv = torch.randint(-1, 2, (6, 40), generator=gen).double()  # -1, 0, +1
    mask = torch.rand(6, 40, generator=gen) < 0.8
    rule = atlas.RULES[name]
    grad = atlas.token_grads(rule, old, new, adv, mask)
    stopped = atlas.stop_mask(grad, adv, mask)
    n = int(mask.sum())
    diag = methods.stopped_diagnostics(grad, adv, old, mask)
    assert float(diag["stopped_frac"]) == pytest.approx(int(stopped.sum()) / n, abs=1e-12)
    lp = new.clone().requires_grad_()
    _, metrics = rule.resolved().loss(old, lp, adv, mask)
    pos, neg = int((stopped & (adv > 0)).sum()), int((stopped & (adv < 0)).sum())
    assert pos > 0 and neg > 0
    assert float(metrics["clipfrac_upper"]) == pytest.approx(pos / n, abs=1e-12)
    assert float(metrics["clipfrac_lower"] + metrics["clipfrac_dual"]) == pytest.approx(neg / n, abs=1e-12)


@pytest.mark.parametrize("name", ["dppo_kl", "dppo_tv"])
def test_stop_masks_of_dppo_are_verls_clip_fraction(grid, name):
    """DPPO's stopped tokens are the tokens verl's mask removes (its pg_clipfrac; every grid token has A != 0)."""
    old, new, adv, mask = grid[4]
    lp = new.clone().requires_grad_()
    _, metrics = atlas.RULES[name].resolved().loss(old, lp, adv, mask)
    stopped = int((grid[0].grads[name] == 0).sum())
    n = mask.sum().item()
    assert float(metrics["verl/pg_clipfrac"]) == pytest.approx(stopped / n, abs=0.1 / n)  # verl's float32 mean


def test_inputs_are_checked():
    old = torch.log(torch.full((2, 3), 0.5, dtype=torch.float64))
    adv, mask = torch.ones(2, 3, dtype=torch.float64), torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="log_prob: 1 NaN / inf"):
        atlas.evaluate(old, old.clone().index_put_((torch.tensor([0]), torch.tensor([1])), torch.tensor(math.nan,
                       dtype=torch.float64)), adv, mask)  # fmt: skip
    with pytest.raises(ValueError, match="advantages: 1 NaN / inf"):
        atlas.evaluate(old, old, adv.clone().index_put_((torch.tensor([1]), torch.tensor([2])), torch.tensor(math.inf,
                       dtype=torch.float64)), mask)  # fmt: skip
    with pytest.raises(ValueError, match="above 0 on valid tokens: not log-probabilities"):
        atlas.evaluate(old, old + 1.0, adv, mask)
    with pytest.raises(ValueError, match=r"advantages has shape \(2, 2\)"):
        atlas.evaluate(old, old, adv[:, :2], mask)
    # padding may hold anything
    bad = old.clone()
    bad[0, 0] = math.nan
    mask[0, 0] = False
    assert atlas.evaluate(bad, old, adv, mask).old_log_prob.numel() == 5


# ----------------------------------------------------------------------------------------------------------------
# Real rollouts of the local trainer on a tiny model built here


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """A tiny random Llama (seconds to build) and a small tiny-math train split, both made here."""
    base = tmp_path_factory.mktemp("atlas-assets")
    tokenizer = build_tokenizer()
    model = init_model(get_size("tiny-test"), tokenizer, seed=0)
    model.save_pretrained(base / "model")
    tokenizer.save_pretrained(base / "model")
    write_jsonl(base / "data" / "train.jsonl", generate_tiny_math(seed=1, n_train=64, n_val=8, n_test=8)["train"])
    return base / "model", base / "data"


SMALL_RUN = {"prompts_per_step": 4, "samples_per_prompt": 4, "max_new_tokens": 12, "reward": "random", "lr": 0.05,
             "steps": 4}  # fmt: skip


def small_run(model, data, seed: int = 0) -> TrainConfig:
    """A short GRPO run of the measured kind (its spec, as the run plan writes one)."""
    return from_dict({"model": str(model), "data": str(data), "out": "-", "seed": seed, "progress": False,
                      **SMALL_RUN})  # fmt: skip


def test_real_rollouts_are_the_trainers_minibatches(assets):
    model, data = assets
    batches = list(atlas.rollout_batches(small_run(model, data), steps=2))
    assert len(batches) == 2 * 4  # updates_per_step = 4 mini-batches per step
    for i, (old, new, adv, mask) in enumerate(batches):
        assert old.shape == new.shape == adv.shape == mask.shape and mask.dtype == torch.bool
        ratio = torch.exp(new - old)[mask]
        if i % 4 == 0:  # the first update of a step is on-policy
            torch.testing.assert_close(ratio, torch.ones_like(ratio), rtol=0, atol=1e-4)
    assert max(float((torch.exp(n - o)[m] - 1).abs().max()) for o, n, _, m in batches) > 1e-3  # later ones are not


def test_real_rollout_atlas_runs_and_is_deterministic(assets):
    model, data = assets
    first = atlas.build_atlas(small_run(model, data), steps=2)
    again = atlas.build_atlas(small_run(model, data), steps=2)
    pd.testing.assert_frame_equal(first, again)
    real = first[first["source"] == "real"]
    assert len(real) == len(atlas.PAIRS) * len(SLICES) and (real["batches"] == 8).all()
    assert (real["tokens"] > 0).any() and (first["unexplained"] == 0).all()
    other = atlas.build_atlas(small_run(model, data, seed=1), steps=2)
    assert not other[other["source"] == "real"]["tokens"].equals(real["tokens"].reset_index(drop=True))


def test_cli(assets, tmp_path, capsys):
    model, data = assets
    out = tmp_path / "atlas.csv"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(dataclasses.asdict(small_run(model, data))))
    small = ["--spec", str(spec)]
    args = ["--out", str(out), "--no-progress"]
    assert atlas.main([*args, "--data", str(data), "--model", str(tmp_path / "nothing")]) == 2
    assert "error: model folder not found (no config.json)" in capsys.readouterr().err and not out.exists()
    assert atlas.main([*args, "--steps", "9", *small]) == 2
    assert "error: steps must be in [1, 4] (the run's steps), got 9" in capsys.readouterr().err
    assert atlas.main(["--out", str(out)]) == 2  # neither --spec, --model nor --synthetic-only
    assert "give --spec, or --model and --data" in capsys.readouterr().err
    cmd = [sys.executable, "-m", "bandpo.train.atlas"]
    proc = subprocess.run([*cmd, *args, "--steps", "1", *small], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    table = load_atlas(out)
    assert set(table["source"]) == {"synthetic", "real"} and (table[table["source"] == "real"]["batches"] == 4).all()
    assert proc.stdout.splitlines() == atlas.summary(table)


# ----------------------------------------------------------------------------------------------------------------
# The report: the atlas section of the leaderboard and its publication


def test_markdown_escapes_and_counts(tmp_path):
    row = dict.fromkeys(COLUMNS, 0)
    row.update(pair="a|b", rule_a="<A>", rule_b="B", source="real", slice="adv>0", tokens=400, stopped_both=3,
               stopped_only_a=1, grad_differ=1, grad_max_abs_diff=2.5, predicted=1)  # fmt: skip
    md = atlas_markdown(pd.DataFrame([row], columns=list(COLUMNS)))
    assert "- `a\\|b`: A = &lt;A&gt;; B = B" in md
    assert "| a\\|b | real | adv&gt;0 | 400 | 3 (0.75%) | 1 (0.25%) | 0 | 1 (0.25%) | 2.5 | 1 (0.25%) | 0 |" in md
    (tmp_path / "other.csv").write_text("pair,source\nx,real\n")
    with pytest.raises(ValueError, match="not an atlas table, missing column"):
        load_atlas(tmp_path / "other.csv")
    assert load_atlas(ROOT / "no-such-atlas.csv") is None


def test_report_shows_and_publishes_the_atlas(tmp_path):
    """`build_report` puts a results folder's atlas.csv on the page and in the Markdown; `publish` copies it."""
    from published_runs import published_experiments, rebuild_run_outputs

    from bandpo import report

    results = rebuild_run_outputs(ROOT / "results", tmp_path)
    table = atlas.atlas_table({"synthetic": atlas.evaluate(*atlas.synthetic_grid())})
    table.to_csv(results / "atlas.csv", index=False)
    report.build_report(results, n_resamples=20, experiments=published_experiments(ROOT / "results"))
    md = (results / "leaderboard.md").read_text()
    assert "## Equivalence atlas" in md and atlas_markdown(table) in md
    page = (results / "leaderboard.html").read_text()
    assert '<section id="atlas">' in page and 'href="#atlas"' in page and "bandpo_kl~dppo_kl" in page
    assert "adv&gt;0" in page and "adv>0" not in page  # escaped
    written = report.publish(results, tmp_path / "top")
    assert tmp_path / "top" / "atlas.csv" in written
    assert (tmp_path / "top" / "atlas.csv").read_bytes() == (results / "atlas.csv").read_bytes()
    # without an atlas, no section (the page rebuilt from the published tables: tests/unit/test_report.py)
    board = pd.read_csv(results / "leaderboard.csv", keep_default_na=False, na_values=[""])
    bare = report.Board(board)
    assert "Equivalence atlas" not in report.leaderboard_markdown(bare) + report.leaderboard_html(bare)
