"""bandpo.runtime.optim.AdamW against torch.optim.AdamW: the same bits, step for step, and no torch._dynamo import."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from bandpo.runtime.optim import AdamW


def _twin_params(seed: int) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter]]:
    gen = torch.Generator().manual_seed(seed)
    shapes = [(7, 5), (5,), (3, 4, 2)]
    a = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
    return a, [torch.nn.Parameter(p.detach().clone()) for p in a]


def _groups(params, decay: float):
    return [{"params": params[:1] + params[2:], "weight_decay": decay}, {"params": params[1:2], "weight_decay": 0.0}]


def _step_both(ours, theirs, pa, pb, gen, lr):
    for g in ours.param_groups + theirs.param_groups:
        g["lr"] = lr
    for p, q in zip(pa, pb, strict=True):
        grad = torch.randn(p.shape, generator=gen) * 3.0
        p.grad, q.grad = grad.clone(), grad.clone()
    pa[1].grad = None if lr < 2e-3 else pa[1].grad  # a parameter without a gradient is skipped by both
    pb[1].grad = None if lr < 2e-3 else pb[1].grad
    ours.step()
    theirs.step()


@pytest.mark.parametrize("decay", [0.0, 0.01, 0.1])
def test_adamw_equals_torch_bit_for_bit(decay):
    pa, pb = _twin_params(0)
    kw = {"lr": 3e-3, "betas": (0.9, 0.98), "eps": 1e-8}
    ours, theirs = AdamW(_groups(pa, decay), **kw), torch.optim.AdamW(_groups(pb, decay), **kw)
    gen = torch.Generator().manual_seed(1)
    for step in range(12):
        _step_both(ours, theirs, pa, pb, gen, lr=3e-3 * (1 - step / 20))
        for p, q in zip(pa, pb, strict=True):
            assert torch.equal(p, q), f"step {step}"
    for p, q in zip(pa, pb, strict=True):
        mine, torch_state = ours.state[p], theirs.state[q]
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(mine[key], torch_state[key]), key


def test_state_dict_resume_gives_the_same_bits_and_loads_torch_layout():
    pa, pb = _twin_params(2)
    a, b = AdamW(pa, lr=1e-2), AdamW(pb, lr=1e-2)
    gen = torch.Generator().manual_seed(3)
    for _ in range(3):
        _step_both(a, b, pa, pb, gen, lr=1e-2)
    saved = a.state_dict()
    assert sorted(saved["state"]) == [0, 1, 2] and saved["param_groups"][0]["params"] == [0, 1, 2]
    # a fresh optimizer over copies of the parameters, loaded from the state dict, continues as the original
    pc = [torch.nn.Parameter(p.detach().clone()) for p in pa]
    c = AdamW(pc, lr=5.0)
    c.load_state_dict(saved)
    assert c.param_groups[0]["lr"] == 1e-2
    for p, q in zip(pa, pc, strict=True):
        g = torch.randn(p.shape, generator=gen)
        p.grad, q.grad = g.clone(), g.clone()
    a.step()
    c.step()
    for p, q in zip(pa, pc, strict=True):
        assert torch.equal(p, q)
    a.zero_grad()
    assert all(p.grad is None for p in pa) and all(q.grad is not None for q in pc)
    # torch's own state dict loads too (the layout is torch's)
    torch_opt = torch.optim.AdamW([torch.nn.Parameter(p.detach().clone()) for p in pa], lr=1e-2)
    for p in torch_opt.param_groups[0]["params"]:
        p.grad = torch.ones_like(p)
    torch_opt.step()
    d = AdamW([torch.nn.Parameter(p.detach().clone()) for p in pa], lr=1e-2)
    d.load_state_dict(torch_opt.state_dict())
    assert float(d.state[d.param_groups[0]["params"][0]]["step"]) == 1.0


def test_bad_settings_and_mismatched_state_are_refused():
    p = [torch.nn.Parameter(torch.ones(2))]
    with pytest.raises(ValueError, match="learning rate"):
        AdamW(p, lr=-1.0)
    with pytest.raises(ValueError, match="betas"):
        AdamW(p, betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="more than one group"):
        AdamW([{"params": p}, {"params": p}])
    two = AdamW([{"params": [torch.nn.Parameter(torch.ones(1))]}, {"params": p}])
    with pytest.raises(ValueError, match="other parameter groups"):
        AdamW(p).load_state_dict(two.state_dict())


def test_no_dynamo_import():
    """The point of the class: building and stepping it leaves torch._dynamo unimported (torch.optim's does not)."""
    code = (
        "import sys, torch\n"
        "from bandpo.runtime.optim import AdamW\n"
        "p = torch.nn.Parameter(torch.ones(3)); o = AdamW([p]); p.grad = torch.ones(3); o.step(); o.zero_grad()\n"
        "o.load_state_dict(o.state_dict())\n"
        "print('torch._dynamo' in sys.modules)\n"
        "torch.optim.AdamW([p])\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
