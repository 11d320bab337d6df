"""The local GRPO trainer: config errors, every method runs, determinism, and resume after a real SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bandpo import methods
from bandpo.models import build_tokenizer, get_size, init_model
from bandpo.tasks import generate_tiny_math, write_jsonl
from bandpo.train import TIMING_KEYS, TrainConfig, apply_overrides, group_advantages, train

ROOT = Path(__file__).resolve().parents[1]


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


def test_config_errors_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="unknown method 'grpoo'"):
        TrainConfig(model="m", data="d", out="o", method="grpoo").validate()
    with pytest.raises(ValueError, match="delta"):
        TrainConfig(model="m", data="d", out="o", method="bandpo", params={"delta": -1.0}).validate()
    with pytest.raises(ValueError, match="samples_per_prompt"):
        TrainConfig(model="m", data="d", out="o", samples_per_prompt=1).validate()
    with pytest.raises(ValueError, match="lr: must be a finite number > 0"):
        TrainConfig(model="m", data="d", out="o", lr=float("nan")).validate()
    with pytest.raises(ValueError, match="key one of"):
        apply_overrides(TrainConfig(), ["stepz=3"])
    cfg = apply_overrides(TrainConfig(), ["steps=7", "lr=1e-3", "dual_clip_c=null", "kl_coef=0"])
    assert (cfg.steps, cfg.lr, cfg.dual_clip_c, cfg.kl_coef) == (7, 1e-3, None, 0.0)
    # the CLI turns these into a usage error, not a stack trace
    proc = subprocess.run([sys.executable, "-m", "bandpo.train", "--model", "m", "--data", "d", "--out", "o",
                           "--method", "bandpo", "--params", '{"divergence": "klx"}'],
                          capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 2 and "divergence" in proc.stderr and "Traceback" not in proc.stderr


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


def test_resume_after_sigkill_matches_uninterrupted_run(assets, tmp_path):
    model, data = assets
    common = ["--model", str(model), "--data", str(data), "--method", "bandpo", "--seed", "5", "--threads", "1",
              "--no-progress", "--set", "steps=40", "--set", "checkpoint_every=2", "--set", "prompts_per_step=4",
              "--set", "samples_per_prompt=4", "--set", "max_new_tokens=12", "--set", "reward=\"random\""]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "bandpo.train", *common, "--out", str(tmp_path / "full")],
                   check=True, env=env, capture_output=True)  # fmt: skip

    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "bandpo.train", *common, "--out", str(killed)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    ckpt = killed / "checkpoint" / "ckpt.pt"
    deadline = time.time() + 120
    while not ckpt.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(0.05)  # somewhere after the first checkpoint, mid-step, long before the last of 40 steps
    assert proc.poll() is None, "the run finished before it could be killed; make it longer"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # nothing looks complete after the kill
    assert not (killed / "metrics.jsonl").exists() and not (killed / "run.json").exists()
    assert not (killed / "model").exists()
    step_at_kill = torch.load(ckpt, weights_only=False)["step"]
    assert 2 <= step_at_kill < 40

    subprocess.run([sys.executable, "-m", "bandpo.train", *common, "--out", str(killed)],
                   check=True, env=env, capture_output=True)  # fmt: skip
    assert json.loads((killed / "run.json").read_text())["resumed_from_step"] == step_at_kill
    assert without_timing(read_metrics(killed)) == without_timing(read_metrics(tmp_path / "full"))
    a, b = (
        load_file(killed / "model" / "model.safetensors"),
        load_file(tmp_path / "full" / "model" / "model.safetensors"),
    )
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_refuses_a_different_config(assets, tmp_path):
    cfg = small_config(assets, tmp_path / "r", steps=4, checkpoint_every=1, keep_checkpoint=True)
    train(cfg)
    other = small_config(assets, tmp_path / "r", steps=4, checkpoint_every=1, lr=1e-3)
    with pytest.raises(RuntimeError, match="different run configuration"):
        train(other)
