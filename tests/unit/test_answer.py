"""The page answers at a glance (issue #68): the answer section at the top of every leaderboard page, what each verdict
word shows, rows in the order of their paired difference on common seeds, an entry identical to the baseline, the
unpaired seeds in one line per group, and the published page itself."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from bandpo.analysis.leaderboard import identical_to_baseline
from bandpo.report import verdicts
from bandpo.report.columns import by_paired_difference, seed_ranges, verdict_text, with_seeds
from bandpo.report.notes import unpaired_lines
from bandpo.stats.rule import BETTER, NOT_BETTER, UNDECIDED, WORDS

ROOT = Path(__file__).resolve().parents[2]


def _primary(**kw) -> pd.Series:
    row = {"experiment": "main", "model": "tiny-s", "metric": "mean@8", "role": "primary", "rule": "sequential",
           "treatment": "bandpo_kl", "control": "grpo", "n": 5, "look": 1, "looks": 4, "margin": 0.02,
           "difference": -0.023, "ci_low": -0.047, "ci_high": 0.002, "verdict": NOT_BETTER,
           "label": "not better by 2 points (look 1 of 4, 5 pairs)", "n_needed": float("nan"),
           "rerun_better": 0.0, "rerun_not_better": 1.0, "rerun_undecided": 0.0}  # fmt: skip
    row.update(kw)
    return pd.Series(row)


def test_each_verdict_says_what_it_shows_and_what_it_does_not():
    did, did_not = verdicts.shows(_primary())
    assert did == "no gain of 2.0 points or more"
    assert did_not == "worse ([-4.7, +0.2] includes 0); equivalence within ±2.0 ([-4.7, +0.2] reaches beyond)"
    # an interval below 0 and inside ±δ: the row says so, as an estimate, not as the verdict's claim
    _, did_not = verdicts.shows(_primary(ci_low=-0.015, ci_high=-0.001))
    assert "lies below 0: an estimate, not the verdict" in did_not and "equivalence by the rule" in did_not
    assert "lies within ±2.0" in did_not
    # better shows a gain above 0, not a gain of δ, unless the interval lies above δ
    did, did_not = verdicts.shows(_primary(verdict=BETTER, ci_low=0.004, ci_high=0.05, difference=0.027))
    assert did == "a gain above 0" and did_not == "a gain of 2.0 points or more ([+0.4, +5.0] reaches below 2.0)"
    _, did_not = verdicts.shows(_primary(verdict=BETTER, ci_low=0.03, ci_high=0.05))
    assert did_not == "—"  # the interval lies above δ: the estimate shows the gain of δ too
    did, did_not = verdicts.shows(_primary(verdict=UNDECIDED, rule="single look", n_needed=337.0))
    assert did == "nothing either way; a single look decides from n = 337"
    assert did_not == "a direction ([-4.7, +0.2] holds both signs)"
    # every word the pages print is defined once, by what it shows
    assert set(WORDS) >= {BETTER, NOT_BETTER, UNDECIDED} and all("shows" in w or "no" in w for w in WORDS.values())


def test_tier_rows_give_every_tier_its_verdict_look_pairs_and_rerun():
    rows = pd.DataFrame([_primary(), _primary(model="tiny-m", n=10, look=2, looks=3),
                         _primary(model="smollm2-135m", rule="single look", look=float("nan"), verdict=UNDECIDED,
                                  label="undecided (a single look decides from n = 337)", rerun_better=0.28,
                                  rerun_not_better=0.22, rerun_undecided=0.5),
                         _primary(metric="entropy_final", model="tiny-s")])  # fmt: skip
    out = verdicts.tier_rows(rows)
    assert [r[0] for r in out] == ["tiny-s", "tiny-m", "smollm2-135m"]  # the entropy row is not a tier
    assert out[0][1:4] == ["not better by 2 points", "look 1 of 4, 5 pairs",
                           "bandpo_kl − grpo = -2.3 [-4.7, +0.2] points"]  # fmt: skip
    assert out[2][1:3] == ["undecided", "single look, 5 pairs"] and out[2][-1] == "0.28 / 0.22 / 0.50"
    assert verdicts.tier_rows(rows, "real-lm")[0][0] == "tiny-s (real-lm)"
    md = verdicts.section_markdown(out)
    assert md.startswith(verdicts.START) and md.endswith(verdicts.END) and md.count("\n| ") == 4


def test_the_section_is_written_once_at_the_top_and_rewritten_in_place(tmp_path):
    pd.DataFrame([_primary()]).to_csv(tmp_path / "primary.csv", index=False)
    (tmp_path / "real-lm").mkdir()
    pd.DataFrame([_primary(model="smollm2-135m")]).to_csv(tmp_path / "real-lm" / "primary.csv", index=False)
    (tmp_path / "leaderboard.md").write_text("# Title\n\n## tiny-s\n", encoding="utf-8")
    (tmp_path / "leaderboard.html").write_text("<main><header>h</header>\n<section>t</section>", encoding="utf-8")
    assert len(verdicts.write_section(tmp_path)) == 2
    md = (tmp_path / "leaderboard.md").read_text(encoding="utf-8")
    assert md.index(verdicts.START) < md.index("## tiny-s") and "| smollm2-135m (real-lm) |" in md
    html = (tmp_path / "leaderboard.html").read_text(encoding="utf-8")
    assert html.index("</header>") < html.index('id="answer"') < html.index("<section>t")
    assert verdicts.write_section(tmp_path) == []  # rewritten in place: nothing changes the second time
    assert (tmp_path / "leaderboard.md").read_text(encoding="utf-8").count(verdicts.START) == 1


def _board() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A tiny-s section: grpo on seeds 0-4, x on 0-4 (worse on 0-2, much better on 3-4), y on 0-2."""
    per_seed = {"grpo": [0.5] * 5, "x": [0.40, 0.40, 0.40, 0.9, 0.9], "y": [0.45, 0.45, 0.45]}
    key = {"experiment": "main", "subset": "", "model": "tiny-s", "name": "mean@8"}
    scores = pd.DataFrame([{**key, "entry": e, "seed": s, "value": v} for e, vs in per_seed.items()
                           for s, v in enumerate(vs)])  # fmt: skip
    diffs = {"grpo": 0.0, "x": 0.1, "y": -0.05}
    table = pd.DataFrame([{"experiment": "main", "subset": "", "model": "tiny-s", "entry": e, "baseline": "grpo",
                           "n_seeds": len(per_seed[e]), "mean@8": 0.5, "mean@8_diff": diffs[e]}
                          for e in ("y", "x", "grpo")])  # fmt: skip
    return table, scores


def test_rows_are_ordered_by_the_paired_difference_on_common_seeds():
    table, scores = _board()
    shown = by_paired_difference(with_seeds(table, scores))
    # x's own Δ (over its 5 pairs) is the larger, but on the seeds every row has (0-2) y is ahead
    assert list(shown["entry"]) == ["grpo", "y", "x"]
    assert shown.set_index("entry")["seeds"].to_dict() == {"grpo": "0-4", "y": "0-2", "x": "0-4"}
    assert math.isclose(shown.set_index("entry").loc["x", "diff_common"], -0.1)
    assert by_paired_difference(table)["entry"].tolist() == ["grpo", "x", "y"]  # without scores: its own Δ
    # a row identical to the baseline on its seeds (0-2) narrows no one's common seeds: it is 0 on any seeds
    same = table[table.entry == "y"].assign(**{"mean@8_diff": 0.0, "mean@8_diff_sd": 0.0})
    rows = scores[scores.entry == "y"].assign(value=0.5)
    shown = with_seeds(pd.concat([table[table.entry != "y"], same]), pd.concat([scores[scores.entry != "y"], rows]))
    assert math.isclose(shown.set_index("entry").loc["x", "diff_common"], 0.1)  # over x's 5 pairs, not 0-2
    assert shown.set_index("entry").loc["y", "diff_common"] == 0.0
    assert seed_ranges([5, 0, 1, 2, 7, 8]) == "0-2, 5, 7-8"


def test_an_entry_identical_to_the_baseline_gets_no_verdict():
    r = {"entry": "offpolicy_mask", "baseline": "grpo", "mean@8_diff": 0.0, "mean@8_diff_sd": 0.0,
         "mean@8_n_pairs": 3, "mean@8_label": "not better by 2 points"}  # fmt: skip
    assert identical_to_baseline(r, "mean@8")
    assert verdict_text(r, "mean@8").startswith("identical to grpo on every seed")
    r["mean@8_diff_sd"] = 0.01  # a difference somewhere: the rule's verdict stands
    assert not identical_to_baseline(r, "mean@8") and verdict_text(r, "mean@8") == "not better by 2 points"


def test_unpaired_seeds_are_one_line_per_group():
    rows = [{"experiment": "main", "model": "tiny-s", "entry": e, "baseline": "grpo", "mean@8_unpaired": u,
             "pass@8_unpaired": u} for e, u in (("a", "seed(s) 3, 4 only in grpo"), ("b", "seed(s) 3, 4 only in grpo"),
                                                ("c", ""))]  # fmt: skip
    lines = unpaired_lines(pd.DataFrame(rows))
    assert lines == ["tiny-s: seed(s) 3, 4 only in grpo: left out of the paired comparison of 2 entries (a, b) with "
                     "grpo, for mean@8, pass@8."]  # fmt: skip


@pytest.mark.parametrize("page", ["leaderboard.md", "leaderboard.html"])
def test_the_published_page_leads_with_every_tiers_answer(page):
    """results/leaderboard.{md,html}: the answer section comes before the tables and holds one row per tier, the
    embedded profile's primaries and the real LM's, each with its verdict words from primary.csv."""
    text = (ROOT / "results" / page).read_text(encoding="utf-8")
    first_table = "## tiny-m" if page.endswith(".md") else 'id="model-0"'
    assert verdicts.START in text and text.index(verdicts.START) < text.index(first_table)
    expected = verdicts.published_rows(ROOT / "results")
    assert {r[0] for r in expected} >= {"tiny-s", "tiny-m", "smollm2-135m (real-lm)"}
    section = text[text.index(verdicts.START) : text.index(verdicts.END)]
    want = verdicts.section_markdown(expected) if page.endswith(".md") else verdicts.section_html(expected)
    assert section + verdicts.END == want.removesuffix("\n")


def test_rank_prints_the_same_definitions():
    from bandpo.decide.rank import rank_markdown

    text = rank_markdown(pd.DataFrame(), [], "half_clip", "results")
    assert all(WORDS[w] in text for w in (BETTER, NOT_BETTER, UNDECIDED))


def test_the_forest_plot_lists_the_entries_in_the_tables_order():
    from bandpo.report.forest import forest_data

    table, scores = _board()
    cols = {"mean@8_diff_t_ci_low": -0.1, "mean@8_diff_t_ci_high": 0.1, "mean@8_diff_sd": 0.05}
    table = table.assign(**cols)
    shown = with_seeds(table, scores)
    assert list(forest_data(shown)["entry"]) == ["y", "x"] == list(by_paired_difference(shown)["entry"])[1:]
    assert list(forest_data(table)["entry"]) == ["x", "y"]  # without the scores: by each entry's own difference
