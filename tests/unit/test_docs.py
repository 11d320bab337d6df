"""The documentation against the files it describes: every generated block of README.md and docs/*.md equals what
`python -m bandpo.report docs` makes of results/ today, the numbers and claims written in prose are recomputed
from results/ (or from the code they describe), and the README's commands are those CI runs."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from bandpo.report import docs
from bandpo.report.stats import t_interval

ROOT = Path(__file__).resolve().parents[2]
RESULTS = docs.Results(ROOT / "results")
DOCS = sorted({p for pattern in docs.DOC_FILES for p in ROOT.glob(pattern)})


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def test_docs_are_generated_from_results():
    stale = docs.update(ROOT, check=True)
    assert not stale, (
        f"stale generated blocks in {[str(p.relative_to(ROOT)) for p in stale]}: run `python -m bandpo.report docs`"
    )


def test_render_rewrites_blocks_in_place(tmp_path):
    text = (
        "a <!-- generated:n-runs -->999<!-- /generated:n-runs --> b\n"
        "<!-- generated:primary -->\nold\n<!-- /generated:primary -->\n"
    )
    out = docs.render(text, RESULTS)
    assert out.startswith(f"a <!-- generated:n-runs -->{len(RESULTS.runs)}<!-- /generated:n-runs --> b\n")
    assert (
        "old" not in out
        and "\n| experiment | model | metric |" in out
        and out.endswith("<!-- /generated:primary -->\n")
    )
    assert docs.render(out, RESULTS) == out
    with pytest.raises(KeyError, match="unknown generated block 'nope'"):
        docs.render("<!-- generated:nope --><!-- /generated:nope -->", RESULTS)
    # the command: rewrites a stale doc, --check reports it
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(text)
    assert docs.update(tmp_path, ROOT / "results", check=True) == [tmp_path / "README.md"]
    assert (tmp_path / "README.md").read_text() == text
    from bandpo.report.cli import main

    assert main(["docs", "--root", str(tmp_path), "--results", str(ROOT / "results"), "--check"]) == 1
    assert main(["docs", "--root", str(tmp_path), "--results", str(ROOT / "results")]) == 0
    assert (tmp_path / "README.md").read_text() == out


def test_every_block_is_used_somewhere():
    used = {m["name"].rpartition("/")[2] for p in DOCS for m in docs.BLOCK.finditer(p.read_text(encoding="utf-8"))}
    assert used == set(docs.BLOCKS)


def _md_rows(text: str) -> dict[str, list[dict[str, str]]]:
    """The Markdown tables of a page under their ## headings: {heading: [{column: cell}]}."""
    tables, heading, head = {}, None, None
    for line in text.splitlines():
        if line.startswith("## "):
            heading, head = line[3:], None
        elif line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if head is None:
                head = cells
            else:
                if len(cells) == len(head):  # a panel's free-text line between tables is not a row
                    tables.setdefault(heading, []).append(dict(zip(head, cells, strict=True)))
        elif not line.startswith("|"):
            head = None
    return tables


def _floats(cell: str) -> list[float]:
    return [float(x) for x in re.findall(r"[-+]?\d+\.\d+", cell)]


@pytest.mark.parametrize(
    "block, heading, folder",
    [("table-main", "tiny-m", ""), ("table-main", "tiny-s", ""), ("table-random-reward", "random-reward: tiny-s", ""),
     ("table-probe-probe", "probe: tiny-s-probe, subset probe", "probe"),
     ("table-probe-rest", "probe: tiny-s-probe, subset rest", "probe")],
)  # fmt: skip
def test_generated_tables_agree_with_the_leaderboard_page(block, heading, folder):
    """The docs' tables print the numbers of the published page they come from (results/leaderboard.md, or a settled
    experiment's results/FOLDER/leaderboard.md; built from the raw runs, not the csv)."""
    res = RESULTS.part(folder) if folder else RESULTS
    page = {r["entry"]: r for r in _md_rows((res.folder / "leaderboard.md").read_text(encoding="utf-8"))[heading]}
    model = heading.split(": ")[-1].split(",")[0]
    ours = [r for r in _md_rows("## x\n" + docs.BLOCKS[block](res))["x"] if r["model"] == model]
    assert [r["entry"] for r in ours] == list(page)
    for r in ours:
        assert _floats(r["mean@8"]) == _floats(page[r["entry"]]["mean@8 %"])
        assert _floats(r["Δ vs grpo (paired)"]) == _floats(page[r["entry"]]["mean@8 Δ %"])
        assert _floats(r["entropy (final)"]) == _floats(page[r["entry"]]["entropy (final)"])


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_readme_claims():
    text, b = read("README.md"), RESULTS.board
    assert len(text) <= 10_000
    flat = _flat(text)
    seeds = b.groupby("experiment")["n_seeds"].agg(["min", "max"])
    five = ["probe", "separation"]
    assert (seeds.drop(five).to_numpy() == 3).all() and (seeds.loc[five].to_numpy() == 5).all()
    assert "mean over seeds (3; 5 for probe and separation)" in flat and "The primary pair's minimum detectable" in flat
    # the primary rule, as the README states it, is the paired one
    assert "paired: per seed the difference" in flat and "95% paired t interval" in flat
    assert "paired differences that few seeds estimate roughly" in flat
    # the axis and the separation run as the config declares them
    cfg = RESULTS.provenance["config"]
    axis = cfg["axes"]["offpolicy"]
    values = [cfg["experiments"][c]["train"][axis["key"]] for c in axis["cells"]]
    assert values == [1, 4, 8, 16] and "(1, 4, 8, 16)" in flat
    arms = cfg["experiments"]["offpolicy-D8"]["methods"]
    assert arms == ["grpo", "clip_higher", "bandpo_kl", "bandpo_upper"] and "GRPO, Clip-Higher, BandPO-KL and" in flat
    sep = cfg["experiments"]["separation"]
    assert len(sep["methods"]) == 5 and len(sep["seeds"]) == 5 and "(five rules, 5 fresh seeds" in flat
    assert not set(sep["seeds"]) & set(cfg["seeds"])  # fresh: RL seeds the selection never saw
    # "Among the D where both arms run (4, 8, 16), GRPO's gain ... resolves at D = 4 only, so the rule chose D = 4"
    _name, setting, table = RESULTS.selection
    assert sep["select"]["rule"] == "largest-learning-compared" and sep["select"]["fallback"] == 4
    assert table.loc[table["qualifies"], "value"].tolist() == [4] and setting == {"updates_per_step": 4}
    assert set(table["value"]) == {4, 8, 16}  # the cells the rule read: those where both compared arms run
    assert "Among the D where both arms run (4, 8, 16), GRPO's gain over the base model resolves at D = 4 only, " \
           "so the rule chose D = 4" in flat  # fmt: skip
    # the five rules no longer train the same run on every seed (they did at D = 1)
    s = RESULTS.scores.query("experiment == 'separation' and name == 'mean@8' and entry != 'base'")
    assert (s.groupby("seed")["value"].nunique() > 1).any()
    # "on 5 fresh RL seeds there BandPO-KL and GRPO do not separate either"
    verdicts = RESULTS.primary.query("metric == 'mean@8'").set_index(["experiment", "model"])["verdict"]
    assert (verdicts == "unresolved").all() and "do not separate either" in flat


def test_readme_commands_are_those_of_ci():
    readme, ci = read("README.md"), read(".ci/run")
    for command in (
        "pip install torch==2.13.0",
        'pip install -e ".[dev,verl-cpu]"',
        "pip install --no-deps rliable==1.2.0",
    ):
        assert command in readme and command.replace("pip install", "pip install --quiet") in ci
    assert re.search(r"^python -m pytest$", ci, re.M) and "\npython -m pytest " in readme
    assert "\nsnakemake --cores all " in readme


def test_readme_method_example_is_the_worked_example():
    """The README's method is tests/example_method.py line for line, and its config entry the one the tests run."""
    readme, example = read("README.md"), read("tests/example_method.py")
    (code,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert code.strip() in example
    (yaml,) = re.findall(r"```yaml\n(.*?)```", readme, re.S)
    assert (
        "method_modules: [tests/example_method.py]" in yaml
        and "{id: half_clip, method: half_clip, params: {eps: 0.1}}" in yaml
    )
    # the same entry and module that tests/workflow/test_workflow.py runs through the DAG (marker dag)
    dag_test = read("tests/workflow/test_workflow.py")
    assert 'cfg["method_modules"] = ["tests/example_method.py"]' in dag_test
    assert '{"id": "half_clip", "method": "half_clip", "params": {"eps": 0.1}}' in dag_test


def test_results_claims():
    """docs/results.md's section headings and prose against the published tables."""
    text, b, runs = _flat(read("docs/results.md")), RESULTS.board, RESULTS.runs
    entries = b.groupby(["experiment", "model"])["entry"].agg(set)
    steps = runs.groupby(["experiment", "model"])["steps"].agg(set)
    seeds = b.groupby("experiment")["n_seeds"].agg(set)
    # main: every entry on tiny-s (64 steps), the primary pair on tiny-m (40 steps), 3 seeds
    assert entries[("main", "tiny-m")] == {"base", "grpo", "bandpo_kl"} and len(entries[("main", "tiny-s")]) == 14
    assert steps[("main", "tiny-s")] == {64} and steps[("main", "tiny-m")] == {40} and seeds["main"] == {3}
    assert "tiny-m: GRPO and BandPO-KL, 40 RL steps" in text and "pretrained for 2400 steps" in text
    models = {m["id"]: m for m in RESULTS.provenance["config"]["models"]}
    assert models["tiny-m"]["build"]["steps"] == 2400
    # random reward: GRPO and BandPO-KL, 3 seeds, 32 steps; the rules of one seed share the step-1 entropy
    assert entries[("random-reward", "tiny-s")] == {"grpo", "bandpo_kl"} and steps[("random-reward", "tiny-s")] == {32}
    assert "tiny-s, GRPO and BandPO-KL, 3 seeds, 32 steps" in text and seeds["random-reward"] == {3}
    changes = docs.entropy_changes(RESULTS)
    assert (changes.groupby("seed")["first"].nunique() == 1).all() and "so the same step-1 entropy" in text
    # probe: GRPO and BandPO-KL, 5 seeds; the axis on tiny-s with 3 seeds; separation on seeds 3-7
    assert entries[("probe", "tiny-s-probe")] == {"base", "grpo", "bandpo_kl"} and seeds["probe"] == {5}
    assert "tiny-s-probe, GRPO and BandPO-KL, 5 seeds" in text
    for cell in ("offpolicy-D1", "offpolicy-D4", "offpolicy-D8", "offpolicy-D16"):
        assert seeds[cell] == {3} and set(runs.loc[runs.experiment == cell, "model"]) == {"tiny-s"}
    assert sorted(set(RESULTS.scores.query("experiment == 'separation'")["seed"])) == [3, 4, 5, 6, 7]
    assert "the regime the axis selects, tiny-s, seeds 3-7" in text
    # the cost section: this run's build times, a training job's fixed cost, its number of runs (dag_rules.csv)
    dag = RESULTS.dag.set_index("rule")
    builds = {m: round(dag.loc[f"model build {m}", "wall_s_mean"]) for m in ("tiny-s", "tiny-m")}
    assert f"tiny-s 184 -> {builds['tiny-s']} s, tiny-m 250 -> {builds['tiny-m']} s" in text
    assert f"3.0 to {dag.loc['train tiny-s (main)', 'fixed_s']:.1f} s in the DAG" in text
    assert f"its {len(runs)} runs, their per-step rows" in text


def test_primary_rules_are_the_paired_comparisons_of_the_leaderboard():
    """primary.csv's score rows are the leaderboard's paired difference from GRPO with its paired t interval (the
    same computation: seed s of BandPO-KL minus seed s of GRPO), and its entropy rows the paired t interval of each
    run's final minus step-1 entropy (runs.csv)."""
    p = RESULTS.primary
    for r in p[p.metric == "mean@8"].itertuples():
        subset = RESULTS.scores.loc[RESULTS.scores.task == r.task, "subset"].iloc[0]
        row = RESULTS.row(r.experiment, r.model, r.treatment, subset)
        assert row["baseline"] == r.control and row["mean@8_n_pairs"] == r.n_pairs
        for ours, theirs in ((r.difference, "mean@8_diff"), (r.ci_low, "mean@8_diff_t_ci_low"),
                             (r.ci_high, "mean@8_diff_t_ci_high")):  # fmt: skip
            assert ours == pytest.approx(row[theirs], abs=2e-6)
        winner = r.treatment if r.ci_low > 0 else (r.control if r.ci_high < 0 else None)
        inside = r.margin == r.margin and -r.margin < r.ci90_low and r.ci90_high < r.margin
        expected = "equivalent" if inside else (f"{winner} better" if winner else "unresolved")
        assert r.verdict == expected
    changes = docs.entropy_changes(RESULTS)
    for r in p[(p.metric == "entropy_final") & (p.experiment == "random-reward")].itertuples():
        lo, hi = t_interval(changes.loc[changes.entry == r.treatment, "change"])
        assert (r.ci_low, r.ci_high) == pytest.approx((lo, hi), abs=2e-6)


def test_statistics_claims():
    """docs/statistics.md: the t quantile at 3 seeds, and how far an SD estimated from 3 seeds can be off."""
    from scipy.stats import chi2, t

    text = read("docs/statistics.md")
    assert f"{t.ppf(0.975, 2):.2f}" == "4.30" and "4.30" in text
    low, high = np.sqrt(2 / chi2.ppf(0.975, 2)), np.sqrt(2 / chi2.ppf(0.025, 2))
    assert f"{low:.2f} to {high:.1f} times" in text


def test_band_operator_example():
    import torch

    from bandpo.methods.band import band_bounds

    text = read("docs/band-operator.md")
    (lower, upper) = re.search(r"# -> lower = \[(.*?)\], upper = \[(.*?)\]", text).groups()
    lo, hi = band_bounds(torch.log(torch.tensor([0.01, 0.2, 0.9])), divergence="kl", delta=0.05)
    assert [f"{v:.4f}" for v in lo.tolist()] == [s.strip() for s in lower.split(",")]
    assert [f"{v:.4f}" for v in hi.tolist()] == [s.strip() for s in upper.split(",")]


def test_docs_are_self_contained():
    """No doc points outside the repository; every relative link resolves to a file of it."""
    for path in [*DOCS, ROOT / "workflow" / "README.md", ROOT / "results" / "README.md"]:
        text = path.read_text(encoding="utf-8")
        assert "../shared" not in text and "/work/" not in text, path
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"\w+://", target):
                continue
            resolved = (path.parent / target).resolve()
            assert resolved.is_relative_to(ROOT), (path, target)
            assert resolved.exists(), (path, target)


def test_atlas_claims():
    """docs/methods.md, "Equivalence atlas": the published atlas (results/atlas.csv) against the prose."""
    text = " ".join(read("docs/methods.md").split())
    a = RESULTS.atlas
    assert a is not None, "results/atlas.csv is published with the leaderboard (rule atlas)"
    assert (a["unexplained"] == 0).all() and "`unexplained` is 0 in every row" in text
    t = a.set_index(["pair", "source", "slice"])
    real = t.xs("real", level="source")
    kl, tv = real.loc[("bandpo_kl~dppo_kl", "all")], real.loc[("bandpo_tv~dppo_tv", "all")]
    ch, dual = real.loc[("clip_higher~grpo", "all")], real.loc[("dual_clip~none", "all")]
    assert f"stop the same {kl.stopped_both} tokens and differ on {kl.grad_differ} of {kl.tokens}" in text
    assert kl.grad_differ == tv.grad_differ == dual.grad_differ == 0  # "no A < 0 token passed r > 10"
    assert f"BandPO-TV and DPPO-TV stop the same {tv.stopped_both} and differ on none either" in text
    assert "the dual clip acts on no token" in text
    assert f"Clip-Higher and GRPO differ on {ch.grad_differ} (A > 0" in text
    assert ch.grad_differ == real.loc[("clip_higher~grpo", "adv>0")].grad_differ and ch.stopped_only_a == 0
    for pair in ("bandpo_kl~dppo_kl", "bandpo_tv~dppo_tv"):  # "the Band cap decided no token"
        assert real.loc[(pair, "adv>0")].grad_differ == 0
    assert set(real["batches"]) == {24} and "each of the 24 mini-batch updates" in text
    assert set(a["source"]) == {"synthetic", "real"}


@pytest.mark.parametrize("folder", ["", "offpolicy"])
def test_axis_rules_recompute_from_the_published_files(folder):
    """The off-policy axis' rules (axis.csv: of the publication of 2026-12-02 in results/, and of its republication
    from config/offpolicy.yaml in results/offpolicy/) are `axis_results` of the per-run outcomes (axis_runs.csv),
    and those outcomes are `run_outcomes` of steps.csv (its all/<key> columns: the all-updates statistics the rules
    read) and scores.csv: every number of the axis sections recomputes from the committed files."""
    from bandpo.report.axis import STEP_MEANS, axis_results, run_outcomes
    from bandpo.report.steps import read_steps

    res = RESULTS.part(folder) if folder else RESULTS
    cfg = res.provenance["config"]
    outcomes = pd.read_csv(res.folder / "axis_runs.csv")
    again = axis_results(outcomes, cfg["axes"])
    published = res.axis
    assert list(again["rule"]) == list(published["rule"]) and list(again["arm"]) == list(published["arm"])
    for col in ("n", "estimate", "ci_low", "ci_high", "mde"):
        np.testing.assert_allclose(again[col].astype(float), published[col].astype(float), rtol=2e-3, atol=1e-6)
    assert [docs._holds(v) for v in again["holds"]] == [docs._holds(v) for v in published["holds"]]
    metrics = read_steps(res.folder / "steps.csv")
    recomputed = run_outcomes(metrics, res.scores, cfg["axes"], cfg["experiments"])
    assert list(recomputed["entry"]) == list(outcomes["entry"]) and len(recomputed) == len(outcomes)
    for col in ("value", "seed", *STEP_MEANS, "entropy_final", "score"):
        # steps.csv keeps 5 significant digits of each step's value: a mean of small fractions moves by ~1e-3
        np.testing.assert_allclose(recomputed[col].astype(float), outcomes[col].astype(float), rtol=2e-3, atol=1e-6,
                                   err_msg=col)  # fmt: skip
    # the separation run trained at the setting the selection picks from the published scores (the republished axis:
    # what rule revision 3, which fixed the next separation run's regime, picks from it)
    name, setting, table = res.selection
    select = cfg["experiments"][name]["select"] if name in cfg["experiments"] else docs.SEPARATION_RULE
    assert select["axis"] in cfg["axes"] and len(setting) == 1
    assert table["selected"].sum() in (0, table["model"].nunique())


def test_verl_profile_tables_recompute_from_the_published_files():
    """results/verl-cpu/beside.csv is the verl profile's published scores and runs beside the local trainer's runs
    of the same base models and seeds (results/verl-cpu/local/, the profile's `beside`), and the profile's verl runs
    and its per-rule table agree (docs/verl.md quotes both)."""
    import pandas as pd

    from bandpo.report.tables import beside_table

    verl = ROOT / "results" / docs.VERL_PROFILE
    published = pd.read_csv(verl / "beside.csv")
    again = beside_table(verl, verl / "local")
    assert yaml.safe_load((ROOT / "config" / "verl-cpu.yaml").read_text())["beside"] == "results/verl-cpu/local"
    assert list(again.columns) == list(published.columns) and len(again) == len(published)
    for col in again.columns:
        if again[col].dtype.kind in "fi":
            assert np.allclose(again[col], published[col], rtol=1e-6, equal_nan=True), col
        else:
            assert again[col].astype(str).tolist() == published[col].astype(str).tolist(), col
    runs = pd.read_csv(verl / "runs.csv")
    assert set(runs["profile"]) == {docs.VERL_PROFILE} and set(runs["entry"]) == set(published["entry"]) - {"base"}
    dag = pd.read_csv(verl / "dag_rules.csv").set_index("rule")
    assert dag.loc["train tiny-s (main)", "jobs"] == len(runs) == dag.loc["merge", "jobs"]


def _sentences(text: str, start: str) -> list[str]:
    """The sentences of the page's experiment notes that begin with ``start``, per experiment: [(experiment, s)]."""
    out = []
    for line in text.splitlines():
        m = re.match(r"- \*\*(?P<xp>[^*]+)\*\*: (?P<text>.*)", line)
        if m:
            out += [(m["xp"], x) for x in re.split(r"(?<=[a-z0-9)])\. (?=[A-Z])", m["text"]) if x.startswith(start)]
    return out


def test_generated_sentences_recompute_from_the_published_files():
    """Every number of the page's result sentences names what it is, and is that, recomputed from results/: an
    entropy "at step 1" is the mean step-1 entropy of those runs in steps.csv, a final entropy the runs' mean in
    runs.csv, "N runs" / "N seed pairs" / "N paired seed differences" the count of runs or pairs, the family
    sentence's counts those of leaderboard.csv, and the reading notes' seed counts, t quantiles and interval
    counts those of the leaderboard (issue #37: no template reused across rows whose rules differ)."""
    from scipy.stats import t

    page = read("results/leaderboard.md")
    runs, board, steps = RESULTS.runs, RESULTS.board, pd.read_csv(ROOT / "results" / "steps.csv")
    first = steps.sort_values("step").groupby(["experiment", "model", "entry", "seed"])["entropy"].first()
    checked = 0
    for xp, s in _sentences(page, "Result on"):
        m = re.match(
            r"Result on (?P<model>[\w-]+), (?P<entry>\w+): final entropy (?P<final>[\d.]+) \(mean of its "
            r"(?P<n>\d+) runs\) against (?P<first>[\d.]+) at step 1 \(the same runs' step-1 entropy\)",
            s,
        )
        if m:  # a run's final entropy against its own step 1
            r = runs[(runs.experiment == xp) & (runs.model == m["model"]) & (runs.entry == m["entry"])]
            assert int(m["n"]) == len(r)
            assert float(m["final"]) == pytest.approx(r["entropy_final"].mean(), abs=6e-4)
            step1 = first.loc[xp, m["model"], m["entry"]]
            assert float(m["first"]) == pytest.approx(step1.mean(), abs=6e-4), s
            checked += 1
            continue
        m = re.match(
            r"Result on (?P<model>[\w-]+), final entropy: (?P<arm>\w+) (?P<a>[\d.]+) against (?P<ctrl>\w+) "
            r"(?P<c>[\d.]+) \(means over (?P<n>\d+) seed pairs\)",
            s,
        )
        if m:  # an entry against the control, paired by seed
            r = runs[(runs.experiment == xp) & (runs.model == m["model"])].set_index(["entry", "seed"])
            arm, ctrl = r.loc[m["arm"], "entropy_final"], r.loc[m["ctrl"], "entropy_final"]
            seeds = sorted(set(arm.index) & set(ctrl.index))
            assert int(m["n"]) == len(seeds)
            assert float(m["a"]) == pytest.approx(arm.loc[seeds].mean(), abs=6e-4)
            assert float(m["c"]) == pytest.approx(ctrl.loc[seeds].mean(), abs=6e-4), s
            checked += 1
            continue
        m = re.match(
            r"Result on (?P<model>[\w-]+) \([^)]*\): (?P<arm>\w+) − (?P<ctrl>\w+) = (?P<d>[-+][\d.]+) "
            r"\[(?P<lo>[-+][\d.]+), (?P<hi>[-+][\d.]+)\] points of (?P<metric>\S+) \(mean of (?P<n>\d+) "
            r"paired seed differences",
            s,
        )
        if m:
            p = RESULTS.primary
            row = p[(p.experiment == xp) & (p.model == m["model"]) & (p.metric == m["metric"])].iloc[0]
            assert int(m["n"]) == row.n_pairs
            for key, col in (("d", "difference"), ("lo", "ci_low"), ("hi", "ci_high")):
                assert float(m[key]) == pytest.approx(100 * row[col], abs=0.051), s
            scores = RESULTS.scores
            sc = scores[(scores.experiment == xp) & (scores.model == m["model"]) & (scores.task == row.task)
                        & (scores.metric == "mean")]  # fmt: skip
            seeds = set(sc[sc.entry == m["arm"]].seed) & set(sc[sc.entry == m["ctrl"]].seed)
            assert len(seeds) == row.n_pairs
            checked += 1
            continue
        m = re.match(r"Result on (?P<model>[\w-]+), entropy area", s)
        assert m, f"an unrecognised result sentence: {s}"
    assert checked >= 8
    # the family sentences: their counts are leaderboard.csv's
    for xp, s in _sentences(page, "Secondaries:"):
        n = int(re.search(r"Secondaries: (\d+) paired tests", s)[1])
        b = board[board.experiment == xp]
        roles = b[[c for c in b.columns if c.endswith("_role")]]
        assert n == int((roles == "secondary").to_numpy().sum()), s
    # the reading notes: seed counts and t quantiles of the trained rows, the count of intervals
    trained = board[board.entry != "base"]
    counts = sorted(set(trained["n_seeds"].astype(int)))
    for n in counts:
        assert f"{t.ppf(0.975, n - 1):.2f} at {n} seeds" in page
    shown = trained[trained["mean@8_diff_t_ci_low"].notna()]
    out = int(((shown["mean@8_diff_t_ci_low"] > 0) | (shown["mean@8_diff_t_ci_high"] < 0)).sum())
    assert f"The tables show {len(shown)} paired 95% intervals of mean@8" in page and f"; {out} do." in page
    base_per_seed = RESULTS.provenance["config"]["base_per_seed"]
    assert ("Seed s of every entry trains from base model s" in page) == bool(base_per_seed)
    assert "at step 1, paired difference" not in page
    # the axis cells' descriptions (the page prints them): completions per mini-batch = prompts x samples / D
    cfg = yaml.safe_load(read("config/offpolicy.yaml"))
    tiny_s = next(m for m in cfg["models"] if m["id"] == "tiny-s")
    per_step = tiny_s["train"]["prompts_per_step"] * 8  # TrainConfig: 8 samples per prompt
    for cell in ("offpolicy-D4", "offpolicy-D8", "offpolicy-D16"):
        d = cfg["experiments"][cell]["train"]["updates_per_step"]
        assert f"({per_step // d} of tiny-s's {per_step} completions each)" in cfg["experiments"][cell]["description"]


def test_planned_seeds_table_recomputes():
    """docs/statistics.md's planned MDEs are the exact MDE at the SD assumed and the seeds planned, and the config
    plans those seeds for the primary pair."""
    from bandpo.report.stats import minimum_detectable_difference

    text = read("docs/statistics.md")
    cfg = yaml.safe_load(read("config/config.yaml"))["experiments"]
    rows = re.findall(r"^\| (main|separation) \| (tiny-[sm]) \| ([\d.]+) \| (\d+) \| ([\d.]+) \|$", text, re.M)
    assert len(rows) == 3
    for xp, _model, sd, n, mde in rows:
        assert f"{minimum_detectable_difference(float(sd), int(n)):.2f}" == mde
        assert len(cfg[xp]["primary"]["seeds"]) == int(n)
