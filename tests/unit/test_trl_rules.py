"""The rules of TRL's GRPOConfig and verl's rollout-correction presets as methods (bandpo.methods.trl_rules,
bandpo.methods.rollout_correction): each equals the framework's own computation on the same tensors, loss and
gradient with respect to the log-probs.

TRL's loss is inlined in ``GRPOTrainer._compute_loss``: it is called here as it is, on a stub trainer whose forward
pass returns the test's log-probs and entropies and whose accelerator is one process; every input its loss step
reads (log-probs, old and sampling log-probs, advantages, completion mask, entropies, importance ratios, the token
count) is built here. verl's presets are called through verl's registered ``bypass_mode`` policy loss with the
preset's ``RolloutCorrectionConfig``. Every comparison has a case where the rule acts (tokens clipped, masked,
truncated, re-weighted) and is checked to act, and one where it does not."""

from __future__ import annotations

import collections
import types

import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("verl.trainer.ppo.core_algos")

from trl.trainer.grpo_trainer import GRPOTrainer  # noqa: E402
from verl.trainer.config.algorithm import RolloutCorrectionConfig  # noqa: E402
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.workers.config import ActorConfig, PolicyLossConfig  # noqa: E402

from bandpo import methods  # noqa: E402
from bandpo.methods import rollout_correction, trl_rules  # noqa: E402
from bandpo.methods.__main__ import describe  # noqa: E402

torch.set_num_threads(1)

TRL_RULES = ["luspo", "offpolicy_mask", "top_entropy", "two_sided_clip", "vespo"]
VERL_PRESETS = ["icepop", "tis_seq", "tis_token"]
F64 = {"rtol": 1e-9, "atol": 1e-12}  # TRL divides a sequence's token sum by n, verl's convention by n + 1e-8
F32 = {"rtol": 1e-6, "atol": 1e-7}


# ----------------------------------------------------------------------------------------------------------------
# TRL's own loss step, on a stub trainer


class _OneProcess:
    """The accelerator of one process: gathers, pads and reduces are the identity."""

    num_processes = 1
    sync_gradients = True

    def pad_across_processes(self, x, dim=0, pad_index=0):
        return x

    def gather(self, x):
        return x

    def gather_for_metrics(self, x):
        return x

    def reduce(self, x, reduction="sum"):
        return x


class _TRLTrainer:
    """What ``GRPOTrainer._compute_loss`` reads from its trainer, and nothing else; its forward pass returns the
    given log-probs (a leaf: the gradient is read from it) and entropies."""

    _compute_loss = GRPOTrainer._compute_loss
    get_high_entropy_mask = GRPOTrainer.get_high_entropy_mask
    get_off_policy_mask = staticmethod(GRPOTrainer.get_off_policy_mask)
    get_gamma_weights = staticmethod(GRPOTrainer.get_gamma_weights)

    def __init__(self, per_token_logps, entropies, **config):
        self._out = (per_token_logps, entropies)
        self.loss_type = config.get("loss_type", "grpo")
        self.importance_sampling_level = config.get("importance_sampling_level", "token")
        self.epsilon_low = config.get("epsilon", 0.2)
        self.epsilon_high = config.get("epsilon_high", self.epsilon_low)
        self.top_entropy_quantile = config.get("top_entropy_quantile", 1.0)
        self.off_policy_mask_threshold = config.get("off_policy_mask_threshold")
        self.max_completion_length = config.get("max_completion_length", 32)
        self.beta = 0.0
        self.use_vllm = False
        self.vllm_importance_sampling_correction = False
        self.model = types.SimpleNamespace(training=True)
        self.current_gradient_accumulation_steps = 1
        self.accelerator = _OneProcess()
        self._entropy_bonus_enabled = False
        self.aux_loss_enabled = False
        self._metrics = collections.defaultdict(lambda: collections.defaultdict(list))
        vespo = dict(zip(("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg"),
                         config.get("vespo", (2.0, 3.0, 3.0, 2.0)), strict=True))  # fmt: skip
        sapo = dict(zip(("sapo_temperature_pos", "sapo_temperature_neg"), config.get("sapo", (1.0, 1.05)), strict=True))
        self.args = types.SimpleNamespace(delta=config.get("delta"), steps_per_generation=1,
                                          use_bias_correction_kl=False, **vespo, **sapo)  # fmt: skip

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, **kwargs):
        assert logits_to_keep == self._out[0].shape[1]
        return self._out[0], self._out[1], None


def trl_loss(new, old, seq_adv, mask, *, entropies=None, sampling=None, importance_sampling_ratio=None, **config):
    """TRL 1.16.0's loss and its gradient w.r.t. the log-probs ``new``: ``GRPOTrainer._compute_loss`` on the stub,
    with the inputs its loss step reads (advantages per sequence, (B,), as TRL's)."""
    logps = new.clone().requires_grad_()
    b, t = new.shape
    inputs = {
        "prompt_ids": torch.zeros(b, 1, dtype=torch.long),
        "prompt_mask": torch.ones(b, 1, dtype=torch.int),
        "completion_ids": torch.zeros(b, t, dtype=torch.long),
        "completion_mask": mask.int(),
        "advantages": seq_adv,
        "old_per_token_logps": old,
        "num_items_in_batch": mask.sum().to(new.dtype),
    }
    if sampling is not None:
        inputs["sampling_per_token_logps"] = sampling
    if importance_sampling_ratio is not None:
        inputs["importance_sampling_ratio"] = importance_sampling_ratio
    ent = torch.zeros_like(new) if entropies is None else entropies
    loss = _TRLTrainer(logps, ent, **config)._compute_loss(None, inputs)
    loss.backward()
    return loss.detach(), logps.grad


def our_loss(method, new, old, seq_adv, mask, params=None, *, loss_agg_mode="seq-mean-token-mean", dual_clip_c=None,
             global_batch_info=None, token_inputs=None):  # fmt: skip
    """The method as the local trainer calls it (resolved, then ResolvedMethod.loss), its loss, gradient w.r.t. the
    log-probs and metrics."""
    logps = new.clone().requires_grad_()
    adv = seq_adv.unsqueeze(1).expand_as(new).contiguous()
    settings = {"loss_agg_mode": loss_agg_mode, "dual_clip_c": dual_clip_c}
    loss, metrics = methods.resolve(method, params, settings).loss(
        old, logps, adv, mask, global_batch_info=global_batch_info, token_inputs=token_inputs
    )
    loss.backward()
    return loss.detach(), logps.grad, metrics


def batch(seed=0, b=8, t=12, dtype=torch.float64, spread=0.6, seq_shift=0.0):
    """Old log-probs over (0.02, 1); new ones around them (token noise ``spread``, a per-sequence shift up to
    ``seq_shift``), kept <= 0; per-sequence advantages of both signs; padding holding garbage; every sequence holds
    a token (as a TRL completion holds its EOS)."""
    g = torch.Generator().manual_seed(seed)
    old = (-4 * torch.rand(b, t, generator=g)).to(dtype)
    shift = seq_shift * (2 * torch.rand(b, 1, generator=g) - 1)
    new = (old + shift.to(dtype) + spread * torch.randn(b, t, generator=g).to(dtype)).clamp(max=-1e-4)
    seq_adv = torch.randn(b, generator=g).to(dtype)
    seq_adv[0], seq_adv[1] = seq_adv[0].abs() + 0.1, -seq_adv[1].abs() - 0.1
    lengths = torch.randint(2, t + 1, (b,), generator=g)
    lengths[0] = t
    mask = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)
    new = torch.where(mask, new, new - 3.0)  # padding: finite garbage, as a real batch's
    entropies = (2 * torch.rand(b, t, generator=g)).to(dtype)
    return old, new, seq_adv, mask, entropies


def close(ours, theirs, tol):
    torch.testing.assert_close(ours[0], theirs[0], **tol)
    torch.testing.assert_close(ours[1], theirs[1], **tol)


def differs(a, b) -> bool:
    return not torch.allclose(a[0], b[0], rtol=1e-6, atol=1e-9) or not torch.allclose(a[1], b[1], rtol=1e-6, atol=1e-9)


# ----------------------------------------------------------------------------------------------------------------
# Aggregation: TRL's loss types that only aggregate are the protocol's loss_agg_mode


@pytest.mark.parametrize("loss_type", sorted(trl_rules.TRL_LOSS_AGGREGATION))
def test_trl_aggregation_loss_types_are_loss_agg_modes(loss_type):
    """grpo, bnpo, dr_grpo and dapo on the PPO clip (clip_higher 0.2 / 0.28, no dual clip: TRL has none) equal
    TRL's loss type under `TRL_LOSS_AGGREGATION`'s mode (dr_grpo: loss_scale_factor = max_completion_length); the
    modes differ from each other on this batch, and the clip acts."""
    old, new, adv, mask, _ = batch(1)
    mode = trl_rules.TRL_LOSS_AGGREGATION[loss_type]
    info = {"loss_scale_factor": 20} if loss_type == "dr_grpo" else None
    theirs = trl_loss(new, old, adv, mask, loss_type=loss_type, epsilon=0.2, epsilon_high=0.28,
                      max_completion_length=20)  # fmt: skip
    *ours, metrics = our_loss("clip_higher", new, old, adv, mask, loss_agg_mode=mode, global_batch_info=info)
    close(ours, theirs, F64)
    assert 0 < float(metrics["clipfrac"]) < 1  # the clip acts on some tokens, not all
    other = "token-mean" if mode != "token-mean" else "seq-mean-token-mean"
    assert differs(our_loss("clip_higher", new, old, adv, mask, loss_agg_mode=other)[:2], theirs)


@pytest.mark.parametrize("method", ["gspo", "cispo", "sapo"])
def test_the_registrys_earlier_rules_equal_trls_too(method):
    """The registry's GSPO, CISPO and (verl's) SAPO are TRL's importance_sampling_level="sequence" on its grpo loss,
    its loss_type="cispo" (TRL's epsilon_high = 1 + eps_high; dapo's token-mean) and loss_type="sapo" (grpo's
    aggregation): equal on a batch where they clip or gate."""
    old, new, adv, mask, _ = batch(12, spread=0.4, seq_shift=0.2)
    if method == "gspo":
        params, mode = {"eps_low": 0.05, "eps_high": 0.08}, "seq-mean-token-mean"
        trl = {"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": 0.05, "epsilon_high": 0.08}
    elif method == "cispo":
        params, mode = {"eps_high": 0.3}, "token-mean"
        trl = {"loss_type": "cispo", "epsilon_high": 1.3}
    else:
        params, mode = {"tau_pos": 1.5, "tau_neg": 2.0}, "seq-mean-token-mean"
        trl = {"loss_type": "sapo", "sapo": (1.5, 2.0)}  # sapo_temperature_pos / _neg
    theirs = trl_loss(new, old, adv, mask, **trl)
    *ours, metrics = our_loss(method, new, old, adv, mask, params, loss_agg_mode=mode)
    close(ours, theirs, F64)
    assert method == "sapo" or 0 < float(metrics["clipfrac"]) < 1


# ----------------------------------------------------------------------------------------------------------------
# luspo


@pytest.mark.parametrize("params", [{"eps_low": 0.1, "eps_high": 0.15}, {}])
def test_luspo_equals_trls_luspo(params):
    """TRL's loss_type="luspo" at the sequence level (its required setup) vs ``luspo`` under seq-mean-token-mean:
    with eps 0.1 / 0.15 some sequences are clipped and some not; at GSPO's defaults nearly all are. The length
    scaling acts: GSPO's loss is not LUSPO's."""
    old, new, adv, mask, _ = batch(2, spread=0.05, seq_shift=0.3)
    eps = {**{"eps_low": 3e-4, "eps_high": 4e-4}, **params}
    theirs = trl_loss(new, old, adv, mask, loss_type="luspo", importance_sampling_level="sequence",
                      epsilon=eps["eps_low"], epsilon_high=eps["eps_high"])  # fmt: skip
    *ours, metrics = our_loss("luspo", new, old, adv, mask, params)
    close(ours, theirs, F64)
    assert float(metrics["clipfrac"]) > 0 and (not params or float(metrics["clipfrac"]) < 0.9)
    assert differs(our_loss("gspo", new, old, adv, mask, params)[:2], theirs)


# ----------------------------------------------------------------------------------------------------------------
# vespo


@pytest.mark.parametrize("params", [{}, {"k_pos": 1.5, "lambda_pos": 2.0, "k_neg": 4.0, "lambda_neg": 1.0}])
def test_vespo_equals_trls_vespo(params):
    """TRL's loss_type="vespo" (its dapo token-mean normalisation) vs ``vespo`` under token-mean, default and
    other k / lambda. The batch's sequence ratios run from far below 1 to past the cap of exp(20) (a sequence
    shifted by +3 per token), so phi is 1 nowhere and 0 where the weight is capped."""
    old, new, adv, mask, _ = batch(3, spread=0.3, seq_shift=0.8)
    new[2] = torch.where(mask[2], (old[2] + 3.0).clamp(max=-1e-4), new[2])  # log w of the sequence > 20
    vespo = tuple({**methods.make_config("vespo").to_dict(), **params}[k]
                  for k in ("k_pos", "lambda_pos", "k_neg", "lambda_neg"))  # fmt: skip
    theirs = trl_loss(new, old, adv, mask, loss_type="vespo", vespo=vespo)
    *ours, metrics = our_loss("vespo", new, old, adv, mask, params, loss_agg_mode="token-mean")
    close(ours, theirs, F64)
    assert abs(float(metrics["phi_mean"]) - 1) > 0.05  # re-weighted
    assert torch.all(ours[1][2] == 0) and torch.all(ours[1][0][mask[0]] != 0)  # the capped weight: phi = 0
    assert differs(our_loss("vespo", new, old, adv, mask, {"k_pos": 2.5}, loss_agg_mode="token-mean")[:2], theirs)


def test_vespo_reads_the_samplers_log_probs_as_trls_importance_ratio():
    """With the sampler's log-probs in token_inputs, VESPO's weight takes their drift from the old policy as TRL
    takes its vLLM importance ratio exp(old - sampling); without them it is the old policy's alone (TRL without
    vLLM), which here differs."""
    old, new, adv, mask, _ = batch(4, spread=0.2, seq_shift=0.3)
    sampling = old + 0.1 * torch.randn(old.shape, generator=torch.Generator().manual_seed(9), dtype=old.dtype)
    ratio = torch.where(mask, torch.exp(old - sampling), 1.0)  # TRL sums its log over every column
    theirs = trl_loss(new, old, adv, mask, loss_type="vespo", importance_sampling_ratio=ratio)
    ours = our_loss("vespo", new, old, adv, mask, loss_agg_mode="token-mean",
                    token_inputs={"rollout_log_prob": sampling})[:2]  # fmt: skip
    close(ours, theirs, F64)
    assert differs(our_loss("vespo", new, old, adv, mask, loss_agg_mode="token-mean")[:2], theirs)


# ----------------------------------------------------------------------------------------------------------------
# two_sided_clip (INTELLECT-2's delta)


@pytest.mark.parametrize(
    ("delta", "dual_clip_c", "loss_type"),
    [(4.0, None, "grpo"), (2.0, None, "dapo"), (4.0, 10.0, "grpo"), (4.0, 3.0, "grpo")],
)
def test_two_sided_clip_equals_trls_delta(delta, dual_clip_c, loss_type):
    """TRL's ``delta`` on its grpo / dapo loss vs ``two_sided_clip``: equal, and with the protocol's dual clip on,
    the tighter of delta and c binds (TRL's delta = min(delta, c)). Tokens with A < 0 and r past the cap exist,
    so TRL without delta differs."""
    old, new, adv, mask, _ = batch(5, spread=1.0)
    cap = delta if dual_clip_c is None else min(delta, dual_clip_c)
    mode = trl_rules.TRL_LOSS_AGGREGATION[loss_type]
    theirs = trl_loss(new, old, adv, mask, loss_type=loss_type, delta=cap)
    *ours, metrics = our_loss("two_sided_clip", new, old, adv, mask, {"delta": delta}, loss_agg_mode=mode,
                              dual_clip_c=dual_clip_c)  # fmt: skip
    close(ours, theirs, F64)
    assert 0 < float(metrics["clipfrac_dual"]) < 1
    assert differs(trl_loss(new, old, adv, mask, loss_type=loss_type), theirs)


# ----------------------------------------------------------------------------------------------------------------
# top_entropy (the 80/20 rule)


@pytest.mark.parametrize(("rho", "loss_type"), [(0.2, "dapo"), (0.5, "grpo"), (0.0, "bnpo"), (1.0, "grpo")])
def test_top_entropy_equals_trls_top_entropy_quantile(rho, loss_type):
    """TRL's ``top_entropy_quantile`` (float32, as a model's entropies) vs ``top_entropy`` with the entropy token
    input: rho 0.2 drops about 80% of the tokens, 0 all but the top one, 1 none (then it is the plain clip)."""
    old, new, adv, mask, ent = batch(6, dtype=torch.float32)
    mode = trl_rules.TRL_LOSS_AGGREGATION[loss_type]
    theirs = trl_loss(new, old, adv, mask, entropies=ent, loss_type=loss_type, epsilon_high=0.28,
                      top_entropy_quantile=rho)  # fmt: skip
    *ours, metrics = our_loss("top_entropy", new, old, adv, mask, {"rho": rho}, loss_agg_mode=mode,
                              token_inputs={"entropy": ent})  # fmt: skip
    close(ours, theirs, F32)
    n = int(mask.sum())
    dropped = round(float(metrics["masked_frac"]) * n)
    plain = our_loss("clip_higher", new, old, adv, mask, loss_agg_mode=mode)[:2]
    if rho == 1.0:
        assert dropped == 0 and not differs(plain, theirs)
    else:
        assert dropped == n - max(1, round(rho * n)) or abs(dropped - (1 - rho) * n) <= 1
        assert differs(plain, theirs)


def test_top_entropy_needs_the_entropy_and_verl_cannot_give_it():
    old, new, adv, mask, _ = batch(7)
    with pytest.raises(ValueError, match=r"top_entropy.*needs the token input\(s\) \['entropy'\]"):
        our_loss("top_entropy", new, old, adv, mask)
    assert methods.get_method("top_entropy").config_cls.requires == ("entropy",)


# ----------------------------------------------------------------------------------------------------------------
# offpolicy_mask (DeepSeek-V3.2)


@pytest.mark.parametrize("with_sampler", [True, False])
def test_offpolicy_mask_equals_trls_off_policy_mask_threshold(with_sampler):
    """TRL's ``off_policy_mask_threshold`` vs ``offpolicy_mask``: with the sampler's log-probs (TRL's
    sampling_per_token_logps, our rollout_log_prob token input) the sequences' KL to the sampler spans the threshold,
    so some A < 0 sequences are dropped and others kept; without them both measure the KL to the old policy."""
    old, new, adv, mask, _ = batch(8, spread=0.3)
    g = torch.Generator().manual_seed(3)
    sampling = new + torch.linspace(-0.2, 0.8, new.shape[0], dtype=new.dtype).unsqueeze(1)[
        torch.randperm(new.shape[0], generator=g)] if with_sampler else None  # fmt: skip
    threshold = 0.3 if with_sampler else 0.05
    theirs = trl_loss(new, old, adv, mask, sampling=sampling, loss_type="grpo", off_policy_mask_threshold=threshold)
    inputs = {"rollout_log_prob": sampling} if with_sampler else None
    *ours, metrics = our_loss("offpolicy_mask", new, old, adv, mask, {"threshold": threshold}, token_inputs=inputs)
    close(ours, theirs, F64)
    assert 0 < float(metrics["masked_frac"]) < float((adv < 0).float().mean())  # some A < 0 dropped, not all
    assert differs(our_loss("grpo", new, old, adv, mask)[:2], theirs)


# ----------------------------------------------------------------------------------------------------------------
# verl's rollout-correction presets


def verl_bypass(preset: RolloutCorrectionConfig, rollout, new, adv, mask, mode, info):
    """verl's registered ``bypass_mode`` loss as verl's actor calls it in bypass mode: old_log_prob = the rollout's."""
    logps = new.clone().requires_grad_()
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=mode,
                         policy_loss=PolicyLossConfig(loss_mode="bypass_mode", rollout_correction=preset),
                         global_batch_info=dict(info))  # fmt: skip
    loss, _ = get_policy_loss_fn("bypass_mode")(old_log_prob=rollout, log_prob=logps, advantages=adv,
                                                response_mask=mask, loss_agg_mode=mode, config=config,
                                                rollout_is_weights=None)  # fmt: skip
    loss.backward()
    return loss.detach(), logps.grad


PRESETS = {
    "tis_token": lambda p: RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold=p.threshold,
                                                   rollout_rs=None, bypass_mode=True, loss_type="reinforce"),
    "tis_seq": lambda p: RolloutCorrectionConfig.bypass_pg_is(threshold=p.threshold),
    "icepop": lambda p: RolloutCorrectionConfig.bypass_pg_token_icepop(threshold=p.threshold,
                                                                       threshold_lower=p.threshold_lower),
}  # fmt: skip
PRESET_PARAMS = {"tis_token": [{}, {"threshold": 1.3}], "tis_seq": [{}, {"threshold": 1.5}],
                 "icepop": [{}, {"threshold_lower": 0.8, "threshold": 1.5}]}  # fmt: skip


@pytest.mark.parametrize(("method", "params"), [(m, p) for m in VERL_PRESETS for p in PRESET_PARAMS[m]])
def test_rollout_correction_presets_equal_verls_bypass_mode(method, params):
    """Each preset vs verl's bypass_mode loss with the preset's config, in every aggregation mode, with and without
    verl's data-parallel batch info: bitwise equal, whether the rollout's log-probs come as the old ones (verl's
    bypass mode) or as the rollout_log_prob token input beside other old log-probs. The weights are truncated /
    masked on some tokens and not on others."""
    old, new, adv_seq, mask, _ = batch(10, spread=0.5, seq_shift=0.05, t=6)
    rollout = old
    stale = old - 0.3  # other old log-probs: the rollout's, given as the token input, are what counts
    adv = adv_seq.unsqueeze(1).expand_as(new).contiguous()
    config = methods.make_config(method, params)
    assert PRESETS[method](config) == RolloutCorrectionConfig(**config.rollout_correction())
    for mode in methods.AGG_MODES:
        for info in ({}, {"dp_size": 2, "batch_num_tokens": 70, "global_batch_size": 11, "loss_scale_factor": 13}):
            theirs = verl_bypass(PRESETS[method](config), rollout, new, adv, mask, mode, info)
            for o, inputs in ((rollout, None), (stale, {"rollout_log_prob": rollout})):
                *ours, metrics = our_loss(method, new, o, adv_seq, mask, params, loss_agg_mode=mode,
                                          global_batch_info=info, token_inputs=inputs)  # fmt: skip
                assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1]), (mode, info)
    acted = float(metrics["masked_frac"] + metrics["truncated_frac"])
    assert 0 < acted < 1, acted
    assert differs(our_loss(method, new, stale, adv_seq, mask, params)[:2],
                   our_loss(method, new, rollout, adv_seq, mask, params)[:2])  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# Registration, listing, the trainers' view


def test_every_rule_is_registered_listed_and_named_by_its_framework():
    listed = {m: describe(m) for m in methods.list_methods()}
    for name in TRL_RULES + VERL_PRESETS:
        assert methods.get_method(name).kind == "loss"
        row = listed[name]
        framework = "TRL 1.16.0" if name in TRL_RULES else "verl 0.9.1"
        assert row["shipped_by"].startswith(framework), row
        assert row["description"] and methods.make_config(name).label()
    assert rollout_correction.TISConfig().rollout_correction()["rollout_is"] == "token"
    assert rollout_correction.SeqTISConfig().rollout_correction()["rollout_is"] == "sequence"
    assert describe("dppo_tv")["shipped_by"] == "verl 0.9.1: loss_mode='dppo_tv'"


def test_a_loss_without_the_token_inputs_keyword_still_works(monkeypatch):
    """A whole loss written before token_inputs existed is called without it; a method requiring an input must
    take the keyword."""
    from dataclasses import dataclass

    from bandpo.methods import MethodConfig, register_loss, registry

    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))
    monkeypatch.setattr(registry, "_REGISTRATION_HOOKS", [])  # keep it out of verl's registry (see test_verl_plugin)

    @dataclass(frozen=True)
    class Plain(MethodConfig):
        pass

    @register_loss("old_style_loss", config=Plain)
    def old_style(old_log_prob, log_prob, advantages, response_mask, params, settings, *, rollout_is_weights=None,
                  global_batch_info=None):  # fmt: skip
        return -(advantages * log_prob)[response_mask].mean(), {}

    old, new, adv, mask, ent = batch(11)
    loss, _ = methods.compute_loss("old_style_loss", old, new, adv.unsqueeze(1).expand_as(new), mask,
                                   token_inputs={"entropy": ent})  # fmt: skip
    assert torch.isfinite(loss)

    @dataclass(frozen=True)
    class Needs(MethodConfig):
        requires = ("entropy",)

    with pytest.raises(ValueError, match="token_inputs"):
        register_loss("needs_entropy", config=Needs)(old_style)
    with pytest.raises(ValueError, match="unknown token_inputs"):
        methods.compute_loss("old_style_loss", old, new, adv.unsqueeze(1).expand_as(new), mask,
                             token_inputs={"entropies": ent})  # fmt: skip


def test_verl_refuses_a_method_that_needs_the_entropy():
    """At the config check of a verl sweep (before any job) and where a verl run's command is built; the other new
    methods compose into verl's command as bandpo.<name>."""
    from pathlib import Path

    from bandpo.plan.validate import ConfigError, load_yaml, validate_config
    from bandpo.verl import command
    from bandpo.verl.spec import VerlRun

    raw = load_yaml(Path(__file__).resolve().parents[2] / "config" / "verl-cpu.yaml")
    raw["methods"].append({"id": "top_entropy", "method": "top_entropy"})
    with pytest.raises(ConfigError, match=r"methods\[\d+\]\.method.*top_entropy requires the token input"):
        validate_config(raw)

    run = VerlRun(model="m", method="top_entropy", train_files="t.parquet", val_files="v.parquet", output_dir="o")
    with pytest.raises(ValueError, match="top_entropy.*verl's policy loss does not receive"):
        command.overrides(run)
    for name in ("luspo", "vespo", "two_sided_clip", "offpolicy_mask", "tis_token", "icepop"):
        assert f"actor_rollout_ref.actor.policy_loss.loss_mode='bandpo.{name}'" in command.overrides(
            VerlRun(model="m", method=name, train_files="t.parquet", val_files="v.parquet", output_dir="o")
        )
