"""A run's curves in the experiment trackers users already open: each step's metrics line of ``metrics.jsonl`` also
written as TensorBoard event files or to MLflow's local store, as the run's setting ``trackers`` asks
(`bandpo.core.protocol.Protocol.trackers`: ``tensorboard``, ``mlflow``; [] by default: none).

    <run>/tensorboard/   TensorBoard event files: ``tensorboard --logdir <run>/tensorboard`` (or a parent folder)
    <run>/mlruns/        MLflow's local store, experiment ``bandpo-bench``, one run named <model>-<method>-seed<seed>:
                         ``mlflow ui --backend-store-uri <run>/mlruns``

Every numeric field of a metrics line is a scalar of the same name at ``global_step`` = the line's ``step`` (1 for
the first step: the number of steps done, as verl's ``global_steps``); MLflow keys keep the characters it allows
(others become ``_``). verl's runs write the same trackers through its own ``trainer.logger``
(`bandpo.verl.command`), into the same folders of the run.

Crash safety: `Checkpoint.resume` (`bandpo.train.runfiles`) opens the trackers with the metrics of the steps
before the resumed one (the checkpoint's), after removing what an earlier process of the run wrote there, so that a
resumed run's trackers hold each step once, with the values of its metrics.jsonl, and never the steps a killed
process logged past its last checkpoint. The events of those steps are rewritten at resume, with the resume's wall
time.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

TENSORBOARD_DIR = "tensorboard"
MLFLOW_DIR = "mlruns"
EXPERIMENT = "bandpo-bench"  # MLflow's experiment: verl's project_name of a run (bandpo.verl.spec.VerlRun)
_MLFLOW_BAD = re.compile(r"[^\w./\- :]")  # the characters MLflow does not allow in a metric key


def scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numeric fields of a metrics line but ``step``, as floats (bools as 0 / 1; NaN kept: the trackers show
    a gap)."""
    return {k: float(v) for k, v in metrics.items() if k != "step" and isinstance(v, (int, float))}


class _TensorBoard:
    """Event files in ``<run>/tensorboard`` (torch's ``SummaryWriter``), flushed after every step."""

    def __init__(self, out: Path, run_name: str, config: Mapping[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        folder = out / TENSORBOARD_DIR
        shutil.rmtree(folder, ignore_errors=True)  # an earlier process's events: rewritten from the history
        self.writer = SummaryWriter(log_dir=str(folder))

    def log(self, step: int, values: Mapping[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class _MLflow:
    """One run in MLflow's local store ``<run>/mlruns`` (experiment ``bandpo-bench``), the run's settings as its
    parameters."""

    def __init__(self, out: Path, run_name: str, config: Mapping[str, Any]) -> None:
        try:
            from mlflow.entities import Param
            from mlflow.tracking import MlflowClient
        except ImportError as e:
            raise RuntimeError(f"trackers: mlflow needs the mlflow package (pip install mlflow): {e}") from None
        folder = out / MLFLOW_DIR
        shutil.rmtree(folder, ignore_errors=True)  # an earlier process's run: rewritten from the history
        self.client = MlflowClient(tracking_uri=folder.resolve().as_uri())
        experiment = self.client.create_experiment(EXPERIMENT)
        self.run_id = self.client.create_run(experiment, run_name=run_name).info.run_id
        params = [Param(k, str(v)[:500]) for k, v in sorted(config.items())]
        if params:
            self.client.log_batch(self.run_id, params=params)

    def log(self, step: int, values: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        metrics = [Metric(_MLFLOW_BAD.sub("_", k), v, stamp, step) for k, v in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


_WRITERS = {"tensorboard": _TensorBoard, "mlflow": _MLflow}


class Trackers:
    """The trackers ``names`` of the run in ``out``, opened with the metrics of its steps so far (``history``):
    `log` writes one step's metrics line to each; `close` ends them. No names: nothing is opened or written."""

    def __init__(self, out: Path, names: Sequence[str], run_name: str, config: Mapping[str, Any],
                 history: Iterable[Mapping[str, Any]] = ()) -> None:  # fmt: skip
        unknown = [n for n in names if n not in _WRITERS]
        if unknown:
            raise ValueError(f"trackers: unknown tracker(s) {unknown}; valid: {', '.join(_WRITERS)}")
        self.writers = []
        try:
            for name in names:
                self.writers.append(_WRITERS[name](out, run_name, config))
            for metrics in history:
                self.log(metrics)
        except BaseException:
            self.close()
            raise

    def log(self, metrics: Mapping[str, Any]) -> None:
        """One step's metrics line, at ``global_step = metrics["step"]``."""
        if not self.writers:
            return
        step, values = int(metrics["step"]), scalars(metrics)
        for writer in self.writers:
            writer.log(step, values)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()
        self.writers = []
