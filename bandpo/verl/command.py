"""A run of verl's trainer (`bandpo.verl.spec.VerlRun`) -> its command line: Hydra overrides for
``python -m verl.trainer.main_ppo`` and the environment of the driver and every Ray worker.

Every method runs through the same verl entry point and differs only in ``policy_loss.loss_mode=bandpo.<method>``
and its parameters; a loss verl ships (kind "verl", `bandpo.verl.losses`) runs as verl's own loss_mode
(``dppo_kl``, ``clip_cov``, ...) with its parameters as verl's own config keys (`method_overrides`).

How the method's parameters reach verl's workers: ``BANDPO_METHOD_CONFIG`` (inline JSON, see
`bandpo.verl.plugin`) is added to ``ray_kwargs.ray_init.runtime_env.env_vars`` (verl merges that mapping into the
runtime_env of its ``ray.init``, so every worker of the job inherits it), together with
``VERL_USE_EXTERNAL_MODULES=bandpo.verl.plugin`` (the fallback registration for verl without entry points),
``BANDPO_METHOD_MODULES`` (the ``method_modules`` of your own methods, when there are any),
``BANDPO_GRADER_MODE`` (the reward's grader, `bandpo.grader`) and ``VERL_FILE_LOGGER_PATH`` (the "file"
logger's JSONL, written by verl's driver actor). The same variables are returned by `env` for the launching shell.
Under ``ray job submit``, Ray (>= 2.8) merges the job's runtime_env with the one verl gives ``ray.init`` and raises
on conflicting keys: do not set these variables to other values in ``--runtime-env-json``.

    run = VerlRun(model="Qwen/Qwen2.5-3B-Instruct", method="bandpo", params={"divergence": "kl"}, seed=0,
                  train_files="resources/data/train.parquet", val_files="resources/data/val.parquet",
                  output_dir="results/gpu/runs/qwen3b/bandpo/seed0")
    subprocess.run(command(run), env={**os.environ, **env(run)}, check=True)
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
from collections.abc import Sequence
from typing import Any

from bandpo import methods
from bandpo.core import numerics
from bandpo.core.protocol import mlflow_store
from bandpo.verl.spec import VerlRun

__all__ = ["PLUGIN_MODULE", "PROTOCOL_KEYS", "VERL_ONLY_PROTOCOL", "command", "env", "overrides", "shell_command"]

_ACTOR = "actor_rollout_ref.actor"
_ROLLOUT = "actor_rollout_ref.rollout"
# The protocol's knobs (bandpo.core.protocol.Protocol, the run's model, method and seed), -> verl's config keys.
# docs/protocol-fields.md is this table with defaults and meanings (tests/unit/test_verl_plugin.py keeps it true).
PROTOCOL_KEYS: dict[str, tuple[str, ...]] = {
    "model": ("actor_rollout_ref.model.path",),
    "method": (f"{_ACTOR}.policy_loss.loss_mode",),
    "seed": ("data.seed", f"{_ACTOR}.data_loader_seed", f"{_ACTOR}.fsdp_config.seed", f"{_ROLLOUT}.seed"),
    "steps": ("trainer.total_training_steps",),
    "prompts_per_step": ("data.train_batch_size",),
    "samples_per_prompt": (f"{_ROLLOUT}.n",),
    "temperature": (f"{_ROLLOUT}.temperature",),
    "max_new_tokens": ("data.max_response_length", f"{_ACTOR}.loss_scale_factor"),
    "updates_per_step": (f"{_ACTOR}.ppo_mini_batch_size",),
    "ppo_epochs": (f"{_ACTOR}.ppo_epochs",),
    "lr": (f"{_ACTOR}.optim.lr",),
    "lr_end": (f"{_ACTOR}.optim.min_lr_ratio",),
    "weight_decay": (f"{_ACTOR}.optim.weight_decay",),
    "grad_clip": (f"{_ACTOR}.grad_clip",),
    "kl_coef": (f"{_ACTOR}.kl_loss_coef",),
    "loss_agg_mode": (f"{_ACTOR}.loss_agg_mode",),
    "val_every": ("trainer.test_freq",),
    "val_k": (f"{_ROLLOUT}.val_kwargs.n",),
    "dual_clip_c": (f"{_ACTOR}.clip_ratio_c",),
    "trackers": ("trainer.logger",),
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

ALWAYS_LOGGERS = ("console", "file")
"""verl's trainer.logger of every run: the console, and the "file" logger whose JSONL `bandpo.verl.merge` reads."""
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
    if isinstance(value, dict):  # Hydra's dict keys are unquoted: plain names only
        bad = [k for k in value if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", str(k))]
        if bad:
            raise ValueError(f"cannot pass the key(s) {bad} through a Hydra override (not a plain name)")
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if "'" in text or "\\" in text or "${" in text:
        raise ValueError(f"cannot pass {text!r} through a Hydra override (contains ', \\ or ${{)")
    return f"'{text}'"


def resolved_params(run: VerlRun) -> dict[str, Any]:
    """The run's method parameters with every default filled in, validated by the method's config (the user's
    method modules imported first); ValueError naming the method and parameter, or a method that requires a token
    input (`bandpo.methods.MethodConfig.requires`: verl's policy loss receives none)."""
    methods.load_method_modules(run.method_modules)
    config = methods.make_config(run.method, run.params)
    if config.requires:
        raise ValueError(
            f"method {run.method!r} requires the token input(s) {list(config.requires)}, which verl's policy loss "
            "does not receive (it gets the old and new log-probs, advantages, mask and rollout weights): train it "
            "with the local trainer"
        )
    return config.to_dict()


def loss_mode(run: VerlRun) -> str:
    """verl's loss_mode: ``bandpo.<method>``, or verl's own name for a method of kind "verl" (a loss verl ships,
    `bandpo.verl.losses`: ``dppo_kl`` runs as verl's ``dppo_kl``)."""
    m = methods.get_method(run.method)
    return m.config_cls.verl_loss_mode if m.kind == "verl" else f"bandpo.{run.method}"


def method_overrides(run: VerlRun) -> dict[str, Any]:
    """verl's config keys of a method of kind "verl" (its parameters are verl's own knobs, e.g.
    ``actor.clip_ratio_low`` / ``actor.policy_loss.clip_cov_ratio`` / ``actor.tau_pos``) with their values; {} for
    the suite's own methods (their parameters travel in BANDPO_METHOD_CONFIG)."""
    m = methods.get_method(run.method)
    if m.kind != "verl":
        return {}
    settings = methods.SurrogateConfig(loss_agg_mode=run.loss_agg_mode, dual_clip_c=run.dual_clip_c)
    return {f"{_ACTOR}.{k}": v for k, v in m.config(resolved_params(run)).verl_keys(settings).items()}


def method_config_json(run: VerlRun) -> str:
    """The value of BANDPO_METHOD_CONFIG: ``{"<method>": {all parameters, defaults included}}``, compact JSON."""
    return json.dumps({run.method: resolved_params(run)}, sort_keys=True, separators=(",", ":"))


def env(run: VerlRun) -> dict[str, str]:
    """Environment variables for the driver and (through Ray's runtime_env) for every worker, the numerics
    settings among them (`bandpo.core.numerics.env`: Ray workers import torch before any module of ours)."""
    own = {
        **numerics.env(),
        _METHOD_CONFIG_ENV: method_config_json(run),
        "VERL_USE_EXTERNAL_MODULES": ",".join([PLUGIN_MODULE, *run.verl_modules]),
        "VERL_FILE_LOGGER_PATH": os.path.join(run.output_dir, "verl_metrics.jsonl"),
        "BANDPO_GRADER_MODE": run.grader_mode,
    }
    if run.method_modules:
        own[methods.METHOD_MODULES_ENV] = os.pathsep.join(run.method_modules)
    own.update(tracker_env(run))
    clash = sorted(set(own) & set(run.env_vars))
    if clash:
        raise ValueError(f"env_vars may not set {clash}: the command sets them itself")
    return {**own, **{str(k): str(v) for k, v in run.env_vars.items()}}


def tracker_env(run: VerlRun) -> dict[str, str]:
    """Where verl's trackers of ``run.trackers`` write: into the run's folder, as the local trainer's do
    (`bandpo.train.trackers`): ``TENSORBOARD_DIR`` = <output_dir>/tensorboard, ``MLFLOW_TRACKING_URI`` = the run's
    SQLite store <output_dir>/mlruns/mlflow.db (`bandpo.core.protocol.mlflow_store`; its folder made by
    `bandpo.verl.launch`) unless the user's environment sets one (verl's defaults: tensorboard_log/<project>/<run> and
    /tmp/mlruns.db)."""
    out = {}
    if "tensorboard" in run.trackers:
        out["TENSORBOARD_DIR"] = os.path.join(os.path.abspath(run.output_dir), "tensorboard")
    if "mlflow" in run.trackers and "MLFLOW_TRACKING_URI" not in os.environ:
        out["MLFLOW_TRACKING_URI"] = mlflow_store(run.output_dir)
    return out


def protocol_overrides(run: VerlRun) -> dict[str, Any]:
    """verl's config keys of the protocol fields (`PROTOCOL_KEYS`, `VERL_ONLY_PROTOCOL`) with their values: the one
    place where a project name becomes a verl key. Values are the fields' own, except ``method`` (`loss_mode`:
    ``bandpo.<method>`` or verl's own loss), ``updates_per_step`` (verl's mini-batch size in prompts:
    prompts_per_step / updates_per_step), ``lr_end`` (verl's min_lr_ratio = lr_end / lr; absent when None) and
    ``trackers`` (verl's trainer.logger: "console" and "file", which every run has, then the trackers)."""
    keys = {**PROTOCOL_KEYS, **VERL_ONLY_PROTOCOL}
    values = {name: getattr(run, name) for name in keys}
    values["method"] = loss_mode(run)
    values["updates_per_step"] = run.prompts_per_step // run.updates_per_step
    values["lr_end"] = None if run.lr_end is None else run.lr_end / run.lr
    values["trackers"] = [*ALWAYS_LOGGERS, *run.trackers]
    return {
        key: value
        for name, value in values.items()
        if not (name == "lr_end" and value is None)  # min_lr_ratio is in verl's config (null by default)
        for key in keys[name]
    }


# The hf rollout's reproducibility (bandpo.verl.hf_rollout): verl's request ids det-<priority> instead of uuid4s
# (rollout.full_determinism, which also gives the workers a fixed PYTHONHASHSEED) and the agent loop of
# bandpo.verl.cpu, whose priority is the sample's place in the step; the server samples in that order.
HF_AGENT_LOOP_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent_loops.yaml")
HF_DETERMINISM: dict[str, Any] = {
    f"{_ROLLOUT}.full_determinism": True,
    f"{_ROLLOUT}.agent.agent_loop_config_path": HF_AGENT_LOOP_CONFIG,
    f"{_ROLLOUT}.agent.default_agent_loop": "bandpo_single_turn",
}


# verl's deterministic settings (VerlRun.deterministic): the rollout's (vLLM: VLLM_BATCH_INVARIANT, a seed per
# request, request ids and routing fixed; main_ppo also fixes PYTHONHASHSEED) and the FSDP engines' of the actor and
# the reference (enable_full_determinism). The hf rollout's own HF_DETERMINISM sets the first already.
DETERMINISM: dict[str, Any] = {
    f"{_ROLLOUT}.full_determinism": True,
    f"{_ACTOR}.fsdp_config.full_determinism": True,
    "actor_rollout_ref.ref.fsdp_config.full_determinism": True,
}


def _base_overrides(run: VerlRun) -> dict[str, Any]:
    """The settings every run shares beyond the protocol: GRPO advantages, verl's data, model, actor, rollout and
    trainer keys."""
    actor, rollout = _ACTOR, _ROLLOUT
    return {
        # algorithm
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": True,
        "algorithm.use_kl_in_reward": False,
        # data
        "data.train_files": _files(run.train_files),
        "data.val_files": _files(run.val_files),
        "data.filter_overlong_prompts": True,
        "data.truncation": "error",
        # model
        "actor_rollout_ref.model.use_remove_padding": True,
        "actor_rollout_ref.model.enable_gradient_checkpointing": True,
        # actor: the shared PPO settings beyond the protocol's
        f"{actor}.use_dynamic_bsz": True,
        f"{actor}.ppo_max_token_len_per_gpu": run.ppo_max_token_len_per_gpu,
        f"{actor}.optim.lr_scheduler_type": "constant" if run.lr_end is None else "cosine",
        f"{actor}.optim.lr_warmup_steps_ratio": 0.0,
        f"{actor}.use_kl_loss": run.kl_coef > 0,
        f"{actor}.checkpoint.save_contents": ["model", "optimizer", "extra", "hf_model"],
        # rollout
        f"{rollout}.name": run.rollout_name,
        f"{rollout}.tensor_model_parallel_size": run.rollout_tensor_parallel_size,
        f"{rollout}.gpu_memory_utilization": run.gpu_memory_utilization,
        # trainer
        "trainer.nnodes": run.nnodes,
        "trainer.n_gpus_per_node": run.n_gpus_per_node,
        "trainer.project_name": run.project_name,
        "trainer.experiment_name": run.run_name,
        "trainer.default_local_dir": os.path.join(run.output_dir, "checkpoints"),
        "trainer.save_freq": run.save_freq,
        # held-out measurements (val_every; else evaluation is lm-eval's alone, on the saved checkpoints): k samples a
        # validation problem, drawn as the rollouts are; before training only in a fresh run, not a resumed one
        "trainer.val_before_train": run.val_every > 0 and not resuming(run),
        f"{rollout}.val_kwargs.do_sample": True,
        f"{rollout}.val_kwargs.temperature": run.temperature,
        f"{rollout}.val_kwargs.top_p": run.top_p,
    }


CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"  # verl's: the last saved step, under checkpoints/


def resuming(run: VerlRun) -> bool:
    """Whether the run's folder holds a checkpoint verl resumes from (its resume_mode auto)."""
    return os.path.exists(os.path.join(run.output_dir, "checkpoints", CHECKPOINT_TRACKER))


def overrides(run: VerlRun) -> list[str]:
    """The Hydra overrides, ``key=value`` strings, for verl's ``ppo_trainer`` config."""
    o = _base_overrides(run)
    o.update(protocol_overrides(run))
    # verl's own clip ratios do not drive bandpo.* losses; mirror the method's fixed eps so verl's dumped config
    # does not show a different interval than the one trained.
    params = resolved_params(run)
    if "eps_low" in params and "eps_high" in params:
        o[f"{_ACTOR}.clip_ratio_low"] = params["eps_low"]
        o[f"{_ACTOR}.clip_ratio_high"] = params["eps_high"]
    o.update(method_overrides(run))  # a loss verl ships: its parameters are verl's own config keys
    if run.reward_fn_path is not None:
        o["reward.custom_reward_function.path"] = run.reward_fn_path
        o["reward.custom_reward_function.name"] = run.reward_fn_name
        o["+reward.custom_reward_function.reward_kwargs.grader_mode"] = run.grader_mode  # in verl's dump too
        if run.val_grader_modes:  # the validation sets graded by their source's rule (verl_reward.py)
            o["+reward.custom_reward_function.reward_kwargs.grader_modes"] = dict(run.val_grader_modes)
    o["hydra.run.dir"] = os.path.join(run.output_dir, "hydra")  # Hydra's own log, else ./outputs/<date>/
    if run.rollout_name == "hf":  # bandpo.verl.cpu's server: a step's requests are served as one batch
        o[f"+{_ROLLOUT}.engine_kwargs.hf.max_batch"] = run.prompts_per_step * run.samples_per_prompt
        if run.val_every:  # a validation pass may hold more requests than a step: gathered whole, then split
            o[f"+{_ROLLOUT}.engine_kwargs.hf.gather_passes"] = True
        o.update(HF_DETERMINISM)
    if run.deterministic:
        o.update(DETERMINISM)
    out = [f"{k}={_hydra_value(v)}" for k, v in o.items()]
    # New keys under the runtime_env struct need Hydra's '+'.
    out += [f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}={_hydra_value(v)}" for k, v in env(run).items()]
    return out + list(run.extra_overrides)


def command(run: VerlRun) -> list[str]:
    """argv of the verl run: ``python -m verl.trainer.main_ppo <overrides>``."""
    return [run.python, "-m", "verl.trainer.main_ppo", *overrides(run)]


def shell_command(run: VerlRun) -> str:
    """The command as one shell line, environment variables first."""
    variables = " ".join(f"{k}={shlex.quote(v)}" for k, v in env(run).items())
    return f"{variables} {shlex.join(command(run))}"


def record(run: VerlRun) -> dict[str, Any]:
    """The run's fields as run.json records them (`bandpo.verl.merge`): the parameters with their defaults."""
    return {**dataclasses.asdict(run), "params": resolved_params(run)}


def _files(files: str | Sequence[str]) -> list[str]:
    return [files] if isinstance(files, str) else list(files)
