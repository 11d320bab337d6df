"""A run's curves in the experiment trackers users already open: each step's metrics line of ``metrics.jsonl`` also
written as TensorBoard event files or to an MLflow store, as the run's setting ``trackers`` asks
(`bandpo.core.protocol.Protocol.trackers`: ``tensorboard``, ``mlflow``; [] by default: none).

    <run>/tensorboard/       TensorBoard event files: ``tensorboard --logdir <run>/tensorboard`` (or a parent folder)
    <run>/mlruns/mlflow.db   MLflow's SQLite store, experiment ``bandpo-bench``, one run named
                             <model>-<method>-seed<seed> (`mlflow_store`):
                             ``mlflow ui --backend-store-uri sqlite:///<run>/mlruns/mlflow.db``

With ``MLFLOW_TRACKING_URI`` set (MLflow's own variable: a tracking server, a database), the run goes to that store
instead. Either way the run is tagged ``bandpo_run_dir`` = the run's folder (absolute). MLflow 3's file store
(``./mlruns`` folders) is in maintenance mode, refused unless ``MLFLOW_ALLOW_FILE_STORE=true``; the metric names
below work in it too.

Every numeric field of a metrics line is a scalar at ``global_step`` = the line's ``step`` (1 for the first step: the
number of steps done, as verl's ``global_steps``). TensorBoard: the field's name (``clipfrac_upper/p0.0-0.2`` is in
the section ``clipfrac_upper``). MLflow: `mlflow_key`, the name with ``/`` as ``.`` (``clipfrac_upper.p0.0-0.2``):
the file store keeps a name with ``/`` as a path, and ``clipfrac_upper`` is a metric of its own, so it cannot also
be a folder. verl's runs write the same trackers through its own ``trainer.logger`` (`bandpo.verl.command`).

Failures: a tracker that cannot start (its package, its store) is a `TrackerError` before the first step, which
``python -m bandpo.train`` reports in one line; one that fails later is dropped with one warning (the logging
module), and the run goes on: ``metrics.jsonl`` keeps every step.

Crash safety: `Checkpoint.resume` (`bandpo.train.runfiles`) opens the trackers with the metrics of the steps
before the resumed one (the checkpoint's), after removing what an earlier process of the run wrote there (its event
files; its MLflow run, found by its tag, deleted), so that a resumed run's trackers hold each step once, with the
values of its metrics.jsonl, and never the steps a killed process logged past its last checkpoint. The events of
those steps are rewritten at resume, with the resume's wall time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bandpo.core.failures import JobError
from bandpo.core.protocol import MLFLOW_DIR, mlflow_store

TENSORBOARD_DIR = "tensorboard"
EXPERIMENT = "bandpo-bench"  # MLflow's experiment: verl's project_name of a run (bandpo.verl.spec.VerlRun)
RUN_DIR_TAG = "bandpo_run_dir"  # an MLflow run's tag: the run's folder, absolute
# the characters an MLflow metric name may hold in every store and on every system (mlflow.utils.validation:
# letters, digits, "_", "-", ".", " ", "/" and, but on Windows, ":"), less "/" (a path in the file store)
_MLFLOW_BAD = re.compile(r"[^\w.\- ]")

log = logging.getLogger(__name__)


class TrackerError(JobError):
    """A tracker of the run could not start: the run stops before its first step."""


def mlflow_key(name: str) -> str:
    """A metrics field's MLflow name: ``/`` as ``.``, any other character MLflow refuses somewhere as ``_``."""
    return _MLFLOW_BAD.sub("_", name.replace("/", "."))


def scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numeric fields of a metrics line but ``step``, as floats (bools as 0 / 1; NaN kept: the trackers show
    a gap)."""
    return {k: float(v) for k, v in metrics.items() if k != "step" and isinstance(v, (int, float))}


class _TensorBoard:
    """Event files in ``<run>/tensorboard`` (torch's ``SummaryWriter``), flushed after every step."""

    @staticmethod
    def where(out: Path) -> str:
        return str(out / TENSORBOARD_DIR)

    def __init__(self, out: Path, run_name: str, config: Mapping[str, Any]) -> None:
        # lazy, an optional dependency: the tensorboard package (the trackers extra), for this tracker
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
    """One run in MLflow (experiment ``bandpo-bench``), the run's settings as its parameters: in the run's own
    SQLite store (`mlflow_store`), or in the store of ``MLFLOW_TRACKING_URI`` when it is set."""

    @staticmethod
    def where(out: Path) -> str:
        return os.environ.get("MLFLOW_TRACKING_URI") or mlflow_store(out)

    def __init__(self, out: Path, run_name: str, config: Mapping[str, Any]) -> None:
        # lazy, an optional dependency: the mlflow package (the trackers extra), for this tracker
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        run_dir, artifacts = str(out.resolve()), None
        if not os.environ.get("MLFLOW_TRACKING_URI"):  # the run's own store, its artifacts (none logged) beside it
            (out / MLFLOW_DIR).mkdir(parents=True, exist_ok=True)
            artifacts = (out / MLFLOW_DIR).resolve().as_uri()
        self.client = MlflowClient(tracking_uri=self.where(out))
        found = self.client.get_experiment_by_name(EXPERIMENT)
        experiment = found.experiment_id if found else self.client.create_experiment(EXPERIMENT, artifacts)
        # an earlier process's run of this folder: deleted (MLflow's deleted state; `mlflow gc` purges it)
        for earlier in self.client.search_runs([experiment], filter_string=f"tags.`{RUN_DIR_TAG}` = '{run_dir}'"):
            self.client.delete_run(earlier.info.run_id)
        self.run_id = self.client.create_run(experiment, run_name=run_name, tags={RUN_DIR_TAG: run_dir}).info.run_id
        params = [Param(k, str(v)[:500]) for k, v in sorted(config.items())]
        if params:
            self.client.log_batch(self.run_id, params=params)

    def log(self, step: int, values: Mapping[str, float]) -> None:
        from mlflow.entities import Metric  # lazy, an optional dependency: mlflow (see __init__)

        stamp = int(time.time() * 1000)
        metrics = [Metric(mlflow_key(k), v, stamp, step) for k, v in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


_WRITERS = {"tensorboard": _TensorBoard, "mlflow": _MLflow}


def _first_line(e: BaseException) -> str:
    """An exception in one line: its type and the first line of its message."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


class Trackers:
    """The trackers ``names`` of the run in ``out``, opened with the metrics of its steps so far (``history``):
    `log` writes one step's metrics line to each; `close` ends them. No names: nothing is opened or written.

    A tracker that cannot start or take the history is a `TrackerError` (the others closed); one that fails in
    `log` or `close` is dropped with one warning, and the others go on."""

    def __init__(self, out: Path, names: Sequence[str], run_name: str, config: Mapping[str, Any],
                 history: Iterable[Mapping[str, Any]] = ()) -> None:  # fmt: skip
        unknown = [n for n in names if n not in _WRITERS]
        if unknown:
            raise ValueError(f"trackers: unknown tracker(s) {unknown}; valid: {', '.join(_WRITERS)}")
        self.writers: dict[str, Any] = {}
        name = ""
        try:
            for name in names:
                self.writers[name] = _WRITERS[name](out, run_name, config)
            for metrics in history:
                step, values = int(metrics["step"]), scalars(metrics)
                for name in self.writers:  # the one that fails is named below
                    self.writers[name].log(step, values)
        except Exception as e:
            self.close()
            raise TrackerError(f"trackers: {name} could not start ({_WRITERS[name].where(out)}), so the run stops "
                               f"before training: {_first_line(e)}") from e  # fmt: skip

    def log(self, metrics: Mapping[str, Any]) -> None:
        """One step's metrics line, at ``global_step = metrics["step"]``."""
        if not self.writers:
            return
        step, values = int(metrics["step"]), scalars(metrics)
        for name, writer in list(self.writers.items()):
            try:
                writer.log(step, values)
            except Exception as e:
                del self.writers[name]
                log.warning("trackers: %s failed at step %d and is off for the rest of the run (metrics.jsonl "
                            "keeps every step): %s", name, step, _first_line(e))  # fmt: skip
                with contextlib.suppress(Exception):  # a failed tracker's close may fail too: warned once above
                    writer.close()

    def close(self) -> None:
        for name, writer in self.writers.items():
            try:
                writer.close()
            except Exception as e:
                log.warning("trackers: %s failed to close: %s", name, _first_line(e))
        self.writers = {}
