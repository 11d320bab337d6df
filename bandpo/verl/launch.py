"""``python -m bandpo.verl.launch --spec FILE [--done FILE]``: one run of verl's trainer, as the workflow's rule
``train_verl`` runs it. The spec file holds the run's `bandpo.verl.spec.VerlRun` fields (JSON, written by the run
plan, `bandpo.plan.runs`); this process checks them and the method, prints the command line
(`bandpo.verl.command`), prepares a resume (`prepare_resume`), runs ``python -m verl.trainer.main_ppo`` under the
run's environment and, when it succeeds, writes ``--done`` (the rule's output: a killed run leaves its checkpoints
and logs in place for the next start). ``--print`` prints the shell line and exits (what would run)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bandpo.core.files import atomic_write_text, read_jsonl
from bandpo.core.protocol import MLFLOW_DIR
from bandpo.verl import command
from bandpo.verl.spec import read_spec

METRICS_LOG = "verl_metrics.jsonl"  # == command.env's VERL_FILE_LOGGER_PATH, in the run's folder
TRACKER = command.CHECKPOINT_TRACKER


def metrics_logs(run_dir: str | os.PathLike) -> list[Path]:
    """verl's JSONL logs of a run, oldest first: one part per earlier start (``verl_metrics.jsonl.<n>``, moved aside
    by `prepare_resume`: verl's file logger truncates its file when it opens it), then the current one."""
    folder = Path(run_dir)
    parts = [p for p in folder.glob(f"{METRICS_LOG}.*") if p.suffix[1:].isdigit()]
    parts.sort(key=lambda p: int(p.suffix[1:]))
    return parts + [p for p in [folder / METRICS_LOG] if p.is_file()]


def prepare_resume(run_dir: str | os.PathLike) -> int | None:
    """Before a start in a run folder that a killed start left: keep what it logged and resume only from a step it
    logged. The current JSONL log moves aside to the next part (`metrics_logs`); a checkpoint whose step no log has
    a record of (verl saves a step's checkpoint before it validates and logs the step: a kill in between) is
    removed and the tracker set back to the previous one (verl's resume_mode auto then repeats that step). Without
    a checkpoint left (with ``max_actor_ckpt_to_keep=1`` verl has removed the previous one by then), the start is a
    fresh one and the earlier logs go. Returns the step verl will resume from, None for a fresh start."""
    folder = Path(run_dir)
    log = folder / METRICS_LOG
    if log.is_file() and log.stat().st_size:
        log.rename(folder / f"{METRICS_LOG}.{len(metrics_logs(folder)) - 1}")  # the parts before it: 0, 1, ...
    ckpts = folder / "checkpoints"
    tracker = ckpts / TRACKER
    if not tracker.is_file():
        return _fresh(folder)
    logged = {rec.get("step") for part in metrics_logs(folder) for rec in read_jsonl(part)}
    # a step's folder whose actor verl removed (max_actor_ckpt_to_keep) holds only the data loader's state
    saved = sorted(int(p.name.removeprefix("global_step_")) for p in ckpts.glob("global_step_*")
                   if p.name.removeprefix("global_step_").isdigit() and (p / "actor").is_dir())  # fmt: skip
    for step in reversed(saved):
        if step in logged:
            atomic_write_text(tracker, f"{step}\n")
            return step
        print(f"removing the checkpoint of step {step}: the killed start logged no metrics for it", flush=True)
        shutil.rmtree(ckpts / f"global_step_{step}")
    tracker.unlink()
    return _fresh(folder)


def _fresh(folder: Path) -> None:
    """A start from step 0: the logs of earlier starts describe steps it redoes, so they go."""
    for part in metrics_logs(folder):
        part.unlink()
    return None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bandpo.verl.launch", description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True, help="the run's spec file (JSON: VerlRun fields)")
    ap.add_argument("--done", help="written when verl's trainer succeeds: its last checkpoint and wall time")
    ap.add_argument("--print", action="store_true", help="print the shell command line and exit")
    args = ap.parse_args(argv)
    try:
        run = read_spec(args.spec)
        line = command.shell_command(run)
    except (ImportError, ValueError) as e:
        ap.error(str(e))
    if args.print:
        print(line, flush=True)
        return 0
    start = prepare_resume(run.output_dir) if os.path.isdir(run.output_dir) else None
    if "mlflow" in run.trackers:  # the folder of the run's SQLite store (command.tracker_env)
        Path(run.output_dir, MLFLOW_DIR).mkdir(parents=True, exist_ok=True)
    print("fresh start" if start is None else f"resuming after step {start}", flush=True)
    argv_verl, env = command.command(run), command.env(run)  # after prepare_resume: val_before_train depends on it
    print(command.shell_command(run), flush=True)
    t0 = time.time()
    # A stopped job stops verl too (and so its Ray workers): SIGTERM / SIGINT are forwarded to it, also one that
    # comes while verl is being started (kept, then sent once it runs).
    child: list[subprocess.Popen] = []
    pending: list[int] = []

    def forward(sig: int, _frame) -> None:
        if child:
            child[0].send_signal(sig)
        else:
            pending.append(sig)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    child.append(subprocess.Popen(argv_verl, env={**os.environ, **env}))
    proc = child[0]
    for sig in pending:
        proc.send_signal(sig)
    rc = proc.wait()
    if rc:
        return rc
    if args.done:
        tracker = Path(run.output_dir, "checkpoints", TRACKER)
        step = int(tracker.read_text().strip()) if tracker.is_file() else None
        done = {"last_checkpoint": step, "resumed_after": start, "wall_seconds": round(time.time() - t0, 1)}
        atomic_write_text(args.done, json.dumps(done) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
