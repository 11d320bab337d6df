"""One scoring job: `EvalJob`, the checkpoints it scores (`EvalRun`) and how (lm-eval's backend, tasks, batch).

A job of the workflow is one spec file of these fields, written by the run plan (`bandpo.plan.runs`) and read by
``python -m bandpo.score --spec FILE`` (`read_spec`). Imports nothing heavy: the run plan builds every job's spec at
DAG start.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bandpo.core import files

BACKENDS = ("hf", "vllm", "bandpo-tiny")
"""lm-eval's model: hf, vllm, or the suite's own class for its tiny Llamas (`bandpo.score.tiny_lm`)."""


@dataclass
class EvalRun:
    """One checkpoint to score: its model folder, its output folder, the evaluation seed, and where it sits in the
    sweep (``meta``: profile, model, entry, experiment, ..., and ``run_dir`` for a trained run; see
    `bandpo.score.evaluate.run_method`)."""

    model_dir: str
    out_dir: str
    seed: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class EvalJob:
    """Every checkpoint of one scoring job (the seeds of one method entry, say: lm-eval's start-up is paid once per
    job) and the settings they are scored with."""

    runs: list[EvalRun]
    tasks: dict[str, str | None]
    """lm-eval task name (a YAML under ``include_path``) -> its data file (None: the YAML's own)."""
    include_path: str
    """Folder of lm-eval task YAMLs (bandpo/score/lm_eval_tasks)."""
    backend: str = "hf"
    model_args: dict[str, Any] = field(default_factory=dict)
    """lm-eval's model_args (``pretrained`` is set per run; for vllm ``seed`` too)."""
    batch_size: int | str = 1024
    threads: int = 1
    apply_chat_template: bool = False
    bootstrap_iters: int = 1000
    """lm-eval's stderr bootstrap (non-mean metrics)."""
    limit: int | None = None
    """Problems per task (testing only)."""

    def validate(self) -> None:
        problems = []
        if not self.runs:
            problems.append("runs: at least one checkpoint")
        if not self.tasks:
            problems.append("tasks: at least one task")
        if self.backend not in BACKENDS:
            problems.append(f"backend: must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if not isinstance(self.threads, int) or self.threads < 1:
            problems.append(f"threads: must be an integer >= 1, got {self.threads!r}")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            problems.append(f"limit: must be null or an integer >= 1, got {self.limit!r}")
        if problems:
            raise ValueError("invalid scoring job:\n  " + "\n  ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> EvalJob:
        """A validated job from its JSON form; ValueError naming the field."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown scoring job field(s) {unknown}; valid: {', '.join(sorted(known))}")
        try:
            job = cls(**{**values, "runs": [EvalRun(**r) for r in values.get("runs") or []]})
        except TypeError as e:
            raise ValueError(str(e)) from None
        job.validate()
        return job


def read_spec(path: str | os.PathLike) -> EvalJob:
    """The job a spec file describes, validated (`bandpo.core.files.read_spec`); ValueError naming the file."""
    return files.read_spec(path, EvalJob.from_dict)
