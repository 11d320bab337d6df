"""A job's deterministic error, printed once and not run again by Snakemake's retries.

Snakemake's ``retries`` (profiles/default/config.yaml) starts every failed job again, whatever the cause: right for a
job that was killed (SIGKILL, the OOM killer, a lost node: a training run resumes from its checkpoint), pointless
for an error that its inputs give every time (bounds that break lower <= 1 <= upper, a missing file, a module that
is not installed), which it printed once per attempt, traceback included. Its retries are one number per rule, blind
to the cause, so the job tells the two apart itself: `run_job` runs a job's ``main``; under Snakemake
(``$BANDPO_SNAKEMAKE_RUN``, set by the Snakefile for each ``snakemake`` command) an exception of a deterministic kind
(`deterministic`) ends the job with one line, ``PROG: error: TYPE: MESSAGE (TYPE raised at FILE:LINE)``, and a
marker under ``.snakemake/bandpo-failed/RUN/``, keyed by the job's working folder and command line. The retries of the
same command find the marker and end at once, without running the job again, with one line that points at the first
attempt's (``PROG: not run again: ...``); the next ``snakemake`` command runs the job again. A killed job raises
nothing, and an error of the machine (an ``OSError`` of the disk or the network, ``MemoryError``, a ``RuntimeError``
such as a device out of memory) is not deterministic: both are retried as before. Outside Snakemake a job's error is
Python's traceback, as it always was, but for a `JobError`, whose message says all a user needs: one line there too
(``PROG: error: MESSAGE``), and deterministic unless an error of the machine caused it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

RUN_ENV = "BANDPO_SNAKEMAKE_RUN"  # one value per snakemake command (the Snakefile); absent outside Snakemake
MARKERS = Path(".snakemake", "bandpo-failed")  # relative to the job's working folder: Snakemake's workdir


class JobError(Exception):
    """An error of a job whose message names what is wrong and where (a config key, a file): printed as one line, in
    or outside Snakemake, never a traceback (e.g. `bandpo.train.trackers.TrackerError`)."""


# Errors that the same inputs give again: a bad value or type, a missing key, file or module, an unsupported case.
DETERMINISTIC = (JobError, ValueError, TypeError, LookupError, ImportError, NotImplementedError, FileNotFoundError,
                 NotADirectoryError, IsADirectoryError)  # fmt: skip
_PATH_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError)


def deterministic(exc: BaseException) -> bool:
    """Whether ``exc`` would happen again on the same inputs: of a `DETERMINISTIC` kind and not raised while handling
    an error of the machine (an ``OSError`` other than a missing path, a ``MemoryError``: a hub client's "not found"
    after a dropped connection is a network error)."""
    if not isinstance(exc, DETERMINISTIC):
        return False
    cause = exc.__cause__ or exc.__context__
    while cause is not None:
        if isinstance(cause, MemoryError) or (isinstance(cause, OSError) and not isinstance(cause, _PATH_ERRORS)):
            return False
        cause = cause.__cause__ or cause.__context__
    return True


def _where(exc: BaseException) -> str:
    """FILE:LINE of the frame that raised ``exc`` (relative to the working folder when inside it)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    rel = os.path.relpath(frames[-1].filename)
    return f"{frames[-1].filename if rel.startswith('..') else rel}:{frames[-1].lineno}"


def _marker(run: str) -> Path:
    """This job's marker in the snakemake command ``run``: keyed by its working folder and command line."""
    key = hashlib.sha256(json.dumps([os.getcwd(), sys.argv]).encode()).hexdigest()[:32]
    return MARKERS / run / key


def run_job(main: Callable[[], int | None], prog: str) -> int | None:
    """``main()``'s exit code; a `JobError` is one line on stderr and SystemExit(1); under Snakemake so is any
    deterministic error, and a job that failed so before in the same snakemake command ends at once (the module's
    docstring)."""
    run = os.environ.get(RUN_ENV)
    marker = _marker(run) if run else None
    if marker is not None and marker.is_file():
        print(f"{prog}: not run again: its first attempt in this snakemake command failed with a deterministic error, "
              f"printed there ({marker.read_text(encoding='utf-8').strip()})", file=sys.stderr)  # fmt: skip
        raise SystemExit(1)
    try:
        return main()
    except Exception as exc:
        again = not deterministic(exc)
        if not isinstance(exc, JobError) and (marker is None or again):
            raise
        where = f"{type(exc).__name__} raised at {_where(exc)}"
        said = " ".join(str(exc).split())
        print(f"{prog}: error: {said if isinstance(exc, JobError) else f'{type(exc).__name__}: {said} ({where})'}",
              file=sys.stderr)  # fmt: skip
        if marker is not None and not again:
            for other in marker.parent.parent.glob("*"):  # the markers of earlier snakemake commands: done with
                if other.name != run:
                    shutil.rmtree(other, ignore_errors=True)
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(where + "\n", encoding="utf-8")
        raise SystemExit(1) from None
