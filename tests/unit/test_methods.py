"""Method registry, configs, bounds, the shared PPO surrogate and its diagnostics (bandpo.methods)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bandpo import methods
from bandpo.methods import BUCKET_LABELS, aggregate_loss, band, compute_bounds, compute_loss, ppo_surrogate, registry
from bandpo.methods import builtin as builtin_module

torch.set_num_threads(1)

BUILT_IN = ["bandpo", "bandpo_upper", "cispo", "clip_higher", "dcpo", "grpo", "gspo"]


def logp(*ps: float) -> torch.Tensor:
    """A (1, n) float64 old_log_prob row from probabilities."""
    return torch.tensor([ps], dtype=torch.float64).log()


def full_mask(t: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(t, dtype=torch.bool)


# ----------------------------------------------------------------------------------------------------------------
# Registry and configs


def test_registry_lists_builtins_with_kinds():
    assert set(BUILT_IN) <= set(methods.list_methods())
    assert set(methods.list_methods("bounds")) >= {"grpo", "clip_higher", "dcpo", "bandpo", "bandpo_upper"}
    assert set(methods.list_methods("loss")) >= {"cispo", "gspo"}
    assert all(methods.get_method(n).description for n in BUILT_IN)
    with pytest.raises(ValueError, match="did you mean 'bandpo'"):
        methods.get_method("bandp")
    with pytest.raises(ValueError, match="kind"):
        methods.list_methods("other")


def test_the_built_in_methods_load_by_name_without_importing_verl():
    """The registry loads the modules of BUILTIN_METHOD_MODULES on its first look-up: verl's losses
    (bandpo.verl.losses) are methods of every process that looks a method up, and neither the registry nor they
    import verl; a method of a user module cannot take a built-in name, whichever is registered first."""
    from bandpo.methods import registry

    assert registry.BUILTIN_METHOD_MODULES == (
        "bandpo.methods.builtin",
        "bandpo.methods.trl_rules",
        "bandpo.methods.rollout_correction",
        "bandpo.verl.losses",
    )
    code = (
        "import sys\n"
        "from bandpo import methods\n"
        "loaded = 'bandpo.verl.losses' in sys.modules\n"
        "from bandpo.methods import GRPOConfig, register_bounds\n"
        "try:\n"
        "    register_bounds('gpg', config=GRPOConfig)(lambda *a: None)\n"
        "except ValueError as e:\n"
        "    print('already registered (by bandpo.verl.losses.verl_gpg_loss' in str(e))\n"
        "print(loaded, methods.list_methods('verl'), 'verl' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "True"
    assert out[1] == "False " + str(methods.list_methods("verl")) + " False"
    assert len(methods.list_methods("verl")) == 8


def test_unknown_method_asks_for_the_method_module(monkeypatch):
    """An unknown name lists the registered methods and asks whether the module that defines it was left out."""
    from bandpo.methods import registry  # the record of loaded modules lives there

    monkeypatch.setattr(registry, "LOADED_MODULES", {})
    with pytest.raises(ValueError) as err:
        methods.get_method("grpoo")
    assert str(err.value).startswith("unknown method 'grpoo' (did you mean 'grpo'?) (registered: bandpo, ")
    assert str(err.value).endswith(
        "; a method of your own module? list the module in the config's method_modules (or pass --method-module, "
        "or set $BANDPO_METHOD_MODULES)"
    )
    assert "(registered: " + ", ".join(methods.list_methods()) + ")" in str(err.value)
    # with modules loaded, the message names them: the method is not in any of them
    monkeypatch.setattr(registry, "LOADED_MODULES", {"/somewhere/my_methods.py": None, "pkg.more": None})
    with pytest.raises(ValueError, match=r"none of the loaded method modules \(/somewhere/my_methods.py, pkg.more\)"):
        methods.make_config("no_such_clip")


def test_default_configs_are_the_paper_settings():
    assert methods.make_config("grpo").to_dict() == {"eps_low": 0.2, "eps_high": 0.2}
    assert methods.make_config("clip_higher").to_dict() == {"eps_low": 0.2, "eps_high": 0.28}
    assert methods.make_config("dcpo").to_dict() == {"eps_low": 0.16, "eps_high": 0.20, "cap": 10.0}
    assert methods.make_config("bandpo").to_dict() == {
        "divergence": "kl",
        "delta": 0.05,
        "cap": 10.0,
        "relax": False,
        "relax_eps_low": 0.2,
        "relax_eps_high": 0.28,  # the paper's relaxed runs: union with Clip-Higher's [0.8, 1.28]
    }
    assert methods.make_config("gspo").to_dict() == {"eps_low": 3e-4, "eps_high": 4e-4}
    s = methods.SurrogateConfig()
    assert (s.loss_agg_mode, s.dual_clip_c, s.log_ratio_clamp) == ("seq-mean-token-mean", 10.0, 20.0)


@pytest.mark.parametrize(
    ("method", "params", "match"),
    [
        ("bandpo", {"delt": 0.1}, "unknown parameter.*did you mean 'delta'"),
        ("bandpo", {"delta": 0.0}, "'delta' = 0.0 must be > 0"),
        ("bandpo", {"delta": float("nan")}, "'delta' must be finite"),
        ("bandpo", {"delta": "0.05"}, "'delta' must be float"),
        ("bandpo", {"divergence": "kll"}, "not registered; valid: .*kl"),
        ("bandpo", {"cap": 1.0}, "'cap' = 1.0 must be > 1"),
        ("bandpo", {"relax": 1}, "'relax' must be bool"),
        ("grpo", {"eps_low": True}, "'eps_low' must be float"),
        ("grpo", {"eps_low": 1.5}, "'eps_low' = 1.5 must be in"),
        ("dcpo", {"eps_high": -0.1}, "'eps_high' = -0.1 must be > 0"),
        ("gspo", {"eps_low": None}, "must not be None"),
    ],
)
def test_bad_params_raise_clear_errors(method, params, match):
    with pytest.raises(ValueError, match=match):
        methods.make_config(method, params)


def test_config_coercion_and_instances():
    cfg = methods.make_config("bandpo", {"delta": 1, "cap": None, "divergence": "chi2"})
    assert cfg.delta == 1.0 and isinstance(cfg.delta, float) and cfg.cap is None
    assert methods.make_config("bandpo", cfg) is cfg
    with pytest.raises(TypeError, match="takes BandPOConfig"):
        methods.make_config("bandpo", methods.GRPOConfig())
    with pytest.raises(TypeError, match="mapping"):
        methods.make_config("grpo", [("eps_low", 0.1)])
    with pytest.raises(ValueError, match="loss_agg_mode"):
        methods.SurrogateConfig(loss_agg_mode="mean")
    with pytest.raises(ValueError, match="dual_clip_c"):
        methods.SurrogateConfig(dual_clip_c=1.0)


def test_user_method_is_one_function_and_one_config(monkeypatch):
    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))
    monkeypatch.setattr(registry, "_REGISTRATION_HOOKS", [])  # keep it out of verl's registry (see test_verl_plugin)

    from dataclasses import dataclass

    @dataclass(frozen=True)
    class HalfConfig(methods.MethodConfig):
        eps: float = 0.1

        def validate(self) -> None:
            self.require(0.0 < self.eps < 1.0, "eps", "must be in (0, 1)")

    @methods.register_bounds("half_clip", config=HalfConfig)
    def half_clip(old_log_prob, response_mask, params):
        """Fixed clip of half-width eps."""
        return methods.constant_bounds(old_log_prob, response_mask, 1 - params.eps, 1 + params.eps)

    assert "half_clip" in methods.list_methods("bounds")
    old = torch.zeros(2, 3)
    lo, hi = compute_bounds("half_clip", old, full_mask(old), {"eps": 0.25})
    assert torch.all(lo == 0.75) and torch.all(hi == 1.25)
    with pytest.raises(ValueError, match="method 'half_clip'.*'eps' = 2.0 must be in"):
        compute_bounds("half_clip", old, full_mask(old), {"eps": 2.0})
    with pytest.raises(ValueError, match="method name"):
        methods.register_bounds("bad.name", config=HalfConfig)
    # no label_fields: a leaderboard shows only what differs from the defaults
    assert HalfConfig().label() == "" and HalfConfig(eps=0.3).label() == "eps=0.3"


def test_config_labels_name_the_variant():
    """Leaderboard labels: the label_fields at any value, then the other non-default parameters, in that order."""
    assert methods.make_config("grpo").label() == "eps_low=0.2, eps_high=0.2"
    assert methods.make_config("clip_higher").label() == "eps_low=0.2, eps_high=0.28"
    assert methods.make_config("bandpo").label() == "divergence=kl, delta=0.05"
    relaxed = methods.make_config("bandpo", {"divergence": "tv", "relax": True, "cap": None})
    assert relaxed.label() == "divergence=tv, delta=0.05, cap=None, relax=True"
    # the relaxation's interval shows only when it acts: a run of the old default (0.2) without relax keeps its label
    old_default = {"divergence": "kl", "delta": 0.05, "relax": False, "relax_eps_high": 0.2}
    assert methods.make_config("bandpo", old_default).label() == "divergence=kl, delta=0.05"
    assert methods.make_config("bandpo", {**old_default, "relax": True}).label() == (
        "divergence=kl, delta=0.05, relax=True, relax_eps_high=0.2"
    )


# ----------------------------------------------------------------------------------------------------------------
# Bounds against hand-computed values


def test_fixed_clip_bounds_and_padding():
    old = logp(0.1, 0.5, 0.9)
    mask = torch.tensor([[True, True, False]])
    lo, hi = compute_bounds("grpo", old, mask)
    assert lo.tolist() == [[0.8, 0.8, 1.0]] and hi.tolist() == [[1.2, 1.2, 1.0]]  # padding: [1, 1]
    lo, hi = compute_bounds("clip_higher", old, full_mask(old))
    torch.testing.assert_close(hi, torch.full_like(hi, 1.28))
    torch.testing.assert_close(lo, torch.full_like(lo, 0.8))


def test_dcpo_bounds_hand_computed():
    # r_lo = 1/2 + 1/2 sqrt(max(1 - 4 eps_low / p, 0)), r_hi = min(1/2 + 1/2 sqrt(1 + 4 eps_high / p), 10)
    old = logp(1.0, 0.8, 0.5, 0.01, 0.001)
    lo, hi = compute_bounds("dcpo", old, full_mask(old))
    expected_lo = [0.8, 0.5 + 0.5 * math.sqrt(0.2), 0.5, 0.5, 0.5]
    expected_hi = [0.5 + 0.5 * math.sqrt(1.8), 0.5 + 0.5 * math.sqrt(2.0), 0.5 + 0.5 * math.sqrt(2.6), 5.0, 10.0]
    torch.testing.assert_close(lo[0], torch.tensor(expected_lo, dtype=torch.float64))
    torch.testing.assert_close(hi[0], torch.tensor(expected_hi, dtype=torch.float64))
    _, hi_nocap = compute_bounds("dcpo", old, full_mask(old), {"cap": None})
    assert hi_nocap[0, -1].item() == pytest.approx(0.5 + 0.5 * math.sqrt(801.0))


@pytest.mark.parametrize("params", [{}, {"divergence": "tv", "delta": 0.1, "cap": None, "eps_low": 0.3}])
def test_bandpo_upper_is_bandpos_upper_bound_with_a_fixed_lower(params):
    """bandpo_upper: Band's r_hi exactly as bandpo computes it (same divergence / delta / cap), and 1 - eps_low below
    on every valid token (padding: [1, 1])."""
    assert methods.make_config("bandpo_upper").to_dict() == {"divergence": "kl", "delta": 0.05, "cap": 10.0,
                                                             "eps_low": 0.2}  # fmt: skip
    old = logp(1.0, 0.9, 0.5, 0.08, 0.01, 1e-4, 1e-9)
    mask = torch.tensor([[True, True, True, True, True, True, False]])
    band = {k: v for k, v in params.items() if k != "eps_low"}
    band_lo, band_hi = compute_bounds("bandpo", old, mask, band)
    lo, hi = compute_bounds("bandpo_upper", old, mask, params)
    assert torch.equal(hi, band_hi)
    eps_low = params.get("eps_low", 0.2)
    assert torch.equal(lo[mask], torch.full((6,), 1.0 - eps_low, dtype=lo.dtype)) and lo[0, -1] == hi[0, -1] == 1.0
    assert (band_lo[mask][3:] < lo[mask][3:]).all()  # rare tokens: Band's lower bound is wider, this one is not
    assert (
        methods.make_config("bandpo_upper", params)
        .label()
        .startswith(f"divergence={params.get('divergence', 'kl')}, delta={params.get('delta', 0.05)}")
    )
    with pytest.raises(ValueError, match="eps_low"):
        methods.make_config("bandpo_upper", {"eps_low": 0.0})


# Reference values of the Band operator, delta = 0.05, before the cap (the roots of g_f(p, r) = delta:
# bandpo/methods/band.py).
BAND_REF = {
    "kl": {0.01: (0.00249739, 7.80985), 0.08: (0.261696, 2.41055), 0.5: (0.691516, 1.30848), 0.9: (0.866579, 1.07636)},
    "tv": {0.01: (0.0, 6.0), 0.08: (0.375, 1.625), 0.5: (0.9, 1.1), 0.9: (0.944444, 1.05556)},
    "chi2": {0.01: (0.0, 3.22486), 0.08: (0.241712, 1.75829), 0.5: (0.776393, 1.22361), 0.9: (0.925464, 1.07454)},
}


@pytest.mark.parametrize("divergence", ["kl", "tv", "chi2"])
def test_bandpo_bounds_reference_values(divergence):
    ref = BAND_REF[divergence]
    old = logp(*ref)
    lo, hi = compute_bounds("bandpo", old, full_mask(old), {"divergence": divergence})
    torch.testing.assert_close(
        lo[0], torch.tensor([v[0] for v in ref.values()], dtype=torch.float64), atol=2e-6, rtol=0
    )
    torch.testing.assert_close(
        hi[0], torch.tensor([v[1] for v in ref.values()], dtype=torch.float64), atol=2e-5, rtol=0
    )


def test_bandpo_cap_relax_and_custom_divergence():
    old = logp(0.01, 0.08, 0.99)
    mask = full_mask(old)
    _, hi = compute_bounds("bandpo", old, mask, {"cap": 5.0})
    assert hi[0, 0].item() == 5.0 and hi[0, 1].item() == pytest.approx(2.41055, abs=1e-5)
    lo, hi = compute_bounds("bandpo", old, mask, {"relax": True})  # union with [1 - 0.2, 1 + 0.28]
    assert lo[0, 2].item() == pytest.approx(0.8) and hi[0, 2].item() == pytest.approx(1.28)  # Band: [0.9312, 1.0101]
    assert lo[0, 1].item() == pytest.approx(0.261696, abs=1e-6) and hi[0, 1].item() == pytest.approx(2.41055, abs=1e-5)
    # p = 0 (log p = -inf) would give r_hi = inf: the cap maps it to 10.
    lo, hi = compute_bounds("bandpo", torch.tensor([[-math.inf, -1e-3]]), torch.tensor([[True, True]]))
    assert hi[0, 0].item() == 10.0 and lo[0, 0].item() == 0.0
    # Any registered divergence works by name (squared Hellinger, solved numerically by the Band operator).
    band.register_divergence("test_sq_hellinger", lambda u: (torch.sqrt(u) - 1.0) ** 2)
    lo, hi = compute_bounds("bandpo", old, mask, {"divergence": "test_sq_hellinger"})
    assert torch.all(lo < 1) and torch.all(hi > 1)


def test_bounds_are_computed_on_valid_tokens_only(monkeypatch):
    seen = []
    real = builtin_module.band_bounds

    def spy(x, divergence, delta):
        seen.append(x.numel())
        return real(x, divergence, delta)

    monkeypatch.setattr(builtin_module, "band_bounds", spy)
    old = torch.full((4, 6), float("nan"))  # padding may hold anything
    mask = torch.zeros(4, 6, dtype=torch.bool)
    mask[:, :2] = True
    old[mask] = -0.5
    lo, hi = compute_bounds("bandpo", old, mask)
    assert seen == [8]
    assert torch.all(lo[~mask] == 1) and torch.all(hi[~mask] == 1)
    assert torch.isfinite(lo).all() and torch.isfinite(hi).all()
    with pytest.raises(ValueError, match="whole-loss"):
        compute_bounds("cispo", old, mask)


# ----------------------------------------------------------------------------------------------------------------
# Aggregation and the surrogate


def test_aggregation_modes_hand_computed():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)  # last sequence fully padded
    expected = {
        "token-mean": 7 / 3,
        "token-sum": 7.0,
        "seq-mean-token-mean": (1.5 + 4.0) / 2,
        "seq-mean-token-sum": (3.0 + 4.0) / 2,
        "seq-mean-token-sum-norm": (3.0 + 4.0) / 2 / 3,
    }
    for mode, value in expected.items():
        assert aggregate_loss(loss, mask, mode).item() == pytest.approx(value, rel=1e-6), mode
    # Data-parallel normalisation by the global counts.
    assert aggregate_loss(loss, mask, "token-mean", dp_size=2, batch_num_tokens=14).item() == pytest.approx(1.0)
    assert aggregate_loss(loss, mask, "seq-mean-token-sum-norm", loss_scale_factor=7).item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="batch_num_tokens"):
        aggregate_loss(loss, mask, "token-mean", dp_size=2)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        aggregate_loss(loss, mask, "mean")


def crafted_batch():
    """One row of six valid tokens with known ratios, plus one padded token with an absurd ratio."""
    ratio = torch.tensor([[1.5, 0.5, 0.5, 1.5, 20.0, 1.0, 1000.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0, -1.0, 0.0, 1.0]], dtype=torch.float64)
    old = logp(0.1, 0.3, 0.5, 0.7, 0.9, 1.0, 0.5)
    mask = torch.tensor([[True] * 6 + [False]])
    return old, old + ratio.log(), adv, mask


def test_surrogate_per_token_values_and_gradient():
    old, new, adv, mask = crafted_batch()
    new = new.clone().requires_grad_()
    lo, hi = compute_bounds("grpo", old, mask)
    loss, _ = ppo_surrogate(old, new, adv, mask, lo, hi, {"loss_agg_mode": "token-sum", "dual_clip_c": 10.0})
    # r=1.5,A=+1 -> -1.2 (clipped) | r=.5,A=+1 -> -.5 | r=.5,A=-1 -> .8 (clipped) | r=1.5,A=-1 -> 1.5
    # r=20,A=-1 -> min(20, c=10) = 10 (dual clip) | A=0 -> 0
    assert loss.item() == pytest.approx(-1.2 - 0.5 + 0.8 + 1.5 + 10.0 + 0.0)
    loss.backward()
    # d/d log pi of -A r is -A r where the unclipped branch is active, 0 where a clip binds; 0 on padding.
    assert new.grad[0].tolist() == pytest.approx([0.0, -0.5, 0.0, 1.5, 0.0, 0.0, 0.0])
    loss_nodual, _ = ppo_surrogate(old, new, adv, mask, lo, hi, {"loss_agg_mode": "token-sum", "dual_clip_c": None})
    assert loss_nodual.item() == pytest.approx(-1.2 - 0.5 + 0.8 + 1.5 + 20.0)


@pytest.mark.parametrize(("method", "eps_high"), [("grpo", 0.2), ("clip_higher", 0.28)])
def test_surrogate_equals_verl_vanilla_exactly(method, eps_high):
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    from verl.workers.config import ActorConfig

    g = torch.Generator().manual_seed(0)
    old = -3 * torch.rand(8, 12, generator=g)
    new = old + 0.6 * torch.randn(8, 12, generator=g)
    new[0, :3] += 3.0  # a few ratios above the dual clip
    adv = torch.randn(8, 1, generator=g).expand(8, 12).contiguous()
    mask = torch.rand(8, 12, generator=g) > 0.3
    mask[3] = False
    for mode in methods.AGG_MODES:
        for info in ({}, {"dp_size": 2, "batch_num_tokens": 90, "global_batch_size": 14, "loss_scale_factor": 9}):
            cfg = ActorConfig(
                strategy="fsdp",
                rollout_n=1,
                ppo_micro_batch_size_per_gpu=1,
                clip_ratio_low=0.2,
                clip_ratio_high=eps_high,
                clip_ratio_c=3.0,
                loss_agg_mode=mode,
                global_batch_info=dict(info),
            )
            a, b = new.clone().requires_grad_(), new.clone().requires_grad_()
            ref, ref_metrics = core_algos.compute_policy_loss_vanilla(old, a, adv, mask, mode, cfg)
            settings = {"loss_agg_mode": mode, "dual_clip_c": 3.0}
            ours, metrics = compute_loss(method, old, b, adv, mask, settings=settings, global_batch_info=info)
            ref.backward()
            ours.backward()
            assert torch.equal(ref, ours), (mode, info)
            assert torch.equal(a.grad, b.grad), (mode, info)
            assert metrics["clipfrac"].item() == pytest.approx(ref_metrics["actor/pg_clipfrac"])
            assert metrics["clipfrac_dual"].item() == pytest.approx(ref_metrics["actor/pg_clipfrac_lower"])
            assert metrics["approx_kl"].item() == pytest.approx(ref_metrics["actor/ppo_kl"], rel=1e-6)


def test_precomputed_bounds_per_batch_equal_per_micro_batch():
    g = torch.Generator().manual_seed(1)
    old = -4 * torch.rand(8, 16, generator=g)
    new = old + 0.3 * torch.randn(8, 16, generator=g)
    adv = torch.randn(8, 16, generator=g)
    mask = torch.rand(8, 16, generator=g) > 0.3
    lo, hi = compute_bounds("bandpo", old, mask)  # once per rollout batch
    for sl in (slice(0, 4), slice(4, 8)):
        a, _ = compute_loss("bandpo", old[sl], new[sl], adv[sl], mask[sl], bounds=(lo[sl], hi[sl]))
        b, _ = compute_loss("bandpo", old[sl], new[sl], adv[sl], mask[sl])  # recomputed inside (verl's way)
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="no precomputed bounds"):
        compute_loss("cispo", old, new, adv, mask, bounds=(lo, hi))


# ----------------------------------------------------------------------------------------------------------------
# Diagnostics on crafted tensors


def test_diagnostics_counts_by_direction_and_bucket():
    old, new, adv, mask = crafted_batch()  # buckets of the six valid tokens: 0, 1, 2, 3, 4, 4
    lo = torch.tensor([[0.8, 0.7, 0.6, 0.9, 0.95, 0.97, 0.1]], dtype=torch.float64)
    hi = torch.tensor([[1.2, 1.3, 1.4, 1.1, 1.05, 1.03, 9.0]], dtype=torch.float64)
    _, d = ppo_surrogate(old, new, adv, mask, lo, hi, {"dual_clip_c": 10.0})
    n = 6
    # upper clip (r > r_hi, A > 0): token 0; lower clip (r < r_lo, A < 0): token 2; dual (A < 0, r > c): token 4.
    assert d["clipfrac_upper"].item() == pytest.approx(1 / n)
    assert d["clipfrac_lower"].item() == pytest.approx(1 / n)
    assert d["clipfrac"].item() == pytest.approx(2 / n)
    assert d["clipfrac_dual"].item() == pytest.approx(1 / n)
    expected_upper = [1.0, 0.0, 0.0, 0.0, 0.0]
    expected_lower = [0.0, 0.0, 1.0, 0.0, 0.0]
    expected_share = [1 / n, 1 / n, 1 / n, 1 / n, 2 / n]
    expected_lo_mean = [0.8, 0.7, 0.6, 0.9, (0.95 + 0.97) / 2]
    expected_hi_mean = [1.2, 1.3, 1.4, 1.1, (1.05 + 1.03) / 2]
    for j, label in enumerate(BUCKET_LABELS):
        assert d[f"clipfrac_upper/{label}"].item() == pytest.approx(expected_upper[j]), label
        assert d[f"clipfrac_lower/{label}"].item() == pytest.approx(expected_lower[j]), label
        assert d[f"token_frac/{label}"].item() == pytest.approx(expected_share[j]), label
        assert d[f"bound_lower_mean/{label}"].item() == pytest.approx(expected_lo_mean[j]), label
        assert d[f"bound_upper_mean/{label}"].item() == pytest.approx(expected_hi_mean[j]), label
    ratios = [1.5, 0.5, 0.5, 1.5, 20.0, 1.0]  # the padded ratio 1000 is not counted
    assert d["ratio_min"].item() == pytest.approx(0.5)
    assert d["ratio_max"].item() == pytest.approx(20.0)
    assert d["ratio_mean"].item() == pytest.approx(sum(ratios) / n)
    assert d["approx_kl"].item() == pytest.approx(-sum(math.log(r) for r in ratios) / n)
    assert d["approx_kl_k3"].item() == pytest.approx(sum(r - 1 - math.log(r) for r in ratios) / n)
    assert d["bound_upper_mean"].item() == pytest.approx(sum([1.2, 1.3, 1.4, 1.1, 1.05, 1.03]) / n)


def test_diagnostics_empty_buckets_and_empty_batch_are_safe():
    old = logp(0.9, 0.95)
    mask = full_mask(old)
    lo, hi = compute_bounds("grpo", old, mask)
    _, d = ppo_surrogate(old, old.clone(), torch.ones_like(old), mask, lo, hi)
    assert d[f"token_frac/{BUCKET_LABELS[0]}"].item() == 0.0 and d[f"bound_upper_mean/{BUCKET_LABELS[0]}"].item() == 0
    assert d[f"token_frac/{BUCKET_LABELS[4]}"].item() == 1.0
    empty = torch.zeros_like(mask)
    loss, d = ppo_surrogate(old, old.clone(), torch.ones_like(old), empty, lo, hi, {"loss_agg_mode": "token-mean"})
    assert all(torch.isfinite(v).all() for v in d.values())
    assert d["ratio_min"].item() == 1.0 and d["clipfrac"].item() == 0.0


# ----------------------------------------------------------------------------------------------------------------
# Whole-loss methods


def test_cispo_hand_computed_and_stop_gradient():
    old = logp(0.5, 0.5, 0.5)
    ratio = torch.tensor([[2.0, 0.1, 1.1]], dtype=torch.float64)
    new = (old + ratio.log()).requires_grad_()
    adv = torch.tensor([[1.0, -1.0, 2.0]], dtype=torch.float64)
    mask = full_mask(old)
    loss, d = compute_loss("cispo", old, new, adv, mask, settings={"loss_agg_mode": "token-sum"})
    w = [1.28, 0.1, 1.1]  # clip(r, 1 - 1.0, 1 + 0.28)
    logpi = new.detach()[0].tolist()
    assert loss.item() == pytest.approx(-sum(wi * a * lp for wi, a, lp in zip(w, [1, -1, 2], logpi, strict=True)))
    loss.backward()
    # Stop-gradient weight: d/d log pi = -w A, even where the weight is clipped (token 0 keeps its gradient).
    assert new.grad[0].tolist() == pytest.approx([-1.28, 0.1, -2.2])
    assert d["clipfrac_upper"].item() == pytest.approx(1 / 3)


def test_gspo_sequence_ratio_hand_computed():
    old = logp(0.5, 0.5, 0.5, 0.4, 0.4, 0.4)
    log_r = torch.tensor([[0.1, 0.3, 0.0, -0.1, -0.3, 5.0]], dtype=torch.float64)  # last token padded
    old = old.reshape(2, 3)
    log_r = log_r.reshape(2, 3)
    mask = torch.tensor([[True, True, False], [True, True, False]])
    adv = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    new = (old + log_r).requires_grad_()
    loss, d = compute_loss("gspo", old, new, adv, mask, settings={"loss_agg_mode": "seq-mean-token-mean"})
    s1, s2 = math.exp(0.2), math.exp(-0.2)  # s = exp(mean log r) over each sequence's valid tokens
    # Sequence 1: s > 1 + 4e-4 with A > 0 -> clipped to 1.0004, no gradient; sequence 2: s < 1, unclipped -A s.
    assert loss.item() == pytest.approx((-1.0004 - s2) / 2)
    loss.backward()
    assert new.grad.flatten().tolist() == pytest.approx([0.0, 0.0, 0.0, -s2 / 4, -s2 / 4, 0.0])
    assert d["ratio_max"].item() == pytest.approx(s1) and d["ratio_min"].item() == pytest.approx(s2)


# ----------------------------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("method", BUILT_IN)
def test_non_finite_inputs(method):
    old = torch.full((2, 4), -1.0)
    new = old + 0.1
    adv = torch.ones(2, 4)
    mask = torch.tensor([[True, True, False, False], [True, True, True, False]])
    # Non-finite values on padding are harmless: finite loss, finite gradients, zero gradient on padding.
    old_p, new_p, adv_p = old.clone(), new.clone(), adv.clone()
    old_p[~mask], new_p[~mask], adv_p[~mask] = float("nan"), -float("inf"), float("nan")
    new_p.requires_grad_()
    loss, metrics = compute_loss(method, old_p, new_p, adv_p, mask)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(new_p.grad).all() and torch.all(new_p.grad[~mask] == 0)
    assert all(torch.isfinite(v).all() for v in metrics.values())
    # On a valid token they are an error that names the tensor.
    bad = new.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite.*log_prob: 1"):
        compute_loss(method, old, bad, adv, mask)


def test_shape_and_type_errors():
    old = torch.zeros(2, 3)
    mask = full_mask(old)
    with pytest.raises(ValueError, match="advantages has shape"):
        compute_loss("grpo", old, old, torch.zeros(2, 4), mask)
    with pytest.raises(ValueError, match=r"\(batch, response_length\)"):
        compute_loss("grpo", old[0], old[0], old[0], mask[0])
    with pytest.raises(TypeError, match="log_prob must be a torch.Tensor"):
        compute_loss("grpo", old, [[0.0] * 3] * 2, old, mask)
    with pytest.raises(ValueError, match="unknown method"):
        compute_loss("ppo", old, old, old, mask)
    with pytest.raises(ValueError, match="global_batch_info"):
        compute_loss("grpo", old, old, old, mask, global_batch_info={"dp": 2})


@pytest.fixture
def unchecked_clip(monkeypatch):
    """A user method without validate(): its bounds are whatever its parameters make them (registered for one test:
    `registry._METHODS` is restored afterwards, and verl's registry never sees it)."""
    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))
    monkeypatch.setattr(registry, "_REGISTRATION_HOOKS", [])
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class UncheckedConfig(methods.MethodConfig):
        low: float = 0.8
        high: float = 1.2
        special: str = ""  # "nan_upper", "inf_lower", "inf_upper": what a computed bound can hold (a parameter cannot)

    @methods.register_bounds("unchecked_clip", config=UncheckedConfig)
    def unchecked_clip(old_log_prob, response_mask, params):
        """[low, high] as given, with no check of its own."""
        special = {"nan_upper": (params.low, math.nan), "inf_lower": (-math.inf, params.high)}
        special["inf_upper"] = (params.low, math.inf)
        low, high = special.get(params.special, (params.low, params.high))
        return methods.constant_bounds(old_log_prob, response_mask, low, high)

    return "unchecked_clip"


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"high": 1.0 - 1.0}, r"upper < 1: 5; e\.g\. token \[0, 0\]: lower = 0\.8, upper = 0\)"),  # eps_high = -1
        ({"low": 1.5, "high": 2.0}, r"lower > 1: 5;"),
        ({"special": "inf_lower"}, r"lower = -inf: 5;"),
        ({"special": "nan_upper"}, r"NaN: 5;"),
    ],
)
def test_bounds_that_exclude_ratio_one_stop_the_run(unchecked_clip, params, match):
    """lower <= 1 <= upper on every valid token, checked where a resolved method computes its bounds: the local
    trainer (bounds once per batch) and verl's plugin (the loss without precomputed bounds) both stop."""
    old = torch.full((2, 4), -1.0)
    mask = torch.tensor([[True, True, False, False], [True, True, True, False]])
    prefix = r"method 'unchecked_clip' \(tests/unit/test_methods\.py:.*unchecked_clip, .*UncheckedConfig\(.*\)\): "
    prefix += r"its bounds violate lower <= 1 <= upper on 5 of 5 valid tokens \("
    resolved = methods.resolve(unchecked_clip, params)
    with pytest.raises(ValueError, match=prefix + match):
        resolved.bounds(old, mask)
    with pytest.raises(ValueError, match=prefix + match):
        resolved.loss(old, old + 0.1, torch.ones(2, 4), mask)


def test_bounds_check_blames_bad_inputs_and_shapes(unchecked_clip, monkeypatch):
    old = torch.full((2, 4), -1.0)
    mask = torch.tensor([[True, True, False, False], [True, True, True, False]])
    # a NaN old log-prob gives NaN bounds: that is the rollout's fault, and the message says so
    bad = old.clone()
    bad[1, 2] = math.nan
    with pytest.raises(ValueError, match=r"non-finite values on valid \(unmasked\) tokens \(old_log_prob: 1\)"):
        compute_bounds("bandpo", bad, mask)
    # a bounds function that returns the wrong shape is named too
    real = registry._METHODS[unchecked_clip]
    monkeypatch.setitem(
        registry._METHODS,
        unchecked_clip,
        registry.Method(real.name, real.kind, lambda o, m, p: (o[:1], o), real.config_cls),
    )
    with pytest.raises(ValueError, match=r"'unchecked_clip'.*returned a bad \(lower, upper\): lower has shape"):
        compute_bounds(unchecked_clip, old, mask)


def test_bounds_check_passes_valid_bounds_unchanged(unchecked_clip):
    """Padding may hold anything, ratio 1 may be an end of the interval, upper = +inf is no upper clip (Band's r_hi
    where p underflows, without a cap): all pass, and the values are returned as the function computed them."""
    old = torch.full((2, 4), -1.0)
    mask = torch.tensor([[True, True, False, False], [True, True, True, False]])
    lo, hi = compute_bounds(unchecked_clip, old, mask, {"low": 1.0, "special": "inf_upper"})
    assert torch.all(lo[mask] == 1.0) and torch.all(hi[mask] == math.inf)
    lo, hi = compute_bounds(unchecked_clip, old, mask, {"low": 0.0, "high": 1.0})
    assert torch.all(lo[mask] == 0.0) and torch.all(hi[mask] == 1.0)
    lo, hi = compute_bounds("bandpo", torch.tensor([[-math.inf, -1e-3]]), torch.ones(1, 2, dtype=torch.bool),
                            {"cap": None})  # fmt: skip
    assert hi[0, 0] == math.inf and lo[0, 0] == 0.0
    # every built-in bounds method, over old probabilities from 1e-40 to 1 (and log p slightly > 0) in each dtype
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        log_p = torch.cat([-torch.logspace(-40, 2, 500, dtype=torch.float64), torch.tensor([0.0, 1e-7])])
        log_p = log_p.to(dtype).unsqueeze(0)
        for name in methods.list_methods("bounds"):
            if name != unchecked_clip:
                for params in ({}, {"cap": None}) if name in ("dcpo", "bandpo", "bandpo_upper") else ({},):
                    lo, hi = compute_bounds(name, log_p, torch.ones_like(log_p, dtype=torch.bool), params)
                    assert torch.all(lo <= 1) and torch.all(hi >= 1)


# ----------------------------------------------------------------------------------------------------------------
# Methods of the user's own modules: loaded where a run starts, never by importing bandpo.methods

SIDE_EFFECT_MODULE = '''
import pathlib

from bandpo.methods import GRPOConfig, constant_bounds, register_bounds

pathlib.Path({marker!r}).write_text("imported")


@register_bounds("side_effect_clip", config=GRPOConfig)
def side_effect_clip(old_log_prob, response_mask, params):
    """Registered by a module with a side effect."""
    return constant_bounds(old_log_prob, response_mask, 1 - params.eps_low, 1 + params.eps_high)
'''


def side_effect_module(tmp_path) -> tuple[Path, Path]:
    """A user method module that writes a marker file when imported: (module path, marker path)."""
    marker = tmp_path / "imported.txt"
    module = tmp_path / "side_effect_methods.py"
    module.write_text(SIDE_EFFECT_MODULE.format(marker=str(marker)))
    return module, marker


def test_importing_methods_runs_no_user_code_a_run_start_does(tmp_path):
    module, marker = side_effect_module(tmp_path)
    env = {**os.environ, methods.METHOD_MODULES_ENV: str(module)}
    code = (
        "import pathlib, sys\n"
        "import bandpo.methods, bandpo.train.loop, bandpo.verl.command, bandpo.score.evaluate\n"
        "print(pathlib.Path(sys.argv[1]).exists(), 'side_effect_clip' in bandpo.methods.list_methods())\n"
        "from bandpo.train.loop import TrainConfig, train\n"
        "try:\n"
        "    train(TrainConfig(method='side_effect_clip'))  # a run start: loads the module, then rejects the config\n"
        "except ValueError as e:\n"
        "    print('model: required' in str(e))\n"
        "print(pathlib.Path(sys.argv[1]).exists(), 'side_effect_clip' in bandpo.methods.list_methods())\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(marker)], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "True", "True", "True"]


def test_the_train_cli_loads_user_modules_from_the_environment(tmp_path):
    module, marker = side_effect_module(tmp_path)
    env = {**os.environ, methods.METHOD_MODULES_ENV: str(module)}
    cmd = [sys.executable, "-m", "bandpo.train", "--model", "m", "--data", "d", "--out", str(tmp_path / "o")]
    proc = subprocess.run([*cmd, "--method", "side_effect_clip", "--params", '{"eps_low": 2.0}'], env=env,
                          capture_output=True, text=True)  # fmt: skip
    # the method is known (its parameter is checked), so the module was imported; a usage error, no traceback
    assert proc.returncode == 2 and "eps_low" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert marker.read_text() == "imported"


def test_methods_listing_shows_user_modules_with_their_files(tmp_path):
    """``python -m bandpo.methods`` lists the methods of $BANDPO_METHOD_MODULES and of --method-module, each with
    the file it came from (not the internal name of a module loaded by path)."""
    repo = Path(__file__).resolve().parents[2]
    module, _ = side_effect_module(tmp_path)
    env = {**os.environ, methods.METHOD_MODULES_ENV: "tests/example_method.py"}
    cmd = [sys.executable, "-m", "bandpo.methods", "--method-module", str(module)]
    table = subprocess.run(cmd, env=env, cwd=repo, capture_output=True, text=True, check=True).stdout
    assert re.search(r"^half_clip +bounds +eps=0\.1$", table, re.M)
    assert "source: tests/example_method.py:half_clip_bounds (method module)" in table
    assert f"source: {module}:side_effect_clip (method module)" in table
    assert "bandpo_method_module_" not in table
    rows = json.loads(subprocess.run([*cmd, "--json"], env=env, cwd=repo, capture_output=True, text=True,
                                     check=True).stdout)  # fmt: skip
    by_name = {r["name"]: r for r in rows}
    assert by_name["half_clip"]["file"] == "tests/example_method.py"
    assert by_name["half_clip"]["method_module"] == str(repo / "tests/example_method.py")
    assert by_name["half_clip"]["config"] == "tests/example_method.py:HalfClipConfig"
    assert by_name["side_effect_clip"]["file"] == str(module)
    assert by_name["grpo"]["source"] == "bandpo.methods.builtin.fixed_clip_bounds"
    assert by_name["grpo"]["method_module"] is None
    # a module that is not there: a usage error naming it, no traceback
    proc = subprocess.run([*cmd, "--method-module", "no_such.py"], env=env, cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 2 and "method module 'no_such.py': file not found" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_every_rule_a_framework_ships_names_parity_tests_that_exist():
    """The ranking page's parity column (`docs.blocks.scores.rules`) names real tests: every method whose
    ``shipped_by`` names verl or TRL lists at least one, and each is a test function of an existing test file (its
    parameters, if any, are the test's own)."""
    import ast

    from bandpo.methods.__main__ import describe

    root = Path(__file__).resolve().parents[2]
    tests_of: dict[str, set[str]] = {}
    for name in methods.list_methods():
        row = describe(name)
        if row["shipped_by"]:
            assert row["parity_tests"], f"{name} is shipped by {row['shipped_by']!r} but names no parity test"
        for node in row["parity_tests"]:
            path, _, func = node.partition("::")
            if path not in tests_of:
                tree = ast.parse((root / path).read_text(encoding="utf-8"))
                tests_of[path] = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
            assert func.startswith("test_") and func in tests_of[path], f"{name}: no test {node}"
    assert describe("grpo")["parity_tests"] and not describe("bandpo")["parity_tests"]
