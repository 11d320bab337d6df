"""The run contract (bandpo/schemas/run.schema.yaml): the checker, the local trainer's output, and merge_verl's
mapping of verl's metric names onto the contract's."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bandpo.core.run_contract import RunContractError, check_run, contract, required_metric_keys
from bandpo.data.tiny_math import generate_tiny_math, write_jsonl
from bandpo.methods import BUCKET_LABELS
from bandpo.models.tiny import build_tokenizer, get_size, init_model
from bandpo.train.loop import TrainConfig, train
from bandpo.verl import merge as merge_verl


def verl_record(step: int) -> dict:
    """One line of verl's file logger as a verl run with a bandpo.* loss writes it (names as verl 0.9 logs them)."""
    data = {
        "critic/score/mean": -0.5,
        "actor/entropy": 1.5,
        "response_length/mean": 30.0,
        "timing_s/step": 3.0,
        "actor/pg_loss": 0.1,
        "actor/bandpo/clipfrac": 0.03,
        "actor/bandpo/clipfrac_upper": 0.02,
        "actor/bandpo/clipfrac_lower": 0.01,
    }
    for bucket in BUCKET_LABELS:
        data[f"actor/bandpo/clipfrac_upper/{bucket}"] = 0.0
        data[f"actor/bandpo/clipfrac_lower/{bucket}"] = 0.0
    return {"step": step, "data": data}


def test_contract_buckets_are_the_trainers():
    assert tuple(contract()["metrics"]["buckets"]) == BUCKET_LABELS


def test_verl_names_map_onto_the_contract():
    row = merge_verl.contract_metrics(verl_record(1)["data"])
    assert row["reward_mean"] == -0.5 and row["accuracy"] == 0.25 and row["entropy"] == 1.5  # score = 2 acc - 1
    assert row["response_length"] == 30.0 and row["step_seconds"] == 3.0
    assert row["clipfrac"] == 0.03 and row["clipfrac_upper"] == 0.02 and row["clipfrac_lower"] == 0.01
    assert row[f"clipfrac_upper/{BUCKET_LABELS[0]}"] == 0.0
    assert row["actor/pg_loss"] == 0.1  # not in the contract: keeps verl's name
    assert "actor/entropy" not in row and "actor/bandpo/clipfrac" not in row  # renamed, not copied


def write_verl_run(run: Path, records: list[dict]) -> None:
    """A run folder as merge_verl.py leaves it, built from verl log records through its own functions."""
    (run / "model").mkdir(parents=True)
    (run / "model" / "config.json").write_text("{}")
    (run / "verl_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = merge_verl.read_verl_metrics(run / "verl_metrics.jsonl")
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = {"trainer": "verl", "config": {"method": "bandpo"}, "method_params": {}, "steps": len(rows),
            "train_seconds_total": 6.0, "versions": {}}  # fmt: skip
    (run / "run.json").write_text(json.dumps(info))


def test_mapped_verl_metrics_pass_the_checker(tmp_path):
    write_verl_run(tmp_path / "run", [verl_record(1), verl_record(2), verl_record(2)])
    info = check_run(tmp_path / "run")
    assert info["trainer"] == "verl"
    steps = [json.loads(x)["step"] for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # a step logged twice (resume) is kept once


@pytest.mark.parametrize(
    ("verl_name", "key"),
    [
        ("critic/score/mean", "reward_mean"),
        ("actor/entropy", "entropy"),
        ("actor/bandpo/clipfrac", "clipfrac"),
        ("actor/bandpo/clipfrac_upper/p0.8-1.0", "clipfrac_upper/p0.8-1.0"),
    ],
)
def test_a_missing_metric_names_the_run_and_the_key(tmp_path, verl_name, key):
    records = [verl_record(1)]
    del records[0]["data"][verl_name]
    write_verl_run(tmp_path / "run", records)
    with pytest.raises(RunContractError, match=rf"run {tmp_path / 'run'}: metrics.jsonl line 1 lacks the key '{key}'"):
        check_run(tmp_path / "run")


def test_verls_own_loss_fills_the_contract_without_direction(tmp_path):
    """A verl run of verl's own loss (dppo_kl as verl's loss_mode: no bandpo.verl.plugin statistics) logs one clip
    fraction, actor/pg_clipfrac: it becomes the contract's clipfrac, run.json says directional_clipfrac: false, and
    only then may clipfrac_upper / clipfrac_lower be absent."""
    record = verl_record(1)
    record["data"] = {k: v for k, v in record["data"].items() if not k.startswith("actor/bandpo/")}
    record["data"]["actor/pg_clipfrac"] = 0.04
    run = tmp_path / "run"
    write_verl_run(run, [record])
    with pytest.raises(RunContractError, match="lacks the key 'clipfrac_upper'"):
        check_run(run)  # a run that does not say so still needs the direction
    info = json.loads((run / "run.json").read_text())
    info.update({"config": {"method": "dppo_kl"}, **merge_verl.method_record({"method": "dppo_kl"})})
    assert info["directional_clipfrac"] is False and "directional_clipfrac" not in merge_verl.method_record(
        {"method": "bandpo"}
    )
    (run / "run.json").write_text(json.dumps(info))
    check_run(run)
    assert json.loads((run / "metrics.jsonl").read_text())["clipfrac"] == 0.04


def test_missing_files_and_fields_are_named(tmp_path):
    run = tmp_path / "run"
    write_verl_run(run, [verl_record(1)])
    info = json.loads((run / "run.json").read_text())
    del info["train_seconds_total"]
    (run / "run.json").write_text(json.dumps(info))
    with pytest.raises(RunContractError, match="run.json lacks the field 'train_seconds_total'"):
        check_run(run)
    (run / "model" / "config.json").unlink()
    with pytest.raises(RunContractError, match=r"missing file 'model/config.json'"):
        check_run(run)


def test_files_that_are_not_json_are_named(tmp_path):
    run = tmp_path / "run"
    write_verl_run(run, [verl_record(1), verl_record(2)])
    metrics = run / "metrics.jsonl"
    good = metrics.read_text()
    metrics.write_text(good.splitlines()[0] + "\n{not json\n")
    with pytest.raises(RunContractError, match=rf"run {run}: {metrics}:2: not valid JSON"):
        check_run(run)
    metrics.write_text(good)
    (run / "run.json").write_text("[1, 2]")
    with pytest.raises(RunContractError, match=rf"run {run}: run.json is not a JSON object"):
        check_run(run)


def test_merge_verl_records_the_reward_grader():
    from bandpo import grader

    rec = merge_verl.reward_grader({"grader_mode": "strict-answer-line"})
    assert rec["mode"] == "strict-answer-line" and rec["id"] == grader.grader_id("strict-answer-line")
    assert rec["id"].startswith("bandpo.grader/strict-answer-line@")
    assert merge_verl.reward_grader({}) is None


def test_merge_verl_records_the_method_as_the_local_trainer():
    """run.json's method_label is what the leaderboard's params column shows (MethodConfig.label); method_params
    spells out every parameter, defaults included, as the local trainer's (evaluation reads them from run.json)."""
    from bandpo.methods import make_config

    rec = merge_verl.method_record({"method": "bandpo", "params": {"divergence": "kl", "delta": 0.05}})
    full = make_config("bandpo", {"divergence": "kl", "delta": 0.05}).to_dict()
    assert rec == {"method": "bandpo", "method_label": "divergence=kl, delta=0.05", "method_params": full}
    assert full["delta"] == 0.05 and len(full) > 2  # the defaults are there too
    assert merge_verl.method_record({}) == {"method_params": {}}
    with pytest.raises(ValueError, match="unknown parameter"):
        merge_verl.method_record({"method": "grpo", "params": {"delta": 0.05}})


def test_the_schema_lists_what_the_report_reads():
    keys = required_metric_keys()
    for key in ("step", "entropy", "reward_mean", "clipfrac", "clipfrac_upper/p0.0-0.2", "step_seconds"):
        assert key in keys
    assert {"config", "method_params", "steps", "train_seconds_total"} <= set(contract()["run_json"]["required"])


@pytest.mark.parametrize("method", ["grpo", "cispo"])  # per-token bounds, and a whole-loss method (no buckets)
def test_the_local_trainer_writes_the_contract(tmp_path, method):
    tokenizer = build_tokenizer()
    model = init_model(get_size("tiny-test"), tokenizer, seed=0)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    write_jsonl(tmp_path / "data" / "train.jsonl", generate_tiny_math(seed=1, n_train=32, n_val=4, n_test=4)["train"])
    cfg = TrainConfig(model=str(tmp_path / "model"), data=str(tmp_path / "data"), out=str(tmp_path / "run"),
                      steps=2, prompts_per_step=4, samples_per_prompt=4, max_new_tokens=8, method=method,
                      progress=False)  # fmt: skip
    train(cfg)
    info = check_run(tmp_path / "run")
    assert info["config"]["method"] == method and info["steps"] == 2


def test_verl_held_out_measurements_become_the_local_trainers_val_columns(tmp_path):
    """verl's validation (val_every: val-core/<source>/acc/mean@k) is the local trainer's val/mean; the measurement
    before training (step 0) goes into step 1's row as val/mean_before; a step logged twice keeps both records'
    keys, the later value winning."""
    before = {"step": 0, "data": {"val-core/tiny-math/acc/mean@8": 0.25, "val-aux/tiny-math/score/mean@8": -0.5}}
    step4 = verl_record(2)
    step4["data"]["val-core/tiny-math/acc/mean@8"] = 0.375
    again = {"step": 2, "data": {"actor/entropy": 1.25}}
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [before, verl_record(1), step4]))
    (tmp_path / "b.jsonl").write_text(json.dumps(again) + "\n")
    rows = merge_verl.read_verl_metrics(tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["val/mean_before"] == 0.25 and "val/mean" not in rows[0]
    assert rows[1]["val/mean"] == 0.375 and rows[1]["entropy"] == 1.25 and rows[1]["clipfrac"] == 0.03
    assert rows[0]["val-core/tiny-math/acc/mean@8_before"] == 0.25  # verl's own names too
    assert rows[0]["val-aux/tiny-math/score/mean@8_before"] == -0.5
    (tmp_path / "bad.jsonl").write_text(json.dumps({"step": -1, "data": {}}) + "\n")
    with pytest.raises(ValueError, match="integer step >= 0"):
        merge_verl.read_verl_metrics(tmp_path / "bad.jsonl")


def test_verl_validation_of_several_sets_keeps_each_sets_metrics(tmp_path):
    """The paper's validation (config/gpu.yaml: AIME24, AIME25, AMC23 at k = 32, before training and every 5 steps):
    no single val/mean, but every set's val-core metrics (mean@32, best@32 and maj@32 with their bootstrap std) on
    its step's row, and
    those of step 0 on the first row as <name>_before. The metric names are those verl's own
    process_validation_metrics gives, computed here from per-sample records."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    rng = random.Random(0)
    sources = [s for s in ("aime-2024", "aime-2025", "amc-2023") for _ in range(3 * 32)]
    uids = [f"{s}-{i // 32}" for i, s in enumerate(sources)]
    acc = [float(rng.random() < 0.3) for _ in sources]
    infos = {"score": [2 * a - 1 for a in acc], "acc": acc, "pred": [str(rng.randint(0, 3)) for _ in sources]}
    metrics = PPOTrainer._val_metrics_update(None, sources, uids, infos, [])  # verl's naming; it uses no state
    core = sorted(k for k in metrics if k.startswith("val-core/"))
    assert core == sorted(
        f"val-core/{s}/acc/{m}" for s in ("aime-2024", "aime-2025", "amc-2023")
        for m in ("mean@32", "best@32/mean", "best@32/std", "maj@32/mean", "maj@32/std")
    )  # fmt: skip
    records = [{"step": 0, "data": metrics}, verl_record(1), {"step": 5, "data": {**verl_record(5)["data"], **metrics}}]
    (tmp_path / "v.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = merge_verl.read_verl_metrics(tmp_path / "v.jsonl")
    assert not any("val/mean" in r or "val/mean_before" in r for r in rows)
    for key in core:
        assert rows[0][f"{key}_before"] == rows[1][key] == metrics[key]
        assert key not in rows[0]
