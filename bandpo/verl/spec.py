"""One run of verl's trainer: `VerlRun`, the shared protocol (`bandpo.core.protocol.Protocol`) extended with the
fields only verl has (its own protocol knobs, the cluster, the reward, logging).

A run of the workflow is one spec file of these fields, written by the run plan (`bandpo.plan.runs`) and read by
the job (``python -m bandpo.verl.launch --spec FILE``, `read_spec`), which turns it into verl's command line
(`bandpo.verl.command`). Imports nothing heavy (no torch, no method registry): the run plan checks every run with
`VerlRun.validate` at DAG start. The defaults of the shared fields are the embedded CPU profile's; the paper's
protocol is written out in ``config/gpu.yaml``.

    run = VerlRun(model="Qwen/Qwen2.5-3B-Instruct", method="bandpo", params={"divergence": "kl"}, seed=0,
                  train_files="resources/data/train.parquet", val_files="resources/data/val.parquet",
                  output_dir="results/gpu/runs/qwen3b/bandpo/seed0", prompts_per_step=256, samples_per_prompt=16)
    subprocess.run(command.command(run), env={**os.environ, **command.env(run)}, check=True)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bandpo.core import files
from bandpo.core.options import check_fields
from bandpo.core.protocol import Protocol, raise_problems
from bandpo.grader.config import MODES as GRADER_MODES

# Fields the run plan sets for every run (the run, its data and folders, the grader, the user's modules): not
# settings of the config's ``train:``.
RUN_FIELDS = ("model", "method", "params", "seed", "train_files", "val_files", "output_dir", "reward_fn_path",
              "method_modules", "grader_mode", "val_grader_modes")  # fmt: skip


@dataclass(kw_only=True)
class VerlRun(Protocol):
    """One run of the sweep through verl: model x method (with its parameters) x seed, the protocol, and verl's own
    settings. Required: ``model`` (HF id or local path), ``method`` (a registered name), ``train_files`` /
    ``val_files`` (verl parquet files, one path or several), ``output_dir`` (the run directory: checkpoints and the
    verl JSONL log go there). ``extra_overrides`` are appended last to verl's command line, so they win (e.g. the
    DAPO recipe's dynamic sampling and overlong penalty)."""

    model: str
    method: str
    train_files: str | Sequence[str]
    val_files: str | Sequence[str]
    output_dir: str
    params: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    # --- protocol knobs only verl has (the local trainer: k3, no entropy bonus, plain softmax sampling, no prompt
    # limit, steps instead of epochs, no lr warmup); defaults: the paper's
    lr_warmup_steps: int = 0
    """Linear warmup from 0 to lr over this many training steps; 0 = none (the paper). verl: optim.lr_warmup_steps,
    where <= 0 hands over to lr_warmup_steps_ratio, which the command sets to 0.0."""
    kl_loss_type: str = "low_var_kl"
    """verl's KL estimator of the KL loss (low_var_kl: k3)."""
    entropy_coeff: float = 0.0
    """Entropy bonus coefficient."""
    top_p: float = 1.0
    """Nucleus sampling of the rollouts (1.0: plain softmax)."""
    max_prompt_length: int = 1024
    """Longest prompt in tokens (verl: data.max_prompt_length)."""
    total_epochs: int = 10
    """Passes over the training data when ``steps`` is None."""
    # --- cluster and memory (not part of the protocol)
    nnodes: int = 1
    n_gpus_per_node: int = 8
    rollout_name: str = "vllm"
    """verl's rollout engine: vllm on GPUs; hf with bandpo.verl.cpu's server on CPU."""
    rollout_tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.6
    ppo_max_token_len_per_gpu: int = 16384
    """Dynamic batch size: tokens per micro-batch."""
    save_freq: int = 100
    """Steps between checkpoints; the last step is always saved (as an HF model too) when > 0. A killed run started
    again resumes from its latest checkpoint (verl's resume_mode auto)."""
    val_every: int = 0
    """Steps between held-out measurements (verl's trainer.test_freq): validation mean@k on ``val_files``, before
    training, every ``val_every`` steps and at the last step, sampled as the rollouts are; 0 = none (evaluation is
    then lm-eval's alone). A resumed run does not measure again before training."""
    val_k: int = 8
    """Samples per validation problem of ``val_every`` (verl's rollout.val_kwargs.n: the k of mean@k)."""
    deterministic: bool = False
    """verl's deterministic settings (not part of the protocol: the same algorithm, slower): rollout.full_determinism
    (vLLM's batch-invariant kernels, a seeded sampler per request, fixed request ids and routing) and
    full_determinism of the actor's and the reference's FSDP engines (verl's enable_full_determinism: deterministic
    torch algorithms, cuDNN off, deterministic NCCL and flash-attention). verl's own account: "this will negatively
    impact performance, so only use it for debugging"."""
    # --- reward, logging
    reward_fn_path: str | None = None
    """A Python file with the training grader; None = verl's default for the data."""
    reward_fn_name: str = "compute_score"
    grader_mode: str = "math-dapo"
    """bandpo.grader's mode for the reward (BANDPO_GRADER_MODE in every worker, and the reward function's
    grader_mode keyword when reward_fn_path is set): verl 0.9.1's math_dapo rule by default (the paper's,
    math-dapo-paper, is what config/gpu.yaml sets)."""
    val_grader_modes: Mapping[str, str] = field(default_factory=dict)
    """bandpo.grader's mode for the rows of these data sources (the data set ids of the verl parquet rows, e.g. the
    validation sets), by the reward function's grader_modes keyword; the other rows: grader_mode. Needs
    reward_fn_path."""
    project_name: str = "bandpo-bench"
    experiment_name: str | None = None
    """verl's run name; default <model basename>-<method>-seed<seed>."""
    python: str = "python"
    method_modules: Sequence[str] = ()
    """Modules of your own that register methods (names, or .py paths made absolute here): BANDPO_METHOD_MODULES."""
    verl_modules: Sequence[str] = ()
    """Backend modules verl imports in every process after bandpo.verl.plugin (VERL_USE_EXTERNAL_MODULES), e.g. the
    cpu platform and hf rollout of bandpo.verl.cpu."""
    env_vars: Mapping[str, str] = field(default_factory=dict)
    """Extra variables for the driver and every worker."""
    extra_overrides: Sequence[str | Sequence[str]] = ()
    """Hydra overrides appended last; a list inside the list is spliced in (a YAML alias can share a group of
    them)."""

    def __post_init__(self) -> None:
        self.extra_overrides = [
            o for item in self.extra_overrides for o in ([item] if isinstance(item, str) else list(item))
        ]
        self.method_modules = [os.path.abspath(m) if m.endswith(".py") else m for m in self.method_modules]
        self.trackers, self.verl_modules = list(self.trackers), list(self.verl_modules)  # as a spec file reads back

    def validate(self) -> None:
        """Every field checked, all problems in one ValueError (`problems`)."""
        raise_problems("verl run", self.problems())

    def problems(self) -> list[str]:
        """What is wrong with the settings, one ``field: why`` line each (empty: nothing). The method's name and
        parameters are the method registry's to check (`bandpo.verl.command`, where the job starts)."""
        problems = self.protocol_problems()
        if self.dual_clip_c is None:
            problems.append("dual_clip_c: verl's clip_ratio_c cannot be switched off: give a number > 1")
        if self.lr_end is not None and isinstance(self.lr, (int, float)) and not 0 < self.lr_end <= self.lr:
            problems.append(f"lr_end: must be in (0, lr = {self.lr}] (verl's min_lr_ratio), got {self.lr_end}")
        if self.grader_mode not in GRADER_MODES:
            problems.append(f"grader_mode: must be one of {', '.join(GRADER_MODES)}, got {self.grader_mode!r}")
        for source, mode in dict(self.val_grader_modes).items():
            if mode not in GRADER_MODES:
                problems.append(f"val_grader_modes: {source}: must be one of {', '.join(GRADER_MODES)}, got {mode!r}")
        if self.val_grader_modes and self.reward_fn_path is None:
            problems.append("val_grader_modes: needs reward_fn_path (the suite's reward function reads them)")
        if not isinstance(self.lr_warmup_steps, int) or self.lr_warmup_steps < 0:
            problems.append(f"lr_warmup_steps: must be an integer >= 0 (0: no warmup), got {self.lr_warmup_steps!r}")
        if not isinstance(self.val_every, int) or self.val_every < 0:
            problems.append(f"val_every: must be an integer >= 0 (0: no held-out measurement), got {self.val_every!r}")
        if not isinstance(self.val_k, int) or self.val_k < 1:
            problems.append(f"val_k: must be an integer >= 1, got {self.val_k!r}")
        if not isinstance(self.total_epochs, int) or self.total_epochs < 1:
            problems.append(f"total_epochs: must be an integer >= 1, got {self.total_epochs!r}")
        if (
            isinstance(self.prompts_per_step, int)
            and isinstance(self.updates_per_step, int)
            and self.updates_per_step >= 1
            and self.prompts_per_step % self.updates_per_step
        ):
            problems.append(
                f"updates_per_step: prompts_per_step ({self.prompts_per_step}) must be a multiple of "
                f"updates_per_step ({self.updates_per_step}): verl counts a mini-batch in prompts"
            )
        return problems

    @property
    def run_name(self) -> str:
        if self.experiment_name:
            return self.experiment_name
        return f"{os.path.basename(self.model.rstrip('/'))}-{self.method}-seed{self.seed}"

    @classmethod
    def from_mapping(cls, spec: Mapping[str, Any], what: str = "verl run key") -> VerlRun:
        """A validated VerlRun from field values (a run's spec, e.g. YAML or JSON); ValueError naming the key for an
        unknown name (with a did-you-mean hint), a wrong type or a value out of range."""
        run = cls(**check_fields(spec, cls, what))
        run.validate()
        return run


def read_spec(path: str | os.PathLike) -> VerlRun:
    """The run a spec file describes, validated (`bandpo.core.files.read_spec`); ValueError naming the file and
    field."""
    return files.read_spec(path, VerlRun.from_mapping)
