"""verl's own policy losses as methods (bandpo.verl.losses): parity with verl's registered functions called
directly, the parameters reach verl, the stopped-token diagnostic equals the clip fractions of the bounds methods,
the verl command runs verl's own loss_mode, and ``python -m bandpo.methods`` lists everything."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

pytest.importorskip("verl.trainer.ppo.core_algos")

from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, get_policy_loss_fn  # noqa: E402
from verl.workers.config import ActorConfig, PolicyLossConfig  # noqa: E402

from bandpo import methods
from bandpo.methods.__main__ import describe, main  # noqa: E402
from bandpo.verl import command  # noqa: E402
from bandpo.verl import losses as verl_losses  # noqa: E402
from bandpo.verl import plugin as verl_plugin  # noqa: E402
from bandpo.verl.spec import VerlRun  # noqa: E402

torch.set_num_threads(1)

VERL_METHODS = ["clip_cov", "dppo_kl", "dppo_tv", "dro", "geo_mean", "gpg", "kl_cov", "sapo"]
# Non-default parameters (they must reach verl), chosen so that every mask / selection / clip is active on the batch.
PARAMS = {
    "dppo_tv": {"clip_ratio_low": 0.1, "clip_ratio_high": 0.15, "clip_ratio_c": 5.0},
    "dppo_kl": {"clip_ratio_low": 0.05, "clip_ratio_high": 0.08},
    "clip_cov": {
        "clip_ratio_low": 0.25,
        "clip_ratio_high": 0.3,
        "clip_cov_ratio": 0.1,
        "clip_cov_lb": 0.05,
        "clip_cov_ub": 6.0,
    },  # fmt: skip
    "kl_cov": {"kl_cov_ratio": 0.1, "ppo_kl_coef": 0.5},
    "sapo": {"tau_pos": 1.5, "tau_neg": 2.0},
    "geo_mean": {"clip_ratio_low": 0.3, "clip_ratio_high": 0.35},
    "gpg": {},
    "dro": {"dro_beta": 0.3},
}
# The same knobs written directly as verl's config (not through the adapter): key -> where verl reads it.
ACTOR_KEYS = {"clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "tau_pos", "tau_neg"}
DUAL_CLIP_C = 10.0
INFOS = ({}, {"dp_size": 2, "batch_num_tokens": 70, "global_batch_size": 11, "loss_scale_factor": 13})


def verl_config(method: str, mode: str, params: dict, **info) -> ActorConfig:
    """verl's ActorConfig for ``method``, written out by hand from verl's own field names."""
    actor = {k: v for k, v in params.items() if k in ACTOR_KEYS}
    actor.setdefault("clip_ratio_c", DUAL_CLIP_C)  # the shared dual clip c, as a verl run gets it
    policy_loss = {k: v for k, v in params.items() if k not in ACTOR_KEYS}
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=mode,
                       policy_loss=PolicyLossConfig(loss_mode=method, **policy_loss), global_batch_info=dict(info),
                       **actor)  # fmt: skip


def random_batch(seed: int = 0, b: int = 8, t: int = 12, probabilities: bool = True):
    """Old log-probs over (0.02, 1), new ones spread around them (ratios well outside [0.8, 1.2], probabilities
    kept <= 1 where ``probabilities``), per-sequence advantages of both signs, padding, one empty sequence."""
    g = torch.Generator().manual_seed(seed)
    old = -4 * torch.rand(b, t, generator=g)
    new = old + 0.7 * torch.randn(b, t, generator=g)
    if probabilities:
        new = new.clamp(max=-1e-4)
    adv = torch.randn(b, 1, generator=g).expand(b, t).contiguous()
    adv[0] = adv[0].abs() + 0.1
    adv[2] = -adv[2].abs() - 0.1
    mask = torch.rand(b, t, generator=g) > 0.25
    mask[1] = False  # a fully padded sequence
    weights = 0.5 + torch.rand(b, t, generator=g)
    new = torch.where(mask, new, new + 5.0)  # padding holds garbage (finite), as verl's batches may
    return old, new, adv, mask, weights


def ours(method, params, mode, old, new, adv, mask, weights, info, seed=0):
    """The method exactly as the local trainer calls it: resolved once, then ResolvedMethod.loss."""
    resolved = methods.resolve(method, params, {"loss_agg_mode": mode, "dual_clip_c": DUAL_CLIP_C})
    lp = new.clone().requires_grad_()
    torch.manual_seed(seed)  # clip_cov draws its tokens with torch.randperm
    loss, metrics = resolved.loss(old, lp, adv, mask, rollout_is_weights=weights, global_batch_info=info)
    (grad,) = torch.autograd.grad(loss, lp)
    return loss.detach(), grad, metrics


def theirs(method, params, mode, old, new, adv, mask, weights, info, seed=0):
    """verl's registered function, called directly with verl's own config."""
    lp = new.clone().requires_grad_()
    torch.manual_seed(seed)
    loss, metrics = POLICY_LOSS_REGISTRY[method](old, lp, adv, mask, mode, verl_config(method, mode, params, **info),
                                                 weights)  # fmt: skip
    (grad,) = torch.autograd.grad(loss, lp)
    return loss.detach(), grad, metrics


# ----------------------------------------------------------------------------------------------------------------
# Registration


def test_every_verl_loss_but_the_documented_ones_is_a_method():
    assert methods.list_methods("verl") == VERL_METHODS
    adapted = {methods.get_method(m).config_cls.verl_loss_mode for m in VERL_METHODS}
    # vanilla = grpo / clip_higher (tests/unit/test_verl_plugin.py), gspo / cispo: own implementations, bypass_mode:
    # a rollout-correction wrapper; bandpo.* are the suite's own
    skipped = {"vanilla", "gspo", "cispo", "bypass_mode"}
    assert set(POLICY_LOSS_REGISTRY) - {n for n in POLICY_LOSS_REGISTRY if n.startswith("bandpo.")} == adapted | skipped
    assert {"cispo", "gspo"} <= set(methods.list_methods("loss"))  # the suite's own implementations stay


def test_defaults_are_verls():
    actor, policy_loss = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1), PolicyLossConfig()
    for method in VERL_METHODS:
        cfg = methods.make_config(method)
        for f in dataclasses.fields(cfg):
            value = getattr(cfg, f.name)
            if f.name == "clip_ratio_c":
                assert value is None  # the shared dual clip c (DPPO's truncated-IS cap)
            elif f.name == "dro_beta":
                assert policy_loss.dro_beta is None and value == 1.0  # verl has no default: the placeholder
            else:
                assert value == getattr(policy_loss if f.name in verl_losses.POLICY_LOSS_KEYS else actor,
                                        f.name), (method, f.name)  # fmt: skip


def test_parameters_are_validated():
    with pytest.raises(ValueError, match="dppo_kl.*clip_ratio_low"):
        methods.make_config("dppo_kl", {"clip_ratio_low": 0.0})
    with pytest.raises(ValueError, match="unknown parameter"):
        methods.make_config("sapo", {"tau": 1.0})
    with pytest.raises(ValueError, match="dro_beta"):
        methods.make_config("dro", {"dro_beta": -1.0})


# ----------------------------------------------------------------------------------------------------------------
# Parity with verl's registered functions


@pytest.mark.parametrize("method", VERL_METHODS)
def test_loss_and_gradient_equal_verls_in_every_mode(method):
    """Our method through ResolvedMethod.loss (as the trainer calls it) against verl's function called directly on
    the same tensors: bitwise the same loss and d loss / d log_prob, in every aggregation mode, with and without
    rollout weights and data-parallel normalisation."""
    old, new, adv, mask, weights = random_batch()
    params = PARAMS[method]
    for mode in methods.AGG_MODES:
        for info in INFOS:
            for w in (None, weights):
                a_loss, a_grad, a_metrics = ours(method, params, mode, old, new, adv, mask, w, info)
                b_loss, b_grad, b_metrics = theirs(method, params, mode, old, new, adv, mask, w, info)
                assert torch.equal(a_loss, b_loss), (mode, info, w is None)
                assert torch.equal(a_grad, b_grad), (mode, info, w is None)
                for k, v in b_metrics.items():
                    assert float(a_metrics[f"verl/{k.removeprefix('actor/')}"]) == pytest.approx(v, rel=1e-6), k
    assert torch.isfinite(a_loss) and a_grad[mask].abs().sum() > 0


@pytest.mark.parametrize("method", VERL_METHODS)
def test_the_batch_exercises_every_mask(method):
    """The parity batch is not trivial: the masking / clipping / selection of each loss is active on some tokens,
    not on all, and a token's gradient is 0 exactly where the loss stops it."""
    old, new, adv, mask, _ = random_batch()
    _, grad, metrics = ours(method, PARAMS[method], "token-mean", old, new, adv, mask, None, {})
    stopped = float(metrics["clipfrac"])
    if method in ("dppo_tv", "dppo_kl", "clip_cov", "geo_mean"):
        assert 0.0 < stopped < 1.0
        assert float(metrics["clipfrac_upper"]) > 0 and float(metrics["clipfrac_lower"]) > 0
    else:  # smooth losses: nothing is stopped
        assert stopped == 0.0
    if method in ("dppo_tv", "dppo_kl"):  # verl counts exactly its masked tokens
        assert stopped == pytest.approx(float(metrics["verl/pg_clipfrac"]), abs=1e-7)
    if method in ("clip_cov", "kl_cov"):  # the covariance selection picked some tokens: it changes the loss
        off = {**PARAMS[method], f"{method}_ratio": 1e-6}
        assert not torch.equal(
            ours(method, PARAMS[method], "token-mean", old, new, adv, mask, None, {})[0],
            ours(method, off, "token-mean", old, new, adv, mask, None, {})[0],
        )


@pytest.mark.parametrize("method", [m for m in VERL_METHODS if PARAMS[m]])
def test_a_wrong_parameter_changes_the_loss(method):
    """The parity test can fail: verl with its defaults (or one parameter off) gives another loss than ours."""
    old, new, adv, mask, weights = random_batch()
    params = PARAMS[method]
    a_loss, a_grad, _ = ours(method, params, "token-mean", old, new, adv, mask, weights, {})
    for name, value in params.items():
        wrong = {**params, name: {"clip_cov_lb": 2.0, "clip_cov_ub": 0.5}.get(name, value * 0.3)}
        b_loss, b_grad, _ = theirs(method, wrong, "token-mean", old, new, adv, mask, weights, {})
        assert not (torch.equal(a_loss, b_loss) and torch.equal(a_grad, b_grad)), name


def test_a_wrong_aggregation_changes_the_loss():
    old, new, adv, mask, weights = random_batch()
    a_loss, _, _ = ours("dppo_kl", PARAMS["dppo_kl"], "token-mean", old, new, adv, mask, weights, {})
    b_loss, _, _ = theirs("dppo_kl", PARAMS["dppo_kl"], "seq-mean-token-mean", old, new, adv, mask, weights, {})
    assert not torch.equal(a_loss, b_loss)


def test_dppo_truncation_cap_is_the_shared_dual_clip_unless_set():
    """clip_ratio_c None: the shared dual clip c (10 here, verl's clip_ratio_c in a VerlRun); verl's fallback 20 when
    the dual clip is off; an explicit value wins."""
    old, new, adv, mask, _ = random_batch(probabilities=False)
    new = new.clone()
    new[0, :3] = old[0, :3] + 2.7  # r ~ 15: truncated at 10, not at 20
    settings = methods.SurrogateConfig(dual_clip_c=DUAL_CLIP_C)
    cfg = methods.make_config("dppo_tv", {"clip_ratio_high": 1.0})
    assert verl_losses.verl_actor_config(cfg, settings, {}).clip_ratio_c == DUAL_CLIP_C
    assert verl_losses.verl_actor_config(cfg, methods.SurrogateConfig(dual_clip_c=None), {}).clip_ratio_c == 20.0
    explicit = methods.make_config("dppo_tv", {"clip_ratio_c": 4.0})
    assert verl_losses.verl_actor_config(explicit, settings, {}).clip_ratio_c == 4.0
    loss10, _, _ = ours("dppo_tv", {"clip_ratio_high": 1.0}, "token-mean", old, new, adv, mask, None, {})
    loss20, _, _ = theirs("dppo_tv", {"clip_ratio_high": 1.0, "clip_ratio_c": 20.0}, "token-mean", old, new, adv,
                          mask, None, {})  # fmt: skip
    assert not torch.equal(loss10, loss20)


def test_no_grad_call_returns_the_same_loss_and_diagnostics():
    old, new, adv, mask, _ = random_batch()
    with torch.no_grad():
        loss, metrics = methods.compute_loss("dppo_kl", old, new, adv, mask, PARAMS["dppo_kl"])
    ref, ref_metrics = methods.compute_loss("dppo_kl", old, new.clone().requires_grad_(), adv, mask, PARAMS["dppo_kl"])
    assert not loss.requires_grad and torch.equal(loss, ref.detach())
    assert {k: float(v) for k, v in metrics.items()} == {k: float(v) for k, v in ref_metrics.items()}


# ----------------------------------------------------------------------------------------------------------------
# Stopped tokens = the clip fractions of the bounds methods


@pytest.mark.parametrize("method", ["grpo", "clip_higher", "dcpo", "bandpo"])
@pytest.mark.parametrize("dual_clip_c", [None, DUAL_CLIP_C])
def test_stopped_tokens_are_the_clip_fractions_of_bounds_methods(method, dual_clip_c):
    old, new, adv, mask, _ = random_batch(seed=3, probabilities=False)
    new = new.clone()
    new[2, :4] = old[2, :4] + 2.6  # A < 0 and r ~ 13 > c: the dual clip binds
    settings = {"loss_agg_mode": "seq-mean-token-mean", "dual_clip_c": dual_clip_c}
    lp = new.clone().requires_grad_()
    loss, clip = methods.compute_loss(method, old, lp, adv, mask, None, settings)
    stopped = methods.stopped_diagnostics(methods.loss_grad_wrt_log_prob(loss, lp), adv, old, mask)
    assert float(clip["clipfrac_upper"]) > 0 and float(clip["clipfrac_lower"]) > 0
    assert float(stopped["stopped_frac_pos"]) == pytest.approx(float(clip["clipfrac_upper"]), abs=1e-7)
    lower = float(clip["clipfrac_lower"]) + float(clip["clipfrac_dual"])
    assert (float(clip["clipfrac_dual"]) > 0) == (dual_clip_c is not None)
    assert float(stopped["stopped_frac_neg"]) == pytest.approx(lower, abs=1e-7)
    if dual_clip_c is None:
        for label in methods.BUCKET_LABELS:
            assert torch.equal(stopped[f"stopped_frac_pos/{label}"], clip[f"clipfrac_upper/{label}"]), label
            assert torch.equal(stopped[f"stopped_frac_neg/{label}"], clip[f"clipfrac_lower/{label}"]), label


def test_stopped_tokens_ignore_zero_advantages_and_padding():
    grad = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    adv = torch.tensor([[1.0, 0.0, 1.0, -1.0]])
    mask = torch.tensor([[True, True, True, False]])
    out = methods.stopped_diagnostics(grad, adv, torch.log(torch.full((1, 4), 0.9)), mask)
    assert float(out["stopped_frac_pos"]) == pytest.approx(1 / 3) and float(out["stopped_frac_neg"]) == 0.0
    assert float(out["stopped_frac_pos/p0.8-1.0"]) == pytest.approx(1 / 3)


# ----------------------------------------------------------------------------------------------------------------
# The verl path: verl's own loss_mode


def verl_run(method: str, params: dict) -> VerlRun:
    return VerlRun(model="m", method=method, params=params, train_files="t.parquet", val_files="v.parquet",
                   output_dir="/runs/x")  # fmt: skip


def test_dppo_kl_runs_as_verls_own_loss_mode_with_its_thresholds():
    run = verl_run("dppo_kl", {"clip_ratio_low": 0.05, "clip_ratio_high": 0.08})
    o = dict(x.split("=", 1) for x in command.overrides(run))
    assert o["actor_rollout_ref.actor.policy_loss.loss_mode"] == "'dppo_kl'"
    assert o["actor_rollout_ref.actor.clip_ratio_low"] == "0.05"
    assert o["actor_rollout_ref.actor.clip_ratio_high"] == "0.08"
    assert o["actor_rollout_ref.actor.clip_ratio_c"] == repr(run.dual_clip_c)  # the truncation cap = the shared c
    assert verl_plugin.verl_loss_name("dppo_kl") == "dppo_kl"
    assert "bandpo.dppo_kl" not in verl_plugin.registered_names()
    assert get_policy_loss_fn(command.loss_mode(run)) is POLICY_LOSS_REGISTRY["dppo_kl"]
    with pytest.raises(ValueError, match="verl's own loss"):
        verl_plugin.verl_policy_loss("dppo_kl")


@pytest.mark.parametrize("method", VERL_METHODS)
def test_every_verl_method_maps_to_verls_keys(method):
    run = verl_run(method, PARAMS[method])
    o = dict(x.split("=", 1) for x in command.overrides(run))
    assert o["actor_rollout_ref.actor.policy_loss.loss_mode"] == f"'{method}'"
    for name, value in PARAMS[method].items():
        where = "" if name in ACTOR_KEYS else "policy_loss."
        assert o[f"actor_rollout_ref.actor.{where}{name}"] == repr(value), name
    assert command.loss_mode(verl_run("grpo", {})) == "bandpo.grpo"  # the suite's own methods are unchanged


def test_verl_overrides_compose_in_verls_config():
    import os

    import verl
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        for method in ("dppo_kl", "clip_cov", "sapo", "dro"):
            cfg = compose("ppo_trainer", overrides=command.overrides(verl_run(method, PARAMS[method])))
            actor = cfg.actor_rollout_ref.actor
            assert actor.policy_loss.loss_mode == method
            for name, value in PARAMS[method].items():
                node = actor if name in ACTOR_KEYS else actor.policy_loss
                assert node[name] == value, (method, name)


# ----------------------------------------------------------------------------------------------------------------
# python -m bandpo.methods


def test_methods_listing(capsys):
    assert main(["--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(methods.list_methods())
    assert {r["kind"] for r in rows.values()} == {"bounds", "loss", "verl loss"}
    assert (
        rows["dppo_kl"]["kind"] == "verl loss" and rows["grpo"]["kind"] == "bounds" and rows["cispo"]["kind"] == "loss"
    )
    assert rows["dppo_kl"]["params"] == {"clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "clip_ratio_c": None}
    assert rows["dppo_kl"]["source"] == "verl.trainer.ppo.core_algos.POLICY_LOSS_REGISTRY['dppo_kl']"
    assert rows["bandpo"]["source"] == "bandpo.methods.builtin.bandpo_bounds"
    assert rows["bandpo"]["params"]["delta"] == 0.05
    assert describe("gpg")["params"] == {}
    assert main([]) == 0
    table = capsys.readouterr().out
    assert all(name in table for name in rows) and "verl loss" in table
