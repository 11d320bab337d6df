"""The documentation against the files it describes: every generated block of README.md and docs/*.md equals what
`python -m docs.blocks` makes of results/ today, the numbers and claims written in prose are recomputed
from results/ (or from the code they describe), and the README's commands are those CI runs."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import docs.blocks as docs
from bandpo.report.board import Board
from bandpo.stats.rule import t_interval
from docs.blocks import axes as axis_blocks
from docs.blocks import experiments as experiment_blocks
from docs.blocks import scores as score_blocks

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Board.read(ROOT / "results")
DOCS = sorted({p for pattern in docs.DOC_FILES for p in ROOT.glob(pattern)})


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def test_docs_are_generated_from_results():
    stale = docs.update(ROOT, check=True)
    assert not stale, (
        f"stale generated blocks in {[str(p.relative_to(ROOT)) for p in stale]}: run `python -m docs.blocks`"
    )


def test_render_rewrites_blocks_in_place(tmp_path, capsys):
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
    from docs.blocks.__main__ import main

    assert main(["--root", str(tmp_path), "--results", str(ROOT / "results"), "--check"]) == 1
    assert main(["--root", str(tmp_path), "--results", str(ROOT / "results")]) == 0
    assert (tmp_path / "README.md").read_text() == out
    capsys.readouterr()
    assert main(["--root", str(tmp_path), "--results", str(ROOT / "results"), "--check"]) == 0
    assert capsys.readouterr().out == "checked 2 generated blocks in 1 files: all up to date\n"  # says what it checked


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
    assert [r["entry"] for r in ours] == list(page)  # the page's order: by paired Δ on the common seeds
    for r in ours:
        assert _floats(r["mean@8"]) == _floats(page[r["entry"]]["mean@8 %"])
        assert _floats(r["Δ vs grpo (paired)"]) == _floats(page[r["entry"]]["mean@8 Δ %"])
        assert _floats(r["entropy (final)"]) == _floats(page[r["entry"]]["entropy (final)"])


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_readme_claims():
    text = read("README.md")
    assert len(text) <= 10_000
    flat = _flat(text)
    cfg = RESULTS.provenance["config"]
    xps = cfg["experiments"]
    # the seeds: main's primary pair runs its seeds until decided, look by look (k pairs a look, at most n_max)
    sequential = xps["main"]["primary"]["sequential"]
    rows = RESULTS.primary.query("experiment == 'main' and metric == 'mean@8'")
    assert set(rows["rule"]) == {"sequential"} and len(xps["main"]["primary"]["seeds"]) == 20
    for r in rows.itertuples():
        assert r.n == r.n_pairs == r.look * sequential["k"] <= sequential["n_max"][r.model], r
    assert "mean over seeds (<!-- generated:seeds -->" in text and "decide for sure at the measured SD from" in flat
    # the primary rule, as the README states it: the one question, its words, the estimate, the config's margin
    assert "is BandPO-KL better than GRPO by at least 2 points?" in flat and "95% paired t interval" in flat
    assert xps["main"]["primary"]["margin"] == 2.0 and '"better", "not better by 2 points", or "undecided"' in flat
    # the axis as its own config declares it (results/offpolicy/)
    off = RESULTS.part("offpolicy").provenance["config"]
    axis = off["axes"]["offpolicy"]
    values = [off["experiments"][c]["train"][axis["key"]] for c in axis["cells"]]
    assert values == [1, 4, 8, 16] and "(1, 4, 8, 16)" in flat
    arms = off["experiments"]["offpolicy-D8"]["methods"]
    assert arms == ["grpo", "clip_higher", "bandpo_kl", "bandpo_upper"] and "GRPO, Clip-Higher, BandPO-KL and" in flat
    # the separation is pooled into main (one question once), at the regime revision 3 picks on the published axis
    from bandpo.core.protocol import Protocol

    assert "separation" not in xps and cfg["train"].get("updates_per_step", Protocol().updates_per_step) == 4
    _name, setting, _table = axis_blocks.selection(RESULTS.part("offpolicy"))
    assert setting == {"updates_per_step": 4} and axis_blocks.SEPARATION_RULE["min_gain"] == 2.0
    # the horizon: the primary pair on tiny-s at 4x main's steps, published from its own config into results/horizon/
    horizon = RESULTS.part("horizon")
    steps = horizon.runs.groupby("experiment")["steps"].max()
    assert steps["horizon"] == 4 * steps["main"] and horizon.experiments["horizon"]["methods"] == ["grpo", "bandpo_kl"]
    assert "The primary pair on tiny-s at 4x main's steps" in flat and "`results/horizon/`" in flat
    assert horizon.leaderboard.query("experiment == 'horizon'")["model"].unique().tolist() == ["tiny-s"]
    assert "horizon" not in xps and set(horizon.primary.query("metric == 'mean@8'")["rule"]) == {"exploratory"}


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
    text, b, runs = _flat(read("docs/results.md")), RESULTS.leaderboard, RESULTS.runs
    entries = b.groupby(["experiment", "model"])["entry"].agg(set)
    steps = runs.groupby(["experiment", "model"])["steps"].agg(set)
    seeds = runs.groupby(["experiment", "entry"])["seed"].agg(lambda s: sorted(set(s)))
    # main: every entry on tiny-s (64 steps), the primary pair on tiny-m (40 steps), the config's seeds (the
    # primary pair's until decided: as many as its last look on either model; an entry may keep seeds of its own)
    methods = RESULTS.provenance["config"]["methods"]
    assert entries[("main", "tiny-m")] == {"base", "grpo", "bandpo_kl"}
    assert entries[("main", "tiny-s")] == {"base"} | {m["id"] for m in methods}
    assert steps[("main", "tiny-s")] == {64} and steps[("main", "tiny-m")] == {40}
    pairs = int(RESULTS.primary.query("experiment == 'main' and metric == 'mean@8'")["n_pairs"].max())
    cfg = RESULTS.provenance["config"]
    assert seeds[("main", "clip_higher")] == cfg["seeds"] and seeds[("main", "grpo")] == list(range(pairs))
    kept = {m["id"]: m["seeds"] for m in methods if m.get("seeds")}  # entries that keep seeds of their own
    assert all(seeds[("main", e)] == s for e, s in kept.items())
    heading = "## main: every entry on tiny-s, the primary pair on tiny-m, one base model per size"
    assert heading in read("docs/results.md")
    assert "Seeds: <!-- generated:seeds-main -->" in text
    assert "tiny-m: GRPO and BandPO-KL, 40 RL steps" in text and "pretrained for 2400 steps" in text
    models = {m["id"]: m for m in RESULTS.provenance["config"]["models"]}
    assert models["tiny-m"]["build"]["steps"] == 2400
    # random reward: GRPO and BandPO-KL, 3 seeds, 32 steps; the rules of one seed share the step-1 entropy
    assert entries[("random-reward", "tiny-s")] == {"grpo", "bandpo_kl"} and steps[("random-reward", "tiny-s")] == {32}
    assert "tiny-s, GRPO and BandPO-KL, 32 steps" in text and seeds[("random-reward", "grpo")] == [0, 1, 2]
    assert "Seeds: <!-- generated:seeds-random-reward -->" in text
    changes = experiment_blocks.entropy_changes(RESULTS)
    assert (changes.groupby("seed")["first"].nunique() == 1).all() and "so the same step-1 entropy" in text
    # probe and axis: published from their own configs, not in the top-level tables
    assert not {"probe", "offpolicy-D4"} & set(b["experiment"])
    probe = RESULTS.part("probe").leaderboard
    assert set(probe["entry"]) == {"base", "grpo", "bandpo_kl"} and set(probe["n_seeds"]) == {5}
    assert "tiny-s-probe, GRPO and BandPO-KL Seeds: <!-- generated:probe/seeds-probe -->" in text
    off = RESULTS.part("offpolicy").runs
    for cell in ("offpolicy-D1", "offpolicy-D4", "offpolicy-D8", "offpolicy-D16"):
        cell_runs = off[off.experiment == cell]
        assert cell_runs.groupby("entry")["seed"].nunique().eq(3).all() and set(cell_runs["model"]) == {"tiny-s"}
    # the separation pooled into main; the horizon (its own config) on seeds 0-2 at 256 and at 64 steps
    assert not {"separation", "horizon"} & set(runs["experiment"])
    assert "## separation: pooled into main" in read("docs/results.md")
    horizon = RESULTS.part("horizon").runs
    h_steps = horizon.groupby("experiment")["steps"].agg(set)
    assert h_steps["horizon"] == {256} and h_steps["main"] == {64}
    assert all(s == [0, 1, 2] for s in horizon.groupby(["experiment", "entry"])["seed"].agg(lambda s: sorted(set(s))))
    assert "## horizon: the primary pair on tiny-s at 256 steps (exploratory)" in read("docs/results.md")
    assert "Seeds: <!-- generated:horizon/seeds-horizon -->" in text
    # the cost section: this run's number of runs
    assert f"Its <!-- generated:n-runs -->{len(runs)}<!-- /generated:n-runs --> runs, their per-step rows" in text


def test_publication_blocks_are_the_provenance():
    """The blocks that name a publication's commit, machine, base models and seeds (`docs.blocks.publication`)
    say what each published folder's provenance.json records, and the seeds they give are those the runs used."""
    from docs.blocks import publication

    prov = RESULTS.provenance
    text = publication.publication(RESULTS)
    assert text.startswith(f"trained at commit `{prov['git_commit'][:7]}`") and "published by" not in text
    cpus = {s["cpu_model"] for s in prov["numerics"]}
    assert {publication.cpu_name(c) for c in cpus} == set(publication.cpus(prov)) and publication.machine(RESULTS)
    assert publication.cpu_name("Intel(R) Xeon(R) Processor") == "Intel Xeon"
    bases = publication.base_models(RESULTS)
    for m in prov["base_models"]:
        assert m["path"].rpartition("/")[2] in bases and m["matches_build_record"]
        assert publication.cpu_name(m["built_on"]["cpu_model"]) in bases
    # a base model that is the bytes another folder records as built on another CPU is named so
    for folder in ("offpolicy", "probe"):
        for other in RESULTS.part(folder).provenance["base_models"]:
            same = [m for m in prov["base_models"] if m["weights_sha256"] == other["weights_sha256"]]
            if same and other["built_on"]["cpu_model"] != same[0]["built_on"]["cpu_model"]:
                assert f"built for `results/{folder}/`" in bases
    numerics = publication.published_numerics(RESULTS)
    assert "`results/`" in numerics and "`results/offpolicy/`" in numerics and "`results/probe/`" in numerics
    for folder in ("offpolicy", "probe", "real-lm-smoke", "real-lm-verl", "real-lm"):  # published by their configs
        assert publication.published_by_its_config(folder, RESULTS.part(folder).provenance), folder
    local = {"config": {"profile": "embedded", "publish": True}}  # a local report folder is not a publication
    assert not publication.published_by_its_config("embedded", local)
    # the seeds: the config's, and the runs' (the primary pair's own seeds where the config gives them)
    for board, xp in ((RESULTS, "main"), (RESULTS, "random-reward"), (RESULTS.part("horizon"), "main"),
                      (RESULTS.part("horizon"), "horizon"), (RESULTS.part("real-lm"), "main")):  # fmt: skip
        spec, runs = board.experiments[xp], board.runs
        seeds = spec.get("seeds") or board.provenance["config"]["seeds"]
        pair = (spec.get("primary") or {}).get("seeds") or seeds
        sequential = bool(spec["primary"].get("sequential"))
        r = runs[runs.experiment == xp]
        compared = r.entry.isin(spec["primary"].get("compare") or spec["methods"])  # random-reward: no pair of its own
        ran = sorted(set(r[compared].seed))
        assert ran == pair[: len(ran)] if sequential else ran == pair  # seeds until decided: the first, in order
        assert r[~compared].empty or sorted(set(r[~compared].seed)) == seeds
        text = publication.design_seeds(xp)(board)
        assert text.startswith(f"{len(seeds)} seeds ({publication.seed_range(seeds)}")
        if sequential:  # each model's most: primary.seeds up to its n_max (the config's, per model)
            n_max = spec["primary"]["sequential"]["n_max"]
            most = {m: pair[: n_max[m] if isinstance(n_max, dict) else n_max] for m in spec["models"]}
            phrases = [f"at most {len(s)}: {publication.seed_range(s)}" for s in most.values()]
            each = ", ".join(f"{m} {p}" for m, p in zip(most, phrases, strict=True))
            assert f"the primary pair seeds until decided, {phrases[0] if len(set(phrases)) == 1 else each})" in text
            if board is RESULTS:  # the embedded publication: tiny-s and tiny-m stop at different n_max
                assert "tiny-s at most 20: 0-19, tiny-m at most 15: 0-14" in text
        else:
            assert (f"the primary pair {len(pair)}: {publication.seed_range(pair)}" in text) == (pair != seeds)
    assert publication.seed_range([0, 1, 2, 3]) == "0-3" and publication.seed_range([0, 2]) == "0, 2"


@pytest.mark.parametrize("folder", ["", "real-lm"])
def test_primary_rules_are_the_paired_comparisons_of_the_leaderboard(folder):
    """primary.csv's score rows are the leaderboard's paired difference from GRPO with its paired t interval (the
    same computation: seed s of BandPO-KL minus seed s of GRPO), and their verdicts the verdict rule's on the
    published scores: a single look (`fixed_n_decision`) at the published config's margin (fractions, through the
    run plan) for a primary without a design; its entropy rows the paired t interval of each run's final minus
    step-1 entropy (runs.csv). The embedded publication and the real-LM comparison (results/real-lm/: one look)."""
    from scipy.stats import t

    from bandpo.stats.design import SequentialDesign
    from bandpo.stats.rule import decide, fixed_n_decision
    from bandpo.study import design_settings, report_experiments

    res = RESULTS.part(folder) if folder else RESULTS
    plan = report_experiments(res.provenance["config"])
    p = res.primary
    assert not p[p.metric == "mean@8"].empty
    for r in p[p.metric == "mean@8"].itertuples():
        subset = res.scores.loc[res.scores.task == r.task, "subset"].iloc[0]
        row = res.row(r.experiment, r.model, r.treatment, subset)
        assert row["baseline"] == r.control and row["mean@8_n_pairs"] == r.n_pairs
        for ours, theirs in ((r.difference, "mean@8_diff"), (r.ci_low, "mean@8_diff_t_ci_low"),
                             (r.ci_high, "mean@8_diff_t_ci_high")):  # fmt: skip
            assert ours == pytest.approx(row[theirs], abs=2e-6)
        assert row["mean@8_role"] == "primary" and row["mean@8_verdict_holm"] == r.verdict
        assert r.margin == plan[r.experiment]["margins"][r.model] == pytest.approx(0.02)
        sc = res.scores.query("experiment == @r.experiment and model == @r.model and task == @r.task")
        per_seed = sc[sc.name == "mean@8"].pivot_table(index="seed", columns="entry", values="value")
        d = (per_seed[r.treatment] - per_seed[r.control]).dropna()
        if r.rule == "sequential":  # main: the design of the config, its looks in the order of the pair's seeds
            spec = res.provenance["config"]["experiments"][r.experiment]["primary"]
            assert list(d.index) == spec["seeds"][: len(d)]
            design = SequentialDesign(**design_settings(res.provenance["config"], r.experiment, r.model))
            expected = decide(design, d.to_numpy())
            assert (r.verdict, r.look, r.n) == (expected.verdict, expected.look, expected.n) and r.n == len(d)
            assert r.t == pytest.approx(expected.t, abs=1e-3) and expected.verdict != "undecided"  # it stopped
            continue
        assert r.rule == "single look" and "designs" not in plan[r.experiment]
        expected = fixed_n_decision(d.to_numpy(), r.margin)
        assert r.verdict == expected.verdict and r.n == len(d) == r.n_pairs
        assert r.p_better == pytest.approx(1 - t.cdf(expected.t, len(d) - 1), abs=1e-4)
    changes = experiment_blocks.entropy_changes(res)
    for r in p[(p.metric == "entropy_final") & (p.experiment == "random-reward")].itertuples():
        lo, hi = t_interval(changes.loc[changes.entry == r.treatment, "change"])
        assert (r.ci_low, r.ci_high) == pytest.approx((lo, hi), abs=2e-6)
        assert r.rule == "descriptive"


def test_headline_adds_the_rows_of_a_published_folder():
    """A folder named in the headline's parts adds its primary rows of mean@8 after the embedded profile's, each
    named by the folder (and its experiment when not main), with the part's own numbers."""
    from docs.blocks.cells import ci

    def table(text: str) -> str:  # the table of the block (the lines on what each verdict shows follow it)
        return "\n".join(line for line in text.splitlines() if line.startswith("|"))

    own = table(score_blocks.headline(RESULTS, parts=()))
    both = table(score_blocks.headline(RESULTS, parts=("horizon",)))
    assert both.startswith(own)
    added = [line.split(" | ") for line in both[len(own) :].strip().splitlines()]
    rows = RESULTS.part("horizon").primary.query("metric == 'mean@8'")
    assert len(added) == len(rows) > 0
    for cells, r in zip(added, rows.itertuples(), strict=True):
        assert cells[0] == "| horizon" + ("" if r.experiment == "main" else f": {r.experiment}")
        assert cells[5] == ci(r.difference, r.ci_low, r.ci_high, sign=True)


def test_real_lm_comparison_is_the_declared_design():
    """results/real-lm/ is config/real-lm-compare.yaml's run as declared (issue #56): its provenance holds that
    config's data, model, methods, seeds and training settings; every entry ran every seed for the declared steps
    with its held-out curve; the page links only figures that exist and speaks of one downloaded base model; the
    README's headline carries its row and the README names its model and test set as the config does."""
    from bandpo.plan.validate import load_yaml, validate_config

    res = RESULTS.part("real-lm")
    declared = validate_config(load_yaml(ROOT / "config" / "real-lm-compare.yaml"))
    cfg = res.provenance["config"]
    for key in ("data", "train_data", "methods", "seeds", "grader", "base_per_seed", "experiments"):
        assert cfg[key] == declared[key], key
    assert {k: cfg["models"][0][k] for k in ("id", "package", "version", "sha256")} == {
        k: declared["models"][0][k] for k in ("id", "package", "version", "sha256")
    }
    for key, value in load_yaml(ROOT / "config" / "real-lm-compare.yaml")["train"].items():
        assert cfg["train"][key] == value, key
    runs = res.runs[res.runs.experiment == "main"]
    assert sorted(runs.entry.unique()) == sorted(m["id"] for m in declared["methods"])
    assert all(sorted(g.seed) == declared["seeds"] for _, g in runs.groupby("entry"))
    assert set(runs.steps) == {declared["train"]["steps"]}
    curves = experiment_blocks.held_out_curves(res)
    every = declared["train"]["val_every"]
    expected_steps = [0, *range(every, declared["train"]["steps"] + 1, every)]
    assert all(list(g.step) == expected_steps for _, g in curves.groupby(["entry", "seed"]))
    assert len(curves.groupby(["entry", "seed"])) == len(runs)
    page = (res.folder / "leaderboard.md").read_text(encoding="utf-8")
    linked = re.findall(r"\]\((figures/[^)]+)\)", page)
    assert {"figures/training_curves.png", "figures/clipfrac_buckets.png"} <= set(linked)
    assert all((res.folder / f).is_file() for f in linked)
    assert "pretrained with seed" not in page
    # the README: its headline row, and the model and test set the sentence beside it names
    assert score_blocks.HEADLINE_PARTS == ("real-lm",)
    rows = [line for line in docs.BLOCKS["headline"](RESULTS).splitlines() if line.startswith("| real-lm |")]
    assert len(rows) == len(res.primary.query("metric == 'mean@8'")) == 1
    data = declared["data"][0]
    assert declared["models"][0]["member"].split("/")[1].startswith("SmolLM2-135M-Instruct")
    assert data["prompt_format"] == "answer-line" and data["n_test"] == 48
    assert "(`real-lm`: SmolLM2-135M-Instruct, [48 answer-line ones](" in read("README.md")


def test_real_lm_blocks_recompute():
    """The real-LM comparison's blocks against steps.csv and runs.csv (results/real-lm/): the pilot's held-out curve
    (GRPO, seed 0) and its change against the declared bar, the held-out table's paired differences, and the clip
    fractions by old-probability bucket."""
    from docs.blocks.cells import num

    res = RESULTS.part("real-lm")
    steps = pd.read_csv(res.folder / "steps.csv")
    grpo0 = steps.query("entry == 'grpo' and seed == 0").sort_values("step")
    before = grpo0["val/mean_before"].dropna().iloc[0]
    after = grpo0.dropna(subset=["val/mean"])
    text = experiment_blocks.pilot(res)
    values = ", ".join(num(v) for v in after["val/mean"])
    assert text.startswith(f"grpo, seed 0: validation mean@8 {num(before)} before training, {values} after steps")
    change = after["val/mean"].iloc[-1] - before
    assert f"({num(change, sign=True)} points: {'' if change >= 0.05 else 'not '}at least 5)" in text
    per_step = (res.runs.train_seconds / res.runs.steps).median()
    assert text.endswith(f"; a training step {per_step:.0f} s (the median over the {len(res.runs)} runs)")
    # the held-out table: at each measurement, bandpo_kl − grpo of the same seed, mean and 95% t interval
    table = _md_rows("## x\n" + experiment_blocks.held_out_table(res))["x"]
    val = steps.dropna(subset=["val/mean"]).pivot_table(index=["step", "seed"], columns="entry", values="val/mean")
    assert len(table) == 1 + len(val.index.get_level_values("step").unique())
    last = table[-1]
    d = (val.loc[val.index.get_level_values("step").max()]).eval("bandpo_kl - grpo")
    lo, hi = t_interval(d)
    assert _floats(last["bandpo_kl − grpo, paired"]) == pytest.approx([100 * d.mean(), 100 * lo, 100 * hi], abs=0.051)
    assert last["seed pairs"] == str(len(d))
    # the clip fractions: the lowest bucket's upper clip, per run the mean over steps, then over seeds
    buckets = _md_rows("## x\n" + experiment_blocks.clip_buckets(res))["x"]
    low = steps.groupby(["entry", "seed"])["clipfrac_upper/p0.0-0.2"].mean()
    for entry in ("grpo", "bandpo_kl"):
        assert _floats(buckets[0][f"upper clip %, {entry}"])[0] == pytest.approx(100 * low[entry].mean(), abs=0.0051)


def test_statistics_claims():
    """docs/statistics.md: the t quantile at n = 3, the shortcut MDE against the exact one there, and how far an SD
    estimated from the fewest seeds of the power table can be off (the generated block `sd-fewest`)."""
    from scipy.stats import chi2, t

    from bandpo.analysis.scores import power_table
    from bandpo.stats.power import minimum_detectable_difference, paired_t_power

    text = _flat(read("docs/statistics.md"))
    assert f"{t.ppf(0.975, 2):.2f}" == "4.30" and "(4.30 at n = 3 against the normal 1.96)" in text
    shortcut, exact = t.ppf(0.975, 2) + t.ppf(0.80, 2), minimum_detectable_difference(1.0, 3) * np.sqrt(3)
    power = paired_t_power(shortcut / np.sqrt(3), 1.0, 3)
    assert f"gives {shortcut:.2f} SD / √3 where the exact value is {exact:.2f} SD / √3" in text
    assert f"({100 * power:.0f}% power, not 80%)" in text
    n = int(power_table(RESULTS.stats)["n_seeds"].min())
    low, high = np.sqrt((n - 1) / chi2.ppf(0.975, n - 1)), np.sqrt((n - 1) / chi2.ppf(0.025, n - 1))
    assert f"as few as <!-- generated:sd-fewest -->{n} seeds ({n - 1} degrees of freedom)" in text
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


@pytest.mark.parametrize("folder", ["offpolicy"])
def test_axis_rules_recompute_from_the_published_files(folder):
    """The off-policy axis' rules (axis.csv: of the publication of 2026-12-02 in results/, and of its republication
    from config/offpolicy.yaml in results/offpolicy/) are `axis_results` of the per-run outcomes (axis_runs.csv),
    and those outcomes are `run_outcomes` of steps.csv (its all/<key> columns: the all-updates statistics the rules
    read) and scores.csv: every number of the axis sections recomputes from the committed files."""
    from bandpo.analysis.axis import STEP_MEANS, axis_results, run_outcomes
    from bandpo.analysis.steps import read_steps

    res = RESULTS.part(folder) if folder else RESULTS
    cfg = res.provenance["config"]
    outcomes = pd.read_csv(res.folder / "axis_runs.csv")
    again = axis_results(outcomes, cfg["axes"])
    published = res.axis
    assert list(again["rule"]) == list(published["rule"]) and list(again["arm"]) == list(published["arm"])
    for col in ("n", "estimate", "ci_low", "ci_high", "mde"):
        np.testing.assert_allclose(again[col].astype(float), published[col].astype(float), rtol=2e-3, atol=1e-6)
    assert [axis_blocks._holds(v) for v in again["holds"]] == [axis_blocks._holds(v) for v in published["holds"]]
    metrics = read_steps(res.folder / "steps.csv")
    recomputed = run_outcomes(metrics, res.scores, cfg["axes"], cfg["experiments"])
    assert list(recomputed["entry"]) == list(outcomes["entry"]) and len(recomputed) == len(outcomes)
    for col in ("value", "seed", *STEP_MEANS, "entropy_final", "score"):
        # steps.csv keeps 5 significant digits of each step's value: a mean of small fractions moves by ~1e-3
        np.testing.assert_allclose(recomputed[col].astype(float), outcomes[col].astype(float), rtol=2e-3, atol=1e-6,
                                   err_msg=col)  # fmt: skip
    # the separation run trained at the setting the selection picks from the published scores (the republished axis:
    # what rule revision 3, which fixed the next separation run's regime, picks from it)
    name, setting, table = axis_blocks.selection(res)
    select = cfg["experiments"][name]["select"] if name in cfg["experiments"] else axis_blocks.SEPARATION_RULE
    assert select["axis"] in cfg["axes"] and len(setting) == 1
    assert table["selected"].sum() in (0, table["model"].nunique())


def test_verl_profile_tables_recompute_from_the_published_files():
    """results/verl-cpu/beside.csv is the verl profile's published scores and runs beside the local trainer's runs
    of the same base models and seeds (results/verl-cpu/local/, the profile's `beside`), and the profile's verl runs
    and its per-rule table agree (docs/verl.md quotes both)."""
    import pandas as pd

    from bandpo.analysis.leaderboard import beside_table

    verl = ROOT / "results" / "verl-cpu"
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
    assert set(runs["profile"]) == {"verl-cpu"} and set(runs["entry"]) == set(published["entry"]) - {"base"}
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
    runs, board, steps = RESULTS.runs, RESULTS.leaderboard, pd.read_csv(ROOT / "results" / "steps.csv")
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
            assert int(m["n"]) == row.n  # the pairs the verdict (and the estimate) rests on
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
    assert checked >= 4  # main's two models and the random-reward control's two entries at least
    # the family sentences: their counts are leaderboard.csv's
    further = dict(_sentences(page, "Further secondaries:"))  # a second family: the rest (issue #68)
    for xp, s in _sentences(page, "Secondaries:"):  # one family, or the declared metric's (issue #68) and the rest
        counts = [int(re.search(r"econdaries: (\d+) paired tests", x)[1]) for x in (s, further.get(xp)) if x]
        b = board[board.experiment == xp]
        roles = b[[c for c in b.columns if c.endswith("_role")]]
        entropy = RESULTS.primary.query("experiment == @xp and role == 'secondary'")  # in the family too (#55)
        assert sum(counts) == int((roles == "secondary").to_numpy().sum()) + len(entropy), s
        declared = (RESULTS.provenance["config"]["experiments"].get(xp) or {}).get("secondaries")
        if declared:  # the first family: the declared metric's cells
            assert counts[0] == int((b[f"{declared['verdicts']}@8_role"] == "secondary").sum()), s
    # the reading notes: seed counts and t quantiles of the trained rows, the count of intervals
    trained = board[board.entry != "base"]
    counts = sorted(set(trained["n_seeds"].astype(int)))
    for n in counts:
        assert f"{t.ppf(0.975, n - 1):.2f} at {n} seeds" in page
    shown = trained[trained["mean@8_diff_t_ci_low"].notna()]
    out = int(((shown["mean@8_diff_t_ci_low"] > 0) | (shown["mean@8_diff_t_ci_high"] < 0)).sum())
    assert f"The tables show {len(shown)} paired 95% intervals of mean@8" in page
    assert f"; {out} {'does' if out == 1 else 'do'}." in page
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
    """docs/statistics.md's record of issue #37's plan: its planned MDEs are the exact MDE at the SD assumed and the
    seeds planned (the config now runs the pair's seeds look by look: `test_the_embedded_design_is_declared`)."""
    from bandpo.stats.power import minimum_detectable_difference

    text = read("docs/statistics.md")
    rows = re.findall(r"^\| (main|separation) \| (tiny-[sm]) \| ([\d.]+) \| (\d+) \| ([\d.]+) \|$", text, re.M)
    assert len(rows) == 3
    for _xp, _model, sd, n, mde in rows:
        assert f"{minimum_detectable_difference(float(sd), int(n)):.2f}" == mde
    # the comparison with the present publication is the generated table beside it, not prose
    assert "<!-- generated:mde-measured -->" in text and "Main's verdicts are" not in text


def test_the_embedded_design_is_declared():
    """config/config.yaml declares the headline's group-sequential design before the runs: main's pair in looks of 5
    seed pairs, pooled with the earlier separation seeds (one question once), each model's design meeting at its
    planning SD; the horizon runs from a config of its own as an exploratory experiment."""
    from bandpo.plan.validate import load_yaml, validate_config
    from bandpo.stats.design import SequentialDesign
    from bandpo.study import design_settings, look_blocks

    cfg = validate_config(load_yaml(ROOT / "config" / "config.yaml"))
    assert "separation" not in cfg["experiments"] and "horizon" not in cfg["experiments"]
    assert cfg["experiments"]["main"]["primary"]["seeds"] == list(range(20))
    for model, looks in (("tiny-s", 4), ("tiny-m", 3)):
        design = SequentialDesign(**design_settings(cfg, "main", model))
        assert (design.k, design.looks, design.margin) == (5, looks, 0.02)
        assert [len(b) for b in look_blocks(cfg, "main", model)] == [5] * looks
    horizon = validate_config(load_yaml(ROOT / "config" / "horizon.yaml"))["experiments"]["horizon"]["primary"]
    assert horizon["exploratory"] and "sequential" not in horizon


def test_horizon_and_seeds_sentences_recompute():
    """The README's horizon, horizon-holds and seeds sentences against the files they come from (the horizon's from
    its own published folder, results/horizon/): each run's entropy fall is its step-1 entropy in steps.csv over its
    final entropy in runs.csv, each difference is primary.csv's or recomputed from scores.csv, the steps runs.csv's,
    and the seed counts scores.csv's."""
    text = _flat(read("README.md"))
    horizon = RESULTS.part("horizon")
    runs, p = horizon.runs, horizon.primary
    steps = pd.read_csv(ROOT / "results" / "horizon" / "steps.csv")
    first = steps.sort_values("step").groupby(["experiment", "model", "entry", "seed"])["entropy"].first()
    sentence = experiment_blocks.horizon(horizon)
    assert sentence in text
    h = runs[runs.experiment == "horizon"]
    assert sentence.startswith(f"at {int(h['steps'].max())} steps, bandpo_kl − grpo mean@8 ")
    for entry, g in h.groupby("entry"):
        # the first entry names the ratio and the threshold, the next ones only their factors and counts
        m = re.search(rf"{entry}'s (?:entropy fell )?([\d., ]+)-fold \((?:step 1 / final; )?(\d+) of (\d+)", sentence)
        falls = [
            first.loc["horizon", r.model, entry, r.seed] / r.entropy_final for r in g.sort_values("seed").itertuples()
        ]
        assert [float(x) for x in m[1].split(", ")] == pytest.approx(falls, abs=0.06), entry
        assert (int(m[2]), int(m[3])) == (sum(f >= 5 for f in falls), len(falls))
    late = p.query("experiment == 'horizon' and metric == 'mean@8'").iloc[0]
    assert late.rule == "exploratory" and late.label.startswith("exploratory: no verdict")  # declared so
    assert f"points over {late.n} seed pairs: exploratory: no verdict (a single look decides from n = " in sentence
    rows = experiment_blocks.entropy_rows("horizon")(horizon)
    assert rows in _flat(read("docs/results.md"))
    for e in p.query("experiment == 'horizon' and metric.str.startswith('entropy')").itertuples():
        d = f"{e.difference:+.3f} [{e.ci_low:+.3f}, {e.ci_high:+.3f}]"
        assert f"bandpo_kl − grpo {d} nats" in rows and e.rule == "single look, Holm"
    # the same seeds at 64 steps (the horizon config's main) and at 256: each side's estimate, and the change per
    # seed; both sides exploratory, so the sentence neither confirms nor contradicts main's verdict
    holds = experiment_blocks.horizon_holds(horizon)
    assert holds in _flat(read("docs/results.md")) and holds.startswith("is neither confirmed nor contradicted")
    sc = horizon.scores.query("name == 'mean@8' and model == 'tiny-s' and task == @late.task")
    wide = {xp: sc[sc.experiment == xp].pivot_table(index="seed", columns="entry", values="value")
            for xp in ("main", "horizon")}  # fmt: skip
    d = {xp: w["bandpo_kl"] - w["grpo"] for xp, w in wide.items()}
    seeds = sorted(d["horizon"].index)
    assert seeds == sorted(h["seed"].unique()) == sorted(d["main"].index)
    early = d["main"].loc[seeds]
    lo, hi = t_interval(early)
    main_steps = int(runs.query("experiment == 'main' and model == 'tiny-s'")["steps"].max())
    where = f"seeds {seeds[0]}-{seeds[-1]}"
    assert (f"at {main_steps} steps (a single look decides from n = ") in holds
    assert (f"{100 * early.mean():+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] points, main's runs of {where}, "
            f"{len(seeds)} seed pairs)") in holds  # fmt: skip
    assert f"at {int(h['steps'].max())} steps" in holds and f"horizon, {where}" in holds
    change = d["horizon"].loc[seeds] - early
    c_lo, c_hi = t_interval(change)
    assert (f"horizon − main on the same seeds, paired: {100 * change.mean():+.1f} [{100 * c_lo:+.1f}, "
            f"{100 * c_hi:+.1f}] points") in holds  # fmt: skip
    # seeds: per experiment of the default publication, the primary pair's seed counts per model and the others'
    sc = RESULTS.scores.query("name == 'mean@8' and entry != 'base'")
    n = sc.groupby(["experiment", "model", "entry"])["seed"].nunique()
    seeds_text = score_blocks.seeds_summary(RESULTS)
    assert seeds_text in text
    pair = ", ".join(f"{n['main', m, 'grpo']} on {m}" for m in ("tiny-m", "tiny-s"))  # the design's counts differ
    kept = f" (offpolicy_mask {n['main', 'tiny-s', 'offpolicy_mask']})"  # an entry that keeps its own seeds
    assert f"main {pair} for the primary pair, {n['main', 'tiny-s', 'dcpo']}{kept} for the other entries" in seeds_text


def test_real_lm_verl_pair_is_the_declared_design():
    """results/real-lm-compare-verl/ is config/real-lm-compare-verl.yaml's run as declared (issue #56, item 5): its
    provenance holds that config's data, model, methods, seed and training settings, the same per-step protocol as
    config/real-lm-compare.yaml's; every run trained the declared steps through verl with its held-out curve at the
    local runs' measurements; its blocks recompute from steps.csv and runs.csv of both folders."""
    from bandpo.plan.validate import load_yaml, validate_config
    from docs.blocks.cells import num

    res = RESULTS.part("real-lm-compare-verl")
    declared = validate_config(load_yaml(ROOT / "config" / "real-lm-compare-verl.yaml"))
    local = validate_config(load_yaml(ROOT / "config" / "real-lm-compare.yaml"))
    cfg = res.provenance["config"]
    for key in ("data", "train_data", "methods", "seeds", "grader", "base_per_seed", "beside"):
        assert cfg[key] == declared[key], key
    assert local["methods"] == declared["methods"] and set(declared["seeds"]) <= set(local["seeds"])
    for key, value in load_yaml(ROOT / "config" / "real-lm-compare-verl.yaml")["train"].items():
        assert cfg["train"][key] == value, key
    for key in ("prompts_per_step", "samples_per_prompt", "updates_per_step", "max_new_tokens", "temperature", "lr",
                "lr_end", "weight_decay", "grad_clip", "val_every", "val_k"):  # fmt: skip
        assert declared["train"][key] == local["train"][key], key
    runs = res.runs
    assert sorted(runs.entry) == sorted(m["id"] for m in declared["methods"]) and cfg["trainer"] == "verl"
    assert set(runs.steps) == {declared["train"]["steps"]}
    curves = experiment_blocks.held_out_curves(res)
    every = declared["train"]["val_every"]
    assert all(list(g.step) == [0, *range(every, declared["train"]["steps"] + 1, every)]
               for _, g in curves.groupby(["entry", "seed"]))  # fmt: skip
    # the blocks against the files: verl's step 4 and the local runs' of seed 0, the control, the step cost
    steps, other = pd.read_csv(res.folder / "steps.csv"), pd.read_csv(ROOT / declared["beside"] / "steps.csv")
    table = experiment_blocks.verl_held_out(res)
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.splitlines()[2:]]
    cells = {tuple(r[:3]): r[3:] for r in rows}  # (entry, trainer, seeds) -> before, after step 4, change
    last = declared["train"]["steps"]
    for entry in runs.entry:
        ours = steps[(steps.entry == entry) & (steps.step == last)]["val/mean"].iloc[0]
        theirs = other[(other.entry == entry) & (other.seed == 0) & (other.step == last)]["val/mean"].iloc[0]
        assert cells[(entry, "verl", "0")][-2] == num(ours) and cells[(entry, "local", "0")][-2] == num(theirs)
    before, first = steps["val/mean_before"].dropna(), steps.query("step == 1")
    control = experiment_blocks.verl_control(res)
    assert ("validation mean@8 the same" in control) == (before.nunique() == 1 and len(before) == len(runs))
    assert ("accuracy / entropy, the same / the same" in control) == (
        first.accuracy.nunique() == first.entropy.nunique() == 1
    )
    other_runs = RESULTS.part("real-lm").runs
    ratio = (runs.train_seconds / runs.steps).median() / (other_runs.train_seconds / other_runs.steps).median()
    assert experiment_blocks.verl_step_cost(res).endswith(f": {ratio:.1f} times")


# The pages that describe the published folders, and the words of their rules
DESCRIBING = ("docs/statistics.md", "docs/results.md", "docs/experiments.md", "README.md")


def published_primary_folders() -> list[str]:
    """The published folders (``""``: results/) whose provenance.json records a config, with their primary.csv."""
    under = sorted(p.name for p in (ROOT / "results").iterdir()
                   if (p / "provenance.json").is_file() and (p / "primary.csv").is_file())  # fmt: skip
    return ["", *under]


def _declared_kind(primary: dict) -> str:
    if primary.get("score") == "entropy":
        return "descriptive"
    if primary.get("exploratory"):
        return "exploratory"
    if primary.get("demoted"):
        return "demoted"
    return "sequential" if primary.get("sequential") else "single look"


def _per_model(value, model: str):
    return value[model] if isinstance(value, dict) else value


@pytest.mark.parametrize("folder", published_primary_folders())
def test_each_published_folder_states_the_rule_its_config_declares(folder):
    """Each published folder with a primary has a generated block ``[FOLDER/]declared-design`` on a page that
    describes it, and the block states, per primary and model, the rule its provenance.json config declares (read
    here from the raw config): sequential with its k, n_max, seeds, β and planning SD, a single look at its pairs,
    exploratory, demoted or descriptive; primary.csv's rows were decided by that rule."""
    from bandpo.stats.design import BETA
    from docs.blocks.publication import seed_range

    board = RESULTS.part(folder) if folder else RESULTS
    config = board.provenance["config"]
    name = f"{folder}/declared-design" if folder else "declared-design"
    primaries = {(xp, model): spec["primary"] for xp, spec in config["experiments"].items()
                 for model in spec.get("models") or () if (spec.get("primary") or {}).get("compare")
                 or (spec.get("primary") or {}).get("score") == "entropy"}  # fmt: skip
    p = board.primary
    assert set(zip(p.experiment, p.model, strict=True)) <= set(primaries), "primary.csv holds an undeclared primary"
    if not primaries:
        assert p.empty
        return
    bodies = [m["body"] for doc in DESCRIBING for m in docs.BLOCK.finditer(read(doc)) if m["name"] == name]
    assert bodies, f"no generated block {name!r} in {DESCRIBING}: the pages do not state the rule of results/{folder}"
    for body in bodies:
        clauses = dict(c.split(": ", 1) for c in body.split("; "))
        assert set(clauses) == {f"{xp}, {model}" for xp, model in primaries}, body
        for (xp, model), primary in primaries.items():
            clause, kind = clauses[f"{xp}, {model}"], _declared_kind(primary)
            assert clause.startswith(kind), (xp, model, clause)
            seeds = primary.get("seeds") or config["experiments"][xp].get("seeds") or config["seeds"]
            if kind == "sequential":
                design = primary["sequential"]
                n_max, beta = _per_model(design["n_max"], model), _per_model(design.get("beta", BETA), model)
                most = f"up to n_max {n_max} (seeds {seed_range(seeds[:n_max])})"
                assert f"a look every {design['k']} pairs {most}" in clause
                assert f"β {beta:.2f} (power {1 - beta:.2f}) at a margin of {primary['margin']:.1f} points" in clause
                assert f"planning SD {_per_model(design['planning_sd'], model):.2f} points" in clause
            elif kind == "single look":
                assert f"at {len(seeds)} pairs (seeds {seed_range(seeds)}), β {BETA:.2f}" in clause
            rows = p[(p.experiment == xp) & (p.model == model) & (p.role != "secondary")]
            expected = {"sequential": {"sequential"}, "single look": {"single look"}, "exploratory": {"exploratory"},
                        "demoted": {"single look, Holm"}, "descriptive": {"descriptive"}}[kind]  # fmt: skip
            assert set(rows.rule) == expected, (folder, xp, model, set(rows.rule))
    # the embedded publication: tiny-m's design is its own (power 0.85, 15 pairs), not tiny-s's
    if not folder:
        assert "main, tiny-m: sequential, a look every 5 pairs up to n_max 15 (seeds 0-14), β 0.15" in bodies[0]


def test_design_numbers_are_only_in_generated_blocks():
    """A design's numbers (n_max, β, the power, the most pairs) on the pages that describe the published folders are
    in generated blocks, which cannot go stale; hand-written text names the design without them (the rule's β =
    0.10 of `bandpo.stats.design.BETA`, its definition, aside)."""
    stated = re.compile(r"n_max (?:of |= ?)?\d+|1 − β = 0\.\d+|β = 0\.(?!10\b)\d+|(?:at most|up to) \d+ (?:seed )?pairs"
                        r"|power (?:1 − β = )?0\.\d+")  # fmt: skip
    for doc in DESCRIBING:
        text = docs.BLOCK.sub("", read(doc))
        text = re.sub(r"^ *```.*?^ *```", "", text, flags=re.S | re.M)
        text = re.sub(r"`[^`\n]+`", "", text)
        found = stated.findall(text)
        assert not found, f"{doc}: a design's number in hand-written text: {found} (make it a generated block)"


def test_the_plan_block_uses_the_applied_designs():
    """docs/statistics.md's plan prints the designs the published configs declare (the DAG's: design_settings of the
    provenance config): tiny-m at its own power and n_max, and the headline's boundaries of the design applied, those
    primary.csv's looks used (its first look's futility boundary)."""
    from bandpo.stats.design import SequentialDesign
    from bandpo.study import design_settings
    from docs.blocks import designs

    text = read("docs/statistics.md")
    body = next(m["body"] for m in docs.BLOCK.finditer(text) if m["name"] == "sequential-plan")
    config = RESULTS.provenance["config"]
    for model, setting in (("tiny-s", "tiny-s, 64 steps"), ("tiny-m", "tiny-m, 64 steps")):
        design = SequentialDesign(**design_settings(config, "main", model))
        row = next(line for line in body.splitlines() if line.startswith(f"| {setting} | main {model}: sequential"))
        cells = row.split(" | ")
        assert cells[2:5] == [f"{design.planning_sd * 100:.2f}", f"{1 - design.beta:.2f}", str(design.n_max)], row
    table = body.split("The headline's boundaries")[1].split("\n\n")[1].splitlines()[2:]
    looks = {int(line.split(" | ")[0][2:]): line.split(" | ") for line in table}
    stopped = RESULTS.primary.query("experiment == 'main' and model == 'tiny-s'").iloc[0]
    boundary = "= efficacy" if stopped.look == stopped.looks else f"{stopped.futility_t:.3f}"
    assert len(looks) == stopped.looks and looks[int(stopped.look)][3] == boundary
    assert looks[int(stopped.look)][2] == f"{stopped.efficacy_t:.3f}"
    assert set(designs.RULE_KINDS) == {"sequential", "single look", "exploratory", "demoted", "descriptive"}
