"""What a local training run reads and writes, apart from the algorithm (`bandpo.train.loop`): its training and probe
rows, its policy, its crash-safety checkpoint and its published outputs.

Crash safety: metrics go to ``metrics.jsonl.partial`` (and to the run's experiment trackers, if any:
`bandpo.train.trackers`) and are renamed at the end; checkpoints (model, optimizer,
RNG states, step, the metrics so far) are written through `bandpo.core.files.atomic_write_bytes` (a temporary file,
then a rename), and a run started again with the same settings resumes from the last one (`Checkpoint.resume`; a
checkpoint of other settings is refused). Outputs, in order (`publish`): ``model/`` (save_pretrained, renamed into
place), ``metrics.jsonl``, ``run.json``: ``run.json`` existing means the run is done.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import random
import shutil
from pathlib import Path

import torch

from bandpo import methods
from bandpo.core.files import atomic_write_bytes, atomic_write_text, read_jsonl, replace_dir
from bandpo.core.provenance import machine, versions
from bandpo.grader import grader_info, slowest_verdict
from bandpo.runtime.fastlm import light_loadable, load_light
from bandpo.train.settings import TrainConfig
from bandpo.train.trackers import Trackers

VAL_SPLIT = "validation.jsonl"  # where probe_every and val_every measure: never the test split lm-eval scores


# ----------------------------------------------------------------------------------------------------------------
# Rows and policy


def load_rows(path: str | os.PathLike) -> list[dict]:
    """The training rows (``prompt``, ``answer``) of a data folder's train.jsonl or a JSONL file; ValueError naming
    the file and row when one is malformed."""
    path = Path(path)
    if path.is_dir():
        path = path / "train.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"training data not found: {path}")
    rows = read_jsonl(path)
    for i, row in enumerate(rows, 1):
        if not isinstance(row.get("prompt"), str) or "answer" not in row:
            raise ValueError(f"{path}: row {i}: a row needs a string 'prompt' and an 'answer'")
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def _validation_split(cfg: TrainConfig, setting: str, hint: str) -> Path:
    """The validation split beside the training data; FileNotFoundError naming ``setting`` (who asks) when absent."""
    path = (Path(cfg.data) if Path(cfg.data).is_dir() else Path(cfg.data).parent) / VAL_SPLIT
    if not path.is_file():
        raise FileNotFoundError(f"{setting}: {path} not found ({hint})")
    return path


def load_val_rows(cfg: TrainConfig) -> list[dict]:
    """The validation rows measured every ``val_every`` steps (the split beside the training data, checked as
    `load_rows` checks training rows); [] when off."""
    if not cfg.val_every:
        return []
    return load_rows(_validation_split(cfg, "val_every", "a data folder with a validation split: bandpo.data"))


def load_probe_rows(cfg: TrainConfig) -> list[dict]:
    """The probe rows measured every ``probe_every`` steps: the ``subset == "probe"`` rows of the validation split
    beside the training data; [] when probing is off. ValueError naming the file when there are none."""
    if not cfg.probe_every:
        return []
    path = _validation_split(cfg, "probe_every", "a probe data set: bandpo.data.tiny_math tiny-math --probe")
    rows = [r for r in read_jsonl(path) if r.get("subset") == "probe"]
    if not rows:
        raise ValueError(f"probe_every: {VAL_SPLIT} has no rows with subset 'probe' (not a probe data set?)")
    return rows


def load_policy(model_dir: str, device: torch.device):
    """(model, tokenizer) in float32 on ``device``. The suite's tiny models (`bandpo.runtime.fastlm.light_loadable`)
    load without transformers' model classes (`bandpo.runtime.fastlm.load_light`: the same weights, layout and saved
    files, computed by `bandpo.runtime.fastlm.FastLlama`); any other model through transformers' Auto classes."""
    if light_loadable(model_dir):
        model, tokenizer = load_light(model_dir)
        return model.to(device), tokenizer
    # deferred: importing transformers' model classes costs a job about 4 CPU-seconds, which a tiny model never needs
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device), tokenizer


# ----------------------------------------------------------------------------------------------------------------
# Checkpoint


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Checkpoint:
    """The crash-safety state of a run in ``out``: ``checkpoint/ckpt.pt`` (model, optimizer, RNG states, step, the
    metrics so far, and the settings' `TrainConfig.identity`) and ``metrics.jsonl.partial`` (one line per step),
    each line also written to the run's experiment trackers (``cfg.trackers``, `bandpo.train.trackers`)."""

    def __init__(self, out: Path, identity: str, cfg: TrainConfig | None = None) -> None:
        self.out, self.identity = out, identity
        self.path = out / "checkpoint" / "ckpt.pt"
        self.partial_metrics = out / "metrics.jsonl.partial"
        self._metrics_file = None
        self._cfg = cfg
        self.trackers: Trackers | None = None

    def resume(self, model, optimizer, device: torch.device) -> tuple[int, list[dict]]:
        """(the step to start at, the metrics of the steps before it): from the checkpoint, if there is one (model,
        optimizer and RNG states restored), else (0, []); the partial metrics file rewritten to match, then opened
        for the steps to come, and the trackers rebuilt from the same metrics (`bandpo.train.trackers`: a resumed
        run's trackers hold each step once)."""
        start_step, history = 0, []
        if self.path.is_file():
            ckpt = torch.load(self.path, map_location=device, weights_only=False)
            if ckpt["identity"] != self.identity:
                raise RuntimeError(
                    f"{self.path} belongs to a different run configuration; remove {self.out} to start over"
                )
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            set_rng_state(ckpt["rng"])
            start_step, history = ckpt["step"], ckpt["metrics"]
        atomic_write_text(self.partial_metrics, "".join(json.dumps(m) + "\n" for m in history))
        self._metrics_file = open(self.partial_metrics, "a", encoding="utf-8")
        cfg = self._cfg
        if cfg is not None and cfg.trackers:
            run_name = f"{Path(cfg.model.rstrip('/')).name}-{cfg.method}-seed{cfg.seed}"  # verl's experiment_name
            self.trackers = Trackers(self.out, cfg.trackers, run_name, dataclasses.asdict(cfg), history)
        return start_step, history

    def log(self, metrics: dict) -> None:
        """One step's metrics line, flushed; and to the trackers."""
        self._metrics_file.write(json.dumps(metrics) + "\n")
        self._metrics_file.flush()
        if self.trackers is not None:
            self.trackers.log(metrics)

    def save(self, step: int, model, optimizer, history: list[dict]) -> None:
        """The state after ``step`` steps: ``torch.save`` into memory, then one atomic write (a crash leaves the old
        checkpoint)."""
        state = {"identity": self.identity, "step": step, "model": model.state_dict(),
                 "optimizer": optimizer.state_dict(), "rng": rng_state(), "metrics": history}  # fmt: skip
        buffer = io.BytesIO()
        torch.save(state, buffer)
        atomic_write_bytes(self.path, buffer.getvalue())

    def close(self) -> None:
        if self._metrics_file is not None:
            self._metrics_file.close()
        if self.trackers is not None:
            self.trackers.close()


# ----------------------------------------------------------------------------------------------------------------
# Publication


def publish(cfg: TrainConfig, run, checkpoint: Checkpoint, history: list[dict], start_step: int,
            process_seconds: float) -> dict:  # fmt: skip
    """The finished run's outputs, in order: ``model/`` (renamed into place), ``metrics.jsonl``, then ``run.json``
    (the resolved config, the method's label and parameters, timings, versions, machine); the checkpoint removed
    unless ``keep_checkpoint``. Returns run.json's content. ``run``: the loop's `bandpo.train.loop.Run`."""
    out = Path(cfg.out)
    tmp_model = out / "model.tmp"
    shutil.rmtree(tmp_model, ignore_errors=True)
    run.model.save_pretrained(tmp_model)
    run.tokenizer.save_pretrained(tmp_model)
    replace_dir(tmp_model, out / "model")
    os.replace(checkpoint.partial_metrics, out / "metrics.jsonl")
    summary = {
        "config": dataclasses.asdict(cfg),
        "method": run.method.name,
        "method_label": run.method.label,
        "method_params": run.method.params.to_dict(),
        "method_modules": sorted(methods.loaded_method_modules()),
        # the verdict of this run that took its worker the most CPU seconds, beside its budget (issue #72)
        "grader": {**grader_info(), "slowest_verdict": slowest_verdict()},
        "steps": cfg.steps,
        "resumed_from_step": start_step,
        "process_seconds": process_seconds,
        "train_seconds_total": sum(m["step_seconds"] for m in history),
        "final": {k: history[-1][k] for k in ("reward_mean", "entropy", "response_length")} if history else {},
        "versions": versions("torch", "transformers"),
        "machine": machine(),
        "device": str(run.device),
    }
    atomic_write_text(out / "run.json", json.dumps(summary, indent=2, default=str))
    if not cfg.keep_checkpoint:
        shutil.rmtree(out / "checkpoint", ignore_errors=True)
    return summary
