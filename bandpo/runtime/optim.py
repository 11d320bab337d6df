"""AdamW for the suite's CPU jobs: torch's algorithm, bit for bit, without ``torch.optim.Optimizer``.

``torch.optim.Optimizer``'s constructor imports ``torch._dynamo`` (its methods are wrapped by
``torch._disable_dynamo``), which costs about 1 s of CPU in every process that builds an optimizer: each training
job and each base-model build of the DAG, where that second is part of the fixed cost per job
(``benchmarks/bench_job_startup.py``). `AdamW` runs the same arithmetic as ``torch.optim.AdamW`` does for CPU
tensors (its single-tensor path: torch picks the foreach and fused kernels for accelerator tensors only), in the
same order, so a run gives the same bits with either (``tests/unit/test_optim.py`` checks parameters and state after
several steps, weight decay groups included). On a GPU it computes the same update one tensor at a time, where
torch would use its foreach kernels (the same arithmetic, other rounding).

Per parameter ``p`` with gradient ``g``, step ``t`` (1-based), learning rate ``lr`` and decay ``wd`` (decoupled):

    p   <- p * (1 - lr wd)
    m   <- m + (1 - b1) (g - m)                 (lerp)
    v   <- b2 v + (1 - b2) g^2
    p   <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)

The interface is the part of ``torch.optim.Optimizer`` the suite uses: ``param_groups`` (a learning rate is set per
step by writing ``group["lr"]``), ``step``, ``zero_grad`` (gradients to None, torch's default), ``state_dict`` /
``load_state_dict`` (torch's layout: ``state`` by parameter index, ``param_groups`` with ``params`` as indices).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["AdamW"]


class AdamW:
    """``torch.optim.AdamW`` (no amsgrad, no maximize) for CPU tensors; see the module docstring."""

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        if not lr >= 0.0:
            raise ValueError(f"invalid learning rate: {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid betas: {betas}")
        if not eps >= 0.0 or not weight_decay >= 0.0:
            raise ValueError(f"invalid eps {eps} or weight_decay {weight_decay}")
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay}
        params = list(params)
        groups = params if params and isinstance(params[0], dict) else [{"params": params}]
        self.param_groups: list[dict[str, Any]] = []
        seen: set[int] = set()
        for g in groups:
            group = {**defaults, **g, "params": list(g["params"])}
            for p in group["params"]:
                if id(p) in seen:
                    raise ValueError("a parameter appears in more than one group")
                seen.add(id(p))
            self.param_groups.append(group)
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def _params(self) -> list[torch.Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state.get(p)
                if state is None:  # torch: a float32 step counter and zeroed moments, made at the first step
                    state = self.state[p] = {
                        "step": torch.tensor(0.0, dtype=torch.float32),
                        "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                        "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                    }
                step_t, exp_avg, exp_avg_sq = state["step"], state["exp_avg"], state["exp_avg_sq"]
                step_t += 1
                if wd != 0:
                    p.mul_(1 - lr * wd)
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step = step_t.item()
                bias_correction1 = 1 - beta1**step
                bias_correction2 = 1 - beta2**step
                step_size = lr / bias_correction1
                denom = (exp_avg_sq.sqrt() / bias_correction2**0.5).add_(eps)
                p.addcdiv_(exp_avg, denom, value=-step_size)

    def zero_grad(self) -> None:
        """Drop the gradients (torch's default, ``set_to_none=True``)."""
        for p in self._params():
            p.grad = None

    def state_dict(self) -> dict[str, Any]:
        index = {id(p): i for i, p in enumerate(self._params())}
        groups, start = [], 0
        for g in self.param_groups:
            groups.append({**{k: v for k, v in g.items() if k != "params"},
                           "params": list(range(start, start + len(g["params"])))})  # fmt: skip
            start += len(g["params"])
        state = {index[id(p)]: {k: v.clone() for k, v in s.items()} for p, s in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = state_dict["param_groups"]
        if [len(g["params"]) for g in groups] != [len(g["params"]) for g in self.param_groups]:
            raise ValueError("the saved optimizer state has other parameter groups than this optimizer")
        params = self._params()
        for mine, saved in zip(self.param_groups, groups, strict=True):
            mine.update({k: (tuple(v) if k == "betas" else v) for k, v in saved.items() if k != "params"})
        self.state = {}
        for i, s in state_dict["state"].items():
            p = params[int(i)]
            self.state[p] = {
                k: (v.to(dtype=torch.float32) if k == "step" else v.to(device=p.device, dtype=p.dtype)).clone()
                for k, v in s.items()
            }
