"""One run of the suite's sweep -> the verl command line (Hydra overrides for ``python -m verl.trainer.main_ppo``).

The defaults are the BandPO paper's protocol (arXiv 2603.04918): GRPO outcome advantages, 256 prompts x 16 rollouts
per step, mini-batches of 64 prompts (4 optimizer updates per step), AdamW lr 1e-6 constant (no warmup), weight
decay 0.01, grad clip 1.0, k3 ("low_var_kl") KL loss 0.001, no entropy bonus, dual clip c = 10, seq-mean-token-mean,
prompts <= 1024 and responses <= 4096 tokens, temperature 1.0, top_p 1.0, 10 epochs, one node of 8 GPUs, the +1 / -1
reward of the paper's grader, verl's math_dapo rule (``grader_mode``).
Every method runs through the same verl entry point and differs only in ``policy_loss.loss_mode=bandpo.<method>``
and its parameters; a loss verl ships (kind "verl", `bandpo.verl.losses`) runs as verl's own loss_mode
(``dppo_kl``, ``clip_cov``, ...) with its parameters as verl's own config keys (`VerlRun.method_overrides`).

How the method's parameters reach verl's workers: ``BANDPO_METHOD_CONFIG`` (inline JSON, see
`bandpo.verl.plugin`) is added to ``ray_kwargs.ray_init.runtime_env.env_vars`` (verl merges that mapping into the
runtime_env of its ``ray.init``, so every worker of the job inherits it), together with
``VERL_USE_EXTERNAL_MODULES=bandpo.verl.plugin`` (the fallback registration for verl without entry points),
``BANDPO_METHOD_MODULES`` (the ``method_modules`` of your own methods, when there are any),
``BANDPO_GRADER_MODE`` (the reward's grader, `bandpo.grader`) and ``VERL_FILE_LOGGER_PATH`` (the "file"
logger's JSONL, written by verl's driver actor). The same variables are
returned by `VerlRun.env` for the launching shell. Under ``ray job submit``, Ray (>= 2.8) merges the job's
runtime_env with the one verl gives ``ray.init`` and raises on conflicting keys: do not set these variables to other
values in ``--runtime-env-json``.

    run = VerlRun(model="Qwen/Qwen2.5-3B-Instruct", method="bandpo", params={"divergence": "kl"}, seed=0,
                  train_files="resources/data/train.parquet", val_files="resources/data/val.parquet",
                  output_dir="results/gpu/runs/qwen3b/bandpo/seed0")
    subprocess.run(run.command(), env={**os.environ, **run.env()}, check=True)
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bandpo import methods
from bandpo.core import numerics
from bandpo.core.options import unknown_names
from bandpo.grader import MODES as GRADER_MODES

__all__ = ["PLUGIN_MODULE", "PROTOCOL_KEYS", "VERL_ONLY_PROTOCOL", "VerlRun"]

_ACTOR = "actor_rollout_ref.actor"
_ROLLOUT = "actor_rollout_ref.rollout"
# The protocol's knobs, named as the local trainer names them (bandpo.train.loop.TrainConfig), -> verl's config keys.
# docs/protocol-fields.md is this table with defaults and meanings (tests/unit/test_verl_plugin.py keeps it true).
PROTOCOL_KEYS: dict[str, tuple[str, ...]] = {
    "model": ("actor_rollout_ref.model.path",),
    "method": (f"{_ACTOR}.policy_loss.loss_mode",),
    "seed": ("data.seed", f"{_ACTOR}.data_loader_seed", f"{_ACTOR}.fsdp_config.seed", f"{_ROLLOUT}.seed"),
    "steps": ("trainer.total_training_steps",),
    "prompts_per_step": ("data.train_batch_size",),
    "samples_per_prompt": (f"{_ROLLOUT}.n",),
    "temperature": (f"{_ROLLOUT}.temperature",),
    "max_new_tokens": ("data.max_response_length",),
    "updates_per_step": (f"{_ACTOR}.ppo_mini_batch_size",),
    "ppo_epochs": (f"{_ACTOR}.ppo_epochs",),
    "lr": (f"{_ACTOR}.optim.lr",),
    "lr_end": (f"{_ACTOR}.optim.min_lr_ratio",),
    "weight_decay": (f"{_ACTOR}.optim.weight_decay",),
    "grad_clip": (f"{_ACTOR}.grad_clip",),
    "kl_coef": (f"{_ACTOR}.kl_loss_coef",),
    "loss_agg_mode": (f"{_ACTOR}.loss_agg_mode",),
    "dual_clip_c": (f"{_ACTOR}.clip_ratio_c",),
}
# Protocol knobs only verl has (the local trainer: k3, no entropy bonus, plain softmax sampling, no prompt limit,
# steps instead of epochs, no lr warmup).
VERL_ONLY_PROTOCOL: dict[str, tuple[str, ...]] = {
    "kl_loss_type": (f"{_ACTOR}.kl_loss_type",),
    "entropy_coeff": (f"{_ACTOR}.entropy_coeff",),
    "top_p": (f"{_ROLLOUT}.top_p",),
    "max_prompt_length": ("data.max_prompt_length",),
    "total_epochs": ("trainer.total_epochs",),
    "lr_warmup_steps": (f"{_ACTOR}.optim.lr_warmup_steps",),
}

PLUGIN_MODULE = "bandpo.verl.plugin"
_METHOD_CONFIG_ENV = "BANDPO_METHOD_CONFIG"  # == bandpo.verl.plugin.ENV_VAR (not imported: that imports verl)


def _hydra_value(value: Any) -> str:
    """A Python value as a Hydra override value (strings single-quoted so that JSON, commas, ':' stay literal)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    text = str(value)
    if "'" in text or "\\" in text or "${" in text:
        raise ValueError(f"cannot pass {text!r} through a Hydra override (contains ', \\ or ${{)")
    return f"'{text}'"


@dataclass
class VerlRun:
    """One run of the sweep: model x method (with its parameters) x seed, plus batch and cluster settings.

    Required: ``model`` (HF id or local path), ``method`` (a registered name), ``train_files`` / ``val_files``
    (verl parquet files, one path or several), ``output_dir`` (the run directory: checkpoints and the verl JSONL
    log go there). Everything else defaults to the paper's protocol; ``extra_overrides`` are appended last, so
    they win (e.g. the DAPO recipe's dynamic sampling and overlong penalty).
    """

    model: str
    method: str
    train_files: str | Sequence[str]
    val_files: str | Sequence[str]
    output_dir: str
    params: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    # --- the protocol, in the local trainer's vocabulary (bandpo.train.loop.TrainConfig); PROTOCOL_KEYS maps each name
    # to
    # verl's config key(s), docs/protocol-fields.md is the table
    prompts_per_step: int = 256  # prompts per step (verl: data.train_batch_size)
    samples_per_prompt: int = 16  # responses per prompt, the GRPO group (verl: rollout.n)
    updates_per_step: int = 4  # optimizer updates per step: mini-batches of prompts_per_step / updates_per_step prompts
    ppo_epochs: int = 1
    lr: float = 1e-6
    lr_end: float | None = None  # None: constant lr (the paper); else a half-cosine decay from lr to lr_end over
    # the run (verl's cosine schedule, min_lr_ratio = lr_end / lr): the nearest verl has to the local trainer's
    # linear lr -> lr_end decay
    lr_warmup_steps: int = 0  # linear warmup from 0 to lr over this many training steps; 0 = none (the paper). verl:
    # optim.lr_warmup_steps, where <= 0 hands over to lr_warmup_steps_ratio, which VerlRun sets to 0.0
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    kl_coef: float = 0.001  # k3 KL-to-reference loss coefficient; 0 = off (use_kl_loss false: no reference model)
    kl_loss_type: str = "low_var_kl"  # k3
    entropy_coeff: float = 0.0
    dual_clip_c: float = methods.DEFAULT_DUAL_CLIP_C  # dual clip c for negative advantages (verl: clip_ratio_c)
    loss_agg_mode: str = "seq-mean-token-mean"
    max_prompt_length: int = 1024
    max_new_tokens: int = 4096  # longest response (verl: data.max_response_length)
    temperature: float = 1.0
    top_p: float = 1.0
    total_epochs: int = 10
    steps: int | None = None  # rollout batches (verl: trainer.total_training_steps); None: total_epochs decides
    # --- cluster and memory (not part of the protocol)
    nnodes: int = 1
    n_gpus_per_node: int = 8
    rollout_name: str = "vllm"
    rollout_tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.6
    ppo_max_token_len_per_gpu: int = 16384  # dynamic batch size: tokens per micro-batch
    save_freq: int = 100  # steps; the last step is always saved (as an HF model too) when > 0
    # --- reward, logging
    reward_fn_path: str | None = None  # a Python file with the training grader; None = verl's default for the data
    reward_fn_name: str = "compute_score"
    # bandpo.grader's mode for the reward (BANDPO_GRADER_MODE in every worker, and the reward function's
    # grader_mode keyword when reward_fn_path is set): the paper's rule, verl's math_dapo, by default
    grader_mode: str = "math-dapo"
    project_name: str = "bandpo-bench"
    experiment_name: str | None = None  # default: <model basename>-<method>-seed<seed>
    logger: Sequence[str] = ("console", "file")
    python: str = "python"
    # modules of your own that register methods (names, or .py paths made absolute here): BANDPO_METHOD_MODULES
    method_modules: Sequence[str] = ()
    # backend modules verl imports in every process after bandpo.verl.plugin (VERL_USE_EXTERNAL_MODULES), e.g. the
    # cpu platform and hf rollout of bandpo.verl.cpu
    verl_modules: Sequence[str] = ()
    env_vars: Mapping[str, str] = field(default_factory=dict)  # extra variables for the driver and every worker
    # Hydra overrides appended last; a list inside the list is spliced in (a YAML alias can share a group of them)
    extra_overrides: Sequence[str | Sequence[str]] = ()

    def __post_init__(self) -> None:
        self.extra_overrides = [
            o for item in self.extra_overrides for o in ([item] if isinstance(item, str) else list(item))
        ]
        self.method_modules = [os.path.abspath(m) if m.endswith(".py") else m for m in self.method_modules]
        methods.load_method_modules(self.method_modules)
        self.params = methods.make_config(self.method, self.params).to_dict()  # validates method + parameters
        if self.grader_mode not in GRADER_MODES:
            raise ValueError(f"grader_mode {self.grader_mode!r} is not one of {', '.join(GRADER_MODES)}")
        if self.loss_agg_mode not in methods.AGG_MODES:
            raise ValueError(f"loss_agg_mode {self.loss_agg_mode!r} is not one of {', '.join(methods.AGG_MODES)}")
        if self.lr_end is not None and not 0 < self.lr_end <= self.lr:
            raise ValueError(f"lr_end must be in (0, lr = {self.lr}], got {self.lr_end}")
        if self.dual_clip_c <= 1.0:
            raise ValueError(f"dual_clip_c must be > 1 (verl's clip_ratio_c), got {self.dual_clip_c}")
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0, got {self.kl_coef}")
        if self.lr_warmup_steps < 0:
            raise ValueError(f"lr_warmup_steps must be >= 0 (0: no warmup), got {self.lr_warmup_steps}")
        for name in ("prompts_per_step", "samples_per_prompt", "updates_per_step", "ppo_epochs", "total_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.prompts_per_step % self.updates_per_step:
            raise ValueError(
                f"prompts_per_step ({self.prompts_per_step}) must be a multiple of updates_per_step "
                f"({self.updates_per_step}): verl counts a mini-batch in prompts"
            )

    @classmethod
    def from_mapping(cls, spec: Mapping[str, Any]) -> VerlRun:
        """Build from a sweep entry (e.g. YAML); unknown keys raise ValueError with close matches."""
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = [k for k in spec if k not in known]
        if unknown:
            raise ValueError(f"unknown verl run key(s) {unknown_names(unknown, known)}; valid: {', '.join(known)}")
        return cls(**spec)

    # ------------------------------------------------------------------------------------------------------------

    @property
    def loss_mode(self) -> str:
        """verl's loss_mode: ``bandpo.<method>``, or verl's own name for a method of kind "verl" (a loss verl ships,
        `bandpo.verl.losses`: ``dppo_kl`` runs as verl's ``dppo_kl``)."""
        m = methods.get_method(self.method)
        return m.config_cls.verl_loss_mode if m.kind == "verl" else f"bandpo.{self.method}"

    def method_overrides(self) -> dict[str, Any]:
        """verl's config keys of a method of kind "verl" (its parameters are verl's own knobs, e.g.
        ``actor.clip_ratio_low`` / ``actor.policy_loss.clip_cov_ratio`` / ``actor.tau_pos``) with their values; {} for
        the suite's own methods (their parameters travel in BANDPO_METHOD_CONFIG)."""
        m = methods.get_method(self.method)
        if m.kind != "verl":
            return {}
        settings = methods.SurrogateConfig(loss_agg_mode=self.loss_agg_mode, dual_clip_c=self.dual_clip_c)
        return {f"{_ACTOR}.{k}": v for k, v in m.config(self.params).verl_keys(settings).items()}

    @property
    def run_name(self) -> str:
        if self.experiment_name:
            return self.experiment_name
        return f"{os.path.basename(self.model.rstrip('/'))}-{self.method}-seed{self.seed}"

    def method_config_json(self) -> str:
        """The value of BANDPO_METHOD_CONFIG: ``{"<method>": {all parameters, defaults included}}``, compact JSON."""
        return json.dumps({self.method: self.params}, sort_keys=True, separators=(",", ":"))

    def env(self) -> dict[str, str]:
        """Environment variables for the driver and (through Ray's runtime_env) for every worker, the numerics
        settings among them (`bandpo.core.numerics.env`: Ray workers import torch before any module of ours)."""
        own = {
            **numerics.env(),
            _METHOD_CONFIG_ENV: self.method_config_json(),
            "VERL_USE_EXTERNAL_MODULES": ",".join([PLUGIN_MODULE, *self.verl_modules]),
            "VERL_FILE_LOGGER_PATH": os.path.join(self.output_dir, "verl_metrics.jsonl"),
            "BANDPO_GRADER_MODE": self.grader_mode,
        }
        if self.method_modules:
            own[methods.METHOD_MODULES_ENV] = os.pathsep.join(self.method_modules)
        clash = sorted(set(own) & set(self.env_vars))
        if clash:
            raise ValueError(f"env_vars may not set {clash}: VerlRun sets them itself")
        return {**own, **{str(k): str(v) for k, v in self.env_vars.items()}}

    def protocol_overrides(self) -> dict[str, Any]:
        """verl's config keys of the protocol fields (`PROTOCOL_KEYS`, `VERL_ONLY_PROTOCOL`) with their values: the one
        place where a project name becomes a verl key. Values are the fields' own, except ``method``
        (`loss_mode`: ``bandpo.<method>`` or verl's own loss), ``updates_per_step`` (verl's mini-batch size in
        prompts: prompts_per_step / updates_per_step) and ``lr_end`` (verl's min_lr_ratio = lr_end / lr; absent when
        None)."""
        keys = {**PROTOCOL_KEYS, **VERL_ONLY_PROTOCOL}
        values = {name: getattr(self, name) for name in keys}
        values["method"] = self.loss_mode
        values["updates_per_step"] = self.prompts_per_step // self.updates_per_step
        values["lr_end"] = None if self.lr_end is None else self.lr_end / self.lr
        return {
            key: value
            for name, value in values.items()
            if not (name == "lr_end" and value is None)  # min_lr_ratio is in verl's config (null by default)
            for key in keys[name]
        }

    def overrides(self) -> list[str]:
        """The Hydra overrides, ``key=value`` strings, for verl's ``ppo_trainer`` config."""
        actor, rollout = _ACTOR, _ROLLOUT
        o: dict[str, Any] = {
            # algorithm
            "algorithm.adv_estimator": "grpo",
            "algorithm.norm_adv_by_std_in_grpo": True,
            "algorithm.use_kl_in_reward": False,
            # data
            "data.train_files": list(self._files(self.train_files)),
            "data.val_files": list(self._files(self.val_files)),
            "data.filter_overlong_prompts": True,
            "data.truncation": "error",
            # model
            "actor_rollout_ref.model.use_remove_padding": True,
            "actor_rollout_ref.model.enable_gradient_checkpointing": True,
            # actor: the shared PPO settings beyond the protocol's
            f"{actor}.use_dynamic_bsz": True,
            f"{actor}.ppo_max_token_len_per_gpu": self.ppo_max_token_len_per_gpu,
            f"{actor}.optim.lr_scheduler_type": "constant" if self.lr_end is None else "cosine",
            f"{actor}.optim.lr_warmup_steps_ratio": 0.0,
            f"{actor}.use_kl_loss": self.kl_coef > 0,
            f"{actor}.checkpoint.save_contents": ["model", "optimizer", "extra", "hf_model"],
            # rollout
            f"{rollout}.name": self.rollout_name,
            f"{rollout}.tensor_model_parallel_size": self.rollout_tensor_parallel_size,
            f"{rollout}.gpu_memory_utilization": self.gpu_memory_utilization,
            # trainer
            "trainer.nnodes": self.nnodes,
            "trainer.n_gpus_per_node": self.n_gpus_per_node,
            "trainer.project_name": self.project_name,
            "trainer.experiment_name": self.run_name,
            "trainer.logger": list(self.logger),
            "trainer.default_local_dir": os.path.join(self.output_dir, "checkpoints"),
            "trainer.save_freq": self.save_freq,
            "trainer.test_freq": -1,  # evaluation is lm-eval's job, on the saved checkpoints
            "trainer.val_before_train": False,
        }
        o.update(self.protocol_overrides())
        # verl's own clip ratios do not drive bandpo.* losses; mirror the method's fixed eps so verl's dumped
        # config does not show a different interval than the one trained.
        if "eps_low" in self.params and "eps_high" in self.params:
            o[f"{actor}.clip_ratio_low"] = self.params["eps_low"]
            o[f"{actor}.clip_ratio_high"] = self.params["eps_high"]
        o.update(self.method_overrides())  # a loss verl ships: its parameters are verl's own config keys
        if self.reward_fn_path is not None:
            o["reward.custom_reward_function.path"] = self.reward_fn_path
            o["reward.custom_reward_function.name"] = self.reward_fn_name
            o["+reward.custom_reward_function.reward_kwargs.grader_mode"] = self.grader_mode  # in verl's dump too
        o["hydra.run.dir"] = os.path.join(self.output_dir, "hydra")  # Hydra's own log, else ./outputs/<date>/
        if self.rollout_name == "hf":  # bandpo.verl.cpu's server: a step's requests are served as one batch
            o[f"+{rollout}.engine_kwargs.hf.max_batch"] = self.prompts_per_step * self.samples_per_prompt
        out = [f"{k}={_hydra_value(v)}" for k, v in o.items()]
        # New keys under the runtime_env struct need Hydra's '+'.
        out += [f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}={_hydra_value(v)}" for k, v in self.env().items()]
        return out + list(self.extra_overrides)

    def command(self) -> list[str]:
        """argv of the verl run: ``python -m verl.trainer.main_ppo <overrides>``."""
        return [self.python, "-m", "verl.trainer.main_ppo", *self.overrides()]

    def shell_command(self) -> str:
        """The command as one shell line, environment variables first."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env().items())
        return f"{env} {shlex.join(self.command())}"

    @staticmethod
    def _files(files: str | Sequence[str]) -> Sequence[str]:
        return [files] if isinstance(files, str) else list(files)
