"""The local GRPO trainer: config errors, every method runs, determinism, and resume after a real SIGKILL."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import logging
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from bandpo import methods
from bandpo.core import numerics
from bandpo.core.files import read_jsonl
from bandpo.data.tiny_math import generate_tiny_math, write_jsonl
from bandpo.models.tiny import build_tokenizer, get_size, init_model
from bandpo.runtime.sampling import positions, sample_rows
from bandpo.train.loop import TrainConfig, group_advantages, lr_at, train
from bandpo.train.settings import TIMING_KEYS, from_dict, read_spec
from bandpo.train.trackers import TrackerError, Trackers, mlflow_key, mlflow_store

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """A tiny random Llama (seconds to build) and a small tiny-math train split, both made here."""
    base = tmp_path_factory.mktemp("train-assets")
    tokenizer = build_tokenizer()
    model = init_model(get_size("tiny-test"), tokenizer, seed=0)
    model.save_pretrained(base / "model")
    tokenizer.save_pretrained(base / "model")
    rows = generate_tiny_math(seed=1, n_train=64, n_val=8, n_test=8)["train"]
    write_jsonl(base / "data" / "train.jsonl", rows)
    return base / "model", base / "data"


def small_config(assets, out, **overrides) -> TrainConfig:
    model, data = assets
    cfg = TrainConfig(model=str(model), data=str(data), out=str(out), steps=3, prompts_per_step=4,
                      samples_per_prompt=4, max_new_tokens=12, reward="random", progress=False)  # fmt: skip
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def without_timing(metrics: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if k not in TIMING_KEYS} for m in metrics]


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the TensorBoard event files in ``folder``, read back offline: tag -> [(step, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def mlflow_run(uri: str):
    """The one active run of experiment bandpo-bench in the MLflow store ``uri``, read back with MLflow's client, and
    its metrics: name -> [(step, value)] in step order."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("bandpo-bench").experiment_id])
    history = client.get_metric_history
    return run, {key: sorted((m.step, m.value) for m in history(run.info.run_id, key)) for key in run.data.metrics}


def assert_scalars_are(scalars: dict[str, list[tuple[int, float]]], lines: list[dict], name=str, value=float) -> None:
    """A tracker's scalars hold exactly the metrics lines: each numeric field under ``name(field)``, each step once,
    at global_step = the line's step, with ``value(its value)``."""
    expected: dict[str, list[tuple[int, float]]] = {}
    for m in lines:
        for k, v in m.items():
            if k != "step" and isinstance(v, (int, float)):
                expected.setdefault(name(k), []).append((m["step"], value(v)))
    assert sorted(scalars) == sorted(expected)
    for tag, points in expected.items():
        got = scalars[tag]
        assert [step for step, _ in got] == [step for step, _ in points], tag  # each step once, in order
        assert all(a == b or (math.isnan(a) and math.isnan(b)) for (_, a), (_, b) in zip(got, points, strict=True))


def assert_tensorboard_is(folder: Path, lines: list[dict]) -> None:
    """The event files hold exactly the metrics lines, under the fields' names (TensorBoard keeps float32)."""
    as_float32 = lambda v: torch.tensor(float(v), dtype=torch.float32).item()  # noqa: E731
    assert_scalars_are(tensorboard_scalars(folder), lines, value=as_float32)


def assert_mlflow_is(scalars: dict[str, list[tuple[int, float]]], lines: list[dict]) -> None:
    """An MLflow run's metrics (`mlflow_run`) hold exactly the metrics lines, under `mlflow_key` of the names."""
    assert_scalars_are(scalars, lines, name=mlflow_key)


def test_config_errors_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="unknown method 'grpoo'"):
        methods.resolve("grpoo", {}, TrainConfig().loss_settings())
    with pytest.raises(ValueError, match="delta"):
        methods.resolve("bandpo", {"delta": -1.0}, TrainConfig().loss_settings())
    with pytest.raises(ValueError, match="samples_per_prompt"):
        TrainConfig(model="m", data="d", out="o", samples_per_prompt=1).validate()
    with pytest.raises(ValueError, match="lr: must be a finite number > 0"):
        TrainConfig(model="m", data="d", out="o", lr=float("nan")).validate()
    with pytest.raises(ValueError, match="dual_clip_c: must be null or a finite number > 1"):
        TrainConfig(model="m", data="d", out="o", dual_clip_c=1.0).validate()
    run = {"model": "m", "data": "d", "out": "o"}
    cfg = from_dict({**run, "steps": 7, "lr": 1e-3, "dual_clip_c": None, "kl_coef": 0})
    assert (cfg.steps, cfg.lr, cfg.dual_clip_c, cfg.kl_coef) == (7, 1e-3, None, 0.0)
    # a spec file (the run plan's) and the config's settings are checked the same way: names, types, ranges
    for bad, match in [
        ({"stpes": 3}, "unknown training setting 'stpes' \\(did you mean 'steps'\\?\\)"),
        ({"steps": 0}, "steps: must be an integer >= 1"),
        ({"steps": 1.5}, "training setting 'steps': expected int"),
        ({"keep_checkpoint": 1}, "training setting 'keep_checkpoint': expected bool"),
    ]:
        with pytest.raises(ValueError, match=match):
            from_dict({**run, **bad})
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({**run, **bad}))
        with pytest.raises(ValueError, match=f"(?s)^--spec {re.escape(str(spec))}: .*" + match):
            read_spec(spec)
    # the CLI turns these into a usage error, not a stack trace
    proc = subprocess.run([sys.executable, "-m", "bandpo.train", "--model", "m", "--data", "d", "--out", "o",
                           "--method", "bandpo", "--params", '{"divergence": "klx"}'],
                          capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 2 and "divergence" in proc.stderr and "Traceback" not in proc.stderr


def test_lr_schedule_is_linear_from_lr_to_lr_end():
    cfg = TrainConfig(steps=5, lr=5e-4, lr_end=1e-4)
    assert [lr_at(cfg, s) for s in range(5)] == pytest.approx([5e-4, 4e-4, 3e-4, 2e-4, 1e-4], rel=1e-12)
    assert lr_at(cfg, 0) == 5e-4
    assert {lr_at(TrainConfig(steps=5, lr_end=None), s) for s in range(5)} == {TrainConfig().lr}
    assert lr_at(TrainConfig(steps=1, lr=2e-4), 0) == 2e-4


def test_group_advantages():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]), group=4, eps=1e-6)
    std = torch.tensor([1.0, 0, 0, 0]).std(unbiased=True)
    torch.testing.assert_close(adv[:4], (torch.tensor([1.0, 0, 0, 0]) - 0.25) / (std + 1e-6))
    assert adv[4:].abs().max() == 0  # a group with one outcome carries no signal


@pytest.mark.parametrize("method", methods.list_methods())
def test_every_registered_method_trains(assets, tmp_path, method):
    summary = train(small_config(assets, tmp_path / method, method=method, steps=2, kl_coef=0.01))
    metrics = read_metrics(tmp_path / method)
    assert [m["step"] for m in metrics] == [1, 2]
    for key in ("reward_mean", "accuracy", "entropy", "response_length", "clipfrac_upper", "clipfrac_lower",
                "approx_kl", "grad_norm", "step_seconds", "tokens_per_second", "bounds_seconds", "kl_ref"):  # fmt: skip
        assert key in metrics[-1] and metrics[-1][key] == metrics[-1][key], key  # present and not NaN
    if methods.get_method(method).kind == "bounds":
        assert "clipfrac_upper/p0.0-0.2" in metrics[-1] and "bound_upper_mean/p0.8-1.0" in metrics[-1]
    assert (tmp_path / method / "model" / "config.json").is_file()
    assert summary["grader"]["name"] == "bandpo.grader"
    run_json = json.loads((tmp_path / method / "run.json").read_text())
    assert run_json["method"] == method and run_json["method_params"] == methods.make_config(method).to_dict()
    config = methods.make_config(method)
    assert run_json["method_label"] == config.label()
    assert config.label() != "" or not dataclasses.fields(config)  # empty only for a method without parameters (gpg)
    assert math.isfinite(metrics[-1]["loss"])
    assert "stopped_frac_pos/p0.0-0.2" in metrics[-1] and "stopped_frac_neg" in metrics[-1]
    assert (
        not (tmp_path / method / "checkpoint").exists() and not (tmp_path / method / "metrics.jsonl.partial").exists()
    )


def test_same_seed_same_run_and_learning_happens(assets, tmp_path):
    train(small_config(assets, tmp_path / "a", seed=3))
    train(small_config(assets, tmp_path / "b", seed=3))
    train(small_config(assets, tmp_path / "c", seed=4))
    a, b, c = (without_timing(read_metrics(tmp_path / x)) for x in "abc")
    assert a == b
    assert a != c
    init = load_file(assets[0] / "model.safetensors")
    final_a = load_file(tmp_path / "a" / "model" / "model.safetensors")
    final_b = load_file(tmp_path / "b" / "model" / "model.safetensors")
    assert all(torch.equal(final_a[k], final_b[k]) for k in final_a)
    assert any(not torch.equal(final_a[k], init[k]) for k in final_a)  # the updates did change the policy


def test_keyed_draws_are_one_seed_one_run_and_share_a_steps_rollouts_between_methods(assets, tmp_path):
    """``sampler_draws: keyed`` (common random numbers): the same seed gives the same run; another method of the same
    seed draws the same completions at step 1 (the same policy, the same numbers) and stream draws other ones."""
    runs = {name: small_config(assets, tmp_path / name, seed=5, sampler_draws=draws, method=method, steps=2)
            for name, draws, method in (("a", "keyed", "grpo"), ("b", "keyed", "grpo"), ("c", "keyed", "bandpo"),
                                        ("s", "stream", "grpo"))}  # fmt: skip
    torch.manual_seed(0)
    train(runs["a"])
    torch.manual_seed(1)  # the process's generator does not enter a keyed run
    train(runs["b"])
    train(runs["c"])
    train(runs["s"])
    a, b, c, s = (without_timing(read_metrics(tmp_path / x)) for x in "abcs")
    assert a == b
    first = ("entropy", "response_length", "reward_mean")  # step 1's rollouts: sampled before any update
    assert [a[0][k] for k in first] == [c[0][k] for k in first]
    assert [a[0][k] for k in first] != [s[0][k] for k in first]


def test_crn_check_measures_both_draws_and_applies_the_declared_rule(tmp_path, capsys):
    """benchmarks/crn_check.py on scores whose numbers are known: the paired SD of each experiment, the arms'
    correlation, the ratio of the paired SDs and the adoption rule of config/crn-check.yaml (ratio <= 0.75)."""
    spec = importlib.util.spec_from_file_location("crn_check", ROOT / "benchmarks" / "crn_check.py")
    crn = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(crn)
    control = [0.50, 0.40, 0.60, 0.55, 0.45]
    diffs = {"stream": [0.04, -0.04, 0.02, -0.02, 0.00], "keyed": [0.01, -0.01, 0.005, -0.005, 0.0]}
    rows = [{"experiment": xp, "model": "tiny-s", "task": "tiny_math", "name": "mean@8", "entry": entry, "seed": seed,
             "value": c + (d if entry == "bandpo_kl" else 0.0)}
            for xp, ds in diffs.items() for seed, (c, d) in enumerate(zip(control, ds, strict=True))
            for entry in ("grpo", "bandpo_kl")]  # fmt: skip
    pd.DataFrame(rows).to_csv(tmp_path / "scores.csv", index=False)
    assert crn.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    sd = {xp: statistics.stdev(100 * d for d in ds) for xp, ds in diffs.items()}
    assert f"SD of the differences {sd['stream']:.2f}" in out and f"SD of the differences {sd['keyed']:.2f}" in out
    assert f"paired SD, keyed / stream: {sd['keyed'] / sd['stream']:.2f}" in out
    assert out.rstrip().endswith(": adopt")
    diffs["keyed"] = diffs["stream"]  # no fall: stream draws stay
    pd.DataFrame(rows).assign(value=lambda f: f.apply(
        lambda r: control[r.seed] + (diffs[r.experiment][r.seed] if r.entry == "bandpo_kl" else 0.0), axis=1)
    ).to_csv(tmp_path / "scores.csv", index=False)  # fmt: skip
    assert crn.main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("not adopted on this tier")
    with pytest.raises(SystemExit, match="not found"):
        crn.main([str(tmp_path / "missing")])


# `python -m bandpo.train` whose update of step STOP_AT_UPDATE stops half-way: it says so on stdout and waits there
# to be killed (the wait is a hang guard only: a run never killed exits with an error and publishes nothing).
STOPPING_RUN = """
import os, runpy, threading
import bandpo.train.loop as loop
real_update, calls = loop.update, []
def update(*args, **kwargs):
    calls.append(1)
    if len(calls) == {stop_at}:
        print("stopped", flush=True)
        threading.Event().wait({guard_s})
        os._exit(3)
    return real_update(*args, **kwargs)
loop.update = update
runpy.run_module("bandpo.train", run_name="__main__", alter_sys=True)
"""
STOP_AT_UPDATE = 6  # in step 6: checkpoints of steps 2 and 4 are written, metrics.jsonl.partial has step 5 too
HANG_GUARD_S = 600.0  # hang guards only: a run that never gets to where it should is ended, the test fails


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to ``proc`` and everything it started (its grader worker): a job killed from outside."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_resume_after_sigkill_matches_uninterrupted_run(assets, tmp_path):
    """A run killed with SIGKILL in the middle of a step (after a checkpoint, with a metrics line past it) and then
    started again resumes from that checkpoint and ends with the uninterrupted run's metrics and weights, and with
    TensorBoard curves holding each step once. The kill comes at a fixed point (the run stops there and says so),
    not after a guessed number of seconds."""
    model, data = assets
    common = ["--model", str(model), "--data", str(data), "--method", "bandpo", "--seed", "5", "--threads", "1",
              "--no-progress", "--steps", "8", "--checkpoint-every", "2", "--prompts-per-step", "4",
              "--samples-per-prompt", "4", "--max-new-tokens", "12", "--reward", "random",
              "--trackers", "tensorboard"]  # fmt: skip
    # the jobs' numerics (with the library MKL needs on a CPU that is not Intel's), as the workflow gives them: the
    # killed run is `python -c`, which does not restart itself with that library as `python -m bandpo.train` does
    env = {**os.environ, "PYTHONPATH": str(ROOT), **numerics.env()}
    subprocess.run([sys.executable, "-m", "bandpo.train", *common, "--out", str(tmp_path / "full")],
                   check=True, env=env, capture_output=True, timeout=HANG_GUARD_S)  # fmt: skip

    killed = tmp_path / "killed"
    stopping = STOPPING_RUN.format(stop_at=STOP_AT_UPDATE, guard_s=HANG_GUARD_S)
    stderr = tmp_path / "killed.stderr"
    with open(stderr, "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", stopping, *common, "--out", str(killed)], env=env,
                                stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)  # fmt: skip
    guard = threading.Timer(HANG_GUARD_S, _kill_group, (proc,))
    guard.start()
    try:
        said = proc.stdout.readline()  # waits for the run to stop mid-step (EOF if it ended instead)
        assert said == "stopped\n" and proc.poll() is None, f"{said!r}\n{stderr.read_text()[-3000:]}"
        _kill_group(proc)  # a real SIGKILL, mid-step
        assert proc.wait(timeout=HANG_GUARD_S) == -signal.SIGKILL
    finally:
        guard.cancel()
        if proc.poll() is None:  # not reaped yet: its process group is still the one it started
            _kill_group(proc)
            proc.wait()
        proc.stdout.close()
    # nothing looks complete after the kill
    assert not (killed / "metrics.jsonl").exists() and not (killed / "run.json").exists()
    assert not (killed / "model").exists()
    ckpt = killed / "checkpoint" / "ckpt.pt"
    step_at_kill = torch.load(ckpt, weights_only=False)["step"]
    assert step_at_kill == 4
    partial = [json.loads(line)["step"] for line in (killed / "metrics.jsonl.partial").read_text().splitlines()]
    assert partial == [1, 2, 3, 4, 5]  # step 5 finished after the checkpoint: the resumed run does it again

    subprocess.run([sys.executable, "-m", "bandpo.train", *common, "--out", str(killed)],
                   check=True, env=env, capture_output=True, timeout=HANG_GUARD_S)  # fmt: skip
    assert json.loads((killed / "run.json").read_text())["resumed_from_step"] == step_at_kill
    assert without_timing(read_metrics(killed)) == without_timing(read_metrics(tmp_path / "full"))
    # the TensorBoard curves of the killed and resumed run: each step once (the killed process's step 5 is gone),
    # the values of its metrics.jsonl
    assert_tensorboard_is(killed / "tensorboard", read_metrics(killed))
    a, b = (
        load_file(killed / "model" / "model.safetensors"),
        load_file(tmp_path / "full" / "model" / "model.safetensors"),
    )
    assert all(torch.equal(a[k], b[k]) for k in a)


# every numeric field the trackers get, among them a name that is also the start of others (clipfrac_upper and
# clipfrac_upper/p0.0-0.2: MLflow's file store keeps "/" as a folder) and a NaN (a gap)
TRACKED = [{"step": s, "reward_mean": s / 10, "entropy": 1.0 / s, "clipfrac_upper": 0.1 * s,
            "clipfrac_upper/p0.0-0.2": 0.5, "clipfrac": float("nan"), "probe/p_correct": s * 0.25, "note": "text"}
           for s in range(1, 6)]  # fmt: skip


def test_trackers_get_the_metrics_lines_and_a_resume_rewrites_them(tmp_path, monkeypatch):
    """Offline, with the real packages: the run's TensorBoard event files and its MLflow store (SQLite), read back,
    hold each metrics line at global_step = its step; a process that logged steps past its last checkpoint and died
    is followed by one whose trackers hold the checkpoint's steps and then its own, each step once. A tracker whose
    package is missing is an error of the config check, naming it. Off by default: no tracker folder."""
    from bandpo.train.runfiles import Checkpoint

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the run's own store
    model, optimizer = torch.nn.Linear(2, 2), torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    lines = TRACKED
    cfg = TrainConfig(model="models/tiny-s", data="d", out=str(tmp_path), method="grpo", seed=3,
                      trackers=["tensorboard", "mlflow"])  # fmt: skip
    assert cfg.problems() == []
    first = Checkpoint(tmp_path, cfg.identity(), cfg)
    assert first.resume(model, optimizer, torch.device("cpu")) == (0, [])
    for m in lines:
        first.log(m)
    first.save(3, model, optimizer, lines[:3])  # the checkpoint after step 3; steps 4, 5 logged after it
    assert_tensorboard_is(tmp_path / "tensorboard", lines)  # flushed per step: readable before close (or a crash)
    assert_mlflow_is(mlflow_run(mlflow_store(tmp_path))[1], lines)
    resumed = [dict(m, reward_mean=m["reward_mean"] + 1) for m in lines[3:]]  # the resumed process's own values
    second = Checkpoint(tmp_path, cfg.identity(), cfg)  # the killed process never closed its trackers
    assert second.resume(model, optimizer, torch.device("cpu"))[0] == 3
    for m in resumed:
        second.log(m)
    second.close()
    assert_tensorboard_is(tmp_path / "tensorboard", lines[:3] + resumed)
    run, scalars = mlflow_run(mlflow_store(tmp_path))  # one active run: the killed process's is deleted
    assert_mlflow_is(scalars, lines[:3] + resumed)
    assert run.info.run_name == "tiny-s-grpo-seed3" and run.info.status == "FINISHED"
    assert run.data.params["method"] == "grpo" and run.data.params["trackers"] == "['tensorboard', 'mlflow']"
    assert run.data.tags["bandpo_run_dir"] == str(tmp_path.resolve())
    assert mlflow_store(tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlruns/mlflow.db"
    partial = (tmp_path / "metrics.jsonl.partial").read_text()
    assert partial == "".join(json.dumps(m) + "\n" for m in lines[:3] + resumed)

    # off by default
    off = tmp_path / "off"
    Checkpoint(off, "x", TrainConfig(model="m", data="d", out=str(off))).resume(model, optimizer, torch.device("cpu"))
    assert not (off / "tensorboard").exists() and not (off / "mlruns").exists()

    # a missing package: named by the config check, before any job
    find_spec = importlib.util.find_spec
    missing = {"tensorboard", "mlflow"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in missing else find_spec(name, *a))
    assert cfg.problems() == [
        f'trackers: {name} needs the {name} package: pip install -e ".[trackers]" (pyproject.toml)'
        for name in ("tensorboard", "mlflow")
    ]
    with pytest.raises(ValueError, match="trackers: unknown tracker 'wandb'"):
        from_dict({"model": "m", "data": "d", "out": "o", "trackers": ["wandb"]})


def test_mlflow_names_work_in_its_file_store_and_a_store_of_the_users_choice(tmp_path, monkeypatch):
    """MLFLOW_TRACKING_URI picks the store; in MLflow's file store (the user's choice, with
    MLFLOW_ALLOW_FILE_STORE=true) a name and the names under it (clipfrac_upper, clipfrac_upper/p0.0-0.2) are
    metrics side by side. Several runs share the store, each found by its folder's tag; a resumed run replaces its
    own earlier one only. Without MLFLOW_ALLOW_FILE_STORE, MLflow refuses the file store: an error of one line."""
    from mlflow.tracking import MlflowClient

    store = (tmp_path / "store").resolve().as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    runs = {}
    for seed in (0, 1):
        out = tmp_path / f"seed{seed}"
        first = Trackers(out, ["mlflow"], f"tiny-s-grpo-seed{seed}", {"seed": seed})
        for m in TRACKED:
            first.log(m)
        resumed = Trackers(out, ["mlflow"], f"tiny-s-grpo-seed{seed}", {"seed": seed}, TRACKED[:3])
        resumed.log(TRACKED[3])
        resumed.close()
        runs[str(out.resolve())] = TRACKED[:4]
    client = MlflowClient(tracking_uri=store)
    active = client.search_runs([client.get_experiment_by_name("bandpo-bench").experiment_id])
    assert sorted(r.data.tags["bandpo_run_dir"] for r in active) == sorted(runs)
    for run in active:
        scalars = {key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
                   for key in run.data.metrics}  # fmt: skip
        assert_mlflow_is(scalars, runs[run.data.tags["bandpo_run_dir"]])
    assert {"clipfrac_upper", "clipfrac_upper.p0.0-0.2", "probe.p_correct"} <= set(active[0].data.metrics)

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    refused_store = (tmp_path / "refused-store").resolve().as_uri()  # a new URI: MLflow caches a store per URI
    monkeypatch.setenv("MLFLOW_TRACKING_URI", refused_store)
    with pytest.raises(TrackerError) as refused:
        Trackers(tmp_path / "refused", ["tensorboard", "mlflow"], "r", {})
    message = str(refused.value)
    assert message.startswith(f"trackers: mlflow could not start ({refused_store}), so the run stops before training: ")
    assert "maintenance mode" in message and "\n" not in message


def test_a_training_run_writes_each_tracker_and_stops_before_training_when_one_cannot_start(assets, tmp_path):
    """``python -m bandpo.train --trackers tensorboard mlflow`` with the real packages: its event files and its MLflow
    store hold the lines of its metrics.jsonl. A tracker that cannot start (MLflow's file store, refused by MLflow 3
    unless MLFLOW_ALLOW_FILE_STORE=true) stops the run before its first step with one line and no traceback."""
    model, data = assets
    args = [sys.executable, "-m", "bandpo.train", "--model", str(model), "--data", str(data), "--method", "grpo",
            "--threads", "1", "--no-progress", "--steps", "3", "--prompts-per-step", "4", "--samples-per-prompt", "4",
            "--max-new-tokens", "12", "--reward", "random", "--trackers", "tensorboard", "mlflow"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), **numerics.env()}
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop("MLFLOW_ALLOW_FILE_STORE", None)
    out = tmp_path / "run"
    subprocess.run([*args, "--out", str(out)], check=True, env=env, capture_output=True, timeout=HANG_GUARD_S)
    lines = read_metrics(out)
    assert [m["step"] for m in lines] == [1, 2, 3]
    assert_tensorboard_is(out / "tensorboard", lines)
    run, scalars = mlflow_run(mlflow_store(out))
    assert_mlflow_is(scalars, lines)
    assert run.info.status == "FINISHED" and run.data.params["steps"] == "3"

    stopped = tmp_path / "stopped"
    env["MLFLOW_TRACKING_URI"] = (tmp_path / "file-store").resolve().as_uri()
    proc = subprocess.run([*args, "--out", str(stopped)], env=env, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)  # fmt: skip
    errors = [line for line in proc.stderr.splitlines() if line.startswith("python -m bandpo.train: error:")]
    assert proc.returncode == 1 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert errors[0].startswith("python -m bandpo.train: error: trackers: mlflow could not start (file://")
    assert (stopped / "metrics.jsonl.partial").read_text() == ""  # no step was trained
    assert not (stopped / "checkpoint").exists() and not (stopped / "run.json").exists()


def test_a_tracker_that_fails_mid_run_warns_once_and_the_run_goes_on(tmp_path, monkeypatch, caplog):
    """A tracker that fails after its start (here: the run deleted from MLflow's store, as from its UI, during the
    run) is dropped with one warning; the other trackers and metrics.jsonl get every step."""
    from mlflow.tracking import MlflowClient

    from bandpo.train.runfiles import Checkpoint

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    model, optimizer = torch.nn.Linear(2, 2), torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    cfg = TrainConfig(model="m", data="d", out=str(tmp_path), method="grpo", trackers=["mlflow", "tensorboard"])
    ckpt = Checkpoint(tmp_path, cfg.identity(), cfg)
    ckpt.resume(model, optimizer, torch.device("cpu"))
    ckpt.log(TRACKED[0])
    run, _ = mlflow_run(mlflow_store(tmp_path))
    MlflowClient(tracking_uri=mlflow_store(tmp_path)).delete_run(run.info.run_id)
    with caplog.at_level(logging.WARNING, logger="bandpo.train.trackers"):
        for m in TRACKED[1:]:
            ckpt.log(m)
        ckpt.close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "bandpo.train.trackers"]
    assert len(warnings) == 1 and warnings[0].startswith("trackers: mlflow failed at step 2 and is off"), warnings
    assert "MlflowException" in warnings[0] and "deleted" in warnings[0]
    assert_tensorboard_is(tmp_path / "tensorboard", TRACKED)
    assert [json.loads(line) for line in (tmp_path / "metrics.jsonl.partial").read_text().splitlines()] == [
        json.loads(json.dumps(m)) for m in TRACKED
    ]


def test_a_spec_file_leaves_out_trackers_and_sampler_draws_at_their_default(tmp_path):
    """Adding the trackers and sampler_draws settings rewrote no spec file (no job reruns) and changed no run's
    identity (its checkpoints still resume): a spec leaves each out while it holds its default, and reads back to the
    same settings either way; keyed draws are another identity (other numbers), trackers are not."""
    from bandpo.core.protocol import spec_fields

    run = TrainConfig(model="m", data="d", out="o")
    assert spec_fields(run) == {
        k: v for k, v in dataclasses.asdict(run).items() if k not in ("trackers", "sampler_draws")
    }
    unhashed = ("out", "progress", "keep_checkpoint", "checkpoint_every", "trackers", "sampler_draws")
    before = {k: v for k, v in dataclasses.asdict(run).items() if k not in unhashed}  # before sampler_draws existed
    assert run.identity() == hashlib.sha256(json.dumps(before, sort_keys=True, default=str).encode()).hexdigest()[:16]
    on = dataclasses.replace(run, trackers=["tensorboard"])
    assert spec_fields(on)["trackers"] == ["tensorboard"] and on.identity() == run.identity()
    keyed = dataclasses.replace(run, sampler_draws="keyed")
    assert spec_fields(keyed)["sampler_draws"] == "keyed" and keyed.identity() != run.identity()
    for settings in (run, on, keyed):
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps(spec_fields(settings)))
        assert read_spec(spec) == settings


def test_resume_refuses_a_different_config(assets, tmp_path):
    cfg = small_config(assets, tmp_path / "r", steps=4, checkpoint_every=1, keep_checkpoint=True)
    train(cfg)
    other = small_config(assets, tmp_path / "r", steps=4, checkpoint_every=1, lr=1e-3)
    with pytest.raises(RuntimeError, match="different run configuration"):
        train(other)


@pytest.fixture(scope="module")
def eos_heavy_model(assets):
    """The tiny random Llama with +3 on the EOS logit (about 1 in 6 tokens is EOS): short completions of
    varied lengths, so that the sampler drops finished rows many times."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(assets[0])
    model = AutoModelForCausalLM.from_pretrained(assets[0], dtype=torch.float32).eval()
    bias = torch.zeros(model.config.vocab_size)
    bias[tokenizer.eos_token_id] = 3.0
    model.lm_head.register_forward_hook(lambda module, args, output: output + bias)
    return model, tokenizer


def completion_log_probs(model, input_ids, attention_mask, prompt_len: int, with_entropy: bool = False):
    """The reference for the trainer's shared-prompt pass: one full forward pass over every prompt + completion row;
    log-probs of the completion tokens and the token entropy."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions(attention_mask)).logits
    log_probs = torch.log_softmax(logits[:, prompt_len - 1 : -1].float(), dim=-1)  # position t predicts token t + 1
    token_log_prob = log_probs.gather(-1, input_ids[:, prompt_len:].unsqueeze(-1)).squeeze(-1)
    return token_log_prob, (-(log_probs.exp() * log_probs).sum(-1) if with_entropy else None)


def _prompts(tokenizer, texts):
    tokenizer.padding_side = "left"
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    return enc["input_ids"], enc["attention_mask"]


def test_sampler_draws_from_the_models_softmax(eos_heavy_model):
    """The KV-cached sampler (shared prompt cache, finished rows dropped) samples the model's plain softmax: the
    first token's frequencies match softmax(logits / T), and over many rollouts the mean surprisal of the sampled
    tokens matches the mean entropy of their distributions, which a full forward pass recomputes."""
    from bandpo.train.loop import Batch, completion_log_probs_shared

    torch.set_num_threads(1)
    model, tokenizer = eos_heavy_model
    eos = tokenizer.eos_token_id
    ids, mask = _prompts(tokenizer, ["Q: Compute 1/7+3/7.\nA: "])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[0, -1]
    for temperature in (1.0, 0.7):
        torch.manual_seed(0)
        draws = 20000
        tokens, _, _ = sample_rows(model, ids, mask, draws, 1, temperature, eos)
        freq = torch.bincount(tokens[:, 0], minlength=logits.numel()).double() / draws
        p = torch.softmax(logits.double() / temperature, -1)
        assert ((freq - p).abs() <= 5 * (p * (1 - p) / draws).sqrt() + 1e-4).all(), temperature

    texts = ["Q: Compute 48-6+5.\nA: ", "Q: Solve for x: 3x+8=32.\nA: ", "Q: 1+1?\nA: ", "Q: Compute 3/5+1/5.\nA: "]
    ids, mask = _prompts(tokenizer, texts)
    n, surprisal, entropy_sum, count = 8, 0.0, 0.0, 0
    torch.manual_seed(1)
    for _ in range(25):
        tokens, resp, sampled_ent = sample_rows(model, ids, mask, n, 16, 1.0, eos, with_entropy=True)
        # valid = up to and including the first EOS, and nothing after it
        is_eos = (tokens == eos) & resp
        lengths = resp.sum(1)
        assert (is_eos.sum(1) <= 1).all() and (is_eos.any(1) | (lengths == 16)).all()
        assert lengths.min() < lengths.max()  # varied lengths: rows were dropped mid-rollout
        batch = Batch(torch.cat([ids.repeat_interleave(n, 0), tokens], 1),
                      torch.cat([mask.repeat_interleave(n, 0), resp.long()], 1), resp, ids.shape[1], [], ids, mask,
                      ~is_eos.any(1))  # fmt: skip
        with torch.no_grad():
            full_lp, full_ent = completion_log_probs(model, batch.input_ids, batch.attention_mask, batch.prompt_len,
                                                     with_entropy=True)  # fmt: skip
            shared_lp, shared_ent = completion_log_probs_shared(model, batch, torch.arange(n * 4), n, with_entropy=True)
        assert (full_ent - sampled_ent)[resp].abs().max() < 1e-5  # the sampler's entropy is the model's (T = 1)
        assert (full_lp - shared_lp)[resp].abs().max() < 1e-5 and (full_ent - shared_ent)[resp].abs().max() < 1e-5
        surprisal += float(-full_lp[resp].sum())
        entropy_sum += float(full_ent[resp].sum())
        count += int(resp.sum())
    # E[-log p(x)] over x ~ p is the entropy of p; the surprisal's std here is about 1.5 nats per token
    assert count > 1500 and abs(surprisal - entropy_sum) / count < 4 * 1.5 / count**0.5


def test_shared_prompt_forward_has_the_full_forwards_gradients(eos_heavy_model):
    from bandpo.train.loop import TrainConfig, completion_log_probs_shared, rollout

    torch.set_num_threads(1)
    model, tokenizer = eos_heavy_model
    cfg = TrainConfig(samples_per_prompt=4, max_new_tokens=12)
    torch.manual_seed(2)
    texts = ["Q: Compute 48-6+5.\nA: ", "Q: 1+1?\nA: ", "Q: Solve for x: 3x+8=32.\nA: "]
    with torch.no_grad():
        batch = rollout(model, tokenizer, texts, cfg, torch.device("cpu"))
    idx = torch.tensor([9, 0, 3, 2, 10])  # prompts 2, 0, 0, 0, 2: any order, any subset
    resp = batch.response_mask[idx].float()
    grads = []
    for shared in (True, False):
        model.zero_grad()
        if shared:
            lp, _ = completion_log_probs_shared(model, batch, idx, cfg.samples_per_prompt)
        else:
            lp, _ = completion_log_probs(model, batch.input_ids[idx], batch.attention_mask[idx], batch.prompt_len)
        (lp * resp * torch.linspace(-1, 1, resp.shape[1])).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_trainer_log_probs_are_the_samplers_at_any_temperature(assets, eos_heavy_model, tmp_path):
    """At T != 1 the trainer's log-probs and entropy are those of softmax(logits / T), the distribution the
    rollouts sampled from (as verl's actor): the old log-probs equal the sampler's log-probs of the sampled tokens,
    and the first update's ratio is exactly 1. (At T = 1 nothing changes: tests/unit/test_train.py's same-seed runs.)"""
    from bandpo.train.loop import Batch, completion_log_probs_shared

    torch.set_num_threads(1)
    model, tokenizer = eos_heavy_model
    eos, n, T = tokenizer.eos_token_id, 4, 0.7
    ids, mask = _prompts(tokenizer, ["Q: Compute 48-6+5.\nA: ", "Q: 1+1?\nA: ", "Q: Solve for x: 3x+8=32.\nA: "])
    torch.manual_seed(3)
    tokens, resp, sampled_ent, sampled_lp = sample_rows(model, ids, mask, n, 16, T, eos, with_entropy=True,
                                                        with_log_probs=True)  # fmt: skip
    is_eos = (tokens == eos) & resp
    batch = Batch(torch.cat([ids.repeat_interleave(n, 0), tokens], 1),
                  torch.cat([mask.repeat_interleave(n, 0), resp.long()], 1), resp, ids.shape[1], [], ids, mask,
                  ~is_eos.any(1))  # fmt: skip
    rows = torch.arange(3 * n)
    with torch.no_grad():
        lp, ent = completion_log_probs_shared(model, batch, rows, n, with_entropy=True, temperature=T)
        lp_t1, _ = completion_log_probs_shared(model, batch, rows, n)
    assert (sampled_lp[~resp] == 0).all() and (sampled_lp[resp] < 0).all()
    assert (lp - sampled_lp)[resp].abs().max() < 1e-5 and (ent - sampled_ent)[resp].abs().max() < 1e-5
    assert (lp_t1 - sampled_lp)[resp].abs().max() > 0.1  # the untempered softmax is another policy

    # a run at T = 0.7: the single update of each step is on-policy, its ratio exactly 1
    train(small_config(assets, tmp_path / "t07", temperature=T, updates_per_step=1, lr=1e-2, steps=2,
                       old_log_probs="recompute"))  # fmt: skip
    metrics = read_metrics(tmp_path / "t07")
    assert all(m["ratio_min"] == m["ratio_max"] == 1.0 for m in metrics)
    assert all(m["loss"] == m["loss"] and m["entropy"] > 0 for m in metrics)
    # the sampler's own log-probs (the default): the same policy, the first ratio 1 up to float rounding
    train(small_config(assets, tmp_path / "t07s", temperature=T, updates_per_step=1, lr=1e-2, steps=2))
    metrics = read_metrics(tmp_path / "t07s")
    assert all(1 - 1e-5 < m["ratio_min"] <= m["ratio_max"] < 1 + 1e-5 for m in metrics)
    assert all(m["loss"] == m["loss"] and m["entropy"] > 0 for m in metrics)


def test_minibatch_layouts(assets, tmp_path):
    with pytest.raises(ValueError, match="minibatch: must be one of group, random"):
        TrainConfig(model="m", data="d", out="o", minibatch="seq").validate()
    with pytest.raises(ValueError, match="at least one prompt group per mini-batch"):
        TrainConfig(model="m", data="d", out="o", prompts_per_step=2, updates_per_step=4, minibatch="group").validate()
    assert TrainConfig().minibatch == "random"
    train(small_config(assets, tmp_path / "random", steps=2, seed=3))
    train(small_config(assets, tmp_path / "group", minibatch="group", steps=2, seed=3))
    random_m, group_m = (without_timing(read_metrics(tmp_path / x)) for x in ("random", "group"))
    # same rollouts (the layout only acts after step 1's sampling), different updates
    assert random_m[0]["reward_mean"] == group_m[0]["reward_mean"] and random_m[0]["entropy"] == group_m[0]["entropy"]
    assert random_m[0]["loss"] != group_m[0]["loss"]


def test_ppo_epochs_passes_over_each_rollout_batch(assets, tmp_path, monkeypatch):
    """ppo_epochs = 2 with updates_per_step = 2: 4 optimizer updates per step over mini-batches of half the batch,
    each pass a fresh partition of the rows; the first update is on-policy (ratio exactly 1), the other three are
    the off-policy ones (offpolicy/*)."""
    import bandpo.train.loop as train_module

    with pytest.raises(ValueError, match="ppo_epochs: must be an integer >= 1"):
        TrainConfig(model="m", data="d", out="o", ppo_epochs=0).validate()
    assert TrainConfig().ppo_epochs == 1
    calls, updates = [], []
    real = train_module.completion_log_probs_shared

    def spy(model, batch, idx, group, with_entropy=False, temperature=1.0):
        lp, ent = real(model, batch, idx, group, with_entropy=with_entropy, temperature=temperature)
        calls.append((idx.clone(), lp.detach().clone(), batch.response_mask))
        return lp, ent

    monkeypatch.setattr(train_module, "completion_log_probs_shared", spy)
    real_step = train_module.AdamW.step
    monkeypatch.setattr(train_module.AdamW, "step", lambda self, *a, **k: updates.append(1) or real_step(self, *a, **k))
    train(small_config(assets, tmp_path / "e2", ppo_epochs=2, updates_per_step=2, steps=2, lr=1e-2, seed=3,
                       old_log_probs="recompute"))  # fmt: skip
    assert len(updates) == 2 * 4  # 2 steps x 2 passes x 2 mini-batches
    assert len(calls) == 2 * 5  # per step: the old log-probs of all 16 rows, then the 4 updates' 8 rows each
    for step in range(2):
        (rows, old, mask), *ups = calls[5 * step : 5 * step + 5]
        assert len(rows) == 16 and [len(idx) for idx, _, _ in ups] == [8] * 4
        for e in range(2):  # each pass: a partition of the batch's rows
            assert sorted(torch.cat([ups[2 * e][0], ups[2 * e + 1][0]]).tolist()) == list(range(16))
        assert not torch.equal(ups[0][0], ups[2][0])  # a fresh split per pass
        idx, lp, _ = ups[0]
        assert torch.equal(torch.exp(lp - old[idx])[mask[idx]], torch.ones(int(mask[idx].sum())))  # ratio 1
        idx, lp, _ = ups[3]
        assert (lp - old[idx])[mask[idx]].abs().max() > 0  # the last update is off-policy
    metrics = read_metrics(tmp_path / "e2")
    assert all(m["offpolicy/ratio_max"] > 1.0 > m["offpolicy/ratio_min"] for m in metrics)


# The identity control: methods differ only through their bounds.
BOUND_METHODS = {
    "grpo": ("grpo", {}),
    "clip_higher": ("clip_higher", {}),
    "dcpo": ("dcpo", {}),
    "bandpo_kl": ("bandpo", {"divergence": "kl"}),
    "bandpo_tv": ("bandpo", {"divergence": "tv"}),
    "bandpo_chi2": ("bandpo", {"divergence": "chi2"}),
}


def _control_runs(assets, tmp_path, **overrides) -> dict[str, tuple[list[dict], dict]]:
    out = {}
    for name, (method, params) in BOUND_METHODS.items():
        cfg = small_config(assets, tmp_path / name, method=method, params=params, seed=7, **overrides)
        train(cfg)
        metrics = [
            {k: v for k, v in m.items() if k not in TIMING_KEYS and "bound_" not in k}  # bounds' own diagnostics
            for m in read_metrics(tmp_path / name)
        ]
        out[name] = (metrics, load_file(tmp_path / name / "model" / "model.safetensors"))
    return out


def test_on_policy_updates_make_every_bound_method_the_same_run(assets, tmp_path):
    """updates_per_step = 1: every update is on-policy, the ratio is exactly 1, inside every method's bounds, so
    grpo, clip_higher, dcpo and bandpo kl / tv / chi2 give the same run for a seed (metrics other than timings and
    the bounds' own diagnostics, and the final weights); with 4 off-policy updates they do not."""
    runs = _control_runs(assets, tmp_path / "on", updates_per_step=1, lr=1e-2, steps=3, old_log_probs="recompute")
    ref_metrics, ref_weights = runs["grpo"]
    assert all(m["ratio_min"] == m["ratio_max"] == 1.0 for m in ref_metrics)  # exactly on-policy
    assert any(m["loss"] != 0 for m in ref_metrics)  # the updates did something
    for name, (metrics, weights) in runs.items():
        assert metrics == ref_metrics, name
        assert all(torch.equal(weights[k], ref_weights[k]) for k in ref_weights), name

    runs = _control_runs(assets, tmp_path / "off", updates_per_step=4, lr=1e-2, steps=3)
    ref_metrics, ref_weights = runs["grpo"]
    assert max(m["offpolicy/clipfrac"] for m in ref_metrics) > 0  # the off-policy updates did leave GRPO's interval
    differ = [n for n, (_, w) in runs.items() if any(not torch.equal(w[k], ref_weights[k]) for k in ref_weights)]
    assert set(differ) == set(BOUND_METHODS) - {"grpo"}, differ


@pytest.fixture(scope="module")
def probe_data(tmp_path_factory):
    """A small probe data set (bandpo.train.probe): train rows and validation probe rows carry ``subset``."""
    from bandpo.data.tiny_math import ProbeSpec, apply_probe

    base = tmp_path_factory.mktemp("probe-data")
    splits = apply_probe(generate_tiny_math(seed=1, n_train=600, n_val=20, n_test=20), ProbeSpec(n_test=4, n_val=3), 1)
    for name, rows in splits.items():
        write_jsonl(base / f"{name}.jsonl", rows)
    return base


def test_probe_measurement_is_logged_and_leaves_training_unchanged(assets, probe_data, tmp_path):
    """probe_every logs probe/p_correct and probe/accuracy on its steps (and the last), the rollouts' accuracy per
    subset every step, and the run is otherwise the same as one without measuring (the measurement's sampling does
    not touch the training RNG)."""
    model, _ = assets
    runs = {}
    for every in (0, 2):
        cfg = small_config((model, probe_data), tmp_path / f"every{every}", steps=3, probe_every=every, probe_k=2,
                           reward="grader")  # fmt: skip
        train(cfg)
        runs[every] = read_metrics(tmp_path / f"every{every}")
    measured = [m["step"] for m in runs[2] if "probe/p_correct" in m]
    assert measured == [2, 3]
    for m in runs[2]:
        if m["step"] in measured:
            assert 0 < m["probe/p_correct"] < 1 and 0 <= m["probe/accuracy"] <= 1 and 0 <= m["probe/prefers_decoy"] <= 1
    assert all("probe/p_correct" not in m for m in runs[0])
    assert any("rest/rollout_accuracy" in m for m in runs[0])  # the training rows carry `subset`
    strip = [[{k: v for k, v in m.items() if not k.startswith("probe/p") and k not in ("probe/accuracy",
              "probe/prefers_decoy")} for m in without_timing(r)] for r in (runs[0], runs[2])]  # fmt: skip
    assert strip[0] == strip[1]


def test_the_validation_curve_is_logged_and_leaves_training_unchanged(assets, probe_data, tmp_path, monkeypatch):
    """val_every logs val/mean and val/pass (mean@k, pass@k on the validation split) on its steps and the last, the
    policy's before any update on the first step's line; the run trains the same as without it, and a second run
    measures the same numbers. mean@k and pass@k count what the grader says: with every grade 1 both are 1."""
    import bandpo.train.loop as loop

    model, _ = assets
    runs = {}
    for name, every in (("off", 0), ("a", 2), ("b", 2)):
        cfg = small_config((model, probe_data), tmp_path / name, steps=3, val_every=every, val_k=3, reward="grader")
        train(cfg)
        runs[name] = read_metrics(tmp_path / name)
    assert [m["step"] for m in runs["a"] if "val/mean" in m] == [2, 3]
    assert [m["step"] for m in runs["a"] if "val/mean_before" in m] == [1]
    n_val = len(read_jsonl(probe_data / "validation.jsonl"))
    for m in runs["a"]:
        for key in ("val/mean", "val/mean_before"):
            if key in m:
                assert 0 <= m[key] <= m[key.replace("mean", "pass")] <= 1
                assert (m[key] * 3 * n_val) == pytest.approx(round(m[key] * 3 * n_val))  # whole correct samples
    assert not any(k.startswith("val/") for m in runs["off"] for k in m)
    plain = [{k: v for k, v in m.items() if not k.startswith("val/")} for m in without_timing(runs["a"])]
    assert plain == without_timing(runs["off"])
    assert without_timing(runs["a"]) == without_timing(runs["b"])

    monkeypatch.setattr(loop, "grade_many", lambda texts, answers: [1.0] * len(texts))
    train(small_config((model, probe_data), tmp_path / "all", steps=1, val_every=1, val_k=2, reward="random"))
    (line,) = read_metrics(tmp_path / "all")
    assert line["val/mean"] == line["val/pass"] == line["val/mean_before"] == line["val/pass_before"] == 1.0
    with pytest.raises(ValueError, match="val_k: must be an integer >= 1"):
        from_dict({"model": "m", "data": "d", "out": "o", "val_every": 1, "val_k": 0})


def test_val_every_needs_a_validation_split(assets, tmp_path):
    with pytest.raises(FileNotFoundError, match="val_every: .*validation.jsonl not found"):
        train(small_config(assets, tmp_path / "run", val_every=1))


def test_probe_every_needs_probe_rows(assets, tmp_path):
    with pytest.raises(ValueError, match="no rows with subset 'probe'"):
        model, data = assets
        write_jsonl(data / "validation.jsonl", generate_tiny_math(seed=2, n_train=8, n_val=8, n_test=8)["validation"])
        try:
            train(small_config(assets, tmp_path / "run", probe_every=1))
        finally:
            (data / "validation.jsonl").unlink()
    with pytest.raises(ValueError, match="probe_every: must be an integer >= 0"):
        from_dict({"model": "m", "data": "d", "out": "o", "probe_every": -1})


def test_rows_with_shots_sample_after_their_worked_exchanges(assets, tmp_path, monkeypatch):
    """Rows with ``shots`` (tiny-math's answer-line format): each prompt the last user turn of the chat template
    after its row's exchanges; without chat_template such rows are refused before the model loads."""
    import bandpo.train.loop as bt
    from bandpo.models.tiny import build_tokenizer

    model_dir, _ = assets
    data = tmp_path / "data"
    rows = generate_tiny_math(seed=1, n_train=32, n_val=4, n_test=4, levels=(1,), prompt_format="answer-line")["train"]
    write_jsonl(data / "train.jsonl", rows)
    with pytest.raises(ValueError, match="shots.*set chat_template: true"):
        train(small_config((model_dir, data), tmp_path / "refused", steps=1))
    chat_model = tmp_path / "model"
    chat_model.mkdir()
    for f in model_dir.iterdir():
        (chat_model / f.name).write_bytes(f.read_bytes())
    tok = build_tokenizer()
    tok.chat_template = (
        "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}a:{% endif %}"
    )  # short: the tiny model holds 256 positions
    tok.save_pretrained(chat_model)
    seen = []
    real = bt.chat_prompts
    monkeypatch.setattr(bt, "chat_prompts", lambda t, p, s=None: seen.append((p, s)) or real(t, p, s))
    train(small_config((chat_model, data), tmp_path / "run", steps=1, chat_template=True))
    ((prompts, shots),) = seen
    by_problem = {r["prompt"]: r["shots"] for r in rows}
    assert len(prompts) == 4 and shots == [by_problem[p] for p in prompts]
    text = real(tok, prompts[:1], shots[:1])[0]
    turns = [f"u:{q}\na:{a}\n" for q, a in shots[0]]
    assert text == "".join(turns) + f"u:{prompts[0]}\na:"
    assert real(tok, prompts[:1])[0] == f"u:{prompts[0]}\na:"  # a row without shots: one turn


def test_cli_help_shows_every_field_with_its_default_and_doc():
    """``python -m bandpo.train --help`` is generated from TrainConfig: each field's flag, its attribute docstring and
    its default (whitespace aside: the help wraps lines)."""
    import ast
    import inspect

    import bandpo.train.loop as train_module

    proc = subprocess.run([sys.executable, "-m", "bandpo.train", "--help"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "COLUMNS": "100"}, check=True)  # fmt: skip
    flat = "".join(ch for ch in proc.stdout if not ch.isspace() and ch not in "│╭╮╰╯─")
    docs = {}  # field -> attribute docstring, read from the source as tyro reads it (the shared protocol's too)
    for cls in train_module.TrainConfig.__mro__[:-1]:
        body = ast.parse(inspect.getsource(cls)).body[0].body
        for node, nxt in zip(body, body[1:], strict=False):
            if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                docs.setdefault(node.target.id, nxt.value.value)
    for f in dataclasses.fields(TrainConfig):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        shown = {"": "''", "{}": "'{}'", "[]": ""}.get(str(default), str(default))
        assert f"--{f.name.replace('_', '-')}" in flat, f.name
        assert "".join(docs[f.name].split()) + f"(default:{shown})" in flat, f.name
    assert "--spec" in flat and "--method-module" in flat and "grpo" in flat  # the workflow's path, the methods


def test_cli_flags_and_spec_build_the_same_config(tmp_path, monkeypatch, capsys):
    """The generated flags and the workflow's --spec path give the same TrainConfig; --set-file applies over the
    spec; a field flag beside --spec, or a set file without one, is a usage error."""
    seen = []
    monkeypatch.setattr(
        "bandpo.train.loop.train", lambda cfg, method: seen.append(cfg) or {"final": {}, "train_seconds_total": 0}
    )  # the command line resolves the method at the edge and hands it over: the loop trusts it
    from bandpo.train.cli import main

    common = ["--model", "m", "--data", "d", "--out", str(tmp_path), "--method", "bandpo", "--params", '{"delta": 0.1}']
    main([*common, "--steps", "7", "--lr-end", "None", "--samples-per-prompt", "4", "--no-progress"])
    spec, chosen = tmp_path / "spec.json", tmp_path / "chosen.json"
    run = {"model": "m", "data": "d", "out": str(tmp_path), "method": "bandpo", "params": {"delta": 0.1}}
    spec.write_text(json.dumps({**run, "steps": 3, "lr_end": None, "samples_per_prompt": 4, "progress": False}))
    chosen.write_text(json.dumps({"steps": 7}))
    main(["--spec", str(spec), "--set-file", str(chosen)])
    assert seen[0] == seen[1]
    assert (seen[0].steps, seen[0].lr_end, seen[0].samples_per_prompt, seen[0].params) == (7, None, 4, {"delta": 0.1})
    # bad values: a usage error naming the field (test_config_errors_name_the_field: and no stack trace)
    for bad in (["--steps", "x"], ["--lr", "-1"], ["--params", "[1]"], ["--dual-clip-c", "1"]):
        try:
            status = main([*common, *bad])
        except SystemExit as e:  # tyro's own parse errors exit
            status = e.code
        err = capsys.readouterr().err
        assert status == 2, (bad, err)
        name = bad[0].lstrip("-").replace("-", "_")
        assert name.replace("_", "") in err.replace("_", "").replace("-", ""), (bad, err)
    for bad, says in ((["--spec", str(spec), "--steps", "9"], "give no field flag beside it"),
                      ([*common, "--set-file", str(chosen)], "give the spec too")):  # fmt: skip
        assert main(bad) == 2 and says in capsys.readouterr().err


def test_a_training_job_does_not_import_dynamo(assets, tmp_path):
    """torch._dynamo costs ~1 s of CPU per process: neither the optimizer (bandpo.runtime.optim) nor the light model
    load (bandpo.runtime.fastlm) may pull it into a training job."""
    model, data = assets
    code = (
        "import sys\nfrom bandpo.train.cli import main\n"
        f"rc = main(['--model', {str(model)!r}, '--data', {str(data)!r}, '--out', {str(tmp_path / 'run')!r},"
        " '--steps', '1', '--prompts-per-step', '2', '--samples-per-prompt', '2',"
        " '--max-new-tokens', '6', '--reward', 'random', '--no-progress'])\n"
        "print(rc, 'torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["0", "False"], out.stdout[-500:]


def _inline_executor():
    """The benchmarks' executor that runs each submitted call at once in the calling thread (a done future):
    benchmarks/bench_trainer_vs_trl.py counts a step's FLOPs with it, on the promise of the test below."""
    path = ROOT / "benchmarks" / "bench_trainer_vs_trl.py"
    spec = importlib.util.spec_from_file_location("bench_trainer_vs_trl", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.InlineExecutor


def test_old_log_prob_pass_in_a_worker_thread_changes_no_number(assets, tmp_path, monkeypatch):
    """The old-log-prob and reference passes and the first update's forward pass run in a worker thread while the
    main thread hands the batch to the grader and waits for the first grades (`collect`, `Grades`): the run is bit
    for bit the one that makes them in the main thread."""
    overrides = {"reward": "grader", "kl_coef": 0.05, "steps": 2, "method": "bandpo"}
    train(small_config(assets, tmp_path / "threaded", **overrides))
    import bandpo.train.loop as T

    monkeypatch.setattr(T, "ThreadPoolExecutor", _inline_executor())
    train(small_config(assets, tmp_path / "inline", **overrides))
    a, b = (without_timing(read_metrics(tmp_path / x)) for x in ("threaded", "inline"))
    assert a == b and "kl_ref" in a[0]
    wa, wb = (load_file(tmp_path / x / "model" / "model.safetensors") for x in ("threaded", "inline"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_updates_that_wait_only_for_their_own_grades_change_no_number(assets, tmp_path, monkeypatch):
    """The completions go to the grader in update order and each update waits only for its own prompt groups'
    grades (`bandpo.train.loop.Grades`): with ``minibatch: group`` the run is bit for bit the one whose first update
    waits for every grade of the batch (the trainer before it); the grader is handed the first mini-batch first."""
    import bandpo.train.loop as T

    # random rewards: the tiny test model earns no grader reward, and zero advantages would hide a difference
    overrides = {"reward": "random", "minibatch": "group", "steps": 3, "updates_per_step": 2}
    added: list[list[int]] = []  # per step, the rows in the order they were handed to the grader
    parts_seen: list[list[int]] = []  # per step, the mini-batches' rows in update order
    real_init, real_add, real_minibatches = T.Grading.__init__, T.Grading.add, T.minibatches

    def init(self, *args, **kwargs):
        added.append([])
        real_init(self, *args, **kwargs)

    def add(self, i, response, reference):
        added[-1].append(i)
        real_add(self, i, response, reference)

    def minibatches(cfg, n_rows, seed):
        parts = real_minibatches(cfg, n_rows, seed)
        parts_seen.append([int(r) for part in parts for r in part])
        return parts

    monkeypatch.setattr(T.Grading, "__init__", init)
    monkeypatch.setattr(T.Grading, "add", add)
    monkeypatch.setattr(T, "minibatches", minibatches)
    train(small_config(assets, tmp_path / "as_needed", **overrides))
    assert len(added) == 3 and added == parts_seen
    monkeypatch.undo()

    real_advantages = T.Grades.advantages

    def all_first(self, rows):
        real_advantages(self, torch.arange(len(self.scores)))  # every grade of the batch first
        return real_advantages(self, rows)

    monkeypatch.setattr(T.Grades, "advantages", all_first)
    train(small_config(assets, tmp_path / "all_first", **overrides))
    a, b = (without_timing(read_metrics(tmp_path / x)) for x in ("as_needed", "all_first"))
    assert a == b and all(m["mixed_group_frac"] > 0 for m in a)  # non-zero advantages, from the subsets' rewards
    wa, wb = (load_file(tmp_path / x / "model" / "model.safetensors") for x in ("as_needed", "all_first"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
