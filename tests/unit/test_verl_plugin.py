"""verl integration on CPU: registry via entry point / fallback, exact equality with the suite's loss, command builder.

Needs verl installed (skipped otherwise) and this package installed (``pip install -e .``) for the entry point.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("verl.trainer.ppo.core_algos")

from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla, get_policy_loss_fn  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402

from bandpo import methods
from bandpo.methods import registry  # noqa: E402
from bandpo.verl import command, launch  # noqa: E402
from bandpo.verl import plugin as verl_plugin  # noqa: E402
from bandpo.verl.spec import VerlRun  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

torch.set_num_threads(1)

BUILT_IN = ["bandpo", "bandpo_upper", "cispo", "clip_higher", "dcpo", "grpo", "gspo"]
# Non-default parameters per method, to show they travel through BANDPO_METHOD_CONFIG.
PARAMS = {
    "grpo": {"eps_low": 0.25, "eps_high": 0.3},
    "clip_higher": {},
    "dcpo": {"cap": 6.0},
    "bandpo": {"divergence": "tv", "delta": 0.08, "relax": True},
    "bandpo_upper": {"divergence": "chi2", "delta": 0.07, "eps_low": 0.25},
    "cispo": {"eps_high": 0.5},
    "gspo": {"eps_low": 0.01, "eps_high": 0.02},
    # the rules of TRL's GRPOConfig and verl's rollout-correction presets (top_entropy needs the token entropy,
    # which verl's policy loss does not receive: tests/unit/test_trl_rules.py)
    "luspo": {"eps_low": 0.05, "eps_high": 0.1},
    "vespo": {"k_pos": 1.5, "lambda_neg": 2.5},
    "two_sided_clip": {"delta": 3.0},
    "offpolicy_mask": {"threshold": 0.2},
    "tis_token": {"threshold": 1.5},
    "tis_seq": {"threshold": 3.0},
    "icepop": {"threshold_lower": 0.7, "threshold": 2.0},
}


def actor_config(mode: str, clip_ratio_c: float = 10.0, **info) -> ActorConfig:
    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio_c=clip_ratio_c,
        loss_agg_mode=mode,
        global_batch_info=dict(info),
    )


def random_batch(seed: int = 0, b: int = 6, t: int = 10):
    g = torch.Generator().manual_seed(seed)
    old = -4 * torch.rand(b, t, generator=g)
    new = old + 0.7 * torch.randn(b, t, generator=g)
    new[0, :2] += 3.0  # ratios above the dual clip
    adv = torch.randn(b, 1, generator=g).expand(b, t).contiguous()
    mask = torch.rand(b, t, generator=g) > 0.3
    mask[1] = False  # a fully padded sequence
    weights = 0.5 + torch.rand(b, t, generator=g)
    return old, new, adv, mask, weights


def run_python(code: str, **env: str) -> str:
    full_env = {k: v for k, v in os.environ.items() if k not in ("VERL_USE_EXTERNAL_MODULES", verl_plugin.ENV_VAR)}
    full_env.update(env)
    out = subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


# ----------------------------------------------------------------------------------------------------------------
# Registration


REGISTRY_PROBE = (
    "import sys, verl\n"
    "from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY as R\n"
    "print(sorted(k for k in R if k.startswith('bandpo.')), 'bandpo.verl.plugin' in sys.modules)"
)
EXPECTED_NAMES = str(sorted(f"bandpo.{m}" for m in methods.list_methods() if methods.get_method(m).kind != "verl"))


def test_import_verl_registers_every_method_via_entry_point():
    """A fresh interpreter: `import verl` alone loads the plugin (as in every Ray worker)."""
    from importlib.metadata import entry_points

    if not any(ep.value == "bandpo.verl.plugin" for ep in entry_points(group="verl.plugins")):
        pytest.fail(
            "the verl.plugins entry point is not installed: run `pip install -e .` (pyproject.toml declares it)"
        )
    code = REGISTRY_PROBE
    assert run_python(code).strip() == f"{EXPECTED_NAMES} True"


@pytest.mark.slow
def test_external_modules_fallback_registers_every_method():
    """Fallback for verl without entry points: VERL_USE_EXTERNAL_MODULES (entry points disabled to prove it)."""
    out = run_python(REGISTRY_PROBE, VERL_USE_EXTERNAL_PLUGINS="none", VERL_USE_EXTERNAL_MODULES="bandpo.verl.plugin")
    assert out.strip() == f"{EXPECTED_NAMES} True"


def test_get_policy_loss_fn_returns_the_suite_loss_for_every_method():
    assert set(verl_plugin.registered_names()) >= {f"bandpo.{m}" for m in BUILT_IN}
    for m in BUILT_IN:
        fn = get_policy_loss_fn(verl_plugin.verl_loss_name(m))
        assert fn.__name__ == f"bandpo_{m}_policy_loss"
    # verl's own names stay verl's.
    assert get_policy_loss_fn("gspo") is not get_policy_loss_fn("bandpo.gspo")
    assert verl_plugin.register_all() == verl_plugin.registered_names()  # idempotent


def test_methods_registered_later_reach_verl(monkeypatch):
    from verl.trainer.ppo import core_algos

    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))
    monkeypatch.setattr(core_algos, "POLICY_LOSS_REGISTRY", dict(core_algos.POLICY_LOSS_REGISTRY))

    @methods.register_bounds("wide_clip", config=methods.GRPOConfig)
    def wide_clip(old_log_prob, response_mask, params):
        """Twice the GRPO interval."""
        return methods.constant_bounds(old_log_prob, response_mask, 1 - 2 * params.eps_low, 1 + 2 * params.eps_high)

    monkeypatch.delenv(verl_plugin.ENV_VAR, raising=False)
    old, new, adv, mask, _ = random_batch()
    loss, _ = get_policy_loss_fn("bandpo.wide_clip")(old, new, adv, mask, "token-mean", actor_config("token-mean"))
    ref, _ = methods.compute_loss("wide_clip", old, new, adv, mask, settings={"loss_agg_mode": "token-mean"})
    assert torch.equal(loss, ref)


# ----------------------------------------------------------------------------------------------------------------
# Exact equality with the suite's loss


@pytest.mark.parametrize("method", sorted(PARAMS))
def test_verl_loss_equals_suite_loss_for_every_mode(method, monkeypatch):
    monkeypatch.setenv(verl_plugin.ENV_VAR, json.dumps({method: PARAMS[method]}))
    verl_fn = get_policy_loss_fn(f"bandpo.{method}")
    old, new, adv, mask, weights = random_batch()
    for mode in methods.AGG_MODES:
        for info in ({}, {"dp_size": 2, "batch_num_tokens": 70, "global_batch_size": 11, "loss_scale_factor": 13}):
            a, b = new.clone().requires_grad_(), new.clone().requires_grad_()
            # Called the way verl's ppo_loss calls it (keywords; bool mask).
            loss, metrics = verl_fn(
                old_log_prob=old,
                log_prob=a,
                advantages=adv,
                response_mask=mask,
                loss_agg_mode=mode,
                config=actor_config(mode, 10.0, **info),
                rollout_is_weights=weights,
            )
            ref, ref_metrics = methods.compute_loss(
                method,
                old,
                b,
                adv,
                mask,
                PARAMS[method],
                {"loss_agg_mode": mode, "dual_clip_c": 10.0},
                rollout_is_weights=weights,
                global_batch_info=info,
            )
            assert torch.equal(loss, ref), (mode, info)
            loss.backward()
            ref.backward()
            assert torch.equal(a.grad, b.grad), (mode, info)
            assert all(isinstance(v, float) for v in metrics.values())
            assert metrics["actor/bandpo/clipfrac_upper"] == ref_metrics["clipfrac_upper"].item()
            assert {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"} <= set(metrics)


def test_bandpo_grpo_equals_verl_vanilla(monkeypatch):
    monkeypatch.setenv(verl_plugin.ENV_VAR, json.dumps({"grpo": {"eps_low": 0.2, "eps_high": 0.2}}))
    old, new, adv, mask, weights = random_batch(seed=3)
    for mode in methods.AGG_MODES:
        cfg = actor_config(mode, clip_ratio_c=3.0)
        ours, m = get_policy_loss_fn("bandpo.grpo")(old, new, adv, mask, mode, cfg, weights)
        ref, ref_m = compute_policy_loss_vanilla(old, new, adv, mask, mode, cfg, weights)
        assert torch.equal(ours, ref), mode
        assert m["actor/pg_clipfrac"] == pytest.approx(ref_m["actor/pg_clipfrac"])
        assert m["actor/pg_clipfrac_lower"] == pytest.approx(ref_m["actor/pg_clipfrac_lower"])


def verl_clip_config(mode: str, eps_low: float, eps_high: float, **info) -> ActorConfig:
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, clip_ratio_low=eps_low,
                       clip_ratio_high=eps_high, loss_agg_mode=mode, global_batch_info=dict(info))  # fmt: skip


@pytest.mark.parametrize("method", ["cispo", "gspo"])
def test_cispo_and_gspo_equal_verls_own(method, monkeypatch):
    """bandpo.cispo / bandpo.gspo against verl's registered ``cispo`` / ``gspo`` with the same eps: bitwise the same
    loss and gradient (the same operations in the same order) in every aggregation mode, with and without rollout
    weights and data-parallel normalisation; the same ppo_kl for both and the same pg_clipfrac for GSPO.
    Documented differences, each shown below: CISPO's pg_clipfrac (verl: every token whose weight is clipped,
    whatever the sign of A; ours: clip_diagnostics' clipfrac, a clipped weight on the side the advantage pushes),
    and GSPO's clamp (verl clamps log s_it at +10, ours clamps the sequence log-ratio at +-log_ratio_clamp = 20)."""
    eps = {"cispo": (0.3, 0.28), "gspo": (3e-4, 4e-4)}[method]
    monkeypatch.setenv(verl_plugin.ENV_VAR, json.dumps({method: {"eps_low": eps[0], "eps_high": eps[1]}}))
    ours_fn, verl_fn = get_policy_loss_fn(f"bandpo.{method}"), get_policy_loss_fn(method)
    old, new, adv, mask, weights = random_batch(seed=5)
    if method == "gspo":
        new = old + 1e-3 * (new - old)  # sequence ratios within about 1e-3 of 1: some inside GSPO's tiny interval
    for mode in methods.AGG_MODES:
        for info in ({}, {"dp_size": 2, "batch_num_tokens": 70, "global_batch_size": 11, "loss_scale_factor": 13}):
            for w in (None, weights):
                a, b = new.clone().requires_grad_(), new.clone().requires_grad_()
                cfg = verl_clip_config(mode, *eps, **info)
                ours, m = ours_fn(old, a, adv, mask, mode, cfg, w)
                ref, ref_m = verl_fn(old, b, adv, mask, mode, cfg, w)
                assert torch.equal(ours, ref), (mode, info, w is None)
                ours.backward()
                ref.backward()
                assert torch.equal(a.grad, b.grad), (mode, info, w is None)
                assert m["actor/ppo_kl"] == pytest.approx(ref_m["actor/ppo_kl"], rel=1e-6, abs=1e-9)
                if method == "gspo":
                    assert m["actor/pg_clipfrac"] == pytest.approx(ref_m["actor/pg_clipfrac"], abs=1e-7)
    if method == "gspo":
        assert 0 < ref_m["actor/pg_clipfrac"] < 1  # the case covered both clipped and unclipped sequences
        # the one difference: a sequence log-ratio above 10. A < 0 keeps the unclipped term, -A s, which verl
        # computes with log s capped at 10 and the suite with the sequence log-ratio (capped at 20 only).
        far = old + 12.0
        neg = -adv.abs() - 0.1
        cfg = verl_clip_config("token-mean", *eps)
        ours, _ = ours_fn(old, far, neg, mask, "token-mean", cfg, None)
        ref, _ = verl_fn(old, far, neg, mask, "token-mean", cfg, None)
        assert float(ours) == pytest.approx(float(ref) * math.exp(2.0), rel=1e-5)
    else:
        # pg_clipfrac: verl counts every clipped weight; ours only those on the side of the advantage's push
        r = torch.exp(torch.clamp(new - old, -20, 20))
        outside = ((r < 1 - eps[0]) | (r > 1 + eps[1])) & mask
        pushed = ((r < 1 - eps[0]) & (adv < 0) | (r > 1 + eps[1]) & (adv > 0)) & mask
        _, m = ours_fn(old, new, adv, mask, "token-mean", verl_clip_config("token-mean", *eps), None)
        _, ref_m = verl_fn(old, new, adv, mask, "token-mean", verl_clip_config("token-mean", *eps), None)
        assert ref_m["actor/pg_clipfrac"] == pytest.approx(float(outside.sum() / mask.sum()), rel=1e-6)
        assert m["actor/pg_clipfrac"] == pytest.approx(float(pushed.sum() / mask.sum()), rel=1e-6)
        assert m["actor/pg_clipfrac"] < ref_m["actor/pg_clipfrac"]


def test_a_method_is_resolved_once_per_settings(monkeypatch):
    """verl calls the loss per micro-batch: the method is resolved on the first call only."""
    monkeypatch.setenv(verl_plugin.ENV_VAR, json.dumps({"bandpo": {"delta": 0.07}}))
    verl_plugin.resolved_method.cache_clear()
    calls = []
    real = methods.resolve
    monkeypatch.setattr(methods, "resolve", lambda *a, **k: calls.append(a) or real(*a, **k))
    fn = get_policy_loss_fn("bandpo.bandpo")
    old, new, adv, mask, _ = random_batch()
    for _ in range(3):
        fn(old, new, adv, mask, "token-mean", actor_config("token-mean"))
    assert len(calls) == 1 and calls[0][1].delta == 0.07
    fn(old, new, adv, mask, "seq-mean-token-mean", actor_config("seq-mean-token-mean"))
    assert len(calls) == 2  # other loss settings: resolved again, once


# ----------------------------------------------------------------------------------------------------------------
# BANDPO_METHOD_CONFIG


def test_method_config_sources(tmp_path, monkeypatch):
    monkeypatch.delenv(verl_plugin.ENV_VAR, raising=False)
    assert verl_plugin.method_config("bandpo") == methods.make_config("bandpo")  # unset -> defaults
    inline = '{"bandpo": {"delta": 0.1}, "dcpo": {}}'
    assert verl_plugin.method_config("bandpo", inline).delta == 0.1
    assert verl_plugin.method_config("dcpo", inline) == methods.make_config("dcpo")
    json_file = tmp_path / "m.json"
    json_file.write_text('{"grpo": {"eps_high": 0.3}}')
    yaml_file = tmp_path / "m.yaml"
    yaml_file.write_text("bandpo:\n  divergence: chi2\n")
    monkeypatch.setenv(verl_plugin.ENV_VAR, str(json_file))
    assert verl_plugin.method_config("grpo").eps_high == 0.3
    assert verl_plugin.method_config("bandpo", str(yaml_file)).divergence == "chi2"


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ('{"grpo": {}}', "has parameters for \\['grpo'\\] but the loss is 'bandpo.bandpo'"),
        ('{"bandpo": {"delta": -1}}', "'delta' = -1.0 must be > 0"),
        ('{"bandpo": {"dleta": 1}}', "did you mean 'delta'"),
        ('{"bandpo": {}, "ppo": {}}', "unknown method"),
        ('{"bandpo": {', "not valid JSON"),
        ('{"bandpo": 3}', "must map method names"),
        ("/nonexistent/m.json", "does not exist"),
    ],
)
def test_method_config_errors(raw, match):
    with pytest.raises(ValueError, match=match):
        verl_plugin.method_config("bandpo", raw)


# ----------------------------------------------------------------------------------------------------------------
# Command builder against verl's own Hydra config


def paper_protocol() -> dict:
    """config/gpu.yaml's ``train:``: the paper's protocol, as the GPU profile's runs get it."""
    import yaml

    return yaml.safe_load(open(ROOT / "config" / "gpu.yaml", encoding="utf-8"))["train"]


def sweep_run(**kw) -> VerlRun:
    """A run of the paper's protocol (config/gpu.yaml's), ``kw`` over it."""
    spec = {
        **paper_protocol(),
        "model": "Qwen/Qwen2.5-3B-Instruct",
        "method": "bandpo",
        "params": {"divergence": "chi2", "delta": 0.05},
        "seed": 7,
        "train_files": "/data/train.parquet",
        "val_files": ["/data/aime24.parquet", "/data/amc23.parquet"],
        "output_dir": "/runs/qwen3b/bandpo/seed7",
        "reward_fn_path": "/work/bandpo/reward.py",
    }
    spec.update(kw)
    return VerlRun.from_mapping(spec)


@pytest.fixture(scope="module")
def compose():
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")

    def _compose(overrides):
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            return hydra_compose("ppo_trainer", overrides=list(overrides))

    return _compose


@pytest.mark.filterwarnings("ignore:Disabled critic")
def test_overrides_compose_validate_and_carry_the_method(compose):
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    run = sweep_run()
    cfg = compose(command.overrides(run))
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))  # as main()
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert actor.policy_loss.loss_mode == "bandpo.bandpo"
    assert get_policy_loss_fn(actor.policy_loss.loss_mode) is not None

    # The paper's protocol.
    a, r = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert (cfg.data.train_batch_size, r.n, a.ppo_mini_batch_size, a.ppo_epochs) == (256, 16, 64, 1)
    assert (a.optim.lr, a.optim.weight_decay, a.grad_clip, a.optim.lr_scheduler_type) == (1e-6, 0.01, 1.0, "constant")
    assert (a.use_kl_loss, a.kl_loss_coef, a.kl_loss_type, a.entropy_coeff) == (True, 0.001, "low_var_kl", 0)
    assert (a.clip_ratio_c, a.loss_agg_mode) == (10.0, "seq-mean-token-mean")
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length, r.temperature, r.top_p) == (1024, 4096, 1, 1)
    assert (cfg.algorithm.adv_estimator, cfg.algorithm.norm_adv_by_std_in_grpo, cfg.trainer.total_epochs) == (
        "grpo",
        True,
        10,
    )
    assert list(cfg.data.val_files) == ["/data/aime24.parquet", "/data/amc23.parquet"]
    assert cfg.reward.custom_reward_function.path == "/work/bandpo/reward.py"
    assert (cfg.data.seed, r.seed, a.data_loader_seed) == (7, 7, 7)

    # The runtime_env verl's run_ppo() hands to ray.init carries the method's parameters to every worker.
    runtime_env = OmegaConf.merge(get_ppo_ray_runtime_env(cfg), cfg.ray_kwargs.ray_init.runtime_env)
    env_vars = OmegaConf.to_container(runtime_env)["env_vars"]
    assert env_vars["VERL_USE_EXTERNAL_MODULES"] == "bandpo.verl.plugin"
    assert env_vars["VERL_FILE_LOGGER_PATH"] == "/runs/qwen3b/bandpo/seed7/verl_metrics.jsonl"
    worker_cfg = verl_plugin.method_config("bandpo", env_vars[verl_plugin.ENV_VAR])
    assert worker_cfg == methods.make_config("bandpo", {"divergence": "chi2", "delta": 0.05})


def test_lr_end_is_verls_cosine_decay_to_that_rate(compose):
    """lr_end: verl's cosine schedule with min_lr_ratio = lr_end / lr, which ends the run at lr_end (verl's own
    scheduler function, stepped once per training step); None keeps the paper's constant rate; a bad value fails."""
    import torch
    from verl.utils.torch_functional import get_cosine_schedule_with_warmup

    run = sweep_run(lr=5e-4, lr_end=1e-4, steps=64)
    optim = compose(command.overrides(run)).actor_rollout_ref.actor.optim
    assert (optim.lr_scheduler_type, optim.min_lr_ratio, optim.lr_warmup_steps_ratio) == ("cosine", 0.2, 0.0)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=optim.lr)
    sched = get_cosine_schedule_with_warmup(opt, 0, 64, min_lr_ratio=optim.min_lr_ratio, num_cycles=optim.num_cycles)
    lrs = []
    for _ in range(64):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == pytest.approx(5e-4) and lrs[-1] == pytest.approx(1e-4, rel=0.01)
    assert all(a >= b for a, b in itertools.pairwise(lrs))
    assert compose(command.overrides(sweep_run())).actor_rollout_ref.actor.optim.lr_scheduler_type == "constant"
    for bad in (0.0, 2e-6):
        with pytest.raises(ValueError, match="lr_end"):
            sweep_run(lr_end=bad)


@pytest.mark.parametrize("method", sorted(PARAMS))
def test_every_method_composes(compose, method):
    cfg = compose(command.overrides(sweep_run(method=method, params=PARAMS[method])))
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == f"bandpo.{method}"
    raw = cfg.ray_kwargs.ray_init.runtime_env.env_vars[verl_plugin.ENV_VAR]
    assert verl_plugin.method_config(method, raw) == methods.make_config(method, PARAMS[method])


def _gpu_entry(entry_id: str) -> dict:
    import yaml

    cfg = yaml.safe_load(open(ROOT / "config" / "gpu.yaml", encoding="utf-8"))
    return next(e for e in cfg["methods"] if e["id"] == entry_id)


def test_dapo_entry_is_the_dapo_recipe_in_verls_own_config(compose):
    """config/gpu.yaml's dapo row composes with verl's ppo_trainer config and carries the DAPO recipe: Clip-Higher
    0.2 / 0.28, token-mean, no KL loss, dynamic sampling on accuracy, verl's DAPO reward manager with a 512-token
    overlong buffer inside a 4,608-token limit (penalty past 4,096), the paper's grader (math-dapo) in the reward."""
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
    from verl.trainer.config import FilterGroupsConfig
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    entry = _gpu_entry("dapo")
    run = sweep_run(method=entry["method"], params=entry.get("params", {}), **entry.get("train", {}))
    cfg = compose(command.overrides(run))
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))  # as main()
    a = cfg.actor_rollout_ref.actor
    assert a.policy_loss.loss_mode == "bandpo.clip_higher"
    assert (a.clip_ratio_low, a.clip_ratio_high, a.loss_agg_mode, a.use_kl_loss) == (0.2, 0.28, "token-mean", False)
    assert cfg.algorithm.use_kl_in_reward is False
    fg = omega_conf_to_dataclass(cfg.algorithm.filter_groups)
    assert isinstance(fg, FilterGroupsConfig)
    assert (fg.enable, fg.metric, fg.max_num_gen_batches) == (True, "acc", 100)
    assert cfg.data.max_response_length == 4608
    assert cfg.reward.reward_manager.name == "dapo" and get_reward_manager_cls("dapo").__name__ == "DAPORewardManager"
    kw = cfg.reward.reward_kwargs
    assert (kw.max_resp_len, kw.overlong_buffer_cfg.enable, kw.overlong_buffer_cfg.len) == (4608, True, 512)
    assert kw.max_resp_len - kw.overlong_buffer_cfg.len == 4096 and kw.overlong_buffer_cfg.penalty_factor == 1.0
    assert cfg.reward.custom_reward_function.reward_kwargs.grader_mode == "math-dapo"
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.BANDPO_GRADER_MODE == "math-dapo"
    # the authors' dapo_official.sh: warmup 10 steps, weight decay 0.1, 20 epochs
    assert (a.optim.lr_warmup_steps, a.optim.weight_decay, cfg.trainer.total_epochs) == (10, 0.1, 20)


# config/gpu.yaml's rows in verl's composed config: (lr_warmup_steps, weight_decay, total_epochs, dynamic sampling,
# loss_agg_mode, kl_loss_coef, max_response_length, reward manager). The dapo row: the authors' dapo_official.sh;
# bandpo_kl_ds: their bandpo__grpo_plus_ray_bandkl005_filter_groups.sh (24 epochs, filter_groups, else the paper's
# BandPO); every other row: the paper's protocol, config/gpu.yaml's train:.
PAPER_ROW = (0, 0.01, 10, False, "seq-mean-token-mean", 0.001, 4096, "naive")
GPU_ROWS = {
    "dapo": (10, 0.1, 20, True, "token-mean", 0.0, 4608, "dapo"),
    "bandpo_kl_ds": (0, 0.01, 24, True, "seq-mean-token-mean", 0.001, 4096, "naive"),
}


def _gpu_entries() -> list[str]:
    import yaml

    cfg = yaml.safe_load(open(ROOT / "config" / "gpu.yaml", encoding="utf-8"))
    return [e["id"] for e in cfg["methods"]]


@pytest.mark.parametrize("entry_id", _gpu_entries())
def test_gpu_rows_carry_their_protocol_in_verls_config(compose, entry_id):
    """Each row of config/gpu.yaml composed with verl's ppo_trainer config: the values above, and the optimizer and lr
    schedule that verl's own FSDP engine builds from them (AdamW with that weight decay; a linear warmup from 0 over
    lr_warmup_steps training steps, then constant)."""
    import types

    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config.optimizer import build_optimizer
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    entry = _gpu_entry(entry_id)
    run = sweep_run(method=entry["method"], params=entry.get("params", {}), **entry.get("train", {}))
    cfg = compose(command.overrides(run))
    a = cfg.actor_rollout_ref.actor
    fg = cfg.algorithm.filter_groups
    got = (a.optim.lr_warmup_steps, a.optim.weight_decay, cfg.trainer.total_epochs, fg.enable, a.loss_agg_mode,
           a.kl_loss_coef, cfg.data.max_response_length, cfg.reward.reward_manager.name)  # fmt: skip
    assert got == GPU_ROWS.get(entry_id, PAPER_ROW)
    assert a.use_kl_loss == (a.kl_loss_coef > 0) and a.optim.lr_warmup_steps_ratio == 0.0
    if fg.enable:  # the dapo row's dynamic-sampling overrides, shared by the YAML alias
        assert (fg.metric, fg.max_num_gen_batches) == ("acc", 100)

    optim = omega_conf_to_dataclass(a.optim)
    optim.total_training_steps = 100  # verl injects it at the start of a run
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(1))], optim)  # verl's, as its FSDP engine builds it
    sched = FSDPEngine._build_lr_scheduler(types.SimpleNamespace(optimizer_config=optim, rank=1), opt)
    lrs = []
    for _ in range(12):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    warmup = got[0]
    assert lrs == pytest.approx([1e-6 * min(1.0, i / warmup) if warmup else 1e-6 for i in range(12)])
    assert isinstance(opt, torch.optim.AdamW) and opt.param_groups[0]["weight_decay"] == got[1]


def test_lr_warmup_steps_is_a_count_of_steps():
    assert sweep_run(lr_warmup_steps=0).lr_warmup_steps == 0
    with pytest.raises(ValueError, match="lr_warmup_steps: must be an integer >= 0"):
        sweep_run(lr_warmup_steps=-1)


def test_extra_overrides_splice_a_shared_group():
    """A list inside extra_overrides (a YAML alias, as gpu.yaml shares the dapo row's dynamic sampling) is spliced in
    order; the run's recorded fields (dataclasses.asdict, run.json) hold the flat list."""
    group = ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"]
    run = sweep_run(extra_overrides=[group, "reward.reward_manager.name=dapo"])
    assert run.extra_overrides == [*group, "reward.reward_manager.name=dapo"]
    assert command.overrides(run)[-3:] == run.extra_overrides == dataclasses.asdict(run)["extra_overrides"]


def test_dapo_reward_manager_applies_the_overlong_penalty_past_4096_tokens(compose):
    """verl's own DAPO reward manager, built from the dapo row's config: no penalty up to 4,096 response tokens,
    then -1 per 512 tokens beyond (reward - 1 at 4,608), on top of the grader's +1 / -1."""
    import asyncio

    from tensordict import TensorDict
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls

    entry = _gpu_entry("dapo")
    cfg = compose(command.overrides(sweep_run(method=entry["method"], params={}, **entry.get("train", {}))))

    class Tok:
        def decode(self, ids, skip_special_tokens=True):
            return "work\nAnswer: 3"

    def score(**kw):
        return {"score": 1.0, "acc": 1.0}

    manager = get_reward_manager_cls("dapo")(cfg, Tok(), score)

    def reward(n_tokens):
        width = 4608
        mask = torch.cat([torch.ones(8), torch.ones(n_tokens), torch.zeros(width - n_tokens)]).long()
        batch = TensorDict({"responses": torch.zeros(1, width).long(), "attention_mask": mask[None]}, batch_size=[1])
        data = DataProto(batch=batch, non_tensor_batch={
            "data_source": __import__("numpy").array(["math"], dtype=object),
            "reward_model": __import__("numpy").array([{"ground_truth": "3"}], dtype=object),
        })  # fmt: skip
        manager.loop = asyncio.new_event_loop()
        try:
            return manager.loop.run_until_complete(manager.run_single(data))["reward_score"]
        finally:
            manager.loop.close()

    assert reward(4096) == 1.0 and reward(100) == 1.0
    assert reward(4096 + 256) == pytest.approx(0.5) and reward(4608) == pytest.approx(0.0)


def test_grader_mode_reaches_verls_reward(compose):
    cfg = compose(command.overrides(sweep_run(grader_mode="lenient")))
    assert cfg.reward.custom_reward_function.reward_kwargs.grader_mode == "lenient"
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.BANDPO_GRADER_MODE == "lenient"
    with pytest.raises(ValueError, match="grader_mode: must be one of lenient, strict-answer-line"):
        sweep_run(grader_mode="strict")


def test_gpu_profile_trains_and_validates_as_the_authors(compose, tmp_path):
    """config/gpu.yaml through the run plan, as its jobs get it: verl validates before step 1 and every 5 steps on
    AIME24, AIME25 and AMC23 (their test splits, one parquet whose rows carry their data set's id) with 32 samples
    at the rollouts' T = 1.0, top_p 1.0; the reward is the authors' Answer:-line rule, AMC23's validation rows the
    \\boxed{} MATH rule; no deterministic settings unless asked for."""
    import yaml

    from bandpo.plan.runs import Plan
    from bandpo.plan.sweep import val_data_ids, verl_val_split
    from bandpo.plan.validate import validate_config

    cfg = validate_config(yaml.safe_load((ROOT / "config" / "gpu.yaml").read_text(encoding="utf-8")), root=ROOT)
    assert val_data_ids(cfg) == ["aime-2024", "aime-2025", "amc-2023"] and verl_val_split(cfg) == "test"
    plan = Plan(cfg, root=ROOT)
    run = plan.train_spec("qwen2.5-3b-instruct", "bandpo_kl", 0)
    assert (run.grader_mode, dict(run.val_grader_modes)) == ("math-dapo-paper", {"amc-2023": "math-boxed"})
    run.output_dir = str(tmp_path / "fresh")  # a fresh run (no checkpoint: validation before training)
    c = compose(command.overrides(run))
    assert (c.trainer.test_freq, c.trainer.val_before_train) == (5, True)
    v = c.actor_rollout_ref.rollout.val_kwargs
    assert (v.n, v.do_sample, v.temperature, v.top_p) == (32, True, 1.0, 1.0)
    kwargs = c.reward.custom_reward_function.reward_kwargs
    assert kwargs.grader_mode == "math-dapo-paper" and dict(kwargs.grader_modes) == {"amc-2023": "math-boxed"}
    assert c.reward.custom_reward_function.path.endswith("workflow/scripts/verl_reward.py")
    # the reward function sees each row's data set id as its data_source, the key of grader_modes
    from bandpo.data.tiny_math import write_jsonl
    from bandpo.verl.data import verl_rows

    write_jsonl(tmp_path / "amc-2023" / "test.jsonl", [{"id": "a", "prompt": "p", "answer": "7"}])
    assert verl_rows([str(tmp_path / "amc-2023" / "test.jsonl")], "test")[0]["data_source"] in kwargs.grader_modes
    assert (
        not c.actor_rollout_ref.rollout.full_determinism and not c.actor_rollout_ref.actor.fsdp_config.full_determinism
    )
    for entry in ("grpo", "dapo", "bandpo_kl_ds"):  # every row validates the same way
        other = compose(command.overrides(plan.train_spec("r1-distill-qwen-7b", entry, 1)))
        assert (other.trainer.test_freq, other.actor_rollout_ref.rollout.val_kwargs.n) == (5, 32)
    with pytest.raises(ValueError, match="val_grader_modes: amc-2023: must be one of"):
        sweep_run(val_grader_modes={"amc-2023": "boxed"})
    with pytest.raises(ValueError, match="val_grader_modes: needs reward_fn_path"):
        sweep_run(val_grader_modes={"amc-2023": "math-boxed"}, reward_fn_path=None)


def test_deterministic_switch_sets_verls_settings_for_vllm_and_the_actor(compose):
    """``deterministic: true`` (config/gpu.yaml's train:): verl's rollout.full_determinism (vLLM) and the FSDP
    engines' full_determinism, composed with verl's own config; the protocol's keys unchanged."""
    plain = compose(command.overrides(sweep_run()))
    det = compose(command.overrides(sweep_run(deterministic=True)))
    assert det.actor_rollout_ref.rollout.name == "vllm" and det.actor_rollout_ref.rollout.full_determinism
    assert det.actor_rollout_ref.actor.fsdp_config.full_determinism
    assert det.actor_rollout_ref.ref.fsdp_config.full_determinism
    assert not plain.actor_rollout_ref.rollout.full_determinism
    assert not plain.actor_rollout_ref.actor.fsdp_config.full_determinism
    assert not plain.actor_rollout_ref.ref.fsdp_config.full_determinism
    flip = {"rollout.full_determinism", "actor.fsdp_config.full_determinism", "ref.fsdp_config.full_determinism"}
    a = {k.removeprefix("actor_rollout_ref."): v for k, v in (x.split("=", 1) for x in command.overrides(sweep_run()))}
    b = dict(x.split("=", 1) for x in command.overrides(sweep_run(deterministic=True)))
    b = {k.removeprefix("actor_rollout_ref."): v for k, v in b.items()}
    assert {k for k in set(a) | set(b) if a.get(k) != b.get(k)} == flip


def test_wrong_keys_fail_here_not_on_a_cluster(compose):
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):  # verl's PolicyLossConfig is closed
        compose(command.overrides(sweep_run(extra_overrides=["actor_rollout_ref.actor.policy_loss.delta=0.1"])))
    with pytest.raises(ValueError, match="did you mean 'seed'"):
        sweep_run(sed=1)
    with pytest.raises(ValueError, match="'delta' = -1.0 must be > 0"):
        command.overrides(sweep_run(params={"delta": -1}))
    with pytest.raises(ValueError, match="multiple of updates_per_step"):
        sweep_run(updates_per_step=3)


@pytest.mark.slow
def test_command_line_through_verl_cli():
    """The real entry point parses the shell line (``--cfg job`` prints the config and exits; no GPU, no Ray)."""
    import yaml

    run = sweep_run(method="dcpo", params={"cap": 5})
    cmd = command.shell_command(run).replace(f"{run.python} -m", f"{sys.executable} -m", 1)
    env_prefix = cmd.split(f"{sys.executable} -m", 1)[0].split()  # the job's environment, then the command
    assert any(a.startswith("BANDPO_METHOD_CONFIG=") for a in env_prefix), cmd[:500]
    out = subprocess.run(["bash", "-c", cmd + " --cfg job"], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    cfg = yaml.safe_load(out.stdout)
    assert cfg["actor_rollout_ref"]["actor"]["policy_loss"]["loss_mode"] == "bandpo.dcpo"
    raw = cfg["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"][verl_plugin.ENV_VAR]
    assert json.loads(raw) == {"dcpo": {"cap": 5.0, "eps_high": 0.2, "eps_low": 0.16}}


def test_the_plugin_loads_user_modules_at_verls_start(tmp_path):
    """verl imports bandpo.verl.plugin in its driver and every worker: that import loads $BANDPO_METHOD_MODULES
    (bandpo.methods alone does not) and registers the user's methods in verl's registry."""
    from test_methods import side_effect_module

    module, marker = side_effect_module(tmp_path)
    code = (
        "import bandpo.methods; import pathlib, sys; print(pathlib.Path(sys.argv[1]).exists())\n"
        "import bandpo.verl.plugin\n"
        "from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY\n"
        "print(pathlib.Path(sys.argv[1]).exists(), 'bandpo.side_effect_clip' in POLICY_LOSS_REGISTRY)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_USE_EXTERNAL_MODULES", verl_plugin.ENV_VAR)}
    env[methods.METHOD_MODULES_ENV] = str(module)
    out = subprocess.run([sys.executable, "-c", code, str(marker)], env=env, capture_output=True, text=True, timeout=99)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["False", "True", "True"]


# ----------------------------------------------------------------------------------------------------------------
# One vocabulary: docs/protocol-fields.md


def protocol_table() -> dict[str, list[str]]:
    """docs/protocol-fields.md's rows: field -> [verl keys, local default, verl default, meaning]."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "protocol-fields.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def default_cell(cls, name: str) -> str:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if name not in fields:
        return "—"
    f = fields[name]
    if f.default is not dataclasses.MISSING:
        return f"`{f.default!r}`"
    if f.default_factory is not dataclasses.MISSING:
        return f"`{f.default_factory()!r}`"
    return "required"


# a value other than the default for each protocol field (valid together with sweep_run's settings)
CHANGED = {"model": "other-model", "method": "grpo", "seed": 11, "steps": 3, "prompts_per_step": 128,
           "samples_per_prompt": 4, "temperature": 0.7, "max_new_tokens": 512, "updates_per_step": 2, "lr": 2e-6,
           "lr_end": 5e-7, "weight_decay": 0.1, "grad_clip": 0.5, "kl_coef": 0.01, "loss_agg_mode": "token-mean",
           "dual_clip_c": 3.0, "ppo_epochs": 2, "kl_loss_type": "kl", "entropy_coeff": 0.01, "top_p": 0.9,
           "max_prompt_length": 512, "total_epochs": 2, "lr_warmup_steps": 10, "trackers": ["tensorboard"],
           "val_every": 4, "val_k": 4}  # fmt: skip


def test_protocol_table_is_true():
    from bandpo.train.loop import TrainConfig
    from bandpo.verl.command import PROTOCOL_KEYS, VERL_ONLY_PROTOCOL

    table = protocol_table()
    keys = {**PROTOCOL_KEYS, **VERL_ONLY_PROTOCOL}
    train_fields = [f.name for f in dataclasses.fields(TrainConfig)]
    verl_fields = {f.name for f in dataclasses.fields(VerlRun)}
    # every TrainConfig field and every protocol field of VerlRun is a row; a name both have maps through one place
    assert set(table) == set(train_fields) | set(keys)
    assert set(train_fields) & verl_fields - {"params"} <= set(PROTOCOL_KEYS)
    assert set(keys) <= verl_fields
    assert not {"rollout_n", "kl_loss_coef", "clip_ratio_c", "train_batch_size", "ppo_mini_batch_size",
                "max_response_length", "total_training_steps", "use_kl_loss"} & verl_fields  # fmt: skip
    # defaults are the code's
    for name, (_, local, verl, _) in table.items():
        assert local == default_cell(TrainConfig, name), name
        assert verl == default_cell(VerlRun, name), name
    # each listed verl key is what VerlRun emits for that field: present, and it follows the field's value
    base = dict(command.protocol_overrides(sweep_run()))
    emitted = dict(o.split("=", 1) for o in command.overrides(sweep_run()) if not o.startswith("+"))
    for name, (cell, *_) in table.items():
        listed = tuple(k.strip().strip("`") for k in cell.split(",")) if cell != "—" else ()
        assert listed == keys.get(name, ()), name
        if not listed:
            continue
        other = {"params": {}} if name == "method" else {}  # the other method's parameters
        changed = command.protocol_overrides(sweep_run(**{name: CHANGED[name]}, **other))
        for key in listed:
            assert key in changed and changed[key] != base.get(key), (name, key)
            assert key in emitted or (name == "lr_end" and key not in base), (name, key)  # min_lr_ratio: lr_end set


def test_trackers_are_verls_trainer_logger_writing_into_the_run(compose, monkeypatch):
    """``trackers`` is verl's trainer.logger after the console and file loggers every run has, and verl's trackers
    write into the run's folder, as the local trainer's; off by default. (``max_new_tokens`` is verl's
    loss_scale_factor too: Dr. GRPO's constant of seq-mean-token-sum-norm, as in the local trainer.)"""
    import importlib.util

    base = sweep_run()
    cfg = compose(command.overrides(base))
    assert list(cfg.trainer.logger) == ["console", "file"]
    assert cfg.actor_rollout_ref.actor.loss_scale_factor == base.max_new_tokens
    assert not {"TENSORBOARD_DIR", "MLFLOW_TRACKING_URI"} & set(command.env(base))
    find_spec = importlib.util.find_spec  # mlflow is optional: here it counts as installed
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object() if n == "mlflow" else find_spec(n, *a))
    run = sweep_run(trackers=["tensorboard", "mlflow"])
    cfg = compose(command.overrides(run))
    assert list(cfg.trainer.logger) == ["console", "file", "tensorboard", "mlflow"]
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    env = command.env(run)
    assert env["TENSORBOARD_DIR"] == "/runs/qwen3b/bandpo/seed7/tensorboard"
    assert env["MLFLOW_TRACKING_URI"] == "sqlite:////runs/qwen3b/bandpo/seed7/mlruns/mlflow.db"  # the local trainer's
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")  # the user's own store is left alone
    assert "MLFLOW_TRACKING_URI" not in command.env(run)
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars["TENSORBOARD_DIR"] == env["TENSORBOARD_DIR"]
    with pytest.raises(ValueError, match="trackers: unknown tracker 'wandb'"):
        sweep_run(trackers=["wandb"])


def test_one_dual_clip_default():
    """10.0, the paper's c, everywhere: the loss settings, both trainers, and the plugin's fallback when verl's
    config lacks clip_ratio_c (verl's own default would be 3.0)."""
    from bandpo.train.loop import TrainConfig

    c = methods.DEFAULT_DUAL_CLIP_C
    assert c == 10.0
    assert methods.SurrogateConfig().dual_clip_c == TrainConfig().dual_clip_c == sweep_run().dual_clip_c == c
    assert f"actor_rollout_ref.actor.clip_ratio_c={c!r}" in command.overrides(sweep_run())
    assert verl_plugin._dual_clip_c(None) == verl_plugin._dual_clip_c({}) == c
    assert verl_plugin._dual_clip_c({"clip_ratio_c": 3.0}) == 3.0


def test_cpu_profile_serves_a_steps_requests_as_one_batch(compose):
    """config/verl-cpu.yaml's command composes with verl's ppo_trainer config, and bandpo.verl.cpu's rollout server
    gets a step's request count (prompts x samples) as its batch size from the rollout's engine_kwargs.hf."""
    import yaml
    from omegaconf import OmegaConf

    from bandpo.verl.hf_rollout import server_options

    path = ROOT / "config" / "verl-cpu.yaml"
    profile = {"val_every": 0, **yaml.safe_load(open(path, encoding="utf-8"))["train"]}  # not gpu.yaml's validation
    run = sweep_run(**profile)
    cfg = compose(command.overrides(run))
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.name == "hf" and server_options(rollout) == {"max_batch": 32 * 8}
    assert "engine_kwargs.hf" not in " ".join(command.overrides(sweep_run()))  # a vllm run has no such key
    # with held-out measurements a validation pass (problems x val_k) is gathered whole before it is split
    held_out = compose(command.overrides(sweep_run(**{**profile, "val_every": 4})))
    assert server_options(held_out.actor_rollout_ref.rollout) == {"max_batch": 32 * 8, "gather_passes": True}
    with pytest.raises(ValueError, match="unknown engine_kwargs.hf"):
        server_options(OmegaConf.create({"engine_kwargs": {"hf": {"max_batchs": 4}}}))


def test_verls_trl_check_asks_for_the_value_head_class_it_patches():
    """verl 0.9.1 patches TRL's AutoModelForCausalLMWithValueHead whenever TRL is installed; TRL 1.16 (the dev extra)
    ships no such class, so verl's check answers, through the plugin, whether TRL ships it (module docstring)."""
    import verl.models.transformers.monkey_patch as verl_monkey_patch
    import verl.utils.import_utils as verl_import_utils

    trl = pytest.importorskip("trl")
    ships = hasattr(trl, "AutoModelForCausalLMWithValueHead")
    assert verl_import_utils.is_trl_available() is ships and verl_monkey_patch.is_trl_available() is ships
    assert trl.__version__ != "1.16.0" or not ships  # the version whose missing class broke verl's actors


def test_a_ray_worker_may_import_the_hf_rollout_first():
    """A Ray worker imports the rollout actor's module (bandpo.verl.hf_rollout) before anything else; its `import
    verl` loads $VERL_USE_EXTERNAL_MODULES (bandpo.verl.cpu among them) while hf_rollout is half made: the import must
    still end with the "hf" rollout registered."""
    code = ("import bandpo.verl.hf_rollout as h\nfrom verl.workers.rollout.base import get_rollout_class\n"
            "print(get_rollout_class('hf') is h.HFServerAdapter)\n")  # fmt: skip
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "bandpo.verl.plugin,bandpo.verl.cpu"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == "True"


def killed_run(folder: Path, saved: list[int], logged: list[int]) -> Path:
    """A run folder as a killed verl start leaves it: checkpoints of ``saved`` steps (the tracker at the last),
    records of ``logged`` steps in the current JSONL log."""
    ckpts = folder / "checkpoints"
    for step in saved:
        (ckpts / f"global_step_{step}" / "actor").mkdir(parents=True)
    if saved:
        (ckpts / launch.TRACKER).write_text(f"{saved[-1]}\n")
    (folder / launch.METRICS_LOG).write_text("".join(json.dumps({"step": s, "data": {}}) + "\n" for s in logged))
    return folder


def test_a_killed_verl_start_resumes_after_its_last_logged_step(tmp_path):
    """verl saves a step's checkpoint before it validates and logs the step: a checkpoint without a record goes,
    the tracker falls back to the last logged one, and the earlier start's log is kept as a part."""
    run = killed_run(tmp_path / "run", saved=[3, 4], logged=[0, 1, 2, 3])
    assert launch.prepare_resume(run) == 3
    assert (run / "checkpoints" / launch.TRACKER).read_text() == "3\n"
    assert not (run / "checkpoints" / "global_step_4").exists() and (run / "checkpoints" / "global_step_3").exists()
    assert launch.metrics_logs(run) == [run / f"{launch.METRICS_LOG}.0"]  # verl truncates the current log: moved
    (run / launch.METRICS_LOG).write_text(json.dumps({"step": 4, "data": {}}) + "\n")  # the next start's log
    assert launch.prepare_resume(run) == 3 and launch.metrics_logs(run)[-1].name == f"{launch.METRICS_LOG}.1"
    resumed = sweep_run(output_dir=str(run), val_every=4)
    assert command.resuming(resumed) and "trainer.val_before_train=false" in command.overrides(resumed)
    # no logged checkpoint left: a fresh start, without the earlier starts' logs
    fresh = killed_run(tmp_path / "fresh", saved=[1], logged=[0])
    assert launch.prepare_resume(fresh) is None
    assert launch.metrics_logs(fresh) == [] and not (fresh / "checkpoints" / launch.TRACKER).exists()
    assert not command.resuming(sweep_run(output_dir=str(fresh)))
    assert "trainer.val_before_train=true" in command.overrides(sweep_run(output_dir=str(fresh), val_every=4))
    assert launch.prepare_resume(tmp_path / "empty") is None  # a folder never started
    # verl kept one checkpoint (max_actor_ckpt_to_keep=1): the earlier steps' folders hold no actor, only data.pt
    kept = killed_run(tmp_path / "kept", saved=[2, 3], logged=[0, 1, 2])
    shutil.rmtree(kept / "checkpoints" / "global_step_2" / "actor")
    assert launch.prepare_resume(kept) is None and launch.metrics_logs(kept) == []


def test_held_out_measurement_is_verls_validation_sampled_as_the_rollouts(tmp_path):
    o = dict(x.split("=", 1) for x in command.overrides(sweep_run(val_every=4, val_k=8, temperature=0.7)))
    assert o["trainer.test_freq"] == "4" and o["actor_rollout_ref.rollout.val_kwargs.n"] == "8"
    assert o["actor_rollout_ref.rollout.val_kwargs.temperature"] == "0.7"
    assert o["actor_rollout_ref.rollout.val_kwargs.do_sample"] == "true"
    off = dict(x.split("=", 1) for x in command.overrides(sweep_run(val_every=0)))
    assert off["trainer.test_freq"] == "0" and off["trainer.val_before_train"] == "false"
    with pytest.raises(ValueError, match="val_every: must be an integer >= 0"):
        sweep_run(val_every=-1).validate()


def test_a_stopped_launch_stops_verl(tmp_path):
    """``python -m bandpo.verl.launch`` runs verl as its child: SIGTERM to the launcher (a stopped Snakemake job)
    reaches verl's trainer, which stops, and no --done is written."""
    import signal
    import time

    marker = tmp_path / "verl.pid"
    fake = tmp_path / "fake-python"  # stands for the run's python: records its pid, then trains for a minute
    fake.write_text(f"#!/bin/sh\necho $$ > {marker}\nexec sleep 60\n")
    fake.chmod(0o755)
    run = sweep_run(output_dir=str(tmp_path / "run"), python=str(fake))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(command.record(run), default=str))
    done = tmp_path / "train_done.json"
    proc = subprocess.Popen([sys.executable, "-m", "bandpo.verl.launch", "--spec", str(spec), "--done", str(done)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(marker.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) != 0 and not done.exists()
    with pytest.raises(ProcessLookupError):
        for _ in range(50):  # the child is gone (reaped by the launcher)
            os.kill(child, 0)
            time.sleep(0.1)
