"""verl on CPU (bandpo.verl.cpu, config/verl-cpu.yaml): the hf rollout server on its own, and (marker ``verl_cpu``,
not in the default selection: minutes) a short real run of ``python -m verl.trainer.main_ppo`` through the DAG,
merged, checked against the run contract, scored and reported.

    pytest -m verl_cpu tests/integration/test_verl_cpu.py
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

pytest.importorskip("verl")

from bandpo.core.run_contract import check_run  # noqa: E402
from bandpo.models.tiny import build_tokenizer, get_size, init_model  # noqa: E402
from bandpo.verl import command  # noqa: E402
from bandpo.verl.spec import read_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("verl-cpu-model")
    tokenizer = build_tokenizer()
    model = init_model(get_size("tiny-test"), tokenizer, seed=0)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_hf_server_returns_the_models_log_probs(tiny_model):
    from transformers import AutoModelForCausalLM

    from bandpo.verl.hf_rollout import HFRolloutServer

    server = HFRolloutServer(str(tiny_model), response_length=12, max_model_len=64, dtype="float32", seed=0)
    prompt = build_tokenizer()("12+7=", add_special_tokens=False)["input_ids"]
    params = {"temperature": 0.7, "top_p": 1.0, "top_k": -1, "logprobs": True}
    out = asyncio.run(server.generate("r0", prompt_ids=prompt, sampling_params=params))
    assert 1 <= len(out.token_ids) <= 12 and len(out.log_probs) == len(out.token_ids)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    ids = torch.tensor([prompt + out.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1] / 0.7
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out.token_ids)[:, None]).squeeze(-1)
    torch.testing.assert_close(torch.tensor(out.log_probs), expected, atol=1e-5, rtol=1e-5)
    eos = model.generation_config.eos_token_id
    assert eos not in out.token_ids[:-1]  # stops at the first EOS

    # weights pushed by the trainer replace the server's
    state = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    assert server.load_weights(state, version=3) == len(state) and server.weight_version == 3
    assert all(float(p.detach().abs().sum()) == 0 for p in server.model.parameters())
    with pytest.raises(KeyError, match="missing"):
        server.load_weights({}, version=4)


def _teacher_forced(model, prompt: list[int], tokens: list[int], temperature: float) -> torch.Tensor:
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1] / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)


def test_hf_server_batches_concurrent_requests(tiny_model, monkeypatch):
    """The requests of a step arrive together: they are generated in left-padded batches of at most max_batch,
    one batch per sampling setting, and each still gets its own prompt's tokens and log-probs."""
    from transformers import AutoModelForCausalLM

    from bandpo.verl.hf_rollout import HFRolloutServer

    server = HFRolloutServer(str(tiny_model), response_length=10, max_model_len=64, dtype="float32", seed=0,
                             max_batch=8)  # fmt: skip
    tok = build_tokenizer()
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ("3+4=", "12*31-7=", "x=")]
    hot = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
    cool = {**hot, "temperature": 0.5}
    calls = [(prompts[i % 3], hot) for i in range(10)] + [(prompts[i % 3], cool) for i in range(3)]

    async def all_at_once():
        return await asyncio.gather(
            *(server.generate(f"r{i}", prompt_ids=p, sampling_params=sp) for i, (p, sp) in enumerate(calls))
        )

    outs = asyncio.run(all_at_once())
    # 10 at T=1 in batches of 8 + 2, the 3 at T=0.5 apart
    assert sorted(b["requests"] for b in server.batch_log) == [2, 3, 8]
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    eos = model.generation_config.eos_token_id
    for (prompt, sp), out in zip(calls, outs, strict=True):
        assert 1 <= len(out.token_ids) <= 10 and len(out.log_probs) == len(out.token_ids)
        assert eos not in out.token_ids[:-1]  # cut at the first EOS
        expected = _teacher_forced(model, prompt, out.token_ids, sp["temperature"])
        torch.testing.assert_close(torch.tensor(out.log_probs), expected, atol=1e-5, rtol=1e-5)

    # a failing batch fails every request waiting on it (none hangs), and the server keeps serving
    def boom(prompts, key):
        raise RuntimeError("generate failed")

    monkeypatch.setattr(server, "_generate_batch", boom)

    async def two():
        return await asyncio.gather(
            *(server.generate(f"e{i}", prompt_ids=prompts[0], sampling_params=hot) for i in range(2)),
            return_exceptions=True,
        )

    assert all(isinstance(e, RuntimeError) for e in asyncio.run(two()))
    with pytest.raises(ValueError, match="max_batch"):
        HFRolloutServer(str(tiny_model), response_length=10, max_model_len=64, dtype="float32", seed=0, max_batch=0)


def test_hf_server_suite_sampler_serves_plain_sampling(tiny_model, monkeypatch):
    """With the default sampler "suite", a batch of plain sampling requests (T > 0, no top-p / top-k) is drawn by
    the suite's sampler: a prompt's samples (separate requests) share one pre-filled prompt when every prompt has
    as many, else each request is its own prompt; each request gets its own prompt's completion and the sampled
    tokens' log-probs under softmax(logits / T). Other settings, and sampler "generate", go to HF generate."""
    from transformers import AutoModelForCausalLM

    import bandpo.runtime.sampling
    from bandpo.verl.hf_rollout import HFRolloutServer

    drawn = []  # (prompts pre-filled, samples per prompt) of each call of the suite's sampler
    real = bandpo.runtime.sampling.sample_rows
    monkeypatch.setattr(bandpo.runtime.sampling, "sample_rows", lambda m, ids, mask, n, *a, **k: drawn.append(
        (ids.shape[0], n)) or real(m, ids, mask, n, *a, **k))  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    eos = model.generation_config.eos_token_id
    tok = build_tokenizer()
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ("3+4=", "12*31-7=", "x=")]
    plain = {"temperature": 0.8, "top_p": 1.0, "top_k": -1, "logprobs": True}
    nucleus = {**plain, "top_p": 0.9}
    cases = {  # name: (server kwargs, calls, expected (requests, sampler) per served batch)
        "4 samples of each prompt": ({}, [(prompts[i % 3], plain) for i in range(12)], [(12, "suite")]),
        "uneven samples": ({}, [(prompts[i % 3], plain) for i in range(5)], [(5, "suite")]),
        "top-p": ({}, [(prompts[0], nucleus)] * 2, [(2, "generate")]),
        "sampler generate": ({"sampler": "generate"}, [(prompts[1], plain)] * 3, [(3, "generate")]),
    }
    for name, (kwargs, calls, expected) in cases.items():
        server = HFRolloutServer(str(tiny_model), response_length=10, max_model_len=64, dtype="float32", seed=0,
                                 batch_wait_s=0.05, **kwargs)  # fmt: skip

        async def all_at_once(server=server, calls=calls):
            return await asyncio.gather(
                *(server.generate(f"r{i}", prompt_ids=p, sampling_params=sp) for i, (p, sp) in enumerate(calls))
            )

        outs = asyncio.run(all_at_once())
        assert [(b["requests"], b["sampler"]) for b in server.batch_log] == expected, name
        for (prompt, sp), out in zip(calls, outs, strict=True):
            assert 1 <= len(out.token_ids) <= 10 and len(out.log_probs) == len(out.token_ids), name
            assert eos not in out.token_ids[:-1], name  # cut at the first EOS
            expected_lp = _teacher_forced(model, prompt, out.token_ids, sp["temperature"])  # unrestricted softmax
            torch.testing.assert_close(torch.tensor(out.log_probs), expected_lp, atol=1e-5, rtol=1e-5)
    assert drawn == [(3, 4), (5, 1)]  # 3 prompts x 4 samples; the uneven batch as 5 prompts of one sample
    with pytest.raises(ValueError, match="sampler"):
        HFRolloutServer(str(tiny_model), response_length=10, max_model_len=64, dtype="float32", seed=0, sampler="x")


def test_hf_server_samples_in_request_order_not_arrival_order(tiny_model):
    """verl's requests reach the server in a different order every run: a sample must not depend on it. With verl's
    deterministic request ids (det-<index * SAMPLE_STRIDE + session>, bandpo.verl.cpu's agent loop) each request
    gets the same completion whatever the arrival order; without them each prompt still gets the same completions.
    Before the server sorted its batch and seeded it (batch_seed), it sampled rows in arrival order."""
    from bandpo.verl.hf_rollout import SAMPLE_STRIDE, HFRolloutServer

    tok = build_tokenizer()
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ("3+4=", "12*31-7=", "x=")]
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
    calls = [(f"det-{(7 + i) * SAMPLE_STRIDE + s}", prompts[i]) for i in range(3) for s in range(4)]

    def serve(order, ids=True, max_batch=None, gather_passes=False):
        max_batch = max_batch or len(calls)
        server = HFRolloutServer(str(tiny_model), response_length=10, max_model_len=64, dtype="float32", seed=0,
                                 max_batch=max_batch, batch_wait_s=0.2, gather_passes=gather_passes)  # fmt: skip

        async def arrive():
            async def one(j):
                if max_batch < len(calls):  # a pass that arrives in bursts: two requests at a time
                    await asyncio.sleep(0.01 * (order.index(j) // 2))
                return await server.generate(
                    calls[j][0] if ids else f"r{j}", prompt_ids=calls[j][1], sampling_params=params
                )

            return await asyncio.gather(*(one(j) for j in order))

        outs = dict(zip(order, asyncio.run(arrive()), strict=True))
        expected = [max_batch] * (len(calls) // max_batch) + [len(calls) % max_batch] * (len(calls) % max_batch > 0)
        assert [b["requests"] for b in server.batch_log] == expected
        return [(outs[j].token_ids, outs[j].log_probs) for j in range(len(calls))]

    forward, backward = list(range(len(calls))), list(reversed(range(len(calls))))
    shuffled = [5, 0, 11, 3, 8, 1, 10, 6, 2, 9, 4, 7]
    first = serve(forward)
    assert serve(backward) == first and serve(shuffled) == first
    # a pass larger than max_batch (verl's validation: problems x val_k), gathered whole and split in request order
    split = serve(forward, max_batch=5, gather_passes=True)
    assert serve(backward, max_batch=5, gather_passes=True) == split == serve(shuffled, max_batch=5, gather_passes=True)
    assert len({tuple(t) for t, _ in first}) > 3  # sampled, not one completion per prompt
    by_prompt = lambda outs: sorted((tuple(calls[j][1]), tuple(t)) for j, (t, _) in enumerate(outs))  # noqa: E731
    assert by_prompt(serve(backward, ids=False)) == by_prompt(serve(forward, ids=False))


def test_replay_buffer_orders_a_steps_trajectories(monkeypatch):
    """verl's replay buffer lists a step's trajectories in the order they finished; the profile's buffer hands the
    trainer the prompts in the dataloader's order (TransferQueue's listing of the prompt keys), each prompt's
    sessions in order."""
    import verl.trainer.ppo.v1.replay_buffer as rb
    from omegaconf import OmegaConf

    import bandpo.verl.cpu as vc

    monkeypatch.setattr(rb.tq, "kv_clear", lambda **kwargs: None)
    buffer = vc.PollingReplayBuffer("sync", trainer_config=OmegaConf.create({}), max_off_policy_threshold=None,
                                    max_off_policy_strategy="drop", sampler_kwargs=OmegaConf.create({}),
                                    refill_fn=lambda n: None)  # fmt: skip
    uids = ["f0-a", "0b-c", "9e-d"]  # uuid4s: their sort order is not the dataloader's
    buffer.prompt_global_steps["train"] = {u: 1 for u in uids}
    finished = [f"{uids[p]}_{s}_0" for p, s in [(2, 1), (0, 3), (1, 0), (0, 0), (2, 0), (1, 1), (0, 1), (0, 2)]]
    snapshot = {k: {"seq_len": i} for i, k in enumerate(finished)}
    meta = buffer._materialize_batch("train", list(reversed(uids)), snapshot)
    expected = [f"{uids[p]}_{s}_0" for p, s in [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (2, 0), (2, 1)]]
    assert meta.keys == expected and meta.tags == [snapshot[k] for k in expected]
    assert vc.trajectory_order("9e-d_10_2", {"9e-d": 4}) == (4, 10, 2)


def test_hf_rollout_command_selects_the_deterministic_agent_loop():
    """For the hf rollout the command turns on verl's deterministic request ids and names the agent loop whose
    priority is the sample's place in the step; verl's registry file names the class by its import path."""
    import hydra.utils
    from omegaconf import OmegaConf

    import bandpo.verl.cpu as vc
    from bandpo.verl.hf_rollout import SAMPLE_STRIDE

    for key, value in command.HF_DETERMINISM.items():
        assert command._hydra_value(value) in {"true", "'bandpo_single_turn'", f"'{command.HF_AGENT_LOOP_CONFIG}'"}, key
    entries = {e.name: e for e in OmegaConf.load(command.HF_AGENT_LOOP_CONFIG)}
    assert command.HF_DETERMINISM["actor_rollout_ref.rollout.agent.default_agent_loop"] == vc.AGENT_LOOP in entries
    cls = hydra.utils.get_class(entries[vc.AGENT_LOOP]["_target_"])
    assert cls is vc.DeterministicSingleTurnAgentLoop

    seen = {}

    async def fake_run(self, sampling_params, priority=0, **kwargs):
        seen["priority"] = priority

    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    original, SingleTurnAgentLoop.run = SingleTurnAgentLoop.run, fake_run
    try:
        asyncio.run(cls.__new__(cls).run({}, index=12, session_id=3, uid="x"))
    finally:
        SingleTurnAgentLoop.run = original
    assert seen["priority"] == 12 * SAMPLE_STRIDE + 3


def test_rollout_benchmark_runs_both_servers(tiny_model, tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_hf_rollout", ROOT / "benchmarks" / "bench_hf_rollout.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+{i}="}) + "\n" for i in range(3)))
    assert bench.main(["--model", str(tiny_model), "--data", str(data), "--prompts", "3", "--samples", "2",
                       "--repeats", "1", "--threads", "1"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "3 prompts x 2 samples = 6 requests" in out
    assert re.search(r"ratio generate, one at a time / suite sampler, one batch: [\d.]+x", out)
    assert re.search(r"ratio generate, one batch / suite sampler, one batch: [\d.]+x", out)
    with pytest.raises(SystemExit):
        bench.main(["--model", str(tmp_path / "missing"), "--data", str(data)])


def test_verl_step_benchmark_try_changes_one_setting_of_the_profile():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_verl_poll", ROOT / "benchmarks" / "bench_verl_poll.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    base = bench.config("grpo", 0, 4, False, change="ppo_max_token_len_per_gpu=16384")
    profile = yaml.safe_load((ROOT / "config" / "verl-cpu.yaml").read_text())["train"]
    assert base["train"] == {**profile, "steps": 4}  # the baseline of --try is the profile itself
    field = bench.config("grpo", 0, 4, True, change="ppo_max_token_len_per_gpu=16384")["train"]
    assert field["ppo_max_token_len_per_gpu"] == 16384 and field["extra_overrides"] == profile["extra_overrides"]
    key = "actor_rollout_ref.rollout.agent.num_workers"
    replaced = bench.config("grpo", 0, 4, True, change=f"{key}=2")["train"]["extra_overrides"]
    assert f"{key}=2" in replaced and len(replaced) == len(profile["extra_overrides"])
    assert not any(o.startswith(f"{key}=") and o != f"{key}=2" for o in replaced)
    added = bench.config("grpo", 0, 4, True, change="+x.y=1")["train"]["extra_overrides"]
    assert added == [*profile["extra_overrides"], "+x.y=1"]
    for bad in ("no_equals", "=1", "k="):
        with pytest.raises(SystemExit, match="KEY=VALUE"):
            bench.config("grpo", 0, 4, True, change=bad)


def test_cpu_platform_is_registered_and_opt_in():
    from verl.plugin.platform.platform_manager import PlatformRegistry

    import bandpo.verl.cpu  # noqa: F401 - its import registers the platform and the hf rollout
    from bandpo.verl import hf_rollout

    platform = PlatformRegistry.get("cpu")()
    assert platform.device_name == "cpu" and platform.communication_backend_name() == "gloo"
    assert not platform.is_platform_available(use_smi_check=True)  # only VERL_PLATFORM=cpu selects it
    assert torch.ones(2).to(platform.current_device()).device.type == "cpu"
    from verl.workers.rollout.base import get_rollout_class

    assert get_rollout_class("hf") is hf_rollout.HFServerAdapter


def test_polling_replay_buffer_is_verls_sync_buffer_polling_faster():
    """The profile's sampler (trainer.v1.sampler.custom_sampler): verl's sync ReplayBuffer with only the poll
    interval changed, loaded the way verl loads a custom sampler; async mode and DAPO filtering are refused."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.utils.import_utils import load_extern_object

    import bandpo.verl.cpu as vc

    overrides = dict(o.split("=", 1) for o in yaml.safe_load((ROOT / "config" / "verl-cpu.yaml").read_text())["train"]
                     ["extra_overrides"] if o.startswith("trainer.v1.sampler.custom_sampler."))  # fmt: skip
    cls = load_extern_object(overrides["trainer.v1.sampler.custom_sampler.path"],
                             overrides["trainer.v1.sampler.custom_sampler.name"])  # fmt: skip
    assert cls is vc.PollingReplayBuffer and issubclass(cls, ReplayBuffer)
    kwargs = dict(trainer_config=OmegaConf.create({}), max_off_policy_threshold=None, max_off_policy_strategy="drop",
                  sampler_kwargs=OmegaConf.create({}), refill_fn=lambda n: None)  # fmt: skip
    buffer = cls("sync", **kwargs)
    assert buffer.poll_interval == vc.POLL_INTERVAL_S < 2.0 and buffer.filter_groups_metric is None
    with pytest.raises(ValueError, match="sync replay buffer"):
        cls("async", **kwargs)
    with pytest.raises(ValueError, match="DAPO"):
        cls("sync", filter_groups_metric="acc", **kwargs)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        vc.Nope  # noqa: B018


def test_per_sample_warning_is_quiet_only_on_the_cpu_platform():
    code = ("import logging, bandpo.verl.cpu as vc; "
            "print([logging.getLogger(n).getEffectiveLevel() for n in vc.QUIET_LOGGERS])")  # fmt: skip
    levels = {}
    for platform in ("cpu", ""):
        env = {**os.environ, "VERL_PLATFORM": platform}
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        levels[platform] = proc.stdout.strip()
    assert levels["cpu"] == "[40]" and levels[""] != "[40]"  # logging.ERROR only where the profile selects it


def test_verl_cpu_profile_dry_run(tmp_path):
    """config/verl-cpu.yaml is valid and plans the same rules as gpu.yaml, with the CPU backend in the command."""
    cfg = yaml.safe_load((ROOT / "config" / "verl-cpu.yaml").read_text())
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path), "-n", "-p",
           "--configfile", str(ROOT / "config" / "verl-cpu.yaml"),
           "--config", f"beside={ROOT / 'results' / 'verl-cpu' / 'local'}"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    n_runs = len(cfg["models"]) * len(cfg["methods"]) * len(cfg["seeds"])
    assert out.count("rule train_verl:") == n_runs and out.count("rule merge_verl:") == n_runs
    specs = sorted((tmp_path / "results" / "verl-cpu" / "plan" / "train").rglob("*.json"))
    assert len(specs) == n_runs and f"python -m bandpo.verl.launch --spec {specs[0].relative_to(tmp_path)}" in out
    line = command.shell_command(read_spec(specs[0]))  # what the job runs (python -m bandpo.verl.launch prints it)
    assert "VERL_PLATFORM=cpu" in line and re.search(r"actor_rollout_ref\.rollout\.name=\W*hf\W", line)
    assert "bandpo.verl.plugin,bandpo.verl.cpu" in line and "python -m verl.trainer.main_ppo" in line
    assert cfg["beside"] == "results/verl-cpu/local" and "rule beside:" in out  # verl's runs beside the local ones


def verl_cpu_test_config(tmp_path: Path) -> Path:
    """config/verl-cpu.yaml shrunk to one short run: the backend settings are the profile's own."""
    cfg = yaml.safe_load((ROOT / "config" / "verl-cpu.yaml").read_text())
    cfg["profile"] = "verl-cpu-test"
    cfg["publish"] = False
    cfg["data"] = [{"id": "tiny-math-vtest", "source": "tiny-math", "seed": 0, "n_train": 500, "n_val": 16,
                    "n_test": 16}]  # fmt: skip
    cfg["train_data"] = ["tiny-math-vtest"]
    cfg["eval"]["tasks"] = [{"task": "tiny_math", "data": "tiny-math-vtest"}]
    cfg["models"] = [{"id": "vtest-tiny", "source": "tiny", "size": "tiny-test", "build": {"eval_limit": 8}}]
    cfg["methods"] = [{"id": "bandpo_kl", "method": "bandpo", "params": {"divergence": "kl", "delta": 0.05}}]
    cfg["seeds"] = [0]
    # a checkpoint and a held-out measurement (2 samples a validation problem) every step, as the real-LM profile
    cfg["train"].update(prompts_per_step=4, samples_per_prompt=4, updates_per_step=2, steps=2, save_freq=1,
                        val_every=1, val_k=2)  # fmt: skip
    cfg["beside"] = str(ROOT / "results")  # the published local-trainer page (no run of this test's model there)
    path = tmp_path / "verl-cpu-test.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.mark.verl_cpu
def test_verl_cpu_run_through_the_dag(tmp_path):
    wd = tmp_path / "wd"
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(wd), "--cores", "2",
           "--configfile", str(verl_cpu_test_config(tmp_path))]  # fmt: skip
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env={**os.environ})
    finally:
        subprocess.run(["ray", "stop", "--force"], capture_output=True, timeout=120)
    logs = "\n".join(p.read_text()[-3000:] for p in (wd / "logs").rglob("*.log")) if (wd / "logs").exists() else ""
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:] + logs
    print(f"verl CPU run through the DAG: {time.monotonic() - t0:.0f} s")

    run = wd / "results" / "verl-cpu-test" / "runs" / "vtest-tiny" / "bandpo_kl" / "seed0"
    info = check_run(run)  # the run contract
    assert info["trainer"] == "verl" and info["steps"] == 2 and info["config"]["method"] == "bandpo"
    assert info["method_label"] == "divergence=kl, delta=0.05"
    assert info["grader"]["mode"] == info["config"]["grader_mode"] == "lenient"  # the profile's grader.mode
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    # the held-out curve: before training (step 1's row, as the local trainer logs it) and after each step
    assert 0.0 <= metrics[0]["val/mean_before"] <= 1.0 and all(0.0 <= m["val/mean"] <= 1.0 for m in metrics)
    assert json.loads((run / "train_done.json").read_text())["last_checkpoint"] == 2
    assert all(0.0 <= m["clipfrac"] <= 1.0 and m["entropy"] > 0 for m in metrics)
    # the merged model keeps the base model's dtype and loads
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(run / "model", dtype="auto")
    assert merged.dtype == torch.float32
    summary = json.loads((wd / "results/verl-cpu-test/eval/vtest-tiny/bandpo_kl/seed0/tiny_math.json").read_text())
    assert summary["trainer"] == "verl" and "mean@8" in summary["metrics"]
    assert summary["base_model_dir"] == "resources/models/vtest-tiny/seed0"  # base_per_seed: seed 0's base model
    base = AutoModelForCausalLM.from_pretrained(wd / summary["base_model_dir"], dtype="auto")
    trained, untrained = merged.state_dict(), base.state_dict()
    assert any(not torch.equal(trained[k], untrained[k]) for k in untrained if k in trained)  # it did train
    assert (wd / "results" / "verl-cpu-test" / "leaderboard.csv").is_file()
    beside = pd.read_csv(wd / "results" / "verl-cpu-test" / "beside.csv")
    assert set(beside["entry"]) == {"base", "bandpo_kl"} and beside["mean@8_other"].isna().all()

    # one seed, one run: the same spec trained again into another folder logs the same numbers at every step (before
    # the hf rollout sampled in arrival order and the replay buffer listed trajectories as they finished, the
    # step-1 entropy of two runs differed)
    spec = json.loads((wd / "results/verl-cpu-test/plan/train/vtest-tiny/bandpo_kl/seed0.json").read_text())
    again = tmp_path / "again"
    spec["output_dir"] = str(again)
    (tmp_path / "again.json").write_text(json.dumps(spec))
    try:
        rerun = subprocess.run([sys.executable, "-m", "bandpo.verl.launch", "--spec", str(tmp_path / "again.json")],
                               cwd=wd, capture_output=True, text=True, timeout=1800)  # fmt: skip
    finally:
        subprocess.run(["ray", "stop", "--force"], capture_output=True, timeout=120)
    assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-4000:]

    def numbers(folder: Path) -> list[dict]:
        lines = [json.loads(line) for line in (folder / "verl_metrics.jsonl").read_text().splitlines()]
        timing = ("timing", "perf", "actor/perf")  # wall-clock measurements
        return [{k: v for k, v in line.get("data", line).items() if not k.startswith(timing) and "time" not in k}
                for line in lines]  # fmt: skip

    first, second = numbers(run), numbers(again)
    assert len(first) == 3 and "actor/entropy" in first[1] and first == second  # steps 0 (validation), 1, 2
    assert first[0] == {k: v for k, v in first[0].items() if k.startswith("val-")}

    # a start killed after step 2's checkpoint, before step 2's record: the next start drops that checkpoint,
    # resumes from step 1's (no second measurement before training) and logs step 2 as the first run did
    lines = (again / "verl_metrics.jsonl").read_text().splitlines()
    (again / "verl_metrics.jsonl").write_text("".join(line + "\n" for line in lines[:-1]))
    try:
        resumed = subprocess.run([sys.executable, "-m", "bandpo.verl.launch", "--spec", str(tmp_path / "again.json"),
                                  "--done", str(again / "train_done.json")],
                                 cwd=wd, capture_output=True, text=True, timeout=1800)  # fmt: skip
    finally:
        subprocess.run(["ray", "stop", "--force"], capture_output=True, timeout=120)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-4000:]
    assert "resuming after step 1" in resumed.stdout
    assert json.loads((again / "train_done.json").read_text())["resumed_after"] == 1
    assert numbers(again) == first[2:]  # the resumed start's own log: step 2 only, the same numbers
    assert (again / "verl_metrics.jsonl.0").is_file()  # the killed start's steps 0 and 1, kept
